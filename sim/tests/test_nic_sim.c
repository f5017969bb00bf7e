/* The twin's NIC keeps the semantics nic.h promises, where they are the
 * unhappy ones (test_nic_tcp checks the same on TCP): a wrong connection
 * token is refused as a configuration error, a write outside any region is
 * refused and breaks the connection on both sides, a SEND larger than the
 * posted receive fails that receive and breaks the connection, WRITE_IMMs
 * wait in order for their receives, and closed QPs refuse posts. One
 * SimGrid run in a child process (SimGrid cannot be initialised twice);
 * two actors take turns at fixed simulated times, the child reports what
 * each call returned and the parent checks it. */
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

#define PORT 9000
#define MAX_WC 32

/* What the child saw; every field is checked by the parent. */
struct seen {
    int listen_ok, listen_again, listen_port0, listen_other_host, local_addr_ok;
    int reg_null, connect_bad_token, connect_nobody;
    /* 1: a write with an unknown rkey */
    int conn1, write_bad_rkey_post, send_after_nak, recv_after_close;
    int b_wc1[4], b_wc1_status[4], n_b_wc1;
    /* 2: a 100-byte SEND into a 16-byte receive */
    int conn2, send_too_big_post;
    int b_wc2[4], n_b_wc2;
    /* 3: two WRITE_IMMs before any receive */
    int conn3, imm_posts, bad_sge;
    /* 4: a burst of writes above 1 KiB, all in flight at once */
    int burst_posts, burst_done;
    uint8_t landed[2][8];
    /* the target's completions, in order */
    int a_op[MAX_WC], a_status[MAX_WC], a_imm[MAX_WC], a_len[MAX_WC], n_a;
    int done;
};

struct run {
    struct sim_world w;
    struct seen *seen;
    uint8_t *region; /* the target's remote-write region */
    uint32_t rkey;
};

static struct run R;

/* Simulated times of the acts (seconds). */
#define T_TOKEN 0.001
#define T_NAK 0.002
#define T_BIG 0.003
#define T_IMM 0.004
#define T_RECV1 0.005
#define T_RECV2 0.006
#define T_BURST 0.0065
#define T_END 0.007
#define BURST 100 /* past the poster's ring sweep (64 in flight) */
#define BURST_BYTES 2048

static void open_node(const char *host, const char *name, uint32_t m, struct rkv_port **port_p,
                      struct rkv_nic **nic_p)
{
    if (sim_port_create(&R.w, sg_host_by_name(host), name, 0, 1, m, m, port_p) < 0 ||
        rkv_nic_sim_ops.open(*port_p, NULL, nic_p) < 0)
        exit(3);
}

/* ---- the target, on m0 ---- */

