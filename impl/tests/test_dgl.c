/* The parts of DGL's KVStore beyond push and pull, over real loopback TCP
 * with a co-located client: the tensor list (get_data_name_list), a
 * user-given global-to-local map (set_global2local) and pull handlers
 * (_udf_pull_handler), on the remote path and the shared-memory one. */
#include <fcntl.h>
#include <time.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness/tests/rkv_run.h"
#include "engine/engine.h"
#include "rkv.h"
#include "store/pbook.h"
#include "store/store_int.h"

#define TWO_MACHINES_PORT_LO 30000 /* this binary's range */
#define TWO_MACHINES_PORT_SPAN 998
#define TWO_MACHINES_TAG "rkvd"
#include "two_machines.h"

static struct rkv_client *start(struct cluster *c)
{
    cluster_config(c, 5000);
    cluster_start_server(c, 0);
    cluster_start_server(c, 1);
    return client_join(c);
}

static void stop(struct cluster *c, struct rkv_client *cli)
{
    assert_int_equal(rkv_client_shutdown_servers(cli), 0);
    rkv_client_destroy(cli);
    cluster_stop(c);
}

#define OK(cli, call)                                                                              \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ < 0)                                                                               \
            fail_msg("%s: %s: %s", #call, rkv_strerror(rc_), rkv_client_errmsg(cli));              \
    } while (0)

/* ---- rkv_client_list ---- */

static void test_list(void **state)
{
    (void)state;
    struct cluster c;
    struct rkv_client *cli = start(&c);
    size_t n = 99;
    OK(cli, rkv_client_list(cli, NULL, 0, &n));
    assert_int_equal(n, 0);
    static const uint32_t book[6] = {1, 0, 1, 0, 1, 1};
    struct rkv_tensor_desc d[3] = {
        {.name = "emb", .dtype = RKV_F32, .rows = 100, .row_len = 8, .policy = RKV_PART_RANGE},
        {.name = "opt",
         .dtype = RKV_F64,
         .rows = 7,
         .row_len = 2,
         .policy = RKV_PART_HASH,
         .with_state = 1},
        {.name = "lab",
         .dtype = RKV_I64,
         .rows = 6,
         .row_len = 1,
         .policy = RKV_PART_EXPLICIT,
         .book = book},
    };
    for (int i = 0; i < 3; i++)
        OK(cli, rkv_client_init_data(cli, &d[i]));
    /* A smaller array gets the first entries and the total. */
    struct rkv_tensor_meta m[4];
    memset(m, 0x5a, sizeof(m));
    OK(cli, rkv_client_list(cli, m, 2, &n));
    assert_int_equal(n, 3);
    assert_string_equal(m[0].name, "emb");
    assert_string_equal(m[1].name, "opt");
    assert_int_equal(m[2].id, 0x5a5a5a5a); /* untouched beyond cap */
    OK(cli, rkv_client_list(cli, m, 4, &n));
    assert_int_equal(n, 3);
    for (int i = 0; i < 3; i++) {
        assert_string_equal(m[i].name, d[i].name);
        assert_int_equal(m[i].id, i + 1);
        assert_int_equal(m[i].dtype, d[i].dtype);
        assert_int_equal(m[i].rows, d[i].rows);
        assert_int_equal(m[i].row_len, d[i].row_len);
        assert_int_equal(m[i].policy, d[i].policy);
        assert_int_equal(m[i].with_state, d[i].with_state);
    }
    /* What the list says is what meta says. */
    struct rkv_tensor_meta one;
    OK(cli, rkv_client_meta(cli, "lab", &one));
    assert_memory_equal(&one, &m[2], sizeof(one));
    assert_int_equal(rkv_client_list(cli, NULL, 1, &n), -RKV_EINVAL);
    stop(&c, cli);
}

/* `rkv ls --cluster FILE` lists a running store's tensors without taking
 * a worker slot: this cluster's one worker stays joined meanwhile. */
