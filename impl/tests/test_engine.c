/* The engine: its suite (engine_suite.c) over the real TCP NIC in one
 * process, then what needs threads that spin and a fault NIC: busy polling
 * inline in the progress task's place, a put that fails midway, a bounded
 * drop_peer_wait. The twin runs the same suite over the sim NIC
 * (sim/tests/test_suites_sim.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <pthread.h>

#include "engine_suite.h"

/* Busy polling: a thread that polls inline takes the progress task's place.
 * Every message, rendezvous included (its RNDV_START is answered from the
 * inline poll), is handled on that thread, in order, and none is lost. */
static void test_inline_poll_takes_over(void **state)
{
    (void)state;
    struct eng_side a, b;
    eng_pair_open(&a, &b, &nic_suite_tcp_env, 4, 1);
    eng_wait_seen(&a, 0);
    a.port->ops->mutex_lock(a.mu);
    a.inline_thread = pthread_self();
    a.inline_check = 1;
    a.port->ops->mutex_unlock(a.mu);
    rkv_engine_inline_begin(a.eng);
    /* The progress task finishes the batch it may be in (the poller lock
     * serialises), then stands aside. */
    rkv_engine_poll_inline(a.eng);
    const int n = 60;
    for (int i = 0; i < n; i++)
        eng_send_push(&b, (uint64_t)i + 1, 1, i % 4 ? 1 : 4, i % 4 ? 16 : 4096);
    uint64_t deadline = a.port->ops->now_ns(a.port) + 5000000000ull;
    int seen = 0;
    while (seen < n && a.port->ops->now_ns(a.port) < deadline) {
        if (rkv_engine_poll_inline(a.eng) == 0)
            a.port->ops->yield(a.port);
        a.port->ops->mutex_lock(a.mu);
        seen = a.n_seen;
        a.port->ops->mutex_unlock(a.mu);
    }
    rkv_engine_inline_end(a.eng);
    assert_int_equal(seen, n);
    for (int i = 0; i < n; i++)
        assert_int_equal(a.seen[i], i + 1);
    assert_int_equal(a.off_thread, 0);
    assert_int_equal(a.bad, 0);
    /* Once it stood up, the progress task handles messages again. */
    a.inline_check = 0;
    eng_send_push(&b, (uint64_t)n + 1, 1, 1, 16);
    eng_wait_seen(&a, n + 1);
    eng_side_close(&b);
    eng_side_close(&a);
}

/* Regression: a put_tx whose second write fails to post (the connection
 * broke) leaves the first one posted, unsignalled, reading from tx: tx
 * must stay out of the pool, or the next message encoded into it is what
 * that write sends, until the QP is closed; then it comes back. */
