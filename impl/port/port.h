/* The port: the only OS surface the store, engine and NIC-independent code
 * may touch. Backends: POSIX (port_posix.c) and SimGrid (sim/backend/port_sim.c).
 *
 * Why a vtable and not plain pthreads: in the twin every node is an actor in
 * one process, so a pthread mutex held across a simulated wait deadlocks it,
 * clock_gettime does not see simulated time and sleep() stalls the whole
 * simulation. Everything here is per node (struct rkv_port); no globals.
 */
#ifndef RKV_PORT_H
#define RKV_PORT_H

#include <assert.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

struct rkv_port;
struct rkv_task;  /* opaque, backend-defined */
struct rkv_mutex; /* opaque, backend-defined */
struct rkv_cond;  /* opaque, backend-defined */

enum rkv_log_level { RKV_LOG_ERROR = 0, RKV_LOG_WARN = 1, RKV_LOG_INFO = 2, RKV_LOG_DEBUG = 3 };

typedef void (*rkv_task_fn)(void *arg);

/* The process id inside a proc_self id, for messages that name a holder:
 * POSIX keeps the pid in the low bits (the process's start time above, so
 * that a reused pid is another process); the twin's actor ids are small. */
#define RKV_PORT_PROC_PID_BITS 22
#define RKV_PORT_PROC_PID(id) ((uint64_t)(id) & ((1ull << RKV_PORT_PROC_PID_BITS) - 1))

struct rkv_port_ops {
    const char *name;
    /* Starts fn(arg) concurrently (a thread, or an actor on the node's host). */
    int (*task_start)(struct rkv_port *p, const char *name, rkv_task_fn fn, void *arg,
                      struct rkv_task **task_p);
    /* Waits for the task to return and frees it. */
    int (*task_join)(struct rkv_port *p, struct rkv_task *t);
    int (*mutex_create)(struct rkv_port *p, struct rkv_mutex **m_p);
    void (*mutex_lock)(struct rkv_mutex *m);
    /* Takes m only if nobody holds it: 1 when taken, else 0. For a task
     * that must not wait behind a holder blocked on something it is
     * itself supposed to do (the TCP NIC's reader, which may not wait
     * behind a send blocked on a peer that waits for it to read). */
    int (*mutex_trylock)(struct rkv_mutex *m);
    void (*mutex_unlock)(struct rkv_mutex *m);
    void (*mutex_destroy)(struct rkv_mutex *m);
    /* 1 when the calling task holds m, else 0: for assertions
     * (RKV_ASSERT_HELD), which turn "called with the lock held" from a
     * comment into a check. cond_wait gives m up while it waits. */
    int (*mutex_held)(struct rkv_mutex *m);
    int (*cond_create)(struct rkv_port *p, struct rkv_cond **c_p);
    /* Returns 0 when signalled (or spuriously), -RKV_ETIMEDOUT after
     * timeout_ns. The mutex is held again on return either way. */
    int (*cond_wait)(struct rkv_cond *c, struct rkv_mutex *m, uint64_t timeout_ns);
    void (*cond_signal)(struct rkv_cond *c);
    void (*cond_broadcast)(struct rkv_cond *c);
    void (*cond_destroy)(struct rkv_cond *c);
    uint64_t (*now_ns)(struct rkv_port *p); /* monotonic (simulated in the twin) */
    void (*sleep_ns)(struct rkv_port *p, uint64_t ns);
    /* Lets another task run (used by short spin waits on shard row locks). */
    void (*yield)(struct rkv_port *p);
    /* Maps `bytes` of memory named `name` shared by every node of one machine.
     * create=1 makes it (failing if it exists) and zero-fills it; create=0
     * attaches to an existing one and fails with -RKV_ENOTENSOR if absent;
     * a new one that does not fit the memory left for it fails with
     * -RKV_ENOMEM before anything is allocated. */
    int (*shm_map)(struct rkv_port *p, const char *name, size_t bytes, int create, void **addr_p);
    void (*shm_unmap)(struct rkv_port *p, void *addr, size_t bytes);
    void (*shm_unlink)(struct rkv_port *p, const char *name);
    void (*vlog)(struct rkv_port *p, int level, const char *fmt, va_list ap);
    /* A handler just applied or read `rows` rows. Real backends leave it
     * NULL (the work already took its time); the twin turns it into
     * simulated CPU time from the scenario's per-row cost. */
    void (*handler_work)(struct rkv_port *p, uint64_t rows);
    /* Lock liveness (durable mode): the id of the calling task's process
     * (POSIX: its pid; the twin: the calling actor's pid), recorded next to
     * a lock word in shared memory, and whether the process of such an id
     * still runs (0: it died, so its locks may be taken over). NULL in a
     * backend that cannot tell: holders are then never presumed dead. */
    uint64_t (*proc_self)(struct rkv_port *p);
    /* An id of the calling task (POSIX: its thread; the twin: its actor),
     * never 0, for state kept per caller in an object rather than in
     * thread-local storage (the twin's actors share one thread). NULL:
     * callers are not told apart. */
    uint64_t (*task_self)(struct rkv_port *p);
    int (*proc_alive)(struct rkv_port *p, uint64_t id);
    /* Which process ids proc_self's are (POSIX: the pid namespace's
     * inode; the twin: 1), so that an id recorded in shared memory is
     * judged only by a process that sees the same ids: containers that
     * share /dev/shm but not their pid namespace would take each other's
     * live pids for dead. 0 or NULL: unknown (ids never presumed dead). */
    uint64_t (*proc_ns)(struct rkv_port *p);
    /* The memory this process could have in bytes (the host's, or its
     * memory cgroup's limit where lower), which sizes defaults such as
     * the slot memory a node grants (rkv.h slot_mem_bytes). NULL (the
     * twin: every node alike, whatever the host) or 0: unknown. */
    uint64_t (*mem_bytes)(struct rkv_port *p);
    /* Whether a new shm segment of `bytes` would fit the memory left for
     * it (shm_map checks the same, but says why only in the log): 0, or
     * -RKV_ENOMEM with the reason in err. NULL (the twin, whose memory
     * floor watches the whole process): always. */
    int (*shm_room)(struct rkv_port *p, uint64_t bytes, char *err, size_t err_len);
    /* Room for `need` open descriptors (a node's connections): 0 when the
     * limit allows them, after raising the soft limit towards the hard one
     * if that was needed; -1 when the hard limit is lower, with the limit
     * in *limit_p. NULL (the twin: no descriptors): always room. */
    int (*fd_room)(struct rkv_port *p, uint64_t need, uint64_t *limit_p);
    void (*destroy)(struct rkv_port *p);
};

