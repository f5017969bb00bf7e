/* The swarm tester's generator, YAML writer, reductions and process pool
 * (swarm.h). Every choice comes from the seed through the port's PRNG, so a
 * seed is the whole description of its case on any host. */
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness/child_exit.h"
#include "harness/swarm.h"
#include "harness/timed.h"
#include "port/port.h"
#include "store/pbook.h"

/* What keeps a case well under a second of wall time on average: requests of
 * every worker over every phase, and elements of a tensor (each is checked
 * after every barrier). */
#define SW_MAX_REQUESTS 2400
#define SW_MAX_ELEMS (1u << 16)
#define SW_MAX_ROW_BYTES 4096

static const char *const sw_dtypes[] = {"f32", "f64", "i32", "i64"};
static const uint32_t sw_dsize[] = {4, 8, 4, 8};
static const char *const sw_parts[] = {"range", "hash", "explicit"};
static const char *const sw_ops[] = {"assign", "sum", "sgd"};
static const char *const sw_keys[] = {"uniform", "zipf", "sequential", "local-only", "remote-only"};
static const char *const sw_kinds[] = {"crash", "drop", "delay", "link_down", "slow_cpu"};
static const char *const sw_platforms[] = {"star", "cluster", "fattree", "loopback"};

/* ---- drawing ---- */

static uint32_t sw_below(struct rkv_rng *r, uint32_t n)
{
    return (uint32_t)rkv_rng_below(r, n);
}

static int sw_chance(struct rkv_rng *r, double p)
{
    return rkv_rng_double(r) < p;
}

static double sw_pick(struct rkv_rng *r, const double *v, uint32_t n)
{
    return v[sw_below(r, n)];
}

/* Small numbers are where the edges are: 1..hi, most often near 1. */
static uint32_t sw_small(struct rkv_rng *r, uint32_t hi)
{
    return sw_chance(r, 0.6) ? 1 + sw_below(r, hi < 3 ? hi : 3) : 1 + sw_below(r, hi);
}

static uint64_t sw_rows(struct rkv_rng *r)
{
    switch (sw_below(r, 6)) {
    case 0:
        return 1 + sw_below(r, 3); /* 1..3: fewer rows than machines or ids */
    case 1:
        return 1 + sw_below(r, 20);
    case 2:
    case 3:
        return 1 + sw_below(r, 500);
    default:
        return 1 + sw_below(r, 5000);
    }
}

static void sw_gen_tensor(struct rkv_rng *r, struct rkv_swarm_spec *sp, struct rkv_swarm_tensor *t)
{
    t->dtype = (int)sw_below(r, 4);
    t->rows = sw_rows(r);
    /* Row bytes up to 4 KiB, elements of the tensor up to SW_MAX_ELEMS. */
    uint64_t max_elems = SW_MAX_ROW_BYTES / sw_dsize[t->dtype];
    uint64_t by_rows = SW_MAX_ELEMS / t->rows;
    max_elems = by_rows < max_elems ? by_rows : max_elems;
    max_elems = max_elems ? max_elems : 1;
    uint32_t elems = sw_chance(r, 0.4)   ? 1
                     : sw_chance(r, 0.5) ? 1 + sw_below(r, max_elems < 8 ? (uint32_t)max_elems : 8)
                                         : 1 + sw_below(r, (uint32_t)max_elems);
    /* A shape of one to three dimensions whose product is elems or less. */
    t->n_shape = 1 + sw_below(r, 3);
    uint32_t left = elems;
    for (uint32_t i = 0; i + 1 < t->n_shape; i++) {
        uint32_t d = 1 + sw_below(r, left < 4 ? left : 4);
        t->shape[i] = d;
        left = left / d ? left / d : 1;
    }
    t->shape[t->n_shape - 1] = left;
    t->partition = (int)sw_below(r, 3);
    t->n_book = 1 + sw_below(r, RKV_SWARM_MAX_BOOK);
    /* Odd books: often one machine only, often some machine never named. */
    uint32_t span = sw_chance(r, 0.3) ? 1 : sp->machines;
    for (uint32_t i = 0; i < t->n_book; i++)
        t->book[i] = sw_below(r, span);
    t->init_uniform = sw_chance(r, 0.5);
    t->init_seed = rkv_rng_next(r) % 1000;
    t->optimizer_state = sw_chance(r, 0.2);
    /* Half the explicit books permute their machines' local order (DGL's
     * global-to-local map): no seed's run had one, and a META reply that
     * dropped the map passed the swarm. Drawn from a hash, not r, so that
     * every other choice of a seed stays what it was. */
    uint64_t h = rkv_mix64(t->init_seed ^ 0x6c6f63616cull ^ t->rows);
    t->local_permuted = t->partition == 2 && (h & 1);
    t->local_seed = 1 + (h >> 1) % 1000;
}

static void sw_gen_phase(struct rkv_rng *r, const struct rkv_swarm_spec *sp,
                         struct rkv_swarm_phase *p)
{
    static const double push[] = {0, 1, 0.5, 0.5, 0.2, 0.9};
    static const double lrs[] = {0.5, 0.25, 1, 0.1, 0.3};
    static const double zipf[] = {0.5, 1.1, 2.5};
    static const uint32_t think[] = {1, 10, 100, 1000};
    p->tensor = sw_below(r, sp->n_tensors);
    const struct rkv_swarm_tensor *t = &sp->tensors[p->tensor];
    p->push = sw_chance(r, 0.8) ? sw_pick(r, push, 6) : (double)sw_below(r, 101) / 100;
    p->op = (int)sw_below(r, 3);
    p->lr = sw_pick(r, lrs, 5);
    uint64_t rows = t->rows;
    switch (sw_below(r, 4)) {
    case 0:
        p->ids = 1;
        break;
    case 1:
        p->ids = 1 + sw_below(r, 8);
        break;
    case 2:
        p->ids = 1 + sw_below(r, 64);
        break;
    default: /* more ids than rows: duplicates in one request */
        p->ids = (uint32_t)(rows < 128 ? rows + 1 + sw_below(r, (uint32_t)rows + 3) : 128);
    }
    p->keys = (int)sw_below(r, 5);
    p->zipf_s = sw_pick(r, zipf, 3);
    p->rounds = sw_small(r, 40);
    p->barrier_after = sw_chance(r, 0.8);
    p->think_us = sw_chance(r, 0.7) ? 0 : think[sw_below(r, 4)];
}

