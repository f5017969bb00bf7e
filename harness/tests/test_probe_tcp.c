/* harness/probe_tcp.h: the loopback TCP probe gives a figure for one and
 * for several streams (real sockets, real processes), each side's CPU of
 * one transfer (what rkv calibrate charges per byte), and none for
 * arguments out of its range. No threshold on a figure: the host may be
 * loaded. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "harness/probe_tcp.h"
#include "rkv.h"

static void test_streams(void **state)
{
    (void)state;
    assert_true(rkv_probe_tcp_gbps(1, 1u << 20) > 0);
    assert_true(rkv_probe_tcp_gbps(2, 256u << 10) > 0);
    /* every child was reaped */
    assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);
}

/* Each side's CPU is its processes' own and grows with the bytes. The
 * fixed part of a transfer (fork, the copy-on-write faults of the parent's
 * mappings, connect) is not small beside 32 MiB under ASan, whose shadow
 * mappings a child faults in: 1 MiB against 32 MiB once came out the wrong
 * way round in CI. 64 KiB against 512 MiB puts a copy of 0.5 GiB, some
 * hundred milliseconds of CPU per side, against a fixed part of a few; a
 * load on the host does not count, since only the children's own CPU is. */
static void test_once_reports_each_side_cpu(void **state)
{
    (void)state;
    struct rkv_probe_tcp_run small, big;
    assert_int_equal(rkv_probe_tcp_once(1, 64u << 10, 64u << 10, &small), 0);
    assert_int_equal(rkv_probe_tcp_once(1, 512u << 20, 1u << 20, &big), 0);
    assert_true(small.gbps > 0 && big.gbps > 0);
    assert_true(small.send_cpu_s > 0 && small.recv_cpu_s > 0);
    assert_true(big.send_cpu_s > small.send_cpu_s);
    assert_true(big.recv_cpu_s > small.recv_cpu_s);
    /* a stream that is not a multiple of the writes ends with a short one */
    assert_int_equal(rkv_probe_tcp_once(2, (1u << 20) + 123, 64u << 10, &small), 0);
    assert_true(small.gbps > 0);
    assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);
}

static void test_out_of_range(void **state)
{
    (void)state;
    assert_true(rkv_probe_tcp_gbps(0, 1u << 20) == 0);
    assert_true(rkv_probe_tcp_gbps(RKV_PROBE_TCP_MAX_STREAMS + 1, 1u << 20) == 0);
    assert_true(rkv_probe_tcp_gbps(1, 4095) == 0);
    assert_true(rkv_probe_tcp_gbps(1, (64u << 20) + 1) == 0);
    struct rkv_probe_tcp_run run = {.gbps = -1};
    assert_int_equal(rkv_probe_tcp_once(1, 0, 1u << 20, &run), -RKV_EINVAL);
    assert_int_equal(rkv_probe_tcp_once(1, RKV_PROBE_TCP_MAX_STREAM_BYTES + 1, 1u << 20, &run),
                     -RKV_EINVAL);
    assert_int_equal(rkv_probe_tcp_once(0, 1u << 20, 1u << 20, &run), -RKV_EINVAL);
    assert_true(run.gbps == -1); /* untouched on failure */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_out_of_range),
        cmocka_unit_test(test_streams),
        cmocka_unit_test(test_once_reports_each_side_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
