/* rkv run FILE --predict: its flags and its table (the measuring is
 * harness/predict.c): the scenario on the real backend and in the twin
 * with this host's calibration, phase by phase (sim/README.md
 * "Calibration"). Also `rkv run FILE --calibration F`: the twin alone with
 * the calibrated platform. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "harness/calib.h"
#include "harness/launch.h"
#include "harness/oracle.h"
#include "harness/report.h"
#include "harness/scenario.h"
#include "util/util.h"

#define PRED_MAX_REPEAT 15
#define PRED_MAX_ARGS RKV_PREDICT_MAX_FLAGS

struct pred_args {
    const char *file, *calib, *out_dir, *trace;
    const char *backend; /* the real one */
    int predict, plot;
    unsigned repeat;
    char *pass[PRED_MAX_ARGS]; /* settings flags for both the real runs and the twin */
    int n_pass;
};

int cmd_predict_wanted(int argc, char **argv)
{
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--predict") || !strcmp(argv[i], "--calibration") ||
            !strncmp(argv[i], "--calibration=", 14))
            return 1;
    return 0;
}

static int pred_parse(int argc, char **argv, struct pred_args *a)
{
    *a = (struct pred_args){.repeat = 1};
    static const char *const valued[] = {"--calibration", "--repeat", "--out", "--trace",
                                         "--backend"};
    for (size_t k = 0; argc > 0 && k < sizeof(valued) / sizeof(valued[0]); k++)
        if (!strcmp(argv[argc - 1], valued[k])) { /* "--calibration" last calibrated anew */
            fprintf(stderr, "rkv run: %s needs a value\n", valued[k]);
            return -1;
        }
    for (int i = 0; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--predict")) {
            a->predict = 1;
        } else if (!strcmp(argv[i], "--calibration") && v) {
            a->calib = argv[++i];
        } else if (!strncmp(argv[i], "--calibration=", 14)) {
            a->calib = argv[i] + 14;
        } else if (!strcmp(argv[i], "--repeat") && v) {
            uint64_t r = 0; /* "2x" was 2 */
            a->repeat = rkv_parse_u64(argv[++i], &r) < 0 || r > PRED_MAX_REPEAT ? 0 : (unsigned)r;
        } else if (!strcmp(argv[i], "--out") && v) {
            a->out_dir = argv[++i];
        } else if (!strcmp(argv[i], "--trace") && v) {
            a->trace = argv[++i];
        } else if (!strcmp(argv[i], "--plot")) {
            a->plot = 1;
        } else if (!strcmp(argv[i], "--backend") && v) {
            a->backend = argv[++i];
        } else if (strncmp(argv[i], "--", 2) && !a->file) {
            a->file = argv[i];
        } else if (a->n_pass + 1 < PRED_MAX_ARGS && rkv_cmd_flag_takes_next(argc, argv, i)) {
            a->pass[a->n_pass++] = argv[i++]; /* the value is not the file */
            a->pass[a->n_pass++] = argv[i];
        } else if (a->n_pass < PRED_MAX_ARGS) {
            a->pass[a->n_pass++] = argv[i];
        } else { /* they were dropped */
            fprintf(stderr, "rkv run: more than %d settings arguments\n", PRED_MAX_ARGS);
            return -1;
        }
    }
    if (!a->file) {
        fprintf(stderr, "rkv run: which scenario? (usage: rkv run FILE ...)\n");
        return -1;
    }
    if (a->repeat < 1 || a->repeat > PRED_MAX_REPEAT) {
        fprintf(stderr, "rkv run: --repeat: expected 1..%d\n", PRED_MAX_REPEAT);
        return -1;
    }
    if (a->predict && !a->backend)
        a->backend = "tcp";
    if (a->predict && strcmp(a->backend, "tcp") && strcmp(a->backend, "verbs")) {
        fprintf(stderr,
                "rkv run: --predict compares a real backend with the twin: --backend "
                "tcp or verbs, got \"%s\"\n",
                a->backend);
        return -1;
    }
    if (!a->predict && a->backend && strcmp(a->backend, "sim")) {
        fprintf(stderr, "rkv run: --calibration without --predict runs the twin (--backend sim)\n");
        return -1;
    }
    return 0;
}

static int pred_self(char *exe, size_t len, const char *self)
{
    ssize_t k = readlink("/proc/self/exe", exe, len - 1);
    if (k > 0) {
        exe[k] = 0;
        return 0;
    }
    snprintf(exe, len, "%s", self);
    return 0;
}

