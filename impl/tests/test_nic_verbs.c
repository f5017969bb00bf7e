/* The verbs NIC against the semantics of nic.h: two NICs in one process on
 * one RDMA device (soft-RoCE in CI), plus raw rdma_cm to play a foreign
 * peer. Exits 77 (skipped) on a host without an RDMA device; ci/softroce
 * runs it for real. The address is RKV_HOST, or the first non-loopback IPv4
 * address rdma_cm can bind to a device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

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
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "nic/nic.h"
#include "port/port.h"
#include "rkv.h"

#define WAIT_MS 10000u /* every wait for something that must happen (emulated NICs are slow) */
#define QUIET_MS 300u  /* every check that something does not happen */
#define BUF_BYTES (4u << 20)
#define PORT_TRIES 200
#define MANY_QPS 24 /* more than the initial CQ holds: the CQ must grow */

static char g_host[64];      /* the address every NIC listens on and dials */
static uint16_t g_next_port; /* ports are tried upward from a pid-derived base */

struct fx {
    struct rkv_port *pa, *pb;
    struct rkv_nic *a, *b;  /* a connects, b listens */
    uint16_t port;          /* where b listens */
    struct rkv_qp *qa, *qb; /* the two ends of the first connection */
    uint8_t *abuf, *bbuf, *bloc;
    struct rkv_mr *amr;  /* a's source buffer (local) */
    struct rkv_mr *bmr;  /* b's buffer, registered for remote writes */
    struct rkv_mr *blmr; /* b's receive buffer, local access only */
};

static const struct rkv_nic_ops *ops(void)
{
    return &rkv_nic_verbs_ops;
}

static int poll_one(struct rkv_nic *nic, struct rkv_wc *wc, uint32_t timeout_ms)
{
    memset(wc, 0, sizeof(*wc));
    return nic->ops->poll(nic, wc, 1, timeout_ms);
}

static void expect_wc(struct rkv_nic *nic, struct rkv_qp *qp, int opcode, struct rkv_wc *wc_p)
{
    struct rkv_wc wc;
    assert_int_equal(poll_one(nic, &wc, WAIT_MS), 1);
    assert_int_equal(wc.opcode, opcode);
    assert_int_equal(wc.status, RKV_WC_SUCCESS);
    if (qp)
        assert_ptr_equal(wc.qp, qp);
    if (wc_p)
        *wc_p = wc;
}

static void expect_quiet(struct rkv_nic *nic)
{
    struct rkv_wc wc;
    assert_int_equal(poll_one(nic, &wc, QUIET_MS), 0);
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

static void connect_pair(struct fx *f, struct rkv_qp **qa_p, struct rkv_qp **qb_p)
{
    assert_int_equal(f->a->ops->connect(f->a, g_host, f->port, WAIT_MS, qa_p), 0);
    struct rkv_wc wc;
    expect_wc(f->b, NULL, RKV_WC_CONNECTED, &wc);
    assert_non_null(wc.qp);
    *qb_p = wc.qp;
}

static int fx_setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    assert_int_equal(rkv_port_posix_create("a", RKV_LOG_WARN, 1, &f->pa), 0);
    assert_int_equal(rkv_port_posix_create("b", RKV_LOG_WARN, 1, &f->pb), 0);
    assert_int_equal(ops()->open(f->pa, NULL, &f->a), 0);
    assert_int_equal(ops()->open(f->pb, NULL, &f->b), 0);
    assert_int_equal(listen_somewhere(f->b, &f->port), 0);
    f->abuf = calloc(1, BUF_BYTES);
    f->bbuf = calloc(1, BUF_BYTES);
    f->bloc = calloc(1, 4096);
    assert_true(f->abuf && f->bbuf && f->bloc);
    assert_int_equal(f->a->ops->reg_mr(f->a, f->abuf, BUF_BYTES, RKV_ACCESS_LOCAL, &f->amr), 0);
    assert_int_equal(f->b->ops->reg_mr(f->b, f->bbuf, BUF_BYTES, RKV_ACCESS_REMOTE_WRITE, &f->bmr),
                     0);
    assert_int_equal(f->b->ops->reg_mr(f->b, f->bloc, 4096, RKV_ACCESS_LOCAL, &f->blmr), 0);
    connect_pair(f, &f->qa, &f->qb);
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    struct fx *f = *state;
    if (f->b) {
        f->b->ops->dereg_mr(f->b, f->blmr);
        f->b->ops->dereg_mr(f->b, f->bmr);
        f->b->ops->close(f->b);
    }
    f->a->ops->dereg_mr(f->a, f->amr);
    f->a->ops->close(f->a);
    f->pa->ops->destroy(f->pa);
    f->pb->ops->destroy(f->pb);
    free(f->abuf);
    free(f->bbuf);
    free(f->bloc);
    free(f);
    return 0;
}

