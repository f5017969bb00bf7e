/* The machine's write-ahead log: appends, group commit, checkpoints'
 * rotation and recovery (format and protocol in wal.h). */
#include "store/wal.h"

#include <assert.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "port/port_file.h"
#include "util/util.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the log format is little-endian");

void rkv_wal_file_name(char *buf, size_t len, uint32_t machine, uint64_t gen)
{
    snprintf(buf, len, "rkv-m%u.%llu.wal", machine, (unsigned long long)gen);
}

static void wal_path(const struct rkv_wal *w, uint64_t gen, char *buf, size_t len)
{
    char name[64];
    rkv_wal_file_name(name, sizeof(name), w->machine, gen);
    snprintf(buf, len, "%s/%s", w->dir, name);
}

/* The generation of directory entry `name` when it is a log of this
 * machine (exactly as rkv_wal_file_name writes it), else 0. */
static uint64_t wal_gen_of(const struct rkv_wal *w, const char *name)
{
    char prefix[32], again[64];
    size_t n = (size_t)snprintf(prefix, sizeof(prefix), "rkv-m%u.", w->machine);
    if (strncmp(name, prefix, n) != 0)
        return 0;
    uint64_t gen = 0;
    const char *p = name + n;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (gen > (UINT64_MAX - 9) / 10)
            return 0;
        gen = gen * 10 + (uint64_t)(*p - '0');
    }
    rkv_wal_file_name(again, sizeof(again), w->machine, gen);
    return strcmp(p, ".wal") == 0 && strcmp(again, name) == 0 ? gen : 0;
}

/* Spare k (a log let go, or zeros written ahead), and a fresh file's name
 * until it is complete. */
static void wal_spare_path(const struct rkv_wal *w, uint32_t k, char *buf, size_t len)
{
    snprintf(buf, len, "%s/rkv-m%u.free%u.wal", w->dir, w->machine, k);
}

static void wal_new_path(const struct rkv_wal *w, char *buf, size_t len)
{
    snprintf(buf, len, "%s/rkv-m%u.new.wal", w->dir, w->machine);
}

/* ---- encoding ---- */

static uint64_t wal_body_bytes(uint64_t count, uint64_t row_bytes)
{
    return (count * (8 + row_bytes) + 7) & ~7ull;
}

size_t rkv_wal_record_bytes(uint64_t count, uint64_t row_bytes)
{
    return (size_t)(RKV_WAL_REC_BYTES + wal_body_bytes(count, row_bytes));
}

void rkv_wal_encode_header(uint8_t *out, uint32_t machine, uint64_t lineage, uint64_t gen,
                           uint64_t fingerprint, uint64_t hwm)
{
    memset(out, 0, RKV_WAL_HDR_BYTES);
    rkv_put64(out, RKV_WAL_MAGIC);
    rkv_put32(out + 8, RKV_WAL_VERSION);
    rkv_put32(out + 12, machine);
    rkv_put64(out + 16, lineage);
    rkv_put64(out + 24, gen);
    rkv_put64(out + 32, fingerprint);
    rkv_put64(out + 40, rkv_file_wall_ns());
    rkv_put64(out + 48, hwm);
    rkv_put32(out + 60, rkv_crc32c(0, out, 60));
}

static const uint8_t wal_zeros[8];

/* The record's header for p into out (RKV_WAL_REC_BYTES), but for its place
 * (wal_seal_head); the body is the ids, the rows and pad zero bytes, written
 * from where they are. */
static void wal_encode_head(uint8_t *out, const struct rkv_wal_push *p, uint64_t row_bytes,
                            size_t pad)
{
    size_t ids = (size_t)p->count * 8, rows = (size_t)(p->count * row_bytes);
    uint32_t crc = rkv_crc32c(0, p->ids, ids);
    crc = rkv_crc32c(crc, p->rows, rows);
    crc = rkv_crc32c(crc, wal_zeros, pad);
    memset(out, 0, RKV_WAL_REC_BYTES);
    rkv_put32(out, RKV_WAL_REC_MAGIC);
    rkv_put32(out + 4, RKV_WAL_REC_PUSH); /* u16 type, u16 zero */
    rkv_put32(out + 8, p->tensor_id);
    rkv_put32(out + 12, p->client);
    rkv_put64(out + 16, p->seq);
    rkv_put64(out + 24, p->count);
    rkv_put64(out + 32, row_bytes);
    memcpy(out + 40, &p->param, 8);
    rkv_put32(out + 48, (uint32_t)p->op);
    rkv_put32(out + 52, crc);
}

/* The record's place: its LSN, the durable LSN when it was appended and the
 * lineage, which tell it from a record of the file's earlier use. */
static void wal_seal_head(uint8_t *out, uint64_t lsn, uint64_t durable, uint64_t lineage)
{
    rkv_put64(out + 56, lsn);
    rkv_put64(out + 64, durable);
    rkv_put32(out + 72, (uint32_t)lineage);
    rkv_put32(out + 76, rkv_crc32c(0, out, 76));
}

static size_t wal_pad(uint64_t count, uint64_t row_bytes)
{
    return (size_t)(wal_body_bytes(count, row_bytes) - count * (8 + row_bytes));
}

void rkv_wal_encode_record(uint8_t *out, const struct rkv_wal_push *p, uint64_t row_bytes,
                           uint64_t lsn, uint64_t durable, uint64_t lineage)
{
    size_t ids = (size_t)p->count * 8, rows = (size_t)(p->count * row_bytes);
    size_t pad = wal_pad(p->count, row_bytes);
    uint8_t *b = out + RKV_WAL_REC_BYTES;
    memcpy(b, p->ids, ids);
    memcpy(b + ids, p->rows, rows);
    memset(b + ids + rows, 0, pad);
    wal_encode_head(out, p, row_bytes, pad);
    wal_seal_head(out, lsn, durable, lineage);
}

/* ---- the handle ---- */

void rkv_wal_init(struct rkv_wal *w, struct rkv_port *port, struct rkv_mach *mc,
                  const struct rkv_tensor_table *tensors, const struct rkv_config *cfg)
{
    memset(w, 0, sizeof(*w));
    w->port = port;
    w->mc = mc;
    w->tensors = tensors;
    w->machine = cfg->machine_id;
    w->fingerprint = rkv_cfg_fingerprint(cfg);
    w->checkpoint_bytes = RKV_WAL_CHECKPOINT_BYTES;
    w->prewrite_bytes = cfg->durable_log_prewrite;
    w->hwm_step = RKV_WAL_HWM_STEP;
    w->timeout_ms = cfg->timeout_ms;
    snprintf(w->dir, sizeof(w->dir), "%s", cfg->durable_dir);
    w->app.fd = w->sync.fd = -1;
}

static void wal_file_close(struct rkv_wal_file *f)
{
    rkv_file_close(f->fd);
    f->fd = -1;
    f->gen = 0;
}

static void wal_copies_free(struct rkv_wal *w)
{
    for (uint32_t id = 0; w->copies && id <= RKV_MAX_TENSORS; id++)
        free(w->copies[id].lsn);
    free(w->copies);
    w->copies = NULL;
}

void rkv_wal_free(struct rkv_wal *w)
{
    wal_file_close(&w->app);
    wal_file_close(&w->sync);
    wal_copies_free(w);
}

int rkv_wal_set_copies(struct rkv_wal *w, const struct rkv_snap *s, char *err, size_t err_len)
{
    wal_copies_free(w);
    if (!(w->copies = calloc(RKV_MAX_TENSORS + 1, sizeof(*w->copies))))
        return rkv_errf(err, err_len, -RKV_ENOMEM, "out of memory");
    for (uint32_t i = 0; i < s->n_tensors; i++) {
        const struct rkv_snap_tensor *t = &s->tensors[i];
        struct rkv_wal_copy *c = &w->copies[t->id];
        uint64_t n = rkv_snap_chunks(t);
        if (!t->copy_lsn || !n)
            continue; /* version 1: one copy of everything at once */
        if (n > SIZE_MAX / 8 || !(c->lsn = malloc((size_t)n * 8))) {
            wal_copies_free(w);
            return rkv_errf(err, err_len, -RKV_ENOMEM, "out of memory");
        }
        c->chunk_rows = t->chunk_rows;
        c->n_chunks = n;
        for (uint64_t k = 0; k < n; k++) {
            uint64_t lsn = rkv_get64(t->copy_lsn + k * 8);
            if (lsn && RKV_WAL_GEN(lsn) != s->generation) {
                wal_copies_free(w);
                return rkv_errf(err, err_len, -RKV_EIO,
                                "snapshot of machine %u, generation %llu: tensor %u's chunk %llu "
                                "was copied at a place in log %llu",
                                s->machine, (unsigned long long)s->generation, t->id,
                                (unsigned long long)k, (unsigned long long)RKV_WAL_GEN(lsn));
            }
            c->lsn[k] = lsn;
            c->lsn_max = lsn > c->lsn_max ? lsn : c->lsn_max;
        }
    }
    return 0;
}

/* wal_failed's value once a log was found deleted: no checkpoint clears
 * it (gen < it always), only a restart. A checkpoint into a directory made
 * again under the same name would have healed the log, but that directory
 * holds no coordination record and no claim: a restart on it was refused,
 * and another cluster's servers could claim it meanwhile. */
#define WAL_LOST UINT_MAX

/* f open on log gen (reopened after a checkpoint switched logs). */
static int wal_file_use(struct rkv_wal *w, struct rkv_wal_file *f, uint64_t gen, char *path,
                        size_t path_len, char *err, size_t err_len)
{
    wal_path(w, gen, path, path_len);
    if (f->fd >= 0 && f->gen == gen)
        return 0;
    wal_file_close(f);
    int rc = rkv_file_open(path, 0, &f->fd, err, err_len);
    /* The log a running machine appends to is gone: its directory was
     * removed (the client read "unknown tensor", the code of a missing
     * file). */
    if (rc == -RKV_ENOTENSOR) {
        atomic_store(&w->mc->hdr->wal_failed, WAL_LOST);
        rc = rkv_errf(err, err_len, -RKV_EIO,
                      "log %s is missing (the durable directory removed?): what was "
                      "acknowledged before is lost at the next restart",
                      path);
    }
    if (rc < 0)
        return rc;
    f->gen = gen;
    return 0;
}

/* Raises *a to v (LSNs only grow; two servers may store out of order). */
static void wal_raise(_Atomic uint64_t *a, uint64_t v)
{
    uint64_t cur = atomic_load(a);
    while (cur < v && !atomic_compare_exchange_weak(a, &cur, v))
        ;
}

uint64_t rkv_wal_pending_bytes(const struct rkv_wal *w)
{
    uint64_t off = RKV_WAL_OFF(atomic_load(&w->mc->hdr->wal_end));
    return off > RKV_WAL_HDR_BYTES ? off - RKV_WAL_HDR_BYTES : 0;
}

/* Zeros over the record header at off of fd (as far as the file goes), made
 * durable: the log's records end there, whatever was written past it. Not a
 * truncation, which would give up the blocks written ahead. */
static int wal_void_at(int fd, uint64_t off, const char *path, char *err, size_t err_len)
{
    static const uint8_t zeros[RKV_WAL_REC_BYTES];
    uint64_t size;
    int rc = rkv_file_size(fd, &size, path, err, err_len);
    if (rc < 0 || size <= off)
        return rc;
    size_t n = size - off < sizeof(zeros) ? (size_t)(size - off) : sizeof(zeros);
    if ((rc = rkv_file_pwrite(fd, zeros, n, off, path, err, err_len)) == 0)
        rc = rkv_file_datasync(fd, path, err, err_len);
    return rc;
}

/* Voids what a dead holder of wal_lock may have written past the end. */
static int wal_cut(struct rkv_wal *w, char *err, size_t err_len)
{
    assert(rkv_live_held(&w->mc->hdr->wal_lock, w->mc->owner));
    uint64_t end = atomic_load(&w->mc->hdr->wal_end);
    char path[512];
    if (RKV_WAL_GEN(end) == 0)
        return 0;
    int rc = wal_file_use(w, &w->app, RKV_WAL_GEN(end), path, sizeof(path), err, err_len);
    return rc < 0 ? rc : wal_void_at(w->app.fd, RKV_WAL_OFF(end), path, err, err_len);
}

static int wal_finish_torn(struct rkv_wal *w, const struct rkv_handler_table *ht, char *err,
                           size_t err_len);
static int wal_after_death(struct rkv_wal *w, uint32_t dead, char *err, size_t err_len);

