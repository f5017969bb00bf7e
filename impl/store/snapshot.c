/* Machine snapshots: encoding, validation, the group-committing writer and
 * the restore of a restarted machine (format in snapshot.h). */
#include "store/snapshot.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "port/port_file.h"
#include "store/crc32c_tables.h"
#include "util/util.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the snapshot format is little-endian");
_Static_assert(sizeof(struct rkv_wire_tensor) == 104, "wire tensor layout");

/* ---- CRC-32C ---- */

#define CRC32C_POLY 0x82f63b78u /* reflected Castagnoli */

static uint32_t crc_soft(uint32_t crc, const uint8_t *p, size_t n)
{
    /* Built per call (1 KiB, ~2k steps): a file is checked once or twice,
     * and a table built here needs no global. */
    uint32_t table[256];
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        table[i] = c;
    }
    while (n--)
        crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__)
static uint32_t crc_shift(const uint32_t zeros[4][256], uint32_t crc)
{
    return zeros[0][crc & 0xff] ^ zeros[1][(crc >> 8) & 0xff] ^ zeros[2][(crc >> 16) & 0xff] ^
           zeros[3][crc >> 24];
}

/* Three streams of `len` bytes at once, combined: the crc32 instruction
 * has a latency of 3 cycles and a throughput of 1, so one dependent chain
 * runs at a third of what the unit can do (perf: the CRC of a 1 MiB log
 * record was the push path's largest user-space cost). */
__attribute__((target("sse4.2"))) static uint64_t
crc_hw3(uint64_t c0, const uint8_t **p_p, size_t *n_p, size_t len, const uint32_t zeros[4][256])
{
    const uint8_t *p = *p_p;
    size_t n = *n_p;
    for (; n >= 3 * len; p += 3 * len, n -= 3 * len) {
        uint64_t c1 = 0, c2 = 0;
        for (size_t i = 0; i < len; i += 8) {
            uint64_t v0, v1, v2;
            memcpy(&v0, p + i, 8);
            memcpy(&v1, p + len + i, 8);
            memcpy(&v2, p + 2 * len + i, 8);
            c0 = __builtin_ia32_crc32di(c0, v0);
            c1 = __builtin_ia32_crc32di(c1, v1);
            c2 = __builtin_ia32_crc32di(c2, v2);
        }
        c0 = crc_shift(zeros, (uint32_t)c0) ^ (uint32_t)c1;
        c0 = crc_shift(zeros, (uint32_t)c0) ^ (uint32_t)c2;
    }
    *p_p = p;
    *n_p = n;
    return c0;
}

/* SSE4.2 computes the same polynomial at several GB/s: the CRC of a large
 * shard then costs less than writing it. */
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const uint8_t *p, size_t n)
{
    uint64_t c = crc;
    c = crc_hw3(c, &p, &n, CRC32C_LONG, crc32c_long);
    c = crc_hw3(c, &p, &n, CRC32C_SHORT, crc32c_short);
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
    }
    uint32_t c32 = (uint32_t)c;
    while (n--)
        c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32;
}
#endif

uint32_t rkv_crc32c(uint32_t crc, const void *buf, size_t len)
{
    crc = ~crc;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("sse4.2"))
        return ~crc_hw(crc, buf, len);
#endif
    return ~crc_soft(crc, buf, len);
}

/* a x b modulo the polynomial, reflected (bit 31 is x^0), as zlib's
 * multmodp. */
static uint32_t crc_mult(uint32_t a, uint32_t b)
{
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0)
                break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ CRC32C_POLY : b >> 1;
    }
    return p;
}

/* Appending len2 bytes multiplies the CRC register by x^(8 len2): crc2 is
 * what those bytes give from a zero register, so CRC(A B) is crc1 times
 * that power plus crc2 (the conditioning ~ cancels out). */
uint32_t rkv_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2)
{
    uint32_t power = 1u << 30; /* x^1, squared into x^(2^k) as k grows */
    uint32_t p = 1u << 31;     /* x^0 */
    for (uint64_t n = len2 * 8; n; n >>= 1) {
        if (n & 1)
            p = crc_mult(power, p);
        power = crc_mult(power, power);
    }
    return crc_mult(p, crc1) ^ crc2;
}

/* ---- encoding ---- */

static uint8_t *put_desc(uint8_t *p, const struct rkv_wire_tensor *d)
{
    memcpy(p, d->name, sizeof(d->name));
    p += sizeof(d->name);
    p = rkv_put32(p, d->dtype);
    p = rkv_put32(p, d->policy);
    p = rkv_put32(p, d->row_len);
    p = rkv_put32(p, d->init);
    p = rkv_put64(p, d->rows);
    p = rkv_put64(p, d->init_seed);
    p = rkv_put32(p, d->with_state);
    return rkv_put32(p, d->book_len);
}

static void get_desc(const uint8_t *p, struct rkv_wire_tensor *d)
{
    memcpy(d->name, p, sizeof(d->name));
    d->name[RKV_NAME_MAX] = 0;
    p += sizeof(d->name);
    d->dtype = rkv_get32(p);
    d->policy = rkv_get32(p + 4);
    d->row_len = rkv_get32(p + 8);
    d->init = rkv_get32(p + 12);
    d->rows = rkv_get64(p + 16);
    d->init_seed = rkv_get64(p + 24);
    d->with_state = rkv_get32(p + 32);
    d->book_len = rkv_get32(p + 36);
}

static uint32_t snap_version(const struct rkv_snap *s)
{
    return s->version ? s->version : RKV_SNAP_VERSION;
}

/* Rows per chunk as written: 0 in the struct is one chunk. */
static uint64_t snap_chunk_rows(const struct rkv_snap_tensor *t)
{
    return t->chunk_rows ? t->chunk_rows : t->local_rows ? t->local_rows : 1;
}

uint64_t rkv_snap_chunks(const struct rkv_snap_tensor *t)
{
    uint64_t cr = snap_chunk_rows(t);
    return t->local_rows / cr + (t->local_rows % cr != 0);
}

