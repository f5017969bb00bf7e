/* A client (worker): routes rows by the partition book, touches its own
 * machine's shard directly and talks to remote servers through the engine.
 * The application thread builds requests and waits; the engine's progress
 * task completes them. The two meet under cli->mu. */
#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/regcache.h"
#include "nic/nic.h"
#include "port/trace.h"
#include "store/cluster.h"
#include "store/stats.h"
#include "store/pull_handlers.h"
#include "store/server_int.h"
#include "util/util.h"

_Static_assert(RKV_CLIENT_OBSERVER == RKV_ID_NONE, "an observer's id is the unassigned one");

/* One message waiting for its reply. */
struct cli_req {
    struct cli_req *next, *prev; /* the client's list, newest first */
    /* Its server's list (srv->reqs): a lost connection fails that server's
     * requests without walking every request of the client. Worker 0's
     * SHUTDOWN to each of 16,384 servers walked the other 16,383 as each
     * server went (4.7 % of a 65,536-node twin run). */
    struct cli_req *snext, *sprev;
    uint64_t id;
    struct cli_server *srv;
    int expect; /* reply type */
    int done;
    int status;
    /* Why it failed, as its server or this client said (NULL: none). Made
     * when it fails: inline, 257 bytes, it made up most of every request. */
    char *text;
    uint32_t u32;         /* HELLO: client id; INIT: tensor id */
    struct rkv_tensor *t; /* META: filled by the reply */
    uint8_t *out;         /* PULL: the caller's rows */
    const uint32_t *pos;  /* PULL: out row index of each requested row */
    uint32_t count;
    size_t row_bytes;
    /* Zero copy: the NIC reads (push) or writes (pull) the caller's rows
     * until this request is answered or its connection closed. */
    int zc;
    /* Its server's counters (rkv_client_peer_stats): when it was sent, and
     * the rows and row bytes it moves (push, pull). */
    uint64_t sent_ns;
    uint64_t st_rows, st_bytes;
};

/* User registrations kept (rkv_client_register): bounds of the cache. */
#define CLI_REG_MAX_ENTRIES 64u
#define CLI_REG_MAX_BYTES (4ull << 30)
/* A zero-copy part costs one write per run of consecutive rows in the
 * caller's buffer: below this average run, copying is cheaper. */
#define CLI_ZC_MIN_RUN_BYTES 4096u
/* One write's length is 32 bits at the NIC seam. */
#define CLI_ZC_MAX_PIECE_BYTES (1u << 30)

struct cli_pin {
    uint32_t srv;
    uint32_t n;
};

struct cli_server {
    struct rkv_peer *peer;
    uint32_t id, machine;
    /* Its host: the configured machine's (in the cluster table, which
     * outlives the client), or own_host, from server 0's address table. */
    const char *host;
    char *own_host;
    uint16_t port;
    int dead;
    /* The last connection to it failed (the application thread's): a call
     * goes to a sibling of its machine that is not (cli_pick_any). */
    int unreachable;
    struct cli_req *reqs; /* its requests not yet released, newest first */
    /* Where this server writes pull replies. A pull sends at most one
     * request per server, so one slot per server serves every tensor. */
    struct rkv_slot_desc pslot;
    int has_pslot;
    /* We closed the connection after a zero-copy request went unanswered
     * (the only way to be sure it no longer touches the caller's memory):
     * the next request connects again. */
    int redial;
    /* It said it exits (its shutdown notice, cli_on_stop_notice): its
     * connection's end is that, not a death. Under cli->mu. */
    int stopped;
    /* Counters of the requests to this server, kept from the first
     * connection on (counted; a client that talks to a few of a thousand
     * servers keeps a few); per operation, each made with the first request
     * of its kind (a worker of a large cluster pushes and pulls to most of
     * its servers, nothing else: 376 bytes each); none with
     * cfg.no_peer_stats. Under cli->mu, as the progress task counts
     * replies. */
    struct rkv_op_stats *st[RKV_STATS_OPS];
    int counted;
};

/* A refused call's message, kept for the task it refused (rkv_client_errmsg). */
#define CLI_REFUSALS 16
struct cli_refusal {
    uint64_t task; /* 0: free */
    char err[256];
};

#define CLI_CANCEL_INTR 1
#define CLI_CANCEL_SRV0 2

struct rkv_client {
    /* How long an INIT phase may take (cli_init_wait_ms): the call in
     * progress's, set before its first phase. */
    uint64_t init_wait_ms;
    /* The running init_data's tensor was made by the cluster before (server
     * 0 committed it): its INITs say so (proto.h), and a durable machine
     * without it lost its files rather than never had it. */
    int init_committed;
    struct rkv_config cfg;
    /* Drawn at the first HELLO and sent in every one: server 0 lets a
     * client re-join under its id only with the nonce it first joined with. */
    uint64_t hello_nonce;
    /* Replies from a server other than the one asked (cli_on_msg). */
    struct rkv_ratelim lim_foreign;
    /* cfg.machines and what is derived from it: the config's shared one,
     * or own_cl (cluster.h). fp: the cluster's fingerprint, computed once. */
    const struct rkv_cluster *cl;
    struct rkv_cluster *own_cl;
    uint64_t fp;
    struct rkv_port *port;
    struct rkv_nic *nic;
    int own_port_nic;
    struct rkv_engine *eng;
    struct rkv_mutex *mu;
    struct rkv_cond *cv;
    uint32_t id;
    uint32_t n_servers;
    /* Server id -> its struct cli_server, made on first use (cli_srv): a
     * client of a large cluster talks to few of its servers. Entries never
     * move or go before the client does. srv0: server 0's, made at create. */
    struct rkv_idmap srvs;
    struct cli_server *srv0;
    struct rkv_tensor_table tensors;
    uint32_t max_tensor; /* highest id in tensors: every push and pull looks up by name */
    /* Custom push and pull handlers: NULL until one is registered. */
    struct rkv_handler_table *ht;
    struct rkv_pull_table *pt;
    struct cli_req *reqs;
    struct rkv_ptrmap req_by_id; /* the newest request of each id */
    /* Request ids: a random tag per client incarnation in the top bits, a
     * counter below (RKV_SEQ_TAG_SHIFT). A push's id is its sequence, the
     * key servers deduplicate retries by, so it is unique across restarts
     * of this client id and increasing within one. */
    uint64_t next_req;
    int stopping; /* servers were asked to exit: their hang-ups are expected */
    /* Another client asked the servers to exit: the first shutdown notice's
     * text (a server's ERROR of request id 0, cli_on_stop_notice), and
     * whether server 0 sent one (then every call is refused as after this
     * client's own shutdown). stop_text under mu; told_stop is read
     * without it by every call's check (cli_check_open, the data path),
     * set under it after stop_text. */
    char *stop_text;
    atomic_int told_stop;
    /* Barriers this client completed: the next BARRIER carries it + 1, so
     * that a restarted server 0 tells a retry from the next barrier. */
    uint32_t barriers;
    int dynamic; /* some servers' addresses come from server 0's table */
    /* While retrying: how long a connect may keep trying (0: the config's
     * connect_retry_ms). Only the application thread touches it. */
    uint32_t connect_budget_ms;
    /* cli_group's arrays, kept from call to call (grown, never shrunk) so a
     * push or pull allocates nothing; the application thread's. A call
     * touches at most min(ids, machines) machines: the per-call arrays
     * below are sized by that, not by the cluster. */
    uint32_t *grp_order, *grp_start, *grp_gm; /* grp_cap (+ 1 for start) entries */
    uint64_t *grp_key;
    size_t grp_cap;
    struct rkv_client_zc_stats zst;
    /* Counters per call (rkv_client_stats): the application thread's.
     * call_sample: pushes and pulls begun per op, which picks the ones a
     * call that sends nothing times (RKV_STATS_SAMPLE); call_sent and
     * call_sent_ns: the untimed call under way sent a request, and when
     * its first went (cli_call_sent). */
    struct rkv_op_stats ops[RKV_STATS_OPS];
    uint32_t call_sample[RKV_STATS_OPS];
    int call_sent;
    uint64_t call_sent_ns;
    /* Pushes in flight (rkv_client_push_async), and per machine the server
     * they went to and how many are out: calls to that machine go to the
     * same server while any is, so per-QP order keeps pushes to one row
     * applied in issue order and visible to later pulls (servers of one
     * machine do not order each other's work). */
    struct rkv_pending *pending;
    /* The oldest of them: rkv_client_wait finds its handle searching from
     * both ends, in one step for waits in issue order or in reverse. */
    struct rkv_pending *pending_tail;
    /* The oldest push in flight not yet seen answered, and the requests of
     * those that may not be (each counted until seen answered or waited
     * for): push_async bounds them (cli_async_room). */
    struct rkv_pending *pending_open;
    uint64_t async_reqs;
    struct rkv_idmap pins; /* machine -> server id << 32 | pushes out (struct cli_pin) */
    /* rkv_client_create_observer: holds no worker slot, reads the catalogue
     * only (LIST, META to server 0). */
    int observer;
    /* Pushes applied in place into this machine's shared memory since the
     * last barrier (cli_push_local): the next barrier first checks that a
     * server of the machine still serves them (cli_local_served). */
    int local_writes;
    /* A push's or pull's requests and lost counts, and the servers
     * cli_abandon_slots drops: grp_cap entries each, grown with the
     * grouping arrays (a call allocates nothing once they are large enough,
     * and the twin's actor stacks stay small). The application thread's,
     * one call at a time. */
    struct cli_req **call_reqs;
    uint64_t *call_lost;
    struct cli_server **drop_srv;
    int *drop_unanswered;
    /* An application call is under way (cli_enter). */
    atomic_int busy;
    /* rkv_client_interrupt's: waits end at once while set (any thread). */
    atomic_int interrupted;
    /* What ends a connect's retries (cli_connect): CLI_CANCEL_INTR while
     * interrupted, CLI_CANCEL_SRV0 once server 0's connection is lost
     * without retry_ms (it stays lost, and the cluster with it). */
    atomic_int connect_cancel;
    /* The process that created it (rkv_port_pid): every call compares,
     * and a forked child's are refused (cli_forked). */
    int pid;
    /* The message of the last call that owned the client (cli_enter let it
     * in); a refusal of a call that never did is kept apart (refused_*). */
    char err[512];
    /* A call refused before it owns the client (cli_enter: another call is
     * under way; cli_forked) must not write err: that is the running
     * call's, and rkv.h promises it is unaffected (its caller read the
     * other thread's "in another call" as its own call's reason, 74 of
     * 3,000 failures in an outside tester's run). The refusal is kept
     * here, with the refused task (port task_self), for it alone:
     * rkv_client_errmsg from that task returns it until its next call on
     * the client gets in. Per client rather than thread-local: the twin's
     * nodes share one thread. Each refused task has its own entry (one
     * slot for all had a third thread read a second's refusal, or the
     * client's last message: 13 of 28 refusals with three threads, an
     * outside tester), made on the first refusal; past CLI_REFUSALS tasks
     * refused at once the oldest entry is reused. refused_lock guards the
     * entries. */
    atomic_flag refused_lock;
    _Atomic uint32_t n_refused; /* entries with a task: 0, the usual case */
    uint32_t refused_next;      /* the entry reused next when none is free */
    struct cli_refusal *refused;
    /* A forked child's refusals, kept without refused_lock: another thread
     * of the parent may have held it at the fork, for good in the child. */
    char *forked_err;
};

static uint64_t cli_task(const struct rkv_client *c)
{
    return c->port->ops->task_self ? c->port->ops->task_self(c->port) : 1;
}

static void cli_refused_lock(struct rkv_client *c)
{
    while (atomic_flag_test_and_set_explicit(&c->refused_lock, memory_order_acquire))
        ; /* a vsnprintf long at most */
}

static void cli_refused_unlock(struct rkv_client *c)
{
    atomic_flag_clear_explicit(&c->refused_lock, memory_order_release);
}

/* refused_lock held: the entry of task, or NULL. */
static struct cli_refusal *cli_refusal_of(const struct rkv_client *c, uint64_t task)
{
    for (uint32_t i = 0; c->refused && i < CLI_REFUSALS; i++)
        if (c->refused[i].task == task)
            return &c->refused[i];
    return NULL;
}

static int cli_refuse(struct rkv_client *c, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int cli_refuse(struct rkv_client *c, int rc, const char *fmt, ...)
{
    if (c->pid != rkv_port_pid()) { /* the child's one thread */
        if (!c->forked_err)
            c->forked_err = malloc(256);
        if (c->forked_err) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(c->forked_err, 256, fmt, ap);
            va_end(ap);
        }
        return rc;
    }
    uint64_t me = cli_task(c);
    cli_refused_lock(c);
    if (!c->refused)
        c->refused = calloc(CLI_REFUSALS, sizeof(*c->refused));
    struct cli_refusal *r = cli_refusal_of(c, me);
    if (!r)
        r = cli_refusal_of(c, 0);
    if (!r && c->refused) {
        r = &c->refused[c->refused_next];
        c->refused_next = (c->refused_next + 1) % CLI_REFUSALS;
    }
    if (r) { /* out of memory: the refusal goes unsaid, its code says it */
        if (!r->task)
            atomic_fetch_add(&c->n_refused, 1);
        r->task = me;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->err, sizeof(r->err), fmt, ap);
        va_end(ap);
    }
    cli_refused_unlock(c);
    return rc;
}

/* The calling task's call owns c (or ended): its message is c->err again.
 * A refusal inside the call (a handler the call runs calling the client)
 * is forgotten when the call leaves, as the caller then reads the call's
 * own message. */
static inline void cli_owned(struct rkv_client *c)
{
    /* Every call enters and leaves here: nothing kept is the usual case. */
    if (!atomic_load_explicit(&c->n_refused, memory_order_relaxed))
        return;
    uint64_t me = cli_task(c);
    cli_refused_lock(c);
    struct cli_refusal *r = cli_refusal_of(c, me);
    if (r) {
        r->task = 0;
        atomic_fetch_sub(&c->n_refused, 1);
    }
    cli_refused_unlock(c);
}

static void cli_lock(struct rkv_client *c)
{
    assert(!c->port->ops->mutex_held(c->mu)); /* not recursive: a relock would hang */
    c->port->ops->mutex_lock(c->mu);
}
static void cli_unlock(struct rkv_client *c)
{
    RKV_ASSERT_HELD(c->port, c->mu);
    c->port->ops->mutex_unlock(c->mu);
}

#ifndef NDEBUG /* for assertions only: unused (and warned of by clang) in Release */
/* srv names a server of c's cluster, on its machine (for assertions; any
 * thread: it reads no map). */
static inline int cli_srv_sane(const struct rkv_client *c, const struct cli_server *srv)
{
    return srv && srv->id < c->n_servers && srv->machine < c->cfg.n_machines &&
           rkv_cluster_machine_of(c->cl, srv->id) == srv->machine;
}

/* srv is the state c keeps for its id (for assertions). The application
 * thread's only: cli_srv inserts without the lock, and an insertion may
 * move the map's entries under a reader on the engine's thread. */
static inline int cli_owns_srv(const struct rkv_client *c, const struct cli_server *srv)
{
    if (!cli_srv_sane(c, srv))
        return 0;
    const uint64_t *v = rkv_idmap_find(&c->srvs, srv->id);
    return v && *v == (uintptr_t)srv;
}

/* A request's reply type is a message type the client expects back. */
static inline int cli_expect_ok(int expect)
{
    return expect > 0 && expect < RKV_MSG_TYPE_MAX_ && expect != RKV_MSG_ERROR;
}
#endif

/* Server id's state, made on first use with its configured address. NULL
 * when out of memory (c->err says so). The application thread's: the
 * engine's thread only looks entries up (cli_fetch_table). */
static struct cli_server *cli_srv(struct rkv_client *c, uint32_t id)
{
    assert(id < c->n_servers);
    uint64_t *v = rkv_idmap_find(&c->srvs, id);
    if (v)
        return (struct cli_server *)(uintptr_t)*v;
    struct cli_server *srv = calloc(1, sizeof(*srv));
    if (srv) {
        uint32_t m = rkv_cluster_machine_of(c->cl, id);
        const struct rkv_machine *mc = &c->cl->machines[m];
        uint32_t local = id - rkv_cluster_server_id(c->cl, m, 0);
        *srv = (struct cli_server){
            .id = id, .machine = m, .host = mc->host, .port = (uint16_t)(mc->base_port + local)};
        if ((v = rkv_idmap_get(&c->srvs, id)) != NULL)
            *v = (uintptr_t)srv;
    }
    if (!srv || !v) {
        free(srv);
        rkv_errf(c->err, sizeof(c->err), -RKV_ENOMEM, "out of memory for server %u's state", id);
        return NULL;
    }
    return srv;
}

/* ---- requests ---- */

/* The newest request with this id (the lock held). */
static struct cli_req *cli_req_find(struct rkv_client *c, uint64_t id)
{
    RKV_ASSERT_HELD(c->port, c->mu);
    return rkv_ptrmap_find(&c->req_by_id, id);
}

/* The counters a request of this reply type goes to. */
static int cli_req_stats_op(int expect)
{
    switch (expect) {
    case RKV_MSG_PUSH_ACK:
        return RKV_STATS_PUSH;
    case RKV_MSG_PULL_REPLY:
    case RKV_MSG_PULL_DONE:
        return RKV_STATS_PULL;
    case RKV_MSG_BARRIER_REPLY:
        return RKV_STATS_BARRIER;
    case RKV_MSG_INIT_REPLY:
        return RKV_STATS_INIT;
    default:
        return RKV_STATS_OTHER;
    }
}

/* expect: the reply type that completes the request (or an ERROR). id: 0
 * for a fresh one, or the id (push sequence) of the request this retries.
 * rows and bytes: what the request carries, for the per-server counters;
 * set here, before the request is in the table where the engine's thread
 * can end it (a dead connection fails every request of its server). */
static struct cli_req *cli_req_new(struct rkv_client *c, struct cli_server *srv, int expect,
                                   uint64_t id, uint32_t rows, uint64_t bytes)
{
    assert(cli_owns_srv(c, srv));
    assert(cli_expect_ok(expect));
    int op = cli_req_stats_op(expect);
    /* Made before r is in the table, where the engine's thread counts it. */
    if (!srv->st[op] && !c->cfg.no_peer_stats) {
        struct rkv_op_stats *st = calloc(1, sizeof(*st));
        if (!st)
            return NULL;
        cli_lock(c);
        srv->st[op] = st;
        cli_unlock(c);
    }
    struct cli_req *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->srv = srv;
    r->expect = expect;
    r->st_rows = rows;
    r->st_bytes = bytes;
    r->sent_ns = c->port->ops->now_ns(c->port);
    if (!c->call_sent) { /* the call's counters: it went out, from now */
        c->call_sent = 1;
        c->call_sent_ns = r->sent_ns;
    }
    cli_lock(c);
    r->id = id ? id : ++c->next_req;
    assert(r->id != 0); /* 0 means "a fresh id" to the callers */
    /* A retry reuses its push's id: the earlier request with it (kept until
     * the call ends) is answered, so replies can only match the new one,
     * which cli_req_find meets first. */
    assert(!id || !cli_req_find(c, id) || cli_req_find(c, id)->done);
    if (rkv_ptrmap_put(&c->req_by_id, r->id, r) < 0) {
        cli_unlock(c);
        free(r);
        return NULL;
    }
    r->next = c->reqs;
    if (r->next)
        r->next->prev = r;
    c->reqs = r;
    r->snext = srv->reqs;
    if (r->snext)
        r->snext->sprev = r;
    srv->reqs = r;
    cli_unlock(c);
    return r;
}

static void cli_req_unlink(struct rkv_client *c, struct cli_req *r)
{
    RKV_ASSERT_HELD(c->port, c->mu);
    assert(r->prev ? r->prev->next == r : c->reqs == r); /* in this client's list, once */
    if (r->prev)
        r->prev->next = r->next;
    else
        c->reqs = r->next;
    if (r->next)
        r->next->prev = r->prev;
    r->next = r->prev = NULL;
    assert(r->sprev ? r->sprev->snext == r : r->srv->reqs == r); /* in its server's, once */
    if (r->sprev)
        r->sprev->snext = r->snext;
    else
        r->srv->reqs = r->snext;
    if (r->snext)
        r->snext->sprev = r->sprev;
    r->snext = r->sprev = NULL;
    /* A retry's request took over the id: the one it retried stays out. */
    rkv_ptrmap_del(&c->req_by_id, r->id, r);
}

/* A request ended: answered, failed, or (done = 0) released unanswered,
 * which counts as an error at its age. */
static void cli_req_count(struct rkv_client *c, const struct cli_req *r, int ok)
{
    RKV_ASSERT_HELD(c->port, c->mu);
    if (!r->srv || !r->srv->counted || c->cfg.no_peer_stats)
        return;
    struct rkv_op_stats *st = r->srv->st[cli_req_stats_op(r->expect)];
    assert(st); /* cli_req_new made it */
    uint64_t now = c->port->ops->now_ns(c->port);
    rkv_stats_add(st, now - r->sent_ns, ok, r->st_rows, r->st_bytes);
}

static void cli_req_finish(struct rkv_client *c, struct cli_req *r, int status, const char *text)
{
    RKV_ASSERT_HELD(c->port, c->mu);
    assert(!r->done); /* waiting -> done, once: its waiter reads status after */
    assert(status <= 0);
    /* Per server, a META answered "no such tensor" is an answer (init_data
     * asks one to learn whether its tensor was made before), not a failed
     * request: every passing run's report showed "errors" under server 0. */
    cli_req_count(c, r,
                  status == 0 || (status == -RKV_ENOTENSOR && r->expect == RKV_MSG_META_REPLY));
    r->done = 1;
    r->status = status;
    if (text) /* out of memory: the error's code alone is reported */
        r->text = strndup(text, RKV_PROTO_TEXT_MAX);
    c->port->ops->cond_broadcast(c->cv);
}

/* Frees requests (lock not held). Late replies then find nothing. */
static void cli_release(struct rkv_client *c, struct cli_req **reqs, size_t n)
{
    assert(n == 0 || reqs);
    cli_lock(c);
    for (size_t i = 0; i < n; i++) {
        assert(reqs[i] && cli_owns_srv(c, reqs[i]->srv));
        if (!reqs[i]->done)
            cli_req_count(c, reqs[i], 0);
        cli_req_unlink(c, reqs[i]);
        if (reqs[i]->t) {
            rkv_tensor_free(reqs[i]->t);
            free(reqs[i]->t);
        }
        free(reqs[i]->text);
        free(reqs[i]);
    }
    cli_unlock(c);
}

/* Requests waited for together (rkv_engine_wait's predicate). */
struct cli_wait_set {
    struct rkv_client *c; /* whose lock rkv_engine_wait holds around the predicate */
    struct cli_req **reqs;
    size_t n;
    size_t next; /* reqs before it are done (a request never becomes undone) */
};

/* rkv_engine_wait's predicate: it holds the client's lock around it. */
static int cli_reqs_done(void *arg)
{
    struct cli_wait_set *w = arg;
    RKV_ASSERT_HELD(w->c->port, w->c->mu);
    assert(w->next <= w->n);
    while (w->next < w->n && w->reqs[w->next]->done)
        w->next++;
    return w->next == w->n || atomic_load(&w->c->interrupted);
}

/* Waits for every request in reqs[0..n) or the deadline. Returns the first
 * error (described in c->err). The caller reads results, then releases. */
static int cli_wait_keep(struct rkv_client *c, struct cli_req **reqs, size_t n, uint64_t timeout_ms,
                         const char *what)
{
    uint64_t start = c->port->ops->now_ns(c->port);
    uint64_t deadline = start + timeout_ms * 1000000ull;
    int rc = 0;
    assert(n == 0 || reqs);
    for (size_t i = 0; i < n; i++)
        assert(reqs[i] && reqs[i]->id != 0 && cli_owns_srv(c, reqs[i]->srv));
    cli_lock(c);
    /* The engine's polling policy: busy polling, sleeping, the deadline. */
    struct cli_wait_set w = {.c = c, .reqs = reqs, .n = n};
    (void)rkv_engine_wait(c->eng, cli_reqs_done, &w, c->mu, c->cv, deadline);
    /* Those not done by now are abandoned as at a timeout: interrupted. */
    int cut = atomic_load(&c->interrupted);
    uint64_t waited_ms = (c->port->ops->now_ns(c->port) - start) / 1000000ull;
    for (size_t i = 0; i < n && rc == 0; i++) {
        struct cli_req *r = reqs[i];
        int st = r->done ? r->status : cut ? -RKV_EINTR : -RKV_ETIMEDOUT;
        if (st == 0)
            continue;
        rc = st;
        uint32_t sid = r->srv ? r->srv->id : 0;
        if (r->done && r->text && r->text[0])
            rkv_errf(c->err, sizeof(c->err), st, "%s: server %u: %s", what, sid, r->text);
        else if (r->done) /* "out of memory after 3000 ms" read as a wait that never was */
            rkv_errf(c->err, sizeof(c->err), st, "%s: server %u: %s", what, sid, rkv_strerror(st));
        else
            rkv_errf(c->err, sizeof(c->err), st, "%s: server %u: %s after %llu ms", what, sid,
                     rkv_strerror(st), (unsigned long long)(cut ? waited_ms : timeout_ms));
    }
    cli_unlock(c);
    return rc;
}

static int cli_wait(struct rkv_client *c, struct cli_req **reqs, size_t n, uint64_t timeout_ms,
                    const char *what)
{
    int rc = cli_wait_keep(c, reqs, n, timeout_ms, what);
    cli_release(c, reqs, n);
    return rc;
}

/* ---- engine callbacks (progress task) ---- */

/* A pull reply of another shape than the request's fails it. Rows of
 * another length are almost always a pull handler registered with another
 * out_mult or out_add on the server than on this client ("does not match
 * the request" said neither which nor why). */
