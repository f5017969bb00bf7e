/* `rkv bench durable`: what durable mode costs. In one run, on this host:
 * the push rate of a cluster (2 machines, 1 server each, W workers on
 * machine 0 pushing rows of machine 1 over loopback TCP) with and without
 * durable mode, for 1 and 8 workers, 4 KiB and 1 MiB rows and a small and a
 * large shard; the raw fdatasync rate of the directory's disk (the limit of
 * any group commit); and the time a server killed (-9) with its machine's
 * memory takes to come back (snapshot + log replay). Figures are medians
 * of nothing: one measurement each, on a host others load too. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness/child_exit.h"
#include "harness/bench_durable.h"
#include "harness/launch.h"
#include "port/port_file.h"
#include "rkv.h"
#include "store/store_int.h"
#include "store/wal.h"
#include "util/util.h"

#define BD_MAX_WORKERS 8u

struct bd_opts {
    const char *dir;      /* where the durable directories go */
    uint64_t small_bytes; /* shard sizes (machine 1's part of the tensor) */
    uint64_t large_bytes;
    double seconds; /* of pushing, per measurement */
    uint16_t base_port;
    /* --only: the cases whose name holds it (e.g. 1M.8w; "recovery" is
     * the recovery's) */
    const char *only;
    /* --prewrite-mib: durable_log_prewrite; UINT64_MAX (the default): as
     * large as a log grows between checkpoints, and a margin. */
    uint64_t prewrite;
};

struct bd_run {
    struct rkv_config cfg;
    struct rkv_machine machines[2];
    struct rkv_tensor_desc desc;
    uint32_t row_bytes;
    double seconds;
    atomic_uint_fast64_t pushes;
    /* The longest push of the timed phase after its first second, any
     * worker's: what a checkpoint's copy (or a stalled group commit) holds
     * a push up. */
    atomic_uint_fast64_t max_push_ns;
    double cpu_s; /* the process's CPU time (user + system) while worker 0 pushed */
    atomic_int failed;
    char err[256];
};

/* A log's size when its checkpoint is asked (wal.h), and 64 MiB more for
 * what is pushed while the snapshot is written. */
static uint64_t bd_prewrite(const struct bd_opts *o, uint64_t shard_bytes)
{
    if (o->prewrite != UINT64_MAX)
        return o->prewrite;
    uint64_t at = RKV_WAL_CHECKPOINT_SHARDS * shard_bytes;
    at = at > RKV_WAL_CHECKPOINT_BYTES ? at : RKV_WAL_CHECKPOINT_BYTES;
    return at + (64ull << 20);
}

static void bd_config(struct bd_run *r, const struct bd_opts *o, uint32_t workers,
                      uint32_t row_bytes, uint64_t shard_bytes, const char *durable_dir)
{
    memset(r, 0, sizeof(*r));
    for (int m = 0; m < 2; m++) {
        snprintf(r->machines[m].host, sizeof(r->machines[m].host), "127.0.0.1");
        r->machines[m].base_port = (uint16_t)(o->base_port + m);
        r->machines[m].servers = 1;
    }
    rkv_config_defaults(&r->cfg);
    r->cfg.n_machines = 2;
    r->cfg.machines = r->machines;
    r->cfg.n_workers = workers;
    r->cfg.log_level = 0;
    /* Setup writes the large shard's logs ahead (GiBs of zeros, into new
     * blocks: slow on this kind of disk) while the other workers wait at
     * the barrier. */
    r->cfg.timeout_ms = 600000;
    r->cfg.max_slot_bytes = 4ull << 20;
    snprintf(r->cfg.shm_prefix, sizeof(r->cfg.shm_prefix), "rkvbd-%d", (int)getpid());
    snprintf(r->cfg.durable_dir, sizeof(r->cfg.durable_dir), "%s", durable_dir ? durable_dir : "");
    r->cfg.durable_log_prewrite = bd_prewrite(o, shard_bytes);
    r->row_bytes = row_bytes;
    uint64_t per_machine = shard_bytes / row_bytes ? shard_bytes / row_bytes : 1;
    r->desc = (struct rkv_tensor_desc){.name = "emb",
                                       .dtype = RKV_F32,
                                       .rows = 2 * per_machine,
                                       .row_len = row_bytes / 4,
                                       .policy = RKV_PART_RANGE};
    r->seconds = o->seconds;
}