static void test_put_tx_failed_midway_holds_buffer(void **state)
{
    (void)state;
    /* The link goes down for good 1 ns after b's first message, the first
     * write: its second one, posted later, finds the connection broken. */
    struct rkv_nic_fault down = {.kind = RKV_FAULT_LINK_DOWN,
                                 .start_ns = 1,
                                 .end_ns = UINT64_MAX,
                                 .delay_ns = 1000000ull,
                                 .break_at_once = 1}; /* the second post itself fails */
    struct eng_side a, b;
    eng_side_open(&a, &nic_suite_tcp_env, "a", &(struct eng_side_cfg){.rx_depth = 16});
    eng_side_open(
        &b, &nic_suite_tcp_env, "b",
        &(struct eng_side_cfg){.rx_depth = 16, .busy_poll = 1, .faults = &down, .n_faults = 1});
    eng_pair_connect(&a, &b);
    assert_non_null(eng_wait_peer(&a)); /* CONNECTED reached a */
    struct rkv_slot_desc d;
    assert_int_equal(rkv_engine_slot_alloc(a.eng, a.peer, 4096, &d), 0);
    /* b polls only here, so nothing closes the broken QP behind our back. */
    rkv_engine_inline_begin(b.eng);
    struct rkv_tx *tx, *next;
    assert_int_equal(rkv_engine_tx_alloc(b.eng, 256, &tx), 0);
    uint8_t *buf = rkv_engine_tx_buf(tx);
    memset(buf, 0x5a, 256);
    struct rkv_engine_put puts[2] = {{.src = buf, .len = 128, .raddr = d.addr},
                                     {.src = buf + 128, .len = 128, .raddr = d.addr + 128}};
    assert_int_equal(rkv_engine_put_tx(b.eng, b.peer, tx, puts, 2, d.rkey), -RKV_EPEERDEAD);
    assert_true(rkv_peer_dead(b.peer));
    assert_int_equal(rkv_engine_tx_alloc(b.eng, 256, &next), 0);
    assert_ptr_not_equal(next, tx);
    rkv_engine_tx_free(b.eng, next);
    struct rkv_engine_stats st;
    rkv_engine_get_stats(b.eng, &st);
    assert_int_equal(st.puts, 2);
    assert_int_equal(st.tx_inflight, 1);
    /* The batch closes the QP: the NIC lets go of tx, the pool gets it back. */
    rkv_engine_poll_inline(b.eng);
    rkv_engine_inline_end(b.eng);
    rkv_engine_get_stats(b.eng, &st);
    assert_int_equal(st.tx_inflight, 0);
    assert_int_equal(rkv_engine_tx_alloc(b.eng, 256, &next), 0);
    assert_ptr_equal(next, tx);
    rkv_engine_tx_free(b.eng, next);
    eng_side_close(&b);
    eng_side_close(&a);
}

/* drop_peer_wait is bounded: a close that does not come (here the progress
 * task stands aside for an inline poller that does not poll) ends the wait
 * with -RKV_ETIMEDOUT after timeout_ms instead of holding the caller for
 * good; once the QP is closed, the wait returns 0 at once. */
static void test_drop_peer_wait_bounded(void **state)
{
    (void)state;
    struct eng_side a, b;
    eng_side_open(&a, &nic_suite_tcp_env, "a", &(struct eng_side_cfg){.rx_depth = 16});
    eng_side_open(&b, &nic_suite_tcp_env, "b",
                  &(struct eng_side_cfg){.rx_depth = 16, .busy_poll = 1});
    eng_pair_connect(&a, &b);
    rkv_engine_inline_begin(b.eng);
    uint64_t t0 = b.port->ops->now_ns(b.port);
    assert_int_equal(rkv_engine_drop_peer_wait(b.eng, b.peer, 50), -RKV_ETIMEDOUT);
    assert_true(b.port->ops->now_ns(b.port) - t0 >= 50000000ull);
    assert_true(rkv_peer_dead(b.peer));
    rkv_engine_poll_inline(b.eng); /* the batch's end closes the QP */
    rkv_engine_inline_end(b.eng);
    assert_int_equal(rkv_engine_drop_peer_wait(b.eng, b.peer, 50), 0);
    eng_side_close(&b);
    eng_side_close(&a);
}

/* The engine's counters of s, read under its lock. */
static struct rkv_engine_stats eng_stats(struct eng_side *s)
{
    struct rkv_engine_stats st;
    rkv_engine_get_stats(s->eng, &st);
    return st;
}

static void eng_set_hold(struct eng_side *s, int hold)
{
    s->port->ops->mutex_lock(s->mu);
    s->hold = hold;
    s->port->ops->cond_broadcast(s->cv);
    s->port->ops->mutex_unlock(s->mu);
}

/* Waits (10 s at most) until done(s) holds, looking every 5 ms. */
static int eng_until(struct eng_side *s, int (*done)(struct eng_side *, uint64_t), uint64_t arg)
{
    uint64_t deadline = s->port->ops->now_ns(s->port) + 10000000000ull;
    while (!done(s, arg) && s->port->ops->now_ns(s->port) < deadline)
        s->port->ops->sleep_ns(s->port, 5000000ull);
    return done(s, arg);
}

