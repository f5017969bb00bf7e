/* The host's limits: one loopback TCP probe and a memcpy probe (limits.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "harness/limits.h"
#include "harness/probe_tcp.h"
#include "rkv.h"

#define LIMIT_CHUNK (1u << 20)

struct limit_side {
    int fd;
    size_t bytes;
    double cpu_s, wall_s; /* of the thread that moved them */
    int ok;
};

static double limit_clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *limit_read(void *arg)
{
    struct limit_side *s = arg;
    size_t got = 0;
    char *buf = malloc(LIMIT_CHUNK);
    double c0 = limit_clock_s(CLOCK_THREAD_CPUTIME_ID), t0 = limit_clock_s(CLOCK_MONOTONIC);
    while (buf && got < s->bytes) {
        ssize_t k = read(s->fd, buf, LIMIT_CHUNK);
        if (k <= 0 && errno != EINTR)
            break;
        got += k > 0 ? (size_t)k : 0;
    }
    s->wall_s = limit_clock_s(CLOCK_MONOTONIC) - t0;
    s->cpu_s = limit_clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
    s->ok = got == s->bytes;
    free(buf);
    return NULL;
}

static void *limit_write(void *arg)
{
    struct limit_side *s = arg;
    size_t put = 0;
    char *buf = calloc(1, LIMIT_CHUNK);
    double c0 = limit_clock_s(CLOCK_THREAD_CPUTIME_ID);
    while (buf && put < s->bytes) {
        size_t n = s->bytes - put < LIMIT_CHUNK ? s->bytes - put : LIMIT_CHUNK;
        ssize_t k = write(s->fd, buf, n);
        if (k <= 0 && errno != EINTR)
            break;
        put += k > 0 ? (size_t)k : 0;
    }
    s->cpu_s = limit_clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
    s->ok = put == s->bytes;
    free(buf);
    return NULL;
}

/* A connected pair of loopback TCP sockets, as the tcp backend opens them. */
static int limit_tcp_pair(int fds[2])
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    int one = 1, l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    fds[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    fds[1] = -1;
    int ok = l >= 0 && fds[0] >= 0 && bind(l, (struct sockaddr *)&a, sizeof(a)) == 0 &&
             listen(l, 1) == 0 && getsockname(l, (struct sockaddr *)&a, &al) == 0 &&
             connect(fds[0], (struct sockaddr *)&a, sizeof(a)) == 0 &&
             (fds[1] = accept4(l, NULL, NULL, SOCK_CLOEXEC)) >= 0;
    if (ok)
        setsockopt(fds[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (l >= 0)
        close(l);
    if (!ok) {
        if (fds[0] >= 0)
            close(fds[0]);
        if (fds[1] >= 0)
            close(fds[1]);
        return -RKV_EIO;
    }
    return 0;
}

int rkv_limit_tcp_stream(size_t bytes, struct rkv_limit_stream *st_p)
{
    int fds[2];
    if (bytes == 0 || limit_tcp_pair(fds) < 0)
        return -RKV_EIO;
    struct limit_side w = {.fd = fds[0], .bytes = bytes}, rd = {.fd = fds[1], .bytes = bytes};
    pthread_t tw, tr;
    int started = pthread_create(&tr, NULL, limit_read, &rd) == 0;
    if (started && pthread_create(&tw, NULL, limit_write, &w) == 0)
        pthread_join(tw, NULL);
    else
        shutdown(fds[0], SHUT_RDWR); /* the reader sees the end */
    if (started)
        pthread_join(tr, NULL);
    close(fds[0]);
    close(fds[1]);
    if (!w.ok || !rd.ok)
        return -RKV_EIO;
    *st_p = (struct rkv_limit_stream){
        .wall_s = rd.wall_s, .send_cpu_s = w.cpu_s, .recv_cpu_s = rd.cpu_s};
    return 0;
}

/* The figure the tools divide by is the multi-process probe's (one
 * sender and one receiver process, the best of a few transfers), the same
 * one `rkv bench` takes at two streams; rkv_limit_tcp_stream stays for
 * calibrate, which needs each side's CPU time. */
double rkv_limit_tcp_gbps(void)
{
    return rkv_probe_tcp_gbps(1, 1u << 20);
}

/* A block that fits in cache is copied at cache speed, so the shared-memory
 * path is compared with memcpy of the same bytes. */
double rkv_limit_memcpy_gbps(size_t block)
{
    const size_t total = 512u << 20;
    char *a = malloc(block), *b = malloc(block);
    if (!block || !a || !b) {
        free(a);
        free(b);
        return 0;
    }
    memset(a, 1, block);
    memset(b, 2, block);
    size_t reps = total / block ? total / block : 1;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t i = 0; i < reps; i++)
        memcpy(i % 2 ? a : b, i % 2 ? b : a, block);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    volatile char sink = a[block / 2] + b[block / 3];
    (void)sink;
    free(a);
    free(b);
    double dt = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    return dt > 0 ? (double)reps * (double)block / dt / 1e9 : 0;
}
