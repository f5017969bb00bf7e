/* rkv node --scenario under a launcher: the rank from Open MPI / Slurm / PMI
 * variables decides the role; for real with Debian's Open MPI when present.
 * And rkv's own launcher (`rkv run --backend tcp`, `rkv demo`): settings
 * checked once, every one passed on, children stopped and their shared
 * memory removed when it is stopped. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cli/cli.h"
#include "harness/launch.h"
#include "harness/report.h"
#include "harness/tests/rkv_run.h"
#include "harness/tests/tmp_scenario.h"

static unsigned test_port(void)
{
    return 28000 + (unsigned)(getpid() % 300) * 10; /* this binary's range */
}

static void test_dry_run(void **state)
{
    (void)state;
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s run %s/quickstart.yaml --launcher mpirun --dry-run 2>&1",
             RKV_BIN, SCEN_DIR);
    assert_int_equal(sh(cmd), 0);
    assert_non_null(strstr(out, "mpirun --oversubscribe -np 8 rkv node --scenario"));
    snprintf(cmd, sizeof(cmd), "%s run %s/many-servers.yaml --launcher srun --dry-run 2>&1",
             RKV_BIN, SCEN_DIR);
    assert_int_equal(sh(cmd), 0);
    assert_non_null(strstr(out, "srun --ntasks 12 rkv node --scenario"));
    snprintf(cmd, sizeof(cmd), "%s run %s/quickstart.yaml --launcher pdsh --dry-run 2>&1", RKV_BIN,
             SCEN_DIR);
    assert_int_equal(sh(cmd), 2);
    /* A file's faults run only under rkv run: said (it passed without a
     * word of them, an outside tester). */
    assert_null(strstr(out, "fault(s) are not run"));
    snprintf(cmd, sizeof(cmd),
             "%s run %s/faults-crash-server.yaml --launcher mpirun --dry-run 2>&1", RKV_BIN,
             SCEN_DIR);
    assert_int_equal(sh(cmd), 0);
    assert_non_null(strstr(out, "# the file's 1 fault(s) are not run under mpirun or srun"));
}

/* Slurm's variables, set by hand: the same code path a real srun takes.
 * One worker prints the verdict table, once, and with --out writes the
 * report files. */
static void test_slurm_variables(void **state)
{
    (void)state;
    char cmd[2048], dir[64], path[128];
    snprintf(dir, sizeof(dir), "/tmp/rkv-slurm-out-%d", (int)getpid());
    snprintf(cmd, sizeof(cmd),
             "for r in 0 1 2 3 4 5 6 7; do SLURM_PROCID=$r SLURM_NTASKS=8 RKV_BASE_PORT=%u "
             "RKV_LOG_LEVEL=2 %s node --scenario %s/quickstart.yaml --out %s 2>&1 & done; "
             "rc=0; for j in $(jobs -p); do wait $j || rc=1; done; exit $rc",
             test_port(), RKV_BIN, SCEN_DIR, dir);
    assert_int_equal(sh(cmd), 0);
    assert_int_equal(out_count("PHASE w="), 12); /* 4 workers x 3 phases */
    assert_int_equal(out_count("errors=0 "), 12);
    /* Nobody was told where servers 1..3 are: they announced it to server 0. */
    assert_non_null(strstr(out, "(4 of 4 known)"));
    assert_int_equal(out_count("| phase | pushes |"), 1);
    assert_int_equal(out_count("verdict: "), 1);
    assert_non_null(strstr(out, "verdict: PASS (every pulled value matched the oracle)"));
    /* 4 workers x 50 rounds of the first phase, all of them counted */
    assert_non_null(strstr(out, "| warmup-sum | "));
    snprintf(path, sizeof(path), "%s/report.json", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char json[8192];
    size_t n = fread(json, 1, sizeof(json) - 1, f);
    json[n] = 0;
    fclose(f);
    assert_non_null(strstr(json, "\"passed\": true"));
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(sh(cmd), 0);
    assert_null(strstr(out, "none is run here"));
    /* A file with a fault: the first rank says it is not run, once. */
    snprintf(cmd, sizeof(cmd),
             "for r in 0 1 2 3 4 5 6 7; do SLURM_PROCID=$r SLURM_NTASKS=8 RKV_BASE_PORT=%u "
             "%s node --scenario %s/faults-crash-server.yaml 2>&1 & done; "
             "rc=0; for j in $(jobs -p); do wait $j || rc=1; done; exit $rc",
             test_port() + 5, RKV_BIN, SCEN_DIR);
    assert_int_equal(sh(cmd), 0);
    assert_int_equal(out_count("has 1 fault(s); none is run here"), 1);
    snprintf(cmd, sizeof(cmd),
             "SLURM_PROCID=0 SLURM_NTASKS=5 %s node --scenario %s/quickstart.yaml 2>&1", RKV_BIN,
             SCEN_DIR);
    assert_int_equal(sh(cmd), 2);
    assert_non_null(strstr(out, "started 5 processes; the scenario needs 8"));
    snprintf(cmd, sizeof(cmd), "%s node --role worker --out /tmp/x 2>&1", RKV_BIN);
    assert_int_equal(sh(cmd), 2);
    assert_non_null(strstr(out, "--out: only with --scenario under a launcher"));
}

/* The 8 ranks of quickstart.yaml by Slurm's variables, each one's output
 * after a "=== rank R" line and followed by "EXIT <its status>". With
 * kill_one 1, a worker other than worker 0 is killed (SIGKILL) once it
 * finished its first phase; 2, worker 0. The ranks get 90 s (a rank still
 * running then is killed: EXIT 137). */
static int slurm_ranks(const char *env, int kill_one)
{
    char cmd[4096];
    /* The killed worker must die with phases still to run: the kill waits
     * for its first phase, and quickstart's other phases can end first (a
     * few ms), so that run takes a scenario whose second phase is long. */
    const char *file =
        kill_one ? SCEN_DIR "/../harness/tests/dead-worker.yaml" : SCEN_DIR "/quickstart.yaml";
    snprintf(cmd, sizeof(cmd),
             "d=$(mktemp -d); for r in 0 1 2 3 4 5 6 7; do SLURM_PROCID=$r SLURM_NTASKS=8 "
             "RKV_BASE_PORT=%u %s %s node --scenario %s >$d/$r 2>&1 & "
             "echo $! >$d/pid$r; done; "
             "(sleep 90; for r in 0 1 2 3 4 5 6 7; do kill -9 $(cat $d/pid$r); done) "
             ">/dev/null 2>&1 & w=$!; "
             "if [ %d = 1 ]; then v=; i=0; while [ -z \"$v\" ] && [ $i -lt 3000 ]; do "
             "for r in 4 5 6 7; do grep -q '^PHASEDONE w=[1-9] p=0' $d/$r && v=$r && break; done; "
             "i=$((i+1)); sleep 0.01; done; [ -n \"$v\" ] && kill -9 $(cat $d/pid$v); fi; "
             /* Worker 0 keeps its lines for the report (printed at the
              * end): it is the worker rank not yet past phase 0 when the
              * three others are. */
             "if [ %d = 2 ]; then v=; i=0; while [ -z \"$v\" ] && [ $i -lt 3000 ]; do n=0; o=; "
             "for r in 4 5 6 7; do if grep -q '^PHASEDONE w=[1-9] p=0' $d/$r; then n=$((n+1)); "
             "else o=$r; fi; done; [ $n = 3 ] && v=$o; i=$((i+1)); sleep 0.01; done; "
             "[ -n \"$v\" ] && kill -9 $(cat $d/pid$v); fi; "
             "rc=0; for r in 0 1 2 3 4 5 6 7; do wait $(cat $d/pid$r); s=$?; "
             "[ $s = 0 ] || rc=1; echo \"=== rank $r\"; cat $d/$r; echo \"EXIT $s\"; done; "
             "kill $w 2>/dev/null; rm -rf $d; exit $rc",
             test_port() + 2, env, RKV_BIN, file, kill_one, kill_one);
    return sh(cmd);
}

/* The output of the one rank that printed a verdict (NULL if none or
 * several), cut at its EXIT line; its status in *exit_p. */
static const char *verdict_rank(int *exit_p)
{
    if (out_count("verdict: ") != 1)
        return NULL;
    const char *v = strstr(out, "verdict: "), *start = out;
    for (const char *s = out; (s = strstr(s, "=== rank ")) != NULL && s < v; s++)
        start = s;
    const char *ex = strstr(v, "\nEXIT ");
    return ex && sscanf(ex, "\nEXIT %d", exit_p) == 1 ? start : NULL;
}

/* A server that corrupts row 17: the verdict table says FAIL and names
 * the row, and the rank that printed it exits 1 (so does srun). */
static void test_slurm_wrong_value(void **state)
{
    (void)state;
    int rc = slurm_ranks("RKV_TEST_CORRUPT_ROW=17", 0);
    int code = -1;
    const char *v = verdict_rank(&code);
    if (rc == 0 || !v || code != 1 || !strstr(v, "verdict: FAIL") ||
        !strstr(v, "row 17 [0]: expected 0, got 1") || !strstr(v, "| FAIL |"))
        fail_msg("exit %d, verdict rank's exit %d:\n%s", rc, code, out);
}

/* A worker killed mid-run: worker 0 waits for its report no longer than
 * the request timeout, says it never reported, and fails. */
static void test_slurm_dead_worker(void **state)
{
    (void)state;
    time_t t0 = time(NULL);
    int rc = slurm_ranks("RKV_TIMEOUT_MS=3000", 1);
    int code = -1;
    const char *v = verdict_rank(&code);
    if (rc == 0 || !v || code == 0 || !strstr(v, "never reported (waited 3000 ms): worker ") ||
        !strstr(v, "verdict: FAIL") || !strstr(v, "INCOMPLETE") || time(NULL) - t0 > 30)
        fail_msg("exit %d, verdict rank's exit %d, %lld s:\n%s", rc, code,
                 (long long)(time(NULL) - t0), out);
}

/* Worker 0 killed mid-run: it judges the run and stops the servers, so
 * nobody did. Every surviving worker exited 0 and the servers ran on for
 * ever (an outside tester, launched by rank; mpirun without its abort,
 * srun without --kill-on-bad-exit, never ended). Now each survivor waits
 * for worker 0 as long as its gathering may take, then stops the servers
 * and fails; no rank prints a verdict, and every rank ends. */
static void test_slurm_dead_worker0(void **state)
{
    (void)state;
    time_t t0 = time(NULL);
    int rc = slurm_ranks("RKV_TIMEOUT_MS=3000", 2);
    /* The first survivor to give up stops the servers; the others then
     * see them gone, as after worker 0's end. Only worker 0 was killed
     * (the ranks still running at 90 s are killed too). */
    int bad = rc == 0 || out_count("verdict: ") != 0 ||
              out_count("worker 0 has not ended the run") < 1 || out_count("\nEXIT 3") < 1 ||
              out_count("\nEXIT 137") != 1 || time(NULL) - t0 > 60;
    if (bad)
        fail_msg("exit %d, %lld s:\n%s", rc, (long long)(time(NULL) - t0), out);
}

static void test_real_mpirun(void **state)
{
    (void)state;
    if (access("/usr/bin/mpirun", X_OK) != 0)
        skip(); /* ci/deps installs openmpi-bin; a bare machine may lack it */
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "RKV_BASE_PORT=%u mpirun %s --oversubscribe -np 8 %s node --scenario "
             "%s/quickstart.yaml 2>/dev/null",
             test_port() + 1, getuid() == 0 ? "--allow-run-as-root" : "", RKV_BIN, SCEN_DIR);
    assert_int_equal(sh(cmd), 0);
    /* Not the workers' PHASE lines: mpirun forwards each rank's output in
     * chunks and splices them, so a long line can be cut by another
     * rank's (seen under load: "errorsSTATS {..."). The verdict rank's
     * PASS needs every worker's report, checked by the oracle. */
    assert_int_equal(out_count("| phase | pushes |"), 1);
    assert_int_equal(out_count("verdict: "), 1);
    assert_non_null(strstr(out, "verdict: PASS (every pulled value matched the oracle)"));
    /* A wrong value: the table says so and mpirun fails. */
    snprintf(cmd, sizeof(cmd),
             "RKV_TEST_CORRUPT_ROW=17 RKV_BASE_PORT=%u mpirun %s --oversubscribe -np 8 %s node "
             "--scenario %s/quickstart.yaml 2>/dev/null",
             test_port() + 1, getuid() == 0 ? "--allow-run-as-root" : "", RKV_BIN, SCEN_DIR);
    int rc = sh(cmd);
    if (rc == 0 || out_count("verdict: ") != 1 || !strstr(out, "verdict: FAIL") ||
        !strstr(out, "row 17 [0]: expected 0, got 1"))
        fail_msg("mpirun with a corrupted row: exit %d:\n%s", rc, out);
}

