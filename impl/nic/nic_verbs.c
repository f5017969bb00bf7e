/* The verbs NIC: the semantics of nic.h over libibverbs + librdmacm, RC QPs.
 *
 * Resources. Each NIC opens its own device context (not rdma_cm's shared
 * one, so the device's async events are this NIC's alone) and owns one PD,
 * one completion channel and one CQ that every QP shares; the CQ grows
 * (ibv_resize_cq) as QPs come, so it can never overrun.
 *
 * Connections. rdma_cm resolves addresses and runs the handshake; the QPs are
 * our own (ibv_create_qp), moved through INIT/RTR/RTS with the attributes
 * rdma_init_qp_attr() gives. That lets us set what rdma_cm would not: the RNR
 * timer (its default, 655 ms, would stall the first SEND that beats the
 * target's first post_recv) and rnr_retry = 7 (infinite: RNR is
 * backpressure, as nic.h says). The private data of the handshake carries a
 * magic, a version, the port's active MTU and a proof of the shared secret
 * (nic.h; below); a wrong version or secret refuses the connection with a
 * message naming both sides' values, and unequal MTUs give the smaller one
 * as path MTU on both ends (logged).
 *
 * Tasks.
 *  - The CM task owns the NIC's rdma_cm event channel and the device's
 *    async-event fd, both in one poll(): it accepts connections, turns
 *    DISCONNECTED and fatal QP events into completions (draining the CQ
 *    first, so that a QP's data completions come before its DISCONNECTED)
 *    and destroys the cm ids of closed QPs. Whenever it queues a completion
 *    it writes poll_wake_fd, which poll() watches together with the
 *    completion channel: a peer that disconnects while the poller waits for
 *    a completion wakes it (a stall of that kind was seen on rxe).
 *  - poll() (one caller) converts CQEs into the soft queue, a FIFO of
 *    struct rkv_wc, and returns its head. Everything that completes goes
 *    through that FIFO, so per-QP order holds whoever found the CQE.
 *  - connect() runs on the caller's thread with a private event channel;
 *    the id moves to the NIC's channel once the connection is up.
 *
 * Receives. With srq_setup (the engine calls it before its first
 * connection) the NIC owns one pool of receive buffers on an SRQ that every
 * later QP draws from, so a peer costs its send queue and no receive memory;
 * the device's wr_id of a pool buffer is (index << 1 | 1). The pool never
 * shrinks: a completion nobody will poll (its QP broken or closed, one
 * dropped from the soft queue at close) reposts its buffer here, and
 * receives that beat the passive side's ESTABLISHED wait on the QP until
 * CONNECTED is queued. Without a pool each QP has its own receive queue.
 *
 * Work requests. Error CQEs carry only wr_id, status and qp_num, so the
 * user's wr_id is not what the device sees: each QP keeps rings of what was
 * posted (sq, rq) and the device's wr_id is (post counter << 1 | is_recv).
 * The rings say which kind of operation failed, let unsignalled sends stay
 * silent (one in every sq_depth/2 is signalled internally so the send queue
 * drains) and give posts the exact room left in the queues.
 *
 * Settings (environment, read at open):
 *   RKV_VERBS_DEV       NAME or NAME:PORT when open() gets none (default: the
 *                       port RKV_HOST's address is on, as rdma_bind_addr finds
 *                       it; else the first device with an active port)
 *   RKV_VERBS_POLL=1    busy-poll the CQ in poll() instead of blocking (the
 *                       engine's busy-poll setting needs no NIC mode: it
 *                       polls with timeout 0 while it spins)
 *   RKV_VERBS_SQ_DEPTH  send queue per QP (alias BYTEPS_RDMA_SEND_DEPTH), 128
 *   RKV_VERBS_RX_DEPTH  receive queue per QP without the shared pool (alias
 *                       BYTEPS_RDMA_RX_DEPTH), 512; must hold the engine's rx_depth
 *   RKV_VERBS_TOS       IP traffic class (ToS byte) of RoCE v2 packets
 *                       (rdma_set_option RDMA_OPTION_ID_TOS), 0..255
 *   RKV_VERBS_SL        InfiniBand service level, 0..15 (default the path's)
 *   RKV_VERBS_GID_INDEX source GID index on RoCE (default rdma_cm's choice)
 *   RKV_VERBS_MTU       the largest MTU this NIC announces and uses (256..4096;
 *                       default the port's active MTU); a connection's path MTU
 *                       is the smaller of both ends' (logged)
 *   RKV_VERBS_SRQ_DEPTH the most buffers of the shared receive pool (16384;
 *                       0: none, receives per QP)
 *   RKV_TOKEN           64-bit connection token, the same on every node (0)
 * DEV, TOS, SL, GID_INDEX, MTU and SRQ_DEPTH are also the settings verbs-*
 * (rkv_config.verbs): the node opens the device the setting names, and
 * set_verbs applies the others over the environment's right after open.
 * RKV_HOST's address, when it is on the opened port, is the source of
 * every connection this NIC dials.
 *
 * Locks, in the only order they are ever nested:
 *   qp->post_mu  serialises posts on one QP (ring heads, ibv_post_*)
 *   nic->mu      CQ polling and resizing, soft queue, QP list and hash,
 *                listeners, every QP field marked "mu"
 *   nic->mr_mu   the list of memory regions (never held with another lock)
 * Events from rdma_cm and the device are acknowledged before any lock is
 * taken: rdma_destroy_id and ibv_destroy_qp wait for those acks, and they
 * run under nic->mu or in the CM task.
 *
 * QP lifetime: the core's (nic_core.h). qp_close marks the QP dead and
 * closed, disconnects, destroys the ibv QP (after which the device writes
 * nothing more into its buffers) and drains the CQ, dropping the QP's CQEs,
 * all under mu; so no completion names it afterwards. Reaping is the CM
 * task's: it destroys the cm id, so that no CM event can name the QP. The
 * side that closed a QP gets no DISCONNECTED.
 */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "nic/nic.h"
#include "nic/nic_core.h"
#include "nic/nic_inet.h"
#include "port/port.h"
#include "util/util.h"

#include <sodium.h>

/* Handshake private data, little-endian, 56 bytes (all a REQ allows):
 *   0 u32 magic | 4 u16 version | 6 u16 kind | 8 u32 active MTU in bytes
 *  12 u32 reject reason | 16 u8[16] nonce | 32 u64 wall-clock ms | 40 u8[16] MAC
 * The rdma_cm handshake has no third message with data, so the accepting
 * side cannot send a challenge first: the request carries a fresh nonce,
 * the sender's clock and HMAC("rkv verbs client", nonce, clock) (its first
 * 16 bytes); the accepting side refuses a clock more than VB_AUTH_SKEW_MS
 * off its own and a nonce it saw within that window (a replayed request),
 * and proves the secret back with HMAC("rkv verbs server", nonce, clock) in
 * its accept. Clocks of a cluster's nodes must agree within that skew. */
#define VB_MAGIC 0x53425652u /* "RVBS" read as bytes */
#define VB_VERSION 2u
#define VB_PDATA_BYTES 56
#define VB_NONCE_BYTES 16
#define VB_MAC_BYTES 16
#define VB_AUTH_SKEW_MS 60000u
#define VB_REPLAY_SLOTS 4096u /* nonces remembered (a ring): requests per skew window */
enum vb_pdata_kind { VB_PD_REQUEST = 1, VB_PD_ACCEPT = 2, VB_PD_REJECT = 3 };
enum vb_reject {
    VB_REJ_PROTO = 1,     /* no or foreign private data, or another version */
    VB_REJ_MTU = 2,       /* active MTUs differ */
    VB_REJ_TOKEN = 3,     /* no proof of the shared secret (or a stale or replayed one) */
    VB_REJ_RESOURCES = 4, /* QP or CQ could not be set up */
    VB_REJ_DEVICE = 5,    /* the request came in on another device */
    VB_REJ_CLOSING = 6,   /* the NIC is closing */
};

#define VB_SQ_DEPTH_DEFAULT 128u
#define VB_RQ_DEPTH_DEFAULT 512u
#define VB_INLINE_BYTES 128u
#define VB_CQ_INITIAL_ENTRIES 16384
#define VB_SOFT_MAX (1u << 22) /* completions waiting for poll() */
#define VB_POLL_BATCH 32
#define VB_EVENT_BATCH 32
#define VB_RESOLVE_MS 5000   /* cap on one address or route resolution */
#define VB_SQ_WAIT_MS 30000u /* a send queue that stays full fails the post */
#define VB_SQ_WAIT_PAUSE_NS 100000ull
#define VB_CM_TICK_MS 1000  /* the CM task reaps at least this often */
#define VB_MIN_RNR_TIMER 12 /* IB encoding: 0.64 ms between RNR retries */
#define VB_RETRY_COUNT 7    /* transport retries before RETRY_EXC */
#define VB_RNR_RETRY_INFINITE 7
#define VB_LISTEN_BACKLOG 128
#define VB_LISTEN_MAX 16
#define VB_HASH_BUCKETS 256u
#define VB_CQ_ACK_BATCH 64u
#define VB_EARLY_MAX 4096u /* shared receives held per QP before it is established */
#define VB_SRQ_DEFAULT_MAX 16384u
/* rdma_ucm bug workaround (as librdmacm): RoCE-only RTR mask bits on IB. */
#define VB_RTR_ROCE_MASK_BITS 0xe00000

#define VB_CONTAINER(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* What a cm id's context points at. */
enum vb_obj_kind { VB_OBJ_LISTENER = 1, VB_OBJ_QP = 2 };
struct vb_obj {
    int kind;
};

/* A posted send, as the poller needs it to complete (or fail) it. */
struct vb_swr {
    uint64_t wr_id;
    uint32_t len;
    uint8_t opcode;   /* RKV_WC_SEND or RKV_WC_WRITE */
    uint8_t signaled; /* the user asked for a completion */
};

struct vb_nic;

struct vb_qp {
    struct rkv_nic_qp core; /* first: the core's lifetime fields (mu), rkv_qp_ctx() */
    struct vb_obj obj;      /* the cm id's context */
    struct vb_nic *nic;
    struct rdma_cm_id *id; /* destroyed by the CM task (reaping) or close */
    struct ibv_qp *qp;     /* mu: NULL once destroyed */
    uint32_t qp_num;
    uint32_t max_inline; /* bytes a send may carry inline */
    char peer[64];       /* "host:port", for log lines */
    atomic_int dead;     /* posts fail with -RKV_EPEERDEAD */
    struct rkv_mutex *post_mu;
    struct vb_swr *sq; /* sq_depth entries, indexed by post counter */
    uint64_t *rq;      /* rq_depth user wr_ids, indexed by post counter */
    uint32_t sq_depth; /* constant */
    uint32_t rq_depth; /* constant; 0 when it draws from the NIC's SRQ */
    int srq;           /* constant: receives come from the NIC's shared pool */
    /* mu: shared receives that arrived before the passive side saw the
     * connection established (the peer may send once its own side is up);
     * queued after CONNECTED. */
    struct rkv_wc *early;
    uint32_t n_early, cap_early;
    uint32_t sq_head;    /* post_mu: next send counter */
    uint32_t sq_signal;  /* post_mu: counter of the last signalled send */
    uint32_t rq_head;    /* post_mu: next receive counter */
    atomic_uint sq_tail; /* sends before it completed (written under mu) */
    atomic_uint rq_tail; /* receives before it completed (written under mu) */
    int exposed;         /* mu: the user holds it (connect returned, CONNECTED queued) */
    int broken;          /* mu: the connection is gone (said so, unless closed) */
    struct vb_qp *next;  /* mu: nic->qps */
    struct vb_qp *hnext; /* mu: hash chain by qp_num */
};

struct vb_listener {
    struct vb_obj obj;
    struct rdma_cm_id *id;
    uint16_t port;
    struct vb_listener *next;
};

/* rkv_mr is first: an rkv_mr whose impl points at itself is one of ours. */
struct vb_mr {
    struct rkv_mr pub;
    struct vb_nic *nic;
    struct ibv_mr *mr; /* NULL for an empty region */
    struct vb_mr *prev, *next;
};

struct vb_nic {
    struct rkv_nic base; /* first: the engine holds a struct rkv_nic * */
    /* the device */
    struct ibv_context *ctx;
    char dev_name[64];
    uint8_t port_num;       /* the port chosen at open (rdma_cm picks per connection) */
    uint32_t max_msg_bytes; /* the port's max_msg_sz */
    int max_cqe, max_mr;    /* device limits */
    int max_srq_wr;         /* device limit (0: no SRQ) */
    uint64_t max_mr_size;   /* device limit */
    struct ibv_pd *pd;
    struct ibv_comp_channel *comp_ch;
    struct ibv_cq *cq;
    int cq_entries;       /* mu: the CQ's size */
    uint64_t cq_reserved; /* mu: entries promised to live QPs */
    int armed;            /* poller: a completion event was requested */
    unsigned cq_unacked;  /* poller: completion events not acked yet */
    struct rdma_event_channel *cm_ch;
    int poll_wake_fd; /* eventfd: wakes poll() */
    int cm_wake_fd;   /* eventfd: wakes the CM task */
    struct rkv_task *cm_task;
    /* settings, fixed at open */
    uint32_t sq_depth, rq_depth;
    int busy_poll;
    uint64_t refused; /* CM task: connection requests refused at the handshake check */
    struct rkv_ratelim lim_refused; /* CM task */
    /* CM task: nonces of requests accepted lately, to refuse a replay. */
    uint8_t (*replay)[VB_NONCE_BYTES];
    uint32_t replay_next;
    /* state */
    struct rkv_mutex *mu;
    int stopping;                        /* mu */
    int poll_woken;                      /* mu: poll_wake; the next poll returns at once */
    struct rkv_nic_cq soft;              /* mu: the core's soft CQ */
    struct vb_qp *qps;                   /* mu: every QP not reaped yet */
    struct vb_qp *hash[VB_HASH_BUCKETS]; /* mu: QPs whose ibv QP lives, by qp_num */
    struct vb_listener *listeners;       /* mu */
    unsigned n_listeners;                /* mu */
    struct rkv_mutex *mr_mu;
    struct vb_mr *mrs; /* mr_mu */
    uint32_t n_mrs;    /* mr_mu */
    /* The shared receive pool (srq_setup; mu): every QP created after it
     * draws from it. Its buffers are ours and live until close. */
    struct ibv_srq *srq;
    uint8_t *srq_mem;
    struct ibv_mr *srq_mr;
    uint32_t srq_count, srq_buf_bytes;
    uint8_t srq_tag;
    uint32_t srq_max;    /* RKV_VERBS_SRQ_DEPTH: largest pool, 0 = no SRQ */
    int tos;             /* RKV_VERBS_TOS: IP traffic class of RoCE v2 packets, -1 = rdma_cm's */
    int sl;              /* RKV_VERBS_SL: InfiniBand service level, -1 = the path's */
    int gid_index;       /* RKV_VERBS_GID_INDEX: source GID of RoCE packets, -1 = rdma_cm's */
    uint32_t mtu_cap;    /* RKV_VERBS_MTU: the most this NIC announces and uses, 0 = the port's */
    uint64_t n_qps_made; /* mu: QPs ever created (srq_setup comes first) */
    int gid_tbl_len;     /* the port's GIDs, for a gid_index given by set_verbs */
    /* RKV_HOST's address when it is on the opened port: connections are
     * dialled from it, so that they leave through this NIC. Without a
     * source rdma_cm takes the route's, which on a node with two NICs
     * whose peers are both local (or both reachable) may be the other's. */
    struct sockaddr_storage src;
    int has_src;
};

