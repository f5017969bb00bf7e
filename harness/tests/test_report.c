/* Reports: percentiles never above the slowest request, and report.json
 * valid whatever a phase is called (written and read back with jansson),
 * with the plots drawn from the same names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "harness/report.h"
#include "harness/workload.h"

static void add_ns(struct rkv_wl_phase_stats *st, uint64_t ns)
{
    st->hist[rkv_wl_bucket(ns)]++;
    if (ns / 1e3 > st->max_us)
        st->max_us = ns / 1e3;
}

/* The histogram's bucket edge lies up to 4.4 % above the samples in it:
 * one request of 1000 ns made a p99 of 1.044 us above a max of 1.000. */
static void test_percentiles_never_above_max(void **state)
{
    (void)state;
    struct rkv_wl_phase_stats *st = calloc(1, sizeof(*st));
    assert_non_null(st);
    add_ns(st, 1000);
    assert_true(rkv_wl_percentile_us(st, 0.99) <= st->max_us);
    assert_true(rkv_wl_percentile_us(st, 0.5) <= st->max_us);
    /* random latencies over six decades, many phases' worth */
    uint64_t x = 88172645463325252ull;
    for (int run = 0; run < 200; run++) {
        memset(st, 0, sizeof(*st));
        int n = 1 + run % 50;
        for (int i = 0; i < n; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            add_ns(st, 100 + x % 100000000);
        }
        double p50 = rkv_wl_percentile_us(st, 0.5), p99 = rkv_wl_percentile_us(st, 0.99);
        if (!(p50 <= p99 && p99 <= st->max_us))
            fail_msg("run %d: p50 %.3f p99 %.3f max %.3f", run, p50, p99, st->max_us);
    }
    free(st);
}

static const char yaml_text[] =
    "cluster: {machines: 1, servers_per_machine: 1, workers_per_machine: 1}\n"
    "tensors:\n"
    "  - {name: t, rows: 64}\n"
    "workload:\n"
    "  - {name: 'say \"hi\" back\\slash ''x''', tensor: t, rounds: 2}\n"
    "  - {name: \"tab\\there_and^up\", tensor: t, rounds: 2}\n";