/* ---- rkv's own launcher ---- */

static int lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* A bad setting is found once, by the launcher: one line, exit 2 (it was
 * one copy per child, a raw wait status, and exit 3). */
static void expect_one_error(const char *args, const char *want)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s %s 2>&1", RKV_BIN, args);
    int rc = sh(cmd);
    if (rc != 2 || lines(out) != 1 || !strstr(out, want))
        fail_msg("rkv %s: exit %d, %d lines (expected 2, 1 line with \"%s\"):\n%s", args, rc,
                 lines(out), want, out);
}

static void test_bad_settings_once(void **state)
{
    (void)state;
    /* an unknown name is said to be one, with the known names (it was
     * "cannot run as processes on this host") */
    expect_one_error("run " SCEN_DIR "/quickstart.yaml --backend foo",
                     "rkv run: backend: unknown \"foo\" (known: tcp, verbs");
    expect_one_error("run " SCEN_DIR "/quickstart.yaml --backend nosuch", ", sim)");
    /* a known one that cannot run as processes keeps its own message */
    expect_one_error("demo --backend sim", "rkv demo: backend: \"sim\" cannot run as processes");
#if !RKV_WITH_VERBS
    /* a backend this build lacks is named as the build's, not the host's */
    expect_one_error(
        "run " SCEN_DIR "/quickstart.yaml --backend verbs",
        "rkv run: backend: this build has no verbs (configure with -DRKV_WITH_VERBS=ON");
#endif
    expect_one_error("run " SCEN_DIR "/quickstart.yaml --backend tcp --rx-depth abc",
                     "rkv run: rx-depth: expected a non-negative integer, got \"abc\"");
    expect_one_error("demo --backend foo", "rkv demo: backend: unknown \"foo\"");
    expect_one_error("demo --rx-depth abc", "rkv demo: rx-depth: expected a non-negative");
    expect_one_error("demo --rows 0", "rkv demo: workload needs rows 1..2^24");
    expect_one_error("run " SCEN_DIR "/quickstart.yaml --backend sim --rx-depth abc",
                     "rkv run: rx-depth: expected a non-negative integer");
    /* --seed was ignored when it was not a number */
    expect_one_error("run " SCEN_DIR "/quickstart.yaml --seed abc", "rkv run: seed: expected");
    expect_one_error("run " SCEN_DIR "/quickstart.yaml --backend tcp --seed abc",
                     "rkv run: seed: expected");
    /* settings the launcher sets per child, or the scenario decides */
    expect_one_error("demo --server-id 1", "rkv demo: --server-id: the launcher sets it");
    expect_one_error("run " SCEN_DIR "/quickstart.yaml --backend tcp --num-workers 3",
                     "rkv run: --num-workers: the scenario file decides");
    expect_one_error("run " SCEN_DIR "/quickstart.yaml --machines 3",
                     "rkv run: --machines: the scenario file decides");
    expect_one_error("demo --scenario " SCEN_DIR "/quickstart.yaml",
                     "rkv demo: scenario (flag): the demo runs its built-in workload");
}

