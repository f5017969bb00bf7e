/* Zero-copy pushes and pulls over loopback TCP: the registration cache,
 * scattered and duplicate ids landing in the caller's buffer (rows sent
 * from the shard, and staged rows sent in runs), pushes read from the
 * caller's rows in pieces, buffers freed and allocated again between calls,
 * a server that stops answering while it may still write into a buffer
 * the caller then frees (ASan sees a late write), and a push whose pieces
 * fail to post midway while the NIC still holds earlier ones. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/regcache.h"
#include "nic/nic.h"
#include "nic/nic_fault.h"
#include "port/port.h"
#include "rkv.h"
#include "store/server_int.h"

#define TWO_MACHINES_PORT_LO 28000 /* this binary's range */
#define TWO_MACHINES_PORT_SPAN 1998
#define TWO_MACHINES_TAG "rkvz"
#include "two_machines.h"

/* Every remote part of at least 1 byte goes zero-copy (runs permitting). */
static void zc_config(struct cluster *c, uint32_t timeout_ms)
{
    cluster_config(c, timeout_ms);
    c->cfg.zero_copy_bytes = 1;
}

/* 4 KiB rows: a TCP server sends them from the shard, one write per row.
 * 256 B rows: staged, one write per run of consecutive positions. Rows
 * 50..99 live on machine 1. */
#define BIG_LEN 1024u
#define SMALL_LEN 64u
static const struct rkv_tensor_desc T_BIG = {
    .name = "big", .dtype = RKV_F32, .rows = 100, .row_len = BIG_LEN, .policy = RKV_PART_RANGE};
static const struct rkv_tensor_desc T_SMALL = {
    .name = "small", .dtype = RKV_F32, .rows = 100, .row_len = SMALL_LEN, .policy = RKV_PART_RANGE};

static float val(uint64_t id, uint32_t j, float gen)
{
    return gen * 1000.0f + (float)id + (float)j * 0.001f;
}

static void fill(float *rows, const uint64_t *ids, size_t n, uint32_t len, float gen)
{
    for (size_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < len; j++)
            rows[i * len + j] = val(ids[i], j, gen);
}

static void check(const float *rows, const uint64_t *ids, size_t n, uint32_t len, float gen)
{
    for (size_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < len; j++)
            if (rows[i * len + j] != val(ids[i], j, gen))
                fail_msg("row %zu (id %llu) element %u: %g, expected %g", i,
                         (unsigned long long)ids[i], j, rows[i * len + j], val(ids[i], j, gen));
}

/* Every row of both tensors assigned with generation gen (row order). */
static void push_all(struct rkv_client *cli, const char *name, uint32_t len, float gen)
{
    uint64_t ids[100];
    for (uint64_t i = 0; i < 100; i++)
        ids[i] = i;
    float *rows = malloc(100 * len * sizeof(float));
    assert_non_null(rows);
    fill(rows, ids, 100, len, gen);
    assert_int_equal(rkv_client_push(cli, name, ids, 100, rows, RKV_OP_ASSIGN, 0), 0);
    free(rows);
}