static void test_report_json_round_trips_names(void **state)
{
    (void)state;
    char yaml[64], dir[64], err[256];
    snprintf(yaml, sizeof(yaml), "/tmp/rkv-report-%d.yaml", (int)getpid());
    snprintf(dir, sizeof(dir), "/tmp/rkv-report-%d.d", (int)getpid());
    FILE *f = fopen(yaml, "w");
    assert_non_null(f);
    fputs(yaml_text, f);
    fclose(f);
    struct rkv_scenario *sc;
    if (rkv_scenario_load(yaml, &sc, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_string_equal(sc->phases[0].name, "say \"hi\" back\\slash 'x'");
    assert_string_equal(sc->phases[1].name, "tab\there_and^up");
    /* one worker's PHASE lines, as a launcher reads them */
    struct rkv_wl_phase_stats *st = calloc(1, sizeof(*st));
    assert_non_null(st);
    st->pushes = 3;
    st->pulls = 4;
    st->wall_s = 0.5;
    st->bytes = 1 << 20;
    add_ns(st, 1000);
    add_ns(st, 2500);
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    assert_non_null(m);
    rkv_wl_print(m, 0, 0, st);
    rkv_wl_print(m, 0, 1, st);
    fclose(m);
    struct rkv_report r;
    char *outs[1] = {buf};
    assert_int_equal(rkv_report_collect(&r, sc, outs, 1), 0);
    r.processes_ok = 1;
    assert_int_equal(rkv_report_write(&r, dir, "tcp"), 0);
    char path[128];
    snprintf(path, sizeof(path), "%s/report.json", dir);
    json_error_t jerr;
    json_t *doc = json_load_file(path, 0, &jerr);
    if (!doc)
        fail_msg("report.json is not JSON: %s at line %d", jerr.text, jerr.line);
    json_t *phases = json_object_get(doc, "phases");
    assert_int_equal(json_array_size(phases), 2);
    for (size_t p = 0; p < 2; p++) {
        json_t *ph = json_array_get(phases, p);
        assert_string_equal(json_string_value(json_object_get(ph, "name")), sc->phases[p].name);
        assert_true(json_real_value(json_object_get(ph, "p99_us")) <=
                    json_real_value(json_object_get(ph, "max_us")));
        assert_int_equal(json_integer_value(json_object_get(ph, "pushes")), 3);
    }
    assert_true(json_is_true(json_object_get(doc, "passed")));
    json_decref(doc);
    /* the plots take the same names (gnuplot from ci/deps, when present) */
    if (access("/usr/bin/gnuplot", X_OK) == 0) {
        if (rkv_report_plot(&r, dir, err, sizeof(err)) < 0)
            fail_msg("plot: %s", err);
        for (int i = 0; i < 2; i++) {
            snprintf(path, sizeof(path), "%s/%s", dir, i ? "throughput.png" : "latency_cdf.png");
            f = fopen(path, "rb");
            assert_non_null(f);
            unsigned char magic[4] = {0};
            assert_int_equal(fread(magic, 1, 4, f), 4);
            fclose(f);
            assert_memory_equal(magic, "\x89PNG", 4);
        }
    }
    rkv_report_free(&r);
    rkv_scenario_free(sc);
    free(st);
    free(buf);
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    unlink(yaml);
}

/* Worker processes on tcp each pin the winner of a contested row in their
 * own oracle; the launcher compares them: two winners of one row fail the
 * run, naming the row and both readings. */
static void test_report_compares_pinned_winners(void **state)
{
    (void)state;
    char yaml[64], err[256];
    snprintf(yaml, sizeof(yaml), "/tmp/rkv-pins-%d.yaml", (int)getpid());
    FILE *f = fopen(yaml, "w");
    assert_non_null(f);
    fputs("cluster: {machines: 1, servers_per_machine: 1, workers_per_machine: 3}\n"
          "tensors:\n"
          "  - {name: t, rows: 8}\n"
          "workload:\n"
          "  - {name: race, tensor: t, push: 1.0, push_op: assign, rounds: 2}\n"
          "  - {name: read, tensor: t, push: 0, rounds: 2}\n",
          f);
    fclose(f);
    struct rkv_scenario *sc;
    if (rkv_scenario_load(yaml, &sc, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    unlink(yaml);
    struct rkv_wl_phase_stats *st = calloc(1, sizeof(*st));
    assert_non_null(st);
    add_ns(st, 1000);
    char phases[2][4096];
    for (int w = 0; w < 3; w++) {
        char *buf = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&buf, &len);
        rkv_wl_print(m, (uint32_t)w, 0, st);
        rkv_wl_print(m, (uint32_t)w, 1, st);
        fclose(m);
        if (w < 2)
            snprintf(phases[w], sizeof(phases[w]), "%s", buf);
        free(buf);
    }
    char agree0[8192], agree1[8192], other[8192];
    snprintf(agree0, sizeof(agree0), "PIN t=0 r=5 w=2 p=0 n=1\nPIN t=0 r=6 w=0 p=0 n=0\n%s",
             phases[0]);
    snprintf(agree1, sizeof(agree1), "PIN t=0 r=5 w=2 p=0 n=1\n%s", phases[1]);
    snprintf(other, sizeof(other), "PIN t=0 r=6 w=1 p=0 n=1\n%s", phases[1]);
    struct rkv_report r;
    char *same[3] = {agree0, agree1, agree1};
    assert_int_equal(rkv_report_collect(&r, sc, same, 3), 0);
    r.processes_ok = 1;
    assert_true(rkv_report_passed(&r));
    rkv_report_free(&r);
    char *differ[3] = {agree0, agree1, other};
    assert_int_equal(rkv_report_collect(&r, sc, differ, 3), 0);
    r.processes_ok = 1;
    assert_false(rkv_report_passed(&r));
    assert_int_equal(r.phase[0].errors, 1);
    if (!strstr(r.first_error, "tensor \"t\" row 6: worker process 0 read the assign of worker 0 "
                               "(phase \"race\" round 0), worker process 2 that of worker 1"))
        fail_msg("%s", r.first_error);
    rkv_report_free(&r);
    free(st);
    rkv_scenario_free(sc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_percentiles_never_above_max),
        cmocka_unit_test(test_report_json_round_trips_names),
        cmocka_unit_test(test_report_compares_pinned_winners),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
