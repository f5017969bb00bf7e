/* What loopback TCP moves on this host, measured now: the raw figure rkv's
 * tcp backend is set against (rkv bench tcp, rkv demo). */
#ifndef RKV_PROBE_TCP_H
#define RKV_PROBE_TCP_H

#include <stddef.h>
#include <stdint.h>

#define RKV_PROBE_TCP_MAX_STREAMS 8u

/* `streams` loopback connections at once (1..RKV_PROBE_TCP_MAX_STREAMS),
 * each a sender and a receiver process moving 128 MiB through write() and
 * read() of write_bytes (4 KiB..64 MiB). Their aggregate over the common
 * window (harness/aggregate.h), the best of 3 tries: a busy host only ever
 * slows a transfer down. GB/s, 0 if it could not be measured. */
double rkv_probe_tcp_gbps(uint32_t streams, size_t write_bytes);

#endif
