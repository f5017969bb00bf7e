/* The per-machine shard: one shared-memory segment per tensor, holding that
 * machine's rows (and optimizer state), read and written by every server and
 * co-located client of the machine under striped row locks. */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "store/store_int.h"
#include "util/util.h"

/* Bounded spinning before yielding: critical sections are one row copy. */
#define SHARD_SPINS 64
/* Yields between two looks at a lock holder's liveness. */
#define SHARD_LIVE_CHECK_YIELDS 256u
/* How long a wait without a deadline goes before it is said. */
#define SHARD_WAIT_NOTE_NS 10000000000ull

/* The magic with the header's size folded into its free top byte, as the
 * machine segment's: a process of a build whose header is laid out
 * otherwise (the lock holders added 32 KiB before the rows) would read
 * and write rows at the other build's offsets, and is refused instead. */
uint64_t rkv_shard_magic(void)
{
    uint64_t size = sizeof(struct rkv_shard_hdr);
    return RKV_SHARD_MAGIC | ((size ^ size >> 8 ^ size >> 16) & 0xff) << 56;
}

void rkv_shard_name(char *buf, size_t len, const char *prefix, uint32_t machine, uint32_t tensor)
{
    snprintf(buf, len, "/%s-m%u-t%u", prefix, machine, tensor);
}

uint64_t rkv_shard_book_len(const struct rkv_tensor_meta *m)
{
    return m->policy == RKV_PART_EXPLICIT ? m->rows : 0;
}

int rkv_shard_map(struct rkv_port *port, const char *name, uint64_t local_rows, size_t row_bytes,
                  int with_state, uint64_t book_len, int create, struct rkv_shard *sh, char *err,
                  size_t err_len)
{
    return rkv_shard_map_local(port, name, local_rows, row_bytes, with_state, book_len, 0, create,
                               sh, err, err_len);
}

int rkv_shard_map_local(struct rkv_port *port, const char *name, uint64_t local_rows,
                        size_t row_bytes, int with_state, uint64_t book_len, int has_local,
                        int create, struct rkv_shard *sh, char *err, size_t err_len)
{
    uint64_t data_bytes, book_bytes, local_bytes = 0, total;
    uint64_t journal_bytes = (uint64_t)row_bytes * (with_state ? 2 : 1);
    if (!rkv_mul_ok(local_rows, row_bytes, &data_bytes) ||
        !rkv_mul_ok(data_bytes, with_state ? 2 : 1, &total) ||
        !rkv_add_ok(total, journal_bytes, &total) ||
        !rkv_mul_ok(book_len, sizeof(uint32_t), &book_bytes) ||
        !rkv_add_ok(total, book_bytes, &total) ||
        !rkv_add_ok(total, sizeof(struct rkv_shard_hdr), &total) ||
        (has_local && !rkv_mul_ok(book_len, sizeof(uint64_t), &local_bytes)) ||
        !rkv_add_ok(total, has_local ? 7 : 0, &total))
        return rkv_errf(err, err_len, -RKV_ELIMIT, "shard %s: size overflows", name);
    /* The local index sits 8-aligned after the book (from the segment's
     * start, which the mapping aligns to a page). */
    uint64_t local_off = total & ~7ull;
    if (has_local && !rkv_add_ok(local_off, local_bytes, &total))
        return rkv_errf(err, err_len, -RKV_ELIMIT, "shard %s: size overflows", name);
    /* After the rows and state, before the book: where it is does not
     * depend on a local index, which some mappers of the shard do not ask
     * for. */
    uint64_t journal_off = sizeof(struct rkv_shard_hdr) + data_bytes * (with_state ? 2 : 1);
    /* Asked before the segment is made, so that the caller learns why
     * (shm_map says it only in this node's log). */
    char why[256];
    if (create && port->ops->shm_room && port->ops->shm_room(port, total, why, sizeof(why)) < 0)
        return rkv_errf(err, err_len, -RKV_ENOMEM, "shard %s: %s", name, why);
    void *addr;
    int rc = port->ops->shm_map(port, name, total, create, &addr);
    if (rc < 0)
        return rkv_errf(err, err_len, rc, "shard %s: cannot map %llu bytes (%s); check /dev/shm",
                        name, (unsigned long long)total, rkv_strerror(rc));
    struct rkv_shard_hdr *h = addr;
    uint64_t ns = port->ops->proc_ns ? port->ops->proc_ns(port) : 0;
    if (create) {
        h->pidns = ns;
        h->local_rows = local_rows;
        h->row_bytes = row_bytes;
        h->with_state = !!with_state;
        h->journal_off = journal_off;
        atomic_thread_fence(memory_order_release);
        h->magic = rkv_shard_magic();
    } else if ((h->magic & ~(0xffull << 56)) == RKV_SHARD_MAGIC && h->magic != rkv_shard_magic()) {
        port->ops->shm_unmap(port, addr, total);
        return rkv_errf(err, err_len, -RKV_EEXIST,
                        "shard %s was made by another build of rkv (its header is laid out "
                        "otherwise): run one build on a machine",
                        name);
    } else if (h->magic != rkv_shard_magic() || h->local_rows != local_rows ||
               h->row_bytes != row_bytes || h->with_state != (uint64_t) !!with_state ||
               h->journal_off != journal_off) {
        port->ops->shm_unmap(port, addr, total);
        return rkv_errf(err, err_len, -RKV_EEXIST,
                        "shard %s exists with another shape (stale segment from an earlier run? "
                        "remove it from /dev/shm)",
                        name);
    }
    *sh = (struct rkv_shard){.port = port,
                             .hdr = h,
                             .map_bytes = total,
                             .data = (uint8_t *)(h + 1),
                             .local_rows = local_rows,
                             .row_bytes = row_bytes,
                             .book_len = book_len};
    sh->track = ns != 0 && h->pidns == ns && port->ops->proc_self && port->ops->proc_alive;
    sh->state = with_state ? sh->data + data_bytes : NULL;
    if (book_len)
        sh->book =
            (uint32_t *)(void *)(sh->data + data_bytes * (with_state ? 2 : 1) + journal_bytes);
    if (has_local && book_len)
        sh->local = (uint64_t *)(void *)((uint8_t *)addr + local_off);
    sh->journal = (uint8_t *)addr + journal_off;
    return 0;
}

