/* The oracle (see oracle.h): replays every worker's deterministic request
 * stream to know, after each barrier, what each row must hold. */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/oracle.h"
#include "store/pbook.h"

#define OR_NONE 0xffffffffu
#define OR_MULTI 0xfffffffeu
#define OR_INIT_PHASE 0xffffu /* or_cand.phase: the initial value */
#define OR_NO_PHASE 0xffffu   /* or_cand.phase: no candidate */

/* A write a row may show: the push of worker in phase and round, at
 * position pos of its request (only its low 16 bits: what the value
 * depends on, so that duplicates of one id carry different rows). */
struct or_cand {
    uint32_t worker, round;
    uint16_t phase, pos;
};

/* A sum of pushes: a double for float tensors; for integer ones the
 * store's own arithmetic, modulo 2^64 (an i32's is the low half), since
 * their pushes carry the dtype's whole range (rkv_wl_ivalue). */
union or_num {
    double d;
    uint64_t u;
};

struct or_tensor {
    const struct rkv_sc_tensor *t;
    uint64_t rows;
    uint32_t L;
    uint32_t *n_cand;      /* rows */
    struct or_cand *cand;  /* rows x ccap */
    uint32_t ccap;         /* W if the tensor is ever assigned (one candidate per writer), else 1 */
    union or_num *delta;   /* rows x L: .u for integer tensors, .d for floats */
    uint32_t *writer;      /* rows: who pushes it this epoch */
    int inexact;           /* sums over non-integers: compare with a tolerance */
    double *round_err;     /* rows, inexact only: the store's rounding so far (or_fold) */
    uint32_t *adds;        /* rows, inexact only: the store's adds to the row so far */
    double *sig;           /* rows, inexact only: each add's largest term, squared, summed */
    uint32_t *machine_of;  /* rows */
    uint64_t **local_pool; /* per machine */
    uint64_t *n_local;
    double *zipf_cdf;
};

/* A worker's own pushes of this epoch (read-your-writes), kept sparse: one
 * entry per (worker, tensor, row) it pushed, so that one oracle can serve
 * thousands of workers (the twin shares it). */
struct or_own {
    uint64_t row;
    uint32_t worker, tensor; /* worker == OR_NONE: empty slot */
    struct or_cand last;     /* phase == OR_NO_PHASE: no assign */
    uint64_t delta;          /* offset of L numbers in own_pool */
    double round_err;        /* the store's rounding of those sums (or_round_err) */
    uint32_t adds;           /* how many */
    double sig;              /* their largest terms squared, summed (or_tensor.sig) */
};

struct rkv_oracle {
    const struct rkv_scenario *sc;
    uint32_t W;
    struct or_tensor t[RKV_SC_MAX_TENSORS];
    uint32_t ep_first, ep_last;
    int ep_state;             /* 0 none, 1 begun, 2 ended: shared oracles move once */
    uint32_t refs;            /* workers using it */
    struct or_cand *tmp_last; /* scratch: rows of the largest tensor */
    struct or_own *own;       /* open addressing, own_cap slots */
    uint64_t own_cap, own_len;
    union or_num *own_pool;
    uint64_t pool_len, pool_cap;
    FILE *pin_log; /* rkv_oracle_set_pin_log */
};

static uint32_t or_machine_of_worker(const struct rkv_scenario *sc, uint32_t w)
{
    return rkv_scenario_worker_machine(sc, w);
}

static uint64_t wl_hash(const struct rkv_scenario *sc, uint32_t tensor, uint64_t row,
                        uint32_t phase, uint32_t worker, uint32_t round, uint32_t pos, uint32_t j)
{
    uint64_t h = rkv_mix64(sc->seed ^
                           rkv_mix64(((uint64_t)tensor << 48) ^ ((uint64_t)phase << 32) ^ worker));
    h = rkv_mix64(h ^ rkv_mix64(row * 0x9e3779b97f4a7c15ull ^ ((uint64_t)round << 20) ^ j));
    /* The id's position in its request too: duplicates of one id in a
     * request carried the same row, so an assign that kept the first
     * instead of the last passed every seed (a mutant found it). */
    return rkv_mix64(h ^ (uint64_t)(pos & 0xffffu) * 0xd6e8feb86659fd93ull);
}

double rkv_wl_value(const struct rkv_scenario *sc, uint32_t tensor, uint64_t row, uint32_t phase,
                    uint32_t worker, uint32_t round, uint32_t pos, uint32_t j)
{
    uint64_t h = wl_hash(sc, tensor, row, phase, worker, round, pos, j);
    if (sc->phases[phase].push_op == RKV_OP_ASSIGN)
        return (double)(h & 0xfffff); /* 20 bits: exact in every dtype */
    return (double)(h % 17) - 8.0;    /* small integers: float sums stay exact */
}

int64_t rkv_wl_ivalue(const struct rkv_scenario *sc, uint32_t tensor, uint64_t row, uint32_t phase,
                      uint32_t worker, uint32_t round, uint32_t pos, uint32_t j)
{
    uint64_t h = wl_hash(sc, tensor, row, phase, worker, round, pos, j);
    if (sc->phases[phase].push_op == RKV_OP_ASSIGN)
        return (int64_t)(h & 0xfffff);
    /* The dtype's whole range: sums wrap, as rkv.h promises. With small
     * values a store that summed i64 rows in doubles (wrong past 2^53)
     * passed every scenario and swarm seed (an outside tester). */
    return sc->tensors[tensor].desc.dtype == RKV_I32 ? (int64_t)(int32_t)(uint32_t)h : (int64_t)h;
}

