/* The whole store as separate processes on loopback: 2 machines x 2 servers,
 * 4 workers, via `rkv demo`. The workers run the built-in scenario (sum, sgd,
 * i64 sum, owned and contested assigns over range, hash and explicit books;
 * random id sets with duplicates, co-located and remote rows) and the oracle
 * checks every pulled value, read-your-writes included; the demo exits 0 only
 * if all of them matched and every process, servers included, exited 0. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

static int run(const char *args, char *out, size_t out_len)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s %s 2>&1", RKV_BIN, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, out_len - 1, p);
    out[n] = 0;
    int st = pclose(p);
    printf("%s", out);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_demo_2x2_4_workers(void **state)
{
    (void)state;
    static char out[1 << 16];
    int rc = run("demo --machines 2 --servers-per-machine 2 --num-workers 4 --rows 3000 "
                 "--value-bytes 16384 --rounds 2 --timeout-ms 20000",
                 out, sizeof(out));
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "verdict: PASS"));
    assert_non_null(strstr(out, "| hot-assign |")); /* the oracle's table was printed */
    assert_null(strstr(out, "| 0 | 0 |"));          /* the timed phase checked values */
}

static void test_demo_uneven(void **state)
{
    (void)state;
    static char out[1 << 16];
    /* 3 machines, 1 server each, 5 workers: machines without co-located
     * workers and rows that do not divide evenly. */
    int rc = run("demo --machines 3 --servers-per-machine 1 --num-workers 5 --rows 1001 "
                 "--value-bytes 4096 --rounds 1",
                 out, sizeof(out));
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "verdict: PASS"));
}

static void test_cli_errors(void **state)
{
    (void)state;
    static char out[1 << 14];
    assert_int_equal(run("demo --bogus 1", out, sizeof(out)), 2);
    assert_non_null(strstr(out, "unknown flag '--bogus'"));
    assert_int_equal(run("worker --num-workers two", out, sizeof(out)), 2);
    assert_non_null(strstr(out, "num-workers: expected a non-negative integer, got \"two\""));
    assert_int_equal(run("config --dump --rx-depth 9", out, sizeof(out)), 0);
    assert_non_null(strstr(out, "BYTEPS_RDMA_RX_DEPTH"));
    assert_non_null(strstr(out, "flag"));
    FILE *f = fopen("bad_cluster.txt", "w");
    assert_non_null(f);
    fprintf(f, "# two machines\n127.0.0.1 30000 2\n127.0.0.1 port 2\n");
    fclose(f);
    assert_int_equal(run("server --cluster bad_cluster.txt", out, sizeof(out)), 2);
    assert_non_null(strstr(out, "bad_cluster.txt:3: base_port: expected 1..65535, got \"port\""));
    assert_int_equal(run("nonsense", out, sizeof(out)), 2);
    assert_int_equal(run("--help", out, sizeof(out)), 0);
}

/* DGL's ip_config.txt with uneven machines drives the same run. */
static void test_demo_cluster_file(void **state)
{
    (void)state;
    static char out[1 << 16];
    /* In /tmp, not the working directory: run from the repository's root the
     * test would overwrite files there. */
    char path[] = "/tmp/rkv-ip_config.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    unsigned base = 24000 + (unsigned)(getpid() % 160) * 3; /* this binary's range */
    fprintf(f, "# host base_port servers\n127.0.0.1 %u 2\n127.0.0.1 %u   # default count\n", base,
            base + 2);
    fclose(f);
    char args[512];
    snprintf(args, sizeof(args),
             "demo --cluster %s --servers-per-machine 1 --num-workers 3 --rows 700 "
             "--value-bytes 8192 --rounds 1",
             path);
    int rc = run(args, out, sizeof(out));
    unlink(path);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "2 machines, 3 servers, 3 workers"));
    assert_non_null(strstr(out, "verdict: PASS"));
}

/* Roles and sizes from ps-lite's environment variables, via `rkv node`. */
static void test_env_launch(void **state)
{
    (void)state;
    char cmd[512];
    unsigned base = 24500 + (unsigned)(getpid() % 160) * 3;
    snprintf(cmd, sizeof(cmd), "sh %s/launch_env.sh %s %u", TEST_DIR, RKV_BIN, base);
    int st = system(cmd);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* rkv doctor on whatever host runs the tests: a verdict line, exit 0 (a verbs
 * run can work) or 2 (it cannot, and every problem comes with its fix); a
 * server port taken by another program is named as a problem. */
static void test_doctor(void **state)
{
    (void)state;
    static char out[1 << 14];
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t alen = sizeof(a);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(fd, 1), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    char args[128];
    snprintf(args, sizeof(args), "doctor --base-port %u", ntohs(a.sin_port));
    int rc = run(args, out, sizeof(out));
    close(fd);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "verdict: "));
    assert_non_null(strstr(out, "  FIX   "));
    char port[16];
    snprintf(port, sizeof(port), "%u", ntohs(a.sin_port));
    assert_non_null(strstr(strstr(out, "this run's settings"), port));
    rc = run("doctor", out, sizeof(out));
    assert_true(rc == 0 || rc == 2);
    assert_non_null(strstr(out, rc == 0 ? "verdict: a verbs run can work" : "  FIX   "));
    assert_int_equal(run("doctor --no-such-setting 1", out, sizeof(out)), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cli_errors),  cmocka_unit_test(test_demo_2x2_4_workers),
        cmocka_unit_test(test_demo_uneven), cmocka_unit_test(test_demo_cluster_file),
        cmocka_unit_test(test_env_launch),  cmocka_unit_test(test_doctor),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
