/* The mistakes users make on the command line, each answered with exit 2 (or
 * 3 for a store that cannot start) and a message that names what was wrong:
 * cluster files (file:line and what was expected), flags and env vars,
 * settings that make no cluster, and the usage of every command. The
 * parsers run in this process; the commands through the rkv binary. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cli/cli.h"
#include "harness/tests/rkv_run.h"
#include "harness/tests/tmp_scenario.h"

static char path[64];

static void write_cluster(const char *text)
{
    snprintf(path, sizeof(path), "/tmp/rkv-cli-%d.txt", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Parses `text` as a cluster file; expects an error containing `want`
 * (after "PATH", so the file is always named). */
static void cluster_fails(const char *text, const char *want)
{
    write_cluster(text);
    struct rkv_machine *m = NULL;
    uint32_t n = 0;
    char err[512] = "", full[256];
    if (rkv_cmd_cluster_parse(path, 1, &m, &n, err, sizeof(err)) != -1)
        fail_msg("%.60s: parsed, expected \"%s\"", text, want);
    assert_null(m);
    snprintf(full, sizeof(full), "%s%s", path, want);
    if (!strstr(err, full))
        fail_msg("expected \"%s\", got \"%s\"", full, err);
    unlink(path);
}

static void test_cluster_file_errors(void **state)
{
    (void)state;
    cluster_fails("10.0.0.1 x\n", ":1: base_port: expected 1..65535, got \"x\"");
    cluster_fails("10.0.0.1 65535 2\n", ":1: 2 servers from port 65535 run past port 65535");
    char line[200];
    snprintf(line, sizeof(line), "%064d 9000\n", 7); /* a 64-character host */
    cluster_fails(line, ":1: host name longer than 63 characters");
    cluster_fails("10.0.0.1 9000 0\n", ":1: servers: expected 1..256, got \"0\"");
    cluster_fails("10.0.0.1 9000 257\n", ":1: servers: expected 1..256, got \"257\"");
    cluster_fails("10.0.0.1 9000 2x\n", ":1: servers: expected 1..256, got \"2x\"");
    cluster_fails("10.0.0.1 9000 2 extra # comment\n",
                  ":1: unexpected \"extra\" after the server count");
    cluster_fails("10.0.0.1 9000 2 3\n", ":1: unexpected \"3\" after the server count");
    cluster_fails("10.0.0.1 0\n", ":1: base_port: expected 1..65535, got \"0\"");
    /* Read as a flag's number is: strtoul took a sign and wrapped, and these
     * were port 31800 and one server. */
    cluster_fails("127.0.0.1 +31800 1\n", ":1: base_port: expected 1..65535, got \"+31800\"");
    /* DGL's int() refuses hex; it was taken as port 28672 */
    cluster_fails("127.0.0.1 0x7000 1\n",
                  ":1: base_port: expected 1..65535 in decimal, got \"0x7000\"");
    cluster_fails("127.0.0.1 29500 0X2\n", ":1: servers: expected 1..");
    cluster_fails("127.0.0.1 -18446744073709519816 1\n",
                  ":1: base_port: expected 1..65535, got \"-18446744073709519816\"");
    cluster_fails("127.0.0.1 31800 -18446744073709551615\n",
                  ":1: servers: expected 1..256, got \"-18446744073709551615\"");
    cluster_fails("127.0.0.1 31800 -1\n", ":1: servers: expected 1..256, got \"-1\"");
    cluster_fails("127.0.0.1 31800 18446744073709551617\n",
                  ":1: servers: expected 1..256, got \"18446744073709551617\"");
    /* An unprintable byte is shown, not sent to the terminal as itself. */
    cluster_fails("127.0.0.1 31800 1\x01\n", ":1: servers: expected 1..256, got \"1\\x01\"");
    cluster_fails("127.0.0.1 31800\xc2\xa0 1\n",
                  ":1: base_port: expected 1..65535, got \"31800\\xc2\\xa0\"");
    cluster_fails("# nothing\n\n   \n", ": no machines (expected 'host [base_port [servers]]'");
    { /* a directory read as empty: "no machines" */
        struct rkv_machine *m = NULL;
        uint32_t n = 0;
        char err[512] = "";
        assert_int_equal(rkv_cmd_cluster_parse("/tmp", 1, &m, &n, err, sizeof(err)), -1);
        assert_non_null(strstr(err, "/tmp: is a directory, not a cluster file"));
    }
    /* Taken as host names, these failed when a server listened, with "is
     * the port in use?". */
    cluster_fails("10.0.0.1:9000\n",
                  ":1: host \"10.0.0.1:9000\": write the port after a space (\"10.0.0.1 9000\")");
    cluster_fails("h1 9000\n10.0.0.2\xc2\xa0 9000\n",
                  ":2: host \"10.0.0.2\xc2\xa0\": byte 0xc2 at 9");
    /* The cap is the wire format's (rkv.h, RKV_MAX_MACHINES), not a table's. */
    static char big[(RKV_MAX_MACHINES + 1) * 16];
    size_t bl = 0;
    for (uint32_t i = 0; i <= RKV_MAX_MACHINES; i++)
        bl += (size_t)snprintf(big + bl, sizeof(big) - bl, "h%u 9000\n", i);
    cluster_fails(big, ":65537: more than 65536 machines");
    static char longline[2000];
    memset(longline, 'a', sizeof(longline) - 2);
    longline[sizeof(longline) - 2] = '\n';
    cluster_fails(longline, ":1: line longer than");
    /* A NUL byte is named as one (it was "line longer than 510 bytes"). */
    write_cluster("");
    FILE *nf = fopen(path, "w");
    assert_non_null(nf);
    assert_int_equal(fwrite("h1 9000\nh\0 9\n", 1, 14, nf), 14);
    fclose(nf);
    struct rkv_machine *nm = NULL;
    uint32_t nn = 0;
    char nerr[512] = "";
    assert_int_equal(rkv_cmd_cluster_parse(path, 1, &nm, &nn, nerr, sizeof(nerr)), -1);
    if (!strstr(nerr, ":2: a NUL byte at line 2"))
        fail_msg("expected \":2: a NUL byte at line 2\", got \"%s\"", nerr);
    unlink(path);
    /* the longest line there is still parses, at the end of a file too */
    static char maxline[512];
    memset(maxline, ' ', 510);
    memcpy(maxline, "h1 9000", 7);
    write_cluster(maxline);
    assert_int_equal(rkv_cmd_cluster_parse(path, 1, &nm, &nn, nerr, sizeof(nerr)), 0);
    assert_int_equal(nn, 1);
    free(nm);
    maxline[510] = ' ';
    cluster_fails(maxline, ":1: line longer than 510 bytes");
    /* A file that is not there. */
    struct rkv_machine *m = NULL;
    uint32_t n = 0;
    char err[512];
    assert_int_equal(rkv_cmd_cluster_parse("/nonexistent/ip.txt", 1, &m, &n, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "/nonexistent/ip.txt: cannot open: No such file"));
}

static void test_cluster_file_forms(void **state)
{
    (void)state;
    /* Indentation, tabs, CRLF line ends, comments and the default count. */
    write_cluster("# host port servers\r\n  10.0.0.1\t9000 3\r\n\n10.0.0.2 9100   # default\r\n");
    struct rkv_machine *m = NULL;
    uint32_t n = 0;
    char err[256];
    assert_int_equal(rkv_cmd_cluster_parse(path, 2, &m, &n, err, sizeof(err)), 0);
    unlink(path);
    assert_int_equal(n, 2);
    assert_string_equal(m[0].host, "10.0.0.1");
    assert_int_equal(m[0].base_port, 9000);
    assert_int_equal(m[0].servers, 3);
    assert_string_equal(m[1].host, "10.0.0.2");
    assert_int_equal(m[1].base_port, 9100);
    assert_int_equal(m[1].servers, 2);
    free(m);
    /* Any white space separates fields, as it is skipped before the host: a
     * \v or \f at the end was 'servers: expected 1..256, got "1"'. */
    write_cluster("10.0.0.1 9000 1\v\n10.0.0.2\f9100\v2 \f\r\n");
    assert_int_equal(rkv_cmd_cluster_parse(path, 2, &m, &n, err, sizeof(err)), 0);
    unlink(path);
    assert_int_equal(n, 2);
    assert_int_equal(m[0].servers, 1);
    assert_string_equal(m[1].host, "10.0.0.2");
    assert_int_equal(m[1].base_port, 9100);
    assert_int_equal(m[1].servers, 2);
    free(m);
    /* A UTF-8 byte order mark (saved by some editors) starts no host name;
     * an IPv6 address is one, colons and all. */
    write_cluster("\xef\xbb\xbf"
                  "10.0.0.1 9000\n::1 9100\n");
    assert_int_equal(rkv_cmd_cluster_parse(path, 2, &m, &n, err, sizeof(err)), 0);
    unlink(path);
    assert_int_equal(n, 2);
    assert_string_equal(m[0].host, "10.0.0.1");
    assert_string_equal(m[1].host, "::1");
    free(m);
    /* In brackets too, as URLs write it (the NIC resolves it without
     * them); but a port goes after a space there as well. */
    write_cluster("[::1] 9100\n");
    assert_int_equal(rkv_cmd_cluster_parse(path, 2, &m, &n, err, sizeof(err)), 0);
    assert_string_equal(m[0].host, "[::1]");
    free(m);
    write_cluster("[::1]:9100\n");
    assert_int_equal(rkv_cmd_cluster_parse(path, 2, &m, &n, err, sizeof(err)), -1);
    unlink(path);
    assert_non_null(strstr(err, "write the port after a space (\"[::1] 9100\")"));
}

/* DGL's ip_config.txt as DGL writes it today: one IP per line, the port
 * optional (DGL's default 30050), servers from DGL_NUM_SERVER. */
