/* The twin's internals: one simulated world (SimGrid platform + every node
 * of the cluster as actors in this process), the SimGrid port and NIC
 * backends, and the event log that makes runs comparable (hash, trace).
 *
 * Everything lives in struct sim_world, reached from each node's port or
 * NIC: SimGrid runs every node in one process, so a global would be shared
 * by all of them (DESIGN.md, rules for the twin). */
#ifndef RKV_SIM_H
#define RKV_SIM_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include <simgrid/host.h>

#include "nic/nic.h"
#include "port/port.h"
#include "sim/backend/at.h"

struct sim_shm;
struct sim_listener;
struct sim_nic;
struct sim_nic_rx;
struct sim_pcq;
struct sim_ps;
struct sn_msg;
struct sim_pcq_actor;
struct sim_waiter;

/* Turns the bytes a message really carries into the bytes the network is
 * charged for (payload-less runs carry thin rows but model the full ones). */
typedef uint64_t (*sim_sizer_fn)(void *user, const void *buf, uint32_t len);

struct port_hostmem;

struct sim_world {
    uint64_t seed;
    double jitter;      /* extra delivery delay, fraction of the message's own network time */
    double msg_cpu_s;   /* CPU charged per data message posted and per one received (0: free) */
    double row_cost_ns; /* CPU a server handler spends per row */
    /* CPU per byte of a message: the sender's (charged when posting) and the
     * receiver's (charged by its NIC actor, the progress thread's read). */
    double send_byte_ns, recv_byte_ns;
    double copy_byte_ns; /* what a warm copy costs: the NIC's copies beyond it are CPU */
    /* Measured CPU (sim/backend/cpu.c): node code's real time between SimGrid calls
     * is charged as work on its host. */
    int cpu_measured;
    uint64_t cpu_stamp_ns;        /* when the running node came back from SimGrid (0: not yet) */
    uint64_t cpu_thread_stamp_ns; /* this thread's CPU clock then (sim/backend/cpu.c) */
    double cpu_charged_s;         /* node code in all, for the report */
    double cpu_total_s;           /* every charge: node code, kernel per message and byte */
    /* The cores as per-core run queues (sim/backend/cpu.c; 0: shared). */
    int sched_cores;
    /* Shared cores: rkv's processor sharing (cpu.c, "the cores shared")
     * where it gives SimGrid's shares, else SimGrid's CPU model. */
    int cpu_share;
    struct sim_ps *pss;
    double sched_wake_s; /* a core that sat idle takes this to run a thread */
    uint64_t sched_wakes;
    struct sim_pcq *pcqs;
    struct sim_pcq_actor *sched_actors; /* by actor pid */
    uint32_t sched_actor_cap;
    uint64_t cpu_bursts;
    /* Messages above 1 KiB and up to this many bytes (0: none) between
     * two hosts are serialized on their machines' links in post order
     * instead of taking a max-min share (nic_sim.c, "mid-size messages"):
     * set by the twin where the endpoints are the only contention (star,
     * non-blocking fat tree). mid_tx_free and mid_rx_free hold, by machine,
     * when its link is free to send the next one and when the last one
     * arrived. */
    uint32_t mid_max_bytes;
    /* Mid-size messages queue on every link of their route instead
     * (route_fifo.h): set by the twin where inner links are shared too
     * (an oversubscribed fat tree, rails, a backbone); made on first use. */
    int mid_route;
    struct sim_route_fifo *route_fifo;
    /* The NICs offer a shared receive pool (nic.h srq_setup), as verbs
     * does: set by the twin for payload-less runs, where thousands of
     * connections per node would each hold their own receive buffers. */
    int srq;
    /* The NICs say every send is inline (nic.h qp_inline_bytes; the sim
     * NIC copies each at post), so the engine asks no completion for it:
     * set by the twin for payload-less runs, where that completion woke the
     * sender once per message for nothing. Off elsewhere: the NIC suites
     * test the completions, and with measured CPU handling them is CPU. */
    int sends_inline;
    double *mid_tx_free, *mid_rx_free;
    uint32_t mid_cap;
    /* SimGrid transfers ever posted (nic_sim.c). Waiters suspend
     * themselves instead of taking a semaphore (cv.c) only while there
     * were none: a suspended actor's activities are suspended with it, and
     * a put stays on its poster's activity list until the poster reaps it,
     * after delivery (one reaped late hung the twin: swarm seed 239). */
    uint64_t comms_posted;
    /* No actor is killed before the run's end (the twin without faults):
     * waiters may suspend their actors (cv.c). */
    int park_ok;
    /* Small messages kept for reuse (sim/backend/nic_sim.c, sn_msg_new). */
    struct sn_msg *msg_pool;
    uint32_t msg_pool_len;
    /* Condition-variable waiters kept for reuse (sim/backend/cv.c). */
    struct sim_waiter *waiter_pool;
    uint32_t waiter_pool_len;
    /* Wake-ups actors gave, for maestro to hand out once the instant's
     * running actors are done (sim/backend/cv.c, cv_wake): wake_timer is
     * the callback set for it (NULL: none). */
    struct sim_waiter *wake_head, *wake_tail;
    struct sim_at *wake_timer;
    struct sim_ats ats; /* callbacks at dates, behind one kernel timer */
    sim_sizer_fn sizer; /* NULL: the network sees the real length */
    void *sizer_user;
    /* Registries (looked up by name, never iterated by pointer order). */
    struct sim_listener **listeners; /* open hash on "host:port" */
    uint32_t listener_cap;           /* buckets: doubled to stay >= n_listeners */
    uint32_t n_listeners;
    /* Each NIC's listeners (by NIC id, nic_listener_cap entries), so that a
     * closing NIC unlinks its own instead of walking every bucket: that
     * walk, once per node, was O(nodes^2) at the end of a large run. */
    struct sim_listener **nic_listeners;
    uint32_t nic_listener_cap;
    struct sim_shm *shms;
    /* shms by name (SIM_SHM_BUCKETS chains, made with the first segment):
     * every node looks its machine's segments up, among 2 per machine. */
    struct sim_shm **shm_buckets;
    /* Where the segments' pages come from without measured CPU
     * (port_sim.c sp_shm_arena): one reservation, bump-allocated. */
    char *shm_arena;
    size_t shm_arena_len, shm_arena_used;
    int shm_arena_tried;
    struct sim_nic **nics; /* index = NIC id */
    uint32_t n_nics, nic_cap;
    /* The NICs' shared receive units, by machine (sim/backend/nic_sim.c);
     * nic_rx_live counts every unit, shared or a NIC's own. */
    struct sim_nic_rx **nic_rx;
    uint32_t nic_rx_cap, nic_rx_live;
    void (*nic_rx_release)(struct sim_world *w); /* at the end, after nic_free */
    /* What sim_world_fini calls to free the shm segments and NICs: set by
     * the port and NIC backends that fill shms and nics. The world is the
     * bottom of the simulated backends (world < port < NIC) and names
     * neither. */
    void (*shm_free_all)(struct sim_world *w);
    void (*nic_free)(struct sim_nic *n);
    /* Event log: every delivery, in simulated order. */
    uint64_t hash;
    uint64_t events;
    uint64_t bytes_modelled;
    FILE *trace; /* Chrome trace JSON, or NULL */
    int trace_started;
    /* Progress on long runs: a line on stderr every progress_s of wall
     * time (0: never), checked as events are logged. */
    double progress_s, progress_last_s;
    /* The memory floor (sim_world_event): when the memory left to this
     * process (the host's MemAvailable, or its memory cgroup's headroom,
     * the smaller) falls below mem_floor_bytes (0: not watched), mem_low
     * is called, which does not return (the twin says so and exits): the
     * kernel's OOM killer ended a run past the host's memory with SIGKILL
     * and no word. */
    uint64_t mem_floor_bytes;
    double mem_last_s;
    int mem_near;       /* under 8 floors left at the last read: read more often */
    uint32_t mem_ticks; /* sim_world_mem_tick's calls */
    void (*mem_low)(struct sim_world *w, const struct port_hostmem *m);
    /* Called on the next event once sim_world_signo is set, and does not
     * return (the twin closes its trace and ends by the signal): the
     * simulation has no other place where a Ctrl-C can stop it between
     * two events. NULL: the signal is not looked at. */
    void (*on_signal)(struct sim_world *w, int signo);
    uint32_t nodes_total, nodes_finished;
    /* Nodes' log lines folded by shape (port_sim.c, sp_vlog): set by the
     * twin at its default log level, where 16,384 servers each said they
     * stopped. NULL: every line printed. */
    struct sim_log_fold *log_fold;
};