static void test_regcache_bounds(void **state)
{
    (void)state;
    struct rkv_port *port;
    struct rkv_nic *nic;
    assert_int_equal(rkv_port_posix_create("t", 0, 1, &port), 0);
    assert_int_equal(rkv_nic_tcp_ops.open(port, NULL, &nic), 0);
    size_t mib = 1u << 20;
    uint8_t *a = malloc(mib), *b = malloc(mib), *d = malloc(3 * mib);
    assert_true(a && b && d);
    struct rkv_regcache rc;
    assert_int_equal(rkv_regcache_init(&rc, nic, 2, 3 * mib), 0);
    assert_int_equal(rkv_regcache_add(&rc, a, mib), 0);
    assert_int_equal(rkv_regcache_add(&rc, b, mib), 0);
    assert_int_equal(rkv_regcache_add(&rc, a + 10, 100), 0); /* inside a: not again */
    assert_int_equal(rc.n, 2);
    /* Ranges are found only whole inside one registration. */
    assert_non_null(rkv_regcache_find(&rc, a + 100, 1000));
    assert_non_null(rkv_regcache_find(&rc, a, mib));
    assert_null(rkv_regcache_find(&rc, a + mib - 10, 20));
    assert_null(rkv_regcache_find(&rc, a, mib + 1));
    /* a was used last: a third entry evicts b (entry bound). */
    assert_non_null(rkv_regcache_find(&rc, a, 1));
    assert_int_equal(rkv_regcache_add(&rc, d, mib), 0);
    assert_null(rkv_regcache_find(&rc, b, 1));
    assert_non_null(rkv_regcache_find(&rc, a, 1));
    assert_int_equal(rc.evictions, 1);
    /* Byte bound: 3 MiB more evicts everything else. */
    assert_int_equal(rkv_regcache_add(&rc, d, 3 * mib), 0);
    assert_int_equal(rc.n, 1);
    assert_int_equal(rc.bytes, 3 * mib);
    assert_int_equal(rkv_regcache_add(&rc, b, 4 * mib), -RKV_ELIMIT);
    assert_int_equal(rkv_regcache_remove(&rc, d), 0);
    assert_int_equal(rkv_regcache_remove(&rc, d), -RKV_EINVAL);
    assert_int_equal(rc.n, 0);
    assert_int_equal(rkv_regcache_add(&rc, a, mib), 0);
    /* A taken registration leaves the cache when removed or evicted, and
     * stays registered (usable) until its takers put it back. */
    struct rkv_mr *ma = rkv_regcache_take(&rc, a, mib);
    struct rkv_mr *ma2 = rkv_regcache_take(&rc, a + 1, 10);
    assert_true(ma && ma == ma2);
    assert_int_equal(rkv_regcache_remove(&rc, a), 0);
    assert_null(rkv_regcache_find(&rc, a, 1));
    assert_int_equal(rc.n, 0);
    assert_int_equal(rc.n_retired, 1);
    assert_ptr_equal(ma->nic, nic); /* still registered */
    rkv_regcache_put(&rc, ma);
    assert_int_equal(rc.n_retired, 1);
    rkv_regcache_put(&rc, ma2); /* the last taker: deregistered now */
    assert_int_equal(rc.n_retired, 0);
    assert_int_equal(rkv_regcache_add(&rc, a, mib), 0);
    assert_int_equal(rkv_regcache_add(&rc, b, mib), 0);
    ma = rkv_regcache_take(&rc, a, mib);
    assert_non_null(rkv_regcache_find(&rc, b, 1)); /* a is the least recently used */
    assert_int_equal(rkv_regcache_add(&rc, d, mib), 0);
    assert_null(rkv_regcache_find(&rc, a, 1));
    assert_int_equal(rc.n_retired, 1);
    rkv_regcache_put(&rc, ma);
    assert_int_equal(rc.n_retired, 0);
    ma = rkv_regcache_take(&rc, b, 1); /* fini deregisters one still taken too */
    assert_non_null(ma);
    rkv_regcache_fini(&rc); /* deregisters what is left */
    free(a);
    free(b);
    free(d);
    nic->ops->close(nic);
    port->ops->destroy(port);
}

/* Scattered ids with duplicates, on both machines: remote rows land at
 * their positions in the caller's buffer, local ones come from the shard. */
