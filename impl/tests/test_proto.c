/* Unit tests of the wire format: round trips of every message type, and a
 * decoder that rejects each bad field without reading outside its buffer
 * (run under ASan: the hostile buffers are allocated at their exact size). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "proto/proto.h"
#include "rkv.h"

#define BUF_BYTES 4096
#define ERR_BYTES 256

/* Header offsets, restated from proto.h so a layout change breaks tests. */
enum {
    O_MAGIC = 0,
    O_VERSION = 4,
    O_TYPE = 5,
    O_FLAGS = 6,
    O_COUNT = 24,
    O_ROW_BYTES = 28,
    O_STATUS = 32,
    O_OP = 36,
    O_CREDITS = 38,
    O_PAYLOAD = 48,
    O_RELEASE = 56,
    O_RESERVED = 60,
};
/* Tensor body offsets, relative to the start of the message. */
enum {
    T_NAME = 64,
    T_DTYPE = 64 + 64,
    T_POLICY = 64 + 68,
    T_ROW_LEN = 64 + 72,
    T_INIT = 64 + 76,
    T_ROWS = 64 + 80,
    T_WITH_STATE = 64 + 96,
    T_BOOK_LEN = 64 + 100,
};

static void w16(uint8_t *b, size_t off, uint16_t v)
{
    memcpy(b + off, &v, sizeof(v));
}

static void w32(uint8_t *b, size_t off, uint32_t v)
{
    memcpy(b + off, &v, sizeof(v));
}

static void w64(uint8_t *b, size_t off, uint64_t v)
{
    memcpy(b + off, &v, sizeof(v));
}

static uint64_t r64(const uint8_t *b, size_t off)
{
    uint64_t v;
    memcpy(&v, b + off, sizeof(v));
    return v;
}

/* A header with every field set to something recognisable. */
static struct rkv_hdr hdr_of(int type)
{
    return (struct rkv_hdr){.type = (uint8_t)type,
                            .req_id = 0x0102030405060708ull,
                            .tensor_id = 7,
                            .sender = 0x10000003,
                            .status = -RKV_ENOTENSOR,
                            .op = RKV_OP_SGD,
                            .credits = 9,
                            .param = 0.25,
                            .release = 4};
}

static void assert_hdr_equal(const struct rkv_hdr *a, const struct rkv_hdr *b)
{
    assert_int_equal(a->type, b->type);
    assert_int_equal(a->flags, 0);
    assert_int_equal(a->req_id, b->req_id);
    assert_int_equal(a->tensor_id, b->tensor_id);
    assert_int_equal(a->sender, b->sender);
    assert_int_equal(a->count, b->count);
    assert_int_equal(a->row_bytes, b->row_bytes);
    assert_int_equal(a->status, b->status);
    assert_int_equal(a->op, b->op);
    assert_int_equal(a->credits, b->credits);
    assert_true(a->param == b->param);
    assert_int_equal(a->payload_len, b->payload_len);
    assert_int_equal(a->release, b->release);
}

/* Decodes buf[0..len) from an exact-size copy, so ASan sees any overread. */
static int decode_exact(const uint8_t *buf, size_t len, struct rkv_msg *m, char *err)
{
    uint8_t *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    memcpy(copy, buf, len);
    int rc = rkv_proto_decode(copy, len, m, err, ERR_BYTES);
    free(copy);
    return rc;
}

/* The decoder must reject buf with a message mentioning `field`. */
static void expect_reject(const uint8_t *buf, size_t len, const char *field)
{
    char err[ERR_BYTES] = "";
    struct rkv_msg m;
    memset(&m, 0x5a, sizeof(m));
    assert_int_equal(decode_exact(buf, len, &m, err), -RKV_EPROTO);
    if (!strstr(err, field))
        fail_msg("error \"%s\" does not name \"%s\"", err, field);
    /* Outputs are set only on success. */
    assert_int_equal(m.h.type, 0x5a);
}

static void expect_ok(const uint8_t *buf, size_t len, struct rkv_msg *m)
{
    char err[ERR_BYTES] = "";
    int rc = rkv_proto_decode(buf, len, m, err, sizeof(err));
    if (rc != 0)
        fail_msg("decode failed: %s", err);
}

/* ---- valid samples of every type ---- */

static const uint32_t sample_book[5] = {2, 0, 1, 1, 0};

static const struct rkv_wire_hello HELLO_SAMPLE = {.machine_id = 3,
                                                   .want_id = RKV_ID_NONE,
                                                   .nonce = 0xabcdef,
                                                   .cluster = 0x5eed,
                                                   .rx_depth = 128,
                                                   .ctrl_buf_bytes = 2048};

static const struct rkv_wire_hello_reply HELLO_REPLY_SAMPLE = {.client_id = 4,
                                                               .n_workers = 8,
                                                               .rx_depth = 32,
                                                               .n_servers = 6,
                                                               .ctrl_buf_bytes = 4096,
                                                               .push_slots = 16};

static struct rkv_wire_tensor sample_tensor(enum rkv_policy policy)
{
    struct rkv_wire_tensor t = {.dtype = RKV_F32,
                                .policy = policy,
                                .row_len = 4,
                                .init = 1,
                                .rows = 5,
                                .init_seed = 99,
                                .with_state = 1,
                                .book_len = policy == RKV_PART_EXPLICIT ? 5 : 0};
    strcpy(t.name, "emb");
    return t;
}

static size_t enc_rows_sample(uint8_t *buf, int type)
{
    static const uint64_t ids[3] = {5, 0, 1ull << 39};
    uint8_t rows[3 * 16];
    for (size_t i = 0; i < sizeof(rows); i++)
        rows[i] = (uint8_t)(i * 3 + 1);
    struct rkv_hdr h = hdr_of(type);
    h.count = 3;
    h.row_bytes = 16;
    if (type == RKV_MSG_PUSH)
        return rkv_proto_enc_push(buf, &h, ids, rows);
    if (type == RKV_MSG_PULL) {
        struct rkv_slot_desc d = {.addr = 0xdead0000, .rkey = 3, .slot = 1, .cap = 4096};
        return rkv_proto_enc_pull(buf, &h, &d, ids);
    }
    if (type == RKV_MSG_PULL_ZC) {
        /* Scattered, one position twice: a caller may pull a row twice. */
        static const uint32_t pos[3] = {4, 0, 4};
        struct rkv_slot_desc d = {.addr = 0x7f0000100000, .rkey = 9, .cap = 5 * 16};
        return rkv_proto_enc_pull_zc(buf, &h, &d, ids, pos);
    }
    size_t n = rkv_proto_enc_pull_reply(buf, &h);
    memcpy(buf + RKV_PROTO_HDR_BYTES, rows, sizeof(rows));
    return n;
}

