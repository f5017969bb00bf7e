/* `rkv node --scenario F` under mpirun or srun: the verdict `rkv run` prints,
 * once, from worker 0, with every worker's lines carried over the store
 * (harness/report_gather.h). */
#ifndef RKV_HARNESS_VERDICT_H
#define RKV_HARNESS_VERDICT_H

#include <stddef.h>

#include "harness/scenario.h"
#include "rkv.h"

struct rkv_verdict_opts {
    const char *out_dir; /* --out DIR of worker 0: report.json and report.md; NULL: none */
    double t0_s;         /* when the worker started (rkv_timed_now_s), for the wall time */
};

/* Every worker: sends its report (text: its PHASE, FIRSTERR and PIN lines;
 * wl_rc: how its workload ended). Worker 0 then gathers everyone's (for at
 * most the request timeout: every live worker left the workload's last
 * barrier with it), shuts the servers down, prints the table and the
 * workers that never reported, and writes the report files. Returns the
 * exit code: code, or for worker 0 a failed verdict's (RKV_EXIT_CHECK for a
 * wrong value, RKV_EXIT_STORE otherwise) when code was 0. */
int rkv_verdict_node(struct rkv_client *cli, const struct rkv_config *cfg,
                     const struct rkv_scenario *sc, const char *text, size_t len, int wl_rc,
                     int code, const struct rkv_verdict_opts *v);

#endif
