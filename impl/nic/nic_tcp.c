/* The TCP NIC: the verbs semantics of nic.h over stream sockets.
 *
 * Each QP is one TCP connection carrying frames (header + payload, layout
 * below). One reader at a time (the rx owner) epoll-waits on the listening
 * sockets, the connected sockets and an eventfd, and drives a per-QP receive
 * state machine that reads payloads straight into their final place (the
 * posted receive buffer, or the registered region a WRITE names), so
 * emulated one-sided writes cost no extra copy. Sends run on the posting
 * thread under a per-QP send mutex. A frame the socket does not take goes
 * on waiting for the peer to read only briefly (TCP_SEND_STALL_NS): then
 * its rest is copied to the QP's queue of unsent bytes (bounded per QP and
 * per NIC), which the rx owner writes when the socket is writable and every
 * later frame of the QP follows. A peer that stops reading (stopped in a
 * debugger, its host gone without a reset, or hostile) so holds up neither
 * the thread that posts nor the peers it serves next. Past the bounds, and
 * for a frame larger than a QP's bound, the sender waits while the peer
 * takes bytes, and gives it up once it has taken none for the NIC's send
 * wait (rkv_nic.send_wait_ms: a quarter of the request timeout), or has
 * taken them slower than TCP_SEND_NS_PER_BYTE past it: a server's posting
 * thread serves every other client meanwhile.
 * A queue that has not moved for as long is given up by the rx owner's
 * sweep (tcp_sweep), whether or not anything more is posted behind it.
 *
 * Who reads. A thread that polls an empty CQ reads the sockets itself
 * (inline): a reply then wakes the thread that wants it and nobody else,
 * where a reader task would wake first and hand over, one more wake-up per
 * message on each side (on a VM an interprocessor interrupt and an exit,
 * 10-20 us each). The NIC's progress task reads only while nobody polls:
 * before the first poll, and when the poller has been away longer than the
 * user's poll gap (rkv_nic.poll_gap_ns, the engine's figure: it may be blocked in a send to a peer
 * that is itself blocked sending to us: without the task neither would ever read again). Handing
 * large payloads to the task, to read the next while the poller handles the last, was tried: two
 * more wake-ups per payload, and no gain beyond the spread between runs at 1 and 16 MiB.
 *
 * Locks, in the only order they are ever nested:
 *   qp->send_mu  serialises the frames of one QP; guards qp->fd for writers
 *   nic->mu      CQ, QP list, listeners, and the QP fields marked "mu"
 *   nic->mr_mu   the MR table (never held with another lock)
 * qp->fd changes (to -1) only in the rx owner, holding send_mu and mu,
 * so whoever holds either lock may use the descriptor without it being
 * closed (and its number reused) underneath.
 *
 * QP lifetime: the core's (nic_core.h). Reaping is the rx owner's: it
 * takes closed QPs off epoll and the QP list, so that no event can name
 * them any more. qp_close only marks the QP and wakes the rx owner; poll()
 * drops entries of closed QPs. No completion is generated for a closed QP,
 * and the side that closed a QP gets no RKV_WC_DISCONNECTED for it.
 */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "nic/nic.h"
#include "nic/nic_core.h"
#include "nic/nic_inet.h"
#include "nic/nic_tcp.h"
#include "port/port.h"
#include "util/util.h"

/* Wire frame, little-endian, private to this backend:
 *   0 u32 magic | 4 u8 kind | 5 u8 pad[3] | 8 u32 len | 12 u32 imm
 *  16 u64 remote_addr | 24 u32 rkey | 28 u32 pad  -- then len payload bytes */
#define TCP_MAGIC 0x544b5652u /* "RVKT" read as bytes */
#define TCP_HDR_BYTES 32
#define TCP_MAX_FRAME_BYTES (1u << 30)

/* KEEPALIVE: no payload, no completion; it only tells an accepting side
 * with an idle timeout that the connecting side is alive (tcp_keepalive). */
enum tcp_kind {
    TCP_KIND_SEND = 1,
    TCP_KIND_WRITE = 2,
    TCP_KIND_WRITE_IMM = 3,
    TCP_KIND_KEEPALIVE = 4
};

/* Connection hello, before any frame: a challenge-response on the shared
 * secret (nic.h), four messages of one layout
 *   0 u32 magic | 4 u32 version or status | 8 u8[32] nonce or MAC
 *   connecting -> accepting  "RVKH" version 3, its nonce cn
 *   accepting -> connecting  "RVKC" its idle timeout in ms (0: none), a
 *                            fresh nonce sn
 *   connecting -> accepting  "RVKP" 0, MAC("rkv tcp client", sn, cn)
 *   accepting -> connecting  "RVKA" 0 (welcome) or 1 (wrong MAC, then it
 *                            closes), MAC("rkv tcp server", cn, sn)
 * The accepting side's fresh nonce makes a recorded proof useless on
 * another connection; its own MAC tells the connecting side that the server
 * knows the secret too. The QP is announced (RKV_WC_CONNECTED) only after a
 * good proof, and dropped when none came within the hello timeout. */
#define TCP_HELLO_MAGIC 0x484b5652u /* "RVKH" */
#define TCP_CHAL_MAGIC 0x434b5652u  /* "RVKC" */
#define TCP_PROOF_MAGIC 0x504b5652u /* "RVKP" */
#define TCP_ACK_MAGIC 0x414b5652u   /* "RVKA" */
#define TCP_AUTH_BYTES (8 + RKV_NIC_AUTH_MAC_BYTES)
/* The frame format's too: 3 added KEEPALIVE frames, which a build of 2
 * dropped the connection at ("unknown frame kind 4"); it is refused at
 * the hello instead. */
#define TCP_HELLO_VERSION 3
/* The rx owner looks for connections past their hello or idle timeout this
 * often at most. */
#define TCP_SWEEP_NS 100000000ull
#define TCP_SWEEP_BATCH 64

#define TCP_SEND_TIMEOUT_MS 30000u /* a queue this still fails the sender; caps the send wait */
/* A socket that took nothing for this long while a frame waits: the rest
 * of the frame is queued (below), not waited for. Long enough that a peer
 * which reads fast keeps a large frame on the direct path (no copy). */
#define TCP_SEND_STALL_NS 2000000ull
/* And one that takes it slower than this (1 ns a byte: 1 GB/s) past that
 * much: the rest is queued too. A peer that read a few KiB every few ms
 * kept every frame on the direct path, and the posting thread (a server's)
 * waited for it at its pace. */
#define TCP_SEND_DIRECT_NS_PER_BYTE 1ull
/* A post that waits for its peer (no room to queue) goes on waiting past
 * the send wait only while the peer reads at least this fast on average
 * (200 ns a byte: 5 MB/s), or one that read a byte a second would hold
 * the posting thread as long as it liked. Low enough for one peer's share
 * of a shared 1 Gb/s link. */
#define TCP_SEND_NS_PER_BYTE 200ull
#define TCP_PEND_QP_MAX (64u << 20)     /* unsent bytes one QP may queue */
#define TCP_PEND_NIC_MAX (512ull << 20) /* and all the QPs of a NIC together */
#define TCP_PEND_KEEP (1u << 20)        /* a drained queue keeps a buffer this small */
#define TCP_CQ_MAX (1u << 20)           /* completions waiting for poll() */
#define TCP_RECV_MAX (1u << 16)         /* posted receives per QP */
static_assert(TCP_RECV_MAX >= RKV_MAX_RX_DEPTH, "a connection posts rx_depth receives");
#define TCP_MR_SLOT_BITS 20 /* rkey = (random:12 | slot:20) ^ secret */
#define TCP_MR_MAX (1u << TCP_MR_SLOT_BITS)
#define TCP_LISTEN_MAX 16
#define TCP_LISTEN_BACKLOG 128
#define TCP_EPOLL_BATCH 64
#define TCP_ACCEPT_BATCH 32
/* Bytes read from one socket per readiness event, so one busy peer cannot
 * starve the others (epoll is level-triggered: the rest comes next round). */
#define TCP_RX_BUDGET_BYTES (4u << 20)

enum tcp_rx_owner { TCP_RX_NOBODY, TCP_RX_TASK, TCP_RX_POLLER };

struct tcp_frame {
    uint8_t kind;
    uint32_t len;
    uint32_t imm;
    uint64_t remote_addr;
    uint32_t rkey;
};

/* A bounded FIFO of fixed-size elements that grows on demand up to max. */
struct tcp_ring {
    unsigned char *buf;
    size_t elem_bytes;
    size_t cap, head, len, max;
};

/* What an epoll event points at. */
enum tcp_src_kind { TCP_SRC_WAKE, TCP_SRC_LISTENER, TCP_SRC_QP };
struct tcp_src {
    enum tcp_src_kind kind;
};

struct tcp_recv {
    uint64_t wr_id;
    uint8_t *addr;
    uint32_t len;
};

/* Receive state machine; touched by the rx owner only. */
struct tcp_rx {
    uint8_t hdr[TCP_HDR_BYTES];
    size_t hdr_got;     /* header bytes buffered */
    int in_payload;     /* header accepted, payload being read into dst */
    int stalled;        /* RNR: waiting for a post_recv, EPOLLIN dropped */
    struct tcp_frame f; /* the accepted header */
    uint8_t *dst;
    /* A WRITE's region, by its serial (struct tcp_mr; 0: not a WRITE), as
     * found at its header: checked again under mr_mu before each read into
     * it (rx_read_payload). */
    uint64_t mr_serial;
    size_t got;           /* payload bytes landed */
    struct tcp_recv recv; /* the receive this frame consumes (SEND, WRITE_IMM) */
    int hello_done;       /* the connection hello was checked (accepted side) */
    int auth_phase;       /* 0: reading the HELLO, 1: the challenge went, reading the PROOF */
    uint8_t auth[TCP_AUTH_BYTES];
    size_t auth_got;
    uint8_t cnonce[RKV_NIC_AUTH_NONCE_BYTES]; /* the peer's */
    uint8_t snonce[RKV_NIC_AUTH_NONCE_BYTES]; /* ours, in the challenge */
    uint64_t born_ns;                         /* accepted then (hello timeout) */
    uint64_t last_msg_ns;                     /* a frame last completed then (idle timeout) */
};

struct tcp_nic;

struct tcp_qp {
    struct rkv_nic_qp core; /* first: the core's lifetime fields (mu), rkv_qp_ctx() */
    struct tcp_src src;
    struct tcp_nic *nic;
    char peer[64]; /* "host:port", for log lines */
    struct rkv_mutex *send_mu;
    int fd;        /* see the lock comment at the top */
    int send_dead; /* send_mu: posting fails with -RKV_EPEERDEAD */
    /* send_mu: bytes of whole frames the socket did not take yet, from
     * pend_off to pend_len, which go out before anything else on the QP. */
    uint8_t *pend;
    size_t pend_off, pend_len, pend_cap;
    uint64_t pend_moved_ns; /* send_mu: the queue last lost bytes (or began) then */
    int out_armed;          /* mu: EPOLLOUT is in the QP's epoll interest */
    struct tcp_ring recvs;  /* mu: posted receives, FIFO of struct tcp_recv */
    int rnr;                /* mu: the rx owner wants a kick on post_recv */
    int disconnected;       /* mu: the connection is gone (and said so, unless closed) */
    int announced;          /* mu: the user saw RKV_WC_CONNECTED (or connect() returned it) */
    int passive;            /* accepted here: the hello and idle timeouts apply */
    uint64_t last_tx_ns;    /* send_mu: a frame last went then (connecting side, idle timeout) */
    uint64_t ka_every_ns;   /* mu: connecting side, a keepalive after this silence (0: none) */
    struct tcp_qp *next;    /* mu: nic->qps */
    /* pend_moved_ns while the queue holds bytes, 0 while it is empty: what
     * the rx owner's sweep reads (it does not take send_mu). */
    _Atomic uint64_t pend_still_ns;
    struct tcp_rx rx;
};

struct tcp_listener {
    struct tcp_src src;
    int fd;
    uint16_t port;
    struct tcp_listener *next;
};

struct tcp_nic {
    struct rkv_nic base; /* first: the engine holds a struct rkv_nic * */
    struct tcp_src wake_src;
    int epfd;
    int wakefd; /* eventfd: stop, qp_close and RNR kicks */
    uint32_t send_timeout_ms;
    atomic_size_t pend_total; /* unsent bytes queued over all QPs */
    struct rkv_task *task;    /* the progress task */

    struct rkv_mutex *mu;
    struct rkv_cond *cq_nonempty; /* poll() waits on it */
    struct rkv_cond *cq_space;    /* the progress task waits on it when the CQ is full */
    struct rkv_nic_cq cq;         /* the core's soft CQ */
    int stopping;
    int poll_woken; /* mu: poll_wake; the next poll returns at once */
    /* A connection this node made has a keepalive (ka_every_ns): the
     * reader sweeps every TCP_SWEEP_NS from then on. */
    atomic_int keepalives;
    struct tcp_qp *qps; /* every QP not yet reaped */
    /* The QP whose socket the rx owner is reading into user memory
     * right now; qp_close waits until it is not the one being closed, so
     * that once qp_close returns its buffers may be freed (verbs semantics). */
    struct tcp_qp *rx_active;
    struct rkv_cond *rx_idle;
    enum tcp_rx_owner rx_owner; /* mu: who may read the sockets now */
    int pollers;                /* mu: threads inside poll() */
    int task_asked;             /* mu: a poller kicked the reading task to hand over */
    uint64_t poller_left_ns;    /* mu: when the last poller left poll() */
    struct rkv_cond *rx_turn;   /* the parked progress task waits on it */
    uint64_t rounds[3];         /* mu: read rounds by owner (enum tcp_rx_owner) */
    struct tcp_listener *listeners;
    unsigned n_listeners;

