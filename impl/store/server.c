/* A server: serves its machine's shard to remote clients. Every callback
 * runs on the engine's progress task, so server state needs no lock; only
 * the stop flag and, in durable mode, the acknowledgements waiting for a
 * snapshot are shared (with rkv_server_run() and the durable task). */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nic/nic.h"
#include "port/port_file.h"
#include "store/coord.h"
#include "store/pull_handlers.h"
#include "store/cluster.h"
#include "store/server_int.h"
#include "store/snapshot.h"
#include "store/wal.h"
#include "util/util.h"

/* Acknowledgements waiting for a durable snapshot, per server: far more
 * than clients x in-flight requests; beyond it a push fails rather than
 * grow without bound. */
#define SRV_MAX_ACKS (1u << 20)

struct srv_hello {
    struct rkv_peer *peer;
    uint32_t machine;
    uint64_t nonce;
    uint64_t req_id;
    uint64_t away_ns; /* its connection went, or server 0 restarted, then (srv_presume_gone) */
};

struct srv_waiter {
    struct rkv_peer *peer;
    uint64_t req_id;
    uint32_t client; /* barrier: the waiting client's id */
};

/* What a server knows of one connection it accepted (the peer's user
 * pointer; NULL on the connection a server opened to server 0). Identity is
 * bound to the connection: one HELLO, one client id, and what a message
 * claims about its sender is never believed over it. */
struct srv_conn {
    int hello;          /* a HELLO was accepted on it (another one is a protocol error) */
    int reader;         /* it asked for the catalogue (LIST, META): an observer, maybe */
    uint32_t client_id; /* server 0: the id it gave; others: the one claimed; else RKV_ID_NONE */
    int registered;     /* server 0: some address table entry named it (table_peer) */
    /* Under s->mu. The peer is released (the engine frees it) by whoever
     * sees the last of these go: the connection is gone, no table entry
     * names it (kept), no durable acknowledgement is still to be sent to it. */
    int gone;
    int kept;
    uint32_t acks_pending;
    /* Servers other than 0: it claims an id another live connection held
     * when it came (s->n_shadow counts these). */
    int shadow;
    /* Servers other than 0: the nonce of its HELLO (a client sends the same
     * one in every HELLO it makes: srv_dedup_id). */
    uint64_t nonce;
    struct rkv_peer *peer;        /* whose user pointer this is */
    struct srv_conn *prev, *next; /* s->conns, under s->mu: freed at destroy */
};

/* A reply held back until its request is synced in the machine's log. */
struct srv_ack {
    struct srv_ack *next;
    struct rkv_peer *peer; /* kept until this is sent (srv_conn.acks_pending) */
    struct rkv_hdr h;
};

struct rkv_server {
    struct rkv_config cfg;
    /* cfg.machines and what is derived from it: the config's shared one,
     * or own_cl (cluster.h). fp: the cluster's fingerprint, computed once. */
    const struct rkv_cluster *cl;
    struct rkv_cluster *own_cl;
    uint64_t fp;
    uint32_t local_id, server_id, n_servers;
    struct rkv_port *port;
    struct rkv_nic *nic;
    int own_port_nic;
    struct rkv_engine *eng;
    struct rkv_mutex *mu;
    struct rkv_cond *cv;
    /* The handler tables ht and pt: a handler is not replaced or
     * unregistered (its user data freed, say) while a push or pull of the
     * engine task runs it; it crashed calling a NULL one. */
    struct rkv_mutex *hmu;
    int stop;
    int running; /* mu: a thread is in rkv_server_run */
    /* A SHUTDOWN arrived: later requests are refused (-RKV_ESHUTDOWN), so
     * that the linger before exiting ends. The engine's callbacks only. */
    int shut;
    uint32_t shut_by; /* the client whose SHUTDOWN came first */
    /* rkv_server_set_test_corrupt_row: set by the application thread while
     * the engine's task may already read it. */
    _Atomic uint64_t test_corrupt_row;
    struct rkv_tensor_table tensors; /* by id, 1-based */
    uint32_t n_tensors;              /* the highest id in it */
    /* Custom push and pull handlers: NULL until one is registered. */
    struct rkv_handler_table *ht;
    struct rkv_pull_table *pt;
    struct srv_hello *hellos; /* server 0: clients waiting for an id */
    uint32_t n_hellos;
    struct srv_waiter *barrier; /* server 0: clients inside the barrier */
    uint32_t n_barrier;
    /* server 0: barriers completed; the clients inside are in the next one
     * (BARRIER's count numbers them, so a retried one is told apart). In
     * durable mode it is in the coordination record before any reply. */
    uint64_t barriers_done;
    /* server 0: by client id, its entry's index in barrier[] + 1 (0: not
     * inside), so that a BARRIER costs O(1), not a walk over the waiters
     * (O(workers^2) per barrier). */
    uint32_t *barrier_at;
    /* server 0: id + 1 of a client that left after ids were handed out; no
     * barrier can complete from then on, so waiters fail instead of hanging. */
    uint32_t client_gone;
    uint64_t presume_ns; /* 1 + when srv_presume_gone last looked (0: never) */
    /* Counted by the engine's progress task, read by rkv_server_run's last
     * log line, which a late message could race (TSan saw it). */
    _Atomic uint64_t n_msgs;
    /* Address discovery (machines whose host the config leaves empty):
     * server 0 keeps every server's address as they register; the others
     * register once at start. */
    struct rkv_wire_addr *table; /* server 0: n_servers entries */
    uint32_t n_registered;
    struct srv_waiter *table_wait; /* server 0: TABLE requests before all registered */
    uint32_t n_table_wait;
    struct rkv_peer **table_peer; /* server 0: the connection each server registered on */
    int register_acked;           /* others: server 0 has our address */
    /* Or server 0 refused it (its status; its reason in register_why):
     * srv_register ends at once with that reason, rather than wait out
     * timeout_ms and say "see its log". */
    int register_refused;
    char register_why[RKV_PROTO_TEXT_MAX + 1];
    /* The machine segment: local 0 makes it at create, the others attach at
     * their first INIT (or at create when restarting). */
    struct rkv_mach mach;
    /* This create made the segment afresh (rkv_mach_create), so a create
     * that fails after it unlinks it; a segment it attached to or restored
     * from a snapshot may be in use by the machine's other servers. */
    int mach_made;
    _Atomic uint64_t n_dups; /* retried pushes acknowledged without applying them again */
    /* Durable mode. acks..dur_stop are under mu; snapw is the task's. */
    int durable;
    /* Durable mode: this machine's claim on the directory (rkv_file_claim
     * of rkv-m<M>.lock), held while the server lives; -1: none. */
    int dir_claim;
    /* And this server's own (rkv-m<M>.s<L>.lock), held alone: -1 without. */
    int srv_claim;
    struct rkv_snap_writer *snapw;
    struct rkv_wal *wal; /* the machine's log: pushes append, the task syncs */
    struct rkv_task *dur_task;
    struct srv_ack *acks, *acks_tail; /* oldest first */
    uint32_t n_acks;
    int dur_stop;
    uint64_t n_durable_acks;
    /* A restart's replay of the machine's log, which pauses at create
     * before the first push of a custom op (its handler is registered
     * after create) and finishes at rkv_server_run; until then the server
     * neither listens nor writes a checkpoint (one would drop the records
     * not replayed yet). */
    struct rkv_wal_replay replay;
    uint64_t replay_lineage, replay_gen;
    int replay_pending;
    int replay_publish; /* the machine's other servers wait for its end */
    /* Per-connection warnings (progress task), rate-limited. */
    struct rkv_ratelim lim_conn;
    struct srv_conn *conns; /* mu: every connection's, until released */
    /* Servers other than 0: client id -> the srv_conn holding its claim
     * (srv_claim), or 0; the progress task's. */
    struct rkv_idmap claims;
    /* Live connections whose claim another held (srv_conn.shadow): none,
     * and a holder that goes has no successor to look for. Each going
     * holder walked every connection, quadratic in a server's workers when
     * they all left at the end of a run. */
    uint32_t n_shadow;
    /* The make task (srv_make_main): builds the segments of large tensors
     * (fallocate and populate cost ~0.5 s a GiB, a uniform fill more), which
     * on the progress task stopped every other client's requests for as
     * long (a 12 GiB tensor: 13 s of timeouts, found by an outside tester).
     * Started with the first such tensor. The jobs and make_stop are under
     * mu; at most SRV_MAX_MAKES jobs. */
    struct rkv_task *make_task;
    struct srv_make *make_q, *make_q_tail;
    _Atomic uint32_t n_make; /* only the progress task adds */
    int make_stop;
    _Atomic uint64_t make_async_bytes; /* a shard this large or larger is made there */
    _Atomic int make_hold;             /* tests: the task waits before each make */
    _Atomic uint64_t makes_begun;
    /* The process that created it (rkv_port_pid): a forked child's calls
     * are refused (srv_forked). */
    int pid;
    char err[512];
};

/* A large tensor's segment to make, and the INITs waiting for it (the one
 * that asked, and any same-description INIT that came meanwhile), each
 * answered when it is made (in durable mode after the next snapshot). */
#define SRV_MAX_MAKES 64u
#define SRV_MAX_MAKE_WAITERS 4096u
#define SRV_MAKE_ASYNC_BYTES (64ull << 20)
struct srv_make {
    struct srv_make *next;
    struct rkv_tensor *t;
    int create;
    struct srv_ack *waiters; /* each keeps its peer (srv_conn.acks_pending) */
    uint32_t n_waiters;
};

static struct srv_conn *srv_conn_of(const struct rkv_peer *peer)
{
    return rkv_peer_user(peer);
}

static void srv_on_peer(void *user, struct rkv_peer *peer, int up);

/* After the engine is gone (no callback runs any more): what the
 * connections still up held. */