static void test_ls_command(void **state)
{
    (void)state;
    struct cluster c;
    struct rkv_client *cli = start(&c);
    struct rkv_tensor_desc d = {.name = "node_feat",
                                .dtype = RKV_F32,
                                .rows = 2708,
                                .row_len = 1433,
                                .policy = RKV_PART_HASH,
                                .with_state = 1};
    OK(cli, rkv_client_init_data(cli, &d));
    char path[64], args[512];
    snprintf(path, sizeof(path), "/tmp/rkv-dgl-%d.txt", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "127.0.0.1 %u 1\n127.0.0.1 %u 1\n", c.machines[0].base_port,
            c.machines[1].base_port);
    fclose(f);
    snprintf(args, sizeof(args), "ls --cluster %s --shm-prefix %s --timeout-ms 5000", path,
             c.cfg.shm_prefix);
    int rc = run_rkv("", args);
    if (rc != 0 ||
        !strstr(out, "1    node_feat                f32           2708     1433 hash     yes") ||
        !strstr(out, "1 tensor\n"))
        fail_msg("rkv %s: exit %d, output:\n%s", args, rc, out);
    assert_int_equal(run_rkv("", "ls --help"), 0);
    assert_non_null(strstr(out, "usage: rkv ls --cluster FILE"));
    /* The worker still works, and an observer of this process too. */
    float row[1433];
    uint64_t id = 7;
    OK(cli, rkv_client_pull(cli, "node_feat", &id, 1, row));
    struct rkv_client *obs;
    char err[256];
    assert_int_equal(rkv_client_create_observer(&c.cfg, &obs, err, sizeof(err)), 0);
    assert_int_equal(rkv_client_id(obs), RKV_CLIENT_OBSERVER);
    struct rkv_tensor_meta m;
    size_t n;
    OK(obs, rkv_client_list(obs, &m, 1, &n));
    assert_int_equal(n, 1);
    assert_string_equal(m.name, "node_feat");
    OK(obs, rkv_client_meta(obs, "node_feat", &m));
    assert_int_equal(m.row_len, 1433);
    /* It reads the catalogue only. */
    assert_int_equal(rkv_client_pull(obs, "node_feat", &id, 1, row), -RKV_EINVAL);
    assert_int_equal(rkv_client_push(obs, "node_feat", &id, 1, row, RKV_OP_ASSIGN, 0), -RKV_EINVAL);
    assert_int_equal(rkv_client_barrier(obs), -RKV_EINVAL);
    assert_int_equal(rkv_client_init_data(obs, &d), -RKV_EINVAL);
    assert_non_null(strstr(rkv_client_errmsg(obs), "observer"));
    rkv_client_destroy(obs);
    /* A name is any bytes its client gave: printed as they were, a newline
     * made a row of its own and an escape sequence reached the terminal.
     * Unprintable bytes are \xNN, and a backslash \\. */
    struct rkv_tensor_desc evil = {.name = "evil\n2  fake  f64\x1b[31mRED",
                                   .dtype = RKV_F64,
                                   .rows = 2,
                                   .row_len = 1,
                                   .policy = RKV_PART_RANGE};
    OK(cli, rkv_client_init_data(cli, &evil));
    snprintf(evil.name, sizeof(evil.name), "back\\x41slash");
    OK(cli, rkv_client_init_data(cli, &evil));
    rc = run_rkv("", args);
    if (rc != 0 || !strstr(out, "2    evil\\x0a2  fake  f64\\x1b[31mRED f64") ||
        !strstr(out, "3    back\\\\x41slash") || strchr(out, '\x1b') || !strstr(out, "3 tensors\n"))
        fail_msg("rkv %s: exit %d, output:\n%s", args, rc, out);
    /* No store there: a named error, exit 3. */
    f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "127.0.0.1 1 1\n");
    fclose(f);
    snprintf(args, sizeof(args), "ls --cluster %s --connect-retry-ms 100 --timeout-ms 300", path);
    assert_int_equal(run_rkv("", args), 3);
    assert_non_null(strstr(out, "rkv ls: cannot connect to server 0"));
    unlink(path);
    stop(&c, cli);
}

/* ---- a user-given global-to-local map ---- */

/* Reads local row l (row_bytes) of tensor id on machine m from its segment. */
static void shard_row(const struct cluster *c, uint32_t m, uint32_t id, uint64_t l,
                      size_t row_bytes, void *out)
{
    char name[128], path[160];
    rkv_shard_name(name, sizeof(name), c->cfg.shm_prefix, m, id);
    snprintf(path, sizeof(path), "/dev/shm%s", name);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    off_t off = (off_t)(sizeof(struct rkv_shard_hdr) + l * row_bytes);
    assert_int_equal(pread(fd, out, row_bytes, off), (ssize_t)row_bytes);
    close(fd);
}

