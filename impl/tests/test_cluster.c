/* The machine table's derived forms (store/cluster.c) against the plain
 * walks they replace, and the id map of per-peer state. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "rkv.h"
#include "store/cluster.h"
#include "store/store_int.h"

static void config(struct rkv_config *cfg, struct rkv_machine *mc, uint32_t n, int uniform)
{
    rkv_config_defaults(cfg);
    for (uint32_t m = 0; m < n; m++) {
        snprintf(mc[m].host, sizeof(mc[m].host), "h%u", m);
        mc[m].base_port = (uint16_t)(7000 + m);
        mc[m].servers = uniform ? 3 : 1 + (m * 7) % 5;
    }
    cfg->machines = mc;
    cfg->n_machines = n;
    cfg->n_workers = 5;
}

/* Server ids and machines as the config's walk gives them, for uniform and
 * uneven machines; the fingerprint is rkv_cfg_fingerprint's. */
static void test_ids_match_the_walk(void **state)
{
    (void)state;
    static struct rkv_machine mc[300];
    for (int uniform = 0; uniform < 2; uniform++) {
        struct rkv_config cfg;
        config(&cfg, mc, 300, uniform);
        char err[128];
        struct rkv_cluster *cl;
        assert_int_equal(rkv_cluster_create(&cfg, 1, &cl, err, sizeof(err)), 0);
        assert_int_equal(cl->n_servers, rkv_cfg_n_servers(&cfg));
        assert_int_equal(cl->first == NULL, uniform);
        assert_ptr_not_equal(cl->machines, mc); /* a copy */
        for (uint32_t m = 0; m < 300; m++) {
            for (uint32_t l = 0; l < mc[m].servers; l++) {
                uint32_t id = rkv_cfg_server_id(&cfg, m, l);
                assert_int_equal(rkv_cluster_server_id(cl, m, l), id);
                assert_int_equal(rkv_cluster_machine_of(cl, id), m);
            }
        }
        assert_true(rkv_cluster_fingerprint(cl, &cfg) == rkv_cfg_fingerprint(&cfg));
        /* Another config over the same machines: computed, not the stored one. */
        struct rkv_config other = cfg;
        other.n_workers = 6;
        assert_true(rkv_cluster_fingerprint(cl, &other) == rkv_cfg_fingerprint(&other));
        assert_true(rkv_cluster_fingerprint(cl, &other) != cl->fp);
        rkv_cluster_destroy(cl);
    }
}

/* A shared table must describe the config's machine table. */
static void test_shared_must_match(void **state)
{
    (void)state;
    static struct rkv_machine mc[8], mc2[8];
    struct rkv_config cfg, cfg2;
    config(&cfg, mc, 8, 1);
    config(&cfg2, mc2, 8, 1);
    char err[160];
    struct rkv_cluster *cl, *own;
    const struct rkv_cluster *got;
    assert_int_equal(rkv_cluster_create(&cfg, 0, &cl, err, sizeof(err)), 0);
    assert_ptr_equal(cl->machines, mc); /* referred to, not copied */
    cfg.shared = cl;
    assert_int_equal(rkv_cluster_of(&cfg, &got, &own, err, sizeof(err)), 0);
    assert_ptr_equal(got, cl);
    assert_null(own);
    cfg2.shared = cl;
    assert_int_equal(rkv_cluster_of(&cfg2, &got, &own, err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, "another machine table"));
    cfg2.shared = NULL;
    assert_int_equal(rkv_cluster_of(&cfg2, &got, &own, err, sizeof(err)), 0);
    assert_ptr_equal(got, own);
    rkv_cluster_destroy(own);
    rkv_cluster_destroy(cl);
}

static void test_idmap(void **state)
{
    (void)state;
    struct rkv_idmap m = {0};
    assert_null(rkv_idmap_find(&m, 0));
    enum { N = 5000 };
    for (uint32_t i = 0; i < N; i++) {
        uint32_t key = i * 2654435761u % 1000003u; /* distinct: i < the prime */
        uint64_t *v = rkv_idmap_get(&m, key);
        assert_non_null(v);
        assert_int_equal(*v, 0);
        *v = (uint64_t)i << 32 | key;
    }
    assert_int_equal(m.n, N);
    assert_true(m.cap >= 2 * N);
    for (uint32_t i = 0; i < N; i++) {
        uint32_t key = i * 2654435761u % 1000003u;
        uint64_t *v = rkv_idmap_find(&m, key);
        assert_non_null(v);
        assert_true(*v == ((uint64_t)i << 32 | key));
        assert_ptr_equal(rkv_idmap_get(&m, key), v); /* present: not inserted again */
    }
    assert_int_equal(m.n, N);
    assert_null(rkv_idmap_find(&m, 1000003u));
    rkv_idmap_free(&m);
    assert_null(rkv_idmap_find(&m, 0));
}

/* Keys whose home is the last slot of the first table (8 slots), so their
 * run wraps to slot 0: each removal, in every position of the run, must
 * leave the others findable (backward shift across the wrap). */
