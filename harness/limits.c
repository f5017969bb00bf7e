/* The host's limits: the loopback TCP probe's figure and a memcpy probe
 * (limits.h). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness/limits.h"
#include "harness/probe_tcp.h"
#include "rkv.h"

/* The figure the tools divide by is the loopback probe's (one sender and
 * one receiver process, the best of a few transfers), the same one
 * `rkv bench` takes at two streams and calibrate takes each side's CPU
 * from. */
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
