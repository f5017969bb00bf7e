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
#include <time.h>

#include <simgrid/actor.h>
#include <simgrid/host.h>

#include "sim/sim.h"
#include "sim/sim_int.h"

/* Above this a burst may hold a preemption (a time slice is milliseconds). */
#define SIM_CPU_LONG_NS 50000u

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

void sim_cpu_run(struct sim_world *w, sg_host_t host, double s)
{
    if (s <= 0)
        return;
    w->cpu_total_s += s;
    sg_actor_execute(s * sg_host_get_speed(host));
}
