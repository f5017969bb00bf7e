/* The rkv command line: its commands, their flags, help and printing. The
 * settings are cli/settings.h; what the commands run is in harness/ (the
 * launcher, the measuring tools) and sim/ (the twin). */
#ifndef RKV_CLI_H
#define RKV_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "api/config.h"
#include "harness/launch.h"
#include "rkv.h"

/* ps-lite's launch, the node's side (impl/cli/pslite.c; the scheduler and
 * the rendezvous are harness/pslite.c): registers, then runs as `rkv
 * server` / `rkv worker` in the place the scheduler gave. */
int cmd_pslite_node(int argc, char **argv, const struct cmd_settings *s, int is_server);

/* 0, or -1 said on stderr (who: "rkv node") when a flag sets what `rkv
 * node --scenario` takes from the file and the launcher's rank (machines,
 * servers, workers, machine and server id, the workload's sizes). */
int cmd_node_refuse_owned(const struct cmd_settings *s, const char *who);

/* 0, or -1 said on stderr when a worker given --scenario is also given a
 * flag of the built-in workload (rows, value-bytes, rounds), which the
 * file's workload replaces. */
int cmd_worker_refuse_workload(const struct cmd_settings *s, const char *who);

int cmd_server(int argc, char **argv);
int cmd_worker(int argc, char **argv);
int cmd_config(int argc, char **argv);
int cmd_node(int argc, char **argv);
int cmd_demo(int argc, char **argv, const char *self);
int cmd_run(int argc, char **argv, const char *self);
int cmd_doctor(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_bench(int argc, char **argv, const char *self);

/* A server's or worker's port and NIC (impl/cli/node.c): the fault NIC
 * wraps the backend's when the launcher aims a scenario fault at it. */
struct rkv_port;
struct rkv_nic;
struct cmd_node {
    struct rkv_port *port;
    struct rkv_nic *nic;
    int faulty;
    struct rkv_trace *trace; /* under `rkv run --trace` (RKV_TRACE_FILE), else NULL */
};
int cmd_node_open(const struct cmd_settings *s, const struct rkv_config *cfg, const char *node,
                  uint64_t seed, struct cmd_node *nd, char *err, size_t err_len);
/* Writes the fault counts for the launcher, then closes NIC and port. */
void cmd_node_close(struct cmd_node *nd);

/* rkv run --backend sim: the scenario in the twin (impl/cli/twin_cmd.c). */
struct rkv_scenario;
/* What `rkv run` passes to the twin beyond the settings. */
struct cmd_twin_args {
    const char *trace;      /* --trace FILE, or NULL */
    const char *const *cfg; /* --cfg KEY:VALUE, n_cfg of them: SimGrid configuration */
    unsigned n_cfg;
    double progress_s;      /* --progress S: a progress line every S s of wall time (0: 10) */
    double max_sim_s;       /* --max-sim-s S: the run's end in simulated time (0: 3600) */
    uint64_t mem_floor_mib; /* --mem-floor-mib N: stop when the host or cgroup has less left (0:
                               default) */
};
int cmd_run_twin(struct rkv_scenario *sc, const struct cmd_settings *s, const char *out_dir,
                 int plot, const struct cmd_twin_args *a);
/* The twin as the tools' runner (rkv_launch_twin_fn, sim/twin/twin_report.h),
 * or NULL in a build without the twin. */
#if RKV_WITH_SIM
#include "sim/twin/twin_report.h"
#define CMD_TWIN rkv_twin_launch
#else
#define CMD_TWIN NULL
#endif

/* rkv swarm: generated scenarios in the twin, shrunk on failure (harness/swarm_run.c). */
int cmd_swarm(int argc, char **argv);

/* rkv calibrate */
int cmd_calibrate(int argc, char **argv, const char *self);
/* rkv run FILE --predict | --calibration F (impl/cli/predict.c) */
int cmd_predict_wanted(int argc, char **argv);
int cmd_predict(int argc, char **argv, const char *self);

#endif
