/* The built-in checked workload. Every expected value is computed here from
 * (worker, row, element, round) alone, independently of the store: sums use
 * small integers so float arithmetic is exact, assigns to contested rows
 * must equal exactly one writer's row. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "port/port.h"

#define WL_ROW_LEN 8
#define WL_BATCH 64
#define WL_CONTESTED 64
#define WL_CHECK_PULLS 8
#define WL_LR 0.5

struct wl {
    struct rkv_client *cli;
    const struct rkv_config *cfg;
    const struct cli_workload *p;
    struct cli_result *res;
    FILE *log;
    uint32_t w, W;
    struct rkv_rng rng;
};

static double wl_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float v_sum(uint32_t w, uint64_t r, uint32_t j)
{
    return (float)((w * 7 + r * 3 + j) % 17);
}
static double v_assign(uint32_t w, uint64_t r, uint32_t j, uint32_t k)
{
    return w * 1e6 + (double)(r % 100000) * 10 + k + j * 0.5;
}
static float v_contest(uint32_t w, uint64_t r, uint32_t j)
{
    return (float)(w * 1000 + (r % 500) + j);
}
static float v_grad(uint32_t w, uint64_t r, uint32_t j)
{
    return (float)((w + r + j) % 5);
}
static int64_t v_isum(uint32_t w, uint64_t r, uint32_t j)
{
    return (int64_t)(w + 1) * (int64_t)(r + 1) - (int64_t)j;
}

static int wl_fail(struct wl *x, const char *what, int rc)
{
    fprintf(x->log, "worker %u: %s failed: %s (%s)\n", x->w, what, rkv_strerror(rc),
            rkv_client_errmsg(x->cli));
    return rc;
}

static int wl_init(struct wl *x)
{
    uint64_t R = x->p->rows;
    uint32_t M = x->cfg->n_machines;
    uint32_t *book = malloc(R * sizeof(*book));
    if (!book)
        return -RKV_ENOMEM;
    for (uint64_t r = 0; r < R; r++)
        book[r] = (uint32_t)((r * 5 + 1) % M);
    struct rkv_tensor_desc d[] = {
        {.name = "t_sum",
         .dtype = RKV_F32,
         .rows = R,
         .row_len = WL_ROW_LEN,
         .policy = RKV_PART_RANGE},
        {.name = "t_assign",
         .dtype = RKV_F64,
         .rows = R,
         .row_len = WL_ROW_LEN,
         .policy = RKV_PART_HASH},
        {.name = "t_contest",
         .dtype = RKV_F32,
         .rows = R,
         .row_len = 16,
         .policy = RKV_PART_EXPLICIT,
         .book = book},
        {.name = "t_sgd",
         .dtype = RKV_F32,
         .rows = R,
         .row_len = WL_ROW_LEN,
         .policy = RKV_PART_RANGE},
        {.name = "t_isum", .dtype = RKV_I64, .rows = R, .row_len = 4, .policy = RKV_PART_HASH},
        {.name = "t_bench",
         .dtype = RKV_F32,
         .rows = 64,
         .row_len = x->p->value_bytes / 4,
         .policy = RKV_PART_RANGE,
         .init = RKV_INIT_UNIFORM,
         .init_seed = 7},
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof(d) / sizeof(d[0]) && rc == 0; i++)
        if ((rc = rkv_client_init_data(x->cli, &d[i])) < 0)
            wl_fail(x, d[i].name, rc);
    free(book);
    return rc;
}

static void wl_shuffle(struct wl *x, uint64_t *ids, uint64_t n)
{
    for (uint64_t i = n; i > 1; i--) {
        uint64_t k = rkv_rng_below(&x->rng, i);
        uint64_t t = ids[i - 1];
        ids[i - 1] = ids[k];
        ids[k] = t;
    }
}

/* Pushes gen(w, row) for every row of `ids` in batches. */
static int wl_push_all(struct wl *x, const char *name, const uint64_t *ids, uint64_t n,
                       size_t row_bytes, int op, double param,
                       void (*gen)(struct wl *, uint64_t, uint32_t, void *), uint32_t k)
{
    uint8_t *rows = malloc(WL_BATCH * row_bytes);
    if (!rows)
        return -RKV_ENOMEM;
    int rc = 0;
    for (uint64_t s = 0; s < n && rc == 0; s += WL_BATCH) {
        uint64_t b = n - s < WL_BATCH ? n - s : WL_BATCH;
        for (uint64_t i = 0; i < b; i++)
            gen(x, ids[s + i], k, rows + i * row_bytes);
        if ((rc = rkv_client_push(x->cli, name, ids + s, b, rows, op, param)) < 0)
            wl_fail(x, name, rc);
    }
    free(rows);
    return rc;
}