static void target_main(int argc, char **argv)
{
    (void)argc, (void)argv;
    struct seen *s = R.seen;
    struct rkv_port *port;
    struct rkv_nic *nic;
    open_node("m0", "a", 0, &port, &nic);
    s->listen_ok = nic->ops->listen(nic, "m0", PORT);
    s->listen_again = nic->ops->listen(nic, "m0", PORT);
    s->listen_port0 = nic->ops->listen(nic, "m0", 0);
    s->listen_other_host = nic->ops->listen(nic, "m1", PORT + 1);
    char addr[64];
    s->local_addr_ok =
        nic->ops->local_addr(nic, "m1", 1, addr, sizeof(addr)) == 0 && strcmp(addr, "m0") == 0;
    static uint8_t small[16], recvs[2][64];
    R.region = calloc(1, 4096);
    struct rkv_mr *small_mr, *recv_mr, *region_mr, *none = NULL;
    s->reg_null = nic->ops->reg_mr(nic, NULL, 16, RKV_ACCESS_LOCAL, &none);
    if (!R.region || nic->ops->reg_mr(nic, small, sizeof(small), RKV_ACCESS_LOCAL, &small_mr) < 0 ||
        nic->ops->reg_mr(nic, recvs, sizeof(recvs), RKV_ACCESS_LOCAL, &recv_mr) < 0 ||
        nic->ops->reg_mr(nic, R.region, 4096, RKV_ACCESS_REMOTE_WRITE, &region_mr) < 0)
        exit(4);
    R.rkey = region_mr->rkey;
    int conns = 0;
    struct rkv_qp *qp = NULL;
    int posted1 = 0, posted2 = 0;
    while (simgrid_get_clock() < T_END) {
        if (!posted1 && simgrid_get_clock() >= T_RECV1) {
            struct rkv_sge r = {.addr = recvs[0], .len = 64, .mr = recv_mr};
            nic->ops->post_recv(qp, 10, &r);
            posted1 = 1;
        }
        if (!posted2 && simgrid_get_clock() >= T_RECV2) {
            struct rkv_sge r = {.addr = recvs[1], .len = 64, .mr = recv_mr};
            nic->ops->post_recv(qp, 11, &r);
            posted2 = 1;
        }
        double next = !posted1 ? T_RECV1 : !posted2 ? T_RECV2 : T_END;
        struct rkv_wc wc;
        uint32_t ms = (uint32_t)((next - simgrid_get_clock()) * 1000) + 1;
        if (nic->ops->poll(nic, &wc, 1, ms) != 1)
            continue;
        if (wc.opcode == RKV_WC_CONNECTED) {
            qp = wc.qp;
            if (++conns == 2) { /* for the SEND that does not fit */
                struct rkv_sge r = {.addr = small, .len = sizeof(small), .mr = small_mr};
                nic->ops->post_recv(qp, 1, &r);
            }
        }
        if (s->n_a < MAX_WC) {
            s->a_op[s->n_a] = wc.opcode;
            s->a_status[s->n_a] = wc.status;
            s->a_imm[s->n_a] = (int)wc.imm;
            s->a_len[s->n_a] = (int)wc.byte_len;
            s->n_a++;
        }
    }
    memcpy(s->landed[0], R.region, 8);
    memcpy(s->landed[1], R.region + 64, 8);
    nic->ops->dereg_mr(nic, NULL);
    nic->ops->close(nic);
}

/* ---- the initiator, on m1 ---- */

/* Takes the initiator's completions until T; returns how many, in op/status. */
static int take(struct rkv_nic *nic, double until, int *op, int *status, int max)
{
    int n = 0;
    while (simgrid_get_clock() < until) {
        struct rkv_wc wc;
        uint32_t ms = (uint32_t)((until - simgrid_get_clock()) * 1000) + 1;
        if (nic->ops->poll(nic, &wc, 1, ms) == 1 && n < max) {
            op[n] = wc.opcode;
            if (status)
                status[n] = wc.status;
            n++;
        }
    }
    return n;
}

