/* The engine over the real TCP NIC in one process: SEND path, rendezvous on
 * first contact, the slot cache on later messages, credits and backlog. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <pthread.h>

#include "engine/engine.h"
#include "nic/nic_fault.h"
#include "nic/nic_tcp.h"

#define MAX_SEEN 4096

struct side {
    struct rkv_port *port;
    struct rkv_nic *nic;
    struct rkv_engine *eng;
    struct rkv_mutex *mu;
    struct rkv_cond *cv;
    struct rkv_peer *peer; /* the connection to the other side */
    uint64_t seen[MAX_SEEN];
    uint32_t seen_bytes[MAX_SEEN];
    int n_seen;
    int bad;
    int hold;         /* on_msg waits while this is set (to stall the progress task) */
    int holding;      /* on_msg is waiting */
    int inline_check; /* count messages handled off inline_thread */
    pthread_t inline_thread;
    int off_thread;
};

static void on_msg(void *user, struct rkv_peer *peer, const struct rkv_msg *m)
{
    struct side *s = user;
    s->port->ops->mutex_lock(s->mu);
    if (!s->peer)
        s->peer = peer;
    if (s->inline_check && !pthread_equal(pthread_self(), s->inline_thread))
        s->off_thread++;
    if (s->n_seen < MAX_SEEN) {
        s->seen[s->n_seen] = m->h.req_id;
        s->seen_bytes[s->n_seen] = (uint32_t)m->h.payload_len;
        /* Check the payload bytes really arrived (push rows = req_id byte). */
        if (m->h.type == RKV_MSG_PUSH) {
            size_t rb = (size_t)m->h.count * m->h.row_bytes;
            for (size_t i = 0; i < rb; i++)
                if (m->u.push.rows[i] != (uint8_t)m->h.req_id)
                    s->bad++;
        }
        s->n_seen++;
    }
    s->port->ops->cond_broadcast(s->cv);
    while (s->hold) {
        s->holding = 1;
        s->port->ops->cond_wait(s->cv, s->mu, 100000000ull);
    }
    s->holding = 0;
    s->port->ops->mutex_unlock(s->mu);
}

static void on_peer(void *user, struct rkv_peer *peer, int up)
{
    struct side *s = user;
    s->port->ops->mutex_lock(s->mu);
    if (up)
        s->peer = peer;
    s->port->ops->cond_broadcast(s->cv);
    s->port->ops->mutex_unlock(s->mu);
}

/* The side's NIC is the TCP one, wrapped in the fault NIC when n_faults > 0. */
static void side_open_faulty(struct side *s, const char *name, uint32_t rx_depth, int busy_poll,
                             const struct rkv_nic_fault *faults, uint32_t n_faults)
{
    memset(s, 0, sizeof(*s));
    assert_int_equal(rkv_port_posix_create(name, 0, 1, &s->port), 0);
    assert_int_equal(rkv_nic_tcp_ops.open(s->port, NULL, &s->nic), 0);
    if (n_faults > 0) {
        struct rkv_nic *tcp = s->nic;
        assert_int_equal(rkv_nic_fault_wrap(tcp, faults, n_faults, 1, &s->nic), 0);
    }
    struct rkv_engine_cfg ec = {.node_id = 1,
                                .rx_depth = rx_depth,
                                .ctrl_buf_bytes = 1024,
                                .max_slots = 8,
                                .max_slot_bytes = 1 << 24,
                                .busy_poll = busy_poll};
    char err[128];
    assert_int_equal(
        rkv_engine_create(s->port, s->nic, &ec, on_msg, on_peer, s, &s->eng, err, sizeof(err)), 0);
    assert_int_equal(s->port->ops->mutex_create(s->port, &s->mu), 0);
    assert_int_equal(s->port->ops->cond_create(s->port, &s->cv), 0);
    assert_int_equal(rkv_engine_start(s->eng), 0);
}

static void side_open(struct side *s, const char *name, uint32_t rx_depth, int busy_poll)
{
    side_open_faulty(s, name, rx_depth, busy_poll, NULL, 0);
}

