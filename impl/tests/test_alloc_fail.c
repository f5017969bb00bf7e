/* The client and servers under allocation failure: each allocation of one
 * call, in turn, made to fail, either on the calling thread only (the
 * servers and the client's own progress thread allocate as usual) or on
 * any thread. What must hold whichever one fails: the call either fails
 * before sending anything, and then applied nothing, or its result is
 * what it says; its message says what happened; the order the API
 * promises ("pushes to one row apply in issue order") is kept; and the
 * next call, without the failure, works.
 *
 * The failures come from this binary's own malloc, calloc, realloc,
 * posix_memalign and aligned_alloc, which forward to glibc's and fail the
 * one call a countdown names. A sanitizer's runtime owns those names, so
 * under ASan or TSan the tests skip. */
#include <errno.h>
#include <stdatomic.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rkv.h"

#define TWO_MACHINES_PORT_LO 38000 /* this binary's range */
#define TWO_MACHINES_PORT_SPAN 998
#define TWO_MACHINES_TAG "rkva"
#include "two_machines.h"
#include "under_sanitizer.h"

#define UNDER_SANITIZER (UNDER_ASAN || UNDER_TSAN)

/* ---- the allocator, with one failure on demand ---- */

/* -1: allocate as usual; n >= 0: the n-th allocation from now, counted
 * from 0, fails (once). Per thread: the call under test runs on this one.
 * volatile: the compiler takes malloc for the builtin, which touches no
 * variable of ours, and kept `failed` in a register across the call. */
static _Thread_local volatile long fail_in = -1;
static _Thread_local volatile int failed;
/* The same over every thread (the servers' too): -1, or the count left. */
static _Atomic long fail_any = -1;
static _Atomic int failed_any;

#if !UNDER_SANITIZER
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t k, size_t n);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_memalign(size_t align, size_t n);
extern void __libc_free(void *p);

static int fail_now(void)
{
    if (atomic_load_explicit(&fail_any, memory_order_relaxed) >= 0 &&
        atomic_fetch_sub(&fail_any, 1) == 0) {
        atomic_store(&failed_any, 1);
        errno = ENOMEM;
        return 1;
    }
    if (fail_in < 0)
        return 0;
    if (fail_in-- > 0)
        return 0;
    failed = 1;
    errno = ENOMEM;
    return 1;
}

void *malloc(size_t n)
{
    return fail_now() ? NULL : __libc_malloc(n);
}

void *calloc(size_t k, size_t n)
{
    return fail_now() ? NULL : __libc_calloc(k, n);
}

void *realloc(void *p, size_t n)
{
    return fail_now() ? NULL : __libc_realloc(p, n);
}

void free(void *p)
{
    __libc_free(p);
}

int posix_memalign(void **pp, size_t align, size_t n)
{
    if (align < sizeof(void *) || (align & (align - 1)))
        return EINVAL;
    if (fail_now())
        return ENOMEM;
    void *p = __libc_memalign(align, n);
    if (!p)
        return ENOMEM;
    *pp = p;
    return 0;
}

void *aligned_alloc(size_t align, size_t n)
{
    return fail_now() ? NULL : __libc_memalign(align, n);
}
#endif

/* Arms the n-th allocation of this thread to fail. */
static void fail_alloc(long n)
{
    failed = 0;
    fail_in = n;
}

/* Disarms; whether the armed failure happened. */
static int fail_done(void)
{
    fail_in = -1;
    return failed;
}

/* The same for the n-th allocation of any thread. */
static void fail_alloc_any(long n)
{
    atomic_store(&failed_any, 0);
    atomic_store(&fail_any, n);
}

static int fail_done_any(void)
{
    atomic_store(&fail_any, -1);
    return atomic_load(&failed_any);
}

/* Whether rkv's allocations reach this binary's allocator: not under a
 * sanitizer, nor under valgrind without
 * --soname-synonyms=somalloc=nouserintercepts (it replaces malloc in the
 * executable too). The tests skip otherwise: they would prove nothing.
 * Probed through the library, since a probe here may inline malloc. */