static void initiator_main(int argc, char **argv)
{
    (void)argc, (void)argv;
    struct seen *s = R.seen;
    sg_actor_sleep_until(T_TOKEN);
    struct rkv_port *port, *port2;
    struct rkv_nic *nic, *nic2;
    setenv("RKV_TOKEN", "0x5ec", 1);
    open_node("m1", "w-token", 1, &port2, &nic2);
    unsetenv("RKV_TOKEN");
    open_node("m1", "w", 1, &port, &nic);
    struct rkv_qp *qp = NULL;
    s->connect_bad_token = nic2->ops->connect(nic2, "m0", PORT, 100, &qp);
    s->connect_nobody = nic->ops->connect(nic, "m0", PORT + 7, 100, &qp);
    static uint8_t src[128];
    memset(src, 0xab, sizeof(src));
    struct rkv_mr *mr;
    if (nic->ops->reg_mr(nic, src, sizeof(src), RKV_ACCESS_LOCAL, &mr) < 0)
        exit(5);

    sg_actor_sleep_until(T_NAK);
    s->conn1 = nic->ops->connect(nic, "m0", PORT, 100, &qp);
    struct rkv_sge sge = {.addr = src, .len = 16, .mr = mr};
    s->write_bad_rkey_post = nic->ops->post_write(qp, 42, &sge, (uint64_t)(uintptr_t)R.region,
                                                  R.rkey ^ 0x80000, 0, 0, 1);
    s->n_b_wc1 = take(nic, T_NAK + 0.0005, s->b_wc1, s->b_wc1_status, 4);
    s->send_after_nak = nic->ops->post_send(qp, 43, &sge, 1);
    nic->ops->qp_close(qp);
    s->recv_after_close = nic->ops->post_recv(qp, 44, &sge);

    sg_actor_sleep_until(T_BIG);
    s->conn2 = nic->ops->connect(nic, "m0", PORT, 100, &qp);
    sge.len = 100;
    s->send_too_big_post = nic->ops->post_send(qp, 45, &sge, 0);
    s->n_b_wc2 = take(nic, T_BIG + 0.0005, s->b_wc2, NULL, 4);
    nic->ops->qp_close(qp);

    sg_actor_sleep_until(T_IMM);
    s->conn3 = nic->ops->connect(nic, "m0", PORT, 100, &qp);
    sge.len = 8;
    for (uint32_t i = 0; i < 2; i++) {
        src[i * 8] = (uint8_t)(0x10 + i);
        sge.addr = src + i * 8;
        s->imm_posts |= nic->ops->post_write(
            qp, 50 + i, &sge, (uint64_t)(uintptr_t)(R.region + 64 * i), R.rkey, 1, 5 + i, 0);
    }
    struct rkv_sge outside = {.addr = src + 120, .len = 16, .mr = mr};
    s->bad_sge = nic->ops->post_send(qp, 60, &outside, 0);

    /* Transfers, not timed messages: the poster's ring holds them all, is
     * swept once with every one still in flight, and releases each once
     * the target received it; every write completes, once. */
    sg_actor_sleep_until(T_BURST);
    static uint8_t big[BURST_BYTES];
    struct rkv_mr *big_mr;
    if (nic->ops->reg_mr(nic, big, sizeof(big), RKV_ACCESS_LOCAL, &big_mr) < 0)
        exit(6);
    struct rkv_sge bsge = {.addr = big, .len = BURST_BYTES, .mr = big_mr};
    for (uint32_t i = 0; i < BURST; i++)
        s->burst_posts |= nic->ops->post_write(
            qp, 100 + i, &bsge, (uint64_t)(uintptr_t)(R.region + BURST_BYTES), R.rkey, 0, 0, 1);
    int op[BURST + 1], st[BURST + 1];
    int n = take(nic, T_END, op, st, BURST + 1);
    for (int i = 0; i < n; i++)
        s->burst_done += op[i] == RKV_WC_WRITE && st[i] == RKV_WC_SUCCESS;
    sim_nic_drain(sim_port_nic(port)); /* as a task ends: no comm left to its actor */
    sg_actor_sleep_until(T_END + 0.001);
    nic->ops->close(nic);
    nic2->ops->close(nic2);
    s->done = 1;
}

static void child_run(struct seen *s)
{
    R.seen = s;
    struct rkv_scenario sc = {.machines = 2, .sim_bandwidth_gbps = 100, .sim_latency_us = 1};
    snprintf(sc.sim_platform, sizeof(sc.sim_platform), "star");
    char xml[64], err[256];
    snprintf(xml, sizeof(xml), "/tmp/rkv-nicsim-%d.xml", (int)getpid());
    if (sim_world_init(&R.w, 1) < 0 || rkv_twin_platform_xml(&sc, xml, err, sizeof(err)) < 0)
        exit(2);
    int argc = 2;
    char *argv[] = {"test", "--log=root.thres:critical", NULL};
    simgrid_init(&argc, argv);
    simgrid_load_platform(xml);
    unlink(xml);
    sg_actor_t a = sg_actor_init("target", sg_host_by_name("m0"));
    sg_actor_start(a, target_main, 0, NULL);
    a = sg_actor_init("initiator", sg_host_by_name("m1"));
    sg_actor_start(a, initiator_main, 0, NULL);
    simgrid_run_until(1.0);
}

