/* The SimGrid port: tasks are actors on the node's host, locks and
 * condition variables are SimGrid's, time is the simulated clock, and
 * "shared memory" is a buffer the world hands to every node of one machine.
 *
 * Nothing here may block the process (a POSIX sleep or a pthread mutex would
 * stall every simulated node at once): every wait is a SimGrid simcall. */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <simgrid/actor.h>
#include <simgrid/engine.h>
#include <simgrid/mutex.h>

#include "sim/backend/sim.h"
#include "sim/backend/sim_int.h"
#include "util/util.h"

struct sim_port {
    struct rkv_port base;
    struct sim_world *w;
    sg_host_t host;
    /* The name the node listens and is reached under: its machine's ("mk"),
     * which is the host's name unless machines share one host (loopback). */
    char addr[32];
    uint32_t machine, tid;
    struct sim_nic *nic;     /* tasks drain their puts on it before they end */
    struct sim_timer *timer; /* wakes timed cond waits (NULL: none yet) */
    void (*nic_drain)(struct sim_nic *n);
    void (*nic_crash)(struct sim_nic *n);
    sg_actor_t actors[16]; /* every actor of this node, for a crash */
    uint32_t n_actors;
    /* slow_cpu faults: how many times longer CPU work takes at a time. */
    double (*cpu_factor)(void *user, double t_s);
    void *cpu_user;
    uint64_t slowed_rows; /* rows handled while the factor was above 1 */
    struct sp_map *maps;
    uint32_t n_maps, cap_maps;
};

struct rkv_task {
    sg_actor_t actor;
    struct sim_port *port;
    rkv_task_fn fn;
    void *arg;
};

/* Not a SimGrid mutex: every sg_mutex_lock and unlock is a simcall, a
 * switch to the maestro and back, and the store takes its locks around
 * nearly every step (a third of the context switches of a 1,024-node run).
 * Actors are cooperative, so a free lock is taken with no simcall; only an
 * actor that finds it held waits (on a sim_cv), and an unlock with waiters
 * wakes one, which takes the lock if it is still free when it runs. */
struct rkv_mutex {
    sg_actor_t owner;    /* the holding actor, NULL when free */
    struct sim_cv queue; /* actors waiting for it */
    struct sim_world *w; /* measured CPU is settled around every lock */
};

struct rkv_cond {
    struct sim_cv cv;
    struct sim_world *w;
    struct sim_port *p; /* its timer (sim_port_set_timer) */
};

/* A named segment: every node of the machine that maps it sees the same
 * bytes; it lives until unlinked and unmapped by all.
 *
 * With measured CPU each map is a mapping of its own of one memfd, as in
 * the real processes: a node's first touch of a page then faults in its own
 * page table and that CPU is charged to it. One allocation shared by every
 * node faults once per page for all of them, and a phase's first requests
 * (servers of one machine touching the shard's pages, each for itself) came
 * out cheaper than in the real run (sim/README.md, seventh round). */
struct sim_shm {
    char name[128];
    void *addr; /* the shared allocation; NULL with a memfd */
    int fd;     /* the memfd, or -1 */
    size_t bytes;
    void **views; /* the memfd's mappings, one per map */
    uint32_t maps;
    int unlinked;
    int in_arena;                /* addr lies in the world's shm_arena */
    struct sim_shm *next, *prev; /* the world's list */
    struct sim_shm *hnext;       /* its name's bucket */
};

#define SIM_SHM_BUCKETS 16384u

/* A map this node made: unmap finds its segment here, among the node's
 * few, instead of among every segment of the world. */
struct sp_map {
    void *addr;
    struct sim_shm *s;
};

static void sp_shm_free_all(struct sim_world *w);

static struct sim_port *sp_of(struct rkv_port *p)
{
    return (struct sim_port *)p->impl;
}

/* ---- tasks ---- */

static void sp_task_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    struct rkv_task *t = sg_actor_self_get_data();
    sim_cpu_mark(t->port->w);
    t->fn(t->arg);
    if (t->port->nic)
        t->port->nic_drain(t->port->nic);
}

