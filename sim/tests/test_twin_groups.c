/* A client's call touches few machines of a large cluster: it groups its
 * rows by sorting (machine, position) when the call is small for the
 * cluster, by counting per machine when it is large, and keeps state only
 * for the servers it used. Both ways, in a 32-machine twin with real
 * payloads, every pulled value must match the oracle. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness/tests/rkv_run.h"

static const char *const SCENARIO =
    "seed: 11\n"
    "cluster: {machines: 32, servers_per_machine: 2, workers_per_machine: 1}\n"
    "tensors:\n"
    "  - {name: r, dtype: f32, rows: 1000, shape: [4], partition: range}\n"
    "  - {name: h, dtype: f64, rows: 777, shape: [2], partition: hash}\n"
    "workload:\n"
    /* 3 ids in 32 machines: sorted keys, ids in any order */
    "  - {name: few-sum, tensor: r, push: 0.5, push_op: sum, ids_per_request: 3, keys: uniform, "
    "rounds: 20, barrier_after: true}\n"
    "  - {name: few-assign, tensor: h, push: 0.5, push_op: assign, ids_per_request: 5, keys: "
    "uniform, rounds: 20, barrier_after: true}\n"
    /* 40 ids in 32 machines: counted per machine, repeats included */
    "  - {name: many-sum, tensor: r, push: 0.5, push_op: sum, ids_per_request: 40, keys: zipf, "
    "zipf_s: 1.1, rounds: 10, barrier_after: true}\n"
    "  - {name: many-assign, tensor: h, push: 0.5, push_op: assign, ids_per_request: 64, keys: "
    "uniform, rounds: 10, barrier_after: true}\n"
    "expect: {oracle: strict}\n"
    "sim: {platform: star}\n";

static void test_groups_small_and_large_calls(void **state)
{
    (void)state;
    FILE *f = fopen("twin-groups.yaml", "w");
    assert_non_null(f);
    fputs(SCENARIO, f);
    fclose(f);
    int rc = run_rkv("", "run twin-groups.yaml");
    if (rc != 0 || !strstr(out, "verdict: PASS"))
        fail_msg("rkv run twin-groups.yaml: exit %d\n%s", rc, out);
    assert_non_null(strstr(out, "64 servers, 32 workers"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_groups_small_and_large_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