static void test_local_index(void **state)
{
    (void)state;
    struct cluster c;
    struct rkv_client *cli = start(&c);
    /* Machine 0 holds rows 0, 2, 4, 6; machine 1 rows 1, 3, 5, 7, 8. */
    static const uint32_t book[9] = {0, 1, 0, 1, 0, 1, 0, 1, 1};
    static const uint64_t local[9] = {3, 4, 0, 1, 2, 0, 1, 3, 2};
    struct rkv_tensor_desc d = {.name = "relabelled",
                                .dtype = RKV_F32,
                                .rows = 9,
                                .row_len = 2,
                                .policy = RKV_PART_EXPLICIT,
                                .book = book,
                                .local_index = local};
    OK(cli, rkv_client_init_data(cli, &d));
    OK(cli, rkv_client_init_data(cli, &d)); /* idempotent */
    uint64_t ids[9];
    float rows[18], got[18];
    for (int i = 0; i < 9; i++) {
        ids[i] = (uint64_t)(8 - i);
        rows[2 * i] = (float)(100 + ids[i]);
        rows[2 * i + 1] = (float)(-1.0 * (double)ids[i]);
    }
    OK(cli, rkv_client_push(cli, "relabelled", ids, 9, rows, RKV_OP_ASSIGN, 0));
    OK(cli, rkv_client_pull(cli, "relabelled", ids, 9, got));
    assert_memory_equal(got, rows, sizeof(rows));
    /* The shards are laid out by the given map, on both machines (machine
     * 0's rows were written by the co-located client, machine 1's by its
     * server). */
    struct rkv_tensor_meta meta;
    OK(cli, rkv_client_meta(cli, "relabelled", &meta));
    for (uint64_t g = 0; g < 9; g++) {
        float r[2];
        shard_row(&c, book[g], meta.id, local[g], sizeof(r), r);
        assert_float_equal(r[0], 100.0f + (float)g, 0);
        assert_float_equal(r[1], -(float)g, 0);
    }
    /* The same book with another map is another tensor. */
    static const uint64_t other[9] = {0, 0, 1, 1, 2, 2, 3, 3, 4};
    d.local_index = other;
    assert_int_equal(rkv_client_init_data(cli, &d), -RKV_EEXIST);
    d.local_index = NULL;
    assert_int_equal(rkv_client_init_data(cli, &d), -RKV_EEXIST);
    /* Not a permutation on a machine: refused, the first bad row named. */
    static const uint64_t dup[9] = {0, 0, 1, 1, 2, 2, 1, 3, 4};
    snprintf(d.name, sizeof(d.name), "bad");
    d.local_index = dup;
    assert_int_equal(rkv_client_init_data(cli, &d), -RKV_EINVAL);
    assert_non_null(strstr(rkv_client_errmsg(cli), "row 6 has index 1 on machine 0, as row 2"));
    static const uint64_t big[9] = {0, 0, 1, 1, 2, 2, 3, 3, 5};
    d.local_index = big;
    assert_int_equal(rkv_client_init_data(cli, &d), -RKV_EINVAL);
    assert_non_null(strstr(rkv_client_errmsg(cli), "row 8 has index 5 but machine 1 holds 5"));
    d.policy = RKV_PART_RANGE;
    d.local_index = other;
    assert_int_equal(rkv_client_init_data(cli, &d), -RKV_EINVAL);
    assert_non_null(strstr(rkv_client_errmsg(cli), "needs the EXPLICIT policy"));
    size_t n;
    OK(cli, rkv_client_list(cli, NULL, 0, &n));
    assert_int_equal(n, 1); /* nothing of the refused ones was created */
    stop(&c, cli);
}

/* Durable mode: the map is in the shard (and so in the snapshots a
 * restarted server comes back from: faults-restart-relabelled.yaml). */
