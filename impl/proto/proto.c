/* rkv wire format: encoders and the validating decoder (layout in proto.h). */
#include <assert.h>
#include <stdio.h>
#include <stddef.h>
#include <string.h>

#include "proto/proto.h"
#include "util/util.h"

/* Decoded ids/rows/book alias the buffer as native integers, so the host
 * must share the wire's byte order; a big-endian port would need copies. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "rkv assumes a little-endian host");

/* Header field offsets (see the layout in proto.h). */
enum {
    OFF_MAGIC = 0,
    OFF_VERSION = 4,
    OFF_TYPE = 5,
    OFF_FLAGS = 6,
    OFF_REQ_ID = 8,
    OFF_TENSOR_ID = 16,
    OFF_SENDER = 20,
    OFF_COUNT = 24,
    OFF_ROW_BYTES = 28,
    OFF_STATUS = 32,
    OFF_OP = 36,
    OFF_CREDITS = 38,
    OFF_PARAM = 40,
    OFF_PAYLOAD_LEN = 48,
    OFF_RELEASE = 56,
    OFF_RESERVED = 60,
};
_Static_assert(OFF_RESERVED + 4 == RKV_PROTO_HDR_BYTES, "header layout");

/* Tensor body offsets. */
enum {
    TOFF_NAME = 0,
    TOFF_DTYPE = 64,
    TOFF_POLICY = 68,
    TOFF_ROW_LEN = 72,
    TOFF_INIT = 76,
    TOFF_ROWS = 80,
    TOFF_INIT_SEED = 88,
    TOFF_WITH_STATE = 96,
    TOFF_BOOK_LEN = 100,
};
_Static_assert(TOFF_BOOK_LEN + 4 == RKV_PROTO_TENSOR_BYTES, "tensor layout");
_Static_assert(RKV_NAME_MAX + 1 == TOFF_DTYPE, "a wire name is RKV_NAME_MAX + 1 bytes");

/* Slot descriptor offsets. */
enum { SOFF_ADDR = 0, SOFF_RKEY = 8, SOFF_SLOT = 12, SOFF_CAP = 16 };
_Static_assert(SOFF_CAP + 8 == RKV_PROTO_SLOT_BYTES, "slot layout");

/* The largest body a peer may announce: one maximal row plus its id and
 * slack. Bounds what a stream transport allocates on a header's word before
 * the body arrives; legal messages need far less (ctrl/slot sizes). */
static const uint64_t proto_max_payload = (1ull << 30) + (64ull << 10);

/* Body sizes of fixed-size types; PROTO_BODY_VARIABLE for the others. */
#define PROTO_BODY_VARIABLE UINT32_MAX
static const uint32_t proto_fixed_body[RKV_MSG_TYPE_MAX_] = {
    [RKV_MSG_HELLO] = 32,
    [RKV_MSG_HELLO_REPLY] = 24,
    [RKV_MSG_INIT] = PROTO_BODY_VARIABLE,
    [RKV_MSG_META] = RKV_NAME_MAX + 1,
    [RKV_MSG_META_REPLY] = PROTO_BODY_VARIABLE,
    [RKV_MSG_PUSH] = PROTO_BODY_VARIABLE,
    [RKV_MSG_PULL] = PROTO_BODY_VARIABLE,
    [RKV_MSG_PULL_REPLY] = PROTO_BODY_VARIABLE,
    [RKV_MSG_PULL_ZC] = PROTO_BODY_VARIABLE,
    [RKV_MSG_RNDV_START] = 8,
    [RKV_MSG_RNDV_REPLY] = RKV_PROTO_SLOT_BYTES,
    [RKV_MSG_ERROR] = PROTO_BODY_VARIABLE,
    [RKV_MSG_REGISTER] = RKV_PROTO_ADDR_BYTES,
    [RKV_MSG_TABLE_ENTRY] = RKV_PROTO_ADDR_BYTES,
    [RKV_MSG_LIST_REPLY] = PROTO_BODY_VARIABLE,
};

static const char *const proto_type_names[RKV_MSG_TYPE_MAX_] = {
    [RKV_MSG_HELLO] = "HELLO",
    [RKV_MSG_HELLO_REPLY] = "HELLO_REPLY",
    [RKV_MSG_INIT] = "INIT",
    [RKV_MSG_INIT_REPLY] = "INIT_REPLY",
    [RKV_MSG_META] = "META",
    [RKV_MSG_META_REPLY] = "META_REPLY",
    [RKV_MSG_PUSH] = "PUSH",
    [RKV_MSG_PUSH_ACK] = "PUSH_ACK",
    [RKV_MSG_PULL] = "PULL",
    [RKV_MSG_PULL_REPLY] = "PULL_REPLY",
    [RKV_MSG_BARRIER] = "BARRIER",
    [RKV_MSG_BARRIER_REPLY] = "BARRIER_REPLY",
    [RKV_MSG_SHUTDOWN] = "SHUTDOWN",
    [RKV_MSG_SHUTDOWN_ACK] = "SHUTDOWN_ACK",
    [RKV_MSG_RNDV_START] = "RNDV_START",
    [RKV_MSG_RNDV_REPLY] = "RNDV_REPLY",
    [RKV_MSG_CREDIT] = "CREDIT",
    [RKV_MSG_ERROR] = "ERROR",
    [RKV_MSG_RNDV_RETIRE] = "RNDV_RETIRE",
    [RKV_MSG_RNDV_REVOKE] = "RNDV_REVOKE",
    [RKV_MSG_REGISTER] = "REGISTER",
    [RKV_MSG_REGISTER_ACK] = "REGISTER_ACK",
    [RKV_MSG_TABLE] = "TABLE",
    [RKV_MSG_TABLE_ENTRY] = "TABLE_ENTRY",
    [RKV_MSG_PULL_ZC] = "PULL_ZC",
    [RKV_MSG_PULL_DONE] = "PULL_DONE",
    [RKV_MSG_LIST] = "LIST",
    [RKV_MSG_LIST_REPLY] = "LIST_REPLY",
};

const char *rkv_msg_type_name(int type)
{
    if (type <= 0 || type >= RKV_MSG_TYPE_MAX_)
        return "UNKNOWN";
    return proto_type_names[type];
}

