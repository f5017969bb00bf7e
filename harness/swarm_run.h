/* rkv swarm's runner, for its command (impl/cli/swarm.c) and its tests:
 * cases in the twin (through the function the CLI gives), one child
 * process each, their replay and shrinking, and the search over seeds. */
#ifndef RKV_SWARM_RUN_H
#define RKV_SWARM_RUN_H

#include <stdint.h>

#include "harness/launch.h"
#include "harness/swarm.h"

struct rkv_swarm_runner {
    uint32_t jobs;        /* child processes at a time */
    double timeout_s;     /* wall time of one case before it counts as hung */
    uint32_t shrink_runs; /* cases one shrink may run */
    double shrink_s;      /* and the wall time it may take (0: no limit) */
    char work_dir[512];   /* scratch scenario files and logs */
    /* The oracle's self-test (rkv_twin_opts.test_corrupt_row, UINT64_MAX:
     * off): the one place the swarm touches that hook. */
    uint64_t test_corrupt_row;
    rkv_launch_twin_fn twin; /* runs each case in the twin (not NULL) */
    /* NULL or "sim": the twin. "tcp": each case as `rkv run --backend tcp`
     * runs it, a process per node on loopback, exe their binary: the same
     * files, checked by the same oracle in each worker process and the
     * launcher's cross-process checks, which the twin's one shared oracle
     * never exercises (a tcp-only false FAIL went unseen by 2,400 seeds). */
    const char *backend;
    const char *exe;
};

/* Runs scenario files as cases in the twin (jobs[i].out gets each verdict). */
int rkv_swarm_run_files(const struct rkv_swarm_runner *cs, struct rkv_swarm_job *jobs, uint32_t n);
/* Runs sp twice at once; out is the first run, or RKV_SWV_NONDET when the
 * second ended another way or with another event trace. */
int rkv_swarm_replay(const struct rkv_swarm_runner *cs, const struct rkv_swarm_spec *sp,
                     struct rkv_swarm_outcome *out);
/* out = RKV_SWV_NONDET when a and b (one case, twice) differ; else untouched. */
void rkv_swarm_compare(const struct rkv_swarm_outcome *a, const struct rkv_swarm_outcome *b,
                       struct rkv_swarm_outcome *out);
/* Shrinks sp, which failed as failure: applies rkv_swarm_reduce's
 * reductions, keeping each one whose case still fails the same way, until a
 * whole pass keeps none or shrink_runs cases ran. */
int rkv_swarm_shrink(const struct rkv_swarm_runner *cs, const struct rkv_swarm_spec *sp,
                     const struct rkv_swarm_outcome *failure, struct rkv_swarm_spec *min_p,
                     struct rkv_swarm_outcome *min_out, uint32_t *runs_p);

/* rkv swarm: every seed of first..last (with minutes, until they
 * are up) generated, run and checked, failures kept in out_dir and shrunk;
 * a line per failure and a summary on stdout. Returns an RKV_EXIT_* code
 * (RKV_EXIT_CHECK: a seed failed). */
struct rkv_swarm_search_opts {
    struct rkv_swarm_runner runner;
    const char *out_dir;
    uint64_t first, last;
    double minutes;
    uint32_t replay_every, max_shrinks;
    int verbose; /* a line per seed */
};
int rkv_swarm_search(const struct rkv_swarm_search_opts *o);

#endif