void rkv_shard_unmap(struct rkv_shard *sh)
{
    if (sh->hdr)
        sh->port->ops->shm_unmap(sh->port, sh->hdr, sh->map_bytes);
    memset(sh, 0, sizeof(*sh));
}

void rkv_shard_retire(struct rkv_port *port, const char *name)
{
    void *addr;
    /* The header alone: the shape does not matter, only that it is a
     * shard (a foreign or torn segment of this name is just removed). */
    if (port->ops->shm_map(port, name, sizeof(struct rkv_shard_hdr), 0, &addr) == 0) {
        struct rkv_shard_hdr *h = addr;
        unsigned was = 0;
        if ((h->magic & ~(0xffull << 56)) == RKV_SHARD_MAGIC) /* any build's */
            atomic_compare_exchange_strong(&h->closed, &was, RKV_SHARD_MOVED);
        port->ops->shm_unmap(port, addr, sizeof(struct rkv_shard_hdr));
    }
    port->ops->shm_unlink(port, name);
}

static uint32_t shard_lock_index(uint64_t local_row)
{
    return (uint32_t)(rkv_mix64(local_row) % RKV_SHARD_LOCKS);
}

/* Takes word i over from a holder that died holding it. The CAS on the
 * holder lets one waiter win, and a holder is recorded only while it
 * holds the word (set after taking it, cleared before letting it go), so
 * a dead process recorded there is one that never let it go. The word is
 * then taken by a CAS from what it held when the holder was read: a
 * restarted server's reclaim (rkv_shard_reclaim) may have freed it
 * meanwhile for another to take, which an exchange would have shared.
 * Returns 1 when this task now holds the word. */
static int shard_take_over(struct rkv_shard *sh, uint32_t i, unsigned tag, uint64_t self)
{
    const struct rkv_port_ops *o = sh->port->ops;
    _Atomic uint64_t *holder = &sh->hdr->holders[i];
    atomic_uint *w = &sh->hdr->locks[i];
    unsigned was = atomic_load(w);
    uint64_t dead = atomic_load(holder);
    if (was == 0 || dead == 0 || dead == self || o->proc_alive(sh->port, dead))
        return 0;
    if (!atomic_compare_exchange_strong(holder, &dead, self))
        return 0;
    if (!atomic_compare_exchange_strong_explicit(w, &was, tag, memory_order_acquire,
                                                 memory_order_relaxed)) {
        uint64_t mine = self; /* not ours after all: the record goes unless another's */
        atomic_compare_exchange_strong(holder, &mine, 0);
        return 0;
    }
    RKV_LOGW(sh->port,
             "shard: took a row lock (tag %u) over from process %llu, which died holding it: "
             "the rows under it may hold part of that process's push",
             was, (unsigned long long)RKV_PORT_PROC_PID(dead));
    return 1;
}

