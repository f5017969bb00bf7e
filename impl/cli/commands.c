/* rkv server / worker / config. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "harness/doctor.h"
#include "harness/pslite.h"
#include "harness/verdict.h"
#include "harness/oracle.h"
#include "harness/scenario.h"
#include "port/port.h"
#include "store/node.h"
#include "util/util.h"

static int cmd_load(int argc, char **argv, struct cmd_settings *s, struct rkv_config *cfg)
{
    char err[512];
    if (rkv_cmd_settings_load(s, argc, argv, err, sizeof(err)) < 0 ||
        rkv_cmd_build_config(s, cfg, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv: %s\n", err);
        return RKV_EXIT_USAGE;
    }
    return 0;
}

static int cmd_wants_help(int argc, char **argv)
{
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return 1;
    return 0;
}

/* SIGTERM and SIGINT stop a server as a worker's SHUTDOWN does: it stops
 * serving, writes its fault counts and, the last of its machine's servers
 * to stop, removes the machine's segments.
 * Killed, it left the segments in /dev/shm, and its fault counts were
 * never written, so a run whose fault broke the worker that would have
 * shut it down judged the fault as not fired. (A crash fault is SIGKILL,
 * which keeps them, as a crash does.) SIGUSR2 ends the wait once the
 * server stopped otherwise. */
struct cmd_stopper {
    pthread_t thr;
    sigset_t set;
    struct rkv_server *srv;
    int signo; /* the signal that stopped it, or 0 */
};

