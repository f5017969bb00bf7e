/* Workers' reports carried to worker 0 in the store (harness/report_gather.h):
 * blocks that decode, blocks a hostile or broken peer could write (each
 * refused with a reason, never a crash or a half-used text), and the round
 * trip over real loopback servers: another worker's wrong value fails
 * worker 0's verdict, a worker that never reports is named within the wait. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness/report.h"
#include "harness/report_gather.h"
#include "harness/tests/tmp_scenario.h"
#include "rkv.h"

#define TWO_MACHINES_PORT_LO 31500 /* this binary's range */
#define TWO_MACHINES_PORT_SPAN 998
#define TWO_MACHINES_TAG "rkvg"
#include "impl/tests/two_machines.h"

/* Two machines of one server and one worker; one phase pushing assigns
 * into a 100-row tensor (so PIN lines have a budget), one summing. */
static struct rkv_scenario *load_scenario(void)
{
    char path[64], err[512];
    tmp_scenario(
        path, sizeof(path), "gather",
        "cluster: {machines: 2, servers_per_machine: 1, workers_per_machine: 1}\n"
        "tensors:\n"
        "  - {name: t, dtype: f32, rows: 100, shape: [4]}\n"
        "workload:\n"
        "  - {name: a, tensor: t, push: 0.5, push_op: assign, ids_per_request: 4, rounds: 5}\n"
        "  - {name: s, tensor: t, push: 0.5, push_op: sum, ids_per_request: 4, rounds: 5}\n");
    struct rkv_scenario *sc;
    int rc = rkv_scenario_load(path, &sc, err, sizeof(err));
    unlink(path);
    if (rc < 0)
        fail_msg("%s", err);
    return sc;
}

static const char GOOD_W1[] =
    "PHASE w=1 p=0 pushes=3 pulls=2 bytes=320 checks=8 skipped=0 errors=0 wall_s=0.001 "
    "max_us=40.0 hist=200:5\n"
    "PIN t=0 r=7 e=0 w=0 p=0 n=2\n"
    "PHASE w=1 p=1 pushes=2 pulls=3 bytes=320 checks=12 skipped=1 errors=0 wall_s=0.002 "
    "max_us=50.0 hist=-\n";

/* Encodes text as worker's block and decodes it back. */
static int roundtrip(const struct rkv_scenario *sc, uint64_t bytes, uint32_t worker, int status,
                     const char *text, struct rkv_report_block *b, char *why, size_t why_len)
{
    uint8_t *buf = calloc(1, bytes);
    assert_non_null(buf);
    size_t used = rkv_report_block_encode(buf, bytes, worker, status, text, strlen(text));
    assert_int_equal(rkv_report_block_used(buf, bytes, worker), used);
    memset(b, 0, sizeof(*b));
    int rc = rkv_report_block_decode(buf, used, sc, worker, b, why, why_len);
    free(buf);
    return rc;
}

static void test_block_roundtrip(void **state)
{
    (void)state;
    struct rkv_scenario *sc = load_scenario();
    uint64_t bytes = rkv_report_block_bytes(sc);
    assert_int_equal(bytes % RKV_REPORT_ROW_BYTES, 0);
    /* two phases' lines and 100 rows' worth of pins */
    assert_true(bytes >= RKV_REPORT_HDR_BYTES + 2 * 8192 + 100 * 64);
    struct rkv_report_block b;
    char why[200];
    assert_int_equal(roundtrip(sc, bytes, 1, -RKV_EPEERDEAD, GOOD_W1, &b, why, sizeof(why)), 0);
    /* phase lines first, then pins */
    assert_non_null(strstr(b.text, "p=1 pushes=2"));
    assert_true(strstr(b.text, "PIN ") > strstr(b.text, "p=1 pushes=2"));
    assert_int_equal(b.status, -RKV_EPEERDEAD);
    assert_int_equal(b.pins_dropped, 0);
    free(b.text);
    rkv_scenario_free(sc);
}

/* A block whose text does not all fit: pins go first; without room for
 * the phase lines, none is sent and the block says so. */