static int sp_task_start(struct rkv_port *p, const char *name, rkv_task_fn fn, void *arg,
                         struct rkv_task **task_p)
{
    sim_world_mem_tick(sp_of(p)->w); /* a starting node: no network event yet */
    struct rkv_task *t = calloc(1, sizeof(*t));
    if (!t)
        return -RKV_ENOMEM;
    char full[64];
    snprintf(full, sizeof(full), "%s/%s", p->node, name ? name : "task");
    t->fn = fn;
    t->arg = arg;
    t->port = sp_of(p);
    t->actor = sg_actor_init(full, sp_of(p)->host);
    sg_actor_set_data(t->actor, t);
    /* Joined later: keep the actor object alive past its end. */
    sg_actor_ref(t->actor);
    sim_port_add_actor(p, t->actor);
    sim_cpu_settle(t->port->w);
    sg_actor_start(t->actor, sp_task_main, 0, NULL);
    sim_cpu_mark(t->port->w);
    *task_p = t;
    return 0;
}

static int sp_task_join(struct rkv_port *p, struct rkv_task *t)
{
    sim_cpu_settle(sp_of(p)->w);
    sg_actor_join(t->actor, -1);
    sim_cpu_mark(sp_of(p)->w);
    sg_actor_unref(t->actor);
    free(t);
    return 0;
}

/* ---- mutex and condition variable ---- */

static int sp_mutex_create(struct rkv_port *p, struct rkv_mutex **m_p)
{
    struct rkv_mutex *m = malloc(sizeof(*m));
    if (!m)
        return -RKV_ENOMEM;
    *m = (struct rkv_mutex){.owner = NULL, .w = sp_of(p)->w};
    *m_p = m;
    return 0;
}

static void sp_mutex_take(struct rkv_mutex *m)
{
    sg_actor_t self = sg_actor_self();
    assert(m->owner != self); /* not recursive */
    while (m->owner)
        sim_cv_wait(m->w, &m->queue, NULL, NULL, -1);
    m->owner = self;
}

/* Also sim_cv_wait's release hook: drops the lock of a cond wait. */
static void sp_mutex_release(void *arg)
{
    struct rkv_mutex *m = arg;
    m->owner = NULL;
    if (m->queue.head)
        sim_cv_signal(&m->queue);
}

static void sp_mutex_lock(struct rkv_mutex *m)
{
    sim_cpu_settle(m->w);
    sp_mutex_take(m);
    sim_cpu_mark(m->w);
}

static int sp_mutex_trylock(struct rkv_mutex *m)
{
    assert(m->owner != sg_actor_self()); /* not recursive */
    if (m->owner)
        return 0;
    m->owner = sg_actor_self();
    return 1;
}

static void sp_mutex_unlock(struct rkv_mutex *m)
{
    assert(m->owner == sg_actor_self());
    sim_cpu_settle(m->w);
    sp_mutex_release(m);
    sim_cpu_mark(m->w);
}

/* Actors run one at a time, so the owner field needs no atomics. */
static int sp_mutex_held(struct rkv_mutex *m)
{
    return m->owner == sg_actor_self();
}

static void sp_mutex_destroy(struct rkv_mutex *m)
{
    if (!m)
        return;
    assert(!m->owner && !m->queue.head);
    free(m);
}

static int sp_cond_create(struct rkv_port *p, struct rkv_cond **c_p)
{
    struct rkv_cond *c = calloc(1, sizeof(*c));
    if (!c)
        return -RKV_ENOMEM;
    c->w = sp_of(p)->w;
    c->p = sp_of(p);
    *c_p = c;
    return 0;
}

/* Whether the running actor holds m (a signaller that does: wait morphing). */
static int sp_mutex_held_by_me(void *m)
{
    /* maestro (a kernel timer's delivery) holds no lock: an unowned one is
     * not held by it */
    sg_actor_t self = sg_actor_self();
    return self && ((struct rkv_mutex *)m)->owner == self;
}

