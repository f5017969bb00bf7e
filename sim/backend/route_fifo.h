/* Mid-size messages over every link of their route, first in, first out
 * (sim/backend/route_fifo.cpp): the twin's model of rows through a fabric
 * whose inner links are shared (an oversubscribed fat tree, rails), where
 * max-min made every row a flow of one connected set and re-solved all of
 * them at each start and end (a 1,024-node oversubscribed fat tree of
 * 16,384 rows did not finish in minutes). */
#ifndef RKV_SIM_ROUTE_FIFO_H
#define RKV_SIM_ROUTE_FIFO_H

#include <stdint.h>

#include <simgrid/forward.h>

#ifdef __cplusplus
extern "C" {
#endif

struct sim_route_fifo;

/* NULL when out of memory. */
struct sim_route_fifo *sim_route_fifo_new(void);
void sim_route_fifo_free(struct sim_route_fifo *f);
/* When a message of `bytes` posted at `now` from host src (machine src_m)
 * to host dst (machine dst_m) arrives: each link of the route (SimGrid's,
 * looked up once per pair of machines) carries one such message at a time
 * at its bandwidth, in the order they reach it; a message enters the next
 * link as its head arrives there (cut-through) and leaves it no sooner than
 * its tail left the last one. Unshared links (FATPIPE) queue nothing.
 * Uncontended, that is the route's latency + bytes / its bottleneck, as
 * max-min gives. Negative when out of memory (then max-min carries it). */
double sim_route_fifo_due(struct sim_route_fifo *f, sg_host_t src, sg_host_t dst, uint32_t src_m,
                          uint32_t dst_m, double now, double bytes);

#ifdef __cplusplus
}
#endif

#endif
