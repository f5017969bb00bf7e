/* The twin's driver: deploys a scenario's servers and workers as SimGrid
 * actors (one host per machine), each with its own simulated port and NIC,
 * runs the unchanged store and workload engine, and gathers what the real
 * backends' processes would have printed. */
#include <assert.h>
#include <malloc.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <errno.h>

#include <simgrid/actor.h>
#include <simgrid/engine.h>
#include <simgrid/host.h>
#include <simgrid/link.h>
#include <simgrid/mailbox.h>
#include <xbt/config.h>
#include <xbt/dynar.h>
#include <xbt/log.h>

#include "harness/child_exit.h"
#include "harness/client_stats.h"
#include "harness/oracle.h"
#include "harness/reaper.h"
#include "port/hostmem.h"
#include "port/port_file.h"
#include "nic/nic_fault.h"
#include "harness/workload.h"
#include "proto/proto.h"
#include "sim/backend/sim.h"
#include "sim/backend/sim_int.h"
#include "sim/twin/sim_plat.h"
#include "sim/twin/twin.h"
#include "store/cluster.h"
#include "store/server_int.h"
#include "util/util.h"

#define TWIN_BASE_PORT 7000

struct twin;

struct twin_node {
    struct twin *t;
    int is_server;
    uint32_t machine, local, tid;
    char name[32];
    char *out; /* workers: PHASE lines */
    size_t out_len;
    int rc;
    int finished;
    double end_s; /* simulated time when the node finished */
    char err[256];
    struct rkv_port *port;     /* while the node runs: what a crash fault kills */
    int crashed;               /* by a fault (1), or stopped by the twin after the workers (2) */
    uint32_t client_id;        /* workers: the id server 0 gave it (names are spawn order) */
    struct rkv_nic *fault_nic; /* drop / delay / link_down aimed at it, else NULL */
    struct rkv_nic_fault_stats fst; /* its counts, summed over its lives (twin_take_fault_stats) */
    uint64_t slowed_rows;           /* slow_cpu: rows handled while slowed */
    const struct rkv_sc_fault *fault; /* the crash fault that killed it last */
};

/* One crash fault that fired: a node may crash, come back and crash again
 * (durable servers with restart_after_s), and each counts. */
struct twin_crash {
    uint32_t node;
    double crash_s, restart_s; /* restart_s < 0: not (yet) restarted */
    const struct rkv_sc_fault *f;
};

struct twin {
    const struct rkv_scenario *sc;
    struct sim_world w;
    struct rkv_config cfg;
    struct rkv_machine *machines;
    /* Built once from machines for every node (cfg.shared): N nodes'
     * copies of an M-machine table would be N x M in this one process. */
    struct rkv_cluster *cluster;
    struct twin_node *nodes;
    uint32_t n_nodes, n_servers, n_workers;
    int log_level;
    uint64_t test_corrupt_row;
    /* One for all workers: one replay, not one per worker. NULL with
     * measured CPU: each worker then has its own, as each real worker
     * process does (twin_run). */
    struct rkv_oracle *oracle;
    int32_t client0_phase; /* last phase client 0 finished (-1: none): after_phase faults */
    /* Broadcast when client 0 ends a phase or a worker ends: the fault
     * actor waits on it for both, and wakes for nothing else. */
    struct sim_cv phase_cv;
    uint64_t fault_wakes; /* the fault actor's wake-ups on phase_cv */
    /* Payload-less: the store carries thin rows, the network sees these. */
    uint64_t declared_row_bytes[RKV_SC_MAX_TENSORS + 1]; /* by tensor id (1-based) */
    char **sg_argv; /* simgrid_init's arguments, sg_argc of them (owned) */
    int sg_argc;
    char **sg_view;      /* the array simgrid_init was given (it reorders it; kept for the run) */
    double max_sim_s;    /* the run's end in simulated time (twin_limit) */
    int limit_hit;       /* nodes were still running at max_sim_s */
    int servers_stopped; /* twin_faults ended the run: a restart due later is not made */
    int stopper_made;    /* twin_worker_ended made the stopper */
    /* Nodes below it are servers or ended workers (twin_workers_done):
     * each worker's end scanned every node from the first, 49,152 scans of
     * up to 65,536 nodes at the end of a 65,536-node run. */
    uint32_t workers_done_below;
    /* Where a worker's phase stats are made whole for the report: one for
     * all workers, who hand over one at a time (actors of one thread, and
     * twin_on_stats makes no simcall). */
    struct rkv_wl_phase_stats *hand_over;
    struct rkv_reaper reaper; /* a durable run's directory reaper (twin_reap) */
    /* The crashes that fired, in order: at most one per crash fault. A
     * node's own record kept only its last, and a server crashed and
     * restarted twice read "not every fault fired". */
    struct twin_crash *crashes;
    uint32_t n_crashes;
    const char *trace_path;      /* --trace, or NULL */
    int sim_started;             /* simgrid_run was called: the clock means something */
    struct sigaction sig_old[3]; /* the stopping signals' handlers before the run */
    /* The workers' log (what a tcp worker prints on stderr: "rkv: client N
     * stopped: ..."), one stream for all of them (twin_lines_open says why
     * not one each), its lines folded as the nodes' log lines are: 3,049
     * such lines at 3,072 workers were printed one by one (an outside
     * tester). Line-buffered: an fprintf makes no simcall, so its line is
     * whole before another actor writes. */
    FILE *wlog;
    char wlog_vbuf[512];
    char wlog_line[1024];
    size_t wlog_len;
};

/* The SimGrid host machine m runs on: "m<m>", or the one host every
 * machine shares on the loopback platform (also in a platform file that has
 * no host m<m> but one named SIM_LOOPBACK_HOST, as rkv calibrate writes for
 * a shared host). */
static sg_host_t twin_host(const struct twin *t, uint32_t m)
{
    char host[32];
    sg_host_t h = NULL;
    snprintf(host, sizeof(host), "m%u", m);
    if (strcmp(t->sc->sim_platform, "loopback") != 0 || t->sc->sim_platform_file[0])
        h = sg_host_by_name(host);
    return h ? h : sg_host_by_name(SIM_LOOPBACK_HOST);
}

static double twin_cpu_factor(void *user, double t_s)
{
    struct twin_node *nd = user;
    return rkv_scenario_cpu_factor(nd->t->sc, nd->name, t_s);
}

/* The scenario's faults aimed at this node: its NIC wrapped by the fault
 * NIC, its handlers slowed. */
static int twin_faulty(struct twin_node *nd, struct rkv_port *port, struct rkv_nic **nic)
{
    struct rkv_nic_fault f[RKV_NIC_FAULTS_MAX];
    uint32_t n = rkv_scenario_nic_faults(nd->t->sc, nd->name, f, RKV_NIC_FAULTS_MAX);
    for (uint32_t i = 0; i < nd->t->sc->n_faults; i++)
        if (!strcmp(nd->t->sc->faults[i].kind, "slow_cpu") &&
            !strcmp(nd->t->sc->faults[i].target, nd->name))
            sim_port_set_cpu_factor(port, twin_cpu_factor, nd);
    if (n == 0)
        return 0;
    int rc = rkv_nic_fault_wrap(*nic, f, n,
                                rkv_scenario_fault_seed(nd->t->sc, nd->name, nd->t->sc->seed), nic);
    if (rc == 0)
        nd->fault_nic = *nic;
    return rc;
}

static int twin_open(struct twin_node *nd, struct rkv_port **port, struct rkv_nic **nic)
{
    struct twin *t = nd->t;
    int rc = sim_port_create(&t->w, twin_host(t, nd->machine), nd->name, t->log_level, t->sc->seed,
                             nd->machine, nd->tid, port);
    if (rc < 0)
        return rc;
    sim_port_set_addr(*port, t->machines[nd->machine].host); /* "m<k>", as the config names it */
    sim_port_add_actor(*port, sg_actor_self());
    nd->port = *port;
    if ((rc = rkv_nic_sim_ops.open(*port, NULL, nic)) < 0)
        goto undo_port;
    if ((rc = twin_faulty(nd, *port, nic)) < 0)
        goto undo_nic;
    return 0;
undo_nic:
    (*nic)->ops->close(*nic);
undo_port:
    (*port)->ops->destroy(*port);
    nd->port = NULL;
    return rc;
}

/* What the node's NIC fault did, added to its counts: at a clean close, and
 * before the twin stops the node (a crash fault, a server no SHUTDOWN
 * reached, the run's limit). Taken only at a clean close, they read 0 for
 * a server the twin stopped itself: "0 transmissions lost" under a log of
 * broken connections, and the fault judged not fired. */
static void twin_take_fault_stats(struct twin_node *nd)
{
    if (!nd->fault_nic)
        return;
    struct rkv_nic_fault_stats st;
    rkv_nic_fault_stats(nd->fault_nic, &st);
    nd->fst.messages += st.messages;
    nd->fst.dropped += st.dropped;
    nd->fst.delayed += st.delayed;
    nd->fst.held_down += st.held_down;
    nd->fst.broken += st.broken;
    for (int i = 0; i < RKV_NIC_FAULTS_MAX; i++)
        nd->fst.acted[i] += st.acted[i];
    nd->fault_nic = NULL; /* counted once */
}

static void twin_close(struct twin_node *nd, struct rkv_port *port, struct rkv_nic *nic)
{
    nd->port = NULL;
    twin_take_fault_stats(nd);
    nd->slowed_rows = sim_port_slowed_rows(port);
    nic->ops->close(nic);
    sim_nic_drain(sim_port_nic(port)); /* its last DISCONNECTs must reach the peers */
    port->ops->destroy(port);
}

static void twin_worker_ended(struct twin_node *nd);

static void twin_server(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    struct twin_node *nd = sg_actor_self_get_data();
    struct rkv_port *port;
    struct rkv_nic *nic;
    if ((nd->rc = twin_open(nd, &port, &nic)) < 0)
        return;
    struct rkv_config cfg = nd->t->cfg;
    cfg.machine_id = nd->machine;
    struct rkv_server *srv;
    nd->rc = rkv_server_create_on(port, nic, &cfg, nd->local, &srv, nd->err, sizeof(nd->err));
    if (nd->rc == 0) {
        rkv_server_set_test_corrupt_row(srv, nd->t->test_corrupt_row);
        nd->rc = rkv_server_run(srv);
        if (nd->rc < 0)
            snprintf(nd->err, sizeof(nd->err), "%s", rkv_server_errmsg(srv));
        rkv_server_destroy(srv);
    }
    twin_close(nd, port, nic);
    nd->finished = 1;
    nd->end_s = simgrid_get_clock();
    nd->t->w.nodes_finished++;
}