static void test_local_index_durable(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 5000);
    char dir[] = "/tmp/rkv-dgl-durable.XXXXXX";
    assert_non_null(mkdtemp(dir));
    snprintf(c.cfg.durable_dir, sizeof(c.cfg.durable_dir), "%s", dir);
    cluster_start_server(&c, 0);
    cluster_start_server(&c, 1);
    struct rkv_client *cli = client_join(&c);
    static const uint32_t book[4] = {0, 1, 0, 1};
    static const uint64_t local[4] = {1, 0, 0, 1};
    struct rkv_tensor_desc d = {.name = "rel",
                                .dtype = RKV_F32,
                                .rows = 4,
                                .row_len = 1,
                                .policy = RKV_PART_EXPLICIT,
                                .book = book,
                                .local_index = local};
    OK(cli, rkv_client_init_data(cli, &d));
    uint64_t ids[4] = {0, 1, 2, 3};
    float rows[4] = {10, 11, 12, 13}, got[4];
    OK(cli, rkv_client_push(cli, "rel", ids, 4, rows, RKV_OP_ASSIGN, 0));
    OK(cli, rkv_client_pull(cli, "rel", ids, 4, got));
    assert_memory_equal(got, rows, sizeof(rows));
    struct rkv_tensor_meta meta;
    OK(cli, rkv_client_meta(cli, "rel", &meta));
    for (uint64_t g = 0; g < 4; g++) {
        float r;
        shard_row(&c, book[g], meta.id, local[g], sizeof(r), &r);
        assert_float_equal(r, 10.0f + (float)g, 0);
    }
    stop(&c, cli);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* What every server checks too (the same function the client runs). */
static void test_local_index_pbook(void **state)
{
    (void)state;
    static const uint32_t book[5] = {1, 1, 0, 1, 0};
    static const uint64_t good[5] = {2, 0, 1, 1, 0}, hole[5] = {0, 1, 0, 3, 1};
    char err[256];
    struct rkv_pbook pb;
    assert_int_equal(
        rkv_pbook_init_local(&pb, RKV_PART_EXPLICIT, 5, 2, book, good, err, sizeof(err)), 0);
    assert_int_equal(pb.user_local, 1);
    assert_int_equal(rkv_pbook_local_rows(&pb, 0), 2);
    assert_int_equal(rkv_pbook_local_rows(&pb, 1), 3);
    for (uint64_t g = 0; g < 5; g++) {
        assert_int_equal(rkv_pbook_machine(&pb, g), book[g]);
        assert_int_equal(rkv_pbook_g2l(&pb, g), good[g]);
    }
    rkv_pbook_free(&pb);
    memset(&pb, 0x5a, sizeof(pb));
    assert_int_equal(
        rkv_pbook_init_local(&pb, RKV_PART_EXPLICIT, 5, 2, book, hole, err, sizeof(err)),
        -RKV_EINVAL);
    assert_non_null(strstr(err, "row 3 has index 3 but machine 1 holds 3 rows"));
    assert_int_equal(pb.user_local, 0x5a5a5a5a); /* untouched on failure */
    assert_int_equal(
        rkv_pbook_init_local(&pb, RKV_PART_EXPLICIT, 5, 2, book, NULL, err, sizeof(err)), 0);
    assert_int_equal(pb.user_local, 0);
    assert_int_equal(rkv_pbook_g2l(&pb, 3), 2); /* derived: the third row of machine 1 */
    rkv_pbook_free(&pb);
}

/* ---- pull handlers ---- */

/* Reply: the row's sum plus param in each of its out_len elements (f32).
 * Runs on server threads too: no cmocka assertions here. */
static void p_sum(enum rkv_dtype dt, const void *row, const void *st, size_t row_len, void *out,
                  size_t out_len, double param, void *user)
{
    (void)st, (void)dt;
    int *calls = user;
    if (calls)
        (*calls)++;
    const float *r = row;
    float s = (float)param;
    for (size_t j = 0; j < row_len; j++)
        s += r[j];
    for (size_t k = 0; k < out_len; k++)
        ((float *)out)[k] = s;
}