static void cli_pull_mismatch(struct rkv_client *c, struct cli_req *r, const struct rkv_msg *m)
{
    char why[RKV_PROTO_TEXT_MAX];
    if (m->h.count != r->count)
        snprintf(why, sizeof(why), "pull reply of %u rows for a request of %u", m->h.count,
                 r->count);
    else
        snprintf(why, sizeof(why),
                 "pull reply rows of %u bytes, this client expects %zu: the pull handler "
                 "replies another length on that server (register it with the same out_mult "
                 "and out_add on servers and clients)",
                 m->h.row_bytes, r->row_bytes);
    cli_req_finish(c, r, -RKV_EPROTO, why);
}

static void cli_on_reply(struct rkv_client *c, struct cli_req *r, const struct rkv_msg *m)
{
    RKV_ASSERT_HELD(c->port, c->mu);
    assert(!r->done && r->id == m->h.req_id && cli_expect_ok(r->expect));
    if (m->h.type != r->expect && m->h.type != RKV_MSG_ERROR)
        return cli_req_finish(c, r, -RKV_EPROTO, "reply of the wrong type");
    /* The hello's answer names the server that gave it: another one at
     * this server's address (one host written two ways in the cluster,
     * "localhost" and "127.0.0.1", on one port) answered as itself, and
     * the call failed on that server's words ("that client id is held by
     * a live connection"; an outside tester). */
    if (r->expect == RKV_MSG_HELLO_REPLY && r->srv && m->h.sender != r->srv->id) {
        /* Or the servers' cluster file is another one: the same machines
         * listed in another order read as this (an outside tester). */
        char why[RKV_PROTO_TEXT_MAX];
        snprintf(why, sizeof(why),
                 "the server at %s:%u answered as server %u, not %u: two machines of the "
                 "cluster name one address (a host written two ways?), or the servers' cluster "
                 "file differs from this client's (machines in another order?)",
                 r->srv->host ? r->srv->host : "?", r->srv->port, m->h.sender, r->srv->id);
        return cli_req_finish(c, r, -RKV_ECONFIG, why);
    }
    switch (m->h.type) {
    case RKV_MSG_HELLO_REPLY: {
        const struct rkv_wire_hello_reply *hr = &m->u.hello_reply;
        r->u32 = hr->client_id;
        /* Both sides post receives of rx_depth x ctrl_buf_bytes and send
         * into the other's: a larger SEND than the peer posted broke the
         * connection at the first message between the two sizes. */
        if (hr->rx_depth != c->cfg.rx_depth || hr->ctrl_buf_bytes != c->cfg.ctrl_buf_bytes) {
            char why[160];
            snprintf(why, sizeof(why),
                     "server uses rx_depth %u and ctrl_buf_bytes %u, this client %u and %u: "
                     "every node needs the same",
                     hr->rx_depth, hr->ctrl_buf_bytes, c->cfg.rx_depth, c->cfg.ctrl_buf_bytes);
            return cli_req_finish(c, r, -RKV_ECONFIG, why);
        }
        if (hr->push_slots < 2)
            return cli_req_finish(c, r, -RKV_EPROTO, "server grants fewer than 2 push slots");
        /* push_slots is the server's grant to each client. */
        if (r->srv && r->srv->peer)
            rkv_engine_peer_grant(c->eng, r->srv->peer, hr->push_slots);
        break;
    }
    case RKV_MSG_INIT_REPLY:
        r->u32 = m->h.tensor_id;
        break;
    case RKV_MSG_META_REPLY: {
        if (m->h.tensor_id == 0 || m->h.tensor_id > RKV_MAX_TENSORS)
            return cli_req_finish(c, r, -RKV_EPROTO, "tensor id out of range");
        struct rkv_tensor *t = calloc(1, sizeof(*t));
        char why[128];
        int rc =
            t ? rkv_tensor_from_wire_local(&m->u.tensor.t, m->u.tensor.book, m->u.tensor.local,
                                           c->cfg.n_machines, m->h.tensor_id, t, why, sizeof(why))
              : -RKV_ENOMEM;
        if (rc < 0) {
            free(t);
            return cli_req_finish(c, r, rc, t ? why : "out of memory");
        }
        r->t = t;
        break;
    }
    case RKV_MSG_TABLE_ENTRY: {
        const struct rkv_wire_addr *a = &m->u.addr;
        if (a->server_id >= c->n_servers || a->cluster != c->fp)
            return cli_req_finish(c, r, -RKV_EPROTO, "address table entry of another cluster");
        /* cli_fetch_table made every server's entry before asking: this
         * thread only looks them up. */
        uint64_t *v = rkv_idmap_find(&c->srvs, a->server_id);
        if (!v)
            return cli_req_finish(c, r, -RKV_EPROTO, "address table entry of an unknown server");
        struct cli_server *srv = (struct cli_server *)(uintptr_t)*v;
        char *host = strndup(a->host, RKV_PROTO_HOST_MAX);
        if (!host)
            return cli_req_finish(c, r, -RKV_ENOMEM, "out of memory for an address table entry");
        free(srv->own_host); /* the application thread waits for this table */
        srv->own_host = host;
        srv->host = host;
        srv->port = (uint16_t)a->port;
        if (++r->count < c->n_servers)
            return; /* more entries of this table to come */
        break;
    }
    case RKV_MSG_LIST_REPLY: {
        /* out: the caller's metas, row_bytes: how many fit; u32: the total. */
        struct rkv_tensor_meta *metas = (struct rkv_tensor_meta *)(void *)r->out;
        for (uint32_t i = 0; i < m->h.count && i < r->row_bytes; i++) {
            struct rkv_wire_tensor w;
            uint32_t id;
            rkv_proto_list_entry(m, i, &w, &id);
            rkv_tensor_meta_from_wire(&w, id, &metas[i]);
        }
        r->u32 = m->h.count;
        break;
    }
    case RKV_MSG_PULL_DONE:
        if (m->h.count != r->count || m->h.row_bytes != r->row_bytes)
            return cli_pull_mismatch(c, r, m);
        break; /* the rows are in place already */
    case RKV_MSG_PULL_REPLY:
        if (m->h.count != r->count || m->h.row_bytes != r->row_bytes)
            return cli_pull_mismatch(c, r, m);
        for (uint32_t i = 0; i < r->count; i++)
            memcpy(r->out + (size_t)r->pos[i] * r->row_bytes, m->u.rows + (size_t)i * r->row_bytes,
                   r->row_bytes);
        break;
    case RKV_MSG_ERROR:
        return cli_req_finish(c, r, m->h.status < 0 ? m->h.status : -RKV_EPROTO, m->u.error.text);
    default:
        break;
    }
    cli_req_finish(c, r, 0, NULL);
}

/* A server's shutdown notice (server.c srv_tell_shutdown): another client
 * asked the servers to exit. Only the server of this connection is taken
 * at its word; server 0's stands for the cluster, whose servers are all
 * asked. A connect under way ends (as when server 0 is lost). */
static void cli_on_stop_notice(struct rkv_client *c, struct cli_server *from, const char *text)
{
    RKV_ASSERT_HELD(c->port, c->mu);
    from->stopped = 1;
    /* The cause alone ("the servers were asked to exit (by client K)"):
     * the notice's "server N is shutting down: " named, in every later
     * refusal, whichever server's notice came first. */
    const char *cause = text, *colon = strstr(text, ": ");
    if (!strncmp(text, "server ", 7) && colon)
        cause = colon + 2;
    if (!c->stop_text)
        c->stop_text = strndup(cause, RKV_PROTO_TEXT_MAX); /* NULL: the code alone */
    if (from == c->srv0) {
        atomic_store(&c->told_stop, 1);
        atomic_fetch_or(&c->connect_cancel, CLI_CANCEL_SRV0);
    }
    RKV_LOGI(c->port, "server %u: %s", from->id, text);
}

/* What a call refused after a shutdown notice says (under mu). */
static const char *cli_stop_text(const struct rkv_client *c)
{
    return c->stop_text ? c->stop_text : "the servers were asked to exit by another client";
}

static void cli_on_msg(void *user, struct rkv_peer *peer, const struct rkv_msg *m)
{
    struct rkv_client *c = user;
    cli_lock(c);
    /* The connection's server (NULL: one left behind by a reconnect); set
     * under the lock (cli_connect, cli_revive). */
    struct cli_server *from = rkv_peer_user(peer);
    if (m->h.req_id == 0 && m->h.type == RKV_MSG_ERROR && m->h.status == -RKV_ESHUTDOWN && from) {
        cli_on_stop_notice(c, from, m->u.error.text);
        cli_unlock(c);
        return;
    }
    struct cli_req *r = cli_req_find(c, m->h.req_id);
    if (r && !r->done && r->srv != from) {
        /* Request ids are one sequence for all servers, so a server can
         * guess the ids of requests sent to others: only the server asked
         * answers. Its connection stays (the answer may be a stale one). */
        char who[48] = "a connection no longer in use";
        if (from)
            snprintf(who, sizeof(who), "server %u", from->id);
        rkv_port_warn_limited(c->port, &c->lim_foreign,
                              "dropping a reply (%s, req %llu) from %s: that request went to "
                              "server %u",
                              rkv_msg_type_name(m->h.type), (unsigned long long)m->h.req_id, who,
                              r->srv->id);
    } else if (r && !r->done)
        cli_on_reply(c, r, m);
    else
        RKV_LOGD(c->port, "dropping a late or unknown %s (req %llu)", rkv_msg_type_name(m->h.type),
                 (unsigned long long)m->h.req_id);
    cli_unlock(c);
}

static void cli_on_peer(void *user, struct rkv_peer *peer, int up)
{
    struct rkv_client *c = user;
    struct cli_server *srv = rkv_peer_user(peer);
    if (up || !srv)
        return;
    assert(cli_srv_sane(c, srv)); /* not cli_owns_srv: this is the engine's thread */
    cli_lock(c);
    srv->dead = 1;
    if (srv == c->srv0 && !c->cfg.retry_ms)
        atomic_fetch_or(&c->connect_cancel, CLI_CANCEL_SRV0);
    uint32_t failed = 0;
    char why[RKV_PROTO_TEXT_MAX];
    if (srv->stopped)
        snprintf(why, sizeof(why), "server %u exited: %s", srv->id, cli_stop_text(c));
    for (struct cli_req *r = srv->reqs; r; r = r->snext)
        if (!r->done) {
            if (srv->stopped)
                cli_req_finish(c, r, -RKV_ESHUTDOWN, why);
            else
                cli_req_finish(c, r, -RKV_EPEERDEAD, "connection lost");
            failed++;
        }
    int expected = c->stopping || srv->stopped;
    cli_unlock(c);
    /* A warning only when it cost a request: an idle connection that ends
     * is also how every other worker sees one worker's
     * rkv_client_shutdown_servers, and 256 workers x 128 servers printed
     * 9,812 such warnings at the clean end of a run. A later call to that
     * server fails naming it. */
    if (expected)
        return;
    if (failed)
        RKV_LOGW(c->port, "lost the connection to server %u (%u request%s failed)", srv->id, failed,
                 failed == 1 ? "" : "s");
    else
        RKV_LOGI(c->port, "lost the connection to server %u (no request was waiting on it)",
                 srv->id);
}

/* ---- sending ---- */

static int cli_dead(struct rkv_client *c, struct cli_server *srv, const char *what)
{
    cli_lock(c);
    int rc = srv->stopped ? rkv_errf(c->err, sizeof(c->err), -RKV_ESHUTDOWN,
                                     "%s: server %u exited: %s", what, srv->id, cli_stop_text(c))
                          : rkv_errf(c->err, sizeof(c->err), -RKV_EPEERDEAD,
                                     "%s: server %u is gone", what, srv->id);
    cli_unlock(c);
    return rc;
}

/* After rkv_client_shutdown_servers nothing serves this client any more;
 * nor after server 0 said another client asked (its shutdown notice). */
static int cli_check_open(struct rkv_client *c, const char *what)
{
    if (c->stopping)
        return rkv_errf(c->err, sizeof(c->err), -RKV_ESHUTDOWN,
                        "%s: the servers were asked to exit (rkv_client_shutdown_servers)", what);
    if (!atomic_load(&c->told_stop)) /* no lock: every push and pull checks */
        return 0;
    cli_lock(c);
    int rc = rkv_errf(c->err, sizeof(c->err), -RKV_ESHUTDOWN, "%s: %s", what, cli_stop_text(c));
    cli_unlock(c);
    return rc;
}

static int cli_hello(struct rkv_client *c, struct cli_server *srv, uint32_t want, uint64_t wait_ms);
static int cli_fetch_table(struct rkv_client *c, uint64_t wait_ms);
static int cli_abandon_slots(struct rkv_client *c, struct cli_req **reqs, size_t n);

static int cli_revive(struct rkv_client *c, struct cli_server *srv, uint64_t remaining_ms);

/* srv->dead, which the progress task sets (cli_on_peer) under the lock. */
static int cli_srv_dead(struct rkv_client *c, const struct cli_server *srv)
{
    cli_lock(c);
    int dead = srv->dead;
    cli_unlock(c);
    return dead;
}

static int cli_srv_redial(struct rkv_client *c, const struct cli_server *srv)
{
    cli_lock(c);
    int redial = srv->redial;
    cli_unlock(c);
    return redial;
}

/* A server is usable unless it died, or we closed it (then: connect again). */
static int cli_alive(struct rkv_client *c, struct cli_server *srv, const char *what)
{
    cli_lock(c);
    int dead = srv->dead, redial = srv->redial;
    cli_unlock(c);
    if (!dead)
        return 0;
    if (!redial)
        return cli_dead(c, srv, what);
    int rc = cli_revive(c, srv, c->cfg.timeout_ms);
    if (rc == 0) {
        cli_lock(c);
        srv->redial = 0;
        cli_unlock(c);
    }
    return rc;
}

/* Servers other than 0 are joined on first use: a worker that talks to a
 * few of a thousand servers holds a few connections, not a thousand. */
static int cli_remap(struct rkv_client *c, int only_moved);

static int cli_ensure(struct rkv_client *c, struct cli_server *srv)
{
    if (c->observer && !srv->peer) /* it joins no server: only server 0's catalogue */
        return rkv_errf(c->err, sizeof(c->err), -RKV_EINVAL,
                        "an observer client talks to server 0 only (list, meta)");
    if (srv->peer)
        return 0;
    int rc = cli_hello(c, srv, c->id, c->cfg.timeout_ms);
    srv->unreachable = rc == -RKV_EPEERDEAD || rc == -RKV_ETIMEDOUT;
    /* A first hello to a server of this machine after a restart replaced
     * its segments (RKV_SHARD_MOVED): the server answers once they are
     * whole, so map them now (cli_local_follow waits on no one else). */
    if (rc == 0 && srv->machine == c->cfg.machine_id)
        rc = cli_remap(c, 1);
    return rc;
}

/* A request expecting `expect` back from srv, and a transmit buffer of len
 * bytes to encode it in. On failure nothing is left behind. */
static int cli_begin(struct rkv_client *c, struct cli_server *srv, int expect, uint64_t id,
                     uint32_t rows, uint64_t bytes, uint64_t len, const char *what,
                     struct cli_req **r_p, struct rkv_tx **tx_p)
{
    assert(cli_owns_srv(c, srv) && cli_expect_ok(expect) && len >= RKV_PROTO_HDR_BYTES);
    if (c->observer && expect != RKV_MSG_LIST_REPLY && expect != RKV_MSG_META_REPLY)
        return rkv_errf(c->err, sizeof(c->err), -RKV_EINVAL,
                        "%s: an observer client only lists tensors and reads their metas", what);
    int rc = cli_alive(c, srv, what);
    if (rc == 0)
        rc = cli_ensure(c, srv);
    if (rc < 0)
        return rc;
    struct cli_req *r = cli_req_new(c, srv, expect, id, rows, bytes);
    rc = r ? rkv_engine_tx_alloc(c->eng, len, tx_p) : -RKV_ENOMEM;
    if (rc < 0) {
        if (r)
            cli_release(c, &r, 1);
        /* The bound is named only where it is the reason: an 88-byte
         * message "out of memory (max_slot_bytes 1073741824)" sent readers
         * after the wrong setting. */
        if (rc == -RKV_ELIMIT)
            return rkv_errf(c->err, sizeof(c->err), rc,
                            "%s: %llu-byte message: %s (max_slot_bytes %llu)", what,
                            (unsigned long long)len, rkv_strerror(rc),
                            (unsigned long long)c->cfg.max_slot_bytes);
        return rkv_errf(c->err, sizeof(c->err), rc, "%s: %llu-byte message: %s", what,
                        (unsigned long long)len, rkv_strerror(rc));
    }
    *r_p = r;
    return 0;
}

/* The connection to srv was killed but not closed within the timeout: the
 * NIC may still read or write the caller's rows, which the caller must keep. */
static int cli_still_in_use(struct rkv_client *c, const struct cli_server *srv)
{
    return rkv_errf(c->err, sizeof(c->err), -RKV_EINUSE,
                    "server %u: connection not closed within %u ms: the NIC may still use the "
                    "rows; keep them valid until rkv_client_destroy",
                    srv->id, c->cfg.timeout_ms);
}

/* Hands an encoded request to the engine. On failure the request is gone
 * (nobody will wait for it) and *req_p stays untouched. */
static int cli_submit_ext(struct rkv_client *c, struct cli_server *srv, struct cli_req *r,
                          struct rkv_tx *tx, size_t len, const struct rkv_engine_ext *ext,
                          uint32_t n_ext, struct cli_req **req_p)
{
    /* r was made for srv by cli_begin (the progress task may have failed
     * it already, if the connection died meanwhile). */
    assert(r && r->srv == srv && srv->peer);
    assert((ext == NULL) == (n_ext == 0) && len >= RKV_PROTO_HDR_BYTES);
    int rc = ext ? rkv_engine_send_ext(c->eng, srv->peer, tx, len, ext, n_ext)
                 : rkv_engine_send(c->eng, srv->peer, tx, len);
    if (rc < 0) {
        cli_release(c, &r, 1);
        /* A post that fails kills the connection, maybe after pieces of the
         * caller's rows were posted: the NIC may read them (an RNIC DMAs
         * after the post returned) until the connection is closed, and the
         * caller may free the rows as soon as we return. A request without
         * ext pieces needs no wait: a failed post put nothing on the wire,
         * so a zero-copy pull's address never reached the server. */
        if (ext && rkv_peer_dead(srv->peer) &&
            rkv_engine_drop_peer_wait(c->eng, srv->peer, c->cfg.timeout_ms) < 0)
            return cli_still_in_use(c, srv);
        return rkv_errf(c->err, sizeof(c->err), rc, "server %u: %s", srv->id, rkv_strerror(rc));
    }
    *req_p = r;
    return 0;
}

static int cli_submit(struct rkv_client *c, struct cli_server *srv, struct cli_req *r,
                      struct rkv_tx *tx, size_t len, struct cli_req **req_p)
{
    return cli_submit_ext(c, srv, r, tx, len, NULL, 0, req_p);
}

/* Sends a header-only or small message built by enc into a fresh request. */
static int cli_send_simple(struct rkv_client *c, struct cli_server *srv, struct rkv_hdr *h,
                           const struct rkv_msg *body, struct cli_req **req_p, const char *what)
{
    static const int reply_of[RKV_MSG_TYPE_MAX_] = {[RKV_MSG_HELLO] = RKV_MSG_HELLO_REPLY,
                                                    [RKV_MSG_META] = RKV_MSG_META_REPLY,
                                                    [RKV_MSG_BARRIER] = RKV_MSG_BARRIER_REPLY,
                                                    [RKV_MSG_SHUTDOWN] = RKV_MSG_SHUTDOWN_ACK,
                                                    [RKV_MSG_TABLE] = RKV_MSG_TABLE_ENTRY};
    struct cli_req *r = NULL; /* for -O3 flow analysis: set by the call that succeeds */
    struct rkv_tx *tx;
    int rc = cli_begin(c, srv, reply_of[h->type], 0, 0, 0, c->cfg.ctrl_buf_bytes, what, &r, &tx);
    if (rc < 0)
        return rc;
    h->req_id = r->id;
    h->sender = RKV_CLIENT_NODE_BASE + c->id;
    void *buf = rkv_engine_tx_buf(tx);
    size_t len;
    if (h->type == RKV_MSG_HELLO) {
        struct rkv_wire_hello w = body->u.hello;
        w.cluster = c->fp;
        w.rx_depth = c->cfg.rx_depth;
        w.ctrl_buf_bytes = c->cfg.ctrl_buf_bytes;
        len = rkv_proto_enc_hello(buf, h, &w);
    } else if (h->type == RKV_MSG_META)
        len = rkv_proto_enc_meta(buf, h, body->u.name);
    else
        len = rkv_proto_enc_empty(buf, h);
    return cli_submit(c, srv, r, tx, (size_t)len, req_p);
}

static int cli_connect(struct rkv_client *c, struct cli_server *srv)
{
    uint32_t budget_ms = c->connect_budget_ms ? c->connect_budget_ms : c->cfg.connect_retry_ms;
    if (!srv->counted) {
        cli_lock(c);
        srv->counted = 1;
        cli_unlock(c);
    }
    /* Server 0 already lost: one attempt (a live server still answers),
     * no retries; lost while retrying: the retries end. */
    int srv0_lost = atomic_load(&c->connect_cancel) & CLI_CANCEL_SRV0;
    int rc = rkv_engine_connect_retry(c->eng, srv->host, srv->port, c->cfg.timeout_ms,
                                      srv0_lost ? 0 : budget_ms,
                                      srv0_lost ? &c->interrupted : &c->connect_cancel, &srv->peer);
    if (srv0_lost && (rc == -RKV_EPEERDEAD || rc == -RKV_ETIMEDOUT))
        rc = -RKV_EINTR;
    if (rc == -RKV_EINTR && !atomic_load(&c->interrupted) && atomic_load(&c->told_stop)) {
        cli_lock(c);
        rc = rkv_errf(c->err, sizeof(c->err), -RKV_ESHUTDOWN,
                      "cannot connect to server %u at %s:%u: %s", srv->id, srv->host, srv->port,
                      cli_stop_text(c));
        cli_unlock(c);
        return rc;
    }
    if (rc == -RKV_EINTR && !atomic_load(&c->interrupted))
        /* A first contact after the servers stopped (another worker's
         * shutdown) waited out connect_retry_ms, which is for servers not
         * up yet, and then said "cannot connect" (an outside tester). */
        return rkv_errf(c->err, sizeof(c->err), -RKV_EPEERDEAD,
                        "cannot connect to server %u at %s:%u, and server 0 is gone too (the "
                        "servers stopped or died: connect_retry_ms waits only for servers not "
                        "up yet)",
                        srv->id, srv->host, srv->port);
    if (rc == -RKV_EINTR)
        return rkv_errf(c->err, sizeof(c->err), rc, "connecting to server %u at %s:%u: interrupted",
                        srv->id, srv->host, srv->port);
    /* "within 0 ms" read as if nothing had been tried. */
    if (rc < 0 && budget_ms == 0)
        return rkv_errf(c->err, sizeof(c->err), rc,
                        "cannot connect to server %u at %s:%u (one attempt: connect_retry_ms 0): "
                        "%s",
                        srv->id, srv->host, srv->port, rkv_engine_connect_strerror(rc));
    /* Only a refusal and a timeout are tried again: a wrong secret, said
     * at once, read "within 30000 ms" (an outside tester). */
    /* Also what an unresolvable host gives (the NIC's resolve): a typo in
     * a cluster file read "it refused this client's handshake" (an outside
     * tester). */
    if (rc == -RKV_ECONFIG)
        return rkv_errf(c->err, sizeof(c->err), rc,
                        "cannot connect to server %u at %s:%u (not retried): its host name does "
                        "not resolve (a typo in the cluster file?), or it refused this client's "
                        "handshake (a wrong secret, or a setting of another cluster); the line "
                        "logged before this says which",
                        srv->id, srv->host, srv->port);
    if (rc < 0 && rc != -RKV_EPEERDEAD && rc != -RKV_ETIMEDOUT)
        return rkv_errf(c->err, sizeof(c->err), rc,
                        "cannot connect to server %u at %s:%u (not retried): %s", srv->id,
                        srv->host, srv->port, rkv_engine_connect_strerror(rc));
    if (rc < 0)
        return rkv_errf(c->err, sizeof(c->err), rc,
                        "cannot connect to server %u at %s:%u within %u ms: %s", srv->id, srv->host,
                        srv->port, budget_ms, rkv_engine_connect_strerror(rc));
    cli_lock(c); /* cli_on_msg reads it under the lock */
    rkv_peer_set_user(srv->peer, srv);
    cli_unlock(c);
    return 0;
}

/* 64 bits a peer cannot guess (the OS's), for the HELLO nonce and the
 * push sequence tag; in the twin the port's generator, whose runs a seed
 * must repeat. */
static uint64_t cli_draw64(struct rkv_port *port, struct rkv_nic *nic)
{
    if (rkv_nic_in_process(nic))
        return rkv_rng_next(&port->rng);
    uint8_t rnd[RKV_NIC_AUTH_NONCE_BYTES];
    rkv_nic_auth_nonce(rnd);
    uint64_t v;
    memcpy(&v, rnd, sizeof(v));
    return v;
}

