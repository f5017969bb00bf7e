/* rkv calibrate and rkv run --predict through the rkv binary: the
 * calibration file loads in the twin, bad files are refused with file:line,
 * and a prediction prints its table; the loopback platform a shared-host
 * calibration selects puts every machine on one host's cores. The figures
 * depend on the host and on what else runs on it, so no test asserts a
 * measured time or an error bound (the loopback tests compare simulated
 * times of runs without measured CPU, which are the model's own output). */
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

#include "harness/tests/rkv_run.h"

static char calib_path[64];

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Quick calibration over tcp, then the file drives a twin run. */
static void test_calibrate_file_loads_in_the_twin(void **state)
{
    (void)state;
    char args[512];
    snprintf(args, sizeof(args), "calibrate --backend tcp --quick --out %s", calib_path);
    int rc = run_rkv("", args);
    if (rc != 0)
        fail_msg("rkv %s: exit %d\n%s", args, rc, out);
    assert_non_null(strstr(out, "latency_us "));
    FILE *f = fopen(calib_path, "r");
    assert_non_null(f);
    char text[4096];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    text[n] = 0;
    fclose(f);
    const char *keys[] = {"backend = tcp",   "host_cores = ",     "shared_host = 1",
                          "latency_us = ",   "bandwidth_gbps = ", "msg_cost_ns = ",
                          "send_byte_ns = ", "recv_byte_ns = ",   "copy_byte_ns = ",
                          "row_cost_ns = ",  "cpu = measured",    "scheduler = cores"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (!strstr(text, keys[i]))
            fail_msg("%s: no \"%s\" in\n%s", calib_path, keys[i], text);
    snprintf(args, sizeof(args), "run %s/quickstart.yaml --calibration %s", SCEN_DIR, calib_path);
    rc = run_rkv("", args);
    if (rc != 0 || !strstr(out, "verdict: PASS") || !strstr(out, "simulated time") ||
        !strstr(out, "(SimGrid, loopback)") || !strstr(out, "were per-core run queues"))
        fail_msg("rkv %s: exit %d\n%s", args, rc, out);
    /* Past 256 actors the per-core queues' actor table grows: a waiter's
     * pointer into it corrupted the heap (exit 134/139; an outside tester
     * with this file and a calibration). */
    snprintf(args, sizeof(args), "run %s/many-peers.yaml --calibration %s", SCEN_DIR, calib_path);
    rc = run_rkv("", args);
    if (rc != 0 || !strstr(out, "verdict: PASS"))
        fail_msg("rkv %s: exit %d\n%s", args, rc, out);
    /* cpu = measured replaces the file's row_cost_ns: the refusal says so. */
    snprintf(args, sizeof(args), "run %s/sim-slow-cpu.yaml --calibration %s", SCEN_DIR, calib_path);
    rc = run_rkv("", args);
    if (rc != 2 || !strstr(out, "which a calibration with cpu = measured replaces"))
        fail_msg("rkv %s: exit %d\n%s", args, rc, out);
}

/* shared_host chooses the platform: one host all machines share, or a star
 * of machines with their share of the cores each. */
static void test_shared_host_selects_the_loopback_platform(void **state)
{
    (void)state;
    static const char *const base = "backend = tcp\nhost_cores = 2\nlatency_us = 5\n"
                                    "bandwidth_gbps = 10\nmsg_cost_ns = 2000\n"
                                    "send_byte_ns = 0.3\nrecv_byte_ns = 0.1\n";
    static const struct {
        const char *shared, *platform;
    } cases[] = {{"shared_host = 1\n", "(SimGrid, loopback)"},
                 {"shared_host = 0\n", "(SimGrid, star)"}};
    char path[64], args[512], text[512];
    snprintf(path, sizeof(path), "/tmp/rkv-test-shared-%d.txt", (int)getpid());
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(text, sizeof(text), "%s%s", base, cases[i].shared);
        write_file(path, text);
        snprintf(args, sizeof(args), "run %s/wide-rows.yaml --calibration %s", SCEN_DIR, path);
        int rc = run_rkv("", args);
        if (rc != 0 || !strstr(out, "verdict: PASS") || !strstr(out, cases[i].platform))
            fail_msg("case %zu: rkv %s: exit %d\n%s", i, args, rc, out);
    }
    /* A restarted server comes back on the machine's host, the shared one. */
    snprintf(text, sizeof(text), "%s%s", base, cases[0].shared);
    write_file(path, text);
    snprintf(args, sizeof(args), "run %s/faults-restart-durable.yaml --calibration %s", SCEN_DIR,
             path);
    int rc = run_rkv("", args);
    if (rc != 0 || !strstr(out, "verdict: PASS") || !strstr(out, "restarted at"))
        fail_msg("rkv %s: exit %d\n%s", args, rc, out);
    unlink(path);
}

