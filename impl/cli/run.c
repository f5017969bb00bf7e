/* rkv run and rkv demo: their flags and help; the launcher (harness/launch.c)
 * and the twin (twin_cmd.c) run them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "harness/calib.h"
#include "harness/launch.h"
#include "harness/scenario.h"
#include "util/util.h"

static void demo_usage(void)
{
    printf("usage: rkv demo [--machines M] [--servers-per-machine S] [--num-workers W]\n"
           "                [--rows N] [--value-bytes B] [--rounds R] [settings]\n"
           "Starts M x S servers and W workers on this host over loopback TCP (defaults\n"
           "2 x 2 and 4), runs the built-in scenario (every value checked by the oracle),\n"
           "then a timed phase; prints throughput next to loopback TCP and memcpy measured\n"
           "in the same run, and the verdict.\n\n");
    rkv_cmd_settings_help(stdout);
}

/* --out is made (one level, as the report writer does) and checked before
 * the run: a report that cannot be written was found only after a run of
 * any length, and the exit status said nothing. *made: this call made it. */
static int run_out_dir_ok(const char *dir, int *made)
{
    struct stat st;
    if (mkdir(dir, 0755) == 0)
        *made = 1;
    else if (errno != EEXIST) {
        fprintf(stderr, "rkv run: --out %s: cannot create it: %s\n", dir, strerror(errno));
        return -1;
    }
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || access(dir, W_OK | X_OK) < 0) {
        fprintf(stderr, "rkv run: --out %s: not a directory this user can write\n", dir);
        return -1;
    }
    return 0;
}

/* --trace's file, checked before the run as --out is: a directory was
 * refused only after the run had started and printed its first line (an
 * outside tester). The file is opened for append, so nothing is lost. */
static int run_trace_ok(const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        fprintf(stderr, "rkv run: --trace: cannot write %s: %s\n", path, strerror(EISDIR));
        return -1;
    }
    int existed = access(path, F_OK) == 0;
    FILE *f = fopen(path, "a");
    if (!f) {
        fprintf(stderr, "rkv run: --trace: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    fclose(f);
    if (!existed)
        unlink(path);
    return 0;
}

int cmd_demo(int argc, char **argv, const char *self)
{
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            demo_usage();
            return RKV_EXIT_OK;
        }
    }
    return rkv_launch_demo(argc, argv, self);
}

static void run_usage(void)
{
    printf("usage: rkv run FILE [--backend sim|tcp|verbs] [--seed N] [--out DIR] [--plot]\n"
           "                    [--trace FILE.json] [settings]\n"
           "       rkv run FILE --launcher mpirun|srun --dry-run\n"
           "Runs the scenario FILE, checks every pulled value with the oracle, prints per-phase\n"
           "ops, throughput, latency and the verdict. Exit 0 only if the oracle passed.\n"
           "  --backend sim   (the default) the twin: every node a SimGrid actor in this\n"
           "                  process on the scenario's modelled network; prints simulated\n"
           "                  time and the event-trace hash (same scenario + seed => same hash,\n"
           "                  unless --calibration's cpu = measured: handlers' real CPU time)\n"
           "  --backend tcp   one process per server and worker on this host, loopback TCP\n"
           "  --out DIR       also write report.json and report.md\n"
           "  --plot          also draw latency_cdf.png and throughput.png (gnuplot), in\n"
           "                  --out DIR, or without it in the current directory\n"
           "  --trace FILE    Chrome trace (Perfetto): with sim every transfer and handler;\n"
           "                  with tcp/verbs every call, message and handler of every\n"
           "                  process, merged on the launcher's clock\n"
           "  --jitter F      (sim) delay each delivery by up to F x its network time\n"
           "  --cfg KEY:VALUE (sim) SimGrid configuration, repeatable (contexts/stack-size:64,\n"
           "                  network/solver:fairbottleneck, ...); printed in the report\n"
           "  --progress S    (sim) a progress line on stderr every S s of wall time (10)\n"
           "  --max-sim-s S   (sim) end the run at S simulated seconds (3600): nodes still\n"
           "                  running then fail it, named in the verdict\n"
           "  --mem-floor-mib N (sim) stop with an error (exit 3) when the host, or the memory\n"
           "                  cgroup the run is in, has less than N MiB left (2 %% of its\n"
           "                  memory, at least 256 MiB, at most an eighth)\n"
           "The format of FILE: scenarios/README.md.\n");
}

/* The value of flag name at argv[*i], as "--name VALUE" or "--name=VALUE"
 * (*i moves past it), or NULL when argv[*i] is another word. */
static const char *run_value(int argc, char **argv, int *i, const char *name)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n))
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n] || *i + 1 >= argc)
        return NULL;
    return argv[++*i];
}

/* Splits argv into the scenario file, --out DIR, and settings flags. Each
 * valued flag takes "--flag=VALUE" too: "--trace=t.json" was an unknown flag. */
