/* rkv calibrate: measures the real backend on this host and writes the
 * twin's parameters (calib.h, sim/README.md "Calibration and prediction").
 *
 * The launchers run every machine of a scenario as processes on this host
 * (tcp over loopback; verbs in one VM), so the file says shared_host = 1 and
 * the twin puts every machine on one host with this host's cores.
 *
 * Most figures come from scenarios run through the same launcher as
 * `rkv run --backend tcp` (one process per node), every pulled value
 * checked: pulls of rows on the other machine, each request one row unless
 * said otherwise. Each runs twice, with R and 3R rounds, and only the
 * difference is used (warm: start-up, connection set-up, first touches, the
 * first requests of a phase and the final checks cancel out):
 *
 *   light:  1 worker per machine, 16-byte rows  -> the time that is not CPU
 *   busy:   2 workers per machine (the cores saturated, as in the scenarios)
 *                                               -> kernel CPU per message
 *   rows:   as light, 64 rows per request       -> CPU per row (cpu = model)
 *   wide:   as light, 1 MiB rows                -> bandwidth beyond the CPU
 *
 * and, for tcp, one loopback TCP stream between two threads measures the
 * kernel's CPU per byte on each side (thread CPU time).
 *
 * CPU comes from getrusage of the processes plus the host's interrupt and
 * softirq time meanwhile (/proc/stat), which IRQ time accounting charges to
 * nobody: its total is what counts, the split between user and system is
 * sampled at the timer tick and useless at these durations. The twin measures the CPU of node code
 * itself (sim/cpu.c), so each benchmark also runs in the twin with no costs, which separates the
 * kernel's part (cal_derive_cpu); then the benchmarks run in the twin with those costs, and what
 * their real times have beyond that is not CPU (cal_derive_time). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness/child_exit.h"
#include "harness/calib.h"
#include "harness/launch.h"
#include "harness/probe_tcp.h"
#include "harness/report.h"
#include "harness/scenario.h"

/* Messages a one-row pull costs: the request SEND and the reply
 * WRITE_WITH_IMM, each charged once when posted and once when polled. */
#define CAL_CHARGES_PER_REQ 4.0
#define CAL_MAX_REPS 9
#define CAL_FREE_GBPS 1e4 /* a link the data does not wait for */

struct cal_bench {
    const char *name;
    uint32_t workers_per_machine, ids, row_elems, rounds;
};

/* What every benchmark run takes: the rkv binary the nodes run as, the
 * backend, the scratch directory, the twin (NULL: none). */
struct cal_ctx {
    const char *self, *backend, *tmp;
    rkv_launch_twin_fn twin;
};

/* One benchmark's cost per request, from the difference of two runs. */
struct cal_result {
    double t_s;                /* phase time per request of one worker */
    double user_s, sys_s;      /* CPU per request, every process */
    double twin_cpu_s;         /* CPU per request the twin measures of its own code */
    double phase1_s, phase3_s; /* the raw phase times */
};

static double cal_tv(const struct timeval *tv)
{
    return (double)tv->tv_sec + tv->tv_usec * 1e-6;
}

static int cal_write_yaml(const char *path, const struct cal_bench *b, uint32_t rounds)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -RKV_EIO;
    fprintf(f,
            "# rkv calibrate: %s\n"
            "seed: 3\n"
            "cluster: {machines: 2, servers_per_machine: 1, workers_per_machine: %u}\n"
            "tensors:\n"
            "  - {name: cal, dtype: f32, rows: %u, shape: [%u], partition: range}\n"
            "workload:\n"
            "  - {name: %s, tensor: cal, push: 0.0, ids_per_request: %u, keys: remote-only, "
            "rounds: %u}\n",
            b->name, b->workers_per_machine, b->row_elems > 1024 ? 8 : 256, b->row_elems, b->name,
            b->ids, rounds);
    return fclose(f) == 0 ? 0 : -RKV_EIO;
}

/* The first phase's wall_s in DIR/report.json. */
static int cal_phase_s(const char *dir, double *s_p)
{
    return rkv_report_read_phase_wall_s(dir, s_p, 1) == 1 ? 0 : -RKV_EIO;
}

/* The host's time in interrupts and softirqs so far (/proc/stat), 0 when
 * unreadable. With IRQ time accounting (Debian's kernels) that time is
 * nobody's in getrusage, yet it is the kernel's work for our messages:
 * loopback TCP's receive path, soft-RoCE's tasks. Other work on the host
 * adds its own (little: it computes rather than communicates). */