static struct rkv_sge sge_of(void *addr, uint32_t len, struct rkv_mr *mr)
{
    return (struct rkv_sge){.addr = addr, .len = len, .mr = mr};
}

static void fill(uint8_t *p, size_t len, uint8_t seed)
{
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)(seed + i * 7 + (i >> 9));
}

/* SEND from a into a receive b posted, checked byte for byte. */
static void check_send(struct fx *f, struct rkv_qp *qa, struct rkv_qp *qb, uint8_t seed)
{
    fill(f->abuf, 1000, seed);
    memset(f->bloc, 0, 4096);
    struct rkv_sge rs = sge_of(f->bloc, 4096, f->blmr);
    assert_int_equal(f->b->ops->post_recv(qb, 77, &rs), 0);
    struct rkv_sge ss = sge_of(f->abuf, 1000, f->amr);
    assert_int_equal(f->a->ops->post_send(qa, 5, &ss, 1), 0);
    struct rkv_wc wc;
    expect_wc(f->a, qa, RKV_WC_SEND, &wc);
    assert_int_equal(wc.wr_id, 5);
    assert_int_equal(wc.byte_len, 1000);
    expect_wc(f->b, qb, RKV_WC_RECV, &wc);
    assert_int_equal(wc.wr_id, 77);
    assert_int_equal(wc.byte_len, 1000);
    assert_memory_equal(f->bloc, f->abuf, 1000);
}

/* ---- the happy paths ---- */

static void test_send_recv(void **state)
{
    struct fx *f = *state;
    check_send(f, f->qa, f->qb, 1);
    /* Several receives are consumed in posting order. */
    for (uint64_t i = 0; i < 4; i++) {
        struct rkv_sge rs = sge_of(f->bloc + i * 16, 16, f->blmr);
        assert_int_equal(f->b->ops->post_recv(f->qb, 100 + i, &rs), 0);
    }
    for (uint8_t i = 0; i < 4; i++) {
        f->abuf[i] = (uint8_t)(0xa0 + i);
        struct rkv_sge ss = sge_of(f->abuf + i, 1, f->amr);
        assert_int_equal(f->a->ops->post_send(f->qa, i, &ss, 0), 0);
    }
    for (uint64_t i = 0; i < 4; i++) {
        struct rkv_wc wc;
        expect_wc(f->b, f->qb, RKV_WC_RECV, &wc);
        assert_int_equal(wc.wr_id, 100 + i);
        assert_int_equal(wc.byte_len, 1);
        assert_int_equal(f->bloc[i * 16], 0xa0 + i);
    }
    /* Unsignalled sends complete nothing locally. */
    expect_quiet(f->a);
    /* A zero-length SEND consumes a receive too. */
    struct rkv_sge rs = sge_of(f->bloc, 16, f->blmr);
    assert_int_equal(f->b->ops->post_recv(f->qb, 9, &rs), 0);
    struct rkv_sge empty = sge_of(NULL, 0, NULL);
    assert_int_equal(f->a->ops->post_send(f->qa, 8, &empty, 1), 0);
    struct rkv_wc wc;
    expect_wc(f->a, f->qa, RKV_WC_SEND, &wc);
    expect_wc(f->b, f->qb, RKV_WC_RECV, &wc);
    assert_int_equal(wc.wr_id, 9);
    assert_int_equal(wc.byte_len, 0);
}

/* More unsignalled sends than the send queue holds: the NIC must signal
 * some itself (and hide those completions) so that the queue drains. */