static int cli_hello(struct rkv_client *c, struct cli_server *srv, uint32_t want, uint64_t wait_ms)
{
    int rc = cli_connect(c, srv);
    if (rc < 0)
        return rc;
    struct rkv_hdr h = {.type = RKV_MSG_HELLO};
    /* The nonce is what proves a re-joining client to be this one (server
     * 0 gives its id to nobody else): from the OS, except in the twin,
     * whose runs a seed must repeat. The port's generator is seeded by the
     * configuration and a stack address, about 30 bits a peer could try. */
    while (!c->hello_nonce)
        c->hello_nonce = cli_draw64(c->port, c->nic);
    /* Server 0 checks the nonce itself; another server only compares what
     * a client's connections show (server.c srv_dedup_id), and gets a
     * value of its own, derived one way: the nonce went to every server,
     * and one that was hostile, or read the traffic to it, showed it to
     * another server as this client's and marked the client's pushes there
     * as applied (an outside tester). Not in the twin: nobody is hostile
     * there, and a hash per HELLO is CPU its largest runs would pay. */
    uint64_t shown = c->hello_nonce;
    if (srv->id != 0 && !rkv_nic_in_process(c->nic))
        shown = rkv_nic_auth_derive64("rkv claim", c->hello_nonce, srv->id);
    struct rkv_msg body = {
        .u.hello = {.machine_id = c->cfg.machine_id, .want_id = want, .nonce = shown}};
    /* Set by cli_send_simple on success; NULL for GCC's flow analysis at -O3,
     * which cannot see that and warns (-Wmaybe-uninitialized). */
    struct cli_req *r = NULL;
    if ((rc = cli_send_simple(c, srv, &h, &body, &r, "hello")) < 0)
        return rc;
    rc = cli_wait_keep(c, &r, 1, wait_ms, "hello");
    uint32_t got = r->u32;
    cli_release(c, &r, 1);
    /* Server 0 gives ids once every worker said hello: a timeout here is
     * mostly a worker that never came (it said "request timed out"). */
    if (rc == -RKV_ETIMEDOUT && srv == c->srv0 && want == RKV_ID_NONE)
        return rkv_errf(c->err, sizeof(c->err), rc,
                        "hello: server 0 did not answer within %llu ms: it answers once all %u "
                        "workers (num_workers) have joined; fewer joined (one failed to start, or "
                        "num_workers is more than were launched)",
                        (unsigned long long)wait_ms, c->cfg.n_workers);
    if (rc < 0)
        return rc;
    /* An id past n_workers from a lying server 0 would index the caller's
     * per-worker arrays (rkv_client_id: the harness's workers, DGL's ranks). */
    if (got == RKV_ID_NONE || got >= c->cfg.n_workers || (want != RKV_ID_NONE && got != want))
        return rkv_errf(c->err, sizeof(c->err), -RKV_EPROTO,
                        "hello: bad id %u from server %u (num_workers %u)", got, srv->id,
                        c->cfg.n_workers);
    c->id = got;
    return 0;
}

/* A retry's backoff: sleeps *backoff_ms, at most until deadline (and at
 * least 1 ms), then doubles it up to cap_ms. deadline is not past. */
static void cli_nap(struct rkv_client *c, uint64_t deadline, uint64_t *backoff_ms, uint64_t cap_ms)
{
    const struct rkv_port_ops *po = c->port->ops;
    uint64_t now = po->now_ns(c->port);
    uint64_t left_ms = now < deadline ? (deadline - now) / 1000000ull : 0;
    uint64_t nap_ms = *backoff_ms < left_ms ? *backoff_ms : left_ms;
    po->sleep_ns(c->port, (nap_ms ? nap_ms : 1) * 1000000ull);
    *backoff_ms = *backoff_ms * 2 < cap_ms ? *backoff_ms * 2 : cap_ms;
}

/* After attempt `attempt` of a request to srv failed with rc: 0 when it is
 * to be sent again (srv is gone, the budget is not spent: this slept the
 * backoff and redialled it), else the error to return. */
static int cli_again(struct rkv_client *c, struct cli_server *srv, int rc, int send_refused,
                     uint64_t start, uint64_t retry_budget_ms, uint64_t *backoff_ms,
                     uint32_t attempt, const char *what)
{
    const struct rkv_port_ops *po = c->port->ops;
    uint64_t deadline = start + retry_budget_ms * 1000000ull;
    /* A send refused with EPEERDEAD met a dead connection whatever srv->dead
     * says yet: the engine marks its peer dead, then runs cli_on_peer
     * outside its lock, and a send in between failed the call at once
     * instead of retrying (test_durable, in CI a barrier once and a list
     * once: "server 0: peer disconnected or died" right after server 0 was
     * killed; test_durable *_retried_after_server0_restart hold the
     * notification to open that window every time). The retry's
     * backoff gives cli_on_peer its turn, and cli_revive then redials. An
     * EPEERDEAD in a reply, with the connection up, is server 0's answer
     * (a barrier failed by a client that left). */
    if (rc != -RKV_EPEERDEAD || !retry_budget_ms || c->observer ||
        (!send_refused && !cli_srv_dead(c, srv)))
        return rc;
    if (atomic_load(&c->interrupted))
        return rkv_errf(c->err, sizeof(c->err), -RKV_EINTR, "%s: server %u: interrupted (%s)", what,
                        srv->id, c->err);
    uint64_t now = po->now_ns(c->port);
    if (now >= deadline)
        return rkv_errf(c->err, sizeof(c->err), rc,
                        "%s: server %u still unreachable after retrying for %llu ms (%u "
                        "attempt%s): %s",
                        what, srv->id, (unsigned long long)retry_budget_ms, attempt,
                        attempt == 1 ? "" : "s", c->err);
    /* At most an eighth of the budget: a server back late in it is still
     * redialled with time left for the hello (a 2 s shutdown budget once
     * napped 1 s, and its last redial had 1 ms). */
    uint64_t cap_ms = retry_budget_ms / 8 < 10 ? 10 : retry_budget_ms / 8;
    cli_nap(c, deadline, backoff_ms, cap_ms < 1000 ? cap_ms : 1000);
    now = po->now_ns(c->port);
    rc = cli_revive(c, srv, now < deadline ? (deadline - now) / 1000000ull : 1);
    if (rc < 0 && rc != -RKV_EPEERDEAD)
        return rc; /* refused otherwise than by its absence */
    return 0;
}

/* A request to server 0 (barrier, meta, address table). With retry_ms,
 * one that met server 0 gone (its connection died: it crashed, and in
 * durable mode it restarts) is sent again once it is back, within
 * retry_budget_ms; a failure while server 0 is alive (a barrier failed by
 * a client that left, say) is the call's at once. On success *r_p is the
 * answered request, kept for its reply's fields. */
static int cli_call0(struct rkv_client *c, const struct rkv_hdr *h0, const struct rkv_msg *body,
                     uint64_t wait_ms, uint64_t retry_budget_ms, const char *what,
                     struct cli_req **r_p)
{
    struct cli_server *srv = c->srv0;
    const struct rkv_port_ops *po = c->port->ops;
    uint64_t start = po->now_ns(c->port);
    uint64_t backoff_ms = 10;
    for (uint32_t attempt = 1;; attempt++) {
        struct rkv_hdr h = *h0;
        struct cli_req *r = NULL; /* for -O3 flow analysis: set by the call that succeeds */
        int rc = cli_send_simple(c, srv, &h, body, &r, what);
        int send_refused = rc == -RKV_EPEERDEAD;
        if (rc == 0) {
            rc = cli_wait_keep(c, &r, 1, wait_ms, what);
            if (rc == 0) {
                if (attempt > 1)
                    RKV_LOGI(c->port, "%s: server 0 answered after %u attempts (%llu ms)", what,
                             attempt,
                             (unsigned long long)((po->now_ns(c->port) - start) / 1000000ull));
                *r_p = r;
                return 0;
            }
            cli_release(c, &r, 1);
        }
        if ((rc = cli_again(c, srv, rc, send_refused, start, retry_budget_ms, &backoff_ms, attempt,
                            what)) < 0)
            return rc;
    }
}

/* ---- tensors ---- */

static struct rkv_tensor *cli_find_name(struct rkv_client *c, const char *name)
{
    for (uint32_t i = 1; i <= c->max_tensor; i++) {
        struct rkv_tensor *t = rkv_tensor_at(&c->tensors, i);
        if (t && strcmp(t->meta.name, name) == 0)
            return t;
    }
    return NULL;
}

/* A row lock of this client's machine that it waits on is held by server
 * `tag` of the machine (struct rkv_shard holder_dead). A server killed
 * holding one, and not restarted, held it for ever, and this co-located
 * client spun on it for ever. The server's process is read from the
 * machine's segment, mapped for the look (a cached map would outlive a
 * restarted machine's segment, whose live servers it would take for
 * dead). In durable mode the row of a push the dead server was applying
 * stays locked until a server finishes that push from its log: a client
 * cannot, and a server's next push or pull on the machine does. */
static int cli_holder_dead(void *arg, struct rkv_shard *sh, unsigned tag)
{
    struct rkv_client *c = arg;
    const struct rkv_port_ops *o = c->port->ops;
    uint32_t m = c->cfg.machine_id;
    if (tag == 0 || tag > c->cfg.machines[m].servers || tag > RKV_MACH_SERVERS || !o->proc_alive)
        return 0;
    struct rkv_mach mv;
    if (rkv_mach_attach(c->port, c->cfg.shm_prefix, m, c->cfg.n_workers, 0, &mv, NULL, 0) < 0)
        return 0;
    struct rkv_mach_hdr *h = mv.hdr;
    uint64_t proc = atomic_load(&h->reader_proc[tag - 1]);
    uint32_t n = 0;
    if (proc && !o->proc_alive(c->port, proc) &&
        !(atomic_load(&h->jr_lsn) && atomic_load(&h->jr_tag) == tag) &&
        atomic_load(&h->reader_proc[tag - 1]) == proc) { /* not restarted meanwhile */
        struct rkv_shard as_dead = *sh;
        as_dead.owner = tag;
        n = rkv_shard_reclaim(&as_dead);
    }
    rkv_mach_close(&mv);
    if (n)
        RKV_LOGW(c->port,
                 "client %u: server s%u.%u (process %llu) died holding %u row lock(s) of machine "
                 "%u's shared memory: freed them",
                 c->id, m, tag - 1, (unsigned long long)RKV_PORT_PROC_PID(proc), n, m);
    return n > 0;
}

/* Maps this machine's segment so co-located rows bypass the network. */
static int cli_map_local(struct rkv_client *c, struct rkv_tensor *t)
{
    char name[96];
    uint32_t m = c->cfg.machine_id;
    rkv_shard_name(name, sizeof(name), c->cfg.shm_prefix, m, t->meta.id);
    int rc = rkv_shard_map(c->port, name, rkv_pbook_local_rows(&t->pb, m), t->row_bytes,
                           t->meta.with_state, rkv_shard_book_len(&t->meta), 0, &t->shard, c->err,
                           sizeof(c->err));
    if (rc == 0) {
        t->mapped = 1;
        t->shard.owner = RKV_CLIENT_NODE_BASE + c->id; /* never a server's tag */
        t->shard.holder_dead = cli_holder_dead;
        t->shard.holder_arg = c;
    }
    return rc;
}

/* retry_ms: the META's retry budget (the configured one, or 0: once). */
static int cli_tensor_within(struct rkv_client *c, const char *name, uint32_t retry_ms,
                             struct rkv_tensor **t_p)
{
    /* One message for the three read "empty or too long" for a NULL name,
     * which rkv.h promises is refused naming the pointer. */
    if (!name)
        return rkv_errf(c->err, sizeof(c->err), -RKV_EINVAL, "tensor name is NULL");
    size_t len = strnlen(name, RKV_NAME_MAX + 1);
    if (len == 0 || len > RKV_NAME_MAX)
        return rkv_errf(c->err, sizeof(c->err), -RKV_EINVAL,
                        len ? "tensor name '%.16s...' is over RKV_NAME_MAX (%d) bytes"
                            : "tensor name is empty",
                        name, RKV_NAME_MAX);
    struct rkv_tensor *t = cli_find_name(c, name);
    if (t) {
        *t_p = t;
        return 0;
    }
    /* A call let in while interrupted (a push or pull of no ids) sends
     * nothing all the same. */
    if (atomic_load(&c->interrupted))
        return rkv_errf(c->err, sizeof(c->err), -RKV_EINTR,
                        "tensor '%s': interrupted (rkv_client_interrupt): refused, nothing sent",
                        name);
    struct rkv_hdr h = {.type = RKV_MSG_META};
    struct rkv_msg body;
    snprintf(body.u.name, sizeof(body.u.name), "%s", name);
    struct cli_req *r = NULL; /* for -O3 flow analysis: set by the call that succeeds */
    int rc = cli_call0(c, &h, &body, c->cfg.timeout_ms, retry_ms, "meta", &r);
    if (rc == -RKV_ENOTENSOR) /* it said "meta: server 0: no such tensor", naming neither */
        return rkv_errf(c->err, sizeof(c->err), rc,
                        "no tensor named '%s' in the cluster (rkv_client_init_data makes it)",
                        name);
    if (rc < 0)
        return rc;
    t = r->t;
    r->t = NULL;
    cli_release(c, &r, 1);
    assert(t && t->meta.id >= 1 && t->meta.id <= RKV_MAX_TENSORS);
    uint32_t id = t->meta.id;
    struct rkv_tensor *had = rkv_tensor_at(&c->tensors, id);
    if (had) { /* looked up twice: keep the first */
        rkv_tensor_free(t);
        free(t);
        *t_p = had;
        return 0;
    }
    if (!c->observer && rkv_pbook_local_rows(&t->pb, c->cfg.machine_id) > 0)
        rc = cli_map_local(c, t);
    if (rc == 0 && rkv_tensor_put(&c->tensors, id, t) < 0)
        rc = rkv_errf(c->err, sizeof(c->err), -RKV_ENOMEM, "out of memory for tensor '%s'", name);
    if (rc < 0) {
        rkv_tensor_free(t);
        free(t);
        return rc;
    }
    if (t->meta.id > c->max_tensor)
        c->max_tensor = t->meta.id;
    assert(c->max_tensor <= RKV_MAX_TENSORS && cli_find_name(c, name) == t);
    *t_p = t;
    return 0;
}

static int cli_tensor(struct rkv_client *c, const char *name, struct rkv_tensor **t_p)
{
    return cli_tensor_within(c, name, c->cfg.retry_ms, t_p);
}

/* ---- init ---- */

/* How long to wait for an INIT phase: timeout_ms plus 32 ms per MiB of the
 * largest machine's shard (32 MiB/s). A server answers once it made and
 * populated its machine's shard (MAP_POPULATE: the page tables, and
 * /dev/shm's pages, filled up front; in durable mode the snapshot written
 * too), which takes time in proportion to the shard: a 4 GiB shard per
 * machine took over 10 s on a loaded host, so past some tens of GiB every
 * init_data timed out under the default 30 s while the servers went on and
 * made the tensor. At 8 ms per MiB (128 MiB/s) a 512 MiB shard timed out
 * on a host at load 8 (test_api_edges test_init_waits_for_a_large_shard):
 * the figure is a bound for a slow host, not a rate. A server that died
 * is noticed by its connection, not by this wait. */
#define CLI_INIT_MS_PER_MIB 32u
static uint64_t cli_init_wait_ms(const struct rkv_tensor *t, uint32_t n_machines,
                                 uint32_t timeout_ms)
{
    uint64_t most = 0;
    for (uint32_t m = 0; m < n_machines; m++) {
        uint64_t r = rkv_pbook_local_rows(&t->pb, m);
        most = r > most ? r : most;
    }
    /* rows <= 2^40 and row_bytes <= 2^30: each product stays below 2^51. */
    uint64_t mib = most >= (1u << 20) ? (most >> 20) * t->row_bytes : most * t->row_bytes >> 20;
    if (t->meta.with_state)
        mib *= 2; /* the optimizer state beside each row */
    return (uint64_t)timeout_ms + mib * CLI_INIT_MS_PER_MIB;
}

/* The tensor w of description d, with d's book and local index. */
static int cli_send_init(struct rkv_client *c, struct cli_server *srv, uint16_t phase, uint32_t id,
                         const struct rkv_wire_tensor *w, const struct rkv_tensor_desc *d,
                         struct cli_req **req_p)
{
    const uint64_t *local = d->local_index;
    size_t len = RKV_PROTO_HDR_BYTES + rkv_proto_tensor_body_bytes(w->book_len, local != NULL);
    struct cli_req *r = NULL; /* for -O3 flow analysis: set by the call that succeeds */
    struct rkv_tx *tx;
    int rc = cli_begin(c, srv, RKV_MSG_INIT_REPLY, 0, 0, 0, len, "init_data", &r, &tx);
    if (rc < 0)
        return rc;
    struct rkv_hdr h = {.type = RKV_MSG_INIT,
                        .req_id = r->id,
                        .tensor_id = id,
                        .op = phase,
                        .param = phase == 1 || phase == 2 ? c->init_committed : 0,
                        .sender = RKV_CLIENT_NODE_BASE + c->id};
    len = rkv_proto_enc_tensor_local(rkv_engine_tx_buf(tx), &h, w, d->book, local);
    return cli_submit(c, srv, r, tx, (size_t)len, req_p);
}

/* Durable mode with retries: an INIT phase at a server that died is sent
 * again once it is back, within retry_ms. Every phase but the commit is
 * idempotent (a server that has the tensor, from its snapshot or an
 * earlier attempt, answers with its id), so a resend is safe. */
static int cli_init_retry(struct rkv_client *c, struct cli_server *srv, uint16_t phase, uint32_t id,
                          const struct rkv_wire_tensor *w, const struct rkv_tensor_desc *d,
                          uint32_t *id_p)
{
    const struct rkv_port_ops *po = c->port->ops;
    uint64_t deadline = po->now_ns(c->port) + (uint64_t)c->cfg.retry_ms * 1000000ull;
    uint64_t backoff_ms = 10;
    for (uint32_t attempt = 1;; attempt++) {
        uint64_t now = po->now_ns(c->port);
        struct cli_req *r = NULL;
        int rc = cli_revive(c, srv, now < deadline ? (deadline - now) / 1000000ull : 0);
        if (rc == 0)
            rc = cli_send_init(c, srv, phase, id, w, d, &r);
        if (r) {
            int wrc = cli_wait_keep(c, &r, 1, c->init_wait_ms, "init_data");
            if (rc == 0 && wrc == 0 && (phase == 1 || phase == 2) && r->u32 != id)
                wrc = rkv_errf(c->err, sizeof(c->err), -RKV_EPROTO,
                               "init_data '%s': server %u answered with tensor id %u where server "
                               "0 gave %u",
                               d->name, srv->id, r->u32, id);
            if (rc == 0 && wrc == 0 && id_p)
                *id_p = r->u32; /* phase 0's answer: the tensor's id */
            cli_release(c, &r, 1);
            rc = rc < 0 ? rc : wrc;
        }
        if (rc != -RKV_EPEERDEAD)
            return rc;
        if (atomic_load(&c->interrupted))
            return rkv_errf(c->err, sizeof(c->err), -RKV_EINTR,
                            "init_data: server %u: interrupted while retrying (%s)", srv->id,
                            c->err);
        now = po->now_ns(c->port);
        if (now >= deadline)
            return rkv_errf(c->err, sizeof(c->err), rc,
                            "init_data: server %u still unreachable after retrying for %u ms (%u "
                            "attempt%s): %s",
                            srv->id, c->cfg.retry_ms, attempt, attempt == 1 ? "" : "s", c->err);
        cli_nap(c, deadline, &backoff_ms, 1000);
    }
}

/* Runs one INIT phase on the servers selected by want_first (1: the first
 * server of each machine other than 0; 0: every other non-first server). */
static int cli_init_phase(struct rkv_client *c, uint16_t phase, uint32_t id,
                          const struct rkv_wire_tensor *w, const struct rkv_tensor_desc *d)
{
    struct cli_req **reqs = calloc(c->n_servers, sizeof(*reqs));
    uint8_t *lost = calloc(c->n_servers, 1);
    if (!reqs || !lost) {
        free(reqs);
        free(lost);
        return -RKV_ENOMEM;
    }
    size_t n = 0;
    int rc = 0;
    for (uint32_t i = 1; i < c->n_servers && rc == 0; i++) {
        struct cli_server *srv = cli_srv(c, i);
        if (!srv) {
            rc = -RKV_ENOMEM;
            break;
        }
        int first = srv->id == rkv_cluster_server_id(c->cl, srv->machine, 0);
        if (first != (phase == 1))
            continue;
        rc = cli_send_init(c, srv, phase, id, w, d, &reqs[n]);
        if (reqs[n])
            n++;
        if (rc == -RKV_EPEERDEAD && c->cfg.retry_ms) {
            lost[i] = 1; /* seen dead: sent again below, once it is back */
            rc = 0;
        }
    }
    int wrc = cli_wait_keep(c, reqs, n, c->init_wait_ms, "init_data");
    /* A server that answers with another id than server 0's holds another
     * tensor under the name: the call would pass and every push of its
     * machine's rows fail "unknown tensor id". Whatever else failed, and
     * not undone by the retries below. */
    int mismatch = 0;
    char why[256] = "";
    cli_lock(c);
    for (size_t k = 0; k < n && !mismatch; k++)
        if (reqs[k]->done && reqs[k]->status == 0 && reqs[k]->u32 != id) {
            mismatch = -RKV_EPROTO;
            snprintf(why, sizeof(why),
                     "init_data '%s': server %u answered with tensor id %u where server 0 gave %u",
                     d->name, reqs[k]->srv->id, reqs[k]->u32, id);
        }
    cli_unlock(c);
    if (rc == 0 && wrc < 0 && c->cfg.retry_ms) {
        /* Only what a dead server lost is retried; any other failure is
         * the call's. */
        int other = 0;
        cli_lock(c);
        for (size_t k = 0; k < n; k++) {
            int st = reqs[k]->done ? reqs[k]->status : -RKV_ETIMEDOUT;
            if (st == -RKV_EPEERDEAD)
                lost[reqs[k]->srv->id] = 1;
            else if (st < 0)
                other = 1;
        }
        cli_unlock(c);
        wrc = other ? wrc : 0;
    }
    cli_release(c, reqs, n);
    free(reqs);
    rc = rc < 0 ? rc : wrc;
    if (rc == 0 && mismatch)
        rc = rkv_errf(c->err, sizeof(c->err), mismatch, "%s", why);
    for (uint32_t i = 1; i < c->n_servers && rc == 0; i++)
        if (lost[i])
            rc = cli_init_retry(c, cli_srv(c, i), phase, id, w, d, NULL); /* made above */
    free(lost);
    return rc;
}

/* An INIT phase at server 0: 0 (the tensor's id, in *id_p) or 3 (the
 * commit). Durable mode with retries: sent again once a restarted server 0
 * is back (phase 0 is in its snapshot before it is answered, so a resend
 * gets the same id; a commit that is resent sets what it set). */
static int cli_init0(struct rkv_client *c, uint16_t phase, uint32_t id,
                     const struct rkv_wire_tensor *w, const struct rkv_tensor_desc *d,
                     uint32_t *id_p)
{
    struct cli_req *r = NULL;
    int rc = cli_send_init(c, c->srv0, phase, id, w, d, &r);
    if (r) {
        int wrc = cli_wait_keep(c, &r, 1, c->init_wait_ms, "init_data");
        if (rc == 0 && wrc == 0 && id_p)
            *id_p = r->u32;
        cli_release(c, &r, 1);
        rc = rc < 0 ? rc : wrc;
    }
    if (rc == -RKV_EPEERDEAD && c->cfg.retry_ms && c->cfg.durable_dir[0])
        rc = cli_init_retry(c, c->srv0, phase, id, w, d, id_p);
    return rc;
}

/* The PUSH message of cnt rows of t for one server: the header, then an
 * id and a row each. The one size both the push (cli_push_sizes_ok) and
 * init_data's check of a single row use. */
static uint64_t cli_push_msg_bytes(const struct rkv_tensor *t, uint32_t cnt)
{
    return RKV_PROTO_HDR_BYTES + (uint64_t)cnt * (8 + t->row_bytes);
}

/* A tensor one of whose rows no PUSH can carry to a server (its message
 * alone over max_slot_bytes) was created, and every push of its remote
 * rows then failed advising "push fewer ids" for one id. Rows go over the
 * network in a cluster of several machines, and in durable mode (through
 * this machine's servers too). A pull reply is smaller (no ids), and a
 * tensor's optimizer state is never pushed: pulling it with the state
 * (two rows a row) is refused by that pull alone. */
/* What to do about one row whose message of `need` bytes is over
 * max_slot_bytes: raise the setting, unless no setting can carry it. */
static const char *cli_raise_hint(uint64_t need, char *buf, size_t len)
{
    if (need <= RKV_MAX_SLOT_BYTES)
        snprintf(buf, len, "raise max_slot_bytes to at least %llu", (unsigned long long)need);
    else
        snprintf(buf, len,
                 "no setting can carry it: one message holds at most %llu bytes "
                 "(RKV_MAX_SLOT_BYTES); shorten the rows",
                 RKV_MAX_SLOT_BYTES);
    return buf;
}

static int cli_init_row_fits(struct rkv_client *c, const struct rkv_tensor *t)
{
    uint64_t one = cli_push_msg_bytes(t, 1);
    if ((c->cfg.n_machines < 2 && !c->cfg.durable_dir[0]) || one <= c->cfg.max_slot_bytes)
        return 0;
    char hint[160];
    return rkv_errf(c->err, sizeof(c->err), -RKV_ELIMIT,
                    "init_data '%s': one row (%zu bytes) makes a %llu-byte push message with its "
                    "header and id, over max_slot_bytes %llu, so no push could carry it to a "
                    "server: %s; refused before anything was sent",
                    t->meta.name, t->row_bytes, (unsigned long long)one,
                    (unsigned long long)c->cfg.max_slot_bytes,
                    cli_raise_hint(one, hint, sizeof(hint)));
}