/* Encodes a valid message of `type` into buf (BUF_BYTES) and returns its length. */
static size_t enc_sample(uint8_t *buf, int type)
{
    struct rkv_hdr h = hdr_of(type);
    struct rkv_slot_desc d = {.addr = 0x7f0000001000, .rkey = 11, .slot = 2, .cap = 1 << 20};
    switch (type) {
    case RKV_MSG_HELLO:
        return rkv_proto_enc_hello(buf, &h, &HELLO_SAMPLE);
    case RKV_MSG_HELLO_REPLY:
        return rkv_proto_enc_hello_reply(buf, &h, &HELLO_REPLY_SAMPLE);
    case RKV_MSG_INIT: {
        struct rkv_wire_tensor t = sample_tensor(RKV_PART_RANGE);
        return rkv_proto_enc_tensor(buf, &h, &t, NULL);
    }
    case RKV_MSG_META_REPLY: {
        struct rkv_wire_tensor t = sample_tensor(RKV_PART_EXPLICIT);
        return rkv_proto_enc_tensor(buf, &h, &t, sample_book);
    }
    case RKV_MSG_META:
        return rkv_proto_enc_meta(buf, &h, "emb");
    case RKV_MSG_PUSH:
    case RKV_MSG_PULL:
    case RKV_MSG_PULL_REPLY:
    case RKV_MSG_PULL_ZC:
        return enc_rows_sample(buf, type);
    case RKV_MSG_RNDV_START:
        return rkv_proto_enc_rndv_start(buf, &h, 1 << 20);
    case RKV_MSG_RNDV_REPLY:
        return rkv_proto_enc_slot(buf, &h, &d);
    case RKV_MSG_ERROR:
        return rkv_proto_enc_error(buf, 64 + RKV_PROTO_TEXT_MAX, &h, "no such tensor");
    case RKV_MSG_LIST_REPLY: {
        struct rkv_wire_tensor t0 = sample_tensor(RKV_PART_RANGE);
        struct rkv_wire_tensor t1 = sample_tensor(RKV_PART_EXPLICIT);
        strcpy(t1.name, "feat");
        h.count = 2;
        size_t n = rkv_proto_enc_list_reply(buf, &h);
        rkv_proto_put_list_entry(buf, 0, &t0, 1);
        rkv_proto_put_list_entry(buf, 1, &t1, 3);
        return n;
    }
    case RKV_MSG_REGISTER:
    case RKV_MSG_TABLE_ENTRY: {
        struct rkv_wire_addr a = {.cluster = 77, .server_id = 3, .port = 29503};
        snprintf(a.host, sizeof(a.host), "10.1.2.3");
        return rkv_proto_enc_addr(buf, &h, &a);
    }
    default:
        return rkv_proto_enc_empty(buf, &h);
    }
}

static uint8_t *buf_new(void)
{
    /* calloc: 16-byte aligned, so decoded ids/rows are 8-byte aligned. */
    uint8_t *b = calloc(1, BUF_BYTES);
    assert_non_null(b);
    return b;
}

/* ---- round trips ---- */

static void test_roundtrip_hello(void **state)
{
    (void)state;
    uint8_t *b = buf_new();
    struct rkv_msg m;
    struct rkv_hdr h = hdr_of(RKV_MSG_HELLO);
    size_t n = rkv_proto_enc_hello(b, &h, &HELLO_SAMPLE);
    assert_int_equal(n, 64 + 32);
    assert_int_equal(h.payload_len, 32);
    expect_ok(b, n, &m);
    assert_hdr_equal(&m.h, &h);
    assert_int_equal(m.u.hello.machine_id, 3);
    assert_int_equal(m.u.hello.want_id, RKV_ID_NONE);
    assert_int_equal(m.u.hello.nonce, 0xabcdef);
    assert_int_equal(m.u.hello.cluster, 0x5eed);
    assert_int_equal(m.u.hello.rx_depth, 128);
    assert_int_equal(m.u.hello.ctrl_buf_bytes, 2048);

    h = hdr_of(RKV_MSG_HELLO_REPLY);
    n = rkv_proto_enc_hello_reply(b, &h, &HELLO_REPLY_SAMPLE);
    assert_int_equal(n, 64 + 24);
    expect_ok(b, n, &m);
    assert_hdr_equal(&m.h, &h);
    assert_int_equal(m.u.hello_reply.client_id, 4);
    assert_int_equal(m.u.hello_reply.n_workers, 8);
    assert_int_equal(m.u.hello_reply.rx_depth, 32);
    assert_int_equal(m.u.hello_reply.n_servers, 6);
    assert_int_equal(m.u.hello_reply.ctrl_buf_bytes, 4096);
    assert_int_equal(m.u.hello_reply.push_slots, 16);
    free(b);
}

static void test_roundtrip_tensor(void **state)
{
    (void)state;
    uint8_t *b = buf_new();
    struct rkv_msg m;
    struct rkv_hdr h = hdr_of(RKV_MSG_INIT);
    struct rkv_wire_tensor t = sample_tensor(RKV_PART_RANGE);
    size_t n = rkv_proto_enc_tensor(b, &h, &t, NULL);
    assert_int_equal(n, 64 + 104);
    expect_ok(b, n, &m);
    assert_hdr_equal(&m.h, &h);
    assert_string_equal(m.u.tensor.t.name, "emb");
    assert_int_equal(m.u.tensor.t.dtype, RKV_F32);
    assert_int_equal(m.u.tensor.t.policy, RKV_PART_RANGE);
    assert_int_equal(m.u.tensor.t.row_len, 4);
    assert_int_equal(m.u.tensor.t.init, 1);
    assert_int_equal(m.u.tensor.t.rows, 5);
    assert_int_equal(m.u.tensor.t.init_seed, 99);
    assert_int_equal(m.u.tensor.t.with_state, 1);
    assert_int_equal(m.u.tensor.t.book_len, 0);
    assert_null(m.u.tensor.book);

    h = hdr_of(RKV_MSG_META_REPLY);
    t = sample_tensor(RKV_PART_EXPLICIT);
    n = rkv_proto_enc_tensor(b, &h, &t, sample_book);
    assert_int_equal(n, 64 + 104 + 5 * 4);
    expect_ok(b, n, &m);
    assert_int_equal(m.h.type, RKV_MSG_META_REPLY);
    assert_int_equal(m.u.tensor.t.book_len, 5);
    assert_ptr_equal(m.u.tensor.book, b + 64 + 104);
    assert_memory_equal(m.u.tensor.book, sample_book, sizeof(sample_book));
    free(b);
}