static void test_send_queue_wraps(void **state)
{
    struct fx *f = *state;
    enum { N = 500 }; /* > the default send queue (256), < the default receive queue (512) */
    for (uint64_t i = 0; i < N; i++) {
        struct rkv_sge rs = sge_of(f->bloc + (i % 256) * 16, 16, f->blmr);
        assert_int_equal(f->b->ops->post_recv(f->qb, i, &rs), 0);
    }
    for (uint32_t i = 0; i < N; i++) {
        memcpy(f->abuf + (i % 1024) * 4, &i, 4);
        struct rkv_sge ss = sge_of(f->abuf + (i % 1024) * 4, 4, f->amr);
        assert_int_equal(f->a->ops->post_send(f->qa, i, &ss, i == N - 1), 0);
    }
    for (uint64_t i = 0; i < N; i++) {
        struct rkv_wc wc;
        expect_wc(f->b, f->qb, RKV_WC_RECV, &wc);
        assert_int_equal(wc.wr_id, i);
        assert_int_equal(wc.byte_len, 4);
    }
    struct rkv_wc wc;
    expect_wc(f->a, f->qa, RKV_WC_SEND, &wc); /* the one signalled send, alone */
    assert_int_equal(wc.wr_id, N - 1);
    expect_quiet(f->a);
}

static void test_write_and_write_imm(void **state)
{
    struct fx *f = *state;
    uint64_t base = (uintptr_t)f->bbuf;
    fill(f->abuf, BUF_BYTES, 3);
    struct rkv_sge w = sge_of(f->abuf, 100, f->amr);
    assert_int_equal(f->a->ops->post_write(f->qa, 1, &w, base + 10, f->bmr->rkey, 0, 0, 0), 0);
    /* Large, so that it spans many packets: its completion must wait for the last. */
    uint32_t big = BUF_BYTES - 4096;
    struct rkv_sge wi = sge_of(f->abuf + 4096, big, f->amr);
    struct rkv_sge rs = sge_of(NULL, 0, NULL); /* a WRITE_IMM's receive carries no data */
    assert_int_equal(f->b->ops->post_recv(f->qb, 55, &rs), 0);
    assert_int_equal(
        f->a->ops->post_write(f->qa, 2, &wi, base + 4096, f->bmr->rkey, 1, 0xdeadbeef, 1), 0);
    struct rkv_wc wc;
    expect_wc(f->a, f->qa, RKV_WC_WRITE, &wc);
    assert_int_equal(wc.wr_id, 2);
    expect_wc(f->b, f->qb, RKV_WC_RECV_IMM, &wc);
    assert_int_equal(wc.wr_id, 55);
    assert_int_equal(wc.imm, 0xdeadbeef);
    assert_int_equal(wc.byte_len, big);
    assert_memory_equal(f->bbuf + 10, f->abuf, 100);
    assert_memory_equal(f->bbuf + 4096, f->abuf + 4096, big);
    assert_int_equal(f->bbuf[9], 0);
    assert_int_equal(f->bbuf[110], 0);
    /* A plain WRITE completes nothing at the target. */
    expect_quiet(f->b);
}

/* A SEND posted after a large plain WRITE arrives after the WRITE's data. */
static void test_write_then_send_order(void **state)
{
    struct fx *f = *state;
    fill(f->abuf, BUF_BYTES, 5);
    struct rkv_sge w = sge_of(f->abuf, BUF_BYTES / 2, f->amr);
    assert_int_equal(f->a->ops->post_write(f->qa, 1, &w, (uintptr_t)f->bbuf, f->bmr->rkey, 0, 0, 0),
                     0);
    struct rkv_sge rs = sge_of(f->bloc, 16, f->blmr);
    assert_int_equal(f->b->ops->post_recv(f->qb, 3, &rs), 0);
    struct rkv_sge ss = sge_of(f->abuf + BUF_BYTES - 8, 8, f->amr);
    assert_int_equal(f->a->ops->post_send(f->qa, 4, &ss, 0), 0);
    struct rkv_wc wc;
    expect_wc(f->b, f->qb, RKV_WC_RECV, &wc);
    assert_memory_equal(f->bbuf, f->abuf, BUF_BYTES / 2);
}