/* Whether the cluster made tensor `name` before: this client knows it, or
 * server 0's catalogue answers META for it (it answers committed tensors
 * only). Asked without mapping anything: the machine whose shard is gone
 * is the one to tell (a lookup that mapped it failed there, and said "not
 * made"). A failure to ask is "not known", and the call's error text is
 * left as it was. */
static int cli_committed(struct rkv_client *c, const char *name)
{
    if (cli_find_name(c, name))
        return 1;
    struct rkv_hdr h = {.type = RKV_MSG_META};
    struct rkv_msg body;
    snprintf(body.u.name, sizeof(body.u.name), "%s", name);
    struct cli_req *r = NULL;
    char saved[sizeof(c->err)];
    memcpy(saved, c->err, sizeof(saved));
    int rc = cli_call0(c, &h, &body, c->cfg.timeout_ms, c->cfg.retry_ms, "meta", &r);
    memcpy(c->err, saved, sizeof(saved));
    if (rc < 0)
        return 0;
    cli_release(c, &r, 1); /* and the answer's tensor with it */
    return 1;
}

static int cli_init_data(struct rkv_client *c, const struct rkv_tensor_desc *d)
{
    struct rkv_tensor probe;
    struct rkv_wire_tensor w;
    int rc = cli_check_open(c, "init_data");
    if (rc < 0)
        return rc;
    if (!d)
        return rkv_errf(c->err, sizeof(c->err), -RKV_EINVAL, "init_data: no description");
    /* Refused here, a bad description never reaches the servers, whose
     * decoder would drop this client's connection as malformed. */
    if ((rc = rkv_tensor_desc_check(d, c->err, sizeof(c->err))) < 0)
        return rc;
    struct rkv_tensor_meta m = {.dtype = d->dtype,
                                .rows = d->rows,
                                .row_len = d->row_len,
                                .policy = d->policy,
                                .with_state = !!d->with_state};
    memcpy(m.name, d->name, sizeof(m.name));
    rkv_tensor_to_wire(&m, d, &w);
    /* The book's entries, the local index (and what else the partition
     * needs) are checked where the servers check them, and a bad
     * description costs no round trip. */
    rc = rkv_tensor_from_wire_local(&w, d->book, d->local_index, c->cfg.n_machines, 1, &probe,
                                    c->err, sizeof(c->err));
    if (rc < 0)
        return rc;
    c->init_wait_ms = cli_init_wait_ms(&probe, c->cfg.n_machines, c->cfg.timeout_ms);
    rc = cli_init_row_fits(c, &probe);
    rkv_tensor_free(&probe);
    if (rc < 0)
        return rc;
    /* The description travels whole in each INIT (its book and local
     * order: 12 bytes a row): past max_slot_bytes a server's connection
     * broke with "configured limit reached" (a 90M-row relabelled tensor,
     * an outside tester; with max_slot_bytes raised, "connection lost"). */
    uint64_t init_len =
        RKV_PROTO_HDR_BYTES + rkv_proto_tensor_body_bytes(w.book_len, d->local_index != NULL);
    if (init_len > c->cfg.max_slot_bytes) {
        char hint[160];
        return rkv_errf(c->err, sizeof(c->err), -RKV_ELIMIT,
                        "init_data '%s': its partition book%s (%u rows) make a %llu-byte INIT "
                        "message, over max_slot_bytes %llu: %s; refused before anything was sent",
                        d->name, d->local_index ? " and local order" : "", w.book_len,
                        (unsigned long long)init_len, (unsigned long long)c->cfg.max_slot_bytes,
                        init_len <= RKV_MAX_SLOT_BYTES
                            ? cli_raise_hint(init_len, hint, sizeof(hint))
                            : "no setting can carry it: one message holds at most "
                              "RKV_MAX_SLOT_BYTES (split the tensor, or give it no local order)");
    }
    uint32_t id = 0;
    if ((rc = cli_init0(c, 0, 0, &w, d, &id)) < 0)
        return rc;
    /* Known here, or to server 0's catalogue (META answers committed
     * tensors only): a machine restarted on another or an empty durable
     * directory made it anew as zeros, in silence, when a worker called
     * init_data again (an outside tester). */
    c->init_committed = cli_committed(c, d->name);
    if ((rc = cli_init_phase(c, 1, id, &w, d)) < 0)
        return rc;
    if ((rc = cli_init_phase(c, 2, id, &w, d)) < 0)
        return rc;
    if ((rc = cli_init0(c, 3, id, &w, d, NULL)) < 0)
        return rc;
    /* Kept, as a lookup keeps it (its local shard mapped): the first push
     * or pull of a tensor this client made asked server 0 for it, so a
     * push of this machine's rows failed with server 0 gone or stopped,
     * and after a shutdown said "server 0 is gone" where the machine's own
     * servers' exit is -RKV_ESHUTDOWN (an outside tester). The made tensor
     * stands whatever this lookup meets: a failure leaves it to the next
     * call, as before, and the error text as it was. Asked once, without
     * the retry budget: a made tensor is not worth a wait for server 0. */
    char saved[sizeof(c->err)];
    memcpy(saved, c->err, sizeof(saved));
    struct rkv_tensor *t;
    if (cli_tensor_within(c, d->name, 0, &t) < 0)
        memcpy(c->err, saved, sizeof(saved));
    return 0;
}

static int cli_meta(struct rkv_client *c, const char *name, struct rkv_tensor_meta *meta_p)
{
    struct rkv_tensor *t;
    if (!meta_p) /* before the request: its answer would have nowhere to go */
        return rkv_errf(c->err, sizeof(c->err), -RKV_EINVAL, "meta: meta_p is NULL");
    int rc = cli_check_open(c, "meta");
    if (rc == 0)
        rc = cli_tensor(c, name, &t);
    if (rc < 0)
        return rc;
    *meta_p = t->meta;
    return 0;
}

/* ---- counters and spans of calls ---- */

/* When a call began, on the port's clock and (when tracing) the trace's;
 * untimed: a push or pull not sampled, whose start was not read. */
struct cli_clock {
    uint64_t t0_ns, tr0_ns;
    int untimed;
};

static struct cli_clock cli_call_begin(struct rkv_client *c)
{
    struct rkv_trace *tr = c->port->trace;
    return (struct cli_clock){.t0_ns = c->port->ops->now_ns(c->port),
                              .tr0_ns = tr ? rkv_trace_now_ns(tr) : 0};
}

/* A push or pull began: timed from here when it is the sampled one of
 * RKV_STATS_SAMPLE, else not (a call served from the local shard costs
 * about what two clock reads do); one that then sends a request is timed
 * from its first (cli_call_sent). */
static struct cli_clock cli_call_begin_rows(struct rkv_client *c, int op)
{
    assert(op == RKV_STATS_PUSH || op == RKV_STATS_PULL);
    if (c->call_sample[op]++ % RKV_STATS_SAMPLE == 0)
        return cli_call_begin(c);
    c->call_sent = 0;
    struct rkv_trace *tr = c->port->trace;
    return (struct cli_clock){.untimed = 1, .tr0_ns = tr ? rkv_trace_now_ns(tr) : 0};
}

/* Before ending (or parking) an untimed call: if it sent a request, it is
 * timed after all, from that request's send. */
static struct cli_clock cli_call_sent(const struct rkv_client *c, struct cli_clock k)
{
    if (k.untimed && c->call_sent) {
        k.untimed = 0;
        k.t0_ns = c->call_sent_ns;
    }
    return k;
}

/* A call ended with rc: counted under op and, when tracing, a span named
 * span (NULL: the op's name) on the calling thread. Returns rc. The
 * application thread's. */
static int cli_call_end_as(struct rkv_client *c, int op, const char *span,
                           const struct cli_clock *k, int rc, uint64_t rows, uint64_t bytes)
{
    assert(op >= 0 && op < RKV_STATS_OPS);
    if (k->untimed)
        rkv_stats_count(&c->ops[op], rc >= 0, rows, bytes);
    else
        rkv_stats_add(&c->ops[op], c->port->ops->now_ns(c->port) - k->t0_ns, rc >= 0, rows, bytes);
    struct rkv_trace *tr = c->port->trace;
    if (tr)
        rkv_trace_span(tr, span ? span : rkv_stats_op_name(op), "op", k->tr0_ns,
                       rkv_trace_now_ns(tr), -1, rc >= 0 ? rows : 0, rc >= 0 ? bytes : 0);
    return rc;
}

static int cli_call_end(struct rkv_client *c, int op, const struct cli_clock *k, int rc,
                        uint64_t rows, uint64_t bytes)
{
    return cli_call_end_as(c, op, NULL, k, rc, rows, bytes);
}

/* ---- push / pull ---- */

/* Rows of one request grouped by machine: order[] lists request positions
 * machine by machine (machines ascending, positions ascending within one);
 * group k holds machine mach[k]'s positions order[start[k]..start[k+1]).
 * Only machines the call touches have a group, so a call costs its rows,
 * not the cluster's size. The arrays are the client's (grp_*), valid until
 * its next push or pull. */
struct cli_groups {
    const uint32_t *order;
    const uint32_t *start; /* n + 1 */
    const uint32_t *mach;  /* n, ascending */
    uint32_t n;
};

/* Group of machine m, or g->n when the call has no rows there. */
static uint32_t cli_group_find(const struct cli_groups *g, uint32_t m)
{
    uint32_t lo = 0, hi = g->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (g->mach[mid] < m)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < g->n && g->mach[lo] == m ? lo : g->n;
}

static uint32_t cli_group_cnt(const struct cli_groups *g, uint32_t k)
{
    return k < g->n ? g->start[k + 1] - g->start[k] : 0;
}

static int cli_grow(void **p, size_t n, size_t size)
{
    void *q = realloc(*p, n * size);
    if (!q)
        return -RKV_ENOMEM;
    *p = q;
    return 0;
}

/* Room in the client's grouping and per-call arrays for a call of n ids
 * (so at most n machines). */
static int cli_group_room(struct rkv_client *c, size_t n)
{
    n = n ? n : 1;
    if (n <= c->grp_cap)
        return 0;
    if (cli_grow((void **)&c->grp_order, n, sizeof(*c->grp_order)) < 0 ||
        cli_grow((void **)&c->grp_start, n + 1, sizeof(*c->grp_start)) < 0 ||
        cli_grow((void **)&c->grp_gm, n, sizeof(*c->grp_gm)) < 0 ||
        cli_grow((void **)&c->grp_key, n, sizeof(*c->grp_key)) < 0 ||
        cli_grow((void **)&c->call_reqs, n, sizeof(*c->call_reqs)) < 0 ||
        cli_grow((void **)&c->call_lost, n, sizeof(*c->call_lost)) < 0 ||
        cli_grow((void **)&c->drop_srv, n, sizeof(*c->drop_srv)) < 0 ||
        cli_grow((void **)&c->drop_unanswered, n, sizeof(*c->drop_unanswered)) < 0)
        return rkv_errf(c->err, sizeof(c->err), -RKV_ENOMEM, "out of memory");
    c->grp_cap = n;
    return 0;
}

static int cli_u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cli_group(struct rkv_client *c, const struct rkv_tensor *t, const uint64_t *ids,
                     size_t n, struct cli_groups *g)
{
    uint32_t M = c->cfg.n_machines;
    int rc = cli_group_room(c, n);
    if (rc < 0)
        return rc;
    uint32_t *start = c->grp_start, *gm = c->grp_gm, *order = c->grp_order;
    uint64_t *key = c->grp_key;
    int sorted = 1;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= t->meta.rows)
            return rkv_errf(c->err, sizeof(c->err), -RKV_ERANGE,
                            "tensor '%s': row id %llu at position %zu out of range (rows %llu)",
                            t->meta.name, (unsigned long long)ids[i], i,
                            (unsigned long long)t->meta.rows);
        /* Machine, then position: sorting the keys groups by machine and
         * keeps positions in order within a machine. */
        key[i] = (uint64_t)rkv_pbook_machine(&t->pb, ids[i]) << 32 | i;
        sorted &= i == 0 || key[i] > key[i - 1];
    }
    uint32_t ng = 0;
    if (!sorted && (size_t)M / 4 <= n) {
        /* Many rows for the cluster's size: count per machine (O(n + M)),
         * in grp_start grown to M + 1 for such a call. */
        if (cli_grow((void **)&c->grp_start, (n > M ? n : M) + 1, sizeof(*start)) < 0)
            return rkv_errf(c->err, sizeof(c->err), -RKV_ENOMEM, "out of memory");
        start = c->grp_start;
        memset(start, 0, ((size_t)M + 1) * sizeof(*start));
        for (size_t i = 0; i < n; i++)
            start[(key[i] >> 32) + 1]++;
        for (uint32_t m = 0; m < M; m++) {
            if (start[m + 1])
                gm[ng++] = m;
            start[m + 1] += start[m];
        }
        for (size_t i = 0; i < n; i++) /* start[m]: machine m's fill cursor */
            order[start[key[i] >> 32]++] = (uint32_t)i;
        /* start[m] is now machine m's end; key[], read no more, keeps the
         * groups' ends while start[] becomes the groups' bounds. */
        for (uint32_t k = 0; k < ng; k++)
            key[k] = start[gm[k]];
        start[0] = 0;
        for (uint32_t k = 0; k < ng; k++)
            start[k + 1] = (uint32_t)key[k];
    } else {
        if (!sorted)
            qsort(key, n, sizeof(*key), cli_u64_cmp);
        for (size_t i = 0; i < n; i++) {
            uint32_t m = (uint32_t)(key[i] >> 32);
            if (ng == 0 || gm[ng - 1] != m) {
                gm[ng] = m;
                start[ng++] = (uint32_t)i;
            }
            order[i] = (uint32_t)key[i];
        }
        start[ng] = (uint32_t)n;
    }
    assert(start[ng] == n && ng <= c->grp_cap);
    *g = (struct cli_groups){.order = order, .start = start, .mach = gm, .n = ng};
    return 0;
}

/* Spreads a machine's load over its servers, as DGL does, past those seen
 * dead or unreachable while a sibling is not: a worker whose call drew a
 * server killed for good waited out connect_retry_ms reconnecting to it,
 * call after call, its sibling serving the same memory unasked. */
static struct cli_server *cli_pick_any(struct rkv_client *c, uint32_t machine)
{
    assert(machine < c->cfg.n_machines && c->cfg.machines[machine].servers > 0);
    uint32_t first = rkv_cluster_server_id(c->cl, machine, 0);
    uint32_t n = c->cfg.machines[machine].servers;
    uint32_t k = (uint32_t)rkv_rng_below(&c->port->rng, n);
    assert(first + k < c->n_servers);
    struct cli_server *srv = cli_srv(c, first + k);
    if (!srv || n == 1 || !(srv->unreachable || cli_srv_dead(c, srv))) {
        assert(!srv || srv->machine == machine);
        return srv;
    }
    for (uint32_t i = 1; i < n; i++) {
        struct cli_server *o = cli_srv(c, first + (k + i) % n);
        if (!o || (!o->unreachable && !cli_srv_dead(c, o)))
            return o;
    }
    return srv; /* every one is down: the draw, as before */
}

static struct cli_pin cli_pin_of(uint64_t v)
{
    return (struct cli_pin){.srv = (uint32_t)(v >> 32), .n = (uint32_t)v};
}

/* The server pushes in flight to the machine went to, else any (NULL: out
 * of memory). */
static struct cli_server *cli_pick(struct rkv_client *c, uint32_t machine)
{
    assert(machine < c->cfg.n_machines);
    const uint64_t *v = rkv_idmap_find(&c->pins, machine);
    struct cli_pin pin = cli_pin_of(v ? *v : 0);
    /* A pin names a server of its own machine (cli_pin), whose state the
     * push that pinned it made. */
    assert(!pin.n || (pin.srv < c->n_servers && rkv_idmap_find(&c->srvs, pin.srv) &&
                      rkv_cluster_machine_of(c->cl, pin.srv) == machine));
    return pin.n ? cli_srv(c, pin.srv) : cli_pick_any(c, machine);
}

/* Whether this client may push or pull (not after shutdown_servers, not
 * an observer), and the call's arguments (rows: its rows or the pull's
 * output). Before the tensor's lookup and n = 0's early end: an observer's
 * push_async returned 0 and a handle whose wait failed, and its pull of no
 * ids returned 0, though rkv.h says it only lists and reads metas. */
static int cli_check_call(struct rkv_client *c, const char *what, const uint64_t *ids, size_t n,
                          const void *rows)
{
    int rc = cli_check_open(c, what);
    if (rc < 0)
        return rc;
    if (n > UINT32_MAX)
        return rkv_errf(c->err, sizeof(c->err), -RKV_EINVAL, "%s: %zu ids, at most 2^32-1", what,
                        n);
    if (n && (!ids || !rows))
        return rkv_errf(c->err, sizeof(c->err), -RKV_EINVAL, "%s: %zu ids but ids or rows NULL",
                        what, n);
    if (c->observer)
        return rkv_errf(c->err, sizeof(c->err), -RKV_EINVAL,
                        "%s: an observer client only lists tensors and reads their metas", what);
    return 0;
}

/* Whether this machine's servers were asked to exit (by any client): its
 * shard, which this client reads and writes directly, is served no more.
 * uses_rows: the call reads or writes the segment's rows itself (a durable
 * push goes through a server, and a segment that moved is its business). */
static int cli_check_local(struct rkv_client *c, const struct rkv_tensor *t, const char *what,
                           int uses_rows)
{
    unsigned st = t->mapped ? atomic_load(&t->shard.hdr->closed) : 0;
    if (!st || (st == RKV_SHARD_MOVED && !uses_rows))
        return 0;
    if (st == RKV_SHARD_MOVED) /* cli_local_follow did not get the new one */
        return rkv_errf(c->err, sizeof(c->err), -RKV_EPEERDEAD,
                        "%s: tensor %s's shard on machine %u (this one) was replaced or removed "
                        "(its server stopped or restarted)%s",
                        what, t->meta.name, c->cfg.machine_id,
                        c->cfg.retry_ms && c->cfg.durable_dir[0]
                            ? ", and this machine's servers were not back within retry_ms"
                            : "; a client follows a restart only in durable mode with retry_ms");
    return rkv_errf(c->err, sizeof(c->err), -RKV_ESHUTDOWN,
                    "%s: the servers of machine %u (this one) were asked to exit or stopped: "
                    "its shard is served no more",
                    what, c->cfg.machine_id);
}

/* One push or pull call, as the per-machine senders see it. */
struct cli_op {
    const struct rkv_tensor *t;
    const uint64_t *ids;
    const uint8_t *rows; /* push */
    uint8_t *out;        /* pull */
    int op;              /* push: its op; pull: its pull handler */
    double param;
    size_t out_bytes; /* pull: bytes per reply row (the pull handler's) */
    int via_server;   /* push: this machine's rows go through a server too (durable mode) */
    uint64_t seq;     /* push being retried: its sequence; else 0 */
    /* Zero copy: the caller's rows (n x row_bytes = span bytes) registered,
     * or NULL when no part of the call is large enough. */
    struct rkv_mr *mr;
    uint64_t span;
    int cached; /* mr is rkv_client_register's, taken from the cache until cli_zc_end */
};

static void cli_zc_begin(struct rkv_client *c, const struct cli_groups *g, struct cli_op *o,
                         size_t n, int *call_reg_p);
static void cli_zc_end(struct rkv_client *c, struct cli_op *o, int call_reg);

typedef int (*cli_remote_fn)(struct rkv_client *c, const struct cli_op *o, struct cli_server *srv,
                             const uint32_t *pos, uint32_t cnt, struct cli_req **req_p);

/* Sends one request per machine that holds some of the rows, except this
 * machine when its shard is mapped (the caller does those rows itself).
 * With retries configured, a machine whose server is known dead goes into
 * lost[] (by group, as LOST_FRESH) instead of failing the call. */
#define LOST_FRESH UINT64_MAX
static int cli_fanout(struct rkv_client *c, const struct cli_op *o, const struct cli_groups *g,
                      cli_remote_fn fn, struct cli_req **reqs, size_t *nreq_p, uint64_t *lost)
{
    int rc = 0;
    size_t nreq = 0;
    for (uint32_t k = 0; k < g->n && rc == 0; k++) {
        uint32_t m = g->mach[k];
        lost[k] = 0;
        if (m == c->cfg.machine_id && o->t->mapped && !o->via_server)
            continue;
        assert(nreq < g->n); /* reqs has an entry per group (cli_group grew it) */
        reqs[nreq] = NULL;
        struct cli_server *srv = cli_pick(c, m);
        if (!srv) {
            rc = -RKV_ENOMEM;
            break;
        }
        rc = fn(c, o, srv, g->order + g->start[k], cli_group_cnt(g, k), &reqs[nreq]);
        if (reqs[nreq])
            nreq++;
        if (rc == -RKV_EPEERDEAD && c->cfg.retry_ms) {
            lost[k] = LOST_FRESH;
            rc = 0;
        }
    }
    *nreq_p = nreq;
    return rc;
}

/* A restarted server of this machine may have made the shard anew (the
 * machine's memory was lost with it): map the segments again by name, or
 * direct reads would go on seeing the old ones. only_moved: just those
 * marked RKV_SHARD_MOVED. */
static int cli_remap(struct rkv_client *c, int only_moved)
{
    for (uint32_t i = 1; i <= c->max_tensor; i++) {
        struct rkv_tensor *t = rkv_tensor_at(&c->tensors, i);
        if (!t || !t->mapped ||
            (only_moved && atomic_load(&t->shard.hdr->closed) != RKV_SHARD_MOVED))
            continue;
        rkv_shard_unmap(&t->shard);
        t->mapped = 0;
        int rc = cli_map_local(c, t);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* A server that died gets a fresh connection: to the address server 0 has
 * now (a restarted server re-registered), or the configured one. */
static int cli_revive(struct rkv_client *c, struct cli_server *srv, uint64_t remaining_ms)
{
    assert(cli_owns_srv(c, srv));
    if (srv->peer && !cli_srv_dead(c, srv))
        return 0;
    cli_lock(c);
    if (srv->peer) /* a late hang-up of the old connection must not kill the new one */
        rkv_peer_set_user(srv->peer, NULL);
    srv->peer = NULL;
    srv->dead = 0;
    srv->has_pslot = 0; /* the slot belonged to the old connection */
    cli_unlock(c);
    uint64_t wait_ms = remaining_ms < c->cfg.timeout_ms ? remaining_ms : c->cfg.timeout_ms;
    /* Server 0's address is the config's, and the table comes from it. */
    int rc = c->dynamic && srv != c->srv0 ? cli_fetch_table(c, wait_ms ? wait_ms : 1) : 0;
    if (rc < 0)
        return rc;
    c->connect_budget_ms =
        (uint32_t)(remaining_ms < c->cfg.connect_retry_ms ? (remaining_ms ? remaining_ms : 1)
                                                          : c->cfg.connect_retry_ms);
    rc = cli_hello(c, srv, c->id, wait_ms ? wait_ms : 1);
    c->connect_budget_ms = 0;
    srv->unreachable = rc == -RKV_EPEERDEAD || rc == -RKV_ETIMEDOUT;
    int gone = 0;
    if (rc == 0 && srv->machine == c->cfg.machine_id) {
        rc = cli_remap(c, 0);
        /* The machine's memory went between the hello and the map: the
         * server that answered was the machine's last one stopping, which
         * removes it, and a restart restores it. A server still gone to
         * the retries: the push was given up with "cannot map ...
         * (unknown tensor); check /dev/shm" well inside retry_ms (an
         * outside tester, both servers of a machine SIGTERMed and
         * restarted). A tensor left unmapped goes through a server. */
        gone = rc == -RKV_ENOTENSOR;
    }
    if (rc < 0 && srv->peer) {
        rkv_engine_drop_peer(c->eng, srv->peer);
        cli_lock(c);
        srv->dead = 1;
        cli_unlock(c);
    } else if (srv->unreachable) {
        /* No connection came: still dead. Left as never contacted, each
         * later call first dialled it for connect_retry_ms (which is for
         * servers not up yet) before its retries: 35 s a call for a
         * retry_ms of 5 s, saying "after retrying for 5000 ms" (an outside
         * tester). Dead, a call goes to its retries at once. */
        cli_lock(c);
        srv->dead = 1;
        cli_unlock(c);
    }
    return rc == -RKV_ETIMEDOUT || gone ? -RKV_EPEERDEAD : rc;
}

/* Servers of a machine a retry keeps apart (a bit each): beyond, any. */
#define CLI_RETRY_SPREAD 64u

/* The server of machine m for an attempt of cli_retry: one this retry has
 * not seen fail (*failed, a bit per local server id), one not known dead
 * first; once each failed, any again. *local_p: its local id. */
static struct cli_server *cli_pick_retry(struct rkv_client *c, uint32_t m, uint64_t *failed,
                                         uint32_t *local_p)
{
    uint32_t n = c->cfg.machines[m].servers;
    if (n == 1 || n > CLI_RETRY_SPREAD) {
        struct cli_server *srv = cli_pick_any(c, m);
        *local_p = srv ? srv->id - rkv_cluster_server_id(c->cl, m, 0) : 0;
        return srv;
    }
    uint64_t all = n == 64 ? ~0ull : (1ull << n) - 1;
    if ((*failed & all) == all)
        *failed = 0;
    uint32_t first = rkv_cluster_server_id(c->cl, m, 0);
    uint32_t k0 = (uint32_t)rkv_rng_below(&c->port->rng, n);
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < n; i++) {
            uint32_t k = (k0 + i) % n;
            if (*failed >> k & 1)
                continue;
            struct cli_server *srv = cli_srv(c, first + k);
            if (!srv)
                return NULL;
            if (pass == 0 && cli_srv_dead(c, srv))
                continue;
            *local_p = k;
            return srv;
        }
    }
    assert(0 && "a server not seen failing is left");
    return NULL;
}

