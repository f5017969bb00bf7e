/* harness/aggregate.h: a timed pass's aggregate over the workers' common
 * window. Fixed windows, so every case is exact: the formula it replaced
 * (every worker's bytes over the slowest worker's own duration) gives 2x
 * in test_serial_passes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>

#include "harness/aggregate.h"

#define GB 1000000000ull

/* got == want within eps, saying both when not */
static void near(double got, double want, double eps)
{
    if (!(fabs(got - want) <= eps))
        fail_msg("got %.9f, want %.9f", got, want);
}

/* Two workers, one after the other: together they moved what one moves. */
static void test_serial_passes(void **state)
{
    (void)state;
    const struct rkv_pass p[2] = {{.bytes = GB, .start_s = 100.0, .end_s = 101.0},
                                  {.bytes = GB, .start_s = 101.0, .end_s = 102.0}};
    near(rkv_pass_aggregate_gbs(p, 2), 1.0, 1e-9);
    /* in either order */
    const struct rkv_pass q[2] = {p[1], p[0]};
    near(rkv_pass_aggregate_gbs(q, 2), 1.0, 1e-9);
}

/* Two workers at once: twice one. */
static void test_overlapping_passes(void **state)
{
    (void)state;
    const struct rkv_pass p[2] = {{.bytes = GB, .start_s = 5.0, .end_s = 6.0},
                                  {.bytes = GB, .start_s = 5.0, .end_s = 6.0}};
    near(rkv_pass_aggregate_gbs(p, 2), 2.0, 1e-9);
}

/* Half overlapped: 2 GB over 1.5 s, whatever each worker's own time. */
static void test_staggered_passes(void **state)
{
    (void)state;
    const struct rkv_pass p[3] = {{.bytes = GB, .start_s = 0.5, .end_s = 1.5},
                                  {.bytes = GB, .start_s = 0.0, .end_s = 1.0},
                                  {.bytes = 0, .start_s = 0.0, .end_s = 9.0}};
    /* the worker that moved nothing does not stretch the window */
    near(rkv_pass_aggregate_gbs(p, 3), 2.0 / 1.5, 1e-9);
}

/* Nothing to say: no figure, never a division by zero or a negative one. */
static void test_no_figure(void **state)
{
    (void)state;
    near(rkv_pass_aggregate_gbs(NULL, 0), 0, 0);
    const struct rkv_pass none[2] = {{0}, {0}};
    near(rkv_pass_aggregate_gbs(none, 2), 0, 0);
    const struct rkv_pass empty[1] = {{.bytes = GB, .start_s = 3.0, .end_s = 3.0}};
    near(rkv_pass_aggregate_gbs(empty, 1), 0, 0);
    /* a pass that ended before it started: clocks not shared */
    const struct rkv_pass back[2] = {{.bytes = GB, .start_s = 0.0, .end_s = 1.0},
                                     {.bytes = GB, .start_s = 2.0, .end_s = 1.5}};
    near(rkv_pass_aggregate_gbs(back, 2), 0, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_serial_passes),
        cmocka_unit_test(test_overlapping_passes),
        cmocka_unit_test(test_staggered_passes),
        cmocka_unit_test(test_no_figure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