static int injection_works(void)
{
    struct rkv_machine m = {"127.0.0.1", 1, 1};
    struct rkv_config cfg;
    rkv_config_defaults(&cfg);
    cfg.n_machines = 1;
    cfg.machines = &m;
    cfg.n_workers = 1;
    cfg.connect_retry_ms = 1; /* without the failure: port 1 refuses at once */
    struct rkv_client *cli = NULL;
    char err[128];
    fail_alloc(0); /* the first is the node's port, before any connect */
    int rc = rkv_client_create(&cfg, &cli, err, sizeof(err));
    int hit = fail_done();
    if (cli)
        rkv_client_destroy(cli);
    return hit && rc == -RKV_ENOMEM;
}

/* ---- the tests ---- */

/* Range policy: rows 0..49 on machine 0 (the client's), 50..99 on machine 1. */
static const struct rkv_tensor_desc T = {
    .name = "t", .dtype = RKV_F32, .rows = 100, .row_len = 4, .policy = RKV_PART_RANGE};

/* Fresh clients, one a round: more than a first push_async allocates (20
 * when written). A client that left keeps its id, so all join at once. */
#define ROUNDS_MAX 40
#define LATER 10 /* pushes issued, one at a time, behind the one that met the failure */

static float row_of(struct rkv_client *cli, uint64_t id)
{
    float got[4];
    if (rkv_client_pull(cli, "t", &id, 1, got) < 0)
        fail_msg("pull: %s", rkv_client_errmsg(cli));
    return got[0];
}

/* Pulls until the client is connected to both servers of machine 1 (a
 * pull picks one at random): then the push's allocations are the same
 * whichever it picks. */
static void connect_both(struct rkv_client *cli, uint32_t s1, uint32_t s2, uint64_t id)
{
    for (int k = 0; k < 200; k++) {
        struct rkv_op_stats a, b;
        assert_int_equal(rkv_client_peer_stats(cli, s1, RKV_STATS_PULL, &a), 0);
        assert_int_equal(rkv_client_peer_stats(cli, s2, RKV_STATS_PULL, &b), 0);
        if (a.count && b.count)
            return;
        row_of(cli, id);
    }
    fail_msg("200 pulls went to one server of machine 1");
}

struct joiner {
    struct cluster *c;
    struct rkv_client *cli;
    char err[256];
};

static void *join_main(void *arg)
{
    struct joiner *j = arg;
    if (rkv_client_create(&j->c->cfg, &j->cli, j->err, sizeof(j->err)) < 0)
        j->cli = NULL;
    return NULL;
}

/* Pushes in flight to a machine with two servers all go to one of them
 * (its "pin"), so that none overtakes another there. The pin was made
 * after the push was sent, and when that allocation failed the push went
 * on unpinned: each later push_async picked a server at random, and one
 * on the other server could be applied first (a sum is the same either
 * way, but an assign left the older value, and durable mode acknowledged
 * the older push as a duplicate without applying it). Each allocation of a
 * fresh client's first push_async to machine 1 fails in turn; while that
 * push is in flight, LATER pushes, each waited for, must all go to the
 * server it went to, or it must have failed without applying anything. */
