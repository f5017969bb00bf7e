/* The launcher (harness/launch.c): runs a scenario, or the demo's built-in
 * workload, as one process per server and worker on this host over a real
 * backend (tcp on loopback, verbs on one device, or with host "A,B" on each
 * machine's address's device, given to the node as RKV_HOST): the nodes are `rkv server`
 * and `rkv worker` children, crash faults kill and restart them, and their
 * output becomes one report. The real-host sibling of the twin runner
 * (sim/twin.c); the measuring tools (bench, calibrate, predict) call it. */
#ifndef RKV_LAUNCH_H
#define RKV_LAUNCH_H

#include <stdint.h>

#include "api/config.h"
#include "harness/report.h"
#include "harness/scenario.h"
#include "harness/timed.h"

/* How a run ended; also the rkv binary's documented exit codes. */
enum rkv_exit {
    RKV_EXIT_OK = 0,
    RKV_EXIT_CHECK = 1, /* a pulled value differed from the reference */
    RKV_EXIT_USAGE = 2, /* bad flag, env var, cluster file or setting */
    RKV_EXIT_STORE = 3, /* the store failed: timeout, dead peer, I/O... */
};

struct rkv_launch_opts {
    const char *self;              /* argv[0] of the nodes (`rkv server`, `rkv worker`) */
    const char *exe;               /* the rkv binary they run; NULL: this process's own */
    struct cmd_settings *settings; /* every one reaches every node; the run sets the cluster's */
    const char *file;              /* the scenario's file for the nodes (NULL: sc->path) */
    const char *trace;             /* --trace: the merged Perfetto file to write, or NULL */
};

/* Runs sc on backend (tcp | verbs). Stopping signals stop the nodes and
 * remove what they leave (then the signal is raised again). Returns an
 * RKV_EXIT_* code; *r_p is filled when the nodes ran (r_p->sc not NULL; the
 * caller frees it with rkv_report_free), and the code is then its verdict. */
int rkv_launch_run(struct rkv_scenario *sc, const char *backend, const struct rkv_launch_opts *o,
                   struct rkv_report *r_p);
/* The verdict of a report as an RKV_EXIT_* code. */
int rkv_launch_verdict(const struct rkv_report *r);

/* The twin runner (sim/twin.c), for the tools that compare the real
 * backend with it: a function given by whoever links the twin (the CLI),
 * NULL in a build without it. What a twin run takes beyond the scenario: */
struct rkv_launch_twin_opts {
    int log_level;
    uint64_t test_corrupt_row; /* the oracle's self-test hook (UINT64_MAX: off) */
    /* The store's settings (rkv_launch_twin_store), or NULL: rkv.h's
     * defaults and the scenario's retry_ms. */
    const struct rkv_config *store;
    unsigned store_set; /* RKV_LAUNCH_SET_* */
};
/* The user chose rx_depth / ctrl_buf_bytes: a payload-less twin run keeps
 * them instead of its own small buffers. */
#define RKV_LAUNCH_SET_RX_DEPTH 1u
#define RKV_LAUNCH_SET_CTRL_BUF 2u
/* What the twin takes from the settings a real run of the same file would
 * pass to every node (the store's timeouts, retries, buffer and slot
 * sizes, zero-copy, busy polling, secret file), with the scenario's
 * retry_ms unless one was given: cfg (free(cfg->machines)) and *set. With
 * refuse_owned (a twin run, not the twin beside a real one), a flag naming
 * what the twin owns (hosts, ports, shm and durable names, the verbs
 * device, ...) is refused: the twin would ignore it. 0, or -1 with a
 * message in err. */
int rkv_launch_twin_store(const struct cmd_settings *s, const struct rkv_scenario *sc,
                          int refuse_owned, struct rkv_config *cfg, unsigned *set, char *err,
                          size_t err_len);
/* Runs sc in the twin (once per process: SimGrid cannot start again). 0
 * with *r_p filled as a real run's, plus the simulated figures (sim_*) and,
 * when a node failed, node_error; or a negative code when the twin refused
 * sc, with only r_p->node_error set. */