static double cal_irq_s(void)
{
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long v[7] = {0};
    int n = f ? fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                       &v[4], &v[5], &v[6])
              : 0;
    if (f)
        fclose(f);
    long tck = sysconf(_SC_CLK_TCK);
    return n == 7 && tck > 0 ? (double)(v[5] + v[6]) / (double)tck : 0;
}

/* Runs yaml on the backend as `rkv run YAML --backend B --out DIR` would
 * (rkv_launch_file), in a child whose output is discarded: the child's
 * rusage takes in its own and every node's CPU and nothing of this process.
 * Returns the phase time and that CPU (system time: with the host's
 * interrupts and softirqs meanwhile, cal_irq_s). */
static int cal_run(const char *self, const char *backend, const char *yaml, const char *dir,
                   double *phase_s, double *user_s, double *sys_s)
{
    struct rusage r0, r1;
    getrusage(RUSAGE_CHILDREN, &r0);
    double irq0 = cal_irq_s();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return -RKV_EIO;
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) {
            dup2(null, STDOUT_FILENO);
            dup2(null, STDERR_FILENO);
        }
        char *flags[] = {"--backend", (char *)backend};
        int code = rkv_launch_file(yaml, 2, flags, dir, 0, self);
        fflush(NULL);
        rkv_child_exit(code);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    getrusage(RUSAGE_CHILDREN, &r1);
    double irq1 = cal_irq_s();
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return -RKV_EIO;
    *user_s = cal_tv(&r1.ru_utime) - cal_tv(&r0.ru_utime);
    *sys_s = cal_tv(&r1.ru_stime) - cal_tv(&r0.ru_stime) + (irq1 - irq0);
    return cal_phase_s(dir, phase_s);
}

/* yaml in the twin, in a child (SimGrid runs once per process): the CPU it
 * measured of node code and the phase's time. calib NULL: free messages and
 * a free network on this host's cores, to read the CPU alone. Without the
 * twin (twin NULL) nothing is measured there: zeros. */
static int cal_twin(rkv_launch_twin_fn twin, const char *yaml, const struct rkv_calib *calib,
                    double out[2])
{
    if (!twin) {
        out[0] = out[1] = 0;
        return 0;
    }
    int fd[2];
    if (pipe(fd) < 0)
        return -RKV_EIO;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) {
            dup2(null, STDOUT_FILENO);
            dup2(null, STDERR_FILENO);
        }
        struct rkv_scenario *sc;
        char err[512];
        double v[2] = {-1, -1};
        if (rkv_scenario_load(yaml, &sc, err, sizeof(err)) == 0) {
            struct rkv_calib free_net = {.host_cores = (uint32_t)sysconf(_SC_NPROCESSORS_ONLN),
                                         .shared_host = 1,
                                         .bandwidth_gbps = 1e5,
                                         .cpu_measured = 1};
            rkv_calib_apply(calib ? calib : &free_net, sc);
            struct rkv_launch_twin_opts o = {.test_corrupt_row = UINT64_MAX};
            struct rkv_report r;
            if (twin(sc, &o, &r) == 0 && r.processes_ok) {
                v[0] = r.sim_node_cpu_s;
                v[1] = r.phase[0].wall_s;
            }
            rkv_report_free(&r);
        }
        ssize_t w = write(fd[1], v, sizeof(v));
        rkv_child_exit(w == sizeof(v) && v[0] >= 0 ? 0 : 1);
    }
    close(fd[1]);
    ssize_t r = pid > 0 ? read(fd[0], out, 2 * sizeof(*out)) : -1;
    close(fd[0]);
    int st = 0;
    if (pid > 0)
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
    return r == 2 * sizeof(*out) && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -RKV_EIO;
}

