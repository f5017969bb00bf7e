/* The NIC core: what every backend needs beside its transport, written once
 * (as Redis's ae.c sits above ae_epoll.c and ae_kqueue.c). The backends
 * (nic_tcp.c, nic_verbs.c, sim/nic_sim.c) keep only how bytes move.
 *
 *  - The soft completion queue: a bounded FIFO of struct rkv_wc that poll()
 *    hands out, with slots that a post can reserve before it sends, so
 *    that a completion for bytes already sent is never lost.
 *  - The QP lifetime that queue implies (nic.h: once qp_close returns, no
 *    completion not yet polled names the QP). A QP is freed once (a) the
 *    user closed it, (b) the transport reaped it (no event of its own can
 *    name it any more) and (c) no queued completion refers to it. Taking
 *    from the queue drops the entries of closed QPs; whichever of the
 *    reaper and the taker sees the last of (b) and (c) frees it.
 *  - The bounds checks: a local buffer lies inside a region of this NIC; a
 *    remote write lies inside a region registered for it. Written so that
 *    nothing overflows whatever a peer sent.
 *  - Address naming for log lines ("host:port", "[v6]:port"), and the
 *    little-endian codec of the backends' wire formats.
 *
 * Locking: the core has no lock of its own. Every function that touches a
 * queue or a QP's lifetime fields runs under the one lock the backend
 * guards its queue with (the sim backend needs none: SimGrid actors are
 * cooperative). */
#ifndef RKV_NIC_CORE_H
#define RKV_NIC_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "nic/nic.h"

/* Every backend's QP struct starts with this (and so with rkv_qp_base). */
struct rkv_nic_qp {
    struct rkv_qp_base base; /* first: rkv_qp_ctx() casts to it */
    int closed;              /* qp_close was called: its entries are dropped */
    int reaped;              /* the transport can name it no more */
    uint32_t cq_refs;        /* queued completions naming it */
};

/* Frees a QP whose last reference is gone (the backend's own free). */
typedef void (*rkv_nic_qp_free_fn)(void *owner, struct rkv_nic_qp *qp);

struct rkv_nic_cq {
    struct rkv_wc *buf;
    uint32_t cap, head, len;
    uint32_t max;      /* entries, queued and reserved together */
    uint32_t reserved; /* slots promised to posts in flight */
    rkv_nic_qp_free_fn free_qp;
    void *owner; /* free_qp's first argument: the backend's NIC */
};

void rkv_nic_cq_init(struct rkv_nic_cq *cq, uint32_t max, rkv_nic_qp_free_fn free_qp, void *owner);
/* Drops every entry (freeing reaped QPs whose last one it was) and the
 * buffer: at NIC close, once nothing else touches the NIC. */
void rkv_nic_cq_destroy(struct rkv_nic_cq *cq);
/* Entries queued plus slots reserved. */
static inline uint32_t rkv_nic_cq_used(const struct rkv_nic_cq *cq)
{
    return cq->len + cq->reserved;
}
/* Promises one slot: -RKV_ELIMIT when the queue is at max, -RKV_ENOMEM. */
int rkv_nic_cq_reserve(struct rkv_nic_cq *cq);
void rkv_nic_cq_unreserve(struct rkv_nic_cq *cq);
/* Fills a reserved slot with wc for qp (not closed); wc->qp is set here. */
void rkv_nic_cq_push(struct rkv_nic_cq *cq, struct rkv_nic_qp *qp, struct rkv_wc *wc);
/* Reserve and push in one (a completion nobody reserved for). A closed QP
 * completes nothing: returns 0 without queueing. */
int rkv_nic_cq_emit(struct rkv_nic_cq *cq, struct rkv_nic_qp *qp, struct rkv_wc wc);
/* Copies out up to max entries, dropping those of closed QPs. *popped_p
 * (may be NULL): entries taken off, the dropped ones included. */
int rkv_nic_cq_take(struct rkv_nic_cq *cq, struct rkv_wc *wc, int max, uint32_t *popped_p);
/* The transport will never name qp again: returns 1 when no entry refers
 * to it either, and the caller frees it now (else the taker does). */
int rkv_nic_qp_reap(struct rkv_nic_qp *qp);

/* A local buffer: NULL sge -RKV_EINVAL; longer than nic->max_msg_bytes
 * -RKV_ELIMIT; empty is fine (no region needed); else it must lie inside
 * sge->mr, which this NIC registered (mr->nic), else -RKV_EINVAL. */
int rkv_nic_sge_check(const struct rkv_nic *nic, const struct rkv_sge *sge);
/* 1 when [addr, addr + len) lies inside [base, base + region_len). */
int rkv_nic_range_ok(uint64_t base, uint64_t region_len, uint64_t addr, uint64_t len);
/* Where a WRITE of len bytes at addr under rkey lands in mr (the region
 * the backend found for rkey, or NULL), checked against its access and
 * bounds; -RKV_EACCESS with why filled when it may not. */
int rkv_nic_write_target(const struct rkv_mr *mr, uint32_t rkey, uint64_t addr, uint32_t len,
                         uint8_t **dst_p, char *why, size_t why_len);

/* Little-endian integers in wire bytes at any alignment, whatever the
 * host's order (the backends' frames and handshakes). */
static inline void rkv_nic_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void rkv_nic_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline void rkv_nic_put64(uint8_t *p, uint64_t v)
{
    rkv_nic_put32(p, (uint32_t)v);
    rkv_nic_put32(p + 4, (uint32_t)(v >> 32));
}
static inline uint16_t rkv_nic_get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}
static inline uint32_t rkv_nic_get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}
static inline uint64_t rkv_nic_get64(const uint8_t *p)
{
    return rkv_nic_get32(p) | (uint64_t)rkv_nic_get32(p + 4) << 32;
}

/* "host:port" or "[v6host]:port" of a socket address, "?" when unknown. */
void rkv_nic_addr_name(const struct sockaddr *sa, socklen_t sl, char *buf, size_t len);
/* Whether connected socket fd is connected to itself: a connect to a port
 * of the ephemeral range that nobody listens on may be given that very
 * port as its own (TCP's simultaneous open), and then reads back what it
 * writes. */
int rkv_nic_self_connected(int fd);
/* Whole milliseconds from now_ns until deadline_ns, rounded up, for poll(). */
int rkv_nic_ms_until(uint64_t now_ns, uint64_t deadline_ns);

#endif
