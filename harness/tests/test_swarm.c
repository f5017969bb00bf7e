/* The swarm tester: generation is a function of the seed; every generated
 * file loads and covers the space the issue asks for; every reduction keeps
 * a valid file; the process pool turns a crash and a hang into failures of
 * their case; a re-run gives the same event trace; and the shrinker turns a
 * real injected failure (the servers corrupt a row) into a smaller file that
 * still fails the same way and passes without the fault. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "sim/twin/twin_report.h"
#include "harness/oracle.h"
#include "harness/scenario.h"
#include "harness/swarm.h"
#include "harness/swarm_run.h"
#include "harness/tests/rkv_run.h"

#define N_SEEDS 400

static char *yaml_of(const struct rkv_swarm_spec *sp)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    assert_int_equal(rkv_swarm_yaml(sp, NULL, f), 0);
    fclose(f);
    return buf;
}

/* Loads sp through the scenario loader and the oracle's epoch check, as
 * `rkv run` and the swarm's cases do; fails the test with the message. */
static void assert_loads(const struct rkv_swarm_spec *sp, const char *dir)
{
    char path[600], err[512];
    snprintf(path, sizeof(path), "%s/s.yaml", dir);
    assert_int_equal(rkv_swarm_write_file(sp, NULL, path), 0);
    struct rkv_scenario *sc = NULL;
    int rc = rkv_scenario_load(path, &sc, err, sizeof(err));
    if (rc == 0)
        rc = rkv_oracle_check_scenario(sc, err, sizeof(err));
    if (rc < 0) {
        char *y = yaml_of(sp);
        fail_msg("seed %llu: %s\n%s", (unsigned long long)sp->seed, err, y);
    }
    assert_int_equal(sc->machines, sp->machines);
    assert_int_equal(sc->n_phases, sp->n_phases);
    assert_int_equal(sc->n_faults, sp->n_faults);
    rkv_scenario_free(sc);
}

static char *tmp_dir(void)
{
    static char dirs[8][64];
    static int n;
    char *d = dirs[n++ % 8];
    snprintf(d, 64, "/tmp/rkv-test-swarm.XXXXXX");
    assert_non_null(mkdtemp(d));
    return d;
}

static void rm_dir(const char *d)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d);
    assert_int_equal(system(cmd), 0);
}

static void test_generation_is_a_function_of_the_seed(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 50; seed++) {
        struct rkv_swarm_spec a, b, c;
        rkv_swarm_generate(seed, &a);
        rkv_swarm_generate(seed, &b);
        rkv_swarm_generate(seed + 1000, &c);
        char *ya = yaml_of(&a), *yb = yaml_of(&b), *yc = yaml_of(&c);
        assert_string_equal(ya, yb);
        assert_string_not_equal(ya, yc);
        free(ya), free(yb), free(yc);
    }
}

/* Every generated file loads, and over N_SEEDS seeds the space the swarm
 * promises is reached: each of these counts must be above 0. */
struct coverage {
    uint32_t machines[9], servers[5], workers[7], dtype[4], part[3], keys[5], op[3], kind[5];
    uint32_t platform[4], phases_max, durable, restart, machine_lost, s0, worker_target;
    uint32_t dup_ids, one_row, empty_machine, no_barrier, jitter, think, after_phase;
    uint32_t assign_then_sum, big_row;
};