/* Every setting the launcher accepts reaches its children: the flags it
 * builds for them, read back the way a child reads its command line, give
 * each setting the launcher's value, and not the one the child's own
 * environment holds. One case per setting; a new setting must be added. */
static const struct {
    enum cmd_key k;
    const char *flag, *val, *env; /* flag NULL: set per child by the launcher */
} settings[] = {
    {CMD_ROLE, NULL, NULL, NULL},
    {CMD_CLUSTER, "--cluster", "/tmp/some-ip-config.txt", "RKV_CLUSTER"},
    {CMD_HOST, "--host", "127.0.0.2", "RKV_HOST"},
    {CMD_BASE_PORT, "--base-port", "21000", "RKV_BASE_PORT"},
    {CMD_MACHINES, "--machines", "3", "RKV_MACHINES"},
    {CMD_SERVERS_PER_MACHINE, "--servers-per-machine", "3", "DGL_NUM_SERVER"},
    {CMD_NUM_SERVERS, "--num-servers", "5", "DMLC_NUM_SERVER"},
    {CMD_NUM_WORKERS, "--num-workers", "7", "DMLC_NUM_WORKER"},
    {CMD_MACHINE_ID, NULL, NULL, NULL},
    {CMD_SERVER_ID, NULL, NULL, NULL},
    {CMD_BACKEND, "--backend", "verbs", "RKV_BACKEND"},
    {CMD_TIMEOUT_MS, "--timeout-ms", "1234", "RKV_TIMEOUT_MS"},
    {CMD_CONNECT_RETRY_MS, "--connect-retry-ms", "4321", "RKV_CONNECT_RETRY_MS"},
    {CMD_RX_DEPTH, "--rx-depth", "17", "BYTEPS_RDMA_RX_DEPTH"},
    {CMD_CTRL_BUF_BYTES, "--ctrl-buf-bytes", "4096", "RKV_CTRL_BUF_BYTES"},
    {CMD_SLOTS, "--slots", "9", "RKV_SLOTS"},
    {CMD_MAX_SLOT_BYTES, "--max-slot-bytes", "1048576", "RKV_MAX_SLOT_BYTES"},
    {CMD_SLOT_MEM_BYTES, "--slot-mem-bytes", "8388608", "RKV_SLOT_MEM_BYTES"},
    {CMD_SHM_PREFIX, "--shm-prefix", "rkv-launch-test", "RKV_SHM_PREFIX"},
    {CMD_SEED, "--seed", "99", "RKV_SEED"},
    {CMD_LOG_LEVEL, "--log-level", "3", "PS_VERBOSE"},
    {CMD_ROWS, "--rows", "77", "RKV_ROWS"},
    {CMD_VALUE_BYTES, "--value-bytes", "64", "RKV_VALUE_BYTES"},
    {CMD_ROUNDS, "--rounds", "5", "RKV_ROUNDS"},
    {CMD_SCENARIO, "--scenario", "/tmp/some.yaml", "RKV_SCENARIO"},
    {CMD_DISCOVER, "--discover", "1", "RKV_DISCOVER"},
    {CMD_DURABLE_DIR, "--durable-dir", "/tmp/some-snapshots", "RKV_DURABLE_DIR"},
    {CMD_DURABLE_LOG_PREWRITE, "--durable-log-prewrite", "1048576", "RKV_DURABLE_LOG_PREWRITE"},
    {CMD_RETRY_MS, "--retry-ms", "250", "RKV_RETRY_MS"},
    {CMD_ZERO_COPY_BYTES, "--zero-copy-bytes", "0", "RKV_ZERO_COPY_BYTES"},
    {CMD_BUSY_POLL, "--busy-poll", "1", "RKV_BUSY_POLL"},
    {CMD_SECRET_FILE, "--secret-file", "/tmp/some-secret", "RKV_SECRET_FILE"},
    {CMD_HELLO_TIMEOUT_MS, "--hello-timeout-ms", "2500", "RKV_HELLO_TIMEOUT_MS"},
    {CMD_IDLE_TIMEOUT_MS, "--idle-timeout-ms", "60000", "RKV_IDLE_TIMEOUT_MS"},
    {CMD_NODE_HOST, "--node-host", "127.0.0.3", "DMLC_NODE_HOST"},
    {CMD_INTERFACE, "--interface", "lo", "DMLC_INTERFACE"},
    {CMD_VERBS_DEV, "--verbs-dev", "mlx5_1:1", "RKV_VERBS_DEV"},
    {CMD_VERBS_TOS, "--verbs-tos", "106", "RKV_VERBS_TOS"},
    {CMD_VERBS_SL, "--verbs-sl", "3", "RKV_VERBS_SL"},
    {CMD_VERBS_GID_INDEX, "--verbs-gid-index", "3", "RKV_VERBS_GID_INDEX"},
    {CMD_VERBS_MTU, "--verbs-mtu", "1024", "RKV_VERBS_MTU"},
    {CMD_VERBS_SRQ_DEPTH, "--verbs-srq-depth", "0", "RKV_VERBS_SRQ_DEPTH"},
};
_Static_assert(sizeof(settings) / sizeof(settings[0]) == CMD_KEY_COUNT_, "a case per setting");

static void test_every_setting_reaches_children(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]); i++) {
        assert_int_equal(settings[i].k, (int)i);
        if (!settings[i].flag)
            continue;
        /* the parent: the setting by flag, and by env a value it overrides */
        setenv(settings[i].env, "999", 1);
        char *pargv[] = {(char *)settings[i].flag, (char *)settings[i].val};
        struct cmd_settings ps, cs;
        char err[256];
        assert_int_equal(rkv_cmd_settings_load(&ps, 2, pargv, err, sizeof(err)), 0);
        char *cargv[2 * CMD_KEY_COUNT_];
        int n = rkv_launch_args(&ps, cargv, 2 * CMD_KEY_COUNT_);
        assert_true(n > 0);
        if (rkv_cmd_settings_load(&cs, n, cargv, err, sizeof(err)) < 0)
            fail_msg("%s: the child refuses its flags: %s", settings[i].flag, err);
        if (strcmp(cs.val[i], settings[i].val) != 0)
            fail_msg("%s %s reaches the child as \"%s\"", settings[i].flag, settings[i].val,
                     cs.val[i]);
        /* and a setting left at its default is the default in the child,
         * whatever the child's environment says */
        assert_int_equal(rkv_cmd_settings_load(&ps, 0, NULL, err, sizeof(err)), 0);
        unsetenv(settings[i].env);
        n = rkv_launch_args(&ps, cargv, 2 * CMD_KEY_COUNT_);
        setenv(settings[i].env, "998", 1);
        assert_int_equal(rkv_cmd_settings_load(&cs, n, cargv, err, sizeof(err)), 0);
        if (strcmp(cs.val[i], ps.val[i]) != 0)
            fail_msg("%s: the child took its own environment's \"%s\"", settings[i].flag,
                     cs.val[i]);
        unsetenv(settings[i].env);
    }
}

/* For real: `rkv demo --durable-dir DIR` made the servers durable only
 * with RKV_DURABLE_DIR; the flag was accepted and dropped. */
