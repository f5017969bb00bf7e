/* The timed phase of `rkv demo`: push and pull throughput and single-row
 * pull latency on rows of other machines (the network path). Correctness is
 * the oracle's job (harness/); this only measures. Also the phase's copies
 * without the store, the limit `rkv bench shm` compares it with. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#include "harness/timed.h"
#include "port/port.h"
#include "store/store_int.h"
#include "util/util.h"

/* Rows of t_bench, the timed phase's tensor. */
#define TIMED_ROWS 64u

struct timed {
    struct rkv_client *cli;
    const struct rkv_config *cfg;
    const struct rkv_timed_workload *p;
    struct rkv_timed_result *res;
    FILE *log;
    uint32_t w;
    int serial; /* test hook: the workers take turns at each timed pass */
    struct rkv_rng rng;
};

double rkv_timed_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int rkv_timed_workload_load(const struct cmd_settings *s, struct rkv_timed_workload *wl, char *err,
                            size_t err_len)
{
    uint64_t rows, vb, rounds;
    if (rkv_cmd_get_u64(s, CMD_ROWS, &rows, err, err_len) < 0 ||
        rkv_cmd_get_u64(s, CMD_VALUE_BYTES, &vb, err, err_len) < 0 ||
        rkv_cmd_get_u64(s, CMD_ROUNDS, &rounds, err, err_len) < 0)
        return -1;
    if (rows == 0 || rows > (1u << 24) || vb < 4 || vb % 4 || vb > (64u << 20) || rounds == 0 ||
        rounds > 1000)
        return rkv_errf(err, err_len, -1,
                        "workload needs rows 1..2^24, value-bytes a multiple of 4 up to 64 MiB, "
                        "rounds 1..1000 (got rows %llu from %s, value-bytes %llu from %s, "
                        "rounds %llu from %s)",
                        (unsigned long long)rows, s->src[CMD_ROWS], (unsigned long long)vb,
                        s->src[CMD_VALUE_BYTES], (unsigned long long)rounds, s->src[CMD_ROUNDS]);
    *wl = (struct rkv_timed_workload){
        .rows = rows, .value_bytes = (uint32_t)vb, .rounds = (uint32_t)rounds};
    return 0;
}

static int timed_fail(struct timed *x, const char *what, int rc)
{
    fprintf(x->log, "worker %u: %s failed: %s (%s)\n", x->w, what, rkv_strerror(rc),
            rkv_client_errmsg(x->cli));
    return rc;
}

static int timed_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Rows per call: 1 MiB of them (at least one row, at most all of t_bench). */
static uint32_t timed_batch(size_t value_bytes)
{
    uint32_t batch = value_bytes >= (1u << 20) ? 1 : (uint32_t)((1u << 20) / value_bytes);
    return batch > TIMED_ROWS ? TIMED_ROWS : batch;
}

/* Calls per timed pass: 128 MiB of rows, and at least 8 calls. The
 * co-located path (one machine: every row in this process's shard) moves
 * 10-30 GB/s: 128 MiB took 10 ms there, where a timer tick or a cache
 * refill is a tenth of the pass; 512 MiB takes 30-40 ms. */
#define TIMED_MAX_OPS (1u << 15)
static uint64_t timed_ops(uint64_t per_op, int colocated)
{
    uint64_t ops = ((colocated ? 512ull : 128ull) << 20) / per_op;
    /* And at most TIMED_MAX_OPS: 4-byte values (64 rows a call, 256
     * bytes) made 524,288 round trips a pass, and `rkv demo --value-bytes
     * 4` ran for minutes in its timed phase; 32,768 take about a second
     * over loopback. */
    ops = ops > TIMED_MAX_OPS ? TIMED_MAX_OPS : ops;
    return ops < 8 ? 8 : ops;
}

/* The rows one timed phase works on (t_bench, TIMED_ROWS rows, range-partitioned). */
struct timed_rows {
    uint8_t *buf;                /* batch rows */
    uint64_t remote[TIMED_ROWS]; /* row ids to draw from */
    uint64_t n_remote;
    uint32_t batch;
};

/* Pushes in flight in the pipelined pass: a training step pushes several
 * gradients before it waits for any (ps-lite's ZPush, DGL's push). */
#define TIMED_PIPE_DEPTH 4