static void cover_spec(struct coverage *cv, const struct rkv_swarm_spec *sp)
{
    cv->machines[sp->machines]++;
    cv->servers[sp->servers_per_machine]++;
    cv->workers[sp->workers_per_machine]++;
    cv->platform[sp->platform]++;
    cv->durable += (uint32_t)sp->durable;
    cv->jitter += sp->jitter > 0;
    cv->phases_max = sp->n_phases > cv->phases_max ? sp->n_phases : cv->phases_max;
    for (uint32_t i = 0; i < sp->n_tensors; i++) {
        const struct rkv_swarm_tensor *t = &sp->tensors[i];
        uint32_t elems = 1, seen = 0;
        for (uint32_t k = 0; k < t->n_shape; k++)
            elems *= t->shape[k];
        cv->dtype[t->dtype]++;
        cv->part[t->partition]++;
        cv->one_row += t->rows == 1;
        cv->big_row += elems * (t->dtype & 1 ? 8u : 4u) > 1024;
        for (uint32_t k = 0; k < t->n_book && t->partition == 2; k++)
            seen |= 1u << t->book[k];
        cv->empty_machine += t->partition == 2 && seen != (1u << sp->machines) - 1;
    }
    int last_op[RKV_SWARM_MAX_TENSORS] = {-1, -1, -1};
    for (uint32_t i = 0; i < sp->n_phases; i++) {
        const struct rkv_swarm_phase *p = &sp->phases[i];
        cv->keys[p->keys]++;
        cv->op[p->op]++;
        cv->dup_ids += p->ids > sp->tensors[p->tensor].rows;
        cv->no_barrier += !p->barrier_after;
        cv->think += p->think_us > 0;
        if (p->push > 0) {
            cv->assign_then_sum += last_op[p->tensor] == 0 && p->op != 0;
            last_op[p->tensor] = p->op;
        }
    }
    for (uint32_t i = 0; i < sp->n_faults; i++) {
        const struct rkv_swarm_fault *f = &sp->faults[i];
        cv->kind[f->kind]++;
        cv->restart += f->restart_after_s > 0;
        cv->machine_lost += (uint32_t)f->machine_lost;
        cv->s0 += f->server && f->machine == 0 && f->local == 0;
        cv->worker_target += !f->server;
        cv->after_phase += f->after_phase >= 0;
    }
}

static void test_every_generated_file_loads_and_covers_the_space(void **state)
{
    (void)state;
    char *dir = tmp_dir();
    struct coverage cv;
    memset(&cv, 0, sizeof(cv));
    for (uint64_t seed = 1; seed <= N_SEEDS; seed++) {
        struct rkv_swarm_spec sp;
        rkv_swarm_generate(seed, &sp);
        assert_loads(&sp, dir);
        cover_spec(&cv, &sp);
    }
    rm_dir(dir);
    for (int i = 1; i <= 8; i++)
        assert_true(cv.machines[i] > 0);
    for (int i = 1; i <= 4; i++)
        assert_true(cv.servers[i] > 0);
    for (int i = 1; i <= 6; i++)
        assert_true(cv.workers[i] > 0);
    for (int i = 0; i < 4; i++)
        assert_true(cv.dtype[i] > 0 && cv.platform[i] > 0);
    for (int i = 0; i < 3; i++)
        assert_true(cv.part[i] > 0 && cv.op[i] > 0);
    for (int i = 0; i < 5; i++)
        assert_true(cv.keys[i] > 0 && cv.kind[i] > 0);
    assert_true(cv.phases_max >= 15);
    assert_true(cv.durable > 0 && cv.restart > 0 && cv.machine_lost > 0);
    assert_true(cv.s0 > 0 && cv.worker_target > 0 && cv.after_phase > 0);
    assert_true(cv.dup_ids > 0 && cv.one_row > 0 && cv.empty_machine > 0 && cv.big_row > 0);
    assert_true(cv.no_barrier > 0 && cv.jitter > 0 && cv.think > 0 && cv.assign_then_sum > 0);
    printf("# %d seeds: %u faults on s0.0, %u on workers, %u restarts, %u phases at most, "
           "%u phases with more ids than rows\n",
           N_SEEDS, cv.s0, cv.worker_target, cv.restart, cv.phases_max, cv.dup_ids);
}

