/* The scenario workload engine (see workload.h and oracle.h). */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness/oracle.h"
#include "harness/oracle_state.h"
#include "harness/workload.h"

/* After a barrier every row is pulled and checked, in pulls of up to
 * WL_VERIFY_BYTES (at least WL_VERIFY_MIN_IDS rows, at most
 * WL_VERIFY_MAX_IDS): few round trips for thin rows, a bounded buffer for
 * wide ones. */
#define WL_VERIFY_BYTES (1u << 20)
#define WL_VERIFY_MIN_IDS 256u
#define WL_VERIFY_MAX_IDS 8192u
#define WL_PROGRESS_NS 5000000000ull /* a progress line at most this often */

struct wl_node {
    struct rkv_client *cli;
    struct rkv_port *port;
    const struct rkv_scenario *sc;
    struct rkv_oracle *oracle;
    uint32_t me, W;
    FILE *log;
    uint8_t *rows; /* request buffer */
    uint8_t *got;
    size_t buf_bytes;
    uint8_t *with_state;  /* pulls through RKV_PULL_WITH_STATE: row then state, per row */
    uint64_t *verify_ids; /* the largest wl_verify_batch */
};

/* A phase's counters while a run holds them: struct rkv_wl_phase_stats
 * with its histogram kept as the window of buckets the phase's requests
 * landed in (hist[b - lo] for b in [lo, lo + n)), not all 1,024 of them:
 * a worker's requests of one phase fall in a few, and the twin holds an
 * epoch of these for each of its thousands of workers (8 KiB each with
 * the full array). Exported whole (wl_export) when handed over. */
struct wl_stats {
    uint64_t pushes, pulls, bytes;
    uint64_t checks, skipped, errors, unresolved;
    double wall_s;
    double max_us;
    uint32_t lo, n;
    uint64_t *hist;
    char first_error[320];
};

/* One more latency in bucket b: the window grows to take it. */
static int wl_stats_hist_add(struct wl_stats *st, uint32_t b)
{
    assert(b < RKV_WL_HIST);
    if (st->n == 0 || b < st->lo || b >= st->lo + st->n) {
        uint32_t lo = st->n && st->lo < b ? st->lo : b;
        uint32_t hi = st->n && st->lo + st->n > b + 1 ? st->lo + st->n : b + 1;
        uint64_t *h = calloc(hi - lo, sizeof(*h));
        if (!h)
            return -RKV_ENOMEM;
        if (st->n)
            memcpy(h + (st->lo - lo), st->hist, st->n * sizeof(*h));
        free(st->hist);
        st->hist = h;
        st->lo = lo;
        st->n = hi - lo;
    }
    st->hist[b - st->lo]++;
    return 0;
}

/* Frees st's window and zeroes it for the next phase. */
static void wl_stats_clear(struct wl_stats *st)
{
    free(st->hist);
    memset(st, 0, sizeof(*st));
}

static void wl_export(const struct wl_stats *w, struct rkv_wl_phase_stats *st)
{
    /* Field by field: a compound literal of the whole struct may be built
     * on the stack first, 8.5 KiB deep in an actor's stack in the twin. */
    memset(st->hist, 0, sizeof(st->hist));
    st->pushes = w->pushes;
    st->pulls = w->pulls;
    st->bytes = w->bytes;
    st->checks = w->checks;
    st->skipped = w->skipped;
    st->errors = w->errors;
    st->unresolved = w->unresolved;
    st->wall_s = w->wall_s;
    st->max_us = w->max_us;
    for (uint32_t i = 0; i < w->n; i++)
        st->hist[w->lo + i] = w->hist[i];
    memcpy(st->first_error, w->first_error, sizeof(st->first_error));
}

uint32_t rkv_wl_bucket(uint64_t ns)
{
    if (ns < 1)
        return 0;
    uint32_t b = (uint32_t)(16.0 * log2((double)ns));
    return b < RKV_WL_HIST ? b : RKV_WL_HIST - 1;
}

double rkv_wl_bucket_us(uint32_t b)
{
    return exp2((b + 1) / 16.0) / 1000.0; /* upper edge: never under-reports */
}

