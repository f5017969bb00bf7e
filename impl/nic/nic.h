/* The NIC seam: a small verbs-shaped vtable. The engine above it is written
 * once and runs over every backend:
 *   tcp   impl/nic/nic_tcp.c    sockets + epoll, one-sided writes emulated by the
 *                               receiver copying into the registered region
 *   verbs impl/nic/nic_verbs.c  libibverbs + librdmacm (RC QPs)
 *   sim   sim/backend/nic_sim.c SimGrid comms
 * What they share beside the transport (the soft completion queue, the QP
 * lifetime, the bounds checks) is the core, impl/nic/nic_core.h.
 *
 * Semantics every backend keeps (they are the verbs ones):
 *  - One completion queue per NIC; rkv_nic_poll() blocks up to a timeout.
 *  - Per-QP ordering: operations posted on one QP are executed and arrive in
 *    order; a WRITE_WITH_IMM completes at the target only after its data landed.
 *  - An incoming SEND or WRITE_WITH_IMM consumes one posted receive. When none
 *    is posted the sender is held back (RNR with infinite retry): the engine's
 *    credits exist so that this never happens in normal operation.
 *  - A WRITE lands only inside a region the target registered with
 *    RKV_ACCESS_REMOTE_WRITE, checked by rkey, address and length; anything
 *    else kills the connection (remote access error) and the target keeps
 *    serving others.
 *  - When a connection breaks, the local side sees one RKV_WC_DISCONNECTED
 *    completion for that QP; posted receives on it are not completed.
 *  - Once qp_close() returns, the NIC writes no more into buffers posted on
 *    that QP, and no completion not yet polled will name it (completions of
 *    signalled sends included: their buffers are the caller's to reclaim).
 *  - A failed post returns its error and queues no completion.
 *  - Posts may block (TCP: while the kernel send buffer is full, bounded by
 *    a send timeout); credits keep that short in normal operation.
 * Posting functions are thread-safe; poll is called by one task.
 */
#ifndef RKV_NIC_H
#define RKV_NIC_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct rkv_port;
struct rkv_cond;
struct rkv_nic;
struct rkv_qp;

/* REMOTE_WRITE: any connection of this NIC that knows the rkey may write.
 * REMOTE_GRANT: no remote access of its own; mr_grant gives one connection
 * an rkey that works on it alone. */
enum rkv_access { RKV_ACCESS_LOCAL = 0, RKV_ACCESS_REMOTE_WRITE = 1, RKV_ACCESS_REMOTE_GRANT = 2 };

struct rkv_mr {
    void *addr;
    size_t len;
    uint32_t lkey;
    uint32_t rkey;
    int access;
    struct rkv_nic *nic; /* the NIC that registered it (bounds checks) */
    void *impl;
};

enum rkv_wc_opcode {
    RKV_WC_SEND = 1,      /* a signalled post_send finished locally */
    RKV_WC_WRITE = 2,     /* a signalled post_write finished locally */
    RKV_WC_RECV = 3,      /* a SEND arrived into a posted receive */
    RKV_WC_RECV_IMM = 4,  /* a WRITE_WITH_IMM landed; imm is valid */
    RKV_WC_CONNECTED = 5, /* a passive-side connection is up (wc.qp is new) */
    RKV_WC_DISCONNECTED = 6,
};

enum rkv_wc_status {
    RKV_WC_SUCCESS = 0,
    RKV_WC_FLUSH_ERR = 1,      /* connection gone before the operation ran */
    RKV_WC_REM_ACCESS_ERR = 2, /* target rejected a write (key/offset/length) */
    RKV_WC_LOC_ERR = 3,        /* local failure (buffer not in its mr, I/O) */
};

struct rkv_wc {
    uint64_t wr_id;
    struct rkv_qp *qp;
    int opcode;        /* enum rkv_wc_opcode */
    int status;        /* enum rkv_wc_status */
    uint32_t byte_len; /* RECV: bytes received; RECV_IMM: bytes written */
    uint32_t imm;
};

/* A local buffer: addr..addr+len must lie inside mr. */
struct rkv_sge {
    void *addr;
    uint32_t len;
    struct rkv_mr *mr;
};

/* See rkv_config.verbs (rkv.h): -1 = unset. */
struct rkv_nic_verbs_opts {
    int tos, sl, gid_index, mtu, srq_depth;
};