static void test_cluster_file_dgl_forms(void **state)
{
    (void)state;
    write_cluster("# DGL ip_config.txt\n10.0.0.1\n\n10.0.0.2 31000\n  10.0.0.3   # third\n"
                  "10.0.0.4 32000 4\n");
    struct rkv_machine *m = NULL;
    uint32_t n = 0;
    char err[256];
    assert_int_equal(rkv_cmd_cluster_parse(path, 2, &m, &n, err, sizeof(err)), 0);
    unlink(path);
    assert_int_equal(n, 4);
    assert_string_equal(m[0].host, "10.0.0.1");
    assert_int_equal(m[0].base_port, 30050);
    assert_int_equal(m[0].servers, 2);
    assert_int_equal(m[1].base_port, 31000);
    assert_string_equal(m[2].host, "10.0.0.3");
    assert_int_equal(m[2].base_port, 30050);
    assert_int_equal(m[3].base_port, 32000);
    assert_int_equal(m[3].servers, 4);
    free(m);
    /* Through the settings, as DGL's launcher sets them. */
    write_cluster("127.0.0.1\n127.0.0.2\n");
    setenv("DGL_IP_CONFIG", path, 1);
    setenv("DGL_NUM_SERVER", "3", 1);
    setenv("DGL_NUM_CLIENT", "4", 1);
    struct cmd_settings s;
    struct rkv_config cfg;
    assert_int_equal(rkv_cmd_settings_load(&s, 0, NULL, err, sizeof(err)), 0);
    unsetenv("DGL_IP_CONFIG");
    unsetenv("DGL_NUM_SERVER");
    unsetenv("DGL_NUM_CLIENT");
    assert_int_equal(rkv_cmd_build_config(&s, &cfg, err, sizeof(err)), 0);
    unlink(path);
    assert_int_equal(cfg.n_machines, 2);
    assert_int_equal(cfg.machines[1].base_port, 30050);
    assert_int_equal(cfg.machines[1].servers, 3);
    assert_int_equal(cfg.n_workers, 4);
    free(cfg.machines);
}

/* A DGL client finds its machine as DGL does: the first line naming an
 * address of this host (192.0.2.0/24 is reserved for documentation: never
 * an address of a test machine). */
static void test_local_machine(void **state)
{
    (void)state;
    struct rkv_machine m[3] = {
        {"192.0.2.1", 9000, 1}, {"127.0.0.1", 9000, 1}, {"localhost", 9100, 1}};
    struct rkv_config cfg = {.n_machines = 3, .machines = m};
    uint32_t id = 99;
    assert_int_equal(rkv_cmd_local_machine(&cfg, &id), 0);
    assert_int_equal(id, 1);
    cfg.n_machines = 1;
    assert_int_equal(rkv_cmd_local_machine(&cfg, &id), -1);
    assert_int_equal(id, 1); /* untouched */
}