    struct rkv_mutex *mr_mu;
    struct rkv_mr **mrs; /* slot -> MR; slot = lkey - 1 */
    uint32_t mr_cap, mr_hint;
    uint32_t rkey_secret;
    uint64_t mr_serial; /* mr_mu: the last region's (struct tcp_mr) */
    struct rkv_rng rng; /* mr_mu: rkey randomness */
    /* Rx owner: log rate limits, and what they counted. */
    uint64_t refused; /* connections refused in the hello */
    struct rkv_ratelim lim_refused, lim_accept, lim_timeout, lim_drop;
    uint64_t next_sweep_ns; /* rx owner: the next look for timed-out connections */
    /* A descriptor held back for when accept() finds none left: given up
     * for a moment to accept the newcomer and close it at once, so that the
     * pending connection does not keep the listener readable forever. */
    int reserve_fd;
};

static struct tcp_nic *tcp_nic_of(struct rkv_nic *nic)
{
    assert(nic && nic->ops == &rkv_nic_tcp_ops);
    return (struct tcp_nic *)(void *)nic;
}

static struct tcp_qp *tcp_qp_of(struct rkv_qp *qp)
{
    assert(qp);
    return (struct tcp_qp *)(void *)qp;
}

static void tcp_lock(struct tcp_nic *n)
{
    n->base.port->ops->mutex_lock(n->mu);
}

static void tcp_unlock(struct tcp_nic *n)
{
    n->base.port->ops->mutex_unlock(n->mu);
}

static uint64_t tcp_now_ns(struct tcp_nic *n)
{
    return n->base.port->ops->now_ns(n->base.port);
}

/* ---- frame encoding ---- */

static void frame_encode(const struct tcp_frame *f, uint8_t *h)
{
    memset(h, 0, TCP_HDR_BYTES);
    rkv_nic_put32(h, TCP_MAGIC);
    h[4] = f->kind;
    rkv_nic_put32(h + 8, f->len);
    rkv_nic_put32(h + 12, f->imm);
    rkv_nic_put64(h + 16, f->remote_addr);
    rkv_nic_put32(h + 24, f->rkey);
}

static int frame_decode(const uint8_t *h, struct tcp_frame *f, char *why, size_t why_len)
{
    uint32_t magic = rkv_nic_get32(h);
    if (magic != TCP_MAGIC)
        return rkv_errf(why, why_len, -RKV_EPROTO, "bad frame magic 0x%08x", magic);
    *f = (struct tcp_frame){.kind = h[4],
                            .len = rkv_nic_get32(h + 8),
                            .imm = rkv_nic_get32(h + 12),
                            .remote_addr = rkv_nic_get64(h + 16),
                            .rkey = rkv_nic_get32(h + 24)};
    if (f->kind < TCP_KIND_SEND || f->kind > TCP_KIND_KEEPALIVE)
        return rkv_errf(why, why_len, -RKV_EPROTO, "unknown frame kind %u", f->kind);
    if (f->kind == TCP_KIND_KEEPALIVE && f->len)
        return rkv_errf(why, why_len, -RKV_EPROTO, "keepalive frame with %u payload bytes", f->len);
    if (f->len > TCP_MAX_FRAME_BYTES)
        return rkv_errf(why, why_len, -RKV_EPROTO, "frame of %u bytes exceeds the %u limit", f->len,
                        TCP_MAX_FRAME_BYTES);
    return 0;
}

/* ---- bounded growable ring ---- */

static void ring_init(struct tcp_ring *r, size_t elem_bytes, size_t max)
{
    *r = (struct tcp_ring){.elem_bytes = elem_bytes, .max = max};
}

static void ring_free(struct tcp_ring *r)
{
    free(r->buf);
    r->buf = NULL;
    r->cap = r->head = r->len = 0;
}

static void *ring_at(const struct tcp_ring *r, size_t i)
{
    assert(i < r->len);
    return r->buf + ((r->head + i) % r->cap) * r->elem_bytes;
}

/* Makes room for n elements in all; -RKV_ELIMIT past max. */
static int ring_reserve(struct tcp_ring *r, size_t n)
{
    if (n > r->max)
        return -RKV_ELIMIT;
    if (n <= r->cap)
        return 0;
    size_t cap = r->cap ? r->cap : 16;
    while (cap < n)
        cap *= 2;
    if (cap > r->max)
        cap = r->max;
    unsigned char *buf = malloc(cap * r->elem_bytes);
    if (!buf)
        return -RKV_ENOMEM;
    /* Unwrap into the new buffer so head restarts at 0. */
    for (size_t i = 0; i < r->len; i++)
        memcpy(buf + i * r->elem_bytes, ring_at(r, i), r->elem_bytes);
    free(r->buf);
    r->buf = buf;
    r->cap = cap;
    r->head = 0;
    return 0;
}

static void ring_push(struct tcp_ring *r, const void *e)
{
    assert(r->len < r->cap);
    r->len++;
    memcpy(ring_at(r, r->len - 1), e, r->elem_bytes);
}

static void ring_pop(struct tcp_ring *r, void *e)
{
    assert(r->len > 0);
    memcpy(e, ring_at(r, 0), r->elem_bytes);
    r->head = (r->head + 1) % r->cap;
    r->len--;
}

/* ---- completion queue (all under nic->mu) ---- */

/* Promises one CQ slot, so a post that already sent its bytes can always
 * report them. Only the progress task may wait for room: a posting thread
 * may be the poller itself. */
static int cq_reserve(struct tcp_nic *n, int may_wait)
{
    while (rkv_nic_cq_used(&n->cq) >= TCP_CQ_MAX) {
        if (!may_wait || n->stopping)
            return -RKV_ELIMIT;
        n->base.port->ops->cond_wait(n->cq_space, n->mu, UINT64_MAX);
    }
    return rkv_nic_cq_reserve(&n->cq);
}

static void cq_push(struct tcp_nic *n, struct tcp_qp *qp, struct rkv_wc *wc)
{
    rkv_nic_cq_push(&n->cq, &qp->core, wc);
    n->base.port->ops->cond_signal(n->cq_nonempty);
}

/* The rx owner's way to complete. The progress task waits for CQ room if
 * need be; a poller may not (it is the one that drains the CQ), and never
 * has to: tcp_rx_round stops reading while the CQ is half full. */
static void cq_emit(struct tcp_nic *n, struct tcp_qp *qp, struct rkv_wc wc)
{
    tcp_lock(n);
    if (qp->core.closed) {
        tcp_unlock(n); /* nobody may learn about a closed QP any more */
        return;
    }
    int rc = cq_reserve(n, n->rx_owner == TCP_RX_TASK);
    if (rc < 0)
        RKV_LOGE(n->base.port, "nic tcp: %s: completion %d lost: %s", qp->peer, wc.opcode,
                 rkv_strerror(rc));
    else if (qp->core.closed) /* closed while we waited for room */
        rkv_nic_cq_unreserve(&n->cq);
    else
        cq_push(n, qp, &wc);
    tcp_unlock(n);
}

static void qp_free(struct tcp_nic *n, struct tcp_qp *qp)
{
    assert(qp->fd < 0 && qp->core.cq_refs == 0);
    /* A QP the NIC's close frees was never broken (tcp_free_all): its
     * queue, drained or not, goes here. */
    free(qp->pend);
    ring_free(&qp->recvs);
    n->base.port->ops->mutex_destroy(qp->send_mu);
    free(qp);
}

/* The core frees a closed, reaped QP with its last CQ entry. */
static void qp_free_last(void *owner, struct rkv_nic_qp *core)
{
    qp_free(owner, (struct tcp_qp *)(void *)core);
}

/* Copies out up to max entries, dropping those of closed QPs. */
static int cq_take(struct tcp_nic *n, struct rkv_wc *wc, int max)
{
    RKV_ASSERT_HELD(n->base.port, n->mu);
    uint32_t popped;
    int got = rkv_nic_cq_take(&n->cq, wc, max, &popped);
    if (popped)
        n->base.port->ops->cond_signal(n->cq_space);
    return got;
}

/* ---- rx owner wake-ups ---- */

static void tcp_wake(struct tcp_nic *n)
{
    uint64_t one = 1;
    /* Fails only when the counter would overflow, and then a wake-up is pending anyway. */
    ssize_t w = write(n->wakefd, &one, sizeof(one));
    (void)w;
}

static int tcp_epoll_set(struct tcp_nic *n, int op, int fd, uint32_t events, struct tcp_src *src)
{
    struct epoll_event ev = {.events = events, .data.ptr = src};
    if (epoll_ctl(n->epfd, op, fd, &ev) == 0)
        return 0;
    RKV_LOGE(n->base.port, "nic tcp: epoll_ctl(%d) on fd %d failed: %s", op, fd, strerror(errno));
    return -RKV_EIO;
}

/* mu held (qp->fd stays open while it is). The QP's epoll interest:
 * EPOLLIN, traded for EPOLLRDHUP while stalled for want of a receive,
 * and EPOLLOUT while unsent bytes are queued. */
static int qp_epoll_update(struct tcp_nic *n, struct tcp_qp *qp)
{
    RKV_ASSERT_HELD(n->base.port, n->mu);
    uint32_t events = (qp->rx.stalled ? EPOLLRDHUP : EPOLLIN) | (qp->out_armed ? EPOLLOUT : 0);
    return tcp_epoll_set(n, EPOLL_CTL_MOD, qp->fd, events, &qp->src);
}

/* send_mu held. Drops the queue of unsent bytes (the connection is gone). */
static void pend_free(struct tcp_nic *n, struct tcp_qp *qp)
{
    atomic_fetch_sub(&n->pend_total, qp->pend_len - qp->pend_off);
    free(qp->pend);
    qp->pend = NULL;
    qp->pend_off = qp->pend_len = qp->pend_cap = 0;
    atomic_store(&qp->pend_still_ns, 0);
}

/* ---- connection teardown ---- */

/* The rx owner only. Shuts the connection, closes the descriptor and, unless
 * the user closed the QP, queues its one DISCONNECTED. why == NULL: an
 * orderly end, not worth a warning. */
static void qp_break(struct tcp_nic *n, struct tcp_qp *qp, const char *why)
{
    if (qp->fd < 0)
        return;
    struct rkv_port *port = n->base.port;
    /* shutdown first: it wakes a sender blocked in poll() so send_mu frees up. */
    shutdown(qp->fd, SHUT_RDWR);
    epoll_ctl(n->epfd, EPOLL_CTL_DEL, qp->fd, NULL);
    port->ops->mutex_lock(qp->send_mu);
    tcp_lock(n);
    close(qp->fd);
    qp->fd = -1;
    qp->send_dead = 1;
    qp->out_armed = 0;
    pend_free(n, qp);
    port->ops->mutex_unlock(qp->send_mu);
    int report = qp->announced && !qp->core.closed && !qp->disconnected;
    /* Nobody holds a QP that was never announced: free it now, or a flood
     * of connections that never say hello would pile up until close. */
    int orphan = !qp->announced && !qp->core.closed;
    if (orphan)
        qp->core.closed = 1;
    qp->disconnected = 1;
    qp->rnr = 0;
    qp->recvs.len = 0; /* posted receives are not completed (verbs would flush them) */
    qp->rx.stalled = 0;
    tcp_unlock(n);
    uint64_t quiet = 0;
    if (!report)
        RKV_LOGD(port, "nic tcp: %s: closed locally", qp->peer);
    else if (why && rkv_ratelim_ok(&n->lim_drop, tcp_now_ns(n), RKV_RATELIM_BURST, &quiet))
        RKV_LOGW(port, "nic tcp: dropping the connection with %s: %s (%llu such lines suppressed)",
                 qp->peer, why, (unsigned long long)quiet);
    else if (why)
        RKV_LOGD(port, "nic tcp: dropping the connection with %s: %s", qp->peer, why);
    else
        RKV_LOGI(port, "nic tcp: %s disconnected", qp->peer);
    if (report)
        cq_emit(n, qp, (struct rkv_wc){.opcode = RKV_WC_DISCONNECTED, .status = RKV_WC_SUCCESS});
    if (orphan)
        tcp_wake(n); /* the rx owner reaps closed QPs when woken */
}

/* ---- memory regions ---- */

/* Slots below mr_hint are all in use, so the scan starts there. */
static int mr_slot_alloc(struct tcp_nic *n, uint32_t *slot_p)
{
    for (uint32_t i = n->mr_hint; i < n->mr_cap; i++) {
        if (!n->mrs[i]) {
            *slot_p = i;
            n->mr_hint = i + 1;
            return 0;
        }
    }
    if (n->mr_cap == TCP_MR_MAX)
        return -RKV_ELIMIT;
    uint32_t cap = n->mr_cap ? n->mr_cap * 2 : 64;
    struct rkv_mr **mrs = realloc(n->mrs, cap * sizeof(*mrs));
    if (!mrs)
        return -RKV_ENOMEM;
    memset(mrs + n->mr_cap, 0, (cap - n->mr_cap) * sizeof(*mrs));
    *slot_p = n->mr_cap;
    n->mrs = mrs;
    n->mr_cap = cap;
    n->mr_hint = *slot_p + 1;
    return 0;
}

/* A region as this NIC keeps it: what the user sees, and what only the NIC
 * knows. */
struct tcp_mr {
    struct rkv_mr mr;
    /* Never reused: a region registered where another was, even at the same
     * address and under the same rkey (12 bits of salt come back after a few
     * thousand registrations), is another region to a WRITE begun in the
     * first (rx_read_payload). */
    uint64_t serial;
    /* mr_grant: the one connection that may write, under grant_rkey (0:
     * none). A peer that learned or guessed a slot's rkey could write
     * another peer's slot while TCP had no such grants (outside tester: a
     * victim's acknowledged ASSIGN applied the attacker's rows). */
    const struct tcp_qp *grantee;
    uint32_t grant_rkey;
};