static void test_demo_durable_dir(void **state)
{
    (void)state;
    char dir[64], cmd[512];
    snprintf(dir, sizeof(dir), "/tmp/rkv-launch-%d.XXXXXX", (int)getpid());
    assert_non_null(mkdtemp(dir));
    snprintf(cmd, sizeof(cmd),
             "env -u RKV_DURABLE_DIR %s demo --machines 2 --servers-per-machine 1 --num-workers "
             "2 --rows 64 --rounds 1 --value-bytes 4096 --durable-dir %s 2>&1",
             RKV_BIN, dir);
    assert_int_equal(sh(cmd), 0);
    char snap[128];
    for (int m = 0; m < 2; m++) {
        snprintf(snap, sizeof(snap), "%s/rkv-m%d.snap", dir, m);
        if (access(snap, F_OK) != 0)
            fail_msg("no snapshot %s: --durable-dir did not reach server %d", snap, m);
    }
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* The processes a run starts share a secret of the run's unless the user
 * gave one: they served anyone who reached their ports, and said so
 * (NO SHARED SECRET, a line per server). The file is gone at the end. */
static void test_run_makes_its_own_secret(void **state)
{
    (void)state;
    char dir[64], cmd[512];
    snprintf(dir, sizeof(dir), "/tmp/rkv-secret-test-%d.XXXXXX", (int)getpid());
    assert_non_null(mkdtemp(dir));
    snprintf(cmd, sizeof(cmd),
             "env -u RKV_TOKEN -u RKV_SECRET_FILE TMPDIR=%s %s run %s/quickstart.yaml --backend "
             "tcp 2>&1",
             dir, RKV_BIN, SCEN_DIR);
    assert_int_equal(sh(cmd), 0);
    if (out_count("NO SHARED SECRET"))
        fail_msg("a server ran without a secret:\n%s", out);
    snprintf(cmd, sizeof(cmd), "ls -A %s", dir);
    assert_int_equal(sh(cmd), 0);
    if (out[0])
        fail_msg("left in TMPDIR after the run: %s", out);
    /* The user's own secret is the run's: no file is made. */
    snprintf(cmd, sizeof(cmd),
             "env RKV_TOKEN=users-own TMPDIR=%s %s demo --machines 2 --servers-per-machine 1 "
             "--num-workers 2 --rows 64 --rounds 1 --value-bytes 4096 2>&1; ls -A %s",
             dir, RKV_BIN, dir);
    assert_int_equal(sh(cmd), 0);
    assert_int_equal(out_count("NO SHARED SECRET"), 0);
    assert_int_equal(out_count("rkv-secret."), 0);
    assert_int_equal(rmdir(dir), 0);
}

/* --host A,B: machine 0's servers listen on A, machine 1's on B (the
 * two-host verbs runs' hook), and a cluster over the list runs; an empty
 * address in it is one line and exit 2. */
static void test_demo_host_list(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof(cmd),
             "%s demo --machines 2 --servers-per-machine 1 --num-workers 2 --rows 64 --rounds 1 "
             "--value-bytes 4096 --host 127.0.0.1,127.0.0.2 2>&1",
             RKV_BIN);
    assert_int_equal(sh(cmd), 0);
    expect_one_error("demo --host 127.0.0.1,,127.0.0.2",
                     "host: \"127.0.0.1,,127.0.0.2\": an empty");
}

/* Whether pid is a run's reaper (harness/reaper.c), which outlives the
 * launcher by design to remove what a SIGKILL left. */
static int is_reaper(pid_t pid)
{
    char path[64], comm[32] = "";
    snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int ok = fgets(comm, sizeof(comm), f) != NULL;
    fclose(f);
    return ok && !strncmp(comm, "rkv-reaper", 10);
}

/* The children of pid (Linux: /proc/PID/task/PID/children), its reaper
 * aside. */
static int children_of(pid_t pid, pid_t *kids, int cap)
{
    char path[64], buf[4096];
    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[len] = 0;
    int n = 0;
    for (char *p = buf, *end; n < cap && (kids[n] = (pid_t)strtol(p, &end, 10)) > 0; p = end)
        if (!is_reaper(kids[n]))
            n++;
    return n;
}

/* Gone, or a zombie nobody reaps (a container's init may not). */
static int process_gone(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 1;
    size_t len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[len] = 0;
    const char *rp = strrchr(buf, ')');
    return rp && rp[1] == ' ' && rp[2] == 'Z';
}

static int segments_with(const char *prefix)
{
    DIR *dir = opendir("/dev/shm");
    assert_non_null(dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(dir)) != NULL;)
        n += !strncmp(e->d_name, prefix, strlen(prefix));
    closedir(dir);
    return n;
}

static const char endless[] =
    "seed: 4242\n"
    "cluster: {machines: 2, servers_per_machine: 2, workers_per_machine: 2}\n"
    "tensors:\n"
    "  - {name: t, rows: 256}\n"
    "workload:\n"
    "  - {name: long, tensor: t, push: 0.5, push_op: sum, rounds: 10000000, think_us: 1000}\n";

/* Starts `rkv run` on the endless scenario (written to yaml, named after
 * tag) with --shm-prefix=prefix, its stdout (and stderr when quiet) to
 * /dev/null, and waits up to 10 s for its 8 children and their 4
 * segments. Returns the launcher's pid; its children in kids (16), their
 * number in *n_p. */
static pid_t start_endless(const char *tag, const char *prefix, int quiet, char *yaml,
                           size_t yaml_len, pid_t *kids, int *n_p)
{
    char arg_prefix[80];
    tmp_scenario(yaml, yaml_len, tag, endless);
    snprintf(arg_prefix, sizeof(arg_prefix), "--shm-prefix=%s", prefix);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, STDOUT_FILENO);
        if (quiet)
            dup2(null, STDERR_FILENO);
        execl(RKV_BIN, RKV_BIN, "run", yaml, "--backend", "tcp", arg_prefix, (char *)NULL);
        _exit(127);
    }
    int n = 0;
    for (int i = 0; i < 600 && (n < 8 || segments_with(prefix) < 4); i++) {
        usleep(50000);
        n = children_of(pid, kids, 16);
    }
    *n_p = n;
    return pid;
}

/* Starts `rkv run` on the endless scenario, waits until its 8 children
 * run and their segments exist, sends sig to the launcher alone, and checks
 * that it ends by it leaving no child and no segment. */
static void stop_launcher(int sig)
{
    char yaml[64], prefix[48];
    snprintf(prefix, sizeof(prefix), "rkv-lt%d-%d", (int)getpid(), sig);
    pid_t kids[16];
    int n;
    pid_t pid = start_endless("launch", prefix, 0, yaml, sizeof(yaml), kids, &n);
    if (n != 8) {
        kill(pid, SIGTERM); /* a failing test leaves nothing running either */
        waitpid(pid, NULL, 0);
        fail_msg("the launcher started %d processes, expected 8", n);
    }
    /* every child runs the scenario's seed (a child given the default 1
     * would have run another workload than the launcher reports) */
    int unseeded = 0;
    for (int k = 0; k < n; k++) {
        char path[64], cmdline[4096];
        snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)kids[k]);
        FILE *c = fopen(path, "r");
        assert_non_null(c);
        size_t len = fread(cmdline, 1, sizeof(cmdline) - 1, c);
        fclose(c);
        int seen = 0;
        for (size_t at = 0; at < len; at += strlen(cmdline + at) + 1)
            seen |= !strcmp(cmdline + at, "--seed") && at + 7 < len &&
                    !strcmp(cmdline + at + 7, "4242");
        if (!seen)
            unseeded = kids[k];
    }
    usleep(300000); /* the workers are in their phase */
    assert_int_equal(kill(pid, sig), 0);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (sig == SIGKILL) { /* nobody is left to clean: the children die with it */
        for (int i = 0; i < 400; i++) {
            int alive = 0;
            for (int k = 0; k < n; k++)
                alive += !process_gone(kids[k]);
            if (!alive)
                break;
            usleep(50000);
        }
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -f /dev/shm/%s-*", prefix);
        assert_int_equal(system(cmd), 0);
    } else {
        assert_true(WIFSIGNALED(st));
        assert_int_equal(WTERMSIG(st), sig);
    }
    for (int k = 0; k < n; k++)
        if (!process_gone(kids[k]))
            fail_msg("child %d of the launcher survived signal %d", (int)kids[k], sig);
    if (unseeded)
        fail_msg("child %d does not run with the scenario's --seed 4242", unseeded);
    if (segments_with(prefix) != 0)
        fail_msg("%d segments %s-* left in /dev/shm after signal %d", segments_with(prefix), prefix,
                 sig);
    unlink(yaml);
}

