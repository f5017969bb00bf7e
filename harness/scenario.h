/* Scenario files: one YAML file describes a cluster and a multi-node
 * push/pull/barrier workload that every backend runs with the same oracle.
 * The format is documented in scenarios/README.md. */
#ifndef RKV_SCENARIO_H
#define RKV_SCENARIO_H

#include <stddef.h>
#include <stdint.h>

#include "rkv.h"

#define RKV_SC_MAX_TENSORS 32
#define RKV_SC_MAX_PHASES 256
#define RKV_SC_MAX_SHAPE 4
#define RKV_SC_MAX_FAULTS 32
/* Room for the report's line of what the faults did: up to ~100
 * characters a fault ("s16383.255 crashed at 3599.999999 s (machine
 * lost), restarted at ..."); 1,024 cut a run of 32 off at the 20th, and
 * its "not every fault fired" pointed at a line that did not say which. */
#define RKV_SC_FAULTS_TEXT (RKV_SC_MAX_FAULTS * 128 + 256)
/* What the oracle may keep (each worker's, or the twin's one): its state
 * for every row of every tensor, 8 B per element, 12 B per row per worker
 * that assigns it, ~36 B per row more (harness/oracle.c); the twin holds
 * the shards beside it in its one process. scenarios/README.md. */
#define RKV_SC_MAX_ORACLE_BYTES (8ull << 30)
/* A phase's request: ids_per_request rows (twice that for with_state
 * pulls), at most the store's default max_slot_bytes, its largest message;
 * each worker holds two such buffers. */
#define RKV_SC_MAX_REQUEST_BYTES (1ull << 30)

enum rkv_sc_keys {
    RKV_KEYS_UNIFORM = 1,
    RKV_KEYS_ZIPF,
    RKV_KEYS_SEQUENTIAL,
    RKV_KEYS_LOCAL_ONLY,
    RKV_KEYS_REMOTE_ONLY,
};

/* A position in the scenario file, 1-based; line 0: none (a built-in
 * scenario, or a check about the whole file). */
struct rkv_sc_mark {
    uint32_t line, col;
};

struct rkv_sc_tensor {
    struct rkv_tensor_desc desc; /* book points into book_pattern expanded by the loader */
    uint32_t shape[RKV_SC_MAX_SHAPE];
    uint32_t n_shape;
    uint32_t *book; /* explicit partition, rows entries (owned) */
    /* A user-given local order (explicit only; desc.local_index points at
     * local): none, seeded permutation of each machine's rows, or a file. */
    enum { RKV_SC_LOCAL_BOOK = 0, RKV_SC_LOCAL_PERMUTED, RKV_SC_LOCAL_FILE } local_order;
    uint64_t local_seed;     /* permuted (0: the scenario's seed) */
    char local_file[256];    /* file: rows whitespace-separated indices, relative to the scenario */
    uint64_t *local;         /* rows entries (owned), or NULL */
    struct rkv_sc_mark mark; /* the tensor's first key */
};

struct rkv_sc_phase {
    char name[64];
    uint32_t tensor;      /* index into tensors */
    double push_fraction; /* of requests; the rest are pulls */
    int push_op;          /* RKV_OP_ASSIGN / SUM / SGD */
    double lr;            /* sgd */
    uint32_t ids_per_request;
    enum rkv_sc_keys keys;
    double zipf_s;
    uint32_t rounds; /* requests per worker */
    int barrier_after;
    uint32_t think_us;
    int pull_handler; /* RKV_PULL_ROWS, or RKV_PULL_WITH_STATE (rkv_client_pull_with) */
    struct rkv_sc_mark mark, push_op_mark; /* the phase's first key; push_op's value */
    struct rkv_sc_mark keys_mark;          /* keys' value (line 0: not given) */
    struct rkv_sc_mark barrier_mark;       /* barrier_after's value (line 0: not given) */
    struct rkv_sc_mark ids_mark;           /* ids_per_request's value (line 0: not given) */
};

