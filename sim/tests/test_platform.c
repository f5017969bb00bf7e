/* The generated big-cluster fabrics (sim/twin/platform.c): the routes of a
 * three-level fat tree and of a rail-optimized layout have the links and
 * latencies their shape says, and oversubscription shows where it should:
 * flows that share a leaf's (or a pod's) uplinks take longer than the same
 * flows inside a leaf, measured as SimGrid transfers on the platform the
 * twin builds, with the twin's network model. Then the scenario files that
 * use each pass in the twin, the fat tree's twice with one trace hash
 * (determinism at 1,024 nodes). Each SimGrid case runs in a child process
 * (SimGrid cannot be initialised twice). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <simgrid/actor.h>
#include <simgrid/engine.h>
#include <simgrid/host.h>
#include <simgrid/link.h>
#include <simgrid/mailbox.h>
#include <xbt/dynar.h>

#include "harness/tests/rkv_run.h"
#include "sim/backend/route_fifo.h"
#include "sim/twin/sim_plat.h"
#include "sim/twin/twin.h"

#define BYTES 1e6    /* per flow */
#define GBPS 100.0   /* every NIC link */
#define LAT_US 1.0   /* through one switch: two NIC links of 0.5 us */
#define XFER_US 80.0 /* BYTES at GBPS */
#define MAX_FLOWS 16

struct pf_flow {
    uint32_t src, dst; /* machines */
    double start_s, want_us;
    double end_s; /* set by the receiver */
};

struct pf_case {
    struct pf_flow flow[MAX_FLOWS];
    uint32_t n_flows;
    int bad; /* checks that failed in the child */
};

/* In the child: a failed check is printed and counted, never longjmps
 * through SimGrid. */
#define PF_CHECK(pc, cond, ...)                                                                    \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "check failed: " __VA_ARGS__);                                         \
            fputc('\n', stderr);                                                                   \
            (pc)->bad++;                                                                           \
        }                                                                                          \
    } while (0)

static sg_host_t pf_host(uint32_t m)
{
    char name[16];
    snprintf(name, sizeof(name), "m%u", m);
    return sg_host_by_name(name);
}

/* The route from machine a to b: its link names joined by spaces, and its
 * latency in us. */
static void pf_route(uint32_t a, uint32_t b, char *names, size_t len, double *lat_us)
{
    xbt_dynar_t links = xbt_dynar_new(sizeof(sg_link_t), NULL);
    sg_host_get_route(pf_host(a), pf_host(b), links);
    names[0] = 0;
    for (unsigned long i = 0; i < xbt_dynar_length(links); i++)
        snprintf(names + strlen(names), len - strlen(names), "%s%s", i ? " " : "",
                 sg_link_get_name(xbt_dynar_get_as(links, i, sg_link_t)));
    xbt_dynar_free(&links);
    *lat_us = sg_host_get_route_latency(pf_host(a), pf_host(b)) * 1e6;
}

static void pf_check_route(struct pf_case *pc, uint32_t a, uint32_t b, const char *want,
                           double want_lat_us)
{
    char got[512];
    double lat;
    pf_route(a, b, got, sizeof(got), &lat);
    PF_CHECK(pc, !strcmp(got, want), "m%u -> m%u: links \"%s\", expected \"%s\"", a, b, got, want);
    PF_CHECK(pc, fabs(lat - want_lat_us) < 1e-9, "m%u -> m%u: latency %.6f us, expected %.6f", a, b,
             lat, want_lat_us);
    double bw = sg_host_get_route_bandwidth(pf_host(a), pf_host(b));
    PF_CHECK(pc, fabs(bw - GBPS * 1e9 / 8) < 1, "m%u -> m%u: bandwidth %g B/s", a, b, bw);
}

static void pf_sender(int argc, char **argv)
{
    (void)argc, (void)argv;
    struct pf_flow *fl = sg_actor_self_get_data();
    char mb[32];
    snprintf(mb, sizeof(mb), "flow%p", (void *)fl);
    sg_actor_sleep_until(fl->start_s);
    sg_mailbox_put(sg_mailbox_by_name(mb), fl, (long)BYTES);
}

