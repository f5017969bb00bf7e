/* The ps-lite-style protocol over the NIC seam. See engine.h for the model. */
#include <assert.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "port/trace.h"
#include "engine/regcache.h"
#include "util/util.h"

/* rkv_engine_linger looks again after this long at most, from a first
 * look 1 us on, doubling: a fixed 1 ms nap ended every twin run with
 * payload 1 ms of simulated time after its last SHUTDOWN ack had gone. */
#define ENG_LINGER_NAP_NS 1000000ull
#define ENG_LINGER_FIRST_NAP_NS 1000ull
#define ENG_WR_RX 1u
#define ENG_WR_TX 2u
#define ENG_WR_PUT 3u /* unsignalled (a plain write, an inline send): only a failure completes */
#define ENG_WR_TAG_MASK 7u
/* The shared receive pool, when the NIC has one (nic.h srq_setup): this
 * many windows of rx_depth buffers for all peers together; a peer's credits
 * stay rx_depth, and a pool that runs dry holds senders back (RNR) until a
 * buffer is reposted, which happens as soon as its message is handled. */
#define ENG_SRQ_WINDOWS 8u
#define ENG_POLL_BATCH 32
#define ENG_POLL_MS 50
/* Busy polling: how long the progress task sleeps while a waiting thread
 * polls in its place, before it looks again. Short, so that the NIC is not
 * left unpolled for long once that thread went back to its own work. */
#define ENG_STAND_ASIDE_NS 1000000ull
/* Busy polling: a poller (the progress task, or a thread waiting in
 * rkv_engine_wait) spins this long after the last completion, then sleeps
 * until the next one. An idle node must not spin: on a host with fewer
 * cores than spinners, spinners lose a scheduler tick (4 ms at HZ=250) to
 * each other; and a slow peer must not cost a core for a whole timeout. */
#define ENG_SPIN_NS 20000000ull
/* The longest the poller may leave the NIC unpolled while it runs the
 * callbacks of a batch (rkv_nic.poll_gap_ns): a NIC whose posts can block
 * on the peer reads on its own past it. A tick of a parked task, so that
 * a NIC's reader does not take over from a poller that is only busy. */
#define ENG_POLL_GAP_NS 10000000ull
#define ENG_MIN_SLOT_BYTES 4096u
/* A slot the granter asked back (RNDV_REVOKE) is given back when its
 * holder is done with it: a holder that keeps it longer than
 * cfg.revoke_grace_ms (this by default) after the ask, or after the last
 * message written into it, is dropped. */
#define ENG_REVOKE_GRACE_MS 10000u
#define ENG_REVOKE_CHECK_NS 100000000ull
/* Free transmit buffers kept for reuse, by bytes: beyond it they are freed. */
#define ENG_TX_CACHE_BYTES (256u << 20)
/* Pause between connection attempts to a peer that is not up yet. */
#define ENG_CONNECT_RETRY_NS 50000000ull
/* Messages that may wait for credits per peer before the peer is dropped,
 * unless the owner sets a limit (rkv_engine_cfg.max_backlog). */
#define ENG_MAX_QUEUED 65536u
/* Control-sized transmit buffers kept for reuse; beyond it they are freed,
 * so that a burst (a peer that hoarded replies) gives its memory back. */
#define ENG_TX_SMALL_CACHE 1024u

enum eng_tx_kind { ENG_TX_SEND = 1, ENG_TX_WRITE = 2, ENG_TX_SLOT = 3 /* needs a slot first */ };
enum eng_lslot_state { ENG_SLOT_FREE = 0, ENG_SLOT_GRANTED, ENG_SLOT_OWNED };

struct rkv_tx {
    struct rkv_tx *next;     /* free list, backlog or wait list */
    struct rkv_tx *all;      /* every tx the engine owns: freed at destroy even if
                                its completion was dropped with a dead QP */
    struct rkv_tx *all_prev; /* so that one leaves that list in O(1) */
    struct rkv_mr *mr;
    uint8_t *buf;
    size_t cap;
    size_t len;
    int kind;                 /* enum eng_tx_kind, set when queued */
    struct rkv_slot_desc dst; /* ENG_TX_WRITE target */
    int reply;                /* sent from on_msg: may carry the pending release */
    int rndv_asked;           /* a rendezvous for this tx is in flight */
    struct rkv_peer *owner;   /* posted to this peer, completion pending */
    /* The message's body beyond buf (rkv_engine_send_ext): written into the
     * slot before buf's bytes. */
    struct rkv_engine_ext *ext;
    uint32_t n_ext;
    uint64_t ext_bytes;
};

/* A receive slot this side registered for one peer to write into. */
struct eng_lslot {
    struct rkv_mr *mr;
    void *grant; /* the NIC's per-peer grant of mr (nic.h mr_grant), or NULL */
    uint8_t *buf;
    void *raw; /* what free takes: buf, or the calloc'd block buf is aligned in */
    uint64_t cap;
    uint64_t used;      /* eng->use_tick when a message last came in it (least recent goes first) */
    uint64_t revoke_ns; /* asked back then (or its one message in flight came since) */
    int state;          /* enum eng_lslot_state */
    int revoking;       /* asked back: counted in eng->revoking_bytes */
    int revoke_late;    /* the message in flight at the ask came, restarting the grace */
};

/* A slot the peer granted us, cached per (tensor, type) key. */
struct eng_rslot {
    uint32_t key;
    struct rkv_slot_desc d;
    int busy;
    int revoked; /* the granter wants it back: retired once released */
};

/* A peer's ask for a slot that waits for slot memory (at most one per
 * peer, as an engine asks only for the head of its queue). */
struct eng_ask {
    struct eng_ask *next;
    struct rkv_peer *peer;
    uint64_t req_id;
    uint64_t bytes;
    uint64_t cap;
    uint32_t tensor_id;
    uint16_t op;
};

struct eng_txq {
    struct rkv_tx *head, *tail;
    uint32_t n;
};

/* Pointers first, then counters, then the flags as bytes: no padding
 * between them (192 bytes instead of 216, a smaller malloc bin; a peer per
 * connection side, thousands per process in the twin). */
struct rkv_peer {
    struct rkv_engine *eng;
    /* The engine's list it is on (peers or zombies); pprev points at the
     * pointer to it, so that it leaves in one step: a walk of the list per
     * peer made a server closing its thousands of connections quadratic. */
    struct rkv_peer *next, **pprev;
    struct rkv_qp *qp; /* NULL once disconnected */
    void *user;
    struct rkv_peer *touched_next;
    struct rkv_peer *down_next; /* on eng->down while down_due */
    struct eng_ask *ask;        /* its ask waiting for slot memory, or NULL */
    uint32_t *releases;         /* slot ids to give back (a stack of lslot_cap) */
    uint8_t *rx_mem;
    struct rkv_mr *rx_mr;
    struct eng_lslot *lslots; /* lslot_cap entries, grown up to max_slots */
    struct eng_rslot *rslots; /* rslot_cap entries, grown up to max_slots */
    struct eng_txq backlog;   /* waiting for credits */
    struct eng_txq waiting;   /* waiting for a rendezvous slot */
    struct eng_txq inflight;  /* posted, completion not seen yet */
    uint32_t credits;         /* receives the peer has posted for us */
    uint32_t owed;            /* receives we reposted but have not announced */
    uint32_t release_due;     /* slot id + 1 to give back with the next reply */
    uint32_t n_releases;
    uint32_t lslot_cap, rslot_cap;
    uint32_t n_rslots;
    uint32_t rndv_inflight;
    uint32_t slot_budget; /* slots of the peer's this side holds at most (rkv_engine_peer_grant) */
    uint64_t held;        /* bytes of replies in backlog and waiting (eng_hold_room) */
    uint32_t n_held;      /* and how many */
    /* 0 or 1 each */
    uint8_t dead;
    uint8_t touched;    /* saw traffic in this poll batch (on eng->touched) */
    uint8_t closed;     /* killed, and its QP closed by the NIC (drop_peer_wait) */
    uint8_t released;   /* the owner holds no pointer to it: freed once closed */
    uint8_t waited;     /* a drop_peer_wait holds it */
    uint8_t down_due;   /* killed; on_peer(down) runs at the end of the next poll batch */
    uint8_t incoming;   /* made by the other side, live: counted in eng->n_incoming */
    uint8_t identified; /* its owner knows who it is (rkv_engine_peer_identified) */
    uint64_t born_ns;   /* it connected then (incoming) */
};

struct eng_closing {
    struct rkv_qp *qp;
    struct rkv_peer *peer; /* whose receive memory goes once qp is closed, or NULL */
};

struct rkv_engine {
    struct rkv_port *port;
    struct rkv_nic *nic;
    struct rkv_engine_cfg cfg;
    rkv_engine_msg_fn on_msg;
    rkv_engine_peer_fn on_peer;
    void *user;
    struct rkv_mutex *mu;
    /* The poller's: whoever holds it polls the NIC and runs the callbacks of
     * what completed (the progress task, or an inline poller). One at a
     * time, or completions of one connection could be handled out of order.
     * Taken before mu, never while holding it. */
    struct rkv_mutex *poll_mu;
    atomic_int inline_pollers; /* threads between inline_begin and _end */
    /* Busy polling: the progress task is in (or about to enter) a batch.
     * An inline poller waits for it to clear rather than sleep on poll_mu:
     * a sleep is the wake-up busy polling is there to avoid. */
    atomic_int task_polling;
    /* A waiter polls for itself (the NIC's cq_doorbell): one at a time. */
    atomic_int doorbell_held;
    struct rkv_task *task;
    int stopping;
    int stopped;              /* rkv_engine_stop ran: no QP is open */
    struct rkv_regcache regs; /* cfg.reg_cache_entries > 0 */
    struct rkv_peer *peers;
    uint32_t n_incoming; /* live peers that connected to this node (cfg.max_incoming) */
    /* Peers with traffic in the current poll batch: a server with thousands
     * of clients must not walk all of them after every batch. */
    struct rkv_peer *touched;
    /* QPs of killed peers, closed between poll batches: a batch already in
     * hand may still name them, and the NIC frees a QP soon after close. */
    struct eng_closing *closing;
    uint32_t n_closing, cap_closing;
    /* Killed peers whose owner has not been told yet. A kill may come from
     * any thread that sends (a server's durable task acknowledging, a
     * client's caller): on_peer runs where on_msg does, in a poll batch
     * under poll_mu, so the owner's state needs no lock of its own against
     * its message handler, and no loop that sends sees its own entries
     * change under it. */
    struct rkv_peer *down;
    /* Slot memory (cfg.slot_mem_bytes): what peers hold, what was asked
     * back from them, and the asks that wait for it, first come first
     * served; slots go back least recently used first. */
    uint64_t granted_bytes;
    uint64_t revoking_bytes;
    uint32_t n_revoking;
    uint64_t asked_bytes; /* the waiting asks' slots */
    struct eng_ask *asks, *asks_tail;
    uint64_t use_tick;
    uint64_t revoke_check_ns;
    struct rkv_peer *zombies; /* half-built peers, freed at destroy */
    struct rkv_tx *all_tx;
    struct rkv_tx *free_small;
    uint32_t n_free_small;
    struct rkv_tx *free_large;
    size_t free_large_bytes;
    struct rkv_engine_stats st;
    uint8_t *srq_mem;      /* the NIC's shared receive pool (NULL: per peer) */
    uint32_t srq_count;    /* its buffers, ctrl_buf_bytes each */
    uint32_t max_backlog;  /* cfg.max_backlog, or ENG_MAX_QUEUED */
    uint64_t held_replies; /* every peer's held, bounded by cfg.slot_mem_bytes */
    /* Per-connection warnings. lim_post: a post to a peer that went (500
     * peers that each sent requests and reset their connection logged 466
     * lines in 0.6 s; an outside tester). */
    struct rkv_ratelim lim_backlog, lim_reject, lim_slot, lim_conns, lim_post;
};

static void eng_lock(struct rkv_engine *e)
{
    e->port->ops->mutex_lock(e->mu);
}
static void eng_unlock(struct rkv_engine *e)
{
    e->port->ops->mutex_unlock(e->mu);
}

static uint32_t eng_key_of(const uint8_t *msg)
{
    return (rkv_proto_hdr_tensor_id(msg) << 8) | rkv_proto_hdr_type(msg);
}

static uint64_t eng_req_of(const uint8_t *msg)
{
    return rkv_proto_hdr_req_id(msg);
}

static void txq_push(struct eng_txq *q, struct rkv_tx *tx)
{
    tx->next = NULL;
    if (q->tail)
        q->tail->next = tx;
    else
        q->head = tx;
    q->tail = tx;
    q->n++;
}

/* Completions come in posting order, so tx is almost always the head. */
static void txq_remove(struct eng_txq *q, struct rkv_tx *tx)
{
    struct rkv_tx *prev = NULL;
    for (struct rkv_tx *t = q->head; t; prev = t, t = t->next) {
        if (t != tx)
            continue;
        if (prev)
            prev->next = t->next;
        else
            q->head = t->next;
        if (q->tail == t)
            q->tail = prev;
        q->n--;
        return;
    }
}

static struct rkv_tx *txq_pop(struct eng_txq *q)
{
    struct rkv_tx *tx = q->head;
    if (!tx)
        return NULL;
    q->head = tx->next;
    if (!q->head)
        q->tail = NULL;
    q->n--;
    return tx;
}

/* A reply is what a peer made this node allocate (a node's own messages
 * are its caller's memory): counted while it waits in a peer's backlog or
 * waiting queue, which only these two move it in and out of. */