/* A node of the cluster: s0.0 (server 0: ids, barriers) gets its share. */
static void sw_gen_target(struct rkv_rng *r, const struct rkv_swarm_spec *sp,
                          struct rkv_swarm_fault *f, int server_only)
{
    f->server = server_only || sw_chance(r, 0.6);
    if (f->server && sw_chance(r, 0.3)) {
        f->machine = f->local = 0;
    } else if (f->server) {
        f->machine = sw_below(r, sp->machines);
        f->local = sw_below(r, sp->servers_per_machine);
    } else {
        f->machine = 0;
        f->local = sw_below(r, sp->machines * sp->workers_per_machine);
    }
}

static void sw_gen_fault(struct rkv_rng *r, const struct rkv_swarm_spec *sp,
                         struct rkv_swarm_fault *f)
{
    /* A run without faults lasts about a millisecond of simulated time: a
     * window that opens later would touch nothing and prove nothing. */
    static const double at[] = {0, 0, 0, 1e-5, 1e-5, 1e-4};
    static const double frac_drop[] = {0.1, 0.3, 0.5};
    static const double frac_delay[] = {0.1, 0.5, 1};
    static const double delay_ms[] = {0.01, 1, 10};
    static const double rto[] = {1, 20, 200};
    static const double window[] = {0, 0, 1e-3, 0.01};
    static const double down[] = {1e-4, 0.01, 0.3};
    static const double restart[] = {0.01, 0.1, 0.3};
    static const double factor[] = {2, 10};
    memset(f, 0, sizeof(*f));
    f->after_phase = -1;
    f->retransmit_ms = 200;
    f->factor = 1;
    uint32_t roll = sw_below(r, 100);
    f->kind = roll < 25   ? RKV_SWF_CRASH
              : roll < 50 ? RKV_SWF_DROP
              : roll < 70 ? RKV_SWF_DELAY
              : roll < 85 ? RKV_SWF_LINK_DOWN
                          : RKV_SWF_SLOW_CPU;
    /* slow_cpu slows modelled handler work: a server with row_cost_ns. */
    if (f->kind == RKV_SWF_SLOW_CPU && sp->row_cost_ns <= 0)
        f->kind = RKV_SWF_DROP;
    sw_gen_target(r, sp, f, f->kind == RKV_SWF_SLOW_CPU);
    f->at_s = sw_pick(r, at, 6);
    if (f->kind != RKV_SWF_CRASH)
        f->at_s = f->at_s > 1e-5 ? 1e-5 : f->at_s;
    else if (f->at_s == 0)
        f->at_s = 1e-5; /* at 0 the node dies as it starts (a microsecond on): it tests little */
    switch (f->kind) {
    case RKV_SWF_CRASH:
        /* After the last phase the target has finished: nothing to crash.
         * A worker killed before it joined stops everyone at once and
         * leaves the other faults nothing to touch: workers die mid-run. */
        if (!f->server && f->at_s < 1e-4)
            f->at_s = 1e-4;
        if (sp->n_phases > 1 && sw_chance(r, f->server ? 0.5 : 0.8)) {
            f->after_phase = (int)sw_below(r, sp->n_phases - 1);
            f->at_s = 0;
        }
        if (f->server && sp->durable && sw_chance(r, 0.7))
            f->restart_after_s = sw_pick(r, restart, 3);
        f->machine_lost = f->server && sw_chance(r, f->restart_after_s > 0 ? 0.4 : 0.15);
        break;
    case RKV_SWF_DROP:
        f->fraction = sw_pick(r, frac_drop, 3);
        f->retransmit_ms = sw_pick(r, rto, 3);
        f->duration_s = sw_pick(r, window, 4);
        break;
    case RKV_SWF_DELAY:
        f->fraction = sw_pick(r, frac_delay, 3);
        f->delay_ms = sw_pick(r, delay_ms, 3);
        f->duration_s = sw_pick(r, window, 4);
        break;
    case RKV_SWF_LINK_DOWN:
        f->duration_s = sw_pick(r, down, 3);
        f->retransmit_ms = sw_pick(r, rto, 3);
        break;
    default:
        f->factor = sw_pick(r, factor, 2);
        break;
    }
}

static void sw_gen_sim(struct rkv_rng *r, struct rkv_swarm_spec *sp)
{
    static const double bw[] = {100, 100, 10, 1, 0.1};
    static const double lat[] = {1, 1, 5, 50};
    static const double jit[] = {0.1, 0.5, 1};
    static const double cost[] = {10, 100};
    sp->platform = (int)sw_below(r, 4);
    sp->bandwidth_gbps = sw_pick(r, bw, 5);
    sp->latency_us = sw_pick(r, lat, 4);
    sp->jitter = sw_chance(r, 0.5) ? 0 : sw_pick(r, jit, 3);
    sp->row_cost_ns = sw_chance(r, 0.25) ? sw_pick(r, cost, 2) : 0;
    sp->msg_cost_ns = sw_chance(r, 0.1) ? 500 : 0;
    sp->payloadless = sw_chance(r, 0.05);
    sp->sched_cores = sw_chance(r, 0.1);
    sp->fairbottleneck = sw_chance(r, 0.1);
}

/* The cluster's workers: those of the slots that cluster.workers keeps. */
static uint32_t sw_workers(const struct rkv_swarm_spec *sp)
{
    uint32_t slots = sp->machines * sp->workers_per_machine;
    return sp->workers && sp->workers < slots ? sp->workers : slots;
}

/* A machine_lost crash needs its server alone on the machine: one server
 * per machine and no worker there (the loader refuses anything else). */
static int sw_alone(const struct rkv_swarm_spec *sp, const struct rkv_swarm_fault *f)
{
    return f->server && sp->servers_per_machine == 1 &&
           sw_workers(sp) <= f->machine * sp->workers_per_machine;
}