/* A CM event, copied so that it can be acknowledged before it is handled. */
struct vb_cm_ev {
    enum rdma_cm_event_type type;
    int status;
    struct rdma_cm_id *id;
    uint8_t pdata[VB_PDATA_BYTES];
    uint8_t pdata_len;
};

struct vb_pdata {
    uint16_t version, kind;
    uint32_t mtu_bytes, reason;
    uint8_t nonce[VB_NONCE_BYTES];
    uint64_t clock_ms;
    uint8_t mac[VB_MAC_BYTES];
};

static struct vb_nic *vb_nic_of(struct rkv_nic *nic)
{
    assert(nic && nic->ops == &rkv_nic_verbs_ops);
    return (struct vb_nic *)(void *)nic;
}

static struct vb_qp *vb_qp_of(struct rkv_qp *qp)
{
    assert(qp);
    return (struct vb_qp *)(void *)qp;
}

static struct rkv_qp *vb_qp_pub(struct vb_qp *qp)
{
    return (struct rkv_qp *)(void *)qp;
}

static void vb_lock(struct vb_nic *n)
{
    n->base.port->ops->mutex_lock(n->mu);
}

static void vb_unlock(struct vb_nic *n)
{
    n->base.port->ops->mutex_unlock(n->mu);
}

static uint64_t vb_now_ns(struct vb_nic *n)
{
    return n->base.port->ops->now_ns(n->base.port);
}

static void vb_kick(int fd)
{
    uint64_t one = 1;
    /* Fails only when the counter would overflow: a wake-up is pending then. */
    ssize_t w = write(fd, &one, sizeof(one));
    (void)w;
}

static void vb_unkick(int fd)
{
    uint64_t v;
    ssize_t r = read(fd, &v, sizeof(v)); /* resets the counter */
    (void)r;
}

static int vb_set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static int vb_mtu_bytes(enum ibv_mtu mtu)
{
    return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128 << mtu : 0;
}

/* The largest IB MTU not above bytes (256 at least). */
static enum ibv_mtu vb_mtu_enum(int bytes)
{
    enum ibv_mtu m = IBV_MTU_4096;
    while (m > IBV_MTU_256 && vb_mtu_bytes(m) > bytes)
        m = (enum ibv_mtu)(m - 1);
    return m;
}

/* An MTU an IB or RoCE port can have. */
static int vb_mtu_valid(uint32_t bytes)
{
    return bytes >= 256 && bytes <= 4096 && (bytes & (bytes - 1)) == 0;
}

static const char *vb_dev_name_of(const struct ibv_context *ctx)
{
    return ctx && ctx->device ? ibv_get_device_name(ctx->device) : "?";
}

static void vb_addr_name(const struct sockaddr *sa, char *buf, size_t len)
{
    socklen_t sl =
        sa && sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    rkv_nic_addr_name(sa, sl, buf, len);
}

/* ---- handshake private data ---- */

static void vb_pdata_put(uint8_t *b, const struct vb_pdata *pd)
{
    memset(b, 0, VB_PDATA_BYTES);
    rkv_nic_put32(b, VB_MAGIC);
    rkv_nic_put16(b + 4, VB_VERSION);
    rkv_nic_put16(b + 6, pd->kind);
    rkv_nic_put32(b + 8, pd->mtu_bytes);
    rkv_nic_put32(b + 12, pd->reason);
    memcpy(b + 16, pd->nonce, VB_NONCE_BYTES);
    rkv_nic_put64(b + 32, pd->clock_ms);
    memcpy(b + 40, pd->mac, VB_MAC_BYTES);
}

/* 0 when b holds our private data (of any version); -1 otherwise. */
static int vb_pdata_get(const uint8_t *b, size_t len, struct vb_pdata *pd)
{
    if (len < VB_PDATA_BYTES || rkv_nic_get32(b) != VB_MAGIC)
        return -1;
    *pd = (struct vb_pdata){.version = rkv_nic_get16(b + 4),
                            .kind = rkv_nic_get16(b + 6),
                            .mtu_bytes = rkv_nic_get32(b + 8),
                            .reason = rkv_nic_get32(b + 12),
                            .clock_ms = rkv_nic_get64(b + 32)};
    memcpy(pd->nonce, b + 16, VB_NONCE_BYTES);
    memcpy(pd->mac, b + 40, VB_MAC_BYTES);
    return 0;
}

/* ---- proof of the shared secret (layout above) ---- */

static uint64_t vb_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The (truncated) MAC of pd's nonce and clock under label. */
static void vb_auth_mac(const struct vb_nic *n, const char *label, const struct vb_pdata *pd,
                        uint8_t mac[VB_MAC_BYTES])
{
    uint8_t clock[8], full[RKV_NIC_AUTH_MAC_BYTES];
    rkv_nic_put64(clock, pd->clock_ms);
    rkv_nic_auth_mac(&n->base, label, pd->nonce, VB_NONCE_BYTES, clock, sizeof(clock), full);
    memcpy(mac, full, VB_MAC_BYTES);
}

static int vb_auth_ok(const struct vb_nic *n, const char *label, const struct vb_pdata *pd)
{
    uint8_t want[VB_MAC_BYTES];
    vb_auth_mac(n, label, pd, want);
    return sodium_memcmp(want, pd->mac, VB_MAC_BYTES) == 0;
}

/* CM task: why a request's proof is not good enough, or NULL (and then
 * its nonce is remembered). */
static const char *vb_auth_check(struct vb_nic *n, const struct vb_pdata *pd)
{
    if (!vb_auth_ok(n, "rkv verbs client", pd))
        return "wrong secret (its proof does not match)";
    uint64_t now = vb_wall_ms();
    uint64_t skew = now > pd->clock_ms ? now - pd->clock_ms : pd->clock_ms - now;
    if (skew > VB_AUTH_SKEW_MS)
        return "its clock is more than 60 s off this node's (or the request is an old one "
               "replayed)";
    for (uint32_t i = 0; n->replay && i < VB_REPLAY_SLOTS; i++)
        if (memcmp(n->replay[i], pd->nonce, VB_NONCE_BYTES) == 0)
            return "a replayed request (its nonce was seen already)";
    if (n->replay) {
        memcpy(n->replay[n->replay_next], pd->nonce, VB_NONCE_BYTES);
        n->replay_next = (n->replay_next + 1) % VB_REPLAY_SLOTS;
    }
    return NULL;
}

/* ---- the soft completion queue (mu held) ---- */

/* Queues a completion for poll(). A closed QP, or one the user does not
 * hold yet, completes nothing. */
static void vb_emit(struct vb_nic *n, struct vb_qp *qp, struct rkv_wc wc)
{
    if (!qp->exposed)
        return;
    int rc = rkv_nic_cq_emit(&n->soft, &qp->core, wc);
    if (rc < 0)
        RKV_LOGE(n->base.port, "nic verbs: %s: completion %d lost: %s", qp->peer, wc.opcode,
                 rkv_strerror(rc));
}

/* ---- QPs by number (mu held) ---- */

static struct vb_qp **vb_hash_slot(struct vb_nic *n, uint32_t qp_num)
{
    return &n->hash[(qp_num * 2654435761u) % VB_HASH_BUCKETS];
}

static struct vb_qp *vb_hash_find(struct vb_nic *n, uint32_t qp_num)
{
    struct vb_qp *qp = *vb_hash_slot(n, qp_num);
    while (qp && qp->qp_num != qp_num)
        qp = qp->hnext;
    return qp;
}

static void vb_hash_add(struct vb_nic *n, struct vb_qp *qp)
{
    struct vb_qp **slot = vb_hash_slot(n, qp->qp_num);
    assert(!vb_hash_find(n, qp->qp_num));
    qp->hnext = *slot;
    *slot = qp;
}

static void vb_hash_remove(struct vb_nic *n, struct vb_qp *qp)
{
    for (struct vb_qp **pp = vb_hash_slot(n, qp->qp_num); *pp; pp = &(*pp)->hnext) {
        if (*pp == qp) {
            *pp = qp->hnext;
            return;
        }
    }
}

static void vb_list_remove(struct vb_nic *n, struct vb_qp *qp)
{
    for (struct vb_qp **pp = &n->qps; *pp; pp = &(*pp)->next) {
        if (*pp == qp) {
            *pp = qp->next;
            return;
        }
    }
}

/* ---- breaking a connection (mu held) ---- */

/* The connection is gone: posts fail from now on, what is posted is
 * flushed, the peer is told (rdma_disconnect, which also answers its
 * DREQ) and the user gets one DISCONNECTED. why == NULL: an orderly end. */
static void vb_qp_break(struct vb_nic *n, struct vb_qp *qp, const char *why)
{
    if (qp->broken || qp->core.closed || !qp->exposed)
        return;
    qp->broken = 1;
    atomic_store(&qp->dead, 1);
    if (qp->qp) {
        struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
        if (ibv_modify_qp(qp->qp, &a, IBV_QP_STATE) != 0)
            RKV_LOGW(n->base.port, "nic verbs: %s: cannot move the QP to the error state: %s",
                     qp->peer, strerror(errno));
    }
    rdma_disconnect(qp->id); /* fails harmlessly when the CM already knows */
    if (why)
        RKV_LOGW(n->base.port, "nic verbs: dropping the connection with %s: %s", qp->peer, why);
    else
        RKV_LOGI(n->base.port, "nic verbs: %s disconnected", qp->peer);
    vb_emit(n, qp, (struct rkv_wc){.opcode = RKV_WC_DISCONNECTED, .status = RKV_WC_SUCCESS});
}

/* ---- completions from the CQ (mu held) ---- */

static int vb_wc_status(enum ibv_wc_status st)
{
    switch (st) {
    case IBV_WC_SUCCESS:
        return RKV_WC_SUCCESS;
    case IBV_WC_WR_FLUSH_ERR:
    case IBV_WC_RETRY_EXC_ERR:     /* the peer stopped answering: a disconnect */
    case IBV_WC_RNR_RETRY_EXC_ERR: /* idem (cannot happen with infinite RNR retry) */
        return RKV_WC_FLUSH_ERR;
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_REM_INV_REQ_ERR: /* e.g. a SEND larger than the posted receive */
    case IBV_WC_REM_OP_ERR:
        return RKV_WC_REM_ACCESS_ERR;
    default:
        return RKV_WC_LOC_ERR;
    }
}

static int vb_srq_post(struct vb_nic *n, uint32_t i);

/* A completion of a shared receive: handed out, or its buffer goes back. */
static void vb_on_srq_cqe(struct vb_nic *n, struct vb_qp *qp, const struct ibv_wc *w, uint32_t i)
{
    if (RKV_NEVER(i >= n->srq_count))
        return;
    if (w->status != IBV_WC_SUCCESS && !qp->broken) {
        char why[96];
        snprintf(why, sizeof(why), "receive failed: %s", ibv_wc_status_str(w->status));
        vb_qp_break(n, qp, w->status == IBV_WC_WR_FLUSH_ERR ? NULL : why);
    }
    if (w->status != IBV_WC_SUCCESS || qp->broken || qp->core.closed) {
        vb_srq_post(n, i); /* nobody will see it: the pool keeps its size */
        return;
    }
    struct rkv_wc wc = {
        .wr_id = (uint64_t)i << 8 | n->srq_tag, .status = RKV_WC_SUCCESS, .byte_len = w->byte_len};
    if (w->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
        wc.opcode = RKV_WC_RECV_IMM;
        wc.imm = ntohl(w->imm_data);
    } else {
        wc.opcode = RKV_WC_RECV;
    }
    if (!qp->exposed) { /* before ESTABLISHED reached us: held until CONNECTED */
        if (qp->n_early == qp->cap_early) {
            uint32_t cap = qp->cap_early ? 2 * qp->cap_early : 16;
            struct rkv_wc *e = cap <= VB_EARLY_MAX ? realloc(qp->early, cap * sizeof(*e)) : NULL;
            if (!e) {
                vb_srq_post(n, i);
                vb_qp_break(n, qp, "too many messages before the connection was established");
                return;
            }
            qp->early = e;
            qp->cap_early = cap;
        }
        qp->early[qp->n_early++] = wc;
        return;
    }
    if (rkv_nic_cq_emit(&n->soft, &qp->core, wc) < 0) {
        RKV_LOGE(n->base.port, "nic verbs: %s: receive completion lost (soft queue full)",
                 qp->peer);
        vb_srq_post(n, i);
    }
}

static void vb_on_recv_cqe(struct vb_nic *n, struct vb_qp *qp, const struct ibv_wc *w,
                           uint32_t counter)
{
    if (qp->srq)
        return vb_on_srq_cqe(n, qp, w, counter);
    uint64_t user_wr_id = qp->rq[counter % qp->rq_depth];
    atomic_store(&qp->rq_tail, counter + 1);
    if (w->status != IBV_WC_SUCCESS) {
        /* Receives on a broken connection are not completed (nic.h). */
        if (w->status != IBV_WC_WR_FLUSH_ERR || !qp->broken) {
            char why[96];
            snprintf(why, sizeof(why), "receive failed: %s", ibv_wc_status_str(w->status));
            vb_qp_break(n, qp, w->status == IBV_WC_WR_FLUSH_ERR ? NULL : why);
        }
        return;
    }
    if (qp->broken)
        return;
    struct rkv_wc wc = {.wr_id = user_wr_id, .status = RKV_WC_SUCCESS, .byte_len = w->byte_len};
    if (w->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
        wc.opcode = RKV_WC_RECV_IMM;
        wc.imm = ntohl(w->imm_data);
    } else {
        wc.opcode = RKV_WC_RECV;
    }
    vb_emit(n, qp, wc);
}

static void vb_on_send_cqe(struct vb_nic *n, struct vb_qp *qp, const struct ibv_wc *w,
                           uint32_t counter)
{
    const struct vb_swr s = qp->sq[counter % qp->sq_depth];
    /* Sends complete in order: an unsignalled one before it finished too. */
    atomic_store(&qp->sq_tail, counter + 1);
    struct rkv_wc wc = {.wr_id = s.wr_id, .opcode = s.opcode, .byte_len = s.len};
    if (w->status == IBV_WC_SUCCESS) {
        if (s.signaled)
            vb_emit(n, qp, wc);
        return;
    }
    wc.status = vb_wc_status(w->status);
    /* An unsignalled send reports only the failure that broke the connection. */
    if (s.signaled || (!qp->broken && w->status != IBV_WC_WR_FLUSH_ERR))
        vb_emit(n, qp, wc);
    if (!qp->broken) {
        char why[96];
        snprintf(why, sizeof(why), "%s failed: %s", s.opcode == RKV_WC_WRITE ? "write" : "send",
                 ibv_wc_status_str(w->status));
        vb_qp_break(n, qp, w->status == IBV_WC_WR_FLUSH_ERR ? NULL : why);
    }
}