static void test_roundtrip_meta(void **state)
{
    (void)state;
    uint8_t *b = buf_new();
    struct rkv_msg m;
    struct rkv_hdr h = hdr_of(RKV_MSG_META);
    char longest[RKV_NAME_MAX + 1];
    memset(longest, 'n', RKV_NAME_MAX);
    longest[RKV_NAME_MAX] = '\0';
    size_t n = rkv_proto_enc_meta(b, &h, longest);
    assert_int_equal(n, 64 + 64);
    expect_ok(b, n, &m);
    assert_hdr_equal(&m.h, &h);
    assert_string_equal(m.u.name, longest);
    free(b);
}

static void test_roundtrip_push(void **state)
{
    (void)state;
    uint8_t *b = buf_new();
    struct rkv_msg m;
    size_t n = enc_sample(b, RKV_MSG_PUSH);
    assert_int_equal(n, 64 + 3 * 8 + 3 * 16);
    expect_ok(b, n, &m);
    assert_int_equal(m.h.count, 3);
    assert_int_equal(m.h.row_bytes, 16);
    assert_int_equal(m.h.op, RKV_OP_SGD);
    assert_true(m.h.param == 0.25);
    assert_ptr_equal(m.u.push.ids, b + 64);
    assert_ptr_equal(m.u.push.rows, b + 64 + 24);
    assert_int_equal(m.u.push.ids[0], 5);
    assert_int_equal(m.u.push.ids[2], 1ull << 39);
    assert_int_equal(m.u.push.rows[0], 1);
    assert_int_equal(m.u.push.rows[47], (uint8_t)(47 * 3 + 1));

    /* NULL ids and rows leave the body for the caller to fill. */
    struct rkv_hdr h = hdr_of(RKV_MSG_PUSH);
    h.count = 2;
    h.row_bytes = 8;
    memset(b, 0xee, BUF_BYTES);
    n = rkv_proto_enc_push(b, &h, NULL, NULL);
    assert_int_equal(n, 64 + 2 * 16);
    assert_int_equal(b[64], 0xee);
    expect_ok(b, n, &m);
    free(b);
}

static void test_roundtrip_pull(void **state)
{
    (void)state;
    uint8_t *b = buf_new();
    struct rkv_msg m;
    size_t n = enc_sample(b, RKV_MSG_PULL);
    assert_int_equal(n, 64 + 24 + 3 * 8);
    expect_ok(b, n, &m);
    assert_int_equal(m.u.pull.reply_to.addr, 0xdead0000);
    assert_int_equal(m.u.pull.reply_to.rkey, 3);
    assert_int_equal(m.u.pull.reply_to.slot, 1);
    assert_int_equal(m.u.pull.reply_to.cap, 4096);
    assert_ptr_equal(m.u.pull.ids, b + 64 + 24);
    assert_int_equal(m.u.pull.ids[1], 0);
    assert_int_equal(m.u.pull.ids[2], 1ull << 39);

    n = enc_sample(b, RKV_MSG_PULL_REPLY);
    assert_int_equal(n, 64 + 3 * 16);
    expect_ok(b, n, &m);
    assert_ptr_equal(m.u.rows, b + 64);
    assert_int_equal(m.u.rows[5], 16);
    free(b);
}

/* A zero-copy pull names where each row goes; a position outside the
 * offered region (the server would write past the caller's buffer) and a
 * region that wraps are refused before anything is written. */
static void test_roundtrip_pull_zc(void **state)
{
    (void)state;
    uint8_t *b = buf_new();
    struct rkv_msg m;
    size_t n = enc_sample(b, RKV_MSG_PULL_ZC);
    assert_int_equal(n, 64 + 24 + 3 * 8 + 3 * 4);
    expect_ok(b, n, &m);
    assert_int_equal(m.u.pull_zc.dst.addr, 0x7f0000100000);
    assert_int_equal(m.u.pull_zc.dst.rkey, 9);
    assert_int_equal(m.u.pull_zc.dst.cap, 80);
    assert_int_equal(m.u.pull_zc.ids[2], 1ull << 39);
    assert_int_equal(m.u.pull_zc.pos[0], 4);
    assert_int_equal(m.u.pull_zc.pos[2], 4);
    uint8_t *pos = b + 64 + 24 + 3 * 8;
    pos[4] = 5; /* row 1 to position 5 of a 5-row region */
    expect_reject(b, n, "position 5 of row 1 outside the 80-byte region");
    pos[4] = 0;
    b[64 + 16] = 79; /* the region is one byte short of 5 rows: position 4 is out */
    expect_reject(b, n, "position 4 of row 0");
    b[64 + 16] = 80;
    b[64 + 12] = 1; /* the slot field of a region */
    expect_reject(b, n, "slot 1 must be 0");
    b[64 + 12] = 0;
    memset(b + 64, 0xff, 8); /* addr + len wraps */
    expect_reject(b, n, "wraps");
    enc_sample(b, RKV_MSG_PULL_DONE);
    expect_ok(b, 64, &m);
    assert_string_equal(rkv_msg_type_name(RKV_MSG_PULL_DONE), "PULL_DONE");
    free(b);
}

static void test_roundtrip_rndv(void **state)
{
    (void)state;
    uint8_t *b = buf_new();
    struct rkv_msg m;
    size_t n = enc_sample(b, RKV_MSG_RNDV_START);
    assert_int_equal(n, 64 + 8);
    expect_ok(b, n, &m);
    assert_int_equal(m.u.rndv_bytes, 1 << 20);

    n = enc_sample(b, RKV_MSG_RNDV_REPLY);
    assert_int_equal(n, 64 + 24);
    expect_ok(b, n, &m);
    assert_int_equal(m.u.slot.addr, 0x7f0000001000);
    assert_int_equal(m.u.slot.rkey, 11);
    assert_int_equal(m.u.slot.slot, 2);
    assert_int_equal(m.u.slot.cap, 1 << 20);
    free(b);
}