/* A fault's fields, in the order of the loader's table (for marks). */
enum rkv_sc_fault_field {
    RKV_SC_F_KIND,
    RKV_SC_F_TARGET,
    RKV_SC_F_AT_S,
    RKV_SC_F_FRACTION,
    RKV_SC_F_AFTER_PHASE,
    RKV_SC_F_DURATION_S,
    RKV_SC_F_DELAY_MS,
    RKV_SC_F_RETRANSMIT_MS,
    RKV_SC_F_FACTOR,
    RKV_SC_F_RESTART_AFTER_S,
    RKV_SC_F_MACHINE_LOST,
    RKV_SC_F_COUNT_
};

struct rkv_sc_fault {
    char kind[32]; /* crash | drop | delay | link_down | slow_cpu */
    char target[32];
    double at_s;             /* seconds from the start (simulated in the twin) */
    char after_phase[64];    /* crash: or once client 0 finished this phase ("" = use at_s) */
    uint32_t after_phase_ix; /* its index, resolved at load */
    double fraction;         /* drop, delay: share of messages */
    double duration_s;       /* drop, delay, slow_cpu: 0 = to the end; link_down: > 0 */
    double delay_ms;         /* delay: how long a delayed message waits */
    double retransmit_ms;    /* drop, link_down: the transport's retransmission interval */
    double factor;           /* slow_cpu: CPU work takes this many times longer */
    double restart_after_s;  /* crash of a server: start it again this long after */
    int machine_lost;        /* crash of a server: its machine's shared memory goes too */
    struct rkv_sc_mark mark; /* the fault's first key */
    struct rkv_sc_mark field_mark[RKV_SC_F_COUNT_]; /* each given field's value */
};

struct rkv_scenario {
    char path[256];
    uint64_t seed;
    uint32_t machines, servers_per_machine, workers_per_machine;
    uint32_t workers_total; /* 0: machines x workers_per_machine (built-in runs may be uneven) */
    struct rkv_sc_mark workers_mark; /* cluster.workers given: fewer workers than slots */
    int durable;                     /* cluster.durable: servers acknowledge pushes once on disk */
    uint32_t retry_ms;               /* cluster.retry_ms: workers retry requests to a dead server */
    struct rkv_sc_tensor tensors[RKV_SC_MAX_TENSORS];
    uint32_t n_tensors;
    struct rkv_sc_phase phases[RKV_SC_MAX_PHASES];
    uint32_t n_phases;
    struct rkv_sc_fault faults[RKV_SC_MAX_FAULTS];
    uint32_t n_faults;
    int oracle_strict;
    double expect_min_gbps; /* 0 = no bound; reported, never asserted */
    double expect_max_p99_us;
    uint32_t tcp_base_port; /* 0 = pick free ports */
    /* The twin (sim/README.md): 0 / "" mean the documented defaults. */
    char sim_platform[64];       /* star, cluster, fattree, fattree3, rail or loopback */
    char sim_platform_file[256]; /* a SimGrid platform XML instead (relative to the file) */
    struct rkv_sc_mark sim_platform_file_mark; /* its value, for the twin's errors */
    double sim_bandwidth_gbps, sim_latency_us, sim_jitter;
    double sim_backbone_gbps; /* cluster: the shared backbone */
    /* platform: {topology: fattree3 | rail, ...}; 0 = the default (sim/README.md) */
    uint32_t sim_leaf_machines;   /* machines under a leaf (rail: of one scalable unit) */
    uint32_t sim_pod_leaves;      /* fattree3: leaves per pod */
    uint32_t sim_rails;           /* rail: NICs per machine, a leaf per rail and unit */
    double sim_oversub;           /* a leaf's downlink over uplink capacity */
    double sim_pod_oversub;       /* fattree3: a pod's, towards the core */
    double sim_uplink_latency_us; /* each switch-to-switch link */
    uint32_t sim_cores;           /* per machine (loopback: of the one host they all share) */
    int sim_payloadless;          /* thin rows; the network is charged the declared ones */
    double sim_row_cost_ns;       /* server CPU per row a handler touches */
    double sim_msg_cost_ns;       /* CPU per message posted or completed */
    double sim_send_byte_ns;      /* CPU per byte sent, on the sender */
    double sim_recv_byte_ns;      /* CPU per byte received, on the receiver's NIC */
    double sim_copy_byte_ns;      /* a warm copy: the twin's own slower copies are charged */
    int sim_cpu_measured;   /* charge node code's measured CPU (calibration, sim/backend/cpu.c) */
    int sim_sched_cores;    /* scheduler: cores (per-core run queues, sim/backend/cpu.c) */
    double sim_wake_us;     /* queue: a core that sat idle takes this to run a thread */
    int sim_fairbottleneck; /* network/solver:fairbottleneck (same times, faster at scale) */
    char verbs_device[32];
    uint32_t verbs_port, verbs_gid_index;
};