void rkv_swarm_generate(uint64_t seed, struct rkv_swarm_spec *sp)
{
    struct rkv_rng r;
    rkv_rng_seed(&r, seed, 0x5a4du);
    memset(sp, 0, sizeof(*sp));
    sp->seed = seed;
    sp->machines = sw_chance(&r, 0.3) ? 1 + sw_below(&r, RKV_SWARM_MAX_MACHINES) : sw_small(&r, 3);
    sp->servers_per_machine = sw_small(&r, RKV_SWARM_MAX_SERVERS);
    sp->workers_per_machine = sw_small(&r, RKV_SWARM_MAX_WORKERS);
    sp->durable = sw_chance(&r, 0.1);
    sp->retry_ms = sp->durable ? 30000 : 0;
    sw_gen_sim(&r, sp);
    sp->n_tensors = sw_small(&r, RKV_SWARM_MAX_TENSORS);
    for (uint32_t i = 0; i < sp->n_tensors; i++)
        sw_gen_tensor(&r, sp, &sp->tensors[i]);
    sp->n_phases = sw_chance(&r, 0.2) ? 1 + sw_below(&r, RKV_SWARM_MAX_PHASES) : sw_small(&r, 5);
    for (uint32_t i = 0; i < sp->n_phases; i++)
        sw_gen_phase(&r, sp, &sp->phases[i]);
    sp->n_faults = sw_chance(&r, 0.45) ? 0 : sw_small(&r, RKV_SWARM_MAX_FAULTS);
    for (uint32_t i = 0; i < sp->n_faults; i++)
        sw_gen_fault(&r, sp, &sp->faults[i]);
    /* Durable runs are there for this: a server that crashes and restarts. */
    uint32_t others = sp->machines * sp->servers_per_machine - 1;
    if (sp->durable && others && sp->n_faults < RKV_SWARM_MAX_FAULTS && sw_chance(&r, 0.7)) {
        struct rkv_swarm_fault *f = &sp->faults[sp->n_faults++];
        static const double restart[] = {0.01, 0.1, 0.3};
        uint32_t k = 1 + sw_below(&r, others);
        *f = (struct rkv_swarm_fault){.kind = RKV_SWF_CRASH,
                                      .server = 1,
                                      .machine = k / sp->servers_per_machine,
                                      .local = k % sp->servers_per_machine,
                                      .at_s = 1e-5,
                                      .after_phase = -1,
                                      .retransmit_ms = 200,
                                      .factor = 1,
                                      .restart_after_s = sw_pick(&r, restart, 3),
                                      .machine_lost = sw_chance(&r, 0.5)};
        if (sp->n_phases > 1 && sw_chance(&r, 0.5)) {
            f->after_phase = (int)sw_below(&r, sp->n_phases - 1);
            f->at_s = 0;
        }
    }
    /* And a wire that breaks connections: each client resends the pushes
     * it had in flight once it reconnects, and the server's log must apply
     * each once. A server whose de-duplication was off passed 2,300 seeds
     * (an outside tester): 1 in 400 seeds drew such a drop beside durable. */
    if (sp->durable && others && sp->n_faults < RKV_SWARM_MAX_FAULTS && sw_chance(&r, 0.5)) {
        struct rkv_swarm_fault *f = &sp->faults[sp->n_faults++];
        uint32_t k = sw_below(&r, others + 1);
        *f = (struct rkv_swarm_fault){.kind = RKV_SWF_DROP,
                                      .server = 1,
                                      .machine = k / sp->servers_per_machine,
                                      .local = k % sp->servers_per_machine,
                                      .at_s = 0,
                                      .after_phase = -1,
                                      .fraction = 0.5,
                                      .retransmit_ms = 1,
                                      .factor = 1};
    }
    /* A lost machine takes every process on it: its server must be alone
     * there, so the machines from the lost one on run no workers. */
    for (uint32_t i = 0; i < sp->n_faults; i++) {
        struct rkv_swarm_fault *f = &sp->faults[i];
        if (f->machine_lost && f->server && f->machine && sp->servers_per_machine == 1 &&
            f->machine * sp->workers_per_machine < sw_workers(sp))
            sp->workers = f->machine * sp->workers_per_machine;
    }
    /* Keep the case small: halve the longest phase until the requests fit.
     * A durable server acknowledges a push once it is fsynced: fewer. */
    uint64_t budget = sp->durable ? SW_MAX_REQUESTS / 8 : SW_MAX_REQUESTS;
    while (rkv_swarm_requests(sp) > budget) {
        uint32_t big = 0;
        for (uint32_t i = 1; i < sp->n_phases; i++)
            big = sp->phases[i].rounds > sp->phases[big].rounds ? i : big;
        if (sp->phases[big].rounds == 1)
            break;
        sp->phases[big].rounds /= 2;
    }
    rkv_swarm_normalize(sp);
}

uint64_t rkv_swarm_requests(const struct rkv_swarm_spec *sp)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < sp->n_phases; i++)
        n += sp->phases[i].rounds;
    return n * sw_workers(sp);
}

/* ---- validity ---- */

static int sw_fault_target_ok(const struct rkv_swarm_spec *sp, const struct rkv_swarm_fault *f)
{
    if (f->server)
        return f->machine < sp->machines && f->local < sp->servers_per_machine;
    return f->local < sw_workers(sp);
}

static int sw_same_target(const struct rkv_swarm_fault *a, const struct rkv_swarm_fault *b)
{
    return a->server == b->server && a->machine == b->machine && a->local == b->local;
}

static int sw_nic_fault(int kind)
{
    return kind == RKV_SWF_DROP || kind == RKV_SWF_DELAY || kind == RKV_SWF_LINK_DOWN;
}

/* A fault that cannot be expressed, or that the verdict could not see fire,
 * goes: a second crash of a node, and a second NIC fault on one node (the
 * twin counts a node's drops, delays and held messages together, so a
 * link_down that holds everything would leave a drop beside it "unfired"). */
static int sw_fault_keep(const struct rkv_swarm_spec *sp, uint32_t i)
{
    const struct rkv_swarm_fault *f = &sp->faults[i];
    if (!sw_fault_target_ok(sp, f) || (f->kind == RKV_SWF_SLOW_CPU && sp->row_cost_ns <= 0))
        return 0;
    for (uint32_t j = 0; j < i; j++) {
        const struct rkv_swarm_fault *g = &sp->faults[j];
        if (sw_same_target(g, f) && ((f->kind == RKV_SWF_CRASH && g->kind == RKV_SWF_CRASH) ||
                                     (sw_nic_fault(f->kind) && sw_nic_fault(g->kind))))
            return 0;
    }
    return 1;
}

