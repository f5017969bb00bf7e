/* rkv swarm: each seed generates a scenario file (harness/swarm.c), the
 * twin runs it in a child process with the same loader and oracle as
 * `rkv run`, and a failure is written out, replayed, and shrunk to the
 * smallest file that still fails the same way. */
#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api/config.h"
#include "harness/launch.h"
#include "harness/swarm_run.h"
#include "harness/oracle.h"
#include "harness/report.h"
#include "harness/scenario.h"

#define SWARM_MAX_FAILS 1024

/* ---- one case, inside its child process ---- */

/* Sets the verdict and its message (cut to fit: the start says what). */
static void swarm_what(struct rkv_swarm_outcome *o, int verdict, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void swarm_what(struct rkv_swarm_outcome *o, int verdict, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    o->verdict = verdict;
    vsnprintf(o->what, sizeof(o->what), fmt, ap);
    va_end(ap);
}

/* The twin's verdict in the swarm's words; r as rkv run reports it. */
static void swarm_classify(const struct rkv_report *r, struct rkv_swarm_outcome *o)
{
    const struct rkv_scenario *sc = r->sc;
    o->hash = r->sim_hash;
    o->events = r->sim_events;
    o->sim_s = r->sim_s;
    for (uint32_t p = 0; p < sc->n_phases; p++) {
        if (r->phase[p].errors) {
            swarm_what(o, RKV_SWV_WRONG, "phase %s: %s", sc->phases[p].name,
                       r->first_error[0] ? r->first_error : "a pulled value was wrong");
            return;
        }
    }
    if (!r->processes_ok) {
        swarm_what(o,
                   strstr(r->node_error, "did not finish") ? RKV_SWV_HANG
                   : sc->n_faults                          ? RKV_SWV_LOST
                                                           : RKV_SWV_NODE,
                   "%s", r->node_error);
        return;
    }
    if (rkv_report_passed(r)) {
        o->verdict = RKV_SWV_PASS;
        return;
    }
    if (r->fault_run && !r->faults_fired) {
        /* The rule of the verdict, not a store failure: a fault that
         * touched nothing tested nothing. */
        swarm_what(o, RKV_SWV_VACUOUS, "a fault touched nothing: %s", r->faults);
        return;
    }
    int v = sc->n_faults ? RKV_SWV_LOST : RKV_SWV_NODE;
    if (r->survivor_timeouts) {
        swarm_what(o, v, "a survivor timed out (a crash's survivors end on a named error): %s",
                   r->timeout_error);
        return;
    }
    if (r->survivor_error[0]) {
        swarm_what(o, v, "%s (nothing may be lost: no crash, no connection broken)",
                   r->survivor_error);
        return;
    }
    for (uint32_t p = 0; p < sc->n_phases; p++) {
        if (r->reported[p] != r->n_workers) {
            swarm_what(o, v, "phase %s: %u of %u workers finished it", sc->phases[p].name,
                       r->reported[p], r->n_workers);
            return;
        }
    }
    swarm_what(o, v, "the verdict failed: %s", r->faults);
}

static void swarm_case(void *user, const char *path, struct rkv_swarm_outcome *o)
{
    const struct rkv_swarm_runner *cs = user;
    char err[512];
    struct rkv_scenario *sc = NULL;
    if (rkv_scenario_load(path, &sc, err, sizeof(err)) < 0 ||
        rkv_oracle_check_scenario(sc, err, sizeof(err)) < 0) {
        swarm_what(o, RKV_SWV_INVALID, "%s", err);
        rkv_scenario_free(sc);
        return;
    }
    struct rkv_report r;
    if (cs->backend && strcmp(cs->backend, "sim") != 0) {
        struct cmd_settings s;
        if (rkv_cmd_settings_load(&s, 0, NULL, err, sizeof(err)) < 0) {
            swarm_what(o, RKV_SWV_INVALID, "%s", err);
            rkv_scenario_free(sc);
            return;
        }
        /* A crash the workers must wait out costs its timeouts in wall
         * time here (30 s each by default, simulated in the twin): 10 s,
         * unless the environment sets them, keeps such a case within the
         * swarm's per-case limit on a loaded host. */
        static const enum cmd_key waits[] = {CMD_TIMEOUT_MS, CMD_CONNECT_RETRY_MS};
        for (size_t i = 0; i < sizeof(waits) / sizeof(waits[0]); i++) {
            if (!strcmp(s.src[waits[i]], "default")) {
                s.val[waits[i]] = "10000";
                s.src[waits[i]] = "rkv swarm --backend tcp";
            }
        }
        struct rkv_launch_opts lo = {.self = "rkv", .exe = cs->exe, .settings = &s, .file = path};
        int code = rkv_launch_run(sc, cs->backend, &lo, &r);
        if (!r.sc && code == RKV_EXIT_USAGE) /* a file the twin runs and tcp cannot */
            swarm_what(o, RKV_SWV_VACUOUS,
                       "not run on %s: the launcher refused it (a slow_cpu fault, or more "
                       "processes than one host starts; its log says which)",
                       cs->backend);
        else if (!r.sc) /* no report: the launcher said why on this case's log */
            swarm_what(
                o, RKV_SWV_NODE,
                "rkv run --backend %s ended with exit %d without a report (its log says why)",
                cs->backend, code);
        else
            swarm_classify(&r, o);
    } else {
        struct rkv_launch_twin_opts to = {.log_level = 1, .test_corrupt_row = cs->test_corrupt_row};
        if (cs->twin(sc, &to, &r) < 0)
            swarm_what(o, RKV_SWV_TWIN, "%s", r.node_error);
        else
            swarm_classify(&r, o);
    }
    o->wall_s = r.wall_s;
    rkv_report_free(&r);
    rkv_scenario_free(sc);
}

/* ---- running specs ---- */

int rkv_swarm_run_files(const struct rkv_swarm_runner *cs, struct rkv_swarm_job *jobs, uint32_t n)
{
    return rkv_swarm_pool_run(jobs, n, cs->jobs, cs->timeout_s, swarm_case, (void *)cs);
}

/* Writes candidate specs into the work directory and runs them together. */
static int swarm_run_specs(const struct rkv_swarm_runner *cs, const struct rkv_swarm_spec *sp,
                           uint32_t n, const char *tag, struct rkv_swarm_outcome *outs)
{
    struct rkv_swarm_job jobs[64];
    char paths[64][600];
    if (n > 64)
        return -RKV_EINVAL;
    for (uint32_t i = 0; i < n; i++) {
        snprintf(paths[i], sizeof(paths[i]), "%s/%s-%llu-%u.yaml", cs->work_dir, tag,
                 (unsigned long long)sp[i].seed, i);
        if (rkv_swarm_write_file(&sp[i], NULL, paths[i]) < 0)
            return -RKV_EIO;
        jobs[i] = (struct rkv_swarm_job){.path = paths[i]};
    }
    int rc = rkv_swarm_run_files(cs, jobs, n);
    for (uint32_t i = 0; i < n; i++) {
        outs[i] = jobs[i].out;
        unlink(paths[i]);
    }
    return rc < 0 ? -RKV_EIO : 0;
}

/* Runs sp twice: same seed, same run, bit for bit. A second run that
 * differs (another verdict or another event trace) is a failure of its own. */
int rkv_swarm_replay(const struct rkv_swarm_runner *cs, const struct rkv_swarm_spec *sp,
                     struct rkv_swarm_outcome *out)
{
    struct rkv_swarm_spec two[2] = {*sp, *sp};
    struct rkv_swarm_outcome o[2];
    int rc = swarm_run_specs(cs, two, 2, "replay", o);
    if (rc < 0)
        return rc;
    *out = o[0];
    rkv_swarm_compare(&o[0], &o[1], out);
    return 0;
}

void rkv_swarm_compare(const struct rkv_swarm_outcome *a, const struct rkv_swarm_outcome *b,
                       struct rkv_swarm_outcome *out)
{
    /* Only runs that ended inside the twin have a trace to compare. */
    int traced_a = a->verdict <= RKV_SWV_NODE, traced_b = b->verdict <= RKV_SWV_NODE;
    if (a->verdict == b->verdict && (!traced_a || a->hash == b->hash))
        return;
    if (!traced_a && !traced_b)
        return;
    struct rkv_swarm_outcome first = *a;
    memset(out, 0, sizeof(*out));
    out->verdict = RKV_SWV_NONDET;
    snprintf(out->what, sizeof(out->what),
             "run 1: %s, trace %016llx, %llu events; run 2: %s, trace %016llx, %llu events",
             rkv_swarm_verdict_name(first.verdict), (unsigned long long)first.hash,
             (unsigned long long)first.events, rkv_swarm_verdict_name(b->verdict),
             (unsigned long long)b->hash, (unsigned long long)b->events);
}

/* ---- shrinking ---- */

int rkv_swarm_shrink(const struct rkv_swarm_runner *cs, const struct rkv_swarm_spec *sp,
                     const struct rkv_swarm_outcome *failure, struct rkv_swarm_spec *min_p,
                     struct rkv_swarm_outcome *min_out, uint32_t *runs_p)
{
    uint32_t batch = cs->jobs < 16 ? cs->jobs : 16;
    struct rkv_swarm_spec *cand = calloc(batch, sizeof(*cand)), cur = *sp;
    struct rkv_swarm_outcome out[16], cur_out = *failure;
    uint32_t kidx[16], runs = 0, k = 0;
    int improved = 0, rc = 0;
    if (!cand)
        return -RKV_ENOMEM;
    /* A hang is a case that runs far longer than any passing one (those
     * take seconds): each candidate that still hangs costs the timeout, so
     * shrinking one waits less for it. */
    struct rkv_swarm_runner c_cs = *cs;
    if (failure->verdict == RKV_SWV_TIMEOUT && c_cs.timeout_s > 20)
        c_cs.timeout_s = 20;
    cs = &c_cs;
    double t0 = rkv_timed_now_s();
    while (runs < cs->shrink_runs && (cs->shrink_s <= 0 || rkv_timed_now_s() - t0 < cs->shrink_s)) {
        /* The next reductions that change something. */
        uint32_t n = 0;
        struct rkv_swarm_spec c;
        while (n < batch && rkv_swarm_reduce(&cur, k, &c)) {
            if (rkv_swarm_size(&c) < rkv_swarm_size(&cur)) {
                cand[n] = c;
                kidx[n++] = k;
            }
            k++;
        }
        if (n == 0) {
            if (!improved)
                break; /* a whole pass kept nothing: the smallest found */
            improved = 0;
            k = 0;
            continue;
        }
        if ((rc = swarm_run_specs(cs, cand, n, "shrink", out)) < 0)
            break;
        runs += n;
        /* The lowest reduction that still fails the same way: the result
         * does not depend on which child finished first. */
        for (uint32_t i = 0; i < n; i++) {
            if (rkv_swarm_same_failure(&out[i], failure)) {
                cur = cand[i];
                cur_out = out[i];
                k = kidx[i]; /* the same reduction may apply again */
                improved = 1;
                break;
            }
        }
    }
    free(cand);
    *min_p = cur;
    *min_out = cur_out;
    *runs_p = runs;
    return rc;
}

/* ---- the search: seeds in flight, failures shrunk ---- */

struct swarm_fail {
    uint64_t seed;
    struct rkv_swarm_spec sp; /* for the shrink, once every seed ran */
    struct rkv_swarm_outcome out, min_out;
    int shrunk;
    uint64_t size, min_size;
    char min_path[600];
};

/* One seed in flight: its file, its run and, every replay_every-th seed,
 * its second run; done when both ended. */
struct swarm_slot {
    int used, pending;
    struct rkv_swarm_spec sp;
    char path[600], log[600], rlog[600];
    struct rkv_swarm_job job, again;
};

struct swarm_run {
    struct rkv_swarm_runner cs;
    const char *out_dir;
    uint64_t first, last; /* last = UINT64_MAX: until the time is up */
    double minutes;
    uint32_t replay_every, max_shrinks;
    int verbose; /* a line per seed */
    /* What the run found. */
    uint64_t seeds, by_verdict[RKV_SWV_COUNT_], replays;
    double case_wall_s, case_wall_max_s;
    struct swarm_fail *fails;
    uint32_t n_fails, n_shrunk;
    /* The feed: seeds in flight (at most one per job, and one more). */
    uint64_t next_seed;
    int seeds_done;            /* the range or the time is used up */
    struct swarm_slot *slots;  /* RKV_SWARM_MAX_JOBS + 1 */
    struct swarm_slot *replay; /* a seed whose second run is still to start */
    double t0_s, shown_s;
};

static int swarm_rename(const char *from, const char *to)
{
    if (rename(from, to) < 0) {
        fprintf(stderr, "rkv swarm: cannot move %s to %s: %s\n", from, to, strerror(errno));
        return -1;
    }
    return 0;
}

/* Was a failure like this one shrunk already? */
static int swarm_seen(const struct swarm_run *sr, const struct rkv_swarm_outcome *o)
{
    for (uint32_t i = 0; i < sr->n_fails; i++)
        if (sr->fails[i].shrunk && rkv_swarm_same_failure(&sr->fails[i].out, o))
            return 1;
    return 0;
}

static void swarm_shrink_one(struct swarm_run *sr, struct swarm_fail *f,
                             const struct rkv_swarm_spec *sp)
{
    /* First the failure must come back, the same, twice. */
    struct rkv_swarm_outcome again;
    if (rkv_swarm_replay(&sr->cs, sp, &again) < 0)
        return;
    if (again.verdict == RKV_SWV_NONDET || !rkv_swarm_same_failure(&again, &f->out)) {
        printf("swarm: seed %llu: the replay differs: %s: %s\n", (unsigned long long)f->seed,
               rkv_swarm_verdict_name(again.verdict), again.what);
        if (again.verdict == RKV_SWV_NONDET)
            sr->by_verdict[RKV_SWV_NONDET]++;
        return;
    }
    struct rkv_swarm_spec min;
    uint32_t runs;
    double t0 = rkv_timed_now_s();
    if (rkv_swarm_shrink(&sr->cs, sp, &f->out, &min, &f->min_out, &runs) < 0)
        return;
    f->shrunk = 1;
    sr->n_shrunk++;
    f->size = rkv_swarm_size(sp);
    f->min_size = rkv_swarm_size(&min);
    char note[700];
    snprintf(note, sizeof(note), "shrunk from seed %llu (%u runs); fails with %s:\n%s",
             (unsigned long long)f->seed, runs, rkv_swarm_verdict_name(f->min_out.verdict),
             f->min_out.what);
    snprintf(f->min_path, sizeof(f->min_path), "%s/seed-%llu.min.yaml", sr->out_dir,
             (unsigned long long)f->seed);
    if (rkv_swarm_write_file(&min, note, f->min_path) < 0)
        fprintf(stderr, "rkv swarm: cannot write %s\n", f->min_path);
    printf("swarm: seed %llu: shrunk in %u runs (%.1f s) to %s: %u machines x (%u servers + %u "
           "workers), %u phases, %u faults; %s: %s\n",
           (unsigned long long)f->seed, runs, rkv_timed_now_s() - t0, f->min_path, min.machines,
           min.servers_per_machine, min.workers_per_machine, min.n_phases, min.n_faults,
           rkv_swarm_verdict_name(f->min_out.verdict), f->min_out.what);
}

static void swarm_failed(struct swarm_run *sr, const struct rkv_swarm_spec *sp,
                         const struct rkv_swarm_job *job, const struct rkv_swarm_outcome *o)
{
    char path[600], log[600];
    snprintf(path, sizeof(path), "%s/seed-%llu.yaml", sr->out_dir, (unsigned long long)sp->seed);
    snprintf(log, sizeof(log), "%s/seed-%llu.log", sr->out_dir, (unsigned long long)sp->seed);
    swarm_rename(job->path, path);
    if (job->log)
        swarm_rename(job->log, log);
    printf("swarm: seed %llu: FAIL (%s): %s\n  file: %s, output: %s\n",
           (unsigned long long)sp->seed, rkv_swarm_verdict_name(o->verdict), o->what, path, log);
    fflush(stdout);
    if (sr->n_fails == SWARM_MAX_FAILS)
        return;
    struct swarm_fail *f = &sr->fails[sr->n_fails++];
    memset(f, 0, sizeof(*f));
    f->seed = sp->seed;
    f->sp = *sp;
    f->out = *o;
}

static int swarm_fail_cmp(const void *a, const void *b)
{
    const struct swarm_fail *x = a, *y = b;
    return x->seed < y->seed ? -1 : x->seed > y->seed;
}

/* Once every seed ran: one shrink per kind of failure, the lowest seed of
 * each (the others are the same bug again), so the result does not depend
 * on which case finished first. */
static void swarm_shrink_all(struct swarm_run *sr)
{
    qsort(sr->fails, sr->n_fails, sizeof(*sr->fails), swarm_fail_cmp);
    for (uint32_t i = 0; i < sr->n_fails && sr->cs.shrink_runs; i++) {
        struct swarm_fail *f = &sr->fails[i];
        if (sr->n_shrunk == sr->max_shrinks || rkv_swarm_signalled())
            break;
        if (f->out.verdict == RKV_SWV_NONDET || f->out.verdict == RKV_SWV_INVALID ||
            swarm_seen(sr, &f->out))
            continue;
        swarm_shrink_one(sr, f, &f->sp);
    }
}

/* A seed's runs ended: its verdict (and the replay's), counted and kept. */
static void swarm_seed_done(struct swarm_run *sr, struct swarm_slot *sl)
{
    struct rkv_swarm_outcome o = sl->job.out;
    sr->case_wall_s += o.wall_s;
    sr->case_wall_max_s = o.wall_s > sr->case_wall_max_s ? o.wall_s : sr->case_wall_max_s;
    if (sl->again.path) {
        sr->replays++;
        rkv_swarm_compare(&sl->job.out, &sl->again.out, &o);
    }
    sr->seeds++;
    sr->by_verdict[o.verdict]++;
    if (sr->verbose)
        printf("swarm: seed %llu: %s in %.2f s%s%s\n", (unsigned long long)sl->sp.seed,
               rkv_swarm_verdict_name(o.verdict), sl->job.out.wall_s, o.verdict ? ": " : "",
               o.verdict ? o.what : "");
    if (rkv_swarm_failed(o.verdict)) {
        swarm_failed(sr, &sl->sp, &sl->job, &o);
    } else {
        unlink(sl->path);
        unlink(sl->log);
    }
    unlink(sl->rlog);
    double now = rkv_timed_now_s();
    if (now - sr->shown_s >= 10) {
        sr->shown_s = now;
        printf("swarm: %llu seeds, %u failures, %.2f seeds/s, next seed %llu\n",
               (unsigned long long)sr->seeds, sr->n_fails, sr->seeds / (now - sr->t0_s),
               (unsigned long long)sr->next_seed);
    }
    fflush(stdout);
    sl->used = 0;
}

static void swarm_feed_done(void *user, struct rkv_swarm_job *job)
{
    struct swarm_run *sr = user;
    for (uint32_t i = 0; i <= RKV_SWARM_MAX_JOBS; i++) {
        struct swarm_slot *sl = &sr->slots[i];
        if (sl->used && (job == &sl->job || job == &sl->again)) {
            if (--sl->pending == 0)
                swarm_seed_done(sr, sl);
            return;
        }
    }
    assert(!"a job of no slot");
}

/* The next case to start: a seed's replay, or the next seed's file. */
static struct rkv_swarm_job *swarm_feed_next(void *user)
{
    struct swarm_run *sr = user;
    if (sr->replay) {
        struct swarm_slot *sl = sr->replay;
        sr->replay = NULL;
        return &sl->again;
    }
    if (sr->seeds_done || sr->next_seed > sr->last ||
        (sr->minutes > 0 && rkv_timed_now_s() - sr->t0_s >= sr->minutes * 60)) {
        sr->seeds_done = 1;
        return NULL;
    }
    struct swarm_slot *sl = NULL;
    for (uint32_t i = 0; i <= RKV_SWARM_MAX_JOBS && !sl; i++)
        sl = sr->slots[i].used ? NULL : &sr->slots[i];
    assert(sl); /* at most one seed per running job, plus one */
    uint64_t seed = sr->next_seed++;
    sr->seeds_done = sr->next_seed == 0; /* wrapped past UINT64_MAX */
    memset(sl, 0, sizeof(*sl));
    rkv_swarm_generate(seed, &sl->sp);
    snprintf(sl->path, sizeof(sl->path), "%s/seed-%llu.yaml", sr->cs.work_dir,
             (unsigned long long)seed);
    snprintf(sl->log, sizeof(sl->log), "%s/seed-%llu.log", sr->cs.work_dir,
             (unsigned long long)seed);
    snprintf(sl->rlog, sizeof(sl->rlog), "%s/seed-%llu.replay.log", sr->cs.work_dir,
             (unsigned long long)seed);
    if (rkv_swarm_write_file(&sl->sp, NULL, sl->path) < 0) {
        fprintf(stderr, "rkv swarm: cannot write %s: %s\n", sl->path, strerror(errno));
        sr->seeds_done = 1;
        return NULL;
    }
    sl->used = 1;
    sl->pending = 1;
    sl->job = (struct rkv_swarm_job){.path = sl->path, .log = sl->log};
    if (sr->replay_every && seed % sr->replay_every == 0) {
        sl->pending = 2;
        sl->again = (struct rkv_swarm_job){.path = sl->path, .log = sl->rlog};
        sr->replay = sl;
    }
    return &sl->job;
}

/* Stopped: the files of the seeds still in flight, whose cases were
 * killed unreported (a seed's file and logs are otherwise removed or kept
 * as a failure once it ended). */
static void swarm_forget_in_flight(struct swarm_run *sr)
{
    for (uint32_t i = 0; i <= RKV_SWARM_MAX_JOBS; i++) {
        struct swarm_slot *sl = &sr->slots[i];
        if (!sl->used)
            continue;
        unlink(sl->path);
        unlink(sl->log);
        unlink(sl->rlog);
        sl->used = 0;
    }
}

static void swarm_summary(const struct swarm_run *sr, double wall_s)
{
    uint64_t failed = 0;
    for (int v = 0; v < RKV_SWV_COUNT_; v++)
        failed += rkv_swarm_failed(v) ? sr->by_verdict[v] : 0;
    printf("\nswarm: %llu seeds in %.1f s wall (before shrinking) with %u jobs: %.2f seeds/s; %llu "
           "passed, %llu "
           "vacuous (a fault touched nothing), %llu failed; %llu re-runs compared their event "
           "trace; a case took %.2f s of wall time on average, %.2f s at most\n",
           (unsigned long long)sr->seeds, wall_s, sr->cs.jobs,
           wall_s > 0 ? (double)sr->seeds / wall_s : 0.0,
           (unsigned long long)sr->by_verdict[RKV_SWV_PASS],
           (unsigned long long)sr->by_verdict[RKV_SWV_VACUOUS], (unsigned long long)failed,
           (unsigned long long)sr->replays, sr->seeds ? sr->case_wall_s / (double)sr->seeds : 0,
           sr->case_wall_max_s);
    for (int v = 0; v < RKV_SWV_COUNT_; v++)
        if (rkv_swarm_failed(v) && sr->by_verdict[v])
            printf("  %s: %llu\n", rkv_swarm_verdict_name(v),
                   (unsigned long long)sr->by_verdict[v]);
    if (!sr->n_fails)
        return;
    printf(
        "\n| seed | failure | smallest file | first wrong value or error |\n|---|---|---|---|\n");
    for (uint32_t i = 0; i < sr->n_fails; i++) {
        const struct swarm_fail *f = &sr->fails[i];
        printf("| %llu | %s | %s | %s |\n", (unsigned long long)f->seed,
               rkv_swarm_verdict_name(f->out.verdict), f->shrunk ? f->min_path : "-",
               f->shrunk ? f->min_out.what : f->out.what);
    }
}

int rkv_swarm_search(const struct rkv_swarm_search_opts *o)
{
    struct swarm_run sr = {.cs = o->runner,
                           .out_dir = o->out_dir,
                           .first = o->first,
                           .last = o->last,
                           .minutes = o->minutes,
                           .replay_every = o->replay_every,
                           .max_shrinks = o->max_shrinks,
                           .verbose = o->verbose};
    assert(sr.cs.twin);
    snprintf(sr.cs.work_dir, sizeof(sr.cs.work_dir), "%s/work", sr.out_dir);
    if ((mkdir(sr.out_dir, 0755) < 0 && errno != EEXIST) ||
        (mkdir(sr.cs.work_dir, 0755) < 0 && errno != EEXIST)) {
        fprintf(stderr, "rkv swarm: cannot create %s: %s\n", sr.cs.work_dir, strerror(errno));
        return RKV_EXIT_USAGE;
    }
    if (!(sr.fails = calloc(SWARM_MAX_FAILS, sizeof(*sr.fails))))
        return RKV_EXIT_STORE;
    char upto[32] = "";
    if (sr.last != UINT64_MAX || sr.minutes <= 0) /* A..: no end but the time */
        snprintf(upto, sizeof(upto), "%llu", (unsigned long long)sr.last);
    printf("swarm: seeds %llu..%s%s, %u jobs, %.0f s per case at most, failures into %s/\n",
           (unsigned long long)sr.first, upto, sr.minutes > 0 ? " while the time lasts" : "",
           sr.cs.jobs, sr.cs.timeout_s, sr.out_dir);
    fflush(stdout);
    if (!(sr.slots = calloc(RKV_SWARM_MAX_JOBS + 1, sizeof(*sr.slots)))) {
        free(sr.fails);
        return RKV_EXIT_STORE;
    }
    /* Killed, it left DIR/work behind with the files of the seeds in
     * flight (its cases died with it, by PR_SET_PDEATHSIG). */
    if (rkv_swarm_signals_open() < 0) {
        fprintf(stderr, "rkv swarm: cannot watch for stopping signals: %s\n", strerror(errno));
        free(sr.fails);
        free(sr.slots);
        rmdir(sr.cs.work_dir);
        return RKV_EXIT_STORE;
    }
    double t0 = sr.t0_s = sr.shown_s = rkv_timed_now_s();
    sr.next_seed = sr.first;
    struct rkv_swarm_feed feed = {.next = swarm_feed_next, .done = swarm_feed_done, .user = &sr};
    int rc = rkv_swarm_pool_feed(&feed, sr.cs.jobs, sr.cs.timeout_s, swarm_case, &sr.cs);
    if (rc < 0 && !rkv_swarm_signalled())
        fprintf(stderr, "rkv swarm: cannot start a case: %s\n", strerror(errno));
    double seeds_s = rkv_timed_now_s() - t0;
    swarm_shrink_all(&sr);
    swarm_summary(&sr, seeds_s);
    int signo = rkv_swarm_signalled();
    if (signo)
        swarm_forget_in_flight(&sr);
    if (rmdir(sr.cs.work_dir) < 0 && errno != ENOENT && signo)
        fprintf(stderr, "rkv swarm: cannot remove %s: %s\n", sr.cs.work_dir, strerror(errno));
    if (signo)
        fprintf(stderr,
                "rkv swarm: stopped by %s: its cases were killed and %s removed; the "
                "failures found so far are kept in %s/\n",
                strsignal(signo), sr.cs.work_dir, sr.out_dir);
    fflush(stdout);
    uint64_t failed = 0;
    for (int v = 0; v < RKV_SWV_COUNT_; v++)
        failed += rkv_swarm_failed(v) ? sr.by_verdict[v] : 0;
    free(sr.fails);
    free(sr.slots);
    rkv_swarm_signals_close(); /* raises the signal again: ends here if it came */
    if (signo)                 /* as the shell reports a process the signal ended */
        return 128 + signo;
    if (rc < 0)
        return RKV_EXIT_STORE;
    return failed ? RKV_EXIT_CHECK : RKV_EXIT_OK;
}