/* Per-node PRNG (xoshiro256**), seeded from (seed, node). Plain code, no OS. */
struct rkv_rng {
    uint64_t s[4];
};
void rkv_rng_seed(struct rkv_rng *r, uint64_t seed, uint64_t stream);
uint64_t rkv_rng_next(struct rkv_rng *r);
/* Uniform in [0, bound) without modulo bias; bound > 0. */
uint64_t rkv_rng_below(struct rkv_rng *r, uint64_t bound);
/* Uniform double in [0, 1). */
double rkv_rng_double(struct rkv_rng *r);
/* Stateless mix, for values derived from coordinates (seed, tensor, row...). */
uint64_t rkv_mix64(uint64_t x);

struct rkv_port {
    const struct rkv_port_ops *ops;
    char node[32]; /* printed in every log line, e.g. "s0.1" or "w3" */
    int log_level;
    struct rkv_rng rng;
    void *impl; /* backend state */
    /* Real backends under `rkv run --trace`: where spans go (port/trace.h);
     * NULL otherwise (always in the twin). Set before the node starts. */
    struct rkv_trace *trace;
};

/* POSIX backend: threads, CLOCK_MONOTONIC, shm_open, stderr logging. */
int rkv_port_posix_create(const char *node, int log_level, uint64_t seed, struct rkv_port **port_p);

void rkv_port_log(struct rkv_port *p, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
struct rkv_ratelim;
/* A warning a peer can cause over and over: at most RKV_RATELIM_BURST per
 * interval of lim (util.h), each with the count of those suppressed since
 * the last; the rest at debug level, so that a hostile peer cannot flood
 * the log. The caller holds whatever guards lim. */
void rkv_port_warn_limited(struct rkv_port *p, struct rkv_ratelim *lim, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The calling process's id (getpid()), process-wide rather than per node:
 * the public API compares it with its object's creator on every call, so
 * that a fork()ed child, which has the object's memory but not its threads,
 * is refused instead of sharing the parent's connections. Cached (getpid
 * is a system call since glibc 2.25, dearer than a local pull) and
 * refreshed in a fork's child by a pthread_atfork handler; a raw clone(2)
 * that skips the handlers keeps the parent's id. */
int rkv_port_pid(void);
static inline void rkv_port_handler_work(struct rkv_port *p, uint64_t rows)
{
    if (p->ops->handler_work)
        p->ops->handler_work(p, rows);
}

/* A precondition: the calling task holds m (a mutex of port p). Like
 * assert, compiled out with NDEBUG. */
#define RKV_ASSERT_HELD(p, m) assert((p)->ops->mutex_held(m))

#define RKV_LOGE(p, ...) rkv_port_log((p), RKV_LOG_ERROR, __VA_ARGS__)
#define RKV_LOGW(p, ...) rkv_port_log((p), RKV_LOG_WARN, __VA_ARGS__)
#define RKV_LOGI(p, ...) rkv_port_log((p), RKV_LOG_INFO, __VA_ARGS__)
#define RKV_LOGD(p, ...) rkv_port_log((p), RKV_LOG_DEBUG, __VA_ARGS__)

#endif
