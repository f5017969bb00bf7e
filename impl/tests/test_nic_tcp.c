/* The TCP NIC: the NIC conformance suite (nic_suite.c) over tcp and over
 * fault(tcp), then what only TCP has: a raw socket playing a hostile peer
 * with hand-made frames, listening by name, connection floods, who reads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "nic_suite.h"
#include "raw_frames.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
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

/* Mirror of nic_tcp.c's private frame header (little-endian). */
#define FRAME_MAGIC 0x544b5652u
#define FRAME_HDR_BYTES 32
enum { FRAME_SEND = 1, FRAME_WRITE = 2, FRAME_WRITE_IMM = 3 };

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
static int raw_connect(struct nic_fx *f, struct rkv_qp **qb_p)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(f->port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(raw_hello(fd, 0), 0);
    struct rkv_wc wc;
    nic_expect_wc(f, f->b, NULL, RKV_WC_CONNECTED, &wc);
    *qb_p = wc.qp;
    return fd;
}

static void raw_send(int fd, const void *p, size_t len)
{
    assert_int_equal(send(fd, p, len, MSG_NOSIGNAL), (ssize_t)len);
}

/* b must drop the raw connection (EOF or reset) and say so once. */
static void raw_expect_dropped(struct nic_fx *f, int fd, struct rkv_qp *qb)
{
    nic_expect_wc(f, f->b, qb, RKV_WC_DISCONNECTED, NULL);
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
    nic_expect_quiet(f, f->b);
    nic_check_send(f, f->qa, f->qb, 8);
}

/* Proves the test's mirror of the frame layout, so the hostile frames below
 * fail for the reason they were built for. */
static void test_raw_valid_frames(void **state)
{
    struct nic_fx *f = *state;
    struct rkv_qp *qb;
    int fd = raw_connect(f, &qb);
    uint8_t h[FRAME_HDR_BYTES];
    frame(h, FRAME_MAGIC, FRAME_WRITE, 5, 0, (uintptr_t)f->bbuf + 100, f->bmr->rkey);
    raw_send(fd, h, sizeof(h));
    raw_send(fd, "hello", 5);
    struct rkv_sge rs = nic_sge(f->bloc, 16, f->blmr);
    assert_int_equal(f->b->ops->post_recv(qb, 31, &rs), 0);
    frame(h, FRAME_MAGIC, FRAME_SEND, 3, 0, 0, 0);
    raw_send(fd, h, sizeof(h));
    raw_send(fd, "abc", 3);
    struct rkv_wc wc;
    nic_expect_wc(f, f->b, qb, RKV_WC_RECV, &wc);
    assert_int_equal(wc.wr_id, 31);
    assert_int_equal(wc.byte_len, 3);
    assert_memory_equal(f->bloc, "abc", 3);
    assert_memory_equal(f->bbuf + 100, "hello", 5); /* the earlier WRITE landed first */
    close(fd);
    nic_expect_wc(f, f->b, qb, RKV_WC_DISCONNECTED, NULL);
    f->b->ops->qp_close(qb);
}

