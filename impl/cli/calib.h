/* Calibration files for the twin (`rkv calibrate`, sim/README.md): what the
 * real backend measured on this host, as the twin's `sim` parameters. */
#ifndef RKV_CLI_CALIB_H
#define RKV_CLI_CALIB_H

#include <stddef.h>
#include <stdint.h>

struct rkv_scenario;

struct cli_calib {
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
int cli_calib_load(const char *path, struct cli_calib *c, char *err, size_t err_len);
/* Writes c and the raw figures (notes: "measured_... = ..." lines, may be NULL). */
int cli_calib_write(const char *path, const struct cli_calib *c, const char *notes, char *err,
                    size_t err_len);
/* Sets sc's sim parameters from c. shared_host: every machine on the one
 * host of the loopback platform with host_cores cores; otherwise a star of
 * the scenario's machines, each with host_cores / machines cores. */
void cli_calib_apply(const struct cli_calib *c, struct rkv_scenario *sc);

/* Runs the calibration benchmarks through the backend (self: the rkv
 * binary) and fills c; writes it to out unless out is NULL. */
int cli_calibrate(const char *self, const char *backend, int quick, const char *out,
                  struct cli_calib *c, char *err, size_t err_len);

/* rkv calibrate */
int cli_cmd_calibrate(int argc, char **argv, const char *self);
/* rkv run FILE --predict | --calibration F (impl/cli/predict.c) */
int cli_predict_wanted(int argc, char **argv);
int cli_cmd_predict(int argc, char **argv, const char *self);

#endif