struct twin_lines;

/* What a worker's workload callbacks reach. */
struct twin_worker_io {
    struct twin *t;
    struct twin_lines *lines; /* the worker's report text */
    int rc;                   /* -RKV_ENOMEM: a line found no memory */
};

static void twin_on_phase(void *user, uint32_t worker, uint32_t phase)
{
    struct twin *t = ((struct twin_worker_io *)user)->t;
    if (worker == 0) {
        t->client0_phase = (int32_t)phase;
        sim_cv_broadcast(&t->phase_cv);
    }
}

/* Clusters larger than this report their clients' counters per operation
 * only, not per server (thousands of workers x servers). */
#define TWIN_STATS_MAX_SERVERS 64u

/* Prints each phase's stats as the workload hands them over: a worker
 * keeps one epoch's histograms, not every phase's. */
static FILE *twin_lines_open(struct twin_lines *l, char *vbuf, size_t vbuf_len);

static void twin_on_stats(void *user, uint32_t worker, uint32_t phase,
                          const struct rkv_wl_phase_stats *st)
{
    struct twin_worker_io *io = user;
    const struct twin *t = io->t;
    /* Payload-less: the store moved thin rows (one element), the network
     * the declared ones; the report's MiB and GB/s are of those (they
     * were of the thin rows: 0.001 GB/s where 17 moved). Not a copy of st
     * with the bytes changed: 8.5 KiB on the worker's stack, pages each of
     * 49,152 workers touched for this alone. */
    uint64_t bytes = st->bytes;
    if (t->w.sizer && phase < t->sc->n_phases) {
        uint32_t ti = t->sc->phases[phase].tensor;
        const struct rkv_sc_tensor *thin = &t->sc->tensors[ti];
        uint64_t thin_row = (uint64_t)thin->desc.row_len * rkv_dtype_size(thin->desc.dtype);
        if (thin_row && t->declared_row_bytes[ti + 1])
            bytes = st->bytes / thin_row * t->declared_row_bytes[ti + 1];
    }
    char vbuf[256];
    FILE *out = twin_lines_open(io->lines, vbuf, sizeof(vbuf));
    if (!out) {
        io->rc = -RKV_ENOMEM;
        return;
    }
    rkv_wl_print_as(out, worker, phase, st, bytes);
    if (fclose(out) != 0)
        io->rc = -RKV_ENOMEM;
}

/* A worker's report lines, gathered for the report as the run goes.
 * Not open_memstream: glibc's starts every stream at BUFSIZ (8 KiB,
 * zeroed) and shrinks it only at fclose, i.e. when the worker ends: 8 KiB
 * per worker for the whole run (400 MB at 65,536 nodes), for about a
 * kilobyte of lines. */
struct twin_lines {
    char *buf;
    size_t len, cap;
};

static ssize_t twin_lines_write(void *cookie, const char *data, size_t n)
{
    struct twin_lines *l = cookie;
    if (l->len + n + 1 > l->cap) {
        size_t cap = l->cap;
        while (cap < l->len + n + 1)
            cap *= 2;
        char *b = realloc(l->buf, cap);
        if (!b)
            return 0; /* stdio's write error: the stream's error flag */
        l->buf = b;
        l->cap = cap;
    }
    memcpy(l->buf + l->len, data, n);
    l->len += n;
    l->buf[l->len] = 0;
    return (ssize_t)n;
}

/* A stream that appends to l, open only while a line is written: glibc
 * links every open stream into one list, and fclose walks it from the
 * newest to find its own. A stream per worker kept open for the run made
 * each worker's fclose walk past every other worker's: quadratic in the
 * workers, a second and more of the run at 65,536 nodes. */
static FILE *twin_lines_open(struct twin_lines *l, char *vbuf, size_t vbuf_len)
{
    cookie_io_functions_t io_fns = {.write = twin_lines_write};
    FILE *out = fopencookie(l, "w", io_fns);
    if (out) /* instead of a BUFSIZ buffer stdio would allocate */
        setvbuf(out, vbuf, _IOFBF, vbuf_len);
    return out;
}

static void twin_wlog_flush(struct twin *t)
{
    if (!t->wlog_len)
        return;
    t->wlog_line[t->wlog_len] = 0;
    sg_actor_t self = sg_actor_self();
    sim_world_log_line(&t->w, RKV_LOG_WARN, self ? sg_actor_get_name(self) : "twin", t->wlog_line);
    t->wlog_len = 0;
}

static ssize_t twin_wlog_write(void *cookie, const char *data, size_t n)
{
    struct twin *t = cookie;
    for (size_t i = 0; i < n; i++) {
        if (data[i] == '\n' || t->wlog_len + 1 >= sizeof(t->wlog_line))
            twin_wlog_flush(t);
        if (data[i] != '\n')
            t->wlog_line[t->wlog_len++] = data[i];
    }
    return (ssize_t)n;
}

static FILE *twin_wlog(struct twin *t)
{
    if (!t->wlog) {
        cookie_io_functions_t io_fns = {.write = twin_wlog_write};
        if ((t->wlog = fopencookie(t, "w", io_fns)))
            setvbuf(t->wlog, t->wlog_vbuf, _IOLBF, sizeof(t->wlog_vbuf));
    }
    return t->wlog ? t->wlog : stderr;
}

static void twin_worker_body(struct twin_node *nd, struct rkv_client *cli, struct rkv_port *port)
{
    const struct rkv_scenario *sc = nd->t->sc;
    struct twin_lines lines = {.buf = calloc(1, 256), .cap = 256};
    if (!lines.buf) {
        nd->rc = -RKV_ENOMEM;
        return;
    }
    struct twin_worker_io io = {.t = nd->t, .lines = &lines};
    uint32_t id = rkv_client_id(cli);
    nd->rc = rkv_wl_run_shared(cli, port, sc, id, twin_wlog(nd->t), nd->t->oracle, twin_on_phase,
                               twin_on_stats, &io, nd->t->hand_over);
    if (nd->rc < 0)
        snprintf(nd->err, sizeof(nd->err), "%s", rkv_client_errmsg(cli));
    /* The report's "stats", in simulated time, from a worker that ended on
     * an error too (a survivor of a crash: its counters say what it met),
     * as a tcp worker prints them either way: fault runs' report.json had
     * no "stats" in the twin. */
    {
        char vbuf[256];
        FILE *out = twin_lines_open(&lines, vbuf, sizeof(vbuf));
        if (!out || rkv_stats_print_capped(out, cli, TWIN_STATS_MAX_SERVERS) < 0)
            io.rc = -RKV_ENOMEM;
        if (out && fclose(out) != 0)
            io.rc = -RKV_ENOMEM;
    }
    if (nd->rc == 0 && io.rc < 0) {
        nd->rc = io.rc;
        snprintf(nd->err, sizeof(nd->err), "report: out of memory");
    }
    nd->out = lines.buf;
    nd->out_len = lines.len;
}

static void twin_worker(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    struct twin_node *nd = sg_actor_self_get_data();
    struct rkv_port *port;
    struct rkv_nic *nic;
    if ((nd->rc = twin_open(nd, &port, &nic)) < 0) {
        /* With faults a worker that never started must not pass as a
         * survivor that ended on a store error: it stays unfinished. */
        if (!nd->t->sc->n_faults)
            twin_worker_ended(nd); /* on its error */
        return;
    }
    struct rkv_config cfg = nd->t->cfg;
    cfg.machine_id = nd->machine;
    struct rkv_client *cli;
    nd->client_id = RKV_ID_NONE;
    nd->rc = rkv_client_create_on(port, nic, &cfg, &cli, nd->err, sizeof(nd->err));
    if (nd->rc == 0) {
        nd->client_id = rkv_client_id(cli);
        twin_worker_body(nd, cli, port);
        if (rkv_client_id(cli) == 0 && rkv_client_shutdown_servers(cli) < 0 && nd->rc == 0) {
            nd->rc = -RKV_EIO;
            snprintf(nd->err, sizeof(nd->err), "shutdown: %s", rkv_client_errmsg(cli));
        }
        rkv_client_destroy(cli);
    }
    twin_close(nd, port, nic);
    twin_worker_ended(nd);
}

/* ---- payload-less sizing ---- */

/* PUSH and PULL_REPLY carry thin rows; charge the network the declared ones. */
static uint64_t twin_sizer(void *user, const void *buf, uint32_t len)
{
    const struct twin *t = user;
    struct rkv_hdr h;
    char why[8];
    if (len < RKV_PROTO_HDR_BYTES || rkv_proto_decode_hdr(buf, len, &h, why, sizeof(why)) < 0)
        return len;
    if ((h.type != RKV_MSG_PUSH && h.type != RKV_MSG_PULL_REPLY) || h.tensor_id == 0 ||
        h.tensor_id > RKV_SC_MAX_TENSORS || !t->declared_row_bytes[h.tensor_id])
        return len;
    uint64_t thin = (uint64_t)h.count * h.row_bytes;
    uint64_t full = (uint64_t)h.count * t->declared_row_bytes[h.tensor_id];
    if (h.type == RKV_MSG_PULL_REPLY && h.op == RKV_PULL_WITH_STATE)
        full *= 2; /* each row comes with its state (the handler names itself in op) */
    return len - thin + full;
}

/* ---- set-up ---- */

/* Crash faults kill actors that may hold a core of the run queue. */
static int twin_has_crash(const struct rkv_scenario *sc)
{
    for (uint32_t i = 0; i < sc->n_faults; i++)
        if (!strcmp(sc->faults[i].kind, "crash"))
            return 1;
    return 0;
}

/* The store's settings the user gave (rkv_twin_opts.store): the behaviour
 * a tcp or verbs run of the same file would have, not rkv.h's defaults. */