int rkv_wal_trim(struct rkv_wal *w, const struct rkv_handler_table *ht, char *err, size_t err_len)
{
    struct rkv_mach_hdr *h = w->mc->hdr;
    /* As a push takes them: a checkpoint's copy must not see the rows of
     * the push being finished half way. */
    rkv_mach_apply_begin(w->mc);
    /* A sibling that died holding the lock (its row and client locks with
     * it) is cleaned up as a push would: finishing its push under its row
     * lock would spin for ever. */
    uint32_t dead =
        rkv_live_lock(w->port, &h->wal_lock, &h->wal_holder, h->reader_proc, w->mc->owner);
    int rc = dead ? wal_after_death(w, dead, err, err_len) : wal_cut(w, err, err_len);
    char why[300];
    /* What this server cannot finish yet (a custom op registered after
     * create) waits for the next push, here or on a live server. */
    if (rc == 0 && atomic_load(&h->jr_lsn) && wal_finish_torn(w, ht, why, sizeof(why)) < 0)
        RKV_LOGW(w->port, "%s", why);
    rkv_live_unlock(&h->wal_lock, &h->wal_holder);
    rkv_mach_apply_end(w->mc);
    return rc;
}

/* ---- the push path ---- */

static int wal_datasync(struct rkv_wal *w, struct rkv_wal_file *f, const char *path, char *err,
                        size_t err_len);

/* The high-water mark that covers byte `need` of log gen: need plus a
 * step, below 1 TiB (the largest offset an LSN holds). */
static uint64_t wal_hwm_for(const struct rkv_wal *w, uint64_t gen, uint64_t need)
{
    uint64_t off = need + w->hwm_step, cap = (1ull << RKV_WAL_OFF_BITS) - 1;
    return RKV_WAL_LSN(gen, off < need || off > cap ? cap : off);
}

/* Makes sure log f's high-water mark covers byte OFF(need) + margin (need
 * an LSN of f's log, which cannot switch meanwhile: the caller holds the
 * apply lock or wal_sync_lock), raising it to OFF(need) + a step when not:
 * the header rewritten in place and synced, then published (wal.h). The
 * append path asks with margin 0 (a record goes there next); the group
 * commit asks with half a step, ahead, and its fdatasync is then this one
 * (*synced_p), so that appends rarely sync under wal_lock. wal_hwm_lock
 * keeps the two from writing the header at once (the disk could keep the
 * smaller mark). */
static int wal_hwm_ensure(struct rkv_wal *w, struct rkv_wal_file *f, const char *path,
                          uint64_t need, uint64_t margin, int *synced_p, char *err, size_t err_len)
{
    struct rkv_mach_hdr *h = w->mc->hdr;
    uint64_t gen = RKV_WAL_GEN(need), off = RKV_WAL_OFF(need);
    assert(f->gen == gen && margin <= w->hwm_step);
    uint64_t hwm = atomic_load(&h->wal_hwm);
    if (RKV_WAL_GEN(hwm) == gen && off + margin <= RKV_WAL_OFF(hwm))
        return 0;
    rkv_live_lock(w->port, &h->wal_hwm_lock, &h->wal_hwm_holder, h->reader_proc, w->mc->owner);
    hwm = atomic_load(&h->wal_hwm);
    int rc = 0;
    if (RKV_WAL_GEN(hwm) != gen || off + margin > RKV_WAL_OFF(hwm)) {
        uint8_t hdr[RKV_WAL_HDR_BYTES];
        hwm = wal_hwm_for(w, gen, off);
        rc = rkv_file_pread(f->fd, hdr, sizeof(hdr), 0, path, err, err_len);
        rkv_put64(hdr + 48, RKV_WAL_OFF(hwm));
        rkv_put32(hdr + 60, rkv_crc32c(0, hdr, 60));
        if (rc == 0 && (rc = rkv_file_pwrite(f->fd, hdr, sizeof(hdr), 0, path, err, err_len)) == 0)
            rc = wal_datasync(w, f, path, err, err_len);
        if (rc == 0) {
            atomic_store(&h->wal_hwm, hwm);
            w->n_hwm_raises++;
            *synced_p = 1;
        }
    }
    rkv_live_unlock(&h->wal_hwm_lock, &h->wal_hwm_holder);
    return rc;
}

/* The record of p, whose header (wal_encode_head) is head, at the end of
 * the current log (under wal_lock), its place sealed in head. */
static int wal_append(struct rkv_wal *w, const struct rkv_wal_push *p, uint64_t row_bytes,
                      uint8_t *head, char *err, size_t err_len)
{
    struct rkv_mach_hdr *h = w->mc->hdr;
    assert(rkv_live_held(&h->wal_lock, w->mc->owner));
    uint64_t end = atomic_load(&h->wal_end);
    if (RKV_WAL_GEN(end) == 0)
        return rkv_errf(err, err_len, -RKV_EIO,
                        "machine %u: no log to append to (no checkpoint was written yet)",
                        w->machine);
    uint64_t bytes64;
    if (!rkv_mul_ok(p->count, 8 + row_bytes, &bytes64) ||
        !rkv_add_ok(bytes64, RKV_WAL_REC_BYTES + 7, &bytes64) ||
        RKV_WAL_OFF(end) + bytes64 >= (1ull << RKV_WAL_OFF_BITS))
        return rkv_errf(err, err_len, -RKV_ELIMIT, "machine %u: a log record would not fit",
                        w->machine);
    size_t bytes = rkv_wal_record_bytes(p->count, row_bytes);
    size_t pad = wal_pad(p->count, row_bytes);
    wal_seal_head(head, end, atomic_load(&h->wal_durable),
                  __atomic_load_n(&h->lineage, __ATOMIC_ACQUIRE));
    /* Written from the request's own buffers: no copy of the rows. */
    const void *bufs[4] = {head, p->ids, p->rows, wal_zeros};
    size_t lens[4] = {RKV_WAL_REC_BYTES, (size_t)p->count * 8, (size_t)(p->count * row_bytes), pad};
    char path[512];
    int rc = wal_file_use(w, &w->app, RKV_WAL_GEN(end), path, sizeof(path), err, err_len);
    int synced = 0;
    if (rc == 0)
        rc = wal_hwm_ensure(w, &w->app, path, end + bytes, 0, &synced, err, err_len);
    if (rc == 0) {
        /* From here a death leaves the journal to the next holder of
         * wal_lock: a record published (wal_end past it) is finished, one
         * not yet is voided (wal_finish_torn). Set after the publication,
         * a death between the two left a logged push unmarked: its retry
         * was logged again, and a replay applied it at the first record's
         * place in the order, not where it was acknowledged. */
        atomic_store(&h->jr_pos, 0);
        atomic_store(&h->jr_tag, w->mc->owner);
        atomic_store(&h->jr_lsn, end);
        rc = rkv_file_pwritev(w->app.fd, bufs, lens, pad ? 4 : 3, RKV_WAL_OFF(end), path, err,
                              err_len);
    }
    if (rc < 0)
        return rc;
    /* No early write-out (sync_file_range) here: this is the server's
     * progress task, the push path's bottleneck (perf: ~60% of the
     * process at 1 MiB rows x 8 workers), and the durable task's
     * fdatasync, on another core, starts the write-out a moment later. */
    /* Published only once whole: a sync covers what is below it. */
    atomic_store(&h->wal_end, end + bytes);
    w->n_records++;
    w->bytes_appended += bytes;
    return 0;
}

static int wal_here(const uint8_t *rec, uint64_t lsn, uint64_t lineage);

/* ---- the apply journal ----
 *
 * A push is applied in place, row by row, into memory the machine's other
 * servers go on serving when its server dies: a server killed in the
 * middle left some rows applied, one perhaps half, and its (client,
 * sequence) not marked; the client's retry then applied the whole push
 * again (an outside tester: "expected 23, got 19", and the next checkpoint
 * saved it). Rolling the machine back to its snapshot would stop every
 * server of the machine. Instead the push's record, published before its
 * first row is touched, says what the push is, and the journal in the
 * machine segment (jr_lsn, set before the record is written, and jr_pos)
 * says how far it went, with the old content of the segment of a row in
 * flight in its shard's journal row: whoever takes wal_lock next (a live
 * server's next push, or the dead one's restart) puts that segment back,
 * applies the rest from the record and marks the sequence, as if the push
 * had ended. The cost, in durable mode only: a copy of each segment (in
 * cache) before it changes, and two stores into one shared line per
 * segment (rkv bench durable: within this host's noise). */

/* jr_pos: the row's index in the push, the segment's in the row, and
 * whether that segment's old content is saved (wal_apply_journaled). */
#define WAL_JR_SEG_BITS 23
#define WAL_JR_POS(row, seg, saved)                                                                \
    ((uint64_t)(row) << (WAL_JR_SEG_BITS + 1) | (uint64_t)(seg) << 1 | (uint64_t)(saved))
#define WAL_JR_ROW(pos) ((pos) >> (WAL_JR_SEG_BITS + 1))
#define WAL_JR_SEG(pos) (((pos) >> 1) & ((1ull << WAL_JR_SEG_BITS) - 1))
/* A built-in op changes a row element by element, so a row is journaled a
 * segment at a time: the old content copied is the part about to be read
 * anyway, in cache for the apply (a whole 1 MiB row's copy first cost
 * 10-20 % of the durable push rate; rkv bench durable). */
#define WAL_JR_SEG_BYTES 4096u

/* Elements per journaled segment of op on t's rows: a custom handler gets
 * whole rows (it may read a row across), the built-ins segments of up to
 * WAL_JR_SEG_BYTES, at most 2^WAL_JR_SEG_BITS of them per row. */
static uint64_t wal_seg_elems(const struct rkv_tensor *t, int op)
{
    uint64_t n = t->meta.row_len;
    if (op >= RKV_OP_CUSTOM || n == 0)
        return n ? n : 1;
    uint64_t seg = WAL_JR_SEG_BYTES / rkv_dtype_size(t->meta.dtype);
    uint64_t least = (n + (1ull << WAL_JR_SEG_BITS) - 1) >> WAL_JR_SEG_BITS;
    return seg > least ? seg : least;
}

/* Segments per row of op on t. */
static uint64_t wal_segs(const struct rkv_tensor *t, int op)
{
    uint64_t per = wal_seg_elems(t, op);
    return (t->meta.row_len + per - 1) / per;
}

/* Segment seg of a row of op on t: its byte offset in the row, its bytes. */
static void wal_seg_span(const struct rkv_tensor *t, int op, uint64_t seg, size_t *off, size_t *len)
{
    uint64_t per = wal_seg_elems(t, op), e0 = seg * per, n = t->meta.row_len;
    assert(e0 < n);
    size_t es = rkv_dtype_size(t->meta.dtype);
    *off = (size_t)e0 * es;
    *len = (size_t)(n - e0 < per ? n - e0 : per) * es;
}

/* Applies a push whose record is in the log, from segment `seg` of row
 * `from` to its end, each segment's old content saved in the shard's
 * journal row before it changes (not for an assign, which applied again
 * gives the same row), and jr_pos saying where it is. over: the tag of
 * the dead server whose push this finishes (its row lock is taken over),
 * else 0. */
static void wal_apply_journaled(struct rkv_mach_hdr *h, struct rkv_tensor *t,
                                const struct rkv_handler_table *ht, int op, double param,
                                const uint64_t *ids, const uint8_t *rows, uint64_t from,
                                uint64_t seg, uint64_t count, unsigned over)
{
    struct rkv_shard *sh = &t->shard;
    size_t rb = sh->row_bytes, es = rkv_dtype_size(t->meta.dtype);
    uint64_t segs = wal_segs(t, op), n_elems = t->meta.row_len;
    int save = op != RKV_OP_ASSIGN;
    for (uint64_t i = from; i < count; i++, seg = 0) {
        uint64_t l = rkv_pbook_g2l(&t->pb, ids[i]);
        assert(l < sh->local_rows);
        uint8_t *row = sh->data + l * rb, *state = sh->state ? sh->state + l * rb : NULL;
        const uint8_t *in = rows + i * rb;
        rkv_shard_lock_over(sh, l, over);
        if (!save) {
            atomic_store_explicit(&h->jr_pos, WAL_JR_POS(i, 0, 0), memory_order_release);
            rkv_handler_run(ht, op, t->meta.dtype, row, state, in, n_elems, param);
        }
        for (; save && seg < segs; seg++) {
            size_t off, len;
            wal_seg_span(t, op, seg, &off, &len);
            memcpy(sh->journal, row + off, len);
            if (state)
                memcpy(sh->journal + rb, state + off, len);
            atomic_store_explicit(&h->jr_pos, WAL_JR_POS(i, seg, 1), memory_order_release);
            rkv_handler_run(ht, op, t->meta.dtype, row + off, state ? state + off : NULL, in + off,
                            len / es, param);
            atomic_store_explicit(&h->jr_pos, WAL_JR_POS(i, seg + 1, 0), memory_order_release);
        }
        rkv_shard_unlock(sh, l);
    }
}