double rkv_wl_percentile_us(const struct rkv_wl_phase_stats *st, double q)
{
    const uint64_t *hist = st->hist;
    uint64_t total = 0, acc = 0;
    for (uint32_t b = 0; b < RKV_WL_HIST; b++)
        total += hist[b];
    if (total == 0)
        return 0;
    uint64_t want = (uint64_t)ceil(q * (double)total);
    double us = rkv_wl_bucket_us(RKV_WL_HIST - 1);
    for (uint32_t b = 0; b < RKV_WL_HIST; b++) {
        if ((acc += hist[b]) >= want && hist[b]) {
            us = rkv_wl_bucket_us(b);
            break;
        }
    }
    /* The bucket's upper edge overshoots by up to 4.4 %; no request took
     * longer than the slowest one seen. */
    return us < st->max_us ? us : st->max_us;
}

static size_t wl_row_bytes(const struct rkv_sc_tensor *t)
{
    return rkv_dtype_size(t->desc.dtype) * t->desc.row_len;
}

/* Element j of a pushed row: integers carry their whole range
 * (rkv_wl_ivalue), floats small exact values (rkv_wl_value). */
static void wl_store(const struct rkv_scenario *sc, uint32_t phase, uint32_t worker, uint32_t round,
                     const struct rkv_wl_req *q, uint32_t k, uint8_t *row, uint32_t j)
{
    uint32_t ti = sc->phases[phase].tensor;
    uint64_t id = q->ids[k];
    switch (sc->tensors[ti].desc.dtype) {
    case RKV_F32:
        ((float *)row)[j] = (float)rkv_wl_value(sc, ti, id, phase, worker, round, k, j);
        break;
    case RKV_F64:
        ((double *)row)[j] = rkv_wl_value(sc, ti, id, phase, worker, round, k, j);
        break;
    case RKV_I32:
        ((int32_t *)row)[j] = (int32_t)rkv_wl_ivalue(sc, ti, id, phase, worker, round, k, j);
        break;
    case RKV_I64:
        ((int64_t *)row)[j] = rkv_wl_ivalue(sc, ti, id, phase, worker, round, k, j);
        break;
    }
}

static void wl_error(struct wl_node *n, struct wl_stats *st, const char *why)
{
    if (st->errors++ == 0) {
        snprintf(st->first_error, sizeof(st->first_error), "%s", why);
        fprintf(n->log, "rkv: client %u: %s\n", n->me, why);
    }
}

static int wl_push(struct wl_node *n, uint32_t phase, uint32_t round, const struct rkv_wl_req *q,
                   struct wl_stats *st)
{
    const struct rkv_scenario *sc = n->sc;
    const struct rkv_sc_phase *p = &sc->phases[phase];
    const struct rkv_sc_tensor *t = &sc->tensors[p->tensor];
    size_t rb = wl_row_bytes(t);
    for (uint32_t k = 0; k < q->n; k++)
        for (uint32_t j = 0; j < t->desc.row_len; j++)
            wl_store(sc, phase, n->me, round, q, k, n->rows + k * rb, j);
    int rc = rkv_client_push(n->cli, t->desc.name, q->ids, q->n, n->rows, p->push_op, p->lr);
    if (rc < 0)
        return rc;
    if ((rc = rkv_oracle_own_push(n->oracle, n->me, phase, round, q)) < 0)
        return rc;
    st->pushes++;
    st->bytes += (uint64_t)q->n * rb;
    return 0;
}

/* Checks rows[0..n) pulled for ids; mid_epoch: see rkv_oracle_check_row. */
static void wl_check(struct wl_node *n, uint32_t ti, const uint64_t *ids, uint32_t cnt,
                     int mid_epoch, struct wl_stats *st)
{
    size_t rb = wl_row_bytes(&n->sc->tensors[ti]);
    char why[320];
    for (uint32_t k = 0; k < cnt; k++) {
        int r = rkv_oracle_check_row(n->oracle, ti, ids[k], n->me, mid_epoch, n->got + k * rb, why,
                                     sizeof(why));
        if (r == 1)
            st->skipped++;
        else if (r == 0 || r == 2)
            st->checks++;
        else
            wl_error(n, st, why);
        st->unresolved += r == 2;
    }
}

/* A pull through the built-in RKV_PULL_WITH_STATE: the row halves go to
 * n->got for the usual check, the state halves to the oracle's. */