static void test_push_order_under_allocation_failure(void **state)
{
    (void)state;
    if (!injection_works())
        skip();
    struct cluster c;
    cluster_config_spm(&c, 5000, 2);
    c.cfg.n_workers = ROUNDS_MAX;
    cluster_start_server(&c, 0);
    cluster_start_server(&c, 1);
    struct joiner j[ROUNDS_MAX];
    pthread_t thr[ROUNDS_MAX];
    for (int k = 0; k < ROUNDS_MAX; k++) {
        j[k] = (struct joiner){.c = &c};
        assert_int_equal(pthread_create(&thr[k], NULL, join_main, &j[k]), 0);
    }
    for (int k = 0; k < ROUNDS_MAX; k++) {
        assert_int_equal(pthread_join(thr[k], NULL), 0);
        if (!j[k].cli)
            fail_msg("client %d: %s", k, j[k].err);
    }
    assert_int_equal(rkv_client_init_data(j[0].cli, &T), 0);
    const uint32_t s1 = 2, s2 = 3; /* machine 1's servers (global ids) */
    const uint64_t id = 77;
    const float one[4] = {1, 1, 1, 1};
    uint32_t refused = 0, sent = 0;
    int n;
    for (n = 0; n < ROUNDS_MAX; n++) {
        struct rkv_client *cli = j[n].cli;
        connect_both(cli, s1, s2, id);
        float before = row_of(cli, id);
        struct rkv_pending *first = NULL;
        fail_alloc(n);
        int rc = rkv_client_push_async(cli, "t", &id, 1, one, RKV_OP_SUM, 0, &first);
        int hit = fail_done();
        if (!hit) { /* every allocation of the call has failed once */
            assert_int_equal(rc, 0);
            assert_int_equal(rkv_client_wait(cli, first), 0);
            break;
        }
        if (rc < 0) {
            /* Refused before anything was sent: nothing applied. */
            assert_null(first);
            assert_true(row_of(cli, id) == before);
            refused++;
            continue;
        }
        sent++;
        for (int k = 0; k < LATER; k++) {
            struct rkv_pending *p;
            assert_int_equal(rkv_client_push_async(cli, "t", &id, 1, one, RKV_OP_SUM, 0, &p), 0);
            assert_int_equal(rkv_client_wait(cli, p), 0);
        }
        /* One part (one machine): a failure inside push_async left it
         * either unsent, which is push_async's own error (rkv.h), or sent
         * whole. A handle whose wait fails was a push never sent. */
        if (rkv_client_wait(cli, first) < 0)
            fail_msg("allocation %d failed: push_async gave a handle, whose wait failed: %s", n,
                     rkv_client_errmsg(cli));
        assert_true(row_of(cli, id) == before + 1 + LATER);
        struct rkv_op_stats a, b;
        assert_int_equal(rkv_client_peer_stats(cli, s1, RKV_STATS_PUSH, &a), 0);
        assert_int_equal(rkv_client_peer_stats(cli, s2, RKV_STATS_PUSH, &b), 0);
        if (a.count && b.count)
            fail_msg("allocation %d failed: pushes in flight together to machine 1 went to both "
                     "of its servers (%llu and %llu), so a later one could overtake an earlier "
                     "one",
                     n, (unsigned long long)a.count, (unsigned long long)b.count);
    }
    if (n == ROUNDS_MAX)
        fail_msg("a first push_async allocates more than %d times now: raise ROUNDS_MAX",
                 ROUNDS_MAX);
    printf("push_async made %d allocations: %u failures refused it, %u let it go out\n", n, refused,
           sent);
    assert_true(refused > 0);
    assert_int_equal(rkv_client_shutdown_servers(j[0].cli), 0);
    for (int k = 0; k < ROUNDS_MAX; k++)
        rkv_client_destroy(j[k].cli);
    cluster_stop(&c);
}

/* Two machines of two servers, a client of machine 0 joined to both of
 * machine 1's servers, T made; durable_dir: "" or the servers' log
 * directory. Returns the client; connected_stop ends it all. */
static struct rkv_client *connected_start(struct cluster *c, const char *durable_dir)
{
    cluster_config_spm(c, 3000, 2);
    snprintf(c->cfg.durable_dir, sizeof(c->cfg.durable_dir), "%s", durable_dir);
    cluster_start_server(c, 0);
    cluster_start_server(c, 1);
    struct rkv_client *cli = client_join(c);
    assert_int_equal(rkv_client_init_data(cli, &T), 0);
    connect_both(cli, 2, 3, 77);
    return cli;
}