static void test_roundtrip_error(void **state)
{
    (void)state;
    uint8_t *b = buf_new();
    struct rkv_msg m;
    size_t n = enc_sample(b, RKV_MSG_ERROR);
    assert_int_equal(n, 64 + strlen("no such tensor"));
    expect_ok(b, n, &m);
    assert_int_equal(m.h.status, -RKV_ENOTENSOR);
    assert_string_equal(m.u.error.text, "no such tensor");

    /* Too long a text is cut to the limit rather than making a bad message. */
    char text[RKV_PROTO_TEXT_MAX + 50];
    memset(text, 'x', sizeof(text) - 1);
    text[sizeof(text) - 1] = '\0';
    struct rkv_hdr h = hdr_of(RKV_MSG_ERROR);
    n = rkv_proto_enc_error(b, 64 + 2 * RKV_PROTO_TEXT_MAX, &h, text);
    assert_int_equal(n, 64 + RKV_PROTO_TEXT_MAX);
    expect_ok(b, n, &m);
    assert_int_equal(strlen(m.u.error.text), RKV_PROTO_TEXT_MAX);
    /* And to the buffer's room: a server's 256-byte reply buffer held 192
     * bytes of text, and a longer one ran 64 bytes past it. */
    h = hdr_of(RKV_MSG_ERROR);
    n = rkv_proto_enc_error(b, 256, &h, text);
    assert_int_equal(n, 256);
    expect_ok(b, n, &m);
    assert_int_equal(strlen(m.u.error.text), 256 - 64);

    h = hdr_of(RKV_MSG_ERROR);
    n = rkv_proto_enc_error(b, 64, &h, "");
    assert_int_equal(n, 64);
    expect_ok(b, n, &m);
    assert_string_equal(m.u.error.text, "");

    /* A peer's text is one printable line: its newline forged a log line
     * of its own, its escape reached the terminal (an outside tester). */
    h = hdr_of(RKV_MSG_ERROR);
    n = rkv_proto_enc_error(b, 256, &h,
                            "x\n[0.000001] WARN s1.0: forged\x1b[2J\r\tend\x7f \xc2\x85\xc2\x9b é");
    expect_ok(b, n, &m);
    assert_string_equal(m.u.error.text, "x [0.000001] WARN s1.0: forged?[2J  end? ???? é");
    /* C1 as single bytes (a terminal reading 8-bit controls takes 0x9b for
     * CSI), invalid and overlong UTF-8, a surrogate: each such byte a '?';
     * valid characters past C1 stay (an outside tester). */
    h = hdr_of(RKV_MSG_ERROR);
    n = rkv_proto_enc_error(b, 256, &h,
                            "a\x9b[2Jb\x85"
                            "c\xff\xc3"
                            "d\xc0\xaf"
                            "e\xed\xa0\x80"
                            "f\xe2\x82\xac\xf0\x9f\x98\x80\xc2\xa0g\xc3");
    expect_ok(b, n, &m);
    assert_string_equal(m.u.error.text, "a?[2Jb?c??d??e???f\xe2\x82\xac\xf0\x9f\x98\x80\xc2\xa0g?");
    free(b);
}

static void test_roundtrip_empty(void **state)
{
    (void)state;
    static const int types[] = {RKV_MSG_INIT_REPLY,    RKV_MSG_PUSH_ACK, RKV_MSG_BARRIER,
                                RKV_MSG_BARRIER_REPLY, RKV_MSG_SHUTDOWN, RKV_MSG_SHUTDOWN_ACK,
                                RKV_MSG_CREDIT};
    uint8_t *b = buf_new();
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        struct rkv_msg m;
        struct rkv_hdr h = hdr_of(types[i]);
        h.payload_len = 12345; /* computed, not taken from h */
        assert_int_equal(rkv_proto_enc_empty(b, &h), 64);
        assert_int_equal(h.payload_len, 0);
        expect_ok(b, 64, &m);
        assert_hdr_equal(&m.h, &h);
    }
    free(b);
}

static void test_patch_flow_and_hdr(void **state)
{
    (void)state;
    uint8_t *b = buf_new();
    struct rkv_msg m;
    size_t n = enc_sample(b, RKV_MSG_PUSH);
    rkv_proto_patch_flow(b, 0xfffe, 77);
    expect_ok(b, n, &m);
    assert_int_equal(m.h.credits, 0xfffe);
    assert_int_equal(m.h.release, 77);
    assert_int_equal(m.h.req_id, 0x0102030405060708ull);

    /* The header alone decodes before the body arrived. */
    struct rkv_hdr h;
    char err[ERR_BYTES];
    assert_int_equal(rkv_proto_decode_hdr(b, 64, &h, err, sizeof(err)), 0);
    assert_int_equal(h.payload_len, n - 64);
    assert_int_equal(h.type, RKV_MSG_PUSH);
    /* put_hdr writes payload_len as given. */
    h.payload_len = 999;
    assert_int_equal(rkv_proto_put_hdr(b, &h), 64);
    assert_int_equal(r64(b, O_PAYLOAD), 999);
    assert_int_equal(memcmp(b, "RKV1", 4), 0);
    free(b);
}

