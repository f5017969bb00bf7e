/* The loopback TCP probe (probe_tcp.h). Every stream has its own sender and
 * receiver process, as every connection of a cluster on this host has a
 * client and a server process: one reader for all the streams would make
 * one core the limit of any number of them. The senders connect, then wait
 * for one go; each receiver reports when its last byte came, on the
 * monotonic clock the host's processes share, and the aggregate is taken
 * from the go to the last end as rkv's own is (timing from a receiver's
 * first read would get the bytes queued before it for free). Each side's
 * CPU comes from wait4()'s rusage of its processes: they do nothing but
 * the transfer (blocked until the go), so that is the kernel's cost of the
 * bytes plus a fork's few page faults. */
#include "harness/child_exit.h"
#include "harness/probe_tcp.h"

#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness/aggregate.h"
#include "harness/timed.h"
#include "rkv.h"

#define PROBE_STREAM_BYTES (128u << 20) /* a timed pass of the demo workload */
#define PROBE_TRIES 3

/* What one try was asked to do. */
struct probe_args {
    uint32_t streams;
    uint64_t stream_bytes; /* per stream */
    size_t write_bytes;    /* per write() and per read() */
};

/* Child: connects to a, waits for a byte on go_fd, then writes
 * stream_bytes in write_bytes calls. */
static void probe_sender(const struct sockaddr_in *a, const struct probe_args *x, int go_fd)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    char *buf = calloc(1, x->write_bytes), go;
    if (fd < 0 || !buf || setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0 ||
        connect(fd, (const struct sockaddr *)a, sizeof(*a)) < 0)
        rkv_child_exit(1);
    ssize_t g;
    while ((g = read(go_fd, &go, 1)) < 0 && errno == EINTR)
        ;
    if (g != 1)
        rkv_child_exit(1); /* the parent gave up */
    for (uint64_t sent = 0; sent < x->stream_bytes;) {
        uint64_t left = x->stream_bytes - sent;
        size_t want = left < x->write_bytes ? (size_t)left : x->write_bytes;
        ssize_t w = write(fd, buf, want);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            rkv_child_exit(1);
        sent += (size_t)w;
    }
    rkv_child_exit(0);
}

/* Child: reads the stream on fd to its end and writes its pass (bytes and
 * the time of the last read; the parent knows the start) to report_fd. */
static void probe_receiver(int fd, const struct probe_args *x, int report_fd)
{
    char *buf = malloc(x->write_bytes);
    struct rkv_pass p = {0};
    ssize_t r;
    while (buf && p.bytes < x->stream_bytes) {
        r = read(fd, buf, x->write_bytes);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        p.bytes += (uint64_t)r;
        p.end_s = rkv_timed_now_s();
    }
    if (p.bytes != x->stream_bytes)
        p.bytes = 0;
    rkv_child_exit(write(report_fd, &p, sizeof(p)) == (ssize_t)sizeof(p) ? 0 : 1);
}