static void vb_on_cqe(struct vb_nic *n, const struct ibv_wc *w)
{
    struct vb_qp *qp = vb_hash_find(n, w->qp_num);
    if (RKV_NEVER(!qp)) {
        RKV_LOGD(n->base.port, "nic verbs: completion for unknown QP %u dropped", w->qp_num);
        return;
    }
    uint32_t counter = (uint32_t)(w->wr_id >> 1);
    if (w->wr_id & 1)
        vb_on_recv_cqe(n, qp, w, counter);
    else
        vb_on_send_cqe(n, qp, w, counter);
}

/* Moves up to max CQEs (all when max < 0) into the soft queue. */
static int vb_cq_drain(struct vb_nic *n, int max)
{
    struct ibv_wc w[VB_POLL_BATCH];
    int total = 0;
    while (max < 0 || total < max) {
        int want = VB_POLL_BATCH;
        if (max >= 0 && max - total < want)
            want = max - total;
        int k = ibv_poll_cq(n->cq, want, w);
        if (RKV_NEVER(k < 0)) {
            RKV_LOGE(n->base.port, "nic verbs: ibv_poll_cq failed on %s", n->dev_name);
            break;
        }
        for (int i = 0; i < k; i++)
            vb_on_cqe(n, &w[i]);
        total += k;
        if (k < want)
            break;
    }
    return total;
}

/* ---- QP set-up ---- */

/* Promises `need` CQ entries to a new QP, growing the CQ when needed. */
static int vb_cq_reserve(struct vb_nic *n, uint32_t need)
{
    struct rkv_port *port = n->base.port;
    uint64_t want = n->cq_reserved + need;
    if (want > (uint64_t)n->cq_entries) {
        if (want > (uint64_t)n->max_cqe) {
            RKV_LOGE(port,
                     "nic verbs: one more QP would need %llu CQ entries, %s allows %d: lower "
                     "RKV_VERBS_SQ_DEPTH (%u) or RKV_VERBS_RX_DEPTH (%u), or use fewer connections",
                     (unsigned long long)want, n->dev_name, n->max_cqe, n->sq_depth, n->rq_depth);
            return -RKV_ELIMIT;
        }
        uint64_t size = (uint64_t)n->cq_entries * 2;
        if (size < want)
            size = want;
        if (size > (uint64_t)n->max_cqe)
            size = (uint64_t)n->max_cqe;
        int e = ibv_resize_cq(n->cq, (int)size);
        if (e != 0) {
            RKV_LOGE(port, "nic verbs: cannot grow the CQ of %s from %d to %llu entries: %s",
                     n->dev_name, n->cq_entries, (unsigned long long)size, strerror(e));
            return -RKV_ELIMIT;
        }
        n->cq_entries = n->cq->cqe;
    }
    n->cq_reserved += need;
    return 0;
}

/* mu held. Destroys the ibv QP, after which nothing is written into its
 * buffers, and converts the CQEs it left (dropped if closed or never
 * exposed) before its number can be reused. */
static void vb_qp_destroy_verbs(struct vb_nic *n, struct vb_qp *qp)
{
    if (!qp->qp)
        return;
    if (ibv_destroy_qp(qp->qp) != 0)
        RKV_LOGW(n->base.port, "nic verbs: %s: ibv_destroy_qp failed: %s", qp->peer,
                 strerror(errno));
    qp->qp = NULL;
    vb_cq_drain(n, -1);
    vb_hash_remove(n, qp);
    n->cq_reserved -= qp->sq_depth + qp->rq_depth;
}

static void vb_qp_free(struct vb_nic *n, struct vb_qp *qp)
{
    assert(!qp->qp && qp->core.cq_refs == 0);
    if (qp->post_mu)
        n->base.port->ops->mutex_destroy(qp->post_mu);
    for (uint32_t k = 0; k < qp->n_early; k++) /* never handed out: back to the pool */
        vb_srq_post(n, (uint32_t)(qp->early[k].wr_id >> 8));
    free(qp->early);
    free(qp->sq);
    free(qp->rq);
    free(qp);
}

/* The core frees a closed, reaped QP with its last soft-queue entry. */
static void vb_qp_free_last(void *owner, struct rkv_nic_qp *core)
{
    vb_qp_free(owner, (struct vb_qp *)(void *)core);
}

static int vb_modify(struct vb_nic *n, struct vb_qp *qp, struct ibv_qp_attr *a, int mask,
                     const char *step)
{
    int e = ibv_modify_qp(qp->qp, a, mask);
    if (e == 0)
        return 0;
    RKV_LOGE(n->base.port, "nic verbs: %s: failed to modify the QP to %s: %s", qp->peer, step,
             strerror(e));
    return -RKV_EIO;
}

static int vb_init_attr(struct vb_nic *n, struct vb_qp *qp, struct ibv_qp_attr *a, int *mask,
                        enum ibv_qp_state state, const char *step)
{
    *a = (struct ibv_qp_attr){.qp_state = state};
    if (rdma_init_qp_attr(qp->id, a, mask) == 0)
        return 0;
    RKV_LOGE(n->base.port, "nic verbs: %s: rdma_init_qp_attr(%s) failed: %s", qp->peer, step,
             strerror(errno));
    return -RKV_EIO;
}

/* Creates the QP of cm id `id` in state INIT, reserving its CQ share. */
static int vb_qp_create(struct vb_nic *n, struct rdma_cm_id *id, const char *peer,
                        struct vb_qp **qp_p)
{
    struct rkv_port *port = n->base.port;
    struct vb_qp *qp = calloc(1, sizeof(*qp));
    if (!qp)
        return -RKV_ENOMEM;
    qp->obj.kind = VB_OBJ_QP;
    qp->nic = n;
    qp->id = id;
    qp->sq_depth = n->sq_depth;
    vb_lock(n);
    qp->srq = n->srq != NULL;
    n->n_qps_made++;
    vb_unlock(n);
    qp->rq_depth = qp->srq ? 0 : n->rq_depth;
    atomic_init(&qp->dead, 0);
    atomic_init(&qp->sq_tail, 0);
    atomic_init(&qp->rq_tail, 0);
    snprintf(qp->peer, sizeof(qp->peer), "%s", peer);
    qp->sq = calloc(qp->sq_depth, sizeof(*qp->sq));
    qp->rq = calloc(qp->rq_depth ? qp->rq_depth : 1, sizeof(*qp->rq));
    int rc = -RKV_ENOMEM;
    if (!qp->sq || !qp->rq || port->ops->mutex_create(port, &qp->post_mu) < 0)
        goto undo_alloc;
    vb_lock(n);
    rc = vb_cq_reserve(n, qp->sq_depth + qp->rq_depth);
    vb_unlock(n);
    if (rc < 0)
        goto undo_alloc;
    struct ibv_qp_init_attr ia = {
        .qp_context = qp,
        .send_cq = n->cq,
        .recv_cq = n->cq,
        .srq = qp->srq ? n->srq : NULL,
        .cap = {.max_send_wr = qp->sq_depth,
                .max_recv_wr = qp->rq_depth,
                .max_send_sge = 1,
                .max_recv_sge = 1,
                .max_inline_data = VB_INLINE_BYTES},
        .qp_type = IBV_QPT_RC,
    };
    qp->qp = ibv_create_qp(n->pd, &ia);
    if (!qp->qp) { /* some devices have no inline sends */
        ia.cap.max_inline_data = 0;
        qp->qp = ibv_create_qp(n->pd, &ia);
    }
    if (!qp->qp) {
        RKV_LOGE(port, "nic verbs: %s: ibv_create_qp (sq %u, rq %u) on %s failed: %s", peer,
                 qp->sq_depth, qp->rq_depth, n->dev_name, strerror(errno));
        rc = errno == ENOMEM ? -RKV_ENOMEM : -RKV_EIO;
        goto undo_reserve;
    }
    qp->qp_num = qp->qp->qp_num;
    qp->max_inline = ia.cap.max_inline_data;
    struct ibv_qp_attr a;
    int mask;
    rc = vb_init_attr(n, qp, &a, &mask, IBV_QPS_INIT, "INIT");
    if (rc < 0)
        goto undo_qp;
    /* Both ends are targets of WRITE_WITH_IMM; nobody reads or does atomics. */
    a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    rc = vb_modify(n, qp, &a, mask | IBV_QP_ACCESS_FLAGS, "INIT");
    if (rc < 0)
        goto undo_qp;
    *qp_p = qp;
    return 0;
undo_qp:
    ibv_destroy_qp(qp->qp);
    qp->qp = NULL;
undo_reserve:
    vb_lock(n);
    n->cq_reserved -= qp->sq_depth + qp->rq_depth;
    vb_unlock(n);
undo_alloc:
    vb_qp_free(n, qp);
    return rc;
}

/* Destroys a QP the user never saw, with its cm id. Not under mu. */
static void vb_qp_discard(struct vb_nic *n, struct vb_qp *qp)
{
    vb_lock(n);
    vb_list_remove(n, qp);
    if (qp->qp && vb_hash_find(n, qp->qp_num) == qp) {
        vb_qp_destroy_verbs(n, qp);
    } else if (qp->qp) { /* never entered the hash: it has no CQEs */
        ibv_destroy_qp(qp->qp);
        qp->qp = NULL;
        n->cq_reserved -= qp->sq_depth + qp->rq_depth;
    }
    vb_unlock(n);
    if (qp->id)
        rdma_destroy_id(qp->id);
    vb_qp_free(n, qp);
}

/* INIT -> RTR -> RTS with rdma_cm's attributes, our RNR timer and retries.
 * Returns the path MTU in bytes through mtu_p. */
static int vb_qp_connect_states(struct vb_nic *n, struct vb_qp *qp, int link_layer, int our_mtu,
                                int peer_mtu, int *mtu_p)
{
    struct ibv_qp_attr a;
    int mask;
    int rc = vb_init_attr(n, qp, &a, &mask, IBV_QPS_RTR, "RTR");
    if (rc < 0)
        return rc;
    if (link_layer == IBV_LINK_LAYER_INFINIBAND)
        mask &= ~VB_RTR_ROCE_MASK_BITS;
    a.min_rnr_timer = VB_MIN_RNR_TIMER;
    /* A fabric's own choices: the service level on InfiniBand (the path
     * record's otherwise), the source GID on RoCE (rdma_cm's matches the
     * address; a fabric may want another type, e.g. v2 over v1). */
    if (n->sl >= 0 && link_layer == IBV_LINK_LAYER_INFINIBAND)
        a.ah_attr.sl = (uint8_t)n->sl;
    if (n->gid_index >= 0 && a.ah_attr.is_global)
        a.ah_attr.grh.sgid_index = (uint8_t)n->gid_index;
    /* The path MTU is the smallest of the route's and both ends' MTUs: a
     * packet larger than the peer's port takes would be dropped. */
    int route_mtu = vb_mtu_bytes(a.path_mtu);
    int want = route_mtu;
    if (our_mtu > 0 && our_mtu < want)
        want = our_mtu;
    if (peer_mtu > 0 && peer_mtu < want)
        want = peer_mtu;
    if (want != route_mtu) {
        a.path_mtu = vb_mtu_enum(want);
        RKV_LOGI(n->base.port,
                 "nic verbs: %s: path MTU %d, the smallest of this port's %d, the peer's %d and "
                 "the route's %d",
                 qp->peer, want, our_mtu, peer_mtu, route_mtu);
    }
    *mtu_p = vb_mtu_bytes(a.path_mtu);
    rc = vb_modify(n, qp, &a, mask | IBV_QP_MIN_RNR_TIMER, "RTR");
    if (rc < 0)
        return rc;
    rc = vb_init_attr(n, qp, &a, &mask, IBV_QPS_RTS, "RTS");
    if (rc < 0)
        return rc;
    a.retry_cnt = VB_RETRY_COUNT;
    a.rnr_retry = VB_RNR_RETRY_INFINITE;
    return vb_modify(n, qp, &a, mask | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY, "RTS");
}

/* The active MTU and link layer of the port a cm id resolved to. */
static int vb_id_port(struct vb_nic *n, struct rdma_cm_id *id, int *mtu_p, int *link_layer_p)
{
    struct ibv_port_attr pa;
    int e = ibv_query_port(n->ctx, id->port_num, &pa);
    if (e != 0) {
        RKV_LOGE(n->base.port, "nic verbs: ibv_query_port(%s, %u) failed: %s", n->dev_name,
                 id->port_num, strerror(e));
        return -RKV_EIO;
    }
    *mtu_p = vb_mtu_bytes(pa.active_mtu);
    if (n->mtu_cap && (int)n->mtu_cap < *mtu_p)
        *mtu_p = vb_mtu_bytes(vb_mtu_enum((int)n->mtu_cap));
    *link_layer_p = pa.link_layer;
    return 0;
}

/* Whether rdma_cm put id on this NIC's device. */
static int vb_id_on_our_device(const struct vb_nic *n, const struct rdma_cm_id *id)
{
    return id->verbs && strcmp(vb_dev_name_of(id->verbs), n->dev_name) == 0;
}

/* ---- the passive side (CM task) ---- */

static void vb_reject(struct vb_nic *n, struct rdma_cm_id *id, uint32_t reason, int mtu_bytes)
{
    uint8_t b[VB_PDATA_BYTES];
    struct vb_pdata pd = {.kind = VB_PD_REJECT, .mtu_bytes = (uint32_t)mtu_bytes, .reason = reason};
    vb_pdata_put(b, &pd);
    if (rdma_reject(id, b, sizeof(b)) != 0)
        RKV_LOGD(n->base.port, "nic verbs: rdma_reject failed: %s", strerror(errno));
}

/* Checks a connection request's private data; returns 0 or the reason to
 * refuse it. mtu_bytes: the active MTU of the port it came in on. CM task. */
static uint32_t vb_check_request(struct vb_nic *n, const struct vb_cm_ev *e, const char *peer,
                                 int mtu_bytes)
{
    struct vb_pdata pd;
    char why[192];
    int level = RKV_LOG_ERROR;
    uint32_t reason;
    const char *bad_auth = NULL;
    if (vb_pdata_get(e->pdata, e->pdata_len, &pd) < 0 || pd.kind != VB_PD_REQUEST) {
        level = RKV_LOG_WARN;
        reason = VB_REJ_PROTO;
        snprintf(why, sizeof(why), "its request is not from an rkv verbs NIC");
    } else if (pd.version != VB_VERSION) {
        reason = VB_REJ_PROTO;
        snprintf(why, sizeof(why), "it speaks handshake version %u, this node %u", pd.version,
                 VB_VERSION);
    } else if (!vb_mtu_valid(pd.mtu_bytes)) {
        reason = VB_REJ_MTU;
        snprintf(why, sizeof(why), "it announces MTU %u (this port's, on %s, is %d)", pd.mtu_bytes,
                 n->dev_name, mtu_bytes);
    } else if ((bad_auth = vb_auth_check(n, &pd)) != NULL) {
        level = RKV_LOG_WARN;
        reason = VB_REJ_TOKEN;
        snprintf(why, sizeof(why),
                 "%s; peers need the same secret: RKV_TOKEN, RKV_SECRET_FILE or "
                 "rkv_config.secret",
                 bad_auth);
    } else {
        return 0;
    }
    /* Once per interval, with a count: a flood must not flood the log (as tcp). */
    uint64_t quiet = 0;
    n->refused++;
    if (rkv_ratelim_ok(&n->lim_refused, n->base.port->ops->now_ns(n->base.port), 1, &quiet))
        rkv_port_log(n->base.port, level,
                     "nic verbs: refusing %s: %s (%llu refused so far, %llu since the last line)",
                     peer, why, (unsigned long long)n->refused, (unsigned long long)quiet);
    return reason;
}