static void test_type_names_and_sizes(void **state)
{
    (void)state;
    assert_string_equal(rkv_msg_type_name(RKV_MSG_HELLO), "HELLO");
    assert_string_equal(rkv_msg_type_name(RKV_MSG_ERROR), "ERROR");
    assert_string_equal(rkv_msg_type_name(0), "UNKNOWN");
    assert_string_equal(rkv_msg_type_name(RKV_MSG_TYPE_MAX_), "UNKNOWN");
    assert_string_equal(rkv_msg_type_name(-1), "UNKNOWN");
    for (int t = 1; t < RKV_MSG_TYPE_MAX_; t++)
        assert_string_not_equal(rkv_msg_type_name(t), "UNKNOWN");

    assert_int_equal(rkv_proto_body_bytes(RKV_MSG_PUSH, 3, 16, 0), 3 * 8 + 3 * 16);
    assert_int_equal(rkv_proto_body_bytes(RKV_MSG_PULL, 3, 16, 0), 24 + 3 * 8);
    assert_int_equal(rkv_proto_body_bytes(RKV_MSG_PULL_REPLY, 3, 16, 0), 48);
    assert_int_equal(rkv_proto_body_bytes(RKV_MSG_INIT, 9, 9, 5), 104 + 20);
    assert_int_equal(rkv_proto_body_bytes(RKV_MSG_META_REPLY, 0, 0, UINT32_MAX),
                     104 + 4ull * UINT32_MAX);
    assert_int_equal(rkv_proto_body_bytes(RKV_MSG_HELLO, 5, 5, 5), 32);
    assert_int_equal(rkv_proto_body_bytes(RKV_MSG_META, 0, 0, 0), 64);
    assert_int_equal(rkv_proto_body_bytes(RKV_MSG_RNDV_START, 0, 0, 0), 8);
    assert_int_equal(rkv_proto_body_bytes(RKV_MSG_RNDV_REPLY, 0, 0, 0), 24);
    assert_int_equal(rkv_proto_body_bytes(RKV_MSG_BARRIER, 7, 7, 7), 0);
    /* Invalid inputs and sums that would overflow 64 bits give 0. */
    assert_int_equal(rkv_proto_body_bytes(RKV_MSG_PUSH, 0, 16, 0), 0);
    assert_int_equal(rkv_proto_body_bytes(RKV_MSG_PUSH, 3, 0, 0), 0);
    assert_int_equal(rkv_proto_body_bytes(RKV_MSG_PUSH, 1, RKV_PROTO_MAX_ROW_BYTES + 1, 0), 0);
    assert_int_equal(rkv_proto_body_bytes(RKV_MSG_PUSH, UINT32_MAX, UINT32_MAX, 0), 0);
    assert_int_equal(rkv_proto_body_bytes(0, 1, 1, 0), 0);
    assert_int_equal(rkv_proto_body_bytes(RKV_MSG_TYPE_MAX_, 1, 1, 0), 0);
}

/* ---- decoder: header fields ---- */

static void test_reject_header_fields(void **state)
{
    (void)state;
    uint8_t *b = buf_new();
    size_t n = enc_sample(b, RKV_MSG_PUSH);
    uint8_t *v = malloc(n);
    assert_non_null(v);
    struct rkv_msg m;

#define MUTATE(stmt, field)                                                                        \
    do {                                                                                           \
        memcpy(v, b, n);                                                                           \
        stmt;                                                                                      \
        expect_reject(v, n, field);                                                                \
    } while (0)

    MUTATE(v[O_MAGIC] ^= 1, "magic");
    MUTATE(w32(v, O_MAGIC, 0x52564b31), "magic"); /* big-endian "RKV1" */
    MUTATE(v[O_VERSION] = 0, "version");
    MUTATE(v[O_VERSION] = 1, "version"); /* the builds before RNDV_REVOKE */
    MUTATE(v[O_VERSION] = RKV_PROTO_VERSION + 1, "version");
    MUTATE(v[O_TYPE] = 0, "type 0");
    MUTATE(v[O_TYPE] = RKV_MSG_TYPE_MAX_, "type");
    MUTATE(v[O_TYPE] = 0xff, "type 255");
    MUTATE(w16(v, O_FLAGS, 1), "flags");
    MUTATE(w16(v, O_FLAGS, 0x8000), "flags");
    MUTATE(w32(v, O_RESERVED, 1), "reserved");
    MUTATE(w32(v, O_RESERVED, 0x80000000u), "reserved");
    MUTATE(w32(v, O_STATUS, 1), "status 1");
    MUTATE(w32(v, O_STATUS, INT32_MAX), "status");
    MUTATE(w16(v, O_OP, RKV_OP_MAX), "op 64");
    MUTATE(w16(v, O_OP, 0xffff), "op");
#undef MUTATE

    /* The edges of the valid ranges still decode. */
    memcpy(v, b, n);
    w32(v, O_STATUS, (uint32_t)INT32_MIN);
    w16(v, O_OP, RKV_OP_MAX - 1);
    expect_ok(v, n, &m);
    assert_int_equal(m.h.status, INT32_MIN);
    assert_int_equal(m.h.op, RKV_OP_MAX - 1);
    free(v);
    free(b);
}

static void test_addr_roundtrip_and_bounds(void **state)
{
    (void)state;
    uint8_t *b = buf_new();
    struct rkv_msg m;
    size_t n = enc_sample(b, RKV_MSG_REGISTER);
    assert_int_equal(n, 64 + RKV_PROTO_ADDR_BYTES);
    expect_ok(b, n, &m);
    assert_int_equal(m.u.addr.cluster, 77);
    assert_int_equal(m.u.addr.server_id, 3);
    assert_int_equal(m.u.addr.port, 29503);
    assert_string_equal(m.u.addr.host, "10.1.2.3");
    w32(b, 64 + 12, 0);
    expect_reject(b, n, "port 0 out of 1..65535");
    w32(b, 64 + 12, 70000);
    expect_reject(b, n, "port 70000");
    n = enc_sample(b, RKV_MSG_TABLE_ENTRY);
    memset(b + 64 + 16, 'x', 64); /* no NUL within the 64 host bytes */
    expect_reject(b, n, "host empty or not NUL-terminated");
    b[64 + 16] = 0; /* empty */
    expect_reject(b, n, "host empty or not NUL-terminated");
    /* Logged and dialled as it came: a newline forged a log line. */
    n = enc_sample(b, RKV_MSG_REGISTER);
    memcpy(b + 64 + 16, "10.1\n[0.1] WARN", 16);
    expect_reject(b, n, "host holds byte 0x0a at 4");
    free(b);
}

static void test_reject_truncated(void **state)
{
    (void)state;
    uint8_t *b = buf_new();
    for (int type = 1; type < RKV_MSG_TYPE_MAX_; type++) {
        size_t n = enc_sample(b, type);
        for (size_t len = 0; len < n; len++) {
            char err[ERR_BYTES];
            struct rkv_msg m;
            if (decode_exact(b, len, &m, err) != -RKV_EPROTO)
                fail_msg("%s truncated to %zu of %zu bytes was accepted", rkv_msg_type_name(type),
                         len, n);
        }
        /* One trailing byte too many is as bad as one too few. */
        b[n] = 0;
        expect_reject(b, n + 1, "does not match buffer");
    }
    expect_reject(b, 0, "shorter than the 64-byte header");
    expect_reject(b, 63, "63 bytes");
    free(b);
}

