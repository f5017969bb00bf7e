/* The twin: runs a scenario with every server and worker as SimGrid actors
 * in this process, over a modelled network (sim/README.md). */
#ifndef RKV_TWIN_H
#define RKV_TWIN_H

#include <stdint.h>

#include "harness/launch.h"
#include "harness/scenario.h"
#include "rkv.h"

struct rkv_twin_opts {
    const char *trace_path; /* Chrome trace JSON, or NULL */
    int log_level;
    double max_sim_s;          /* 0: 3600 simulated seconds */
    uint64_t test_corrupt_row; /* rkv_config's oracle self-test hook (UINT64_MAX: off) */
    double progress_s;         /* a progress line on stderr this often (wall s); 0: 10; < 0: off */
    /* Stop with an error (exit 3) when the host's available memory falls
     * below this many MiB; 0: 2 % of its memory, at least 256 MiB. */
    uint64_t mem_floor_mib;
    /* SimGrid configuration passed through ("KEY:VALUE", as SimGrid's
     * --cfg), applied after the twin's own so that they override them. */
    const char *const *cfg;
    uint32_t n_cfg;
    /* The store's own settings, as rkv_cmd_build_config makes them from rkv
     * run's flags and RKV_* variables: timeouts, retries (the scenario's
     * retry_ms already merged), buffer and slot sizes, zero-copy, busy
     * polling, the secret file. NULL: rkv.h's defaults and the scenario's
     * retry_ms. The twin keeps what is its own: machines, hosts, ports,
     * backend, shm and durable names, seed, log level. */
    const struct rkv_config *store;
    unsigned store_set; /* RKV_LAUNCH_SET_* (harness/launch.h) */
};

struct rkv_twin_result {
    char **outs; /* per worker: its PHASE/FIRSTERR lines (rkv_report_collect) */
    uint32_t n_workers;
    int nodes_ok;         /* every node ended without a store error */
    double sim_s;         /* simulated time at the end */
    double wall_s;        /* of simgrid_run */
    uint64_t events;      /* deliveries */
    uint64_t hash;        /* of the ordered event log: same scenario + seed => same hash */
    uint64_t bytes;       /* modelled on the network */
    double cpu_s;         /* measured CPU charged to the nodes (sim: cpu measured) */
    double cpu_total_s;   /* every CPU charge: node code, kernel per message and byte */
    int sched_cores;      /* the cores were per-core run queues (sim: scheduler: cores) */
    uint64_t sched_wakes; /* of it: bursts that found their core idle (wake_us each) */
    char error[512];      /* why nodes_ok is 0 */
    /* Crash faults: what died when; survivors that ended on a store error
     * (requests to the dead node fail with a named error, not a hang). */
    uint32_t crashed, survivor_errors;
    /* NIC and CPU faults: each touched something; connections they broke. */
    int faults_fired;
    uint32_t crash_faults, restarted;
    uint32_t restarts_missed; /* servers down at the end whose crash asked for a restart */
    uint64_t broken;
    char faults[RKV_SC_FAULTS_TEXT];
    char survivor_error[320]; /* the first survivor's error, as an example */
    char trace_error[320];    /* --trace could not be written (empty: it was, or none) */
};

/* Runs sc (may be called once per process: SimGrid cannot be re-initialised). */
int rkv_twin_run(const struct rkv_scenario *sc, const struct rkv_twin_opts *o,
                 struct rkv_twin_result *res);
void rkv_twin_result_free(struct rkv_twin_result *res);

/* Writes the platform of sc as SimGrid XML into path; exposed for tests. */
int rkv_twin_platform_xml(const struct rkv_scenario *sc, const char *path, char *err,
                          size_t err_len);

/* Makes malloc give every chunk of 128 KiB or more (an actor's stack,
 * which SimGrid callocs) a mapping of its own, however many; for the
 * run's process, called by rkv_twin_run; exposed for tests. */
void rkv_twin_stacks_mmapped(void);

/* Whether the memory mappings of up to `actors` actor stacks with a guard
 * of guard_bytes fit under max_map_count (vm.max_map_count; 0: unknown,
 * not checked): 0, or -RKV_ECONFIG with what to do in err. Checked before
 * any actor is made; exposed for tests. */
int rkv_twin_maps_check(uint64_t actors, int guard_bytes, uint64_t max_map_count, char *err,
                        size_t err_len);

#endif