void sim_port_cond_ring(struct rkv_cond *c)
{
    sim_cv_signal(&c->cv);
}

static int sp_cond_wait(struct rkv_cond *c, struct rkv_mutex *m, uint64_t timeout_ns)
{
    double t = timeout_ns == UINT64_MAX ? -1 : (double)timeout_ns * 1e-9;
    assert(m->owner == sg_actor_self());
    sim_cpu_settle(c->w);
    int timed_out = sim_cv_wait_then(c->w, &c->cv, sp_mutex_release, m, t, &m->queue,
                                     sp_mutex_held_by_me, m, c->p->timer);
    sp_mutex_take(m);
    sim_cpu_mark(c->w);
    return timed_out ? -RKV_ETIMEDOUT : 0;
}

static void sp_cond_signal(struct rkv_cond *c)
{
    sim_cpu_settle(c->w);
    sim_cv_signal(&c->cv);
    sim_cpu_mark(c->w);
}

static void sp_cond_broadcast(struct rkv_cond *c)
{
    sim_cpu_settle(c->w);
    sim_cv_broadcast(&c->cv);
    sim_cpu_mark(c->w);
}

static void sp_cond_destroy(struct rkv_cond *c)
{
    assert(!c || !c->cv.head);
    free(c);
}

/* ---- time ---- */

/* With measured CPU, the node code that ran since the last SimGrid call is
 * charged first: a real thread that reads the clock sees the time its own
 * work took. Without it, a phase's closing timestamp missed the phase's
 * last stretch of node code (all of it in a phase that makes no SimGrid
 * call, such as pushes and pulls through the shared-memory shard), which
 * was then charged after the phase had ended. */
static uint64_t sp_now_ns(struct rkv_port *p)
{
    struct sim_world *w = sp_of(p)->w;
    if (w->cpu_measured && sg_actor_self()) {
        sim_cpu_settle(w);
        uint64_t t = (uint64_t)llround(simgrid_get_clock() * 1e9);
        sim_cpu_mark(w);
        return t;
    }
    return (uint64_t)llround(simgrid_get_clock() * 1e9);
}

static void sp_sleep_ns(struct rkv_port *p, uint64_t ns)
{
    sim_cpu_settle(sp_of(p)->w);
    sg_actor_sleep_for((double)ns * 1e-9);
    sim_cpu_mark(sp_of(p)->w);
}

static void sp_yield(struct rkv_port *p)
{
    /* A spin on a row lock must let simulated time pass, or the holder (who
     * may be waiting for time to advance) never gets to release it. */
    sim_cpu_settle(sp_of(p)->w);
    sg_actor_sleep_for(1e-9);
    sim_cpu_mark(sp_of(p)->w);
}

/* A node's process is its actors: a lock is held by one of them, and a
 * crashed node's actors are killed (sim_port_crash), so the holder's actor
 * is what lives or not. */
static uint64_t sp_proc_self(struct rkv_port *p)
{
    (void)p;
    return (uint64_t)sg_actor_self_get_pid();
}

/* The actor: the twin's tasks share one thread (maestro's pid 0 is 1). */
static uint64_t sp_task_self(struct rkv_port *p)
{
    (void)p;
    return (uint64_t)sg_actor_self_get_pid() + 1;
}

static int sp_proc_alive(struct rkv_port *p, uint64_t id)
{
    (void)p;
    return id != 0 && sg_actor_by_pid((aid_t)id) != NULL;
}

/* Every actor's pid is of this one process. */
static uint64_t sp_proc_ns(struct rkv_port *p)
{
    (void)p;
    return 1;
}

