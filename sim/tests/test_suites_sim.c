/* The NIC conformance suite (impl/tests/nic_suite.c) and the engine suite
 * (impl/tests/engine_suite.c) over the twin's NIC: the same tests tcp and
 * verbs pass, here in simulated time, so every wait and every "nothing
 * happens" check is deterministic and costs no wall clock. Both suites run
 * inside one SimGrid actor (SimGrid starts
 * once per process); each NIC gets its own node on one of four modelled
 * machines, and its port lives until the simulation ends (the NIC's
 * actors may still hold it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <simgrid/actor.h>
#include <simgrid/engine.h>
#include <simgrid/host.h>

#include "engine_suite.h"
#include "nic_suite.h"
#include "rkv.h"
#include "sim/backend/sim.h"
#include "sim/twin/twin.h"

#define SUITE_MACHINES 4
#define SUITE_MAX_NODES 256 /* NICs opened over the whole suite */
#define SUITE_FIRST_PORT 9000

struct sim_suite {
    struct sim_world w;
    uint32_t opened;    /* NICs opened so far: the next one's machine and tid */
    uint16_t next_port; /* every listen gets a port of its own */
    struct rkv_port *ports[SUITE_MAX_NODES];
    int failed;   /* the suite's failures, or -1 before it ran */
    double end_s; /* simulated time the suite took */
};

static int sim_env_open(void *ctx, const char *node, struct rkv_port **port_p,
                        struct rkv_nic **nic_p)
{
    struct sim_suite *s = ctx;
    if (s->opened == SUITE_MAX_NODES)
        return -RKV_ELIMIT;
    uint32_t m = s->opened % SUITE_MACHINES;
    char host[16];
    snprintf(host, sizeof(host), "m%u", m);
    int rc =
        sim_port_create(&s->w, sg_host_by_name(host), node, RKV_LOG_ERROR, 1, m, s->opened, port_p);
    if (rc < 0)
        return rc;
    s->ports[s->opened++] = *port_p;
    return rkv_nic_sim_ops.open(*port_p, NULL, nic_p);
}

static void sim_env_close(void *ctx, struct rkv_port *port, struct rkv_nic *nic)
{
    (void)ctx, (void)port; /* the port goes after the simulation */
    nic->ops->close(nic);
}

static int sim_env_listen(void *ctx, struct rkv_nic *nic, char *host, size_t host_len,
                          uint16_t *port_p)
{
    struct sim_suite *s = ctx;
    snprintf(host, host_len, "%s", sim_port_addr(nic->port));
    *port_p = s->next_port++;
    return nic->ops->listen(nic, host, *port_p);
}

static void suite_actor(int argc, char **argv)
{
    (void)argc, (void)argv;
    struct sim_suite *s = sg_actor_get_data(sg_actor_self());
    const struct nic_suite_env env = {.name = "sim",
                                      .wait_ms = 2000,
                                      .quiet_ms = 200,
                                      .open = sim_env_open,
                                      .close = sim_env_close,
                                      .listen = sim_env_listen,
                                      .ctx = s,
                                      .in_actor = 1};
    s->failed = nic_suite_run(&env);
    s->failed += engine_suite_run(&env);
    s->end_s = simgrid_get_clock();
    /* The NICs' actors wait for messages forever: end them, so that the
     * simulation ends with no actor left (as the twin's runs do). */
    sg_actor_kill_all();
}

int main(void)
{
    static struct sim_suite s = {.next_port = SUITE_FIRST_PORT, .failed = -1};
    struct rkv_scenario sc = {
        .machines = SUITE_MACHINES, .sim_bandwidth_gbps = 100, .sim_latency_us = 1};
    snprintf(sc.sim_platform, sizeof(sc.sim_platform), "star");
    char xml[64], err[256];
    snprintf(xml, sizeof(xml), "/tmp/rkv-suites-%d.xml", (int)getpid());
    if (sim_world_init(&s.w, 1) < 0 || rkv_twin_platform_xml(&sc, xml, err, sizeof(err)) < 0) {
        fprintf(stderr, "test_suites_sim: no platform: %s\n", err);
        return 2;
    }
    /* The NICs offer the shared receive pool, as in the twin's payload-less
     * runs: the NIC suite checks it, the engine suite runs on it. */
    s.w.srq = 1;
    /* No guard pages under actor stacks, as the twin runs: LeakSanitizer's
     * scan of the stacks at exit would fault on them. */
    int argc = 3;
    char *argv[] = {"test", "--log=root.thres:critical", "--cfg=contexts/guard-size:0", NULL};
    simgrid_init(&argc, argv);
    simgrid_load_platform(xml);
    unlink(xml);
    sg_actor_t a = sg_actor_init("suite", sg_host_by_name("m0"));
    sg_actor_set_data(a, &s);
    sg_actor_start(a, suite_actor, 0, NULL);
    /* Ends when the suite's actor does: the NICs' own actors wait forever. */
    simgrid_run_until(1e6);
    if (s.failed < 0) {
        fprintf(stderr, "test_suites_sim: the suite did not finish in simulated time\n");
        return 1;
    }
    printf("test_suites_sim: %d failed, %.3f simulated seconds\n", s.failed, s.end_s);
    for (uint32_t i = 0; i < s.opened; i++)
        s.ports[i]->ops->destroy(s.ports[i]);
    sim_world_fini(&s.w);
    return s.failed != 0;
}