static int eng_released(struct eng_side *s, uint64_t n)
{
    return eng_stats(s).releases >= n;
}

static int eng_credited(struct eng_side *s, uint64_t n)
{
    return eng_stats(s).credit_msgs >= n;
}

static int eng_holding(struct eng_side *s, uint64_t unused)
{
    (void)unused;
    s->port->ops->mutex_lock(s->mu);
    int h = s->holding;
    s->port->ops->mutex_unlock(s->mu);
    return h;
}

/* Regression: a large message waiting for a slot, whose turn came with a
 * release, retired an idle slot of another key to make room; the RETIRE's
 * post failed (the connection had just broken), which killed the peer, and
 * the kill gave every waiting message back to the pool, this one too. The
 * engine went on with it: it marked the pooled buffer as having asked for
 * a rendezvous, so the next large message that got it (here to another
 * peer) never asked for a slot and waited for ever. */
static void test_retire_kill_leaves_pool_clean(void **state)
{
    (void)state;
    struct eng_side a, b, c;
    eng_side_open(&a, &nic_suite_tcp_env, "a", &(struct eng_side_cfg){.rx_depth = 16});
    /* max_slots 4: b may hold two slots at a (half of them). */
    eng_side_open(&b, &nic_suite_tcp_env, "b",
                  &(struct eng_side_cfg){.rx_depth = 16, .max_slots = 4, .busy_poll = 1});
    eng_pair_connect(&a, &b);
    assert_non_null(eng_wait_peer(&a));
    /* Two keys, two cached slots, both given back: the budget is used up. */
    eng_send_push(&b, 1, 1, 4, 4096);
    eng_wait_seen(&a, 1);
    eng_send_push(&b, 2, 2, 4, 4096);
    eng_wait_seen(&a, 2);
    assert_true(eng_until(&b, eng_released, 2));
    /* Both slots busy while a holds its progress task in on_msg; a third
     * key finds nothing to retire and waits in the queue. */
    eng_set_hold(&a, 1);
    eng_send_push(&b, 3, 1, 4, 4096);
    eng_send_push(&b, 4, 2, 4, 4096);
    assert_true(eng_until(&a, eng_holding, 0));
    eng_send_push(&b, 5, 3, 4, 4096);
    assert_int_equal(eng_stats(&b).rndv_starts, 2);
    /* b polls only here from now on: its NIC's reader takes the release a
     * sends, then the end of the connection a closes after it. */
    rkv_engine_inline_begin(b.eng);
    uint64_t credits = eng_stats(&a).credit_msgs;
    eng_set_hold(&a, 0);
    eng_wait_seen(&a, 4);
    assert_true(eng_until(&a, eng_credited, credits + 1));
    a.port->ops->sleep_ns(a.port, 100000000ull);
    assert_int_equal(rkv_engine_drop_peer_wait(a.eng, a.peer, 10000), 0);
    b.port->ops->sleep_ns(b.port, 100000000ull);
    /* The release runs b's queue: its head retires the idle slot, whose
     * post fails on the broken connection. */
    rkv_engine_poll_inline(b.eng);
    rkv_engine_inline_end(b.eng);
    assert_true(rkv_peer_dead(b.peer));
    /* The buffer the kill gave back serves a large message to another
     * peer: it asks for its slot and arrives. */
    eng_side_open(&c, &nic_suite_tcp_env, "c", &(struct eng_side_cfg){.rx_depth = 16});
    eng_pair_connect(&c, &b);
    eng_send_push(&b, 6, 4, 4, 4096);
    eng_wait_seen(&c, 1);
    assert_int_equal(c.bad, 0);
    eng_side_close(&b);
    eng_side_close(&c);
    eng_side_close(&a);
}