static void test_block_too_small(void **state)
{
    (void)state;
    struct rkv_scenario *sc = load_scenario();
    struct rkv_report_block b;
    char why[200];
    size_t phases = strlen(GOOD_W1) - strlen("PIN t=0 r=7 e=0 w=0 p=0 n=2\n");
    assert_int_equal(
        roundtrip(sc, RKV_REPORT_HDR_BYTES + phases, 1, 0, GOOD_W1, &b, why, sizeof(why)), 0);
    assert_int_equal(b.pins_dropped, 1);
    assert_null(strstr(b.text, "PIN "));
    free(b.text);
    assert_int_equal(roundtrip(sc, RKV_REPORT_HDR_BYTES + 40, 1, 0, GOOD_W1, &b, why, sizeof(why)),
                     0);
    assert_int_equal(b.flags, RKV_REPORT_TOO_LARGE);
    assert_string_equal(b.text, "");
    assert_int_equal(b.wanted_bytes, strlen(GOOD_W1));
    free(b.text);
    rkv_scenario_free(sc);
}

/* Blocks that verify but break a rule: refused, with the reason. */
static void test_block_rules(void **state)
{
    (void)state;
    struct rkv_scenario *sc = load_scenario();
    uint64_t bytes = rkv_report_block_bytes(sc);
    static const struct {
        const char *text, *why;
        int status;
    } bad[] = {
        /* another worker's phase: it would count for a worker that never ran */
        {"PHASE w=0 p=0 pushes=1 pulls=0 bytes=0 checks=0 skipped=0 errors=0 wall_s=0 max_us=0 "
         "hist=-\n",
         "a bad PHASE line", 0},
        {"PHASE w=1 p=0 pushes=1 pulls=0 bytes=0 checks=0 skipped=0 errors=0 wall_s=0 max_us=0 "
         "hist=-\nPHASE w=1 p=0 pushes=1 pulls=0 bytes=0 checks=0 skipped=0 errors=0 wall_s=0 "
         "max_us=0 hist=-\n",
         "phase 0 reported twice", 0},
        {"PHASE w=1 p=2 pushes=1 pulls=0 bytes=0 checks=0 skipped=0 errors=0 wall_s=0 max_us=0 "
         "hist=-\n",
         "a bad PHASE line", 0},
        {"PHASE w=1 p=0 pushes=1 pulls=0 bytes=0 checks=0 skipped=0 errors=0 wall_s=nan "
         "max_us=0 hist=-\n",
         "a bad PHASE line", 0},
        {"PHASE w=1 p=0 pushes=1 pulls=0 bytes=0 checks=0 skipped=0 errors=0 wall_s=0 max_us=0 "
         "hist=5000:1\n",
         "a bad PHASE line", 0},
        {"FIRSTERR w=1 p=9 x\n", "a bad FIRSTERR line", 0},
        {"FIRSTERR w=1 p=0 x\nFIRSTERR w=1 p=0 y\n", "a bad FIRSTERR line", 0},
        {"PIN t=0 r=100 e=0 w=0 p=0 n=1\n", "a bad PIN line", 0},
        {"PIN t=1 r=1 e=0 w=0 p=0 n=1\n", "a bad PIN line", 0},
        {"PIN t=0 r=1 e=0 w=2 p=0 n=1\n", "a bad PIN line", 0},
        {"PIN t=0 r=1 e=0 w=0 p=0 n=1 extra\n", "a bad PIN line", 0},
        {"PIN t=0 r=1 e=9 w=0 p=0 n=1\n", "a bad PIN line", 0},
        {"PIN t=0 r=1 w=0 p=0 n=1\n", "a bad PIN line", 0}, /* without its epoch */
        {"verdict: PASS\n", "an unknown line", 0},
        {"FIRSTERR w=1 p=0 \x1b[2Jhidden\n", "control character 0x1b", 0},
        {"", "a bad header", 7},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct rkv_report_block b = {0};
        char why[200] = "";
        int rc = roundtrip(sc, bytes, 1, bad[i].status, bad[i].text, &b, why, sizeof(why));
        if (rc != -RKV_EPROTO || !strstr(why, bad[i].why))
            fail_msg("case %zu: rc %d, why \"%s\" (expected -RKV_EPROTO, \"%s\")", i, rc, why,
                     bad[i].why);
        assert_null(b.text);
    }
    rkv_scenario_free(sc);
}

/* What a pull may meet: nothing, another worker's block, a torn block (a
 * flipped byte anywhere), a length past the block. Each is "not yet". */
