/* The twin's network model against closed-form times: one 1 MiB RDMA write,
 * and N-to-1 incasts where N writers share the target's link; and 4 KiB
 * incasts, which max-min ends together and the mid-size path (nic_sim.c,
 * sn_mid_due) one after the other, the last at the same time. Each case
 * runs SimGrid in a child process (SimGrid cannot be initialised twice). */
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

#include "nic/nic.h"
#include "sim/backend/sim.h"
#include "sim/backend/sim_int.h"
#include "sim/twin/twin.h"

#define MSG_BYTES (1u << 20)
#define MID_BYTES 4096u
#define WIRE_HDR 32 /* nic_sim.c: the transport header every message pays */
#define T0 0.001    /* every writer posts at this simulated time */
#define PORT 9000
#define GBPS 100.0
#define LAT_US 1.0

struct nm {
    struct sim_world w;
    uint32_t writers;
    uint32_t bytes;      /* per write */
    uint8_t *target_buf; /* published by the target: writer i writes at + i x bytes */
    uint32_t rkey;
    double first_at, done_at; /* first and last RECV_IMM at the target */
    uint32_t got;
};

struct nm_writer {
    struct nm *s;
    uint32_t idx;
};

static void nm_target(int argc, char **argv)
{
    (void)argc, (void)argv;
    struct nm *s = sg_actor_self_get_data();
    struct rkv_port *port;
    struct rkv_nic *nic;
    struct rkv_mr *mr, *rmr;
    static uint8_t rx[64][64]; /* one process per case: not shared with anything */
    s->target_buf = calloc(s->writers, s->bytes);
    if (!s->target_buf ||
        sim_port_create(&s->w, sg_host_by_name("m0"), "target", 0, 1, 0, 0, &port) < 0 ||
        rkv_nic_sim_ops.open(port, NULL, &nic) < 0 || nic->ops->listen(nic, "m0", PORT) < 0 ||
        nic->ops->reg_mr(nic, s->target_buf, (size_t)s->writers * s->bytes, RKV_ACCESS_REMOTE_WRITE,
                         &mr) < 0 ||
        nic->ops->reg_mr(nic, rx, sizeof(rx), RKV_ACCESS_LOCAL, &rmr) < 0)
        return;
    s->rkey = mr->rkey;
    struct rkv_wc wc[8];
    while (s->got < s->writers) {
        int n = nic->ops->poll(nic, wc, 8, 1000);
        if (n == 0)
            break;
        for (int i = 0; i < n; i++) {
            if (wc[i].opcode == RKV_WC_CONNECTED) {
                struct rkv_sge sge = {.addr = rx[s->got % 64], .len = 64, .mr = rmr};
                nic->ops->post_recv(wc[i].qp, 0, &sge);
            } else if (wc[i].opcode == RKV_WC_RECV_IMM && wc[i].status == RKV_WC_SUCCESS) {
                if (s->got++ == 0)
                    s->first_at = simgrid_get_clock();
                s->done_at = simgrid_get_clock();
            }
        }
    }
}

static void nm_writer(int argc, char **argv)
{
    (void)argc, (void)argv;
    struct nm_writer *me = sg_actor_self_get_data();
    struct nm *s = me->s;
    char host[16], name[16];
    snprintf(host, sizeof(host), "m%u", me->idx + 1);
    snprintf(name, sizeof(name), "w%u", me->idx);
    struct rkv_port *port;
    struct rkv_nic *nic;
    struct rkv_qp *qp;
    struct rkv_mr *mr;
    uint8_t *src = calloc(1, s->bytes);
    sg_actor_sleep_for(1e-5); /* the target listens by now */
    if (!src ||
        sim_port_create(&s->w, sg_host_by_name(host), name, 0, 1, me->idx + 1, me->idx + 1, &port) <
            0 ||
        rkv_nic_sim_ops.open(port, NULL, &nic) < 0 ||
        nic->ops->reg_mr(nic, src, s->bytes, RKV_ACCESS_LOCAL, &mr) < 0 ||
        nic->ops->connect(nic, "m0", PORT, 1000, &qp) < 0)
        return;
    sg_actor_sleep_until(T0);
    struct rkv_sge sge = {.addr = src, .len = s->bytes, .mr = mr};
    uint64_t raddr = (uint64_t)(uintptr_t)(s->target_buf + (size_t)me->idx * s->bytes);
    nic->ops->post_write(qp, 1, &sge, raddr, s->rkey, 1, me->idx, 0);
    sim_nic_drain(sim_port_nic(port));
}

/* One case, in this process: the simulated times from T0 to the first and
 * the last write's completion at the target (t[0], t[1]). mid: messages up
 * to MID_BYTES take the mid-size path, as the twin sets it on a star. */
