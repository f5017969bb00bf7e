/* Hostile peers against real servers, over the backend RKV_TEST_BACKEND
 * names (tcp by default; ci/verbs-suite runs it with verbs in the soft-RoCE
 * VM, and it exits 77 when verbs is asked for and no RDMA device exists).
 *
 * The hostile peer is the real NIC driven by hand: it speaks rkv's wire
 * format with the real encoders, but sends whatever it likes (bad keys, wrong
 * row sizes, lengths that wrap or lie), writes where it likes once a server
 * granted it a slot, and plays a server that answers a rendezvous with a slot
 * pointing at nothing. After each attack the attacked server must still serve
 * a well-behaved client (values checked), and must have logged the rejection
 * exactly once: every server and client here runs on a port whose log lines
 * are captured (a copy of the POSIX port's ops with vlog replaced).
 *
 * The address is RKV_HOST, else 127.0.0.1 (tcp) or the first IPv4 address
 * rdma_cm can bind to an RDMA device (verbs). */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#if RKV_WITH_VERBS
#include <ifaddrs.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#endif

#include "nic/nic.h"
#include "port/port.h"
#include "proto/proto.h"
#include "raw_frames.h"
#include "rkv.h"
#include "store/server_int.h"
#include "store/store_int.h"
#include "under_sanitizer.h"
#include "util/util.h"

#define WAIT_MS 10000u   /* every wait for something that must happen (emulated NICs are slow) */
#define EV_RX 64u        /* receives the hostile peer posts (the servers' rx_depth) */
#define EV_CTRL 8192u    /* the servers' ctrl_buf_bytes: each receive holds one SEND */
#define EV_TX 65536u     /* the hostile peer's transmit buffer */
#define EV_QUEUE 32u     /* messages the hostile peer holds before a test reads them */
#define FLOOD 200        /* connections of the flood */
#define BIG_ROW_LEN 4096 /* f32 elements: 16 KiB rows travel through rendezvous slots */

/* What every test needs to know about where it runs (cmocka group state). */
struct env {
    char backend[16];
    char host[64];
    uint16_t next_port; /* ports are tried upward from a pid-derived base */
    /* What the next cluster and nodes are given (a test sets, then clears). */
    char secret[64];           /* every node's shared secret; "": RKV_TOKEN's */
    uint32_t hello_timeout_ms; /* 0: the default */
    uint32_t idle_timeout_ms;
    uint32_t n_workers;      /* 0: 1 */
    char durable_dir[64];    /* "": not durable */
    uint64_t slot_mem_bytes; /* 0: the default, sized from the host */
    uint64_t max_slot_bytes; /* 0: the default */
    uint32_t live_servers;   /* server threads started and not joined */
};

/* ---- log capture ---- */

/* A port's log, kept in memory. The port's ops point at `ops`, a copy of the
 * POSIX ones with vlog replaced, so the capture finds itself from the port. */
struct logcap {
    struct rkv_port_ops ops; /* first: logcap_of() casts back from port->ops */
    const struct rkv_port_ops *orig;
    pthread_mutex_t mu;
    char *text; /* lines, each ending in '\n' */
    size_t len, cap;
    int echo_level; /* lines at or below it also go to stderr, for the CI log */
};

static struct logcap *logcap_of(struct rkv_port *p)
{
    return (struct logcap *)(void *)(uintptr_t)p->ops;
}

static void logcap_vlog(struct rkv_port *p, int level, const char *fmt, va_list ap)
{
    struct logcap *lc = logcap_of(p);
    char line[1024];
    va_list ap2;
    va_copy(ap2, ap);
    int n = snprintf(line, sizeof(line), "%s L%d ", p->node, level);
    vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap2);
    va_end(ap2);
    size_t l = strlen(line);
    pthread_mutex_lock(&lc->mu);
    if (lc->len + l + 2 > lc->cap) {
        size_t cap = (lc->cap + l + 2) * 2;
        char *t = realloc(lc->text, cap);
        if (!t)
            abort(); /* a test without memory cannot say anything useful */
        lc->text = t;
        lc->cap = cap;
    }
    memcpy(lc->text + lc->len, line, l);
    lc->len += l;
    lc->text[lc->len++] = '\n';
    lc->text[lc->len] = 0;
    pthread_mutex_unlock(&lc->mu);
    if (level <= lc->echo_level)
        lc->orig->vlog(p, level, fmt, ap);
}

static void logcap_attach(struct logcap *lc, struct rkv_port *p)
{
    memset(lc, 0, sizeof(*lc));
    lc->orig = p->ops;
    lc->ops = *p->ops;
    lc->ops.vlog = logcap_vlog;
    lc->echo_level = RKV_LOG_WARN;
    pthread_mutex_init(&lc->mu, NULL);
    p->ops = &lc->ops;
}

static void logcap_free(struct logcap *lc)
{
    pthread_mutex_destroy(&lc->mu);
    free(lc->text);
}

/* Lines containing needle since the last reset. */
static int logcap_count(struct logcap *lc, const char *needle)
{
    int n = 0;
    pthread_mutex_lock(&lc->mu);
    for (const char *s = lc->text; s && *s;) {
        const char *eol = strchr(s, '\n');
        const char *hit = strstr(s, needle);
        if (hit && hit < eol)
            n++;
        s = eol + 1;
    }
    pthread_mutex_unlock(&lc->mu);
    return n;
}

static void logcap_reset(struct logcap *lc)
{
    pthread_mutex_lock(&lc->mu);
    lc->len = 0;
    if (lc->text)
        lc->text[0] = 0;
    pthread_mutex_unlock(&lc->mu);
}

static void logcap_dump(struct logcap *lc, const char *title)
{
    pthread_mutex_lock(&lc->mu);
    printf("---- %s ----\n%s----\n", title, lc->text ? lc->text : "");
    pthread_mutex_unlock(&lc->mu);
}

/* Every rejection is logged exactly once: one line of its kind, and it says
 * `needle` (NULL: the kind is all that is checked). */
static void expect_logged_once(struct logcap *lc, const char *needle, const char *kind)
{
    if (!needle)
        needle = kind;
    /* The line may come a moment after what the test saw (the peer's hang-up,
     * a failed request): wait for it, then count. */
    for (int waited_ms = 0; logcap_count(lc, kind) == 0 && waited_ms < (int)WAIT_MS;
         waited_ms += 10)
        usleep(10000);
    int n = logcap_count(lc, needle), k = logcap_count(lc, kind);
    if (n != 1 || k != 1) {
        logcap_dump(lc, "captured log");
        fail_msg("expected one '%s' line (and one '%s'), got %d (%d)", needle, kind, n, k);
    }
}

/* ---- nodes: a port with a captured log, and a NIC of the backend ---- */

struct node {
    struct rkv_port *port;
    struct rkv_nic *nic;
    struct logcap log;
};

static void node_open(struct node *nd, const struct env *env, const char *name)
{
    const struct rkv_nic_ops *ops = rkv_nic_find(env->backend);
    assert_non_null(ops);
    assert_int_equal(rkv_port_posix_create(name, RKV_LOG_DEBUG, 7, &nd->port), 0);
    logcap_attach(&nd->log, nd->port);
    assert_int_equal(ops->open(nd->port, NULL, &nd->nic), 0);
    if (env->secret[0])
        rkv_nic_set_secret(nd->nic, env->secret, strlen(env->secret));
}

static void node_close(struct node *nd)
{
    nd->nic->ops->close(nd->nic);
    nd->port->ops->destroy(nd->port);
    logcap_free(&nd->log);
}

/* ---- a cluster of real servers ---- */

#define MAX_MACHINES 3

struct cluster {
    struct rkv_machine machines[MAX_MACHINES];
    struct rkv_config cfg;
    uint32_t n_real; /* machines 0..n_real-1 run real servers */
    struct node srv_node[MAX_MACHINES];
    struct rkv_server *srv[MAX_MACHINES];
    pthread_t thr[MAX_MACHINES];
    struct node cli_node;
    struct rkv_client *cli;
    struct env *env;
};

static void *server_main(void *arg)
{
    rkv_server_run(arg);
    return NULL;
}

static void cluster_config(struct cluster *c, struct env *env, uint32_t n_machines, uint16_t base)
{
    memset(c->machines, 0, sizeof(c->machines));
    for (uint32_t m = 0; m < n_machines; m++) {
        snprintf(c->machines[m].host, sizeof(c->machines[m].host), "%s", env->host);
        c->machines[m].base_port = (uint16_t)(base + m);
        c->machines[m].servers = 1;
    }
    rkv_config_defaults(&c->cfg);
    snprintf(c->cfg.backend, sizeof(c->cfg.backend), "%s", env->backend);
    c->cfg.n_machines = n_machines;
    c->cfg.machines = c->machines;
    c->cfg.n_workers = env->n_workers ? env->n_workers : 1;
    c->cfg.timeout_ms = WAIT_MS;
    c->cfg.connect_retry_ms = WAIT_MS;
    c->cfg.log_level = RKV_LOG_DEBUG;
    snprintf(c->cfg.secret, sizeof(c->cfg.secret), "%s", env->secret);
    if (env->hello_timeout_ms)
        c->cfg.hello_timeout_ms = env->hello_timeout_ms;
    c->cfg.idle_timeout_ms = env->idle_timeout_ms;
    snprintf(c->cfg.durable_dir, sizeof(c->cfg.durable_dir), "%s", env->durable_dir);
    if (env->slot_mem_bytes)
        c->cfg.slot_mem_bytes = env->slot_mem_bytes;
    if (env->max_slot_bytes)
        c->cfg.max_slot_bytes = env->max_slot_bytes;
    snprintf(c->cfg.shm_prefix, sizeof(c->cfg.shm_prefix), "rkvh-%d-%u", (int)getpid(), base);
}

/* Whether a TCP port of this host is free now (for the hostile server's
 * machine, which no rkv server probes by binding). */
