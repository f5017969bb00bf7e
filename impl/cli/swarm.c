/* rkv swarm: its flags and help (the search is harness/swarm_run.c, the
 * cases run in the twin). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "harness/swarm_run.h"

#if RKV_WITH_SIM
/* The oracle's self-test hook: RKV_TEST_CORRUPT_ROW corrupts that row of
 * every tensor when the servers create it, as for rkv run (tests only). */
static uint64_t swarm_test_hook(void)
{
    const char *bad = getenv("RKV_TEST_CORRUPT_ROW");
    return bad && *bad ? strtoull(bad, NULL, 0) : UINT64_MAX;
}

static void swarm_usage(FILE *out)
{
    fprintf(out,
            "usage: rkv swarm [--seeds A..B | --seeds A.. --minutes M | --minutes M] [--jobs N]\n"
            "                 [--out DIR] [--timeout S] [--shrink-runs N] [--shrink-minutes M]\n"
            "                 [--replay-every K] [--backend sim|tcp] [--verbose]\n"
            "       rkv swarm --print SEED\n"
            "Each seed generates one random scenario (written as a file, loaded as one), runs it\n"
            "in the twin in a child process, and checks it with the oracle. A failure prints the\n"
            "seed and the first wrong value or error, keeps DIR/seed-N.yaml and its output, and\n"
            "is shrunk to DIR/seed-N.min.yaml, the smallest file that still fails the same way.\n"
            "  --seeds A..B     the seeds to run (default 1..100); A.. runs until --minutes\n"
            "  --minutes M      stop starting seeds after M minutes (alone: seeds from the clock)\n"
            "  --jobs N         cases at a time, one process each (default 2)\n"
            "  --out DIR        failures go there (default swarm-out)\n"
            "  --timeout S      wall seconds before a case counts as hung (default 60)\n"
            "  --shrink-runs N  cases the shrinker may run per failure (default 300; 0: none)\n"
            "  --shrink-minutes M  and the time it may take (default 5; a hang's candidates\n"
            "                   count as hung after 20 s)\n"
            "  --replay-every K run every K-th seed twice and compare the event traces\n"
            "                   (default 4; 1: every seed; 0: none; failures always replay)\n"
            "  --backend tcp    run each case as `rkv run --backend tcp` does: a process per\n"
            "                   node on loopback (the launcher's checks across processes;\n"
            "                   no event trace: a replay compares verdicts; default\n"
            "                   --replay-every 0); default sim, the twin\n"
            "  --print SEED     print the scenario of SEED and exit\n"
            "  --verbose        a line per seed: its verdict and wall time\n"
            "exit: 0 every seed passed, 1 a seed failed, 2 usage, 3 the swarm itself failed;\n"
            "SIGINT, SIGTERM or SIGHUP kill its cases, remove DIR/work (the failures found so\n"
            "far stay in DIR) and end it by that signal (a shell reports 128 + its number)\n");
}

static int swarm_num(const char *flag, const char *v, double min, double max, double *out)
{
    char *end;
    errno = 0;
    double x = v ? strtod(v, &end) : 0;
    if (!v || !*v || *end || errno || x < min || x > max) {
        fprintf(stderr, "rkv swarm: %s: expected a number in %g..%g, got \"%s\"\n", flag, min, max,
                v ? v : "");
        return -1;
    }
    *out = x;
    return 0;
}

/* *open: "A..", until --minutes; kept apart from last, since a closed
 * range may end at UINT64_MAX too. */
static int swarm_seeds(const char *flag, const char *v, uint64_t *first, uint64_t *last, int *open)
{
    *open = 0;
    char *end;
    errno = 0;
    *first = strtoull(v, &end, 10);
    if (end == v || errno || v[0] == '-')
        goto bad;
    if (!*end) {
        *last = *first;
        return 0;
    }
    if (strncmp(end, "..", 2) != 0)
        goto bad;
    const char *b = end + 2;
    if (!*b) {
        *last = UINT64_MAX;
        *open = 1;
        return 0;
    }
    *last = strtoull(b, &end, 10);
    if (*end || errno || b[0] == '-' || *last < *first)
        goto bad;
    return 0;
bad:
    /* --print takes one seed: the ranges read as if it took them. */
    if (!strcmp(flag, "--print"))
        fprintf(stderr,
                "rkv swarm: --print: expected one seed, a whole number in 0..%llu, got \"%s\"\n",
                (unsigned long long)UINT64_MAX, v);
    else
        fprintf(stderr,
                "rkv swarm: %s: expected A..B, A.. or A (A <= B, whole numbers in 0..%llu), got "
                "\"%s\"\n",
                flag, (unsigned long long)UINT64_MAX, v);
    return -1;
}