static void test_sigterm_stops_everything(void **state)
{
    (void)state;
    stop_launcher(SIGTERM);
}

static void test_sigint_stops_everything(void **state)
{
    (void)state;
    stop_launcher(SIGINT);
}

static void test_children_die_with_launcher(void **state)
{
    (void)state;
    stop_launcher(SIGKILL);
}

/* Two runs with one shm prefix on one host (a second `rkv run --base-port
 * P` started beside the first, or the same --shm-prefix): the second's
 * servers are refused ("in use by a running server"), and that is all it
 * may do. Its launcher's clean-up removed the first run's segments too,
 * every machine's: the first run's workers then failed ("shard ...: cannot
 * map ... (unknown tensor)") or it ran on with its shared memory gone from
 * /dev/shm. */
static void test_second_run_leaves_the_first_alone(void **state)
{
    (void)state;
    char yaml[64], prefix[48];
    snprintf(prefix, sizeof(prefix), "rkv-lt%d-twice", (int)getpid());
    pid_t kids[16];
    int n;
    pid_t first = start_endless("launch-first", prefix, 1, yaml, sizeof(yaml), kids, &n);
    int before = segments_with(prefix);
    char cmd[512];
    snprintf(cmd, sizeof(cmd),
             "%s run %s/quickstart.yaml --backend tcp --shm-prefix=%s > /dev/null 2>&1", RKV_BIN,
             SCEN_DIR, prefix);
    int second = n == 8 && before == 4 ? system(cmd) : -1;
    int after = segments_with(prefix);
    int first_ran = waitpid(first, NULL, WNOHANG) == 0;
    kill(first, SIGTERM); /* it cleans up its own */
    int st;
    assert_int_equal(waitpid(first, &st, 0), first);
    unlink(yaml);
    if (n != 8 || before != 4)
        fail_msg("the first run started %d processes and %d segments, expected 8 and 4", n, before);
    assert_true(WIFEXITED(second) && WEXITSTATUS(second) != 0); /* refused */
    if (after != before || !first_ran)
        fail_msg("the second run left %d of the first run's %d segments (first run %s)", after,
                 before, first_ran ? "still running" : "ended");
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM);
    assert_int_equal(segments_with(prefix), 0);
}

/* Ctrl-C on `rkv demo` in its timed phase: the phase's tensor (t_bench,
 * made after the checked phases' five) left its two 32 MiB segments in
 * /dev/shm, the launcher counting only the five. Waits until they exist,
 * then interrupts. */
static void test_demo_sigint_in_timed_phase(void **state)
{
    (void)state;
    char prefix[48], t6[64];
    snprintf(prefix, sizeof(prefix), "rkv-demo-int-%d", (int)getpid());
    snprintf(t6, sizeof(t6), "%s-m0-t6", prefix);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, STDOUT_FILENO);
        dup2(null, STDERR_FILENO);
        char arg[64];
        snprintf(arg, sizeof(arg), "--shm-prefix=%s", prefix);
        execl(RKV_BIN, RKV_BIN, "demo", "--num-workers", "2", "--value-bytes", "1048576", arg,
              (char *)NULL);
        _exit(127);
    }
    int seen = 0; /* the checked phases come first: a minute under ASan or valgrind */
    for (int i = 0; i < 6000 && !seen; i++) {
        usleep(20000);
        seen = segments_with(t6) > 0;
    }
    assert_int_equal(kill(pid, SIGINT), 0);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!seen)
        fail_msg("the demo never reached its timed phase (no %s)", t6);
    if (segments_with(prefix) != 0) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -f /dev/shm/%s-*", prefix);
        int left = segments_with(prefix);
        if (system(cmd) != 0)
            print_message("could not remove /dev/shm/%s-*\n", prefix);
        fail_msg("%d segments %s-* left after Ctrl-C", left, prefix);
    }
}

/* ---- ps-lite's conventions: DMLC_* variables and a scheduler ---- */

/* launch_env.sh's output files, read back into out. */
static void read_outputs(const char *prefix)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "cat %s.* ; rm -f %s.*", prefix, prefix);
    sh(cmd);
}

static int pslite_launch(const char *env, unsigned servers, unsigned workers, const char *prefix)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s sh %s/launch_env.sh %s %u %u %u %s", env, TEST_DIR, RKV_BIN,
             test_port() + 5, servers, workers, prefix);
    int rc = sh(cmd);
    read_outputs(prefix);
    return rc;
}

/* Two servers told nothing but DMLC_*: the scheduler numbers them (both
 * took id 0 before, and the second failed "Address already in use"). */
static void test_pslite_one_machine(void **state)
{
    (void)state;
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "/tmp/rkv-launch-%d", (int)getpid());
    if (pslite_launch("", 2, 2, prefix) != 0)
        fail_msg("ps-lite launch failed:\n%s", out);
    assert_non_null(strstr(out, "rkv scheduler: 2 servers and 2 workers on 1 machines"));
    assert_non_null(strstr(out, "made this node server 0, on machine 0 of 1 (127.0.0.1)"));
    assert_non_null(strstr(out, "made this node server 1, on machine 0 of 1 (127.0.0.1)"));
    assert_int_equal(out_count("RESULT worker="), 2);
    assert_int_equal(out_count(" errors=0 "), 2 + 2 * 5); /* RESULT and PHASE lines */
}

/* Two machines, told apart by DMLC_NODE_HOST (two loopback addresses):
 * servers grouped by host, each worker on its host's machine. */
static void test_pslite_two_machines(void **state)
{
    (void)state;
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "/tmp/rkv-launch-%d", (int)getpid());
    if (pslite_launch("NODE_HOSTS='127.0.0.1 127.0.0.2'", 4, 4, prefix) != 0)
        fail_msg("ps-lite launch failed:\n%s", out);
    char want[128];
    snprintf(want, sizeof(want), "on 2 machines:\n127.0.0.1 %u 2\n127.0.0.2 %u 2\n",
             test_port() + 6, test_port() + 6);
    assert_non_null(strstr(out, want));
    for (unsigned id = 0; id < 4; id++) {
        snprintf(want, sizeof(want), "made this node server %u, on machine %u of 2 (127.0.0.%u)",
                 id, id / 2, id / 2 + 1);
        assert_non_null(strstr(out, want));
    }
    assert_int_equal(out_count("put this node on machine 1 of 2 (127.0.0.2)"), 2);
    assert_int_equal(out_count("RESULT worker="), 4);
    assert_int_equal(out_count(" errors=0 "), 4 + 4 * 5);
}

/* One host spelt two ways (DMLC_NODE_HOST localhost and 127.0.0.1) is one
 * machine: grouped by name, it made two machines on one port, and the
 * second one's server never ended. */
