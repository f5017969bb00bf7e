/* Unit tests of the push handlers: each built-in op on each dtype against
 * hand-computed rows, the refusals, and custom handler dispatch. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <float.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rkv.h"
#include "store/handlers.h"

static const enum rkv_dtype all_dtypes[] = {RKV_F32, RKV_F64, RKV_I32, RKV_I64};

/* The last element is a canary: n_elems is always one less. */
static void test_assign(void **state)
{
    (void)state;
    float f[3] = {1, 2, 9}, fi[3] = {-1.5f, 4, 7};
    double d[3] = {1, 2, 9}, di[3] = {1e300, -0.0, 7};
    int32_t i[3] = {1, 2, 9}, ii[3] = {INT32_MIN, INT32_MAX, 7};
    int64_t l[3] = {1, 2, 9}, li[3] = {INT64_MIN, -5, 7};
    assert_int_equal(rkv_handler_apply(NULL, RKV_OP_ASSIGN, RKV_F32, f, NULL, fi, 2, 0), 0);
    assert_int_equal(rkv_handler_apply(NULL, RKV_OP_ASSIGN, RKV_F64, d, NULL, di, 2, 0), 0);
    assert_int_equal(rkv_handler_apply(NULL, RKV_OP_ASSIGN, RKV_I32, i, NULL, ii, 2, 0), 0);
    assert_int_equal(rkv_handler_apply(NULL, RKV_OP_ASSIGN, RKV_I64, l, NULL, li, 2, 0), 0);
    assert_true(f[0] == -1.5f && f[1] == 4 && f[2] == 9);
    assert_true(d[0] == 1e300 && d[1] == 0 && signbit(d[1]) && d[2] == 9);
    assert_true(i[0] == INT32_MIN && i[1] == INT32_MAX && i[2] == 9);
    assert_true(l[0] == INT64_MIN && l[1] == -5 && l[2] == 9);
}

static void test_sum(void **state)
{
    (void)state;
    float f[3] = {1, 2.5f, 9}, fi[3] = {0.25f, -3, 7};
    double d[3] = {1, 2.5, 9}, di[3] = {0.125, -3, 7};
    int32_t i[3] = {5, INT32_MAX, 9}, ii[3] = {-7, 1, 7};
    int64_t l[3] = {5, INT64_MIN, 9}, li[3] = {-7, -1, 7};
    assert_int_equal(rkv_handler_apply(NULL, RKV_OP_SUM, RKV_F32, f, NULL, fi, 2, 0), 0);
    assert_int_equal(rkv_handler_apply(NULL, RKV_OP_SUM, RKV_F64, d, NULL, di, 2, 0), 0);
    assert_int_equal(rkv_handler_apply(NULL, RKV_OP_SUM, RKV_I32, i, NULL, ii, 2, 0), 0);
    assert_int_equal(rkv_handler_apply(NULL, RKV_OP_SUM, RKV_I64, l, NULL, li, 2, 0), 0);
    assert_true(f[0] == 1.25f && f[1] == -0.5f && f[2] == 9);
    assert_true(d[0] == 1.125 && d[1] == -0.5 && d[2] == 9);
    /* Integer sums wrap rather than invoke undefined behaviour. */
    assert_true(i[0] == -2 && i[1] == INT32_MIN && i[2] == 9);
    assert_true(l[0] == -2 && l[1] == INT64_MAX && l[2] == 9);
}

static void test_sgd(void **state)
{
    (void)state;
    float f[4] = {1, 2, -3, 9}, fg[4] = {0.5f, -1, 2, 100};
    double d[4] = {1, 2, -3, 9}, dg[4] = {0.5, -1, 2, 100};
    assert_int_equal(rkv_handler_apply(NULL, RKV_OP_SGD, RKV_F32, f, NULL, fg, 3, 0.1), 0);
    assert_int_equal(rkv_handler_apply(NULL, RKV_OP_SGD, RKV_F64, d, NULL, dg, 3, 0.1), 0);
    /* f32 computes in float: the same expression in float is exact. */
    assert_true(f[0] == 1.0f - 0.1f * 0.5f);
    assert_true(f[1] == 2.0f - 0.1f * -1.0f);
    assert_true(f[2] == -3.0f - 0.1f * 2.0f);
    assert_true(f[3] == 9);
    assert_float_equal(d[0], 0.95, 1e-15);
    assert_float_equal(d[1], 2.1, 1e-15);
    assert_float_equal(d[2], -3.2, 1e-15);
    assert_true(d[3] == 9);
}

