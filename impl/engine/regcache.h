/* A registration cache: user memory registered with the NIC, found by
 * address range, so that zero-copy transfers into and out of it skip the
 * registration. Bounded (entries and bytes), evicted least recently used.
 *
 * The rule that keeps it safe: only memory its owner promised to keep
 * mapped goes in (rkv_client_register); calls register other buffers for
 * their own duration and drop the registration before returning. A cache
 * keyed by address alone cannot tell a buffer freed and malloc'ed again at
 * the same address from the old one: with verbs the registration still
 * pins the old pages, and data would land in memory nobody reads.
 *
 * A registration a call took (rkv_regcache_take) outlives its entry: an
 * asynchronous push reads its rows through it until it is waited for, and
 * the entry may be removed (rkv_client_deregister) or evicted (a register
 * past the bounds) meanwhile. Such an entry leaves the cache at once (no
 * later find sees it) but is kept, outside the bounds, until its last
 * taker gives it back (rkv_regcache_put): deregistered there, a push
 * waiting for its rendezvous slot was posted under a freed registration.
 *
 * One task uses a cache at a time (the client's application thread). */
#ifndef RKV_REGCACHE_H
#define RKV_REGCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "nic/nic.h"

struct rkv_regcache_entry {
    uintptr_t addr;
    size_t len;
    struct rkv_mr *mr;
    uint64_t used; /* LRU clock at the last find */
    uint32_t refs; /* calls in flight that took it (rkv_regcache_take) */
};

struct rkv_regcache {
    struct rkv_nic *nic;
    struct rkv_regcache_entry *e; /* max_entries */
    uint32_t n, max_entries;
    uint64_t bytes, max_bytes;
    uint64_t clock;
    uint64_t hits, misses, evictions; /* for tests and reports */
    /* Entries removed or evicted while taken: kept until put back. As many
     * as the calls in flight that took one, so not bounded by the above. */
    struct rkv_regcache_entry *retired;
    uint32_t n_retired, cap_retired;
};

int rkv_regcache_init(struct rkv_regcache *rc, struct rkv_nic *nic, uint32_t max_entries,
                      uint64_t max_bytes);
/* Deregisters everything: before the NIC is closed. */
void rkv_regcache_fini(struct rkv_regcache *rc);
/* Registers addr..addr+len (local and remote write access) and keeps it,
 * evicting least recently used entries beyond the bounds. A range inside
 * one already cached is not registered twice. */
int rkv_regcache_add(struct rkv_regcache *rc, void *addr, size_t len);
/* Deregisters the entries that start at addr (one taken is kept until put
 * back); -RKV_EINVAL when none does, -RKV_ENOMEM (nothing removed) when a
 * taken one cannot be kept. */
int rkv_regcache_remove(struct rkv_regcache *rc, void *addr);
/* The registration covering addr..addr+len, or NULL. */
struct rkv_mr *rkv_regcache_find(struct rkv_regcache *rc, const void *addr, size_t len);
/* The same, held for a call in flight until rkv_regcache_put(mr). */
struct rkv_mr *rkv_regcache_take(struct rkv_regcache *rc, const void *addr, size_t len);
/* Gives back what rkv_regcache_take returned; a registration that left the
 * cache meanwhile is deregistered with its last taker. */
void rkv_regcache_put(struct rkv_regcache *rc, struct rkv_mr *mr);

#endif