/* Sets up, and accepts, the QP of an acceptable request. */
static int vb_accept(struct vb_nic *n, struct rdma_cm_id *id, const char *peer, int mtu_bytes,
                     int link_layer, const struct vb_pdata *req)
{
    struct vb_qp *qp;
    int rc = vb_qp_create(n, id, peer, &qp);
    if (rc < 0)
        return rc;
    int path_mtu = 0;
    rc = vb_qp_connect_states(n, qp, link_layer, mtu_bytes, (int)req->mtu_bytes, &path_mtu);
    if (rc < 0)
        goto undo;
    uint8_t b[VB_PDATA_BYTES];
    struct vb_pdata pd = {.kind = VB_PD_ACCEPT, .mtu_bytes = (uint32_t)mtu_bytes};
    memcpy(pd.nonce, req->nonce, VB_NONCE_BYTES);
    pd.clock_ms = req->clock_ms;
    vb_auth_mac(n, "rkv verbs server", &pd, pd.mac); /* this side knows the secret too */
    vb_pdata_put(b, &pd);
    struct rdma_conn_param cp = {.private_data = b,
                                 .private_data_len = sizeof(b),
                                 .rnr_retry_count = VB_RNR_RETRY_INFINITE,
                                 .retry_count = VB_RETRY_COUNT,
                                 .qp_num = qp->qp_num};
    id->context = &qp->obj;
    vb_lock(n);
    qp->next = n->qps;
    n->qps = qp;
    vb_hash_add(n, qp);
    vb_unlock(n);
    if (rdma_accept(id, &cp) != 0) {
        RKV_LOGW(n->base.port, "nic verbs: rdma_accept of %s failed: %s", peer, strerror(errno));
        qp->id = NULL; /* the caller destroys the id */
        vb_qp_discard(n, qp);
        return -RKV_EIO;
    }
    RKV_LOGD(n->base.port, "nic verbs: accepting %s (path MTU %d)", peer, path_mtu);
    return 0;
undo:
    qp->id = NULL;
    vb_qp_discard(n, qp);
    return rc;
}

static void vb_on_request(struct vb_nic *n, const struct vb_cm_ev *e)
{
    struct rdma_cm_id *id = e->id;
    char peer[64];
    vb_addr_name(rdma_get_peer_addr(id), peer, sizeof(peer));
    int mtu_bytes = 0, link_layer = 0;
    uint32_t reason;
    vb_lock(n);
    int stopping = n->stopping;
    vb_unlock(n);
    if (stopping) {
        reason = VB_REJ_CLOSING;
    } else if (!vb_id_on_our_device(n, id)) {
        RKV_LOGW(n->base.port, "nic verbs: refusing %s: it came in on %s, this NIC uses %s", peer,
                 vb_dev_name_of(id->verbs), n->dev_name);
        reason = VB_REJ_DEVICE;
    } else if (vb_id_port(n, id, &mtu_bytes, &link_layer) < 0) {
        reason = VB_REJ_RESOURCES;
    } else {
        reason = vb_check_request(n, e, peer, mtu_bytes);
        struct vb_pdata req;
        if (!reason && (vb_pdata_get(e->pdata, e->pdata_len, &req) < 0 ||
                        vb_accept(n, id, peer, mtu_bytes, link_layer, &req) < 0))
            reason = VB_REJ_RESOURCES;
    }
    if (!reason)
        return;
    vb_reject(n, id, reason, mtu_bytes);
    rdma_destroy_id(id);
}

/* ---- CM events of established or pending QPs (CM task) ---- */

static void vb_on_established(struct vb_nic *n, struct vb_qp *qp)
{
    vb_lock(n);
    int fresh = !qp->exposed && !qp->core.closed;
    if (fresh) {
        qp->exposed = 1;
        vb_emit(n, qp, (struct rkv_wc){.opcode = RKV_WC_CONNECTED, .status = RKV_WC_SUCCESS});
        for (uint32_t k = 0; k < qp->n_early; k++)
            if (qp->broken || rkv_nic_cq_emit(&n->soft, &qp->core, qp->early[k]) < 0)
                vb_srq_post(n, (uint32_t)(qp->early[k].wr_id >> 8));
        qp->n_early = 0;
    }
    vb_unlock(n);
    if (fresh) {
        RKV_LOGD(n->base.port, "nic verbs: accepted %s", qp->peer);
        vb_kick(n->poll_wake_fd);
    }
}

static void vb_on_conn_end(struct vb_nic *n, struct vb_qp *qp, const struct vb_cm_ev *e)
{
    vb_lock(n);
    int pending = !qp->exposed && !qp->core.closed;
    if (!pending) {
        char why[96];
        snprintf(why, sizeof(why), "%s (status %d)", rdma_event_str(e->type), e->status);
        /* Completions already in the CQ come first: data that arrived before
         * the disconnect is delivered before DISCONNECTED. */
        vb_cq_drain(n, -1);
        vb_qp_break(n, qp, e->type == RDMA_CM_EVENT_DISCONNECTED ? NULL : why);
    }
    vb_unlock(n);
    if (pending) { /* the handshake of an incoming connection failed */
        RKV_LOGD(n->base.port, "nic verbs: connection from %s failed before it was up: %s",
                 qp->peer, rdma_event_str(e->type));
        vb_qp_discard(n, qp);
        return;
    }
    vb_kick(n->poll_wake_fd);
}

static void vb_on_cm_event(struct vb_nic *n, const struct vb_cm_ev *e)
{
    if (e->type == RDMA_CM_EVENT_CONNECT_REQUEST) {
        vb_on_request(n, e);
        return;
    }
    struct vb_obj *obj = e->id ? e->id->context : NULL;
    if (!obj || obj->kind != VB_OBJ_QP) {
        if (e->type == RDMA_CM_EVENT_DEVICE_REMOVAL)
            RKV_LOGE(n->base.port, "nic verbs: %s was removed: listeners stop accepting",
                     n->dev_name);
        else
            RKV_LOGD(n->base.port, "nic verbs: listener event %s", rdma_event_str(e->type));
        return;
    }
    struct vb_qp *qp = VB_CONTAINER(obj, struct vb_qp, obj);
    switch (e->type) {
    case RDMA_CM_EVENT_ESTABLISHED:
        vb_on_established(n, qp);
        break;
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_REJECTED:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
        vb_on_conn_end(n, qp, e);
        break;
    default: /* TIMEWAIT_EXIT, ADDR_CHANGE: nothing to do */
        RKV_LOGD(n->base.port, "nic verbs: %s: %s", qp->peer, rdma_event_str(e->type));
        break;
    }
}

/* Reads one event and acknowledges it at once (see the lock comment). */
static int vb_cm_get(struct rdma_event_channel *ch, struct vb_cm_ev *e)
{
    struct rdma_cm_event *ev;
    if (rdma_get_cm_event(ch, &ev) != 0)
        return -1;
    *e = (struct vb_cm_ev){.type = ev->event, .status = ev->status, .id = ev->id};
    size_t len = ev->param.conn.private_data ? ev->param.conn.private_data_len : 0;
    if (len > sizeof(e->pdata))
        len = sizeof(e->pdata);
    if (len)
        memcpy(e->pdata, ev->param.conn.private_data, len);
    e->pdata_len = (uint8_t)len;
    rdma_ack_cm_event(ev);
    return 0;
}

static void vb_cm_drain(struct vb_nic *n)
{
    for (int i = 0; i < VB_EVENT_BATCH; i++) {
        struct vb_cm_ev e;
        if (vb_cm_get(n->cm_ch, &e) < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                RKV_LOGW(n->base.port, "nic verbs: rdma_get_cm_event failed: %s", strerror(errno));
            return;
        }
        vb_on_cm_event(n, &e);
    }
}

/* ---- device async events (CM task) ---- */

static void vb_break_all(struct vb_nic *n, const char *why)
{
    vb_lock(n);
    vb_cq_drain(n, -1);
    for (struct vb_qp *qp = n->qps; qp; qp = qp->next)
        vb_qp_break(n, qp, why);
    vb_unlock(n);
    vb_kick(n->poll_wake_fd);
}

static void vb_on_qp_event(struct vb_nic *n, enum ibv_event_type t, uint32_t qp_num)
{
    struct rdma_cm_id *notify = NULL;
    int woke = 0;
    vb_lock(n);
    struct vb_qp *qp = vb_hash_find(n, qp_num);
    if (qp && !qp->core.closed) {
        if (t == IBV_EVENT_COMM_EST) {
            notify = qp->id; /* data beat the RTU: tell the CM the QP is up */
        } else if (t == IBV_EVENT_QP_FATAL || t == IBV_EVENT_QP_REQ_ERR ||
                   t == IBV_EVENT_QP_ACCESS_ERR) {
            vb_cq_drain(n, -1);
            vb_qp_break(n, qp, ibv_event_type_str(t));
            woke = 1;
        }
    }
    vb_unlock(n);
    /* The CM task alone destroys cm ids, so notify is still valid here. */
    if (notify)
        rdma_notify(notify, IBV_EVENT_COMM_EST);
    if (woke)
        vb_kick(n->poll_wake_fd);
}

static void vb_on_async(struct vb_nic *n, enum ibv_event_type t, int port_num)
{
    struct rkv_port *port = n->base.port;
    switch (t) {
    case IBV_EVENT_CQ_ERR:
        RKV_LOGE(port,
                 "nic verbs: the completion queue of %s overran (a bug): every "
                 "connection breaks",
                 n->dev_name);
        vb_break_all(n, "completion queue error");
        break;
    case IBV_EVENT_DEVICE_FATAL:
        RKV_LOGE(port, "nic verbs: %s reported a fatal error", n->dev_name);
        vb_break_all(n, "device fatal error");
        break;
    case IBV_EVENT_PORT_ERR:
        RKV_LOGW(port, "nic verbs: port %d of %s went down", port_num, n->dev_name);
        break;
    case IBV_EVENT_PORT_ACTIVE:
        RKV_LOGI(port, "nic verbs: port %d of %s is active", port_num, n->dev_name);
        break;
    default:
        RKV_LOGD(port, "nic verbs: async event %s", ibv_event_type_str(t));
        break;
    }
}

static void vb_async_drain(struct vb_nic *n)
{
    for (int i = 0; i < VB_EVENT_BATCH; i++) {
        struct ibv_async_event ev;
        if (ibv_get_async_event(n->ctx, &ev) != 0)
            return; /* EAGAIN: the fd is nonblocking */
        enum ibv_event_type t = ev.event_type;
        int has_qp = t == IBV_EVENT_QP_FATAL || t == IBV_EVENT_QP_REQ_ERR ||
                     t == IBV_EVENT_QP_ACCESS_ERR || t == IBV_EVENT_COMM_EST ||
                     t == IBV_EVENT_SQ_DRAINED || t == IBV_EVENT_PATH_MIG ||
                     t == IBV_EVENT_PATH_MIG_ERR || t == IBV_EVENT_QP_LAST_WQE_REACHED;
        uint32_t qp_num = has_qp ? ev.element.qp->qp_num : 0;
        int port_num =
            t == IBV_EVENT_PORT_ERR || t == IBV_EVENT_PORT_ACTIVE ? ev.element.port_num : 0;
        ibv_ack_async_event(&ev); /* before any lock: ibv_destroy_qp waits for it */
        if (has_qp)
            vb_on_qp_event(n, t, qp_num);
        else
            vb_on_async(n, t, port_num);
    }
}

/* ---- the CM task ---- */

/* Destroys the cm ids of closed QPs; frees those no completion names. */
static void vb_reap(struct vb_nic *n)
{
    struct vb_qp *dead = NULL;
    vb_lock(n);
    for (struct vb_qp **pp = &n->qps; *pp;) {
        struct vb_qp *qp = *pp;
        if (!qp->core.closed) {
            pp = &qp->next;
            continue;
        }
        *pp = qp->next;
        qp->next = dead;
        dead = qp;
    }
    vb_unlock(n);
    while (dead) {
        struct vb_qp *qp = dead;
        dead = qp->next;
        rdma_destroy_id(qp->id);
        vb_lock(n);
        qp->id = NULL;
        int idle = rkv_nic_qp_reap(&qp->core); /* else poll() frees it with the last entry */
        vb_unlock(n);
        if (idle)
            vb_qp_free(n, qp);
    }
}

static void vb_cm_task(void *arg)
{
    struct vb_nic *n = arg;
    struct pollfd pfd[3] = {{.fd = n->cm_ch->fd, .events = POLLIN},
                            {.fd = n->ctx->async_fd, .events = POLLIN},
                            {.fd = n->cm_wake_fd, .events = POLLIN}};
    for (;;) {
        int k = poll(pfd, 3, VB_CM_TICK_MS);
        if (RKV_NEVER(k < 0 && errno != EINTR)) {
            RKV_LOGE(n->base.port, "nic verbs: poll in the CM task failed: %s", strerror(errno));
            n->base.port->ops->sleep_ns(n->base.port, 10 * 1000000ull);
        }
        if (k > 0 && pfd[2].revents)
            vb_unkick(n->cm_wake_fd);
        vb_lock(n);
        int stopping = n->stopping;
        vb_unlock(n);
        if (stopping)
            return;
        if (k > 0 && pfd[0].revents)
            vb_cm_drain(n);
        if (k > 0 && pfd[1].revents)
            vb_async_drain(n);
        vb_reap(n);
    }
}

/* ---- the active side ---- */

struct vb_dial {
    struct rdma_event_channel *ch; /* private until the connection is up */
    struct rdma_cm_id *id;
    char peer[64];
    uint64_t deadline_ns;
    uint8_t nonce[VB_NONCE_BYTES]; /* of our request, which the answer must prove */
    uint64_t clock_ms;
    int peer_mtu; /* the server's, from its accept */
};

/* Waits for the next event on the dial's channel; -RKV_ETIMEDOUT names step. */
static int vb_dial_wait(struct vb_nic *n, struct vb_dial *d, const char *step, struct vb_cm_ev *e)
{
    struct pollfd pfd = {.fd = d->ch->fd, .events = POLLIN};
    for (;;) {
        if (vb_cm_get(d->ch, e) == 0)
            return 0;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            RKV_LOGE(n->base.port,
                     "nic verbs: connecting to %s: rdma_get_cm_event failed while "
                     "%s: %s",
                     d->peer, step, strerror(errno));
            return -RKV_EIO;
        }
        uint64_t now = vb_now_ns(n);
        if (now >= d->deadline_ns) {
            RKV_LOGI(n->base.port, "nic verbs: connecting to %s timed out while %s", d->peer, step);
            return -RKV_ETIMEDOUT;
        }
        int r = poll(&pfd, 1, rkv_nic_ms_until(now, d->deadline_ns));
        if (r < 0 && errno != EINTR) {
            RKV_LOGE(n->base.port, "nic verbs: poll failed while %s: %s", step, strerror(errno));
            return -RKV_EIO;
        }
    }
}