static void g_sum(struct wl *x, uint64_t r, uint32_t k, void *out)
{
    (void)k;
    for (uint32_t j = 0; j < WL_ROW_LEN; j++)
        ((float *)out)[j] = v_sum(x->w, r, j);
}
static void g_assign(struct wl *x, uint64_t r, uint32_t k, void *out)
{
    for (uint32_t j = 0; j < WL_ROW_LEN; j++)
        ((double *)out)[j] = v_assign(x->w, r, j, k);
}
static void g_contest(struct wl *x, uint64_t r, uint32_t k, void *out)
{
    (void)k;
    for (uint32_t j = 0; j < 16; j++)
        ((float *)out)[j] = v_contest(x->w, r, j);
}
static void g_grad(struct wl *x, uint64_t r, uint32_t k, void *out)
{
    (void)k;
    for (uint32_t j = 0; j < WL_ROW_LEN; j++)
        ((float *)out)[j] = v_grad(x->w, r, j);
}
static void g_isum(struct wl *x, uint64_t r, uint32_t k, void *out)
{
    (void)k;
    for (uint32_t j = 0; j < 4; j++)
        ((int64_t *)out)[j] = v_isum(x->w, r, j);
}

static int wl_phase_pushes(struct wl *x, uint32_t k, uint64_t *ids)
{
    uint64_t R = x->p->rows;
    int rc;
    wl_shuffle(x, ids, R);
    if ((rc = wl_push_all(x, "t_sum", ids, R, WL_ROW_LEN * 4, RKV_OP_SUM, 0, g_sum, k)) < 0 ||
        (rc = wl_push_all(x, "t_sgd", ids, R, WL_ROW_LEN * 4, RKV_OP_SGD, WL_LR, g_grad, k)) < 0 ||
        (rc = wl_push_all(x, "t_isum", ids, R, 32, RKV_OP_SUM, 0, g_isum, k)) < 0)
        return rc;
    uint64_t contested = R < WL_CONTESTED ? R : WL_CONTESTED;
    uint64_t seq[WL_CONTESTED];
    for (uint64_t i = 0; i < contested; i++)
        seq[i] = i;
    if ((rc = wl_push_all(x, "t_contest", seq, contested, 64, RKV_OP_ASSIGN, 0, g_contest, k)) < 0)
        return rc;
    /* Own rows of t_assign, then read-your-writes on them before any barrier. */
    uint64_t n = 0;
    for (uint64_t r = x->w; r < R; r += x->W)
        ids[n++] = r;
    if ((rc = wl_push_all(x, "t_assign", ids, n, WL_ROW_LEN * 8, RKV_OP_ASSIGN, 0, g_assign, k)) <
        0)
        return rc;
    uint64_t m = n < WL_BATCH ? n : WL_BATCH;
    double got[WL_BATCH * WL_ROW_LEN];
    if (m > 0 && (rc = rkv_client_pull(x->cli, "t_assign", ids, m, got)) < 0)
        return wl_fail(x, "read-your-writes pull", rc);
    for (uint64_t i = 0; i < m; i++) {
        for (uint32_t j = 0; j < WL_ROW_LEN; j++) {
            x->res->checks++;
            double want = v_assign(x->w, ids[i], j, k);
            if (got[i * WL_ROW_LEN + j] != want && x->res->errors++ == 0)
                fprintf(x->log,
                        "worker %u: read-your-writes: t_assign row %llu[%u]: expected "
                        "%.1f, got %.1f\n",
                        x->w, (unsigned long long)ids[i], j, want, got[i * WL_ROW_LEN + j]);
        }
    }
    return 0;
}

