/* What loopback TCP moves on this host, measured now, and what it costs:
 * the raw figure rkv's tcp backend is set against (rkv bench tcp, rkv
 * demo) and the kernel's CPU per byte on each side (rkv calibrate). One
 * probe for both, so the bytes a calibration charges are the bytes the
 * limit moved. */
#ifndef RKV_PROBE_TCP_H
#define RKV_PROBE_TCP_H

#include <stddef.h>
#include <stdint.h>

#define RKV_PROBE_TCP_MAX_STREAMS 8u
#define RKV_PROBE_TCP_MAX_STREAM_BYTES (1ull << 30)

/* One transfer of the probe. */
struct rkv_probe_tcp_run {
    double gbps;       /* aggregate over the common window (harness/aggregate.h) */
    double send_cpu_s; /* user + system CPU of the sender processes, summed
                        * (wait4's rusage: other work on the host does not count) */
    double recv_cpu_s; /* and of the receiver processes */
};

/* Once: `streams` loopback connections at once (1..RKV_PROBE_TCP_MAX_STREAMS),
 * each a sender and a receiver process moving stream_bytes
 * (1..RKV_PROBE_TCP_MAX_STREAM_BYTES) through write() and read() of
 * write_bytes (4 KiB..64 MiB), the sender with TCP_NODELAY as the tcp
 * backend opens its connections. 0 and *run_p set, -RKV_EINVAL for
 * arguments out of range, -RKV_EIO if a transfer failed. */
int rkv_probe_tcp_once(uint32_t streams, uint64_t stream_bytes, size_t write_bytes,
                       struct rkv_probe_tcp_run *run_p);

/* The limit: rkv_probe_tcp_once of 128 MiB per stream (a timed pass of the
 * demo workload), the best of 3 tries: a busy host only ever slows a
 * transfer down. GB/s, 0 if it could not be measured. */
double rkv_probe_tcp_gbps(uint32_t streams, size_t write_bytes);

#endif
