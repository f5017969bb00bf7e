/* rkv bench tcp|shm|verbs: rkv's throughput and latency as ratios to the
 * physical limit of this host measured in the same run (issue 7). Every
 * point is the median of --reps clusters of `rkv demo` (its timed phase,
 * impl/cli/workload.c); the limits are taken between them, so a host that
 * gets busier slows both sides of a ratio alike.
 *   tcp:   rows of the other machine over loopback TCP, vs the best raw
 *          one-stream TCP figure of the run (iperf3 with 1 MiB writes and
 *          zero copy, iperf3 with its default writes, the built-in loopback
 *          test; iperf3 is optional) and memcpy. Only figures measured in
 *          the same run are set side by side: a peer that cannot be built
 *          here (ps-lite) is compared outside the project
 *   shm:   rows of this machine's shared-memory shard, vs memcpy doing the
 *          same copies over the same working set (the caller's rows to and
 *          from rows of a shard-sized region); memcpy of one row-sized
 *          block, which stays in cache, is printed too. And one 512 B
 *          row's pull latency
 *   verbs: over an RDMA device (ci/softroce), vs perftest's ib_write_bw and
 *          ib_write_lat on the same device; the smallest size once more with
 *          the other busy-poll setting, for the latency in both modes */
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "harness/child_exit.h"
#include "harness/bench_durable.h"
#include "harness/bench_local.h"
#include "cli/cli.h"
#include "harness/limits.h"
#include "harness/probe_tcp.h"
#include "util/util.h"

#define BENCH_MAX_SIZES 8
#define BENCH_MAX_REPS 99
#define BENCH_MAX_FIGS 256
#define BENCH_MAX_RATIOS 256
#define BENCH_MAX_EXTRA 32
#define BENCH_NAME_LEN 64
#define BENCH_OUT_BYTES (64u << 10) /* a tool's output we parse: iperf3 -J, perftest */

enum bench_mode { BENCH_TCP, BENCH_SHM, BENCH_VERBS };

/* One measured quantity and its samples, one per repetition. */
struct bench_fig {
    char name[BENCH_NAME_LEN];
    const char *unit;
    double v[BENCH_MAX_REPS];
    int n;
};

/* A ratio of two figures' medians, printed as `ratio NUM/DEN VALUE`. */
struct bench_ratio {
    char num[BENCH_NAME_LEN], den[BENCH_NAME_LEN];
};

/* A cluster shape: servers per machine x workers. */
struct bench_shape {
    uint32_t machines, spm, workers;
};

struct bench {
    enum bench_mode mode;
    const char *mode_name;
    const char *self;                /* this binary, for the demo clusters */
    int reps;                        /* repetitions per point */
    uint32_t sizes[BENCH_MAX_SIZES]; /* value bytes */
    int n_sizes;
    int json;                     /* print one JSON object instead of lines */
    int iperf_s;                  /* seconds per iperf3 run */
    char *extra[BENCH_MAX_EXTRA]; /* settings flags passed to every cluster */
    int n_extra;
    /* The figure the throughput ratios use. tcp: BENCH_TCP_LIMIT until the
     * runs are done, then the best of bench_tcp_limits (bench_choose_limit),
     * and limit2 likewise for the shapes with two connections. */
    const char *limit, *limit2;
    int have_iperf3;
    /* verbs: RKV_HOST (a list "A,B": the clusters' machines alternate over
     * them, perftest's client runs on A's device and its server on B's) and
     * each end's device, port and GID; --port / --gid-index override. */
    const char *host;
    struct bench_end {
        char host[RKV_HOST_MAX + 1];
        char dev[64];
        int port;
        int gid;             /* -1: none (InfiniBand without an IP GID: perftest goes by LID) */
    } end[2];                /* [0] perftest's client, [1] its server */
    int port_flag, gid_flag; /* -1: found from the address */
    int busy_poll;           /* the clusters' busy-poll setting (flags, then env) */
    struct bench_fig fig[BENCH_MAX_FIGS];
    int n_fig;
    struct bench_ratio ratio[BENCH_MAX_RATIOS];
    int n_ratio;
    char notes[4][320];
    int n_notes;
};

/* ---- figures and ratios ---- */

static struct bench_fig *bench_fig(struct bench *b, const char *name, const char *unit)
{
    for (int i = 0; i < b->n_fig; i++)
        if (!strcmp(b->fig[i].name, name))
            return &b->fig[i];
    if (b->n_fig == BENCH_MAX_FIGS)
        return NULL;
    struct bench_fig *f = &b->fig[b->n_fig++];
    snprintf(f->name, sizeof(f->name), "%s", name);
    f->unit = unit;
    return f;
}

/* Records one sample; values <= 0 mean "not measured" and are dropped, so
 * a figure nobody measured prints nothing rather than a zero. */
static void bench_add(struct bench *b, const char *name, const char *unit, double v)
{
    struct bench_fig *f = bench_fig(b, name, unit);
    if (f && v > 0 && f->n < BENCH_MAX_REPS)
        f->v[f->n++] = v;
}

static void bench_ratio(struct bench *b, const char *num, const char *den)
{
    for (int i = 0; i < b->n_ratio; i++)
        if (!strcmp(b->ratio[i].num, num) && !strcmp(b->ratio[i].den, den))
            return;
    if (b->n_ratio == BENCH_MAX_RATIOS)
        return;
    snprintf(b->ratio[b->n_ratio].num, BENCH_NAME_LEN, "%s", num);
    snprintf(b->ratio[b->n_ratio].den, BENCH_NAME_LEN, "%s", den);
    b->n_ratio++;
}

static int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of the figure's samples, 0 when it has none. */
static double bench_median(const struct bench *b, const char *name)
{
    for (int i = 0; i < b->n_fig; i++) {
        const struct bench_fig *f = &b->fig[i];
        if (strcmp(f->name, name) || f->n == 0)
            continue;
        double v[BENCH_MAX_REPS];
        memcpy(v, f->v, (size_t)f->n * sizeof(double));
        qsort(v, (size_t)f->n, sizeof(double), bench_cmp_double);
        return f->n % 2 ? v[f->n / 2] : (v[f->n / 2 - 1] + v[f->n / 2]) / 2;
    }
    return 0;
}

static double bench_ratio_value(const struct bench *b, const struct bench_ratio *r)
{
    double num = bench_median(b, r->num), den = bench_median(b, r->den);
    return num > 0 && den > 0 ? num / den : 0;
}

static void bench_note(struct bench *b, const char *text)
{
    if (b->n_notes < 4)
        snprintf(b->notes[b->n_notes++], sizeof(b->notes[0]), "%s", text);
    fprintf(stderr, "rkv bench: %s\n", text);
}

/* "4KiB", "1MiB", "512B": the size as figure names spell it. */
static void bench_size_name(uint32_t bytes, char *buf, size_t len)
{
    if (bytes % (1u << 20) == 0)
        snprintf(buf, len, "%uMiB", bytes >> 20);
    else if (bytes % 1024 == 0)
        snprintf(buf, len, "%uKiB", bytes >> 10);
    else
        snprintf(buf, len, "%uB", bytes);
}