static void sp_handler_work(struct rkv_port *p, uint64_t rows)
{
    struct sim_port *sp = sp_of(p);
    double ns = (double)rows * sp->w->row_cost_ns;
    if (ns <= 0)
        return;
    double factor = sp->cpu_factor ? sp->cpu_factor(sp->cpu_user, simgrid_get_clock()) : 1;
    if (factor > 1) {
        ns *= factor;
        sp->slowed_rows += rows;
    }
    double t0 = simgrid_get_clock();
    /* Work, not a sleep: the nodes of one machine share its cores. */
    sim_cpu_settle(sp->w);
    sim_cpu_run(sp->w, sp->host, ns * 1e-9);
    sim_cpu_mark(sp->w);
    sim_world_trace(sp->w, "handler", "cpu", sp->machine, sp->tid, t0, simgrid_get_clock(), 0);
}

/* ---- shared memory ---- */

static uint32_t sp_shm_bucket(const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *c = name; *c; c++)
        h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
    return (uint32_t)(h % SIM_SHM_BUCKETS);
}

static struct sim_shm *sp_shm_find(struct sim_world *w, const char *name)
{
    if (!w->shm_buckets)
        return NULL;
    for (struct sim_shm *s = w->shm_buckets[sp_shm_bucket(name)]; s; s = s->hnext)
        if (!s->unlinked && strcmp(s->name, name) == 0)
            return s;
    return NULL;
}

/* Records that this node mapped s at addr. */
static int sp_map_add(struct sim_port *sp, void *addr, struct sim_shm *s)
{
    if (sp->n_maps == sp->cap_maps) {
        uint32_t cap = sp->cap_maps ? 2 * sp->cap_maps : 8;
        struct sp_map *m = realloc(sp->maps, (size_t)cap * sizeof(*m));
        if (!m)
            return -RKV_ENOMEM;
        sp->maps = m;
        sp->cap_maps = cap;
    }
    sp->maps[sp->n_maps++] = (struct sp_map){.addr = addr, .s = s};
    return 0;
}

