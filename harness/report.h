/* Gathers the per-phase lines of every worker into one verdict. */
#ifndef RKV_REPORT_H
#define RKV_REPORT_H

#include <stdio.h>

#include "harness/scenario.h"
#include "harness/workload.h"

struct rkv_report {
    const struct rkv_scenario *sc;
    struct rkv_wl_phase_stats *phase; /* merged over workers, n_phases */
    uint32_t *reported;               /* workers that reported each phase */
    char first_error[400];
    /* The phase whose count first_error belongs to, plus 1 (0: none): the
     * earliest phase's, whichever worker's output comes first. */
    uint32_t first_error_phase1;
    /* Checks the oracle matched but cannot vouch for (oracle.h), and the
     * first phase that had one. */
    uint64_t unresolved;
    uint32_t unresolved_phase;
    uint32_t n_workers;
    double wall_s;
    int processes_ok;
    /* The twin only (sim_s > 0): simulated time, deliveries, their hash. */
    double sim_s;
    uint64_t sim_events;
    uint64_t sim_hash;
    double sim_cpu_s;      /* core-seconds the twin charged (0: none modelled) */
    double sim_node_cpu_s; /* of which node code, measured */
    int sim_sched_cores;   /* the cores were per-core run queues */
    uint64_t sim_sched_wakes;
    /* Runs with crash faults: the verdict asks that every survivor ended
     * (named errors allowed), the faults fired and no value was wrong. */
    int fault_run;
    int faults_fired;
    int must_complete; /* no crash, no broken connection: every phase must finish */
    uint32_t survivor_errors;
    char faults[RKV_SC_FAULTS_TEXT];
    char survivor_error[320];
    /* The workers' counters (their STATS lines, harness/client_stats.h), a
     * JSON array; NULL when none printed any (the twin's workers). */
    struct json_t *stats;
    char node_error[512]; /* the twin: why a node failed (processes_ok 0), or why it refused */
    /* Workers that stopped on a store error (their STOPPED lines), and the
     * first one's error with its node: "w0 stopped before finishing phase
     * ...: <error>". The phases they did not finish are not counted in
     * reported[]. */
    uint32_t workers_stopped;
    char stop_error[400];
    int stop_rc; /* stop_error's code */
    /* Of them, those whose error was a timeout, and the first one's error:
     * a fault run fails on them (a survivor ends on a named error, never a
     * timeout). */
    uint32_t survivor_timeouts;
    char timeout_error[400];
};

/* Parses the stdout of every worker (PHASE, FIRSTERR and STATS lines). */
int rkv_report_collect(struct rkv_report *r, const struct rkv_scenario *sc, char *const *outs,
                       uint32_t n_workers);
void rkv_report_free(struct rkv_report *r);
/* 1 when every worker reported every phase with no oracle error. */
int rkv_report_passed(const struct rkv_report *r);
/* Why the run failed, in one line (the verdict's parenthesis, report.json's
 * "failure"); "" when it passed. */
void rkv_report_fail_reason(const struct rkv_report *r, char *buf, size_t len);
void rkv_report_print(const struct rkv_report *r, FILE *out, const char *backend);
/* Writes report.json and report.md into dir (created if missing). */
int rkv_report_write(const struct rkv_report *r, const char *dir, const char *backend);

/* Each phase's wall_s from DIR/report.json, in order (up to max); returns
 * how many, or -1 if the file is missing or not such a report. */
int rkv_report_read_phase_wall_s(const char *dir, double *s, uint32_t max);

/* Writes latency_cdf.png and throughput.png into dir with gnuplot, titled
 * with the scenario, the backend and whether the times are simulated. */
int rkv_report_plot(const struct rkv_report *r, const char *dir, const char *backend, char *err,
                    size_t err_len);
/* Plots into dir (NULL: this directory) with --plot, and says where they
 * went, or why not, as `rkv run` does on every backend: 0, or -RKV_EIO
 * when they were not made (the run then exits 3). */
int rkv_report_plot_and_say(const struct rkv_report *r, const char *dir, const char *backend);

#endif