static int port_free(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    int ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* Starts real servers on machines 0..n_real-1 of an n_machines cluster (the
 * rest is the caller's: a hostile server). Ports are tried until free. */
static void cluster_start(struct cluster *c, struct env *env, uint32_t n_machines, uint32_t n_real)
{
    memset(c, 0, sizeof(*c));
    c->n_real = n_real;
    char err[256] = "";
    for (int attempt = 0; attempt < 50; attempt++) {
        uint16_t base = env->next_port;
        env->next_port = (uint16_t)(env->next_port + n_machines);
        if (env->next_port > 18990)
            env->next_port = 10000;
        cluster_config(c, env, n_machines, base);
        uint32_t m, spare = n_real;
        while (spare < n_machines && port_free((uint16_t)(base + spare)))
            spare++;
        if (spare < n_machines)
            continue; /* the hostile server's port is taken: try others */
        for (m = 0; m < n_real; m++) {
            char name[16];
            snprintf(name, sizeof(name), "s%u", m);
            struct rkv_config cfg = c->cfg;
            cfg.machine_id = m;
            node_open(&c->srv_node[m], env, name);
            if (rkv_server_create_on(c->srv_node[m].port, c->srv_node[m].nic, &cfg, 0, &c->srv[m],
                                     err, sizeof(err)) < 0) {
                node_close(&c->srv_node[m]);
                break;
            }
        }
        if (m == n_real)
            break;
        while (m-- > 0) { /* a port was taken: shut what started, try others */
            rkv_server_destroy(c->srv[m]);
            node_close(&c->srv_node[m]);
            c->srv[m] = NULL;
        }
    }
    if (!c->srv[0])
        fail_msg("no free ports for the servers: %s", err);
    c->env = env;
    for (uint32_t m = 0; m < n_real; m++) {
        assert_int_equal(pthread_create(&c->thr[m], NULL, server_main, c->srv[m]), 0);
        env->live_servers++;
    }
}

/* The well-behaved client, on machine 0 (its rows of other machines cross
 * the network). Created after any hostile server is up. */
static void cluster_join(struct cluster *c, struct env *env)
{
    char err[256];
    node_open(&c->cli_node, env, "w");
    if (rkv_client_create_on(c->cli_node.port, c->cli_node.nic, &c->cfg, &c->cli, err,
                             sizeof(err)) < 0)
        fail_msg("client: %s", err);
}

/* The client stops the servers; their logs are still there to read. */
static void cluster_halt(struct cluster *c)
{
    /* A hostile server whose connection broke cannot be asked to exit:
     * the call names it (-RKV_EPEERDEAD); the real ones stop (joined below). */
    int rc = rkv_client_shutdown_servers(c->cli);
    assert_true(rc == 0 || (c->n_real < c->cfg.n_machines && rc == -RKV_EPEERDEAD));
    for (uint32_t m = 0; m < c->n_real; m++) {
        pthread_join(c->thr[m], NULL);
        c->env->live_servers--;
    }
}

static void cluster_free(struct cluster *c)
{
    rkv_client_destroy(c->cli);
    node_close(&c->cli_node);
    for (uint32_t m = 0; m < c->n_real; m++) {
        rkv_server_destroy(c->srv[m]);
        node_close(&c->srv_node[m]);
    }
}

static void cluster_stop(struct cluster *c)
{
    cluster_halt(c);
    cluster_free(c);
}

/* Tensor 1: rows 50..99 live on machine 1 of two (33..65 of three). Tensor 2: the same with 16 KiB
 * rows, which travel through rendezvous slots. */
static const struct rkv_tensor_desc T_SMALL = {
    .name = "small", .dtype = RKV_F32, .rows = 100, .row_len = 4, .policy = RKV_PART_RANGE};
static const struct rkv_tensor_desc T_BIG = {
    .name = "big", .dtype = RKV_F32, .rows = 100, .row_len = BIG_ROW_LEN, .policy = RKV_PART_RANGE};
#define SMALL_ID 1u
#define SMALL_ROW_BYTES 16u

static void cluster_tensors(struct cluster *c)
{
    assert_int_equal(rkv_client_init_data(c->cli, &T_SMALL), 0);
    assert_int_equal(rkv_client_init_data(c->cli, &T_BIG), 0);
}

/* Push then pull rows of machine 1 (and one of machine 0) of both tensors;
 * the values must come back. `round` makes every call's values new. */
static void check_serving(struct cluster *c, int round)
{
    static float rows[3 * BIG_ROW_LEN], got[3 * BIG_ROW_LEN];
    /* Two rows of machine 1 and one of machine 0, for 2 or 3 machines. */
    uint64_t ids[3] = {c->cfg.n_machines == 2 ? 99 : 40, 3, 60};
    const struct rkv_tensor_desc *ts[2] = {&T_SMALL, &T_BIG};
    for (int k = 0; k < 2; k++) {
        size_t n = 3 * (size_t)ts[k]->row_len;
        for (size_t j = 0; j < n; j++)
            rows[j] = (float)(round * 1000 + k * 100) + (float)(j % 89);
        int rc = rkv_client_push(c->cli, ts[k]->name, ids, 3, rows, RKV_OP_ASSIGN, 0);
        if (rc < 0)
            fail_msg("push %s: %s", ts[k]->name, rkv_client_errmsg(c->cli));
        memset(got, 0, n * sizeof(float));
        rc = rkv_client_pull(c->cli, ts[k]->name, ids, 3, got);
        if (rc < 0)
            fail_msg("pull %s: %s", ts[k]->name, rkv_client_errmsg(c->cli));
        assert_memory_equal(got, rows, n * sizeof(float));
    }
}

/* ---- the hostile peer: the real NIC, driven by hand ---- */

struct rx_msg {
    uint8_t buf[EV_CTRL] __attribute__((aligned(8)));
    uint32_t len;
};

struct evil {
    struct node nd;
    struct rkv_qp *qp;
    int down;      /* the connection broke (DISCONNECTED seen) */
    int failed_wc; /* a completion of ours carried an error status */
    int failed_status;
    uint8_t *rx; /* EV_RX receive buffers of EV_CTRL bytes */
    struct rkv_mr *rx_mr;
    uint8_t *tx;
    struct rkv_mr *tx_mr;
    struct rx_msg *q; /* received SENDs, oldest first */
    uint32_t q_head, q_len;
    uint32_t n_imm; /* WRITE_WITH_IMMs that landed */
};

static void evil_open(struct evil *e, const struct env *env)
{
    memset(e, 0, sizeof(*e));
    node_open(&e->nd, env, "evil");
    e->rx = aligned_alloc(64, (size_t)EV_RX * EV_CTRL);
    e->tx = aligned_alloc(64, EV_TX);
    e->q = calloc(EV_QUEUE, sizeof(*e->q));
    assert_true(e->rx && e->tx && e->q);
    memset(e->tx, 0, EV_TX);
    struct rkv_nic *n = e->nd.nic;
    assert_int_equal(n->ops->reg_mr(n, e->rx, (size_t)EV_RX * EV_CTRL, RKV_ACCESS_LOCAL, &e->rx_mr),
                     0);
    assert_int_equal(n->ops->reg_mr(n, e->tx, EV_TX, RKV_ACCESS_LOCAL, &e->tx_mr), 0);
}

static void evil_post_rx(struct evil *e, uint32_t i)
{
    struct rkv_sge s = {.addr = e->rx + (size_t)i * EV_CTRL, .len = EV_CTRL, .mr = e->rx_mr};
    int rc = e->nd.nic->ops->post_recv(e->qp, i, &s);
    if (rc != 0) /* the server may have dropped the hostile peer already */
        assert_int_equal(rc, -RKV_EPEERDEAD);
}

static void evil_attach(struct evil *e, struct rkv_qp *qp)
{
    e->qp = qp;
    for (uint32_t i = 0; i < EV_RX; i++)
        evil_post_rx(e, i);
}

static void evil_connect(struct evil *e, const struct rkv_machine *m)
{
    struct rkv_qp *qp;
    struct rkv_nic *n = e->nd.nic;
    assert_int_equal(n->ops->connect(n, m->host, m->base_port, WAIT_MS, &qp), 0);
    evil_attach(e, qp);
}

/* Takes completions for up to timeout_ms; returns how many. */
static int evil_pump(struct evil *e, uint32_t timeout_ms)
{
    struct rkv_wc wc[16];
    int n = e->nd.nic->ops->poll(e->nd.nic, wc, 16, timeout_ms);
    for (int i = 0; i < n; i++) {
        if (wc[i].opcode == RKV_WC_CONNECTED) {
            if (!e->qp)
                evil_attach(e, wc[i].qp);
            else
                e->nd.nic->ops->qp_close(wc[i].qp); /* one connection at a time */
            continue;
        }
        if (wc[i].qp != e->qp)
            continue;
        if (wc[i].opcode == RKV_WC_DISCONNECTED) {
            e->down = 1;
            continue;
        }
        if (wc[i].status != RKV_WC_SUCCESS) {
            e->failed_wc++;
            e->failed_status = wc[i].status;
            continue;
        }
        if (wc[i].opcode == RKV_WC_RECV_IMM) {
            e->n_imm++;
            evil_post_rx(e, (uint32_t)wc[i].wr_id);
        } else if (wc[i].opcode == RKV_WC_RECV) {
            uint32_t i_rx = (uint32_t)wc[i].wr_id;
            assert_true(e->q_len < EV_QUEUE);
            struct rx_msg *m = &e->q[(e->q_head + e->q_len++) % EV_QUEUE];
            m->len = wc[i].byte_len;
            memcpy(m->buf, e->rx + (size_t)i_rx * EV_CTRL, m->len);
            evil_post_rx(e, i_rx);
        }
    }
    return n;
}

/* The next message from the peer, skipping CREDITs; -RKV_EPEERDEAD when the
 * connection broke first. The caller owns *buf_p until the next call. */
static int evil_next(struct evil *e, struct rkv_msg *m)
{
    for (uint32_t waited = 0; waited < WAIT_MS;) {
        while (e->q_len) {
            struct rx_msg *r = &e->q[e->q_head];
            e->q_head = (e->q_head + 1) % EV_QUEUE;
            e->q_len--;
            char why[160];
            if (rkv_proto_decode(r->buf, r->len, m, why, sizeof(why)) < 0)
                fail_msg("the server sent a message its own decoder refuses: %s", why);
            if (m->h.type != RKV_MSG_CREDIT)
                return 0;
        }
        if (e->down)
            return -RKV_EPEERDEAD;
        if (evil_pump(e, 100) == 0)
            waited += 100;
    }
    fail_msg("no message and no disconnect within %u ms", WAIT_MS);
    return -RKV_ETIMEDOUT;
}

/* Waits until the connection broke. */
static void evil_expect_dropped(struct evil *e)
{
    struct rkv_msg m;
    int rc;
    while ((rc = evil_next(e, &m)) == 0)
        ; /* replies to earlier requests may still come first */
    assert_int_equal(rc, -RKV_EPEERDEAD);
}

/* SENDs tx[0..len) as it is (flow-control fields zero: no credits returned). */
static void evil_send(struct evil *e, size_t len)
{
    assert_true(len <= EV_CTRL);
    struct rkv_sge s = {.addr = e->tx, .len = (uint32_t)len, .mr = e->tx_mr};
    assert_int_equal(e->nd.nic->ops->post_send(e->qp, 1, &s, 0), 0);
}

static void evil_write(struct evil *e, uint64_t addr, uint32_t rkey, uint32_t len, int with_imm,
                       uint32_t imm)
{
    assert_true(len <= EV_TX);
    struct rkv_sge s = {.addr = e->tx, .len = len, .mr = e->tx_mr};
    /* The writer cannot know: the post itself succeeds. */
    assert_int_equal(e->nd.nic->ops->post_write(e->qp, 2, &s, addr, rkey, with_imm, imm, 0), 0);
}

static void evil_close(struct evil *e)
{
    struct rkv_nic *n = e->nd.nic;
    if (e->qp)
        n->ops->qp_close(e->qp);
    n->ops->dereg_mr(n, e->rx_mr);
    n->ops->dereg_mr(n, e->tx_mr);
    node_close(&e->nd);
    free(e->rx);
    free(e->tx);
    free(e->q);
}

/* Encodes a PUSH of `count` ids (only the first `real` present) into tx. */
static size_t enc_push(struct evil *e, uint32_t tensor, uint32_t count, uint32_t row_bytes,
                       const uint64_t *ids)
{
    struct rkv_hdr h = {.type = RKV_MSG_PUSH,
                        .req_id = 0x77,
                        .tensor_id = tensor,
                        .sender = 0x666,
                        .count = count,
                        .row_bytes = row_bytes};
    size_t len = rkv_proto_enc_push(e->tx, &h, ids, NULL);
    memset(e->tx + RKV_PROTO_HDR_BYTES + (size_t)count * 8, 0, (size_t)count * row_bytes);
    return len;
}

/* Sends one request and returns its reply's status (0 for an ACK). */
static int evil_request(struct evil *e, size_t len, int want_type)
{
    evil_send(e, len);
    struct rkv_msg m;
    int rc = evil_next(e, &m);
    if (rc < 0)
        return rc;
    assert_int_equal(m.h.req_id, 0x77);
    if (m.h.type == RKV_MSG_ERROR) {
        assert_true(m.h.status < 0);
        return m.h.status;
    }
    assert_int_equal(m.h.type, want_type);
    return 0;
}

/* ---- 1: bad requests, well-formed or not ---- */

struct bad_req {
    const char *what;
    uint32_t tensor, row_bytes;
    uint64_t id;
    int want;           /* the reply's status */
    const char *logged; /* the rejection's log line */
};

/* The client adds context to the error it holds, formatting into the
 * buffer it reads from: a twin run whose worker gave up on a dead server
 * said "push: machine 1 still unreachable after retrying for 5000 ms (1
 * attempts): push: machine 1 still unreachable after ... (1 attempts): died". */
static void test_errf_into_its_own_argument(void **state)
{
    (void)state;
    char err[256] = "died";
    assert_int_equal(rkv_errf(err, sizeof(err), -RKV_EPEERDEAD, "push: machine %u: %s", 1u, err),
                     -RKV_EPEERDEAD);
    assert_string_equal(err, "push: machine 1: died");
    char small[8] = "abc";
    rkv_errf(small, sizeof(small), -RKV_EIO, "x: %s: longer", small);
    assert_string_equal(small, "x: abc:");
}

static void test_bad_requests(void **state)
{
    struct env *env = *state;
    struct cluster c;
    cluster_start(&c, env, 2, 2);
    cluster_join(&c, env);
    cluster_tensors(&c);
    check_serving(&c, 1);
    struct logcap *log = &c.srv_node[1].log;
    struct evil e;
    evil_open(&e, env);
    evil_connect(&e, &c.machines[1]);
    /* Named errors on a connection that stays up. */
    const struct bad_req reqs[] = {
        {"unknown tensor", 999, SMALL_ROW_BYTES, 60, -RKV_ENOTENSOR, "unknown tensor id 999"},
        {"tensor id 0", 0, SMALL_ROW_BYTES, 60, -RKV_ENOTENSOR, "unknown tensor id 0"},
        {"tensor id past the table", 0xffffffffu, SMALL_ROW_BYTES, 60, -RKV_ENOTENSOR,
         "unknown tensor id 4294967295"},
        {"wrong row size", SMALL_ID, 12, 60, -RKV_EDTYPE, "request has 12"},
        {"row size of another dtype", SMALL_ID, 32, 60, -RKV_EDTYPE, "request has 32"},
        {"row id past the rows", SMALL_ID, SMALL_ROW_BYTES, 100, -RKV_ERANGE, "row id 100"},
        {"row id 2^64-1", SMALL_ID, SMALL_ROW_BYTES, UINT64_MAX, -RKV_ERANGE,
         "row id 18446744073709551615"},
        {"row id of machine 0", SMALL_ID, SMALL_ROW_BYTES, 10, -RKV_ERANGE,
         "row 10 belongs to machine 0"},
    };
    for (size_t i = 0; i < sizeof(reqs) / sizeof(reqs[0]); i++) {
        const struct bad_req *r = &reqs[i];
        printf("bad request: %s\n", r->what);
        logcap_reset(log);
        size_t len = enc_push(&e, r->tensor, 1, r->row_bytes, &r->id);
        assert_int_equal(evil_request(&e, len, RKV_MSG_PUSH_ACK), r->want);
        expect_logged_once(log, r->logged, "rejecting PUSH");
        /* The same mistakes in a PULL (its reply slot is never used). */
        logcap_reset(log);
        struct rkv_hdr h = {.type = RKV_MSG_PULL,
                            .req_id = 0x77,
                            .tensor_id = r->tensor,
                            .count = 1,
                            .row_bytes = r->row_bytes};
        struct rkv_slot_desc nowhere = {.addr = 64, .rkey = 1, .cap = 1 << 20};
        len = rkv_proto_enc_pull(e.tx, &h, &nowhere, &r->id);
        assert_int_equal(evil_request(&e, len, RKV_MSG_PULL_REPLY), r->want);
        expect_logged_once(log, r->logged, "rejecting PULL");
    }
    /* A pull whose reply would not fit the slot it offers. */
    logcap_reset(log);
    uint64_t ids[64];
    for (int i = 0; i < 64; i++)
        ids[i] = 50 + (uint64_t)i % 50;
    struct rkv_hdr h = {.type = RKV_MSG_PULL,
                        .req_id = 0x77,
                        .tensor_id = SMALL_ID,
                        .count = 64,
                        .row_bytes = SMALL_ROW_BYTES};
    struct rkv_slot_desc tiny = {.addr = 64, .rkey = 1, .cap = 128};
    size_t len = rkv_proto_enc_pull(e.tx, &h, &tiny, ids);
    assert_int_equal(evil_request(&e, len, RKV_MSG_PULL_REPLY), -RKV_ELIMIT);
    expect_logged_once(log, "reply larger than the offered slot", "rejecting PULL");
    /* The good request on the same connection still works. */
    uint64_t good = 60;
    len = enc_push(&e, SMALL_ID, 1, SMALL_ROW_BYTES, &good);
    assert_int_equal(evil_request(&e, len, RKV_MSG_PUSH_ACK), 0);
    evil_close(&e);
    check_serving(&c, 2);

    /* Malformed messages: the server's decoder refuses them and closes only
     * that connection, once each. */
    const struct malformed {
        const char *what;
        uint32_t count, row_bytes; /* header fields */
        uint64_t payload_len;      /* header field */
        size_t send_len;           /* bytes actually sent */
        const char *logged;
    } mal[] = {
        /* (2^27 + 1) x (8 + 24) = 2^32 + 32: in 32 bits the body of one id
         * and one row, which is what payload_len says and what is sent. */
        {"count whose size wraps 32 bits", (1u << 27) + 1, 24, 32, 96,
         "count 134217729, row_bytes 24 needs 4294967328"},
        {"count x row_bytes near 2^62", 0xffffffffu, 1u << 30, 24, 88, "needs 4611686"},
        {"row_bytes past the limit", 1, 0xffffffffu, 24, 88, "row_bytes 4294967295 outside"},
        {"payload_len short of count", 2, 16, 24, 88, "count 2, row_bytes 16 needs 48"},
        {"payload_len past the message", 1, 16, 4096, 88, "payload_len 4096"},
        {"payload_len 2^64-1", 1, 16, UINT64_MAX, 88, "payload_len 18446744073709551615"},
        {"bytes after payload_len", 1, 16, 24, 200, "does not match buffer"},
    };
    for (size_t i = 0; i < sizeof(mal) / sizeof(mal[0]); i++) {
        const struct malformed *b = &mal[i];
        printf("malformed: %s\n", b->what);
        logcap_reset(log);
        evil_open(&e, env);
        evil_connect(&e, &c.machines[1]);
        enc_push(&e, SMALL_ID, 1, SMALL_ROW_BYTES, &good);
        memcpy(e.tx + 24, &b->count, 4);
        memcpy(e.tx + 28, &b->row_bytes, 4);
        memcpy(e.tx + 48, &b->payload_len, 8);
        evil_send(&e, b->send_len);
        evil_expect_dropped(&e);
        evil_close(&e);
        expect_logged_once(log, b->logged, "closing connection after malformed message");
        check_serving(&c, 10 + (int)i);
    }
    cluster_stop(&c);
}

/* ---- 2: writes outside a granted slot ---- */

#define BIG_ID 2u
#define BIG_PUSH_BYTES (RKV_PROTO_HDR_BYTES + 8 + BIG_ROW_LEN * 4)

/* Asks for n slots of `bytes` each, for PUSHes of tensors 100.., without
 * waiting for the answers (a hoarder). */
static void evil_ask_slots(struct evil *e, uint32_t n, uint64_t bytes)
{
    for (uint32_t i = 0; i < n; i++) {
        struct rkv_hdr h = {.type = RKV_MSG_RNDV_START,
                            .req_id = 0x100 + i,
                            .tensor_id = 100 + i,
                            .sender = 0x666,
                            .op = RKV_MSG_PUSH};
        evil_send(e, rkv_proto_enc_rndv_start(e->tx, &h, bytes));
    }
}

/* A slot for a big-row PUSH of `bytes`, granted by the server. */
static struct rkv_slot_desc evil_rendezvous_for(struct evil *e, uint64_t bytes)
{
    struct rkv_hdr h = {.type = RKV_MSG_RNDV_START,
                        .req_id = 0x77,
                        .tensor_id = BIG_ID,
                        .sender = 0x666,
                        .op = RKV_MSG_PUSH};
    evil_send(e, rkv_proto_enc_rndv_start(e->tx, &h, bytes));
    struct rkv_msg m;
    assert_int_equal(evil_next(e, &m), 0);
    assert_int_equal(m.h.type, RKV_MSG_RNDV_REPLY);
    assert_int_equal(m.h.status, 0);
    assert_true(m.u.slot.cap >= bytes);
    return m.u.slot;
}

static struct rkv_slot_desc evil_rendezvous(struct evil *e)
{
    return evil_rendezvous_for(e, BIG_PUSH_BYTES);
}

/* Encodes a good big-row PUSH of row 60 into tx. */
static size_t enc_big_push(struct evil *e)
{
    uint64_t id = 60;
    return enc_push(e, BIG_ID, 1, BIG_ROW_LEN * 4, &id);
}

/* A hoarder: asks the server for slots of max_slot_bytes each, as many as
 * the credits it never returns allow, under distinct keys, and neither
 * uses them nor gives them back when asked. The slots a node grants are
 * bounded all together (slot_mem_bytes), where push_slots x max_slot_bytes
 * per connection (64 GiB with the defaults) was allocated, and pinned on
 * verbs, for one peer's asking; the well-behaved client's ask waits while
 * the server asks for slots back, and the hoarder, which keeps them past
 * the grace (a quarter of the request timeout), is dropped. */
static void test_slot_memory_hoard(void **state)
{
    struct env *env = *state;
    struct cluster c;
#if UNDER_TSAN || UNDER_ASAN
    /* A sanitizer's cost for a 1 GiB block grows with its size, in the
     * server's engine thread that serves the good client too.
     * ThreadSanitizer walks its metadata of every byte a free() returns:
     * the four 1 GiB slots of the default bound took it over 10 s to give
     * back at the hoarder's close. AddressSanitizer writes the block's
     * 128 MiB of shadow at each allocation and free: 0.6-0.7 s each on an
     * idle host (perf: memset under AsanMapUnmapCallback::OnMap and
     * QuarantineChunk), past the good client's 10 s timeout in CI's loaded
     * run. The same attack on a smaller bound. */
    env->max_slot_bytes = 64ull << 20;
    env->slot_mem_bytes = 4 * env->max_slot_bytes;
#endif
    cluster_start(&c, env, 2, 2);
    env->max_slot_bytes = env->slot_mem_bytes = 0;
    cluster_join(&c, env);
    cluster_tensors(&c);
    struct logcap *log = &c.srv_node[1].log;
    logcap_reset(log);
    /* The default bound, as the server's port sizes it from this host. */
    struct rkv_port *sp = c.srv_node[1].port;
    const uint64_t bound =
        rkv_cfg_slot_mem(&c.cfg, sp->ops->mem_bytes ? sp->ops->mem_bytes(sp) : 0);
    struct evil e;
    evil_open(&e, env);
    evil_connect(&e, &c.machines[1]);
    const uint32_t asks = c.cfg.push_slots / 2;
    evil_ask_slots(&e, asks, c.cfg.max_slot_bytes);
    /* Every ask is answered but one that waits for memory, while the
     * server asks for one of the hoarder's slots back. */
    uint64_t granted = 0;
    uint32_t answered = 0, refused = 0, revokes = 0;
    while (answered < asks && !(answered == asks - 1 && revokes > 0)) {
        struct rkv_msg m;
        assert_int_equal(evil_next(&e, &m), 0);
        if (m.h.type == RKV_MSG_RNDV_REVOKE) {
            revokes++;
            continue;
        }
        assert_int_equal(m.h.type, RKV_MSG_RNDV_REPLY);
        answered++;
        if (m.h.status == 0) {
            granted += m.u.slot.cap;
        } else {
            /* verbs may refuse to pin before the bound: ENOMEM */
            assert_true(m.h.status == -RKV_ELIMIT || m.h.status == -RKV_ENOMEM);
            refused++;
        }
    }
    printf("slot hoard: %llu bytes granted, %u of %u refused, %u asked back (bound %llu)\n",
           (unsigned long long)granted, refused, asks, revokes, (unsigned long long)bound);
    assert_true(granted <= bound);
    assert_true(refused >= asks - 1 - bound / c.cfg.max_slot_bytes);
    /* The others are served: their slots wait for the hoarder's memory,
     * which comes back when it is dropped. */
    check_serving(&c, 1);
    if (revokes > 0) { /* tcp; verbs may have refused to pin before the bound */
        evil_expect_dropped(&e);
        assert_true(logcap_count(log, "after it was asked for it back; dropping it") == 1);
    }
    evil_close(&e);
    check_serving(&c, 2);
    cluster_stop(&c);
}

/* A hoarder that keeps writing into the slots it was asked to give back:
 * each message restarted the grace, so it held the slot memory for good
 * while the others' pushes waited for it and timed out (an outside tester:
 * 4 x 16 MiB of 64 held 25 s with a message every 300 ms). One message may
 * come after the ask (the one in flight); later ones do not extend it. */
static void test_slot_hoarder_that_keeps_writing(void **state)
{
    struct env *env = *state;
    env->max_slot_bytes = 1u << 20;
    env->slot_mem_bytes = 4 * env->max_slot_bytes;
    struct cluster c;
    cluster_start(&c, env, 2, 2);
    env->max_slot_bytes = env->slot_mem_bytes = 0;
    cluster_join(&c, env);
    cluster_tensors(&c);
    struct evil e;
    evil_open(&e, env);
    evil_connect(&e, &c.machines[1]);
    enum { ASKS = 5 };
    struct rkv_slot_desc d[ASKS];
    uint32_t n_d = 0, revoked = UINT32_MAX;
    evil_ask_slots(&e, ASKS, c.cfg.max_slot_bytes);
    /* Four granted; the fifth waits, and one of the four is asked back. */
    while (n_d < ASKS - 1 || revoked == UINT32_MAX) {
        struct rkv_msg m;
        assert_int_equal(evil_next(&e, &m), 0);
        if (m.h.type == RKV_MSG_RNDV_REVOKE) {
            revoked = m.h.count;
            continue;
        }
        assert_int_equal(m.h.type, RKV_MSG_RNDV_REPLY);
        assert_int_equal(m.h.status, 0);
        d[n_d++] = m.u.slot;
    }
    const struct rkv_slot_desc *rd = NULL;
    for (uint32_t i = 0; i < n_d; i++)
        if (d[i].slot == revoked)
            rd = &d[i];
    assert_non_null(rd);
    /* A harmless message into the slot every 100 ms, for up to four graces. */
    const uint32_t grace_ms = c.cfg.timeout_ms / 4;
    uint32_t waited = 0;
    for (; waited < 4 * grace_ms && !e.down; waited += 100) {
        struct rkv_hdr h = {.type = RKV_MSG_CREDIT, .sender = 0x666};
        size_t len = rkv_proto_enc_empty(e.tx, &h);
        struct rkv_sge sg = {.addr = e.tx, .len = (uint32_t)len, .mr = e.tx_mr};
        if (e.nd.nic->ops->post_write(e.qp, 2, &sg, rd->addr, rd->rkey, 1, rd->slot, 0) < 0)
            break;
        evil_pump(&e, 100);
    }
    printf("hoarder that keeps writing: dropped after %u ms of writing (grace %u ms)\n", waited,
           grace_ms);
    /* While it still wrote: once it stops, the grace runs out anyway. */
    if (!e.down)
        fail_msg("the hoarder wrote into a slot asked back for %u ms and was not dropped", waited);
    assert_int_equal(
        logcap_count(&c.srv_node[1].log, "after it was asked for it back; dropping it"), 1);
    evil_close(&e);
    check_serving(&c, 3);
    cluster_stop(&c);
}

enum slot_attack {
    ATK_PAST_END,  /* starts inside the slot, ends past it */
    ATK_BEFORE,    /* ends inside the slot, starts before it */
    ATK_WRAP,      /* addr + len wraps around 2^64 */
    ATK_RKEY,      /* right address, unknown rkey */
    ATK_IMM_OTHER, /* good bytes, but the immediate names a slot never granted */
    ATK_IMM_HUGE,  /* the immediate is 2^32-1 */
    ATK_GARBAGE,   /* the right slot and immediate, but the bytes are no message */
};

static void slot_attack(struct evil *e, const struct rkv_slot_desc *d, enum slot_attack a)
{
    size_t len = enc_big_push(e);
    switch (a) {
    case ATK_PAST_END:
        return evil_write(e, d->addr + d->cap - 64, d->rkey, 4096, 1, d->slot);
    case ATK_BEFORE:
        return evil_write(e, d->addr - 64, d->rkey, 4096, 0, 0);
    case ATK_WRAP:
        return evil_write(e, UINT64_MAX - 63, d->rkey, 4096, 1, d->slot);
    case ATK_RKEY:
        return evil_write(e, d->addr, d->rkey ^ 0x5a5a0000u, (uint32_t)len, 1, d->slot);
    case ATK_IMM_OTHER:
        return evil_write(e, d->addr, d->rkey, (uint32_t)len, 1, d->slot + 1);
    case ATK_IMM_HUGE:
        return evil_write(e, d->addr, d->rkey, (uint32_t)len, 1, UINT32_MAX);
    case ATK_GARBAGE:
        for (size_t i = 0; i < len; i++)
            e->tx[i] = (uint8_t)(i * 37 + 11);
        return evil_write(e, d->addr, d->rkey, (uint32_t)len, 1, d->slot);
    }
}

static void test_slot_abuse(void **state)
{
    struct env *env = *state;
    struct cluster c;
    cluster_start(&c, env, 2, 2);
    cluster_join(&c, env);
    cluster_tensors(&c);
    struct logcap *log = &c.srv_node[1].log;
    /* The attack works like an honest engine until it writes: a good write
     * into the granted slot is applied and acknowledged. */
    struct evil e;
    evil_open(&e, env);
    evil_connect(&e, &c.machines[1]);
    struct rkv_slot_desc d = evil_rendezvous(&e);
    size_t len = enc_big_push(&e);
    evil_write(&e, d.addr, d.rkey, (uint32_t)len, 1, d.slot);
    struct rkv_msg m;
    assert_int_equal(evil_next(&e, &m), 0);
    assert_int_equal(m.h.type, RKV_MSG_PUSH_ACK);
    assert_int_equal(m.h.release, d.slot + 1); /* the ack gives the slot back */
    evil_close(&e);
    check_serving(&c, 1);
    const struct {
        enum slot_attack a;
        const char *what, *logged, *kind;
    } atk[] = {
        {ATK_PAST_END, "write past the slot", NULL, "dropping the connection with"},
        {ATK_BEFORE, "write before the slot", NULL, "dropping the connection with"},
        {ATK_WRAP, "write whose length wraps", NULL, "dropping the connection with"},
        {ATK_RKEY, "write with an unknown rkey", NULL, "dropping the connection with"},
        {ATK_IMM_OTHER, "immediate naming a slot not granted", "names no slot of ours",
         "closing connection after malformed message"},
        {ATK_IMM_HUGE, "immediate 2^32-1", "names no slot of ours",
         "closing connection after malformed message"},
        {ATK_GARBAGE, "garbage in the slot", "magic", "closing connection after malformed message"},
    };
    for (size_t i = 0; i < sizeof(atk) / sizeof(atk[0]); i++) {
        printf("slot attack: %s\n", atk[i].what);
        evil_open(&e, env);
        evil_connect(&e, &c.machines[1]);
        d = evil_rendezvous(&e);
        logcap_reset(log);
        slot_attack(&e, &d, atk[i].a);
        evil_expect_dropped(&e);
        if (atk[i].logged || strcmp(env->backend, "verbs") != 0) {
            expect_logged_once(log, atk[i].logged, atk[i].kind);
        } else {
            /* verbs: the device refuses the write, and only the writer learns
             * why; the target sees its peer go, which it logs once. */
            expect_logged_once(&e.nd.log, "remote access error", atk[i].kind);
            expect_logged_once(log, NULL, "a peer disconnected");
            assert_int_equal(logcap_count(log, " L1 ") + logcap_count(log, " L0 "), 0);
        }
        evil_close(&e);
        check_serving(&c, 10 + (int)i);
    }
    cluster_stop(&c);
}

/* A message written in pieces completes with its header, whose length is
 * believed: a peer that wrote 72 bytes and claimed a 16 KiB row was given
 * the slot's earlier bytes as its row, heap memory freed by others'
 * requests (an outside tester pulled a worker's pushed ids and values back
 * out of it). A slot is zeroed when made: the row comes back zero. glibc
 * fills every allocation with 0xa5 here (M_PERTURB), so that without it
 * the row holds what malloc left, whatever ran before. */
static void test_slot_holds_only_what_was_written(void **state)
{
    struct env *env = *state;
    struct cluster c;
    cluster_start(&c, env, 2, 2);
    cluster_join(&c, env);
    cluster_tensors(&c);
    check_serving(&c, 1); /* row 60 of the big tensor is not zero */
    mallopt(M_PERTURB, 0x5a);
    struct evil e;
    evil_open(&e, env);
    evil_connect(&e, &c.machines[1]);
    struct rkv_slot_desc d = evil_rendezvous(&e);
    mallopt(M_PERTURB, 0);
    (void)enc_big_push(&e); /* an ASSIGN of row 60: its header and id only are written */
    evil_write(&e, d.addr, d.rkey, RKV_PROTO_HDR_BYTES + 8, 1, d.slot);
    struct rkv_msg m;
    assert_int_equal(evil_next(&e, &m), 0);
    assert_int_equal(m.h.type, RKV_MSG_PUSH_ACK);
    evil_close(&e);
    static float got[BIG_ROW_LEN], zero[BIG_ROW_LEN];
    uint64_t id = 60;
    assert_int_equal(rkv_client_pull(c.cli, T_BIG.name, &id, 1, got), 0);
    assert_memory_equal(got, zero, sizeof(got));
    check_serving(&c, 2);
    cluster_stop(&c);
}

/* Another peer's slot: b learned (or guessed) the address, rkey and id of
 * the slot the server granted a. The slot is granted to a's connection
 * alone (nic.h mr_grant: a memory window bound to its QP on verbs, the
 * connection named in the region on tcp): b's write is a remote access
 * error that drops b, and nothing lands. On tcp it landed until this round
 * (an outside tester had a victim's acknowledged ASSIGN apply its rows). */
static void test_cross_peer_slot(void **state)
{
    struct env *env = *state;
    struct cluster c;
    cluster_start(&c, env, 2, 2);
    cluster_join(&c, env);
    cluster_tensors(&c);
    struct evil a, b;
    evil_open(&a, env);
    evil_connect(&a, &c.machines[1]);
    evil_open(&b, env);
    evil_connect(&b, &c.machines[1]);
    struct rkv_slot_desc d = evil_rendezvous(&a);
    size_t len = enc_big_push(&b);
    evil_write(&b, d.addr, d.rkey, (uint32_t)len, 0, 0); /* no immediate: silent if it lands */
    evil_expect_dropped(&b);
    /* verbs: the writer's NIC learns why (a NAK); tcp: the server says it. */
    int verbs = strcmp(env->backend, "verbs") == 0;
    expect_logged_once(verbs ? &b.nd.log : &c.srv_node[1].log, "remote access error",
                       "dropping the connection with");
    evil_close(&b);
    /* a's grant still works on a's connection: its push is applied. */
    len = enc_big_push(&a);
    evil_write(&a, d.addr, d.rkey, (uint32_t)len, 1, d.slot);
    struct rkv_msg m;
    assert_int_equal(evil_next(&a, &m), 0);
    assert_int_equal(m.h.type, RKV_MSG_PUSH_ACK);
    evil_close(&a);
    check_serving(&c, 30);
    cluster_stop(&c);
}

/* The gate of slot_rewritten_while_handled's custom op: its first row
 * waits until the test opens it; every row gets the first element of its
 * input added. */
static atomic_int gate_entered, gate_open;

static void h_gated_add(enum rkv_dtype dt, void *row, void *st, const void *in, size_t n,
                        double param, void *user)
{
    (void)dt, (void)st, (void)n, (void)param, (void)user;
    if (!atomic_exchange(&gate_entered, 1))
        for (int ms = 0; ms < (int)WAIT_MS && !atomic_load(&gate_open); ms++)
            usleep(1000);
    ((float *)row)[0] += ((const float *)in)[0];
}

/* A peer rewrites its PUSH in the slot while the server applies it. The
 * slot stays open to its WRITEs meanwhile (tcp lands them once the engine
 * has been away from the NIC 10 ms; a verbs device at any time).
 * - ids (durable 0): the server checked the ids, then read each again to
 *   apply its row, so an id rewritten past the shard made it write
 *   outside it (SIGSEGV), and a pull's read back memory before it. Here
 *   the second id goes from 61 to 62 (both machine 1's: without the fix
 *   row 62 got the add in silence, where an id past the shard would crash
 *   the test).
 * - rows (durable 1): the log read the rows for the record's CRC, for its
 *   write and for the apply: a row rewritten between two of them made a
 *   record that reads as torn (every later acknowledged push lost at the
 *   next restart), or one that differs from what was applied. Here the
 *   second row's value goes from 1 to 99 after the first was logged:
 *   without the fix 99 was applied and 1 logged.
 * Now both are the server's own copies: the rewrite is not seen. */
static void slot_rewritten_while_handled(struct env *env, int durable)
{
    char dir[64] = "";
    if (durable) {
        snprintf(env->durable_dir, sizeof(env->durable_dir), "/tmp/rkvh-dur-XXXXXX");
        assert_non_null(mkdtemp(env->durable_dir));
        snprintf(dir, sizeof(dir), "%s", env->durable_dir);
    }
    struct cluster c;
    cluster_start(&c, env, 2, 2);
    env->durable_dir[0] = 0;
    cluster_join(&c, env);
    cluster_tensors(&c);
    atomic_store(&gate_entered, 0);
    atomic_store(&gate_open, 0);
    assert_int_equal(rkv_server_register_handler(c.srv[1], RKV_OP_CUSTOM, h_gated_add, NULL), 0);
    struct evil e;
    evil_open(&e, env);
    evil_connect(&e, &c.machines[1]);
    const uint32_t rb = BIG_ROW_LEN * 4;
    struct rkv_slot_desc d = evil_rendezvous_for(&e, RKV_PROTO_HDR_BYTES + 2 * (8 + rb));
    struct rkv_msg m;
    uint64_t ids[2] = {60, 61};
    struct rkv_hdr ph = {.type = RKV_MSG_PUSH,
                         .req_id = 0x77,
                         .tensor_id = BIG_ID,
                         .sender = 0x666,
                         .op = RKV_OP_CUSTOM,
                         .count = 2,
                         .row_bytes = rb};
    size_t len = rkv_proto_enc_push(e.tx, &ph, ids, NULL);
    float *rows = (float *)(void *)(e.tx + RKV_PROTO_HDR_BYTES + sizeof(ids));
    memset(rows, 0, 2 * (size_t)rb);
    rows[0] = rows[BIG_ROW_LEN] = 1.0f;
    evil_write(&e, d.addr, d.rkey, (uint32_t)len, 1, d.slot);
    for (int ms = 0; ms < (int)WAIT_MS && !atomic_load(&gate_entered); ms++)
        usleep(1000);
    assert_true(atomic_load(&gate_entered));
    /* The handler holds row 60; the second id becomes 62 (or the second
     * row's first value 99) in the slot. */
    uint64_t rewritten = 62;
    float rewritten_row = 99.0f;
    const uint64_t at = durable ? d.addr + RKV_PROTO_HDR_BYTES + sizeof(ids) + rb
                                : d.addr + RKV_PROTO_HDR_BYTES + 8;
    if (durable)
        memcpy(e.tx, &rewritten_row, sizeof(rewritten_row));
    else
        memcpy(e.tx, &rewritten, sizeof(rewritten));
    evil_write(&e, at, d.rkey, durable ? 4 : 8, 0, 0);
#if UNDER_TSAN
    /* The slot is this process's memory, but reading it while the
     * server's NIC thread writes it is a race by ThreadSanitizer's rules:
     * a while for the write to land instead (without the fix the test may
     * then pass without having shown anything). */
    usleep(300 * 1000);
#else
    /* The server's slot is this process's memory: the test sees it land. */
    volatile const uint8_t *landed = (const uint8_t *)(uintptr_t)at;
    for (int ms = 0; ms < (int)WAIT_MS && memcmp((const void *)landed, e.tx, durable ? 4 : 8); ms++)
        usleep(1000);
    assert_memory_equal((const void *)landed, e.tx, durable ? 4 : 8);
#endif
    atomic_store(&gate_open, 1);
    assert_int_equal(evil_next(&e, &m), 0);
    assert_int_equal(m.h.type, RKV_MSG_PUSH_ACK);
    evil_close(&e);
    static float got[2 * BIG_ROW_LEN];
    uint64_t want[2] = {61, 62};
    assert_int_equal(rkv_client_pull(c.cli, T_BIG.name, want, 2, got), 0);
    if (got[0] != 1.0f || got[BIG_ROW_LEN] != 0.0f)
        fail_msg("row 61 holds %g and row 62 %g: the rewritten %s was applied", got[0],
                 got[BIG_ROW_LEN], durable ? "row" : "id");
    check_serving(&c, 40);
    cluster_stop(&c);
    if (durable) {
        char cmd[96];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        assert_int_equal(system(cmd), 0);
    }
}

static void test_slot_rewritten_while_handled(void **state)
{
    slot_rewritten_while_handled(*state, 0);
}

static void test_slot_rewritten_while_logged(void **state)
{
    slot_rewritten_while_handled(*state, 1);
}

/* ---- 3: a rendezvous answered with a slot outside any region ---- */

/* A bad slot: an address no region covers and a key nobody issued. */
static const struct rkv_slot_desc NOWHERE = {.addr = 0x1000, .rkey = 0x0badbeefu, .cap = 1u << 20};

/* The honest side here writes: it must drop only that connection, with the
 * remote access error named where the backend can know it. */
static void expect_write_refused_logged(const struct env *env, struct logcap *log,
                                        const char *tcp_line)
{
    if (strcmp(env->backend, "verbs") == 0)
        expect_logged_once(log, "remote access error", "dropping the connection with");
    else /* tcp: the writer learns it only as the target closing on it */
        expect_logged_once(log, NULL, tcp_line);
}

/* A hostile client hands out a reply slot, or for a zero-copy pull a
 * target buffer, that points at nothing: the server's WRITE of the rows
 * fails (k = 2, 3: small rows staged, big rows sent from the shard). */
static void test_pull_reply_to_nowhere(void **state)
{
    struct env *env = *state;
    struct cluster c;
    cluster_start(&c, env, 2, 2);
    cluster_join(&c, env);
    cluster_tensors(&c);
    struct logcap *log = &c.srv_node[1].log;
    for (int k = 0; k < 4; k++) {
        struct evil e;
        evil_open(&e, env);
        evil_connect(&e, &c.machines[1]);
        logcap_reset(log);
        uint64_t id = 60;
        struct rkv_hdr h = {.type = RKV_MSG_PULL,
                            .req_id = 0x77,
                            .tensor_id = k % 2 == 0 ? SMALL_ID : BIG_ID,
                            .count = 1,
                            .row_bytes = k % 2 == 0 ? SMALL_ROW_BYTES : BIG_ROW_LEN * 4};
        if (k < 2) {
            evil_send(&e, rkv_proto_enc_pull(e.tx, &h, &NOWHERE, &id));
        } else {
            uint32_t pos = 0;
            struct rkv_slot_desc dst = {.addr = NOWHERE.addr, .rkey = NOWHERE.rkey, .cap = 1 << 20};
            h.type = RKV_MSG_PULL_ZC;
            evil_send(&e, rkv_proto_enc_pull_zc(e.tx, &h, &dst, &id, &pos));
        }
        evil_expect_dropped(&e);
        assert_int_equal(e.n_imm, 0);
        evil_close(&e);
        check_serving(&c, 1 + k);
        expect_write_refused_logged(env, log, "a peer disconnected");
    }
    cluster_stop(&c);
}

/* A hostile server (machine 2 of three) that accepts the client, its INIT,
 * and answers every rendezvous with a slot pointing at nothing. */
struct evil_server {
    struct evil e;
    pthread_t thr;
    atomic_int stop; /* written once by the test thread, read by the server's */
    uint32_t n_rndv;
    uint32_t hello_id;      /* nonzero: the client id every HELLO_REPLY gives */
    uint32_t as_server;     /* the server it plays: its messages' sender (a HELLO_REPLY's is
                             * checked) */
    uint32_t push_delay_ms; /* each PUSH_ACK sent this late */
    /* Nonzero: each PUSH is first answered for the ids around it with an
     * ERROR carrying this text, as if those requests had been ours. */
    const char *forge;
    uint32_t init_id_off;        /* added to the tensor id each INIT_REPLY gives */
    _Atomic uint64_t last_push;  /* the last PUSH's request id (its sequence) */
    _Atomic uint64_t last_nonce; /* the last HELLO's nonce */
};

static void evil_reply(struct evil *e, const struct rkv_msg *m, uint32_t sender)
{
    struct rkv_hdr h = {.req_id = m->h.req_id, .tensor_id = m->h.tensor_id, .sender = sender};
    switch (m->h.type) {
    case RKV_MSG_HELLO:
        h.type = RKV_MSG_HELLO_REPLY;
        {
            struct rkv_wire_hello_reply r = {.client_id = m->u.hello.want_id,
                                             .n_workers = 1,
                                             .rx_depth = EV_RX,
                                             .n_servers = 3,
                                             .ctrl_buf_bytes = EV_CTRL,
                                             .push_slots = 64};
            return evil_send(e, rkv_proto_enc_hello_reply(e->tx, &h, &r));
        }
    case RKV_MSG_INIT:
        h.type = RKV_MSG_INIT_REPLY;
        return evil_send(e, rkv_proto_enc_empty(e->tx, &h));
    case RKV_MSG_RNDV_START:
        h.type = RKV_MSG_RNDV_REPLY;
        h.op = m->h.op;
        return evil_send(e, rkv_proto_enc_slot(e->tx, &h, &NOWHERE));
    case RKV_MSG_PUSH:
        h.type = RKV_MSG_PUSH_ACK;
        return evil_send(e, rkv_proto_enc_empty(e->tx, &h));
    case RKV_MSG_SHUTDOWN:
        h.type = RKV_MSG_SHUTDOWN_ACK;
        return evil_send(e, rkv_proto_enc_empty(e->tx, &h));
    default:
        return;
    }
}

static void *evil_server_main(void *arg)
{
    struct evil_server *es = arg;
    struct evil *e = &es->e;
    while (!atomic_load(&es->stop)) {
        evil_pump(e, 50);
        while (e->q_len) {
            struct rx_msg *r = &e->q[e->q_head];
            e->q_head = (e->q_head + 1) % EV_QUEUE;
            e->q_len--;
            struct rkv_msg m;
            char why[160];
            if (rkv_proto_decode(r->buf, r->len, &m, why, sizeof(why)) < 0)
                continue;
            es->n_rndv += m.h.type == RKV_MSG_RNDV_START;
            if (m.h.type == RKV_MSG_PUSH)
                atomic_store(&es->last_push, m.h.req_id);
            if (m.h.type == RKV_MSG_HELLO)
                atomic_store(&es->last_nonce, m.u.hello.nonce);
            if (m.h.type == RKV_MSG_HELLO && es->hello_id)
                m.u.hello.want_id = es->hello_id;
            if (m.h.type == RKV_MSG_PUSH && es->forge && e->qp && !e->down)
                for (uint64_t id = m.h.req_id - 3; id <= m.h.req_id + 3; id++) {
                    if (id == m.h.req_id)
                        continue;
                    struct rkv_hdr h = {.type = RKV_MSG_ERROR, .req_id = id, .status = -RKV_EINVAL};
                    evil_send(e, rkv_proto_enc_error(e->tx, EV_CTRL, &h, es->forge));
                }
            if (m.h.type == RKV_MSG_PUSH && es->push_delay_ms)
                usleep(es->push_delay_ms * 1000u);
            if (m.h.type == RKV_MSG_INIT)
                m.h.tensor_id += es->init_id_off;
            if (e->qp && !e->down)
                evil_reply(e, &m, es->as_server);
        }
    }
    return NULL;
}

static void test_rendezvous_reply_to_nowhere(void **state)
{
    struct env *env = *state;
    struct cluster c;
    cluster_start(&c, env, 3, 2);
    struct evil_server es = {.as_server = 2};
    evil_open(&es.e, env);
    struct rkv_nic *n = es.e.nd.nic;
    if (n->ops->listen(n, c.machines[2].host, c.machines[2].base_port) < 0)
        fail_msg("the hostile server cannot listen on %s:%u", c.machines[2].host,
                 c.machines[2].base_port);
    assert_int_equal(pthread_create(&es.thr, NULL, evil_server_main, &es), 0);
    cluster_join(&c, env);
    cluster_tensors(&c);
    check_serving(&c, 1);
    struct logcap *log = &c.cli_node.log;
    logcap_reset(log);
    /* Rows 70 and 80 live on the hostile machine, 40 on machine 1. */
    static float rows[3 * BIG_ROW_LEN];
    uint64_t ids[3] = {70, 40, 80};
    int rc = rkv_client_push(c.cli, "big", ids, 3, rows, RKV_OP_ASSIGN, 0);
    printf("push through the bad slot: %s: %s\n", rkv_strerror(rc), rkv_client_errmsg(c.cli));
    assert_int_equal(rc, -RKV_EPEERDEAD);
    assert_non_null(strstr(rkv_client_errmsg(c.cli), "server 2"));
    assert_true(es.n_rndv >= 1);
    expect_write_refused_logged(env, log, "lost the connection to server 2");
    /* Only that connection went: machines 0 and 1 still serve. */
    check_serving(&c, 2);
    atomic_store(&es.stop, 1);
    pthread_join(es.thr, NULL);
    evil_close(&es.e);
    cluster_stop(&c);
}

/* A server (machine 2 of three, hostile, or an older build) that answers
 * an INIT with another tensor id than server 0 gave: init_data fails
 * naming it, retries or not. The check was undone by the retry path's
 * filter (a review). */
static void test_init_answered_with_another_id(void **state)
{
    struct env *env = *state;
    for (int retry = 0; retry < 2; retry++) {
        struct cluster c;
        cluster_start(&c, env, 3, 2);
        struct evil_server es = {.as_server = 2, .init_id_off = 5};
        evil_open(&es.e, env);
        struct rkv_nic *n = es.e.nd.nic;
        if (n->ops->listen(n, c.machines[2].host, c.machines[2].base_port) < 0)
            fail_msg("the hostile server cannot listen on %s:%u", c.machines[2].host,
                     c.machines[2].base_port);
        assert_int_equal(pthread_create(&es.thr, NULL, evil_server_main, &es), 0);
        c.cfg.retry_ms = retry ? 2000 : 0;
        cluster_join(&c, env);
        int rc = rkv_client_init_data(c.cli, &T_SMALL);
        printf("INIT answered with another id (retry_ms %u): %s\n", c.cfg.retry_ms,
               rkv_client_errmsg(c.cli));
        assert_int_equal(rc, -RKV_EPROTO);
        assert_non_null(strstr(rkv_client_errmsg(c.cli),
                               "server 2 answered with tensor id 6 where server 0 gave 1"));
        atomic_store(&es.stop, 1);
        pthread_join(es.thr, NULL);
        evil_close(&es.e);
        cluster_stop(&c);
    }
}

/* A hostile server 0 hands the joining client an id past num_workers: the
 * client refuses it, where it took it, and rkv_client_id() then named a
 * worker that does not exist (callers index per-worker arrays with it). */
static void test_client_id_past_workers(void **state)
{
    struct env *env = *state;
    struct cluster c;
    memset(&c, 0, sizeof(c));
    struct evil_server es = {.hello_id = 7};
    evil_open(&es.e, env);
    struct rkv_nic *n = es.e.nd.nic;
    for (int attempt = 0;; attempt++) {
        assert_true(attempt < 50);
        uint16_t base = env->next_port++;
        if (env->next_port > 18990)
            env->next_port = 10000;
        cluster_config(&c, env, 1, base);
        if (port_free(base) && n->ops->listen(n, c.machines[0].host, base) == 0)
            break;
    }
    assert_int_equal(pthread_create(&es.thr, NULL, evil_server_main, &es), 0);
    char err[256] = "";
    node_open(&c.cli_node, env, "w");
    c.cfg.connect_retry_ms = 0;
    int rc =
        rkv_client_create_on(c.cli_node.port, c.cli_node.nic, &c.cfg, &c.cli, err, sizeof(err));
    printf("client given id 7 of 1 worker: %s: %s\n", rkv_strerror(rc), err);
    if (rc == 0)
        rkv_client_destroy(c.cli);
    assert_int_equal(rc, -RKV_EPROTO);
    assert_non_null(strstr(err, "bad id 7"));
    node_close(&c.cli_node);
    atomic_store(&es.stop, 1);
    pthread_join(es.thr, NULL);
    evil_close(&es.e);
}

/* Request ids are one sequence for all of a client's servers, so a server
 * can guess the ids of requests sent to the others. Server 2 answers, for
 * the ids around each PUSH it gets, with an ERROR, while server 1 (also
 * hostile, but only slow) has not yet acknowledged its part of the same
 * push: the client took server 2's word for server 1's request, and the
 * push failed with server 2's text. Only the server asked may answer. */
static void test_reply_from_another_server(void **state)
{
    struct env *env = *state;
    struct cluster c;
    cluster_start(&c, env, 3, 1);
    struct evil_server slow = {.push_delay_ms = 500, .as_server = 1};
    struct evil_server liar = {.forge = "forged by server 2", .as_server = 2};
    struct evil_server *es[2] = {&slow, &liar};
    for (int k = 0; k < 2; k++) {
        evil_open(&es[k]->e, env);
        struct rkv_nic *n = es[k]->e.nd.nic;
        const struct rkv_machine *m = &c.machines[1 + k];
        if (n->ops->listen(n, m->host, m->base_port) < 0)
            fail_msg("a hostile server cannot listen on %s:%u", m->host, m->base_port);
        assert_int_equal(pthread_create(&es[k]->thr, NULL, evil_server_main, es[k]), 0);
    }
    cluster_join(&c, env);
    assert_int_equal(rkv_client_init_data(c.cli, &T_SMALL), 0);
    struct logcap *log = &c.cli_node.log;
    logcap_reset(log);
    /* Row 40 lives on server 1, 70 on server 2: one push, one request to each. */
    float rows[2 * 4] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint64_t ids[2] = {40, 70};
    int rc = rkv_client_push(c.cli, "small", ids, 2, rows, RKV_OP_ASSIGN, 0);
    printf("push with a forged answer for server 1's part: %s: %s\n", rkv_strerror(rc),
           rc < 0 ? rkv_client_errmsg(c.cli) : "");
    assert_int_equal(rc, 0);
    assert_true(logcap_count(log, "that request went to server 1") >= 1);
    assert_int_equal(logcap_count(log, "forged by server 2"), 0);
    /* Server 0, which is real, still serves. */
    uint64_t id0 = 3;
    float got[4];
    assert_int_equal(rkv_client_push(c.cli, "small", &id0, 1, rows, RKV_OP_ASSIGN, 0), 0);
    assert_int_equal(rkv_client_pull(c.cli, "small", &id0, 1, got), 0);
    assert_memory_equal(got, rows, sizeof(got));
    cluster_halt(&c);
    for (int k = 0; k < 2; k++) {
        atomic_store(&es[k]->stop, 1);
        pthread_join(es[k]->thr, NULL);
        evil_close(&es[k]->e);
    }
    cluster_free(&c);
}

/* A tensor with an explicit book of `rows` rows (alternating machines),
 * whose META_REPLY (the book, 4 bytes a row) is larger than a SEND. */
static void init_booked(struct cluster *c, const char *name, uint32_t rows)
{
    uint32_t *book = malloc((size_t)rows * sizeof(*book));
    assert_non_null(book);
    for (uint32_t r = 0; r < rows; r++)
        book[r] = r % 2;
    struct rkv_tensor_desc d = {
        .dtype = RKV_F32, .rows = rows, .row_len = 1, .policy = RKV_PART_EXPLICIT, .book = book};
    snprintf(d.name, sizeof(d.name), "%s", name);
    int rc = rkv_client_init_data(c->cli, &d);
    free(book);
    if (rc < 0)
        fail_msg("init %s: %s", name, rkv_client_errmsg(c->cli));
}

/* Replies held behind a rendezvous the peer does not answer are bounded
 * by bytes too: a peer that asked for META replies of a tensor with a big
 * book (16 MiB each there) and answered none of their RNDV_STARTs had
 * 1 GB held for it per connection, within the count (max_backlog). Here
 * 1 MiB replies against 8 MiB of slot memory: the peer is dropped by the
 * ninth, not after 258. */
#define HELD_BOOK_ROWS (1u << 18)
static void test_replies_held_behind_a_rendezvous(void **state)
{
    struct env *env = *state;
    struct cluster c;
    env->max_slot_bytes = 4ull << 20;
    env->slot_mem_bytes = 8ull << 20;
    cluster_start(&c, env, 2, 2);
    env->max_slot_bytes = env->slot_mem_bytes = 0;
    cluster_join(&c, env);
    cluster_tensors(&c);
    init_booked(&c, "booked-big", HELD_BOOK_ROWS);
    struct logcap *log = &c.srv_node[1].log;
    logcap_reset(log);
    struct evil e;
    evil_open(&e, env);
    evil_connect(&e, &c.machines[1]);
    for (uint64_t i = 0; i < 16; i++) {
        struct rkv_hdr h = {.type = RKV_MSG_META, .req_id = 0x100 + i, .sender = 0x666};
        evil_send(&e, rkv_proto_enc_meta(e.tx, &h, "booked-big"));
    }
    evil_expect_dropped(&e);
    evil_close(&e);
    expect_logged_once(log, "past slot_mem_bytes (8 MiB)",
                       "behind a rendezvous the peer does not answer");
    check_serving(&c, 1);
    cluster_stop(&c);
}

/* Replies waiting for credits are bounded in bytes too: a peer that spent
 * its credits and then asked for pulls into a destination of its own made
 * the server hold 258 of them, 64 MiB each (1.3 GB seen; an outside
 * tester). Past the slot memory (8 MiB here) it is dropped, at the third
 * reply of 3.2 MiB, not the 258th. */
#define HOARD_IDS 200
static void test_replies_held_for_credits_bounded_in_bytes(void **state)
{
    struct env *env = *state;
    struct cluster c;
    env->max_slot_bytes = 4ull << 20;
    env->slot_mem_bytes = 8ull << 20;
    cluster_start(&c, env, 2, 2);
    env->max_slot_bytes = env->slot_mem_bytes = 0;
    cluster_join(&c, env);
    cluster_tensors(&c);
    struct logcap *log = &c.srv_node[1].log;
    logcap_reset(log);
    struct evil e;
    evil_open(&e, env);
    evil_connect(&e, &c.machines[1]);
    /* Each answered with an ERROR (row 100 does not exist) that uses one of
     * its credits: none comes back. */
    uint64_t bad = 100;
    for (uint32_t i = 0; i < EV_RX; i++)
        evil_send(&e, enc_push(&e, SMALL_ID, 1, SMALL_ROW_BYTES, &bad));
    static uint64_t ids[HOARD_IDS];
    for (int i = 0; i < HOARD_IDS; i++)
        ids[i] = 60;
    struct rkv_slot_desc to = {.addr = NOWHERE.addr, .rkey = NOWHERE.rkey, .cap = 4u << 20};
    for (uint64_t j = 0; j < 8; j++) {
        struct rkv_hdr h = {.type = RKV_MSG_PULL,
                            .req_id = 0x200 + j,
                            .tensor_id = BIG_ID,
                            .count = HOARD_IDS,
                            .row_bytes = BIG_ROW_LEN * 4};
        evil_send(&e, rkv_proto_enc_pull(e.tx, &h, &to, ids));
    }
    evil_expect_dropped(&e);
    evil_close(&e);
    expect_logged_once(log, "past slot_mem_bytes (8 MiB)", "credits the peer does not return");
    check_serving(&c, 1);
    cluster_stop(&c);
}

/* A reply larger than a SEND goes by rendezvous: the server asks the
 * client for a slot, and what it sends that client afterwards waits behind
 * the ask, to keep the connection's order. A client that never answers the
 * ask, and goes on sending requests, had every reply queued behind it
 * without bound (a reply buffer each, the server's memory); the queue is
 * bounded as the credit backlog is, and the peer dropped past it. */
#define BOOK_ROWS 4096 /* an explicit book of 16 KiB: its META_REPLY needs a slot */
#define UNANSWERED_REQUESTS 3000

static void test_rendezvous_unanswered(void **state)
{
    struct env *env = *state;
    struct cluster c;
    cluster_start(&c, env, 2, 2);
    cluster_join(&c, env);
    cluster_tensors(&c);
    init_booked(&c, "booked", BOOK_ROWS);
    struct logcap *log = &c.srv_node[1].log;
    logcap_reset(log);
    struct evil e;
    evil_open(&e, env);
    evil_connect(&e, &c.machines[1]);
    struct rkv_hdr h = {.type = RKV_MSG_META, .req_id = 0x78, .sender = 0x666};
    evil_send(&e, rkv_proto_enc_meta(e.tx, &h, "booked"));
    struct rkv_msg m;
    assert_int_equal(evil_next(&e, &m), 0);
    assert_int_equal(m.h.type, RKV_MSG_RNDV_START); /* never answered */
    /* Requests whose replies (ERRORs: row 100 does not exist) queue behind it. */
    uint64_t bad = 100;
    size_t len = enc_push(&e, SMALL_ID, 1, SMALL_ROW_BYTES, &bad);
    struct rkv_sge s = {.addr = e.tx, .len = (uint32_t)len, .mr = e.tx_mr};
    int sent = 0;
    while (sent < UNANSWERED_REQUESTS && e.nd.nic->ops->post_send(e.qp, 1, &s, 0) == 0)
        sent++;
    printf("rendezvous unanswered: %d requests sent\n", sent);
    evil_expect_dropped(&e);
    evil_close(&e);
    expect_logged_once(log, NULL, "behind a rendezvous the peer does not answer");
    check_serving(&c, 1);
    cluster_stop(&c);
}

/* ---- 4: a flood of connections ---- */

/* rcvbuf: the socket's receive buffer, set before connect so that the
 * window it advertises stays that small (0: the system's). */
static int tcp_dial_rcvbuf(const struct rkv_machine *m, int rcvbuf)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    if (rcvbuf)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(m->base_port)};
    assert_int_equal(inet_pton(AF_INET, m->host, &a.sin_addr), 1);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    /* A frame goes out as two writes: Nagle would hold the second until the
     * server's delayed ack of the first, 40 ms a message. */
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

static int tcp_dial(const struct rkv_machine *m)
{
    return tcp_dial_rcvbuf(m, 0);
}

/* The secret the test's nodes were opened with (RKV_TOKEN's text), or NULL. */
static const char *env_secret(void)
{
    const char *t = getenv("RKV_TOKEN");
    return t && *t ? t : NULL;
}

/* TCP: a quarter hang up at once, a quarter never say hello (and stay
 * until the end), a quarter offer a wrong token, a quarter say a good hello
 * and leave without a word. The refusals are logged once (then every 1000th). */
static void flood_tcp(struct cluster *c, int *silent, int *n_silent)
{
    for (int i = 0; i < FLOOD; i++) {
        int fd = tcp_dial(&c->machines[1]);
        switch (i % 4) {
        case 0:
            close(fd);
            break;
        case 1:
            silent[(*n_silent)++] = fd;
            break;
        case 2:
            assert_int_equal(raw_hello(fd, "not the secret"), -1);
            close(fd);
            break;
        case 3:
            assert_int_equal(raw_hello(fd, env_secret()), 0);
            close(fd);
            break;
        }
    }
}

#if RKV_WITH_VERBS
static int cm_event(struct rdma_event_channel *ch, int *status_p)
{
    struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
    if (poll(&pfd, 1, (int)WAIT_MS) != 1)
        return -1;
    struct rdma_cm_event *ev;
    assert_int_equal(rdma_get_cm_event(ch, &ev), 0);
    int type = ev->event;
    if (status_p)
        *status_p = ev->status;
    rdma_ack_cm_event(ev);
    return type;
}

/* One rdma_cm connection request without rkv's handshake data; waits for
 * the refusal, or walks away at once (never completing the handshake). */
static void cm_foreign_request(const struct rkv_machine *m, int wait)
{
    struct rdma_event_channel *ch = rdma_create_event_channel();
    assert_non_null(ch);
    struct rdma_cm_id *id;
    assert_int_equal(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(m->base_port)};
    assert_int_equal(inet_pton(AF_INET, m->host, &sa.sin_addr), 1);
    assert_int_equal(rdma_resolve_addr(id, NULL, (struct sockaddr *)&sa, 2000), 0);
    assert_int_equal(cm_event(ch, NULL), RDMA_CM_EVENT_ADDR_RESOLVED);
    assert_int_equal(rdma_resolve_route(id, 2000), 0);
    assert_int_equal(cm_event(ch, NULL), RDMA_CM_EVENT_ROUTE_RESOLVED);
    struct rdma_conn_param cp = {.retry_count = 7, .rnr_retry_count = 7, .qp_num = 0x1234};
    assert_int_equal(rdma_connect(id, &cp), 0);
    if (wait)
        assert_int_equal(cm_event(ch, NULL), RDMA_CM_EVENT_REJECTED);
    rdma_destroy_id(id);
    rdma_destroy_event_channel(ch);
}

/* The first non-loopback IPv4 address rdma_cm can bind to an RDMA device. */
static int rdma_host(char *buf, size_t len)
{
    struct ifaddrs *ifs;
    if (getifaddrs(&ifs) != 0)
        return -1;
    int found = -1;
    for (struct ifaddrs *i = ifs; i && found < 0; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_LOOPBACK))
            continue;
        struct rdma_cm_id *id;
        if (rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) != 0)
            break;
        if (rdma_bind_addr(id, i->ifa_addr) == 0 && id->verbs) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr, buf,
                      (socklen_t)len);
            found = 0;
        }
        rdma_destroy_id(id);
    }
    freeifaddrs(ifs);
    return found;
}
#endif