static void srv_free_conns(struct rkv_server *s)
{
    rkv_idmap_free(&s->claims);
    for (struct srv_conn *c = s->conns, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    s->conns = NULL;
}

/* See srv_conn. From the progress task or the durable task. */
static void srv_conn_maybe_release(struct rkv_server *s, struct rkv_peer *peer)
{
    s->port->ops->mutex_lock(s->mu);
    struct srv_conn *c = srv_conn_of(peer); /* under mu: two may try at once */
    int release = c && c->gone && !c->kept && !c->acks_pending;
    if (release) {
        rkv_peer_set_user(peer, NULL);
        if (c->prev)
            c->prev->next = c->next;
        else
            s->conns = c->next;
        if (c->next)
            c->next->prev = c->prev;
    }
    s->port->ops->mutex_unlock(s->mu);
    if (!release)
        return;
    free(c);
    rkv_engine_peer_release(s->eng, peer);
}

/* A table entry stopped naming a connection (progress task). */
static void srv_conn_unkeep(struct rkv_server *s, struct rkv_peer *peer)
{
    if (!peer)
        return; /* an entry restored from the coordination record: no connection */
    struct srv_conn *c = srv_conn_of(peer);
    if (!c)
        return;
    s->port->ops->mutex_lock(s->mu);
    c->kept = 0;
    s->port->ops->mutex_unlock(s->mu);
    srv_conn_maybe_release(s, peer);
}

/* Drops a connection that broke the protocol: the same bookkeeping as when
 * it goes by itself (the engine does not call on_peer for a drop). */
static void srv_drop(struct rkv_server *s, struct rkv_peer *peer)
{
    rkv_engine_drop_peer(s->eng, peer);
    srv_on_peer(s, peer, 0);
}

static void srv_reply(struct rkv_server *s, struct rkv_peer *peer, struct rkv_hdr *h,
                      const char *text)
{
    struct rkv_tx *tx;
    if (rkv_engine_tx_alloc(s->eng, s->cfg.ctrl_buf_bytes, &tx) < 0)
        return;
    h->sender = s->server_id;
    size_t len = text ? rkv_proto_enc_error(rkv_engine_tx_buf(tx), s->cfg.ctrl_buf_bytes, h, text)
                      : rkv_proto_enc_empty(rkv_engine_tx_buf(tx), h);
    rkv_engine_reply(s->eng, peer, tx, len);
}

static void srv_status(struct rkv_server *s, struct rkv_peer *peer, const struct rkv_msg *m,
                       int type, int rc, const char *why)
{
    struct rkv_hdr h = {.req_id = m->h.req_id, .tensor_id = m->h.tensor_id, .status = rc};
    if (rc < 0) {
        h.type = RKV_MSG_ERROR;
        RKV_LOGD(s->port, "rejecting %s: %s", rkv_msg_type_name(m->h.type), why);
        srv_reply(s, peer, &h, why ? why : rkv_strerror(rc));
        return;
    }
    h.type = (uint8_t)type;
    srv_reply(s, peer, &h, NULL);
}

/* ---- HELLO: server 0 hands out client ids once every worker arrived ---- */

static int srv_hello_cmp(const void *a, const void *b)
{
    const struct srv_hello *x = a, *y = b;
    if (x->machine != y->machine)
        return x->machine < y->machine ? -1 : 1;
    return x->nonce < y->nonce ? -1 : x->nonce > y->nonce;
}

static void srv_hello_reply(struct rkv_server *s, struct rkv_peer *peer, uint64_t req, uint32_t id)
{
    struct rkv_tx *tx;
    if (rkv_engine_tx_alloc(s->eng, s->cfg.ctrl_buf_bytes, &tx) < 0)
        return;
    struct rkv_hdr h = {.type = RKV_MSG_HELLO_REPLY, .req_id = req, .sender = s->server_id};
    struct rkv_wire_hello_reply r = {.client_id = id,
                                     .n_workers = s->cfg.n_workers,
                                     .rx_depth = s->cfg.rx_depth,
                                     .n_servers = s->n_servers,
                                     .ctrl_buf_bytes = s->cfg.ctrl_buf_bytes,
                                     .push_slots = s->cfg.push_slots};
    size_t len = rkv_proto_enc_hello_reply(rkv_engine_tx_buf(tx), &h, &r);
    rkv_engine_reply(s->eng, peer, tx, len);
}

/* ---- server 0's coordination record (durable mode, coord.h) ---- */

static void srv_coord_free(struct rkv_coord *c)
{
    free(c->clients);
    free(c->addrs);
    c->clients = NULL;
    c->addrs = NULL;
}

/* Server 0 in durable mode: writes what it handed out (ids), completed
 * (barriers) and learned (addresses), before any of it is acknowledged.
 * From the progress task: a rare, small, synchronous write. */
static int srv_coord_save(struct rkv_server *s, char *err, size_t err_len)
{
    assert(s->server_id == 0);
    if (!s->durable)
        return 0;
    struct rkv_coord c = {.fingerprint = s->fp,
                          .n_workers = s->cfg.n_workers,
                          .n_servers = s->n_servers,
                          .ids_given = s->n_hellos == s->cfg.n_workers ? s->n_hellos : 0,
                          .barriers_done = s->barriers_done};
    c.clients = calloc(c.n_workers, sizeof(*c.clients));
    c.addrs = calloc(c.n_servers, sizeof(*c.addrs));
    int rc = -RKV_ENOMEM;
    if (!c.clients || !c.addrs) {
        rkv_errf(err, err_len, rc, "out of memory");
        goto out;
    }
    for (uint32_t i = 0; i < c.ids_given; i++) /* sorted: entry i holds id i */
        c.clients[i] =
            (struct rkv_coord_client){.machine = s->hellos[i].machine,
                                      .flags = s->client_gone == i + 1 ? RKV_COORD_LEFT : 0,
                                      .nonce = s->hellos[i].nonce};
    for (uint32_t i = 0; i < c.n_servers; i++) {
        c.addrs[i].port = (uint16_t)s->table[i].port;
        snprintf(c.addrs[i].host, sizeof(c.addrs[i].host), "%s", s->table[i].host);
    }
    for (uint32_t id = 1; id <= s->n_tensors; id++) {
        const struct rkv_tensor *t = rkv_tensor_at(&s->tensors, id);
        if (t && t->ready)
            c.committed[id / 8] |= (uint8_t)(1u << (id % 8));
    }
    rc = rkv_coord_write(s->cfg.durable_dir, &c, err, err_len);
out:
    srv_coord_free(&c);
    return rc;
}

/* Server 0: a client left, or the one that left re-joined: recorded, so
 * that a restarted server 0 fails (or completes) barriers as this one
 * does. Nothing is acknowledged by it, so a failure is logged only: a
 * restart would then wait in a barrier for the client that left. */
static void srv_coord_note_gone(struct rkv_server *s)
{
    char why[256];
    if (s->server_id != 0 || !s->durable || s->n_hellos != s->cfg.n_workers)
        return;
    if (srv_coord_save(s, why, sizeof(why)) < 0)
        RKV_LOGE(s->port, "server 0: cannot record that client %d left: %s",
                 (int)s->client_gone - 1, why);
}

/* A restarting server 0's record of the run it rejoins, read and checked
 * before anything of the restart is made: a refusal after the snapshot's
 * restore left the machine's memory in /dev/shm. first: this may be the
 * run's first start (no snapshot yet), where no record is normal;
 * n_tensors: the snapshot's. *have: a record to srv_coord_apply (then
 * srv_coord_free); none is 0 with *have 0, or a refusal. */
static int srv_coord_read(struct rkv_server *s, int first, uint32_t n_tensors, struct rkv_coord *c,
                          int *have, char *err, size_t err_len)
{
    *have = 0;
    *c = (struct rkv_coord){
        .fingerprint = s->fp, .n_workers = s->cfg.n_workers, .n_servers = s->n_servers};
    c->clients = calloc(c->n_workers, sizeof(*c->clients));
    c->addrs = calloc(c->n_servers, sizeof(*c->addrs));
    int rc = -RKV_ENOMEM;
    if (!c->clients || !c->addrs) {
        rkv_errf(err, err_len, rc, "out of memory");
        goto fail;
    }
    rc = rkv_coord_read(s->cfg.durable_dir, c, err, err_len);
    if (rc == -RKV_ENOTENSOR && first) {
        srv_coord_free(c);
        return 0;
    }
    if (rc == -RKV_ENOTENSOR && n_tensors > 0) {
        /* Its tensors were made by clients, whose ids the record held (it
         * is written before any is acknowledged): it was lost, and the
         * clients that live on met "client ids are not handed out yet". */
        rc = rkv_errf(err, err_len, -RKV_ECONFIG,
                      "server 0's coordination record %s/rkv-coord is missing, but its snapshot "
                      "holds %u tensors, which clients made: the record of their ids is lost "
                      "(removed by hand?); restore it, or start the job over with an empty "
                      "directory",
                      s->cfg.durable_dir, n_tensors);
        goto fail;
    }
    if (rc == -RKV_ENOTENSOR) {
        RKV_LOGW(s->port,
                 "server 0 restarted without a coordination record in %s: no client "
                 "ids were handed out before the crash; clients join afresh",
                 s->cfg.durable_dir);
        srv_coord_free(c);
        return 0;
    }
    if (rc < 0)
        goto fail;
    *have = 1;
    return 0;
fail:
    srv_coord_free(c);
    return rc;
}

/* A restarted server 0 takes the ids, barrier count and addresses of the
 * run it rejoins (srv_coord_read's), its tensors restored. Clients then
 * re-join under their ids (srv_rejoin); a record written before every id
 * was handed out restores no id. */
static void srv_coord_apply(struct rkv_server *s, const struct rkv_coord *c)
{
    s->n_hellos = c->ids_given;
    uint64_t now = s->port->ops->now_ns(s->port);
    for (uint32_t i = 0; i < c->ids_given; i++) {
        s->hellos[i] = (struct srv_hello){
            .machine = c->clients[i].machine, .nonce = c->clients[i].nonce, .away_ns = now};
        if ((c->clients[i].flags & RKV_COORD_LEFT) && !s->client_gone) {
            s->client_gone = i + 1;
            RKV_LOGW(s->port,
                     "server 0 restarted: client %u left before; a barrier fails until it "
                     "re-joins",
                     i);
        }
    }
    s->barriers_done = c->barriers_done;
    /* Only what was committed before the crash is listed: a tensor whose
     * init_data failed is in the snapshot too (the servers that made
     * their shards logged it), and was listed as made, its init_data
     * refused when tried again. */
    uint32_t uncommitted = 0;
    for (uint32_t id = 1; c->has_committed && id <= s->n_tensors; id++) {
        struct rkv_tensor *t = rkv_tensor_at(&s->tensors, id);
        if (t) {
            t->ready = (c->committed[id / 8] >> (id % 8)) & 1u;
            uncommitted += !t->ready;
        }
    }
    if (uncommitted)
        RKV_LOGW(s->port,
                 "server 0 restarted: %u tensor(s) whose init_data did not complete are not "
                 "listed; the same init_data completes them",
                 uncommitted);
    uint64_t fp = s->fp;
    for (uint32_t i = 0; i < c->n_servers; i++) {
        if (!c->addrs[i].port || s->table[i].port)
            continue; /* the config's addresses stand */
        s->table[i] =
            (struct rkv_wire_addr){.cluster = fp, .server_id = i, .port = c->addrs[i].port};
        snprintf(s->table[i].host, sizeof(s->table[i].host), "%s", c->addrs[i].host);
        s->n_registered++;
    }
    RKV_LOGW(s->port,
             "server 0 restarted: %u client ids, %llu completed barriers and %u of %u server "
             "addresses restored from %s/%s; clients re-join under their ids",
             c->ids_given, (unsigned long long)c->barriers_done, s->n_registered, s->n_servers,
             s->cfg.durable_dir, RKV_COORD_FILE);
}

/* Server 0: a client re-joins under the id it holds only when that id's
 * connection is gone and it proves to be the same client (the nonce it first
 * joined with). Returns NULL, or why not. */
static const char *srv_rejoin(struct rkv_server *s, struct rkv_peer *peer, const struct rkv_msg *m)
{
    uint32_t id = m->u.hello.want_id;
    if (s->n_hellos < s->cfg.n_workers)
        return "client ids are not handed out yet";
    struct srv_hello *h = &s->hellos[id]; /* sorted: entry i holds id i */
    /* No peer: restored from the coordination record (server 0 restarted). */
    if (h->peer && !rkv_peer_dead(h->peer))
        return "that client id is held by a live connection";
    if (h->nonce != m->u.hello.nonce)
        return "that client id belongs to another client (its join nonce differs)";
    struct rkv_peer *old = h->peer;
    h->peer = peer;
    h->req_id = m->h.req_id;
    if (s->client_gone == id + 1) {
        s->client_gone = 0; /* it is back: barriers can complete again */
        srv_coord_note_gone(s);
    }
    srv_conn_of(peer)->client_id = id;
    srv_conn_unkeep(s, old); /* the old connection was kept for its id only */
    RKV_LOGI(s->port, "client %u re-joined", id);
    return NULL;
}

/* A server other than 0, which cannot check a client id's claim: the
 * live connection that claimed id first holds it, and the others that
 * claim it count as never identified (rkv_engine_peer_identified), so that
 * at the bound of incoming connections they go first. Claimed on 72
 * connections, ids 0 and 1 held the bound and locked every new worker out
 * (an outside tester); a squatter that comes after a worker cannot make
 * the worker's connection go either. The holder is indexed by id
 * (s->claims: a lookup per HELLO, where a walk of every connection made a
 * server's start quadratic in its workers); when it goes, the oldest live
 * claimant left takes over (a walk, once per holder that goes). Returns 1
 * when c now holds id. The progress task's, as the index is. */
static int srv_claim(struct rkv_server *s, struct srv_conn *c, uint32_t id)
{
    assert(!c->shadow);
    uint64_t *v = rkv_idmap_get(&s->claims, id);
    struct srv_conn *holder = v ? (struct srv_conn *)(uintptr_t)*v : NULL;
    /* Out of memory: a claim of no standing. */
    if (!v || (holder && holder != c && !holder->gone && !rkv_peer_dead(holder->peer))) {
        c->shadow = 1;
        s->n_shadow++;
        return 0;
    }
    *v = (uintptr_t)c;
    return 1;
}

/* c, which held its id's claim, went: the oldest live connection still
 * claiming the id holds it now (a worker's new connection, come before its
 * old one was seen gone). Only a gone connection is released, and c's
 * entry is cleared here, before it can be: the index never names a freed
 * one. */
static void srv_claim_gone(struct rkv_server *s, struct srv_conn *c)
{
    if (c->shadow) { /* it held nothing */
        assert(s->n_shadow > 0);
        c->shadow = 0;
        s->n_shadow--;
        return;
    }
    uint64_t *v = rkv_idmap_find(&s->claims, c->client_id);
    if (!v || *v != (uintptr_t)c)
        return;
    struct srv_conn *next = NULL;
    s->port->ops->mutex_lock(s->mu);
    for (struct srv_conn *o = s->conns; s->n_shadow && o;
         o = o->next) /* newest first: the last found */
        if (o != c && o->shadow && !o->gone && o->client_id == c->client_id &&
            !rkv_peer_dead(o->peer))
            next = o;
    s->port->ops->mutex_unlock(s->mu);
    *v = (uintptr_t)next;
    if (next) {
        next->shadow = 0;
        s->n_shadow--;
        rkv_engine_peer_identified(next->peer);
    }
}

static void srv_on_hello(struct rkv_server *s, struct rkv_peer *peer, const struct rkv_msg *m)
{
    struct srv_conn *c = srv_conn_of(peer);
    if (!c)
        return srv_status(s, peer, m, 0, -RKV_EINVAL, "HELLO on a connection this server opened");
    if (c->hello) {
        rkv_port_warn_limited(
            s->port, &s->lim_conn,
            "server %u: a second HELLO on one connection (client id %d): protocol "
            "error, dropping it",
            s->server_id, c->client_id == RKV_ID_NONE ? -1 : (int)c->client_id);
        return srv_drop(s, peer);
    }
    if (m->u.hello.cluster != s->fp) {
        char why[RKV_PROTO_TEXT_MAX], diff[RKV_PROTO_TEXT_MAX - 64];
        rkv_fingerprint_diff(s->fp, m->u.hello.cluster, "this server", "this client", diff,
                             sizeof(diff));
        snprintf(why, sizeof(why), "this server belongs to another cluster: %s", diff);
        return srv_status(s, peer, m, 0, -RKV_ECONFIG, why);
    }
    /* Refused before the client is counted: a client refused only by
     * itself, at the reply, had taken a worker's place, and the job could
     * not start again without restarting the servers. */
    if (m->u.hello.rx_depth != s->cfg.rx_depth ||
        m->u.hello.ctrl_buf_bytes != s->cfg.ctrl_buf_bytes) {
        char why[RKV_PROTO_TEXT_MAX];
        snprintf(why, sizeof(why),
                 "server %u uses rx_depth %u and ctrl_buf_bytes %u, this client %u and %u: "
                 "every node needs the same",
                 s->server_id, s->cfg.rx_depth, s->cfg.ctrl_buf_bytes, m->u.hello.rx_depth,
                 m->u.hello.ctrl_buf_bytes);
        return srv_status(s, peer, m, 0, -RKV_ECONFIG, why);
    }
    if (m->u.hello.want_id != RKV_ID_NONE) {
        if (m->u.hello.want_id >= s->cfg.n_workers)
            return srv_status(s, peer, m, 0, -RKV_EINVAL, "client id out of range");
        if (s->server_id == 0) {
            const char *bad = srv_rejoin(s, peer, m);
            if (bad) {
                rkv_port_warn_limited(s->port, &s->lim_conn,
                                      "server 0: refused a HELLO for client id %u: %s",
                                      m->u.hello.want_id, bad);
                return srv_status(s, peer, m, 0, -RKV_EINVAL, bad);
            }
        } else {
            /* Server 0 gave it; this server cannot tell (see the README's
             * threat model), but the claim is bound to this connection. */
            c->client_id = m->u.hello.want_id;
            c->nonce = m->u.hello.nonce;
            c->hello = 1;
            if (srv_claim(s, c, c->client_id))
                rkv_engine_peer_identified(peer);
            return srv_hello_reply(s, peer, m->h.req_id, m->u.hello.want_id);
        }
        c->hello = 1;
        rkv_engine_peer_identified(peer);
        return srv_hello_reply(s, peer, m->h.req_id, m->u.hello.want_id);
    }
    if (s->server_id != 0)
        return srv_status(s, peer, m, 0, -RKV_EINVAL, "only server 0 assigns client ids");
    /* A restarted server 0 that recorded the ids: a client whose first
     * HELLO the crash left unanswered asks again, with its nonce. */
    for (uint32_t i = 0; s->n_hellos == s->cfg.n_workers && i < s->n_hellos; i++) {
        struct srv_hello *h = &s->hellos[i];
        if (h->peer || h->nonce != m->u.hello.nonce || h->machine != m->u.hello.machine_id)
            continue;
        h->peer = peer;
        h->req_id = m->h.req_id;
        c->hello = 1;
        rkv_engine_peer_identified(peer);
        c->client_id = i;
        RKV_LOGI(s->port, "client %u joined again (its id was handed out before a restart)", i);
        return srv_hello_reply(s, peer, m->h.req_id, i);
    }
    if (s->n_hellos >= s->cfg.n_workers)
        return srv_status(s, peer, m, 0, -RKV_ELIMIT,
                          s->durable
                              /* Restarting the servers does not free them here: the
                               * hint below sent a durable job's user round in a circle. */
                              ? "every one of the n_workers client ids was handed out already "
                                "(durable mode keeps them across restarts, in the directory's "
                                "rkv-coord: a job that starts over starts with an empty "
                                "directory; an observer client reads the catalogue without one)"
                              : "every one of the n_workers client ids was handed out already "
                                "(a client that left keeps its id: a job that starts over "
                                "restarts the servers too; an observer client reads the "
                                "catalogue without one)");
    c->hello = 1;
    rkv_engine_peer_identified(peer);
    s->hellos[s->n_hellos++] = (struct srv_hello){.peer = peer,
                                                  .machine = m->u.hello.machine_id,
                                                  .nonce = m->u.hello.nonce,
                                                  .req_id = m->h.req_id};
    if (s->n_hellos < s->cfg.n_workers)
        return;
    /* Ids ordered by (machine, nonce) so that co-located clients are adjacent. */
    qsort(s->hellos, s->n_hellos, sizeof(*s->hellos), srv_hello_cmp);
    /* Durable: recorded before anyone holds an id, so that a restarted
     * server 0 lets each client re-join under its own. */
    char why[RKV_PROTO_TEXT_MAX];
    int rc = srv_coord_save(s, why, sizeof(why));
    if (rc < 0) {
        /* Nothing recorded, nothing handed out: each of them is refused and
         * the ids are free for the next join. They stayed taken, so that
         * after a full disk every later client was told the ids were all
         * handed out, kept in an rkv-coord that did not exist, until server
         * 0 restarted (an outside tester). */
        RKV_LOGE(s->port, "server 0: cannot record the client ids: %s", why);
        for (uint32_t i = 0; i < s->n_hellos; i++) {
            srv_conn_of(s->hellos[i].peer)->hello = 0;
            struct rkv_hdr h = {.type = RKV_MSG_ERROR, .req_id = s->hellos[i].req_id, .status = rc};
            srv_reply(s, s->hellos[i].peer, &h, why);
        }
        s->n_hellos = 0;
        return;
    }
    for (uint32_t i = 0; i < s->n_hellos; i++) {
        srv_conn_of(s->hellos[i].peer)->client_id = i;
        srv_hello_reply(s, s->hellos[i].peer, s->hellos[i].req_id, i);
    }
    RKV_LOGI(s->port, "all %u clients joined; ids assigned", s->n_hellos);
}

/* ---- tensors ---- */

static struct rkv_tensor *srv_find_name(struct rkv_server *s, const char *name)
{
    for (uint32_t i = 1; i <= s->n_tensors; i++) {
        struct rkv_tensor *t = rkv_tensor_at(&s->tensors, i);
        if (t && strcmp(t->meta.name, name) == 0)
            return t;
    }
    return NULL;
}

/* NULL when w (with its book and local index) describes tensor t as it
 * is, else the first field that differs. The initial values count: a second
 * init_data asking for other ones would otherwise return 0 and silently
 * keep the first's. */
static const char *srv_differs(const struct rkv_tensor *t, const struct rkv_wire_tensor *w,
                               const uint32_t *book, const uint64_t *local)
{
    if (t->meta.dtype != (enum rkv_dtype)w->dtype)
        return "dtype";
    if (t->meta.rows != w->rows)
        return "rows";
    if (t->meta.row_len != w->row_len)
        return "row_len";
    if (t->meta.policy != (enum rkv_policy)w->policy)
        return "policy";
    if (t->meta.with_state != (int)w->with_state)
        return "with_state";
    if (t->init != (enum rkv_init)w->init)
        return "init";
    if (t->init == RKV_INIT_UNIFORM && t->init_seed != w->init_seed)
        return "init_seed";
    if (t->meta.policy == RKV_PART_EXPLICIT &&
        memcmp(t->pb.book, book, (size_t)t->meta.rows * sizeof(uint32_t)) != 0)
        return "book";
    if (!t->pb.user_local != !local ||
        (local && memcmp(t->pb.g2l, local, (size_t)t->meta.rows * sizeof(*local)) != 0))
        return "local index";
    return NULL;
}

/* The oracle self-test's fault (rkv_server_set_test_corrupt_row). */
static void srv_corrupt(struct rkv_tensor *t, uint64_t local)
{
    uint8_t *row = t->shard.data + local * t->row_bytes;
    switch (t->meta.dtype) {
    case RKV_F32:
        ((float *)row)[0] += 1;
        break;
    case RKV_F64:
        ((double *)row)[0] += 1;
        break;
    case RKV_I32:
        ((int32_t *)row)[0] += 1;
        break;
    case RKV_I64:
        ((int64_t *)row)[0] += 1;
        break;
    }
}

/* A row lock this server waits on is held by sibling server `tag`
 * (struct rkv_shard holder_dead). A dead sibling's row locks used to be
 * freed only by its restart: killed and not restarted, it held them for
 * ever, and every server of the machine that touched one of those rows
 * hung (in durable mode with the log's lock held, so did the machine's
 * every push). In durable mode the log's lock orders this with the push
 * the dead one may have been applying, which is finished first. */
static int srv_holder_dead(void *arg, struct rkv_shard *sh, unsigned tag)
{
    struct rkv_server *s = arg;
    (void)sh; /* every tensor's words of that server go */
    const struct rkv_port_ops *o = s->port->ops;
    if (!s->mach.hdr || tag == 0 || tag > RKV_MACH_SERVERS || tag == s->mach.owner ||
        !o->proc_alive)
        return 0;
    uint64_t proc = atomic_load(&s->mach.hdr->reader_proc[tag - 1]);
    if (!proc || o->proc_alive(s->port, proc))
        return 0;
    int n = 0;
    char err[300];
    if (s->wal) {
        /* As a push holds it (the run thread's torn check too): one apply
         * of this server at a time (its reader slot is one flag). */
        int have = o->mutex_held(s->hmu);
        if (!have)
            o->mutex_lock(s->hmu);
        n = rkv_wal_reap(s->wal, s->ht, tag, proc, err, sizeof(err));
        if (!have)
            o->mutex_unlock(s->hmu);
        if (n < 0)
            RKV_LOGW(s->port, "server %u: %s", s->server_id, err);
    } else {
        for (uint32_t id = 1; id <= s->n_tensors; id++) {
            struct rkv_tensor *t = rkv_tensor_at(&s->tensors, id);
            /* A restart of the slot (a new process there) frees its own. */
            if (rkv_tensor_serving(t) && atomic_load(&s->mach.hdr->reader_proc[tag - 1]) == proc) {
                struct rkv_shard as_dead = t->shard;
                as_dead.owner = tag;
                n += (int)rkv_shard_reclaim(&as_dead);
            }
        }
    }
    if (n > 0)
        RKV_LOGW(s->port,
                 "server %u: server s%u.%u (process %llu) died holding %d row lock(s) of machine "
                 "%u: freed them",
                 s->server_id, s->cfg.machine_id, tag - 1,
                 (unsigned long long)RKV_PORT_PROC_PID(proc), n, s->cfg.machine_id);
    return n > 0;
}

/* The machine segment: the machine's first server made it before any
 * INIT phase reached the others. Progress task. */
static int srv_map_mach(struct rkv_server *s)
{
    if (s->mach.hdr)
        return 0;
    return rkv_mach_attach(s->port, s->cfg.shm_prefix, s->cfg.machine_id, s->cfg.n_workers,
                           s->local_id + 1, &s->mach, s->err, sizeof(s->err));
}

/* Makes (create=1) or attaches to this machine's segment of tensor t, the
 * machine segment attached (srv_map_mach). The progress task's, or the make
 * task's for a tensor nobody else touches yet (t->making): why goes to err,
 * not s->err. */
static int srv_map_shard(struct rkv_server *s, struct rkv_tensor *t, int create, char *err,
                         size_t err_len)
{
    char name[96];
    uint32_t mach = s->cfg.machine_id;
    rkv_shard_name(name, sizeof(name), s->cfg.shm_prefix, mach, t->meta.id);
    int rc;
    /* A segment left by a crashed earlier run of this cluster is stale;
     * a co-located client that still maps it learns so (RKV_SHARD_MOVED). */
    if (create)
        rkv_shard_retire(s->port, name);
    rc = rkv_shard_map_local(s->port, name, rkv_pbook_local_rows(&t->pb, mach), t->row_bytes,
                             t->meta.with_state, rkv_shard_book_len(&t->meta), t->pb.user_local,
                             create, &t->shard, err, err_len);
    if (rc < 0)
        return rc;
    t->mapped = 1;
    t->shard.owner = s->local_id + 1;
    t->shard.holder_dead = srv_holder_dead;
    t->shard.holder_arg = s;
    if (!create)
        return 0;
    rkv_shard_init_values(&t->shard, t, mach);
    if (t->shard.book)
        memcpy(t->shard.book, t->pb.book, (size_t)t->shard.book_len * sizeof(uint32_t));
    if (t->shard.local)
        memcpy(t->shard.local, t->pb.g2l, (size_t)t->shard.book_len * sizeof(uint64_t));
    uint64_t bad = atomic_load(&s->test_corrupt_row);
    if (bad < t->meta.rows && rkv_pbook_machine(&t->pb, bad) == mach)
        srv_corrupt(t, rkv_pbook_g2l(&t->pb, bad));
    rkv_mach_publish(&s->mach, t);
    return 0;
}

/* INIT phases, driven by the client that calls rkv_client_init_data():
 * op 0 at server 0 (assign an id; create machine 0's segment), op 1 at the
 * first server of every other machine (create), op 2 at the rest (attach),
 * op 3 at server 0 (visible to META from now on). */
#define SRV_INIT_LATER 1 /* srv_init_tensor: the reply waits for *job_p's make */

/* Makes t's segment here (0 or < 0), or, for a large one, hands it to the
 * make task: SRV_INIT_LATER with the job to queue in *job_p, t marked as
 * being made before any other task can find it in the table. A large
 * segment made here held every other request for as long. */
static int srv_make_start(struct rkv_server *s, struct rkv_tensor *t, int create,
                          struct srv_make **job_p)
{
    uint64_t bytes = rkv_pbook_local_rows(&t->pb, s->cfg.machine_id) * (uint64_t)t->row_bytes *
                     (t->meta.with_state ? 2 : 1);
    if (bytes < atomic_load(&s->make_async_bytes))
        return srv_map_shard(s, t, create, s->err, sizeof(s->err));
    if (atomic_load(&s->n_make) >= SRV_MAX_MAKES) /* only this task adds */
        return rkv_errf(s->err, sizeof(s->err), -RKV_ELIMIT,
                        "tensor '%s': %u tensors are being made on server %u already", t->meta.name,
                        SRV_MAX_MAKES, s->server_id);
    struct srv_make *job = calloc(1, sizeof(*job));
    if (!job)
        return rkv_errf(s->err, sizeof(s->err), -RKV_ENOMEM, "out of memory for tensor '%s'",
                        t->meta.name);
    job->t = t;
    job->create = create;
    t->make_job = job;
    atomic_store(&t->making, 1);
    *job_p = job;
    return SRV_INIT_LATER;
}

static int srv_init_tensor(struct rkv_server *s, const struct rkv_msg *m, uint32_t *id_p,
                           struct srv_make **job_p)
{
    const struct rkv_wire_tensor *w = &m->u.tensor.t;
    uint32_t op = m->h.op;
    struct rkv_tensor *t = srv_find_name(s, w->name);
    if (op == 3) {
        if (!t || t->meta.id != m->h.tensor_id)
            return rkv_errf(s->err, sizeof(s->err), -RKV_ENOTENSOR, "commit of unknown tensor");
        if (atomic_load(&t->making))
            return rkv_errf(s->err, sizeof(s->err), -RKV_EINVAL,
                            "commit of tensor '%s' before its segment is made", t->meta.name);
        int was = t->ready;
        t->ready = 1;
        /* Recorded before it is answered: a restarted server 0 lists what
         * its record says was committed (srv_coord_apply). */
        int rc = !was && s->server_id == 0 ? srv_coord_save(s, s->err, sizeof(s->err)) : 0;
        if (rc < 0) {
            t->ready = 0;
            return rc;
        }
        *id_p = t->meta.id;
        return 0;
    }
    if (t) {
        const char *field = srv_differs(t, w, m->u.tensor.book, m->u.tensor.local);
        if (field && s->server_id == 0 && !t->ready)
            return rkv_errf(s->err, sizeof(s->err), -RKV_EEXIST,
                            "tensor '%s': an init_data of it that did not complete (or is under "
                            "way) holds the name with another description (its %s differs); "
                            "the same description may be tried again, another needs another "
                            "name or a restart of the servers",
                            w->name, field);
        if (field)
            return rkv_errf(s->err, sizeof(s->err), -RKV_EEXIST,
                            "tensor '%s' exists with another description (its %s differs)", w->name,
                            field);
        /* Phases 1 and 2 carry server 0's id: answered with this server's
         * own, the caller's init_data passed, and every push and pull of
         * this machine's rows then failed "unknown tensor id" (an outside
         * tester's INIT under another id came first). */
        if (op != 0 && t->meta.id != m->h.tensor_id)
            return rkv_errf(s->err, sizeof(s->err), -RKV_EEXIST,
                            "tensor '%s' is held by server %u under id %u, and this INIT names id "
                            "%u: the cluster's servers disagree on it (restart them together, or "
                            "use another name)",
                            w->name, s->server_id, t->meta.id, m->h.tensor_id);
        *id_p = t->meta.id;
        /* Its make is under way (the same description, a second caller or
         * a retry): answered with the first, once it is made. */
        if (atomic_load(&t->making)) {
            *job_p = NULL; /* srv_make_wait finds it, under mu */
            return SRV_INIT_LATER;
        }
        /* Its make failed (no memory for the segment, say): made again, in
         * place. A tensor never leaves the table while the server serves:
         * other tasks walk it without a lock (rkv_wal_reap). */
        if (t->make_rc < 0) {
            t->make_rc = 0;
            int rc = srv_make_start(s, t, op != 2, job_p);
            if (rc < 0)
                t->make_rc = rc;
            return rc;
        }
        return 0;
    }
    /* A tensor the cluster made before (the INIT says so) that this
     * durable machine does not hold: its files are not the ones it ran on
     * (another or an empty durable_dir, files lost). Made anew, its rows
     * read zeros where pushes were acknowledged. */
    if (s->durable && (op == 1 || op == 2) && m->h.param == 1.0)
        return rkv_errf(s->err, sizeof(s->err), -RKV_ECONFIG,
                        "tensor '%s' was made by this cluster before, but machine %u does not "
                        "hold it: its durable directory %s is not the one it ran on (another or "
                        "an empty one, or its files were lost); restart its servers on that "
                        "directory (rows made anew here would read zeros where pushes were "
                        "acknowledged)",
                        w->name, s->cfg.machine_id, s->cfg.durable_dir);
    uint32_t id = op == 0 ? s->n_tensors + 1 : m->h.tensor_id;
    /* op 1 creates the machine's segment: only its first server may. */
    int role_ok = op == 0   ? s->server_id == 0
                  : op == 1 ? s->local_id == 0 && s->server_id != 0
                            : s->local_id != 0;
    /* Phase 0 at another server is refused as such, whatever that server
     * holds: it read "the cluster holds 1024 tensors already" after a
     * phase-1 INIT of id 1024 there (an outside tester). */
    if (op == 0 && !role_ok)
        return rkv_errf(s->err, sizeof(s->err), -RKV_EINVAL,
                        "tensor '%s': INIT phase 0 (the tensor's id) goes to server 0, not "
                        "server %u",
                        w->name, s->server_id);
    if (op == 0 && id > RKV_MAX_TENSORS)
        return rkv_errf(s->err, sizeof(s->err), -RKV_ELIMIT,
                        "tensor '%s': the cluster holds %u tensors already, its limit "
                        "(RKV_MAX_TENSORS)",
                        w->name, RKV_MAX_TENSORS);
    const struct rkv_tensor *holder = id <= RKV_MAX_TENSORS ? rkv_tensor_at(&s->tensors, id) : NULL;
    if (holder)
        return rkv_errf(s->err, sizeof(s->err), -RKV_EEXIST,
                        "tensor '%s': id %u is held by server %u's tensor '%s' (the cluster's "
                        "servers disagree on it: restart them together)",
                        w->name, id, s->server_id, holder->meta.name);
    if (!role_ok || op > 2 || id == 0 || id > RKV_MAX_TENSORS)
        return rkv_errf(s->err, sizeof(s->err), -RKV_EINVAL, "bad INIT phase %u for id %u", op, id);
    t = calloc(1, sizeof(*t));
    if (!t)
        return -RKV_ENOMEM;
    int rc = rkv_tensor_from_wire_local(w, m->u.tensor.book, m->u.tensor.local, s->cfg.n_machines,
                                        id, t, s->err, sizeof(s->err));
    if (rc == 0)
        rc = srv_map_mach(s);
    if (rc == 0)
        rc = srv_make_start(s, t, op != 2, job_p);
    if (rc >= 0 && rkv_tensor_put(&s->tensors, id, t) < 0) {
        if (rc == SRV_INIT_LATER)
            free(*job_p);
        rc = rkv_errf(s->err, sizeof(s->err), -RKV_ENOMEM, "out of memory for tensor %u", id);
    }
    if (rc < 0) {
        rkv_tensor_free(t);
        free(t);
        return rc;
    }
    if (id > s->n_tensors)
        s->n_tensors = id;
    *id_p = id;
    return rc;
}

/* Durable mode: the reply waits for the durable task's next snapshot.
 * Its place in the queue is taken before the request is applied, so that
 * a full queue or a failed allocation refuses the request with nothing
 * applied: made after, such a failure answered an error for a push that
 * was applied and logged. */
static int srv_ack_take(struct rkv_server *s, struct srv_ack **a_p)
{
    *a_p = NULL;
    if (!s->durable)
        return 0;
    s->port->ops->mutex_lock(s->mu);
    uint32_t n = s->n_acks;
    s->port->ops->mutex_unlock(s->mu);
    /* Only this server's progress task adds: n can only fall meanwhile. */
    if (n >= SRV_MAX_ACKS)
        return rkv_errf(s->err, sizeof(s->err), -RKV_ELIMIT,
                        "%u acknowledgements already wait for a snapshot (the disk is slower "
                        "than the pushes)",
                        n);
    if (!(*a_p = malloc(sizeof(**a_p))))
        return rkv_errf(s->err, sizeof(s->err), -RKV_ENOMEM,
                        "out of memory for an acknowledgement waiting for a snapshot");
    return 0;
}

/* a, last in the durable task's queue (under mu). */
static void srv_ack_queue(struct rkv_server *s, struct srv_ack *a)
{
    RKV_ASSERT_HELD(s->port, s->mu);
    a->next = NULL;
    if (s->acks_tail)
        s->acks_tail->next = a;
    else
        s->acks = a;
    s->acks_tail = a;
    s->n_acks++;
}

/* Queues a (from srv_ack_take) to be sent after the next snapshot. */
static void srv_defer(struct rkv_server *s, struct srv_ack *a, struct rkv_peer *peer,
                      const struct rkv_msg *m, int type, uint32_t tensor_id)
{
    assert(s->durable && a);
    *a = (struct srv_ack){
        .peer = peer, .h = {.type = (uint8_t)type, .req_id = m->h.req_id, .tensor_id = tensor_id}};
    s->port->ops->mutex_lock(s->mu);
    srv_ack_queue(s, a);
    struct srv_conn *c = srv_conn_of(peer);
    if (c)
        c->acks_pending++;
    s->port->ops->cond_broadcast(s->cv);
    s->port->ops->mutex_unlock(s->mu);
}

/* Tells a task of the server that waits on cv to end (*stop, under mu),
 * and waits for it. */
static void srv_task_end(struct rkv_server *s, int *stop, struct rkv_task **task)
{
    if (!*task)
        return;
    s->port->ops->mutex_lock(s->mu);
    *stop = 1;
    s->port->ops->cond_broadcast(s->cv);
    s->port->ops->mutex_unlock(s->mu);
    s->port->ops->task_join(s->port, *task);
    *task = NULL;
}

/* A make that could not be queued: its tensor stays in the table as one
 * whose make failed (rc), made again by the next INIT of it. */
static void srv_make_abandon(struct srv_make *job, int rc)
{
    job->t->make_rc = rc;
    job->t->make_job = NULL;
    atomic_store(&job->t->making, 0);
    free(job);
}

static void srv_make_main(void *arg);

/* The INIT m waits for the make of tensor id: job, a new one to queue, or
 * (NULL) the one under way. *a_p is the request's acknowledgement if it
 * took one (durable mode), else one is made; it is the job's from here
 * unless the make ended meanwhile. SRV_INIT_LATER: the make task answers;
 * 0: made meanwhile, answer now; < 0: refused (a new job undone). */
static int srv_make_wait(struct rkv_server *s, struct rkv_peer *peer, const struct rkv_msg *m,
                         uint32_t id, struct srv_make *job, struct srv_ack **a_p)
{
    const struct rkv_port_ops *o = s->port->ops;
    struct srv_ack *a = *a_p;
    int rc = 0;
    if (!a && !(a = malloc(sizeof(*a))))
        rc = rkv_errf(s->err, sizeof(s->err), -RKV_ENOMEM, "out of memory for an INIT's reply");
    if (rc == 0 && job && !s->make_task &&
        (rc = o->task_start(s->port, "make", srv_make_main, s, &s->make_task)) < 0)
        rkv_errf(s->err, sizeof(s->err), rc, "cannot start the task that makes tensors");
    if (rc < 0) {
        if (job)
            srv_make_abandon(job, rc);
        if (a != *a_p)
            free(a);
        return rc;
    }
    *a = (struct srv_ack){
        .peer = peer, .h = {.type = RKV_MSG_INIT_REPLY, .req_id = m->h.req_id, .tensor_id = id}};
    o->mutex_lock(s->mu);
    if (job) {
        if (s->make_q_tail)
            s->make_q_tail->next = job;
        else
            s->make_q = job;
        s->make_q_tail = job;
        atomic_fetch_add(&s->n_make, 1);
    } else {
        struct rkv_tensor *t = rkv_tensor_at(&s->tensors, id);
        assert(t);
        if (!atomic_load(&t->making)) { /* made (or failed) since we looked */
            rc = t->make_rc;
            o->mutex_unlock(s->mu);
            if (a != *a_p)
                free(a);
            if (rc < 0)
                rkv_errf(s->err, sizeof(s->err), rc,
                         "tensor '%s': its segment could not be made on server %u (its log says "
                         "why)",
                         t->meta.name, s->server_id);
            return rc;
        }
        job = t->make_job;
        if (job->n_waiters >= SRV_MAX_MAKE_WAITERS) {
            o->mutex_unlock(s->mu);
            if (a != *a_p)
                free(a);
            return rkv_errf(s->err, sizeof(s->err), -RKV_ELIMIT,
                            "tensor '%s': %u INITs wait for its segment already", t->meta.name,
                            SRV_MAX_MAKE_WAITERS);
        }
    }
    a->next = job->waiters;
    job->waiters = a;
    job->n_waiters++;
    struct srv_conn *c = srv_conn_of(peer);
    if (c)
        c->acks_pending++; /* the peer stays until the answer went */
    o->cond_broadcast(s->cv);
    o->mutex_unlock(s->mu);
    *a_p = NULL;
    return SRV_INIT_LATER;
}

static void srv_send_ack(struct rkv_server *s, const struct srv_ack *a, int rc, const char *why);
static void srv_ack_done(struct rkv_server *s, const struct srv_ack *a);

/* 1 when the server stopped (what is queued is refused, not made); waits
 * first while held (tests: rkv_server_test_make). */
static int srv_make_held(struct rkv_server *s)
{
    const struct rkv_port_ops *o = s->port->ops;
    for (;;) {
        o->mutex_lock(s->mu);
        int stop = s->make_stop;
        o->mutex_unlock(s->mu);
        if (stop || !atomic_load(&s->make_hold))
            return stop;
        o->sleep_ns(s->port, 1000000);
    }
}

/* Answers and frees a list of held requests (s->mu not held). */
static void srv_answer_all(struct rkv_server *s, struct srv_ack *w, int rc, const char *why)
{
    while (w) {
        struct srv_ack *next = w->next;
        srv_send_ack(s, w, rc, why);
        srv_ack_done(s, w);
        free(w);
        w = next;
    }
}

/* The make of job ended with rc: the tensor is served from now (or not,
 * rc < 0), and its INITs are answered, in durable mode after the next
 * snapshot, which holds the tensor (it is published in the machine
 * segment before). */
static void srv_make_done(struct rkv_server *s, struct srv_make *job, int rc, const char *why)
{
    const struct rkv_port_ops *o = s->port->ops;
    struct rkv_tensor *t = job->t;
    char stopped[RKV_PROTO_TEXT_MAX];
    o->mutex_lock(s->mu);
    t->make_rc = rc;
    /* Stopped meanwhile (SIGTERM, rkv_server_stop): the segment goes with
     * the server, so the INIT is not answered as made (its init_data
     * returned 0, and the first pull met a server gone). The tensor itself
     * is made: served until the server is destroyed, as any other. */
    if (rc == 0 && (s->stop || s->make_stop)) {
        rc = rkv_errf(stopped, sizeof(stopped), -RKV_ESHUTDOWN,
                      "tensor '%s': server %u stopped while its segment was made", t->meta.name,
                      s->server_id);
        why = stopped;
    }
    t->make_job = NULL;
    atomic_store_explicit(&t->making, 0, memory_order_release);
    atomic_fetch_sub(&s->n_make, 1);
    struct srv_ack *w = job->waiters;
    if (rc == 0 && s->durable) {
        while (w) {
            struct srv_ack *next = w->next;
            srv_ack_queue(s, w);
            w = next;
        }
        o->cond_broadcast(s->cv);
    }
    o->mutex_unlock(s->mu);
    srv_answer_all(s, w, rc, why);
    free(job);
}

/* The make task: one large tensor's segment at a time, off the progress
 * task; at a stop, what is still queued is refused. */
static void srv_make_main(void *arg)
{
    struct rkv_server *s = arg;
    const struct rkv_port_ops *o = s->port->ops;
    char why[RKV_PROTO_TEXT_MAX];
    o->mutex_lock(s->mu);
    for (;;) {
        while (!s->make_q && !s->make_stop)
            o->cond_wait(s->cv, s->mu, UINT64_MAX);
        struct srv_make *job = s->make_q;
        if (!job)
            break;
        s->make_q = job->next;
        if (!s->make_q)
            s->make_q_tail = NULL;
        o->mutex_unlock(s->mu);
        atomic_fetch_add(&s->makes_begun, 1);
        int rc;
        if (srv_make_held(s)) {
            rc = rkv_errf(why, sizeof(why), -RKV_ESHUTDOWN,
                          "tensor '%s': server %u stopped before its segment was made",
                          job->t->meta.name, s->server_id);
        } else {
            rc = srv_map_shard(s, job->t, job->create, why, sizeof(why));
            if (rc < 0)
                RKV_LOGE(s->port, "server %u: %s", s->server_id, why);
        }
        srv_make_done(s, job, rc, why);
        o->mutex_lock(s->mu);
    }
    o->mutex_unlock(s->mu);
}

/* Before the durable task stops (a make's acknowledgements go there) and
 * the engine (the answers go through it). */
static void srv_make_stop(struct rkv_server *s)
{
    srv_task_end(s, &s->make_stop, &s->make_task);
}

static void srv_on_init(struct rkv_server *s, struct rkv_peer *peer, const struct rkv_msg *m)
{
    uint32_t id = 0;
    struct srv_ack *a = NULL;
    /* Every client says hello before it makes a tensor. A raw INIT before
     * any client joined put a tensor in a durable server 0's snapshot
     * with no coordination record beside it, and the restarted server
     * refused to start, blaming a file removed by hand (an outside
     * tester). */
    const struct srv_conn *c = srv_conn_of(peer);
    if (!c || c->client_id == RKV_ID_NONE)
        return srv_status(s, peer, m, RKV_MSG_INIT_REPLY, -RKV_EINVAL,
                          "INIT only from a joined client (HELLO first)");
    /* A tensor acknowledged in durable mode is in the snapshot, so pushes
     * to it can be retried after a restart. The commit (op 3) changes
     * nothing on disk. */
    int rc = m->h.op != 3 ? srv_ack_take(s, &a) : 0;
    struct srv_make *job = NULL;
    if (rc == 0)
        rc = srv_init_tensor(s, m, &id, &job);
    if (rc == SRV_INIT_LATER && (rc = srv_make_wait(s, peer, m, id, job, &a)) == SRV_INIT_LATER)
        return; /* the make task answers */
    if (rc == 0 && a)
        return srv_defer(s, a, peer, m, RKV_MSG_INIT_REPLY, id);
    free(a);
    struct rkv_msg r = *m;
    r.h.tensor_id = id;
    srv_status(s, peer, &r, RKV_MSG_INIT_REPLY, rc, rc < 0 ? s->err : NULL);
}

/* A connection that reads the catalogue (an observer client says no
 * HELLO): told of a shutdown too (srv_tell_shutdown). */
static void srv_mark_reader(struct rkv_server *s, struct rkv_peer *peer)
{
    struct srv_conn *c = srv_conn_of(peer);
    if (!c || c->reader)
        return;
    s->port->ops->mutex_lock(s->mu);
    c->reader = 1;
    s->port->ops->mutex_unlock(s->mu);
}

static void srv_on_meta(struct rkv_server *s, struct rkv_peer *peer, const struct rkv_msg *m)
{
    srv_mark_reader(s, peer);
    struct rkv_tensor *t = srv_find_name(s, m->u.name);
    if (!t || (s->server_id == 0 && !t->ready) || atomic_load(&t->making) || t->make_rc < 0)
        return srv_status(s, peer, m, 0, -RKV_ENOTENSOR, "no such tensor");
    struct rkv_wire_tensor w;
    struct rkv_tensor_desc d = {.init = t->init, .init_seed = t->init_seed};
    rkv_tensor_to_wire(&t->meta, &d, &w);
    const uint64_t *local = t->pb.user_local ? t->pb.g2l : NULL;
    size_t len = RKV_PROTO_HDR_BYTES + rkv_proto_tensor_body_bytes(w.book_len, local != NULL);
    struct rkv_tx *tx;
    int rc = rkv_engine_tx_alloc(s->eng, len, &tx);
    if (rc < 0)
        return srv_status(s, peer, m, 0, rc, "META reply too large for max_slot_bytes");
    struct rkv_hdr h = {.type = RKV_MSG_META_REPLY,
                        .req_id = m->h.req_id,
                        .tensor_id = t->meta.id,
                        .sender = s->server_id};
    len = rkv_proto_enc_tensor_local(rkv_engine_tx_buf(tx), &h, &w, t->pb.book, local);
    rkv_engine_reply(s->eng, peer, tx, len);
}

/* Server 0: every tensor whose INIT was committed, in id order. */
static void srv_on_list(struct rkv_server *s, struct rkv_peer *peer, const struct rkv_msg *m)
{
    srv_mark_reader(s, peer);
    if (s->server_id != 0)
        return srv_status(s, peer, m, 0, -RKV_EINVAL, "LIST goes to server 0");
    uint32_t n = 0;
    for (uint32_t i = 1; i <= s->n_tensors; i++) {
        const struct rkv_tensor *t = rkv_tensor_at(&s->tensors, i);
        n += t && t->ready;
    }
    size_t len = RKV_PROTO_HDR_BYTES + (size_t)n * RKV_PROTO_LIST_ENTRY_BYTES;
    struct rkv_tx *tx;
    int rc = rkv_engine_tx_alloc(s->eng, len, &tx);
    if (rc < 0)
        return srv_status(s, peer, m, 0, rc, "LIST reply too large for max_slot_bytes");
    struct rkv_hdr h = {
        .type = RKV_MSG_LIST_REPLY, .req_id = m->h.req_id, .sender = s->server_id, .count = n};
    void *buf = rkv_engine_tx_buf(tx);
    len = rkv_proto_enc_list_reply(buf, &h);
    uint32_t k = 0;
    for (uint32_t i = 1; i <= s->n_tensors; i++) {
        const struct rkv_tensor *t = rkv_tensor_at(&s->tensors, i);
        if (!t || !t->ready)
            continue;
        struct rkv_wire_tensor w;
        struct rkv_tensor_desc d = {.init = t->init, .init_seed = t->init_seed};
        rkv_tensor_to_wire(&t->meta, &d, &w);
        rkv_proto_put_list_entry(buf, k++, &w, t->meta.id);
    }
    assert(k == n);
    rkv_engine_reply(s->eng, peer, tx, len);
}

/* ---- data path ---- */

static struct rkv_tensor *srv_tensor(struct rkv_server *s, const struct rkv_msg *m, int *rc_p)
{
    uint32_t id = m->h.tensor_id;
    struct rkv_tensor *t = rkv_tensor_at(&s->tensors, id); /* NULL for 0 and out of range */
    if (!t) {
        /* What a client meets after this server restarted without durable
         * mode: say how that reads, not only the id (an outside tester). */
        uint32_t held = 0;
        for (uint32_t i = 1; i <= s->n_tensors; i++)
            held += rkv_tensor_at(&s->tensors, i) != NULL;
        *rc_p = rkv_errf(s->err, sizeof(s->err), -RKV_ENOTENSOR,
                         "unknown tensor id %u (this server holds %u tensor%s; one restarted "
                         "without durable mode holds none made before it)",
                         id, held, held == 1 ? "" : "s");
        return NULL;
    }
    /* Only the make task touches a tensor being made; one whose make
     * failed has no rows here. Neither can be pushed or pulled: its
     * init_data has not returned, or failed. */
    if (atomic_load_explicit(&t->making, memory_order_acquire) || t->make_rc < 0) {
        *rc_p = rkv_errf(s->err, sizeof(s->err), -RKV_ENOTENSOR,
                         "tensor '%s' %s on server %u (its init_data %s)", t->meta.name,
                         t->make_rc < 0 ? "could not be made" : "is still being made", s->server_id,
                         t->make_rc < 0 ? "failed" : "has not returned");
        return NULL;
    }
    if (m->h.row_bytes != t->row_bytes) {
        *rc_p =
            rkv_errf(s->err, sizeof(s->err), -RKV_EDTYPE,
                     "tensor '%s': rows are %zu bytes (%u x %s), request has %u", t->meta.name,
                     t->row_bytes, t->meta.row_len, rkv_dtype_name(t->meta.dtype), m->h.row_bytes);
        return NULL;
    }
    *rc_p = 0;
    return t;
}

/* Durable mode: applies a push unless this machine applied its (client,
 * sequence) already, so a client retrying after a lost acknowledgement
 * gets the ack, not a second application; the whole step is inside the
 * machine's apply lock, so a snapshot holds a push and its sequence, or
 * neither. */
/* The connection's client, never the message's sender field: a peer must
 * not mark another client's next push as applied. */
static int srv_apply_logged(struct rkv_server *s, struct rkv_tensor *t, const struct rkv_msg *m,
                            uint32_t client)
{
    /* The log reads the rows three times (the record's CRC, its write, the
     * apply), and a push that came in a rendezvous slot is open to its
     * peer's writes meanwhile (engine.c eng_decode_slot): a peer that
     * rewrote a row between the CRC and the write left a record that
     * reads as torn, and every acknowledged push logged after it was lost
     * at the next restart. They are read from one copy of this server's. */
    size_t bytes = (size_t)m->h.count * t->row_bytes;
    uint8_t *rows = bytes ? malloc(bytes) : NULL;
    if (bytes && !rows)
        return rkv_errf(s->err, sizeof(s->err), -RKV_ENOMEM,
                        "tensor '%s': out of memory for a push's %zu bytes of rows", t->meta.name,
                        bytes);
    if (bytes)
        memcpy(rows, m->u.push.rows, bytes);
    struct rkv_wal_push p = {.tensor_id = t->meta.id,
                             .client = client < s->cfg.n_workers ? client : UINT32_MAX,
                             .seq = m->h.req_id,
                             .op = m->h.op,
                             .param = m->h.param,
                             .count = m->h.count,
                             .ids = m->u.push.ids,
                             .rows = rows};
    int dup = 0;
    int rc = rkv_wal_push(s->wal, t, s->ht, &p, &dup, s->err, sizeof(s->err));
    free(rows);
    if (rc == 0 && !dup)
        rkv_port_handler_work(s->port, m->h.count);
    if (dup) {
        atomic_fetch_add_explicit(&s->n_dups, 1, memory_order_relaxed);
        RKV_LOGI(s->port, "client %u: push %llx was applied before; acknowledging it again", client,
                 (unsigned long long)m->h.req_id);
    }
    return rc;
}

static int srv_apply_once(struct rkv_server *s, struct rkv_tensor *t, const struct rkv_msg *m,
                          uint32_t client)
{
    int rc;
    s->port->ops->mutex_lock(s->hmu);
    if (s->durable) { /* the log's turn: append, then apply, under its lock */
        rc = srv_apply_logged(s, t, m, client);
        s->port->ops->mutex_unlock(s->hmu);
        return rc;
    }
    /* Without durable mode nothing is promised across a crash, so no
     * (client, sequence) is tracked: a retried push applies again. */
    rc = rkv_shard_push(&t->shard, t, s->ht, m->h.op, m->h.param, m->u.push.ids, m->h.count,
                        m->u.push.rows);
    s->port->ops->mutex_unlock(s->hmu);
    rkv_port_handler_work(s->port, m->h.count);
    if (rc < 0)
        rkv_errf(s->err, sizeof(s->err), rc, "tensor '%s': push op %u on %s: %s", t->meta.name,
                 m->h.op, rkv_dtype_name(t->meta.dtype), rkv_strerror(rc));
    return rc;
}

/* The id a connection's pushes are deduplicated under (durable mode): its
 * client id where that is checked (server 0) or held here (the claim's
 * holder), or claimed by another connection of the same client (the
 * holder's nonce: a worker's new connection, come before its old one was
 * seen gone, retries its pushes). Another claimant's pushes are applied
 * untracked: one that claimed a worker's id and pushed a sequence of that
 * worker's far ahead made this server take every later push of the worker
 * for a retry, acknowledged and never applied (an outside tester: 6,441
 * wrong values in 5 s). The progress task's, as the claims index is. */
static uint32_t srv_dedup_id(struct rkv_server *s, const struct srv_conn *c)
{
    if (!c || c->client_id == RKV_ID_NONE)
        return RKV_ID_NONE;
    if (s->server_id == 0 || !c->shadow)
        return c->client_id;
    const uint64_t *v = rkv_idmap_find(&s->claims, c->client_id);
    const struct srv_conn *holder = v ? (const struct srv_conn *)(uintptr_t)*v : NULL;
    return holder && holder->nonce == c->nonce ? c->client_id : RKV_ID_NONE;
}

/* A request's rows checked before anything is applied or sent
 * (rkv_shard_rows_free); a durable push looks under the log's lock
 * instead (wal.c). */
static int srv_rows_free(struct rkv_server *s, struct rkv_tensor *t, const uint64_t *ids,
                         uint32_t n, const char *what)
{
    return rkv_shard_rows_free(&t->shard, t, ids, n, s->cfg.timeout_ms, s->cfg.machine_id, what,
                               s->err, sizeof(s->err));
}

static void srv_on_push(struct rkv_server *s, struct rkv_peer *peer, const struct rkv_msg *m)
{
    int rc;
    struct rkv_tensor *t = srv_tensor(s, m, &rc);
    if (t)
        rc = rkv_tensor_check_ids(t, s->cfg.machine_id, m->u.push.ids, m->h.count, s->err,
                                  sizeof(s->err));
    /* The client refuses such a learning rate before it sends; a peer that
     * does not was obeyed: a NaN made every row it named NaN for good. So
     * it is refused here too, before anything is logged or applied. */
    if (rc == 0 && rkv_handler_check_param(m->h.op, t->meta.dtype, m->h.param) < 0)
        rc = rkv_errf(s->err, sizeof(s->err), -RKV_EINVAL,
                      "tensor '%s': push op %u with learning rate %g; it must be finite, not "
                      "negative, and fit the tensor's %s",
                      t->meta.name, m->h.op, m->h.param, rkv_dtype_name(t->meta.dtype));
    if (rc == 0 && !s->durable)
        rc = srv_rows_free(s, t, m->u.push.ids, m->h.count, "push");
    const struct srv_conn *c = srv_conn_of(peer);
    struct srv_ack *a = NULL;
    if (rc == 0)
        rc = srv_ack_take(s, &a);
    if (rc == 0)
        rc = srv_apply_once(s, t, m, srv_dedup_id(s, c));
    if (rc == 0 && a)
        return srv_defer(s, a, peer, m, RKV_MSG_PUSH_ACK, t->meta.id);
    free(a);
    srv_status(s, peer, m, RKV_MSG_PUSH_ACK, rc, rc < 0 ? s->err : NULL);
}

/* A pull whose reply could not be allocated: said with its size, since
 * "reply larger than max_slot_bytes" told the caller neither how large nor
 * what to do. */
static int srv_pull_too_big(struct rkv_server *s, const struct rkv_tensor *t, uint32_t n,
                            uint64_t len, int rc)
{
    if (len <= s->cfg.max_slot_bytes)
        return rkv_errf(s->err, sizeof(s->err), rc, "pull of %u rows of '%s': %s", n, t->meta.name,
                        rkv_strerror(rc));
    return rkv_errf(
        s->err, sizeof(s->err), rc,
        "pull of %u rows of '%s': a %llu-byte reply, over max_slot_bytes %llu (%s)", n,
        t->meta.name, (unsigned long long)len, (unsigned long long)s->cfg.max_slot_bytes,
        n > 1                       ? "pull fewer ids at once"
        : len <= RKV_MAX_SLOT_BYTES ? "raise max_slot_bytes: one row cannot be split"
                                    : "one row cannot be split, and no setting carries a message "
                                      "over RKV_MAX_SLOT_BYTES: shorten the rows");
}

/* Each reply row is what pull handler op writes for the row, out_len
 * elements computed under the row's lock (op 0: the row itself). */
static void srv_on_pull(struct rkv_server *s, struct rkv_peer *peer, const struct rkv_msg *m)
{
    int rc;
    uint32_t out_len = 0;
    struct rkv_tensor *t = srv_tensor(s, m, &rc);
    if (t)
        rc = rkv_tensor_check_ids(t, s->cfg.machine_id, m->u.pull.ids, m->h.count, s->err,
                                  sizeof(s->err));
    if (rc == 0)
        rc = srv_rows_free(s, t, m->u.pull.ids, m->h.count, "pull");
    if (rc < 0)
        return srv_status(s, peer, m, 0, rc, s->err);
    /* Checked and run under one hold: the handler checked is the one run. */
    const struct rkv_port_ops *po = s->port->ops;
    po->mutex_lock(s->hmu);
    rc = rkv_pull_check(s->pt, m->h.op, t, &out_len, s->err, sizeof(s->err));
    if (rc < 0) {
        po->mutex_unlock(s->hmu);
        return srv_status(s, peer, m, 0, rc, s->err);
    }
    size_t out_bytes = (size_t)out_len * rkv_dtype_size(t->meta.dtype);
    uint64_t len = RKV_PROTO_HDR_BYTES + (uint64_t)m->h.count * out_bytes;
    struct rkv_tx *tx;
    if (len > m->u.pull.reply_to.cap || (rc = rkv_engine_tx_alloc(s->eng, len, &tx)) < 0) {
        po->mutex_unlock(s->hmu);
        if (len > m->u.pull.reply_to.cap) {
            /* A client expects a shorter reply row: almost always a pull
             * handler registered with another out_mult or out_add there. */
            rkv_errf(s->err, sizeof(s->err), -RKV_ELIMIT,
                     "reply larger than the offered slot: pull handler %d replies %zu bytes a "
                     "row here, %llu for %u rows, over the %llu offered (registered with "
                     "another out_mult or out_add on the client?)",
                     (int)m->h.op, out_bytes, (unsigned long long)len, m->h.count,
                     (unsigned long long)m->u.pull.reply_to.cap);
            return srv_status(s, peer, m, 0, -RKV_ELIMIT, s->err);
        }
        srv_pull_too_big(s, t, m->h.count, len, rc);
        return srv_status(s, peer, m, 0, rc, s->err);
    }
    uint8_t *buf = rkv_engine_tx_buf(tx);
    struct rkv_hdr h = {.type = RKV_MSG_PULL_REPLY,
                        .req_id = m->h.req_id,
                        .tensor_id = t->meta.id,
                        .sender = s->server_id,
                        .count = m->h.count,
                        .op = m->h.op,
                        .row_bytes = (uint32_t)out_bytes};
    rkv_proto_enc_pull_reply(buf, &h);
    uint8_t *out = buf + RKV_PROTO_HDR_BYTES;
    for (uint32_t i = 0; i < m->h.count; i++) {
        int rc = rkv_pull_row(&t->shard, t, s->pt, m->h.op, m->h.param, m->u.pull.ids[i], out_len,
                              out + (size_t)i * out_bytes, 0);
        assert(rc == 0); /* no deadline */
        (void)rc;
    }
    po->mutex_unlock(s->hmu);
    rkv_port_handler_work(s->port, m->h.count);
    rkv_engine_write(s->eng, peer, tx, len, &m->u.pull.reply_to);
}

/* Zero-copy pulls: the rows go straight into the caller's buffer, one plain
 * WRITE per run of consecutive positions, then PULL_DONE. A write is at most
 * this long (the NIC seam's length is 32 bits). */
#define SRV_ZC_RUN_MAX (1u << 30)
/* Rows sent one write each from the shard: smaller rows are cheaper staged
 * and sent in runs (measured, tcp loopback: 4 KiB rows one write each
 * pulled at a quarter of the staged rate; 64 KiB rows gain). */
#define SRV_ZC_DIRECT_MIN_ROW (64u << 10)

/* On a NIC that has read the bytes when the post returns (tcp), each row
 * is sent from the shard itself, under its row lock: no copy at all, and a
 * row assigned concurrently is sent whole, as a copy under the lock would
 * be. Returns 1 when sent, 0 when this path does not apply, or an error. */
static int srv_pull_zc_direct(struct rkv_server *s, struct rkv_peer *peer, struct rkv_tensor *t,
                              const struct rkv_msg *m)
{
    size_t rb = t->row_bytes;
    uint64_t data_bytes = t->shard.local_rows * rb;
    if (!rkv_engine_copies_at_post(s->eng) || rb < SRV_ZC_DIRECT_MIN_ROW || rb > SRV_ZC_RUN_MAX ||
        data_bytes == 0)
        return 0;
    if (!t->shard_mr &&
        rkv_engine_reg_mr(s->eng, t->shard.data, data_bytes, RKV_ACCESS_LOCAL, &t->shard_mr) < 0)
        return 0; /* the staged path still works */
    const struct rkv_slot_desc *dst = &m->u.pull_zc.dst;
    for (uint32_t i = 0; i < m->h.count; i++) {
        uint64_t l = rkv_pbook_g2l(&t->pb, m->u.pull_zc.ids[i]);
        struct rkv_sge sge = {
            .addr = t->shard.data + l * rb, .len = (uint32_t)rb, .mr = t->shard_mr};
        rkv_shard_lock(&t->shard, l);
        int rc = rkv_engine_put(s->eng, peer, &sge, dst->addr + (uint64_t)m->u.pull_zc.pos[i] * rb,
                                dst->rkey);
        rkv_shard_unlock(&t->shard, l);
        if (rc < 0)
            return rc;
    }
    return 1;
}

/* Elsewhere the rows are copied (under their locks) into a registered
 * buffer in request order, and each run of consecutive positions is one
 * write from it. */
static int srv_pull_zc_staged(struct rkv_server *s, struct rkv_peer *peer, struct rkv_tensor *t,
                              const struct rkv_msg *m)
{
    uint32_t n = m->h.count;
    size_t rb = t->row_bytes;
    uint64_t bytes = (uint64_t)n * rb;
    struct rkv_tx *tx;
    int rc =
        rkv_engine_tx_alloc(s->eng, bytes < RKV_PROTO_HDR_BYTES ? RKV_PROTO_HDR_BYTES : bytes, &tx);
    if (rc < 0)
        return srv_pull_too_big(s, t, n, bytes, rc);
    struct rkv_engine_put *puts = malloc((size_t)n * sizeof(*puts));
    if (!puts) {
        rkv_engine_tx_free(s->eng, tx);
        return rkv_errf(s->err, sizeof(s->err), -RKV_ENOMEM, "out of memory");
    }
    uint8_t *buf = rkv_engine_tx_buf(tx);
    const uint32_t *pos = m->u.pull_zc.pos;
    uint32_t n_puts = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint8_t *row = buf + (size_t)i * rb;
        rkv_shard_pull_row(&t->shard, t, m->u.pull_zc.ids[i], row);
        struct rkv_engine_put *last = n_puts ? &puts[n_puts - 1] : NULL;
        if (last && pos[i] == pos[i - 1] + 1 && last->len + rb <= SRV_ZC_RUN_MAX) {
            last->len += (uint32_t)rb;
            continue;
        }
        puts[n_puts++] =
            (struct rkv_engine_put){.src = row,
                                    .len = (uint32_t)rb,
                                    .raddr = m->u.pull_zc.dst.addr + (uint64_t)pos[i] * rb};
    }
    rc = rkv_engine_put_tx(s->eng, peer, tx, puts, n_puts, m->u.pull_zc.dst.rkey);
    free(puts);
    return rc;
}

