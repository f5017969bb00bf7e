/* rkv calibrate and rkv run --predict through the rkv binary: the
 * calibration file loads in the twin, bad files are refused with file:line,
 * and a prediction prints its table. The figures depend on the host and on
 * what else runs on it, so no test asserts a time or an error bound. */
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
    const char *keys[] = {"backend = tcp",  "host_cores = ",  "latency_us = ", "bandwidth_gbps = ",
                          "msg_cost_ns = ", "row_cost_ns = ", "cpu = measured"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (!strstr(text, keys[i]))
            fail_msg("%s: no \"%s\" in\n%s", calib_path, keys[i], text);
    snprintf(args, sizeof(args), "run %s/quickstart.yaml --calibration %s", SCEN_DIR, calib_path);
    rc = run_rkv("", args);
    if (rc != 0 || !strstr(out, "verdict: PASS") || !strstr(out, "simulated time"))
        fail_msg("rkv %s: exit %d\n%s", args, rc, out);
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
        cmocka_unit_test(test_predict_prints_the_table),
        cmocka_unit_test(test_predict_without_a_file_calibrates_first),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    unlink(calib_path);
    return rc;
}