/* Under wal_lock, with jr_lsn set: a holder died inside that push (a live
 * holder clears it before it lets the lock go). Finishes it from its
 * record. -RKV_ENOTENSOR or -RKV_ENOHANDLER when this server cannot (its
 * tensor is not mapped here, or its custom op has no handler here yet):
 * the journal stays for a server that can, and nothing else is applied
 * meanwhile. A record that no longer reads as the one appended cannot be
 * finished by anyone: said, and the journal let go (the rows stay as they
 * are, the push unacknowledged). */
static int wal_finish_torn(struct rkv_wal *w, const struct rkv_handler_table *ht, char *err,
                           size_t err_len)
{
    struct rkv_mach_hdr *h = w->mc->hdr;
    assert(rkv_live_held(&h->wal_lock, w->mc->owner));
    uint64_t lsn = atomic_load(&h->jr_lsn), pos = atomic_load(&h->jr_pos);
    /* The dead server's tag, whose row lock is taken over; not when it is
     * ours (our predecessor's push, whose locks our restart freed before
     * it served): a word under our tag may be our own live hold then. */
    unsigned tag = atomic_load(&h->jr_tag);
    unsigned over = tag == w->mc->owner ? 0 : tag;
    uint64_t lineage = __atomic_load_n(&h->lineage, __ATOMIC_ACQUIRE);
    uint8_t head[RKV_WAL_REC_BYTES], *body = NULL;
    char path[512], why[300] = "";
    if (lsn >= atomic_load(&h->wal_end)) {
        /* It died writing the record: nothing of the push was applied,
         * and what it wrote goes (as after a take-over; a lock freed by
         * the dead server's restart is taken without one). */
        int rc = wal_cut(w, err, err_len);
        if (rc == 0) {
            atomic_store(&h->jr_lsn, 0);
            if (over)
                rkv_wal_free_rows(w, over);
            RKV_LOGW(w->port,
                     "machine %u: a server died writing a push's log record: voided, nothing of "
                     "that push was applied (its client's retry applies it)",
                     w->machine);
        }
        return rc;
    }
    /* What cannot be read now (no memory, no descriptor, an I/O error)
     * may be later: the journal stays, and this push fails. */
    int rc = wal_file_use(w, &w->app, RKV_WAL_GEN(lsn), path, sizeof(path), err, err_len);
    if (rc == 0)
        rc = rkv_file_pread(w->app.fd, head, sizeof(head), RKV_WAL_OFF(lsn), path, err, err_len);
    if (rc < 0)
        return rc;
    /* What is not the record appended never will be: said, and let go. */
    int final = 0;
    if (rkv_get32(head) != RKV_WAL_REC_MAGIC || !wal_here(head, lsn, lineage))
        final = rkv_errf(why, sizeof(why), -RKV_EIO, "log %s: no record at byte %llu", path,
                         (unsigned long long)RKV_WAL_OFF(lsn));
    uint32_t tid = rkv_get32(head + 8), client = rkv_get32(head + 12);
    uint64_t seq = rkv_get64(head + 16), count = rkv_get64(head + 24);
    uint64_t row_bytes = rkv_get64(head + 32), body_bytes = 0;
    int op = (int)rkv_get32(head + 48);
    double param;
    memcpy(&param, head + 40, 8);
    struct rkv_tensor *t = final == 0 ? rkv_tensor_at(w->tensors, tid) : NULL;
    if (final == 0 && !rkv_tensor_serving(t))
        return rkv_errf(err, err_len, -RKV_ENOTENSOR,
                        "machine %u: a server died applying a push to tensor id %u, which this "
                        "server does not hold: left for one that does",
                        w->machine, tid);
    if (final == 0 &&
        (row_bytes != t->row_bytes || count >= (1ull << 40) || WAL_JR_ROW(pos) > count ||
         (WAL_JR_ROW(pos) == count && pos != WAL_JR_POS(count, 0, 0)) ||
         (client != UINT32_MAX && client >= h->n_clients) ||
         WAL_JR_SEG(pos) + (pos & 1) > wal_segs(t, op)))
        final =
            rkv_errf(why, sizeof(why), -RKV_EIO, "log %s: the record at byte %llu does not fit it",
                     path, (unsigned long long)RKV_WAL_OFF(lsn));
    if (final == 0 && (rc = rkv_handler_check(ht, op, t->meta.dtype, t->shard.state != NULL)) < 0)
        return rkv_errf(err, err_len, rc,
                        "machine %u: a server died applying a push of op %d to tensor '%s', and "
                        "this server cannot apply that op (%s) yet: the next push on the machine "
                        "from a server that can (one that registered its handler) finishes it",
                        w->machine, op, t->meta.name, rkv_strerror(rc));
    if (final == 0) {
        body_bytes = rkv_wal_record_bytes(count, row_bytes) - RKV_WAL_REC_BYTES;
        if (!(body = malloc(body_bytes ? body_bytes : 1)))
            return rkv_errf(err, err_len, -RKV_ENOMEM,
                            "machine %u: no memory for the %llu bytes of a dead server's push",
                            w->machine, (unsigned long long)body_bytes);
        rc = rkv_file_pread(w->app.fd, body, body_bytes, RKV_WAL_OFF(lsn) + RKV_WAL_REC_BYTES, path,
                            err, err_len);
        if (rc < 0) {
            free(body);
            return rc;
        }
        if (rkv_crc32c(0, body, body_bytes) != rkv_get32(head + 52))
            final = rkv_errf(why, sizeof(why), -RKV_EIO,
                             "log %s: the record at byte %llu fails its CRC", path,
                             (unsigned long long)RKV_WAL_OFF(lsn));
    }
    if (final < 0) {
        RKV_LOGE(w->port,
                 "machine %u: a server died applying a push, which cannot be finished: %s; its "
                 "rows may be applied in part (never acknowledged)",
                 w->machine, why);
        goto done;
    }
    const uint64_t *ids = (const uint64_t *)(const void *)body;
    if (rkv_tensor_check_ids(t, w->machine, ids, (size_t)count, why, sizeof(why)) < 0) {
        RKV_LOGE(w->port, "machine %u: a dead server's push cannot be finished: %s", w->machine,
                 why);
        goto done;
    }
    struct rkv_mach_client *e = client != UINT32_MAX ? &h->clients[client] : NULL;
    int marked =
        e && (e->last_seq >> RKV_SEQ_TAG_SHIFT) == (seq >> RKV_SEQ_TAG_SHIFT) && seq <= e->last_seq;
    uint64_t from = WAL_JR_ROW(pos), seg = WAL_JR_SEG(pos);
    if (!marked && (pos & 1)) { /* the segment in flight, as it was */
        uint64_t l = rkv_pbook_g2l(&t->pb, ids[from]);
        size_t rb = t->row_bytes, off, len;
        wal_seg_span(t, op, seg, &off, &len);
        rkv_shard_lock_over(&t->shard, l, over);
        memcpy(t->shard.data + l * rb + off, t->shard.journal, len);
        if (t->shard.state)
            memcpy(t->shard.state + l * rb + off, t->shard.journal + rb, len);
        rkv_shard_unlock(&t->shard, l);
    }
    if (!marked)
        wal_apply_journaled(h, t, ht, op, param, ids, body + count * 8, from, seg, count, over);
    if (e && !marked)
        e->last_seq = seq;
    RKV_LOGW(w->port,
             "machine %u: a server died applying a push (tensor '%s', %llu rows, client %u, "
             "push %llx): %s",
             w->machine, t->meta.name, (unsigned long long)count, client, (unsigned long long)seq,
             marked ? "it had ended" : "finished it from its log record");
done:
    free(body);
    atomic_store(&h->jr_lsn, 0);
    if (over)
        rkv_wal_free_rows(w, over);
    return 0;
}

/* wal_lock taken over from a holder (tag dead) that died inside a push:
 * what it wrote past the log's end goes, and the locks it held inside this
 * one are freed: client entries (only ever held under wal_lock in durable
 * mode, so none is a live server's) and its row locks (by its tag). The
 * push itself, if its record was published, is finished by the apply
 * journal (wal_finish_torn). */
static int wal_after_death(struct rkv_wal *w, uint32_t dead, char *err, size_t err_len)
{
    struct rkv_mach_hdr *h = w->mc->hdr;
    /* A tag is the local server id + 1: named as the launcher names it.
     * What becomes of its push is said next (wal_finish_torn), or here
     * when there is none. */
    RKV_LOGW(w->port, "machine %u: server s%u.%u died holding the log's lock%s", w->machine,
             w->machine, dead - 1,
             atomic_load(&h->jr_lsn) ? ", inside a push"
                                     : ", outside a push's append and apply: nothing to finish");
    for (uint32_t c = 0; c < h->n_clients; c++)
        atomic_store(&h->clients[c].lock, 0);
    rkv_wal_free_rows(w, dead);
    return wal_cut(w, err, err_len);
}

uint32_t rkv_wal_free_rows(struct rkv_wal *w, uint32_t tag)
{
    struct rkv_mach_hdr *h = w->mc->hdr;
    uint32_t n = 0;
    /* The word of the row a push died in is its finisher's to take over
     * (wal_finish_torn): freed now, a pull could read that row half
     * applied until the finisher locked it. Not our predecessor's (a
     * restart under its tag): its finisher, this server, could not tell
     * that word from its own, so it goes now, before this one serves. */
    if (atomic_load(&h->jr_lsn) && atomic_load(&h->jr_tag) == tag && tag != w->mc->owner)
        return 0;
    for (uint32_t id = 1; w->tensors && id <= RKV_MAX_TENSORS; id++) {
        struct rkv_tensor *t = rkv_tensor_at(w->tensors, id);
        if (rkv_tensor_serving(t)) {
            struct rkv_shard as_dead = t->shard;
            as_dead.owner = tag;
            n += rkv_shard_reclaim(&as_dead);
        }
    }
    return n;
}

int rkv_wal_reap(struct rkv_wal *w, const struct rkv_handler_table *ht, uint32_t tag, uint64_t proc,
                 char *err, size_t err_len)
{
    struct rkv_mach *mc = w->mc;
    struct rkv_mach_hdr *h = mc->hdr;
    assert(tag >= 1 && tag <= RKV_MACH_SERVERS && tag != mc->owner);
    /* Inside a push of our own (its apply waits on the dead server's
     * row): the log is ours, and so is the journal, if any. */
    int held = rkv_live_held(&h->wal_lock, mc->owner);
    int rc = 0;
    uint32_t freed = 0;
    if (!held) {
        rkv_mach_apply_begin(mc);
        uint32_t dead =
            rkv_live_lock(w->port, &h->wal_lock, &h->wal_holder, h->reader_proc, mc->owner);
        if (dead)
            rc = wal_after_death(w, dead, err, err_len);
        char why[300];
        if (rc == 0 && atomic_load(&h->jr_lsn) && wal_finish_torn(w, ht, why, sizeof(why)) < 0)
            RKV_LOGW(w->port, "%s", why);
    }
    /* A restart of the slot (a new process there) frees its own. */
    if (rc == 0 && atomic_load(&h->reader_proc[tag - 1]) == proc)
        freed = rkv_wal_free_rows(w, tag);
    if (!held) {
        rkv_live_unlock(&h->wal_lock, &h->wal_holder);
        rkv_mach_apply_end(mc);
    }
    return rc < 0 ? rc : (int)freed;
}