static void srv_on_pull_zc(struct rkv_server *s, struct rkv_peer *peer, const struct rkv_msg *m)
{
    int rc;
    struct rkv_tensor *t = srv_tensor(s, m, &rc);
    if (t)
        rc = rkv_tensor_check_ids(t, s->cfg.machine_id, m->u.pull_zc.ids, m->h.count, s->err,
                                  sizeof(s->err));
    if (rc == 0 && m->h.op != RKV_PULL_ROWS) /* handlers reply by PULL (rkv_client_pull_with) */
        rc = rkv_errf(s->err, sizeof(s->err), -RKV_EINVAL, "PULL_ZC with pull handler %u", m->h.op);
    if (rc == 0)
        rc = srv_rows_free(s, t, m->u.pull_zc.ids, m->h.count, "pull");
    if (rc < 0)
        return srv_status(s, peer, m, 0, rc, s->err);
    rc = srv_pull_zc_direct(s, peer, t, m);
    if (rc == 0)
        rc = srv_pull_zc_staged(s, peer, t, m);
    if (rc == -RKV_EPEERDEAD)
        return; /* the writes broke the connection: nobody to answer */
    if (rc < 0)
        return srv_status(s, peer, m, 0, rc, s->err);
    rkv_port_handler_work(s->port, m->h.count);
    struct rkv_hdr h = {.type = RKV_MSG_PULL_DONE,
                        .req_id = m->h.req_id,
                        .tensor_id = t->meta.id,
                        .count = m->h.count,
                        .row_bytes = (uint32_t)t->row_bytes};
    srv_reply(s, peer, &h, NULL);
}