struct rkv_nic_ops {
    const char *name;
    int (*open)(struct rkv_port *port, const char *dev, struct rkv_nic **nic_p);
    /* Accept connections at host:port; each appears as RKV_WC_CONNECTED. */
    int (*listen)(struct rkv_nic *nic, const char *host, uint16_t port);
    /* Blocks until connected, refused (-RKV_EPEERDEAD) or timeout_ms. */
    int (*connect)(struct rkv_nic *nic, const char *host, uint16_t port, uint32_t timeout_ms,
                   struct rkv_qp **qp_p);
    int (*reg_mr)(struct rkv_nic *nic, void *addr, size_t len, int access, struct rkv_mr **mr_p);
    void (*dereg_mr)(struct rkv_nic *nic, struct rkv_mr *mr);
    int (*post_send)(struct rkv_qp *qp, uint64_t wr_id, const struct rkv_sge *sge, int signaled);
    int (*post_recv)(struct rkv_qp *qp, uint64_t wr_id, const struct rkv_sge *sge);
    /* RDMA WRITE of sge to (remote_addr, rkey); with_imm makes it a
     * WRITE_WITH_IMM that completes a receive at the target with imm. */
    int (*post_write)(struct rkv_qp *qp, uint64_t wr_id, const struct rkv_sge *sge,
                      uint64_t remote_addr, uint32_t rkey, int with_imm, uint32_t imm,
                      int signaled);
    /* Returns the number of completions written to wc (0 on timeout). */
    int (*poll)(struct rkv_nic *nic, struct rkv_wc *wc, int max, uint32_t timeout_ms);
    /* Breaks the connection (the peer sees RKV_WC_DISCONNECTED) and frees the
     * QP once no completion can refer to it any more. */
    void (*qp_close)(struct rkv_qp *qp);
    /* This node's address as the peer at host:port would reach it (used to
     * announce a server's address to server 0). */
    int (*local_addr)(struct rkv_nic *nic, const char *peer_host, uint16_t peer_port, char *buf,
                      size_t len);
    void (*close)(struct rkv_nic *nic);
    /* 1 when post_send/post_write have read the local buffer by the time
     * they return (tcp: the kernel copied it): the caller may change it
     * right after. 0 (verbs, and decorators that hold posts): the NIC reads
     * it until the work request completes. */
    int copies_at_post;
    /* Sends of at most this many bytes on qp are copied at post (inline):
     * the buffer may change once post_send returned, so such a send needs
     * no completion. NULL (as for a decorator that holds posts): none. */
    uint32_t (*qp_inline_bytes)(const struct rkv_qp *qp);
    /* 1 when every peer the NIC can reach is in this process (the twin's
     * simulated network): nothing outside can connect, so a missing shared
     * secret opens no door. 0 for a transport other hosts can reach. */
    int in_process;
    /* A shared receive pool, so that receive buffers do not grow with the
     * number of peers (NULL: none; receives are posted per QP). srq_setup,
     * called before the NIC makes its first connection, has the NIC
     * allocate, register and post *count_p buffers of buf_bytes (it may
     * lower count to what the device allows) on one receive queue that
     * every later QP draws from; buffer i is at *base_p + i * buf_bytes.
     * A SEND or WRITE_WITH_IMM that arrives into one completes with wr_id
     * (i << 8) | tag; the buffer is the user's until srq_repost(i). The
     * NIC reposts by itself the buffers of completions it never hands out
     * (broken or closed QPs). They live until the NIC closes. A pool that
     * runs dry holds senders back (RNR), as an empty per-QP queue does.
     * -RKV_EINVAL once a connection exists or a pool was set up; then the
     * user posts per QP. */
    int (*srq_setup)(struct rkv_nic *nic, uint32_t *count_p, uint32_t buf_bytes, uint8_t tag,
                     uint8_t **base_p);
    int (*srq_repost)(struct rkv_nic *nic, uint32_t i);
    /* Optional (NULL: none), for a NIC whose tasks never run at once (the
     * twin's): the thread that waits for a completion polls for it itself
     * instead of being woken by the progress task that polled it, one
     * wake-up per completion instead of two. cq_wait blocks up to
     * timeout_ms until the CQ holds a completion, without taking it, and
     * returns 1 when it does. cq_doorbell(nic, cv), called with cv's mutex
     * held right before waiting on cv, has every completion that arrives
     * from then on signal cv instead of waking cq_wait's caller, and returns
     * 1 when the CQ already holds one (the caller polls instead of
     * waiting), -1 when it cannot now (the caller waits as without one);
     * cq_doorbell(nic, NULL) ends that and wakes cq_wait's caller if
     * completions are left. The signal cannot fall between the call and
     * the wait only because no other task runs in between. */
    int (*cq_wait)(struct rkv_nic *nic, uint32_t timeout_ms);
    int (*cq_doorbell)(struct rkv_nic *nic, struct rkv_cond *cv);
    /* Optional (NULL: a waiting poll sits out its timeout). Any thread:
     * the poll or cq_wait waiting now, or else the next one, returns at
     * once with what the CQ holds (perhaps nothing). One wake-up, taken by
     * the first poll it ends. Why: a stopping engine joins its progress
     * task, which waits in poll with a 50 ms timeout; without this each
     * node's stop took up to that long (and a twin run's simulated end
     * came 50 ms after its workload's). */
    void (*poll_wake)(struct rkv_nic *nic);
    /* Per-peer remote access (NULL: none; then REMOTE_WRITE regions are
     * open to every connection that learns their rkey). mr_grant returns
     * an rkey under which qp's peer, and only it, may write anywhere in mr
     * (registered RKV_ACCESS_REMOTE_GRANT); the same rkey on another
     * connection is a remote access error that breaks that connection
     * alone. It is usable by the peer once a message posted on qp after
     * the grant arrived. mr_revoke voids it (*grant_p's handle); every
     * grant is revoked before its QP is closed and its region deregistered
     * (rxe waits, and warns, for a window still bound to a destroyed QP). */
    int (*mr_grant)(struct rkv_qp *qp, struct rkv_mr *mr, uint32_t *rkey_p, void **grant_p);
    void (*mr_revoke)(struct rkv_nic *nic, void *grant);
    /* The verbs settings of a config (rkv_config.verbs), given after open
     * and before the first listen, connect or srq_setup; -1 fields keep
     * the NIC's own (its environment's). NULL: a NIC without them. */
    int (*set_verbs)(struct rkv_nic *nic, const struct rkv_nic_verbs_opts *o);
};