/* At the bound of connections to machine 1's server, a grace (a quarter
 * of timeout_ms) on: a newcomer is served, one that had said nothing (or
 * made a claim a connection before it made) having gone for it. */
static void newcomer_after_the_grace(struct env *env, struct cluster *c, struct logcap *log)
{
    usleep((c->cfg.timeout_ms / 4 + 300) * 1000u);
    struct evil late;
    evil_open(&late, env);
    evil_connect(&late, &c->machines[1]);
    uint64_t past = 100;
    assert_int_equal(
        evil_request(&late, enc_push(&late, SMALL_ID, 1, SMALL_ROW_BYTES, &past), RKV_MSG_PUSH_ACK),
        -RKV_ERANGE);
    evil_close(&late);
    assert_true(logcap_count(log, "dropping one that has not said who it is") >= 1);
}

/* Connections that proved the secret are bounded all together, not only
 * each: 2,000 of them, their receive buffers used, held 1.1 GB of a
 * server up to the descriptor limit (an outside tester). The bound here
 * (one worker, two servers) is 2 x 3 + 64 = 70: of 80 that say a good
 * hello, the last ones are closed as they come, the worker already in is
 * served, and once they go a new peer is taken again. tcp: a raw socket
 * per connection (the NIC's hello by hand). */