/* Server 0 hears of a client that left only from its connection, and tracks
 * one gone client at a time: a client that died while server 0 was down (a
 * restart), or while another was gone, or behind a link that broke every
 * connection at once, was never named, and a barrier then waited for it for
 * ever (barriers wait for the slowest worker: rkv_client_barrier). One away
 * for longer than a live client takes to re-join (its retry window: it
 * re-joins at its next call) is taken to have left. Looked at when a
 * barrier arrives, which each waiting client re-sends every timeout_ms. */
/* Empties the barrier before any of its waiters is answered, and returns
 * how many there were (they stay in s->barrier[0..n) until the next
 * arrival, which no answer makes). An answer whose post fails closes its
 * connection at once, and the close takes its waiter out of the barrier
 * (srv_on_peer): answering while the waiters were still in it skipped the
 * one moved into the closed one's place, which then got no answer and
 * stayed in barrier_at, so that every later barrier waited for ever (rkv
 * swarm, seed 15933: a link down while two workers waited). */
static uint32_t srv_barrier_take(struct rkv_server *s)
{
    uint32_t n = s->n_barrier;
    s->n_barrier = 0;
    for (uint32_t i = 0; i < n; i++)
        s->barrier_at[s->barrier[i].client] = 0;
    return n;
}

/* Every client inside the barrier gets the error now. */
static void srv_fail_barrier_with(struct rkv_server *s, int status, const char *why)
{
    uint32_t n = srv_barrier_take(s);
    for (uint32_t i = 0; i < n; i++) {
        struct rkv_hdr h = {
            .type = RKV_MSG_ERROR, .req_id = s->barrier[i].req_id, .status = status};
        srv_reply(s, s->barrier[i].peer, &h, why);
    }
}

