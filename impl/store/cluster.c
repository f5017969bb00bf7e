/* The machine table's derived forms, built once per node or per process,
 * and the id map of per-peer state. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "store/cluster.h"
#include "store/store_int.h"
#include "util/util.h"

int rkv_cluster_create(const struct rkv_config *cfg, int copy, struct rkv_cluster **cl_p, char *err,
                       size_t err_len)
{
    /* Nodes whose config shares this table do not check it again. */
    int rc = rkv_cfg_check_machines(cfg, err, err_len);
    if (rc < 0)
        return rc;
    struct rkv_cluster *cl = calloc(1, sizeof(*cl));
    if (!cl)
        return rkv_errf(err, err_len, -RKV_ENOMEM, "out of memory");
    uint32_t M = cfg->n_machines;
    cl->n_machines = M;
    cl->machines = cfg->machines;
    if (copy) {
        cl->own_machines = malloc((size_t)M * sizeof(*cl->own_machines));
        if (!cl->own_machines)
            goto nomem;
        memcpy(cl->own_machines, cfg->machines, (size_t)M * sizeof(*cl->own_machines));
        cl->machines = cl->own_machines;
    }
    for (uint32_t m = 0; m < M; m++)
        cl->dynamic |= !cfg->machines[m].host[0];
    cl->uniform = M ? cfg->machines[0].servers : 0;
    for (uint32_t m = 1; m < M && cl->uniform; m++)
        if (cfg->machines[m].servers != cl->uniform)
            cl->uniform = 0;
    if (!cl->uniform) {
        cl->first = malloc(((size_t)M + 1) * sizeof(*cl->first));
        if (!cl->first)
            goto nomem;
        cl->first[0] = 0;
        for (uint32_t m = 0; m < M; m++)
            cl->first[m + 1] = cl->first[m] + cfg->machines[m].servers;
        cl->n_servers = cl->first[M];
    } else {
        cl->n_servers = M * cl->uniform; /* rkv_cfg_check bounds it by RKV_MAX_SERVERS */
    }
    assert(cl->n_servers == rkv_cfg_n_servers(cfg));
    cl->fp = rkv_cfg_fingerprint(cfg);
    cl->n_workers = cfg->n_workers;
    cl->durable = cfg->durable_dir[0] != 0;
    memcpy(cl->shm_prefix, cfg->shm_prefix, sizeof(cl->shm_prefix));
    *cl_p = cl;
    return 0;
nomem:
    rkv_cluster_destroy(cl);
    return rkv_errf(err, err_len, -RKV_ENOMEM, "out of memory for a %u-machine table", M);
}

void rkv_cluster_destroy(struct rkv_cluster *cl)
{
    if (!cl)
        return;
    free(cl->own_machines);
    free(cl->first);
    free(cl);
}

int rkv_cluster_of(const struct rkv_config *cfg, const struct rkv_cluster **cl_p,
                   struct rkv_cluster **own_p, char *err, size_t err_len)
{
    *own_p = NULL;
    const struct rkv_cluster *sh = cfg->shared;
    if (sh) {
        if (sh->machines != cfg->machines || sh->n_machines != cfg->n_machines)
            return rkv_errf(err, err_len, -RKV_ECONFIG,
                            "config: the shared cluster table describes another machine table "
                            "(%u machines)",
                            sh->n_machines);
        *cl_p = sh;
        return 0;
    }
    int rc = rkv_cluster_create(cfg, 1, own_p, err, err_len);
    if (rc == 0)
        *cl_p = *own_p;
    return rc;
}

uint64_t rkv_cluster_fingerprint(const struct rkv_cluster *cl, const struct rkv_config *cfg)
{
    if (cl->n_workers == cfg->n_workers && cl->durable == (cfg->durable_dir[0] != 0) &&
        memcmp(cl->shm_prefix, cfg->shm_prefix, sizeof(cl->shm_prefix)) == 0)
        return cl->fp;
    return rkv_cfg_fingerprint(cfg);
}

uint32_t rkv_cluster_machine_of(const struct rkv_cluster *cl, uint32_t id)
{
    assert(id < cl->n_servers);
    if (!cl->first)
        return id / cl->uniform;
    /* The last machine whose first server is <= id (machines with no
     * servers share their successor's first, and are skipped). */
    uint32_t lo = 0, hi = cl->n_machines; /* first[lo] <= id < first[hi] */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (cl->first[mid] <= id)
            lo = mid;
        else
            hi = mid;
    }
    assert(cl->first[lo] <= id && id < cl->first[lo + 1]);
    return lo;
}

/* ---- the id map ---- */

static uint32_t idmap_slot(uint32_t key, uint32_t cap)
{
    return (uint32_t)(rkv_mix64(key) & (cap - 1));
}