static int vb_resolve_ms(struct vb_nic *n, const struct vb_dial *d)
{
    int ms = rkv_nic_ms_until(vb_now_ns(n), d->deadline_ns);
    return ms > VB_RESOLVE_MS ? VB_RESOLVE_MS : ms < 1 ? 1 : ms;
}

/* An address or route resolution that failed: why, and what to do. */
static int vb_resolve_error(struct vb_nic *n, const struct vb_dial *d, const struct vb_cm_ev *e,
                            const char *step)
{
    if (e->status == -ETIMEDOUT) {
        RKV_LOGI(n->base.port, "nic verbs: connecting to %s timed out while %s", d->peer, step);
        return -RKV_ETIMEDOUT;
    }
    RKV_LOGE(n->base.port,
             "nic verbs: connecting to %s failed while %s: %s (%s): rdma_cm reaches only "
             "addresses of RDMA netdevs; on soft-RoCE use the rxe netdev's address (RKV_HOST, "
             "--host), not 127.0.0.1; `rkv doctor` lists the usable ones",
             d->peer, step, rdma_event_str(e->type), strerror(-e->status));
    return -RKV_ECONFIG;
}

/* The traffic class (RKV_VERBS_TOS) of id's packets: a PFC fabric's
 * lossless class instead of the default one. */
static int vb_set_tos(struct vb_nic *n, struct rdma_cm_id *id, const char *who)
{
    if (n->tos < 0)
        return 0;
    uint8_t tos = (uint8_t)n->tos;
    if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos)) == 0)
        return 0;
    RKV_LOGE(n->base.port, "nic verbs: %s: cannot set RKV_VERBS_TOS=%d: %s", who, n->tos,
             strerror(errno));
    return -1;
}

/* Resolves address and route; the id ends up on some device's port. */
static int vb_dial_resolve(struct vb_nic *n, struct vb_dial *d, const struct sockaddr *dst)
{
    struct vb_cm_ev e;
    const char *step = "resolving the address";
    struct sockaddr *src =
        n->has_src && n->src.ss_family == dst->sa_family ? (struct sockaddr *)&n->src : NULL;
    if (rdma_resolve_addr(d->id, src, (struct sockaddr *)dst, vb_resolve_ms(n, d)) != 0) {
        RKV_LOGE(n->base.port, "nic verbs: rdma_resolve_addr(%s) failed: %s", d->peer,
                 strerror(errno));
        return -RKV_ECONFIG;
    }
    int rc = vb_dial_wait(n, d, step, &e);
    if (rc < 0)
        return rc;
    if (e.type != RDMA_CM_EVENT_ADDR_RESOLVED)
        return vb_resolve_error(n, d, &e, step);
    if (!vb_id_on_our_device(n, d->id)) {
        RKV_LOGE(n->base.port,
                 "nic verbs: %s is reached through %s, but this NIC opened %s: set RKV_VERBS_DEV",
                 d->peer, vb_dev_name_of(d->id->verbs), n->dev_name);
        return -RKV_ECONFIG;
    }
    step = "resolving the route";
    if (vb_set_tos(n, d->id, d->peer) < 0)
        return -RKV_ECONFIG;
    if (rdma_resolve_route(d->id, vb_resolve_ms(n, d)) != 0) {
        RKV_LOGE(n->base.port, "nic verbs: rdma_resolve_route(%s) failed: %s", d->peer,
                 strerror(errno));
        return -RKV_EIO;
    }
    rc = vb_dial_wait(n, d, step, &e);
    if (rc < 0)
        return rc;
    return e.type == RDMA_CM_EVENT_ROUTE_RESOLVED ? 0 : vb_resolve_error(n, d, &e, step);
}

/* The server refused: a named error when it said why. */
static int vb_dial_rejected(struct vb_nic *n, const struct vb_dial *d, const struct vb_cm_ev *e,
                            int mtu_bytes)
{
    struct rkv_port *port = n->base.port;
    struct vb_pdata pd;
    if (vb_pdata_get(e->pdata, e->pdata_len, &pd) < 0 || pd.kind != VB_PD_REJECT) {
        /* Nobody listens there (yet): routine while a cluster boots. */
        RKV_LOGD(port, "nic verbs: %s refused the connection (status %d)", d->peer, e->status);
        return -RKV_EPEERDEAD;
    }
    switch (pd.reason) {
    case VB_REJ_MTU:
        RKV_LOGE(port,
                 "nic verbs: %s refused the connection: it does not take the MTU this port (%s) "
                 "announced, %d (its own: %u)",
                 d->peer, n->dev_name, mtu_bytes, pd.mtu_bytes);
        return -RKV_ECONFIG;
    case VB_REJ_TOKEN:
        RKV_LOGE(port,
                 "nic verbs: %s refused the connection: wrong secret, or clocks more than 60 s "
                 "apart (set the same RKV_TOKEN, RKV_SECRET_FILE or rkv_config.secret on every "
                 "node); see its log",
                 d->peer);
        return -RKV_ECONFIG;
    case VB_REJ_PROTO:
    case VB_REJ_DEVICE:
        RKV_LOGE(port, "nic verbs: %s refused the connection (reason %u: %s); see its log", d->peer,
                 pd.reason, pd.reason == VB_REJ_PROTO ? "handshake version" : "device");
        return -RKV_ECONFIG;
    case VB_REJ_RESOURCES:
        RKV_LOGW(port, "nic verbs: %s refused the connection: out of resources; see its log",
                 d->peer);
        return -RKV_ELIMIT;
    default:
        RKV_LOGD(port, "nic verbs: %s refused the connection (reason %u)", d->peer, pd.reason);
        return -RKV_EPEERDEAD;
    }
}

/* Checks the server's answer to our request. */
static int vb_dial_check_accept(struct vb_nic *n, struct vb_dial *d, const struct vb_cm_ev *e,
                                int mtu_bytes)
{
    struct vb_pdata pd;
    if (vb_pdata_get(e->pdata, e->pdata_len, &pd) < 0 || pd.kind != VB_PD_ACCEPT ||
        pd.version != VB_VERSION) {
        RKV_LOGE(n->base.port, "nic verbs: %s accepted without rkv's handshake data", d->peer);
        return -RKV_EPROTO;
    }
    if (!vb_mtu_valid(pd.mtu_bytes)) {
        RKV_LOGE(n->base.port, "nic verbs: %s announces MTU %u (this port's, on %s, is %d)",
                 d->peer, pd.mtu_bytes, n->dev_name, mtu_bytes);
        return -RKV_EPROTO;
    }
    d->peer_mtu = (int)pd.mtu_bytes;
    memcpy(pd.nonce, d->nonce, VB_NONCE_BYTES); /* the proof is of our request's */
    pd.clock_ms = d->clock_ms;
    if (!vb_auth_ok(n, "rkv verbs server", &pd)) {
        RKV_LOGE(n->base.port,
                 "nic verbs: %s does not know our secret (its answer does not prove it): not a "
                 "server of this cluster",
                 d->peer);
        return -RKV_ECONFIG;
    }
    return 0;
}

static int vb_dial_answer(struct vb_nic *n, struct vb_dial *d, const struct vb_cm_ev *e,
                          int mtu_bytes)
{
    switch (e->type) {
    case RDMA_CM_EVENT_CONNECT_RESPONSE:
        return vb_dial_check_accept(n, d, e, mtu_bytes);
    case RDMA_CM_EVENT_REJECTED:
        return vb_dial_rejected(n, d, e, mtu_bytes);
    case RDMA_CM_EVENT_UNREACHABLE:
        if (e->status == -ETIMEDOUT) {
            RKV_LOGI(n->base.port, "nic verbs: %s did not answer the connection request", d->peer);
            return -RKV_ETIMEDOUT;
        }
        /* fall through */
    default:
        RKV_LOGD(n->base.port, "nic verbs: connecting to %s: %s (status %d)", d->peer,
                 rdma_event_str(e->type), e->status);
        return -RKV_EPEERDEAD;
    }
}

/* Sends the request, checks the answer, brings the QP up and completes. */
static int vb_dial_handshake(struct vb_nic *n, struct vb_dial *d, struct vb_qp *qp)
{
    int mtu_bytes, link_layer;
    struct vb_cm_ev e = {.type = RDMA_CM_EVENT_ADDR_ERROR};
    int rc = vb_id_port(n, d->id, &mtu_bytes, &link_layer);
    if (rc < 0)
        return rc;
    uint8_t b[VB_PDATA_BYTES];
    struct vb_pdata pd = {
        .kind = VB_PD_REQUEST, .mtu_bytes = (uint32_t)mtu_bytes, .clock_ms = vb_wall_ms()};
    uint8_t nonce[RKV_NIC_AUTH_NONCE_BYTES];
    rkv_nic_auth_nonce(nonce);
    memcpy(pd.nonce, nonce, VB_NONCE_BYTES);
    vb_auth_mac(n, "rkv verbs client", &pd, pd.mac);
    memcpy(d->nonce, pd.nonce, VB_NONCE_BYTES);
    d->clock_ms = pd.clock_ms;
    vb_pdata_put(b, &pd);
    struct rdma_conn_param cp = {.private_data = b,
                                 .private_data_len = sizeof(b),
                                 .retry_count = VB_RETRY_COUNT,
                                 .rnr_retry_count = VB_RNR_RETRY_INFINITE,
                                 .qp_num = qp->qp_num};
    if (rdma_connect(d->id, &cp) != 0) {
        RKV_LOGE(n->base.port, "nic verbs: rdma_connect(%s) failed: %s", d->peer, strerror(errno));
        return -RKV_EIO;
    }
    rc = vb_dial_wait(n, d, "waiting for the server's answer", &e);
    if (rc == 0)
        rc = vb_dial_answer(n, d, &e, mtu_bytes);
    int path_mtu = 0;
    if (rc == 0)
        rc = vb_qp_connect_states(n, qp, link_layer, mtu_bytes, d->peer_mtu, &path_mtu);
    if (rc == 0 && rdma_establish(d->id) != 0) {
        RKV_LOGE(n->base.port, "nic verbs: rdma_establish(%s) failed: %s", d->peer,
                 strerror(errno));
        rc = -RKV_EIO;
    }
    if (rc < 0) {
        if (e.type == RDMA_CM_EVENT_CONNECT_RESPONSE)
            rdma_reject(d->id, NULL, 0); /* the server is waiting for our RTU */
        return rc;
    }
    RKV_LOGD(n->base.port, "nic verbs: connected to %s (%s port %u, path MTU %d, active MTU %d)",
             d->peer, n->dev_name, d->id->port_num, path_mtu, mtu_bytes);
    return 0;
}

/* Makes the QP the user's, then hands its id to the CM task. */
static int vb_dial_finish(struct vb_nic *n, struct vb_dial *d, struct vb_qp *qp)
{
    d->id->context = &qp->obj;
    vb_lock(n);
    qp->exposed = 1;
    qp->next = n->qps;
    n->qps = qp;
    vb_hash_add(n, qp);
    vb_unlock(n);
    if (rdma_migrate_id(d->id, n->cm_ch) == 0) {
        d->id = NULL; /* the QP owns it now */
        return 0;
    }
    RKV_LOGE(n->base.port, "nic verbs: rdma_migrate_id(%s) failed: %s", d->peer, strerror(errno));
    vb_lock(n);
    qp->exposed = 0;
    vb_unlock(n);
    rdma_disconnect(d->id);
    qp->id = NULL; /* the dial's cleanup destroys d->id */
    vb_qp_discard(n, qp);
    return -RKV_EIO;
}

static int vb_dial_one(struct vb_nic *n, struct vb_dial *d, const struct addrinfo *ai,
                       struct vb_qp **qp_p)
{
    vb_addr_name(ai->ai_addr, d->peer, sizeof(d->peer));
    d->ch = rdma_create_event_channel();
    if (!d->ch || vb_set_nonblock(d->ch->fd) != 0 ||
        rdma_create_id(d->ch, &d->id, NULL, RDMA_PS_TCP) != 0) {
        RKV_LOGE(n->base.port, "nic verbs: cannot create an rdma_cm id for %s: %s", d->peer,
                 strerror(errno));
        if (d->ch)
            rdma_destroy_event_channel(d->ch);
        d->ch = NULL;
        return -RKV_EIO;
    }
    int rc = vb_dial_resolve(n, d, ai->ai_addr);
    struct vb_qp *qp = NULL;
    if (rc == 0)
        rc = vb_qp_create(n, d->id, d->peer, &qp);
    if (rc == 0)
        rc = vb_dial_handshake(n, d, qp);
    if (rc == 0)
        rc = vb_dial_finish(n, d, qp);
    else if (qp) {
        qp->id = NULL;
        vb_qp_discard(n, qp);
    }
    if (d->id)
        rdma_destroy_id(d->id);
    rdma_destroy_event_channel(d->ch);
    *d = (struct vb_dial){.deadline_ns = d->deadline_ns};
    if (rc == 0)
        *qp_p = qp;
    return rc;
}

static int vb_resolve(struct vb_nic *n, const char *host, uint16_t port, int passive,
                      struct addrinfo **res_p)
{
    return rkv_nic_resolve(n->base.port, "nic verbs", host, port, passive, res_p);
}

static int vb_connect(struct rkv_nic *nic, const char *host, uint16_t port, uint32_t timeout_ms,
                      struct rkv_qp **qp_p)
{
    struct vb_nic *n = vb_nic_of(nic);
    assert(host && qp_p);
    struct vb_dial d = {.deadline_ns = vb_now_ns(n) + (uint64_t)timeout_ms * 1000000};
    struct addrinfo *res;
    int rc = vb_resolve(n, host, port, 0, &res);
    if (rc < 0)
        return rc;
    struct vb_qp *qp = NULL;
    rc = -RKV_EIO;
    /* IPv4 first, as rdma_cm netdevs (rxe) usually carry IPv4 addresses. */
    for (int pass = 0; pass < 2 && rc != 0 && rc != -RKV_ETIMEDOUT; pass++) {
        for (const struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            if ((ai->ai_family == AF_INET) != (pass == 0))
                continue;
            rc = vb_dial_one(n, &d, ai, &qp);
            if (rc == 0 || rc == -RKV_ETIMEDOUT)
                break;
        }
    }
    freeaddrinfo(res);
    if (rc < 0)
        return rc;
    *qp_p = vb_qp_pub(qp);
    return 0;
}

/* ---- listening ---- */

static int vb_bind_any(struct vb_nic *n, struct rdma_cm_id *id, const struct addrinfo *res,
                       char *name, size_t name_len)
{
    int err = EADDRNOTAVAIL;
    for (int pass = 0; pass < 2; pass++) {
        for (const struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            if ((ai->ai_family == AF_INET) != (pass == 0))
                continue;
            vb_addr_name(ai->ai_addr, name, name_len);
            if (rdma_bind_addr(id, ai->ai_addr) == 0)
                return 0;
            err = errno;
        }
    }
    RKV_LOGE(n->base.port, "nic verbs: cannot bind to %s: %s%s", name, strerror(err),
             err == EADDRINUSE ? " (another process listens there)" : "");
    return err == EADDRINUSE ? -RKV_EIO : -RKV_ECONFIG;
}