static void srv_fail_barrier(struct rkv_server *s, uint32_t gone)
{
    char why[128];
    snprintf(why, sizeof(why), "client %u left; a barrier needs all %u", gone, s->cfg.n_workers);
    srv_fail_barrier_with(s, -RKV_EPEERDEAD, why);
}

static void srv_presume_gone(struct rkv_server *s)
{
    if (s->client_gone || s->n_hellos != s->cfg.n_workers)
        return;
    uint64_t now = s->port->ops->now_ns(s->port);
    uint64_t grace = ((uint64_t)s->cfg.timeout_ms + s->cfg.retry_ms) * 1000000ull;
    /* One look per window: every worker's barrier arrives at about once,
     * and a look per arrival was workers x workers (49,152^2 in the twin). */
    if (s->presume_ns && now + 1 - s->presume_ns < grace)
        return;
    s->presume_ns = now + 1;
    for (uint32_t i = 0; i < s->n_hellos; i++) {
        const struct srv_hello *h = &s->hellos[i];
        if ((h->peer && !rkv_peer_dead(h->peer)) || now - h->away_ns < grace)
            continue;
        s->client_gone = i + 1;
        RKV_LOGW(s->port,
                 "client %u has been away for %llu ms (it has not re-joined): taken to have "
                 "left; a barrier fails until it re-joins",
                 i, (unsigned long long)((now - h->away_ns) / 1000000ull));
        srv_coord_note_gone(s);
        srv_fail_barrier(s, i);
        return;
    }
}

/* The barrier lives on server 0 only: pushes are acknowledged after they are
 * applied, so once every client entered, everything they pushed is visible. */
static void srv_on_barrier(struct rkv_server *s, struct rkv_peer *peer, const struct rkv_msg *m)
{
    if (s->server_id != 0)
        return srv_status(s, peer, m, 0, -RKV_EINVAL, "barriers go to server 0");
    /* Membership by distinct client: only a connection holding an id this
     * server gave counts, so extra connections cannot complete a barrier. */
    const struct srv_conn *c = srv_conn_of(peer);
    if (!c || c->client_id == RKV_ID_NONE)
        return srv_status(s, peer, m, 0, -RKV_EINVAL,
                          "barrier before hello: this connection holds no client id");
    /* count: the client's barrier number (1, 2, ...; 0: the next one). A
     * number already completed is a retry whose reply was lost (server 0
     * died after completing it): answered at once. Wrapping arithmetic,
     * over the barriers that did complete only: 2^32-1 asked before any
     * had was answered as done. */
    uint32_t next = (uint32_t)(s->barriers_done + 1), want = m->h.count ? m->h.count : next;
    uint32_t back = next - want;
    if (back && back < (1u << 31) && back <= s->barriers_done)
        return srv_status(s, peer, m, RKV_MSG_BARRIER_REPLY, 0, NULL);
    if (want != next) {
        char why[128];
        snprintf(why, sizeof(why), "barrier %u asked, but barrier %u is the next to complete", want,
                 next);
        return srv_status(s, peer, m, 0, -RKV_EINVAL, why);
    }
    srv_presume_gone(s);
    if (s->client_gone) {
        char why[128];
        snprintf(why, sizeof(why), "client %u left; a barrier needs all %u", s->client_gone - 1,
                 s->cfg.n_workers);
        return srv_status(s, peer, m, 0, -RKV_EPEERDEAD, why);
    }
    /* A client that retries after a timeout is still one client. */
    assert(c->client_id < s->cfg.n_workers); /* server 0 gave it */
    uint32_t at = s->barrier_at[c->client_id];
    if (at) {
        assert(s->barrier[at - 1].client == c->client_id);
        s->barrier[at - 1].peer = peer;
        s->barrier[at - 1].req_id = m->h.req_id;
        return;
    }
    assert(s->n_barrier < s->cfg.n_workers);
    s->barrier[s->n_barrier++] =
        (struct srv_waiter){.peer = peer, .req_id = m->h.req_id, .client = c->client_id};
    s->barrier_at[c->client_id] = s->n_barrier;
    if (s->n_barrier < s->cfg.n_workers)
        return;
    /* Durable: on disk before any client leaves it (see barriers_done). */
    s->barriers_done++;
    char why[RKV_PROTO_TEXT_MAX];
    int rc = srv_coord_save(s, why, sizeof(why));
    if (rc < 0) {
        s->barriers_done--;
        RKV_LOGE(s->port, "server 0: cannot record barrier %u: %s", next, why);
    }
    uint32_t n = srv_barrier_take(s);
    for (uint32_t i = 0; i < n; i++) {
        struct rkv_hdr h = {.type = rc < 0 ? RKV_MSG_ERROR : RKV_MSG_BARRIER_REPLY,
                            .req_id = s->barrier[i].req_id,
                            .status = rc};
        srv_reply(s, s->barrier[i].peer, &h, rc < 0 ? why : NULL);
    }
}

/* A SHUTDOWN came: the requests this server holds unanswered (clients
 * inside the barrier, TABLE requests, INITs waiting for a make) are
 * answered -RKV_ESHUTDOWN now, before the linger, which sends them. Left
 * to the close, their callers read "connection lost" (-RKV_EPEERDEAD), as
 * if the server had died (an outside tester). */
static void srv_shut_waiters(struct rkv_server *s, const char *why)
{
    const struct rkv_port_ops *o = s->port->ops;
    if (s->server_id == 0) {
        srv_fail_barrier_with(s, -RKV_ESHUTDOWN, why);
        uint32_t n = s->n_table_wait;
        s->n_table_wait = 0;
        for (uint32_t i = 0; i < n; i++) {
            struct rkv_hdr h = {
                .type = RKV_MSG_ERROR, .req_id = s->table_wait[i].req_id, .status = -RKV_ESHUTDOWN};
            srv_reply(s, s->table_wait[i].peer, &h, why);
        }
    }
    /* The makes go on (the make task ends them, rkv.h); their waiters are
     * taken off them under the lock, as srv_make_done takes them. */
    struct srv_ack *w = NULL;
    o->mutex_lock(s->mu);
    for (uint32_t i = 1; i <= s->n_tensors; i++) {
        struct rkv_tensor *t = rkv_tensor_at(&s->tensors, i);
        struct srv_make *job = t ? t->make_job : NULL;
        if (!job)
            continue;
        struct srv_ack **tail = &job->waiters;
        while (*tail)
            tail = &(*tail)->next;
        *tail = w;
        w = job->waiters;
        job->waiters = NULL;
        job->n_waiters = 0;
    }
    o->mutex_unlock(s->mu);
    srv_answer_all(s, w, -RKV_ESHUTDOWN, why);
}

/* A SHUTDOWN came: every other client connection (a HELLO, or a catalogue
 * read) is told, an
 * ERROR -RKV_ESHUTDOWN of request id 0 (no request's). Without it a client
 * could not tell servers that stopped from servers that died: its later
 * calls read "connection lost" or "server 0 is gone" (-RKV_EPEERDEAD) and
 * retried a cluster that was asked to exit, and a second worker's
 * shutdown said servers that did exit "may still run" (an outside
 * tester). Clients older than the notice drop a reply to no request. Best
 * effort: one that cannot be sent leaves its client as before. */
static void srv_tell_shutdown(struct rkv_server *s, const struct rkv_peer *asker, const char *why)
{
    const struct rkv_port_ops *o = s->port->ops;
    struct srv_ack *list = NULL;
    o->mutex_lock(s->mu);
    for (struct srv_conn *c = s->conns; c; c = c->next) {
        /* Clients: joined ones, and observers (they read the catalogue
         * and say no HELLO: their list() read "server 0 is gone"; an
         * outside tester). Not a server's own connection (REGISTER). */
        if ((!c->hello && !c->reader) || c->gone || c->peer == asker || rkv_peer_dead(c->peer))
            continue;
        struct srv_ack *a = calloc(1, sizeof(*a));
        if (!a)
            break;
        a->peer = c->peer;
        a->h = (struct rkv_hdr){.type = RKV_MSG_ERROR, .req_id = 0};
        c->acks_pending++; /* the peer stays until the notice went */
        a->next = list;
        list = a;
    }
    o->mutex_unlock(s->mu);
    srv_answer_all(s, list, -RKV_ESHUTDOWN, why);
}

static void srv_on_shutdown(struct rkv_server *s, struct rkv_peer *peer, const struct rkv_msg *m)
{
    const struct srv_conn *c = srv_conn_of(peer);
    if (!c || c->client_id == RKV_ID_NONE) {
        rkv_port_warn_limited(
            s->port, &s->lim_conn,
            "server %u: refused a SHUTDOWN from a connection that is no joined client",
            s->server_id);
        return srv_status(s, peer, m, 0, -RKV_EINVAL,
                          "SHUTDOWN only from a joined client (HELLO first)");
    }
    /* At the default level: who stopped a server is worth knowing. */
    /* Only server 0 checks an id: elsewhere it is the connection's claim,
     * and the line named an honest worker as the one that stopped it (an
     * outside tester's raw connection claimed its id). */
    /* The first one at the warning level: a client may repeat it, and
     * each was a line (an outside tester: 31 lines for 40 copies). */
    rkv_port_log(s->port, s->shut ? RKV_LOG_DEBUG : RKV_LOG_WARN,
                 "server %u: stopping: SHUTDOWN from client %u%s", s->server_id, c->client_id,
                 s->server_id == 0 ? "" : " (as its connection says: only server 0 checks ids)");
    /* Before the ack: once the asking client hears it, no co-located
     * client may go on writing rows nobody serves any more. */
    for (uint32_t i = 1; i <= s->n_tensors; i++) {
        struct rkv_tensor *t = rkv_tensor_at(&s->tensors, i);
        if (rkv_tensor_serving(t)) /* one being made is not published yet */
            atomic_store(&t->shard.hdr->closed, RKV_SHARD_CLOSED);
    }
    int first = !s->shut;
    if (first)
        s->shut_by = c->client_id;
    s->shut = 1;
    char why[RKV_PROTO_TEXT_MAX];
    snprintf(why, sizeof(why),
             "server %u is shutting down: the servers were asked to exit (by client %u)",
             s->server_id, s->shut_by);
    srv_shut_waiters(s, why);
    /* Once: a client may repeat its SHUTDOWN (each is acknowledged), and
     * each copy would have cost a notice per connection. */
    if (first)
        srv_tell_shutdown(s, peer, why);
    srv_status(s, peer, m, RKV_MSG_SHUTDOWN_ACK, 0, NULL);
    s->port->ops->mutex_lock(s->mu);
    s->stop = 1;
    s->port->ops->cond_broadcast(s->cv);
    s->port->ops->mutex_unlock(s->mu);
}

/* ---- address discovery ---- */

static void srv_send_table(struct rkv_server *s, struct rkv_peer *peer, uint64_t req)
{
    for (uint32_t i = 0; i < s->n_servers; i++) {
        struct rkv_tx *tx;
        if (rkv_engine_tx_alloc(s->eng, s->cfg.ctrl_buf_bytes, &tx) < 0)
            return;
        struct rkv_hdr h = {.type = RKV_MSG_TABLE_ENTRY, .req_id = req, .sender = s->server_id};
        size_t len = rkv_proto_enc_addr(rkv_engine_tx_buf(tx), &h, &s->table[i]);
        if (rkv_engine_reply(s->eng, peer, tx, len) < 0)
            return;
    }
}

static void srv_on_table(struct rkv_server *s, struct rkv_peer *peer, const struct rkv_msg *m)
{
    if (s->server_id != 0 || !s->table)
        return srv_status(s, peer, m, 0, -RKV_EINVAL, "only server 0 keeps the address table");
    if (s->n_registered == s->n_servers)
        return srv_send_table(s, peer, m->h.req_id);
    if (s->n_table_wait == s->cfg.n_workers)
        return srv_status(s, peer, m, 0, -RKV_ELIMIT, "more TABLE requests than workers");
    s->table_wait[s->n_table_wait++] = (struct srv_waiter){.peer = peer, .req_id = m->h.req_id};
    /* Kept until answered, or until it goes (srv_on_peer). */
}

/* Servers of one machine share its shard, so they must be on one host. */
static const char *srv_check_register(struct rkv_server *s, const struct rkv_wire_addr *a)
{
    if (a->cluster != s->fp)
        return "this server belongs to another cluster";
    if (a->server_id == 0 || a->server_id >= s->n_servers)
        return "server id out of range";
    uint32_t first = 0, m = 0;
    m = rkv_cluster_machine_of(s->cl, a->server_id);
    first = rkv_cluster_server_id(s->cl, m, 0);
    for (uint32_t i = first; i < first + s->cfg.machines[m].servers; i++)
        if (s->table[i].port && i != a->server_id && strcmp(s->table[i].host, a->host) != 0)
            return "servers of one machine registered from different hosts";
    return NULL;
}

static void srv_on_register(struct rkv_server *s, struct rkv_peer *peer, const struct rkv_msg *m)
{
    const struct rkv_wire_addr *a = &m->u.addr;
    const char *bad =
        s->server_id != 0 || !s->table ? "not the address keeper" : srv_check_register(s, a);
    if (bad)
        return srv_status(s, peer, m, 0, -RKV_ECONFIG, bad);
    struct rkv_peer *old = s->table_peer[a->server_id];
    if (!s->table[a->server_id].port)
        s->n_registered++;
    else if (old && old != peer)
        /* A restarted server: clients that lost it fetch this address again. */
        RKV_LOGW(s->port, "server %u re-joined from %s:%u (%s)", a->server_id, a->host, a->port,
                 rkv_peer_dead(old) ? "its previous connection is gone"
                                    : "replacing a registration whose connection is still open");
    s->table[a->server_id] = *a;
    s->table_peer[a->server_id] = peer;
    if (old && old != peer)
        rkv_engine_peer_superseded(old); /* kept (srv_conn.kept) until unkeep below */
    if (srv_conn_of(peer))
        srv_conn_of(peer)->registered = 1;
    rkv_engine_peer_identified(peer);
    if (old && old != peer)
        srv_conn_unkeep(s, old); /* it was kept for its entry only */
    char why[RKV_PROTO_TEXT_MAX];
    int rc = srv_coord_save(s, why, sizeof(why)); /* clients of a restarted server 0 need it */
    if (rc < 0)
        return srv_status(s, peer, m, 0, rc, why);
    RKV_LOGI(s->port, "server %u is at %s:%u (%u of %u known)", a->server_id, a->host, a->port,
             s->n_registered, s->n_servers);
    srv_status(s, peer, m, RKV_MSG_REGISTER_ACK, 0, NULL);
    if (s->n_registered < s->n_servers)
        return;
    /* Emptied first, as the barrier is (srv_barrier_take): a send that
     * fails closes its connection, whose close takes its entry out. */
    uint32_t n = s->n_table_wait;
    s->n_table_wait = 0;
    for (uint32_t i = 0; i < n; i++)
        srv_send_table(s, s->table_wait[i].peer, s->table_wait[i].req_id);
}

static void srv_on_register_ack(struct rkv_server *s, const struct rkv_msg *m)
{
    (void)m;
    s->port->ops->mutex_lock(s->mu);
    s->register_acked = 1;
    s->port->ops->cond_broadcast(s->cv);
    s->port->ops->mutex_unlock(s->mu);
}

/* Server 0's table starts with what the config already says. */
static int srv_table_init(struct rkv_server *s)
{
    s->table = calloc(s->n_servers, sizeof(*s->table));
    s->table_peer = calloc(s->n_servers, sizeof(*s->table_peer));
    s->table_wait = calloc(s->cfg.n_workers, sizeof(*s->table_wait));
    if (!s->table || !s->table_peer || !s->table_wait)
        return -RKV_ENOMEM;
    uint64_t fp = s->fp;
    for (uint32_t m = 0, k = 0; m < s->cfg.n_machines; m++) {
        const struct rkv_machine *mc = &s->cfg.machines[m];
        for (uint32_t l = 0; l < mc->servers; l++, k++) {
            if (!mc->host[0] && k != 0)
                continue; /* learned when that server registers */
            s->table[k] =
                (struct rkv_wire_addr){.cluster = fp, .server_id = k, .port = mc->base_port + l};
            snprintf(s->table[k].host, sizeof(s->table[k].host), "%s", mc->host);
            s->n_registered++;
        }
    }
    return 0;
}

/* A server other than 0 announces where it listens, and waits for the ack. */
static int srv_register(struct rkv_server *s, uint16_t my_port, char *err, size_t err_len)
{
    const struct rkv_machine *m0 = &s->cfg.machines[0];
    struct rkv_wire_addr a = {.cluster = s->fp, .server_id = s->server_id, .port = my_port};
    /* A machine the config names a host for: server 0 knows it already. */
    assert(!s->cfg.machines[s->cfg.machine_id].host[0]);
    int rc = rkv_engine_local_addr(s->eng, m0->host, m0->base_port, a.host, sizeof(a.host));
    if (rc < 0)
        return rkv_errf(err, err_len, rc, "server %u: no local address toward %s", s->server_id,
                        m0->host);
    struct rkv_peer *peer;
    rc = rkv_engine_connect_retry(s->eng, m0->host, m0->base_port, s->cfg.timeout_ms,
                                  s->cfg.connect_retry_ms, NULL, &peer);
    if (rc < 0)
        return rkv_errf(err, err_len, rc, "server %u: server 0 at %s:%u unreachable: %s",
                        s->server_id, m0->host, m0->base_port, rkv_engine_connect_strerror(rc));
    struct rkv_tx *tx;
    if ((rc = rkv_engine_tx_alloc(s->eng, s->cfg.ctrl_buf_bytes, &tx)) < 0)
        return rkv_errf(err, err_len, rc, "out of memory");
    struct rkv_hdr h = {.type = RKV_MSG_REGISTER, .sender = s->server_id};
    size_t len = rkv_proto_enc_addr(rkv_engine_tx_buf(tx), &h, &a);
    if ((rc = rkv_engine_send(s->eng, peer, tx, len)) < 0)
        return rkv_errf(err, err_len, rc, "server %u: cannot register with server 0", s->server_id);
    uint64_t deadline = s->port->ops->now_ns(s->port) + s->cfg.timeout_ms * 1000000ull;
    s->port->ops->mutex_lock(s->mu);
    while (!s->register_acked && !s->register_refused && s->port->ops->now_ns(s->port) < deadline)
        s->port->ops->cond_wait(s->cv, s->mu, 100000000ull);
    int acked = s->register_acked, refused = s->register_refused;
    char why[sizeof(s->register_why)];
    memcpy(why, s->register_why, sizeof(why));
    s->port->ops->mutex_unlock(s->mu);
    if (!acked && refused)
        return rkv_errf(err, err_len, refused,
                        "server %u: server 0 refused our address (%s:%u): %s", s->server_id, a.host,
                        my_port, why);
    if (!acked)
        return rkv_errf(err, err_len, -RKV_ETIMEDOUT,
                        "server %u: server 0 did not accept our address (%s:%u); see its log",
                        s->server_id, a.host, my_port);
    return 0;
}

/* An ERROR on a connection this server opened: the only request it
 * sends there is its REGISTER, so the first is server 0's refusal of it.
 * Any later one is only logged (rate-limited: it may come in a loop). */
static void srv_on_register_refused(struct rkv_server *s, const struct rkv_msg *m)
{
    s->port->ops->mutex_lock(s->mu);
    int first = !s->register_acked && !s->register_refused;
    if (first) {
        s->register_refused = m->h.status < 0 ? m->h.status : -RKV_EPROTO;
        snprintf(s->register_why, sizeof(s->register_why), "%s", m->u.error.text);
        s->port->ops->cond_broadcast(s->cv);
    }
    s->port->ops->mutex_unlock(s->mu);
    if (!first)
        rkv_port_warn_limited(s->port, &s->lim_conn,
                              "server 0 sent an error on this server's own connection: %s",
                              m->u.error.text);
}