static void test_pull_scattered_duplicates(void **state)
{
    (void)state;
    struct cluster c;
    zc_config(&c, 20000);
    cluster_start_server(&c, 0);
    cluster_start_server(&c, 1);
    struct rkv_client *cli = client_join(&c);
    assert_int_equal(rkv_client_init_data(cli, &T_BIG), 0);
    assert_int_equal(rkv_client_init_data(cli, &T_SMALL), 0);
    push_all(cli, "big", BIG_LEN, 1);
    push_all(cli, "small", SMALL_LEN, 1);
    struct rkv_client_zc_stats st0, st;
    rkv_client_get_zc_stats(cli, &st0);

    uint64_t ids[] = {62, 99, 62, 3, 60, 99, 61, 3, 50};
    size_t n = sizeof(ids) / sizeof(ids[0]);
    float *got = malloc(n * BIG_LEN * sizeof(float));
    assert_non_null(got);
    memset(got, 0xee, n * BIG_LEN * sizeof(float));
    assert_int_equal(rkv_client_pull(cli, "big", ids, n, got), 0);
    check(got, ids, n, BIG_LEN, 1);
    rkv_client_get_zc_stats(cli, &st);
    assert_int_equal(st.pulls, st0.pulls + 1);

    /* Small rows: 64 remote ids in one run of positions (repeats included),
     * so they go zero-copy through the server's staging buffer. */
    uint64_t sids[64];
    for (int i = 0; i < 64; i++)
        sids[i] = 50 + (uint64_t)((i * 7) % 50);
    float sgot[64 * SMALL_LEN];
    assert_int_equal(rkv_client_pull(cli, "small", sids, 64, sgot), 0);
    check(sgot, sids, 64, SMALL_LEN, 1);
    rkv_client_get_zc_stats(cli, &st);
    assert_int_equal(st.pulls, st0.pulls + 2);
    /* Interleaved with local rows, each remote row alone: 256-byte runs
     * are not worth a write each, so this one is copied. */
    uint64_t mix[] = {51, 2, 52, 3, 53};
    float mgot[5 * SMALL_LEN];
    assert_int_equal(rkv_client_pull(cli, "small", mix, 5, mgot), 0);
    check(mgot, mix, 5, SMALL_LEN, 1);
    rkv_client_get_zc_stats(cli, &st);
    assert_int_equal(st.pulls, st0.pulls + 2);
    assert_int_equal(st.cache_hits, 0);
    free(got);
    rkv_client_shutdown_servers(cli);
    rkv_client_destroy(cli);
    cluster_stop(&c);
}

/* Rows of 64 KiB and more go from the server's shard one write each
 * (tcp: the NIC has the bytes once the post returns), each to its own
 * position in the caller's buffer: remote rows interleaved with local
 * ones, and out of order. A server that wrote the i-th row to slot i
 * passed every other test but one (a mutant, found from outside). */
static void test_pull_direct_rows_at_their_positions(void **state)
{
    (void)state;
    enum { LEN = 16384, ROWS = 8 }; /* 64 KiB rows; 0..3 on machine 0, 4..7 on 1 */
    static const struct rkv_tensor_desc T_HUGE = {
        .name = "huge", .dtype = RKV_F32, .rows = ROWS, .row_len = LEN, .policy = RKV_PART_RANGE};
    struct cluster c;
    zc_config(&c, 20000);
    cluster_start_server(&c, 0);
    cluster_start_server(&c, 1);
    struct rkv_client *cli = client_join(&c);
    assert_int_equal(rkv_client_init_data(cli, &T_HUGE), 0);
    uint64_t all[ROWS];
    for (uint64_t i = 0; i < ROWS; i++)
        all[i] = i;
    float *rows = malloc((size_t)ROWS * LEN * sizeof(float));
    assert_non_null(rows);
    fill(rows, all, ROWS, LEN, 2);
    assert_int_equal(rkv_client_push(cli, "huge", all, ROWS, rows, RKV_OP_ASSIGN, 0), 0);
    static const uint64_t orders[][6] = {{5, 1, 6, 2, 4, 7}, {7, 4, 6, 5, 0, 3}};
    for (size_t k = 0; k < 2; k++) {
        memset(rows, 0xee, (size_t)ROWS * LEN * sizeof(float));
        assert_int_equal(rkv_client_pull(cli, "huge", orders[k], 6, rows), 0);
        check(rows, orders[k], 6, LEN, 2);
    }
    free(rows);
    rkv_client_shutdown_servers(cli);
    rkv_client_destroy(cli);
    cluster_stop(&c);
}