static void test_pslite_one_host_two_spellings(void **state)
{
    (void)state;
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "/tmp/rkv-launch-%d", (int)getpid());
    if (pslite_launch("NODE_HOSTS='127.0.0.1 localhost'", 2, 2, prefix) != 0)
        fail_msg("ps-lite launch failed:\n%s", out);
    assert_non_null(strstr(out, "rkv scheduler: 2 servers and 2 workers on 1 machines"));
    assert_non_null(strstr(out, "made this node server 1, on machine 0 of 1 (127.0.0.1)"));
    assert_int_equal(out_count("RESULT worker="), 2);
}

/* DMLC_INTERFACE names the interface whose address a node announces. */
static void test_pslite_interface(void **state)
{
    (void)state;
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "/tmp/rkv-launch-%d", (int)getpid());
    if (pslite_launch("DMLC_INTERFACE=lo", 1, 1, prefix) != 0)
        fail_msg("ps-lite launch failed:\n%s", out);
    assert_non_null(strstr(out, "made this node server 0, on machine 0 of 1 (127.0.0.1)"));
    /* One that is not there is refused at once, naming it, by the nodes
     * that use it (not the scheduler, nor beside DMLC_NODE_HOST: ps-lite
     * ignores it there). */
    assert_int_equal(pslite_launch("RKV_CONNECT_RETRY_MS=300 RKV_TIMEOUT_MS=300 "
                                   "DMLC_INTERFACE=no-such-if0",
                                   1, 1, prefix),
                     1);
    assert_non_null(strstr(out, "rkv server: interface: no interface \"no-such-if0\" on this "
                                "host (env DMLC_INTERFACE)"));
    assert_null(strstr(out, "rkv scheduler: interface:"));
}

/* DGL's launch: ip_config.txt (the same port on each machine, as DGL
 * writes it), DGL_ROLE=server with DGL_SERVER_ID, DGL_ROLE=client, and
 * DGL_NUM_SERVER / DGL_NUM_CLIENT; two machines on two loopback addresses. */
static void test_dgl_two_machines(void **state)
{
    (void)state;
    char cmd[2048], ipc[64];
    snprintf(ipc, sizeof(ipc), "/tmp/rkv-launch-%d.ip_config.txt", (int)getpid());
    FILE *f = fopen(ipc, "w");
    assert_non_null(f);
    fprintf(f, "127.0.0.1 %u\n127.0.0.2 %u\n", test_port() + 5, test_port() + 5);
    fclose(f);
    /* Each node's output to a file of its own, gathered at the end: eight
     * processes writing one pipe split each other's lines past PIPE_BUF (a
     * worker's PIN lines run to kilobytes), and a loaded host once counted
     * 3 RESULT lines of 4. */
    snprintf(cmd, sizeof(cmd),
             "export DGL_IP_CONFIG=%s DGL_NUM_SERVER=2 DGL_NUM_CLIENT=4 RKV_ROWS=300 "
             "RKV_ROUNDS=1 RKV_VALUE_BYTES=4096 RKV_CONNECT_RETRY_MS=10000 "
             "RKV_TIMEOUT_MS=10000; o=$(mktemp -d); pids=''; "
             "for k in 0 1 2 3; do DGL_ROLE=server DGL_SERVER_ID=$k timeout 60 %s node "
             ">$o/s$k 2>&1 & pids=\"$pids $!\"; done; "
             "for k in 0 1 2 3; do DGL_ROLE=client %s node >$o/c$k 2>&1 & "
             "pids=\"$pids $!\"; done; "
             "rc=0; for p in $pids; do wait $p || rc=1; done; cat $o/*; rm -rf $o; exit $rc",
             ipc, RKV_BIN, RKV_BIN);
    int rc = sh(cmd);
    unlink(ipc);
    if (rc != 0) { /* servers that timed out leave their machines' segments */
        char rm[128];
        snprintf(rm, sizeof(rm), "rm -f /dev/shm/rkv-%u-*", test_port() + 5);
        if (system(rm) != 0)
            print_message("could not remove /dev/shm/rkv-%u-*\n", test_port() + 5);
        fail_msg("DGL-style launch failed:\n%s", out);
    }
    assert_int_equal(out_count("RESULT worker="), 4);
    assert_int_equal(out_count(" errors=0 "), 4 + 4 * 5);
}

/* A node started before its scheduler, with the root port in the
 * ephemeral range, could be given that very port for its connect and
 * connect to itself: it read its own registration back as the scheduler's
 * answer, waited out its deadline ("scheduler: no answer"), and held the
 * port the scheduler then could not listen on (an outside tester). Made
 * certain in a network namespace whose ephemeral range is the root port
 * alone: it is a refusal now, and the port is free once the node gave up. */
static void test_pslite_node_not_connected_to_itself(void **state)
{
    (void)state;
    if (system("unshare -n true 2>/dev/null") != 0)
        skip(); /* no network namespaces for this user */
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "unshare -n sh -c 'ip link set lo up && echo \"40000 40000\" > "
             "/proc/sys/net/ipv4/ip_local_port_range && "
             "DMLC_ROLE=worker DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=40000 "
             "DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=1 RKV_CONNECT_RETRY_MS=1000 RKV_TIMEOUT_MS=500 "
             "%s node; echo rc=$?; "
             "python3 -c \"import socket; socket.socket().bind((\\\"127.0.0.1\\\", 40000)); "
             "print(\\\"port free\\\")\"' 2>&1",
             RKV_BIN);
    assert_int_equal(sh(cmd), 0);
    if (!strstr(out, "rkv worker: no scheduler at 127.0.0.1:40000 (DMLC_PS_ROOT_URI:"
                     "DMLC_PS_ROOT_PORT): Connection refused") ||
        !strstr(out, "rc=3") || !strstr(out, "port free"))
        fail_msg("%s", out);
}