/* Bytes of one tensor record (version v) with its fixed part; 0 on
 * overflow. */
static int snap_tensor_bytes(const struct rkv_snap_tensor *t, uint32_t v, uint64_t *bytes_p)
{
    uint64_t book, data, total, local = 0, lsns = 0;
    if (t->has_local && !rkv_mul_ok(t->book_len, 8, &local))
        return 0;
    /* A file's rows of 0 bytes would let a huge row count through the
     * products below: the copy LSNs' count (one per chunk) is checked on
     * its own. */
    if (v >= 2 && !rkv_mul_ok(rkv_snap_chunks(t), 8, &lsns))
        return 0;
    if (!rkv_mul_ok(t->book_len, 4, &book) || !rkv_add_ok(book, 7, &book) ||
        !rkv_add_ok(book & ~7ull, local, &book) || !rkv_add_ok(book, 7, &book) ||
        !rkv_mul_ok(t->local_rows, t->row_bytes, &data) ||
        !rkv_mul_ok(data, t->with_state ? 2 : 1, &total) ||
        !rkv_add_ok(total, book & ~7ull, &total) || !rkv_add_ok(total, lsns, &total) ||
        !rkv_add_ok(total, v >= 2 ? RKV_SNAP_TENSOR_BYTES_V2 : RKV_SNAP_TENSOR_BYTES, &total))
        return 0;
    *bytes_p = total;
    return 1;
}

int rkv_snap_size(const struct rkv_snap *s, uint64_t *bytes_p)
{
    uint64_t total = RKV_SNAP_HDR_BYTES + (uint64_t)s->n_clients * 8, one;
    for (uint32_t i = 0; i < s->n_tensors; i++)
        if (!snap_tensor_bytes(&s->tensors[i], snap_version(s), &one) ||
            !rkv_add_ok(total, one, &total))
            return -RKV_ELIMIT;
    *bytes_p = total;
    return 0;
}

/* A tensor record's fixed part (version v) into p; returns its end. */
static uint8_t *snap_put_tensor(uint8_t *p, const struct rkv_snap_tensor *t, uint32_t v)
{
    p = rkv_put32(p, t->id);
    p = rkv_put32(p, t->with_state | (t->has_local ? 2u : 0u));
    p = rkv_put64(p, t->local_rows);
    p = rkv_put64(p, t->row_bytes);
    p = rkv_put64(p, t->book_len);
    p = put_desc(p, &t->desc);
    return v >= 2 ? rkv_put64(p, snap_chunk_rows(t)) : p;
}

/* The header but for the CRCs (rkv_snap_seal, or the writer's). */
static void snap_put_header(uint8_t *h, const struct rkv_snap *s, uint64_t body_bytes)
{
    h = rkv_put64(h, RKV_SNAP_MAGIC);
    h = rkv_put32(h, snap_version(s));
    h = rkv_put32(h, s->machine);
    h = rkv_put64(h, s->lineage);
    h = rkv_put64(h, s->generation);
    h = rkv_put64(h, s->wall_ns);
    h = rkv_put64(h, s->fingerprint);
    h = rkv_put32(h, s->n_tensors);
    h = rkv_put32(h, s->n_clients);
    h = rkv_put64(h, body_bytes);
    memset(h, 0, 8);
}

void rkv_snap_encode(const struct rkv_snap *s, uint8_t *out)
{
    uint32_t v = snap_version(s);
    uint8_t *p = out + RKV_SNAP_HDR_BYTES;
    memcpy(p, s->last_seq, (size_t)s->n_clients * 8);
    p += (size_t)s->n_clients * 8;
    for (uint32_t i = 0; i < s->n_tensors; i++) {
        const struct rkv_snap_tensor *t = &s->tensors[i];
        p = snap_put_tensor(p, t, v);
        size_t book = (size_t)t->book_len * 4, data = (size_t)(t->local_rows * t->row_bytes);
        if (book)
            memcpy(p, t->book, book);
        memset(p + book, 0, ((book + 7) & ~(size_t)7) - book);
        p += (book + 7) & ~(size_t)7;
        if (t->has_local) {
            memcpy(p, t->local, (size_t)t->book_len * 8);
            p += (size_t)t->book_len * 8;
        }
        memcpy(p, t->data, data);
        p += data;
        if (t->with_state) {
            memcpy(p, t->state, data);
            p += data;
        }
        size_t lsns = v >= 2 ? (size_t)rkv_snap_chunks(t) * 8 : 0;
        if (lsns && t->copy_lsn)
            memcpy(p, t->copy_lsn, lsns);
        else
            memset(p, 0, lsns);
        p += lsns;
    }
    snap_put_header(out, s, (uint64_t)(p - out) - RKV_SNAP_HDR_BYTES);
}

void rkv_snap_seal(uint8_t *buf, size_t len)
{
    assert(len >= RKV_SNAP_HDR_BYTES);
    rkv_put32(buf + 64, rkv_crc32c(0, buf + RKV_SNAP_HDR_BYTES, len - RKV_SNAP_HDR_BYTES));
    rkv_put32(buf + 68, rkv_crc32c(0, buf, 68));
}

/* ---- decoding ---- */

void rkv_snap_file_name(char *buf, size_t len, uint32_t machine)
{
    snprintf(buf, len, "rkv-m%u.snap", machine);
}

#define SNAP_BAD(...) rkv_errf(err, err_len, -RKV_EIO, __VA_ARGS__)

