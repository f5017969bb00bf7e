/* rkv node --scenario under a launcher: the rank from Open MPI / Slurm / PMI
 * variables decides the role; for real with Debian's Open MPI when present. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness/tests/rkv_run.h"

static unsigned test_port(void)
{
    return 28000 + (unsigned)(getpid() % 300) * 10; /* this binary's range */
}

static int count(const char *needle)
{
    int n = 0;
    for (const char *s = out; (s = strstr(s, needle)) != NULL; s++)
        n++;
    return n;
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
}

/* Slurm's variables, set by hand: the same code path a real srun takes. */
static void test_slurm_variables(void **state)
{
    (void)state;
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "for r in 0 1 2 3 4 5 6 7; do SLURM_PROCID=$r SLURM_NTASKS=8 RKV_BASE_PORT=%u "
             "RKV_LOG_LEVEL=2 %s node --scenario %s/quickstart.yaml 2>&1 & done; "
             "rc=0; for j in $(jobs -p); do wait $j || rc=1; done; exit $rc",
             test_port(), RKV_BIN, SCEN_DIR);
    assert_int_equal(sh(cmd), 0);
    assert_int_equal(count("PHASE w="), 12); /* 4 workers x 3 phases */
    assert_int_equal(count("errors=0 "), 12);
    /* Nobody was told where servers 1..3 are: they announced it to server 0. */
    assert_non_null(strstr(out, "(4 of 4 known)"));
    snprintf(cmd, sizeof(cmd),
             "SLURM_PROCID=0 SLURM_NTASKS=5 %s node --scenario %s/quickstart.yaml 2>&1", RKV_BIN,
             SCEN_DIR);
    assert_int_equal(sh(cmd), 2);
    assert_non_null(strstr(out, "started 5 processes; the scenario needs 8"));
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
    assert_int_equal(count("errors=0 "), 12);
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
    assert_int_equal(count("RESULT worker="), 2);
    assert_int_equal(count(" errors=0 "), 2 + 2 * 5); /* RESULT and PHASE lines */
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
    assert_int_equal(count("put this node on machine 1 of 2 (127.0.0.2)"), 2);
    assert_int_equal(count("RESULT worker="), 4);
    assert_int_equal(count(" errors=0 "), 4 + 4 * 5);
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
    assert_int_equal(pslite_launch("RKV_CONNECT_RETRY_MS=300 RKV_TIMEOUT_MS=300 "
                                   "DMLC_INTERFACE=no-such-if0",
                                   1, 1, prefix),
                     1);
    assert_non_null(strstr(out, "rkv server: interface: no-such-if0 has no IPv4 address (env "
                                "DMLC_INTERFACE)"));
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
    snprintf(cmd, sizeof(cmd),
             "export DGL_IP_CONFIG=%s DGL_NUM_SERVER=2 DGL_NUM_CLIENT=4 RKV_ROWS=300 "
             "RKV_ROUNDS=1 RKV_VALUE_BYTES=4096 RKV_CONNECT_RETRY_MS=10000 "
             "RKV_TIMEOUT_MS=10000; pids=''; "
             "for k in 0 1 2 3; do DGL_ROLE=server DGL_SERVER_ID=$k timeout 60 %s node 2>&1 & "
             "pids=\"$pids $!\"; done; "
             "for k in 0 1 2 3; do DGL_ROLE=client %s node 2>&1 & pids=\"$pids $!\"; done; "
             "rc=0; for p in $pids; do wait $p || rc=1; done; exit $rc",
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
    assert_int_equal(count("RESULT worker="), 4);
    assert_int_equal(count(" errors=0 "), 4 + 4 * 5);
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
    assert_int_equal(count("rkv worker: scheduler: a worker registered from 127.0.0.3"), 2);
    const char *quick = "DMLC_PS_ROOT_URI=127.0.0.1 DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=1 "
                        "RKV_CONNECT_RETRY_MS=300 RKV_TIMEOUT_MS=300";
    /* No scheduler. */
    snprintf(cmd, sizeof(cmd), "%s DMLC_PS_ROOT_PORT=%u DMLC_ROLE=server %s node 2>&1", quick,
             test_port() + 5, RKV_BIN);
    assert_int_equal(sh(cmd), 3);
    assert_non_null(strstr(out, "no scheduler at 127.0.0.1:"));
    assert_non_null(strstr(out, "launch one with DMLC_ROLE=scheduler"));
    /* A node whose DMLC_NUM_SERVER differs from the scheduler's. */
    snprintf(cmd, sizeof(cmd),
             "export %s DMLC_PS_ROOT_PORT=%u; DMLC_ROLE=scheduler %s node 2>&1 & "
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
    snprintf(cmd, sizeof(cmd), "DMLC_ROLE=scheduler DGL_IP_CONFIG=/some/ip_config.txt %s node 2>&1",
             RKV_BIN);
    assert_int_equal(sh(cmd), 0);
    assert_non_null(strstr(out, "rkv scheduler: not needed: the cluster file /some/ip_config.txt "
                                "(env DGL_IP_CONFIG) gives every node its address and id"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dry_run),
        cmocka_unit_test(test_slurm_variables),
        cmocka_unit_test(test_real_mpirun),
        cmocka_unit_test(test_pslite_one_machine),
        cmocka_unit_test(test_pslite_two_machines),
        cmocka_unit_test(test_pslite_interface),
        cmocka_unit_test(test_pslite_errors),
        cmocka_unit_test(test_dgl_two_machines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
