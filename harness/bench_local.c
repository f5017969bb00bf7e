/* `rkv bench local`: what one call costs when it never leaves the process:
 * 1-row pulls and pushes of rows of the client's own machine, which the
 * client reads and applies in the shared-memory shard itself. One machine,
 * one server and one client in this process (the server, on threads of its
 * own, only admits the client), a fixed number of calls per measurement. Such a call takes
 * about a hundred nanoseconds, so anything the call path adds (counting,
 * clock reads, tracing) shows here and nowhere else.
 *
 * Figures: ns per call from the calling thread's CPU time (what the call
 * costs, whatever else the host runs) and calls per second from wall time
 * (what a user sees, other processes included); the median of the
 * repetitions is printed last. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "harness/bench_local.h"
#include "harness/launch.h"
#include "rkv.h"
#include "util/util.h"

#define BL_ROWS 1024u /* 16 KiB of 16-byte rows: in cache, like a hot table */
#define BL_ROW_LEN 4u
#define BL_MAX_REPS 101
/* calls per measurement: a second or two of them at most each, not days */
#define BL_MAX_CALLS 1000000000ull

static uint64_t bl_clock(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A free TCP port of loopback for the server (another process may take it
 * before the server binds: then the server fails and the run says so). */
static uint16_t bl_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    uint16_t port = 0;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static int bl_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double bl_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), bl_cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* calls 1-row calls of kind push (1) or pull (0), rows 0..BL_ROWS-1 in turn:
 * CPU ns per call and wall calls per second. */
static int bl_measure(struct rkv_client *cli, int push, uint64_t calls, double *ns_p,
                      double *rate_p)
{
    float row[BL_ROW_LEN] = {1, 2, 3, 4};
    uint64_t w0 = bl_clock(CLOCK_MONOTONIC), c0 = bl_clock(CLOCK_THREAD_CPUTIME_ID);
    for (uint64_t i = 0; i < calls; i++) {
        uint64_t id = i % BL_ROWS;
        int rc = push ? rkv_client_push(cli, "t", &id, 1, row, RKV_OP_ASSIGN, 0)
                      : rkv_client_pull(cli, "t", &id, 1, row);
        if (rc < 0) {
            fprintf(stderr, "rkv bench local: %s: %s\n", push ? "push" : "pull",
                    rkv_client_errmsg(cli));
            return rc;
        }
    }
    uint64_t c1 = bl_clock(CLOCK_THREAD_CPUTIME_ID), w1 = bl_clock(CLOCK_MONOTONIC);
    *ns_p = (double)(c1 - c0) / (double)calls;
    *rate_p = (double)calls * 1e9 / (double)(w1 - w0 ? w1 - w0 : 1);
    return 0;
}

static void bl_usage(FILE *out)
{
    fprintf(out,
            "usage: rkv bench local [--calls N] [--reps R]\n"
            "  1-row pulls and pushes served from this machine's shared-memory shard\n"
            "  by the client itself (one machine, one server thread, one client):\n"
            "  CPU ns per call and calls per second, each repetition and the median.\n"
            "  --calls  calls per measurement, 1..1000000000 (default 1000000)\n"
            "  --reps   repetitions, 1..%d (default 5)\n",
            BL_MAX_REPS);
}

int rkv_bench_local(int argc, char **argv)
{
    uint64_t calls = 1000000;
    int reps = 5;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        uint64_t v = 0, max = !strcmp(a, "--calls") ? BL_MAX_CALLS : BL_MAX_REPS;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            bl_usage(stdout);
            return RKV_EXIT_OK;
        } else if (strcmp(a, "--calls") && strcmp(a, "--reps")) {
            fprintf(stderr, "rkv bench local: unknown argument \"%s\"\n", a);
        } else if (i + 1 == argc) {
            fprintf(stderr, "rkv bench local: %s needs a value\n", a);
        } else if (rkv_parse_u64(argv[++i], &v) < 0 || v < 1 || v > max) {
            /* "-5" or 2^64 + 1 calls were 2^64 - 1 (no end); (int) took 2^32 + 1 reps as 1 */
            fprintf(stderr, "rkv bench local: %s: expected 1..%llu, got \"%s\"\n", a,
                    (unsigned long long)max, argv[i]);
        } else {
            if (!strcmp(a, "--calls"))
                calls = v;
            else
                reps = (int)v;
            continue;
        }
        bl_usage(stderr);
        return RKV_EXIT_USAGE;
    }
    struct rkv_machine m = {.servers = 1};
    snprintf(m.host, sizeof(m.host), "127.0.0.1");
    m.base_port = bl_free_port();
    struct rkv_config cfg;
    rkv_config_defaults(&cfg);
    cfg.n_machines = 1;
    cfg.machines = &m;
    cfg.n_workers = 1;
    cfg.log_level = 0;
    snprintf(cfg.shm_prefix, sizeof(cfg.shm_prefix), "rkvbl-%d", (int)getpid());
    char err[256];
    struct rkv_server *srv = NULL;
    struct rkv_client *cli = NULL;
    int code = RKV_EXIT_STORE;
    if (!m.base_port || rkv_server_create(&cfg, 0, &srv, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv bench local: server: %s\n", m.base_port ? err : "no free port");
        return RKV_EXIT_STORE;
    }
    struct rkv_tensor_desc d = {.name = "t",
                                .dtype = RKV_F32,
                                .rows = BL_ROWS,
                                .row_len = BL_ROW_LEN,
                                .policy = RKV_PART_RANGE};
    if (rkv_client_create(&cfg, &cli, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv bench local: client: %s\n", err);
        goto stop;
    }
    if (rkv_client_init_data(cli, &d) < 0) {
        fprintf(stderr, "rkv bench local: init: %s\n", rkv_client_errmsg(cli));
        goto out;
    }
    double ns[2][BL_MAX_REPS], rate[2][BL_MAX_REPS];
    double warm_ns, warm_rate;
    if (bl_measure(cli, 0, calls / 10 + 1, &warm_ns, &warm_rate) < 0 ||
        bl_measure(cli, 1, calls / 10 + 1, &warm_ns, &warm_rate) < 0)
        goto out;
    static const char *const what[2] = {"pull", "push"};
    for (int r = 0; r < reps; r++) {
        for (int k = 0; k < 2; k++) {
            if (bl_measure(cli, k, calls, &ns[k][r], &rate[k][r]) < 0)
                goto out;
            printf("rep %d %s: %.1f ns/call (CPU), %.0f calls/s (wall)\n", r + 1, what[k], ns[k][r],
                   rate[k][r]);
        }
    }
    for (int k = 0; k < 2; k++)
        printf("median of %d, %llu 1-row local %s calls each: %.1f ns/call (CPU), %.0f "
               "calls/s (wall)\n",
               reps, (unsigned long long)calls, what[k], bl_median(ns[k], reps),
               bl_median(rate[k], reps));
    code = RKV_EXIT_OK;
out:
    if (rkv_client_shutdown_servers(cli) < 0)
        code = RKV_EXIT_STORE;
    rkv_client_destroy(cli);
stop:
    rkv_server_destroy(srv);
    return code;
}
