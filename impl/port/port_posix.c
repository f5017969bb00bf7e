/* The POSIX port: pthreads, CLOCK_MONOTONIC, POSIX shared memory and one
 * stderr line per log call. Everything hangs off struct posix_port; the
 * backend keeps no globals, so several nodes can live in one process. */
#include <assert.h>
#include <stdatomic.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "port/hostmem.h"
#include "port/port.h"
#include "util/util.h"

#define NS_PER_SEC 1000000000ULL
#define LOG_LINE_MAX 1024 /* longer messages are cut; a log line is not a data channel */

struct posix_port {
    struct rkv_port base;
    uint64_t t0_ns; /* creation time, the origin of the log timestamps */
    /* proc_self of the process with pid self_pid (a forked child's
     * differs): self_id is written before self_pid, read after it. */
    _Atomic uint64_t self_id;
    atomic_int self_pid;
};

struct rkv_task {
    pthread_t thread;
    rkv_task_fn fn;
    void *arg;
    char name[16]; /* the kernel keeps 15 characters of a thread name */
};

struct rkv_mutex {
    pthread_mutex_t m;
    /* The holder's pthread_self(), 0 when free: written only by the holder
     * (after locking, before unlocking), so a task that reads its own id
     * here holds the mutex, whatever other tasks do meanwhile. */
    atomic_uintptr_t owner;
};

struct rkv_cond {
    pthread_cond_t c;
};

static uint64_t posix_clock_ns(void)
{
    struct timespec ts;
    int rc = clock_gettime(CLOCK_MONOTONIC, &ts);
    assert(rc == 0);
    (void)rc;
    return (uint64_t)ts.tv_sec * NS_PER_SEC + (uint64_t)ts.tv_nsec;
}

static int posix_errno_code(int e)
{
    return e == ENOMEM || e == EAGAIN ? -RKV_ENOMEM : -RKV_EIO;
}

/* ---- tasks ---- */

static void *posix_task_main(void *arg)
{
    struct rkv_task *t = arg;
    t->fn(t->arg);
    return NULL;
}

static int posix_task_start(struct rkv_port *p, const char *name, rkv_task_fn fn, void *arg,
                            struct rkv_task **task_p)
{
    assert(p && fn && task_p);
    struct rkv_task *t = calloc(1, sizeof(*t));
    if (!t)
        return -RKV_ENOMEM;
    t->fn = fn;
    t->arg = arg;
    snprintf(t->name, sizeof(t->name), "%s", name ? name : "rkv");
    int rc = pthread_create(&t->thread, NULL, posix_task_main, t);
    if (rc != 0) {
        RKV_LOGE(p, "cannot start task %s: %s", t->name, strerror(rc));
        free(t);
        return posix_errno_code(rc);
    }
    /* Only a debugging aid (names show in top/gdb), so its failure is ignored. */
    (void)pthread_setname_np(t->thread, t->name);
    *task_p = t;
    return 0;
}

static int posix_task_join(struct rkv_port *p, struct rkv_task *t)
{
    assert(t);
    int rc = pthread_join(t->thread, NULL);
    if (rc != 0) {
        RKV_LOGE(p, "cannot join task %s: %s", t->name, strerror(rc));
        return -RKV_EIO;
    }
    free(t);
    return 0;
}

/* ---- mutex and condition variable ---- */

static int posix_mutex_create(struct rkv_port *p, struct rkv_mutex **m_p)
{
    (void)p;
    struct rkv_mutex *m = calloc(1, sizeof(*m));
    if (!m)
        return -RKV_ENOMEM;
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
#ifndef NDEBUG
    /* Debug builds turn relocking and foreign unlocks into assertion failures. */
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ERRORCHECK);
#endif
    int rc = pthread_mutex_init(&m->m, &attr);
    pthread_mutexattr_destroy(&attr);
    if (rc != 0) {
        free(m);
        return posix_errno_code(rc);
    }
    *m_p = m;
    return 0;
}

static uintptr_t posix_self(void)
{
    /* pthread_t is an integer or a pointer on the systems rkv builds on. */
    return (uintptr_t)pthread_self();
}

static void posix_mutex_lock(struct rkv_mutex *m)
{
    int rc = pthread_mutex_lock(&m->m);
    assert(rc == 0);
    (void)rc;
    atomic_store_explicit(&m->owner, posix_self(), memory_order_relaxed);
}