static struct tcp_mr *tcp_mr_of(const struct rkv_mr *mr)
{
    return (struct tcp_mr *)(void *)((char *)mr - offsetof(struct tcp_mr, mr));
}

/* An rkey names its slot, so lookups are O(1), but random salt bits and the
 * per-NIC secret (from the OS, tcp_open) keep a peer from guessing a live
 * key from another one; a slot's key is also bound to its peer's
 * connection (mr_grant), so a guess gains nothing. */
static uint32_t mr_make_rkey(struct tcp_nic *n, uint32_t slot)
{
    assert(slot < TCP_MR_MAX);
    for (;;) {
        uint32_t salt = (uint32_t)rkv_rng_below(&n->rng, 1u << (32 - TCP_MR_SLOT_BITS));
        uint32_t key = ((salt << TCP_MR_SLOT_BITS) | slot) ^ n->rkey_secret;
        if (key != 0) /* one salt in 4096 maps to 0, which stays "no key" */
            return key;
    }
}

/* mr_mu held. The region rkey names, under its own key or its grant's. */
static const struct rkv_mr *mr_find(const struct tcp_nic *n, uint32_t rkey)
{
    uint32_t slot = (rkey ^ n->rkey_secret) & (TCP_MR_MAX - 1);
    if (rkey == 0 || slot >= n->mr_cap || !n->mrs[slot])
        return NULL;
    const struct rkv_mr *mr = n->mrs[slot];
    return mr->rkey == rkey || tcp_mr_of(mr)->grant_rkey == rkey ? mr : NULL;
}

/* mr_mu held. Where a WRITE of f on qp lands, or why it may not. A region
 * granted to a connection takes writes under the grant's key from that
 * connection alone; its own key opens nothing (RKV_ACCESS_REMOTE_GRANT). */
static int mr_check(const struct tcp_nic *n, const struct tcp_qp *qp, const struct tcp_frame *f,
                    const struct rkv_mr **mr_p, uint8_t **dst_p, char *why, size_t why_len)
{
    const struct rkv_mr *mr = mr_find(n, f->rkey);
    *mr_p = mr;
    if (!mr || tcp_mr_of(mr)->grant_rkey != f->rkey)
        return rkv_nic_write_target(mr, f->rkey, f->remote_addr, f->len, dst_p, why, why_len);
    if (tcp_mr_of(mr)->grantee != qp)
        return rkv_errf(why, why_len, -RKV_EACCESS,
                        "remote access error: write under rkey 0x%08x, which was granted to "
                        "another connection",
                        f->rkey);
    uint64_t base = (uintptr_t)mr->addr;
    if (!rkv_nic_range_ok(base, mr->len, f->remote_addr, f->len))
        return rkv_errf(why, why_len, -RKV_EACCESS,
                        "write of %u bytes at 0x%llx falls outside rkey 0x%08x [0x%llx, +%zu)",
                        f->len, (unsigned long long)f->remote_addr, f->rkey,
                        (unsigned long long)base, mr->len);
    *dst_p = (uint8_t *)mr->addr + (f->remote_addr - base);
    return 0;
}

/* Resolves where a WRITE lands, inside a region registered for remote writes.
 * The region may go before the payload has come: a peer's own slot is
 * retired only after its writes (one connection, in order), but a hostile
 * peer that held a WRITE's payload back while another connection of its
 * retired the slot had the rest written into freed memory (heap
 * corruption, SIGSEGV). So the payload is read under mr_mu, the region
 * checked again each time, by its serial (rx_read_payload). */
static int mr_target(struct tcp_nic *n, const struct tcp_qp *qp, const struct tcp_frame *f,
                     uint8_t **dst_p, uint64_t *serial_p, char *why, size_t why_len)
{
    struct rkv_port *port = n->base.port;
    port->ops->mutex_lock(n->mr_mu);
    const struct rkv_mr *mr;
    int rc = mr_check(n, qp, f, &mr, dst_p, why, why_len);
    *serial_p = rc == 0 ? tcp_mr_of(mr)->serial : 0;
    port->ops->mutex_unlock(n->mr_mu);
    return rc;
}

static int tcp_reg_mr(struct rkv_nic *nic, void *addr, size_t len, int access, struct rkv_mr **mr_p)
{
    struct tcp_nic *n = tcp_nic_of(nic);
    struct rkv_port *port = n->base.port;
    if ((!addr && len) || (access & ~(RKV_ACCESS_REMOTE_WRITE | RKV_ACCESS_REMOTE_GRANT)) ||
        !mr_p || (uintptr_t)addr + len < (uintptr_t)addr)
        return -RKV_EINVAL;
    struct tcp_mr *tm = calloc(1, sizeof(*tm));
    if (!tm)
        return -RKV_ENOMEM;
    uint32_t slot;
    port->ops->mutex_lock(n->mr_mu);
    int rc = mr_slot_alloc(n, &slot);
    if (rc == 0) {
        tm->mr = (struct rkv_mr){.addr = addr,
                                 .len = len,
                                 .lkey = slot + 1,
                                 .rkey = mr_make_rkey(n, slot),
                                 .access = access,
                                 .nic = &n->base,
                                 .impl = n};
        tm->serial = ++n->mr_serial;
        n->mrs[slot] = &tm->mr;
    }
    port->ops->mutex_unlock(n->mr_mu);
    if (rc < 0) {
        RKV_LOGW(port, "nic tcp: cannot register %zu bytes: %s", len, rkv_strerror(rc));
        free(tm);
        return rc;
    }
    *mr_p = &tm->mr;
    return 0;
}

/* One grant per region (the engine's slot is one peer's): a second is
 * -RKV_EINUSE until the first is revoked. */
static int tcp_mr_grant(struct rkv_qp *q, struct rkv_mr *mr, uint32_t *rkey_p, void **grant_p)
{
    struct tcp_qp *qp = tcp_qp_of(q);
    struct tcp_nic *n = qp->nic;
    if (!mr || mr->impl != n || !rkey_p || !grant_p || !(mr->access & RKV_ACCESS_REMOTE_GRANT))
        return -RKV_EINVAL;
    struct tcp_mr *tm = tcp_mr_of(mr);
    int rc = 0;
    n->base.port->ops->mutex_lock(n->mr_mu);
    if (tm->grant_rkey) {
        rc = -RKV_EINUSE;
    } else {
        uint32_t key;
        do
            key = mr_make_rkey(n, mr->lkey - 1);
        while (key == mr->rkey);
        tm->grant_rkey = key;
        tm->grantee = qp;
        *rkey_p = key;
        *grant_p = tm;
    }
    n->base.port->ops->mutex_unlock(n->mr_mu);
    return rc;
}

static void tcp_mr_revoke(struct rkv_nic *nic, void *grant)
{
    struct tcp_nic *n = tcp_nic_of(nic);
    struct tcp_mr *tm = grant;
    if (!tm)
        return;
    assert(tm->mr.impl == n);
    n->base.port->ops->mutex_lock(n->mr_mu);
    tm->grant_rkey = 0;
    tm->grantee = NULL;
    n->base.port->ops->mutex_unlock(n->mr_mu);
}

static void tcp_dereg_mr(struct rkv_nic *nic, struct rkv_mr *mr)
{
    struct tcp_nic *n = tcp_nic_of(nic);
    if (!mr)
        return;
    assert(mr->impl == n);
    uint32_t slot = mr->lkey - 1;
    n->base.port->ops->mutex_lock(n->mr_mu);
    assert(slot < n->mr_cap && n->mrs[slot] == mr);
    n->mrs[slot] = NULL;
    if (slot < n->mr_hint)
        n->mr_hint = slot;
    n->base.port->ops->mutex_unlock(n->mr_mu);
    free(tcp_mr_of(mr));
}

/* ---- receive state machine (rx owner) ---- */

enum tcp_rx_status { TCP_RX_OK, TCP_RX_WAIT, TCP_RX_STALL, TCP_RX_DEAD };

/* Consumes the oldest posted receive, or asks post_recv for a kick (RNR). */
static int rx_take_recv(struct tcp_nic *n, struct tcp_qp *qp, char *why, size_t why_len)
{
    const struct tcp_frame *f = &qp->rx.f;
    int st = TCP_RX_OK;
    tcp_lock(n);
    if (qp->recvs.len == 0) {
        qp->rnr = 1;
        st = TCP_RX_STALL;
    } else if (f->kind == TCP_KIND_SEND &&
               f->len > ((const struct tcp_recv *)ring_at(&qp->recvs, 0))->len) {
        rkv_errf(why, why_len, 0, "SEND of %u bytes overflows the %u-byte posted receive", f->len,
                 ((const struct tcp_recv *)ring_at(&qp->recvs, 0))->len);
        st = TCP_RX_DEAD;
    } else {
        ring_pop(&qp->recvs, &qp->rx.recv);
    }
    tcp_unlock(n);
    return st;
}

/* A whole header is buffered: validate it and find where its payload goes.
 * Runs again from scratch after an RNR stall, so it changes nothing before
 * it has a receive. */
static int rx_begin_frame(struct tcp_nic *n, struct tcp_qp *qp, char *why, size_t why_len)
{
    struct tcp_rx *rx = &qp->rx;
    assert(!rx->in_payload && rx->hdr_got == TCP_HDR_BYTES);
    if (frame_decode(rx->hdr, &rx->f, why, why_len) < 0)
        return TCP_RX_DEAD;
    uint8_t *dst = NULL;
    uint64_t serial = 0;
    int write = rx->f.kind == TCP_KIND_WRITE || rx->f.kind == TCP_KIND_WRITE_IMM;
    if (write && mr_target(n, qp, &rx->f, &dst, &serial, why, why_len) < 0)
        return TCP_RX_DEAD;
    if (rx->f.kind == TCP_KIND_SEND || rx->f.kind == TCP_KIND_WRITE_IMM) {
        int st = rx_take_recv(n, qp, why, why_len);
        if (st != TCP_RX_OK)
            return st;
        if (rx->f.kind == TCP_KIND_SEND)
            dst = rx->recv.addr;
    }
    rx->dst = dst;
    rx->mr_serial = serial;
    rx->got = 0;
    rx->hdr_got = 0;
    rx->in_payload = 1;
    return TCP_RX_OK;
}

/* The payload landed: complete the receive it consumed, if any. */
static void rx_end_frame(struct tcp_nic *n, struct tcp_qp *qp)
{
    struct tcp_rx *rx = &qp->rx;
    assert(rx->in_payload && rx->got == rx->f.len);
    rx->in_payload = 0;
    /* Whole frames only: a peer trickling one byte a second stays idle. */
    if (n->base.idle_timeout_ms)
        rx->last_msg_ns = tcp_now_ns(n);
    if (rx->f.kind == TCP_KIND_WRITE || rx->f.kind == TCP_KIND_KEEPALIVE)
        return;
    struct rkv_wc wc = {.wr_id = rx->recv.wr_id, .status = RKV_WC_SUCCESS, .byte_len = rx->f.len};
    if (rx->f.kind == TCP_KIND_SEND) {
        wc.opcode = RKV_WC_RECV;
    } else {
        wc.opcode = RKV_WC_RECV_IMM;
        wc.imm = rx->f.imm;
    }
    cq_emit(n, qp, wc);
}

/* Classifies a read's result; leaves why empty for an orderly EOF. */
static int rx_read_status(ssize_t r, size_t *budget, char *why, size_t why_len)
{
    if (r > 0) {
        *budget -= (size_t)r < *budget ? (size_t)r : *budget;
        return TCP_RX_OK;
    }
    if (r == 0)
        return TCP_RX_DEAD;
    /* EINTR too: the level-triggered epoll reports the socket again. */
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        return TCP_RX_WAIT;
    rkv_errf(why, why_len, 0, "read failed: %s", strerror(errno));
    return TCP_RX_DEAD;
}

static int rx_read_header(struct tcp_qp *qp, size_t *budget, char *why, size_t why_len)
{
    struct tcp_rx *rx = &qp->rx;
    ssize_t r = recv(qp->fd, rx->hdr + rx->hdr_got, TCP_HDR_BYTES - rx->hdr_got, 0);
    int st = rx_read_status(r, budget, why, why_len);
    if (st == TCP_RX_OK)
        rx->hdr_got += (size_t)r;
    return st;
}

static void auth_encode(uint8_t *b, uint32_t magic, uint32_t status, const uint8_t *body)
{
    rkv_nic_put32(b, magic);
    rkv_nic_put32(b + 4, status);
    if (body)
        memcpy(b + 8, body, RKV_NIC_AUTH_MAC_BYTES);
    else
        memset(b + 8, 0, RKV_NIC_AUTH_MAC_BYTES);
}

/* A refused hello: one line, then the rest counted (rkv_ratelim). */
static void rx_refused(struct tcp_nic *n, struct tcp_qp *qp, const char *what)
{
    uint64_t quiet = 0;
    n->refused++;
    if (!rkv_ratelim_ok(&n->lim_refused, tcp_now_ns(n), 1, &quiet))
        return;
    RKV_LOGW(n->base.port,
             "nic tcp: refused %s: %s (%llu refused so far, %llu since the last line; peers "
             "need the same secret: RKV_TOKEN, RKV_SECRET_FILE or rkv_config.secret)",
             qp->peer, what, (unsigned long long)n->refused, (unsigned long long)quiet);
}

/* Accepting side: reads the peer's HELLO and answers with a challenge, then
 * reads its PROOF; a good one announces the QP. */