static int snap_decode_tensors(const char *path, const uint8_t *p, const uint8_t *end,
                               struct rkv_snap *s, char *err, size_t err_len)
{
    uint32_t v = s->version;
    size_t fixed = v >= 2 ? RKV_SNAP_TENSOR_BYTES_V2 : RKV_SNAP_TENSOR_BYTES;
    for (uint32_t i = 0; i < s->n_tensors; i++) {
        struct rkv_snap_tensor *t = &s->tensors[i];
        if ((size_t)(end - p) < fixed)
            return SNAP_BAD("snapshot %s: tensor record %u runs past the end", path, i);
        t->id = rkv_get32(p);
        uint32_t flags = rkv_get32(p + 4);
        t->with_state = flags & 1u;
        t->has_local = (flags >> 1) & 1u;
        t->local_rows = rkv_get64(p + 8);
        t->row_bytes = rkv_get64(p + 16);
        t->book_len = rkv_get64(p + 24);
        get_desc(p + 32, &t->desc);
        t->chunk_rows = v >= 2 ? rkv_get64(p + RKV_SNAP_TENSOR_BYTES) : 0;
        p += fixed;
        uint64_t rest;
        if (t->id == 0 || t->id > RKV_MAX_TENSORS || flags > 3 || (v >= 2 && !t->chunk_rows) ||
            (t->has_local && t->book_len == 0) || t->book_len != t->desc.book_len ||
            !snap_tensor_bytes(t, v, &rest) || rest - fixed > (uint64_t)(end - p))
            return SNAP_BAD("snapshot %s: tensor record %u (id %u, '%s') has impossible sizes",
                            path, i, t->id, t->desc.name);
        for (uint32_t j = 0; j < i; j++)
            if (s->tensors[j].id == t->id)
                return SNAP_BAD("snapshot %s: tensor id %u appears twice", path, t->id);
        size_t book = (size_t)t->book_len * 4, data = (size_t)(t->local_rows * t->row_bytes);
        t->book = book ? (const uint32_t *)(const void *)p : NULL;
        p += (book + 7) & ~(size_t)7;
        t->local = t->has_local ? p : NULL;
        p += t->has_local ? (size_t)t->book_len * 8 : 0;
        t->data = p;
        p += data;
        t->state = t->with_state ? p : NULL;
        p += t->with_state ? data : 0;
        t->copy_lsn = v >= 2 ? p : NULL;
        p += v >= 2 ? (size_t)rkv_snap_chunks(t) * 8 : 0;
    }
    if (p != end)
        return SNAP_BAD("snapshot %s: %zu bytes after the last tensor", path, (size_t)(end - p));
    return 0;
}

const char *rkv_hdr_damage_hint(const uint8_t *buf, size_t crc_off)
{
    return rkv_get32(buf + crc_off) != rkv_crc32c(0, buf, crc_off)
               ? ", and the header's checksum (where this build keeps it) does not match: a "
                 "damaged header, unless another build's file has another layout"
               : "";
}

int rkv_snap_decode(const char *path, const uint8_t *buf, size_t len, uint32_t machine,
                    struct rkv_snap *s, char *err, size_t err_len)
{
    memset(s, 0, sizeof(*s));
    if (len < RKV_SNAP_HDR_BYTES)
        return SNAP_BAD("snapshot %s: truncated: %zu bytes, shorter than its %u-byte header", path,
                        len, RKV_SNAP_HDR_BYTES);
    if (rkv_get64(buf) != RKV_SNAP_MAGIC)
        return SNAP_BAD("snapshot %s: not an rkv snapshot (bad magic)", path);
    if (rkv_get32(buf + 8) != RKV_SNAP_VERSION && rkv_get32(buf + 8) != 1)
        return SNAP_BAD("snapshot %s: format version %u, this build reads versions 1 to %u%s", path,
                        rkv_get32(buf + 8), RKV_SNAP_VERSION, rkv_hdr_damage_hint(buf, 68));
    if (rkv_get32(buf + 68) != rkv_crc32c(0, buf, 68))
        return SNAP_BAD("snapshot %s: header checksum mismatch (corrupted header)", path);
    uint64_t body = rkv_get64(buf + 56);
    if (body != len - RKV_SNAP_HDR_BYTES)
        return SNAP_BAD("snapshot %s: %s: %zu bytes, the header says %llu (torn write?)", path,
                        body > len - RKV_SNAP_HDR_BYTES ? "truncated" : "trailing bytes", len,
                        (unsigned long long)(body + RKV_SNAP_HDR_BYTES));
    if (rkv_get32(buf + 64) != rkv_crc32c(0, buf + RKV_SNAP_HDR_BYTES, (size_t)body))
        return SNAP_BAD("snapshot %s: checksum mismatch over its %llu-byte body (corrupted data)",
                        path, (unsigned long long)body);
    s->version = rkv_get32(buf + 8);
    s->machine = rkv_get32(buf + 12);
    s->lineage = rkv_get64(buf + 16);
    s->generation = rkv_get64(buf + 24);
    s->wall_ns = rkv_get64(buf + 32);
    s->fingerprint = rkv_get64(buf + 40);
    s->n_tensors = rkv_get32(buf + 48);
    s->n_clients = rkv_get32(buf + 52);
    if (machine != UINT32_MAX && s->machine != machine)
        return SNAP_BAD("snapshot %s: holds machine %u, not %u", path, s->machine, machine);
    const uint8_t *p = buf + RKV_SNAP_HDR_BYTES, *end = buf + len;
    if (s->n_tensors > RKV_MAX_TENSORS || (uint64_t)s->n_clients * 8 > (uint64_t)(end - p))
        return SNAP_BAD("snapshot %s: %u tensors / %u clients do not fit", path, s->n_tensors,
                        s->n_clients);
    s->last_seq = (const uint64_t *)(const void *)p;
    p += (size_t)s->n_clients * 8;
    s->tensors = calloc(s->n_tensors ? s->n_tensors : 1, sizeof(*s->tensors));
    if (!s->tensors)
        return rkv_errf(err, err_len, -RKV_ENOMEM, "snapshot %s: out of memory", path);
    int rc = snap_decode_tensors(path, p, end, s, err, err_len);
    if (rc < 0) {
        free(s->tensors);
        s->tensors = NULL;
    }
    return rc;
}