static void connected_stop(struct cluster *c, struct rkv_client *cli)
{
    assert_int_equal(rkv_client_shutdown_servers(cli), 0);
    rkv_client_destroy(cli);
    cluster_stop(c);
}

enum call { CALL_PUSH, CALL_PUSH_ASYNC, CALL_PULL, CALL_BARRIER, CALL_META, CALL_LIST, CALL_N };
static const char *const call_name[CALL_N] = {"push",    "push_async", "pull",
                                              "barrier", "meta",       "list"};

static int do_call(struct rkv_client *cli, enum call k, const uint64_t *ids, float *rows)
{
    switch (k) {
    case CALL_PUSH:
        return rkv_client_push(cli, "t", ids, 2, rows, RKV_OP_SUM, 0);
    case CALL_PUSH_ASYNC: {
        struct rkv_pending *p = NULL;
        int rc = rkv_client_push_async(cli, "t", ids, 2, rows, RKV_OP_SUM, 0, &p);
        if (rc < 0) {
            assert_null(p);
            return rc;
        }
        return rkv_client_wait(cli, p);
    }
    case CALL_PULL:
        return rkv_client_pull(cli, "t", ids, 2, rows);
    case CALL_BARRIER:
        return rkv_client_barrier(cli);
    case CALL_META: {
        struct rkv_tensor_meta m;
        int rc = rkv_client_meta(cli, "t", &m);
        assert_true(rc < 0 || m.rows == T.rows);
        return rc;
    }
    case CALL_LIST: {
        struct rkv_tensor_meta m[4];
        size_t got = 0;
        int rc = rkv_client_list(cli, m, 4, &got);
        assert_true(rc < 0 || (got == 1 && strcmp(m[0].name, "t") == 0));
        return rc;
    }
    case CALL_N:
        break;
    }
    return -1;
}

/* Each allocation of each call, failed in turn on a client that is
 * already connected (rows of both machines: one applied in place, one
 * over the network). The call returns 0, or a negative code with a
 * message, never crashes or hangs; a sum is applied once or (on error)
 * at most once per row; and the next call, without the failure, works:
 * one failed allocation does not break the client. */
static void test_calls_under_allocation_failure(void **state)
{
    (void)state;
    if (!injection_works())
        skip();
    struct cluster c;
    struct rkv_client *cli = connected_start(&c, "");
    const uint64_t ids[2] = {3, 77}; /* machine 0's, machine 1's */
    float base[8], got[8];
    assert_int_equal(rkv_client_pull(cli, "t", ids, 2, base), 0);
    for (int k = 0; k < CALL_N; k++) {
        int n, failures = 0;
        for (n = 0; n < 1000; n++) {
            float rows[8] = {1, 1, 1, 1, 1, 1, 1, 1};
            fail_alloc(n);
            int rc = do_call(cli, (enum call)k, ids, rows);
            int hit = fail_done();
            if (rc < 0) {
                failures++;
                if (!rkv_client_errmsg(cli)[0])
                    fail_msg("%s, allocation %d failed: %d without a message", call_name[k], n, rc);
            }
            if (!hit && rc < 0)
                fail_msg("%s failed without a failed allocation: %s", call_name[k],
                         rkv_client_errmsg(cli));
            /* The client works on. */
            if (rkv_client_pull(cli, "t", ids, 2, got) < 0)
                fail_msg("%s, allocation %d failed (%s); the next pull failed: %s", call_name[k], n,
                         rc < 0 ? "it failed" : "it succeeded", rkv_client_errmsg(cli));
            for (int r = 0; r < 2; r++) {
                float d = got[4 * r] - base[4 * r];
                int pushed = k == CALL_PUSH || k == CALL_PUSH_ASYNC;
                if (!(d == (pushed && rc == 0 ? 1.0f : 0.0f) || (pushed && rc < 0 && d == 1.0f)))
                    fail_msg("%s, allocation %d failed (rc %d): row %llu moved by %g", call_name[k],
                             n, rc, (unsigned long long)ids[r], (double)d);
            }
            memcpy(base, got, sizeof(base));
            if (!hit)
                break;
        }
        printf("%s: %d allocations, %d of them failed the call\n", call_name[k], n, failures);
    }
    connected_stop(&c, cli);
}