/* A stopping signal (SIGINT, SIGTERM, SIGHUP) that arrived, or 0: set by
 * the twin's handler (the only thing a handler may do), read by
 * sim_world_event. */
extern volatile sig_atomic_t sim_world_signo;

int sim_world_init(struct sim_world *w, uint64_t seed);
void sim_world_fini(struct sim_world *w);
/* Mixes one event into the run's hash (order-sensitive). */
void sim_world_event(struct sim_world *w, const uint64_t *v, int n);
/* Reads the memory left now and calls mem_low below the floor (set up
 * before the run's events: a big cluster's setup takes memory too). */
void sim_world_mem_check(struct sim_world *w);
/* sim_world_mem_check every 64 calls: from what a starting node does
 * (spawn, NIC open, task start), where no network event happens yet. */
void sim_world_mem_tick(struct sim_world *w);
/* Wall-clock seconds (CLOCK_MONOTONIC): progress lines and the report. */
double sim_world_wall(void);
/* One complete ("X") event in the Chrome trace; no-op without a trace. */
void sim_world_trace(struct sim_world *w, const char *name, const char *cat, uint32_t pid,
                     uint32_t tid, double t0_s, double t1_s, uint64_t bytes);
void sim_world_trace_name(struct sim_world *w, uint32_t pid, uint32_t tid, const char *name);
/* Names trace process pid (a machine) and sorts it by pid. */
void sim_world_trace_process(struct sim_world *w, uint32_t pid, const char *name);