/* 1 when this host has IPv6's loopback (a container may not). */
static int have_ipv6_loopback(void)
{
    struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int fd = socket(AF_INET6, SOCK_DGRAM, 0);
    int ok = fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* An IPv6 cluster file: the client's machine is found by its IPv6
 * addresses too, written bare or in brackets (it was looked for among
 * IPv4 addresses only, so every DGL client took machine 0). 2001:db8::/32
 * is reserved for documentation. */
static void test_local_machine_ipv6(void **state)
{
    (void)state;
    if (!have_ipv6_loopback())
        skip();
    struct rkv_machine m[4] = {
        {"192.0.2.1", 9000, 1}, {"2001:db8::1", 9000, 1}, {"[::1]", 9100, 1}, {"::1", 9200, 1}};
    struct rkv_config cfg = {.n_machines = 4, .machines = m};
    uint32_t id = 99;
    assert_int_equal(rkv_cmd_local_machine(&cfg, &id), 0);
    assert_int_equal(id, 2);
    m[2] = (struct rkv_machine){"2001:db8::2", 9100, 1};
    assert_int_equal(rkv_cmd_local_machine(&cfg, &id), 0);
    assert_int_equal(id, 3);
    m[3] = (struct rkv_machine){"::ffff:127.0.0.1", 9200, 1}; /* IPv4 written as IPv6 */
    id = 99;
    assert_int_equal(rkv_cmd_local_machine(&cfg, &id), 0);
    assert_int_equal(id, 3);
    cfg.n_machines = 3;
    id = 99;
    assert_int_equal(rkv_cmd_local_machine(&cfg, &id), -1);
    assert_int_equal(id, 99);
}

/* A machine listed twice is refused with both line numbers (it passed, and
 * its second server failed later with a misleading error). */
static void test_cluster_file_duplicates(void **state)
{
    (void)state;
    cluster_fails("10.0.0.1 9000 2\n10.0.0.2 9000 2\n# again\n10.0.0.1 9000 2\n",
                  ":4: 10.0.0.1 ports 9000..9001 overlap line 1's (10.0.0.1 ports 9000..9001)");
    cluster_fails("10.0.0.1\n10.0.0.1\n", ":2: 10.0.0.1 ports 30050..30050 overlap line 1's");
    cluster_fails("127.0.0.1 9000 3\n127.0.0.1 9002 1\n",
                  ":2: 127.0.0.1 ports 9002..9002 overlap line 1's (127.0.0.1 ports 9000..9002)");
    /* One host written two ways: the same address, a name in another case.
     * Compared as written, each pair passed, and the second server failed
     * at listen ("is the port in use?"). */
    cluster_fails("::1 9000 1\n[::1] 9000 1\n",
                  ":2: [::1] ports 9000..9000 overlap line 1's (::1 ports 9000..9000)");
    cluster_fails("0:0:0:0:0:0:0:1 9000 2\n::1 9001\n",
                  ":2: ::1 ports 9001..9001 overlap line 1's");
    cluster_fails("127.0.0.1 9000\n::ffff:127.0.0.1 9000\n",
                  ":2: ::ffff:127.0.0.1 ports 9000..9000 overlap line 1's");
    cluster_fails("node1 9000\nNODE1 9000\n", ":2: NODE1 ports 9000..9000 overlap line 1's");
    /* One host, ports apart: two machines, as tests on one host use. */
    write_cluster("127.0.0.1 9000 2\n127.0.0.1 9002 2\n");
    struct rkv_machine *m = NULL;
    uint32_t n = 0;
    char err[256];
    assert_int_equal(rkv_cmd_cluster_parse(path, 1, &m, &n, err, sizeof(err)), 0);
    unlink(path);
    assert_int_equal(n, 2);
    free(m);
    /* Other hosts, whatever their spelling shares: no overlap. */
    write_cluster("::1 9000\n::2 9000\n127.0.0.1 9000\n127.0.0.2 9000\nnode1 9000\nnode10 9000\n"
                  "[::3] 9000\n");
    assert_int_equal(rkv_cmd_cluster_parse(path, 1, &m, &n, err, sizeof(err)), 0);
    unlink(path);
    assert_int_equal(n, 7);
    free(m);
}

/* ---- settings ---- */

static int load(struct cmd_settings *s, char *err, size_t err_len, int argc, ...)
{
    static char *argv[32];
    va_list ap;
    va_start(ap, argc);
    for (int i = 0; i < argc; i++)
        argv[i] = va_arg(ap, char *);
    va_end(ap);
    return rkv_cmd_settings_load(s, argc, argv, err, err_len);
}

static void test_flags_and_env(void **state)
{
    (void)state;
    struct cmd_settings s;
    char err[256];
    assert_int_equal(load(&s, err, sizeof(err), 1, "server"), -1);
    assert_string_equal(err, "unexpected argument 'server' (see --help)");
    assert_int_equal(load(&s, err, sizeof(err), 1, "--rows"), -1);
    assert_string_equal(err, "flag '--rows' needs a value");
    assert_int_equal(load(&s, err, sizeof(err), 1, "--row=5"), -1);
    assert_string_equal(err, "unknown flag '--row=5' (see --help)");
    /* A flag is no value: "--durable-dir --seed" made a directory "--seed". */
    assert_int_equal(load(&s, err, sizeof(err), 2, "--durable-dir", "--seed"), -1);
    assert_string_equal(err, "flag '--durable-dir' needs a value, got the flag '--seed' (a value "
                             "that is a flag's name goes as --durable-dir=VALUE)");
    assert_int_equal(load(&s, err, sizeof(err), 3, "--shm-prefix", "--rows=5", "x"), -1);
    assert_non_null(strstr(err, "got the flag '--rows=5'"));
    assert_int_equal(load(&s, err, sizeof(err), 2, "--durable-dir", "--not-a-flag"), 0);
    assert_string_equal(s.val[CMD_DURABLE_DIR], "--not-a-flag");
    assert_int_equal(load(&s, err, sizeof(err), 1, "--durable-dir=--seed"), 0);
    assert_string_equal(s.val[CMD_DURABLE_DIR], "--seed");
    /* --name=value and --name value; a flag beats the env var, the env var
     * (or an alias of it) beats the default, and each says where it came from. */
    assert_int_equal(setenv("DMLC_NUM_WORKER", "6", 1), 0);
    assert_int_equal(setenv("RKV_ROUNDS", "9", 1), 0);
    assert_int_equal(load(&s, err, sizeof(err), 3, "--rows=5", "--rounds", "2"), 0);
    unsetenv("DMLC_NUM_WORKER");
    unsetenv("RKV_ROUNDS");
    assert_string_equal(s.val[CMD_ROWS], "5");
    assert_string_equal(s.src[CMD_ROWS], "flag");
    assert_string_equal(s.val[CMD_ROUNDS], "2");
    assert_string_equal(s.val[CMD_NUM_WORKERS], "6");
    assert_string_equal(s.src[CMD_NUM_WORKERS], "env DMLC_NUM_WORKER");
    assert_string_equal(s.src[CMD_SEED], "default");
    uint64_t v;
    assert_int_equal(load(&s, err, sizeof(err), 2, "--seed", "-3"), 0);
    assert_int_equal(rkv_cmd_get_u64(&s, CMD_SEED, &v, err, sizeof(err)), -1);
    assert_string_equal(err, "seed: expected a non-negative integer, got \"-3\" (flag)");
    assert_int_equal(load(&s, err, sizeof(err), 2, "--seed", "0x10"), 0);
    assert_int_equal(rkv_cmd_get_u64(&s, CMD_SEED, &v, err, sizeof(err)), 0);
    assert_int_equal(v, 16);
}

/* rkv_cmd_build_config on these flags must fail with `want` in its message. */
static void config_fails(const char *want, int argc, ...)
{
    static char *argv[32];
    va_list ap;
    va_start(ap, argc);
    for (int i = 0; i < argc; i++)
        argv[i] = va_arg(ap, char *);
    va_end(ap);
    struct cmd_settings s;
    struct rkv_config cfg;
    char err[512] = "";
    assert_int_equal(rkv_cmd_settings_load(&s, argc, argv, err, sizeof(err)), 0);
    assert_int_equal(rkv_cmd_build_config(&s, &cfg, err, sizeof(err)), -1);
    assert_null(cfg.machines);
    if (!strstr(err, want))
        fail_msg("%s %s: expected \"%s\", got \"%s\"", argc > 0 ? argv[0] : "(env)",
                 argc > 1 ? argv[1] : "", want, err);
}

static void test_settings_that_make_no_cluster(void **state)
{
    (void)state;
    /* Each names the setting, its value and where the value came from. */
    config_fails("machines 0 (flag): expected 1..65536", 2, "--machines", "0");
    config_fails("machines 65537 (flag): expected 1..65536", 2, "--machines", "65537");
    config_fails("servers-per-machine 300 (flag): expected 1..256 servers per machine", 2,
                 "--servers-per-machine", "300");
    config_fails("base-port 65535 (flag): 1 machine of 2 servers needs ports 65535..65536, past "
                 "65535",
                 4, "--base-port", "65535", "--servers-per-machine", "2");
    config_fails("base-port 65000 (flag): 3 machines of 256 servers need ports 65000..65767", 6,
                 "--base-port", "65000", "--machines", "3", "--servers-per-machine", "256");
    config_fails("base-port 0 (flag): expected 1..65535", 2, "--base-port", "0");
    config_fails("num-servers 0 (flag): expected 1..256", 2, "--num-servers", "0");
    setenv("RKV_BASE_PORT", "70000", 1);
    config_fails("base-port 70000 (env RKV_BASE_PORT): expected 1..65535", 0);
    unsetenv("RKV_BASE_PORT");
    setenv("DMLC_PS_ROOT_PORT", "5000000000", 1);
    config_fails("base-port: 5000000000 is too large (env DMLC_PS_ROOT_PORT)", 0);
    unsetenv("DMLC_PS_ROOT_PORT");
    config_fails("num-servers: expected a non-negative integer, got \"two\"", 2, "--num-servers",
                 "two");
    config_fails("servers-per-machine: 5000000000 is too large", 2, "--servers-per-machine",
                 "5000000000");
    config_fails("machines: expected a non-negative integer", 2, "--machines", "");
    config_fails("config: need at least one worker", 2, "--num-workers", "0");
    config_fails("config: machine id 3, but only 2 machines", 4, "--machines", "2", "--machine-id",
                 "3");
    config_fails("need rx_depth >= 4", 2, "--rx-depth", "2");
    /* Absurd sizes are refused naming the setting and its limit, before any
     * allocation (they failed later as "out of memory"). */
    config_fails("num-workers: 1000000000 is above the limit 65536 (servers keep a record per "
                 "worker; flag)",
                 2, "--num-workers", "1000000000");
    config_fails("rx-depth: 65537 is above the limit 65536", 2, "--rx-depth", "65537");
    config_fails("slots: 1000000 is above the limit 65536", 2, "--slots", "1000000");
    config_fails("ctrl-buf-bytes: 1073741824 is above the limit 67108864", 2, "--ctrl-buf-bytes",
                 "1073741824");
    config_fails("rx-depth x ctrl-buf-bytes: 65536 x 65536 bytes of receive buffers per "
                 "connection is above the limit 1024 MiB",
                 4, "--rx-depth", "65536", "--ctrl-buf-bytes", "65536");
    setenv("RKV_RX_DEPTH", "1000000000", 1);
    config_fails("rx-depth: 1000000000 is above the limit 65536 (each connection posts this many "
                 "receive buffers; env RKV_RX_DEPTH)",
                 0);
    unsetenv("RKV_RX_DEPTH");
    config_fails("ctrl_buf_bytes >= 256", 2, "--ctrl-buf-bytes", "100");
    config_fails("push_slots >= 2", 2, "--slots", "1");
    config_fails("max_slot_bytes >= ctrl_buf_bytes", 2, "--max-slot-bytes", "1000");
    config_fails("config: timeout_ms must be > 0", 2, "--timeout-ms", "0");
    /* 1 was taken, and every run failed: connections idled out at once. */
    config_fails("idle-timeout-ms: 1 (flag) is below the minimum 1000 ms (0: off): a client sends "
                 "a keepalive",
                 2, "--idle-timeout-ms", "1");
    setenv("RKV_IDLE_TIMEOUT_MS", "999", 1);
    config_fails("idle-timeout-ms: 999 (env RKV_IDLE_TIMEOUT_MS) is below the minimum 1000 ms", 0);
    unsetenv("RKV_IDLE_TIMEOUT_MS");
    config_fails("log-level: expected a non-negative integer, got \"loud\"", 2, "--log-level",
                 "loud");
    config_fails("log-level: expected 0..3 (0 error, 1 warn, 2 info, 3 debug), got 99 (flag)", 2,
                 "--log-level", "99");
    setenv("PS_VERBOSE", "9", 1); /* ps-lite's name for it */
    config_fails("log-level: expected 0..3 (0 error, 1 warn, 2 info, 3 debug), got 9 (env "
                 "PS_VERBOSE)",
                 0);
    unsetenv("PS_VERBOSE");
    config_fails("retry-ms: expected", 2, "--retry-ms", "soon");
    config_fails("shm-prefix: \"jobs/a\" (flag): a '/' cannot be in a shared-memory name", 2,
                 "--shm-prefix", "jobs/a");
    config_fails("shm-prefix: \"//a\" (flag): a '/' cannot be in a shared-memory name", 2,
                 "--shm-prefix", "//a");
    config_fails("busy-poll: expected 0 or 1, got 2", 2, "--busy-poll", "2");
    static char long_dir[600];
    memset(long_dir, 'd', sizeof(long_dir) - 1);
    config_fails("durable-dir: longer than", 2, "--durable-dir", long_dir);
    config_fails("backend: unknown \"a-backend-name-nobody-ever-built\"", 2, "--backend",
                 "a-backend-name-nobody-ever-built");
    write_cluster("10.0.0.1 9000\n10.0.0.2 9000 x\n");
    config_fails(":2: servers: expected 1..256, got \"x\"", 2, "--cluster", path);
    unlink(path);
}

static void test_settings_that_make_a_cluster(void **state)
{
    (void)state;
    static char *argv[] = {"--machines",    "3",        "--num-servers", "6",
                           "--discover",    "1",        "--shm-prefix",  "mine",
                           "--host",        "10.1.1.1", "--base-port",   "7000",
                           "--num-workers", "4"};
    struct cmd_settings s;
    struct rkv_config cfg;
    char err[256];
    assert_int_equal(rkv_cmd_settings_load(&s, 14, argv, err, sizeof(err)), 0);
    assert_int_equal(rkv_cmd_build_config(&s, &cfg, err, sizeof(err)), 0);
    assert_int_equal(cfg.n_machines, 3);
    assert_string_equal(cfg.machines[0].host, "10.1.1.1");
    assert_string_equal(cfg.machines[1].host, ""); /* learned from server 0 */
    assert_int_equal(cfg.machines[2].base_port, 7004);
    assert_int_equal(cfg.machines[2].servers, 2);
    assert_string_equal(cfg.shm_prefix, "mine");
    assert_int_equal(cfg.n_workers, 4);
    assert_int_equal(cfg.busy_poll, 0);
    free(cfg.machines);
    /* A leading '/' is a POSIX shared-memory name's own, taken as the C
     * API (rkv_cfg_check) takes it. */
    static char *argv_slash[] = {"--shm-prefix", "/mine"};
    assert_int_equal(rkv_cmd_settings_load(&s, 2, argv_slash, err, sizeof(err)), 0);
    assert_int_equal(rkv_cmd_build_config(&s, &cfg, err, sizeof(err)), 0);
    assert_string_equal(cfg.shm_prefix, "/mine");
    free(cfg.machines);
    /* Busy polling from its env var, a flag winning over it. */
    static char *argv1[] = {"--busy-poll", "0"};
    setenv("RKV_BUSY_POLL", "1", 1);
    assert_int_equal(rkv_cmd_settings_load(&s, 0, argv1, err, sizeof(err)), 0);
    assert_int_equal(rkv_cmd_build_config(&s, &cfg, err, sizeof(err)), 0);
    assert_int_equal(cfg.busy_poll, 1);
    free(cfg.machines);
    assert_int_equal(rkv_cmd_settings_load(&s, 2, argv1, err, sizeof(err)), 0);
    assert_int_equal(rkv_cmd_build_config(&s, &cfg, err, sizeof(err)), 0);
    assert_int_equal(cfg.busy_poll, 0);
    free(cfg.machines);
    unsetenv("RKV_BUSY_POLL");
    /* From a cluster file, servers-per-machine is the default count. */
    write_cluster("10.0.0.1 9000\n10.0.0.2 9500 1\n");
    static char *argv2[] = {"--cluster", path, "--servers-per-machine", "3"};
    assert_int_equal(rkv_cmd_settings_load(&s, 4, argv2, err, sizeof(err)), 0);
    assert_int_equal(rkv_cmd_build_config(&s, &cfg, err, sizeof(err)), 0);
    unlink(path);
    assert_int_equal(cfg.n_machines, 2);
    assert_int_equal(cfg.machines[0].servers, 3);
    assert_int_equal(cfg.machines[1].servers, 1);
    assert_string_equal(cfg.shm_prefix, "rkv-9000");
    free(cfg.machines);
}

/* num-servers (DMLC_NUM_SERVER) counts every machine's servers, as its help
 * says: without a cluster file it was taken as each machine's, and
 * `rkv server --machines 2 --num-servers 4 --server-id 7` started server 7
 * of 8. */
static void test_num_servers_counts_every_machine(void **state)
{
    (void)state;
    struct cmd_settings s;
    struct rkv_config cfg;
    char err[512];
    uint32_t m = 0, local = 0;
    assert_int_equal(load(&s, err, sizeof(err), 8, "--machines", "2", "--num-servers", "4",
                          "--server-id", "7", "--base-port", "31600"),
                     0);
    if (rkv_cmd_build_config(&s, &cfg, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(cfg.n_machines, 2);
    assert_int_equal(cfg.machines[0].servers, 2);
    assert_int_equal(cfg.machines[1].servers, 2);
    assert_int_equal(cfg.machines[1].base_port, 31602);
    assert_int_equal(rkv_cmd_server_locate(&s, &cfg, &m, &local, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "server-id 7 (flag): expected 0..3, the ids of the cluster's 4 "
                                "servers on 2 machines"));
    s.val[CMD_SERVER_ID] = "3";
    assert_int_equal(rkv_cmd_server_locate(&s, &cfg, &m, &local, err, sizeof(err)), 0);
    assert_int_equal(m, 1);
    assert_int_equal(local, 1);
    free(cfg.machines);
    /* A count machines do not divide, named with both sources. */
    config_fails("num-servers 3 (flag) over machines 2 (flag): not a whole number of servers per "
                 "machine",
                 4, "--machines", "2", "--num-servers", "3");
    setenv("DMLC_NUM_SERVER", "5", 1);
    setenv("RKV_MACHINES", "2", 1);
    config_fails("num-servers 5 (env DMLC_NUM_SERVER) over machines 2 (env RKV_MACHINES)", 0);
    unsetenv("RKV_MACHINES");
    unsetenv("DMLC_NUM_SERVER");
    config_fails("num-servers 1024 (flag) over machines 2 (flag) is 512 per machine: expected "
                 "1..256 servers per machine",
                 4, "--machines", "2", "--num-servers", "1024");
    /* servers-per-machine given too (not its default): they must agree. */
    config_fails("num-servers 4 (flag) over machines 2 (flag) is 2 servers per machine, but "
                 "servers-per-machine is 3 (flag): make them agree",
                 6, "--machines", "2", "--num-servers", "4", "--servers-per-machine", "3");
    setenv("DGL_NUM_SERVER", "1", 1);
    config_fails("but servers-per-machine is 1 (env DGL_NUM_SERVER)", 4, "--machines", "2",
                 "--num-servers", "4");
    unsetenv("DGL_NUM_SERVER");
    assert_int_equal(load(&s, err, sizeof(err), 6, "--machines", "2", "--num-servers", "4",
                          "--servers-per-machine", "2"),
                     0);
    assert_int_equal(rkv_cmd_build_config(&s, &cfg, err, sizeof(err)), 0);
    assert_int_equal(cfg.machines[1].servers, 2);
    free(cfg.machines);
    /* One machine: num-servers is its count, as before. */
    assert_int_equal(
        load(&s, err, sizeof(err), 4, "--num-servers", "3", "--servers-per-machine", "5"), 0);
    assert_int_equal(rkv_cmd_build_config(&s, &cfg, err, sizeof(err)), 0);
    assert_int_equal(cfg.n_machines, 1);
    assert_int_equal(cfg.machines[0].servers, 3);
    free(cfg.machines);
}

/* ---- the commands, through the binary ---- */

static void expect_run(const char *env, const char *args, int code, const char *want)
{
    int rc = run_rkv(env, args);
    if (rc != code || (want && !strstr(out, want)))
        fail_msg("rkv %s: exit %d (expected %d), output:\n%s\n(expected \"%s\")", args, rc, code,
                 out, want ? want : "");
}

static void test_usage(void **state)
{
    (void)state;
    expect_run("", "server --help", 0, "usage: rkv server [--server-id N");
    expect_run("", "server --help", 0, "--rx-depth"); /* the settings follow */
    /* It said "once a snapshot holding it is synced": a push is acked once
     * its machine's write-ahead log is synced (the snapshot checkpoints). */
    expect_run("", "server --help", 0,
               "durable mode: a push is acknowledged once it is synced in its machine's "
               "write-ahead log here");
    /* Said as what they are (they were "empty scenario", "unknown flag"). */
    expect_run("", "run /tmp", 2, "rkv run: /tmp: is a directory, not a scenario file");
    /* --trace checked before the run, as --out: a directory was refused
     * only after the run had started and printed its first line. */
    expect_run("", "run " SCEN_DIR "/quickstart.yaml --trace /tmp", 2,
               "rkv run: --trace: cannot write /tmp: Is a directory");
    assert_null(strstr(out, "in the twin"));
    expect_run("", "run " SCEN_DIR "/quickstart.yaml --trace /nonexistent/t.json", 2,
               "rkv run: --trace: cannot write /nonexistent/t.json: No such file or directory");
    expect_run("", "run x.yaml --cfg", 2, "rkv run: --cfg needs a value");
    expect_run("", "run x.yaml --out", 2, "rkv run: --out needs a value");
    expect_run("", "worker -h", 0, "usage: rkv worker [--machine-id M]");
    expect_run("", "node --help", 0, "usage: rkv node [--role server|worker|scheduler]");
    expect_run("", "config", 0, "usage: rkv config --dump");
    expect_run("", "config --list", 2, "usage: rkv config --dump");
    assert_non_null(strstr(out, "rkv config: expected --dump first, got \"--list\""));
    expect_run("", "config --dump --rows", 2, "rkv: flag '--rows' needs a value");
    /* --dump checks the settings as rkv run does (it showed "abc", exit 0) */
    expect_run("", "config --dump", 0, "timeout-ms");
    /* The machines a cluster file makes, ports included: a line without a
     * port takes DGL's 30050, and the dump showed base-port's 29500 alone. */
    char cl[64], dump[128];
    snprintf(cl, sizeof(cl), "/tmp/rkv-cli-dump-%d.txt", (int)getpid());
    FILE *cf = fopen(cl, "w");
    assert_non_null(cf);
    fprintf(cf, "127.0.0.1\n127.0.0.2 31000\n");
    fclose(cf);
    snprintf(dump, sizeof(dump), "config --dump --cluster %s", cl);
    expect_run("", dump, 0, "  machine 0: 127.0.0.1, ports 30050..30050 (1 server)\n");
    assert_non_null(strstr(out, "  machine 1: 127.0.0.2, ports 31000..31000 (1 server)\n"));
    unlink(cl);
    expect_run("RKV_TIMEOUT_MS=abc", "config --dump", 2,
               "rkv config: timeout-ms: expected a non-negative integer, got \"abc\" (env "
               "RKV_TIMEOUT_MS)");
    expect_run("", "config --dump --rows 0", 2, "rkv config: workload needs rows");
    /* ... and as rkv run and rkv server refuse them (all three showed exit 0) */
    expect_run("", "config --dump --backend foo", 2,
               "rkv config: backend: unknown \"foo\" (known: tcp, verbs, sim)");
    expect_run("DGL_SERVER_ID=x", "config --dump", 2,
               "rkv config: server-id: expected a non-negative integer, got \"x\" (env "
               "DGL_SERVER_ID)");
    expect_run("RKV_SERVER_ID=3", "config --dump", 2,
               "rkv config: server-id 3 (env RKV_SERVER_ID)");
    expect_run("RKV_SERVER_ID=0", "config --dump", 0, "server-id");
    expect_run("", "config --dump --backend sim", 0, "backend");
    expect_run("", "", 2, NULL);
    /* A twin-sized file on tcp said "need 1..512 servers and workers", as
     * if the file had none; refused before any process starts. */
    expect_run("", "run " SCEN_DIR "/sim-4096.yaml --backend tcp", 2,
               "rkv run: 1024 servers (1024 machines x 1) and 3072 workers: a run on this host "
               "starts 1..512 of each");
    expect_run("", "demo --num-workers 600", 2, "and 600 workers: a run on this host starts");
    /* A durable directory that is not there: every server said so after
     * the launch and the run ended "exited with status 2 while the workers
     * ran", exit 3; README: every setting is checked once, before. */
    expect_run(
        "", "run " SCEN_DIR "/quickstart.yaml --backend tcp --durable-dir /nonexistent/rkv-dd", 2,
        "rkv run: durable-dir (flag): durable_dir /nonexistent/rkv-dd: No such file or "
        "directory");
    expect_run(
        "RKV_DURABLE_DIR=/dev/null", "demo", 2,
        "rkv demo: durable-dir (env RKV_DURABLE_DIR): durable_dir /dev/null: not a directory");
    /* read as empty: "needs backend, host_cores and bandwidth_gbps" */
    expect_run("", "run " SCEN_DIR "/quickstart.yaml --calibration /tmp", 2,
               "rkv run: /tmp: is a directory, not a calibration file");
    /* payloadless thins rows in the twin only: on tcp each worker built the
     * declared rows' oracle (32 GiB here), which the loader had not counted. */
    char yaml[64], args[128];
    tmp_scenario(yaml, sizeof(yaml), "thin",
                 "cluster: {machines: 2, servers_per_machine: 1, workers_per_machine: 1}\n"
                 "tensors:\n"
                 "  - {name: t, rows: 1048576, shape: [4096]}\n"
                 "workload:\n"
                 "  - {name: p, tensor: t, rounds: 2}\n"
                 "sim: {payloadless: true}\n");
    snprintf(args, sizeof(args), "run %s --backend tcp", yaml);
    expect_run("", args, 2, ":3:6: tensor \"t\": 1048576 rows of 4096 elements need 32 GiB");
    assert_non_null(strstr(out, "(sim.payloadless thins rows in the twin only)"));
    snprintf(args, sizeof(args), "node --scenario %s", yaml);
    expect_run("PMI_RANK=0 PMI_SIZE=4", args, 2, "rkv node: ");
    assert_non_null(strstr(out, "need 32 GiB of oracle state"));
    unlink(yaml);
}

/* The library says its version at run time: the header's, in full. */
static void test_version(void **state)
{
    (void)state;
    char want[64];
    snprintf(want, sizeof(want), "%d.%d.%d", RKV_VERSION_MAJOR, RKV_VERSION_MINOR,
             RKV_VERSION_PATCH);
    assert_string_equal(rkv_version(), want);
    char line[80];
    snprintf(line, sizeof(line), "rkv %s\n", want);
    expect_run("", "--version", 0, NULL);
    assert_string_equal(out, line);
}

static void test_server_and_worker_errors(void **state)
{
    (void)state;
    expect_run("", "server --server-id one", 2, "rkv: server-id: expected a non-negative integer");
    expect_run("", "server --servers-per-machine 2 --server-id 2", 2,
               "rkv: server-id 2 (flag): expected 0..1, the ids of the cluster's 2 "
               "servers on 1 machine\n");
    expect_run("DGL_SERVER_ID=9 ", "server --machines 2", 2,
               "rkv: server-id 9 (env DGL_SERVER_ID): expected 0..1, the ids of the "
               "cluster's 2 servers on 2 machines");
    expect_run("", "server --machines 0", 2, "machines 0 (flag): expected 1..65536");
    expect_run("", "server --backend carrier-pigeon", 2,
               "rkv server: backend 'carrier-pigeon' is not built in");
    expect_run("", "worker --backend carrier-pigeon", 2,
               "rkv worker: backend 'carrier-pigeon' is not built in (this build has: tcp");
    /* The twin's backend is no node's: said so, with what to run instead. */
    expect_run("", "server --backend sim", 2, "backend 'sim' is not built in (this build has: tcp");
    expect_run("", "server --backend sim", 2, "sim is the twin's, which runs a whole scenario");
    expect_run("", "worker --rows 0", 2, "rkv: workload needs rows 1..2^24");
    /* A server of a cluster of several, told none: it started as server 0
     * (an outside tester; DGL_SERVER_ID left empty did the same). A client
     * on a host none of the machines is: it took machine 0 in silence. */
    {
        char two[64], far[64], args[160];
        snprintf(two, sizeof(two), "/tmp/rkv-cli-two-%d.txt", (int)getpid());
        snprintf(far, sizeof(far), "/tmp/rkv-cli-far-%d.txt", (int)getpid());
        FILE *f = fopen(two, "w");
        assert_non_null(f);
        fputs("127.0.0.1 46210 2\n", f);
        fclose(f);
        f = fopen(far, "w");
        assert_non_null(f);
        fputs("192.0.2.9 46210 1\n192.0.2.8 46210 1\n", f); /* TEST-NET-1: no host's */
        fclose(f);
        snprintf(args, sizeof(args), "server --cluster %s", two);
        expect_run("", args, 2, "which server is this? the cluster has 2 servers");
        snprintf(args, sizeof(args), "node --cluster %s --role server", two);
        expect_run("DGL_SERVER_ID=", args, 2, "which server is this?");
        snprintf(args, sizeof(args), "worker --cluster %s", far);
        expect_run("", args, 2,
                   "no machine's host (192.0.2.9, 192.0.2.8) is an address of this host (or "
                   "resolves to one)");
        unlink(two);
        unlink(far);
    }
    expect_run("", "worker --num-workers 1000000000", 2,
               "rkv: num-workers: 1000000000 is above the limit 65536");
    expect_run("RKV_RX_DEPTH=1000000000", "server", 2,
               "rkv: rx-depth: 1000000000 is above the limit 65536");
    expect_run("", "server --num-workers 1000000000", 2,
               "rkv: num-workers: 1000000000 is above the limit 65536");
    expect_run("", "worker --value-bytes 6", 2, "value-bytes a multiple of 4");
    expect_run("", "worker --rounds 1001", 2, "rounds 1..1000");
    expect_run("", "worker --rounds many", 2, "rkv: rounds: expected a non-negative integer");
    expect_run("", "worker --scenario " SCEN_DIR "/bad/bad-dtype.yaml", 2,
               "bad-dtype.yaml:4:32: dtype: expected one of f32");
    expect_run("", "worker --scenario " SCEN_DIR "/bad/mixed-without-barrier.yaml", 2,
               "without a barrier between them");
    /* A file for another cluster: its oracle expected pushes from workers
     * that do not exist and said a value was wrong (exit 1). */
    /* --print takes one seed: the message described ranges. */
    expect_run("", "swarm --print -1", 2,
               "rkv swarm: --print: expected one seed, a whole number in 0..18446744073709551615, "
               "got \"-1\"");
    expect_run("", "swarm --seeds x", 2, "rkv swarm: --seeds: expected A..B, A.. or A");
    expect_run("", "swarm --print 5..9", 2, "rkv swarm: --print: expected one seed");
    expect_run("", "worker --num-workers 1 --scenario " SCEN_DIR "/quickstart.yaml", 2,
               "quickstart.yaml describes 2 machine(s) of 2 server(s) and 4 worker(s), but this "
               "cluster has 1 machine(s), 1 server(s) on machine 0, and 1 worker(s)");
    /* The file's workload won over these without a word: the worker pushed
     * the file's rows whatever --rows said. Under every way to start one. */
    const char *shape = "--machines 2 --servers-per-machine 2 --num-workers 4 --connect-retry-ms "
                        "200 --scenario " SCEN_DIR "/quickstart.yaml";
    char args[512];
    snprintf(args, sizeof(args), "worker %s --rows 5", shape);
    expect_run("", args, 2,
               "rkv worker: --rows: with --scenario the file sets the workload (its tensors' rows");
    snprintf(args, sizeof(args), "node --role worker %s --rounds=3", shape);
    expect_run("", args, 2, "rkv worker: --rounds: with --scenario the file sets the workload");
    /* ps-lite's launch: refused before it registers with the scheduler. */
    snprintf(args, sizeof(args), "node %s --value-bytes 64", shape);
    expect_run("timeout 20 env DMLC_ROLE=worker DMLC_PS_ROOT_PORT=1", args, 2,
               "rkv worker: --value-bytes: with --scenario the file sets the workload");
    /* A file for another cluster, or one the oracle refuses, was found only
     * once the scheduler had formed the job: the worker exited 2 and its
     * servers waited for it forever. Port 1: no scheduler; a worker that
     * got past the check waits for one until `timeout` ends it (124). */
    const char *psl = "timeout 20 env DMLC_ROLE=worker DMLC_PS_ROOT_URI=127.0.0.1 "
                      "DMLC_PS_ROOT_PORT=1 DMLC_NUM_SERVER=2 DMLC_NUM_WORKER=2";
    expect_run(psl, "node --scenario " SCEN_DIR "/quickstart.yaml", 2,
               "quickstart.yaml describes 4 server(s) and 4 worker(s), but num-servers is 2 (env "
               "DMLC_NUM_SERVER) and num-workers 2 (env DMLC_NUM_WORKER): launch the cluster the "
               "file describes (before registering with the scheduler)");
    expect_run(psl, "node --scenario " SCEN_DIR "/bad/mixed-without-barrier.yaml", 2,
               "set barrier_after on the phase before (before registering with the scheduler)");
    /* From the environment they are ambient, as for every command: not refused. */
    snprintf(args, sizeof(args), "worker %s", shape);
    expect_run("RKV_ROWS=5", args, 3, "rkv worker: cannot connect to server 0");
}

/* A port another program listens on: the server names it and exits 3; a
 * worker with no server to join gives up after connect-retry-ms. */
/* Two machines of 1 server and 1 worker, one phase "p" (then `more`: more
 * phases, faults), on tcp ports from base. */
static void write_taken_yaml(const char *path, const char *more, unsigned base)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f,
            "cluster: {machines: 2, servers_per_machine: 1, workers_per_machine: 1}\n"
            "tensors:\n  - {name: t, rows: 100}\n"
            "workload:\n  - {name: p, tensor: t, push: 0.5, rounds: 10}\n"
            "%stcp: {base_port: %u}\n",
            more, base);
    fclose(f);
}

static void test_server_port_taken(void **state)
{
    (void)state;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(fd, 1), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    char args[256], want[128];
    unsigned port = ntohs(a.sin_port);
    snprintf(args, sizeof(args), "server --base-port %u --shm-prefix rkv-cli-%d", port,
             (int)getpid());
    snprintf(want, sizeof(want), "cannot listen on 127.0.0.1:%u", port);
    expect_run("", args, 3, want);
    assert_non_null(strstr(out, "is the port in use?"));
    close(fd);
    /* The machine's segment outlives a server that could not start, as it
     * outlives one that crashed (a restart finds it); not ours to keep. */
    char shm[128];
    snprintf(shm, sizeof(shm), "/rkv-cli-%d-m0-meta", (int)getpid());
    shm_unlink(shm);
    snprintf(args, sizeof(args),
             "worker --base-port %u --connect-retry-ms 200 --timeout-ms 500 --shm-prefix "
             "rkv-cli-%d",
             port, (int)getpid());
    expect_run("", args, 3, "rkv worker: ");
    /* Under `rkv run`, a server that cannot start stops the run at once,
     * saying which: its workers waited out connect-retry-ms and the request
     * timeout (60 s), then a FAIL without a reason. */
    fd = socket(AF_INET, SOCK_STREAM, 0);
    a = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    alen = sizeof(a);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(fd, 1), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    port = ntohs(a.sin_port);
    char yaml[64];
    snprintf(yaml, sizeof(yaml), "/tmp/rkv-cli-taken-%d.yaml", (int)getpid());
    write_taken_yaml(yaml, "", port - 1);
    snprintf(args, sizeof(args), "run %s --backend tcp", yaml);
    expect_run("", args, 3, "exited with status 3 while the workers ran; stopping them");
    /* The same with a NIC fault in the file: servers were not watched in
     * any run with faults, as if a delay killed servers on purpose (the
     * workers waited out their timeouts; an outside tester). */
    write_taken_yaml(yaml, "faults:\n  - {kind: delay, target: w1, fraction: 0.2, delay_ms: 1}\n",
                     port - 1);
    expect_run("", args, 3, "exited with status 3 while the workers ran; stopping them");
    /* And with a crash fault: those runs were not watched at all (a crash
     * kills a server on purpose), the workers waited 35-63 s, and the
     * verdict read "a process failed" without naming the server (an
     * outside tester). */
    write_taken_yaml(yaml,
                     "  - {name: q, tensor: t, push: 0.5, rounds: 10}\n"
                     "faults:\n  - {kind: crash, target: w1, after_phase: p}\n",
                     port - 1);
    expect_run("", args, 3, "exited with status 3 while the workers ran; stopping them");
    if (!strstr(out, "verdict: FAIL (a process failed: server 1 (s1.0) exited with status 3 at "))
        fail_msg("%s", out);
    close(fd);
    unlink(yaml);
}

/* A loopback port nobody listens on (bound, read, closed). */
static unsigned unused_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* A DGL-style client started before its servers (or pointed at a wrong
 * port) said nothing for connect_retry_ms, 30 s by default, where the
 * ps-lite path says what it waits for every 10 s (an outside tester). */
static void test_client_says_what_it_waits_for(void **state)
{
    (void)state;
    unsigned port = unused_port();
    char ip[64], env[512], want[96];
    snprintf(ip, sizeof(ip), "/tmp/rkv-cli-ip-%d.txt", (int)getpid());
    FILE *f = fopen(ip, "w");
    assert_non_null(f);
    fprintf(f, "127.0.0.1 %u 1\n", port);
    fclose(f);
    snprintf(env, sizeof(env),
             "env -u OMPI_COMM_WORLD_RANK -u SLURM_PROCID -u PMI_RANK -u RKV_ROLE -u DMLC_ROLE "
             "DGL_ROLE=client DGL_IP_CONFIG=%s DGL_NUM_CLIENT=1 DGL_NUM_SERVER=1 "
             "RKV_CONNECT_RETRY_MS=10500",
             ip);
    snprintf(want, sizeof(want), "still connecting to 127.0.0.1:%u (connection refused", port);
    expect_run(env, "node", 3, want);
    unlink(ip);
}

static void test_node_errors(void **state)
{
    (void)state;
    const char *no_rank = "env -u OMPI_COMM_WORLD_RANK -u SLURM_PROCID -u PMI_RANK -u RKV_ROLE "
                          "-u DMLC_ROLE -u DGL_ROLE";
    char env[512];
    expect_run(
        no_rank, "node", 2,
        "rkv node: role: expected server, worker (or client) or scheduler, got \"\" (default)");
    expect_run(
        no_rank, "node --role boss", 2,
        "rkv node: role: expected server, worker (or client) or scheduler, got \"boss\" (flag)");
    snprintf(env, sizeof(env), "%s DMLC_ROLE=boss", no_rank);
    expect_run(env, "node", 2, "got \"boss\" (env DMLC_ROLE)");
    snprintf(env, sizeof(env), "%s DMLC_ROLE=joint", no_rank);
    expect_run(env, "node", 2, "BytePS's joint role (a server and a worker in one process) is two");
    /* DGL's launch gives its ip_config.txt: without one, a server on a
     * default cluster at 127.0.0.1:29500 started in silence (an outside
     * tester). */
    snprintf(env, sizeof(env), "%s -u DGL_IP_CONFIG -u RKV_CLUSTER DGL_ROLE=server", no_rank);
    expect_run(env, "node", 2, "rkv node: DGL_ROLE=server without a cluster: DGL's launch gives");
    expect_run(no_rank, "node --scenario " SCEN_DIR "/quickstart.yaml", 2,
               "rkv node: no launcher rank (OMPI_COMM_WORLD_RANK, SLURM_PROCID or PMI_RANK)");
    /* A rank without its size was "no launcher rank (..., PMI_RANK)". */
    snprintf(env, sizeof(env), "%s -u PMI_SIZE PMI_RANK=0", no_rank);
    expect_run(env, "node --scenario " SCEN_DIR "/quickstart.yaml", 2,
               "rkv node: PMI_RANK=0 is set but PMI_SIZE is not: expected a rank and a size");
    snprintf(env, sizeof(env), "%s PMI_RANK=0 PMI_SIZE=8", no_rank);
    expect_run(env, "node --scenario /nonexistent/s.yaml", 2,
               "rkv node: /nonexistent/s.yaml: cannot open");
    expect_run(no_rank, "node --no-such-flag 1", 2, "rkv: unknown flag '--no-such-flag'");
    /* "abc" was rank 0 (every such process server 0); a rank past the
     * size ran as a worker the scenario does not have. */
    snprintf(env, sizeof(env), "%s SLURM_PROCID=abc SLURM_NTASKS=8", no_rank);
    expect_run(env, "node --scenario " SCEN_DIR "/quickstart.yaml", 2,
               "rkv node: SLURM_PROCID=abc, SLURM_NTASKS=8: expected a rank below a size");
    snprintf(env, sizeof(env), "%s PMI_RANK=8 PMI_SIZE=8", no_rank);
    expect_run(env, "node --scenario " SCEN_DIR "/quickstart.yaml", 2,
               "rkv node: PMI_RANK=8, PMI_SIZE=8: expected a rank below a size");
    /* The file's shape won over these without a word (--num-workers 3 ran
     * as the file's 4). */
    snprintf(env, sizeof(env), "%s PMI_RANK=7 PMI_SIZE=8", no_rank);
    expect_run(env, "node --scenario " SCEN_DIR "/quickstart.yaml --num-workers 3", 2,
               "rkv node: --num-workers: with --scenario the file sets the cluster's shape");
    expect_run(env, "node --scenario " SCEN_DIR "/quickstart.yaml --server-id 1", 2,
               "rkv node: --server-id: with --scenario");
}

static void test_bench_verbs_without_a_device(void **state)
{
    (void)state;
    expect_run("RKV_VERBS_DEV=no-such-dev0 RKV_HOST=10.9.9.9", "bench verbs --reps 1", 3,
               "rkv bench verbs: no RDMA port owns 10.9.9.9 on RKV_VERBS_DEV no-such-dev0");
    expect_run("", "bench tcp --reps 2x", 2, "usage: rkv bench");
    expect_run("", "bench tcp --iperf-seconds 0", 2, "usage: rkv bench");
}

/* rkv ls with no store there: it waited the workers' connect-retry-ms (30 s)
 * before saying so; now 2 s unless the setting is given, and it says where
 * it looked and what to check. */
static void test_ls_without_a_store(void **state)
{
    (void)state;
    unsigned port = unused_port();
    char args[128], want[128];
    snprintf(args, sizeof(args), "ls --base-port %u", port);
    snprintf(want, sizeof(want),
             "rkv ls: cannot connect to server 0 at 127.0.0.1:%u within 2000 ms", port);
    expect_run("", args, 3, want);
    assert_non_null(strstr(out, "is the store running?"));
    snprintf(want, sizeof(want), "at 127.0.0.1:%u within 300 ms", port);
    expect_run("RKV_CONNECT_RETRY_MS=300", args, 3, want);
    /* Nothing listened there: the connection was refused, which read "peer
     * disconnected or died", as if one had been made and lost. */
    assert_non_null(strstr(out, "within 300 ms: connection refused (nothing listening"));
    assert_null(strstr(out, "disconnected or died"));
    snprintf(args, sizeof(args), "worker --base-port %u --connect-retry-ms 200", port);
    snprintf(want, sizeof(want),
             "rkv worker: cannot connect to server 0 at 127.0.0.1:%u within 200 ms: connection "
             "refused",
             port);
    expect_run("", args, 3, want);
}

/* A listener on 127.0.0.1 that is not rkv: it sends `say` to every
 * connection and keeps it open. Returns the child's pid; *port_p its port. */
static pid_t other_service(const char *say, unsigned *port_p)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(fd, 16), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    *port_p = ntohs(a.sin_port);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        for (;;) {
            /* Each connection stays open (a service waiting for more)
             * until the test kills this child. */
            int c = accept(fd, NULL, NULL);
            if (c >= 0 && write(c, say, strlen(say)) < 0)
                close(c);
        }
    }
    close(fd);
    return pid;
}