static void test_rnr_backpressure(void **state)
{
    struct fx *f = *state;
    fill(f->abuf, 64, 9);
    struct rkv_sge ss = sge_of(f->abuf, 64, f->amr);
    assert_int_equal(f->a->ops->post_send(f->qa, 1, &ss, 0), 0);
    expect_quiet(f->b);
    struct rkv_sge rs = sge_of(f->bloc, 64, f->blmr);
    assert_int_equal(f->b->ops->post_recv(f->qb, 9, &rs), 0);
    struct rkv_wc wc;
    expect_wc(f->b, f->qb, RKV_WC_RECV, &wc);
    assert_int_equal(wc.wr_id, 9);
    assert_memory_equal(f->bloc, f->abuf, 64);

    /* A held-back WRITE_IMM completes only once its receive is posted. */
    struct rkv_sge w = sge_of(f->abuf, 32, f->amr);
    assert_int_equal(f->a->ops->post_write(f->qa, 2, &w, (uintptr_t)f->bbuf, f->bmr->rkey, 1, 7, 0),
                     0);
    expect_quiet(f->b);
    rs = sge_of(NULL, 0, NULL);
    assert_int_equal(f->b->ops->post_recv(f->qb, 10, &rs), 0);
    expect_wc(f->b, f->qb, RKV_WC_RECV_IMM, &wc);
    assert_int_equal(wc.imm, 7);
    assert_memory_equal(f->bbuf, f->abuf, 32);
    /* The connection still works after the stall. */
    check_send(f, f->qa, f->qb, 4);
}

static void test_local_checks(void **state)
{
    struct fx *f = *state;
    struct rkv_sge s = sge_of(f->abuf + BUF_BYTES - 8, 16, f->amr); /* runs past the mr */
    assert_int_equal(f->a->ops->post_send(f->qa, 1, &s, 1), -RKV_EINVAL);
    s = sge_of(f->abuf, 16, NULL);
    assert_int_equal(f->a->ops->post_send(f->qa, 1, &s, 1), -RKV_EINVAL);
    s = sge_of(f->bbuf, 16, f->bmr); /* another NIC's region */
    assert_int_equal(f->a->ops->post_write(f->qa, 1, &s, 0, 1, 0, 0, 1), -RKV_EINVAL);
    s = sge_of(f->abuf, UINT32_MAX, f->amr); /* beyond the port's max_msg_sz */
    assert_int_equal(f->a->ops->post_send(f->qa, 1, &s, 1), -RKV_ELIMIT);
    s = sge_of(f->abuf - 1, 4, f->amr);
    assert_int_equal(f->b->ops->post_recv(f->qb, 1, &s), -RKV_EINVAL);
    expect_quiet(f->a);
    /* Keys are unique and nonzero (a local-only region has no rkey on rxe). */
    struct rkv_mr *m[8];
    for (int i = 0; i < 8; i++) {
        assert_int_equal(f->b->ops->reg_mr(f->b, f->bbuf, 64, RKV_ACCESS_REMOTE_WRITE, &m[i]), 0);
        assert_int_not_equal(m[i]->rkey, 0);
        assert_int_not_equal(m[i]->lkey, 0);
        assert_int_not_equal(m[i]->rkey, f->bmr->rkey);
        for (int j = 0; j < i; j++) {
            assert_int_not_equal(m[i]->rkey, m[j]->rkey);
            assert_int_not_equal(m[i]->lkey, m[j]->lkey);
        }
    }
    for (int i = 0; i < 8; i++)
        f->b->ops->dereg_mr(f->b, m[i]);
    check_send(f, f->qa, f->qb, 2);
}

static void test_reg_mr_errors(void **state)
{
    struct fx *f = *state;
    struct rkv_mr *mr = NULL;
    assert_int_equal(f->a->ops->reg_mr(f->a, f->abuf, 64, 2, &mr), -RKV_EINVAL);
    assert_int_equal(f->a->ops->reg_mr(f->a, NULL, 64, RKV_ACCESS_LOCAL, &mr), -RKV_EINVAL);
    /* Memory that is not mapped cannot be pinned: the NIC says so and goes on. */
    size_t len = 1u << 20;
    void *hole = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(hole != MAP_FAILED);
    assert_int_equal(munmap(hole, len), 0);
    assert_true(f->a->ops->reg_mr(f->a, hole, len, RKV_ACCESS_REMOTE_WRITE, &mr) < 0);
    assert_null(mr);
    /* An empty region is fine (a WRITE_IMM's receive needs none). */
    assert_int_equal(f->a->ops->reg_mr(f->a, NULL, 0, RKV_ACCESS_LOCAL, &mr), 0);
    f->a->ops->dereg_mr(f->a, mr);
    check_send(f, f->qa, f->qb, 3);
}