/* A message that asks this server for work (a SHUTDOWN asks it to stop). */
static int srv_is_request(int type)
{
    switch (type) {
    case RKV_MSG_HELLO:
    case RKV_MSG_INIT:
    case RKV_MSG_META:
    case RKV_MSG_PUSH:
    case RKV_MSG_PULL:
    case RKV_MSG_PULL_ZC:
    case RKV_MSG_BARRIER:
    case RKV_MSG_REGISTER:
    case RKV_MSG_TABLE:
        return 1;
    default:
        return 0;
    }
}

static void srv_on_msg(void *user, struct rkv_peer *peer, const struct rkv_msg *m)
{
    struct rkv_server *s = user;
    atomic_fetch_add_explicit(&s->n_msgs, 1, memory_order_relaxed);
    if (s->shut && srv_is_request(m->h.type)) {
        char why[128];
        snprintf(why, sizeof(why),
                 "server %u is shutting down: the servers were asked to exit (by client %u)",
                 s->server_id, s->shut_by);
        return srv_status(s, peer, m, 0, -RKV_ESHUTDOWN, why);
    }
    switch (m->h.type) {
    case RKV_MSG_HELLO:
        return srv_on_hello(s, peer, m);
    case RKV_MSG_INIT:
        return srv_on_init(s, peer, m);
    case RKV_MSG_META:
        return srv_on_meta(s, peer, m);
    case RKV_MSG_PUSH:
        return srv_on_push(s, peer, m);
    case RKV_MSG_PULL:
        return srv_on_pull(s, peer, m);
    case RKV_MSG_PULL_ZC:
        return srv_on_pull_zc(s, peer, m);
    case RKV_MSG_BARRIER:
        return srv_on_barrier(s, peer, m);
    case RKV_MSG_SHUTDOWN:
        return srv_on_shutdown(s, peer, m);
    case RKV_MSG_REGISTER:
        return srv_on_register(s, peer, m);
    case RKV_MSG_REGISTER_ACK:
        return srv_on_register_ack(s, m);
    case RKV_MSG_TABLE:
        return srv_on_table(s, peer, m);
    case RKV_MSG_LIST:
        return srv_on_list(s, peer, m);
    case RKV_MSG_ERROR:
        /* On a connection this server opened (to server 0, to register) no
         * request of the peer's is ours to fail: an ERROR there is server
         * 0's refusal, and answering it made server 0 answer ours, and so
         * on for ever. */
        if (!srv_conn_of(peer))
            return srv_on_register_refused(s, m);
        /* The engine could not deliver one of our replies (e.g. the client
         * refused a rendezvous slot): fail that request with a small one.
         * A peer may send ERRORs too, in a loop: the line is rate-limited. */
        rkv_port_warn_limited(s->port, &s->lim_conn, "reply to request %llu failed: %s",
                              (unsigned long long)m->h.req_id, m->u.error.text);
        return srv_status(s, peer, m, 0, m->h.status < 0 ? m->h.status : -RKV_EPROTO,
                          m->u.error.text);
    default:
        /* Replies and errors are never addressed to a server. */
        rkv_port_warn_limited(s->port, &s->lim_conn, "unexpected %s from a peer; closing it",
                              rkv_msg_type_name(m->h.type));
        if (srv_conn_of(peer))
            srv_drop(s, peer);
        else
            rkv_engine_drop_peer(s->eng, peer);
    }
}

/* Server 0: the id of a client that has its id, or RKV_ID_NONE. */
static uint32_t srv_client_id(const struct rkv_server *s, const struct rkv_peer *peer)
{
    const struct srv_conn *c = srv_conn_of(peer);
    return s->server_id == 0 && c ? c->client_id : RKV_ID_NONE;
}

/* Whether server state still points at peer after it went: the id table
 * and the address table keep their entry (a re-join replaces it). */
static int srv_peer_kept(const struct rkv_server *s, const struct rkv_peer *peer)
{
    /* Once ids are handed out, hellos[i] holds id i: a client's connection
     * that no table entry ever named is found without a walk over every
     * worker and server (server 0 sees every client leave). */
    const struct srv_conn *c = srv_conn_of(peer);
    if (c && !c->registered && c->client_id != RKV_ID_NONE && s->n_hellos == s->cfg.n_workers &&
        c->client_id < s->n_hellos)
        return s->hellos[c->client_id].peer == peer;
    for (uint32_t i = 0; i < s->n_hellos; i++)
        if (s->hellos[i].peer == peer)
            return 1;
    for (uint32_t i = 0; s->table_peer && i < s->n_servers; i++)
        if (s->table_peer[i] == peer)
            return 1;
    return 0;
}

static void srv_on_peer(void *user, struct rkv_peer *peer, int up)
{
    struct rkv_server *s = user;
    if (up) {
        struct srv_conn *c = calloc(1, sizeof(*c));
        if (!c) {
            rkv_port_warn_limited(s->port, &s->lim_conn,
                                  "server %u: out of memory for a new connection; dropping it",
                                  s->server_id);
            return rkv_engine_peer_release(s->eng, peer);
        }
        c->client_id = RKV_ID_NONE;
        c->peer = peer;
        rkv_peer_set_user(peer, c);
        s->port->ops->mutex_lock(s->mu);
        c->next = s->conns;
        if (s->conns)
            s->conns->prev = c;
        s->conns = c;
        s->port->ops->mutex_unlock(s->mu);
        return;
    }
    struct srv_conn *c = srv_conn_of(peer);
    if (c && c->gone)
        return; /* kept after it went (srv_conn) and dropped once more */
    /* A dead client cannot take part in a barrier any more. */
    for (uint32_t i = 0; i < s->n_barrier; i++) {
        if (s->barrier[i].peer == peer) {
            s->barrier_at[s->barrier[i].client] = 0;
            s->barrier[i] = s->barrier[--s->n_barrier];
            if (i < s->n_barrier)
                s->barrier_at[s->barrier[i].client] = i + 1;
            break;
        }
    }
    for (uint32_t i = 0; i < s->n_table_wait; i++) {
        if (s->table_wait[i].peer == peer) {
            s->table_wait[i] = s->table_wait[--s->n_table_wait];
            break;
        }
    }
    uint32_t id = srv_client_id(s, peer);
    int all_ids = id != RKV_ID_NONE && s->n_hellos == s->cfg.n_workers && id < s->n_hellos;
    /* The client re-joined on another connection before this one's going
     * was told (both in one batch, while the engine was busy): it has not
     * left. Counted as gone, every barrier failed from then on. */
    if (all_ids && s->hellos[id].peer != peer)
        id = RKV_ID_NONE;
    if (all_ids && id != RKV_ID_NONE)
        s->hellos[id].away_ns = s->port->ops->now_ns(s->port);
    if (id != RKV_ID_NONE && !s->client_gone) {
        s->client_gone = id + 1;
        srv_coord_note_gone(s);
        if (s->n_barrier)
            RKV_LOGW(s->port, "client %u left while %u others wait in a barrier: failing it", id,
                     s->n_barrier);
        srv_fail_barrier(s, id);
    }
    for (uint32_t i = 0; s->n_hellos < s->cfg.n_workers && i < s->n_hellos; i++) {
        if (s->hellos[i].peer == peer) {
            s->hellos[i] = s->hellos[--s->n_hellos];
            break;
        }
    }
    /* Info, not a warning: every server of a stopping cluster leaves so too.
     * Only a connection that registered can be a table entry. */
    for (uint32_t i = 0; s->table_peer && (!c || c->registered) && i < s->n_servers; i++)
        if (s->table_peer[i] == peer)
            RKV_LOGI(s->port, "server %u (%s:%u) disconnected; it may re-register after a restart",
                     i, s->table[i].host, s->table[i].port);
    RKV_LOGI(s->port, "a peer disconnected");
    if (!c)
        return; /* our own connection to server 0: kept */
    /* Everything a connection held goes with it, unless a table entry or a
     * durable acknowledgement still names it. */
    int kept = srv_peer_kept(s, peer);
    s->port->ops->mutex_lock(s->mu);
    c->gone = 1;
    c->kept = kept;
    s->port->ops->mutex_unlock(s->mu);
    if (s->server_id != 0 && c->hello && c->client_id != RKV_ID_NONE)
        srv_claim_gone(s, c);
    srv_conn_maybe_release(s, peer);
}

/* ---- durability and restart ---- */

static void srv_send_ack(struct rkv_server *s, const struct srv_ack *a, int rc, const char *why)
{
    struct rkv_tx *tx;
    if (rkv_engine_tx_alloc(s->eng, s->cfg.ctrl_buf_bytes, &tx) < 0)
        return; /* the client times out, retries, and is deduplicated */
    struct rkv_hdr h = a->h;
    h.sender = s->server_id;
    size_t len;
    if (rc < 0) {
        h.type = RKV_MSG_ERROR;
        h.status = rc;
        len = rkv_proto_enc_error(rkv_engine_tx_buf(tx), s->cfg.ctrl_buf_bytes, &h, why);
    } else {
        len = rkv_proto_enc_empty(rkv_engine_tx_buf(tx), &h);
    }
    rkv_engine_send(s->eng, a->peer, tx, len); /* a dead peer just drops it */
}

/* After the acknowledgement went (or could not): the peer may go now. */
static void srv_ack_done(struct rkv_server *s, const struct srv_ack *a)
{
    struct srv_conn *c = srv_conn_of(a->peer);
    if (!c)
        return;
    s->port->ops->mutex_lock(s->mu);
    assert(c->acks_pending > 0);
    c->acks_pending--;
    s->port->ops->mutex_unlock(s->mu);
    srv_conn_maybe_release(s, a->peer);
}

/* Group commit: takes every acknowledgement waiting, makes a snapshot that
 * began after their requests were applied durable (one fsync pair for all
 * of them, or none when another server's snapshot already covers them),
 * then sends them. Requests applied meanwhile wait for the next round. */
static void srv_durable_main(void *arg)
{
    struct rkv_server *s = arg;
    const struct rkv_port_ops *o = s->port->ops;
    o->mutex_lock(s->mu);
    for (;;) {
        while (!s->n_acks && !s->dur_stop)
            o->cond_wait(s->cv, s->mu, UINT64_MAX);
        if (s->dur_stop)
            break;
        struct srv_ack *batch = s->acks;
        uint32_t n = s->n_acks;
        s->acks = s->acks_tail = NULL;
        s->n_acks = 0;
        o->mutex_unlock(s->mu);
        /* Read after every request of the batch was applied. */
        uint64_t seen = atomic_load(&s->mach.hdr->snap_started);
        char why[RKV_PROTO_TEXT_MAX];
        int ckpt = 0; /* a new tensor is in no log: it needs a snapshot */
        for (const struct srv_ack *a = batch; a; a = a->next)
            ckpt |= a->h.type == RKV_MSG_INIT_REPLY;
        int rc = rkv_wal_commit(s->wal, ckpt, seen, why, sizeof(why));
        if (rc < 0)
            RKV_LOGE(s->port, "%s failed, %u requests fail with it: %s",
                     ckpt ? "snapshot" : "log sync", n, why);
        while (batch) {
            struct srv_ack *a = batch;
            batch = a->next;
            srv_send_ack(s, a, rc, why);
            srv_ack_done(s, a);
            free(a);
        }
        o->mutex_lock(s->mu);
        if (rc == 0)
            s->n_durable_acks += n;
    }
    o->mutex_unlock(s->mu);
}

static void srv_free_tensors(struct rkv_server *s)
{
    for (uint32_t i = 1; i <= s->n_tensors; i++) {
        struct rkv_tensor *t = rkv_tensor_at(&s->tensors, i);
        if (!t)
            continue;
        if (t->shard_mr)
            rkv_engine_dereg_mr(s->eng, t->shard_mr);
        rkv_tensor_free(t);
        free(t);
    }
    rkv_tensor_table_free(&s->tensors);
    s->n_tensors = 0;
}

static int srv_adopt_one(struct rkv_server *s, uint32_t id, const struct rkv_mach_tensor *e,
                         int reclaim, struct rkv_tensor *t, char *err, size_t err_len)
{
    char name[96];
    uint32_t mach = s->cfg.machine_id;
    struct rkv_shard sh;
    rkv_shard_name(name, sizeof(name), s->cfg.shm_prefix, mach, id);
    int rc =
        rkv_shard_map_local(s->port, name, e->local_rows, (size_t)e->row_bytes, (int)e->with_state,
                            e->desc.book_len, (int)e->has_local, 0, &sh, err, err_len);
    if (rc < 0)
        return rc;
    rc = rkv_tensor_from_wire_local(&e->desc, sh.book, sh.local, s->cfg.n_machines, id, t, err,
                                    err_len);
    if (rc == 0 &&
        (rkv_pbook_local_rows(&t->pb, mach) != e->local_rows || t->row_bytes != e->row_bytes)) {
        rc = rkv_errf(err, err_len, -RKV_ECONFIG,
                      "tensor '%s': machine %u holds %llu rows, the configured partition gives "
                      "%llu (another cluster configuration?)",
                      e->desc.name, mach, (unsigned long long)e->local_rows,
                      (unsigned long long)rkv_pbook_local_rows(&t->pb, mach));
        rkv_tensor_free(t);
    }
    if (rc < 0) {
        rkv_shard_unmap(&sh);
        return rc;
    }
    t->shard = sh;
    t->shard.owner = s->local_id + 1;
    t->shard.holder_dead = srv_holder_dead;
    t->shard.holder_arg = s;
    if (reclaim)
        rkv_shard_reclaim(&t->shard);
    t->mapped = 1;
    t->ready = 1;
    return 0;
}

/* Takes every tensor of the machine segment into this server's table;
 * reclaim: frees the row locks our dead predecessor held. */
static int srv_adopt(struct rkv_server *s, int reclaim, char *err, size_t err_len)
{
    for (uint32_t id = 1, end = rkv_mach_tensor_end(s->mach.hdr); id < end; id++) {
        const struct rkv_mach_tensor *e = &s->mach.hdr->tensors[id];
        if (!__atomic_load_n(&e->present, __ATOMIC_ACQUIRE))
            continue;
        struct rkv_tensor *t = calloc(1, sizeof(*t));
        int rc = t ? srv_adopt_one(s, id, e, reclaim, t, err, err_len)
                   : rkv_errf(err, err_len, -RKV_ENOMEM, "out of memory");
        if (rc == 0 && rkv_tensor_put(&s->tensors, id, t) < 0) {
            rkv_tensor_free(t);
            rc = rkv_errf(err, err_len, -RKV_ENOMEM, "out of memory");
        }
        if (rc < 0) {
            free(t);
            srv_free_tensors(s);
            return rc;
        }
        s->n_tensors = id;
    }
    return 0;
}

/* Attaches to the machine's memory of this lineage: surviving, or once
 * the machine's first server restored it from the snapshot. */
static int srv_wait_restored(struct rkv_server *s, uint64_t lineage, char *err, size_t err_len)
{
    const struct rkv_port_ops *o = s->port->ops;
    uint64_t deadline = o->now_ns(s->port) + (uint64_t)s->cfg.connect_retry_ms * 1000000ull;
    char missing[128] = "";
    while (o->now_ns(s->port) < deadline) {
        missing[0] = 0;
        if (rkv_mach_attach(s->port, s->cfg.shm_prefix, s->cfg.machine_id, s->cfg.n_workers,
                            s->local_id + 1, &s->mach, NULL, 0) == 0) {
            /* A segment without a shard it publishes is no machine to
             * serve: the first server restores that one too (srv_restart).
             * Served, this server failed "cannot map ... (unknown tensor)"
             * when it restarted before its first server (an outside
             * tester). */
            if (__atomic_load_n(&s->mach.hdr->lineage, __ATOMIC_ACQUIRE) == lineage &&
                rkv_mach_shards_present(&s->mach, s->cfg.shm_prefix, s->cfg.machine_id, missing,
                                        sizeof(missing)))
                return 0;
            rkv_mach_close(&s->mach);
        }
        o->sleep_ns(s->port, 10000000ull);
    }
    if (missing[0])
        return rkv_errf(err, err_len, -RKV_ETIMEDOUT,
                        "server %u: machine %u's shared memory lacks its shard %s, and the "
                        "machine's first server did not restore it from the snapshot within %u "
                        "ms (it does when it starts)",
                        s->server_id, s->cfg.machine_id, missing, s->cfg.connect_retry_ms);
    return rkv_errf(err, err_len, -RKV_ETIMEDOUT,
                    "server %u: the machine's first server did not restore its snapshot within "
                    "%u ms",
                    s->server_id, s->cfg.connect_retry_ms);
}

static void srv_replay_log(struct rkv_server *s, uint64_t t0)
{
    const struct rkv_wal_replay *r = &s->replay;
    RKV_LOGW(s->port,
             "server %u replayed machine %u's log after snapshot generation %llu: %llu logs, "
             "%llu records (%llu rows, %llu of them in the snapshot's copy already, %llu bytes, "
             "%llu already applied), %llu torn appends left behind, in %llu ms",
             s->server_id, s->cfg.machine_id, (unsigned long long)s->replay_gen,
             (unsigned long long)r->logs, (unsigned long long)r->records,
             (unsigned long long)r->rows, (unsigned long long)r->rows_in_copy,
             (unsigned long long)r->bytes, (unsigned long long)r->dups, (unsigned long long)r->torn,
             (unsigned long long)((s->port->ops->now_ns(s->port) - t0) / 1000000ull));
}

/* Replays the machine's log after snapshot snap into its memory (no other
 * server of the machine runs yet): at create up to the first push of a
 * custom op, the rest at rkv_server_run (srv_replay_finish). */
static int srv_replay(struct rkv_server *s, const struct rkv_snap *snap, char *err, size_t err_len)
{
    memset(&s->replay, 0, sizeof(s->replay));
    s->replay_lineage = snap->lineage;
    s->replay_gen = snap->generation;
    struct rkv_wal_replay *r = &s->replay;
    uint64_t t0 = s->port->ops->now_ns(s->port);
    /* The snapshot's rows were copied chunk by chunk while pushes went on:
     * its copy LSNs say which records each chunk holds already. */
    int rc = rkv_wal_set_copies(s->wal, snap, err, err_len);
    if (rc == 0)
        rc = rkv_wal_recover(s->wal, snap->lineage, snap->generation, &s->tensors, s->ht,
                             RKV_WAL_PAUSE_CUSTOM, r, err, err_len);
    if (rc < 0)
        return rc;
    if (r->paused_lsn) {
        s->replay_pending = 1;
        RKV_LOGW(s->port,
                 "server %u: machine %u's log holds a push of custom op %u (log generation %llu, "
                 "byte %llu), whose handler is registered after create: %llu records replayed "
                 "so far, the rest at rkv_server_run, which listens once it is done",
                 s->server_id, s->cfg.machine_id, r->pause_op,
                 (unsigned long long)RKV_WAL_GEN(r->paused_lsn),
                 (unsigned long long)RKV_WAL_OFF(r->paused_lsn), (unsigned long long)r->records);
        return 0;
    }
    srv_replay_log(s, t0);
    return 0;
}

/* rkv_server_run: the replay srv_replay paused, with the handlers the
 * application registered since; then the machine's other servers may
 * attach. */
static int srv_replay_finish(struct rkv_server *s, char *err, size_t err_len)
{
    uint64_t t0 = s->port->ops->now_ns(s->port);
    int rc = rkv_wal_recover(s->wal, s->replay_lineage, s->replay_gen, &s->tensors, s->ht, 0,
                             &s->replay, err, err_len);
    if (rc < 0)
        return rc;
    assert(!s->replay.paused_lsn);
    s->replay_pending = 0;
    srv_replay_log(s, t0);
    if (s->replay_publish)
        rkv_snap_publish_lineage(&s->mach, s->replay_lineage);
    return 0;
}

/* The machine outlived this server (its process died, not the machine):
 * its memory holds everything the file does and more, and other servers of
 * the machine may be using it. A push our predecessor was applying when it
 * died may be there in part; alone on the machine, we roll back to the
 * snapshot (that push was not acknowledged, its client retries it); beside
 * live servers, the push is finished from its log record. */