/* Whether a push that reached a server which then died may not be sent
 * again: outside durable mode nothing records what a machine applied, and
 * a sibling serving the same memory applied a sum a second time, the call
 * returning 0 (an outside tester: +7 for 6 acknowledged pushes of +1). An
 * assign applied twice leaves the same row. */
static int cli_retry_may_double(const struct rkv_client *c, const struct cli_op *o)
{
    return o->rows && !c->cfg.durable_dir[0] && o->op != RKV_OP_ASSIGN;
}

static int cli_maybe_applied(struct rkv_client *c, const char *what, uint32_t m, uint32_t srv_id)
{
    return rkv_errf(c->err, sizeof(c->err), -RKV_EPEERDEAD,
                    "%s: machine %u: server %u went before it acknowledged this push's part, "
                    "which it may have applied: not retried (outside durable mode nothing "
                    "records what a machine applied, so a retried sum, sgd, adagrad or custom "
                    "push could apply twice; durable mode retries it exactly once, and an "
                    "assign is retried)",
                    what, m, srv_id);
}

/* Retries group k's part of a call (machine m's) until it succeeds, fails
 * otherwise than by a dead server, or cfg.retry_ms passed; backoff 10 ms ..
 * 1 s. A push keeps its sequence, so a server that applied it already only
 * acks. Each attempt may go to another server of the machine: they serve
 * the same memory, and in durable mode they share the record of what each
 * client's pushes applied, and finish a push whose server died in it (the
 * apply journal, wal.c). Before, the first attempt waited out the whole
 * budget reconnecting to a server killed for good, its siblings unasked. */
static int cli_retry(struct rkv_client *c, const struct cli_op *o, const struct cli_groups *g,
                     cli_remote_fn fn, uint32_t k, uint64_t seq, const char *what)
{
    uint32_t m = g->mach[k];
    const struct rkv_port_ops *po = c->port->ops;
    uint64_t start = po->now_ns(c->port);
    uint64_t deadline = start + (uint64_t)c->cfg.retry_ms * 1000000ull;
    uint64_t backoff_ms = 10;
    uint32_t n_srv = c->cfg.machines[m].servers;
    /* A machine's server that stays unreachable keeps an attempt this long
     * before the next one asks a sibling (the whole budget when alone). */
    uint64_t slice_ms = c->cfg.retry_ms / (2ull * n_srv);
    if (slice_ms < 100)
        slice_ms = 100;
    uint64_t failed = 0;
    struct cli_op ro = *o;
    ro.seq = seq == LOST_FRESH ? 0 : seq;
    for (uint32_t attempt = 1;; attempt++) {
        uint64_t now = po->now_ns(c->port);
        uint32_t local = 0;
        struct cli_server *srv = cli_pick_retry(c, m, &failed, &local);
        if (!srv)
            return -RKV_ENOMEM;
        uint64_t left_ms = now < deadline ? (deadline - now) / 1000000ull : 0;
        if (n_srv > 1 && left_ms > slice_ms)
            left_ms = slice_ms;
        int rc = cli_revive(c, srv, left_ms), sent = 0;
        struct cli_req *r = NULL;
        if (rc == 0)
            rc = fn(c, &ro, srv, g->order + g->start[k], cli_group_cnt(g, k), &r);
        if (rc == 0) {
            sent = 1;
            if (!ro.seq && o->rows)
                ro.seq = r->id; /* sent once: every later attempt is the same push */
            rc = cli_wait_keep(c, &r, 1, c->cfg.timeout_ms, what);
            int arc = cli_abandon_slots(c, &r, 1);
            cli_release(c, &r, 1);
            if (arc < 0)
                return arc; /* the NIC may still use the rows: say so, retry nothing */
        }
        if (rc == 0) {
            RKV_LOGI(c->port, "%s: machine %u answered after %u attempts (%llu ms)", what, m,
                     attempt, (unsigned long long)((po->now_ns(c->port) - start) / 1000000ull));
            return 0;
        }
        if (rc != -RKV_EPEERDEAD)
            return rc;
        if (sent && cli_retry_may_double(c, o))
            return cli_maybe_applied(c, what, m, srv->id);
        if (n_srv <= CLI_RETRY_SPREAD)
            failed |= 1ull << local;
        if (atomic_load(&c->interrupted))
            return rkv_errf(c->err, sizeof(c->err), -RKV_EINTR,
                            "%s: machine %u: interrupted while retrying (%s)", what, m, c->err);
        now = po->now_ns(c->port);
        if (now >= deadline && n_srv == 1)
            return rkv_errf(c->err, sizeof(c->err), rc,
                            "%s: machine %u: its server is still unreachable after retrying for "
                            "%u ms (%u attempt%s): %s",
                            what, m, c->cfg.retry_ms, attempt, attempt == 1 ? "" : "s", c->err);
        if (now >= deadline)
            return rkv_errf(c->err, sizeof(c->err), rc,
                            "%s: machine %u: none of its %u servers answered in %u ms of retries "
                            "(%u attempt%s; the last, to server %u: %s)",
                            what, m, n_srv, c->cfg.retry_ms, attempt, attempt == 1 ? "" : "s",
                            srv->id, c->err);
        cli_nap(c, deadline, &backoff_ms, 1000);
    }
}

/* Whether local server `local` of this machine stopped cleanly beside
 * siblings that still serve it (rkv_mach_server_left). */
static int cli_srv_left(struct rkv_client *c, uint32_t local)
{
    struct rkv_mach mv;
    if (rkv_mach_attach(c->port, c->cfg.shm_prefix, c->cfg.machine_id, c->cfg.n_workers, 0, &mv,
                        NULL, 0) < 0)
        return 0;
    int left = rkv_mach_server_left(&mv, local);
    rkv_mach_close(&mv);
    return left;
}

/* Durable mode with retries: a pull reads this machine's rows from the
 * shard directly, so first every server of the machine seen dying must be
 * back (it may have made the shard anew), within retry_ms; but not one
 * that stopped cleanly beside siblings that still serve the machine (a
 * SIGTERM): every pull failed "server N of this machine still gone" for as
 * long as it stayed down, where a crashed one's restart was waited for (an
 * outside tester). */
static int cli_local_fresh(struct rkv_client *c)
{
    if (!c->cfg.durable_dir[0] || !c->cfg.retry_ms)
        return 0;
    const struct rkv_port_ops *po = c->port->ops;
    uint64_t deadline = po->now_ns(c->port) + (uint64_t)c->cfg.retry_ms * 1000000ull;
    uint32_t first = rkv_cluster_server_id(c->cl, c->cfg.machine_id, 0);
    uint32_t last = first + c->cfg.machines[c->cfg.machine_id].servers;
    for (uint32_t k = first; k < last; k++) {
        struct cli_server *srv = cli_srv(c, k);
        if (!srv)
            return -RKV_ENOMEM;
        if (cli_srv_dead(c, srv) && cli_srv_left(c, k - first))
            continue;
        for (uint64_t backoff_ms = 10; cli_srv_dead(c, srv);) {
            uint64_t now = po->now_ns(c->port);
            if (now >= deadline)
                return rkv_errf(c->err, sizeof(c->err), -RKV_EPEERDEAD,
                                "pull: server %u of this machine still gone after %u ms: %s", k,
                                c->cfg.retry_ms, c->err);
            int rc = cli_revive(c, srv, (deadline - now) / 1000000ull);
            if (rc == 0)
                break;
            if (rc != -RKV_EPEERDEAD)
                return rc;
            if (atomic_load(&c->interrupted))
                return rkv_errf(c->err, sizeof(c->err), -RKV_EINTR,
                                "pull: server %u of this machine: interrupted while retrying (%s)",
                                k, c->err);
            cli_nap(c, deadline, &backoff_ms, 1000);
        }
    }
    return 0;
}

/* Durable mode with retries: the shard this client maps for t was made
 * anew by a restarted server of this machine (RKV_SHARD_MOVED). The client
 * may not have heard of the restart yet (its progress task tells it when
 * the connection's end is seen), and reading on would give the old rows:
 * so it waits, within retry_ms, for this machine's servers to be seen
 * dying and back, which maps the new segments (cli_revive; a first hello
 * to one maps them too, cli_ensure). What is left undone, cli_check_local
 * refuses. */
static int cli_local_follow(struct rkv_client *c, const struct rkv_tensor *t)
{
    if (!c->cfg.durable_dir[0] || !c->cfg.retry_ms || !t->mapped ||
        atomic_load(&t->shard.hdr->closed) != RKV_SHARD_MOVED)
        return 0;
    const struct rkv_port_ops *po = c->port->ops;
    uint64_t deadline = po->now_ns(c->port) + (uint64_t)c->cfg.retry_ms * 1000000ull;
    uint32_t first = rkv_cluster_server_id(c->cl, c->cfg.machine_id, 0);
    uint32_t last = first + c->cfg.machines[c->cfg.machine_id].servers;
    RKV_LOGI(c->port, "tensor %s: this machine's shard was made anew; following it", t->meta.name);
    for (uint64_t backoff_ms = 1;;) {
        for (uint32_t k = first; k < last; k++) {
            struct cli_server *srv = cli_srv(c, k);
            if (!srv)
                return -RKV_ENOMEM;
            uint64_t now = po->now_ns(c->port);
            /* One this client never talked to (it only pulled here) is
             * dialled too: only a hello to a server of this machine maps
             * the new segments, and tells they are whole. */
            if ((srv->peer && !cli_srv_dead(c, srv)) || now >= deadline)
                continue;
            int rc = cli_revive(c, srv, (deadline - now) / 1000000ull);
            if (rc < 0 && rc != -RKV_EPEERDEAD)
                return rc;
        }
        /* The remap in cli_revive made t's mapping the new segment's. */
        if (!t->mapped || atomic_load(&t->shard.hdr->closed) != RKV_SHARD_MOVED)
            return 0;
        uint64_t now = po->now_ns(c->port);
        if (now >= deadline || atomic_load(&c->interrupted))
            return 0; /* cli_check_local refuses what is left undone */
        cli_nap(c, deadline, &backoff_ms, 100);
    }
}

/* After the first round: every part lost to a dead server (lost[], and the
 * requests that ended in -RKV_EPEERDEAD) is retried when configured. */
static int cli_settle(struct rkv_client *c, const struct cli_op *o, const struct cli_groups *g,
                      cli_remote_fn fn, struct cli_req **reqs, size_t nreq, uint64_t *lost, int wrc,
                      const char *what)
{
    if (!c->cfg.retry_ms)
        return wrc;
    int rc = 0, any = 0;
    assert(nreq <= g->n && g->n <= c->cfg.n_machines);
    cli_lock(c);
    for (size_t i = 0; i < nreq; i++) {
        struct cli_req *r = reqs[i];
        assert(cli_owns_srv(c, r->srv)); /* its machine indexes lost[] */
        int st = r->done ? r->status : -RKV_ETIMEDOUT;
        uint32_t k = cli_group_find(g, r->srv->machine);
        assert(k < g->n);
        if (st == -RKV_EPEERDEAD && cli_retry_may_double(c, o) && rc == 0)
            rc = cli_maybe_applied(c, what, r->srv->machine, r->srv->id);
        else if (st == -RKV_EPEERDEAD)
            lost[k] = r->id;
        else if (st < 0 && rc == 0)
            rc = st;
    }
    cli_unlock(c);
    if (rc < 0) /* failed for another reason too: no retry makes the call succeed */
        return wrc;
    for (uint32_t k = 0; k < g->n && rc == 0; k++) {
        if (!lost[k])
            continue;
        any = 1;
        rc = cli_retry(c, o, g, fn, k, lost[k], what);
    }
    return any ? rc : wrc;
}

/* The end of a push or pull whose first round sent reqs[0..nreq) (rc: how
 * the rest of the call went): waits for them, retries what was lost when
 * configured, releases them. A call that sent nothing (every row in this
 * machine's shard, nothing lost) has nothing to wait for or release, and
 * skips the client's lock. */
static int cli_finish(struct rkv_client *c, const struct cli_op *o, const struct cli_groups *g,
                      cli_remote_fn fn, struct cli_req **reqs, size_t nreq, uint64_t *lost, int rc,
                      const char *what)
{
    /* lost[] is whole only when the first round went through (rc == 0). */
    int any_lost = 0;
    for (uint32_t k = 0; nreq == 0 && rc == 0 && k < g->n && !any_lost; k++)
        any_lost = lost[k] != 0;
    if (nreq == 0 && !any_lost)
        return rc;
    int wrc = cli_wait_keep(c, reqs, nreq, c->cfg.timeout_ms, what);
    int arc = cli_abandon_slots(c, reqs, nreq);
    if (arc < 0)
        rc = arc; /* before any other error: the caller must keep the rows */
    else if (rc == 0)
        rc = cli_settle(c, o, g, fn, reqs, nreq, lost, wrc, what);
    cli_release(c, reqs, nreq);
    return rc;
}

/* Runs of consecutive positions: pieces of the caller's buffer that one
 * write moves (split at CLI_ZC_MAX_PIECE_BYTES). */
static uint32_t cli_runs(const uint32_t *pos, uint32_t cnt, size_t row_bytes)
{
    uint32_t runs = 0;
    uint64_t run_bytes = 0;
    for (uint32_t i = 0; i < cnt; i++) {
        if (i == 0 || pos[i] != pos[i - 1] + 1 || run_bytes + row_bytes > CLI_ZC_MAX_PIECE_BYTES) {
            runs++;
            run_bytes = 0;
        }
        run_bytes += row_bytes;
    }
    return runs;
}

/* Whether the part of a call for one server goes zero-copy: large enough,
 * and in runs long enough that a write per run beats one copy. */
static int cli_zc_part(const struct rkv_client *c, const struct cli_op *o, const uint32_t *pos,
                       uint32_t cnt)
{
    uint64_t bytes = (uint64_t)cnt * o->t->row_bytes;
    if (!o->mr || bytes < c->cfg.zero_copy_bytes || o->t->row_bytes > CLI_ZC_MAX_PIECE_BYTES)
        return 0;
    return bytes / cli_runs(pos, cnt, o->t->row_bytes) >= CLI_ZC_MIN_RUN_BYTES;
}

/* Encodes the header of a push of cnt rows (its payload_len counts the
 * rows, wherever they travel) into tx; returns where its ids go. */
static uint64_t *cli_push_enc(const struct rkv_client *c, const struct cli_op *o,
                              const struct cli_req *r, uint32_t cnt, struct rkv_tx *tx)
{
    uint8_t *buf = rkv_engine_tx_buf(tx);
    struct rkv_hdr h = {.type = RKV_MSG_PUSH,
                        .req_id = r->id,
                        .tensor_id = o->t->meta.id,
                        .sender = RKV_CLIENT_NODE_BASE + c->id,
                        .count = cnt,
                        .row_bytes = (uint32_t)o->t->row_bytes,
                        .op = (uint16_t)o->op,
                        .param = o->param};
    rkv_proto_enc_push(buf, &h, NULL, NULL);
    return (uint64_t *)(void *)(buf + RKV_PROTO_HDR_BYTES);
}

/* A push whose rows the NIC reads from the caller's buffer: the header
 * and ids go from an engine buffer, each run of rows as its own piece. */
static int cli_push_zc(struct rkv_client *c, const struct cli_op *o, struct cli_server *srv,
                       const uint32_t *pos, uint32_t cnt, struct cli_req **req_p)
{
    const struct rkv_tensor *t = o->t;
    size_t rb = t->row_bytes;
    uint64_t len = RKV_PROTO_HDR_BYTES + (uint64_t)cnt * 8;
    uint32_t n_ext = cli_runs(pos, cnt, rb);
    struct rkv_engine_ext *ext = malloc((size_t)n_ext * sizeof(*ext));
    if (!ext)
        return rkv_errf(c->err, sizeof(c->err), -RKV_ENOMEM, "out of memory");
    struct cli_req *r = NULL; /* for -O3 flow analysis: set by the call that succeeds */
    struct rkv_tx *tx;
    int rc =
        cli_begin(c, srv, RKV_MSG_PUSH_ACK, o->seq, cnt, (uint64_t)cnt * rb, len, "push", &r, &tx);
    if (rc < 0) {
        free(ext);
        return rc;
    }
    r->zc = 1;
    uint64_t *wids = cli_push_enc(c, o, r, cnt, tx);
    uint32_t k = 0;
    for (uint32_t i = 0; i < cnt; i++) {
        wids[i] = o->ids[pos[i]];
        const uint8_t *row = o->rows + (size_t)pos[i] * rb;
        struct rkv_engine_ext *last = k ? &ext[k - 1] : NULL;
        if (last && (const uint8_t *)last->addr + last->len == row &&
            last->len + rb <= CLI_ZC_MAX_PIECE_BYTES) {
            last->len += (uint32_t)rb;
            continue;
        }
        ext[k++] = (struct rkv_engine_ext){.addr = row, .len = (uint32_t)rb, .mr = o->mr};
    }
    assert(k == n_ext);
    rc = cli_submit_ext(c, srv, r, tx, (size_t)len, ext, k, req_p);
    free(ext);
    if (rc == 0)
        c->zst.pushes++;
    return rc;
}

static int cli_push_remote(struct rkv_client *c, const struct cli_op *o, struct cli_server *srv,
                           const uint32_t *pos, uint32_t cnt, struct cli_req **req_p)
{
    const struct rkv_tensor *t = o->t;
    if (cli_zc_part(c, o, pos, cnt) &&
        RKV_PROTO_HDR_BYTES + (uint64_t)cnt * (8 + t->row_bytes) <= c->cfg.max_slot_bytes)
        return cli_push_zc(c, o, srv, pos, cnt, req_p);
    const uint64_t *ids = o->ids;
    const uint8_t *rows = o->rows;
    uint64_t len = RKV_PROTO_HDR_BYTES + (uint64_t)cnt * (8 + t->row_bytes);
    struct cli_req *r = NULL; /* for -O3 flow analysis: set by the call that succeeds */
    struct rkv_tx *tx;
    int rc = cli_begin(c, srv, RKV_MSG_PUSH_ACK, o->seq, cnt, (uint64_t)cnt * t->row_bytes, len,
                       "push", &r, &tx);
    if (rc < 0)
        return rc;
    uint64_t *wids = cli_push_enc(c, o, r, cnt, tx);
    uint8_t *wrows = (uint8_t *)(wids + cnt);
    for (uint32_t i = 0; i < cnt; i++) {
        wids[i] = ids[pos[i]];
        memcpy(wrows + (size_t)i * t->row_bytes, rows + (size_t)pos[i] * t->row_bytes,
               t->row_bytes);
    }
    return cli_submit(c, srv, r, tx, (size_t)len, req_p);
}

/* The deadline of a call's rows in this machine's shared memory: a row
 * lock is waited for at most timeout_ms, as a server's reply is. */
static uint64_t cli_local_deadline(const struct rkv_client *c)
{
    return c->port->ops->now_ns(c->port) + (uint64_t)c->cfg.timeout_ms * 1000000ull;
}

/* The error of a row whose lock in this machine's shared memory was not
 * had within timeout_ms: a live holder that does not let go. Names the
 * holder as far as the lock word tells. */
static int cli_row_locked(struct rkv_client *c, const struct rkv_tensor *t, const char *what,
                          uint64_t gid, const char *done)
{
    char who[128];
    rkv_shard_holder_name(&t->shard, rkv_pbook_g2l(&t->pb, gid), who, sizeof(who));
    return rkv_errf(c->err, sizeof(c->err), -RKV_ETIMEDOUT,
                    "%s: row %llu of tensor '%s' is locked in this machine's shared memory by "
                    "%s, which has not let it go within %u ms (timeout_ms): stopped (SIGSTOP, "
                    "a debugger, a frozen cgroup) or stuck; %s",
                    what, (unsigned long long)gid, t->meta.name, who, c->cfg.timeout_ms, done);
}

/* Local rows go straight into the shard; remote ones are in flight. A row
 * whose lock is not had within timeout_ms fails the call: the rows before
 * it are applied, it and those after it are not. */
static int cli_push_local(struct rkv_client *c, struct rkv_tensor *t, const uint64_t *ids,
                          const uint8_t *rows, const uint32_t *pos, uint32_t cnt, int op,
                          double param)
{
    assert(t->mapped && cnt > 0); /* only this machine's rows, in its shard */
    /* cli_push_send checked the op before anything was sent. */
    assert(rkv_handler_check(c->ht, op, t->meta.dtype, t->shard.state != NULL) == 0);
    uint64_t deadline = cli_local_deadline(c);
    for (uint32_t i = 0; i < cnt; i++) {
        if (rkv_shard_push_row_until(&t->shard, t, c->ht, op, param, ids[pos[i]],
                                     rows + (size_t)pos[i] * t->row_bytes, deadline) < 0) {
            char done[200];
            snprintf(done, sizeof(done),
                     "of this call's %u rows on this machine, the %u before it (in the call's "
                     "order) were applied, it and the %u after it were not",
                     cnt, i, cnt - i - 1);
            c->local_writes |= i > 0;
            return cli_row_locked(c, t, "push", ids[pos[i]], done);
        }
    }
    c->local_writes = 1;
    return 0;
}

/* One push's requests in flight and what its end needs (a retry reads the
 * groups and the caller's ids and rows again). */
struct cli_push {
    struct cli_op o;
    struct cli_groups g;
    struct cli_req **reqs; /* a group's each */
    uint64_t *lost;        /* by group */
    size_t nreq;
    int rc; /* of sending and of the local part */
    int call_reg;
};

/* A push in flight (rkv_client_push_async). Its groups are its own copy:
 * the client's arrays serve the next call. */
struct rkv_pending {
    struct rkv_pending *prev, *next; /* the client's list */
    const struct rkv_client *owner;  /* a wait through another client is refused */
    struct cli_push cp;
    uint32_t *order, *start, *mach;
    struct cli_clock clock; /* the call's, counted by its wait */
    uint32_t open_reqs;     /* its requests in c->async_reqs: 0 once seen answered */
};

/* p, or the first newer push after it with requests still counted open
 * (a push of no remote request, all of its rows applied in place, has
 * none), or NULL. */
static struct rkv_pending *cli_pending_next_open(struct rkv_pending *p)
{
    while (p && p->open_reqs == 0)
        p = p->prev;
    return p;
}

static void cli_pending_free(struct rkv_client *c, struct rkv_pending *p)
{
    assert(c->async_reqs >= p->open_reqs);
    c->async_reqs -= p->open_reqs;
    if (c->pending_open == p) /* the next newer one with requests open */
        c->pending_open = cli_pending_next_open(p->prev);
    if (p->prev)
        p->prev->next = p->next;
    else if (c->pending == p)
        c->pending = p->next;
    if (p->next)
        p->next->prev = p->prev;
    else if (c->pending_tail == p)
        c->pending_tail = p->prev;
    free(p->order);
    free(p->start);
    free(p->mach);
    free(p->cp.reqs);
    free(p->cp.lost);
    free(p);
}

/* Makes the pin of every machine the push sends to before anything is
 * sent. A pin that could not be made after the send (out of memory) let
 * the next push_async take another server of that machine and overtake
 * this one there: "pushes to one row apply in issue order" broken in
 * silence, and in durable mode the overtaken push acknowledged as a
 * duplicate without being applied. Entries are never removed, so cli_pin
 * finds them. */
static int cli_pins_reserve(struct rkv_client *c, const struct cli_op *o,
                            const struct cli_groups *g)
{
    for (uint32_t k = 0; k < g->n; k++) {
        if (g->mach[k] == c->cfg.machine_id && o->t->mapped && !o->via_server)
            continue; /* applied in place (cli_push_local): no server to pin */
        if (!rkv_idmap_get(&c->pins, g->mach[k]))
            return rkv_errf(c->err, sizeof(c->err), -RKV_ENOMEM,
                            "push to '%s': out of memory for the order of pushes to machine %u; "
                            "nothing was applied",
                            o->t->meta.name, g->mach[k]);
    }
    return 0;
}

/* Counts a push in (delta 1) or out (-1) of the pins cli_pins_reserve
 * made for its machines. */
static void cli_pin(struct rkv_client *c, const struct cli_push *cp, int delta)
{
    assert(delta == 1 || delta == -1);
    assert(cp->nreq <= c->cfg.n_machines);
    for (size_t i = 0; i < cp->nreq; i++) {
        const struct cli_server *srv = cp->reqs[i]->srv;
        assert(cli_owns_srv(c, srv));
        uint64_t *v = rkv_idmap_find(&c->pins, srv->machine);
        assert(v); /* cli_pins_reserve made it */
        struct cli_pin pin = cli_pin_of(*v);
        /* Pushes in flight to a machine all went to its pinned server
         * (cli_pick). */
        assert(pin.n == 0 || pin.srv == srv->id);
        if (delta > 0 && pin.n == 0)
            pin.srv = srv->id;
        pin.n = (uint32_t)((int)pin.n + delta);
        assert(rkv_cluster_machine_of(c->cl, pin.srv) == srv->machine);
        *v = (uint64_t)pin.srv << 32 | pin.n;
    }
}

/* A part too big for one message failed in cli_begin after the parts for
 * other machines had been sent, and applied there, while this machine's
 * rows were not: refused here, before any is sent. */