static int cal_bench_once(const struct cal_ctx *x, const struct cal_bench *b,
                          struct cal_result *res, char *err, size_t err_len)
{
    char yaml[512], dir[512];
    double ph[2], us[2], ss[2], tc[2];
    for (int k = 0; k < 2; k++) {
        uint32_t rounds = b->rounds * (k ? 3 : 1);
        snprintf(yaml, sizeof(yaml), "%s/%s-%u.yaml", x->tmp, b->name, rounds);
        snprintf(dir, sizeof(dir), "%s/%s-%u", x->tmp, b->name, rounds);
        double tw[2] = {0, 0};
        int rc = cal_write_yaml(yaml, b, rounds);
        if (rc == 0)
            rc = cal_run(x->self, x->backend, yaml, dir, &ph[k], &us[k], &ss[k]);
        if (rc == 0)
            rc = cal_twin(x->twin, yaml, NULL, tw);
        tc[k] = tw[0];
        if (rc < 0) {
            snprintf(err, err_len, "calibration run %s (%u rounds) failed: rkv run %s --backend %s",
                     b->name, rounds, yaml, x->backend);
            return rc;
        }
    }
    double reqs = 2.0 * b->rounds * 2 * b->workers_per_machine; /* extra rounds x workers */
    res->phase1_s = ph[0];
    res->phase3_s = ph[1];
    /* Warm: the extra 2R rounds alone, so the first requests of a phase
     * (connections, first touches of the rows, cold caches) cancel. */
    res->t_s = (ph[1] - ph[0]) / (2.0 * b->rounds);
    res->user_s = (us[1] - us[0]) / reqs;
    res->sys_s = (ss[1] - ss[0]) / reqs;
    res->twin_cpu_s = (tc[1] - tc[0]) / reqs;
    return 0;
}

/* The warm time per request of benchmark b in the twin with calibration c
 * (the R and 3R runs' difference, as for the real runs). */
static int cal_twin_t(const struct cal_ctx *x, const struct cal_bench *b, const struct rkv_calib *c,
                      double *t_s)
{
    double tw[2][2];
    for (int k = 0; k < 2; k++) {
        char yaml[512];
        snprintf(yaml, sizeof(yaml), "%s/%s-%u.yaml", x->tmp, b->name, b->rounds * (k ? 3 : 1));
        int rc = cal_twin(x->twin, yaml, c, tw[k]);
        if (rc < 0)
            return rc;
    }
    *t_s = (tw[1][1] - tw[0][1]) / (2.0 * b->rounds);
    return 0;
}

static int cal_cmp(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static double cal_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cal_cmp);
    return v[n / 2];
}

/* The median of reps runs of each figure: other work on the host makes
 * single runs vary by tens of percent. */
static int cal_bench_run(const struct cal_ctx *x, const struct cal_bench *b, int reps,
                         struct cal_result *res, char *err, size_t err_len)
{
    double t[CAL_MAX_REPS], u[CAL_MAX_REPS], tc[CAL_MAX_REPS];
    for (int k = 0; k < reps; k++) {
        struct cal_result one;
        int rc = cal_bench_once(x, b, &one, err, err_len);
        if (rc < 0)
            return rc;
        t[k] = one.t_s;
        u[k] = one.user_s + one.sys_s;
        tc[k] = one.twin_cpu_s;
    }
    *res = (struct cal_result){.t_s = cal_median(t, reps),
                               .user_s = cal_median(u, reps),
                               .twin_cpu_s = cal_median(tc, reps)};
    printf("  %-6s %u worker(s)/machine, %2u x %7u B rows: %7.1f us per request, CPU %6.1f us "
           "(twin measures %6.1f us of it)\n",
           b->name, b->workers_per_machine, b->ids, b->row_elems * 4, res->t_s * 1e6,
           (res->user_s + res->sys_s) * 1e6, res->twin_cpu_s * 1e6);
    fflush(stdout);
    return 0;
}

static double cal_pos(double x)
{
    return x > 0 ? x : 0;
}

/* The CPU seconds per byte of the sending and the receiving process of one
 * loopback TCP stream (1 MiB writes and reads, as the backend's large
 * frames): what the kernel's copies and stack cost each side. Their own
 * CPU time (the probe's rusage), so other work on the host does not count. */
static int cal_stream_bytes(size_t bytes, int reps, double *send_ns, double *recv_ns)
{
    double s[CAL_MAX_REPS], r[CAL_MAX_REPS];
    for (int k = 0; k < reps; k++) {
        struct rkv_probe_tcp_run run;
        if (rkv_probe_tcp_once(1, bytes, 1u << 20, &run) < 0)
            return -RKV_EIO;
        s[k] = run.send_cpu_s / (double)bytes * 1e9;
        r[k] = run.recv_cpu_s / (double)bytes * 1e9;
    }
    *send_ns = cal_median(s, reps);
    *recv_ns = cal_median(r, reps);
    return 0;
}

/* A warm memcpy's cost per byte (both buffers touched before): what the
 * twin's own copies into receive buffers cost when no page is new. */