/* Per-QP user context for the engine. Backends store it, never interpret it. */
struct rkv_qp_base {
    void *ctx;
};
/* Every backend's QP struct starts with a struct rkv_qp_base. */
static inline void rkv_qp_set_ctx(struct rkv_qp *qp, void *ctx)
{
    ((struct rkv_qp_base *)(void *)qp)->ctx = ctx;
}
static inline void *rkv_qp_ctx(const struct rkv_qp *qp)
{
    return ((const struct rkv_qp_base *)(const void *)qp)->ctx;
}

/* Peer authentication (every backend): the cluster's shared secret, any
 * text, is hashed into auth_key; at connect the accepting side sends a
 * random nonce and the connecting side answers with an HMAC-SHA256 over it
 * (and the connecting side's own nonce) keyed by auth_key, then the
 * accepting side proves the same key back. The secret never crosses the
 * wire. A NIC opened without a secret uses the hash of the empty text: it
 * talks only to other NICs without one, and anyone who reaches its port can
 * do the same. */
#define RKV_NIC_AUTH_KEY_BYTES 32
#define RKV_NIC_AUTH_NONCE_BYTES 32
#define RKV_NIC_AUTH_MAC_BYTES 32
#define RKV_NIC_SECRET_MAX 4096 /* bytes of secret text read from a file */

/* Every backend's NIC struct starts with this. */
struct rkv_nic {
    const struct rkv_nic_ops *ops;
    struct rkv_port *port;
    uint8_t auth_key[RKV_NIC_AUTH_KEY_BYTES]; /* hash of the secret text */
    int has_secret;                           /* a non-empty secret was given */
    /* Connection limits (set before listen; rkv_config's, or the defaults):
     * a passive-side connection that has not proved the secret within
     * hello_timeout_ms is dropped; one that completes no message for
     * idle_timeout_ms is dropped (0: never), and a node with it set keeps
     * the connections it made alive. Atomic: the NIC's task reads it from
     * its start, and the node sets it after the NIC is open. */
    uint32_t hello_timeout_ms;
    _Atomic uint32_t idle_timeout_ms;
    /* The longest a post may wait, blocked, on a peer that takes no byte
     * (0: the backend's own bound). A backend whose posts can block until
     * the peer reads (tcp) gives that peer up past it, and past it one that
     * reads slower than the backend's floor rate: the posting thread (a
     * server's, serving every client) is not held by one peer that stopped
     * reading, or reads at a trickle, for longer than this. */
    _Atomic uint32_t send_wait_ms;
    /* The longest the user may leave the NIC unpolled while its poller is
     * busy with what it polled: a polling policy figure, so the user's
     * (the engine sets it, rkv_nic_set_poll_gap). A backend whose posts can
     * block until the peer reads (tcp) reads on its own past it, or two
     * nodes blocked sending to each other would never read again. */
    _Atomic uint64_t poll_gap_ns;
    struct rkv_nic *inner; /* a decorator's NIC underneath (fault), else NULL */
    /* The longest buffer a post takes (the backend's frame or message
     * limit): a longer one is -RKV_ELIMIT. */
    uint32_t max_msg_bytes;
};

