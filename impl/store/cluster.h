/* What every node of a cluster derives from the config's machine table,
 * and a small id map for per-peer state made on first use.
 *
 * A node needs, from the machine table, a server's id from (machine, local
 * index), a server's machine from its id, and the cluster's fingerprint
 * (HELLO). Each is O(machines) computed from the table alone, so a node
 * keeps them, built once: struct rkv_cluster. A process that holds many
 * nodes of one cluster (the twin) builds it once for all of them and hands
 * it over in rkv_config.shared; every other node builds its own copy. */
#ifndef RKV_CLUSTER_H
#define RKV_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "rkv.h"

struct rkv_cluster {
    uint32_t n_machines;
    uint32_t n_servers;
    const struct rkv_machine *machines; /* n_machines: own_machines, or the caller's */
    struct rkv_machine *own_machines;   /* a copy when not shared (NULL otherwise) */
    /* first[m]: id of machine m's server 0; first[n_machines] = n_servers.
     * NULL when every machine has `uniform` servers (then m * uniform). */
    uint32_t *first;
    uint32_t uniform;
    int dynamic; /* some machine's host is empty: its servers register with server 0 */
    /* rkv_cfg_fingerprint of the config it was built from, and the fields
     * besides machines[] that the fingerprint covers, to tell whether a
     * node's config is that one. */
    uint64_t fp;
    uint32_t n_workers;
    int durable;
    char shm_prefix[32];
};

/* Builds it from cfg (checked by rkv_cfg_check first). copy: take a copy of
 * cfg->machines (a node's own), else refer to it (the caller keeps it). */
int rkv_cluster_create(const struct rkv_config *cfg, int copy, struct rkv_cluster **cl_p, char *err,
                       size_t err_len);
void rkv_cluster_destroy(struct rkv_cluster *cl);
/* The node's view: cfg->shared when set (after checking that it describes
 * cfg's machine table: -RKV_ECONFIG otherwise), else a fresh copy that
 * *own_p then holds (to destroy with the node). */
int rkv_cluster_of(const struct rkv_config *cfg, const struct rkv_cluster **cl_p,
                   struct rkv_cluster **own_p, char *err, size_t err_len);
/* The fingerprint of cfg, which must have cl's machine table: the stored
 * one when the other fields match, else computed (O(machines)). */
uint64_t rkv_cluster_fingerprint(const struct rkv_cluster *cl, const struct rkv_config *cfg);
static inline uint32_t rkv_cluster_server_id(const struct rkv_cluster *cl, uint32_t machine,
                                             uint32_t local)
{
    return (cl->first ? cl->first[machine] : machine * cl->uniform) + local;
}
/* Preconditions: id < n_servers. O(log machines). */
uint32_t rkv_cluster_machine_of(const struct rkv_cluster *cl, uint32_t id);

/* u32 key -> u64 value, open addressing, grown by doubling at half full;
 * entries are never removed (what it holds is bounded by the peers a node
 * used). Iteration order is unspecified: callers must not depend on it. */
struct rkv_idmap {
    uint32_t *keys; /* key + 1; 0: empty */
    uint64_t *vals;
    uint32_t cap, n;
};

/* The value's address for key, or NULL when absent. */
uint64_t *rkv_idmap_find(const struct rkv_idmap *m, uint32_t key);
/* The value's address for key, inserted as 0 when absent; NULL when out of
 * memory. The address holds until the next insertion. */
uint64_t *rkv_idmap_get(struct rkv_idmap *m, uint32_t key);
void rkv_idmap_free(struct rkv_idmap *m);

/* u64 key -> pointer, open addressing, grown by doubling past 3/4 full,
 * with removal (backward shift: no tombstones): a client's requests in
 * flight by id. A list searched from its head made each reply and each
 * release walk every request in flight: quadratic for client 0, which
 * sends SHUTDOWN to all 16,384 servers of a 65,536-node cluster. */
struct rkv_ptrmap {
    uint64_t *keys;
    void **vals; /* NULL: an empty slot */
    uint32_t cap, n;
};

/* The pointer for key, NULL when absent. */
void *rkv_ptrmap_find(const struct rkv_ptrmap *m, uint64_t key);
/* Sets key's pointer (v != NULL), replacing any: 0, or -RKV_ENOMEM (the
 * map is unchanged). */
int rkv_ptrmap_put(struct rkv_ptrmap *m, uint64_t key, void *v);
/* Takes key out if its pointer is v (another under the same key stays). */
void rkv_ptrmap_del(struct rkv_ptrmap *m, uint64_t key, const void *v);
void rkv_ptrmap_free(struct rkv_ptrmap *m);

#endif