static uint64_t tx_held_bytes(const struct rkv_tx *tx)
{
    return tx->reply ? tx->len : 0;
}

static void peer_q_push(struct rkv_engine *e, struct rkv_peer *p, struct eng_txq *q,
                        struct rkv_tx *tx)
{
    assert(q == &p->backlog || q == &p->waiting);
    p->held += tx_held_bytes(tx);
    p->n_held += tx->reply != 0;
    e->held_replies += tx_held_bytes(tx);
    txq_push(q, tx);
}

static struct rkv_tx *peer_q_pop(struct rkv_engine *e, struct rkv_peer *p, struct eng_txq *q)
{
    assert(q == &p->backlog || q == &p->waiting);
    struct rkv_tx *tx = txq_pop(q);
    if (tx) {
        uint64_t b = tx_held_bytes(tx);
        assert(p->held >= b && e->held_replies >= b && p->n_held >= (tx->reply != 0));
        p->held -= b;
        p->n_held -= tx->reply != 0;
        e->held_replies -= b;
    }
    return tx;
}

/* ---- transmit buffers ---- */

static void tx_destroy(struct rkv_engine *e, struct rkv_tx *tx)
{
    free(tx->ext);
    if (tx->all_prev)
        tx->all_prev->all = tx->all;
    else
        e->all_tx = tx->all;
    if (tx->all)
        tx->all->all_prev = tx->all_prev;
    e->nic->ops->dereg_mr(e->nic, tx->mr);
    free(tx->buf);
    free(tx);
}

static int tx_new(struct rkv_engine *e, size_t cap, struct rkv_tx **tx_p)
{
    struct rkv_tx *tx = calloc(1, sizeof(*tx));
    if (!tx)
        return -RKV_ENOMEM;
    if (posix_memalign((void **)&tx->buf, 64, cap) != 0)
        goto free_tx;
    int rc = e->nic->ops->reg_mr(e->nic, tx->buf, cap, RKV_ACCESS_LOCAL, &tx->mr);
    if (rc < 0)
        goto free_buf;
    tx->cap = cap;
    tx->all = e->all_tx;
    if (e->all_tx)
        e->all_tx->all_prev = tx;
    e->all_tx = tx;
    *tx_p = tx;
    return 0;
free_buf:
    free(tx->buf);
free_tx:
    free(tx);
    return -RKV_ENOMEM;
}

/* Slots and large buffers: powers of two from a page, or from the control
 * buffer size when that is smaller (a node that asked for small receive
 * buffers, as the twin's payload-less runs do to fit 65,536 nodes, keeps
 * its per-connection reply slots that small too). */
static size_t eng_round_cap(const struct rkv_engine *e, size_t len)
{
    size_t cap =
        e->cfg.ctrl_buf_bytes < ENG_MIN_SLOT_BYTES ? e->cfg.ctrl_buf_bytes : ENG_MIN_SLOT_BYTES;
    while (cap < len)
        cap <<= 1;
    return cap;
}

/* A granted slot's size: rounded up as a buffer is, so that it serves the
 * key's later messages too, but never past max_slot_bytes, which no
 * message exceeds (slot_mem_bytes >= max_slot_bytes then fits any). */
static uint64_t eng_slot_cap(const struct rkv_engine *e, uint64_t bytes)
{
    uint64_t cap = eng_round_cap(e, bytes);
    return cap > e->cfg.max_slot_bytes && bytes <= e->cfg.max_slot_bytes ? e->cfg.max_slot_bytes
                                                                         : cap;
}

static int tx_get(struct rkv_engine *e, size_t len, struct rkv_tx **tx_p)
{
    RKV_ASSERT_HELD(e->port, e->mu);
    if (len <= e->cfg.ctrl_buf_bytes) {
        if (e->free_small) {
            *tx_p = e->free_small;
            e->free_small = (*tx_p)->next;
            e->n_free_small--;
            return 0;
        }
        return tx_new(e, e->cfg.ctrl_buf_bytes, tx_p);
    }
    for (struct rkv_tx **pp = &e->free_large; *pp; pp = &(*pp)->next) {
        if ((*pp)->cap >= len) {
            *tx_p = *pp;
            *pp = (*pp)->next;
            e->free_large_bytes -= (*tx_p)->cap;
            return 0;
        }
    }
    return tx_new(e, eng_round_cap(e, len), tx_p);
}

static void tx_put(struct rkv_engine *e, struct rkv_tx *tx)
{
    RKV_ASSERT_HELD(e->port, e->mu);
    tx->kind = 0;
    tx->reply = 0;
    tx->rndv_asked = 0;
    tx->owner = NULL;
    free(tx->ext);
    tx->ext = NULL;
    tx->n_ext = 0;
    tx->ext_bytes = 0;
    if (tx->cap == e->cfg.ctrl_buf_bytes) {
        if (e->n_free_small >= ENG_TX_SMALL_CACHE) {
            tx_destroy(e, tx);
            return;
        }
        tx->next = e->free_small;
        e->free_small = tx;
        e->n_free_small++;
        return;
    }
    if (e->free_large_bytes + tx->cap > ENG_TX_CACHE_BYTES) {
        tx_destroy(e, tx);
        return;
    }
    tx->next = e->free_large;
    e->free_large = tx;
    e->free_large_bytes += tx->cap;
}

int rkv_engine_tx_alloc(struct rkv_engine *e, size_t len, struct rkv_tx **tx_p)
{
    if (len < RKV_PROTO_HDR_BYTES || len > e->cfg.max_slot_bytes)
        return -RKV_ELIMIT;
    eng_lock(e);
    int rc = tx_get(e, len, tx_p);
    eng_unlock(e);
    /* A buffer of the caller's alone: nothing queued or posted holds it. */
    assert(rc < 0 || ((*tx_p)->cap >= len && !(*tx_p)->owner && !(*tx_p)->kind));
    return rc;
}

void *rkv_engine_tx_buf(struct rkv_tx *tx)
{
    return tx->buf;
}

void rkv_engine_tx_free(struct rkv_engine *e, struct rkv_tx *tx)
{
    assert(tx && !tx->owner); /* a posted tx goes back by its completion */
    eng_lock(e);
    tx_put(e, tx);
    eng_unlock(e);
}

/* ---- posting with credits ---- */

static uint32_t peer_next_release(struct rkv_peer *p, int reply)
{
    if (reply && p->release_due) {
        uint32_t r = p->release_due;
        p->release_due = 0;
        return r;
    }
    if (p->n_releases == 0)
        return 0;
    p->n_releases--;
    return p->releases[p->n_releases] + 1;
}

static void peer_kill(struct rkv_engine *e, struct rkv_peer *p, int notify);
static void eng_wake_poller(struct rkv_engine *e);
static void eng_down_forget(struct rkv_engine *e, struct rkv_peer *p);
struct eng_ask;
static void eng_ask_unlink(struct rkv_engine *e, struct eng_ask *a);
static void eng_serve_asks(struct rkv_engine *e);

/* Posts tx now; the caller checked credits. */
static int peer_post_now(struct rkv_engine *e, struct rkv_peer *p, struct rkv_tx *tx)
{
    RKV_ASSERT_HELD(e->port, e->mu);
    assert(p->credits > 0 && p->qp);
    uint16_t give = p->owed > UINT16_MAX ? UINT16_MAX : (uint16_t)p->owed;
    rkv_proto_patch_flow(tx->buf, give, peer_next_release(p, tx->reply));
    p->owed -= give;
    p->credits--;
    struct rkv_sge sge = {.addr = tx->buf, .len = (uint32_t)tx->len, .mr = tx->mr};
    uint64_t wr_id = (uint64_t)(uintptr_t)tx | ENG_WR_TX;
    int rc = 0;
    /* The body's pieces first: the header's WRITE_WITH_IMM after them
     * completes at the target only once they landed. */
    uint64_t off = tx->len;
    for (uint32_t i = 0; i < tx->n_ext && rc == 0; i++) {
        assert(tx->kind == ENG_TX_WRITE);
        const struct rkv_engine_ext *x = &tx->ext[i];
        struct rkv_sge xs = {.addr = (void *)(uintptr_t)x->addr, .len = x->len, .mr = x->mr};
        rc = e->nic->ops->post_write(p->qp, ENG_WR_PUT, &xs, tx->dst.addr + off, tx->dst.rkey, 0, 0,
                                     0);
        off += x->len;
        e->st.puts++;
    }
    /* A send the NIC copies at post needs no completion: one wake-up less
     * per message for a blocking poller, and tx is free at once. */
    int copied = tx->kind == ENG_TX_SEND && e->nic->ops->qp_inline_bytes &&
                 tx->len <= e->nic->ops->qp_inline_bytes(p->qp);
    if (rc == 0 && tx->kind == ENG_TX_SEND) {
        rc = e->nic->ops->post_send(p->qp, copied ? ENG_WR_PUT : wr_id, &sge, !copied);
        e->st.sends++;
    } else if (rc == 0) {
        rc = e->nic->ops->post_write(p->qp, wr_id, &sge, tx->dst.addr, tx->dst.rkey, 1,
                                     tx->dst.slot, 1);
        e->st.writes++;
    }
    if (rc < 0) {
        /* A peer that went (the NIC knew first) is no warning: a client
         * that leaves as a reply or a server's shutdown notice goes to it
         * is every clean end's (54 lines in one soft-RoCE suite), and
         * on_peer reports the loss. Anything else is one, rate-limited. */
        if (rc == -RKV_EPEERDEAD)
            RKV_LOGI(e->port, "engine: post to peer failed: %s", rkv_strerror(rc));
        else
            rkv_port_warn_limited(e->port, &e->lim_post, "engine: post to peer failed: %s",
                                  rkv_strerror(rc));
        tx_put(e, tx);
        peer_kill(e, p, 1);
        return rc;
    }
    if (copied) {
        tx_put(e, tx);
        return 0;
    }
    tx->owner = p;
    txq_push(&p->inflight, tx);
    e->st.tx_inflight++;
    return 0;
}

/* A queue of p's (n messages, what they wait for in why) reached
 * max_backlog: tx goes, and the peer with it, logged rate-limited. */
static int peer_drop_hog(struct rkv_engine *e, struct rkv_peer *p, struct rkv_tx *tx, uint32_t n,
                         const char *why)
{
    rkv_port_warn_limited(e->port, &e->lim_backlog, "engine: %u messages %s; dropping it", n, why);
    tx_put(e, tx);
    peer_kill(e, p, 1);
    return -RKV_ELIMIT;
}

/* Replies held for peers that return no credits or answer no rendezvous
 * are bounded in bytes, all peers together, by the slot memory (which
 * bounds what this node grants them): the message count alone let one
 * peer that named a large pull destination and returned no credits make
 * a server hold 258 replies of up to max_slot_bytes each (1.3 GB seen,
 * 258 GiB possible, per connection; an outside tester). A peer's first
 * reply held is never refused (what any client may be owed: every worker's
 * META of a large book at once, each waiting for its rendezvous, is no
 * hoard), only counted; past the bound the peer holding the most among
 * those holding two or more goes, so that a peer with one reply due is not
 * dropped for another's hoard. Returns 0 when tx may be queued for p, 1
 * when p holds the most (the caller drops it). */
static int eng_hold_room(struct rkv_engine *e, struct rkv_peer *p, const struct rkv_tx *tx)
{
    RKV_ASSERT_HELD(e->port, e->mu);
    uint64_t b = tx_held_bytes(tx), lim = e->cfg.slot_mem_bytes;
    while (lim && b && p->n_held && e->held_replies + b > lim) {
        struct rkv_peer *big = p;
        uint64_t most = p->held + b;
        for (struct rkv_peer *q = e->peers; q; q = q->next)
            if (!q->dead && q->n_held >= 2 && q->held > most)
                big = q, most = q->held;
        if (big == p)
            return 1;
        rkv_port_warn_limited(e->port, &e->lim_backlog,
                              "engine: replies held for peers reached slot_mem_bytes (%llu MiB); "
                              "dropping the peer holding the most (%llu MiB), which returns no "
                              "credits or answers no rendezvous",
                              (unsigned long long)(lim >> 20), (unsigned long long)(most >> 20));
        peer_kill(e, big, 1); /* its queues go: held_replies falls by most */
    }
    return 0;
}

/* p holds the most replies, past the slot memory: tx goes, and p. */
static int peer_drop_hoard(struct rkv_engine *e, struct rkv_peer *p, struct rkv_tx *tx, uint32_t n,
                           const char *waits_for)
{
    char why[200];
    snprintf(why, sizeof(why),
             "%s, with %llu MiB of replies held for it, past slot_mem_bytes (%llu MiB)", waits_for,
             (unsigned long long)((p->held + tx_held_bytes(tx)) >> 20),
             (unsigned long long)(e->cfg.slot_mem_bytes >> 20));
    return peer_drop_hog(e, p, tx, n, why);
}

/* One credit is held back for CREDIT messages, so returning credits can
 * never be blocked by a full window. */
static int peer_post(struct rkv_engine *e, struct rkv_peer *p, struct rkv_tx *tx)
{
    RKV_ASSERT_HELD(e->port, e->mu);
    if (p->dead || !p->qp) {
        tx_put(e, tx);
        return -RKV_EPEERDEAD;
    }
    if (p->backlog.head || p->credits <= 1) {
        /* A peer that takes but never returns credits, or a caller that
         * outruns the network without bound: both are errors. */
        if (p->backlog.n >= e->max_backlog)
            return peer_drop_hog(e, p, tx, p->backlog.n,
                                 "wait for credits the peer does not return");
        if (eng_hold_room(e, p, tx))
            return peer_drop_hoard(e, p, tx, p->backlog.n + 1,
                                   "wait for credits the peer does not return");
        peer_q_push(e, p, &p->backlog, tx);
        e->st.backlogged++;
        return 0;
    }
    return peer_post_now(e, p, tx);
}