/* ---- the target defends itself ---- */

/* The first connection was just killed: the writer first hears why (the
 * failed operation, reported even unsignalled), then both ends see one
 * DISCONNECTED and later posts fail. */
static void expect_dropped(struct fx *f, int want_status)
{
    struct rkv_wc wc;
    assert_int_equal(poll_one(f->a, &wc, WAIT_MS), 1);
    assert_ptr_equal(wc.qp, f->qa);
    if (wc.opcode != RKV_WC_DISCONNECTED) {
        assert_int_equal(wc.wr_id, 1);
        if (want_status)
            assert_int_equal(wc.status, want_status);
        else
            assert_int_not_equal(wc.status, RKV_WC_SUCCESS);
        expect_wc(f->a, f->qa, RKV_WC_DISCONNECTED, NULL);
    }
    expect_wc(f->b, f->qb, RKV_WC_DISCONNECTED, NULL);
    struct rkv_sge s = sge_of(f->abuf, 8, f->amr);
    assert_int_equal(f->a->ops->post_send(f->qa, 1, &s, 1), -RKV_EPEERDEAD);
    expect_quiet(f->a);
    expect_quiet(f->b);
    f->a->ops->qp_close(f->qa);
    f->b->ops->qp_close(f->qb);
}

/* ... and b keeps accepting and serving new connections. */
static void expect_still_serving(struct fx *f)
{
    struct rkv_qp *qa, *qb;
    connect_pair(f, &qa, &qb);
    check_send(f, qa, qb, 6);
    expect_quiet(f->a);
    expect_quiet(f->b);
    f->a->ops->qp_close(qa);
    f->b->ops->qp_close(qb);
    f->qa = f->qb = NULL;
}

/* untouched: bytes the write aimed at, which must stay zero. */
static void bad_write(struct fx *f, uint64_t remote_addr, uint32_t rkey, uint32_t len, int imm,
                      const uint8_t *untouched)
{
    struct rkv_sge s = sge_of(f->abuf, len, f->amr);
    fill(f->abuf, len, 11);
    if (imm) {
        struct rkv_sge rs = sge_of(NULL, 0, NULL);
        assert_int_equal(f->b->ops->post_recv(f->qb, 1, &rs), 0);
    }
    /* The sender cannot know: the post itself succeeds. */
    assert_int_equal(f->a->ops->post_write(f->qa, 1, &s, remote_addr, rkey, imm, 0, 0), 0);
    expect_dropped(f, RKV_WC_REM_ACCESS_ERR);
    for (uint32_t i = 0; untouched && i < len; i++)
        assert_int_equal(untouched[i], 0);
    expect_still_serving(f);
}

static void test_reject_unknown_rkey(void **state)
{
    struct fx *f = *state;
    bad_write(f, (uintptr_t)f->bbuf, f->bmr->rkey ^ 0x80000000u, 16, 0, f->bbuf);
}

static void test_reject_past_region(void **state)
{
    struct fx *f = *state;
    bad_write(f, (uintptr_t)f->bbuf + BUF_BYTES - 8, f->bmr->rkey, 16, 0, f->bbuf + BUF_BYTES - 16);
}

static void test_reject_before_region(void **state)
{
    struct fx *f = *state;
    bad_write(f, (uintptr_t)f->bbuf - 1, f->bmr->rkey, 16, 1, f->bbuf);
}

static void test_reject_wrapping_length(void **state)
{
    struct fx *f = *state;
    bad_write(f, UINT64_MAX - 3, f->bmr->rkey, 64, 0, NULL);
}

static void test_reject_local_only_region(void **state)
{
    struct fx *f = *state;
    bad_write(f, (uintptr_t)f->bloc, f->blmr->rkey, 16, 0, f->bloc);
}

