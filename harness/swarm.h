/* The swarm tester (FoundationDB's simulation, TigerBeetle's VOPR): each
 * seed generates one random scenario, written as YAML text and loaded by the
 * same loader as a file; a runner (impl/cli/swarm.c: the twin) checks it with
 * the same oracle; a failing case is shrunk to the smallest file that still
 * fails the same way.
 *
 * This module holds what needs no simulator: the generator (a spec drawn from
 * the seed), its YAML writer, the shrinker's reductions, and the pool of
 * child processes that runs one case each (a crash, an abort or a hang of
 * one case is a failure of that case, never of the swarm). */
#ifndef RKV_SWARM_H
#define RKV_SWARM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define RKV_SWARM_MAX_MACHINES 8
#define RKV_SWARM_MAX_SERVERS 4 /* per machine */
#define RKV_SWARM_MAX_WORKERS 6 /* per machine */
#define RKV_SWARM_MAX_TENSORS 3
#define RKV_SWARM_MAX_PHASES 20
#define RKV_SWARM_MAX_FAULTS 6
#define RKV_SWARM_MAX_BOOK 9

enum rkv_swarm_fault_kind {
    RKV_SWF_CRASH,
    RKV_SWF_DROP,
    RKV_SWF_DELAY,
    RKV_SWF_LINK_DOWN,
    RKV_SWF_SLOW_CPU,
    RKV_SWF_KINDS_
};

struct rkv_swarm_tensor {
    int dtype; /* 0 f32, 1 f64, 2 i32, 3 i64 */
    uint64_t rows;
    uint32_t shape[3], n_shape;
    int partition; /* 0 range, 1 hash, 2 explicit */
    uint32_t book[RKV_SWARM_MAX_BOOK], n_book;
    int init_uniform;
    uint64_t init_seed;
    int optimizer_state;
    /* An explicit book's rows in each machine's shard in a permuted order
     * (local_order: permuted, seeded by local_seed), not the book's. */
    int local_permuted;
    uint64_t local_seed;
};

struct rkv_swarm_phase {
    uint32_t tensor;
    double push;  /* share of requests that push */
    int op;       /* 0 assign, 1 sum, 2 sgd */
    double lr;    /* sgd */
    uint32_t ids; /* ids_per_request: may exceed rows (duplicate ids) */
    int keys;     /* 0 uniform, 1 zipf, 2 sequential, 3 local-only, 4 remote-only */
    double zipf_s;
    uint32_t rounds;
    int barrier_after;
    uint32_t think_us;
};

struct rkv_swarm_fault {
    int kind;         /* enum rkv_swarm_fault_kind */
    int server;       /* target: 1 a server s<machine>.<local>, 0 worker w<local> */
    uint32_t machine; /* servers */
    uint32_t local;   /* a server's index on its machine, or the worker's number */
    double at_s;
    int after_phase; /* crash: once client 0 finished this phase; -1: at_s */
    double fraction, duration_s, delay_ms, retransmit_ms, factor;
    double restart_after_s; /* a durable server's crash: it comes back */
    int machine_lost;
};

/* What one seed generated; rkv_swarm_yaml writes it as a scenario file. */
struct rkv_swarm_spec {
    uint64_t seed;
    uint32_t machines, servers_per_machine, workers_per_machine;
    /* cluster.workers: 0 every slot; else fewer, filling machines in order,
     * so that the machines past the last worker run servers only (where a
     * machine_lost crash may happen: a lost machine takes all on it). */
    uint32_t workers;
    int durable;
    uint32_t retry_ms;
    struct rkv_swarm_tensor tensors[RKV_SWARM_MAX_TENSORS];
    uint32_t n_tensors;
    struct rkv_swarm_phase phases[RKV_SWARM_MAX_PHASES];
    uint32_t n_phases;
    struct rkv_swarm_fault faults[RKV_SWARM_MAX_FAULTS];
    uint32_t n_faults;
    int platform; /* 0 star, 1 cluster, 2 fattree, 3 loopback */
    double bandwidth_gbps, latency_us, jitter, row_cost_ns, msg_cost_ns;
    int payloadless, sched_cores, fairbottleneck;
};

/* The scenario of seed: the same seed gives the same spec on every host. */
void rkv_swarm_generate(uint64_t seed, struct rkv_swarm_spec *sp);
/* Makes a spec valid after generation or a reduction: targets and books
 * inside the cluster, faults in time order, no assign mixed with sum/sgd on
 * a tensor within an epoch, restarts only where the format allows them. */
void rkv_swarm_normalize(struct rkv_swarm_spec *sp);
/* Writes sp as scenario YAML text (the loader's format), note (may be NULL)
 * as comment lines at the top; -1 on a write error. */