static int proto_type_valid(int type)
{
    return type > 0 && type < RKV_MSG_TYPE_MAX_;
}

/* ---- little-endian access (the host is little-endian, see above) ---- */

static uint16_t ld16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static uint32_t ld32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static uint64_t ld64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static void st16(uint8_t *p, uint16_t v)
{
    memcpy(p, &v, sizeof(v));
}

static void st32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, sizeof(v));
}

static void st64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, sizeof(v));
}

/* ---- sizes ---- */

static int proto_has_rows(int type)
{
    return type == RKV_MSG_PUSH || type == RKV_MSG_PULL || type == RKV_MSG_PULL_REPLY ||
           type == RKV_MSG_PULL_ZC;
}

static int proto_has_tensor(int type)
{
    return type == RKV_MSG_INIT || type == RKV_MSG_META_REPLY;
}

/* count x row_bytes rows, preceded by count ids for PUSH; a slot desc and
 * count ids for PULL (whose row_bytes sizes the reply, not this body); a
 * region desc, count ids and count u32 positions for PULL_ZC. */
static uint64_t proto_rows_body(int type, uint32_t count, uint32_t row_bytes)
{
    uint64_t ids, rows, sum;
    if (count == 0 || row_bytes == 0 || row_bytes > RKV_PROTO_MAX_ROW_BYTES)
        return 0;
    if (!rkv_mul_ok(count, 8, &ids) || !rkv_mul_ok(count, row_bytes, &rows))
        return 0;
    if (type == RKV_MSG_PULL_REPLY)
        return rows;
    if (type == RKV_MSG_PULL)
        return rkv_add_ok(ids, RKV_PROTO_SLOT_BYTES, &sum) ? sum : 0;
    if (type == RKV_MSG_PULL_ZC) /* count <= 2^32: 12 x count + 24 cannot overflow */
        return ids + (uint64_t)count * 4 + RKV_PROTO_SLOT_BYTES;
    return rkv_add_ok(ids, rows, &sum) ? sum : 0;
}

uint64_t rkv_proto_tensor_body_bytes(uint32_t book_len, int has_local)
{
    /* book_len < 2^32: 104 + 4 x book_len + 7 + 8 x book_len fits in 64 bits. */
    uint64_t book = ((uint64_t)book_len * 4 + 7) & ~7ull;
    if (!has_local)
        return RKV_PROTO_TENSOR_BYTES + (uint64_t)book_len * 4;
    return RKV_PROTO_TENSOR_BYTES + book + (uint64_t)book_len * 8;
}

uint64_t rkv_proto_body_bytes(int type, uint32_t count, uint32_t row_bytes, uint32_t book_len)
{
    uint64_t book;
    if (!proto_type_valid(type))
        return 0;
    if (proto_has_rows(type))
        return proto_rows_body(type, count, row_bytes);
    if (proto_has_tensor(type))
        return rkv_mul_ok(book_len, 4, &book) ? RKV_PROTO_TENSOR_BYTES + book : 0;
    if (type == RKV_MSG_ERROR)
        return RKV_PROTO_TEXT_MAX; /* the most it may need */
    if (type == RKV_MSG_LIST_REPLY)
        return (uint64_t)count * RKV_PROTO_LIST_ENTRY_BYTES;
    assert(proto_fixed_body[type] != PROTO_BODY_VARIABLE);
    return proto_fixed_body[type];
}

/* ---- header ---- */

static void hdr_unpack(const uint8_t *b, struct rkv_hdr *h)
{
    *h = (struct rkv_hdr){
        .type = b[OFF_TYPE],
        .flags = ld16(b + OFF_FLAGS),
        .req_id = ld64(b + OFF_REQ_ID),
        .tensor_id = ld32(b + OFF_TENSOR_ID),
        .sender = ld32(b + OFF_SENDER),
        .count = ld32(b + OFF_COUNT),
        .row_bytes = ld32(b + OFF_ROW_BYTES),
        .status = (int32_t)ld32(b + OFF_STATUS),
        .op = ld16(b + OFF_OP),
        .credits = ld16(b + OFF_CREDITS),
        .payload_len = ld64(b + OFF_PAYLOAD_LEN),
        .release = ld32(b + OFF_RELEASE),
    };
    memcpy(&h->param, b + OFF_PARAM, sizeof(h->param));
}

/* Fields whose valid values do not depend on the type. */
static int hdr_check_fields(const uint8_t *b, const struct rkv_hdr *h, char *err, size_t el)
{
    uint32_t magic = ld32(b + OFF_MAGIC), reserved = ld32(b + OFF_RESERVED);
    if (magic != RKV_PROTO_MAGIC)
        return rkv_errf(err, el, -RKV_EPROTO, "magic 0x%08x is not \"RKV1\" (0x%08x)", magic,
                        RKV_PROTO_MAGIC);
    if (b[OFF_VERSION] != RKV_PROTO_VERSION)
        return rkv_errf(err, el, -RKV_EPROTO, "version %u unsupported (expected %u)",
                        b[OFF_VERSION], RKV_PROTO_VERSION);
    if (!proto_type_valid(h->type))
        return rkv_errf(err, el, -RKV_EPROTO, "type %u unknown (valid 1..%d)", h->type,
                        RKV_MSG_TYPE_MAX_ - 1);
    if (h->flags != 0)
        return rkv_errf(err, el, -RKV_EPROTO, "flags 0x%04x must be 0", h->flags);
    if (reserved != 0)
        return rkv_errf(err, el, -RKV_EPROTO, "reserved 0x%08x must be 0", reserved);
    if (h->status > 0)
        return rkv_errf(err, el, -RKV_EPROTO, "status %d must be <= 0", h->status);
    if (h->op >= RKV_OP_MAX)
        return rkv_errf(err, el, -RKV_EPROTO, "op %u out of range (< %d)", h->op, RKV_OP_MAX);
    if (h->payload_len > proto_max_payload)
        return rkv_errf(err, el, -RKV_EPROTO, "payload_len %llu exceeds the %llu-byte limit",
                        (unsigned long long)h->payload_len, (unsigned long long)proto_max_payload);
    return 0;
}