static void pf_receiver(int argc, char **argv)
{
    (void)argc, (void)argv;
    struct pf_flow *fl = sg_actor_self_get_data();
    char mb[32];
    snprintf(mb, sizeof(mb), "flow%p", (void *)fl);
    sg_mailbox_get(sg_mailbox_by_name(mb));
    fl->end_s = simgrid_get_clock();
}

static void pf_add(struct pf_case *pc, uint32_t src, uint32_t dst, double start_s, double want_us)
{
    assert_true(pc->n_flows < MAX_FLOWS);
    pc->flow[pc->n_flows++] = (struct pf_flow){src, dst, start_s, want_us, -1};
}

/* SimGrid on the scenario's generated platform, as the twin configures it. */
static void pf_load(const struct rkv_scenario *sc)
{
    char xml[64], err[256];
    snprintf(xml, sizeof(xml), "/tmp/rkv-platform-%d.xml", (int)getpid());
    if (rkv_twin_platform_xml(sc, xml, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s\n", err);
        _exit(2);
    }
    int argc = 4;
    char *argv[] = {"test", "--cfg=network/model:CM02", "--cfg=network/crosstraffic:0",
                    "--log=root.thres:critical", NULL};
    simgrid_init(&argc, argv);
    simgrid_load_platform(xml);
    unlink(xml);
}

/* Runs the case's flows and checks each one's time. */
static void pf_run_flows(struct pf_case *pc)
{
    for (uint32_t i = 0; i < pc->n_flows; i++) {
        sg_actor_t a = sg_actor_init("send", pf_host(pc->flow[i].src));
        sg_actor_set_data(a, &pc->flow[i]);
        sg_actor_start(a, pf_sender, 0, NULL);
        a = sg_actor_init("recv", pf_host(pc->flow[i].dst));
        sg_actor_set_data(a, &pc->flow[i]);
        sg_actor_start(a, pf_receiver, 0, NULL);
    }
    simgrid_run();
    for (uint32_t i = 0; i < pc->n_flows; i++) {
        const struct pf_flow *fl = &pc->flow[i];
        double us = (fl->end_s - fl->start_s) * 1e6;
        printf("# m%u -> m%u at %.2f s: %.3f us (expected %.3f)\n", fl->src, fl->dst, fl->start_s,
               us, fl->want_us);
        PF_CHECK(pc, fabs(us - fl->want_us) < 1e-6 * fl->want_us, "m%u -> m%u at %g s: %.6f us",
                 fl->src, fl->dst, fl->start_s, us);
    }
}

/* 16 machines, leaves of 2, pods of 2 leaves (4 pods); a leaf's uplinks
 * carry half its machines' bandwidth (2:1), a pod's half its leaves'. */
static void pf_load_fattree3(void)
{
    struct rkv_scenario sc = {.machines = 16,
                              .sim_bandwidth_gbps = GBPS,
                              .sim_latency_us = LAT_US,
                              .sim_leaf_machines = 2,
                              .sim_pod_leaves = 2,
                              .sim_oversub = 2,
                              .sim_pod_oversub = 2};
    snprintf(sc.sim_platform, sizeof(sc.sim_platform), "fattree3");
    pf_load(&sc);
}

/* The fat tree above: its routes, and 1 MB flows through its uplinks. */
static int pf_fattree3(void)
{
    struct pf_case pc = {0};
    pf_load_fattree3();
    /* Same leaf: NIC up, NIC down; then each level adds an uplink each way
     * (0.5 us each: half the switch hop's latency by default). */
    pf_check_route(&pc, 0, 1, "l0_link_0_UP l0_link_1_DOWN", LAT_US);
    pf_check_route(&pc, 0, 2, "l0_link_0_UP l0_0_UP l1_0_DOWN l1_link_2_DOWN", LAT_US + 1);
    pf_check_route(&pc, 0, 4, "l0_link_0_UP l0_0_UP p0_0_UP p1_0_DOWN l2_0_DOWN l2_link_4_DOWN",
                   LAT_US + 2);
    pf_check_route(&pc, 5, 14, "l2_link_5_UP l2_0_UP p1_0_UP p3_0_DOWN l7_0_DOWN l7_link_14_DOWN",
                   LAT_US + 2);
    /* Inside a leaf two machines swap at line rate. */
    pf_add(&pc, 0, 1, 0.00, LAT_US + XFER_US);
    pf_add(&pc, 1, 0, 0.00, LAT_US + XFER_US);
    /* One flow out of a leaf fits its uplinks; two (its whole leaf) share
     * them: 2:1 oversubscription doubles the transfer. */
    pf_add(&pc, 0, 2, 0.01, LAT_US + 1 + XFER_US);
    pf_add(&pc, 0, 2, 0.02, LAT_US + 1 + 2 * XFER_US);
    pf_add(&pc, 1, 3, 0.02, LAT_US + 1 + 2 * XFER_US);
    /* One machine of each leaf of pod 0 to pod 1: each leaf's uplinks hold
     * one flow, the pod's (2:1 again) are shared by two. */
    pf_add(&pc, 0, 4, 0.03, LAT_US + 2 + 2 * XFER_US);
    pf_add(&pc, 2, 6, 0.03, LAT_US + 2 + 2 * XFER_US);
    pf_run_flows(&pc);
    return pc.bad;
}

/* The two-level fat tree (32 machines: 2 leaves of 16): a route inside a
 * leaf pays latency_us, as on the star; one across leaves twice that. Its
 * links had a quarter each, and a leaf's routes half the star's latency. */
static int pf_fattree2(void)
{
    struct pf_case pc = {0};
    struct rkv_scenario sc = {.machines = 32, .sim_bandwidth_gbps = GBPS, .sim_latency_us = LAT_US};
    snprintf(sc.sim_platform, sizeof(sc.sim_platform), "fattree");
    pf_load(&sc);
    double in_leaf = sg_host_get_route_latency(pf_host(0), pf_host(1)) * 1e6;
    double across = sg_host_get_route_latency(pf_host(0), pf_host(16)) * 1e6;
    printf("# fattree: m0 -> m1 %.6f us, m0 -> m16 %.6f us\n", in_leaf, across);
    PF_CHECK(&pc, fabs(in_leaf - LAT_US) < 1e-9, "inside a leaf: %.6f us", in_leaf);
    PF_CHECK(&pc, fabs(across - 2 * LAT_US) < 1e-9, "across leaves: %.6f us", across);
    return pc.bad;
}

/* The same fat tree, with mid-size messages queued on each link of their
 * route (route_fifo.h), as the twin carries rows on oversubscribed
 * fabrics: one 4 KiB message takes the route's latency and its time at
 * line rate; two through one 2:1 uplink leave it one after the other, the
 * second when max-min would end both (as the 1 MB flows above). */
static int pf_fattree3_fifo(void)
{
    struct pf_case pc = {0};
    pf_load_fattree3();
    struct sim_route_fifo *f = sim_route_fifo_new();
    PF_CHECK(&pc, f != NULL, "sim_route_fifo_new");
    if (!f)
        return pc.bad;
    const double bytes = 4096, s_us = bytes / (GBPS * 1e9 / 8) * 1e6;
    struct {
        uint32_t src, dst;
        double at_s, want_us;
    } m[] = {
        {0, 1, 0.00, LAT_US + s_us},         /* inside a leaf */
        {1, 0, 0.00, LAT_US + s_us},         /* the other way: its own halves */
        {0, 2, 0.01, LAT_US + 1 + s_us},     /* out of the leaf, alone */
        {0, 2, 0.02, LAT_US + 1 + s_us},     /* two at once through leaf 0's uplink */
        {1, 3, 0.02, LAT_US + 1 + 2 * s_us}, /* ... the second after the first */
        {0, 4, 0.03, LAT_US + 2 + s_us},     /* two leaves of pod 0 to pod 1: */
        {2, 6, 0.03, LAT_US + 2 + 2 * s_us}, /* the pod's uplink queues them */
    };
    for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
        double due = sim_route_fifo_due(f, pf_host(m[i].src), pf_host(m[i].dst), m[i].src, m[i].dst,
                                        m[i].at_s, bytes);
        double us = (due - m[i].at_s) * 1e6;
        printf("# 4 KiB m%u -> m%u at %.2f s: %.6f us (expected %.6f)\n", m[i].src, m[i].dst,
               m[i].at_s, us, m[i].want_us);
        PF_CHECK(&pc, fabs(us - m[i].want_us) < 1e-6, "4 KiB m%u -> m%u at %g s: %.6f us", m[i].src,
                 m[i].dst, m[i].at_s, us);
    }
    sim_route_fifo_free(f);
    return pc.bad;
}

