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
#include "harness/tests/rkv_run.h"
#include "harness/tests/tmp_scenario.h"
#include "harness/workload.h"

static void add_ns(struct rkv_wl_phase_stats *st, uint64_t ns)
{
    st->hist[rkv_wl_bucket(ns)]++;
    if (ns / 1e3 > st->max_us)
        st->max_us = ns / 1e3;
}

/* The histogram's bucket edge lies up to 4.4 % above the samples in it:
 * one request of 1000 ns made a p99 of 1.044 us above a max of 1.000. */
/* What rkv_report_print writes for r as backend's (caller frees). */
static char *report_text(const struct rkv_report *r, const char *backend)
{
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    assert_non_null(m);
    rkv_report_print(r, m, backend);
    fclose(m);
    return text;
}

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
    tmp_scenario(yaml, sizeof(yaml), "report", yaml_text);
    snprintf(dir, sizeof(dir), "/tmp/rkv-report-%d.d", (int)getpid());
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
    /* Bounds print as given: 0.001 was "<= 0.0" and 0.000001 ">= 0.000". */
    sc->expect_max_p99_us = 0.001;
    sc->expect_min_gbps = 0.000001;
    char *text = report_text(&r, "tcp");
    if (!strstr(text, "us <= 0.001: miss") || !strstr(text, "GB/s >= 1e-06: pass"))
        fail_msg("bounds misprinted:\n%s", text);
    free(text);
    /* A fault run failed on a fault that did not fire (a second crash of a
     * node restarted too late): the verdict was a bare "FAIL". */
    r.fault_run = 1;
    r.faults_fired = 0;
    text = report_text(&r, "tcp");
    if (!strstr(text, "verdict: FAIL (not every fault fired, see \"faults:\" above (a node "
                      "already down cannot crash"))
        fail_msg("no reason given:\n%s", text);
    if (!strstr(text, "slow_cpu rows for its server to handle in its window"))
        fail_msg("slow_cpu not among the reasons:\n%s", text);
    free(text);
    /* The twin's CPU line: all of it row_cost_ns was "the kernel's per
     * message and per byte". */
    r.sim_s = 0.001;
    r.sim_cpu_s = 0.029;
    text = report_text(&r, "sim");
    if (!strstr(text, "CPU charged in the twin: 0.029 core-s, 0.000 of it node code measured, the "
                      "rest modelled (row_cost_ns per row a handler touches"))
        fail_msg("%s", text);
    free(text);
    r.sim_s = 0;
    r.sim_cpu_s = 0;
    /* report.json has the faults line too: report.md alone had it. */
    snprintf(r.faults, sizeof(r.faults), "s1.0 killed at 0.5 s");
    r.survivor_errors = 2;
    assert_int_equal(rkv_report_write(&r, dir, "tcp"), 0);
    doc = json_load_file(path, 0, &jerr);
    assert_non_null(doc);
    json_t *fj = json_object_get(doc, "faults");
    if (!json_is_object(fj) ||
        strcmp(json_string_value(json_object_get(fj, "fired")), "s1.0 killed at 0.5 s") != 0 ||
        !json_is_false(json_object_get(fj, "all_fired")) ||
        json_integer_value(json_object_get(fj, "survivor_errors")) != 2)
        fail_msg("report.json's faults: %s", json_dumps(doc, 0));
    json_decref(doc);
    r.faults[0] = 0;
    r.survivor_errors = 0;
    /* A wrong value makes its worker exit 1: the verdict said "a process
     * failed (its error is on stderr)", on both kinds of run. */
    r.phase[1].errors = 2;
    snprintf(r.first_error, sizeof(r.first_error), "t row 3 element 0: 5, want 4");
    r.processes_ok = 0;
    for (int fault_run = 0; fault_run < 2; fault_run++) {
        r.fault_run = fault_run;
        text = report_text(&r, "tcp");
        char want[160];
        snprintf(want, sizeof(want),
                 "verdict: FAIL (phase %s: 2 wrong values pulled; the first: t row 3 element 0: "
                 "5, want 4)",
                 sc->phases[1].name);
        if (!strstr(text, want))
            fail_msg("fault run %d: no wrong value named:\n%s", fault_run, text);
        free(text);
    }
    r.phase[1].errors = 0;
    r.first_error[0] = 0;
    r.processes_ok = 1;
    r.fault_run = 0;
    /* the plots take the same names (gnuplot from ci/deps, when present) */
    if (access("/usr/bin/gnuplot", X_OK) == 0) {
        if (rkv_report_plot(&r, dir, "tcp", err, sizeof(err)) < 0)
            fail_msg("plot: %s", err);
        for (int i = 0; i < 2; i++) {
            snprintf(path, sizeof(path), "%s/%s", dir, i ? "throughput.png" : "latency_cdf.png");
            FILE *f = fopen(path, "rb");
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

/* "A crash after a phase client 0 did not finish never fires" was said of
 * any fault run that failed on a fault and had such a crash, whatever did
 * not fire: a restart that never came got it too (an outside tester). */
static void test_unfired_hint_only_for_an_unfired_phase_crash(void **state)
{
    (void)state;
    char yaml[64], err[256];
    tmp_scenario(yaml, sizeof(yaml), "hint",
                 "cluster: {machines: 2, servers_per_machine: 2, workers_per_machine: 1, "
                 "durable: true, retry_ms: 30000}\n"
                 "tensors:\n"
                 "  - {name: e, rows: 64, shape: [4]}\n"
                 "workload:\n"
                 "  - {name: a, tensor: e, push: 0.5, rounds: 5}\n"
                 "  - {name: b, tensor: e, push: 0.5, rounds: 5}\n"
                 "faults:\n"
                 "  - {kind: crash, target: s1.0, after_phase: a}\n"
                 "  - {kind: crash, target: s1.1, at_s: 0.2, restart_after_s: 0.05}\n");
    struct rkv_scenario *sc;
    if (rkv_scenario_load(yaml, &sc, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    struct rkv_report r;
    char *outs[1] = {"STOPPED w=0 p=1 rc=-4 barrier: client 1 left\n"};
    assert_int_equal(rkv_report_collect(&r, sc, outs, 1), 0);
    r.processes_ok = 1;
    r.fault_run = 1;
    r.faults_fired = 0;
    static const char *const lines[2] = {"s1.0 killed at 0.1 s; s1.1 killed at 0.2 s",
                                         "s1.1 killed at 0.2 s; crash s1.0: did not fire"};
    for (int k = 0; k < 2; k++) {
        snprintf(r.faults, sizeof(r.faults), "%s", lines[k]);
        char *text = report_text(&r, "tcp");
        if (!strstr(text, "not every fault fired") ||
            (strstr(text, "never fires") != NULL) != (k == 1))
            fail_msg("faults \"%s\":\n%s", lines[k], text);
        free(text);
    }
    rkv_report_free(&r);
    rkv_scenario_free(sc);
    unlink(yaml);
}

/* The report's text for outs (one worker) of a fault run or not. */
static char *print_of(const struct rkv_scenario *sc, char *out, int fault_run, struct rkv_report *r)
{
    char *outs[1] = {out};
    assert_int_equal(rkv_report_collect(r, sc, outs, 1), 0);
    r->processes_ok = 1;
    r->fault_run = fault_run;
    r->faults_fired = 1;
    return report_text(r, "sim");
}

/* A phase that moved bytes in no measured time (rows of the worker's own
 * machine, read at no simulated cost) printed 0.000 GB/s and its bound a
 * miss; and a survivor of a fault run that stopped on a timeout (its
 * STOPPED line's code) passed as if a crash had ended it. */
static void test_report_zero_time_and_timeouts(void **state)
{
    (void)state;
    char yaml[64], err[256];
    tmp_scenario(yaml, sizeof(yaml), "report-zero", yaml_text);
    struct rkv_scenario *sc;
    if (rkv_scenario_load(yaml, &sc, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    sc->expect_min_gbps = 0.5;
    struct rkv_wl_phase_stats st = {.pushes = 4, .pulls = 4, .bytes = 74496};
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    assert_non_null(m);
    rkv_wl_print(m, 0, 0, &st);
    st.stopped = 1;
    st.stop_rc = -RKV_ETIMEDOUT;
    snprintf(st.stop_error, sizeof(st.stop_error), "pull: server 1: request timed out");
    rkv_wl_print(m, 0, 1, &st);
    fclose(m);
    struct rkv_report r;
    char *text = print_of(sc, buf, 0, &r);
    if (!strstr(text, "| 0.1 | n/a |") || !strstr(text, "throughput not measured") ||
        strstr(text, ": miss"))
        fail_msg("a phase of no time:\n%s", text);
    free(text);
    rkv_report_free(&r);
    text = print_of(sc, buf, 1, &r);
    assert_false(rkv_report_passed(&r));
    /* Named by its client id, not as a node: "w1" named w1 where client
     * 1 was w0 (an outside tester). */
    if (!strstr(text, "verdict: FAIL (1 surviving worker ended on a timeout") ||
        !strstr(text, "request timed out") || !strstr(text, "client 0 in phase \"") ||
        strstr(text, "w0 in phase"))
        fail_msg("a survivor's timeout:\n%s", text);
    free(text);
    rkv_report_free(&r);
    /* cluster.workers places fewer workers than the machines' slots: the
     * header said "(1 servers + 2 workers)" per machine. */
    sc->workers_per_machine = 2;
    sc->workers_total = 1;
    text = print_of(sc, buf, 0, &r);
    if (!strstr(text, ": 1 machines x 1 servers, 1 workers, seed"))
        fail_msg("the cluster's line:\n%s", text);
    free(text);
    rkv_report_free(&r);
    /* Another error is a crash's survivor's to end on. */
    char *other = strstr(buf, "rc=-");
    assert_non_null(other);
    memcpy(other, "rc=-4", 5); /* EPEERDEAD, same width */
    assert_int_equal(-RKV_EPEERDEAD, -4);
    text = print_of(sc, buf, 1, &r);
    assert_true(rkv_report_passed(&r));
    free(text);
    rkv_report_free(&r);
    rkv_scenario_free(sc);
    free(buf);
    unlink(yaml);
}

/* Worker processes on tcp each pin the winner of a contested row in their
 * own oracle; the launcher compares them: two winners of one row fail the
 * run, naming the row and both readings. */
/* The verdict names the earliest phase with wrong values and quoted the
 * first worker's first wrong value, which could be a later phase's (an
 * outside tester: "phase p0: 2 wrong values pulled; the first: w=1 p=1
 * ..."). Worker 0 found one in phase 1, worker 1 in phase 0: phase 0's is
 * quoted, beside phase 0's count. */
static void test_quoted_wrong_value_is_the_named_phases(void **state)
{
    (void)state;
    char yaml[64], err[256];
    tmp_scenario(yaml, sizeof(yaml), "report", yaml_text);
    struct rkv_scenario *sc;
    if (rkv_scenario_load(yaml, &sc, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    unlink(yaml);
    struct rkv_wl_phase_stats *ok = calloc(1, sizeof(*ok)), *bad = calloc(1, sizeof(*bad));
    assert_true(ok && bad);
    bad->errors = 2;
    char *outs[2] = {NULL, NULL};
    for (uint32_t w = 0; w < 2; w++) {
        size_t len = 0;
        FILE *m = open_memstream(&outs[w], &len);
        assert_non_null(m);
        snprintf(bad->first_error, sizeof(bad->first_error), "worker %u's wrong value", w);
        rkv_wl_print(m, w, 0, w == 1 ? bad : ok); /* worker 1: phase 0 */
        rkv_wl_print(m, w, 1, w == 0 ? bad : ok); /* worker 0: phase 1 */
        fclose(m);
    }
    struct rkv_report r;
    assert_int_equal(rkv_report_collect(&r, sc, outs, 2), 0);
    r.processes_ok = 1;
    char *text = report_text(&r, "sim");
    char want[256];
    snprintf(want, sizeof(want),
             "verdict: FAIL (phase %s: 2 wrong values pulled; the first: w=1 p=0 worker 1's "
             "wrong value)",
             sc->phases[0].name);
    if (!strstr(text, want))
        fail_msg("no \"%s\" in:\n%s", want, text);
    free(text);
    rkv_report_free(&r);
    free(outs[0]);
    free(outs[1]);
    free(ok);
    free(bad);
    rkv_scenario_free(sc);
}

static void test_report_compares_pinned_winners(void **state)
{
    (void)state;
    char yaml[64], err[256];
    tmp_scenario(yaml, sizeof(yaml), "pins",
                 "cluster: {machines: 1, servers_per_machine: 1, workers_per_machine: 3}\n"
                 "tensors:\n"
                 "  - {name: t, rows: 8}\n"
                 "workload:\n"
                 "  - {name: race, tensor: t, push: 1.0, push_op: assign, rounds: 2}\n"
                 "  - {name: read, tensor: t, push: 0, rounds: 2}\n");
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
    snprintf(agree0, sizeof(agree0), "PIN t=0 r=5 e=0 w=2 p=0 n=1\nPIN t=0 r=6 e=0 w=0 p=0 n=0\n%s",
             phases[0]);
    snprintf(agree1, sizeof(agree1), "PIN t=0 r=5 e=0 w=2 p=0 n=1\n%s", phases[1]);
    snprintf(other, sizeof(other), "PIN t=0 r=6 e=0 w=1 p=0 n=1\n%s", phases[1]);
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

/* The text of a file (caller frees). */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *buf = calloc(1, 1 << 16);
    assert_non_null(buf);
    size_t n = fread(buf, 1, (1 << 16) - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

/* Regression: a run in which no call completed (every request failed
 * under a fault) has no latencies: gnuplot failed "x range is invalid" and
 * a passing run exited 3 with --plot. The CDF is an empty axis saying so. */
static void test_plot_without_latencies(void **state)
{
    (void)state;
    if (access("/usr/bin/gnuplot", X_OK) != 0)
        skip();
    char yaml[64], dir[64], err[256], path[128];
    tmp_scenario(yaml, sizeof(yaml), "plot0",
                 "cluster: {machines: 1, servers_per_machine: 1, workers_per_machine: 1}\n"
                 "tensors:\n  - {name: t, rows: 64}\n"
                 "workload:\n  - {name: one, tensor: t, rounds: 2}\n");
    snprintf(dir, sizeof(dir), "/tmp/rkv-plot0-%d.d", (int)getpid());
    struct rkv_scenario *sc;
    if (rkv_scenario_load(yaml, &sc, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    struct rkv_wl_phase_stats *st = calloc(1, sizeof(*st));
    assert_non_null(st);
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    rkv_wl_print(m, 0, 0, st); /* the phase ran, and no call completed */
    fclose(m);
    struct rkv_report r;
    char *outs[1] = {buf};
    assert_int_equal(rkv_report_collect(&r, sc, outs, 1), 0);
    r.processes_ok = 1;
    if (rkv_report_plot(&r, dir, "tcp", err, sizeof(err)) < 0)
        fail_msg("plot: %s", err);
    snprintf(path, sizeof(path), "%s/plots.gp", dir);
    char *gp = slurp(path);
    assert_non_null(strstr(gp, "no call completed"));
    free(gp);
    rkv_report_free(&r);
    rkv_scenario_free(sc);
    free(st);
    free(buf);
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    unlink(yaml);
}

/* Plots a person learns from: titles name the scenario, the backend and
 * whether times are simulated; phases with the same latencies stay visible
 * (each its own colour and dash, thinner on top of thicker, markers on
 * every step); calls that took no time (the twin's co-located ones) do not
 * stretch the log axis down to 0.001 us. Regression: three phases drawn
 * in gnuplot's defaults, one of them at 0 us, showed as one line against
 * an axis from 0.001 us. */
static void test_plot_names_run_and_shows_every_line(void **state)
{
    (void)state;
    if (access("/usr/bin/gnuplot", X_OK) != 0)
        skip();
    char yaml[64], dir[64], err[256], path[128];
    tmp_scenario(
        yaml, sizeof(yaml), "plot",
        "cluster: {machines: 1, servers_per_machine: 1, workers_per_machine: 1}\n"
        "tensors:\n  - {name: t, rows: 64}\n"
        "workload:\n  - {name: one, tensor: t, rounds: 2}\n"
        "  - {name: two, tensor: t, rounds: 2}\n  - {name: three, tensor: t, rounds: 2}\n");
    snprintf(dir, sizeof(dir), "/tmp/rkv-plot-%d.d", (int)getpid());
    struct rkv_scenario *sc;
    if (rkv_scenario_load(yaml, &sc, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    struct rkv_wl_phase_stats *st = calloc(1, sizeof(*st));
    assert_non_null(st);
    add_ns(st, 2000);
    add_ns(st, 3000);
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    rkv_wl_print(m, 0, 0, st); /* phases 0 and 1: the same latencies */
    rkv_wl_print(m, 0, 1, st);
    add_ns(st, 0); /* phase 2: one call took no (simulated) time */
    rkv_wl_print(m, 0, 2, st);
    fclose(m);
    struct rkv_report r;
    char *outs[1] = {buf};
    assert_int_equal(rkv_report_collect(&r, sc, outs, 1), 0);
    r.processes_ok = 1;
    for (int sim = 0; sim < 2; sim++) {
        r.sim_s = sim ? 0.25 : 0;
        if (rkv_report_plot(&r, dir, sim ? "sim" : "tcp", err, sizeof(err)) < 0)
            fail_msg("plot: %s", err);
        snprintf(path, sizeof(path), "%s/plots.gp", dir);
        char *gp = slurp(path);
        char want[160];
        snprintf(want, sizeof(want), "request latency CDF per phase: rkv-plot-%d.yaml on %s",
                 (int)getpid(), sim ? "sim" : "tcp");
        if (!strstr(gp, want))
            fail_msg("no title \"%s\" in:\n%s", want, gp);
        snprintf(want, sizeof(want), "throughput per phase: rkv-plot-%d.yaml on %s", (int)getpid(),
                 sim ? "sim" : "tcp");
        assert_non_null(strstr(gp, want));
        assert_non_null(strstr(gp, sim ? "simulated time" : "measured wall-clock time"));
        assert_null(strstr(gp, sim ? "measured wall-clock time" : "simulated time"));
        /* One line per phase: its own colour and dash, each thinner than the last. */
        double last_lw = 1e9;
        char colours[3][16] = {{0}};
        unsigned dts[3] = {0};
        const char *at = gp;
        for (int p = 0; p < 3; p++) {
            at = strstr(at, "with steps lw ");
            assert_non_null(at);
            double lw;
            assert_int_equal(
                sscanf(at, "with steps lw %lf dt %u lc rgb '%15[^']'", &lw, &dts[p], colours[p]),
                3);
            assert_true(lw < last_lw && lw >= 2.0);
            last_lw = lw;
            at++;
        }
        assert_true(strcmp(colours[0], colours[1]) && strcmp(colours[1], colours[2]) &&
                    strcmp(colours[0], colours[2]));
        assert_true(dts[0] != dts[1] && dts[1] != dts[2] && dts[0] != dts[2]);
        assert_non_null(strstr(gp, "with points pt"));
        /* The axis starts at half the fastest real latency (2 us: 1 us),
         * and the call that took no time sits there, not at 0.001 us. */
        assert_non_null(strstr(gp, "set xrange [1.0"));
        assert_non_null(strstr(gp, sim ? "took no simulated time" : "under 0.05 us"));
        free(gp);
        snprintf(path, sizeof(path), "%s/latency_cdf.dat", dir);
        char *dat = slurp(path);
        assert_null(strstr(dat, "\n0.00"));
        assert_non_null(strstr(dat, "# phase 2\n1.0"));
        free(dat);
    }
    /* A relative directory (--out report/): the script names its files by
     * absolute path, so it runs from anywhere, not only from where rkv run
     * was started. */
    char cwd[512], rel[64], want[160];
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    assert_int_equal(chdir("/tmp"), 0);
    snprintf(rel, sizeof(rel), "rkv-plot-%d.d/", (int)getpid());
    int prc = rkv_report_plot(&r, rel, "tcp", err, sizeof(err));
    assert_int_equal(chdir(cwd), 0);
    if (prc < 0)
        fail_msg("plot: %s", err);
    snprintf(path, sizeof(path), "%s/plots.gp", dir);
    char *gp = slurp(path);
    snprintf(want, sizeof(want), "'%s/throughput.png'", dir);
    if (!strstr(gp, want))
        fail_msg("no %s in:\n%s", want, gp);
    free(gp);
    rkv_report_free(&r);
    rkv_scenario_free(sc);
    free(st);
    free(buf);
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    unlink(yaml);
}

/* --plot said "plots: ..." and exited 0 when it made none: with gnuplot
 * missing from PATH (its "exit 127" on stderr only), and on a full disk,
 * where the data files were written empty and no PNG was made (an outside
 * tester). A plot data file that is /dev/full stands for the full disk:
 * every write to it fails with ENOSPC. Each run must exit 3, say why, and
 * name no plot. */
static void test_plots_not_made_fail_the_run(void **state)
{
    (void)state;
    char yaml[64], cmd[1024];
    tmp_scenario(yaml, sizeof(yaml), "plotfail",
                 "cluster: {machines: 1, servers_per_machine: 1, workers_per_machine: 1}\n"
                 "tensors:\n"
                 "  - {name: t, rows: 8, shape: [4]}\n"
                 "workload:\n"
                 "  - {name: a, tensor: t, push: 0.5, ids_per_request: 2, rounds: 4}\n");
    const char *dir = "plotfail-out";
    static const char *const backends[] = {"sim", "tcp"};
    for (int b = 0; b < 2; b++) {
        snprintf(
            cmd, sizeof(cmd),
            "rm -rf %s; timeout 120 env PATH=/nonexistent %s run %s --backend %s --out %s --plot "
            "2>&1",
            dir, RKV_BIN, yaml, backends[b], dir);
        int rc = sh(cmd);
        if (rc != 3 || strstr(out, "\nplots: ") ||
            !strstr(out, "--plot: no plots: gnuplot not found"))
            fail_msg("%s, no gnuplot: exit %d:\n%s", backends[b], rc, out);
        if (access("/usr/bin/gnuplot", X_OK) != 0)
            continue; /* the full disk needs a gnuplot that would have run */
        snprintf(cmd, sizeof(cmd),
                 "rm -rf %s && mkdir %s && ln -s /dev/full %s/latency_cdf.dat && timeout 120 %s "
                 "run %s --backend %s --out %s --plot 2>&1",
                 dir, dir, dir, RKV_BIN, yaml, backends[b], dir);
        rc = sh(cmd);
        if (rc != 3 || strstr(out, "\nplots: ") ||
            !strstr(out, "--plot: no plots: cannot write the plot data into") ||
            !strstr(out, "No space left on device"))
            fail_msg("%s, full disk: exit %d:\n%s", backends[b], rc, out);
    }
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(sh(cmd), 0);
    unlink(yaml);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plot_without_latencies),
        cmocka_unit_test(test_plot_names_run_and_shows_every_line),
        cmocka_unit_test(test_percentiles_never_above_max),
        cmocka_unit_test(test_report_json_round_trips_names),
        cmocka_unit_test(test_unfired_hint_only_for_an_unfired_phase_crash),
        cmocka_unit_test(test_report_zero_time_and_timeouts),
        cmocka_unit_test(test_report_compares_pinned_winners),
        cmocka_unit_test(test_quoted_wrong_value_is_the_named_phases),
        cmocka_unit_test(test_plots_not_made_fail_the_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