static int hdr_check_rows(const struct rkv_hdr *h, char *err, size_t el)
{
    const char *tn = rkv_msg_type_name(h->type);
    if (h->count == 0)
        return rkv_errf(err, el, -RKV_EPROTO, "%s: count 0 (must be >= 1)", tn);
    if (h->row_bytes == 0 || h->row_bytes > RKV_PROTO_MAX_ROW_BYTES)
        return rkv_errf(err, el, -RKV_EPROTO, "%s: row_bytes %u outside [1, %u]", tn, h->row_bytes,
                        RKV_PROTO_MAX_ROW_BYTES);
    uint64_t need = proto_rows_body(h->type, h->count, h->row_bytes);
    if (need == 0)
        return rkv_errf(err, el, -RKV_EPROTO, "%s: body size of count %u, row_bytes %u overflows",
                        tn, h->count, h->row_bytes);
    if (h->payload_len != need)
        return rkv_errf(
            err, el, -RKV_EPROTO, "%s: payload_len %llu but count %u, row_bytes %u needs %llu", tn,
            (unsigned long long)h->payload_len, h->count, h->row_bytes, (unsigned long long)need);
    return 0;
}

/* The body size as far as the header alone determines it. */
static int hdr_check_body_len(const struct rkv_hdr *h, char *err, size_t el)
{
    const char *tn = rkv_msg_type_name(h->type);
    unsigned long long pl = (unsigned long long)h->payload_len;
    if (proto_has_rows(h->type))
        return hdr_check_rows(h, err, el);
    if (proto_has_tensor(h->type)) {
        if (h->payload_len < RKV_PROTO_TENSOR_BYTES)
            return rkv_errf(err, el, -RKV_EPROTO,
                            "%s: payload_len %llu shorter than a %d-byte "
                            "tensor",
                            tn, pl, RKV_PROTO_TENSOR_BYTES);
        if (h->count > 1)
            return rkv_errf(err, el, -RKV_EPROTO,
                            "%s: count %u must be 0 or 1 (a local index follows)", tn, h->count);
        return 0;
    }
    if (h->type == RKV_MSG_LIST_REPLY) {
        if (h->count > RKV_PROTO_MAX_TENSORS)
            return rkv_errf(err, el, -RKV_EPROTO, "LIST_REPLY: count %u exceeds the %u tensors",
                            h->count, RKV_PROTO_MAX_TENSORS);
        if (h->payload_len != (uint64_t)h->count * RKV_PROTO_LIST_ENTRY_BYTES)
            return rkv_errf(err, el, -RKV_EPROTO,
                            "LIST_REPLY: payload_len %llu but count %u needs %llu", pl, h->count,
                            (unsigned long long)h->count * RKV_PROTO_LIST_ENTRY_BYTES);
        return 0;
    }
    if (h->type == RKV_MSG_ERROR) {
        if (h->payload_len > RKV_PROTO_TEXT_MAX)
            return rkv_errf(err, el, -RKV_EPROTO,
                            "ERROR: payload_len %llu exceeds the %d-byte "
                            "text limit",
                            pl, RKV_PROTO_TEXT_MAX);
        return 0;
    }
    if (h->payload_len != proto_fixed_body[h->type])
        return rkv_errf(err, el, -RKV_EPROTO, "%s: payload_len %llu but the body is %u bytes", tn,
                        pl, proto_fixed_body[h->type]);
    return 0;
}

int rkv_proto_decode_hdr(const void *buf, size_t len, struct rkv_hdr *h, char *err, size_t el)
{
    if (len < RKV_PROTO_HDR_BYTES)
        return rkv_errf(err, el, -RKV_EPROTO,
                        "buffer of %zu bytes is shorter than the %d-byte "
                        "header",
                        len, RKV_PROTO_HDR_BYTES);
    assert(buf && h);
    struct rkv_hdr tmp;
    hdr_unpack(buf, &tmp);
    int rc = hdr_check_fields(buf, &tmp, err, el);
    if (rc == 0)
        rc = hdr_check_body_len(&tmp, err, el);
    if (rc == 0)
        *h = tmp;
    return rc;
}

/* ---- bodies ---- */

/* A name field is RKV_NAME_MAX + 1 bytes holding a non-empty C string. */
static int dec_name(const uint8_t *b, char *name, const char *tn, char *err, size_t el)
{
    const uint8_t *nul = memchr(b, 0, RKV_NAME_MAX + 1);
    if (!nul)
        return rkv_errf(err, el, -RKV_EPROTO, "%s: name not NUL-terminated within %d bytes", tn,
                        RKV_NAME_MAX + 1);
    if (nul == b)
        return rkv_errf(err, el, -RKV_EPROTO, "%s: empty name", tn);
    memcpy(name, b, (size_t)(nul - b) + 1);
    return 0;
}

static void dec_slot(const uint8_t *b, struct rkv_slot_desc *s)
{
    *s = (struct rkv_slot_desc){.addr = ld64(b + SOFF_ADDR),
                                .rkey = ld32(b + SOFF_RKEY),
                                .slot = ld32(b + SOFF_SLOT),
                                .cap = ld64(b + SOFF_CAP)};
}

static int dec_tensor_enums(const struct rkv_wire_tensor *t, const char *tn, char *err, size_t el)
{
    if (rkv_dtype_size((enum rkv_dtype)t->dtype) == 0)
        return rkv_errf(err, el, -RKV_EPROTO, "%s: dtype %u unknown (valid 1..4)", tn, t->dtype);
    if (t->policy < RKV_PART_RANGE || t->policy > RKV_PART_EXPLICIT)
        return rkv_errf(err, el, -RKV_EPROTO, "%s: policy %u unknown (valid 1..3)", tn, t->policy);
    if (t->init > RKV_INIT_UNIFORM)
        return rkv_errf(err, el, -RKV_EPROTO, "%s: init %u must be 0 or 1", tn, t->init);
    if (t->with_state > 1)
        return rkv_errf(err, el, -RKV_EPROTO, "%s: with_state %u must be 0 or 1", tn,
                        t->with_state);
    return 0;
}

