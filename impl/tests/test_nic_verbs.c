/* The verbs NIC: the NIC conformance suite (nic_suite.c) with two NICs in
 * one process on one RDMA device (soft-RoCE in CI), then what only verbs
 * has: a send queue that wraps, raw rdma_cm playing a foreign peer, device
 * settings, a poll blocked on the completion channel, busy polling. Exits 77 (skipped) on a host
 * without an RDMA device; ci/softroce runs it for real. The address is RKV_HOST, or the first
 * non-loopback IPv4 address rdma_cm can bind to a device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "nic_suite.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "nic/nic.h"
#include "port/port.h"
#include "rkv.h"

#define WAIT_MS 10000u /* every wait for something that must happen (emulated NICs are slow) */
#define QUIET_MS 300u  /* every check that something does not happen */
#define PORT_TRIES 200

static char g_host[64];      /* the address every NIC listens on and dials */
static uint16_t g_next_port; /* ports are tried upward from a pid-derived base */

static const struct rkv_nic_ops *ops(void)
{
    return &rkv_nic_verbs_ops;
}

static int listen_somewhere(struct rkv_nic *nic, uint16_t *port_p)
{
    for (int i = 0; i < PORT_TRIES; i++) {
        uint16_t p = g_next_port++;
        if (g_next_port < 20000)
            g_next_port = 20000;
        if (nic->ops->listen(nic, g_host, p) == 0) {
            *port_p = p;
            return 0;
        }
    }
    return -1;
}

static int verbs_env_open(void *ctx, const char *node, struct rkv_port **port_p,
                          struct rkv_nic **nic_p)
{
    (void)ctx;
    int rc = rkv_port_posix_create(node, RKV_LOG_WARN, 1, port_p);
    if (rc == 0 && (rc = ops()->open(*port_p, NULL, nic_p)) < 0)
        (*port_p)->ops->destroy(*port_p);
    return rc;
}

static void verbs_env_close(void *ctx, struct rkv_port *port, struct rkv_nic *nic)
{
    (void)ctx;
    nic->ops->close(nic);
    port->ops->destroy(port);
}

static int verbs_env_listen(void *ctx, struct rkv_nic *nic, char *host, size_t host_len,
                            uint16_t *port_p)
{
    (void)ctx;
    snprintf(host, host_len, "%s", g_host);
    return listen_somewhere(nic, port_p);
}

static const struct nic_suite_env verbs_env = {.name = "verbs",
                                               .wait_ms = WAIT_MS,
                                               .quiet_ms = QUIET_MS,
                                               .open = verbs_env_open,
                                               .close = verbs_env_close,
                                               .listen = verbs_env_listen};

/* ---- what only verbs has ---- */

/* More unsignalled sends than the send queue holds: the NIC must signal
 * some itself (and hide those completions) so that the queue drains. */
static void test_send_queue_wraps(void **state)
{
    struct nic_fx *f = *state;
    enum { N = 500 }; /* > the default send queue (256), < the default receive queue (512) */
    for (uint64_t i = 0; i < N; i++) {
        struct rkv_sge rs = nic_sge(f->bloc + (i % 256) * 16, 16, f->blmr);
        assert_int_equal(f->b->ops->post_recv(f->qb, i, &rs), 0);
    }
    for (uint32_t i = 0; i < N; i++) {
        memcpy(f->abuf + (i % 1024) * 4, &i, 4);
        struct rkv_sge ss = nic_sge(f->abuf + (i % 1024) * 4, 4, f->amr);
        assert_int_equal(f->a->ops->post_send(f->qa, i, &ss, i == N - 1), 0);
    }
    for (uint64_t i = 0; i < N; i++) {
        struct rkv_wc wc;
        nic_expect_wc(f, f->b, f->qb, RKV_WC_RECV, &wc);
        assert_int_equal(wc.wr_id, i);
        assert_int_equal(wc.byte_len, 4);
    }
    struct rkv_wc wc;
    nic_expect_wc(f, f->a, f->qa, RKV_WC_SEND, &wc); /* the one signalled send, alone */
    assert_int_equal(wc.wr_id, N - 1);
    nic_expect_quiet(f, f->a);
}

/* Memory that is not mapped cannot be pinned: the NIC says so and goes on. */
static void test_reg_unmapped(void **state)
{
    struct nic_fx *f = *state;
    struct rkv_mr *mr = NULL;
    size_t len = 1u << 20;
    void *hole = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(hole != MAP_FAILED);
    assert_int_equal(munmap(hole, len), 0);
    assert_true(f->a->ops->reg_mr(f->a, hole, len, RKV_ACCESS_REMOTE_WRITE, &mr) < 0);
    assert_null(mr);
    nic_check_send(f, f->qa, f->qb, 3);
}

