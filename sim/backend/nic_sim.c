/* The simulated NIC: the verbs semantics of nic.h over SimGrid comms.
 *
 * Every post is one SimGrid transfer of the message's size from the
 * poster's host to the target's, into the target NIC's mailbox. A NIC actor
 * per node is the mailbox's permanent receiver, so bytes move without the
 * target's CPU (as RDMA does) and concurrent transfers share links as the
 * network model says, instead of queueing behind one rendezvous.
 *
 * Verbs semantics kept here, at the target:
 *  - per-QP order: every message carries its QP's sequence number; a message
 *    that the network delivered early (a small one overtaking a large one)
 *    waits until its predecessors arrived, so a WRITE_WITH_IMM completes
 *    only after the data posted before it;
 *  - RNR: a SEND or WRITE_WITH_IMM that finds no posted receive is held,
 *    with everything behind it on that QP, until post_recv (infinite retry);
 *  - a WRITE outside a region registered for remote write fails the sender's
 *    work request with REM_ACCESS_ERR and breaks the connection; the target
 *    keeps serving its other QPs.
 * Seeded jitter delays each delivery by a random fraction of the message's
 * own network time (order per QP kept), so that the deterministic simulator
 * explores other interleavings under other seeds.
 *
 * SimGrid actors are cooperative: code between two simcalls runs alone,
 * which is what protects the NIC state (no mutex: see sim_cv in sim_int.h). */
#include <assert.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <simgrid/actor.h>
#include <simgrid/comm.h>
#include <simgrid/engine.h>
#include <simgrid/host.h>
#include <simgrid/mailbox.h>

#include "nic/nic_core.h"
#include "sim/backend/heap.h"
#include "sim/backend/ktimer.h"
#include "sim/backend/sim.h"
#include "sim/backend/route_fifo.h"
#include "sim/backend/sim_int.h"
#include "util/util.h"

#define SN_WIRE_HDR 32 /* bytes of transport header every message pays */
/* Messages up to this size are charged latency + size / route bandwidth
 * without taking a share of any link (below 1 % of a 100 Gb/s link's
 * capacity at one per microsecond): the max-min system then holds only the
 * data transfers, which is what keeps a 4,096-node run tractable. Above it
 * and up to w->mid_max_bytes, see sn_mid_due. */
#define SN_SMALL_BYTES 1024
#define SN_NO_QP UINT32_MAX
/* Completions waiting for poll(): far more than any run queues. */
#define SN_CQ_MAX (1u << 30)

enum sn_kind {
    SN_CONNECT = 1,
    SN_ACCEPT,
    SN_REJECT,
    SN_SEND,
    SN_WRITE,
    SN_WRITE_IMM,
    SN_DISCONNECT,
    SN_NAK,       /* target -> sender: the write with wr_id was rejected */
    SN_POLL_WAKE, /* not a message: a poll's deadline on the timer's heap (sn_poll_arm) */
    SN_CV_WAKE,   /* not a message: the node's earliest timed cond wait ends (sn_cv_arm) */
};

static const char *const sn_kind_names[] = {
    "?",         "connect",    "accept", "reject", "send", "write",
    "write_imm", "disconnect", "nak",    "poll",   "cv",
};

struct sn_msg {
    uint8_t kind;
    uint8_t signaled;
    uint32_t src_nic, dst_nic, src_qp, dst_qp;
    uint64_t seq;
    uint64_t wr_id;
    uint64_t raddr;
    uint32_t rkey, imm, len;
    uint16_t port; /* CONNECT: the listening port */
    uint64_t wire;
    double t_post, t_due;
    struct sim_heap_node hn; /* on its unit's heap: t_due, then arrival order */
    uint8_t timed;           /* small message on its way: arrives at t_due */
    /* A transfer: its poster's ring (index in the source NIC's out[], or
     * SN_NO_SLOT) and its sequence number there, so that the receiver can
     * mark it delivered (sn_put_delivered). */
    uint8_t out_slot;
    uint8_t pooled; /* SN_POOL_DATA bytes of data room, from the world's pool */
    uint64_t out_seq;
    struct sn_msg *next;
    uint8_t data[];
};

/* Messages with at most this much data come from a pool per world, last
 * freed first: they are most of a run's messages (headers, acks, credits,
 * thin rows), and malloc's free lists over a heap of gigabytes cost more
 * than the message. The pool keeps at most SN_POOL_MAX spare. */
#define SN_POOL_DATA 256u
#define SN_POOL_MAX 65536u

enum sn_state { SN_CONNECTING = 1, SN_UP, SN_REFUSED, SN_DOWN };

struct sn_recv {
    uint64_t wr_id;
    uint8_t *addr;
    uint32_t len;
};

struct sn_qp {
    struct rkv_nic_qp core; /* first: the core's lifetime fields, rkv_qp_ctx() */
    struct sim_nic *nic;
    uint32_t id;
    uint32_t peer_nic, peer_qp;
    int state;
    uint64_t tx_seq, rx_next;
    double last_due;
    struct sn_msg *reorder;          /* arrived early, sorted by seq */
    struct sn_msg *held, *held_tail; /* in order, waiting for a receive */
    /* Flags (0 or 1), bytes: a QP per connection side, thousands per
     * process in the twin (152 bytes instead of 168, a smaller malloc bin). */
    uint8_t draining;    /* a post_recv is delivering held messages */
    uint8_t bad_token;   /* refused for a wrong connection token */
    uint8_t srq;         /* its receives come from the NIC's shared pool */
    uint8_t srq_waiting; /* in the NIC's queue of QPs waiting for a buffer */
    /* The route to the peer's host, looked up with the first timed message
     * (SimGrid computes a route on every lookup). */
    uint8_t route_known;
    double route_lat, route_bw;
    struct sn_qp *srq_next;
    struct sn_recv *recvs; /* FIFO ring */
    uint32_t r_head, r_len, r_cap;
};

/* One put in flight, until its poster releases it. */
struct sn_put_rec {
    sg_comm_t comm;
    uint64_t seq; /* increasing along the ring: the receiver finds it by seq */
    uint8_t done; /* the target NIC received it: a wait returns at once */
};

/* The puts one task has in flight, oldest first. */
struct sn_out {
    aid_t poster;
    struct sn_put_rec *ring;
    uint32_t head, len, cap;
    uint32_t sweep_at; /* length at which the whole ring is swept */
    uint64_t next_seq;
};

#define SN_NO_SLOT 0xff
#define SN_SWEEP_MIN 64

#define SN_MAX_POSTERS 8

/* Where messages for a NIC arrive: a mailbox whose permanent receiver is
 * the unit's receiver actor, and a heap of deliveries by due time (small
 * messages, jitter) that its timer makes at their time. A NIC has its
 * own unit when a delivery costs CPU (msg_cost_ns, recv_byte_ns, measured
 * CPU): that work runs on the receiver's actor, as a node's own progress
 * thread would run it, and holds up only that node's later messages, and
 * its timer is an actor too (a delivery may charge CPU). Where delivery is
 * free (the scale runs), the NICs of one machine share a unit, and one
 * wake-up delivers what falls due at one instant for all of them: its
 * timer is a callback at a date (sim_at_set), run by maestro (no actor, no context
 * switch, no semaphore, no max-min sleep per wake-up), and its receiver
 * actor is made when the first message too large to be timed comes (none
 * in payload-less runs). Messages name their NIC. */
struct sim_nic_rx {
    struct sim_world *w;
    char mbox_name[32];
    sg_mailbox_t mbox;
    sg_host_t host;
    struct sim_cv delay_cv;
    struct sim_qheap due; /* messages waiting for their due time */
    /* The due time the timer sleeps until (INFINITY: until woken; -1: it
     * is running). A message due later needs no wake-up: the timer takes
     * it when it wakes for an earlier one. */
    double timer_until;
    int on_ktimer;         /* a shared unit: the timer is ktimer, not an actor */
    struct sim_at *ktimer; /* the callback set for timer_until (NULL: none) */
    int receiving;         /* its receiver actor: 0 none, 1 being made, 2 receiving */
    aid_t maker;           /* who makes it (receiving 1) */
    uint64_t order;
    uint32_t refs;     /* NICs on it, and the world when prepared */
    int prepared;      /* made by sim_nic_rx_prepare, before the run */
    int32_t shared_at; /* index in the world's shared units, -1: a NIC's own */
};

struct sim_nic {
    struct rkv_nic base;
    struct sim_world *w;
    uint32_t id, machine, tid;
    char node[32];
    struct sim_nic_rx *rx;
    sg_host_t host;
    char addr[32]; /* the node's address: its machine's name (sim_port_addr) */
    struct sim_cv cq_cv, conn_cv;
    /* The core's soft CQ. QPs live as long as the world, so none is ever
     * reaped: entries of closed ones are only dropped. */
    struct rkv_nic_cq cq;
    struct sn_qp **qps;
    uint32_t n_qps, qp_cap;
    struct rkv_mr **mrs;
    uint32_t n_mrs, mr_cap;
    struct rkv_rng rng;
    int closed;
    uint64_t token; /* the secret's hash, as on tcp and verbs: a CONNECT must carry it */
    /* Puts in flight, reaped by the poster. Not detached: SimGrid 3.32 pays
     * O(detached comms in flight) per completion, which made the per-event
     * cost grow with the cluster. A task waits for its own puts before it
     * ends, since an ending actor's comms are cancelled. */
    struct sn_out out[SN_MAX_POSTERS];
    uint32_t n_out;
    /* The deadline for which a wake-up of the pollers sits on the timer's
     * heap (INFINITY: none; sn_poll_arm). */
    double poll_armed_at;
    int poll_woken; /* poll_wake: the next poll or cq_wait returns at once */
    /* The node's timed condition waits (port_sim.c), woken at their
     * deadline by this NIC's timer actor (sn_cv_arm). */
    struct sim_timer cv_timer;
    /* The shared receive pool (srq_setup): srq_count buffers of
     * srq_buf_bytes at srq_mem, the free ones' indices on a stack (the
     * last one reposted is taken first: a node with few messages in flight
     * touches a few buffers of its pool, still in cache, and the rest of
     * its pages never become resident; a verbs SRQ takes them in posting
     * order, which no user may rely on), and the QPs holding a message
     * for want of one, in the order they began to wait (srq_repost serves
     * them first). */
    uint8_t *srq_mem;
    uint32_t srq_count, srq_buf_bytes;
    uint8_t srq_tag;
    uint32_t *srq_free;
    uint32_t srq_len;
    struct sn_qp *srq_wait_head, *srq_wait_tail;
    int srq_serving; /* a repost is delivering to waiting QPs */
    /* Set by cq_doorbell: completions signal it instead of cq_cv. */
    struct rkv_cond *doorbell;
};