static int cli_push_sizes_ok(struct rkv_client *c, const struct cli_op *o,
                             const struct cli_groups *g)
{
    const struct rkv_tensor *t = o->t;
    for (uint32_t k = 0; k < g->n; k++) {
        if (g->mach[k] == c->cfg.machine_id && t->mapped && !o->via_server)
            continue; /* applied in place (cli_push_local) */
        uint32_t cnt = cli_group_cnt(g, k);
        uint64_t len = cli_push_msg_bytes(t, cnt);
        /* One row too large for any push, where fewer ids cannot help: a
         * tensor another client made with a larger max_slot_bytes
         * (cli_init_row_fits refuses it here). */
        char hint[160];
        if (len > c->cfg.max_slot_bytes && cnt == 1)
            return rkv_errf(c->err, sizeof(c->err), -RKV_ELIMIT,
                            "push to '%s': one row for machine %u makes a %llu-byte message, "
                            "over max_slot_bytes %llu; nothing was applied (no push can carry "
                            "this row: %s)",
                            t->meta.name, g->mach[k], (unsigned long long)len,
                            (unsigned long long)c->cfg.max_slot_bytes,
                            cli_raise_hint(len, hint, sizeof(hint)));
        if (len > c->cfg.max_slot_bytes)
            return rkv_errf(c->err, sizeof(c->err), -RKV_ELIMIT,
                            "push to '%s': its %u rows for machine %u make a %llu-byte message, "
                            "over max_slot_bytes %llu; nothing was applied (push fewer ids at "
                            "once)",
                            t->meta.name, cnt, g->mach[k], (unsigned long long)len,
                            (unsigned long long)c->cfg.max_slot_bytes);
    }
    return 0;
}

/* Sends the remote parts of a push (into cp->reqs, cp->lost) and applies
 * the local one; cli_push_end collects the acks. A negative return means
 * nothing was sent; otherwise cp->rc says how sending went. */
static int cli_push_send(struct rkv_client *c, const char *name, const uint64_t *ids, size_t n,
                         const void *rows, int op, double param, struct cli_push *cp)
{
    struct rkv_tensor *t;
    int rc = cli_check_call(c, "push", ids, n, rows);
    if (rc < 0 || (rc = cli_tensor(c, name, &t)) < 0)
        return rc;
    /* Not "handler not registered" for 4..15: no registration makes one. */
    if (op < 0 || op >= RKV_OP_MAX || (op > RKV_OP_ADAGRAD && op < RKV_OP_CUSTOM))
        return rkv_errf(c->err, sizeof(c->err), -RKV_ENOHANDLER,
                        "push: op %d is no push op (0..3 are built in, custom ones %d..%d)", op,
                        RKV_OP_CUSTOM, RKV_OP_MAX - 1);
    /* A NaN or infinite learning rate turns every row it touches into NaN
     * on every server, for good; a negative one climbs the gradient (the
     * Python binding and torch.optim refuse it too; a custom op's param is
     * the handler's business). */
    if (rkv_handler_check_param(op, t->meta.dtype, param) < 0 && !isfinite(param))
        return rkv_errf(c->err, sizeof(c->err), -RKV_EINVAL,
                        "push to '%s': %s with learning rate %g; it must be finite", name,
                        op == RKV_OP_SGD ? "sgd" : "adagrad", param);
    if (rkv_handler_check_param(op, t->meta.dtype, param) < 0 && param > 0)
        return rkv_errf(c->err, sizeof(c->err), -RKV_EINVAL,
                        "push to '%s': %s with learning rate %.9g; a f32 tensor steps with a "
                        "f32 rate, and this one is past its largest (%.9g)",
                        name, op == RKV_OP_SGD ? "sgd" : "adagrad", param, (double)FLT_MAX);
    if (rkv_handler_check_param(op, t->meta.dtype, param) < 0)
        return rkv_errf(c->err, sizeof(c->err), -RKV_EINVAL,
                        "push to '%s': %s with learning rate %g; it must not be negative "
                        "(the op applies row -= lr * ...)",
                        name, op == RKV_OP_SGD ? "sgd" : "adagrad", param);
    /* The generic message below would read "op 3 on f32: invalid argument",
     * which tells nobody that the state is decided once, by init_data. */
    if (op == RKV_OP_ADAGRAD && !t->meta.with_state &&
        rkv_handler_check(c->ht, op, t->meta.dtype, 1) == 0)
        return rkv_errf(c->err, sizeof(c->err), -RKV_EINVAL,
                        "push to '%s': adagrad needs per-row optimizer state, and '%s' was "
                        "created without it (create it with with_state set: "
                        "rkv_tensor_desc.with_state = 1, init_data(..., with_state=True) in "
                        "Python)",
                        t->meta.name, t->meta.name);
    /* Nor does "op 2 on i32: dtype or row length mismatch" say that the
     * optimizers compute in floating point whatever the rows passed. */
    if ((op == RKV_OP_SGD || op == RKV_OP_ADAGRAD) &&
        rkv_handler_check(c->ht, op, t->meta.dtype, 1) == -RKV_EDTYPE)
        return rkv_errf(c->err, sizeof(c->err), -RKV_EDTYPE,
                        "push to '%s': %s needs a floating-point tensor (f32 or f64), and '%s' "
                        "holds %s; integer tensors take assign and sum",
                        t->meta.name, op == RKV_OP_SGD ? "sgd" : "adagrad", t->meta.name,
                        rkv_dtype_name(t->meta.dtype));
    /* Everything that can fail is checked before any row is sent or
     * applied, so that such a push applies nothing. A custom op is checked
     * against this client's handlers: the servers' cannot be seen from
     * here without a round trip per push (rkv.h). */
    if ((rc = rkv_handler_check(c->ht, op, t->meta.dtype, t->meta.with_state)) < 0)
        return rkv_errf(c->err, sizeof(c->err), rc, "push to '%s': op %d on %s%s: %s%s",
                        t->meta.name, op, rkv_dtype_name(t->meta.dtype),
                        t->meta.with_state ? " with state" : "", rkv_strerror(rc),
                        op >= RKV_OP_CUSTOM ? " (register it with rkv_client_register_handler "
                                              "too, as on every server)"
                                            : "");
    if ((rc = cli_group(c, t, ids, n, &cp->g)) < 0)
        return rc;
    if (!cp->reqs) { /* a blocking push: the client's arrays, grown by cli_group */
        cp->reqs = c->call_reqs;
        cp->lost = c->call_lost;
    }
    uint32_t lk = cli_group_find(&cp->g, c->cfg.machine_id);
    uint32_t lcnt = cli_group_cnt(&cp->g, lk);
    int via_server = c->cfg.durable_dir[0] != 0;
    if (lcnt > 0 && (rc = cli_check_local(c, t, "push", !via_server)) < 0)
        return rc;
    /* Durable mode: the ack of a server is the promise, so co-located rows
     * take the network too. */
    cp->o = (struct cli_op){
        .t = t, .ids = ids, .rows = rows, .op = op, .param = param, .via_server = via_server};
    if ((rc = cli_push_sizes_ok(c, &cp->o, &cp->g)) < 0)
        return rc;
    if ((rc = cli_pins_reserve(c, &cp->o, &cp->g)) < 0)
        return rc;
    cli_zc_begin(c, &cp->g, &cp->o, n, &cp->call_reg);
    rc = cli_fanout(c, &cp->o, &cp->g, cli_push_remote, cp->reqs, &cp->nreq, cp->lost);
    if (rc < 0 && cp->nreq == 0) {
        /* The first remote part could not be made or posted (out of
         * memory, a server known dead): nothing went out and nothing was
         * applied, so it is the call's own error. push_async returned a
         * handle whose wait failed, where rkv.h says errors found before
         * anything was sent come from push_async itself. */
        cli_zc_end(c, &cp->o, cp->call_reg);
        return rc;
    }
    if (rc == 0 && t->mapped && lcnt > 0 && !cp->o.via_server)
        rc = cli_push_local(c, t, ids, rows, cp->g.order + cp->g.start[lk], lcnt, op, param);
    cp->rc = rc;
    cli_pin(c, cp, 1);
    return 0;
}

static int cli_push_end(struct rkv_client *c, struct cli_push *cp)
{
    cli_pin(c, cp, -1); /* before cli_finish releases the requests */
    int rc = cli_finish(c, &cp->o, &cp->g, cli_push_remote, cp->reqs, cp->nreq, cp->lost, cp->rc,
                        "push");
    cli_zc_end(c, &cp->o, cp->call_reg);
    return rc;
}

/* Whether every request in reqs[0..n) has its answer (a reply, or a
 * failure the wait will report), waiting for them until deadline. Reads
 * nothing else of them: their push's wait still does that. */
static int cli_reqs_answered(struct rkv_client *c, struct cli_req **reqs, size_t n,
                             uint64_t deadline)
{
    cli_lock(c);
    struct cli_wait_set w = {.c = c, .reqs = reqs, .n = n};
    (void)rkv_engine_wait(c->eng, cli_reqs_done, &w, c->mu, c->cv, deadline);
    while (w.next < n && reqs[w.next]->done)
        w.next++;
    cli_unlock(c);
    return w.next == n;
}

/* Holds a push_async back while RKV_MAX_ASYNC_REQS requests of earlier
 * ones may be unanswered, until the oldest are: without it a caller that
 * issued faster than the servers answered queued without bound (4 KB a
 * push), until the engine took a peer that far behind for one that keeps
 * its credits and dropped the connection to a live server (65,536
 * messages waiting: every push in flight to it failed, and every later
 * call said it was gone). ps-lite's sender waits the same way. Gives up,
 * nothing sent, when the oldest is not answered within timeout_ms. */
static int cli_async_room(struct rkv_client *c)
{
    if (c->async_reqs < RKV_MAX_ASYNC_REQS)
        return 0;
    uint64_t deadline = c->port->ops->now_ns(c->port) + (uint64_t)c->cfg.timeout_ms * 1000000ull;
    while (c->async_reqs >= RKV_MAX_ASYNC_REQS) {
        struct rkv_pending *p = c->pending_open;
        assert(p && p->open_reqs > 0);
        if (!cli_reqs_answered(c, p->cp.reqs, p->cp.nreq, deadline)) {
            if (atomic_load(&c->interrupted))
                return rkv_errf(c->err, sizeof(c->err), -RKV_EINTR,
                                "push: interrupted while %llu requests of earlier pushes were "
                                "in flight (at most %u): nothing sent",
                                (unsigned long long)c->async_reqs, RKV_MAX_ASYNC_REQS);
            return rkv_errf(c->err, sizeof(c->err), -RKV_ETIMEDOUT,
                            "push: %llu requests of earlier pushes in flight (at most %u), and "
                            "the oldest had no answer within timeout_ms (%u ms): nothing sent; "
                            "wait for earlier pushes",
                            (unsigned long long)c->async_reqs, RKV_MAX_ASYNC_REQS,
                            c->cfg.timeout_ms);
        }
        c->async_reqs -= p->open_reqs;
        p->open_reqs = 0;
        c->pending_open = cli_pending_next_open(p->prev);
    }
    return 0;
}

static int cli_push_async(struct rkv_client *c, const char *name, const uint64_t *ids, size_t n,
                          const void *rows, int op, double param, struct rkv_pending **pending_p)
{
    *pending_p = NULL;
    int rc = cli_async_room(c);
    if (rc < 0)
        return rc;
    /* A push of n ids touches at most n machines. */
    size_t ng = n ? n : 1;
    struct rkv_pending *p = calloc(1, sizeof(*p));
    if (p) {
        p->owner = c;
        p->cp.reqs = calloc(ng, sizeof(*p->cp.reqs));
        p->cp.lost = calloc(ng, sizeof(*p->cp.lost));
        p->order = malloc(ng * sizeof(*p->order));
        p->start = malloc((ng + 1) * sizeof(*p->start));
        p->mach = malloc(ng * sizeof(*p->mach));
    }
    if (!p || !p->cp.reqs || !p->cp.lost || !p->order || !p->start || !p->mach) {
        if (p)
            cli_pending_free(c, p);
        return rkv_errf(c->err, sizeof(c->err), -RKV_ENOMEM, "push: out of memory");
    }
    rc = cli_push_send(c, name, ids, n, rows, op, param, &p->cp);
    if (rc < 0) {
        cli_pending_free(c, p);
        return rc;
    }
    if (n) /* with n = 0 the client's arrays may not exist yet */
        memcpy(p->order, p->cp.g.order, n * sizeof(*p->order));
    uint32_t k = p->cp.g.n;
    memcpy(p->start, p->cp.g.start, ((size_t)k + 1) * sizeof(*p->start));
    memcpy(p->mach, p->cp.g.mach, (size_t)k * sizeof(*p->mach));
    p->cp.g = (struct cli_groups){.order = p->order, .start = p->start, .mach = p->mach, .n = k};
    p->next = c->pending;
    if (p->next)
        p->next->prev = p;
    else
        c->pending_tail = p;
    c->pending = p;
    p->open_reqs = (uint32_t)p->cp.nreq;
    c->async_reqs += p->open_reqs;
    if (!c->pending_open && p->open_reqs) /* every older one's are answered */
        c->pending_open = p;
    *pending_p = p;
    return 0;
}

/* The rows and row bytes a push moves (its tensor known once sent). */
static uint64_t cli_push_bytes(const struct cli_push *cp, size_t n)
{
    return cp->o.t ? (uint64_t)n * cp->o.t->row_bytes : 0;
}

/* Whether p is one of c's pushes in flight, found without reading *p: a
 * handle waited for already is freed memory, and one of another client is
 * on that client's list. Searched from both ends at once, so that waits
 * in issue order (or in reverse) cost one step each, not the list. */
static int cli_pending_mine(const struct rkv_client *c, const struct rkv_pending *p)
{
    const struct rkv_pending *a = c->pending, *b = c->pending_tail;
    for (; a && b; a = a->next, b = b->prev) {
        if (a == p || b == p)
            return 1;
        if (a == b || a->next == b)
            return 0; /* met in the middle */
    }
    return 0;
}

/* A fork()ed child has the client's memory but none of its threads, and
 * shares its sockets with the parent: a child's pull waited out timeout_ms
 * (no progress task read the reply) while its request and credits, sent on
 * the parent's connection, made the server drop that connection ("peer
 * returned more credits than it was given"). Refused at once, before
 * anything is touched; the message is the child's own copy. */
static int cli_forked(struct rkv_client *c, const char *what)
{
    int pid = rkv_port_pid();
    if (c->pid == pid)
        return 0;
    return cli_refuse(c, -RKV_EINVAL,
                      "%s: this client was created by process %d; this is a forked child (process "
                      "%d): create a new client in the child",
                      what, c->pid, pid);
}

/* A client serves one application thread at a time (rkv.h): its call
 * state (grouping arrays, reply slots, the err buffer) is unshared. A call
 * made while another is under way, from a second thread or from a handler
 * the client runs, corrupted that state (a crash, or a wrong answer); it is
 * refused instead, before it touches any, and its message is the refused
 * thread's own (cli_refuse). */
static int cli_enter(struct rkv_client *c, const char *what)
{
    if (atomic_exchange_explicit(&c->busy, 1, memory_order_acquire))
        return cli_refuse(c, -RKV_EINVAL,
                          "%s: this client is in another call (used by two threads at once, or "
                          "from a handler it runs); a client serves one thread at a time: refused, "
                          "nothing done",
                          what);
    cli_owned(c);
    return 0;
}

static void cli_leave(struct rkv_client *c)
{
    assert(atomic_load_explicit(&c->busy, memory_order_relaxed));
    cli_owned(c);
    atomic_store_explicit(&c->busy, 0, memory_order_release);
}

/* cli_enter for a call that sends to servers: while rkv_client_interrupt
 * is on it is refused before anything is sent (a push sent and then cut
 * short would be applied while its caller was told it failed). */
static int cli_enter_sending(struct rkv_client *c, const char *what)
{
    int rc = cli_enter(c, what);
    if (rc == 0 && atomic_load(&c->interrupted)) {
        /* The message first: rkv_client_destroy frees the client once a
         * call leaves (its interrupt is what refuses this one). */
        rc = rkv_errf(c->err, sizeof(c->err), -RKV_EINTR,
                      "%s: interrupted (rkv_client_interrupt): refused, nothing sent", what);
        cli_leave(c);
    }
    return rc;
}

/* The body of every public rkv_client_* call that returns an int: call, a
 * cli_api_* function, between enter (cli_enter, or cli_enter_sending for a
 * call that sends) and cli_leave. A NULL client (a create whose failure
 * went unchecked) crashed every call (SIGSEGV); it is refused with no
 * client to hold a message, which rkv_client_errmsg(NULL) gives. */
#define CLI_CALL_VIA(enter, c, what, call)                                                         \
    do {                                                                                           \
        if (!(c))                                                                                  \
            return -RKV_EINVAL;                                                                    \
        int cli_rc_ = cli_forked((c), (what));                                                     \
        if (cli_rc_ == 0)                                                                          \
            cli_rc_ = enter((c), (what));                                                          \
        if (cli_rc_ < 0)                                                                           \
            return cli_rc_;                                                                        \
        cli_rc_ = (call);                                                                          \
        cli_leave(c);                                                                              \
        return cli_rc_;                                                                            \
    } while (0)
#define CLI_CALL(c, what, call) CLI_CALL_VIA(cli_enter, c, what, call)
#define CLI_CALL_SENDS(c, what, call) CLI_CALL_VIA(cli_enter_sending, c, what, call)
/* A push or pull of n ids: one of none moves no row and, its tensor known
 * here, sends nothing, so an interrupt does not refuse it (rkv.h: n = 0
 * returns 0; it was -RKV_EINTR). One that would ask server 0 for its
 * tensor is refused in cli_tensor. */
#define CLI_CALL_ROWS(c, what, n, call)                                                            \
    do {                                                                                           \
        if ((n) == 0)                                                                              \
            CLI_CALL(c, what, call);                                                               \
        CLI_CALL_SENDS(c, what, call);                                                             \
    } while (0)

static int cli_api_push_async(struct rkv_client *c, const char *name, const uint64_t *ids, size_t n,
                              const void *rows, int op, double param,
                              struct rkv_pending **pending_p)
{
    assert(c); /* rkv_client_* refused NULL */
    /* Nothing is sent without a place for the handle: it could never be
     * waited for. Not counted, as no push began. */
    if (!pending_p)
        return rkv_errf(c->err, sizeof(c->err), -RKV_EINVAL, "push: pending_p is NULL");
    struct cli_clock k = cli_call_begin_rows(c, RKV_STATS_PUSH);
    int rc = cli_push_async(c, name, ids, n, rows, op, param, pending_p);
    k = cli_call_sent(c, k); /* the wait counts it: other calls come between */
    if (rc < 0)
        return cli_call_end(c, RKV_STATS_PUSH, &k, rc, 0, 0);
    (*pending_p)->clock = k;
    return rc;
}

int rkv_client_push_async(struct rkv_client *c, const char *name, const uint64_t *ids, size_t n,
                          const void *rows, int op, double param, struct rkv_pending **pending_p)
{
    CLI_CALL_ROWS(c, "push_async", n,
                  cli_api_push_async(c, name, ids, n, rows, op, param, pending_p));
}

static int cli_api_wait(struct rkv_client *c, struct rkv_pending *pending)
{
    assert(c); /* rkv_client_* refused NULL */
    if (!pending)
        return rkv_errf(c->err, sizeof(c->err), -RKV_EINVAL, "wait: no push to wait for");
    /* A second wait for one push read and freed it again (a double free);
     * another client's push would be freed from the wrong list, and that
     * client's destroy then crashed on it. Neither is read: it stays that
     * client's. */
    if (!cli_pending_mine(c, pending))
        return rkv_errf(c->err, sizeof(c->err), -RKV_EINVAL,
                        "wait: that push is not one of this client's in flight: it was waited for "
                        "already, or made by another client (wait for it there)");
    assert(pending->owner == c);
    int rc = cli_push_end(c, &pending->cp);
    uint64_t n = pending->cp.g.start[pending->cp.g.n]; /* the push's ids */
    cli_call_end(c, RKV_STATS_PUSH, &pending->clock, rc, n, cli_push_bytes(&pending->cp, n));
    cli_pending_free(c, pending);
    return rc;
}

int rkv_client_wait(struct rkv_client *c, struct rkv_pending *pending)
{
    CLI_CALL(c, "wait", cli_api_wait(c, pending));
}

static int cli_api_push(struct rkv_client *c, const char *name, const uint64_t *ids, size_t n,
                        const void *rows, int op, double param)
{
    assert(c); /* rkv_client_* refused NULL */
    struct cli_clock k = cli_call_begin_rows(c, RKV_STATS_PUSH);
    struct cli_push cp = {.reqs = NULL}; /* cli_push_send sets them */
    int rc = cli_push_send(c, name, ids, n, rows, op, param, &cp);
    if (rc >= 0)
        rc = cli_push_end(c, &cp);
    k = cli_call_sent(c, k);
    return cli_call_end(c, RKV_STATS_PUSH, &k, rc, n, cli_push_bytes(&cp, n));
}

int rkv_client_push(struct rkv_client *c, const char *name, const uint64_t *ids, size_t n,
                    const void *rows, int op, double param)
{
    CLI_CALL_ROWS(c, "push", n, cli_api_push(c, name, ids, n, rows, op, param));
}

/* Every push in flight answered or timed out (their own waits still report
 * how): what a barrier promises covers them. */
static void cli_settle_pending(struct rkv_client *c)
{
    for (struct rkv_pending *p = c->pending; p; p = p->next)
        (void)cli_wait_keep(c, p->cp.reqs, p->cp.nreq, c->cfg.timeout_ms, "push");
}

/* The reply slot of a server, grown when a reply needs more room. After a
 * timeout it is abandoned (a late reply may still land in it) and the next
 * pull makes a fresh one; abandoned slots are freed with the client. */
static int cli_pslot(struct rkv_client *c, struct cli_server *srv, uint32_t cnt, uint64_t need)
{
    assert(cli_owns_srv(c, srv) && srv->peer); /* the slot is the connection's */
    assert(need >= RKV_PROTO_HDR_BYTES);
    if (srv->has_pslot && srv->pslot.cap >= need)
        return 0;
    if (srv->has_pslot) /* idle: no request of ours is in flight to srv */
        rkv_engine_slot_free(c->eng, srv->peer, srv->pslot.slot);
    srv->has_pslot = 0;
    int rc = rkv_engine_slot_alloc(c->eng, srv->peer, need, &srv->pslot);
    /* A reply of one row (a pull with the optimizer state replies two
     * rows' worth a row) that no slot can hold: fewer ids cannot help. */
    char hint[160];
    if (rc < 0 && cnt == 1 && need > c->cfg.max_slot_bytes)
        return rkv_errf(c->err, sizeof(c->err), rc,
                        "pull: one row's reply is %llu bytes, over max_slot_bytes %llu (%s)",
                        (unsigned long long)need, (unsigned long long)c->cfg.max_slot_bytes,
                        cli_raise_hint(need, hint, sizeof(hint)));
    if (rc < 0)
        return rkv_errf(c->err, sizeof(c->err), rc,
                        "pull: no %llu-byte reply slot: %s (max_slot_bytes %llu: pull fewer ids "
                        "at once)",
                        (unsigned long long)need, rkv_strerror(rc),
                        (unsigned long long)c->cfg.max_slot_bytes);
    srv->has_pslot = 1;
    return 0;
}

/* A pull request of cnt rows to srv (type PULL or PULL_ZC, len bytes),
 * its header set: the caller encodes it into *buf_p and submits. */
static int cli_pull_begin(struct rkv_client *c, const struct cli_op *o, struct cli_server *srv,
                          uint16_t type, uint32_t cnt, uint64_t len, struct cli_req **r_p,
                          struct rkv_tx **tx_p, struct rkv_hdr *h)
{
    int expect = type == RKV_MSG_PULL_ZC ? RKV_MSG_PULL_DONE : RKV_MSG_PULL_REPLY;
    /* An id costs the request 8 bytes (12 zero-copy), more than a reply row
     * of one 4-byte element: the request, not the reply, can be what is
     * over the limit, and cli_begin said so without what to do. */
    if (len > c->cfg.max_slot_bytes)
        return rkv_errf(c->err, sizeof(c->err), -RKV_ELIMIT,
                        "pull from '%s': its %u ids for server %u make a %llu-byte request, over "
                        "max_slot_bytes %llu (pull fewer ids at once)",
                        o->t->meta.name, cnt, srv->id, (unsigned long long)len,
                        (unsigned long long)c->cfg.max_slot_bytes);
    int rc =
        cli_begin(c, srv, expect, 0, cnt, (uint64_t)cnt * o->out_bytes, len, "pull", r_p, tx_p);
    if (rc < 0)
        return rc;
    (*r_p)->count = cnt;
    (*r_p)->row_bytes = o->out_bytes;
    *h = (struct rkv_hdr){.type = type,
                          .req_id = (*r_p)->id,
                          .tensor_id = o->t->meta.id,
                          .sender = RKV_CLIENT_NODE_BASE + c->id,
                          .count = cnt,
                          .row_bytes = (uint32_t)o->t->row_bytes,
                          .op = (uint16_t)o->op,
                          .param = o->param};
    return 0;
}

/* A pull whose rows the server writes straight into the caller's buffer
 * (each at its position), then says PULL_DONE. */
static int cli_pull_zc(struct rkv_client *c, const struct cli_op *o, struct cli_server *srv,
                       const uint32_t *pos, uint32_t cnt, struct cli_req **req_p)
{
    uint64_t len = RKV_PROTO_HDR_BYTES + RKV_PROTO_SLOT_BYTES + (uint64_t)cnt * 12;
    struct cli_req *r = NULL; /* for -O3 flow analysis: set by the call that succeeds */
    struct rkv_tx *tx;
    struct rkv_hdr h;
    int rc = cli_pull_begin(c, o, srv, RKV_MSG_PULL_ZC, cnt, len, &r, &tx, &h);
    if (rc < 0)
        return rc;
    r->zc = 1;
    uint8_t *buf = rkv_engine_tx_buf(tx);
    struct rkv_slot_desc dst = {
        .addr = (uint64_t)(uintptr_t)o->out, .rkey = o->mr->rkey, .cap = o->span};
    rkv_proto_enc_pull_zc(buf, &h, &dst, NULL, NULL);
    uint64_t *wids = (uint64_t *)(void *)(buf + RKV_PROTO_HDR_BYTES + RKV_PROTO_SLOT_BYTES);
    uint32_t *wpos = (uint32_t *)(void *)(wids + cnt);
    for (uint32_t i = 0; i < cnt; i++) {
        wids[i] = o->ids[pos[i]];
        wpos[i] = pos[i];
    }
    rc = cli_submit(c, srv, r, tx, (size_t)len, req_p);
    if (rc == 0)
        c->zst.pulls++;
    return rc;
}

