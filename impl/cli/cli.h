/* The rkv command line: settings (flags, env vars, ps-lite/DGL aliases,
 * cluster files), the built-in checked workload, and the local launcher. */
#ifndef RKV_CLI_H
#define RKV_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "rkv.h"

/* Documented exit codes of the rkv binary. */
enum rkv_exit {
    RKV_EXIT_OK = 0,
    RKV_EXIT_CHECK = 1, /* a pulled value differed from the reference */
    RKV_EXIT_USAGE = 2, /* bad flag, env var, cluster file or setting */
    RKV_EXIT_STORE = 3, /* the store failed: timeout, dead peer, I/O... */
};

enum cli_key {
    CLI_ROLE,
    CLI_CLUSTER,
    CLI_HOST,
    CLI_BASE_PORT,
    CLI_MACHINES,
    CLI_SERVERS_PER_MACHINE,
    CLI_NUM_SERVERS,
    CLI_NUM_WORKERS,
    CLI_MACHINE_ID,
    CLI_SERVER_ID,
    CLI_BACKEND,
    CLI_TIMEOUT_MS,
    CLI_CONNECT_RETRY_MS,
    CLI_RX_DEPTH,
    CLI_CTRL_BUF_BYTES,
    CLI_SLOTS,
    CLI_MAX_SLOT_BYTES,
    CLI_SHM_PREFIX,
    CLI_SEED,
    CLI_LOG_LEVEL,
    CLI_ROWS,
    CLI_VALUE_BYTES,
    CLI_ROUNDS,
    CLI_SCENARIO,
    CLI_DISCOVER,
    CLI_DURABLE_DIR,
    CLI_RETRY_MS,
    CLI_ZERO_COPY_BYTES,
    CLI_BUSY_POLL,
    CLI_SECRET_FILE,
    CLI_HELLO_TIMEOUT_MS,
    CLI_IDLE_TIMEOUT_MS,
    CLI_NODE_HOST,
    CLI_INTERFACE,
    CLI_KEY_COUNT_
};

struct cli_settings {
    const char *val[CLI_KEY_COUNT_];
    const char *src[CLI_KEY_COUNT_]; /* "default", "env NAME", "flag", ... */
    char srcbuf[CLI_KEY_COUNT_][48];
};

/* Loads defaults, then env vars (RKV_* and aliases), then flags from argv
 * (--name=value or --name value). Unknown flags are errors. Returns 0 or -1
 * with a message in err. */
int cli_settings_load(struct cli_settings *s, int argc, char **argv, char *err, size_t err_len);
void cli_settings_dump(const struct cli_settings *s, FILE *out);
void cli_settings_help(FILE *out);
int cli_get_u64(const struct cli_settings *s, enum cli_key k, uint64_t *v, char *err,
                size_t err_len);

/* Cluster file: one machine per line, "host [base_port [servers]]" (DGL's
 * ip_config.txt: "IP", "IP PORT", and the older "IP PORT SERVERS"; the port
 * defaults to DGL's, the servers to default_servers); '#' comments. Errors
 * name file:line and what was expected; a machine listed twice (one host,
 * overlapping ports) is refused with both lines. */
#define CLI_DGL_DEFAULT_PORT 30050
int cli_cluster_parse(const char *path, uint32_t default_servers, struct rkv_machine **m_p,
                      uint32_t *n_p, char *err, size_t err_len);

/* The first machine of cfg whose host is an address of this host (0, or -1
 * if none is), as DGL's clients find their machine in ip_config.txt. */
int cli_local_machine(const struct rkv_config *cfg, uint32_t *m_p);

/* Builds an rkv_config (machines owned by the caller, free(cfg->machines)). */
int cli_build_config(const struct cli_settings *s, struct rkv_config *cfg, char *err,
                     size_t err_len);

struct cli_workload {
    uint64_t rows;        /* rows per tensor */
    uint32_t value_bytes; /* bytes per row for the throughput phase */
    uint32_t rounds;
};

struct cli_result {
    uint64_t checks, errors;
    uint64_t push_bytes, pull_bytes, pushpull_bytes, pushpipe_bytes;
    double push_s, pull_s, pushpull_s, pushpipe_s; /* pushpipe: pushes pipelined */
    /* When each pass started, on cli_now_s's clock (shared by the host's
     * processes): the aggregate is taken over the workers' common window. */
    double push_t0_s, pull_t0_s, pushpull_t0_s, pushpipe_t0_s;
    double pull_lat_us_p50, pull_lat_us_p99;
    /* Context switches of the worker process per 1-row pull: voluntary
     * ones are sleeps (a wake-up each), involuntary ones preemptions. */
    double pull_lat_vcsw, pull_lat_ivcsw;
    double pull_lat_call_vcsw; /* sleeps of the calling thread alone per pull */
    int busy_poll;             /* the worker's setting, as it ran */
};

/* The workload settings (rows, value-bytes, rounds), checked; 0 or -1
 * with a message in err. */
int cli_workload_load(const struct cli_settings *s, struct cli_workload *wl, char *err,
                      size_t err_len);

/* The flags that give a child of the launcher (`rkv run --backend tcp`,
 * `rkv demo`) every setting of s but the ones it sets per child (role,
 * machine-id, server-id): pairs of flag and value into argv (up to cap
 * entries, pointing into s and static strings). Returns the count, or -1
 * if cap is too small. */
