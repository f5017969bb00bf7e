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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dry_run),
        cmocka_unit_test(test_slurm_variables),
        cmocka_unit_test(test_real_mpirun),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