int rkv_snap_read(const char *path, uint32_t machine, struct rkv_snap *s, char *err, size_t err_len)
{
    uint8_t *buf;
    size_t len;
    int rc = rkv_file_read(path, &buf, &len, err, err_len);
    if (rc < 0)
        return rc;
    if ((rc = rkv_snap_decode(path, buf, len, machine, s, err, err_len)) < 0) {
        free(buf);
        return rc;
    }
    s->file = buf;
    s->file_bytes = len;
    return 0;
}

void rkv_snap_free(struct rkv_snap *s)
{
    free(s->tensors);
    free(s->file);
    memset(s, 0, sizeof(*s));
}

/* ---- writing ---- */

void rkv_snap_writer_init(struct rkv_snap_writer *w, struct rkv_port *port, struct rkv_mach *mc,
                          const struct rkv_config *cfg, uint32_t server_id)
{
    memset(w, 0, sizeof(*w));
    w->port = port;
    w->mc = mc;
    w->machine = cfg->machine_id;
    w->fingerprint = rkv_cfg_fingerprint(cfg);
    snprintf(w->dir, sizeof(w->dir), "%s", cfg->durable_dir);
    snprintf(w->prefix, sizeof(w->prefix), "%s", cfg->shm_prefix);
    w->prewrite = cfg->durable_log_prewrite != 0;
    rkv_snap_file_name(w->name, sizeof(w->name), cfg->machine_id);
    /* Per server: a server killed mid-write leaves its own temp file, which
     * its next write overwrites; after a write, the temp file holds the
     * previous snapshot, whose blocks the next write reuses. */
    snprintf(w->tmp, sizeof(w->tmp), "%s.tmp%u", w->name, server_id);
}

/* Maps tensor id's segment (published as e) unless it is mapped. */
static int snap_map(struct rkv_snap_writer *w, uint32_t id, const struct rkv_mach_tensor *e,
                    char *err, size_t err_len)
{
    struct rkv_shard *sh = &w->maps[id];
    if (sh->hdr)
        return 0;
    char name[96];
    rkv_shard_name(name, sizeof(name), w->prefix, w->machine, id);
    return rkv_shard_map_local(w->port, name, e->local_rows, (size_t)e->row_bytes,
                               (int)e->with_state, e->desc.book_len, (int)e->has_local, 0, sh, err,
                               err_len);
}

void rkv_snap_writer_map(struct rkv_snap_writer *w)
{
    struct rkv_mach_hdr *h = w->mc->hdr;
    char err[256];
    /* A first start attaches to the machine at its first tensor. */
    for (uint32_t id = 1, end = h ? rkv_mach_tensor_end(h) : 0; id < end; id++)
        if (__atomic_load_n(&h->tensors[id].present, __ATOMIC_ACQUIRE) &&
            snap_map(w, id, &h->tensors[id], err, sizeof(err)) < 0)
            RKV_LOGW(w->port, "snapshot of machine %u: %s (mapped again at the next one)",
                     w->machine, err);
}

/* Lists the machine's published tensors, mapping segments seen the first time. */
static int snap_list(struct rkv_snap_writer *w, struct rkv_snap_tensor *ts, uint32_t *n_p,
                     char *err, size_t err_len)
{
    struct rkv_mach_hdr *h = w->mc->hdr;
    uint32_t n = 0;
    for (uint32_t id = 1, end = rkv_mach_tensor_end(h); id < end; id++) {
        const struct rkv_mach_tensor *e = &h->tensors[id];
        if (!__atomic_load_n(&e->present, __ATOMIC_ACQUIRE))
            continue;
        struct rkv_shard *sh = &w->maps[id];
        int rc = snap_map(w, id, e, err, err_len);
        if (rc < 0)
            return rc;
        ts[n++] = (struct rkv_snap_tensor){.id = id,
                                           .with_state = e->with_state,
                                           .local_rows = e->local_rows,
                                           .row_bytes = e->row_bytes,
                                           .book_len = e->desc.book_len,
                                           .desc = e->desc,
                                           .book = sh->book,
                                           .has_local = sh->local != NULL,
                                           .local = (const uint8_t *)sh->local,
                                           .data = sh->data,
                                           .state = sh->state};
    }
    *n_p = n;
    return 0;
}

/* Bytes of a snapshot written at a time, and how many of those may wait
 * for the disk at once. */
#define SNAP_CHUNK_BYTES (8u << 20)
#define SNAP_CHUNKS_QUEUED 4u

/* buf[0..len) (NULL: zeros) written at byte `from` of fd in chunks, each
 * handed to the disk at once and at most SNAP_CHUNKS_QUEUED of them
 * waiting for it. */
static int snap_pwrite_paced(int fd, const uint8_t *buf, uint64_t from, uint64_t len,
                             const char *path, char *err, size_t err_len)
{
    uint8_t *zeros = NULL;
    if (!buf && !(zeros = calloc(1, SNAP_CHUNK_BYTES)))
        return rkv_errf(err, err_len, -RKV_ENOMEM, "%s: no memory to write zeros ahead", path);
    int rc = 0;
    for (uint64_t off = 0, i = 0; rc == 0 && off < len; off += SNAP_CHUNK_BYTES, i++) {
        size_t n = len - off < SNAP_CHUNK_BYTES ? (size_t)(len - off) : SNAP_CHUNK_BYTES;
        if ((rc = rkv_file_pwrite(fd, buf ? buf + off : zeros, n, from + off, path, err, err_len)) <
            0)
            break;
        rkv_file_writeback(fd, from + off, n);
        if (i >= SNAP_CHUNKS_QUEUED)
            rkv_file_writeback_wait(fd, from + off - SNAP_CHUNKS_QUEUED * SNAP_CHUNK_BYTES,
                                    SNAP_CHUNK_BYTES);
    }
    free(zeros);
    return rc;
}

/* A snapshot's writes, handed to the disk as they are made and at most
 * SNAP_CHUNKS_QUEUED x SNAP_CHUNK_BYTES of them waiting for it, so that a
 * group commit's fdatasync waits behind a few chunks, not the whole shard.
 * The CRC of the body runs along in file order. */
