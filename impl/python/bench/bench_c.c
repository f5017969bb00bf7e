/* The C side of impl/python/bench/bench.py: the same timed loops as the
 * Python side, through rkv.h, in a client of the same cluster. The two take
 * turns between barriers, so each measures an idle cluster: the C side
 * goes first for the first size when TURN is 0, and the order alternates.
 * Configured like the rkv binary, from RKV_* env vars (rkv_settings_*).
 * Usage: rkv_pybench_c TURN SIZE... ; prints "figure c.KIND.SIZE VALUE UNIT". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rkv.h"

#define BENCH_ROWS 64u /* rows of each tensor; machine 1 holds 32..63 */
#define BENCH_LAT_N 200

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Rows per call: 1 MiB of them, 1..32 (machine 1's rows). */
static uint32_t batch_of(size_t vb)
{
    size_t b = (1u << 20) / vb;
    return b < 1 ? 1 : b > BENCH_ROWS / 2 ? BENCH_ROWS / 2 : (uint32_t)b;
}

static void draw(uint64_t *ids, uint32_t n, uint64_t *seed)
{
    for (uint32_t i = 0; i < n; i++) {
        *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = BENCH_ROWS / 2 + (*seed >> 33) % (BENCH_ROWS / 2);
    }
}

static int run(struct rkv_client *cli, const char *name, size_t vb)
{
    uint32_t batch = batch_of(vb);
    uint64_t ops = (128ull << 20) / (batch * vb), ids[BENCH_ROWS], seed = 1;
    ops = ops < 16 ? 16 : ops;
    char *buf = calloc(batch, vb);
    int rc = buf ? 0 : -RKV_ENOMEM;
    for (int kind = 0; kind < 2 && rc == 0; kind++) {
        for (int timed = 0; timed < 2 && rc == 0; timed++) { /* a warm-up pass first */
            double t0 = now_s();
            for (uint64_t o = 0; o < ops && rc == 0; o++) {
                draw(ids, batch, &seed);
                rc = kind == 0 ? rkv_client_push(cli, name, ids, batch, buf, RKV_OP_ASSIGN, 0)
                               : rkv_client_pull(cli, name, ids, batch, buf);
            }
            if (timed && rc == 0)
                printf("figure c.%s.%zu %.3f GB/s\n", kind ? "pull" : "push", vb,
                       (double)ops * batch * vb / (now_s() - t0) / 1e9);
        }
    }
    for (int kind = 0; kind < 2 && rc == 0; kind++) {
        double lat[BENCH_LAT_N];
        for (int i = 0; i < BENCH_LAT_N && rc == 0; i++) {
            draw(ids, 1, &seed);
            double t0 = now_s();
            rc = kind == 0 ? rkv_client_push(cli, name, ids, 1, buf, RKV_OP_ASSIGN, 0)
                           : rkv_client_pull(cli, name, ids, 1, buf);
            lat[i] = (now_s() - t0) * 1e6;
        }
        qsort(lat, BENCH_LAT_N, sizeof(double), cmp_double);
        if (rc == 0)
            printf("figure c.%s1.p50.%zu %.1f us\n", kind ? "pull" : "push", vb,
                   lat[BENCH_LAT_N / 2]);
    }
    free(buf);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: rkv_pybench_c TURN SIZE...\n");
        return 2;
    }
    int turn = atoi(argv[1]);
    char err[512];
    struct rkv_settings *set = NULL;
    struct rkv_config cfg;
    struct rkv_client *cli = NULL;
    int rc = rkv_settings_create(&set, err, sizeof(err));
    if (rc == 0)
        rc = rkv_settings_build(set, &cfg, NULL, err, sizeof(err));
    rkv_settings_destroy(set);
    if (rc < 0) {
        fprintf(stderr, "rkv_pybench_c: %s\n", err);
        return 2;
    }
    rc = rkv_client_create(&cfg, &cli, err, sizeof(err));
    rkv_config_release(&cfg);
    if (rc < 0) {
        fprintf(stderr, "rkv_pybench_c: %s\n", err);
        return 3;
    }
    for (int a = 2; a < argc && rc == 0; a++) {
        size_t vb = strtoull(argv[a], NULL, 0);
        struct rkv_tensor_desc d = {.dtype = RKV_F32,
                                    .rows = BENCH_ROWS,
                                    .row_len = (uint32_t)(vb / 4),
                                    .policy = RKV_PART_RANGE,
                                    .init = RKV_INIT_ZEROS};
        snprintf(d.name, sizeof(d.name), "bench%zu", vb);
        rc = rkv_client_init_data(cli, &d);
        for (int t = 0; t < 2 && rc == 0; t++) {
            if ((rc = rkv_client_barrier(cli)) == 0 && t == (turn + a) % 2)
                rc = run(cli, d.name, vb);
            fflush(stdout);
        }
        if (rc == 0)
            rc = rkv_client_barrier(cli);
    }
    if (rc < 0)
        fprintf(stderr, "rkv_pybench_c: %s (%s)\n", rkv_strerror(rc), rkv_client_errmsg(cli));
    rkv_client_destroy(cli);
    return rc < 0 ? 3 : 0;
}
