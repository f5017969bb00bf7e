/* The registration cache (see regcache.h). A linear scan: the bound is a
 * few dozen entries, far cheaper than one registration. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "engine/regcache.h"
#include "util/util.h"

int rkv_regcache_init(struct rkv_regcache *rc, struct rkv_nic *nic, uint32_t max_entries,
                      uint64_t max_bytes)
{
    assert(max_entries > 0 && max_bytes > 0);
    memset(rc, 0, sizeof(*rc));
    rc->e = calloc(max_entries, sizeof(*rc->e));
    if (!rc->e)
        return -RKV_ENOMEM;
    rc->nic = nic;
    rc->max_entries = max_entries;
    rc->max_bytes = max_bytes;
    return 0;
}

static void rc_drop(struct rkv_regcache *rc, uint32_t i)
{
    assert(i < rc->n);
    rc->nic->ops->dereg_mr(rc->nic, rc->e[i].mr);
    rc->bytes -= rc->e[i].len;
    rc->e[i] = rc->e[--rc->n];
}

void rkv_regcache_fini(struct rkv_regcache *rc)
{
    while (rc->n > 0)
        rc_drop(rc, rc->n - 1);
    free(rc->e);
    rc->e = NULL;
}

static int rc_covers(const struct rkv_regcache_entry *e, uintptr_t a, size_t len)
{
    return a >= e->addr && a - e->addr <= e->len && e->len - (a - e->addr) >= len;
}

struct rkv_mr *rkv_regcache_find(struct rkv_regcache *rc, const void *addr, size_t len)
{
    uintptr_t a = (uintptr_t)addr;
    for (uint32_t i = 0; i < rc->n; i++) {
        if (rc_covers(&rc->e[i], a, len)) {
            rc->e[i].used = ++rc->clock;
            rc->hits++;
            return rc->e[i].mr;
        }
    }
    rc->misses++;
    return NULL;
}

static void rc_evict_lru(struct rkv_regcache *rc)
{
    uint32_t lru = 0;
    for (uint32_t i = 1; i < rc->n; i++)
        if (rc->e[i].used < rc->e[lru].used)
            lru = i;
    rc_drop(rc, lru);
    rc->evictions++;
}

int rkv_regcache_add(struct rkv_regcache *rc, void *addr, size_t len)
{
    if (!addr || len == 0 || (uintptr_t)addr + len < (uintptr_t)addr)
        return -RKV_EINVAL;
    if (len > rc->max_bytes)
        return -RKV_ELIMIT;
    if (rkv_regcache_find(rc, addr, len))
        return 0;
    while (rc->n > 0 && (rc->n == rc->max_entries || rc->bytes + len > rc->max_bytes))
        rc_evict_lru(rc);
    struct rkv_mr *mr;
    int r = rc->nic->ops->reg_mr(rc->nic, addr, len, RKV_ACCESS_REMOTE_WRITE, &mr);
    if (r < 0)
        return r;
    rc->e[rc->n++] = (struct rkv_regcache_entry){
        .addr = (uintptr_t)addr, .len = len, .mr = mr, .used = ++rc->clock};
    rc->bytes += len;
    assert(rc->n <= rc->max_entries && rc->bytes <= rc->max_bytes);
    return 0;
}

int rkv_regcache_remove(struct rkv_regcache *rc, void *addr)
{
    int found = 0;
    for (uint32_t i = 0; i < rc->n;) {
        if (rc->e[i].addr == (uintptr_t)addr) {
            rc_drop(rc, i);
            found = 1;
        } else {
            i++;
        }
    }
    return found ? 0 : -RKV_EINVAL;
}