static int vb_listen_on(struct vb_nic *n, struct vb_listener *l, const char *host, uint16_t port)
{
    struct addrinfo *res;
    int rc = vb_resolve(n, host, port, 1, &res);
    if (rc < 0)
        return rc;
    char name[80] = "?";
    rc = vb_bind_any(n, l->id, res, name, sizeof(name));
    freeaddrinfo(res);
    if (rc < 0)
        return rc;
    if (l->id->verbs && !vb_id_on_our_device(n, l->id)) {
        RKV_LOGE(n->base.port,
                 "nic verbs: %s belongs to %s, but this NIC opened %s: set "
                 "RKV_VERBS_DEV=%s",
                 name, vb_dev_name_of(l->id->verbs), n->dev_name, vb_dev_name_of(l->id->verbs));
        return -RKV_ECONFIG;
    }
    if (vb_set_tos(n, l->id, name) < 0) /* the ids of accepted requests inherit it */
        return -RKV_ECONFIG;
    if (rdma_listen(l->id, VB_LISTEN_BACKLOG) != 0) {
        RKV_LOGE(n->base.port, "nic verbs: cannot listen at %s: %s", name, strerror(errno));
        return errno == EADDRINUSE ? -RKV_EIO : -RKV_ECONFIG;
    }
    l->port = ntohs(rdma_get_src_port(l->id));
    RKV_LOGI(n->base.port, "nic verbs: listening at %s:%u on %s", host ? host : "*", l->port,
             n->dev_name);
    return 0;
}

static int vb_listen(struct rkv_nic *nic, const char *host, uint16_t port)
{
    struct vb_nic *n = vb_nic_of(nic);
    struct vb_listener *l = calloc(1, sizeof(*l));
    if (!l)
        return -RKV_ENOMEM;
    l->obj.kind = VB_OBJ_LISTENER;
    int rc = 0;
    vb_lock(n);
    if (n->n_listeners < VB_LISTEN_MAX)
        n->n_listeners++;
    else
        rc = -RKV_ELIMIT;
    vb_unlock(n);
    if (rc < 0)
        goto undo_alloc;
    if (rdma_create_id(n->cm_ch, &l->id, &l->obj, RDMA_PS_TCP) != 0) {
        RKV_LOGE(n->base.port, "nic verbs: rdma_create_id failed: %s", strerror(errno));
        rc = -RKV_EIO;
        goto undo_count;
    }
    rc = vb_listen_on(n, l, host, port);
    if (rc < 0)
        goto undo_id;
    vb_lock(n);
    l->next = n->listeners;
    n->listeners = l;
    vb_unlock(n);
    return 0;
undo_id:
    rdma_destroy_id(l->id);
undo_count:
    vb_lock(n);
    n->n_listeners--;
    vb_unlock(n);
undo_alloc:
    free(l);
    return rc;
}

/* ---- memory regions ---- */

static void vb_log_reg_failure(struct vb_nic *n, size_t len, int err, uint32_t n_mrs)
{
    struct rkv_port *port = n->base.port;
    if ((uint64_t)len > n->max_mr_size) {
        RKV_LOGE(port, "nic verbs: cannot register %zu bytes: %s's max_mr_size is %llu", len,
                 n->dev_name, (unsigned long long)n->max_mr_size);
        return;
    }
    if (n->max_mr > 0 && n_mrs >= (uint32_t)n->max_mr) {
        RKV_LOGE(port,
                 "nic verbs: cannot register another region: %s allows %d (max_mr), %u are "
                 "registered",
                 n->dev_name, n->max_mr, n_mrs);
        return;
    }
    if (err != ENOMEM && err != EPERM && err != EAGAIN) {
        RKV_LOGE(port, "nic verbs: cannot register %zu bytes: ibv_reg_mr: %s%s", len, strerror(err),
                 err == EFAULT ? " (the range is not mapped memory)" : "");
        return;
    }
    struct rlimit rl;
    char soft[32] = "?", hard[32] = "?";
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
        if (rl.rlim_cur == RLIM_INFINITY)
            snprintf(soft, sizeof(soft), "unlimited");
        else
            snprintf(soft, sizeof(soft), "%llu KiB", (unsigned long long)rl.rlim_cur / 1024);
        if (rl.rlim_max == RLIM_INFINITY)
            snprintf(hard, sizeof(hard), "unlimited");
        else
            snprintf(hard, sizeof(hard), "%llu KiB", (unsigned long long)rl.rlim_max / 1024);
    }
    RKV_LOGE(port,
             "nic verbs: cannot register %zu bytes (%s): the locked-memory limit was "
             "hit: RLIMIT_MEMLOCK soft %s, hard %s. Raise it: `ulimit -l unlimited` in the "
             "launching shell, `* - memlock unlimited` in /etc/security/limits.conf, "
             "LimitMEMLOCK=infinity for a systemd unit (docker: --ulimit memlock=-1)",
             len, strerror(err), soft, hard);
}

static int vb_reg_mr(struct rkv_nic *nic, void *addr, size_t len, int access, struct rkv_mr **mr_p)
{
    struct vb_nic *n = vb_nic_of(nic);
    struct rkv_port *port = n->base.port;
    if ((!addr && len) || (access & ~(RKV_ACCESS_REMOTE_WRITE | RKV_ACCESS_REMOTE_GRANT)) ||
        !mr_p || (uintptr_t)addr + len < (uintptr_t)addr)
        return -RKV_EINVAL;
    struct vb_mr *m = calloc(1, sizeof(*m));
    if (!m)
        return -RKV_ENOMEM;
    m->nic = n;
    if (len) {
        int flags = IBV_ACCESS_LOCAL_WRITE;
        if (access & RKV_ACCESS_REMOTE_WRITE)
            flags |= IBV_ACCESS_REMOTE_WRITE;
        if (access & RKV_ACCESS_REMOTE_GRANT) /* reached only through memory windows */
            flags |= IBV_ACCESS_MW_BIND;
        m->mr = ibv_reg_mr(n->pd, addr, len, flags);
        if (!m->mr) {
            int err = errno;
            port->ops->mutex_lock(n->mr_mu);
            uint32_t n_mrs = n->n_mrs;
            port->ops->mutex_unlock(n->mr_mu);
            vb_log_reg_failure(n, len, err, n_mrs);
            free(m);
            return err == EINVAL || err == EFAULT ? -RKV_EINVAL : -RKV_ENOMEM;
        }
    }
    m->pub = (struct rkv_mr){.addr = addr,
                             .len = len,
                             .lkey = m->mr ? m->mr->lkey : 0,
                             .rkey = m->mr ? m->mr->rkey : 0,
                             .access = access,
                             .nic = &n->base,
                             .impl = m};
    port->ops->mutex_lock(n->mr_mu);
    m->next = n->mrs;
    if (n->mrs)
        n->mrs->prev = m;
    n->mrs = m;
    n->n_mrs++;
    port->ops->mutex_unlock(n->mr_mu);
    *mr_p = &m->pub;
    return 0;
}

static void vb_mr_release(struct vb_nic *n, struct vb_mr *m)
{
    if (m->mr) {
        int e = ibv_dereg_mr(m->mr);
        if (e != 0)
            RKV_LOGW(n->base.port, "nic verbs: ibv_dereg_mr failed: %s", strerror(e));
    }
    free(m);
}

static void vb_dereg_mr(struct rkv_nic *nic, struct rkv_mr *mr)
{
    struct vb_nic *n = vb_nic_of(nic);
    if (!mr)
        return;
    struct vb_mr *m = mr->impl;
    assert(m == (struct vb_mr *)(void *)mr && m->nic == n);
    n->base.port->ops->mutex_lock(n->mr_mu);
    if (m->prev)
        m->prev->next = m->next;
    else
        n->mrs = m->next;
    if (m->next)
        m->next->prev = m->prev;
    n->n_mrs--;
    n->base.port->ops->mutex_unlock(n->mr_mu);
    vb_mr_release(n, m);
}

/* ---- posting ---- */

/* A local buffer must lie inside a region of this NIC. */
static int vb_sge_check(const struct vb_nic *n, const struct rkv_sge *sge)
{
    return rkv_nic_sge_check(&n->base, sge);
}

static struct ibv_sge vb_sge(const struct rkv_sge *sge)
{
    return (struct ibv_sge){
        .addr = (uintptr_t)sge->addr, .length = sge->len, .lkey = sge->len ? sge->mr->lkey : 0};
}

/* post_mu held. Waits for room in the send queue: completions free it, and
 * the poster may be the poller itself, so it drains the CQ on its own. */
static int vb_sq_wait(struct vb_nic *n, struct vb_qp *qp)
{
    uint64_t deadline_ns = 0;
    while (qp->sq_head - atomic_load(&qp->sq_tail) >= qp->sq_depth) {
        if (atomic_load(&qp->dead))
            return -RKV_EPEERDEAD;
        vb_lock(n);
        int moved = vb_cq_drain(n, -1);
        vb_unlock(n);
        if (moved)
            vb_kick(n->poll_wake_fd);
        if (qp->sq_head - atomic_load(&qp->sq_tail) < qp->sq_depth)
            break;
        uint64_t now = vb_now_ns(n);
        if (!deadline_ns)
            deadline_ns = now + (uint64_t)VB_SQ_WAIT_MS * 1000000;
        if (now >= deadline_ns) {
            RKV_LOGW(n->base.port, "nic verbs: the send queue to %s stayed full for %u ms",
                     qp->peer, VB_SQ_WAIT_MS);
            return -RKV_ETIMEDOUT;
        }
        n->base.port->ops->sleep_ns(n->base.port, VB_SQ_WAIT_PAUSE_NS);
    }
    return 0;
}

static int vb_post(struct vb_qp *qp, uint64_t wr_id, const struct rkv_sge *sge,
                   struct ibv_send_wr *wr, int opcode, int signaled)
{
    struct vb_nic *n = qp->nic;
    int rc = vb_sge_check(n, sge);
    if (rc < 0)
        return rc;
    struct ibv_sge s = vb_sge(sge);
    wr->sg_list = sge->len ? &s : NULL;
    wr->num_sge = sge->len ? 1 : 0;
    struct rkv_mutex *mu = qp->post_mu;
    n->base.port->ops->mutex_lock(mu);
    rc = atomic_load(&qp->dead) ? -RKV_EPEERDEAD : vb_sq_wait(n, qp);
    if (rc == 0) {
        uint32_t c = qp->sq_head;
        /* Some send must be signalled now and then, or the queue never drains. */
        int sig = signaled || c - qp->sq_signal >= qp->sq_depth / 2;
        qp->sq[c % qp->sq_depth] = (struct vb_swr){
            .wr_id = wr_id, .len = sge->len, .opcode = (uint8_t)opcode, .signaled = !!signaled};
        wr->wr_id = (uint64_t)c << 1;
        wr->send_flags = sig ? IBV_SEND_SIGNALED : 0;
        if (sge->len && sge->len <= qp->max_inline)
            wr->send_flags |= IBV_SEND_INLINE;
        struct ibv_send_wr *bad;
        int e = ibv_post_send(qp->qp, wr, &bad);
        if (e == 0) {
            qp->sq_head = c + 1;
            if (sig)
                qp->sq_signal = c;
        } else {
            RKV_LOGW(n->base.port, "nic verbs: posting to %s failed: %s", qp->peer, strerror(e));
            rc = e == ENOMEM ? -RKV_ELIMIT : -RKV_EIO;
        }
    }
    n->base.port->ops->mutex_unlock(mu);
    return rc;
}

static int vb_post_send(struct rkv_qp *qpv, uint64_t wr_id, const struct rkv_sge *sge, int signaled)
{
    struct ibv_send_wr wr = {.opcode = IBV_WR_SEND};
    return vb_post(vb_qp_of(qpv), wr_id, sge, &wr, RKV_WC_SEND, signaled);
}

/* Only the local side of a write is checked here; the target checks the rest. */
static int vb_post_write(struct rkv_qp *qpv, uint64_t wr_id, const struct rkv_sge *sge,
                         uint64_t remote_addr, uint32_t rkey, int with_imm, uint32_t imm,
                         int signaled)
{
    struct ibv_send_wr wr = {.opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE};
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    if (with_imm)
        wr.imm_data = htonl(imm);
    return vb_post(vb_qp_of(qpv), wr_id, sge, &wr, RKV_WC_WRITE, signaled);
}

/* A grant is a type 2 memory window bound to the peer's QP: the device
 * accepts its rkey only in requests arriving on that QP (type 1 windows and
 * a PD per peer were the alternatives: a type 1 window works on any QP of
 * the PD, and a PD per peer would need every local buffer, send buffers and
 * the shared receive pool included, registered once per peer). The bind is
 * a work request on the QP's send queue, so it runs before anything posted
 * after it, the message that hands out the rkey included. */
static int vb_mr_grant(struct rkv_qp *qpv, struct rkv_mr *mr, uint32_t *rkey_p, void **grant_p)
{
    struct vb_qp *qp = vb_qp_of(qpv);
    struct vb_nic *n = qp->nic;
    if (!mr || mr->nic != &n->base || !(mr->access & RKV_ACCESS_REMOTE_GRANT) || !mr->len ||
        !rkey_p || !grant_p)
        return -RKV_EINVAL;
    struct vb_mr *m = mr->impl;
    struct ibv_mw *mw = ibv_alloc_mw(n->pd, IBV_MW_TYPE_2);
    if (!mw) {
        RKV_LOGE(n->base.port, "nic verbs: %s: cannot allocate a memory window on %s: %s", qp->peer,
                 n->dev_name, strerror(errno));
        return errno == ENOMEM ? -RKV_ELIMIT : -RKV_EIO;
    }
    uint32_t rkey = ibv_inc_rkey(mw->rkey);
    struct ibv_send_wr wr = {.opcode = IBV_WR_BIND_MW};
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = rkey;
    wr.bind_mw.bind_info = (struct ibv_mw_bind_info){.mr = m->mr,
                                                     .addr = (uintptr_t)mr->addr,
                                                     .length = mr->len,
                                                     .mw_access_flags = IBV_ACCESS_REMOTE_WRITE};
    struct rkv_sge none = {0};
    int rc = vb_post(qp, 0, &none, &wr, RKV_WC_WRITE, 0);
    if (rc < 0) {
        ibv_dealloc_mw(mw);
        return rc;
    }
    *rkey_p = rkey;
    *grant_p = mw;
    return 0;
}

static void vb_mr_revoke(struct rkv_nic *nic, void *grant)
{
    struct vb_nic *n = vb_nic_of(nic);
    if (grant && ibv_dealloc_mw(grant) != 0)
        RKV_LOGW(n->base.port, "nic verbs: ibv_dealloc_mw failed: %s", strerror(errno));
}

/* vb_post inlines what fits: the device copied it when the post returns. */
static uint32_t vb_qp_inline_bytes(const struct rkv_qp *qpv)
{
    return ((const struct vb_qp *)(const void *)qpv)->max_inline;
}