#define SNAP_RING 64u
struct snap_out {
    int fd;
    const char *path;
    uint64_t off[SNAP_RING], len[SNAP_RING];
    uint32_t head, n;
    uint64_t queued;
};

static int snap_out_write(struct snap_out *o, const void *buf, uint64_t len, uint64_t at, char *err,
                          size_t err_len)
{
    const uint8_t *b = buf;
    for (uint64_t done = 0; done < len;) {
        size_t n = len - done < SNAP_CHUNK_BYTES ? (size_t)(len - done) : SNAP_CHUNK_BYTES;
        int rc = rkv_file_pwrite(o->fd, b + done, n, at + done, o->path, err, err_len);
        if (rc < 0)
            return rc;
        rkv_file_writeback(o->fd, at + done, n);
        uint32_t k = (o->head + o->n) % SNAP_RING;
        o->off[k] = at + done;
        o->len[k] = n;
        o->n++;
        o->queued += n;
        while (o->n == SNAP_RING || o->queued > SNAP_CHUNKS_QUEUED * SNAP_CHUNK_BYTES) {
            rkv_file_writeback_wait(o->fd, o->off[o->head], o->len[o->head]);
            o->queued -= o->len[o->head];
            o->head = (o->head + 1) % SNAP_RING;
            o->n--;
        }
        done += n;
    }
    return 0;
}

/* The snapshot is written over the blocks of the snapshot before it: the
 * temp file is the previous snapshot, which the swap (rkv_file_swap_in)
 * left under the temp name. On this kind of disk a write into blocks
 * already written runs several times faster than one that allocates (dd
 * of 2 GiB with fdatasync, here: 0.30 GB/s into a new file, 3.0 GB/s over
 * the same file's blocks), as with the log's spares (wal.h); a 1 GiB
 * shard's checkpoint took 7-10 s, its log's group commits waiting behind
 * it. The temp file never is the snapshot's file: a swap exchanges the two
 * whole, so a crash leaves either the old or the new file under the
 * snapshot's name. Opened (and cut to len when longer: the decoder refuses
 * trailing bytes) before the copy begins. */
static int snap_file_open(struct snap_out *o, struct rkv_snap_writer *w, char *tmp, size_t len,
                          uint64_t bytes, char *err, size_t err_len)
{
    uint64_t size;
    memset(o, 0, sizeof(*o));
    snprintf(tmp, len, "%s/%s", w->dir, w->tmp);
    o->path = tmp;
    int rc = rkv_file_open(tmp, 1, &o->fd, err, err_len);
    if (rc < 0)
        return rc;
    rc = rkv_file_size(o->fd, &size, tmp, err, err_len);
    if (rc == 0 && size > bytes)
        rc = rkv_file_truncate(o->fd, bytes, tmp, err, err_len);
    if (rc < 0)
        rkv_file_close(o->fd);
    return rc;
}

/* Written whole: synced, swapped in, the directory synced. */
static int snap_file_finish(struct rkv_snap_writer *w, struct snap_out *o, uint32_t *fsyncs_p,
                            char *err, size_t err_len)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", w->dir, w->name);
    int rc = rkv_file_datasync(o->fd, o->path, err, err_len);
    if (rc == 0)
        (*fsyncs_p)++;
    rkv_file_close(o->fd);
    if (rc == 0)
        rc = rkv_file_swap_in(o->path, path, err, err_len);
    if (rc == 0 && (rc = rkv_file_sync_dir(w->dir, err, err_len)) == 0)
        (*fsyncs_p)++;
    return rc;
}

/* With durable_log_prewrite, the temp file a snapshot is written into is
 * made ready ahead, as the log's spare is (wal.h), when the snapshot just
 * written had none: zeros as far as that snapshot, so that even the next
 * snapshot overwrites blocks (the first after a tensor is created would
 * allocate a whole shard's). Best effort: without it the next snapshot
 * allocates, as without prewrite. */
static void snap_stock_spare(struct rkv_snap_writer *w, uint64_t bytes)
{
    char tmp[512], why[256];
    uint64_t size = 0;
    int fd;
    if (!w->prewrite)
        return;
    snprintf(tmp, sizeof(tmp), "%s/%s", w->dir, w->tmp);
    int rc = rkv_file_open(tmp, 1, &fd, why, sizeof(why));
    if (rc < 0)
        goto out;
    rc = rkv_file_size(fd, &size, tmp, why, sizeof(why));
    if (rc == 0 && size < bytes &&
        (rc = snap_pwrite_paced(fd, NULL, size, bytes - size, tmp, why, sizeof(why))) == 0)
        rc = rkv_file_datasync(fd, tmp, why, sizeof(why));
    rkv_file_close(fd);
out:
    if (rc < 0)
        RKV_LOGW(w->port, "machine %u: no snapshot file written ahead: %s", w->machine, why);
}

/* Room for one chunk's copy and one tensor's copy LSNs. */
static int snap_reserve(struct rkv_snap_writer *w, const struct rkv_snap *s, char *err,
                        size_t err_len)
{
    uint64_t buf = RKV_SNAP_TENSOR_BYTES_V2, lsns = 8;
    for (uint32_t i = 0; i < s->n_tensors; i++) {
        const struct rkv_snap_tensor *t = &s->tensors[i];
        uint64_t one = t->chunk_rows * t->row_bytes * (t->with_state ? 2 : 1);
        buf = one > buf ? one : buf;
        lsns = rkv_snap_chunks(t) * 8 > lsns ? rkv_snap_chunks(t) * 8 : lsns;
    }
    if (buf > w->cap) {
        uint8_t *nb = realloc(w->buf, (size_t)buf);
        if (!nb)
            return rkv_errf(err, err_len, -RKV_ENOMEM, "snapshot: no memory for %llu bytes",
                            (unsigned long long)buf);
        w->buf = nb;
        w->cap = (size_t)buf;
    }
    if (lsns > w->lsn_cap) {
        uint8_t *nl = realloc(w->lsns, (size_t)lsns);
        if (!nl)
            return rkv_errf(err, err_len, -RKV_ENOMEM, "snapshot: no memory for %llu bytes",
                            (unsigned long long)lsns);
        w->lsns = nl;
        w->lsn_cap = (size_t)lsns;
    }
    return 0;
}