/* The store's documented uniform init (rkv.h), computed here on its own. */
static double or_init_value(const struct rkv_sc_tensor *t, uint64_t row, uint32_t j)
{
    if (t->desc.init != RKV_INIT_UNIFORM)
        return 0;
    uint64_t x = rkv_mix64(t->desc.init_seed ^ rkv_mix64(row * 0x9e3779b97f4a7c15ull + j));
    double v = (double)(x >> 11) * 0x1.0p-53 * 2.0 - 1.0;
    switch (t->desc.dtype) {
    case RKV_F32:
        return (double)(float)v;
    case RKV_I32:
    case RKV_I64:
        return floor(v * 1000.0);
    default:
        return v;
    }
}

/* ---- request streams ---- */

static const double *or_zipf(struct rkv_oracle *o, uint32_t ti, double s)
{
    struct or_tensor *ot = &o->t[ti];
    if (!ot->zipf_cdf) {
        ot->zipf_cdf = malloc(ot->rows * sizeof(double));
        if (!ot->zipf_cdf)
            return NULL;
        double acc = 0;
        for (uint64_t r = 0; r < ot->rows; r++)
            ot->zipf_cdf[r] = acc += 1.0 / pow((double)(r + 1), s);
        for (uint64_t r = 0; r < ot->rows; r++)
            ot->zipf_cdf[r] /= acc;
    }
    return ot->zipf_cdf;
}

static void or_pool(struct rkv_oracle *o, uint32_t ti, uint32_t m, const uint64_t **pool,
                    uint64_t *n)
{
    struct or_tensor *ot = &o->t[ti];
    *pool = ot->local_pool ? ot->local_pool[m] : NULL;
    *n = ot->local_pool ? ot->n_local[m] : 0;
}

void rkv_wl_gen_init(struct rkv_wl_gen *g, struct rkv_oracle *o, uint32_t phase, uint32_t worker)
{
    const struct rkv_scenario *sc = o->sc;
    const struct rkv_sc_phase *p = &sc->phases[phase];
    memset(g, 0, sizeof(*g));
    g->sc = sc;
    g->phase = phase;
    g->worker = worker;
    g->machine = or_machine_of_worker(sc, worker);
    rkv_rng_seed(&g->rng, sc->seed ^ rkv_mix64(0x5eed0000ull + phase), worker);
    g->ids = malloc(p->ids_per_request * sizeof(*g->ids));
    if (p->keys == RKV_KEYS_ZIPF)
        g->zipf_cdf = or_zipf(o, p->tensor, p->zipf_s);
    if (p->keys == RKV_KEYS_LOCAL_ONLY || p->keys == RKV_KEYS_REMOTE_ONLY)
        or_pool(o, p->tensor, g->machine, &g->pool, &g->n_pool);
    g->pool = g->n_pool ? g->pool : NULL;
    g->machine_of = o->t[p->tensor].machine_of;
}

static uint64_t gen_zipf(struct rkv_wl_gen *g, uint64_t rows)
{
    double u = rkv_rng_double(&g->rng);
    uint64_t lo = 0, hi = rows - 1;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (g->zipf_cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The i-th row (from 0) that is not in the machine's pool (sorted, n_pool
 * rows): the first pool[j] with pool[j] - j > i (rows before it that are
 * not local) is past it, so it is i + j. */
static uint64_t gen_nth_remote(const struct rkv_wl_gen *g, uint64_t i)
{
    uint64_t lo = 0, hi = g->n_pool;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (g->pool[mid] - mid > i)
            hi = mid;
        else
            lo = mid + 1;
    }
    return i + lo;
}

int rkv_wl_gen_check(const struct rkv_wl_gen *g, char *why, size_t why_len)
{
    const struct rkv_sc_phase *p = &g->sc->phases[g->phase];
    const struct rkv_sc_tensor *t = &g->sc->tensors[p->tensor];
    if (p->keys == RKV_KEYS_LOCAL_ONLY && g->n_pool == 0)
        snprintf(why, why_len,
                 "phase \"%s\": keys: local-only, but machine %u (worker w%u) owns no rows of "
                 "tensor \"%s\"",
                 p->name, g->machine, g->worker, t->desc.name);
    else if (p->keys == RKV_KEYS_REMOTE_ONLY && g->n_pool >= t->desc.rows)
        snprintf(why, why_len,
                 "phase \"%s\": keys: remote-only, but machine %u (worker w%u) owns every row "
                 "of tensor \"%s\", so it has no remote rows",
                 p->name, g->machine, g->worker, t->desc.name);
    else
        return 0;
    return -RKV_ECONFIG;
}