static void test_block_torn(void **state)
{
    (void)state;
    struct rkv_scenario *sc = load_scenario();
    uint64_t bytes = rkv_report_block_bytes(sc);
    uint8_t *buf = calloc(1, bytes);
    assert_non_null(buf);
    struct rkv_report_block b = {0};
    char why[200];
    assert_int_equal(rkv_report_block_used(buf, bytes, 1), 0);
    assert_int_equal(rkv_report_block_decode(buf, bytes, sc, 1, &b, why, sizeof(why)), 1);
    size_t used = rkv_report_block_encode(buf, bytes, 1, 0, GOOD_W1, strlen(GOOD_W1));
    assert_int_equal(rkv_report_block_used(buf, bytes, 0), 0);
    assert_int_equal(rkv_report_block_decode(buf, used, sc, 0, &b, why, sizeof(why)), 1);
    for (size_t at = 0; at < used; at++) {
        if (at >= 40 && at < RKV_REPORT_HDR_BYTES)
            continue; /* the zero bytes: refused as a rule (below) */
        buf[at] ^= 0x20;
        int rc = rkv_report_block_decode(buf, used, sc, 1, &b, why, sizeof(why));
        buf[at] ^= 0x20;
        if (rc != 1)
            fail_msg("byte %zu flipped: rc %d (%s)", at, rc, why);
    }
    buf[50] = 1;
    assert_int_equal(rkv_report_block_decode(buf, used, sc, 1, &b, why, sizeof(why)), -RKV_EPROTO);
    buf[50] = 0;
    assert_int_equal(rkv_report_block_decode(buf, used - 1, sc, 1, &b, why, sizeof(why)), 1);
    assert_non_null(strstr(why, "arrived"));
    uint32_t huge = (uint32_t)bytes;
    memcpy(buf + 16, &huge, 4);
    assert_int_equal(rkv_report_block_used(buf, bytes, 1), 0);
    free(buf);
    rkv_scenario_free(sc);
}

struct worker_arg {
    struct cluster *c;
    struct rkv_client *cli;
};

static void *join_thread(void *arg)
{
    struct worker_arg *a = arg;
    a->cli = client_join(a->c);
    return NULL;
}

/* Two clients (ids 0 and 1) of a fresh two-machine cluster. */
static void join_two(struct cluster *c, struct rkv_client *cli[2])
{
    cluster_config(c, 5000);
    c->cfg.n_workers = 2;
    cluster_start_server(c, 0);
    cluster_start_server(c, 1);
    struct worker_arg a = {.c = c};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, join_thread, &a), 0);
    struct rkv_client *x = client_join(c);
    assert_int_equal(pthread_join(t, NULL), 0);
    cli[rkv_client_id(x)] = x;
    cli[rkv_client_id(a.cli)] = a.cli;
    assert_non_null(cli[0]);
    assert_non_null(cli[1]);
}

static void stop_two(struct cluster *c, struct rkv_client *cli[2])
{
    assert_int_equal(rkv_client_shutdown_servers(cli[0]), 0);
    rkv_client_destroy(cli[0]);
    rkv_client_destroy(cli[1]);
    cluster_stop(c);
}

static const char W0[] =
    "PHASE w=0 p=0 pushes=3 pulls=2 bytes=320 checks=8 skipped=0 errors=0 wall_s=0.001 "
    "max_us=40.0 hist=200:5\n"
    "PHASE w=0 p=1 pushes=2 pulls=3 bytes=320 checks=12 skipped=0 errors=0 wall_s=0.002 "
    "max_us=50.0 hist=210:5\n";
static const char W1_WRONG[] =
    "PHASE w=1 p=0 pushes=3 pulls=2 bytes=320 checks=8 skipped=0 errors=0 wall_s=0.001 "
    "max_us=40.0 hist=200:5\n"
    "PHASE w=1 p=1 pushes=2 pulls=3 bytes=320 checks=12 skipped=0 errors=2 wall_s=0.002 "
    "max_us=50.0 hist=210:5\n"
    "FIRSTERR w=1 p=1 tensor \"t\" row 17 [0]: expected 0, got 1\n";

/* Worker 1's wrong value reaches worker 0, whose own lines are clean, over
 * real servers: the verdict fails and names it. */