#define CONN_TRIES 80
static void test_connections_bounded(void **state)
{
    struct env *env = *state;
    if (strcmp(env->backend, "tcp") != 0)
        skip();
    struct cluster c;
    cluster_start(&c, env, 2, 2);
    cluster_join(&c, env);
    cluster_tensors(&c);
    check_serving(&c, 1);
    struct logcap *log = &c.srv_node[1].log;
    logcap_reset(log);
    int fd[CONN_TRIES];
    for (int i = 0; i < CONN_TRIES; i++) {
        fd[i] = tcp_dial(&c.machines[1]);
        assert_int_equal(raw_hello(fd[i], env_secret()), 0);
    }
    /* The server closes the ones past its bound: they read EOF. */
    int closed = 0;
    for (int waited_ms = 0; waited_ms < (int)WAIT_MS && closed < CONN_TRIES - 70 + 1;
         waited_ms += 50) {
        usleep(50000);
        closed = 0;
        for (int i = 0; i < CONN_TRIES; i++) {
            char b;
            ssize_t r = recv(fd[i], &b, 1, MSG_DONTWAIT | MSG_PEEK);
            closed += r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
        }
    }
    printf("connections bounded: %d of %d closed\n", closed, CONN_TRIES);
    /* 70 minus the worker's own: 11 closed (more only if another node's
     * connection to server 1 came first). */
    assert_true(closed >= CONN_TRIES - 70 + 1 && closed <= CONN_TRIES - 60);
    /* Each refusal logged, rate-limited (a burst, then one per interval). */
    int lines = logcap_count(log, "connections to this node already, its bound: refusing another");
    assert_true(lines >= 1 && lines <= closed);
    check_serving(&c, 2);
    /* Silent for a grace (a quarter of timeout_ms), the oldest of them
     * makes room for a newcomer: connections that proved the secret and
     * never said a word locked every new worker out for good (an outside
     * tester, 68 of them). */
    newcomer_after_the_grace(env, &c, log);
    for (int i = 0; i < CONN_TRIES; i++)
        close(fd[i]);
    /* Gone, they no longer count: a peer is served again. */
    struct evil e;
    evil_open(&e, env);
    for (int tries = 0;; tries++) {
        evil_connect(&e, &c.machines[1]);
        uint64_t bad = 100;
        int rc =
            evil_request(&e, enc_push(&e, SMALL_ID, 1, SMALL_ROW_BYTES, &bad), RKV_MSG_PUSH_ACK);
        if (rc == -RKV_ERANGE)
            break;
        /* closed as it came: the server had not seen the others go yet */
        assert_int_equal(rc, -RKV_EPEERDEAD);
        assert_true(tries < (int)WAIT_MS / 100);
        evil_close(&e);
        usleep(100000);
        evil_open(&e, env);
    }
    evil_close(&e);
    check_serving(&c, 3);
    cluster_stop(&c);
}