static void peer_flush_backlog(struct rkv_engine *e, struct rkv_peer *p)
{
    while (p->backlog.head && p->credits > 1 && !p->dead)
        peer_post_now(e, p, peer_q_pop(e, p, &p->backlog));
}

/* Encodes and queues an engine-internal control message. */
static int peer_ctrl(struct rkv_engine *e, struct rkv_peer *p, struct rkv_hdr *h,
                     const struct rkv_slot_desc *slot, uint64_t rndv_bytes)
{
    RKV_ASSERT_HELD(e->port, e->mu);
    struct rkv_tx *tx;
    int rc = tx_get(e, e->cfg.ctrl_buf_bytes, &tx);
    if (rc < 0)
        return rc;
    h->sender = e->cfg.node_id;
    if (h->type == RKV_MSG_RNDV_START)
        tx->len = rkv_proto_enc_rndv_start(tx->buf, h, rndv_bytes);
    else if (h->type == RKV_MSG_RNDV_REPLY)
        tx->len = rkv_proto_enc_slot(tx->buf, h, slot);
    else
        tx->len = rkv_proto_enc_empty(tx->buf, h);
    tx->kind = ENG_TX_SEND;
    return peer_post(e, p, tx);
}

/* Gives back credits and slots when no reply will carry them. */
static void peer_maybe_credit(struct rkv_engine *e, struct rkv_peer *p)
{
    RKV_ASSERT_HELD(e->port, e->mu);
    /* A backlog means credits <= 1: the held-back one is for exactly this. */
    if (p->dead || !p->qp || p->credits < 1)
        return;
    if (p->owed < e->cfg.rx_depth / 2 && p->n_releases == 0 && !p->release_due)
        return;
    if (p->release_due) {
        assert(p->releases); /* a granted slot was written: the slot tables exist */
        assert(p->n_releases < p->lslot_cap); /* each owed once, until released */
        p->releases[p->n_releases++] = p->release_due - 1;
        p->release_due = 0;
    }
    struct rkv_tx *tx;
    if (tx_get(e, e->cfg.ctrl_buf_bytes, &tx) < 0)
        return;
    struct rkv_hdr h = {.type = RKV_MSG_CREDIT, .sender = e->cfg.node_id};
    tx->len = rkv_proto_enc_empty(tx->buf, &h);
    tx->kind = ENG_TX_SEND;
    e->st.credit_msgs++;
    peer_post_now(e, p, tx);
}

/* ---- rendezvous, sender side ---- */

static struct eng_rslot *peer_find_rslot(struct rkv_peer *p, uint32_t key, size_t len,
                                         int want_idle)
{
    for (uint32_t i = 0; i < p->n_rslots; i++) {
        struct eng_rslot *r = &p->rslots[i];
        if (r->key == key && r->d.cap >= len && (!want_idle || !r->busy))
            return r;
    }
    return NULL;
}

static void tx_to_slot(struct rkv_tx *tx, struct eng_rslot *r)
{
    r->busy = 1;
    tx->kind = ENG_TX_WRITE;
    tx->dst = r->d;
}

/* Fails a request the engine cannot deliver: the owner hears about it as an
 * ERROR message with the request's id. Drops the lock around the callback. */
static void eng_fail_tx(struct rkv_engine *e, struct rkv_peer *p, struct rkv_tx *tx, int err)
{
    RKV_ASSERT_HELD(e->port, e->mu);
    struct rkv_msg m = {0};
    m.h.type = RKV_MSG_ERROR;
    m.h.req_id = eng_req_of(tx->buf);
    m.h.status = err;
    if (err == -RKV_ELIMIT)
        snprintf(m.u.error.text, sizeof(m.u.error.text),
                 "the peer refused a slot for a %llu-byte message: a limit there was hit (its "
                 "slot_mem_bytes, max_slot_bytes or slots per connection; its log says which)",
                 (unsigned long long)(tx->len + tx->ext_bytes));
    else
        snprintf(m.u.error.text, sizeof(m.u.error.text), "rendezvous failed: %s",
                 rkv_strerror(err));
    tx_put(e, tx);
    eng_unlock(e);
    e->on_msg(e->user, p, &m);
    eng_lock(e);
}

/* Gives up the cached slot rslots[i] (the granter frees it on
 * RNDV_RETIRE). A failed post kills the peer. */
static void peer_retire_at(struct rkv_engine *e, struct rkv_peer *p, uint32_t i)
{
    assert(i < p->n_rslots && !p->rslots[i].busy);
    struct rkv_hdr h = {.type = RKV_MSG_RNDV_RETIRE, .count = p->rslots[i].d.slot};
    p->rslots[i] = p->rslots[--p->n_rslots];
    peer_ctrl(e, p, &h, NULL, 0);
}

/* Gives up an idle cached slot, to make room in the slot budget. Returns 0
 * when every slot is busy. */
static int peer_retire_idle(struct rkv_engine *e, struct rkv_peer *p)
{
    for (uint32_t i = 0; i < p->n_rslots; i++) {
        if (!p->rslots[i].busy) {
            peer_retire_at(e, p, i);
            return 1;
        }
    }
    return 0;
}

/* Gets tx a slot of its key: an idle cached one, or a new one by rendezvous
 * (retiring idle slots of other keys when this side's half of the peer's
 * slot budget is used up). Returns 1 when tx may be posted now, 0 when it
 * waits: for its rendezvous reply, or for a busy slot to be released (every
 * release runs the waiting queue again); -RKV_EPEERDEAD when a RETIRE or
 * RNDV_START it posted failed, which killed the peer: the kill gave back
 * every tx of the waiting queue, tx too when it was queued there (it is
 * not touched after the kill); the owner hears of it from the next poll
 * batch. */
static int peer_acquire(struct rkv_engine *e, struct rkv_peer *p, struct rkv_tx *tx)
{
    RKV_ASSERT_HELD(e->port, e->mu);
    uint32_t key = eng_key_of(tx->buf);
    struct eng_rslot *r = peer_find_rslot(p, key, tx->len + tx->ext_bytes, 1);
    if (r) {
        if (!tx->rndv_asked)
            e->st.rndv_hits++;
        tx_to_slot(tx, r);
        return 1;
    }
    if (tx->rndv_asked)
        return 0;
    while (p->n_rslots + p->rndv_inflight >= p->slot_budget) {
        if (!peer_retire_idle(e, p))
            return 0;
        /* A RETIRE whose post failed killed the peer, and the kill put tx
         * back in the pool when it waited in the queue: writing
         * rndv_asked into it then left a pooled buffer that, reused for a
         * large message, never asked for a slot and waited for ever. */
        if (p->dead)
            return -RKV_EPEERDEAD;
    }
    struct rkv_hdr h = {.type = RKV_MSG_RNDV_START,
                        .req_id = eng_req_of(tx->buf),
                        .tensor_id = key >> 8,
                        .op = (uint16_t)(key & 0xff)};
    tx->rndv_asked = 1;
    p->rndv_inflight++;
    e->st.rndv_starts++;
    peer_ctrl(e, p, &h, NULL, tx->len + tx->ext_bytes);
    return p->dead ? -RKV_EPEERDEAD : 0;
}

/* Starts waiting transmits in order, up to the first large one that still
 * has no slot: messages to one peer are delivered in the order they were
 * sent, whichever path (SEND or slot) each takes. Only the head of the
 * queue asks for a slot. */
static void peer_run_waiting(struct rkv_engine *e, struct rkv_peer *p)
{
    RKV_ASSERT_HELD(e->port, e->mu);
    struct rkv_tx *tx;
    while (!p->dead && (tx = p->waiting.head) != NULL) {
        if (tx->kind == ENG_TX_SLOT && peer_acquire(e, p, tx) <= 0)
            return; /* waits, or the peer died and the queue went with it */
        peer_q_pop(e, p, &p->waiting);
        peer_post(e, p, tx);
    }
}

/* Queues tx behind the rendezvous at the head of the waiting queue. The
 * queue is bounded as the backlog is: a peer that never answers our
 * RNDV_START (or grants a slot too small for the message) and keeps
 * sending requests would otherwise have every reply queued here for ever. */
static int peer_wait_slot(struct rkv_engine *e, struct rkv_peer *p, struct rkv_tx *tx)
{
    RKV_ASSERT_HELD(e->port, e->mu);
    if (p->waiting.n >= e->max_backlog)
        return peer_drop_hog(e, p, tx, p->waiting.n,
                             "wait behind a rendezvous the peer does not answer");
    /* And by bytes, for replies: a peer that asked for 16 MiB META replies
     * and answered none of their rendezvous had 60 of them, 1 GB, held for
     * it within the count (eng_hold_room). */
    if (eng_hold_room(e, p, tx))
        return peer_drop_hoard(e, p, tx, p->waiting.n + 1,
                               "wait behind a rendezvous the peer does not answer");
    peer_q_push(e, p, &p->waiting, tx);
    return 0;
}

static int peer_send_large(struct rkv_engine *e, struct rkv_peer *p, struct rkv_tx *tx)
{
    tx->kind = ENG_TX_SLOT;
    if (p->waiting.head)
        return peer_wait_slot(e, p, tx);
    int rc = peer_acquire(e, p, tx);
    if (rc > 0)
        return peer_post(e, p, tx);
    if (rc < 0) { /* not queued yet: the kill did not take it */
        tx_put(e, tx);
        return rc;
    }
    return peer_wait_slot(e, p, tx);
}

/* ---- tracing (port->trace, `rkv run --trace` on real backends) ---- */

/* The id of a message's arrow, the same at both ends: its sender, type and
 * request id (a client's request ids carry a random tag per incarnation).
 * 52 bits, which a JSON number holds exactly. */
static uint64_t eng_flow_id(const struct rkv_hdr *h)
{
    return rkv_mix64(((uint64_t)h->sender << 8 | h->type) ^ rkv_mix64(h->req_id)) &
           ((1ull << 52) - 1);
}

/* A message the store hands the engine: a "send TYPE" span on the sending
 * thread, [t0, now], and its arrow's start. */
static void eng_trace_send(struct rkv_engine *e, const struct rkv_hdr *h, uint64_t t0,
                           uint64_t bytes)
{
    struct rkv_trace *tr = e->port->trace;
    char name[40];
    snprintf(name, sizeof(name), "send %s", rkv_msg_type_name(h->type));
    rkv_trace_span(tr, name, "net", t0, rkv_trace_now_ns(tr), -1, h->count, bytes);
    /* No arrow for a message of no request (a server's shutdown notice,
     * request id 0, to each of its clients: one id for all, and a client
     * that left first never ends it). */
    if (h->req_id)
        rkv_trace_flow(tr, 1, eng_flow_id(h), t0);
}

/* The header of an encoded message about to be sent, when tracing. */
static int eng_trace_hdr(const struct rkv_engine *e, const struct rkv_tx *tx, size_t len,
                         struct rkv_hdr *h, uint64_t *t0_p)
{
    char why[8];
    if (!e->port->trace || rkv_proto_decode_hdr(tx->buf, len, h, why, sizeof(why)) < 0)
        return 0;
    *t0_p = rkv_trace_now_ns(e->port->trace);
    return 1;
}

static int eng_send_locked(struct rkv_engine *e, struct rkv_peer *p, struct rkv_tx *tx, size_t len,
                           int reply)
{
    assert(len >= RKV_PROTO_HDR_BYTES && len <= tx->cap);
    eng_lock(e);
    tx->len = len;
    tx->reply = reply;
    int rc;
    if (p->dead) {
        tx_put(e, tx);
        rc = -RKV_EPEERDEAD;
    } else if (len + tx->ext_bytes <= e->cfg.ctrl_buf_bytes) {
        tx->kind = ENG_TX_SEND;
        rc = 0;
        if (p->waiting.head) /* keep order behind a rendezvous in progress */
            rc = peer_wait_slot(e, p, tx);
        else
            rc = peer_post(e, p, tx);
    } else {
        rc = peer_send_large(e, p, tx);
    }
    eng_unlock(e);
    return rc;
}

static int eng_send(struct rkv_engine *e, struct rkv_peer *p, struct rkv_tx *tx, size_t len,
                    int reply)
{
    struct rkv_hdr h;
    uint64_t t0 = 0, bytes = len + tx->ext_bytes;
    int traced = eng_trace_hdr(e, tx, len, &h, &t0);
    int rc = eng_send_locked(e, p, tx, len, reply);
    if (traced)
        eng_trace_send(e, &h, t0, bytes);
    return rc;
}

int rkv_engine_send(struct rkv_engine *e, struct rkv_peer *p, struct rkv_tx *tx, size_t len)
{
    return eng_send(e, p, tx, len, 0);
}

int rkv_engine_reply(struct rkv_engine *e, struct rkv_peer *p, struct rkv_tx *tx, size_t len)
{
    return eng_send(e, p, tx, len, 1);
}