static uint64_t gen_id(struct rkv_wl_gen *g, const struct rkv_sc_phase *p, uint64_t rows,
                       uint32_t k)
{
    switch (p->keys) {
    case RKV_KEYS_ZIPF:
        if (g->zipf_cdf)
            return gen_zipf(g, rows);
        break;
    case RKV_KEYS_SEQUENTIAL:
        return ((uint64_t)g->round * p->ids_per_request + k +
                (uint64_t)g->worker * (rows / (g->sc->machines * g->sc->workers_per_machine))) %
               rows;
    case RKV_KEYS_LOCAL_ONLY:
        if (g->pool)
            return g->pool[rkv_rng_below(&g->rng, g->n_pool)];
        break;
    case RKV_KEYS_REMOTE_ONLY:
        /* Rejection sampling: cheap while most rows are remote. */
        for (int tries = 0; tries < 64 && g->sc->machines > 1; tries++) {
            uint64_t r = rkv_rng_below(&g->rng, rows);
            if (g->machine_of[r] != g->machine)
                return r;
        }
        /* A machine that owns most rows misses every time (one remote row
         * in 100: 0.99^64, every other id), and a uniform row was taken
         * instead, local as often as not: draw among the remote ones. */
        if (g->n_pool < rows)
            return gen_nth_remote(g, rkv_rng_below(&g->rng, rows - g->n_pool));
        break; /* none (rkv_wl_gen_check) */
    default:
        break;
    }
    return rkv_rng_below(&g->rng, rows);
}

void rkv_wl_gen_next(struct rkv_wl_gen *g, struct rkv_wl_req *req)
{
    const struct rkv_sc_phase *p = &g->sc->phases[g->phase];
    uint64_t rows = g->sc->tensors[p->tensor].desc.rows;
    req->push = rkv_rng_double(&g->rng) < p->push_fraction;
    req->n = p->ids_per_request;
    req->ids = g->ids;
    for (uint32_t k = 0; k < req->n; k++)
        g->ids[k] = gen_id(g, p, rows, k);
    g->round++;
}

void rkv_wl_gen_free(struct rkv_wl_gen *g)
{
    free(g->ids);
    g->ids = NULL;
}

/* ---- oracle state ---- */

static int or_tensor_init(struct rkv_oracle *o, uint32_t i)
{
    const struct rkv_scenario *sc = o->sc;
    struct or_tensor *ot = &o->t[i];
    ot->t = &sc->tensors[i];
    ot->rows = ot->t->desc.rows;
    ot->L = ot->t->desc.row_len;
    ot->ccap = 1;
    for (uint32_t p = 0; p < sc->n_phases; p++)
        if (sc->phases[p].tensor == i && sc->phases[p].push_op == RKV_OP_ASSIGN)
            ot->ccap = o->W;
    ot->n_cand = calloc(ot->rows, sizeof(*ot->n_cand));
    ot->cand = calloc(ot->rows * ot->ccap, sizeof(*ot->cand));
    ot->delta = calloc(ot->rows * ot->L, sizeof(*ot->delta));
    ot->round_err = calloc(ot->rows, sizeof(*ot->round_err));
    ot->adds = calloc(ot->rows, sizeof(*ot->adds));
    ot->sig = calloc(ot->rows, sizeof(*ot->sig));
    ot->writer = malloc(ot->rows * sizeof(*ot->writer));
    ot->machine_of = malloc(ot->rows * sizeof(*ot->machine_of));
    ot->local_pool = calloc(sc->machines, sizeof(*ot->local_pool));
    ot->n_local = calloc(sc->machines, sizeof(*ot->n_local));
    if (!ot->n_cand || !ot->cand || !ot->delta || !ot->round_err || !ot->adds || !ot->sig ||
        !ot->writer || !ot->machine_of || !ot->local_pool || !ot->n_local)
        return -RKV_ENOMEM;
    for (uint64_t r = 0; r < ot->rows; r++) {
        ot->n_cand[r] = 1;
        ot->cand[r * ot->ccap] = (struct or_cand){.phase = OR_INIT_PHASE};
    }
    struct rkv_pbook pb;
    int rc = rkv_pbook_init(&pb, ot->t->desc.policy, ot->rows, sc->machines, ot->t->book, NULL, 0);
    if (rc < 0)
        return rc;
    for (uint64_t r = 0; r < ot->rows; r++)
        ot->n_local[ot->machine_of[r] = rkv_pbook_machine(&pb, r)]++;
    rkv_pbook_free(&pb);
    for (uint32_t m = 0; m < sc->machines; m++) {
        ot->local_pool[m] = malloc((ot->n_local[m] + 1) * sizeof(uint64_t));
        if (!ot->local_pool[m])
            return -RKV_ENOMEM;
        ot->n_local[m] = 0;
    }
    for (uint64_t r = 0; r < ot->rows; r++)
        ot->local_pool[ot->machine_of[r]][ot->n_local[ot->machine_of[r]]++] = r;
    ot->inexact = ot->t->desc.init == RKV_INIT_UNIFORM &&
                  (ot->t->desc.dtype == RKV_F32 || ot->t->desc.dtype == RKV_F64);
    for (uint32_t p = 0; p < sc->n_phases; p++) {
        const struct rkv_sc_phase *ph = &sc->phases[p];
        double lr2 = log2(ph->lr);
        if (ph->tensor == i && ph->push_op == RKV_OP_SGD && lr2 != floor(lr2))
            ot->inexact = 1;
    }
    return 0;
}

