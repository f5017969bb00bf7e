/* The loopback TCP probe (probe_tcp.h). Every stream has its own sender and
 * receiver process, as every connection of a cluster on this host has a
 * client and a server process: one reader for all the streams would make
 * one core the limit of any number of them. The senders connect, then wait
 * for one go; each receiver reports when its last byte came, on the
 * monotonic clock the host's processes share, and the aggregate is taken
 * from the go to the last end as rkv's own is (timing from a receiver's
 * first read would get the bytes queued before it for free). */
#include "harness/probe_tcp.h"

#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness/aggregate.h"

#define PROBE_STREAM_BYTES (128u << 20) /* a timed pass of the demo workload */
#define PROBE_TRIES 3

static double probe_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Child: connects to a, waits for a byte on go_fd, then writes
 * PROBE_STREAM_BYTES in write_bytes calls. */
static void probe_sender(const struct sockaddr_in *a, size_t write_bytes, int go_fd)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    char *buf = calloc(1, write_bytes), go;
    if (fd < 0 || !buf || connect(fd, (const struct sockaddr *)a, sizeof(*a)) < 0)
        _exit(1);
    ssize_t g;
    while ((g = read(go_fd, &go, 1)) < 0 && errno == EINTR)
        ;
    if (g != 1)
        _exit(1); /* the parent gave up */
    for (size_t sent = 0; sent < PROBE_STREAM_BYTES;) {
        size_t want =
            PROBE_STREAM_BYTES - sent < write_bytes ? PROBE_STREAM_BYTES - sent : write_bytes;
        ssize_t w = write(fd, buf, want);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            _exit(1);
        sent += (size_t)w;
    }
    _exit(0);
}

/* Child: reads the stream on fd to its end and writes its pass (bytes and
 * the time of the last read; the parent knows the start) to report_fd. */
static void probe_receiver(int fd, size_t write_bytes, int report_fd)
{
    char *buf = malloc(write_bytes);
    struct rkv_pass p = {0};
    ssize_t r;
    while (buf && p.bytes < PROBE_STREAM_BYTES) {
        r = read(fd, buf, write_bytes);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        p.bytes += (uint64_t)r;
        p.end_s = probe_now_s();
    }
    if (p.bytes != PROBE_STREAM_BYTES)
        p.bytes = 0;
    _exit(write(report_fd, &p, sizeof(p)) == (ssize_t)sizeof(p) ? 0 : 1);
}

/* Waits for every child in pids (n of them, <= 0 skipped), killing those
 * still running when kill_them. */
static void probe_reap(pid_t *pids, uint32_t n, int kill_them)
{
    for (uint32_t i = 0; i < n; i++) {
        if (pids[i] <= 0)
            continue;
        if (kill_them)
            kill(pids[i], SIGKILL);
        waitpid(pids[i], NULL, 0);
    }
}

/* One try: GB/s of the streams over their common window, 0 on failure. */
static double probe_try(uint32_t streams, size_t write_bytes)
{
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
            probe_sender(&a, write_bytes, go[0]);
        if (pid[i] < 0)
            goto clean_children;
    }
    for (uint32_t i = 0; i < streams; i++) {
        int fd = accept(ls, NULL, NULL);
        if (fd < 0)
            goto clean_children;
        if ((pid[streams + i] = fork()) == 0)
            probe_receiver(fd, write_bytes, report[1]);
        close(fd);
        if (pid[streams + i] < 0)
            goto clean_children;
    }
    close(report[1]);
    report[1] = -1;
    const char gos[RKV_PROBE_TCP_MAX_STREAMS] = {0};
    double start_s = probe_now_s();
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
        ok = pass[i].bytes == PROBE_STREAM_BYTES;
        pass[i].start_s = start_s;
    }
clean_children:
    probe_reap(pid, 2 * streams, !ok);
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
    return ok ? rkv_pass_aggregate_gbs(pass, streams) : 0;
}

double rkv_probe_tcp_gbps(uint32_t streams, size_t write_bytes)
{
    if (streams < 1 || streams > RKV_PROBE_TCP_MAX_STREAMS || write_bytes < 4096 ||
        write_bytes > (64u << 20))
        return 0;
    double best = 0;
    for (int t = 0; t < PROBE_TRIES; t++) {
        double gbs = probe_try(streams, write_bytes);
        if (gbs <= 0)
            return 0; /* a failure is not noise: no figure */
        best = gbs > best ? gbs : best;
    }
    assert(best > 0);
    return best;
}