static void run_child(struct seen *s)
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fd[0]);
        static struct seen mine;
        child_run(&mine);
        ssize_t w = write(fd[1], &mine, sizeof(mine));
        /* exit, not _exit: coverage builds write their counts at exit. */
        exit(w == sizeof(mine) ? 0 : 1);
    }
    close(fd[1]);
    size_t got = 0;
    ssize_t r;
    while (got < sizeof(*s) && (r = read(fd[0], (char *)s + got, sizeof(*s) - got)) > 0)
        got += (size_t)r;
    close(fd[0]);
    int st;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_int_equal(got, sizeof(*s));
    assert_true(s->done);
}

/* The index of the target's n-th completion with this opcode, or -1. */
static int a_find(const struct seen *s, int opcode, int nth)
{
    for (int i = 0; i < s->n_a; i++)
        if (s->a_op[i] == opcode && nth-- == 0)
            return i;
    return -1;
}

static void test_unhappy_semantics(void **state)
{
    (void)state;
    static struct seen s;
    run_child(&s);
    /* Setup: one listener per (host, port), on this node's own host. */
    assert_int_equal(s.listen_ok, 0);
    assert_int_equal(s.listen_again, -RKV_EEXIST);
    assert_int_equal(s.listen_port0, -RKV_EINVAL);
    assert_int_equal(s.listen_other_host, -RKV_EINVAL);
    assert_true(s.local_addr_ok);
    assert_int_equal(s.reg_null, -RKV_EINVAL);
    assert_int_equal(s.connect_bad_token, -RKV_ECONFIG);
    assert_int_equal(s.connect_nobody, -RKV_EPEERDEAD);

    /* 1: the write with a wrong rkey is posted, then fails remotely, and the
     * connection is down on both sides. */
    assert_int_equal(s.conn1, 0);
    assert_int_equal(s.write_bad_rkey_post, 0);
    assert_int_equal(s.n_b_wc1, 2);
    assert_int_equal(s.b_wc1[0], RKV_WC_WRITE);
    assert_int_equal(s.b_wc1_status[0], RKV_WC_REM_ACCESS_ERR);
    assert_int_equal(s.b_wc1[1], RKV_WC_DISCONNECTED);
    assert_int_equal(s.send_after_nak, -RKV_EPEERDEAD);
    assert_int_equal(s.recv_after_close, -RKV_EPEERDEAD);
    int c1 = a_find(&s, RKV_WC_CONNECTED, 0);
    assert_true(c1 >= 0 && c1 + 1 < s.n_a);
    assert_int_equal(s.a_op[c1 + 1], RKV_WC_DISCONNECTED);

    /* 2: the SEND that does not fit fails the receive and the connection. */
    assert_int_equal(s.conn2, 0);
    assert_int_equal(s.send_too_big_post, 0);
    assert_int_equal(s.n_b_wc2, 1);
    assert_int_equal(s.b_wc2[0], RKV_WC_DISCONNECTED);
    int c2 = a_find(&s, RKV_WC_CONNECTED, 1);
    assert_true(c2 >= 0 && c2 + 2 < s.n_a);
    assert_int_equal(s.a_op[c2 + 1], RKV_WC_RECV);
    assert_int_equal(s.a_status[c2 + 1], RKV_WC_LOC_ERR);
    assert_int_equal(s.a_op[c2 + 2], RKV_WC_DISCONNECTED);

    /* 3: both WRITE_IMMs waited for their receives and completed in order,
     * each with its data; a SEND from outside its region was refused. */
    assert_int_equal(s.conn3, 0);
    assert_int_equal(s.imm_posts, 0);
    assert_int_equal(s.bad_sge, -RKV_EINVAL);
    assert_int_equal(s.burst_posts, 0);
    assert_int_equal(s.burst_done, BURST);
    int i0 = a_find(&s, RKV_WC_RECV_IMM, 0), i1 = a_find(&s, RKV_WC_RECV_IMM, 1);
    assert_true(i0 > c2 && i1 > i0);
    assert_int_equal(s.a_status[i0], RKV_WC_SUCCESS);
    assert_int_equal(s.a_imm[i0], 5);
    assert_int_equal(s.a_imm[i1], 6);
    assert_int_equal(s.landed[0][0], 0x10);
    assert_int_equal(s.landed[1][0], 0x11);
    assert_int_equal(s.landed[0][1], 0xab);
}

