/* The public half of the client's counters (rkv.h): names and bucket edges. */
#include "store/stats.h"

const char *rkv_stats_op_name(int op)
{
    static const char *const names[RKV_STATS_OPS] = {"push", "pull", "barrier", "init", "other"};
    return op >= 0 && op < RKV_STATS_OPS ? names[op] : NULL;
}

uint64_t rkv_stats_bucket_ns(uint32_t b)
{
    if (b >= RKV_STATS_BUCKETS)
        b = RKV_STATS_BUCKETS - 1;
    return b ? 1ull << b : 0;
}
