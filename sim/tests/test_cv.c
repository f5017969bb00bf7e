/* The twin's condition variables (sim/backend/cv.c) through the SimGrid
 * port, where a signaller holds the waiter's mutex: the waiter is moved to
 * the mutex's queue (wait morphing) and must come back holding the mutex
 * once the signaller lets go, signalled, also when its own timeout passes
 * while it waits there; with the mutex free it wakes at once; broadcast
 * moves every waiter. SimGrid runs in a child (it cannot be initialised
 * twice); the parent checks what each waiter saw. */
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

#include "port/port.h"
#include "sim/backend/sim.h"
#include "sim/backend/sim_int.h"
#include "sim/twin/twin.h"

#define MS 1000000ull /* ns */
#define WAITERS 3

/* One case: each waiter locks m, waits on c (timeout_ms), and records. */
struct cv_case {
    uint64_t timeout_ms;   /* waiter 0's; the others wait 100 ms */
    uint64_t signal_at_ms; /* the signaller locks m (or not) and signals then */
    int signaller_locks;
    int broadcast;
    uint64_t hold_ms; /* how long it keeps m after signalling */
    int waiters;
    int nic; /* the port has a NIC: its timer ends the timed waits */
};

struct cv_seen {
    int rc[WAITERS], held[WAITERS];
    uint64_t at_ms[WAITERS]; /* when cond_wait returned */
    int done;
};

struct cv_run {
    struct sim_world w;
    struct cv_case k;
    struct cv_seen *seen;
    struct rkv_port *port;
    struct rkv_mutex *m;
    struct rkv_cond *c;
};

static struct cv_run CR;

static void cv_waiter(int argc, char **argv)
{
    (void)argc, (void)argv;
    int i = (int)(uintptr_t)sg_actor_self_get_data();
    const struct rkv_port_ops *o = CR.port->ops;
    struct rkv_nic *nic;
    if (i == 0 && CR.k.nic && rkv_nic_sim_ops.open(CR.port, NULL, &nic) < 0)
        exit(4); /* waiter 0 runs first: the others wait with its timer too */
    o->mutex_lock(CR.m);
    CR.seen->rc[i] = o->cond_wait(CR.c, CR.m, (i == 0 ? CR.k.timeout_ms : 100) * MS);
    CR.seen->held[i] = o->mutex_held(CR.m);
    CR.seen->at_ms[i] = o->now_ns(CR.port) / MS;
    o->mutex_unlock(CR.m);
}

static void cv_signaller(int argc, char **argv)
{
    (void)argc, (void)argv;
    const struct rkv_port_ops *o = CR.port->ops;
    o->sleep_ns(CR.port, CR.k.signal_at_ms * MS);
    if (CR.k.signaller_locks)
        o->mutex_lock(CR.m);
    if (CR.k.broadcast)
        o->cond_broadcast(CR.c);
    else
        o->cond_signal(CR.c);
    o->sleep_ns(CR.port, CR.k.hold_ms * MS); /* a simcall: the waiters may run */
    if (CR.k.signaller_locks)
        o->mutex_unlock(CR.m);
    o->sleep_ns(CR.port, 20 * MS);
    CR.seen->done = 1;
}

static void cv_child(const struct cv_case *k, struct cv_seen *seen)
{
    CR.k = *k;
    CR.seen = seen;
    struct rkv_scenario sc = {.machines = 1, .sim_bandwidth_gbps = 100, .sim_latency_us = 1};
    snprintf(sc.sim_platform, sizeof(sc.sim_platform), "star");
    char xml[64], err[256];
    snprintf(xml, sizeof(xml), "/tmp/rkv-cv-%d.xml", (int)getpid());
    if (sim_world_init(&CR.w, 1) < 0 || rkv_twin_platform_xml(&sc, xml, err, sizeof(err)) < 0)
        exit(2);
    int argc = 2;
    char *argv[] = {"test", "--log=root.thres:critical", NULL};
    simgrid_init(&argc, argv);
    simgrid_load_platform(xml);
    unlink(xml);
    if (sim_port_create(&CR.w, sg_host_by_name("m0"), "n", 0, 1, 0, 0, &CR.port) < 0 ||
        CR.port->ops->mutex_create(CR.port, &CR.m) < 0 ||
        CR.port->ops->cond_create(CR.port, &CR.c) < 0)
        exit(3);
    for (uintptr_t i = 0; i < (uintptr_t)k->waiters; i++) {
        sg_actor_t a = sg_actor_init("waiter", sg_host_by_name("m0"));
        sg_actor_set_data(a, (void *)i);
        sg_actor_start(a, cv_waiter, 0, NULL);
    }
    sg_actor_t a = sg_actor_init("signaller", sg_host_by_name("m0"));
    sg_actor_start(a, cv_signaller, 0, NULL);
    simgrid_run();
}

static void cv_case_run(const struct cv_case *k, struct cv_seen *s)
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fd[0]);
        static struct cv_seen mine;
        cv_child(k, &mine);
        ssize_t w = write(fd[1], &mine, sizeof(mine));
        exit(w == sizeof(mine) ? 0 : 1); /* exit: coverage builds write their counts */
    }
    close(fd[1]);
    memset(s, 0, sizeof(*s));
    size_t got = 0;
    ssize_t r;
    while (got < sizeof(*s) && (r = read(fd[0], (char *)s + got, sizeof(*s) - got)) > 0)
        got += (size_t)r;
    close(fd[0]);
    int st;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0 && got == sizeof(*s) && s->done);
}

/* Signalled at 1 ms by an actor that keeps the mutex until 3 ms: the
 * waiter comes back at 3 ms, signalled, holding the mutex. */