static void test_adagrad(void **state)
{
    (void)state;
    /* state += g^2; row -= lr * g / (sqrt(state) + 1e-10), lr = 0.5:
     *   s 0 -> 4,   row 1 - 0.5 * 2 / 2          = 0.5
     *   s 1 -> 10,  row 1 + 0.5 * 3 / sqrt(10)   = 1.47434164902526
     *   s 0 -> 0,   g 0: row unchanged (0 / 1e-10) */
    float f[4] = {1, 1, 1, 9}, fs[4] = {0, 1, 0, 9}, fg[4] = {2, -3, 0, 9};
    double d[4] = {1, 1, 1, 9}, ds[4] = {0, 1, 0, 9}, dg[4] = {2, -3, 0, 9};
    assert_int_equal(rkv_handler_apply(NULL, RKV_OP_ADAGRAD, RKV_F32, f, fs, fg, 3, 0.5), 0);
    assert_int_equal(rkv_handler_apply(NULL, RKV_OP_ADAGRAD, RKV_F64, d, ds, dg, 3, 0.5), 0);
    assert_true(fs[0] == 4 && fs[1] == 10 && fs[2] == 0 && fs[3] == 9);
    assert_true(ds[0] == 4 && ds[1] == 10 && ds[2] == 0 && ds[3] == 9);
    assert_float_equal(f[0], 0.5, 1e-6);
    assert_float_equal(f[1], 1.47434164902526, 1e-6);
    assert_true(f[2] == 1 && f[3] == 9);
    assert_float_equal(d[0], 0.5, 1e-12);
    assert_float_equal(d[1], 1.47434164902526, 1e-12);
    assert_true(d[2] == 1 && d[3] == 9);
    /* A second step sees the accumulated state: s 4 -> 8, row 0.5 - 0.5*2/sqrt(8). */
    assert_int_equal(rkv_handler_apply(NULL, RKV_OP_ADAGRAD, RKV_F64, d, ds, dg, 1, 0.5), 0);
    assert_float_equal(d[0], 0.5 - 1 / sqrt(8), 1e-12);
}

/* Where epsilon goes shows only for gradients near it: with g = 1e-6 the
 * first step is g / (|g| + 1e-10) = 0.9999, where g / sqrt(g^2 + 1e-10)
 * (a mutant the tests above let through: their gradients are 2, -3, 0)
 * is 0.0995. */
static void test_adagrad_small_gradient(void **state)
{
    (void)state;
    double d = 1, ds = 0, dg = 1e-6;
    float f = 1, fs = 0, fg = 1e-6f;
    assert_int_equal(rkv_handler_apply(NULL, RKV_OP_ADAGRAD, RKV_F64, &d, &ds, &dg, 1, 1.0), 0);
    assert_int_equal(rkv_handler_apply(NULL, RKV_OP_ADAGRAD, RKV_F32, &f, &fs, &fg, 1, 1.0), 0);
    assert_float_equal(d, 1 - 1e-6 / (1e-6 + 1e-10), 1e-15);
    assert_float_equal(f, 1 - 1e-6 / (1e-6 + 1e-10), 1e-6);
}

/* A learning rate of 0 (or -0.0) is a step of nothing, accepted: the row
 * stays (adagrad's state still adds g^2); below 0 is refused. */
static void test_learning_rate_zero(void **state)
{
    (void)state;
    assert_int_equal(rkv_handler_check_param(RKV_OP_SGD, RKV_F32, 0.0), 0);
    assert_int_equal(rkv_handler_check_param(RKV_OP_ADAGRAD, RKV_F32, 0.0), 0);
    assert_int_equal(rkv_handler_check_param(RKV_OP_SGD, RKV_F32, -0.0), 0);
    assert_int_equal(rkv_handler_check_param(RKV_OP_ADAGRAD, RKV_F32, -0.0), 0);
    assert_int_equal(rkv_handler_check_param(RKV_OP_SGD, RKV_F32, -1e-300), -RKV_EINVAL);
    /* Finite as a double, inf as the f32 ops' (float)param: 0 x inf was NaN
     * in every row pushed. */
    assert_int_equal(rkv_handler_check_param(RKV_OP_SGD, RKV_F32, 1e39), -RKV_EINVAL);
    assert_int_equal(rkv_handler_check_param(RKV_OP_ADAGRAD, RKV_F32, 1e39), -RKV_EINVAL);
    assert_int_equal(rkv_handler_check_param(RKV_OP_SGD, RKV_F32, (double)FLT_MAX), 0);
    assert_int_equal(rkv_handler_check_param(RKV_OP_SGD, RKV_F64, 1e39), 0);
    double d[2] = {3, 4}, ds[2] = {0, 1}, dg[2] = {2, 5};
    assert_int_equal(rkv_handler_apply(NULL, RKV_OP_SGD, RKV_F64, d, NULL, dg, 2, 0.0), 0);
    assert_int_equal(rkv_handler_apply(NULL, RKV_OP_ADAGRAD, RKV_F64, d, ds, dg, 2, 0.0), 0);
    assert_true(d[0] == 3 && d[1] == 4);
    assert_true(ds[0] == 4 && ds[1] == 26);
}

