/* The scenario loader: libfyaml builds the document, this file walks it
 * against the schema, so every error can name file:line:col. */
#include <errno.h>
#include <libfyaml.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness/child_exit.h"
#include "harness/report_gather.h"
#include "harness/scenario.h"
#include "nic/nic_fault.h"
#include "port/port.h"
#include "store/pbook.h"
#include "util/util.h"

struct sc_ctx {
    const char *path;
    char *err;
    size_t err_len;
    struct rkv_scenario *sc;
    struct fy_node *backbone_key; /* sim.backbone_gbps, checked against the platform */
    struct fy_node *sim_key[16];  /* sim's keys by field, for checks made once it is read */
    /* Each explicit tensor's book and its key, expanded over the rows only
     * once sc_check_size has seen that the rows fit. */
    struct fy_node *book[RKV_SC_MAX_TENSORS], *book_key[RKV_SC_MAX_TENSORS];
};

/* Position of a node: scalars carry a token; for collections the caller
 * passes the key that introduced them instead. */
static void sc_pos(struct fy_node *n, int *line, int *col)
{
    *line = *col = 0;
    struct fy_token *t = n ? fy_node_get_scalar_token(n) : NULL;
    const struct fy_mark *m = t ? fy_token_start_mark(t) : NULL;
    if (m) {
        *line = m->line + 1;
        *col = m->column + 1;
    }
}

/* Position of any node: a scalar's own, a collection's first scalar (its
 * first key, or its first item's), so that a mapping-shaped item such as
 * a fault has a place too. */
static struct rkv_sc_mark sc_mark(struct fy_node *n)
{
    for (int depth = 0; n && depth < 64; depth++) {
        enum fy_node_type t = fy_node_get_type(n);
        if (t == FYNT_SCALAR) {
            int line, col;
            sc_pos(n, &line, &col);
            return (struct rkv_sc_mark){(uint32_t)line, (uint32_t)col};
        }
        void *it = NULL;
        if (t == FYNT_MAPPING) {
            struct fy_node_pair *p = fy_node_mapping_iterate(n, &it);
            n = p ? fy_node_pair_key(p) : NULL;
        } else {
            n = fy_node_sequence_iterate(n, &it);
        }
    }
    return (struct rkv_sc_mark){0, 0};
}

int rkv_scenario_where(const struct rkv_scenario *sc, struct rkv_sc_mark m, char *buf, size_t len)
{
    int n = m.line ? snprintf(buf, len, "%s:%u:%u: ", sc->path, m.line, m.col)
                   : snprintf(buf, len, "%s: ", sc->path);
    return n < 0 ? 0 : (size_t)n >= len ? (int)(len ? len - 1 : 0) : n;
}

static int sc_fail(struct sc_ctx *c, struct fy_node *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int sc_vfail_mark(struct sc_ctx *c, struct rkv_sc_mark m, const char *fmt, va_list ap)
{
    int n = m.line ? snprintf(c->err, c->err_len, "%s:%u:%u: ", c->path, m.line, m.col)
                   : snprintf(c->err, c->err_len, "%s: ", c->path);
    if (n >= 0 && (size_t)n < c->err_len)
        vsnprintf(c->err + n, c->err_len - (size_t)n, fmt, ap);
    /* One line: a value quoted from a block scalar ("rounds: |") carried
     * its newline into the middle of the error. */
    for (char *p = c->err; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = ' ';
    return -RKV_ECONFIG;
}

static int sc_fail(struct sc_ctx *c, struct fy_node *at, const char *fmt, ...)
{
    struct rkv_sc_mark m = sc_mark(at);
    /* An empty root ("{}", "[]") has no scalar to name: the document's
     * start does (it was refused with no position at all). */
    struct fy_document *doc = at && !m.line ? fy_node_document(at) : NULL;
    if (doc && fy_document_root(doc) == at) {
        struct fy_document_state *ds = fy_document_get_document_state(doc);
        const struct fy_mark *dm = ds ? fy_document_state_start_mark(ds) : NULL;
        if (dm)
            m = (struct rkv_sc_mark){(uint32_t)dm->line + 1, (uint32_t)dm->column + 1};
    }
    va_list ap;
    va_start(ap, fmt);
    int rc = sc_vfail_mark(c, m, fmt, ap);
    va_end(ap);
    return rc;
}

/* For checks made after parsing: the position recorded for the item. */
static int sc_fail_mark(struct sc_ctx *c, struct rkv_sc_mark m, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int sc_fail_mark(struct sc_ctx *c, struct rkv_sc_mark m, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = sc_vfail_mark(c, m, fmt, ap);
    va_end(ap);
    return rc;
}

static const char *sc_str(struct fy_node *v)
{
    const char *s = v && fy_node_get_type(v) == FYNT_SCALAR ? fy_node_get_scalar0(v) : NULL;
    return s ? s : "";
}

static int sc_scalar(struct sc_ctx *c, const char *name, struct fy_node *key, struct fy_node *v)
{
    if (!v || fy_node_get_type(v) != FYNT_SCALAR)
        return sc_fail(c, key, "%s: expected a single value, got a %s", name,
                       v && fy_node_get_type(v) == FYNT_SEQUENCE ? "list" : "mapping");
    /* "rounds:" with nothing after it: an empty scalar without a place of
     * its own, whose error named no line. */
    if (!*sc_str(v) && !sc_mark(v).line)
        return sc_fail(c, key, "%s: no value", name);
    /* A quoted "t\0x" is a NUL inside the value: read up to it, the rest
     * was dropped ("64\0junk" was rows 64, "t\0x" the tensor t). */
    size_t len = 0;
    const char *raw = fy_node_get_scalar(v, &len);
    if (raw && memchr(raw, 0, len))
        return sc_fail(c, v, "%s: a NUL character (\\0) inside the value", name);
    return 0;
}

static int sc_u64(struct sc_ctx *c, const char *name, struct fy_node *key, struct fy_node *v,
                  uint64_t min, uint64_t max, uint64_t *out)
{
    int rc = sc_scalar(c, name, key, v);
    if (rc < 0)
        return rc;
    const char *s = sc_str(v);
    uint64_t x = 0;
    if (rkv_parse_u64(s, &x) < 0)
        return sc_fail(c, v, "%s: expected %s integer, got \"%s\"", name,
                       min > 0 ? "a positive" : "a non-negative", s);
    if (x < min || x > max)
        return sc_fail(c, v, "%s: expected %llu..%llu, got %llu", name, (unsigned long long)min,
                       (unsigned long long)max, (unsigned long long)x);
    *out = x;
    return 0;
}

static int sc_u32(struct sc_ctx *c, const char *name, struct fy_node *key, struct fy_node *v,
                  uint32_t min, uint32_t max, uint32_t *out)
{
    uint64_t x = 0; /* set when rc == 0; GCC -O3 cannot see that and warns */
    int rc = sc_u64(c, name, key, v, min, max, &x);
    if (rc == 0)
        *out = (uint32_t)x;
    return rc;
}

static int sc_double(struct sc_ctx *c, const char *name, struct fy_node *key, struct fy_node *v,
                     double min, double max, double *out)
{
    int rc = sc_scalar(c, name, key, v);
    if (rc < 0)
        return rc;
    const char *s = sc_str(v);
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(x))
        return sc_fail(c, v, "%s: expected a number, got \"%s\"", name, s);
    if (x < min || x > max)
        return sc_fail(c, v, "%s: expected %g..%g, got %s", name, min, max,
                       s); /* as written: %g made 1.0000001 "1" */
    *out = x;
    return 0;
}

static int sc_bool(struct sc_ctx *c, const char *name, struct fy_node *key, struct fy_node *v,
                   int *out)
{
    int rc = sc_scalar(c, name, key, v);
    if (rc < 0)
        return rc;
    const char *s = sc_str(v);
    if (!strcmp(s, "true") || !strcmp(s, "yes"))
        *out = 1;
    else if (!strcmp(s, "false") || !strcmp(s, "no"))
        *out = 0;
    else
        return sc_fail(c, v, "%s: expected true or false (or yes or no), got \"%s\"", name, s);
    return 0;
}

/* One of a fixed set of words; returns its index. */
static int sc_enum(struct sc_ctx *c, const char *name, struct fy_node *key, struct fy_node *v,
                   const char *const *words, int n, int *out)
{
    int rc = sc_scalar(c, name, key, v);
    if (rc < 0)
        return rc;
    const char *s = sc_str(v);
    char list[256] = "";
    for (int i = 0; i < n; i++) {
        if (!strcmp(s, words[i])) {
            *out = i;
            return 0;
        }
        snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? ", " : "", words[i]);
    }
    return sc_fail(c, v, "%s: expected one of %s, got \"%s\"", name, list, s);
}

static int sc_name(struct sc_ctx *c, const char *name, struct fy_node *key, struct fy_node *v,
                   char *out, size_t out_len)
{
    int rc = sc_scalar(c, name, key, v);
    if (rc < 0)
        return rc;
    const char *s = sc_str(v);
    size_t len = strlen(s);
    if (!*s || len >= out_len) {
        /* A long one quoted in part, cut where a character starts: the
         * error's end cut it mid-character, with no closing quote. */
        int shown = len > 80 ? 80 : (int)len;
        while (shown > 0 && ((unsigned char)s[shown] & 0xc0) == 0x80)
            shown--;
        return sc_fail(c, v,
                       "%s: expected a name of 1..%zu bytes (UTF-8), got \"%.*s\"%s (%zu bytes)",
                       name, out_len - 1, shown, s, shown < (int)len ? "..." : "", len);
    }
    /* Names are printed in the report's tables and lines: a newline, a
     * control character or a '|' broke report.md and the table on stdout
     * (a tab does not; report.json escapes it). */
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        /* U+0080..U+009F (C1, UTF-8 0xC2 0x80..0x9F) too: NEL is a newline
         * to some readers (an outside tester's "p\u0085q"). */
        size_t at = (size_t)(p - (const unsigned char *)s);
        if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
            return sc_fail(c, v,
                           "%s: a name holds no control character but tab and no '|' (it is "
                           "printed in the report's tables), got U+00%02X (C1) at %zu",
                           name, p[1], at);
        if ((*p < 0x20 && *p != '\t') || *p == 0x7f || *p == '|')
            return sc_fail(c, v,
                           "%s: a name holds no control character but tab and no '|' (it is "
                           "printed in the report's tables), got byte 0x%02x at %zu",
                           name, *p, at);
    }
    snprintf(out, out_len, "%s", s);
    return 0;
}

/* Calls fn for every pair of a mapping after checking each key is known. */
typedef int (*sc_field_fn)(struct sc_ctx *c, void *obj, int field, struct fy_node *key,
                           struct fy_node *v);