/* One more map of s: the shared allocation, or a mapping of its own. */
static int sp_shm_view(struct sim_shm *s, void **addr_p)
{
    if (s->fd < 0) {
        s->maps++;
        *addr_p = s->addr;
        return 0;
    }
    void **v = realloc(s->views, (s->maps + 1) * sizeof(*v));
    if (!v)
        return -RKV_ENOMEM;
    s->views = v;
    void *a = mmap(NULL, s->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
    if (a == MAP_FAILED)
        return -RKV_ENOMEM;
    v[s->maps++] = a;
    *addr_p = a;
    return 0;
}

/* The address space every segment of a run without measured CPU is carved
 * from. A mapping per segment did not merge with its neighbours (actor
 * stacks, mapped without MAP_NORESERVE, came between them): two mappings
 * per machine, and a cluster of 33,000 machines (1 server and 1 worker
 * each) passed vm.max_map_count (65,530) and ended in SimGrid's
 * std::bad_alloc. Reserved, not committed: pages are made on first touch,
 * as a real segment's. */
#define SIM_SHM_ARENA_BYTES (1ull << 40)

/* bytes of the arena, page-aligned, or NULL (no reservation: the host
 * refuses one so large, as with vm.overcommit_memory=2; or it is used up:
 * a mapping of its own then). A freed segment's pages go back to the
 * kernel (sp_shm_free); its addresses are not reused. */
static void *sp_shm_arena(struct sim_world *w, size_t bytes)
{
    if (!w->shm_arena_tried) {
        w->shm_arena_tried = 1;
        void *a = mmap(NULL, SIM_SHM_ARENA_BYTES, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (a != MAP_FAILED) {
            w->shm_arena = a;
            w->shm_arena_len = SIM_SHM_ARENA_BYTES;
            w->shm_free_all = sp_shm_free_all; /* which unmaps it */
            /* Small pages, as each segment had in a mapping of its own: on
             * a host whose transparent huge pages are "always", a touch
             * would make 2 MiB resident over ~13 machines' segments. And
             * no 1 TiB in a core dump. */
            (void)madvise(a, SIM_SHM_ARENA_BYTES, MADV_NOHUGEPAGE);
            (void)madvise(a, SIM_SHM_ARENA_BYTES, MADV_DONTDUMP);
        }
    }
    long pg = sysconf(_SC_PAGESIZE); /* 16 or 64 KiB on some arm64 and ppc64le kernels */
    size_t page = pg > 0 ? (size_t)pg : 4096;
    if (!w->shm_arena || bytes > w->shm_arena_len - w->shm_arena_used)
        return NULL;
    size_t len = (bytes + page - 1) & ~(page - 1);
    if (len > w->shm_arena_len - w->shm_arena_used)
        return NULL;
    void *p = w->shm_arena + w->shm_arena_used;
    w->shm_arena_used += len;
    return p;
}

static struct sim_shm *sp_shm_new(struct sim_world *w, const char *name, size_t bytes)
{
    struct sim_shm *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->fd = -1;
    if (!w->cpu_measured && (s->addr = sp_shm_arena(w, bytes ? bytes : 1)) != NULL) {
        s->in_arena = 1;
    } else if (!w->cpu_measured) {
        /* Pages on demand, as a real segment's: a machine's segments are
         * sized for their most (about 160 KiB each) and mostly untouched in
         * a payload-less run; calloc made them resident (26 KiB a node). */
        s->addr = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (s->addr == MAP_FAILED) {
            s->addr = NULL;
            goto free_s;
        }
    } else if ((s->fd = memfd_create("rkv-twin-shm", MFD_CLOEXEC)) < 0 ||
               ftruncate(s->fd, (off_t)bytes) < 0) {
        goto close_fd;
    }
    strcpy(s->name, name);
    s->bytes = bytes;
    return s;
close_fd:
    if (s->fd >= 0)
        close(s->fd);
free_s:
    free(s);
    return NULL;
}

static void sp_shm_free(struct sim_shm *s)
{
    for (uint32_t i = 0; i < s->maps && s->fd >= 0; i++)
        munmap(s->views[i], s->bytes);
    if (s->fd >= 0)
        close(s->fd);
    free(s->views);
    if (s->addr && s->in_arena) /* the pages back, the addresses not (no split mapping) */
        madvise(s->addr, s->bytes ? s->bytes : 1, MADV_DONTNEED);
    else if (s->addr)
        munmap(s->addr, s->bytes ? s->bytes : 1);
    free(s);
}

static int sp_shm_map(struct rkv_port *p, const char *name, size_t bytes, int create, void **addr_p)
{
    struct sim_world *w = sp_of(p)->w;
    struct sim_shm *s = sp_shm_find(w, name);
    if (create && s)
        return -RKV_EEXIST;
    if (!create) {
        if (!s)
            return -RKV_ENOTENSOR;
        if (s->bytes < bytes) {
            RKV_LOGE(p, "shm %s: has %zu bytes, %zu expected", name, s->bytes, bytes);
            return -RKV_EIO;
        }
        if (sp_map_add(sp_of(p), NULL, s) < 0) /* room first: a view cannot be undone */
            return -RKV_ENOMEM;
        sp_of(p)->n_maps--;
        int rc = sp_shm_view(s, addr_p);
        if (rc == 0)
            sp_map_add(sp_of(p), *addr_p, s);
        return rc;
    }
    if (strlen(name) >= sizeof(s->name) || bytes == 0)
        return -RKV_EINVAL;
    if (!w->shm_buckets && !(w->shm_buckets = calloc(SIM_SHM_BUCKETS, sizeof(*w->shm_buckets))))
        return -RKV_ENOMEM;
    if (sp_map_add(sp_of(p), NULL, NULL) < 0)
        return -RKV_ENOMEM;
    sp_of(p)->n_maps--;
    if (!(s = sp_shm_new(w, name, bytes)))
        return -RKV_ENOMEM;
    int rc = sp_shm_view(s, addr_p);
    if (rc < 0) {
        sp_shm_free(s);
        return rc;
    }
    sp_map_add(sp_of(p), *addr_p, s);
    s->next = w->shms;
    if (s->next)
        s->next->prev = s;
    w->shms = s;
    w->shm_free_all = sp_shm_free_all;
    uint32_t b = sp_shm_bucket(name);
    s->hnext = w->shm_buckets[b];
    w->shm_buckets[b] = s;
    return 0;
}

static void sp_shm_release(struct sim_world *w, struct sim_shm *s)
{
    if (!s->unlinked || s->maps)
        return;
    if (s->prev)
        s->prev->next = s->next;
    else
        w->shms = s->next;
    if (s->next)
        s->next->prev = s->prev;
    struct sim_shm **pp = &w->shm_buckets[sp_shm_bucket(s->name)];
    while (*pp != s)
        pp = &(*pp)->hnext;
    *pp = s->hnext;
    sp_shm_free(s);
}

/* Drops the map at addr from s; 0 when addr is none of s's. */
static int sp_shm_drop(struct sim_shm *s, void *addr)
{
    if (!s->maps)
        return 0;
    if (s->fd < 0) {
        if (s->addr != addr)
            return 0;
        s->maps--;
        return 1;
    }
    for (uint32_t i = 0; i < s->maps; i++) {
        if (s->views[i] == addr) {
            munmap(addr, s->bytes);
            s->views[i] = s->views[--s->maps];
            return 1;
        }
    }
    return 0;
}

static void sp_shm_unmap(struct rkv_port *p, void *addr, size_t bytes)
{
    (void)bytes;
    struct sim_port *sp = sp_of(p);
    for (uint32_t i = sp->n_maps; i-- > 0;) {
        struct sim_shm *s = sp->maps[i].s;
        if (sp->maps[i].addr != addr || !sp_shm_drop(s, addr))
            continue;
        sp->maps[i] = sp->maps[--sp->n_maps];
        sp_shm_release(sp->w, s);
        return;
    }
}

void sim_world_shm_unlink(struct sim_world *w, const char *name)
{
    struct sim_shm *s = sp_shm_find(w, name);
    if (s) {
        s->unlinked = 1;
        sp_shm_release(w, s);
    }
}

static void sp_shm_unlink(struct rkv_port *p, const char *name)
{
    sim_world_shm_unlink(sp_of(p)->w, name);
}

static void sp_shm_free_all(struct sim_world *w)
{
    while (w->shms) {
        struct sim_shm *s = w->shms;
        w->shms = s->next;
        sp_shm_free(s);
    }
    free(w->shm_buckets);
    w->shm_buckets = NULL;
    if (w->shm_arena)
        munmap(w->shm_arena, w->shm_arena_len);
    w->shm_arena = NULL;
    w->shm_arena_len = w->shm_arena_used = 0;
    w->shm_arena_tried = 0;
}

/* ---- logging and lifetime ---- */

/* Shapes are few (one per log call site that fires many times); beyond
 * SIM_LOG_SHAPES lines print unfolded. */
#define SIM_LOG_SHAPES 256
#define SIM_LOG_SHAPE_BYTES 160

struct sim_log_shape {
    uint64_t key; /* 0: free slot */
    int level;
    uint64_t seen;
    double last_t;      /* the last folded line's simulated time */
    char last_node[32]; /* and its node */
    char text[SIM_LOG_SHAPE_BYTES];
};

struct sim_log_fold {
    struct sim_log_shape slot[SIM_LOG_SHAPES];
    uint32_t used;
};

int sim_log_fold_start(struct sim_world *w)
{
    if (!w->log_fold)
        w->log_fold = calloc(1, sizeof(*w->log_fold));
    return w->log_fold ? 0 : -RKV_ENOMEM;
}

static const char *const sp_level_names[] = {"ERROR", "WARN", "INFO", "DEBUG"};

static const char *sp_level_name(int level)
{
    return level >= 0 && level < 4 ? sp_level_names[level] : "LOG";
}

/* Prints the count of each shape's lines not printed, then forgets them. */
void sim_log_fold_end(struct sim_world *w)
{
    struct sim_log_fold *f = w->log_fold;
    if (!f)
        return;
    for (uint32_t i = 0; i < SIM_LOG_SHAPES; i++) {
        const struct sim_log_shape *sh = &f->slot[i];
        if (sh->key && sh->seen > SIM_LOG_FOLD_SHOWN)
            fprintf(stderr,
                    "[sim %.9f] %s twin: %llu more lines like \"%s\" (the last from %s); "
                    "--log-level 2 prints each\n",
                    sh->last_t, sp_level_name(sh->level),
                    (unsigned long long)(sh->seen - SIM_LOG_FOLD_SHOWN), sh->text, sh->last_node);
    }
    free(f);
    w->log_fold = NULL;
}

/* 1 when msg is to be printed: one of the first of its shape, or no
 * room to count it. Tables in slot order are printed at the end, so the
 * summary lines come in a fixed order for a given run. */
static int sp_log_fold(struct sim_log_fold *f, int level, const char *msg, const char *node)
{
    char text[SIM_LOG_SHAPE_BYTES];
    size_t n = 0;
    uint64_t key = 0xcbf29ce484222325ull ^ (uint64_t)(level + 1);
    for (const char *c = msg; *c; c++) {
        char ch = *c;
        if (ch >= '0' && ch <= '9') {
            while (c[1] >= '0' && c[1] <= '9')
                c++;
            ch = '#';
        }
        key = (key ^ (unsigned char)ch) * 0x100000001b3ull;
        if (n + 1 < sizeof(text))
            text[n++] = ch;
    }
    text[n] = 0;
    key |= 1; /* never 0, the free slot's mark */
    for (uint32_t i = 0, h = (uint32_t)(key >> 32) % SIM_LOG_SHAPES; i < SIM_LOG_SHAPES;
         i++, h = (h + 1) % SIM_LOG_SHAPES) {
        struct sim_log_shape *sh = &f->slot[h];
        if (!sh->key) {
            *sh = (struct sim_log_shape){.key = key, .level = level, .seen = 1};
            memcpy(sh->text, text, n + 1);
            f->used++;
            return 1;
        }
        if (sh->key == key && sh->level == level) {
            if (++sh->seen <= SIM_LOG_FOLD_SHOWN)
                return 1;
            sh->last_t = simgrid_get_clock();
            snprintf(sh->last_node, sizeof(sh->last_node), "%s", node);
            return 0;
        }
    }
    return 1; /* full: unfolded */
}

void sim_world_log_line(struct sim_world *w, int level, const char *node, const char *msg)
{
    if (w->log_fold && !sp_log_fold(w->log_fold, level, msg, node))
        return;
    fprintf(stderr, "[sim %.9f] %s %s: %s\n", simgrid_get_clock(), sp_level_name(level), node, msg);
}

static void sp_vlog(struct rkv_port *p, int level, const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    sim_world_log_line(sp_of(p)->w, level, p->node, msg);
}

static void sp_destroy(struct rkv_port *p)
{
    if (!p)
        return;
    /* Maps left (a crashed node's) stay counted in their segments, which
     * the world frees at its end. */
    free(sp_of(p)->maps);
    free(p->impl);
}

static const struct rkv_port_ops sim_port_ops = {
    .name = "sim",
    .task_start = sp_task_start,
    .task_join = sp_task_join,
    .mutex_create = sp_mutex_create,
    .mutex_lock = sp_mutex_lock,
    .mutex_trylock = sp_mutex_trylock,
    .mutex_unlock = sp_mutex_unlock,
    .mutex_destroy = sp_mutex_destroy,
    .mutex_held = sp_mutex_held,
    .cond_create = sp_cond_create,
    .cond_wait = sp_cond_wait,
    .cond_signal = sp_cond_signal,
    .cond_broadcast = sp_cond_broadcast,
    .cond_destroy = sp_cond_destroy,
    .now_ns = sp_now_ns,
    .sleep_ns = sp_sleep_ns,
    .yield = sp_yield,
    .shm_map = sp_shm_map,
    .shm_unmap = sp_shm_unmap,
    .shm_unlink = sp_shm_unlink,
    .vlog = sp_vlog,
    .handler_work = sp_handler_work,
    .proc_self = sp_proc_self,
    .task_self = sp_task_self,
    .proc_alive = sp_proc_alive,
    .proc_ns = sp_proc_ns,
    .destroy = sp_destroy,
};

void sim_port_set_cpu_factor(struct rkv_port *p, double (*fn)(void *user, double t_s), void *user)
{
    struct sim_port *sp = sp_of(p);
    sp->cpu_factor = fn;
    sp->cpu_user = user;
}

uint64_t sim_port_slowed_rows(struct rkv_port *p)
{
    return sp_of(p)->slowed_rows;
}

int sim_port_create(struct sim_world *w, sg_host_t host, const char *node, int log_level,
                    uint64_t seed, uint32_t machine, uint32_t tid, struct rkv_port **port_p)
{
    struct sim_port *sp = calloc(1, sizeof(*sp));
    if (!sp)
        return -RKV_ENOMEM;
    sp->base.ops = &sim_port_ops;
    snprintf(sp->base.node, sizeof(sp->base.node), "%s", node);
    sp->base.log_level = log_level;
    rkv_rng_seed(&sp->base.rng, seed, tid);
    sp->base.impl = sp;
    sp->w = w;
    sp->host = host;
    snprintf(sp->addr, sizeof(sp->addr), "%s", sg_host_get_name(host));
    sp->machine = machine;
    sp->tid = tid;
    *port_p = &sp->base;
    return 0;
}

void sim_port_add_actor(struct rkv_port *p, sg_actor_t a)
{
    struct sim_port *sp = sp_of(p);
    /* A node has a handful (main, engine, NIC, NIC timer, durable task): an
     * actor left out would survive the node's crash. */
    assert(sp->n_actors < sizeof(sp->actors) / sizeof(sp->actors[0]));
    if (sp->n_actors < sizeof(sp->actors) / sizeof(sp->actors[0]))
        sp->actors[sp->n_actors++] = a;
}

/* The node dies: every actor of it stops where it is (a process killed by
 * the OS); its memory is abandoned, as a crashed process's would be. */
void sim_port_crash(struct rkv_port *p)
{
    struct sim_port *sp = sp_of(p);
    if (sp->nic)
        sp->nic_crash(sp->nic);
    sg_actor_t self = sg_actor_self();
    for (uint32_t i = 0; i < sp->n_actors; i++)
        if (sp->actors[i] != self)
            sg_actor_kill(sp->actors[i]);
    sp->n_actors = 0;
    /* Its NIC's timer actor may be dead now: an actor that goes on (self)
     * waits with timeouts of its own. */
    sp->timer = NULL;
}

void sim_port_set_nic(struct rkv_port *p, struct sim_nic *n, void (*drain)(struct sim_nic *n),
                      void (*crash)(struct sim_nic *n))
{
    assert(n && drain && crash);
    struct sim_port *sp = sp_of(p);
    sp->nic = n;
    sp->nic_drain = drain;
    sp->nic_crash = crash;
}

void sim_port_set_timer(struct rkv_port *p, struct sim_timer *t)
{
    sp_of(p)->timer = t;
}

struct sim_nic *sim_port_nic(struct rkv_port *p)
{
    return sp_of(p)->nic;
}

struct sim_world *sim_port_world(struct rkv_port *p)
{
    assert(p->ops == &sim_port_ops);
    return sp_of(p)->w;
}

sg_host_t sim_port_host(struct rkv_port *p)
{
    return sp_of(p)->host;
}

void sim_port_set_addr(struct rkv_port *p, const char *addr)
{
    snprintf(sp_of(p)->addr, sizeof(sp_of(p)->addr), "%s", addr);
}

const char *sim_port_addr(struct rkv_port *p)
{
    return sp_of(p)->addr;
}

uint32_t sim_port_machine(struct rkv_port *p)
{
    return sp_of(p)->machine;
}

uint32_t sim_port_tid(struct rkv_port *p)
{
    return sp_of(p)->tid;
}