/* Whether sh's own holds are recorded: a co-located client's (or an
 * untagged holder's). A server's are not: its death is its restart's to
 * clean up (rkv_shard_reclaim by its tag), and servers take most row
 * locks: recording theirs wrote a holder page per shard that the twin's
 * 65,536 nodes paid 417 MiB for. Any waiter may take a dead client's. */
static int shard_records(const struct rkv_shard *sh)
{
    return sh->track && (sh->owner == 0 || sh->owner >= RKV_CLIENT_NODE_BASE);
}

/* A wait without a deadline (a server's) for a holder that lives and does
 * not let go: said once, after SHARD_WAIT_NOTE_NS, naming the holder, so
 * that a server that answers nobody meanwhile says why. */
static void shard_wait_note(struct rkv_shard *sh, uint32_t i, uint64_t *since, int *said)
{
    uint64_t now = sh->port->ops->now_ns(sh->port);
    if (!*since)
        *since = now;
    if (*said || now - *since < SHARD_WAIT_NOTE_NS)
        return;
    *said = 1;
    unsigned tag = atomic_load(&sh->hdr->locks[i]);
    uint64_t proc = atomic_load(&sh->hdr->holders[i]);
    RKV_LOGW(sh->port,
             "shard: waiting %llu s for a row lock (tag %u, process %llu%s) that its live holder "
             "does not let go: stopped (SIGSTOP, a debugger, a frozen cgroup) or stuck; this "
             "server applies nothing else meanwhile",
             (unsigned long long)((now - *since) / 1000000000ull), tag,
             (unsigned long long)RKV_PORT_PROC_PID(proc), proc ? "" : ": not recorded");
}

/* Takes row lock i, or (over != 0) takes it from tag `over` as well: the
 * finisher of a dead server's push takes over the word that server held
 * on the row it died in, so that no reader sees that row between. With a
 * deadline (port now_ns; 0: none), -RKV_ETIMEDOUT once it passed: a live
 * holder that does not let go (a co-located worker under SIGSTOP or a
 * debugger) held a co-located worker's push for as long as it was stopped
 * (an outside tester: 29 s with timeout_ms 3000). A dead one is still
 * taken over first. */
static int shard_lock_as(struct rkv_shard *sh, uint32_t i, unsigned over, uint64_t deadline_ns)
{
    atomic_uint *w = &sh->hdr->locks[i];
    unsigned tag = sh->owner ? sh->owner : ~0u;
    uint64_t self = shard_records(sh) ? sh->port->ops->proc_self(sh->port) : 0;
    uint64_t since = 0;
    int said = 0;
    for (unsigned spins = 0, yields = 0;; spins++) {
        unsigned expect = 0;
        if (atomic_compare_exchange_weak_explicit(w, &expect, tag, memory_order_acquire,
                                                  memory_order_relaxed) ||
            (over && expect == over &&
             atomic_compare_exchange_strong_explicit(w, &expect, tag, memory_order_acquire,
                                                     memory_order_relaxed))) {
            if (self)
                atomic_store_explicit(&sh->hdr->holders[i], self, memory_order_relaxed);
            return 0;
        }
        if (spins >= SHARD_SPINS) {
            sh->port->ops->yield(sh->port);
            spins = 0;
            int late = deadline_ns && sh->port->ops->now_ns(sh->port) >= deadline_ns;
            if (++yields % SHARD_LIVE_CHECK_YIELDS && !late)
                continue;
            /* A look at the holder reads /proc: rarely, and only once the
             * holder has had far longer than a row's copy. A server records
             * no holder (shard_records): whether a sibling server holding
             * the word died is the server's to say (holder_dead), which
             * frees that server's words once it is safe to. */
            unsigned was = atomic_load_explicit(w, memory_order_relaxed);
            if (sh->holder_dead && was && was != tag && was < RKV_CLIENT_NODE_BASE &&
                sh->holder_dead(sh->holder_arg, sh, was) > 0)
                continue;
            /* A server takes a word over under its own process, then holds
             * it unrecorded as it holds any other. */
            if (sh->track &&
                shard_take_over(sh, i, tag, self ? self : sh->port->ops->proc_self(sh->port))) {
                if (!self)
                    atomic_store_explicit(&sh->hdr->holders[i], 0, memory_order_relaxed);
                return 0;
            }
            if (late)
                return -RKV_ETIMEDOUT;
            if (!deadline_ns)
                shard_wait_note(sh, i, &since, &said);
        }
    }
}

void rkv_shard_lock(struct rkv_shard *sh, uint64_t local_row)
{
    int rc = shard_lock_as(sh, shard_lock_index(local_row), 0, 0);
    assert(rc == 0); /* no deadline */
    (void)rc;
}