int rkv_engine_write(struct rkv_engine *e, struct rkv_peer *p, struct rkv_tx *tx, size_t len,
                     const struct rkv_slot_desc *dst)
{
    assert(len >= RKV_PROTO_HDR_BYTES && len <= tx->cap);
    if (len > dst->cap) {
        rkv_engine_tx_free(e, tx);
        return -RKV_ELIMIT;
    }
    struct rkv_hdr h;
    uint64_t t0 = 0;
    int traced = eng_trace_hdr(e, tx, len, &h, &t0);
    eng_lock(e);
    tx->len = len;
    tx->kind = ENG_TX_WRITE;
    tx->dst = *dst;
    tx->reply = 1;
    int rc = 0;
    if (p->waiting.head && !p->dead) /* keep order behind a rendezvous */
        rc = peer_wait_slot(e, p, tx);
    else
        rc = peer_post(e, p, tx);
    eng_unlock(e);
    if (traced)
        eng_trace_send(e, &h, t0, len);
    return rc;
}

int rkv_engine_send_ext(struct rkv_engine *e, struct rkv_peer *p, struct rkv_tx *tx, size_t len,
                        const struct rkv_engine_ext *ext, uint32_t n_ext)
{
    assert(len >= RKV_PROTO_HDR_BYTES && len <= tx->cap && !tx->ext);
    uint64_t total = len;
    for (uint32_t i = 0; i < n_ext; i++)
        total += ext[i].len;
    if (total > e->cfg.max_slot_bytes) {
        rkv_engine_tx_free(e, tx);
        return -RKV_ELIMIT;
    }
    if (total <= e->cfg.ctrl_buf_bytes) {
        /* A SEND is one piece: small bodies are copied (tx holds ctrl_buf_bytes). */
        assert(tx->cap >= total);
        for (uint32_t i = 0; i < n_ext; i++) {
            memcpy(tx->buf + len, ext[i].addr, ext[i].len);
            len += ext[i].len;
        }
        return eng_send(e, p, tx, len, 0);
    }
    if (n_ext > 0) {
        tx->ext = malloc((size_t)n_ext * sizeof(*tx->ext));
        if (!tx->ext) {
            rkv_engine_tx_free(e, tx);
            return -RKV_ENOMEM;
        }
        memcpy(tx->ext, ext, (size_t)n_ext * sizeof(*tx->ext));
        tx->n_ext = n_ext;
        tx->ext_bytes = total - len;
    }
    return eng_send(e, p, tx, len, 0);
}

/* Posts one unsignalled plain write, or the signalled last one
 * of a tx (its completion gives tx back). */
static int peer_put_one(struct rkv_engine *e, struct rkv_peer *p, const struct rkv_sge *src,
                        uint64_t raddr, uint32_t rkey, struct rkv_tx *tx)
{
    RKV_ASSERT_HELD(e->port, e->mu);
    uint64_t wr_id = tx ? (uint64_t)(uintptr_t)tx | ENG_WR_TX : ENG_WR_PUT;
    int rc = e->nic->ops->post_write(p->qp, wr_id, src, raddr, rkey, 0, 0, tx != NULL);
    e->st.puts++;
    if (rc < 0) {
        RKV_LOGW(e->port, "engine: plain write to peer failed: %s", rkv_strerror(rc));
        peer_kill(e, p, 1);
        return rc;
    }
    if (tx) {
        tx->owner = p;
        txq_push(&p->inflight, tx);
        e->st.tx_inflight++;
    }
    return 0;
}

/* The writes posted from tx before a failed one are unsignalled: no
 * completion tells when the NIC has read them, and until then it may (a
 * real RNIC DMAs after the post returns; a dying QP may still flush), so tx
 * must not go back to the pool, where the next user overwrites what they
 * would send. A marker op posted behind them could tell, but every failed
 * post kills the peer, so there is no usable QP to post it on. tx waits
 * among the peer's in-flight ones instead: eng_close_deferred gives those
 * back once qp_close returned (nic.h: the NIC lets go of buffers posted on
 * the QP), and destroy closes every QP. The close may have happened
 * already: eng_defer_close closes at once when it cannot queue. */
static void peer_hold_tx(struct rkv_engine *e, struct rkv_peer *p, struct rkv_tx *tx)
{
    RKV_ASSERT_HELD(e->port, e->mu);
    assert(p->dead && !tx->owner);
    if (p->closed) {
        tx_put(e, tx);
        return;
    }
    tx->owner = p;
    txq_push(&p->inflight, tx);
    e->st.tx_inflight++;
}

int rkv_engine_put_tx(struct rkv_engine *e, struct rkv_peer *p, struct rkv_tx *tx,
                      const struct rkv_engine_put *puts, uint32_t n, uint32_t rkey)
{
    int rc = 0;
    uint32_t posted = 0;
    eng_lock(e);
    for (uint32_t i = 0; i < n && rc == 0; i++) {
        assert((const uint8_t *)puts[i].src >= tx->buf &&
               (const uint8_t *)puts[i].src + puts[i].len <= tx->buf + tx->cap);
        if (p->dead || !p->qp) {
            rc = -RKV_EPEERDEAD;
            break;
        }
        struct rkv_sge sge = {
            .addr = (void *)(uintptr_t)puts[i].src, .len = puts[i].len, .mr = tx->mr};
        int last = i + 1 == n;
        rc = peer_put_one(e, p, &sge, puts[i].raddr, rkey, last ? tx : NULL);
        if (rc == 0)
            posted++;
        if (rc == 0 && last)
            tx = NULL; /* in flight: its completion returns it */
    }
    if (tx && posted > 0)
        peer_hold_tx(e, p, tx);
    else if (tx)
        tx_put(e, tx); /* the NIC never saw it */
    eng_unlock(e);
    return rc;
}

int rkv_engine_put(struct rkv_engine *e, struct rkv_peer *p, const struct rkv_sge *src,
                   uint64_t raddr, uint32_t rkey)
{
    eng_lock(e);
    int rc = p->dead || !p->qp ? -RKV_EPEERDEAD : peer_put_one(e, p, src, raddr, rkey, NULL);
    eng_unlock(e);
    return rc;
}

/* ---- receive slots ---- */

/* A peer's slot tables (its receive slots and the releases of them owed)
 * come with its first slot: most connections of a large cluster never use
 * one. The slot arrays grow as slots are used, up to max_slots: most that
 * do use one, a pull-reply slot (64 entries cost ~2.5 KB per side), so
 * they start with one entry (four cost 120 bytes more per array, on
 * thousands of connections per process in the twin). */
#define ENG_SLOTS_FIRST 1u

/* Grows *arr of *cap_p entries (elem bytes each, zeroed) toward max. */
static int eng_slots_grow(void **arr, uint32_t *cap_p, size_t elem, uint32_t max)
{
    assert(*cap_p < max);
    uint32_t cap = *cap_p ? 2 * *cap_p : ENG_SLOTS_FIRST;
    cap = cap < max ? cap : max;
    uint8_t *n = realloc(*arr, (size_t)cap * elem);
    if (!n)
        return -RKV_ENOMEM;
    memset(n + (size_t)*cap_p * elem, 0, (size_t)(cap - *cap_p) * elem);
    *arr = n;
    *cap_p = cap;
    return 0;
}

static int peer_lslot_new(struct rkv_engine *e, struct rkv_peer *p, uint64_t bytes, int state,
                          struct rkv_slot_desc *d)
{
    if (bytes > e->cfg.max_slot_bytes)
        return -RKV_ELIMIT;
    uint32_t i;
    for (i = 0; i < p->lslot_cap && p->lslots[i].state != ENG_SLOT_FREE; i++)
        ;
    if (i == e->cfg.max_slots)
        return -RKV_ELIMIT;
    if (i == p->lslot_cap) {
        uint32_t was = p->lslot_cap;
        if (eng_slots_grow((void **)&p->lslots, &p->lslot_cap, sizeof(*p->lslots),
                           e->cfg.max_slots) < 0)
            return -RKV_ENOMEM;
        /* Releases owed are of distinct granted slots: as many as slots. */
        uint32_t *rel = realloc(p->releases, sizeof(*rel) * p->lslot_cap);
        if (!rel) {
            p->lslot_cap = was; /* the grown entries, free, go unused */
            return -RKV_ENOMEM;
        }
        p->releases = rel;
    }
    struct eng_lslot *s = &p->lslots[i];
    uint64_t cap = eng_slot_cap(e, bytes);
    if (state == ENG_SLOT_GRANTED && e->cfg.slot_mem_bytes &&
        cap > e->cfg.slot_mem_bytes - e->granted_bytes)
        return -RKV_ELIMIT;
    /* A slot granted to a peer is zeroed: the peer's header says how long
     * its message is (one written in pieces completes with the header
     * alone), so what it did not write is read as its message too, and
     * heap memory freed by others' requests went back to a peer that wrote
     * 64 bytes and claimed 4 KiB, as rows it then pulled (an outside
     * tester). calloc, which takes a large block zeroed from the kernel
     * without touching it (a memset of a 1 GiB slot held the engine, and
     * made all of it resident). A slot this side owns (a pull's reply) is
     * written by the server it asked. */
    if (state == ENG_SLOT_GRANTED) {
        if (!(s->raw = calloc(1, cap + 64)))
            return -RKV_ENOMEM;
        s->buf = (uint8_t *)(((uintptr_t)s->raw + 63) & ~(uintptr_t)63);
    } else {
        if (posix_memalign(&s->raw, 64, cap) != 0)
            return -RKV_ENOMEM;
        s->buf = s->raw;
    }
    /* A slot is one peer's: where the NIC can, only that peer's connection
     * may write it (a guessed rkey on another is a remote access error). */
    const struct rkv_nic_ops *no = e->nic->ops;
    int per_peer = rkv_nic_grants(e->nic) && p->qp;
    int rc = no->reg_mr(e->nic, s->buf, cap,
                        per_peer ? RKV_ACCESS_REMOTE_GRANT : RKV_ACCESS_REMOTE_WRITE, &s->mr);
    uint32_t rkey = rc == 0 ? s->mr->rkey : 0;
    if (rc == 0 && per_peer && (rc = no->mr_grant(p->qp, s->mr, &rkey, &s->grant)) < 0)
        no->dereg_mr(e->nic, s->mr);
    if (rc < 0) {
        free(s->raw);
        s->raw = NULL;
        s->buf = NULL;
        s->mr = NULL;
        s->grant = NULL;
        return rc;
    }
    s->cap = cap;
    s->state = state;
    if (state == ENG_SLOT_GRANTED) {
        e->granted_bytes += cap;
        s->used = ++e->use_tick; /* not the first asked back before its first message */
    }
    *d = (struct rkv_slot_desc){
        .addr = (uint64_t)(uintptr_t)s->buf, .rkey = rkey, .slot = i, .cap = cap};
    return 0;
}

/* Grants go before their QP does (nic.h: a window bound to a closed QP
 * is a leak the device waits for). */
static void peer_revoke_grants(struct rkv_engine *e, struct rkv_peer *p)
{
    for (uint32_t i = 0; i < p->lslot_cap; i++) {
        if (p->lslots[i].grant)
            e->nic->ops->mr_revoke(e->nic, p->lslots[i].grant);
        p->lslots[i].grant = NULL;
    }
}

static void peer_lslot_free(struct rkv_engine *e, struct eng_lslot *s)
{
    if (s->state == ENG_SLOT_FREE)
        return;
    if (s->state == ENG_SLOT_GRANTED) {
        assert(e->granted_bytes >= s->cap);
        e->granted_bytes -= s->cap;
    }
    if (s->revoking) {
        assert(e->revoking_bytes >= s->cap && e->n_revoking > 0);
        e->revoking_bytes -= s->cap;
        e->n_revoking--;
    }
    if (s->grant)
        e->nic->ops->mr_revoke(e->nic, s->grant);
    e->nic->ops->dereg_mr(e->nic, s->mr);
    free(s->raw);
    memset(s, 0, sizeof(*s));
}

int rkv_engine_slot_alloc(struct rkv_engine *e, struct rkv_peer *p, uint64_t cap,
                          struct rkv_slot_desc *desc_p)
{
    eng_lock(e);
    int rc = p->dead ? -RKV_EPEERDEAD : peer_lslot_new(e, p, cap, ENG_SLOT_OWNED, desc_p);
    eng_unlock(e);
    return rc;
}

void rkv_engine_slot_free(struct rkv_engine *e, struct rkv_peer *p, uint32_t slot)
{
    eng_lock(e);
    /* Never free a granted slot here: the peer may still write into it. */
    if (slot < p->lslot_cap && p->lslots[slot].state == ENG_SLOT_OWNED)
        peer_lslot_free(e, &p->lslots[slot]);
    eng_unlock(e);
}

/* ---- peers ---- */

static int peer_post_rx(struct rkv_engine *e, struct rkv_peer *p, uint32_t i)
{
    struct rkv_sge sge = {.addr = p->rx_mem + (size_t)i * e->cfg.ctrl_buf_bytes,
                          .len = e->cfg.ctrl_buf_bytes,
                          .mr = p->rx_mr};
    return e->nic->ops->post_recv(p->qp, ((uint64_t)i << 3) | ENG_WR_RX, &sge);
}

static void peer_list_add(struct rkv_peer **head, struct rkv_peer *p)
{
    assert(!p->pprev);
    p->next = *head;
    if (p->next)
        p->next->pprev = &p->next;
    *head = p;
    p->pprev = head;
}

/* Off whichever list it is on (none: nothing to do). */
static void peer_list_del(struct rkv_peer *p)
{
    if (!p->pprev)
        return;
    assert(*p->pprev == p);
    *p->pprev = p->next;
    if (p->next)
        p->next->pprev = p->pprev;
    p->next = NULL;
    p->pprev = NULL;
}