int rkv_wal_push(struct rkv_wal *w, struct rkv_tensor *t, const struct rkv_handler_table *ht,
                 const struct rkv_wal_push *p, int *dup_p, char *err, size_t err_len)
{
    struct rkv_mach *mc = w->mc;
    struct rkv_mach_hdr *h = mc->hdr;
    int tracked = p->client < h->n_clients;
    int rc = 0;
    /* The record's header and its body's CRC-32C (a pass over the rows)
     * depend on nothing the locks protect: made before them, so that the
     * machine's other servers wait only for the write and the apply. */
    uint8_t head[RKV_WAL_REC_BYTES];
    wal_encode_head(head, p, t->row_bytes, wal_pad(p->count, t->row_bytes));
    rkv_mach_apply_begin(mc);
    uint32_t dead = rkv_live_lock(w->port, &h->wal_lock, &h->wal_holder, h->reader_proc, mc->owner);
    if (dead && (rc = wal_after_death(w, dead, err, err_len)) < 0)
        goto unlock;
    /* Before the duplicate check: the dead holder's push may be this one. */
    if (atomic_load(&h->jr_lsn) && (rc = wal_finish_torn(w, ht, err, err_len)) < 0)
        goto unlock;
    int dup = tracked && rkv_mach_seq_begin(mc, p->client, p->seq);
    if (!dup) {
        /* Checked before the append: a logged push is one replay applies. */
        rc = rkv_handler_check(ht, p->op, t->meta.dtype, t->shard.state != NULL);
        if (rc < 0)
            rkv_errf(err, err_len, rc, "tensor '%s': push op %d on %s: %s", t->meta.name, p->op,
                     rkv_dtype_name(t->meta.dtype), rkv_strerror(rc));
        if (rc == 0)
            /* A logged push must be applied whole, so its apply waits for
             * each row lock without a bound: a co-located worker stopped
             * holding one stalled this server and every push of the machine
             * behind wal_lock (an outside tester). Looked at first, so that
             * such a push is refused unlogged; a holder that takes the lock
             * again between this look and the apply is waited for there. */
            rc = rkv_shard_rows_free(&t->shard, t, p->ids, p->count, w->timeout_ms, w->machine,
                                     "push", err, err_len);
        if (rc == 0)
            rc = wal_append(w, p, t->row_bytes, head, err, err_len);
        if (rc == 0) /* the journal names its record (wal_append) */
            wal_apply_journaled(h, t, ht, p->op, p->param, p->ids, p->rows, 0, 0, p->count, 0);
    }
    if (tracked)
        rkv_mach_seq_end(mc, p->client, p->seq, !dup && rc == 0);
    atomic_store(&h->jr_lsn, 0); /* after the mark: a death between finishes nothing twice */
    *dup_p = dup;
unlock:
    rkv_live_unlock(&h->wal_lock, &h->wal_holder);
    rkv_mach_apply_end(mc);
    return rc;
}

static int wal_failed(const struct rkv_wal *w, char *err, size_t err_len)
{
    if (atomic_load(&w->mc->hdr->wal_failed) == WAL_LOST)
        return rkv_errf(err, err_len, -RKV_EIO,
                        "machine %u: its log was found deleted (the durable directory %s "
                        "removed?); nothing is acknowledged until its servers restart",
                        w->machine, w->dir);
    return rkv_errf(err, err_len, -RKV_EIO,
                    "machine %u: a sync of its log failed earlier; nothing is acknowledged "
                    "until its servers restart from the log or a checkpoint is written",
                    w->machine);
}

/* A sync of log gen failed: wal_failed holds the largest such generation
 * (non-zero: nothing is acknowledged), so that a checkpoint knows whether
 * the failure came before its log switch (its snapshot then holds what was
 * unsure) or after (wal_before_swap). */
static void wal_fail_at(struct rkv_mach_hdr *h, uint64_t gen)
{
    unsigned g = gen == 0 ? 1u : gen > UINT_MAX ? UINT_MAX : (unsigned)gen;
    unsigned cur = atomic_load(&h->wal_failed);
    while (cur < g && !atomic_compare_exchange_weak(&h->wal_failed, &cur, g))
        ;
}

/* f's fdatasync; a failure poisons the machine's log (wal_failed). */
static int wal_datasync(struct rkv_wal *w, struct rkv_wal_file *f, const char *path, char *err,
                        size_t err_len)
{
    int rc = rkv_file_datasync(f->fd, path, err, err_len);
    /* A log synced but deleted (its directory removed under a running
     * server) is not durable: a restart reads the directory, finds nothing,
     * and every push acknowledged since is gone. Checked after each sync, so
     * nothing is acknowledged from the first sync that sees it. */
    if (rc == 0 && (rc = rkv_file_linked(f->fd, path, err, err_len)) < 0) {
        atomic_store(&w->mc->hdr->wal_failed, WAL_LOST);
        return rc;
    }
    if (rc < 0)
        wal_fail_at(w->mc->hdr, f->gen);
    return rc;
}

int rkv_wal_sync(struct rkv_wal *w, char *err, size_t err_len)
{
    struct rkv_mach_hdr *h = w->mc->hdr;
    if (atomic_load(&h->wal_failed))
        return wal_failed(w, err, err_len);
    uint64_t target = atomic_load(&h->wal_end);
    if (atomic_load(&h->wal_durable) >= target) {
        w->n_shared_syncs++;
        return 0;
    }
    rkv_live_lock(w->port, &h->wal_sync_lock, &h->wal_sync_holder, h->reader_proc, w->mc->owner);
    int rc = 0;
    if (atomic_load(&h->wal_durable) >= target) {
        w->n_shared_syncs++; /* a sync that began after ours was appended */
        goto unlock;
    }
    /* Everything appended so far, ours and other servers': one fdatasync.
     * The log cannot switch meanwhile (a checkpoint switches under this
     * lock), and an older log was synced whole by the switch. */
    uint64_t cur = atomic_load(&h->wal_end);
    char path[512];
    int synced = 0;
    rc = wal_file_use(w, &w->sync, RKV_WAL_GEN(cur), path, sizeof(path), err, err_len);
    if (rc == 0)
        rc = wal_hwm_ensure(w, &w->sync, path, cur, w->hwm_step / 2, &synced, err, err_len);
    if (rc == 0 && !synced)
        rc = wal_datasync(w, &w->sync, path, err, err_len);
    if (rc == 0 && atomic_load(&h->wal_failed))
        rc = wal_failed(w, err, err_len); /* a checkpoint's sync of the old log failed */
    if (rc == 0) {
        wal_raise(&h->wal_durable, cur);
        w->n_syncs++;
    }
unlock:
    rkv_live_unlock(&h->wal_sync_lock, &h->wal_sync_holder);
    return rc;
}

/* ---- checkpoints: the snapshot writer's hooks ---- */

/* Zeros from byte `from` of fd up to `to`, written in blocks of 1 MiB. */
static int wal_zero_fill(int fd, uint64_t from, uint64_t to, const char *path, char *err,
                         size_t err_len)
{
    if (from >= to)
        return 0;
    size_t block = 1u << 20;
    uint8_t *zeros = calloc(1, block);
    if (!zeros)
        return rkv_errf(err, err_len, -RKV_ENOMEM, "log %s: no memory to write zeros ahead", path);
    int rc = 0;
    for (uint64_t off = from; off < to && rc == 0; off += block) {
        size_t n = to - off < block ? (size_t)(to - off) : block;
        rc = rkv_file_pwrite(fd, zeros, n, off, path, err, err_len);
    }
    free(zeros);
    return rc;
}

/* A spare's file (*fd_p, named from), else -RKV_ENOTENSOR. A spare that is
 * not a regular file (a symbolic link, whose target the log would be
 * written into) is not used, and said so: the log is made fresh, and the
 * next log let go takes the spare's name. */
static int wal_take_spare(struct rkv_wal *w, char *from, size_t from_len, int *fd_p)
{
    char why[256];
    for (uint32_t k = 0; k < RKV_WAL_SPARES; k++) {
        wal_spare_path(w, k, from, from_len);
        int rc = rkv_file_open(from, 0, fd_p, why, sizeof(why));
        if (rc == 0)
            return 0;
        if (rc != -RKV_ENOTENSOR)
            RKV_LOGW(w->port, "machine %u: spare log not used: %s", w->machine, why);
    }
    return -RKV_ENOTENSOR;
}

/* A fresh file written with prewrite_bytes of zeros, under the name from. */
static int wal_fresh(struct rkv_wal *w, char *from, size_t from_len, int *fd_p, char *err,
                     size_t err_len)
{
    wal_new_path(w, from, from_len);
    int rc = rkv_file_open(from, 1, fd_p, err, err_len);
    if (rc < 0)
        return rc;
    if ((rc = rkv_file_truncate(*fd_p, 0, from, err, err_len)) == 0)
        rc = wal_zero_fill(*fd_p, 0, w->prewrite_bytes, from, err, err_len);
    if (rc < 0) {
        /* What was written of it goes too: a fill that met a full disk
         * left its zeros there, and the coordination record's next write
         * found no room either. */
        rkv_file_close(*fd_p);
        *fd_p = -1;
        rkv_file_unlink(from);
    }
    return rc;
}

/* Log gen (header, then what the file held: zeros or a spare's old
 * records), durable with its directory entry before any push is appended
 * to it. The header is written and synced under the file's old name, so
 * that a file named as a log always has its own header. */
static int wal_create(struct rkv_wal *w, uint64_t lineage, uint64_t gen, char *err, size_t err_len)
{
    char path[512], from[512];
    uint8_t hdr[RKV_WAL_HDR_BYTES];
    int fd = -1;
    wal_path(w, gen, path, sizeof(path));
    int reused = wal_take_spare(w, from, sizeof(from), &fd) == 0;
    uint64_t size = 0;
    int rc = reused ? rkv_file_size(fd, &size, from, err, err_len)
                    : wal_fresh(w, from, sizeof(from), &fd, err, err_len);
    if (rc == 0 && reused) /* a spare smaller than what is written ahead */
        rc = wal_zero_fill(fd, size, w->prewrite_bytes, from, err, err_len);
    uint64_t hwm = wal_hwm_for(w, gen, RKV_WAL_HDR_BYTES);
    rkv_wal_encode_header(hdr, w->machine, lineage, gen, w->fingerprint, RKV_WAL_OFF(hwm));
    if (rc == 0 && (rc = rkv_file_pwrite(fd, hdr, sizeof(hdr), 0, from, err, err_len)) == 0 &&
        (rc = rkv_file_datasync(fd, from, err, err_len)) == 0 &&
        (rc = rkv_file_rename(from, path, err, err_len)) == 0)
        rc = rkv_file_sync_dir(w->dir, err, err_len);
    rkv_file_close(fd);
    if (rc == 0)
        w->created_hwm = hwm;
    if (rc == 0 && reused)
        w->n_reused++;
    else if (rc == 0)
        w->n_fresh++;
    return rc;
}

/* Log `path` let go by a checkpoint: kept as a spare while there is room. */
static void wal_retire(struct rkv_wal *w, const char *path)
{
    char spare[512], why[256];
    for (uint32_t k = 0; k < RKV_WAL_SPARES; k++) {
        int fd;
        wal_spare_path(w, k, spare, sizeof(spare));
        if (rkv_file_open(spare, 0, &fd, why, sizeof(why)) == 0) {
            rkv_file_close(fd);
            continue;
        }
        if (rkv_file_rename(path, spare, why, sizeof(why)) == 0)
            return;
        break;
    }
    rkv_file_unlink(path);
}

/* The logs a checkpoint lets go (wal_after_durable): those below `below`,
 * at most RKV_WAL_MAX_CHAIN at a time (the rest at the next checkpoint). */
struct wal_retiring {
    struct rkv_wal *w;
    uint64_t below;
    uint32_t n;
};

static int wal_retire_listed(void *arg, const char *name)
{
    struct wal_retiring *r = arg;
    uint64_t gen = wal_gen_of(r->w, name);
    char path[512];
    if (gen == 0 || gen >= r->below)
        return 0;
    wal_path(r->w, gen, path, sizeof(path));
    wal_retire(r->w, path);
    return ++r->n >= RKV_WAL_MAX_CHAIN;
}

/* With durable_log_prewrite, a spare is ready before the log needs it: the
 * zeros are written here, by the checkpoint task, not by a commit. */
static void wal_stock_spare(struct rkv_wal *w)
{
    char spare[512], from[512], why[256];
    int fd = -1;
    if (!w->prewrite_bytes)
        return;
    if (wal_take_spare(w, spare, sizeof(spare), &fd) == 0) {
        rkv_file_close(fd);
        return;
    }
    int rc = wal_fresh(w, from, sizeof(from), &fd, why, sizeof(why));
    if (rc == 0 && (rc = rkv_file_datasync(fd, from, why, sizeof(why))) == 0) {
        wal_spare_path(w, 0, spare, sizeof(spare));
        rc = rkv_file_rename(from, spare, why, sizeof(why));
    }
    if (rc == 0)
        w->n_fresh++;
    else /* no spare: the next log is made fresh, as without one */
        RKV_LOGW(w->port, "machine %u: no spare log written ahead: %s", w->machine, why);
    if (fd >= 0)
        rkv_file_close(fd);
}