/* 8 machines with 2 NICs (rails) each, units of 4 machines (2 units); a
 * rail leaf's uplinks carry a quarter of its NICs' bandwidth (4:1). */
static int pf_rail(void)
{
    struct pf_case pc = {0};
    struct rkv_scenario sc = {.machines = 8,
                              .sim_bandwidth_gbps = GBPS,
                              .sim_latency_us = LAT_US,
                              .sim_leaf_machines = 4,
                              .sim_rails = 2,
                              .sim_oversub = 4,
                              .sim_uplink_latency_us = 2};
    snprintf(sc.sim_platform, sizeof(sc.sim_platform), "rail");
    pf_load(&sc);
    /* In a unit: one leaf hop, on rail (a + b) mod 2. */
    pf_check_route(&pc, 0, 1, "n0_1_UP n1_1_DOWN", LAT_US);
    pf_check_route(&pc, 0, 2, "n0_0_UP n2_0_DOWN", LAT_US);
    pf_check_route(&pc, 3, 3, "u0_lo", LAT_US);
    /* Across units: up the rail's leaf to its spine and down (unit pair 0,
     * 1 on rail 1; uplinks of 2 us each, as set). */
    pf_check_route(&pc, 0, 4, "n0_1_UP s0_1_UP s1_1_DOWN n4_1_DOWN", LAT_US + 4);
    pf_check_route(&pc, 6, 1, "n6_1_UP s1_1_UP s0_1_DOWN n1_1_DOWN", LAT_US + 4);
    /* A machine's two flows on two rails do not share a NIC (on a star
     * they would halve each other). */
    pf_add(&pc, 0, 1, 0.00, LAT_US + XFER_US);
    pf_add(&pc, 0, 2, 0.00, LAT_US + XFER_US);
    /* Leaving the unit: one flow fits the rail leaf's uplinks, two share
     * them (4 NICs' worth behind 1 NIC's worth of uplink). */
    pf_add(&pc, 0, 4, 0.01, LAT_US + 4 + XFER_US);
    pf_add(&pc, 0, 4, 0.02, LAT_US + 4 + 2 * XFER_US);
    pf_add(&pc, 1, 5, 0.02, LAT_US + 4 + 2 * XFER_US);
    pf_run_flows(&pc);
    return pc.bad;
}

