/* harness/probe_tcp.h: the loopback TCP probe gives a figure for one and
 * for several streams (real sockets, real processes), and none for
 * arguments out of its range. No threshold on the figure: the host may be
 * loaded. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "harness/probe_tcp.h"

static void test_streams(void **state)
{
    (void)state;
    assert_true(rkv_probe_tcp_gbps(1, 1u << 20) > 0);
    assert_true(rkv_probe_tcp_gbps(2, 256u << 10) > 0);
    /* every child was reaped */
    assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);
}

static void test_out_of_range(void **state)
{
    (void)state;
    assert_true(rkv_probe_tcp_gbps(0, 1u << 20) == 0);
    assert_true(rkv_probe_tcp_gbps(RKV_PROBE_TCP_MAX_STREAMS + 1, 1u << 20) == 0);
    assert_true(rkv_probe_tcp_gbps(1, 4095) == 0);
    assert_true(rkv_probe_tcp_gbps(1, (64u << 20) + 1) == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_out_of_range),
        cmocka_unit_test(test_streams),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
