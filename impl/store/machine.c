/* The machine segment: the tensor table, per-client push sequences and the
 * snapshot locks that every server of one machine shares (store_int.h).
 *
 * Locks are words in the segment, not pthread or port mutexes: they must
 * work between processes (servers of a machine are processes) and between
 * the actors of one process (the twin), where a blocking OS lock held across
 * a simulated wait would stall every node. */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "store/store_int.h"
#include "util/util.h"

/* Tries before yielding, and yields before sleeping: row-sized critical
 * sections end within a few spins; a snapshot's lock is held across an
 * fsync (milliseconds), which is worth a sleep rather than a busy core. */
#define MACH_SPINS 64
#define MACH_YIELDS 256
#define MACH_SLEEP_NS 50000ull

void rkv_mach_name(char *buf, size_t len, const char *prefix, uint32_t machine)
{
    snprintf(buf, len, "/%s-m%u-meta", prefix, machine);
}

void rkv_mach_each_segment(const char *prefix, uint32_t machine, uint32_t n_tensors,
                           void (*fn)(void *user, const char *name), void *user)
{
    char name[128];
    rkv_mach_name(name, sizeof(name), prefix, machine);
    fn(user, name);
    for (uint32_t t = 1; t <= n_tensors; t++) {
        rkv_shard_name(name, sizeof(name), prefix, machine, t);
        fn(user, name);
    }
}

static size_t mach_bytes(uint32_t n_clients)
{
    return sizeof(struct rkv_mach_hdr) + (size_t)n_clients * sizeof(struct rkv_mach_client);
}

void rkv_mach_unlink(struct rkv_port *port, const char *prefix, uint32_t machine)
{
    char name[96];
    rkv_mach_name(name, sizeof(name), prefix, machine);
    port->ops->shm_unlink(port, name);
}

/* The segment's magic names its header's layout too (bits 48..63: the
 * header's size and RKV_MACH_LAYOUT, folded), so that a server of another
 * build, whose fields sit elsewhere or mean another thing, refuses the
 * segment instead of reading it wrong: a machine's servers restarted one by
 * one across an upgrade would share it otherwise. */
static uint64_t mach_magic(void)
{
    uint64_t v = sizeof(struct rkv_mach_hdr) + ((uint64_t)RKV_MACH_LAYOUT << 32);
    v ^= v >> 32;
    return RKV_MACH_MAGIC | ((v ^ v >> 16) & 0xffff) << 48;
}

/* A process that still runs and serves the existing segment `name` of
 * this build (*local: that server's local id), or 0: none (no such
 * segment, or all of its servers stopped or ended). */
static uint64_t mach_live_server(struct rkv_port *port, const char *name, uint32_t *local)
{
    *local = 0;
    if (!port->ops->proc_alive)
        return 0;
    void *addr;
    if (port->ops->shm_map(port, name, sizeof(struct rkv_mach_hdr), 0, &addr) < 0)
        return 0; /* none, or too short to be one of ours */
    const struct rkv_mach_hdr *h = addr;
    uint64_t live = 0;
    for (uint32_t i = 0; h->magic == mach_magic() && !live && i < RKV_MACH_SERVERS; i++) {
        uint64_t p = atomic_load(&h->serving[i]);
        if (p && port->ops->proc_alive(port, p)) {
            live = p;
            *local = i;
        }
    }
    port->ops->shm_unmap(port, addr, sizeof(struct rkv_mach_hdr));
    return live;
}

uint64_t rkv_mach_live_maker(struct rkv_port *port, const char *prefix, uint32_t machine)
{
    char name[96];
    uint32_t local;
    rkv_mach_name(name, sizeof(name), prefix, machine);
    return mach_live_server(port, name, &local);
}

/* Retires the shards that the table of h names, marking each closed first
 * when close. Ids are handed out in order, and a shard is made before its
 * entry is published (rkv_mach_publish): a crash in between leaves the
 * shard one past the last entry. */