static void side_close(struct side *s)
{
    rkv_engine_destroy(s->eng);
    s->nic->ops->close(s->nic);
    s->port->ops->cond_destroy(s->cv);
    s->port->ops->mutex_destroy(s->mu);
    s->port->ops->destroy(s->port);
}

static void pair_open_poll(struct side *a, struct side *b, uint32_t rx_depth, int busy_poll)
{
    side_open(a, "a", rx_depth, busy_poll);
    side_open(b, "b", rx_depth, busy_poll);
    assert_int_equal(rkv_engine_listen(a->eng, "127.0.0.1", 0), 0);
    uint16_t port;
    assert_int_equal(rkv_nic_tcp_bound_port(a->nic, &port), 0);
    assert_int_equal(rkv_engine_connect(b->eng, "127.0.0.1", port, 2000, &b->peer), 0);
}

static void pair_open(struct side *a, struct side *b, uint32_t rx_depth)
{
    pair_open_poll(a, b, rx_depth, 0);
}

/* Waits (1 s at most) until the side learned its peer (on_peer and on_msg
 * set it under the side's lock, from the progress task). */
static struct rkv_peer *wait_peer(struct side *s)
{
    uint64_t deadline = s->port->ops->now_ns(s->port) + 1000000000ull;
    s->port->ops->mutex_lock(s->mu);
    while (!s->peer && s->port->ops->now_ns(s->port) < deadline)
        s->port->ops->cond_wait(s->cv, s->mu, 5000000ull);
    struct rkv_peer *p = s->peer;
    s->port->ops->mutex_unlock(s->mu);
    return p;
}

/* Waits (2 s at most) until the side saw n messages. */
static void wait_seen(struct side *s, int n)
{
    uint64_t deadline = s->port->ops->now_ns(s->port) + 2000000000ull;
    s->port->ops->mutex_lock(s->mu);
    while (s->n_seen < n && s->port->ops->now_ns(s->port) < deadline)
        s->port->ops->cond_wait(s->cv, s->mu, 100000000ull);
    int got = s->n_seen;
    s->port->ops->mutex_unlock(s->mu);
    assert_int_equal(got, n);
}

static void send_push(struct side *b, uint64_t req, uint32_t tensor, uint32_t rows,
                      uint32_t row_bytes)
{
    size_t len = RKV_PROTO_HDR_BYTES + (size_t)rows * (8 + row_bytes);
    struct rkv_tx *tx;
    assert_int_equal(rkv_engine_tx_alloc(b->eng, len, &tx), 0);
    uint8_t *buf = rkv_engine_tx_buf(tx);
    struct rkv_hdr h = {.type = RKV_MSG_PUSH,
                        .req_id = req,
                        .tensor_id = tensor,
                        .count = rows,
                        .row_bytes = row_bytes};
    uint64_t *ids = calloc(rows, sizeof(*ids));
    size_t n = rkv_proto_enc_push(buf, &h, ids, NULL);
    free(ids);
    assert_int_equal(n, len);
    memset(buf + RKV_PROTO_HDR_BYTES + (size_t)rows * 8, (uint8_t)req, (size_t)rows * row_bytes);
    assert_int_equal(rkv_engine_send(b->eng, b->peer, tx, len), 0);
}

static void wait_releases(struct side *b, uint64_t n)
{
    struct rkv_engine_stats st;
    for (int i = 0; i < 200; i++) {
        rkv_engine_get_stats(b->eng, &st);
        if (st.releases >= n)
            return;
        b->port->ops->sleep_ns(b->port, 10000000ull);
    }
    fail_msg("slot never released");
}

static void test_small_is_one_send(void **state)
{
    (void)state;
    struct side a, b;
    pair_open(&a, &b, 16);
    send_push(&b, 1, 1, 1, 16);
    wait_seen(&a, 1);
    struct rkv_engine_stats st;
    rkv_engine_get_stats(b.eng, &st);
    assert_int_equal(st.sends, 1);
    assert_int_equal(st.rndv_starts, 0);
    assert_int_equal(a.bad, 0);
    side_close(&b);
    side_close(&a);
}