/* Pushes read the caller's rows in pieces (runs of consecutive remote
 * positions) and land whole; assign and sum both. */
static void test_push_pieces(void **state)
{
    (void)state;
    struct cluster c;
    zc_config(&c, 20000);
    cluster_start_server(&c, 0);
    cluster_start_server(&c, 1);
    struct rkv_client *cli = client_join(&c);
    assert_int_equal(rkv_client_init_data(cli, &T_BIG), 0);
    push_all(cli, "big", BIG_LEN, 1);
    struct rkv_client_zc_stats st0, st;
    rkv_client_get_zc_stats(cli, &st0);
    /* Remote positions 0, 2..4, 6: three pieces. */
    uint64_t ids[] = {99, 3, 60, 61, 62, 10, 98};
    size_t n = sizeof(ids) / sizeof(ids[0]);
    float *rows = malloc(n * BIG_LEN * sizeof(float)), *got = malloc(n * BIG_LEN * sizeof(float));
    assert_true(rows && got);
    fill(rows, ids, n, BIG_LEN, 2);
    assert_int_equal(rkv_client_push(cli, "big", ids, n, rows, RKV_OP_ASSIGN, 0), 0);
    rkv_client_get_zc_stats(cli, &st);
    assert_int_equal(st.pushes, st0.pushes + 1);
    assert_int_equal(rkv_client_pull(cli, "big", ids, n, got), 0);
    check(got, ids, n, BIG_LEN, 2);
    /* Sum: rows + rows = the generation-2 values doubled. */
    assert_int_equal(rkv_client_push(cli, "big", ids, n, rows, RKV_OP_SUM, 0), 0);
    assert_int_equal(rkv_client_pull(cli, "big", ids, n, got), 0);
    for (size_t i = 0; i < n * BIG_LEN; i++)
        assert_true(got[i] == 2 * rows[i]);
    free(rows);
    free(got);
    rkv_client_shutdown_servers(cli);
    rkv_client_destroy(cli);
    cluster_stop(&c);
}

/* A buffer freed and allocated again (often at the same address) between
 * calls is registered afresh: per-call registrations never outlive their
 * call, and only rkv_client_register keeps one, until deregistered. */
static void test_buffer_freed_between_calls(void **state)
{
    (void)state;
    struct cluster c;
    zc_config(&c, 20000);
    cluster_start_server(&c, 0);
    cluster_start_server(&c, 1);
    struct rkv_client *cli = client_join(&c);
    assert_int_equal(rkv_client_init_data(cli, &T_BIG), 0);
    push_all(cli, "big", BIG_LEN, 3);
    uint64_t ids[] = {70, 71, 72, 73};
    size_t bytes = 4 * BIG_LEN * sizeof(float);
    struct rkv_client_zc_stats st0, st;
    rkv_client_get_zc_stats(cli, &st0);
    for (int round = 0; round < 4; round++) {
        float *buf = malloc(bytes);
        assert_non_null(buf);
        memset(buf, 0, bytes);
        assert_int_equal(rkv_client_pull(cli, "big", ids, 4, buf), 0);
        check(buf, ids, 4, BIG_LEN, 3);
        free(buf);
    }
    rkv_client_get_zc_stats(cli, &st);
    assert_int_equal(st.call_regs, st0.call_regs + 4);
    assert_int_equal(st.cache_hits, st0.cache_hits);
    /* Registered: found in the cache, also for a range inside it. */
    float *reg = malloc(2 * bytes);
    assert_non_null(reg);
    assert_int_equal(rkv_client_register(cli, reg, 2 * bytes), 0);
    assert_int_equal(rkv_client_pull(cli, "big", ids, 4, reg + 4 * BIG_LEN), 0);
    check(reg + 4 * BIG_LEN, ids, 4, BIG_LEN, 3);
    fill(reg, ids, 4, BIG_LEN, 4);
    assert_int_equal(rkv_client_push(cli, "big", ids, 4, reg, RKV_OP_ASSIGN, 0), 0);
    rkv_client_get_zc_stats(cli, &st);
    assert_int_equal(st.cache_hits, st0.cache_hits + 2);
    assert_int_equal(rkv_client_deregister(cli, reg), 0);
    assert_int_equal(rkv_client_deregister(cli, reg), -RKV_EINVAL);
    free(reg);
    /* The next buffer, maybe at reg's address, is not a stale hit. */
    float *again = malloc(2 * bytes);
    assert_non_null(again);
    assert_int_equal(rkv_client_pull(cli, "big", ids, 4, again), 0);
    check(again, ids, 4, BIG_LEN, 4);
    rkv_client_get_zc_stats(cli, &st);
    assert_int_equal(st.cache_hits, st0.cache_hits + 2);
    assert_int_equal(st.call_regs, st0.call_regs + 5);
    /* A registration still held at destroy is dropped with the client. */
    assert_int_equal(rkv_client_register(cli, again, 2 * bytes), 0);
    rkv_client_shutdown_servers(cli);
    rkv_client_destroy(cli);
    free(again);
    cluster_stop(&c);
}

