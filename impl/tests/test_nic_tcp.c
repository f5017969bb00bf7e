/* The TCP NIC against the semantics of nic.h: two NICs in one process over
 * 127.0.0.1, plus a raw socket to play a hostile peer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "raw_frames.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "nic/nic.h"
#include "nic/nic_tcp.h"
#include "port/port.h"
#include "rkv.h"

#define WAIT_MS 2000u /* every wait for something that must happen */
#define QUIET_MS 200u /* every check that something does not happen */
#define BUF_BYTES (8u << 20)

/* Mirror of nic_tcp.c's private frame header (little-endian). */
#define FRAME_MAGIC 0x544b5652u
#define FRAME_HDR_BYTES 32
enum { FRAME_SEND = 1, FRAME_WRITE = 2, FRAME_WRITE_IMM = 3 };

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

/* Connects a to b; returns both ends. */
static void connect_pair(struct fx *f, struct rkv_qp **qa_p, struct rkv_qp **qb_p)
{
    assert_int_equal(f->a->ops->connect(f->a, "127.0.0.1", f->port, WAIT_MS, qa_p), 0);
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
    assert_int_equal(rkv_nic_tcp_ops.open(f->pa, NULL, &f->a), 0);
    assert_int_equal(rkv_nic_tcp_ops.open(f->pb, NULL, &f->b), 0);
    assert_int_equal(rkv_nic_tcp_bound_port(f->b, &f->port), -RKV_EINVAL);
    assert_int_equal(f->b->ops->listen(f->b, "127.0.0.1", 0), 0);
    assert_int_equal(rkv_nic_tcp_bound_port(f->b, &f->port), 0);
    assert_int_not_equal(f->port, 0);
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
}