static void mach_retire_shards(struct rkv_port *port, const char *prefix, uint32_t machine,
                               const struct rkv_mach_hdr *h, uint32_t n_tensors, int close)
{
    uint32_t last = n_tensors > 0 ? n_tensors - 1 : 0; /* the caller's, published or not */
    for (uint32_t t = 1, end = rkv_mach_tensor_end(h); t < end; t++)
        if ((h->tensors[t].present || h->tensors[t].desc.name[0]) && t > last)
            last = t;
    for (uint32_t t = 1; t <= last + 1 && t <= RKV_MAX_TENSORS; t++) {
        char shard[128];
        rkv_shard_name(shard, sizeof(shard), prefix, machine, t);
        void *addr;
        if (close && port->ops->shm_map(port, shard, sizeof(struct rkv_shard_hdr), 0, &addr) == 0) {
            struct rkv_shard_hdr *sh = addr;
            unsigned was = 0;
            if ((sh->magic & ~(0xffull << 56)) == RKV_SHARD_MAGIC) /* any build's */
                atomic_compare_exchange_strong(&sh->closed, &was, RKV_SHARD_CLOSED);
            port->ops->shm_unmap(port, addr, sizeof(struct rkv_shard_hdr));
        }
        rkv_shard_retire(port, shard);
    }
}

/* Removes a crashed run's machine segment and the tensor shards its table
 * names: the segment alone was removed, and each kill -9 and restart left
 * the shards in /dev/shm (memory) until reboot, even once the new run shut
 * down cleanly. A segment of another build (another layout) is removed
 * alone, as before: its table cannot be read. */
static void mach_unlink_stale(struct rkv_port *port, const char *prefix, uint32_t machine,
                              const char *name)
{
    void *addr;
    if (port->ops->shm_map(port, name, sizeof(struct rkv_mach_hdr), 0, &addr) == 0) {
        /* Retired, not only unlinked: a co-located client of the crashed
         * run still maps them, and went on writing rows the new run never
         * reads, its pushes acknowledged, after a barrier reading what no
         * other worker saw (an outside tester: a non-durable server killed
         * and restarted). It now learns the shard moved (RKV_SHARD_MOVED)
         * and follows or fails. */
        if (((const struct rkv_mach_hdr *)addr)->magic == mach_magic())
            mach_retire_shards(port, prefix, machine, addr, 0, 0);
        port->ops->shm_unmap(port, addr, sizeof(struct rkv_mach_hdr));
    }
    port->ops->shm_unlink(port, name);
}

int rkv_mach_shards_present(const struct rkv_mach *mc, const char *prefix, uint32_t machine,
                            char *missing, size_t missing_len)
{
    struct rkv_port *port = mc->port;
    for (uint32_t t = 1, end = rkv_mach_tensor_end(mc->hdr); t < end; t++) {
        if (!mc->hdr->tensors[t].present)
            continue;
        char name[128];
        rkv_shard_name(name, sizeof(name), prefix, machine, t);
        void *addr;
        if (port->ops->shm_map(port, name, sizeof(struct rkv_shard_hdr), 0, &addr) < 0) {
            snprintf(missing, missing_len, "%s", name);
            return 0;
        }
        port->ops->shm_unmap(port, addr, sizeof(struct rkv_shard_hdr));
    }
    return 1;
}

/* Records this process as slot owner's (reader_proc), before it takes any
 * lock under that tag: a holder that died between taking a lock word and
 * recording itself is found through it (mach_take_over). */
static void mach_slot_mine(struct rkv_mach *mc)
{
    if (mc->owner >= 1 && mc->owner <= RKV_MACH_SERVERS && mc->port->ops->proc_self) {
        uint64_t self = mc->port->ops->proc_self(mc->port);
        atomic_store(&mc->hdr->reader_proc[mc->owner - 1], self);
        atomic_store(&mc->hdr->serving[mc->owner - 1], self);
        mc->serving = self;
    }
}