/* Every peer of the twin's NIC is in the twin's process: no secret opens
 * no door, and the store does not warn of one (it asks the NIC, not its
 * name). */
static void test_in_process_needs_no_secret(void **state)
{
    (void)state;
    struct rkv_nic nic = {.ops = &rkv_nic_sim_ops, .has_secret = 0};
    assert_int_equal(rkv_nic_sim_ops.in_process, 1);
    assert_false(rkv_nic_open_to_strangers(&nic));
}

/* ---- the shared receive pool (srq_setup, srq_repost) ---- */

#define SRQ_SENDERS 3
#define SRQ_T1 0.001 /* the senders connect */
#define SRQ_T2 0.002 /* each sends one message, 10 us apart: 3 into a pool of 2 */
#define SRQ_T3 0.003 /* the target reposts buffer 0: the third lands in it */
#define SRQ_T4 0.004 /* the target reposts buffer 1 */
#define SRQ_T5 0.005 /* sender 0 sends into buffer 1 */
#define SRQ_T6 0.006 /* the target closes sender 0's QP without polling it */
#define SRQ_T7 0.007 /* sender 1 sends: buffer 1 came back with the close */
#define SRQ_END 0.008

struct srq_seen {
    int setup_off, setup_ok, count, setup_again, post_recv, repost_bad;
    int n;                 /* receive completions, in order: */
    uint64_t wr_id[8];     /* wr_id: (buffer << 8) | tag */
    int at_ms[8], data[8]; /* when (ms, floor) and the buffer's first byte */
    int done;
};

static struct srq_seen *SRQ;

static void srq_target(int argc, char **argv)
{
    (void)argc, (void)argv;
    struct srq_seen *s = SRQ;
    struct rkv_port *port;
    struct rkv_nic *nic;
    uint8_t *base = NULL;
    uint32_t count = 2;
    R.w.srq = 0;
    open_node("m0", "t", 0, &port, &nic);
    s->setup_off = rkv_nic_sim_ops.srq_setup(nic, &count, 64, 1, &base);
    R.w.srq = 1;
    s->setup_ok = rkv_nic_sim_ops.srq_setup(nic, &count, 64, 1, &base);
    s->count = (int)count;
    s->setup_again = rkv_nic_sim_ops.srq_setup(nic, &count, 64, 1, &base);
    s->repost_bad = rkv_nic_sim_ops.srq_repost(nic, 0); /* every buffer is posted */
    if (nic->ops->listen(nic, "m0", PORT) < 0)
        exit(7);
    struct rkv_qp *qps[SRQ_SENDERS];
    int conns = 0, reposted0 = 0, reposted1 = 0, closed = 0;
    while (simgrid_get_clock() < SRQ_END) {
        double now = simgrid_get_clock();
        if (!reposted0 && now >= SRQ_T3)
            reposted0 = !rkv_nic_sim_ops.srq_repost(nic, 0);
        if (!reposted1 && now >= SRQ_T4)
            reposted1 = !rkv_nic_sim_ops.srq_repost(nic, 1);
        if (!closed && now >= SRQ_T6) {
            nic->ops->qp_close(qps[0]);
            closed = 1;
        }
        double next = !reposted0 ? SRQ_T3 : !reposted1 ? SRQ_T4 : !closed ? SRQ_T6 : SRQ_END;
        if (reposted1 && !closed) {
            sg_actor_sleep_until(SRQ_T6); /* sender 0's message (T5) waits in the CQ */
            continue;
        }
        struct rkv_wc wc;
        uint32_t ms = (uint32_t)((next - now) * 1000) + 1;
        if (nic->ops->poll(nic, &wc, 1, ms) != 1)
            continue;
        if (wc.opcode == RKV_WC_CONNECTED && conns < SRQ_SENDERS) {
            qps[conns++] = wc.qp;
            struct rkv_sge none = {.addr = NULL, .len = 0, .mr = NULL};
            s->post_recv = nic->ops->post_recv(wc.qp, 1, &none);
        } else if (wc.opcode == RKV_WC_RECV && s->n < 8) {
            s->wr_id[s->n] = wc.wr_id;
            s->at_ms[s->n] = (int)(simgrid_get_clock() * 1000);
            s->data[s->n] = base[(wc.wr_id >> 8) * 64];
            s->n++;
        }
    }
    nic->ops->close(nic);
    s->done = 1;
}