/* ---- running other programs ---- */

static int bench_on_path(const char *prog)
{
    const char *path = getenv("PATH");
    char buf[4096];
    while (path && *path) {
        size_t n = strcspn(path, ":");
        snprintf(buf, sizeof(buf), "%.*s/%s", (int)n, path, prog);
        if (n && access(buf, X_OK) == 0)
            return 1;
        path += n + (path[n] == ':');
    }
    return 0;
}

static void bench_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Starts argv in the background, its output discarded (a server). */
static pid_t bench_spawn_quiet(char *const argv[])
{
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) {
            dup2(null, STDOUT_FILENO);
            dup2(null, STDERR_FILENO);
        }
        execvp(argv[0], argv);
        rkv_child_exit(127);
    }
    return pid;
}

/* Runs argv to the end with its stdout and stderr in out (NUL-terminated).
 * Returns its exit status, or -1 when it could not run. */
static int bench_capture(char *const argv[], char *out, size_t len)
{
    int fd[2];
    if (pipe(fd) < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], STDOUT_FILENO);
        dup2(fd[1], STDERR_FILENO);
        close(fd[0]);
        close(fd[1]);
        execvp(argv[0], argv);
        rkv_child_exit(127);
    }
    close(fd[1]);
    size_t got = 0;
    ssize_t r;
    char drain[4096];
    for (;;) {
        /* Beyond len, read on and drop: a writer blocked on a full pipe
         * would never exit. */
        int full = got == len - 1;
        r = full ? read(fd[0], drain, sizeof(drain)) : read(fd[0], out + got, len - 1 - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        if (!full)
            got += (size_t)r;
    }
    out[got] = 0;
    close(fd[0]);
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Ends a server that outlived its client (it serves one client, then exits). */
static void bench_reap(pid_t pid)
{
    for (int i = 0; pid > 0 && i < 50; i++) {
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return;
        bench_sleep_ms(100);
    }
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
}

/* A client/server pair: the server (argv with PORT) in the background, then
 * the client, retried while the server is not listening yet. The client's
 * output is in out. Returns 0 or -1. */
static int bench_pair(char *const srv[], char *const cli[], char *out, size_t len)
{
    pid_t pid = bench_spawn_quiet(srv);
    int rc = -1;
    bench_sleep_ms(300);
    for (int attempt = 0; pid > 0 && attempt < 20 && rc < 0; attempt++) {
        if (bench_capture(cli, out, len) == 0)
            rc = 0;
        else if (waitpid(pid, NULL, WNOHANG) == pid) /* the server is gone */
            return -1;
        else
            bench_sleep_ms(250 * (attempt < 4 ? 1 : 4));
    }
    bench_reap(pid);
    return rc;
}

/* ---- the limits ---- */

/* iperf3 -J's total goodput at the receiver (end.sum_received.
 * bits_per_second), in GB/s (0 if not found). */
static double bench_iperf3_parse(const char *text)
{
    json_t *doc = json_loads(text, 0, NULL);
    json_t *bps = json_object_get(json_object_get(json_object_get(doc, "end"), "sum_received"),
                                  "bits_per_second");
    double gbs = json_is_number(bps) ? json_number_value(bps) / 8e9 : 0;
    json_decref(doc);
    return gbs;
}

/* iperf3 over loopback with `streams` streams; large: 1 MiB writes and
 * zero copy (-l 1M -Z, sendfile), else its default writes (128 KiB), which
 * on a VM may be the slowest way to fill the same socket. GB/s, 0 if it
 * failed. */
static double bench_iperf3(const struct bench *b, int streams, int large)
{
    uint16_t port;
    if (rkv_launch_free_ports(1, &port, NULL) < 0)
        return 0;
    char p[16], n[16], t[16], *out = malloc(BENCH_OUT_BYTES);
    snprintf(p, sizeof(p), "%u", port);
    snprintf(n, sizeof(n), "%d", streams);
    snprintf(t, sizeof(t), "%d", b->iperf_s);
    char *srv[] = {"iperf3", "-s", "-1", "-p", p, NULL};
    char *cli[16] = {"iperf3", "-c", "127.0.0.1", "-p", p, "-P", n, "-t", t, "-J"};
    if (large) { /* the rest of cli is NULL */
        cli[10] = "-l";
        cli[11] = "1M";
        cli[12] = "-Z";
    }
    double gbs =
        out && bench_pair(srv, cli, out, BENCH_OUT_BYTES) == 0 ? bench_iperf3_parse(out) : 0;
    free(out);
    return gbs;
}

/* The raw TCP figures the limits are chosen from, per connection count
 * (1, then 2), best first when they tie; iperf3's are there only when it
 * is installed, the built-in test (harness/probe_tcp.h) always. */
#define BENCH_TCP_LIMIT "tcp.limit"
#define BENCH_TCP_LIMIT2 "tcp.limit2"
static const char *const bench_tcp_limits[2][3] = {
    {"iperf3.1stream.l1M.Z", "iperf3.1stream", "loopback.builtin.1stream"},
    {"iperf3.2stream.l1M.Z", "iperf3.2stream", "loopback.builtin.2stream"}};

static void bench_limits_tcp(struct bench *b)
{
    if (b->have_iperf3) {
        bench_add(b, bench_tcp_limits[0][0], "GB/s", bench_iperf3(b, 1, 1));
        bench_add(b, bench_tcp_limits[0][1], "GB/s", bench_iperf3(b, 1, 0));
        bench_add(b, bench_tcp_limits[1][0], "GB/s", bench_iperf3(b, 2, 1));
        bench_add(b, bench_tcp_limits[1][1], "GB/s", bench_iperf3(b, 2, 0));
    }
    bench_add(b, bench_tcp_limits[0][2], "GB/s", rkv_limit_tcp_gbps());
    bench_add(b, bench_tcp_limits[1][2], "GB/s", rkv_probe_tcp_gbps(2, 1u << 20));
    bench_add(b, "memcpy.1core.64MiB", "GB/s", rkv_limit_memcpy_gbps(64u << 20));
}

/* Once every run is done: each limit is the raw figure whose median is the
 * highest (a busy host only ever slows a raw test down, and a tool's
 * default can be the slow way: iperf3's default writes gave 1.9 GB/s where
 * 1 MiB writes gave 3.5-3.9 on one VM), and the ratios registered against
 * the placeholder name now name it. */
static void bench_choose_limit(struct bench *b)
{
    const char *placeholder[2] = {BENCH_TCP_LIMIT, BENCH_TCP_LIMIT2};
    const char **chosen[2] = {&b->limit, &b->limit2};
    for (int c = 0; c < 2; c++) {
        /* none measured: the built-in test's name (its ratios print nothing) */
        const char *best = bench_tcp_limits[c][2];
        double best_v = 0;
        for (int i = 0; i < 3; i++) {
            double v = bench_median(b, bench_tcp_limits[c][i]);
            if (v > best_v) {
                best_v = v;
                best = bench_tcp_limits[c][i];
            }
        }
        *chosen[c] = best;
        if (c == 0) {
            char note[320];
            snprintf(note, sizeof(note),
                     "the TCP limit is %s (%.3f GB/s), the best one-stream raw TCP figure of "
                     "this run (iperf3.1stream.l1M.Z: -l 1M -Z; iperf3.1stream: its default "
                     "writes; loopback.builtin.1stream: rkv's own test)",
                     best, best_v);
            bench_note(b, note);
        }
        for (int i = 0; i < b->n_ratio; i++)
            if (!strcmp(b->ratio[i].den, placeholder[c]))
                snprintf(b->ratio[i].den, BENCH_NAME_LEN, "%s", best);
    }
}

/* ---- perftest (verbs) ---- */

/* A sysfs file's first line, without its newline ("" if unreadable). */
static void bench_sysfs(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    buf[0] = 0;
    if (f && fgets(buf, (int)len, f))
        buf[strcspn(buf, "\n")] = 0;
    if (f)
        fclose(f);
}

/* The RDMA device, port and GID index that own e->host's address, the way
 * rkv's rdma_cm finds them: the IPv4-mapped GID, a RoCE v2 one first (rkv
 * runs v2 where the device has it; perftest would take whichever -x says).
 * RKV_VERBS_DEV (NAME or NAME:PORT) narrows the search. On InfiniBand,
 * whose GIDs hold no IP address, the named (or first) device's first active
 * port without a GID: perftest then goes by LID. 0, or -1. */
static int bench_find_end(struct bench_end *e)
{
    unsigned a[4];
    char want[64] = "", only[64] = "", path[512], got[64], type[32];
    if (sscanf(e->host, "%u.%u.%u.%u", &a[0], &a[1], &a[2], &a[3]) == 4)
        snprintf(want, sizeof(want), "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", a[0], a[1],
                 a[2], a[3]);
    const char *env = getenv("RKV_VERBS_DEV");
    int only_port = 0;
    if (env && *env) {
        snprintf(only, sizeof(only), "%s", env);
        char *colon = strchr(only, ':');
        if (colon) {
            *colon = 0;
            only_port = atoi(colon + 1);
        }
    }
    DIR *dir = opendir("/sys/class/infiniband");
    if (!dir)
        return -1;
    int best = 0; /* 2: a RoCE v2 GID, 1: another GID of the address, 0: none yet */
    struct bench_end ib = {.port = 0};
    for (struct dirent *de; (de = readdir(dir)) && best < 2;) {
        if (de->d_name[0] == '.' || (only[0] && strcmp(de->d_name, only)))
            continue;
        for (int port = 1; port <= 8 && best < 2; port++) {
            if (only_port && port != only_port)
                continue;
            snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%d/link_layer", de->d_name,
                     port);
            bench_sysfs(path, type, sizeof(type));
            if (!type[0])
                break;
            if (!strcmp(type, "InfiniBand") && !ib.port) {
                snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%d/state", de->d_name,
                         port);
                bench_sysfs(path, got, sizeof(got));
                if (strstr(got, "ACTIVE")) {
                    snprintf(ib.dev, sizeof(ib.dev), "%.63s", de->d_name);
                    ib.port = port;
                }
            }
            for (int i = 0; want[0] && i < 256 && best < 2; i++) {
                snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%d/gids/%d",
                         de->d_name, port, i);
                bench_sysfs(path, got, sizeof(got));
                if (!got[0])
                    break;
                if (strcmp(got, want))
                    continue;
                snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%d/gid_attrs/types/%d",
                         de->d_name, port, i);
                bench_sysfs(path, type, sizeof(type));
                int rank = strstr(type, "v2") ? 2 : 1;
                if (rank > best) {
                    best = rank;
                    snprintf(e->dev, sizeof(e->dev), "%.63s", de->d_name);
                    e->port = port;
                    e->gid = i;
                }
            }
        }
    }
    closedir(dir);
    if (best)
        return 0;
    if (!ib.port)
        return -1;
    snprintf(e->dev, sizeof(e->dev), "%s", ib.dev);
    e->port = ib.port;
    e->gid = -1;
    return 0;
}