static int vb_post_recv(struct rkv_qp *qpv, uint64_t wr_id, const struct rkv_sge *sge)
{
    struct vb_qp *qp = vb_qp_of(qpv);
    struct vb_nic *n = qp->nic;
    int rc = vb_sge_check(n, sge);
    if (rc < 0)
        return rc;
    struct ibv_sge s = vb_sge(sge);
    struct ibv_recv_wr wr = {.sg_list = sge->len ? &s : NULL, .num_sge = sge->len ? 1 : 0};
    n->base.port->ops->mutex_lock(qp->post_mu);
    uint32_t c = qp->rq_head;
    if (atomic_load(&qp->dead)) {
        rc = -RKV_EPEERDEAD;
    } else if (qp->srq) {
        rc = -RKV_EINVAL; /* its receives come from the shared pool (srq_setup) */
    } else if (c - atomic_load(&qp->rq_tail) >= qp->rq_depth) {
        RKV_LOGW(n->base.port,
                 "nic verbs: %s: %u receives are posted already: raise "
                 "RKV_VERBS_RX_DEPTH",
                 qp->peer, qp->rq_depth);
        rc = -RKV_ELIMIT;
    } else {
        qp->rq[c % qp->rq_depth] = wr_id;
        wr.wr_id = (uint64_t)c << 1 | 1;
        struct ibv_recv_wr *bad;
        int e = ibv_post_recv(qp->qp, &wr, &bad);
        if (e == 0) {
            qp->rq_head = c + 1;
        } else {
            RKV_LOGW(n->base.port, "nic verbs: posting a receive on %s failed: %s", qp->peer,
                     strerror(e));
            rc = e == ENOMEM ? -RKV_ELIMIT : -RKV_EIO;
        }
    }
    n->base.port->ops->mutex_unlock(qp->post_mu);
    return rc;
}

/* ---- completions ---- */

/* mu held. Converts up to max CQEs, then hands out up to max entries,
 * dropping those of closed QPs. */
static int vb_take(struct vb_nic *n, struct rkv_wc *wc, int max)
{
    vb_cq_drain(n, max);
    return rkv_nic_cq_take(&n->soft, wc, max, NULL);
}

/* Poller only. Sleeps until the CQ or the wake fd has news, or timeout. */
static void vb_wait(struct vb_nic *n, int timeout_ms)
{
    struct pollfd pfd[2] = {{.fd = n->comp_ch->fd, .events = POLLIN},
                            {.fd = n->poll_wake_fd, .events = POLLIN}};
    int k = poll(pfd, 2, timeout_ms);
    if (k <= 0)
        return;
    if (pfd[1].revents)
        vb_unkick(n->poll_wake_fd);
    if (!pfd[0].revents)
        return;
    struct ibv_cq *cq;
    void *cq_ctx;
    if (ibv_get_cq_event(n->comp_ch, &cq, &cq_ctx) != 0)
        return; /* EAGAIN: the channel is nonblocking */
    n->armed = 0;
    if (++n->cq_unacked >= VB_CQ_ACK_BATCH) {
        ibv_ack_cq_events(n->cq, n->cq_unacked);
        n->cq_unacked = 0;
    }
}

/* The poller sleeps in vb_wait on the completion channel and the wake fd. */
static void vb_poll_wake(struct rkv_nic *nic)
{
    struct vb_nic *n = vb_nic_of(nic);
    vb_lock(n);
    n->poll_woken = 1;
    vb_unlock(n);
    vb_kick(n->poll_wake_fd);
}

static int vb_poll(struct rkv_nic *nic, struct rkv_wc *wc, int max, uint32_t timeout_ms)
{
    struct vb_nic *n = vb_nic_of(nic);
    assert(wc && max > 0);
    uint64_t deadline_ns = vb_now_ns(n) + (uint64_t)timeout_ms * 1000000;
    for (;;) {
        vb_lock(n);
        int got = vb_take(n, wc, max);
        if (!got && !n->stopping && !n->busy_poll && !n->armed) {
            /* Arm, then look again: a CQE that came in between raises no event. */
            if (ibv_req_notify_cq(n->cq, 0) == 0)
                n->armed = 1;
            got = vb_take(n, wc, max);
        }
        int stopping = n->stopping, woken = n->poll_woken;
        n->poll_woken = 0;
        vb_unlock(n);
        if (got > 0 || stopping || woken)
            return got;
        uint64_t now = vb_now_ns(n);
        if (now >= deadline_ns)
            return 0;
        if (n->busy_poll)
            n->base.port->ops->yield(n->base.port);
        else
            vb_wait(n, rkv_nic_ms_until(now, deadline_ns));
    }
}

/* mu held, qp just closed: its shared receives still in the soft queue
 * will be dropped unseen, so their buffers go back to the pool now. */
static void vb_srq_reclaim(struct vb_nic *n, struct vb_qp *qp)
{
    if (!qp->srq)
        return;
    for (uint32_t k = 0; k < n->soft.len; k++) {
        const struct rkv_wc *e = &n->soft.buf[(n->soft.head + k) % n->soft.cap];
        if (e->qp == vb_qp_pub(qp) && (e->opcode == RKV_WC_RECV || e->opcode == RKV_WC_RECV_IMM))
            vb_srq_post(n, (uint32_t)(e->wr_id >> 8));
    }
}

/* ---- the shared receive pool ---- */

static int vb_srq_post(struct vb_nic *n, uint32_t i)
{
    assert(i < n->srq_count);
    struct ibv_sge s = {.addr = (uintptr_t)(n->srq_mem + (size_t)i * n->srq_buf_bytes),
                        .length = n->srq_buf_bytes,
                        .lkey = n->srq_mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = (uint64_t)i << 1 | 1, .sg_list = &s, .num_sge = 1};
    struct ibv_recv_wr *bad;
    int e = ibv_post_srq_recv(n->srq, &wr, &bad);
    if (e != 0) {
        RKV_LOGE(n->base.port, "nic verbs: reposting shared receive %u on %s failed: %s", i,
                 n->dev_name, strerror(e));
        return -RKV_EIO;
    }
    return 0;
}

static int vb_srq_repost(struct rkv_nic *nic, uint32_t i)
{
    struct vb_nic *n = vb_nic_of(nic);
    if (!n->srq || i >= n->srq_count)
        return -RKV_EINVAL;
    return vb_srq_post(n, i);
}

static int vb_srq_setup(struct rkv_nic *nic, uint32_t *count_p, uint32_t buf_bytes, uint8_t tag,
                        uint8_t **base_p)
{
    struct vb_nic *n = vb_nic_of(nic);
    struct rkv_port *port = n->base.port;
    assert(count_p && base_p);
    uint32_t count = *count_p;
    if (count > n->srq_max)
        count = n->srq_max;
    if (count > (uint32_t)n->max_srq_wr)
        count = (uint32_t)n->max_srq_wr;
    if (count == 0 || buf_bytes == 0)
        return -RKV_EINVAL; /* no SRQ (RKV_VERBS_SRQ_DEPTH=0, or the device has none) */
    vb_lock(n);
    int busy = n->srq || n->n_qps_made;
    vb_unlock(n);
    if (busy)
        return -RKV_EINVAL;
    size_t bytes = (size_t)count * buf_bytes;
    int rc = -RKV_ENOMEM;
    uint8_t *mem = NULL;
    struct ibv_mr *mr = NULL;
    struct ibv_srq *srq = NULL;
    if (posix_memalign((void **)&mem, 4096, bytes))
        goto fail;
    rc = -RKV_EIO;
    mr = ibv_reg_mr(n->pd, mem, bytes, IBV_ACCESS_LOCAL_WRITE);
    if (!mr) {
        RKV_LOGE(port, "nic verbs: cannot register the %zu-byte receive pool on %s: %s", bytes,
                 n->dev_name, strerror(errno));
        goto fail;
    }
    struct ibv_srq_init_attr sa = {.attr = {.max_wr = count, .max_sge = 1}};
    srq = ibv_create_srq(n->pd, &sa);
    if (!srq) {
        RKV_LOGE(port, "nic verbs: ibv_create_srq (%u WQEs) on %s failed: %s", count, n->dev_name,
                 strerror(errno));
        goto fail;
    }
    vb_lock(n);
    /* The pool's completions need CQ room too, once for all peers. */
    rc = vb_cq_reserve(n, count);
    vb_unlock(n);
    if (rc < 0)
        goto fail;
    n->srq_mem = mem;
    n->srq_mr = mr;
    n->srq_count = count;
    n->srq_buf_bytes = buf_bytes;
    n->srq_tag = tag;
    n->srq = srq;
    for (uint32_t i = 0; i < count; i++)
        if ((rc = vb_srq_post(n, i)) < 0)
            return rc; /* the pool stays; close frees it */
    RKV_LOGI(port, "nic verbs: shared receive pool of %u x %u bytes on %s", count, buf_bytes,
             n->dev_name);
    *count_p = count;
    *base_p = mem;
    return 0;
fail:
    if (srq)
        ibv_destroy_srq(srq);
    if (mr)
        ibv_dereg_mr(mr);
    free(mem);
    return rc;
}

static void vb_qp_close(struct rkv_qp *qpv)
{
    struct vb_qp *qp = vb_qp_of(qpv);
    struct vb_nic *n = qp->nic;
    /* Set before taking post_mu: a post waiting for send-queue room gives up. */
    atomic_store(&qp->dead, 1);
    n->base.port->ops->mutex_lock(qp->post_mu);
    n->base.port->ops->mutex_unlock(qp->post_mu); /* no post is in flight now */
    vb_lock(n);
    assert(!qp->core.closed && qp->exposed);
    qp->core.closed = 1;
    vb_srq_reclaim(n, qp);
    if (!qp->broken)
        rdma_disconnect(qp->id); /* the peer sees DISCONNECTED */
    vb_qp_destroy_verbs(n, qp);
    vb_unlock(n);
    vb_kick(n->cm_wake_fd);   /* reap: destroy the cm id */
    vb_kick(n->poll_wake_fd); /* the drain may have queued others' completions */
}

/* ---- open and close ---- */

static const char *const vb_env_sq[] = {"RKV_VERBS_SQ_DEPTH", "BYTEPS_RDMA_SEND_DEPTH", NULL};
static const char *const vb_env_rq[] = {"RKV_VERBS_RX_DEPTH", "BYTEPS_RDMA_RX_DEPTH", NULL};
static const char *const vb_env_poll[] = {"RKV_VERBS_POLL", NULL};
static const char *const vb_env_srq[] = {"RKV_VERBS_SRQ_DEPTH", NULL};
static const char *const vb_env_mtu[] = {"RKV_VERBS_MTU", NULL};
static const char *const vb_env_tos[] = {"RKV_VERBS_TOS", NULL};
static const char *const vb_env_sl[] = {"RKV_VERBS_SL", NULL};
static const char *const vb_env_gid[] = {"RKV_VERBS_GID_INDEX", NULL};

/* The first of names set in the environment, as a number in [lo, hi]. */
static int vb_env_u64(struct rkv_port *port, const char *const *names, uint64_t def, uint64_t lo,
                      uint64_t hi, uint64_t *v_p)
{
    for (; *names; names++) {
        const char *s = getenv(*names);
        if (!s || !*s)
            continue;
        uint64_t v = 0;
        if (rkv_parse_u64(s, &v) < 0 || v < lo || v > hi) {
            RKV_LOGE(port, "nic verbs: %s=\"%s\": expected a number in [%llu, %llu]", *names, s,
                     (unsigned long long)lo, (unsigned long long)hi);
            return -RKV_ECONFIG;
        }
        *v_p = v;
        return 0;
    }
    *v_p = def;
    return 0;
}

static int vb_settings(struct vb_nic *n, const struct ibv_device_attr *da)
{
    struct rkv_port *port = n->base.port;
    uint64_t max_wr = da->max_qp_wr > 0 ? (uint64_t)da->max_qp_wr : 1;
    uint64_t sq, rq, poll_mode, srq, mtu, tos, sl, gid;
    if (vb_env_u64(port, vb_env_sq, VB_SQ_DEPTH_DEFAULT, 2, max_wr, &sq) < 0 ||
        vb_env_u64(port, vb_env_rq, VB_RQ_DEPTH_DEFAULT, 1, max_wr, &rq) < 0 ||
        vb_env_u64(port, vb_env_poll, 0, 0, 1, &poll_mode) < 0 ||
        vb_env_u64(port, vb_env_srq, VB_SRQ_DEFAULT_MAX, 0, 1u << 20, &srq) < 0 ||
        vb_env_u64(port, vb_env_mtu, 0, 0, 4096, &mtu) < 0 ||
        vb_env_u64(port, vb_env_tos, UINT64_MAX, 0, 255, &tos) < 0 ||
        vb_env_u64(port, vb_env_sl, UINT64_MAX, 0, 15, &sl) < 0 ||
        vb_env_u64(port, vb_env_gid, UINT64_MAX, 0, 65535, &gid) < 0)
        return -RKV_ECONFIG;
    n->tos = tos == UINT64_MAX ? -1 : (int)tos;
    n->sl = sl == UINT64_MAX ? -1 : (int)sl;
    n->gid_index = gid == UINT64_MAX ? -1 : (int)gid;
    if (mtu != 0 && !vb_mtu_valid((uint32_t)mtu)) {
        RKV_LOGE(port, "nic verbs: RKV_VERBS_MTU=%llu: expected 256, 512, 1024, 2048 or 4096",
                 (unsigned long long)mtu);
        return -RKV_ECONFIG;
    }
    n->mtu_cap = (uint32_t)mtu;
    n->srq_max = (uint32_t)srq;
    n->max_srq_wr = da->max_srq_wr > 0 ? da->max_srq_wr : 0;
    n->sq_depth = (uint32_t)sq;
    n->rq_depth = (uint32_t)rq;
    n->busy_poll = (int)poll_mode;
    n->max_cqe = da->max_cqe;
    n->max_mr = da->max_mr;
    n->max_mr_size = da->max_mr_size;
    return 0;
}

/* Splits "name" or "name:port"; port 0 = the first active one. */
static int vb_parse_dev(struct rkv_port *port, const char *dev, char *name, size_t name_len,
                        unsigned *port_p)
{
    const char *colon = strchr(dev, ':');
    size_t len = colon ? (size_t)(colon - dev) : strlen(dev);
    char *end = NULL;
    unsigned long p = colon ? strtoul(colon + 1, &end, 10) : 0;
    if (len == 0 || len >= name_len || (colon && (*end || p == 0 || p > 255))) {
        RKV_LOGE(port, "nic verbs: device \"%s\": expected NAME or NAME:PORT (e.g. rxe0, mlx5_0:1)",
                 dev);
        return -RKV_ECONFIG;
    }
    memcpy(name, dev, len);
    name[len] = '\0';
    *port_p = (unsigned)p;
    return 0;
}

/* Finds an active port of ctx (only `want` if nonzero); 0 if none. */
static uint8_t vb_active_port(struct ibv_context *ctx, unsigned want, char *why, size_t why_len)
{
    struct ibv_device_attr da;
    if (ibv_query_device(ctx, &da) != 0) {
        snprintf(why, why_len, "%s: ibv_query_device failed", vb_dev_name_of(ctx));
        return 0;
    }
    for (unsigned p = 1; p <= da.phys_port_cnt; p++) {
        struct ibv_port_attr pa;
        if (want && p != want)
            continue;
        if (ibv_query_port(ctx, (uint8_t)p, &pa) != 0)
            continue;
        if (pa.state == IBV_PORT_ACTIVE)
            return (uint8_t)p;
        snprintf(why, why_len, "%s port %u is %s, not ACTIVE (is its netdev up?)",
                 vb_dev_name_of(ctx), p, ibv_port_state_str(pa.state));
    }
    if (want && want > da.phys_port_cnt)
        snprintf(why, why_len, "%s has no port %u (it has %u)", vb_dev_name_of(ctx), want,
                 da.phys_port_cnt);
    return 0;
}

