/* The event trace of a node on a real backend (`rkv run --trace` on tcp or
 * verbs): spans and flow ends as JSON lines, one file per process, which the
 * launcher merges into one Perfetto file (harness/trace_merge.c). The twin
 * traces in simulated time instead (sim/world.c); its ports have no trace.
 *
 * Clocks: every timestamp is this node's CLOCK_MONOTONIC. rkv_trace_sync
 * measures its offset against the launcher's clock by a ping exchange over
 * UDP (the sample of least round trip wins, NTP-style), so that nodes on
 * hosts whose clocks differ still line up; the offset is the file's first
 * line. A port with a trace (port->trace) writes from any of its threads:
 * each line is one fprintf, which stdio locks. */
#ifndef RKV_PORT_TRACE_H
#define RKV_PORT_TRACE_H

#include <stddef.h>
#include <stdint.h>

struct rkv_trace;

/* Opens path for writing; node names the process in the merged file.
 * skew_ns is added to every clock reading (tests pretend another host). */
int rkv_trace_open(const char *path, const char *node, int64_t skew_ns, struct rkv_trace **tr_p,
                   char *err, size_t err_len);
/* Measures the clock offset against the clock server at host:port
 * (harness/trace_merge.c) and writes the file's clock line; without a
 * server (port 0) the offset is 0 and the line says it was not measured. */
int rkv_trace_sync(struct rkv_trace *tr, const char *host, uint16_t port, char *err,
                   size_t err_len);
void rkv_trace_close(struct rkv_trace *tr);
/* Another limit of lines than RKV_TRACE_MAX_LINES (tests). */
void rkv_trace_limit(struct rkv_trace *tr, uint64_t max_lines);

uint64_t rkv_trace_now_ns(const struct rkv_trace *tr);
/* A complete span [t0, t1] on the calling thread. name and cat are plain
 * identifiers (no quoting needed); peer < 0 and bytes/rows 0 are left out. */
void rkv_trace_span(struct rkv_trace *tr, const char *name, const char *cat, uint64_t t0_ns,
                    uint64_t t1_ns, int64_t peer, uint64_t rows, uint64_t bytes);
/* One end of a message's arrow: start = 1 where it is sent, 0 where it is
 * received; both ends compute the same id from the message. */
void rkv_trace_flow(struct rkv_trace *tr, int start, uint64_t id, uint64_t ts_ns);

/* Lines per file, at most (some 100 bytes each): then a "cut" line. */
#define RKV_TRACE_MAX_LINES 4000000ull

/* The clock exchange, shared with the launcher's server: a 16-byte ping
 * (magic, sequence) and a 24-byte answer (magic, sequence, server ns). */
#define RKV_TRACE_PING_MAGIC 0x676e6970766b72ull /* "rkvping" */
#define RKV_TRACE_PINGS 16

#endif