/* Under the copy lock: a push a dead server was applying and nobody has
 * finished yet (the apply journal, wal.c) is in the rows in part, and a
 * copy of them would keep that part for good (its record lies before the
 * copy's LSN, so a replay would not apply it again). The checkpoint waits
 * for the next one, after the push is finished. */
static int snap_torn_push(struct rkv_snap_writer *w, char *err, size_t err_len)
{
    if (!atomic_load(&w->mc->hdr->jr_lsn))
        return 0;
    return rkv_errf(err, err_len, -RKV_EIO,
                    "machine %u: a server died applying a push that is not finished yet (the "
                    "next push on the machine, or that server's restart, finishes it): no "
                    "checkpoint until then",
                    w->machine);
}

/* Tensor t's rows and state, chunk by chunk, each copied under the copy
 * lock with the log's end then (its copy LSN; snapshot.h) and written
 * outside it; then the copy LSNs. at: where the rows go; *crc_p the body's
 * CRC so far. Rows and state lie apart in the file: their CRCs run apart
 * and are combined. */
static int snap_write_rows(struct rkv_snap_writer *w, struct snap_out *o,
                           const struct rkv_snap_tensor *t, uint64_t at, uint32_t *crc_p, char *err,
                           size_t err_len)
{
    const struct rkv_mach_hdr *h = w->mc->hdr;
    uint64_t rb = t->row_bytes, data = t->local_rows * rb, n_chunks = rkv_snap_chunks(t);
    assert(!t->with_state || t->state);
    uint64_t state_at = at + data, lsn_at = state_at + (t->with_state ? data : 0);
    uint32_t crc_data = 0, crc_state = 0;
    int rc = 0;
    for (uint64_t k = 0; k < n_chunks && rc == 0; k++) {
        uint64_t first = k * t->chunk_rows, rows = t->local_rows - first;
        rows = rows < t->chunk_rows ? rows : t->chunk_rows;
        size_t bytes = (size_t)(rows * rb);
        rkv_mach_copy_begin(w->mc);
        if ((rc = snap_torn_push(w, err, err_len)) < 0) {
            rkv_mach_copy_end(w->mc);
            break;
        }
        rkv_put64(w->lsns + k * 8, atomic_load(&h->wal_end));
        memcpy(w->buf, t->data + first * rb, bytes);
        if (t->state)
            memcpy(w->buf + bytes, t->state + first * rb, bytes);
        rkv_mach_copy_end(w->mc);
        crc_data = rkv_crc32c(crc_data, w->buf, bytes);
        rc = snap_out_write(o, w->buf, bytes, at + first * rb, err, err_len);
        if (rc == 0 && t->state) {
            crc_state = rkv_crc32c(crc_state, w->buf + bytes, bytes);
            rc = snap_out_write(o, w->buf + bytes, bytes, state_at + first * rb, err, err_len);
        }
    }
    if (rc < 0)
        return rc;
    *crc_p = rkv_crc32c_combine(*crc_p, crc_data, data);
    if (t->state)
        *crc_p = rkv_crc32c_combine(*crc_p, crc_state, data);
    *crc_p = rkv_crc32c(*crc_p, w->lsns, (size_t)n_chunks * 8);
    return snap_out_write(o, w->lsns, n_chunks * 8, lsn_at, err, err_len);
}

/* The body after the client sequences: each tensor's fixed part, book and
 * local index (fixed once the tensor is published), then its rows. */
static int snap_write_tensors(struct rkv_snap_writer *w, struct snap_out *o,
                              const struct rkv_snap *s, uint64_t at, uint32_t *crc_p, char *err,
                              size_t err_len)
{
    static const uint8_t pad[8];
    int rc = 0;
    for (uint32_t i = 0; i < s->n_tensors && rc == 0; i++) {
        const struct rkv_snap_tensor *t = &s->tensors[i];
        uint8_t head[RKV_SNAP_TENSOR_BYTES_V2];
        size_t book = (size_t)t->book_len * 4, book_pad = ((book + 7) & ~(size_t)7) - book;
        size_t local = t->has_local ? (size_t)t->book_len * 8 : 0;
        snap_put_tensor(head, t, RKV_SNAP_VERSION);
        *crc_p = rkv_crc32c(*crc_p, head, sizeof(head));
        rc = snap_out_write(o, head, sizeof(head), at, err, err_len);
        at += sizeof(head);
        if (rc == 0 && book) {
            *crc_p = rkv_crc32c(*crc_p, t->book, book);
            *crc_p = rkv_crc32c(*crc_p, pad, book_pad);
            if ((rc = snap_out_write(o, t->book, book, at, err, err_len)) == 0)
                rc = snap_out_write(o, pad, book_pad, at + book, err, err_len);
        }
        at += book + book_pad;
        if (rc == 0 && local) {
            *crc_p = rkv_crc32c(*crc_p, t->local, local);
            rc = snap_out_write(o, t->local, local, at, err, err_len);
        }
        at += local;
        if (rc == 0)
            rc = snap_write_rows(w, o, t, at, crc_p, err, err_len);
        at += t->local_rows * t->row_bytes * (t->with_state ? 2 : 1) + rkv_snap_chunks(t) * 8;
    }
    return rc;
}

/* Under snap_lock: the client sequences copied (and the log switched) at
 * once under the copy lock, the rows chunk by chunk after; each written as
 * it is copied, never the whole shard in memory. */
/* *begun_p: set once the hooks' before_copy succeeded (the log of gen made),
 * from when generation gen exists on disk. */