static int srv_resume(struct rkv_server *s, const struct rkv_snap *snap, const char *path,
                      char *err, size_t err_len)
{
    uint32_t mach = s->cfg.machine_id;
    uint32_t torn = rkv_mach_reclaim(&s->mach);
    if (torn && s->cfg.machines[mach].servers == 1) {
        int rc = rkv_snap_rollback(snap, s->port, s->cfg.shm_prefix, &s->mach, err, err_len);
        /* Rolled back (or in part), the memory is no state of the machine
         * until the log is replayed over it: with the lineage left, a
         * refused replay (a damaged or missing log) was forgotten at the
         * next start, which found the torn flag cleared and served the
         * snapshot's rows as holding every acknowledged push. Lineage 0
         * sends the next start to a restore from the snapshot, and to the
         * same refusal. */
        rkv_snap_publish_lineage(&s->mach, 0);
        if (rc == 0)
            rc = srv_adopt(s, 1, err, err_len);
        if (rc == 0)
            rc = srv_replay(s, snap, err, err_len);
        if (rc < 0)
            return rc;
        if (s->replay_pending)
            s->replay_publish = 1; /* once the replay is whole */
        else
            rkv_snap_publish_lineage(&s->mach, snap->lineage);
        RKV_LOGW(s->port,
                 "server %u restarted while machine %u's memory survived, but it died applying "
                 "a push: rolled the machine back to snapshot %s (generation %llu), which holds "
                 "every acknowledged push; unacknowledged ones are retried by their clients",
                 s->server_id, mach, path, (unsigned long long)snap->generation);
    } else if (torn) {
        /* rkv_wal_trim below finishes the push from its record (the apply
         * journal, wal.c), and says so. */
        RKV_LOGW(s->port,
                 "server %u restarted beside live servers of machine %u, and had died applying "
                 "a push: kept the shared memory",
                 s->server_id, mach);
    } else {
        RKV_LOGW(s->port,
                 "server %u restarted: serving machine %u's shared memory (it survived, or the "
                 "machine's first server restored it from %s, generation %llu); it holds every "
                 "push acknowledged so far",
                 s->server_id, mach, path, (unsigned long long)snap->generation);
    }
    if (torn && s->cfg.machines[mach].servers == 1)
        return 0;
    /* The tensors first: the push our predecessor died applying is
     * finished in them, under the row lock it held on the row it died in
     * (freed first, a sibling's pull could read that row half applied);
     * then the rest of its row locks are freed, all of them: this server
     * serves under the same tag, and a word it may hold then could not be
     * told from one its predecessor left. A push that cannot be finished
     * yet (its custom handler is registered after create) leaves its row
     * readable until rkv_server_run finishes it. */
    int rc = srv_adopt(s, 0, err, err_len);
    if (rc == 0)
        rc = rkv_wal_trim(s->wal, s->ht, err, err_len);
    for (uint32_t id = 1; rc == 0 && id <= s->n_tensors; id++) {
        struct rkv_tensor *t = rkv_tensor_at(&s->tensors, id);
        if (t && t->mapped)
            rkv_shard_reclaim(&t->shard);
    }
    return rc;
}

static int srv_restart(struct rkv_server *s, const struct rkv_snap *snap, const char *path,
                       char *err, size_t err_len)
{
    uint32_t mach = s->cfg.machine_id;
    int rc;
    /* Only the machine's first server restores the file; the others serve
     * what it restored, or what survived. */
    if (s->local_id != 0) {
        rc = srv_wait_restored(s, snap->lineage, err, err_len);
        return rc < 0 ? rc : srv_resume(s, snap, path, err, err_len);
    }
    rc = rkv_mach_attach(s->port, s->cfg.shm_prefix, mach, s->cfg.n_workers, s->local_id + 1,
                         &s->mach, NULL, 0);
    /* The machine segment without a shard it publishes: a server killed
     * while it removed the machine's memory at a clean stop (the shards go
     * first). Served as it was, every restart failed "cannot map ...
     * (unknown tensor)" until the segment was removed by hand (an outside
     * tester): the machine's memory is lost, and restored below. */
    char missing[128] = "";
    if (rc == 0 && s->mach.hdr->lineage == snap->lineage &&
        !rkv_mach_shards_present(&s->mach, s->cfg.shm_prefix, mach, missing, sizeof(missing)))
        RKV_LOGW(s->port,
                 "server %u: machine %u's shared memory is there without its shard %s (a server "
                 "stopped while it removed it?): restoring the machine from its snapshot",
                 s->server_id, mach, missing);
    else if (rc == 0 && s->mach.hdr->lineage == snap->lineage)
        return srv_resume(s, snap, path, err, err_len);
    if (rc == 0)
        rkv_mach_close(&s->mach);
    /* The machine's memory is gone, but a sibling that still runs serves
     * it, removed from /dev/shm under it (systemd-logind's RemoveIPC at a
     * logout, a cleanup script): restored here, the machine was two, and
     * what the sibling acknowledged went where no pull reads it (an
     * outside tester: 218 of 256 rows wrong, for good). */
    /* A sibling restarting beside this one runs too, waiting for the
     * restore: only one that maps the removed memory is refused for. */
    char meta[128];
    rkv_mach_name(meta, sizeof(meta), s->cfg.shm_prefix, mach);
    for (uint32_t l = 1; !rkv_nic_in_process(s->nic) && l < s->cfg.machines[mach].servers; l++) {
        char claim[64], who[96];
        int pid = 0;
        snprintf(claim, sizeof(claim), "rkv-m%u.s%u.lock", mach, l);
        if (rkv_file_claim_held(s->cfg.durable_dir, claim, who, sizeof(who)) &&
            sscanf(who, "process %d", &pid) == 1 && pid > 0 && rkv_file_maps_deleted_shm(pid, meta))
            return rkv_errf(err, err_len, -RKV_EEXIST,
                            "machine %u's shared memory is gone (removed from /dev/shm, or the "
                            "host rebooted), but its server %u (local %u; %s/%s held by %s) "
                            "still runs, on memory removed under it: restoring the snapshot now "
                            "would make the machine two; stop every server of machine %u, then "
                            "start them again (and keep /dev/shm from being cleaned under a "
                            "running job: systemd's RemoveIPC=no for its user)",
                            mach, rkv_cluster_server_id(s->cl, mach, l), l, s->cfg.durable_dir,
                            claim, who[0] ? who : "a process", mach);
    }
    rc = rkv_snap_restore(snap, s->port, s->cfg.shm_prefix, s->cfg.n_workers, s->local_id + 1,
                          &s->mach, err, err_len);
    if (rc < 0)
        return rc;
    uint64_t now_ns = rkv_file_wall_ns();
    uint64_t age_ms = now_ns > snap->wall_ns ? (now_ns - snap->wall_ns) / 1000000ull : 0;
    char when[48];
    rkv_file_format_utc(snap->wall_ns, when, sizeof(when));
    RKV_LOGW(s->port,
             "server %u restarted from snapshot %s (generation %llu, taken %s, %llu ms ago; %u "
             "tensors, %zu bytes); its logs are replayed next, to every push acknowledged "
             "before the crash (pushes applied but not yet acknowledged when it crashed may be "
             "missing, and their clients retry them)",
             s->server_id, path, (unsigned long long)snap->generation, when,
             (unsigned long long)age_ms, snap->n_tensors, snap->file_bytes);
    if ((rc = srv_adopt(s, 0, err, err_len)) < 0)
        return rc;
    if ((rc = srv_replay(s, snap, err, err_len)) < 0) {
        srv_free_tensors(s); /* adopted above; a refused log leaves the server unmade */
        return rc;
    }
    if (s->replay_pending) {
        s->replay_publish = 1; /* once the replay is whole */
        return 0;
    }
    rkv_snap_publish_lineage(&s->mach, snap->lineage); /* the others may attach now */
    return 0;
}

/* Opens the machine segment: afresh, or in durable mode from the machine's
 * snapshot when there is one. */
static int srv_mach_open(struct rkv_server *s, char *err, size_t err_len)
{
    uint32_t mach = s->cfg.machine_id;
    /* Attaches at its first INIT; a restart beside running siblings is
     * refused, as the first server's is (rkv_mach_create): it held no
     * tensor, and half the requests the clients sent it failed "unknown
     * tensor" (an outside tester). */
    if (!s->durable && s->local_id != 0)
        return rkv_mach_check_rejoin(s->port, s->cfg.shm_prefix, mach, s->cfg.n_workers,
                                     s->local_id, err, err_len);
    if (!s->durable) {
        int rc = rkv_mach_create(s->port, s->cfg.shm_prefix, mach, s->cfg.n_workers, 0, 1, &s->mach,
                                 err, err_len);
        s->mach_made = rc == 0;
        return rc;
    }
    int rc = rkv_file_check_dir(s->cfg.durable_dir, err, err_len);
    if (rc < 0)
        return rc;
    /* Before any file is read or written: two clusters started on one
     * empty directory both ran, each overwriting the other's log and
     * snapshot (a snapshot of another cluster is refused only once one
     * exists), and what either acknowledged was lost at its next restart.
     * The machine's servers (one cluster) share the claim. */
    char claim[64], who[200];
    snprintf(claim, sizeof(claim), "rkv-m%u.lock", mach);
    snprintf(who, sizeof(who), "rkv cluster %016llx, shm prefix \"%s\", machine %u",
             (unsigned long long)s->fp, s->cfg.shm_prefix, mach);
    int ran_here = 0; /* this machine of this cluster claimed the directory before */
    if ((rc = rkv_file_claim(s->cfg.durable_dir, claim, who, &s->dir_claim, &ran_here, err,
                             err_len)) < 0)
        return rc;
    if (rc > 0) { /* no flock on this filesystem: said, and durable mode goes on */
        RKV_LOGW(s->port, "durable mode: %s", err);
        if (err_len)
            err[0] = 0; /* not a failure's reason (free_server) */
    }
    /* A second process of this very server (started twice by a launcher)
     * attached the machine's memory, wrote a snapshot and a new log, and
     * only then found its port taken. Not in the twin: its nodes are one
     * process's actors, and a crashed one's claim is never let go. */
    if (!rkv_nic_in_process(s->nic)) {
        snprintf(claim, sizeof(claim), "rkv-m%u.s%u.lock", mach, s->local_id);
        if ((rc = rkv_file_claim_alone(s->cfg.durable_dir, claim, &s->srv_claim, err, err_len)) <
            0) {
            char why[300];
            snprintf(why, sizeof(why), "%s", err_len ? err : "");
            if (rc == -RKV_EEXIST)
                rkv_errf(err, err_len, rc,
                         "server %u (machine %u, local %u) runs already: %s; a second one would "
                         "write the same files",
                         s->server_id, mach, s->local_id, why);
            return rc;
        }
        if (rc > 0)
            if (err_len)
                err[0] = 0; /* said once already, for the machine's claim */
    }
    if (!(s->wal = malloc(sizeof(*s->wal))))
        return rkv_errf(err, err_len, -RKV_ENOMEM, "out of memory");
    rkv_wal_init(s->wal, s->port, &s->mach, &s->tensors, &s->cfg);
    char name[64], path[sizeof(s->cfg.durable_dir) + sizeof(name) + 1];
    rkv_snap_file_name(name, sizeof(name), mach);
    snprintf(path, sizeof(path), "%s/%s", s->cfg.durable_dir, name);
    struct rkv_snap snap;
    rc = rkv_snap_read(path, mach, &snap, err, err_len);
    if (rc == -RKV_ENOTENSOR) { /* a new lineage */
        if (s->local_id != 0)
            return 0;
        /* Logs that hold records without their snapshot were started over
         * in silence, and overwritten (a snapshot removed by hand). */
        if ((rc = rkv_wal_refuse_orphans(s->wal, err, err_len)) < 0)
            return rc;
        uint64_t lineage = rkv_mix64(rkv_rng_next(&s->port->rng) ^ rkv_file_wall_ns()) | 1;
        /* A warning where this machine ran here before (its claim names
         * this cluster): one that lost its files starts empty, and a
         * client's init_data then makes its tensors anew, in silence. */
        if (ran_here)
            RKV_LOGW(s->port,
                     "durable mode: machine %u ran in %s before (%s names this cluster), but "
                     "there is no snapshot at %s: it starts empty (lineage %llx); if it held "
                     "rows, they are lost: restore its files",
                     mach, s->cfg.durable_dir, claim, path, (unsigned long long)lineage);
        else
            RKV_LOGI(s->port, "durable mode: no snapshot at %s yet; starting lineage %llx", path,
                     (unsigned long long)lineage);
        /* Server 0 may have handed out ids before any tensor made a
         * snapshot: a record of this configuration belongs to this
         * directory's run, as with a snapshot; another configuration's is
         * an earlier run's. Read before the segment is made. */
        struct rkv_coord coord;
        int have = 0;
        if (s->server_id == 0 &&
            (rc = srv_coord_read(s, 1, 0, &coord, &have, err, err_len)) == -RKV_ECONFIG) {
            RKV_LOGI(s->port, "durable mode: %s", err);
            rkv_coord_remove(s->cfg.durable_dir);
            rc = 0;
        }
        if (rc < 0)
            return rc;
        rc = rkv_mach_create(s->port, s->cfg.shm_prefix, mach, s->cfg.n_workers, lineage, 1,
                             &s->mach, err, err_len);
        s->mach_made = rc == 0;
        if (rc == 0 && have)
            srv_coord_apply(s, &coord);
        if (have)
            srv_coord_free(&coord);
        return rc;
    }
    if (rc < 0)
        return rc; /* a torn or corrupted snapshot is refused, never half-used */
    char diff[320];
    rkv_fingerprint_diff(s->fp, snap.fingerprint, "this server", "the snapshot's", diff,
                         sizeof(diff));
    rc = 0;
    if (snap.fingerprint != s->fp)
        rc = rkv_errf(err, err_len, -RKV_ECONFIG,
                      "snapshot %s was written by another cluster configuration, or by a build "
                      "of rkv before 2026-12-05 (another fingerprint; start that directory "
                      "over): %s",
                      path, diff);
    /* Server 0's record is checked before the restore makes the machine's
     * memory: a refusal after it left the segments in /dev/shm. */
    struct rkv_coord coord;
    int have = 0;
    if (rc == 0 && s->server_id == 0)
        rc = srv_coord_read(s, 0, snap.n_tensors, &coord, &have, err, err_len);
    if (rc == 0)
        rc = srv_restart(s, &snap, path, err, err_len);
    rkv_snap_free(&snap);
    if (rc == 0 && have)
        srv_coord_apply(s, &coord);
    if (have)
        srv_coord_free(&coord);
    return rc;
}

static int srv_durable_start(struct rkv_server *s, char *err, size_t err_len)
{
    if (!s->durable)
        return 0;
    s->snapw = malloc(sizeof(*s->snapw));
    if (!s->snapw)
        return rkv_errf(err, err_len, -RKV_ENOMEM, "out of memory");
    rkv_snap_writer_init(s->snapw, s->port, &s->mach, &s->cfg, s->server_id);
    rkv_snap_writer_map(s->snapw); /* the tensors a restart found (snapshot.h) */
    rkv_wal_hook(s->wal, s->snapw);
    int rc = rkv_wal_start(s->wal, s->snapw, err, err_len);
    if (rc < 0) {
        free(s->snapw);
        s->snapw = NULL;
        return rc;
    }
    rc = s->port->ops->task_start(s->port, "durable", srv_durable_main, s, &s->dur_task);
    if (rc < 0) {
        rkv_wal_stop(s->wal);
        free(s->snapw);
        s->snapw = NULL;
        return rkv_errf(err, err_len, rc, "server %u: cannot start the durable task", s->server_id);
    }
    return 0;
}

static void srv_durable_stop(struct rkv_server *s)
{
    if (!s->dur_task)
        return;
    srv_task_end(s, &s->dur_stop, &s->dur_task);
    rkv_wal_stop(s->wal); /* the snapshot writer is ours again */
    const struct rkv_snap_writer *w = s->snapw;
    char why[256];
    /* A clean stop leaves a checkpoint: the next start replays nothing. */
    if (s->mach.hdr && !s->replay_pending && rkv_wal_pending_bytes(s->wal) > 0 &&
        rkv_snap_commit(s->snapw, atomic_load(&s->mach.hdr->snap_started), why, sizeof(why)) < 0)
        RKV_LOGE(s->port, "checkpoint at shutdown failed (the log stays): %s", why);
    RKV_LOGI(s->port,
             "server %u durable: %llu acknowledgements waited; %llu log records (%llu bytes), "
             "%llu log syncs, %llu covered by another server's; %llu logs made from a spare, "
             "%llu files new; %llu snapshots written (%llu fsyncs, %llu bytes), %llu covered by "
             "another server's",
             s->server_id, (unsigned long long)s->n_durable_acks,
             (unsigned long long)s->wal->n_records, (unsigned long long)s->wal->bytes_appended,
             (unsigned long long)s->wal->n_syncs, (unsigned long long)s->wal->n_shared_syncs,
             (unsigned long long)s->wal->n_reused, (unsigned long long)s->wal->n_fresh,
             (unsigned long long)w->n_written, (unsigned long long)w->n_fsyncs,
             (unsigned long long)w->bytes_written, (unsigned long long)w->n_shared);
    rkv_snap_writer_free(s->snapw);
    free(s->snapw);
    s->snapw = NULL;
}

static void srv_wal_free(struct rkv_server *s)
{
    if (s->wal)
        rkv_wal_free(s->wal);
    free(s->wal);
    s->wal = NULL;
}

/* Listens, starts the engine's task and announces the server: from here
 * on it serves. */
static int srv_serve(struct rkv_server *s, char *err, size_t err_len)
{
    const struct rkv_machine *mc = &s->cfg.machines[s->cfg.machine_id];
    uint16_t tcp_port = (uint16_t)(mc->base_port + s->local_id);
    /* A machine whose host the config does not name listens everywhere. */
    int rc = rkv_engine_listen(s->eng, mc->host[0] ? mc->host : "0.0.0.0", tcp_port);
    /* A host that does not resolve is a configuration error (the NIC's
     * ECONFIG): "is the port in use?" sent its user after the wrong cause. */
    if (rc < 0)
        return rkv_errf(err, err_len, rc, "server %u: cannot listen on %s:%u (%s); %s",
                        s->server_id, mc->host, tcp_port, rkv_strerror(rc),
                        rc == -RKV_ECONFIG
                            ? "does the host name resolve? (the log says why)"
                            : "is the port in use? (by a listener, or as an outgoing connection's "
                              "source port: the log says; or the address is not this machine's)");
    if ((rc = rkv_engine_start(s->eng)) < 0)
        return rkv_errf(err, err_len, rc, "server %u: cannot start the engine task", s->server_id);
    /* Only a server whose machine the config gives no host announces itself:
     * the others' addresses server 0 has from the config, and a cluster may
     * finish and stop server 0 before such a redundant announcement. */
    if (s->server_id != 0 && !mc->host[0] && (rc = srv_register(s, tcp_port, err, err_len)) < 0)
        return rc;
    RKV_LOGI(s->port, "server %u listening on %s:%u%s", s->server_id, mc->host, tcp_port,
             s->durable ? " (durable)" : "");
    /* A connection per worker and per server (server 0 hears from every
     * one), and a few of its own. Said now, with the limit: past it the
     * NIC turned workers away one by one, and they failed their hello
     * minutes later saying that fewer workers had joined. */
    uint64_t need = (uint64_t)s->cfg.n_workers + s->n_servers + 32, limit = 0;
    if (s->port->ops->fd_room && s->port->ops->fd_room(s->port, need, &limit) < 0)
        RKV_LOGW(s->port,
                 "server %u: the open-file limit (RLIMIT_NOFILE, ulimit -n) is %llu, below the "
                 "%llu descriptors this server may need (a connection per worker and per "
                 "server: %u and %u): peers past it are turned away; raise it on this host",
                 s->server_id, (unsigned long long)limit, (unsigned long long)need,
                 s->cfg.n_workers, s->n_servers);
    /* Once per server, at the default level: an open door is a choice to
     * make knowingly. (A NIC whose peers are all in this process, as the
     * twin's, has no door.) */
    if (rkv_nic_open_to_strangers(s->nic))
        RKV_LOGW(s->port,
                 "server %u: NO SHARED SECRET: anyone who can reach port %u can join this "
                 "cluster, read and write every tensor and stop it; set RKV_TOKEN, "
                 "RKV_SECRET_FILE or rkv_config.secret on every node",
                 s->server_id, tcp_port);
    return 0;
}

/* ---- life cycle ---- */

/* What every create checks once, before anything is opened (the backend's
 * name opens the NIC), so there is nothing to undo then. */
