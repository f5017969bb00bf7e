/* Entry points for backends that bring their own port and NIC (the twin). */
#ifndef RKV_SERVER_INT_H
#define RKV_SERVER_INT_H

#include "store/store_int.h"

int rkv_server_create_on(struct rkv_port *port, struct rkv_nic *nic, const struct rkv_config *cfg,
                         uint32_t local_id, struct rkv_server **srv_p, char *err, size_t err_len);
int rkv_client_create_on(struct rkv_port *port, struct rkv_nic *nic, const struct rkv_config *cfg,
                         struct rkv_client **cli_p, char *err, size_t err_len);
int rkv_client_create_observer_on(struct rkv_port *port, struct rkv_nic *nic,
                                  const struct rkv_config *cfg, struct rkv_client **cli_p,
                                  char *err, size_t err_len);

/* Test-only, deliberately outside rkv.h: a server that creates a shard
 * holding global row `row` adds 1 to that row's first element, in every
 * tensor, so that the oracle's self-test can prove a wrong value is caught.
 * UINT64_MAX (what a server starts with) disables it. Call before
 * rkv_server_run. */
void rkv_server_set_test_corrupt_row(struct rkv_server *srv, uint64_t row);

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
