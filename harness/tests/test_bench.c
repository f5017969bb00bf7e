/* rkv bench: the output's form (figure and ratio lines whose values parse
 * as positive numbers, the table, --json), with and without iperf3, the
 * limit it chose, its usage errors; the aggregate of workers whose passes
 * cannot overlap. Never a timing threshold: the host may be loaded. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <math.h>

#include "harness/tests/rkv_run.h"

/* Every `figure NAME VALUE UNIT` and `ratio NAME VALUE` line of out has a
 * positive value; returns how many lines of each kind there were. */
static void check_lines(int *figures_p, int *ratios_p)
{
    int figures = 0, ratios = 0;
    for (const char *line = out; *line; line = strchr(line, '\n') + 1) {
        char name[128], unit[16];
        double v;
        if (!strncmp(line, "figure ", 7)) {
            assert_int_equal(sscanf(line, "figure %127s %lf %15s", name, &v, unit), 3);
            assert_true(v > 0);
            assert_true(!strcmp(unit, "GB/s") || !strcmp(unit, "us") || !strcmp(unit, "switches"));
            figures++;
        } else if (!strncmp(line, "ratio ", 6)) {
            assert_int_equal(sscanf(line, "ratio %127s %lf", name, &v), 2);
            assert_non_null(strchr(name, '/'));
            assert_true(v > 0);
            ratios++;
        }
        if (!strchr(line, '\n'))
            break;
    }
    *figures_p = figures;
    *ratios_p = ratios;
}

/* The median `figure NAME` printed, or 0 when there is none. */
static double figure(const char *name)
{
    char want[160];
    snprintf(want, sizeof(want), "\nfigure %s ", name);
    const char *at = strstr(out, want);
    return at ? strtod(at + strlen(want), NULL) : 0;
}

/* The TCP limit the bench says it chose (`note the TCP limit is NAME`) is
 * the best one-stream raw figure it printed; its name in limit_p. */
static void check_tcp_limit(char *limit_p, size_t len)
{
    const char *note = strstr(out, "note the TCP limit is ");
    assert_non_null(note);
    char name[64];
    assert_int_equal(sscanf(note, "note the TCP limit is %63s", name), 1);
    snprintf(limit_p, len, "%s", name);
    const char *candidates[] = {"iperf3.1stream.l1M.Z", "iperf3.1stream",
                                "loopback.builtin.1stream"};
    double chosen = figure(name);
    assert_true(chosen > 0);
    int known = 0;
    for (size_t i = 0; i < sizeof(candidates) / sizeof(candidates[0]); i++) {
        known |= !strcmp(name, candidates[i]);
        if (figure(candidates[i]) > chosen)
            fail_msg("limit %s (%g) is not the best: %s is %g", name, chosen, candidates[i],
                     figure(candidates[i]));
    }
    assert_true(known);
    char used[128];
    snprintf(used, sizeof(used), "the ratios use the best one-stream figure, %s (", name);
    assert_non_null(strstr(out, used));
    /* two connections at once: also against the best two-stream figure */
    const char *two[] = {"iperf3.2stream.l1M.Z", "iperf3.2stream", "loopback.builtin.2stream"};
    assert_true(figure("loopback.builtin.2stream") > 0);
    int found = 0;
    for (size_t i = 0; i < 3; i++) {
        char ratio[128];
        snprintf(ratio, sizeof(ratio), "ratio tcp.push.4KiB.2x2/%s ", two[i]);
        if (!strstr(out, ratio))
            continue;
        found++;
        for (size_t k = 0; k < 3; k++)
            if (figure(two[k]) > figure(two[i]))
                fail_msg("2x2 is set against %s, but %s is higher:\n%s", two[i], two[k], out);
        snprintf(ratio, sizeof(ratio), "ratio tcp.push.4KiB.1x1/%s ", two[i]);
        assert_null(strstr(out, ratio)); /* one connection: one stream only */
    }
    assert_int_equal(found, 1);
    /* ps-lite's old figures are gone; what replaces them says why */
    assert_null(strstr(out, "pslite"));
    assert_non_null(strstr(out, "a peer that cannot be built here (ps-lite) is compared outside "
                                "the project"));
}