/* Waits for one rdma_cm event on ch and returns its type (-1 on timeout). */
static int raw_event(struct rdma_event_channel *ch, int *status_p)
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

/* A peer that speaks rdma_cm but not rkv's handshake is refused. */
static void test_foreign_handshake_refused(void **state)
{
    struct nic_fx *f = *state;
    struct rdma_event_channel *ch = rdma_create_event_channel();
    assert_non_null(ch);
    struct rdma_cm_id *id;
    assert_int_equal(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(f->port)};
    assert_int_equal(inet_pton(AF_INET, g_host, &sa.sin_addr), 1);
    assert_int_equal(rdma_resolve_addr(id, NULL, (struct sockaddr *)&sa, 2000), 0);
    assert_int_equal(raw_event(ch, NULL), RDMA_CM_EVENT_ADDR_RESOLVED);
    assert_int_equal(rdma_resolve_route(id, 2000), 0);
    assert_int_equal(raw_event(ch, NULL), RDMA_CM_EVENT_ROUTE_RESOLVED);
    struct rdma_conn_param cp = {.retry_count = 7, .rnr_retry_count = 7, .qp_num = 0x1234};
    assert_int_equal(rdma_connect(id, &cp), 0);
    assert_int_equal(raw_event(ch, NULL), RDMA_CM_EVENT_REJECTED);
    rdma_destroy_id(id);
    rdma_destroy_event_channel(ch);
    nic_expect_quiet(f, f->b);
    nic_expect_still_serving(f);
}

static void test_bad_settings(void **state)
{
    (void)state;
    struct rkv_port *pc;
    struct rkv_nic *c = NULL;
    assert_int_equal(rkv_port_posix_create("c", RKV_LOG_ERROR, 1, &pc), 0);
    assert_int_equal(ops()->open(pc, "no-such-device0", &c), -RKV_ECONFIG);
    assert_int_equal(ops()->open(pc, "rxe0:x", &c), -RKV_ECONFIG);
    assert_int_equal(setenv("RKV_VERBS_SQ_DEPTH", "lots", 1), 0);
    assert_int_equal(ops()->open(pc, NULL, &c), -RKV_ECONFIG);
    unsetenv("RKV_VERBS_SQ_DEPTH");
    /* The fabric settings: out of range, or past the port's GID table. */
    static const char *const bad[][2] = {
        {"RKV_VERBS_TOS", "256"},  {"RKV_VERBS_SL", "16"},        {"RKV_VERBS_GID_INDEX", "65535"},
        {"RKV_VERBS_MTU", "1000"}, {"RKV_VERBS_SRQ_DEPTH", "-1"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(setenv(bad[i][0], bad[i][1], 1), 0);
        assert_int_equal(ops()->open(pc, NULL, &c), -RKV_ECONFIG);
        unsetenv(bad[i][0]);
    }
    assert_null(c);
    pc->ops->destroy(pc);
}

struct poller {
    struct rkv_nic *nic;
    struct rkv_wc wc;
    int got;
    double waited_s;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *poller_main(void *arg)
{
    struct poller *p = arg;
    double t0 = now_s();
    p->got = nic_poll_one(p->nic, &p->wc, 4 * WAIT_MS);
    p->waited_s = now_s() - t0;
    return NULL;
}

/* A poll() blocked on the completion channel wakes up when the peer goes
 * away (the stall once seen on rxe: nobody told the blocked waiter). */
static void test_disconnect_wakes_blocked_poll(void **state)
{
    struct nic_fx *f = *state;
    struct rkv_sge rs = nic_sge(f->bloc, 16, f->blmr);
    assert_int_equal(f->b->ops->post_recv(f->qb, 1, &rs), 0);
    struct poller p = {.nic = f->b};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, poller_main, &p), 0);
    usleep(300 * 1000); /* let it block */
    f->a->ops->qp_close(f->qa);
    f->qa = NULL;
    pthread_join(t, NULL);
    assert_int_equal(p.got, 1);
    assert_int_equal(p.wc.opcode, RKV_WC_DISCONNECTED);
    assert_ptr_equal(p.wc.qp, f->qb);
    assert_true(p.waited_s < WAIT_MS / 1000.0);
    f->b->ops->qp_close(f->qb);
    f->qb = NULL;
}