static void sw_normalize_faults(struct rkv_swarm_spec *sp)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < sp->n_faults; i++) {
        struct rkv_swarm_fault *f = &sp->faults[i];
        if (f->after_phase >= (int)sp->n_phases)
            f->after_phase = (int)sp->n_phases - 1;
        if (!sp->durable || !sp->retry_ms || !f->server || f->kind != RKV_SWF_CRASH)
            f->restart_after_s = 0;
        if (!f->server || f->kind != RKV_SWF_CRASH || !sw_alone(sp, f))
            f->machine_lost = 0;
        if (sw_fault_keep(sp, i))
            sp->faults[n++] = *f;
    }
    sp->n_faults = n;
    /* The loader wants faults in time order: a stable insertion sort. */
    for (uint32_t i = 1; i < sp->n_faults; i++) {
        struct rkv_swarm_fault f = sp->faults[i];
        uint32_t j = i;
        for (; j > 0 && sp->faults[j - 1].at_s > f.at_s; j--)
            sp->faults[j] = sp->faults[j - 1];
        sp->faults[j] = f;
    }
    /* Client 0 ends the phases that time after_phase crashes, and any
     * worker may be client 0 (a worker's crash fails the others' next
     * barrier anyway): one listed after a worker's crash that comes before
     * its phase ends could never fire, and the loader refuses it. */
    n = 0;
    int w_gone = INT_MAX; /* the first phase after which a worker crashed (-1: at a time) */
    for (uint32_t i = 0; i < sp->n_faults; i++) {
        const struct rkv_swarm_fault *f = &sp->faults[i];
        if (f->kind == RKV_SWF_CRASH && f->after_phase >= 0 && f->after_phase > w_gone)
            continue;
        if (f->kind == RKV_SWF_CRASH && !f->server && f->after_phase < w_gone)
            w_gone = f->after_phase;
        sp->faults[n++] = *f;
    }
    sp->n_faults = n;
}

void rkv_swarm_normalize(struct rkv_swarm_spec *sp)
{
    assert(sp->machines >= 1 && sp->servers_per_machine >= 1 && sp->workers_per_machine >= 1);
    if (sp->workers >= sp->machines * sp->workers_per_machine)
        sp->workers = 0; /* every slot: the file leaves the field out */
    assert(sp->n_tensors >= 1 && sp->n_phases >= 1);
    for (uint32_t i = 0; i < sp->n_tensors; i++) {
        struct rkv_swarm_tensor *t = &sp->tensors[i];
        for (uint32_t b = 0; b < t->n_book; b++)
            t->book[b] %= sp->machines;
    }
    /* Every run ends with a barrier, and the loader refuses a last phase
     * that says otherwise (a shrink that drops phases makes a new last). */
    sp->phases[sp->n_phases - 1].barrier_after = 1;
    /* An epoch (phases up to a barrier) may not mix assign with sum/sgd on
     * one tensor: a barrier goes before the phase that would. */
    int kind[RKV_SWARM_MAX_TENSORS] = {0};
    for (uint32_t i = 0; i < sp->n_phases; i++) {
        struct rkv_swarm_phase *p = &sp->phases[i];
        int dt = sp->tensors[p->tensor].dtype;
        if (p->op == 2 && dt != 0 && dt != 1)
            p->op = 1; /* sgd needs floats */
        int k = p->push == 0 ? 0 : p->op == 0 ? 1 : 2;
        if (k && kind[p->tensor] && kind[p->tensor] != k) {
            assert(i > 0);
            sp->phases[i - 1].barrier_after = 1;
            memset(kind, 0, sizeof(kind));
        }
        if (k)
            kind[p->tensor] = k;
        if (p->barrier_after)
            memset(kind, 0, sizeof(kind));
    }
    if (!sp->durable)
        sp->retry_ms = 0;
    sw_normalize_faults(sp);
    /* The twin runs crash faults on the shared cores, and the loader
     * refuses scheduler: cores beside one (the runs are the same). */
    for (uint32_t i = 0; i < sp->n_faults; i++)
        if (sp->faults[i].kind == RKV_SWF_CRASH)
            sp->sched_cores = 0;
}

/* ---- YAML ---- */

static void sw_yaml_target(const struct rkv_swarm_fault *f, char *buf, size_t len)
{
    if (f->server)
        snprintf(buf, len, "s%u.%u", f->machine, f->local);
    else
        snprintf(buf, len, "w%u", f->local);
}

static void sw_yaml_tensor(const struct rkv_swarm_tensor *t, uint32_t i, FILE *out)
{
    fprintf(out, "  - name: t%u\n    dtype: %s\n    rows: %llu\n    shape: [", i,
            sw_dtypes[t->dtype], (unsigned long long)t->rows);
    for (uint32_t k = 0; k < t->n_shape; k++)
        fprintf(out, "%s%u", k ? ", " : "", t->shape[k]);
    fprintf(out, "]\n    partition: %s\n", sw_parts[t->partition]);
    if (t->partition == 2) {
        fprintf(out, "    book: [");
        for (uint32_t k = 0; k < t->n_book; k++)
            fprintf(out, "%s%u", k ? ", " : "", t->book[k]);
        fprintf(out, "]\n");
        if (t->local_permuted)
            fprintf(out, "    local_order: permuted\n    local_seed: %llu\n",
                    (unsigned long long)t->local_seed);
    }
    fprintf(out, "    init: %s\n", t->init_uniform ? "uniform" : "zeros");
    if (t->init_uniform)
        fprintf(out, "    init_seed: %llu\n", (unsigned long long)t->init_seed);
    if (t->optimizer_state)
        fprintf(out, "    optimizer_state: true\n");
}

/* Rows of tensor t that machine m owns, as the store partitions them. */
static uint64_t sw_local_rows(const struct rkv_swarm_spec *sp, const struct rkv_swarm_tensor *t,
                              uint32_t m)
{
    uint64_t n = 0;
    if (t->partition == 2) { /* the book repeats over the rows */
        for (uint64_t r = 0; r < t->rows; r++)
            n += t->book[r % t->n_book] == m;
        return n;
    }
    struct rkv_pbook pb;
    if (rkv_pbook_init(&pb, t->partition ? RKV_PART_HASH : RKV_PART_RANGE, t->rows, sp->machines,
                       NULL, NULL, 0) < 0)
        return 0;
    n = rkv_pbook_local_rows(&pb, m);
    rkv_pbook_free(&pb);
    return n;
}

/* local-only (3) needs every machine with workers to own rows of the
 * phase's tensor, remote-only (4) to leave some to others; the loader
 * refuses anything else (one machine, a book that skips one, fewer rows
 * than machines). */