/* A server that stops answering a zero-copy pull could still write into
 * the caller's buffer after the call returned: the client closes the
 * connection before returning, so the buffer can be freed at once; the
 * server, continued, writes nowhere (ASan would see it), and the next pull
 * connects again. Same for a push whose rows it never read. */
static void test_unanswered_request_closes(void **state)
{
    (void)state;
    struct cluster c;
    zc_config(&c, 1500);
    /* Fork while this process has one thread (see test_store). */
    pid_t child = fork_server(&c, 1);
    cluster_start_server(&c, 0);
    struct rkv_client *cli = client_join(&c);
    assert_int_equal(rkv_client_init_data(cli, &T_BIG), 0);
    push_all(cli, "big", BIG_LEN, 5);
    uint64_t ids[] = {80, 81, 80};
    size_t bytes = 3 * BIG_LEN * sizeof(float);
    for (int kind = 0; kind < 2; kind++) {
        int st;
        kill(child, SIGSTOP);
        assert_int_equal(waitpid(child, &st, WUNTRACED), child);
        float *buf = malloc(bytes);
        assert_non_null(buf);
        fill(buf, ids, 3, BIG_LEN, 6);
        int rc = kind == 0 ? rkv_client_pull(cli, "big", ids, 3, buf)
                           : rkv_client_push(cli, "big", ids, 2, buf, RKV_OP_ASSIGN, 0);
        printf("%s to a stopped server: %s (%s)\n", kind ? "push" : "pull", rkv_strerror(rc),
               rkv_client_errmsg(cli));
        assert_int_equal(rc, -RKV_ETIMEDOUT);
        free(buf);
        kill(child, SIGCONT);
        float *again = malloc(bytes);
        assert_non_null(again);
        assert_int_equal(rkv_client_pull(cli, "big", ids, 3, again), 0);
        /* The timed-out push may or may not have been applied. */
        for (int i = 0; i < 3; i++) {
            float g = again[i * BIG_LEN] == val(ids[i], 0, 6) ? 6 : 5;
            check(again + i * BIG_LEN, ids + i, 1, BIG_LEN, g);
        }
        free(again);
    }
    struct rkv_client_zc_stats st;
    rkv_client_get_zc_stats(cli, &st);
    assert_int_equal(st.drops, 2);
    /* A server that died is not dialled again (no retry_ms): the call after
     * the one that saw it go fails at once, naming it gone. */
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    stray_child = 0;
    forget_machine_shm(&c, 1);
    float *buf = malloc(bytes);
    assert_non_null(buf);
    assert_int_equal(rkv_client_pull(cli, "big", ids, 3, buf), -RKV_EPEERDEAD);
    assert_int_equal(rkv_client_pull(cli, "big", ids, 3, buf), -RKV_EPEERDEAD);
    /* "is gone" once the client heard of the death; before (its progress
     * task is told after the engine marked the connection dead, and a
     * loaded host can hold it there), the refused send's own words. */
    const char *msg = rkv_client_errmsg(cli);
    if (!strstr(msg, "server 1 is gone") && !strstr(msg, "server 1: peer disconnected or died"))
        fail_msg("a call to a dead server 1 said: %s", msg);
    free(buf);
    rkv_client_get_zc_stats(cli, &st);
    assert_int_equal(st.drops, 2);
    rkv_client_shutdown_servers(cli);
    rkv_client_destroy(cli);
    cluster_stop(&c);
}