static int wl_pull_with_state(struct wl_node *n, uint32_t ti, const struct rkv_wl_req *q,
                              struct wl_stats *st)
{
    const struct rkv_sc_tensor *t = &n->sc->tensors[ti];
    size_t rb = wl_row_bytes(t);
    int rc = rkv_client_pull_with(n->cli, t->desc.name, q->ids, q->n, n->with_state,
                                  RKV_PULL_WITH_STATE, 0);
    if (rc < 0)
        return rc;
    char why[320];
    for (uint32_t k = 0; k < q->n; k++) {
        const uint8_t *pair = n->with_state + (size_t)k * 2 * rb;
        memcpy(n->got + (size_t)k * rb, pair, rb);
        if (rkv_oracle_check_state(n->sc, ti, q->ids[k], pair + rb, why, sizeof(why)) < 0)
            wl_error(n, st, why);
        else
            st->checks++;
    }
    return 0;
}

static int wl_pull(struct wl_node *n, uint32_t phase, const struct rkv_wl_req *q,
                   struct wl_stats *st)
{
    const struct rkv_sc_phase *p = &n->sc->phases[phase];
    const struct rkv_sc_tensor *t = &n->sc->tensors[p->tensor];
    int rc = p->pull_handler == RKV_PULL_WITH_STATE
                 ? wl_pull_with_state(n, p->tensor, q, st)
                 : rkv_client_pull(n->cli, t->desc.name, q->ids, q->n, n->got);
    if (rc < 0)
        return rc;
    st->pulls++;
    /* A with_state reply carries the state too. */
    st->bytes +=
        (uint64_t)q->n * wl_row_bytes(t) * (p->pull_handler == RKV_PULL_WITH_STATE ? 2 : 1);
    wl_check(n, p->tensor, q->ids, q->n, 1, st);
    return 0;
}

static int wl_phase(struct wl_node *n, uint32_t phase, struct wl_stats *st)
{
    const struct rkv_sc_phase *p = &n->sc->phases[phase];
    struct rkv_wl_gen g;
    rkv_wl_gen_init(&g, n->oracle, phase, n->me);
    if (!g.ids)
        return -RKV_ENOMEM;
    char why[256];
    if (rkv_wl_gen_check(&g, why, sizeof(why)) < 0) {
        /* Other keys than the phase's would be no run of it: the phase
         * fails, and the run goes on to its barriers with the others. */
        wl_error(n, st, why);
        rkv_wl_gen_free(&g);
        return 0;
    }
    uint64_t t0 = n->port->ops->now_ns(n->port), shown = t0;
    int rc = 0;
    for (uint32_t r = 0; r < p->rounds && rc == 0; r++) {
        struct rkv_wl_req q;
        rkv_wl_gen_next(&g, &q);
        uint64_t s = n->port->ops->now_ns(n->port);
        if (n->me == 0 && s - shown >= WL_PROGRESS_NS) { /* long phases say how far they are */
            fprintf(n->log, "rkv: phase \"%s\": %u of %u requests\n", p->name, r, p->rounds);
            shown = s;
        }
        rc = q.push ? wl_push(n, phase, r, &q, st) : wl_pull(n, phase, &q, st);
        uint64_t ns = n->port->ops->now_ns(n->port) - s;
        int hr = wl_stats_hist_add(st, rkv_wl_bucket(ns)); /* a failed request's too */
        rc = rc < 0 ? rc : hr;
        if (ns / 1e3 > st->max_us)
            st->max_us = ns / 1e3;
        if (p->think_us)
            n->port->ops->sleep_ns(n->port, (uint64_t)p->think_us * 1000);
    }
    st->wall_s = (double)(n->port->ops->now_ns(n->port) - t0) * 1e-9;
    rkv_wl_gen_free(&g);
    return rc;
}

/* Rows per verification pull of tensor t (see WL_VERIFY_BYTES). */
static uint32_t wl_verify_ids(const struct rkv_sc_tensor *t)
{
    size_t by_bytes = WL_VERIFY_BYTES / wl_row_bytes(t);
    return by_bytes < WL_VERIFY_MIN_IDS   ? WL_VERIFY_MIN_IDS
           : by_bytes > WL_VERIFY_MAX_IDS ? WL_VERIFY_MAX_IDS
                                          : (uint32_t)by_bytes;
}

/* Rows per verification pull of tensor t by this worker: no more than the
 * rows it verifies (rows = me mod W), which sizes its buffers from its share
 * (a few rows each for the twin's thousands of workers), not from
 * WL_VERIFY_BYTES. The pulls are the same: the last one was that short. */