static int dec_tensor_sizes(const struct rkv_wire_tensor *t, const char *tn, char *err, size_t el)
{
    const uint32_t max_row_len = RKV_PROTO_MAX_ROW_BYTES / 8;
    if (t->rows == 0 || t->rows > RKV_PROTO_MAX_ROWS)
        return rkv_errf(err, el, -RKV_EPROTO, "%s: rows %llu outside [1, %llu]", tn,
                        (unsigned long long)t->rows, RKV_PROTO_MAX_ROWS);
    if (t->row_len == 0 || t->row_len > max_row_len)
        return rkv_errf(err, el, -RKV_EPROTO, "%s: row_len %u outside [1, %u]", tn, t->row_len,
                        max_row_len);
    if (t->policy == RKV_PART_EXPLICIT && t->book_len != t->rows)
        return rkv_errf(err, el, -RKV_EPROTO,
                        "%s: book_len %u but an EXPLICIT book needs rows "
                        "%llu entries",
                        tn, t->book_len, (unsigned long long)t->rows);
    if (t->policy != RKV_PART_EXPLICIT && t->book_len != 0)
        return rkv_errf(err, el, -RKV_EPROTO, "%s: book_len %u must be 0 for policy %u", tn,
                        t->book_len, t->policy);
    return 0;
}

/* The 104 bytes of a tensor description at b, checked (no book). */
static int dec_tensor_fields(const uint8_t *b, struct rkv_wire_tensor *t, const char *tn, char *err,
                             size_t el)
{
    *t = (struct rkv_wire_tensor){
        .dtype = ld32(b + TOFF_DTYPE),
        .policy = ld32(b + TOFF_POLICY),
        .row_len = ld32(b + TOFF_ROW_LEN),
        .init = ld32(b + TOFF_INIT),
        .rows = ld64(b + TOFF_ROWS),
        .init_seed = ld64(b + TOFF_INIT_SEED),
        .with_state = ld32(b + TOFF_WITH_STATE),
        .book_len = ld32(b + TOFF_BOOK_LEN),
    };
    int rc = dec_name(b + TOFF_NAME, t->name, tn, err, el);
    if (rc == 0)
        rc = dec_tensor_enums(t, tn, err, el);
    if (rc == 0)
        rc = dec_tensor_sizes(t, tn, err, el);
    return rc;
}

/* A local index names a row's place on its machine: at least each is below
 * the row count (whether they form a permutation per machine needs the
 * machine count, which the store checks). */
static int dec_tensor_local(const uint8_t *b, struct rkv_msg *m, const char *tn, char *err,
                            size_t el)
{
    const struct rkv_wire_tensor *t = &m->u.tensor.t;
    if (t->policy != RKV_PART_EXPLICIT)
        return rkv_errf(err, el, -RKV_EPROTO, "%s: a local index needs an EXPLICIT book", tn);
    const uint8_t *local = b + (((uint64_t)t->book_len * 4 + 7) & ~7ull);
    for (uint32_t r = 0; r < t->book_len; r++) {
        uint64_t l = ld64(local + (size_t)r * 8);
        if (l >= t->rows)
            return rkv_errf(err, el, -RKV_EPROTO,
                            "%s: local index %llu of row %u not below rows %llu", tn,
                            (unsigned long long)l, r, (unsigned long long)t->rows);
    }
    m->u.tensor.local = (const void *)local;
    return 0;
}

static int dec_tensor(const uint8_t *b, uint64_t n, struct rkv_msg *m, char *err, size_t el)
{
    const char *tn = rkv_msg_type_name(m->h.type);
    struct rkv_wire_tensor *t = &m->u.tensor.t;
    assert(n >= RKV_PROTO_TENSOR_BYTES);
    int rc = dec_tensor_fields(b, t, tn, err, el);
    if (rc < 0)
        return rc;
    int has_local = m->h.count == 1;
    uint64_t need = rkv_proto_tensor_body_bytes(t->book_len, has_local);
    if (n != need)
        return rkv_errf(err, el, -RKV_EPROTO,
                        "%s: payload_len %llu but a tensor with book_len "
                        "%u%s needs %llu",
                        tn, (unsigned long long)n, t->book_len,
                        has_local ? " and a local index" : "", (unsigned long long)need);
    m->u.tensor.book = t->book_len ? (const void *)(b + RKV_PROTO_TENSOR_BYTES) : NULL;
    if (has_local)
        return dec_tensor_local(b + RKV_PROTO_TENSOR_BYTES, m, tn, err, el);
    return 0;
}

static int dec_list(const uint8_t *b, struct rkv_msg *m, char *err, size_t el)
{
    for (uint32_t i = 0; i < m->h.count; i++) {
        const uint8_t *e = b + (size_t)i * RKV_PROTO_LIST_ENTRY_BYTES;
        struct rkv_wire_tensor t;
        char tn[32];
        snprintf(tn, sizeof(tn), "LIST_REPLY entry %u", i);
        int rc = dec_tensor_fields(e, &t, tn, err, el);
        if (rc < 0)
            return rc;
        uint32_t id = ld32(e + RKV_PROTO_TENSOR_BYTES), reserved = ld32(e + 108);
        if (id == 0 || id > RKV_PROTO_MAX_TENSORS)
            return rkv_errf(err, el, -RKV_EPROTO, "%s: tensor id %u outside [1, %u]", tn, id,
                            RKV_PROTO_MAX_TENSORS);
        if (reserved != 0)
            return rkv_errf(err, el, -RKV_EPROTO, "%s: reserved 0x%08x must be 0", tn, reserved);
    }
    m->u.list = b;
    return 0;
}

static int dec_pull(const uint8_t *b, struct rkv_msg *m, char *err, size_t el)
{
    dec_slot(b, &m->u.pull.reply_to);
    if (m->u.pull.reply_to.cap < RKV_PROTO_HDR_BYTES)
        return rkv_errf(err, el, -RKV_EPROTO,
                        "PULL: reply slot cap %llu smaller than a %d-byte "
                        "header",
                        (unsigned long long)m->u.pull.reply_to.cap, RKV_PROTO_HDR_BYTES);
    m->u.pull.ids = (const void *)(b + RKV_PROTO_SLOT_BYTES);
    return 0;
}