static void raw_bad_header(struct nic_fx *f, uint32_t magic, uint8_t kind, uint32_t len)
{
    struct rkv_qp *qb;
    int fd = raw_connect(f, &qb);
    struct rkv_sge rs = nic_sge(f->bloc, 16, f->blmr);
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

static void test_listen_by_name(void **state)
{
    struct nic_fx *f = *state;
    assert_int_equal(f->b->ops->listen(f->b, "localhost", 0), 0);
    uint16_t port;
    assert_int_equal(rkv_nic_tcp_bound_port(f->b, &port), 0);
    assert_int_not_equal(port, f->port);
    struct rkv_qp *qa, *qb;
    assert_int_equal(f->a->ops->connect(f->a, "localhost", port, WAIT_MS, &qa), 0);
    struct rkv_wc wc;
    nic_expect_wc(f, f->b, NULL, RKV_WC_CONNECTED, &wc);
    qb = wc.qp;
    nic_check_send(f, qa, qb, 14);
    nic_check_send(f, f->qa, f->qb, 15); /* the first listener still serves too */
    struct rkv_qp *bad;
    assert_int_equal(f->a->ops->connect(f->a, "no-such-host.invalid", port, WAIT_MS, &bad) < 0, 1);
}

/* The accepting side's hello says its idle timeout, and the connecting
 * side keeps the connection alive whatever its own setting, also when
 * nobody polls it (its reader task sweeps): a's connection to b, idle for
 * two and a half of b's timeouts, still carries a message. */
static void test_keepalive_from_announced_timeout(void **state)
{
    struct nic_fx *f = *state;
    /* The fixture's connection came before the timeout: it announced none. */
    f->a->ops->qp_close(f->qa);
    f->b->ops->qp_close(f->qb);
    f->qa = f->qb = NULL;
    atomic_store(&f->b->idle_timeout_ms, RKV_MIN_IDLE_TIMEOUT_MS);
    assert_int_equal(atomic_load(&f->a->idle_timeout_ms), 0);
    struct rkv_qp *qa, *qb;
    nic_connect_pair(f, &qa, &qb);
    usleep(2500 * 1000); /* a is not polled meanwhile */
    nic_check_send(f, qa, qb, 27);
    f->a->ops->qp_close(qa);
    f->b->ops->qp_close(qb);
}

/* A connection stalled for want of a posted receive (RNR) is not read, so
 * its peer's frames, keepalives too, complete nothing: with an idle timeout
 * the accepting side dropped a live peer for its own slowness. */
static void test_stalled_not_idle(void **state)
{
    struct nic_fx *f = *state;
    atomic_store(&f->b->idle_timeout_ms, RKV_MIN_IDLE_TIMEOUT_MS);
    nic_fill(f->abuf, 1000, 31);
    struct rkv_sge ss = nic_sge(f->abuf, 1000, f->amr);
    assert_int_equal(f->a->ops->post_send(f->qa, 5, &ss, 1), 0);
    struct rkv_wc wc;
    nic_expect_wc(f, f->a, f->qa, RKV_WC_SEND, &wc);
    /* Two and a half idle timeouts with no receive posted at b. */
    for (int i = 0; i < 25; i++) {
        assert_int_equal(nic_poll_one(f->b, &wc, 100), 0);
        assert_int_equal(nic_poll_one(f->a, &wc, 0), 0);
    }
    memset(f->bloc, 0, 4096);
    struct rkv_sge rs = nic_sge(f->bloc, 4096, f->blmr); /* the suite's receive buffer */
    assert_int_equal(f->b->ops->post_recv(f->qb, 78, &rs), 0);
    nic_expect_wc(f, f->b, f->qb, RKV_WC_RECV, &wc);
    assert_int_equal(wc.wr_id, 78);
    assert_memory_equal(f->bloc, f->abuf, 1000);
    nic_check_send(f, f->qa, f->qb, 26);
}

/* An IPv6 address in brackets, as URLs and cluster files write it:
 * getaddrinfo refused "[::1]" ("cannot resolve"), so a server listening
 * there failed to start. */
static void test_bracketed_ipv6(void **state)
{
    struct nic_fx *f = *state;
    if (f->b->ops->listen(f->b, "[::1]", 0) != 0) {
        int fd = socket(AF_INET6, SOCK_STREAM, 0);
        struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
        int v6 = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
        if (fd >= 0)
            close(fd);
        if (!v6)
            skip(); /* no IPv6 loopback on this host */
        fail_msg("listen on [::1] failed while ::1 is bindable");
    }
    uint16_t port;
    assert_int_equal(rkv_nic_tcp_bound_port(f->b, &port), 0);
    struct rkv_qp *qa, *qb;
    assert_int_equal(f->a->ops->connect(f->a, "[::1]", port, WAIT_MS, &qa), 0);
    struct rkv_wc wc;
    nic_expect_wc(f, f->b, NULL, RKV_WC_CONNECTED, &wc);
    qb = wc.qp;
    nic_check_send(f, qa, qb, 16);
}

/* Raw peers: a wrong token and a non-rkv hello are dropped without ever
 * showing up as connections; one with the right token is welcomed. */
static void test_token_raw_peers(void **state)
{
    struct nic_fx *f = *state;
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
    nic_expect_quiet(f, f->b);
    struct rkv_qp *qb;
    int fd = raw_connect(f, &qb);
    assert_non_null(qb);
    close(fd);
    nic_expect_wc(f, f->b, qb, RKV_WC_DISCONNECTED, NULL);
    f->b->ops->qp_close(qb);
    nic_check_send(f, f->qa, f->qb, 22);
}

/* A KEEPALIVE frame completes nothing and keeps the connection; one that
 * claims a payload is a broken peer, dropped. A peer of the frame format
 * before them (hello version 2) is refused at its hello: it would have
 * dropped the connection at the first keepalive. */
static void test_keepalive_frames(void **state)
{
    struct nic_fx *f = *state;
    struct rkv_qp *qb;
    int fd = raw_connect(f, &qb);
    raw_send_frame(fd, RAW_KEEPALIVE, 0, NULL, 0);
    raw_send_frame(fd, RAW_KEEPALIVE, 0, NULL, 0);
    nic_expect_quiet(f, f->b);
    raw_send_frame(fd, RAW_KEEPALIVE, 8, "garbage!", 8);
    raw_expect_dropped(f, fd, qb); /* and closes both ends */
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(f->port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    uint8_t old[RAW_AUTH_BYTES], nonce[32] = {0};
    raw_auth_msg(old, RAW_HELLO_MAGIC, 2, nonce);
    assert_int_equal(write(fd, old, sizeof(old)), (ssize_t)sizeof(old));
    char b;
    assert_true(read(fd, &b, 1) <= 0); /* closed without an answer */
    close(fd);
    nic_expect_quiet(f, f->b);
}

/* A flood of connections that never say hello (and some that say a wrong
 * one): none is announced, and the listener keeps serving its real peer. */
static void test_connection_flood(void **state)
{
    struct nic_fx *f = *state;
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
    nic_expect_quiet(f, f->b);
    nic_check_send(f, f->qa, f->qb, 23);
    for (int i = 0; i < FLOOD; i++)
        close(fds[i]);
    nic_expect_quiet(f, f->b); /* their going away is not news either */
    nic_check_send(f, f->qa, f->qb, 24);
    /* ...and the NIC freed every one of them: only the real QP is left. */
    int left = 0;
    for (int i = 0; i < 2000 && (left = rkv_nic_tcp_qp_count(f->b)) != 1; i++)
        usleep(10000);
    assert_int_equal(left, 1);
}

/* ---- who reads ---- */

/* A thread that polls an empty CQ reads the sockets itself: a ping-pong's
 * replies reach the polling thread with no reader task in between.
 * The task reads before the first poll, and a task already reading keeps
 * draining the socket: on a loaded host the woken poller can preempt it,
 * send the next message and wait again before the task's next recv, and
 * then the task reads every message (CI saw 0 inline rounds in 20). So the
 * poll gap is made long, which parks the task once a poller has come, and
 * each send waits 1 ms, so the task's drain ends between messages. */
static void test_poller_reads_inline(void **state)
{
    struct nic_fx *f = *state;
    uint64_t task0, inl0, task1, inl1;
    rkv_nic_set_poll_gap(f->b, 60ull * 1000000000);
    rkv_nic_tcp_rounds(f->b, &task0, &inl0);
    for (uint8_t i = 0; i < 20; i++) {
        nic_check_send(f, f->qa, f->qb, i);
        usleep(1000);
    }
    rkv_nic_tcp_rounds(f->b, &task1, &inl1);
    print_message("b read %llu rounds inline, its task %llu\n", (unsigned long long)(inl1 - inl0),
                  (unsigned long long)(task1 - task0));
    assert_true(inl1 > inl0);
}

/* Nobody polls b, yet b reads: its task takes over from a poller that
 * stays away (one blocked in a send to a peer blocked sending to it would
 * otherwise never read again). 64 MiB do not fit in the sockets' buffers,
 * so the post returns only if b reads meanwhile; with nobody reading it
 * fails once b has taken nothing for the NIC's send wait. */
static void test_reads_without_a_poller(void **state)
{
    struct nic_fx *f = *state;
    const uint32_t len = 64u << 20;
    uint8_t *src = malloc(len), *dst = calloc(1, len);
    assert_true(src && dst);
    nic_fill(src, len, 31);
    struct rkv_mr *smr, *dmr;
    assert_int_equal(f->a->ops->reg_mr(f->a, src, len, RKV_ACCESS_LOCAL, &smr), 0);
    assert_int_equal(f->b->ops->reg_mr(f->b, dst, len, RKV_ACCESS_REMOTE_WRITE, &dmr), 0);
    nic_check_send(f, f->qa, f->qb, 30); /* b has a poller, which then goes away */
    struct rkv_sge w = nic_sge(src, len, smr);
    assert_int_equal(f->a->ops->post_write(f->qa, 1, &w, (uintptr_t)dst, dmr->rkey, 0, 0, 0), 0);
    nic_check_send(f, f->qa, f->qb, 32); /* after the WRITE on the stream: it has landed */
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
    int failed = nic_suite_run(&nic_suite_tcp_env);
    failed += nic_suite_run(&nic_suite_fault_tcp_env);
#define T(fn)                                                                                      \
    cmocka_unit_test_prestate_setup_teardown(fn, nic_fx_setup, nic_fx_teardown,                    \
                                             (void *)&nic_suite_tcp_env)
    const struct CMUnitTest tests[] = {
        T(test_raw_valid_frames),
        T(test_raw_bad_magic),
        T(test_raw_unknown_kind),
        T(test_raw_huge_frame),
        T(test_listen_by_name),
        T(test_token_raw_peers),
        T(test_connection_flood),
        T(test_poller_reads_inline),
        T(test_reads_without_a_poller),
        T(test_keepalive_frames),
        T(test_bracketed_ipv6),
        T(test_stalled_not_idle),
        T(test_keepalive_from_announced_timeout),
    };
#undef T
    return failed + cmocka_run_group_tests_name("tcp only", tests, NULL, NULL);
}