static void test_reject_oversized_send(void **state)
{
    struct fx *f = *state;
    struct rkv_sge rs = sge_of(f->bloc, 8, f->blmr);
    assert_int_equal(f->b->ops->post_recv(f->qb, 1, &rs), 0);
    struct rkv_sge ss = sge_of(f->abuf, 64, f->amr);
    assert_int_equal(f->a->ops->post_send(f->qa, 1, &ss, 0), 0);
    expect_dropped(f, 0);
    expect_still_serving(f);
}

/* ---- handshake ---- */

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
    struct fx *f = *state;
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
    expect_quiet(f->b);
    expect_still_serving(f);
}

/* Different RKV_TOKENs refuse each other with a configuration error. */
static void test_token_mismatch(void **state)
{
    struct fx *f = *state;
    struct rkv_port *pc;
    struct rkv_nic *c;
    assert_int_equal(rkv_port_posix_create("c", RKV_LOG_ERROR, 1, &pc), 0);
    assert_int_equal(setenv("RKV_TOKEN", "0x5eed", 1), 0);
    int rc = ops()->open(pc, NULL, &c);
    unsetenv("RKV_TOKEN");
    assert_int_equal(rc, 0);
    struct rkv_qp *qp = NULL;
    assert_int_equal(c->ops->connect(c, g_host, f->port, WAIT_MS, &qp), -RKV_ECONFIG);
    assert_null(qp);
    c->ops->close(c);
    pc->ops->destroy(pc);
    expect_quiet(f->b);
    check_send(f, f->qa, f->qb, 13);
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
    assert_null(c);
    pc->ops->destroy(pc);
}

/* ---- connection lifetime ---- */

static void test_connect_refused(void **state)
{
    struct fx *f = *state;
    uint16_t port;
    struct rkv_nic *b = f->b;
    /* A port that was listened on and is free again refuses connections. */
    struct rkv_port *pc;
    struct rkv_nic *c;
    assert_int_equal(rkv_port_posix_create("c", RKV_LOG_WARN, 1, &pc), 0);
    assert_int_equal(ops()->open(pc, NULL, &c), 0);
    assert_int_equal(listen_somewhere(c, &port), 0);
    c->ops->close(c);
    pc->ops->destroy(pc);
    struct rkv_qp *qp = NULL;
    assert_int_equal(f->a->ops->connect(f->a, g_host, port, WAIT_MS, &qp), -RKV_EPEERDEAD);
    assert_null(qp);
    expect_quiet(f->a);
    expect_quiet(b);
    struct rkv_qp *bad;
    assert_true(f->a->ops->connect(f->a, "no-such-host.invalid", port, WAIT_MS, &bad) < 0);
}

static void test_qp_close(void **state)
{
    struct fx *f = *state;
    /* A completion still queued for a QP closed before it was polled is dropped. */
    struct rkv_sge rs = sge_of(f->bloc, 16, f->blmr);
    assert_int_equal(f->b->ops->post_recv(f->qb, 2, &rs), 0);
    struct rkv_sge ss = sge_of(f->abuf, 8, f->amr);
    assert_int_equal(f->a->ops->post_send(f->qa, 1, &ss, 1), 0);
    expect_wc(f->b, f->qb, RKV_WC_RECV, NULL); /* so a's completion exists */
    f->a->ops->qp_close(f->qa);
    expect_wc(f->b, f->qb, RKV_WC_DISCONNECTED, NULL);
    expect_quiet(f->a); /* neither the SEND nor a DISCONNECTED of its own */
    /* Receives posted on a QP closed later are never completed. */
    assert_int_equal(f->b->ops->post_recv(f->qb, 3, &rs), -RKV_EPEERDEAD);
    f->b->ops->qp_close(f->qb);
    expect_quiet(f->b);
    f->qa = f->qb = NULL;
    struct rkv_qp *qa, *qb;
    connect_pair(f, &qa, &qb);
    check_send(f, qa, qb, 12);
}