int rkv_mach_create(struct rkv_port *port, const char *prefix, uint32_t machine, uint32_t n_clients,
                    uint64_t lineage, uint32_t owner, struct rkv_mach *mc, char *err,
                    size_t err_len)
{
    char name[96];
    rkv_mach_name(name, sizeof(name), prefix, machine);
    /* The README promises the refusal names the process that holds it. */
    uint32_t local;
    uint64_t maker = mach_live_server(port, name, &local);
    /* A sibling still serves the memory this server's previous run made
     * (it stopped or died beside it): made anew, the machine would be two,
     * the sibling's acknowledged pushes in memory no pull of this one
     * reads. Durable mode attaches instead (server.c srv_restart). */
    if (maker && local + 1 != owner)
        return rkv_errf(
            err, err_len, -RKV_EEXIST,
            "machine segment %s is in use: local server %u of machine %u (process %llu%s) "
            "still serves it, with shm prefix \"%s\"; outside durable mode a "
            "machine's memory is made anew only once all of its servers stopped: "
            "stop them too, then start them all (durable mode restarts a server "
            "beside running ones), or give this cluster another port or shm_prefix "
            "if that one is another cluster's",
            name, local, machine, (unsigned long long)RKV_PORT_PROC_PID(maker),
            port->ops->proc_self && maker == port->ops->proc_self(port) ? ": this process" : "",
            prefix);
    /* "Another cluster" misleads when the holder is the caller itself (a
     * second server object for the same machine and id in one process). */
    if (maker && port->ops->proc_self && maker == port->ops->proc_self(port))
        return rkv_errf(err, err_len, -RKV_EEXIST,
                        "machine segment %s is in use by a running server (process %llu: this "
                        "process) of machine %u with shm prefix \"%s\": this process already "
                        "runs that server (or a server of another cluster with the same shm "
                        "prefix: give each cluster its own); destroy it before making another",
                        name, (unsigned long long)RKV_PORT_PROC_PID(maker), machine, prefix);
    if (maker)
        return rkv_errf(err, err_len, -RKV_EEXIST,
                        "machine segment %s is in use by a running server (process %llu) of "
                        "machine %u with shm prefix \"%s\" (another cluster on the same port or "
                        "shm prefix?): stop it, or give this one another port or shm_prefix",
                        name, (unsigned long long)RKV_PORT_PROC_PID(maker), machine, prefix);
    mach_unlink_stale(port, prefix, machine, name); /* left by a crashed earlier run */
    size_t bytes = mach_bytes(n_clients);
    /* Asked first, as for a shard: the caller's message said only "out of
     * memory", the reason (a full /dev/shm) was in the log alone. */
    char why[256];
    if (port->ops->shm_room && port->ops->shm_room(port, bytes, why, sizeof(why)) < 0)
        return rkv_errf(err, err_len, -RKV_ENOMEM, "machine segment %s: %s", name, why);
    void *addr;
    int rc = port->ops->shm_map(port, name, bytes, 1, &addr);
    if (rc < 0)
        return rkv_errf(err, err_len, rc, "machine segment %s: cannot create %zu bytes (%s)", name,
                        bytes, rkv_strerror(rc));
    struct rkv_mach_hdr *h = addr; /* zero-filled by shm_map */
    h->lineage = lineage;
    h->n_clients = n_clients;
    atomic_thread_fence(memory_order_release);
    h->magic = mach_magic();
    *mc = (struct rkv_mach){.port = port, .hdr = h, .map_bytes = bytes, .owner = owner};
    mach_slot_mine(mc);
    return 0;
}