/* verbs: half are rkv NICs that connect and close at once, half foreign
 * rdma_cm requests (the first of them walk away before the answer). */
static void flood_verbs(struct cluster *c, struct evil *e)
{
#if RKV_WITH_VERBS
    struct rkv_nic *n = e->nd.nic;
    for (int i = 0; i < FLOOD; i++) {
        if (i % 2 == 0) {
            struct rkv_qp *qp;
            assert_int_equal(
                n->ops->connect(n, c->machines[1].host, c->machines[1].base_port, WAIT_MS, &qp), 0);
            n->ops->qp_close(qp);
        } else {
            cm_foreign_request(&c->machines[1], i > FLOOD / 2);
        }
    }
#else
    (void)c, (void)e;
    fail_msg("verbs is not built in");
#endif
}

static void test_connection_flood(void **state)
{
    struct env *env = *state;
    struct cluster c;
    cluster_start(&c, env, 2, 2);
    cluster_join(&c, env);
    cluster_tensors(&c);
    check_serving(&c, 1);
    struct logcap *log = &c.srv_node[1].log;
    logcap_reset(log);
    int silent[FLOOD], n_silent = 0;
    /* The silent ones stay past the hello timeout here (test_silent_and_slow
     * sees them go): nothing but the refusal is to be logged. */
    c.srv_node[1].nic->hello_timeout_ms = 0;
    struct evil e;
    evil_open(&e, env);
    if (strcmp(env->backend, "tcp") == 0)
        flood_tcp(&c, silent, &n_silent);
    else
        flood_verbs(&c, &e);
    /* Served while the silent ones still hang on. */
    check_serving(&c, 2);
    if (strcmp(env->backend, "tcp") == 0)
        expect_logged_once(log, "wrong secret", "refused");
    else
        expect_logged_once(log, "not from an rkv verbs NIC", "refusing");
    /* Nothing else was worth a warning: peers that leave early only left. */
    int warnings = logcap_count(log, " L0 ") + logcap_count(log, " L1 ");
    if (warnings != 1) {
        logcap_dump(log, "captured log");
        fail_msg("the flood left %d warnings, expected the one refusal", warnings);
    }
    for (int i = 0; i < n_silent; i++)
        close(silent[i]);
    evil_close(&e);
    /* And a hostile peer after the flood is still told what it did wrong. */
    evil_open(&e, env);
    evil_connect(&e, &c.machines[1]);
    uint64_t bad = 100;
    logcap_reset(log);
    assert_int_equal(
        evil_request(&e, enc_push(&e, SMALL_ID, 1, SMALL_ROW_BYTES, &bad), RKV_MSG_PUSH_ACK),
        -RKV_ERANGE);
    expect_logged_once(log, "row id 100", "rejecting PUSH");
    evil_close(&e);
    check_serving(&c, 3);
    cluster_stop(&c);
}

/* ---- 5: authentication ---- */

/* Resident memory of this process (the servers run in it), in bytes. */
static long rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, resident = 0;
    assert_non_null(f);
    assert_int_equal(fscanf(f, "%ld %ld", &size, &resident), 2);
    fclose(f);
    return resident * sysconf(_SC_PAGESIZE);
}

/* A TCP NIC with the given secret (NULL: none) tries to join machine m. */
static int nic_try_connect(const struct env *env, const struct rkv_machine *m, const char *secret)
{
    struct node nd;
    struct env e = *env;
    e.secret[0] = 0;
    node_open(&nd, &e, "probe");
    rkv_nic_set_secret(nd.nic, secret ? secret : "", secret ? strlen(secret) : 0);
    struct rkv_qp *qp = NULL;
    int rc = nd.nic->ops->connect(nd.nic, m->host, m->base_port, WAIT_MS, &qp);
    if (rc == 0)
        nd.nic->ops->qp_close(qp);
    node_close(&nd);
    return rc;
}

/* The secret is text: "s3cret" is not 0, nor "", nor a prefix of itself;
 * peers without it are refused (logged once, then counted), peers with it
 * (given in the config, a file or RKV_TOKEN) get in, and a cluster without
 * one says so once per server. */
static void test_text_secret(void **state)
{
    struct env *env = *state;
    if (strcmp(env->backend, "tcp") != 0)
        skip(); /* verbs: the same HMAC in the connect private data, tested in the VM */
    snprintf(env->secret, sizeof(env->secret), "s3cret");
    struct cluster c;
    cluster_start(&c, env, 2, 2);
    cluster_join(&c, env);
    cluster_tensors(&c);
    check_serving(&c, 1);
    struct logcap *log = &c.srv_node[1].log;
    assert_int_equal(logcap_count(log, "NO SHARED SECRET"), 0);
    logcap_reset(log);
    const char *wrong[] = {NULL, "", "0", "s3cre", "s3cret ", "S3CRET"};
    for (size_t i = 0; i < RKV_ARRAY_LEN(wrong); i++) {
        int fd = tcp_dial(&c.machines[1]);
        if (raw_hello(fd, wrong[i]) != -1)
            fail_msg("a peer with the secret '%s' got in", wrong[i] ? wrong[i] : "(none)");
        close(fd);
        assert_int_equal(nic_try_connect(env, &c.machines[1], wrong[i]), -RKV_ECONFIG);
    }
    /* Twelve refusals, one line (it counts them). */
    expect_logged_once(log, "wrong secret", "refused");
    int fd = tcp_dial(&c.machines[1]);
    assert_int_equal(raw_hello(fd, "s3cret"), 0);
    close(fd);
    assert_int_equal(nic_try_connect(env, &c.machines[1], "s3cret"), 0);
    /* From a file (one trailing newline is not part of it), and from RKV_TOKEN. */
    char path[64];
    snprintf(path, sizeof(path), "/tmp/rkv-secret-%d", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("s3cret\n", f);
    fclose(f);
    struct env plain = *env;
    plain.secret[0] = 0;
    struct node nd;
    assert_int_equal(setenv("RKV_SECRET_FILE", path, 1), 0);
    node_open(&nd, &plain, "file");
    unsetenv("RKV_SECRET_FILE");
    struct rkv_qp *qp;
    assert_int_equal(
        nd.nic->ops->connect(nd.nic, c.machines[1].host, c.machines[1].base_port, WAIT_MS, &qp), 0);
    nd.nic->ops->qp_close(qp);
    node_close(&nd);
    /* The file named by rkv_config.secret_file (what --secret-file sets),
     * no environment involved; a missing file is a configuration error. */
    struct rkv_config fcfg;
    rkv_config_defaults(&fcfg);
    char err[256];
    node_open(&nd, &plain, "cfgfile");
    snprintf(fcfg.secret_file, sizeof(fcfg.secret_file), "%s.missing", path);
    assert_int_equal(rkv_cfg_nic(&fcfg, nd.nic, err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, "secret file"));
    snprintf(fcfg.secret_file, sizeof(fcfg.secret_file), "%s", path);
    assert_int_equal(rkv_cfg_nic(&fcfg, nd.nic, err, sizeof(err)), 0);
    assert_int_equal(
        nd.nic->ops->connect(nd.nic, c.machines[1].host, c.machines[1].base_port, WAIT_MS, &qp), 0);
    nd.nic->ops->qp_close(qp);
    node_close(&nd);
    /* CRLF is the newline too; a CR of its own is the secret's (it was
     * dropped as well: an outside tester). */
    static const struct {
        const char *text;
        int rc;
    } ends[] = {{"s3cret\r\n", 0}, {"s3cret\r", -RKV_ECONFIG}};
    for (size_t i = 0; i < RKV_ARRAY_LEN(ends); i++) {
        f = fopen(path, "w");
        assert_non_null(f);
        fputs(ends[i].text, f);
        fclose(f);
        node_open(&nd, &plain, "cfgfile");
        assert_int_equal(rkv_cfg_nic(&fcfg, nd.nic, err, sizeof(err)), 0);
        int rc =
            nd.nic->ops->connect(nd.nic, c.machines[1].host, c.machines[1].base_port, WAIT_MS, &qp);
        if (rc == 0)
            nd.nic->ops->qp_close(qp);
        if (rc != ends[i].rc)
            fail_msg("a secret file ending in %s: connect %d", i ? "CR" : "CRLF", rc);
        node_close(&nd);
    }
    unlink(path);
    assert_int_equal(setenv("RKV_TOKEN", "s3cret", 1), 0);
    node_open(&nd, &plain, "token");
    unsetenv("RKV_TOKEN");
    assert_int_equal(
        nd.nic->ops->connect(nd.nic, c.machines[1].host, c.machines[1].base_port, WAIT_MS, &qp), 0);
    nd.nic->ops->qp_close(qp);
    node_close(&nd);
    check_serving(&c, 2);
    cluster_stop(&c);
    env->secret[0] = 0;
    /* Without a secret: one loud line per server, at start. */
    cluster_start(&c, env, 2, 2);
    cluster_join(&c, env);
    for (int m = 0; m < 2; m++)
        assert_int_equal(logcap_count(&c.srv_node[m].log, "NO SHARED SECRET"), 1);
    cluster_stop(&c);
}

/* ---- 6: bounded resources per peer ---- */

/* One engine message over a raw connection, and the reply's type (the
 * first frame back), or -1. */
static int raw_request(int fd, const void *msg, size_t len)
{
    raw_send_frame(fd, RAW_SEND, (uint32_t)len, msg, len);
    uint8_t h[RAW_HDR_BYTES], body[EV_CTRL];
    if (raw_read_all(fd, h, sizeof(h)) < 0)
        return -1;
    uint32_t n;
    memcpy(&n, h + 8, 4);
    if (n > sizeof(body) || raw_read_all(fd, body, n) < 0)
        return -1;
    struct rkv_msg m;
    char why[160];
    return rkv_proto_decode(body, n, &m, why, sizeof(why)) < 0 ? -1 : m.h.type;
}

#define CHURN 20000
#define CHURN_RSS_BOUND (8l << 20) /* the leak was ~6 KB a connection: 120 MB here */

/* Connections that complete the hello and leave, by the thousand: the
 * server's memory stays flat. */
/* A HELLO on a raw connection claiming client id 0 (a server other than 0
 * cannot check it); the reply's type, or -1. */
static int raw_claim_id0(int fd, const struct rkv_config *cfg)
{
    static uint8_t msg[256] __attribute__((aligned(8)));
    struct rkv_hdr h = {.type = RKV_MSG_HELLO, .req_id = 1};
    struct rkv_wire_hello w = {.want_id = 0,
                               .nonce = 1,
                               .cluster = rkv_cfg_fingerprint(cfg),
                               .rx_depth = cfg->rx_depth,
                               .ctrl_buf_bytes = cfg->ctrl_buf_bytes};
    return raw_request(fd, msg, rkv_proto_enc_hello(msg, &h, &w));
}

static void test_connection_churn(void **state)
{
    struct env *env = *state;
    if (strcmp(env->backend, "tcp") != 0)
        skip(); /* raw sockets speak the TCP NIC's hello */
    struct cluster c;
    cluster_start(&c, env, 2, 2);
    cluster_join(&c, env);
    cluster_tensors(&c);
    check_serving(&c, 1);
    long before = 0;
    for (int i = 0; i < CHURN + 500; i++) {
        if (i == 500) /* after the pools warmed up */
            before = rss_bytes();
        int fd = tcp_dial(&c.machines[1]);
        assert_int_equal(raw_hello(fd, env_secret()), 0);
        if (i % 2) { /* a whole client: HELLO (claiming an id) and its reply */
            assert_int_equal(raw_claim_id0(fd, &c.cfg), RKV_MSG_HELLO_REPLY);
        }
        if (i >= 500) { /* an abortive close: 20,000 orderly ones left as many TIME_WAIT
                         * sockets holding ephemeral ports for a minute, which suites
                         * running alongside need (the warm-up still closes in order) */
            struct linger lg = {.l_onoff = 1, .l_linger = 0};
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        }
        close(fd);
        if (i % 500 == 0) /* the capture's own memory is not the server's */
            for (int m = 0; m < 2; m++)
                logcap_reset(&c.srv_node[m].log);
    }
    /* The last ones may still be on their way out. */
    usleep(300000);
    long after = rss_bytes();
    printf("connection churn: %d hello+close: RSS %.1f -> %.1f MB (bound +%ld MB)\n", CHURN,
           before / 1048576.0, after / 1048576.0, CHURN_RSS_BOUND >> 20);
    assert_true(after - before < CHURN_RSS_BOUND);
    check_serving(&c, 2);
    cluster_stop(&c);
}

/* Connections that each claim a client id at a server other than 0 (which
 * cannot check a claim) held the bound as surely as silent ones: 72 that
 * claimed ids 0 and 1 locked every new worker out (an outside tester).
 * Only the first live claim of an id counts as identified: the others go
 * to make room, and the worker that claimed id 0 first is not among them. */
static void test_claimed_ids_do_not_hold_the_bound(void **state)
{
    struct env *env = *state;
    if (strcmp(env->backend, "tcp") != 0)
        skip();
    struct cluster c;
    cluster_start(&c, env, 2, 2);
    cluster_join(&c, env);
    cluster_tensors(&c);
    check_serving(&c, 1);
    struct logcap *log = &c.srv_node[1].log;
    logcap_reset(log);
    int fd[CONN_TRIES], claimed = 0;
    for (int i = 0; i < CONN_TRIES; i++) {
        fd[i] = tcp_dial(&c.machines[1]);
        if (raw_hello(fd[i], env_secret()) < 0)
            continue;                                                   /* closed at the bound */
        claimed += raw_claim_id0(fd[i], &c.cfg) == RKV_MSG_HELLO_REPLY; /* the worker's id */
    }
    printf("claimed ids: %d of %d connections claimed client id 0\n", claimed, CONN_TRIES);
    assert_true(claimed >= 60);
    newcomer_after_the_grace(env, &c, log);
    check_serving(&c, 2); /* the worker's own connection was kept */
    for (int i = 0; i < CONN_TRIES; i++)
        close(fd[i]);
    cluster_stop(&c);
}

/* When the connection holding a client id's claim goes, the oldest live
 * connection still claiming it holds it, and counts as identified: at the
 * bound of connections the server drops one that never said who it is,
 * not the heir. (The holder's successor used to be found by a walk of
 * every connection, for every holder that went; only claims made while
 * another held the id are looked at now.) */
static void test_claim_passes_to_the_next_claimant(void **state)
{
    struct env *env = *state;
    if (strcmp(env->backend, "tcp") != 0)
        skip();
    struct cluster c;
    cluster_start(&c, env, 2, 2);
    cluster_join(&c, env); /* the worker does not reach server 1 until the end */
    struct logcap *log = &c.srv_node[1].log;
    logcap_reset(log);
    int holder = tcp_dial(&c.machines[1]), heir = tcp_dial(&c.machines[1]);
    assert_int_equal(raw_hello(holder, env_secret()), 0);
    assert_int_equal(raw_claim_id0(holder, &c.cfg), RKV_MSG_HELLO_REPLY);
    assert_int_equal(raw_hello(heir, env_secret()), 0);
    assert_int_equal(raw_claim_id0(heir, &c.cfg), RKV_MSG_HELLO_REPLY); /* held: no standing */
    close(holder);
    usleep(300000); /* the server sees it go */
    int fd[CONN_TRIES + 1];
    for (int i = 0; i < CONN_TRIES; i++) { /* the bound fills with silent ones */
        fd[i] = tcp_dial(&c.machines[1]);
        (void)raw_hello(fd[i], env_secret());
    }
    /* Past the grace, a newcomer makes room: the oldest silent one goes. */
    usleep((c.cfg.timeout_ms / 4 + 300) * 1000u);
    fd[CONN_TRIES] = tcp_dial(&c.machines[1]);
    assert_int_equal(raw_hello(fd[CONN_TRIES], env_secret()), 0);
    for (int waited_ms = 0; waited_ms < (int)WAIT_MS &&
                            logcap_count(log, "dropping one that has not said who it is") < 1;
         waited_ms += 50)
        usleep(50000);
    assert_true(logcap_count(log, "dropping one that has not said who it is") >= 1);
    usleep(200000);
    char b;
    ssize_t r = recv(heir, &b, 1, MSG_DONTWAIT | MSG_PEEK);
    if (!(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)))
        fail_msg("the heir to client id 0's claim was dropped at the bound (recv %zd)", r);
    for (int i = 0; i <= CONN_TRIES; i++)
        close(fd[i]);
    close(heir);
    usleep(300000);
    cluster_tensors(&c);
    check_serving(&c, 1);
    cluster_stop(&c);
}

