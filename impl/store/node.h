/* What a composition needs from the store: the code that puts a node
 * (process) together from a port and a NIC and then runs a server or a
 * client on them. Real hosts compose in store/node.c (rkv_node_open; the
 * CLI's `rkv server` / `rkv worker` / `rkv ls` call it), the twin in
 * sim/twin/twin.c. The store's internals stay in store_int.h and
 * server_int.h. */
#ifndef RKV_STORE_NODE_H
#define RKV_STORE_NODE_H

#include <stddef.h>
#include <stdint.h>

#include "rkv.h"

struct rkv_port;
struct rkv_nic;
struct rkv_nic_ops;

/* The NIC backend by name ("tcp", "verbs"; the twin composes its own);
 * NULL if not built in. */
const struct rkv_nic_ops *rkv_nic_find(const char *name);
/* 0 when backend is built in; else -RKV_ECONFIG naming those that are. */
int rkv_node_backend_check(const char *backend, char *err, size_t err_len);
/* The POSIX port and the configured NIC of one node (process). */
int rkv_node_open(const struct rkv_config *cfg, const char *node, uint64_t seed,
                  struct rkv_port **port_p, struct rkv_nic **nic_p, char *err, size_t err_len);
void rkv_node_close(struct rkv_port *port, struct rkv_nic *nic);
/* The process (port proc_self id) that made machine's shared-memory
 * segment under prefix on this host, while it runs; else 0 (no segment of
 * this build, or its maker ended). */
uint64_t rkv_node_shm_maker(const char *prefix, uint32_t machine);

/* A server, a client or an observer (a client that only lists and reads
 * the cluster's tensors) on the port and NIC given, which outlive it. */
int rkv_server_create_on(struct rkv_port *port, struct rkv_nic *nic, const struct rkv_config *cfg,
                         uint32_t local_id, struct rkv_server **srv_p, char *err, size_t err_len);
int rkv_client_create_on(struct rkv_port *port, struct rkv_nic *nic, const struct rkv_config *cfg,
                         struct rkv_client **cli_p, char *err, size_t err_len);
int rkv_client_create_observer_on(struct rkv_port *port, struct rkv_nic *nic,
                                  const struct rkv_config *cfg, struct rkv_client **cli_p,
                                  char *err, size_t err_len);

/* Test-only, deliberately outside rkv.h: a server that creates a shard
 * holding global row `row` adds 1 to that row's first element, in every
 * tensor, so that the oracle's self-test can prove a wrong value is caught
 * (the composition arms it from RKV_TEST_CORRUPT_ROW). UINT64_MAX (what a
 * server starts with) disables it. Call before rkv_server_run. */
void rkv_server_set_test_corrupt_row(struct rkv_server *srv, uint64_t row);
/* Tests: tensors whose shard on this server is async_bytes or more are
 * made by the make task (default SRV_MAKE_ASYNC_BYTES), and with hold set
 * that task waits before each make until hold is cleared (or the server
 * stops), so a test can see the server serve meanwhile. */
void rkv_server_test_make(struct rkv_server *srv, uint64_t async_bytes, int hold);
/* Tests: how many tensors the make task has begun making. */
uint64_t rkv_server_test_makes_begun(struct rkv_server *srv);

#endif