static void test_gather_other_workers_error(void **state)
{
    (void)state;
    struct rkv_scenario *sc = load_scenario();
    struct cluster c;
    struct rkv_client *cli[2] = {NULL, NULL};
    join_two(&c, cli);
    char err[512];
    if (rkv_report_send(cli[1], sc, 1, 0, W1_WRONG, strlen(W1_WRONG), err, sizeof(err)) < 0 ||
        rkv_report_send(cli[0], sc, 0, 0, W0, strlen(W0), err, sizeof(err)) < 0)
        fail_msg("send: %s", err);
    struct rkv_report_gathered g;
    if (rkv_report_gather(cli[0], sc, 2000000000ull, &g, err, sizeof(err)) < 0)
        fail_msg("gather: %s", err);
    assert_int_equal(g.missing, 0);
    char *outs[2] = {g.blk[0].text, g.blk[1].text};
    struct rkv_report r;
    assert_int_equal(rkv_report_collect(&r, sc, outs, 2), 0);
    r.processes_ok = 1;
    assert_int_equal(r.phase[1].errors, 2);
    assert_int_equal(r.phase[1].pushes, 4);
    assert_int_equal(rkv_report_passed(&r), 0);
    assert_non_null(strstr(r.first_error, "row 17 [0]: expected 0, got 1"));
    rkv_report_free(&r);
    rkv_report_gathered_free(&g);
    stop_two(&c, cli);
    rkv_scenario_free(sc);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* Worker 1 never reports, then writes garbage into its block: worker 0
 * waits no longer than asked and says why it has nothing from worker 1. */
static void test_gather_missing_and_garbage(void **state)
{
    (void)state;
    struct rkv_scenario *sc = load_scenario();
    struct cluster c;
    struct rkv_client *cli[2] = {NULL, NULL};
    join_two(&c, cli);
    char err[512];
    if (rkv_report_send(cli[0], sc, 0, 0, W0, strlen(W0), err, sizeof(err)) < 0)
        fail_msg("send: %s", err);
    struct rkv_report_gathered g;
    double t0 = now_s();
    assert_int_equal(rkv_report_gather(cli[0], sc, 300000000ull, &g, err, sizeof(err)), 0);
    double waited = now_s() - t0;
    /* The deadline, not a hang: the upper bound is far from it, so that a
     * loaded host cannot fail it. */
    assert_true(waited >= 0.3 && waited < 30);
    assert_int_equal(g.missing, 1);
    assert_non_null(g.blk[0].text);
    assert_null(g.blk[1].text);
    assert_string_equal(g.why[1], "nothing arrived");
    rkv_report_gathered_free(&g);
    /* A block that verifies but claims worker 0's phases: refused at once. */
    uint64_t k = rkv_report_block_bytes(sc) / RKV_REPORT_ROW_BYTES;
    uint8_t *blk = calloc(k, RKV_REPORT_ROW_BYTES);
    assert_non_null(blk);
    size_t used = rkv_report_block_encode(blk, k * RKV_REPORT_ROW_BYTES, 1, 0, W0, strlen(W0));
    uint64_t ids[2] = {k, k + 1};
    assert_true(used <= 2 * RKV_REPORT_ROW_BYTES);
    assert_int_equal(rkv_client_push(cli[1], RKV_REPORT_TENSOR, ids, 2, blk, RKV_OP_ASSIGN, 0), 0);
    t0 = now_s();
    /* "At once": well before a deadline far enough out that a loaded
     * host's scheduling cannot reach it. */
    assert_int_equal(rkv_report_gather(cli[0], sc, 60000000000ull, &g, err, sizeof(err)), 0);
    assert_true(now_s() - t0 < 30);
    assert_int_equal(g.missing, 1);
    assert_null(g.blk[1].text);
    assert_non_null(strstr(g.why[1], "a bad PHASE line: PHASE w=0"));
    rkv_report_gathered_free(&g);
    free(blk);
    stop_two(&c, cli);
    rkv_scenario_free(sc);
}

int main(void)
{
    atexit(kill_stray_child);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_roundtrip),
        cmocka_unit_test(test_block_too_small),
        cmocka_unit_test(test_block_rules),
        cmocka_unit_test(test_block_torn),
        cmocka_unit_test(test_gather_other_workers_error),
        cmocka_unit_test(test_gather_missing_and_garbage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