static void srq_sender(int argc, char **argv)
{
    (void)argc, (void)argv;
    uint32_t i = (uint32_t)(uintptr_t)sg_actor_self_get_data();
    char name[16];
    snprintf(name, sizeof(name), "s%u", i);
    struct rkv_port *port;
    struct rkv_nic *nic;
    struct rkv_qp *qp;
    struct rkv_mr *mr;
    uint8_t *src = calloc(1, 16);
    sg_actor_sleep_until(SRQ_T1 + i * 1e-4);
    open_node("m1", name, 1, &port, &nic);
    if (!src || nic->ops->reg_mr(nic, src, 16, RKV_ACCESS_LOCAL, &mr) < 0 ||
        nic->ops->connect(nic, "m0", PORT, 100, &qp) < 0)
        exit(8);
    struct rkv_sge sge = {.addr = src, .len = 16, .mr = mr};
    sg_actor_sleep_until(SRQ_T2 + i * 1e-5);
    src[0] = (uint8_t)(0xa0 + i);
    nic->ops->post_send(qp, 1, &sge, 0);
    if (i < 2) {
        sg_actor_sleep_until(i == 0 ? SRQ_T5 : SRQ_T7);
        src[0] = (uint8_t)(0xa3 + i);
        nic->ops->post_send(qp, 2, &sge, 0);
    }
    sg_actor_sleep_until(SRQ_END + 0.001);
    nic->ops->close(nic);
    free(src);
}

/* A target on m0 and n senders on m1 (each given its index as data), in a
 * star of two machines whose world offers the receive pool; tune (or NULL)
 * adjusts the world before it runs. */
static void srq_world_run(void (*target)(int, char **), void (*sender)(int, char **), uintptr_t n,
                          void (*tune)(struct sim_world *))
{
    struct rkv_scenario sc = {.machines = 2, .sim_bandwidth_gbps = 100, .sim_latency_us = 1};
    snprintf(sc.sim_platform, sizeof(sc.sim_platform), "star");
    char xml[64], err[256];
    snprintf(xml, sizeof(xml), "/tmp/rkv-nicsim-srq-%d.xml", (int)getpid());
    if (sim_world_init(&R.w, 1) < 0 || rkv_twin_platform_xml(&sc, xml, err, sizeof(err)) < 0)
        exit(2);
    if (tune)
        tune(&R.w);
    int argc = 2;
    char *argv[] = {"test", "--log=root.thres:critical", NULL};
    simgrid_init(&argc, argv);
    simgrid_load_platform(xml);
    unlink(xml);
    sg_actor_t a = sg_actor_init("target", sg_host_by_name("m0"));
    sg_actor_start(a, target, 0, NULL);
    for (uintptr_t i = 0; i < n; i++) {
        a = sg_actor_init("sender", sg_host_by_name("m1"));
        sg_actor_set_data(a, (void *)i);
        sg_actor_start(a, sender, 0, NULL);
    }
    simgrid_run_until(1.0);
}