static void pf_in_child(int (*fn)(void))
{
    fflush(stdout); /* or the child repeats what is buffered */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int bad = fn();
        fflush(stdout);
        /* _exit: the child's SimGrid world is never torn down. */
        _exit(bad ? 1 : 0);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

static void test_fattree3_routes_and_oversubscription(void **state)
{
    (void)state;
    pf_in_child(pf_fattree3);
}

static void test_fattree_latency_per_switch_as_the_star(void **state)
{
    (void)state;
    pf_in_child(pf_fattree2);
}

static void test_fattree3_mid_size_messages_queue_on_their_route(void **state)
{
    (void)state;
    pf_in_child(pf_fattree3_fifo);
}

static void test_rail_routes_and_oversubscription(void **state)
{
    (void)state;
    pf_in_child(pf_rail);
}

static void run_pass(const char *args, char hash[17])
{
    int rc = run_rkv("", args);
    if (rc != 0 || !strstr(out, "verdict: PASS"))
        fail_msg("rkv %s: exit %d\n%s", args, rc, out);
    const char *h = strstr(out, "event trace hash ");
    assert_non_null(h);
    memcpy(hash, h + 17, 16);
    hash[16] = 0;
}

/* The scenario files pass in the twin; the same seed gives the same trace
 * at 1,024 nodes on the fat tree. */
static void test_scenarios_on_each_fabric(void **state)
{
    (void)state;
    char a[17], b[17], c[17];
    run_pass("run " SCEN_DIR "/sim-fattree3.yaml", a);
    assert_non_null(strstr(out, "256 servers, 768 workers in the twin (SimGrid, fattree3"));
    assert_non_null(strstr(out, "rkv run: fattree3: 16 leaves of 16 machines, 4 pods of 4 "
                                "leaves; uplinks 4:1 at the leaves, 1:1 at the pods\n"));
    run_pass("run " SCEN_DIR "/sim-fattree3.yaml", b);
    assert_string_equal(a, b);
    run_pass("run " SCEN_DIR "/sim-rail.yaml", c);
    assert_non_null(strstr(out, "64 servers, 448 workers in the twin (SimGrid, rail"));
    assert_non_null(strstr(
        out, "rkv run: rail: 4 units of 16 machines with 8 rails; rail leaves' uplinks 2:1\n"));
    printf("# sim-fattree3 (1,024 nodes): %s twice; sim-rail: %s\n", a, c);
}

/* The fabric line reads as English at any size and says what was built:
 * 2 machines made "1 leaves of 2 machines, 1 pods of 8 leaves", then "1
 * pod of 8 leaves" (it holds one), and 20 machines "2 leaves of 16". */
static void test_describe_counts_one_in_the_singular(void **state)
{
    (void)state;
    struct rkv_scenario sc = {.machines = 2};
    char buf[256];
    snprintf(sc.sim_platform, sizeof(sc.sim_platform), "fattree3");
    sim_plat_describe(&sc, buf, sizeof(buf));
    assert_string_equal(buf, "1 leaf of 2 machines, 1 pod of 1 leaf; uplinks 1:1 at the leaves, "
                             "1:1 at the pods");
    sc.machines = 20;
    sim_plat_describe(&sc, buf, sizeof(buf));
    assert_string_equal(buf, "2 leaves of up to 16 machines, 1 pod of 2 leaves; uplinks 1:1 at "
                             "the leaves, 1:1 at the pods");
    sc.machines = 200; /* 13 leaves, pods of 8 */
    sim_plat_describe(&sc, buf, sizeof(buf));
    assert_string_equal(buf, "13 leaves of up to 16 machines, 2 pods of up to 8 leaves; uplinks "
                             "1:1 at the leaves, 1:1 at the pods");
    sc.machines = 1;
    sc.sim_pod_leaves = 1;
    sim_plat_describe(&sc, buf, sizeof(buf));
    assert_string_equal(buf, "1 leaf of 1 machine, 1 pod of 1 leaf; uplinks 1:1 at the leaves, "
                             "1:1 at the pods");
    sc.sim_rails = 1;
    snprintf(sc.sim_platform, sizeof(sc.sim_platform), "rail");
    sim_plat_describe(&sc, buf, sizeof(buf));
    assert_string_equal(buf, "1 unit of 1 machine with 1 rail; rail leaves' uplinks 1:1");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fattree3_routes_and_oversubscription),
        cmocka_unit_test(test_fattree3_mid_size_messages_queue_on_their_route),
        cmocka_unit_test(test_fattree_latency_per_switch_as_the_star),
        cmocka_unit_test(test_rail_routes_and_oversubscription),
        cmocka_unit_test(test_scenarios_on_each_fabric),
        cmocka_unit_test(test_describe_counts_one_in_the_singular),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
