/* The engine suite (engine_suite.h): the SEND path, rendezvous on first
 * contact, the slot cache, credits and backlog, owned slots, buffers of
 * dropped peers, and the polling policy's wait; over any NIC backend. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_suite.h"
#include "rkv.h"

/* Bounds a loaded host (ThreadSanitizer, two suites at once) stays inside;
 * a passing run waits only as long as the event takes. */
#define ENG_SUITE_PEER_NS 10000000000ull /* wait for a peer to show up */
#define ENG_SUITE_SEEN_NS 10000000000ull /* wait for messages to arrive */

/* ---- a side ---- */

static void on_msg(void *user, struct rkv_peer *peer, const struct rkv_msg *m)
{
    struct eng_side *s = user;
    s->port->ops->mutex_lock(s->mu);
    if (!s->peer)
        s->peer = peer;
    if (s->inline_check && !pthread_equal(pthread_self(), s->inline_thread))
        s->off_thread++;
    if (m->h.type == RKV_MSG_ERROR) {
        s->n_errors++;
        s->last_error = m->h.status;
    }
    if (s->n_seen < ENG_SUITE_MAX_SEEN) {
        s->seen[s->n_seen] = m->h.req_id;
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
    struct eng_side *s = user;
    s->port->ops->mutex_lock(s->mu);
    if (up)
        s->peer = peer;
    else
        s->downs++;
    s->port->ops->cond_broadcast(s->cv);
    s->port->ops->mutex_unlock(s->mu);
}

void eng_side_open(struct eng_side *s, const struct nic_suite_env *env, const char *name,
                   const struct eng_side_cfg *cfg)
{
    memset(s, 0, sizeof(*s));
    s->seen = calloc(ENG_SUITE_MAX_SEEN, sizeof(*s->seen));
    assert_non_null(s->seen);
    s->env = env;
    assert_int_equal(env->open(env->ctx, name, &s->port, &s->nic), 0);
    if (cfg->n_faults > 0) {
        struct rkv_nic *inner = s->nic;
        assert_int_equal(rkv_nic_fault_wrap(inner, cfg->faults, cfg->n_faults, 1, &s->nic), 0);
    }
    struct rkv_engine_cfg ec = {.node_id = 1,
                                .rx_depth = cfg->rx_depth,
                                .ctrl_buf_bytes = 1024,
                                .max_slots = cfg->max_slots ? cfg->max_slots : 8,
                                .max_slot_bytes =
                                    cfg->max_slot_bytes ? cfg->max_slot_bytes : 1u << 24,
                                .slot_mem_bytes = cfg->slot_mem_bytes,
                                .busy_poll = cfg->busy_poll};
    char err[128];
    assert_int_equal(
        rkv_engine_create(s->port, s->nic, &ec, on_msg, on_peer, s, &s->eng, err, sizeof(err)), 0);
    assert_int_equal(s->port->ops->mutex_create(s->port, &s->mu), 0);
    assert_int_equal(s->port->ops->cond_create(s->port, &s->cv), 0);
    assert_int_equal(rkv_engine_start(s->eng), 0);
}

void eng_side_close(struct eng_side *s)
{
    rkv_engine_destroy(s->eng);
    s->port->ops->cond_destroy(s->cv);
    s->port->ops->mutex_destroy(s->mu);
    s->env->close(s->env->ctx, s->port, s->nic); /* a fault NIC closes its inner one */
    free(s->seen);
    s->seen = NULL;
}

void eng_pair_connect(struct eng_side *a, struct eng_side *b)
{
    char host[64];
    uint16_t port;
    const struct nic_suite_env *env = a->env;
    /* The engine listens through its NIC: the backend picks the address. */
    assert_int_equal(env->listen(env->ctx, a->nic, host, sizeof(host), &port), 0);
    assert_int_equal(rkv_engine_connect(b->eng, host, port, env->wait_ms, &b->peer), 0);
}

void eng_pair_open(struct eng_side *a, struct eng_side *b, const struct nic_suite_env *env,
                   uint32_t rx_depth, int busy_poll)
{
    const struct eng_side_cfg cfg = {.rx_depth = rx_depth, .busy_poll = busy_poll};
    eng_side_open(a, env, "a", &cfg);
    eng_side_open(b, env, "b", &cfg);
    eng_pair_connect(a, b);
}

struct rkv_peer *eng_wait_peer(struct eng_side *s)
{
    uint64_t deadline = s->port->ops->now_ns(s->port) + ENG_SUITE_PEER_NS;
    s->port->ops->mutex_lock(s->mu);
    while (!s->peer && s->port->ops->now_ns(s->port) < deadline)
        s->port->ops->cond_wait(s->cv, s->mu, 5000000ull);
    struct rkv_peer *p = s->peer;
    s->port->ops->mutex_unlock(s->mu);
    return p;
}

void eng_wait_seen(struct eng_side *s, int n)
{
    uint64_t deadline = s->port->ops->now_ns(s->port) + ENG_SUITE_SEEN_NS;
    s->port->ops->mutex_lock(s->mu);
    while (s->n_seen < n && s->port->ops->now_ns(s->port) < deadline)
        s->port->ops->cond_wait(s->cv, s->mu, 100000000ull);
    int got = s->n_seen;
    s->port->ops->mutex_unlock(s->mu);
    assert_int_equal(got, n);
}

void eng_send_push(struct eng_side *s, uint64_t req, uint32_t tensor, uint32_t rows,
                   uint32_t row_bytes)
{
    size_t len = RKV_PROTO_HDR_BYTES + (size_t)rows * (8 + row_bytes);
    struct rkv_tx *tx;
    assert_int_equal(rkv_engine_tx_alloc(s->eng, len, &tx), 0);
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
    assert_int_equal(rkv_engine_send(s->eng, s->peer, tx, len), 0);
}

static void wait_releases(struct eng_side *b, uint64_t n)
{
    struct rkv_engine_stats st;
    for (int i = 0; i < 1000; i++) {
        rkv_engine_get_stats(b->eng, &st);
        if (st.releases >= n)
            return;
        b->port->ops->sleep_ns(b->port, 10000000ull);
    }
    fail_msg("slot never released");
}

/* ---- tests ---- */

static void test_small_is_one_send(void **state)
{
    struct eng_side a, b;
    eng_pair_open(&a, &b, *state, 16, 0);
    eng_send_push(&b, 1, 1, 1, 16);
    eng_wait_seen(&a, 1);
    struct rkv_engine_stats st;
    rkv_engine_get_stats(b.eng, &st);
    assert_int_equal(st.sends, 1);
    assert_int_equal(st.rndv_starts, 0);
    assert_int_equal(a.bad, 0);
    eng_side_close(&b);
    eng_side_close(&a);
}

static void test_rendezvous_then_cache(void **state)
{
    struct eng_side a, b;
    eng_pair_open(&a, &b, *state, 16, 0);
    eng_send_push(&b, 1, 7, 4, 4096); /* > ctrl_buf_bytes: rendezvous */
    eng_wait_seen(&a, 1);
    wait_releases(&b, 1);
    struct rkv_engine_stats st;
    rkv_engine_get_stats(b.eng, &st);
    assert_int_equal(st.rndv_starts, 1);
    assert_int_equal(st.writes, 1);
    eng_send_push(&b, 2, 7, 2, 4096); /* same key, fits: cached slot, no rendezvous */
    eng_wait_seen(&a, 2);
    rkv_engine_get_stats(b.eng, &st);
    assert_int_equal(st.rndv_starts, 1);
    assert_int_equal(st.rndv_hits, 1);
    assert_int_equal(st.writes, 2);
    eng_send_push(&b, 3, 8, 2, 4096); /* another tensor: its own rendezvous */
    eng_wait_seen(&a, 3);
    rkv_engine_get_stats(b.eng, &st);
    assert_int_equal(st.rndv_starts, 2);
    wait_releases(&b, 2);
    eng_send_push(&b, 4, 7, 64, 4096); /* too big for the cached slot: a new one */
    eng_wait_seen(&a, 4);
    rkv_engine_get_stats(b.eng, &st);
    assert_int_equal(st.rndv_starts, 3);
    assert_int_equal(a.bad, 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(a.seen[i], i + 1);
    eng_side_close(&b);
    eng_side_close(&a);
}

/* Far more messages than receive buffers: credits hold the sender back, the
 * backlog drains as credits return, nothing is lost or reordered. */
static void test_credits_and_order(void **state)
{
    struct eng_side a, b;
    eng_pair_open(&a, &b, *state, 4, 0);
    const int n = 400;
    for (int i = 0; i < n; i++)
        eng_send_push(&b, (uint64_t)i + 1, 1, 1, (i % 3) ? 16 : 2048);
    eng_wait_seen(&a, n);
    for (int i = 0; i < n; i++)
        assert_int_equal(a.seen[i], i + 1);
    struct rkv_engine_stats st;
    rkv_engine_get_stats(b.eng, &st);
    assert_true(st.backlogged > 0);
    assert_int_equal(a.bad, 0);
    eng_side_close(&b);
    eng_side_close(&a);
}

/* A reply written straight into a slot the receiver handed out (the pull path). */
static void test_owned_slot_write(void **state)
{
    struct eng_side a, b;
    eng_pair_open(&a, &b, *state, 16, 0);
    eng_send_push(&b, 1, 1, 1, 16); /* let a learn its peer */
    eng_wait_seen(&a, 1);
    struct rkv_slot_desc d;
    assert_int_equal(rkv_engine_slot_alloc(b.eng, b.peer, 1 << 16, &d), 0);
    size_t len = RKV_PROTO_HDR_BYTES + 8 * 1000;
    struct rkv_tx *tx;
    assert_int_equal(rkv_engine_tx_alloc(a.eng, len, &tx), 0);
    struct rkv_hdr h = {.type = RKV_MSG_PULL_REPLY, .req_id = 9, .count = 1000, .row_bytes = 8};
    assert_int_equal(rkv_proto_enc_pull_reply(rkv_engine_tx_buf(tx), &h), len);
    assert_int_equal(rkv_engine_write(a.eng, a.peer, tx, len, &d), 0);
    eng_wait_seen(&b, 1);
    assert_int_equal(b.seen[0], 9);
    /* A reply larger than the slot is refused locally. */
    assert_int_equal(rkv_engine_tx_alloc(a.eng, (size_t)d.cap + 64, &tx), 0);
    assert_int_equal(rkv_engine_write(a.eng, a.peer, tx, (size_t)d.cap + 64, &d), -RKV_ELIMIT);
    eng_side_close(&b);
    eng_side_close(&a);
}

/* A peer's slot table grows as slots are taken (from a few entries) up to
 * max_slots (8 here): ids are the lowest free ones, as with a full-size
 * table, and the one past the limit is refused. */
static void test_owned_slots_up_to_max(void **state)
{
    struct eng_side a, b;
    eng_pair_open(&a, &b, *state, 16, 0);
    struct rkv_slot_desc d;
    for (uint32_t i = 0; i < 8; i++) {
        assert_int_equal(rkv_engine_slot_alloc(b.eng, b.peer, 4096, &d), 0);
        assert_int_equal(d.slot, i);
    }
    assert_int_equal(rkv_engine_slot_alloc(b.eng, b.peer, 4096, &d), -RKV_ELIMIT);
    rkv_engine_slot_free(b.eng, b.peer, 5);
    rkv_engine_slot_free(b.eng, b.peer, 99); /* names no slot: ignored */
    assert_int_equal(rkv_engine_slot_alloc(b.eng, b.peer, 4096, &d), 0);
    assert_int_equal(d.slot, 5);
    assert_int_equal(rkv_engine_slot_alloc(b.eng, b.peer, 4096, &d), -RKV_ELIMIT);
    eng_side_close(&b);
    eng_side_close(&a);
}

/* Regression: with more (tensor, type) keys than slots, idle slots of other
 * keys are retired instead of the rendezvous being refused or the queue
 * stalling behind a message that never asked for a slot. */
static void test_more_keys_than_slots(void **state)
{
    struct eng_side a, b;
    eng_pair_open(&a, &b, *state, 16, 0);
    int n = 0;
    for (int round = 0; round < 2; round++) {
        for (uint32_t t = 1; t <= 20; t++) {
            n++;
            eng_send_push(&b, (uint64_t)n, t, 3, 4096);
        }
        eng_send_push(&b, (uint64_t)++n, 99, 1, 16); /* small, queued behind them */
    }
    eng_wait_seen(&a, n);
    for (int i = 0; i < n; i++)
        assert_int_equal(a.seen[i], i + 1);
    assert_int_equal(a.bad, 0);
    eng_side_close(&b);
    eng_side_close(&a);
}

static void blast(void *arg)
{
    struct eng_side *s = arg;
    for (int i = 0; i < 64; i++)
        eng_send_push(s, (uint64_t)i + 1, 1, 1, 16);
}

/* Regression: both sides streaming at each other at once, nobody replying,
 * must not deadlock on credits (the held-back credit returns the window). */
static void test_both_sides_backlogged(void **state)
{
    struct eng_side a, b;
    eng_pair_open(&a, &b, *state, 8, 0);
    assert_non_null(eng_wait_peer(&a)); /* CONNECTED reached a */
    struct rkv_task *ta, *tb;
    assert_int_equal(a.port->ops->task_start(a.port, "blast-a", blast, &a, &ta), 0);
    assert_int_equal(b.port->ops->task_start(b.port, "blast-b", blast, &b, &tb), 0);
    a.port->ops->task_join(a.port, ta);
    b.port->ops->task_join(b.port, tb);
    eng_wait_seen(&a, 64);
    eng_wait_seen(&b, 64);
    eng_side_close(&b);
    eng_side_close(&a);
}

/* Regression: sends whose completions were still queued when their peer was
 * dropped come back to the pool (the NIC drops those completions). */
static void test_dropped_peer_returns_buffers(void **state)
{
    struct eng_side a, b;
    eng_pair_open(&a, &b, *state, 64, 0);
    assert_non_null(eng_wait_peer(&a)); /* CONNECTED reached a */
    b.port->ops->mutex_lock(b.mu);
    b.hold = 1;
    b.port->ops->mutex_unlock(b.mu);
    eng_send_push(&a, 1, 1, 1, 16); /* b's progress task stops inside on_msg */
    b.port->ops->mutex_lock(b.mu);
    while (!b.holding)
        b.port->ops->cond_wait(b.cv, b.mu, 100000000ull);
    b.port->ops->mutex_unlock(b.mu);
    for (int i = 0; i < 20; i++)
        eng_send_push(&b, (uint64_t)i + 1, 1, 1, 16); /* completions pile up, unpolled */
    struct rkv_engine_stats st;
    rkv_engine_get_stats(b.eng, &st);
    assert_int_equal(st.tx_inflight, 20);
    rkv_engine_drop_peer(b.eng, b.peer);
    b.port->ops->mutex_lock(b.mu);
    b.hold = 0;
    b.port->ops->cond_broadcast(b.cv);
    b.port->ops->mutex_unlock(b.mu);
    for (int i = 0; i < 1000; i++) {
        rkv_engine_get_stats(b.eng, &st);
        if (st.tx_inflight == 0)
            break;
        b.port->ops->sleep_ns(b.port, 10000000ull);
    }
    assert_int_equal(st.tx_inflight, 0);
    eng_side_close(&b);
    eng_side_close(&a);
}

struct seen_at_least {
    struct eng_side *s;
    int n;
};

/* rkv_engine_wait's predicate; the side's lock held. */
static int seen_enough(void *arg)
{
    const struct seen_at_least *w = arg;
    return w->s->n_seen >= w->n;
}

/* The polling policy's wait: done as soon as the callbacks made the
 * predicate true, else 0 at the deadline and not before. */
static void test_engine_wait(void **state)
{
    struct eng_side a, b;
    eng_pair_open(&a, &b, *state, 16, 0);
    const struct rkv_port_ops *po = a.port->ops;
    eng_send_push(&b, 1, 1, 1, 16);
    eng_send_push(&b, 2, 7, 4, 4096); /* a rendezvous on the way */
    struct seen_at_least w = {.s = &a, .n = 2};
    uint64_t t0 = po->now_ns(a.port);
    po->mutex_lock(a.mu);
    assert_int_equal(rkv_engine_wait(a.eng, seen_enough, &w, a.mu, a.cv, t0 + ENG_SUITE_SEEN_NS),
                     1);
    assert_int_equal(a.n_seen, 2);
    w.n = 3; /* nothing more comes */
    t0 = po->now_ns(a.port);
    assert_int_equal(rkv_engine_wait(a.eng, seen_enough, &w, a.mu, a.cv, t0 + 50000000ull), 0);
    po->mutex_unlock(a.mu);
    assert_true(po->now_ns(a.port) - t0 >= 50000000ull);
    assert_int_equal(a.bad, 0);
    eng_side_close(&b);
    eng_side_close(&a);
}

/* ---- the run ---- */

#define ENG_T(fn) cmocka_unit_test_prestate(fn, NULL)

int engine_suite_run(const struct nic_suite_env *env)
{
    struct CMUnitTest tests[] = {
        ENG_T(test_small_is_one_send),     ENG_T(test_rendezvous_then_cache),
        ENG_T(test_credits_and_order),     ENG_T(test_owned_slot_write),
        ENG_T(test_owned_slots_up_to_max), ENG_T(test_more_keys_than_slots),
        ENG_T(test_both_sides_backlogged), ENG_T(test_dropped_peer_returns_buffers),
        ENG_T(test_engine_wait),
    };
    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
        tests[i].initial_state = (void *)env;
    char group[64];
    snprintf(group, sizeof(group), "engine suite: %s", env->name);
    return _cmocka_run_group_tests(group, tests, sizeof(tests) / sizeof(tests[0]), NULL, NULL);
}