/* The fault NIC draws, for each message in a drop window, one loss after
 * another until a transmission gets through or RKV_FAULT_RETRY_MAX + 1 were
 * lost, which breaks the connection (nic_fault.c: flt_decide, on PRNG stream
 * 0xfa17). A seed whose first message loses 1..RKV_FAULT_RETRY_MAX (that
 * post is held back as many retransmission intervals, still to read its
 * buffer) and whose second loses them all (that post fails). The fault
 * stats checked after the push say whether the draws still go this way. */
static uint64_t seed_hold_then_break(double fraction, uint32_t *losses_p)
{
    for (uint64_t seed = 1; seed < 100000; seed++) {
        struct rkv_rng r;
        rkv_rng_seed(&r, seed, 0xfa17u);
        uint32_t lost[2] = {0, 0};
        for (int m = 0; m < 2; m++)
            while (lost[m] <= RKV_FAULT_RETRY_MAX && rkv_rng_double(&r) < fraction)
                lost[m]++;
        if (lost[0] >= 1 && lost[0] <= RKV_FAULT_RETRY_MAX && lost[1] > RKV_FAULT_RETRY_MAX) {
            *losses_p = lost[0];
            return seed;
        }
    }
    fail_msg("no seed holds the first message and breaks on the second");
    return 0;
}

/* Regression: a zero-copy push posts its rows as pieces straight from the
 * caller's buffer; when a later post fails (the connection breaks), pieces
 * posted before it may still be read by the NIC until the connection is
 * closed. The call (push, or push_async's wait) must not return before
 * that, or the caller frees or rewrites rows the NIC then sends.
 *
 * The client's TCP NIC is wrapped in the fault NIC, with a drop window that
 * opens once the setup is done: the push's first piece is held back (it
 * reads the caller's rows when it goes, as an RNIC's DMA does after the
 * post returned), its second one breaks the connection. Server 1 is a
 * forked process, killed at the end: the client closed its connection, so
 * no shutdown reaches it. */