static int cli_pull_remote(struct rkv_client *c, const struct cli_op *o, struct cli_server *srv,
                           const uint32_t *pos, uint32_t cnt, struct cli_req **req_p)
{
    int rc = cli_alive(c, srv, "pull");
    if (rc < 0)
        return rc;
    if (cli_zc_part(c, o, pos, cnt))
        return cli_pull_zc(c, o, srv, pos, cnt, req_p);
    uint64_t need = RKV_PROTO_HDR_BYTES + (uint64_t)cnt * o->out_bytes;
    rc = cli_ensure(c, srv);
    if (rc == 0)
        rc = cli_pslot(c, srv, cnt, need);
    if (rc < 0)
        return rc;
    uint64_t len = RKV_PROTO_HDR_BYTES + RKV_PROTO_SLOT_BYTES + (uint64_t)cnt * 8;
    struct cli_req *r = NULL; /* for -O3 flow analysis: set by the call that succeeds */
    struct rkv_tx *tx;
    struct rkv_hdr h;
    if ((rc = cli_pull_begin(c, o, srv, RKV_MSG_PULL, cnt, len, &r, &tx, &h)) < 0)
        return rc;
    r->out = o->out;
    r->pos = pos;
    uint8_t *buf = rkv_engine_tx_buf(tx);
    rkv_proto_enc_pull(buf, &h, &srv->pslot, NULL);
    uint64_t *wids = (uint64_t *)(void *)(buf + RKV_PROTO_HDR_BYTES + RKV_PROTO_SLOT_BYTES);
    for (uint32_t i = 0; i < cnt; i++)
        wids[i] = o->ids[pos[i]];
    return cli_submit(c, srv, r, tx, (size_t)len, req_p);
}

/* Closes the connection to srv and waits until the NIC let go of it: a
 * zero-copy request must not touch the caller's memory once the call
 * returned. A connection that broke by itself (srv is dead already) is only
 * waited for. For one we close, requests still waiting time out now and the
 * next request to srv connects again. -RKV_EINUSE when the close did not
 * come within the timeout. */
static int cli_drop(struct rkv_client *c, struct cli_server *srv, int unanswered)
{
    assert(cli_owns_srv(c, srv) && srv->peer);
    if (unanswered)
        RKV_LOGW(c->port, "server %u did not answer a zero-copy request in time; reconnecting",
                 srv->id);
    int rc = rkv_engine_drop_peer_wait(c->eng, srv->peer, c->cfg.timeout_ms) < 0
                 ? cli_still_in_use(c, srv)
                 : 0;
    if (!unanswered)
        return rc;
    cli_lock(c);
    srv->dead = 1;
    srv->redial = 1;
    srv->has_pslot = 0; /* the slot belonged to the old connection */
    for (struct cli_req *r = srv->reqs; r; r = r->snext)
        if (!r->done)
            cli_req_finish(c, r, -RKV_ETIMEDOUT, "no answer in time; connection closed");
    c->zst.drops++;
    cli_unlock(c);
    return rc;
}

/* After waiting for reqs: a server that did not answer may still write into
 * its reply slot (abandoned: the next pull makes another), or, for a
 * zero-copy request, read or write the caller's rows (closed). Returns
 * -RKV_EINUSE when a connection did not close in time. */
static int cli_abandon_slots(struct rkv_client *c, struct cli_req **reqs, size_t n)
{
    struct cli_server **drop = c->drop_srv;
    int *unanswered = c->drop_unanswered;
    size_t n_drop = 0;
    assert(n <= c->cfg.n_machines || n == 1); /* one call's requests, or one retry's */
    cli_lock(c);
    for (size_t i = 0; i < n; i++) {
        struct cli_req *r = reqs[i];
        if (!r->srv)
            continue;
        assert(cli_owns_srv(c, r->srv));
        /* A connection that broke may not be closed yet: wait for that too. */
        int lost = !r->done || r->status == -RKV_EPEERDEAD;
        if (r->zc && lost && n_drop < c->grp_cap && r->srv->peer) {
            unanswered[n_drop] = !r->done;
            drop[n_drop++] = r->srv;
        } else if (!r->done && r->expect == RKV_MSG_PULL_REPLY)
            r->srv->has_pslot = 0;
    }
    cli_unlock(c);
    int rc = 0;
    for (size_t i = 0; i < n_drop; i++) {
        int drc = cli_drop(c, drop[i], unanswered[i]);
        if (rc == 0)
            rc = drc;
    }
    return rc;
}

/* Registers the caller's rows when some remote part of the call will go
 * zero-copy: from the cache (rkv_client_register), else for this call only
 * (*call_reg_p = 1; cli_zc_end deregisters it). */
static void cli_zc_begin(struct rkv_client *c, const struct cli_groups *g, struct cli_op *o,
                         size_t n, int *call_reg_p)
{
    *call_reg_p = 0;
    o->mr = NULL;
    o->cached = 0;
    o->span = (uint64_t)n * o->t->row_bytes;
    uint64_t best = 0;
    for (uint32_t k = 0; k < g->n; k++)
        if (g->mach[k] != c->cfg.machine_id || !o->t->mapped || o->via_server)
            best = best > cli_group_cnt(g, k) ? best : cli_group_cnt(g, k);
    if (!c->cfg.zero_copy_bytes || best * o->t->row_bytes < c->cfg.zero_copy_bytes)
        return;
    const void *base = o->out ? (const void *)o->out : (const void *)o->rows;
    /* Held until cli_zc_end: a push_async reads through it until its wait,
     * and the caller may deregister the region (or a register evict it)
     * before then. */
    o->mr = rkv_regcache_take(rkv_engine_regcache(c->eng), base, o->span);
    if (o->mr) {
        o->cached = 1;
        c->zst.cache_hits++;
        return;
    }
    /* Remote write access for pulls; pushes only need the NIC to read. */
    int access = o->out ? RKV_ACCESS_REMOTE_WRITE : RKV_ACCESS_LOCAL;
    if (rkv_engine_reg_mr(c->eng, (void *)(uintptr_t)base, o->span, access, &o->mr) < 0) {
        RKV_LOGD(c->port, "cannot register %llu bytes of rows: copying them instead",
                 (unsigned long long)o->span);
        o->mr = NULL;
        return;
    }
    *call_reg_p = 1;
    c->zst.call_regs++;
}

/* Every zero-copy request of the call is answered or its connection closed
 * (cli_abandon_slots): the call's own registration can go. */
static void cli_zc_end(struct rkv_client *c, struct cli_op *o, int call_reg)
{
    if (call_reg)
        rkv_engine_dereg_mr(c->eng, o->mr);
    else if (o->cached)
        rkv_regcache_put(rkv_engine_regcache(c->eng), o->mr);
    o->mr = NULL;
    o->cached = 0;
}

static int cli_api_pull_with(struct rkv_client *c, const char *name, const uint64_t *ids, size_t n,
                             void *rows_out, int handler, double param);

int rkv_client_pull(struct rkv_client *c, const char *name, const uint64_t *ids, size_t n,
                    void *rows_out)
{
    CLI_CALL_ROWS(c, "pull", n, cli_api_pull_with(c, name, ids, n, rows_out, RKV_PULL_ROWS, 0));
}

static int cli_api_pull_len(struct rkv_client *c, const char *name, int handler, uint32_t *len_p)
{
    assert(c); /* rkv_client_* refused NULL */
    if (!len_p)
        return rkv_errf(c->err, sizeof(c->err), -RKV_EINVAL, "pull_len: len_p is NULL");
    struct rkv_tensor *t;
    /* As meta: after a shutdown it answered a tensor this client had seen
     * from its table and refused one it had not. */
    int rc = cli_check_open(c, "pull_len");
    if (rc < 0 || (rc = cli_tensor(c, name, &t)) < 0)
        return rc;
    return rkv_pull_check(c->pt, handler, t, len_p, c->err, sizeof(c->err));
}

int rkv_client_pull_len(struct rkv_client *c, const char *name, int handler, uint32_t *len_p)
{
    CLI_CALL_SENDS(c, "pull_len", cli_api_pull_len(c, name, handler, len_p));
}

static int cli_spans_overlap(const void *a, size_t a_len, const void *b, size_t b_len)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return a_len && b_len && x < y + b_len && y < x + a_len;
}

static int cli_pull_with(struct rkv_client *c, const char *name, const uint64_t *ids, size_t n,
                         void *rows_out, int handler, double param, uint64_t *bytes_p)
{
    struct rkv_tensor *t;
    struct cli_groups g;
    uint32_t out_len;
    int rc = cli_check_call(c, "pull", ids, n, rows_out);
    if (rc < 0 || (rc = cli_tensor(c, name, &t)) < 0)
        return rc;
    /* Unknown handlers and tensors they do not apply to fail here, before
     * anything is sent. */
    if ((rc = rkv_pull_check(c->pt, handler, t, &out_len, c->err, sizeof(c->err))) < 0)
        return rc;
    if ((rc = cli_group(c, t, ids, n, &g)) < 0)
        return rc;
    size_t out_bytes = (size_t)out_len * rkv_dtype_size(t->meta.dtype);
    *bytes_p = (uint64_t)n * out_bytes;
    /* ids inside rows_out (a buffer reused in place) were overwritten by
     * the rows pulled before them, and the later ones read as other ids. */
    uint64_t *ids_copy = NULL;
    if (cli_spans_overlap(ids, n * sizeof(*ids), rows_out, n * out_bytes)) {
        if (!(ids_copy = malloc(n * sizeof(*ids))))
            return rkv_errf(c->err, sizeof(c->err), -RKV_ENOMEM, "pull: out of memory");
        memcpy(ids_copy, ids, n * sizeof(*ids));
        ids = ids_copy;
    }
    struct cli_req **reqs = c->call_reqs;
    uint64_t *lost = c->call_lost;
    size_t nreq;
    uint32_t lk = cli_group_find(&g, c->cfg.machine_id);
    struct cli_op o = {
        .t = t, .ids = ids, .out = rows_out, .op = handler, .param = param, .out_bytes = out_bytes};
    if (cli_group_cnt(&g, lk) > 0 && t->mapped &&
        ((rc = cli_local_follow(c, t)) < 0 || (rc = cli_check_local(c, t, "pull", 1)) < 0 ||
         (rc = cli_local_fresh(c)) < 0)) {
        free(ids_copy);
        return rc;
    }
    int call_reg = 0;
    /* Zero copy writes rows as stored: a handler's replies are staged. */
    if (handler == RKV_PULL_ROWS)
        cli_zc_begin(c, &g, &o, n, &call_reg);
    rc = cli_fanout(c, &o, &g, cli_pull_remote, reqs, &nreq, lost);
    if (rc == 0 && t->mapped) {
        uint64_t deadline = cli_local_deadline(c);
        for (uint32_t i = lk < g.n ? g.start[lk] : 0; rc == 0 && lk < g.n && i < g.start[lk + 1];
             i++) {
            uint32_t p = g.order[i];
            uint8_t *out = (uint8_t *)rows_out + (size_t)p * out_bytes;
            if (rkv_pull_row(&t->shard, t, c->pt, handler, param, ids[p], out_len, out, deadline) <
                0)
                rc = cli_row_locked(c, t, "pull", ids[p], "the pull failed");
        }
    }
    rc = cli_finish(c, &o, &g, cli_pull_remote, reqs, nreq, lost, rc, "pull");
    cli_zc_end(c, &o, call_reg);
    free(ids_copy);
    return rc;
}

static int cli_api_pull_with(struct rkv_client *c, const char *name, const uint64_t *ids, size_t n,
                             void *rows_out, int handler, double param)
{
    assert(c); /* rkv_client_* refused NULL */
    struct cli_clock k = cli_call_begin_rows(c, RKV_STATS_PULL);
    uint64_t bytes = 0;
    int rc = cli_pull_with(c, name, ids, n, rows_out, handler, param, &bytes);
    k = cli_call_sent(c, k);
    return cli_call_end(c, RKV_STATS_PULL, &k, rc, n, bytes);
}

int rkv_client_pull_with(struct rkv_client *c, const char *name, const uint64_t *ids, size_t n,
                         void *rows_out, int handler, double param)
{
    CLI_CALL_ROWS(c, "pull_with", n, cli_api_pull_with(c, name, ids, n, rows_out, handler, param));
}

/* ---- barrier, shutdown ---- */

/* Before a barrier of a worker that pushed into its machine's shared
 * memory: a barrier says every worker's pushes are visible, and rows in
 * memory no server of the machine serves any more are not. With every
 * server of its machine killed, such a worker went on pushing into the
 * orphaned memory and its barrier succeeded (an outside tester, not
 * durable): the pushes were lost without a word. Each server's process is
 * read from the machine's segment (mapped for the look). */
static int cli_local_served(struct rkv_client *c)
{
    const struct rkv_port_ops *o = c->port->ops;
    uint32_t m = c->cfg.machine_id, n = c->cfg.machines[m].servers;
    if (!c->local_writes || !o->proc_alive || n > RKV_MACH_SERVERS)
        return 0;
    struct rkv_mach mv;
    if (rkv_mach_attach(c->port, c->cfg.shm_prefix, m, c->cfg.n_workers, 0, &mv, NULL, 0) < 0)
        return rkv_errf(c->err, sizeof(c->err), -RKV_EPEERDEAD,
                        "barrier: machine %u's shared memory is gone (its servers with it?): the "
                        "pushes this worker applied there since its last barrier are served by "
                        "no one",
                        m);
    uint32_t alive = 0;
    for (uint32_t i = 0; i < n && !alive; i++) {
        uint64_t proc = atomic_load(&mv.hdr->reader_proc[i]);
        alive = !proc || o->proc_alive(c->port, proc); /* not attached yet: not known dead */
    }
    rkv_mach_close(&mv);
    if (!alive)
        return rkv_errf(c->err, sizeof(c->err), -RKV_EPEERDEAD,
                        "barrier: every server of machine %u (this worker's) is gone: the pushes "
                        "this worker applied into its shared memory since its last barrier are "
                        "served by no one",
                        m);
    c->local_writes = 0;
    return 0;
}

static int cli_barrier(struct rkv_client *c)
{
    struct rkv_hdr h = {.type = RKV_MSG_BARRIER};
    struct cli_req *r = NULL; /* for -O3 flow analysis: set by the call that succeeds */
    int rc = cli_check_open(c, "barrier");
    if (rc < 0)
        return rc;
    cli_settle_pending(c);
    if ((rc = cli_local_served(c)) < 0)
        return rc;
    h.count = c->barriers + 1;
    /* A barrier waits for the slowest worker, however slow (an evaluation
     * pass, a checkpoint), as DGL's and ps-lite's do: not timeout_ms. It
     * failed after timeout_ms, and the caller's next barrier was then the
     * same one again, done at once if the others had entered meanwhile: a
     * "next" barrier that synchronised nothing. Each timeout_ms it is sent
     * again (server 0 counts a client once) and says it still waits; it
     * fails when server 0 is gone (past retry_ms) or says a worker left. */
    const struct rkv_port_ops *po = c->port->ops;
    uint64_t start = po->now_ns(c->port);
    /* Rate-limited: with a short timeout_ms (1 ms) a worker waiting 2 s
     * for a late one wrote 1,829 of these lines. */
    struct rkv_ratelim lim = {0};
    while ((rc = cli_call0(c, &h, NULL, c->cfg.timeout_ms, c->cfg.retry_ms, "barrier", &r)) ==
           -RKV_ETIMEDOUT)
        rkv_port_warn_limited(
            c->port, &lim,
            "barrier %u: still waiting after %llu s for every worker to enter it (server 0 "
            "answers for all %u)",
            h.count, (unsigned long long)((po->now_ns(c->port) - start) / 1000000000ull),
            c->cfg.n_workers);
    /* The whole wait, not the last timeout_ms slice of it: an interrupt
     * 1.5 s into a barrier said "interrupted after 499 ms" (an outside
     * tester). */
    if (rc == -RKV_EINTR && strstr(c->err, "interrupted after")) /* not a redial's */
        rkv_errf(c->err, sizeof(c->err), rc,
                 "barrier %u: server 0: interrupted after %llu ms of waiting for every worker "
                 "to enter it",
                 h.count, (unsigned long long)((po->now_ns(c->port) - start) / 1000000ull));
    if (rc < 0)
        return rc;
    cli_release(c, &r, 1);
    c->barriers++;
    return 0;
}

static int cli_api_barrier(struct rkv_client *c)
{
    assert(c); /* rkv_client_* refused NULL */
    struct cli_clock k = cli_call_begin(c);
    return cli_call_end(c, RKV_STATS_BARRIER, &k, cli_barrier(c), 0, 0);
}

int rkv_client_barrier(struct rkv_client *c)
{
    CLI_CALL_SENDS(c, "barrier", cli_api_barrier(c));
}

static int cli_api_init_data(struct rkv_client *c, const struct rkv_tensor_desc *d)
{
    assert(c); /* rkv_client_* refused NULL */
    struct cli_clock k = cli_call_begin(c);
    return cli_call_end(c, RKV_STATS_INIT, &k, cli_init_data(c, d), 0, 0);
}

int rkv_client_init_data(struct rkv_client *c, const struct rkv_tensor_desc *d)
{
    CLI_CALL_SENDS(c, "init_data", cli_api_init_data(c, d));
}

/* After shutdown's wait: the servers whose connection died before they
 * answered (they crashed, maybe after the send; with retries they may be
 * back) are asked again, each within budget_ms. Any other failure is the
 * call's as it was: nothing is asked again then. */
static int cli_shutdown_again(struct rkv_client *c, struct cli_req **reqs, size_t n,
                              uint32_t budget_ms)
{
    int other = 0;
    cli_lock(c);
    for (size_t k = 0; k < n; k++) {
        int st = reqs[k]->done ? reqs[k]->status : -RKV_ETIMEDOUT;
        other |= st < 0 && st != -RKV_EPEERDEAD;
    }
    cli_unlock(c);
    if (other)
        return -RKV_EPEERDEAD; /* cli_wait_keep's message names the first */
    int rc = 0;
    char first[sizeof(c->err)] = "";
    for (size_t k = 0; k < n; k++) {
        if (reqs[k]->status != -RKV_EPEERDEAD) /* done: the engine writes it no more */
            continue;
        struct cli_server *srv = reqs[k]->srv;
        uint64_t start = c->port->ops->now_ns(c->port), backoff_ms = 10;
        int src = -RKV_EPEERDEAD;
        for (uint32_t attempt = 1;; attempt++) {
            if ((src = cli_again(c, srv, src, 1, start, budget_ms, &backoff_ms, attempt,
                                 "shutdown")) < 0)
                break;
            struct rkv_hdr h = {.type = RKV_MSG_SHUTDOWN};
            struct cli_req *r = NULL;
            if ((src = cli_send_simple(c, srv, &h, NULL, &r, "shutdown")) == 0 &&
                (src = cli_wait(c, &r, 1, c->cfg.timeout_ms, "shutdown")) == 0)
                break;
        }
        if (src < 0 && rc == 0) {
            rc = src;
            snprintf(first, sizeof(first), "%s", c->err);
        }
    }
    return rc < 0 ? rkv_errf(c->err, sizeof(c->err), rc, "%s", first) : 0;
}

static int cli_shutdown_servers(struct rkv_client *c)
{
    /* Not cli_check_open: after another client's shutdown (its notice)
     * this one asks whatever that one did not reach. */
    int rc = 0;
    if (c->stopping)
        return rkv_errf(c->err, sizeof(c->err), -RKV_ESHUTDOWN,
                        "shutdown: the servers were asked to exit (rkv_client_shutdown_servers)");
    /* It said every server "could not be asked to exit, and may still run". */
    if (c->observer)
        return rkv_errf(c->err, sizeof(c->err), -RKV_EINVAL,
                        "shutdown: an observer client only lists tensors and reads their metas; "
                        "a worker shuts the servers down");
    struct cli_req **reqs = calloc(c->n_servers, sizeof(*reqs));
    uint8_t *asked = calloc(c->n_servers, 1);
    uint32_t *order = calloc(c->n_servers, sizeof(*order));
    if (!reqs || !asked || !order) {
        free(order);
        free(reqs);
        free(asked);
        return rkv_errf(c->err, sizeof(c->err), -RKV_ENOMEM, "shutdown: out of memory");
    }
    /* Each machine's first server last: it holds the machine's memory, and
     * a sibling still restarting comes back only while it does (asked
     * first, server 2 of a machine stopped, and its sibling server 3,
     * restarted a moment later, waited for the machine for ever and
     * outlived the shutdown: rkv swarm, seed 90905). */
    size_t n_order = 0;
    for (uint32_t m = 0; m < c->cfg.n_machines; m++) {
        uint32_t first = rkv_cluster_server_id(c->cl, m, 0);
        for (uint32_t l = 1; l < c->cfg.machines[m].servers; l++)
            order[n_order++] = first + l;
        order[n_order++] = first;
    }
    assert(n_order == c->n_servers);
    size_t n = 0;
    /* Every server is asked, whatever became of the others; the first
     * failure is the call's, with the servers that could not be asked. */
    char first[sizeof(c->err)] = "", unreached[96] = "";
    uint32_t n_unreached = 0;
    /* With retries on, a server seen dying may be back (restarted), and
     * it has to stop as well; a short try, it is not worth a long wait. */
    uint32_t budget_ms = c->cfg.retry_ms < 2000 ? c->cfg.retry_ms : 2000;
    cli_lock(c);
    c->stopping = 1;
    cli_unlock(c);
    /* Servers seen dying first: a restarting one comes back only while
     * another server of its machine still holds the machine's memory (the
     * last one to stop removes it, and a restarted sibling would then wait
     * for a restore that never comes and outlive the shutdown). */
    for (uint32_t k = 0; k < 2 * c->n_servers; k++) {
        uint32_t i = order[k % c->n_servers];
        /* A server without state yet was never seen dying: the first pass
         * skips it without making its state. */
        uint64_t *v = k < c->n_servers ? rkv_idmap_find(&c->srvs, i) : NULL;
        if (k < c->n_servers && !v)
            continue;
        struct cli_server *srv = v ? (struct cli_server *)(uintptr_t)*v : cli_srv(c, i);
        if (!srv) {
            rc = rc ? rc : -RKV_ENOMEM;
            break;
        }
        if (k < c->n_servers ? !cli_srv_dead(c, srv) || cli_srv_redial(c, srv) : asked[i])
            continue;
        asked[i] = 1;
        cli_lock(c);
        int stopped = srv->stopped;
        cli_unlock(c);
        if (stopped) /* it said it exits: asked by another client */
            continue;
        struct rkv_hdr h = {.type = RKV_MSG_SHUTDOWN};
        int src = 0;
        if (cli_srv_dead(c, srv) && !cli_srv_redial(c, srv)) {
            src = budget_ms ? cli_revive(c, srv, budget_ms) : cli_dead(c, srv, "shutdown");
            if (src < 0 && src != -RKV_EPEERDEAD)
                src = rkv_errf(c->err, sizeof(c->err), -RKV_EPEERDEAD, "shutdown: server %u: %s",
                               srv->id, c->err);
        }
        /* A send refused by a dead connection the client has not heard of
         * yet (cli_again) meets a server that died since; it may be back. */
        uint64_t start = c->port->ops->now_ns(c->port), backoff_ms = 10;
        for (uint32_t attempt = 1; src == 0; attempt++) {
            if ((src = cli_send_simple(c, srv, &h, NULL, &reqs[n], "shutdown")) == 0) {
                n++;
                break;
            }
            src = cli_again(c, srv, src, 1, start, budget_ms, &backoff_ms, attempt, "shutdown");
        }
        /* Its HELLO answered "shutting down": another client asked it
         * already, and it exits; that was the point (it read "could not
         * ask server N to exit ... may still run", an outside tester). */
        if (src == 0 || src == -RKV_ESHUTDOWN)
            continue;
        if (rc == 0) {
            rc = src;
            snprintf(first, sizeof(first), "%s", c->err);
        }
        size_t used = strlen(unreached);
        if (n_unreached++ < 8 && used + 12 < sizeof(unreached))
            snprintf(unreached + used, sizeof(unreached) - used, "%s%u", used ? ", " : "", srv->id);
    }
    int wrc = cli_wait_keep(c, reqs, n, c->cfg.timeout_ms, "shutdown");
    if (wrc == -RKV_EPEERDEAD && budget_ms)
        wrc = cli_shutdown_again(c, reqs, n, budget_ms);
    cli_release(c, reqs, n);
    free(order);
    free(asked);
    free(reqs);
    if (rc < 0) {
        /* first is that server's own message, often "shutdown: ..." too. */
        const char *why = strncmp(first, "shutdown: ", 10) ? first : first + 10;
        return rkv_errf(c->err, sizeof(c->err), rc,
                        "shutdown: could not ask %s %s%s to exit (%u in all; a server not asked "
                        "may still run); the first: %s",
                        n_unreached == 1 ? "server" : "servers", unreached,
                        n_unreached > 8 ? ", ..." : "", n_unreached, why);
    }
    return wrc;
}

/* ---- life cycle ---- */

/* Machines whose host the config leaves empty registered their servers
 * with server 0: ask it where everybody is. */