static int rx_hello(struct tcp_nic *n, struct tcp_qp *qp, size_t *budget, char *why, size_t why_len)
{
    struct tcp_rx *rx = &qp->rx;
    ssize_t r = recv(qp->fd, rx->auth + rx->auth_got, TCP_AUTH_BYTES - rx->auth_got, 0);
    int st = rx_read_status(r, budget, why, why_len);
    if (st != TCP_RX_OK)
        return st;
    if ((rx->auth_got += (size_t)r) < TCP_AUTH_BYTES)
        return TCP_RX_OK;
    rx->auth_got = 0;
    uint8_t out[TCP_AUTH_BYTES];
    int proven = rx->auth_phase == 1; /* this message is the proof (checked below) */
    if (!proven) {
        if (rkv_nic_get32(rx->auth) != TCP_HELLO_MAGIC ||
            rkv_nic_get32(rx->auth + 4) != TCP_HELLO_VERSION) {
            rx_refused(n, qp, "not an rkv connection hello (or another version)");
            return TCP_RX_DEAD;
        }
        memcpy(rx->cnonce, rx->auth + 8, sizeof(rx->cnonce));
        rkv_nic_auth_nonce(rx->snonce);
        /* The challenge says this side's idle timeout, so that the
         * connecting side keeps the connection alive whatever its own
         * setting (a client started without it was dropped in a barrier). */
        auth_encode(out, TCP_CHAL_MAGIC, atomic_load(&n->base.idle_timeout_ms), rx->snonce);
        rx->auth_phase = 1;
    } else {
        int ok = rkv_nic_get32(rx->auth) == TCP_PROOF_MAGIC &&
                 rkv_nic_auth_check(&n->base, "rkv tcp client", rx->snonce, sizeof(rx->snonce),
                                    rx->cnonce, sizeof(rx->cnonce), rx->auth + 8);
        uint8_t mac[RKV_NIC_AUTH_MAC_BYTES];
        rkv_nic_auth_mac(&n->base, "rkv tcp server", rx->cnonce, sizeof(rx->cnonce), rx->snonce,
                         sizeof(rx->snonce), mac);
        auth_encode(out, TCP_ACK_MAGIC, ok ? 0 : 1, ok ? mac : NULL);
        if (!ok) {
            /* Told why, so that a misconfigured node says so at once. */
            ssize_t w = send(qp->fd, out, sizeof(out), MSG_DONTWAIT | MSG_NOSIGNAL);
            (void)w; /* it is being refused either way */
            rx_refused(n, qp, "wrong secret (its proof does not match)");
            return TCP_RX_DEAD;
        }
    }
    /* A fresh socket's send buffer always takes 40 bytes. */
    if (send(qp->fd, out, sizeof(out), MSG_DONTWAIT | MSG_NOSIGNAL) != sizeof(out)) {
        rkv_errf(why, why_len, 0, "cannot answer its hello: %s", strerror(errno));
        return TCP_RX_DEAD;
    }
    if (!proven)
        return TCP_RX_OK; /* the challenge went; its answer comes next */
    rx->hello_done = 1;
    rx->last_msg_ns = tcp_now_ns(n);
    tcp_lock(n);
    qp->announced = 1;
    tcp_unlock(n);
    cq_emit(n, qp, (struct rkv_wc){.opcode = RKV_WC_CONNECTED, .status = RKV_WC_SUCCESS});
    return TCP_RX_OK;
}

/* Reads the payload into its destination and, in the same call, the start
 * of the next header: one syscall per small frame instead of two. */
static int rx_read_payload(struct tcp_nic *n, struct tcp_qp *qp, size_t *budget, char *why,
                           size_t why_len)
{
    struct tcp_rx *rx = &qp->rx;
    assert(rx->hdr_got == 0);
    size_t want = rx->f.len - rx->got;
    struct iovec iov[2] = {{.iov_base = rx->dst + rx->got, .iov_len = want},
                           {.iov_base = rx->hdr, .iov_len = TCP_HDR_BYTES}};
    int iovcnt = 2;
    if (want > *budget) {
        iov[0].iov_len = *budget; /* bytes past it would belong to this payload */
        iovcnt = 1;
    }
    /* A WRITE lands only while its region is registered (mr_target): held
     * across the read, so that a dereg waits for it and frees after. */
    struct rkv_port *port = n->base.port;
    if (rx->mr_serial)
        port->ops->mutex_lock(n->mr_mu);
    const struct rkv_mr *mr = NULL;
    uint8_t *dst = NULL;
    if (rx->mr_serial && (mr_check(n, qp, &rx->f, &mr, &dst, why, why_len) < 0 ||
                          tcp_mr_of(mr)->serial != rx->mr_serial)) {
        port->ops->mutex_unlock(n->mr_mu);
        rkv_errf(why, why_len, 0,
                 "the region of its WRITE (rkey 0x%x) was deregistered, or its grant to this "
                 "connection revoked, before the payload came: a write into memory this node "
                 "gave back",
                 rx->f.rkey);
        return TCP_RX_DEAD;
    }
    ssize_t r = readv(qp->fd, iov, iovcnt);
    if (rx->mr_serial)
        port->ops->mutex_unlock(n->mr_mu);
    int st = rx_read_status(r, budget, why, why_len);
    if (st != TCP_RX_OK)
        return st;
    if ((size_t)r <= want) {
        rx->got += (size_t)r;
    } else {
        rx->got = rx->f.len;
        rx->hdr_got = (size_t)r - want;
    }
    return TCP_RX_OK;
}

/* Reads frames until the socket is drained, the budget is spent, a receive
 * is missing (RNR) or the connection must go. Each round either consumes
 * bytes from the budget or finishes a frame, so it terminates. */
static int rx_hello(struct tcp_nic *n, struct tcp_qp *qp, size_t *budget, char *why,
                    size_t why_len);

static int rx_drive(struct tcp_nic *n, struct tcp_qp *qp, char *why, size_t why_len)
{
    struct tcp_rx *rx = &qp->rx;
    size_t budget = TCP_RX_BUDGET_BYTES;
    for (;;) {
        int st;
        if (!rx->hello_done) {
            if ((st = rx_hello(n, qp, &budget, why, why_len)) != TCP_RX_OK)
                return st;
            continue;
        }
        if (rx->in_payload && rx->got == rx->f.len) {
            rx_end_frame(n, qp);
            continue;
        }
        if (rx->in_payload)
            st = budget ? rx_read_payload(n, qp, &budget, why, why_len) : TCP_RX_WAIT;
        else if (rx->hdr_got == TCP_HDR_BYTES)
            st = rx_begin_frame(n, qp, why, why_len);
        else
            st = budget ? rx_read_header(qp, &budget, why, why_len) : TCP_RX_WAIT;
        if (st != TCP_RX_OK)
            return st;
    }
}

static void qp_drive(struct tcp_nic *n, struct tcp_qp *qp)
{
    char why[192] = "";
    tcp_lock(n);
    if (qp->core.closed) {
        tcp_unlock(n);
        return;
    }
    n->rx_active = qp;
    tcp_unlock(n);
    int st = rx_drive(n, qp, why, sizeof(why));
    tcp_lock(n);
    n->rx_active = NULL;
    n->base.port->ops->cond_broadcast(n->rx_idle);
    tcp_unlock(n);
    if (st == TCP_RX_DEAD) {
        qp_break(n, qp, why[0] ? why : NULL);
        return;
    }
    int stall = st == TCP_RX_STALL;
    if (stall == qp->rx.stalled)
        return;
    /* Level-triggered epoll would report the unread bytes forever while we
     * wait for a receive, so trade EPOLLIN for EPOLLRDHUP: a peer that goes
     * away meanwhile is still noticed (ERR and HUP are always reported). */
    tcp_lock(n);
    qp->rx.stalled = stall;
    int rc = qp_epoll_update(n, qp);
    if (rc < 0)
        qp->rx.stalled = !stall;
    tcp_unlock(n);
    if (rc < 0) {
        qp_break(n, qp, "cannot change its epoll interest");
        return;
    }
    if (!stall) /* the stall's silence was ours: the idle timeout starts again */
        qp->rx.last_msg_ns = tcp_now_ns(n);
}

static void qp_on_writable(struct tcp_nic *n, struct tcp_qp *qp);

static void qp_on_event(struct tcp_nic *n, struct tcp_qp *qp, uint32_t events)
{
    if (qp->fd < 0) /* broken earlier in this batch */
        return;
    if (events & EPOLLOUT)
        qp_on_writable(n, qp);
    if (!qp->rx.stalled) {
        qp_drive(n, qp);
        return;
    }
    /* The frame held back by RNR dies with the connection, as in verbs. */
    if (events & (EPOLLERR | EPOLLHUP | EPOLLRDHUP))
        qp_break(n, qp, NULL);
}

/* ---- connections ---- */

#define TCP_CONTAINER(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* Takes over fd (nonblocking, connected) on success only. */
/* active: our connect() already exchanged the hello, so the QP is announced
 * by connect() returning it; set before the rx owner can see the fd. */
static int qp_new(struct tcp_nic *n, int fd, const struct sockaddr *sa, socklen_t sl, int active,
                  struct tcp_qp **qp_p)
{
    struct rkv_port *port = n->base.port;
    struct tcp_qp *qp = calloc(1, sizeof(*qp));
    if (!qp)
        return -RKV_ENOMEM;
    qp->src.kind = TCP_SRC_QP;
    qp->nic = n;
    qp->fd = fd;
    qp->rx.hello_done = active;
    qp->announced = active;
    qp->passive = !active;
    qp->rx.born_ns = qp->rx.last_msg_ns = qp->last_tx_ns = tcp_now_ns(n);
    rkv_nic_addr_name(sa, sl, qp->peer, sizeof(qp->peer));
    ring_init(&qp->recvs, sizeof(struct tcp_recv), TCP_RECV_MAX);
    int one = 1;
    /* Frames go out whole; Nagle would only hold back small control messages. */
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
        RKV_LOGW(port, "nic tcp: %s: cannot set TCP_NODELAY: %s", qp->peer, strerror(errno));
    int rc = port->ops->mutex_create(port, &qp->send_mu);
    if (rc < 0)
        goto undo_alloc;
    rc = tcp_epoll_set(n, EPOLL_CTL_ADD, fd, EPOLLIN, &qp->src);
    if (rc < 0)
        goto undo_mutex;
    tcp_lock(n);
    qp->next = n->qps;
    n->qps = qp;
    tcp_unlock(n);
    *qp_p = qp;
    return 0;
undo_mutex:
    port->ops->mutex_destroy(qp->send_mu);
undo_alloc:
    free(qp);
    return rc;
}

static int tcp_resolve(struct tcp_nic *n, const char *host, uint16_t port, int passive,
                       struct addrinfo **res_p)
{
    return rkv_nic_resolve(n->base.port, "nic tcp", host, port, passive, res_p);
}

/* Waits for a nonblocking connect; returns its errno (0: connected). */
static int tcp_connect_wait(struct tcp_nic *n, int fd, uint64_t deadline_ns)
{
    for (;;) {
        uint64_t now = tcp_now_ns(n);
        if (now >= deadline_ns)
            return ETIMEDOUT;
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        int r = poll(&pfd, 1, rkv_nic_ms_until(now, deadline_ns));
        if (r < 0 && errno != EINTR)
            return errno;
        if (r <= 0)
            continue;
        int err = 0;
        socklen_t len = sizeof(err);
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
            return errno;
        return err;
    }
}

/* Whether a connected socket's two ends are one address. */
static int tcp_connect_one(struct tcp_nic *n, const struct addrinfo *ai, uint64_t deadline_ns,
                           int *fd_p)
{
    char name[80];
    rkv_nic_addr_name(ai->ai_addr, ai->ai_addrlen, name, sizeof(name));
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        RKV_LOGE(n->base.port, "nic tcp: socket for %s failed: %s", name, strerror(errno));
        return -RKV_EIO;
    }
    int err = connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : errno;
    if (err == EINPROGRESS)
        err = tcp_connect_wait(n, fd, deadline_ns);
    if (err == 0 && rkv_nic_self_connected(fd)) {
        /* A port of the ephemeral range with nobody listening: the kernel
         * gave this socket that very port as its own, and it connected to
         * itself (TCP's simultaneous open). Its hello read back its own
         * ("does not speak rkv's handshake"), and the connection, then in
         * TIME_WAIT, kept the server from listening there when it
         * restarted (an outside tester). A refusal, reset so that nothing
         * lingers. */
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        err = ECONNREFUSED;
    }
    if (err == 0) {
        *fd_p = fd;
        return 0;
    }
    close(fd);
    /* Refusals are routine while a cluster boots: callers retry, so no warning. */
    if (err == ECONNREFUSED || err == ECONNRESET) {
        RKV_LOGD(n->base.port, "nic tcp: %s refused the connection", name);
        return -RKV_EPEERDEAD;
    }
    if (err == ETIMEDOUT) {
        RKV_LOGI(n->base.port, "nic tcp: connecting to %s timed out", name);
        return -RKV_ETIMEDOUT;
    }
    RKV_LOGW(n->base.port, "nic tcp: cannot connect to %s: %s", name, strerror(err));
    return -RKV_EIO;
}

/* Connecting side: reads one hello message on the bare socket. */
static int tcp_auth_read(struct tcp_nic *n, int fd, uint8_t *b, uint64_t deadline_ns)
{
    size_t got = 0;
    while (got < TCP_AUTH_BYTES) {
        uint64_t now = tcp_now_ns(n);
        if (now >= deadline_ns)
            return -RKV_ETIMEDOUT;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = poll(&pfd, 1, rkv_nic_ms_until(now, deadline_ns));
        if (r < 0 && errno != EINTR)
            return -RKV_EIO;
        if (r <= 0)
            continue;
        ssize_t k = recv(fd, b + got, TCP_AUTH_BYTES - got, 0);
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR))
            return -RKV_EPEERDEAD;
        got += k > 0 ? (size_t)k : 0;
    }
    return 0;
}