/* Every reduction of a spec is a valid file no larger than the spec. */
static void test_every_reduction_loads(void **state)
{
    (void)state;
    char *dir = tmp_dir();
    for (uint64_t seed = 1; seed <= 40; seed++) {
        struct rkv_swarm_spec sp, red;
        rkv_swarm_generate(seed, &sp);
        uint32_t k = 0, smaller = 0;
        for (; rkv_swarm_reduce(&sp, k, &red); k++) {
            assert_true(rkv_swarm_size(&red) <= rkv_swarm_size(&sp));
            if (rkv_swarm_size(&red) < rkv_swarm_size(&sp)) {
                smaller++;
                assert_loads(&red, dir);
            }
        }
        assert_true(k > 100);
        assert_true(smaller > 0);
    }
    rm_dir(dir);
}

/* The writer gives the loader only keys that act: local-only where every
 * machine with workers owns rows of the tensor, remote-only where none
 * owns them all, else uniform (the rows those keys drew); a phase that
 * never pushes names no push op, and lr goes with sgd only. */
static void test_written_phases_have_only_keys_that_act(void **state)
{
    (void)state;
    char *dir = tmp_dir();
    struct rkv_swarm_spec sp;
    rkv_swarm_generate(1, &sp);
    sp.machines = 2;
    sp.workers_per_machine = 1;
    sp.workers = 0;
    sp.durable = 0;
    sp.n_faults = 0;
    sp.n_tensors = 1;
    sp.tensors[0] = (struct rkv_swarm_tensor){.rows = 1, .shape = {1}, .n_shape = 1, .n_book = 1};
    sp.n_phases = 1;
    sp.phases[0] = (struct rkv_swarm_phase){.push = 0,
                                            .op = 2,
                                            .lr = 0.25,
                                            .ids = 1,
                                            .keys = 3,
                                            .zipf_s = 1.1,
                                            .rounds = 1,
                                            .barrier_after = 1};
    static const struct {
        int partition; /* 0 range, 2 explicit with book [0] */
        uint64_t rows;
        uint32_t workers; /* 0: both machines */
        double push;
        int keys;
        const char *want, *absent;
    } cases[] = {
        /* range: 1 row over 2 machines leaves machine 0 none */
        {0, 1, 0, 0, 3, "keys: uniform\n", "push_op"},
        {0, 2, 0, 0, 3, "keys: local-only\n", "lr:"},
        {0, 1, 0, 0.5, 4, "keys: uniform\n", "keys: remote-only"},
        {0, 2, 0, 0.5, 4, "keys: remote-only\n", "keys: uniform"},
        /* book [0]: machine 1 owns nothing, machine 0 everything */
        {2, 4, 0, 1, 3, "keys: uniform\n", "keys: local-only"},
        {2, 4, 1, 1, 3, "keys: local-only\n", "keys: uniform"}, /* machine 1 runs no worker */
        {2, 4, 1, 1, 4, "keys: uniform\n", "keys: remote-only"},
        {2, 4, 0, 1, 1, "zipf_s: ", "keys: uniform"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sp.tensors[0].partition = cases[i].partition;
        sp.tensors[0].rows = cases[i].rows;
        sp.workers = cases[i].workers;
        sp.phases[0].push = cases[i].push;
        sp.phases[0].keys = cases[i].keys;
        rkv_swarm_normalize(&sp);
        char *y = yaml_of(&sp);
        if (!strstr(y, cases[i].want) || strstr(y, cases[i].absent))
            fail_msg("case %zu: expected \"%s\" and no \"%s\":\n%s", i, cases[i].want,
                     cases[i].absent, y);
        if (cases[i].push > 0 && (!strstr(y, "push_op: sgd\n") || !strstr(y, "lr: 0.25\n")))
            fail_msg("case %zu: a pushing sgd phase lost its op or lr:\n%s", i, y);
        free(y);
        assert_loads(&sp, dir);
    }
    rm_dir(dir);
}

static void test_same_failure_ignores_numbers(void **state)
{
    (void)state;
    struct rkv_swarm_outcome a = {.verdict = RKV_SWV_LOST}, b = a, c = a, d = a;
    snprintf(a.what, sizeof(a.what), "w3: barrier: server 0: connection lost");
    snprintf(b.what, sizeof(b.what), "w12: barrier: server 4: connection lost");
    snprintf(c.what, sizeof(c.what), "w3: shutdown: server 0: connection lost");
    d.verdict = RKV_SWV_WRONG;
    assert_true(rkv_swarm_same_failure(&a, &b));
    assert_false(rkv_swarm_same_failure(&a, &c));
    assert_false(rkv_swarm_same_failure(&a, &d));
}

/* ---- the process pool ---- */

static void fake_case(void *user, const char *path, struct rkv_swarm_outcome *out)
{
    (void)user;
    if (strstr(path, "abort"))
        abort();
    if (strstr(path, "hang"))
        for (;;)
            pause();
    if (strstr(path, "exit"))
        _exit(3);
    out->verdict = RKV_SWV_PASS;
    out->hash = 42;
}

static void test_pool_turns_a_crash_and_a_hang_into_failures(void **state)
{
    (void)state;
    struct rkv_swarm_job jobs[] = {
        {.path = "pass"}, {.path = "abort"}, {.path = "hang"}, {.path = "exit"}, {.path = "pass"}};
    assert_int_equal(rkv_swarm_pool_run(jobs, 5, 2, 1.0, fake_case, NULL), 0);
    assert_int_equal(jobs[0].out.verdict, RKV_SWV_PASS);
    assert_int_equal(jobs[0].out.hash, 42);
    assert_int_equal(jobs[1].out.verdict, RKV_SWV_CRASH);
    assert_non_null(strstr(jobs[1].out.what, "signal 6"));
    assert_int_equal(jobs[2].out.verdict, RKV_SWV_TIMEOUT);
    assert_int_equal(jobs[3].out.verdict, RKV_SWV_CRASH);
    assert_non_null(strstr(jobs[3].out.what, "status 3"));
    assert_int_equal(jobs[4].out.verdict, RKV_SWV_PASS);
}

static void test_compare_reports_another_trace(void **state)
{
    (void)state;
    struct rkv_swarm_outcome a = {.verdict = RKV_SWV_PASS, .hash = 1}, b = a, out = a;
    rkv_swarm_compare(&a, &b, &out);
    assert_int_equal(out.verdict, RKV_SWV_PASS);
    b.hash = 2;
    rkv_swarm_compare(&a, &b, &out);
    assert_int_equal(out.verdict, RKV_SWV_NONDET);
    b = a;
    b.verdict = RKV_SWV_WRONG;
    out = a;
    rkv_swarm_compare(&a, &b, &out);
    assert_int_equal(out.verdict, RKV_SWV_NONDET);
}

/* ---- in the twin ---- */

static struct rkv_swarm_runner swarm_in(const char *dir, uint64_t corrupt)
{
    struct rkv_swarm_runner cs = {.jobs = 2,
                                  .timeout_s = 120,
                                  .shrink_runs = 400,
                                  .test_corrupt_row = corrupt,
                                  .twin = rkv_twin_launch};
    snprintf(cs.work_dir, sizeof(cs.work_dir), "%s", dir);
    return cs;
}

static void test_a_rerun_gives_the_same_trace(void **state)
{
    (void)state;
    char *dir = tmp_dir();
    struct rkv_swarm_runner cs = swarm_in(dir, UINT64_MAX);
    for (uint64_t seed = 1; seed <= 6; seed++) {
        struct rkv_swarm_spec sp;
        struct rkv_swarm_outcome o;
        rkv_swarm_generate(seed, &sp);
        assert_int_equal(rkv_swarm_replay(&cs, &sp, &o), 0);
        if (o.verdict == RKV_SWV_NONDET || o.verdict >= RKV_SWV_INVALID)
            fail_msg("seed %llu: %s: %s", (unsigned long long)seed,
                     rkv_swarm_verdict_name(o.verdict), o.what);
        assert_true(o.hash != 0 && o.events > 0);
    }
    rm_dir(dir);
}

/* The servers corrupt row 0 of every tensor at creation (the oracle's
 * self-test hook): a generated case that notices is shrunk to a smaller
 * one that still reports a wrong value, and that passes without the hook. */
static void test_the_shrinker_reduces_a_real_failure(void **state)
{
    (void)state;
    char *dir = tmp_dir();
    struct rkv_swarm_runner bad = swarm_in(dir, 0), good = swarm_in(dir, UINT64_MAX);
    struct rkv_swarm_spec sp, min;
    struct rkv_swarm_outcome o = {0}, min_out;
    /* The smallest fault-free case of a few seeds (its only failure is the
     * corrupt row) with more than one machine and worker: fewer runs to shrink. */
    uint64_t seed = 0;
    for (uint64_t s = 1; s <= 60; s++) {
        struct rkv_swarm_spec c;
        rkv_swarm_generate(s, &c);
        if (c.n_faults || c.durable || c.machines < 2 || c.workers_per_machine < 2)
            continue;
        if (!seed || rkv_swarm_size(&c) < rkv_swarm_size(&sp)) {
            seed = s;
            sp = c;
        }
    }
    assert_true(seed > 0);
    assert_int_equal(rkv_swarm_replay(&bad, &sp, &o), 0);
    assert_int_equal(o.verdict, RKV_SWV_WRONG);
    uint32_t runs;
    assert_int_equal(rkv_swarm_shrink(&bad, &sp, &o, &min, &min_out, &runs), 0);
    printf("# seed %llu: size %llu -> %llu in %u runs: %u machines x (%u servers + %u workers), "
           "%u phases, rows %llu; %s\n",
           (unsigned long long)seed, (unsigned long long)rkv_swarm_size(&sp),
           (unsigned long long)rkv_swarm_size(&min), runs, min.machines, min.servers_per_machine,
           min.workers_per_machine, min.n_phases, (unsigned long long)min.tensors[0].rows,
           min_out.what);
    assert_true(runs > 0);
    assert_true(rkv_swarm_size(&min) < rkv_swarm_size(&sp));
    assert_int_equal(min_out.verdict, RKV_SWV_WRONG);
    assert_non_null(strstr(min_out.what, "row 0"));
    /* A one-phase, one-machine case is as small as this failure gets. */
    assert_int_equal(min.n_phases, 1);
    assert_int_equal(min.machines, 1);
    /* Still fails with the hook, passes without it: the failure is the hook's. */
    assert_int_equal(rkv_swarm_replay(&bad, &min, &o), 0);
    assert_int_equal(o.verdict, RKV_SWV_WRONG);
    assert_int_equal(rkv_swarm_replay(&good, &min, &o), 0);
    assert_int_equal(o.verdict, RKV_SWV_PASS);
    assert_loads(&min, dir);
    rm_dir(dir);
}

/* Found by the swarm: a crash triggered by client 0's phase, in a run where
 * a worker's link broke before it joined (so the others wait out the 60 s
 * hello timeout), made the twin's fault actor wake every simulated
 * microsecond: 6e7 wake-ups, over a minute of wall time, and the swarm's
 * wall-time limit called it TIMEOUT. The case ends in its own time, vacuous:
 * client 0 never finishes phase a, so the crash never fires, as on tcp (the
 * twin fired it at the run's end and passed). That the actor wakes only
 * for phase and worker ends is counted in test_twin
 * (test_step_triggered_crash_wakes_only_for_events), not timed here. */
static void test_a_step_triggered_crash_after_a_hello_timeout(void **state)
{
    (void)state;
    char *dir = tmp_dir(), path[600];
    snprintf(path, sizeof(path), "%s/step.yaml", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("seed: 1\n"
          "cluster: {machines: 1, servers_per_machine: 2, workers_per_machine: 2}\n"
          "tensors:\n  - {name: t, rows: 8}\n"
          "workload:\n  - {name: a, tensor: t, rounds: 2}\n  - {name: b, tensor: t, rounds: 2}\n"
          "faults:\n"
          "  - {kind: link_down, target: w1, at_s: 0, duration_s: 0.01, retransmit_ms: 1}\n"
          "  - {kind: crash, target: s0.1, after_phase: a}\n",
          f);
    assert_int_equal(fclose(f), 0);
    struct rkv_swarm_runner cs = swarm_in(dir, UINT64_MAX);
    cs.timeout_s = 120; /* a sanitizer or coverage build on a busy host */
    struct rkv_swarm_job job = {.path = path};
    assert_int_equal(rkv_swarm_run_files(&cs, &job, 1), 0);
    if (job.out.verdict != RKV_SWV_VACUOUS || !strstr(job.out.what, "a fault touched nothing"))
        fail_msg("%s: %s", rkv_swarm_verdict_name(job.out.verdict), job.out.what);
    assert_true(job.out.sim_s > 60); /* the workers did wait out the timeout */
    rm_dir(dir);
}

/* The first seed from `from` whose case has no fault: it must pass. */
static uint64_t fault_free_seed(uint64_t from)
{
    struct rkv_swarm_spec sp;
    for (uint64_t seed = from;; seed++) {
        rkv_swarm_generate(seed, &sp);
        if (!sp.n_faults && !sp.durable && sp.machines * sp.workers_per_machine > 1)
            return seed;
    }
}

/* The command: a clean seed exits 0; with the hook it prints the seed and
 * the wrong value, keeps the file and writes the shrunk one. */
static void test_the_command_keeps_and_shrinks_a_failure(void **state)
{
    (void)state;
    char *dir = tmp_dir(), args[1024], path[600], want[64];
    uint64_t a = fault_free_seed(1), b = fault_free_seed(a + 1);
    snprintf(args, sizeof(args), "swarm --seeds %llu --jobs 2 --out %s", (unsigned long long)a,
             dir);
    int rc = run_rkv("", args);
    if (rc != 0)
        fail_msg("rkv %s: exit %d\n%s", args, rc, out);
    assert_non_null(strstr(out, "1 seeds"));
    snprintf(args, sizeof(args), "swarm --seeds %llu --jobs 2 --shrink-runs 16 --out %s",
             (unsigned long long)b, dir);
    rc = run_rkv("RKV_TEST_CORRUPT_ROW=0", args);
    assert_int_equal(rc, 1);
    snprintf(want, sizeof(want), "seed %llu: FAIL (wrong value)", (unsigned long long)b);
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, "row 0"));
    snprintf(path, sizeof(path), "%s/seed-%llu.yaml", dir, (unsigned long long)b);
    assert_int_equal(access(path, R_OK), 0);
    snprintf(path, sizeof(path), "%s/seed-%llu.min.yaml", dir, (unsigned long long)b);
    assert_int_equal(access(path, R_OK), 0);
    /* The kept files are scenarios: rkv run reproduces the failure. */
    snprintf(args, sizeof(args), "run %s", path);
    assert_int_equal(run_rkv("RKV_TEST_CORRUPT_ROW=0", args), 1);
    assert_int_equal(run_rkv("", args), 0);
    assert_int_equal(run_rkv("", "swarm --seeds 9..8"), 2);
    assert_int_equal(run_rkv("", "swarm --jobs 0"), 2);
    rm_dir(dir);
}

