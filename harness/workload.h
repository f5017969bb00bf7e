/* The scenario workload engine: runs inside one worker node (a process on
 * a real backend, an actor in the twin) and checks every pulled value with
 * the oracle. Timing and sleeping go through the node's port. */
#ifndef RKV_WORKLOAD_H
#define RKV_WORKLOAD_H

#include <stdint.h>
#include <stdio.h>

#include "harness/scenario.h"
#include "port/port.h"

#define RKV_WL_HIST 1024 /* latency buckets: index = 16 * log2(ns) */

struct rkv_wl_phase_stats {
    uint64_t pushes, pulls, bytes;
    uint64_t checks, skipped, errors;
    uint64_t unresolved; /* of checks, those the oracle cannot vouch for (oracle.h) */
    double wall_s;
    double max_us;
    uint64_t hist[RKV_WL_HIST];
    char first_error[320];
    /* The worker stopped on a store error before this phase's epoch was
     * verified: its counts are what it did, not a phase it finished (a
     * STOPPED line after its PHASE line). stop_error: the error, on the
     * first such phase only, and stop_rc its code (negative; 0 elsewhere). */
    int stopped;
    int stop_rc;
    char stop_error[256];
};

/* Runs every phase of sc as worker `worker`; stats has sc->n_phases entries.
 * Returns 0 (oracle errors are counted, not returned) or a negative store
 * error that stopped the run. */
int rkv_wl_run(struct rkv_client *cli, struct rkv_port *port, const struct rkv_scenario *sc,
               uint32_t worker, struct rkv_wl_phase_stats *stats, FILE *log);

/* The same with an oracle shared by all workers of this process (the twin:
 * one replay of everybody's requests instead of one per worker). */
struct rkv_oracle;
/* on_phase (may be NULL) hears of every phase this worker finished: the
 * progress that step-triggered faults (after_phase) wait for. */
typedef void (*rkv_wl_phase_fn)(void *user, uint32_t worker, uint32_t phase);
/* on_stats hears every phase's stats exactly once, in phase order, when
 * the phase's epoch was verified or the run stopped (phases never run: all
 * zero). The run holds one epoch's stats at a time, not every phase's, and
 * of each histogram the buckets used: a whole one is 8 KiB, times phases,
 * times the twin's thousands of workers. st is valid during the call only. */
typedef void (*rkv_wl_stats_fn)(void *user, uint32_t worker, uint32_t phase,
                                const struct rkv_wl_phase_stats *st);
/* scratch (may be NULL: one is allocated per hand-over) is where a phase's
 * stats are made whole for on_stats: the twin's workers, actors of one
 * thread that hand over without yielding, share one, where a buffer of
 * their own, 8.5 KiB malloc'd and freed per epoch and worker, made malloc
 * consolidate its fast bins each time. */
int rkv_wl_run_shared(struct rkv_client *cli, struct rkv_port *port, const struct rkv_scenario *sc,
                      uint32_t worker, FILE *log, struct rkv_oracle *shared,
                      rkv_wl_phase_fn on_phase, rkv_wl_stats_fn on_stats, void *user,
                      struct rkv_wl_phase_stats *scratch);

/* rkv_wl_run_shared without a shared oracle, whose pinned assign winners
 * (rkv_oracle_set_pin_log) are written to pins (a worker process's stdout,
 * read by the launcher). */
int rkv_wl_run_pinned(struct rkv_client *cli, struct rkv_port *port, const struct rkv_scenario *sc,
                      uint32_t worker, struct rkv_wl_phase_stats *stats, FILE *log, FILE *pins,
                      rkv_wl_phase_fn on_phase, void *user);

uint32_t rkv_wl_bucket(uint64_t ns);
double rkv_wl_bucket_us(uint32_t bucket);
/* Percentile (0..1) of a phase's latencies, in microseconds: the upper
 * edge of the histogram bucket that holds it, clamped to the phase's
 * max_us (so p50 <= p99 <= max, never above the slowest request). */
double rkv_wl_percentile_us(const struct rkv_wl_phase_stats *st, double q);

/* One line per phase, parsed back by the launcher. */
void rkv_wl_print(FILE *out, uint32_t worker, uint32_t phase, const struct rkv_wl_phase_stats *st);
/* The same, reporting `bytes` moved instead of st->bytes (the twin's
 * payload-less runs report the declared rows, not the thin ones). */
void rkv_wl_print_as(FILE *out, uint32_t worker, uint32_t phase,
                     const struct rkv_wl_phase_stats *st, uint64_t bytes);
int rkv_wl_parse(const char *line, uint32_t *worker_p, uint32_t *phase_p,
                 struct rkv_wl_phase_stats *st);

#endif