static int sc_map(struct sc_ctx *c, const char *what, struct fy_node *at, struct fy_node *map,
                  const char *const *fields, int n_fields, sc_field_fn fn, void *obj)
{
    if (!map || fy_node_get_type(map) != FYNT_MAPPING)
        return sc_fail(c, at, "%s: expected a mapping of %s: ...", what, fields[0]);
    void *it = NULL;
    struct fy_node_pair *p;
    while ((p = fy_node_mapping_iterate(map, &it)) != NULL) {
        struct fy_node *k = fy_node_pair_key(p), *v = fy_node_pair_value(p);
        const char *ks = sc_str(k);
        size_t klen = 0;
        const char *kraw = fy_node_get_type(k) == FYNT_SCALAR ? fy_node_get_scalar(k, &klen) : NULL;
        if (kraw && memchr(kraw, 0, klen)) /* "rounds\0x" read as rounds */
            return sc_fail(c, k, "a key with a NUL character (\\0) in %s", what);
        int f = -1;
        for (int i = 0; i < n_fields && f < 0; i++)
            if (!strcmp(ks, fields[i]))
                f = i;
        if (f < 0) {
            char list[512] = "";
            for (int i = 0; i < n_fields; i++)
                snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? ", " : "",
                         fields[i]);
            return sc_fail(c, k, "unknown key \"%s\" in %s (expected one of: %s)", ks, what, list);
        }
        int rc = fn(c, obj, f, k, v);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ---- cluster ---- */

static const char *const sc_cluster_fields[] = {
    "machines", "servers_per_machine", "workers_per_machine", "durable", "retry_ms", "workers"};

static int sc_cluster_field(struct sc_ctx *c, void *obj, int f, struct fy_node *k,
                            struct fy_node *v)
{
    struct rkv_scenario *sc = obj;
    if (f == 3)
        return sc_bool(c, "durable", k, v, &sc->durable);
    if (f == 4)
        return sc_u32(c, "retry_ms", k, v, 0, 3600000, &sc->retry_ms);
    if (f == 5) {
        /* Fewer workers than the slots: machines past the last worker run
         * servers only (what a machine_lost fault needs). */
        sc->workers_mark = sc_mark(v);
        return sc_u32(c, "workers", k, v, 1, RKV_MAX_MACHINES * 64, &sc->workers_total);
    }
    uint32_t *dst[] = {&sc->machines, &sc->servers_per_machine, &sc->workers_per_machine};
    uint32_t max[] = {RKV_MAX_MACHINES, 64, 64};
    return sc_u32(c, sc_cluster_fields[f], k, v, 1, max[f], dst[f]);
}

/* ---- tensors ---- */

static const char *const sc_tensor_fields[] = {
    "name",      "dtype",           "rows",        "shape",      "partition", "book", "init",
    "init_seed", "optimizer_state", "local_order", "local_seed", "local_file"};
enum {
    TF_NAME,
    TF_DTYPE,
    TF_ROWS,
    TF_SHAPE,
    TF_PARTITION,
    TF_BOOK,
    TF_INIT,
    TF_SEED,
    TF_STATE,
    TF_LOCAL_ORDER,
    TF_LOCAL_SEED,
    TF_LOCAL_FILE,
    TF_COUNT_
};

struct sc_tensor_build {
    struct rkv_sc_tensor *t;
    struct fy_node *book; /* expanded after rows is known */
    struct fy_node *book_key;
    struct fy_node *local_key; /* local_order, for errors */
    int has_local_file;
    /* init_seed and local_seed, for errors: each seeds one choice only. */
    struct fy_node *init_seed_key, *local_seed_key;
};

static int sc_path(struct sc_ctx *c, const char *name, struct fy_node *key, struct fy_node *v,
                   const char *base, char *out, size_t out_len);

static int sc_shape(struct sc_ctx *c, struct fy_node *k, struct fy_node *v, struct rkv_sc_tensor *t)
{
    if (v && fy_node_get_type(v) == FYNT_SCALAR) {
        t->n_shape = 1;
        return sc_u32(c, "shape", k, v, 1, 1u << 26, &t->shape[0]);
    }
    if (!v || fy_node_get_type(v) != FYNT_SEQUENCE || fy_node_sequence_item_count(v) < 1 ||
        fy_node_sequence_item_count(v) > RKV_SC_MAX_SHAPE)
        return sc_fail(c, k, "shape: expected a list of 1..%d positive integers", RKV_SC_MAX_SHAPE);
    void *it = NULL;
    struct fy_node *e;
    uint64_t elems = 1;
    t->n_shape = 0;
    while ((e = fy_node_sequence_iterate(v, &it)) != NULL) {
        int rc = sc_u32(c, "shape", k, e, 1, 1u << 26, &t->shape[t->n_shape++]);
        if (rc < 0)
            return rc;
        elems *= t->shape[t->n_shape - 1];
        if (elems > (1u << 26))
            return sc_fail(c, e, "shape: more than 2^26 elements per row");
    }
    return 0;
}

static int sc_tensor_field(struct sc_ctx *c, void *obj, int f, struct fy_node *k, struct fy_node *v)
{
    struct sc_tensor_build *b = obj;
    struct rkv_tensor_desc *d = &b->t->desc;
    static const char *const dtypes[] = {"f32", "f64", "i32", "i64"};
    static const char *const parts[] = {"range", "hash", "explicit"};
    static const char *const inits[] = {"zeros", "uniform"};
    static const char *const orders[] = {"book", "permuted", "file"};
    int i, rc;
    switch (f) {
    case TF_LOCAL_ORDER:
        b->local_key = k;
        rc = sc_enum(c, "local_order", k, v, orders, 3, &i);
        b->t->local_order = i;
        return rc;
    case TF_LOCAL_SEED:
        b->local_seed_key = k;
        return sc_u64(c, "local_seed", k, v, 1, UINT64_MAX, &b->t->local_seed);
    case TF_LOCAL_FILE:
        b->has_local_file = 1;
        return sc_path(c, "local_file", k, v, c->sc->path, b->t->local_file,
                       sizeof(b->t->local_file));
    case TF_NAME:
        return sc_name(c, "name", k, v, d->name, sizeof(d->name));
    case TF_DTYPE:
        rc = sc_enum(c, "dtype", k, v, dtypes, 4, &i);
        d->dtype = (enum rkv_dtype)(i + 1);
        return rc;
    case TF_ROWS:
        return sc_u64(c, "rows", k, v, 1, 1ull << 32, &d->rows);
    case TF_SHAPE:
        return sc_shape(c, k, v, b->t);
    case TF_PARTITION:
        rc = sc_enum(c, "partition", k, v, parts, 3, &i);
        d->policy = (enum rkv_policy)(i + 1);
        return rc;
    case TF_BOOK:
        if (!v || fy_node_get_type(v) != FYNT_SEQUENCE || fy_node_sequence_item_count(v) < 1)
            return sc_fail(c, k, "book: expected a non-empty list of machine ids");
        b->book = v;
        b->book_key = k;
        return 0;
    case TF_INIT:
        rc = sc_enum(c, "init", k, v, inits, 2, &i);
        d->init = (enum rkv_init)i;
        return rc;
    case TF_SEED:
        b->init_seed_key = k;
        return sc_u64(c, "init_seed", k, v, 0, UINT64_MAX, &d->init_seed);
    default:
        return sc_bool(c, "optimizer_state", k, v, &d->with_state);
    }
}

/* The book repeats cyclically over the rows: [0, 1, 1] is a 1:2 split. */
static int sc_book(struct sc_ctx *c, uint32_t i, uint32_t machines)
{
    struct rkv_sc_tensor *t = &c->sc->tensors[i];
    struct fy_node *book = c->book[i], *book_key = c->book_key[i];
    int n = fy_node_sequence_item_count(book);
    uint32_t *pat = calloc((size_t)n, sizeof(*pat));
    t->book = calloc(t->desc.rows, sizeof(*t->book));
    if (!pat || !t->book) {
        free(pat);
        return sc_fail(c, book_key, "book: out of memory");
    }
    void *it = NULL;
    struct fy_node *e;
    int k = 0, rc = 0;
    while (rc == 0 && (e = fy_node_sequence_iterate(book, &it)) != NULL)
        rc = sc_u32(c, "book", book_key, e, 0, machines - 1, &pat[k++]);
    for (uint64_t r = 0; rc == 0 && r < t->desc.rows; r++)
        t->book[r] = pat[r % (uint64_t)n];
    free(pat);
    t->desc.book = t->book;
    return rc;
}

static int sc_tensor(struct sc_ctx *c, struct fy_node *at, struct fy_node *item)
{
    struct rkv_scenario *sc = c->sc;
    if (sc->n_tensors == RKV_SC_MAX_TENSORS)
        return sc_fail(c, at, "tensors: at most %d", RKV_SC_MAX_TENSORS);
    struct rkv_sc_tensor *t = &sc->tensors[sc->n_tensors++];
    memset(t, 0, sizeof(*t));
    t->desc.dtype = RKV_F32;
    t->desc.policy = RKV_PART_RANGE;
    t->shape[0] = 1;
    t->n_shape = 1;
    t->mark = sc_mark(item);
    struct sc_tensor_build b = {.t = t};
    int rc = sc_map(c, "tensors[]", at, item, sc_tensor_fields, TF_COUNT_, sc_tensor_field, &b);
    if (rc < 0)
        return rc;
    if (!t->desc.name[0] || !t->desc.rows)
        return sc_fail(c, at, "tensors[]: name and rows are required");
    if (!strcmp(t->desc.name, RKV_REPORT_TENSOR)) /* launcher-started runs' reports */
        return sc_fail(c, at, "tensors[]: name \"%s\" is reserved for the workers' reports",
                       t->desc.name);
    for (uint32_t i = 0; i + 1 < sc->n_tensors; i++)
        if (!strcmp(sc->tensors[i].desc.name, t->desc.name))
            return sc_fail(c, at, "tensors[]: name \"%s\" used twice", t->desc.name);
    t->desc.row_len = 1;
    for (uint32_t i = 0; i < t->n_shape; i++)
        t->desc.row_len *= t->shape[i];
    if ((t->desc.policy == RKV_PART_EXPLICIT) != (b.book != NULL))
        return sc_fail(c, b.book ? b.book_key : at,
                       "tensors[]: \"%s\": book is needed exactly when partition is explicit",
                       t->desc.name);
    if (t->local_order != RKV_SC_LOCAL_BOOK && !b.book)
        return sc_fail(c, b.local_key,
                       "tensors[]: \"%s\": local_order needs an explicit partition (a book)",
                       t->desc.name);
    if ((t->local_order == RKV_SC_LOCAL_FILE) != b.has_local_file)
        return sc_fail(c, b.local_key ? b.local_key : at,
                       "tensors[]: \"%s\": local_file is needed exactly when local_order is file",
                       t->desc.name);
    /* A seed that seeds nothing was ignored: the user thought the rows
     * or the order depended on it. */
    if (b.init_seed_key && t->desc.init != RKV_INIT_UNIFORM)
        return sc_fail(c, b.init_seed_key,
                       "tensors[]: \"%s\": init_seed seeds init: uniform only (this tensor "
                       "starts at zeros)",
                       t->desc.name);
    if (b.local_seed_key && t->local_order != RKV_SC_LOCAL_PERMUTED)
        return sc_fail(c, b.local_seed_key,
                       "tensors[]: \"%s\": local_seed seeds local_order: permuted only",
                       t->desc.name);
    c->book[sc->n_tensors - 1] = b.book;
    c->book_key[sc->n_tensors - 1] = b.book_key;
    return 0;
}

/* ---- workload phases ---- */

static const char *const sc_phase_fields[] = {
    "name", "tensor", "push",   "pull",          "push_op",  "lr",          "ids_per_request",
    "keys", "zipf_s", "rounds", "barrier_after", "think_us", "pull_handler"};
enum {
    PF_NAME,
    PF_TENSOR,
    PF_PUSH,
    PF_PULL,
    PF_OP,
    PF_LR,
    PF_IDS,
    PF_KEYS,
    PF_ZIPF,
    PF_ROUNDS,
    PF_BARRIER,
    PF_THINK,
    PF_PULL_HANDLER,
    PF_COUNT_
};

struct sc_phase_build {
    struct rkv_sc_phase *p;
    double push, pull;
    int has_push, has_pull;
    struct fy_node *key[PF_COUNT_]; /* each given key, for sc_phase_applies' errors */
};

static int sc_phase_field(struct sc_ctx *c, void *obj, int f, struct fy_node *k, struct fy_node *v)
{
    struct sc_phase_build *b = obj;
    struct rkv_sc_phase *p = b->p;
    static const char *const ops[] = {"assign", "sum", "sgd"};
    static const char *const keys[] = {"uniform", "zipf", "sequential", "local-only",
                                       "remote-only"};
    int i, rc;
    b->key[f] = k;
    switch (f) {
    case PF_NAME:
        return sc_name(c, "name", k, v, p->name, sizeof(p->name));
    case PF_TENSOR: {
        char name[RKV_NAME_MAX + 1];
        if ((rc = sc_name(c, "tensor", k, v, name, sizeof(name))) < 0)
            return rc;
        for (uint32_t t = 0; t < c->sc->n_tensors; t++) {
            if (!strcmp(c->sc->tensors[t].desc.name, name)) {
                p->tensor = t;
                return 0;
            }
        }
        return sc_fail(c, v,
                       "tensor: expected the name of a tensor declared in tensors, got "
                       "\"%s\"",
                       name);
    }
    case PF_PUSH:
        b->has_push = 1;
        return sc_double(c, "push", k, v, 0, 1, &b->push);
    case PF_PULL:
        b->has_pull = 1;
        return sc_double(c, "pull", k, v, 0, 1, &b->pull);
    case PF_OP:
        p->push_op_mark = sc_mark(v);
        rc = sc_enum(c, "push_op", k, v, ops, 3, &i);
        p->push_op = i == 0 ? RKV_OP_ASSIGN : i == 1 ? RKV_OP_SUM : RKV_OP_SGD;
        return rc;
    case PF_LR:
        rc = sc_double(c, "lr", k, v, 0, 1e6, &p->lr);
        /* An sgd step of 0 leaves every row as it was: a lost or doubled
         * push would pass unseen, so the oracle would check nothing. */
        if (rc == 0 && p->lr == 0)
            return sc_fail(c, v,
                           "lr: expected a step above 0 (lr 0 changes no row, so no push "
                           "could be checked)");
        return rc;
    case PF_IDS:
        p->ids_mark = sc_mark(v);
        return sc_u32(c, "ids_per_request", k, v, 1, 1u << 20, &p->ids_per_request);
    case PF_KEYS:
        p->keys_mark = sc_mark(v);
        rc = sc_enum(c, "keys", k, v, keys, 5, &i);
        p->keys = (enum rkv_sc_keys)(i + 1);
        return rc;
    case PF_ZIPF:
        return sc_double(c, "zipf_s", k, v, 0.01, 10, &p->zipf_s);
    case PF_ROUNDS:
        return sc_u32(c, "rounds", k, v, 1, 10000000, &p->rounds);
    case PF_BARRIER:
        p->barrier_mark = sc_mark(v);
        return sc_bool(c, "barrier_after", k, v, &p->barrier_after);
    case PF_PULL_HANDLER: {
        static const char *const handlers[] = {"rows", "with_state"};
        rc = sc_enum(c, "pull_handler", k, v, handlers, 2, &i);
        p->pull_handler = i == 0 ? RKV_PULL_ROWS : RKV_PULL_WITH_STATE;
        return rc;
    }
    default:
        return sc_u32(c, "think_us", k, v, 0, 10000000, &p->think_us);
    }
}

/* A key that cannot act on its phase was accepted and ignored: the run
 * did something else than the file said (lr: 0.01 on a sum phase pushed
 * plain sums). Each one is refused where it stands. */
static int sc_phase_applies(struct sc_ctx *c, const struct sc_phase_build *b)
{
    const struct rkv_sc_phase *p = b->p;
    static const char *const ops[] = {
        [RKV_OP_ASSIGN] = "assign", [RKV_OP_SUM] = "sum", [RKV_OP_SGD] = "sgd"};
    static const char *const keys[] = {[RKV_KEYS_UNIFORM] = "uniform",
                                       [RKV_KEYS_ZIPF] = "zipf",
                                       [RKV_KEYS_SEQUENTIAL] = "sequential",
                                       [RKV_KEYS_LOCAL_ONLY] = "local-only",
                                       [RKV_KEYS_REMOTE_ONLY] = "remote-only"};
    if (b->key[PF_OP] && b->push <= 0)
        return sc_fail(c, b->key[PF_OP],
                       "workload[] \"%s\": push_op: the phase never pushes (push: 0), so no "
                       "push op applies",
                       p->name);
    if (b->key[PF_LR] && p->push_op != RKV_OP_SGD)
        return sc_fail(c, b->key[PF_LR],
                       "workload[] \"%s\": lr applies to push_op: sgd only, the phase's push_op "
                       "is %s",
                       p->name, ops[p->push_op]);
    if (b->key[PF_ZIPF] && p->keys != RKV_KEYS_ZIPF)
        return sc_fail(c, b->key[PF_ZIPF],
                       "workload[] \"%s\": zipf_s applies to keys: zipf only, the phase's keys "
                       "are %s",
                       p->name, keys[p->keys]);
    if (b->key[PF_PULL_HANDLER] && b->pull <= 0)
        return sc_fail(c, b->key[PF_PULL_HANDLER],
                       "workload[] \"%s\": pull_handler: the phase never pulls (pull: 0), so no "
                       "pull handler applies",
                       p->name);
    return 0;
}

static int sc_phase(struct sc_ctx *c, struct fy_node *at, struct fy_node *item)
{
    struct rkv_scenario *sc = c->sc;
    if (sc->n_phases == RKV_SC_MAX_PHASES)
        return sc_fail(c, at, "workload: at most %d phases", RKV_SC_MAX_PHASES);
    struct rkv_sc_phase *p = &sc->phases[sc->n_phases++];
    *p = (struct rkv_sc_phase){.push_op = RKV_OP_SUM,
                               .lr = 0.5,
                               .ids_per_request = 16,
                               .keys = RKV_KEYS_UNIFORM,
                               .zipf_s = 1.1,
                               .rounds = 10,
                               .barrier_after = 1};
    snprintf(p->name, sizeof(p->name), "phase%u", sc->n_phases);
    struct sc_phase_build b = {.p = p};
    if (sc->n_tensors == 0)
        return sc_fail(c, at, "workload: declare tensors before the workload");
    p->mark = sc_mark(item);
    int rc = sc_map(c, "workload[]", at, item, sc_phase_fields, PF_COUNT_, sc_phase_field, &b);
    if (rc < 0)
        return rc;
    /* Without it the phase ran on the first tensor, whichever that was. */
    if (!b.key[PF_TENSOR])
        return sc_fail_mark(c, p->mark, "workload[] \"%s\": tensor is required (one of tensors)",
                            p->name);
    /* after_phase picks the first phase of a name, and the report's rows
     * and report.json could not tell two apart. */
    for (uint32_t i = 0; i + 1 < sc->n_phases; i++)
        if (!strcmp(sc->phases[i].name, p->name))
            return sc_fail_mark(c, p->mark, "workload[]: name \"%s\" used twice (phase %u)",
                                p->name, i + 1);
    if (!b.has_push && !b.has_pull)
        b.push = b.pull = 0.5;
    else if (!b.has_pull)
        b.pull = 1 - b.push;
    else if (!b.has_push)
        b.push = 1 - b.pull;
    if (fabs(b.push + b.pull - 1.0) > 1e-9)
        return sc_fail(c, at, "workload[] \"%s\": push + pull must be 1, got %g", p->name,
                       b.push + b.pull);
    p->push_fraction = b.push;
    if ((rc = sc_phase_applies(c, &b)) < 0)
        return rc;
    const struct rkv_sc_tensor *t = &sc->tensors[p->tensor];
    if (p->push_op == RKV_OP_SGD && t->desc.dtype != RKV_F32 && t->desc.dtype != RKV_F64)
        return sc_fail(c, at, "workload[] \"%s\": sgd needs a f32 or f64 tensor, \"%s\" is %s",
                       p->name, t->desc.name, rkv_dtype_name(t->desc.dtype));
    /* A step below the dtype's resolution at the rows' scale (|values| up
     * to 1 before the phase, terms lr x -8..8) changes nothing the oracle
     * can tell from rounding: lr 1e-300 on f32 rounds to 0 and the phase
     * checked nothing, as lr 0 would. 16 ulps of 1.0: the oracle allows 4
     * per add (or_round_err). */
    double step_min = 16 * (t->desc.dtype == RKV_F32 ? 0x1.0p-23 : 0x1.0p-52);
    if (p->push_op == RKV_OP_SGD && p->lr < step_min)
        return sc_fail(c, at,
                       "workload[] \"%s\": lr %g is below what %s shows (at least %g: a smaller "
                       "step is lost in rounding, so no push could be checked)",
                       p->name, p->lr, rkv_dtype_name(t->desc.dtype), step_min);
    if (p->pull_handler == RKV_PULL_WITH_STATE && !t->desc.with_state)
        return sc_fail(c, at,
                       "workload[] \"%s\": pull_handler with_state needs a tensor with "
                       "optimizer_state: true, \"%s\" has none",
                       p->name, t->desc.name);
    return 0;
}

/* ---- faults, expect, per-backend blocks ---- */

static const char *const sc_fault_fields[] = {
    "kind",     "target",        "at_s",   "fraction",        "after_phase", "duration_s",
    "delay_ms", "retransmit_ms", "factor", "restart_after_s", "machine_lost"};
#define SC_N_FAULT_FIELDS (sizeof(sc_fault_fields) / sizeof(sc_fault_fields[0]))
_Static_assert(SC_N_FAULT_FIELDS == RKV_SC_F_COUNT_, "scenario.h names every fault field");

static int sc_fault_field(struct sc_ctx *c, void *obj, int f, struct fy_node *k, struct fy_node *v)
{
    struct rkv_sc_fault *fl = obj;
    /* the value's place, for the checks made once the file is read */
    fl->field_mark[f] = sc_mark(v);
    if (!fl->field_mark[f].line)
        fl->field_mark[f] = sc_mark(k);
    static const char *const kinds[] = {"drop", "delay", "crash", "link_down", "slow_cpu"};
    int i, rc;
    switch (f) {
    case 0:
        if ((rc = sc_enum(c, "kind", k, v, kinds, 5, &i)) == 0)
            snprintf(fl->kind, sizeof(fl->kind), "%s", kinds[i]);
        return rc;
    case 1:
        return sc_name(c, "target", k, v, fl->target, sizeof(fl->target));
    case 2:
        return sc_double(c, "at_s", k, v, 0, 1e9, &fl->at_s);
    case 3:
        return sc_double(c, "fraction", k, v, 0, 1, &fl->fraction);
    case 4:
        return sc_name(c, "after_phase", k, v, fl->after_phase, sizeof(fl->after_phase));
    case 5:
        return sc_double(c, "duration_s", k, v, 0, 1e9, &fl->duration_s);
    case 6:
        return sc_double(c, "delay_ms", k, v, 0, 1e9, &fl->delay_ms);
    case 7:
        return sc_double(c, "retransmit_ms", k, v, 0.001, 1e6, &fl->retransmit_ms);
    case 8:
        return sc_double(c, "factor", k, v, 1, 1e6, &fl->factor);
    case 9: {
        /* 0 was taken as "no restart" without a word; leaving the key out
         * says that. */
        int rc = sc_double(c, "restart_after_s", k, v, 0, 1e6, &fl->restart_after_s);
        if (rc == 0 && fl->restart_after_s == 0)
            return sc_fail(c, v,
                           "restart_after_s: expected a time above 0 (leave it out for a crash "
                           "the node does not come back from)");
        return rc;
    }
    default:
        return sc_bool(c, "machine_lost", k, v, &fl->machine_lost);
    }
}

static const char *const sc_expect_fields[] = {"oracle", "min_throughput_gbps", "max_p99_us"};

static int sc_expect_field(struct sc_ctx *c, void *obj, int f, struct fy_node *k, struct fy_node *v)
{
    struct rkv_scenario *sc = obj;
    static const char *const modes[] = {"strict"};
    int i;
    if (f == 0) {
        int rc = sc_enum(c, "oracle", k, v, modes, 1, &i);
        sc->oracle_strict = 1;
        return rc;
    }
    /* 0 is "no bound" to the report, which then said nothing of a bound
     * the file gave: refused rather than dropped. */
    double *out = f == 1 ? &sc->expect_min_gbps : &sc->expect_max_p99_us;
    int rc = f == 1 ? sc_double(c, "min_throughput_gbps", k, v, 0, 1e6, out)
                    : sc_double(c, "max_p99_us", k, v, 0, 1e12, out);
    if (rc == 0 && *out == 0)
        return sc_fail(c, v, "%s: expected a bound above 0 (leave the key out for none)",
                       f == 1 ? "min_throughput_gbps" : "max_p99_us");
    return rc;
}

static const char *const sc_tcp_fields[] = {"base_port"};
static const char *const sc_sim_fields[] = {
    "platform",      "bandwidth_gbps", "latency_us", "jitter",
    "platform_file", "backbone_gbps",  "cores",      "payloadless",
    "row_cost_ns",   "msg_cost_ns",    "solver",     "send_byte_ns",
    "recv_byte_ns",  "copy_byte_ns",   "scheduler",  "wake_us"};
static const char *const sc_verbs_fields[] = {"device", "port", "gid_index"};

static int sc_tcp_field(struct sc_ctx *c, void *obj, int f, struct fy_node *k, struct fy_node *v)
{
    (void)f;
    struct rkv_scenario *sc = obj;
    return sc_u32(c, "base_port", k, v, 0, 65535, &sc->tcp_base_port);
}

/* A path in the scenario is relative to the scenario file. */
static int sc_path(struct sc_ctx *c, const char *name, struct fy_node *key, struct fy_node *v,
                   const char *base, char *out, size_t out_len)
{
    char tmp[256];
    int rc = sc_name(c, name, key, v, tmp, sizeof(tmp));
    if (rc < 0)
        return rc;
    const char *slash = strrchr(base, '/');
    int n = tmp[0] == '/' || !slash
                ? snprintf(out, out_len, "%s", tmp)
                : snprintf(out, out_len, "%.*s/%s", (int)(slash - base), base, tmp);
    if (n < 0 || (size_t)n >= out_len)
        return sc_fail(c, v, "%s: path too long", name);
    return 0;
}

static const char *const sc_topologies[] = {"star",     "cluster",  "fattree",
                                            "loopback", "fattree3", "rail"};
enum { PL_TOPOLOGY, PL_LEAF, PL_POD, PL_RAILS, PL_OVERSUB, PL_POD_OVERSUB, PL_UPLINK_LAT, PL_N_ };
static const char *const sc_plat_fields[] = {
    "topology",         "machines_per_leaf",    "leaves_per_pod",   "rails",
    "oversubscription", "pod_oversubscription", "uplink_latency_us"};

struct sc_plat_build {
    struct rkv_scenario *sc;
    struct fy_node *key[PL_N_];
};

static int sc_plat_field(struct sc_ctx *c, void *obj, int f, struct fy_node *k, struct fy_node *v)
{
    struct sc_plat_build *b = obj;
    struct rkv_scenario *sc = b->sc;
    int i, rc;
    b->key[f] = k;
    switch (f) {
    case PL_TOPOLOGY:
        rc = sc_enum(c, "topology", k, v, sc_topologies, 6, &i);
        if (rc == 0)
            snprintf(sc->sim_platform, sizeof(sc->sim_platform), "%s", sc_topologies[i]);
        return rc;
    case PL_LEAF:
        return sc_u32(c, "machines_per_leaf", k, v, 1, 65536, &sc->sim_leaf_machines);
    case PL_POD:
        return sc_u32(c, "leaves_per_pod", k, v, 1, 65536, &sc->sim_pod_leaves);
    case PL_RAILS:
        return sc_u32(c, "rails", k, v, 1, 64, &sc->sim_rails);
    case PL_OVERSUB:
        return sc_double(c, "oversubscription", k, v, 1, 1024, &sc->sim_oversub);
    case PL_POD_OVERSUB:
        return sc_double(c, "pod_oversubscription", k, v, 1, 1024, &sc->sim_pod_oversub);
    default:
        return sc_double(c, "uplink_latency_us", k, v, 1e-3, 1e6, &sc->sim_uplink_latency_us);
    }
}

/* sim.platform as a mapping: the generated big-cluster fabrics and their
 * shape. Keys of another topology, and counts the cluster cannot fill, are
 * errors rather than silently ignored. */
static int sc_platform(struct sc_ctx *c, struct fy_node *k, struct fy_node *v)
{
    struct rkv_scenario *sc = c->sc;
    struct sc_plat_build b = {.sc = sc};
    int rc = sc_map(c, "sim.platform", k, v, sc_plat_fields, PL_N_, sc_plat_field, &b);
    if (rc < 0)
        return rc;
    if (!b.key[PL_TOPOLOGY])
        return sc_fail(c, k, "sim.platform: topology is required (fattree3 or rail)");
    int tree = !strcmp(sc->sim_platform, "fattree3"), rail = !strcmp(sc->sim_platform, "rail");
    for (int f = PL_LEAF; f < PL_N_; f++) {
        int tree_only = f == PL_POD || f == PL_POD_OVERSUB;
        if (b.key[f] && (tree_only ? !tree : f == PL_RAILS ? !rail : !tree && !rail))
            return sc_fail(c, b.key[f], "%s: only for topology %s, not %s", sc_plat_fields[f],
                           tree_only       ? "fattree3"
                           : f == PL_RAILS ? "rail"
                                           : "fattree3 or rail",
                           sc->sim_platform);
    }
    /* machines is 0 when the cluster lacks it: sc_sections says so next. */
    if (sc->machines && sc->sim_leaf_machines > sc->machines)
        return sc_fail(c, b.key[PL_LEAF],
                       "machines_per_leaf: %u is more than the cluster's %u machines",
                       sc->sim_leaf_machines, sc->machines);
    uint64_t leaf =
        sc->sim_leaf_machines ? sc->sim_leaf_machines : (sc->machines < 16 ? sc->machines : 16);
    if (sc->machines && sc->sim_pod_leaves && leaf * sc->sim_pod_leaves > sc->machines)
        return sc_fail(c, b.key[PL_POD],
                       "leaves_per_pod: %u leaves of %llu machines are more than the cluster's "
                       "%u machines, so there is no third level (use topology fattree)",
                       sc->sim_pod_leaves, (unsigned long long)leaf, sc->machines);
    return 0;
}

static int sc_sim_field(struct sc_ctx *c, void *obj, int f, struct fy_node *k, struct fy_node *v)
{
    struct rkv_scenario *sc = obj;
    const char *const *topologies = sc_topologies;
    static const char *const solvers[] = {"maxmin", "fairbottleneck"};
    static const char *const schedulers[] = {"share", "cores"};
    int i, rc;
    if (f >= 0 && f < 16)
        c->sim_key[f] = k; /* "wake_us" is field 15 */
    switch (f) {
    case 0:
        if (v && fy_node_get_type(v) == FYNT_MAPPING)
            return sc_platform(c, k, v);
        rc = sc_enum(c, "platform", k, v, topologies, 6, &i);
        if (rc == 0)
            snprintf(sc->sim_platform, sizeof(sc->sim_platform), "%s", topologies[i]);
        return rc;
    case 1:
        return sc_double(c, "bandwidth_gbps", k, v, 1e-6, 1e6, &sc->sim_bandwidth_gbps);
    case 2:
        /* 0 stood for "not given" and ran the default 1 us: refused. */
        return sc_double(c, "latency_us", k, v, 1e-6, 1e9, &sc->sim_latency_us);
    case 3:
        return sc_double(c, "jitter", k, v, 0, 1, &sc->sim_jitter);
    case 4:
        rc = sc_path(c, "platform_file", k, v, sc->path, sc->sim_platform_file,
                     sizeof(sc->sim_platform_file));
        sc->sim_platform_file_mark = sc_mark(v);
        /* SimGrid aborts the process on a file it cannot open, on an empty
         * one (/dev/null), and waits forever on a FIFO. */
        if (rc == 0 && access(sc->sim_platform_file, R_OK) != 0)
            return sc_fail(c, v, "platform_file: cannot read %s: %s", sc->sim_platform_file,
                           strerror(errno));
        struct stat st;
        if (rc == 0 &&
            (stat(sc->sim_platform_file, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0))
            return sc_fail(c, v, "platform_file: %s is %s, not a SimGrid platform (XML)",
                           sc->sim_platform_file,
                           S_ISDIR(st.st_mode)   ? "a directory"
                           : S_ISREG(st.st_mode) ? "empty"
                                                 : "not a regular file");
        return rc;
    case 5:
        c->backbone_key = k;
        return sc_double(c, "backbone_gbps", k, v, 1e-6, 1e9, &sc->sim_backbone_gbps);
    case 6:
        return sc_u32(c, "cores", k, v, 1, 4096, &sc->sim_cores);
    case 7:
        return sc_bool(c, "payloadless", k, v, &sc->sim_payloadless);
    case 8:
        return sc_double(c, "row_cost_ns", k, v, 0, 1e9, &sc->sim_row_cost_ns);
    case 9:
        return sc_double(c, "msg_cost_ns", k, v, 0, 1e9, &sc->sim_msg_cost_ns);
    case 11:
        return sc_double(c, "send_byte_ns", k, v, 0, 1e6, &sc->sim_send_byte_ns);
    case 12:
        return sc_double(c, "recv_byte_ns", k, v, 0, 1e6, &sc->sim_recv_byte_ns);
    case 13:
        return sc_double(c, "copy_byte_ns", k, v, 0, 1e6, &sc->sim_copy_byte_ns);
    case 14:
        rc = sc_enum(c, "scheduler", k, v, schedulers, 2, &i);
        sc->sim_sched_cores = i;
        return rc;
    case 15:
        return sc_double(c, "wake_us", k, v, 0, 1e6, &sc->sim_wake_us);
    default:
        rc = sc_enum(c, "solver", k, v, solvers, 2, &i);
        sc->sim_fairbottleneck = i == 1;
        return rc;
    }
}

static int sc_verbs_field(struct sc_ctx *c, void *obj, int f, struct fy_node *k, struct fy_node *v)
{
    struct rkv_scenario *sc = obj;
    if (f == 0)
        return sc_name(c, "device", k, v, sc->verbs_device, sizeof(sc->verbs_device));
    if (f == 1)
        return sc_u32(c, "port", k, v, 1, 255, &sc->verbs_port);
    return sc_u32(c, "gid_index", k, v, 0, 255, &sc->verbs_gid_index);
}

/* ---- top level ---- */

static const char *const sc_top_fields[] = {"seed",   "cluster", "tensors", "workload", "faults",
                                            "expect", "tcp",     "sim",     "verbs"};
enum {
    TOP_SEED,
    TOP_CLUSTER,
    TOP_TENSORS,
    TOP_WORKLOAD,
    TOP_FAULTS,
    TOP_EXPECT,
    TOP_TCP,
    TOP_SIM,
    TOP_VERBS,
    TOP_N_
};

struct sc_top {
    struct fy_node *key[TOP_N_], *val[TOP_N_];
};

static int sc_top_field(struct sc_ctx *c, void *obj, int f, struct fy_node *k, struct fy_node *v)
{
    (void)c;
    struct sc_top *t = obj;
    t->key[f] = k;
    t->val[f] = v;
    return 0;
}

typedef int (*sc_item_fn)(struct sc_ctx *c, struct fy_node *at, struct fy_node *item);

static int sc_list(struct sc_ctx *c, const char *what, struct fy_node *k, struct fy_node *v,
                   sc_item_fn fn)
{
    if (!v || fy_node_get_type(v) != FYNT_SEQUENCE)
        return sc_fail(c, k, "%s: expected a list (lines starting with '- ')", what);
    void *it = NULL;
    struct fy_node *item;
    while ((item = fy_node_sequence_iterate(v, &it)) != NULL) {
        int rc = fn(c, k, item);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int sc_fault(struct sc_ctx *c, struct fy_node *at, struct fy_node *item)
{
    struct rkv_scenario *sc = c->sc;
    if (sc->n_faults == RKV_SC_MAX_FAULTS)
        return sc_fail(c, at, "faults: at most %d", RKV_SC_MAX_FAULTS);
    struct rkv_sc_fault *f = &sc->faults[sc->n_faults++];
    f->retransmit_ms = 200; /* Linux TCP's minimum RTO; a common RC ACK timeout too */
    f->factor = 1;
    f->mark = sc_mark(item);
    return sc_map(c, "faults[]", at, item, sc_fault_fields, SC_N_FAULT_FIELDS, sc_fault_field, f);
}

/* An alias (*name) is refused where it stands: unresolved, it read as its
 * own name ("expected a positive integer, got \"m\""); resolved, a few
 * lines of nested aliases could expand to gigabytes. Depth is bounded as
 * sc_mark's is (deeper nesting is refused by the sections' own shapes). */
static int sc_no_alias(struct sc_ctx *c, struct fy_node *n, int depth)
{
    if (!n || depth > 64)
        return 0;
    if (fy_node_is_alias(n))
        return sc_fail(c, n,
                       "a YAML alias (*%s): a scenario does not resolve anchors; write the value "
                       "out",
                       fy_node_get_scalar0(n) ? fy_node_get_scalar0(n) : "");
    void *it = NULL;
    int rc = 0;
    if (fy_node_get_type(n) == FYNT_MAPPING) {
        for (struct fy_node_pair *p; rc == 0 && (p = fy_node_mapping_iterate(n, &it));)
            if ((rc = sc_no_alias(c, fy_node_pair_key(p), depth + 1)) == 0)
                rc = sc_no_alias(c, fy_node_pair_value(p), depth + 1);
    } else if (fy_node_get_type(n) == FYNT_SEQUENCE) {
        for (struct fy_node *v; rc == 0 && (v = fy_node_sequence_iterate(n, &it));)
            rc = sc_no_alias(c, v, depth + 1);
    }
    return rc;
}

static int sc_sections(struct sc_ctx *c, struct fy_node *root)
{
    struct rkv_scenario *sc = c->sc;
    struct sc_top t = {0};
    /* A document with no node ("---" alone) has no place of its own: it
     * was refused with none, where an empty file says 1:1. */
    if (!root || (fy_node_get_type(root) == FYNT_SCALAR && !sc_mark(root).line))
        return sc_fail_mark(c, (struct rkv_sc_mark){1, 1},
                            "the scenario: expected a mapping of %s: ..., got an empty document",
                            sc_top_fields[0]);
    int rc = sc_map(c, "the scenario", root, root, sc_top_fields, TOP_N_, sc_top_field, &t);
    if (rc < 0)
        return rc;
    static const int required[] = {TOP_CLUSTER, TOP_TENSORS, TOP_WORKLOAD};
    for (size_t i = 0; i < 3; i++)
        if (!t.key[required[i]])
            return sc_fail(c, root,
                           "missing section \"%s\" (cluster, tensors and workload are "
                           "required)",
                           sc_top_fields[required[i]]);
    if (t.key[TOP_SEED] &&
        (rc = sc_u64(c, "seed", t.key[TOP_SEED], t.val[TOP_SEED], 0, UINT64_MAX, &sc->seed)) < 0)
        return rc;
    if ((rc = sc_map(c, "cluster", t.key[TOP_CLUSTER], t.val[TOP_CLUSTER], sc_cluster_fields, 6,
                     sc_cluster_field, sc)) < 0 ||
        (rc = sc_list(c, "tensors", t.key[TOP_TENSORS], t.val[TOP_TENSORS], sc_tensor)) < 0 ||
        (rc = sc_list(c, "workload", t.key[TOP_WORKLOAD], t.val[TOP_WORKLOAD], sc_phase)) < 0)
        return rc;
    /* `workload: []` ran the cluster, checked no value and passed. */
    if (sc->n_phases == 0)
        return sc_fail(c, t.key[TOP_WORKLOAD],
                       "workload: expected at least one phase (an empty workload checks nothing)");
    /* Every run ends with a barrier: the servers may stop only once every
     * worker is done, and every row the last epoch wrote is verified after
     * it. A "false" there was overridden without a word. */
    const struct rkv_sc_phase *last = &sc->phases[sc->n_phases - 1];
    if (!last->barrier_after)
        return sc_fail_mark(c, last->barrier_mark,
                            "workload[] \"%s\": barrier_after: false on the last phase, but "
                            "every run ends with a barrier (the workers meet, then every row "
                            "is verified and the servers stop); leave the key out or set it true",
                            last->name);
    /* `faults:` with nothing (or null) is no faults; any other scalar
     * (`faults: crash`) ran without faults and passed. */
    const char *nf = t.key[TOP_FAULTS] && (!t.val[TOP_FAULTS] ||
                                           fy_node_get_type(t.val[TOP_FAULTS]) == FYNT_SCALAR)
                         ? sc_str(t.val[TOP_FAULTS])
                         : NULL;
    int no_faults = nf && (!*nf || !strcmp(nf, "~") || !strcmp(nf, "null"));
    if (t.key[TOP_FAULTS] && !no_faults &&
        (rc = sc_list(c, "faults", t.key[TOP_FAULTS], t.val[TOP_FAULTS], sc_fault)) < 0)
        return rc;
    if (t.key[TOP_EXPECT] && (rc = sc_map(c, "expect", t.key[TOP_EXPECT], t.val[TOP_EXPECT],
                                          sc_expect_fields, 3, sc_expect_field, sc)) < 0)
        return rc;
    if (t.key[TOP_TCP] && (rc = sc_map(c, "tcp", t.key[TOP_TCP], t.val[TOP_TCP], sc_tcp_fields, 1,
                                       sc_tcp_field, sc)) < 0)
        return rc;
    if (t.key[TOP_SIM] && (rc = sc_map(c, "sim", t.key[TOP_SIM], t.val[TOP_SIM], sc_sim_fields, 16,
                                       sc_sim_field, sc)) < 0)
        return rc;
    /* A platform file brings its own hosts (their cores) and links: these
     * keys only shape the platforms the twin writes, and were dropped
     * without a word beside one (platform: fattree3 ran the file's). */
    static const int built_only[] = {0, 1, 2, 6}; /* platform, bandwidth, latency, cores */
    for (size_t i = 0; sc->sim_platform_file[0] && i < 4; i++)
        if (c->sim_key[built_only[i]])
            return sc_fail(c, c->sim_key[built_only[i]],
                           "%s: not used with platform_file (the file gives the hosts, their "
                           "cores and the links); give one or the other",
                           sc_sim_fields[built_only[i]]);
    /* wake_us is the time an idle core of the per-core run queues takes;
     * the shared cores (scheduler: share, the default) have no such core,
     * and the value was dropped (the trace hash equalled the run without). */
    if (sc->sim_wake_us > 0 && !sc->sim_sched_cores)
        return sc_fail(c, c->sim_key[15], "wake_us: only with scheduler: cores");
    /* The twin runs crash faults on the shared cores (a killed actor may
     * hold a core of a run queue), and ran such a file on them without a
     * word. */
    for (uint32_t i = 0; sc->sim_sched_cores && i < sc->n_faults; i++)
        if (!strcmp(sc->faults[i].kind, "crash"))
            return sc_fail(c, c->sim_key[14],
                           "scheduler: cores does not run with crash faults (faults[%u]: a "
                           "killed node may hold a core of a run queue); the twin runs them on "
                           "scheduler: share",
                           i);
    /* Only the cluster platform has a backbone; elsewhere the value was
     * dropped without a word (and a platform file brings its own links). */
    if (c->backbone_key && (strcmp(sc->sim_platform, "cluster") || sc->sim_platform_file[0]))
        return sc_fail(c, c->backbone_key, "backbone_gbps: only for platform cluster, not %s",
                       sc->sim_platform_file[0] ? "platform_file"
                       : sc->sim_platform[0]    ? sc->sim_platform
                                                : "star (the default)");
    if (t.key[TOP_VERBS] && (rc = sc_map(c, "verbs", t.key[TOP_VERBS], t.val[TOP_VERBS],
                                         sc_verbs_fields, 3, sc_verbs_field, sc)) < 0)
        return rc;
    if (!sc->machines || !sc->servers_per_machine || !sc->workers_per_machine)
        return sc_fail(c, t.key[TOP_CLUSTER],
                       "cluster: machines, servers_per_machine and "
                       "workers_per_machine are required");
    /* Checked here, not when the cluster is built: a twin run got as far
     * as its last phase before the store refused the server count. */
    if ((uint64_t)sc->machines * sc->servers_per_machine > RKV_MAX_SERVERS)
        return sc_fail(c, t.key[TOP_CLUSTER],
                       "cluster: machines x servers_per_machine = %llu servers, but the wire "
                       "format names at most %u (RKV_MAX_SERVERS)",
                       (unsigned long long)sc->machines * sc->servers_per_machine, RKV_MAX_SERVERS);
    /* As for the servers: the store refused the count only once every
     * node had been deployed (the client's config check). */
    uint64_t workers =
        sc->workers_total ? sc->workers_total : (uint64_t)sc->machines * sc->workers_per_machine;
    if (workers > RKV_MAX_WORKERS)
        return sc_fail_mark(c, sc->workers_total ? sc->workers_mark : sc_mark(t.key[TOP_CLUSTER]),
                            "cluster: %llu workers, but the wire format names at most %u clients "
                            "(RKV_MAX_WORKERS)",
                            (unsigned long long)workers, RKV_MAX_WORKERS);
    if (sc->workers_total > sc->machines * sc->workers_per_machine) {
        struct rkv_sc_mark m = sc->workers_mark;
        return sc_fail_mark(c, m,
                            "cluster.workers: expected at most machines x workers_per_machine "
                            "= %u (workers fill each machine's slots in order), got %u",
                            sc->machines * sc->workers_per_machine, sc->workers_total);
    }
    return 0;
}

/* local_order permuted: each machine's rows take its local indices in a
 * seeded random order (Fisher-Yates over the rows in id order). */
static int sc_local_permuted(struct rkv_sc_tensor *t, uint32_t machines, uint64_t seed)
{
    uint64_t rows = t->desc.rows;
    uint64_t *count = calloc(machines, sizeof(*count));
    uint64_t *slot = malloc(rows * sizeof(*slot)); /* a machine's rows, by machine */
    uint64_t *first = calloc((size_t)machines + 1, sizeof(*first));
    int rc = count && slot && first ? 0 : -RKV_ENOMEM;
    for (uint64_t r = 0; rc == 0 && r < rows; r++)
        count[t->book[r]]++;
    for (uint32_t m = 0; rc == 0 && m < machines; m++)
        first[m + 1] = first[m] + count[m];
    for (uint64_t r = 0; rc == 0 && r < rows; r++) { /* fills by machine; count is the cursor */
        uint32_t m = t->book[r];
        slot[first[m + 1] - count[m]--] = r;
    }
    struct rkv_rng rng;
    rkv_rng_seed(&rng, seed, 0x6c6f63616cull); /* "local" */
    for (uint32_t m = 0; rc == 0 && m < machines; m++) {
        uint64_t n = first[m + 1] - first[m], *rows_m = slot + first[m];
        for (uint64_t i = n; i > 1; i--) {
            uint64_t j = rkv_rng_below(&rng, i), tmp = rows_m[i - 1];
            rows_m[i - 1] = rows_m[j];
            rows_m[j] = tmp;
        }
        for (uint64_t i = 0; i < n; i++)
            t->local[rows_m[i]] = i;
    }
    free(count);
    free(slot);
    free(first);
    return rc;
}

/* local_order file: rows whitespace-separated indices. */
static int sc_local_file(struct sc_ctx *c, struct rkv_sc_tensor *t)
{
    /* A directory read as "0 entries", and a FIFO blocked the open. */
    struct stat st;
    if (stat(t->local_file, &st) == 0 && !S_ISREG(st.st_mode))
        return sc_fail_mark(c, t->mark, "tensor \"%s\": local_file %s: %s, not a file of indices",
                            t->desc.name, t->local_file,
                            S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
    FILE *f = fopen(t->local_file, "r");
    if (!f)
        return sc_fail_mark(c, t->mark, "tensor \"%s\": local_file %s: %s", t->desc.name,
                            t->local_file, strerror(errno));
    uint64_t r = 0;
    int rc = 0;
    char word[32];
    while (rc == 0 && fscanf(f, "%31s", word) == 1) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(word, &end, 10);
        /* Decimal digits only: strtoull took "+3" and " 3" as 3, where
         * the scenario's integers refuse a sign. */
        if (end == word || *end || errno || word[0] < '0' || word[0] > '9')
            rc = sc_fail_mark(c, t->mark,
                              "tensor \"%s\": local_file %s: entry %llu: expected a "
                              "non-negative decimal integer, got \"%s\"",
                              t->desc.name, t->local_file, (unsigned long long)r, word);
        else if (r == t->desc.rows)
            rc = sc_fail_mark(c, t->mark,
                              "tensor \"%s\": local_file %s: more than rows (%llu) entries",
                              t->desc.name, t->local_file, (unsigned long long)t->desc.rows);
        else
            t->local[r++] = v;
    }
    fclose(f);
    if (rc == 0 && r != t->desc.rows)
        rc = sc_fail_mark(c, t->mark, "tensor \"%s\": local_file %s: %llu entries, rows is %llu",
                          t->desc.name, t->local_file, (unsigned long long)r,
                          (unsigned long long)t->desc.rows);
    return rc;
}

/* The local index of a tensor with a local_order, checked as the store
 * checks it (a permutation of each machine's rows). */
static int sc_local(struct sc_ctx *c, struct rkv_sc_tensor *t, uint32_t machines, uint64_t seed)
{
    t->local = calloc(t->desc.rows, sizeof(*t->local));
    if (!t->local)
        return sc_fail_mark(c, t->mark, "tensor \"%s\": local index: out of memory", t->desc.name);
    int rc = t->local_order == RKV_SC_LOCAL_FILE
                 ? sc_local_file(c, t)
                 : sc_local_permuted(t, machines, t->local_seed ? t->local_seed : seed);
    if (rc == -RKV_ENOMEM)
        return sc_fail_mark(c, t->mark, "tensor \"%s\": local index: out of memory", t->desc.name);
    if (rc < 0)
        return rc;
    struct rkv_pbook pb;
    char why[256];
    if (rkv_pbook_init_local(&pb, RKV_PART_EXPLICIT, t->desc.rows, machines, t->book, t->local, why,
                             sizeof(why)) < 0)
        return sc_fail_mark(c, t->mark, "tensor \"%s\": %s", t->desc.name, why);
    rkv_pbook_free(&pb);
    t->desc.local_index = t->local;
    return 0;
}

/* Explicit books are checked against the machine count once both are known. */
static int sc_check_books(struct sc_ctx *c)
{
    struct rkv_scenario *sc = c->sc;
    for (uint32_t i = 0; i < sc->n_tensors; i++) {
        struct rkv_sc_tensor *t = &sc->tensors[i];
        int rc = c->book[i] ? sc_book(c, i, sc->machines) : 0;
        if (rc < 0)
            return rc;
        for (uint64_t r = 0; t->book && r < t->desc.rows; r++)
            if (t->book[r] >= sc->machines) {
                int n = rkv_scenario_where(sc, t->mark, c->err, c->err_len);
                snprintf(c->err + n, c->err_len - (size_t)n,
                         "tensor \"%s\": book names machine %u, but the cluster has %u",
                         t->desc.name, t->book[r], sc->machines);
                return -RKV_ECONFIG;
            }
        rc = t->local_order != RKV_SC_LOCAL_BOOK ? sc_local(c, t, sc->machines, sc->seed) : 0;
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Phase i draws keys: local-only from the rows a worker's machine owns,
 * remote-only from the others. A machine with none of those had its
 * workers draw uniform rows instead (local ones for remote-only), saying
 * nothing. The partition is known at load (policy, rows, machines, book),
 * so that is refused here, naming the first such machine and a worker on
 * it. first_worker[m]: the lowest worker on machine m, or UINT32_MAX. */
static int sc_check_phase_keys(struct sc_ctx *c, uint32_t i, const uint32_t *first_worker)
{
    const struct rkv_scenario *sc = c->sc;
    const struct rkv_sc_phase *p = &sc->phases[i];
    int local = p->keys == RKV_KEYS_LOCAL_ONLY;
    struct rkv_sc_mark at = p->keys_mark.line ? p->keys_mark : p->mark;
    if (!local && sc->machines < 2)
        return sc_fail_mark(c, at,
                            "phase \"%s\": keys: remote-only needs 2 machines or more (one "
                            "machine has no remote rows)",
                            p->name);
    const struct rkv_sc_tensor *t = &sc->tensors[p->tensor];
    static const char *const parts[] = {
        [RKV_PART_RANGE] = "range", [RKV_PART_HASH] = "hash", [RKV_PART_EXPLICIT] = "explicit"};
    struct rkv_pbook pb;
    char why[256];
    if (rkv_pbook_init(&pb, t->desc.policy, t->desc.rows, sc->machines, t->book, why, sizeof(why)) <
        0)
        return sc_fail_mark(c, t->mark, "tensor \"%s\": %s", t->desc.name, why);
    int rc = 0;
    for (uint32_t m = 0; rc == 0 && m < sc->machines; m++) {
        uint64_t own = rkv_pbook_local_rows(&pb, m);
        if (first_worker[m] == UINT32_MAX || (local ? own > 0 : own < t->desc.rows))
            continue;
        rc = sc_fail_mark(c, at,
                          "phase \"%s\": keys: %s, but machine %u (worker w%u) owns %s tensor "
                          "\"%s\" (partition: %s, rows: %llu, machines: %u)%s",
                          p->name, local ? "local-only" : "remote-only", m, first_worker[m],
                          local ? "no rows of" : "every row of", t->desc.name,
                          parts[t->desc.policy], (unsigned long long)t->desc.rows, sc->machines,
                          local ? "" : ", so it has no remote rows");
    }
    rkv_pbook_free(&pb);
    return rc;
}

static int sc_check_keys(struct sc_ctx *c)
{
    const struct rkv_scenario *sc = c->sc;
    uint32_t i = 0;
    while (i < sc->n_phases && sc->phases[i].keys != RKV_KEYS_LOCAL_ONLY &&
           sc->phases[i].keys != RKV_KEYS_REMOTE_ONLY)
        i++;
    if (i == sc->n_phases)
        return 0;
    uint32_t *first_worker = malloc(sc->machines * sizeof(*first_worker));
    if (!first_worker)
        return sc_fail_mark(c, sc->phases[i].mark, "phase \"%s\": keys: out of memory",
                            sc->phases[i].name);
    memset(first_worker, 0xff, sc->machines * sizeof(*first_worker));
    for (uint32_t w = rkv_scenario_workers(sc); w-- > 0;)
        first_worker[rkv_scenario_worker_machine(sc, w)] = w;
    int rc = 0;
    for (; rc == 0 && i < sc->n_phases; i++)
        if (sc->phases[i].keys == RKV_KEYS_LOCAL_ONLY || sc->phases[i].keys == RKV_KEYS_REMOTE_ONLY)
            rc = sc_check_phase_keys(c, i, first_worker);
    free(first_worker);
    return rc;
}

/* The oracle's state for tensor i, as or_tensor_init allocates it: the
 * expected values (one element per row when payloadless: the twin's rows
 * are thin), a candidate per assigning worker, and the per-row fields. */
static double sc_oracle_bytes(const struct rkv_scenario *sc, uint32_t i, int thin)
{
    const struct rkv_sc_tensor *t = &sc->tensors[i];
    double elems = thin ? 1 : t->desc.row_len, cands = 1;
    double zipf = 0; /* a phase drawing zipf keys: the cumulative weights, a double per row */
    for (uint32_t p = 0; p < sc->n_phases; p++) {
        if (sc->phases[p].tensor == i && sc->phases[p].push_op == RKV_OP_ASSIGN)
            cands = rkv_scenario_workers(sc);
        if (sc->phases[p].tensor == i && sc->phases[p].keys == RKV_KEYS_ZIPF)
            zipf = 8;
    }
    return (double)t->desc.rows * (8 * elems + 12 * cands + 36 + zipf);
}

/* A tensor the oracle cannot hold failed far from its line: the twin said
 * "out of memory" and nothing more, and one just small enough to be
 * allocated was touched row by row until the kernel killed the run. */
/* thin: rows of one element (the twin's payloadless runs); a real backend
 * carries and checks the declared rows, payloadless or not. */
static int sc_check_size(struct sc_ctx *c, int thin)
{
    const struct rkv_scenario *sc = c->sc;
    /* A request too large to allocate stopped every worker with "cannot
     * allocate the buffers of the largest request" and no line. */
    for (uint32_t i = 0; i < sc->n_phases; i++) {
        const struct rkv_sc_phase *p = &sc->phases[i];
        const struct rkv_sc_tensor *t = &sc->tensors[p->tensor];
        double row = (double)rkv_dtype_size(t->desc.dtype) * (thin ? 1 : t->desc.row_len) *
                     (p->pull_handler == RKV_PULL_WITH_STATE ? 2 : 1);
        if (p->ids_per_request * row > (double)RKV_SC_MAX_REQUEST_BYTES)
            return sc_fail_mark(c, p->ids_mark.line ? p->ids_mark : p->mark,
                                "workload[] \"%s\": ids_per_request: %u rows of %.0f B (tensor "
                                "\"%s\") are %.3g GiB a request, past the %llu GiB a message "
                                "may carry (the store's default max_slot_bytes)",
                                p->name, p->ids_per_request, row, t->desc.name,
                                p->ids_per_request * row / (1 << 30),
                                RKV_SC_MAX_REQUEST_BYTES >> 30);
    }
    const double max = (double)RKV_SC_MAX_ORACLE_BYTES;
    double total = 0;
    for (uint32_t i = 0; i < sc->n_tensors; i++) {
        double b = sc_oracle_bytes(sc, i, thin);
        total += b;
        if (total <= max)
            continue;
        const struct rkv_sc_tensor *t = &sc->tensors[i];
        /* Thin rows help only when the row count alone fits. */
        int thin_fits = !thin && total - b + sc_oracle_bytes(sc, i, 1) <= max;
        return sc_fail_mark(c, t->mark,
                            "tensor \"%s\": %llu rows of %u elements need %.3g GiB of oracle "
                            "state%s, past the %llu GiB a scenario may use (the oracle keeps "
                            "every row's expected value: 8 B per element, ~48 B per row); "
                            "fewer rows%s",
                            t->desc.name, (unsigned long long)t->desc.rows,
                            thin ? 1 : t->desc.row_len, b / (1 << 30),
                            b <= max ? " (with the tensors before it)" : "",
                            RKV_SC_MAX_ORACLE_BYTES >> 30,
                            thin_fits && sc->sim_payloadless
                                ? " or elements (sim.payloadless thins rows in the twin only)"
                            : thin_fits ? " or elements, or sim.payloadless: true in the twin"
                            : thin      ? " (sim.payloadless: one element per row)"
                                        : "");
    }
    return 0;
}

int rkv_scenario_check_size(const struct rkv_scenario *sc, int thin, char *err, size_t err_len)
{
    struct sc_ctx c = {
        .path = sc->path, .err = err, .err_len = err_len, .sc = (struct rkv_scenario *)sc};
    return sc_check_size(&c, thin);
}

static int sc_syntax_error(struct sc_ctx *c, struct fy_diag *diag)
{
    void *it = NULL;
    struct fy_diag_error *e = diag ? fy_diag_errors_iterate(diag, &it) : NULL;
    /* libfyaml builds no document from a stream without one, and says nothing. */
    if (!e)
        return snprintf(c->err, c->err_len, diag ? "%s:1:1: %s" : "%s: %s", c->path,
                        diag ? "empty scenario (expected cluster, tensors, workload)"
                             : "cannot read or parse the file"),
               -RKV_ECONFIG;
    /* libfyaml's diagnostic positions count from 1 already: a duplicate key
     * on line 2, column 1 was said at 3:2. */
    snprintf(c->err, c->err_len, "%s:%d:%d: YAML syntax: %s", c->path, e->line > 0 ? e->line : 1,
             e->column > 0 ? e->column : 1, e->msg);
    return -RKV_ECONFIG;
}

#define SC_MAX_FILE_BYTES (16u << 20)

/* The most YAML nodes (scalars, aliases, lists and mappings) a scenario
 * may hold. libfyaml's document takes about 550 bytes a node: a 2 MB
 * file of one 1,000,000-entry book took 570 MB to load, and
 * every process of a tcp run loads the file (an outside tester). The
 * largest list a scenario has use for is an explicit book, a pattern that
 * repeats over the rows. libfyaml scans a flow list ([0, 1, ...]) whole
 * before it gives the first of its items (a 2 MB line took 412 MB with the
 * bound below in force), so the file's commas are counted as it is read,
 * before any parse: past the bound, a flow list would be too. */
#define SC_MAX_NODES (1u << 16)

/* Length of the well-formed UTF-8 sequence at p (1..4, RFC 3629: no
 * overlongs, no surrogates, nothing above U+10FFFF), or 0. */
static size_t sc_utf8_len(const unsigned char *p, size_t left)
{
    unsigned c = p[0];
    size_t n = c < 0x80                 ? 1
               : c >= 0xc2 && c <= 0xdf ? 2
               : c >= 0xe0 && c <= 0xef ? 3
               : c >= 0xf0 && c <= 0xf4 ? 4
                                        : 0;
    if (n == 0 || n > left)
        return 0;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    if ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] > 0x9f) || (c == 0xf0 && p[1] < 0x90) ||
        (c == 0xf4 && p[1] > 0x8f))
        return 0;
    return n;
}

/* A scenario is text: libfyaml 0.8 loops forever on some directives with
 * NUL or invalid bytes in them (found by fuzz_scenario), so those never
 * reach it. Read in small chunks: a large one-off allocation would raise
 * glibc's mmap threshold for the rest of the process. */
/* One document per file: the loader reads the first, and a second one
 * (after a "---" line past some content) was silently ignored. */
static int sc_check_one_document(const char *path, char *err, size_t err_len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0; /* sc_check_text said why */
    char buf[256];
    unsigned line = 0, ended = 0; /* ended: the line of a "..." after content */
    int at_start = 1, content = 0, rc = 0;
    while (rc == 0 && fgets(buf, sizeof(buf), f)) {
        size_t len = strlen(buf);
        if (at_start) {
            line++;
            const char *p = buf + strspn(buf, " \t");
            int marker = (!strncmp(buf, "---", 3) || !strncmp(buf, "...", 3)) &&
                         (!buf[3] || strchr(" \t\r\n#", buf[3]));
            if (*p == '?' && strchr(" \t\r\n", p[1] ? p[1] : ' ')) {
                /* libfyaml 0.8 dereferences NULL cleaning up after some
                 * block-context explicit keys ("? oo:<TAB> :", found by
                 * fuzz_scenario): refused before it sees them. A scenario's
                 * keys are plain words. */
                snprintf(err, err_len,
                         "%s:%u:%d: an explicit YAML key (\"? \"): a scenario's keys are plain "
                         "words (key: value)",
                         path, line, (int)(p - buf) + 1);
                rc = -RKV_ECONFIG;
            } else if (marker && buf[0] == '-' && content) {
                snprintf(err, err_len,
                         "%s:%u:1: a second YAML document: a scenario is one document", path, line);
                rc = -RKV_ECONFIG;
            } else if (marker && buf[0] == '.') {
                ended = content ? line : ended;
            } else if (buf[0] == '%' && !content) {
                /* a directive (%YAML 1.2) before the "---": not content,
                 * or that "---" read as a second document */
            } else if (*p && *p != '#' && *p != '\n' && *p != '\r' && !marker) {
                /* After "...", content is a second document without a
                 * "---", and was dropped as silently (faults and all). */
                if (ended) {
                    snprintf(err, err_len,
                             "%s:%u:1: a second YAML document (the first ends with \"...\" on "
                             "line %u): a scenario is one document",
                             path, line, ended);
                    rc = -RKV_ECONFIG;
                }
                content = 1;
            }
        }
        at_start = len > 0 && buf[len - 1] == '\n';
    }
    fclose(f);
    return rc;
}

static int sc_check_text(const char *path, char *err, size_t err_len)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(err, err_len, "%s: is a directory, not a scenario file", path);
        return -RKV_ECONFIG;
    }
    /* The file is read three times (this check, the document check,
     * libfyaml): a pipe (`rkv run <(...)`) was empty by the second and read
     * as "empty scenario", and a FIFO without a writer blocked the open. */
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        snprintf(err, err_len,
                 "%s: not a regular file (%s): a scenario is read more than once; write it to "
                 "a file first",
                 path, S_ISFIFO(st.st_mode) ? "a pipe" : "a device or socket");
        return -RKV_ECONFIG;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, err_len, "%s: cannot open: %s", path, strerror(errno));
        return -RKV_ECONFIG;
    }
    unsigned char buf[4096 + 4];
    size_t have = 0, total = 0;
    unsigned line = 1, col = 1;
    uint32_t commas = 0;
    int rc = 0, eof = 0;
    while (rc == 0) {
        if (!eof) {
            size_t got = fread(buf + have, 1, 4096, f);
            eof = got < 4096;
            have += got;
            total += got;
        }
        if (total > SC_MAX_FILE_BYTES) {
            snprintf(err, err_len, "%s: expected a scenario of at most %u bytes", path,
                     SC_MAX_FILE_BYTES);
            rc = -RKV_ECONFIG;
            break;
        }
        size_t i = 0;
        /* Keep up to 3 trailing bytes of a sequence the next read completes. */
        while (i < have && (eof || have - i >= 4)) {
            unsigned char c = buf[i];
            size_t k = sc_utf8_len(buf + i, have - i);
            if (k == 0 || (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f) {
                snprintf(err, err_len, "%s:%u:%u: expected UTF-8 text, got byte 0x%02x", path, line,
                         col, c);
                rc = -RKV_ECONFIG;
                break;
            }
            /* A carriage return alone ends a line in YAML, but libfyaml 0.7
             * crashed (a write through NULL) on one before an explicit key
             * ("\r? o:\t:", fuzz_scenario): LF or CRLF only. */
            if (c == '\r' && (i + 1 == have || buf[i + 1] != '\n')) {
                snprintf(err, err_len,
                         "%s:%u:%u: a carriage return without a line feed after it (old Mac "
                         "line ends): save the file with LF or CRLF line ends",
                         path, line, col);
                rc = -RKV_ECONFIG;
                break;
            }
            if (c == ',' && ++commas > SC_MAX_NODES) {
                snprintf(err, err_len,
                         "%s:%u:%u: more than %u ',' by here: a scenario holds at most %u YAML "
                         "nodes, and a flow list this long would take the parser hundreds of MB; "
                         "a book is a pattern that repeats over the rows: give a shorter one",
                         path, line, col, SC_MAX_NODES, SC_MAX_NODES);
                rc = -RKV_ECONFIG;
                break;
            }
            line += c == '\n';
            col = c == '\n' ? 1 : col + 1;
            i += k;
        }
        memmove(buf, buf + i, have - i);
        have -= i;
        if (eof && have == 0)
            break;
    }
    fclose(f);
    return rc;
}

