/* Per-node trace files of real backends (port/trace.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "port/trace.h"
#include "util/util.h"

struct rkv_trace {
    FILE *f;
    int64_t skew_ns;
    char node[32];
    /* Lines written, from any thread; past RKV_TRACE_MAX_LINES the file
     * says it was cut and takes no more (a long run must not fill the disk). */
    atomic_ullong lines;
    uint64_t max_lines;
};

/* Whether one more line may go in (writing the cut's notice at the first refused). */
static int trace_room(struct rkv_trace *tr)
{
    unsigned long long n = atomic_fetch_add(&tr->lines, 1);
    if (n < tr->max_lines)
        return 1;
    if (n == tr->max_lines)
        fprintf(tr->f, "{\"ph\":\"cut\",\"after_lines\":%llu}\n", n);
    return 0;
}

uint64_t rkv_trace_now_ns(const struct rkv_trace *tr)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)((int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec + tr->skew_ns);
}

/* Node names go into the JSON as they are: letters, digits and ._- only. */
static int trace_name_ok(const char *s)
{
    if (!*s || strlen(s) >= 32)
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '.' || *s == '_' || *s == '-'))
            return 0;
    return 1;
}

int rkv_trace_open(const char *path, const char *node, int64_t skew_ns, struct rkv_trace **tr_p,
                   char *err, size_t err_len)
{
    if (!trace_name_ok(node))
        return rkv_errf(err, err_len, -RKV_EINVAL,
                        "trace: node name \"%s\": 1-31 letters, digits, '.', '_' or '-'", node);
    struct rkv_trace *tr = calloc(1, sizeof(*tr));
    if (!tr)
        return rkv_errf(err, err_len, -RKV_ENOMEM, "trace: out of memory");
    if (!(tr->f = fopen(path, "w"))) {
        int e = errno;
        free(tr);
        return rkv_errf(err, err_len, -RKV_EIO, "trace: cannot write %s: %s", path, strerror(e));
    }
    tr->skew_ns = skew_ns;
    tr->max_lines = RKV_TRACE_MAX_LINES;
    snprintf(tr->node, sizeof(tr->node), "%s", node);
    *tr_p = tr;
    return 0;
}

void rkv_trace_limit(struct rkv_trace *tr, uint64_t max_lines)
{
    tr->max_lines = max_lines;
}

void rkv_trace_close(struct rkv_trace *tr)
{
    if (!tr)
        return;
    fclose(tr->f);
    free(tr);
}

static long trace_tid(void)
{
    return (long)gettid();
}

void rkv_trace_span(struct rkv_trace *tr, const char *name, const char *cat, uint64_t t0_ns,
                    uint64_t t1_ns, int64_t peer, uint64_t rows, uint64_t bytes)
{
    if (!trace_room(tr))
        return;
    char args[96] = "";
    int n = 0;
    if (peer >= 0)
        n += snprintf(args + n, sizeof(args) - (size_t)n, ",\"peer\":%lld", (long long)peer);
    if (rows)
        n += snprintf(args + n, sizeof(args) - (size_t)n, ",\"rows\":%llu",
                      (unsigned long long)rows);
    if (bytes)
        snprintf(args + n, sizeof(args) - (size_t)n, ",\"bytes\":%llu", (unsigned long long)bytes);
    fprintf(tr->f,
            "{\"ph\":\"X\",\"name\":\"%s\",\"cat\":\"%s\",\"tid\":%ld,\"t\":%llu,\"d\":%llu,"
            "\"args\":{%s}}\n",
            name, cat, trace_tid(), (unsigned long long)t0_ns,
            (unsigned long long)(t1_ns > t0_ns ? t1_ns - t0_ns : 0), args[0] ? args + 1 : "");
}

void rkv_trace_flow(struct rkv_trace *tr, int start, uint64_t id, uint64_t ts_ns)
{
    if (!trace_room(tr))
        return;
    fprintf(tr->f, "{\"ph\":\"%s\",\"tid\":%ld,\"t\":%llu,\"id\":%llu}\n", start ? "s" : "f",
            trace_tid(), (unsigned long long)ts_ns, (unsigned long long)id);
}

/* One ping: the server's clock against the midpoint of ours around it. */
static int trace_ping(const struct rkv_trace *tr, int fd, uint64_t seq, int64_t *offset_p,
                      uint64_t *rtt_p)
{
    uint64_t ping[2] = {RKV_TRACE_PING_MAGIC, seq}, pong[3];
    uint64_t t0 = rkv_trace_now_ns(tr);
    if (send(fd, ping, sizeof(ping), 0) != (ssize_t)sizeof(ping))
        return -1;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 200) <= 0)
            return -1;
        ssize_t k = recv(fd, pong, sizeof(pong), 0);
        uint64_t t1 = rkv_trace_now_ns(tr);
        if (k != (ssize_t)sizeof(pong) || pong[0] != RKV_TRACE_PING_MAGIC)
            return -1;
        if (pong[1] != seq)
            continue; /* a late answer to an earlier ping */
        *rtt_p = t1 - t0;
        *offset_p = (int64_t)(pong[2] - (t0 + (t1 - t0) / 2));
        return 0;
    }
}

int rkv_trace_sync(struct rkv_trace *tr, const char *host, uint16_t port, char *err, size_t err_len)
{
    int64_t best_off = 0;
    uint64_t best_rtt = 0;
    uint32_t got = 0;
    if (port) {
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
        if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
            return rkv_errf(err, err_len, -RKV_EINVAL,
                            "trace: clock server \"%s\": not an IPv4 "
                            "address",
                            host);
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
            int e = errno;
            if (fd >= 0)
                close(fd);
            return rkv_errf(err, err_len, -RKV_EIO, "trace: clock server %s:%u: %s", host, port,
                            strerror(e));
        }
        for (uint64_t i = 1; i <= RKV_TRACE_PINGS; i++) {
            int64_t off;
            uint64_t rtt;
            if (trace_ping(tr, fd, i, &off, &rtt) < 0)
                continue;
            if (!got++ || rtt < best_rtt) {
                best_rtt = rtt;
                best_off = off;
            }
        }
        close(fd);
        if (!got)
            return rkv_errf(err, err_len, -RKV_ETIMEDOUT,
                            "trace: the clock server %s:%u answered none of %u pings", host, port,
                            RKV_TRACE_PINGS);
    }
    /* The offset is known to within half the round trip. */
    fprintf(tr->f,
            "{\"ph\":\"clock\",\"node\":\"%s\",\"pid\":%ld,\"offset_ns\":%lld,\"rtt_ns\":%llu,"
            "\"samples\":%u,\"measured\":%s}\n",
            tr->node, (long)getpid(), (long long)best_off, (unsigned long long)best_rtt, got,
            got ? "true" : "false");
    fflush(tr->f);
    return 0;
}