static void test_signal_with_mutex_held(void **state)
{
    (void)state;
    struct cv_case k = {
        .timeout_ms = 100, .signal_at_ms = 1, .signaller_locks = 1, .hold_ms = 2, .waiters = 1};
    struct cv_seen s;
    cv_case_run(&k, &s);
    assert_int_equal(s.rc[0], 0);
    assert_true(s.held[0]);
    assert_int_equal(s.at_ms[0], 3);
}

/* Two waiters moved to the mutex's queue by a broadcast; the first one's
 * timeout (2 ms) passes while it waits there (the mutex is held until
 * 4 ms): it leaves that queue, still signalled, and the other one stays
 * on it; both come back at 4 ms with the mutex. (Left on the queue, the
 * first waiter's reused record took the second one's place: it never
 * came back.) */
static void test_timeout_while_waiting_for_the_mutex(void **state)
{
    (void)state;
    struct cv_case k = {.timeout_ms = 2,
                        .signal_at_ms = 1,
                        .signaller_locks = 1,
                        .broadcast = 1,
                        .hold_ms = 3,
                        .waiters = 2};
    struct cv_seen s;
    cv_case_run(&k, &s);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(s.rc[i], 0);
        assert_true(s.held[i]);
        assert_int_equal(s.at_ms[i], 4);
    }
}

/* A signaller without the mutex wakes the waiter at once. */
static void test_signal_without_mutex(void **state)
{
    (void)state;
    struct cv_case k = {.timeout_ms = 100, .signal_at_ms = 1, .hold_ms = 2, .waiters = 1};
    struct cv_seen s;
    cv_case_run(&k, &s);
    assert_int_equal(s.rc[0], 0);
    assert_true(s.held[0]);
    assert_int_equal(s.at_ms[0], 1);
}

/* A broadcast under the mutex: every waiter comes back, one at a time,
 * each holding the mutex, once the broadcaster let go; unsignalled, a
 * waiter times out. */
static void test_broadcast_with_mutex_held_and_timeout(void **state)
{
    (void)state;
    struct cv_case k = {.timeout_ms = 100,
                        .signal_at_ms = 1,
                        .signaller_locks = 1,
                        .broadcast = 1,
                        .hold_ms = 2,
                        .waiters = WAITERS};
    struct cv_seen s;
    cv_case_run(&k, &s);
    for (int i = 0; i < WAITERS; i++) {
        assert_int_equal(s.rc[i], 0);
        assert_true(s.held[i]);
        assert_int_equal(s.at_ms[i], 3);
    }
    struct cv_case t = {
        .timeout_ms = 1, .signal_at_ms = 5, .signaller_locks = 1, .hold_ms = 1, .waiters = 1};
    cv_case_run(&t, &s);
    assert_int_equal(s.rc[0], -RKV_ETIMEDOUT);
    assert_true(s.held[0]);
    assert_int_equal(s.at_ms[0], 1);
}

/* With a NIC, the port's timed waits end on the NIC's timer: a wait that
 * is not signalled times out at its deadline exactly (5 ms, and 100 ms
 * for the third waiter, armed after the first fired), holding the mutex;
 * a signalled one is not woken again by its deadline. */
static void test_timeout_on_the_nic_timer(void **state)
{
    (void)state;
    struct cv_case k = {.timeout_ms = 5,
                        .signal_at_ms = 50,
                        .signaller_locks = 1,
                        .hold_ms = 1,
                        .waiters = WAITERS,
                        .nic = 1};
    struct cv_seen s;
    cv_case_run(&k, &s);
    assert_int_equal(s.rc[0], -RKV_ETIMEDOUT);
    assert_int_equal(s.at_ms[0], 5);
    assert_int_equal(s.rc[1], 0);
    assert_int_equal(s.at_ms[1], 51);
    assert_int_equal(s.rc[2], -RKV_ETIMEDOUT);
    assert_int_equal(s.at_ms[2], 100);
    for (int i = 0; i < WAITERS; i++)
        assert_true(s.held[i]);
}

/* Signalled before its deadline on the NIC's timer: woken by the signal
 * (once the signaller lets go of the mutex), not timed out. A later
 * deadline armed first (200 ms) is replaced by an earlier one (100 ms, the
 * other waiters, who time out then) and armed again after it. */
static void test_signal_before_the_nic_timer(void **state)
{
    (void)state;
    struct cv_case k = {.timeout_ms = 100,
                        .signal_at_ms = 1,
                        .signaller_locks = 1,
                        .hold_ms = 2,
                        .waiters = 1,
                        .nic = 1};
    struct cv_seen s;
    cv_case_run(&k, &s);
    assert_int_equal(s.rc[0], 0);
    assert_true(s.held[0]);
    assert_int_equal(s.at_ms[0], 3);
    struct cv_case t = {.timeout_ms = 200,
                        .signal_at_ms = 150,
                        .signaller_locks = 1,
                        .hold_ms = 1,
                        .waiters = WAITERS,
                        .nic = 1};
    cv_case_run(&t, &s);
    assert_int_equal(s.rc[0], 0);
    assert_int_equal(s.at_ms[0], 151);
    for (int i = 1; i < WAITERS; i++) {
        assert_int_equal(s.rc[i], -RKV_ETIMEDOUT);
        assert_int_equal(s.at_ms[i], 100);
    }
    for (int i = 0; i < WAITERS; i++)
        assert_true(s.held[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_signal_with_mutex_held),
        cmocka_unit_test(test_timeout_while_waiting_for_the_mutex),
        cmocka_unit_test(test_signal_without_mutex),
        cmocka_unit_test(test_broadcast_with_mutex_held_and_timeout),
        cmocka_unit_test(test_timeout_on_the_nic_timer),
        cmocka_unit_test(test_signal_before_the_nic_timer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
