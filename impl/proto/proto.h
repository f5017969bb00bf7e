/* rkv wire format: a fixed 64-byte header followed by a type-specific body.
 * All integers little-endian. The decoder trusts nothing: every field is
 * checked against the buffer it arrived in, and every size computation is
 * overflow-checked, before anything points into the buffer.
 *
 * Header layout (offset: field):
 *   0 u32 magic "RKV1"   4 u8 version   5 u8 type   6 u16 flags (must be 0)
 *   8 u64 req_id        16 u32 tensor_id           20 u32 sender
 *  24 u32 count         28 u32 row_bytes           32 i32 status (<= 0)
 *  36 u16 op            38 u16 credits             40 f64 param
 *  48 u64 payload_len   56 u32 release (slot id + 1 the sender gives back, 0 = none)
 *  60 u32 reserved (must be 0)
 *
 * Bodies (payload_len must equal exactly what the type needs):
 *   HELLO        u32 machine_id, u32 want_id (RKV_ID_NONE = assign), u64 nonce,
 *                u64 cluster (fingerprint of the cluster the sender belongs to),
 *                u32 rx_depth, u32 ctrl_buf_bytes (the sender's settings)          (32)
 *   HELLO_REPLY  u32 client_id, u32 n_workers, u32 rx_depth, u32 n_servers,
 *                u32 ctrl_buf_bytes, u32 push_slots (the server's settings)           (24)
 *   INIT, META_REPLY  tensor (104) + book (book_len x u32); INIT's op is its phase
 *                (0..3) and, in phases 1 and 2, param 1 says the cluster committed
 *                the tensor before (a durable machine without it refuses); header
 *                count 0, or 1
 *                when a local index follows: zero padding to 8 bytes, then
 *                book_len x u64 (row r's index on machine book[r]; each < rows)
 *        tensor: char name[64] NUL-terminated non-empty, u32 dtype, u32 policy,
 *                u32 row_len, u32 init, u64 rows, u64 init_seed, u32 with_state,
 *                u32 book_len (== rows for EXPLICIT, else 0)
 *   META         char name[64]                                                    (64)
 *   PUSH         count x u64 ids, then count x row_bytes rows
 *   PULL         slot desc (24), then count x u64 ids; op: the pull handler (0: the rows
 *                themselves), param its parameter
 *   PULL_REPLY   count x row_bytes rows (row_bytes: what the pull handler writes per row)
 *   PULL_ZC      dst desc (24: u64 addr, u32 rkey, u32 0, u64 len), count x u64 ids,
 *                count x u32 pos: row i goes to dst.addr + pos[i] x row_bytes (the
 *                caller's buffer, registered for remote writes; every row inside len)
 *   PULL_DONE    empty: every row of the PULL_ZC with this req_id landed
 *   RNDV_START   u64 bytes (size of the message the sender wants to write)         (8)
 *   RNDV_REPLY   slot desc (24)
 *   ERROR        up to RKV_PROTO_TEXT_MAX bytes of text; with req_id 0 and status
 *                -RKV_ESHUTDOWN, a server's notice that it exits (a client asked)
 *   REGISTER, TABLE_ENTRY  addr: u64 cluster, u32 server_id, u32 port (1..65535),
 *                char host[64] NUL-terminated non-empty                             (80)
 *   LIST_REPLY   count (0..RKV_PROTO_MAX_TENSORS) x entry (112): tensor (104, book_len as in
 *                INIT but no book follows), u32 tensor id (>= 1), u32 reserved (0)
 *   others       empty
 * slot desc: u64 addr, u32 rkey, u32 slot, u64 cap
 */
#ifndef RKV_PROTO_H
#define RKV_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "rkv.h"

#define RKV_PROTO_MAGIC 0x31564b52u /* "RKV1" read as little-endian u32 */
/* Bumped whenever a type or a field is added or changes meaning. Types
 * were added under 1 as the store grew (REGISTER, PULL_ZC, LIST, last
 * RNDV_REVOKE); 2 is the set below. A peer of another build is refused at
 * its first message, naming both versions, instead of dropping the
 * connection mid-run at a type it does not know. */
#define RKV_PROTO_VERSION 2
#define RKV_PROTO_HDR_BYTES 64
#define RKV_PROTO_TENSOR_BYTES 104
#define RKV_PROTO_SLOT_BYTES 24
#define RKV_PROTO_ADDR_BYTES 80
#define RKV_PROTO_LIST_ENTRY_BYTES 112
#define RKV_PROTO_MAX_TENSORS 1024u /* tensor ids are 1..this (the store's RKV_MAX_TENSORS) */
#define RKV_PROTO_HOST_MAX 63
#define RKV_PROTO_TEXT_MAX 256
#define RKV_PROTO_MAX_ROW_BYTES (1u << 30)
#define RKV_PROTO_MAX_ROWS (1ull << 40)
#define RKV_ID_NONE 0xffffffffu