/* The same traffic with busy-polled completions. */
static void test_busy_poll(void **state)
{
    (void)state;
    assert_int_equal(setenv("RKV_VERBS_POLL", "1", 1), 0);
    void *st = (void *)&verbs_env;
    nic_fx_setup(&st);
    unsetenv("RKV_VERBS_POLL");
    struct nic_fx *f = st;
    nic_check_send(f, f->qa, f->qb, 21);
    struct rkv_sge w = nic_sge(f->abuf, 4096, f->amr);
    struct rkv_sge rs = nic_sge(NULL, 0, NULL);
    assert_int_equal(f->b->ops->post_recv(f->qb, 1, &rs), 0);
    assert_int_equal(
        f->a->ops->post_write(f->qa, 2, &w, (uintptr_t)f->bbuf, f->bmr->rkey, 1, 42, 1), 0);
    nic_expect_wc(f, f->a, f->qa, RKV_WC_WRITE, NULL);
    struct rkv_wc wc;
    nic_expect_wc(f, f->b, f->qb, RKV_WC_RECV_IMM, &wc);
    assert_int_equal(wc.imm, 42);
    assert_memory_equal(f->bbuf, f->abuf, 4096);
    nic_expect_quiet(f, f->a);
    nic_fx_teardown(&st);
}

/* Ends with different MTUs connect at the smaller one (rxe drops a packet
 * longer than its QP's path MTU, so a multi-packet message in both
 * directions proves both ends agree). */
static void test_unequal_mtus(void **state)
{
    struct nic_fx *f = *state;
    assert_int_equal(setenv("RKV_VERBS_MTU", "256", 1), 0);
    struct rkv_port *pc;
    struct rkv_nic *c;
    int rc = verbs_env_open(NULL, "c", &pc, &c);
    unsetenv("RKV_VERBS_MTU");
    assert_int_equal(rc, 0);
    uint8_t *cbuf = calloc(1, 8192);
    assert_non_null(cbuf);
    struct rkv_mr *cmr;
    assert_int_equal(c->ops->reg_mr(c, cbuf, 8192, RKV_ACCESS_LOCAL, &cmr), 0);
    /* c dials b (the accept side lowers its path MTU)... */
    struct rkv_qp *qc, *qb;
    assert_int_equal(c->ops->connect(c, f->host, f->port, WAIT_MS, &qc), 0);
    struct rkv_wc wc;
    nic_expect_wc(f, f->b, NULL, RKV_WC_CONNECTED, &wc);
    qb = wc.qp;
    nic_fill(cbuf, 3000, 9);
    struct rkv_sge rs = nic_sge(f->bloc, 4096, f->blmr);
    assert_int_equal(f->b->ops->post_recv(qb, 1, &rs), 0);
    struct rkv_sge ss = nic_sge(cbuf, 3000, cmr);
    assert_int_equal(c->ops->post_send(qc, 2, &ss, 1), 0);
    nic_expect_wc(f, c, qc, RKV_WC_SEND, NULL);
    nic_expect_wc(f, f->b, qb, RKV_WC_RECV, &wc);
    assert_int_equal(wc.byte_len, 3000);
    assert_memory_equal(f->bloc, cbuf, 3000);
    /* ... and the other way (the dialling side lowers its own). */
    uint16_t port;
    assert_int_equal(listen_somewhere(c, &port), 0);
    struct rkv_qp *qa, *qc2;
    assert_int_equal(f->a->ops->connect(f->a, g_host, port, WAIT_MS, &qa), 0);
    nic_expect_wc(f, c, NULL, RKV_WC_CONNECTED, &wc);
    qc2 = wc.qp;
    struct rkv_sge crs = nic_sge(cbuf + 4096, 4096, cmr);
    assert_int_equal(c->ops->post_recv(qc2, 3, &crs), 0);
    nic_fill(f->abuf, 3000, 10);
    struct rkv_sge as = nic_sge(f->abuf, 3000, f->amr);
    assert_int_equal(f->a->ops->post_send(qa, 4, &as, 1), 0);
    nic_expect_wc(f, f->a, qa, RKV_WC_SEND, NULL);
    nic_expect_wc(f, c, qc2, RKV_WC_RECV, &wc);
    assert_int_equal(wc.byte_len, 3000);
    assert_memory_equal(cbuf + 4096, f->abuf, 3000);
    f->a->ops->qp_close(qa);
    f->b->ops->qp_close(qb);
    c->ops->dereg_mr(c, cmr);
    verbs_env_close(NULL, pc, c);
    free(cbuf);
}