/* A wrong port where another service listens: its answer read "malformed
 * or unexpected wire message", its silence "request timed out", neither
 * pointing at the port. */
static void test_connect_to_another_service(void **state)
{
    (void)state;
    static const char *says[] = {
        "HTTP/1.1 400 Bad Request\r\nContent-Type: text/html\r\nConnection: close\r\n\r\n"
        "<html><body>bad request, and more than one header's worth of it</body></html>\r\n",
        "SSH-2.0-OpenSSH_9.2\r\n"};
    static const char *want[] = {"does not speak rkv's handshake (another service on that port?)",
                                 "no answer to rkv's handshake within timeout_ms"};
    for (int i = 0; i < 2; i++) {
        unsigned port;
        pid_t pid = other_service(says[i], &port);
        char args[160];
        snprintf(args, sizeof(args),
                 "worker --base-port %u --connect-retry-ms 300 --timeout-ms 300", port);
        int rc = run_rkv("", args);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        if (rc != 3 || !strstr(out, want[i]))
            fail_msg("rkv %s: exit %d, output:\n%s\n(expected \"%s\")", args, rc, out, want[i]);
    }
}

/* Scenario integers are read as scenarios/README.md says: decimal with
 * leading zeros, or 0x hex; other notations are refused at their line. */
static void test_scenario_integers(void **state)
{
    (void)state;
    char yaml[64], args[128];
    snprintf(yaml, sizeof(yaml), "/tmp/rkv-cli-ints-%d.yaml", (int)getpid());
    static const struct {
        const char *machines, *want;
        int code;
    } cases[] = {{"0x2", "rkv node --scenario", 0}, /* 2 x 10 servers + 2 workers */
                 {"02", "rkv node --scenario", 0},
                 {"0o2", ":1:21: machines: expected a positive integer, got \"0o2\"", 2},
                 {"+2", ":1:21: machines: expected a positive integer, got \"+2\"", 2},
                 {"2e0", ":1:21: machines: expected a positive integer, got \"2e0\"", 2}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        FILE *f = fopen(yaml, "w");
        assert_non_null(f);
        fprintf(f,
                "cluster: {machines: %s, servers_per_machine: 010, workers_per_machine: 1}\n"
                "tensors:\n"
                "  - {name: t, rows: 0x40}\n"
                "workload:\n"
                "  - {name: p, tensor: t, rounds: 1}\n",
                cases[i].machines);
        fclose(f);
        snprintf(args, sizeof(args), "run %s --launcher mpirun --dry-run", yaml);
        expect_run("", args, cases[i].code, cases[i].want);
        if (cases[i].code == 0)
            assert_non_null(strstr(out, "-np 22 "));
    }
    unlink(yaml);
}