static void or_tensor_free(struct rkv_oracle *o, struct or_tensor *ot)
{
    free(ot->n_cand);
    free(ot->cand);
    free(ot->delta);
    free(ot->round_err);
    free(ot->adds);
    free(ot->sig);
    free(ot->writer);
    free(ot->machine_of);
    for (uint32_t m = 0; ot->local_pool && m < o->sc->machines; m++)
        free(ot->local_pool[m]);
    free(ot->local_pool);
    free(ot->n_local);
    free(ot->zipf_cdf);
}

int rkv_oracle_create(const struct rkv_scenario *sc, struct rkv_oracle **or_p)
{
    struct rkv_oracle *o = calloc(1, sizeof(*o));
    if (!o)
        return -RKV_ENOMEM;
    o->sc = sc;
    o->W = rkv_scenario_workers(sc);
    o->refs = 1;
    uint64_t max_rows = 0;
    int rc = 0;
    for (uint32_t i = 0; i < sc->n_tensors && rc == 0; i++) {
        rc = or_tensor_init(o, i);
        if (sc->tensors[i].desc.rows > max_rows)
            max_rows = sc->tensors[i].desc.rows;
    }
    o->tmp_last = rc == 0 ? malloc(max_rows * sizeof(*o->tmp_last)) : NULL;
    if (rc < 0 || !o->tmp_last) {
        rkv_oracle_destroy(o);
        return rc < 0 ? rc : -RKV_ENOMEM;
    }
    *or_p = o;
    return 0;
}

void rkv_oracle_set_pin_log(struct rkv_oracle *o, FILE *out)
{
    o->pin_log = out;
}

void rkv_oracle_ref(struct rkv_oracle *o)
{
    o->refs++;
}

void rkv_oracle_destroy(struct rkv_oracle *o)
{
    if (!o || --o->refs > 0)
        return;
    for (uint32_t i = 0; i < o->sc->n_tensors; i++)
        or_tensor_free(o, &o->t[i]);
    free(o->tmp_last);
    free(o->own);
    free(o->own_pool);
    free(o);
}

/* ---- own pushes (sparse) ---- */

static uint64_t or_own_hash(uint32_t worker, uint32_t tensor, uint64_t row)
{
    return rkv_mix64(row * 0x9e3779b97f4a7c15ull ^ ((uint64_t)worker << 8) ^ tensor);
}

static void or_own_clear(struct rkv_oracle *o)
{
    for (uint64_t i = 0; i < o->own_cap; i++)
        o->own[i].worker = OR_NONE;
    o->own_len = 0;
    o->pool_len = 0;
}

static struct or_own *or_own_find(const struct rkv_oracle *o, uint32_t worker, uint32_t tensor,
                                  uint64_t row)
{
    if (!o->own_cap)
        return NULL;
    for (uint64_t i = or_own_hash(worker, tensor, row) & (o->own_cap - 1);;
         i = (i + 1) & (o->own_cap - 1)) {
        struct or_own *e = &o->own[i];
        if (e->worker == OR_NONE)
            return NULL;
        if (e->worker == worker && e->tensor == tensor && e->row == row)
            return e;
    }
}

static int or_own_grow(struct rkv_oracle *o)
{
    uint64_t cap = o->own_cap ? o->own_cap * 2 : 1024;
    struct or_own *old = o->own, *t = malloc(cap * sizeof(*t));
    if (!t)
        return -RKV_ENOMEM;
    for (uint64_t i = 0; i < cap; i++)
        t[i].worker = OR_NONE;
    for (uint64_t i = 0; i < o->own_cap; i++) {
        if (old[i].worker == OR_NONE)
            continue;
        uint64_t j = or_own_hash(old[i].worker, old[i].tensor, old[i].row) & (cap - 1);
        while (t[j].worker != OR_NONE)
            j = (j + 1) & (cap - 1);
        t[j] = old[i];
    }
    free(old);
    o->own = t;
    o->own_cap = cap;
    return 0;
}

/* The entry of (worker, tensor, row), created with no assign and zero sums. */
static struct or_own *or_own_get(struct rkv_oracle *o, uint32_t worker, uint32_t tensor,
                                 uint64_t row)
{
    struct or_own *e = or_own_find(o, worker, tensor, row);
    if (e)
        return e;
    uint32_t L = o->t[tensor].L;
    if ((2 * (o->own_len + 1) > o->own_cap && or_own_grow(o) < 0))
        return NULL;
    if (o->pool_len + L > o->pool_cap) {
        uint64_t cap = o->pool_cap ? o->pool_cap * 2 : 4096;
        while (cap < o->pool_len + L)
            cap *= 2;
        union or_num *p = realloc(o->own_pool, cap * sizeof(*p));
        if (!p)
            return NULL;
        o->own_pool = p;
        o->pool_cap = cap;
    }
    uint64_t i = or_own_hash(worker, tensor, row) & (o->own_cap - 1);
    while (o->own[i].worker != OR_NONE)
        i = (i + 1) & (o->own_cap - 1);
    e = &o->own[i];
    *e = (struct or_own){.row = row, .worker = worker, .tensor = tensor, .delta = o->pool_len};
    e->last.phase = OR_NO_PHASE;
    memset(&o->own_pool[o->pool_len], 0, L * sizeof(*o->own_pool));
    o->pool_len += L;
    o->own_len++;
    return e;
}