/* Loads and validates a scenario. On error returns -RKV_ECONFIG with
 * "file:line:col: what: expected ..., got ..." in err. */
int rkv_scenario_load(const char *path, struct rkv_scenario **sc_p, char *err, size_t err_len);
void rkv_scenario_free(struct rkv_scenario *sc);
/* Writes "path:line:col: " (or "path: " when m has no line) into buf;
 * returns its length. Checks made after loading name positions with it. */
int rkv_scenario_where(const struct rkv_scenario *sc, struct rkv_sc_mark m, char *buf, size_t len);

/* The request and oracle limits (RKV_SC_MAX_*) for rows of one element
 * (thin: the twin's payloadless runs) or the declared ones (a real
 * backend, which ignores payloadless); the loader checks the twin's. */
int rkv_scenario_check_size(const struct rkv_scenario *sc, int thin, char *err, size_t err_len);

uint32_t rkv_scenario_workers(const struct rkv_scenario *sc);
/* The machine worker w runs on (the twin, the launcher and the oracle agree). */
uint32_t rkv_scenario_worker_machine(const struct rkv_scenario *sc, uint32_t w);
/* The workload `rkv demo` and a scenario-less `rkv worker` run, for the
 * cluster of cfg: sum, sgd, i64 sum, contested and owned assigns over range,
 * hash and explicit partitions, every value checked by the same oracle. */
int rkv_scenario_builtin(const struct rkv_config *cfg, uint64_t rows, uint32_t rounds,
                         struct rkv_scenario **sc_p);
uint32_t rkv_scenario_servers(const struct rkv_scenario *sc);

struct rkv_nic_fault;
/* The drop / delay / link_down faults aimed at node (s<m>.<l> or w<k>), as
 * the fault NIC takes them (impl/nic/nic_fault.h); returns how many. */
uint32_t rkv_scenario_nic_faults(const struct rkv_scenario *sc, const char *node,
                                 struct rkv_nic_fault *out, uint32_t max);
/* The seed of node's fault NIC (s<m>.<l> or w<k>) in a run of seed: the
 * same on every backend, and each node's its own (servers in machine
 * order, then workers), so that a file's drops and delays fall on the
 * same messages run after run and tcp draws what the twin draws. */
uint64_t rkv_scenario_fault_seed(const struct rkv_scenario *sc, const char *node, uint64_t seed);
/* Where fault i (drop, delay or link_down) is in its node's list from
 * rkv_scenario_nic_faults (the index of its counts in the wrapper's
 * stats.acted); UINT32_MAX for other kinds. */
uint32_t rkv_scenario_nic_fault_index(const struct rkv_scenario *sc, uint32_t i);
/* The slow_cpu factor of node at scenario time t_s (1 when none applies). */
double rkv_scenario_cpu_factor(const struct rkv_scenario *sc, const char *node, double t_s);

#endif