static void peer_free_rx(struct rkv_engine *e, struct rkv_peer *p)
{
    for (uint32_t i = 0; i < p->lslot_cap; i++)
        peer_lslot_free(e, &p->lslots[i]);
    if (p->rx_mr)
        e->nic->ops->dereg_mr(e->nic, p->rx_mr);
    free(p->rx_mem);
    p->rx_mr = NULL;
    p->rx_mem = NULL;
}

static void peer_free(struct rkv_engine *e, struct rkv_peer *p)
{
    struct rkv_tx *tx;
    while ((tx = peer_q_pop(e, p, &p->backlog)) != NULL)
        tx_put(e, tx);
    while ((tx = peer_q_pop(e, p, &p->waiting)) != NULL)
        tx_put(e, tx);
    peer_free_rx(e, p);
    free(p->lslots);
    free(p->rslots);
    free(p->releases);
    free(p);
}

/* Closes qp after the current poll batch, which may still name it; then
 * frees the receive memory of peer (if any), which the NIC no longer
 * touches once qp_close returned. */
static void eng_defer_close(struct rkv_engine *e, struct rkv_qp *qp, struct rkv_peer *peer)
{
    RKV_ASSERT_HELD(e->port, e->mu);
    rkv_qp_set_ctx(qp, NULL);
    if (e->n_closing == e->cap_closing) {
        uint32_t cap = e->cap_closing ? 2 * e->cap_closing : 16;
        struct eng_closing *n = realloc(e->closing, cap * sizeof(*n));
        if (!n) { /* out of memory: close now, keep the memory until destroy */
            if (peer)
                peer_revoke_grants(e, peer);
            e->nic->ops->qp_close(qp);
            if (peer)
                peer->closed = 1;
            return;
        }
        e->closing = n;
        e->cap_closing = cap;
    }
    e->closing[e->n_closing++] = (struct eng_closing){.qp = qp, .peer = peer};
}

/* Builds a peer around a connected QP and posts its receives; on failure
 * the QP is closed (after the batch). */
static int peer_new(struct rkv_engine *e, struct rkv_qp *qp, struct rkv_peer **peer_p)
{
    RKV_ASSERT_HELD(e->port, e->mu);
    const struct rkv_engine_cfg *c = &e->cfg;
    struct rkv_peer *p = calloc(1, sizeof(*p));
    if (!p)
        return -RKV_ENOMEM;
    p->eng = e;
    p->credits = c->rx_depth;
    p->slot_budget = c->max_slots / 2; /* until the peer says its grant */
    if (e->srq_mem) {                  /* receives come from the NIC's shared pool */
        p->qp = qp;
        rkv_qp_set_ctx(qp, p);
        peer_list_add(&e->peers, p);
        *peer_p = p;
        return 0;
    }
    /* The slot tables come with first use (peer_lslot_new, eng_on_rndv_reply). */
    size_t rx_bytes = (size_t)c->rx_depth * c->ctrl_buf_bytes;
    int rc = -RKV_ENOMEM;
    if (posix_memalign((void **)&p->rx_mem, 64, rx_bytes))
        goto free_peer;
    rc = e->nic->ops->reg_mr(e->nic, p->rx_mem, rx_bytes, RKV_ACCESS_LOCAL, &p->rx_mr);
    if (rc < 0)
        goto free_peer;
    p->qp = qp;
    rkv_qp_set_ctx(qp, p);
    for (uint32_t i = 0; i < c->rx_depth; i++) {
        rc = peer_post_rx(e, p, i);
        if (rc < 0)
            goto unset_qp;
    }
    peer_list_add(&e->peers, p);
    *peer_p = p;
    return 0;
unset_qp:
    /* Receives already posted: the NIC may write into rx_mem until the QP
     * is closed, so it is closed first and the peer goes after (a peer that
     * connected and left at once lands here: it must not stay). */
    peer_list_add(&e->zombies, p);
    p->dead = 1;
    p->released = 1;
    p->qp = NULL;
    eng_defer_close(e, qp, p);
    return rc;
free_peer:
    peer_free(e, p);
    eng_defer_close(e, qp, NULL);
    return rc;
}

int rkv_engine_connect(struct rkv_engine *e, const char *host, uint16_t port, uint32_t timeout_ms,
                       struct rkv_peer **peer_p)
{
    struct rkv_qp *qp;
    int rc = e->nic->ops->connect(e->nic, host, port, timeout_ms, &qp);
    if (rc < 0)
        return rc;
    eng_lock(e);
    rc = peer_new(e, qp, peer_p); /* on failure, it closes qp */
    eng_unlock(e);
    return rc;
}

/* How often a connect still retrying says so. */
#define ENG_CONNECT_SAY_NS 10000000000ull

int rkv_engine_connect_retry(struct rkv_engine *e, const char *host, uint16_t port,
                             uint32_t timeout_ms, uint32_t retry_ms, const atomic_int *cancel,
                             struct rkv_peer **peer_p)
{
    struct rkv_port *pt = e->port;
    uint64_t start = pt->ops->now_ns(pt), deadline = start + (uint64_t)retry_ms * 1000000ull;
    uint64_t next_say = start + ENG_CONNECT_SAY_NS;
    int rc;
    if (cancel && atomic_load(cancel))
        return -RKV_EINTR;
    while ((rc = rkv_engine_connect(e, host, port, timeout_ms, peer_p)) == -RKV_EPEERDEAD ||
           rc == -RKV_ETIMEDOUT) {
        if (cancel && atomic_load(cancel))
            return -RKV_EINTR;
        uint64_t now = pt->ops->now_ns(pt);
        if (now >= deadline)
            break;
        /* A worker started before its servers (or pointed at a wrong
         * address) said nothing for connect_retry_ms (30 s by default):
         * every 10 s it says what it waits for. */
        if (now >= next_say) {
            RKV_LOGW(pt,
                     "still connecting to %s:%u (%s); retrying for %llu s more (connect_retry_ms)",
                     host, port, rkv_engine_connect_strerror(rc),
                     (unsigned long long)((deadline - now + 999999999ull) / 1000000000ull));
            next_say = now + ENG_CONNECT_SAY_NS;
        }
        pt->ops->sleep_ns(pt, ENG_CONNECT_RETRY_NS);
    }
    return rc;
}

const char *rkv_engine_connect_strerror(int rc)
{
    /* The NIC contract (nic.h): connect gives -RKV_EPEERDEAD for a refusal:
     * on tcp ECONNREFUSED or ECONNRESET (no one listening at the address),
     * or a hang-up before the hello ended. The code stays EPEERDEAD, which
     * callers retry on. */
    if (rc == -RKV_EPEERDEAD)
        return "connection refused (nothing listening at that address, or it hung up during "
               "the handshake)";
    /* A wrong port is a common launch mistake: another service there
     * answers, or accepts and says nothing, and "malformed or unexpected
     * wire message" or "request timed out" alone did not point at it. */
    if (rc == -RKV_EPROTO)
        return "the peer there does not speak rkv's handshake (another service on that port?), "
               "or is an rkv node of another build or setting (its log says which)";
    if (rc == -RKV_ETIMEDOUT)
        return "no answer to rkv's handshake within timeout_ms (a host that drops the "
               "connection or has no route, or another service on that port)";
    return rkv_strerror(rc);
}

int rkv_engine_listen(struct rkv_engine *e, const char *host, uint16_t port)
{
    return e->nic->ops->listen(e->nic, host, port);
}

/* Takes a closed peer the owner released off the list and frees it: what
 * a peer holds must not outlive it, or every connection that came and went
 * would cost its memory until the engine stops. */
static void peer_reclaim(struct rkv_engine *e, struct rkv_peer *p)
{
    RKV_ASSERT_HELD(e->port, e->mu);
    assert(p->closed && p->released && !p->qp);
    if (p->waited)
        return; /* drop_peer_wait still looks at it; it reclaims it itself */
    peer_list_del(p);
    assert(!p->inflight.head && !p->backlog.head && !p->waiting.head);
    peer_free(e, p);
}

/* Once qp_close returned, no completion will name the QP any more: what
 * was posted on it and not completed comes back to the pool here. */
static void eng_close_deferred(struct rkv_engine *e)
{
    for (uint32_t i = 0; i < e->n_closing; i++) {
        struct rkv_peer *p = e->closing[i].peer;
        if (p)
            peer_revoke_grants(e, p);
        e->nic->ops->qp_close(e->closing[i].qp);
        if (!p)
            continue;
        p->closed = 1;
        peer_free_rx(e, p);
        struct rkv_tx *tx;
        while ((tx = txq_pop(&p->inflight)) != NULL) {
            e->st.tx_inflight--;
            tx_put(e, tx);
        }
        if (p->released)
            peer_reclaim(e, p);
    }
    int any = e->n_closing > 0;
    e->n_closing = 0;
    if (any && e->asks)
        eng_serve_asks(e);
}

void rkv_engine_peer_release(struct rkv_engine *e, struct rkv_peer *p)
{
    eng_lock(e);
    assert(!p->released);
    p->released = 1;
    peer_kill(e, p, 0); /* no-op for a dead peer */
    eng_down_forget(e, p);
    /* Not closed yet: eng_close_deferred reclaims it when it closes it. */
    if (p->closed)
        peer_reclaim(e, p);
    eng_unlock(e);
}

/* The QP's context is cleared at once, so completions of this
 * batch that name it find no peer; the QP itself is closed after the batch. */
static void peer_kill(struct rkv_engine *e, struct rkv_peer *p, int notify)
{
    RKV_ASSERT_HELD(e->port, e->mu);
    if (!p->qp)
        return;
    p->dead = 1;
    if (p->incoming) {
        assert(e->n_incoming > 0);
        p->incoming = 0;
        e->n_incoming--;
    }
    eng_defer_close(e, p->qp, p);
    p->qp = NULL;
    struct rkv_tx *tx;
    while ((tx = peer_q_pop(e, p, &p->backlog)) != NULL)
        tx_put(e, tx);
    while ((tx = peer_q_pop(e, p, &p->waiting)) != NULL)
        tx_put(e, tx);
    if (p->ask) /* the asks behind it are served at its close, with its slots */
        eng_ask_unlink(e, p->ask);
    if (notify && e->on_peer && !p->released) {
        assert(!p->down_due); /* one kill per peer: its qp is gone now */
        p->down_due = 1;
        p->down_next = e->down;
        e->down = p;
        eng_wake_poller(e); /* a sender's kill: the poller may be asleep */
    }
}

/* The owner released p: it hears nothing more of it. */
static void eng_down_forget(struct rkv_engine *e, struct rkv_peer *p)
{
    RKV_ASSERT_HELD(e->port, e->mu);
    if (!p->down_due)
        return;
    for (struct rkv_peer **pp = &e->down; *pp; pp = &(*pp)->down_next) {
        if (*pp == p) {
            *pp = p->down_next;
            break;
        }
    }
    p->down_due = 0;
}

/* The poller (poll_mu held) tells each killed peer's owner, the engine
 * lock dropped as for on_msg; kills during a callback join the list. */
static void eng_down_notify(struct rkv_engine *e)
{
    RKV_ASSERT_HELD(e->port, e->mu);
    struct rkv_peer *p;
    while ((p = e->down) != NULL) {
        e->down = p->down_next;
        p->down_due = 0;
        eng_unlock(e);
        e->on_peer(e->user, p, 0);
        eng_lock(e);
    }
}

void rkv_engine_drop_peer(struct rkv_engine *e, struct rkv_peer *p)
{
    eng_lock(e);
    peer_kill(e, p, 0);
    eng_unlock(e);
}

/* The progress task closes a killed peer's QP between poll batches; wait
 * for it (a short poll: this path follows a timeout or a failed post, never
 * the fast path). Bounded: a qp_close that blocks (a backend waiting on a
 * stuck send) or a progress task standing aside for an inline poller would
 * otherwise hold the caller forever. */
int rkv_engine_drop_peer_wait(struct rkv_engine *e, struct rkv_peer *p, uint32_t timeout_ms)
{
    const struct rkv_port_ops *po = e->port->ops;
    uint64_t deadline = po->now_ns(e->port) + (uint64_t)timeout_ms * 1000000ull;
    int rc = 0;
    eng_lock(e);
    peer_kill(e, p, 0);
    p->waited = 1;
    while (!p->closed && !e->stopping && e->task) {
        if (po->now_ns(e->port) >= deadline) {
            rc = -RKV_ETIMEDOUT;
            break;
        }
        eng_unlock(e);
        po->sleep_ns(e->port, 1000000ull);
        eng_lock(e);
    }
    p->waited = 0;
    if (p->closed && p->released)
        peer_reclaim(e, p);
    eng_unlock(e);
    return rc;
}

void rkv_engine_peer_grant(struct rkv_engine *e, struct rkv_peer *p, uint32_t max_slots)
{
    eng_lock(e);
    /* Half, as against a peer of this node's own max_slots: a slot being
     * retired still counts on the peer's side while its successor is
     * asked for. */
    uint32_t least = max_slots < e->cfg.max_slots ? max_slots : e->cfg.max_slots;
    p->slot_budget = least / 2 ? least / 2 : 1;
    eng_unlock(e);
}

void rkv_peer_set_user(struct rkv_peer *p, void *user)
{
    p->user = user;
}
void *rkv_peer_user(const struct rkv_peer *p)
{
    return p->user;
}
int rkv_peer_dead(const struct rkv_peer *p)
{
    return p->dead;
}

void rkv_engine_peer_identified(struct rkv_peer *p)
{
    p->identified = 1;
}

void rkv_engine_peer_superseded(struct rkv_peer *p)
{
    p->identified = 0;
}

/* ---- receive path ---- */

