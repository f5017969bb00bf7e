/* Internal to impl/store: the tensor registry and the shared-memory shard,
 * used by both the server and the co-located client fast path. */
#ifndef RKV_STORE_INT_H
#define RKV_STORE_INT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "port/port.h"
#include "proto/proto.h"
#include "rkv.h"
#include "store/handlers.h"
#include "store/pbook.h"

#define RKV_SHARD_MAGIC 0x53564b52444853ull /* "SHDRKVS" */
/* Row locks are striped: enough stripes that unrelated rows rarely share one,
 * few enough that the header stays one small page run. */
#define RKV_SHARD_LOCKS 4096u
#define RKV_MAX_TENSORS 1024u
#define RKV_CLIENT_NODE_BASE 0x10000u

/* Lives at the start of every shard segment, shared by all processes of a
 * machine. Lock words are process-shared because they are plain atomics. */
struct rkv_shard_hdr {
    uint64_t magic;
    uint64_t local_rows;
    uint64_t row_bytes;
    uint64_t with_state;
    atomic_uint locks[RKV_SHARD_LOCKS];
};

struct rkv_shard {
    struct rkv_port *port;
    struct rkv_shard_hdr *hdr;
    size_t map_bytes;
    uint8_t *data;  /* local_rows x row_bytes */
    uint8_t *state; /* same shape, or NULL */
    uint64_t local_rows;
    size_t row_bytes;
};

/* One tensor as seen by one node. */
struct rkv_tensor {
    struct rkv_tensor_meta meta;
    size_t row_bytes;
    enum rkv_init init;
    uint64_t init_seed;
    struct rkv_pbook pb;
    int ready;              /* server 0: every server has it */
    struct rkv_shard shard; /* mapped when this node's machine holds rows */
    int mapped;
};

void rkv_shard_name(char *buf, size_t len, const char *prefix, uint32_t machine, uint32_t tensor);
/* create=1: makes and zero-fills the segment (the machine's first server). */
int rkv_shard_map(struct rkv_port *port, const char *name, uint64_t local_rows, size_t row_bytes,
                  int with_state, int create, struct rkv_shard *sh, char *err, size_t err_len);
void rkv_shard_unmap(struct rkv_shard *sh);
void rkv_shard_lock(struct rkv_shard *sh, uint64_t local_row);
void rkv_shard_unlock(struct rkv_shard *sh, uint64_t local_row);
/* Fills every local row with the tensor's initial values (seeded uniform in
 * [-1, 1), the same value for a global row whatever the partitioning). */
void rkv_shard_init_values(struct rkv_shard *sh, const struct rkv_tensor *t, uint32_t machine);

/* Checks and applies / reads rows of a request whose ids all live on
 * `machine`. Validation covers every id before any row is touched. */
int rkv_tensor_check_ids(const struct rkv_tensor *t, uint32_t machine, const uint64_t *ids,
                         size_t n, char *err, size_t err_len);
int rkv_shard_push(struct rkv_shard *sh, const struct rkv_tensor *t,
                   const struct rkv_handler_table *ht, int op, double param, const uint64_t *ids,
                   size_t n, const uint8_t *rows);
void rkv_shard_pull_row(struct rkv_shard *sh, const struct rkv_tensor *t, uint64_t gid,
                        uint8_t *out);

/* Conversions between the public description and the wire. */
void rkv_tensor_to_wire(const struct rkv_tensor_meta *m, const struct rkv_tensor_desc *d,
                        struct rkv_wire_tensor *w);
int rkv_tensor_from_wire(const struct rkv_wire_tensor *w, const uint32_t *book, uint32_t machines,
                         uint32_t id, struct rkv_tensor *t, char *err, size_t err_len);
void rkv_tensor_free(struct rkv_tensor *t);

/* The configuration both roles derive from struct rkv_config. */
uint32_t rkv_cfg_n_servers(const struct rkv_config *cfg);
uint32_t rkv_cfg_server_id(const struct rkv_config *cfg, uint32_t machine, uint32_t local);
void rkv_cfg_engine(const struct rkv_config *cfg, uint32_t node_id, struct rkv_engine_cfg *ec);
int rkv_cfg_check(const struct rkv_config *cfg, char *err, size_t err_len);
/* Identifies a cluster (machines, ports, servers, workers, shm prefix): a
 * client that reached a server of another cluster is told so at HELLO. */
uint64_t rkv_cfg_fingerprint(const struct rkv_config *cfg);
/* The POSIX port and the configured NIC of one node (process). */
int rkv_node_open(const struct rkv_config *cfg, const char *node, uint64_t seed,
                  struct rkv_port **port_p, struct rkv_nic **nic_p, char *err, size_t err_len);
void rkv_node_close(struct rkv_port *port, struct rkv_nic *nic);

#endif