#define RKV_NIC_HELLO_TIMEOUT_MS 5000u
/* send_wait_ms's floor: TCP's own retransmission waits (200 ms at least,
 * doubling) stay well inside it. */
#define RKV_NIC_SEND_WAIT_MIN_MS 1000u
/* poll_gap_ns of a NIC nobody set it for (one driven by hand, in tests). */
#define RKV_NIC_POLL_GAP_NS 10000000ull

/* Backends call it in open: sets ops, port, the default limits and the
 * secret, which comes from the file RKV_SECRET_FILE names (its text, one
 * trailing newline dropped), else from RKV_TOKEN's text; none: no secret.
 * An unreadable file is a configuration error. */
int rkv_nic_base_init(struct rkv_nic *nic, const struct rkv_nic_ops *ops, struct rkv_port *port);
/* Sets poll_gap_ns on nic and every NIC a decorator wraps; any time. */
void rkv_nic_set_poll_gap(struct rkv_nic *nic, uint64_t gap_ns);
/* Replaces the secret (rkv_config.secret); before listen/connect. */
void rkv_nic_set_secret(struct rkv_nic *nic, const char *text, size_t len);
/* Replaces the secret by the text of the file at path (one trailing newline
 * dropped); -RKV_ECONFIG with the reason in err (missing, unreadable, a
 * directory, empty, or longer than RKV_NIC_SECRET_MAX) if it cannot. */
int rkv_nic_read_secret_file(struct rkv_nic *nic, const char *path, char *err, size_t err_len);
/* 1 when a peer outside this process could join without a secret: the
 * transport under any decorators (the innermost NIC, which holds the
 * secret) was given none and is not in_process. The store warns then. */
int rkv_nic_open_to_strangers(const struct rkv_nic *nic);
/* Whether every peer the NIC reaches is in this process (the twin's
 * network), through decorators: their own ops say nothing of it (a fault
 * decorator in the twin read as a real network). */
int rkv_nic_in_process(const struct rkv_nic *nic);
/* Whether the transport under any decorators has per-peer grants (mr_grant):
 * a decorator forwards them, and has the op whether the NIC it wraps does. */
int rkv_nic_grants(const struct rkv_nic *nic);
/* MAC over label || a || b with the NIC's key. */
void rkv_nic_auth_mac(const struct rkv_nic *nic, const char *label, const uint8_t *a, size_t a_len,
                      const uint8_t *b, size_t b_len, uint8_t mac[RKV_NIC_AUTH_MAC_BYTES]);
/* 1 when mac is the MAC over (label, a, b); compares in constant time. */
int rkv_nic_auth_check(const struct rkv_nic *nic, const char *label, const uint8_t *a, size_t a_len,
                       const uint8_t *b, size_t b_len, const uint8_t mac[RKV_NIC_AUTH_MAC_BYTES]);
/* Unpredictable bytes (the OS's CSPRNG), for nonces. */
void rkv_nic_auth_nonce(uint8_t nonce[RKV_NIC_AUTH_NONCE_BYTES]);
/* A one-way 64-bit function of (label, v, salt) (BLAKE2b): shown in place of
 * a secret v, it reveals neither v nor the value for another salt. */
uint64_t rkv_nic_auth_derive64(const char *label, uint64_t v, uint32_t salt);

extern const struct rkv_nic_ops rkv_nic_tcp_ops;
extern const struct rkv_nic_ops rkv_nic_verbs_ops; /* built with RKV_WITH_VERBS */

#endif