/* The simulated time of the first phase of the scenario `text` (no
 * measured CPU: the model alone), from its report.json. Not the whole
 * run's simulated time: that ends when the last engine's progress task sees
 * it is stopping, up to one poll timeout (50 ms) after the work, depending
 * on whether a message woke it. */
static double phase_s(const char *text)
{
    char path[64], dir[64], args[512], report[4096];
    snprintf(path, sizeof(path), "/tmp/rkv-test-lo-%d.yaml", (int)getpid());
    snprintf(dir, sizeof(dir), "/tmp/rkv-test-lo-%d.out", (int)getpid());
    write_file(path, text);
    snprintf(args, sizeof(args), "run %s --out %s", path, dir);
    int rc = run_rkv("", args);
    unlink(path);
    double s = 0;
    char rpath[96];
    snprintf(rpath, sizeof(rpath), "%s/report.json", dir);
    FILE *f = fopen(rpath, "r");
    size_t n = f ? fread(report, 1, sizeof(report) - 1, f) : 0;
    if (f)
        fclose(f);
    report[n] = 0;
    const char *ph = strstr(report, "\"phases\"");
    const char *at = ph ? strstr(ph, "\"wall_s\": ") : NULL;
    if (rc != 0 || !strstr(out, "verdict: PASS") || !at || sscanf(at, "\"wall_s\": %lf", &s) != 1 ||
        s <= 0)
        fail_msg("rkv %s:\n%s\nexit %d\n%s\n%s", args, text, rc, out, report);
    snprintf(args, sizeof(args), "rm -rf '%s'", dir);
    if (system(args) != 0)
        fail_msg("could not remove %s", dir);
    return s;
}

/* A small push/pull run with `extra` in its sim block. */
static double sim_s(const char *extra)
{
    char text[1024];
    snprintf(text, sizeof(text),
             "seed: 5\n"
             "cluster: {machines: 2, servers_per_machine: 1, workers_per_machine: 2}\n"
             "tensors:\n"
             "  - {name: t, dtype: f32, rows: 64, shape: [16384], partition: range}\n"
             "workload:\n"
             "  - {name: mix, tensor: t, push: 0.5, push_op: sum, ids_per_request: 2, "
             "keys: remote-only, rounds: 20}\n"
             "sim: {latency_us: 5, bandwidth_gbps: 100, msg_cost_ns: 20000, %s}\n",
             extra);
    return phase_s(text);
}

/* rkv calibrate divides the CPU it measures per one-row pull by 4 (the
 * request and the reply, each posted and received), so the twin must charge
 * msg_cost_ns exactly 4 times per pull: on one core, where every charge
 * waits for the others, a pull takes 4 x msg_cost_ns and a little latency.
 * (It charged every completion polled, the sends' too: 6 times.) */
static void test_one_row_pull_costs_four_message_charges(void **state)
{
    (void)state;
    double s = phase_s("seed: 5\n"
                       "cluster: {machines: 2, servers_per_machine: 1, workers_per_machine: 1}\n"
                       "tensors:\n"
                       "  - {name: t, dtype: f32, rows: 16, shape: [4], partition: range}\n"
                       "workload:\n"
                       "  - {name: one, tensor: t, push: 0.0, ids_per_request: 1, "
                       "keys: remote-only, rounds: 50}\n"
                       "sim: {platform: loopback, cores: 1, latency_us: 1, msg_cost_ns: 100000}\n");
    double charges = s / 100 /* pulls: 2 workers x 50 */ / 100e-6;
    if (!(charges > 3.9 && charges < 4.5))
        fail_msg("a one-row pull took %.2f x msg_cost_ns on one core, wanted 4 (%.6f s for 100)",
                 charges, s);
}

/* Every machine's nodes compete for the one host's cores (one core shared
 * by two machines is slower than a core each), and the bytes' kernel CPU is
 * charged on top of the per-message cost. */
static void test_loopback_machines_share_the_cores(void **state)
{
    (void)state;
    double shared = sim_s("platform: loopback, cores: 1"), own = sim_s("platform: star, cores: 1");
    if (!(shared > own))
        fail_msg("1 core shared by 2 machines: %.6f s simulated, 1 core each: %.6f s", shared, own);
    double eight = sim_s("platform: loopback, cores: 8");
    double bytes = sim_s("platform: loopback, cores: 8, send_byte_ns: 1, recv_byte_ns: 1");
    if (!(bytes > eight))
        fail_msg("with 1 ns per byte each side: %.6f s simulated, without: %.6f s", bytes, eight);
}