static void peer_take_release(struct rkv_peer *p, uint32_t release)
{
    if (release == 0)
        return;
    p->eng->st.releases++;
    for (uint32_t i = 0; i < p->n_rslots; i++) {
        if (p->rslots[i].d.slot == release - 1) {
            p->rslots[i].busy = 0;
            if (p->rslots[i].revoked) /* asked back while we wrote into it */
                peer_retire_at(p->eng, p, i);
            return;
        }
    }
}

/* The granter wants a slot back (its slot memory is short): given back
 * now when idle, else when its release comes. Not ours any more: our
 * RETIRE of it crossed the ask. */
static void eng_on_rndv_revoke(struct rkv_engine *e, struct rkv_peer *p, const struct rkv_msg *m)
{
    for (uint32_t i = 0; i < p->n_rslots; i++) {
        if (p->rslots[i].d.slot != m->h.count)
            continue;
        if (p->rslots[i].busy)
            p->rslots[i].revoked = 1;
        else
            peer_retire_at(e, p, i);
        return;
    }
}

/* ---- slot memory: grants, asks that wait, slots asked back ---- */

static void eng_ask_unlink(struct rkv_engine *e, struct eng_ask *a)
{
    RKV_ASSERT_HELD(e->port, e->mu);
    struct eng_ask **pp = &e->asks, *prev = NULL;
    while (*pp != a) {
        prev = *pp;
        pp = &(*pp)->next;
        assert(*pp); /* every ask is on the list */
    }
    *pp = a->next;
    if (e->asks_tail == a)
        e->asks_tail = prev;
    assert(e->asked_bytes >= a->cap);
    e->asked_bytes -= a->cap;
    a->peer->ask = NULL;
    free(a);
}

/* Asks holders for slots back, least recently used first, until the free
 * memory and what is on its way back cover the asks that wait. A holder
 * that is closing gives its slots back at its close. */
static void eng_revoke_for_asks(struct rkv_engine *e)
{
    RKV_ASSERT_HELD(e->port, e->mu);
    if (!e->asks) /* none waits (always so without a bound) */
        return;
    const uint64_t bound = e->cfg.slot_mem_bytes;
    assert(bound && e->granted_bytes <= bound && e->revoking_bytes <= e->granted_bytes);
    while (e->asks && bound - e->granted_bytes + e->revoking_bytes < e->asked_bytes) {
        struct rkv_peer *vp = NULL;
        struct eng_lslot *v = NULL;
        for (struct rkv_peer *q = e->peers; q; q = q->next) {
            for (uint32_t i = 0; !q->dead && i < q->lslot_cap; i++) {
                struct eng_lslot *l = &q->lslots[i];
                if (l->state == ENG_SLOT_GRANTED && !l->revoking && (!v || l->used < v->used)) {
                    v = l;
                    vp = q;
                }
            }
        }
        if (!v)
            return;
        v->revoking = 1;
        v->revoke_ns = e->port->ops->now_ns(e->port);
        e->revoking_bytes += v->cap;
        e->n_revoking++;
        e->st.slot_revokes++;
        struct rkv_hdr h = {.type = RKV_MSG_RNDV_REVOKE, .count = (uint32_t)(v - vp->lslots)};
        peer_ctrl(e, vp, &h, NULL, 0); /* a failed post kills vp: its slots go at its close */
    }
}

static void eng_grant(struct rkv_engine *e, struct rkv_peer *p, struct rkv_hdr *h, uint64_t bytes);

/* Grants the asks that wait, in order, while memory is free. */
static void eng_serve_asks(struct rkv_engine *e)
{
    RKV_ASSERT_HELD(e->port, e->mu);
    struct eng_ask *a;
    while ((a = e->asks) != NULL && a->cap <= e->cfg.slot_mem_bytes - e->granted_bytes) {
        struct rkv_peer *p = a->peer;
        struct rkv_hdr h = {.type = RKV_MSG_RNDV_REPLY,
                            .req_id = a->req_id,
                            .tensor_id = a->tensor_id,
                            .op = a->op};
        uint64_t bytes = a->bytes;
        eng_ask_unlink(e, a);
        eng_grant(e, p, &h, bytes);
    }
    eng_revoke_for_asks(e);
}

/* A holder that keeps a slot it was asked back for the grace
 * (since the ask, or since its last message in it) is dropped: its slots
 * come back at its close. Looked at every ENG_REVOKE_CHECK_NS while any
 * slot is asked back. */
static void eng_revoke_overdue(struct rkv_engine *e)
{
    RKV_ASSERT_HELD(e->port, e->mu);
    uint64_t now = e->port->ops->now_ns(e->port);
    if (now < e->revoke_check_ns)
        return;
    e->revoke_check_ns = now + ENG_REVOKE_CHECK_NS;
    for (struct rkv_peer *q = e->peers; q; q = q->next) {
        for (uint32_t i = 0; !q->dead && i < q->lslot_cap; i++) {
            const struct eng_lslot *l = &q->lslots[i];
            if (l->state == ENG_SLOT_GRANTED && l->revoking &&
                now - l->revoke_ns > (uint64_t)e->cfg.revoke_grace_ms * 1000000ull) {
                RKV_LOGW(e->port,
                         "engine: a peer kept a %llu-byte slot %u ms after it was asked "
                         "for it back; dropping it",
                         (unsigned long long)l->cap, e->cfg.revoke_grace_ms);
                peer_kill(e, q, 1);
            }
        }
    }
}

/* Grants p a slot for a message of `bytes` and answers its ask (h, an
 * RNDV_REPLY), or refuses it saying why. */
static void eng_grant(struct rkv_engine *e, struct rkv_peer *p, struct rkv_hdr *h, uint64_t bytes)
{
    struct rkv_slot_desc d = {0};
    int rc = p->dead  ? -RKV_EPEERDEAD
             : p->ask ? -RKV_ELIMIT
                      : peer_lslot_new(e, p, bytes, ENG_SLOT_GRANTED, &d);
    uint64_t quiet = 0;
    if (rc < 0 &&
        rkv_ratelim_ok(&e->lim_slot, e->port->ops->now_ns(e->port), RKV_RATELIM_BURST, &quiet)) {
        const struct rkv_engine_cfg *c = &e->cfg;
        char why[128];
        /* A full memory bound is back-pressure the sender meets by giving
         * slots back: info; the rest are a peer asking past its limits. */
        int level = RKV_LOG_WARN;
        if (rc != -RKV_ELIMIT)
            snprintf(why, sizeof(why), "%s", rkv_strerror(rc));
        else if (p->ask)
            snprintf(why, sizeof(why), "the peer's last ask still waits for slot memory");
        else if (bytes > c->max_slot_bytes)
            snprintf(why, sizeof(why), "above max_slot_bytes %llu",
                     (unsigned long long)c->max_slot_bytes);
        else if (c->slot_mem_bytes && eng_slot_cap(e, bytes) > c->slot_mem_bytes)
            snprintf(why, sizeof(why), "its slot of %llu bytes is more than slot_mem_bytes %llu",
                     (unsigned long long)eng_slot_cap(e, bytes),
                     (unsigned long long)c->slot_mem_bytes);
        else if (c->slot_mem_bytes &&
                 eng_slot_cap(e, bytes) > c->slot_mem_bytes - e->granted_bytes) {
            level = RKV_LOG_INFO;
            snprintf(why, sizeof(why), "%llu of slot_mem_bytes %llu are granted to peers",
                     (unsigned long long)e->granted_bytes, (unsigned long long)c->slot_mem_bytes);
        } else {
            snprintf(why, sizeof(why), "the peer holds all %u of its slots", c->max_slots);
        }
        rkv_port_log(e->port, level,
                     "engine: refusing a %llu-byte slot: %s (%llu such lines suppressed)",
                     (unsigned long long)bytes, why, (unsigned long long)quiet);
    }
    if (rc < 0) {
        h->status = rc;
        d = (struct rkv_slot_desc){.cap = RKV_PROTO_HDR_BYTES};
    }
    peer_ctrl(e, p, h, &d, 0);
}

/* An ask whose slot does not fit in the free slot memory, or that comes
 * while others wait, waits for it (first come, first served): slots are
 * asked back from their holders meanwhile. One that could never fit, or a
 * second one from a peer, is refused at once. */
static void eng_on_rndv_start(struct rkv_engine *e, struct rkv_peer *p, const struct rkv_msg *m)
{
    struct rkv_hdr h = {.type = RKV_MSG_RNDV_REPLY,
                        .req_id = m->h.req_id,
                        .tensor_id = m->h.tensor_id,
                        .op = m->h.op};
    const uint64_t bound = e->cfg.slot_mem_bytes, bytes = m->u.rndv_bytes;
    const uint64_t cap = bytes <= e->cfg.max_slot_bytes ? eng_slot_cap(e, bytes) : UINT64_MAX;
    /* A peer killed earlier in this dispatch (a RETIRE its release caused
     * failed) is not queued: its ask would outlive it. */
    if (!bound || p->dead || cap > bound || p->ask || (!e->asks && cap <= bound - e->granted_bytes))
        return eng_grant(e, p, &h, bytes);
    struct eng_ask *a = malloc(sizeof(*a));
    if (!a)
        return eng_grant(e, p, &h, bytes); /* refused for want of memory, as it would be */
    *a = (struct eng_ask){.peer = p,
                          .req_id = m->h.req_id,
                          .bytes = bytes,
                          .cap = cap,
                          .tensor_id = m->h.tensor_id,
                          .op = m->h.op};
    if (e->asks_tail)
        e->asks_tail->next = a;
    else
        e->asks = a;
    e->asks_tail = a;
    e->asked_bytes += cap;
    p->ask = a;
    e->st.slot_waits++;
    RKV_LOGD(e->port, "engine: a %llu-byte slot waits for slot memory (%llu of %llu granted)",
             (unsigned long long)bytes, (unsigned long long)e->granted_bytes,
             (unsigned long long)bound);
    eng_revoke_for_asks(e);
}

static void eng_reject(struct rkv_engine *e, struct rkv_peer *p, const char *why);

static void eng_on_rndv_reply(struct rkv_engine *e, struct rkv_peer *p, const struct rkv_msg *m)
{
    uint32_t key = (m->h.tensor_id << 8) | (m->h.op & 0xff);
    if (p->rndv_inflight > 0)
        p->rndv_inflight--;
    struct rkv_tx *head = p->waiting.head;
    if (m->h.status < 0) {
        /* Only the head of the queue asks, so the refusal is for it. */
        if (head && head->rndv_asked && eng_key_of(head->buf) == key) {
            /* A limit at the granter (its slot memory, or our slots there):
             * an idle slot we keep there goes back first (the RETIRE goes
             * ahead of the new ask on the connection), and we ask again;
             * each round retires one, so this ends. */
            if (m->h.status == -RKV_ELIMIT && peer_retire_idle(e, p)) {
                if (p->dead)
                    return; /* the RETIRE's post failed: the kill took the queue */
                head->rndv_asked = 0;
                peer_run_waiting(e, p);
                return;
            }
            peer_q_pop(e, p, &p->waiting);
            eng_fail_tx(e, p, head, m->h.status);
        }
        peer_run_waiting(e, p);
        return;
    }
    /* A protocol error like any malformed message, logged rate-limited
     * with them: a line per connection was a flood from peers that come
     * and go. */
    if (p->n_rslots >= e->cfg.max_slots)
        return eng_reject(e, p, "peer granted more slots than max_slots");
    if (p->n_rslots == p->rslot_cap && eng_slots_grow((void **)&p->rslots, &p->rslot_cap,
                                                      sizeof(*p->rslots), e->cfg.max_slots) < 0) {
        RKV_LOGW(e->port, "engine: out of memory for a granted slot; dropping the peer");
        peer_kill(e, p, 1);
        return;
    }
    p->rslots[p->n_rslots++] = (struct eng_rslot){.key = key, .d = m->u.slot, .busy = 0};
    peer_run_waiting(e, p);
}

static void eng_on_rndv_retire(struct rkv_engine *e, struct rkv_peer *p, const struct rkv_msg *m)
{
    uint32_t s = m->h.count;
    if (s < p->lslot_cap && p->lslots[s].state == ENG_SLOT_GRANTED) {
        peer_lslot_free(e, &p->lslots[s]);
        eng_serve_asks(e);
        return;
    }
    /* Rate-limited: a peer may send it in a loop (it harms nothing else,
     * so the peer is not dropped for it). */
    rkv_port_warn_limited(e->port, &e->lim_slot,
                          "engine: peer retired slot %u, which it was not granted", s);
}

/* on_msg under a "recv TYPE" span (the handler's time on this thread),
 * where the message's arrow ends. */
static void eng_traced_msg(struct rkv_engine *e, struct rkv_peer *p, const struct rkv_msg *m)
{
    struct rkv_trace *tr = e->port->trace;
    uint64_t t0 = rkv_trace_now_ns(tr);
    struct rkv_hdr h = m->h; /* m is valid only during the call */
    e->on_msg(e->user, p, m);
    char name[40];
    snprintf(name, sizeof(name), "recv %s", rkv_msg_type_name(h.type));
    rkv_trace_span(tr, name, "net", t0, rkv_trace_now_ns(tr), h.sender, h.count, h.payload_len);
    if (h.req_id) /* see eng_trace_send */
        rkv_trace_flow(tr, 0, eng_flow_id(&h), t0);
}

/* Internal types are handled here; the rest go to the owner, unlocked. */