static uint32_t wl_verify_batch(const struct wl_node *n, const struct rkv_sc_tensor *t)
{
    uint64_t rows = t->desc.rows, share = rows > n->me ? (rows - n->me + n->W - 1) / n->W : 0;
    uint32_t batch = wl_verify_ids(t);
    return share < batch ? (uint32_t)share : batch;
}

/* After a barrier every row is exact: this worker checks its share
 * (rows = me mod W) of every tensor the epoch pushed to, every row of it
 * (scenarios/README.md promises it; a sample missed a wrong row by its
 * index). */
static int wl_verify(struct wl_node *n, uint32_t first, uint32_t last, struct wl_stats *st)
{
    const struct rkv_scenario *sc = n->sc;
    uint64_t *ids = n->verify_ids;
    for (uint32_t ti = 0; ti < sc->n_tensors; ti++) {
        int touched = 0;
        for (uint32_t p = first; p <= last; p++)
            touched |= sc->phases[p].tensor == ti && sc->phases[p].push_fraction > 0;
        if (!touched)
            continue;
        const struct rkv_sc_tensor *t = &sc->tensors[ti];
        uint64_t stride = n->W, rows = t->desc.rows;
        uint32_t cnt = 0, batch = wl_verify_batch(n, t);
        for (uint64_t r = n->me; r < rows; r += stride) {
            ids[cnt++] = r;
            if (cnt < batch && r + stride < rows)
                continue;
            int rc = rkv_client_pull(n->cli, t->desc.name, ids, cnt, n->got);
            if (rc < 0)
                return rc;
            wl_check(n, ti, ids, cnt, 0, st);
            cnt = 0;
        }
    }
    return 0;
}

static int wl_init(struct wl_node *n)
{
    if (n->me != 0)
        return 0;
    for (uint32_t i = 0; i < n->sc->n_tensors; i++) {
        int rc = rkv_client_init_data(n->cli, &n->sc->tensors[i].desc);
        if (rc < 0) {
            fprintf(n->log, "rkv: init of tensor \"%s\": %s\n", n->sc->tensors[i].desc.name,
                    rkv_client_errmsg(n->cli));
            return rc;
        }
    }
    return 0;
}

/* Worker 0, once it created them: the store lists exactly the scenario's
 * tensors (rkv_client_list, DGL's get_data_name_list), in creation order.
 * A difference is an oracle error of the first phase. */
static int wl_check_list(struct wl_node *n, struct wl_stats *st)
{
    const struct rkv_scenario *sc = n->sc;
    if (n->me != 0 || sc->n_phases == 0)
        return 0;
    struct rkv_tensor_meta metas[RKV_SC_MAX_TENSORS + 1];
    size_t got;
    int rc = rkv_client_list(n->cli, metas, RKV_SC_MAX_TENSORS + 1, &got);
    if (rc < 0)
        return rc;
    char why[320] = "";
    if (got != sc->n_tensors)
        snprintf(why, sizeof(why), "the store lists %zu tensors, the scenario created %u", got,
                 sc->n_tensors);
    for (uint32_t i = 0; !why[0] && i < sc->n_tensors; i++) {
        const struct rkv_tensor_desc *d = &sc->tensors[i].desc;
        const struct rkv_tensor_meta *m = &metas[i];
        if (strcmp(m->name, d->name) != 0 || m->dtype != d->dtype || m->rows != d->rows ||
            m->row_len != d->row_len || m->policy != d->policy || m->with_state != !!d->with_state)
            snprintf(why, sizeof(why),
                     "the store lists tensor %u as \"%.63s\" (%s, %llu x %u, policy %d, state %d), "
                     "the scenario created \"%.63s\"",
                     i, m->name, rkv_dtype_name(m->dtype), (unsigned long long)m->rows, m->row_len,
                     (int)m->policy, m->with_state, d->name);
    }
    /* Not counted in st->checks: that column counts pulled values. */
    if (why[0])
        wl_error(n, st, why);
    return 0;
}

