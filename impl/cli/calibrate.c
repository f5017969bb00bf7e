/* rkv calibrate: measures the real backend on this host and writes the
 * twin's parameters (calib.h, sim/README.md "Calibration").
 *
 * Each figure comes from scenarios run through the same launcher as
 * `rkv run --backend tcp` (one process per node), every pulled value
 * checked: pulls of rows on the other machine, each request one row unless
 * said otherwise. Each micro-benchmark runs twice, with R and 3R rounds, and
 * only the difference is used, so start-up, connection set-up, tensor
 * initialisation and the final checks cancel out:
 *
 *   light:  1 worker per machine, 16-byte rows      -> round trip, CPU per request
 *   busy:   2 workers per machine (the scenarios' load on this host)
 *                                                   -> kernel CPU per message
 *   rows:   as light, 64 rows per request           -> CPU per row
 *   wide:   as light, 1 MiB rows                    -> bandwidth
 *
 * CPU comes from getrusage of the processes: its total (user + system) is
 * exact, the split between the two is sampled at the timer tick and useless
 * at these durations. The twin measures the CPU of node code itself (sim/cpu.c),
 * so each benchmark also runs in the twin with no network costs; the time
 * the real runs take beyond that CPU is split into msg_cost_ns and latency
 * (cal_derive). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/calib.h"
#include "cli/cli.h"

#if RKV_WITH_SIM
#include "harness/scenario.h"
#include "sim/twin.h"
#endif

/* Messages a one-row pull costs: the request SEND and the reply
 * WRITE_WITH_IMM, each charged once when posted and once when polled. */
#define CAL_CHARGES_PER_REQ 4.0
#define CAL_MAX_REPS 9

struct cal_bench {
    const char *name;
    uint32_t workers_per_machine, ids, row_elems, rounds;
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
    char path[600], buf[8192];
    snprintf(path, sizeof(path), "%s/report.json", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return -RKV_EIO;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *ph = strstr(buf, "\"phases\"");
    const char *w = ph ? strstr(ph, "\"wall_s\": ") : NULL;
    return w && sscanf(w, "\"wall_s\": %lf", s_p) == 1 ? 0 : -RKV_EIO;
}

/* Runs `self run YAML --backend B --out DIR` (output to the log); returns
 * its phase time and the CPU of every process it started. */
static int cal_run(const char *self, const char *backend, const char *yaml, const char *dir,
                   double *phase_s, double *user_s, double *sys_s)
{
    struct rusage r0, r1;
    getrusage(RUSAGE_CHILDREN, &r0);
    pid_t pid = fork();
    if (pid < 0)
        return -RKV_EIO;
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) {
            dup2(null, STDOUT_FILENO);
            dup2(null, STDERR_FILENO);
        }
        execl(self, self, "run", yaml, "--backend", backend, "--out", dir, (char *)NULL);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    getrusage(RUSAGE_CHILDREN, &r1);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return -RKV_EIO;
    *user_s = cal_tv(&r1.ru_utime) - cal_tv(&r0.ru_utime);
    *sys_s = cal_tv(&r1.ru_stime) - cal_tv(&r0.ru_stime);
    return cal_phase_s(dir, phase_s);
}

#if RKV_WITH_SIM
/* The twin's measured CPU for yaml with free messages, in a child (SimGrid
 * runs once per process). */
static int cal_twin_cpu(const char *yaml, double *cpu_s)
{
    int fd[2];
    if (pipe(fd) < 0)
        return -RKV_EIO;
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
        double v = -1;
        if (rkv_scenario_load(yaml, &sc, err, sizeof(err)) == 0) {
            struct cli_calib free_net = {.host_cores = (uint32_t)sysconf(_SC_NPROCESSORS_ONLN),
                                         .bandwidth_gbps = 1e5,
                                         .cpu_measured = 1};
            cli_calib_apply(&free_net, sc);
            struct rkv_twin_opts o = {.test_corrupt_row = UINT64_MAX};
            struct rkv_twin_result res;
            if (rkv_twin_run(sc, &o, &res) == 0 && res.nodes_ok)
                v = res.cpu_s;
        }
        ssize_t w = write(fd[1], &v, sizeof(v));
        _exit(w == sizeof(v) && v >= 0 ? 0 : 1);
    }
    close(fd[1]);
    ssize_t r = pid > 0 ? read(fd[0], cpu_s, sizeof(*cpu_s)) : -1;
    close(fd[0]);
    int st = 0;
    if (pid > 0)
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
    return r == sizeof(*cpu_s) && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -RKV_EIO;
}
#else
static int cal_twin_cpu(const char *yaml, double *cpu_s)
{
    (void)yaml;
    *cpu_s = 0; /* without the twin nothing is measured there */
    return 0;
}
#endif