static void twin_take_store(struct rkv_config *c, const struct rkv_config *u)
{
    c->timeout_ms = u->timeout_ms;
    c->connect_retry_ms = u->connect_retry_ms;
    c->rx_depth = u->rx_depth;
    c->ctrl_buf_bytes = u->ctrl_buf_bytes;
    c->push_slots = u->push_slots;
    c->max_slot_bytes = u->max_slot_bytes;
    c->retry_ms = u->retry_ms;
    c->zero_copy_bytes = u->zero_copy_bytes;
    c->busy_poll = u->busy_poll;
    c->hello_timeout_ms = u->hello_timeout_ms;
    c->idle_timeout_ms = u->idle_timeout_ms;
    c->durable_log_prewrite = u->durable_log_prewrite;
    memcpy(c->secret, u->secret, sizeof(c->secret));
    memcpy(c->secret_file, u->secret_file, sizeof(c->secret_file));
}

/* A durable run's snapshots must not outlive it however it ends: Ctrl-C,
 * a launcher's or the swarm's SIGKILL (of the process group too), a crash
 * (harness/reaper.h). */
static void twin_reap(void *arg)
{
    struct twin *t = arg;
    rkv_file_remove_dir(t->cfg.durable_dir);
}

static int twin_config(struct twin *t, const struct rkv_twin_opts *o)
{
    const struct rkv_scenario *sc = t->sc;
    t->machines = calloc(sc->machines, sizeof(*t->machines));
    if (!t->machines)
        return -RKV_ENOMEM;
    for (uint32_t m = 0; m < sc->machines; m++) {
        snprintf(t->machines[m].host, sizeof(t->machines[m].host), "m%u", m);
        t->machines[m].base_port = TWIN_BASE_PORT;
        t->machines[m].servers = sc->servers_per_machine;
    }
    rkv_config_defaults(&t->cfg);
    t->cfg.retry_ms = sc->retry_ms;
    if (o->store)
        twin_take_store(&t->cfg, o->store);
    t->cfg.machines = t->machines;
    t->cfg.n_machines = sc->machines;
    t->cfg.n_workers = rkv_scenario_workers(sc);
    snprintf(t->cfg.backend, sizeof(t->cfg.backend), "sim");
    snprintf(t->cfg.shm_prefix, sizeof(t->cfg.shm_prefix), "/rkv-twin");
    t->cfg.seed = sc->seed;
    t->cfg.log_level = t->log_level;
    if (sc->durable) {
        /* Snapshots are real files; their I/O takes no simulated time. */
        snprintf(t->cfg.durable_dir, sizeof(t->cfg.durable_dir), "/tmp/rkv-twin-durable.%d.XXXXXX",
                 (int)getpid());
        if (!mkdtemp(t->cfg.durable_dir))
            return -RKV_EIO;
        (void)rkv_reaper_start(&t->reaper, twin_reap, t); /* before any node or thread */
    }
    if (sc->sim_payloadless) {
        /* Thin rows keep every message small: small receive buffers keep
         * thousands of nodes' connections in memory (sim/README.md). */
        if (!(o->store_set & RKV_LAUNCH_SET_RX_DEPTH))
            t->cfg.rx_depth = 8;
        if (!(o->store_set & RKV_LAUNCH_SET_CTRL_BUF))
            t->cfg.ctrl_buf_bytes = 256;
    }
    char err[128];
    int rc = rkv_cluster_create(&t->cfg, 0, &t->cluster, err, sizeof(err));
    if (rc < 0)
        return rc;
    t->cfg.shared = t->cluster;
    /* Counters nobody prints (twin_worker_body) are not kept either. */
    uint64_t servers = 0;
    for (uint32_t m = 0; m < sc->machines; m++)
        servers += t->machines[m].servers;
    t->cfg.no_peer_stats = servers > TWIN_STATS_MAX_SERVERS;
    return 0;
}

static int twin_nodes(struct twin *t)
{
    const struct rkv_scenario *sc = t->sc;
    t->n_servers = rkv_scenario_servers(sc);
    t->n_workers = rkv_scenario_workers(sc);
    t->n_nodes = t->n_servers + t->n_workers;
    t->nodes = calloc(t->n_nodes, sizeof(*t->nodes));
    t->crashes = calloc(sc->n_faults ? sc->n_faults : 1, sizeof(*t->crashes));
    if (!t->nodes || !t->crashes)
        return -RKV_ENOMEM;
    uint32_t k = 0;
    for (uint32_t m = 0; m < sc->machines; m++) {
        for (uint32_t l = 0; l < sc->servers_per_machine; l++, k++) {
            t->nodes[k] =
                (struct twin_node){.t = t, .is_server = 1, .machine = m, .local = l, .tid = k};
            snprintf(t->nodes[k].name, sizeof(t->nodes[k].name), "s%u.%u", m, l);
        }
    }
    for (uint32_t w = 0; w < t->n_workers; w++, k++) {
        /* Workers fill machines in order, as ids are assigned by machine. */
        uint32_t m = rkv_scenario_worker_machine(sc, w);
        t->nodes[k] = (struct twin_node){.t = t, .machine = m, .local = w, .tid = k};
        snprintf(t->nodes[k].name, sizeof(t->nodes[k].name), "w%u", w);
    }
    return 0;
}

/* ---- crash faults ---- */

static struct twin_node *twin_node_named(struct twin *t, const char *name)
{
    for (uint32_t i = 0; i < t->n_nodes; i++)
        if (!strcmp(t->nodes[i].name, name))
            return &t->nodes[i];
    return NULL;
}

static int twin_workers_done(struct twin *t)
{
    for (; t->workers_done_below < t->n_nodes; t->workers_done_below++) {
        const struct twin_node *nd = &t->nodes[t->workers_done_below];
        if (!nd->is_server && !nd->finished && !nd->crashed)
            return 0;
    }
    return 1;
}

static void twin_server(int argc, char **argv);

/* A machine loss takes the machine's shared memory (its segment and every
 * tensor's shard): a restarted server has only its snapshot. */
static void twin_shm_unlink(void *user, const char *name)
{
    sim_world_shm_unlink(user, name);
}

static void twin_lose_machine(struct twin *t, uint32_t machine)
{
    rkv_mach_each_segment(t->cfg.shm_prefix, machine, t->sc->n_tensors, twin_shm_unlink, &t->w);
}

/* The restart actor: waits, then runs the server again on its host with
 * the same node record (a new process, as the launcher starts on tcp). */
static void twin_restarter(int argc, char **argv)
{
    (void)argc, (void)argv;
    struct twin_node *nd = sg_actor_self_get_data();
    sg_actor_sleep_for(nd->fault->restart_after_s);
    /* Due after the run's end (the workers gone, the other servers
     * stopped): a server started now waited for a SHUTDOWN nobody sends
     * until --max-sim-s, an hour of simulated time by default, and the
     * verdict blamed a live lock. It stays down; twin_gather says the
     * restart never came. */
    if (nd->t->servers_stopped)
        return;
    nd->crashed = 0;
    nd->finished = 0;
    struct twin *t = nd->t;
    uint32_t me = (uint32_t)(nd - t->nodes);
    if (!nd->is_server && me < t->workers_done_below) /* running again */
        t->workers_done_below = me;
    nd->rc = 0;
    nd->err[0] = 0;
    nd->fault_nic = NULL;
    for (uint32_t i = t->n_crashes; i-- > 0;) {
        if (t->crashes[i].node == me) {
            assert(t->crashes[i].restart_s < 0);
            t->crashes[i].restart_s = simgrid_get_clock();
            break;
        }
    }
    fprintf(stderr, "rkv: fault: %s restarted at %.6f s (simulated)\n", nd->name,
            simgrid_get_clock());
    twin_server(0, NULL);
    /* A fault run names a failed server nowhere else (a survivor's error
     * is the workers'), and the workers then said only that it could not
     * be reached: a restart refused by the server's own create hid why. */
    if (nd->rc < 0)
        fprintf(stderr, "rkv: fault: %s ended on an error after its restart: %s\n", nd->name,
                nd->err[0] ? nd->err : rkv_strerror(nd->rc));
}

static void twin_plan_restart(struct twin *t, struct twin_node *nd, const struct rkv_sc_fault *f)
{
    nd->fault = f;
    if (f->machine_lost)
        twin_lose_machine(t, nd->machine);
    if (f->restart_after_s <= 0)
        return;
    sg_actor_t a = sg_actor_init(nd->name, twin_host(t, nd->machine));
    sg_actor_set_data(a, nd);
    sg_actor_start(a, twin_restarter, 0, NULL);
}

/* The fault actor's wait for client 0's next phase or a worker's end. No
 * timeout: twin_limit ends a run whose workers never end. */
static void twin_fault_wait(struct twin *t)
{
    sim_cv_wait(&t->w, &t->phase_cv, NULL, NULL, -1);
    t->fault_wakes++;
}

/* Stops the servers still running, as a crash stops them (crashed 2). */
static void twin_stop_servers(struct twin *t)
{
    t->servers_stopped = 1;
    for (uint32_t i = 0; i < t->n_nodes; i++) {
        struct twin_node *nd = &t->nodes[i];
        if (nd->is_server && !nd->finished && !nd->crashed && nd->port) {
            nd->crashed = 2;
            twin_take_fault_stats(nd);
            sim_port_crash(nd->port);
            nd->port = NULL;
        }
    }
}

/* Injects the scenario's crash faults at their simulated times, then, since
 * a crashed worker 0 cannot shut the servers down, stops the servers still
 * running a second after the last worker ended. */