/* Every row must land inside the region the caller offered: the server
 * writes where pos says, so a position past it is refused here, before any
 * write (the caller's NIC would refuse it too, but only by breaking the
 * connection). */
static int dec_pull_zc(const uint8_t *b, struct rkv_msg *m, char *err, size_t el)
{
    struct rkv_slot_desc *d = &m->u.pull_zc.dst;
    dec_slot(b, d);
    uint32_t rb = m->h.row_bytes, n = m->h.count;
    if (d->slot != 0)
        return rkv_errf(err, el, -RKV_EPROTO, "PULL_ZC: region field slot %u must be 0", d->slot);
    if (d->addr + d->cap < d->addr)
        return rkv_errf(err, el, -RKV_EPROTO, "PULL_ZC: region 0x%llx + %llu wraps",
                        (unsigned long long)d->addr, (unsigned long long)d->cap);
    uint64_t rows = d->cap / rb;
    const uint8_t *pos = b + RKV_PROTO_SLOT_BYTES + (size_t)n * 8;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t p = ld32(pos + (size_t)i * 4);
        if (p >= rows)
            return rkv_errf(err, el, -RKV_EPROTO,
                            "PULL_ZC: position %u of row %u outside the %llu-byte region "
                            "(%llu rows of %u bytes)",
                            p, i, (unsigned long long)d->cap, (unsigned long long)rows, rb);
    }
    m->u.pull_zc.ids = (const void *)(b + RKV_PROTO_SLOT_BYTES);
    m->u.pull_zc.pos = (const void *)pos;
    return 0;
}

static int dec_slot_reply(const uint8_t *b, struct rkv_msg *m, char *err, size_t el)
{
    dec_slot(b, &m->u.slot);
    if (m->u.slot.cap < RKV_PROTO_HDR_BYTES)
        return rkv_errf(err, el, -RKV_EPROTO,
                        "RNDV_REPLY: slot cap %llu smaller than a %d-byte "
                        "header",
                        (unsigned long long)m->u.slot.cap, RKV_PROTO_HDR_BYTES);
    return 0;
}

static int dec_rndv_start(const uint8_t *b, struct rkv_msg *m, char *err, size_t el)
{
    m->u.rndv_bytes = ld64(b);
    if (m->u.rndv_bytes < RKV_PROTO_HDR_BYTES)
        return rkv_errf(err, el, -RKV_EPROTO,
                        "RNDV_START: bytes %llu smaller than a %d-byte "
                        "header",
                        (unsigned long long)m->u.rndv_bytes, RKV_PROTO_HDR_BYTES);
    return 0;
}

static int dec_addr(const uint8_t *b, struct rkv_msg *m, char *err, size_t el)
{
    struct rkv_wire_addr *a = &m->u.addr;
    a->cluster = ld64(b);
    a->server_id = ld32(b + 8);
    a->port = ld32(b + 12);
    const char *tn = rkv_msg_type_name(m->h.type);
    if (a->port == 0 || a->port > 65535)
        return rkv_errf(err, el, -RKV_EPROTO, "%s: port %u out of 1..65535", tn, a->port);
    const uint8_t *host = b + 16, *nul = memchr(host, 0, RKV_PROTO_HOST_MAX + 1);
    if (!nul || nul == host)
        return rkv_errf(err, el, -RKV_EPROTO, "%s: host empty or not NUL-terminated", tn);
    /* A name or an address, ASCII: it is logged and dialled as it came,
     * and a peer's newline forged a log line of server 0's. */
    for (const uint8_t *p = host; p < nul; p++)
        if (*p <= ' ' || *p >= 0x7f)
            return rkv_errf(err, el, -RKV_EPROTO,
                            "%s: host holds byte 0x%02x at %u (a name or an address is printable "
                            "ASCII)",
                            tn, *p, (unsigned)(p - host));
    memcpy(a->host, host, (size_t)(nul - host) + 1);
    return 0;
}

static void dec_hello(const uint8_t *b, struct rkv_msg *m)
{
    if (m->h.type == RKV_MSG_HELLO) {
        m->u.hello.machine_id = ld32(b);
        m->u.hello.want_id = ld32(b + 4);
        m->u.hello.nonce = ld64(b + 8);
        m->u.hello.cluster = ld64(b + 16);
        m->u.hello.rx_depth = ld32(b + 24);
        m->u.hello.ctrl_buf_bytes = ld32(b + 28);
        return;
    }
    m->u.hello_reply.client_id = ld32(b);
    m->u.hello_reply.n_workers = ld32(b + 4);
    m->u.hello_reply.rx_depth = ld32(b + 8);
    m->u.hello_reply.n_servers = ld32(b + 12);
    m->u.hello_reply.ctrl_buf_bytes = ld32(b + 16);
    m->u.hello_reply.push_slots = ld32(b + 20);
}

/* Body of a message whose header passed rkv_proto_decode_hdr and whose
 * payload_len matches the n bytes at b. */
/* The length of the valid UTF-8 sequence at p (at most n bytes) of a
 * character past C1 (U+00A0 on, no surrogate, at most U+10FFFF); 1 for
 * any other byte. */