static void eng_dispatch(struct rkv_engine *e, struct rkv_peer *p, const struct rkv_msg *m,
                         uint32_t granted_slot)
{
    /* A peer cannot return more receives than we ever consumed. */
    if ((uint64_t)p->credits + m->h.credits > e->cfg.rx_depth)
        return eng_reject(e, p, "peer returned more credits than it was given");
    p->credits += m->h.credits;
    peer_take_release(p, m->h.release);
    if (m->h.credits || m->h.release)
        peer_run_waiting(e, p);
    switch (m->h.type) {
    case RKV_MSG_CREDIT:
        break;
    case RKV_MSG_RNDV_START:
        eng_on_rndv_start(e, p, m);
        break;
    case RKV_MSG_RNDV_REPLY:
        eng_on_rndv_reply(e, p, m);
        break;
    case RKV_MSG_RNDV_RETIRE:
        eng_on_rndv_retire(e, p, m);
        break;
    case RKV_MSG_RNDV_REVOKE:
        eng_on_rndv_revoke(e, p, m);
        break;
    default:
        p->release_due = granted_slot;
        eng_unlock(e);
        if (e->port->trace)
            eng_traced_msg(e, p, m);
        else
            e->on_msg(e->user, p, m);
        eng_lock(e);
        /* Not carried by a reply: give it back explicitly. */
        if (p->release_due && p->n_releases < p->lslot_cap) {
            assert(p->releases);
            p->releases[p->n_releases++] = p->release_due - 1;
        }
        p->release_due = 0;
        break;
    }
    peer_flush_backlog(e, p);
}

static void eng_reject(struct rkv_engine *e, struct rkv_peer *p, const char *why)
{
    e->st.rejected++;
    rkv_port_warn_limited(e->port, &e->lim_reject,
                          "engine: closing connection after malformed message: %s", why);
    peer_kill(e, p, 1);
}

/* Decodes a message that came in a rendezvous slot. The slot stays open
 * to its peer's WRITEs while the message is handled (tcp lands them from
 * its own thread once the engine has been away 10 ms; a verbs device at
 * any time), so nothing that is checked and then used to address memory
 * may be read from it twice: a peer rewrote a PUSH's ids between
 * rkv_tensor_check_ids and the apply, and the server wrote, or read back
 * to it, memory outside the shard (SIGSEGV; the shard's header in a
 * PULL_REPLY). A PUSH's ids are copied out after the decode (the decoder
 * does not look at them; the server checks the copy); a PUSH's and a
 * PULL_REPLY's rows are values, read once, and stay in the slot; every
 * other message (a PULL's ids, PULL_ZC's positions, a tensor's book, a
 * list) is copied whole and decoded from the copy, since the decoder
 * checks its entries. *own_p: what to free after the dispatch (NULL:
 * nothing). */
static int eng_decode_slot(const uint8_t *buf, uint64_t len, uint8_t type, struct rkv_msg *m,
                           void **own_p, char *why, size_t why_len)
{
    *own_p = NULL;
    if (type == RKV_MSG_PUSH || type == RKV_MSG_PULL_REPLY) {
        int rc = rkv_proto_decode(buf, len, m, why, why_len);
        if (rc < 0)
            return rc;
        /* The header is read again by the decode: a type rewritten since
         * would be decoded with its arrays in the slot. */
        if (m->h.type != type)
            return rkv_errf(why, why_len, -RKV_EPROTO,
                            "the message in a slot changed while it was read");
        if (type == RKV_MSG_PULL_REPLY || !m->h.count)
            return 0;
        uint64_t *ids = malloc((size_t)m->h.count * sizeof(*ids));
        if (!ids)
            return rkv_errf(why, why_len, -RKV_ENOMEM, "out of memory for a PUSH's %u ids",
                            m->h.count);
        memcpy(ids, m->u.push.ids, (size_t)m->h.count * sizeof(*ids));
        m->u.push.ids = ids;
        *own_p = ids;
        return 0;
    }
    uint8_t *copy = malloc((size_t)len);
    if (!copy)
        return rkv_errf(why, why_len, -RKV_ENOMEM, "out of memory for a %llu-byte message",
                        (unsigned long long)len);
    memcpy(copy, buf, (size_t)len);
    int rc = rkv_proto_decode(copy, len, m, why, why_len);
    if (rc < 0) {
        free(copy);
        return rc;
    }
    *own_p = copy;
    return 0;
}

static void eng_on_recv(struct rkv_engine *e, struct rkv_peer *p, const struct rkv_wc *wc)
{
    uint32_t i = (uint32_t)(wc->wr_id >> (e->srq_mem ? 8 : 3));
    char why[160];
    struct rkv_msg m;
    if (RKV_NEVER(i >= (e->srq_mem ? e->srq_count : e->cfg.rx_depth)))
        return eng_reject(e, p, "receive completion for an unknown buffer");
    const uint8_t *buf = (e->srq_mem ? e->srq_mem : p->rx_mem) + (size_t)i * e->cfg.ctrl_buf_bytes;
    if (wc->opcode == RKV_WC_RECV) {
        if (rkv_proto_decode(buf, wc->byte_len, &m, why, sizeof(why)) < 0)
            return eng_reject(e, p, why);
        eng_dispatch(e, p, &m, 0);
    } else {
        /* The receive carried no data: repost it before looking at the slot. */
        uint32_t s = wc->imm;
        if (s >= p->lslot_cap || p->lslots[s].state == ENG_SLOT_FREE)
            return eng_reject(e, p, "write-with-immediate names no slot of ours");
        if (wc->byte_len > p->lslots[s].cap)
            return eng_reject(e, p, "write-with-immediate longer than its slot");
        /* A message written in pieces (rkv_engine_send_ext) completes with
         * its last piece, the header: the header says how long it is. */
        uint64_t len = wc->byte_len;
        struct rkv_hdr hh;
        if (rkv_proto_decode_hdr(p->lslots[s].buf, len, &hh, why, sizeof(why)) < 0)
            return eng_reject(e, p, why);
        if (hh.payload_len > p->lslots[s].cap - RKV_PROTO_HDR_BYTES)
            return eng_reject(e, p, "message longer than its slot");
        if (RKV_PROTO_HDR_BYTES + hh.payload_len > len)
            len = RKV_PROTO_HDR_BYTES + hh.payload_len;
        void *own = NULL;
        int rc = eng_decode_slot(p->lslots[s].buf, len, hh.type, &m, &own, why, sizeof(why));
        if (rc == -RKV_ENOMEM) { /* not the peer's fault: no "malformed" count */
            rkv_port_warn_limited(e->port, &e->lim_reject, "engine: closing a connection: %s", why);
            return peer_kill(e, p, 1);
        }
        if (rc < 0)
            return eng_reject(e, p, why);
        int granted = p->lslots[s].state == ENG_SLOT_GRANTED;
        p->lslots[s].used = ++e->use_tick;
        /* Its holder was busy with it: the grace starts again, once. A
         * holder writes a slot again only after its release, and retires
         * it then if asked, so one message at most comes after the ask; a
         * holder that kept writing restarted the grace each time and kept
         * the slot's memory for good (an outside tester held 4 x 16 MiB of
         * 64 with a message every 300 ms, and others' pushes timed out). */
        if (p->lslots[s].revoking && !p->lslots[s].revoke_late) {
            p->lslots[s].revoke_ns = e->port->ops->now_ns(e->port);
            p->lslots[s].revoke_late = 1;
        }
        eng_dispatch(e, p, &m, granted ? s + 1 : 0);
        free(own);
    }
    if (e->srq_mem) {
        /* eng_on_wc gives the shared buffer back; the credit is the peer's. */
        if (p->qp && !p->dead)
            p->owed++;
    } else if (p->qp && peer_post_rx(e, p, i) == 0) {
        p->owed++;
    }
}

/* At the bound of incoming connections: drops the oldest that its owner
 * never identified (a client's accepted HELLO, a server's registration),
 * or whose claim a newer connection made (rkv_engine_peer_superseded),
 * and that connected a grace (revoke_grace_ms) or longer ago, to make room.
 * 68 connections that proved the secret and never said HELLO locked every
 * new worker out for good, and then 72 that each claimed client id 0 or 1
 * at a server other than 0, which cannot check a claim (outside testers);
 * a message of any other kind (a CREDIT) does not keep one. Returns 1 when
 * one went. */
static int eng_evict_silent(struct rkv_engine *e)
{
    uint64_t now = e->port->ops->now_ns(e->port);
    uint64_t grace = (uint64_t)e->cfg.revoke_grace_ms * 1000000ull;
    struct rkv_peer *oldest = NULL;
    for (struct rkv_peer *q = e->peers; q; q = q->next)
        if (q->incoming && !q->dead && !q->identified && now - q->born_ns >= grace &&
            (!oldest || q->born_ns < oldest->born_ns))
            oldest = q;
    if (!oldest)
        return 0;
    rkv_port_warn_limited(e->port, &e->lim_conns,
                          "engine: %u connections to this node, its bound: dropping one that has "
                          "not said who it is (or whose claim a newer one made) in the %llu ms "
                          "since it connected, to take another",
                          e->n_incoming, (unsigned long long)((now - oldest->born_ns) / 1000000));
    peer_kill(e, oldest, 1);
    return 1;
}

static void eng_on_connected(struct rkv_engine *e, struct rkv_qp *qp)
{
    /* Each peer is bounded; the peers were not: 2,000 connections that
     * proved the secret and used their receive buffers held 1.1 GB of a
     * server, up to the descriptor limit (an outside tester). */
    if (e->cfg.max_incoming && e->n_incoming >= e->cfg.max_incoming && !eng_evict_silent(e)) {
        rkv_port_warn_limited(e->port, &e->lim_conns,
                              "engine: %u connections to this node already, its bound: refusing "
                              "another",
                              e->n_incoming);
        eng_defer_close(e, qp, NULL);
        return;
    }
    struct rkv_peer *p;
    int rc = peer_new(e, qp, &p);
    if (rc < 0) {
        /* A peer gone before its receives were posted only left: a flood of
         * such connections must not flood the log. */
        rkv_port_log(e->port, rc == -RKV_EPEERDEAD ? RKV_LOG_DEBUG : RKV_LOG_WARN,
                     "engine: cannot set up an incoming connection: %s", rkv_strerror(rc));
        return; /* peer_new closes qp */
    }
    p->incoming = 1;
    p->born_ns = e->port->ops->now_ns(e->port);
    e->n_incoming++;
    if (e->on_peer) {
        eng_unlock(e);
        e->on_peer(e->user, p, 1);
        eng_lock(e);
    }
}

static void eng_on_wc_peer(struct rkv_engine *e, const struct rkv_wc *wc);

static void eng_on_wc(struct rkv_engine *e, const struct rkv_wc *wc)
{
    eng_on_wc_peer(e, wc);
    /* A shared receive goes back to the pool whatever became of its peer
     * (its message was handled, or the peer is gone). */
    if (e->srq_mem && (wc->opcode == RKV_WC_RECV || wc->opcode == RKV_WC_RECV_IMM) &&
        (wc->wr_id & ENG_WR_TAG_MASK) == ENG_WR_RX)
        e->nic->ops->srq_repost(e->nic, (uint32_t)(wc->wr_id >> 8));
}

static void eng_on_wc_peer(struct rkv_engine *e, const struct rkv_wc *wc)
{
    if (wc->opcode == RKV_WC_CONNECTED)
        return eng_on_connected(e, wc->qp);
    struct rkv_peer *p = rkv_qp_ctx(wc->qp);
    if ((wc->wr_id & ENG_WR_TAG_MASK) == ENG_WR_PUT) {
        if (wc->status != RKV_WC_SUCCESS && p)
            peer_kill(e, p, 1);
        return;
    }
    if ((wc->wr_id & ENG_WR_TAG_MASK) == ENG_WR_TX) {
        struct rkv_tx *tx = (struct rkv_tx *)(uintptr_t)(wc->wr_id & ~(uint64_t)ENG_WR_TAG_MASK);
        if (tx->owner) {
            txq_remove(&tx->owner->inflight, tx);
            e->st.tx_inflight--;
        }
        tx_put(e, tx);
        if (wc->status != RKV_WC_SUCCESS && p)
            peer_kill(e, p, 1);
        return;
    }
    if (!p)
        return;
    if (!p->touched) {
        p->touched = 1;
        p->touched_next = e->touched;
        e->touched = p;
    }
    if (wc->opcode == RKV_WC_DISCONNECTED || wc->status != RKV_WC_SUCCESS)
        return peer_kill(e, p, 1);
    eng_on_recv(e, p, wc);
}

/* Ends the NIC wait of the progress task (or of an inline poller), once
 * stopping is set: each sees it when its poll returns. */
static void eng_wake_poller(struct rkv_engine *e)
{
    if (e->nic->ops->poll_wake)
        e->nic->ops->poll_wake(e->nic);
}

/* Polls the NIC once (waiting up to timeout_ms) and handles what came.
 * Returns the completions handled, or -1 once the engine is stopping. */
static int eng_poll_batch(struct rkv_engine *e, uint32_t timeout_ms)
{
    struct rkv_wc wc[ENG_POLL_BATCH];
    e->port->ops->mutex_lock(e->poll_mu);
    int n = e->nic->ops->poll(e->nic, wc, ENG_POLL_BATCH, timeout_ms);
    eng_lock(e);
    if (e->stopping) {
        eng_unlock(e);
        e->port->ops->mutex_unlock(e->poll_mu);
        /* The wake-up of rkv_engine_stop may have ended this poll, not the
         * progress task's: pass it on. */
        eng_wake_poller(e);
        return -1;
    }
    for (int i = 0; i < n; i++)
        eng_on_wc(e, &wc[i]);
    for (struct rkv_peer *p = e->touched; p; p = p->touched_next) {
        peer_maybe_credit(e, p);
        p->touched = 0;
    }
    e->touched = NULL;
    eng_close_deferred(e);
    if (e->n_revoking)
        eng_revoke_overdue(e);
    eng_down_notify(e);
    eng_unlock(e);
    e->port->ops->mutex_unlock(e->poll_mu);
    return n;
}