int rkv_swarm_yaml(const struct rkv_swarm_spec *sp, const char *note, FILE *out);
int rkv_swarm_write_file(const struct rkv_swarm_spec *sp, const char *note, const char *path);
/* Workers' requests over all phases: the size the generator keeps small. */
uint64_t rkv_swarm_requests(const struct rkv_swarm_spec *sp);

/* The k-th reduction of sp (k = 0, 1, ...): fewer faults, machines,
 * servers, workers, phases, rounds, rows, smaller rows, simpler settings,
 * most aggressive first. Returns 1 with the smaller spec in out, 0 when k is
 * past the last reduction; a k that does not apply to sp gives a copy equal
 * to sp (the shrinker skips those). */
int rkv_swarm_reduce(const struct rkv_swarm_spec *sp, uint32_t k, struct rkv_swarm_spec *out);
/* A measure that every kept reduction lowers (the shrinker's progress). */
uint64_t rkv_swarm_size(const struct rkv_swarm_spec *sp);

/* ---- one case's outcome, and the process pool ---- */

enum rkv_swarm_verdict {
    RKV_SWV_PASS,
    RKV_SWV_VACUOUS, /* a fault touched nothing: the case proves nothing (not a failure) */
    RKV_SWV_WRONG,   /* a pulled value differed from the oracle */
    RKV_SWV_LOST,    /* nothing was allowed to be lost, yet a worker ended on an error */
    RKV_SWV_HANG,    /* a node never finished (the simulation ran out) */
    RKV_SWV_NODE,    /* a node ended on a store error in a run without faults */
    RKV_SWV_INVALID, /* the generated file did not load: a generator bug */
    RKV_SWV_TWIN,    /* the twin refused to run it */
    RKV_SWV_CRASH,   /* the case's process died on a signal or exited early */
    RKV_SWV_TIMEOUT, /* the case's process exceeded its wall time */
    RKV_SWV_NONDET,  /* the same seed gave another event trace on a re-run */
    RKV_SWV_COUNT_
};

const char *rkv_swarm_verdict_name(int v);
static inline int rkv_swarm_failed(int v)
{
    return v != RKV_SWV_PASS && v != RKV_SWV_VACUOUS;
}

struct rkv_swarm_outcome {
    int verdict;
    uint64_t hash; /* the twin's event trace hash */
    uint64_t events;
    double sim_s, wall_s;
    char what[480]; /* the first wrong value, or the error */
};

/* "Fails the same way": the same verdict and, for store errors, the same
 * message once every number is taken out of it. */
int rkv_swarm_same_failure(const struct rkv_swarm_outcome *a, const struct rkv_swarm_outcome *b);

/* Runs one case inside a child process: path is its scenario file. */
typedef void (*rkv_swarm_run_fn)(void *user, const char *path, struct rkv_swarm_outcome *out);

struct rkv_swarm_job {
    const char *path; /* the scenario file */
    const char *log;  /* the child's stdout and stderr, or NULL: /dev/null */
    struct rkv_swarm_outcome out;
};

/* Runs every job, at most max_jobs child processes at a time, each killed
 * after timeout_s of wall time (RKV_SWV_TIMEOUT); a child that dies before
 * it reported is RKV_SWV_CRASH. Returns 0, or -1 if a child could not be
 * started (errno; the jobs not started are RKV_SWV_CRASH, "not started"). */
int rkv_swarm_pool_run(struct rkv_swarm_job *jobs, uint32_t n, uint32_t max_jobs, double timeout_s,
                       rkv_swarm_run_fn fn, void *user);

#define RKV_SWARM_MAX_JOBS 64

/* Jobs made as slots free up: next returns the next job to start (NULL:
 * no more), done hears of each that ended, its out filled (or marked "not
 * started" when the fork failed). A job stays the caller's until done. */
struct rkv_swarm_feed {
    struct rkv_swarm_job *(*next)(void *user);
    void (*done)(void *user, struct rkv_swarm_job *job);
    void *user;
};
/* The same as rkv_swarm_pool_run, with a new case started as soon as one
 * ends (max_jobs <= RKV_SWARM_MAX_JOBS). */
int rkv_swarm_pool_feed(const struct rkv_swarm_feed *feed, uint32_t max_jobs, double timeout_s,
                        rkv_swarm_run_fn fn, void *user);

/* Stopping signals (SIGINT, SIGTERM, SIGHUP) for a swarm that must clean up
 * after itself: open blocks them and has the pool watch for them (0, or -1
 * with errno). Once one came, rkv_swarm_signalled() returns it and every
 * pool call kills its running cases without reporting them (their jobs stay
 * as they were: done is not called) and returns -1 with errno EINTR. close
 * undoes open and raises the signal again with its default action, so
 * that whoever sent it sees the process end by it. */
int rkv_swarm_signals_open(void);
int rkv_swarm_signalled(void);
void rkv_swarm_signals_close(void);

#endif
