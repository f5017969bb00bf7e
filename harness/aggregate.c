/* The aggregate of a timed pass over its common window (aggregate.h).
 * Summing each worker's bytes and dividing by the slowest worker's own
 * duration, as `rkv demo` did before, counts two passes that ran one after
 * the other as if they had run together: 1 server x 2 workers at 4 KiB
 * printed 4.6 times one iperf3 stream on a 2-core host. */
#include "harness/aggregate.h"

#include <assert.h>
#include <stddef.h>

double rkv_pass_aggregate_gbs(const struct rkv_pass *passes, uint32_t n)
{
    assert(passes != NULL || n == 0);
    uint64_t bytes = 0;
    double first = 0, last = 0;
    int any = 0;
    for (uint32_t i = 0; i < n; i++) {
        const struct rkv_pass *p = &passes[i];
        if (p->bytes == 0)
            continue;
        /* A pass that ended before it began is a clock the workers do not
         * share, or a bug: no figure rather than a wrong one. */
        if (!(p->end_s >= p->start_s))
            return 0;
        first = !any || p->start_s < first ? p->start_s : first;
        last = !any || p->end_s > last ? p->end_s : last;
        bytes += p->bytes;
        any = 1;
    }
    double window_s = last - first;
    return any && window_s > 0 ? (double)bytes / window_s / 1e9 : 0;
}