static int run_args(int argc, char **argv, const char **file, const char **out,
                    const char **launcher, const char **jitter, int *plot, struct cmd_twin_args *ta,
                    const char **progress, const char **max_sim, const char **mem_floor,
                    int *dry_run, const char **cfg, char **rest, int *n_rest)
{
    *n_rest = 0;
    static const char *const valued[] = {"--out",       "--cfg",          "--progress",
                                         "--trace",     "--jitter",       "--launcher",
                                         "--max-sim-s", "--mem-floor-mib"};
    for (size_t k = 0; argc > 0 && k < sizeof(valued) / sizeof(valued[0]); k++)
        if (!strcmp(argv[argc - 1], valued[k])) { /* said, not "unknown flag" */
            fprintf(stderr, "rkv run: %s needs a value\n", valued[k]);
            return -2;
        }
    const char **dest[] = {out, NULL, progress, &ta->trace, jitter, launcher, max_sim, mem_floor};
    for (int i = 0; i < argc; i++) {
        const char *v = NULL;
        int k = -1; /* the valued flag at argv[i] */
        for (size_t j = 0; j < sizeof(valued) / sizeof(valued[0]) && !v; j++)
            if ((v = run_value(argc, argv, &i, valued[j])) != NULL)
                k = (int)j;
        if (v && !*v) {
            fprintf(stderr, "rkv run: %s needs a value\n", valued[k]);
            return -2;
        }
        if (v && !dest[k]) /* --cfg, repeatable */
            cfg[ta->n_cfg++] = v;
        else if (v)
            *dest[k] = v;
        else if (!strcmp(argv[i], "--plot"))
            *plot = 1;
        else if (!strcmp(argv[i], "--dry-run"))
            *dry_run = 1; /* the only mode --launcher has: rkv starts no remote processes */
        else if (strncmp(argv[i], "--", 2) && !*file)
            *file = argv[i];
        else if (rkv_cmd_flag_takes_next(argc, argv, i)) { /* the value is not the file */
            rest[(*n_rest)++] = argv[i++];
            rest[(*n_rest)++] = argv[i];
        } else
            rest[(*n_rest)++] = argv[i];
    }
    return *file ? 0 : -1;
}