static int sw_keys_exist(const struct rkv_swarm_spec *sp, const struct rkv_swarm_phase *p)
{
    if (p->keys != 3 && p->keys != 4)
        return 1;
    const struct rkv_swarm_tensor *t = &sp->tensors[p->tensor];
    for (uint32_t m = 0; m < sp->machines && m * sp->workers_per_machine < sw_workers(sp); m++) {
        uint64_t own = sw_local_rows(sp, t, m);
        if (p->keys == 3 ? own == 0 : own == t->rows)
            return 0;
    }
    return 1;
}

static void sw_yaml_phase(const struct rkv_swarm_spec *sp, uint32_t i, FILE *out)
{
    const struct rkv_swarm_phase *p = &sp->phases[i];
    /* Keys that some worker's machine cannot draw (the loader refuses
     * them) are written uniform: the rows local-only drew there anyway,
     * and near enough those remote-only did. */
    int keys = sw_keys_exist(sp, p) ? p->keys : 0;
    fprintf(out, "  - name: p%u\n    tensor: t%u\n    push: %g\n", i, p->tensor, p->push);
    /* The loader refuses keys that cannot act: no op without pushes, lr
     * for sgd only, zipf_s for zipf only. */
    if (p->push > 0)
        fprintf(out, "    push_op: %s\n", sw_ops[p->op]);
    fprintf(out, "    ids_per_request: %u\n    keys: %s\n    rounds: %u\n    barrier_after: %s\n",
            p->ids, sw_keys[keys], p->rounds, p->barrier_after ? "true" : "false");
    if (p->op == 2 && p->push > 0)
        fprintf(out, "    lr: %g\n", p->lr);
    if (keys == 1)
        fprintf(out, "    zipf_s: %g\n", p->zipf_s);
    if (p->think_us)
        fprintf(out, "    think_us: %u\n", p->think_us);
}

static void sw_yaml_fault(const struct rkv_swarm_fault *f, FILE *out)
{
    char target[32];
    sw_yaml_target(f, target, sizeof(target));
    fprintf(out, "  - kind: %s\n    target: %s\n", sw_kinds[f->kind], target);
    if (f->after_phase >= 0)
        fprintf(out, "    after_phase: p%d\n", f->after_phase);
    else
        fprintf(out, "    at_s: %g\n", f->at_s);
    switch (f->kind) {
    case RKV_SWF_CRASH:
        if (f->restart_after_s > 0)
            fprintf(out, "    restart_after_s: %g\n", f->restart_after_s);
        if (f->machine_lost)
            fprintf(out, "    machine_lost: true\n");
        break;
    case RKV_SWF_DROP:
    case RKV_SWF_DELAY:
        fprintf(out, "    fraction: %g\n", f->fraction);
        if (f->kind == RKV_SWF_DELAY)
            fprintf(out, "    delay_ms: %g\n", f->delay_ms);
        else
            fprintf(out, "    retransmit_ms: %g\n", f->retransmit_ms);
        if (f->duration_s > 0)
            fprintf(out, "    duration_s: %g\n", f->duration_s);
        break;
    case RKV_SWF_LINK_DOWN:
        fprintf(out, "    duration_s: %g\n    retransmit_ms: %g\n", f->duration_s,
                f->retransmit_ms);
        break;
    default:
        fprintf(out, "    factor: %g\n", f->factor);
    }
}

int rkv_swarm_yaml(const struct rkv_swarm_spec *sp, const char *note, FILE *out)
{
    fprintf(out, "# generated by rkv swarm from seed %llu\n", (unsigned long long)sp->seed);
    /* Run as it is on tcp, a file whose fault came before the processes
     * were up failed "not every fault fired", where the swarm counts such
     * a run vacuous and the twin passed (an outside tester). */
    if (sp->n_faults)
        fprintf(out, "# fault times are sized for the twin's simulated time: on tcp a fault "
                     "may come\n# before the processes are up and touch nothing (the swarm "
                     "counts such a run vacuous;\n# rkv run says \"not every fault fired\")\n");
    for (const char *l = note; l && *l;) {
        const char *eol = strchr(l, '\n');
        int len = eol ? (int)(eol - l) : (int)strlen(l);
        fprintf(out, "# %.*s\n", len, l);
        l = eol ? eol + 1 : NULL;
    }
    fprintf(out,
            "seed: %llu\ncluster:\n  machines: %u\n  servers_per_machine: %u\n"
            "  workers_per_machine: %u\n",
            (unsigned long long)sp->seed, sp->machines, sp->servers_per_machine,
            sp->workers_per_machine);
    if (sp->workers)
        fprintf(out, "  workers: %u\n", sp->workers);
    if (sp->durable)
        fprintf(out, "  durable: true\n  retry_ms: %u\n", sp->retry_ms);
    fprintf(out, "tensors:\n");
    for (uint32_t i = 0; i < sp->n_tensors; i++)
        sw_yaml_tensor(&sp->tensors[i], i, out);
    fprintf(out, "workload:\n");
    for (uint32_t i = 0; i < sp->n_phases; i++)
        sw_yaml_phase(sp, i, out);
    if (sp->n_faults) {
        fprintf(out, "faults:\n");
        for (uint32_t i = 0; i < sp->n_faults; i++)
            sw_yaml_fault(&sp->faults[i], out);
    }
    fprintf(out, "sim:\n  platform: %s\n  bandwidth_gbps: %g\n  latency_us: %g\n",
            sw_platforms[sp->platform], sp->bandwidth_gbps, sp->latency_us);
    if (sp->jitter > 0)
        fprintf(out, "  jitter: %g\n", sp->jitter);
    if (sp->row_cost_ns > 0)
        fprintf(out, "  row_cost_ns: %g\n", sp->row_cost_ns);
    if (sp->msg_cost_ns > 0)
        fprintf(out, "  msg_cost_ns: %g\n", sp->msg_cost_ns);
    if (sp->payloadless)
        fprintf(out, "  payloadless: true\n");
    if (sp->sched_cores)
        fprintf(out, "  scheduler: cores\n");
    if (sp->fairbottleneck)
        fprintf(out, "  solver: fairbottleneck\n");
    return ferror(out) ? -1 : 0;
}

int rkv_swarm_write_file(const struct rkv_swarm_spec *sp, const char *note, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    int rc = rkv_swarm_yaml(sp, note, f);
    if (fclose(f) != 0)
        rc = -1;
    return rc;
}