/* What goes wrong in a ps-lite launch is named, and nobody hangs. */
static void test_pslite_errors(void **state)
{
    (void)state;
    char cmd[1024], prefix[64];
    snprintf(prefix, sizeof(prefix), "/tmp/rkv-launch-%d", (int)getpid());
    /* A worker on a host where no server runs cannot map its shard. */
    assert_int_equal(pslite_launch("NODE_HOSTS='127.0.0.1 127.0.0.3'", 1, 2, prefix), 1);
    assert_non_null(strstr(out, "rkv scheduler: a worker registered from 127.0.0.3, where no "
                                "server runs"));
    assert_int_equal(out_count("rkv worker: scheduler: a worker registered from 127.0.0.3"), 2);
    const char *quick = "DMLC_PS_ROOT_URI=127.0.0.1 DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=1 "
                        "RKV_CONNECT_RETRY_MS=300 RKV_TIMEOUT_MS=300";
    /* No scheduler. */
    snprintf(cmd, sizeof(cmd), "%s DMLC_PS_ROOT_PORT=%u DMLC_ROLE=server %s node 2>&1", quick,
             test_port() + 5, RKV_BIN);
    assert_int_equal(sh(cmd), 3);
    assert_non_null(strstr(out, "no scheduler at 127.0.0.1:"));
    assert_non_null(strstr(out, "launch one with DMLC_ROLE=scheduler"));
    /* It says what it waits for as it starts to, and every 10 s (it was
     * silent for the whole wait, a minute by default). */
    char want[128];
    snprintf(want, sizeof(want), "rkv server: waiting for the scheduler at 127.0.0.1:%u ",
             test_port() + 5);
    assert_int_equal(out_count(want), 1);
    snprintf(cmd, sizeof(cmd),
             "DMLC_PS_ROOT_URI=127.0.0.1 DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=1 "
             "RKV_CONNECT_RETRY_MS=300 RKV_TIMEOUT_MS=14700 DMLC_PS_ROOT_PORT=%u "
             "DMLC_ROLE=worker %s node 2>&1",
             test_port() + 5, RKV_BIN);
    assert_int_equal(sh(cmd), 3);
    snprintf(want, sizeof(want), "rkv worker: waiting for the scheduler at 127.0.0.1:%u ",
             test_port() + 5);
    /* Two in its 15 s: at the start and 10 s on (give or take a loaded
     * host's delay: no exact second is asserted). */
    if (out_count(want) != 2 || !strstr(out, "; 0 s so far, giving up in "))
        fail_msg("expected 2 lines \"%s\", at 0 s and 10 s on:\n%s", want, out);
    /* A node whose DMLC_NUM_SERVER differs from the scheduler's. 2 s, not
     * quick's 300 ms: on a loaded host the scheduler took longer than that
     * to listen, and the server gave up before it could be refused (exit 3). */
    snprintf(cmd, sizeof(cmd),
             "export %s DMLC_PS_ROOT_PORT=%u RKV_CONNECT_RETRY_MS=2000 RKV_TIMEOUT_MS=2000; "
             "DMLC_ROLE=scheduler %s node 2>&1 & "
             "DMLC_NUM_SERVER=2 DMLC_ROLE=server %s node 2>&1; rc=$?; wait $!; echo sched=$?; "
             "exit $rc",
             quick, test_port() + 5, RKV_BIN, RKV_BIN);
    assert_int_equal(sh(cmd), 2);
    assert_non_null(strstr(out, "rkv server: scheduler: this node has DMLC_NUM_SERVER=2 "
                                "DMLC_NUM_WORKER=1, the scheduler 1 and 1"));
    assert_non_null(strstr(out, "rkv scheduler: 0 of 1 servers and 0 of 1 workers registered"));
    assert_non_null(strstr(out, "sched=3"));
    /* A connection that is not a node is refused, and the launch goes on. */
    snprintf(cmd, sizeof(cmd),
             "export DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=%u DMLC_NUM_SERVER=1 "
             "DMLC_NUM_WORKER=1 RKV_ROWS=64 RKV_ROUNDS=1 RKV_VALUE_BYTES=4096; "
             "DMLC_ROLE=scheduler %s node 2>&1 & "
             "for i in $(seq 50); do bash -c 'echo GET / HTTP/1.0 >/dev/tcp/127.0.0.1/%u' "
             "2>/dev/null && break; sleep 0.1; done; "
             "DMLC_ROLE=server %s node >/dev/null 2>&1 & "
             "DMLC_ROLE=worker %s node >/dev/null 2>&1; rc=$?; wait; exit $rc",
             test_port() + 5, RKV_BIN, test_port() + 5, RKV_BIN, RKV_BIN);
    assert_int_equal(sh(cmd), 0);
    assert_non_null(strstr(out, "rkv scheduler: refused a node: not an rkv node registration"));
    assert_non_null(strstr(out, "rkv scheduler: 1 servers and 1 workers on 1 machines"));
    /* An id given by hand contradicts the scheduler's numbering. */
    snprintf(cmd, sizeof(cmd), "%s DMLC_ROLE=server RKV_SERVER_ID=1 %s node 2>&1", quick, RKV_BIN);
    assert_int_equal(sh(cmd), 2);
    assert_non_null(strstr(out, "server-id (env RKV_SERVER_ID): under DMLC_ROLE the scheduler "
                                "numbers the servers"));
    /* The scheduler without DMLC_NUM_SERVER, and where a cluster file
     * already says everything. */
    snprintf(cmd, sizeof(cmd),
             "env -u DMLC_NUM_SERVER -u RKV_NUM_SERVERS DMLC_ROLE=scheduler %s "
             "node 2>&1",
             RKV_BIN);
    assert_int_equal(sh(cmd), 2);
    assert_non_null(strstr(out, "num-servers: DMLC_NUM_SERVER (or RKV_NUM_SERVERS) is needed"));
    /* Nor without the other three, unset or empty, in any role (each was
     * its default: a worker without DMLC_PS_ROOT_URI waited for a
     * scheduler at 127.0.0.1:29500, and the job counted on one worker). */
    static const struct {
        const char *unset, *want;
    } missing[] = {
        {"DMLC_NUM_WORKER", "num-workers: DMLC_NUM_WORKER (or RKV_NUM_WORKERS) is needed with "
                            "DMLC_ROLE"},
        {"DMLC_PS_ROOT_URI", "host: DMLC_PS_ROOT_URI (or RKV_HOST), the scheduler's address, is "
                             "needed with DMLC_ROLE"},
        {"DMLC_PS_ROOT_PORT", "base-port: DMLC_PS_ROOT_PORT (or RKV_BASE_PORT), the scheduler's "
                              "port, is needed with DMLC_ROLE"},
    };
    static const char *const roles[] = {"scheduler", "server", "worker"};
    for (size_t i = 0; i < sizeof(missing) / sizeof(missing[0]); i++) {
        for (size_t r = 0; r < 3; r++) {
            for (int empty = 0; empty < 2; empty++) {
                snprintf(cmd, sizeof(cmd),
                         "env -u RKV_NUM_WORKERS -u RKV_HOST -u RKV_BASE_PORT -u DGL_NUM_CLIENT "
                         "DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=%u DMLC_NUM_SERVER=1 "
                         "DMLC_NUM_WORKER=1 RKV_CONNECT_RETRY_MS=300 RKV_TIMEOUT_MS=300 "
                         "DMLC_ROLE=%s sh -c '%s%s%s %s node' 2>&1",
                         test_port() + 5, roles[r], empty ? "" : "unset ", missing[i].unset,
                         empty ? "=" : ";", RKV_BIN);
                int rc = sh(cmd);
                if (rc != 2 || !strstr(out, missing[i].want))
                    fail_msg("%s %s, role %s: exit %d, want 2 and \"%s\":\n%s", missing[i].unset,
                             empty ? "empty" : "unset", roles[r], rc, missing[i].want, out);
            }
        }
    }
    snprintf(cmd, sizeof(cmd), "DMLC_ROLE=scheduler DGL_IP_CONFIG=/some/ip_config.txt %s node 2>&1",
             RKV_BIN);
    assert_int_equal(sh(cmd), 0);
    assert_non_null(strstr(out, "rkv scheduler: not needed: the cluster file /some/ip_config.txt "
                                "(env DGL_IP_CONFIG) gives every node its address and id"));
}

/* The scheduler's address as launch scripts get it wrong: padded with a
 * space, an IPv6 address (the rendezvous is IPv4), a port in it, a list.
 * Each is refused at once, by every role, naming DMLC_PS_ROOT_URI and what
 * to give instead (getaddrinfo's "Name or service not known" named
 * neither, and a worker took it for a store error, exit 3). */
static void test_pslite_root_uri(void **state)
{
    (void)state;
    static const struct {
        const char *uri, *role, *want;
    } cases[] = {
        {" localhost ", "scheduler",
         "byte 0x20 at 1 is no part of a host name or address "
         "(env DMLC_PS_ROOT_URI)"},
        {" localhost ", "worker",
         "byte 0x20 at 1 is no part of a host name or address "
         "(env DMLC_PS_ROOT_URI)"},
        {"::1", "scheduler", "scheduler host '::1' (env DMLC_PS_ROOT_URI): "},
        {"::1", "worker", "; give the scheduler's IPv4 address or a name with one"},
        {"127.0.0.1:9000", "server", "has a port; give the address alone"},
        {"127.0.0.1,127.0.0.2", "worker", "the scheduler has one address, not a list"},
    };
    char cmd[512];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(cmd, sizeof(cmd),
                 "DMLC_PS_ROOT_URI='%s' DMLC_PS_ROOT_PORT=%u DMLC_NUM_SERVER=1 "
                 "DMLC_NUM_WORKER=1 RKV_CONNECT_RETRY_MS=300 RKV_TIMEOUT_MS=300 "
                 "DMLC_ROLE=%s %s node 2>&1",
                 cases[i].uri, test_port() + 5, cases[i].role, RKV_BIN);
        int rc = sh(cmd);
        if (rc != 2 || !strstr(out, cases[i].want))
            fail_msg("DMLC_PS_ROOT_URI='%s' DMLC_ROLE=%s: exit %d, want 2 and \"%s\":\n%s",
                     cases[i].uri, cases[i].role, rc, cases[i].want, out);
    }
}