typedef int (*rkv_launch_twin_fn)(const struct rkv_scenario *sc,
                                  const struct rkv_launch_twin_opts *o, struct rkv_report *r_p);

/* rkv run on a real backend: rkv_launch_run with o->settings' backend, the
 * report printed on stdout, written into out_dir (NULL: not), plotted. */
int rkv_launch_report(struct rkv_scenario *sc, const struct rkv_launch_opts *o, const char *out_dir,
                      int plot);
/* The scenario file, loaded and checked by the oracle (0, or -1 said on stderr). */
int rkv_launch_load(const char *file, struct rkv_scenario **sc);
/* 0, or -1 said on stderr ("rkv run: --rows: ...") when a flag sizes
 * another cluster or workload than a scenario file's (machines, servers,
 * workers, cluster, scenario, rows, value-bytes, rounds). */
int rkv_launch_refuse_sized(const struct cmd_settings *s);
/* The settings of a run from flags: those that would size another cluster
 * than sc's are refused, --seed replaces sc's (0, or -1 said on stderr). */
int rkv_launch_settings(struct rkv_scenario *sc, struct cmd_settings *s, int argc, char **argv);
/* All of `rkv run FILE [settings flags]` on a real backend (--backend in
 * the flags): what the measuring tools run. Returns an RKV_EXIT_* code. */
int rkv_launch_file(const char *file, int argc, char **argv, const char *out_dir, int plot,
                    const char *self);

/* rkv demo: its built-in scenario and the timed phase, with demo's flags;
 * prints the figures next to this host's limits and the verdict. */
int rkv_launch_demo(int argc, char **argv, const char *self);

/* What one `rkv demo` cluster measured in its timed phase, over all its
 * workers. */
struct rkv_launch_figures {
    double push_gbs, pull_gbs, pushpull_gbs, pushpipe_gbs;
    double lat_p50_us, lat_p99_us; /* one-row pull */
    double lat_vcsw, lat_ivcsw;    /* its worker's context switches per pull */
    double lat_call_vcsw;          /* sleeps of the calling thread per pull */
    uint32_t busy_workers;         /* workers that ran with busy-poll 1 */
    uint64_t checks, errors;
};

/* Runs one `rkv demo` cluster with demo's flags (argv), quietly: the timed
 * phase's figures in f_p. Returns an RKV_EXIT_* code. */
int rkv_launch_demo_measure(const char *self, int argc, char **argv,
                            struct rkv_launch_figures *f_p);

/* The descriptor a launched worker waits on after a phase that a crash
 * fault follows (after_phase), when it is client 0: the launcher writes a
 * byte once it fired that phase's faults. */
#define RKV_LAUNCH_GATE_ENV "RKV_PHASE_GATE_FD"

/* A launched worker's run: the scenario sc (its PHASE lines and pinned
 * assign winners on `lines`, a PHASEDONE line per phase and its counters'
 * STATS line on stdout, which the launcher reads as they come; as client 0,
 * after a phase a crash fault follows, it waits for the launcher's byte on
 * the descriptor RKV_LAUNCH_GATE_ENV names, if set); with bench,
 * also the timed phase (one RESULT line on stdout). *wl_rc_p: how the
 * workload ended (0 or -RKV_E*). Returns an RKV_EXIT_* code. */
int rkv_launch_worker_run(struct rkv_client *cli, const struct rkv_config *cfg,
                          const struct rkv_scenario *sc, const struct rkv_timed_workload *wl,
                          int bench, FILE *lines, int *wl_rc_p);

/* The flags that give a node every setting of s but the ones the launcher
 * sets per node (role, machine-id, server-id), and with a scenario the
 * built-in workload's (rows, value-bytes, rounds): pairs of flag and value into
 * argv (up to cap entries, pointing into s and static strings). Returns the
 * count, or -1 if cap is too small. */
int rkv_launch_args(const struct cmd_settings *s, char **argv, int cap);

/* n consecutive free TCP ports on loopback in 20000..23999 (0, or -1). */
int rkv_launch_free_ports(uint32_t n, uint16_t *base_p, int *hold);

#endif