static void test_pull_handlers(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 5000);
    cluster_start_server(&c, 0);
    cluster_start_server(&c, 1);
    int srv_calls = 0, cli_calls = 0;
    assert_int_equal(
        rkv_server_register_pull_handler(c.srv[0][0], RKV_PULL_CUSTOM, p_sum, 0, 1, &srv_calls), 0);
    assert_int_equal(
        rkv_server_register_pull_handler(c.srv[1][0], RKV_PULL_CUSTOM, p_sum, 0, 1, &srv_calls), 0);
    /* Machine 1's server replies 3 elements per row for this one. */
    assert_int_equal(
        rkv_server_register_pull_handler(c.srv[1][0], RKV_PULL_CUSTOM + 2, p_sum, 0, 3, NULL), 0);
    /* And 1 MiB per row for this one, more than any reply slot the
     * client offers it. */
    assert_int_equal(rkv_server_register_pull_handler(c.srv[1][0], RKV_PULL_CUSTOM + 4, p_sum,
                                                      1u << 16, 0, NULL),
                     0);
    struct rkv_client *cli = client_join(&c);
    assert_int_equal(
        rkv_client_register_pull_handler(cli, RKV_PULL_CUSTOM, p_sum, 0, 1, &cli_calls), 0);
    assert_int_equal(rkv_client_register_pull_handler(cli, RKV_PULL_CUSTOM + 1, p_sum, 0, 1, NULL),
                     0);
    assert_int_equal(rkv_client_register_pull_handler(cli, RKV_PULL_CUSTOM + 2, p_sum, 0, 1, NULL),
                     0);
    assert_int_equal(rkv_client_register_pull_handler(cli, RKV_PULL_WITH_STATE, p_sum, 1, 0, NULL),
                     -RKV_EINVAL); /* built-in ids are not for registration */
    assert_int_equal(rkv_client_register_pull_handler(cli, RKV_PULL_CUSTOM, p_sum, 0, 0, NULL),
                     -RKV_EINVAL);
    struct rkv_tensor_desc d = {.name = "opt",
                                .dtype = RKV_F32,
                                .rows = 100,
                                .row_len = 4,
                                .policy = RKV_PART_RANGE,
                                .with_state = 1};
    OK(cli, rkv_client_init_data(cli, &d));
    struct rkv_tensor_desc plain = {
        .name = "plain", .dtype = RKV_F32, .rows = 100, .row_len = 4, .policy = RKV_PART_RANGE};
    OK(cli, rkv_client_init_data(cli, &plain));
    uint64_t ids[3] = {90, 10, 90}; /* machine 1 (remote), machine 0 (local), again */
    float g[12] = {2, 2, 2, 2, 1, 2, 3, 4, 2, 2, 2, 2};
    OK(cli, rkv_client_push(cli, "opt", ids, 2, g, RKV_OP_ADAGRAD, 0.5));
    /* The built-in: row then state, row_len each, on both paths. */
    uint32_t len;
    OK(cli, rkv_client_pull_len(cli, "opt", RKV_PULL_WITH_STATE, &len));
    assert_int_equal(len, 8);
    float ws[3 * 8], rows[3 * 4];
    OK(cli, rkv_client_pull_with(cli, "opt", ids, 3, ws, RKV_PULL_WITH_STATE, 0));
    OK(cli, rkv_client_pull(cli, "opt", ids, 3, rows));
    for (int i = 0; i < 3; i++) {
        assert_memory_equal(ws + 8 * i, rows + 4 * i, 4 * sizeof(float));
        for (int j = 0; j < 4; j++) { /* adagrad's state: the squared gradient */
            float gj = g[4 * (i % 2) + j];
            assert_float_equal(ws[8 * i + 4 + j], gj * gj, 1e-6);
        }
    }
    /* A custom one: one element per row, computed on the server for remote
     * rows and in the client for local ones. */
    float sums[3];
    OK(cli, rkv_client_pull_with(cli, "opt", ids, 3, sums, RKV_PULL_CUSTOM, 10.0));
    for (int i = 0; i < 3; i++)
        assert_float_equal(
            sums[i], 10 + rows[4 * i] + rows[4 * i + 1] + rows[4 * i + 2] + rows[4 * i + 3], 1e-5);
    assert_int_equal(srv_calls, 2); /* row 90 twice on machine 1 */
    assert_int_equal(cli_calls, 1);
    /* Refused before anything is sent. */
    assert_int_equal(rkv_client_pull_with(cli, "opt", ids, 3, sums, RKV_PULL_CUSTOM + 3, 0),
                     -RKV_ENOHANDLER);
    assert_int_equal(rkv_client_pull_with(cli, "opt", ids, 3, sums, -1, 0), -RKV_ENOHANDLER);
    assert_int_equal(rkv_client_pull_with(cli, "opt", ids, 3, sums, RKV_OP_MAX, 0),
                     -RKV_ENOHANDLER);
    assert_int_equal(rkv_client_pull_with(cli, "plain", ids, 3, ws, RKV_PULL_WITH_STATE, 0),
                     -RKV_EINVAL);
    assert_non_null(strstr(rkv_client_errmsg(cli), "has no optimizer state"));
    assert_int_equal(srv_calls, 2);
    /* A server without the handler, or with another reply shape. */
    assert_int_equal(rkv_client_pull_with(cli, "opt", ids, 1, sums, RKV_PULL_CUSTOM + 1, 0),
                     -RKV_ENOHANDLER);
    assert_non_null(strstr(rkv_client_errmsg(cli), "pull handler 17 is not registered"));
    assert_int_equal(rkv_client_pull_with(cli, "opt", ids, 1, sums, RKV_PULL_CUSTOM + 2, 0),
                     -RKV_EPROTO);
    /* Each says what differs and why ("pull reply does not match the
     * request" said neither). */
    assert_non_null(strstr(rkv_client_errmsg(cli), "rows of 12 bytes, this client expects 4"));
    assert_non_null(strstr(rkv_client_errmsg(cli), "same out_mult and out_add"));
    assert_int_equal(rkv_client_register_pull_handler(cli, RKV_PULL_CUSTOM + 4, p_sum, 0, 1, NULL),
                     0);
    assert_int_equal(rkv_client_pull_with(cli, "opt", ids, 1, sums, RKV_PULL_CUSTOM + 4, 0),
                     -RKV_ELIMIT);
    assert_non_null(strstr(rkv_client_errmsg(cli), "pull handler 20 replies 1048576 bytes a row"));
    assert_non_null(strstr(rkv_client_errmsg(cli), "another out_mult or out_add on the client"));
    /* The plain pull still works after all that. */
    OK(cli, rkv_client_pull(cli, "opt", ids, 3, rows));
    /* Replies larger than the control buffers, alternating with plain pulls
     * that share the reply slot: it grows for the larger reply. */
    struct rkv_tensor_desc wide = {.name = "wide",
                                   .dtype = RKV_F64,
                                   .rows = 2000,
                                   .row_len = 256,
                                   .policy = RKV_PART_HASH,
                                   .with_state = 1,
                                   .init = RKV_INIT_UNIFORM,
                                   .init_seed = 3};
    OK(cli, rkv_client_init_data(cli, &wide));
    enum { N = 600 };
    uint64_t *wid = malloc(N * sizeof(*wid));
    double *wr = malloc((size_t)N * 256 * sizeof(double));
    double *wws = malloc((size_t)N * 512 * sizeof(double));
    assert_true(wid && wr && wws);
    for (int i = 0; i < N; i++)
        wid[i] = (uint64_t)(i * 7 % 2000);
    double *grad = malloc((size_t)N * 256 * sizeof(double));
    assert_non_null(grad);
    for (size_t i = 0; i < (size_t)N * 256; i++)
        grad[i] = 1 + (double)(i % 5);
    OK(cli, rkv_client_push(cli, "wide", wid, N, grad, RKV_OP_ADAGRAD, 0.25));
    for (int round = 0; round < 2; round++) {
        OK(cli, rkv_client_pull(cli, "wide", wid, N, wr));
        memset(wws, 0, (size_t)N * 512 * sizeof(double));
        OK(cli, rkv_client_pull_with(cli, "wide", wid, N, wws, RKV_PULL_WITH_STATE, 0));
        for (int i = 0; i < N; i++) {
            assert_memory_equal(wws + (size_t)i * 512, wr + (size_t)i * 256, 256 * sizeof(double));
            for (int j = 0; j < 256; j++) {
                double gj = grad[(size_t)i * 256 + (size_t)j];
                assert_float_equal(wws[(size_t)i * 512 + 256 + (size_t)j], gj * gj, 1e-9);
            }
        }
    }
    free(wid);
    free(wr);
    free(wws);
    free(grad);
    stop(&c, cli);
}