/* The GID index of g_host's address on the port a NIC opened (-1: none). */
static int host_gid_index(void)
{
    int n = 0, found = -1;
    struct ibv_device **list = ibv_get_device_list(&n);
    struct in_addr a;
    if (!list || inet_pton(AF_INET, g_host, &a) != 1)
        goto out;
    for (int d = 0; d < n && found < 0; d++) {
        struct ibv_context *ctx = ibv_open_device(list[d]);
        struct ibv_port_attr pa;
        if (!ctx)
            continue;
        if (ibv_query_port(ctx, 1, &pa) == 0)
            for (int i = 0; i < pa.gid_tbl_len && found < 0; i++) {
                union ibv_gid g;
                /* ::ffff:a.b.c.d */
                if (ibv_query_gid(ctx, 1, i, &g) == 0 && g.raw[10] == 0xff && g.raw[11] == 0xff &&
                    memcmp(g.raw + 12, &a, 4) == 0)
                    found = i;
            }
        ibv_close_device(ctx);
    }
out:
    if (list)
        ibv_free_device_list(list);
    return found;
}

/* A traffic class and an explicit GID index on both ends (as a PFC RoCE
 * fabric sets them), the device found from RKV_HOST: the connection comes
 * up and carries data. */
static void test_fabric_settings(void **state)
{
    (void)state;
    int gid = host_gid_index();
    assert_true(gid >= 0);
    char gbuf[16];
    snprintf(gbuf, sizeof(gbuf), "%d", gid);
    assert_int_equal(setenv("RKV_VERBS_TOS", "106", 1), 0);
    assert_int_equal(setenv("RKV_VERBS_GID_INDEX", gbuf, 1), 0);
    assert_int_equal(setenv("RKV_HOST", g_host, 1), 0);
    unsetenv("RKV_VERBS_DEV");
    void *st = (void *)&verbs_env;
    nic_fx_setup(&st);
    unsetenv("RKV_VERBS_TOS");
    unsetenv("RKV_VERBS_GID_INDEX");
    struct nic_fx *f = st;
    nic_check_send(f, f->qa, f->qb, 31);
    char buf[64];
    assert_int_equal(f->a->ops->local_addr(f->a, f->host, f->port, buf, sizeof(buf)), 0);
    nic_fx_teardown(&st);
}

/* The settings table's verbs knobs (rkv_config.verbs) reach the NIC after
 * open: a bad one is refused by the NIC too (an MTU that is none, a GID
 * past the port's table); once a listener exists they are fixed, and only
 * the same values again are taken. */
static void test_set_verbs(void **state)
{
    (void)state;
    struct rkv_port *pa;
    struct rkv_nic *a = NULL;
    assert_int_equal(rkv_port_posix_create("a", RKV_LOG_ERROR, 1, &pa), 0);
    assert_int_equal(ops()->open(pa, NULL, &a), 0);
    assert_non_null(a->ops->set_verbs);
    struct rkv_nic_verbs_opts none = {-1, -1, -1, -1, -1};
    struct rkv_nic_verbs_opts o = none;
    o.mtu = 1000;
    assert_int_equal(a->ops->set_verbs(a, &o), -RKV_ECONFIG);
    o = none;
    o.gid_index = 65535;
    assert_int_equal(a->ops->set_verbs(a, &o), -RKV_ECONFIG);
    o = none;
    o.tos = 106;
    o.mtu = 1024;
    o.srq_depth = 0;
    assert_int_equal(a->ops->set_verbs(a, &o), 0);
    assert_int_equal(a->ops->set_verbs(a, &none), 0); /* -1: keep what is set */
    uint16_t port;
    assert_int_equal(listen_somewhere(a, &port), 0);
    assert_int_equal(a->ops->set_verbs(a, &o), 0); /* the same again */
    o.tos = 0;
    assert_int_equal(a->ops->set_verbs(a, &o), -RKV_EINVAL);
    a->ops->close(a);
    pa->ops->destroy(pa);
}

/* ---- what a peer costs (the README's figures come from here) ---- */

#define MEM_PEERS 32u        /* under the ~42 one process could hold before the SRQ */
#define MEM_RX_DEPTH 64u     /* the engine's rx_depth default */
#define MEM_CTRL_BYTES 8192u /* the engine's ctrl_buf_bytes default */
#define MEM_SRQ_BUFS 512u    /* the engine's pool: 8 x rx_depth */