static int cal_copy_bytes(int reps, double *ns)
{
    size_t bytes = 8u << 20;
    char *a = malloc(bytes), *b = malloc(bytes);
    double v[CAL_MAX_REPS];
    int rc = a && b ? 0 : -RKV_ENOMEM;
    if (rc == 0) {
        memset(a, 1, bytes);
        memset(b, 2, bytes);
    }
    for (int k = 0; k < reps && rc == 0; k++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        memcpy(b, a, bytes);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        a[k] = b[bytes - 1 - (size_t)k]; /* the copy is used */
        v[k] = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) /
               (double)bytes;
    }
    if (rc == 0)
        *ns = cal_median(v, reps);
    free(a);
    free(b);
    return rc;
}

/* ---- the parameters ---- */

/* In the twin a one-row pull is 4 message charges (msg_cost_ns: the request
 * posted and received, the reply posted and received; sim/nic_sim.c charges
 * the receiving half on the receiver's NIC actor, not per completion
 * polled, so the sends' completions cost nothing), the CPU the twin
 * measures of its own code (c), the bytes' CPU, and two one-way latencies.
 * msg_cost_ns is CPU: what the processes' CPU per request (getrusage) has
 * beyond c and the bytes, over 4; in it are the kernel's TCP path, epoll
 * and the hand-offs between the progress and the waiting thread. It is
 * taken from "busy", with the cores saturated as the scenarios keep them:
 * with idle cores every message also wakes a sleeping thread (an
 * interprocessor interrupt, a VM exit), about twice the CPU per request
 * here; "light" puts that time into the latency instead (cal_derive_time). */
static void cal_derive_cpu(const struct cal_result *light, const struct cal_result *busy,
                           const struct cal_result *rows, struct rkv_calib *c)
{
    double bytes = 2 * (64 + 16.0); /* a request and a one-row reply, headers included */
    double byte_s = bytes * (c->send_byte_ns + c->recv_byte_ns) * 1e-9;
    c->msg_cost_ns =
        cal_pos(busy->user_s + busy->sys_s - busy->twin_cpu_s - byte_s) / CAL_CHARGES_PER_REQ * 1e9;
    /* Without measured CPU (cpu = model): the CPU a row adds, from getrusage. */
    c->row_cost_ns = cal_pos(rows->user_s - light->user_s) / 63 * 1e9;
}

/* What remains of a benchmark's real time beyond the twin's prediction
 * without it is not CPU: the light pull's gives the one-way latency, two per
 * request (on one host no wire: the wake-up of a thread sleeping on an idle
 * core, which a VM pays in an interprocessor interrupt and a VM exit), then
 * the wide pull's gives the bandwidth beyond the CPU of the copies (none
 * when the twin is already as slow). The twin runs on the platform the
 * calibration describes, so the cores' contention is in both. */
static int cal_derive_time(const struct cal_ctx *x, const struct cal_bench *b,
                           const struct cal_result *res, struct rkv_calib *c)
{
    double t_light, t_wide;
    c->latency_us = 0;
    c->bandwidth_gbps = CAL_FREE_GBPS;
    int rc = cal_twin_t(x, &b[0], c, &t_light);
    if (rc < 0)
        return rc;
    c->latency_us = cal_pos(res[0].t_s - t_light) / 2 * 1e6;
    if ((rc = cal_twin_t(x, &b[3], c, &t_wide)) < 0)
        return rc;
    double bytes = (double)b[3].ids * b[3].row_elems * 4, data_s = res[3].t_s - t_wide;
    /* Less than a tenth of the time left: the CPU explains the data. */
    c->bandwidth_gbps = data_s > 0.1 * res[3].t_s ? bytes * 8 / data_s / 1e9 : CAL_FREE_GBPS;
    printf("  the twin without latency: light %.1f us, wide %.1f us per request -> latency %.3f "
           "us, bandwidth %.3f Gb/s\n",
           t_light * 1e6, t_wide * 1e6, c->latency_us, c->bandwidth_gbps);
    return 0;
}

