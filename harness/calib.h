/* Calibration files for the twin (`rkv calibrate`, sim/README.md): what the
 * real backend measured on this host, as the twin's `sim` parameters. */
#ifndef RKV_CLI_CALIB_H
#define RKV_CLI_CALIB_H

#include <stddef.h>
#include <stdint.h>

#include "harness/launch.h"

struct rkv_scenario;

struct rkv_calib {
    char backend[16];      /* tcp | verbs */
    uint32_t host_cores;   /* this host's online cores, shared by every node of a run */
    int shared_host;       /* the real runs' machines are processes on this one host */
    double latency_us;     /* one-way time of a small message that is not CPU work */
    double bandwidth_gbps; /* of one connection, beyond the CPU the copies cost */
    double msg_cost_ns;    /* kernel CPU per message posted and per message received */
    double send_byte_ns;   /* kernel CPU per byte sent (the sender's copy and stack) */
    double recv_byte_ns;   /* kernel CPU per byte received (the reader's copy) */
    double copy_byte_ns;   /* a warm memcpy per byte: the twin's copies beyond it are CPU */
    double row_cost_ns;    /* CPU per row a request carries (used when cpu_measured is 0) */
    int cpu_measured;      /* the twin charges node code's measured CPU (sim/backend/cpu.c) */
    int sched_cores;       /* the twin's cores are per-core run queues (sim/backend/cpu.c) */
};

/* Reads a key = value file ('#' comments; keys starting with "measured_" are
 * the raw figures and are skipped). Errors name file:line. */
int rkv_calib_load(const char *path, struct rkv_calib *c, char *err, size_t err_len);
/* Writes c and the raw figures (notes: "measured_... = ..." lines, may be NULL). */
int rkv_calib_write(const char *path, const struct rkv_calib *c, const char *notes, char *err,
                    size_t err_len);
/* Sets sc's sim parameters from c. shared_host: every machine on the one
 * host of the loopback platform with host_cores cores; otherwise a star of
 * the scenario's machines, each with host_cores / machines cores. */
void rkv_calib_apply(const struct rkv_calib *c, struct rkv_scenario *sc);

/* Runs the calibration benchmarks through the launcher on the backend
 * (self: the rkv binary the nodes run as) and in the twin (NULL: without
 * it, its figures are zeros) and fills c; writes it to out unless out is
 * NULL. */
int rkv_calibrate(const char *self, const char *backend, int quick, const char *out,
                  rkv_launch_twin_fn twin, struct rkv_calib *c, char *err, size_t err_len);

#define RKV_PREDICT_MAX_FLAGS 64

/* rkv run FILE --predict: what the real runs and the twin runs take. */
struct rkv_predict_opts {
    const char *self, *file; /* the rkv binary the nodes run as; the scenario's file */
    const char *backend;     /* the real one: tcp | verbs */
    unsigned repeat;         /* real runs, each followed by a twin run */
    char **flags;            /* settings flags for the real runs */
    int n_flags;             /* up to RKV_PREDICT_MAX_FLAGS */
    rkv_launch_twin_fn twin; /* not NULL */
    /* The store's settings from flags, for the twin runs too
     * (rkv_launch_twin_store), or NULL. */
    const struct rkv_config *store;
    unsigned store_set;
};
/* Each phase's median time over o->repeat real runs into meas and, with c,
 * of as many twin runs on the platform c describes, taken in turn with the
 * real ones, into pred. 0, or -1 said on stderr. */
int rkv_predict_measure(const struct rkv_predict_opts *o, const struct rkv_calib *c,
                        const struct rkv_scenario *sc, double *meas, double *pred);

#endif