static void check_tcp(const char *want_limit)
{
    int figures, ratios;
    check_lines(&figures, &ratios);
    char limit[64];
    check_tcp_limit(limit, sizeof(limit));
    if (want_limit)
        assert_string_equal(limit, want_limit);
    assert_true(figures >= 4 * 5 + 3); /* 4 shapes x 5 figures, and the limits */
    assert_true(ratios >= 4 * 3);
    const char *want[] = {
        "figure tcp.push.4KiB.1x1 ", "figure tcp.pull.4KiB.2x2 ", "figure tcp.pushpull.4KiB.1x2 ",
        "figure tcp.pull1.p50.4KiB.2x1 ", "figure tcp.pull1.p99.4KiB.1x1 ",
        "figure memcpy.1core.64MiB ", "figure memcpy.1core.rowblock.4KiB ",
        /* the other polling mode's latency */
        "figure tcp.pull1.p50.busy.4KiB.1x1 ", "figure tcp.pull1.p50.block.4KiB.1x1 ",
        "1-row 4KiB pull, busy-poll 1: p50 ", "figure loopback.builtin.1stream "};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        assert_non_null(strstr(out, want[i]));
    char ratio[128];
    snprintf(ratio, sizeof(ratio), "ratio tcp.pull.4KiB.1x1/%s ", limit);
    assert_non_null(strstr(out, ratio));
    assert_non_null(strstr(out, "| size | SxW | push GB/s |"));
    assert_non_null(strstr(out, "| 4KiB | 2x2 |"));
}

/* `env RKV_BIN bench args`, stdout only: progress goes to stderr. */
static int bench(const char *env, const char *args)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s %s bench %s 2>/dev/null", env, RKV_BIN, args);
    return sh(cmd);
}

static int have_iperf3(void)
{
    return sh("command -v iperf3 >/dev/null 2>&1") == 0;
}

static void test_tcp(void **state)
{
    (void)state;
    int iperf3 = have_iperf3(); /* before: sh() reuses out */
    assert_int_equal(bench("", "tcp --reps 1 --sizes 4096 --iperf-seconds 1"), 0);
    check_tcp(iperf3 ? NULL : "loopback.builtin.1stream");
    if (iperf3) { /* every raw figure */
        assert_true(figure("iperf3.1stream.l1M.Z") > 0);
        assert_true(figure("iperf3.1stream") > 0);
        assert_true(figure("iperf3.2stream.l1M.Z") > 0);
        assert_true(figure("iperf3.2stream") > 0);
    }
}

/* Without iperf3 on PATH the built-in loopback test stands in, labelled. */
static void test_tcp_without_iperf3(void **state)
{
    (void)state;
    assert_int_equal(bench("PATH=/nonexistent", "tcp --reps 1 --sizes 4096"), 0);
    check_tcp("loopback.builtin.1stream");
    assert_non_null(strstr(out, "note iperf3 is not installed"));
    assert_null(strstr(out, "figure iperf3."));
    assert_null(strstr(out, "/iperf3."));
}

/* One worker's timed pass as `rkv demo` prints it. */
struct demo_pass {
    double gbs, start_ms, end_ms;
};

/* Runs `rkv demo` with 2 workers on 2 machines at 4 KiB rows (env before
 * it) and reads its push, pull and push+pull aggregates (the table) and
 * each worker's own passes (its `worker N:` line). */
static void demo_passes(const char *env, double agg[3], struct demo_pass w[2][4])
{
    int rc = run_rkv(env, "demo --machines 2 --servers-per-machine 1 --num-workers 2 "
                          "--value-bytes 4096 --rows 64 --rounds 1");
    if (rc != 0)
        fail_msg("rkv demo: exit %d:\n%s", rc, out);
    const char *row = strstr(out, "\n| 2 | 2 / 2 | 4096 | ");
    assert_non_null(row);
    assert_int_equal(
        sscanf(row, "\n| 2 | 2 / 2 | 4096 | %lf | %lf | %lf |", &agg[0], &agg[1], &agg[2]), 3);
    for (unsigned i = 0; i < 2; i++) {
        char head[32];
        snprintf(head, sizeof(head), "\nworker %u: push ", i);
        const char *line = strstr(out, head);
        if (!line)
            fail_msg("no \"%s\" in:\n%s", head + 1, out);
        struct demo_pass *p = w[i];
        int n = sscanf(line + strlen(head),
                       "%lf GB/s in %lf..%lf ms, pull %lf GB/s in %lf..%lf ms, push+pull %lf GB/s "
                       "in %lf..%lf ms, pipelined %lf GB/s in %lf..%lf ms",
                       &p[0].gbs, &p[0].start_ms, &p[0].end_ms, &p[1].gbs, &p[1].start_ms,
                       &p[1].end_ms, &p[2].gbs, &p[2].start_ms, &p[2].end_ms, &p[3].gbs,
                       &p[3].start_ms, &p[3].end_ms);
        assert_int_equal(n, 12);
    }
}