int rkv_shard_lock_until(struct rkv_shard *sh, uint64_t local_row, uint64_t deadline_ns)
{
    return shard_lock_as(sh, shard_lock_index(local_row), 0, deadline_ns);
}

void rkv_shard_lock_over(struct rkv_shard *sh, uint64_t local_row, unsigned over)
{
    int rc = shard_lock_as(sh, shard_lock_index(local_row), over, 0);
    assert(rc == 0);
    (void)rc;
}

uint64_t rkv_shard_holder(const struct rkv_shard *sh, uint64_t local_row, unsigned *tag)
{
    uint32_t i = shard_lock_index(local_row);
    *tag = atomic_load(&sh->hdr->locks[i]);
    return atomic_load(&sh->hdr->holders[i]);
}

int rkv_shard_rows_free(struct rkv_shard *sh, const struct rkv_tensor *t, const uint64_t *gids,
                        size_t n, uint32_t timeout_ms, uint32_t machine, const char *what,
                        char *err, size_t err_len)
{
    uint32_t wait_ms = timeout_ms / 2; /* the refusal reaches its client before it gives up */
    if (!wait_ms)
        return 0;
    uint64_t deadline = sh->port->ops->now_ns(sh->port) + (uint64_t)wait_ms * 1000000ull;
    for (size_t i = 0; i < n; i++) {
        uint64_t l = rkv_pbook_g2l(&t->pb, gids[i]);
        assert(l < sh->local_rows);
        uint32_t k = shard_lock_index(l);
        /* A free word is only read: the common case costs a load of the
         * line the request takes next anyway. */
        if (atomic_load_explicit(&sh->hdr->locks[k], memory_order_relaxed) == 0)
            continue;
        if (shard_lock_as(sh, k, 0, deadline) < 0) {
            char who[128];
            rkv_shard_holder_name(sh, l, who, sizeof(who));
            return rkv_errf(err, err_len, -RKV_ETIMEDOUT,
                            "tensor '%s': row %llu is locked in machine %u's shared memory by "
                            "%s, which has not let it go within %u ms (half of timeout_ms): "
                            "stopped (SIGSTOP, a debugger, a frozen cgroup) or stuck; nothing of "
                            "this %s was %s",
                            t->meta.name, (unsigned long long)gids[i], machine, who, wait_ms, what,
                            strcmp(what, "push") ? "read" : "applied");
        }
        rkv_shard_unlock(sh, l);
    }
    return 0;
}

void rkv_shard_holder_name(const struct rkv_shard *sh, uint64_t local_row, char *buf, size_t len)
{
    unsigned tag;
    uint64_t proc = rkv_shard_holder(sh, local_row, &tag);
    char pid[48] = "";
    if (proc)
        snprintf(pid, sizeof(pid), " (process %llu)", (unsigned long long)RKV_PORT_PROC_PID(proc));
    if (tag >= RKV_CLIENT_NODE_BASE && tag != ~0u)
        snprintf(buf, len, "worker %u%s", tag - RKV_CLIENT_NODE_BASE, pid);
    else if (tag > 0 && tag != ~0u)
        snprintf(buf, len, "the machine's server of local id %u%s", tag - 1, pid);
    else
        snprintf(buf, len, "another process%s", pid);
}

void rkv_shard_unlock(struct rkv_shard *sh, uint64_t local_row)
{
    uint32_t i = shard_lock_index(local_row);
    /* Before the word: a holder recorded is one that holds it. A server
     * records nothing (not even after a take-over), so its unlock touches
     * no holder's line. */
    if (shard_records(sh))
        atomic_store_explicit(&sh->hdr->holders[i], 0, memory_order_relaxed);
    atomic_store_explicit(&sh->hdr->locks[i], 0, memory_order_release);
}

uint32_t rkv_shard_reclaim(struct rkv_shard *sh)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < RKV_SHARD_LOCKS && sh->owner; i++) {
        unsigned expect = sh->owner;
        if (atomic_load(&sh->hdr->locks[i]) != expect)
            continue;
        /* Through its recorded holder, when there is one: a live one (a
         * waiter that took the word over, or a new incarnation under the
         * same tag) keeps it, and a dead one's record goes by CAS, so that
         * a waiter taking it over at the same time and this cannot both
         * let it go. */
        uint64_t h = sh->track ? atomic_load(&sh->hdr->holders[i]) : 0;
        if (h && (sh->port->ops->proc_alive(sh->port, h) ||
                  !atomic_compare_exchange_strong(&sh->hdr->holders[i], &h, 0)))
            continue;
        n += atomic_compare_exchange_strong(&sh->hdr->locks[i], &expect, 0);
    }
    return n;
}