/* How much CPU time the parser may take over a file of SC_MAX_FILE_BYTES
 * at most. CPU time, not wall time: a wall-clock bound of 20 s failed
 * many-peers.yaml when 130 processes loaded it at once in the soft-RoCE
 * VM under TCG, each parse waiting its turn. Only a parser that loops
 * spends CPU without end; its reads are of a regular file (checked
 * above), so it cannot wait without end. */
#define SC_PARSE_PROBE_CPU_S 20u

/* What the probe's child tells its parent through a shared page. */
struct sc_probe_page {
    struct fy_mark at; /* the end of the last event parsed */
    int done;          /* set once the parse returned, whatever it found */
    int too_big;       /* more than SC_MAX_NODES: at is where the bound was passed */
};

/* libfyaml 0.7 (Debian 12's) crashes on some malformed files: "- ? o:\t:"
 * writes through NULL (fuzz_scenario), and its tracker lists more
 * (issues 118, 122, 188). A scenario file is a user's input, and bad
 * input must get an error, not a crash: the file is parsed first in a
 * child process, which only crashes itself, and which notes where the
 * parser had got to in a page it shares with us, for the message. 0 when
 * the child parsed it or found it malformed (the parse here then says
 * where), or when no child could be started (the parse then runs here as
 * before). */