static int snap_write(struct rkv_snap_writer *w, uint64_t gen, struct rkv_snap_tensor *ts,
                      uint64_t *seqs, int *begun_p, char *err, size_t err_len)
{
    struct rkv_mach_hdr *h = w->mc->hdr;
    *begun_p = 0;
    assert(rkv_live_held(&h->snap_lock, w->mc->owner));
    struct rkv_snap s = {.version = RKV_SNAP_VERSION,
                         .machine = w->machine,
                         .lineage = h->lineage,
                         .generation = gen,
                         .fingerprint = w->fingerprint,
                         .n_clients = h->n_clients,
                         .last_seq = seqs,
                         .tensors = ts};
    uint64_t bytes;
    int rc = snap_list(w, ts, &s.n_tensors, err, err_len);
    if (rc < 0)
        return rc;
    for (uint32_t i = 0; i < s.n_tensors; i++) {
        uint64_t per = ts[i].row_bytes * (ts[i].with_state ? 2 : 1);
        ts[i].chunk_rows = per >= RKV_SNAP_COPY_BYTES ? 1 : RKV_SNAP_COPY_BYTES / per;
    }
    if ((rc = rkv_snap_size(&s, &bytes)) < 0)
        return rkv_errf(err, err_len, rc, "snapshot of machine %u: size overflows", w->machine);
    if ((rc = snap_reserve(w, &s, err, err_len)) < 0)
        return rc;
    struct snap_out o;
    char tmp[512];
    if ((rc = snap_file_open(&o, w, tmp, sizeof(tmp), bytes, err, err_len)) < 0)
        return rc;
    const struct rkv_snap_hooks *hk = &w->hooks;
    if (hk->before_copy && (rc = hk->before_copy(hk->user, gen, err, err_len)) < 0) {
        rkv_file_close(o.fd);
        return rc;
    }
    *begun_p = 1;
    rkv_mach_copy_begin(w->mc);
    if ((rc = snap_torn_push(w, err, err_len)) < 0) {
        rkv_mach_copy_end(w->mc);
        rkv_file_close(o.fd);
        return rc;
    }
    s.wall_ns = rkv_file_wall_ns();
    for (uint32_t c = 0; c < h->n_clients; c++)
        seqs[c] = h->clients[c].last_seq;
    if (hk->during_copy)
        hk->during_copy(hk->user, gen);
    rkv_mach_copy_end(w->mc);
    if (hk->after_copy && (rc = hk->after_copy(hk->user, gen, err, err_len)) < 0) {
        rkv_file_close(o.fd);
        return rc;
    }
    uint32_t crc = rkv_crc32c(0, seqs, (size_t)s.n_clients * 8);
    rc = snap_out_write(&o, seqs, (uint64_t)s.n_clients * 8, RKV_SNAP_HDR_BYTES, err, err_len);
    if (rc == 0)
        rc = snap_write_tensors(w, &o, &s, RKV_SNAP_HDR_BYTES + (uint64_t)s.n_clients * 8, &crc,
                                err, err_len);
    uint8_t hdr[RKV_SNAP_HDR_BYTES];
    snap_put_header(hdr, &s, bytes - RKV_SNAP_HDR_BYTES);
    rkv_put32(hdr + 64, crc);
    rkv_put32(hdr + 68, rkv_crc32c(0, hdr, 68));
    if (rc == 0)
        rc = snap_out_write(&o, hdr, sizeof(hdr), 0, err, err_len);
    if (rc == 0 && hk->before_swap)
        rc = hk->before_swap(hk->user, gen, err, err_len);
    if (rc < 0) {
        rkv_file_close(o.fd);
        return rc;
    }
    uint32_t fsyncs = 0;
    rc = snap_file_finish(w, &o, &fsyncs, err, err_len);
    w->n_fsyncs += fsyncs;
    if (rc == 0) {
        w->n_written++;
        w->bytes_written += bytes;
        w->bytes_last = bytes;
    }
    return rc;
}

int rkv_snap_commit(struct rkv_snap_writer *w, uint64_t seen_started, char *err, size_t err_len)
{
    struct rkv_mach_hdr *h = w->mc->hdr;
    int rc = 0;
    if (!w->seqs && !(w->seqs = calloc((size_t)h->n_clients + 1, sizeof(*w->seqs))))
        return rkv_errf(err, err_len, -RKV_ENOMEM, "snapshot: out of memory");
    rkv_live_lock(w->port, &h->snap_lock, &h->snap_holder, h->reader_proc, w->mc->owner);
    if (atomic_load(&h->snap_durable) > seen_started) {
        w->n_shared++; /* another server's snapshot began after our pushes */
        goto unlock;
    }
    /* After the last durable snapshot and the log being appended: not
     * after snap_started, which a checkpoint that died (killed in its temp
     * file's open, or zero-filling its log) between taking its number and
     * making its log left raised. The next one took the number after it:
     * logs G - 1 and G + 1, and a crash before that snapshot's swap left a
     * gap that recovery refuses, every push being on disk. Whatever such a
     * checkpoint made of its number (a log with no record yet: the switch
     * to it comes under this lock) is made again. */
    uint64_t gen = atomic_load(&h->snap_durable);
    uint64_t log_gen = w->hooks.log_gen ? w->hooks.log_gen(w->hooks.user) : 0;
    gen = (log_gen > gen ? log_gen : gen) + 1;
    /* Published before the copy: a server that reads a smaller value knows
     * its pushes were applied before this copy began. */
    atomic_store(&h->snap_started, gen);
    int begun;
    rc = snap_write(w, gen, w->ts, w->seqs, &begun, err, err_len);
    if (rc < 0 && !begun)
        /* Nothing of gen exists (no log, no copy: its temp file or memory
         * was refused first): the next attempt takes its number again.
         * Taking the next one left a gap in the logs (G, then G + 2), and
         * recovery, which reads logs gen, gen + 1, ... up to the first
         * missing one, silently dropped the logs after the gap. A server
         * that read gen meanwhile only asks for one snapshot more. */
        atomic_store(&h->snap_started, gen - 1);
    if (rc == 0) {
        atomic_store(&h->snap_durable, gen);
        if (w->hooks.after_durable)
            w->hooks.after_durable(w->hooks.user, gen);
        snap_stock_spare(w, w->bytes_last);
    }
unlock:
    rkv_live_unlock(&h->snap_lock, &h->snap_holder);
    return rc;
}

