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
#include <stdlib.h>
#include <time.h>

#include <simgrid/actor.h>
#include <simgrid/engine.h>
#include <simgrid/host.h>

#include "sim/sim.h"
#include "sim/sim_int.h"

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

/* ---- the cores as a run queue (sched_queue) ----
 *
 * SimGrid shares a host's cores among its executions at every instant: with
 * 5 wanting 2 cores each runs at 2/5 speed and the cores never idle while
 * anything wants them. A real run has a scheduler: a thread woken holds a
 * core for its burst while others queue, and a core that ran out of work
 * and went idle takes time to run the next thread woken onto it (an
 * interprocessor interrupt; in a VM the vCPU's halt exit). So it idles
 * while threads are ready for it, and loopback's request-reply has nothing
 * but such wake-ups where a wire would have latency. Here a burst takes a
 * core of its host (a free one, else a FIFO queue), holds it for its time,
 * and hands it to the next waiting; a core that sat idle costs wake_s before
 * the burst (a crash kills actors that may hold cores: runs with crash
 * faults keep SimGrid's sharing). A burst longer than a slice goes back to the queue's tail when
 * others wait, as a time-sliced thread does. */

struct sim_sched {
    uint32_t free_n;    /* idle cores */
    double *idle_since; /* of the idle cores, the most recently freed last */
    uint32_t waiting;
    struct sim_cv queue;
    struct sim_sched *next; /* every host's, for sim_cpu_fini */
};

static struct sim_sched *sched_of(struct sim_world *w, sg_host_t host)
{
    struct sim_sched *q = sg_host_get_data(host);
    if (q)
        return q;
    int cores = sg_host_core_count(host);
    q = calloc(1, sizeof(*q));
    if (!q || !(q->idle_since = calloc((size_t)cores, sizeof(*q->idle_since))))
        abort(); /* the twin cannot model a core it cannot allocate */
    q->free_n = (uint32_t)cores;
    q->next = w->scheds;
    w->scheds = q;
    sg_host_set_data(host, q);
    return q;
}

/* Returns when the caller holds a core; 1 when it was idle before. */
static int sched_take(struct sim_sched *q)
{
    if (q->free_n) {
        q->free_n--;
        return q->idle_since[q->free_n] < simgrid_get_clock();
    }
    q->waiting++;
    sim_cv_wait(&q->queue, NULL, -1); /* the releaser handed its core over */
    return 0;
}

static void sched_give(struct sim_sched *q)
{
    if (q->waiting) {
        q->waiting--;
        sim_cv_signal(&q->queue);
        return;
    }
    q->idle_since[q->free_n++] = simgrid_get_clock();
}

static void sched_run(struct sim_world *w, sg_host_t host, double s)
{
    struct sim_sched *q = sched_of(w, host);
    if (sched_take(q)) {
        w->sched_wakes++;
        if (w->sched_wake_s > 0)
            sg_actor_sleep_for(w->sched_wake_s);
    }
    while (s > SIM_SCHED_SLICE_S) {
        sg_actor_sleep_for(SIM_SCHED_SLICE_S);
        s -= SIM_SCHED_SLICE_S;
        if (q->waiting) { /* the slice is over: to the queue's tail */
            sched_give(q);
            sched_take(q);
        }
    }
    sg_actor_sleep_for(s);
    sched_give(q);
}

void sim_cpu_run(struct sim_world *w, sg_host_t host, double s)
{
    if (s <= 0)
        return;
    w->cpu_total_s += s;
    if (w->sched_queue)
        sched_run(w, host, s);
    else
        sg_actor_execute(s * sg_host_get_speed(host));
}

void sim_cpu_fini(struct sim_world *w)
{
    while (w->scheds) {
        struct sim_sched *q = w->scheds;
        w->scheds = q->next;
        sim_cv_destroy(&q->queue);
        free(q->idle_since);
        free(q);
    }
}
