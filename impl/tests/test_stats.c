/* The client's counters and latency histograms (rkv_client_stats,
 * rkv_client_peer_stats): per call and per server, what each call moved,
 * which server it went to, failures, and latencies in the right log2
 * bucket. Real servers over loopback TCP, in this process. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "rkv.h"

#define TWO_MACHINES_PORT_LO 36000 /* this binary's range */
#define TWO_MACHINES_PORT_SPAN 1998
#define TWO_MACHINES_TAG "rkvst"
#include "two_machines.h"

/* Range policy: rows 0..49 on machine 0 (the client's, served by server 0
 * and applied by the client itself), 50..99 on machine 1 (server 1). */
static const struct rkv_tensor_desc T_F32 = {
    .name = "t", .dtype = RKV_F32, .rows = 100, .row_len = 4, .policy = RKV_PART_RANGE};
#define ROW_BYTES 16u

#define OP_SLOW (RKV_OP_CUSTOM + 1)
#define SLOW_NS 20000000ull /* a slow push's handler sleeps 20 ms */

static void h_slow(enum rkv_dtype dt, void *row, void *st, const void *in, size_t n, double param,
                   void *user)
{
    (void)dt, (void)row, (void)st, (void)in, (void)n, (void)param;
    if (user) { /* the server's: the client's own rows are not slowed */
        struct timespec ts = {.tv_nsec = (long)SLOW_NS};
        nanosleep(&ts, NULL);
    }
}

static struct rkv_op_stats op_stats(struct rkv_client *cli, int op)
{
    struct rkv_op_stats st;
    assert_int_equal(rkv_client_stats(cli, op, &st), 0);
    return st;
}

static struct rkv_op_stats peer_stats(struct rkv_client *cli, uint32_t server, int op)
{
    struct rkv_op_stats st;
    assert_int_equal(rkv_client_peer_stats(cli, server, op, &st), 0);
    return st;
}

/* Every histogram counts each timed call once, and holds its slowest. */
static void assert_consistent(const struct rkv_op_stats *st)
{
    uint64_t sum = 0;
    for (uint32_t b = 0; b < RKV_STATS_BUCKETS; b++)
        sum += st->hist[b];
    assert_int_equal(sum, st->timed);
    assert_true(st->timed <= st->count);
    assert_true(st->errors <= st->count);
    assert_true(st->total_ns >= st->max_ns);
    if (st->count) {
        uint32_t top = RKV_STATS_BUCKETS - 1;
        while (top > 0 && !st->hist[top])
            top--;
        assert_true(st->max_ns >= rkv_stats_bucket_ns(top));
        assert_true(top == RKV_STATS_BUCKETS - 1 || st->max_ns < rkv_stats_bucket_ns(top + 1));
    }
}

