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

/* One call or request that ended after ns: ok ones add their rows and bytes. */
static inline void rkv_stats_add(struct rkv_op_stats *st, uint64_t ns, int ok, uint64_t rows,
                                 uint64_t bytes)
{
    st->count++;
    st->errors += !ok;
    if (ok) {
        st->rows += rows;
        st->bytes += bytes;
    }
    st->total_ns += ns;
    st->max_ns = ns > st->max_ns ? ns : st->max_ns;
    st->hist[rkv_stats_bucket(ns)]++;
}

#endif