static void twin_faults(int argc, char **argv)
{
    (void)argc, (void)argv;
    struct twin *t = sg_actor_self_get_data();
    const struct rkv_scenario *sc = t->sc;
    for (uint32_t i = 0; i < sc->n_faults; i++) {
        const struct rkv_sc_fault *f = &sc->faults[i];
        if (strcmp(f->kind, "crash") != 0)
            continue; /* the node's own NIC and port carry the others */
        if (f->at_s > simgrid_get_clock())
            sg_actor_sleep_until(f->at_s);
        /* A step trigger: the same file means the same moment on every
         * backend. Woken only when client 0 ends a phase or a worker ends:
         * polling every microsecond cost 6e7 wake-ups (a minute of wall
         * time) while workers waited out a 60 s timeout, found by rkv
         * swarm; polling every millisecond still cost one per simulated
         * millisecond. */
        while (f->after_phase[0] && t->client0_phase < (int32_t)f->after_phase_ix &&
               !twin_workers_done(t))
            twin_fault_wait(t);
        /* The workers ended without client 0 finishing the phase (a crash
         * before it failed a barrier): the trigger never came, so the
         * fault does not fire, as on tcp. It crashed the server at the
         * run's end and the run passed where tcp's said not every fault
         * fired (an outside tester). */
        if (f->after_phase[0] && t->client0_phase < (int32_t)f->after_phase_ix)
            continue;
        struct twin_node *nd = twin_node_named(t, f->target);
        /* At 0 s this actor runs before the nodes have opened anything: it
         * skipped the crash as of a node already gone ("none fired", where
         * tcp kills the process as it starts). A node half made (its
         * actors created, not started) cannot be killed safely: it crashes
         * once it is up, a microsecond on at most 1 ms. */
        for (int k = 0; k < 1000 && nd && !nd->port && !nd->finished && !nd->crashed; k++)
            sg_actor_sleep_for(1e-6);
        if (nd && nd->port && simgrid_get_clock() == 0)
            sg_actor_sleep_for(1e-6);
        if (!nd || nd->finished || nd->crashed || !nd->port)
            continue; /* already gone: nothing left to crash */
        nd->crashed = 1;
        nd->fault = f; /* the crash it is down for, restart or not (twin_gather) */
        nd->end_s = simgrid_get_clock();
        assert(t->n_crashes < sc->n_faults);
        t->crashes[t->n_crashes++] = (struct twin_crash){
            .node = (uint32_t)(nd - t->nodes), .crash_s = nd->end_s, .restart_s = -1, .f = f};
        twin_take_fault_stats(nd);
        sim_port_crash(nd->port);
        nd->port = NULL;
        fprintf(stderr, "rkv: fault: %s crashed at %.6f s (simulated)\n", nd->name, nd->end_s);
        if (f->restart_after_s > 0 || f->machine_lost)
            twin_plan_restart(t, nd, f);
    }
    while (!twin_workers_done(t))
        twin_fault_wait(t);
    fprintf(stderr, "rkv: faults: the fault actor woke %llu times for phase and worker ends\n",
            (unsigned long long)t->fault_wakes);
    sg_actor_sleep_for(1.0);
    twin_stop_servers(t);
}

/* A run without faults whose workers all ended, one of them on an error:
 * no SHUTDOWN may come (worker 0 never joined, or its shutdown failed),
 * and the servers waited for one until --max-sim-s, an hour of simulated
 * time (a cluster whose workers could not connect: 35 s of wall time at
 * --max-sim-s 1000000), the verdict naming no limit. Made only then, so a
 * passing run's actors and events are as they were. */
static void twin_stopper(int argc, char **argv)
{
    (void)argc, (void)argv;
    struct twin *t = sg_actor_self_get_data();
    sg_actor_sleep_for(1.0);
    twin_stop_servers(t);
}

/* A worker ended: it is finished (its rc says how), the fault actor is
 * woken, and without faults a stopper is made if the servers may wait for
 * a SHUTDOWN that cannot come (twin_stopper). */
static void twin_worker_ended(struct twin_node *nd)
{
    struct twin *t = nd->t;
    nd->finished = 1;
    nd->end_s = simgrid_get_clock();
    t->w.nodes_finished++;
    sim_cv_broadcast(&t->phase_cv); /* twin_workers_done may have changed */
    if (t->sc->n_faults || t->stopper_made || !twin_workers_done(t))
        return;
    int failed = 0;
    for (uint32_t i = 0; i < t->n_nodes && !failed; i++)
        failed = !t->nodes[i].is_server && t->nodes[i].rc < 0;
    if (!failed)
        return;
    t->stopper_made = 1;
    sg_actor_t a = sg_actor_init("stopper", twin_host(t, 0));
    sg_actor_set_data(a, t);
    sg_actor_start(a, twin_stopper, 0, NULL);
}

/* The run's end in simulated time. Nodes still running then (a live lock
 * that keeps re-sending, or a workload longer than the limit) are stopped
 * where they are, as a crash stops them, and the verdict names them:
 * SimGrid cannot tear down a world whose actors still wait on its
 * semaphores (it aborted with "Cannot destroy semaphore"). A daemon, made
 * after the nodes: a run whose nodes all end first ends with them, and the
 * nodes' actor ids and order are those of a run without it. */
static void twin_limit(int argc, char **argv)
{
    (void)argc, (void)argv;
    struct twin *t = sg_actor_self_get_data();
    sg_actor_daemonize(sg_actor_self());
    sg_actor_sleep_until(t->max_sim_s);
    t->limit_hit = 1;
    for (uint32_t i = 0; i < t->n_nodes; i++)
        twin_take_fault_stats(&t->nodes[i]);
    sg_actor_kill_all();
}

/* The twin whose world w is (the world's callbacks get the world alone). */
static struct twin *twin_of(struct sim_world *w)
{
    return (struct twin *)((char *)w - offsetof(struct twin, w));
}

/* A run cut short: its trace closed whole, a valid trace of what ran
 * until now, or removed if that cannot be written; what became of it in
 * said ("" without a trace). */
static void twin_trace_cut(struct twin *t, char *said, size_t said_len)
{
    said[0] = 0;
    if (!t->w.trace)
        return;
    int bad = fprintf(t->w.trace, "\n]}\n") < 0 || ferror(t->w.trace);
    bad |= fclose(t->w.trace) != 0;
    t->w.trace = NULL;
    if (bad)
        unlink(t->trace_path);
    snprintf(said, said_len,
             bad ? "; the trace %s could not be written whole and was removed"
                 : "; the trace %s holds what ran until then",
             t->trace_path);
}

/* The host, or the memory cgroup the run is in, is about to run out of
 * memory (sim_world_event): better a line that says so than the kernel's
 * SIGKILL, which left a user with "Killed" and a twin of a cluster too
 * large for the host. No report: the run is cut short. Exit 3, the run's
 * failure (README's exit codes). */
static void twin_mem_low(struct sim_world *w, const struct port_hostmem *m)
{
    long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        long size;
        if (fscanf(f, "%ld %ld", &size, &pages) != 2)
            pages = 0;
        fclose(f);
    }
    uint64_t rss = (uint64_t)pages * (uint64_t)sysconf(_SC_PAGESIZE);
    /* The trace was cut mid-record (an outside tester's 4,096 bytes). */
    char trace[400];
    twin_trace_cut(twin_of(w), trace, sizeof(trace));
    char where[160];
    if (rkv_hostmem_cgroup_binds(m))
        snprintf(where, sizeof(where),
                 "the memory cgroup this run is in (limit %llu MiB) has %llu MiB left",
                 (unsigned long long)(m->cg_limit_bytes >> 20),
                 (unsigned long long)(rkv_hostmem_left(m) >> 20));
    else
        snprintf(where, sizeof(where), "the host has %llu MiB of memory available",
                 (unsigned long long)(rkv_hostmem_left(m) >> 20));
    fflush(stdout);
    fprintf(stderr,
            "rkv: twin: stopped: %s, below the floor of %llu MiB (--mem-floor-mib), with %llu "
            "MiB resident in this run, at simulated %.6f s, %llu network events, %u of %u nodes "
            "finished. This cluster and workload need more memory than %s: fewer machines, or "
            "fewer connections per worker (each pair of a worker and a server it reaches holds "
            "a connection on both sides; sim/README.md, \"Memory per node\")%s\n",
            where, (unsigned long long)(w->mem_floor_bytes >> 20), (unsigned long long)(rss >> 20),
            simgrid_get_clock(), (unsigned long long)w->events, w->nodes_finished, w->nodes_total,
            rkv_hostmem_cgroup_binds(m) ? "the cgroup allows" : "the host has", trace);
    fflush(stderr);
    _exit(3);
}

/* The default floor: 2 % of the memory this run could have (the host's,
 * or its cgroup's limit), at least 256 MiB, but at most an eighth of it:
 * a 1 GiB CI container keeps 128 MiB, not a quarter. 0: not known. */
static uint64_t twin_mem_floor(void)
{
    struct port_hostmem m;
    (void)rkv_hostmem_read(NULL, &m);
    uint64_t size = rkv_hostmem_size(&m), floor_b = size / 50;
    if (floor_b < (256ull << 20))
        floor_b = 256ull << 20;
    if (floor_b > size / 8)
        floor_b = size / 8;
    return floor_b;
}

static void twin_spawn(struct twin *t)
{
    if (t->sc->n_faults) {
        sg_actor_t f = sg_actor_init("faults", twin_host(t, 0));
        sg_actor_set_data(f, t);
        sg_actor_start(f, twin_faults, 0, NULL);
    }
    /* A unit it cannot make (no memory) is made by the machine's first NIC. */
    for (uint32_t m = 0; m < t->sc->machines; m++) {
        (void)sim_nic_rx_prepare(&t->w, m, twin_host(t, m));
        char name[48];
        snprintf(name, sizeof(name), "machine %u", m);
        sim_world_trace_process(&t->w, m, name);
    }
    for (uint32_t i = 0; i < t->n_nodes; i++) {
        struct twin_node *nd = &t->nodes[i];
        sim_world_mem_tick(&t->w); /* the memory floor, before any network event */
        sim_world_trace_name(&t->w, nd->machine, nd->tid, nd->name);
        sg_actor_t a = sg_actor_init(nd->name, twin_host(t, nd->machine));
        sg_actor_set_data(a, nd);
        sg_actor_start(a, nd->is_server ? twin_server : twin_worker, 0, NULL);
    }
    sg_actor_t lim = sg_actor_init("limit", twin_host(t, 0));
    sg_actor_set_data(lim, t);
    sg_actor_start(lim, twin_limit, 0, NULL);
}

/* "KEY:VALUE" with a non-empty key of SimGrid's characters: SimGrid itself
 * aborts the process on a malformed --cfg. */