static struct sim_nic *sn_of(struct rkv_nic *nic)
{
    return (struct sim_nic *)nic;
}

static struct sn_qp *sn_qp_of(struct rkv_qp *qp)
{
    return (struct sn_qp *)qp;
}

static int sn_grow(void **arr, uint32_t *cap, size_t elem, uint32_t need)
{
    if (need <= *cap)
        return 0;
    uint32_t nc = *cap ? *cap * 2 : 16;
    while (nc < need)
        nc *= 2;
    void *p = realloc(*arr, (size_t)nc * elem);
    if (!p)
        return -RKV_ENOMEM;
    *arr = p;
    *cap = nc;
    return 0;
}

/* ---- completion queue ---- */

static void sn_srq_push(struct sim_nic *n, uint32_t i);

static void sn_cq_push(struct sim_nic *n, struct sn_qp *qp, struct rkv_wc wc)
{
    if (n->closed)
        return;
    /* A receive into a pool buffer completing on a QP closed meanwhile (a
     * copy in that ran CPU time let its owner close it): nobody will learn
     * of it, so nobody would repost the buffer; it goes back now, as
     * sn_srq_reclaim does for the ones already queued at the close. */
    if (qp->core.closed && qp->srq && (wc.opcode == RKV_WC_RECV || wc.opcode == RKV_WC_RECV_IMM)) {
        sn_srq_push(n, (uint32_t)(wc.wr_id >> 8));
        return;
    }
    if (rkv_nic_cq_emit(&n->cq, &qp->core, wc) < 0)
        abort(); /* the twin cannot model a NIC that loses completions */
    if (n->doorbell)
        sim_port_cond_ring(n->doorbell);
    else
        sim_cv_broadcast(&n->cq_cv);
}

/* ---- messages out ---- */

static struct sn_msg *sn_msg_new(struct sim_world *w, uint8_t kind, uint32_t len)
{
    struct sn_msg *m = NULL;
    if (len <= SN_POOL_DATA && w->msg_pool) {
        m = w->msg_pool;
        w->msg_pool = m->next;
        w->msg_pool_len--;
        memset(m, 0, sizeof(*m)); /* the data is the caller's to fill */
        m->pooled = 1;
    } else if (len <= SN_POOL_DATA) {
        if ((m = calloc(1, sizeof(*m) + SN_POOL_DATA)))
            m->pooled = 1;
    } else {
        m = calloc(1, sizeof(*m) + len);
    }
    if (m) {
        m->kind = kind;
        m->len = len;
        m->out_slot = SN_NO_SLOT;
    }
    return m;
}

static void sn_msg_free(struct sim_world *w, struct sn_msg *m)
{
    if (m->pooled && w->msg_pool_len < SN_POOL_MAX) {
        m->next = w->msg_pool;
        w->msg_pool = m;
        w->msg_pool_len++;
        return;
    }
    free(m);
}

/* The world's end (its last unit is freed). */
static void sn_msg_pool_fini(struct sim_world *w)
{
    while (w->msg_pool) {
        struct sn_msg *m = w->msg_pool;
        w->msg_pool = m->next;
        free(m);
    }
    w->msg_pool_len = 0;
}

static struct sn_out *sn_out_of(struct sim_nic *n, aid_t me)
{
    for (uint32_t i = 0; i < n->n_out; i++)
        if (n->out[i].poster == me)
            return &n->out[i];
    if (n->n_out == SN_MAX_POSTERS)
        return NULL;
    n->out[n->n_out] = (struct sn_out){.poster = me, .sweep_at = SN_SWEEP_MIN};
    return &n->out[n->n_out++];
}

static int sn_out_push(struct sn_out *o, sg_comm_t c, uint64_t seq)
{
    if (o->len == o->cap) {
        uint32_t nc = o->cap ? o->cap * 2 : 64;
        struct sn_put_rec *r = malloc((size_t)nc * sizeof(*r));
        if (!r)
            return -RKV_ENOMEM;
        for (uint32_t i = 0; i < o->len; i++)
            r[i] = o->ring[(o->head + i) % o->cap];
        free(o->ring);
        o->ring = r;
        o->cap = nc;
        o->head = 0;
    }
    assert(!o->len || seq > o->ring[(o->head + o->len - 1) % o->cap].seq);
    o->ring[(o->head + o->len++) % o->cap] = (struct sn_put_rec){.comm = c, .seq = seq};
    return 0;
}

static struct sn_put_rec *sn_out_at(struct sn_out *o, uint32_t i)
{
    return &o->ring[(o->head + i) % o->cap];
}

/* The target NIC received m: its poster may release the comm with a wait
 * that returns at once. Finds the put by its seq (the ring is sorted); one
 * no longer there (released by a sweep) is left alone. */
static void sn_put_delivered(struct sim_world *w, const struct sn_msg *m)
{
    if (m->out_slot == SN_NO_SLOT)
        return;
    struct sim_nic *src = w->nics[m->src_nic];
    assert(m->out_slot < src->n_out);
    struct sn_out *o = &src->out[m->out_slot];
    uint32_t lo = 0, hi = o->len;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (sn_out_at(o, mid)->seq < m->out_seq)
            lo = mid + 1;
        else
            hi = mid;
    }
    /* Not over a 2: a sweep's test released that comm while this receiver
     * waited to run, and a 1 would have the sweep wait on it again. */
    if (lo < o->len && sn_out_at(o, lo)->seq == m->out_seq && !sn_out_at(o, lo)->done)
        sn_out_at(o, lo)->done = 1;
}

/* Releases this task's delivered puts, oldest first.
 *
 * Why a wait and not sg_comm_test: in SimGrid 3.32 a test that finds a
 * comm finished does not take it off its poster's activity list (only a
 * wait does), so every put a task ever posted stayed on that list, and
 * every exec of the task (a handler's CPU time) walked it to remove
 * itself: the cost of an event grew with the messages already sent, and
 * the comms were never freed. */
static void sn_reap(struct sn_out *o)
{
    while (o->len && o->ring[o->head].done) {
        sg_comm_t c = o->ring[o->head].comm;
        o->head = (o->head + 1) % o->cap;
        o->len--;
        sg_comm_wait(c);
    }
    if (o->len < o->sweep_at)
        return;
    /* A long transfer at the head holds delivered ones behind it; a put
     * to a node that crashed is never received (then a test releases it,
     * leaving it on the list: rare). Tests first, with the ring intact
     * (they are simcalls: receivers may mark it meanwhile). */
    for (uint32_t i = 0; i < o->len; i++) {
        struct sn_put_rec *r = sn_out_at(o, i);
        if (!r->done && sg_comm_test(r->comm))
            r->done = 2; /* finished and released by the test */
    }
    sg_comm_t *wait = malloc((size_t)o->len * sizeof(*wait));
    uint32_t keep = 0, n_wait = 0;
    for (uint32_t i = 0; i < o->len; i++) {
        struct sn_put_rec r = *sn_out_at(o, i);
        if (r.done == 1 && wait)
            wait[n_wait++] = r.comm;
        else if (!r.done || r.done == 1) /* no memory to list it: keep it */
            *sn_out_at(o, keep++) = r;
    }
    o->len = keep;
    o->sweep_at = 2 * keep > SN_SWEEP_MIN ? 2 * keep : SN_SWEEP_MIN;
    for (uint32_t i = 0; i < n_wait; i++)
        sg_comm_wait(wait[i]);
    free(wait);
}

/* Waits for every put the calling task posted on this NIC. */
void sim_nic_drain(struct sim_nic *n)
{
    struct sn_out *o = sn_out_of(n, sg_actor_self_get_pid());
    sim_cpu_settle(n->w);
    while (o && o->len) {
        sg_comm_t c = o->ring[o->head].comm;
        o->head = (o->head + 1) % o->cap;
        o->len--;
        sg_comm_wait(c);
        sim_cpu_mark(n->w);
    }
}

static struct sn_qp *sn_qp_get(struct sim_nic *n, uint32_t id)
{
    return id < n->n_qps ? n->qps[id] : NULL;
}

static void sn_timed_push(struct sim_nic *n, struct sn_msg *m);
static void sn_rx_receiver(struct sim_nic_rx *rx, struct rkv_port *port);