/* rkv calibrate checks what it was given before it measures: a --out in
 * no directory failed after the measuring (a minute of it), --machines 2x
 * was 2, and --machines without --platform-xml was ignored. */
static void test_calibrate_args_before_measuring(void **state)
{
    (void)state;
    expect_run("", "calibrate --quick --out /nonexistent-dir/cal.txt", 2,
               "rkv calibrate: --out \"/nonexistent-dir/cal.txt\": cannot write it: No such file");
    assert_null(strstr(out, "stream")); /* nothing measured */
    expect_run("", "calibrate --quick --out /tmp", 2,
               "--out \"/tmp\": cannot write it: a directory");
    expect_run("", "calibrate --quick --platform-xml /nonexistent-dir/p.xml", 2,
               "--platform-xml \"/nonexistent-dir/p.xml\": cannot write it");
    expect_run("", "calibrate --quick --platform-xml /tmp/p.xml --machines 2x", 2,
               "--machines: expected 1..65536, got \"2x\"");
    expect_run("", "calibrate --quick --machines 4", 2,
               "rkv calibrate: --machines goes with --platform-xml FILE");
    expect_run("", "calibrate --quick --out", 2, "rkv calibrate: --out needs a value");
    assert_int_equal(access("rkv-calibration.txt", F_OK), -1); /* no file left behind */
}