static int twin_cfg_ok(const char *kv)
{
    const char *colon = strchr(kv, ':');
    if (!colon || colon == kv || !colon[1])
        return 0;
    for (const char *p = kv; p < colon; p++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/-_", *p))
            return 0;
    return 1;
}

/* What --cfg contexts/stack-size may set, in KiB: the deepest actor uses 5
 * pages, SimGrid's switch frames come on top, and with no guard page an
 * overflow writes into the neighbouring stack (a tester's 16 KiB ended in
 * SIGSEGV, 0 and -5 were taken). The top keeps 4 stacks per node within
 * the address space of a 65,536-node run. */
#define TWIN_STACK_MIN_KIB 64
#define TWIN_STACK_MAX_KIB 65536

/* The probe's two actors: a 1 MiB and a 64-byte message from m0 to m1
 * through SimGrid's own transfers (the twin's small messages bypass them),
 * so that a model or factor that fails only when a transfer is made
 * (network/bandwidth-factor:0) fails in the child. */
static void twin_probe_send(int argc, char **argv)
{
    (void)argc, (void)argv;
    sg_mailbox_t mb = sg_mailbox_by_name("rkv-probe");
    static char big, small;
    sg_mailbox_put(mb, &big, 1 << 20);
    sg_mailbox_put(mb, &small, 64);
}

static void twin_probe_recv(int argc, char **argv)
{
    (void)argc, (void)argv;
    sg_mailbox_t mb = sg_mailbox_by_name("rkv-probe");
    (void)sg_mailbox_get(mb);
    (void)sg_mailbox_get(mb);
}

/* What the child says if SimGrid crashes looking a route up: a signal
 * handler can reach nothing else (the child exits from it). */
static char twin_probe_said[256];

static void twin_probe_crashed(int sig)
{
    (void)sig;
    ssize_t w = write(2, twin_probe_said, strlen(twin_probe_said));
    (void)w;
    _exit(3);
}

static sg_host_t twin_probe_host(uint32_t m)
{
    char name[32];
    snprintf(name, sizeof(name), "m%u", m);
    sg_host_t h = sg_host_by_name(name);
    return h ? h : sg_host_by_name(SIM_LOOPBACK_HOST);
}

/* In the child: what SimGrid would meet only mid-run and abort on (a link
 * of no bandwidth or a negative latency, two machines with no route
 * between them) said as "rkv-check: ..." and exit 3; then a transfer.
 * Routes: every pair up to 64 machines, else each machine to and from m0
 * and to the next. Machines of a platform file with no host m<i> share
 * the loopback host (twin_host). */
static void twin_probe(uint32_t machines)
{
    sg_link_t *links = sg_link_list();
    for (size_t i = 0; links && i < sg_link_count(); i++) {
        double bw = sg_link_get_bandwidth(links[i]), lat = sg_link_get_latency(links[i]);
        if (!(bw > 0) || !(lat >= 0) || !isfinite(lat)) {
            fprintf(stderr,
                    "rkv-check: link %s has bandwidth %g B/s and latency %g s: a link "
                    "needs a bandwidth above 0 and a latency of 0 or more\n",
                    sg_link_get_name(links[i]), bw, lat);
            rkv_child_exit(3);
        }
    }
    free(links);
    /* A host of speed 0 passed until a burst of CPU ran on it: SimGrid then
     * aborted ("The Impossible Did Happen"; an outside tester's file). */
    sg_host_t *hosts = sg_host_list();
    for (size_t i = 0; hosts && i < sg_host_count(); i++) {
        double speed = sg_host_get_speed(hosts[i]);
        if (!(speed > 0) || !isfinite(speed)) {
            fprintf(stderr,
                    "rkv-check: host %s has speed %g flop/s: a host needs a speed above 0\n",
                    sg_host_get_name(hosts[i]), speed);
            rkv_child_exit(3);
        }
    }
    free(hosts);
    for (uint32_t a = 0; a < machines; a++) {
        for (uint32_t k = 0; k < (machines <= 64 ? machines : 3); k++) {
            uint32_t b = machines <= 64 ? k : k == 0 ? 0 : k == 1 ? (a + 1) % machines : a;
            /* Past 64 machines k 2 is the pair (m0, a); up to 64, k is b. */
            const_sg_host_t from = twin_probe_host(machines > 64 && k == 2 ? 0 : a),
                            to = twin_probe_host(b);
            if (!from || !to || from == to)
                continue;
            /* A Full zone without a route between two hosts: SimGrid
             * 3.32 dereferences the missing entry (SIGSEGV), which the
             * handler turns into this line; a missing route between
             * zones throws (the child aborts, its message kept). */
            snprintf(twin_probe_said, sizeof(twin_probe_said),
                     "rkv-check: no route from %s to %s: every machine the scenario uses must "
                     "reach every other\n",
                     sg_host_get_name(from), sg_host_get_name(to));
            struct sigaction crashed = {.sa_handler = twin_probe_crashed}, simgrids;
            sigaction(SIGSEGV, &crashed, &simgrids); /* SimGrid's own put back after */
            xbt_dynar_t route = xbt_dynar_new(sizeof(sg_link_t), NULL);
            sg_host_get_route(from, to, route);
            sigaction(SIGSEGV, &simgrids, NULL);
            unsigned long hops = xbt_dynar_length(route);
            xbt_dynar_free(&route);
            if (!hops) {
                fputs(twin_probe_said, stderr);
                rkv_child_exit(3);
            }
            double bw = sg_host_get_route_bandwidth(from, to);
            if (!(bw > 0)) {
                fprintf(stderr,
                        "rkv-check: the route from %s to %s has bandwidth %g B/s: every "
                        "machine the scenario uses must reach every other\n",
                        sg_host_get_name(from), sg_host_get_name(to), bw);
                rkv_child_exit(3);
            }
        }
    }
    sg_host_t h0 = twin_probe_host(0), h1 = twin_probe_host(machines > 1 ? 1 : 0);
    /* Settings the parent refuses with their own words (twin_engine):
     * actors made under them would crash here first. */
    int kib = sg_cfg_get_int("contexts/stack-size");
    if (!h0 || !h1 || kib < TWIN_STACK_MIN_KIB || kib > TWIN_STACK_MAX_KIB ||
        sg_cfg_get_int("contexts/nthreads") != 1)
        return;
    sg_actor_create("rkv-probe-send", h0, twin_probe_send, 0, NULL);
    sg_actor_create("rkv-probe-recv", h1, twin_probe_recv, 0, NULL);
    simgrid_run();
}

/* SimGrid ends the process on an unknown key or a bad value (an uncaught
 * exception), and some models end it when they meet the platform: the
 * Constant model aborts on the first link, ns-3 divides by zero (SIGFPE).
 * Try the arguments and the platform in a child first and turn its
 * complaint into an error. */
/* what: the prefix of the error, "--cfg: " or (file) the platform file's place. */
static int twin_cfg_try(int argc, char **argv, const char *platform, uint32_t machines,
                        const char *what, int file, char *err, size_t err_len)
{
    int fd[2];
    if (pipe(fd) < 0)
        return -RKV_EIO;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return -RKV_EIO;
    }
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        close(fd[1]);
        simgrid_init(&argc, argv);
        simgrid_load_platform(platform);
        twin_probe(machines);
        rkv_child_exit(0);
    }
    close(fd[1]);
    char msg[8192];
    size_t n = 0;
    ssize_t r;
    while ((r = read(fd[0], msg + n, sizeof(msg) - 1 - n)) > 0 && n + (size_t)r < sizeof(msg) - 1)
        n += (size_t)r;
    if (r > 0)
        n += (size_t)r;
    msg[n] = 0;
    close(fd[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    const char *why = strstr(msg, "rkv-check: ");
    if (why)
        return rkv_errf(err, err_len, -RKV_ECONFIG, "%s%.*s", what, (int)strcspn(why + 11, "\n"),
                        why + 11);
    why = strstr(msg, "Uncaught exception ");
    if (why) {
        why += 19;
    } else if ((why = strstr(msg, "/CRITICAL] ")) != NULL) {
        why += 11;
    } else {
        char sig[64];
        if (WIFSIGNALED(status))
            snprintf(sig, sizeof(sig), "signal %d, %s", WTERMSIG(status),
                     strsignal(WTERMSIG(status)));
        else
            snprintf(sig, sizeof(sig), "exit status %d", WEXITSTATUS(status));
        return rkv_errf(err, err_len, -RKV_ECONFIG,
                        "%sSimGrid ended the process (%s) loading the platform%s", what, sig,
                        file ? " (is it SimGrid XML?)" : " with this configuration");
    }
    return rkv_errf(err, err_len, -RKV_ECONFIG, "%sSimGrid rejected the %s: %.*s", what,
                    file ? "platform" : "configuration", (int)strcspn(why, "\n"), why);
}

/* Actor stacks (SimGrid 3.32 callocs each one when contexts/guard-size is
 * 0). The deepest an actor's stack got, measured over the sim-4096 shape
 * at 4,096 nodes (present pages per stack, /proc/PID/pagemap): 5 pages,
 * the malloc header's included. 255 KiB is 12 times that, and 1 KiB under
 * 256 on purpose: a mapped chunk starts with malloc's 16-byte header, so a
 * 256 KiB stack's top (where it starts, growing down) lay 16 bytes into a
 * page of its own, one page more per actor than its depth needs; 255 KiB
 * puts the top 3,088 bytes into its page (sim/README.md, "Memory per
 * node": 7 KiB per node at 4,096 nodes). The default,
 * 8 MiB, cost a 4 KiB page-table page per actor (720 MB of page tables at
 * 65,536 nodes, outside the RSS) and 1.4 TB of address space.
 * No guard page: one would split every stack into two mappings that the
 * kernel cannot merge, past vm.max_map_count (65,530) from ~12,000 nodes. */
#define TWIN_STACK_KIB_STR "255"

/* Every stack its own anonymous mapping, touched only as deep as it is
 * used (adjacent ones merge into one kernel mapping: 216 mappings with
 * ~180,000 stacks). glibc's malloc gives at most M_MMAP_MAX (65,536)
 * chunks a mapping of their own, and raises its mmap threshold to a mapped
 * chunk's size once one is freed (8 MiB after the first stack freed);
 * past either, stacks came from the heap and calloc zeroed up to its top
 * pad for each: at 65,536 nodes 10 GB resident a minute after the start,
 * before any actor ran. Setting M_MMAP_MAX lifts the cap and also stops
 * the threshold from moving (mallopt(3)), but leaves it where it is: one
 * already moved by a large block freed before (SimGrid's platform of
 * 16,384 machines grows and frees vectors of hundreds of KiB) sent every
 * stack to the heap again, 21 GB resident a minute into a 65,536-node run
 * on this session's host. So the threshold is set back to glibc's
 * default, 128 KiB, under the stacks. For the run's process. */
void rkv_twin_stacks_mmapped(void)
{
    mallopt(M_MMAP_MAX, INT32_MAX);
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
}

/* vm.max_map_count, or 0 when it cannot be read (then nothing is checked). */
static uint64_t twin_max_map_count(void)
{
    unsigned long long v = 0;
    FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
    if (f) {
        if (fscanf(f, "%llu", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v;
}

int rkv_twin_maps_check(uint64_t actors, int guard_bytes, uint64_t max_map_count, char *err,
                        size_t err_len)
{
    /* A guard page splits each stack into a PROT_NONE mapping and its
     * stack, which the kernel cannot merge with the neighbours': two
     * mappings per actor. Without one, adjacent stacks merge (216 mappings
     * at 65,536 nodes). Past the limit, SimGrid's mprotect or malloc's
     * mmap fails in the middle of the deployment. */
    uint64_t need = guard_bytes > 0 ? 2 * actors + 4096 : 4096;
    if (max_map_count == 0 || need <= max_map_count)
        return 0;
    return rkv_errf(err, err_len, -RKV_ECONFIG,
                    "contexts/guard-size:%d: a guard page makes each actor's stack two mappings "
                    "that do not merge, about %llu for up to %llu actors, over vm.max_map_count "
                    "(%llu): raise it (sysctl -w vm.max_map_count=%llu) or leave "
                    "contexts/guard-size at 0",
                    guard_bytes, (unsigned long long)need, (unsigned long long)actors,
                    (unsigned long long)max_map_count, (unsigned long long)need);
}

static int twin_engine(struct twin *t, const struct rkv_twin_opts *o, const char *platform,
                       char *err, size_t err_len)
{
    const struct rkv_scenario *sc = t->sc;
    const char *fixed[] = {"rkv",
                           "--cfg=network/model:CM02",
                           "--cfg=network/crosstraffic:0",
                           "--cfg=contexts/guard-size:0",
                           "--cfg=contexts/stack-size:" TWIN_STACK_KIB_STR,
                           "--log=root.thres:critical",
                           sc->sim_fairbottleneck ? "--cfg=network/solver:fairbottleneck" : NULL};
    int n_fixed = sc->sim_fairbottleneck ? 7 : 6;
    char **argv = calloc((size_t)n_fixed + o->n_cfg + 1, sizeof(*argv));
    int argc = 0, rc = 0;
    if (!argv)
        return -RKV_ENOMEM;
    for (int i = 0; i < n_fixed; i++)
        if (!(argv[argc++] = strdup(fixed[i])))
            rc = -RKV_ENOMEM;
    for (uint32_t i = 0; i < o->n_cfg && rc == 0; i++) {
        if (!twin_cfg_ok(o->cfg[i])) {
            snprintf(err, err_len,
                     "--cfg %s: expected KEY:VALUE, a SimGrid configuration item (e.g. "
                     "contexts/stack-size:128, network/solver:fairbottleneck)",
                     o->cfg[i]);
            rc = -RKV_ECONFIG;
        } else if (!strncmp(o->cfg[i], "plugin:", 7)) {
            /* A plugin's hooks meet what the twin does to actors (a crash
             * kills them; the run's end too): plugin:link_energy ended a
             * run that had passed with SIGSEGV, no verdict (an outside
             * tester). None is tried, so none is taken. */
            snprintf(err, err_len,
                     "--cfg %s: SimGrid plugins are not supported in the twin (its actors are "
                     "killed by crash faults and at the run's end, which plugins do not expect)",
                     o->cfg[i]);
            rc = -RKV_ECONFIG;
        } else if (!strncmp(o->cfg[i], "model-check/", 12)) {
            /* model-check/replay:1 passed the probe and aborted the run
             * with SIGABRT and no word (an outside tester): the twin's
             * nodes run on SimGrid's simulation, never its model checker. */
            snprintf(err, err_len,
                     "--cfg %s: the twin does not run under SimGrid's model checker (its "
                     "model-check/ items do not apply)",
                     o->cfg[i]);
            rc = -RKV_ECONFIG;
        } else if ((argv[argc] = malloc(strlen(o->cfg[i]) + 7)) == NULL) {
            rc = -RKV_ENOMEM;
        } else {
            sprintf(argv[argc++], "--cfg=%s", o->cfg[i]);
        }
    }
    /* simgrid_init keeps pointers into argv: it lives as long as the run. */
    t->sg_argv = argv;
    t->sg_argc = argc;
    /* A user's platform file is SimGrid's to parse, and a malformed one
     * (or an empty one) aborted the whole run without a word. */
    char what[400] = "--cfg: ";
    int file_only = sc->sim_platform_file[0] && !o->n_cfg;
    if (sc->sim_platform_file[0]) {
        int n = snprintf(what, sizeof(what), "%s", o->n_cfg ? "--cfg with " : "");
        n += rkv_scenario_where(sc, sc->sim_platform_file_mark, what + n, sizeof(what) - (size_t)n);
        snprintf(what + n, sizeof(what) - (size_t)n, "platform_file %s: ", sc->sim_platform_file);
    }
    if (rc == 0 && (o->n_cfg || sc->sim_platform_file[0]))
        rc = twin_cfg_try(argc, argv, platform, sc->machines, what, file_only, err, err_len);
    if (rc < 0)
        return rc;
    /* simgrid_init consumes the options it knows, moving pointers out of
     * argv: it gets a copy, so that t->sg_argv still names every string. */
    char **sg_argv = calloc((size_t)argc + 1, sizeof(*sg_argv));
    if (!sg_argv)
        return -RKV_ENOMEM;
    memcpy(sg_argv, argv, (size_t)argc * sizeof(*argv));
    t->sg_view = sg_argv;
    int sg_argc = argc;
    simgrid_init(&sg_argc, sg_argv);
    rkv_twin_stacks_mmapped();
    int stack_kib = sg_cfg_get_int("contexts/stack-size");
    if (stack_kib < TWIN_STACK_MIN_KIB || stack_kib > TWIN_STACK_MAX_KIB)
        return rkv_errf(err, err_len, -RKV_ECONFIG,
                        "--cfg contexts/stack-size:%d: expected %d..%d (KiB): an actor's stack "
                        "has no guard page, so a smaller one overflows into its neighbour",
                        stack_kib, TWIN_STACK_MIN_KIB, TWIN_STACK_MAX_KIB);
    /* Parallel contexts run actors on several threads at once; the twin's
     * world (its NIC and CPU models, the shared oracle, the report) is one
     * thread's, unlocked: with 2 threads quickstart reported wrong values,
     * then crashed. */
    int nthreads = sg_cfg_get_int("contexts/nthreads");
    if (nthreads != 1)
        return rkv_errf(err, err_len, -RKV_ECONFIG,
                        "--cfg contexts/nthreads:%d: the twin runs its nodes on one thread "
                        "(its models are not locked); only contexts/nthreads:1 is supported",
                        nthreads);
    /* SimGrid takes a negative latency factor and makes transfers faster
     * than their bandwidth allows (a 1 MiB pull in 85.0 us, 87.9 us at 1). */
    double lat_factor = sg_cfg_get_double("network/latency-factor");
    if (!(lat_factor >= 0))
        return rkv_errf(err, err_len, -RKV_ECONFIG,
                        "--cfg network/latency-factor:%g: expected 0 or more", lat_factor);
    /* Looser precisions end transfers early: at surf/precision:1e-3 16
     * readers of 12.5 GB/s links pulled 1,018 GB/s, and the verdict was
     * PASS (an outside tester). Tighter ones are taken. */
    static const struct {
        const char *key;
        double most;
    } precision[] = {{"surf/precision", 1e-9}, {"maxmin/precision", 1e-5}};
    for (size_t i = 0; i < sizeof(precision) / sizeof(precision[0]); i++) {
        double v = sg_cfg_get_double(precision[i].key);
        if (!(v > 0 && v <= precision[i].most))
            return rkv_errf(err, err_len, -RKV_ECONFIG,
                            "--cfg %s:%g: expected above 0 and at most %g (SimGrid's default): a "
                            "looser precision ends transfers before their bytes could have "
                            "crossed the links",
                            precision[i].key, v, precision[i].most);
    }
    rc = rkv_twin_maps_check(4ull * t->n_nodes, sg_cfg_get_int("contexts/guard-size"),
                             twin_max_map_count(), err, err_len);
    if (rc < 0)
        return rc;
    simgrid_load_platform(platform);
    for (uint32_t m = 0; m < sc->machines; m++) {
        if (!twin_host(t, m)) {
            snprintf(err, err_len,
                     "%s: the platform has no host named m%u (the twin puts machine k on host mk, "
                     "or every machine on one host named " SIM_LOOPBACK_HOST ")",
                     platform, m);
            return -RKV_ECONFIG;
        }
    }
    return 0;
}

/* What the NIC and CPU faults did, appended to the fault text; whether
 * each of them touched something. */
static void twin_gather_faults(struct twin *t, struct rkv_twin_result *res)
{
    const struct rkv_scenario *sc = t->sc;
    res->faults_fired = 1;
    for (uint32_t i = 0; i < sc->n_faults; i++) {
        const struct rkv_sc_fault *f = &sc->faults[i];
        struct twin_node *nd = twin_node_named(t, f->target);
        size_t fl = strlen(res->faults), room = sizeof(res->faults) - fl;
        if (!strcmp(f->kind, "crash")) {
            res->crash_faults++;
            continue;
        }
        if (!strcmp(f->kind, "slow_cpu")) {
            res->faults_fired &= nd->slowed_rows > 0;
            snprintf(res->faults + fl, room, "%sslow_cpu %s: %llu rows handled %.3gx slower",
                     fl ? "; " : "", nd->name, (unsigned long long)nd->slowed_rows, f->factor);
            continue;
        }
        /* Each fault by its own count (a node's totals had a window that
         * opened after the run reported as fired); the node's, once. */
        const struct rkv_nic_fault_stats *st = &nd->fst;
        uint32_t k = rkv_scenario_nic_fault_index(sc, i);
        assert(k < RKV_NIC_FAULTS_MAX);
        res->faults_fired &= st->acted[k] > 0;
        if (k == 0)
            res->broken += st->broken;
        snprintf(res->faults + fl, room,
                 "%s%s %s: acted on %llu messages (the node: %llu messages in a fault window, "
                 "%llu transmissions lost, %llu delayed, %llu held by the link, %llu connections "
                 "broken)",
                 fl ? "; " : "", f->kind, nd->name, (unsigned long long)st->acted[k],
                 (unsigned long long)st->messages, (unsigned long long)st->dropped,
                 (unsigned long long)st->delayed, (unsigned long long)st->held_down,
                 (unsigned long long)st->broken);
    }
}

#define TWIN_UNFINISHED "did not finish (blocked when the simulation ended)"

/* The run reached max_sim_s with nodes running: what failed is that, and
 * which nodes (the first few; a live lock usually holds them all). */
static void twin_gather_limit(const struct twin *t, struct rkv_twin_result *res)
{
    uint32_t running = 0;
    char names[160] = "";
    size_t nl = 0;
    for (uint32_t i = 0; i < t->n_nodes; i++) {
        const struct twin_node *nd = &t->nodes[i];
        if (nd->finished || nd->crashed)
            continue;
        if (running++ < 6 && nl < sizeof(names))
            nl +=
                (size_t)snprintf(names + nl, sizeof(names) - nl, "%s%s", nl ? ", " : "", nd->name);
    }
    if (!running)
        return; /* the last ones ended in the limit's instant */
    res->nodes_ok = 0;
    snprintf(res->error, sizeof(res->error),
             "the simulation reached its limit of %g simulated seconds (--max-sim-s) with %u of "
             "%u nodes still running (%s%s): a live lock, or a workload longer than the limit",
             t->max_sim_s, running, t->n_nodes, names, running > 6 ? ", ..." : "");
}

static int twin_gather(struct twin *t, struct rkv_twin_result *res)
{
    res->outs = calloc(t->n_workers, sizeof(*res->outs));
    if (!res->outs)
        return -RKV_ENOMEM;
    res->n_workers = t->n_workers;
    res->nodes_ok = 1;
    int named_err = 0; /* res->error names a node's own error */
    int named_rc = 0;  /* and its code */
    size_t fl = 0;
    for (uint32_t i = 0; i < t->n_nodes; i++) {
        struct twin_node *nd = &t->nodes[i];
        if (!nd->is_server && nd->finished)
            res->outs[nd->local] = nd->out; /* ownership moves to res */
        res->sim_s = nd->end_s > res->sim_s ? nd->end_s : res->sim_s;
        if (nd->crashed == 1)
            continue; /* down at the end: its crashes are counted below */
        /* With faults, a survivor may end with a named store error; it must end. */
        int bad = t->sc->n_faults ? !nd->finished && !nd->crashed : nd->rc < 0 || !nd->finished;
        if (t->sc->n_faults && nd->finished && nd->rc < 0 && !nd->is_server &&
            res->survivor_errors++ == 0)
            snprintf(res->survivor_error, sizeof(res->survivor_error), "%s: %s", nd->name,
                     nd->err[0] ? nd->err : rkv_strerror(nd->rc));
        /* A node that ended on an error of its own is named before one
         * that did not end: the first is usually why the second waits;
         * and one whose error is not the servers' shutdown before one's
         * that is: a worker whose init_data failed shut them down, and
         * the verdict quoted another's "server 0 is shutting down" (an
         * outside tester). */
        int echo = named_rc == -RKV_ESHUTDOWN && nd->rc < 0 && nd->rc != -RKV_ESHUTDOWN;
        if (bad && (res->nodes_ok || (nd->finished && (!named_err || echo)))) {
            res->nodes_ok = 0;
            named_err = nd->finished;
            named_rc = nd->finished ? nd->rc : 0;
            snprintf(res->error, sizeof(res->error), "%s: %s", nd->name,
                     !nd->finished ? TWIN_UNFINISHED
                     : nd->err[0]  ? nd->err
                                   : rkv_strerror(nd->rc));
        }
    }
    for (uint32_t i = 0; i < t->n_crashes; i++) {
        const struct twin_crash *c = &t->crashes[i];
        const struct twin_node *nd = &t->nodes[c->node];
        size_t room = fl < sizeof(res->faults) ? sizeof(res->faults) - fl : 0;
        res->crashed++;
        if (c->restart_s >= 0) {
            res->restarted++;
            fl += (size_t)snprintf(
                res->faults + fl, room, "%s%s crashed at %.6f s%s, restarted at %.6f s",
                fl ? "; " : "", nd->name, c->crash_s,
                c->f->machine_lost ? " with its machine's memory" : "", c->restart_s);
            continue;
        }
        char who[48] = "";
        if (!nd->is_server && nd->client_id != RKV_ID_NONE)
            snprintf(who, sizeof(who), " (client %u)", nd->client_id);
        fl += (size_t)snprintf(res->faults + fl, room, "%s%s%s crashed at %.6f s", fl ? "; " : "",
                               nd->name, who, c->crash_s);
        /* Its restart was due after the run ended: the crash fired but the
         * restart did not, and the run, judged as one with a node gone for
         * good, passed without the check the restart was for (tcp's
         * launcher counts such a fault unfired too). */
        if (c->f->restart_after_s > 0) {
            res->restarts_missed++;
            room = fl < sizeof(res->faults) ? sizeof(res->faults) - fl : 0;
            fl += (size_t)snprintf(res->faults + fl, room,
                                   ", not restarted (restart_after_s %g: the run ended first)",
                                   c->f->restart_after_s);
        }
    }
    /* Crashes that never fired: the verdict said "see faults: above",
     * where only the ones that fired were (an outside tester). */
    for (uint32_t i = 0; i < t->sc->n_faults; i++) {
        const struct rkv_sc_fault *f = &t->sc->faults[i];
        uint32_t k = 0;
        while (k < t->n_crashes && t->crashes[k].f != f)
            k++;
        if (strcmp(f->kind, "crash") != 0 || k < t->n_crashes)
            continue;
        size_t room = fl < sizeof(res->faults) ? sizeof(res->faults) - fl : 0;
        fl += (size_t)snprintf(res->faults + fl, room, "%scrash %s: did not fire", fl ? "; " : "",
                               f->target);
    }
    /* The clock reached the limit: the run's simulated time is that, not
     * the last end of a node (0.000038 s for a run stopped at 0.0005 s,
     * and no time nor trace hash at all when no node had ended). */
    if (t->limit_hit && res->sim_s < t->max_sim_s)
        res->sim_s = t->max_sim_s;
    if (t->limit_hit && !named_err)
        twin_gather_limit(t, res);
    if (t->sc->n_faults)
        twin_gather_faults(t, res);
    return 0;
}

/* The run's snapshots are scratch: the next run must not restart from them. */
static void twin_remove_durable(struct twin *t)
{
    if (t->cfg.durable_dir[0])
        rkv_file_remove_dir(t->cfg.durable_dir);
    rkv_reaper_done(&t->reaper);
}

/* The stopping signals the twin takes over (twin_signals_take). */
static const int twin_stop_signals[3] = {SIGINT, SIGTERM, SIGHUP};

static void twin_signal_caught(int signo)
{
    if (!sim_world_signo)
        sim_world_signo = signo;
}

/* SimGrid's simgrid_init installs a SIGINT handler that calls exit(1):
 * Ctrl-C ended a run with the code of "a value differed", no word, a trace
 * cut mid-record; SIGTERM and SIGHUP killed it with the same trace. The
 * handler only notes the signal; the run stops on its next event
 * (twin_stop). Called again after simgrid_init; old: NULL then. */
static void twin_signals_take(struct sigaction *old)
{
    struct sigaction sa = {.sa_handler = twin_signal_caught, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 3; i++)
        sigaction(twin_stop_signals[i], &sa, old ? &old[i] : NULL);
}

static void twin_signals_give_back(const struct sigaction *old)
{
    for (int i = 0; i < 3; i++)
        sigaction(twin_stop_signals[i], &old[i], NULL);
}

/* A stopping signal arrived: the run ends here with no verdict, as a tcp
 * run does (harness/launch.c, demo_signals_close): its trace closed whole,
 * a valid trace of what ran until now (removed if that cannot be written),
 * its durable directory removed, a line on stderr, and the process ended
 * by the signal (128 + signo to a shell). Called between two events, never
 * from the handler. Does not return. */
static _Noreturn void twin_stop(struct twin *t, int signo)
{
    char trace[400], when[160] = "before the simulation started";
    fflush(stdout);
    twin_trace_cut(t, trace, sizeof(trace));
    int durable = t->cfg.durable_dir[0] != 0;
    twin_remove_durable(t);
    if (t->sim_started)
        snprintf(when, sizeof(when),
                 "at simulated %.6f s (%llu network events, %u of %u nodes finished)",
                 simgrid_get_clock(), (unsigned long long)t->w.events, t->w.nodes_finished,
                 t->n_nodes);
    fprintf(stderr, "rkv run: stopped by %s %s: no verdict%s%s\n", strsignal(signo), when,
            durable ? "; its durable directory was removed" : "", trace);
    fflush(stderr);
    signal(signo, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, signo);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    raise(signo);
    _exit(128 + signo);
}

static void twin_on_signal(struct sim_world *w, int signo)
{
    twin_stop(twin_of(w), signo);
}

static void twin_sizes(struct twin *t, const struct rkv_scenario *declared)
{
    for (uint32_t i = 0; i < declared->n_tensors; i++) {
        const struct rkv_tensor_desc *d = &declared->tensors[i].desc;
        t->declared_row_bytes[i + 1] = (uint64_t)d->row_len * rkv_dtype_size(d->dtype);
    }
}

/* Messages above 1 KiB and up to this size bypass max-min (nic_sim.c,
 * sn_mid_due) where the machines' own links are the only contention: the
 * star and non-blocking fat trees. Where inner links are shared too (a
 * backbone, an oversubscribed tree, rails) they queue on every link of
 * their route instead (*route = 1, route_fifo.h): as max-min flows they
 * formed one connected set, every row's start and end re-solved all of
 * them, and a 1,024-node oversubscribed fat tree of 16,384 rows did not
 * finish in minutes (an outside tester). On one loopback host and with a
 * platform file they keep their max-min share; so they do with crash
 * faults (a crashed node's transfers in flight are lost, which the timed
 * path does not model) and with a --cfg for SimGrid's network (its model
 * then carries them). */
#define TWIN_MID_BYTES (16u * 1024)

static uint32_t twin_mid_bytes(const struct rkv_scenario *sc, const struct rkv_twin_opts *o,
                               int *route)
{
    struct sim_plat p;
    sim_plat_defaults(sc, &p);
    *route = 0;
    if (sc->sim_platform_file[0] || twin_has_crash(sc))
        return 0;
    for (uint32_t i = 0; i < o->n_cfg; i++)
        if (!strncmp(o->cfg[i], "network/", 8))
            return 0;
    if (!strcmp(p.topology, "star") || !strcmp(p.topology, "fattree") ||
        (!strcmp(p.topology, "fattree3") && p.oversub == 1 && p.pod_oversub == 1))
        return TWIN_MID_BYTES;
    if (!strcmp(p.topology, "fattree3") || !strcmp(p.topology, "rail") ||
        !strcmp(p.topology, "cluster")) {
        *route = 1;
        return TWIN_MID_BYTES;
    }
    return 0;
}

/* Whether rkv shares the hosts' cores itself (sim/backend/cpu.c, "the cores
 * shared"): the same shares as SimGrid's CPU model where that sees only
 * rkv's bursts, i.e. no crash (a killed actor's burst must end with it), no
 * user platform (speed profiles) and no cpu/ configuration. */
static int twin_cpu_share(const struct rkv_scenario *sc, const struct rkv_twin_opts *o)
{
    /* Any fault: after the workers end, the fault actor kills the servers
     * still running (twin_faults), perhaps mid-burst. */
    if (sc->sim_platform_file[0] || sc->n_faults)
        return 0;
    for (uint32_t i = 0; i < o->n_cfg; i++)
        if (!strncmp(o->cfg[i], "cpu/", 4) || !strncmp(o->cfg[i], "host/", 5))
            return 0;
    return 1;
}

/* Thin rows: one element each; the oracle checks those exactly. */
static struct rkv_scenario *twin_thin(const struct rkv_scenario *sc)
{
    struct rkv_scenario *thin = malloc(sizeof(*thin));
    if (!thin)
        return NULL;
    *thin = *sc;
    for (uint32_t i = 0; i < thin->n_tensors; i++) {
        thin->tensors[i].desc.row_len = 1;
        thin->tensors[i].shape[0] = 1;
        thin->tensors[i].n_shape = 1;
    }
    return thin;
}

int rkv_twin_run(const struct rkv_scenario *sc, const struct rkv_twin_opts *o,
                 struct rkv_twin_result *res)
{
    memset(res, 0, sizeof(*res));
    for (uint32_t i = 0; i < sc->n_faults; i++) {
        const struct rkv_sc_fault *f = &sc->faults[i];
        if (strcmp(f->kind, "slow_cpu") != 0)
            continue;
        if (f->target[0] != 's' || sc->sim_row_cost_ns <= 0) {
            snprintf(res->error, sizeof(res->error),
                     "%s: faults[%u]: slow_cpu slows the CPU work the twin models, a server's "
                     "handlers: it needs a server target (s<m>.<l>) and sim.row_cost_ns > 0",
                     sc->path, i);
            /* A calibration's cpu = measured puts row_cost_ns to 0: the
             * refusal read as if the file had not set it (an outside
             * tester). */
            static const char hint[] = ", which a calibration with cpu = measured replaces by "
                                       "the handlers' measured CPU time (run it without "
                                       "--calibration, or with one of cpu = model)";
            size_t k = strlen(res->error);
            if (sc->sim_cpu_measured && k + sizeof(hint) <= sizeof(res->error))
                memcpy(res->error + k, hint, sizeof(hint));
            return -RKV_ECONFIG;
        }
    }
    struct twin t = {.sc = sc,
                     .log_level = o->log_level,
                     .test_corrupt_row = o->test_corrupt_row,
                     .client0_phase = -1,
                     .reaper = {.fd = -1},
                     .trace_path = o->trace_path,
                     .max_sim_s = o->max_sim_s > 0 ? o->max_sim_s : 3600};
    struct rkv_scenario *thin = NULL;
    char platform[300] = "";
    int rc = sim_world_init(&t.w, sc->seed);
    if (rc < 0)
        return rc;
    /* From here on a stopping signal stops the run through twin_stop. */
    sim_world_signo = 0;
    twin_signals_take(t.sig_old);
    t.w.on_signal = twin_on_signal;
    t.w.jitter = sc->sim_jitter;
    t.w.msg_cpu_s = sc->sim_msg_cost_ns * 1e-9;
    t.w.row_cost_ns = sc->sim_row_cost_ns;
    t.w.send_byte_ns = sc->sim_send_byte_ns;
    t.w.recv_byte_ns = sc->sim_recv_byte_ns;
    t.w.copy_byte_ns = sc->sim_copy_byte_ns;
    t.w.cpu_measured = sc->sim_cpu_measured;
    t.w.sched_cores = twin_has_crash(sc) ? 0 : sc->sim_sched_cores;
    t.w.sched_wake_s = sc->sim_wake_us * 1e-6;
    t.w.cpu_share = twin_cpu_share(sc, o);
    t.w.park_ok = !sc->n_faults; /* faults kill actors (twin_faults) */
    t.w.mid_max_bytes = twin_mid_bytes(sc, o, &t.w.mid_route);
    /* At the default level, a line every node says alike is said three
     * times and counted (sim.h); asked for more, the user gets each. */
    if (t.log_level <= RKV_LOG_WARN && (rc = sim_log_fold_start(&t.w)) < 0)
        goto fini_world;
    /* One receive pool per node instead of rx_depth buffers per
     * connection (~27 connection sides per node in sim-4096, up to one
     * per server in a worker that reads rows from all of them). */
    t.w.srq = 1;
    if (sc->sim_payloadless) {
        rc = -RKV_ENOMEM;
        if (!(thin = twin_thin(sc)))
            goto fini_world;
        twin_sizes(&t, sc);
        t.sc = thin;
        t.w.sizer = twin_sizer;
        t.w.sizer_user = &t;
        t.w.sends_inline = 1;
    }
    if (o->trace_path && !(t.w.trace = fopen(o->trace_path, "w"))) {
        /* A path that cannot be opened is the user's, as on tcp (exit 2). */
        rc = rkv_errf(res->error, sizeof(res->error), -RKV_ECONFIG, "--trace: cannot write %s: %s",
                      o->trace_path, strerror(errno));
        goto fini_world;
    }
    if (t.w.trace)
        fprintf(t.w.trace, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[");
    /* With measured CPU the twin charges node code as it runs, and every
     * real worker process replays all workers' requests into its own oracle
     * at each epoch's start and end (the zipf key tables included): W
     * replays, the ones other workers still run competing for the cores
     * with the first phase of those already past it. A shared oracle replays
     * once, which left (W - 1) / W of that CPU out. Without measured CPU
     * node code costs no simulated time, and one replay keeps large runs
     * cheap. */
    if ((rc = twin_config(&t, o)) < 0 || (rc = twin_nodes(&t)) < 0 ||
        (!t.w.cpu_measured && (rc = rkv_oracle_create(t.sc, &t.oracle)) < 0))
        goto free_all;
    rc = -RKV_ENOMEM;
    if (!(t.hand_over = malloc(sizeof(*t.hand_over))))
        goto free_all;
    if (sc->sim_platform_file[0]) {
        snprintf(platform, sizeof(platform), "%s", sc->sim_platform_file);
    } else {
        snprintf(platform, sizeof(platform), "/tmp/rkv-twin-%d.xml", (int)getpid());
        if ((rc = rkv_twin_platform_xml(sc, platform, res->error, sizeof(res->error))) < 0)
            goto free_all;
    }
    rc = twin_engine(&t, o, platform, res->error, sizeof(res->error));
    if (!sc->sim_platform_file[0])
        unlink(platform);
    if (rc < 0)
        goto free_all;
    t.w.nodes_total = t.n_nodes;
    t.w.progress_s = o->progress_s < 0 ? 0 : o->progress_s > 0 ? o->progress_s : 10;
    t.w.mem_floor_bytes = o->mem_floor_mib ? o->mem_floor_mib << 20 : twin_mem_floor();
    t.w.mem_low = twin_mem_low;
    twin_spawn(&t);
    twin_signals_take(NULL); /* simgrid_init put SimGrid's own SIGINT handler in */
    if (sim_world_signo)
        twin_stop(&t, (int)sim_world_signo);
    t.sim_started = 1;
    double w0 = sim_world_wall();
    simgrid_run();       /* to the last node's end, or twin_limit's */
    if (sim_world_signo) /* it came with the last events */
        twin_stop(&t, (int)sim_world_signo);
    res->wall_s = sim_world_wall() - w0;
    if (t.wlog) { /* its last line, then the fold's counts */
        fclose(t.wlog);
        twin_wlog_flush(&t);
        t.wlog = NULL;
    }
    sim_log_fold_end(&t.w); /* before the report */
    res->events = t.w.events;
    res->hash = t.w.hash;
    res->bytes = t.w.bytes_modelled;
    res->cpu_s = t.w.cpu_charged_s;
    res->cpu_total_s = t.w.cpu_total_s;
    res->sched_cores = t.w.sched_cores;
    res->sched_wakes = t.w.sched_wakes;
    rc = twin_gather(&t, res);
    if (t.w.trace) { /* whole now; a write that failed is the run's error */
        int bad = fprintf(t.w.trace, "\n]}\n") < 0 || ferror(t.w.trace);
        bad |= fclose(t.w.trace) != 0;
        t.w.trace = NULL;
        if (bad)
            snprintf(res->trace_error, sizeof(res->trace_error), "cannot write the trace %s: %s",
                     o->trace_path, strerror(errno));
    }
free_all:
    if (sim_world_signo) /* during the setup, which failed (a --cfg probe's child stopped too) */
        twin_stop(&t, (int)sim_world_signo);
    free(t.hand_over);
    sim_cv_destroy(&t.phase_cv);
    twin_remove_durable(&t);
    rkv_oracle_destroy(t.oracle);
    free(t.nodes);
    free(t.crashes);
    rkv_cluster_destroy(t.cluster);
    free(t.machines);
    for (int i = 0; i < t.sg_argc; i++)
        free(t.sg_argv[i]);
    free(t.sg_argv);
    free(t.sg_view);
fini_world:
    sim_world_fini(&t.w);
    free(thin);
    /* The report is written after: a signal now ends the process as it
     * would without the twin. */
    twin_signals_give_back(t.sig_old);
    return rc;
}

void rkv_twin_result_free(struct rkv_twin_result *res)
{
    for (uint32_t i = 0; res->outs && i < res->n_workers; i++)
        free(res->outs[i]);
    free(res->outs);
    memset(res, 0, sizeof(*res));
}