/* ---- reductions ---- */

uint64_t rkv_swarm_size(const struct rkv_swarm_spec *sp)
{
    uint64_t n = 1000ull * sp->n_faults +
                 100ull * (sp->machines + sp->servers_per_machine + sp->workers_per_machine +
                           sp->n_tensors) +
                 50ull * sp->n_phases;
    for (uint32_t i = 0; i < sp->n_phases; i++) {
        const struct rkv_swarm_phase *p = &sp->phases[i];
        n += p->rounds + p->ids + (p->think_us > 0) + (p->keys != 0);
    }
    for (uint32_t i = 0; i < sp->n_tensors; i++) {
        const struct rkv_swarm_tensor *t = &sp->tensors[i];
        n += t->rows + t->n_shape + (t->partition != 0) + t->optimizer_state + t->init_uniform;
        for (uint32_t k = 0; k < t->n_shape; k++)
            n += t->shape[k];
    }
    n += (uint64_t)(sp->platform != 0) + (sp->jitter > 0) + (sp->row_cost_ns > 0) +
         (sp->msg_cost_ns > 0) + (uint64_t)sp->payloadless + (uint64_t)sp->sched_cores +
         (uint64_t)sp->fairbottleneck + (uint64_t)sp->durable + (sp->bandwidth_gbps != 100) +
         (sp->latency_us != 1);
    return n;
}

static void sw_drop_phase(struct rkv_swarm_spec *sp, uint32_t i)
{
    if (sp->n_phases < 2 || i >= sp->n_phases)
        return;
    memmove(&sp->phases[i], &sp->phases[i + 1], (sp->n_phases - i - 1) * sizeof(sp->phases[0]));
    sp->n_phases--;
    for (uint32_t k = 0; k < sp->n_faults; k++) {
        struct rkv_swarm_fault *f = &sp->faults[k];
        if (f->after_phase > (int)i)
            f->after_phase--;
        else if (f->after_phase == (int)i)
            f->after_phase = i ? (int)i - 1 : -1; /* the phase before, or the start */
    }
}

/* A tensor no phase uses goes; phases' tensor numbers follow. */
static void sw_drop_tensor(struct rkv_swarm_spec *sp, uint32_t i)
{
    if (sp->n_tensors < 2 || i >= sp->n_tensors)
        return;
    for (uint32_t p = 0; p < sp->n_phases; p++)
        if (sp->phases[p].tensor == i)
            return;
    memmove(&sp->tensors[i], &sp->tensors[i + 1], (sp->n_tensors - i - 1) * sizeof(sp->tensors[0]));
    sp->n_tensors--;
    for (uint32_t p = 0; p < sp->n_phases; p++)
        if (sp->phases[p].tensor > i)
            sp->phases[p].tensor--;
}

static void sw_drop_fault(struct rkv_swarm_spec *sp, uint32_t i)
{
    if (i >= sp->n_faults)
        return;
    memmove(&sp->faults[i], &sp->faults[i + 1], (sp->n_faults - i - 1) * sizeof(sp->faults[0]));
    sp->n_faults--;
}

static void sw_simpler_sim(struct rkv_swarm_spec *sp, uint32_t what)
{
    int slow = 0;
    for (uint32_t i = 0; i < sp->n_faults; i++)
        slow |= sp->faults[i].kind == RKV_SWF_SLOW_CPU;
    switch (what) {
    case 0:
        sp->jitter = 0;
        break;
    case 1:
        sp->platform = 0;
        sp->bandwidth_gbps = 100;
        sp->latency_us = 1;
        break;
    case 2:
        sp->msg_cost_ns = 0;
        sp->payloadless = sp->sched_cores = sp->fairbottleneck = 0;
        if (!slow)
            sp->row_cost_ns = 0;
        break;
    case 3:
        for (uint32_t i = 0; i < sp->n_faults; i++)
            if (sp->faults[i].restart_after_s > 0)
                return;
        sp->durable = 0;
        break;
    default:
        for (uint32_t i = 0; i < sp->n_phases; i++)
            sp->phases[i].think_us = 0;
    }
}

/* Reductions of one phase (or tensor): what = 0..5. */
static void sw_reduce_phase(struct rkv_swarm_spec *sp, uint32_t i, uint32_t what)
{
    if (i >= sp->n_phases)
        return;
    struct rkv_swarm_phase *p = &sp->phases[i];
    switch (what) {
    case 0:
        sw_drop_phase(sp, i);
        break;
    case 1:
        p->rounds = 1;
        break;
    case 2:
        p->rounds = p->rounds > 1 ? p->rounds / 2 : 1;
        break;
    case 3:
        p->ids = p->ids > 1 ? p->ids / 2 : 1;
        break;
    default:
        p->keys = 0;
        break;
    }
}

static void sw_reduce_tensor(struct rkv_swarm_spec *sp, uint32_t i, uint32_t what)
{
    if (i >= sp->n_tensors)
        return;
    struct rkv_swarm_tensor *t = &sp->tensors[i];
    switch (what) {
    case 0:
        sw_drop_tensor(sp, i);
        break;
    case 1:
        t->rows = t->rows > 1 ? t->rows / 2 : 1;
        break;
    case 2:
        t->n_shape = 1;
        t->shape[0] = 1;
        break;
    case 3:
        t->partition = 0;
        break;
    default:
        t->optimizer_state = 0;
        t->init_uniform = 0;
        break;
    }
}

#define SW_RED_PHASE 5
#define SW_RED_TENSOR 5
#define SW_RED_SIM 5