static int evil_hello(struct evil *e, const struct cluster *c, uint32_t want, uint64_t nonce);

/* Encodes into tx an INIT of phase op for T_SMALL's shape under name and id. */
static size_t enc_init(struct evil *e, const char *name, uint32_t id, int op)
{
    struct rkv_tensor_meta m = {.dtype = T_SMALL.dtype,
                                .rows = T_SMALL.rows,
                                .row_len = T_SMALL.row_len,
                                .policy = T_SMALL.policy};
    snprintf(m.name, sizeof(m.name), "%s", name);
    struct rkv_wire_tensor w;
    rkv_tensor_to_wire(&m, &T_SMALL, &w);
    struct rkv_hdr h = {.type = RKV_MSG_INIT, .req_id = 0x77, .tensor_id = id, .op = (uint8_t)op};
    return rkv_proto_enc_tensor_local(e->tx, &h, &w, NULL, NULL);
}

/* A phase-0 INIT (the tensor's id, server 0's) at another server after a
 * phase-1 INIT of id 1024 there read "the cluster holds 1024 tensors
 * already" (an outside tester): it is refused as a phase for server 0. */
static void test_init_phase0_elsewhere_says_so(void **state)
{
    struct env *env = *state;
    struct cluster c;
    cluster_start(&c, env, 2, 2);
    cluster_join(&c, env);
    struct evil e;
    evil_open(&e, env);
    evil_connect(&e, &c.machines[1]);
    assert_int_equal(evil_hello(&e, &c, 0, 1), 0);
    assert_int_equal(evil_request(&e, enc_init(&e, "late", RKV_MAX_TENSORS, 1), RKV_MSG_INIT_REPLY),
                     0);
    logcap_reset(&c.srv_node[1].log);
    assert_int_equal(evil_request(&e, enc_init(&e, "next", 0, 0), RKV_MSG_INIT_REPLY), -RKV_EINVAL);
    assert_true(logcap_count(&c.srv_node[1].log, "goes to server 0, not server 1") >= 1);
    evil_close(&e);
    cluster_tensors(&c);
    check_serving(&c, 1);
    cluster_stop(&c);
}

/* A peer that made a name at a server under another id than server 0
 * gives it: the server answered an honest init_data's INIT with its own id,
 * the call passed, and every push and pull of that machine's rows failed
 * "unknown tensor id" (an outside tester). Refused, naming both ids. */
static void test_init_under_another_id(void **state)
{
    struct env *env = *state;
    struct cluster c;
    cluster_start(&c, env, 2, 2);
    cluster_join(&c, env);
    struct evil e;
    evil_open(&e, env);
    evil_connect(&e, &c.machines[1]);
    size_t len = enc_init(&e, T_SMALL.name, 3, 1);
    /* Not before a HELLO: a raw INIT before any client joined left a
     * durable server 0 unable to restart (an outside tester). */
    assert_int_equal(evil_request(&e, len, RKV_MSG_INIT_REPLY), -RKV_EINVAL);
    assert_int_equal(evil_hello(&e, &c, 0, 1), 0); /* an id claimed: server 1 cannot check */
    len = enc_init(&e, T_SMALL.name, 3, 1);
    assert_int_equal(evil_request(&e, len, RKV_MSG_INIT_REPLY), 0);
    evil_close(&e);
    int rc = rkv_client_init_data(c.cli, &T_SMALL);
    printf("init under another id: %d %s\n", rc, rkv_client_errmsg(c.cli));
    assert_int_equal(rc, -RKV_EEXIST);
    assert_non_null(strstr(rkv_client_errmsg(c.cli), "under id 3, and this INIT names id 1"));
    /* Another name is made and served as ever. */
    assert_int_equal(rkv_client_init_data(c.cli, &T_BIG), 0);
    cluster_stop(&c);
}

#define HOG_REQUESTS 20000
#define HOG_RSS_BOUND (24l << 20) /* 65,536 queued replies were 321 MB */

/* A peer that asks and asks and never returns a credit: the replies it owes
 * pile up only a few windows deep before it is dropped, and the memory
 * comes back. */
static void test_credit_hog(void **state)
{
    struct env *env = *state;
    struct cluster c;
    cluster_start(&c, env, 2, 2);
    cluster_join(&c, env);
    cluster_tensors(&c);
    check_serving(&c, 1);
    struct logcap *log = &c.srv_node[1].log;
    logcap_reset(log);
    long before = rss_bytes();
    struct evil e;
    evil_open(&e, env);
    evil_connect(&e, &c.machines[1]);
    /* Each is answered with an ERROR (row 100 does not exist) the hog never
     * reads: its receives stay unposted-to, its credits never come back. */
    uint64_t bad = 100;
    size_t len = enc_push(&e, SMALL_ID, 1, SMALL_ROW_BYTES, &bad);
    struct rkv_sge s = {.addr = e.tx, .len = (uint32_t)len, .mr = e.tx_mr};
    int sent = 0;
    while (sent < HOG_REQUESTS && e.nd.nic->ops->post_send(e.qp, 1, &s, 0) == 0)
        sent++;
    usleep(200000); /* the server answers what it read */
    long peak = rss_bytes();
    printf("credit hog: %d requests sent; RSS %.1f -> %.1f MB\n", sent, before / 1048576.0,
           peak / 1048576.0);
    evil_expect_dropped(&e);
    evil_close(&e);
    usleep(200000);
    long after = rss_bytes();
    printf("credit hog: %d requests sent before the drop; RSS %.1f -> %.1f (peak) -> %.1f MB\n",
           sent, before / 1048576.0, peak / 1048576.0, after / 1048576.0);
    expect_logged_once(log, NULL, "credits the peer does not return");
    assert_true(peak - before < HOG_RSS_BOUND && after - before < HOG_RSS_BOUND);
    check_serving(&c, 2);
    cluster_stop(&c);
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits up to ms for the server to close fd; returns the milliseconds it
 * took, or -1. Whatever the server sends before is read and dropped. */
static int wait_closed(int fd, int ms)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int el = 0;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, ms - el);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        el = (int)((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000);
        if (r <= 0 && el >= ms)
            return -1;
        if (r <= 0)
            continue;
        char b[256];
        if (read(fd, b, sizeof(b)) <= 0)
            return el;
    }
}

/* Silent connections, a hello at one byte a tenth of a second, and (once
 * in) silence or a frame trickled the same way: each is dropped within its
 * timeout, and the server goes on serving. */
static void test_silent_and_slow(void **state)
{
    struct env *env = *state;
    if (strcmp(env->backend, "tcp") != 0)
        skip();
    env->hello_timeout_ms = 400;
    env->idle_timeout_ms = RKV_MIN_IDLE_TIMEOUT_MS;
    struct cluster c;
    cluster_start(&c, env, 2, 2);
    env->hello_timeout_ms = env->idle_timeout_ms = 0;
    /* The real client pauses between calls longer than the idle timeout:
     * it redials (retry_ms), which is what a client of such a cluster does. */
    c.cfg.retry_ms = 5000;
    cluster_join(&c, env);
    cluster_tensors(&c);
    check_serving(&c, 1);
    struct logcap *log = &c.srv_node[1].log;
    logcap_reset(log);
    /* Each connection's age counts from its dial (hello timeout) or its
     * hello (idle timeout), not from the loop below: under load the hellos
     * may take a while, and the first two age meanwhile. */
    int64_t since[4];
    int silent = tcp_dial(&c.machines[1]);
    since[0] = mono_ms();
    int slow_hello = tcp_dial(&c.machines[1]);
    since[1] = mono_ms();
    int idle = tcp_dial(&c.machines[1]);
    assert_int_equal(raw_hello(idle, env_secret()), 0);
    since[2] = mono_ms();
    int slow_frame = tcp_dial(&c.machines[1]);
    assert_int_equal(raw_hello(slow_frame, env_secret()), 0);
    since[3] = mono_ms();
    uint8_t junk[RAW_AUTH_BYTES] = {0x52, 0x56, 0x4b, 0x48, 2};
    uint8_t frame[RAW_HDR_BYTES] = {0x52, 0x56, 0x4b, 0x54, RAW_SEND};
    int dropped[4] = {-1, -1, -1, -1};
    const int fds[4] = {silent, slow_hello, idle, slow_frame};
    for (int t = 0; t < 60; t++) { /* 6 s: six times the longest timeout */
        /* One byte a tenth of a second: never a whole hello or frame in time. */
        if (dropped[1] < 0 && t < (int)sizeof(junk))
            send(slow_hello, junk + t, 1, MSG_NOSIGNAL);
        if (dropped[3] < 0 && t < (int)sizeof(frame))
            send(slow_frame, frame + t, 1, MSG_NOSIGNAL);
        int left = 0;
        for (int k = 0; k < 4; k++) {
            if (dropped[k] < 0 && wait_closed(fds[k], 0) >= 0)
                dropped[k] = (int)(mono_ms() - since[k]);
            left += dropped[k] < 0;
        }
        if (!left)
            break;
        usleep(100000);
    }
    printf("dropped after ~ms: silent %d, slow hello %d, idle %d, slow frame %d\n", dropped[0],
           dropped[1], dropped[2], dropped[3]);
    for (int k = 0; k < 4; k++) {
        assert_true(dropped[k] >= 0);
        close(fds[k]);
    }
    /* Within the timeout plus the sweep's tick, and not before it. */
    assert_true(dropped[0] >= 300 && dropped[0] <= 3000);
    assert_true(dropped[1] >= 300 && dropped[1] <= 3000);
    assert_true(dropped[2] >= 900 && dropped[2] <= 3700);
    assert_true(dropped[3] >= 900 && dropped[3] <= 3700);
    assert_true(logcap_count(log, "no authenticated hello within 400 ms") >= 2);
    check_serving(&c, 2);
    cluster_stop(&c);
}

/* A peer that asks for large replies and never reads its socket (or one
 * stopped in a debugger, or whose host is gone without a reset): the
 * server's sends to it cannot complete. Every other client must still be
 * served meanwhile, not wait for the server to give that peer up. 16
 * replies are past the 64 MiB the server queues for one connection: the
 * server then blocked in its send for 30 s, and every other client's
 * request timed out; it now gives the peer up once it has read nothing
 * for a quarter of the request timeout. */
#define NOREAD_IDS 400 /* x 16 KiB rows: a 6.5 MB reply, past the socket buffers */
#define NOREAD_PULLS 16
/* The good client's request timeout in the clusters a peer that does not
 * read attacks, whose servers have WAIT_MS (a send wait of a quarter of
 * it). Below the 30 s a server waited before the fix, so the tests fail
 * without it; well over the send wait plus the time it takes to queue
 * 100 MB of replies on a loaded host (ThreadSanitizer took 5-7 s). */
#define NOREAD_TIMEOUT_MS 25000u

/* The state of the server's side of fd's connection in /proc/net/tcp (1:
 * established), or -1 when it has none (closed and gone). IPv4 only. */
static int server_side_state(int fd)
{
    struct sockaddr_in me, srv;
    socklen_t l1 = sizeof(me), l2 = sizeof(srv);
    if (getsockname(fd, (struct sockaddr *)&me, &l1) < 0 ||
        getpeername(fd, (struct sockaddr *)&srv, &l2) < 0)
        return -1;
    char local[32], rem[32], line[512];
    snprintf(local, sizeof(local), "%08X:%04X", (unsigned)srv.sin_addr.s_addr,
             (unsigned)ntohs(srv.sin_port));
    snprintf(rem, sizeof(rem), "%08X:%04X", (unsigned)me.sin_addr.s_addr,
             (unsigned)ntohs(me.sin_port));
    FILE *f = fopen("/proc/net/tcp", "r");
    if (!f)
        return -1;
    int st = -1;
    while (fgets(line, sizeof(line), f)) {
        char a[32], b[32];
        unsigned x;
        if (sscanf(line, " %*u: %31s %31s %x", a, b, &x) == 3 && !strcmp(a, local) &&
            !strcmp(b, rem)) {
            st = (int)x;
            break;
        }
    }
    fclose(f);
    return st;
}

/* A cluster served (round 1) and a hostile peer's connection to machine 1,
 * past its hello, with a receive buffer of 4 KiB: its fd. Skips unless the
 * backend is tcp and, with proc, /proc/net/tcp shows the server's side
 * (established, checked). */
static int noread_peer(struct cluster *c, struct env *env, int proc)
{
    if (strcmp(env->backend, "tcp") != 0 || (proc && access("/proc/net/tcp", R_OK) != 0))
        skip();
    cluster_start(c, env, 2, 2);
    c->cfg.timeout_ms = NOREAD_TIMEOUT_MS; /* the good client's alone */
    cluster_join(c, env);
    cluster_tensors(c);
    check_serving(c, 1);
    int fd = tcp_dial_rcvbuf(&c->machines[1], 4096);
    assert_int_equal(raw_hello(fd, env_secret()), 0);
    if (proc)
        assert_int_equal(server_side_state(fd), 1);
    return fd;
}

/* Waits up to NOREAD_TIMEOUT_MS for the server's side of fd to close: 1
 * when it did, without reading fd. */
static int server_side_closes(int fd)
{
    for (uint32_t waited = 0; waited < NOREAD_TIMEOUT_MS; waited += 50) {
        if (server_side_state(fd) != 1)
            return 1;
        usleep(50000);
    }
    return server_side_state(fd) != 1;
}

/* One read of what fd has now, without waiting: 0 once the connection has
 * ended (or failed), else 1. */
static int read_some(int fd)
{
    static _Thread_local uint8_t buf[8192];
    ssize_t k = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    return !(k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR));
}

/* Reads fd until the peer ends the connection (1) or timeout_ms pass (0). */
static int drain_to_end(int fd, uint32_t timeout_ms)
{
    static uint8_t sink[1 << 16];
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        int64_t left = (int64_t)timeout_ms -
                       ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)left) <= 0)
            continue;
        ssize_t r = read(fd, sink, sizeof(sink));
        if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN))
            return 1;
    }
}

/* Sends k pulls of NOREAD_IDS big rows each on fd, reading nothing. */
static void noread_pulls(int fd, int k)
{
    static uint64_t ids[NOREAD_IDS];
    for (int i = 0; i < NOREAD_IDS; i++)
        ids[i] = 60;
    static uint8_t msg[EV_CTRL];
    struct rkv_slot_desc to = {.addr = 64, .rkey = 1, .cap = 1u << 30};
    for (int j = 0; j < k; j++) {
        struct rkv_hdr h = {.type = RKV_MSG_PULL,
                            .req_id = 0x77 + (uint64_t)j,
                            .tensor_id = BIG_ID,
                            .count = NOREAD_IDS,
                            .row_bytes = BIG_ROW_LEN * 4};
        size_t len = rkv_proto_enc_pull(msg, &h, &to, ids);
        assert_true(len <= sizeof(msg));
        raw_send_frame(fd, RAW_SEND, (uint32_t)len, msg, len);
    }
}

static void test_peer_that_never_reads(void **state)
{
    struct cluster c;
    int fd = noread_peer(&c, *state, 0);
    noread_pulls(fd, NOREAD_PULLS);
    usleep(300000); /* the server is writing the replies by now */
    /* Within the client's own timeout: the server blocked in a send to
     * the peer for up to 30 s, and the request timed out. */
    check_serving(&c, 2);
    /* And the server gave the peer up: what it sent ends, within the
     * request timeout, rather than waiting on in the server's queue. */
    assert_true(drain_to_end(fd, NOREAD_TIMEOUT_MS));
    close(fd);
    check_serving(&c, 3);
    cluster_stop(&c);
}

/* A peer that asks for replies that fit the server's queue for it, reads
 * none and says nothing more. No post ever waits behind that queue, so the
 * 26 MB stayed queued, and the connection open, for as long as the peer
 * liked (the idle timeout is off by default; a queue 30 s still was given
 * up only at the next post to it). The server now drops a peer that read
 * none of its queue for the send wait (a quarter of the request timeout),
 * posts or not. Seen from /proc/net/tcp, not by reading: reading would
 * move the queue. */
static void test_peer_that_never_reads_and_goes_quiet(void **state)
{
    struct cluster c;
    int fd = noread_peer(&c, *state, 1);
    noread_pulls(fd, 4);
    if (!server_side_closes(fd))
        fail_msg("the server kept the connection of a peer that read nothing for %u ms",
                 NOREAD_TIMEOUT_MS);
    check_serving(&c, 2);
    close(fd);
    cluster_stop(&c);
}

/* A peer that reads its replies slowly (8 KiB every 40 ms, 200 KB/s) and
 * asks for nothing more: not a peer to drop. The sweep saw the server's
 * queue for it still, since the kernel reports a socket writable only once
 * a third of its buffer is free (several seconds at that pace), and
 * dropped it as one that read nothing; it now writes the queue first and
 * drops only a socket that takes none of it. */
static void test_peer_that_reads_at_a_crawl_is_kept(void **state)
{
    struct cluster c;
    int fd = noread_peer(&c, *state, 1);
    noread_pulls(fd, 4);
    /* Three send waits (WAIT_MS / 4 each) of reading at a crawl. */
    for (int i = 0; i < (int)(3 * WAIT_MS / 4 / 40); i++) {
        if (!read_some(fd))
            fail_msg("the server dropped a peer that read at 200 KB/s, after %d ms", i * 40);
        usleep(40000);
    }
    assert_int_equal(server_side_state(fd), 1);
    check_serving(&c, 2);
    close(fd);
    cluster_stop(&c);
}

/* Reads at most 8 KiB every 5 ms (1.6 MB/s) until told to stop or the end:
 * often enough that the server's queue for it moves every second or so. */
struct slow_reader {
    int fd;
    atomic_int stop;
};

static void *slow_reader_main(void *arg)
{
    struct slow_reader *r = arg;
    while (!atomic_load(&r->stop) && read_some(r->fd))
        usleep(5000);
    return NULL;
}

/* A peer that asks for replies past its queue's bound and reads them at a
 * trickle (1.6 MB/s: the 100 MB would take a minute). Every byte it took
 * counted as progress, so the server's post behind the full queue waited
 * for the queue to drain (before that, 30 s), and every other client's
 * requests timed out. A post waits past the send wait only while the peer
 * reads at 5 MB/s or more on average. */