/* Expected element j of row r of tensor `t` after every round (as double). */
static double wl_expect(struct wl *x, int t, uint64_t r, uint32_t j)
{
    double acc = 0;
    for (uint32_t w = 0; w < x->W; w++) {
        if (t == 0)
            acc += v_sum(w, r, j);
        else if (t == 1)
            acc += v_grad(w, r, j);
        else
            acc += (double)v_isum(w, r, j);
    }
    acc *= x->p->rounds;
    return t == 1 ? -WL_LR * acc : acc;
}

static void wl_mismatch(struct wl *x, const char *name, uint64_t r, uint32_t j, double want,
                        double got)
{
    if (x->res->errors++ == 0)
        fprintf(x->log, "worker %u: %s row %llu[%u]: expected %.6g, got %.6g\n", x->w, name,
                (unsigned long long)r, j, want, got);
}

/* A contested row must be exactly one writer's row (or untouched). */
static void wl_check_contest(struct wl *x, uint64_t r, const float *row)
{
    x->res->checks++;
    if (r >= WL_CONTESTED) {
        if (row[0] != 0)
            wl_mismatch(x, "t_contest", r, 0, 0, row[0]);
        return;
    }
    uint32_t w = (uint32_t)((row[0] - (float)(r % 500)) / 1000.0f);
    for (uint32_t j = 0; j < 16; j++) {
        if (w >= x->W || row[j] != v_contest(w, r, j)) {
            wl_mismatch(x, "t_contest (mixed or foreign row)", r, j, v_contest(w, r, j), row[j]);
            return;
        }
    }
}

static int wl_check(struct wl *x)
{
    uint64_t ids[100];
    static const char *const names[] = {"t_sum", "t_sgd", "t_isum", "t_assign", "t_contest"};
    union {
        float f[100 * 16];
        double d[100 * WL_ROW_LEN];
        int64_t i[100 * 4];
    } buf;
    for (int it = 0; it < WL_CHECK_PULLS; it++) {
        for (int i = 0; i < 100; i++) /* random, with duplicates */
            ids[i] = rkv_rng_below(&x->rng, x->p->rows);
        for (int t = 0; t < 5; t++) {
            int rc = rkv_client_pull(x->cli, names[t], ids, 100, &buf);
            if (rc < 0)
                return wl_fail(x, names[t], rc);
            for (int i = 0; i < 100; i++) {
                if (t == 4) {
                    wl_check_contest(x, ids[i], &buf.f[i * 16]);
                    continue;
                }
                uint32_t L = t == 2 ? 4 : WL_ROW_LEN;
                for (uint32_t j = 0; j < L; j++) {
                    double want = t == 3 ? v_assign(ids[i] % x->W, ids[i], j, x->p->rounds - 1)
                                         : wl_expect(x, t, ids[i], j);
                    double got = t == 2   ? (double)buf.i[i * 4 + j]
                                 : t == 3 ? buf.d[i * L + j]
                                          : (double)buf.f[i * L + j];
                    x->res->checks++;
                    if (got != want)
                        wl_mismatch(x, names[t], ids[i], j, want, got);
                }
            }
        }
    }
    return 0;
}

static int wl_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Timed push and pull of value_bytes rows; the physical limit to compare
 * with is measured by the caller (see `rkv demo`). */
