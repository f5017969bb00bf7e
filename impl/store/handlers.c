/* Push handlers: how an incoming row is folded into a stored one. */
#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "store/handlers.h"
#include "util/util.h"

/* Keeps adagrad's step finite for a row whose accumulated state is still 0. */
#define ADAGRAD_EPS 1e-10

int rkv_handler_register(struct rkv_handler_table *t, int op, rkv_handler_fn fn, void *user)
{
    if (!t || op < RKV_OP_CUSTOM || op >= RKV_OP_MAX)
        return -RKV_EINVAL;
    /* A NULL fn unregisters: later pushes with op fail with -RKV_ENOHANDLER. */
    t->fn[op] = fn;
    t->user[op] = fn ? user : NULL;
    return 0;
}

int rkv_handler_register_at(struct rkv_handler_table **tp, int op, rkv_handler_fn fn, void *user)
{
    if (!*tp && !(*tp = calloc(1, sizeof(**tp))))
        return -RKV_ENOMEM;
    return rkv_handler_register(*tp, op, fn, user);
}

static int is_float(enum rkv_dtype dt)
{
    return dt == RKV_F32 || dt == RKV_F64;
}

int rkv_handler_check(const struct rkv_handler_table *t, int op, enum rkv_dtype dt, int has_state)
{
    if (op < 0 || op >= RKV_OP_MAX)
        return -RKV_EINVAL;
    if (rkv_dtype_size(dt) == 0)
        return -RKV_EDTYPE;
    switch (op) {
    case RKV_OP_ASSIGN:
    case RKV_OP_SUM:
        return 0;
    case RKV_OP_SGD:
        return is_float(dt) ? 0 : -RKV_EDTYPE;
    case RKV_OP_ADAGRAD:
        if (!is_float(dt))
            return -RKV_EDTYPE;
        return has_state ? 0 : -RKV_EINVAL;
    default:
        /* Ops between the built-ins and RKV_OP_CUSTOM are reserved for future built-ins. */
        if (op < RKV_OP_CUSTOM)
            return -RKV_ENOHANDLER;
        return t && t->fn[op] ? 0 : -RKV_ENOHANDLER;
    }
}

int rkv_handler_check_param(int op, enum rkv_dtype dt, double param)
{
    if (op != RKV_OP_SGD && op != RKV_OP_ADAGRAD)
        return 0;
    if (!isfinite(param) || param < 0)
        return -RKV_EINVAL;
    /* The f32 ops step with (float)param: a rate finite as a double but
     * past FLT_MAX was inf there, and 0 x inf made the rows NaN. */
    return dt == RKV_F32 && param > FLT_MAX ? -RKV_EINVAL : 0;
}

/* ---- sum ---- */

static void sum_f32(float *r, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        r[i] += x[i];
}

static void sum_f64(double *r, const double *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        r[i] += x[i];
}

/* Integer sums wrap (in unsigned arithmetic) instead of overflowing, which
 * would be undefined behaviour a remote pusher could trigger. */
static void sum_i32(int32_t *r, const int32_t *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        r[i] = (int32_t)((uint32_t)r[i] + (uint32_t)x[i]);
}

static void sum_i64(int64_t *r, const int64_t *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        r[i] = (int64_t)((uint64_t)r[i] + (uint64_t)x[i]);
}

static void apply_sum(enum rkv_dtype dt, void *row, const void *in, size_t n)
{
    switch (dt) {
    case RKV_F32:
        sum_f32(row, in, n);
        return;
    case RKV_F64:
        sum_f64(row, in, n);
        return;
    case RKV_I32:
        sum_i32(row, in, n);
        return;
    case RKV_I64:
        sum_i64(row, in, n);
        return;
    }
    assert(!"sum: dtype was checked");
}

/* ---- sgd and adagrad (floats only), in the dtype's own precision ---- */

static void sgd_f32(float *r, const float *g, size_t n, float lr)
{
    for (size_t i = 0; i < n; i++)
        r[i] -= lr * g[i];
}

static void sgd_f64(double *r, const double *g, size_t n, double lr)
{
    for (size_t i = 0; i < n; i++)
        r[i] -= lr * g[i];
}

static void adagrad_f32(float *r, float *s, const float *g, size_t n, float lr)
{
    for (size_t i = 0; i < n; i++) {
        s[i] += g[i] * g[i];
        r[i] -= lr * g[i] / (sqrtf(s[i]) + (float)ADAGRAD_EPS);
    }
}

static void adagrad_f64(double *r, double *s, const double *g, size_t n, double lr)
{
    for (size_t i = 0; i < n; i++) {
        s[i] += g[i] * g[i];
        r[i] -= lr * g[i] / (sqrt(s[i]) + ADAGRAD_EPS);
    }
}

static void apply_sgd(enum rkv_dtype dt, void *row, const void *in, size_t n, double param)
{
    assert(is_float(dt));
    if (dt == RKV_F32)
        sgd_f32(row, in, n, (float)param);
    else
        sgd_f64(row, in, n, param);
}

static void apply_adagrad(enum rkv_dtype dt, void *row, void *state, const void *in, size_t n,
                          double param)
{
    assert(is_float(dt) && state);
    if (dt == RKV_F32)
        adagrad_f32(row, state, in, n, (float)param);
    else
        adagrad_f64(row, state, in, n, param);
}

void rkv_handler_run(const struct rkv_handler_table *t, int op, enum rkv_dtype dt, void *row,
                     void *state, const void *in, size_t n_elems, double param)
{
    assert(rkv_handler_check(t, op, dt, state != NULL) == 0);
    if (n_elems == 0)
        return;
    assert(row && in);
    switch (op) {
    case RKV_OP_ASSIGN:
        memcpy(row, in, n_elems * rkv_dtype_size(dt));
        break;
    case RKV_OP_SUM:
        apply_sum(dt, row, in, n_elems);
        break;
    case RKV_OP_SGD:
        apply_sgd(dt, row, in, n_elems, param);
        break;
    case RKV_OP_ADAGRAD:
        apply_adagrad(dt, row, state, in, n_elems, param);
        break;
    default:
        assert(op >= RKV_OP_CUSTOM && t && t->fn[op]);
        t->fn[op](dt, row, state, in, n_elems, param, t->user[op]);
        break;
    }
}

int rkv_handler_apply(const struct rkv_handler_table *t, int op, enum rkv_dtype dt, void *row,
                      void *state, const void *in, size_t n_elems, double param)
{
    int rc = rkv_handler_check(t, op, dt, state != NULL);
    if (rc == 0)
        rkv_handler_run(t, op, dt, row, state, in, n_elems, param);
    return rc;
}
