/* Configuration by name (rkv_settings_*): the CLI's keys, '_' for '-',
 * flags over env, the cluster file with its line numbers, server-id to
 * (machine, local index), and every error a -RKV_ECONFIG with a message. */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "rkv.h"

static struct rkv_settings *make(void)
{
    struct rkv_settings *set = NULL;
    char err[256];
    assert_int_equal(rkv_settings_create(&set, err, sizeof(err)), 0);
    assert_non_null(set);
    return set;
}

/* --secret-file reaches the config; the process environment, which a
 * library must leave to its host program, is left alone. */
static void test_secret_file_in_config(void **state)
{
    (void)state;
    char err[256], path[64];
    snprintf(path, sizeof(path), "/tmp/rkv-settings-secret-%d", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("s3cret\n", f);
    fclose(f);
    unsetenv("RKV_SECRET_FILE");
    struct rkv_settings *set = make();
    assert_int_equal(rkv_settings_set(set, "secret-file", path, err, sizeof(err)), 0);
    struct rkv_config cfg;
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), 0);
    assert_string_equal(cfg.secret_file, path);
    assert_null(getenv("RKV_SECRET_FILE"));
    rkv_config_release(&cfg);
    unlink(path);
    /* An unreadable file is said at build time. */
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, "secret-file"));
    rkv_settings_destroy(set);
}