static double probe_tv_s(struct timeval tv)
{
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

/* Waits for every child in pids (n of them, <= 0 skipped), killing those
 * still running when kill_them; adds the CPU (user + system) of each to
 * *cpu_s. */
static void probe_reap(pid_t *pids, uint32_t n, int kill_them, double *cpu_s)
{
    for (uint32_t i = 0; i < n; i++) {
        if (pids[i] <= 0)
            continue;
        if (kill_them)
            kill(pids[i], SIGKILL);
        struct rusage ru = {0};
        while (wait4(pids[i], NULL, 0, &ru) < 0 && errno == EINTR)
            ;
        *cpu_s += probe_tv_s(ru.ru_utime) + probe_tv_s(ru.ru_stime);
    }
}

/* One try: the streams' GB/s over their common window and each side's
 * CPU in *run_p; 0 or -RKV_EIO. */
static int probe_try(const struct probe_args *x, struct rkv_probe_tcp_run *run_p)
{
    const uint32_t streams = x->streams;
    double send_cpu_s = 0, recv_cpu_s = 0;
    pid_t pid[2 * RKV_PROBE_TCP_MAX_STREAMS] = {0};
    struct rkv_pass pass[RKV_PROBE_TCP_MAX_STREAMS] = {{0}};
    int report[2] = {-1, -1}, go[2] = {-1, -1}, ok = 0;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(ls, (int)streams) < 0 ||
        getsockname(ls, (struct sockaddr *)&a, &len) < 0 || pipe(report) < 0 || pipe(go) < 0)
        goto clean_sockets;
    for (uint32_t i = 0; i < streams; i++) {
        if ((pid[i] = fork()) == 0)
            probe_sender(&a, x, go[0]);
        if (pid[i] < 0)
            goto clean_children;
    }
    for (uint32_t i = 0; i < streams; i++) {
        int fd = accept(ls, NULL, NULL);
        if (fd < 0)
            goto clean_children;
        if ((pid[streams + i] = fork()) == 0)
            probe_receiver(fd, x, report[1]);
        close(fd);
        if (pid[streams + i] < 0)
            goto clean_children;
    }
    close(report[1]);
    report[1] = -1;
    const char gos[RKV_PROBE_TCP_MAX_STREAMS] = {0};
    double start_s = rkv_timed_now_s();
    if (write(go[1], gos, streams) != (ssize_t)streams)
        goto clean_children;
    /* Every receiver writes one pass, atomically (far below PIPE_BUF). */
    uint32_t got = 0;
    while (got < streams) {
        ssize_t r = read(report[0], &pass[got], sizeof(pass[0]));
        if (r < 0 && errno == EINTR)
            continue;
        if (r != (ssize_t)sizeof(pass[0]))
            break;
        got++;
    }
    ok = got == streams;
    for (uint32_t i = 0; ok && i < streams; i++) {
        ok = pass[i].bytes == x->stream_bytes;
        pass[i].start_s = start_s;
    }
clean_children:
    probe_reap(pid, streams, !ok, &send_cpu_s);
    probe_reap(pid + streams, streams, !ok, &recv_cpu_s);
clean_sockets:
    for (int i = 0; i < 2; i++)
        if (go[i] >= 0)
            close(go[i]);
    if (report[0] >= 0)
        close(report[0]);
    if (report[1] >= 0)
        close(report[1]);
    if (ls >= 0)
        close(ls);
    double gbps = ok ? rkv_pass_aggregate_gbs(pass, streams) : 0;
    if (gbps <= 0)
        return -RKV_EIO;
    *run_p = (struct rkv_probe_tcp_run){
        .gbps = gbps, .send_cpu_s = send_cpu_s, .recv_cpu_s = recv_cpu_s};
    return 0;
}

int rkv_probe_tcp_once(uint32_t streams, uint64_t stream_bytes, size_t write_bytes,
                       struct rkv_probe_tcp_run *run_p)
{
    if (streams < 1 || streams > RKV_PROBE_TCP_MAX_STREAMS || stream_bytes < 1 ||
        stream_bytes > RKV_PROBE_TCP_MAX_STREAM_BYTES || write_bytes < 4096 ||
        write_bytes > (64u << 20))
        return -RKV_EINVAL;
    const struct probe_args x = {
        .streams = streams, .stream_bytes = stream_bytes, .write_bytes = write_bytes};
    return probe_try(&x, run_p);
}

double rkv_probe_tcp_gbps(uint32_t streams, size_t write_bytes)
{
    double best = 0;
    for (int t = 0; t < PROBE_TRIES; t++) {
        struct rkv_probe_tcp_run run;
        if (rkv_probe_tcp_once(streams, PROBE_STREAM_BYTES, write_bytes, &run) < 0)
            return 0; /* a failure is not noise (nor is a bad argument): no figure */
        assert(run.gbps > 0);
        best = run.gbps > best ? run.gbps : best;
    }
    return best;
}