/* Connecting side: the challenge-response of the hello (layout above), on
 * the bare socket (the rx owner does not know it yet). */
static int tcp_hello(struct tcp_nic *n, int fd, const char *host, uint16_t port,
                     uint64_t deadline_ns, uint32_t *idle_ms_p)
{
    uint8_t cn[RKV_NIC_AUTH_NONCE_BYTES], sn[RKV_NIC_AUTH_NONCE_BYTES], b[TCP_AUTH_BYTES];
    uint8_t mac[RKV_NIC_AUTH_MAC_BYTES];
    rkv_nic_auth_nonce(cn);
    auth_encode(b, TCP_HELLO_MAGIC, TCP_HELLO_VERSION, cn);
    if (send(fd, b, sizeof(b), MSG_NOSIGNAL) != sizeof(b))
        return -RKV_EPEERDEAD;
    int rc = tcp_auth_read(n, fd, b, deadline_ns);
    if (rc < 0)
        return rc;
    if (rkv_nic_get32(b) != TCP_CHAL_MAGIC)
        return -RKV_EPROTO;
    *idle_ms_p = rkv_nic_get32(b + 4);
    memcpy(sn, b + 8, sizeof(sn));
    rkv_nic_auth_mac(&n->base, "rkv tcp client", sn, sizeof(sn), cn, sizeof(cn), mac);
    auth_encode(b, TCP_PROOF_MAGIC, 0, mac);
    if (send(fd, b, sizeof(b), MSG_NOSIGNAL) != sizeof(b))
        return -RKV_EPEERDEAD;
    if ((rc = tcp_auth_read(n, fd, b, deadline_ns)) < 0)
        return rc;
    if (rkv_nic_get32(b) != TCP_ACK_MAGIC)
        return -RKV_EPROTO;
    if (rkv_nic_get32(b + 4) != 0) {
        RKV_LOGE(n->base.port,
                 "nic tcp: %s:%u refused the connection: wrong secret (set the same RKV_TOKEN, "
                 "RKV_SECRET_FILE or rkv_config.secret on every node)",
                 host, port);
        return -RKV_ECONFIG;
    }
    if (!rkv_nic_auth_check(&n->base, "rkv tcp server", cn, sizeof(cn), sn, sizeof(sn), b + 8)) {
        RKV_LOGE(n->base.port,
                 "nic tcp: %s:%u does not know our secret (its answer does not prove it): not "
                 "a server of this cluster",
                 host, port);
        return -RKV_ECONFIG;
    }
    return 0;
}

static int tcp_connect(struct rkv_nic *nic, const char *host, uint16_t port, uint32_t timeout_ms,
                       struct rkv_qp **qp_p)
{
    struct tcp_nic *n = tcp_nic_of(nic);
    assert(host && qp_p);
    uint64_t deadline_ns = tcp_now_ns(n) + (uint64_t)timeout_ms * 1000000;
    struct addrinfo *res;
    int rc = tcp_resolve(n, host, port, 0, &res);
    if (rc < 0)
        return rc;
    const struct addrinfo *ai;
    int fd = -1;
    rc = -RKV_EIO;
    for (ai = res; ai; ai = ai->ai_next) {
        rc = tcp_connect_one(n, ai, deadline_ns, &fd);
        if (rc == 0 || rc == -RKV_ETIMEDOUT)
            break;
    }
    struct tcp_qp *qp = NULL;
    uint32_t idle_ms = 0; /* the accepting side's idle timeout */
    if (rc == 0 && (rc = tcp_hello(n, fd, host, port, deadline_ns, &idle_ms)) < 0)
        close(fd);
    if (rc == 0) {
        rc = qp_new(n, fd, ai->ai_addr, ai->ai_addrlen, 1, &qp);
        if (rc < 0)
            close(fd);
    }
    if (rc == 0 && idle_ms) {
        tcp_lock(n);
        qp->ka_every_ns = (uint64_t)idle_ms * 1000000 / 3;
        tcp_unlock(n);
        if (atomic_exchange(&n->keepalives, 1) == 0)
            tcp_wake(n); /* a task waiting for events without end sweeps from now on */
    }
    freeaddrinfo(res);
    if (rc < 0)
        return rc;
    RKV_LOGD(n->base.port, "nic tcp: connected to %s", qp->peer);
    *qp_p = (struct rkv_qp *)(void *)qp;
    return 0;
}

/* Why a port can be in use with no server on it: outgoing connections take
 * their source ports from the ephemeral range, so a base port inside it is
 * taken now and then by whatever connects out (a tester saw "Address
 * already in use" with nothing listening). */
static void tcp_in_use_hint(const struct sockaddr *sa, char *out, size_t out_len)
{
    unsigned port = ntohs(sa->sa_family == AF_INET6 ? ((const struct sockaddr_in6 *)sa)->sin6_port
                                                    : ((const struct sockaddr_in *)sa)->sin_port);
    unsigned lo = 0, hi = 0;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
    int in_range = f && fscanf(f, "%u %u", &lo, &hi) == 2 && port >= lo && port <= hi;
    if (f)
        fclose(f);
    char range[160] = "";
    if (in_range)
        snprintf(range, sizeof(range),
                 "; it lies in this host's ephemeral port range (%u-%u), from which outgoing "
                 "connections take their source ports: pick one outside it",
                 lo, hi);
    snprintf(out, out_len,
             " (a listener, or a connection that has it as its local port: ss -tanp 'sport = "
             ":%u' names it)%s",
             port, range);
}

static int tcp_listen_one(struct tcp_nic *n, const struct addrinfo *ai, int *fd_p)
{
    char name[80];
    rkv_nic_addr_name(ai->ai_addr, ai->ai_addrlen, name, sizeof(name));
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        RKV_LOGE(n->base.port, "nic tcp: socket for %s failed: %s", name, strerror(errno));
        return -RKV_EIO;
    }
    int one = 1;
    /* A restarted server must rebind while its old connections sit in TIME_WAIT. */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, TCP_LISTEN_BACKLOG) != 0) {
        int e = errno;
        char hint[320] = "";
        if (e == EADDRINUSE)
            tcp_in_use_hint(ai->ai_addr, hint, sizeof(hint));
        RKV_LOGE(n->base.port, "nic tcp: cannot listen at %s: %s%s", name, strerror(e), hint);
        close(fd);
        return -RKV_EIO;
    }
    *fd_p = fd;
    return 0;
}

/* IPv4 first: "localhost" often resolves to ::1 first while peers dial 127.0.0.1. */
static int tcp_listen_any(struct tcp_nic *n, const struct addrinfo *res, int *fd_p)
{
    int rc = -RKV_EIO;
    for (int pass = 0; pass < 2; pass++) {
        for (const struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            if ((ai->ai_family == AF_INET) != (pass == 0))
                continue;
            rc = tcp_listen_one(n, ai, fd_p);
            if (rc == 0)
                return 0;
        }
    }
    return rc;
}

static int tcp_local_port(struct tcp_nic *n, int fd, uint16_t *port_p)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        RKV_LOGE(n->base.port, "nic tcp: getsockname failed: %s", strerror(errno));
        return -RKV_EIO;
    }
    if (ss.ss_family == AF_INET)
        *port_p = ntohs(((const struct sockaddr_in *)&ss)->sin_port);
    else
        *port_p = ntohs(((const struct sockaddr_in6 *)&ss)->sin6_port);
    return 0;
}

static int tcp_listen(struct rkv_nic *nic, const char *host, uint16_t port)
{
    struct tcp_nic *n = tcp_nic_of(nic);
    struct tcp_listener *l = calloc(1, sizeof(*l));
    if (!l)
        return -RKV_ENOMEM;
    l->src.kind = TCP_SRC_LISTENER;
    int rc = 0;
    tcp_lock(n);
    if (n->n_listeners < TCP_LISTEN_MAX)
        n->n_listeners++;
    else
        rc = -RKV_ELIMIT;
    tcp_unlock(n);
    if (rc < 0)
        goto undo_alloc;
    struct addrinfo *res;
    rc = tcp_resolve(n, host, port, 1, &res);
    if (rc < 0)
        goto undo_count;
    rc = tcp_listen_any(n, res, &l->fd);
    freeaddrinfo(res);
    if (rc < 0)
        goto undo_count;
    rc = tcp_local_port(n, l->fd, &l->port);
    if (rc < 0)
        goto undo_socket;
    rc = tcp_epoll_set(n, EPOLL_CTL_ADD, l->fd, EPOLLIN, &l->src);
    if (rc < 0)
        goto undo_socket;
    tcp_lock(n);
    l->next = n->listeners;
    n->listeners = l;
    tcp_unlock(n);
    RKV_LOGI(n->base.port, "nic tcp: listening at %s:%u", host ? host : "*", l->port);
    return 0;
undo_socket:
    close(l->fd);
undo_count:
    tcp_lock(n);
    n->n_listeners--;
    tcp_unlock(n);
undo_alloc:
    free(l);
    return rc;
}

int rkv_nic_tcp_bound_port(struct rkv_nic *nic, uint16_t *port_p)
{
    struct tcp_nic *n = tcp_nic_of(nic);
    int rc = -RKV_EINVAL;
    uint16_t port = 0;
    tcp_lock(n);
    if (n->listeners) {
        port = n->listeners->port;
        rc = 0;
    }
    tcp_unlock(n);
    if (rc == 0)
        *port_p = port;
    return rc;
}

int rkv_nic_tcp_qp_count(struct rkv_nic *nic)
{
    struct tcp_nic *n = tcp_nic_of(nic);
    int k = 0;
    tcp_lock(n);
    for (struct tcp_qp *qp = n->qps; qp; qp = qp->next)
        k++;
    tcp_unlock(n);
    return k;
}

void rkv_nic_tcp_rounds(struct rkv_nic *nic, uint64_t *task, uint64_t *inline_)
{
    struct tcp_nic *n = tcp_nic_of(nic);
    tcp_lock(n);
    *task = n->rounds[TCP_RX_TASK];
    *inline_ = n->rounds[TCP_RX_POLLER];
    tcp_unlock(n);
}

/* The oldest accepted connection that has not proved the secret yet, or
 * NULL. Rx owner. */
static struct tcp_qp *tcp_oldest_unproven(struct tcp_nic *n)
{
    struct tcp_qp *found = NULL;
    tcp_lock(n);
    for (struct tcp_qp *qp = n->qps; qp; qp = qp->next) /* newest first */
        if (qp->passive && !qp->rx.hello_done && qp->fd >= 0 && !qp->core.closed)
            found = qp;
    tcp_unlock(n);
    return found;
}

/* accept() found no descriptor left (errno e). Connections that have not
 * authenticated go first: the oldest is dropped so that a real worker gets
 * in now rather than after the silent ones' hello timeout; returns 1 (try
 * again). With none, the reserve descriptor is given up for a moment to
 * accept the newcomer and close it at once, or the pending connection would
 * keep the listener readable and the rx owner spinning; returns 0. */
static int tcp_accept_starved(struct tcp_nic *n, struct tcp_listener *l, int e)
{
    uint64_t quiet = 0;
    struct tcp_qp *victim = tcp_oldest_unproven(n);
    int log = rkv_ratelim_ok(&n->lim_accept, tcp_now_ns(n), 1, &quiet);
    if (log)
        RKV_LOGW(n->base.port,
                 "nic tcp: out of descriptors on port %u (%s): %s (%llu such events since the "
                 "last line)",
                 l->port, strerror(e),
                 victim ? "dropping the oldest connection that has not proved the secret"
                        : "refusing the newcomer",
                 (unsigned long long)quiet);
    if (victim) {
        qp_break(n, victim, NULL);
        return 1;
    }
    if (n->reserve_fd < 0)
        return 0;
    close(n->reserve_fd);
    int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd >= 0)
        close(fd);
    n->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return 0;
}

static void tcp_on_listener(struct tcp_nic *n, struct tcp_listener *l)
{
    for (int i = 0; i < TCP_ACCEPT_BATCH; i++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = accept4(l->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            int e = errno;
            if (e == EAGAIN || e == EWOULDBLOCK || e == EINTR || e == ECONNABORTED)
                return;
            if ((e == EMFILE || e == ENFILE) && tcp_accept_starved(n, l, e))
                continue; /* a descriptor came free: accept again */
            uint64_t quiet = 0;
            if (rkv_ratelim_ok(&n->lim_accept, tcp_now_ns(n), 1, &quiet))
                RKV_LOGW(n->base.port,
                         "nic tcp: accept on port %u failed: %s (%llu such failures since the "
                         "last line)",
                         l->port, strerror(e), (unsigned long long)quiet);
            return;
        }
        struct tcp_qp *qp;
        if (qp_new(n, fd, (const struct sockaddr *)&ss, sl, 0, &qp) < 0) {
            close(fd);
            continue;
        }
        /* Announced once its hello checks out (rx_hello). */
        RKV_LOGD(n->base.port, "nic tcp: accepted %s on port %u", qp->peer, l->port);
    }
}

/* ---- posting ---- */

static int sge_check(const struct tcp_nic *n, const struct rkv_sge *sge)
{
    return rkv_nic_sge_check(&n->base, sge);
}

static void iov_advance(struct msghdr *mh, size_t bytes)
{
    while (bytes > 0) {
        assert(mh->msg_iovlen > 0);
        struct iovec *v = mh->msg_iov;
        size_t k = bytes < v->iov_len ? bytes : v->iov_len;
        v->iov_base = (uint8_t *)v->iov_base + k;
        v->iov_len -= k;
        bytes -= k;
        if (v->iov_len == 0) {
            mh->msg_iov++;
            mh->msg_iovlen--;
        }
    }
}