static int wl_alloc(struct wl_node *n)
{
    size_t max = 0, max_ws = 0;
    for (uint32_t p = 0; p < n->sc->n_phases; p++) {
        const struct rkv_sc_phase *ph = &n->sc->phases[p];
        size_t b = (size_t)ph->ids_per_request * wl_row_bytes(&n->sc->tensors[ph->tensor]);
        max = b > max ? b : max;
        if (ph->pull_handler == RKV_PULL_WITH_STATE)
            max_ws = 2 * b > max_ws ? 2 * b : max_ws;
    }
    if (max_ws && !(n->with_state = malloc(max_ws)))
        return -RKV_ENOMEM;
    size_t max_ids = 1;
    for (uint32_t t = 0; t < n->sc->n_tensors; t++) {
        const struct rkv_sc_tensor *ts = &n->sc->tensors[t];
        size_t ids = wl_verify_batch(n, ts), b = ids * wl_row_bytes(ts);
        max = b > max ? b : max;
        max_ids = ids > max_ids ? ids : max_ids;
    }
    max = max ? max : 1; /* malloc(0) may return NULL */
    n->rows = malloc(max);
    n->got = malloc(max);
    n->buf_bytes = max;
    n->verify_ids = malloc(max_ids * sizeof(*n->verify_ids));
    return n->rows && n->got && n->verify_ids ? 0 : -RKV_ENOMEM;
}

/* Phases up to and including the next one with a barrier (or the last). */
static uint32_t wl_epoch_last(const struct rkv_scenario *sc, uint32_t first)
{
    uint32_t p = first;
    while (p + 1 < sc->n_phases && !sc->phases[p].barrier_after)
        p++;
    return p;
}

static int wl_run(struct rkv_client *cli, struct rkv_port *port, const struct rkv_scenario *sc,
                  uint32_t worker, struct rkv_wl_phase_stats *stats, FILE *log,
                  struct rkv_oracle *shared, FILE *pins, rkv_wl_phase_fn on_phase,
                  rkv_wl_stats_fn on_stats, void *user, struct rkv_wl_phase_stats *scratch);

int rkv_wl_run(struct rkv_client *cli, struct rkv_port *port, const struct rkv_scenario *sc,
               uint32_t worker, struct rkv_wl_phase_stats *stats, FILE *log)
{
    return wl_run(cli, port, sc, worker, stats, log, NULL, NULL, NULL, NULL, NULL, NULL);
}

int rkv_wl_run_shared(struct rkv_client *cli, struct rkv_port *port, const struct rkv_scenario *sc,
                      uint32_t worker, FILE *log, struct rkv_oracle *shared,
                      rkv_wl_phase_fn on_phase, rkv_wl_stats_fn on_stats, void *user,
                      struct rkv_wl_phase_stats *scratch)
{
    assert(on_stats);
    return wl_run(cli, port, sc, worker, NULL, log, shared, NULL, on_phase, on_stats, user,
                  scratch);
}

int rkv_wl_run_pinned(struct rkv_client *cli, struct rkv_port *port, const struct rkv_scenario *sc,
                      uint32_t worker, struct rkv_wl_phase_stats *stats, FILE *log, FILE *pins,
                      rkv_wl_phase_fn on_phase, void *user)
{
    return wl_run(cli, port, sc, worker, stats, log, NULL, pins, on_phase, NULL, user, NULL);
}

/* The most phases one epoch holds: the stats a streamed run keeps. */
static uint32_t wl_max_epoch(const struct rkv_scenario *sc)
{
    uint32_t most = 1;
    for (uint32_t first = 0; first < sc->n_phases;) {
        uint32_t last = wl_epoch_last(sc, first);
        most = last - first + 1 > most ? last - first + 1 : most;
        first = last + 1;
    }
    return most;
}

/* Streamed runs: hands phases [*done, upto) to on_stats (win holds the
 * epoch that starts at win_first; phases outside it were never run) and
 * clears the window for the next epoch. */
/* stop_why: the run stopped on this store error (stop_rc), and none of
 * these phases was verified (NULL: it did not stop). */
static int wl_hand_over(uint32_t worker, struct wl_stats *win, uint32_t win_n, uint32_t win_first,
                        uint32_t *done, uint32_t upto, rkv_wl_stats_fn on_stats, void *user,
                        struct rkv_wl_phase_stats *scratch, const char *stop_why, int stop_rc)
{
    static const struct rkv_wl_phase_stats zero;
    /* Whole only for the moment it is handed over. */
    struct rkv_wl_phase_stats *one = scratch ? scratch : malloc(sizeof(*one));
    int rc = one ? 0 : -RKV_ENOMEM;
    for (uint32_t first = *done; *done < upto; (*done)++) {
        uint32_t i = *done - win_first;
        int in_win = *done >= win_first && i < win_n;
        if (one && in_win)
            wl_export(&win[i], one);
        else if (one && stop_why)
            memset(one, 0, sizeof(*one));
        if (one && (in_win || stop_why)) {
            one->stopped = stop_why != NULL;
            one->stop_rc = stop_why && *done == first ? stop_rc : 0;
            snprintf(one->stop_error, sizeof(one->stop_error), "%s",
                     stop_why && *done == first ? stop_why : "");
        }
        on_stats(user, worker, *done, one && (in_win || stop_why) ? one : &zero);
    }
    for (uint32_t i = 0; i < win_n; i++)
        wl_stats_clear(&win[i]);
    if (!scratch)
        free(one);
    return rc;
}