static int eng_stopping(struct rkv_engine *e)
{
    eng_lock(e);
    int stopping = e->stopping;
    eng_unlock(e);
    return stopping;
}

static void eng_progress(void *arg)
{
    struct rkv_engine *e = arg;
    const struct rkv_port_ops *po = e->port->ops;
    uint64_t last_ns = 0; /* when the last completion was handled */
    for (;;) {
        if (!e->cfg.busy_poll && e->nic->ops->cq_wait) {
            /* Waits without poll_mu: a waiter may poll meanwhile (cq_doorbell). */
            (void)e->nic->ops->cq_wait(e->nic, ENG_POLL_MS);
            if (eng_poll_batch(e, 0) < 0)
                return;
            continue;
        }
        if (!e->cfg.busy_poll) {
            if (eng_poll_batch(e, ENG_POLL_MS) < 0)
                return;
            continue;
        }
        /* One spinner per side is the point: while a waiting thread polls,
         * this task only sleeps. Flag first, then look (the inline poller
         * counts itself first, then looks): one of the two sees the other. */
        atomic_store(&e->task_polling, 1);
        if (atomic_load(&e->inline_pollers) > 0) {
            atomic_store(&e->task_polling, 0);
            if (eng_stopping(e))
                return;
            po->sleep_ns(e->port, ENG_STAND_ASIDE_NS);
            continue;
        }
        int spin = po->now_ns(e->port) - last_ns < ENG_SPIN_NS;
        int n = eng_poll_batch(e, spin ? 0 : ENG_POLL_MS);
        atomic_store(&e->task_polling, 0);
        if (n < 0)
            return;
        if (n > 0)
            last_ns = po->now_ns(e->port);
        else if (spin)
            po->yield(e->port);
    }
}

/* rkv_engine_wait's busy part: polls inline until done, the deadline, or
 * ENG_SPIN_NS without a completion. mu held; dropped while polling, as the
 * callbacks take it. */
static void eng_wait_inline(struct rkv_engine *e, rkv_engine_done_fn done, void *arg,
                            struct rkv_mutex *mu, uint64_t deadline_ns)
{
    const struct rkv_port_ops *po = e->port->ops;
    uint64_t last_ns = po->now_ns(e->port);
    po->mutex_unlock(mu); /* begin waits for the progress task's batch, whose callbacks lock */
    rkv_engine_inline_begin(e);
    po->mutex_lock(mu);
    while (!done(arg)) {
        uint64_t now = po->now_ns(e->port);
        if (now >= deadline_ns || now - last_ns >= ENG_SPIN_NS)
            break;
        po->mutex_unlock(mu);
        if (rkv_engine_poll_inline(e) > 0)
            last_ns = po->now_ns(e->port);
        else
            po->yield(e->port);
        po->mutex_lock(mu);
    }
    rkv_engine_inline_end(e);
}

/* rkv_engine_wait on a NIC with a doorbell (nic.h cq_doorbell): polls what
 * the CQ holds, else sleeps on cv, which both a completion's arrival and
 * a callback that ends the wait signal. The progress task sleeps on:
 * in a twin run this takes one wake-up per reply out of two. */
static int eng_wait_doorbell(struct rkv_engine *e, rkv_engine_done_fn done, void *arg,
                             struct rkv_mutex *mu, struct rkv_cond *cv, uint64_t deadline_ns)
{
    const struct rkv_port_ops *po = e->port->ops;
    int ok = 1, stopping = 0;
    while (!done(arg)) {
        uint64_t now = po->now_ns(e->port);
        if (now >= deadline_ns) {
            ok = 0;
            break;
        }
        int rung = stopping ? 0 : e->nic->ops->cq_doorbell(e->nic, cv);
        if (rung < 0) { /* not now (nic.h): wait as without one */
            ok = -1;
            break;
        }
        if (rung > 0) {
            po->mutex_unlock(mu);
            stopping = eng_poll_batch(e, 0) < 0; /* then it takes nothing: wait */
            po->mutex_lock(mu);
            continue;
        }
        po->cond_wait(cv, mu, deadline_ns - now);
    }
    e->nic->ops->cq_doorbell(e->nic, NULL);
    atomic_store(&e->doorbell_held, 0);
    return ok;
}

int rkv_engine_wait(struct rkv_engine *e, rkv_engine_done_fn done, void *arg, struct rkv_mutex *mu,
                    struct rkv_cond *cv, uint64_t deadline_ns)
{
    assert(e && done && mu && cv);
    const struct rkv_port_ops *po = e->port->ops;
    if (done(arg))
        return 1;
    if (!e->cfg.busy_poll && e->nic->ops->cq_doorbell && !atomic_exchange(&e->doorbell_held, 1)) {
        int rc = eng_wait_doorbell(e, done, arg, mu, cv, deadline_ns);
        if (rc >= 0)
            return rc;
    }
    if (e->cfg.busy_poll)
        eng_wait_inline(e, done, arg, mu, deadline_ns);
    while (!done(arg)) {
        uint64_t now = po->now_ns(e->port);
        if (now >= deadline_ns)
            return 0;
        po->cond_wait(cv, mu, deadline_ns - now);
    }
    return 1;
}

void rkv_engine_inline_begin(struct rkv_engine *e)
{
    atomic_fetch_add(&e->inline_pollers, 1);
    /* The progress task finishes its batch and stands aside; a blocking
     * one (it slept in the NIC) may hold on until its next completion. */
    while (atomic_load(&e->task_polling))
        e->port->ops->yield(e->port);
}

int rkv_engine_poll_inline(struct rkv_engine *e)
{
    assert(atomic_load(&e->inline_pollers) > 0);
    int n = eng_poll_batch(e, 0);
    return n < 0 ? 0 : n;
}

void rkv_engine_inline_end(struct rkv_engine *e)
{
    int before = atomic_fetch_sub(&e->inline_pollers, 1);
    assert(before > 0);
    (void)before;
}

/* ---- life cycle ---- */

int rkv_engine_create(struct rkv_port *port, struct rkv_nic *nic, const struct rkv_engine_cfg *cfg,
                      rkv_engine_msg_fn on_msg, rkv_engine_peer_fn on_peer, void *user,
                      struct rkv_engine **eng_p, char *err, size_t err_len)
{
    if (cfg->rx_depth < 4 || cfg->ctrl_buf_bytes < 256 || cfg->max_slots < 2 ||
        cfg->max_slot_bytes < cfg->ctrl_buf_bytes || !on_msg)
        return rkv_errf(err, err_len, -RKV_EINVAL,
                        "engine: need rx_depth >= 4, ctrl_buf_bytes >= 256, max_slots >= 2 and "
                        "max_slot_bytes >= ctrl_buf_bytes");
    assert(port && nic && eng_p);
    struct rkv_engine *e = calloc(1, sizeof(*e));
    if (!e)
        return rkv_errf(err, err_len, -RKV_ENOMEM, "engine: out of memory");
    e->port = port;
    e->nic = nic;
    e->cfg = *cfg;
    if (!e->cfg.revoke_grace_ms)
        e->cfg.revoke_grace_ms = ENG_REVOKE_GRACE_MS;
    e->max_backlog = cfg->max_backlog ? cfg->max_backlog : ENG_MAX_QUEUED;
    e->on_msg = on_msg;
    e->on_peer = on_peer;
    e->user = user;
    atomic_init(&e->inline_pollers, 0);
    atomic_init(&e->task_polling, 0);
    atomic_init(&e->doorbell_held, 0);
    rkv_nic_set_poll_gap(nic, ENG_POLL_GAP_NS);
    int rc = port->ops->mutex_create(port, &e->mu);
    if (rc == 0 && (rc = port->ops->mutex_create(port, &e->poll_mu)) < 0)
        port->ops->mutex_destroy(e->mu);
    if (rc < 0) {
        free(e);
        return rkv_errf(err, err_len, rc, "engine: cannot create its mutexes");
    }
    if (cfg->reg_cache_entries &&
        (rc = rkv_regcache_init(&e->regs, nic, cfg->reg_cache_entries, cfg->reg_cache_bytes)) < 0) {
        port->ops->mutex_destroy(e->poll_mu);
        port->ops->mutex_destroy(e->mu);
        free(e);
        return rkv_errf(err, err_len, rc, "engine: cannot create its registration cache");
    }
    if (nic->ops->srq_setup) {
        /* One receive pool for every peer: memory that does not grow with
         * them. A NIC that cannot (now) falls back to receives per peer. */
        uint32_t count = ENG_SRQ_WINDOWS * cfg->rx_depth;
        if (nic->ops->srq_setup(nic, &count, cfg->ctrl_buf_bytes, ENG_WR_RX, &e->srq_mem) == 0)
            e->srq_count = count;
        else
            e->srq_mem = NULL;
    }
    *eng_p = e;
    return 0;
}

int rkv_engine_start(struct rkv_engine *e)
{
    assert(!e->task);
    return e->port->ops->task_start(e->port, "engine", eng_progress, e, &e->task);
}

void rkv_engine_stop(struct rkv_engine *e)
{
    if (e->stopped)
        return;
    eng_lock(e);
    e->stopping = 1;
    eng_unlock(e);
    eng_wake_poller(e); /* not to sit out the progress task's ENG_POLL_MS */
    if (e->task)
        e->port->ops->task_join(e->port, e->task);
    e->task = NULL;
    /* Close every QP before freeing what the NIC may still write into. No
     * task polls any more; the lock is the one the helpers expect. */
    eng_lock(e);
    for (struct rkv_peer *p = e->peers; p; p = p->next)
        peer_kill(e, p, 0);
    eng_close_deferred(e);
    assert(e->n_closing == 0);
    eng_unlock(e);
    e->stopped = 1;
}

void rkv_engine_destroy(struct rkv_engine *e)
{
    if (!e)
        return;
    rkv_engine_stop(e);
    if (e->cfg.reg_cache_entries)
        rkv_regcache_fini(&e->regs);
    free(e->closing);
    struct eng_ask *a;
    while ((a = e->asks) != NULL) {
        e->asks = a->next;
        a->peer->ask = NULL;
        free(a);
    }
    struct rkv_peer *p;
    while ((p = e->peers) != NULL || (p = e->zombies) != NULL) {
        peer_list_del(p);
        peer_free(e, p);
    }
    struct rkv_tx *tx;
    while ((tx = e->all_tx) != NULL)
        tx_destroy(e, tx);
    e->port->ops->mutex_destroy(e->poll_mu);
    e->port->ops->mutex_destroy(e->mu);
    free(e);
}

/* Messages to live peers the NIC has not completed yet: queued
 * for credits or a rendezvous slot, or posted without their completion. */
static uint32_t eng_unsent(const struct rkv_engine *e)
{
    RKV_ASSERT_HELD(e->port, e->mu);
    uint32_t n = 0;
    for (const struct rkv_peer *p = e->peers; p; p = p->next)
        if (!p->dead)
            n += p->backlog.n + p->waiting.n + p->inflight.n;
    return n;
}

int rkv_engine_linger(struct rkv_engine *e, uint32_t timeout_ms)
{
    const struct rkv_port_ops *po = e->port->ops;
    uint64_t deadline = po->now_ns(e->port) + (uint64_t)timeout_ms * 1000000ull;
    for (uint64_t nap = ENG_LINGER_FIRST_NAP_NS;;
         nap = nap * 2 < ENG_LINGER_NAP_NS ? nap * 2 : ENG_LINGER_NAP_NS) {
        eng_lock(e);
        uint32_t n = eng_unsent(e);
        eng_unlock(e);
        if (n == 0)
            return 0;
        uint64_t now = po->now_ns(e->port);
        if (now >= deadline) {
            RKV_LOGW(e->port, "engine: %u messages still unsent after lingering %u ms", n,
                     timeout_ms);
            return -RKV_ETIMEDOUT;
        }
        /* Completions come from the progress task: sleep (in the twin a
         * spin would stop simulated time), briefly, as they come fast. */
        po->sleep_ns(e->port, deadline - now < nap ? deadline - now : nap);
    }
}

void rkv_engine_get_stats(struct rkv_engine *e, struct rkv_engine_stats *st_p)
{
    eng_lock(e);
    *st_p = e->st;
    eng_unlock(e);
}

/* ---- memory and addresses ---- */

int rkv_engine_reg_mr(struct rkv_engine *e, void *addr, size_t len, int access,
                      struct rkv_mr **mr_p)
{
    assert(addr && len > 0 && mr_p);
    return e->nic->ops->reg_mr(e->nic, addr, len, access, mr_p);
}

void rkv_engine_dereg_mr(struct rkv_engine *e, struct rkv_mr *mr)
{
    assert(mr);
    e->nic->ops->dereg_mr(e->nic, mr);
}

struct rkv_regcache *rkv_engine_regcache(struct rkv_engine *e)
{
    return e->cfg.reg_cache_entries ? &e->regs : NULL;
}

int rkv_engine_local_addr(struct rkv_engine *e, const char *host, uint16_t port, char *buf,
                          size_t len)
{
    assert(host && buf && len > 0);
    return e->nic->ops->local_addr(e->nic, host, port, buf, len);
}

int rkv_engine_copies_at_post(const struct rkv_engine *e)
{
    return e->nic->ops->copies_at_post != 0;
}