/* rkv run --launcher prints a line that keeps the settings and --out given
 * to it (they were dropped without a word: every rank ran on defaults),
 * checked and quoted for the shell; twin and local options are refused. */
static void test_launcher_line_keeps_settings(void **state)
{
    (void)state;
    expect_run("",
               "run " SCEN_DIR "/quickstart.yaml --launcher mpirun --dry-run --seed 3 "
               "--timeout-ms=5000 --out 'my dir' --host \"it's\"",
               0,
               "rkv node --scenario " SCEN_DIR "/quickstart.yaml --out 'my dir' --seed 3 "
               "--timeout-ms=5000 --host 'it'\\''s'\n");
    expect_run("", "run " SCEN_DIR "/quickstart.yaml --launcher srun --sed 3", 2,
               "rkv run: unknown flag '--sed'");
    expect_run("", "run " SCEN_DIR "/quickstart.yaml --launcher srun --rows 9", 2,
               "rkv run: --rows: with --scenario the file sets the cluster's shape and workload");
    expect_run("", "run " SCEN_DIR "/quickstart.yaml --launcher srun --plot", 2,
               "rkv run: --launcher prints a command line that takes no --plot");
}

/* rkv run --predict checks its flags and settings before it calibrates:
 * "--calibration" last calibrated anew as if it were not there, --bogus was
 * refused after the calibration, --repeat 2x was 2. */