static int cli_fetch_table(struct rkv_client *c, uint64_t wait_ms)
{
    struct rkv_hdr h = {.type = RKV_MSG_TABLE};
    struct cli_req *r = NULL; /* for -O3 flow analysis: set by the call that succeeds */
    /* Every server's entry first: the reply's entries are written into them
     * from the engine's thread, which must not make any. */
    for (uint32_t i = 0; i < c->n_servers; i++)
        if (!cli_srv(c, i))
            return -RKV_ENOMEM;
    uint64_t budget_ms = c->cfg.retry_ms < wait_ms ? c->cfg.retry_ms : wait_ms;
    int rc = cli_call0(c, &h, NULL, wait_ms, budget_ms, "address table", &r);
    if (rc == 0)
        cli_release(c, &r, 1);
    return rc;
}

/* The first HELLO, for an id. Durable mode with retries: when server 0
 * dies before answering it, it is sent again (same nonce) once server 0
 * is back, within retry_ms: a restarted server 0 that recorded the ids
 * gives this client the one it was given (the nonce tells), one that
 * recorded none hands them out afresh. */
static int cli_join0(struct rkv_client *c, uint64_t wait_ms)
{
    struct cli_server *srv = c->srv0;
    const struct rkv_port_ops *po = c->port->ops;
    uint64_t deadline = po->now_ns(c->port) + (uint64_t)c->cfg.retry_ms * 1000000ull;
    uint64_t backoff_ms = 10;
    for (uint32_t attempt = 1;; attempt++) {
        int rc = cli_hello(c, srv, RKV_ID_NONE, wait_ms);
        if (rc != -RKV_EPEERDEAD || !c->cfg.durable_dir[0] || !c->cfg.retry_ms)
            return rc;
        uint64_t now = po->now_ns(c->port);
        if (now >= deadline)
            return rkv_errf(c->err, sizeof(c->err), rc,
                            "join: server 0 still gone after retrying for %u ms (%u attempts): %s",
                            c->cfg.retry_ms, attempt, c->err);
        RKV_LOGW(c->port, "join: server 0 went before handing out ids; joining again");
        cli_lock(c);
        if (srv->peer) /* a late hang-up of the old connection must not kill the new one */
            rkv_peer_set_user(srv->peer, NULL);
        srv->peer = NULL;
        srv->dead = 0;
        cli_unlock(c);
        cli_nap(c, deadline, &backoff_ms, 1000);
    }
}

static int cli_join(struct rkv_client *c)
{
    c->dynamic = c->cl->dynamic;
    if (!(c->srv0 = cli_srv(c, 0)))
        return -RKV_ENOMEM;
    /* An observer takes no worker slot: it only connects to server 0. */
    if (c->observer)
        return cli_connect(c, c->srv0);
    /* Server 0 answers once every worker said hello: wait for the slowest. */
    uint64_t wait_ms = (uint64_t)c->cfg.connect_retry_ms + c->cfg.timeout_ms;
    int rc = cli_join0(c, wait_ms);
    if (rc == 0 && c->dynamic)
        rc = cli_fetch_table(c, wait_ms);
    return rc;
}

/* What the client allocated per server, per machine and per call. */
static void cli_free_tables(struct rkv_client *c)
{
    for (uint32_t i = 0; i < c->srvs.cap; i++) {
        if (!c->srvs.keys[i])
            continue;
        struct cli_server *srv = (struct cli_server *)(uintptr_t)c->srvs.vals[i];
        for (int op = 0; srv && op < RKV_STATS_OPS; op++)
            free(srv->st[op]);
        if (srv)
            free(srv->own_host);
        free(srv);
    }
    rkv_idmap_free(&c->srvs);
    rkv_idmap_free(&c->pins);
    rkv_ptrmap_free(&c->req_by_id); /* also when the client failed to join */
    free(c->refused);
    free(c->forked_err);
    free(c->stop_text);
    rkv_cluster_destroy(c->own_cl);
    free(c->ht);
    free(c->pt);
    free(c->grp_order);
    free(c->grp_start);
    free(c->grp_gm);
    free(c->grp_key);
    free(c->call_reqs);
    free(c->call_lost);
    free(c->drop_srv);
    free(c->drop_unanswered);
}

/* What every create checks once, before anything is opened (the backend's
 * name and the verbs device open the NIC): its pointers and cfg. */
static int cli_check_create(const struct rkv_config *cfg, struct rkv_client **cli_p, char *err,
                            size_t err_len)
{
    if (!cfg || !cli_p)
        return rkv_errf(err, err_len, -RKV_EINVAL, "client create: %s is NULL",
                        !cfg ? "cfg" : "cli_p");
    return rkv_cfg_check(cfg, err, err_len);
}

/* cfg and cli_p passed cli_check_create. */
static int cli_create(struct rkv_port *port, struct rkv_nic *nic, const struct rkv_config *cfg,
                      int observer, struct rkv_client **cli_p, char *err, size_t err_len)
{
    int rc;
    struct rkv_client *c = calloc(1, sizeof(*c));
    if (!c)
        return rkv_errf(err, err_len, -RKV_ENOMEM, "out of memory");
    c->cfg = *cfg;
    c->port = port;
    c->nic = nic;
    c->observer = observer;
    c->id = observer ? RKV_ID_NONE : 0;
    c->pid = rkv_port_pid();
    atomic_flag_clear(&c->refused_lock);
    if ((rc = rkv_cluster_of(cfg, &c->cl, &c->own_cl, err, err_len)) < 0)
        goto free_client;
    c->cfg.machines = (struct rkv_machine *)(uintptr_t)c->cl->machines; /* read only */
    c->fp = rkv_cluster_fingerprint(c->cl, cfg);
    c->n_servers = c->cl->n_servers;
    if ((rc = port->ops->mutex_create(port, &c->mu)) < 0)
        goto free_client;
    if ((rc = port->ops->cond_create(port, &c->cv)) < 0)
        goto destroy_mutex;
    struct rkv_engine_cfg ec;
    rkv_cfg_engine(cfg, port, RKV_CLIENT_NODE_BASE, &ec);
    /* rkv_client_register: the application thread's. */
    ec.reg_cache_entries = CLI_REG_MAX_ENTRIES;
    ec.reg_cache_bytes = CLI_REG_MAX_BYTES;
    rc = rkv_engine_create(port, nic, &ec, cli_on_msg, cli_on_peer, c, &c->eng, err, err_len);
    if (rc < 0)
        goto destroy_cond;
    if ((rc = rkv_engine_start(c->eng)) < 0)
        goto destroy_engine;
    /* The tag of this incarnation's push sequences: from the OS, except
     * in the twin (a seed repeats its runs). From the port's generator,
     * seeded by the configuration and a stack address, it repeated from run
     * to run in tests and gave a peer who claims this client's id at a
     * server a short list to try (an outside tester). */
    c->next_req = ((cli_draw64(port, nic) >> RKV_SEQ_TAG_SHIFT) | 1) << RKV_SEQ_TAG_SHIFT;
    if ((rc = cli_join(c)) < 0) {
        rkv_errf(err, err_len, rc, "%s", c->err);
        goto destroy_engine;
    }
    if (!observer)
        RKV_LOGI(port, "client %u joined (server 0; the other %u on first use)", c->id,
                 c->n_servers - 1);
    *cli_p = c;
    return 0;
destroy_engine:
    rkv_engine_destroy(c->eng);
destroy_cond:
    port->ops->cond_destroy(c->cv);
destroy_mutex:
    port->ops->mutex_destroy(c->mu);
free_client:
    cli_free_tables(c);
    free(c);
    if (rc == -RKV_ENOMEM)
        rkv_errf(err, err_len, rc, "out of memory");
    return rc;
}

int rkv_client_create_on(struct rkv_port *port, struct rkv_nic *nic, const struct rkv_config *cfg,
                         struct rkv_client **cli_p, char *err, size_t err_len)
{
    int rc = cli_check_create(cfg, cli_p, err, err_len);
    return rc < 0 ? rc : cli_create(port, nic, cfg, 0, cli_p, err, err_len);
}

int rkv_client_create_observer_on(struct rkv_port *port, struct rkv_nic *nic,
                                  const struct rkv_config *cfg, struct rkv_client **cli_p,
                                  char *err, size_t err_len)
{
    int rc = cli_check_create(cfg, cli_p, err, err_len);
    return rc < 0 ? rc : cli_create(port, nic, cfg, 1, cli_p, err, err_len);
}

int rkv_client_create_observer(const struct rkv_config *cfg, struct rkv_client **cli_p, char *err,
                               size_t err_len)
{
    int rc = cli_check_create(cfg, cli_p, err, err_len);
    if (rc < 0)
        return rc;
    struct rkv_port *port;
    struct rkv_nic *nic;
    rc = rkv_node_open(cfg, "obs", cfg->seed ^ (uint64_t)(uintptr_t)&port, &port, &nic, err,
                       err_len);
    if (rc < 0)
        return rc;
    if ((rc = cli_create(port, nic, cfg, 1, cli_p, err, err_len)) < 0) {
        rkv_node_close(port, nic);
        return rc;
    }
    (*cli_p)->own_port_nic = 1;
    return 0;
}

int rkv_client_create(const struct rkv_config *cfg, struct rkv_client **cli_p, char *err,
                      size_t err_len)
{
    int rc = cli_check_create(cfg, cli_p, err, err_len);
    if (rc < 0)
        return rc;
    struct rkv_port *port;
    struct rkv_nic *nic;
    /* The stack address differs between processes (ASLR), so co-located
     * clients draw different HELLO nonces even with one configured seed. */
    uint64_t seed = cfg->seed ^ (uint64_t)(uintptr_t)&port;
    rc = rkv_node_open(cfg, "w", seed, &port, &nic, err, err_len);
    if (rc < 0)
        return rc;
    if ((rc = cli_create(port, nic, cfg, 0, cli_p, err, err_len)) < 0) {
        rkv_node_close(port, nic);
        return rc;
    }
    (*cli_p)->own_port_nic = 1;
    snprintf(port->node, sizeof(port->node), "w%u", (*cli_p)->id);
    return 0;
}

struct rkv_port *rkv_client_port(struct rkv_client *c)
{
    return c->port;
}

uint32_t rkv_client_id(const struct rkv_client *c)
{
    if (!c)
        return RKV_CLIENT_OBSERVER; /* no worker's id */
    return c->id;
}

static int cli_api_register_handler(struct rkv_client *c, int op, rkv_handler_fn fn, void *user)
{
    assert(c); /* rkv_client_* refused NULL */
    int rc = rkv_handler_register_at(&c->ht, op, fn, user);
    /* Refused with the message of whatever call failed before. */
    if (rc < 0)
        return rkv_errf(c->err, sizeof(c->err), rc,
                        rc == -RKV_ENOMEM ? "register handler %d: out of memory"
                                          : "register handler %d: custom ops are %d..%d",
                        op, RKV_OP_CUSTOM, RKV_OP_MAX - 1);
    return 0;
}

int rkv_client_register_handler(struct rkv_client *c, int op, rkv_handler_fn fn, void *user)
{
    CLI_CALL(c, "register_handler", cli_api_register_handler(c, op, fn, user));
}

static int cli_api_register_pull_handler(struct rkv_client *c, int id, rkv_pull_fn fn,
                                         uint32_t out_mult, uint32_t out_add, void *user)
{
    assert(c); /* rkv_client_* refused NULL */
    int rc = rkv_pull_register_at(&c->pt, id, fn, out_mult, out_add, user);
    if (rc == -RKV_ENOMEM)
        return rkv_errf(c->err, sizeof(c->err), rc, "register pull handler %d: out of memory", id);
    if (rc < 0)
        return rkv_errf(c->err, sizeof(c->err), rc,
                        "register pull handler %d: custom ids are %d..%d, and out_mult and out_add "
                        "may not both be 0 (a reply of no elements)",
                        id, RKV_PULL_CUSTOM, RKV_OP_MAX - 1);
    return 0;
}

int rkv_client_register_pull_handler(struct rkv_client *c, int id, rkv_pull_fn fn,
                                     uint32_t out_mult, uint32_t out_add, void *user)
{
    CLI_CALL(c, "register_pull_handler",
             cli_api_register_pull_handler(c, id, fn, out_mult, out_add, user));
}

/* *send_refused_p: the request never left (cli_again says why that
 * matters). */
static int cli_list_once(struct rkv_client *c, struct rkv_tensor_meta *metas, size_t cap,
                         size_t *n_p, int *send_refused_p)
{
    struct cli_server *srv = c->srv0;
    struct cli_req *r = NULL; /* for -O3 flow analysis: set by the call that succeeds */
    struct rkv_tx *tx;
    *send_refused_p = 1;
    int rc = cli_begin(c, srv, RKV_MSG_LIST_REPLY, 0, 0, 0, RKV_PROTO_HDR_BYTES, "list", &r, &tx);
    if (rc < 0)
        return rc;
    /* The reply fills at most cap metas (cli_on_reply); set before the
     * request can be answered. */
    r->out = (uint8_t *)(void *)metas;
    r->row_bytes = cap;
    struct rkv_hdr h = {
        .type = RKV_MSG_LIST, .req_id = r->id, .sender = RKV_CLIENT_NODE_BASE + c->id};
    size_t len = rkv_proto_enc_empty(rkv_engine_tx_buf(tx), &h);
    if ((rc = cli_submit(c, srv, r, tx, len, &r)) < 0)
        return rc;
    *send_refused_p = 0;
    rc = cli_wait_keep(c, &r, 1, c->cfg.timeout_ms, "list");
    uint32_t total = r->u32;
    cli_release(c, &r, 1);
    if (rc < 0)
        return rc;
    *n_p = total;
    return 0;
}

/* LIST is answered by server 0 alone (its reply's metas come in its own
 * buffer, not a cli_call0's): retried as cli_call0 retries, so a restarted
 * server 0 answers it too. */
static int cli_list(struct rkv_client *c, struct rkv_tensor_meta *metas, size_t cap, size_t *n_p)
{
    if ((!metas && cap) || !n_p)
        return rkv_errf(c->err, sizeof(c->err), -RKV_EINVAL, "list: NULL output");
    /* As meta: after shutdown_servers server 0 answered while it lingered,
     * then the call failed with -RKV_EPEERDEAD ("server 0 is gone"). */
    int rc = cli_check_open(c, "list");
    if (rc < 0)
        return rc;
    uint64_t start = c->port->ops->now_ns(c->port), backoff_ms = 10;
    for (uint32_t attempt = 1;; attempt++) {
        int send_refused;
        rc = cli_list_once(c, metas, cap, n_p, &send_refused);
        send_refused = send_refused && rc == -RKV_EPEERDEAD;
        if (rc == 0 || (rc = cli_again(c, c->srv0, rc, send_refused, start, c->cfg.retry_ms,
                                       &backoff_ms, attempt, "list")) < 0)
            return rc;
    }
}

static int cli_api_register(struct rkv_client *c, void *addr, size_t len)
{
    assert(c); /* rkv_client_* refused NULL */
    struct rkv_regcache *cache = rkv_engine_regcache(c->eng);
    int rc = rkv_regcache_add(cache, addr, len);
    /* The cache's bound (CLI_REG_MAX_BYTES, no setting), named: 5 GiB was
     * "configured limit reached", which named neither. */
    if (rc == -RKV_ELIMIT && len > cache->max_bytes)
        return rkv_errf(c->err, sizeof(c->err), rc,
                        "register %zu bytes at %p: above the limit of %llu GiB a client keeps "
                        "registered (a buffer not registered is registered by each call for "
                        "itself)",
                        len, addr, (unsigned long long)(cache->max_bytes >> 30));
    if (rc < 0)
        return rkv_errf(c->err, sizeof(c->err), rc, "register %zu bytes at %p: %s", len, addr,
                        rkv_strerror(rc));
    return 0;
}

int rkv_client_register(struct rkv_client *c, void *addr, size_t len)
{
    CLI_CALL(c, "register", cli_api_register(c, addr, len));
}

static int cli_api_deregister(struct rkv_client *c, void *addr)
{
    assert(c); /* rkv_client_* refused NULL */
    int rc = rkv_regcache_remove(rkv_engine_regcache(c->eng), addr);
    if (rc < 0)
        return rkv_errf(c->err, sizeof(c->err), rc, "deregister %p: no registration starts there",
                        addr);
    return 0;
}

int rkv_client_deregister(struct rkv_client *c, void *addr)
{
    CLI_CALL(c, "deregister", cli_api_deregister(c, addr));
}

void rkv_client_get_zc_stats(struct rkv_client *c, struct rkv_client_zc_stats *st_p)
{
    *st_p = c->zst;
}

static int cli_api_meta(struct rkv_client *c, const char *name, struct rkv_tensor_meta *meta_p)
{
    assert(c); /* rkv_client_* refused NULL */
    struct cli_clock k = cli_call_begin(c);
    return cli_call_end_as(c, RKV_STATS_OTHER, "meta", &k, cli_meta(c, name, meta_p), 0, 0);
}

int rkv_client_meta(struct rkv_client *c, const char *name, struct rkv_tensor_meta *meta_p)
{
    CLI_CALL_SENDS(c, "meta", cli_api_meta(c, name, meta_p));
}

static int cli_api_list(struct rkv_client *c, struct rkv_tensor_meta *metas, size_t cap,
                        size_t *n_p)
{
    assert(c); /* rkv_client_* refused NULL */
    struct cli_clock k = cli_call_begin(c);
    return cli_call_end_as(c, RKV_STATS_OTHER, "list", &k, cli_list(c, metas, cap, n_p), 0, 0);
}

int rkv_client_list(struct rkv_client *c, struct rkv_tensor_meta *metas, size_t cap, size_t *n_p)
{
    CLI_CALL_SENDS(c, "list", cli_api_list(c, metas, cap, n_p));
}

static int cli_api_shutdown_servers(struct rkv_client *c)
{
    assert(c); /* rkv_client_* refused NULL */
    struct cli_clock k = cli_call_begin(c);
    return cli_call_end_as(c, RKV_STATS_OTHER, "shutdown", &k, cli_shutdown_servers(c), 0, 0);
}

int rkv_client_shutdown_servers(struct rkv_client *c)
{
    CLI_CALL_SENDS(c, "shutdown_servers", cli_api_shutdown_servers(c));
}

static int cli_api_stats(struct rkv_client *c, int op, struct rkv_op_stats *st_p)
{
    assert(c); /* rkv_client_* refused NULL */
    if (!st_p)
        return rkv_errf(c->err, sizeof(c->err), -RKV_EINVAL, "stats: st_p is NULL");
    if (op < 0 || op >= RKV_STATS_OPS)
        return rkv_errf(c->err, sizeof(c->err), -RKV_EINVAL, "stats: operation %d out of range",
                        op);
    *st_p = c->ops[op];
    return 0;
}

int rkv_client_stats(struct rkv_client *c, int op, struct rkv_op_stats *st_p)
{
    CLI_CALL(c, "stats", cli_api_stats(c, op, st_p));
}

static int cli_api_peer_stats(struct rkv_client *c, uint32_t server, int op,
                              struct rkv_op_stats *st_p)
{
    assert(c); /* rkv_client_* refused NULL */
    if (!st_p)
        return rkv_errf(c->err, sizeof(c->err), -RKV_EINVAL, "stats: st_p is NULL");
    if (op < 0 || op >= RKV_STATS_OPS || server >= c->n_servers)
        return rkv_errf(c->err, sizeof(c->err), -RKV_EINVAL,
                        "stats: server %u (of %u) or operation %d out of range", server,
                        c->n_servers, op);
    if (c->cfg.no_peer_stats)
        return rkv_errf(c->err, sizeof(c->err), -RKV_EINVAL,
                        "stats: this client keeps no per-server counters (no_peer_stats)");
    cli_lock(c);
    /* A server this client never used has no state, so no counters. */
    const uint64_t *v = rkv_idmap_find(&c->srvs, server);
    const struct cli_server *srv = v ? (const struct cli_server *)(uintptr_t)*v : NULL;
    const struct rkv_op_stats *st = srv && srv->counted ? srv->st[op] : NULL;
    if (st)
        *st_p = *st;
    else
        memset(st_p, 0, sizeof(*st_p));
    cli_unlock(c);
    return 0;
}

int rkv_client_peer_stats(struct rkv_client *c, uint32_t server, int op, struct rkv_op_stats *st_p)
{
    CLI_CALL(c, "peer_stats", cli_api_peer_stats(c, server, op, st_p));
}

uint32_t rkv_client_n_servers(const struct rkv_client *c)
{
    if (!c)
        return 0;
    return c->n_servers;
}

void rkv_client_stats_reset(struct rkv_client *c)
{
    /* Not in a forked child: the lock may have been held at the fork. */
    if (!c || c->pid != rkv_port_pid())
        return;
    memset(c->ops, 0, sizeof(c->ops));
    memset(c->call_sample, 0, sizeof(c->call_sample)); /* the next ones are timed */
    cli_lock(c);
    for (uint32_t i = 0; i < c->srvs.cap; i++) { /* the servers with state */
        const struct cli_server *srv =
            c->srvs.keys[i] ? (const struct cli_server *)(uintptr_t)c->srvs.vals[i] : NULL;
        for (int op = 0; srv && op < RKV_STATS_OPS; op++)
            if (srv->st[op])
                memset(srv->st[op], 0, sizeof(*srv->st[op]));
    }
    cli_unlock(c);
}

const char *rkv_client_errmsg(const struct rkv_client *c)
{
    if (!c)
        return "client is NULL (did its rkv_client_create fail?)";
    if (c->pid != rkv_port_pid())
        return c->forked_err ? c->forked_err : c->err;
    if (!atomic_load(&c->n_refused))
        return c->err;
    uint64_t me = cli_task(c);
    struct rkv_client *w = (struct rkv_client *)c; /* the lock only */
    cli_refused_lock(w);
    const struct cli_refusal *r = cli_refusal_of(c, me);
    cli_refused_unlock(w);
    return r ? r->err : c->err;
}

int rkv_client_interrupt(struct rkv_client *c, int on)
{
    if (!c)
        return -RKV_EINVAL;
    int rc = cli_forked(c, "interrupt");
    if (rc < 0)
        return rc;
    atomic_store(&c->interrupted, on != 0);
    if (on)
        atomic_fetch_or(&c->connect_cancel, CLI_CANCEL_INTR);
    else
        atomic_fetch_and(&c->connect_cancel, ~CLI_CANCEL_INTR);
    if (on) { /* a wait asleep on cv looks again */
        cli_lock(c);
        c->port->ops->cond_broadcast(c->cv);
        cli_unlock(c);
    }
    return 0;
}

/* The client's own memory, in rkv_client_destroy's order: pushes never
 * waited for, tensors (their shards unmapped), requests, tables. */
static void cli_free_own(struct rkv_client *c)
{
    while (c->pending)
        cli_pending_free(c, c->pending);
    for (uint32_t i = 1; i <= c->max_tensor; i++) {
        struct rkv_tensor *t = rkv_tensor_at(&c->tensors, i);
        if (t) {
            rkv_tensor_free(t);
            free(t);
        }
    }
    rkv_tensor_table_free(&c->tensors);
    while (c->reqs) {
        struct cli_req *r = c->reqs;
        c->reqs = r->next;
        free(r->text);
        free(r);
    }
}

/* rkv_client_destroy in a forked child: what it shares with the parent is
 * left alone. Stopping the engine joined threads the child does not have
 * (it hung), and closing the NIC's connections shut down (shutdown(2))
 * the parent's sockets: the parent lost every server. The engine, the NIC,
 * the port and the locks (a parent thread may have held one at the fork)
 * stay in the child's memory, their descriptors open (close-on-exec) until
 * it execs or exits; shared memory is unmapped, never unlinked. */
static void cli_destroy_forked(struct rkv_client *c)
{
    cli_free_own(c);
    cli_free_tables(c);
    free(c);
}

void rkv_client_destroy(struct rkv_client *c)
{
    if (!c)
        return;
    if (c->pid != rkv_port_pid()) {
        cli_destroy_forked(c);
        return;
    }
    /* A call still under way on another thread (rkv.h forbids it; it is
     * the usual slip at a program's end): interrupted, and waited for
     * before anything goes. The call waited forever on a stopped engine,
     * reading and writing freed memory (an outside tester). One that does
     * not end in time keeps the client: a leak, not a use after free. */
    /* Taken for good (busy is never cleared again): a call that comes
     * after is refused, not run over what is freed. */
    if (atomic_exchange_explicit(&c->busy, 1, memory_order_acquire)) {
        (void)rkv_client_interrupt(c, 1);
        const struct rkv_port_ops *po = c->port->ops;
        uint64_t deadline = po->now_ns(c->port) + ((uint64_t)c->cfg.timeout_ms + 1000) * 1000000ull;
        int taken = 0;
        while (!taken && po->now_ns(c->port) < deadline) {
            int free_ = 0;
            taken = atomic_compare_exchange_strong_explicit(
                &c->busy, &free_, 1, memory_order_acquire, memory_order_relaxed);
            if (!taken)
                po->sleep_ns(c->port, 1000000ull);
        }
        if (!taken) {
            RKV_LOGE(c->port,
                     "rkv_client_destroy: a call under way (on another thread, or the handler "
                     "this destroy runs in) did not end after an interrupt (%u ms): the client "
                     "is left as it is, not freed",
                     c->cfg.timeout_ms + 1000);
            return;
        }
    }
    rkv_engine_stop(c->eng);
    /* The QPs are closed: no peer can write into registered memory now, nor
     * read the rows of a push nobody waited for. */
    while (c->pending) {
        cli_zc_end(c, &c->pending->cp.o, c->pending->cp.call_reg);
        cli_pending_free(c, c->pending);
    }
    rkv_engine_destroy(c->eng); /* and the cache's registrations */
    cli_free_own(c);
    c->port->ops->cond_destroy(c->cv);
    c->port->ops->mutex_destroy(c->mu);
    if (c->own_port_nic)
        rkv_node_close(c->port, c->nic);
    cli_free_tables(c);
    free(c);
}