/* --backend tcp: the same generated files as processes on loopback,
 * checked by each worker's oracle and the launcher's checks across them
 * (a tcp-only false FAIL, pins compared across epochs, went unseen by
 * seeds run in the twin alone). A clean seed passes there, and a row the
 * servers corrupt is found there too. */
static void test_the_command_on_tcp(void **state)
{
    (void)state;
    char *dir = tmp_dir(), args[1024], want[64];
    uint64_t a = fault_free_seed(1);
    snprintf(args, sizeof(args), "swarm --backend tcp --seeds %llu --out %s", (unsigned long long)a,
             dir);
    int rc = run_rkv("", args);
    if (rc != 0 || !strstr(out, "1 seeds"))
        fail_msg("rkv %s: exit %d\n%s", args, rc, out);
    snprintf(args, sizeof(args), "swarm --backend tcp --seeds %llu --shrink-runs 0 --out %s",
             (unsigned long long)a, dir);
    assert_int_equal(run_rkv("RKV_TEST_CORRUPT_ROW=0", args), 1);
    snprintf(want, sizeof(want), "seed %llu: FAIL (wrong value)", (unsigned long long)a);
    if (!strstr(out, want))
        fail_msg("expected \"%s\":\n%s", want, out);
    /* A file tcp cannot run (a slow_cpu fault is the twin's alone) is
     * vacuous there: it read as a failure, "ended with exit 2". */
    struct rkv_swarm_spec sp;
    uint64_t slow = 1;
    for (int found = 0; !found; slow++) {
        rkv_swarm_generate(slow, &sp);
        for (uint32_t i = 0; i < sp.n_faults && !found; i++)
            found = sp.faults[i].kind == RKV_SWF_SLOW_CPU;
    }
    slow--;
    snprintf(args, sizeof(args), "swarm --backend tcp --seeds %llu --verbose --out %s",
             (unsigned long long)slow, dir);
    rc = run_rkv("", args);
    if (rc != 0 || !strstr(out, "vacuous") || !strstr(out, "not run on tcp"))
        fail_msg("rkv %s: exit %d\n%s", args, rc, out);
    assert_int_equal(run_rkv("", "swarm --backend verbs"), 2);
    assert_non_null(strstr(out, "--backend: expected sim or tcp"));
    rm_dir(dir);
}