static int sc_parse_probe(const char *path, const struct fy_parse_cfg *pcfg, char *err,
                          size_t err_len)
{
    struct sc_probe_page *pg =
        mmap(NULL, sizeof(*pg), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (pg == MAP_FAILED)
        return 0;
    *pg = (struct sc_probe_page){0};
    fflush(NULL); /* nothing buffered is written twice */
    pid_t pid = fork();
    if (pid < 0) {
        munmap(pg, sizeof(*pg));
        return 0;
    }
    if (pid == 0) {
        /* A crash ends the child, whatever handlers it inherited (a
         * sanitizer's or a fuzzer's would report it as the parent's). */
        static const int fatal[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGXCPU};
        for (size_t i = 0; i < sizeof(fatal) / sizeof(fatal[0]); i++)
            signal(fatal[i], SIG_DFL);
        /* SIGXCPU at the bound, SIGKILL a second later; no core file of
         * the child in the user's directory. */
        struct rlimit cpu = {SC_PARSE_PROBE_CPU_S, SC_PARSE_PROBE_CPU_S + 1}, core = {0, 0};
        setrlimit(RLIMIT_CPU, &cpu);
        setrlimit(RLIMIT_CORE, &core);
        /* Tests: a host too busy to run the child for a while. */
        const char *stall = getenv("RKV_TEST_PARSE_PROBE_STALL_MS");
        if (stall) {
            long ms = strtol(stall, NULL, 10);
            struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
            while (ms > 0 && nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
        }
        /* Events first, each one's end noted; then the document, as the
         * parse here builds it. */
        struct fy_parser *fyp = fy_parser_create(pcfg);
        uint32_t nodes = 0;
        if (fyp && fy_parser_set_input_file(fyp, path) == 0) {
            struct fy_event *ev;
            while (!pg->too_big && (ev = fy_parser_parse(fyp)) != NULL) {
                const struct fy_mark *m = fy_event_end_mark(ev);
                if (m)
                    pg->at = *m;
                /* Nodes: a list's or mapping's end, or the document's
                 * marks, are none (a file of 65,524 nodes was refused). */
                nodes += ev->type == FYET_SCALAR || ev->type == FYET_ALIAS ||
                         ev->type == FYET_MAPPING_START || ev->type == FYET_SEQUENCE_START;
                fy_parser_event_free(fyp, ev);
                pg->too_big = nodes > SC_MAX_NODES;
            }
        }
        fy_parser_destroy(fyp);
        if (!pg->too_big) /* built only when the parent may build it too */
            fy_document_destroy(fy_document_build_from_file(pcfg, path));
        pg->done = 1;
        rkv_child_exit(0);
    }
    int status = 0, rc = 0;
    pid_t got;
    while ((got = waitpid(pid, &status, 0)) < 0 && errno == EINTR)
        ;
    if (got > 0 && pg->done && pg->too_big) {
        snprintf(err, err_len,
                 "%s:%d:%d: more than %u YAML nodes (scalars, lists and mappings) by here: a "
                 "scenario is a description, not data (loading this many would take every "
                 "process of the run hundreds of MB); a book is a pattern that repeats over "
                 "the rows: give a shorter one",
                 path, pg->at.line + 1, pg->at.column + 1, SC_MAX_NODES);
        rc = -RKV_ECONFIG;
    } else if (got > 0 && !pg->done && WIFSIGNALED(status) &&
               (WTERMSIG(status) == SIGXCPU || WTERMSIG(status) == SIGKILL)) {
        snprintf(err, err_len,
                 "%s:%d:%d: the YAML parser (libfyaml) did not finish within %u s of CPU time "
                 "after here: the file is malformed in a way it cannot handle; check its syntax",
                 path, pg->at.line + 1, pg->at.column + 1, SC_PARSE_PROBE_CPU_S);
        rc = -RKV_ECONFIG;
    }
    /* Not done: it crashed (by a signal, or a sanitizer's exit). A child
     * reaped by someone else (got < 0) is not known to have failed. */
    if (rc == 0 && got > 0 && !pg->done) {
        char how[64];
        if (WIFSIGNALED(status))
            snprintf(how, sizeof(how), "signal %d, %s", WTERMSIG(status),
                     strsignal(WTERMSIG(status)));
        else
            snprintf(how, sizeof(how), "exit %d", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        snprintf(err, err_len,
                 "%s:%d:%d: the YAML parser (libfyaml) crashed on this file after here (%s): it "
                 "is malformed in a way the parser cannot handle; check its syntax (explicit "
                 "keys '?', tabs, line ends)",
                 path, pg->at.line + 1, pg->at.column + 1, how);
        rc = -RKV_ECONFIG;
    }
    munmap(pg, sizeof(*pg));
    return rc;
}

/* A node name of the cluster: "s<machine>.<local>" or "w<worker>". */
static int sc_node_ok(const struct rkv_scenario *sc, const char *name)
{
    unsigned m, l, w;
    char tail, canon[48];
    /* Only the names the nodes have: %u also took "w01", "w+1", "w 1" and
     * "w4294967297" (as w1), which then matched no node, and the fault
     * failed the run as "none fired" without naming the target. */
    if (sscanf(name, "s%u.%u%c", &m, &l, &tail) == 2) {
        snprintf(canon, sizeof(canon), "s%u.%u", m, l);
        return !strcmp(canon, name) && m < sc->machines && l < sc->servers_per_machine;
    }
    if (sscanf(name, "w%u%c", &w, &tail) == 1) {
        snprintf(canon, sizeof(canon), "w%u", w);
        return !strcmp(canon, name) && w < rkv_scenario_workers(sc);
    }
    return 0;
}

/* What each kind needs beyond a target; "" when the fault is complete.
 * *field_p: the field to point at (-1: the fault itself, one is missing). */
static const char *sc_fault_incomplete(const struct rkv_sc_fault *f, int *field_p)
{
    int crash = !strcmp(f->kind, "crash");
    *field_p = -1;
    if (f->after_phase[0] && !crash)
        return *field_p = RKV_SC_F_AFTER_PHASE,
               "after_phase: only crash faults take it; give at_s (and duration_s)";
    if ((!strcmp(f->kind, "drop") || !strcmp(f->kind, "delay")) && f->fraction <= 0)
        return *field_p = RKV_SC_F_FRACTION, "fraction: expected a share of messages above 0";
    if (!strcmp(f->kind, "delay") && f->delay_ms <= 0)
        return *field_p = RKV_SC_F_DELAY_MS,
               "delay_ms: expected how long a delayed message waits (> 0)";
    if (!strcmp(f->kind, "link_down") && f->duration_s <= 0)
        return *field_p = RKV_SC_F_DURATION_S,
               "duration_s: expected how long the link is down (> 0)";
    /* The crash waited for both, whichever came later: one of the two
     * was ignored, and the file did not say which the user meant. */
    if (f->after_phase[0] && f->field_mark[RKV_SC_F_AT_S].line)
        return *field_p = RKV_SC_F_AT_S,
               "at_s: give at_s or after_phase, not both (a crash fires at a time or once a "
               "phase is done)";
    if (!strcmp(f->kind, "slow_cpu") && f->target[0] != 's')
        return *field_p = RKV_SC_F_TARGET,
               "target: expected a server (s<machine>.<server>): it slows a server's handlers, "
               "the CPU work the twin models";
    if (!strcmp(f->kind, "slow_cpu") && f->factor <= 1)
        return *field_p = RKV_SC_F_FACTOR,
               "factor: expected how many times slower the CPU is (> 1)";
    if ((f->restart_after_s > 0 || f->machine_lost) && (!crash || f->target[0] != 's'))
        return *field_p = f->restart_after_s > 0 ? RKV_SC_F_RESTART_AFTER_S : RKV_SC_F_MACHINE_LOST,
               "restart_after_s, machine_lost: only a crashed server restarts or loses its "
               "machine's memory";
    return "";
}

/* The place of fault f's field (its value), or of the fault when that
 * field was not given. */
static struct rkv_sc_mark sc_fault_mark(const struct rkv_sc_fault *f, int field)
{
    return field >= 0 && f->field_mark[field].line ? f->field_mark[field] : f->mark;
}

static int sc_fault_fail(const struct rkv_scenario *sc, uint32_t i, int field, char *err,
                         size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static int sc_fault_fail(const struct rkv_scenario *sc, uint32_t i, int field, char *err,
                         size_t err_len, const char *fmt, ...)
{
    int n = rkv_scenario_where(sc, sc_fault_mark(&sc->faults[i], field), err, err_len);
    n += snprintf(err + n, err_len - (size_t)n, "faults[%u]: ", i);
    if ((size_t)n < err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err + n, err_len - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -RKV_ECONFIG;
}

static int sc_check_fault(const struct rkv_scenario *sc, uint32_t i, char *err, size_t err_len)
{
    struct rkv_sc_fault *f = (struct rkv_sc_fault *)&sc->faults[i];
    /* Without a kind the fault ran as none of them and failed the run as
     * "not every fault fired" ("faults:  s1.0: 0 messages ..."). */
    if (!f->kind[0])
        return sc_fault_fail(sc, i, -1, err, err_len,
                             "kind: required (crash, drop, delay, link_down or slow_cpu)");
    if (!sc_node_ok(sc, f->target))
        return sc_fault_fail(sc, i, RKV_SC_F_TARGET, err, err_len,
                             "target: expected a node of the cluster (s<machine>.<server> or "
                             "w<worker>), got \"%s\"",
                             f->target);
    int field;
    const char *why = sc_fault_incomplete(f, &field);
    if (*why)
        return sc_fault_fail(sc, i, field, err, err_len, "%s %s", f->kind, why);
    /* Refused by the twin only once the run had started, without a line. */
    if (!strcmp(f->kind, "slow_cpu") && sc->sim_row_cost_ns <= 0)
        return sc_fault_fail(sc, i, RKV_SC_F_KIND, err, err_len,
                             "slow_cpu: needs sim.row_cost_ns > 0 (it multiplies the server CPU "
                             "work the twin charges per row, which is 0 without it)");
    /* A field the kind does not read was dropped without a word: a crash
     * with duration_s 0.1 (meant as an outage) killed the node for good,
     * a delay's retransmit_ms or a drop's factor did nothing. */
    static const struct {
        const char *kind;
        unsigned fields; /* bits by RKV_SC_F_*, beyond kind, target and at_s */
    } takes[] = {
        {"crash",
         1u << RKV_SC_F_AFTER_PHASE | 1u << RKV_SC_F_RESTART_AFTER_S | 1u << RKV_SC_F_MACHINE_LOST},
        {"drop",
         1u << RKV_SC_F_FRACTION | 1u << RKV_SC_F_DURATION_S | 1u << RKV_SC_F_RETRANSMIT_MS},
        {"delay", 1u << RKV_SC_F_FRACTION | 1u << RKV_SC_F_DURATION_S | 1u << RKV_SC_F_DELAY_MS},
        {"link_down", 1u << RKV_SC_F_DURATION_S | 1u << RKV_SC_F_RETRANSMIT_MS},
        {"slow_cpu", 1u << RKV_SC_F_DURATION_S | 1u << RKV_SC_F_FACTOR},
    };
    for (size_t k = 0; k < sizeof(takes) / sizeof(takes[0]); k++) {
        if (strcmp(takes[k].kind, f->kind) != 0)
            continue;
        for (int g = RKV_SC_F_AT_S + 1; g < RKV_SC_F_COUNT_; g++) {
            if (!f->field_mark[g].line || (takes[k].fields >> g & 1))
                continue;
            char list[160] = "at_s";
            size_t n = strlen(list);
            for (int h = RKV_SC_F_AT_S + 1; h < RKV_SC_F_COUNT_; h++)
                if (takes[k].fields >> h & 1)
                    n += (size_t)snprintf(list + n, sizeof(list) - n, ", %s", sc_fault_fields[h]);
            return sc_fault_fail(sc, i, g, err, err_len,
                                 "%s: a %s fault does not use it (it takes %s)", sc_fault_fields[g],
                                 f->kind, list);
        }
    }
    unsigned m, l;
    if (f->machine_lost && sscanf(f->target, "s%u.%u", &m, &l) == 2) {
        /* A lost machine takes every process on it. Another server left
         * running would serve a machine segment that is gone (and a
         * restarted one waits forever for the first to restore it); a
         * co-located worker would write into memory nobody reads, and a
         * worker lost with it fails every barrier, so no survivor could
         * show that nothing acknowledged was lost. Hence: alone. */
        uint32_t w = 0, n_workers = rkv_scenario_workers(sc);
        while (w < n_workers && rkv_scenario_worker_machine(sc, w) != m)
            w++;
        if (sc->servers_per_machine > 1 || w < n_workers) {
            char other[32];
            if (sc->servers_per_machine > 1)
                snprintf(other, sizeof(other), "s%u.%u", m, l ? 0 : 1);
            else
                snprintf(other, sizeof(other), "w%u", w);
            return sc_fault_fail(sc, i, RKV_SC_F_MACHINE_LOST, err, err_len,
                                 "machine_lost: machine %u also runs %s; a lost machine takes "
                                 "every process on it, so the server must be alone there "
                                 "(servers_per_machine: 1 and cluster.workers leaving machine "
                                 "%u without workers)",
                                 m, other, m);
        }
    }
    if (f->after_phase[0]) {
        uint32_t p = 0;
        while (p < sc->n_phases && strcmp(sc->phases[p].name, f->after_phase) != 0)
            p++;
        if (p == sc->n_phases)
            return sc_fault_fail(sc, i, RKV_SC_F_AFTER_PHASE, err, err_len,
                                 "after_phase: no phase named \"%s\"", f->after_phase);
        f->after_phase_ix = p;
        /* Client 0 times every after_phase crash, and which worker is
         * client 0 is settled only as the workers join (w0 need not be):
         * a worker crashed before this phase ends may be client 0, and
         * any worker's crash fails the others' next barrier, so this
         * crash waited for a phase end that never came and the run failed
         * "not every fault fired" (outside testers; a rule naming w0 alone
         * refused files where w0 was not client 0 and passed others). */
        for (uint32_t j = 0; j < i; j++) {
            const struct rkv_sc_fault *g = &sc->faults[j];
            if (!strcmp(g->kind, "crash") && g->target[0] == 'w' &&
                (!g->after_phase[0] || g->after_phase_ix < p))
                return sc_fault_fail(
                    sc, i, RKV_SC_F_AFTER_PHASE, err, err_len,
                    "after_phase: faults[%u] crashes worker %s before phase \"%s\" ends; "
                    "after_phase crashes are timed by client 0, which may be that worker "
                    "(ids are handed out as workers join), and a worker's crash fails the "
                    "others' next barrier: this crash could never fire (give it at_s, or "
                    "crash %s after phase \"%s\" or later)",
                    j, g->target, f->after_phase, g->target, f->after_phase);
        }
    }
    /* An after_phase crash has no at_s of its own: the message said
     * "at_s" of a fault that gave none. */
    if (i && f->at_s < sc->faults[i - 1].at_s)
        return sc_fault_fail(sc, i, RKV_SC_F_AT_S, err, err_len,
                             "at_s: expected faults in time order (at_s %g, after faults[%u]'s "
                             "%g%s)",
                             f->at_s, i - 1, sc->faults[i - 1].at_s,
                             f->after_phase[0] ? "; a fault with after_phase counts as at_s 0, so "
                                                 "list it before those with a time"
                                               : "");
    /* Whichever of two such crashes comes first leaves nothing for the
     * other: the run failed on a fault that did not fire, saying no more
     * than FAIL. With a restart between them both can fire. */
    for (uint32_t j = 0; j < i && !strcmp(f->kind, "crash") && f->restart_after_s <= 0; j++) {
        const struct rkv_sc_fault *g = &sc->faults[j];
        if (!strcmp(g->kind, "crash") && !strcmp(g->target, f->target) && g->restart_after_s <= 0)
            return sc_fault_fail(sc, i, RKV_SC_F_TARGET, err, err_len,
                                 "target: %s crashes in faults[%u] already and neither crash "
                                 "restarts it (restart_after_s): a node gone for good cannot "
                                 "crash again",
                                 f->target, j);
    }
    return 0;
}

static int sc_check_faults(const struct rkv_scenario *sc, char *err, size_t err_len)
{
    for (uint32_t i = 0; i < sc->n_faults; i++) {
        int rc = sc_check_fault(sc, i, err, err_len);
        if (rc < 0)
            return rc;
        if (sc->faults[i].restart_after_s > 0 && (!sc->durable || !sc->retry_ms))
            return sc_fault_fail(sc, i, RKV_SC_F_RESTART_AFTER_S, err, err_len,
                                 "restart_after_s: a restart needs cluster.durable: true and "
                                 "cluster.retry_ms > 0 (workers wait for the server to come "
                                 "back)");
        /* A node's NIC takes so many; past them a fault was cut in silence
         * (and its count read out of bounds). */
        if (rkv_scenario_nic_fault_index(sc, i) == RKV_NIC_FAULTS_MAX)
            return sc_fault_fail(sc, i, RKV_SC_F_TARGET, err, err_len,
                                 "target: at most %d drop, delay and link_down faults on one "
                                 "node",
                                 RKV_NIC_FAULTS_MAX);
    }
    return 0;
}

/* A fault's window in ns from the node's start; UINT64_MAX: open-ended. */
static uint64_t sc_window_end(const struct rkv_sc_fault *f)
{
    return f->duration_s > 0 ? (uint64_t)((f->at_s + f->duration_s) * 1e9) : UINT64_MAX;
}

uint32_t rkv_scenario_nic_faults(const struct rkv_scenario *sc, const char *node,
                                 struct rkv_nic_fault *out, uint32_t max)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < sc->n_faults && n < max; i++) {
        const struct rkv_sc_fault *f = &sc->faults[i];
        int kind = !strcmp(f->kind, "drop")        ? RKV_FAULT_DROP
                   : !strcmp(f->kind, "delay")     ? RKV_FAULT_DELAY
                   : !strcmp(f->kind, "link_down") ? RKV_FAULT_LINK_DOWN
                                                   : 0;
        if (!kind || strcmp(f->target, node) != 0)
            continue;
        double ms = kind == RKV_FAULT_DELAY ? f->delay_ms : f->retransmit_ms;
        out[n++] = (struct rkv_nic_fault){.kind = kind,
                                          .fraction = f->fraction,
                                          .start_ns = (uint64_t)(f->at_s * 1e9),
                                          .end_ns = sc_window_end(f),
                                          .delay_ns = (uint64_t)(ms * 1e6)};
    }
    return n;
}

uint64_t rkv_scenario_fault_seed(const struct rkv_scenario *sc, const char *node, uint64_t seed)
{
    unsigned m, l, w;
    int off = -1;
    uint64_t k = 0;
    if (sscanf(node, "s%u.%u%n", &m, &l, &off) == 2 && off > 0 && !node[off])
        k = (uint64_t)m * sc->servers_per_machine + l;
    else if (sscanf(node, "w%u%n", &w, &off) == 1 && off > 0 && !node[off])
        k = (uint64_t)rkv_scenario_servers(sc) + w;
    return seed ^ k;
}

uint32_t rkv_scenario_nic_fault_index(const struct rkv_scenario *sc, uint32_t i)
{
    const struct rkv_sc_fault *f = &sc->faults[i];
    if (strcmp(f->kind, "drop") && strcmp(f->kind, "delay") && strcmp(f->kind, "link_down"))
        return UINT32_MAX;
    uint32_t k = 0;
    for (uint32_t j = 0; j < i; j++) {
        const struct rkv_sc_fault *g = &sc->faults[j];
        k += !strcmp(g->target, f->target) &&
             (!strcmp(g->kind, "drop") || !strcmp(g->kind, "delay") ||
              !strcmp(g->kind, "link_down"));
    }
    return k;
}

double rkv_scenario_cpu_factor(const struct rkv_scenario *sc, const char *node, double t_s)
{
    double factor = 1;
    for (uint32_t i = 0; i < sc->n_faults; i++) {
        const struct rkv_sc_fault *f = &sc->faults[i];
        if (!strcmp(f->kind, "slow_cpu") && !strcmp(f->target, node) && t_s >= f->at_s &&
            (f->duration_s <= 0 || t_s < f->at_s + f->duration_s))
            factor *= f->factor;
    }
    return factor;
}

int rkv_scenario_load(const char *path, struct rkv_scenario **sc_p, char *err, size_t err_len)
{
    /* sc->path is cut at 255 bytes, and paths in the file are relative to
     * its directory: a cut one named another (a parent) directory. */
    if (strlen(path) >= sizeof(((struct rkv_scenario *)0)->path)) {
        snprintf(err, err_len, "...%s: a scenario path of %zu bytes, past the %zu it may have",
                 path + strlen(path) - 60, strlen(path),
                 sizeof(((struct rkv_scenario *)0)->path) - 1);
        return -RKV_ECONFIG;
    }
    int crc = sc_check_text(path, err, err_len);
    if (crc == 0)
        crc = sc_check_one_document(path, err, err_len);
    if (crc < 0)
        return crc;
    struct rkv_scenario *sc = calloc(1, sizeof(*sc));
    if (!sc)
        return -RKV_ENOMEM;
    struct sc_ctx c = {.path = path, .err = err, .err_len = err_len, .sc = sc};
    snprintf(sc->path, sizeof(sc->path), "%s", path);
    sc->seed = 1;
    sc->oracle_strict = 1;
    int rc = -RKV_ECONFIG;
    FILE *probe = fopen(path, "r");
    if (!probe) {
        snprintf(err, err_len, "%s: cannot open: %s", path, strerror(errno));
        goto free_sc;
    }
    fclose(probe);
    struct fy_diag_cfg dcfg;
    fy_diag_cfg_default(&dcfg);
    dcfg.fp = NULL;
    dcfg.output_fn = NULL;
    struct fy_diag *diag = fy_diag_create(&dcfg);
    if (diag)
        fy_diag_set_collect_errors(diag, true);
    struct fy_parse_cfg pcfg = {.flags = FYPCF_QUIET | FYPCF_DEFAULT_PARSE, .diag = diag};
    if ((rc = sc_parse_probe(path, &pcfg, err, err_len)) < 0)
        goto destroy_diag;
    rc = -RKV_ECONFIG;
    struct fy_document *doc = fy_document_build_from_file(&pcfg, path);
    if (!doc) {
        rc = sc_syntax_error(&c, diag);
        goto destroy_diag;
    }
    struct fy_node *root = fy_document_root(doc);
    if (!root) { /* a document of comments only: its start is all there is */
        snprintf(err, err_len, "%s:1:1: empty scenario (expected cluster, tensors, workload)",
                 path);
        rc = -RKV_ECONFIG;
    } else if ((rc = sc_no_alias(&c, root, 0)) == 0 && (rc = sc_sections(&c, root)) == 0 &&
               (rc = sc_check_size(&c, sc->sim_payloadless)) == 0 &&
               (rc = sc_check_books(&c)) == 0 && (rc = sc_check_keys(&c)) == 0) {
        rc = sc_check_faults(sc, err, err_len);
    }
    fy_document_destroy(doc);
destroy_diag:
    if (diag)
        fy_diag_destroy(diag);
    if (rc == 0) {
        *sc_p = sc;
        return 0;
    }
free_sc:
    rkv_scenario_free(sc);
    return rc;
}

void rkv_scenario_free(struct rkv_scenario *sc)
{
    if (!sc)
        return;
    for (uint32_t i = 0; i < sc->n_tensors; i++) {
        free(sc->tensors[i].book);
        free(sc->tensors[i].local);
    }
    free(sc);
}

uint32_t rkv_scenario_workers(const struct rkv_scenario *sc)
{
    return sc->workers_total ? sc->workers_total : sc->machines * sc->workers_per_machine;
}

uint32_t rkv_scenario_worker_machine(const struct rkv_scenario *sc, uint32_t w)
{
    /* A file's workers fill each machine's slots in order (client ids are
     * assigned by machine); a built-in run's uneven count deals them out. */
    if (sc->workers_total && !sc->workers_mark.line)
        return w % sc->machines;
    return w / sc->workers_per_machine;
}

uint32_t rkv_scenario_servers(const struct rkv_scenario *sc)
{
    return sc->machines * sc->servers_per_machine;
}