static int cal_bench_once(const char *self, const char *backend, const char *tmp,
                          const struct cal_bench *b, struct cal_result *res, char *err,
                          size_t err_len)
{
    char yaml[512], dir[512];
    double ph[2], us[2], ss[2], tc[2];
    for (int k = 0; k < 2; k++) {
        uint32_t rounds = b->rounds * (k ? 3 : 1);
        snprintf(yaml, sizeof(yaml), "%s/%s-%u.yaml", tmp, b->name, rounds);
        snprintf(dir, sizeof(dir), "%s/%s-%u", tmp, b->name, rounds);
        int rc = cal_write_yaml(yaml, b, rounds);
        if (rc == 0)
            rc = cal_run(self, backend, yaml, dir, &ph[k], &us[k], &ss[k]);
        if (rc == 0)
            rc = cal_twin_cpu(yaml, &tc[k]);
        if (rc < 0) {
            snprintf(err, err_len, "calibration run %s (%u rounds) failed: rkv run %s --backend %s",
                     b->name, rounds, yaml, backend);
            return rc;
        }
    }
    double reqs = 2.0 * b->rounds * 2 * b->workers_per_machine; /* extra rounds x workers */
    res->phase1_s = ph[0];
    res->phase3_s = ph[1];
    /* A phase's time excludes start-up already: the longer run alone. */
    res->t_s = ph[1] / (3.0 * b->rounds);
    res->user_s = (us[1] - us[0]) / reqs;
    res->sys_s = (ss[1] - ss[0]) / reqs;
    res->twin_cpu_s = (tc[1] - tc[0]) / reqs;
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
static int cal_bench_run(const char *self, const char *backend, const char *tmp,
                         const struct cal_bench *b, int reps, struct cal_result *res, char *err,
                         size_t err_len)
{
    double t[CAL_MAX_REPS], u[CAL_MAX_REPS], sy[CAL_MAX_REPS], tc[CAL_MAX_REPS];
    for (int k = 0; k < reps; k++) {
        struct cal_result one;
        int rc = cal_bench_once(self, backend, tmp, b, &one, err, err_len);
        if (rc < 0)
            return rc;
        t[k] = one.t_s;
        u[k] = one.user_s + one.sys_s;
        sy[k] = 0;
        tc[k] = one.twin_cpu_s;
    }
    *res = (struct cal_result){.t_s = cal_median(t, reps),
                               .user_s = cal_median(u, reps),
                               .sys_s = cal_median(sy, reps),
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

/* The twin's parameters from the four benchmarks (see the top comment).
 *
 * In the twin, a one-row pull is 4 message charges (msg_cost_ns: the request
 * posted and polled, the reply posted and polled), the CPU the twin measures
 * of its own code (c), and two one-way latencies. "busy" keeps the machines'
 * cores saturated: per round a machine's core does its 2 workers' and its
 * server's 2 requests' charges, 8 x msg + 2 x c, so that fixes msg_cost_ns;
 * on a loopback host it holds the kernel's TCP path and what waiting for a
 * busy core to run the woken thread costs. "light" is the round trip when
 * the cores are mostly free: what remains after 4 x msg + c is latency. */
static void cal_derive(const struct cal_result *light, const struct cal_result *busy,
                       const struct cal_result *rows, const struct cal_result *wide,
                       const struct cal_bench *wb, struct cli_calib *c)
{
    double cores = c->host_cores / 2 ? c->host_cores / 2 : 1; /* per machine: 2 machines */
    c->msg_cost_ns = cal_pos(busy->t_s * cores - 2 * busy->twin_cpu_s) / 8 * 1e9;
    c->latency_us =
        cal_pos(light->t_s - CAL_CHARGES_PER_REQ * c->msg_cost_ns * 1e-9 - light->twin_cpu_s) / 2 *
        1e6;
    /* Without measured CPU (cpu = model): the CPU a row adds, from getrusage. */
    c->row_cost_ns = cal_pos(rows->user_s - light->user_s) / 63 * 1e9;
    /* The wide rows' extra time beyond the small round trip and the CPU the
     * twin charges itself (the oracle checks every element it pulls). */
    double bytes = (double)wb->ids * wb->row_elems * 4;
    double data_s = wide->t_s - light->t_s - cal_pos(wide->twin_cpu_s - light->twin_cpu_s);
    c->bandwidth_gbps = data_s > 0 ? bytes * 8 / data_s / 1e9 : 100;
}

static void cal_usage(void)
{
    printf("usage: rkv calibrate [--backend tcp|verbs] [--out FILE] [--quick]\n"
           "                     [--platform-xml FILE --machines M]\n"
           "Measures the real backend on this host (round trip, bandwidth, CPU per message and\n"
           "per row, from small scenarios run as `rkv run --backend B` runs them) and writes\n"
           "the twin's parameters to FILE (default rkv-calibration.txt), for\n"
           "`rkv run SCENARIO --calibration FILE` and `--predict` (sim/README.md).\n"
           "  --quick             fewer rounds (a few seconds; noisier)\n"
           "  --platform-xml F    also a SimGrid platform of M machines (hosts m0..) for\n"
           "                      a scenario's sim: platform_file\n");
}

#if RKV_WITH_SIM
static int cal_xml(const struct cli_calib *c, const char *path, uint32_t machines, char *err,
                   size_t err_len)
{
    struct rkv_scenario *sc = calloc(1, sizeof(*sc));
    if (!sc)
        return -RKV_ENOMEM;
    sc->machines = machines;
    cli_calib_apply(c, sc);
    int rc = rkv_twin_platform_xml(sc, path, err, err_len);
    free(sc);
    return rc;
}
#endif

int cli_calibrate(const char *self, const char *backend, int quick, const char *out,
                  struct cli_calib *c, char *err, size_t err_len)
{
    char tmp[] = "/tmp/rkv-calibrate-XXXXXX";
    if (!mkdtemp(tmp)) {
        snprintf(err, err_len, "cannot make a temporary directory: %s", strerror(errno));
        return -RKV_EIO;
    }
    uint32_t r = quick ? 100 : 500;
    int reps = quick ? 1 : 3;
    const struct cal_bench b[4] = {
        {"light", 1, 1, 4, r},
        {"busy", 2, 1, 4, r},
        {"rows", 1, 64, 4, r},
        {"wide", 1, 1, 262144, quick ? 4 : 10},
    };
    struct cal_result res[4];
    printf("rkv calibrate: %s on this host, %ld cores\n", backend, sysconf(_SC_NPROCESSORS_ONLN));
    int rc = 0;
    for (int i = 0; i < 4 && rc == 0; i++)
        rc = cal_bench_run(self, backend, tmp, &b[i], reps, &res[i], err, err_len);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "rkv calibrate: could not remove %s\n", tmp);
    if (rc < 0)
        return rc;
    *c = (struct cli_calib){.host_cores = (uint32_t)sysconf(_SC_NPROCESSORS_ONLN),
                            .cpu_measured = 1};
    snprintf(c->backend, sizeof(c->backend), "%s", backend);
    cal_derive(&res[0], &res[1], &res[2], &res[3], &b[3], c);
    char notes[1024];
    size_t nl = 0;
    for (int i = 0; i < 4; i++)
        nl += (size_t)snprintf(notes + nl, sizeof(notes) - nl,
                               "measured_%s_us = %.2f %.2f %.2f  # per request: time, CPU, "
                               "CPU the twin measures\n",
                               b[i].name, res[i].t_s * 1e6, (res[i].user_s + res[i].sys_s) * 1e6,
                               res[i].twin_cpu_s * 1e6);
    if (out && (rc = cli_calib_write(out, c, notes, err, err_len)) < 0)
        return rc;
    printf("latency_us %.3f  bandwidth_gbps %.3f  msg_cost_ns %.0f  row_cost_ns %.1f  cores %u\n",
           c->latency_us, c->bandwidth_gbps, c->msg_cost_ns, c->row_cost_ns, c->host_cores);
    return 0;
}

int cli_cmd_calibrate(int argc, char **argv, const char *self)
{
    const char *backend = "tcp", *out = "rkv-calibration.txt", *xml = NULL;
    int quick = 0;
    unsigned long machines = 2;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            cal_usage();
            return RKV_EXIT_OK;
        } else if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
            backend = argv[++i];
        } else if (!strcmp(argv[i], "--out") && i + 1 < argc) {
            out = argv[++i];
        } else if (!strcmp(argv[i], "--platform-xml") && i + 1 < argc) {
            xml = argv[++i];
        } else if (!strcmp(argv[i], "--machines") && i + 1 < argc) {
            machines = strtoul(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--quick")) {
            quick = 1;
        } else {
            fprintf(stderr, "rkv calibrate: unknown argument \"%s\" (see --help)\n", argv[i]);
            return RKV_EXIT_USAGE;
        }
    }
    if (strcmp(backend, "tcp") && strcmp(backend, "verbs")) {
        fprintf(stderr, "rkv calibrate: --backend: expected tcp or verbs, got \"%s\"\n", backend);
        return RKV_EXIT_USAGE;
    }
    if (machines < 1 || machines > 65536) {
        fprintf(stderr, "rkv calibrate: --machines: expected 1..65536\n");
        return RKV_EXIT_USAGE;
    }
    struct cli_calib c;
    char err[600];
    int rc = cli_calibrate(self, backend, quick, out, &c, err, sizeof(err));
    if (rc == 0 && xml) {
#if RKV_WITH_SIM
        rc = cal_xml(&c, xml, (uint32_t)machines, err, sizeof(err));
#else
        snprintf(err, sizeof(err), "--platform-xml needs the twin (cmake -DRKV_WITH_SIM=ON)");
        rc = -RKV_ECONFIG;
#endif
    }
    if (rc < 0) {
        fprintf(stderr, "rkv calibrate: %s\n", err);
        return rc == -RKV_ECONFIG ? RKV_EXIT_USAGE : RKV_EXIT_STORE;
    }
    printf("wrote %s%s%s\n", out, xml ? " and " : "", xml ? xml : "");
    return RKV_EXIT_OK;
}