/* The field'th column of perftest's last result row (a row that starts
 * with the message size). */
static double bench_perftest_parse(const char *out, int field)
{
    double v = 0;
    for (const char *line = out; line && *line; line = strchr(line, '\n'), line += !!line) {
        const char *p = line + strspn(line, " \t");
        if (*p < '0' || *p > '9')
            continue;
        int k = 0;
        char *end;
        double x = 0;
        for (; k <= field; k++) {
            x = strtod(p, &end);
            if (end == p)
                break;
            p = end;
        }
        if (k > field)
            v = x;
    }
    return v;
}

/* perftest's flags for end e: device, port and, when it has one, GID. */
static int bench_perftest_end(const struct bench_end *e, char **argv, char *port, char *gid)
{
    int k = 0;
    snprintf(port, 16, "%d", e->port);
    snprintf(gid, 16, "%d", e->gid);
    argv[k++] = "-d";
    argv[k++] = (char *)e->dev;
    argv[k++] = "-i";
    argv[k++] = port;
    if (e->gid >= 0) {
        argv[k++] = "-x";
        argv[k++] = gid;
    }
    return k;
}

/* ib_write_bw at `bytes` (GB/s; perftest's MB is 2^20 B) or, bytes == 0,
 * ib_write_lat's typical one-way latency (us), from end[0]'s device to
 * end[1]'s. 0 on failure. */
static double bench_perftest(const struct bench *b, uint32_t bytes)
{
    uint16_t port;
    if (rkv_launch_free_ports(1, &port, NULL) < 0)
        return 0;
    char p[16], s[16], n[16], ep[2][16], eg[2][16], *out = malloc(BENCH_OUT_BYTES);
    snprintf(p, sizeof(p), "%u", port);
    snprintf(s, sizeof(s), "%u", bytes);
    snprintf(n, sizeof(n), "%u", bytes >= (1u << 20) ? 40 : bytes >= 65536 ? 400 : 2000);
    char *srv[24], *cli[24];
    int ks = 0, kc = 0;
    srv[ks++] = cli[kc++] = bytes ? "ib_write_bw" : "ib_write_lat";
    srv[ks++] = cli[kc++] = "-F";
    ks += bench_perftest_end(&b->end[1], srv + ks, ep[1], eg[1]);
    kc += bench_perftest_end(&b->end[0], cli + kc, ep[0], eg[0]);
    if (bytes) {
        srv[ks++] = cli[kc++] = "-s";
        srv[ks++] = cli[kc++] = s;
        srv[ks++] = cli[kc++] = "-n";
        srv[ks++] = cli[kc++] = n;
    } else { /* over rdma_cm, as rkv connects; from the client's own address */
        srv[ks++] = cli[kc++] = "-R";
        srv[ks++] = cli[kc++] = "-n";
        srv[ks++] = cli[kc++] = "1000";
        cli[kc++] = "--source_ip";
        cli[kc++] = (char *)b->end[0].host;
    }
    srv[ks++] = cli[kc++] = "-p";
    srv[ks++] = cli[kc++] = p;
    cli[kc++] = (char *)b->end[1].host;
    srv[ks] = cli[kc] = NULL;
    double v = 0;
    if (out && bench_pair(srv, cli, out, BENCH_OUT_BYTES) == 0)
        v = bytes ? bench_perftest_parse(out, 3) * 1.048576 / 1000 : bench_perftest_parse(out, 4);
    free(out);
    return v;
}