static void test_reject_payload_len(void **state)
{
    (void)state;
    uint8_t *b = buf_new();
    size_t n = enc_sample(b, RKV_MSG_PUSH);
    uint64_t body = n - 64;
    /* The header disagrees with count/row_bytes. */
    w64(b, O_PAYLOAD, body + 8);
    expect_reject(b, n, "payload_len 80");
    w64(b, O_PAYLOAD, body - 8);
    expect_reject(b, n, "payload_len 64");
    /* The header agrees with itself but not with the buffer. */
    w64(b, O_PAYLOAD, body);
    expect_reject(b, n - 8, "payload_len 72 does not match buffer (64 bytes after header)");
    /* 4 GiB, and 2^64 - 1: over the limit whatever the buffer. */
    w64(b, O_PAYLOAD, 4ull << 30);
    expect_reject(b, n, "payload_len 4294967296 exceeds");
    w64(b, O_PAYLOAD, UINT64_MAX);
    expect_reject(b, n, "payload_len");
    struct rkv_hdr h;
    char err[ERR_BYTES];
    w64(b, O_PAYLOAD, 4ull << 30);
    assert_int_equal(rkv_proto_decode_hdr(b, 64, &h, err, sizeof(err)), -RKV_EPROTO);

    /* Fixed-size and empty bodies must be exactly their size. */
    n = enc_sample(b, RKV_MSG_HELLO);
    w64(b, O_PAYLOAD, 23);
    expect_reject(b, n - 1, "HELLO: payload_len 23");
    n = enc_sample(b, RKV_MSG_BARRIER);
    w64(b, O_PAYLOAD, 8);
    expect_reject(b, n + 8, "BARRIER: payload_len 8");
    n = enc_sample(b, RKV_MSG_INIT);
    w64(b, O_PAYLOAD, 100);
    expect_reject(b, 164, "INIT: payload_len 100");
    free(b);
}

static void set_rows_hdr(uint8_t *b, uint32_t count, uint32_t row_bytes, uint64_t payload)
{
    w32(b, O_COUNT, count);
    w32(b, O_ROW_BYTES, row_bytes);
    w64(b, O_PAYLOAD, payload);
}

static void test_reject_rows_fields(void **state)
{
    (void)state;
    static const int types[] = {RKV_MSG_PUSH, RKV_MSG_PULL, RKV_MSG_PULL_REPLY};
    uint8_t *b = buf_new();
    for (size_t i = 0; i < 3; i++) {
        size_t n = enc_sample(b, types[i]);
        uint64_t body = n - 64;
        set_rows_hdr(b, 0, 16, body);
        expect_reject(b, n, "count 0");
        set_rows_hdr(b, 3, 0, body);
        expect_reject(b, n, "row_bytes 0 outside");
        set_rows_hdr(b, 3, RKV_PROTO_MAX_ROW_BYTES + 1, body);
        expect_reject(b, n, "row_bytes 1073741825 outside");
        /* count * (8 + row_bytes) would overflow 64 bits. */
        set_rows_hdr(b, UINT32_MAX, UINT32_MAX, body);
        expect_reject(b, n, "row_bytes");
        /* Huge but representable: over the payload limit, not an overflow. */
        uint64_t huge = rkv_proto_body_bytes(types[i], UINT32_MAX, RKV_PROTO_MAX_ROW_BYTES, 0);
        assert_true(huge > (1ull << 32));
        set_rows_hdr(b, UINT32_MAX, RKV_PROTO_MAX_ROW_BYTES, huge);
        expect_reject(b, n, "exceeds");
    }
    /* PULL's own row_bytes only sizes the reply, but it is still checked. */
    size_t n = enc_sample(b, RKV_MSG_PULL);
    set_rows_hdr(b, 3, RKV_PROTO_MAX_ROW_BYTES, n - 64);
    struct rkv_msg m;
    expect_ok(b, n, &m);
    free(b);
}

static void test_reject_slots(void **state)
{
    (void)state;
    uint8_t *b = buf_new();
    struct rkv_msg m;
    size_t n = enc_sample(b, RKV_MSG_PULL);
    w64(b, 64 + 16, 63);
    expect_reject(b, n, "cap 63");
    w64(b, 64 + 16, 64);
    expect_ok(b, n, &m);

    n = enc_sample(b, RKV_MSG_RNDV_REPLY);
    w64(b, 64 + 16, 0);
    expect_reject(b, n, "RNDV_REPLY: slot cap 0");
    w64(b, 64 + 16, 64);
    expect_ok(b, n, &m);

    n = enc_sample(b, RKV_MSG_RNDV_START);
    w64(b, 64, 63);
    expect_reject(b, n, "RNDV_START: bytes 63");
    w64(b, 64, 64);
    expect_ok(b, n, &m);

    n = enc_sample(b, RKV_MSG_ERROR);
    struct rkv_hdr h = hdr_of(RKV_MSG_ERROR);
    memset(b + 64, 'e', RKV_PROTO_TEXT_MAX + 1);
    h.payload_len = RKV_PROTO_TEXT_MAX + 1;
    rkv_proto_put_hdr(b, &h);
    expect_reject(b, 64 + RKV_PROTO_TEXT_MAX + 1, "ERROR: payload_len 257");
    free(b);
}

static void test_reject_names(void **state)
{
    (void)state;
    uint8_t *b = buf_new();
    static const int types[] = {RKV_MSG_META, RKV_MSG_INIT, RKV_MSG_META_REPLY};
    for (size_t i = 0; i < 3; i++) {
        size_t n = enc_sample(b, types[i]);
        memset(b + 64, 'a', 64);
        expect_reject(b, n, "name not NUL-terminated");
        b[64 + 63] = '\0';
        struct rkv_msg m;
        expect_ok(b, n, &m);
        b[64] = '\0';
        expect_reject(b, n, "empty name");
    }
    free(b);
}

struct tensor_case {
    size_t off;
    uint64_t value;
    int wide; /* 64-bit field */
    const char *field;
};