static int wal_before_copy(void *user, uint64_t gen, char *err, size_t err_len)
{
    struct rkv_wal *w = user;
    struct rkv_mach_hdr *h = w->mc->hdr;
    int rc = wal_create(w, h->lineage, gen, err, err_len);
    if (rc < 0)
        return rc;
    w->ckpt_new_hwm = w->created_hwm;
    /* Held until the old log is synced: a group commit in between would
     * sync only the new one and count the old one's tail durable. */
    rkv_live_lock(w->port, &h->wal_sync_lock, &h->wal_sync_holder, h->reader_proc, w->mc->owner);
    w->ckpt_sync_locked = 1;
    return 0;
}

/* Under the copy lock: no push is between its append and its apply, so
 * the snapshot holds exactly the records before the switch. */
static void wal_during_copy(void *user, uint64_t gen)
{
    struct rkv_wal *w = user;
    struct rkv_mach_hdr *h = w->mc->hdr;
    w->ckpt_old_end = atomic_load(&h->wal_end);
    atomic_store(&h->wal_hwm, w->ckpt_new_hwm);
    atomic_store(&h->wal_end, RKV_WAL_LSN(gen, RKV_WAL_HDR_BYTES));
}

static int wal_after_copy(void *user, uint64_t gen, char *err, size_t err_len)
{
    struct rkv_wal *w = user;
    struct rkv_mach_hdr *h = w->mc->hdr;
    uint64_t old = w->ckpt_old_end;
    int rc = 0;
    char path[512];
    if (RKV_WAL_GEN(old) != 0 && atomic_load(&h->wal_durable) < old) {
        rc = wal_file_use(w, &w->sync, RKV_WAL_GEN(old), path, sizeof(path), err, err_len);
        if (rc == 0)
            rc = wal_datasync(w, &w->sync, path, err, err_len);
        else
            wal_fail_at(h, RKV_WAL_GEN(old)); /* its tail is unsynced, and no sync will come */
        if (rc == 0)
            w->n_syncs++;
    }
    if (rc == 0)
        wal_raise(&h->wal_durable, RKV_WAL_LSN(gen, RKV_WAL_HDR_BYTES));
    w->ckpt_sync_locked = 0;
    rkv_live_unlock(&h->wal_sync_lock, &h->wal_sync_holder);
    return rc;
}

/* The log before the page: each chunk of snapshot gen holds the pushes
 * appended to log gen up to its copy LSN, and a snapshot durable before
 * those records were would, after a crash that lost the log's tail, hold
 * pushes that no log record and no client sequence in it accounts for (the
 * sequences were copied at the switch): a client retrying one, never
 * acknowledged, would have it applied twice. So log gen is synced up to its
 * end now (every copy LSN is at or below it: the copies are done), and a
 * failed sync of log gen, now or earlier, fails the snapshot. */
static int wal_before_swap(void *user, uint64_t gen, char *err, size_t err_len)
{
    struct rkv_wal *w = user;
    struct rkv_mach_hdr *h = w->mc->hdr;
    char path[512];
    int rc = 0;
    rkv_live_lock(w->port, &h->wal_sync_lock, &h->wal_sync_holder, h->reader_proc, w->mc->owner);
    /* Logs switch only in a checkpoint, under snap_lock, which this holds. */
    uint64_t cur = atomic_load(&h->wal_end);
    assert(RKV_WAL_GEN(cur) == gen);
    if (atomic_load(&h->wal_failed) >= gen) {
        rc = rkv_errf(err, err_len, -RKV_EIO,
                      "machine %u: a sync of log %llu failed during its checkpoint; its snapshot "
                      "is not used (the next checkpoint's is)",
                      w->machine, (unsigned long long)gen);
    } else if (atomic_load(&h->wal_durable) < cur) {
        rc = wal_file_use(w, &w->sync, gen, path, sizeof(path), err, err_len);
        if (rc == 0)
            rc = wal_datasync(w, &w->sync, path, err, err_len);
        if (rc == 0) {
            w->n_syncs++;
            if (!atomic_load(&h->wal_failed))
                wal_raise(&h->wal_durable, cur);
        }
    }
    rkv_live_unlock(&h->wal_sync_lock, &h->wal_sync_holder);
    return rc;
}

/* Snapshot gen holds every record of the logs before it. */
static void wal_after_durable(void *user, uint64_t gen)
{
    struct rkv_wal *w = user;
    w->n_checkpoints++;
    /* Whatever a failed sync of a log before this snapshot's left unsure
     * is in its copy (every chunk was copied after the switch, the client
     * sequences with it). A failure of log gen or later is not:
     * wal_before_swap refuses such a snapshot, so none is seen here, but
     * the failure stays for the next checkpoint to clear. */
    unsigned failed = atomic_load(&w->mc->hdr->wal_failed);
    while (failed && failed < gen &&
           !atomic_compare_exchange_weak(&w->mc->hdr->wal_failed, &failed, 0))
        ;
    if (w->sync.fd >= 0 && w->sync.gen < gen)
        wal_file_close(&w->sync);
    /* Every log of this machine below gen that the directory holds: a walk
     * down from gen - 1 stopped at the first missing one, and the logs past
     * a gap (an older build's failed checkpoint took the next number: logs
     * G and G + 2) stayed for good. */
    struct wal_retiring r = {.w = w, .below = gen};
    char why[256];
    if (rkv_file_list(w->dir, wal_retire_listed, &r, why, sizeof(why)) < 0)
        RKV_LOGW(w->port, "machine %u: the logs before generation %llu were not let go: %s",
                 w->machine, (unsigned long long)gen, why);
    wal_stock_spare(w);
}

static uint64_t wal_log_gen(void *user)
{
    const struct rkv_wal *w = user;
    return RKV_WAL_GEN(atomic_load(&w->mc->hdr->wal_end));
}

void rkv_wal_hook(struct rkv_wal *w, struct rkv_snap_writer *sw)
{
    sw->hooks = (struct rkv_snap_hooks){.user = w,
                                        .log_gen = wal_log_gen,
                                        .before_copy = wal_before_copy,
                                        .during_copy = wal_during_copy,
                                        .after_copy = wal_after_copy,
                                        .before_swap = wal_before_swap,
                                        .after_durable = wal_after_durable};
}

/* ---- recovery ---- */

#define WAL_BAD(...) rkv_errf(err, err_len, -RKV_EIO, __VA_ARGS__)

/* A log file read through a window, not whole: a log file may be far
 * larger than its records (written ahead with zeros, or a reused spare
 * keeping its full size; durable_log_prewrite accepts up to 1 TiB), and
 * recovery's memory is then the window and the largest record. */
#define WAL_RD_WINDOW (4u << 20)

struct wal_rd {
    int fd;
    const char *path;
    uint64_t size; /* the file's */
    uint8_t *buf;
    size_t cap;
    uint64_t base; /* the file offset of buf[0] */
    size_t len;    /* bytes of buf read */
};

static void wal_rd_close(struct wal_rd *r)
{
    rkv_file_close(r->fd);
    free(r->buf);
    memset(r, 0, sizeof(*r));
    r->fd = -1;
}

/* Opens path (-RKV_ENOTENSOR when absent). */
static int wal_rd_open(struct wal_rd *r, const char *path, char *err, size_t err_len)
{
    memset(r, 0, sizeof(*r));
    r->path = path;
    int rc = rkv_file_open(path, 0, &r->fd, err, err_len);
    if (rc < 0) {
        r->fd = -1;
        return rc;
    }
    if ((rc = rkv_file_size(r->fd, &r->size, path, err, err_len)) < 0)
        wal_rd_close(r);
    return rc;
}

/* Bytes [off, off + n) of the file (n <= size - off), read with what
 * follows up to the window's size; NULL with *rc_p and err on failure. */
static const uint8_t *wal_rd_at(struct wal_rd *r, uint64_t off, uint64_t n, int *rc_p, char *err,
                                size_t err_len)
{
    assert(off <= r->size && n <= r->size - off);
    static const uint8_t none[1];
    if (n == 0) /* an empty file's header: a pointer all the same, nothing read */
        return none;
    if (off >= r->base && off + n <= r->base + r->len)
        return r->buf + (off - r->base);
    uint64_t want = n > WAL_RD_WINDOW ? n : WAL_RD_WINDOW;
    want = want < r->size - off ? want : r->size - off;
    if (want > r->cap) {
        uint8_t *nb = want > SIZE_MAX ? NULL : realloc(r->buf, (size_t)(want ? want : 1));
        if (!nb) {
            *rc_p = rkv_errf(err, err_len, -RKV_ENOMEM,
                             "log %s: no memory to read %llu bytes at byte %llu", r->path,
                             (unsigned long long)want, (unsigned long long)off);
            return NULL;
        }
        r->buf = nb;
        r->cap = (size_t)want;
    }
    r->len = 0;
    if ((*rc_p = rkv_file_pread(r->fd, r->buf, (size_t)want, off, r->path, err, err_len)) < 0)
        return NULL;
    r->base = off;
    r->len = (size_t)want;
    return r->buf;
}

static int wal_check_header(const struct rkv_wal *w, const char *path, const uint8_t *buf,
                            uint64_t len, uint64_t lineage, uint64_t gen, int *stale_p, char *err,
                            size_t err_len)
{
    *stale_p = 0;
    if (len < RKV_WAL_HDR_BYTES)
        return WAL_BAD("log %s: truncated: %llu bytes, shorter than its %u-byte header", path,
                       (unsigned long long)len, RKV_WAL_HDR_BYTES);
    if (rkv_get64(buf) != RKV_WAL_MAGIC)
        return WAL_BAD("log %s: not an rkv log (bad magic)", path);
    if (rkv_get32(buf + 8) == 1 && len > RKV_WAL_HDR_BYTES)
        return WAL_BAD("log %s: format version 1 holding records (written by an older build); "
                       "this build reads version 2: restart the machine's servers with the build "
                       "that wrote it and stop them cleanly (a clean stop checkpoints and leaves "
                       "the log empty), then start this build",
                       path);
    /* A damaged version field read as a version ("format version
     * 16711682"): the header's checksum tells damage from another build. */
    if (rkv_get32(buf + 8) != RKV_WAL_VERSION && rkv_get32(buf + 8) != 1)
        return WAL_BAD("log %s: format version %u, this build reads version %u%s", path,
                       rkv_get32(buf + 8), RKV_WAL_VERSION, rkv_hdr_damage_hint(buf, 60));
    if (rkv_get32(buf + 60) != rkv_crc32c(0, buf, 60))
        return WAL_BAD("log %s: header checksum mismatch (corrupted header)", path);
    if (rkv_get32(buf + 12) != w->machine)
        return WAL_BAD("log %s: holds machine %u, not %u", path, rkv_get32(buf + 12), w->machine);
    if (rkv_get64(buf + 32) != w->fingerprint)
        return WAL_BAD("log %s: written by another cluster configuration", path);
    if (rkv_get64(buf + 24) != gen)
        return WAL_BAD("log %s: says generation %llu, its name %llu", path,
                       (unsigned long long)rkv_get64(buf + 24), (unsigned long long)gen);
    *stale_p = rkv_get64(buf + 16) != lineage;
    return 0;
}

static int wal_all_zero(const uint8_t *p, size_t n)
{
    while (n--)
        if (*p++)
            return 0;
    return 1;
}

/* rkv_wal_refuse_orphans: a log of this machine past generation 1 or with
 * something past its header, found while there is no snapshot. */
struct wal_orphans {
    struct rkv_wal *w;
    char *err;
    size_t err_len;
    int rc;
};