static void test_keys_and_env(void **state)
{
    (void)state;
    char err[256];
    struct rkv_settings *set = make();
    struct rkv_config cfg;
    setenv("DMLC_NUM_WORKER", "5", 1);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), 0);
    assert_int_equal(cfg.n_workers, 5); /* the ps-lite name, as the CLI reads it */
    rkv_config_release(&cfg);
    assert_null(cfg.machines);
    assert_int_equal(rkv_settings_set(set, "num_workers", "7", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_set(set, "rx-depth", "32", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_set(set, "num-workers", "8", err, sizeof(err)), 0); /* again */
    uint32_t local = 99;
    assert_int_equal(rkv_settings_build(set, &cfg, &local, err, sizeof(err)), 0);
    assert_int_equal(cfg.n_workers, 8);
    assert_int_equal(cfg.rx_depth, 32);
    rkv_config_release(&cfg);
    /* Every value checked at build: an unknown backend passed and was
     * refused only at create (an outside tester). */
    assert_int_equal(rkv_settings_set(set, "backend", "xyz", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, "backend 'xyz' is not built in (this build has: "));
    assert_int_equal(rkv_settings_set(set, "backend", "tcp", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, &local, err, sizeof(err)), 0);
    assert_int_equal(local, 0);
    rkv_config_release(&cfg);
    unsetenv("DMLC_NUM_WORKER");
    rkv_settings_destroy(set);
}

static void test_bad_keys_and_values(void **state)
{
    (void)state;
    char err[256] = "";
    struct rkv_settings *set = make();
    assert_int_equal(rkv_settings_set(set, "rx-deep", "1", err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, "rx-deep"));
    assert_int_equal(rkv_settings_set(set, "", "1", err, sizeof(err)), -RKV_ECONFIG);
    assert_int_equal(rkv_settings_set(set, "rx-depth=2", "1", err, sizeof(err)), -RKV_ECONFIG);
    assert_int_equal(rkv_settings_set(set, "rx-depth", NULL, err, sizeof(err)), -RKV_EINVAL);
    /* A number's form is refused where it is set: "two" workers passed and
     * was refused only at create (an outside tester, from Python). */
    assert_int_equal(rkv_settings_set(set, "num_workers", "two", err, sizeof(err)), -RKV_ECONFIG);
    assert_string_equal(err, "num-workers: expected a non-negative integer, got \"two\"");
    assert_int_equal(rkv_settings_set(set, "timeout-ms", "soon", err, sizeof(err)), -RKV_ECONFIG);
    assert_int_equal(rkv_settings_set(set, "rx-depth", "-1", err, sizeof(err)), -RKV_ECONFIG);
    assert_int_equal(rkv_settings_set(set, "num-workers", "", err, sizeof(err)), -RKV_ECONFIG);
    /* Empty is unset where that is the default; text settings take any. */
    assert_int_equal(rkv_settings_set(set, "server-id", "", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_set(set, "verbs-mtu", "", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_set(set, "backend", "two", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_set(set, "backend", "tcp", err, sizeof(err)), 0);
    /* A range is build's to check. */
    assert_int_equal(rkv_settings_set(set, "timeout-ms", "99999999999", err, sizeof(err)), 0);
    struct rkv_config cfg = {.n_workers = 12345};
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, "timeout-ms"));
    assert_int_equal(cfg.n_workers, 12345); /* untouched on failure */
    rkv_settings_destroy(set);
    rkv_settings_destroy(NULL);
    /* Regression: a NULL out-pointer crashed create (SIGSEGV). */
    assert_int_equal(rkv_settings_create(NULL, err, sizeof(err)), -RKV_EINVAL);
    assert_string_equal(err, "settings: set_p is NULL");
}

/* Numbers are decimal even with leading zeros (strtoull's base 0 read
 * "010" workers as 8 and "064" as 52, and refused "029500"), or 0x hex;
 * signs, spaces and other bases are refused. */
static void test_numbers_are_decimal(void **state)
{
    (void)state;
    char err[256];
    struct rkv_settings *set = make();
    struct rkv_config cfg;
    assert_int_equal(rkv_settings_set(set, "num-workers", "010", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_set(set, "rx-depth", "064", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_set(set, "base-port", "029500", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_set(set, "timeout-ms", "0x2710", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), 0);
    assert_int_equal(cfg.n_workers, 10);
    assert_int_equal(cfg.rx_depth, 64);
    assert_int_equal(cfg.machines[0].base_port, 29500);
    assert_int_equal(cfg.timeout_ms, 10000);
    rkv_config_release(&cfg);
    static const char *const bad[] = {"+5",    " 5",  "5 ",   "-0",   "0x",
                                      "0b101", "1e3", "0o10", "12abc"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        /* Refused where it is set (before, by build). */
        if (rkv_settings_set(set, "timeout-ms", bad[i], err, sizeof(err)) != -RKV_ECONFIG)
            fail_msg("timeout-ms \"%s\" was taken", bad[i]);
        assert_non_null(strstr(err, "timeout-ms: expected a non-negative integer"));
    }
    rkv_settings_destroy(set);
}

/* rkv_strerror of any int, INT_MIN too (its negation overflowed and read
 * before the table: SIGSEGV). */
static void test_strerror_any_int(void **state)
{
    (void)state;
    assert_string_equal(rkv_strerror(INT_MIN), "unknown error");
    assert_string_equal(rkv_strerror(INT_MAX), "unknown error");
    assert_string_equal(rkv_strerror(-RKV_ETIMEDOUT), rkv_strerror(RKV_ETIMEDOUT));
    assert_string_equal(rkv_strerror(0), rkv_strerror(RKV_OK));
}

/* host "A,B": the machines alternate over the addresses (the two-host
 * runs of ci/verbs-suite); an empty or overlong element is refused by name. */
static void test_host_list(void **state)
{
    (void)state;
    char err[256], longer[RKV_HOST_MAX + 16];
    struct rkv_settings *set = make();
    struct rkv_config cfg;
    unsetenv("RKV_HOST");
    unsetenv("DMLC_PS_ROOT_URI");
    assert_int_equal(rkv_settings_set(set, "machines", "3", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_set(set, "host", "10.78.0.1,10.78.0.2", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), 0);
    assert_int_equal(cfg.n_machines, 3);
    assert_string_equal(cfg.machines[0].host, "10.78.0.1");
    assert_string_equal(cfg.machines[1].host, "10.78.0.2");
    assert_string_equal(cfg.machines[2].host, "10.78.0.1");
    assert_int_equal(cfg.machines[2].base_port, cfg.machines[0].base_port + 2);
    rkv_config_release(&cfg);
    /* one address is every machine's, as before lists */
    assert_int_equal(rkv_settings_set(set, "host", "10.77.0.1", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), 0);
    assert_string_equal(cfg.machines[2].host, "10.77.0.1");
    rkv_config_release(&cfg);
    assert_int_equal(rkv_settings_set(set, "host", "10.78.0.1,,10.78.0.2", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, "empty address"));
    memset(longer, 'a', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = 0;
    memcpy(longer, "h,", 2); /* the second machine's is too long */
    assert_int_equal(rkv_settings_set(set, "host", longer, err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, "longer than"));
    /* An address with a port (DMLC_PS_ROOT_URI=host:port) or a stray byte
     * is refused here, not met as "cannot listen ... is the port in use?"
     * when a server starts; IPv6 addresses keep their colons. */
    assert_int_equal(rkv_settings_set(set, "host", "10.77.0.1,10.78.0.2:9000", err, sizeof(err)),
                     0);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, "\"10.78.0.2:9000\" has a port"));
    assert_int_equal(rkv_settings_set(set, "host", "10.77.0.1 ", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, "byte 0x20 at 10"));
    assert_int_equal(rkv_settings_set(set, "host", "::1,fe80::1", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), 0);
    assert_string_equal(cfg.machines[1].host, "fe80::1");
    rkv_config_release(&cfg);
    /* In brackets as well, but with no port after them either. */
    assert_int_equal(rkv_settings_set(set, "host", "[::1]", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), 0);
    rkv_config_release(&cfg);
    assert_int_equal(rkv_settings_set(set, "host", "10.77.0.1,[::1]:9000", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, "\"[::1]:9000\" has a port"));
    /* A shm prefix past the config's 31 bytes is refused, not cut (two
     * clusters differing past the cut shared their segments). */
    assert_int_equal(rkv_settings_set(set, "host", "10.77.0.1", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_set(set, "shm-prefix", "jobA-very-long-prefix-for-cluster-0001",
                                      err, sizeof(err)),
                     0);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, "shm-prefix: longer than 31 bytes"));
    assert_int_equal(rkv_settings_set(set, "shm-prefix", "jobA-0001", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), 0);
    assert_string_equal(cfg.shm_prefix, "jobA-0001");
    rkv_config_release(&cfg);
    rkv_settings_destroy(set);
}

/* The verbs NIC's knobs as settings: flags and their RKV_VERBS_* env vars
 * reach rkv_config.verbs; unset leaves its bit clear (the NIC's own); a value out of
 * range is refused naming the setting, its range and where it came from. */
static void test_verbs_settings(void **state)
{
    (void)state;
    char err[256];
    static const char *const envs[] = {"RKV_VERBS_DEV",       "RKV_VERBS_TOS",
                                       "RKV_VERBS_SL",        "RKV_VERBS_MTU",
                                       "RKV_VERBS_GID_INDEX", "RKV_VERBS_SRQ_DEPTH"};
    for (size_t i = 0; i < sizeof(envs) / sizeof(envs[0]); i++)
        unsetenv(envs[i]);
    struct rkv_settings *set = make();
    struct rkv_config cfg;
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), 0);
    assert_string_equal(cfg.verbs.dev, "");
    assert_int_equal(cfg.verbs.set, 0); /* every number the NIC's own */
    rkv_config_release(&cfg);
    assert_int_equal(rkv_settings_set(set, "verbs-dev", "mlx5_1:1", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_set(set, "verbs_tos", "106", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_set(set, "verbs-sl", "3", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_set(set, "verbs-gid-index", "3", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_set(set, "verbs-mtu", "1024", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_set(set, "verbs-srq-depth", "0", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), 0);
    assert_string_equal(cfg.verbs.dev, "mlx5_1:1");
    assert_int_equal(cfg.verbs.set, RKV_VERBS_SET_TOS | RKV_VERBS_SET_SL | RKV_VERBS_SET_GID_INDEX |
                                        RKV_VERBS_SET_MTU | RKV_VERBS_SET_SRQ_DEPTH);
    assert_int_equal(cfg.verbs.tos, 106);
    assert_int_equal(cfg.verbs.sl, 3);
    assert_int_equal(cfg.verbs.gid_index, 3);
    assert_int_equal(cfg.verbs.mtu, 1024);
    assert_int_equal(cfg.verbs.srq_depth, 0);
    rkv_config_release(&cfg);
    rkv_settings_destroy(set);
    /* the env var the NIC reads is the setting's too */
    set = make();
    setenv("RKV_VERBS_SL", "7", 1);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), 0);
    assert_int_equal(cfg.verbs.sl, 7);
    assert_int_equal(cfg.verbs.set, RKV_VERBS_SET_SL);
    rkv_config_release(&cfg);
    setenv("RKV_VERBS_SL", "16", 1);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, "verbs-sl: 16 is out of range 0..15"));
    assert_non_null(strstr(err, "RKV_VERBS_SL"));
    unsetenv("RKV_VERBS_SL");
    static const struct {
        const char *key, *value, *says;
    } bad[] = {
        {"verbs-tos", "256", "verbs-tos: 256 is out of range 0..255"},
        {"verbs-tos", "-1", "verbs-tos"},
        {"verbs-tos", "cs3", "verbs-tos"},
        {"verbs-mtu", "1000", "verbs-mtu: 1000 is not an RDMA MTU"},
        {"verbs-mtu", "128", "verbs-mtu: 128 is not an RDMA MTU"},
        {"verbs-mtu", "8192", "verbs-mtu: 8192 is out of range"},
        {"verbs-gid-index", "65536", "verbs-gid-index: 65536 is out of range"},
        {"verbs-srq-depth", "2000000", "verbs-srq-depth: 2000000 is out of range"},
        {"verbs-dev", "a-device-name-longer-than-sixty-three-characters-is-not-one-we-keep",
         "verbs-dev: longer than 63"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct rkv_settings *b = make();
        err[0] = 0;
        /* A form ("-1", "cs3") is refused by set, a range by build. */
        int rc = rkv_settings_set(b, bad[i].key, bad[i].value, err, sizeof(err));
        if (rc == 0)
            rc = rkv_settings_build(b, &cfg, NULL, err, sizeof(err));
        assert_int_equal(rc, -RKV_ECONFIG);
        if (!strstr(err, bad[i].says))
            fail_msg("%s=%s: \"%s\" does not say \"%s\"", bad[i].key, bad[i].value, err,
                     bad[i].says);
        rkv_settings_destroy(b);
    }
    rkv_settings_destroy(set);
}

static void test_cluster_file_and_server_id(void **state)
{
    (void)state;
    char path[64], err[256] = "";
    snprintf(path, sizeof(path), "/tmp/rkv-settings-%d.txt", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("# two machines\n127.0.0.1 41000 2\n127.0.0.1 41002 3\n", f);
    fclose(f);
    struct rkv_settings *set = make();
    assert_int_equal(rkv_settings_set(set, "cluster", path, err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_set(set, "server-id", "3", err, sizeof(err)), 0);
    struct rkv_config cfg;
    uint32_t local = 99;
    assert_int_equal(rkv_settings_build(set, &cfg, &local, err, sizeof(err)), 0);
    assert_int_equal(cfg.n_machines, 2);
    assert_int_equal(cfg.machines[1].servers, 3);
    assert_int_equal(cfg.machine_id, 1);
    assert_int_equal(local, 1);
    rkv_config_release(&cfg);
    /* A machine given here beats a server id left in the environment (it
     * built machine 1 for a trainer that said machine 0). */
    struct rkv_settings *env = make();
    setenv("DGL_SERVER_ID", "3", 1);
    assert_int_equal(rkv_settings_set(env, "cluster", path, err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_set(env, "machine-id", "0", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(env, &cfg, &local, err, sizeof(err)), 0);
    assert_int_equal(cfg.machine_id, 0);
    assert_int_equal(local, 0);
    rkv_config_release(&cfg);
    /* Both given here and disagreeing: said, not guessed. */
    assert_int_equal(rkv_settings_set(env, "server-id", "3", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(env, &cfg, &local, err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, "server-id 3 is a server of machine 1, but machine-id says 0"));
    unsetenv("DGL_SERVER_ID");
    rkv_settings_destroy(env);
    /* Past the cluster: the value, where it came from and the valid ids. */
    setenv("DGL_SERVER_ID", "7", 1);
    env = make();
    assert_int_equal(rkv_settings_set(env, "cluster", path, err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(env, &cfg, &local, err, sizeof(err)), -RKV_ECONFIG);
    unsetenv("DGL_SERVER_ID");
    rkv_settings_destroy(env);
    if (!strstr(err, "server-id 7 (env DGL_SERVER_ID): expected 0..4, the ids of the cluster's "
                     "5 servers on 2 machines"))
        fail_msg("got \"%s\"", err);
    assert_int_equal(rkv_settings_set(set, "server-id", "5", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, &local, err, sizeof(err)), -RKV_ECONFIG);
    if (!strstr(err, "server-id 5 (set by name): expected 0..4"))
        fail_msg("got \"%s\"", err);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("127.0.0.1 41000 2\n127.0.0.1 port 2\n", f);
    fclose(f);
    assert_int_equal(rkv_settings_build(set, &cfg, &local, err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, ":2:"));
    unlink(path);
    rkv_settings_destroy(set);
}

/* DMLC_ROLE without a cluster file is ps-lite's launch, whose scheduler only
 * `rkv node` talks to: a program configured by name built a one-machine
 * cluster whose server 0 listened on the scheduler's DMLC_PS_ROOT_PORT. It
 * is refused saying so; with a cluster file, or the role given here or as
 * RKV_ROLE (rkv's convention), DMLC_ROLE is no launch and builds as before. */
static void test_pslite_role_without_scheduler(void **state)
{
    (void)state;
    char path[64], err[512] = "";
    struct rkv_config cfg;
    unsetenv("RKV_ROLE");
    unsetenv("RKV_CLUSTER");
    unsetenv("DGL_IP_CONFIG");
    setenv("DMLC_ROLE", "server", 1);
    setenv("DMLC_PS_ROOT_PORT", "41500", 1);
    struct rkv_settings *set = make();
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), -RKV_ECONFIG);
    if (!strstr(err, "DMLC_ROLE=server without a cluster file is ps-lite's launch"))
        fail_msg("got \"%s\"", err);
    assert_int_equal(rkv_settings_set(set, "role", "server", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), 0);
    assert_int_equal(cfg.n_machines, 1);
    rkv_config_release(&cfg);
    rkv_settings_destroy(set);
    snprintf(path, sizeof(path), "/tmp/rkv-settings-psl-%d.txt", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("127.0.0.1 41000 2\n", f);
    fclose(f);
    set = make();
    assert_int_equal(rkv_settings_set(set, "cluster", path, err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), 0);
    rkv_config_release(&cfg);
    rkv_settings_destroy(set);
    unlink(path);
    unsetenv("DMLC_ROLE");
    unsetenv("DMLC_PS_ROOT_PORT");
}

/* DGL's launch always gives its ip_config.txt: DGL_ROLE with DGL_IP_CONFIG
 * unset or empty built a one-machine cluster on 127.0.0.1:29500 in
 * silence (an outside tester's launcher had lost the variable). Refused
 * saying so; with the file, it builds. */
static void test_dgl_role_without_ip_config(void **state)
{
    (void)state;
    char path[64], err[512] = "";
    struct rkv_config cfg;
    unsetenv("RKV_ROLE");
    unsetenv("DMLC_ROLE");
    unsetenv("RKV_CLUSTER");
    setenv("DGL_ROLE", "server", 1);
    for (int empty = 0; empty < 2; empty++) {
        if (empty)
            setenv("DGL_IP_CONFIG", "", 1);
        else
            unsetenv("DGL_IP_CONFIG");
        struct rkv_settings *set = make();
        assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), -RKV_ECONFIG);
        if (!strstr(err, "DGL_ROLE=server without a cluster") || !strstr(err, "DGL_IP_CONFIG"))
            fail_msg("got \"%s\"", err);
        rkv_settings_destroy(set);
    }
    snprintf(path, sizeof(path), "/tmp/rkv-settings-dgl-%d.txt", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("127.0.0.1 41000\n", f);
    fclose(f);
    setenv("DGL_IP_CONFIG", path, 1);
    struct rkv_settings *set = make();
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), 0);
    rkv_config_release(&cfg);
    rkv_settings_destroy(set);
    unlink(path);
    unsetenv("DGL_IP_CONFIG");
    unsetenv("DGL_ROLE");
}

/* A role no launcher uses (DMLC_ROLE=sever) was built as if none had been
 * given; every word ps-lite and DGL use still builds. */
static void test_unknown_role_refused(void **state)
{
    (void)state;
    char err[512] = "";
    struct rkv_config cfg;
    unsetenv("RKV_ROLE");
    unsetenv("DGL_ROLE");
    setenv("DMLC_ROLE", "sever", 1);
    struct rkv_settings *set = make();
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), -RKV_ECONFIG);
    if (!strstr(err, "role: unknown \"sever\" (env DMLC_ROLE); expected server, worker, client"))
        fail_msg("got \"%s\"", err);
    unsetenv("DMLC_ROLE");
    setenv("DGL_ROLE", "Client", 1);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, "\"Client\" (env DGL_ROLE)"));
    unsetenv("DGL_ROLE");
    assert_int_equal(rkv_settings_set(set, "role", "", err, sizeof(err)), 0);
    static const char *const ok[] = {"", "server", "worker", "client"};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        assert_int_equal(rkv_settings_set(set, "role", ok[i], err, sizeof(err)), 0);
        assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), 0);
        rkv_config_release(&cfg);
    }
    assert_int_equal(rkv_settings_set(set, "role", "wroker", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, "\"wroker\" (set by name)"));
    rkv_settings_destroy(set);
}

