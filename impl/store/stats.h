/* The client's counters (rkv.h, rkv_client_stats): one latency histogram
 * per operation and per server, fixed-size log2 buckets, so that counting
 * is a few additions and never an allocation. */
#ifndef RKV_STORE_STATS_H
#define RKV_STORE_STATS_H

#include <stdint.h>

#include "rkv.h"

/* The bucket of a latency: floor(log2(ns)), clamped to the last one. */
static inline uint32_t rkv_stats_bucket(uint64_t ns)
{
    uint32_t b = ns ? 63u - (uint32_t)__builtin_clzll(ns) : 0;
    return b < RKV_STATS_BUCKETS ? b : RKV_STATS_BUCKETS - 1;
}

/* One call or request ended: ok ones add their rows and bytes. */
static inline void rkv_stats_count(struct rkv_op_stats *st, int ok, uint64_t rows, uint64_t bytes)
{
    st->count++;
    st->errors += !ok;
    if (ok) {
        st->rows += rows;
        st->bytes += bytes;
    }
}

/* One call or request that ended after ns: counted, and its latency kept. */
static inline void rkv_stats_add(struct rkv_op_stats *st, uint64_t ns, int ok, uint64_t rows,
                                 uint64_t bytes)
{
    rkv_stats_count(st, ok, rows, bytes);
    st->timed++;
    st->total_ns += ns;
    st->max_ns = ns > st->max_ns ? ns : st->max_ns;
    st->hist[rkv_stats_bucket(ns)]++;
}

/* A push or pull that sends nothing (rows of the caller's own machine)
 * takes about 50 ns, and two reads of CLOCK_MONOTONIC about as much again:
 * of those, one call in RKV_STATS_SAMPLE is timed (rkv.h). */
#define RKV_STATS_SAMPLE 64u

#endif