/* A tensor's creation, with each allocation of any thread (the client's,
 * the servers', their engines') failed in turn: init_data fails with a
 * message or succeeds; a failure is said as it is, not as a timeout; and
 * the same init_data again, without the failure, makes a tensor that
 * works on every machine. */
static void test_init_under_allocation_failure(void **state)
{
    (void)state;
    if (!injection_works())
        skip();
    struct cluster c;
    struct rkv_client *cli = connected_start(&c, "");
    const uint64_t ids[2] = {3, 77};
    int n;
    for (n = 0; n < 400; n++) {
        struct rkv_tensor_desc d = T;
        snprintf(d.name, sizeof(d.name), "u%d", n);
        fail_alloc_any(n);
        int rc = rkv_client_init_data(cli, &d);
        int hit = fail_done_any();
        if (!hit && rc < 0)
            fail_msg("init_data failed without a failed allocation: %s", rkv_client_errmsg(cli));
        if (rc < 0 && (!strstr(rkv_client_errmsg(cli), rkv_strerror(rc)) ||
                       (rc != -RKV_ETIMEDOUT && strstr(rkv_client_errmsg(cli), " ms"))))
            fail_msg("allocation %d failed: init_data said \"%s\" for %s", n,
                     rkv_client_errmsg(cli), rkv_strerror(rc));
        if (rc < 0 && rkv_client_init_data(cli, &d) < 0)
            fail_msg("allocation %d failed (%s); init_data again failed: %s", n, rkv_strerror(rc),
                     rkv_client_errmsg(cli));
        float rows[8] = {1, 1, 1, 1, 2, 2, 2, 2}, got[8];
        if (rkv_client_push(cli, d.name, ids, 2, rows, RKV_OP_SUM, 0) < 0 ||
            rkv_client_pull(cli, d.name, ids, 2, got) < 0)
            fail_msg("allocation %d failed: the tensor made then does not work: %s", n,
                     rkv_client_errmsg(cli));
        assert_memory_equal(got, rows, sizeof(rows));
        if (!hit)
            break;
    }
    printf("init_data: %d allocations on every thread\n", n);
    connected_stop(&c, cli);
}

/* Durable mode (every push goes through a server, whose acknowledgement
 * waits for the log): each allocation of a push's, on any thread, failed
 * in turn. A server that answers its part with an error must not have
 * applied it: its acknowledgement's place was allocated after the push was
 * applied and logged, so a failure there answered an error for an applied
 * push. A failure in this client may leave one machine's part applied (the
 * parts go one after another); rkv.h says so. */