enum rkv_msg_type {
    RKV_MSG_HELLO = 1,
    RKV_MSG_HELLO_REPLY,
    RKV_MSG_INIT,
    RKV_MSG_INIT_REPLY,
    RKV_MSG_META,
    RKV_MSG_META_REPLY,
    RKV_MSG_PUSH,
    RKV_MSG_PUSH_ACK,
    RKV_MSG_PULL,
    RKV_MSG_PULL_REPLY,
    RKV_MSG_BARRIER, /* count: the client's barrier number, 1, 2, ... (0: the next one) */
    RKV_MSG_BARRIER_REPLY,
    RKV_MSG_SHUTDOWN,
    RKV_MSG_SHUTDOWN_ACK,
    RKV_MSG_RNDV_START,
    RKV_MSG_RNDV_REPLY,
    RKV_MSG_CREDIT,
    RKV_MSG_ERROR,
    RKV_MSG_RNDV_RETIRE, /* the sender gives up a granted slot (id in count) */
    RKV_MSG_REGISTER,    /* server -> server 0: my address (addr body) */
    RKV_MSG_REGISTER_ACK,
    RKV_MSG_TABLE,       /* client -> server 0: every server's address, please */
    RKV_MSG_TABLE_ENTRY, /* one per server, same req_id (addr body) */
    RKV_MSG_PULL_ZC,     /* a pull whose rows the server writes into the caller's buffer */
    RKV_MSG_PULL_DONE,   /* server -> client: the rows of a PULL_ZC are all written */
    RKV_MSG_LIST,        /* client -> server 0: every tensor's description, please */
    RKV_MSG_LIST_REPLY,  /* count entries (server 0's ready tensors) */
    RKV_MSG_RNDV_REVOKE, /* the granter wants a slot back (id in count): RETIRE it once idle */
    RKV_MSG_TYPE_MAX_    /* one past the last */
};

const char *rkv_msg_type_name(int type);

struct rkv_hdr {
    uint8_t type;
    uint16_t flags;
    uint64_t req_id;
    uint32_t tensor_id;
    uint32_t sender;
    uint32_t count;
    uint32_t row_bytes;
    int32_t status;
    uint16_t op;
    uint16_t credits;
    double param;
    uint64_t payload_len;
    uint32_t release; /* engine flow control: a granted slot returned (id + 1), or 0 */
};

struct rkv_slot_desc {
    uint64_t addr;
    uint32_t rkey;
    uint32_t slot;
    uint64_t cap;
};

/* A client's join (or re-join) to a server. rx_depth and ctrl_buf_bytes:
 * both sides post receives of that many and that size, so a server refuses
 * a client of others before it counts it (srv_on_hello). */
struct rkv_wire_hello {
    uint32_t machine_id, want_id;
    uint64_t nonce;
    uint64_t cluster;
    uint32_t rx_depth, ctrl_buf_bytes;
};

/* The server's settings a client must agree with (cli_on_reply): both
 * sides post receives of rx_depth x ctrl_buf_bytes, and push_slots is what
 * the server grants each client. */
struct rkv_wire_hello_reply {
    uint32_t client_id, n_workers, rx_depth, n_servers;
    uint32_t ctrl_buf_bytes, push_slots;
};

struct rkv_wire_tensor {
    char name[RKV_NAME_MAX + 1];
    uint32_t dtype;
    uint32_t policy;
    uint32_t row_len;
    uint32_t init;
    uint64_t rows;
    uint64_t init_seed;
    uint32_t with_state;
    uint32_t book_len;
};

/* A decoded message. Pointers point into the buffer given to the decoder
 * and are valid as long as it is. ids/rows/book are 8-byte aligned when the
 * buffer is (the layout guarantees it). */
struct rkv_msg {
    struct rkv_hdr h;
    union {
        struct rkv_wire_hello hello;
        struct rkv_wire_hello_reply hello_reply;
        struct {
            struct rkv_wire_tensor t;
            const uint32_t *book;    /* t.book_len entries, or NULL */
            const uint64_t *local;   /* t.book_len entries (header count 1), or NULL */
        } tensor;                    /* INIT, META_REPLY */
        const uint8_t *list;         /* LIST_REPLY: count entries, see rkv_proto_list_entry */
        char name[RKV_NAME_MAX + 1]; /* META */
        struct {
            const uint64_t *ids;
            const uint8_t *rows;
        } push;
        struct {
            struct rkv_slot_desc reply_to;
            const uint64_t *ids;
        } pull;
        struct {
            struct rkv_slot_desc dst; /* slot is 0; cap is the region's length */
            const uint64_t *ids;
            const uint32_t *pos; /* each < dst.cap / row_bytes (checked) */
        } pull_zc;
        const uint8_t *rows;       /* PULL_REPLY */
        uint64_t rndv_bytes;       /* RNDV_START */
        struct rkv_slot_desc slot; /* RNDV_REPLY */
        struct rkv_wire_addr {
            uint64_t cluster;
            uint32_t server_id;
            uint32_t port;
            char host[RKV_PROTO_HOST_MAX + 1];
        } addr; /* REGISTER, TABLE_ENTRY */
        struct {
            char text[RKV_PROTO_TEXT_MAX + 1];
        } error;
    } u;
};