/* Every pass starts at a barrier: no worker begins a pass before every
 * worker ended the one before (the order of events, not their speed;
 * without the barrier the faster worker ran ahead into the next pass). */
static void test_passes_start_together(void **state)
{
    (void)state;
    double agg[3];
    struct demo_pass w[2][4];
    demo_passes("", agg, w);
    for (int k = 1; k < 4; k++) {
        double last_end = fmax(w[0][k - 1].end_ms, w[1][k - 1].end_ms);
        double first_start = fmin(w[0][k].start_ms, w[1][k].start_ms);
        if (first_start + 0.01 < last_end) /* printed to 0.01 ms */
            fail_msg("pass %d began at %.2f ms, before pass %d ended at %.2f ms:\n%s", k,
                     first_start, k - 1, last_end, out);
    }
}

/* The aggregate of workers whose passes cannot overlap (the test hook
 * makes them take turns) is all their bytes over the window from the first
 * start to the last end: never more than one worker alone moved. The
 * formula it replaced (all bytes over the slowest worker's own time)
 * printed about twice that here. Rounding aside, no threshold on time. */
static void test_aggregate_serial_passes(void **state)
{
    (void)state;
    double agg[3];
    struct demo_pass w[2][4];
    demo_passes("RKV_TEST_SERIAL_PASSES=1", agg, w);
    for (int k = 0; k < 3; k++) { /* push, pull, push+pull: the table's columns */
        const struct demo_pass *a = &w[0][k], *b = &w[1][k];
        /* the hook worked: one worker's pass ended before the other's began */
        if (!(a->end_ms <= b->start_ms + 0.01 || b->end_ms <= a->start_ms + 0.01))
            fail_msg("kind %d: the passes overlapped:\n%s", k, out);
        double bytes = a->gbs * (a->end_ms - a->start_ms) + b->gbs * (b->end_ms - b->start_ms);
        double window = fmax(a->end_ms, b->end_ms) - fmin(a->start_ms, b->start_ms);
        double want = bytes / window, alone = fmax(a->gbs, b->gbs);
        /* rounding: GB/s to 0.001, ms to 0.01 */
        if (fabs(agg[k] - want) > 0.02 * want + 0.002)
            fail_msg("kind %d: aggregate %.3f GB/s, want %.3f (all bytes over the common "
                     "window):\n%s",
                     k, agg[k], want, out);
        if (agg[k] > 1.02 * alone + 0.002)
            fail_msg("kind %d: aggregate %.3f GB/s is more than one worker alone, %.3f:\n%s", k,
                     agg[k], alone, out);
    }
}