/* send_mu held. Returns 0 when writable (or broken: the next send says
 * which), -RKV_ETIMEDOUT at deadline_ns. */
static int qp_wait_writable(struct tcp_nic *n, struct tcp_qp *qp, uint64_t deadline_ns)
{
    for (;;) {
        uint64_t now = tcp_now_ns(n);
        if (now >= deadline_ns)
            return -RKV_ETIMEDOUT;
        struct pollfd pfd = {.fd = qp->fd, .events = POLLOUT};
        int r = poll(&pfd, 1, rkv_nic_ms_until(now, deadline_ns));
        if (r > 0)
            return 0;
        if (r < 0 && errno != EINTR)
            return -RKV_EIO;
    }
}

static size_t iov_bytes(const struct msghdr *mh)
{
    size_t b = 0;
    for (size_t i = 0; i < mh->msg_iovlen; i++)
        b += mh->msg_iov[i].iov_len;
    return b;
}

/* send_mu held. Room in the queues for more unsent bytes. */
static int pend_room(struct tcp_nic *n, const struct tcp_qp *qp, size_t more)
{
    return qp->pend_len - qp->pend_off + more <= TCP_PEND_QP_MAX &&
           atomic_load(&n->pend_total) + more <= TCP_PEND_NIC_MAX;
}

/* send_mu held, pend_room checked. Copies what mh still holds to the end
 * of the queue (the caller may reuse its buffer once the post returns). */
static int pend_append(struct tcp_nic *n, struct tcp_qp *qp, const struct msghdr *mh)
{
    size_t more = iov_bytes(mh), used = qp->pend_len - qp->pend_off;
    /* What went out is not kept, once the end has no room: moving what is
     * left down at every append moved up to the whole bound (64 MiB) for
     * each frame a slow peer's queue took. */
    if (qp->pend_off && qp->pend_cap - qp->pend_len < more) {
        memmove(qp->pend, qp->pend + qp->pend_off, used);
        qp->pend_off = 0;
        qp->pend_len = used;
    }
    if (qp->pend_len + more > qp->pend_cap) { /* pend_off is 0 here, or it fits */
        size_t cap = qp->pend_cap ? qp->pend_cap : 64u << 10;
        while (cap < qp->pend_len + more)
            cap *= 2;
        uint8_t *b = realloc(qp->pend, cap);
        if (!b)
            return -RKV_ENOMEM;
        qp->pend = b;
        qp->pend_cap = cap;
    }
    for (size_t i = 0; i < mh->msg_iovlen; i++) {
        memcpy(qp->pend + qp->pend_len, mh->msg_iov[i].iov_base, mh->msg_iov[i].iov_len);
        qp->pend_len += mh->msg_iov[i].iov_len;
    }
    /* A task or poller waiting for events without end sweeps from now on
     * (tcp_sweep looks for queues nobody reads). */
    if (atomic_fetch_add(&n->pend_total, more) == 0)
        tcp_wake(n);
    return 0;
}

/* send_mu held. Asks the rx owner to write the queue when the socket is
 * writable (on), or to stop asking (off: the queue is empty, or the poster
 * writes it itself). */
static int pend_arm(struct tcp_nic *n, struct tcp_qp *qp, int on)
{
    int rc = 0;
    tcp_lock(n);
    if (qp->out_armed != on && qp->fd >= 0) {
        qp->out_armed = on;
        if ((rc = qp_epoll_update(n, qp)) < 0)
            qp->out_armed = !on;
    }
    tcp_unlock(n);
    return rc;
}

/* send_mu held. Writes what the socket takes of the queue, without
 * waiting. 0 (bytes may remain), or -1 with why set: the connection is
 * unusable. */
static int pend_flush(struct tcp_nic *n, struct tcp_qp *qp, char *why, size_t why_len)
{
    while (qp->pend_off < qp->pend_len) {
        ssize_t w = send(qp->fd, qp->pend + qp->pend_off, qp->pend_len - qp->pend_off,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0) {
            qp->pend_off += (size_t)w;
            atomic_fetch_sub(&n->pend_total, (size_t)w);
            qp->pend_moved_ns = tcp_now_ns(n);
            atomic_store(&qp->pend_still_ns, qp->pend_moved_ns);
            continue;
        }
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return 0;
        snprintf(why, why_len, "%s", w < 0 ? strerror(errno) : "the socket took nothing");
        return -1;
    }
    qp->pend_off = qp->pend_len = 0;
    atomic_store(&qp->pend_still_ns, 0);
    if (qp->pend_cap > TCP_PEND_KEEP) {
        free(qp->pend);
        qp->pend = NULL;
        qp->pend_cap = 0;
    }
    return 0;
}

static int pend_empty(const struct tcp_qp *qp)
{
    return qp->pend_off == qp->pend_len;
}

/* send_mu held. The connection cannot carry another frame: the rx owner
 * sees the shutdown and reports DISCONNECTED. */
static int qp_send_failed(struct tcp_nic *n, struct tcp_qp *qp, const char *why)
{
    qp->send_dead = 1;
    shutdown(qp->fd, SHUT_RDWR);
    RKV_LOGW(n->base.port, "nic tcp: sending to %s failed: %s", qp->peer, why);
    return -RKV_EPEERDEAD;
}

/* How long a post waits, blocked, on a peer that takes no byte. */
static uint64_t tcp_send_wait_ns(const struct tcp_nic *n)
{
    uint32_t ms = atomic_load(&n->base.send_wait_ms);
    if (!ms || ms > n->send_timeout_ms)
        ms = n->send_timeout_ms;
    return (uint64_t)ms * 1000000;
}

/* When a post waiting for its peer gives it up: once the peer took no
 * byte for the send wait since last_ns, or fewer bytes since the post
 * began (taken) than TCP_SEND_NS_PER_BYTE allows past a send wait of
 * grace. why gets which. */
struct tcp_send_wait {
    uint64_t start_ns, last_ns, taken, wait_ns;
};

static uint64_t send_deadline(const struct tcp_send_wait *w)
{
    uint64_t idle = w->last_ns + w->wait_ns;
    uint64_t slow = w->start_ns + w->wait_ns + w->taken * TCP_SEND_NS_PER_BYTE;
    return idle < slow ? idle : slow;
}

static void send_gave_up(const struct tcp_send_wait *w, uint64_t now, size_t queued, char *why,
                         size_t why_len)
{
    if (now >= w->last_ns + w->wait_ns)
        snprintf(why, why_len, "the peer read nothing for %llu ms, %zu bytes waiting",
                 (unsigned long long)(w->wait_ns / 1000000), queued);
    else
        snprintf(why, why_len, "the peer read %llu bytes in %llu ms (slower than 5 MB/s)",
                 (unsigned long long)w->taken, (unsigned long long)((now - w->start_ns) / 1000000));
}

/* send_mu held, the rx owner told to leave the queue alone. Writes the
 * queue while the peer reads (send_deadline) until it is empty or, with
 * room > 0, has room for that many more bytes. 0, or -1 with why set. */
static int pend_drain(struct tcp_nic *n, struct tcp_qp *qp, struct tcp_send_wait *sw, size_t room,
                      char *why, size_t why_len)
{
    while (!pend_empty(qp) && !(room && pend_room(n, qp, room))) {
        sw->last_ns = qp->pend_moved_ns;
        int rc = qp_wait_writable(n, qp, send_deadline(sw));
        size_t before = qp->pend_len - qp->pend_off;
        if (rc == -RKV_ETIMEDOUT) {
            send_gave_up(sw, tcp_now_ns(n), before, why, why_len);
            return -1;
        }
        if (rc < 0) {
            snprintf(why, why_len, "poll failed");
            return -1;
        }
        if (pend_flush(n, qp, why, why_len) < 0)
            return -1;
        sw->taken += before - (qp->pend_len - qp->pend_off);
    }
    return 0;
}

/* send_mu held. Writes the whole frame, queues what the socket does not
 * take within TCP_SEND_STALL_NS (room permitting), or gives the connection
 * up: a frame cut short would desynchronise the stream for good. Where
 * there is no room, it waits while the peer takes bytes, and gives the
 * peer up at send_deadline (nothing taken for the send wait, or too
 * slowly past it):
 * the wait used to run to TCP_SEND_TIMEOUT_MS from the post, whatever
 * the peer did, so that a peer that asked for replies past its queue's
 * bound and read none held a server's engine, and every other client's
 * requests, for 30 s, while a large frame to a slow reader that kept
 * reading failed after 30 s. */
static int qp_send_frame(struct tcp_nic *n, struct tcp_qp *qp, const struct tcp_frame *f,
                         void *payload)
{
    uint8_t hdr[TCP_HDR_BYTES];
    frame_encode(f, hdr);
    struct iovec iov[2] = {{.iov_base = hdr, .iov_len = sizeof(hdr)},
                           {.iov_base = payload, .iov_len = f->len}};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = f->len ? 2 : 1};
    uint64_t start_ns = tcp_now_ns(n), timeout_ns = (uint64_t)n->send_timeout_ms * 1000000;
    struct tcp_send_wait sw = {.start_ns = start_ns, .wait_ns = tcp_send_wait_ns(n)};
    char why[112] = "";
    if (!pend_empty(qp)) {
        /* Frames keep their order: this one goes behind the queue. */
        if (pend_flush(n, qp, why, sizeof(why)) < 0)
            return qp_send_failed(n, qp, why);
        if (pend_empty(qp) && pend_arm(n, qp, 0) < 0)
            return qp_send_failed(n, qp, "cannot change its epoll interest");
        /* pend_moved_ns may be after start_ns: the flush just now moved it. */
        if (!pend_empty(qp) && start_ns > qp->pend_moved_ns &&
            start_ns - qp->pend_moved_ns >= timeout_ns) {
            snprintf(why, sizeof(why), "the peer read nothing for %u ms", n->send_timeout_ms);
            return qp_send_failed(n, qp, why);
        }
        if (!pend_empty(qp) && pend_room(n, qp, iov_bytes(&mh)) && pend_append(n, qp, &mh) == 0) {
            qp->last_tx_ns = start_ns;
            return 0;
        }
        /* No room: write the queue here (the rx owner is told to leave it
         * alone meanwhile) until it has room for this frame, while the peer
         * reads (send_deadline), then queue the frame behind it. A queue
         * that has not moved for the send wait is given up at once. */
        if (!pend_empty(qp)) {
            size_t more = iov_bytes(&mh);
            if (pend_arm(n, qp, 0) < 0)
                return qp_send_failed(n, qp, "cannot change its epoll interest");
            if (pend_drain(n, qp, &sw, more, why, sizeof(why)) < 0)
                return qp_send_failed(n, qp, why);
            if (!pend_empty(qp) && pend_append(n, qp, &mh) == 0) {
                if (pend_arm(n, qp, 1) < 0)
                    return qp_send_failed(n, qp, "cannot change its epoll interest");
                qp->last_tx_ns = start_ns;
                return 0;
            }
            /* No memory for it: the queue goes first, then the frame. */
            if (pend_drain(n, qp, &sw, 0, why, sizeof(why)) < 0)
                return qp_send_failed(n, qp, why);
        }
    }
    /* The socket last took bytes of this frame then: now, not the post's
     * start, after a drain that may have taken longer than the send wait. */
    uint64_t moved_ns = tcp_now_ns(n);
    while (mh.msg_iovlen > 0) {
        ssize_t w = sendmsg(qp->fd, &mh, MSG_NOSIGNAL); /* no SIGPIPE from a dead peer */
        if (w >= 0) {
            if (w > 0)
                moved_ns = tcp_now_ns(n);
            sw.taken += (uint64_t)w;
            iov_advance(&mh, (size_t)w);
            continue;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return qp_send_failed(n, qp, strerror(errno));
        uint64_t now = tcp_now_ns(n);
        int room = pend_room(n, qp, iov_bytes(&mh));
        uint64_t queue_at = start_ns + TCP_SEND_STALL_NS + sw.taken * TCP_SEND_DIRECT_NS_PER_BYTE;
        if (moved_ns + TCP_SEND_STALL_NS < queue_at)
            queue_at = moved_ns + TCP_SEND_STALL_NS;
        if (room && now >= queue_at) {
            if (pend_append(n, qp, &mh) == 0) {
                qp->pend_moved_ns = now;
                atomic_store(&qp->pend_still_ns, now);
                if (pend_arm(n, qp, 1) < 0)
                    return qp_send_failed(n, qp, "cannot change its epoll interest");
                break;
            }
            room = 0; /* no memory for it: wait, as without a queue */
        }
        sw.last_ns = moved_ns;
        uint64_t deadline_ns = send_deadline(&sw);
        uint64_t until = room && queue_at < deadline_ns ? queue_at : deadline_ns;
        int rc = qp_wait_writable(n, qp, until);
        if (rc == -RKV_ETIMEDOUT && until == deadline_ns) {
            send_gave_up(&sw, tcp_now_ns(n), iov_bytes(&mh), why, sizeof(why));
            return qp_send_failed(n, qp, why);
        }
        if (rc < 0 && rc != -RKV_ETIMEDOUT)
            return qp_send_failed(n, qp, "poll failed");
    }
    qp->last_tx_ns = start_ns;
    return 0;
}

/* Rx owner: the socket of a QP with queued bytes is writable. Never waits
 * for send_mu (its holder may be waiting for this reader): a busy lock
 * means a poster, which writes the queue itself. */
static void qp_on_writable(struct tcp_nic *n, struct tcp_qp *qp)
{
    const struct rkv_port_ops *po = n->base.port->ops;
    if (!po->mutex_trylock(qp->send_mu))
        return;
    char why[96] = "";
    if (!qp->send_dead && qp->fd >= 0 && pend_flush(n, qp, why, sizeof(why)) < 0)
        (void)qp_send_failed(n, qp, why);
    /* Dead, or nothing left to write: level-triggered, EPOLLOUT would
     * report the writable socket again and again. */
    if ((qp->send_dead || pend_empty(qp)) && pend_arm(n, qp, 0) < 0 && !qp->send_dead)
        (void)qp_send_failed(n, qp, "cannot change its epoll interest");
    po->mutex_unlock(qp->send_mu);
}