/* A word of the printed command line, quoted for a POSIX shell if it needs it. */
static void run_print_word(const char *w)
{
    if (*w &&
        strspn(w, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./:=,@+-") ==
            strlen(w)) {
        printf(" %s", w);
        return;
    }
    printf(" '");
    for (const char *c = w; *c; c++)
        fputs(*c == '\'' ? "'\\''" : (char[]){*c, 0}, stdout);
    putchar('\'');
}

/* Beyond one host rkv uses the cluster's launcher: this prints the line,
 * with the settings and --out given to rkv run (they were dropped without
 * a word, so each rank ran with the defaults). */
static int run_print_launch(const char *launcher, const char *file, const struct rkv_scenario *sc,
                            const char *out_dir, char **rest, int n_rest)
{
    uint32_t n = rkv_scenario_servers(sc) + rkv_scenario_workers(sc);
    struct cmd_settings s;
    char err[512];
    if (strcmp(launcher, "mpirun") && strcmp(launcher, "srun")) {
        fprintf(stderr, "rkv run: --launcher: expected mpirun or srun, got \"%s\"\n", launcher);
        return RKV_EXIT_USAGE;
    }
    if (rkv_cmd_settings_load(&s, n_rest, rest, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv run: %s\n", err);
        return RKV_EXIT_USAGE;
    }
    if (cmd_node_refuse_owned(&s, "rkv run") < 0) /* as rkv node will */
        return RKV_EXIT_USAGE;
    if (!strcmp(launcher, "mpirun"))
        printf("mpirun --oversubscribe -np %u rkv node --scenario", n);
    else
        printf("srun --ntasks %u rkv node --scenario", n);
    run_print_word(file);
    if (out_dir) {
        printf(" --out");
        run_print_word(out_dir);
    }
    for (int i = 0; i < n_rest; i++)
        run_print_word(rest[i]);
    putchar('\n');
    printf("# ranks 0..%u are servers, the rest workers; on several hosts add --cluster FILE "
           "(one 'host base_port servers' line per machine)\n",
           rkv_scenario_servers(sc) - 1);
    if (sc->n_faults) /* they passed without a word (an outside tester) */
        printf("# the file's %u fault(s) are not run under mpirun or srun (only `rkv run` "
               "crashes, restarts, slows and drops): its verdict counts none of them\n",
               sc->n_faults);
    return RKV_EXIT_OK;
}

int cmd_run(int argc, char **argv, const char *self)
{
    if (cmd_predict_wanted(argc, argv)) /* the twin next to a real run: predict.c */
        return cmd_predict(argc, argv, self);
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            run_usage();
            return RKV_EXIT_OK;
        }
    }
    const char *file = NULL, *out_dir = NULL, *launcher = NULL, *jitter = NULL;
    const char *progress = NULL, *max_sim = NULL, *mem_floor = NULL;
    char **rest = calloc((size_t)argc + 1, sizeof(*rest));
    const char **cfg = calloc((size_t)argc + 1, sizeof(*cfg));
    struct cmd_twin_args ta = {.cfg = cfg};
    int n_rest;
    int plot = 0, out_made = 0, dry_run = 0;
    int ar = rest && cfg ? run_args(argc, argv, &file, &out_dir, &launcher, &jitter, &plot, &ta,
                                    &progress, &max_sim, &mem_floor, &dry_run, cfg, rest, &n_rest)
                         : -1;
    if (ar < 0) {
        if (ar == -1) /* -2: said which flag lacks its value */
            fprintf(stderr, "rkv run: which scenario? (usage: rkv run FILE ...)\n");
        free(rest);
        free(cfg);
        return RKV_EXIT_USAGE;
    }
    if (dry_run && !launcher) { /* it ran the whole scenario */
        fprintf(stderr, "rkv run: --dry-run prints a cluster launcher's command line: it goes with "
                        "--launcher mpirun|srun\n");
        free(rest);
        free(cfg);
        return RKV_EXIT_USAGE;
    }
    const char *trace = ta.trace;
    struct rkv_scenario *sc = NULL;
    struct cmd_settings s;
    int code = RKV_EXIT_USAGE;
    if (rkv_launch_load(file, &sc) < 0)
        goto out;
    if (launcher && (plot || ta.trace || ta.n_cfg || jitter || progress || max_sim || mem_floor)) {
        fprintf(stderr, "rkv run: --launcher prints a command line that takes no --plot, "
                        "--trace, --cfg, --jitter, --progress, --max-sim-s or --mem-floor-mib\n");
        goto out;
    }
    if (launcher) {
        code = run_print_launch(launcher, file, sc, out_dir, rest, n_rest);
        goto out;
    }
    if (rkv_launch_settings(sc, &s, n_rest, rest) < 0)
        goto out;
    if (out_dir && run_out_dir_ok(out_dir, &out_made) < 0)
        goto out;
    if (trace && run_trace_ok(trace) < 0)
        goto out;
    /* Without --backend, `rkv run` is the twin: no hardware, no ports. */
    if (RKV_WITH_SIM && !strcmp(s.src[CMD_BACKEND], "default"))
        s.val[CMD_BACKEND] = "sim";
    if (jitter) {
        char *end;
        double j = strtod(jitter, &end);
        if (*end || !(j >= 0 && j <= 1)) {
            fprintf(stderr, "rkv run: --jitter: expected 0..1, got \"%s\"\n", jitter);
            goto out;
        }
        sc->sim_jitter = j;
    }
    if (progress) {
        char *end;
        ta.progress_s = strtod(progress, &end);
        if (*end || !(ta.progress_s > 0 && ta.progress_s <= 86400)) {
            fprintf(stderr, "rkv run: --progress: expected seconds in (0, 86400], got \"%s\"\n",
                    progress);
            goto out;
        }
    }
    if (max_sim) {
        char *end;
        ta.max_sim_s = strtod(max_sim, &end);
        if (*end || !(ta.max_sim_s > 0 && ta.max_sim_s <= 1e9)) {
            fprintf(stderr,
                    "rkv run: --max-sim-s: expected simulated seconds in (0, 1e9], got \"%s\"\n",
                    max_sim);
            goto out;
        }
    }
    if (mem_floor) {
        uint64_t v;
        if (rkv_parse_u64(mem_floor, &v) < 0 || v == 0 || v > (1ull << 30)) {
            fprintf(stderr, "rkv run: --mem-floor-mib: expected MiB in 1..%llu, got \"%s\"\n",
                    1ull << 30, mem_floor);
            goto out;
        }
        ta.mem_floor_mib = v;
    }
    if (!strcmp(s.val[CMD_BACKEND], "sim")) {
        /* The twin takes the store's settings (cmd_run_twin): a bad one is
         * refused there too, not ignored. */
        code = cmd_run_twin(sc, &s, out_dir, plot, &ta);
        goto out;
    }
    if (ta.n_cfg || progress || max_sim || mem_floor || jitter) {
        fprintf(stderr, "rkv run: --cfg, --progress, --max-sim-s, --mem-floor-mib and --jitter "
                        "are twin options (--backend sim)\n");
        goto out;
    }
    struct rkv_launch_opts lo = {.self = self, .settings = &s, .file = file, .trace = trace};
    code = rkv_launch_report(sc, &lo, out_dir, plot);
out:
    /* A run refused after --out was made (a bad setting, say) wrote
     * nothing there: the directory goes too (rmdir leaves a non-empty one). */
    if (out_made && code != RKV_EXIT_OK)
        rmdir(out_dir);
    free(rest);
    free(cfg);
    rkv_scenario_free(sc);
    return code;
}