int rkv_swarm_reduce(const struct rkv_swarm_spec *sp, uint32_t k, struct rkv_swarm_spec *out)
{
    *out = *sp;
    /* The order: what removes most first. */
    if (k == 0) {
        out->n_faults = 0;
    } else if ((k -= 1) < RKV_SWARM_MAX_FAULTS) {
        sw_drop_fault(out, k);
    } else if ((k -= RKV_SWARM_MAX_FAULTS) < 6) {
        uint32_t *dim[] = {&out->machines, &out->servers_per_machine, &out->workers_per_machine};
        uint32_t *d = dim[k % 3];
        *d = k < 3 ? (*d + 1) / 2 : (*d > 1 ? *d - 1 : 1);
    } else if ((k -= 6) < 1) {
        /* The first half of the phases. */
        out->n_phases = (out->n_phases + 1) / 2;
    } else if ((k -= 1) < RKV_SWARM_MAX_PHASES * SW_RED_PHASE) {
        /* Last phases first: a failure is usually in an early one. */
        uint32_t ph = RKV_SWARM_MAX_PHASES - 1 - k / SW_RED_PHASE;
        sw_reduce_phase(out, ph, k % SW_RED_PHASE);
    } else if ((k -= RKV_SWARM_MAX_PHASES * SW_RED_PHASE) < RKV_SWARM_MAX_TENSORS * SW_RED_TENSOR) {
        sw_reduce_tensor(out, k / SW_RED_TENSOR, k % SW_RED_TENSOR);
    } else if ((k -= RKV_SWARM_MAX_TENSORS * SW_RED_TENSOR) < SW_RED_SIM) {
        sw_simpler_sim(out, k);
    } else {
        return 0;
    }
    for (uint32_t i = 0; i < out->n_faults; i++)
        if (out->faults[i].after_phase >= (int)out->n_phases)
            out->faults[i].after_phase = (int)out->n_phases - 1;
    rkv_swarm_normalize(out);
    return 1;
}

/* ---- outcomes ---- */

const char *rkv_swarm_verdict_name(int v)
{
    static const char *const names[] = {"pass",  "vacuous",    "wrong value",   "lost work",
                                        "hang",  "node error", "invalid file",  "twin refused",
                                        "crash", "timeout",    "nondeterminism"};
    return v >= 0 && v < RKV_SWV_COUNT_ ? names[v] : "?";
}

/* The message without its numbers: "w3: server 2: ..." == "w1: server 0: ...". */
static void sw_skeleton(const char *s, char *out, size_t len)
{
    size_t n = 0;
    for (; *s && n + 1 < len; s++) {
        if (isdigit((unsigned char)*s)) {
            while (isdigit((unsigned char)s[1]) || s[1] == '.')
                s++;
            out[n++] = '#';
        } else {
            out[n++] = *s;
        }
    }
    out[n] = 0;
}

int rkv_swarm_same_failure(const struct rkv_swarm_outcome *a, const struct rkv_swarm_outcome *b)
{
    if (a->verdict != b->verdict)
        return 0;
    /* A wrong value is the same failure whatever row shows it. */
    if (a->verdict == RKV_SWV_WRONG || a->verdict == RKV_SWV_TIMEOUT ||
        a->verdict == RKV_SWV_NONDET || a->verdict == RKV_SWV_HANG)
        return 1;
    char sa[sizeof(a->what)], sb[sizeof(b->what)];
    sw_skeleton(a->what, sa, sizeof(sa));
    sw_skeleton(b->what, sb, sizeof(sb));
    return strcmp(sa, sb) == 0;
}

/* ---- the process pool ---- */

/* Stopping signals (rkv_swarm_signals_open): blocked in this process and
 * read from sw_sig_fd where the pool waits; the children get sw_old_mask
 * back. */
static int sw_sig_fd = -1;
static int sw_signo;
static sigset_t sw_old_mask;

int rkv_swarm_signals_open(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    assert(sw_sig_fd < 0);
    sw_signo = 0;
    if (sigprocmask(SIG_BLOCK, &set, &sw_old_mask) < 0)
        return -1;
    sw_sig_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sw_sig_fd < 0) {
        sigprocmask(SIG_SETMASK, &sw_old_mask, NULL);
        return -1;
    }
    return 0;
}

int rkv_swarm_signalled(void)
{
    struct signalfd_siginfo si;
    if (!sw_signo && sw_sig_fd >= 0 && read(sw_sig_fd, &si, sizeof(si)) == sizeof(si))
        sw_signo = (int)si.ssi_signo;
    return sw_signo;
}

void rkv_swarm_signals_close(void)
{
    if (sw_sig_fd < 0)
        return;
    rkv_swarm_signalled(); /* one that came after the pool last looked */
    close(sw_sig_fd);
    sw_sig_fd = -1;
    if (sw_signo)
        signal(sw_signo, SIG_DFL);
    sigprocmask(SIG_SETMASK, &sw_old_mask, NULL);
    /* The caller returns 128 + signo if this does not end the process. */
    if (sw_signo)
        raise(sw_signo);
}

struct sw_child {
    pid_t pid;
    int fd;
    double start_s;
    size_t got;
    struct rkv_swarm_outcome out;
};

/* The child: runs the case with its output in the log, reports through fd. */
static void sw_child_main(struct rkv_swarm_job *job, int fd, rkv_swarm_run_fn fn, void *user)
{
    /* A swarm killed by timeout or Ctrl-C takes its cases with it. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1)
        rkv_child_exit(9);
    /* The stopping signals are the swarm's to read, not the case's: a case
     * stopped by them ends by them. */
    if (sw_sig_fd >= 0) {
        close(sw_sig_fd);
        sw_sig_fd = -1;
        sigprocmask(SIG_SETMASK, &sw_old_mask, NULL);
    }
    int log = open(job->log ? job->log : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (log >= 0) {
        dup2(log, 1);
        dup2(log, 2);
        close(log);
    }
    struct rkv_swarm_outcome o;
    memset(&o, 0, sizeof(o));
    fn(user, job->path, &o);
    fflush(stdout);
    fflush(stderr);
    const char *p = (const char *)&o;
    size_t left = sizeof(o);
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            rkv_child_exit(9);
        p += w;
        left -= (size_t)w;
    }
    rkv_child_exit(0);
}

static int sw_spawn(struct sw_child *c, struct rkv_swarm_job *job, const int *fds_open,
                    rkv_swarm_run_fn fn, void *user)
{
    int p[2];
    if (pipe(p) < 0)
        return -1;
    fflush(NULL); /* nothing buffered is written twice */
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid == 0) {
        close(p[0]);
        /* The other children's pipes are theirs: an EOF must mean they ended. */
        for (uint32_t i = 0; fds_open && fds_open[i] >= 0; i++)
            close(fds_open[i]);
        sw_child_main(job, p[1], fn, user);
    }
    close(p[1]);
    memset(c, 0, sizeof(*c));
    c->pid = pid;
    c->fd = p[0];
    c->start_s = rkv_timed_now_s();
    return 0;
}