/* ---- rkv clusters ---- */

/* The limit the throughput `what` (push, pull, pushpull) at `bytes` is
 * compared with: the TCP limit; or, shm, memcpy doing the same copies over
 * a shard-sized working set; or ib_write_bw of one row (verbs). */
static void bench_limit_name(const struct bench *b, uint32_t bytes, const char *what, char *buf,
                             size_t len)
{
    char sz[16];
    bench_size_name(bytes, sz, sizeof(sz));
    if (b->mode == BENCH_TCP)
        snprintf(buf, len, "%s", b->limit);
    else if (b->mode == BENCH_SHM)
        snprintf(buf, len, "memcpy.1core.shard.%s.%s", what, sz);
    else
        snprintf(buf, len, "ib_write_bw.%s", sz);
}

/* One demo cluster of the shape at `bytes` per row; records its figures as
 * MODE.WHAT.SIZE.SxW and, with `ratios`, their throughputs' ratios to the
 * limits (bench_limit_name); other_poll: in the busy-poll mode the run's
 * setting does not choose. Returns an RKV_EXIT_* code. */
static int bench_cluster(struct bench *b, const struct bench_shape *sh, uint32_t bytes, int ratios,
                         int other_poll)
{
    char m[16], spm[16], w[16], vb[16];
    snprintf(m, sizeof(m), "%u", sh->machines);
    snprintf(spm, sizeof(spm), "%u", sh->spm);
    snprintf(w, sizeof(w), "%u", sh->workers);
    snprintf(vb, sizeof(vb), "%u", bytes);
    char *argv[16 + BENCH_MAX_EXTRA] = {"--machines",
                                        m,
                                        "--servers-per-machine",
                                        spm,
                                        "--num-workers",
                                        w,
                                        "--value-bytes",
                                        vb,
                                        "--rows",
                                        "64",
                                        "--rounds",
                                        "1",
                                        "--backend",
                                        b->mode == BENCH_VERBS ? "verbs" : "tcp"};
    int argc = 14;
    if (b->mode == BENCH_VERBS) {
        argv[argc++] = "--host";
        argv[argc++] = (char *)b->host;
    }
    for (int i = 0; i < b->n_extra; i++)
        argv[argc++] = b->extra[i];
    int busy = other_poll ? !b->busy_poll : b->busy_poll;
    if (other_poll) { /* the last flag wins */
        argv[argc++] = "--busy-poll";
        argv[argc++] = busy ? "1" : "0";
    }
    struct rkv_launch_figures f;
    int code = rkv_launch_demo_measure(b->self, argc, argv, &f);
    if (code != RKV_EXIT_OK)
        return code;
    char sz[16], tag[32], name[BENCH_NAME_LEN], limit[BENCH_NAME_LEN];
    bench_size_name(bytes, sz, sizeof(sz));
    snprintf(tag, sizeof(tag), "%s.%ux%u", sz, sh->spm, sh->workers);
    if (b->mode != BENCH_SHM) { /* the latency again, named by its polling mode */
        const char *mode = busy ? "busy" : "block", *mn = b->mode_name;
        snprintf(name, sizeof(name), "%s.pull1.p50.%s.%s", mn, mode, tag);
        bench_add(b, name, "us", f.lat_p50_us);
        snprintf(name, sizeof(name), "%s.pull1.p99.%s.%s", mn, mode, tag);
        bench_add(b, name, "us", f.lat_p99_us);
        /* Where the time goes: the client's sleeps (wake-ups) per pull. */
        snprintf(name, sizeof(name), "%s.pull1.vcsw.%s.%s", mn, mode, tag);
        bench_add(b, name, "switches", f.lat_vcsw);
        snprintf(name, sizeof(name), "%s.pull1.ivcsw.%s.%s", mn, mode, tag);
        bench_add(b, name, "switches", f.lat_ivcsw);
        snprintf(name, sizeof(name), "%s.pull1.callvcsw.%s.%s", mn, mode, tag);
        bench_add(b, name, "switches", f.lat_call_vcsw);
    }
    if (other_poll) { /* its throughput too, as it was measured anyway */
        const double v[3] = {f.push_gbs, f.pull_gbs, f.pushpull_gbs};
        const char *what[3] = {"push", "pull", "pushpull"};
        for (int i = 0; i < 3; i++) {
            snprintf(name, sizeof(name), "%s.%s.%s.%s", b->mode_name, what[i],
                     busy ? "busy" : "block", tag);
            bench_add(b, name, "GB/s", v[i]);
            if (ratios) {
                bench_limit_name(b, bytes, what[i], limit, sizeof(limit));
                bench_ratio(b, name, limit);
            }
        }
        return RKV_EXIT_OK;
    }
    const struct {
        const char *what, *unit;
        double v;
    } out[] = {{"push", "GB/s", f.push_gbs},         {"pull", "GB/s", f.pull_gbs},
               {"pushpull", "GB/s", f.pushpull_gbs}, {"pushpipe", "GB/s", f.pushpipe_gbs},
               {"pull1.p50", "us", f.lat_p50_us},    {"pull1.p99", "us", f.lat_p99_us}};
    for (size_t i = 0; i < sizeof(out) / sizeof(out[0]); i++) {
        int throughput = strcmp(out[i].unit, "GB/s") == 0;
        snprintf(name, sizeof(name), "%s.%s.%s", b->mode_name, out[i].what, tag);
        bench_add(b, name, out[i].unit, out[i].v);
        if (throughput && ratios) { /* against the limit */
            /* co-located pushes apply in the call: pipelined is a push */
            const char *dir = strcmp(out[i].what, "pushpipe") == 0 ? "push" : out[i].what;
            bench_limit_name(b, bytes, dir, limit, sizeof(limit));
            bench_ratio(b, name, limit);
        }
        /* Two connections at once may use what one stream leaves idle. */
        if (throughput && b->mode == BENCH_TCP && sh->spm * sh->workers > 1)
            bench_ratio(b, name, BENCH_TCP_LIMIT2);
    }
    return RKV_EXIT_OK;
}

static const struct bench_shape bench_tcp_shapes[] = {{2, 1, 1}, {2, 1, 2}, {2, 2, 1}, {2, 2, 2}};
static const struct bench_shape bench_shm_shapes[] = {{1, 1, 1}, {1, 2, 2}};
static const struct bench_shape bench_verbs_shapes[] = {{2, 1, 1}};