static void test_refusals_leave_row(void **state)
{
    (void)state;
    int32_t i[2] = {3, 4}, is[2] = {0, 0}, ig[2] = {1, 1};
    int64_t l[2] = {3, 4}, ls[2] = {0, 0}, lg[2] = {1, 1};
    float f[2] = {3, 4}, fg[2] = {1, 1};
    double d[2] = {3, 4}, dg[2] = {1, 1};
    assert_int_equal(rkv_handler_apply(NULL, RKV_OP_SGD, RKV_I32, i, NULL, ig, 2, 1), -RKV_EDTYPE);
    assert_int_equal(rkv_handler_apply(NULL, RKV_OP_SGD, RKV_I64, l, NULL, lg, 2, 1), -RKV_EDTYPE);
    assert_int_equal(rkv_handler_apply(NULL, RKV_OP_ADAGRAD, RKV_I32, i, is, ig, 2, 1),
                     -RKV_EDTYPE);
    assert_int_equal(rkv_handler_apply(NULL, RKV_OP_ADAGRAD, RKV_I64, l, ls, lg, 2, 1),
                     -RKV_EDTYPE);
    assert_int_equal(rkv_handler_apply(NULL, RKV_OP_ADAGRAD, RKV_F32, f, NULL, fg, 2, 1),
                     -RKV_EINVAL);
    assert_int_equal(rkv_handler_apply(NULL, RKV_OP_ADAGRAD, RKV_F64, d, NULL, dg, 2, 1),
                     -RKV_EINVAL);
    assert_int_equal(rkv_handler_apply(NULL, RKV_OP_SUM, (enum rkv_dtype)0, f, NULL, fg, 2, 1),
                     -RKV_EDTYPE);
    assert_int_equal(rkv_handler_apply(NULL, RKV_OP_ASSIGN, (enum rkv_dtype)5, f, NULL, fg, 2, 1),
                     -RKV_EDTYPE);
    assert_int_equal(rkv_handler_apply(NULL, -1, RKV_F32, f, NULL, fg, 2, 1), -RKV_EINVAL);
    assert_int_equal(rkv_handler_apply(NULL, RKV_OP_MAX, RKV_F32, f, NULL, fg, 2, 1), -RKV_EINVAL);
    /* Ops between the built-ins and RKV_OP_CUSTOM are reserved. */
    assert_int_equal(rkv_handler_apply(NULL, RKV_OP_ADAGRAD + 1, RKV_F32, f, NULL, fg, 2, 1),
                     -RKV_ENOHANDLER);
    assert_true(i[0] == 3 && i[1] == 4 && is[0] == 0 && is[1] == 0);
    assert_true(l[0] == 3 && l[1] == 4 && ls[0] == 0 && ls[1] == 0);
    assert_true(f[0] == 3 && f[1] == 4 && d[0] == 3 && d[1] == 4);
}

struct call_log {
    int calls;
    enum rkv_dtype dt;
    void *row, *state;
    const void *in;
    size_t n_elems;
    double param;
};

static void record_handler(enum rkv_dtype dt, void *row, void *state, const void *in,
                           size_t n_elems, double param, void *user)
{
    struct call_log *log = user;
    log->calls++;
    log->dt = dt;
    log->row = row;
    log->state = state;
    log->in = in;
    log->n_elems = n_elems;
    log->param = param;
    ((int64_t *)row)[0] = 42;
}