int rkv_calibrate(const char *self, const char *backend, int quick, const char *out,
                  rkv_launch_twin_fn twin, struct rkv_calib *c, char *err, size_t err_len)
{
    char tmp[] = "/tmp/rkv-calibrate-XXXXXX";
    if (!mkdtemp(tmp)) {
        snprintf(err, err_len, "cannot make a temporary directory: %s", strerror(errno));
        return -RKV_EIO;
    }
    const struct cal_ctx x = {.self = self, .backend = backend, .tmp = tmp, .twin = twin};
    /* Long enough that each run's own noise (start-up, the host's placement
     * of threads) is small against the 2R rounds' difference: three
     * calibrations gave msg_cost_ns 7856-10002 with 2400, 5482-11825 with 600. */
    uint32_t r = quick ? 100 : 2400;
    int reps = quick ? 3 : 5;
    const struct cal_bench b[4] = {
        {"light", 1, 1, 4, r},
        {"busy", 2, 1, 4, r},
        {"rows", 1, 64, 4, r},
        {"wide", 1, 1, 262144, quick ? 4 : 10},
    };
    struct cal_result res[4];
    /* Both launchers run every machine of a scenario as processes on this
     * host (tcp over loopback; verbs in one VM): one pool of cores. */
    *c = (struct rkv_calib){.host_cores = (uint32_t)sysconf(_SC_NPROCESSORS_ONLN),
                            .shared_host = 1,
                            .cpu_measured = 1,
                            .sched_cores = 1};
    snprintf(c->backend, sizeof(c->backend), "%s", backend);
    printf("rkv calibrate: %s on this host, %u cores\n", backend, c->host_cores);
    int rc = 0;
    if (!strcmp(backend, "tcp")) {
        rc = cal_stream_bytes((size_t)(quick ? 32 : 64) << 20, reps, &c->send_byte_ns,
                              &c->recv_byte_ns);
        if (rc < 0)
            snprintf(err, err_len, "the loopback TCP stream benchmark failed");
        else
            printf("  stream one loopback TCP stream: CPU %.4f ns per byte sent, %.4f received\n",
                   c->send_byte_ns, c->recv_byte_ns);
    }
    if (rc == 0 && (rc = cal_copy_bytes(CAL_MAX_REPS, &c->copy_byte_ns)) < 0)
        snprintf(err, err_len, "out of memory for the copy benchmark");
    for (int i = 0; i < 4 && rc == 0; i++)
        rc = cal_bench_run(&x, &b[i], reps, &res[i], err, err_len);
    double t_busy = 0;
    if (rc == 0) {
        cal_derive_cpu(&res[0], &res[1], &res[2], c);
        rc = cal_derive_time(&x, b, res, c);
        /* A check, not a parameter: the busy pull predicted with them. */
        if (rc == 0 && (rc = cal_twin_t(&x, &b[1], c, &t_busy)) == 0) {
            /* busy keeps every core wanted: its processes' CPU on the
             * host's cores is about the least its time can be (the
             * softirq time in it is the host's, others' too). The real time
             * beyond that is other work's (or idle cores'): how disturbed
             * this calibration was, which the twin does not model. Every
             * benchmark has 2 machines. */
            double cpu_bound_s =
                (res[1].user_s + res[1].sys_s) * 2 * b[1].workers_per_machine / c->host_cores;
            printf("  check: busy measured %.1f us per request, the twin predicts %.1f us; its "
                   "CPU on %u cores needs %.1f us (%.0f %% of the measured time)\n",
                   res[1].t_s * 1e6, t_busy * 1e6, c->host_cores, cpu_bound_s * 1e6,
                   res[1].t_s > 0 ? cpu_bound_s / res[1].t_s * 100 : 0.0);
        }
        if (rc < 0)
            snprintf(err, err_len, "a calibration run in the twin failed");
    }
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "rkv calibrate: could not remove %s\n", tmp);
    if (rc < 0)
        return rc;
    char notes[1024];
    size_t nl = 0;
    for (int i = 0; i < 4; i++)
        nl += (size_t)snprintf(notes + nl, sizeof(notes) - nl,
                               "measured_%s_us = %.2f %.2f %.2f  # per request: warm time, CPU, "
                               "CPU the twin measures\n",
                               b[i].name, res[i].t_s * 1e6, (res[i].user_s + res[i].sys_s) * 1e6,
                               res[i].twin_cpu_s * 1e6);
    snprintf(notes + nl, sizeof(notes) - nl,
             "measured_busy_predicted_us = %.2f  # the busy pull in the twin (a check)\n",
             t_busy * 1e6);
    if (out && (rc = rkv_calib_write(out, c, notes, err, err_len)) < 0)
        return rc;
    printf("latency_us %.3f  bandwidth_gbps %.3f  msg_cost_ns %.0f  send_byte_ns %.4f  "
           "recv_byte_ns %.4f  copy_byte_ns %.4f  row_cost_ns %.1f  cores %u (shared)\n",
           c->latency_us, c->bandwidth_gbps, c->msg_cost_ns, c->send_byte_ns, c->recv_byte_ns,
           c->copy_byte_ns, c->row_cost_ns, c->host_cores);
    return 0;
}