static void test_counts_per_call_and_server(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 5000);
    cluster_start_server(&c, 0);
    cluster_start_server(&c, 1);
    struct rkv_client *cli = client_join(&c);
    assert_int_equal(rkv_client_n_servers(cli), 2);
    assert_int_equal(rkv_client_init_data(cli, &T_F32), 0);
    assert_int_equal(op_stats(cli, RKV_STATS_INIT).count, 1);
    assert_true(peer_stats(cli, 0, RKV_STATS_INIT).count >= 1);
    /* init_data asked server 0 whether the tensor was made before: "no
     * such tensor" is its answer, not a failed request (every passing
     * run's report showed "errors: 2" under server 0's "other"). */
    assert_true(peer_stats(cli, 0, RKV_STATS_OTHER).count >= 1);
    assert_int_equal(peer_stats(cli, 0, RKV_STATS_OTHER).errors, 0);

    float rows[10 * 4] = {1};
    uint64_t ids[10] = {0, 1, 2, 3, 4, 60, 61, 62, 63, 64}; /* 5 local, 5 on machine 1 */
    assert_int_equal(rkv_client_push(cli, "t", ids, 10, rows, RKV_OP_SUM, 0), 0);
    struct rkv_op_stats p = op_stats(cli, RKV_STATS_PUSH);
    assert_int_equal(p.count, 1);
    assert_int_equal(p.errors, 0);
    assert_int_equal(p.rows, 10);
    assert_int_equal(p.bytes, 10 * ROW_BYTES);
    assert_true(p.max_ns > 0);
    /* Only the remote half went to a server: server 1, as one request. */
    struct rkv_op_stats s1 = peer_stats(cli, 1, RKV_STATS_PUSH);
    assert_int_equal(s1.count, 1);
    assert_int_equal(s1.rows, 5);
    assert_int_equal(s1.bytes, 5 * ROW_BYTES);
    assert_int_equal(peer_stats(cli, 0, RKV_STATS_PUSH).count, 0);

    assert_int_equal(rkv_client_pull(cli, "t", ids + 5, 3, rows), 0);
    assert_int_equal(op_stats(cli, RKV_STATS_PULL).rows, 3);
    assert_int_equal(op_stats(cli, RKV_STATS_PULL).bytes, 3 * ROW_BYTES);
    assert_int_equal(peer_stats(cli, 1, RKV_STATS_PULL).count, 1);
    assert_int_equal(peer_stats(cli, 1, RKV_STATS_PULL).bytes, 3 * ROW_BYTES);

    assert_int_equal(rkv_client_barrier(cli), 0);
    assert_int_equal(op_stats(cli, RKV_STATS_BARRIER).count, 1);
    assert_int_equal(peer_stats(cli, 0, RKV_STATS_BARRIER).count, 1);

    /* A push refused before anything is sent: an error, nothing moved. */
    uint64_t bad = 100;
    assert_int_equal(rkv_client_push(cli, "t", &bad, 1, rows, RKV_OP_SUM, 0), -RKV_ERANGE);
    p = op_stats(cli, RKV_STATS_PUSH);
    assert_int_equal(p.count, 2);
    assert_int_equal(p.errors, 1);
    assert_int_equal(p.rows, 10);

    /* An async push counts from its issue to its wait. */
    struct rkv_pending *pend;
    assert_int_equal(rkv_client_push_async(cli, "t", ids + 5, 2, rows, RKV_OP_SUM, 0, &pend), 0);
    assert_int_equal(op_stats(cli, RKV_STATS_PUSH).count, 2);
    assert_int_equal(rkv_client_wait(cli, pend), 0);
    p = op_stats(cli, RKV_STATS_PUSH);
    assert_int_equal(p.count, 3);
    assert_int_equal(p.rows, 12);
    assert_int_equal(peer_stats(cli, 1, RKV_STATS_PUSH).count, 2);

    for (int op = 0; op < RKV_STATS_OPS; op++) {
        struct rkv_op_stats a = op_stats(cli, op);
        assert_consistent(&a);
        for (uint32_t s = 0; s < 2; s++) {
            struct rkv_op_stats b = peer_stats(cli, s, op);
            assert_consistent(&b);
            assert_int_equal(b.timed, b.count); /* every request is timed */
        }
    }

    struct rkv_op_stats st;
    assert_int_equal(rkv_client_stats(cli, RKV_STATS_OPS, &st), -RKV_EINVAL);
    assert_int_equal(rkv_client_stats(cli, -1, &st), -RKV_EINVAL);
    assert_int_equal(rkv_client_peer_stats(cli, 2, RKV_STATS_PUSH, &st), -RKV_EINVAL);
    assert_non_null(strstr(rkv_client_errmsg(cli), "out of range"));

    rkv_client_stats_reset(cli);
    assert_int_equal(op_stats(cli, RKV_STATS_PUSH).count, 0);
    assert_int_equal(peer_stats(cli, 1, RKV_STATS_PUSH).count, 0);
    assert_int_equal(peer_stats(cli, 1, RKV_STATS_PUSH).hist[0], 0);

    assert_int_equal(rkv_client_shutdown_servers(cli), 0);
    rkv_client_destroy(cli);
    cluster_stop(&c);
}

/* rkv_config.no_peer_stats: the calls are counted as ever, per server
 * nothing is kept, and asking for it says so instead of answering zeros. */