/* Runs fn(buf) in a forked child (a SimGrid world runs once per process)
 * and hands back the size bytes it left in buf. */
static void in_child(void (*fn)(void *), void *seen, size_t size)
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fd[0]);
        void *mine = calloc(1, size);
        if (!mine)
            exit(1);
        fn(mine);
        ssize_t w = write(fd[1], mine, size);
        free(mine);
        exit(w == (ssize_t)size ? 0 : 1);
    }
    close(fd[1]);
    size_t got = 0;
    ssize_t r;
    while (got < size && (r = read(fd[0], (char *)seen + got, size - got)) > 0)
        got += (size_t)r;
    close(fd[0]);
    int st;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0 && got == size);
}

static void srq_child(void *seen)
{
    SRQ = seen;
    srq_world_run(srq_target, srq_sender, SRQ_SENDERS, NULL);
}

/* A pool of 2 shared by 3 connections: the third message waits (RNR) for a
 * repost and lands in the reposted buffer; a QP closed with a receive
 * still queued gives its buffer back to the pool. Only where the world
 * offers a pool (the twin's payload-less runs), once, before any QP. */
static void test_shared_receive_pool(void **state)
{
    (void)state;
    static struct srq_seen s;
    in_child(srq_child, &s, sizeof(s));
    assert_true(s.done);
    assert_int_equal(s.setup_off, -RKV_EINVAL);
    assert_int_equal(s.setup_ok, 0);
    assert_int_equal(s.count, 2);
    assert_int_equal(s.setup_again, -RKV_EINVAL);
    assert_int_equal(s.repost_bad, -RKV_EINVAL);
    assert_int_equal(s.post_recv, -RKV_EINVAL);
    for (int i = 0; i < s.n; i++)
        printf("# receive %d: buffer %u, at %d ms, data 0x%x\n", i, (unsigned)(s.wr_id[i] >> 8),
               s.at_ms[i], s.data[i]);
    assert_int_equal(s.n, 4);
    /* Two land at once, in buffers 0 and 1; the third waits for buffer 0. */
    assert_int_equal(s.wr_id[0], 0 << 8 | 1);
    assert_int_equal(s.data[0], 0xa0);
    assert_int_equal(s.wr_id[1], 1 << 8 | 1);
    assert_int_equal(s.data[1], 0xa1);
    assert_int_equal(s.at_ms[1], 2);
    assert_int_equal(s.wr_id[2], 0 << 8 | 1);
    assert_int_equal(s.data[2], 0xa2);
    assert_int_equal(s.at_ms[2], 3);
    /* Sender 0's second message went with its QP; its buffer came back. */
    assert_int_equal(s.wr_id[3], 1 << 8 | 1);
    assert_int_equal(s.data[3], 0xa4);
    assert_int_equal(s.at_ms[3], 7);
}

/* A QP closed while a message into a pool buffer is being copied in (the
 * copy charged CPU time, and the receiving NIC's actor yielded): the
 * completion goes nowhere, and the buffer must go back to the pool, else
 * every later message of every QP waits for it for ever. A pool of 1: the
 * second sender's message lands only if the buffer came back. */
#define SRQC_T1 0.001 /* both senders connect */
#define SRQC_T2 0.002 /* sender 0 sends: its copy in takes 16 ms of CPU */
#define SRQC_T3 0.005 /* the target closes sender 0's QP mid-copy */
#define SRQC_T4 0.010 /* sender 1 sends, into an empty pool: it waits */
#define SRQC_END 0.080

struct srqc_seen {
    int n, data, done;
};
static struct srqc_seen *SRQC;