static void test_peer_nic_close(void **state)
{
    struct fx *f = *state;
    struct rkv_sge rs = sge_of(f->bloc, 16, f->blmr);
    assert_int_equal(f->b->ops->post_recv(f->qb, 1, &rs), 0);
    f->b->ops->dereg_mr(f->b, f->blmr);
    f->b->ops->dereg_mr(f->b, f->bmr);
    f->b->ops->close(f->b);
    f->b = NULL;
    expect_wc(f->a, f->qa, RKV_WC_DISCONNECTED, NULL);
    struct rkv_sge ss = sge_of(f->abuf, 8, f->amr);
    assert_int_equal(f->a->ops->post_send(f->qa, 1, &ss, 1), -RKV_EPEERDEAD);
    assert_int_equal(f->a->ops->post_recv(f->qa, 1, &ss), -RKV_EPEERDEAD);
    expect_quiet(f->a);
    struct rkv_qp *qp = NULL;
    assert_int_equal(f->a->ops->connect(f->a, g_host, f->port, WAIT_MS, &qp), -RKV_EPEERDEAD);
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
    p->got = poll_one(p->nic, &p->wc, 4 * WAIT_MS);
    p->waited_s = now_s() - t0;
    return NULL;
}

/* A poll() blocked on the completion channel wakes up when the peer goes
 * away (the stall once seen on rxe: nobody told the blocked waiter). */
static void test_disconnect_wakes_blocked_poll(void **state)
{
    struct fx *f = *state;
    struct rkv_sge rs = sge_of(f->bloc, 16, f->blmr);
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

/* Many connections: the shared CQ grows past its initial size. */
static void test_many_connections(void **state)
{
    struct fx *f = *state;
    struct rkv_qp *qa[MANY_QPS], *qb[MANY_QPS];
    for (int i = 0; i < MANY_QPS; i++)
        connect_pair(f, &qa[i], &qb[i]);
    for (int i = 0; i < MANY_QPS; i += 5)
        check_send(f, qa[i], qb[i], (uint8_t)i);
    check_send(f, qa[MANY_QPS - 1], qb[MANY_QPS - 1], 99);
    for (int i = 0; i < MANY_QPS; i++) {
        f->a->ops->qp_close(qa[i]);
        f->b->ops->qp_close(qb[i]);
    }
    expect_quiet(f->a);
    expect_quiet(f->b);
    check_send(f, f->qa, f->qb, 7);
}

/* The same traffic with busy-polled completions. */
static void test_busy_poll(void **state)
{
    (void)state;
    struct fx *f;
    assert_int_equal(setenv("RKV_VERBS_POLL", "1", 1), 0);
    fx_setup((void **)&f);
    unsetenv("RKV_VERBS_POLL");
    check_send(f, f->qa, f->qb, 21);
    struct rkv_sge w = sge_of(f->abuf, 4096, f->amr);
    struct rkv_sge rs = sge_of(NULL, 0, NULL);
    assert_int_equal(f->b->ops->post_recv(f->qb, 1, &rs), 0);
    assert_int_equal(
        f->a->ops->post_write(f->qa, 2, &w, (uintptr_t)f->bbuf, f->bmr->rkey, 1, 42, 1), 0);
    expect_wc(f->a, f->qa, RKV_WC_WRITE, NULL);
    struct rkv_wc wc;
    expect_wc(f->b, f->qb, RKV_WC_RECV_IMM, &wc);
    assert_int_equal(wc.imm, 42);
    assert_memory_equal(f->bbuf, f->abuf, 4096);
    expect_quiet(f->a);
    fx_teardown((void **)&f);
}

static void test_local_addr(void **state)
{
    struct fx *f = *state;
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
#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)
    const struct CMUnitTest tests[] = {
        T(test_send_recv),
        T(test_send_queue_wraps),
        T(test_write_and_write_imm),
        T(test_write_then_send_order),
        T(test_rnr_backpressure),
        T(test_local_checks),
        T(test_reg_mr_errors),
        T(test_reject_unknown_rkey),
        T(test_reject_past_region),
        T(test_reject_before_region),
        T(test_reject_wrapping_length),
        T(test_reject_local_only_region),
        T(test_reject_oversized_send),
        T(test_foreign_handshake_refused),
        T(test_token_mismatch),
        cmocka_unit_test(test_bad_settings),
        T(test_connect_refused),
        T(test_qp_close),
        T(test_peer_nic_close),
        T(test_disconnect_wakes_blocked_poll),
        T(test_many_connections),
        cmocka_unit_test(test_busy_poll),
        T(test_local_addr),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
