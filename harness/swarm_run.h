/* rkv swarm's runner (impl/cli/swarm.c), for its command and its tests:
 * cases in the twin, one child process each, their replay and shrinking. */
#ifndef RKV_CLI_SWARM_INT_H
#define RKV_CLI_SWARM_INT_H

#include <stdint.h>

#include "harness/swarm.h"

struct cli_swarm {
    uint32_t jobs;        /* child processes at a time */
    double timeout_s;     /* wall time of one case before it counts as hung */
    uint32_t shrink_runs; /* cases one shrink may run */
    double shrink_s;      /* and the wall time it may take (0: no limit) */
    char work_dir[512];   /* scratch scenario files and logs */
    /* The oracle's self-test (rkv_twin_opts.test_corrupt_row, UINT64_MAX:
     * off): the one place the swarm touches that hook. */
    uint64_t test_corrupt_row;
};

/* Runs scenario files as cases in the twin (jobs[i].out gets each verdict). */
int cli_swarm_run_files(const struct cli_swarm *cs, struct rkv_swarm_job *jobs, uint32_t n);
/* Runs sp twice at once; out is the first run, or RKV_SWV_NONDET when the
 * second ended another way or with another event trace. */
int cli_swarm_replay(const struct cli_swarm *cs, const struct rkv_swarm_spec *sp,
                     struct rkv_swarm_outcome *out);
/* out = RKV_SWV_NONDET when a and b (one case, twice) differ; else untouched. */
void cli_swarm_compare(const struct rkv_swarm_outcome *a, const struct rkv_swarm_outcome *b,
                       struct rkv_swarm_outcome *out);
/* Shrinks sp, which failed as failure: applies rkv_swarm_reduce's
 * reductions, keeping each one whose case still fails the same way, until a
 * whole pass keeps none or shrink_runs cases ran. */
int cli_swarm_shrink(const struct cli_swarm *cs, const struct rkv_swarm_spec *sp,
                     const struct rkv_swarm_outcome *failure, struct rkv_swarm_spec *min_p,
                     struct rkv_swarm_outcome *min_out, uint32_t *runs_p);

#endif