int rkv_mach_attach(struct rkv_port *port, const char *prefix, uint32_t machine, uint32_t n_clients,
                    uint32_t owner, struct rkv_mach *mc, char *err, size_t err_len)
{
    char name[96];
    rkv_mach_name(name, sizeof(name), prefix, machine);
    size_t bytes = mach_bytes(n_clients);
    void *addr;
    int rc = port->ops->shm_map(port, name, bytes, 0, &addr);
    if (rc < 0)
        return rkv_errf(err, err_len, rc, "machine segment %s: cannot attach (%s)", name,
                        rkv_strerror(rc));
    struct rkv_mach_hdr *h = addr;
    if ((h->magic & RKV_MACH_MAGIC_MASK) == RKV_MACH_MAGIC && h->magic != mach_magic()) {
        uint64_t other = h->magic >> 48;
        port->ops->shm_unmap(port, addr, bytes);
        return rkv_errf(err, err_len, -RKV_EEXIST,
                        "machine segment %s was made by another build of rkv (header layout "
                        "%llu, this build's %llu): stop that build's servers of the machine, or "
                        "remove the segment from /dev/shm (durable mode restarts from its files)",
                        name, (unsigned long long)other, (unsigned long long)(mach_magic() >> 48));
    }
    if (h->magic != mach_magic() || h->n_clients != n_clients) {
        port->ops->shm_unmap(port, addr, bytes);
        return rkv_errf(err, err_len, -RKV_EEXIST,
                        "machine segment %s is of another cluster (stale? remove it from /dev/shm)",
                        name);
    }
    atomic_thread_fence(memory_order_acquire);
    *mc = (struct rkv_mach){.port = port, .hdr = h, .map_bytes = bytes, .owner = owner};
    mach_slot_mine(mc);
    /* A server attaching as the machine's last one removes it: after its
     * slot is set, so that this or the remover backs off (rkv_mach_remove
     * looks at the slots after it set removing). */
    if (mc->serving && atomic_load(&h->removing)) {
        rkv_mach_close(mc);
        return rkv_errf(err, err_len, -RKV_ENOTENSOR,
                        "machine segment %s is being removed (its last server stopped)", name);
    }
    return 0;
}

/* Whether a server other than the caller's slot (cleared) still serves. */
static int mach_served(const struct rkv_mach *mc)
{
    const struct rkv_port_ops *o = mc->port->ops;
    for (uint32_t i = 0; i < RKV_MACH_SERVERS; i++) {
        uint64_t p = atomic_load(&mc->hdr->serving[i]);
        if (p && (!o->proc_alive || o->proc_alive(mc->port, p)))
            return 1;
    }
    return 0;
}

int rkv_mach_check_rejoin(struct rkv_port *port, const char *prefix, uint32_t machine,
                          uint32_t n_clients, uint32_t local, char *err, size_t err_len)
{
    struct rkv_mach mv;
    if (local >= RKV_MACH_SERVERS ||
        rkv_mach_attach(port, prefix, machine, n_clients, 0, &mv, NULL, 0) < 0)
        return 0; /* none (or not ours): the first INIT says */
    const struct rkv_port_ops *o = port->ops;
    /* reader_proc is set at a server's attach and never cleared: this
     * local server attached before, in this segment's life. */
    int before = atomic_load(&mv.hdr->reader_proc[local]) != 0;
    uint64_t live = 0;
    uint32_t who = 0;
    for (uint32_t i = 0; before && o->proc_alive && !live && i < RKV_MACH_SERVERS; i++) {
        uint64_t p = atomic_load(&mv.hdr->serving[i]);
        if (i != local && p && o->proc_alive(port, p)) {
            live = p;
            who = i;
        }
    }
    rkv_mach_close(&mv);
    if (!live)
        return 0;
    char name[96];
    rkv_mach_name(name, sizeof(name), prefix, machine);
    return rkv_errf(err, err_len, -RKV_EEXIST,
                    "machine segment %s is in use: local server %u of machine %u (process %llu) "
                    "still serves it, and local server %u served it before; outside durable "
                    "mode a server of a machine restarts only with all of them (it would hold "
                    "none of the machine's tensors): stop them too, then start them all "
                    "(durable mode restarts a server beside running ones)",
                    name, who, machine, (unsigned long long)RKV_PORT_PROC_PID(live), local);
}

int rkv_mach_server_left(const struct rkv_mach *mc, uint32_t local)
{
    if (local >= RKV_MACH_SERVERS)
        return 0;
    return atomic_load(&mc->hdr->reader_proc[local]) != 0 &&
           atomic_load(&mc->hdr->serving[local]) == 0 && mach_served(mc);
}