static void test_custom(void **state)
{
    (void)state;
    struct rkv_handler_table t;
    memset(&t, 0, sizeof(t));
    struct call_log log = {0};
    int64_t row[2] = {1, 2}, st[2] = {0, 0}, in[2] = {5, 6};
    int op = RKV_OP_CUSTOM + 3;

    assert_int_equal(rkv_handler_apply(&t, op, RKV_I64, row, st, in, 2, 1.5), -RKV_ENOHANDLER);
    assert_int_equal(rkv_handler_apply(NULL, op, RKV_I64, row, st, in, 2, 1.5), -RKV_ENOHANDLER);
    assert_int_equal(rkv_handler_check(&t, op, RKV_I64, 1), -RKV_ENOHANDLER);
    assert_true(row[0] == 1 && row[1] == 2);

    assert_int_equal(rkv_handler_register(&t, op, record_handler, &log), 0);
    assert_int_equal(rkv_handler_check(&t, op, RKV_I64, 0), 0);
    assert_int_equal(rkv_handler_apply(&t, op, RKV_I64, row, st, in, 2, 1.5), 0);
    assert_int_equal(log.calls, 1);
    assert_int_equal(log.dt, RKV_I64);
    assert_ptr_equal(log.row, row);
    assert_ptr_equal(log.state, st);
    assert_ptr_equal(log.in, in);
    assert_int_equal(log.n_elems, 2);
    assert_true(log.param == 1.5);
    assert_int_equal(row[0], 42);
    /* Only the registered op has a handler; the built-ins stay built-in. */
    assert_int_equal(rkv_handler_apply(&t, op + 1, RKV_I64, row, st, in, 2, 1.5), -RKV_ENOHANDLER);
    assert_int_equal(rkv_handler_apply(&t, RKV_OP_SUM, RKV_I64, row, NULL, in, 2, 0), 0);
    assert_int_equal(log.calls, 1);
    assert_int_equal(row[0], 47);

    /* A NULL fn unregisters. */
    assert_int_equal(rkv_handler_register(&t, op, NULL, NULL), 0);
    assert_int_equal(rkv_handler_apply(&t, op, RKV_I64, row, st, in, 2, 1.5), -RKV_ENOHANDLER);
    assert_int_equal(log.calls, 1);
}

static void test_register_range(void **state)
{
    (void)state;
    struct rkv_handler_table t;
    memset(&t, 0, sizeof(t));
    int dummy;
    assert_int_equal(rkv_handler_register(&t, RKV_OP_CUSTOM - 1, record_handler, &dummy),
                     -RKV_EINVAL);
    assert_int_equal(rkv_handler_register(&t, RKV_OP_SUM, record_handler, &dummy), -RKV_EINVAL);
    assert_int_equal(rkv_handler_register(&t, -1, record_handler, &dummy), -RKV_EINVAL);
    assert_int_equal(rkv_handler_register(&t, RKV_OP_MAX, record_handler, &dummy), -RKV_EINVAL);
    assert_int_equal(rkv_handler_register(NULL, RKV_OP_CUSTOM, record_handler, &dummy),
                     -RKV_EINVAL);
    for (int op = 0; op < RKV_OP_MAX; op++)
        assert_null(t.fn[op]);
    assert_int_equal(rkv_handler_register(&t, RKV_OP_CUSTOM, record_handler, &dummy), 0);
    assert_int_equal(rkv_handler_register(&t, RKV_OP_MAX - 1, record_handler, &dummy), 0);
    assert_ptr_equal(t.user[RKV_OP_MAX - 1], &dummy);
}

/* check() answers exactly what apply() would, for every op and dtype. */
static void test_check_matches_apply(void **state)
{
    (void)state;
    struct rkv_handler_table t;
    memset(&t, 0, sizeof(t));
    struct call_log log = {0};
    assert_int_equal(rkv_handler_register(&t, RKV_OP_CUSTOM, record_handler, &log), 0);
    for (int op = -1; op <= RKV_OP_MAX; op++) {
        for (size_t k = 0; k < sizeof(all_dtypes) / sizeof(all_dtypes[0]); k++) {
            for (int has_state = 0; has_state <= 1; has_state++) {
                /* Heap buffers have no declared type, so any dtype may use them. */
                void *row = calloc(2, 8), *st = calloc(2, 8), *in = calloc(2, 8);
                assert_true(row && st && in);
                int want = rkv_handler_check(&t, op, all_dtypes[k], has_state);
                int got = rkv_handler_apply(&t, op, all_dtypes[k], row, has_state ? st : NULL, in,
                                            2, 0.1);
                assert_int_equal(got, want);
                free(row);
                free(st);
                free(in);
            }
        }
    }
    assert_int_equal(log.calls, 2 * 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_assign),
        cmocka_unit_test(test_sum),
        cmocka_unit_test(test_sgd),
        cmocka_unit_test(test_adagrad),
        cmocka_unit_test(test_adagrad_small_gradient),
        cmocka_unit_test(test_learning_rate_zero),
        cmocka_unit_test(test_refusals_leave_row),
        cmocka_unit_test(test_custom),
        cmocka_unit_test(test_register_range),
        cmocka_unit_test(test_check_matches_apply),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
