/* Lock liveness in the twin (store/machine.c rkv_live_lock over the SimGrid
 * port): a lock word in a machine's shared segment whose holder's actor is
 * killed (a crashed node) is taken over by a waiter of another node; one
 * whose holder lives and releases it is waited for, never taken. SimGrid
 * runs in a child (it cannot be initialised twice). */
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

#include "rkv.h"
#include "sim/backend/sim.h"
#include "sim/backend/sim_int.h"
#include "store/store_int.h"

struct ll_lock {
    atomic_uint word;
    _Atomic uint64_t holder;
};

/* What the waiter saw, copied back from the child. */
struct ll_result {
    int live_took, dead_took; /* rkv_live_lock's answers */
    double live_at, dead_at;  /* simulated time each returned */
    unsigned dead_word;       /* the word's tag after the take-over */
    int ran;
};

struct ll_run {
    struct sim_world *w;
    struct rkv_port *p0, *p1;
    struct ll_lock *lk;
    struct ll_result *r;
    sg_actor_t holder;
    int release; /* the holder lets go after 50 ms (else dies holding it) */
};

static void ll_holder(int argc, char **argv)
{
    (void)argc, (void)argv;
    struct ll_run *run = sg_actor_self_get_data();
    rkv_live_lock(run->p0, &run->lk->word, &run->lk->holder, NULL, 7);
    sg_actor_sleep_for(run->release ? 0.05 : 1000.0);
    rkv_live_unlock(&run->lk->word, &run->lk->holder);
}

static void ll_waiter(int argc, char **argv)
{
    (void)argc, (void)argv;
    struct ll_run *run = sg_actor_self_get_data();
    struct ll_result *r = run->r;
    /* A live holder: waited for until it lets go. */
    sg_actor_sleep_for(0.001);
    r->live_took = rkv_live_lock(run->p1, &run->lk->word, &run->lk->holder, NULL, 9);
    r->live_at = simgrid_get_clock();
    rkv_live_unlock(&run->lk->word, &run->lk->holder);
    /* A holder whose node crashes while holding it. */
    run->release = 0;
    sg_actor_t h = sg_actor_init("holder2", sg_host_self());
    sg_actor_set_data(h, run);
    sg_actor_start(h, ll_holder, 0, NULL);
    sg_actor_sleep_for(0.001);
    sg_actor_kill(h);
    double t0 = simgrid_get_clock();
    r->dead_took = rkv_live_lock(run->p1, &run->lk->word, &run->lk->holder, NULL, 9);
    r->dead_at = simgrid_get_clock() - t0;
    r->dead_word = atomic_load(&run->lk->word);
    rkv_live_unlock(&run->lk->word, &run->lk->holder);
    r->ran = 1;
}

/* Without the take-over the waiter would spin in simulated time forever:
 * the child ends instead, and the parent reads nothing. */
static void ll_watchdog(int argc, char **argv)
{
    (void)argc, (void)argv;
    sg_actor_sleep_for(100.0);
    _exit(2);
}

static int ll_child(struct ll_result *r)
{
    char xml[64];
    snprintf(xml, sizeof(xml), "/tmp/rkv-live-%d.xml", (int)getpid());
    FILE *f = fopen(xml, "w");
    if (!f)
        return -1;
    fprintf(f, "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM "
               "\"https://simgrid.org/simgrid.dtd\">\n<platform version=\"4.1\"><zone id=\"z\" "
               "routing=\"Full\"><host id=\"h\" speed=\"1Gf\" core=\"2\"/></zone></platform>\n");
    fclose(f);
    struct sim_world w;
    if (sim_world_init(&w, 1) < 0)
        return -1;
    int argc = 2;
    char *argv[] = {"test", "--log=root.thres:critical", NULL};
    simgrid_init(&argc, argv);
    simgrid_load_platform(xml);
    unlink(xml);
    static struct ll_lock lk;
    struct ll_run run = {.w = &w, .lk = &lk, .r = r, .release = 1};
    sg_host_t h = sg_host_by_name("h");
    if (sim_port_create(&w, h, "s1.0", 0, 1, 1, 0, &run.p0) < 0 ||
        sim_port_create(&w, h, "s1.1", 0, 1, 1, 1, &run.p1) < 0)
        return -1;
    sg_actor_t a = sg_actor_init("holder", h);
    sg_actor_set_data(a, &run);
    sg_actor_start(a, ll_holder, 0, NULL);
    sg_actor_t dog = sg_actor_init("watchdog", h);
    sg_actor_start(dog, ll_watchdog, 0, NULL);
    sg_actor_daemonize(dog);
    sg_actor_t b = sg_actor_init("waiter", h);
    sg_actor_set_data(b, &run);
    sg_actor_start(b, ll_waiter, 0, NULL);
    simgrid_run();
    return 0;
}

static void test_dead_holder_taken_over_in_the_twin(void **state)
{
    (void)state;
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fd[0]);
        struct ll_result r = {0};
        int rc = ll_child(&r);
        ssize_t n = write(fd[1], &r, sizeof(r));
        _exit(rc == 0 && n == (ssize_t)sizeof(r) ? 0 : 1); /* SimGrid is never torn down */
    }
    close(fd[1]);
    struct ll_result r;
    assert_int_equal(read(fd[0], &r, sizeof(r)), sizeof(r));
    close(fd[0]);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_true(r.ran);
    assert_int_equal(r.live_took, 0); /* a live holder is waited for */
    assert_true(r.live_at >= 0.05);
    assert_int_equal(r.dead_took, 7); /* a dead one's lock is taken: its tag */
    assert_int_equal(r.dead_word, 9);
    assert_true(r.dead_at < 0.5); /* within a few liveness looks (20 ms apart) */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dead_holder_taken_over_in_the_twin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