/* Validates buf[0..len) completely and fills msg: its header and the member
 * of its union for its type (the other members are left as they were).
 * Returns 0, or -RKV_EPROTO with a message naming the offending field in
 * err, msg untouched. Never reads outside buf. */
int rkv_proto_decode(const void *buf, size_t len, struct rkv_msg *msg, char *err, size_t err_len);

/* Checks only the header (for stream transports that need the length
 * before the body has arrived). Same error contract as rkv_proto_decode. */
int rkv_proto_decode_hdr(const void *buf, size_t len, struct rkv_hdr *h, char *err, size_t err_len);

/* Size of the body a message needs; 0 on overflow/invalid input. For
 * fixed-size types the count/row_bytes arguments are ignored. */
uint64_t rkv_proto_body_bytes(int type, uint32_t count, uint32_t row_bytes, uint32_t book_len);

/* Encoders write at buf (which must hold HDR_BYTES + body) and return the
 * total message length. h->payload_len is computed, not taken from h. */
size_t rkv_proto_put_hdr(void *buf, const struct rkv_hdr *h);
size_t rkv_proto_enc_hello(void *buf, struct rkv_hdr *h, const struct rkv_wire_hello *w);
size_t rkv_proto_enc_hello_reply(void *buf, struct rkv_hdr *h,
                                 const struct rkv_wire_hello_reply *r);
size_t rkv_proto_enc_tensor(void *buf, struct rkv_hdr *h, const struct rkv_wire_tensor *t,
                            const uint32_t *book);
/* The same with a local index (book_len entries, or NULL for none): sets
 * h->count to 1 when there is one, 0 otherwise. */
size_t rkv_proto_enc_tensor_local(void *buf, struct rkv_hdr *h, const struct rkv_wire_tensor *t,
                                  const uint32_t *book, const uint64_t *local);
/* Body of an INIT / META_REPLY, with (has_local) or without a local index;
 * 0 on overflow. */
uint64_t rkv_proto_tensor_body_bytes(uint32_t book_len, int has_local);
/* LIST_REPLY: the header of h->count entries; then each entry i < count. */
size_t rkv_proto_enc_list_reply(void *buf, struct rkv_hdr *h);
void rkv_proto_put_list_entry(void *buf, uint32_t i, const struct rkv_wire_tensor *t, uint32_t id);
/* Entry i (< count) of a decoded LIST_REPLY, which the decoder validated. */
void rkv_proto_list_entry(const struct rkv_msg *m, uint32_t i, struct rkv_wire_tensor *t,
                          uint32_t *id_p);
size_t rkv_proto_enc_meta(void *buf, struct rkv_hdr *h, const char *name);
/* PUSH: h->count and h->row_bytes must be set; rows may be NULL when the caller
 * fills them later at buf + HDR_BYTES + count*8. */
size_t rkv_proto_enc_push(void *buf, struct rkv_hdr *h, const uint64_t *ids, const void *rows);
size_t rkv_proto_enc_pull(void *buf, struct rkv_hdr *h, const struct rkv_slot_desc *reply_to,
                          const uint64_t *ids);
/* PULL_ZC: ids and pos may be NULL when the caller fills them later (ids at
 * buf + HDR_BYTES + SLOT_BYTES, pos right after the count ids). */
size_t rkv_proto_enc_pull_zc(void *buf, struct rkv_hdr *h, const struct rkv_slot_desc *dst,
                             const uint64_t *ids, const uint32_t *pos);
/* PULL_REPLY: the caller fills count*row_bytes rows at buf + HDR_BYTES. */
size_t rkv_proto_enc_pull_reply(void *buf, struct rkv_hdr *h);
size_t rkv_proto_enc_rndv_start(void *buf, struct rkv_hdr *h, uint64_t bytes);
size_t rkv_proto_enc_slot(void *buf, struct rkv_hdr *h, const struct rkv_slot_desc *s);
/* ERROR into a buffer of cap bytes (at least the header): the text is cut
 * to what fits and to RKV_PROTO_TEXT_MAX. A server's replies go in
 * ctrl_buf_bytes buffers, as small as 256 bytes: a long text ran past
 * them. */
size_t rkv_proto_enc_error(void *buf, size_t cap, struct rkv_hdr *h, const char *text);
size_t rkv_proto_enc_addr(void *buf, struct rkv_hdr *h, const struct rkv_wire_addr *a);
/* Rewrites the engine's flow-control fields of an encoded header in place
 * (credits returned and slot released are only known at post time). */
void rkv_proto_patch_flow(void *buf, uint16_t credits, uint32_t release);
/* Header fields of a message this node encoded, read in place (the engine
 * keys its slot cache by type and tensor and fails queued requests by id,
 * without decoding what it already validated as it encoded it). buf holds
 * at least RKV_PROTO_HDR_BYTES of an encoded header. */
uint8_t rkv_proto_hdr_type(const void *buf);
uint64_t rkv_proto_hdr_req_id(const void *buf);
uint32_t rkv_proto_hdr_tensor_id(const void *buf);

/* Header-only types (ACKs, BARRIER, SHUTDOWN, CREDIT, INIT_REPLY). */
size_t rkv_proto_enc_empty(void *buf, struct rkv_hdr *h);

#endif