struct mem_use {
    long pin_kb, rss_kb;
};

static struct mem_use mem_now(void)
{
    struct mem_use m = {-1, -1};
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    while (f && fgets(line, sizeof(line), f)) {
        sscanf(line, "VmPin: %ld", &m.pin_kb);
        sscanf(line, "VmRSS: %ld", &m.rss_kb);
    }
    if (f)
        fclose(f);
    return m;
}

/* The peers: a child process (so that its QPs are not counted) connects
 * MEM_PEERS times to the port it reads from `in`, says so on `out`, and
 * closes when `in` says so. */
static void mem_peers_child(int in, int out)
{
    uint16_t port;
    if (read(in, &port, sizeof(port)) != (ssize_t)sizeof(port))
        _exit(2);
    struct rkv_port *pp;
    struct rkv_nic *nic;
    if (verbs_env_open(NULL, "peers", &pp, &nic) < 0)
        _exit(3);
    struct rkv_qp *qp[MEM_PEERS];
    for (uint32_t i = 0; i < MEM_PEERS; i++)
        if (nic->ops->connect(nic, g_host, port, WAIT_MS, &qp[i]) < 0)
            _exit(4);
    char c = 1;
    if (write(out, &c, 1) != 1 || read(in, &c, 1) != 1)
        _exit(5);
    verbs_env_close(NULL, pp, nic);
    _exit(0);
}

/* One server NIC with MEM_PEERS connections, receives as the engine posts
 * them: per peer (rx_depth buffers of ctrl_buf_bytes each, registered and
 * posted on the peer's QP, with the old defaults sq 256 / rq 512) or from
 * the shared pool. Returns the cost per NIC and per peer. */
static void mem_measure(int shared, struct mem_use *nic_p, struct mem_use *peer_p)
{
    int to_child[2], to_parent[2];
    assert_int_equal(pipe(to_child), 0);
    assert_int_equal(pipe(to_parent), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(to_child[1]);
        close(to_parent[0]);
        mem_peers_child(to_child[0], to_parent[1]);
    }
    close(to_child[0]);
    close(to_parent[1]);
    if (!shared) {
        setenv("RKV_VERBS_SQ_DEPTH", "256", 1);
        setenv("RKV_VERBS_RX_DEPTH", "512", 1);
    }
    struct mem_use m0 = mem_now();
    struct rkv_port *pp;
    struct rkv_nic *nic;
    assert_int_equal(verbs_env_open(NULL, "server", &pp, &nic), 0);
    unsetenv("RKV_VERBS_SQ_DEPTH");
    unsetenv("RKV_VERBS_RX_DEPTH");
    uint8_t *base = NULL;
    if (shared) {
        uint32_t count = MEM_SRQ_BUFS;
        assert_int_equal(nic->ops->srq_setup(nic, &count, MEM_CTRL_BYTES, 1, &base), 0);
        assert_int_equal(count, MEM_SRQ_BUFS);
    }
    uint16_t port;
    assert_int_equal(listen_somewhere(nic, &port), 0);
    struct mem_use m1 = mem_now();
    assert_int_equal(write(to_child[1], &port, sizeof(port)), (ssize_t)sizeof(port));
    uint8_t *rx[MEM_PEERS] = {0};
    struct rkv_mr *mr[MEM_PEERS] = {0};
    for (uint32_t i = 0; i < MEM_PEERS; i++) {
        struct rkv_wc wc;
        assert_int_equal(nic_poll_one(nic, &wc, WAIT_MS), 1);
        assert_int_equal(wc.opcode, RKV_WC_CONNECTED);
        if (shared)
            continue;
        size_t bytes = (size_t)MEM_RX_DEPTH * MEM_CTRL_BYTES;
        assert_int_equal(posix_memalign((void **)&rx[i], 64, bytes), 0);
        assert_int_equal(nic->ops->reg_mr(nic, rx[i], bytes, RKV_ACCESS_LOCAL, &mr[i]), 0);
        for (uint32_t k = 0; k < MEM_RX_DEPTH; k++) {
            struct rkv_sge sge = nic_sge(rx[i] + (size_t)k * MEM_CTRL_BYTES, MEM_CTRL_BYTES, mr[i]);
            assert_int_equal(nic->ops->post_recv(wc.qp, k, &sge), 0);
        }
    }
    char c;
    assert_int_equal(read(to_parent[0], &c, 1), 1);
    struct mem_use m2 = mem_now();
    c = 1;
    assert_int_equal(write(to_child[1], &c, 1), 1);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    verbs_env_close(NULL, pp, nic); /* deregisters what is left */
    for (uint32_t i = 0; i < MEM_PEERS; i++)
        free(rx[i]);
    close(to_child[1]);
    close(to_parent[0]);
    *nic_p = (struct mem_use){m1.pin_kb - m0.pin_kb, m1.rss_kb - m0.rss_kb};
    /* per peer in bytes: a QP of its own costs less than a KiB of RSS */
    *peer_p = (struct mem_use){(m2.pin_kb - m1.pin_kb) * 1024 / (long)MEM_PEERS,
                               (m2.rss_kb - m1.rss_kb) * 1024 / (long)MEM_PEERS};
}