uint64_t *rkv_idmap_find(const struct rkv_idmap *m, uint32_t key)
{
    if (!m->cap)
        return NULL;
    for (uint32_t i = idmap_slot(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == 0)
            return NULL;
        if (m->keys[i] == key + 1)
            return &m->vals[i];
    }
}

static int idmap_grow(struct rkv_idmap *m)
{
    uint32_t cap = m->cap ? m->cap * 2 : 8;
    uint32_t *keys = calloc(cap, sizeof(*keys));
    uint64_t *vals = calloc(cap, sizeof(*vals));
    if (!keys || !vals || cap < m->cap) {
        free(keys);
        free(vals);
        return -RKV_ENOMEM;
    }
    for (uint32_t j = 0; j < m->cap; j++) {
        if (!m->keys[j])
            continue;
        uint32_t i = idmap_slot(m->keys[j] - 1, cap);
        while (keys[i])
            i = (i + 1) & (cap - 1);
        keys[i] = m->keys[j];
        vals[i] = m->vals[j];
    }
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
    return 0;
}

uint64_t *rkv_idmap_get(struct rkv_idmap *m, uint32_t key)
{
    assert(key != UINT32_MAX);
    uint64_t *v = rkv_idmap_find(m, key);
    if (v)
        return v;
    if (2 * (m->n + 1) > m->cap && idmap_grow(m) < 0)
        return NULL;
    uint32_t i = idmap_slot(key, m->cap);
    while (m->keys[i])
        i = (i + 1) & (m->cap - 1);
    m->keys[i] = key + 1;
    m->vals[i] = 0;
    m->n++;
    return &m->vals[i];
}

void rkv_idmap_free(struct rkv_idmap *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof(*m));
}

/* ---- the pointer map ---- */

static uint32_t ptrmap_slot(uint64_t key, uint32_t cap)
{
    return (uint32_t)(rkv_mix64(key) & (cap - 1));
}

void *rkv_ptrmap_find(const struct rkv_ptrmap *m, uint64_t key)
{
    if (!m->cap)
        return NULL;
    for (uint32_t i = ptrmap_slot(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (!m->vals[i])
            return NULL;
        if (m->keys[i] == key)
            return m->vals[i];
    }
}

/* Places key -> v in a table of cap slots known to have room and no key. */
static void ptrmap_place(uint64_t *keys, void **vals, uint32_t cap, uint64_t key, void *v)
{
    uint32_t i = ptrmap_slot(key, cap);
    while (vals[i])
        i = (i + 1) & (cap - 1);
    keys[i] = key;
    vals[i] = v;
}

int rkv_ptrmap_put(struct rkv_ptrmap *m, uint64_t key, void *v)
{
    assert(v);
    for (uint32_t i = m->cap ? ptrmap_slot(key, m->cap) : 0; m->cap && m->vals[i];
         i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == key) {
            m->vals[i] = v;
            return 0;
        }
    }
    if (4 * (uint64_t)(m->n + 1) > 3 * (uint64_t)m->cap) {
        uint32_t cap = m->cap ? m->cap * 2 : 8;
        uint64_t *keys = calloc(cap, sizeof(*keys));
        void **vals = calloc(cap, sizeof(*vals));
        if (!keys || !vals || cap < m->cap) {
            free(keys);
            free(vals);
            return -RKV_ENOMEM;
        }
        for (uint32_t j = 0; j < m->cap; j++)
            if (m->vals[j])
                ptrmap_place(keys, vals, cap, m->keys[j], m->vals[j]);
        free(m->keys);
        free(m->vals);
        m->keys = keys;
        m->vals = vals;
        m->cap = cap;
    }
    ptrmap_place(m->keys, m->vals, m->cap, key, v);
    m->n++;
    return 0;
}

void rkv_ptrmap_del(struct rkv_ptrmap *m, uint64_t key, const void *v)
{
    if (!m->cap)
        return;
    uint32_t mask = m->cap - 1, i = ptrmap_slot(key, m->cap);
    while (m->vals[i] && m->keys[i] != key)
        i = (i + 1) & mask;
    if (m->vals[i] != v || !v)
        return;
    /* Backward shift: each later entry of the run moves into the hole if
     * its home slot does not lie in (hole, its slot]. */
    for (uint32_t j = (i + 1) & mask; m->vals[j]; j = (j + 1) & mask) {
        uint32_t home = ptrmap_slot(m->keys[j], m->cap);
        if (((j - home) & mask) >= ((j - i) & mask)) {
            m->keys[i] = m->keys[j];
            m->vals[i] = m->vals[j];
            i = j;
        }
    }
    m->vals[i] = NULL;
    m->n--;
}

void rkv_ptrmap_free(struct rkv_ptrmap *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof(*m));
}