static void test_shm(void **state)
{
    (void)state;
    assert_int_equal(bench("", "shm --reps 1 --sizes 4096"), 0);
    int figures, ratios;
    check_lines(&figures, &ratios);
    assert_true(figures >= 2 * 5 + 5 + 4); /* 2 shapes, the 512 B row, 4 limits */
    assert_true(ratios >= 2 * 3);
    /* The ratios use memcpy over the shard's working set, one per kind;
     * the in-cache row block is only shown. */
    assert_non_null(strstr(out, "ratio shm.push.4KiB.1x1/memcpy.1core.shard.push.4KiB "));
    assert_non_null(strstr(out, "ratio shm.pull.4KiB.2x2/memcpy.1core.shard.pull.4KiB "));
    assert_non_null(strstr(out, "ratio shm.pushpull.4KiB.1x1/memcpy.1core.shard.pushpull.4KiB "));
    assert_non_null(strstr(out, "figure memcpy.1core.rowblock.4KiB "));
    assert_null(strstr(out, "/memcpy.1core.rowblock."));
    assert_non_null(strstr(out, "| push limit GB/s | pull limit GB/s |"));
    assert_non_null(strstr(out, "(memcpy.1core.rowblock.SIZE), the former limit"));
    assert_non_null(strstr(out, "figure shm.pull1.p50.512B.1x1 "));
    assert_non_null(strstr(out, "512 B row, co-located pull: p50 "));

    assert_int_equal(bench("", "shm --reps 1 --sizes 4096 --json"), 0);
    assert_int_equal(out[0], '{');
    assert_non_null(strstr(out, "\"figures\": {"));
    assert_non_null(strstr(out, "\"shm.pull.4KiB.1x1/memcpy.1core.shard.pull.4KiB\": "));
    assert_non_null(strstr(out, "\"memcpy.1core.shard.push.4KiB\": {\"value\": "));
    assert_null(strstr(out, "\nfigure "));
    /* the whole output is one JSON document (jansson writes it, reads it) */
    json_error_t jerr;
    json_t *doc = json_loads(out, 0, &jerr);
    if (!doc)
        fail_msg("--json is not JSON: %s at %d:%d\n%s", jerr.text, jerr.line, jerr.column, out);
    assert_string_equal(json_string_value(json_object_get(doc, "mode")), "shm");
    json_t *figs = json_object_get(doc, "figures");
    assert_true(json_object_size(figs) >= 2 * 5 + 5 + 4);
    assert_true(json_is_number(
        json_object_get(json_object_get(figs, "memcpy.1core.shard.push.4KiB"), "value")));
    assert_true(json_object_size(json_object_get(doc, "ratios")) >= 2 * 3);
    json_decref(doc);
}

static void test_usage(void **state)
{
    (void)state;
    assert_int_equal(run_rkv("", "bench"), 2);
    assert_int_equal(run_rkv("", "bench udp"), 2);
    assert_int_equal(run_rkv("", "bench tcp --reps 0"), 2);
    assert_non_null(strstr(out, "rkv bench: --reps: expected 1..99, got \"0\""));
    /* (int)strtol took 2^32 + 1 as 1 and ran the bench once. */
    assert_int_equal(run_rkv("", "bench tcp --reps 4294967297"), 2);
    assert_non_null(strstr(out, "rkv bench: --reps: expected 1..99, got \"4294967297\""));
    assert_int_equal(run_rkv("", "bench udp"), 2);
    assert_non_null(strstr(out, "rkv bench: expected a mode (tcp, shm or verbs), got \"udp\""));
    assert_int_equal(run_rkv("", "bench tcp --iperf-seconds 61"), 2);
    assert_non_null(strstr(out, "--iperf-seconds: expected 1..60"));
    assert_int_equal(run_rkv("", "bench shm --sizes 4097"), 2);
    assert_int_equal(run_rkv("", "bench shm --sizes 'x'"), 2);
    assert_non_null(strstr(out, "rkv bench: --sizes: expected up to 8 value sizes"));
    assert_int_equal(run_rkv("", "bench shm --reps 1 --sizes 4096 --no-such-setting 1"), 2);
    /* verbs: the port and GID overrides are checked; an address no RDMA
     * port owns (here: none at all) is named, not replaced by rxe0 */
    assert_int_equal(run_rkv("", "bench verbs --port 0"), 2);
    assert_int_equal(run_rkv("", "bench verbs --gid-index 256"), 2);
    assert_int_equal(run_rkv("", "bench tcp --port 1"), 2);
    /* A settings error, refused before anything starts (it was exit 3). */
    assert_int_equal(run_rkv("RKV_HOST=10.9.9.1,,10.9.9.2", "bench verbs --reps 1"), 2);
    assert_non_null(strstr(out, "host: \"10.9.9.1,,10.9.9.2\": an empty address in the list "
                                "(env RKV_HOST)"));
    assert_int_equal(run_rkv("RKV_HOST=10.9.9.1 RKV_VERBS_DEV=nodev0:1", "bench verbs --reps 1"),
                     3);
    assert_non_null(strstr(out, "no RDMA port owns 10.9.9.1 on RKV_VERBS_DEV nodev0:1"));
    assert_int_equal(run_rkv("", "bench --help"), 0);
    assert_non_null(strstr(out, "usage: rkv bench tcp|shm|verbs"));
    assert_non_null(strstr(out, "(memcpy.1core.shard.push|pull|pushpull.SIZE; the ratios"));
}