static void test_memory_per_peer(void **state)
{
    (void)state;
    struct mem_use nic_a, peer_a, nic_b, peer_b;
    mem_measure(0, &nic_a, &peer_a);
    mem_measure(1, &nic_b, &peer_b);
    printf("test_nic_verbs: memory, %u peers into one NIC (VmPin = pinned, VmRSS = resident):\n"
           "  receive queue per peer: per NIC pinned %ld KiB rss %ld KiB; per peer pinned %ld B "
           "rss %ld B\n"
           "  shared receive queue:   per NIC pinned %ld KiB rss %ld KiB; per peer pinned %ld B "
           "rss %ld B\n",
           MEM_PEERS, nic_a.pin_kb, nic_a.rss_kb, peer_a.pin_kb, peer_a.rss_kb, nic_b.pin_kb,
           nic_b.rss_kb, peer_b.pin_kb, peer_b.rss_kb);
    /* The engine's receive buffers were pinned per peer; with the pool a
     * peer pins nothing of its own. */
    assert_true(peer_a.pin_kb >= (long)(MEM_RX_DEPTH * MEM_CTRL_BYTES));
    assert_int_equal(peer_b.pin_kb, 0);
    assert_true(nic_b.pin_kb >= (long)(MEM_SRQ_BUFS * MEM_CTRL_BYTES / 1024));
    assert_true(peer_b.rss_kb < peer_a.rss_kb);
}

/* One device: the peer is this host, and so is the address toward it. */
static void test_local_addr_is_the_device(void **state)
{
    struct nic_fx *f = *state;
    char buf[64];
    assert_int_equal(f->a->ops->local_addr(f->a, g_host, f->port, buf, sizeof(buf)), 0);
    assert_string_equal(buf, g_host); /* one device: the peer is this host */
}

/* ---- set-up ---- */

/* The first non-loopback IPv4 address rdma_cm can bind to an RDMA device. */
static int find_host(void)
{
    const char *env = getenv("RKV_HOST");
    if (env && *env) {
        snprintf(g_host, sizeof(g_host), "%s", env);
        return 0;
    }
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
            inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr, g_host,
                      sizeof(g_host));
            found = 0;
        }
        rdma_destroy_id(id);
    }
    freeifaddrs(ifs);
    return found;
}

int main(void)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (list)
        ibv_free_device_list(list);
    if (n == 0) {
        printf("test_nic_verbs: SKIP: no RDMA device on this host (run it under ci/softroce)\n");
        return 77;
    }
    if (find_host() < 0) {
        fprintf(stderr, "test_nic_verbs: no IPv4 address on an RDMA netdev; set RKV_HOST\n");
        return 1;
    }
    g_next_port = (uint16_t)(20000 + (getpid() % 20000));
    printf("test_nic_verbs: on %s\n", g_host);
    int failed = nic_suite_run(&verbs_env);
#define T(fn)                                                                                      \
    cmocka_unit_test_prestate_setup_teardown(fn, nic_fx_setup, nic_fx_teardown, (void *)&verbs_env)
    const struct CMUnitTest tests[] = {
        T(test_send_queue_wraps),
        T(test_reg_unmapped),
        T(test_foreign_handshake_refused),
        cmocka_unit_test(test_bad_settings),
        T(test_disconnect_wakes_blocked_poll),
        cmocka_unit_test(test_busy_poll),
        T(test_local_addr_is_the_device),
        T(test_unequal_mtus),
        cmocka_unit_test(test_fabric_settings),
        cmocka_unit_test(test_set_verbs),
        cmocka_unit_test(test_memory_per_peer),
    };
#undef T
    return failed + cmocka_run_group_tests_name("verbs only", tests, NULL, NULL);
}
