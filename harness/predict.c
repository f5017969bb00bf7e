/* rkv run FILE --predict's measurement: the scenario on the real backend
 * through the launcher and in the twin with this host's calibration, in
 * turn, phase by phase (sim/README.md "Calibration"). */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/child_exit.h"
#include "harness/calib.h"
#include "harness/launch.h"
#include "harness/report.h"
#include "harness/scenario.h"

static int pred_cmp(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* One real run as `rkv run FILE --backend B --out DIR` makes it
 * (rkv_launch_file), in a child with its output in DIR/run.log. Returns its
 * exit code. */
static int pred_real(const struct rkv_predict_opts *o, const char *dir)
{
    char log[700];
    mkdir(dir, 0755);
    snprintf(log, sizeof(log), "%s/run.log", dir);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
        }
        char *argv[RKV_PREDICT_MAX_FLAGS + 2];
        int n = 0;
        argv[n++] = "--backend";
        argv[n++] = (char *)o->backend;
        for (int i = 0; i < o->n_flags; i++)
            argv[n++] = o->flags[i];
        int code = rkv_launch_file(o->file, n, argv, dir, 0, o->self);
        fflush(NULL);
        rkv_child_exit(code);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The twin's phase times (predicted), or -1 with the reason on stderr. */
static int pred_twin(const struct rkv_predict_opts *po, struct rkv_scenario *sc, double *pred)
{
    struct rkv_launch_twin_opts o = {.log_level = 0,
                                     .test_corrupt_row = UINT64_MAX,
                                     .store = po->store,
                                     .store_set = po->store_set};
    struct rkv_report r;
    int rc = po->twin(sc, &o, &r);
    if (rc < 0 || !r.processes_ok) {
        fprintf(stderr, "rkv run: twin: %s\n", r.node_error);
        rkv_report_free(&r);
        return -1;
    }
    for (uint32_t p = 0; p < sc->n_phases; p++)
        pred[p] = r.phase[p].wall_s;
    if (!rkv_report_passed(&r))
        fprintf(stderr, "rkv run: twin: the oracle did not pass\n");
    rkv_report_free(&r);
    return 0;
}

/* pred_twin in a child (SimGrid runs once per process), so it can run
 * between the real runs: sc on the platform calibration c0 describes. */
static int pred_twin_child(const struct rkv_predict_opts *po, const struct rkv_scenario *sc0,
                           const struct rkv_calib *c0, double *pred)
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
        double v[RKV_SC_MAX_PHASES];
        struct rkv_scenario *tsc = malloc(sizeof(*tsc));
        struct rkv_calib c = *c0;
        if (!tsc)
            rkv_child_exit(1);
        *tsc = *sc0;
        rkv_calib_apply(&c, tsc);
        int rc = pred_twin(po, tsc, v);
        size_t n = sc->n_phases * sizeof(*v);
        ssize_t w = rc == 0 ? write(fd[1], v, n) : -1;
        rkv_child_exit(w == (ssize_t)n ? 0 : 1);
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

/* The real runs' phase times (median of --repeat) into meas; with c, after
 * each real run a tw run with it too, medians into pred. Other work on a
 * shared host (or a VM's stolen time) takes our cores for tens of percent
 * from one second to the next; the tw measures the CPU of node code by
 * the clock, so taking its runs in turn with the real ones samples the same
 * moments. */
int rkv_predict_measure(const struct rkv_predict_opts *o, const struct rkv_calib *c,
                        const struct rkv_scenario *sc, double *meas, double *pred)
{
    assert(o->repeat >= 1 && o->n_flags <= RKV_PREDICT_MAX_FLAGS && (!c || o->twin));
    char tmp[] = "/tmp/rkv-predict-XXXXXX";
    if (!mkdtemp(tmp)) {
        fprintf(stderr, "rkv run: cannot make a temporary directory\n");
        return -1;
    }
    size_t cells = (size_t)o->repeat * sc->n_phases;
    double *all = calloc(2 * cells, sizeof(*all)), *tw = all ? all + cells : NULL;
    int rc = all ? 0 : -1;
    for (unsigned k = 0; k < o->repeat && rc == 0; k++) {
        char dir[600];
        snprintf(dir, sizeof(dir), "%s/run%u", tmp, k);
        int code = pred_real(o, dir);
        double s[RKV_SC_MAX_PHASES];
        int n = rkv_report_read_phase_wall_s(dir, s, RKV_SC_MAX_PHASES);
        printf("real run %u of %u on %s: %s\n", k + 1, o->repeat, o->backend,
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
            all[p * o->repeat + k] = s[p];
        if (c && (rc = pred_twin_child(o, sc, c, s)) < 0)
            break;
        for (uint32_t p = 0; c && p < sc->n_phases; p++)
            tw[p * o->repeat + k] = s[p];
    }
    for (uint32_t p = 0; rc == 0 && p < sc->n_phases; p++) {
        qsort(all + p * o->repeat, o->repeat, sizeof(*all), pred_cmp);
        meas[p] = all[p * o->repeat + o->repeat / 2];
        qsort(tw + p * o->repeat, o->repeat, sizeof(*all), pred_cmp);
        if (pred)
            pred[p] = tw[p * o->repeat + o->repeat / 2];
    }
    free(all);
    char cmd[100];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "rkv run: could not remove %s\n", tmp);
    return rc;
}