static int wl_run(struct rkv_client *cli, struct rkv_port *port, const struct rkv_scenario *sc,
                  uint32_t worker, struct rkv_wl_phase_stats *stats, FILE *log,
                  struct rkv_oracle *shared, FILE *pins, rkv_wl_phase_fn on_phase,
                  rkv_wl_stats_fn on_stats, void *user, struct rkv_wl_phase_stats *scratch)
{
    struct wl_node n = {.cli = cli,
                        .port = port,
                        .sc = sc,
                        .me = worker,
                        .W = rkv_scenario_workers(sc),
                        .log = log};
    /* win[p - base]: every phase (base 0), or a streamed run's epoch. */
    uint32_t win_n = stats ? sc->n_phases : wl_max_epoch(sc), base = 0, done = 0;
    uint32_t verified = 0; /* phases whose epoch was verified */
    char stop_why[256] = "";
    struct wl_stats *win = calloc(win_n, sizeof(*win));
    if (!win)
        return -RKV_ENOMEM;
    int rc = 0;
    if (shared) {
        n.oracle = shared;
        rkv_oracle_ref(shared);
    } else if ((rc = rkv_oracle_create(sc, &n.oracle)) < 0) {
        /* Said here: the launcher sees only the exit status. */
        fprintf(log, "rkv: client %u: cannot make the oracle's state for this scenario: %s\n",
                worker, rkv_strerror(rc));
        goto free_win;
    }
    if (pins)
        rkv_oracle_set_pin_log(n.oracle, pins);
    if ((rc = wl_alloc(&n)) < 0) {
        fprintf(log, "rkv: client %u: cannot allocate the buffers of the largest request: %s\n",
                worker, rkv_strerror(rc));
        goto free_bufs; /* said: the client has no message of it */
    }
    if ((rc = wl_init(&n)) < 0 || (rc = wl_check_list(&n, &win[0])) < 0 ||
        (rc = rkv_client_barrier(cli)) < 0)
        goto out;
    for (uint32_t first = 0; first < sc->n_phases && rc == 0;) {
        uint32_t last = wl_epoch_last(sc, first);
        if (!stats)
            base = first;
        if ((rc = rkv_oracle_epoch_begin(n.oracle, first, last)) < 0)
            break;
        for (uint32_t p = first; p <= last && rc == 0; p++)
            if ((rc = wl_phase(&n, p, &win[p - base])) == 0 && on_phase)
                on_phase(user, worker, p);
        /* The run ends with a barrier even if the last phase asks for none. */
        if (rc == 0 && (rc = rkv_client_barrier(cli)) == 0) {
            rkv_oracle_epoch_end(n.oracle);
            rc = wl_verify(&n, first, last, &win[last - base]);
        }
        /* Nobody pushes the next epoch while another worker still verifies. */
        if (rc == 0)
            rc = rkv_client_barrier(cli);
        if (rc == 0)
            verified = last + 1;
        if (rc == 0 && worker == 0)
            fprintf(log, "rkv: phases %u..%u of %u done\n", first + 1, last + 1, sc->n_phases);
        if (!stats && rc == 0)
            rc = wl_hand_over(worker, win, win_n, base, &done, last + 1, on_stats, user, scratch,
                              NULL, 0);
        first = last + 1;
    }
out:
    if (rc < 0) {
        /* "client": the id server 0 handed out, as servers' messages name
         * it; the node names (w722) number workers in spawn order, and
         * "worker 723 stopped" beside w722 read as the wrong node (an
         * outside tester). */
        fprintf(log, "rkv: client %u stopped: %s\n", worker, rkv_client_errmsg(cli));
        snprintf(stop_why, sizeof(stop_why), "%s", rkv_client_errmsg(cli));
    }
free_bufs:
    free(n.rows);
    free(n.got);
    free(n.with_state);
    free(n.verify_ids);
    rkv_oracle_destroy(n.oracle);
free_win:
    /* The report must not show a phase this worker never finished as
     * passed: every phase was printed, all zero past the error, and a run
     * that failed on a store error read "pass" in each (an outside tester). */
    if (rc < 0 && !stop_why[0])
        snprintf(stop_why, sizeof(stop_why), "%s", rkv_strerror(rc));
    if (!stats) {
        int hr = wl_hand_over(worker, win, win_n, base, &done, sc->n_phases, on_stats, user,
                              scratch, rc < 0 ? stop_why : NULL, rc);
        rc = rc < 0 ? rc : hr;
    }
    for (uint32_t p = 0; p < win_n; p++) {
        if (stats) {
            wl_export(&win[p], &stats[p]);
            stats[p].stopped = rc < 0 && p >= verified;
            stats[p].stop_rc = rc < 0 && p == verified ? rc : 0;
            snprintf(stats[p].stop_error, sizeof(stats[p].stop_error), "%s",
                     rc < 0 && p == verified ? stop_why : "");
        }
        wl_stats_clear(&win[p]);
    }
    free(win);
    return rc;
}

