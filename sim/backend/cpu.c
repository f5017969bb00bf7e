/* Measured CPU in the twin (sim: cpu measured, set by a calibration file):
 * the time node code really takes between two SimGrid calls on this host
 * (workload value generation, oracle checks, engine bookkeeping, handler
 * copies, the shared-memory path) is charged to the node's simulated host as
 * work, so it competes for the machine's cores as it does in a real run. A
 * model with per-row and per-message constants leaves all of that out, and
 * on a loopback host it is most of the time a phase takes.
 *
 * Every SimGrid call a node makes through the port or the NIC is bracketed:
 * sim_cpu_settle() before it charges what ran since the last mark, and
 * sim_cpu_mark() after it restarts the count, so neither the simulator's own
 * time nor the NIC actors' (which stand for the kernel and the network, paid
 * for by msg_cost_ns and the link model) is charged to anybody.
 *
 * The clock is CLOCK_MONOTONIC: 24-88 ns a read here against 240-350 ns of
 * thread CPU for the thread CPU clock, which would add itself to every
 * burst (bursts are a few microseconds). But the monotonic clock also counts
 * the time this process was preempted by other work on the host: under load
 * a burst now and then took milliseconds (one pull 4-8 ms instead of 50 us;
 * colocated's first phase predicted 14 to 475 ms from one run to the next).
 * So the thread CPU clock is read too, outside the monotonic interval, and a
 * burst longer than SIM_CPU_LONG_NS is charged the smaller of the two: a
 * preemption always makes a burst long, and in a long burst the thread
 * clock's own cost is noise. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>

#include <simgrid/actor.h>
#include <simgrid/engine.h>
#include <simgrid/host.h>

#include "sim/backend/heap.h"
#include "sim/backend/ktimer.h"
#include "sim/backend/sim.h"
#include "sim/backend/sim_int.h"

/* Above this a burst may hold a preemption (a time slice is milliseconds). */
#define SIM_CPU_LONG_NS 50000u
/* Linux's base slice on a 2-core host (0.75 ms x (1 + log2 cores)) */
#define SIM_SCHED_SLICE_S 1.5e-3

static uint64_t cpu_clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void sim_cpu_mark(struct sim_world *w)
{
    if (!w->cpu_measured)
        return;
    w->cpu_thread_stamp_ns = cpu_clock_ns(CLOCK_THREAD_CPUTIME_ID);
    w->cpu_stamp_ns = cpu_clock_ns(CLOCK_MONOTONIC);
}

void sim_cpu_settle(struct sim_world *w)
{
    if (!w->cpu_measured)
        return;
    uint64_t now = cpu_clock_ns(CLOCK_MONOTONIC);
    /* stamp 0: nothing marked yet (set-up code before the first call). */
    if (w->cpu_stamp_ns && now > w->cpu_stamp_ns) {
        uint64_t ns = now - w->cpu_stamp_ns;
        if (ns > SIM_CPU_LONG_NS) {
            uint64_t thread_ns = cpu_clock_ns(CLOCK_THREAD_CPUTIME_ID) - w->cpu_thread_stamp_ns;
            ns = thread_ns < ns ? thread_ns : ns;
        }
        double s = (double)ns * 1e-9;
        w->cpu_charged_s += s;
        w->cpu_bursts++;
        sim_cpu_run(w, sg_host_self(), s);
    }
    sim_cpu_mark(w);
}

/* ---- the cores as per-core run queues (scheduler: cores) ----
 *
 * SimGrid shares a host's cores among its executions at every instant: with
 * 5 wanting 2 cores each runs at 2/5 speed, every one progresses alike, and
 * the cores never idle while anything wants them. Linux keeps a run queue
 * per core instead. A woken thread goes to an idle core if there is one,
 * else it queues on the core it last ran on and holds the core for its
 * burst once its turn comes. A core whose queue runs dry pulls a waiting
 * thread from another core only if that thread is cache-cold (it has not
 * run for sched_migration_cost, 0.5 ms), else it idles while the other
 * core's queue waits: real runs idle 10 % of the time with threads ready
 * (sim/README.md, seventh round). A burst longer than a slice goes back to
 * its queue's tail when others wait there. A core that sat idle can cost
 * wake_s before the burst that takes it (an interprocessor interrupt, a
 * vCPU's halt exit). Runs with crash faults keep SimGrid's sharing: a crash
 * kills actors that may hold a core. */

