/* The fault NIC (nic_fault.h) over the real TCP NIC on 127.0.0.1: node b is
 * wrapped, node a is plain. Checks what each fault promises: nothing lost,
 * per-QP order kept in both directions, messages held at least as long as
 * the fault says, connections broken when the retransmissions run out. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nic/nic.h"
#include "nic/nic_fault.h"
#include "nic/nic_tcp.h"
#include "port/port.h"
#include "rkv.h"

#define WAIT_MS 3000u
#define MS 1000000ull
#define N_MSGS 8

struct fx {
    struct rkv_port *pa, *pb;
    struct rkv_nic *a, *b; /* b: the fault NIC around a TCP NIC */
    struct rkv_qp *qa, *qb;
    uint8_t abuf[4096], bbuf[4096];
    struct rkv_mr *amr, *bmr;
};

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void fx_open(struct fx *f, const struct rkv_nic_fault *faults, uint32_t n)
{
    struct rkv_nic *inner;
    uint16_t port;
    memset(f, 0, sizeof(*f));
    assert_int_equal(rkv_port_posix_create("a", RKV_LOG_ERROR, 1, &f->pa), 0);
    assert_int_equal(rkv_port_posix_create("b", RKV_LOG_ERROR, 1, &f->pb), 0);
    assert_int_equal(rkv_nic_tcp_ops.open(f->pa, NULL, &f->a), 0);
    assert_int_equal(rkv_nic_tcp_ops.open(f->pb, NULL, &inner), 0);
    assert_int_equal(inner->ops->listen(inner, "127.0.0.1", 0), 0);
    assert_int_equal(rkv_nic_tcp_bound_port(inner, &port), 0);
    assert_int_equal(rkv_nic_fault_wrap(inner, faults, n, 7, &f->b), 0);
    assert_int_equal(f->a->ops->connect(f->a, "127.0.0.1", port, WAIT_MS, &f->qa), 0);
    struct rkv_wc wc;
    assert_int_equal(f->b->ops->poll(f->b, &wc, 1, WAIT_MS), 1);
    assert_int_equal(wc.opcode, RKV_WC_CONNECTED);
    f->qb = wc.qp;
    assert_int_equal(f->a->ops->reg_mr(f->a, f->abuf, sizeof(f->abuf), RKV_ACCESS_LOCAL, &f->amr),
                     0);
    assert_int_equal(f->b->ops->reg_mr(f->b, f->bbuf, sizeof(f->bbuf), RKV_ACCESS_LOCAL, &f->bmr),
                     0);
}

static void fx_close(struct fx *f)
{
    f->b->ops->dereg_mr(f->b, f->bmr);
    f->a->ops->dereg_mr(f->a, f->amr);
    f->b->ops->close(f->b);
    f->a->ops->close(f->a);
    f->pa->ops->destroy(f->pa);
    f->pb->ops->destroy(f->pb);
}

/* The next completion of nic other than local send completions. */
static void next_remote(struct rkv_nic *nic, struct rkv_wc *wc)
{
    for (;;) {
        assert_int_equal(nic->ops->poll(nic, wc, 1, WAIT_MS), 1);
        if (wc->opcode != RKV_WC_SEND)
            return;
    }
}

/* `from` sends N_MSGS one-byte messages numbered 0..N-1 on qs; `to` must
 * receive all of them, in order, on qr. */
static void exchange(struct rkv_nic *from, struct rkv_qp *qs, uint8_t *sbuf, struct rkv_mr *smr,
                     struct rkv_nic *to, struct rkv_qp *qr, uint8_t *rbuf, struct rkv_mr *rmr)
{
    for (int i = 0; i < N_MSGS; i++) {
        struct rkv_sge r = {.addr = rbuf + 64 * i, .len = 64, .mr = rmr};
        assert_int_equal(to->ops->post_recv(qr, 100 + (uint64_t)i, &r), 0);
    }
    for (int i = 0; i < N_MSGS; i++) {
        sbuf[i] = (uint8_t)(0x40 + i);
        struct rkv_sge s = {.addr = sbuf + i, .len = 1, .mr = smr};
        assert_int_equal(from->ops->post_send(qs, (uint64_t)i, &s, 1), 0);
    }
    for (int i = 0; i < N_MSGS; i++) {
        struct rkv_wc wc;
        next_remote(to, &wc);
        assert_int_equal(wc.opcode, RKV_WC_RECV);
        assert_ptr_equal(wc.qp, qr);
        assert_int_equal(wc.wr_id, 100 + (uint64_t)i); /* per-QP order */
        assert_int_equal(rbuf[64 * i], 0x40 + i);
    }
}

