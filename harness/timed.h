/* The timed phase of `rkv demo` and `rkv bench` (harness/timed.c): push and
 * pull throughput and one-row pull latency on rows of other machines, run
 * by each worker after the checked scenario. Not the scenario workload
 * (harness/workload.h, rkv_wl_*): this one only measures. */
#ifndef RKV_TIMED_H
#define RKV_TIMED_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "api/config.h"
#include "rkv.h"

struct rkv_timed_workload {
    uint64_t rows;        /* rows per tensor */
    uint32_t value_bytes; /* bytes per row for the throughput phase */
    uint32_t rounds;
};

struct rkv_timed_result {
    uint64_t checks, errors;
    uint64_t push_bytes, pull_bytes, pushpull_bytes, pushpipe_bytes;
    double push_s, pull_s, pushpull_s, pushpipe_s; /* pushpipe: pushes pipelined */
    /* When each pass started, on rkv_timed_now_s's clock (shared by the
     * host's processes): the aggregate is taken over the workers' common window. */
    double push_t0_s, pull_t0_s, pushpull_t0_s, pushpipe_t0_s;
    double pull_lat_us_p50, pull_lat_us_p99;
    /* Context switches of the worker process per 1-row pull: voluntary
     * ones are sleeps (a wake-up each), involuntary ones preemptions. */
    double pull_lat_vcsw, pull_lat_ivcsw;
    double pull_lat_call_vcsw; /* sleeps of the calling thread alone per pull */
    int busy_poll;             /* the worker's setting, as it ran */
};

/* The workload settings (rows, value-bytes, rounds), checked; 0 or -1
 * with a message in err. */
int rkv_timed_workload_load(const struct cmd_settings *s, struct rkv_timed_workload *wl, char *err,
                            size_t err_len);

/* The timed phase (after the built-in scenario): push and pull throughput
 * and latency on remote rows of value_bytes each. */
int rkv_timed_run(struct rkv_client *cli, const struct rkv_config *cfg,
                  const struct rkv_timed_workload *wl, struct rkv_timed_result *res, FILE *log);

/* The physical limit of rkv_timed_run's phase on this machine's shard (rkv
 * bench shm): one core doing the phase's copies with memcpy, the caller's
 * batch to and from row-sized blocks drawn the same way from shared memory
 * of the shard's size. kind as the phase's passes: 0 push (batch -> rows),
 * 1 pull (rows -> batch), 2 push then pull (both counted). GB/s of the
 * fastest of a few passes; 0 if it could not be measured. */
double rkv_timed_limit_shard_gbps(uint32_t value_bytes, int kind);

/* Seconds on the monotonic clock, for the tools' own timings (never a
 * node's: those take the port's clock, simulated in the twin). */
double rkv_timed_now_s(void);

#endif
