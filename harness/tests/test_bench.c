/* rkv bench: the output's form (figure and ratio lines whose values parse
 * as positive numbers, the table, --json), with and without iperf3, and its
 * usage errors. Never a timing threshold: the host may be loaded. */
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

static void check_tcp(const char *limit)
{
    int figures, ratios;
    check_lines(&figures, &ratios);
    assert_true(figures >= 4 * 5 + 3); /* 4 shapes x 5 figures, and the limits */
    assert_true(ratios >= 4 * 3);
    const char *want[] = {
        "figure tcp.push.4KiB.1x1 ", "figure tcp.pull.4KiB.2x2 ", "figure tcp.pushpull.4KiB.1x2 ",
        "figure tcp.pull1.p50.4KiB.2x1 ", "figure tcp.pull1.p99.4KiB.1x1 ",
        "figure memcpy.1core.64MiB ", "figure memcpy.1core.rowblock.4KiB ",
        /* the other polling mode's latency, and ps-lite's */
        "figure tcp.pull1.p50.busy.4KiB.1x1 ", "figure tcp.pull1.p50.block.4KiB.1x1 ",
        "ratio pslite.pull1.4KiB.1x1/tcp.pull1.p50.4KiB.1x1 ",
        "1-row 4KiB pull, busy-poll 1: p50 "};
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
    check_tcp(iperf3 ? "iperf3.1stream" : "loopback.builtin.1stream");
}

/* Without iperf3 on PATH the built-in loopback test stands in, labelled. */
static void test_tcp_without_iperf3(void **state)
{
    (void)state;
    assert_int_equal(bench("PATH=/nonexistent", "tcp --reps 1 --sizes 4096"), 0);
    check_tcp("loopback.builtin.1stream");
    assert_non_null(strstr(out, "note iperf3 is not installed"));
    assert_null(strstr(out, "figure iperf3."));
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
    assert_int_equal(run_rkv("", "bench shm --sizes 4097"), 2);
    assert_int_equal(run_rkv("", "bench shm --sizes 'x'"), 2);
    assert_int_equal(run_rkv("", "bench shm --reps 1 --sizes 4096 --no-such-setting 1"), 2);
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
    snprintf(args, sizeof(args), "durable --dir %s --large-mib 2 --seconds 0.2", dir);
    int rc = bench("", args);
    snprintf(args, sizeof(args), "rm -rf %s", dir);
    assert_int_equal(system(args), 0);
    if (rc != 0)
        fail_msg("rkv bench durable: exit %d:\n%s", rc, out);
    const char *want[] = {"ratio durable.push.4K.1w.shard1M/plain.push.4K.1w.shard1M ",
                          "ratio durable.push.4K.8w.shard2M/fdatasync.4K ",
                          "ratio durable.push.1M.8w.shard2M/plain.push.1M.8w.shard2M ",
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage),
        cmocka_unit_test(test_durable),
        cmocka_unit_test(test_shm),
        cmocka_unit_test(test_tcp),
        cmocka_unit_test(test_tcp_without_iperf3),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
