/* The oracle: what every row must hold, computed independently of the store.
 *
 * Every pushed value is a function of (seed, tensor, row, phase, worker,
 * round, element), and every worker's request stream is a function of
 * (seed, phase, worker), so each worker can replay everybody's pushes and
 * know the exact state after each barrier:
 *  - sum and sgd values are small integers (sgd: grad x lr), so float sums
 *    are exact whatever the order; sgd with an lr that is not a power of two
 *    is compared with a relative tolerance;
 *  - concurrent assigns leave one writer's row, never a mix: the expected
 *    state of a row is a set of candidates (the last write of each worker
 *    that assigned it since the last barrier) plus a sum delta; the first
 *    read after the barrier that matches one candidate pins it, and every
 *    later read through this oracle must see that same winner (the twin
 *    shares one oracle among all workers, so they must all agree; a worker
 *    process on tcp/verbs has its own, whose pins it prints for the launcher
 *    to compare across workers, see rkv_oracle_set_pin_log);
 *  - between barriers, a row that only this worker writes (or nobody does)
 *    is still exact, which is how read-your-writes is checked.
 * Phases between two barriers form an epoch; mixing assign with sum/sgd on
 * one tensor inside an epoch is rejected when the scenario is checked. */
#ifndef RKV_ORACLE_H
#define RKV_ORACLE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "harness/scenario.h"
#include "port/port.h"

/* One request of one worker, regenerated on demand. */
struct rkv_wl_req {
    int push;
    uint32_t n;
    uint64_t *ids; /* n entries, owned by the generator */
};

/* Deterministic request stream of (phase, worker). */
struct rkv_wl_gen {
    const struct rkv_scenario *sc;
    uint32_t phase, worker, machine;
    struct rkv_rng rng;
    uint32_t round;
    uint64_t *ids;
    const double *zipf_cdf; /* rows entries, or NULL */
    const uint64_t *pool;   /* local-only candidate rows */
    uint64_t n_pool;
    const uint32_t *machine_of; /* rows: owner machine (remote-only) */
};

struct rkv_oracle;

int rkv_oracle_create(const struct rkv_scenario *sc, struct rkv_oracle **or_p);
/* One oracle may serve every worker of a process (the twin): each takes a
 * reference, and destroy drops one. Epoch transitions are idempotent, so
 * the first worker past a barrier moves a shared oracle for everyone. */
void rkv_oracle_ref(struct rkv_oracle *o);
void rkv_oracle_destroy(struct rkv_oracle *o);
/* Checks the scenario's epochs (see above); -RKV_ECONFIG with a message. */
int rkv_oracle_check_scenario(const struct rkv_scenario *sc, char *err, size_t err_len);

void rkv_wl_gen_init(struct rkv_wl_gen *g, struct rkv_oracle *o, uint32_t phase, uint32_t worker);
/* 0 when the phase's keys exist for this worker; -RKV_ECONFIG with why
 * when they do not (local-only on a machine that owns no rows of the
 * tensor, remote-only on one that owns them all), where the stream would
 * draw uniform rows instead. The loader refuses such files; a scenario
 * built in code is checked here. */
int rkv_wl_gen_check(const struct rkv_wl_gen *g, char *why, size_t why_len);
void rkv_wl_gen_next(struct rkv_wl_gen *g, struct rkv_wl_req *req);
void rkv_wl_gen_free(struct rkv_wl_gen *g);

/* Value of element j of a push by (worker, phase, round) to row, the id
 * at position pos of its request (duplicate ids carry different rows). */
double rkv_wl_value(const struct rkv_scenario *sc, uint32_t tensor, uint64_t row, uint32_t phase,
                    uint32_t worker, uint32_t round, uint32_t pos, uint32_t j);
/* The same for an integer tensor: an assign's 20 bits, a sum's values of
 * the dtype's whole range (sums wrap around). */
int64_t rkv_wl_ivalue(const struct rkv_scenario *sc, uint32_t tensor, uint64_t row, uint32_t phase,
                      uint32_t worker, uint32_t round, uint32_t pos, uint32_t j);

/* Starts an epoch at phase `first` (replays every worker's pushes of the
 * epoch to learn who writes which row), and ends it at a barrier (folds the
 * epoch into the expected state). */
int rkv_oracle_epoch_begin(struct rkv_oracle *o, uint32_t first, uint32_t last);
void rkv_oracle_epoch_end(struct rkv_oracle *o);
/* Records this worker's own acknowledged push (for read-your-writes). */
int rkv_oracle_own_push(struct rkv_oracle *o, uint32_t worker, uint32_t phase, uint32_t round,
                        const struct rkv_wl_req *req);

/* Where this oracle writes a line for each winner it pins ("PIN t=T r=ROW
 * w=W p=P n=ROUND"): a worker process with its own oracle tells the
 * launcher, which checks that no two workers pinned different winners of
 * one row (rkv_report_collect). NULL (the default): no lines. */
void rkv_oracle_set_pin_log(struct rkv_oracle *o, FILE *out);

/* Checks one pulled row. mid_epoch = 1 checks only rows this worker alone
 * writes (or nobody writes) in the epoch and returns 1 when it skipped.
 * Returns 0 on match, -1 on mismatch with a message naming tensor, row,
 * expected, got and who last wrote it; 2 on a match the oracle cannot
 * vouch for: the rounding it allows for the row's sums reaches a quarter
 * of their steps, so a quarter of its pushes lost or doubled would match
 * too (an lr too small for that many pushes to one row). */
int rkv_oracle_check_row(struct rkv_oracle *o, uint32_t tensor, uint64_t row, uint32_t worker,
                         int mid_epoch, const void *got, char *why, size_t why_len);

#endif