int rkv_oracle_check_scenario(const struct rkv_scenario *sc, char *err, size_t err_len)
{
    /* Per tensor, the kind of push seen since the last barrier: 0 none,
     * 1 assign, 2 sum/sgd. */
    int kind[RKV_SC_MAX_TENSORS] = {0};
    for (uint32_t p = 0; p < sc->n_phases; p++) {
        const struct rkv_sc_phase *ph = &sc->phases[p];
        int k = ph->push_fraction == 0 ? 0 : ph->push_op == RKV_OP_ASSIGN ? 1 : 2;
        if (k && kind[ph->tensor] && kind[ph->tensor] != k) {
            /* at the phase's push_op, or the phase when it is the default */
            int n = rkv_scenario_where(sc, ph->push_op_mark.line ? ph->push_op_mark : ph->mark, err,
                                       err_len);
            snprintf(err + n, err_len - (size_t)n,
                     "phase \"%s\": assign and sum/sgd pushes to tensor \"%s\" "
                     "without a barrier between them have no defined result; set "
                     "barrier_after on the phase before",
                     ph->name, sc->tensors[ph->tensor].desc.name);
            return -RKV_ECONFIG;
        }
        if (k)
            kind[ph->tensor] = k;
        if (ph->barrier_after)
            memset(kind, 0, sizeof(kind));
    }
    return 0;
}

/* ---- epochs ---- */

/* Calls fn for every push request of every worker in phases [first, last],
 * in each worker's program order. */
typedef void (*or_visit_fn)(struct rkv_oracle *o, uint32_t worker, uint32_t phase, uint32_t round,
                            const struct rkv_wl_req *req, void *arg);

static int or_replay(struct rkv_oracle *o, uint32_t worker, or_visit_fn fn, void *arg)
{
    for (uint32_t p = o->ep_first; p <= o->ep_last; p++) {
        struct rkv_wl_gen g;
        rkv_wl_gen_init(&g, o, p, worker);
        if (!g.ids)
            return -RKV_ENOMEM;
        struct rkv_wl_req req;
        char why[256];
        /* Such a worker sends nothing in the phase (wl_phase fails it). */
        uint32_t rounds = rkv_wl_gen_check(&g, why, sizeof(why)) < 0 ? 0 : o->sc->phases[p].rounds;
        for (uint32_t r = 0; r < rounds; r++) {
            rkv_wl_gen_next(&g, &req);
            if (req.push)
                fn(o, worker, p, r, &req, arg);
        }
        rkv_wl_gen_free(&g);
    }
    return 0;
}

static void or_note_writer(struct rkv_oracle *o, uint32_t w, uint32_t phase, uint32_t round,
                           const struct rkv_wl_req *req, void *arg)
{
    (void)round, (void)arg;
    struct or_tensor *ot = &o->t[o->sc->phases[phase].tensor];
    for (uint32_t k = 0; k < req->n; k++) {
        uint32_t *wr = &ot->writer[req->ids[k]];
        *wr = *wr == OR_NONE || *wr == w ? w : OR_MULTI;
    }
}

