/* `rkv run --trace FILE` on real backends: the launcher's side. Each child
 * writes its spans to its own file (port/trace.h) with its clock's offset
 * against the launcher's, measured at its start by a ping exchange with the
 * launcher's clock server; at the end the launcher merges the files into one
 * Chrome/Perfetto JSON file in the twin's format ({"displayTimeUnit":"ns",
 * "traceEvents":[...]}, timestamps in microseconds), one process per node,
 * named, with an arrow from each message's send to its receipt. */
#ifndef RKV_TRACE_MERGE_H
#define RKV_TRACE_MERGE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

/* A run being traced: the children's files and the clock server. */
struct rkv_trace_run {
    char dir[200]; /* the children's files, <node>.jsonl; removed by finish */
    int fd;        /* the clock server's UDP socket, bound to 127.0.0.1 */
    uint16_t port;
    pthread_t thread;
    int running;
    atomic_int stop;
};

/* What a merge wrote. */
struct rkv_trace_merge_stats {
    uint32_t nodes;
    uint64_t events;      /* every event written, metadata included */
    uint64_t spans;       /* "X" events */
    uint64_t flow_starts; /* "s" events */
    uint64_t flow_ends;   /* "f" events */
    uint64_t matched;     /* ends whose start is in the file too */
    uint64_t bad_lines;   /* lines that were not JSON (a child killed mid-line) */
    double max_rtt_us;    /* the worst clock measurement: offsets are known within half */
    uint64_t bytes;       /* size of the merged file */
    uint32_t unclocked;   /* nodes left out: killed before they measured their clock */
    uint32_t cut;         /* nodes whose file reached RKV_TRACE_MAX_LINES */
};

/* Checks that out_path can be written, makes the directory and starts the
 * clock server. */
int rkv_trace_run_start(struct rkv_trace_run *tr, const char *out_path, char *err, size_t err_len);
/* In a child after fork, before exec: where node's trace goes
 * (RKV_TRACE_FILE, RKV_TRACE_NODE, RKV_TRACE_CLOCK). */
void rkv_trace_run_child_env(const struct rkv_trace_run *tr, const char *node);
/* Stops the clock server, merges every child's file into out_path (when
 * not NULL) and removes the directory. */
int rkv_trace_run_finish(struct rkv_trace_run *tr, const char *out_path,
                         struct rkv_trace_merge_stats *st_p, char *err, size_t err_len);

/* rkv_trace_run_finish, then one line on out saying what the file holds
 * (or the error on stderr). */
int rkv_trace_run_end(struct rkv_trace_run *tr, const char *out_path, FILE *out);

/* Merges the per-node files (port/trace.h's format) into out_path, a
 * process per file in the order given (pid 1, 2, ...); rkv_trace_run_finish
 * gives them by node name: servers "s..." before workers "w...", a
 * restarted node (node-r2) after its first incarnation. */
int rkv_trace_merge(char *const *files, size_t n, const char *out_path,
                    struct rkv_trace_merge_stats *st_p, char *err, size_t err_len);

#endif