/* Opens the device `dev` names (NULL: the first with an active port). */
static int vb_open_device(struct vb_nic *n, const char *dev)
{
    struct rkv_port *port = n->base.port;
    char want[64] = "";
    unsigned want_port = 0;
    if (dev && vb_parse_dev(port, dev, want, sizeof(want), &want_port) < 0)
        return -RKV_ECONFIG;
    int num = 0;
    struct ibv_device **list = ibv_get_device_list(&num);
    if (!list || num == 0) {
        RKV_LOGE(port, "nic verbs: no RDMA device on this host (ibv_devices lists none); "
                       "without an RDMA NIC load soft-RoCE: `modprobe rdma_rxe && rdma link add "
                       "rxe0 type rxe netdev IFACE`, or run under ci/softroce; see `rkv doctor`");
        if (list)
            ibv_free_device_list(list);
        return -RKV_ECONFIG;
    }
    char why[160] = "";
    for (int i = 0; i < num && !n->ctx; i++) {
        if (want[0] && strcmp(ibv_get_device_name(list[i]), want) != 0)
            continue;
        struct ibv_context *ctx = ibv_open_device(list[i]);
        if (!ctx) {
            snprintf(why, sizeof(why), "cannot open %s: %s", ibv_get_device_name(list[i]),
                     strerror(errno));
            continue;
        }
        uint8_t p = vb_active_port(ctx, want_port, why, sizeof(why));
        if (p) {
            n->ctx = ctx;
            n->port_num = p;
            snprintf(n->dev_name, sizeof(n->dev_name), "%s", ibv_get_device_name(list[i]));
        } else {
            ibv_close_device(ctx);
        }
    }
    ibv_free_device_list(list);
    if (n->ctx)
        return 0;
    if (want[0] && !why[0])
        RKV_LOGE(port, "nic verbs: no RDMA device named %s (`ibv_devices` lists them)", want);
    else
        RKV_LOGE(port, "nic verbs: no usable RDMA port: %s",
                 why[0] ? why : "no device has an active port");
    return -RKV_ECONFIG;
}

/* "device:port" of the RDMA port that owns host's address, as rdma_cm
 * binds it: on a node with several NICs, the one its address is on, not
 * the first active one. -1 (debug-logged) when host is unset, a wildcard
 * or on no RDMA netdev: the caller keeps the first active port. */
static int vb_dev_of_addr(struct rkv_port *port, const char *host, char *out, size_t out_len,
                          struct sockaddr_storage *sa_p)
{
    if (!host || !*host)
        return -1;
    struct addrinfo *res = NULL;
    if (rkv_nic_resolve(port, "nic verbs", host, 0, 1, &res) < 0)
        return -1;
    struct rdma_cm_id *id = NULL;
    int rc = -1;
    if (rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0) {
        for (const struct addrinfo *ai = res; ai && rc < 0; ai = ai->ai_next)
            if (rdma_bind_addr(id, ai->ai_addr) == 0 && id->verbs &&
                ai->ai_addrlen <= sizeof(*sa_p) &&
                snprintf(out, out_len, "%s:%u", ibv_get_device_name(id->verbs->device),
                         (unsigned)id->port_num) < (int)out_len) {
                memset(sa_p, 0, sizeof(*sa_p));
                memcpy(sa_p, ai->ai_addr, ai->ai_addrlen);
                rc = 0;
            }
        rdma_destroy_id(id);
    }
    freeaddrinfo(res);
    if (rc == 0)
        RKV_LOGD(port, "nic verbs: RKV_HOST %s is on %s", host, out);
    else
        RKV_LOGD(port, "nic verbs: RKV_HOST %s is on no RDMA port: taking the first active one",
                 host);
    return rc;
}

/* PD, completion channel, CQ and the port's limits. */
static int vb_open_verbs(struct vb_nic *n)
{
    struct rkv_port *port = n->base.port;
    struct ibv_device_attr da;
    struct ibv_port_attr pa;
    int e = ibv_query_device(n->ctx, &da);
    if (e == 0)
        e = ibv_query_port(n->ctx, n->port_num, &pa);
    if (e != 0) {
        RKV_LOGE(port, "nic verbs: cannot query %s: %s", n->dev_name, strerror(e));
        return -RKV_EIO;
    }
    int rc = vb_settings(n, &da);
    if (rc < 0)
        return rc;
    n->gid_tbl_len = pa.gid_tbl_len;
    if (n->gid_index >= pa.gid_tbl_len) {
        RKV_LOGE(port, "nic verbs: RKV_VERBS_GID_INDEX=%d: %s port %u has %d GIDs", n->gid_index,
                 n->dev_name, n->port_num, pa.gid_tbl_len);
        return -RKV_ECONFIG;
    }
    n->max_msg_bytes = pa.max_msg_sz;
    n->base.max_msg_bytes = n->max_msg_bytes;
    n->pd = ibv_alloc_pd(n->ctx);
    n->comp_ch = n->pd ? ibv_create_comp_channel(n->ctx) : NULL;
    int entries = da.max_cqe < VB_CQ_INITIAL_ENTRIES ? da.max_cqe : VB_CQ_INITIAL_ENTRIES;
    n->cq = n->comp_ch ? ibv_create_cq(n->ctx, entries, n, n->comp_ch, 0) : NULL;
    if (!n->cq || vb_set_nonblock(n->comp_ch->fd) != 0 || vb_set_nonblock(n->ctx->async_fd) != 0) {
        RKV_LOGE(port, "nic verbs: cannot set up the %s on %s: %s",
                 !n->pd        ? "protection domain"
                 : !n->comp_ch ? "completion channel"
                               : "CQ",
                 n->dev_name, strerror(errno));
        return -RKV_EIO;
    }
    n->cq_entries = n->cq->cqe;
    RKV_LOGI(port,
             "nic verbs: %s port %u (%s, active MTU %d), sq %u, rq %u, inline %u, CQ %d, %s "
             "completions",
             n->dev_name, n->port_num,
             pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand",
             vb_mtu_bytes(pa.active_mtu), n->sq_depth, n->rq_depth, VB_INLINE_BYTES, n->cq_entries,
             n->busy_poll ? "busy-polled" : "blocking");
    return 0;
}

static int vb_open_cm(struct vb_nic *n)
{
    struct rkv_port *port = n->base.port;
    n->cm_ch = rdma_create_event_channel();
    if (!n->cm_ch || vb_set_nonblock(n->cm_ch->fd) != 0) {
        RKV_LOGE(port,
                 "nic verbs: cannot create the rdma_cm event channel: %s (is rdma_ucm "
                 "loaded? /dev/infiniband/rdma_cm must exist)",
                 strerror(errno));
        return -RKV_EIO;
    }
    n->poll_wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    n->cm_wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (n->poll_wake_fd < 0 || n->cm_wake_fd < 0) {
        RKV_LOGE(port, "nic verbs: eventfd failed: %s", strerror(errno));
        return -RKV_EIO;
    }
    return 0;
}

/* Frees what open set up; every QP and listener is gone by now. */
static void vb_release(struct vb_nic *n)
{
    const struct rkv_port_ops *po = n->base.port->ops;
    if (n->cq && n->cq_unacked)
        ibv_ack_cq_events(n->cq, n->cq_unacked);
    if (n->srq)
        ibv_destroy_srq(n->srq);
    if (n->srq_mr)
        ibv_dereg_mr(n->srq_mr);
    free(n->srq_mem);
    if (n->cq)
        ibv_destroy_cq(n->cq);
    if (n->comp_ch)
        ibv_destroy_comp_channel(n->comp_ch);
    if (n->pd)
        ibv_dealloc_pd(n->pd);
    if (n->ctx)
        ibv_close_device(n->ctx);
    if (n->cm_ch)
        rdma_destroy_event_channel(n->cm_ch);
    if (n->poll_wake_fd >= 0)
        close(n->poll_wake_fd);
    if (n->cm_wake_fd >= 0)
        close(n->cm_wake_fd);
    if (n->mr_mu)
        po->mutex_destroy(n->mr_mu);
    if (n->mu)
        po->mutex_destroy(n->mu);
    rkv_nic_cq_destroy(&n->soft);
    free(n->replay);
    free(n);
}

static int vb_open(struct rkv_port *port, const char *dev, struct rkv_nic **nic_p)
{
    assert(port && nic_p);
    struct vb_nic *n = calloc(1, sizeof(*n));
    if (!n)
        return -RKV_ENOMEM;
    int rc = rkv_nic_base_init(&n->base, &rkv_nic_verbs_ops, port);
    n->replay = calloc(VB_REPLAY_SLOTS, sizeof(*n->replay));
    if (rc < 0 || !n->replay) {
        free(n->replay);
        free(n);
        return rc < 0 ? rc : -RKV_ENOMEM;
    }
    n->poll_wake_fd = n->cm_wake_fd = -1;
    rkv_nic_cq_init(&n->soft, VB_SOFT_MAX, vb_qp_free_last, n);
    if (!dev || !*dev)
        dev = getenv("RKV_VERBS_DEV");
    if (dev && !*dev)
        dev = NULL;
    char owner[80];
    struct sockaddr_storage host_sa;
    int host_on = vb_dev_of_addr(port, getenv("RKV_HOST"), owner, sizeof(owner), &host_sa) == 0;
    if (!dev && host_on)
        dev = owner;
    rc = port->ops->mutex_create(port, &n->mu);
    if (rc == 0)
        rc = port->ops->mutex_create(port, &n->mr_mu);
    if (rc == 0)
        rc = vb_open_device(n, dev);
    if (rc == 0 && host_on) {
        char opened[80];
        snprintf(opened, sizeof(opened), "%s:%u", n->dev_name, (unsigned)n->port_num);
        n->has_src = strcmp(opened, owner) == 0;
        n->src = host_sa;
    }
    if (rc == 0)
        rc = vb_open_verbs(n);
    if (rc == 0)
        rc = vb_open_cm(n);
    if (rc == 0)
        rc = port->ops->task_start(port, "nic-verbs-cm", vb_cm_task, n, &n->cm_task);
    if (rc < 0) {
        vb_release(n);
        return rc;
    }
    *nic_p = &n->base;
    return 0;
}

/* The config's verbs settings over the environment's (rkv_cfg_nic, right
 * after open). Once a listener, QP or pool exists they are fixed: the same
 * values again are fine (a server given a NIC that already serves another
 * node), other ones are refused rather than half applied. */
static int vb_set_verbs(struct rkv_nic *nic, const struct rkv_nic_verbs_opts *o)
{
    struct vb_nic *n = vb_nic_of(nic);
    struct rkv_port *port = nic->port;
    if (o->mtu != -1 && !vb_mtu_valid((uint32_t)o->mtu)) {
        RKV_LOGE(port, "nic verbs: verbs-mtu %d: expected 256, 512, 1024, 2048 or 4096", o->mtu);
        return -RKV_ECONFIG;
    }
    if (o->gid_index >= n->gid_tbl_len) {
        RKV_LOGE(port, "nic verbs: verbs-gid-index %d: %s port %u has %d GIDs", o->gid_index,
                 n->dev_name, n->port_num, n->gid_tbl_len);
        return -RKV_ECONFIG;
    }
    int tos = o->tos != -1 ? o->tos : n->tos, sl = o->sl != -1 ? o->sl : n->sl;
    int gid = o->gid_index != -1 ? o->gid_index : n->gid_index;
    uint32_t mtu = o->mtu != -1 ? (uint32_t)o->mtu : n->mtu_cap;
    uint32_t srq = o->srq_depth != -1 ? (uint32_t)o->srq_depth : n->srq_max;
    vb_lock(n);
    int fixed = n->srq || n->n_qps_made || n->listeners;
    int same = tos == n->tos && sl == n->sl && gid == n->gid_index && mtu == n->mtu_cap &&
               srq == n->srq_max;
    if (!fixed) {
        n->tos = tos;
        n->sl = sl;
        n->gid_index = gid;
        n->mtu_cap = mtu;
        n->srq_max = srq;
    }
    vb_unlock(n);
    if (fixed && !same) {
        RKV_LOGE(port,
                 "nic verbs: verbs settings given after %s was in use: they are fixed by then",
                 n->dev_name);
        return -RKV_EINVAL;
    }
    return 0;
}

/* After the CM task stopped: nothing else touches the NIC any more. */
static void vb_free_all(struct vb_nic *n)
{
    while (n->listeners) {
        struct vb_listener *l = n->listeners;
        n->listeners = l->next;
        rdma_destroy_id(l->id);
        free(l);
    }
    /* Every QP closed first, so that the CQ drains below queue nothing. */
    for (struct vb_qp *qp = n->qps; qp; qp = qp->next) {
        if (!qp->core.closed && !qp->broken && qp->exposed)
            rdma_disconnect(qp->id); /* the peer sees DISCONNECTED */
        qp->core.closed = 1;
    }
    /* Entries next: reaped QPs whose last reference they are go with them. */
    rkv_nic_cq_destroy(&n->soft);
    while (n->qps) {
        struct vb_qp *qp = n->qps;
        n->qps = qp->next;
        vb_qp_destroy_verbs(n, qp);
        rdma_destroy_id(qp->id);
        vb_qp_free(n, qp);
    }
    /* Regions the user did not deregister die with the NIC; their handles too. */
    while (n->mrs) {
        struct vb_mr *m = n->mrs;
        n->mrs = m->next;
        vb_mr_release(n, m);
    }
}

static void vb_close(struct rkv_nic *nic)
{
    if (!nic)
        return;
    struct vb_nic *n = vb_nic_of(nic);
    vb_lock(n);
    n->stopping = 1;
    vb_unlock(n);
    vb_kick(n->cm_wake_fd);
    vb_kick(n->poll_wake_fd);
    n->base.port->ops->task_join(n->base.port, n->cm_task);
    vb_lock(n); /* vb_qp_destroy_verbs expects it */
    vb_free_all(n);
    vb_unlock(n);
    vb_release(n);
}

static int vb_local_addr(struct rkv_nic *nic, const char *peer, uint16_t port, char *buf,
                         size_t len)
{
    return rkv_nic_route_src(nic->port, "nic verbs", peer, port, buf, len);
}

const struct rkv_nic_ops rkv_nic_verbs_ops = {
    .name = "verbs",
    .open = vb_open,
    .listen = vb_listen,
    .connect = vb_connect,
    .reg_mr = vb_reg_mr,
    .dereg_mr = vb_dereg_mr,
    .post_send = vb_post_send,
    .post_recv = vb_post_recv,
    .post_write = vb_post_write,
    .poll = vb_poll,
    .poll_wake = vb_poll_wake,
    .qp_close = vb_qp_close,
    .local_addr = vb_local_addr,
    .close = vb_close,
    .qp_inline_bytes = vb_qp_inline_bytes,
    .srq_setup = vb_srq_setup,
    .srq_repost = vb_srq_repost,
    .mr_grant = vb_mr_grant,
    .mr_revoke = vb_mr_revoke,
    .set_verbs = vb_set_verbs,
};