static void test_rendezvous_then_cache(void **state)
{
    (void)state;
    struct side a, b;
    pair_open(&a, &b, 16);
    send_push(&b, 1, 7, 4, 4096); /* > ctrl_buf_bytes: rendezvous */
    wait_seen(&a, 1);
    wait_releases(&b, 1);
    struct rkv_engine_stats st;
    rkv_engine_get_stats(b.eng, &st);
    assert_int_equal(st.rndv_starts, 1);
    assert_int_equal(st.writes, 1);
    send_push(&b, 2, 7, 2, 4096); /* same key, fits: cached slot, no rendezvous */
    wait_seen(&a, 2);
    rkv_engine_get_stats(b.eng, &st);
    assert_int_equal(st.rndv_starts, 1);
    assert_int_equal(st.rndv_hits, 1);
    assert_int_equal(st.writes, 2);
    send_push(&b, 3, 8, 2, 4096); /* another tensor: its own rendezvous */
    wait_seen(&a, 3);
    rkv_engine_get_stats(b.eng, &st);
    assert_int_equal(st.rndv_starts, 2);
    wait_releases(&b, 2);
    send_push(&b, 4, 7, 64, 4096); /* too big for the cached slot: a new one */
    wait_seen(&a, 4);
    rkv_engine_get_stats(b.eng, &st);
    assert_int_equal(st.rndv_starts, 3);
    assert_int_equal(a.bad, 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(a.seen[i], i + 1);
    side_close(&b);
    side_close(&a);
}

/* Far more messages than receive buffers: credits hold the sender back, the
 * backlog drains as credits return, nothing is lost or reordered. */
static void test_credits_and_order(void **state)
{
    (void)state;
    struct side a, b;
    pair_open(&a, &b, 4);
    const int n = 400;
    for (int i = 0; i < n; i++)
        send_push(&b, (uint64_t)i + 1, 1, 1, (i % 3) ? 16 : 2048);
    wait_seen(&a, n);
    for (int i = 0; i < n; i++)
        assert_int_equal(a.seen[i], i + 1);
    struct rkv_engine_stats st;
    rkv_engine_get_stats(b.eng, &st);
    assert_true(st.backlogged > 0);
    assert_int_equal(a.bad, 0);
    side_close(&b);
    side_close(&a);
}

/* A reply written straight into a slot the receiver handed out (the pull path). */
static void test_owned_slot_write(void **state)
{
    (void)state;
    struct side a, b;
    pair_open(&a, &b, 16);
    send_push(&b, 1, 1, 1, 16); /* let a learn its peer */
    wait_seen(&a, 1);
    struct rkv_slot_desc d;
    assert_int_equal(rkv_engine_slot_alloc(b.eng, b.peer, 1 << 16, &d), 0);
    size_t len = RKV_PROTO_HDR_BYTES + 8 * 1000;
    struct rkv_tx *tx;
    assert_int_equal(rkv_engine_tx_alloc(a.eng, len, &tx), 0);
    struct rkv_hdr h = {.type = RKV_MSG_PULL_REPLY, .req_id = 9, .count = 1000, .row_bytes = 8};
    assert_int_equal(rkv_proto_enc_pull_reply(rkv_engine_tx_buf(tx), &h), len);
    assert_int_equal(rkv_engine_write(a.eng, a.peer, tx, len, &d), 0);
    wait_seen(&b, 1);
    assert_int_equal(b.seen[0], 9);
    /* A reply larger than the slot is refused locally. */
    assert_int_equal(rkv_engine_tx_alloc(a.eng, (size_t)d.cap + 64, &tx), 0);
    assert_int_equal(rkv_engine_write(a.eng, a.peer, tx, (size_t)d.cap + 64, &d), -RKV_ELIMIT);
    side_close(&b);
    side_close(&a);
}

static void side_open_slots(struct side *s, const char *name, uint32_t rx_depth, uint32_t slots)
{
    memset(s, 0, sizeof(*s));
    assert_int_equal(rkv_port_posix_create(name, 0, 1, &s->port), 0);
    assert_int_equal(rkv_nic_tcp_ops.open(s->port, NULL, &s->nic), 0);
    struct rkv_engine_cfg ec = {.node_id = 1,
                                .rx_depth = rx_depth,
                                .ctrl_buf_bytes = 1024,
                                .max_slots = slots,
                                .max_slot_bytes = 1 << 24};
    char err[128];
    assert_int_equal(
        rkv_engine_create(s->port, s->nic, &ec, on_msg, on_peer, s, &s->eng, err, sizeof(err)), 0);
    assert_int_equal(s->port->ops->mutex_create(s->port, &s->mu), 0);
    assert_int_equal(s->port->ops->cond_create(s->port, &s->cv), 0);
    assert_int_equal(rkv_engine_start(s->eng), 0);
}

/* Regression: with more (tensor, type) keys than slots, idle slots of other
 * keys are retired instead of the rendezvous being refused or the queue
 * stalling behind a message that never asked for a slot. */
static void test_more_keys_than_slots(void **state)
{
    (void)state;
    struct side a, b;
    side_open_slots(&a, "a", 16, 8);
    side_open_slots(&b, "b", 16, 8);
    assert_int_equal(rkv_engine_listen(a.eng, "127.0.0.1", 0), 0);
    uint16_t port;
    assert_int_equal(rkv_nic_tcp_bound_port(a.nic, &port), 0);
    assert_int_equal(rkv_engine_connect(b.eng, "127.0.0.1", port, 2000, &b.peer), 0);
    int n = 0;
    for (int round = 0; round < 2; round++) {
        for (uint32_t t = 1; t <= 20; t++) {
            n++;
            send_push(&b, (uint64_t)n, t, 3, 4096);
        }
        send_push(&b, (uint64_t)++n, 99, 1, 16); /* small, queued behind them */
    }
    wait_seen(&a, n);
    for (int i = 0; i < n; i++)
        assert_int_equal(a.seen[i], i + 1);
    assert_int_equal(a.bad, 0);
    side_close(&b);
    side_close(&a);
}

static void *blast(void *arg)
{
    struct side *s = arg;
    for (int i = 0; i < 64; i++)
        send_push(s, (uint64_t)i + 1, 1, 1, 16);
    return NULL;
}

/* Regression: both sides streaming at each other at once, nobody replying,
 * must not deadlock on credits (the held-back credit returns the window). */
static void test_both_sides_backlogged(void **state)
{
    (void)state;
    struct side a, b;
    pair_open(&a, &b, 8);
    assert_non_null(wait_peer(&a)); /* CONNECTED reached a */
    pthread_t ta, tb;
    assert_int_equal(pthread_create(&ta, NULL, blast, &a), 0);
    assert_int_equal(pthread_create(&tb, NULL, blast, &b), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    wait_seen(&a, 64);
    wait_seen(&b, 64);
    side_close(&b);
    side_close(&a);
}

/* Regression: sends whose completions were still queued when their peer was
 * dropped come back to the pool (the NIC drops those completions). */
/* Busy polling: a thread that polls inline takes the progress task's place.
 * Every message, rendezvous included (its RNDV_START is answered from the
 * inline poll), is handled on that thread, in order, and none is lost. */
static void test_inline_poll_takes_over(void **state)
{
    (void)state;
    struct side a, b;
    pair_open_poll(&a, &b, 4, 1);
    wait_seen(&a, 0);
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
        send_push(&b, (uint64_t)i + 1, 1, i % 4 ? 1 : 4, i % 4 ? 16 : 4096);
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
    send_push(&b, (uint64_t)n + 1, 1, 1, 16);
    wait_seen(&a, n + 1);
    side_close(&b);
    side_close(&a);
}

static void test_dropped_peer_returns_buffers(void **state)
{
    (void)state;
    struct side a, b;
    pair_open(&a, &b, 64);
    assert_non_null(wait_peer(&a)); /* CONNECTED reached a */
    b.hold = 1;
    send_push(&a, 1, 1, 1, 16); /* b's progress task stops inside on_msg */
    b.port->ops->mutex_lock(b.mu);
    while (!b.holding)
        b.port->ops->cond_wait(b.cv, b.mu, 100000000ull);
    b.port->ops->mutex_unlock(b.mu);
    for (int i = 0; i < 20; i++)
        send_push(&b, (uint64_t)i + 1, 1, 1, 16); /* completions pile up, unpolled */
    struct rkv_engine_stats st;
    rkv_engine_get_stats(b.eng, &st);
    assert_int_equal(st.tx_inflight, 20);
    rkv_engine_drop_peer(b.eng, b.peer);
    b.port->ops->mutex_lock(b.mu);
    b.hold = 0;
    b.port->ops->cond_broadcast(b.cv);
    b.port->ops->mutex_unlock(b.mu);
    for (int i = 0; i < 100; i++) {
        rkv_engine_get_stats(b.eng, &st);
        if (st.tx_inflight == 0)
            break;
        b.port->ops->sleep_ns(b.port, 10000000ull);
    }
    assert_int_equal(st.tx_inflight, 0);
    side_close(&b);
    side_close(&a);
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
    struct rkv_nic_fault down = {
        .kind = RKV_FAULT_LINK_DOWN, .start_ns = 1, .end_ns = UINT64_MAX, .delay_ns = 1000000ull};
    struct side a, b;
    side_open(&a, "a", 16, 0);
    side_open_faulty(&b, "b", 16, 1, &down, 1);
    assert_int_equal(rkv_engine_listen(a.eng, "127.0.0.1", 0), 0);
    uint16_t port;
    assert_int_equal(rkv_nic_tcp_bound_port(a.nic, &port), 0);
    assert_int_equal(rkv_engine_connect(b.eng, "127.0.0.1", port, 2000, &b.peer), 0);
    assert_non_null(wait_peer(&a)); /* CONNECTED reached a */
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
    side_close(&b);
    side_close(&a);
}

/* drop_peer_wait is bounded: a close that does not come (here the progress
 * task stands aside for an inline poller that does not poll) ends the wait
 * with -RKV_ETIMEDOUT after timeout_ms instead of holding the caller for
 * good; once the QP is closed, the wait returns 0 at once. */
static void test_drop_peer_wait_bounded(void **state)
{
    (void)state;
    struct side a, b;
    side_open(&a, "a", 16, 0);
    side_open(&b, "b", 16, 1);
    assert_int_equal(rkv_engine_listen(a.eng, "127.0.0.1", 0), 0);
    uint16_t port;
    assert_int_equal(rkv_nic_tcp_bound_port(a.nic, &port), 0);
    assert_int_equal(rkv_engine_connect(b.eng, "127.0.0.1", port, 2000, &b.peer), 0);
    rkv_engine_inline_begin(b.eng);
    uint64_t t0 = b.port->ops->now_ns(b.port);
    assert_int_equal(rkv_engine_drop_peer_wait(b.eng, b.peer, 50), -RKV_ETIMEDOUT);
    assert_true(b.port->ops->now_ns(b.port) - t0 >= 50000000ull);
    assert_true(rkv_peer_dead(b.peer));
    rkv_engine_poll_inline(b.eng); /* the batch's end closes the QP */
    rkv_engine_inline_end(b.eng);
    assert_int_equal(rkv_engine_drop_peer_wait(b.eng, b.peer, 50), 0);
    side_close(&b);
    side_close(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_is_one_send),
        cmocka_unit_test(test_rendezvous_then_cache),
        cmocka_unit_test(test_credits_and_order),
        cmocka_unit_test(test_owned_slot_write),
        cmocka_unit_test(test_more_keys_than_slots),
        cmocka_unit_test(test_both_sides_backlogged),
        cmocka_unit_test(test_dropped_peer_returns_buffers),
        cmocka_unit_test(test_inline_poll_takes_over),
        cmocka_unit_test(test_put_tx_failed_midway_holds_buffer),
        cmocka_unit_test(test_drop_peer_wait_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