static void test_predict_args_before_calibrating(void **state)
{
    (void)state;
    static const struct {
        const char *args, *want;
    } cases[] = {
        {"--predict --calibration", "rkv run: --calibration needs a value"},
        {"--predict --bogus 1", "rkv run: unknown flag '--bogus'"},
        {"--predict --timeout-ms 0", "rkv run: config: timeout_ms must be > 0"},
        {"--predict --repeat 2x", "rkv run: --repeat: expected 1..15"},
        {"--calibration /nonexistent/cal.txt --host h",
         "rkv run: --host has no meaning in the twin"},
        /* The twin ran the file's workload and cluster whatever these said. */
        {"--calibration /nonexistent/cal.txt --rows 5",
         "rkv run: --rows: the scenario file decides the cluster and workload"},
        {"--predict --num-workers 3",
         "rkv run: --num-workers: the scenario file decides the cluster and workload"},
    };
    char args[256];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(args, sizeof(args), "run " SCEN_DIR "/quickstart.yaml %s", cases[i].args);
        expect_run("", args, 2, cases[i].want);
        assert_null(strstr(out, "calibrating"));
    }
}

/* rkv bench durable: --help is exit 0, a wrong flag is named (the usage
 * came alone), sizes cannot wrap ("--large-mib -1" was 2^64 - 1 MiB), and an
 * --only that names no case is refused (it measured the disk, ran no case
 * and exited 0). */
static void test_bench_durable_args(void **state)
{
    (void)state;
    expect_run("", "bench durable --help", 0, "usage: rkv bench durable");
    expect_run("", "bench durable --bogus", 2, "rkv bench durable: unknown argument \"--bogus\"");
    expect_run("", "bench durable --large-mib -1", 2,
               "rkv bench durable: --large-mib: expected 2..1048575 MiB, got \"-1\"");
    expect_run("", "bench durable --large-mib 99999999999999", 2, "--large-mib: expected");
    expect_run("", "bench durable --prewrite-mib 4x", 2, "--prewrite-mib: expected 0..");
    expect_run("", "bench durable --seconds", 2, "rkv bench durable: --seconds needs a value");
    expect_run("", "bench durable --only typo", 2,
               "rkv bench durable: --only \"typo\": no case's name holds it");
    assert_null(strstr(out, "figure"));
}

/* rkv bench local: "--calls -5" and a count past 2^64 were 2^64 - 1 calls
 * (a run with no end); a wrong flag is named (the usage came alone). */
static void test_bench_local_args(void **state)
{
    (void)state;
    expect_run("timeout 20", "bench local --calls -5", 2,
               "rkv bench local: --calls: expected 1..1000000000, got \"-5\"");
    expect_run("timeout 20", "bench local --calls 99999999999999999999", 2,
               "rkv bench local: --calls: expected 1..1000000000");
    expect_run("", "bench local --bogus", 2, "rkv bench local: unknown argument \"--bogus\"");
    expect_run("", "bench local --reps", 2, "rkv bench local: --reps needs a value");
}

/* rkv run's own valued flags take --flag=VALUE as --out and --cfg did
 * ("--trace=t.json" was "unknown flag"); an empty value is named. */
static void test_run_flags_with_equals(void **state)
{
    (void)state;
    char trace[64], args[256];
    snprintf(trace, sizeof(trace), "/tmp/rkv-cli-trace-%d.json", (int)getpid());
    snprintf(args, sizeof(args), "run " SCEN_DIR "/quickstart.yaml --trace=%s --progress=5", trace);
    expect_run("", args, 0, "verdict: PASS");
    assert_int_equal(access(trace, F_OK), 0);
    unlink(trace);
    expect_run("", "run " SCEN_DIR "/quickstart.yaml --jitter=2", 2,
               "rkv run: --jitter: expected 0..1, got \"2\"");
    expect_run("", "run " SCEN_DIR "/quickstart.yaml --launcher=srun", 0, "srun --ntasks 8");
    expect_run("", "run " SCEN_DIR "/quickstart.yaml --out=", 2, "rkv run: --out needs a value");
}

/* Settings' flags go before the scenario file as well as after it: "rkv
 * run --backend tcp FILE" took "tcp" for the file ("tcp: cannot open"), and
 * "rkv run --calibration C --seed 5 FILE" took "5". */
static void test_run_settings_before_the_file(void **state)
{
    (void)state;
    expect_run("", "run --seed 7 " SCEN_DIR "/quickstart.yaml", 0, "verdict: PASS");
    expect_run("", "run --backend sim --rx-depth=16 " SCEN_DIR "/quickstart.yaml", 0,
               "verdict: PASS");
    expect_run("", "run --timeout-ms --seed 5 " SCEN_DIR "/quickstart.yaml", 2,
               "flag '--timeout-ms' needs a value, got the flag '--seed'");
    expect_run("", "run --calibration /nonexistent/cal.txt --host h " SCEN_DIR "/quickstart.yaml",
               2, "rkv run: --host has no meaning in the twin");
    expect_run("", "run --seed 7", 2, "rkv run: which scenario?");
}

/* A YAML syntax error is said where it is: libfyaml counts lines and
 * columns from 1, and 1 more was added (a duplicate key on 2:1 was 3:2). */