#define SIM_SCHED_MIGRATION_S 0.5e-3 /* Linux's sched_migration_cost default */

struct sim_pcq_actor {
    int32_t home;      /* the core it last ran on, -1: none yet */
    double last_end_s; /* when it last gave a core back */
};

/* Actors are named by pid, never by a pointer into w->sched_actors: the
 * array grows (realloc) when an actor of a higher pid first runs, and a
 * waiter held a pointer into the freed one (heap corruption, exit 134 or
 * 139, from 128 nodes on with scheduler: cores; an outside tester). */
struct pcq_waiter {
    uint32_t pid;
    int32_t core; /* granted, -1 while waiting */
    struct sim_cv cv;
    struct pcq_waiter *next;
};

struct pcq_core {
    int busy;
    double idle_since;
    struct pcq_waiter *head, *tail;
};

struct sim_pcq {
    uint32_t n;
    struct pcq_core *c;
    struct sim_pcq *next;
};

static struct sim_pcq *pcq_of(struct sim_world *w, sg_host_t host)
{
    struct sim_pcq *q = sg_host_get_data(host);
    if (q)
        return q;
    q = calloc(1, sizeof(*q));
    if (!q)
        abort();
    q->n = (uint32_t)sg_host_core_count(host);
    if (!(q->c = calloc(q->n, sizeof(*q->c))))
        abort();
    q->next = w->pcqs;
    w->pcqs = q;
    sg_host_set_data(host, q);
    return q;
}

/* The calling actor's pid, its entry of w->sched_actors made. */
static uint32_t pcq_actor(struct sim_world *w)
{
    uint32_t pid = (uint32_t)sg_actor_self_get_pid();
    if (pid >= w->sched_actor_cap) {
        uint32_t cap = w->sched_actor_cap ? w->sched_actor_cap : 256;
        while (cap <= pid)
            cap *= 2;
        struct sim_pcq_actor *a = realloc(w->sched_actors, cap * sizeof(*a));
        if (!a)
            abort();
        for (uint32_t i = w->sched_actor_cap; i < cap; i++)
            a[i] = (struct sim_pcq_actor){.home = -1, .last_end_s = -1};
        w->sched_actors = a;
        w->sched_actor_cap = cap;
    }
    return pid;
}

static void pcq_grant(struct pcq_core *c, uint32_t k, struct pcq_waiter *x)
{
    x->core = (int32_t)k;
    c->busy = 1;
    sim_cv_signal(&x->cv);
}

/* Returns the core the caller now holds; *was_idle when it sat idle. */
static uint32_t pcq_take(struct sim_world *w, struct sim_pcq *q, uint32_t pid, int *was_idle)
{
    double now = simgrid_get_clock();
    int32_t was_home = w->sched_actors[pid].home;
    uint32_t home = was_home >= 0 ? (uint32_t)was_home : 0;
    *was_idle = 0;
    for (uint32_t i = 0; i < q->n; i++) {
        uint32_t k = (home + i) % q->n;
        if (!q->c[k].busy) {
            q->c[k].busy = 1;
            *was_idle = q->c[k].idle_since < now;
            w->sched_actors[pid].home = (int32_t)k;
            return k;
        }
    }
    struct pcq_waiter *x = calloc(1, sizeof(*x));
    if (!x)
        abort();
    *x = (struct pcq_waiter){.pid = pid, .core = -1};
    struct pcq_core *c = &q->c[home];
    if (c->tail)
        c->tail->next = x;
    else
        c->head = x;
    c->tail = x;
    while (x->core < 0)
        sim_cv_wait(NULL, &x->cv, NULL, NULL, -1);
    uint32_t k = (uint32_t)x->core;
    free(x);
    w->sched_actors[pid].home = (int32_t)k; /* the array may have moved meanwhile */
    return k;
}