/* ---- what servers check themselves (a peer that skips the client's checks) ---- */

/* An engine of its own that sends hand-made requests to one server. */
struct raw {
    struct rkv_port *port;
    struct rkv_nic *nic;
    struct rkv_engine *eng;
    struct rkv_peer *peer;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int got;
    struct rkv_hdr h;
    char text[RKV_PROTO_TEXT_MAX + 1];
};

static void raw_on_msg(void *user, struct rkv_peer *peer, const struct rkv_msg *m)
{
    (void)peer;
    struct raw *r = user;
    pthread_mutex_lock(&r->mu);
    r->h = m->h;
    snprintf(r->text, sizeof(r->text), "%s", m->h.type == RKV_MSG_ERROR ? m->u.error.text : "");
    r->got = 1;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void raw_on_peer(void *user, struct rkv_peer *peer, int up)
{
    (void)user, (void)peer, (void)up;
}

static void raw_open(struct raw *r, const struct rkv_config *cfg, const struct rkv_machine *m)
{
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    char err[256];
    assert_int_equal(rkv_node_open(cfg, "raw", 99, &r->port, &r->nic, err, sizeof(err)), 0);
    struct rkv_engine_cfg ec;
    rkv_cfg_engine(cfg, r->port, RKV_CLIENT_NODE_BASE + 77, &ec);
    assert_int_equal(
        rkv_engine_create(r->port, r->nic, &ec, raw_on_msg, raw_on_peer, r, &r->eng, err, 256), 0);
    assert_int_equal(rkv_engine_start(r->eng), 0);
    assert_int_equal(rkv_engine_connect(r->eng, m->host, m->base_port, 5000, &r->peer), 0);
}

static void raw_close(struct raw *r)
{
    rkv_engine_destroy(r->eng);
    rkv_node_close(r->port, r->nic);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
}

/* Sends the message encoded in tx and returns the reply's status (its text
 * in r->text). */
static int raw_request(struct raw *r, struct rkv_tx *tx, size_t len)
{
    r->got = 0;
    assert_int_equal(rkv_engine_send(r->eng, r->peer, tx, len), 0);
    pthread_mutex_lock(&r->mu);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    while (!r->got && pthread_cond_timedwait(&r->cv, &r->mu, &until) == 0)
        ;
    int got = r->got;
    pthread_mutex_unlock(&r->mu);
    assert_true(got);
    return r->h.status;
}

/* A client's HELLO claiming id want: servers take an INIT only from a
 * connection that said one. */
static int raw_hello(struct raw *r, const struct rkv_config *cfg, uint32_t want)
{
    struct rkv_tx *tx;
    assert_int_equal(rkv_engine_tx_alloc(r->eng, 256, &tx), 0);
    struct rkv_hdr h = {.type = RKV_MSG_HELLO, .req_id = 4, .sender = 0x10000 + 77};
    struct rkv_wire_hello w = {.want_id = want,
                               .nonce = 1,
                               .cluster = rkv_cfg_fingerprint(cfg),
                               .rx_depth = cfg->rx_depth,
                               .ctrl_buf_bytes = cfg->ctrl_buf_bytes};
    return raw_request(r, tx, rkv_proto_enc_hello(rkv_engine_tx_buf(tx), &h, &w));
}

static int raw_pull(struct raw *r, int type, uint32_t tensor, uint32_t row_bytes, int op,
                    uint64_t id)
{
    struct rkv_slot_desc reply;
    assert_int_equal(rkv_engine_slot_alloc(r->eng, r->peer, 4096, &reply), 0);
    struct rkv_tx *tx;
    assert_int_equal(rkv_engine_tx_alloc(r->eng, 256, &tx), 0);
    struct rkv_hdr h = {.type = (uint8_t)type,
                        .req_id = 5,
                        .tensor_id = tensor,
                        .sender = RKV_CLIENT_NODE_BASE + 77,
                        .count = 1,
                        .row_bytes = row_bytes,
                        .op = (uint16_t)op};
    uint32_t pos = 0;
    size_t len =
        type == RKV_MSG_PULL
            ? rkv_proto_enc_pull(rkv_engine_tx_buf(tx), &h, &reply, &id)
            : rkv_proto_enc_pull_zc(
                  rkv_engine_tx_buf(tx), &h,
                  &(struct rkv_slot_desc){.addr = reply.addr, .rkey = reply.rkey, .cap = reply.cap},
                  &id, &pos);
    return raw_request(r, tx, len);
}

static void test_servers_check_too(void **state)
{
    (void)state;
    struct cluster c;
    struct rkv_client *cli = start(&c);
    struct rkv_tensor_desc d = {.name = "opt",
                                .dtype = RKV_F32,
                                .rows = 100,
                                .row_len = 4,
                                .policy = RKV_PART_RANGE,
                                .with_state = 1};
    OK(cli, rkv_client_init_data(cli, &d));
    struct rkv_tensor_desc plain = {
        .name = "plain", .dtype = RKV_F32, .rows = 100, .row_len = 4, .policy = RKV_PART_RANGE};
    OK(cli, rkv_client_init_data(cli, &plain));
    struct raw r;
    raw_open(&r, &c.cfg, &c.machines[1]); /* server 1 holds rows 50..99 */
    assert_int_equal(raw_hello(&r, &c.cfg, 0), 0);
    /* An INIT whose local index is no permutation on machine 1. */
    static const uint32_t book[6] = {1, 1, 0, 1, 0, 1};
    static const uint64_t local[6] = {0, 1, 0, 1, 1, 3};
    struct rkv_wire_tensor w = {
        .dtype = RKV_F32, .policy = RKV_PART_EXPLICIT, .row_len = 1, .rows = 6, .book_len = 6};
    snprintf(w.name, sizeof(w.name), "evil");
    struct rkv_tx *tx;
    assert_int_equal(rkv_engine_tx_alloc(r.eng, 512, &tx), 0);
    struct rkv_hdr h = {
        .type = RKV_MSG_INIT, .req_id = 5, .tensor_id = 9, .op = 1, .sender = 0x10000 + 77};
    size_t len = rkv_proto_enc_tensor_local(rkv_engine_tx_buf(tx), &h, &w, book, local);
    assert_int_equal(raw_request(&r, tx, len), -RKV_EINVAL);
    assert_non_null(strstr(r.text, "row 3 has index 1 on machine 1, as row 1 has"));
    /* Pulls through a handler the server does not have, or that does not
     * apply, and a zero-copy pull naming one. */
    assert_int_equal(raw_pull(&r, RKV_MSG_PULL, 1, 16, RKV_PULL_CUSTOM + 5, 60), -RKV_ENOHANDLER);
    assert_non_null(strstr(r.text, "pull handler 21 is not registered"));
    assert_int_equal(raw_pull(&r, RKV_MSG_PULL, 2, 16, RKV_PULL_WITH_STATE, 60), -RKV_EINVAL);
    assert_non_null(strstr(r.text, "has no optimizer state"));
    assert_int_equal(raw_pull(&r, RKV_MSG_PULL_ZC, 1, 16, RKV_PULL_WITH_STATE, 60), -RKV_EINVAL);
    assert_non_null(strstr(r.text, "PULL_ZC with pull handler 1"));
    /* The catalogue is server 0's. */
    assert_int_equal(rkv_engine_tx_alloc(r.eng, 256, &tx), 0);
    h = (struct rkv_hdr){.type = RKV_MSG_LIST, .req_id = 5, .sender = 0x10000 + 77};
    assert_int_equal(raw_request(&r, tx, rkv_proto_enc_empty(rkv_engine_tx_buf(tx), &h)),
                     -RKV_EINVAL);
    assert_non_null(strstr(r.text, "LIST goes to server 0"));
    /* A good pull with the built-in on the same connection. */
    assert_int_equal(raw_pull(&r, RKV_MSG_PULL, 1, 16, RKV_PULL_WITH_STATE, 60), 0);
    assert_int_equal(r.h.type, RKV_MSG_PULL_REPLY);
    assert_int_equal(r.h.row_bytes, 32);
    raw_close(&r);
    /* Nothing of it changed the store. */
    size_t n;
    OK(cli, rkv_client_list(cli, NULL, 0, &n));
    assert_int_equal(n, 2);
    stop(&c, cli);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_list),
        cmocka_unit_test(test_ls_command),
        cmocka_unit_test(test_local_index),
        cmocka_unit_test(test_local_index_pbook),
        cmocka_unit_test(test_local_index_durable),
        cmocka_unit_test(test_pull_handlers),
        cmocka_unit_test(test_servers_check_too),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