static int posix_mutex_trylock(struct rkv_mutex *m)
{
    int rc = pthread_mutex_trylock(&m->m);
    assert(rc == 0 || rc == EBUSY);
    if (rc != 0)
        return 0;
    atomic_store_explicit(&m->owner, posix_self(), memory_order_relaxed);
    return 1;
}

static void posix_mutex_unlock(struct rkv_mutex *m)
{
    assert(atomic_load_explicit(&m->owner, memory_order_relaxed) == posix_self());
    atomic_store_explicit(&m->owner, 0, memory_order_relaxed);
    int rc = pthread_mutex_unlock(&m->m);
    assert(rc == 0);
    (void)rc;
}

static int posix_mutex_held(struct rkv_mutex *m)
{
    return atomic_load_explicit(&m->owner, memory_order_relaxed) == posix_self();
}

static void posix_mutex_destroy(struct rkv_mutex *m)
{
    if (!m)
        return;
    int rc = pthread_mutex_destroy(&m->m);
    assert(rc == 0);
    (void)rc;
    free(m);
}

static int posix_cond_create(struct rkv_port *p, struct rkv_cond **c_p)
{
    (void)p;
    struct rkv_cond *c = calloc(1, sizeof(*c));
    if (!c)
        return -RKV_ENOMEM;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    /* Timed waits must not jump when the wall clock is stepped (NTP, date -s). */
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&c->c, &attr);
    pthread_condattr_destroy(&attr);
    if (rc != 0) {
        free(c);
        return posix_errno_code(rc);
    }
    *c_p = c;
    return 0;
}

static int posix_cond_wait_held(struct rkv_cond *c, struct rkv_mutex *m, uint64_t timeout_ns);

/* The wait gives the mutex up: it has no owner until the wait takes it back. */
static int posix_cond_wait(struct rkv_cond *c, struct rkv_mutex *m, uint64_t timeout_ns)
{
    assert(posix_mutex_held(m));
    atomic_store_explicit(&m->owner, 0, memory_order_relaxed);
    int rc = posix_cond_wait_held(c, m, timeout_ns);
    atomic_store_explicit(&m->owner, posix_self(), memory_order_relaxed);
    return rc;
}

static int posix_cond_wait_held(struct rkv_cond *c, struct rkv_mutex *m, uint64_t timeout_ns)
{
    if (timeout_ns == UINT64_MAX) {
        int rc = pthread_cond_wait(&c->c, &m->m);
        assert(rc == 0);
        (void)rc;
        return 0;
    }
    uint64_t deadline_ns;
    if (!rkv_add_ok(posix_clock_ns(), timeout_ns, &deadline_ns))
        deadline_ns = UINT64_MAX;
    /* A deadline past time_t's range would wrap; a century is forever here. */
    uint64_t max_s = (uint64_t)100 * 365 * 24 * 3600;
    uint64_t sec = deadline_ns / NS_PER_SEC;
    struct timespec ts = {.tv_sec = (time_t)(sec < max_s ? sec : max_s),
                          .tv_nsec = (long)(deadline_ns % NS_PER_SEC)};
    int rc = pthread_cond_timedwait(&c->c, &m->m, &ts);
    assert(rc == 0 || rc == ETIMEDOUT);
    return rc == ETIMEDOUT ? -RKV_ETIMEDOUT : 0;
}

static void posix_cond_signal(struct rkv_cond *c)
{
    pthread_cond_signal(&c->c);
}

static void posix_cond_broadcast(struct rkv_cond *c)
{
    pthread_cond_broadcast(&c->c);
}

static void posix_cond_destroy(struct rkv_cond *c)
{
    if (!c)
        return;
    pthread_cond_destroy(&c->c);
    free(c);
}

/* ---- time ---- */

static uint64_t posix_now_ns(struct rkv_port *p)
{
    (void)p;
    return posix_clock_ns();
}