/* ---- port ---- */
/* A node on `host`; `machine`/`tid` name it in traces. */
/* Nodes' log lines of one shape (the line with its numbers taken out) are
 * printed SIM_LOG_FOLD_SHOWN times; the rest are counted, and
 * sim_log_fold_end prints one line per shape for them. */
#define SIM_LOG_FOLD_SHOWN 3
int sim_log_fold_start(struct sim_world *w);
void sim_log_fold_end(struct sim_world *w);
/* One line (no newline) as node's, at level, folded as a port's are; not
 * filtered by level (the caller's). */
void sim_world_log_line(struct sim_world *w, int level, const char *node, const char *msg);

int sim_port_create(struct sim_world *w, sg_host_t host, const char *node, int log_level,
                    uint64_t seed, uint32_t machine, uint32_t tid, struct rkv_port **port_p);
struct sim_world *sim_port_world(struct rkv_port *p);
sg_host_t sim_port_host(struct rkv_port *p);
/* The node's address (host name in listen/connect); by default its host's
 * name. Nodes of different machines on one shared host set their machine's. */
void sim_port_set_addr(struct rkv_port *p, const char *addr);
const char *sim_port_addr(struct rkv_port *p);
uint32_t sim_port_machine(struct rkv_port *p);
uint32_t sim_port_tid(struct rkv_port *p);

/* ---- NIC ---- */
extern const struct rkv_nic_ops rkv_nic_sim_ops; /* open() takes the port's world and host */
/* Before the run: machine's NICs will share one receive unit (2 actors) on
 * host, when delivering costs no CPU (else each NIC gets its own). Made
 * here, outside any actor, its start takes no turn from the nodes: made by
 * a machine's first NIC, it let the nodes without one connect before the
 * server listened. A unit not made here is made by the first NIC. */
int sim_nic_rx_prepare(struct sim_world *w, uint32_t machine, sg_host_t host);

#endif