/* shm: memcpy of the phase's copies on a shard-sized region, each kind. */
static void bench_limits_shard(struct bench *b, uint32_t bytes)
{
    static const char *const what[] = {"push", "pull", "pushpull"};
    char name[BENCH_NAME_LEN];
    for (int kind = 0; kind < 3; kind++) {
        bench_limit_name(b, bytes, what[kind], name, sizeof(name));
        bench_add(b, name, "GB/s", rkv_timed_limit_shard_gbps(bytes, kind));
    }
}

/* Per size: the limits of that size, then every shape. */
static int bench_size(struct bench *b, uint32_t bytes, const struct bench_shape *shapes,
                      size_t n_shapes)
{
    char sz[16], name[BENCH_NAME_LEN];
    bench_size_name(bytes, sz, sizeof(sz));
    /* One row-sized block copied back and forth, in cache: the old shm
     * limit, kept for comparison (and the reference in tcp and verbs). */
    snprintf(name, sizeof(name), "memcpy.1core.rowblock.%s", sz);
    bench_add(b, name, "GB/s", rkv_limit_memcpy_gbps(bytes));
    if (b->mode == BENCH_SHM)
        bench_limits_shard(b, bytes);
    if (b->mode == BENCH_VERBS) {
        snprintf(name, sizeof(name), "ib_write_bw.%s", sz);
        double gbs = bench_perftest(b, bytes);
        if (gbs <= 0) {
            fprintf(stderr, "rkv bench: ib_write_bw -s %u on %s failed\n", bytes, b->end[0].dev);
            return RKV_EXIT_STORE;
        }
        bench_add(b, name, "GB/s", gbs);
    }
    int code = RKV_EXIT_OK;
    for (size_t i = 0; i < n_shapes && code == RKV_EXIT_OK; i++)
        code = bench_cluster(b, &shapes[i], bytes, 1, 0);
    return code;
}

/* One repetition of everything; the limits first, then the clusters. */
static int bench_rep(struct bench *b)
{
    const struct bench_shape *shapes = b->mode == BENCH_TCP   ? bench_tcp_shapes
                                       : b->mode == BENCH_SHM ? bench_shm_shapes
                                                              : bench_verbs_shapes;
    size_t n = b->mode == BENCH_TCP   ? sizeof(bench_tcp_shapes) / sizeof(bench_tcp_shapes[0])
               : b->mode == BENCH_SHM ? sizeof(bench_shm_shapes) / sizeof(bench_shm_shapes[0])
                                      : 1;
    if (b->mode == BENCH_TCP)
        bench_limits_tcp(b);
    int code = RKV_EXIT_OK;
    for (int i = 0; i < b->n_sizes && code == RKV_EXIT_OK; i++)
        code = bench_size(b, b->sizes[i], shapes, n);
    if (code == RKV_EXIT_OK && b->mode == BENCH_SHM) /* the small co-located pull */
        code = bench_cluster(b, &bench_shm_shapes[0], 512, 0, 0);
    if (code == RKV_EXIT_OK && b->mode == BENCH_TCP) {
        /* The latency in the other polling mode too. */
        code = bench_cluster(b, &bench_tcp_shapes[0], b->sizes[0], 1, 1);
    }
    if (code == RKV_EXIT_OK && b->mode == BENCH_VERBS) {
        double us = bench_perftest(b, 0);
        if (us <= 0) {
            fprintf(stderr, "rkv bench: ib_write_lat on %s failed\n", b->end[0].dev);
            return RKV_EXIT_STORE;
        }
        bench_add(b, "ib_write_lat.rtt", "us", 2 * us);
        /* The latency in the other polling mode too: one more cluster. */
        char sz[16], name[BENCH_NAME_LEN];
        code = bench_cluster(b, &bench_verbs_shapes[0], b->sizes[0], 1, 1);
        bench_size_name(b->sizes[0], sz, sizeof(sz));
        snprintf(name, sizeof(name), "verbs.pull1.p50.%s.1x1", sz);
        bench_ratio(b, name, "ib_write_lat.rtt");
        for (int busy = 0; busy < 2; busy++) {
            snprintf(name, sizeof(name), "verbs.pull1.p50.%s.%s.1x1", busy ? "busy" : "block", sz);
            bench_ratio(b, name, "ib_write_lat.rtt");
        }
    }
    return code;
}

/* ---- output ---- */

static void bench_print_lines(const struct bench *b)
{
    for (int i = 0; i < b->n_notes; i++)
        printf("note %s\n", b->notes[i]);
    for (int i = 0; i < b->n_fig; i++)
        if (b->fig[i].n)
            printf("figure %s %.4g %s\n", b->fig[i].name, bench_median(b, b->fig[i].name),
                   b->fig[i].unit);
    for (int i = 0; i < b->n_ratio; i++) {
        double r = bench_ratio_value(b, &b->ratio[i]);
        if (r > 0)
            printf("ratio %s/%s %.3f\n", b->ratio[i].num, b->ratio[i].den, r);
    }
}

static void bench_table_row(const struct bench *b, const struct bench_shape *sh, uint32_t bytes)
{
    char sz[16], n[6][BENCH_NAME_LEN], lim[BENCH_NAME_LEN];
    bench_size_name(bytes, sz, sizeof(sz));
    const char *what[] = {"push", "pull", "pushpull", "pull1.p50", "pull1.p99", "pushpipe"};
    double v[6];
    for (int i = 0; i < 6; i++) {
        snprintf(n[i], sizeof(n[i]), "%s.%s.%s.%ux%u", b->mode_name, what[i], sz, sh->spm,
                 sh->workers);
        v[i] = bench_median(b, n[i]);
    }
    printf("| %s | %ux%u | %.3f | %.3f | %.3f | %.3f | %.1f | %.1f |", sz, sh->spm, sh->workers,
           v[0], v[5], v[1], v[2], v[3], v[4]);
    if (b->mode == BENCH_SHM) { /* a limit per direction, and the row block's */
        double l[2];
        for (int i = 0; i < 2; i++) {
            bench_limit_name(b, bytes, what[i], lim, sizeof(lim));
            l[i] = bench_median(b, lim);
        }
        snprintf(lim, sizeof(lim), "memcpy.1core.rowblock.%s", sz);
        printf(" %.3f | %.3f | %.2f | %.2f | %.3f |\n", l[0], l[1], l[0] > 0 ? v[0] / l[0] : 0,
               l[1] > 0 ? v[1] / l[1] : 0, bench_median(b, lim));
        return;
    }
    bench_limit_name(b, bytes, "push", lim, sizeof(lim));
    double l = bench_median(b, lim);
    printf(" %.3f %s | %.2f | %.2f | %.2f |\n", l, lim, l > 0 ? v[0] / l : 0, l > 0 ? v[5] / l : 0,
           l > 0 ? v[1] / l : 0);
}

/* The 1-row pull latency figures of one polling mode at size sz, 1x1. */
struct bench_lat {
    double p50, p99, call, vcsw, ivcsw;
};

static struct bench_lat bench_lat(const struct bench *b, const char *sz, int busy)
{
    static const char *const what[] = {"p50", "p99", "callvcsw", "vcsw", "ivcsw"};
    double v[5];
    char name[BENCH_NAME_LEN];
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof(name), "%s.pull1.%s.%s.%s.1x1", b->mode_name, what[i],
                 busy ? "busy" : "block", sz);
        v[i] = bench_median(b, name);
    }
    return (struct bench_lat){v[0], v[1], v[2], v[3], v[4]};
}