int rkv_oracle_epoch_begin(struct rkv_oracle *o, uint32_t first, uint32_t last)
{
    assert(first <= last && last < o->sc->n_phases);
    /* A shared oracle: the first worker past the barrier moves it. */
    if (o->ep_state == 1 && o->ep_first == first)
        return 0;
    o->ep_first = first;
    o->ep_last = last;
    o->ep_state = 1;
    or_own_clear(o);
    for (uint32_t i = 0; i < o->sc->n_tensors; i++) {
        struct or_tensor *ot = &o->t[i];
        memset(ot->writer, 0xff, ot->rows * sizeof(*ot->writer));
    }
    for (uint32_t w = 0; w < o->W; w++) {
        int rc = or_replay(o, w, or_note_writer, NULL);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static double or_push_term(struct rkv_oracle *o, uint32_t phase, uint32_t w, uint32_t round,
                           uint32_t pos, uint64_t row, uint32_t j)
{
    const struct rkv_sc_phase *p = &o->sc->phases[phase];
    double v = rkv_wl_value(o->sc, p->tensor, row, phase, w, round, pos, j);
    return p->push_op == RKV_OP_SGD ? -p->lr * v : v;
}

static int or_is_int(const struct or_tensor *ot)
{
    return ot->t->desc.dtype == RKV_I32 || ot->t->desc.dtype == RKV_I64;
}

/* The dtype's unit roundoff: half an ulp of 1.0. */
static double or_eps(const struct or_tensor *ot)
{
    return ot->t->desc.dtype == RKV_F32 ? 0x1.0p-24 : 0x1.0p-53;
}

/* What one of the store's adds to a row may round away, most being the
 * largest |partial sum| + |term| over the row's elements.
 * Each of the store's adds rounds its term and its sum, by up to an ulp
 * of the sum; with a fixed lr that error is not random but biased (the
 * same term rounds the same way), so it grows with the number of adds, not
 * its root: after thousands of f32 sgd pushes to one row it passes 1e-4
 * (found by rkv swarm, seed 708). The bound follows the oracle's own
 * partial sums; the store's order differs, hence the margin of 4 ulps per
 * add. A missing or doubled push still shows while adds x 4 ulps stays
 * below lr. */
static double or_round_err(const struct or_tensor *ot, double most)
{
    return 4.0 * or_eps(ot) * (1.0 + most);
}

/* Folds one push into the expected state: sums into delta, assigns into
 * the worker's last write (tmp_last). */
static void or_fold(struct rkv_oracle *o, uint32_t w, uint32_t phase, uint32_t round,
                    const struct rkv_wl_req *req, void *arg)
{
    (void)arg;
    const struct rkv_sc_phase *p = &o->sc->phases[phase];
    struct or_tensor *ot = &o->t[p->tensor];
    for (uint32_t k = 0; k < req->n; k++) {
        uint64_t r = req->ids[k];
        if (p->push_op == RKV_OP_ASSIGN) {
            /* The last occurrence of r in the request wins: it comes last. */
            o->tmp_last[r] = (struct or_cand){
                .worker = w, .round = round, .phase = (uint16_t)phase, .pos = (uint16_t)k};
            continue;
        }
        if (or_is_int(ot)) {
            for (uint32_t j = 0; j < ot->L; j++)
                ot->delta[r * ot->L + j].u +=
                    (uint64_t)rkv_wl_ivalue(o->sc, p->tensor, r, phase, w, round, k, j);
            continue;
        }
        double most = 0, big = 0;
        for (uint32_t j = 0; j < ot->L; j++) {
            double t = or_push_term(o, phase, w, round, k, r, j), *d = &ot->delta[r * ot->L + j].d;
            *d += t;
            most = fmax(most, fabs(*d) + fabs(t));
            big = fmax(big, fabs(t));
        }
        if (ot->inexact) {
            ot->round_err[r] += or_round_err(ot, most);
            ot->adds[r]++;
            ot->sig[r] += big * big;
        }
    }
}

static int or_assigns(const struct rkv_oracle *o, uint32_t ti)
{
    for (uint32_t p = o->ep_first; p <= o->ep_last; p++)
        if (o->sc->phases[p].tensor == ti && o->sc->phases[p].push_op == RKV_OP_ASSIGN &&
            o->sc->phases[p].push_fraction > 0)
            return 1;
    return 0;
}

void rkv_oracle_epoch_end(struct rkv_oracle *o)
{
    if (o->ep_state == 2)
        return;
    o->ep_state = 2;
    /* Rows assigned this epoch lose their old candidates and delta. */
    for (uint32_t i = 0; i < o->sc->n_tensors; i++) {
        struct or_tensor *ot = &o->t[i];
        if (!or_assigns(o, i))
            continue;
        for (uint64_t r = 0; r < ot->rows; r++) {
            if (ot->writer[r] == OR_NONE)
                continue;
            ot->n_cand[r] = 0;
            memset(&ot->delta[r * ot->L], 0, ot->L * sizeof(*ot->delta));
            ot->round_err[r] = 0;
            ot->adds[r] = 0;
            ot->sig[r] = 0;
        }
    }
    int pushed[RKV_SC_MAX_TENSORS] = {0}, assigned[RKV_SC_MAX_TENSORS] = {0};
    for (uint32_t p = o->ep_first; p <= o->ep_last; p++)
        pushed[o->sc->phases[p].tensor] |= o->sc->phases[p].push_fraction > 0;
    for (uint32_t i = 0; i < o->sc->n_tensors; i++)
        assigned[i] = or_assigns(o, i);
    for (uint32_t w = 0; w < o->W; w++) {
        /* tmp_last is shared by tensors: fold one tensor at a time. Sums
         * need no per-row pass: at thousands of workers that pass, not the
         * replay, would dominate. */
        for (uint32_t i = 0; i < o->sc->n_tensors; i++) {
            struct or_tensor *ot = &o->t[i];
            if (!pushed[i])
                continue;
            if (assigned[i])
                memset(o->tmp_last, 0xff, ot->rows * sizeof(*o->tmp_last));
            uint32_t first = o->ep_first, last = o->ep_last;
            for (uint32_t p = first; p <= last; p++) {
                if (o->sc->phases[p].tensor != i)
                    continue;
                o->ep_first = o->ep_last = p;
                or_replay(o, w, or_fold, NULL);
            }
            o->ep_first = first;
            o->ep_last = last;
            for (uint64_t r = 0; assigned[i] && r < ot->rows; r++)
                if (o->tmp_last[r].phase != OR_NO_PHASE)
                    ot->cand[r * ot->ccap + ot->n_cand[r]++] = o->tmp_last[r];
        }
    }
}

int rkv_oracle_own_push(struct rkv_oracle *o, uint32_t worker, uint32_t phase, uint32_t round,
                        const struct rkv_wl_req *req)
{
    const struct rkv_sc_phase *p = &o->sc->phases[phase];
    struct or_tensor *ot = &o->t[p->tensor];
    for (uint32_t k = 0; k < req->n; k++) {
        uint64_t r = req->ids[k];
        struct or_own *e = or_own_get(o, worker, p->tensor, r);
        if (!e)
            return -RKV_ENOMEM;
        if (p->push_op == RKV_OP_ASSIGN) {
            e->last = (struct or_cand){
                .worker = worker, .round = round, .phase = (uint16_t)phase, .pos = (uint16_t)k};
            continue;
        }
        /* A read of a row only this worker writes is checked mid-phase
         * against the worker's own sums: the store rounded each of those
         * adds too (the epochs before are in round_err[r]). Without it, sums
         * that cancel to about 0 were held to 1e-4 after hundreds of f32 sgd
         * adds (rkv swarm, seed 88964). Partial sums here include the rows'
         * delta so far, as the store's running value does. */
        if (or_is_int(ot)) {
            for (uint32_t j = 0; j < ot->L; j++)
                o->own_pool[e->delta + j].u +=
                    (uint64_t)rkv_wl_ivalue(o->sc, p->tensor, r, phase, worker, round, k, j);
            continue;
        }
        double most = 0, big = 0;
        for (uint32_t j = 0; j < ot->L; j++) {
            double t = or_push_term(o, phase, worker, round, k, r, j);
            double *d = &o->own_pool[e->delta + j].d;
            *d += t;
            most = fmax(most, fabs(ot->delta[r * ot->L + j].d + *d) + fabs(t));
            big = fmax(big, fabs(t));
        }
        if (ot->inexact) {
            e->round_err += or_round_err(ot, most);
            e->adds++;
            e->sig += big * big;
        }
    }
    return 0;
}

/* ---- checking ---- */

static double or_got(const struct rkv_sc_tensor *t, const void *row, uint32_t j)
{
    switch (t->desc.dtype) {
    case RKV_F32:
        return ((const float *)row)[j];
    case RKV_F64:
        return ((const double *)row)[j];
    case RKV_I32:
        return ((const int32_t *)row)[j];
    default:
        return (double)((const int64_t *)row)[j];
    }
}

static int64_t or_igot(const struct rkv_sc_tensor *t, const void *row, uint32_t j)
{
    return t->desc.dtype == RKV_I32 ? ((const int32_t *)row)[j] : ((const int64_t *)row)[j];
}

static double or_base(struct rkv_oracle *o, const struct or_tensor *ot, uint32_t ti,
                      const struct or_cand *c, uint64_t row, uint32_t j)
{
    if (c->phase == OR_INIT_PHASE)
        return or_init_value(ot->t, row, j);
    return rkv_wl_value(o->sc, ti, row, c->phase, c->worker, c->round, c->pos, j);
}

/* The first phase of phase p's epoch (the phases up to a barrier). */
static uint32_t or_epoch_first(const struct rkv_scenario *sc, uint32_t p)
{
    assert(p < sc->n_phases); /* an assign's phase, never the initial value's */
    while (p > 0 && !sc->phases[p - 1].barrier_after)
        p--;
    return p;
}

/* Does `got` equal candidate c plus the deltas, element by element?
 * mine: this worker's own sums of the epoch (read-your-writes), or NULL. */
static int or_match(struct rkv_oracle *o, uint32_t ti, const struct or_cand *c, uint64_t row,
                    int own_assign, const struct or_own *mine, const void *got, uint32_t *bad_j,
                    double *want_p, int64_t *iwant_p, int *unres_p)
{
    const struct or_tensor *ot = &o->t[ti];
    const union or_num *own = mine ? &o->own_pool[mine->delta] : NULL;
    *unres_p = 0;
    if (or_is_int(ot)) { /* exact, modulo the dtype's range */
        for (uint32_t j = 0; j < ot->L; j++) {
            uint64_t w = (uint64_t)(int64_t)or_base(o, ot, ti, c, row, j);
            if (!own_assign)
                w += ot->delta[row * ot->L + j].u;
            if (own)
                w += own[j].u;
            int64_t want =
                ot->t->desc.dtype == RKV_I32 ? (int64_t)(int32_t)(uint32_t)w : (int64_t)w;
            if (or_igot(ot->t, got, j) != want) {
                *bad_j = j;
                *iwant_p = want;
                return 0;
            }
        }
        return 1;
    }
    /* This worker's own assign replaced the row: no earlier delta applies. */
    double err = own_assign ? 0 : ot->round_err[row];
    uint32_t adds = own_assign ? 0 : ot->adds[row];
    double sig = own_assign ? 0 : ot->sig[row], most_tol = 0;
    if (mine) {
        err += mine->round_err;
        adds += mine->adds;
        sig += mine->sig;
    }
    for (uint32_t j = 0; j < ot->L; j++) {
        double base = or_base(o, ot, ti, c, row, j), want = base;
        if (!own_assign)
            want += ot->delta[row * ot->L + j].d;
        if (own)
            want += own[j].d;
        if (ot->t->desc.dtype == RKV_F32)
            want = (double)(float)want;
        double g = or_got(ot->t, got, j), diff = fabs(g - want);
        /* The store's rounding and want's own to the dtype, nothing more.
         * err follows the sums' partial values (or_round_err); each add
         * also rounds at the scale of the base it adds to, and the base
         * (an assigned value) was rounded to the dtype once. A flat 1e-4 x
         * (1 + |want|) here let a store that dropped every push of an sgd
         * phase with lr 1e-6 pass (an outside tester), where the loader
         * promises any lr of 16 ulps or more is checked. */
        double tol =
            ot->inexact
                ? or_eps(ot) * (2.0 * (1.0 + fabs(want) + fabs(base)) + 4.0 * adds * fabs(base)) +
                      err
                : 0.0;
        if (diff > tol || g != g) {
            *bad_j = j;
            *want_p = want;
            return 0;
        }
        most_tol = fmax(most_tol, tol);
    }
    /* Matched; but where the rounding allowed for reaches a quarter of
     * what a random half of the row's pushes add up to (their steps' root
     * sum of squares: terms of either sign walk), losing or doubling them
     * might match too: an outside tester dropped half of 1,600 f32 sgd
     * pushes of lr 2e-6 to one row and the run passed. Said, not silently
     * passed. */
    *unres_p = adds > 0 && 4.0 * most_tol >= sqrt(sig);
    return 1;
}

static void or_describe(struct rkv_oracle *o, const struct or_cand *c, char *buf, size_t len)
{
    if (c->phase == OR_INIT_PHASE)
        snprintf(buf, len, "initial value, no assign since");
    else
        snprintf(buf, len, "last assigned by worker %u in phase \"%s\" round %u (position %u)",
                 c->worker, o->sc->phases[c->phase].name, c->round, (unsigned)c->pos);
}

int rkv_oracle_check_row(struct rkv_oracle *o, uint32_t ti, uint64_t row, uint32_t worker,
                         int mid_epoch, const void *got, char *why, size_t why_len)
{
    struct or_tensor *ot = &o->t[ti];
    assert(row < ot->rows);
    const struct or_own *mine = NULL;
    struct or_cand *cands = &ot->cand[row * ot->ccap];
    uint32_t n = ot->n_cand[row];
    int own_assign = 0;
    if (mid_epoch) {
        uint32_t wr = ot->writer[row];
        if (wr != OR_NONE && wr != worker)
            return 1; /* others write it concurrently: checked after the barrier */
        const struct or_own *e = wr == worker ? or_own_find(o, worker, ti, row) : NULL;
        if (e) {
            mine = e;
            if (e->last.phase != OR_NO_PHASE) {
                cands = (struct or_cand *)&e->last;
                n = 1;
                own_assign = 1;
            }
        }
    }
    uint32_t bad_j = 0;
    double want = 0;
    int64_t iwant = 0;
    int unres = 0;
    for (uint32_t i = 0; i < n; i++) {
        /* Mixing is rejected per epoch, so an own assign has no own sum. */
        if (!or_match(o, ti, &cands[i], row, own_assign, own_assign ? NULL : mine, got, &bad_j,
                      &want, &iwant, &unres))
            continue;
        /* Concurrent assigns settled on one winner by the barrier: the
         * first read that tells which pins it, and every later read (by
         * any worker of this oracle) must see the same one. */
        if (n > 1 && !own_assign) {
            struct or_cand won = cands[i];
            ot->cand[row * ot->ccap] = won;
            ot->n_cand[row] = 1;
            if (o->pin_log)
                /* e: the epoch of the assigns (its first phase). Each
                 * epoch's assigns have a winner of their own: compared
                 * across epochs, a row assigned again after a barrier was
                 * "two winners". Not the reader's epoch: one process
                 * pinned a row in its check after the barrier, another in
                 * the next phase, and the two pins were never compared
                 * (an outside tester's store showed each worker its own
                 * write, and passed on tcp). */
                fprintf(o->pin_log, "PIN t=%u r=%llu e=%u w=%u p=%u n=%u\n", ti,
                        (unsigned long long)row, or_epoch_first(o->sc, won.phase), won.worker,
                        won.phase, won.round);
        }
        return unres ? 2 : 0;
    }
    char who[160];
    or_describe(o, &cands[n ? n - 1 : 0], who, sizeof(who));
    /* Digits enough to tell any two values of the dtype apart: %.9g
     * printed a f64 off in its tenth digit as "expected 173408.2, got
     * 173408.2" (an outside tester). */
    char wants[32], gots[32];
    if (or_is_int(ot)) {
        snprintf(wants, sizeof(wants), "%lld", (long long)iwant);
        snprintf(gots, sizeof(gots), "%lld", (long long)or_igot(ot->t, got, bad_j));
    } else {
        int digits = ot->t->desc.dtype == RKV_F32 ? 9 : 17;
        snprintf(wants, sizeof(wants), "%.*g", digits, want);
        snprintf(gots, sizeof(gots), "%.*g", digits, or_got(ot->t, got, bad_j));
    }
    snprintf(why, why_len,
             "tensor \"%s\" row %llu [%u]: expected %s%s, got %s (%s%s; %u candidate%s)",
             ot->t->desc.name, (unsigned long long)row, bad_j, wants,
             /* Each candidate was tried: the one printed is the last, not
              * the one right answer (an outside tester). */
             n > 1 ? " or another candidate's value" : "", gots, who,
             mid_epoch ? ", read-your-writes" : "", n, n == 1 ? "" : "s");
    return -1;
}
