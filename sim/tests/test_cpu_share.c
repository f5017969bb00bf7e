/* rkv's processor sharing of a host's cores (sim/backend/cpu.c, "the cores
 * shared") against SimGrid's CPU model, which it stands in for: the same
 * bursts, started at the same simulated times on a host of 2 cores, must
 * end at the same times both ways (fewer bursts than cores, more, ties,
 * arrivals and ends in between). Each way runs SimGrid in a child process
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

#include "sim/backend/sim.h"
#include "sim/backend/sim_int.h"

#define N_BURSTS 9

/* Start times and lengths (seconds of one core): one alone, then up to 6
 * at once on 2 cores, two that start together with the same length, one
 * that starts as another ends, and a long one that outlives the rest. */
static const double burst_at[N_BURSTS] = {0,      1e-3,   1e-3, 1.2e-3, 1.2e-3,
                                          1.5e-3, 1.5e-3, 2e-3, 3e-3};
static const double burst_len[N_BURSTS] = {5e-4, 8e-4, 3e-4, 2e-4, 2e-4, 1e-3, 4e-5, 2e-3, 1e-4};

struct cs {
    struct sim_world w;
    double end[N_BURSTS];
};

struct cs_actor {
    struct cs *s;
    int i;
};

static void cs_burst(int argc, char **argv)
{
    (void)argc, (void)argv;
    struct cs_actor *a = sg_actor_self_get_data();
    sg_actor_sleep_until(burst_at[a->i]);
    sim_cpu_run(&a->s->w, sg_host_self(), burst_len[a->i]);
    a->s->end[a->i] = simgrid_get_clock();
}

static int cs_run(int share, double end[N_BURSTS])
{
    struct cs s = {0};
    char xml[64];
    snprintf(xml, sizeof(xml), "/tmp/rkv-cpu-share-%d.xml", (int)getpid());
    FILE *f = fopen(xml, "w");
    if (!f || sim_world_init(&s.w, 1) < 0)
        return -1;
    fprintf(f, "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM "
               "\"https://simgrid.org/simgrid.dtd\">\n<platform version=\"4.1\">\n"
               "  <zone id=\"z\" routing=\"Full\">\n"
               "    <host id=\"h\" speed=\"1Gf\" core=\"2\"/>\n  </zone>\n</platform>\n");
    fclose(f);
    s.w.cpu_share = share;
    int argc = 2;
    char *argv[] = {"test", "--log=root.thres:critical", NULL};
    simgrid_init(&argc, argv);
    simgrid_load_platform(xml);
    unlink(xml);
    struct cs_actor as[N_BURSTS];
    for (int i = 0; i < N_BURSTS; i++) {
        as[i] = (struct cs_actor){.s = &s, .i = i};
        sg_actor_t a = sg_actor_init("burst", sg_host_by_name("h"));
        sg_actor_set_data(a, &as[i]);
        sg_actor_start(a, cs_burst, 0, NULL);
    }
    simgrid_run();
    memcpy(end, s.end, sizeof(s.end));
    return 0;
}

static void cs_case(int share, double end[N_BURSTS])
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    fflush(stdout); /* or the child repeats what is buffered */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fd[0]);
        double e[N_BURSTS];
        for (int i = 0; i < N_BURSTS; i++)
            e[i] = -1;
        cs_run(share, e);
        ssize_t w = write(fd[1], e, sizeof(e));
        _exit(w == (ssize_t)sizeof(e) ? 0 : 1); /* as test_netmodel: no teardown */
    }
    close(fd[1]);
    ssize_t r = read(fd[0], end, N_BURSTS * sizeof(*end));
    close(fd[0]);
    int st;
    waitpid(pid, &st, 0);
    assert_true(r == N_BURSTS * sizeof(*end) && WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void test_bursts_end_when_simgrid_ends_them(void **state)
{
    (void)state;
    double sg[N_BURSTS], rkv[N_BURSTS];
    cs_case(0, sg);
    cs_case(1, rkv);
    for (int i = 0; i < N_BURSTS; i++) {
        printf("# burst %d: %.3g s of CPU from %.6f s: SimGrid ends it at %.9f s, rkv at %.9f s\n",
               i, burst_len[i], burst_at[i], sg[i], rkv[i]);
        assert_true(sg[i] >= burst_at[i] + burst_len[i] - 1e-12);
        assert_true(fabs(sg[i] - rkv[i]) < 1e-9);
    }
    /* Shared for real: up to 6 bursts on 2 cores, so burst 1 ends late. */
    assert_true(sg[1] > burst_at[1] + burst_len[1] + 1e-4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bursts_end_when_simgrid_ends_them),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