static void test_durable_push_under_allocation_failure(void **state)
{
    (void)state;
    if (!injection_works())
        skip();
    struct cluster c;
    char dir[] = "/tmp/rkv-alloc-XXXXXX";
    assert_non_null(mkdtemp(dir));
    struct rkv_client *cli = connected_start(&c, dir);
    const uint64_t ids[2] = {3, 77}; /* machine 0's, machine 1's */
    float base[8], got[8];
    assert_int_equal(rkv_client_pull(cli, "t", ids, 2, base), 0);
    /* The other threads allocate too (the durable task, the progress
     * tasks), so which allocation the countdown meets varies: sweeps go on
     * until one met a server's. */
    int refused_by_server = 0;
    for (int sweep = 0; sweep < 10 && !refused_by_server; sweep++) {
        for (int k = CALL_PUSH; k <= CALL_PUSH_ASYNC; k++) {
            int n;
            for (n = 0; n < 400; n++) {
                float rows[8] = {1, 1, 1, 1, 1, 1, 1, 1};
                fail_alloc_any(n);
                int rc = do_call(cli, (enum call)k, ids, rows);
                int hit = fail_done_any();
                char msg[512];
                snprintf(msg, sizeof(msg), "%s", rkv_client_errmsg(cli));
                if (rkv_client_pull(cli, "t", ids, 2, got) < 0)
                    fail_msg("%s, allocation %d failed; the next pull failed: %s", call_name[k], n,
                             rkv_client_errmsg(cli));
                for (int r = 0; r < 2; r++) {
                    float d = got[4 * r] - base[4 * r];
                    /* Machine r's servers are 2r and 2r + 1. */
                    char srv_a[32], srv_b[32];
                    snprintf(srv_a, sizeof(srv_a), "server %d:", 2 * r);
                    snprintf(srv_b, sizeof(srv_b), "server %d:", 2 * r + 1);
                    int refused = rc < 0 && (strstr(msg, srv_a) || strstr(msg, srv_b));
                    refused_by_server += refused;
                    if (rc == 0 ? d != 1.0f : (refused ? d != 0.0f : (d != 0.0f && d != 1.0f)))
                        fail_msg("%s, allocation %d failed (%s): row %llu moved by %g",
                                 call_name[k], n, rc < 0 ? msg : "it succeeded",
                                 (unsigned long long)ids[r], (double)d);
                }
                memcpy(base, got, sizeof(base));
                if (!hit)
                    break;
            }
            printf("durable %s: %d allocations\n", call_name[k], n);
        }
    }
    printf("durable: %d parts refused by a server\n", refused_by_server);
    assert_true(refused_by_server > 0); /* the server side was reached */
    connected_stop(&c, cli);
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* Joining (the port, the NIC, connecting, HELLO), with each allocation of
 * the calling thread failed in turn, on a fresh cluster each time: the
 * error is -RKV_ENOMEM and says so ("cannot connect ...: I/O error" was
 * getaddrinfo's EAI_MEMORY; "cannot open the tcp NIC" said no why); and
 * the same create again, without the failure, joins and works. */
static void test_join_under_allocation_failure(void **state)
{
    (void)state;
    if (!injection_works())
        skip();
    int n;
    for (n = 0; n < 400; n++) {
        struct cluster c;
        cluster_config_spm(&c, 3000, 2);
        cluster_start_server(&c, 0);
        cluster_start_server(&c, 1);
        struct rkv_client *cli = NULL;
        char err[256] = "";
        fail_alloc(n);
        int rc = rkv_client_create(&c.cfg, &cli, err, sizeof(err));
        int hit = fail_done();
        if (rc < 0) {
            assert_null(cli);
            if (rc != -RKV_ENOMEM || !strstr(err, "out of memory"))
                fail_msg("allocation %d failed: rkv_client_create gave %d: %s", n, rc, err);
            if (rkv_client_create(&c.cfg, &cli, err, sizeof(err)) < 0)
                fail_msg("allocation %d failed; the next create failed: %s", n, err);
        }
        if (rkv_client_init_data(cli, &T) < 0)
            fail_msg("allocation %d failed (%s): then init_data failed: %s", n,
                     rc < 0 ? "create failed" : "create succeeded", rkv_client_errmsg(cli));
        assert_int_equal(rkv_client_shutdown_servers(cli), 0);
        rkv_client_destroy(cli);
        cluster_stop(&c);
        if (!hit)
            break;
    }
    printf("rkv_client_create: %d allocations\n", n);
    assert_true(n > 0 && n < 400);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_push_order_under_allocation_failure),
        cmocka_unit_test(test_calls_under_allocation_failure),
        cmocka_unit_test(test_init_under_allocation_failure),
        cmocka_unit_test(test_durable_push_under_allocation_failure),
        cmocka_unit_test(test_join_under_allocation_failure),
    };
    /* RKV_TEST_FILTER=test_join* (a glob) runs only what it names. */
    const char *filter = getenv("RKV_TEST_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