static void timed_draw(struct timed *x, const struct timed_rows *r, int sweep, uint64_t *next,
                       uint64_t *ids)
{
    for (uint32_t i = 0; i < r->batch; i++)
        ids[i] = r->remote[sweep ? (*next)++ % r->n_remote : rkv_rng_below(&x->rng, r->n_remote)];
}

/* `ops` pushes, up to TIMED_PIPE_DEPTH in flight. */
static int timed_pass_pipelined(struct timed *x, const struct timed_rows *r, uint64_t ops)
{
    uint64_t ids[TIMED_PIPE_DEPTH][TIMED_ROWS], next = 0;
    struct rkv_pending *inflight[TIMED_PIPE_DEPTH] = {0};
    int rc = 0;
    for (uint64_t o = 0; o < ops + TIMED_PIPE_DEPTH; o++) {
        uint32_t k = (uint32_t)(o % TIMED_PIPE_DEPTH);
        if (inflight[k]) {
            int wrc = rkv_client_wait(x->cli, inflight[k]);
            inflight[k] = NULL;
            rc = rc ? rc : wrc;
        }
        if (o >= ops || rc < 0)
            continue; /* draining */
        timed_draw(x, r, 0, &next, ids[k]);
        rc = rkv_client_push_async(x->cli, "t_bench", ids[k], r->batch, r->buf, RKV_OP_ASSIGN, 0,
                                   &inflight[k]);
    }
    return rc;
}

/* `ops` calls of one kind: 0 push, 1 pull, 2 push then pull of the same
 * rows (a training step's pattern: both directions' bytes count), 3 push
 * pipelined. Random rows when `sweep` is 0, else every row in turn. */
static int timed_pass(struct timed *x, const struct timed_rows *r, int kind, uint64_t ops,
                      int sweep)
{
    if (kind == 3)
        return timed_pass_pipelined(x, r, ops);
    uint64_t ids[TIMED_ROWS], next = 0;
    int rc = 0;
    for (uint64_t o = 0; o < ops && rc == 0; o++) {
        timed_draw(x, r, sweep, &next, ids);
        if (kind != 1)
            rc = rkv_client_push(x->cli, "t_bench", ids, r->batch, r->buf, RKV_OP_ASSIGN, 0);
        if (kind != 0 && rc == 0)
            rc = rkv_client_pull(x->cli, "t_bench", ids, r->batch, r->buf);
    }
    return rc;
}

/* One timed pass of `kind`, started together on every worker by a barrier
 * right before it: the aggregate is every worker's bytes over the window
 * from the first start to the last end (harness/aggregate.h), so passes
 * that do not overlap cannot add up to more than one worker moves. With
 * the serial test hook the workers take turns (a barrier per turn), so
 * their passes cannot overlap at all. Its start and duration in *t0_p and
 * *dt_p (rkv_timed_now_s's clock, shared by the host's processes). */
static int timed_pass_together(struct timed *x, const struct timed_rows *r, int kind, uint64_t ops,
                               double *t0_p, double *dt_p)
{
    uint32_t turns = x->serial ? x->cfg->n_workers : 1;
    assert(!x->serial || x->w < x->cfg->n_workers);
    int rc = 0;
    for (uint32_t turn = 0; turn < turns && rc == 0; turn++) {
        if ((rc = rkv_client_barrier(x->cli)) < 0)
            return timed_fail(x, "barrier before a timed pass", rc);
        if (x->serial && turn != x->w)
            continue;
        double t0 = rkv_timed_now_s();
        rc = timed_pass(x, r, kind, ops, 0);
        *dt_p = rkv_timed_now_s() - t0;
        *t0_p = t0;
    }
    return rc;
}

/* Timed push and pull of value_bytes rows; the physical limit to compare
 * with is measured by the caller (see `rkv bench`). */