void rkv_wl_print(FILE *out, uint32_t worker, uint32_t phase, const struct rkv_wl_phase_stats *st)
{
    rkv_wl_print_as(out, worker, phase, st, st->bytes);
}

void rkv_wl_print_as(FILE *out, uint32_t worker, uint32_t phase,
                     const struct rkv_wl_phase_stats *st, uint64_t bytes)
{
    fprintf(out,
            "PHASE w=%u p=%u pushes=%llu pulls=%llu bytes=%llu checks=%llu skipped=%llu "
            "errors=%llu wall_s=%.9f max_us=%.3f hist=",
            worker, phase, (unsigned long long)st->pushes, (unsigned long long)st->pulls,
            (unsigned long long)bytes, (unsigned long long)st->checks,
            (unsigned long long)st->skipped, (unsigned long long)st->errors, st->wall_s,
            st->max_us);
    int first = 1;
    for (uint32_t b = 0; b < RKV_WL_HIST; b++) {
        if (!st->hist[b])
            continue;
        fprintf(out, "%s%u:%llu", first ? "" : ",", b, (unsigned long long)st->hist[b]);
        first = 0;
    }
    fprintf(out, "%s\n", first ? "-" : "");
    if (st->errors)
        fprintf(out, "FIRSTERR w=%u p=%u %s\n", worker, phase, st->first_error);
    if (st->unresolved)
        fprintf(out, "UNRESOLVED w=%u p=%u n=%llu\n", worker, phase,
                (unsigned long long)st->unresolved);
    if (st->stopped) { /* one line whatever the error holds */
        fprintf(out, "STOPPED w=%u p=%u rc=%d ", worker, phase, st->stop_rc);
        for (const char *c = st->stop_error[0] ? st->stop_error : "-"; *c; c++)
            fputc((unsigned char)*c < 0x20 || *c == 0x7f ? ' ' : *c, out);
        fputc('\n', out);
    }
}

int rkv_wl_parse(const char *line, uint32_t *worker_p, uint32_t *phase_p,
                 struct rkv_wl_phase_stats *st)
{
    unsigned w, p;
    unsigned long long pu, pl, by, ch, sk, er;
    int off = 0;
    memset(st, 0, sizeof(*st));
    if (sscanf(line,
               "PHASE w=%u p=%u pushes=%llu pulls=%llu bytes=%llu checks=%llu skipped=%llu "
               "errors=%llu wall_s=%lf max_us=%lf hist=%n",
               &w, &p, &pu, &pl, &by, &ch, &sk, &er, &st->wall_s, &st->max_us, &off) != 10 ||
        off == 0)
        return -1;
    *st = (struct rkv_wl_phase_stats){.pushes = pu,
                                      .pulls = pl,
                                      .bytes = by,
                                      .checks = ch,
                                      .skipped = sk,
                                      .errors = er,
                                      .wall_s = st->wall_s,
                                      .max_us = st->max_us};
    for (const char *s = line + off; *s && *s != '-' && *s != '\n';) {
        unsigned b;
        unsigned long long c;
        int used = 0;
        if (sscanf(s, "%u:%llu%n", &b, &c, &used) != 2 || b >= RKV_WL_HIST)
            return -1;
        st->hist[b] += c;
        s += used;
        if (*s == ',')
            s++;
    }
    *worker_p = w;
    *phase_p = p;
    return 0;
}