static void *bd_server_main(void *arg)
{
    rkv_server_run(arg);
    return NULL;
}

static double bd_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

struct bd_worker {
    struct bd_run *r;
    struct rkv_client *cli;
};

/* Every worker sums one row at a time into machine 1's half, each its
 * own stride of rows. */
static void *bd_worker_main(void *arg)
{
    struct bd_worker *w = arg;
    struct bd_run *r = w->r;
    if (rkv_client_create(&r->cfg, &w->cli, r->err, sizeof(r->err)) < 0) {
        atomic_store(&r->failed, 1);
        return NULL;
    }
    uint32_t id = rkv_client_id(w->cli);
    float *row = calloc(1, r->row_bytes);
    int rc = row ? 0 : -RKV_ENOMEM;
    if (rc == 0 && id == 0)
        rc = rkv_client_init_data(w->cli, &r->desc);
    if (rc == 0)
        rc = rkv_client_barrier(w->cli);
    uint64_t half = r->desc.rows / 2, n = 0;
    double end = rkv_timed_now_s() + r->seconds, cpu0 = bd_cpu_s();
    uint64_t max_ns = 0, max_all_ns = 0;
    /* Not the first pushes: their faults on fresh pages of the shard and
     * the connections' start (~0.5 s at a 1 GiB shard, plain or durable)
     * would hide any stall. */
    double warm = rkv_timed_now_s() + (r->seconds / 4 < 1.0 ? r->seconds / 4 : 1.0);
    for (double t0 = rkv_timed_now_s(), t1; rc == 0 && t0 < end; t0 = t1) {
        uint64_t gid = half + (id + n * r->cfg.n_workers) % half;
        rc = rkv_client_push(w->cli, "emb", &gid, 1, row, RKV_OP_SUM, 0);
        n++;
        t1 = rkv_timed_now_s();
        uint64_t took = (uint64_t)((t1 - t0) * 1e9);
        if (t0 >= warm && took > max_ns)
            max_ns = took;
        max_all_ns = took > max_all_ns ? took : max_all_ns;
    }
    /* No push began after the warm-up (a slow host, ASan: 1 MiB durable
     * pushes of 8 workers outlasting a 0.2 s run): the slowest of all,
     * not 0.0 ms. */
    if (!max_ns)
        max_ns = max_all_ns;
    for (uint64_t cur = atomic_load(&r->max_push_ns);
         cur < max_ns && !atomic_compare_exchange_weak(&r->max_push_ns, &cur, max_ns);)
        ;
    if (id == 0) /* the timed phase only: not the setup's checkpoint */
        r->cpu_s = bd_cpu_s() - cpu0;
    atomic_fetch_add(&r->pushes, n);
    if (rc < 0) {
        snprintf(r->err, sizeof(r->err), "worker %u: %s", id, rkv_client_errmsg(w->cli));
        atomic_store(&r->failed, 1);
    }
    rkv_client_barrier(w->cli);
    free(row);
    return NULL;
}