/* A mid-size message (above SN_SMALL_BYTES, up to w->mid_max_bytes) from
 * machine src to machine dst, posted now, taking s seconds on the route's
 * bottleneck and lat of latency: when it arrives. Each machine's link
 * sends one such message at a time, in post order, and receives them no
 * faster than its rate: k messages into one machine at once arrive at
 * lat + s, lat + 2 s, ... lat + k s, the last one when max-min would end
 * them all (first in, first out instead of fair shares). Why not max-min:
 * a 4 KiB row is 1 to 8 packets, which a NIC sends whole rather than
 * interleaved, and every max-min flow start and end re-solves the flows
 * that share links with it, which made the cost of an event grow with the
 * cluster (sim/README.md, "Mid-size messages"). These messages take no
 * share from max-min flows on the same links, nor they from them. Returns
 * a negative number when the tables cannot grow (then max-min carries it). */
static double sn_mid_due(struct sim_world *w, uint32_t src, uint32_t dst, double now, double lat,
                         double s)
{
    uint32_t need = (src > dst ? src : dst) + 1;
    if (need > w->mid_cap) {
        uint32_t nc = w->mid_cap ? w->mid_cap : 64;
        while (nc < need)
            nc *= 2;
        double *tx = realloc(w->mid_tx_free, (size_t)nc * sizeof(*tx));
        if (!tx)
            return -1;
        w->mid_tx_free = tx;
        double *rx = realloc(w->mid_rx_free, (size_t)nc * sizeof(*rx));
        if (!rx)
            return -1;
        w->mid_rx_free = rx;
        for (uint32_t i = w->mid_cap; i < nc; i++)
            tx[i] = rx[i] = 0;
        w->mid_cap = nc;
    }
    double start = now > w->mid_tx_free[src] ? now : w->mid_tx_free[src];
    w->mid_tx_free[src] = start + s;
    double due = start + s + lat;
    if (due < w->mid_rx_free[dst] + s)
        due = w->mid_rx_free[dst] + s;
    w->mid_rx_free[dst] = due;
    return due;
}

/* Hands m to the network; the target NIC owns it from here (it may be
 * gone when this returns). Returns the body bytes the network is charged. */
static uint64_t sn_put(struct sim_nic *n, struct sn_msg *m)
{
    struct sim_world *w = n->w;
    assert(m->dst_nic < w->n_nics);
    struct sim_nic *dst = w->nics[m->dst_nic];
    m->src_nic = n->id;
    m->t_post = simgrid_get_clock();
    uint64_t body = w->sizer && m->len ? w->sizer(w->sizer_user, m->data, m->len) : m->len;
    m->wire = SN_WIRE_HDR + body;
    w->bytes_modelled += m->wire;
    int mid = m->wire > SN_SMALL_BYTES && m->wire <= w->mid_max_bytes && dst->host != n->host;
    if (m->wire <= SN_SMALL_BYTES || mid) {
        struct sn_qp *qp = m->src_qp != SN_NO_QP ? sn_qp_get(n, m->src_qp) : NULL;
        if (qp && qp->peer_nic != m->dst_nic)
            qp = NULL;
        if (qp && !qp->route_known) {
            qp->route_lat = sg_host_get_route_latency(n->host, dst->host);
            qp->route_bw = sg_host_get_route_bandwidth(n->host, dst->host);
            qp->route_known = 1;
        }
        double lat = qp ? qp->route_lat : sg_host_get_route_latency(n->host, dst->host);
        double bw = qp ? qp->route_bw : sg_host_get_route_bandwidth(n->host, dst->host);
        double s = bw > 0 ? (double)m->wire / bw : 0;
        if (!mid)
            m->t_due = m->t_post + lat + s;
        else if (!w->mid_route)
            m->t_due = sn_mid_due(w, n->machine, dst->machine, m->t_post, lat, s);
        else if (w->route_fifo || (w->route_fifo = sim_route_fifo_new()) != NULL)
            m->t_due = sim_route_fifo_due(w->route_fifo, n->host, dst->host, n->machine,
                                          dst->machine, m->t_post, (double)m->wire);
        else
            m->t_due = -1;
        if (m->t_due >= 0) {
            m->timed = 1;
            sn_timed_push(dst, m);
            return body;
        }
    }
    struct sn_out *o = sn_out_of(n, sg_actor_self_get_pid());
    if (o) {
        sn_reap(o);
        m->out_slot = (uint8_t)(o - n->out);
        m->out_seq = o->next_seq++;
    }
    /* A transfer starts when posted only into a mailbox that has its
     * receiver: one posted while another poster makes it would wait for
     * the receiver's first get, and then for each in turn. */
    if (!dst->rx->receiving)
        sn_rx_receiver(dst->rx, NULL);
    while (dst->rx->receiving == 1) {
        if (!sg_actor_by_pid(dst->rx->maker)) { /* killed half-way: make it anew */
            sn_rx_receiver(dst->rx, NULL);
            break;
        }
        sg_actor_yield();
    }
    /* m belongs to the target from here: the poster's ring keeps the seq. */
    uint64_t seq = m->out_seq;
    w->comms_posted++; /* before the simcall: a waiter may look meanwhile */
    sg_comm_t c = sg_mailbox_put_async(dst->rx->mbox, m, (long)m->wire);
    if (!o || sn_out_push(o, c, seq) < 0)
        sg_comm_wait(c); /* cannot track it: finish it now */
    return body;
}

static void sn_put_ctl(struct sim_nic *n, uint8_t kind, uint32_t dst_nic, uint32_t src_qp,
                       uint32_t dst_qp, uint64_t seq, uint64_t wr_id)
{
    struct sn_msg *m = sn_msg_new(n->w, kind, 0);
    if (!m)
        return;
    m->dst_nic = dst_nic;
    m->src_qp = src_qp;
    m->dst_qp = dst_qp;
    m->seq = seq;
    m->wr_id = wr_id;
    sn_put(n, m);
}

/* ---- QPs ---- */

static struct sn_qp *sn_qp_new(struct sim_nic *n)
{
    if (sn_grow((void **)&n->qps, &n->qp_cap, sizeof(*n->qps), n->n_qps + 1) < 0)
        return NULL;
    struct sn_qp *qp = calloc(1, sizeof(*qp));
    if (!qp)
        return NULL;
    qp->nic = n;
    qp->id = n->n_qps;
    qp->srq = n->srq_mem != NULL;
    n->qps[n->n_qps++] = qp;
    return qp;
}

static void sn_free_list(struct sim_world *w, struct sn_msg *m)
{
    while (m) {
        struct sn_msg *next = m->next;
        sn_msg_free(w, m);
        m = next;
    }
}

/* The connection is gone: tell the user once (unless it closed the QP). */
static void sn_qp_down(struct sim_nic *n, struct sn_qp *qp)
{
    if (qp->state == SN_DOWN)
        return;
    if (qp->state == SN_CONNECTING) {
        /* Reset during the handshake (the target accepted, then crashed and
         * its ACCEPT was lost with it): the connect fails now, as on a real
         * network, instead of waiting out its whole timeout (rkv swarm,
         * seed 13176: 30 s, and the other workers' barrier failed). */
        qp->state = SN_REFUSED;
        sim_cv_broadcast(&n->conn_cv);
        return;
    }
    int was_up = qp->state == SN_UP;
    qp->state = SN_DOWN;
    sn_free_list(n->w, qp->held);
    qp->held = qp->held_tail = NULL;
    if (was_up)
        sn_cq_push(n, qp, (struct rkv_wc){.opcode = RKV_WC_DISCONNECTED});
}

/* ---- delivery at the target ---- */

static void sn_sender_done(struct sim_world *w, const struct sn_msg *m, int opcode, int status)
{
    /* Unsignaled and done: nothing to tell, and the sender's NIC and queue
     * pair stay untouched (at 65,536 nodes they are cold: three cache
     * misses per delivery). */
    if (!m->signaled && status == RKV_WC_SUCCESS)
        return;
    struct sim_nic *src = w->nics[m->src_nic];
    struct sn_qp *sqp = sn_qp_get(src, m->src_qp);
    if (!sqp)
        return;
    sn_cq_push(
        src, sqp,
        (struct rkv_wc){.wr_id = m->wr_id, .opcode = opcode, .status = status, .byte_len = m->len});
}

static int sn_take_recv(struct sn_qp *qp, struct sn_recv *r)
{
    struct sim_nic *n = qp->nic;
    if (qp->srq) {
        if (!n->srq_len)
            return 0;
        uint32_t i = n->srq_free[--n->srq_len];
        *r = (struct sn_recv){.wr_id = (uint64_t)i << 8 | n->srq_tag,
                              .addr = n->srq_mem + (size_t)i * n->srq_buf_bytes,
                              .len = n->srq_buf_bytes};
        return 1;
    }
    if (!qp->r_len)
        return 0;
    *r = qp->recvs[qp->r_head];
    qp->r_head = (qp->r_head + 1) % qp->r_cap;
    qp->r_len--;
    return 1;
}

static const struct rkv_mr *sn_mr_find(const struct sim_nic *n, uint32_t rkey)
{
    uint32_t slot = rkey & 0xfffff;
    if (slot == 0 || slot > n->n_mrs)
        return NULL;
    const struct rkv_mr *mr = n->mrs[slot - 1];
    return mr && mr->rkey == rkey ? mr : NULL;
}

static uint8_t *sn_write_target(struct sim_nic *n, const struct sn_msg *m)
{
    uint8_t *dst = NULL;
    char why[128];
    int rc = rkv_nic_write_target(sn_mr_find(n, m->rkey), m->rkey, m->raddr, m->len, &dst, why,
                                  sizeof(why));
    return rc == 0 ? dst : NULL;
}

/* A write the target refuses: the sender's request fails and the
 * connection breaks on both sides (what an RC QP in error state does). */