int rkv_mach_leave(struct rkv_mach *mc)
{
    struct rkv_mach_hdr *h = mc->hdr;
    assert(h);
    if (mc->serving) {
        uint64_t mine = mc->serving;
        /* Only if still this server's: a restart of it may have taken the
         * slot over already. */
        atomic_compare_exchange_strong(&h->serving[mc->owner - 1], &mine, 0);
        mc->serving = 0;
    }
    /* Sequentially consistent, as each leaving server clears its slot
     * before it reads the others': of two leaving at once, at least the
     * second sees the first gone. */
    return !mach_served(mc);
}

void rkv_mach_remove(struct rkv_mach *mc, const char *prefix, uint32_t machine, uint32_t n_tensors,
                     int close)
{
    unsigned was = 0;
    if (!atomic_compare_exchange_strong(&mc->hdr->removing, &was, 1))
        return;
    /* A server that attached since rkv_mach_leave looked (a restart)
     * serves it: left to that one. Of the two, at least one sees the
     * other (removing set before this look, its slot before its look). */
    if (mach_served(mc)) {
        atomic_store(&mc->hdr->removing, 0);
        return;
    }
    mach_retire_shards(mc->port, prefix, machine, mc->hdr, n_tensors, close);
    rkv_mach_unlink(mc->port, prefix, machine); /* last: see server.c srv_restart */
}

void rkv_mach_close(struct rkv_mach *mc)
{
    /* A server that maps it no more does not serve it (a restart's attach
     * that found it unfit, a create that failed after its attach). Only by
     * the process that wrote it: a forked child's copy of the mapping
     * closes on the parent's behalf, which still serves. */
    const struct rkv_port_ops *o = mc->port ? mc->port->ops : NULL;
    if (mc->hdr && mc->serving && o->proc_self && o->proc_self(mc->port) == mc->serving) {
        uint64_t mine = mc->serving;
        atomic_compare_exchange_strong(&mc->hdr->serving[mc->owner - 1], &mine, 0);
    }
    if (mc->hdr)
        mc->port->ops->shm_unmap(mc->port, mc->hdr, mc->map_bytes);
    memset(mc, 0, sizeof(*mc));
}

static void mach_backoff(struct rkv_port *port, unsigned *spins)
{
    if (++*spins < MACH_SPINS)
        return;
    if (*spins < MACH_SPINS + MACH_YIELDS)
        port->ops->yield(port);
    else
        port->ops->sleep_ns(port, MACH_SLEEP_NS);
}

void rkv_spin_lock(struct rkv_port *port, atomic_uint *w, uint32_t owner)
{
    assert(owner != 0);
    for (unsigned spins = 0;;) {
        unsigned expect = 0;
        if (atomic_compare_exchange_weak_explicit(w, &expect, owner, memory_order_acquire,
                                                  memory_order_relaxed))
            return;
        mach_backoff(port, &spins);
    }
}

void rkv_spin_unlock(atomic_uint *w)
{
    atomic_store_explicit(w, 0, memory_order_release);
}

/* How long a waiter waits between two looks at the holder's liveness:
 * a look reads /proc on a real host, far more than a spin. */
#define MACH_LIVE_CHECK_NS 20000000ull

/* Takes the lock from a dead holder: the CAS on the holder's id lets one
 * waiter win, and the holder's id is set only while the word is held (set
 * after the word's CAS, cleared before its release), so a dead id there
 * means the dead process holds the word. */
static uint32_t mach_take_over(struct rkv_port *port, atomic_uint *w, _Atomic uint64_t *holder,
                               const _Atomic uint64_t *slots, uint32_t owner, uint64_t self)
{
    uint64_t seen = atomic_load(holder), dead = seen;
    /* No holder recorded: it died between taking the word and recording
     * itself (a kill there left the lock held for good: a test killing a
     * pushing process 24 times hung on it). The word's tag names its slot,
     * whose process is recorded at attach (a live holder in that window
     * is that live process, and keeps it). */
    unsigned tag = atomic_load(w);
    if (!dead && slots && tag >= 1 && tag <= RKV_MACH_SERVERS)
        dead = atomic_load(&slots[tag - 1]);
    if (dead == 0 || dead == self || port->ops->proc_alive(port, dead))
        return 0;
    if (!atomic_compare_exchange_strong(holder, &seen, self))
        return 0;
    unsigned was = atomic_exchange(w, owner);
    /* The pid: the id packs the process's start time above it, and the
     * line named process 28932212554565 (an outside tester). */
    RKV_LOGW(port, "took over a lock (tag %u) held by process %llu, which died holding it", was,
             (unsigned long long)RKV_PORT_PROC_PID(dead));
    return was ? was : ~0u;
}