static void test_no_peer_stats(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 5000);
    cluster_start_server(&c, 0);
    cluster_start_server(&c, 1);
    c.cfg.no_peer_stats = 1;
    struct rkv_client *cli = client_join(&c);
    assert_int_equal(rkv_client_init_data(cli, &T_F32), 0);
    float rows[4 * 4] = {1};
    uint64_t ids[4] = {0, 1, 60, 61};
    assert_int_equal(rkv_client_push(cli, "t", ids, 4, rows, RKV_OP_SUM, 0), 0);
    assert_int_equal(rkv_client_pull(cli, "t", ids, 4, rows), 0);
    assert_int_equal(op_stats(cli, RKV_STATS_PUSH).count, 1);
    assert_int_equal(op_stats(cli, RKV_STATS_PULL).rows, 4);
    struct rkv_op_stats st;
    assert_int_equal(rkv_client_peer_stats(cli, 1, RKV_STATS_PUSH, &st), -RKV_EINVAL);
    assert_non_null(strstr(rkv_client_errmsg(cli), "no per-server counters"));
    rkv_client_stats_reset(cli);
    assert_int_equal(op_stats(cli, RKV_STATS_PUSH).count, 0);
    assert_int_equal(rkv_client_shutdown_servers(cli), 0);
    rkv_client_destroy(cli);
    cluster_stop(&c);
}

/* A push whose server takes 20 ms is counted once, per call and per
 * server, in the bucket that holds its time: 2^24 ns (16.8 ms to 33.6 ms)
 * or, on a loaded host, a later one, never an earlier one. (It asserted
 * 2^24 exactly, and a coverage build on a busy host took over 33.6 ms.) */
static void test_latency_bucket(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 5000);
    cluster_start_server(&c, 0);
    cluster_start_server(&c, 1);
    for (int m = 0; m < 2; m++)
        assert_int_equal(rkv_server_register_handler(c.srv[m][0], OP_SLOW, h_slow, &c), 0);
    struct rkv_client *cli = client_join(&c);
    assert_int_equal(rkv_client_register_handler(cli, OP_SLOW, h_slow, NULL), 0);
    assert_int_equal(rkv_client_init_data(cli, &T_F32), 0);
    float row[4] = {0};
    uint64_t id = 70;
    assert_int_equal(rkv_client_push(cli, "t", &id, 1, row, OP_SLOW, 0), 0);
    uint32_t want = 0;
    while ((2ull << want) <= SLOW_NS)
        want++;
    assert_int_equal(want, 24);
    struct rkv_op_stats a = op_stats(cli, RKV_STATS_PUSH), b = peer_stats(cli, 1, RKV_STATS_PUSH);
    assert_int_equal(a.timed, 1);
    assert_int_equal(b.timed, 1);
    for (uint32_t k = 0; k < want; k++) /* not faster than the handler */
        assert_true(a.hist[k] == 0 && b.hist[k] == 0);
    assert_true(a.max_ns >= SLOW_NS && b.max_ns >= SLOW_NS && b.max_ns <= a.max_ns);
    assert_consistent(&a);
    assert_consistent(&b);
    assert_int_equal(rkv_client_shutdown_servers(cli), 0);
    rkv_client_destroy(cli);
    cluster_stop(&c);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Pushes and pulls of the client's own rows (served from the shard, no
 * server): every one counted, one in 64 timed, each within the loop's own
 * time. Ones that went to a server: every one timed, from its request's
 * send, so never shorter than that request. */