/* The top of the seed range is a seed like any other (a closed range
 * ending at 2^64-1 was taken for "A.." and wanted --minutes), and a flag
 * without its value is named (--print alone exited 2 saying nothing). */
static void test_the_command_says_what_is_wrong(void **state)
{
    (void)state;
    char *dir = tmp_dir(), args[256];
    const char *ranges[] = {"18446744073709551615", "18446744073709551614..18446744073709551615"};
    const char *counts[] = {"swarm: 1 seeds", "swarm: 2 seeds"};
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof(args), "swarm --seeds %s --out %s", ranges[k], dir);
        int rc = run_rkv("", args);
        if (rc != 0 || !strstr(out, counts[k]))
            fail_msg("rkv %s: exit %d, expected 0 and \"%s\":\n%s", args, rc, counts[k], out);
    }
    assert_int_equal(run_rkv("", "swarm --seeds 18446744073709551615.."), 2);
    assert_non_null(strstr(out, "--seeds A.. needs --minutes"));
    assert_int_equal(run_rkv("", "swarm --seeds 18446744073709551616"), 2);
    assert_non_null(strstr(out, "--seeds: expected"));
    const char *flags[] = {"--print",       "--seeds",   "--minutes",     "--jobs",
                           "--out",         "--timeout", "--shrink-runs", "--shrink-minutes",
                           "--replay-every"};
    for (size_t k = 0; k < sizeof(flags) / sizeof(flags[0]); k++) {
        char want[64];
        snprintf(args, sizeof(args), "swarm %s", flags[k]);
        snprintf(want, sizeof(want), "rkv swarm: %s needs a value", flags[k]);
        int rc = run_rkv("", args);
        if (rc != 2 || !strstr(out, want))
            fail_msg("rkv %s: exit %d, expected 2 and \"%s\":\n%s", args, rc, want, out);
    }
    rm_dir(dir);
}