static struct pcq_waiter *pcq_pop(struct pcq_core *c, struct pcq_waiter *prev)
{
    struct pcq_waiter *x = prev ? prev->next : c->head;
    if (prev)
        prev->next = x->next;
    else
        c->head = x->next;
    if (c->tail == x)
        c->tail = prev;
    x->next = NULL;
    return x;
}

static void pcq_give(struct sim_world *w, struct sim_pcq *q, uint32_t pid, uint32_t k)
{
    double now = simgrid_get_clock();
    w->sched_actors[pid].last_end_s = now;
    struct pcq_core *c = &q->c[k];
    if (c->head) {
        pcq_grant(c, k, pcq_pop(c, NULL));
        return;
    }
    for (uint32_t i = 1; i < q->n; i++) { /* newly idle: pull a cold waiter */
        struct pcq_core *o = &q->c[(k + i) % q->n];
        for (struct pcq_waiter *x = o->head, *prev = NULL; x; prev = x, x = x->next)
            if (now - w->sched_actors[x->pid].last_end_s >= SIM_SCHED_MIGRATION_S) {
                pcq_grant(c, k, pcq_pop(o, prev));
                return;
            }
    }
    c->busy = 0;
    c->idle_since = now;
}

static void pcq_run(struct sim_world *w, sg_host_t host, double s)
{
    struct sim_pcq *q = pcq_of(w, host);
    uint32_t pid = pcq_actor(w);
    int was_idle;
    uint32_t k = pcq_take(w, q, pid, &was_idle);
    if (was_idle) {
        w->sched_wakes++;
        if (w->sched_wake_s > 0)
            sg_actor_sleep_for(w->sched_wake_s);
    }
    while (s > SIM_SCHED_SLICE_S) {
        sg_actor_sleep_for(SIM_SCHED_SLICE_S);
        s -= SIM_SCHED_SLICE_S;
        if (q->c[k].head) { /* the slice is over: to the queue's tail */
            pcq_give(w, q, pid, k);
            k = pcq_take(w, q, pid, &was_idle);
        }
    }
    sg_actor_sleep_for(s);
    pcq_give(w, q, pid, k);
}

/* ---- the cores shared (cpu_share) ----
 *
 * What SimGrid's CPU model does for a host whose only load is executions
 * of one core each: n bursts on c cores each progress at min(1, c / n) of a
 * core, shares recomputed as bursts come and go. rkv computes it itself:
 * sg_actor_execute is five simcalls (the Exec's init, three setters and
 * its start, each a switch to maestro and back) and its wait, 44 % of the
 * actors' switches in a 256-node run; here a burst is one wait, ended by a
 * callback at the first burst's end (sim_at_set). Not for crash faults (a killed
 * actor would keep its share: SimGrid's model cancels its execution), nor
 * for a user's platform file or cpu/ configuration (speed profiles, other
 * models): the twin keeps SimGrid's model there (twin.c). */

/* Every running burst progresses at the same rate, so a burst's end is
 * fixed in "virtual work" (the work one burst has been given since the
 * host's first): it ends when that reaches its start's plus its length.
 * Bursts wait on a heap by that end; a start or an end costs O(log n) with
 * n running (server 0 takes a burst from every worker at a barrier). */
struct ps_burst {
    struct sim_heap_node hn; /* key: the host's virtual work when it is done */
    int done;
    struct sim_cv cv;
};

struct sim_ps {
    struct sim_world *w;
    uint32_t cores;
    struct sim_heap run; /* by end (hn), ties first come, first done */
    uint64_t seq;
    double v;             /* virtual work at t_last */
    double t_last;        /* when v was last brought up to date */
    struct sim_at *timer; /* set for the first end (NULL: none) */
    double timer_at;
    struct sim_ps *next;
};

static double ps_rate(const struct sim_ps *q)
{
    return q->run.len <= q->cores ? 1.0 : (double)q->cores / q->run.len;
}

static void ps_advance(struct sim_ps *q, double now)
{
    if (now > q->t_last)
        q->v += (now - q->t_last) * ps_rate(q);
    q->t_last = now;
}