static int nm_run(uint32_t writers, uint32_t bytes, int mid, double t[2])
{
    struct nm s = {.writers = writers, .bytes = bytes};
    struct rkv_scenario sc = {
        .machines = writers + 1, .sim_bandwidth_gbps = GBPS, .sim_latency_us = LAT_US};
    snprintf(sc.sim_platform, sizeof(sc.sim_platform), "star");
    char xml[64], err[256];
    snprintf(xml, sizeof(xml), "/tmp/rkv-netmodel-%d.xml", (int)getpid());
    if (sim_world_init(&s.w, 1) < 0 || rkv_twin_platform_xml(&sc, xml, err, sizeof(err)) < 0)
        return -1;
    s.w.mid_max_bytes = mid ? 16384 : 0;
    int argc = 4;
    char *argv[] = {"test", "--cfg=network/model:CM02", "--cfg=network/crosstraffic:0",
                    "--log=root.thres:critical", NULL};
    simgrid_init(&argc, argv);
    simgrid_load_platform(xml);
    unlink(xml);
    sg_actor_t a = sg_actor_init("target", sg_host_by_name("m0"));
    sg_actor_set_data(a, &s);
    sg_actor_start(a, nm_target, 0, NULL);
    struct nm_writer *ws = calloc(writers, sizeof(*ws));
    for (uint32_t i = 0; i < writers; i++) {
        char host[16];
        snprintf(host, sizeof(host), "m%u", i + 1);
        ws[i] = (struct nm_writer){.s = &s, .idx = i};
        a = sg_actor_init("writer", sg_host_by_name(host));
        sg_actor_set_data(a, &ws[i]);
        sg_actor_start(a, nm_writer, 0, NULL);
    }
    simgrid_run();
    t[0] = s.first_at - T0;
    t[1] = s.done_at - T0;
    return s.got == writers ? 0 : -1;
}

/* Runs nm_run in a child; t: its simulated times (first, last). */
static void nm_case(uint32_t writers, uint32_t bytes, int mid, double t[2])
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    fflush(stdout); /* or the child repeats what is buffered */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fd[0]);
        double tc[2] = {-1, -1};
        if (nm_run(writers, bytes, mid, tc) < 0)
            tc[0] = tc[1] = -1;
        ssize_t w = write(fd[1], tc, sizeof(tc));
        /* _exit: the child's SimGrid world is never torn down, and exit()
         * would have LeakSanitizer count it (the NIC code it runs is covered
         * by test_nic_sim's children instead). */
        _exit(w == (ssize_t)sizeof(tc) ? 0 : 1);
    }
    close(fd[1]);
    t[0] = t[1] = -1;
    ssize_t r = read(fd[0], t, 2 * sizeof(*t));
    close(fd[0]);
    int st;
    waitpid(pid, &st, 0);
    assert_true(r == 2 * sizeof(*t) && WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* Closed form on a star: every route crosses two host links of bandwidth
 * GBPS; N flows into one target share its down link equally and end
 * together, one latency after the first byte left. */
static double nm_closed_form(uint32_t writers, uint32_t bytes)
{
    double bytes_per_s = GBPS * 1e9 / 8;
    return LAT_US * 1e-6 + writers * (double)(bytes + WIRE_HDR) / bytes_per_s;
}

static void nm_check(uint32_t writers)
{
    double t[2];
    nm_case(writers, MSG_BYTES, 1, t);
    double got = t[1], want = nm_closed_form(writers, MSG_BYTES);
    double err = fabs(got - want) / want;
    printf("# %u x 1 MiB into one target: simulated %.9f s, closed form %.9f s, error %.2e\n",
           writers, got, want, err);
    assert_true(got > 0);
    assert_true(err < 1e-6);
}

static void test_one_write_matches_closed_form(void **state)
{
    (void)state;
    nm_check(1);
}

static void test_incasts_match_closed_form(void **state)
{
    (void)state;
    nm_check(2);
    nm_check(8);
    nm_check(32);
}

/* 4 KiB writes, N into one target at once: max-min gives each an equal
 * share, so all end at lat + N x size / bw; the mid-size path sends them
 * whole, one after the other: the first ends at lat + size / bw, the last
 * as under max-min. */
static void test_mid_size_incast_is_fifo_with_max_min_end(void **state)
{
    (void)state;
    double bytes_per_s = GBPS * 1e9 / 8, one = (MID_BYTES + WIRE_HDR) / bytes_per_s;
    uint32_t ns[] = {1, 8, 32};
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
        double mm[2], mid[2], last = nm_closed_form(ns[i], MID_BYTES);
        nm_case(ns[i], MID_BYTES, 0, mm);
        nm_case(ns[i], MID_BYTES, 1, mid);
        printf("# %u x 4 KiB into one target: max-min first %.9f last %.9f s, mid-size path "
               "first %.9f last %.9f s, closed form last %.9f s\n",
               ns[i], mm[0], mm[1], mid[0], mid[1], last);
        assert_true(fabs(mm[0] - last) / last < 1e-6);
        assert_true(fabs(mm[1] - last) / last < 1e-6);
        assert_true(fabs(mid[0] - (LAT_US * 1e-6 + one)) / last < 1e-6);
        assert_true(fabs(mid[1] - last) / last < 1e-6);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_write_matches_closed_form),
        cmocka_unit_test(test_incasts_match_closed_form),
        cmocka_unit_test(test_mid_size_incast_is_fifo_with_max_min_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