/* The scenario and the calibration it is predicted with. */
static int pred_setup(const struct pred_args *a, const char *exe, struct rkv_scenario **sc_p,
                      struct rkv_calib *c)
{
    char err[600];
    if (rkv_scenario_load(a->file, sc_p, err, sizeof(err)) < 0 ||
        rkv_oracle_check_scenario(*sc_p, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv run: %s\n", err);
        return RKV_EXIT_USAGE;
    }
    /* The settings, checked as the runs will check them before a quick
     * calibration: --bogus was refused only after it. */
    struct cmd_settings s;
    struct rkv_config store;
    unsigned store_set;
    if (rkv_cmd_settings_load(&s, a->n_pass, (char **)a->pass, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv run: %s\n", err);
        return RKV_EXIT_USAGE;
    }
    /* As `rkv run FILE` refuses them: the twin ran the file's workload and
     * cluster whatever --rows or --num-workers said, and passed. */
    if (rkv_launch_refuse_sized(&s) < 0)
        return RKV_EXIT_USAGE;
    if (rkv_launch_twin_store(&s, *sc_p, !a->predict, &store, &store_set, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv run: %s\n", err);
        return RKV_EXIT_USAGE;
    }
    free(store.machines);
    if (a->calib) {
        if (rkv_calib_load(a->calib, c, err, sizeof(err)) < 0) {
            fprintf(stderr, "rkv run: %s\n", err);
            return RKV_EXIT_USAGE;
        }
        return 0;
    }
    /* No file: measure now, briefly (rkv calibrate writes one to reuse). */
    printf("rkv run: no --calibration: calibrating %s first (quick)\n", a->backend);
    if (rkv_calibrate(exe, a->backend, 1, NULL, CMD_TWIN, c, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv run: calibration: %s\n", err);
        return RKV_EXIT_STORE;
    }
    return 0;
}

#if RKV_WITH_SIM
static void pred_table(const struct rkv_scenario *sc, const double *meas, const double *pred,
                       const struct pred_args *a)
{
    printf("\n%s: measured on %s vs predicted by the twin (medians of %u runs each, taken in "
           "turn)\n\n",
           sc->path, a->backend, a->repeat);
    printf("| phase | measured ms | predicted ms | error %% |\n|---|---|---|---|\n");
    double tm = 0, tp = 0;
    uint32_t within = 0;
    for (uint32_t p = 0; p < sc->n_phases; p++) {
        double e = meas[p] > 0 ? (pred[p] - meas[p]) / meas[p] * 100 : 0;
        within += e >= -10 && e <= 10;
        tm += meas[p];
        tp += pred[p];
        printf("| %s | %.3f | %.3f | %+.1f |\n", sc->phases[p].name, meas[p] * 1e3, pred[p] * 1e3,
               e);
    }
    printf("\npredict: %s: measured %.3f ms, predicted %.3f ms, error %+.1f %% (sum of phases); "
           "%u of %u phases within 10 %%\n",
           sc->path, tm * 1e3, tp * 1e3, tm > 0 ? (tp - tm) / tm * 100 : 0.0, within, sc->n_phases);
}

#endif

/* --calibration without --predict: the twin on the calibrated platform. */
static int pred_twin_only(const struct pred_args *a, struct rkv_scenario *sc,
                          const struct rkv_calib *c)
{
    struct cmd_settings s;
    char err[512];
    if (rkv_cmd_settings_load(&s, a->n_pass, (char **)a->pass, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv run: %s\n", err);
        return RKV_EXIT_USAGE;
    }
    rkv_calib_apply(c, sc);
    struct cmd_twin_args ta = {.trace = a->trace};
    return cmd_run_twin(sc, &s, a->out_dir, a->plot, &ta);
}

int cmd_predict(int argc, char **argv, const char *self)
{
    struct pred_args a;
    struct rkv_scenario *sc = NULL;
    struct rkv_calib c;
    char exe[4096];
    if (pred_parse(argc, argv, &a) < 0)
        return RKV_EXIT_USAGE;
    pred_self(exe, sizeof(exe), self);
    int code = pred_setup(&a, exe, &sc, &c);
    if (code)
        goto out;
    if (!a.predict) {
        code = pred_twin_only(&a, sc, &c);
        goto out;
    }
#if RKV_WITH_SIM
    printf("calibration: %s, %u cores%s, latency %.3f us, %.3f Gb/s, msg_cost %.0f ns, bytes "
           "%.4f + %.4f ns, row_cost %.1f ns, cpu %s, scheduler %s\n",
           c.backend, c.host_cores, c.shared_host ? " shared by every machine" : "", c.latency_us,
           c.bandwidth_gbps, c.msg_cost_ns, c.send_byte_ns, c.recv_byte_ns, c.row_cost_ns,
           c.cpu_measured ? "measured" : "model", c.sched_cores ? "cores" : "share");
    double meas[RKV_SC_MAX_PHASES], pred[RKV_SC_MAX_PHASES];
    struct cmd_settings s;
    struct rkv_config store;
    unsigned store_set;
    char err[512];
    code = RKV_EXIT_USAGE;
    if (rkv_cmd_settings_load(&s, a.n_pass, (char **)a.pass, err, sizeof(err)) < 0 ||
        rkv_launch_twin_store(&s, sc, 0, &store, &store_set, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv run: %s\n", err);
        goto out;
    }
    free(store.machines); /* the twin's machines are the scenario's */
    store.machines = NULL;
    code = RKV_EXIT_STORE;
    struct rkv_predict_opts po = {.self = exe,
                                  .store = &store,
                                  .store_set = store_set,
                                  .file = a.file,
                                  .backend = a.backend,
                                  .repeat = a.repeat,
                                  .flags = a.pass,
                                  .n_flags = a.n_pass,
                                  .twin = CMD_TWIN};
    if (rkv_predict_measure(&po, &c, sc, meas, pred) < 0)
        goto out;
    pred_table(sc, meas, pred, &a);
    code = RKV_EXIT_OK;
#else
    fprintf(stderr, "rkv run: --predict needs the twin (cmake -DRKV_WITH_SIM=ON)\n");
    code = RKV_EXIT_USAGE;
#endif
out:
    rkv_scenario_free(sc);
    return code;
}