/* Whether dir/work holds a seed's file: a case is in flight. */
static int work_has_a_seed(const char *dir)
{
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "ls '%s'/work/seed-*.yaml >/dev/null 2>&1", dir);
    return system(cmd) == 0;
}

/* Stopped by a signal (a `timeout`, a Ctrl-C, a batch system's SIGTERM),
 * it left OUT/work behind with the files of the seeds in flight: it now
 * kills its cases, removes OUT/work, says so and ends by that signal. */
static void test_the_command_cleans_up_when_stopped(void **state)
{
    (void)state;
    const int sigs[] = {SIGTERM, SIGINT};
    for (size_t k = 0; k < sizeof(sigs) / sizeof(sigs[0]); k++) {
        char *dir = tmp_dir(), log[600], work[600], seeds[32] = "1..1000000";
        snprintf(log, sizeof(log), "%s.log", dir);
        snprintf(work, sizeof(work), "%s/work", dir);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            freopen(log, "w", stdout);
            dup2(fileno(stdout), 2);
            /* SIGINT as from a terminal: not ignored as a shell's background job's is. */
            signal(SIGINT, SIG_DFL);
            /* Its own group: a failure below kills its cases with it. */
            setpgid(0, 0);
            /* A backstop: a test killed before its kill below (by ctest's
             * timeout, say) must not leave a million seeds running; a
             * pending alarm survives exec. */
            alarm(600);
            execl(RKV_BIN, RKV_BIN, "swarm", "--seeds", seeds, "--jobs", "2", "--out", dir,
                  (char *)NULL);
            _exit(127);
        }
        setpgid(pid, pid); /* as the child does: whichever runs first */
        /* What the loop saw is what counts: asked again, the case seen may
         * have ended and its file gone (CI's coverage run hit that). */
        int t = 0, seen = 0;
        while (!(seen = work_has_a_seed(dir)) && t++ < 600) /* 60 s */
            usleep(100000);
        if (!seen) { /* stopped here, not left running (it ran 2.5 h once) */
            kill(-pid, SIGKILL);
            waitpid(pid, NULL, 0);
            fail_msg("rkv swarm --seeds %s ran no case within 60 s", seeds);
        }
        assert_int_equal(kill(pid, sigs[k]), 0);
        int st = 0;
        for (t = 0; t < 300 && waitpid(pid, &st, WNOHANG) == 0; t++) /* 30 s */
            usleep(100000);
        if (t == 300) {
            kill(-pid, SIGKILL);
            waitpid(pid, &st, 0);
            fail_msg("rkv swarm did not end within 30 s of %s", strsignal(sigs[k]));
        }
        FILE *f = fopen(log, "r");
        assert_non_null(f);
        size_t n = fread(out, 1, sizeof(out) - 1, f);
        out[n] = 0;
        fclose(f);
        unlink(log);
        if (!WIFSIGNALED(st) || WTERMSIG(st) != sigs[k])
            fail_msg("rkv swarm: status 0x%x, expected the end by %s:\n%s", st, strsignal(sigs[k]),
                     out);
        if (access(work, F_OK) == 0)
            fail_msg("%s is left after %s:\n%s", work, strsignal(sigs[k]), out);
        assert_non_null(strstr(out, "rkv swarm: stopped by"));
        assert_non_null(strstr(out, "removed; the failures found so far are kept in"));
        rm_dir(dir);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generation_is_a_function_of_the_seed),
        cmocka_unit_test(test_every_generated_file_loads_and_covers_the_space),
        cmocka_unit_test(test_every_reduction_loads),
        cmocka_unit_test(test_written_phases_have_only_keys_that_act),
        cmocka_unit_test(test_same_failure_ignores_numbers),
        cmocka_unit_test(test_pool_turns_a_crash_and_a_hang_into_failures),
        cmocka_unit_test(test_compare_reports_another_trace),
        cmocka_unit_test(test_a_rerun_gives_the_same_trace),
        cmocka_unit_test(test_the_shrinker_reduces_a_real_failure),
        cmocka_unit_test(test_a_step_triggered_crash_after_a_hello_timeout),
        cmocka_unit_test(test_the_command_keeps_and_shrinks_a_failure),
        cmocka_unit_test(test_the_command_says_what_is_wrong),
        cmocka_unit_test(test_the_command_on_tcp),
        cmocka_unit_test(test_the_command_cleans_up_when_stopped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