static void posix_sleep_ns(struct rkv_port *p, uint64_t ns)
{
    (void)p;
    struct timespec ts = {.tv_sec = (time_t)(ns / NS_PER_SEC), .tv_nsec = (long)(ns % NS_PER_SEC)};
    /* nanosleep leaves the remainder in ts, so a signal does not shorten the sleep. */
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void posix_yield(struct rkv_port *p)
{
    (void)p;
    sched_yield();
}

/* ---- shared memory ---- */

static int posix_shm_open(struct rkv_port *p, const char *name, int create, int *fd_p)
{
    int flags = create ? O_RDWR | O_CREAT | O_EXCL : O_RDWR;
    int fd = shm_open(name, flags | O_CLOEXEC, 0600);
    if (fd >= 0) {
        *fd_p = fd;
        return 0;
    }
    int e = errno;
    if (create && e == EEXIST) {
        RKV_LOGW(p, "shm %s: already exists", name);
        return -RKV_EEXIST;
    }
    if (!create && e == ENOENT) {
        RKV_LOGD(p, "shm %s: does not exist (yet)", name);
        return -RKV_ENOTENSOR;
    }
    RKV_LOGE(p, "shm %s: shm_open failed: %s", name, strerror(e));
    return -RKV_EIO;
}

/* The memory this process could have: the host's, or its memory cgroup's
 * limit where that is lower. It sizes the slot memory a node grants by
 * default (a quarter of it): by the host's alone, a server in a 256 MiB
 * container on a 24 GiB host let its peers make it pin 4 GiB, far past
 * what its cgroup's OOM killer allows. */
static uint64_t posix_mem_bytes(struct rkv_port *p)
{
    (void)p;
    struct port_hostmem m;
    (void)rkv_hostmem_read(NULL, &m);
    uint64_t size = rkv_hostmem_size(&m);
    if (size)
        return size;
    long page = sysconf(_SC_PAGESIZE), phys = sysconf(_SC_PHYS_PAGES);
    return page > 0 && phys > 0 ? (uint64_t)page * (uint64_t)phys : 0;
}

/* Raises RLIMIT_NOFILE's soft limit to `need` where the hard one allows
 * (a server holds a connection per worker: 1,024, the usual soft limit,
 * turned workers away past it). */
static int posix_fd_room(struct rkv_port *p, uint64_t need, uint64_t *limit_p)
{
    (void)p;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need)
        return 0;
    if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need) {
        rl.rlim_cur = need;
        if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
            return 0;
    }
    *limit_p = rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need ? rl.rlim_max : rl.rlim_cur;
    return -1;
}

/* The memory a new segment bigger than it must leave to the processes
 * themselves: a 32nd of what this process could have (the host's memory
 * or its cgroup's limit), at least 16 MiB, at most 1 GiB (a 32nd of a
 * 1 TiB host refused a 100 GiB tensor with 120 GiB available). */
#define POSIX_SHM_KEEP_MIN (16ull << 20)
#define POSIX_SHM_KEEP_MAX (1ull << 30)

/* Whether a new segment of `bytes` fits: the shared-memory filesystem's
 * free space, and the memory this process may still take (the host's
 * MemAvailable, or what its memory cgroup has left where that is less),
 * less what the processes need beside it. The filesystem alone was the
 * check before: a tmpfs is sized by the host's memory, so in a container
 * whose cgroup allows 256 MiB a 512 MiB tensor passed, and the cgroup's
 * OOM killer ended the server with SIGKILL as the segment was filled. */
/* A size for a message: MiB, or KiB below 16 MiB (a segment of a few
 * pages read "needs 0 MiB"). */
static const char *posix_size(char *buf, size_t len, uint64_t b)
{
    if (b >= (16ull << 20))
        snprintf(buf, len, "%llu MiB", (unsigned long long)(b >> 20));
    else
        snprintf(buf, len, "%llu KiB", (unsigned long long)((b + 1023) >> 10));
    return buf;
}