static int qp_post(struct tcp_qp *qp, uint64_t wr_id, const struct rkv_sge *sge,
                   struct tcp_frame *f, int opcode, int signaled)
{
    struct tcp_nic *n = qp->nic;
    struct rkv_port *port = n->base.port;
    int rc = sge_check(n, sge);
    if (rc < 0)
        return rc;
    f->len = sge->len;
    if (signaled) {
        tcp_lock(n);
        rc = cq_reserve(n, 0);
        tcp_unlock(n);
        if (rc < 0)
            return rc;
    }
    port->ops->mutex_lock(qp->send_mu);
    rc = qp->send_dead ? -RKV_EPEERDEAD : qp_send_frame(n, qp, f, sge->addr);
    if (signaled) {
        /* Still under send_mu, so completions keep the posting order. */
        struct rkv_wc wc = {
            .wr_id = wr_id, .opcode = opcode, .status = RKV_WC_SUCCESS, .byte_len = sge->len};
        tcp_lock(n);
        if (rc == 0 && !qp->core.closed)
            cq_push(n, qp, &wc);
        else
            rkv_nic_cq_unreserve(&n->cq);
        tcp_unlock(n);
    }
    port->ops->mutex_unlock(qp->send_mu);
    return rc;
}

static int tcp_post_send(struct rkv_qp *qpv, uint64_t wr_id, const struct rkv_sge *sge,
                         int signaled)
{
    struct tcp_frame f = {.kind = TCP_KIND_SEND};
    return qp_post(tcp_qp_of(qpv), wr_id, sge, &f, RKV_WC_SEND, signaled);
}

/* The remote side of a write is not checked here: only the target can. */
static int tcp_post_write(struct rkv_qp *qpv, uint64_t wr_id, const struct rkv_sge *sge,
                          uint64_t remote_addr, uint32_t rkey, int with_imm, uint32_t imm,
                          int signaled)
{
    struct tcp_frame f = {.kind = with_imm ? TCP_KIND_WRITE_IMM : TCP_KIND_WRITE,
                          .imm = imm,
                          .remote_addr = remote_addr,
                          .rkey = rkey};
    return qp_post(tcp_qp_of(qpv), wr_id, sge, &f, RKV_WC_WRITE, signaled);
}

static int tcp_post_recv(struct rkv_qp *qpv, uint64_t wr_id, const struct rkv_sge *sge)
{
    struct tcp_qp *qp = tcp_qp_of(qpv);
    struct tcp_nic *n = qp->nic;
    int rc = sge_check(n, sge);
    if (rc < 0)
        return rc;
    struct tcp_recv r = {.wr_id = wr_id, .addr = sge->addr, .len = sge->len};
    int kick = 0;
    tcp_lock(n);
    if (qp->core.closed || qp->disconnected)
        rc = -RKV_EPEERDEAD;
    else
        rc = ring_reserve(&qp->recvs, qp->recvs.len + 1);
    if (rc == 0) {
        ring_push(&qp->recvs, &r);
        kick = qp->rnr;
        qp->rnr = 0;
    }
    tcp_unlock(n);
    if (kick)
        tcp_wake(n);
    return rc;
}

/* ---- closing a QP ---- */

static void tcp_qp_close(struct rkv_qp *qpv)
{
    struct tcp_qp *qp = tcp_qp_of(qpv);
    struct tcp_nic *n = qp->nic;
    tcp_lock(n);
    assert(!qp->core.closed);
    qp->core.closed = 1;
    /* The peer sees EOF now; the rx owner closes the descriptor when it
     * reaps the QP (only it may, see the lock comment at the top). */
    if (qp->fd >= 0)
        shutdown(qp->fd, SHUT_RDWR);
    while (n->rx_active == qp)
        n->base.port->ops->cond_wait(n->rx_idle, n->mu, UINT64_MAX);
    tcp_unlock(n);
    tcp_wake(n);
}

/* ---- the rx owner: progress task or poller ---- */

/* Takes closed QPs off epoll and the list; frees those no CQ entry names. */
static void tcp_reap(struct tcp_nic *n)
{
    struct tcp_qp *dead = NULL;
    tcp_lock(n);
    for (struct tcp_qp **pp = &n->qps; *pp;) {
        struct tcp_qp *qp = *pp;
        if (!qp->core.closed) {
            pp = &qp->next;
            continue;
        }
        *pp = qp->next;
        qp->next = dead;
        dead = qp;
    }
    tcp_unlock(n);
    while (dead) {
        struct tcp_qp *qp = dead;
        dead = qp->next;
        qp_break(n, qp, NULL);
        tcp_lock(n);
        /* With no entry left, poll() can no longer reach it: free it here. */
        int idle = rkv_nic_qp_reap(&qp->core);
        tcp_unlock(n);
        if (idle)
            qp_free(n, qp);
    }
}

static void tcp_resume_stalled(struct tcp_nic *n)
{
    tcp_lock(n);
    struct tcp_qp *qp = n->qps;
    tcp_unlock(n);
    /* Only this task unlinks QPs and others only push at the head, so the
     * chain from this snapshot stays intact without the lock. */
    for (; qp; qp = qp->next)
        if (qp->rx.stalled && qp->fd >= 0)
            qp_drive(n, qp);
}

static void tcp_on_event(struct tcp_nic *n, const struct epoll_event *ev, int *woken_p)
{
    struct tcp_src *src = ev->data.ptr;
    switch (src->kind) {
    case TCP_SRC_WAKE: {
        uint64_t v;
        ssize_t r = read(n->wakefd, &v, sizeof(v)); /* resets the counter */
        (void)r;
        *woken_p = 1;
        break;
    }
    case TCP_SRC_LISTENER:
        tcp_on_listener(n, TCP_CONTAINER(src, struct tcp_listener, src));
        break;
    case TCP_SRC_QP:
        qp_on_event(n, TCP_CONTAINER(src, struct tcp_qp, src), ev->events);
        break;
    }
}

/* The CQ has room for whatever one more readiness event can complete
 * (frames of at least a header each, from one budget), so a poller that
 * reads need never wait for room. */
static int tcp_cq_roomy(struct tcp_nic *n)
{
    tcp_lock(n);
    int roomy = rkv_nic_cq_used(&n->cq) <= TCP_CQ_MAX / 2;
    tcp_unlock(n);
    static_assert(TCP_RX_BUDGET_BYTES / TCP_HDR_BYTES + 1 < TCP_CQ_MAX / 2, "CQ too small");
    return roomy;
}

/* Rx owner: a KEEPALIVE frame on a connection of ours that sent nothing
 * for a third of the accepting side's idle timeout (its hello's challenge
 * says it). A client waits for a reply, or in a barrier for the slowest
 * worker, in silence, and that timeout dropped it in mid-call. Never
 * waits: the reader may not wait behind a send blocked on a peer that
 * waits for it to read, so a busy send lock or unsent bytes (the
 * connection is not idle then) put it off to the next sweep. */
static void tcp_keepalive(struct tcp_nic *n, struct tcp_qp *qp, uint64_t now, uint64_t every_ns)
{
    const struct rkv_port_ops *po = n->base.port->ops;
    if (!po->mutex_trylock(qp->send_mu))
        return;
    int unsent = 0;
    /* last_tx_ns may be after now: a send that began since the sweep read
     * the clock. */
    if (!qp->send_dead && qp->fd >= 0 && pend_empty(qp) && now > qp->last_tx_ns &&
        now - qp->last_tx_ns >= every_ns && ioctl(qp->fd, SIOCOUTQ, &unsent) == 0 && unsent == 0) {
        uint8_t hdr[TCP_HDR_BYTES];
        frame_encode(&(struct tcp_frame){.kind = TCP_KIND_KEEPALIVE}, hdr);
        /* An empty send queue takes a header whole. */
        ssize_t w = send(qp->fd, hdr, sizeof(hdr), MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w == (ssize_t)sizeof(hdr)) {
            qp->last_tx_ns = now;
        } else if (w > 0) { /* the stream is out of step for good */
            qp->send_dead = 1;
            shutdown(qp->fd, SHUT_RDWR);
            RKV_LOGW(n->base.port, "nic tcp: a keepalive to %s went out cut short", qp->peer);
        } /* else the send fails the same way next time, and says so there */
    }
    po->mutex_unlock(qp->send_mu);
}

/* Rx owner: breaks accepted connections that did not prove the secret
 * within the hello timeout, or completed no frame within the idle timeout,
 * and keeps the connections this node made alive (tcp_keepalive).
 * Returns 1 when it broke any (they are reaped at the end of the round). */
static int tcp_sweep(struct tcp_nic *n)
{
    const struct rkv_nic *b = &n->base;
    uint64_t now = tcp_now_ns(n);
    if (now < n->next_sweep_ns || (!b->hello_timeout_ms && !b->idle_timeout_ms &&
                                   !atomic_load(&n->keepalives) && !atomic_load(&n->pend_total)))
        return 0;
    n->next_sweep_ns = now + TCP_SWEEP_NS;
    uint64_t hello_ns = (uint64_t)b->hello_timeout_ms * 1000000,
             idle_ns = (uint64_t)b->idle_timeout_ms * 1000000, wait_ns = tcp_send_wait_ns(n);
    if (atomic_load(&n->keepalives)) {
        /* Only this reader takes QPs off the list, so one stays in it while
         * the lock is given up (others are only added, at its head). */
        tcp_lock(n);
        for (struct tcp_qp *qp = n->qps;; qp = qp->next) {
            while (qp && (!qp->ka_every_ns || qp->core.closed))
                qp = qp->next;
            uint64_t every_ns = qp ? qp->ka_every_ns : 0;
            tcp_unlock(n);
            if (!qp)
                break;
            tcp_keepalive(n, qp, now, every_ns);
            tcp_lock(n);
        }
    }
    int broke = 0;
    for (;;) {
        struct tcp_qp *late[TCP_SWEEP_BATCH];
        int still_q[TCP_SWEEP_BATCH]; /* late for its queue, not a timeout */
        int n_late = 0, n_broke = 0;
        tcp_lock(n);
        for (struct tcp_qp *qp = n->qps; qp && n_late < TCP_SWEEP_BATCH; qp = qp->next) {
            if (qp->fd < 0 || qp->core.closed)
                continue;
            /* A queue of unsent bytes that did not move for the send wait,
             * any QP: the wait a blocked post gives its peer (qp_send_frame),
             * here for a queue nobody posts behind, which held its memory
             * (up to TCP_PEND_QP_MAX) for as long as the peer stayed. */
            uint64_t still = atomic_load(&qp->pend_still_ns);
            if (still && now > still && now - still >= wait_ns) {
                still_q[n_late] = 1;
                late[n_late++] = qp;
                continue;
            }
            if (!qp->passive)
                continue;
            const struct tcp_rx *rx = &qp->rx;
            /* A connection stalled for want of a receive (RNR) is not read:
             * its silence is this node's, not the peer's. */
            if ((!rx->hello_done && hello_ns && now - rx->born_ns > hello_ns) ||
                (rx->hello_done && !rx->stalled && idle_ns && now - rx->last_msg_ns > idle_ns)) {
                still_q[n_late] = 0;
                late[n_late++] = qp;
            }
        }
        tcp_unlock(n);
        for (int i = 0; i < n_late; i++) {
            struct tcp_qp *qp = late[i];
            /* A still queue may be this node's doing, not the peer's: the
             * EPOLLOUT that would have written it not handled yet (a full
             * batch, a full CQ, this process stopped). Written here first;
             * a queue the socket takes bytes of is not given up. One a
             * poster holds is the poster's to give up (send_deadline). */
            if (still_q[i]) {
                const struct rkv_port_ops *po = b->port->ops;
                if (!po->mutex_trylock(qp->send_mu))
                    continue;
                char why[96] = "";
                int dead = qp->send_dead || qp->fd < 0;
                if (!dead && pend_flush(n, qp, why, sizeof(why)) < 0)
                    dead = 1;
                uint64_t still = atomic_load(&qp->pend_still_ns);
                po->mutex_unlock(qp->send_mu);
                if (!dead && (!still || tcp_now_ns(n) - still < wait_ns))
                    continue; /* it moved, or drained */
            }
            uint64_t quiet = 0;
            if (!rkv_ratelim_ok(&n->lim_timeout, now, RKV_RATELIM_BURST, &quiet))
                RKV_LOGD(b->port, "nic tcp: dropping %s", qp->peer);
            else if (still_q[i])
                RKV_LOGW(b->port,
                         "nic tcp: dropping %s: its socket took none of the bytes queued for it "
                         "within %llu ms (%llu such lines suppressed)",
                         qp->peer, (unsigned long long)(wait_ns / 1000000),
                         (unsigned long long)quiet);
            else
                RKV_LOGW(b->port,
                         "nic tcp: dropping %s: %s within %u ms (%llu such lines suppressed)",
                         qp->peer, qp->rx.hello_done ? "no message" : "no authenticated hello",
                         qp->rx.hello_done ? b->idle_timeout_ms : b->hello_timeout_ms,
                         (unsigned long long)quiet);
            qp_break(n, qp, NULL);
            n_broke++;
        }
        broke |= n_broke > 0;
        /* A full batch may hide more; one that broke nothing (queues that
         * moved, or that posters hold) would be found again as it was. */
        if (n_late < TCP_SWEEP_BATCH || n_broke == 0)
            return broke;
    }
}

