/* The store's test and harness hooks into a server or client (the
 * constructors on a given port and NIC are in store/node.h). */
#ifndef RKV_SERVER_INT_H
#define RKV_SERVER_INT_H

#include "store/store_int.h"

/* What the zero-copy paths did, for tests. */
struct rkv_client_zc_stats {
    uint64_t pulls, pushes; /* remote parts sent zero-copy */
    uint64_t call_regs;     /* buffers registered for one call (not found in the cache) */
    uint64_t cache_hits;    /* calls whose rows lay in a rkv_client_register region */
    uint64_t drops;         /* connections closed after an unanswered zero-copy request */
};
void rkv_client_get_zc_stats(struct rkv_client *cli, struct rkv_client_zc_stats *st_p);

/* The node's port, for code that runs beside a client (the workload engine). */
struct rkv_port *rkv_client_port(struct rkv_client *cli);

#endif