static int srv_check_create(const struct rkv_config *cfg, uint32_t local_id,
                            struct rkv_server **srv_p, char *err, size_t err_len)
{
    if (!cfg || !srv_p)
        return rkv_errf(err, err_len, -RKV_EINVAL, "server create: %s is NULL",
                        !cfg ? "cfg" : "srv_p");
    int rc = rkv_cfg_check(cfg, err, err_len);
    if (rc < 0)
        return rc;
    const struct rkv_machine *mc = &cfg->machines[cfg->machine_id];
    if (local_id >= mc->servers)
        return rkv_errf(err, err_len, -RKV_ECONFIG, "server %u: machine %u has %u servers",
                        local_id, cfg->machine_id, mc->servers);
    return 0;
}

/* What the server holds in its own memory alone, freed last (create's
 * failure path, destroy and a forked child's destroy). */
static void srv_free_own(struct rkv_server *s)
{
    if (s->srv_claim >= 0) /* last: the files are closed */
        rkv_file_close(s->srv_claim);
    if (s->dir_claim >= 0)
        rkv_file_close(s->dir_claim);
    while (s->acks) {
        struct srv_ack *a = s->acks;
        s->acks = a->next;
        free(a);
    }
    rkv_cluster_destroy(s->own_cl);
    free(s->hellos);
    free(s->barrier);
    free(s->barrier_at);
    free(s->table);
    free(s->table_peer);
    free(s->table_wait);
    free(s->ht);
    free(s->pt);
    free(s);
}

/* cfg, local_id and srv_p passed srv_check_create. */
static int srv_create(struct rkv_port *port, struct rkv_nic *nic, const struct rkv_config *cfg,
                      uint32_t local_id, struct rkv_server **srv_p, char *err, size_t err_len)
{
    int rc;
    /* Before listening: the secret and connection limits. */
    if ((rc = rkv_cfg_nic(cfg, nic, err, err_len)) < 0)
        return rc;
    struct rkv_server *s = calloc(1, sizeof(*s));
    if (!s)
        return rkv_errf(err, err_len, -RKV_ENOMEM, "out of memory");
    if (err && err_len) /* a step that fails says why here; see free_server */
        err[0] = 0;
    s->dir_claim = s->srv_claim = -1;
    s->cfg = *cfg;
    s->port = port;
    s->nic = nic;
    s->local_id = local_id;
    s->pid = rkv_port_pid();
    atomic_init(&s->test_corrupt_row, UINT64_MAX);
    atomic_init(&s->make_async_bytes, SRV_MAKE_ASYNC_BYTES);
    if ((rc = rkv_cluster_of(cfg, &s->cl, &s->own_cl, err, err_len)) < 0)
        goto free_server;
    s->cfg.machines = (struct rkv_machine *)(uintptr_t)s->cl->machines; /* read only */
    s->fp = rkv_cluster_fingerprint(s->cl, cfg);
    s->server_id = rkv_cluster_server_id(s->cl, cfg->machine_id, local_id);
    s->n_servers = s->cl->n_servers;
    s->durable = cfg->durable_dir[0] != 0;
    /* Only server 0 hands out ids and holds barriers: an entry per worker
     * in every server would be workers x servers in the twin's process. */
    if (s->server_id == 0) {
        s->hellos = calloc(cfg->n_workers, sizeof(*s->hellos));
        s->barrier = calloc(cfg->n_workers, sizeof(*s->barrier));
        s->barrier_at = calloc(cfg->n_workers, sizeof(*s->barrier_at));
        rc = -RKV_ENOMEM;
        if (!s->hellos || !s->barrier || !s->barrier_at)
            goto free_server;
    }
    if ((rc = port->ops->mutex_create(port, &s->mu)) < 0)
        goto free_server;
    if ((rc = port->ops->cond_create(port, &s->cv)) < 0)
        goto destroy_mutex;
    if ((rc = port->ops->mutex_create(port, &s->hmu)) < 0)
        goto destroy_cond;
    struct rkv_engine_cfg ec;
    rkv_cfg_engine(cfg, port, s->server_id, &ec);
    /* A client never has more requests in flight than its credits; a peer
     * that takes replies and returns none is dropped before it can pile up
     * more than a few windows (and one address table) of them. */
    ec.max_backlog = 4 * cfg->rx_depth + s->n_servers;
    /* Every worker and server connects once, observers (rkv ls) and a
     * reconnect whose old connection is not yet seen gone come on top:
     * twice that, and 64, bounds what peers with the secret can make this
     * server hold in connections (each up to rx_depth x ctrl_buf_bytes). */
    uint64_t conns = 2 * ((uint64_t)cfg->n_workers + s->n_servers) + 64;
    ec.max_incoming = conns > UINT32_MAX ? UINT32_MAX : (uint32_t)conns;
    rc = rkv_engine_create(port, nic, &ec, srv_on_msg, srv_on_peer, s, &s->eng, err, err_len);
    if (rc < 0)
        goto destroy_hmu;
    if (s->server_id == 0 && (rc = srv_table_init(s)) < 0)
        goto destroy_engine;
    /* The shard is whole (restored, when restarting) before anyone can ask. */
    if ((rc = srv_mach_open(s, err, err_len)) < 0)
        goto close_mach; /* it may have made the segment before failing */
    if ((rc = srv_durable_start(s, err, err_len)) < 0)
        goto close_mach;
    /* A replay that waits for custom handlers: rkv_server_run listens. */
    if (!s->replay_pending && (rc = srv_serve(s, err, err_len)) < 0)
        goto stop_durable;
    *srv_p = s;
    return 0;
stop_durable:
    srv_make_stop(s);
    srv_durable_stop(s);
close_mach:
    srv_free_tensors(s);
    /* Nobody else can use a segment this create made: the machine's other
     * servers attach to it only at an INIT, which needs this server to
     * listen. (Only the server that made it: a failed restart beside
     * running siblings leaves what they serve.) */
    if (s->mach_made)
        rkv_mach_unlink(port, s->cfg.shm_prefix, s->cfg.machine_id);
    rkv_mach_close(&s->mach);
destroy_engine:
    srv_wal_free(s);
    rkv_engine_destroy(s->eng);
    srv_free_conns(s);
destroy_hmu:
    port->ops->mutex_destroy(s->hmu);
destroy_cond:
    port->ops->cond_destroy(s->cv);
destroy_mutex:
    port->ops->mutex_destroy(s->mu);
free_server:
    srv_free_own(s);
    /* For the steps that say nothing (an allocation): a step's own reason
     * ("machine segment ...: needs 138 KiB, but /dev/shm has 100 KiB
     * free") was replaced by "out of memory". */
    if (rc == -RKV_ENOMEM && err && err_len && !err[0])
        rkv_errf(err, err_len, rc, "out of memory");
    return rc;
}

int rkv_server_create_on(struct rkv_port *port, struct rkv_nic *nic, const struct rkv_config *cfg,
                         uint32_t local_id, struct rkv_server **srv_p, char *err, size_t err_len)
{
    int rc = srv_check_create(cfg, local_id, srv_p, err, err_len);
    return rc < 0 ? rc : srv_create(port, nic, cfg, local_id, srv_p, err, err_len);
}

int rkv_server_create(const struct rkv_config *cfg, uint32_t local_id, struct rkv_server **srv_p,
                      char *err, size_t err_len)
{
    int rc = srv_check_create(cfg, local_id, srv_p, err, err_len);
    if (rc < 0)
        return rc;
    char node[32];
    snprintf(node, sizeof(node), "s%u.%u", cfg->machine_id, local_id);
    struct rkv_port *port;
    struct rkv_nic *nic;
    rc = rkv_node_open(cfg, node, cfg->seed, &port, &nic, err, err_len);
    if (rc < 0)
        return rc;
    if ((rc = srv_create(port, nic, cfg, local_id, srv_p, err, err_len)) < 0) {
        rkv_node_close(port, nic);
        return rc;
    }
    (*srv_p)->own_port_nic = 1;
    return 0;
}

void rkv_server_set_test_corrupt_row(struct rkv_server *s, uint64_t row)
{
    atomic_store(&s->test_corrupt_row, row);
}

void rkv_server_test_make(struct rkv_server *s, uint64_t async_bytes, int hold)
{
    atomic_store(&s->make_async_bytes, async_bytes);
    atomic_store(&s->make_hold, hold);
}

uint64_t rkv_server_test_makes_begun(struct rkv_server *s)
{
    return atomic_load(&s->makes_begun);
}

/* A fork()ed child has the server's memory but not its threads: its
 * rkv_server_run waited for a stop no thread of the child would ever
 * make, while the parent's threads went on serving the connections.
 * Refused at once; the message is the child's own copy. */
static int srv_forked(struct rkv_server *s, const char *what)
{
    int pid = rkv_port_pid();
    if (s->pid == pid)
        return 0;
    return rkv_errf(s->err, sizeof(s->err), -RKV_EINVAL,
                    "%s: this server was created by process %d; this is a forked child (process "
                    "%d): create a new server in the child",
                    what, s->pid, pid);
}

/* 1 when the caller runs inside one of this server's handlers (push or
 * pull), which run holding hmu: a registration there waited for the lock
 * its own thread held, and the server served nobody again. */
static int srv_in_handler(struct rkv_server *s)
{
    return s->port->ops->mutex_held(s->hmu);
}

/* Once it returns, no push or pull runs the handler it replaced. */
int rkv_server_register_handler(struct rkv_server *s, int op, rkv_handler_fn fn, void *user)
{
    if (!s) /* a create whose failure went unchecked: it crashed */
        return -RKV_EINVAL;
    int rc = srv_forked(s, "register handler");
    if (rc < 0)
        return rc;
    if (srv_in_handler(s))
        return rkv_errf(s->err, sizeof(s->err), -RKV_EINVAL,
                        "register handler %d: called from inside a handler this server runs, "
                        "which holds the handler tables: register from another thread",
                        op);
    s->port->ops->mutex_lock(s->hmu);
    rc = rkv_handler_register_at(&s->ht, op, fn, user);
    s->port->ops->mutex_unlock(s->hmu);
    /* It returned the code alone: rkv_server_errmsg then gave the message
     * of whatever failed before, or nothing. As the client's says it. */
    if (rc < 0)
        return rkv_errf(s->err, sizeof(s->err), rc,
                        rc == -RKV_ENOMEM ? "register handler %d: out of memory"
                                          : "register handler %d: custom ops are %d..%d",
                        op, RKV_OP_CUSTOM, RKV_OP_MAX - 1);
    return rc;
}

int rkv_server_register_pull_handler(struct rkv_server *s, int id, rkv_pull_fn fn,
                                     uint32_t out_mult, uint32_t out_add, void *user)
{
    if (!s)
        return -RKV_EINVAL;
    int rc = srv_forked(s, "register pull handler");
    if (rc < 0)
        return rc;
    if (srv_in_handler(s))
        return rkv_errf(s->err, sizeof(s->err), -RKV_EINVAL,
                        "register pull handler %d: called from inside a handler this server "
                        "runs, which holds the handler tables: register from another thread",
                        id);
    s->port->ops->mutex_lock(s->hmu);
    rc = rkv_pull_register_at(&s->pt, id, fn, out_mult, out_add, user);
    s->port->ops->mutex_unlock(s->hmu);
    if (rc == -RKV_ENOMEM)
        return rkv_errf(s->err, sizeof(s->err), rc, "register pull handler %d: out of memory", id);
    if (rc < 0)
        return rkv_errf(s->err, sizeof(s->err), rc,
                        "register pull handler %d: custom ids are %d..%d, and out_mult and out_add "
                        "may not both be 0 (a reply of no elements)",
                        id, RKV_PULL_CUSTOM, RKV_OP_MAX - 1);
    return rc;
}

static int srv_run(struct rkv_server *s);

int rkv_server_run(struct rkv_server *s)
{
    if (!s)
        return -RKV_EINVAL;
    int rc = srv_forked(s, "rkv_server_run");
    if (rc < 0)
        return rc;
    /* One thread at a time: a second one ran a restart's pending replay
     * beside the first, and its return let the caller destroy the server
     * under the other. Said in the log: s->err is the running call's. */
    s->port->ops->mutex_lock(s->mu);
    int busy = s->running;
    s->running = 1;
    s->port->ops->mutex_unlock(s->mu);
    if (busy) {
        RKV_LOGE(s->port, "server %u: rkv_server_run: another thread runs it already",
                 s->server_id);
        return -RKV_EINVAL;
    }
    rc = srv_run(s);
    /* The last touch of s: a destroy waiting for this run frees it next. */
    s->port->ops->mutex_lock(s->mu);
    s->running = 0;
    s->port->ops->cond_broadcast(s->cv);
    s->port->ops->mutex_unlock(s->mu);
    return rc;
}

/* How often a durable server beside siblings looks for a push one of them
 * died applying, holding the log's lock. */
#define SRV_TORN_CHECK_NS 1000000000ull

/* The next server to take the log's lock finishes such a push (wal.c), and
 * a server waiting on its row frees it (srv_holder_dead); with no request
 * for the machine's rows coming to a live server (its workers reading them
 * from the shared memory only), nobody took it, and those workers waited
 * on that row for ever: the run thread takes it. */
static void srv_torn_check(struct rkv_server *s)
{
    struct rkv_mach_hdr *h = s->mach.hdr;
    const struct rkv_port_ops *o = s->port->ops;
    if (!h || !atomic_load(&h->jr_lsn) || !o->proc_alive)
        return;
    unsigned tag = atomic_load(&h->wal_lock);
    uint64_t holder = atomic_load(&h->wal_holder);
    if (!holder && tag >= 1 && tag <= RKV_MACH_SERVERS)
        holder = atomic_load(&h->reader_proc[tag - 1]);
    if (!tag || !holder || o->proc_alive(s->port, holder))
        return; /* a live push, or one left for a server that can finish it */
    char why[300];
    o->mutex_lock(s->hmu);
    if (rkv_wal_trim(s->wal, s->ht, why, sizeof(why)) < 0)
        RKV_LOGE(s->port, "server %u: %s", s->server_id, why);
    o->mutex_unlock(s->hmu);
}

/* rkv_server_run, in the one thread that runs it. */
static int srv_run(struct rkv_server *s)
{
    /* A restart's replay that waited for the custom handlers registered
     * since create; only then does the server listen. */
    if (s->replay_pending) {
        int rc = srv_replay_finish(s, s->err, sizeof(s->err));
        if (rc == 0)
            rc = srv_serve(s, s->err, sizeof(s->err));
        if (rc < 0) {
            RKV_LOGE(s->port, "server %u: %s", s->server_id, s->err);
            return rc;
        }
    }
    /* A push a server of the machine died applying, which create could
     * not finish for want of its custom handler: now it can, before a
     * checkpoint (refused meanwhile) is asked for. */
    if (s->wal && s->mach.hdr && atomic_load(&s->mach.hdr->jr_lsn)) {
        char why[256];
        /* As a push holds it: the engine task may be serving already, and
         * a server's reader slot is one flag, one apply at a time. */
        s->port->ops->mutex_lock(s->hmu);
        if (rkv_wal_trim(s->wal, s->ht, why, sizeof(why)) < 0)
            RKV_LOGE(s->port, "server %u: %s", s->server_id, why);
        s->port->ops->mutex_unlock(s->hmu);
    }
    int torn_check = s->wal && s->cfg.machines[s->cfg.machine_id].servers > 1;
    s->port->ops->mutex_lock(s->mu);
    while (!s->stop) {
        s->port->ops->cond_wait(s->cv, s->mu, torn_check ? SRV_TORN_CHECK_NS : UINT64_MAX);
        if (torn_check && !s->stop) {
            s->port->ops->mutex_unlock(s->mu);
            srv_torn_check(s);
            s->port->ops->mutex_lock(s->mu);
        }
    }
    s->port->ops->mutex_unlock(s->mu);
    /* Linger, as TCP's close does: the replies this server owes (the
     * SHUTDOWN's ack, barrier replies a lossy link still retransmits) must
     * reach their peers before its connections close. Bounded by the
     * request timeout: a later reply would find its requester gone. */
    (void)rkv_engine_linger(s->eng, s->cfg.timeout_ms);
    RKV_LOGI(s->port, "server %u stopping after %llu messages", s->server_id,
             (unsigned long long)atomic_load_explicit(&s->n_msgs, memory_order_relaxed));
    uint64_t dups = atomic_load_explicit(&s->n_dups, memory_order_relaxed);
    if (dups)
        RKV_LOGI(s->port, "server %u: %llu retried pushes were acknowledged without reapplying",
                 s->server_id, (unsigned long long)dups);
    return 0;
}

void rkv_server_stop(struct rkv_server *s)
{
    /* Not in a forked child: the lock may have been held at the fork, and
     * no run of the child's can be waiting (it was refused). */
    if (!s || s->pid != rkv_port_pid())
        return;
    /* Only the flag run waits on: shut and the shards' closed flags are
     * the engine thread's, set by a client's SHUTDOWN. */
    s->port->ops->mutex_lock(s->mu);
    s->stop = 1;
    s->port->ops->cond_broadcast(s->cv);
    s->port->ops->mutex_unlock(s->mu);
}

const char *rkv_server_errmsg(const struct rkv_server *s)
{
    if (!s)
        return "server is NULL (did its rkv_server_create fail?)";
    return s->err;
}

/* rkv_server_destroy in a forked child: what it shares with the parent is
 * left alone. The durable task and the engine's threads are the parent's
 * (joining them hung), their connections and log files are the parent's
 * (closing the NIC shut down its sockets; a checkpoint would race the
 * parent's), and the machine's segments are still in use there (the
 * parent still serves them: the last server of the machine to stop
 * removes them). The shards and the machine segment are unmapped, never
 * unlinked; the engine, NIC, port, log
 * and locks stay in the child's memory, their descriptors open
 * (close-on-exec) until it execs or exits. */
static void srv_destroy_forked(struct rkv_server *s)
{
    for (uint32_t i = 1; i <= s->n_tensors; i++) {
        struct rkv_tensor *t = rkv_tensor_at(&s->tensors, i);
        if (t) { /* its registration is the parent's NIC's */
            rkv_tensor_free(t);
            free(t);
        }
    }
    rkv_tensor_table_free(&s->tensors);
    rkv_mach_close(&s->mach);
    srv_free_conns(s);
    srv_free_own(s);
}

void rkv_server_destroy(struct rkv_server *s)
{
    if (!s)
        return;
    if (s->pid != rkv_port_pid()) {
        srv_destroy_forked(s);
        return;
    }
    /* A thread still in rkv_server_run is stopped and waited for: destroy
     * tore the server down under it and then hung in the condition variable
     * it waited on (an outside tester, every time). */
    s->port->ops->mutex_lock(s->mu);
    s->stop = 1;
    s->port->ops->cond_broadcast(s->cv);
    while (s->running)
        s->port->ops->cond_wait(s->cv, s->mu, UINT64_MAX);
    s->port->ops->mutex_unlock(s->mu);
    srv_make_stop(s);    /* it hands acknowledgements to the durable task */
    srv_durable_stop(s); /* it sends through the engine */
    rkv_engine_stop(s->eng);
    srv_free_conns(s);
    /* The last of the machine's servers to stop removes its memory: the
     * first one's stop removed it under siblings that still served it, and
     * its restart beside them was refused (an outside tester, a SIGTERM;
     * its kill -9 and restart worked). A co-located client still maps the
     * shards: it would go on reading and writing rows nobody will ever see
     * (its pushes returned 0 after rkv_server_stop and destroy, without a
     * SHUTDOWN). Closed first, then unlinked. Not in durable mode: a
     * restarted server restores the machine from its snapshot, the
     * clients' pushes go through a server, and their pulls map the new
     * shard: the segment says it moved (rkv_shard_retire), so they need
     * not have heard of the restart yet (cli_local_follow). */
    if (s->mach.hdr && rkv_mach_leave(&s->mach))
        rkv_mach_remove(&s->mach, s->cfg.shm_prefix, s->cfg.machine_id, s->n_tensors,
                        !s->cfg.durable_dir[0]);
    srv_free_tensors(s); /* their registrations go through the engine */
    rkv_engine_destroy(s->eng);
    rkv_mach_close(&s->mach);
    srv_wal_free(s);
    s->port->ops->mutex_destroy(s->hmu);
    s->port->ops->cond_destroy(s->cv);
    s->port->ops->mutex_destroy(s->mu);
    if (s->own_port_nic)
        rkv_node_close(s->port, s->nic);
    srv_free_own(s);
}
