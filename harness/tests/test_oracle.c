/* The oracle's API fed reads directly: concurrent assigns must settle on one
 * winner that every later read agrees with; the request streams draw the
 * keys their phase names, or say they cannot. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness/oracle.h"
#include "harness/tests/tmp_scenario.h"

/* Two workers assign row 0 (the only row) in every request of one phase:
 * after the barrier the row holds worker 0's last write or worker 1's. */
static const char two_writers[] =
    "seed: 7\n"
    "cluster: {machines: 1, servers_per_machine: 1, workers_per_machine: 2}\n"
    "tensors:\n"
    "  - {name: t, dtype: f32, rows: 1, shape: [4]}\n"
    "workload:\n"
    "  - {name: race, tensor: t, push: 1.0, push_op: assign, ids_per_request: 1, rounds: 3,\n"
    "     barrier_after: true}\n"
    "  - {name: read, tensor: t, push: 0, rounds: 1}\n";

static struct rkv_scenario *load(const char *text)
{
    char path[64], err[256];
    tmp_scenario(path, sizeof(path), "oracle", text);
    struct rkv_scenario *sc;
    if (rkv_scenario_load(path, &sc, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    unlink(path);
    return sc;
}

/* An oracle of sc past its first epoch (phases 0..last): in the epoch of
 * phase last + 1, where reads check what the first one pushed. */
static struct rkv_oracle *after_epoch(const struct rkv_scenario *sc, uint32_t last)
{
    struct rkv_oracle *o;
    assert_int_equal(rkv_oracle_create(sc, &o), 0);
    assert_int_equal(rkv_oracle_epoch_begin(o, 0, last), 0);
    rkv_oracle_epoch_end(o);
    assert_int_equal(rkv_oracle_epoch_begin(o, last + 1, last + 1), 0);
    return o;
}

/* Worker w's last assign of row 0 (round 2 of phase 0). */
static void last_write(const struct rkv_scenario *sc, uint32_t w, float *row)
{
    for (uint32_t j = 0; j < 4; j++)
        row[j] = (float)rkv_wl_value(sc, 0, 0, 0, w, 2, 0, j);
}

static void test_concurrent_assign_winner_is_pinned(void **state)
{
    (void)state;
    struct rkv_scenario *sc = load(two_writers);
    struct rkv_oracle *o = after_epoch(sc, 0);
    float a[4], b[4], mix[4];
    last_write(sc, 0, a);
    last_write(sc, 1, b);
    assert_memory_not_equal(a, b, sizeof(a));
    char why[512];
    /* A mix of the two is never right. */
    memcpy(mix, a, sizeof(mix));
    mix[3] = b[3];
    assert_int_equal(rkv_oracle_check_row(o, 0, 0, 0, 0, mix, why, sizeof(why)), -1);
    /* Each candidate was tried: the value printed is one of two. */
    assert_non_null(strstr(why, " or another candidate's value, got "));
    assert_non_null(strstr(why, "; 2 candidates)"));
    /* Worker 1 reads worker 0's write first: that is the winner. */
    assert_int_equal(rkv_oracle_check_row(o, 0, 0, 1, 0, a, why, sizeof(why)), 0);
    assert_int_equal(rkv_oracle_check_row(o, 0, 0, 0, 0, a, why, sizeof(why)), 0);
    /* Anyone who sees the other write now sees another winner: wrong,
     * mid-phase (the row is not written in this epoch) as after a barrier. */
    assert_int_equal(rkv_oracle_check_row(o, 0, 0, 0, 0, b, why, sizeof(why)), -1);
    assert_non_null(strstr(why, "last assigned by worker 0"));
    assert_int_equal(rkv_oracle_check_row(o, 0, 0, 1, 1, b, why, sizeof(why)), -1);
    assert_int_equal(rkv_oracle_check_row(o, 0, 0, 1, 1, a, why, sizeof(why)), 0);
    rkv_oracle_destroy(o);

    /* The same from the other side: worker 1's write seen first wins, and
     * the pin is written for the launcher (one line, once). */
    char *log = NULL;
    size_t log_len = 0;
    FILE *pins = open_memstream(&log, &log_len);
    assert_non_null(pins);
    assert_int_equal(rkv_oracle_create(sc, &o), 0);
    rkv_oracle_set_pin_log(o, pins);
    assert_int_equal(rkv_oracle_epoch_begin(o, 0, 0), 0);
    rkv_oracle_epoch_end(o);
    assert_int_equal(rkv_oracle_check_row(o, 0, 0, 0, 0, b, why, sizeof(why)), 0);
    assert_int_equal(rkv_oracle_check_row(o, 0, 0, 0, 0, b, why, sizeof(why)), 0);
    assert_int_equal(rkv_oracle_check_row(o, 0, 0, 1, 0, a, why, sizeof(why)), -1);
    rkv_oracle_destroy(o);
    fclose(pins);
    assert_string_equal(log, "PIN t=0 r=0 e=0 w=1 p=0 n=2\n");
    free(log);

    /* Another worker process reads the row first in the next epoch (the
     * read phase): its pin names the epoch of the assigns, as the one
     * above does, so that the launcher compares the two. It named the
     * reader's epoch (e=1), and two processes shown different winners
     * passed on tcp (an outside tester). */
    log = NULL;
    pins = open_memstream(&log, &log_len);
    assert_non_null(pins);
    assert_int_equal(rkv_oracle_create(sc, &o), 0);
    rkv_oracle_set_pin_log(o, pins);
    assert_int_equal(rkv_oracle_epoch_begin(o, 0, 0), 0);
    rkv_oracle_epoch_end(o);
    assert_int_equal(rkv_oracle_epoch_begin(o, 1, 1), 0);
    assert_int_equal(rkv_oracle_check_row(o, 0, 0, 0, 1, a, why, sizeof(why)), 0);
    rkv_oracle_destroy(o);
    fclose(pins);
    assert_string_equal(log, "PIN t=0 r=0 e=0 w=0 p=0 n=2\n");
    free(log);
    rkv_scenario_free(sc);
}

/* Regression: the oracle held inexact rows to 1e-4 x (1 + |want|) on top
 * of the store's rounding, so an sgd phase with lr 1e-6 (accepted: the
 * loader takes any lr of 16 ulps or more) passed with every push dropped
 * (an outside tester's store mutant). One push of row 0; the row read
 * after the barrier must hold it. */
static void test_small_sgd_step_is_checked(void **state)
{
    (void)state;
    struct rkv_scenario *sc = load("seed: 3\n"
                                   "cluster: {machines: 1, servers_per_machine: 1, "
                                   "workers_per_machine: 1}\n"
                                   "tensors:\n"
                                   "  - {name: t, dtype: f64, rows: 1, shape: [4]}\n"
                                   "workload:\n"
                                   "  - {name: step, tensor: t, push: 1.0, push_op: sgd, lr: "
                                   "0.000001, ids_per_request: 1, rounds: 1}\n"
                                   "  - {name: read, tensor: t, push: 0, rounds: 1}\n");
    struct rkv_oracle *o = after_epoch(sc, 0);
    double stepped[4], untouched[4] = {0};
    for (uint32_t j = 0; j < 4; j++)
        stepped[j] = -0.000001 * rkv_wl_value(sc, 0, 0, 0, 0, 0, 0, j);
    char why[512];
    assert_int_equal(rkv_oracle_check_row(o, 0, 0, 0, 0, stepped, why, sizeof(why)), 0);
    if (rkv_oracle_check_row(o, 0, 0, 0, 0, untouched, why, sizeof(why)) != -1)
        fail_msg("a row without its sgd push (lr 1e-6) passed the oracle");
    rkv_oracle_destroy(o);
    rkv_scenario_free(sc);
}

/* A f64 value off in its twelfth digit (an f32 rate's rounding, say) was
 * printed "expected 173408.2, got 173408.2" (an outside tester): both are
 * printed with the digits that tell f64 values apart. */
static void test_f64_values_printed_apart(void **state)
{
    (void)state;
    struct rkv_scenario *sc = load("seed: 5\n"
                                   "cluster: {machines: 1, servers_per_machine: 1, "
                                   "workers_per_machine: 1}\n"
                                   "tensors:\n"
                                   "  - {name: w, dtype: f64, rows: 1}\n"
                                   "workload:\n"
                                   "  - {name: set, tensor: w, push: 1.0, push_op: assign, "
                                   "ids_per_request: 1, rounds: 1}\n"
                                   "  - {name: read, tensor: w, push: 0, rounds: 1}\n");
    struct rkv_oracle *o = after_epoch(sc, 0);
    double set = rkv_wl_value(sc, 0, 0, 0, 0, 0, 0, 0), off = set * (1 + 1e-12);
    assert_true(set >= 1000); /* seed 5's: a 20-bit value, off past its ninth digit */
    char why[512], want[64], got[64];
    assert_int_equal(rkv_oracle_check_row(o, 0, 0, 0, 0, &set, why, sizeof(why)), 0);
    assert_int_equal(rkv_oracle_check_row(o, 0, 0, 0, 0, &off, why, sizeof(why)), -1);
    snprintf(want, sizeof(want), "expected %.17g,", set);
    snprintf(got, sizeof(got), "got %.17g ", off);
    if (!strstr(why, want) || !strstr(why, got))
        fail_msg("\"%s\" does not print \"%s\" and \"%s\"", why, want, got);
    rkv_oracle_destroy(o);
    rkv_scenario_free(sc);
}

/* Integer sums carry the dtype's whole range and wrap: with values of a
 * few bits a store that summed i64 rows in doubles (wrong past 2^53)
 * passed every scenario (an outside tester's mutant). Two workers sum
 * into one i64 and one i32 row; the oracle wants the wrapped sums, exactly,
 * and says the values as integers. */
static void test_integer_sums_wrap_exactly(void **state)
{
    (void)state;
    struct rkv_scenario *sc = load("seed: 9\n"
                                   "cluster: {machines: 1, servers_per_machine: 1, "
                                   "workers_per_machine: 2}\n"
                                   "tensors:\n"
                                   "  - {name: l, dtype: i64, rows: 1}\n"
                                   "  - {name: i, dtype: i32, rows: 1}\n"
                                   "workload:\n"
                                   "  - {name: a, tensor: l, push: 1.0, push_op: sum, "
                                   "ids_per_request: 1, rounds: 3}\n"
                                   "  - {name: b, tensor: i, push: 1.0, push_op: sum, "
                                   "ids_per_request: 1, rounds: 3, barrier_after: true}\n"
                                   "  - {name: read, tensor: l, push: 0, rounds: 1}\n");
    struct rkv_oracle *o = after_epoch(sc, 1);
    uint64_t l = 0;
    uint32_t i = 0;
    double in_doubles = 0;
    int big = 0;
    for (uint32_t w = 0; w < 2; w++)
        for (uint32_t r = 0; r < 3; r++) {
            int64_t v = rkv_wl_ivalue(sc, 0, 0, 0, w, r, 0, 0);
            big |= v > (1ll << 53) || v < -(1ll << 53);
            l += (uint64_t)v;
            in_doubles += (double)v;
            i += (uint32_t)rkv_wl_ivalue(sc, 1, 0, 1, w, r, 0, 0);
        }
    assert_true(big);
    int64_t want = (int64_t)l, rounded = (int64_t)in_doubles;
    int32_t want_i = (int32_t)i, wrong_i = want_i ^ 1;
    char why[512], s[64];
    assert_int_equal(rkv_oracle_check_row(o, 0, 0, 0, 0, &want, why, sizeof(why)), 0);
    assert_int_equal(rkv_oracle_check_row(o, 1, 0, 0, 0, &want_i, why, sizeof(why)), 0);
    assert_int_equal(rkv_oracle_check_row(o, 1, 0, 0, 0, &wrong_i, why, sizeof(why)), -1);
    assert_true(rounded != want); /* doubles lost the low bits, as the mutant's did */
    assert_int_equal(rkv_oracle_check_row(o, 0, 0, 0, 0, &rounded, why, sizeof(why)), -1);
    snprintf(s, sizeof(s), "expected %lld, got %lld ", (long long)want, (long long)rounded);
    if (!strstr(why, s))
        fail_msg("\"%s\" does not say \"%s\"", why, s);
    rkv_oracle_destroy(o);
    rkv_scenario_free(sc);
}

/* 1,600 f32 sgd pushes of lr 2e-6 to one row: the rounding the oracle
 * must allow for outgrows what half of them add up to, and an outside
 * tester's store that dropped half of them passed in silence. The row's
 * right value still matches, but the check says it proves little (2). */
static void test_sgd_steps_below_rounding_are_said(void **state)
{
    (void)state;
    struct rkv_scenario *sc = load("seed: 2\n"
                                   "cluster: {machines: 2, servers_per_machine: 1, "
                                   "workers_per_machine: 2}\n"
                                   "tensors:\n"
                                   "  - {name: e, dtype: f32, rows: 1, shape: [4]}\n"
                                   "workload:\n"
                                   "  - {name: s, tensor: e, push: 1.0, push_op: sgd, lr: 2e-6, "
                                   "ids_per_request: 1, rounds: 400}\n"
                                   "  - {name: read, tensor: e, push: 0, rounds: 1}\n");
    struct rkv_oracle *o = after_epoch(sc, 0);
    float row[4] = {0};
    for (uint32_t w = 0; w < 4; w++)
        for (uint32_t k = 0; k < 400; k++)
            for (uint32_t j = 0; j < 4; j++)
                row[j] -= (float)(2e-6 * rkv_wl_value(sc, 0, 0, 0, w, k, 0, j));
    char why[512];
    int rc = rkv_oracle_check_row(o, 0, 0, 0, 0, row, why, sizeof(why));
    if (rc != 2)
        fail_msg("the right value of 1,600 tiny sgd steps: %d (expected 2) %s", rc,
                 rc < 0 ? why : "");
    rkv_oracle_destroy(o);
    rkv_scenario_free(sc);
}

/* A book of 99 rows on machine 0 and 1 on machine 1: the rejection
 * sampler found that one remote row in 64 tries about half the time, and
 * then drew a uniform row instead, a local one 99 times in 100. Every id
 * of worker 0's remote-only stream is row 99; worker 1's never is. */
static void test_remote_only_draws_only_remote_rows(void **state)
{
    (void)state;
    char text[1024];
    int n = snprintf(text, sizeof(text),
                     "cluster: {machines: 2, servers_per_machine: 1, workers_per_machine: 1}\n"
                     "tensors:\n"
                     "  - {name: t, rows: 100, partition: explicit, book: [");
    for (int r = 0; r < 100; r++)
        n += snprintf(text + n, sizeof(text) - (size_t)n, "%s%d", r ? ", " : "", r == 99);
    snprintf(text + n, sizeof(text) - (size_t)n,
             "]}\n"
             "workload:\n"
             "  - {name: far, tensor: t, pull: 1.0, ids_per_request: 16, keys: remote-only,\n"
             "     rounds: 50}\n");
    struct rkv_scenario *sc = load(text);
    struct rkv_oracle *o;
    assert_int_equal(rkv_oracle_create(sc, &o), 0);
    char why[256];
    for (uint32_t w = 0; w < 2; w++) {
        struct rkv_wl_gen g;
        rkv_wl_gen_init(&g, o, 0, w);
        assert_non_null(g.ids);
        assert_int_equal(rkv_wl_gen_check(&g, why, sizeof(why)), 0);
        for (uint32_t r = 0; r < 50; r++) {
            struct rkv_wl_req q;
            rkv_wl_gen_next(&g, &q);
            for (uint32_t k = 0; k < q.n; k++) {
                if (w == 0 && q.ids[k] != 99)
                    fail_msg("worker 0, round %u: row %llu is its own", r,
                             (unsigned long long)q.ids[k]);
                if (w == 1 && q.ids[k] == 99)
                    fail_msg("worker 1, round %u: row 99 is its own", r);
            }
        }
        rkv_wl_gen_free(&g);
    }
    rkv_oracle_destroy(o);
    rkv_scenario_free(sc);
}

/* A scenario built in code skips the loader's check: the stream of a
 * worker whose machine owns no rows (local-only) or all of them
 * (remote-only) says so instead of drawing uniform rows. */
static void test_keys_that_do_not_exist_are_named(void **state)
{
    (void)state;
    struct rkv_scenario *sc =
        load("cluster: {machines: 2, servers_per_machine: 1, workers_per_machine: 1}\n"
             "tensors:\n"
             "  - {name: t, rows: 4, partition: explicit, book: [0]}\n"
             "workload:\n"
             "  - {name: near, tensor: t, pull: 1.0, rounds: 1}\n");
    struct rkv_oracle *o;
    assert_int_equal(rkv_oracle_create(sc, &o), 0);
    char why[256];
    static const struct {
        enum rkv_sc_keys keys;
        uint32_t worker;
        const char *want; /* NULL: the keys exist */
    } cases[] = {
        {RKV_KEYS_LOCAL_ONLY, 0, NULL},
        {RKV_KEYS_LOCAL_ONLY, 1,
         "phase \"near\": keys: local-only, but machine 1 (worker w1) owns no rows of tensor "
         "\"t\""},
        {RKV_KEYS_REMOTE_ONLY, 0,
         "phase \"near\": keys: remote-only, but machine 0 (worker w0) owns every row of tensor "
         "\"t\", so it has no remote rows"},
        {RKV_KEYS_REMOTE_ONLY, 1, NULL},
        {RKV_KEYS_UNIFORM, 1, NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sc->phases[0].keys = cases[i].keys;
        struct rkv_wl_gen g;
        rkv_wl_gen_init(&g, o, 0, cases[i].worker);
        assert_non_null(g.ids);
        int rc = rkv_wl_gen_check(&g, why, sizeof(why));
        if (!cases[i].want) {
            assert_int_equal(rc, 0);
        } else {
            assert_int_equal(rc, -RKV_ECONFIG);
            assert_string_equal(why, cases[i].want);
        }
        rkv_wl_gen_free(&g);
    }
    rkv_oracle_destroy(o);
    rkv_scenario_free(sc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_assign_winner_is_pinned),
        cmocka_unit_test(test_small_sgd_step_is_checked),
        cmocka_unit_test(test_f64_values_printed_apart),
        cmocka_unit_test(test_integer_sums_wrap_exactly),
        cmocka_unit_test(test_sgd_steps_below_rounding_are_said),
        cmocka_unit_test(test_remote_only_draws_only_remote_rows),
        cmocka_unit_test(test_keys_that_do_not_exist_are_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
