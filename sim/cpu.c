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
 * The clock is CLOCK_MONOTONIC: 37 ns a read here against 289 ns for the
 * thread CPU clock, which would add itself to every burst. The price is that
 * a twin run preempted by other work on the host charges that time too. */
#include <time.h>

#include <simgrid/actor.h>
#include <simgrid/host.h>

#include "sim/sim.h"
#include "sim/sim_int.h"

static uint64_t cpu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void sim_cpu_mark(struct sim_world *w)
{
    if (w->cpu_measured)
        w->cpu_stamp_ns = cpu_now_ns();
}

void sim_cpu_settle(struct sim_world *w)
{
    if (!w->cpu_measured)
        return;
    uint64_t now = cpu_now_ns();
    /* stamp 0: nothing marked yet (set-up code before the first call). */
    if (w->cpu_stamp_ns && now > w->cpu_stamp_ns) {
        double s = (double)(now - w->cpu_stamp_ns) * 1e-9;
        w->cpu_charged_s += s;
        w->cpu_bursts++;
        sg_actor_execute(s * sg_host_get_speed(sg_host_self()));
    }
    sim_cpu_mark(w);
}
