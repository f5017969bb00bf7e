/* The throughput of one timed pass that several workers ran at once. */
#ifndef RKV_AGGREGATE_H
#define RKV_AGGREGATE_H

#include <stdint.h>

/* One worker's timed pass: the bytes it moved and when it started and
 * ended, in seconds on a clock every process of the host shares
 * (CLOCK_MONOTONIC: the workers of `rkv demo` are processes of one host). */
struct rkv_pass {
    uint64_t bytes;
    double start_s, end_s;
};

/* Every pass's bytes over the common window, from the first start to the
 * last end, in GB/s (1e9 B/s). Passes that did not overlap in time add
 * their times as well as their bytes, so the figure is never more than
 * the fastest worker alone moved; passes with no bytes (a worker that
 * measured nothing) are left out. 0 when nothing was moved or the window
 * is empty. */
double rkv_pass_aggregate_gbs(const struct rkv_pass *passes, uint32_t n);

#endif