/* The 1-row pull latency in both polling modes against ib_write_lat, which
 * busy-polls both sides. */
static void bench_print_verbs_lat(const struct bench *b)
{
    double rtt = bench_median(b, "ib_write_lat.rtt");
    char sz[16];
    bench_size_name(b->sizes[0], sz, sizeof(sz));
    printf("\nib_write_lat round trip %.2f us; the table's latency is with busy-poll %d\n", rtt,
           b->busy_poll);
    for (int busy = 0; busy < 2; busy++) {
        struct bench_lat l = bench_lat(b, sz, busy);
        printf("1-row %s pull, busy-poll %d: p50 %.1f us (%.2fx the round trip), p99 %.1f us; "
               "per pull: %.2f sleeps of the calling thread, %.2f sleeps and %.2f preemptions "
               "of the client process\n",
               sz, busy, l.p50, rtt > 0 ? l.p50 / rtt : 0, l.p99, l.call, l.vcsw, l.ivcsw);
    }
}

/* The 1-row pull latency at 1x1 in both polling modes at the first size
 * (busy-poll spends a core per process). */
static void bench_print_tcp_lat(const struct bench *b)
{
    char sz[16];
    bench_size_name(b->sizes[0], sz, sizeof(sz));
    printf("\n");
    for (int busy = 0; busy < 2; busy++) {
        struct bench_lat l = bench_lat(b, sz, busy);
        printf("1-row %s pull, busy-poll %d: p50 %.1f us, p99 %.1f us; per pull: %.2f sleeps of "
               "the calling thread, %.2f of the client process\n",
               sz, busy, l.p50, l.p99, l.call, l.vcsw);
    }
}

/* Every raw TCP figure of the run, and which ones the ratios use. */
static void bench_print_tcp_limits(const struct bench *b)
{
    static const char *const streams[2] = {"one stream", "two streams"};
    printf("\nlimits:");
    for (int c = 0; c < 2; c++)
        printf(" %s: iperf3 -l 1M -Z %.3f GB/s, iperf3 default writes %.3f GB/s, built-in "
               "loopback %.3f GB/s;",
               streams[c], bench_median(b, bench_tcp_limits[c][0]),
               bench_median(b, bench_tcp_limits[c][1]), bench_median(b, bench_tcp_limits[c][2]));
    printf(" memcpy 1 core (64 MiB) %.3f GB/s\n", bench_median(b, "memcpy.1core.64MiB"));
    printf("the ratios use the best one-stream figure, %s (%.3f GB/s), and for two connections "
           "at once also the best two-stream one, %s (%.3f GB/s)",
           b->limit, bench_median(b, b->limit), b->limit2, bench_median(b, b->limit2));
    printf("\nonly figures measured in this run are compared: a peer that cannot be built here "
           "(ps-lite) is compared outside the project\n");
}

static void bench_print_table(const struct bench *b)
{
    const struct bench_shape *shapes = b->mode == BENCH_TCP   ? bench_tcp_shapes
                                       : b->mode == BENCH_SHM ? bench_shm_shapes
                                                              : bench_verbs_shapes;
    size_t n = b->mode == BENCH_TCP   ? sizeof(bench_tcp_shapes) / sizeof(bench_tcp_shapes[0])
               : b->mode == BENCH_SHM ? sizeof(bench_shm_shapes) / sizeof(bench_shm_shapes[0])
                                      : 1;
    printf("\nrkv bench %s: medians of %d runs; SxW = servers per machine x workers, rows on "
           "%s; limits measured in the same run\n",
           b->mode_name, b->reps, b->mode == BENCH_SHM ? "this machine" : "the other machine");
    if (b->mode == BENCH_SHM)
        printf("limits: one core's memcpy doing the timed phase's copies (the batch to or from "
               "rows drawn the same way from a shard-sized shared-memory region, "
               "memcpy.1core.shard.push|pull.SIZE); the ratios use them. Row block: memcpy of one "
               "row-sized block that stays in cache (memcpy.1core.rowblock.SIZE), the former "
               "limit, for comparison only\n");
    printf("\n| size | SxW | push GB/s | push pipelined GB/s | pull GB/s | push+pull GB/s | 1-row "
           "pull p50 us | p99 us |");
    if (b->mode == BENCH_SHM) {
        printf(" push limit GB/s | pull limit GB/s | push/limit | pull/limit | row block GB/s |\n");
        printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    } else {
        printf(" limit GB/s | push/limit | pipelined/limit | pull/limit |\n");
        printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    }
    for (int i = 0; i < b->n_sizes; i++)
        for (size_t k = 0; k < n; k++)
            bench_table_row(b, &shapes[k], b->sizes[i]);
    if (b->mode == BENCH_SHM)
        printf("\n512 B row, co-located pull: p50 %.2f us, p99 %.2f us\n",
               bench_median(b, "shm.pull1.p50.512B.1x1"),
               bench_median(b, "shm.pull1.p99.512B.1x1"));
    if (b->mode == BENCH_VERBS)
        bench_print_verbs_lat(b);
    if (b->mode == BENCH_TCP) {
        bench_print_tcp_lat(b);
        bench_print_tcp_limits(b);
    }
}

/* One JSON object on one line, written by jansson (a note or a name holding
 * a quote stays valid JSON). */
static void bench_print_json(const struct bench *b)
{
    json_t *notes = json_array(), *figs = json_object(), *ratios = json_object();
    for (int i = 0; i < b->n_notes; i++)
        json_array_append_new(notes, json_string(b->notes[i]));
    for (int i = 0; i < b->n_fig; i++) {
        if (!b->fig[i].n)
            continue;
        json_object_set_new(figs, b->fig[i].name,
                            json_pack("{s:f, s:s, s:i}", "value", bench_median(b, b->fig[i].name),
                                      "unit", b->fig[i].unit, "samples", b->fig[i].n));
    }
    for (int i = 0; i < b->n_ratio; i++) {
        double r = bench_ratio_value(b, &b->ratio[i]);
        char key[256];
        snprintf(key, sizeof(key), "%s/%s", b->ratio[i].num, b->ratio[i].den);
        if (r > 0)
            json_object_set_new(ratios, key, json_real(r));
    }
    json_t *doc = json_pack("{s:s, s:i, s:s, s:o, s:o, s:o}", "mode", b->mode_name, "reps", b->reps,
                            "limit", b->limit, "notes", notes, "figures", figs, "ratios", ratios);
    if (!doc || json_dumpf(doc, stdout, JSON_REAL_PRECISION(6)) < 0)
        fprintf(stderr, "rkv bench: cannot write the JSON (out of memory)\n");
    printf("\n");
    json_decref(doc);
}

/* ---- arguments ---- */