static void *cmd_stopper_main(void *arg)
{
    struct cmd_stopper *st = arg;
    int sig = 0;
    if (sigwait(&st->set, &sig) == 0 && sig != SIGUSR2) {
        st->signo = sig;
        fprintf(stderr, "rkv server: stopping on %s\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
        rkv_server_stop(st->srv);
    }
    return NULL;
}

/* Before the server's threads exist, so that they inherit the mask. */
static void cmd_stopper_block(struct cmd_stopper *st)
{
    sigemptyset(&st->set);
    sigaddset(&st->set, SIGTERM);
    sigaddset(&st->set, SIGINT);
    sigaddset(&st->set, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &st->set, NULL);
}

int cmd_server(int argc, char **argv)
{
    if (cmd_wants_help(argc, argv)) {
        printf("usage: rkv server [--server-id N | --machine-id M] [settings]\n"
               "Runs one server until a worker shuts the store down.\n\n");
        rkv_cmd_settings_help(stdout);
        return RKV_EXIT_OK;
    }
    struct cmd_settings s;
    struct rkv_config cfg;
    int rc = cmd_load(argc, argv, &s, &cfg);
    if (rc)
        return rc;
    uint32_t local = 0;
    /* Which server this is: server 0 by default started a second server of
     * a two-server file as server 0, refused for a "machine segment in use
     * ... another cluster?" (an outside tester, as DGL_SERVER_ID= left
     * empty). A machine-id alone names its first server, as documented. */
    uint32_t n_servers = 0;
    for (uint32_t m = 0; m < cfg.n_machines; m++)
        n_servers += cfg.machines[m].servers;
    if (!*s.val[CMD_SERVER_ID] && !strcmp(s.src[CMD_MACHINE_ID], "default") && n_servers > 1) {
        fprintf(stderr,
                "rkv server: which server is this? the cluster has %u servers: give "
                "--server-id N (RKV_SERVER_ID, DGL_SERVER_ID; 0..%u, machine 0's first)\n",
                n_servers, n_servers - 1);
        free(cfg.machines);
        return RKV_EXIT_USAGE;
    }
    if (*s.val[CMD_SERVER_ID]) {
        char err[256];
        uint32_t m = 0;
        if (rkv_cmd_server_locate(&s, &cfg, &m, &local, err, sizeof(err)) < 0) {
            fprintf(stderr, "rkv: %s\n", err);
            free(cfg.machines);
            return RKV_EXIT_USAGE;
        }
        cfg.machine_id = m;
    }
    struct rkv_server *srv = NULL;
    struct cmd_node nd;
    struct cmd_stopper st = {.signo = 0};
    cmd_stopper_block(&st);
    char err[512], node[32];
    snprintf(node, sizeof(node), "s%u.%u", cfg.machine_id, local);
    rc = cmd_node_open(&s, &cfg, node, cfg.seed, &nd, err, sizeof(err));
    if (rc == 0 &&
        (rc = rkv_server_create_on(nd.port, nd.nic, &cfg, local, &srv, err, sizeof(err))) < 0)
        cmd_node_close(&nd);
    /* The oracle self-test's hook (store/node.h), deliberately not a
     * documented setting. */
    const char *bad = getenv("RKV_TEST_CORRUPT_ROW");
    if (rc == 0 && bad && *bad)
        rkv_server_set_test_corrupt_row(srv, strtoull(bad, NULL, 0));
    free(cfg.machines);
    if (rc < 0) {
        fprintf(stderr, "rkv server: %s\n", err);
        return rc == -RKV_ECONFIG ? RKV_EXIT_USAGE : RKV_EXIT_STORE;
    }
    st.srv = srv;
    int stopper = pthread_create(&st.thr, NULL, cmd_stopper_main, &st) == 0;
    rc = rkv_server_run(srv);
    if (stopper) {
        pthread_kill(st.thr, SIGUSR2); /* ignored if a signal stopped it already */
        pthread_join(st.thr, NULL);
    }
    rkv_server_destroy(srv);
    cmd_node_close(&nd);
    if (st.signo) /* as the shell reports a process the signal ended */
        return 128 + st.signo;
    return rc < 0 ? RKV_EXIT_STORE : RKV_EXIT_OK;
}

static int cmd_workload(const struct cmd_settings *s, struct rkv_timed_workload *wl)
{
    char err[256];
    if (rkv_timed_workload_load(s, wl, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv: %s\n", err);
        return RKV_EXIT_USAGE;
    }
    return 0;
}

/* The scenario of the --scenario file, or the built-in one. */
static int cmd_scenario(const struct cmd_settings *s, const struct rkv_config *cfg,
                        const struct rkv_timed_workload *wl, struct rkv_scenario **sc_p)
{
    char err[512];
    int rc = *s->val[CMD_SCENARIO] ? rkv_scenario_load(s->val[CMD_SCENARIO], sc_p, err, sizeof(err))
                                   : rkv_scenario_builtin(cfg, wl->rows, wl->rounds, sc_p);
    if (rc == 0 && (rc = rkv_oracle_check_scenario(*sc_p, err, sizeof(err))) < 0)
        rkv_scenario_free(*sc_p);
    /* The oracle replays the pushes of every worker the file declares: in
     * another cluster it expected pushes nobody made and said a value was
     * wrong (exit 1, corruption) where the launch did not match. */
    if (rc == 0 && *s->val[CMD_SCENARIO]) {
        const struct rkv_scenario *sc = *sc_p;
        int same = sc->machines == cfg->n_machines && rkv_scenario_workers(sc) == cfg->n_workers;
        for (uint32_t m = 0; same && m < cfg->n_machines; m++)
            same = cfg->machines[m].servers == sc->servers_per_machine;
        if (!same) {
            snprintf(err, sizeof(err),
                     "%s describes %u machine(s) of %u server(s) and %u worker(s), but this "
                     "cluster has %u machine(s), %u server(s) on machine 0, and %u "
                     "worker(s): launch the cluster the file describes (rkv run FILE "
                     "--backend tcp starts it)",
                     s->val[CMD_SCENARIO], sc->machines, sc->servers_per_machine,
                     rkv_scenario_workers(sc), cfg->n_machines, cfg->machines[0].servers,
                     cfg->n_workers);
            rkv_scenario_free(*sc_p);
            rc = -RKV_ECONFIG;
        }
    }
    if (rc < 0) {
        fprintf(stderr, "rkv: %s\n", rc == -RKV_ENOMEM ? "out of memory" : err);
        return RKV_EXIT_USAGE;
    }
    uint64_t seed;
    if (strcmp(s->src[CMD_SEED], "default") != 0 &&
        rkv_cmd_get_u64(s, CMD_SEED, &seed, err, 1) == 0)
        (*sc_p)->seed = seed;
    return 0;
}

int cmd_worker_refuse_workload(const struct cmd_settings *s, const char *who)
{
    /* With a scenario the worker runs the file's phases and no timed
     * phase: --rows 5 was checked, then the file's rows were pushed. */
    static const enum cmd_key wl[] = {CMD_ROWS, CMD_VALUE_BYTES, CMD_ROUNDS};
    int i = *s->val[CMD_SCENARIO] ? rkv_cmd_first_flag(s, wl, sizeof(wl) / sizeof(wl[0])) : -1;
    if (i >= 0) {
        fprintf(stderr,
                "%s: %s: with --scenario the file sets the workload (its tensors' rows, its "
                "phases' rounds); drop the flag, or drop --scenario for the built-in workload\n",
                who, rkv_cmd_key_flag(wl[i]));
        return -1;
    }
    return 0;
}

/* verdict: under a launcher (`rkv node --scenario`), the report goes to
 * worker 0, which prints the verdict and shuts the servers down. */
static int worker_main(int argc, char **argv, struct rkv_verdict_opts *verdict)
{
    if (cmd_wants_help(argc, argv)) {
        printf("usage: rkv worker [--machine-id M] [--scenario FILE] [settings]\n"
               "Joins the store and runs the scenario FILE's workload, or the built-in one\n"
               "(--rows, --rounds) followed by a timed phase (--value-bytes); every pulled\n"
               "value is checked by the oracle. Worker 0 then shuts the servers down.\n\n");
        rkv_cmd_settings_help(stdout);
        return RKV_EXIT_OK;
    }
    struct cmd_settings s;
    struct rkv_config cfg;
    struct rkv_timed_workload wl;
    struct rkv_scenario *sc;
    int rc = cmd_load(argc, argv, &s, &cfg);
    if (rc)
        return rc;
    if (cmd_worker_refuse_workload(&s, "rkv worker") < 0) {
        free(cfg.machines);
        return RKV_EXIT_USAGE;
    }
    /* DGL's clients are not told their machine: it is the first line of
     * ip_config.txt naming an address of theirs. */
    char merr[512];
    if (rkv_cmd_client_machine(&s, &cfg, merr, sizeof(merr)) < 0) {
        fprintf(stderr, "rkv worker: %s\n", merr);
        free(cfg.machines);
        return RKV_EXIT_USAGE;
    }
    if ((rc = cmd_workload(&s, &wl)) != 0 || (rc = cmd_scenario(&s, &cfg, &wl, &sc)) != 0) {
        free(cfg.machines);
        return rc;
    }
    struct rkv_client *cli = NULL;
    struct cmd_node nd;
    char err[512];
    /* The stack address differs between processes (ASLR), so co-located
     * clients draw different HELLO nonces even with one configured seed. */
    rc = cmd_node_open(&s, &cfg, "w", cfg.seed ^ (uint64_t)(uintptr_t)&nd, &nd, err, sizeof(err));
    if (rc == 0 && (rc = rkv_client_create_on(nd.port, nd.nic, &cfg, &cli, err, sizeof(err))) < 0)
        cmd_node_close(&nd);
    if (rc == 0)
        snprintf(nd.port->node, sizeof(nd.port->node), "w%u", rkv_client_id(cli));
    if (rc < 0) {
        fprintf(stderr, "rkv worker: %s\n", err);
        rkv_scenario_free(sc);
        free(cfg.machines);
        return rc == -RKV_ECONFIG ? RKV_EXIT_USAGE : RKV_EXIT_STORE;
    }
    /* Under a launcher the lines are kept for worker 0 too. */
    char *rep = NULL;
    size_t rep_len = 0;
    FILE *lines = verdict ? open_memstream(&rep, &rep_len) : stdout;
    int wl_rc = 0, code = RKV_EXIT_STORE;
    if (!lines)
        fprintf(stderr, "rkv worker: out of memory for the report\n");
    else
        code = rkv_launch_worker_run(cli, &cfg, sc, &wl, !*s.val[CMD_SCENARIO], lines, &wl_rc);
    if (verdict && lines) {
        fclose(lines);
        fwrite(rep, 1, rep_len, stdout);
        fflush(stdout);
        code = rkv_verdict_node(cli, &cfg, sc, rep, rep_len, wl_rc, code, verdict);
        free(rep);
    } else if (rkv_client_id(cli) == 0 && rkv_client_shutdown_servers(cli) < 0) {
        /* Its messages mostly begin "shutdown: " already. */
        const char *msg = rkv_client_errmsg(cli);
        fprintf(stderr, "rkv worker: %s%s\n", strncmp(msg, "shutdown", 8) ? "shutdown: " : "", msg);
        if (code == RKV_EXIT_OK)
            code = RKV_EXIT_STORE;
    }
    rkv_client_destroy(cli);
    cmd_node_close(&nd);
    rkv_scenario_free(sc);
    free(cfg.machines);
    return code;
}

int cmd_worker(int argc, char **argv)
{
    return worker_main(argc, argv, NULL);
}

int cmd_config(int argc, char **argv)
{
    if (cmd_wants_help(argc, argv) || argc == 0 || strcmp(argv[0], "--dump") != 0) {
        int ok = argc == 0 || cmd_wants_help(argc, argv);
        if (!ok) /* "--list" was answered with the usage alone */
            fprintf(stderr, "rkv config: expected --dump first, got \"%s\"\n", argv[0]);
        fprintf(ok ? stdout : stderr,
                "usage: rkv config --dump [settings]\n"
                "Prints every setting, its value, default, env var, aliases and source.\n");
        return ok ? RKV_EXIT_OK : RKV_EXIT_USAGE;
    }
    struct cmd_settings s;
    char err[512];
    if (rkv_cmd_settings_load(&s, argc - 1, argv + 1, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv: %s\n", err);
        return RKV_EXIT_USAGE;
    }
    /* Checked as a command that uses them checks them: a value rkv run
     * refuses was shown here as if it were fine, with exit 0. */
    struct rkv_config cfg;
    struct rkv_timed_workload wl;
    if (rkv_cmd_build_config(&s, &cfg, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv config: %s\n", err);
        return RKV_EXIT_USAGE;
    }
    /* A backend no command knows (rkv run names them) and a server id
     * given that names no server of the cluster (rkv server refuses it) were
     * shown with exit 0. An id left at its default belongs to no one yet. */
    uint32_t sm = 0, sl = 0;
    int bad = 0;
    if (strcmp(cfg.backend, "tcp") && strcmp(cfg.backend, "verbs") && strcmp(cfg.backend, "sim"))
        bad = snprintf(err, sizeof(err), "backend: unknown \"%s\" (known: tcp, verbs, sim)",
                       cfg.backend) > 0;
    else if (strcmp(s.src[CMD_SERVER_ID], "default") != 0)
        bad = rkv_cmd_server_locate(&s, &cfg, &sm, &sl, err, sizeof(err)) < 0;
    if (bad || rkv_timed_workload_load(&s, &wl, err, sizeof(err)) < 0) {
        free(cfg.machines);
        fprintf(stderr, "rkv config: %s\n", err);
        return RKV_EXIT_USAGE;
    }
    rkv_cmd_settings_dump(&s, stdout);
    /* The machines as the cluster will use them: a cluster file's line
     * without a port takes DGL's 30050, and the dump showed only
     * base-port's 29500 (an outside tester). */
    const uint32_t show = 16;
    printf("\nmachines, as the cluster uses them:\n");
    for (uint32_t m = 0; m < cfg.n_machines && m < show; m++) {
        const struct rkv_machine *mc = &cfg.machines[m];
        printf("  machine %u: %s, ports %u..%u (%u server%s)\n", m,
               mc->host[0] ? mc->host : "(its own address, registered at start)", mc->base_port,
               mc->base_port + mc->servers - 1, mc->servers, mc->servers == 1 ? "" : "s");
    }
    if (cfg.n_machines > show)
        printf("  ... and %u more\n", cfg.n_machines - show);
    free(cfg.machines);
    return RKV_EXIT_OK;
}

/* Takes `--out DIR` (or --out=DIR) out of argv, which is no setting;
 * -1 when DIR is missing. */
static int cmd_verdict_take_out(int *argc, char **argv, const char **out_p)
{
    int n = 0;
    for (int i = 0; i < *argc; i++) {
        if (!strcmp(argv[i], "--out")) {
            if (i + 1 >= *argc || !*argv[i + 1])
                return -1;
            *out_p = argv[++i];
        } else if (!strncmp(argv[i], "--out=", 6)) {
            if (!argv[i][6])
                return -1;
            *out_p = argv[i] + 6;
        } else {
            argv[n++] = argv[i];
        }
    }
    *argc = n;
    return 0;
}

/* Rank and size from the launcher that started us (Open MPI, Slurm, PMI):
 * -1 none, -2 a pair that is not a rank below a size, or half a pair (said
 * on stderr). strtoul read "abc" as rank 0 (every such process became
 * server 0) and a rank past the size ran as a worker the scenario does not
 * have; a rank without its size (PMI_RANK=0 alone) was said to be "no
 * launcher rank", naming the very variable that was set. */
static int node_rank(uint32_t *rank, uint32_t *size)
{
    static const char *const vars[][2] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                          {"SLURM_PROCID", "SLURM_NTASKS"},
                                          {"PMI_RANK", "PMI_SIZE"}};
    /* The first launcher whose rank is set without its size (a size alone
     * is ambient: Slurm's salloc shell sets SLURM_NTASKS, not SLURM_PROCID). */
    int half = -1;
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *r = getenv(vars[i][0]), *n = getenv(vars[i][1]);
        int has_r = r && *r, has_n = n && *n;
        if (!has_r || !has_n) {
            if (has_r && half < 0)
                half = (int)i;
            continue;
        }
        uint64_t rv, nv;
        if (rkv_parse_u64(r, &rv) < 0 || rkv_parse_u64(n, &nv) < 0 || nv > UINT32_MAX || rv >= nv) {
            fprintf(stderr, "rkv node: %s=%s, %s=%s: expected a rank below a size\n", vars[i][0], r,
                    vars[i][1], n);
            return -2;
        }
        *rank = (uint32_t)rv;
        *size = (uint32_t)nv;
        return 0;
    }
    if (half >= 0) {
        fprintf(stderr, "rkv node: %s=%s is set but %s is not: expected a rank and a size\n",
                vars[half][0], getenv(vars[half][0]), vars[half][1]);
        return -2;
    }
    return -1;
}

int cmd_node_refuse_owned(const struct cmd_settings *s, const char *who)
{
    /* The flags node_from_scenario adds from the file and the rank won over
     * these (the last flag wins): --num-workers 3 ran as the file's 4, and
     * the workers ran the file's workload whatever --rows said. */
    static const enum cmd_key owned[] = {CMD_MACHINES,    CMD_SERVERS_PER_MACHINE, CMD_NUM_SERVERS,
                                         CMD_NUM_WORKERS, CMD_MACHINE_ID,          CMD_SERVER_ID,
                                         CMD_ROWS,        CMD_VALUE_BYTES,         CMD_ROUNDS};
    int i = rkv_cmd_first_flag(s, owned, sizeof(owned) / sizeof(owned[0]));
    if (i >= 0) {
        fprintf(stderr,
                "%s: %s: with --scenario the file sets the cluster's shape and workload, "
                "and the launcher's rank each process's place\n",
                who, rkv_cmd_key_flag(owned[i]));
        return -1;
    }
    return 0;
}

/* `rkv node --scenario FILE` under a launcher: ranks 0..S-1 are the servers,
 * the rest the workers, machine by machine. Every rank derives the same
 * cluster from the scenario; hosts come from --cluster (one line per
 * machine) or --host for a one-host run. */
static int node_from_scenario(int argc, char **argv, const struct cmd_settings *s,
                              const char *out_dir)
{
    struct rkv_verdict_opts verdict = {.out_dir = out_dir};
    verdict.t0_s = rkv_timed_now_s();
    char err[512];
    struct rkv_scenario *sc = NULL;
    if (cmd_node_refuse_owned(s, "rkv node") < 0)
        return RKV_EXIT_USAGE;
    uint32_t rank, size;
    int rrc = node_rank(&rank, &size);
    if (rrc < 0) {
        if (rrc == -1)
            fprintf(stderr, "rkv node: no launcher rank (OMPI_COMM_WORLD_RANK, SLURM_PROCID or "
                            "PMI_RANK) and no --role\n");
        return RKV_EXIT_USAGE;
    }
    /* payloadless thins rows in the twin only (the loader checked thin). */
    if (rkv_scenario_load(s->val[CMD_SCENARIO], &sc, err, sizeof(err)) < 0 ||
        (sc->sim_payloadless && rkv_scenario_check_size(sc, 0, err, sizeof(err)) < 0)) {
        fprintf(stderr, "rkv node: %s\n", err);
        rkv_scenario_free(sc);
        return RKV_EXIT_USAGE;
    }
    uint32_t S = rkv_scenario_servers(sc), W = rkv_scenario_workers(sc);
    char v[5][16], port[16];
    snprintf(v[0], 16, "%u", sc->machines);
    snprintf(v[1], 16, "%u", sc->servers_per_machine);
    snprintf(v[2], 16, "%u", W);
    snprintf(v[3], 16, "%u", rank < S ? rank : rkv_scenario_worker_machine(sc, rank - S));
    snprintf(port, 16, "%u", sc->tcp_base_port);
    int use_port = sc->tcp_base_port && !strcmp(s->src[CMD_BASE_PORT], "default");
    rkv_scenario_free(sc);
    if (size != S + W) {
        fprintf(stderr,
                "rkv node: the launcher started %u processes; the scenario needs %u "
                "(%u servers + %u workers)\n",
                size, S + W, S, W);
        return RKV_EXIT_USAGE;
    }
    snprintf(v[4], 16, "%u", rank);
    char *args[64 + 16];
    int n = 0;
    for (int i = 0; i < argc && n < 64; i++)
        args[n++] = argv[i];
    char *extra[] = {"--machines",
                     v[0],
                     "--servers-per-machine",
                     v[1],
                     "--num-workers",
                     v[2],
                     rank < S ? "--server-id" : "--machine-id",
                     rank < S ? v[4] : v[3]};
    for (size_t i = 0; i < sizeof(extra) / sizeof(extra[0]); i++)
        args[n++] = extra[i];
    if (use_port) {
        args[n++] = "--base-port";
        args[n++] = port;
    }
    if (!*s->val[CMD_CLUSTER]) { /* only server 0's address is known to everyone */
        args[n++] = "--discover";
        args[n++] = "1";
    }
    args[n] = NULL;
    return rank < S ? cmd_server(n, args) : worker_main(n, args, &verdict);
}

/* For launchers that set a role variable (ps-lite's DMLC_ROLE, DGL's), or
 * a rank (mpirun, srun) together with --scenario. */
int cmd_node(int argc, char **argv)
{
    struct cmd_settings s;
    char err[512];
    if (cmd_wants_help(argc, argv)) {
        printf("usage: rkv node [--role server|worker|scheduler] [settings]\n"
               "       rkv node --scenario FILE   (under mpirun / srun / a PMI launcher)\n"
               "Runs `rkv server` or `rkv worker` as the role setting says; with --scenario and\n"
               "no role, the launcher's rank decides: ranks below the scenario's server count\n"
               "are servers, the others workers. With DMLC_ROLE (ps-lite's launch) and no\n"
               "cluster file, every node registers with the scheduler (DMLC_ROLE=scheduler at\n"
               "DMLC_PS_ROOT_URI:DMLC_PS_ROOT_PORT), which numbers the servers, groups them by\n"
               "host (DMLC_NODE_HOST, DMLC_INTERFACE) into machines, and exits 0 once every\n"
               "node has its place.\n"
               "Under a launcher, worker 0 prints the verdict table of `rkv run` (every\n"
               "worker's report reaches it over the store) and exits 1 or 3 when it fails;\n"
               "the other workers exit 0 once their report is out (their failures are in it);\n"
               "--out DIR: it also writes DIR/report.json and DIR/report.md.\n");
        return RKV_EXIT_OK;
    }
    const char *out_dir = NULL;
    if (cmd_verdict_take_out(&argc, argv, &out_dir) < 0) {
        fprintf(stderr, "rkv node: --out: which directory?\n");
        return RKV_EXIT_USAGE;
    }
    if (rkv_cmd_settings_load(&s, argc, argv, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv: %s\n", err);
        return RKV_EXIT_USAGE;
    }
    if (!*s.val[CMD_ROLE] && *s.val[CMD_SCENARIO])
        return node_from_scenario(argc, argv, &s, out_dir);
    if (out_dir) {
        fprintf(stderr, "rkv node: --out: only with --scenario under a launcher (no --role)\n");
        return RKV_EXIT_USAGE;
    }
    int server = strcmp(s.val[CMD_ROLE], "server") == 0;
    int worker = strcmp(s.val[CMD_ROLE], "worker") == 0 || strcmp(s.val[CMD_ROLE], "client") == 0;
    if (strcmp(s.val[CMD_ROLE], "scheduler") == 0)
        return rkv_pslite_scheduler(&s);
    if ((server || worker) && rkv_pslite_mode(&s))
        return cmd_pslite_node(argc, argv, &s, server);
    if ((server || worker) && rkv_cmd_dgl_role_without_cluster(&s, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv node: %s\n", err);
        return RKV_EXIT_USAGE;
    }
    if (server)
        return cmd_server(argc, argv);
    if (worker) /* "client" is DGL's word (DGL_ROLE=client) */
        return cmd_worker(argc, argv);
    fprintf(stderr,
            "rkv node: role: expected server, worker (or client) or scheduler, got \"%s\" (%s)%s\n",
            s.val[CMD_ROLE], s.src[CMD_ROLE],
            /* BytePS's: its launcher runs a server and a worker in one
             * process. Said, so that a BytePS user is not left guessing. */
            !strcmp(s.val[CMD_ROLE], "joint")
                ? "; BytePS's joint role (a server and a worker in one process) is two nodes "
                  "here: start DMLC_ROLE=server and DMLC_ROLE=worker on the host, which share "
                  "its shard"
                : "");
    return RKV_EXIT_USAGE;
}

static void doc_usage(void)
{
    printf("usage: rkv doctor [settings]\n\n"
           "Checks whether a verbs run can work on this host: RDMA devices and ports (state,\n"
           "link layer, MTU, GIDs), soft-RoCE, an address rdma_cm can use (--host / RKV_HOST),\n"
           "RLIMIT_MEMLOCK, /dev/shm, and whether the configured server ports are free. Each\n"
           "problem is one line starting with FIX. Exit 0 if a verbs run can work here, 2 if\n"
           "not (also when this rkv was built without verbs).\n");
}

int cmd_doctor(int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            doc_usage();
            return RKV_EXIT_OK;
        }
    }
    struct cmd_settings s;
    char err[512];
    if (rkv_cmd_settings_load(&s, argc, argv, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv doctor: %s\n", err);
        return RKV_EXIT_USAGE;
    }
    return rkv_doctor(&s);
}