static void test_bad_calibration_files(void **state)
{
    (void)state;
    static const struct {
        const char *text, *msg;
    } cases[] = {
        {"backend = tcp\nhost_cores = 2\nbandwidth_gbps = 5\nwarp = 9\n",
         ":4: unknown key \"warp\""},
        {"backend = tcp\nhost_cores = two\n", ":2: host_cores: expected 1..4096"},
        {"backend = tcp\nhost_cores = 2\n", "needs backend, host_cores and bandwidth_gbps"},
        {"backend = tcp\nlatency_us\n", ":2: expected key = value"},
        {"backend = tcp\nshared_host = yes\n", ":2: shared_host: expected 0 or 1"},
        {"backend = tcp\nsend_byte_ns = -1\n", ":2: send_byte_ns: expected a number"},
        {"backend = tcp\nscheduler = fifo\n", ":2: scheduler: expected share or cores"},
    };
    char path[64], args[512];
    snprintf(path, sizeof(path), "/tmp/rkv-test-badcal-%d.txt", (int)getpid());
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        write_file(path, cases[i].text);
        snprintf(args, sizeof(args), "run %s/quickstart.yaml --calibration %s", SCEN_DIR, path);
        int rc = run_rkv("", args);
        if (rc != 2 || !strstr(out, cases[i].msg))
            fail_msg("case %zu: exit %d, wanted 2 and \"%s\":\n%s", i, rc, cases[i].msg, out);
    }
    unlink(path);
}

/* The format of a prediction: one row per phase, then the summary line. */
static void test_predict_prints_the_table(void **state)
{
    (void)state;
    char args[512];
    snprintf(args, sizeof(args), "run %s/quickstart.yaml --backend tcp --predict --calibration %s",
             SCEN_DIR, calib_path);
    int rc = run_rkv("", args);
    if (rc != 0)
        fail_msg("rkv %s: exit %d\n%s", args, rc, out);
    assert_non_null(strstr(out, "| phase | measured ms | predicted ms | error % |"));
    const char *phases[] = {"| warmup-sum | ", "| sgd-step | ", "| assign | "};
    for (size_t i = 0; i < 3; i++) {
        const char *row = strstr(out, phases[i]);
        double m, p, e;
        char fmt[64];
        snprintf(fmt, sizeof(fmt), "%s%%lf | %%lf | %%lf |", phases[i]);
        if (!row || sscanf(row, fmt, &m, &p, &e) != 3 || m <= 0 || p <= 0)
            fail_msg("no row for %s in\n%s", phases[i], out);
    }
    const char *sum = strstr(out, "predict: ");
    const char *counts = sum ? strstr(sum, "(sum of phases); ") : NULL;
    double m, p, e;
    unsigned within, n;
    if (!sum || !strstr(sum, "quickstart.yaml: measured ") ||
        sscanf(strstr(sum, "measured "), "measured %lf ms, predicted %lf ms, error %lf %%", &m, &p,
               &e) != 3 ||
        !counts || sscanf(counts + 17, "%u of %u phases within 10 %%", &within, &n) != 2 ||
        n != 3 || within > n)
        fail_msg("no summary line in\n%s", out);
}

static void test_predict_without_a_file_calibrates_first(void **state)
{
    (void)state;
    char args[512];
    snprintf(args, sizeof(args), "run %s/sgd.yaml --backend tcp --predict", SCEN_DIR);
    int rc = run_rkv("", args);
    if (rc != 0 || !strstr(out, "calibrating tcp first") || !strstr(out, "predict: "))
        fail_msg("rkv %s: exit %d\n%s", args, rc, out);
}

int main(void)
{
    snprintf(calib_path, sizeof(calib_path), "/tmp/rkv-test-calib-%d.txt", (int)getpid());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_calibrate_file_loads_in_the_twin),
        cmocka_unit_test(test_bad_calibration_files),
        cmocka_unit_test(test_shared_host_selects_the_loopback_platform),
        cmocka_unit_test(test_loopback_machines_share_the_cores),
        cmocka_unit_test(test_one_row_pull_costs_four_message_charges),
        cmocka_unit_test(test_predict_prints_the_table),
        cmocka_unit_test(test_predict_without_a_file_calibrates_first),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    unlink(calib_path);
    return rc;
}