static void bench_usage(FILE *out)
{
    fprintf(
        out,
        "usage: rkv bench tcp|shm|verbs [--reps N] [--sizes \"B ...\"] [--json]\n"
        "                 [--iperf-seconds S] [settings]\n"
        "Measures rkv against this host's limits in the same run; each point is the\n"
        "median of N (default 5) clusters of `rkv demo`.\n"
        "  tcp    rows on the other machine over loopback TCP: push, pull, push+pull and\n"
        "         1-row pull latency (both busy-poll modes), 1 and 2 servers per\n"
        "         machine x 1 and 2 workers; with several workers, each pass starts\n"
        "         together and its aggregate is all bytes over the time from the\n"
        "         first start to the last end. Vs the best raw TCP figure of the run\n"
        "         (iperf3 -l 1M -Z, iperf3 default writes, rkv's own loopback test;\n"
        "         iperf3 is optional), which it names; two-connection shapes also vs\n"
        "         the best two-stream iperf3. A peer that cannot be built here\n"
        "         (ps-lite) is compared outside the project\n"
        "  shm    rows in this machine's shared-memory shard vs one core's memcpy doing\n"
        "         the same copies over the same working set: the caller's rows to (push)\n"
        "         and from (pull) row-sized blocks drawn alike from a shard-sized region\n"
        "         (memcpy.1core.shard.push|pull|pushpull.SIZE; the ratios and the table\n"
        "         use these); memcpy of one row-sized block that stays in cache is shown\n"
        "         too (memcpy.1core.rowblock.SIZE). And a 512 B row's pull latency\n"
        "  verbs  over the RDMA port that owns RKV_HOST's address (default 10.77.0.1;\n"
        "         RKV_VERBS_DEV=NAME[:PORT] narrows it, --port P and --gid-index G\n"
        "         override; RKV_HOST=A,B: perftest from A's device to B's, the clusters'\n"
        "         machines alternate over A and B) vs ib_write_bw / ib_write_lat (rdma_cm,\n"
        "         from A's address), on the GID rkv uses (RoCE v2 first; none on\n"
        "         InfiniBand: LIDs): ci/softroce rkv bench verbs;\n"
        "         one more cluster per run measures the smallest size with the other\n"
        "         busy-poll setting, so the 1-row pull latency is given in both modes\n"
        "  --sizes     value bytes, multiples of 4 (tcp, shm: \"4096 65536 1048576 16777216\";\n"
        "              verbs: \"4096 65536 1048576\")\n"
        "  --json      one JSON object instead of lines and a table\n"
        "Prints `figure NAME VALUE UNIT` and `ratio NAME/LIMIT VALUE` lines, then a\n"
        "Markdown table. Other flags are settings every cluster gets (rkv config --dump),\n"
        "checked before anything starts; the clusters' shape (machines, servers, workers,\n"
        "rows, rounds, value bytes, backend) is the bench's own.\n"
        "Exit 0 ok, 1 a value differed, 2 usage error, 3 store or tool error.\n"
        "Also: rkv bench durable, and rkv bench local (what a 1-row call served from\n"
        "this machine's shard costs; --help for each).\n");
}

static int bench_parse_sizes(struct bench *b, const char *list, char *err, size_t err_len)
{
    b->n_sizes = 0;
    while (*list) {
        char *end;
        unsigned long long v = strtoull(list, &end, 10);
        if (end == list || v < 4 || v % 4 || v > (64u << 20) || b->n_sizes == BENCH_MAX_SIZES)
            return rkv_errf(err, err_len, -1,
                            "--sizes: expected up to %d value sizes in bytes, multiples of 4 in "
                            "4..64 MiB, got \"%s\"",
                            BENCH_MAX_SIZES, list);
        b->sizes[b->n_sizes++] = (uint32_t)v;
        list = end + strspn(end, " ,");
    }
    return b->n_sizes ? 0 : rkv_errf(err, err_len, -1, "--sizes: expected at least one size");
}

/* An integer flag in lo..hi: (int)strtol took "4294967301" as 5. */
static int bench_int(const char *flag, const char *s, long lo, long hi, int *out, char *err,
                     size_t err_len)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi)
        return rkv_errf(err, err_len, -1, "%s: expected %ld..%ld, got \"%s\"", flag, lo, hi, s);
    *out = (int)v;
    return 0;
}

/* Says what is wrong in err (the usage follows it). */
static int bench_args(struct bench *b, int argc, char **argv, char *err, size_t err_len)
{
    static const char *names[] = {"tcp", "shm", "verbs"};
    int mode = -1;
    for (int i = 0; argc >= 1 && i < 3; i++)
        if (!strcmp(argv[0], names[i]))
            mode = i;
    if (mode < 0)
        return rkv_errf(err, err_len, -1, "expected a mode (tcp, shm or verbs)%s%s%s",
                        argc ? ", got \"" : "", argc ? argv[0] : "", argc ? "\"" : "");
    b->mode = (enum bench_mode)mode;
    b->mode_name = names[mode];
    b->reps = 5;
    b->iperf_s = 3;
    b->port_flag = b->gid_flag = -1;
    const char *sizes =
        b->mode == BENCH_VERBS ? "4096 65536 1048576" : "4096 65536 1048576 16777216";
    int rc = 0;
    for (int i = 1; i < argc && rc == 0; i++) {
        const char *a = argv[i];
        int has_value = i + 1 < argc, verbs = b->mode == BENCH_VERBS;
        if (!strcmp(a, "--reps") && has_value)
            rc = bench_int(a, argv[++i], 1, BENCH_MAX_REPS, &b->reps, err, err_len);
        else if (!strcmp(a, "--iperf-seconds") && has_value)
            rc = bench_int(a, argv[++i], 1, 60, &b->iperf_s, err, err_len);
        else if (!strcmp(a, "--sizes") && has_value)
            sizes = argv[++i];
        else if (!strcmp(a, "--json"))
            b->json = 1;
        else if (!strcmp(a, "--port") && has_value && verbs)
            rc = bench_int(a, argv[++i], 1, 255, &b->port_flag, err, err_len);
        else if (!strcmp(a, "--gid-index") && has_value && verbs)
            rc = bench_int(a, argv[++i], 0, 255, &b->gid_flag, err, err_len);
        else if (!strncmp(a, "--", 2) && b->n_extra + 2 <= BENCH_MAX_EXTRA) {
            b->extra[b->n_extra++] = argv[i]; /* a setting, and its value if it has one */
            if (!strchr(a, '=') && i + 1 < argc && strncmp(argv[i + 1], "--", 2))
                b->extra[b->n_extra++] = argv[++i];
        } else
            rc = rkv_errf(err, err_len, -1, "%s: %s", a,
                          !strncmp(a, "--", 2) ? "needs a value, or too many settings"
                                               : "unexpected argument");
    }
    return rc < 0 ? rc : bench_parse_sizes(b, sizes, err, err_len);
}

/* The settings flags, checked before anything starts as every cluster will
 * check them (an unknown one failed only in the first cluster, after the
 * limits were measured), and the busy-poll setting the clusters get (read
 * for verbs only: a tcp run with --busy-poll 1 measured busy polling twice
 * and named one of the two "block"). The shape of each cluster is the
 * bench's: a --num-workers given here won over it (the last flag wins), and
 * figures named 1x1 were measured on another shape. */
