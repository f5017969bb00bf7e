/* Configuration by name (rkv_settings_*): the CLI's keys, '_' for '-',
 * flags over env, the cluster file with its line numbers, server-id to
 * (machine, local index), and every error a -RKV_ECONFIG with a message. */
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
    assert_int_equal(rkv_settings_set(set, "timeout-ms", "soon", err, sizeof(err)), 0);
    struct rkv_config cfg = {.n_workers = 12345};
    assert_int_equal(rkv_settings_build(set, &cfg, NULL, err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, "timeout-ms"));
    assert_int_equal(cfg.n_workers, 12345); /* untouched on failure */
    rkv_settings_destroy(set);
    rkv_settings_destroy(NULL);
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
    assert_int_equal(rkv_settings_set(set, "server-id", "5", err, sizeof(err)), 0);
    assert_int_equal(rkv_settings_build(set, &cfg, &local, err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, "server-id"));
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("127.0.0.1 41000 2\n127.0.0.1 port 2\n", f);
    fclose(f);
    assert_int_equal(rkv_settings_build(set, &cfg, &local, err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, ":2:"));
    unlink(path);
    rkv_settings_destroy(set);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys_and_env),
        cmocka_unit_test(test_secret_file_in_config),
        cmocka_unit_test(test_bad_keys_and_values),
        cmocka_unit_test(test_cluster_file_and_server_id),
        cmocka_unit_test(test_host_list),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
