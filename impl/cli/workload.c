/* The timed phase of `rkv demo`: push and pull throughput and single-row
 * pull latency on rows of other machines (the network path). Correctness is
 * the oracle's job (harness/); this only measures. */
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
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

/* The rows one timed phase works on (t_bench, 64 rows, range-partitioned). */
struct wl_rows {
    uint8_t *buf;        /* batch rows */
    uint64_t remote[64]; /* row ids to draw from */
    uint64_t n_remote;
    uint32_t batch;
};

/* `ops` calls of one kind: 0 push, 1 pull, 2 push then pull of the same
 * rows (a training step's pattern: both directions' bytes count). Random
 * rows when `sweep` is 0, else every row in turn. */
static int wl_pass(struct wl *x, const struct wl_rows *r, int kind, uint64_t ops, int sweep)
{
    uint64_t ids[64];
    int rc = 0;
    for (uint64_t o = 0, next = 0; o < ops && rc == 0; o++) {
        for (uint32_t i = 0; i < r->batch; i++)
            ids[i] = r->remote[sweep ? next++ % r->n_remote : rkv_rng_below(&x->rng, r->n_remote)];
        if (kind != 1)
            rc = rkv_client_push(x->cli, "t_bench", ids, r->batch, r->buf, RKV_OP_ASSIGN, 0);
        if (kind != 0 && rc == 0)
            rc = rkv_client_pull(x->cli, "t_bench", ids, r->batch, r->buf);
    }
    return rc;
}

/* Timed push and pull of value_bytes rows; the physical limit to compare
 * with is measured by the caller (see `rkv bench`). */
static int wl_bench(struct wl *x)
{
    size_t vb = x->p->value_bytes;
    struct wl_rows r = {.batch = vb >= (1u << 20) ? 1 : (uint32_t)((1u << 20) / vb)};
    if (r.batch > 64)
        r.batch = 64;
    uint64_t per_op = (uint64_t)r.batch * vb;
    uint64_t ops = (128ull << 20) / per_op;
    if (ops < 8)
        ops = 8;
    r.buf = malloc(per_op);
    uint64_t ids[64];
    /* Time the network path: rows of other machines only, unless everything
     * is on this machine. */
    uint32_t M = x->cfg->n_machines;
    for (uint64_t i = 0; i < 64; i++) {
        uint32_t m = 0;
        while (m + 1 < M && 64 * (uint64_t)(m + 1) / M <= i)
            m++;
        if (m != x->cfg->machine_id || M == 1)
            r.remote[r.n_remote++] = i;
    }
    int rc = r.buf && r.n_remote ? 0 : -RKV_ENOMEM;
    /* A training loop reuses its buffers: registered once, zero-copy calls
     * skip registering them every time (a failure only costs that). */
    int registered = rc == 0 && rkv_client_register(x->cli, r.buf, per_op) == 0;
    /* Untimed, every row pushed and pulled once first: the steady state is
     * what is measured, not first touches of pages, buffers and slots
     * (measured: they halved a 32 MiB phase through the shard). */
    if (rc == 0) {
        memset(r.buf, 1, per_op);
        rc = wl_pass(x, &r, 2, (r.n_remote + r.batch - 1) / r.batch, 1);
    }
    for (int kind = 0; kind < 3 && rc == 0; kind++) {
        double t0 = wl_now();
        rc = wl_pass(x, &r, kind, ops, 0);
        double dt = wl_now() - t0;
        uint64_t *bytes = kind == 0   ? &x->res->push_bytes
                          : kind == 1 ? &x->res->pull_bytes
                                      : &x->res->pushpull_bytes;
        double *secs = kind == 0   ? &x->res->push_s
                       : kind == 1 ? &x->res->pull_s
                                   : &x->res->pushpull_s;
        *bytes = (kind == 2 ? 2 : 1) * ops * per_op;
        *secs = dt;
    }
    enum { LAT_N = 200 };
    double lat[LAT_N];
    /* Sleeps of this process's threads (each is a wake-up later): where a
     * pull's latency goes when the host, not the wire, is the slow part. */
    struct rusage ru0, ru1, th0, th1;
    getrusage(RUSAGE_SELF, &ru0);
    getrusage(RUSAGE_THREAD, &th0);
    for (int i = 0; i < LAT_N && rc == 0; i++) {
        ids[0] = r.remote[rkv_rng_below(&x->rng, r.n_remote)];
        double t0 = wl_now();
        rc = rkv_client_pull(x->cli, "t_bench", ids, 1, r.buf);
        lat[i] = (wl_now() - t0) * 1e6;
    }
    getrusage(RUSAGE_THREAD, &th1);
    getrusage(RUSAGE_SELF, &ru1);
    if (rc == 0) {
        x->res->pull_lat_call_vcsw = (double)(th1.ru_nvcsw - th0.ru_nvcsw) / LAT_N;
        x->res->pull_lat_vcsw = (double)(ru1.ru_nvcsw - ru0.ru_nvcsw) / LAT_N;
        x->res->pull_lat_ivcsw = (double)(ru1.ru_nivcsw - ru0.ru_nivcsw) / LAT_N;
        qsort(lat, LAT_N, sizeof(double), wl_cmp_double);
        x->res->pull_lat_us_p50 = lat[LAT_N / 2];
        x->res->pull_lat_us_p99 = lat[LAT_N * 99 / 100];
    }
    if (registered)
        rkv_client_deregister(x->cli, r.buf);
    free(r.buf);
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