/* One cluster: pushes per second, or -1. */
static double bd_push_rate(struct bd_run *r)
{
    struct rkv_server *srv[2] = {NULL, NULL};
    pthread_t st[2];
    int started = 0;
    double rate = -1;
    for (uint32_t m = 0; m < 2; m++) {
        struct rkv_config c = r->cfg;
        c.machine_id = m;
        if (m == 0) /* takes no pushes: its log stays empty, no need to write it ahead */
            c.durable_log_prewrite = 0;
        if (rkv_server_create(&c, 0, &srv[m], r->err, sizeof(r->err)) < 0)
            goto stop;
        pthread_create(&st[m], NULL, bd_server_main, srv[m]);
        started++;
    }
    struct bd_worker w[BD_MAX_WORKERS];
    pthread_t wt[BD_MAX_WORKERS];
    for (uint32_t i = 0; i < r->cfg.n_workers; i++) {
        w[i] = (struct bd_worker){.r = r};
        pthread_create(&wt[i], NULL, bd_worker_main, &w[i]);
    }
    for (uint32_t i = 0; i < r->cfg.n_workers; i++)
        pthread_join(wt[i], NULL);
    /* Each worker pushed for r->seconds after the barrier (the setup, with
     * its INIT checkpoint, is not in the rate). */
    if (!atomic_load(&r->failed))
        rate = (double)atomic_load(&r->pushes) / r->seconds;
    struct rkv_client *any = NULL;
    for (uint32_t i = 0; i < r->cfg.n_workers; i++)
        if (w[i].cli && !any)
            any = w[i].cli;
    if (any)
        rkv_client_shutdown_servers(any);
    for (uint32_t i = 0; i < r->cfg.n_workers; i++)
        rkv_client_destroy(w[i].cli);
stop:
    for (int m = 0; m < started; m++)
        pthread_join(st[m], NULL);
    for (int m = 0; m < 2; m++)
        rkv_server_destroy(srv[m]);
    return rate;
}

/* `block` bytes written and fdatasync'ed at the end of a file, as fast as
 * the disk allows, for about a second: 4 KiB gives what one group commit at
 * a time can reach, 8 MiB the disk's durable write bandwidth (the limit of
 * large rows). Blocks per second. */