static void test_local_calls_sampled(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 5000);
    cluster_start_server(&c, 0);
    cluster_start_server(&c, 1);
    struct rkv_client *cli = client_join(&c);
    assert_int_equal(rkv_client_init_data(cli, &T_F32), 0);
    rkv_client_stats_reset(cli);
    enum { CALLS = 1000 };
    float row[4] = {1, 2, 3, 4};
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < CALLS; i++) {
        uint64_t id = i % 50; /* machine 0's */
        assert_int_equal(rkv_client_push(cli, "t", &id, 1, row, RKV_OP_ASSIGN, 0), 0);
        assert_int_equal(rkv_client_pull(cli, "t", &id, 1, row), 0);
    }
    uint64_t wall = now_ns() - t0;
    for (int op = RKV_STATS_PUSH; op <= RKV_STATS_PULL; op++) {
        struct rkv_op_stats st = op_stats(cli, op);
        assert_int_equal(st.count, CALLS);
        assert_int_equal(st.errors, 0);
        assert_int_equal(st.rows, CALLS);
        assert_int_equal(st.bytes, CALLS * ROW_BYTES);
        /* calls 0, 64, ..., 960 */
        assert_int_equal(st.timed, (CALLS + 63) / 64);
        assert_consistent(&st);
        assert_true(st.max_ns > 0 && st.total_ns >= st.max_ns);
        assert_true(st.total_ns < wall);
    }
    assert_int_equal(peer_stats(cli, 0, RKV_STATS_PUSH).count, 0);
    assert_int_equal(peer_stats(cli, 0, RKV_STATS_PULL).count, 0);
    /* A failure that sent nothing is counted, untimed unless sampled. */
    uint64_t bad = 100;
    assert_int_equal(rkv_client_pull(cli, "t", &bad, 1, row), -RKV_ERANGE);
    assert_int_equal(op_stats(cli, RKV_STATS_PULL).errors, 1);
    assert_int_equal(op_stats(cli, RKV_STATS_PULL).timed, (CALLS + 63) / 64);

    /* Remote rows: every call timed, and no call shorter than its request. */
    rkv_client_stats_reset(cli);
    for (uint64_t i = 0; i < 100; i++) {
        uint64_t id = 50 + i % 50; /* machine 1's */
        assert_int_equal(rkv_client_pull(cli, "t", &id, 1, row), 0);
    }
    struct rkv_op_stats a = op_stats(cli, RKV_STATS_PULL), b = peer_stats(cli, 1, RKV_STATS_PULL);
    assert_int_equal(a.count, 100);
    assert_int_equal(a.timed, 100);
    assert_int_equal(b.timed, 100);
    assert_true(a.total_ns >= b.total_ns && a.max_ns >= b.max_ns);
    assert_consistent(&a);

    /* An async push to a server, with an untimed local call between its
     * issue and its wait: still timed, by its wait. A local async push that
     * is not sampled: counted only. */
    rkv_client_stats_reset(cli);
    uint64_t local = 3, remote = 70;
    struct rkv_pending *pend;
    assert_int_equal(rkv_client_push(cli, "t", &local, 1, row, RKV_OP_ASSIGN, 0), 0); /* 1st */
    assert_int_equal(rkv_client_push_async(cli, "t", &remote, 1, row, RKV_OP_SUM, 0, &pend), 0);
    assert_int_equal(rkv_client_pull(cli, "t", &local, 1, row), 0); /* 1st pull: timed */
    assert_int_equal(rkv_client_pull(cli, "t", &local, 1, row), 0); /* untimed */
    assert_int_equal(rkv_client_wait(cli, pend), 0);
    assert_int_equal(rkv_client_push_async(cli, "t", &local, 1, row, RKV_OP_SUM, 0, &pend), 0);
    assert_int_equal(rkv_client_wait(cli, pend), 0);
    struct rkv_op_stats p = op_stats(cli, RKV_STATS_PUSH);
    assert_int_equal(p.count, 3);
    assert_int_equal(p.timed, 2);
    assert_true(p.max_ns >= peer_stats(cli, 1, RKV_STATS_PUSH).max_ns);
    assert_int_equal(op_stats(cli, RKV_STATS_PULL).count, 2);
    assert_int_equal(op_stats(cli, RKV_STATS_PULL).timed, 1);

    assert_int_equal(rkv_client_shutdown_servers(cli), 0);
    rkv_client_destroy(cli);
    cluster_stop(&c);
}

static void test_names_and_edges(void **state)
{
    (void)state;
    assert_string_equal(rkv_stats_op_name(RKV_STATS_PUSH), "push");
    assert_string_equal(rkv_stats_op_name(RKV_STATS_OTHER), "other");
    assert_null(rkv_stats_op_name(RKV_STATS_OPS));
    assert_null(rkv_stats_op_name(-1));
    assert_int_equal(rkv_stats_bucket_ns(0), 0);
    assert_int_equal(rkv_stats_bucket_ns(10), 1024);
    assert_int_equal(rkv_stats_bucket_ns(RKV_STATS_BUCKETS + 5), 1ull << (RKV_STATS_BUCKETS - 1));
}

int main(void)
{
    atexit(kill_stray_child);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_and_edges),
        cmocka_unit_test(test_counts_per_call_and_server),
        cmocka_unit_test(test_no_peer_stats),
        cmocka_unit_test(test_latency_bucket),
        cmocka_unit_test(test_local_calls_sampled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
