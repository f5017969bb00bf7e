/* Callbacks at simulated dates (sim/backend/at.c): one heap per world
 * behind one SimGrid kernel timer. They run at their date, in the order of
 * their dates and, at one date, in the order they were set, including the
 * ones a callback sets for now or for a date already past; a cancelled one
 * never runs, and does not move the clock either (the kernel timer follows
 * the first date). In-process: SimGrid is initialised once, one test. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <simgrid/actor.h>
#include <simgrid/engine.h>
#include <simgrid/host.h>

#include "sim/backend/at.h"
#include "sim/backend/sim.h"

static struct sim_world W;
static char ran[32];
static double ran_at[32];
static int n_ran;
static struct sim_at *d_at, *e_at;

static void log_cb(void *arg)
{
    const char *name = arg;
    if (n_ran < 31) {
        ran[n_ran] = name[0];
        ran_at[n_ran++] = simgrid_get_clock();
    }
    if (name[0] == 'B') { /* for now, and for later */
        assert_non_null(sim_at_set(&W.ats, simgrid_get_clock(), log_cb, "F"));
        assert_non_null(sim_at_set(&W.ats, 4e-3, log_cb, "G"));
    }
    if (name[0] == 'A') /* for a date already past: runs now, after A */
        assert_non_null(sim_at_set(&W.ats, 2e-3, log_cb, "H"));
}

static void driver(int argc, char **argv)
{
    (void)argc, (void)argv;
    assert_non_null(sim_at_set(&W.ats, 3e-3, log_cb, "A"));
    assert_non_null(sim_at_set(&W.ats, 1e-3, log_cb, "B"));
    assert_non_null(sim_at_set(&W.ats, 1e-3, log_cb, "C"));
    assert_non_null(d_at = sim_at_set(&W.ats, 2e-3, log_cb, "D"));
    assert_non_null(e_at = sim_at_set(&W.ats, 5e-3, log_cb, "E"));
    sim_at_cancel(&W.ats, d_at);
    sg_actor_sleep_until(4.5e-3);
    sim_at_cancel(&W.ats, e_at); /* the last one: the clock stops here */
}

static void test_callbacks_in_date_then_set_order(void **state)
{
    (void)state;
    char xml[64];
    snprintf(xml, sizeof(xml), "/tmp/rkv-at-%d.xml", (int)getpid());
    FILE *f = fopen(xml, "w");
    assert_non_null(f);
    assert_int_equal(sim_world_init(&W, 1), 0);
    fprintf(f, "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM "
               "\"https://simgrid.org/simgrid.dtd\">\n<platform version=\"4.1\">\n"
               "  <zone id=\"z\" routing=\"Full\">\n"
               "    <host id=\"h\" speed=\"1Gf\"/>\n  </zone>\n</platform>\n");
    fclose(f);
    int argc = 2;
    char *argv[] = {"test", "--log=root.thres:critical", NULL};
    simgrid_init(&argc, argv);
    simgrid_load_platform(xml);
    unlink(xml);
    sg_actor_t a = sg_actor_init("driver", sg_host_by_name("h"));
    sg_actor_start(a, driver, 0, NULL);
    simgrid_run();
    ran[n_ran] = 0;
    assert_string_equal(ran, "BCFAHG");
    const double want[] = {1e-3, 1e-3, 1e-3, 3e-3, 3e-3, 4e-3};
    for (int i = 0; i < n_ran; i++)
        assert_true(fabs(ran_at[i] - want[i]) < 1e-12);
    assert_true(fabs(simgrid_get_clock() - 4.5e-3) < 1e-12);
    assert_int_equal(W.ats.heap.len, 0);
    assert_null(W.ats.ktimer);
    sim_world_fini(&W);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_callbacks_in_date_then_set_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