static void test_delay_keeps_order_both_ways(void **state)
{
    (void)state;
    struct rkv_nic_fault f = {
        .kind = RKV_FAULT_DELAY, .fraction = 0.5, .end_ns = UINT64_MAX, .delay_ns = 5 * MS};
    struct fx x;
    fx_open(&x, &f, 1);
    exchange(x.a, x.qa, x.abuf, x.amr, x.b, x.qb, x.bbuf, x.bmr); /* into b */
    exchange(x.b, x.qb, x.bbuf, x.bmr, x.a, x.qa, x.abuf, x.amr); /* out of b */
    struct rkv_nic_fault_stats st;
    rkv_nic_fault_stats(x.b, &st);
    assert_int_equal(st.messages, 2 * N_MSGS);
    assert_true(st.delayed > 0 && st.delayed < 2 * N_MSGS);
    assert_int_equal(st.dropped + st.held_down + st.broken, 0);
    fx_close(&x);
}

static void test_delay_holds_at_least_the_delay(void **state)
{
    (void)state;
    struct rkv_nic_fault f = {
        .kind = RKV_FAULT_DELAY, .fraction = 1, .end_ns = UINT64_MAX, .delay_ns = 30 * MS};
    struct fx x;
    fx_open(&x, &f, 1);
    uint64_t t0 = now_ns();
    exchange(x.a, x.qa, x.abuf, x.amr, x.b, x.qb, x.bbuf, x.bmr);
    assert_true(now_ns() - t0 >= 30 * MS); /* a lower bound only: it cannot come early */
    fx_close(&x);
}

static void test_drop_costs_retransmissions(void **state)
{
    (void)state;
    struct rkv_nic_fault f = {
        .kind = RKV_FAULT_DROP, .fraction = 0.3, .end_ns = UINT64_MAX, .delay_ns = 2 * MS};
    struct fx x;
    fx_open(&x, &f, 1);
    for (int round = 0; round < 4; round++) {
        exchange(x.a, x.qa, x.abuf, x.amr, x.b, x.qb, x.bbuf, x.bmr);
        exchange(x.b, x.qb, x.bbuf, x.bmr, x.a, x.qa, x.abuf, x.amr);
    }
    struct rkv_nic_fault_stats st;
    rkv_nic_fault_stats(x.b, &st);
    assert_int_equal(st.messages, 8 * N_MSGS);
    assert_true(st.dropped > 0);
    assert_int_equal(st.broken, 0); /* 0.3^8: not with this seed */
    fx_close(&x);
}

/* A post on b whose connection breaks: accepted, then, once every
 * retransmission timed out (8 x rto from the post: the first transmission
 * and RC's retry_cnt of 7), its flushed completion and the QP's disconnect.
 * It broke at once, so a fault run's failure detection came seconds early
 * (an outside tester). Returns how long the break took. */
static uint64_t break_after_post(struct fx *x)
{
    struct rkv_sge s = {.addr = x->bbuf, .len = 1, .mr = x->bmr};
    uint64_t t0 = now_ns();
    assert_int_equal(x->b->ops->post_send(x->qb, 1, &s, 1), 0);
    struct rkv_wc wc;
    assert_int_equal(x->b->ops->poll(x->b, &wc, 1, WAIT_MS), 1);
    assert_int_equal(wc.opcode, RKV_WC_SEND);
    assert_int_equal(wc.status, RKV_WC_FLUSH_ERR);
    assert_int_equal(x->b->ops->poll(x->b, &wc, 1, WAIT_MS), 1);
    assert_int_equal(wc.opcode, RKV_WC_DISCONNECTED);
    assert_ptr_equal(wc.qp, x->qb);
    uint64_t took = now_ns() - t0;
    /* A post after the break fails at once, as on the NIC itself. */
    assert_int_equal(x->b->ops->post_send(x->qb, 2, &s, 1), -RKV_EPEERDEAD);
    return took;
}

/* Every transmission lost: the eighth loss breaks the connection, as RC's
 * retry_cnt does, after 8 retransmission times. Outgoing, the post's
 * completion fails; incoming, the receive turns into the QP's disconnect,
 * as late. */
static void test_total_loss_breaks_the_connection(void **state)
{
    (void)state;
    struct rkv_nic_fault f = {
        .kind = RKV_FAULT_DROP, .fraction = 1, .end_ns = UINT64_MAX, .delay_ns = 5 * MS};
    struct fx x;
    fx_open(&x, &f, 1);
    assert_true(break_after_post(&x) >= 40 * MS);
    struct rkv_nic_fault_stats st;
    rkv_nic_fault_stats(x.b, &st);
    assert_int_equal(st.broken, 1);
    fx_close(&x);

    fx_open(&x, &f, 1);
    struct rkv_sge r = {.addr = x.bbuf + 64, .len = 64, .mr = x.bmr};
    assert_int_equal(x.b->ops->post_recv(x.qb, 2, &r), 0);
    struct rkv_sge as = {.addr = x.abuf, .len = 1, .mr = x.amr};
    uint64_t t0 = now_ns();
    assert_int_equal(x.a->ops->post_send(x.qa, 3, &as, 0), 0);
    struct rkv_wc wc;
    assert_int_equal(x.b->ops->poll(x.b, &wc, 1, WAIT_MS), 1);
    assert_int_equal(wc.opcode, RKV_WC_DISCONNECTED);
    assert_ptr_equal(wc.qp, x.qb);
    assert_true(now_ns() - t0 >= 40 * MS);
    rkv_nic_fault_stats(x.b, &st);
    assert_int_equal(st.broken, 1);
    /* The engine closes a broken QP; the peer then sees it go. */
    x.b->ops->qp_close(x.qb);
    next_remote(x.a, &wc);
    assert_int_equal(wc.opcode, RKV_WC_DISCONNECTED);
    fx_close(&x);
}