static uint32_t proto_utf8_len(const unsigned char *p, uint32_t n)
{
    uint32_t len, cp;
    if (p[0] >= 0xc2 && p[0] <= 0xdf)
        len = 2, cp = p[0] & 0x1fu;
    else if (p[0] >= 0xe0 && p[0] <= 0xef)
        len = 3, cp = p[0] & 0x0fu;
    else if (p[0] >= 0xf0 && p[0] <= 0xf4)
        len = 4, cp = p[0] & 0x07u;
    else
        return 1;
    if (len > n)
        return 1;
    for (uint32_t k = 1; k < len; k++) {
        if ((p[k] & 0xc0) != 0x80)
            return 1;
        cp = cp << 6 | (p[k] & 0x3fu);
    }
    static const uint32_t least[5] = {0, 0, 0xa0, 0x800, 0x10000}; /* no overlong, no C1 */
    if (cp < least[len] || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
        return 1;
    return len;
}

static int dec_body(const uint8_t *b, uint64_t n, struct rkv_msg *m, char *err, size_t el)
{
    switch (m->h.type) {
    case RKV_MSG_HELLO:
    case RKV_MSG_HELLO_REPLY:
        dec_hello(b, m);
        return 0;
    case RKV_MSG_INIT:
    case RKV_MSG_META_REPLY:
        return dec_tensor(b, n, m, err, el);
    case RKV_MSG_META:
        return dec_name(b, m->u.name, "META", err, el);
    case RKV_MSG_PUSH:
        m->u.push.ids = (const void *)b;
        m->u.push.rows = b + (size_t)m->h.count * 8;
        return 0;
    case RKV_MSG_PULL:
        return dec_pull(b, m, err, el);
    case RKV_MSG_PULL_REPLY:
        m->u.rows = b;
        return 0;
    case RKV_MSG_PULL_ZC:
        return dec_pull_zc(b, m, err, el);
    case RKV_MSG_LIST_REPLY:
        return dec_list(b, m, err, el);
    case RKV_MSG_RNDV_START:
        return dec_rndv_start(b, m, err, el);
    case RKV_MSG_RNDV_REPLY:
        return dec_slot_reply(b, m, err, el);
    case RKV_MSG_REGISTER:
    case RKV_MSG_TABLE_ENTRY:
        return dec_addr(b, m, err, el);
    case RKV_MSG_ERROR:
        assert(n <= RKV_PROTO_TEXT_MAX);
        memcpy(m->u.error.text, b, (size_t)n);
        m->u.error.text[n] = '\0';
        /* The text goes into logs and error messages as it is: a peer's
         * newline forged a log line of its own and its escape sequence
         * reached the terminal (an outside tester). One line, printable. */
        /* Bytes past 0x7f only as whole, valid UTF-8 of a character past
         * C1: a lone 0x9b is CSI and 0x85 NEL to a terminal that reads
         * 8-bit controls, and invalid sequences reached logs as they came
         * (an outside tester). Each other such byte is a '?'. */
        for (uint32_t i = 0; i < n;) {
            unsigned char *ch = (unsigned char *)&m->u.error.text[i];
            uint32_t len = proto_utf8_len(ch, n - i);
            if (len > 1) {
                i += len;
                continue;
            }
            if (*ch == '\n' || *ch == '\r' || *ch == '\t')
                *ch = ' ';
            else if ((*ch < 0x20 && *ch != '\0') || *ch >= 0x7f)
                *ch = '?';
            i++;
        }
        return 0;
    default:
        assert(n == 0);
        return 0;
    }
}

/* The bytes of the union a message of this type fills (dec_body): the
 * decoder zeroes and copies those, not the whole 264-byte union. A message
 * is decoded onto the stack of a task that ran last a while ago: in the
 * twin at 1,024 nodes and more, every line of it written was a cache miss,
 * (a push or a pull fills 16 of the 264 bytes). */
static size_t dec_union_bytes(uint8_t type)
{
    struct rkv_msg m;
    switch (type) {
    case RKV_MSG_HELLO:
    case RKV_MSG_HELLO_REPLY:
        return sizeof(m.u.hello) > sizeof(m.u.hello_reply) ? sizeof(m.u.hello)
                                                           : sizeof(m.u.hello_reply);
    case RKV_MSG_INIT:
    case RKV_MSG_META_REPLY:
        return sizeof(m.u.tensor);
    case RKV_MSG_META:
        return sizeof(m.u.name);
    case RKV_MSG_PUSH:
        return sizeof(m.u.push);
    case RKV_MSG_PULL:
        return sizeof(m.u.pull);
    case RKV_MSG_PULL_REPLY:
        return sizeof(m.u.rows);
    case RKV_MSG_PULL_ZC:
        return sizeof(m.u.pull_zc);
    case RKV_MSG_LIST_REPLY:
        return sizeof(m.u.list);
    case RKV_MSG_RNDV_START:
        return sizeof(m.u.rndv_bytes);
    case RKV_MSG_RNDV_REPLY:
        return sizeof(m.u.slot);
    case RKV_MSG_REGISTER:
    case RKV_MSG_TABLE_ENTRY:
        return sizeof(m.u.addr);
    case RKV_MSG_ERROR:
        return sizeof(m.u.error);
    default:
        return 0; /* no body */
    }
}

int rkv_proto_decode(const void *buf, size_t len, struct rkv_msg *msg, char *err, size_t el)
{
    struct rkv_msg m;
    int rc = rkv_proto_decode_hdr(buf, len, &m.h, err, el);
    if (rc < 0)
        return rc;
    size_t body_len = len - RKV_PROTO_HDR_BYTES;
    if (m.h.payload_len != body_len)
        return rkv_errf(err, el, -RKV_EPROTO,
                        "payload_len %llu does not match buffer (%zu bytes after header)",
                        (unsigned long long)m.h.payload_len, body_len);
    /* Only the type's member is defined afterwards (the others are not
     * zeroed), and msg is untouched unless the whole message is valid. */
    size_t u_bytes = dec_union_bytes(m.h.type);
    assert(u_bytes <= sizeof(m.u));
    memset(&m.u, 0, u_bytes);
    rc = dec_body((const uint8_t *)buf + RKV_PROTO_HDR_BYTES, body_len, &m, err, el);
    if (rc == 0)
        memcpy(msg, &m, offsetof(struct rkv_msg, u) + u_bytes);
    return rc;
}

/* ---- encoders ---- */

size_t rkv_proto_put_hdr(void *buf, const struct rkv_hdr *h)
{
    uint8_t *b = buf;
    assert(b && h && proto_type_valid(h->type));
    st32(b + OFF_MAGIC, RKV_PROTO_MAGIC);
    b[OFF_VERSION] = RKV_PROTO_VERSION;
    b[OFF_TYPE] = h->type;
    st16(b + OFF_FLAGS, h->flags);
    st64(b + OFF_REQ_ID, h->req_id);
    st32(b + OFF_TENSOR_ID, h->tensor_id);
    st32(b + OFF_SENDER, h->sender);
    st32(b + OFF_COUNT, h->count);
    st32(b + OFF_ROW_BYTES, h->row_bytes);
    st32(b + OFF_STATUS, (uint32_t)h->status);
    st16(b + OFF_OP, h->op);
    st16(b + OFF_CREDITS, h->credits);
    memcpy(b + OFF_PARAM, &h->param, sizeof(h->param));
    st64(b + OFF_PAYLOAD_LEN, h->payload_len);
    st32(b + OFF_RELEASE, h->release);
    st32(b + OFF_RESERVED, 0);
    return RKV_PROTO_HDR_BYTES;
}

/* Writes the header for a body of body_len bytes; returns where it goes. */
static uint8_t *enc_begin(void *buf, struct rkv_hdr *h, uint64_t body_len)
{
    h->payload_len = body_len;
    rkv_proto_put_hdr(buf, h);
    return (uint8_t *)buf + RKV_PROTO_HDR_BYTES;
}

static size_t enc_total(const struct rkv_hdr *h)
{
    return RKV_PROTO_HDR_BYTES + (size_t)h->payload_len;
}

size_t rkv_proto_enc_hello(void *buf, struct rkv_hdr *h, const struct rkv_wire_hello *w)
{
    assert(h->type == RKV_MSG_HELLO);
    uint8_t *b = enc_begin(buf, h, proto_fixed_body[RKV_MSG_HELLO]);
    st32(b, w->machine_id);
    st32(b + 4, w->want_id);
    st64(b + 8, w->nonce);
    st64(b + 16, w->cluster);
    st32(b + 24, w->rx_depth);
    st32(b + 28, w->ctrl_buf_bytes);
    return enc_total(h);
}

size_t rkv_proto_enc_addr(void *buf, struct rkv_hdr *h, const struct rkv_wire_addr *a)
{
    assert(h->type == RKV_MSG_REGISTER || h->type == RKV_MSG_TABLE_ENTRY);
    uint8_t *b = enc_begin(buf, h, RKV_PROTO_ADDR_BYTES);
    st64(b, a->cluster);
    st32(b + 8, a->server_id);
    st32(b + 12, a->port);
    memset(b + 16, 0, RKV_PROTO_HOST_MAX + 1);
    memcpy(b + 16, a->host, strnlen(a->host, RKV_PROTO_HOST_MAX));
    return enc_total(h);
}

size_t rkv_proto_enc_hello_reply(void *buf, struct rkv_hdr *h, const struct rkv_wire_hello_reply *r)
{
    assert(h->type == RKV_MSG_HELLO_REPLY);
    uint8_t *b = enc_begin(buf, h, proto_fixed_body[RKV_MSG_HELLO_REPLY]);
    st32(b, r->client_id);
    st32(b + 4, r->n_workers);
    st32(b + 8, r->rx_depth);
    st32(b + 12, r->n_servers);
    st32(b + 16, r->ctrl_buf_bytes);
    st32(b + 20, r->push_slots);
    return enc_total(h);
}

/* Always writes all RKV_NAME_MAX + 1 bytes so no stale memory leaks out. */
static void enc_name(uint8_t *b, const char *name)
{
    memset(b, 0, RKV_NAME_MAX + 1);
    memcpy(b, name, strnlen(name, RKV_NAME_MAX));
}

static void enc_tensor_fields(uint8_t *b, const struct rkv_wire_tensor *t)
{
    enc_name(b + TOFF_NAME, t->name);
    st32(b + TOFF_DTYPE, t->dtype);
    st32(b + TOFF_POLICY, t->policy);
    st32(b + TOFF_ROW_LEN, t->row_len);
    st32(b + TOFF_INIT, t->init);
    st64(b + TOFF_ROWS, t->rows);
    st64(b + TOFF_INIT_SEED, t->init_seed);
    st32(b + TOFF_WITH_STATE, t->with_state);
    st32(b + TOFF_BOOK_LEN, t->book_len);
}

size_t rkv_proto_enc_tensor_local(void *buf, struct rkv_hdr *h, const struct rkv_wire_tensor *t,
                                  const uint32_t *book, const uint64_t *local)
{
    assert(proto_has_tensor(h->type));
    assert(t->book_len == 0 || book);
    assert(!local || (t->book_len > 0 && t->policy == RKV_PART_EXPLICIT));
    h->count = local ? 1 : 0;
    uint8_t *b = enc_begin(buf, h, rkv_proto_tensor_body_bytes(t->book_len, local != NULL));
    enc_tensor_fields(b, t);
    size_t book_bytes = (size_t)t->book_len * 4, padded = (book_bytes + 7) & ~(size_t)7;
    if (t->book_len)
        memcpy(b + RKV_PROTO_TENSOR_BYTES, book, book_bytes);
    if (local) {
        memset(b + RKV_PROTO_TENSOR_BYTES + book_bytes, 0, padded - book_bytes);
        memcpy(b + RKV_PROTO_TENSOR_BYTES + padded, local, (size_t)t->book_len * 8);
    }
    return enc_total(h);
}

size_t rkv_proto_enc_tensor(void *buf, struct rkv_hdr *h, const struct rkv_wire_tensor *t,
                            const uint32_t *book)
{
    return rkv_proto_enc_tensor_local(buf, h, t, book, NULL);
}

size_t rkv_proto_enc_list_reply(void *buf, struct rkv_hdr *h)
{
    assert(h->type == RKV_MSG_LIST_REPLY && h->count <= RKV_PROTO_MAX_TENSORS);
    enc_begin(buf, h, (uint64_t)h->count * RKV_PROTO_LIST_ENTRY_BYTES);
    return enc_total(h);
}

void rkv_proto_put_list_entry(void *buf, uint32_t i, const struct rkv_wire_tensor *t, uint32_t id)
{
    assert(id >= 1 && id <= RKV_PROTO_MAX_TENSORS);
    uint8_t *e = (uint8_t *)buf + RKV_PROTO_HDR_BYTES + (size_t)i * RKV_PROTO_LIST_ENTRY_BYTES;
    enc_tensor_fields(e, t);
    st32(e + RKV_PROTO_TENSOR_BYTES, id);
    st32(e + RKV_PROTO_TENSOR_BYTES + 4, 0);
}

void rkv_proto_list_entry(const struct rkv_msg *m, uint32_t i, struct rkv_wire_tensor *t,
                          uint32_t *id_p)
{
    assert(m->h.type == RKV_MSG_LIST_REPLY && i < m->h.count);
    const uint8_t *e = m->u.list + (size_t)i * RKV_PROTO_LIST_ENTRY_BYTES;
    char err[8];
    int rc = dec_tensor_fields(e, t, "", err, sizeof(err));
    assert(rc == 0); /* the decoder checked every entry */
    (void)rc;
    *id_p = ld32(e + RKV_PROTO_TENSOR_BYTES);
}

size_t rkv_proto_enc_meta(void *buf, struct rkv_hdr *h, const char *name)
{
    assert(h->type == RKV_MSG_META && name);
    enc_name(enc_begin(buf, h, proto_fixed_body[RKV_MSG_META]), name);
    return enc_total(h);
}

size_t rkv_proto_enc_push(void *buf, struct rkv_hdr *h, const uint64_t *ids, const void *rows)
{
    assert(h->type == RKV_MSG_PUSH);
    uint64_t body = rkv_proto_body_bytes(RKV_MSG_PUSH, h->count, h->row_bytes, 0);
    assert(body > 0);
    uint8_t *b = enc_begin(buf, h, body);
    size_t ids_len = (size_t)h->count * 8;
    if (ids)
        memcpy(b, ids, ids_len);
    if (rows)
        memcpy(b + ids_len, rows, (size_t)h->count * h->row_bytes);
    return enc_total(h);
}

static void enc_slot_desc(uint8_t *b, const struct rkv_slot_desc *s)
{
    st64(b + SOFF_ADDR, s->addr);
    st32(b + SOFF_RKEY, s->rkey);
    st32(b + SOFF_SLOT, s->slot);
    st64(b + SOFF_CAP, s->cap);
}

size_t rkv_proto_enc_pull(void *buf, struct rkv_hdr *h, const struct rkv_slot_desc *reply_to,
                          const uint64_t *ids)
{
    assert(h->type == RKV_MSG_PULL && reply_to);
    uint64_t body = rkv_proto_body_bytes(RKV_MSG_PULL, h->count, h->row_bytes, 0);
    assert(body > 0);
    uint8_t *b = enc_begin(buf, h, body);
    enc_slot_desc(b, reply_to);
    if (ids)
        memcpy(b + RKV_PROTO_SLOT_BYTES, ids, (size_t)h->count * 8);
    return enc_total(h);
}

size_t rkv_proto_enc_pull_zc(void *buf, struct rkv_hdr *h, const struct rkv_slot_desc *dst,
                             const uint64_t *ids, const uint32_t *pos)
{
    assert(h->type == RKV_MSG_PULL_ZC && dst && dst->slot == 0);
    uint64_t body = rkv_proto_body_bytes(RKV_MSG_PULL_ZC, h->count, h->row_bytes, 0);
    assert(body > 0);
    uint8_t *b = enc_begin(buf, h, body);
    enc_slot_desc(b, dst);
    size_t ids_len = (size_t)h->count * 8;
    if (ids)
        memcpy(b + RKV_PROTO_SLOT_BYTES, ids, ids_len);
    if (pos)
        memcpy(b + RKV_PROTO_SLOT_BYTES + ids_len, pos, (size_t)h->count * 4);
    return enc_total(h);
}

size_t rkv_proto_enc_pull_reply(void *buf, struct rkv_hdr *h)
{
    assert(h->type == RKV_MSG_PULL_REPLY);
    uint64_t body = rkv_proto_body_bytes(RKV_MSG_PULL_REPLY, h->count, h->row_bytes, 0);
    assert(body > 0);
    enc_begin(buf, h, body);
    return enc_total(h);
}

size_t rkv_proto_enc_rndv_start(void *buf, struct rkv_hdr *h, uint64_t bytes)
{
    assert(h->type == RKV_MSG_RNDV_START);
    st64(enc_begin(buf, h, proto_fixed_body[RKV_MSG_RNDV_START]), bytes);
    return enc_total(h);
}

size_t rkv_proto_enc_slot(void *buf, struct rkv_hdr *h, const struct rkv_slot_desc *s)
{
    assert(h->type == RKV_MSG_RNDV_REPLY && s);
    enc_slot_desc(enc_begin(buf, h, proto_fixed_body[RKV_MSG_RNDV_REPLY]), s);
    return enc_total(h);
}

/* Longer texts are cut: an error report must never fail to encode. */
size_t rkv_proto_enc_error(void *buf, size_t cap, struct rkv_hdr *h, const char *text)
{
    assert(h->type == RKV_MSG_ERROR && text && cap >= RKV_PROTO_HDR_BYTES);
    size_t room = cap - RKV_PROTO_HDR_BYTES;
    size_t n = strnlen(text, room < RKV_PROTO_TEXT_MAX ? room : RKV_PROTO_TEXT_MAX);
    memcpy(enc_begin(buf, h, n), text, n);
    return enc_total(h);
}

size_t rkv_proto_enc_empty(void *buf, struct rkv_hdr *h)
{
    assert(proto_type_valid(h->type) && proto_fixed_body[h->type] == 0);
    enc_begin(buf, h, 0);
    return enc_total(h);
}

void rkv_proto_patch_flow(void *buf, uint16_t credits, uint32_t release)
{
    uint8_t *b = buf;
    assert(b && ld32(b + OFF_MAGIC) == RKV_PROTO_MAGIC);
    st16(b + OFF_CREDITS, credits);
    st32(b + OFF_RELEASE, release);
}

uint8_t rkv_proto_hdr_type(const void *buf)
{
    const uint8_t *b = buf;
    assert(b && ld32(b + OFF_MAGIC) == RKV_PROTO_MAGIC);
    return b[OFF_TYPE];
}

uint64_t rkv_proto_hdr_req_id(const void *buf)
{
    const uint8_t *b = buf;
    assert(b && ld32(b + OFF_MAGIC) == RKV_PROTO_MAGIC);
    return ld64(b + OFF_REQ_ID);
}

uint32_t rkv_proto_hdr_tensor_id(const void *buf)
{
    const uint8_t *b = buf;
    assert(b && ld32(b + OFF_MAGIC) == RKV_PROTO_MAGIC);
    return ld32(b + OFF_TENSOR_ID);
}