/* DGL's trainers are not told their machine: the first line of the cluster
 * file naming an address of their host is theirs, as `rkv worker` finds it.
 * Built by name (the Python binding), every trainer was machine 0's. The
 * first line here is a documentation address (RFC 5737), no host's. */
static void test_cluster_file_finds_this_host(void **state)
{
    (void)state;
    char path[64], err[256] = "";
    snprintf(path, sizeof(path), "/tmp/rkv-settings-%d.txt", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("192.0.2.1 41000 2\n127.0.0.1 41002 3\n", f);
    fclose(f);
    unsetenv("RKV_MACHINE_ID");
    unsetenv("RKV_SERVER_ID");
    unsetenv("DGL_SERVER_ID");
    struct rkv_settings *set = make();
    assert_int_equal(rkv_settings_set(set, "cluster", path, err, sizeof(err)), 0);
    struct rkv_config cfg;
    uint32_t local = 99;
    assert_int_equal(rkv_settings_build(set, &cfg, &local, err, sizeof(err)), 0);
    assert_int_equal(cfg.machine_id, 1);
    assert_int_equal(local, 0);
    rkv_config_release(&cfg);
    /* A machine or a server id given says otherwise. */
    assert_int_equal(rkv_settings_set(set, "server-id", "1", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, &local, err, sizeof(err)), 0);
    assert_int_equal(cfg.machine_id, 0);
    assert_int_equal(local, 1);
    rkv_config_release(&cfg);
    rkv_settings_destroy(set);
    set = make();
    assert_int_equal(rkv_settings_set(set, "cluster", path, err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_set(set, "machine-id", "0", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, &local, err, sizeof(err)), 0);
    assert_int_equal(cfg.machine_id, 0);
    rkv_config_release(&cfg);
    rkv_settings_destroy(set);
    unlink(path);
}

/* Two launchers' names of one setting in the environment with two values:
 * the first in the table won without a word (DMLC_NUM_WORKER=3 beside
 * DGL_NUM_CLIENT=4 made 3 workers, DMLC_ROLE=server beside DGL_ROLE=client
 * a server). Refused naming both; the same value twice, "client" for
 * "worker", RKV_NAME (the user's own choice) or a setting given by name
 * settles it. */
static void test_env_names_that_disagree(void **state)
{
    (void)state;
    char err[512] = "";
    struct rkv_config cfg;
    unsetenv("RKV_NUM_WORKERS");
    setenv("DMLC_NUM_WORKER", "3", 1);
    setenv("DGL_NUM_CLIENT", "4", 1);
    struct rkv_settings *set = make();
    /* Setting another key is no place for the environment's quarrel. */
    assert_int_equal(rkv_settings_set(set, "rows", "8", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), -RKV_ECONFIG);
    if (!strstr(err, "num-workers: DMLC_NUM_WORKER=3 but DGL_NUM_CLIENT=4") ||
        !strstr(err, "give RKV_NUM_WORKERS or --num-workers"))
        fail_msg("got \"%s\"", err);
    setenv("DGL_NUM_CLIENT", "03", 1); /* the same number */
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), 0);
    assert_int_equal(cfg.n_workers, 3);
    rkv_config_release(&cfg);
    setenv("DGL_NUM_CLIENT", "4", 1);
    setenv("RKV_NUM_WORKERS", "5", 1);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), 0);
    assert_int_equal(cfg.n_workers, 5);
    rkv_config_release(&cfg);
    unsetenv("RKV_NUM_WORKERS");
    assert_int_equal(rkv_settings_set(set, "num_workers", "4", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), 0);
    assert_int_equal(cfg.n_workers, 4);
    rkv_config_release(&cfg);
    rkv_settings_destroy(set);
    unsetenv("DMLC_NUM_WORKER");
    unsetenv("DGL_NUM_CLIENT");
    set = make();
    unsetenv("RKV_ROLE");
    setenv("DMLC_ROLE", "worker", 1);
    setenv("DGL_ROLE", "client", 1);
    assert_int_equal(rkv_settings_set(set, "cluster", "/dev/null", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), -RKV_ECONFIG);
    assert_null(strstr(err, "role:")); /* the same role: /dev/null's "no machines" */
    setenv("DMLC_ROLE", "server", 1);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), -RKV_ECONFIG);
    if (!strstr(err, "role: DMLC_ROLE=server but DGL_ROLE=client"))
        fail_msg("got \"%s\"", err);
    unsetenv("DMLC_ROLE");
    unsetenv("DGL_ROLE");
    rkv_settings_destroy(set);
}