static int wal_orphan_listed(void *arg, const char *name)
{
    struct wal_orphans *o = arg;
    uint64_t gen = wal_gen_of(o->w, name);
    char path[512];
    if (gen == 0)
        return 0;
    wal_path(o->w, gen, path, sizeof(path));
    struct wal_rd rd;
    int rc = wal_rd_open(&rd, path, o->err, o->err_len);
    if (rc == -RKV_ENOTENSOR) /* gone since listed */
        return 0;
    char why[64] = "";
    /* Log 2 is made by the second checkpoint, the first's snapshot
     * complete (a clean stop checkpoints: its log holds only a header). */
    if (rc == 0 && gen >= 2)
        snprintf(why, sizeof(why), "is of generation %llu", (unsigned long long)gen);
    if (rc == 0 && !why[0] && rd.size > RKV_WAL_HDR_BYTES) {
        uint64_t n = rd.size - RKV_WAL_HDR_BYTES;
        n = n < RKV_WAL_REC_BYTES ? n : RKV_WAL_REC_BYTES;
        const uint8_t *b = wal_rd_at(&rd, RKV_WAL_HDR_BYTES, n, &rc, o->err, o->err_len);
        if (b && !wal_all_zero(b, (size_t)n))
            snprintf(why, sizeof(why), "holds records (%llu bytes)", (unsigned long long)rd.size);
    }
    if (why[0])
        rc = rkv_errf(o->err, o->err_len, -RKV_ECONFIG,
                      "durable mode: machine %u has no snapshot in %s, but its log %s %s: the "
                      "snapshot was lost or removed, and a new run would start over in silence "
                      "and overwrite its logs; restore the snapshot, or move the machine's logs "
                      "(rkv-m%u.*.wal) away to start anew",
                      o->w->machine, o->w->dir, path, why, o->w->machine);
    if (rd.fd >= 0)
        wal_rd_close(&rd);
    o->rc = rc;
    return rc < 0;
}

int rkv_wal_refuse_orphans(struct rkv_wal *w, char *err, size_t err_len)
{
    struct wal_orphans o = {.w = w, .err = err, .err_len = err_len};
    int rc = rkv_file_list(w->dir, wal_orphan_listed, &o, err, err_len);
    return rc < 0 ? rc : o.rc;
}

/* Returned by the replay when it stops before a record whose custom op has
 * no handler yet (RKV_WAL_PAUSE_CUSTOM). */
#define WAL_PAUSED 1

/* Checks and applies one record at buf[off..], whose CRCs passed; or
 * WAL_PAUSED, applying nothing, for a custom op that is to wait. */
/* Record rec (at lsn) applied to t, but for the rows the snapshot's copy
 * already holds (copied after it was applied). */
static void wal_apply(struct rkv_wal *w, struct rkv_tensor *t, const struct rkv_handler_table *ht,
                      uint64_t lsn, const uint8_t *rec, struct rkv_wal_replay *r)
{
    uint32_t op = rkv_get32(rec + 48);
    uint64_t count = rkv_get64(rec + 24);
    double param;
    memcpy(&param, rec + 40, 8);
    const uint64_t *ids = (const uint64_t *)(const void *)(rec + RKV_WAL_REC_BYTES);
    const uint8_t *rows = rec + RKV_WAL_REC_BYTES + count * 8;
    const struct rkv_wal_copy *c = w->copies ? &w->copies[t->meta.id] : NULL;
    if (!c || lsn >= c->lsn_max) {
        rkv_shard_push(&t->shard, t, ht, (int)op, param, ids, (size_t)count, rows);
        return;
    }
    for (uint64_t i = 0; i < count; i++) {
        uint64_t k = rkv_pbook_g2l(&t->pb, ids[i]) / c->chunk_rows;
        assert(k < c->n_chunks);
        if (lsn < c->lsn[k]) {
            r->rows_in_copy++;
            continue;
        }
        rkv_shard_push_row(&t->shard, t, ht, (int)op, param, ids[i], rows + i * t->row_bytes);
    }
}

static int wal_replay_one(struct rkv_wal *w, const char *path, uint64_t off, const uint8_t *rec,
                          const struct rkv_tensor_table *tensors,
                          const struct rkv_handler_table *ht, int flags, struct rkv_wal_replay *r,
                          char *err, size_t err_len)
{
    struct rkv_mach_hdr *h = w->mc->hdr;
    uint32_t tid = rkv_get32(rec + 8), client = rkv_get32(rec + 12), op = rkv_get32(rec + 48);
    uint64_t seq = rkv_get64(rec + 16), count = rkv_get64(rec + 24),
             row_bytes = rkv_get64(rec + 32);
    struct rkv_tensor *t = rkv_tensor_at(tensors, tid); /* NULL for 0 and out of range */
    if (!t || !t->mapped)
        return WAL_BAD("log %s: record at byte %llu: tensor id %u is not in the snapshot", path,
                       (unsigned long long)off, tid);
    if (row_bytes != t->row_bytes)
        return WAL_BAD("log %s: record at byte %llu: rows of %llu bytes, tensor '%s' has %zu", path,
                       (unsigned long long)off, (unsigned long long)row_bytes, t->meta.name,
                       t->row_bytes);
    if (client != UINT32_MAX && client >= h->n_clients)
        return WAL_BAD("log %s: record at byte %llu: client %u of %u", path,
                       (unsigned long long)off, client, h->n_clients);
    const uint64_t *ids = (const uint64_t *)(const void *)(rec + RKV_WAL_REC_BYTES);
    char why[200];
    int rc = rkv_tensor_check_ids(t, w->machine, ids, (size_t)count, why, sizeof(why));
    if (rc == 0 && (flags & RKV_WAL_PAUSE_CUSTOM) && op >= RKV_OP_CUSTOM && op < RKV_OP_MAX &&
        !(ht && ht->fn[op])) {
        r->pause_op = op;
        return WAL_PAUSED;
    }
    if (rc == 0 && (rc = rkv_handler_check(ht, (int)op, t->meta.dtype, t->shard.state != NULL)) < 0)
        snprintf(why, sizeof(why),
                 "op %u: %s (register its handler with rkv_server_register_handler before "
                 "rkv_server_run)",
                 op, rkv_strerror(rc));
    if (rc < 0)
        return rkv_errf(err, err_len, rc, "log %s: record at byte %llu: %s", path,
                        (unsigned long long)off, why);
    if (client != UINT32_MAX) {
        struct rkv_mach_client *e = &h->clients[client];
        if ((e->last_seq >> RKV_SEQ_TAG_SHIFT) == (seq >> RKV_SEQ_TAG_SHIFT) &&
            seq <= e->last_seq) {
            r->dups++;
            return 0;
        }
        e->last_seq = seq;
    }
    wal_apply(w, t, ht, rkv_get64(rec + 56), rec, r);
    r->records++;
    r->rows += count;
    return 0;
}

/* How a log's records ended (wal_replay_log). */
struct wal_end {
    uint64_t good;  /* where the complete records end (or the paused one) */
    int torn;       /* at a record of this log, incomplete: an interrupted append */
    char what[160]; /* what is there, for a refusal */
};

/* Whether rec (at least RKV_WAL_REC_BYTES) is the header of a record of
 * this log (its lineage) at lsn: not zeros, not a record of the file's
 * earlier use, not part of one's body, not an append torn in its header. */
static int wal_here(const uint8_t *rec, uint64_t lsn, uint64_t lineage)
{
    return rkv_get64(rec + 56) == lsn && rkv_get32(rec + 72) == (uint32_t)lineage &&
           rkv_get32(rec + 76) == rkv_crc32c(0, rec, 76);
}

/* Walks one log's records from byte `from` up to the first place that holds
 * no complete record of this log. prev_end: where the log before it ended
 * (an LSN; 0: not read), checked against what its records say of it. */
static int wal_replay_log(struct rkv_wal *w, struct wal_rd *rd, uint64_t gen, uint64_t lineage,
                          uint64_t from, uint64_t prev_end, const struct rkv_tensor_table *tensors,
                          const struct rkv_handler_table *ht, int flags, struct rkv_wal_replay *r,
                          struct wal_end *e, char *err, size_t err_len)
{
    const char *path = rd->path;
    uint64_t off = from, len = rd->size;
    int rc = 0;
    e->torn = 0;
    snprintf(e->what, sizeof(e->what), "no record of this log there");
    while (off + RKV_WAL_REC_BYTES <= len) {
        const uint8_t *rec = wal_rd_at(rd, off, RKV_WAL_REC_BYTES, &rc, err, err_len);
        uint64_t rem = len - off;
        if (!rec)
            return rc;
        if (!wal_here(rec, RKV_WAL_LSN(gen, off), lineage))
            break;
        /* A header that checks at its place was written whole: what it says
         * must be possible, whatever the crash. */
        uint64_t count = rkv_get64(rec + 24), row_bytes = rkv_get64(rec + 32), body;
        if (rkv_get32(rec) != RKV_WAL_REC_MAGIC || rkv_get32(rec + 4) != RKV_WAL_REC_PUSH)
            return WAL_BAD("log %s: record at byte %llu: bad magic or unknown type %u", path,
                           (unsigned long long)off, rkv_get32(rec + 4));
        /* Appended while a checkpoint switched logs, before it synced the
         * log before: the record says how far that log was durable, and
         * its records cannot end short of it (cut at a record boundary, or
         * damaged there). */
        uint64_t durable = rkv_get64(rec + 64);
        if (prev_end && RKV_WAL_GEN(durable) == RKV_WAL_GEN(prev_end) && durable > prev_end) {
            char prev[512];
            wal_path(w, RKV_WAL_GEN(prev_end), prev, sizeof(prev));
            return WAL_BAD("log %s: its records end at byte %llu, but the record at byte %llu of "
                           "log %s after it was appended once it was durable up to byte %llu "
                           "(cut short, or damaged: records synced there are gone)",
                           prev, (unsigned long long)RKV_WAL_OFF(prev_end), (unsigned long long)off,
                           path, (unsigned long long)RKV_WAL_OFF(durable));
        }
        if (count == 0 || !rkv_mul_ok(count, 8 + row_bytes, &body) || !rkv_add_ok(body, 7, &body))
            return WAL_BAD("log %s: record at byte %llu: impossible sizes (%llu rows of %llu "
                           "bytes)",
                           path, (unsigned long long)off, (unsigned long long)count,
                           (unsigned long long)row_bytes);
        body &= ~7ull;
        e->torn = 1;
        if (body > rem - RKV_WAL_REC_BYTES) {
            snprintf(e->what, sizeof(e->what), "its %llu-byte body runs past the end of the file",
                     (unsigned long long)body);
            break;
        }
        /* The whole record, in memory at once: as large as the push was. */
        if (!(rec = wal_rd_at(rd, off, RKV_WAL_REC_BYTES + body, &rc, err, err_len)))
            return rc;
        if (rkv_get32(rec + 52) != rkv_crc32c(0, rec + RKV_WAL_REC_BYTES, (size_t)body)) {
            snprintf(e->what, sizeof(e->what), "checksum mismatch over its %llu-byte body",
                     (unsigned long long)body);
            break;
        }
        e->torn = 0;
        rc = wal_replay_one(w, path, off, rec, tensors, ht, flags, r, err, err_len);
        if (rc == WAL_PAUSED)
            e->good = off;
        if (rc != 0)
            return rc;
        off += RKV_WAL_REC_BYTES + body;
    }
    e->good = off;
    return 0;
}

/* How far past a log's records a record of its current use may lie: its
 * header's high-water mark, or the file's end when it has none. */
static uint64_t wal_scan_limit(const struct wal_rd *rd, const uint8_t *hdr)
{
    uint64_t hwm = rkv_get64(hdr + 48);
    return hwm && hwm < rd->size ? hwm : rd->size;
}

/* The records of log gen end at e->good. Refused when a record of this log
 * past it was appended once the log was durable beyond that point: a synced
 * record no longer reads (a crash leaves unsynced ones only). Records of
 * the file's earlier use name other places, and the scan skips them.
 * *past_p: how many records of this log it found past the end. */
static int wal_check_end(struct wal_rd *rd, uint64_t gen, uint64_t lineage, const struct wal_end *e,
                         uint64_t limit, uint64_t *past_p, char *err, size_t err_len)
{
    int rc = 0;
    *past_p = 0;
    for (uint64_t p = e->good + 8; p + RKV_WAL_REC_BYTES <= limit; p += 8) {
        const uint8_t *rec = wal_rd_at(rd, p, RKV_WAL_REC_BYTES, &rc, err, err_len);
        if (!rec)
            return rc;
        if (rkv_get32(rec) != RKV_WAL_REC_MAGIC || rkv_get64(rec + 56) != RKV_WAL_LSN(gen, p) ||
            !wal_here(rec, RKV_WAL_LSN(gen, p), lineage))
            continue;
        (*past_p)++;
        uint64_t durable = rkv_get64(rec + 64);
        if (RKV_WAL_GEN(durable) == gen && RKV_WAL_OFF(durable) > e->good)
            return WAL_BAD("log %s: record at byte %llu: %s (corrupted record: the record at "
                           "byte %llu was appended once the log was durable up to byte %llu)",
                           rd->path, (unsigned long long)e->good, e->what, (unsigned long long)p,
                           (unsigned long long)RKV_WAL_OFF(durable));
    }
    return 0;
}