/* Deterministic per (seed, row, element), independent of partitioning. */
static double shard_uniform(uint64_t seed, uint64_t gid, uint32_t j)
{
    uint64_t x = rkv_mix64(seed ^ rkv_mix64(gid * 0x9e3779b97f4a7c15ull + j));
    return (double)(x >> 11) * 0x1.0p-53 * 2.0 - 1.0;
}

static void shard_fill_row(uint8_t *row, const struct rkv_tensor *t, uint64_t gid)
{
    const struct rkv_tensor_meta *m = &t->meta;
    for (uint32_t j = 0; j < m->row_len; j++) {
        double v = shard_uniform(t->init_seed, gid, j);
        switch (m->dtype) {
        case RKV_F32:
            ((float *)row)[j] = (float)v;
            break;
        case RKV_F64:
            ((double *)row)[j] = v;
            break;
        case RKV_I32:
            ((int32_t *)row)[j] = (int32_t)floor(v * 1000.0);
            break;
        case RKV_I64:
            ((int64_t *)row)[j] = (int64_t)floor(v * 1000.0);
            break;
        }
    }
}

void rkv_shard_init_values(struct rkv_shard *sh, const struct rkv_tensor *t, uint32_t machine)
{
    if (t->init != RKV_INIT_UNIFORM)
        return; /* the segment was zero-filled at creation */
    for (uint64_t g = 0; g < t->meta.rows; g++) {
        if (rkv_pbook_machine(&t->pb, g) != machine)
            continue;
        uint64_t l = rkv_pbook_g2l(&t->pb, g);
        assert(l < sh->local_rows);
        shard_fill_row(sh->data + l * sh->row_bytes, t, g);
    }
}

int rkv_tensor_check_ids(const struct rkv_tensor *t, uint32_t machine, const uint64_t *ids,
                         size_t n, char *err, size_t err_len)
{
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= t->meta.rows)
            return rkv_errf(err, err_len, -RKV_ERANGE,
                            "tensor '%s': row id %llu out of range (rows %llu)", t->meta.name,
                            (unsigned long long)ids[i], (unsigned long long)t->meta.rows);
        uint32_t m = rkv_pbook_machine(&t->pb, ids[i]);
        if (m != machine)
            return rkv_errf(err, err_len, -RKV_ERANGE,
                            "tensor '%s': row %llu belongs to machine %u, not %u", t->meta.name,
                            (unsigned long long)ids[i], m, machine);
    }
    return 0;
}

int rkv_shard_push(struct rkv_shard *sh, const struct rkv_tensor *t,
                   const struct rkv_handler_table *ht, int op, double param, const uint64_t *ids,
                   size_t n, const uint8_t *rows)
{
    int rc = rkv_handler_check(ht, op, t->meta.dtype, sh->state != NULL);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < n; i++)
        rkv_shard_push_row(sh, t, ht, op, param, ids[i], rows + i * sh->row_bytes);
    return 0;
}

int rkv_shard_push_row_until(struct rkv_shard *sh, const struct rkv_tensor *t,
                             const struct rkv_handler_table *ht, int op, double param, uint64_t gid,
                             const uint8_t *in, uint64_t deadline_ns)
{
    uint64_t l = rkv_pbook_g2l(&t->pb, gid);
    assert(l < sh->local_rows);
    uint8_t *row = sh->data + l * sh->row_bytes;
    uint8_t *state = sh->state ? sh->state + l * sh->row_bytes : NULL;
    int rc = rkv_shard_lock_until(sh, l, deadline_ns);
    if (rc < 0)
        return rc;
    rkv_handler_run(ht, op, t->meta.dtype, row, state, in, t->meta.row_len, param);
    rkv_shard_unlock(sh, l);
    return 0;
}

void rkv_shard_push_row(struct rkv_shard *sh, const struct rkv_tensor *t,
                        const struct rkv_handler_table *ht, int op, double param, uint64_t gid,
                        const uint8_t *in)
{
    int rc = rkv_shard_push_row_until(sh, t, ht, op, param, gid, in, 0);
    assert(rc == 0); /* no deadline */
    (void)rc;
}

void rkv_shard_pull_row(struct rkv_shard *sh, const struct rkv_tensor *t, uint64_t gid,
                        uint8_t *out)
{
    uint64_t l = rkv_pbook_g2l(&t->pb, gid);
    assert(l < sh->local_rows);
    rkv_shard_lock(sh, l);
    memcpy(out, sh->data + l * sh->row_bytes, sh->row_bytes);
    rkv_shard_unlock(sh, l);
}