static void push_fails_midway(int async)
{
    /* From the client's first message. The setup before it (join, init,
     * one push) must end first; 4 s (1.5 s before) leaves room for a loaded
     * host under ThreadSanitizer. A setup that runs into it fails, naming it. */
    const uint64_t window_ns = 4000000000ull;
    const uint64_t resend_ns = 200000000ull; /* the first piece is held n x this */
    uint32_t losses = 0;
    uint64_t seed = seed_hold_then_break(0.9, &losses);
    struct rkv_nic_fault drop = {.kind = RKV_FAULT_DROP,
                                 .fraction = 0.9,
                                 .start_ns = window_ns,
                                 .end_ns = UINT64_MAX,
                                 .delay_ns = resend_ns,
                                 .break_at_once = 1}; /* the second piece's post fails */
    struct cluster c;
    zc_config(&c, 20000);
    /* Fork while this process has one thread (see test_store). */
    pid_t child = fork_server(&c, 1);
    cluster_start_server(&c, 0);
    struct rkv_port *port;
    struct rkv_nic *tcp, *nic;
    assert_int_equal(rkv_port_posix_create("w", c.cfg.log_level, 1, &port), 0);
    assert_int_equal(rkv_nic_tcp_ops.open(port, NULL, &tcp), 0);
    assert_int_equal(rkv_nic_fault_wrap(tcp, &drop, 1, seed, &nic), 0);
    struct rkv_client *cli;
    char err[256];
    if (rkv_client_create_on(port, nic, &c.cfg, &cli, err, sizeof(err)) < 0)
        fail_msg("client: %s", err);
    uint64_t joined_ns = port->ops->now_ns(port); /* after the first message */
    assert_int_equal(rkv_client_init_data(cli, &T_BIG), 0);
    /* Rows of machine 1 at positions 0, 2 and 3: two pieces, 12 KiB, which
     * go through a slot (no copy into a SEND). The first push caches the
     * slot, so the second one posts its pieces at once, inside the call. */
    uint64_t ids[] = {99, 3, 60, 61};
    size_t n = sizeof(ids) / sizeof(ids[0]);
    float *rows = malloc(n * BIG_LEN * sizeof(float));
    assert_non_null(rows);
    fill(rows, ids, n, BIG_LEN, 7);
    assert_int_equal(rkv_client_push(cli, "big", ids, n, rows, RKV_OP_ASSIGN, 0), 0);
    struct rkv_nic_fault_stats st;
    rkv_nic_fault_stats(nic, &st);
    if (st.messages != 0)
        fail_msg("the setup ran into the drop window (%llu messages in it): host too slow?",
                 (unsigned long long)st.messages);
    while (port->ops->now_ns(port) < joined_ns + window_ns)
        port->ops->sleep_ns(port, 10000000ull);

    fill(rows, ids, n, BIG_LEN, 8);
    int rc;
    if (async) {
        /* Its only remote part broke before its header went: nothing was
         * applied, and the NIC let go of the rows, so push_async says so
         * itself (as rkv.h has it for errors before anything was sent). */
        struct rkv_pending *p = (struct rkv_pending *)&p;
        rc = rkv_client_push_async(cli, "big", ids, n, rows, RKV_OP_ASSIGN, 0, &p);
        assert_null(p);
    } else {
        rc = rkv_client_push(cli, "big", ids, n, rows, RKV_OP_ASSIGN, 0);
    }
    rkv_nic_fault_stats(nic, &st); /* at once: the NIC must have let go already */
    printf("push%s failing midway: %s (%s)\n", async ? "_async" : "", rkv_strerror(rc),
           rkv_client_errmsg(cli));
    assert_int_equal(rc, -RKV_EPEERDEAD);
    /* The draws went as planned: piece 1 held, piece 2 broke, no header. */
    assert_int_equal(st.messages, 2);
    assert_int_equal(st.broken, 1);
    assert_int_equal(st.dropped, losses + RKV_FAULT_RETRY_MAX + 1);
    /* No post reading the caller's rows is left: the caller may free them. */
    assert_int_equal(st.queued, 0);
    free(rows);

    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    stray_child = 0;
    forget_machine_shm(&c, 1);
    rkv_client_shutdown_servers(cli); /* server 0; server 1 is gone */
    rkv_client_destroy(cli);
    nic->ops->close(nic);
    port->ops->destroy(port);
    cluster_stop(&c);
}

static void test_push_fails_midway(void **state)
{
    (void)state;
    push_fails_midway(0);
}

static void test_push_async_fails_midway(void **state)
{
    (void)state;
    push_fails_midway(1);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    atexit(kill_stray_child);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_regcache_bounds),
        cmocka_unit_test(test_unanswered_request_closes), /* forks: first threads-free */
        cmocka_unit_test(test_push_fails_midway),         /* forks */
        cmocka_unit_test(test_push_async_fails_midway),   /* forks */
        cmocka_unit_test(test_pull_scattered_duplicates),
        cmocka_unit_test(test_pull_direct_rows_at_their_positions),
        cmocka_unit_test(test_push_pieces),
        cmocka_unit_test(test_buffer_freed_between_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