/* One round of the rx owner: a batch of readiness events, waiting up to
 * timeout_ms (-1: until one comes). Returns 1 once the NIC is stopping. */
static int tcp_rx_round(struct tcp_nic *n, int timeout_ms)
{
    struct epoll_event evs[TCP_EPOLL_BATCH];
    int k = epoll_wait(n->epfd, evs, TCP_EPOLL_BATCH, timeout_ms);
    if (RKV_NEVER(k < 0 && errno != EINTR)) {
        RKV_LOGE(n->base.port, "nic tcp: epoll_wait failed, the NIC stops: %s", strerror(errno));
        tcp_lock(n);
        n->stopping = 1;
        n->base.port->ops->cond_broadcast(n->cq_nonempty);
        tcp_unlock(n);
        return 1;
    }
    int woken = 0, poller = n->rx_owner == TCP_RX_POLLER; /* ours to read without mu */
    /* Events left unhandled are reported again: epoll is level-triggered. */
    for (int i = 0; i < k && (!poller || tcp_cq_roomy(n)); i++)
        tcp_on_event(n, &evs[i], &woken);
    woken |= tcp_sweep(n);
    if (!woken)
        return 0;
    tcp_lock(n);
    int stopping = n->stopping;
    tcp_unlock(n);
    if (stopping)
        return 1;
    /* QPs are reaped between batches, so no event still in hand names a freed one. */
    tcp_reap(n);
    tcp_resume_stalled(n);
    return 0;
}

/* The progress task's turn to read: when nobody polls and the last poller
 * left more than the poll gap ago. -1 once stopping. */
static int tcp_task_turn(struct tcp_nic *n)
{
    RKV_ASSERT_HELD(n->base.port, n->mu);
    const struct rkv_port_ops *po = n->base.port->ops;
    for (;;) {
        if (n->stopping)
            return -1;
        /* A tick of the parked task, so the gap is not much shorter. */
        uint64_t gap = atomic_load(&n->base.poll_gap_ns), wait = gap;
        if (n->rx_owner == TCP_RX_NOBODY && n->pollers == 0) {
            uint64_t away = tcp_now_ns(n) - n->poller_left_ns;
            if (away >= gap) {
                n->rx_owner = TCP_RX_TASK;
                n->rounds[TCP_RX_TASK]++;
                return 0;
            }
            wait = gap - away;
        }
        po->cond_wait(n->rx_turn, n->mu, wait);
    }
}

static void tcp_progress(void *arg)
{
    struct tcp_nic *n = arg;
    tcp_lock(n);
    while (tcp_task_turn(n) == 0) {
        n->task_asked = 0;
        /* A listening NIC wakes up now and then to drop accepted
         * connections past their hello or idle timeout, one whose
         * connections need keepalives to send them, and one with bytes
         * queued to see whether their peers read them (tcp_sweep). */
        int wait_ms = n->listeners || atomic_load(&n->keepalives) || atomic_load(&n->pend_total)
                          ? (int)(TCP_SWEEP_NS / 1000000)
                          : -1;
        tcp_unlock(n);
        int stop = tcp_rx_round(n, wait_ms);
        tcp_lock(n);
        n->rx_owner = TCP_RX_NOBODY;
        if (n->pollers) /* they wait for the CQ or for their turn to read */
            n->base.port->ops->cond_broadcast(n->cq_nonempty);
        if (stop)
            break;
    }
    tcp_unlock(n);
}

/* ---- completions ---- */

/* The CQ empty: reads one round inline if nobody else reads, or waits for
 * a completion (or for the reader to stand aside) until the deadline. The
 * progress task, reading, is asked once to stand aside. */
static void tcp_poll_wait(struct tcp_nic *n, uint64_t deadline_ns, int *asked)
{
    RKV_ASSERT_HELD(n->base.port, n->mu);
    assert(n->pollers > 0); /* the caller counts itself (tcp_poll) */
    const struct rkv_port_ops *po = n->base.port->ops;
    uint64_t now = tcp_now_ns(n);
    if (n->rx_owner == TCP_RX_NOBODY) {
        n->rx_owner = TCP_RX_POLLER;
        n->rounds[TCP_RX_POLLER]++;
        tcp_unlock(n);
        uint64_t left_ms = now < deadline_ns ? (deadline_ns - now + 999999) / 1000000 : 0;
        /* A long wait (a barrier) keeps sweeping, as the task does. */
        if ((atomic_load(&n->keepalives) || atomic_load(&n->pend_total)) &&
            left_ms > TCP_SWEEP_NS / 1000000)
            left_ms = TCP_SWEEP_NS / 1000000;
        tcp_rx_round(n, left_ms > INT_MAX ? INT_MAX : (int)left_ms);
        tcp_lock(n);
        n->rx_owner = TCP_RX_NOBODY;
        if (n->pollers > 1) /* another poller may be waiting for its turn */
            po->cond_broadcast(n->cq_nonempty);
        return;
    }
    if (n->rx_owner == TCP_RX_TASK && !*asked && !n->task_asked) {
        *asked = n->task_asked = 1;
        tcp_wake(n); /* its batch ends, and it stands aside for us */
    }
    if (now >= deadline_ns)
        return;
    po->cond_wait(n->cq_nonempty, n->mu, deadline_ns - now);
}

static int tcp_poll(struct rkv_nic *nic, struct rkv_wc *wc, int max, uint32_t timeout_ms)
{
    struct tcp_nic *n = tcp_nic_of(nic);
    assert(wc && max > 0);
    uint64_t deadline_ns = tcp_now_ns(n) + (uint64_t)timeout_ms * 1000000;
    int got, asked = 0, rounds = 0;
    tcp_lock(n);
    n->pollers++;
    for (;;) {
        got = cq_take(n, wc, max);
        if (got > 0 || n->stopping || n->poll_woken)
            break;
        /* One inline round even with no time to wait: a busy poller reads. */
        int late = tcp_now_ns(n) >= deadline_ns;
        if (late && rounds)
            break;
        rounds += n->rx_owner == TCP_RX_NOBODY;
        tcp_poll_wait(n, deadline_ns, &asked);
        if (late && n->rx_owner != TCP_RX_NOBODY) /* asked it; the next poll reads */
            break;
    }
    n->pollers--;
    n->poll_woken = 0;
    n->poller_left_ns = tcp_now_ns(n);
    tcp_unlock(n);
    return got;
}

/* A poller waits on cq_nonempty, or reads inline in epoll_wait (the
 * eventfd ends that). */
static void tcp_poll_wake(struct rkv_nic *nic)
{
    struct tcp_nic *n = tcp_nic_of(nic);
    tcp_lock(n);
    n->poll_woken = 1;
    n->base.port->ops->cond_broadcast(n->cq_nonempty);
    tcp_unlock(n);
    tcp_wake(n);
}

/* ---- open and close ---- */

static int tcp_open(struct rkv_port *port, const char *dev, struct rkv_nic **nic_p)
{
    (void)dev; /* sockets need no device; the address is chosen by listen/connect */
    assert(port && nic_p);
    const struct rkv_port_ops *po = port->ops;
    struct tcp_nic *n = calloc(1, sizeof(*n));
    if (!n)
        return -RKV_ENOMEM;
    int rc = rkv_nic_base_init(&n->base, &rkv_nic_tcp_ops, port);
    if (rc < 0) {
        free(n);
        return rc;
    }
    n->base.max_msg_bytes = TCP_MAX_FRAME_BYTES;
    n->wake_src.kind = TCP_SRC_WAKE;
    n->send_timeout_ms = TCP_SEND_TIMEOUT_MS;
    rkv_nic_cq_init(&n->cq, TCP_CQ_MAX, qp_free_last, n);
    /* From the OS, not the port's generator: that one is seeded by the
     * configuration's seed and the node's name, so a peer that knew both
     * (the defaults) drew the same rkeys as a server (outside tester). */
    uint8_t rnd[RKV_NIC_AUTH_NONCE_BYTES];
    rkv_nic_auth_nonce(rnd);
    uint64_t seed;
    memcpy(&seed, rnd, sizeof(seed));
    memcpy(&n->rkey_secret, rnd + sizeof(seed), sizeof(n->rkey_secret));
    rkv_rng_seed(&n->rng, seed, TCP_MAGIC);
    n->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    rc = po->mutex_create(port, &n->mu);
    if (rc < 0)
        goto undo_alloc;
    rc = po->cond_create(port, &n->cq_nonempty);
    if (rc < 0)
        goto undo_mu;
    rc = po->cond_create(port, &n->cq_space);
    if (rc < 0)
        goto undo_cq_nonempty;
    rc = po->cond_create(port, &n->rx_idle);
    if (rc < 0)
        goto undo_cq_space;
    rc = po->cond_create(port, &n->rx_turn);
    if (rc < 0)
        goto undo_rx_idle;
    rc = po->mutex_create(port, &n->mr_mu);
    if (rc < 0)
        goto undo_rx_turn;
    rc = -RKV_EIO;
    /* Out of descriptors is a limit the caller can raise (ulimit -n): said
     * as one, where "I/O error" left the reason to the log. */
    n->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (n->epfd < 0) {
        int e = errno; /* before the log line, which may change it */
        RKV_LOGE(port, "nic tcp: epoll_create1 failed: %s", strerror(e));
        rc = e == EMFILE || e == ENFILE ? -RKV_ELIMIT : -RKV_EIO;
        goto undo_mr_mu;
    }
    n->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (n->wakefd < 0) {
        int e = errno;
        RKV_LOGE(port, "nic tcp: eventfd failed: %s", strerror(e));
        rc = e == EMFILE || e == ENFILE ? -RKV_ELIMIT : -RKV_EIO;
        goto undo_epoll;
    }
    rc = tcp_epoll_set(n, EPOLL_CTL_ADD, n->wakefd, EPOLLIN, &n->wake_src);
    if (rc < 0)
        goto undo_eventfd;
    rc = po->task_start(port, "nic-tcp", tcp_progress, n, &n->task);
    if (rc < 0)
        goto undo_eventfd;
    *nic_p = &n->base;
    return 0;
undo_eventfd:
    close(n->wakefd);
undo_epoll:
    close(n->epfd);
undo_mr_mu:
    po->mutex_destroy(n->mr_mu);
undo_rx_turn:
    po->cond_destroy(n->rx_turn);
undo_rx_idle:
    po->cond_destroy(n->rx_idle);
undo_cq_space:
    po->cond_destroy(n->cq_space);
undo_cq_nonempty:
    po->cond_destroy(n->cq_nonempty);
undo_mu:
    po->mutex_destroy(n->mu);
undo_alloc:
    if (n->reserve_fd >= 0)
        close(n->reserve_fd);
    free(n);
    return rc;
}

/* After the progress task stopped: nothing else touches the NIC any more. */
static void tcp_free_all(struct tcp_nic *n)
{
    /* Entries first: reaped QPs whose last reference they are go with them. */
    rkv_nic_cq_destroy(&n->cq);
    while (n->qps) {
        struct tcp_qp *qp = n->qps;
        n->qps = qp->next;
        if (qp->fd >= 0)
            close(qp->fd);
        qp->fd = -1;
        qp_free(n, qp);
    }
    while (n->listeners) {
        struct tcp_listener *l = n->listeners;
        n->listeners = l->next;
        /* Shut, not only closed: a child forked since holds a copy of the
         * descriptor (until it execs), which kept the port listening and
         * taken, its backlog filling with clients that then timed out (an
         * outside tester). A forked child's destroy closes no NIC. */
        shutdown(l->fd, SHUT_RDWR);
        close(l->fd);
        free(l);
    }
    /* Regions the user did not deregister die with the NIC; their handles too. */
    for (uint32_t i = 0; i < n->mr_cap; i++)
        if (n->mrs[i])
            free(tcp_mr_of(n->mrs[i]));
    free(n->mrs);
}

static void tcp_close(struct rkv_nic *nic)
{
    if (!nic)
        return;
    struct tcp_nic *n = tcp_nic_of(nic);
    struct rkv_port *port = n->base.port;
    const struct rkv_port_ops *po = port->ops;
    tcp_lock(n);
    n->stopping = 1;
    po->cond_broadcast(n->cq_space);
    po->cond_broadcast(n->cq_nonempty);
    po->cond_broadcast(n->rx_turn);
    tcp_unlock(n);
    tcp_wake(n);
    po->task_join(port, n->task);
    tcp_free_all(n);
    close(n->wakefd);
    if (n->reserve_fd >= 0)
        close(n->reserve_fd);
    close(n->epfd);
    po->mutex_destroy(n->mr_mu);
    po->cond_destroy(n->rx_turn);
    po->cond_destroy(n->rx_idle);
    po->cond_destroy(n->cq_space);
    po->cond_destroy(n->cq_nonempty);
    po->mutex_destroy(n->mu);
    free(n);
}

static int tcp_local_addr(struct rkv_nic *nic, const char *peer, uint16_t port, char *buf,
                          size_t len)
{
    return rkv_nic_route_src(nic->port, "nic tcp", peer, port, buf, len);
}

const struct rkv_nic_ops rkv_nic_tcp_ops = {
    .local_addr = tcp_local_addr,
    .copies_at_post = 1, /* qp_send_frame returns once the kernel has the bytes */
    .name = "tcp",
    .open = tcp_open,
    .listen = tcp_listen,
    .connect = tcp_connect,
    .reg_mr = tcp_reg_mr,
    .dereg_mr = tcp_dereg_mr,
    .mr_grant = tcp_mr_grant,
    .mr_revoke = tcp_mr_revoke,
    .post_send = tcp_post_send,
    .post_recv = tcp_post_recv,
    .post_write = tcp_post_write,
    .poll = tcp_poll,
    .qp_close = tcp_qp_close,
    .close = tcp_close,
    .poll_wake = tcp_poll_wake,
};