static void test_reject_tensor_fields(void **state)
{
    (void)state;
    static const struct tensor_case cases[] = {
        {T_DTYPE, 0, 0, "dtype 0"},
        {T_DTYPE, 5, 0, "dtype 5"},
        {T_POLICY, 0, 0, "policy 0"},
        {T_POLICY, 4, 0, "policy 4"},
        {T_INIT, 2, 0, "init 2"},
        {T_WITH_STATE, 2, 0, "with_state 2"},
        {T_ROWS, 0, 1, "rows 0"},
        {T_ROWS, RKV_PROTO_MAX_ROWS + 1, 1, "rows 1099511627777"},
        {T_ROW_LEN, 0, 0, "row_len 0"},
        {T_ROW_LEN, RKV_PROTO_MAX_ROW_BYTES / 8 + 1, 0, "row_len 134217729"},
        {T_BOOK_LEN, 1, 0, "book_len 1 must be 0"},
    };
    uint8_t *b = buf_new();
    size_t n = enc_sample(b, RKV_MSG_INIT);
    uint8_t *v = malloc(n);
    assert_non_null(v);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        memcpy(v, b, n);
        if (cases[i].wide)
            w64(v, cases[i].off, cases[i].value);
        else
            w32(v, cases[i].off, (uint32_t)cases[i].value);
        expect_reject(v, n, cases[i].field);
    }
    /* The largest legal values. */
    struct rkv_msg m;
    memcpy(v, b, n);
    w64(v, T_ROWS, RKV_PROTO_MAX_ROWS);
    w32(v, T_ROW_LEN, RKV_PROTO_MAX_ROW_BYTES / 8);
    w32(v, T_DTYPE, RKV_I64);
    expect_ok(v, n, &m);
    assert_int_equal(m.u.tensor.t.rows, RKV_PROTO_MAX_ROWS);
    free(v);
    free(b);
}

static void test_reject_book(void **state)
{
    (void)state;
    uint8_t *b = buf_new();
    size_t n = enc_sample(b, RKV_MSG_META_REPLY);
    /* book_len disagrees with rows. */
    w32(b, T_BOOK_LEN, 4);
    expect_reject(b, n, "book_len 4 but an EXPLICIT book needs rows 5");
    w32(b, T_BOOK_LEN, 0);
    expect_reject(b, n, "book_len 0");
    /* book_len agrees with rows but not with the payload. */
    w32(b, T_BOOK_LEN, 6);
    w64(b, T_ROWS, 6);
    expect_reject(b, n, "needs 128");
    /* book_len * 4 beyond 32 bits: the size is computed in 64 bits and the
     * message is simply too short for it. */
    w32(b, T_BOOK_LEN, UINT32_MAX);
    w64(b, T_ROWS, UINT32_MAX);
    expect_reject(b, n, "needs 17179869284");
    free(b);
}

/* Decodes every single-byte mutation of each type's valid encoding; each
 * must be accepted or rejected cleanly, and an accepted one must only point
 * inside its buffer. */
static int check_mutant(const uint8_t *v, size_t n)
{
    char err[ERR_BYTES] = "";
    struct rkv_msg m;
    int rc = rkv_proto_decode(v, n, &m, err, sizeof(err));
    assert_true(rc == 0 || rc == -RKV_EPROTO);
    if (rc < 0) {
        assert_true(strlen(err) > 0);
        return rc;
    }
    assert_int_equal(m.h.payload_len + 64, n);
    const uint8_t *end = v + n;
    if (m.h.type == RKV_MSG_PUSH)
        assert_true(m.u.push.rows + (size_t)m.h.count * m.h.row_bytes == end);
    if (m.h.type == RKV_MSG_PULL)
        assert_true((const uint8_t *)(m.u.pull.ids + m.h.count) == end);
    if (m.h.type == RKV_MSG_PULL_REPLY)
        assert_true(m.u.rows + (size_t)m.h.count * m.h.row_bytes == end);
    int tensor = m.h.type == RKV_MSG_INIT || m.h.type == RKV_MSG_META_REPLY;
    if (tensor && m.u.tensor.local) {
        assert_true((const uint8_t *)(m.u.tensor.local + m.u.tensor.t.book_len) == end);
        assert_true((const uint8_t *)m.u.tensor.local >=
                    (const uint8_t *)(m.u.tensor.book + m.u.tensor.t.book_len));
        for (uint32_t r = 0; r < m.u.tensor.t.book_len; r++)
            assert_true(m.u.tensor.local[r] < m.u.tensor.t.rows);
    } else if (tensor && m.u.tensor.book) {
        assert_true((const uint8_t *)(m.u.tensor.book + m.u.tensor.t.book_len) == end);
    }
    if (m.h.type == RKV_MSG_LIST_REPLY)
        assert_true(m.u.list + (size_t)m.h.count * RKV_PROTO_LIST_ENTRY_BYTES == end);
    return rc;
}

static void test_mutations(void **state)
{
    (void)state;
    uint8_t *b = buf_new();
    unsigned accepted = 0, rejected = 0;
    for (int type = 1; type < RKV_MSG_TYPE_MAX_; type++) {
        size_t n = enc_sample(b, type);
        uint8_t *v = malloc(n);
        assert_non_null(v);
        for (size_t i = 0; i < n; i++) {
            const uint8_t values[] = {
                0x00, 0xff, (uint8_t)(b[i] ^ 0x01), (uint8_t)(b[i] ^ 0x80), (uint8_t)(b[i] + 1),
                0x40};
            for (size_t k = 0; k < sizeof(values); k++) {
                memcpy(v, b, n);
                v[i] = values[k];
                if (check_mutant(v, n) == 0)
                    accepted++;
                else
                    rejected++;
            }
        }
        free(v);
    }
    /* Both outcomes occur, or the loop tested nothing. */
    assert_true(accepted > 0 && rejected > 0);
    free(b);
}

/* ---- LIST_REPLY and the local index of an explicit book ---- */

