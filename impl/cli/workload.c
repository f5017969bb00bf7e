/* The timed phase of `rkv demo`: push and pull throughput and single-row
 * pull latency on rows of other machines (the network path). Correctness is
 * the oracle's job (harness/); this only measures. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "port/port.h"

struct wl {
    struct rkv_client *cli;
    const struct rkv_config *cfg;
    const struct cli_workload *p;
    struct cli_result *res;
    FILE *log;
    uint32_t w;
    struct rkv_rng rng;
};

static double wl_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int wl_fail(struct wl *x, const char *what, int rc)
{
    fprintf(x->log, "worker %u: %s failed: %s (%s)\n", x->w, what, rkv_strerror(rc),
            rkv_client_errmsg(x->cli));
    return rc;
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
    /* Three passes: push, pull, then push and pull of the same rows in turn
     * (a training step's pattern: both directions' bytes count). */
    for (int pass = 0; pass < 3 && rc == 0; pass++) {
        double t0 = wl_now();
        for (uint64_t o = 0; o < ops && rc == 0; o++) {
            for (uint32_t i = 0; i < batch; i++)
                ids[i] = remote[rkv_rng_below(&x->rng, n_remote)];
            if (pass != 1)
                rc = rkv_client_push(x->cli, "t_bench", ids, batch, rows, RKV_OP_ASSIGN, 0);
            if (pass != 0 && rc == 0)
                rc = rkv_client_pull(x->cli, "t_bench", ids, batch, rows);
        }
        double dt = wl_now() - t0;
        uint64_t *bytes = pass == 0   ? &x->res->push_bytes
                          : pass == 1 ? &x->res->pull_bytes
                                      : &x->res->pushpull_bytes;
        double *secs = pass == 0   ? &x->res->push_s
                       : pass == 1 ? &x->res->pull_s
                                   : &x->res->pushpull_s;
        *bytes = (pass == 2 ? 2 : 1) * ops * per_op;
        *secs = dt;
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

int cli_bench_run(struct rkv_client *cli, const struct rkv_config *cfg,
                  const struct cli_workload *wl, struct cli_result *res, FILE *log)
{
    struct wl x = {
        .cli = cli, .cfg = cfg, .p = wl, .res = res, .log = log, .w = rkv_client_id(cli)};
    rkv_rng_seed(&x.rng, cfg->seed, 1000 + x.w);
    if (wl->value_bytes < 4 || wl->value_bytes % 4)
        return -RKV_EINVAL;
    int rc = 0;
    if (x.w == 0) {
        struct rkv_tensor_desc d = {.name = "t_bench",
                                    .dtype = RKV_F32,
                                    .rows = 64,
                                    .row_len = wl->value_bytes / 4,
                                    .policy = RKV_PART_RANGE,
                                    .init = RKV_INIT_UNIFORM,
                                    .init_seed = 7};
        if ((rc = rkv_client_init_data(cli, &d)) < 0)
            return wl_fail(&x, "t_bench", rc);
    }
    if ((rc = rkv_client_barrier(cli)) < 0)
        return wl_fail(&x, "barrier before the timed phase", rc);
    if ((rc = wl_bench(&x)) < 0)
        return rc;
    if ((rc = rkv_client_barrier(cli)) < 0)
        return wl_fail(&x, "barrier after the timed phase", rc);
    return 0;
}