static void srqc_target(int argc, char **argv)
{
    (void)argc, (void)argv;
    struct rkv_port *port;
    struct rkv_nic *nic;
    uint8_t *base = NULL;
    uint32_t count = 1;
    open_node("m0", "t", 0, &port, &nic);
    if (rkv_nic_sim_ops.srq_setup(nic, &count, 64, 1, &base) < 0 || count != 1 ||
        nic->ops->listen(nic, "m0", PORT) < 0)
        exit(7);
    struct rkv_qp *qps[2] = {NULL, NULL};
    int conns = 0;
    struct rkv_wc wc;
    while (conns < 2 && simgrid_get_clock() < SRQC_T2)
        if (nic->ops->poll(nic, &wc, 1, 1) == 1 && wc.opcode == RKV_WC_CONNECTED)
            qps[conns++] = wc.qp;
    if (conns < 2)
        exit(9);
    /* A sleep, not a poll's timeout: the copy runs on the machine's NIC
     * actor, which also wakes pollers at their deadlines. */
    sg_actor_sleep_until(SRQC_T3);
    nic->ops->qp_close(qps[0]);
    while (simgrid_get_clock() < SRQC_END) {
        uint32_t ms = (uint32_t)((SRQC_END - simgrid_get_clock()) * 1000) + 1;
        if (nic->ops->poll(nic, &wc, 1, ms) == 1 && wc.opcode == RKV_WC_RECV) {
            SRQC->n++;
            SRQC->data = base[(wc.wr_id >> 8) * 64];
        }
    }
    nic->ops->close(nic);
    SRQC->done = 1;
}

static void srqc_sender(int argc, char **argv)
{
    (void)argc, (void)argv;
    uint32_t i = (uint32_t)(uintptr_t)sg_actor_self_get_data();
    char name[16];
    snprintf(name, sizeof(name), "s%u", i);
    struct rkv_port *port;
    struct rkv_nic *nic;
    struct rkv_qp *qp;
    struct rkv_mr *mr;
    uint8_t *src = calloc(1, 16);
    sg_actor_sleep_until(SRQC_T1 + i * 1e-4);
    open_node("m1", name, 1, &port, &nic);
    if (!src || nic->ops->reg_mr(nic, src, 16, RKV_ACCESS_LOCAL, &mr) < 0 ||
        nic->ops->connect(nic, "m0", PORT, 100, &qp) < 0)
        exit(8);
    struct rkv_sge sge = {.addr = src, .len = 16, .mr = mr};
    sg_actor_sleep_until(i == 0 ? SRQC_T2 : SRQC_T4);
    src[0] = (uint8_t)(0xa0 + i);
    nic->ops->post_send(qp, 1, &sge, 0);
    sg_actor_sleep_until(SRQC_END + 0.001);
    nic->ops->close(nic);
    free(src);
}

/* Measured CPU, and a copy that costs 1 ms of it per byte beyond what it
 * took: the 16-byte copy in runs 16 ms of simulated CPU. */
static void srqc_tune(struct sim_world *w)
{
    w->srq = 1;
    w->cpu_measured = 1;
    w->copy_byte_ns = -1e6;
}

static void srqc_child(void *seen)
{
    SRQC = seen;
    srq_world_run(srqc_target, srqc_sender, 2, srqc_tune);
}

static void test_pool_buffer_back_when_closed_mid_copy(void **state)
{
    (void)state;
    static struct srqc_seen s;
    in_child(srqc_child, &s, sizeof(s));
    assert_true(s.done);
    if (s.n != 1 || s.data != 0xa1)
        fail_msg("%d receives, last data 0x%x: sender 1's message never found the pool's buffer",
                 s.n, s.data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_in_process_needs_no_secret),
        cmocka_unit_test(test_unhappy_semantics),
        cmocka_unit_test(test_shared_receive_pool),
        cmocka_unit_test(test_pool_buffer_back_when_closed_mid_copy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