uint32_t rkv_live_lock(struct rkv_port *port, atomic_uint *w, _Atomic uint64_t *holder,
                       const _Atomic uint64_t *slots, uint32_t owner)
{
    assert(owner != 0);
    const struct rkv_port_ops *o = port->ops;
    uint64_t self = o->proc_self ? o->proc_self(port) : 0;
    uint64_t next_look = 0;
    for (unsigned spins = 0;;) {
        unsigned expect = 0;
        if (atomic_compare_exchange_weak_explicit(w, &expect, owner, memory_order_acquire,
                                                  memory_order_relaxed)) {
            atomic_store(holder, self);
            return 0;
        }
        mach_backoff(port, &spins);
        if (!o->proc_alive || spins < MACH_SPINS + MACH_YIELDS)
            continue;
        uint64_t now = o->now_ns(port);
        if (next_look == 0) {
            next_look = now + MACH_LIVE_CHECK_NS;
        } else if (now >= next_look) {
            uint32_t was = mach_take_over(port, w, holder, slots, owner, self);
            if (was)
                return was;
            next_look = now + MACH_LIVE_CHECK_NS;
        }
    }
}

int rkv_live_held(atomic_uint *w, uint32_t owner)
{
    return atomic_load(w) == owner;
}

void rkv_live_unlock(atomic_uint *w, _Atomic uint64_t *holder)
{
    atomic_store(holder, 0);
    atomic_store_explicit(w, 0, memory_order_release);
}

/* A reader announces itself, then checks for a writer (and the writer the
 * other way round); sequentially consistent, so one of them sees the other.
 * A waiting writer keeps new readers out: pushes cannot starve a snapshot. */
void rkv_mach_apply_begin(struct rkv_mach *mc)
{
    struct rkv_mach_hdr *h = mc->hdr;
    atomic_uint *mine = &h->readers[mc->owner - 1];
    if (mc->port->ops->proc_self) /* before the flag: whoever sees it sees this */
        atomic_store_explicit(&h->reader_proc[mc->owner - 1], mc->port->ops->proc_self(mc->port),
                              memory_order_relaxed);
    for (unsigned spins = 0;;) {
        atomic_store(mine, 1);
        if (!atomic_load(&h->copy_writer))
            return;
        atomic_store(mine, 0);
        while (atomic_load_explicit(&h->copy_writer, memory_order_relaxed))
            mach_backoff(mc->port, &spins);
    }
}

void rkv_mach_apply_end(struct rkv_mach *mc)
{
    atomic_store_explicit(&mc->hdr->readers[mc->owner - 1], 0, memory_order_release);
}

/* Only one writer at a time: callers hold snap_lock. */
void rkv_mach_copy_begin(struct rkv_mach *mc)
{
    struct rkv_mach_hdr *h = mc->hdr;
    const struct rkv_port_ops *o = mc->port->ops;
    assert(atomic_load(&h->copy_writer) == 0);
    atomic_store(&h->copy_writer, mc->owner);
    /* A server killed inside a push leaves its flag set: waited for, it
     * held this copy, and so every live server's next push, until its
     * restart (if any) cleared it. Once copy_writer is set no reader
     * enters (apply_begin looks after setting its flag), so a flag still
     * set by a dead process is that process's, and goes; the push it was
     * in is the apply journal's (wal.c), and the copy is refused while it
     * is unfinished. */
    for (uint32_t i = 0; i < RKV_MACH_SERVERS; i++) {
        uint64_t next_look = 0;
        for (unsigned spins = 0; atomic_load(&h->readers[i]);) {
            mach_backoff(mc->port, &spins);
            if (!o->proc_alive || spins < MACH_SPINS + MACH_YIELDS)
                continue;
            uint64_t now = o->now_ns(mc->port);
            if (next_look == 0) {
                next_look = now + MACH_LIVE_CHECK_NS;
            } else if (now >= next_look) {
                uint64_t p = atomic_load(&h->reader_proc[i]);
                unsigned one = 1;
                if (p && !o->proc_alive(mc->port, p) &&
                    atomic_compare_exchange_strong(&h->readers[i], &one, 0))
                    RKV_LOGW(mc->port,
                             "machine segment: server slot %u's process %llu died inside a push; "
                             "a checkpoint no longer waits for it",
                             i, (unsigned long long)RKV_PORT_PROC_PID(p));
                next_look = now + MACH_LIVE_CHECK_NS;
            }
        }
    }
}