int cli_launch_args(const struct cli_settings *s, char **argv, int cap);

/* The timed phase of `rkv demo` (after the built-in scenario): push and
 * pull throughput and latency on remote rows of value_bytes each. */
int cli_bench_run(struct rkv_client *cli, const struct rkv_config *cfg,
                  const struct cli_workload *wl, struct cli_result *res, FILE *log);

/* The physical limit of cli_bench_run's timed phase on this machine's
 * shard (rkv bench shm): one core doing the phase's copies with memcpy, the
 * caller's batch to and from row-sized blocks drawn the same way from
 * shared memory of the shard's size. kind as the phase's passes: 0 push
 * (batch -> rows), 1 pull (rows -> batch), 2 push then pull (both counted).
 * GB/s of the fastest of a few passes; 0 if it could not be measured. */
double cli_limit_shard_gbps(uint32_t value_bytes, int kind);

/* What one `rkv demo` cluster measured in its timed phase, over all its
 * workers (impl/cli/demo.c). */
struct cli_figures {
    double push_gbs, pull_gbs, pushpull_gbs, pushpipe_gbs;
    double lat_p50_us, lat_p99_us; /* one-row pull */
    double lat_vcsw, lat_ivcsw;    /* its worker's context switches per pull */
    double lat_call_vcsw;          /* sleeps of the calling thread per pull */
    uint32_t busy_workers;         /* workers that ran with busy-poll 1 */
    uint64_t checks, errors;
};

/* Runs one `rkv demo` cluster with demo's flags (argv), quietly: the timed
 * phase's figures in f_p. Returns an RKV_EXIT_* code. */
int cli_demo_measure(const char *self, int argc, char **argv, struct cli_figures *f_p);

/* The limits of this host, measured now: one-stream loopback TCP through
 * 1 MiB read/write (harness/probe_tcp.h), and one core copying blocks of
 * block_bytes (GB/s; 0 if the measurement failed). */
double cli_limit_tcp_gbps(void);
double cli_limit_memcpy_gbps(size_t block_bytes);

/* Seconds on the monotonic clock, for the CLI's own timings (never a
 * node's: those take the port's clock, simulated in the twin). */
double cli_now_s(void);

/* n consecutive free TCP ports on loopback in 20000..23999 (0, or -1). */
int cli_free_ports(uint32_t n, uint16_t *base_p, int *hold);

/* ps-lite's launch (impl/cli/pslite.c): under DMLC_ROLE and without a
 * cluster file, servers and workers register with the scheduler
 * (DMLC_ROLE=scheduler at DMLC_PS_ROOT_URI:DMLC_PS_ROOT_PORT), which gives
 * each its id and the cluster; then they run as `rkv server` / `rkv worker`.
 * The scheduler exits 0 once every node has its place (or at once, saying
 * it is not needed, when a cluster file fixes every address). Each returns
 * an RKV_EXIT_* code. */
int cli_pslite_mode(const struct cli_settings *s);
int cli_pslite_scheduler(const struct cli_settings *s);
int cli_pslite_node(int argc, char **argv, const struct cli_settings *s, int is_server);

int cli_cmd_server(int argc, char **argv);
int cli_cmd_worker(int argc, char **argv);
int cli_cmd_config(int argc, char **argv);
int cli_cmd_node(int argc, char **argv);
int cli_cmd_demo(int argc, char **argv, const char *self);
int cli_cmd_run(int argc, char **argv, const char *self);
int cli_cmd_doctor(int argc, char **argv);
int cli_cmd_ls(int argc, char **argv);
int cli_cmd_bench(int argc, char **argv, const char *self);

/* A server's or worker's port and NIC (impl/cli/node.c): the fault NIC
 * wraps the backend's when the launcher aims a scenario fault at it. */
struct rkv_port;
struct rkv_nic;
struct cli_node {
    struct rkv_port *port;
    struct rkv_nic *nic;
    int faulty;
    struct rkv_trace *trace; /* under `rkv run --trace` (RKV_TRACE_FILE), else NULL */
};
int cli_node_open(const struct cli_settings *s, const struct rkv_config *cfg, const char *node,
                  uint64_t seed, struct cli_node *nd, char *err, size_t err_len);
/* Writes the fault counts for the launcher, then closes NIC and port. */
void cli_node_close(struct cli_node *nd);

/* rkv run --backend sim: the scenario in the twin (impl/cli/twin_cmd.c). */
struct rkv_scenario;
/* What `rkv run` passes to the twin beyond the settings. */
struct cli_twin_args {
    const char *trace;      /* --trace FILE, or NULL */
    const char *const *cfg; /* --cfg KEY:VALUE, n_cfg of them: SimGrid configuration */
    unsigned n_cfg;
    double progress_s; /* --progress S: a progress line every S s of wall time (0: 10) */
};
int cli_run_twin(struct rkv_scenario *sc, const struct cli_settings *s, const char *out_dir,
                 int plot, const struct cli_twin_args *a);
#if RKV_WITH_SIM
/* The verdict of a twin run, as rkv run gives it (rkv_report_passed). */
struct rkv_report;
struct rkv_twin_result;
int cli_twin_report(struct rkv_report *r, const struct rkv_scenario *sc,
                    const struct rkv_twin_result *res);
#endif

/* rkv swarm: generated scenarios in the twin, shrunk on failure (impl/cli/swarm.c). */
int cli_cmd_swarm(int argc, char **argv);

#endif