static void test_yaml_syntax_positions(void **state)
{
    (void)state;
    char yaml[64], args[128], want[128];
    static const struct {
        const char *text, *at;
    } cases[] = {{"x: 1\nx: 2\n", ":2:1: YAML syntax: duplicate key"},
                 {"cluster: {machines: 2\ntensors:\n", ":2:8: YAML syntax: missing comma"},
                 {"a: 1\nb: [1, 2\n", ":3:1: YAML syntax: flow sequence without a closing"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        tmp_scenario(yaml, sizeof(yaml), "cli-syntax", cases[i].text);
        snprintf(args, sizeof(args), "run %s", yaml);
        snprintf(want, sizeof(want), "%s%s", yaml, cases[i].at);
        expect_run("", args, 2, want);
    }
    unlink(yaml);
}

/* A calibration file that gives a key twice (a hand edit) is refused at
 * the second line: the last value was taken without a word. */
static void test_calibration_key_twice(void **state)
{
    (void)state;
    char path[64], args[256];
    snprintf(path, sizeof(path), "/tmp/rkv-cli-calib-%d.txt", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("backend = tcp\nhost_cores = 2\nbandwidth_gbps = 5\nbandwidth_gbps = 50\n", f);
    fclose(f);
    snprintf(args, sizeof(args), "run " SCEN_DIR "/quickstart.yaml --calibration %s", path);
    char want[128];
    snprintf(want, sizeof(want), "rkv run: %s:4: bandwidth_gbps is given twice (line 3 too)", path);
    expect_run("", args, 2, want);
    unlink(path);
}

/* Workers that failed (here: none could join within 1 ms of the others)
 * may not have shut the servers down: the launcher waited 30 s for them
 * without a word, as it does not after a fault; now a few seconds, then it
 * stops them and says so. */
static void test_demo_stops_servers_after_failed_workers(void **state)
{
    (void)state;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char args[128];
    snprintf(args, sizeof(args), "demo --timeout-ms 1 --connect-retry-ms 1 --base-port %u",
             41000 + (unsigned)(getpid() % 500) * 2 * 4);
    expect_run("timeout 60", args, 3, "rkv demo: worker process");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    if (s > 20)
        fail_msg("rkv demo took %.1f s to stop after its workers failed:\n%s", s, out);
}

/* A bench's settings are checked before anything starts (an unknown one
 * failed in the first cluster, after the limits were measured); the shape
 * of its clusters is its own (a --num-workers here won over it, under
 * figures named for another shape); busy-poll is read for tcp too (it was
 * for verbs only: --busy-poll 1 measured busy polling in both modes). */
static void test_bench_settings_before_start(void **state)
{
    (void)state;
    expect_run("", "bench shm --reps 1 --unknown-setting 1", 2,
               "rkv bench: unknown flag '--unknown-setting'");
    assert_null(strstr(out, "repetition"));
    expect_run("", "bench shm --reps 1 --num-workers 4", 2,
               "rkv bench: --num-workers: the bench sets it for each cluster it measures");
    expect_run("", "bench tcp --reps 1 --value-bytes 4096", 2, "--value-bytes (--sizes gives");
    expect_run("", "bench tcp --reps 1 --busy-poll 2", 2, "rkv bench: busy-poll: expected 0 or 1");
    assert_null(strstr(out, "repetition"));
    expect_run("", "bench shm --reps 1 --timeout-ms 0", 2, "rkv bench: config: timeout_ms");
    assert_null(strstr(out, "repetition"));
}

/* Regression: rkv demo passes busy-poll on to its workers (it did not, so
 * `rkv bench verbs --busy-poll 1` measured the blocking mode twice); each
 * worker reports the setting it ran with. */
static void test_demo_passes_busy_poll(void **state)
{
    (void)state;
    const char *args = "demo --machines 2 --servers-per-machine 1 --num-workers 1 --rows 64 "
                       "--rounds 1 --value-bytes 4096";
    char buf[256];
    snprintf(buf, sizeof(buf), "%s --busy-poll 1", args);
    expect_run("", buf, 0, "1 of 1 workers busy-polled");
    expect_run("", args, 0, "0 of 1 workers busy-polled");
}

/* rkv demo sizes its cluster as its nodes do: num-servers is every
 * machine's servers together (it started 2 machines x 2, and passed its
 * own servers-per-machine of 2 beside it to every node). */
static void test_demo_num_servers_in_all(void **state)
{
    (void)state;
    expect_run("", "demo --num-servers 2 --num-workers 1 --rows 64 --rounds 1 --value-bytes 4096",
               0, "| 1 | 2 / 2 |");
    expect_run("", "demo --num-servers 3", 2,
               "rkv demo: num-servers 3 (flag) over machines 2 (default): not a whole number");
}

/* ---- rkv run: reports that cannot be written, bounds, and its settings ---- */

static const char tiny[] =
    "cluster: {machines: 2, servers_per_machine: 1, workers_per_machine: 1}\n"
    "tensors:\n"
    "  - {name: t, rows: 64}\n"
    "workload:\n"
    "  - {name: warm, tensor: t, rounds: 2}\n"
    "expect: {min_throughput_gbps: 0.000001, max_p99_us: 1e9}\n";

static void test_run_reports(void **state)
{
    (void)state;
    char yaml[64], dir[64], args[256];
    tmp_scenario(yaml, sizeof(yaml), "cli", tiny);
    snprintf(dir, sizeof(dir), "/tmp/rkv-cli-%d.file", (int)getpid());
    FILE *f = fopen(dir, "w"); /* a file where the report directory should go */
    assert_non_null(f);
    fclose(f);
    /* A report that cannot be written is refused before the run (it was
     * found after it, and the run exited 0). */
    snprintf(args, sizeof(args), "run %s --out %s/report", yaml, dir);
    expect_run("", args, 2, "rkv run: --out ");
    assert_null(strstr(out, "verdict:"));
    snprintf(args, sizeof(args), "run %s --plot --out %s/report", yaml, dir);
    expect_run("", args, 2, "rkv run: --out ");
    /* ...and one that fails after the run still fails the run: its
     * report.json is a directory. */
    char rj[128];
    snprintf(rj, sizeof(rj), "mkdir -p %s.r/report.json", dir);
    assert_int_equal(system(rj), 0);
    snprintf(args, sizeof(args), "run %s --out %s.r", yaml, dir);
    expect_run("", args, 3, "rkv run: cannot write the report into ");
    assert_non_null(strstr(out, "verdict: PASS"));
    assert_non_null(strstr(out, "bound warm: throughput")); /* reported, not asserted */
    assert_non_null(strstr(out, "(reported, not asserted)"));
    snprintf(rj, sizeof(rj), "rm -rf %s.r", dir);
    assert_int_equal(system(rj), 0);
    /* No gnuplot on the PATH: the oracle's verdict and the report stand,
     * the plots asked for are not there, which exits 3 as a report that
     * cannot be written does (it exited 0, saying "plots:" for files that
     * did not exist when the disk was full), saying how to get gnuplot. */
    snprintf(args, sizeof(args), "run %s --plot --out %s.d", yaml, dir);
    expect_run("PATH=/nonexistent", args, 3, "apt-get install gnuplot-nox");
    assert_non_null(strstr(out, "verdict: PASS"));
    char p[128];
    snprintf(p, sizeof(p), "%s.d/report.json", dir);
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    snprintf(args, sizeof(args), "rm -rf %s.d", dir);
    assert_int_equal(system(args), 0);
    /* The twin says where its plots went, as a tcp run does (without --out
     * they landed in the working directory unsaid). */
    if (access("/usr/bin/gnuplot", X_OK) == 0) {
        /* with a trailing slash it said DIR//latency_cdf.png */
        snprintf(args, sizeof(args), "run %s --plot --out %s.p/", yaml, dir);
        char want[256];
        snprintf(want, sizeof(want), "plots: %s.p/latency_cdf.png, %s.p/throughput.png", dir, dir);
        expect_run("", args, 0, want);
        snprintf(args, sizeof(args), "rm -rf %s.p", dir);
        assert_int_equal(system(args), 0);
    }
    snprintf(args, sizeof(args), "run %s --log-level loud", yaml);
    expect_run("", args, 2, "rkv run: log-level: expected a non-negative integer");
    /* A trace the twin could not write failed the run, as on tcp (it exited
     * 0 and printed the trace's name). */
    if (access("/dev/full", W_OK) == 0) {
        snprintf(args, sizeof(args), "run %s --trace /dev/full", yaml);
        expect_run("", args, 3, "rkv run: cannot write the trace /dev/full");
        assert_null(strstr(out, "trace: /dev/full"));
    }
    /* One it cannot open is a usage error with the reason, as on tcp (it
     * exited 3 with "cannot write the trace /tmp"), said before the run. */
    snprintf(args, sizeof(args), "run %s --trace /tmp", yaml);
    expect_run("", args, 2, "rkv run: --trace: cannot write /tmp: Is a directory");
    assert_null(strstr(out, "in the twin")); /* before the run */
    /* A run refused after its --out was made leaves no empty directory
     * behind (it did); one that existed before stays. */
    snprintf(args, sizeof(args), "run %s --out %s.e --jitter 7", yaml, dir);
    expect_run("", args, 2, "rkv run: --jitter: expected 0..1");
    snprintf(p, sizeof(p), "%s.e", dir);
    assert_int_equal(stat(p, &st), -1);
    assert_int_equal(mkdir(p, 0755), 0);
    expect_run("", args, 2, "rkv run: --jitter: expected 0..1");
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(rmdir(p), 0);
    /* Ignored before: --jitter on tcp, --dry-run without a launcher (it
     * ran the whole scenario). */
    snprintf(args, sizeof(args), "run %s --backend tcp --jitter 0.5", yaml);
    expect_run("", args, 2, "--jitter are twin options");
    snprintf(args, sizeof(args), "run %s --dry-run", yaml);
    expect_run("", args, 2, "--dry-run prints a cluster launcher's command line");
    unlink(dir);
    unlink(yaml);
}

/* A cluster larger than the open-file limit allows: refused before anything
 * starts, naming the limit (under `ulimit -n 40`, 2 servers and 40 workers
 * left the launcher without pipes: the workers it could not start "exited
 * with status 0" and the others waited a hello timeout for them). A low
 * soft limit under a high hard one is raised instead. */
static void test_run_open_file_limit(void **state)
{
    (void)state;
    char yaml[64], args[160];
    tmp_scenario(yaml, sizeof(yaml), "cli-nofile",
                 "cluster: {machines: 2, servers_per_machine: 1, workers_per_machine: 20}\n"
                 "tensors:\n"
                 "  - {name: t, rows: 64}\n"
                 "workload:\n"
                 "  - {name: warm, tensor: t, rounds: 1}\n");
    snprintf(args, sizeof(args), "run %s --backend tcp", yaml);
    expect_run("timeout 60 prlimit --nofile=40:40", args, 2,
               "2 servers and 40 workers need about 106 open files in a process");
    assert_non_null(strstr(out, "the open-file limit is 40 (hard limit 40): raise it"));
    assert_null(strstr(out, "exited with status"));
    tmp_scenario(yaml, sizeof(yaml), "cli-nofile",
                 "cluster: {machines: 2, servers_per_machine: 1, workers_per_machine: 1}\n"
                 "tensors:\n"
                 "  - {name: t, rows: 64}\n"
                 "workload:\n"
                 "  - {name: warm, tensor: t, rounds: 1}\n");
    expect_run("timeout 60 prlimit --nofile=40:4096", args, 0, "verdict: PASS");
    unlink(yaml);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cluster_file_errors),
        cmocka_unit_test(test_cluster_file_forms),
        cmocka_unit_test(test_cluster_file_dgl_forms),
        cmocka_unit_test(test_cluster_file_duplicates),
        cmocka_unit_test(test_local_machine),
        cmocka_unit_test(test_local_machine_ipv6),
        cmocka_unit_test(test_flags_and_env),
        cmocka_unit_test(test_settings_that_make_no_cluster),
        cmocka_unit_test(test_settings_that_make_a_cluster),
        cmocka_unit_test(test_num_servers_counts_every_machine),
        cmocka_unit_test(test_usage),
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_server_and_worker_errors),
        cmocka_unit_test(test_server_port_taken),
        cmocka_unit_test(test_node_errors),
        cmocka_unit_test(test_client_says_what_it_waits_for),
        cmocka_unit_test(test_bench_verbs_without_a_device),
        cmocka_unit_test(test_scenario_integers),
        cmocka_unit_test(test_calibrate_args_before_measuring),
        cmocka_unit_test(test_launcher_line_keeps_settings),
        cmocka_unit_test(test_predict_args_before_calibrating),
        cmocka_unit_test(test_bench_durable_args),
        cmocka_unit_test(test_bench_local_args),
        cmocka_unit_test(test_run_flags_with_equals),
        cmocka_unit_test(test_run_settings_before_the_file),
        cmocka_unit_test(test_yaml_syntax_positions),
        cmocka_unit_test(test_calibration_key_twice),
        cmocka_unit_test(test_demo_stops_servers_after_failed_workers),
        cmocka_unit_test(test_ls_without_a_store),
        cmocka_unit_test(test_connect_to_another_service),
        cmocka_unit_test(test_bench_settings_before_start),
        cmocka_unit_test(test_demo_passes_busy_poll),
        cmocka_unit_test(test_demo_num_servers_in_all),
        cmocka_unit_test(test_run_reports),
        cmocka_unit_test(test_run_open_file_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