/* Reaps a child whose pipe closed or whose time ran out; fills its job. */
static void sw_reap(struct sw_child *c, struct rkv_swarm_job *job, int timed_out, double timeout_s)
{
    int st = 0;
    if (timed_out)
        kill(c->pid, SIGKILL);
    while (waitpid(c->pid, &st, 0) < 0 && errno == EINTR)
        ;
    close(c->fd);
    c->fd = -1;
    double wall = rkv_timed_now_s() - c->start_s;
    if (timed_out) {
        memset(&job->out, 0, sizeof(job->out));
        job->out.verdict = RKV_SWV_TIMEOUT;
        snprintf(job->out.what, sizeof(job->out.what),
                 "still running after %.0f s of wall time: killed", timeout_s);
    } else if (c->got == sizeof(c->out) && WIFEXITED(st) && WEXITSTATUS(st) == 0) {
        job->out = c->out;
    } else {
        memset(&job->out, 0, sizeof(job->out));
        job->out.verdict = RKV_SWV_CRASH;
        if (WIFSIGNALED(st))
            snprintf(job->out.what, sizeof(job->out.what),
                     "the case's process died on signal %d (%s)", WTERMSIG(st),
                     strsignal(WTERMSIG(st)));
        else
            snprintf(job->out.what, sizeof(job->out.what),
                     "the case's process exited with status %d before reporting",
                     WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    }
    job->out.wall_s = wall;
}

/* A case the swarm stops: killed and reaped, its job left as it was. */
static void sw_kill(struct sw_child *c)
{
    kill(c->pid, SIGKILL);
    while (waitpid(c->pid, NULL, 0) < 0 && errno == EINTR)
        ;
    close(c->fd);
    c->fd = -1;
}

static void sw_not_started(struct rkv_swarm_job *job)
{
    memset(&job->out, 0, sizeof(job->out));
    job->out.verdict = RKV_SWV_CRASH;
    snprintf(job->out.what, sizeof(job->out.what), "not started: fork failed");
}

int rkv_swarm_pool_feed(const struct rkv_swarm_feed *feed, uint32_t max_jobs, double timeout_s,
                        rkv_swarm_run_fn fn, void *user)
{
    assert(max_jobs >= 1 && max_jobs <= RKV_SWARM_MAX_JOBS);
    struct sw_child kids[RKV_SWARM_MAX_JOBS];
    struct rkv_swarm_job *job_of[RKV_SWARM_MAX_JOBS];
    struct pollfd pfd[RKV_SWARM_MAX_JOBS + 1]; /* and the stopping signals' */
    int fds[RKV_SWARM_MAX_JOBS + 1];
    uint32_t running = 0;
    int failed = 0, more = 1;
    while (more || running) {
        /* Stopped: the running cases are killed, not reported (a case that
         * a Ctrl-C of the terminal killed too is no failure), and no more
         * start. */
        if (rkv_swarm_signalled()) {
            for (uint32_t i = 0; i < running; i++)
                sw_kill(&kids[i]);
            errno = EINTR;
            return -1;
        }
        /* A new case starts as soon as one ends: one slow case holds one slot. */
        while (running < max_jobs && more && !failed) {
            struct rkv_swarm_job *job = feed->next(feed->user);
            if (!job) {
                more = 0;
                break;
            }
            sw_not_started(job);
            for (uint32_t i = 0; i < running; i++)
                fds[i] = kids[i].fd;
            fds[running] = -1;
            if (sw_spawn(&kids[running], job, fds, fn, user) < 0) {
                failed = errno ? errno : EAGAIN;
                feed->done(feed->user, job);
                break; /* the running ones are still reaped below */
            }
            job_of[running++] = job;
        }
        if (!running)
            break; /* nothing more to start (or no way to), nothing to wait for */
        double now = rkv_timed_now_s(), soonest = timeout_s;
        for (uint32_t i = 0; i < running; i++) {
            pfd[i] = (struct pollfd){.fd = kids[i].fd, .events = POLLIN};
            double left = kids[i].start_s + timeout_s - now;
            soonest = left < soonest ? left : soonest;
        }
        int ms = soonest <= 0 ? 0 : (int)(soonest * 1000) + 1;
        pfd[running] = (struct pollfd){.fd = sw_sig_fd, .events = POLLIN}; /* -1: ignored */
        if (poll(pfd, running + 1, ms) < 0 && errno != EINTR)
            failed = errno;
        if (rkv_swarm_signalled())
            continue; /* before any child's end is read as its verdict */
        now = rkv_timed_now_s();
        for (uint32_t i = 0; i < running;) {
            struct sw_child *c = &kids[i];
            int done = 0, late = now - c->start_s >= timeout_s;
            if (pfd[i].revents) {
                ssize_t r = read(c->fd, (char *)&c->out + c->got, sizeof(c->out) - c->got);
                if (r > 0)
                    c->got += (size_t)r;
                else if (r == 0 || errno != EINTR)
                    done = 1;
            }
            /* A child that reported and is closing is not late. */
            if (late && c->got == sizeof(c->out))
                late = 0, done = 1;
            if (done || late) {
                struct rkv_swarm_job *job = job_of[i];
                sw_reap(c, job, !done, timeout_s);
                kids[i] = kids[--running];
                job_of[i] = job_of[running];
                pfd[i] = pfd[running];
                feed->done(feed->user, job);
                continue;
            }
            i++;
        }
    }
    if (failed) {
        errno = failed;
        return -1;
    }
    return 0;
}

/* The pool over an array: jobs in order, nothing to hear when one ends. */
struct sw_array_feed {
    struct rkv_swarm_job *jobs;
    uint32_t n, next;
};

static struct rkv_swarm_job *sw_array_next(void *user)
{
    struct sw_array_feed *a = user;
    return a->next < a->n ? &a->jobs[a->next++] : NULL;
}

static void sw_array_done(void *user, struct rkv_swarm_job *job)
{
    (void)user, (void)job;
}

int rkv_swarm_pool_run(struct rkv_swarm_job *jobs, uint32_t n, uint32_t max_jobs, double timeout_s,
                       rkv_swarm_run_fn fn, void *user)
{
    for (uint32_t j = 0; j < n; j++)
        sw_not_started(&jobs[j]);
    struct sw_array_feed a = {.jobs = jobs, .n = n};
    struct rkv_swarm_feed feed = {.next = sw_array_next, .done = sw_array_done, .user = &a};
    return rkv_swarm_pool_feed(&feed, max_jobs, timeout_s, fn, user);
}