static int eng_downs(struct eng_side *s)
{
    s->port->ops->mutex_lock(s->mu);
    int n = s->downs;
    s->port->ops->mutex_unlock(s->mu);
    return n;
}

/* Regression: a send that found the connection broken killed the peer and
 * ran on_peer(down) at once, on the sending thread. A server's durable
 * task, acknowledging to a client that had gone, so ran the server's
 * handler for a gone client beside the progress task's message handler,
 * both changing the barrier and hello tables unlocked. The owner now hears
 * of it from the next poll batch, where on_msg runs too. */
static void test_send_kill_told_from_poll(void **state)
{
    (void)state;
    struct eng_side a, b;
    eng_side_open(&a, &nic_suite_tcp_env, "a", &(struct eng_side_cfg){.rx_depth = 16});
    eng_side_open(&b, &nic_suite_tcp_env, "b",
                  &(struct eng_side_cfg){.rx_depth = 16, .busy_poll = 1});
    eng_pair_connect(&a, &b);
    assert_non_null(eng_wait_peer(&a));
    eng_send_push(&b, 1, 1, 1, 16);
    eng_wait_seen(&a, 1);
    /* b's progress task stands aside: only this thread polls b from now. */
    rkv_engine_inline_begin(b.eng);
    assert_int_equal(rkv_engine_drop_peer_wait(a.eng, a.peer, 10000), 0);
    int rc = 0;
    for (int i = 0; i < 200 && rc == 0; i++) {
        b.port->ops->sleep_ns(b.port, 5000000ull); /* b's NIC reader sees the end */
        struct rkv_tx *tx;
        assert_int_equal(rkv_engine_tx_alloc(b.eng, 256, &tx), 0);
        struct rkv_hdr h = {.type = RKV_MSG_BARRIER, .req_id = 2 + (uint64_t)i};
        size_t len = rkv_proto_enc_empty(rkv_engine_tx_buf(tx), &h);
        rc = rkv_engine_send(b.eng, b.peer, tx, len);
    }
    assert_int_equal(rc, -RKV_EPEERDEAD);
    assert_true(rkv_peer_dead(b.peer));
    assert_int_equal(eng_downs(&b), 0); /* not inside the send */
    rkv_engine_poll_inline(b.eng);
    assert_int_equal(eng_downs(&b), 1);
    rkv_engine_poll_inline(b.eng);
    assert_int_equal(eng_downs(&b), 1); /* once */
    rkv_engine_inline_end(b.eng);
    eng_side_close(&b);
    eng_side_close(&a);
}

static int eng_errors(struct eng_side *s, uint64_t n)
{
    s->port->ops->mutex_lock(s->mu);
    int got = s->n_errors >= (int)n;
    s->port->ops->mutex_unlock(s->mu);
    return got;
}

/* The slots a node grants its peers are bounded all together
 * (slot_mem_bytes): push_slots x max_slot_bytes per connection was what
 * one peer could make a server allocate, 64 GiB with the defaults. An ask
 * that does not fit waits while the granter asks holders for idle slots
 * back (least recently used first), so one peer's cached slots do not
 * starve another's; a slot that can never fit is refused (-RKV_ELIMIT),
 * leaving the connection as it was. */