static void test_ptrmap_wrapping_run(void **state)
{
    (void)state;
    enum { K = 5 }; /* 6 would grow the table (3/4 full) */
    uint64_t keys[K];
    int n = 0;
    for (uint64_t k = 1; n < K; k++)
        if ((rkv_mix64(k) & 7) == 7)
            keys[n++] = k;
    static char objs[K];
    for (int gone = 0; gone < K; gone++) {
        struct rkv_ptrmap m = {0};
        for (int i = 0; i < K; i++)
            assert_int_equal(rkv_ptrmap_put(&m, keys[i], &objs[i]), 0);
        assert_int_equal(m.cap, 8);
        rkv_ptrmap_del(&m, keys[gone], &objs[gone]);
        assert_int_equal(m.n, K - 1);
        for (int i = 0; i < K; i++)
            assert_ptr_equal(rkv_ptrmap_find(&m, keys[i]), i == gone ? NULL : &objs[i]);
        rkv_ptrmap_free(&m);
    }
}

/* The pointer map against a plain array, through random puts, replacing
 * puts and removals (some of a pointer no longer under its key), keys
 * that differ only in their high bits: every find agrees, and removing
 * the entries one by one empties it. */
static void test_ptrmap(void **state)
{
    (void)state;
    enum { K = 3000, OPS = 60000 };
    static char objs[2][K];
    void *ref[K] = {0};
    struct rkv_ptrmap m = {0};
    assert_null(rkv_ptrmap_find(&m, 7));
    rkv_ptrmap_del(&m, 7, &objs[0][7]); /* empty: nothing to take */
    uint64_t rng = 12345;
    uint32_t n = 0;
    for (int op = 0; op < OPS; op++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t k = (uint32_t)(rng >> 33) % K;
        uint64_t key = (uint64_t)k << 40 | 0xabc; /* only the high bits differ */
        void *v = &objs[(rng >> 20) & 1][k];
        if ((rng >> 24) % 3) {
            assert_int_equal(rkv_ptrmap_put(&m, key, v), 0);
            n += !ref[k];
            ref[k] = v;
        } else {
            rkv_ptrmap_del(&m, key, v);
            if (ref[k] == v) {
                ref[k] = NULL;
                n--;
            }
        }
        assert_int_equal(m.n, n);
        if (op % 97 == 0)
            for (uint32_t j = 0; j < K; j++)
                assert_ptr_equal(rkv_ptrmap_find(&m, (uint64_t)j << 40 | 0xabc), ref[j]);
    }
    assert_true(4 * (uint64_t)m.n <= 3 * (uint64_t)m.cap);
    for (uint32_t j = 0; j < K; j++) {
        rkv_ptrmap_del(&m, (uint64_t)j << 40 | 0xabc, ref[j]);
        for (uint32_t i = j + 1; i < K && j % 199 == 0; i++)
            assert_ptr_equal(rkv_ptrmap_find(&m, (uint64_t)i << 40 | 0xabc), ref[i]);
    }
    assert_int_equal(m.n, 0);
    rkv_ptrmap_free(&m);
    assert_null(rkv_ptrmap_find(&m, 0));
}

/* A library user's rkv_config.verbs is checked like the settings: a value
 * out of range, or an MTU that is none, is refused by its field's name. */
static void test_cfg_check_verbs(void **state)
{
    (void)state;
    char err[256];
    struct rkv_machine m = {.host = "127.0.0.1", .base_port = 29500, .servers = 1};
    struct rkv_config cfg;
    rkv_config_defaults(&cfg);
    cfg.n_machines = 1;
    cfg.machines = &m;
    cfg.n_workers = 1;
    if (rkv_cfg_check(&cfg, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    cfg.verbs.sl = 99; /* not applied: its bit is clear */
    assert_int_equal(rkv_cfg_check(&cfg, err, sizeof(err)), 0);
    cfg.verbs.tos = 46;
    cfg.verbs.mtu = 4096;
    cfg.verbs.set = RKV_VERBS_SET_TOS | RKV_VERBS_SET_MTU;
    assert_int_equal(rkv_cfg_check(&cfg, err, sizeof(err)), 0);
    cfg.verbs.set |= RKV_VERBS_SET_SL;
    assert_int_equal(rkv_cfg_check(&cfg, err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, "verbs.sl: 99 is out of range (0..15)"));
    cfg.verbs.set &= ~(uint32_t)RKV_VERBS_SET_SL;
    cfg.verbs.mtu = 0;
    assert_int_equal(rkv_cfg_check(&cfg, err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, "verbs.mtu: 0 is not an RDMA MTU"));
    cfg.verbs.set = 64;
    assert_int_equal(rkv_cfg_check(&cfg, err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, "verbs.set: unknown bits 0x40"));
    cfg.verbs.set = 0;
    memset(cfg.verbs.dev, 'x', sizeof(cfg.verbs.dev));
    assert_int_equal(rkv_cfg_check(&cfg, err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, "verbs.dev is not terminated"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ids_match_the_walk),
        cmocka_unit_test(test_shared_must_match),
        cmocka_unit_test(test_idmap),
        cmocka_unit_test(test_ptrmap),
        cmocka_unit_test(test_ptrmap_wrapping_run),
        cmocka_unit_test(test_cfg_check_verbs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