static int posix_room(int fd, uint64_t bytes, char *err, size_t err_len)
{
    char need[32], have[32], lim[32], kept[32];
    posix_size(need, sizeof(need), bytes);
    struct statvfs vs;
    /* The segment's own filesystem when it is open (fd >= 0), else where
     * glibc's shm_open puts segments. A tmpfs mounted without a size
     * limit reports 0 blocks: then only memory bounds it. */
    if ((fd >= 0 ? fstatvfs(fd, &vs) : statvfs("/dev/shm", &vs)) == 0 && vs.f_frsize > 0 &&
        vs.f_blocks > 0 && bytes > (uint64_t)vs.f_bavail * vs.f_frsize)
        return rkv_errf(err, err_len, -RKV_ENOMEM,
                        "needs %s, but the shared-memory filesystem (/dev/shm) has %s free (a "
                        "container's is 64 MiB unless given more: docker run --shm-size, a "
                        "Kubernetes emptyDir of medium Memory)",
                        need, posix_size(have, sizeof(have), (uint64_t)vs.f_bavail * vs.f_frsize));
    struct port_hostmem m;
    (void)rkv_hostmem_read(NULL, &m);
    uint64_t left = rkv_hostmem_left(&m), size = rkv_hostmem_size(&m);
    if (left == UINT64_MAX)
        return 0; /* neither /proc nor a cgroup says: the filesystem's check alone */
    uint64_t keep = size / 32 > POSIX_SHM_KEEP_MIN ? size / 32 : POSIX_SHM_KEEP_MIN;
    if (keep > POSIX_SHM_KEEP_MAX)
        keep = POSIX_SHM_KEEP_MAX;
    /* A segment smaller than the reserve is held to the memory left
     * alone: a host short of memory still starts a node (its machine
     * segment is a few KiB). */
    if (bytes <= left && (bytes <= keep || left - bytes >= keep))
        return 0;
    posix_size(have, sizeof(have), left);
    posix_size(kept, sizeof(kept), keep);
    if (rkv_hostmem_cgroup_binds(&m))
        return rkv_errf(err, err_len, -RKV_ENOMEM,
                        "needs %s, but the memory cgroup this process is in (limit %s) has %s "
                        "left, and %s of it stay for the processes",
                        need, posix_size(lim, sizeof(lim), m.cg_limit_bytes), have, kept);
    return rkv_errf(err, err_len, -RKV_ENOMEM,
                    "needs %s, but the host has %s of memory available, and %s of it stay for "
                    "the processes",
                    need, have, kept);
}

static int posix_shm_room(struct rkv_port *p, uint64_t bytes, char *err, size_t err_len)
{
    (void)p;
    return posix_room(-1, bytes, err, err_len);
}

/* Sizes a new segment (reserving its room, zero-filled) or checks an existing one is
 * big enough, so that touching the mapping cannot raise SIGBUS. */
static int posix_shm_size(struct rkv_port *p, const char *name, int fd, size_t bytes, int create)
{
    if (create) {
        /* A segment must fit the shared-memory filesystem's free space
         * and memory: sizing it always succeeds (it is sparse), but the
         * mapping below populates it, and a tensor bigger than that filled
         * /dev/shm for the whole host and ended in the OOM killer. The
         * store asks first (shm_room) to tell its caller; this is for
         * every other segment. */
        char why[256];
        if (posix_room(fd, bytes, why, sizeof(why)) < 0) {
            RKV_LOGE(p, "shm %s: %s", name, why);
            return -RKV_ENOMEM;
        }
        /* The check above is only a snapshot: another job may fill the
         * filesystem before this one touches its pages, and a page of a
         * sparse segment that finds no room is SIGBUS at first touch (in a
         * push, in any process that maps it). posix_fallocate takes the
         * room now, or says it is not there. */
        int e, tries = 0;
        do /* tmpfs stops a long reservation for any signal: go on with it */
            e = posix_fallocate(fd, 0, (off_t)bytes);
        while (e == EINTR && ++tries < 100);
        if (e == ENOSPC || e == ENOMEM) {
            RKV_LOGE(p,
                     "shm %s: needs %zu bytes, but the shared-memory filesystem filled up "
                     "(another job?) before they could be reserved",
                     name, bytes);
            return -RKV_ENOMEM;
        }
        /* A filesystem without fallocate (EOPNOTSUPP, EINVAL): sized as
         * before, sparse, with the check above as the only guard. */
        if (e != 0 && ftruncate(fd, (off_t)bytes) != 0) {
            RKV_LOGE(p, "shm %s: cannot size it to %zu bytes: %s", name, bytes, strerror(errno));
            return -RKV_EIO;
        }
        return 0;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        RKV_LOGE(p, "shm %s: fstat failed: %s", name, strerror(errno));
        return -RKV_EIO;
    }
    if (st.st_size < 0 || (uint64_t)st.st_size < bytes) {
        RKV_LOGE(p, "shm %s: has %lld bytes, %zu expected", name, (long long)st.st_size, bytes);
        return -RKV_EIO;
    }
    return 0;
}

static int posix_shm_map(struct rkv_port *p, const char *name, size_t bytes, int create,
                         void **addr_p)
{
    assert(p && name && addr_p);
    if (bytes == 0 || bytes > (size_t)INT64_MAX)
        return -RKV_EINVAL;
    int fd;
    int rc = posix_shm_open(p, name, create, &fd);
    if (rc < 0)
        return rc;
    rc = posix_shm_size(p, name, fd, bytes, create);
    if (rc < 0)
        goto undo_open;
    /* MAP_POPULATE: the page tables are filled now, not by a fault per 4 KiB
     * page in the first pushes and pulls through the shard (measured: the
     * faults held a co-located 1 MiB push to a fraction of memcpy). */
    void *addr = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (addr == MAP_FAILED) {
        RKV_LOGE(p, "shm %s: mmap of %zu bytes failed: %s", name, bytes, strerror(errno));
        rc = -RKV_EIO;
        goto undo_open;
    }
    /* The mapping keeps the segment alive; the descriptor is not needed. */
    close(fd);
    *addr_p = addr;
    return 0;
undo_open:
    close(fd);
    if (create)
        shm_unlink(name);
    return rc;
}

