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

/* Room for k more retired entries, so that a drop never fails half way. */
static int rc_reserve_retired(struct rkv_regcache *rc, uint32_t k)
{
    if (k <= rc->cap_retired - rc->n_retired)
        return 0;
    if (k > UINT32_MAX / 2 - rc->n_retired)
        return -RKV_ENOMEM;
    uint32_t cap = rc->cap_retired ? rc->cap_retired : 4;
    while (cap < rc->n_retired + k)
        cap *= 2;
    struct rkv_regcache_entry *r = realloc(rc->retired, (size_t)cap * sizeof(*r));
    if (!r)
        return -RKV_ENOMEM;
    rc->retired = r;
    rc->cap_retired = cap;
    return 0;
}

/* Entry i leaves the cache: deregistered, or, while a call in flight took
 * it, retired until that call puts it back (rc_reserve_retired made room). */
static void rc_drop(struct rkv_regcache *rc, uint32_t i)
{
    assert(i < rc->n);
    if (rc->e[i].refs) {
        assert(rc->n_retired < rc->cap_retired);
        rc->retired[rc->n_retired++] = rc->e[i];
    } else {
        rc->nic->ops->dereg_mr(rc->nic, rc->e[i].mr);
    }
    rc->bytes -= rc->e[i].len;
    rc->e[i] = rc->e[--rc->n];
}

void rkv_regcache_fini(struct rkv_regcache *rc)
{
    while (rc->n > 0) {
        rc->e[rc->n - 1].refs = 0; /* nothing is in flight any more */
        rc_drop(rc, rc->n - 1);
    }
    for (uint32_t i = 0; i < rc->n_retired; i++)
        rc->nic->ops->dereg_mr(rc->nic, rc->retired[i].mr);
    free(rc->retired);
    rc->retired = NULL;
    rc->n_retired = rc->cap_retired = 0;
    free(rc->e);
    rc->e = NULL;
}

static int rc_covers(const struct rkv_regcache_entry *e, uintptr_t a, size_t len)
{
    return a >= e->addr && a - e->addr <= e->len && e->len - (a - e->addr) >= len;
}

static struct rkv_regcache_entry *rc_find(struct rkv_regcache *rc, const void *addr, size_t len)
{
    uintptr_t a = (uintptr_t)addr;
    for (uint32_t i = 0; i < rc->n; i++) {
        if (rc_covers(&rc->e[i], a, len)) {
            rc->e[i].used = ++rc->clock;
            rc->hits++;
            return &rc->e[i];
        }
    }
    rc->misses++;
    return NULL;
}

struct rkv_mr *rkv_regcache_find(struct rkv_regcache *rc, const void *addr, size_t len)
{
    struct rkv_regcache_entry *e = rc_find(rc, addr, len);
    return e ? e->mr : NULL;
}

struct rkv_mr *rkv_regcache_take(struct rkv_regcache *rc, const void *addr, size_t len)
{
    struct rkv_regcache_entry *e = rc_find(rc, addr, len);
    if (!e || e->refs == UINT32_MAX)
        return NULL; /* the call registers its rows for itself */
    e->refs++;
    return e->mr;
}

void rkv_regcache_put(struct rkv_regcache *rc, struct rkv_mr *mr)
{
    for (uint32_t i = 0; i < rc->n; i++) {
        if (rc->e[i].mr == mr) {
            assert(rc->e[i].refs > 0);
            rc->e[i].refs--;
            return;
        }
    }
    for (uint32_t i = 0; i < rc->n_retired; i++) {
        if (rc->retired[i].mr == mr) {
            assert(rc->retired[i].refs > 0);
            if (--rc->retired[i].refs == 0) {
                rc->nic->ops->dereg_mr(rc->nic, mr);
                rc->retired[i] = rc->retired[--rc->n_retired];
            }
            return;
        }
    }
    assert(!"rkv_regcache_put of a registration the cache never gave");
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
    while (rc->n > 0 && (rc->n == rc->max_entries || rc->bytes + len > rc->max_bytes)) {
        if (rc_reserve_retired(rc, 1) < 0)
            return -RKV_ENOMEM;
        rc_evict_lru(rc);
    }
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
    uint32_t taken = 0;
    for (uint32_t i = 0; i < rc->n; i++)
        taken += rc->e[i].addr == (uintptr_t)addr && rc->e[i].refs;
    if (rc_reserve_retired(rc, taken) < 0)
        return -RKV_ENOMEM;
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