static int bench_check_settings(struct bench *b, char *err, size_t err_len)
{
    /* verbs takes its host from RKV_HOST (as the launcher gives it); tcp's
     * clusters are on loopback, where --host is only checked. */
    static const enum cmd_key shape[] = {CMD_MACHINES,    CMD_SERVERS_PER_MACHINE,
                                         CMD_NUM_SERVERS, CMD_NUM_WORKERS,
                                         CMD_CLUSTER,     CMD_VALUE_BYTES,
                                         CMD_ROWS,        CMD_ROUNDS,
                                         CMD_BACKEND,     CMD_HOST};
    size_t n_shape = sizeof(shape) / sizeof(shape[0]);
    assert(shape[n_shape - 1] == CMD_HOST);
    n_shape -= b->mode != BENCH_VERBS;
    struct cmd_settings *s = calloc(1, sizeof(*s));
    if (!s)
        return rkv_errf(err, err_len, -1, "out of memory");
    uint64_t v = 0;
    int rc = rkv_cmd_settings_load(s, b->n_extra, b->extra, err, err_len);
    int given = rc == 0 ? rkv_cmd_first_flag(s, shape, n_shape) : -1;
    if (given >= 0)
        rc = rkv_errf(err, err_len, -1, "%s%s: the bench sets it for each cluster it measures",
                      rkv_cmd_key_flag(shape[given]),
                      shape[given] == CMD_VALUE_BYTES ? " (--sizes gives them)"
                      : shape[given] == CMD_HOST      ? " (verbs: RKV_HOST)"
                                                      : "");
    /* As the first cluster gets them: its shape flags, then these. */
    char *argv[8 + BENCH_MAX_EXTRA] = {"--machines",
                                       "1",
                                       "--servers-per-machine",
                                       "1",
                                       "--num-workers",
                                       "1",
                                       "--backend",
                                       b->mode == BENCH_VERBS ? "verbs" : "tcp"};
    for (int i = 0; i < b->n_extra; i++)
        argv[8 + i] = b->extra[i];
    struct rkv_config cfg;
    if (rc == 0 && (rc = rkv_cmd_settings_load(s, 8 + b->n_extra, argv, err, err_len)) == 0 &&
        (rc = rkv_cmd_build_config(s, &cfg, err, err_len)) == 0) {
        free(cfg.machines);
        rc = rkv_cmd_get_u64(s, CMD_BUSY_POLL, &v, err, err_len); /* 0 or 1: rkv_cmd_build_config */
    }
    free(s);
    b->busy_poll = (int)v;
    return rc;
}

/* Which limit the throughput ratios use, and whether it can be measured. */
static int bench_prepare(struct bench *b)
{
    if (b->mode == BENCH_TCP) {
        b->have_iperf3 = bench_on_path("iperf3");
        b->limit = BENCH_TCP_LIMIT; /* bench_choose_limit, once the runs are done */
        b->limit2 = BENCH_TCP_LIMIT2;
        if (!b->have_iperf3)
            bench_note(b, "iperf3 is not installed (apt-get install iperf3): the TCP limits are "
                          "rkv's built-in loopback tests (loopback.builtin.1stream, "
                          "loopback.builtin.2stream)");
        return 0;
    }
    b->limit = b->mode == BENCH_SHM ? "memcpy.1core.shard.KIND.SIZE" : "ib_write_bw.SIZE";
    if (b->mode == BENCH_SHM)
        return 0;
    b->host = getenv("RKV_HOST") && *getenv("RKV_HOST") ? getenv("RKV_HOST") : "10.77.0.1";
    char err[160];
    for (int i = 0; i < 2; i++) {
        struct bench_end *e = &b->end[i];
        if (rkv_cmd_host_pick(b->host, i, e->host, sizeof(e->host), err, sizeof(err)) < 0) {
            fprintf(stderr, "rkv bench verbs: RKV_HOST: %s\n", err);
            return -1;
        }
        if (bench_find_end(e) < 0) {
            fprintf(stderr,
                    "rkv bench verbs: no RDMA port owns %s%s%s (a GID with its address, or an "
                    "active InfiniBand port); run it as `ci/softroce rkv bench verbs`\n",
                    e->host, getenv("RKV_VERBS_DEV") ? " on RKV_VERBS_DEV " : "",
                    getenv("RKV_VERBS_DEV") ? getenv("RKV_VERBS_DEV") : "");
            return -1;
        }
        if (b->port_flag > 0)
            e->port = b->port_flag;
        if (b->gid_flag >= 0)
            e->gid = b->gid_flag;
        fprintf(stderr, "rkv bench verbs: %s is %s port %d, GID index %d\n", e->host, e->dev,
                e->port, e->gid);
    }
    if (!bench_on_path("ib_write_bw") || !bench_on_path("ib_write_lat")) {
        fprintf(stderr, "rkv bench verbs: needs perftest (ib_write_bw, ib_write_lat)\n");
        return -1;
    }
    if (strcmp(b->end[0].dev, b->end[1].dev))
        bench_note(b, "two devices: perftest from the first host's to the second's; the "
                      "clusters' machines alternate over the hosts");
    if (!strncmp(b->end[0].dev, "rxe", 3))
        bench_note(b, "soft-RoCE is an emulator: only the ratios mean something");
    return 0;
}

int cmd_bench(int argc, char **argv, const char *self)
{
    if (argc > 0 && !strcmp(argv[0], "durable"))
        return rkv_bench_durable(argc - 1, argv + 1);
    if (argc > 0 && !strcmp(argv[0], "local"))
        return rkv_bench_local(argc - 1, argv + 1);
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            bench_usage(stdout);
            return RKV_EXIT_OK;
        }
    }
    struct bench *b = calloc(1, sizeof(*b));
    if (!b)
        return RKV_EXIT_STORE;
    int code = RKV_EXIT_USAGE;
    b->self = self;
    char err[512] = "";
    if (bench_args(b, argc, argv, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv bench: %s\n", err);
        bench_usage(stderr);
        goto out;
    }
    if (bench_check_settings(b, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv bench: %s\n", err);
        goto out;
    }
    if (bench_prepare(b) < 0) {
        code = RKV_EXIT_STORE;
        goto out;
    }
    code = RKV_EXIT_OK;
    for (int r = 0; r < b->reps && code == RKV_EXIT_OK; r++) {
        fprintf(stderr, "rkv bench %s: repetition %d of %d\n", b->mode_name, r + 1, b->reps);
        code = bench_rep(b);
    }
    if (code != RKV_EXIT_OK) {
        fprintf(stderr, "rkv bench %s: a cluster failed (exit %d); no figures printed\n",
                b->mode_name, code);
        goto out;
    }
    if (b->mode == BENCH_TCP)
        bench_choose_limit(b);
    if (b->json) {
        bench_print_json(b);
    } else {
        bench_print_lines(b);
        bench_print_table(b);
    }
out:
    free(b);
    return code;
}