void rkv_mach_copy_end(struct rkv_mach *mc)
{
    atomic_store_explicit(&mc->hdr->copy_writer, 0, memory_order_release);
}

static uint32_t mach_free_if_mine(atomic_uint *w, uint32_t owner)
{
    unsigned expect = owner;
    return atomic_compare_exchange_strong(w, &expect, 0) ? 1 : 0;
}

uint32_t rkv_mach_reclaim(struct rkv_mach *mc)
{
    struct rkv_mach_hdr *h = mc->hdr;
    if (mach_free_if_mine(&h->snap_lock, mc->owner))
        atomic_store(&h->snap_holder, 0);
    if (mach_free_if_mine(&h->wal_sync_lock, mc->owner))
        atomic_store(&h->wal_sync_holder, 0);
    if (mach_free_if_mine(&h->wal_hwm_lock, mc->owner))
        atomic_store(&h->wal_hwm_holder, 0);
    mach_free_if_mine(&h->table_lock, mc->owner);
    mach_free_if_mine(&h->copy_writer, mc->owner);
    atomic_store(&h->readers[mc->owner - 1], 0);
    /* Held across a push's append and apply: that push may be there in part. */
    uint32_t torn = mach_free_if_mine(&h->wal_lock, mc->owner);
    if (torn)
        atomic_store(&h->wal_holder, 0);
    for (uint32_t c = 0; c < h->n_clients; c++)
        torn += mach_free_if_mine(&h->clients[c].lock, mc->owner);
    return torn;
}

int rkv_mach_seq_begin(struct rkv_mach *mc, uint32_t client, uint64_t seq)
{
    assert(client < mc->hdr->n_clients);
    struct rkv_mach_client *e = &mc->hdr->clients[client];
    rkv_spin_lock(mc->port, &e->lock, mc->owner);
    /* Another tag is another incarnation of that client id: a fresh stream. */
    return (e->last_seq >> RKV_SEQ_TAG_SHIFT) == (seq >> RKV_SEQ_TAG_SHIFT) && seq <= e->last_seq;
}

void rkv_mach_seq_end(struct rkv_mach *mc, uint32_t client, uint64_t seq, int applied)
{
    struct rkv_mach_client *e = &mc->hdr->clients[client];
    if (applied)
        e->last_seq = seq;
    rkv_spin_unlock(&e->lock);
}

void rkv_mach_publish(struct rkv_mach *mc, const struct rkv_tensor *t)
{
    uint32_t id = t->meta.id;
    assert(id >= 1 && id <= RKV_MAX_TENSORS);
    struct rkv_mach_tensor *e = &mc->hdr->tensors[id];
    struct rkv_tensor_desc d = {.init = t->init, .init_seed = t->init_seed};
    rkv_spin_lock(mc->port, &mc->hdr->table_lock, mc->owner);
    rkv_mach_tensor_raise(mc->hdr, id);
    rkv_tensor_to_wire(&t->meta, &d, &e->desc);
    e->with_state = (uint32_t)t->meta.with_state;
    e->local_rows = t->shard.local_rows;
    e->row_bytes = t->row_bytes;
    e->has_local = t->shard.local != NULL;
    atomic_thread_fence(memory_order_release);
    e->present = 1;
    rkv_spin_unlock(&mc->hdr->table_lock);
}