/* Two jobs given one DMLC_PS_ROOT_PORT: the second scheduler says what to
 * do about it (it said only "Address already in use"); the first goes on. */
static void test_pslite_scheduler_twice(void **state)
{
    (void)state;
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "export DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=%u DMLC_NUM_SERVER=1 "
             "DMLC_NUM_WORKER=1 RKV_CONNECT_RETRY_MS=1500 RKV_TIMEOUT_MS=1500; "
             "DMLC_ROLE=scheduler %s node >/dev/null 2>&1 & "
             "for i in $(seq 50); do bash -c ': >/dev/tcp/127.0.0.1/%u' 2>/dev/null && break; "
             "sleep 0.05; done; "
             "DMLC_ROLE=scheduler %s node 2>&1; rc=$?; kill $! 2>/dev/null; wait; exit $rc",
             test_port() + 5, RKV_BIN, test_port() + 5, RKV_BIN);
    assert_int_equal(sh(cmd), 3);
    assert_non_null(strstr(out, "(env DMLC_PS_ROOT_URI): Address already in use; another "
                                "scheduler, or another program, listens there: stop it, or give "
                                "this job its own DMLC_PS_ROOT_PORT"));
}

/* A worker whose workload settings are refused says so before it registers:
 * refused after, it had been counted, and its server waited for it forever.
 * Now the scheduler fails the launch and the server exits 3 within its wait. */
static void test_pslite_worker_refused_early(void **state)
{
    (void)state;
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "export DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=%u DMLC_NUM_SERVER=1 "
             "DMLC_NUM_WORKER=1 RKV_CONNECT_RETRY_MS=1000 RKV_TIMEOUT_MS=1000 RKV_ROWS=64; "
             "DMLC_ROLE=scheduler timeout 30 %s node 2>&1 & "
             "DMLC_ROLE=server timeout 30 %s node 2>&1 & s=$!; "
             "RKV_ROUNDS=5000 DMLC_ROLE=worker timeout 30 %s node 2>&1; echo worker=$?; "
             "wait $s; echo server=$?; wait",
             test_port() + 5, RKV_BIN, RKV_BIN, RKV_BIN);
    assert_int_equal(sh(cmd), 0);
    if (!strstr(out, "worker=2") || !strstr(out, "server=3") ||
        !strstr(out, "rounds 5000 from env RKV_ROUNDS) (before registering with the scheduler)"))
        fail_msg("want worker=2 refused before registering, server=3 (not 124, a hang):\n%s", out);
}

/* Ports a launcher picked stay reserved against other launchers until its
 * run ends (two runs started together once picked the same ports, and a
 * server failed "Address already in use"), yet its own servers can listen
 * on them. */
static int bind_port(uint16_t port, int reuse, int do_listen)
{
    int f = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(f >= 0);
    struct sockaddr_in b = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1;
    if (reuse)
        setsockopt(f, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    int ok = bind(f, (struct sockaddr *)&b, sizeof(b)) == 0 && (!do_listen || listen(f, 4) == 0);
    close(f);
    return ok;
}

static void test_free_ports_held(void **state)
{
    (void)state;
    enum { N = 6 };
    int hold[N], hold2[N];
    uint16_t base, base2;
    assert_int_equal(rkv_launch_free_ports(N, &base, hold), 0);
    for (int i = 0; i < N; i++) {
        assert_false(bind_port((uint16_t)(base + i), 0, 0)); /* another launcher's probe */
        assert_true(bind_port((uint16_t)(base + i), 1, 1));  /* this run's server */
    }
    for (int k = 0; k < 400; k++) { /* other launchers never get an overlapping range */
        assert_int_equal(rkv_launch_free_ports(N, &base2, hold2), 0);
        assert_true(base2 + N <= base || base + N <= base2);
        for (int i = 0; i < N; i++)
            close(hold2[i]);
    }
    for (int i = 0; i < N; i++)
        close(hold[i]);
    assert_true(bind_port(base, 0, 0)); /* released */
}

/* The launcher as a library function, called from this process (not the
 * rkv binary): the report of a real run on tcp, and the verdict of one whose
 * oracle must fail (a row corrupted by every server, the self-test hook). */
static void launch_quickstart(const char *corrupt, struct rkv_report *r, int *code_p)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/quickstart.yaml", SCEN_DIR);
    struct rkv_scenario *sc = NULL;
    assert_int_equal(rkv_launch_load(path, &sc), 0);
    struct cmd_settings s;
    char *flags[] = {"--backend", "tcp"};
    assert_int_equal(rkv_launch_settings(sc, &s, 2, flags), 0);
    struct rkv_launch_opts o = {.self = "rkv", .exe = RKV_BIN, .settings = &s};
    if (corrupt)
        setenv("RKV_TEST_CORRUPT_ROW", corrupt, 1);
    fflush(stdout);
    *code_p = rkv_launch_run(sc, "tcp", &o, r);
    unsetenv("RKV_TEST_CORRUPT_ROW");
    assert_non_null(r->sc);
    assert_int_equal(r->n_workers, rkv_scenario_workers(sc));
    assert_int_equal(*code_p, rkv_launch_verdict(r));
    uint64_t errors = 0;
    for (uint32_t p = 0; p < sc->n_phases; p++) {
        assert_int_equal(r->reported[p], r->n_workers);
        errors += r->phase[p].errors;
    }
    assert_true(corrupt ? errors > 0 : errors == 0);
    rkv_report_free(r);
    rkv_scenario_free(sc);
}

static void test_launch_run_as_a_function(void **state)
{
    (void)state;
    struct rkv_report r;
    int code;
    launch_quickstart(NULL, &r, &code);
    assert_int_equal(code, RKV_EXIT_OK);
    launch_quickstart("5", &r, &code);
    assert_int_equal(code, RKV_EXIT_CHECK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dry_run),
        cmocka_unit_test(test_slurm_variables),
        cmocka_unit_test(test_slurm_wrong_value),
        cmocka_unit_test(test_slurm_dead_worker),
        cmocka_unit_test(test_slurm_dead_worker0),
        cmocka_unit_test(test_real_mpirun),
        cmocka_unit_test(test_free_ports_held),
        cmocka_unit_test(test_launch_run_as_a_function),
        cmocka_unit_test(test_bad_settings_once),
        cmocka_unit_test(test_every_setting_reaches_children),
        cmocka_unit_test(test_demo_durable_dir),
        cmocka_unit_test(test_run_makes_its_own_secret),
        cmocka_unit_test(test_demo_host_list),
        cmocka_unit_test(test_sigterm_stops_everything),
        cmocka_unit_test(test_sigint_stops_everything),
        cmocka_unit_test(test_children_die_with_launcher),
        cmocka_unit_test(test_second_run_leaves_the_first_alone),
        cmocka_unit_test(test_demo_sigint_in_timed_phase),
        cmocka_unit_test(test_pslite_one_machine),
        cmocka_unit_test(test_pslite_two_machines),
        cmocka_unit_test(test_pslite_one_host_two_spellings),
        cmocka_unit_test(test_pslite_interface),
        cmocka_unit_test(test_pslite_errors),
        cmocka_unit_test(test_pslite_node_not_connected_to_itself),
        cmocka_unit_test(test_pslite_root_uri),
        cmocka_unit_test(test_pslite_scheduler_twice),
        cmocka_unit_test(test_pslite_worker_refused_early),
        cmocka_unit_test(test_dgl_two_machines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