/* rkv bench durable at small sizes: every push shape against its plain run
 * and the disk's fdatasync limit, and a recovery time, all positive. */
static void test_durable(void **state)
{
    (void)state;
    char dir[] = "/tmp/rkv-bench-durable.XXXXXX", args[256];
    assert_non_null(mkdtemp(dir));
    snprintf(args, sizeof(args), "durable --dir %s --large-mib 2 --seconds 0.2 --prewrite-mib 4",
             dir);
    int rc = bench("", args);
    snprintf(args, sizeof(args), "rm -rf %s", dir);
    assert_int_equal(system(args), 0);
    if (rc != 0)
        fail_msg("rkv bench durable: exit %d:\n%s", rc, out);
    const char *want[] = {"ratio durable.push.4K.1w.shard1M/plain.push.4K.1w.shard1M ",
                          "ratio durable.push.4K.8w.shard2M/fdatasync.4K ",
                          "ratio durable.push.1M.8w.shard2M/plain.push.1M.8w.shard2M ",
                          "ratio durable.push.1M.8w.shard2M/disk.overwrite ",
                          "ratio durable.push.1M.8w.shard2M/durable.push.1M.8w.shard1M ",
                          "ratio durable.push.4K.1w.shard2M/durable.push.4K.1w.shard1M ",
                          "figure durable.push.1M.8w.shard2M.max ",
                          "figure plain.push.4K.1w.shard1M.max ",
                          "figure recovery.shard2M."};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        if (!strstr(out, want[i]))
            fail_msg("no \"%s\" in:\n%s", want[i], out);
    for (const char *line = out; *line; line = strchr(line, '\n') + 1) {
        char name[160];
        double v;
        if (!strncmp(line, "ratio ", 6) || !strncmp(line, "figure ", 7)) {
            assert_int_equal(sscanf(strchr(line, ' ') + 1, "%159s %lf", name, &v), 2);
            if (!(v > 0))
                fail_msg("not positive: %.*s", (int)strcspn(line, "\n"), line);
        }
        if (!strchr(line, '\n'))
            break;
    }
}

/* rkv bench local: every repetition of both kinds and the two medians, each
 * a positive figure parsed back; its usage errors exit 2. */
static void test_local(void **state)
{
    (void)state;
    assert_int_equal(run_rkv("", "bench local --reps 0"), 2);
    assert_int_equal(run_rkv("", "bench local --reps 4294967297"), 2); /* was 1 rep */
    assert_int_equal(run_rkv("", "bench local --calls x"), 2);
    assert_int_equal(run_rkv("", "bench local --calls 0"), 2);
    assert_int_equal(run_rkv("", "bench local --what"), 2);
    assert_int_equal(run_rkv("", "bench local --help"), 0);
    assert_non_null(strstr(out, "usage: rkv bench local"));
    int rc = bench("", "local --calls 3000 --reps 3");
    if (rc != 0)
        fail_msg("rkv bench local: exit %d:\n%s", rc, out);
    int reps = 0;
    for (const char *line = out; *line; line = strchr(line, '\n') + 1) {
        int r;
        char what[8];
        double ns, rate;
        if (sscanf(line, "rep %d %7[a-z]: %lf ns/call (CPU), %lf calls/s", &r, what, &ns, &rate) ==
            4) {
            assert_true(r >= 1 && r <= 3);
            assert_true(!strcmp(what, "pull") || !strcmp(what, "push"));
            assert_true(ns > 0 && rate > 0);
            reps++;
        }
        if (!strchr(line, '\n'))
            break;
    }
    assert_int_equal(reps, 2 * 3);
    const char *kinds[] = {"pull", "push"};
    for (int k = 0; k < 2; k++) {
        char want[96];
        snprintf(want, sizeof(want), "median of 3, 3000 1-row local %s calls each: ", kinds[k]);
        const char *at = strstr(out, want);
        if (!at)
            fail_msg("no \"%s\" in:\n%s", want, out);
        assert_true(strtod(at + strlen(want), NULL) > 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage),
        cmocka_unit_test(test_durable),
        cmocka_unit_test(test_local),
        cmocka_unit_test(test_shm),
        cmocka_unit_test(test_tcp),
        cmocka_unit_test(test_tcp_without_iperf3),
        cmocka_unit_test(test_passes_start_together),
        cmocka_unit_test(test_aggregate_serial_passes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