static void test_write_and_write_imm(void **state)
{
    struct fx *f = *state;
    uint64_t base = (uintptr_t)f->bbuf;
    fill(f->abuf, BUF_BYTES, 3);
    struct rkv_sge w = sge_of(f->abuf, 100, f->amr);
    assert_int_equal(f->a->ops->post_write(f->qa, 1, &w, base + 10, f->bmr->rkey, 0, 0, 0), 0);
    /* Large, so that it lands over many reads: its completion must wait for the last. */
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

    /* A held-back WRITE_IMM writes nothing before its receive is posted. */
    struct rkv_sge w = sge_of(f->abuf, 32, f->amr);
    assert_int_equal(f->a->ops->post_write(f->qa, 2, &w, (uintptr_t)f->bbuf, f->bmr->rkey, 1, 7, 0),
                     0);
    expect_quiet(f->b);
    assert_int_equal(f->bbuf[0], 0);
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
    s = sge_of(f->abuf, (1u << 30) + 1, f->amr);
    assert_int_equal(f->a->ops->post_send(f->qa, 1, &s, 1), -RKV_ELIMIT);
    s = sge_of(f->abuf - 1, 4, f->amr);
    assert_int_equal(f->b->ops->post_recv(f->qb, 1, &s), -RKV_EINVAL);
    expect_quiet(f->a);
    /* Keys are unique and nonzero. */
    struct rkv_mr *m[8];
    for (int i = 0; i < 8; i++) {
        assert_int_equal(f->b->ops->reg_mr(f->b, f->bbuf, 64, RKV_ACCESS_LOCAL, &m[i]), 0);
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

/* ---- the target defends itself ---- */

/* The first connection was just killed by the target: both ends see it and
 * later posts fail. */
static void expect_dropped(struct fx *f)
{
    expect_wc(f->b, f->qb, RKV_WC_DISCONNECTED, NULL);
    expect_wc(f->a, f->qa, RKV_WC_DISCONNECTED, NULL);
    struct rkv_sge s = sge_of(f->abuf, 8, f->amr);
    assert_int_equal(f->a->ops->post_send(f->qa, 1, &s, 1), -RKV_EPEERDEAD);
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
    expect_dropped(f);
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
    expect_dropped(f);
    assert_int_equal(f->bloc[0], 0);
    expect_still_serving(f);
}

/* ---- raw frames ---- */

static void frame(uint8_t *h, uint32_t magic, uint8_t kind, uint32_t len, uint32_t imm,
                  uint64_t addr, uint32_t rkey)
{
    memset(h, 0, FRAME_HDR_BYTES);
    for (int i = 0; i < 4; i++) {
        h[0 + i] = (uint8_t)(magic >> (8 * i));
        h[8 + i] = (uint8_t)(len >> (8 * i));
        h[12 + i] = (uint8_t)(imm >> (8 * i));
        h[24 + i] = (uint8_t)(rkey >> (8 * i));
    }
    for (int i = 0; i < 8; i++)
        h[16 + i] = (uint8_t)(addr >> (8 * i));
    h[4] = kind;
}

/* Opens a raw connection to b and returns b's end of it. */
static int raw_connect(struct fx *f, struct rkv_qp **qb_p)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(f->port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(raw_hello(fd, 0), 0);
    struct rkv_wc wc;
    expect_wc(f->b, NULL, RKV_WC_CONNECTED, &wc);
    *qb_p = wc.qp;
    return fd;
}

static void raw_send(int fd, const void *p, size_t len)
{
    assert_int_equal(send(fd, p, len, MSG_NOSIGNAL), (ssize_t)len);
}

/* b must drop the raw connection (EOF or reset) and say so once. */
static void raw_expect_dropped(struct fx *f, int fd, struct rkv_qp *qb)
{
    expect_wc(f->b, qb, RKV_WC_DISCONNECTED, NULL);
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    uint8_t junk[64];
    ssize_t r = 1;
    while (r > 0) {
        assert_int_equal(poll(&pfd, 1, WAIT_MS), 1);
        r = recv(fd, junk, sizeof(junk), 0);
    }
    assert_true(r == 0 || errno == ECONNRESET);
    close(fd);
    f->b->ops->qp_close(qb);
    expect_quiet(f->b);
    check_send(f, f->qa, f->qb, 8);
}

/* Proves the test's mirror of the frame layout, so the hostile frames below
 * fail for the reason they were built for. */
static void test_raw_valid_frames(void **state)
{
    struct fx *f = *state;
    struct rkv_qp *qb;
    int fd = raw_connect(f, &qb);
    uint8_t h[FRAME_HDR_BYTES];
    frame(h, FRAME_MAGIC, FRAME_WRITE, 5, 0, (uintptr_t)f->bbuf + 100, f->bmr->rkey);
    raw_send(fd, h, sizeof(h));
    raw_send(fd, "hello", 5);
    struct rkv_sge rs = sge_of(f->bloc, 16, f->blmr);
    assert_int_equal(f->b->ops->post_recv(qb, 31, &rs), 0);
    frame(h, FRAME_MAGIC, FRAME_SEND, 3, 0, 0, 0);
    raw_send(fd, h, sizeof(h));
    raw_send(fd, "abc", 3);
    struct rkv_wc wc;
    expect_wc(f->b, qb, RKV_WC_RECV, &wc);
    assert_int_equal(wc.wr_id, 31);
    assert_int_equal(wc.byte_len, 3);
    assert_memory_equal(f->bloc, "abc", 3);
    assert_memory_equal(f->bbuf + 100, "hello", 5); /* the earlier WRITE landed first */
    close(fd);
    expect_wc(f->b, qb, RKV_WC_DISCONNECTED, NULL);
    f->b->ops->qp_close(qb);
}

static void raw_bad_header(struct fx *f, uint32_t magic, uint8_t kind, uint32_t len)
{
    struct rkv_qp *qb;
    int fd = raw_connect(f, &qb);
    struct rkv_sge rs = sge_of(f->bloc, 16, f->blmr);
    assert_int_equal(f->b->ops->post_recv(qb, 1, &rs), 0);
    uint8_t h[FRAME_HDR_BYTES];
    frame(h, magic, kind, len, 0, (uintptr_t)f->bbuf, f->bmr->rkey);
    raw_send(fd, h, sizeof(h));
    raw_expect_dropped(f, fd, qb);
}

static void test_raw_bad_magic(void **state)
{
    raw_bad_header(*state, FRAME_MAGIC ^ 1, FRAME_SEND, 4);
}

static void test_raw_unknown_kind(void **state)
{
    raw_bad_header(*state, FRAME_MAGIC, 9, 4);
}

static void test_raw_huge_frame(void **state)
{
    raw_bad_header(*state, FRAME_MAGIC, FRAME_WRITE, (1u << 30) + 1);
}

/* ---- connection lifetime ---- */

static void test_connect_refused(void **state)
{
    struct fx *f = *state;
    /* A bound socket that does not listen: its port refuses connections. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    socklen_t sl = sizeof(sa);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    struct rkv_qp *qp = NULL;
    assert_int_equal(f->a->ops->connect(f->a, "127.0.0.1", ntohs(sa.sin_port), WAIT_MS, &qp),
                     -RKV_EPEERDEAD);
    assert_null(qp);
    close(fd);
    expect_quiet(f->a);
}

static void test_qp_close(void **state)
{
    struct fx *f = *state;
    /* A completion still queued for a QP closed before it was polled is dropped. */
    struct rkv_sge ss = sge_of(f->abuf, 8, f->amr);
    assert_int_equal(f->a->ops->post_send(f->qa, 1, &ss, 1), 0);
    f->a->ops->qp_close(f->qa);
    expect_wc(f->b, f->qb, RKV_WC_DISCONNECTED, NULL);
    expect_quiet(f->a); /* neither the SEND nor a DISCONNECTED of its own */
    f->b->ops->qp_close(f->qb);
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
    assert_int_equal(f->a->ops->connect(f->a, "127.0.0.1", f->port, WAIT_MS, &qp), -RKV_EPEERDEAD);
}

static void test_listen_by_name(void **state)
{
    struct fx *f = *state;
    assert_int_equal(f->b->ops->listen(f->b, "localhost", 0), 0);
    uint16_t port;
    assert_int_equal(rkv_nic_tcp_bound_port(f->b, &port), 0);
    assert_int_not_equal(port, f->port);
    struct rkv_qp *qa, *qb;
    assert_int_equal(f->a->ops->connect(f->a, "localhost", port, WAIT_MS, &qa), 0);
    struct rkv_wc wc;
    expect_wc(f->b, NULL, RKV_WC_CONNECTED, &wc);
    qb = wc.qp;
    check_send(f, qa, qb, 14);
    check_send(f, f->qa, f->qb, 15); /* the first listener still serves too */
    struct rkv_qp *bad;
    assert_int_equal(f->a->ops->connect(f->a, "no-such-host.invalid", port, WAIT_MS, &bad) < 0, 1);
}

/* ---- connection token ---- */

/* A NIC opened with another RKV_TOKEN is refused at connect time with a
 * configuration error; the listener goes on serving the rightful peer. */
static void test_token_mismatch_refused(void **state)
{
    struct fx *f = *state;
    struct rkv_port *pc;
    struct rkv_nic *c;
    assert_int_equal(setenv("RKV_TOKEN", "0x5ec2e7", 1), 0);
    assert_int_equal(rkv_port_posix_create("c", RKV_LOG_ERROR, 3, &pc), 0);
    int rc = rkv_nic_tcp_ops.open(pc, NULL, &c);
    unsetenv("RKV_TOKEN");
    assert_int_equal(rc, 0);
    struct rkv_qp *qc = NULL;
    for (int i = 0; i < 3; i++) /* every attempt is refused, none is announced */
        assert_int_equal(c->ops->connect(c, "127.0.0.1", f->port, WAIT_MS, &qc), -RKV_ECONFIG);
    assert_null(qc);
    expect_quiet(f->b);
    check_send(f, f->qa, f->qb, 21);
    c->ops->close(c);
    pc->ops->destroy(pc);
}

/* Raw peers: a wrong token and a non-rkv hello are dropped without ever
 * showing up as connections; one with the right token is welcomed. */
static void test_token_raw_peers(void **state)
{
    struct fx *f = *state;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(f->port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int k = 0; k < 2; k++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        if (k == 0) {
            assert_int_equal(raw_hello(fd, "42"), -1);
        } else {
            raw_send_frame(fd, RAW_SEND, 8, "garbage!", 8); /* a frame instead of a hello */
            char b;
            assert_true(read(fd, &b, 1) <= 0); /* closed without an answer */
        }
        close(fd);
    }
    expect_quiet(f->b);
    struct rkv_qp *qb;
    int fd = raw_connect(f, &qb);
    assert_non_null(qb);
    close(fd);
    expect_wc(f->b, qb, RKV_WC_DISCONNECTED, NULL);
    f->b->ops->qp_close(qb);
    check_send(f, f->qa, f->qb, 22);
}

/* A flood of connections that never say hello (and some that say a wrong
 * one): none is announced, and the listener keeps serving its real peer. */
static void test_connection_flood(void **state)
{
    struct fx *f = *state;
    enum { FLOOD = 300 };
    static int fds[FLOOD];
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(f->port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < FLOOD; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        assert_true(fds[i] >= 0);
        assert_int_equal(connect(fds[i], (struct sockaddr *)&sa, sizeof(sa)), 0);
        if (i % 3 == 0) /* a third of them send a hello with the wrong token */
            assert_int_equal(write(fds[i], "RVKH\1\0\0\0\7\7\7\7\7\7\7\7", 16), 16);
    }
    expect_quiet(f->b);
    check_send(f, f->qa, f->qb, 23);
    for (int i = 0; i < FLOOD; i++)
        close(fds[i]);
    expect_quiet(f->b); /* their going away is not news either */
    check_send(f, f->qa, f->qb, 24);
    /* ...and the NIC freed every one of them: only the real QP is left. */
    int left = 0;
    for (int i = 0; i < 200 && (left = rkv_nic_tcp_qp_count(f->b)) != 1; i++)
        usleep(10000);
    assert_int_equal(left, 1);
}

/* ---- who reads ---- */

/* A thread that polls an empty CQ reads the sockets itself: a ping-pong's
 * replies reach the polling thread with no reader task in between. */
static void test_poller_reads_inline(void **state)
{
    struct fx *f = *state;
    uint64_t task0, inl0, task1, inl1;
    rkv_nic_tcp_rounds(f->b, &task0, &inl0);
    for (uint8_t i = 0; i < 20; i++)
        check_send(f, f->qa, f->qb, i);
    rkv_nic_tcp_rounds(f->b, &task1, &inl1);
    print_message("b read %llu rounds inline, its task %llu\n", (unsigned long long)(inl1 - inl0),
                  (unsigned long long)(task1 - task0));
    assert_true(inl1 > inl0);
}

/* Nobody polls b, yet b reads: its task takes over from a poller that
 * stays away (one blocked in a send to a peer blocked sending to it would
 * otherwise never read again). 64 MiB do not fit in the sockets' buffers,
 * so the post returns only if b reads meanwhile; with nobody reading it
 * fails after TCP_SEND_TIMEOUT_MS. */
static void test_reads_without_a_poller(void **state)
{
    struct fx *f = *state;
    const uint32_t len = 64u << 20;
    uint8_t *src = malloc(len), *dst = calloc(1, len);
    assert_true(src && dst);
    fill(src, len, 31);
    struct rkv_mr *smr, *dmr;
    assert_int_equal(f->a->ops->reg_mr(f->a, src, len, RKV_ACCESS_LOCAL, &smr), 0);
    assert_int_equal(f->b->ops->reg_mr(f->b, dst, len, RKV_ACCESS_REMOTE_WRITE, &dmr), 0);
    check_send(f, f->qa, f->qb, 30); /* b has a poller, which then goes away */
    struct rkv_sge w = sge_of(src, len, smr);
    assert_int_equal(f->a->ops->post_write(f->qa, 1, &w, (uintptr_t)dst, dmr->rkey, 0, 0, 0), 0);
    check_send(f, f->qa, f->qb, 32); /* after the WRITE on the stream: it has landed */
    assert_memory_equal(dst, src, len);
    f->b->ops->dereg_mr(f->b, dmr);
    f->a->ops->dereg_mr(f->a, smr);
    free(dst);
    free(src);
}

int main(void)
{
    /* Hostile-peer tests write into sockets the NIC has just closed. */
    signal(SIGPIPE, SIG_IGN);
#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)
    const struct CMUnitTest tests[] = {
        T(test_send_recv),
        T(test_write_and_write_imm),
        T(test_rnr_backpressure),
        T(test_local_checks),
        T(test_reject_unknown_rkey),
        T(test_reject_past_region),
        T(test_reject_before_region),
        T(test_reject_wrapping_length),
        T(test_reject_local_only_region),
        T(test_reject_oversized_send),
        T(test_raw_valid_frames),
        T(test_raw_bad_magic),
        T(test_raw_unknown_kind),
        T(test_raw_huge_frame),
        T(test_connect_refused),
        T(test_qp_close),
        T(test_peer_nic_close),
        T(test_listen_by_name),
        T(test_token_mismatch_refused),
        T(test_token_raw_peers),
        T(test_connection_flood),
        T(test_poller_reads_inline),
        T(test_reads_without_a_poller),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