static int timed_bench(struct timed *x)
{
    size_t vb = x->p->value_bytes;
    struct timed_rows r = {.batch = timed_batch(vb)};
    uint64_t per_op = (uint64_t)r.batch * vb;
    uint64_t ops = timed_ops(per_op, x->cfg->n_machines == 1);
    r.buf = malloc(per_op);
    uint64_t ids[1];
    /* Time the network path: rows of other machines only, unless everything
     * is on this machine. */
    uint32_t M = x->cfg->n_machines;
    for (uint64_t i = 0; i < TIMED_ROWS; i++) {
        uint32_t m = 0;
        while (m + 1 < M && TIMED_ROWS * (uint64_t)(m + 1) / M <= i)
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
     * (measured: they halved a 32 MiB phase through the shard). Then one
     * untimed pass like the timed ones (random rows): after the sweep alone
     * the first timed pass still ran 10-20 % slower than the others,
     * whatever its kind (co-located 1 MiB rows, the passes' order swapped:
     * 34.7-39.1 ms first against 30-33 ms later; with this pass 30-32 ms
     * for every kind). */
    if (rc == 0) {
        memset(r.buf, 1, per_op);
        rc = timed_pass(x, &r, 2, (r.n_remote + r.batch - 1) / r.batch, 1);
    }
    if (rc == 0)
        rc = timed_pass(x, &r, 0, ops, 0);
    for (int kind = 0; kind < 4 && rc == 0; kind++) {
        double t0 = 0, dt = 0;
        rc = timed_pass_together(x, &r, kind, ops, &t0, &dt);
        uint64_t *bytes = kind == 0   ? &x->res->push_bytes
                          : kind == 1 ? &x->res->pull_bytes
                          : kind == 2 ? &x->res->pushpull_bytes
                                      : &x->res->pushpipe_bytes;
        double *secs = kind == 0   ? &x->res->push_s
                       : kind == 1 ? &x->res->pull_s
                       : kind == 2 ? &x->res->pushpull_s
                                   : &x->res->pushpipe_s;
        double *start = kind == 0   ? &x->res->push_t0_s
                        : kind == 1 ? &x->res->pull_t0_s
                        : kind == 2 ? &x->res->pushpull_t0_s
                                    : &x->res->pushpipe_t0_s;
        *bytes = (kind == 2 ? 2 : 1) * ops * per_op;
        *secs = dt;
        *start = t0;
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
        double t0 = rkv_timed_now_s();
        rc = rkv_client_pull(x->cli, "t_bench", ids, 1, r.buf);
        lat[i] = (rkv_timed_now_s() - t0) * 1e6;
    }
    getrusage(RUSAGE_THREAD, &th1);
    getrusage(RUSAGE_SELF, &ru1);
    if (rc == 0) {
        x->res->pull_lat_call_vcsw = (double)(th1.ru_nvcsw - th0.ru_nvcsw) / LAT_N;
        x->res->pull_lat_vcsw = (double)(ru1.ru_nvcsw - ru0.ru_nvcsw) / LAT_N;
        x->res->pull_lat_ivcsw = (double)(ru1.ru_nivcsw - ru0.ru_nivcsw) / LAT_N;
        qsort(lat, LAT_N, sizeof(double), timed_cmp_double);
        x->res->pull_lat_us_p50 = lat[LAT_N / 2];
        x->res->pull_lat_us_p99 = lat[LAT_N * 99 / 100];
    }
    if (registered)
        rkv_client_deregister(x->cli, r.buf);
    free(r.buf);
    return rc < 0 ? timed_fail(x, "timed phase", rc) : 0;
}

int rkv_timed_run(struct rkv_client *cli, const struct rkv_config *cfg,
                  const struct rkv_timed_workload *wl, struct rkv_timed_result *res, FILE *log)
{
    struct timed x = {
        .cli = cli, .cfg = cfg, .p = wl, .res = res, .log = log, .w = rkv_client_id(cli)};
    rkv_rng_seed(&x.rng, cfg->seed, 1000 + x.w);
    /* The aggregate's test hook (harness/tests/test_bench.c), deliberately
     * not a documented setting: passes that cannot overlap. */
    const char *serial = getenv("RKV_TEST_SERIAL_PASSES");
    x.serial = serial && !strcmp(serial, "1");
    if (wl->value_bytes < 4 || wl->value_bytes % 4)
        return -RKV_EINVAL;
    int rc = 0;
    if (x.w == 0) {
        struct rkv_tensor_desc d = {.name = "t_bench",
                                    .dtype = RKV_F32,
                                    .rows = TIMED_ROWS,
                                    .row_len = wl->value_bytes / 4,
                                    .policy = RKV_PART_RANGE,
                                    .init = RKV_INIT_UNIFORM,
                                    .init_seed = 7};
        if ((rc = rkv_client_init_data(cli, &d)) < 0)
            return timed_fail(&x, "t_bench", rc);
    }
    if ((rc = rkv_client_barrier(cli)) < 0)
        return timed_fail(&x, "barrier before the timed phase", rc);
    if ((rc = timed_bench(&x)) < 0)
        return rc;
    if ((rc = rkv_client_barrier(cli)) < 0)
        return timed_fail(&x, "barrier after the timed phase", rc);
    return 0;
}

/* One call's worth of copies between the caller's batch and the rows ids
 * name: to the rows (a push) or from them (a pull). */
static void timed_copy_batch(uint8_t *rows, uint8_t *buf, const uint64_t *ids, uint32_t batch,
                             size_t vb, int to_rows)
{
    for (uint32_t i = 0; i < batch; i++) {
        if (to_rows)
            memcpy(rows + ids[i] * vb, buf + (size_t)i * vb, vb);
        else
            memcpy(buf + (size_t)i * vb, rows + ids[i] * vb, vb);
    }
}

/* One timed pass of timed_pass's copies (`ops` calls of `kind`) between buf
 * and rows, in seconds. */
static double timed_shard_pass_s(uint8_t *rows, uint8_t *buf, size_t vb, uint64_t ops, int kind,
                                 struct rkv_rng *rng)
{
    uint32_t batch = timed_batch(vb);
    uint64_t ids[TIMED_ROWS];
    double t0 = rkv_timed_now_s();
    for (uint64_t o = 0; o < ops; o++) {
        for (uint32_t i = 0; i < batch; i++)
            ids[i] = rkv_rng_below(rng, TIMED_ROWS);
        if (kind != 1)
            timed_copy_batch(rows, buf, ids, batch, vb, 1);
        if (kind != 0)
            timed_copy_batch(rows, buf, ids, batch, vb, 0);
    }
    return rkv_timed_now_s() - t0;
}

/* timed_pass's copies without the store: memory of the shard's kind (shared),
 * size and placement (rows start where the shard's header ends), the same
 * batch, calls and row draws, after the same untimed first touch. A limit
 * is what the host can do, and a busy host only ever slows a pass down:
 * the fastest of TIMED_LIMIT_PASSES passes counts. Returns its seconds, or a
 * negative value when the memory could not be had. */
#define TIMED_LIMIT_PASSES 3
static double timed_shard_copy_s(size_t vb, int kind)
{
    uint32_t batch = timed_batch(vb);
    uint64_t per_op = (uint64_t)batch * vb, ops = timed_ops(per_op, 1);
    size_t hdr = sizeof(struct rkv_shard_hdr), len = hdr + TIMED_ROWS * vb;
    uint8_t *buf = malloc(per_op);
    void *map =
        mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    double best = -1;
    if (!buf || map == MAP_FAILED)
        goto out;
    uint8_t *rows = (uint8_t *)map + hdr;
    memset(rows, 2, TIMED_ROWS * vb);
    memset(buf, 1, per_op);
    uint64_t ids[TIMED_ROWS];
    for (uint64_t o = 0; o < (TIMED_ROWS + batch - 1) / batch; o++) {
        for (uint32_t i = 0; i < batch; i++)
            ids[i] = (o * batch + i) % TIMED_ROWS;
        timed_copy_batch(rows, buf, ids, batch, vb, 1);
        timed_copy_batch(rows, buf, ids, batch, vb, 0);
    }
    struct rkv_rng rng;
    rkv_rng_seed(&rng, 1, 1000);
    for (int p = 0; p < TIMED_LIMIT_PASSES; p++) {
        double secs = timed_shard_pass_s(rows, buf, vb, ops, kind, &rng);
        best = best < 0 || secs < best ? secs : best;
    }
    volatile uint8_t sink = buf[per_op / 2] ^ rows[vb / 3]; /* the copies are used */
    (void)sink;
out:
    if (map != MAP_FAILED)
        munmap(map, len);
    free(buf);
    return best;
}

double rkv_timed_limit_shard_gbps(uint32_t value_bytes, int kind)
{
    assert(kind >= 0 && kind <= 2);
    if (value_bytes == 0)
        return 0;
    uint64_t per_op = (uint64_t)timed_batch(value_bytes) * value_bytes;
    double secs = timed_shard_copy_s(value_bytes, kind);
    return secs > 0 ? (kind == 2 ? 2.0 : 1.0) * (double)timed_ops(per_op, 1) * (double)per_op /
                          secs / 1e9
                    : 0;
}