static void posix_shm_unmap(struct rkv_port *p, void *addr, size_t bytes)
{
    if (addr && munmap(addr, bytes) != 0)
        RKV_LOGW(p, "shm: munmap of %zu bytes failed: %s", bytes, strerror(errno));
}

static void posix_shm_unlink(struct rkv_port *p, const char *name)
{
    if (shm_unlink(name) != 0 && errno != ENOENT)
        RKV_LOGW(p, "shm %s: unlink failed: %s", name, strerror(errno));
}

/* ---- logging ---- */

static const char *const posix_level_names[] = {
    [RKV_LOG_ERROR] = "ERROR",
    [RKV_LOG_WARN] = "WARN",
    [RKV_LOG_INFO] = "INFO",
    [RKV_LOG_DEBUG] = "DEBUG",
};

static void posix_vlog(struct rkv_port *p, int level, const char *fmt, va_list ap)
{
    const struct posix_port *pp = p->impl;
    char line[LOG_LINE_MAX];
    uint64_t dt_ns = posix_clock_ns() - pp->t0_ns;
    const char *lvl = level >= 0 && level < (int)RKV_ARRAY_LEN(posix_level_names)
                          ? posix_level_names[level]
                          : "LOG";
    int n = snprintf(line, sizeof(line),
                     "[%llu.%06llu] %s %s: ", (unsigned long long)(dt_ns / NS_PER_SEC),
                     (unsigned long long)(dt_ns % NS_PER_SEC / 1000), lvl, p->node);
    if (n < 0)
        return;
    size_t len = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
    int m = vsnprintf(line + len, sizeof(line) - len, fmt, ap);
    if (m > 0)
        len += (size_t)m < sizeof(line) - len ? (size_t)m : sizeof(line) - len - 1;
    /* Room for the newline: overwrite the last character of a cut message. */
    if (len >= sizeof(line) - 1)
        len = sizeof(line) - 2;
    line[len++] = '\n';
    /* One write() per line keeps lines of processes sharing stderr whole:
     * LOG_LINE_MAX < PIPE_BUF, and such pipe writes are atomic. */
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}

/* ---- process liveness ---- */

/* A process id is its pid (below 2^22, Linux's pid_max limit) and, above
 * it, its start time in clock ticks since boot: a pid alone named another
 * process once reused, or in another pid namespace sharing /dev/shm (a
 * container started with --ipc=host), which was then taken for the one
 * that made a segment or holds a lock. */
#define PROC_PID_BITS RKV_PORT_PROC_PID_BITS

/* From /proc/PID/stat: its state letter and start time (field 22); -1
 * without /proc or that process. */
static int posix_proc_stat(pid_t pid, char *state, uint64_t *start)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *s = strrchr(buf, ')'); /* "pid (comm) S ...": comm may hold ')' */
    if (!s || s[1] != ' ' || !s[2])
        return -1;
    *state = s[2];
    s += 2;
    for (int field = 3; field < 22; field++) {
        s = strchr(s, ' ');
        if (!s)
            return -1;
        s++;
    }
    char *end;
    *start = strtoull(s, &end, 10);
    return end == s ? -1 : 0;
}

static uint64_t posix_task_self(struct rkv_port *p)
{
    (void)p;
    uint64_t t = (uint64_t)(uintptr_t)pthread_self();
    return t ? t : 1;
}

static uint64_t posix_proc_self(struct rkv_port *p)
{
    struct posix_port *pp = p->impl;
    /* Cached, refreshed at fork (rkv_port_pid): a co-located client asks
     * at every row lock, and getpid() is a system call. */
    pid_t pid = (pid_t)rkv_port_pid();
    if (atomic_load_explicit(&pp->self_pid, memory_order_acquire) == pid)
        return atomic_load_explicit(&pp->self_id, memory_order_relaxed);
    char state;
    uint64_t start = 0, id = (uint64_t)pid;
    if (posix_proc_stat(pid, &state, &start) == 0 && start < (1ull << (64 - PROC_PID_BITS)))
        id |= start << PROC_PID_BITS;
    atomic_store_explicit(&pp->self_id, id, memory_order_relaxed);
    atomic_store_explicit(&pp->self_pid, pid, memory_order_release);
    return id;
}