static int wl_bench(struct wl *x)
{
    size_t vb = x->p->value_bytes;
    uint32_t batch = vb >= (1u << 20) ? 1 : (uint32_t)((1u << 20) / vb);
    if (batch > 64)
        batch = 64;
    uint64_t per_op = (uint64_t)batch * vb;
    uint64_t ops = (32ull << 20) / per_op;
    if (ops < 8)
        ops = 8;
    uint8_t *rows = malloc(per_op);
    uint64_t ids[64];
    /* Time the network path: rows of other machines only (t_bench is range-
     * partitioned, 64 rows), unless everything is on this machine. */
    uint64_t remote[64], n_remote = 0;
    uint32_t M = x->cfg->n_machines;
    for (uint64_t r = 0; r < 64; r++) {
        uint32_t m = 0;
        while (m + 1 < M && 64 * (uint64_t)(m + 1) / M <= r)
            m++;
        if (m != x->cfg->machine_id || M == 1)
            remote[n_remote++] = r;
    }
    int rc = rows && n_remote ? 0 : -RKV_ENOMEM;
    for (int dir = 0; dir < 2 && rc == 0; dir++) {
        double t0 = wl_now();
        for (uint64_t o = 0; o < ops && rc == 0; o++) {
            for (uint32_t i = 0; i < batch; i++)
                ids[i] = remote[rkv_rng_below(&x->rng, n_remote)];
            rc = dir == 0 ? rkv_client_push(x->cli, "t_bench", ids, batch, rows, RKV_OP_ASSIGN, 0)
                          : rkv_client_pull(x->cli, "t_bench", ids, batch, rows);
        }
        double dt = wl_now() - t0;
        if (dir == 0) {
            x->res->push_bytes = ops * per_op;
            x->res->push_s = dt;
        } else {
            x->res->pull_bytes = ops * per_op;
            x->res->pull_s = dt;
        }
    }
    enum { LAT_N = 200 };
    double lat[LAT_N];
    for (int i = 0; i < LAT_N && rc == 0; i++) {
        ids[0] = remote[rkv_rng_below(&x->rng, n_remote)];
        double t0 = wl_now();
        rc = rkv_client_pull(x->cli, "t_bench", ids, 1, rows);
        lat[i] = (wl_now() - t0) * 1e6;
    }
    if (rc == 0) {
        qsort(lat, LAT_N, sizeof(double), wl_cmp_double);
        x->res->pull_lat_us_p50 = lat[LAT_N / 2];
        x->res->pull_lat_us_p99 = lat[LAT_N * 99 / 100];
    }
    free(rows);
    return rc < 0 ? wl_fail(x, "timed phase", rc) : 0;
}

int cli_workload_run(struct rkv_client *cli, const struct rkv_config *cfg,
                     const struct cli_workload *wl, struct cli_result *res, FILE *log)
{
    struct wl x = {.cli = cli,
                   .cfg = cfg,
                   .p = wl,
                   .res = res,
                   .log = log,
                   .w = rkv_client_id(cli),
                   .W = cfg->n_workers};
    memset(res, 0, sizeof(*res));
    rkv_rng_seed(&x.rng, cfg->seed, 1000 + x.w);
    uint64_t *ids = malloc(wl->rows * sizeof(*ids));
    if (!ids || wl->rows == 0 || wl->rounds == 0 || wl->value_bytes < 4 || wl->value_bytes % 4)
        return -RKV_EINVAL;
    for (uint64_t r = 0; r < wl->rows; r++)
        ids[r] = r;
    int rc = 0;
    if (x.w == 0)
        rc = wl_init(&x);
    if (rc == 0 && (rc = rkv_client_barrier(cli)) < 0)
        wl_fail(&x, "barrier after init", rc);
    for (uint32_t k = 0; k < wl->rounds && rc == 0; k++) {
        for (uint64_t r = 0; r < wl->rows; r++)
            ids[r] = r;
        rc = wl_phase_pushes(&x, k, ids);
    }
    if (rc == 0 && (rc = rkv_client_barrier(cli)) < 0)
        wl_fail(&x, "barrier after pushes", rc);
    if (rc == 0)
        rc = wl_check(&x);
    if (rc == 0 && (rc = rkv_client_barrier(cli)) < 0)
        wl_fail(&x, "barrier after checks", rc);
    if (rc == 0)
        rc = wl_bench(&x);
    if (rc == 0 && (rc = rkv_client_barrier(cli)) < 0)
        wl_fail(&x, "final barrier", rc);
    free(ids);
    return rc;
}