/* The burst a heap node is. */
static struct ps_burst *ps_burst_of(struct sim_heap_node *n)
{
    return (struct ps_burst *)((char *)n - offsetof(struct ps_burst, hn));
}

static void ps_fire(void *arg);

static void ps_arm(struct sim_ps *q, double now)
{
    double due = INFINITY;
    if (q->run.len) {
        double left = sim_heap_top_key(&q->run) - q->v;
        due = now + (left > 0 ? left / ps_rate(q) : 0);
    }
    if (q->timer && due == q->timer_at) /* a later burst on an idle core */
        return;
    if (q->timer)
        sim_at_cancel(&q->w->ats, q->timer);
    q->timer = NULL;
    if (!q->run.len)
        return;
    if (!(q->timer = sim_at_set(&q->w->ats, due, ps_fire, q)))
        abort(); /* the twin cannot model a burst that never ends */
    q->timer_at = due;
}

/* In maestro, at the first end: ends what is done (within 1 ps of a core,
 * the rounding of due times), wakes their actors, arms the next end. */
static void ps_fire(void *arg)
{
    struct sim_ps *q = arg;
    q->timer = NULL;
    /* The run is over: the bursts left are on killed daemons' stacks. */
    if (sg_actor_count() == 0)
        return;
    double now = simgrid_get_clock();
    ps_advance(q, now);
    /* The first ends now, whatever the rounding of its due time left (at
     * a large clock, now + left / rate can round to now: it would be armed
     * at now again and again); the others within 1 ps of a core. */
    for (int first = 1; q->run.len && (first || sim_heap_top_key(&q->run) - q->v <= 1e-12);
         first = 0) {
        struct ps_burst *b = ps_burst_of(sim_heap_pop(&q->run));
        b->done = 1;
        sim_cv_signal(&b->cv);
    }
    ps_arm(q, now);
}

static struct sim_ps *ps_of(struct sim_world *w, sg_host_t host)
{
    struct sim_ps *q = sg_host_get_data(host);
    if (q)
        return q;
    if (!(q = calloc(1, sizeof(*q))))
        abort();
    q->w = w;
    q->cores = (uint32_t)sg_host_core_count(host);
    q->next = w->pss;
    w->pss = q;
    sg_host_set_data(host, q);
    return q;
}

static void ps_run(struct sim_world *w, sg_host_t host, double s)
{
    struct sim_ps *q = ps_of(w, host);
    double now = simgrid_get_clock();
    ps_advance(q, now);
    struct ps_burst b = {.hn = {.key = q->v + s, .seq = q->seq++}};
    if (sim_heap_push(&q->run, &b.hn) < 0)
        abort(); /* the twin cannot model a burst that never ends */
    ps_arm(q, now);
    while (!b.done)
        sim_cv_wait(w, &b.cv, NULL, NULL, -1);
}

void sim_cpu_run(struct sim_world *w, sg_host_t host, double s)
{
    if (s <= 0)
        return;
    w->cpu_total_s += s;
    if (w->sched_cores)
        pcq_run(w, host, s);
    else if (w->cpu_share)
        ps_run(w, host, s);
    else
        sg_actor_execute(s * sg_host_get_speed(host));
}

void sim_cpu_fini(struct sim_world *w)
{
    while (w->pcqs) {
        struct sim_pcq *q = w->pcqs;
        w->pcqs = q->next;
        for (uint32_t k = 0; k < q->n; k++)
            while (q->c[k].head) { /* daemons killed at the end while they waited */
                struct pcq_waiter *x = pcq_pop(&q->c[k], NULL);
                sim_cv_destroy(&x->cv);
                free(x);
            }
        free(q->c);
        free(q);
    }
    free(w->sched_actors);
    while (w->pss) { /* bursts left are on the stacks of daemons killed at the end */
        struct sim_ps *q = w->pss;
        w->pss = q->next;
        if (q->timer)
            sim_at_cancel(&w->ats, q->timer);
        sim_heap_fini(&q->run);
        free(q);
    }
}