/* A short outage delays; one longer than 7 retransmissions breaks, 8 of
 * them after the post. */
static void test_link_down(void **state)
{
    (void)state;
    struct rkv_nic_fault f = {.kind = RKV_FAULT_LINK_DOWN, .end_ns = 40 * MS, .delay_ns = 10 * MS};
    struct fx x;
    fx_open(&x, &f, 1);
    uint64_t t0 = now_ns();
    exchange(x.b, x.qb, x.bbuf, x.bmr, x.a, x.qa, x.abuf, x.amr);
    assert_true(now_ns() - t0 >= 30 * MS);
    struct rkv_nic_fault_stats st;
    rkv_nic_fault_stats(x.b, &st);
    assert_true(st.held_down >= 1);
    fx_close(&x);

    f.end_ns = 1000 * MS; /* 100 retransmission intervals */
    fx_open(&x, &f, 1);
    uint64_t took = break_after_post(&x);
    assert_true(took >= 80 * MS && took < 1000 * MS);
    fx_close(&x);

    f.end_ns = UINT64_MAX; /* down for good (the retry count once overflowed) */
    fx_open(&x, &f, 1);
    assert_true(break_after_post(&x) >= 80 * MS);
    fx_close(&x);
}

/* Closing a QP with posts and completions still held frees them and names
 * the QP in no later completion (ASan checks the freeing). */
static void test_close_with_held_work(void **state)
{
    (void)state;
    struct rkv_nic_fault f = {
        .kind = RKV_FAULT_DELAY, .fraction = 1, .end_ns = UINT64_MAX, .delay_ns = 200 * MS};
    struct fx x;
    fx_open(&x, &f, 1);
    struct rkv_sge r = {.addr = x.bbuf + 64, .len = 64, .mr = x.bmr};
    assert_int_equal(x.b->ops->post_recv(x.qb, 2, &r), 0);
    struct rkv_sge as = {.addr = x.abuf, .len = 1, .mr = x.amr};
    assert_int_equal(x.a->ops->post_send(x.qa, 3, &as, 0), 0);
    struct rkv_sge s = {.addr = x.bbuf, .len = 1, .mr = x.bmr};
    assert_int_equal(x.b->ops->post_send(x.qb, 1, &s, 1), 0);
    struct rkv_wc wc;
    assert_int_equal(x.b->ops->poll(x.b, &wc, 1, 50), 0); /* the receive is held */
    x.b->ops->qp_close(x.qb);
    assert_int_equal(x.b->ops->poll(x.b, &wc, 1, 400), 0);
    fx_close(&x);
}

/* The secret is the transport's: a fault NIC around a tcp NIC given one is
 * not open to strangers (the server would warn "NO SHARED SECRET" on every
 * faulted run), and around one given none it is (tcp is reachable from
 * other hosts). */
static void test_secret_is_the_transports(void **state)
{
    (void)state;
    struct rkv_port *p;
    struct rkv_nic *inner, *wrapped;
    assert_int_equal(rkv_port_posix_create("a", RKV_LOG_ERROR, 1, &p), 0);
    assert_int_equal(rkv_nic_tcp_ops.open(p, NULL, &inner), 0);
    assert_int_equal(rkv_nic_fault_wrap(inner, NULL, 0, 7, &wrapped), 0);
    rkv_nic_set_secret(inner, "", 0); /* whatever RKV_TOKEN the test runs with */
    assert_true(rkv_nic_open_to_strangers(inner));
    assert_true(rkv_nic_open_to_strangers(wrapped));
    rkv_nic_set_secret(inner, "s3cret", 6);
    assert_false(rkv_nic_open_to_strangers(inner));
    assert_false(rkv_nic_open_to_strangers(wrapped));
    wrapped->ops->close(wrapped); /* closes inner */
    p->ops->destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_delay_keeps_order_both_ways),
        cmocka_unit_test(test_delay_holds_at_least_the_delay),
        cmocka_unit_test(test_drop_costs_retransmissions),
        cmocka_unit_test(test_total_loss_breaks_the_connection),
        cmocka_unit_test(test_link_down),
        cmocka_unit_test(test_close_with_held_work),
        cmocka_unit_test(test_secret_is_the_transports),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