/* DGL_NUM_SERVER is DGL's servers on every machine: a cluster file whose
 * server column says otherwise was silently taken over it. rkv's own
 * servers-per-machine keeps its meaning (the count of lines without one). */
static void test_dgl_num_server_against_cluster_file(void **state)
{
    (void)state;
    char path[64], err[512] = "";
    struct rkv_config cfg;
    snprintf(path, sizeof(path), "/tmp/rkv-settings-dgl-%d.txt", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("127.0.0.1 41000 2\n127.0.0.1 41002 3\n", f);
    fclose(f);
    unsetenv("RKV_SERVERS_PER_MACHINE");
    setenv("DGL_NUM_SERVER", "2", 1);
    struct rkv_settings *set = make();
    assert_int_equal(rkv_settings_set(set, "cluster", path, err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), -RKV_ECONFIG);
    if (!strstr(err, "DGL_NUM_SERVER=2 (servers on each machine) but the cluster file") ||
        !strstr(err, "gives machine 1 (127.0.0.1 41002) 3 servers"))
        fail_msg("got \"%s\"", err);
    /* Agreeing, or a file without the column: builds. */
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("127.0.0.1 41000 2\n127.0.0.1 41002\n", f);
    fclose(f);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), 0);
    assert_int_equal(cfg.machines[1].servers, 2);
    rkv_config_release(&cfg);
    /* rkv's name for it, given here, is the default count as before. */
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("127.0.0.1 41000 2\n127.0.0.1 41002 3\n", f);
    fclose(f);
    assert_int_equal(rkv_settings_set(set, "servers-per-machine", "2", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), 0);
    assert_int_equal(cfg.machines[1].servers, 3);
    rkv_config_release(&cfg);
    unsetenv("DGL_NUM_SERVER");
    rkv_settings_destroy(set);
    unlink(path);
}