static int swarm_args(struct rkv_swarm_search_opts *sr, int argc, char **argv, int *print,
                      uint64_t *pseed)
{
    int have_seeds = 0, open = 0, replay_set = 0;
    static const char *const valued[] = {
        "--print",   "--seeds",       "--minutes",        "--jobs",         "--out",
        "--timeout", "--shrink-runs", "--shrink-minutes", "--replay-every", "--backend"};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double x;
        for (size_t k = 0; !v && k < sizeof(valued) / sizeof(valued[0]); k++)
            if (!strcmp(a, valued[k])) /* was exit 2 and no word, for some */
                return fprintf(stderr, "rkv swarm: %s needs a value\n", a), -1;
        if (!strcmp(a, "--print")) {
            uint64_t last;
            int o;
            if (swarm_seeds(a, v, pseed, &last, &o) < 0)
                return -1;
            if (o || last != *pseed) /* it printed the first of a range */
                return fprintf(stderr, "rkv swarm: --print: expected one seed, got \"%s\"\n", v),
                       -1;
            *print = 1;
        } else if (!strcmp(a, "--verbose") || !strcmp(a, "-v")) {
            sr->verbose = 1;
            continue;
        } else if (!strcmp(a, "--seeds")) {
            if (swarm_seeds(a, v, &sr->first, &sr->last, &open) < 0)
                return -1;
            have_seeds = 1;
        } else if (!strcmp(a, "--minutes")) {
            if (swarm_num(a, v, 1e-3, 1e6, &sr->minutes) < 0)
                return -1;
        } else if (!strcmp(a, "--jobs")) {
            if (swarm_num(a, v, 1, 64, &x) < 0)
                return -1;
            sr->runner.jobs = (uint32_t)x;
        } else if (!strcmp(a, "--out")) {
            if (!v || !*v)
                return fprintf(stderr, "rkv swarm: --out: expected a directory\n"), -1;
            sr->out_dir = v;
        } else if (!strcmp(a, "--timeout")) {
            if (swarm_num(a, v, 1, 86400, &sr->runner.timeout_s) < 0)
                return -1;
        } else if (!strcmp(a, "--shrink-runs")) {
            if (swarm_num(a, v, 0, 1e6, &x) < 0)
                return -1;
            sr->runner.shrink_runs = (uint32_t)x;
        } else if (!strcmp(a, "--shrink-minutes")) {
            if (swarm_num(a, v, 0, 1e6, &x) < 0)
                return -1;
            sr->runner.shrink_s = x * 60;
        } else if (!strcmp(a, "--replay-every")) {
            if (swarm_num(a, v, 0, 1e9, &x) < 0)
                return -1;
            sr->replay_every = (uint32_t)x;
            replay_set = 1;
        } else if (!strcmp(a, "--backend")) {
            if (strcmp(v, "sim") != 0 && strcmp(v, "tcp") != 0)
                return fprintf(stderr, "rkv swarm: --backend: expected sim or tcp, got \"%s\"\n",
                               v),
                       -1;
            sr->runner.backend = v;
        } else {
            fprintf(stderr, "rkv swarm: unknown argument '%s'\n", a);
            swarm_usage(stderr);
            return -1;
        }
        i++;
    }
    /* On tcp a passing run has no trace to compare: its replay would only
     * double the time (a failure is still run again before its shrink). */
    if (sr->runner.backend && !strcmp(sr->runner.backend, "tcp") && !replay_set)
        sr->replay_every = 0;
    if (open && sr->minutes <= 0) {
        fprintf(stderr, "rkv swarm: --seeds A.. needs --minutes\n");
        return -1;
    }
    if (!have_seeds && sr->minutes > 0) {
        /* A long run explores seeds no earlier run did; each is printed. */
        sr->first = (uint64_t)time(NULL) * 1000;
        sr->last = UINT64_MAX;
    }
    return 0;
}

int cmd_swarm(int argc, char **argv)
{
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            return swarm_usage(stdout), RKV_EXIT_OK;
    struct rkv_swarm_search_opts so = {
        .out_dir = "swarm-out",
        .first = 1,
        .last = 100,
        .replay_every = 4,
        .max_shrinks = 8,
        .runner = {.jobs = 2, .timeout_s = 60, .shrink_runs = 300, .shrink_s = 300}};
    int print = 0;
    uint64_t pseed = 0;
    if (swarm_args(&so, argc, argv, &print, &pseed) < 0)
        return RKV_EXIT_USAGE;
    if (print) {
        struct rkv_swarm_spec sp;
        rkv_swarm_generate(pseed, &sp);
        return rkv_swarm_yaml(&sp, NULL, stdout) < 0 ? RKV_EXIT_STORE : RKV_EXIT_OK;
    }
    so.runner.test_corrupt_row = swarm_test_hook();
    so.runner.twin = CMD_TWIN;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0) {
        fprintf(stderr, "rkv swarm: cannot find this binary (/proc/self/exe) for the nodes\n");
        return RKV_EXIT_STORE;
    }
    exe[n] = 0;
    so.runner.exe = exe;
    return rkv_swarm_search(&so);
}
#else
int cmd_swarm(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "rkv swarm: this rkv was built without the twin (cmake -DRKV_WITH_SIM=ON, "
                    "needs libsimgrid-dev)\n");
    return RKV_EXIT_USAGE;
}
#endif