static void sn_reject_write(struct sim_nic *n, struct sn_qp *qp, const struct sn_msg *m)
{
    rkv_port_log(n->base.port, RKV_LOG_WARN,
                 "remote access error: write of %u bytes at 0x%llx rkey 0x%x from NIC %u "
                 "rejected; connection closed",
                 m->len, (unsigned long long)m->raddr, m->rkey, m->src_nic);
    sn_put_ctl(n, SN_NAK, qp->peer_nic, qp->id, qp->peer_qp, qp->tx_seq++, m->wr_id);
    sn_qp_down(n, qp);
}

/* The bytes land in the receiver's memory. With measured CPU, the time the
 * copy takes here beyond the calibrated per-byte cost is charged to the
 * receiving host: the first touch of a receive buffer's pages (page faults
 * and zeroing), which the real receiver's kernel copy pays the same way and
 * the calibration's warm stream does not see. */
static void sn_copy_in(struct sim_nic *n, void *dst, const void *src, uint32_t len)
{
    if (!n->w->cpu_measured) {
        memcpy(dst, src, len);
        return;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    memcpy(dst, src, len);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9 -
               (double)len * n->w->copy_byte_ns * 1e-9;
    if (s > 0)
        sim_cpu_run(n->w, n->host, s);
}

static int sn_deliver_send(struct sim_nic *n, struct sn_qp *qp, const struct sn_msg *m)
{
    struct sn_recv r;
    if (!sn_take_recv(qp, &r))
        return 0;
    if (r.len < m->len) {
        rkv_port_log(n->base.port, RKV_LOG_WARN,
                     "a %u-byte SEND does not fit the %u-byte receive; connection closed", m->len,
                     r.len);
        sn_cq_push(
            n, qp,
            (struct rkv_wc){.wr_id = r.wr_id, .opcode = RKV_WC_RECV, .status = RKV_WC_LOC_ERR});
        sn_put_ctl(n, SN_DISCONNECT, qp->peer_nic, qp->id, qp->peer_qp, qp->tx_seq++, 0);
        sn_qp_down(n, qp);
        return 1;
    }
    if (m->len)
        sn_copy_in(n, r.addr, m->data, m->len);
    sn_cq_push(n, qp, (struct rkv_wc){.wr_id = r.wr_id, .opcode = RKV_WC_RECV, .byte_len = m->len});
    sn_sender_done(n->w, m, RKV_WC_SEND, RKV_WC_SUCCESS);
    return 1;
}

/* The target region is checked first, so a rejected write never consumes
 * a receive; a WRITE_WITH_IMM that finds no receive waits whole (RNR)
 * before any of its bytes land. */
static int sn_deliver_write(struct sim_nic *n, struct sn_qp *qp, const struct sn_msg *m)
{
    struct sn_recv r = {0};
    uint8_t *dst = sn_write_target(n, m);
    if (!dst) {
        sn_reject_write(n, qp, m);
        return 1;
    }
    if (m->kind == SN_WRITE_IMM && !sn_take_recv(qp, &r))
        return 0;
    sn_copy_in(n, dst, m->data, m->len);
    if (m->kind == SN_WRITE_IMM)
        sn_cq_push(
            n, qp,
            (struct rkv_wc){
                .wr_id = r.wr_id, .opcode = RKV_WC_RECV_IMM, .byte_len = m->len, .imm = m->imm});
    sn_sender_done(n->w, m, RKV_WC_WRITE, RKV_WC_SUCCESS);
    return 1;
}

/* Returns 0 when m must wait for a receive (RNR), 1 when consumed. */
static int sn_try_deliver(struct sim_nic *n, struct sn_qp *qp, struct sn_msg *m)
{
    switch (m->kind) {
    case SN_ACCEPT:
        qp->state = qp->state == SN_CONNECTING ? SN_UP : qp->state;
        sim_cv_broadcast(&n->conn_cv);
        return 1;
    case SN_REJECT:
        qp->state = SN_REFUSED;
        qp->bad_token = m->wr_id == 1;
        sim_cv_broadcast(&n->conn_cv);
        return 1;
    case SN_DISCONNECT:
        sn_qp_down(n, qp);
        return 1;
    case SN_NAK:
        sn_cq_push(n, qp,
                   (struct rkv_wc){
                       .wr_id = m->wr_id, .opcode = RKV_WC_WRITE, .status = RKV_WC_REM_ACCESS_ERR});
        sn_qp_down(n, qp);
        return 1;
    case SN_SEND:
        return sn_deliver_send(n, qp, m);
    case SN_WRITE:
    case SN_WRITE_IMM:
        return sn_deliver_write(n, qp, m);
    default:
        assert(!"unexpected message kind");
        return 1;
    }
}

static void sn_log_event(struct sim_nic *n, const struct sn_msg *m)
{
    struct sim_world *w = n->w;
    double now = simgrid_get_clock();
    uint64_t ev[6] = {
        (uint64_t)llround(now * 1e9), m->src_nic, m->dst_nic, m->kind, m->len, m->imm};
    sim_world_event(w, ev, 6);
    /* The sender's NIC only when tracing: at 65,536 nodes it is a cold
     * line, a cache miss per delivery for nothing. */
    if (!w->trace)
        return;
    const struct sim_nic *src = w->nics[m->src_nic];
    sim_world_trace(w, sn_kind_names[m->kind], "net", src->machine, src->tid, m->t_post, now,
                    m->wire);
}

static int sn_consume(struct sim_nic *n, struct sn_qp *qp, struct sn_msg *m)
{
    if (!sn_try_deliver(n, qp, m))
        return 0;
    sn_log_event(n, m);
    return 1;
}

/* qp holds a message and draws from the shared pool: it waits for a
 * buffer behind the QPs that waited before it (srq_repost). */
static void sn_srq_wait(struct sim_nic *n, struct sn_qp *qp)
{
    if (!qp->srq || qp->srq_waiting)
        return;
    qp->srq_waiting = 1;
    qp->srq_next = NULL;
    if (n->srq_wait_tail)
        n->srq_wait_tail->srq_next = qp;
    else
        n->srq_wait_head = qp;
    n->srq_wait_tail = qp;
}

/* In QP order: deliver now, or queue behind a message waiting for a receive. */
static void sn_deliver(struct sim_nic *n, struct sn_qp *qp, struct sn_msg *m)
{
    if (qp->state == SN_DOWN || qp->core.closed) {
        sn_msg_free(n->w, m);
        return;
    }
    if (!qp->held && !qp->draining && sn_consume(n, qp, m)) {
        sn_msg_free(n->w, m);
        return;
    }
    m->next = NULL;
    if (qp->held_tail)
        qp->held_tail->next = m;
    else
        qp->held = m;
    qp->held_tail = m;
    sn_srq_wait(n, qp);
}

/* Delivery makes simcalls (it wakes pollers), so another task may post a
 * receive meanwhile: `draining` keeps it from delivering the same head. */
static void sn_drain_held(struct sim_nic *n, struct sn_qp *qp)
{
    if (qp->draining)
        return;
    qp->draining = 1;
    while (qp->held && qp->state != SN_DOWN && !qp->core.closed) {
        /* Off the list first: a delivery that breaks the QP frees the list. */
        struct sn_msg *m = qp->held;
        qp->held = m->next;
        if (!qp->held)
            qp->held_tail = NULL;
        if (!sn_consume(n, qp, m)) {
            m->next = qp->held;
            qp->held = m;
            if (!qp->held_tail)
                qp->held_tail = m;
            break;
        }
        sn_msg_free(n->w, m);
    }
    qp->draining = 0;
}

/* ---- jitter: a heap of deliveries by due time ---- */

static struct sn_msg *sn_msg_of(struct sim_heap_node *hn)
{
    return (struct sn_msg *)((char *)hn - offsetof(struct sn_msg, hn));
}

static void sn_heap_push(struct sim_nic_rx *rx, struct sn_msg *m)
{
    m->hn.key = m->t_due;
    m->hn.seq = rx->order++;
    /* A wake-up is due at a deadline of its own, often far ahead: queued,
     * it would send every message after it into the heap. */
    int wake = m->kind == SN_POLL_WAKE || m->kind == SN_CV_WAKE;
    if ((wake ? sim_heap_push(&rx->due.heap, &m->hn) : sim_qheap_push(&rx->due, &m->hn)) < 0)
        abort(); /* the twin cannot model a lost delivery */
}

static struct sn_msg *sn_heap_pop(struct sim_nic_rx *rx)
{
    return sn_msg_of(sim_qheap_pop(&rx->due));
}

/* The first due (the heap must not be empty). */
static double sn_heap_first(const struct sim_nic_rx *rx)
{
    return sim_qheap_top_key(&rx->due);
}

static void sn_arrive(struct sim_nic *n, struct sn_msg *m);

/* The bytes of m beyond the transport header, as the network sees them. */
static uint64_t sn_body_bytes(const struct sn_msg *m)
{
    return m->wire > SN_WIRE_HDR ? m->wire - SN_WIRE_HDR : 0;
}

/* The receiver's kernel work for a message, done by its NIC actor as the
 * progress thread of a real node (tcp) or the kernel's receive path
 * (soft-RoCE) does it, not by the thread that polls the CQ: its path per
 * message (msg_cost_ns, the receiving half of the two charges a message
 * costs) and its copy of the bytes (recv_byte_ns). It competes for the
 * host's cores and holds up what arrives after it, while the poller runs
 * handlers for what came before. Connection set-up is not charged. */
static void sn_rx_cpu(struct sim_nic *n, const struct sn_msg *m)
{
    double cpu_s = sn_body_bytes(m) * n->w->recv_byte_ns * 1e-9;
    if (m->kind == SN_SEND || m->kind == SN_WRITE || m->kind == SN_WRITE_IMM)
        cpu_s += n->w->msg_cpu_s;
    if (cpu_s > 0)
        sim_cpu_run(n->w, n->host, cpu_s);
}

/* m, taken off the unit's heap at its due time. */
static void sn_rx_due(struct sim_nic_rx *rx, struct sn_msg *m)
{
    assert(m->dst_nic < rx->w->n_nics);
    struct sim_nic *n = rx->w->nics[m->dst_nic];
    if (m->kind == SN_POLL_WAKE) { /* a later arming made it stale */
        if (n->poll_armed_at == m->t_due) {
            n->poll_armed_at = INFINITY;
            sim_cv_broadcast(&n->cq_cv);
        }
        sn_msg_free(rx->w, m);
        return;
    }
    if (m->kind == SN_CV_WAKE) {
        sim_timer_fire(&n->cv_timer, m->t_due);
        sn_msg_free(rx->w, m);
        return;
    }
    if (m->timed) { /* a small message arrives */
        m->timed = 0;
        sn_rx_cpu(n, m);
        sn_arrive(n, m);
        return;
    }
    struct sn_qp *qp = sn_qp_get(n, m->dst_qp);
    if (qp && !n->closed)
        sn_deliver(n, qp, m);
    else
        sn_msg_free(rx->w, m);
}

static void sn_delay_actor(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    struct sim_nic_rx *rx = sg_actor_self_get_data();
    sg_actor_daemonize(sg_actor_self());
    for (;;) {
        double now = simgrid_get_clock();
        if (!sim_qheap_len(&rx->due)) {
            rx->timer_until = INFINITY;
            sim_cv_wait(rx->w, &rx->delay_cv, NULL, NULL, -1);
            rx->timer_until = -1;
            sim_cpu_mark(rx->w);
        } else if (sn_heap_first(rx) > now + 1e-12) { /* below that the clock cannot move */
            rx->timer_until = sn_heap_first(rx);
            sim_cv_wait(rx->w, &rx->delay_cv, NULL, NULL, sn_heap_first(rx) - now);
            rx->timer_until = -1;
            sim_cpu_mark(rx->w);
        } else {
            sn_rx_due(rx, sn_heap_pop(rx));
        }
    }
}

static void sn_rx_fire(void *arg);

/* A shared unit's wake-up at t_due, replacing an armed later one. */
static void sn_rx_arm(struct sim_nic_rx *rx, double t_due)
{
    assert(rx->on_ktimer && t_due < rx->timer_until);
    if (rx->ktimer)
        sim_at_cancel(&rx->w->ats, rx->ktimer);
    rx->ktimer = sim_at_set(&rx->w->ats, t_due, sn_rx_fire, rx);
    if (!rx->ktimer)
        abort(); /* the twin cannot model a lost delivery */
    rx->timer_until = t_due;
}

/* A shared unit's callback at its date: delivers, in maestro, what is due now,
 * including what those deliveries make due now, then arms the next. */
static void sn_rx_fire(void *arg)
{
    struct sim_nic_rx *rx = arg;
    rx->ktimer = NULL; /* gone once this runs (sim_at_set) */
    /* The run is over (the last node ended; the daemons are gone): what
     * is left would only move the clock, as a killed timer actor's
     * deliveries never came. */
    if (sg_actor_count() == 0) {
        rx->timer_until = INFINITY;
        return;
    }
    rx->timer_until = -1;
    double now = simgrid_get_clock();
    while (sim_qheap_len(&rx->due) && sn_heap_first(rx) <= now + 1e-12)
        sn_rx_due(rx, sn_heap_pop(rx));
    rx->timer_until = INFINITY;
    if (sim_qheap_len(&rx->due))
        sn_rx_arm(rx, sn_heap_first(rx));
}

/* In sequence order; with jitter, after a random extra delay. */
static void sn_schedule(struct sim_nic *n, struct sn_qp *qp, struct sn_msg *m)
{
    double now = simgrid_get_clock();
    if (n->w->jitter <= 0) {
        sn_deliver(n, qp, m);
        return;
    }
    double extra = rkv_rng_double(&n->rng) * n->w->jitter * (now - m->t_post);
    m->t_due = now + extra > qp->last_due ? now + extra : qp->last_due;
    qp->last_due = m->t_due;
    sn_timed_push(n, m);
}

static void sn_timed_push(struct sim_nic *n, struct sn_msg *m)
{
    struct sim_nic_rx *rx = n->rx;
    sn_heap_push(rx, m);
    /* A wake-up is a simcall and costs the timer a new wait; one sleeping
     * until an earlier or equal due time takes m when it wakes. */
    if (m->t_due >= rx->timer_until)
        return;
    if (rx->on_ktimer)
        sn_rx_arm(rx, m->t_due);
    else
        sim_cv_broadcast(&rx->delay_cv);
}

/* Early arrivals wait in seq order until their predecessors came. */
static void sn_arrive_seq(struct sim_nic *n, struct sn_qp *qp, struct sn_msg *m)
{
    struct sn_msg **pp = &qp->reorder;
    while (*pp && (*pp)->seq < m->seq)
        pp = &(*pp)->next;
    m->next = *pp;
    *pp = m;
    while (qp->reorder && qp->reorder->seq == qp->rx_next) {
        struct sn_msg *h = qp->reorder;
        qp->reorder = h->next;
        qp->rx_next++;
        sn_schedule(n, qp, h);
    }
}

static void sn_on_connect(struct sim_nic *n, struct sn_msg *m)
{
    if (n->closed || !sim_world_listening(n->w, n->addr, n->id, m->port)) {
        sn_put_ctl(n, SN_REJECT, m->src_nic, SN_NO_QP, m->src_qp, 0, 0);
        return;
    }
    if (m->raddr != n->token) { /* wr_id 1: refused for the token, not for the port */
        rkv_port_log(n->base.port, RKV_LOG_WARN, "refused NIC %u: wrong connection token",
                     m->src_nic);
        sn_put_ctl(n, SN_REJECT, m->src_nic, SN_NO_QP, m->src_qp, 0, 1);
        return;
    }
    struct sn_qp *qp = sn_qp_new(n);
    if (!qp) {
        sn_put_ctl(n, SN_REJECT, m->src_nic, SN_NO_QP, m->src_qp, 0, 0);
        return;
    }
    qp->peer_nic = m->src_nic;
    qp->peer_qp = m->src_qp;
    qp->state = SN_UP;
    qp->rx_next = 1; /* the CONNECT was seq 0 */
    sn_put_ctl(n, SN_ACCEPT, qp->peer_nic, qp->id, qp->peer_qp, qp->tx_seq++, 0);
    sn_cq_push(n, qp, (struct rkv_wc){.opcode = RKV_WC_CONNECTED});
}

static void sn_arrive(struct sim_nic *n, struct sn_msg *m)
{
    if (m->kind == SN_CONNECT) {
        sn_log_event(n, m);
        sn_on_connect(n, m);
        sn_msg_free(n->w, m);
        return;
    }
    struct sn_qp *qp = sn_qp_get(n, m->dst_qp);
    if (n->closed || !qp || qp->core.closed || qp->state == SN_DOWN) {
        /* A late ACCEPT for a connect that gave up: tell the other side. */
        if (qp && m->kind == SN_ACCEPT)
            sn_put_ctl(n, SN_DISCONNECT, m->src_nic, qp->id, m->src_qp, 1, 0);
        sn_msg_free(n->w, m);
        return;
    }
    if (m->kind == SN_ACCEPT)
        qp->peer_qp = m->src_qp;
    if (m->kind == SN_DISCONNECT && m->wr_id == 2) { /* abortive: no waiting for holes */
        sn_log_event(n, m);
        sn_free_list(n->w, qp->reorder);
        qp->reorder = NULL;
        sn_qp_down(n, qp);
        sn_msg_free(n->w, m);
        return;
    }
    sn_arrive_seq(n, qp, m);
}

static void sn_actor(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    struct sim_nic_rx *rx = sg_actor_self_get_data();
    sg_actor_daemonize(sg_actor_self());
    sg_mailbox_set_receiver(rx->mbox_name);
    rx->receiving = 2; /* also when its maker was killed after starting it */
    for (;;) {
        struct sn_msg *m = NULL;
        /* A transfer from a node that crashed fails; the message is gone. */
        int ok = sg_comm_wait(sg_mailbox_get_async(rx->mbox, (void **)&m)) == SG_OK;
        sim_cpu_mark(rx->w); /* a NIC's time is paid by msg_cost_ns and the links */
        if (ok && m) {
            assert(m->dst_nic < rx->w->n_nics);
            struct sim_nic *n = rx->w->nics[m->dst_nic];
            sn_put_delivered(rx->w, m);
            sn_rx_cpu(n, m);
            sn_arrive(n, m);
        }
    }
}

/* Whether delivering a message costs no CPU in this world (sim_nic_rx). */
static int sn_rx_free(const struct sim_world *w)
{
    return w->msg_cpu_s <= 0 && w->recv_byte_ns <= 0 && !w->cpu_measured;
}

/* The unit's receiver actor, a daemon on its host. A NIC's own (port set)
 * is the node's: a crash kills it; a shared unit's outlives its nodes. */
static void sn_rx_receiver(struct sim_nic_rx *rx, struct rkv_port *port)
{
    rx->receiving = 1; /* before the simcalls: another poster may come meanwhile */
    rx->maker = sg_actor_self_get_pid();
    char name[64];
    snprintf(name, sizeof(name), "%s/nic", rx->mbox_name);
    sg_actor_t a = sg_actor_init(name, rx->host);
    sg_actor_set_data(a, rx);
    if (port)
        sim_port_add_actor(port, a);
    sg_actor_start(a, sn_actor, 0, NULL);
    sim_mailbox_set_receiver(rx->mbox, a);
    rx->receiving = 2;
}

/* A new unit: a NIC's own starts its receiver and its timer actor; a
 * shared one (no port) has a callback at a date and makes its receiver when a
 * message first needs it (sn_put). */
static void sn_rx_start(struct sim_nic_rx *rx, sg_host_t host, struct rkv_port *port)
{
    rx->host = host;
    if (!port) { /* before the simcall below, which lets other nodes post */
        rx->on_ktimer = 1;
        rx->timer_until = INFINITY;
        if (sim_qheap_len(&rx->due))
            sn_rx_arm(rx, sn_heap_first(rx));
    }
    rx->mbox = sg_mailbox_by_name(rx->mbox_name);
    if (!port)
        return;
    sn_rx_receiver(rx, port);
    /* Delivers small messages and jittered ones at their due time. */
    char name[64];
    snprintf(name, sizeof(name), "%s/nic-timer", rx->mbox_name);
    sg_actor_t a = sg_actor_init(name, host);
    sg_actor_set_data(a, rx);
    sim_port_add_actor(port, a);
    sg_actor_start(a, sn_delay_actor, 0, NULL);
}

/* A unit: machine's shared one (shared), or NIC nic_id's own. In the
 * registry before any simcall; its actors not started yet (sn_rx_start). */
static struct sim_nic_rx *sn_rx_new(struct sim_world *w, int shared, uint32_t machine,
                                    uint32_t nic_id)
{
    uint32_t old_cap = w->nic_rx_cap;
    if (shared && sn_grow((void **)&w->nic_rx, &w->nic_rx_cap, sizeof(*w->nic_rx), machine + 1) < 0)
        return NULL;
    for (uint32_t i = old_cap; i < w->nic_rx_cap; i++)
        w->nic_rx[i] = NULL;
    struct sim_nic_rx *rx = calloc(1, sizeof(*rx));
    if (!rx)
        return NULL;
    w->nic_rx_live++;
    rx->w = w;
    rx->refs = 1;
    rx->timer_until = -1; /* not waiting yet: its first look at the heap sees m */
    rx->shared_at = shared ? (int32_t)machine : -1;
    if (shared) {
        w->nic_rx[machine] = rx;
        snprintf(rx->mbox_name, sizeof(rx->mbox_name), "m%u-rx", machine);
    } else {
        snprintf(rx->mbox_name, sizeof(rx->mbox_name), "nic%u", nic_id);
    }
    return rx;
}

static struct sim_nic_rx *sn_rx_shared(const struct sim_world *w, uint32_t machine)
{
    return machine < w->nic_rx_cap ? w->nic_rx[machine] : NULL;
}

static void sn_rx_put(struct sim_world *w, struct sim_nic_rx *rx);

/* The world's end: its hold on the units sim_nic_rx_prepare made. */
static void sn_rx_release_prepared(struct sim_world *w)
{
    for (uint32_t m = 0; m < w->nic_rx_cap; m++)
        if (w->nic_rx && w->nic_rx[m] && w->nic_rx[m]->prepared)
            sn_rx_put(w, w->nic_rx[m]);
}

int sim_nic_rx_prepare(struct sim_world *w, uint32_t machine, sg_host_t host)
{
    if (!sn_rx_free(w) || sn_rx_shared(w, machine))
        return 0;
    struct sim_nic_rx *rx = sn_rx_new(w, 1, machine, 0);
    if (!rx)
        return -RKV_ENOMEM;
    rx->prepared = 1; /* the world's reference, dropped at its end */
    w->nic_rx_release = sn_rx_release_prepared;
    sn_rx_start(rx, host, NULL);
    return 0;
}

static void sn_rx_put(struct sim_world *w, struct sim_nic_rx *rx)
{
    assert(rx->refs > 0);
    if (--rx->refs)
        return;
    if (rx->shared_at >= 0)
        w->nic_rx[rx->shared_at] = NULL;
    if (rx->ktimer)
        sim_at_cancel(&rx->w->ats, rx->ktimer);
    sim_cv_destroy(&rx->delay_cv);
    while (sim_qheap_len(&rx->due))
        sn_msg_free(w, sn_heap_pop(rx));
    sim_qheap_fini(&rx->due);
    free(rx);
    if (--w->nic_rx_live == 0) { /* the world's end: its last NIC is freed */
        sn_msg_pool_fini(w);
        free(w->nic_rx);
        w->nic_rx = NULL;
        w->nic_rx_cap = 0;
    }
}

/* ---- the vtable ---- */

/* sim_timer's arm: a wake-up of the node's timed cond waits at t_due on
 * this NIC's timer heap (the timer calls sim_timer_fire then). */
static int sn_cv_arm(void *arg, double t_due)
{
    struct sim_nic *n = arg;
    struct sn_msg *m = sn_msg_new(n->w, SN_CV_WAKE, 0);
    if (!m)
        return 0;
    m->dst_nic = n->id;
    m->src_nic = n->id;
    m->t_due = t_due;
    sn_timed_push(n, m);
    return 1;
}

static int sn_open(struct rkv_port *port, const char *dev, struct rkv_nic **nic_p)
{
    (void)dev;
    struct sim_world *w = sim_port_world(port);
    sim_world_mem_tick(w); /* a starting node: no network event yet */
    struct sim_nic *n = calloc(1, sizeof(*n));
    if (!n)
        return -RKV_ENOMEM;
    if (sn_grow((void **)&w->nics, &w->nic_cap, sizeof(*w->nics), w->n_nics + 1) < 0) {
        free(n);
        return -RKV_ENOMEM;
    }
    int rc = rkv_nic_base_init(&n->base, &rkv_nic_sim_ops, port);
    if (rc < 0) {
        free(n);
        return rc;
    }
    n->w = w;
    /* The id and the slot together, before any simcall (a mailbox lookup
     * is one): another node may open its NIC when this actor yields. */
    n->id = w->n_nics;
    w->nics[w->n_nics++] = n;
    w->nic_free = sim_nic_free;
    n->machine = sim_port_machine(port);
    n->tid = sim_port_tid(port);
    n->host = sim_port_host(port);
    int shared = sn_rx_free(w), fresh = 0;
    if (shared && (n->rx = sn_rx_shared(w, n->machine))) {
        n->rx->refs++;
    } else if ((n->rx = sn_rx_new(w, shared, n->machine, n->id))) {
        fresh = 1;
    } else {
        n->closed = 1; /* in w->nics: the world frees it */
        return -RKV_ENOMEM;
    }
    snprintf(n->addr, sizeof(n->addr), "%s", sim_port_addr(port));
    snprintf(n->node, sizeof(n->node), "%s", port->node);
    rkv_rng_seed(&n->rng, w->seed ^ 0x51a1c0de5eedull, n->id);
    rkv_nic_cq_init(&n->cq, SN_CQ_MAX, NULL, NULL);
    n->poll_armed_at = INFINITY;
    sim_timer_init(&n->cv_timer, sn_cv_arm, n);
    /* The twin runs every node in one process, where no peer is hostile:
     * comparing (part of) the secret's hash says whether two nodes were
     * given the same secret, which is all it needs to model. */
    memcpy(&n->token, n->base.auth_key, sizeof(n->token));
    sim_port_set_nic(port, n, sim_nic_drain, sim_nic_crash);
    sim_port_set_timer(port, &n->cv_timer);
    if (fresh) /* simcalls: the NIC is in place */
        sn_rx_start(n->rx, n->host, shared ? NULL : port);
    *nic_p = &n->base;
    return 0;
}

static int sn_listen(struct rkv_nic *nic, const char *host, uint16_t port)
{
    struct sim_nic *n = sn_of(nic);
    if (strcmp(host, n->addr) != 0 && strcmp(host, "0.0.0.0") != 0) {
        rkv_port_log(nic->port, RKV_LOG_ERROR, "listen: %s is not this node's host (%s)", host,
                     n->addr);
        return -RKV_EINVAL;
    }
    return sim_world_listen(n->w, n->addr, port, n->id);
}

static int sn_connect(struct rkv_nic *nic, const char *host, uint16_t port, uint32_t timeout_ms,
                      struct rkv_qp **qp_p)
{
    struct sim_nic *n = sn_of(nic);
    uint32_t dst;
    if (sim_world_lookup(n->w, host, port, &dst) < 0) {
        /* Nobody listens yet: a refusal costs a round trip on a real network. */
        sg_actor_sleep_for(2 * sg_host_get_route_latency(n->host, n->host) + 1e-6);
        return -RKV_EPEERDEAD;
    }
    struct sn_qp *qp = sn_qp_new(n);
    if (!qp)
        return -RKV_ENOMEM;
    qp->peer_nic = dst;
    qp->state = SN_CONNECTING;
    struct sn_msg *m = sn_msg_new(n->w, SN_CONNECT, 0);
    if (!m)
        return -RKV_ENOMEM;
    m->dst_nic = dst;
    m->src_qp = qp->id;
    m->dst_qp = SN_NO_QP;
    m->port = port;
    m->raddr = n->token;
    m->seq = qp->tx_seq++;
    sn_put(n, m);
    double deadline = simgrid_get_clock() + timeout_ms * 1e-3;
    while (qp->state == SN_CONNECTING && simgrid_get_clock() < deadline) {
        sim_cv_wait(n->w, &n->conn_cv, NULL, NULL, deadline - simgrid_get_clock());
        sim_cpu_mark(n->w);
    }
    if (qp->state == SN_UP) {
        *qp_p = (struct rkv_qp *)qp;
        return 0;
    }
    int rc = qp->state != SN_REFUSED ? -RKV_ETIMEDOUT
             : qp->bad_token         ? -RKV_ECONFIG
                                     : -RKV_EPEERDEAD;
    qp->core.closed = 1;
    return rc;
}

static int sn_reg_mr(struct rkv_nic *nic, void *addr, size_t len, int access, struct rkv_mr **mr_p)
{
    struct sim_nic *n = sn_of(nic);
    /* An empty region is fine, as on tcp and verbs (a WRITE_IMM's receive). */
    if ((!addr && len) || (access & ~RKV_ACCESS_REMOTE_WRITE) || !mr_p)
        return -RKV_EINVAL;
    uint32_t slot = 0;
    while (slot < n->n_mrs && n->mrs[slot])
        slot++;
    if (slot >= 0xfffff)
        return -RKV_ENOMEM;
    if (slot == n->n_mrs &&
        sn_grow((void **)&n->mrs, &n->mr_cap, sizeof(*n->mrs), n->n_mrs + 1) < 0)
        return -RKV_ENOMEM;
    struct rkv_mr *mr = calloc(1, sizeof(*mr));
    if (!mr)
        return -RKV_ENOMEM;
    mr->addr = addr;
    mr->len = len;
    mr->access = access;
    mr->nic = &n->base;
    /* Random high bits: a stale or guessed key does not name a live region. */
    mr->lkey = mr->rkey = (uint32_t)(rkv_rng_next(&n->rng) & 0xfff00000u) | (slot + 1);
    if (slot == n->n_mrs)
        n->n_mrs++;
    n->mrs[slot] = mr;
    *mr_p = mr;
    return 0;
}

static void sn_dereg_mr(struct rkv_nic *nic, struct rkv_mr *mr)
{
    struct sim_nic *n = sn_of(nic);
    if (!mr)
        return;
    uint32_t slot = (mr->rkey & 0xfffff) - 1;
    assert(slot < n->n_mrs && n->mrs[slot] == mr);
    n->mrs[slot] = NULL;
    free(mr);
}

static int sn_post(struct rkv_qp *qpv, uint8_t kind, uint64_t wr_id, const struct rkv_sge *sge,
                   uint64_t raddr, uint32_t rkey, uint32_t imm, int signaled)
{
    struct sn_qp *qp = sn_qp_of(qpv);
    struct sim_nic *n = qp->nic;
    if (qp->core.closed || qp->state != SN_UP)
        return -RKV_EPEERDEAD;
    int rc = rkv_nic_sge_check(&n->base, sge);
    if (rc < 0)
        return rc;
    sim_cpu_settle(n->w);
    struct sn_msg *m = sn_msg_new(qp->nic->w, kind, sge->len);
    if (!m)
        return -RKV_ENOMEM;
    if (sge->len) /* an empty one may have no buffer */
        memcpy(m->data, sge->addr, sge->len);
    sim_cpu_mark(n->w); /* the copy is the kernel's: the link model pays for it */
    m->dst_nic = qp->peer_nic;
    m->src_qp = qp->id;
    m->dst_qp = qp->peer_qp;
    m->seq = qp->tx_seq++;
    m->wr_id = wr_id;
    m->raddr = raddr;
    m->rkey = rkey;
    m->imm = imm;
    m->signaled = (uint8_t) !!signaled;
    uint64_t body = sn_put(n, m);
    /* The sender's kernel: its per-message path and its copy of the bytes,
     * while they travel (loopback TCP's copies are CPU, calibration). */
    double cpu_s = n->w->msg_cpu_s + (double)body * n->w->send_byte_ns * 1e-9;
    if (cpu_s > 0)
        sim_cpu_run(n->w, n->host, cpu_s);
    sim_cpu_mark(n->w);
    return 0;
}

/* Every send is copied at post (sn_post), so one of any size may be
 * "inline": where the world says so (sim.h sends_inline), the engine posts
 * it without asking for a completion. */
static uint32_t sn_qp_inline_bytes(const struct rkv_qp *qpv)
{
    return sn_qp_of((struct rkv_qp *)qpv)->nic->w->sends_inline ? UINT32_MAX : 0;
}

static int sn_post_send(struct rkv_qp *qp, uint64_t wr_id, const struct rkv_sge *sge, int signaled)
{
    return sn_post(qp, SN_SEND, wr_id, sge, 0, 0, 0, signaled);
}

static int sn_post_write(struct rkv_qp *qp, uint64_t wr_id, const struct rkv_sge *sge,
                         uint64_t remote_addr, uint32_t rkey, int with_imm, uint32_t imm,
                         int signaled)
{
    return sn_post(qp, with_imm ? SN_WRITE_IMM : SN_WRITE, wr_id, sge, remote_addr, rkey, imm,
                   signaled);
}

static int sn_post_recv(struct rkv_qp *qpv, uint64_t wr_id, const struct rkv_sge *sge)
{
    struct sn_qp *qp = sn_qp_of(qpv);
    /* A broken connection takes no more receives (nic.h: they would never
     * complete), as on tcp and verbs. */
    if (qp->core.closed || qp->state == SN_DOWN || qp->state == SN_REFUSED)
        return -RKV_EPEERDEAD;
    if (qp->srq)
        return -RKV_EINVAL; /* its receives come from the shared pool */
    int rc = rkv_nic_sge_check(&qp->nic->base, sge);
    if (rc < 0)
        return rc;
    if (qp->r_len == qp->r_cap) {
        /* From 8, the payload-less twin's rx_depth: its thousands of
         * connections post 8 receives each, and hold no more. */
        uint32_t nc = qp->r_cap ? qp->r_cap * 2 : 8;
        struct sn_recv *r = malloc((size_t)nc * sizeof(*r));
        if (!r)
            return -RKV_ENOMEM;
        for (uint32_t i = 0; i < qp->r_len; i++)
            r[i] = qp->recvs[(qp->r_head + i) % qp->r_cap];
        free(qp->recvs);
        qp->recvs = r;
        qp->r_cap = nc;
        qp->r_head = 0;
    }
    qp->recvs[(qp->r_head + qp->r_len++) % qp->r_cap] =
        (struct sn_recv){.wr_id = wr_id, .addr = sge->addr, .len = sge->len};
    sim_cpu_settle(qp->nic->w);
    sn_drain_held(qp->nic, qp);
    sim_cpu_mark(qp->nic->w);
    return 0;
}

/* A poller will wait for completions until deadline: has the NIC's timer
 * wake the pollers then, unless a wake-up at or before it is armed (the
 * pollers it wakes early arm again). Returns 0 when it cannot (no memory):
 * the poller then waits with a timeout of its own.
 *
 * Why: a wait with a timeout is a SimGrid sleep action on the host's CPU
 * model (a max-min variable made and freed) per wait, and the engine
 * polls with a timeout of 50 ms, more than once per message; its
 * deadlines only grow, so this arms about one wake-up per NIC per 50 ms
 * of simulated time. */
static int sn_poll_arm(struct sim_nic *n, double deadline)
{
    if (deadline >= n->poll_armed_at)
        return 1;
    struct sn_msg *m = sn_msg_new(n->w, SN_POLL_WAKE, 0);
    if (!m)
        return 0;
    m->dst_nic = n->id;
    m->src_nic = n->id;
    m->t_due = deadline;
    n->poll_armed_at = deadline;
    sn_timed_push(n, m);
    return 1;
}

static int sn_poll(struct rkv_nic *nic, struct rkv_wc *wc, int max, uint32_t timeout_ms)
{
    struct sim_nic *n = sn_of(nic);
    double deadline = simgrid_get_clock() + timeout_ms * 1e-3;
    int got = 0;
    sim_cpu_settle(n->w);
    for (;;) {
        if (n->cq.len) /* nic.h: no completion names a closed QP (the core drops them) */
            got += rkv_nic_cq_take(&n->cq, wc + got, max - got, NULL);
        double now = simgrid_get_clock();
        /* Within 1 ps is the deadline: the timer wakes at a time computed
         * as now + (deadline - now), which may miss it by a rounding. */
        if (got || max == 0 || n->poll_woken || now + 1e-12 >= deadline)
            break;
        sim_cv_wait(n->w, &n->cq_cv, NULL, NULL, sn_poll_arm(n, deadline) ? -1 : deadline - now);
        sim_cpu_mark(n->w);
    }
    /* No msg_cost_ns here: the receive was charged as the message arrived
     * (sn_rx_cpu), and a send's completion is a local CQ entry. Charging
     * every polled completion charged a request-reply pair 6 times where
     * the calibration divides the CPU it measured by 4. */
    n->poll_woken = 0;
    sim_cpu_mark(n->w);
    return got;
}

static int sn_cq_wait(struct rkv_nic *nic, uint32_t timeout_ms)
{
    struct sim_nic *n = sn_of(nic);
    double deadline = simgrid_get_clock() + timeout_ms * 1e-3;
    sim_cpu_settle(n->w);
    for (;;) {
        double now = simgrid_get_clock();
        if (n->cq.len || n->poll_woken || now + 1e-12 >= deadline) /* 1 ps: as sn_poll */
            break;
        sim_cv_wait(n->w, &n->cq_cv, NULL, NULL, sn_poll_arm(n, deadline) ? -1 : deadline - now);
        sim_cpu_mark(n->w);
    }
    n->poll_woken = 0;
    sim_cpu_mark(n->w);
    return n->cq.len > 0;
}

/* No simcall: the caller waits on cv right after (nic.h). Not with
 * measured CPU: there the wait charges the CPU used so far before it
 * queues (a simcall), and a completion rung meanwhile would be lost. */
static int sn_cq_doorbell(struct rkv_nic *nic, struct rkv_cond *cv)
{
    struct sim_nic *n = sn_of(nic);
    if (cv && n->w->cpu_measured)
        return -1;
    n->doorbell = cv;
    if (!cv && n->cq.len)
        sim_cv_broadcast(&n->cq_cv);
    return n->cq.len > 0;
}

/* From any actor: the world runs one at a time, so no lock. */
static void sn_poll_wake(struct rkv_nic *nic)
{
    struct sim_nic *n = sn_of(nic);
    n->poll_woken = 1;
    sim_cv_broadcast(&n->cq_cv);
}

/* ---- the shared receive pool ---- */

static void sn_srq_push(struct sim_nic *n, uint32_t i)
{
    assert(n->srq_len < n->srq_count);
    n->srq_free[n->srq_len++] = i;
}

/* qp was just closed: its receives still queued in the CQ will be dropped
 * unseen, so their buffers go back to the pool now. */
static void sn_srq_reclaim(struct sim_nic *n, struct sn_qp *qp)
{
    if (!qp->srq)
        return;
    /* Up to its last entry only: a server closing its hundreds of QPs at
     * the end of a run walked its whole queue for each (1.4 % of a
     * 65,536-node run), most of them with nothing queued. */
    uint32_t left = qp->core.cq_refs;
    for (uint32_t k = 0; left && k < n->cq.len; k++) {
        const struct rkv_wc *e = &n->cq.buf[(n->cq.head + k) % n->cq.cap];
        if (e->qp != (struct rkv_qp *)qp)
            continue;
        left--;
        if (e->opcode == RKV_WC_RECV || e->opcode == RKV_WC_RECV_IMM)
            sn_srq_push(n, (uint32_t)(e->wr_id >> 8));
    }
    assert(left == 0); /* cq_refs counts its queued entries */
}

static int sn_srq_setup(struct rkv_nic *nic, uint32_t *count_p, uint32_t buf_bytes, uint8_t tag,
                        uint8_t **base_p)
{
    struct sim_nic *n = sn_of(nic);
    assert(count_p && base_p);
    uint32_t count = *count_p;
    if (!n->w->srq || count == 0 || buf_bytes == 0 || n->srq_mem || n->n_qps)
        return -RKV_EINVAL; /* then the user posts per QP */
    /* Not zeroed: a buffer is written before it is handed out, and pages
     * never written stay out of memory. */
    uint8_t *mem = malloc((size_t)count * buf_bytes);
    uint32_t *ring = malloc((size_t)count * sizeof(*ring));
    if (!mem || !ring) {
        free(mem);
        free(ring);
        return -RKV_ENOMEM;
    }
    n->srq_mem = mem;
    n->srq_free = ring;
    n->srq_count = count;
    n->srq_buf_bytes = buf_bytes;
    n->srq_tag = tag;
    for (uint32_t i = count; i-- > 0;) /* buffer 0 on top */
        sn_srq_push(n, i);
    *base_p = mem;
    return 0;
}

/* Buffer i is free again: the QPs that held a message for want of one get
 * it, the longest waiting first. Delivery makes simcalls, so another
 * repost may come meanwhile: it only adds its buffer, which this loop
 * hands out. */
static int sn_srq_repost(struct rkv_nic *nic, uint32_t i)
{
    struct sim_nic *n = sn_of(nic);
    if (!n->srq_mem || i >= n->srq_count || n->srq_len == n->srq_count)
        return -RKV_EINVAL;
    sn_srq_push(n, i);
    if (n->srq_serving)
        return 0;
    n->srq_serving = 1;
    sim_cpu_settle(n->w);
    while (n->srq_len && n->srq_wait_head) {
        struct sn_qp *qp = n->srq_wait_head;
        if (qp->held && qp->state != SN_DOWN && !qp->core.closed) {
            sn_drain_held(n, qp);
            if (qp->held && !qp->draining && qp->state != SN_DOWN && !qp->core.closed)
                break; /* the pool ran dry again: it stays first */
        }
        if (n->srq_wait_head == qp) {
            n->srq_wait_head = qp->srq_next;
            if (!n->srq_wait_head)
                n->srq_wait_tail = NULL;
            qp->srq_waiting = 0;
        }
    }
    n->srq_serving = 0;
    sim_cpu_mark(n->w);
    return 0;
}

static void sn_qp_close(struct rkv_qp *qpv)
{
    struct sn_qp *qp = sn_qp_of(qpv);
    struct sim_nic *n = qp->nic;
    if (qp->core.closed)
        return;
    qp->core.closed = 1;
    sn_srq_reclaim(n, qp);
    if (qp->state == SN_UP)
        sn_put_ctl(n, SN_DISCONNECT, qp->peer_nic, qp->id, qp->peer_qp, qp->tx_seq++, 0);
    qp->state = SN_DOWN;
    sn_free_list(n->w, qp->held);
    sn_free_list(n->w, qp->reorder);
    qp->held = qp->held_tail = qp->reorder = NULL;
}

static int sn_local_addr(struct rkv_nic *nic, const char *peer_host, uint16_t peer_port, char *buf,
                         size_t len)
{
    (void)peer_host;
    (void)peer_port;
    int k = snprintf(buf, len, "%s", sn_of(nic)->addr);
    return k > 0 && (size_t)k < len ? 0 : -RKV_EINVAL;
}

/* The world frees the NIC at its end: messages may still arrive for it. */
static void sn_close(struct rkv_nic *nic)
{
    struct sim_nic *n = sn_of(nic);
    for (uint32_t i = 0; i < n->n_qps; i++)
        sn_qp_close((struct rkv_qp *)n->qps[i]);
    sim_world_unlisten(n->w, n->id);
    n->closed = 1;
    rkv_nic_cq_destroy(&n->cq);
}

/* A crashed node's connections are torn down by its OS: the peers hear of
 * it at once (an abortive DISCONNECT, wr_id 2), even though the node's
 * unfinished transfers were cancelled and left holes in the QP order. */
void sim_nic_crash(struct sim_nic *n)
{
    for (uint32_t i = 0; i < n->n_qps; i++) {
        struct sn_qp *qp = n->qps[i];
        if (!qp->core.closed && qp->state == SN_UP)
            sn_put_ctl(n, SN_DISCONNECT, qp->peer_nic, qp->id, qp->peer_qp, qp->tx_seq++, 2);
        qp->state = SN_DOWN;
    }
    /* A CONNECT on its way when the node died finds no NIC actor to answer
     * it, and its sender would wait out its whole timeout (the retry budget,
     * 30 s) although the server restarted 10 ms later (rkv swarm, seed
     * 7168). The node's OS refuses it at once instead, as a kernel answers
     * a SYN for a dead process with a reset. A CONNECT this NIC already
     * accepted is an UP QP above: its DISCONNECT follows the ACCEPT. */
    for (uint32_t k = 0; k < n->w->n_nics; k++) {
        struct sim_nic *o = n->w->nics[k];
        for (uint32_t i = 0; o != n && !o->closed && i < o->n_qps; i++) {
            struct sn_qp *cq = o->qps[i];
            if (cq->core.closed || cq->state != SN_CONNECTING || cq->peer_nic != n->id)
                continue;
            int accepted = 0;
            for (uint32_t j = 0; j < n->n_qps && !accepted; j++)
                accepted = n->qps[j]->peer_nic == o->id && n->qps[j]->peer_qp == cq->id;
            if (!accepted)
                sn_put_ctl(n, SN_REJECT, o->id, SN_NO_QP, cq->id, 0, 0);
        }
    }
    sn_close(&n->base);
}

void sim_nic_free(struct sim_nic *n)
{
    sim_cv_destroy(&n->cq_cv);
    sim_cv_destroy(&n->conn_cv);
    sim_timer_fini(&n->cv_timer);
    for (uint32_t i = 0; i < n->n_qps; i++) {
        struct sn_qp *qp = n->qps[i];
        sn_free_list(n->w, qp->held);
        sn_free_list(n->w, qp->reorder);
        free(qp->recvs);
        free(qp);
    }
    for (uint32_t i = 0; i < n->n_mrs; i++)
        free(n->mrs[i]);
    if (n->rx)
        sn_rx_put(n->w, n->rx);
    free(n->qps);
    free(n->mrs);
    rkv_nic_cq_destroy(&n->cq);
    for (uint32_t i = 0; i < n->n_out; i++)
        free(n->out[i].ring);
    free(n->srq_mem);
    free(n->srq_free);
    free(n);
}

const struct rkv_nic_ops rkv_nic_sim_ops = {
    .name = "sim",
    .open = sn_open,
    .listen = sn_listen,
    .connect = sn_connect,
    .reg_mr = sn_reg_mr,
    .dereg_mr = sn_dereg_mr,
    .post_send = sn_post_send,
    .post_recv = sn_post_recv,
    .post_write = sn_post_write,
    .poll = sn_poll,
    .qp_close = sn_qp_close,
    .local_addr = sn_local_addr,
    .close = sn_close,
    .srq_setup = sn_srq_setup,
    .srq_repost = sn_srq_repost,
    .qp_inline_bytes = sn_qp_inline_bytes,
    .cq_wait = sn_cq_wait,
    .cq_doorbell = sn_cq_doorbell,
    .poll_wake = sn_poll_wake,
    .in_process = 1, /* a simulated network inside the twin's one process */
};