void rkv_snap_writer_free(struct rkv_snap_writer *w)
{
    for (uint32_t id = 1; id <= RKV_MAX_TENSORS; id++)
        if (w->maps[id].hdr)
            rkv_shard_unmap(&w->maps[id]);
    free(w->seqs);
    w->seqs = NULL;
    free(w->buf);
    w->buf = NULL;
    w->cap = 0;
    free(w->lsns);
    w->lsns = NULL;
    w->lsn_cap = 0;
}

/* ---- restore ---- */

/* Puts tensor t of the snapshot into shared memory: a fresh segment
 * (create), or over the live one of the same shape (a rollback). */
static int snap_restore_tensor(const struct rkv_snap_tensor *t, struct rkv_port *port,
                               const char *prefix, uint32_t machine, struct rkv_mach *mc,
                               int create, char *err, size_t err_len)
{
    char name[96];
    rkv_shard_name(name, sizeof(name), prefix, machine, t->id);
    if (create) /* a co-located client mapping the old one is told it moved */
        rkv_shard_retire(port, name);
    struct rkv_shard sh;
    int rc =
        rkv_shard_map_local(port, name, t->local_rows, (size_t)t->row_bytes, (int)t->with_state,
                            t->book_len, (int)t->has_local, create, &sh, err, err_len);
    if (rc < 0)
        return rc;
    sh.owner = mc->owner;
    rkv_shard_reclaim(&sh); /* row locks the dead predecessor held */
    size_t data = (size_t)(t->local_rows * t->row_bytes);
    memcpy(sh.data, t->data, data);
    if (t->with_state)
        memcpy(sh.state, t->state, data);
    if (t->book_len)
        memcpy(sh.book, t->book, (size_t)t->book_len * 4);
    if (t->has_local)
        memcpy(sh.local, t->local, (size_t)t->book_len * 8);
    rkv_shard_unmap(&sh);
    struct rkv_mach_tensor *e = &mc->hdr->tensors[t->id];
    rkv_mach_tensor_raise(mc->hdr, t->id);
    e->desc = t->desc;
    e->with_state = t->with_state;
    e->local_rows = t->local_rows;
    e->row_bytes = t->row_bytes;
    e->has_local = t->has_local;
    atomic_thread_fence(memory_order_release);
    e->present = 1;
    return 0;
}

int rkv_snap_restore(const struct rkv_snap *s, struct rkv_port *port, const char *prefix,
                     uint32_t n_clients, uint32_t owner, struct rkv_mach *mc, char *err,
                     size_t err_len)
{
    if (s->n_clients != n_clients)
        return rkv_errf(err, err_len, -RKV_ECONFIG,
                        "snapshot of machine %u was taken with %u workers, the config has %u",
                        s->machine, s->n_clients, n_clients);
    /* Lineage 0 until whole: the machine's other servers wait for this one's
     * lineage before they take the tensor table. */
    int rc = rkv_mach_create(port, prefix, s->machine, n_clients, 0, owner, mc, err, err_len);
    if (rc < 0)
        return rc;
    for (uint32_t i = 0; i < s->n_tensors && rc == 0; i++)
        rc = snap_restore_tensor(&s->tensors[i], port, prefix, s->machine, mc, 1, err, err_len);
    if (rc < 0) {
        rkv_mach_close(mc);
        rkv_mach_unlink(port, prefix, s->machine);
        return rc;
    }
    for (uint32_t c = 0; c < n_clients; c++)
        mc->hdr->clients[c].last_seq = s->last_seq[c];
    atomic_store(&mc->hdr->snap_started, s->generation);
    atomic_store(&mc->hdr->snap_durable, s->generation);
    return 0;
}

void rkv_snap_publish_lineage(struct rkv_mach *mc, uint64_t lineage)
{
    __atomic_store_n(&mc->hdr->lineage, lineage, __ATOMIC_RELEASE);
}

int rkv_snap_rollback(const struct rkv_snap *s, struct rkv_port *port, const char *prefix,
                      struct rkv_mach *mc, char *err, size_t err_len)
{
    struct rkv_mach_hdr *h = mc->hdr;
    if (s->n_clients != h->n_clients || s->lineage != h->lineage)
        return rkv_errf(err, err_len, -RKV_ECONFIG,
                        "snapshot of machine %u does not match its shared memory", s->machine);
    /* Tensors created after the snapshot: their INIT was never acknowledged. */
    for (uint32_t id = 1, end = rkv_mach_tensor_end(h); id < end; id++) {
        int kept = 0;
        for (uint32_t i = 0; i < s->n_tensors; i++)
            kept |= s->tensors[i].id == id;
        if (!kept)
            h->tensors[id].present = 0;
    }
    for (uint32_t i = 0; i < s->n_tensors; i++) {
        const struct rkv_snap_tensor *t = &s->tensors[i];
        const struct rkv_mach_tensor *e = &h->tensors[t->id];
        int create = !e->present; /* removed from /dev/shm meanwhile: make it again */
        if (e->present && (e->local_rows != t->local_rows || e->row_bytes != t->row_bytes ||
                           e->with_state != t->with_state || e->has_local != t->has_local))
            return rkv_errf(err, err_len, -RKV_ECONFIG,
                            "snapshot of machine %u: tensor %u has another shape in memory",
                            s->machine, t->id);
        int rc = snap_restore_tensor(t, port, prefix, s->machine, mc, create, err, err_len);
        if (rc < 0)
            return rc;
    }
    for (uint32_t c = 0; c < h->n_clients; c++)
        h->clients[c].last_seq = s->last_seq[c];
    return 0;
}