static void test_list_reply(void **state)
{
    (void)state;
    uint8_t *b = buf_new();
    struct rkv_msg m;
    size_t n = enc_sample(b, RKV_MSG_LIST_REPLY);
    assert_int_equal(n, 64 + 2 * RKV_PROTO_LIST_ENTRY_BYTES);
    expect_ok(b, n, &m);
    assert_int_equal(m.h.count, 2);
    struct rkv_wire_tensor t;
    uint32_t id;
    rkv_proto_list_entry(&m, 1, &t, &id);
    assert_string_equal(t.name, "feat");
    assert_int_equal(id, 3);
    assert_int_equal(t.policy, RKV_PART_EXPLICIT);
    assert_int_equal(t.book_len, 5);
    rkv_proto_list_entry(&m, 0, &t, &id);
    assert_string_equal(t.name, "emb");
    assert_int_equal(id, 1);
    /* An empty list is a valid answer. */
    struct rkv_hdr h = hdr_of(RKV_MSG_LIST_REPLY);
    expect_ok(b, rkv_proto_enc_list_reply(b, &h), &m);
    assert_int_equal(m.h.count, 0);
    /* Every entry is checked, not only the first. */
    n = enc_sample(b, RKV_MSG_LIST_REPLY);
    size_t e1 = 64 + RKV_PROTO_LIST_ENTRY_BYTES;
    w32(b, e1 + 104, 0);
    expect_reject(b, n, "entry 1: tensor id 0");
    w32(b, e1 + 104, RKV_PROTO_MAX_TENSORS + 1);
    expect_reject(b, n, "entry 1: tensor id 1025");
    w32(b, e1 + 104, 3);
    w32(b, e1 + 108, 1);
    expect_reject(b, n, "entry 1: reserved");
    w32(b, e1 + 108, 0);
    w32(b, e1 + 64, 9); /* dtype */
    expect_reject(b, n, "entry 1: dtype 9");
    n = enc_sample(b, RKV_MSG_LIST_REPLY);
    w32(b, e1 + 100, 4); /* book_len of an explicit tensor of 5 rows */
    expect_reject(b, n, "book_len 4");
    n = enc_sample(b, RKV_MSG_LIST_REPLY);
    memset(b + e1, 'x', 64);
    expect_reject(b, n, "not NUL-terminated");
    /* count and payload_len must agree; count is bounded. */
    n = enc_sample(b, RKV_MSG_LIST_REPLY);
    w32(b, O_COUNT, 3);
    expect_reject(b, n, "count 3 needs");
    w32(b, O_COUNT, RKV_PROTO_MAX_TENSORS + 1);
    expect_reject(b, n, "exceeds");
    free(b);
}

static void test_tensor_local_index(void **state)
{
    (void)state;
    uint8_t *b = buf_new();
    struct rkv_msg m;
    static const uint64_t local[5] = {1, 0, 0, 1, 1};
    struct rkv_wire_tensor t = sample_tensor(RKV_PART_EXPLICIT);
    struct rkv_hdr h = hdr_of(RKV_MSG_INIT);
    size_t n = rkv_proto_enc_tensor_local(b, &h, &t, sample_book, local);
    /* 5 book entries padded to 24 bytes, then 5 x 8. */
    assert_int_equal(n, 64 + 104 + 24 + 40);
    assert_int_equal(h.count, 1);
    expect_ok(b, n, &m);
    assert_non_null(m.u.tensor.local);
    assert_int_equal(((uintptr_t)m.u.tensor.local) % 8, 0);
    assert_memory_equal(m.u.tensor.local, local, sizeof(local));
    assert_memory_equal(m.u.tensor.book, sample_book, sizeof(sample_book));
    assert_int_equal(rkv_proto_tensor_body_bytes(5, 1), 104 + 24 + 40);
    assert_int_equal(rkv_proto_tensor_body_bytes(5, 0), 104 + 20);
    /* Without one: no pointer, count 0. */
    h = hdr_of(RKV_MSG_INIT);
    n = rkv_proto_enc_tensor(b, &h, &t, sample_book);
    expect_ok(b, n, &m);
    assert_null(m.u.tensor.local);
    w32(b, O_COUNT, 2);
    expect_reject(b, n, "count 2 must be 0 or 1");
    w32(b, O_COUNT, 1); /* says a local index follows, but the body has none */
    expect_reject(b, n, "and a local index needs");
    /* Every entry must be below rows. */
    h = hdr_of(RKV_MSG_META_REPLY);
    n = rkv_proto_enc_tensor_local(b, &h, &t, sample_book, local);
    w64(b, 64 + 104 + 24 + 3 * 8, 5);
    expect_reject(b, n, "local index 5 of row 3 not below rows 5");
    /* Every one-byte change of a message with a local index is refused
     * with a message, or accepted with every pointer inside the buffer. */
    h = hdr_of(RKV_MSG_INIT);
    n = rkv_proto_enc_tensor_local(b, &h, &t, sample_book, local);
    uint8_t *v = malloc(n);
    assert_non_null(v);
    unsigned accepted = 0, rejected = 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t values[] = {0x00, 0xff, (uint8_t)(b[i] ^ 0x01), (uint8_t)(b[i] + 1)};
        for (size_t k = 0; k < sizeof(values); k++) {
            memcpy(v, b, n);
            v[i] = values[k];
            if (check_mutant(v, n) == 0)
                accepted++;
            else
                rejected++;
        }
    }
    assert_true(accepted > 0 && rejected > 0);
    free(v);
    /* Only an explicit book has one. */
    t = sample_tensor(RKV_PART_RANGE);
    h = hdr_of(RKV_MSG_INIT);
    n = rkv_proto_enc_tensor(b, &h, &t, NULL);
    w32(b, O_COUNT, 1);
    expect_reject(b, n, "needs");
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_hello),
        cmocka_unit_test(test_list_reply),
        cmocka_unit_test(test_tensor_local_index),
        cmocka_unit_test(test_roundtrip_tensor),
        cmocka_unit_test(test_roundtrip_meta),
        cmocka_unit_test(test_roundtrip_push),
        cmocka_unit_test(test_roundtrip_pull),
        cmocka_unit_test(test_roundtrip_pull_zc),
        cmocka_unit_test(test_roundtrip_rndv),
        cmocka_unit_test(test_roundtrip_error),
        cmocka_unit_test(test_roundtrip_empty),
        cmocka_unit_test(test_patch_flow_and_hdr),
        cmocka_unit_test(test_type_names_and_sizes),
        cmocka_unit_test(test_reject_header_fields),
        cmocka_unit_test(test_reject_truncated),
        cmocka_unit_test(test_addr_roundtrip_and_bounds),
        cmocka_unit_test(test_reject_payload_len),
        cmocka_unit_test(test_reject_rows_fields),
        cmocka_unit_test(test_reject_slots),
        cmocka_unit_test(test_reject_names),
        cmocka_unit_test(test_reject_tensor_fields),
        cmocka_unit_test(test_reject_book),
        cmocka_unit_test(test_mutations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
