/* The built-in scenario (see rkv_scenario_builtin in scenario.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/scenario.h"

static void bi_tensor(struct rkv_scenario *sc, const char *name, enum rkv_dtype dt, uint64_t rows,
                      uint32_t row_len, enum rkv_policy policy)
{
    struct rkv_sc_tensor *t = &sc->tensors[sc->n_tensors++];
    memset(t, 0, sizeof(*t));
    t->desc =
        (struct rkv_tensor_desc){.dtype = dt, .rows = rows, .row_len = row_len, .policy = policy};
    snprintf(t->desc.name, sizeof(t->desc.name), "%s", name);
    t->shape[0] = row_len;
    t->n_shape = 1;
}

static void bi_phase(struct rkv_scenario *sc, const char *name, uint32_t tensor, int op,
                     double push, enum rkv_sc_keys keys, uint32_t rounds)
{
    sc->phases[sc->n_phases++] = (struct rkv_sc_phase){.tensor = tensor,
                                                       .push_fraction = push,
                                                       .push_op = op,
                                                       .lr = 0.5,
                                                       .ids_per_request = 64,
                                                       .keys = keys,
                                                       .zipf_s = 1.2,
                                                       .rounds = rounds,
                                                       .barrier_after = 1};
    snprintf(sc->phases[sc->n_phases - 1].name, sizeof(sc->phases[0].name), "%s", name);
}

int rkv_scenario_builtin(const struct rkv_config *cfg, uint64_t rows, uint32_t rounds,
                         struct rkv_scenario **sc_p)
{
    struct rkv_scenario *sc = calloc(1, sizeof(*sc));
    if (!sc)
        return -RKV_ENOMEM;
    snprintf(sc->path, sizeof(sc->path), "built-in workload");
    sc->seed = cfg->seed;
    sc->oracle_strict = 1;
    sc->machines = cfg->n_machines;
    sc->servers_per_machine = cfg->machines[0].servers;
    sc->workers_total = cfg->n_workers;
    sc->workers_per_machine =
        cfg->n_workers / cfg->n_machines ? cfg->n_workers / cfg->n_machines : 1;
    bi_tensor(sc, "t_sum", RKV_F32, rows, 8, RKV_PART_RANGE);
    bi_tensor(sc, "t_sgd", RKV_F32, rows, 8, RKV_PART_RANGE);
    bi_tensor(sc, "t_isum", RKV_I64, rows, 4, RKV_PART_HASH);
    bi_tensor(sc, "t_assign", RKV_F64, rows, 8, RKV_PART_HASH);
    bi_tensor(sc, "t_contest", RKV_F32, rows, 16, RKV_PART_EXPLICIT);
    struct rkv_sc_tensor *ex = &sc->tensors[4];
    ex->book = malloc(rows * sizeof(*ex->book));
    if (!ex->book) {
        rkv_scenario_free(sc);
        return -RKV_ENOMEM;
    }
    for (uint64_t r = 0; r < rows; r++)
        ex->book[r] = (uint32_t)((r * 5 + 1) % cfg->n_machines);
    ex->desc.book = ex->book;
    uint32_t n = 10 * rounds;
    bi_phase(sc, "sum", 0, RKV_OP_SUM, 0.8, RKV_KEYS_UNIFORM, n);
    bi_phase(sc, "sgd", 1, RKV_OP_SGD, 0.8, RKV_KEYS_UNIFORM, n);
    bi_phase(sc, "i64-sum", 2, RKV_OP_SUM, 0.8, RKV_KEYS_SEQUENTIAL, n);
    bi_phase(sc, "assign", 3, RKV_OP_ASSIGN, 0.6, RKV_KEYS_UNIFORM, n);
    bi_phase(sc, "hot-assign", 4, RKV_OP_ASSIGN, 0.7, RKV_KEYS_ZIPF, n);
    *sc_p = sc;
    return 0;
}