/* Voids every record of this log past its end e->good (none of them was
 * acknowledged: wal_check_end refused the log otherwise). Left in place,
 * one could read again once new appends fill the gap before it: a crash
 * that kept record B but not record A before it, then a record C of A's
 * size appended and synced where A was, and the next recovery would replay
 * C and then B, which was never acknowledged (an ASSIGN overwriting C's
 * rows). Truncating did this before logs were reused. wal_settle syncs. */
static int wal_void_past(struct rkv_wal *w, struct wal_rd *rd, uint64_t gen, uint64_t lineage,
                         const struct wal_end *e, uint64_t limit, char *err, size_t err_len)
{
    static const uint8_t zeros[RKV_WAL_REC_BYTES];
    int rc = 0;
    uint64_t voided = 0;
    for (uint64_t p = e->good + 8; rc == 0 && p + RKV_WAL_REC_BYTES <= limit; p += 8) {
        const uint8_t *rec = wal_rd_at(rd, p, RKV_WAL_REC_BYTES, &rc, err, err_len);
        if (!rec)
            return rc;
        if (!wal_here(rec, RKV_WAL_LSN(gen, p), lineage))
            continue;
        rc = rkv_file_pwrite(rd->fd, zeros, sizeof(zeros), p, rd->path, err, err_len);
        voided++;
    }
    if (rc == 0 && voided)
        RKV_LOGW(w->port,
                 "log %s: %llu records past its end at byte %llu voided (appends a crash "
                 "interrupted, never acknowledged, unless the file was damaged there)",
                 rd->path, (unsigned long long)voided, (unsigned long long)e->good);
    return rc;
}

/* The log's records end at e->good: made durable as read (the machine may
 * have survived with them in its page cache only), and an interrupted
 * append there voided, so that a later log's records never follow a torn
 * one on disk. */
static int wal_settle(struct rkv_wal *w, const char *path, const struct wal_end *e, char *err,
                      size_t err_len)
{
    int fd;
    int rc = rkv_file_open(path, 0, &fd, err, err_len);
    if (rc < 0)
        return rc;
    rc = e->torn ? wal_void_at(fd, e->good, path, err, err_len)
                 : rkv_file_datasync(fd, path, err, err_len);
    rkv_file_close(fd);
    if (rc == 0 && e->torn)
        RKV_LOGW(w->port,
                 /* Said as what it most likely is, not as certain: damage to
                  * the log's last records reads the same (wal.h), and an
                  * outside tester's flipped tail was called "never
                  * acknowledged" while it held acknowledged pushes. */
                 "log %s: ends at byte %llu with a record that does not read whole (%s): an "
                 "append a crash interrupted, never acknowledged, unless the file was damaged "
                 "there, which reads the same; voided",
                 path, (unsigned long long)e->good, e->what);
    return rc;
}

/* What a log file's start says, read before its replay. */
struct wal_peek {
    uint64_t size;
    int stale;   /* its header is of another lineage's (an older run's) */
    int records; /* it holds a complete record of this log at its start */
};

/* Reads log g's header and first record (path its name): -RKV_ENOTENSOR
 * when absent. */
static int wal_peek(uint32_t machine, uint64_t lineage, uint64_t g, const char *path,
                    struct wal_peek *pk, char *err, size_t err_len)
{
    struct wal_rd rd;
    memset(pk, 0, sizeof(*pk));
    int rc = wal_rd_open(&rd, path, err, err_len);
    if (rc < 0)
        return rc;
    pk->size = rd.size;
    const uint8_t *p = NULL;
    uint64_t at = RKV_WAL_HDR_BYTES, body = 0;
    if (rd.size >= at)
        p = wal_rd_at(&rd, 0, at + (rd.size >= at + RKV_WAL_REC_BYTES ? RKV_WAL_REC_BYTES : 0), &rc,
                      err, err_len);
    /* A damaged header is no older run's: a flipped lineage bit read as
     * "another lineage", and a later log's records were skipped as an
     * older run's, or a missing one reported as such (an outside tester). */
    if (p && rkv_get64(p) == RKV_WAL_MAGIC && rkv_get32(p + 60) != rkv_crc32c(0, p, 60)) {
        uint32_t v = rkv_get32(p + 8);
        rc = v != RKV_WAL_VERSION && v != 1
                 ? WAL_BAD("log %s: format version %u, this build reads version %u%s", path, v,
                           RKV_WAL_VERSION, rkv_hdr_damage_hint(p, 60))
                 : WAL_BAD("log %s: header checksum mismatch (corrupted header)", path);
        wal_rd_close(&rd);
        return rc;
    }
    /* Another machine's log (copied or renamed by hand) is no older run's:
     * its lineage differs too, and it was reported as one (an outside
     * tester swapped two machines' logs). */
    if (p && rkv_get64(p) == RKV_WAL_MAGIC && rkv_get32(p + 12) != machine) {
        rc = WAL_BAD("log %s: holds machine %u, not %u (copied or renamed from another "
                     "machine's?); refused, nothing changed",
                     path, rkv_get32(p + 12), machine);
        wal_rd_close(&rd);
        return rc;
    }
    pk->stale = p && rkv_get64(p) == RKV_WAL_MAGIC && rkv_get64(p + 16) != lineage;
    if (p && !pk->stale && rd.size >= at + RKV_WAL_REC_BYTES &&
        wal_here(p + at, RKV_WAL_LSN(g, at), lineage) &&
        rkv_mul_ok(rkv_get64(p + at + 24), 8 + rkv_get64(p + at + 32), &body) &&
        rkv_add_ok(body, 7, &body) && (body &= ~7ull) <= rd.size - at - RKV_WAL_REC_BYTES &&
        (p = wal_rd_at(&rd, at, RKV_WAL_REC_BYTES + body, &rc, err, err_len)))
        pk->records = rkv_get32(p + 52) == rkv_crc32c(0, p + RKV_WAL_REC_BYTES, (size_t)body);
    wal_rd_close(&rd);
    return rc;
}

/* Whether a log after gen (gen + 1, ... up to the first missing one or one
 * of another lineage) holds a complete record of its own at its start:
 * its name in path then. */
static int wal_later_records(struct rkv_wal *w, uint64_t lineage, uint64_t gen, char *path,
                             size_t path_len, int *found_p, char *err, size_t err_len)
{
    *found_p = 0;
    for (uint64_t g = gen + 1; g <= gen + RKV_WAL_MAX_CHAIN; g++) {
        struct wal_peek pk;
        wal_path(w, g, path, path_len);
        int rc = wal_peek(w->machine, lineage, g, path, &pk, err, err_len);
        if (rc == -RKV_ENOTENSOR)
            return 0;
        if (rc < 0)
            return rc;
        if (pk.stale)
            return 0;
        if ((*found_p = pk.records))
            return 0;
    }
    return 0;
}

/* The generations in [from, from + RKV_WAL_MAX_CHAIN) of the logs of this
 * machine that the directory holds. */
struct wal_listed {
    const struct rkv_wal *w;
    uint64_t from;
    uint8_t bits[(RKV_WAL_MAX_CHAIN + 7) / 8];
};

static int wal_note_listed(void *arg, const char *name)
{
    struct wal_listed *l = arg;
    uint64_t g = wal_gen_of(l->w, name);
    if (g >= l->from && g - l->from < RKV_WAL_MAX_CHAIN)
        l->bits[(g - l->from) / 8] |= (uint8_t)(1u << ((g - l->from) % 8));
    return 0;
}

static int wal_is_listed(const struct wal_listed *l, uint64_t g)
{
    return g >= l->from && g - l->from < RKV_WAL_MAX_CHAIN &&
           (l->bits[(g - l->from) / 8] >> ((g - l->from) % 8) & 1);
}

/* The largest copy LSN of the replay's snapshot (rkv_wal_set_copies), in
 * its own log; 0 when it has none: copied without a log (a build before
 * the log) or of no rows. */
static uint64_t wal_copied_to(const struct rkv_wal *w)
{
    uint64_t max = 0;
    for (uint32_t id = 0; w->copies && id <= RKV_MAX_TENSORS; id++)
        max = w->copies[id].lsn_max > max ? w->copies[id].lsn_max : max;
    return max;
}

/* Before anything is applied or changed: the replay reads logs gen, gen +
 * 1, ... up to the first missing one (or one of an older run's lineage),
 * and a log missing there left the logs after it unread, their pushes
 * lost without a word. Refused: the snapshot's own log missing when the
 * snapshot was copied from it (a copy LSN names it: a checkpoint makes its
 * log, durable, before its copy, and the pushes acknowledged after the
 * copy are in it), and a log of this lineage holding records after the
 * first missing one. Else the snapshot never had log gen (copied by a
 * build before the log, or of no rows), and the recovery makes it. */
static int wal_check_chain(struct rkv_wal *w, uint64_t lineage, uint64_t gen, char *err,
                           size_t err_len)
{
    struct wal_listed l = {.w = w, .from = gen};
    int rc = rkv_file_list(w->dir, wal_note_listed, &l, err, err_len);
    if (rc < 0)
        return rc;
    struct wal_peek pk = {0};
    char path[512], later[512];
    uint64_t g = gen, copied = wal_copied_to(w);
    for (; wal_is_listed(&l, g); g++) {
        wal_path(w, g, path, sizeof(path));
        if ((rc = wal_peek(w->machine, lineage, g, path, &pk, err, err_len)) == -RKV_ENOTENSOR)
            break; /* gone since the listing */
        if (rc < 0)
            return rc;
        if (pk.stale)
            break;
        if (g == gen && copied && pk.size < RKV_WAL_OFF(copied))
            return WAL_BAD("log %s: %llu bytes, but snapshot generation %llu was copied from it "
                           "when its records reached byte %llu (made durable before the "
                           "snapshot was): cut short; refused, nothing changed",
                           path, (unsigned long long)pk.size, (unsigned long long)gen,
                           (unsigned long long)RKV_WAL_OFF(copied));
    }
    wal_path(w, g, path, sizeof(path));
    const char *gone = pk.stale ? "is an older run's (another lineage)" : "is missing";
    if (g == gen && copied)
        return WAL_BAD("log %s %s, but snapshot generation %llu was copied from it (up to byte "
                       "%llu of it): the pushes acknowledged after the snapshot were in it; "
                       "refused, nothing changed",
                       path, gone, (unsigned long long)gen,
                       (unsigned long long)RKV_WAL_OFF(copied));
    for (uint64_t n = g + 1; n < gen + RKV_WAL_MAX_CHAIN; n++) {
        if (!wal_is_listed(&l, n))
            continue;
        wal_path(w, n, later, sizeof(later));
        if ((rc = wal_peek(w->machine, lineage, n, later, &pk, err, err_len)) == -RKV_ENOTENSOR)
            continue;
        if (rc < 0)
            return rc;
        if (pk.records)
            return WAL_BAD("log %s %s, but log %s after it holds records of this lineage: "
                           "the replay would stop before them; refused, nothing changed",
                           path, gone, later);
    }
    return 0;
}