/* Threads of process pid that run (their state in /proc/PID/task/TID/stat
 * is neither Z nor X), 0 if unknown: a process that is exiting shows its
 * other threads for a moment as they end. */
static int posix_proc_live_threads(pid_t pid)
{
    char dir[64];
    snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        char path[64 + sizeof(e->d_name) + 8], buf[256];
        snprintf(path, sizeof(path), "%s/%s/stat", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t len = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[len] = 0;
        const char *st = strrchr(buf, ')');
        n += st && st[1] == ' ' && st[2] && st[2] != 'Z' && st[2] != 'X';
    }
    closedir(d);
    return n;
}

/* A killed process its parent has not reaped yet is a zombie: kill(pid, 0)
 * still succeeds, but it holds nothing any more, so /proc's state decides;
 * and a pid whose process started at another time is another process. */
static int posix_proc_alive(struct rkv_port *p, uint64_t id)
{
    (void)p;
    pid_t pid = (pid_t)(id & ((1u << PROC_PID_BITS) - 1));
    uint64_t start = id >> PROC_PID_BITS;
    if (pid <= 0)
        return 0;
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 0;
    char state;
    uint64_t now_start;
    if (posix_proc_stat(pid, &state, &now_start) < 0)
        return 1; /* no /proc: kill() said it exists */
    if (start != 0 && start != now_start)
        return 0;
    if (state == 'Z' && posix_proc_live_threads(pid) > 0)
        return 1; /* its main thread ended (pthread_exit), its others run: /proc says 'Z' */
    return state != 'Z' && state != 'X';
}

static uint64_t posix_proc_ns(struct rkv_port *p)
{
    (void)p;
    struct stat st;
    if (stat("/proc/self/ns/pid", &st) < 0)
        return 0;
    return (uint64_t)st.st_ino;
}

/* ---- lifetime ---- */

static void posix_destroy(struct rkv_port *p)
{
    if (!p)
        return;
    free(p->impl);
}

/* Physical memory (sysconf), 0 if the host does not say. */
static const struct rkv_port_ops posix_ops = {
    .name = "posix",
    .task_start = posix_task_start,
    .task_join = posix_task_join,
    .mutex_create = posix_mutex_create,
    .mutex_lock = posix_mutex_lock,
    .mutex_trylock = posix_mutex_trylock,
    .mutex_unlock = posix_mutex_unlock,
    .mutex_destroy = posix_mutex_destroy,
    .mutex_held = posix_mutex_held,
    .cond_create = posix_cond_create,
    .cond_wait = posix_cond_wait,
    .cond_signal = posix_cond_signal,
    .cond_broadcast = posix_cond_broadcast,
    .cond_destroy = posix_cond_destroy,
    .now_ns = posix_now_ns,
    .sleep_ns = posix_sleep_ns,
    .yield = posix_yield,
    .shm_map = posix_shm_map,
    .shm_unmap = posix_shm_unmap,
    .shm_unlink = posix_shm_unlink,
    .vlog = posix_vlog,
    .proc_self = posix_proc_self,
    .task_self = posix_task_self,
    .proc_alive = posix_proc_alive,
    .proc_ns = posix_proc_ns,
    .mem_bytes = posix_mem_bytes,
    .shm_room = posix_shm_room,
    .fd_room = posix_fd_room,
    .destroy = posix_destroy,
};

/* FNV-1a: the node name only picks an rng stream, it needs no strength. */
static uint64_t posix_hash_name(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ULL;
    return h;
}

int rkv_port_posix_create(const char *node, int log_level, uint64_t seed, struct rkv_port **port_p)
{
    assert(node && port_p);
    struct posix_port *pp = calloc(1, sizeof(*pp));
    if (!pp)
        return -RKV_ENOMEM;
    struct rkv_port *p = &pp->base;
    p->ops = &posix_ops;
    snprintf(p->node, sizeof(p->node), "%s", node);
    p->log_level = log_level;
    rkv_rng_seed(&p->rng, seed, posix_hash_name(p->node));
    p->impl = pp;
    pp->t0_ns = posix_clock_ns();
    *port_p = p;
    return 0;
}