/* Cluster files as editors and habits write them: blank lines, comments,
 * tabs, CRLF and no final newline build; CR-only line ends (the rest of the
 * file was dropped after the first machine) and "host,port" (one host name,
 * failing only when dialled) are refused naming the line. */
static void cluster_builds(const char *text, uint32_t n_machines)
{
    char path[64], err[512] = "";
    snprintf(path, sizeof(path), "/tmp/rkv-settings-odd-%d.txt", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    struct rkv_settings *set = make();
    assert_int_equal(rkv_settings_set(set, "cluster", path, err, sizeof(err)), 0);
    struct rkv_config cfg;
    int rc = rkv_settings_build(set, &cfg, NULL, err, sizeof(err));
    unlink(path);
    rkv_settings_destroy(set);
    if (rc != 0)
        fail_msg("\"%s\": %s", text, err);
    assert_int_equal(cfg.n_machines, n_machines);
    rkv_config_release(&cfg);
}

static void cluster_refused(const char *text, const char *want)
{
    char path[64], err[512] = "";
    snprintf(path, sizeof(path), "/tmp/rkv-settings-odd-%d.txt", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    struct rkv_settings *set = make();
    assert_int_equal(rkv_settings_set(set, "cluster", path, err, sizeof(err)), 0);
    struct rkv_config cfg;
    int rc = rkv_settings_build(set, &cfg, NULL, err, sizeof(err));
    unlink(path);
    rkv_settings_destroy(set);
    if (rc != -RKV_ECONFIG || !strstr(err, want))
        fail_msg("\"%s\": rc %d, \"%s\" (expected \"%s\")", text, rc, err, want);
}

static void test_cluster_file_as_written(void **state)
{
    (void)state;
    unsetenv("DGL_NUM_SERVER");
    unsetenv("RKV_SERVERS_PER_MACHINE");
    cluster_builds("\n# c\n  127.0.0.1\t41000   # m0\r\n\r\n\t127.0.0.2  41000\n", 2);
    cluster_builds("127.0.0.1 41000", 1);
    cluster_builds("127.0.0.1 41000 2\r\n127.0.0.1 41002 2\r\n", 2);
    cluster_refused("127.0.0.1 41000\r127.0.0.2 41000\r",
                    ":1: a carriage return inside the line (CR line ends?)");
    cluster_refused("127.0.0.1 41000\n127.0.0.2,41000\n",
                    ":2: host \"127.0.0.2,41000\": a comma; separate the fields with spaces");
    /* A byte order mark, then a comment: the '#' check took the mark for
     * a field (an outside tester). */
    cluster_builds("\xef\xbb\xbf# machines\n127.0.0.1 41000\n", 1);
    cluster_builds("\xef\xbb\xbf"
                   "127.0.0.1 41000 # m0\n",
                   1);
    /* Read as 127.0.0.1 with the default port and 1 server, in silence. */
    cluster_refused("127.0.0.1#rack-a 41000 4\n",
                    ":1: '#' inside '127.0.0.1#rack-a': a comment starts the line or follows a "
                    "space");
    cluster_refused("127.0.0.1 41000\n127.0.0.2 41000 2# two\n", ":2: '#' inside '2#'");
}

/* The checks across fields named the config's fields only: a ps-lite
 * user's BYTEPS_RDMA_RX_DEPTH=2 read "rx_depth out of range ... (got 2,
 * 8192, 64, 1073741824)", its variable unnamed and its numbers unlabelled
 * (an outside tester). */
static void test_cross_field_refusal_names_its_sources(void **state)
{
    (void)state;
    char err[512] = "";
    struct rkv_config cfg;
    setenv("BYTEPS_RDMA_RX_DEPTH", "2", 1);
    struct rkv_settings *set = make();
    int rc = rkv_settings_build(set, &cfg, NULL, err, sizeof(err));
    unsetenv("BYTEPS_RDMA_RX_DEPTH");
    rkv_settings_destroy(set);
    if (rc != -RKV_ECONFIG || !strstr(err, "got rx_depth 2, ctrl_buf_bytes 8192") ||
        !strstr(err, "[given: rx-depth 2 (env BYTEPS_RDMA_RX_DEPTH)]"))
        fail_msg("rc %d: \"%s\"", rc, err);
    set = make();
    assert_int_equal(rkv_settings_set(set, "timeout-ms", "0", err, sizeof(err)), 0);
    rc = rkv_settings_build(set, &cfg, NULL, err, sizeof(err));
    rkv_settings_destroy(set);
    /* Set by a program (rkv.Config(timeout_ms=0)), not on a command line:
     * it read "(flag)" (an outside tester). */
    if (rc != -RKV_ECONFIG || !strstr(err, "timeout_ms must be > 0 [given: timeout-ms 0 (set by "
                                           "name)]"))
        fail_msg("rc %d: \"%s\"", rc, err);
    /* Only the settings the refusal names: a machine id past the machines
     * was told "[given: timeout-ms 5000 ...]" (an outside tester). */
    set = make();
    assert_int_equal(rkv_settings_set(set, "timeout-ms", "5000", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_set(set, "machine-id", "5", err, sizeof(err)), 0);
    rc = rkv_settings_build(set, &cfg, NULL, err, sizeof(err));
    rkv_settings_destroy(set);
    if (rc != -RKV_ECONFIG || strstr(err, "timeout-ms") || !strstr(err, "machine"))
        fail_msg("rc %d: \"%s\"", rc, err);
    /* Whole or not at all: a buffer too short for the list ends with the
     * refusal itself, never half an item. */
    char small[200];
    setenv("BYTEPS_RDMA_RX_DEPTH", "2", 1);
    set = make();
    rc = rkv_settings_build(set, &cfg, NULL, small, sizeof(small));
    unsetenv("BYTEPS_RDMA_RX_DEPTH");
    rkv_settings_destroy(set);
    assert_int_equal(rc, -RKV_ECONFIG);
    if (strstr(small, "[given") && !strchr(small, ']'))
        fail_msg("cut: \"%s\"", small);
}

/* DMLC_NUM_SERVER (every server, in ps-lite) beside a cluster file that
 * says otherwise was ignored. */
static void test_num_servers_against_cluster_file(void **state)
{
    (void)state;
    char path[64], err[512] = "";
    struct rkv_config cfg;
    snprintf(path, sizeof(path), "/tmp/rkv-settings-ns-%d.txt", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("127.0.0.1 41000 2\n127.0.0.1 41002 3\n", f);
    fclose(f);
    unsetenv("RKV_NUM_SERVERS");
    setenv("DMLC_NUM_SERVER", "4", 1);
    struct rkv_settings *set = make();
    assert_int_equal(rkv_settings_set(set, "cluster", path, err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), -RKV_ECONFIG);
    unsetenv("DMLC_NUM_SERVER");
    if (!strstr(err, "num-servers 4 (env DMLC_NUM_SERVER) but the cluster file") ||
        !strstr(err, "has 5 servers on 2 machines"))
        fail_msg("got \"%s\"", err);
    assert_int_equal(rkv_settings_set(set, "num-servers", "5", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), 0);
    rkv_config_release(&cfg);
    rkv_settings_destroy(set);
    unlink(path);
}

/* Without a cluster file num-servers is every machine's servers too (the
 * Python Config's num_servers comes here): machines=2, num_servers=3,
 * server_id=5 built 2 machines of 3 servers, and server 5 of 6. */
static void test_num_servers_over_machines(void **state)
{
    (void)state;
    char err[512] = "";
    struct rkv_config cfg;
    uint32_t local = 99;
    unsetenv("RKV_NUM_SERVERS");
    unsetenv("DMLC_NUM_SERVER");
    unsetenv("DGL_NUM_SERVER");
    struct rkv_settings *set = make();
    assert_int_equal(rkv_settings_set(set, "machines", "2", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_set(set, "num-servers", "3", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_set(set, "server-id", "5", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, &local, err, sizeof(err)), -RKV_ECONFIG);
    if (!strstr(err, "num-servers 3 (set by name) over machines 2 (set by name): not a whole "
                     "number of servers "
                     "per machine"))
        fail_msg("got \"%s\"", err);
    assert_int_equal(rkv_settings_set(set, "num-servers", "4", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, &local, err, sizeof(err)), -RKV_ECONFIG);
    if (!strstr(err, "server-id 5 (set by name): expected 0..3"))
        fail_msg("got \"%s\"", err);
    assert_int_equal(rkv_settings_set(set, "server-id", "3", err, sizeof(err)), 0);
    if (rkv_settings_build(set, &cfg, &local, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(cfg.n_machines, 2);
    assert_int_equal(cfg.machines[0].servers, 2);
    assert_int_equal(cfg.machine_id, 1);
    assert_int_equal(local, 1);
    rkv_config_release(&cfg);
    rkv_settings_destroy(set);
}

/* discover=no (anything but "0") was on. */
static void test_discover_is_0_or_1(void **state)
{
    (void)state;
    char err[512] = "";
    struct rkv_config cfg;
    struct rkv_settings *set = make();
    static const char *const bad[] = {"no", "yes", "2", "false", "true"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(rkv_settings_set(set, "discover", bad[i], err, sizeof(err)), -RKV_ECONFIG);
        assert_non_null(strstr(err, "discover: expected 0 or 1"));
        /* And from the environment, which set does not see, by build. */
        setenv("RKV_DISCOVER", bad[i], 1);
        assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), -RKV_ECONFIG);
        assert_non_null(strstr(err, "discover: expected 0 or 1"));
        unsetenv("RKV_DISCOVER");
    }
    assert_int_equal(rkv_settings_set(set, "machines", "2", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_set(set, "host", "10.0.0.1", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_set(set, "discover", "0", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), 0);
    assert_string_equal(cfg.machines[1].host, "10.0.0.1");
    rkv_config_release(&cfg);
    assert_int_equal(rkv_settings_set(set, "discover", "1", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), 0);
    assert_string_equal(cfg.machines[1].host, "");
    rkv_config_release(&cfg);
    rkv_settings_destroy(set);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys_and_env),
        cmocka_unit_test(test_secret_file_in_config),
        cmocka_unit_test(test_bad_keys_and_values),
        cmocka_unit_test(test_numbers_are_decimal),
        cmocka_unit_test(test_strerror_any_int),
        cmocka_unit_test(test_cluster_file_and_server_id),
        cmocka_unit_test(test_host_list),
        cmocka_unit_test(test_verbs_settings),
        cmocka_unit_test(test_pslite_role_without_scheduler),
        cmocka_unit_test(test_dgl_role_without_ip_config),
        cmocka_unit_test(test_unknown_role_refused),
        cmocka_unit_test(test_env_names_that_disagree),
        cmocka_unit_test(test_cluster_file_finds_this_host),
        cmocka_unit_test(test_dgl_num_server_against_cluster_file),
        cmocka_unit_test(test_cluster_file_as_written),
        cmocka_unit_test(test_discover_is_0_or_1),
        cmocka_unit_test(test_num_servers_against_cluster_file),
        cmocka_unit_test(test_cross_field_refusal_names_its_sources),
        cmocka_unit_test(test_num_servers_over_machines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