int rkv_wal_recover(struct rkv_wal *w, uint64_t lineage, uint64_t gen,
                    const struct rkv_tensor_table *tensors, const struct rkv_handler_table *ht,
                    int flags, struct rkv_wal_replay *r, char *err, size_t err_len)
{
    assert(gen >= 1);
    uint64_t start = r->paused_lsn; /* a replay resumed where it paused */
    if (!start)
        memset(r, 0, sizeof(*r));
    assert(!start || RKV_WAL_GEN(start) >= gen);
    r->paused_lsn = 0;
    /* Resumed: where the logs before the paused one ended. */
    uint64_t end = start ? r->end_lsn : 0, hwm = 0, copied = wal_copied_to(w);
    char path[512], later[512];
    if (!start) {
        int rc = wal_check_chain(w, lineage, gen, err, err_len);
        if (rc < 0)
            return rc;
        /* The rows are rebuilt from the snapshot and the log: the journal
         * of a push torn in the memory before says nothing of them. */
        atomic_store(&w->mc->hdr->jr_lsn, 0);
    }
    for (uint64_t g = start ? RKV_WAL_GEN(start) : gen; g < gen + RKV_WAL_MAX_CHAIN; g++) {
        struct wal_rd rd;
        wal_path(w, g, path, sizeof(path));
        int rc = wal_rd_open(&rd, path, err, err_len);
        if (rc == -RKV_ENOTENSOR)
            break;
        if (rc < 0)
            return rc;
        uint64_t len = rd.size;
        size_t head = len < RKV_WAL_HDR_BYTES ? (size_t)len : RKV_WAL_HDR_BYTES;
        const uint8_t *hdr = wal_rd_at(&rd, 0, head, &rc, err, err_len);
        if (!hdr) {
            wal_rd_close(&rd);
            return rc;
        }
        int stale;
        if (len < RKV_WAL_HDR_BYTES && wal_all_zero(hdr, head)) {
            /* Left by a build that created logs in place: a checkpoint died
             * creating it, and it never held a record. */
            wal_rd_close(&rd);
            RKV_LOGW(w->port, "log %s: empty (%zu bytes; a checkpoint was interrupted)", path,
                     head);
            if ((rc = wal_create(w, lineage, g, err, err_len)) < 0)
                return rc;
            end = RKV_WAL_LSN(g, RKV_WAL_HDR_BYTES);
            hwm = w->created_hwm;
            continue;
        }
        rc = wal_check_header(w, path, hdr, len, lineage, g, &stale, err, err_len);
        if (rc == 0 && stale) {
            RKV_LOGW(w->port, "log %s: of another lineage (an older run's), ignored", path);
            wal_rd_close(&rd);
            break;
        }
        if (rc == 0 && rkv_get32(hdr + 8) == 1) {
            /* Version 1 without records (a clean stop's): nothing to read. */
            wal_rd_close(&rd);
            RKV_LOGW(w->port,
                     "log %s: format version 1 holding no records, made anew as version %u", path,
                     RKV_WAL_VERSION);
            if ((rc = wal_create(w, lineage, g, err, err_len)) < 0)
                return rc;
            end = RKV_WAL_LSN(g, RKV_WAL_HDR_BYTES);
            hwm = w->created_hwm;
            continue;
        }
        struct wal_end e = {0};
        uint64_t past = 0;
        uint64_t limit = rc == 0 ? wal_scan_limit(&rd, hdr) : 0;
        uint64_t mark = rc == 0 ? rkv_get64(hdr + 48) : 0;
        uint64_t from = start && g == RKV_WAL_GEN(start) ? RKV_WAL_OFF(start) : RKV_WAL_HDR_BYTES;
        if (rc == 0 && from > len)
            rc = WAL_BAD("log %s: shorter (%llu bytes) than where its replay paused (%llu)", path,
                         (unsigned long long)len, (unsigned long long)from);
        if (rc == 0)
            rc = wal_replay_log(w, &rd, g, lineage, from, end, tensors, ht, flags, r, &e, err,
                                err_len);
        if (rc == 0)
            rc = wal_check_end(&rd, g, lineage, &e, limit, &past, err, err_len);
        /* The snapshot's own log ends at its largest copy LSN or past it:
         * its records up to there were synced before the snapshot took its
         * name (wal_before_swap). Refused before anything is voided. */
        if (rc == 0 && g == gen && e.good < RKV_WAL_OFF(copied))
            rc = WAL_BAD("log %s: its records end at byte %llu (%s), but snapshot generation "
                         "%llu was copied from it when they reached byte %llu (made durable "
                         "before the snapshot was): cut short, or damaged",
                         path, (unsigned long long)e.good, e.what, (unsigned long long)gen,
                         (unsigned long long)RKV_WAL_OFF(copied));
        if (rc == 0 && limit > e.good)
            r->scanned += limit - e.good;
        /* An end torn, or with records of this log past it, before a later
         * log that holds records: a record lost in this log was
         * acknowledged (a checkpoint synced this log whole before the
         * later one's records were acknowledged), or the later log's
         * records would apply over a hole. Refused before anything is
         * voided: voided, the evidence was gone and the next restart
         * replayed the later log over the hole without a word. */
        int found = 0;
        if (rc == 0 && (e.torn || past) &&
            (rc = wal_later_records(w, lineage, g, later, sizeof(later), &found, err, err_len)) ==
                0 &&
            found)
            rc = WAL_BAD("log %s: its records end at byte %llu (%s%s), but log %s after it "
                         "holds records",
                         path, (unsigned long long)e.good, e.what,
                         past ? "; records of it lie past there" : "", later);
        /* A second pass over the tail only when there is something to
         * void. */
        if (rc == 0 && past)
            rc = wal_void_past(w, &rd, g, lineage, &e, limit, err, err_len);
        wal_rd_close(&rd);
        if (rc == WAL_PAUSED) {
            /* Nothing after it was applied, and nothing is voided or set
             * up: the resumed replay reads on from here. */
            r->paused_lsn = RKV_WAL_LSN(g, e.good);
            r->end_lsn = end;
            return 0;
        }
        if (rc == 0)
            rc = wal_settle(w, path, &e, err, err_len);
        if (rc < 0)
            return rc;
        r->logs++;
        r->bytes += e.good;
        if (e.torn)
            r->torn++;
        end = RKV_WAL_LSN(g, e.good);
        /* Without a mark (an earlier build's log), the whole file was read
         * and its records past the end voided: the next append sets one. */
        hwm = RKV_WAL_LSN(g, mark > e.good ? mark : e.good);
    }
    if (end == 0) {
        /* A log the snapshot never had (wal_check_chain): made, and said. */
        wal_path(w, gen, path, sizeof(path));
        RKV_LOGW(w->port,
                 "log %s: none of this lineage; snapshot generation %llu holds no place in it "
                 "(copied by a build before the log, or of no rows): made",
                 path, (unsigned long long)gen);
        int rc = wal_create(w, lineage, gen, err, err_len);
        if (rc < 0)
            return rc;
        end = RKV_WAL_LSN(gen, RKV_WAL_HDR_BYTES);
        hwm = w->created_hwm;
    }
    struct rkv_mach_hdr *h = w->mc->hdr;
    atomic_store(&h->wal_hwm, hwm);
    atomic_store(&h->wal_end, end);
    atomic_store(&h->wal_durable, end);
    atomic_store(&h->wal_failed, 0);
    /* The next checkpoint's generation must follow the last log's, or it
     * would recreate (empty) a log holding acknowledged pushes. */
    wal_raise(&h->snap_started, RKV_WAL_GEN(end));
    r->end_lsn = end;
    return 0;
}

/* ---- the durable task ---- */

/* What a checkpoint of the machine writes: a log shorter than that is
 * cheaper to keep (and replay) than to let go, so that checkpoints write
 * at most about as much again as the pushes did. */
static uint64_t wal_shard_bytes(const struct rkv_wal *w)
{
    const struct rkv_mach_hdr *h = w->mc->hdr;
    uint64_t total = 0;
    for (uint32_t id = 1, end = rkv_mach_tensor_end(h); id < end; id++) {
        const struct rkv_mach_tensor *e = &h->tensors[id];
        if (__atomic_load_n(&e->present, __ATOMIC_ACQUIRE))
            total += e->local_rows * e->row_bytes * (e->with_state ? 2 : 1);
    }
    return total;
}

/* Asks for a checkpoint that begins after seen; wait: until one did. */
static int wal_ckpt_ask(struct rkv_wal *w, uint64_t seen, int wait, char *err, size_t err_len)
{
    struct rkv_wal_ckpt *ck = &w->ck;
    const struct rkv_port_ops *o = w->port->ops;
    assert(ck->task);
    o->mutex_lock(ck->mu);
    if (seen > ck->seen)
        ck->seen = seen;
    uint64_t mine = ++ck->asked;
    o->cond_broadcast(ck->cv);
    int rc = 0;
    while (wait && ck->done < mine)
        o->cond_wait(ck->cv, ck->mu, UINT64_MAX);
    if (wait && (rc = ck->rc) < 0)
        rkv_errf(err, err_len, rc, "%s", ck->err);
    o->mutex_unlock(ck->mu);
    return rc;
}

static void wal_ckpt_main(void *arg)
{
    struct rkv_wal *w = arg;
    struct rkv_wal_ckpt *ck = &w->ck;
    const struct rkv_port_ops *o = w->port->ops;
    char why[sizeof(ck->err)];
    o->mutex_lock(ck->mu);
    for (;;) {
        while (ck->done == ck->asked && !ck->stop)
            o->cond_wait(ck->cv, ck->mu, UINT64_MAX);
        if (ck->stop)
            break;
        uint64_t round = ck->asked, seen = ck->seen;
        o->mutex_unlock(ck->mu);
        int rc = rkv_snap_commit(ck->sw, seen, why, sizeof(why));
        if (rc < 0)
            RKV_LOGE(w->port, "checkpoint of machine %u failed: %s", w->machine, why);
        o->mutex_lock(ck->mu);
        ck->done = round;
        ck->rc = rc;
        snprintf(ck->err, sizeof(ck->err), "%s", rc < 0 ? why : "");
        o->cond_broadcast(ck->cv);
    }
    /* Waiters get an answer, not a hang. */
    ck->done = ck->asked;
    ck->rc = -RKV_ESHUTDOWN;
    snprintf(ck->err, sizeof(ck->err), "machine %u: the server is stopping", w->machine);
    o->cond_broadcast(ck->cv);
    o->mutex_unlock(ck->mu);
}

int rkv_wal_start(struct rkv_wal *w, struct rkv_snap_writer *sw, char *err, size_t err_len)
{
    struct rkv_wal_ckpt *ck = &w->ck;
    const struct rkv_port_ops *o = w->port->ops;
    ck->sw = sw;
    int rc = o->mutex_create(w->port, &ck->mu);
    if (rc < 0)
        return rkv_errf(err, err_len, rc, "checkpoint task: no mutex");
    if ((rc = o->cond_create(w->port, &ck->cv)) < 0) {
        o->mutex_destroy(ck->mu);
        ck->mu = NULL;
        return rkv_errf(err, err_len, rc, "checkpoint task: no condition variable");
    }
    if ((rc = o->task_start(w->port, "checkpoint", wal_ckpt_main, w, &ck->task)) < 0) {
        o->cond_destroy(ck->cv);
        o->mutex_destroy(ck->mu);
        ck->mu = NULL;
        ck->cv = NULL;
        return rkv_errf(err, err_len, rc, "cannot start the checkpoint task");
    }
    return 0;
}

void rkv_wal_stop(struct rkv_wal *w)
{
    struct rkv_wal_ckpt *ck = &w->ck;
    const struct rkv_port_ops *o = w->port->ops;
    if (!ck->task)
        return;
    o->mutex_lock(ck->mu);
    ck->stop = 1;
    o->cond_broadcast(ck->cv);
    o->mutex_unlock(ck->mu);
    o->task_join(w->port, ck->task);
    ck->task = NULL;
    o->cond_destroy(ck->cv);
    o->mutex_destroy(ck->mu);
    ck->cv = NULL;
    ck->mu = NULL;
}

int rkv_wal_commit(struct rkv_wal *w, int checkpoint, uint64_t seen, char *err, size_t err_len)
{
    if (atomic_load(&w->mc->hdr->wal_failed) == WAL_LOST)
        return wal_failed(w, err, err_len); /* no checkpoint can vouch for it */
    /* After a failed log sync only a snapshot can vouch for the batch. */
    if (checkpoint || atomic_load(&w->mc->hdr->wal_failed))
        return wal_ckpt_ask(w, seen, 1, err, err_len);
    int rc = rkv_wal_sync(w, err, err_len);
    uint64_t end = atomic_load(&w->mc->hdr->wal_end);
    uint64_t pending = RKV_WAL_OFF(end) - RKV_WAL_HDR_BYTES;
    if (rc < 0 || RKV_WAL_GEN(end) == 0 || pending < w->checkpoint_bytes ||
        pending / RKV_WAL_CHECKPOINT_SHARDS < wal_shard_bytes(w))
        return rc;
    /* Not waited for: the acknowledgements are durable already, and the
     * pushes after them go on while the snapshot is written. What is asked
     * is a checkpoint that lets this log go, i.e. any snapshot of a later
     * generation (snapshot G begins log G): the commits that find the log
     * long while a checkpoint is already on its way (snap_started raised,
     * the log not switched yet) ask for none more. Asking "after the
     * snapshot that began last" asked for a second whole shard's
     * checkpoint right after the first, every time. */
    wal_ckpt_ask(w, RKV_WAL_GEN(end), 0, NULL, 0);
    return 0;
}
