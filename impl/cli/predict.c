/* rkv run FILE --predict: the scenario on the real backend and in the twin
 * with this host's calibration, phase by phase (sim/README.md
 * "Calibration"). Also `rkv run FILE --calibration F`: the twin alone with
 * the calibrated platform. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/calib.h"
#include "cli/cli.h"
#include "harness/oracle.h"
#include "harness/report.h"
#include "harness/scenario.h"

#if RKV_WITH_SIM
#include "sim/twin/twin.h"
#endif

#define PRED_MAX_REPEAT 15
#define PRED_MAX_ARGS 64

struct pred_args {
    const char *file, *calib, *out_dir, *trace;
    const char *backend; /* the real one */
    int predict, plot;
    unsigned repeat;
    char *pass[PRED_MAX_ARGS]; /* settings flags for both the real runs and the twin */
    int n_pass;
};

int cli_predict_wanted(int argc, char **argv)
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
    for (int i = 0; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--predict")) {
            a->predict = 1;
        } else if (!strcmp(argv[i], "--calibration") && v) {
            a->calib = argv[++i];
        } else if (!strncmp(argv[i], "--calibration=", 14)) {
            a->calib = argv[i] + 14;
        } else if (!strcmp(argv[i], "--repeat") && v) {
            a->repeat = (unsigned)strtoul(argv[++i], NULL, 10);
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
        } else if (a->n_pass < PRED_MAX_ARGS) {
            a->pass[a->n_pass++] = argv[i];
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

#if RKV_WITH_SIM /* what --predict needs; without the twin it says so */
/* Every phase's wall_s from DIR/report.json, in order; returns how many. */
static int pred_report_phases(const char *dir, double *s, uint32_t max)
{
    return rkv_report_read_phase_wall_s(dir, s, max);
}

#endif

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

#if RKV_WITH_SIM /* what --predict needs; without the twin it says so */
/* One real run through `rkv run FILE --backend B --out DIR`: its report,
 * with the output in DIR/run.log. Returns its exit code. */
static int pred_real(const char *exe, const struct pred_args *a, const char *dir)
{
    char log[700];
    mkdir(dir, 0755);
    snprintf(log, sizeof(log), "%s/run.log", dir);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
        }
        char *argv[PRED_MAX_ARGS + 12];
        int n = 0;
        argv[n++] = (char *)exe;
        argv[n++] = "run";
        argv[n++] = (char *)a->file;
        argv[n++] = "--backend";
        argv[n++] = (char *)a->backend;
        argv[n++] = "--out";
        argv[n++] = (char *)dir;
        for (int i = 0; i < a->n_pass; i++)
            argv[n++] = a->pass[i];
        argv[n] = NULL;
        execv(exe, argv);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int pred_cmp(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

#endif

/* The scenario and the calibration it is predicted with. */
static int pred_setup(const struct pred_args *a, const char *exe, struct rkv_scenario **sc_p,
                      struct cli_calib *c)
{
    char err[600];
    if (rkv_scenario_load(a->file, sc_p, err, sizeof(err)) < 0 ||
        rkv_oracle_check_scenario(*sc_p, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv run: %s\n", err);
        return RKV_EXIT_USAGE;
    }
    if (a->calib) {
        if (cli_calib_load(a->calib, c, err, sizeof(err)) < 0) {
            fprintf(stderr, "rkv run: %s\n", err);
            return RKV_EXIT_USAGE;
        }
        return 0;
    }
    /* No file: measure now, briefly (rkv calibrate writes one to reuse). */
    printf("rkv run: no --calibration: calibrating %s first (quick)\n", a->backend);
    if (cli_calibrate(exe, a->backend, 1, NULL, c, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv run: calibration: %s\n", err);
        return RKV_EXIT_STORE;
    }
    return 0;
}

#if RKV_WITH_SIM
/* The twin's phase times (predicted), or -1 with the reason on stderr. */
static int pred_twin(struct rkv_scenario *sc, double *pred, double *sim_s)
{
    struct rkv_twin_opts o = {.log_level = 0, .test_corrupt_row = UINT64_MAX};
    struct rkv_twin_result res;
    int rc = rkv_twin_run(sc, &o, &res);
    if (rc < 0 || !res.nodes_ok) {
        fprintf(stderr, "rkv run: twin: %s\n", res.error[0] ? res.error : rkv_strerror(rc));
        rkv_twin_result_free(&res);
        return -1;
    }
    struct rkv_report r;
    rc = rkv_report_collect(&r, sc, res.outs, res.n_workers);
    if (rc == 0) {
        r.processes_ok = res.nodes_ok;
        for (uint32_t p = 0; p < sc->n_phases; p++)
            pred[p] = r.phase[p].wall_s;
        *sim_s = res.sim_s;
        if (!rkv_report_passed(&r))
            fprintf(stderr, "rkv run: twin: the oracle did not pass\n");
        rkv_report_free(&r);
    }
    rkv_twin_result_free(&res);
    return rc < 0 ? -1 : 0;
}

/* pred_twin in a child (SimGrid runs once per process), so it can run
 * between the real runs: sc on the platform calibration c0 describes. */
static int pred_twin_child(const struct rkv_scenario *sc0, const struct cli_calib *c0, double *pred)
{
    const struct rkv_scenario *sc = sc0;
    int fd[2];
    if (pipe(fd) < 0)
        return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        double sim_s, v[RKV_SC_MAX_PHASES];
        struct rkv_scenario *tsc = malloc(sizeof(*tsc));
        struct cli_calib c = *c0;
        if (!tsc)
            _exit(1);
        *tsc = *sc0;
        cli_calib_apply(&c, tsc);
        int rc = pred_twin(tsc, v, &sim_s);
        size_t n = sc->n_phases * sizeof(*v);
        ssize_t w = rc == 0 ? write(fd[1], v, n) : -1;
        _exit(w == (ssize_t)n ? 0 : 1);
    }
    close(fd[1]);
    size_t n = sc->n_phases * sizeof(*pred), got = 0;
    ssize_t k = 0;
    while (pid > 0 && got < n && (k = read(fd[0], (char *)pred + got, n - got)) > 0)
        got += (size_t)k;
    close(fd[0]);
    int st = 0;
    if (pid > 0)
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
    return got == n && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

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

/* The real runs' phase times (median of --repeat) into meas; with c, after
 * each real run a twin run with it too, medians into pred. Other work on a
 * shared host (or a VM's stolen time) takes our cores for tens of percent
 * from one second to the next; the twin measures the CPU of node code by
 * the clock, so taking its runs in turn with the real ones samples the same
 * moments. */
static int pred_measure(const char *exe, const struct pred_args *a, const struct cli_calib *c,
                        const struct rkv_scenario *sc, double *meas, double *pred)
{
    char tmp[] = "/tmp/rkv-predict-XXXXXX";
    if (!mkdtemp(tmp)) {
        fprintf(stderr, "rkv run: cannot make a temporary directory\n");
        return -1;
    }
    size_t cells = (size_t)a->repeat * sc->n_phases;
    double *all = calloc(2 * cells, sizeof(*all)), *twin = all ? all + cells : NULL;
    int rc = all ? 0 : -1;
    for (unsigned k = 0; k < a->repeat && rc == 0; k++) {
        char dir[600];
        snprintf(dir, sizeof(dir), "%s/run%u", tmp, k);
        int code = pred_real(exe, a, dir);
        double s[RKV_SC_MAX_PHASES];
        int n = pred_report_phases(dir, s, RKV_SC_MAX_PHASES);
        printf("real run %u of %u on %s: %s\n", k + 1, a->repeat, a->backend,
               code == 0 ? "PASS" : "FAIL (see the log below)");
        fflush(stdout);
        if (code != 0 || n != (int)sc->n_phases) {
            char cmd[700];
            snprintf(cmd, sizeof(cmd), "tail -n 20 '%s/run.log' >&2", dir);
            if (system(cmd) != 0)
                fprintf(stderr, "rkv run: no log in %s\n", dir);
            rc = -1;
            break;
        }
        for (uint32_t p = 0; p < sc->n_phases; p++)
            all[p * a->repeat + k] = s[p];
        if (c && (rc = pred_twin_child(sc, c, s)) < 0)
            break;
        for (uint32_t p = 0; c && p < sc->n_phases; p++)
            twin[p * a->repeat + k] = s[p];
    }
    for (uint32_t p = 0; rc == 0 && p < sc->n_phases; p++) {
        qsort(all + p * a->repeat, a->repeat, sizeof(*all), pred_cmp);
        meas[p] = all[p * a->repeat + a->repeat / 2];
        qsort(twin + p * a->repeat, a->repeat, sizeof(*all), pred_cmp);
        if (pred)
            pred[p] = twin[p * a->repeat + a->repeat / 2];
    }
    free(all);
    char cmd[100];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "rkv run: could not remove %s\n", tmp);
    return rc;
}
#endif

/* --calibration without --predict: the twin on the calibrated platform. */
static int pred_twin_only(const struct pred_args *a, struct rkv_scenario *sc,
                          const struct cli_calib *c)
{
    struct cli_settings s;
    char err[512];
    if (cli_settings_load(&s, a->n_pass, (char **)a->pass, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv run: %s\n", err);
        return RKV_EXIT_USAGE;
    }
    cli_calib_apply(c, sc);
    struct cli_twin_args ta = {.trace = a->trace};
    return cli_run_twin(sc, &s, a->out_dir, a->plot, &ta);
}

int cli_cmd_predict(int argc, char **argv, const char *self)
{
    struct pred_args a;
    struct rkv_scenario *sc = NULL;
    struct cli_calib c;
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
    code = RKV_EXIT_STORE;
    if (pred_measure(exe, &a, &c, sc, meas, pred) < 0)
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