static void test_slot_memory_bounded(void **state)
{
    (void)state;
    struct eng_side a, b, c;
    /* 4 rows of 4 KiB take a 32 KiB slot: a grants one such at a time. */
    eng_side_open(&a, &nic_suite_tcp_env, "a",
                  &(struct eng_side_cfg){.rx_depth = 16, .slot_mem_bytes = 32 << 10});
    eng_side_open(&b, &nic_suite_tcp_env, "b", &(struct eng_side_cfg){.rx_depth = 16});
    eng_side_open(&c, &nic_suite_tcp_env, "c", &(struct eng_side_cfg){.rx_depth = 16});
    char host[64];
    uint16_t port;
    assert_int_equal(a.env->listen(a.env->ctx, a.nic, host, sizeof(host), &port), 0);
    assert_int_equal(rkv_engine_connect(b.eng, host, port, 2000, &b.peer), 0);
    assert_int_equal(rkv_engine_connect(c.eng, host, port, 2000, &c.peer), 0);
    assert_non_null(eng_wait_peer(&a));
    eng_send_push(&b, 1, 1, 4, 4096);
    eng_wait_seen(&a, 1);
    assert_true(eng_until(&b, eng_released, 1));
    /* Another key of b's: it waits until b gave its first slot back. */
    eng_send_push(&b, 2, 2, 4, 4096);
    eng_wait_seen(&a, 2);
    assert_int_equal(eng_stats(&a).slot_waits, 1);
    assert_int_equal(eng_stats(&a).slot_revokes, 1);
    assert_true(eng_until(&b, eng_released, 2));
    /* Another peer: b's idle slot is asked back for it. */
    eng_send_push(&c, 3, 1, 4, 4096);
    eng_wait_seen(&a, 3);
    assert_int_equal(eng_stats(&a).slot_revokes, 2);
    assert_true(eng_until(&c, eng_released, 1));
    /* ...and b's own next one takes c's back. */
    eng_send_push(&b, 4, 2, 4, 4096);
    eng_wait_seen(&a, 4);
    assert_int_equal(eng_stats(&a).slot_revokes, 3);
    /* 64 KiB never fits: refused, and failed. */
    eng_send_push(&b, 5, 3, 8, 4096);
    assert_true(eng_until(&b, eng_errors, 1));
    assert_int_equal(b.last_error, -RKV_ELIMIT);
    /* The connections go on, within the bound. */
    eng_send_push(&c, 6, 1, 4, 4096);
    eng_wait_seen(&a, 5);
    for (int i = 0; i < 5; i++)
        assert_int_equal(a.seen[i], i < 4 ? i + 1 : 6);
    assert_int_equal(a.bad, 0);
    assert_false(rkv_peer_dead(b.peer));
    assert_false(rkv_peer_dead(c.peer));
    eng_side_close(&c);
    eng_side_close(&b);
    eng_side_close(&a);
}

/* A slot is rounded up to a power of two for reuse, but not past
 * max_slot_bytes: with both limits at 48 KiB, a 40 KiB message asked for
 * a 64 KiB slot, which the slot memory could never hold, and failed. */
static void test_slot_cap_within_max_slot_bytes(void **state)
{
    (void)state;
    struct eng_side a, b;
    eng_side_open(&a, &nic_suite_tcp_env, "a",
                  &(struct eng_side_cfg){
                      .rx_depth = 16, .slot_mem_bytes = 48 << 10, .max_slot_bytes = 48 << 10});
    eng_side_open(&b, &nic_suite_tcp_env, "b", &(struct eng_side_cfg){.rx_depth = 16});
    eng_pair_connect(&a, &b);
    assert_non_null(eng_wait_peer(&a));
    eng_send_push(&b, 1, 1, 10, 4096); /* 40 KiB of rows */
    eng_wait_seen(&a, 1);
    assert_int_equal(a.bad, 0);
    assert_int_equal(b.n_errors, 0);
    eng_side_close(&b);
    eng_side_close(&a);
}

int main(void)
{
    int failed = engine_suite_run(&nic_suite_tcp_env);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inline_poll_takes_over),
        cmocka_unit_test(test_put_tx_failed_midway_holds_buffer),
        cmocka_unit_test(test_drop_peer_wait_bounded),
        cmocka_unit_test(test_retire_kill_leaves_pool_clean),
        cmocka_unit_test(test_send_kill_told_from_poll),
        cmocka_unit_test(test_slot_memory_bounded),
        cmocka_unit_test(test_slot_cap_within_max_slot_bytes),
    };
    return failed + cmocka_run_group_tests_name("engine over tcp only", tests, NULL, NULL);
}