static double bd_fdatasync_rate(const char *dir, size_t block)
{
    char path[1024];
    snprintf(path, sizeof(path), "%.900s/rkv-bench-fdatasync", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    char *buf = calloc(1, block);
    if (fd < 0 || !buf) {
        if (fd >= 0)
            close(fd);
        free(buf);
        return -1;
    }
    uint64_t n = 0;
    double t0 = rkv_timed_now_s(), t;
    do {
        if (write(fd, buf, block) != (ssize_t)block || fdatasync(fd) != 0)
            break;
        n++;
    } while ((t = rkv_timed_now_s()) - t0 < 1.0);
    close(fd);
    unlink(path);
    free(buf);
    return (double)n / (rkv_timed_now_s() - t0);
}

/* The disk's durable streaming rate, the limit of large rows: 1 MiB
 * writes handed to the disk at once (rkv_file_writeback, as the log
 * does), an fdatasync every 64 MiB, for about a second. GB/s. Appending
 * (overwrite 0): each fdatasync also journals the file's new size and
 * extents, as a log growing into new blocks does; overwriting: into a file
 * written with zeros and synced first (not timed), as a reused or
 * prewritten log is. For `seconds` (at most 1). */
static double bd_disk_stream_gbs(const char *dir, int overwrite, double seconds)
{
    char path[1024];
    snprintf(path, sizeof(path), "%.900s/rkv-bench-stream", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    size_t block = 1u << 20;
    char *buf = calloc(1, block);
    uint64_t n = 0;
    /* Ahead: about as much as the fastest writes this disk showed (1.1
     * GB/s) take in that time; the rate is over the time taken. */
    seconds = seconds < 1.0 ? seconds : 1.0;
    uint64_t ahead = overwrite ? (uint64_t)(1024 * seconds) + 1 : 0;
    for (uint64_t i = 0; fd >= 0 && buf && i < ahead; i++)
        if (write(fd, buf, block) != (ssize_t)block)
            ahead = 0;
    if (fd >= 0 && (fdatasync(fd) != 0 || lseek(fd, 0, SEEK_SET) != 0)) {
        close(fd);
        fd = -1;
    }
    double t0 = rkv_timed_now_s();
    while (fd >= 0 && buf && rkv_timed_now_s() - t0 < seconds) {
        if ((overwrite && n >= ahead) || write(fd, buf, block) != (ssize_t)block)
            break;
        rkv_file_writeback(fd, n * block, block);
        if (++n % 64 == 0 && fdatasync(fd) != 0)
            break;
    }
    int ok = fd >= 0 && buf && fdatasync(fd) == 0;
    double gbs = ok ? (double)n * block / 1e9 / (rkv_timed_now_s() - t0) : -1;
    if (fd >= 0)
        close(fd);
    unlink(path);
    free(buf);
    return gbs;
}

static void bd_unlink_segment(void *user, const char *name)
{
    (void)user;
    shm_unlink(name);
}

/* A server of machine 1 in a child process takes pushes (its log grows to
 * about log_bytes), is killed with its memory, and is created again here:
 * how long that creation (snapshot + replay) takes, or -1. */
static double bd_recovery_ms(const struct bd_opts *o, const char *dir, uint64_t shard_bytes,
                             uint64_t *log_bytes_p)
{
    struct bd_run *r = calloc(1, sizeof(*r));
    if (!r)
        return -1;
    bd_config(r, o, 1, 1u << 20, shard_bytes, dir);
    r->cfg.retry_ms = 20000; /* the client's shutdown finds the new server */
    double ms = -1;
    pid_t s1 = fork(); /* before any thread of this process */
    if (s1 == 0) {
        struct rkv_config c = r->cfg;
        c.machine_id = 1;
        struct rkv_server *srv;
        char err[256];
        if (rkv_server_create(&c, 0, &srv, err, sizeof(err)) < 0)
            rkv_child_exit(3);
        rkv_server_run(srv);
        rkv_child_exit(0);
    }
    struct rkv_config c0 = r->cfg;
    struct rkv_server *s0 = NULL;
    pthread_t t0;
    if (s1 < 0 || rkv_server_create(&c0, 0, &s0, r->err, sizeof(r->err)) < 0)
        goto out;
    pthread_create(&t0, NULL, bd_server_main, s0);
    struct rkv_client *cli = NULL;
    float *row = calloc(1, 1u << 20);
    uint64_t pushed = 0;
    if (row && rkv_client_create(&r->cfg, &cli, r->err, sizeof(r->err)) == 0 &&
        rkv_client_init_data(cli, &r->desc) == 0) {
        uint64_t half = r->desc.rows / 2;
        /* Stays below the checkpoint size, or the log would be let go. */
        uint64_t n = (*log_bytes_p >> 20) > 2 ? (*log_bytes_p >> 20) - 2 : 1;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t gid = half + i % half;
            if (rkv_client_push(cli, "emb", &gid, 1, row, RKV_OP_SUM, 0) < 0)
                break;
            pushed++;
        }
    }
    kill(s1, SIGKILL);
    waitpid(s1, NULL, 0);
    rkv_mach_each_segment(r->cfg.shm_prefix, 1, 1, bd_unlink_segment, NULL);
    /* What the log holds (its file may be larger: written ahead). */
    *log_bytes_p = RKV_WAL_HDR_BYTES + pushed * rkv_wal_record_bytes(1, 1u << 20);
    struct rkv_config c1 = r->cfg;
    c1.machine_id = 1;
    struct rkv_server *s1b;
    double ta = rkv_timed_now_s();
    if (rkv_server_create(&c1, 0, &s1b, r->err, sizeof(r->err)) == 0) {
        ms = (rkv_timed_now_s() - ta) * 1e3;
        pthread_t t1;
        pthread_create(&t1, NULL, bd_server_main, s1b);
        if (cli)
            rkv_client_shutdown_servers(cli);
        pthread_join(t1, NULL);
        rkv_server_destroy(s1b);
    } else {
        /* Server 0 runs on, and only a client's shutdown stops it: the
         * process exits with the error (it is the last measurement). */
        fprintf(stderr, "rkv bench durable: recovery failed: %s\n", r->err);
        return -1;
    }
    rkv_client_destroy(cli);
    free(row);
    pthread_join(t0, NULL);
    rkv_server_destroy(s0);
out:
    if (s1 > 0)
        waitpid(s1, NULL, WNOHANG);
    free(r);
    return ms;
}

static void bd_size(char *buf, size_t len, uint64_t bytes)
{
    if (bytes >= (1ull << 30) && bytes % (1ull << 30) == 0)
        snprintf(buf, len, "%lluG", (unsigned long long)(bytes >> 30));
    else if (bytes >= (1ull << 20))
        snprintf(buf, len, "%lluM", (unsigned long long)(bytes >> 20));
    else
        snprintf(buf, len, "%lluK", (unsigned long long)(bytes >> 10));
}

/* A whole number of MiB in lo..hi, as bytes. */
static int bd_mib(const char *flag, const char *v, uint64_t lo, uint64_t hi, uint64_t *bytes,
                  char *err, size_t err_len)
{
    uint64_t x = 0;
    if (rkv_parse_u64(v, &x) < 0 || x < lo || x > hi)
        return rkv_errf(err, err_len, -1, "%s: expected %llu..%llu MiB, got \"%s\"", flag,
                        (unsigned long long)lo, (unsigned long long)hi, v);
    *bytes = x << 20;
    return 0;
}

/* 1 when the flags ask for help. A wrong flag was answered with the usage
 * alone, and --help with exit 2; "--large-mib 99999999999999" wrapped
 * around when shifted to bytes, and "-1" was 2^64 - 1 MiB. */
static int bd_args(struct bd_opts *o, int argc, char **argv, char *err, size_t err_len)
{
    *o = (struct bd_opts){.dir = "/tmp",
                          .small_bytes = 1ull << 20,
                          .large_bytes = 256ull << 20,
                          .seconds = 2.0,
                          .prewrite = UINT64_MAX,
                          .base_port = (uint16_t)(24000 + getpid() % 2000 * 2)};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        int rc = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            return 1;
        if (!v && (!strcmp(a, "--dir") || !strcmp(a, "--large-mib") || !strcmp(a, "--seconds") ||
                   !strcmp(a, "--only") || !strcmp(a, "--prewrite-mib")))
            return rkv_errf(err, err_len, -1, "%s needs a value", a);
        if (!strcmp(a, "--dir")) {
            o->dir = argv[++i];
        } else if (!strcmp(a, "--large-mib")) { /* a log holds less than 1 TiB (wal.h) */
            rc = bd_mib(a, argv[++i], 2, (1u << 20) - 1, &o->large_bytes, err, err_len);
        } else if (!strcmp(a, "--seconds")) {
            o->seconds = strtod(argv[++i], &end);
            if (*end || !*argv[i] || !(o->seconds > 0 && o->seconds <= 60))
                rc = rkv_errf(err, err_len, -1, "--seconds: expected (0, 60], got \"%s\"", argv[i]);
        } else if (!strcmp(a, "--only")) {
            o->only = argv[++i];
        } else if (!strcmp(a, "--prewrite-mib")) {
            rc = bd_mib(a, argv[++i], 0, (1u << 20) - 1, &o->prewrite, err, err_len);
        } else {
            rc = rkv_errf(err, err_len, -1, "unknown argument \"%s\"", a);
        }
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Whether --only names a case: one that named none ran nothing and
 * exited 0. */
static int bd_only_matches(const struct bd_opts *o)
{
    static const uint32_t workers[] = {1, 8}, rows[] = {4096, 1u << 20};
    const uint64_t shards[] = {o->small_bytes, o->large_bytes};
    for (int s = 0; s < 2; s++)
        for (int rb = 0; rb < 2; rb++)
            for (int wk = 0; wk < 2; wk++) {
                char rs[16], ss[16], name[96];
                bd_size(rs, sizeof(rs), rows[rb]);
                bd_size(ss, sizeof(ss), shards[s]);
                snprintf(name, sizeof(name), "push.%s.%uw.shard%s", rs, workers[wk], ss);
                if (strstr(name, o->only))
                    return 1;
            }
    return strstr("recovery", o->only) != NULL;
}

static void bd_usage(FILE *out)
{
    fprintf(out, "usage: rkv bench durable [--dir DIR] [--large-mib N] [--seconds S]\n"
                 "                         [--only CASE] [--prewrite-mib N]\n"
                 "  push rate with and without durable mode (1 and 8 workers, 4 KiB and\n"
                 "  1 MiB rows, 1 MiB and N MiB shards; default 256, the issue's 1024),\n"
                 "  the large shard's durable rate over the small one's, the fdatasync\n"
                 "  rate of DIR's disk and the recovery time of a killed server (an N MiB\n"
                 "  shard, about N MiB of log); --only runs the cases whose name holds\n"
                 "  CASE (push.1M.8w, shard1G, recovery); logs are written with zeros\n"
                 "  ahead (durable-log-prewrite) as far as they grow between checkpoints,\n"
                 "  or N MiB (0: they grow by appending)\n");
}

int rkv_bench_durable(int argc, char **argv)
{
    struct bd_opts o;
    char err[256];
    int args = bd_args(&o, argc, argv, err, sizeof(err));
    if (args != 0) {
        if (args < 0)
            fprintf(stderr, "rkv bench durable: %s\n", err);
        bd_usage(args < 0 ? stderr : stdout);
        return args < 0 ? RKV_EXIT_USAGE : RKV_EXIT_OK;
    }
    if (o.only && !bd_only_matches(&o)) {
        fprintf(stderr,
                "rkv bench durable: --only \"%s\": no case's name holds it (push.4K.1w.shard1M, "
                "push.1M.8w..., recovery)\n",
                o.only);
        return RKV_EXIT_USAGE;
    }
    char tmpl[512];
    snprintf(tmpl, sizeof(tmpl), "%s/rkv-bench-durable-XXXXXX", o.dir);
    if (!mkdtemp(tmpl)) {
        fprintf(stderr, "rkv bench durable: cannot make a directory in %s: %s\n", o.dir,
                strerror(errno));
        return RKV_EXIT_USAGE;
    }
    double sync_rate = bd_fdatasync_rate(tmpl, 4096);
    double disk_gbs = bd_fdatasync_rate(tmpl, 8u << 20) * (8u << 20) / 1e9;
    printf("figure fdatasync.4K %.1f /s\n", sync_rate);
    printf("figure fdatasync.8M %.4f GB/s\n", disk_gbs);
    double stream_gbs = bd_disk_stream_gbs(tmpl, 0, o.seconds);
    printf("figure disk.stream %.4f GB/s\n", stream_gbs);
    double over_gbs = bd_disk_stream_gbs(tmpl, 1, o.seconds);
    printf("figure disk.overwrite %.4f GB/s\n", over_gbs);
    static const uint32_t workers[] = {1, 8}, rows[] = {4096, 1u << 20};
    uint64_t shards[] = {o.small_bytes, o.large_bytes};
    struct bd_run *r = calloc(1, sizeof(*r));
    int code = r ? RKV_EXIT_OK : RKV_EXIT_STORE;
    double durable_rate[2][2][2] = {{{-1, -1}, {-1, -1}}, {{-1, -1}, {-1, -1}}}; /* [s][rb][wk] */
    for (int s = 0; s < 2 && code == RKV_EXIT_OK; s++) {
        for (int rb = 0; rb < 2 && code == RKV_EXIT_OK; rb++) {
            for (int wk = 0; wk < 2 && code == RKV_EXIT_OK; wk++) {
                double rate[2], cpu_us[2], max_ms[2];
                char rs[16], ss[16], name[96];
                bd_size(rs, sizeof(rs), rows[rb]);
                bd_size(ss, sizeof(ss), shards[s]);
                snprintf(name, sizeof(name), "%s.%s.%uw.shard%s", "push", rs, workers[wk], ss);
                if (o.only && !strstr(name, o.only))
                    continue;
                for (int d = 0; d < 2 && code == RKV_EXIT_OK; d++) {
                    char sub[600];
                    snprintf(sub, sizeof(sub), "%s/run", tmpl);
                    rkv_file_remove_dir(sub);
                    if (d && mkdir(sub, 0755) != 0)
                        code = RKV_EXIT_STORE;
                    bd_config(r, &o, workers[wk], rows[rb], shards[s], d ? sub : NULL);
                    fprintf(stderr,
                            "rkv bench durable: %s, %u workers, %u-byte rows, %llu-byte shard\n",
                            d ? "durable" : "plain", workers[wk], rows[rb],
                            (unsigned long long)shards[s]);
                    rate[d] = bd_push_rate(r);
                    /* CPU per push (the whole cluster's, while pushing):
                     * less at the mercy of the host's load than a rate. */
                    cpu_us[d] = r->cpu_s * 1e6 / (rate[d] * r->seconds);
                    max_ms[d] = (double)atomic_load(&r->max_push_ns) / 1e6;
                    if (rate[d] < 0) {
                        fprintf(stderr, "rkv bench durable: %s\n", r->err);
                        code = RKV_EXIT_STORE;
                    }
                    rkv_file_remove_dir(sub);
                }
                if (code != RKV_EXIT_OK)
                    break;
                for (int d = 0; d < 2; d++)
                    printf("figure %s.%s %.1f push/s\nfigure %s.%s.bw %.4f GB/s\nfigure "
                           "%s.%s.cpu %.1f us/push\n",
                           d ? "durable" : "plain", name, rate[d], d ? "durable" : "plain", name,
                           rate[d] * rows[rb] / 1e9, d ? "durable" : "plain", name, cpu_us[d]);
                for (int d = 0; d < 2; d++) /* the longest push: a checkpoint's stall */
                    printf("figure %s.%s.max %.1f ms\n", d ? "durable" : "plain", name, max_ms[d]);
                durable_rate[s][rb][wk] = rate[1];
                printf("ratio durable.%s/plain.%s %.3f\n", name, name, rate[1] / rate[0]);
                if (rows[rb] == 4096)
                    printf("ratio durable.%s/fdatasync.4K %.3f\n", name, rate[1] / sync_rate);
                else /* and the best durable/plain ratio this disk allows */
                    printf("ratio durable.%s/fdatasync.8M %.3f\nratio durable.%s/disk.stream "
                           "%.3f\nratio durable.%s/disk.overwrite %.3f\nratio "
                           "disk.stream/plain.%s %.3f\nratio disk.overwrite/plain.%s %.3f\n",
                           name, rate[1] * rows[rb] / 1e9 / disk_gbs, name,
                           rate[1] * rows[rb] / 1e9 / stream_gbs, name,
                           rate[1] * rows[rb] / 1e9 / over_gbs, name,
                           stream_gbs / (rate[0] * rows[rb] / 1e9), name,
                           over_gbs / (rate[0] * rows[rb] / 1e9));
            }
        }
    }
    /* What the shard's size costs a durable push (the "within 20
     * %"): the large shard's rate over the small one's, same shape. */
    for (int rb = 0; rb < 2 && code == RKV_EXIT_OK; rb++)
        for (int wk = 0; wk < 2; wk++) {
            char rs[16], small[16], large[16];
            if (durable_rate[0][rb][wk] <= 0 || durable_rate[1][rb][wk] <= 0)
                continue;
            bd_size(rs, sizeof(rs), rows[rb]);
            bd_size(small, sizeof(small), shards[0]);
            bd_size(large, sizeof(large), shards[1]);
            printf("ratio durable.push.%s.%uw.shard%s/durable.push.%s.%uw.shard%s %.3f\n", rs,
                   workers[wk], large, rs, workers[wk], small,
                   durable_rate[1][rb][wk] / durable_rate[0][rb][wk]);
        }
    if (code == RKV_EXIT_OK && (!o.only || strstr("recovery", o.only))) {
        char sub[600], ss[16];
        snprintf(sub, sizeof(sub), "%s/rec", tmpl);
        mkdir(sub, 0755);
        uint64_t log_bytes = o.large_bytes;
        double ms = bd_recovery_ms(&o, sub, o.large_bytes, &log_bytes);
        bd_size(ss, sizeof(ss), o.large_bytes);
        if (ms >= 0)
            printf("figure recovery.shard%s.log%lluM %.1f ms\n", ss,
                   (unsigned long long)(log_bytes >> 20), ms);
        else
            code = RKV_EXIT_STORE;
        rkv_file_remove_dir(sub);
    }
    free(r);
    rkv_file_remove_dir(tmpl);
    return code;
}