static void test_peer_that_reads_slowly(void **state)
{
    struct cluster c;
    struct slow_reader r = {.fd = noread_peer(&c, *state, 1)};
    noread_pulls(r.fd, NOREAD_PULLS);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, slow_reader_main, &r), 0);
    usleep(300000); /* the server is writing the replies by now */
    check_serving(&c, 2);
    /* And it gave the peer up (its side closed), while the peer read on. */
    int closed = server_side_closes(r.fd);
    atomic_store(&r.stop, 1);
    pthread_join(t, NULL);
    if (!closed)
        fail_msg("the server kept the connection of a peer reading at 1.6 MB/s");
    close(r.fd);
    check_serving(&c, 3);
    cluster_stop(&c);
}

/* A server process with few descriptors (RLIMIT_NOFILE) and a crowd of
 * silent connections: a real worker still gets in and is served. */
static void test_descriptor_exhaustion(void **state)
{
    struct env *env = *state;
    if (strcmp(env->backend, "tcp") != 0)
        skip();
    struct cluster c;
    /* Only the config: the server runs in a child process with its limit. */
    for (;;) {
        uint16_t base = env->next_port++;
        if (port_free(base)) {
            cluster_config(&c, env, 1, base);
            break;
        }
    }
    c.cfg.hello_timeout_ms = 60000; /* no help from the timeout: the reserve does it */
    c.cfg.log_level = RKV_LOG_WARN;
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* A test that dies (or times out) takes its server with it. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() == 1)
            _exit(4);
        struct rlimit rl = {.rlim_cur = 64, .rlim_max = 64};
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            _exit(2);
        struct rkv_server *srv;
        char err[256];
        if (rkv_server_create(&c.cfg, 0, &srv, err, sizeof(err)) < 0) {
            fprintf(stderr, "child server: %s\n", err);
            _exit(3);
        }
        rkv_server_run(srv);
        rkv_server_destroy(srv);
        _exit(0);
    }
    /* 200 silent connections, more than the server has descriptors. */
    enum { SILENT = 200 };
    int silent[SILENT];
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(c.machines[0].base_port)};
    inet_pton(AF_INET, c.machines[0].host, &a.sin_addr);
    usleep(300000); /* the child listens */
    for (int i = 0; i < SILENT; i++) {
        silent[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        assert_true(silent[i] >= 0);
        connect(silent[i], (struct sockaddr *)&a, sizeof(a)); /* in progress, or queued */
    }
    usleep(300000);
    struct rkv_client *cli;
    char err[256];
    c.cfg.connect_retry_ms = 20000;
    if (rkv_client_create(&c.cfg, &cli, err, sizeof(err)) < 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fail_msg("the worker did not get in: %s", err);
    }
    assert_int_equal(rkv_client_init_data(cli, &T_SMALL), 0);
    uint64_t ids[2] = {3, 97};
    float rows[8] = {1, 2, 3, 4, 5, 6, 7, 8}, got[8];
    assert_int_equal(rkv_client_push(cli, "small", ids, 2, rows, RKV_OP_ASSIGN, 0), 0);
    assert_int_equal(rkv_client_pull(cli, "small", ids, 2, got), 0);
    assert_memory_equal(got, rows, sizeof(rows));
    assert_int_equal(rkv_client_shutdown_servers(cli), 0);
    rkv_client_destroy(cli);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    for (int i = 0; i < SILENT; i++)
        close(silent[i]);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* ---- 7: identity bound to the connection ---- */

/* Sends an engine HELLO from the hostile peer; returns the reply's status. */
static int evil_hello(struct evil *e, const struct cluster *c, uint32_t want, uint64_t nonce)
{
    struct rkv_hdr h = {.type = RKV_MSG_HELLO, .req_id = 0x77, .sender = 0x666};
    struct rkv_wire_hello w = {.want_id = want,
                               .nonce = nonce,
                               .cluster = rkv_cfg_fingerprint(&c->cfg),
                               .rx_depth = c->cfg.rx_depth,
                               .ctrl_buf_bytes = c->cfg.ctrl_buf_bytes};
    size_t len = rkv_proto_enc_hello(e->tx, &h, &w);
    return evil_request(e, len, RKV_MSG_HELLO_REPLY);
}

static size_t enc_simple(struct evil *e, int type)
{
    struct rkv_hdr h = {.type = (uint8_t)type, .req_id = 0x77, .sender = 0x666};
    return rkv_proto_enc_empty(e->tx, &h);
}

/* A SHUTDOWN from a connection that never joined is refused (and the
 * server keeps serving); the one that stops the cluster is logged with the
 * client that sent it. */
static void test_shutdown_needs_a_client(void **state)
{
    struct env *env = *state;
    struct cluster c;
    cluster_start(&c, env, 2, 2);
    cluster_join(&c, env);
    cluster_tensors(&c);
    for (int m = 0; m < 2; m++) {
        struct evil e;
        evil_open(&e, env);
        evil_connect(&e, &c.machines[m]);
        assert_int_equal(evil_request(&e, enc_simple(&e, RKV_MSG_SHUTDOWN), RKV_MSG_SHUTDOWN_ACK),
                         -RKV_EINVAL);
        evil_close(&e);
        check_serving(&c, 1 + m);
    }
    expect_logged_once(&c.srv_node[1].log, NULL, "refused a SHUTDOWN");
    cluster_halt(&c);
    /* At the warning level, the default: who stopped it is worth knowing. */
    for (int m = 0; m < 2; m++) {
        char line[64];
        snprintf(line, sizeof(line), "L1 server %d: stopping: SHUTDOWN from client 0", m);
        assert_int_equal(logcap_count(&c.srv_node[m].log, line), 1);
        /* A claim, not a proof, away from server 0: the line named an
         * honest worker as the one that stopped it (an outside tester).
         * Server 0 checks ids, and did say it could not (another). */
        assert_int_equal(logcap_count(&c.srv_node[m].log, "client 0 (as its connection says: only "
                                                          "server 0 checks ids)"),
                         m);
    }
    cluster_free(&c);
}

/* A SHUTDOWN tells the server's other connections once (a notice, an
 * ERROR of request id 0): a client that repeats it, each copy
 * acknowledged, made the server send every connection a notice per copy. */
static void test_shutdown_notice_once(void **state)
{
    struct env *env = *state;
    struct cluster c;
    cluster_start(&c, env, 2, 2);
    cluster_join(&c, env);
    cluster_tensors(&c);
    struct evil a, b;
    evil_open(&b, env);
    evil_connect(&b, &c.machines[1]);
    assert_int_equal(evil_hello(&b, &c, 0, 2), 0);
    evil_open(&a, env);
    evil_connect(&a, &c.machines[1]);
    assert_int_equal(evil_hello(&a, &c, 0, 3), 0);
    for (int k = 0; k < 3; k++)
        assert_int_equal(evil_request(&a, enc_simple(&a, RKV_MSG_SHUTDOWN), RKV_MSG_SHUTDOWN_ACK),
                         0);
    for (int waited = 0; waited < 500; waited += 50)
        evil_pump(&b, 50);
    uint32_t notices = 0, other = 0;
    while (b.q_len) {
        struct rx_msg *r = &b.q[b.q_head];
        b.q_head = (b.q_head + 1) % EV_QUEUE;
        b.q_len--;
        struct rkv_msg m;
        char why[160];
        assert_int_equal(rkv_proto_decode(r->buf, r->len, &m, why, sizeof(why)), 0);
        if (m.h.type == RKV_MSG_ERROR && m.h.req_id == 0 && m.h.status == -RKV_ESHUTDOWN &&
            strstr(m.u.error.text, "server 1 is shutting down: the servers were asked to exit"))
            notices++;
        else if (m.h.type != RKV_MSG_CREDIT)
            other++;
    }
    printf("notices: %u, other messages: %u\n", notices, other);
    assert_int_equal(notices, 1);
    assert_int_equal(other, 0);
    evil_close(&a);
    evil_close(&b);
    cluster_halt(&c); /* the client was told too: server 1 counts as asked */
    cluster_free(&c);
}

/* Barrier squatting and id theft: two extra connections cannot complete a
 * two-worker barrier, cannot take the ids the workers hold, and a second
 * HELLO on one connection ends it. */
static void *barrier_main(void *arg)
{
    return (void *)(intptr_t)rkv_client_barrier(arg);
}

struct joiner {
    struct cluster *c;
    struct env *env;
    struct node nd;
    struct rkv_client *cli;
    int rc;
};

static void *join_main(void *arg)
{
    struct joiner *j = arg;
    char err[256];
    node_open(&j->nd, j->env, "w2");
    j->rc = rkv_client_create_on(j->nd.port, j->nd.nic, &j->c->cfg, &j->cli, err, sizeof(err));
    return NULL;
}

static void test_identity(void **state)
{
    struct env *env = *state;
    env->n_workers = 2;
    struct cluster c;
    cluster_start(&c, env, 2, 2);
    env->n_workers = 0;
    struct joiner j = {.c = &c, .env = env};
    pthread_t jt;
    assert_int_equal(pthread_create(&jt, NULL, join_main, &j), 0);
    cluster_join(&c, env);
    pthread_join(jt, NULL);
    assert_int_equal(j.rc, 0);
    cluster_tensors(&c);
    struct logcap *log0 = &c.srv_node[0].log;
    logcap_reset(log0);
    /* Two squatters on server 0: the ids are held, and without one a
     * connection is no member of any barrier. */
    struct evil sq[2];
    for (int k = 0; k < 2; k++) {
        evil_open(&sq[k], env);
        evil_connect(&sq[k], &c.machines[0]);
        assert_int_equal(evil_hello(&sq[k], &c, (uint32_t)k, 1), -RKV_EINVAL);
    }
    for (int k = 0; k < 2; k++)
        assert_int_equal(
            evil_request(&sq[k], enc_simple(&sq[k], RKV_MSG_BARRIER), RKV_MSG_BARRIER_REPLY),
            -RKV_EINVAL);
    assert_int_equal(logcap_count(log0, "refused a HELLO for client id"), 2);
    /* The real barrier needs both workers, and completes with them. */
    pthread_t bt;
    assert_int_equal(pthread_create(&bt, NULL, barrier_main, j.cli), 0);
    assert_int_equal(rkv_client_barrier(c.cli), 0);
    void *brc;
    pthread_join(bt, &brc);
    assert_int_equal((int)(intptr_t)brc, 0);
    for (int k = 0; k < 2; k++)
        evil_close(&sq[k]);
    /* One HELLO per connection: the second ends it. */
    struct evil e;
    evil_open(&e, env);
    evil_connect(&e, &c.machines[1]);
    assert_int_equal(evil_hello(&e, &c, 0, 1), 0);
    struct rkv_hdr h = {.type = RKV_MSG_HELLO, .req_id = 0x77};
    struct rkv_wire_hello w = {.want_id = 1,
                               .nonce = 1,
                               .cluster = rkv_cfg_fingerprint(&c.cfg),
                               .rx_depth = c.cfg.rx_depth,
                               .ctrl_buf_bytes = c.cfg.ctrl_buf_bytes};
    evil_send(&e, rkv_proto_enc_hello(e.tx, &h, &w));
    evil_expect_dropped(&e);
    evil_close(&e);
    expect_logged_once(&c.srv_node[1].log, NULL, "a second HELLO on one connection");
    check_serving(&c, 1);
    cluster_stop(&c);
    rkv_client_destroy(j.cli);
    node_close(&j.nd);
}

/* A client whose connection to server 0 breaks re-dials and re-joins under
 * its id (what a client does after a request timed out, which is when server
 * 0's engine is slow). With the engine busy, the old connection's going and
 * the new one's HELLO reach it in one batch, the going first: the re-join
 * was taken, and then the old connection's going, told at the batch's end,
 * counted as the client leaving: every barrier failed from then on ("client
 * 1 left; a barrier needs all 2", an outside tester, 2 runs in 2). */
static void test_rejoin_while_engine_busy(void **state)
{
    struct env *env = *state;
    env->n_workers = 2;
    struct cluster c;
    cluster_start(&c, env, 2, 2);
    env->n_workers = 0;
    /* The second worker is a connection driven by hand. */
    struct evil a, b, g;
    evil_open(&a, env);
    evil_connect(&a, &c.machines[0]);
    const uint64_t nonce = 0x5eedf00dULL;
    struct rkv_hdr h = {.type = RKV_MSG_HELLO, .req_id = 0x77};
    struct rkv_wire_hello w = {.want_id = RKV_ID_NONE,
                               .nonce = nonce,
                               .cluster = rkv_cfg_fingerprint(&c.cfg),
                               .rx_depth = c.cfg.rx_depth,
                               .ctrl_buf_bytes = c.cfg.ctrl_buf_bytes};
    evil_send(&a, rkv_proto_enc_hello(a.tx, &h, &w));
    cluster_join(&c, env);
    struct rkv_msg m;
    assert_int_equal(evil_next(&a, &m), 0);
    assert_int_equal(m.h.type, RKV_MSG_HELLO_REPLY);
    const uint32_t id = m.u.hello_reply.client_id;
    cluster_tensors(&c);
    evil_open(&b, env);
    evil_connect(&b, &c.machines[0]);
    /* Server 0's engine held in a custom op, pushed by a third connection
     * (the client's own rows of machine 0 go through shared memory). */
    atomic_store(&gate_entered, 0);
    atomic_store(&gate_open, 0);
    assert_int_equal(rkv_server_register_handler(c.srv[0], RKV_OP_CUSTOM, h_gated_add, NULL), 0);
    evil_open(&g, env);
    evil_connect(&g, &c.machines[0]);
    uint64_t gid = 3;
    struct rkv_hdr ph = {.type = RKV_MSG_PUSH,
                         .req_id = 0x78,
                         .tensor_id = SMALL_ID,
                         .op = RKV_OP_CUSTOM,
                         .count = 1,
                         .row_bytes = SMALL_ROW_BYTES};
    evil_send(&g, rkv_proto_enc_push(g.tx, &ph, &gid, (const float[]){1, 1, 1, 1}));
    for (int ms = 0; ms < (int)WAIT_MS && !atomic_load(&gate_entered); ms++)
        usleep(1000);
    assert_true(atomic_load(&gate_entered));
    evil_close(&a);
    usleep(100 * 1000); /* the server's NIC reads the close while its engine is away */
    w.want_id = id;
    evil_send(&b, rkv_proto_enc_hello(b.tx, &h, &w));
    usleep(100 * 1000);
    atomic_store(&gate_open, 1);
    assert_int_equal(evil_next(&g, &m), 0);
    assert_int_equal(m.h.type, RKV_MSG_PUSH_ACK);
    assert_int_equal(evil_next(&b, &m), 0);
    if (m.h.type != RKV_MSG_HELLO_REPLY)
        fail_msg("the re-join was refused (%d): the close and the HELLO came apart", m.h.status);
    assert_int_equal(m.u.hello_reply.client_id, id);
    /* The client is back: barriers complete, again and again. */
    for (int round = 0; round < 2; round++) {
        pthread_t bt;
        assert_int_equal(pthread_create(&bt, NULL, barrier_main, c.cli), 0);
        int rc = evil_request(&b, enc_simple(&b, RKV_MSG_BARRIER), RKV_MSG_BARRIER_REPLY);
        void *brc;
        pthread_join(bt, &brc);
        if (rc != 0 || (int)(intptr_t)brc != 0)
            fail_msg("barrier %d after the re-join: %d and %d (%s)", round, rc, (int)(intptr_t)brc,
                     rkv_client_errmsg(c.cli));
    }
    check_serving(&c, 50);
    evil_close(&g);
    evil_close(&b);
    cluster_stop(&c);
}

/* Durable mode deduplicates a client's retried push by (client, sequence):
 * the client is the connection's (its HELLO), never the push's sender
 * field, so a peer cannot have a push applied as another client's, nor mark
 * that client's next pushes as applied already. */
static void evil_sum(struct evil *e, uint64_t id, uint64_t seq)
{
    float row[4] = {1, 1, 1, 1};
    struct rkv_hdr h = {.type = RKV_MSG_PUSH,
                        .req_id = seq,
                        .tensor_id = SMALL_ID,
                        .sender = RKV_CLIENT_NODE_BASE + 0, /* "client 0" */
                        .count = 1,
                        .row_bytes = SMALL_ROW_BYTES,
                        .op = RKV_OP_SUM};
    evil_send(e, rkv_proto_enc_push(e->tx, &h, &id, row));
    struct rkv_msg m;
    assert_int_equal(evil_next(e, &m), 0);
    assert_int_equal(m.h.type, RKV_MSG_PUSH_ACK);
    assert_int_equal(m.h.req_id, seq);
}

static void test_push_sender_is_the_connection(void **state)
{
    struct env *env = *state;
    snprintf(env->durable_dir, sizeof(env->durable_dir), "/tmp/rkvh-dur-XXXXXX");
    assert_non_null(mkdtemp(env->durable_dir));
    struct cluster c;
    cluster_start(&c, env, 2, 2);
    char dir[64];
    snprintf(dir, sizeof(dir), "%s", env->durable_dir);
    env->durable_dir[0] = 0;
    cluster_join(&c, env);
    cluster_tensors(&c);
    uint64_t id = 60;
    float zero[4] = {0}, got[4];
    assert_int_equal(rkv_client_push(c.cli, "small", &id, 1, zero, RKV_OP_ASSIGN, 0), 0);
    const uint64_t seq = (0x5aull << RKV_SEQ_TAG_SHIFT) | 0xffffff; /* far ahead */
    /* Without a HELLO the connection is nobody's: both are applied. */
    struct evil e;
    evil_open(&e, env);
    evil_connect(&e, &c.machines[1]);
    evil_sum(&e, id, seq);
    evil_sum(&e, id, seq);
    evil_close(&e);
    assert_int_equal(rkv_client_pull(c.cli, "small", &id, 1, got), 0);
    assert_true(got[0] == 2.0f);
    /* The real client 0's pushes still apply (nothing marked them done). */
    float one[4] = {1, 1, 1, 1};
    assert_int_equal(rkv_client_push(c.cli, "small", &id, 1, one, RKV_OP_SUM, 0), 0);
    assert_int_equal(rkv_client_pull(c.cli, "small", &id, 1, got), 0);
    assert_true(got[0] == 3.0f);
    check_serving(&c, 1);
    cluster_stop(&c);
    char cmd[96];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* Durable mode: a peer that claimed a worker's id at a server other than
 * 0 (which cannot check it) and pushed once with a sequence of that
 * worker's tag far ahead made that server take every later push of the
 * worker for a retry: acknowledged, never applied (an outside tester: 6,441
 * wrong values in 5 s). Only the id's holder there, or a connection of the
 * same client (its HELLO's nonce), is deduplicated under the id. The tag
 * and the nonce are learnt as a hostile server would: machine 2's reads
 * them from the worker's HELLO and a push. The worker shows each server
 * other than 0 a value of its nonce of that server's own, so the one it
 * showed machine 2 is no use at machine 1 (the nonce itself, shown to every
 * server, let the next tester through). */
static void test_claimed_id_cannot_mark_pushes_applied(void **state)
{
    struct env *env = *state;
    snprintf(env->durable_dir, sizeof(env->durable_dir), "/tmp/rkvh-dur-XXXXXX");
    assert_non_null(mkdtemp(env->durable_dir));
    struct cluster c;
    cluster_start(&c, env, 3, 2);
    char dir[64];
    snprintf(dir, sizeof(dir), "%s", env->durable_dir);
    env->durable_dir[0] = 0;
    struct evil_server es = {.as_server = 2};
    evil_open(&es.e, env);
    struct rkv_nic *n = es.e.nd.nic;
    if (n->ops->listen(n, c.machines[2].host, c.machines[2].base_port) < 0)
        fail_msg("the hostile server cannot listen on %s:%u", c.machines[2].host,
                 c.machines[2].base_port);
    assert_int_equal(pthread_create(&es.thr, NULL, evil_server_main, &es), 0);
    cluster_join(&c, env);
    assert_int_equal(rkv_client_init_data(c.cli, &T_SMALL), 0);
    float zero[4] = {0}, one[4] = {1, 1, 1, 1}, got[4];
    uint64_t on2 = 80, on1 = 40; /* machine 2's (hostile), machine 1's */
    assert_int_equal(rkv_client_push(c.cli, "small", &on2, 1, one, RKV_OP_SUM, 0), 0);
    const uint64_t tag = atomic_load(&es.last_push) >> RKV_SEQ_TAG_SHIFT;
    assert_true(tag != 0);
    assert_int_equal(rkv_client_push(c.cli, "small", &on1, 1, zero, RKV_OP_ASSIGN, 0), 0);
    struct evil e;
    evil_open(&e, env);
    evil_connect(&e, &c.machines[1]);
    /* The worker's id, and the nonce it showed machine 2. */
    assert_int_equal(evil_hello(&e, &c, 0, atomic_load(&es.last_nonce)), 0);
    evil_sum(&e, on1, (tag << RKV_SEQ_TAG_SHIFT) | ((1ull << RKV_SEQ_TAG_SHIFT) - 1));
    evil_close(&e);
    for (int i = 0; i < 5; i++)
        assert_int_equal(rkv_client_push(c.cli, "small", &on1, 1, one, RKV_OP_SUM, 0), 0);
    assert_int_equal(rkv_client_pull(c.cli, "small", &on1, 1, got), 0);
    if (got[0] != 6.0f) /* the hostile 1 and the worker's 5 */
        fail_msg("row %llu is %g after 1 + 5 sums: the worker's pushes were taken for retries",
                 (unsigned long long)on1, (double)got[0]);
    atomic_store(&es.stop, 1);
    pthread_join(es.thr, NULL);
    evil_close(&es.e);
    cluster_stop(&c);
    char cmd[96];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* The learning rate of an SGD or ADAGRAD push must be finite and not
 * negative (rkv.h). The C client refuses such a push before sending it,
 * but a server took whatever a PUSH said: one PUSH with lr NaN turned the
 * rows it named into NaN on that server for good (row -= NaN * grad), and
 * a negative one climbed the gradient. The server now refuses it
 * (-RKV_EINVAL) before anything is applied, and the rows stay as they were. */
static void test_push_learning_rate_checked(void **state)
{
    struct env *env = *state;
    struct cluster c;
    cluster_start(&c, env, 2, 2);
    cluster_join(&c, env);
    cluster_tensors(&c);
    uint64_t id = 60; /* machine 1's */
    float before[4] = {1, 2, 3, 4}, got[4];
    assert_int_equal(rkv_client_push(c.cli, "small", &id, 1, before, RKV_OP_ASSIGN, 0), 0);
    struct logcap *log = &c.srv_node[1].log;
    struct evil e;
    evil_open(&e, env);
    evil_connect(&e, &c.machines[1]);
    const struct {
        int op;
        double lr;
    } bad[] = {{RKV_OP_SGD, NAN},
               {RKV_OP_SGD, INFINITY},
               {RKV_OP_SGD, -0.5},
               {RKV_OP_SGD, -INFINITY},
               /* finite as a double, inf as the f32 op's rate: 1 x inf, every row inf */
               {RKV_OP_SGD, 1e39}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        printf("push op %d with learning rate %g\n", bad[i].op, bad[i].lr);
        logcap_reset(log);
        float grad[4] = {1, 1, 1, 1};
        struct rkv_hdr h = {.type = RKV_MSG_PUSH,
                            .req_id = 0x77,
                            .tensor_id = SMALL_ID,
                            .count = 1,
                            .row_bytes = SMALL_ROW_BYTES,
                            .op = (uint16_t)bad[i].op,
                            .param = bad[i].lr};
        size_t len = rkv_proto_enc_push(e.tx, &h, &id, grad);
        assert_int_equal(evil_request(&e, len, RKV_MSG_PUSH_ACK), -RKV_EINVAL);
        expect_logged_once(log, "learning rate", "rejecting PUSH");
        assert_int_equal(rkv_client_pull(c.cli, "small", &id, 1, got), 0);
        assert_memory_equal(got, before, sizeof(before));
    }
    /* A good one on the same connection is applied. */
    float grad[4] = {1, 1, 1, 1};
    struct rkv_hdr h = {.type = RKV_MSG_PUSH,
                        .req_id = 0x77,
                        .tensor_id = SMALL_ID,
                        .count = 1,
                        .row_bytes = SMALL_ROW_BYTES,
                        .op = RKV_OP_SGD,
                        .param = 1.0};
    size_t len = rkv_proto_enc_push(e.tx, &h, &id, grad);
    assert_int_equal(evil_request(&e, len, RKV_MSG_PUSH_ACK), 0);
    evil_close(&e);
    assert_int_equal(rkv_client_pull(c.cli, "small", &id, 1, got), 0);
    const float after[4] = {0, 1, 2, 3};
    assert_memory_equal(got, after, sizeof(after));
    check_serving(&c, 1);
    cluster_stop(&c);
}

/* Per-connection warnings are rate-limited: a thousand peers that each
 * send a malformed message leave a bounded number of lines, and the line
 * after a quiet spell says how many were suppressed. */
#define BAD_PEERS 1000

/* The warning lines a rate limit lets through from t0 (mono_ms) to now: a
 * burst for each window that can have begun in that time. A slow host
 * (ThreadSanitizer, verbs in an emulated VM) can take more than one window. */
static int ratelim_allowed(int64_t t0_ms)
{
    int64_t windows = 1 + (mono_ms() - t0_ms) / (int64_t)(RKV_RATELIM_NS / 1000000);
    return (int)(RKV_RATELIM_BURST * windows);
}

/* Peers that send requests and reset the connection before the replies go:
 * each failed post was a warning (466 lines from 500 peers in 0.6 s, an
 * outside tester). A post to a peer that went is logged at info now (its
 * loss is reported anyway), any other failure rate-limited. */
#define RESET_PEERS 300
static void test_failed_posts_rate_limited(void **state)
{
    struct env *env = *state;
    if (strcmp(env->backend, "tcp") != 0)
        skip();
    struct cluster c;
    cluster_start(&c, env, 2, 2);
    cluster_join(&c, env);
    cluster_tensors(&c);
    struct logcap *log = &c.srv_node[1].log;
    logcap_reset(log);
    static uint8_t msg[RKV_PROTO_HDR_BYTES] __attribute__((aligned(8)));
    /* A BARRIER to server 1 is answered (refused: it goes to server 0). */
    struct rkv_hdr h = {.type = RKV_MSG_BARRIER, .req_id = 9, .sender = 0x666};
    size_t len = rkv_proto_enc_empty(msg, &h);
    const int64_t t0 = mono_ms();
    for (int i = 0; i < RESET_PEERS; i++) {
        int fd = tcp_dial(&c.machines[1]);
        assert_int_equal(raw_hello(fd, env_secret()), 0);
        for (int k = 0; k < 8; k++)
            raw_send_frame(fd, RAW_SEND, (uint32_t)len, msg, len);
        struct linger lg = {.l_onoff = 1, .l_linger = 0}; /* a reset, not a close */
        assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
        close(fd);
    }
    usleep(300 * 1000); /* the last ones handled */
    int lines = logcap_count(log, "engine: post to peer failed");
    int warned = logcap_count(log, " L1 engine: post to peer failed");
    const int allowed = ratelim_allowed(t0);
    printf("%d reset peers: %d failed posts logged, %d as warnings (at most %d)\n", RESET_PEERS,
           lines, warned, allowed);
    assert_true(warned <= allowed);
    check_serving(&c, 1);
    cluster_stop(&c);
}

static void test_warnings_rate_limited(void **state)
{
    struct env *env = *state;
    if (strcmp(env->backend, "tcp") != 0)
        skip();
    struct cluster c;
    cluster_start(&c, env, 2, 2);
    cluster_join(&c, env);
    cluster_tensors(&c);
    struct logcap *log = &c.srv_node[1].log;
    logcap_reset(log);
    static uint8_t junk[64];
    memset(junk, 0x5a, sizeof(junk)); /* no rkv message */
    const int64_t t0 = mono_ms();
    for (int i = 0; i < BAD_PEERS; i++) {
        int fd = tcp_dial(&c.machines[1]);
        assert_int_equal(raw_hello(fd, env_secret()), 0);
        raw_send_frame(fd, RAW_SEND, sizeof(junk), junk, sizeof(junk));
        char b;
        while (read(fd, &b, 1) > 0) /* until the server hangs up */
            ;
        close(fd);
    }
    int lines = logcap_count(log, "closing connection after malformed message");
    int warned = logcap_count(log, " L1 engine: closing connection after malformed");
    const int allowed = ratelim_allowed(t0);
    printf("%d malformed peers: %d lines, %d of them warnings (at most %d)\n", BAD_PEERS, lines,
           warned, allowed);
    assert_int_equal(lines, BAD_PEERS); /* every one is still logged at debug */
    assert_true(warned >= 1 && warned <= allowed);
    check_serving(&c, 1);
    cluster_stop(&c);
}

/* Messages a peer may send in a loop without being dropped for them: a
 * RETIRE of a slot it was never granted, and an ERROR (which no client
 * sends a server). Each was a warning line per message. */
#define STRAY_RETIRES 1000
#define STRAY_ERRORS 200 /* each is answered: fewer than the credit backlog bound */

static void wait_lines(struct logcap *lc, const char *needle, int n)
{
    for (int waited_ms = 0; logcap_count(lc, needle) < n && waited_ms < (int)WAIT_MS;
         waited_ms += 10)
        usleep(10000);
    assert_int_equal(logcap_count(lc, needle), n);
}

static void test_stray_messages_rate_limited(void **state)
{
    struct env *env = *state;
    struct cluster c;
    cluster_start(&c, env, 2, 2);
    cluster_join(&c, env);
    cluster_tensors(&c);
    struct logcap *log = &c.srv_node[1].log;
    logcap_reset(log);
    struct evil e;
    evil_open(&e, env);
    evil_connect(&e, &c.machines[1]);
    for (int i = 0; i < STRAY_RETIRES; i++) {
        struct rkv_hdr h = {.type = RKV_MSG_RNDV_RETIRE, .count = 9999, .sender = 0x666};
        evil_send(&e, rkv_proto_enc_empty(e.tx, &h));
    }
    for (int i = 0; i < STRAY_ERRORS; i++) {
        struct rkv_hdr h = {.type = RKV_MSG_ERROR,
                            .req_id = 0x1000 + (uint64_t)i,
                            .status = -RKV_EIO,
                            .sender = 0x666};
        evil_send(&e, rkv_proto_enc_error(e.tx, EV_CTRL, &h, "not a reply to anything"));
    }
    wait_lines(log, "which it was not granted", STRAY_RETIRES);
    wait_lines(log, "failed: not a reply to anything", STRAY_ERRORS);
    int w_retire = logcap_count(log, "L1 engine: peer retired slot");
    int w_error = logcap_count(log, "L1 reply to request");
    printf("stray messages: %d of %d RETIRE lines and %d of %d ERROR lines are warnings\n",
           w_retire, STRAY_RETIRES, w_error, STRAY_ERRORS);
    assert_true(w_retire >= 1 && w_retire <= (int)RKV_RATELIM_BURST);
    assert_true(w_error >= 1 && w_error <= (int)RKV_RATELIM_BURST);
    evil_close(&e);
    check_serving(&c, 1);
    cluster_stop(&c);
}

/* Flow control that lies: credits returned that were never given, and
 * slots granted past max_slots, on connection after connection. Each is a
 * protocol error that drops the connection, logged as malformed messages
 * are: rate-limited across connections (the second was a warning line per
 * connection). */
#define SLOT_GRANTERS 40

static void evil_reconnect(struct evil *e, const struct rkv_machine *m)
{
    if (e->qp)
        e->nd.nic->ops->qp_close(e->qp);
    e->qp = NULL;
    e->down = 0;
    e->q_len = 0;
    evil_connect(e, m);
}

static void test_flow_control_lies(void **state)
{
    struct env *env = *state;
    struct cluster c;
    cluster_start(&c, env, 2, 2);
    cluster_join(&c, env);
    cluster_tensors(&c);
    struct logcap *log = &c.srv_node[1].log;
    logcap_reset(log);
    struct evil e;
    evil_open(&e, env);
    const int64_t t0 = mono_ms();
    const uint16_t lies[] = {1, UINT16_MAX};
    for (size_t i = 0; i < sizeof(lies) / sizeof(lies[0]); i++) {
        evil_reconnect(&e, &c.machines[1]);
        struct rkv_hdr h = {.type = RKV_MSG_CREDIT, .credits = lies[i], .sender = 0x666};
        evil_send(&e, rkv_proto_enc_empty(e.tx, &h));
        evil_expect_dropped(&e);
    }
    wait_lines(log, "more credits than it was given", 2);
    check_serving(&c, 1);
    const struct rkv_slot_desc d = {.addr = 0x1000, .rkey = 1, .cap = 1 << 20};
    for (int k = 0; k < SLOT_GRANTERS; k++) {
        evil_reconnect(&e, &c.machines[1]);
        for (uint32_t i = 0; i <= c.cfg.push_slots; i++) {
            struct rkv_hdr h = {.type = RKV_MSG_RNDV_REPLY,
                                .tensor_id = 100 + i,
                                .op = RKV_MSG_PUSH_ACK,
                                .sender = 0x666};
            evil_send(&e, rkv_proto_enc_slot(e.tx, &h, &d));
        }
        evil_expect_dropped(&e);
    }
    evil_close(&e);
    wait_lines(log, "more slots than max_slots", SLOT_GRANTERS);
    int warned = logcap_count(log, " L1 engine: ");
    const int allowed = ratelim_allowed(t0);
    printf("flow control lies: %d of %d drop lines are warnings (at most %d)\n", warned,
           SLOT_GRANTERS + 2, allowed);
    assert_true(warned >= 1 && warned <= allowed);
    check_serving(&c, 2);
    cluster_stop(&c);
}

/* A test that failed part way (cmocka jumps out of it) leaves its servers'
 * threads running, logging through nodes on the dead test's stack: the
 * next test would fail on their leftovers (an assertion in the port's log,
 * once), naming itself instead. Stop the run at the test that failed. */
static int after_test(void **state)
{
    struct env *env = *state;
    mallopt(M_PERTURB, 0); /* a test that failed with it set (test_slot_holds_only...) */
    if (env->live_servers > 0) {
        fflush(stdout);
        fprintf(stderr,
                "test_hostile: the test above ended with %u server threads still running; "
                "stopping here, as the tests after it would meet them\n",
                env->live_servers);
        _exit(1);
    }
    return 0;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    struct env env = {0};
    const char *b = getenv("RKV_TEST_BACKEND");
    snprintf(env.backend, sizeof(env.backend), "%s", b && *b ? b : "tcp");
    if (!rkv_nic_find(env.backend)) {
        printf("test_hostile: SKIP: backend %s is not built in\n", env.backend);
        return 77;
    }
    const char *h = getenv("RKV_HOST");
    snprintf(env.host, sizeof(env.host), "%s", h && *h ? h : "127.0.0.1");
    if (strcmp(env.backend, "verbs") == 0) {
#if RKV_WITH_VERBS
        int n = 0;
        struct ibv_device **list = ibv_get_device_list(&n);
        if (list)
            ibv_free_device_list(list);
        if (n == 0) {
            printf("test_hostile: SKIP: no RDMA device on this host (run it under ci/softroce)\n");
            return 77;
        }
        if (!(h && *h) && rdma_host(env.host, sizeof(env.host)) < 0) {
            fprintf(stderr, "test_hostile: no IPv4 address on an RDMA netdev; set RKV_HOST\n");
            return 1;
        }
#endif
    }
    /* 10000-18999: apart from the other tests' ranges, the launcher's
     * (20000-23999) and Linux's ephemeral ports (32768+), where outgoing
     * connections of parallel tests would take them. */
    env.next_port = (uint16_t)(10000 + (getpid() * 7) % 9000);
    printf("test_hostile: backend %s on %s\n", env.backend, env.host);
#define HOSTILE_TEST(f) cmocka_unit_test_prestate_setup_teardown(f, NULL, after_test, &env)
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errf_into_its_own_argument),
        HOSTILE_TEST(test_bad_requests),
        HOSTILE_TEST(test_slot_abuse),
        HOSTILE_TEST(test_slot_holds_only_what_was_written),
        HOSTILE_TEST(test_slot_memory_hoard),
        HOSTILE_TEST(test_slot_hoarder_that_keeps_writing),
        HOSTILE_TEST(test_cross_peer_slot),
        HOSTILE_TEST(test_slot_rewritten_while_handled),
        HOSTILE_TEST(test_slot_rewritten_while_logged),
        HOSTILE_TEST(test_pull_reply_to_nowhere),
        HOSTILE_TEST(test_rendezvous_reply_to_nowhere),
        HOSTILE_TEST(test_rendezvous_unanswered),
        HOSTILE_TEST(test_replies_held_behind_a_rendezvous),
        HOSTILE_TEST(test_replies_held_for_credits_bounded_in_bytes),
        HOSTILE_TEST(test_client_id_past_workers),
        HOSTILE_TEST(test_reply_from_another_server),
        HOSTILE_TEST(test_connection_flood),
        HOSTILE_TEST(test_connections_bounded),
        HOSTILE_TEST(test_claimed_ids_do_not_hold_the_bound),
        HOSTILE_TEST(test_claim_passes_to_the_next_claimant),
        HOSTILE_TEST(test_init_under_another_id),
        HOSTILE_TEST(test_init_phase0_elsewhere_says_so),
        HOSTILE_TEST(test_init_answered_with_another_id),
        HOSTILE_TEST(test_text_secret),
        HOSTILE_TEST(test_connection_churn),
        HOSTILE_TEST(test_credit_hog),
        HOSTILE_TEST(test_silent_and_slow),
        HOSTILE_TEST(test_peer_that_never_reads),
        HOSTILE_TEST(test_peer_that_never_reads_and_goes_quiet),
        HOSTILE_TEST(test_peer_that_reads_slowly),
        HOSTILE_TEST(test_peer_that_reads_at_a_crawl_is_kept),
        HOSTILE_TEST(test_descriptor_exhaustion),
        HOSTILE_TEST(test_shutdown_needs_a_client),
        HOSTILE_TEST(test_shutdown_notice_once),
        HOSTILE_TEST(test_identity),
        HOSTILE_TEST(test_rejoin_while_engine_busy),
        HOSTILE_TEST(test_push_sender_is_the_connection),
        HOSTILE_TEST(test_claimed_id_cannot_mark_pushes_applied),
        HOSTILE_TEST(test_push_learning_rate_checked),
        HOSTILE_TEST(test_warnings_rate_limited),
        HOSTILE_TEST(test_failed_posts_rate_limited),
        HOSTILE_TEST(test_stray_messages_rate_limited),
        HOSTILE_TEST(test_flow_control_lies),
    };
    /* RKV_TEST_FILTER=test_credit_hog (a glob) runs only what it names. */
    const char *filter = getenv("RKV_TEST_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
