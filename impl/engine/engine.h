/* The engine: the ps-lite-style RDMA protocol, written once over the NIC seam.
 *
 * Per connection (a "peer"):
 *  - Control messages (<= ctrl_buf_bytes) travel as SENDs into rx_depth
 *    pre-posted, pre-registered receive buffers.
 *  - Larger messages use a rendezvous on first contact: RNDV_START(bytes) ->
 *    the receiver grants a registered slot -> RNDV_REPLY(addr, rkey, slot).
 *    The sender caches the slot per (tensor, message type), so steady-state
 *    traffic is one WRITE_WITH_IMM (imm = slot id) and skips the rendezvous.
 *    A granted slot is busy until the receiver gives it back; it does so in
 *    the `release` field of the next message it sends to that peer (its reply)
 *    or in a CREDIT message.
 *  - A receiver can also hand out a slot it owns in a request (a pull says
 *    where its reply goes); the replier WRITE_WITH_IMMs straight into it.
 *  - Credits: every SEND and WRITE_WITH_IMM consumes a posted receive at the
 *    target, so a sender may have at most rx_depth of them unacknowledged.
 *    Receivers repost at once and return credits in every header; when they
 *    have nothing to say and owe half a window, they send a CREDIT message,
 *    for which one credit is always held back. Messages that find no credit
 *    wait in a per-peer backlog, so no caller ever blocks inside the engine.
 *
 * Threads: one progress task polls the NIC and calls on_msg/on_peer without
 * the engine lock held. Sends may come from any task, including callbacks;
 * a send that finds the connection broken kills the peer and returns
 * -RKV_EPEERDEAD, and on_peer(down) follows from the next poll batch, never
 * from inside the send: a callback never runs on a sending thread, nor
 * under a loop that sends.
 * With busy_poll, a thread waiting for a reply may take the progress task's
 * place (rkv_engine_poll_inline): one poller at a time, so per-connection
 * order holds whichever thread runs the callbacks.
 *
 * The polling policy lives here and nowhere else: how long a poller spins
 * after its last completion, when a waiter sleeps (rkv_engine_wait, which
 * every caller that waits for a reply uses), and how long the NIC may go
 * unpolled before its own reader takes over (rkv_nic_set_poll_gap).
 */
#ifndef RKV_ENGINE_H
#define RKV_ENGINE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "nic/nic.h"
#include "port/port.h"
#include "proto/proto.h"

struct rkv_engine;
struct rkv_peer;
struct rkv_tx;

struct rkv_engine_cfg {
    uint32_t node_id;        /* goes into every header's sender field */
    uint32_t rx_depth;       /* posted receives per peer (>= 4); same on all nodes */
    uint32_t ctrl_buf_bytes; /* max SEND size (>= 256) */
    uint32_t max_slots;      /* receive slots per peer (granted + owned) */
    uint64_t max_slot_bytes; /* largest message accepted via a slot */
    /* Bytes of slots granted to peers, all together (0: no bound). A peer's
     * RNDV_START past it is refused with -RKV_ELIMIT; its sender retires
     * an idle slot of its own here and asks again before it gives up. */
    uint64_t slot_mem_bytes;
    /* How long a holder may keep a slot asked back from it (RNDV_REVOKE),
     * counted from the ask or its last message in it, before it is dropped
     * (0: 10 s). Well inside a request's timeout, so that the asks waiting
     * for the memory are served before their requests give up. */
    uint32_t revoke_grace_ms;
    /* Busy polling: the progress task polls the NIC without sleeping, and
     * a thread waiting for a reply may run the progress itself
     * (rkv_engine_poll_inline). Costs a core per spinning thread. */
    int busy_poll;
    /* Messages that may wait for credits per peer; a peer past it is
     * dropped (it takes replies and never returns credits). 0: 65536. A
     * server sets a few windows' worth: a client never has more requests
     * in flight than it has credits. */
    uint32_t max_backlog;
    /* Live connections other nodes made to this one, at most (0: no
     * bound); one past it is closed as it comes, logged rate-limited. */
    uint32_t max_incoming;
    /* The registration cache of memory the application keeps registered
     * (rkv_engine_regcache; a client's rkv_client_register): its bounds,
     * or 0 for none. */
    uint32_t reg_cache_entries;
    uint64_t reg_cache_bytes;
};

/* msg and anything it points to are valid only during the call. For a
 * message that arrived in a granted slot, a reply (rkv_engine_reply or
 * rkv_engine_write) to the same peer from inside the callback releases the
 * slot: reply only once done reading; otherwise it is released afterwards.
 * When a message the engine could not deliver was a request, on_msg receives
 * a synthesized RKV_MSG_ERROR with that request's req_id and the error. */
typedef void (*rkv_engine_msg_fn)(void *user, struct rkv_peer *peer, const struct rkv_msg *msg);
/* up = 1 for a new passive-side connection, 0 when a peer is gone: once
 * per peer, in a poll batch, and not after rkv_engine_peer_release. */
typedef void (*rkv_engine_peer_fn)(void *user, struct rkv_peer *peer, int up);

int rkv_engine_create(struct rkv_port *port, struct rkv_nic *nic, const struct rkv_engine_cfg *cfg,
                      rkv_engine_msg_fn on_msg, rkv_engine_peer_fn on_peer, void *user,
                      struct rkv_engine **eng_p, char *err, size_t err_len);
int rkv_engine_listen(struct rkv_engine *eng, const char *host, uint16_t port);
int rkv_engine_connect(struct rkv_engine *eng, const char *host, uint16_t port, uint32_t timeout_ms,
                       struct rkv_peer **peer_p);
/* Retries a refused or timed-out connect for retry_ms: peers may start
 * after the nodes that connect to them. Stops between attempts with
 * -RKV_EINTR once *cancel (if not NULL) is set: a client's
 * rkv_client_interrupt. */
int rkv_engine_connect_retry(struct rkv_engine *eng, const char *host, uint16_t port,
                             uint32_t timeout_ms, uint32_t retry_ms, const atomic_int *cancel,
                             struct rkv_peer **peer_p);
/* What a failed rkv_engine_connect(_retry) means, for a message that names
 * the address: rkv_strerror(rc), but for -RKV_EPEERDEAD, which a NIC's
 * connect returns when the peer refused the connection (rkv_strerror's
 * "peer disconnected or died" spoke of a connection that never was). */
const char *rkv_engine_connect_strerror(int rc);
/* Starts the progress task. */
int rkv_engine_start(struct rkv_engine *eng);

/* The polling policy, in one place: every wait for a completion is this.
 * Waits until done(arg) is nonzero or deadline_ns (the port's clock)
 * passes; returns 1 when done, 0 at the deadline. Called with mu held, the
 * lock under which done() reads and that the callbacks completing it take
 * and signal cv under; returns with it held. With busy_poll the caller
 * polls the NIC itself (rkv_engine_poll_inline) while completions keep
 * coming, and after the engine's spin time without one it sleeps on cv
 * like a caller without busy_poll (a slow peer must not cost a core for
 * the whole timeout). Not from inside a callback. */
typedef int (*rkv_engine_done_fn)(void *arg);
int rkv_engine_wait(struct rkv_engine *eng, rkv_engine_done_fn done, void *arg,
                    struct rkv_mutex *mu, struct rkv_cond *cv, uint64_t deadline_ns);

/* Busy polling (cfg.busy_poll) without a wake-up per reply: the thread that
 * waits for a reply polls the NIC and runs the callbacks itself, while the
 * progress task stands aside, so one thread spins on each side (as perftest
 * does) instead of the progress task waking the waiter. Between
 * rkv_engine_inline_begin and rkv_engine_inline_end, each
 * rkv_engine_poll_inline polls once without blocking and handles what
 * completed; returns how many completions it handled. Neither begin nor
 * poll may be called with a lock a callback takes (begin waits for the
 * progress task's batch to end). Not from inside a callback. */
void rkv_engine_inline_begin(struct rkv_engine *eng);
int rkv_engine_poll_inline(struct rkv_engine *eng);
void rkv_engine_inline_end(struct rkv_engine *eng);
/* Waits until the NIC completed every message handed to the engine for a
 * live peer (queued ones included), or timeout_ms passed (-RKV_ETIMEDOUT):
 * what a node that stops does first, as TCP's close lingers, so that the
 * replies it owes are not lost with its connections. With a fault NIC a
 * message completes once its retransmissions went through. Needs the
 * progress task running; not from inside a callback. */
int rkv_engine_linger(struct rkv_engine *eng, uint32_t timeout_ms);
/* Stops the progress task and closes every peer's QP: nothing arrives or
 * leaves after it, so memory a peer could write or read may be released
 * (registrations still go through the engine until rkv_engine_destroy).
 * Idempotent. */
void rkv_engine_stop(struct rkv_engine *eng);
/* Stops (if not yet), deregisters the cache, frees everything. */
void rkv_engine_destroy(struct rkv_engine *eng);

/* ---- memory and addresses ----
 * The engine is the store's only way to its NIC: what a layer above
 * registers, and the address it announces, go through here. */
/* Registers addr..addr+len (RKV_ACCESS_*) until rkv_engine_dereg_mr. */
int rkv_engine_reg_mr(struct rkv_engine *eng, void *addr, size_t len, int access,
                      struct rkv_mr **mr_p);
void rkv_engine_dereg_mr(struct rkv_engine *eng, struct rkv_mr *mr);
/* The cache of cfg.reg_cache_*, or NULL without one. One task at a time
 * uses it (regcache.h). */
struct rkv_regcache *rkv_engine_regcache(struct rkv_engine *eng);
/* This node's address as a peer at host:port reaches it (announced to
 * server 0 by servers of machines the config gives no host). */
int rkv_engine_local_addr(struct rkv_engine *eng, const char *host, uint16_t port, char *buf,
                          size_t len);
/* 1 when the NIC copies a message's bytes as it is posted (tcp): the
 * memory may change as soon as the post returns. */
int rkv_engine_copies_at_post(const struct rkv_engine *eng);

/* A registered transmit buffer of at least len bytes; encode the message in
 * place (rkv_engine_tx_buf), then hand it to send or write, which consume it. */
int rkv_engine_tx_alloc(struct rkv_engine *eng, size_t len, struct rkv_tx **tx_p);
void *rkv_engine_tx_buf(struct rkv_tx *tx);
void rkv_engine_tx_free(struct rkv_engine *eng, struct rkv_tx *tx);
/* Sends an encoded message: a SEND when small, else via a cached or new
 * rendezvous slot. Consumes tx even on error. */
int rkv_engine_send(struct rkv_engine *eng, struct rkv_peer *peer, struct rkv_tx *tx, size_t len);
/* The same, for a reply sent from inside on_msg: it also gives back the
 * granted slot the message being handled came in (so reply only once done
 * reading it). Only the thread running on_msg, inside it, may call it. */
int rkv_engine_reply(struct rkv_engine *eng, struct rkv_peer *peer, struct rkv_tx *tx, size_t len);
/* WRITE_WITH_IMM of an encoded message into a slot the peer handed out
 * (a reply: same rule as rkv_engine_reply). */
int rkv_engine_write(struct rkv_engine *eng, struct rkv_peer *peer, struct rkv_tx *tx, size_t len,
                     const struct rkv_slot_desc *dst);
/* Zero-copy data movement (the NIC reads or writes the user's memory):
 *
 * A push-style message whose body continues outside tx: the first len bytes
 * are encoded in tx (header first, its payload_len counting every byte), the
 * rest is ext[0..n_ext), each inside its mr (e.g. the caller's rows,
 * registered). Large messages go as plain WRITEs of the ext pieces into the
 * slot, then the WRITE_WITH_IMM of tx's bytes at the slot's start, which the
 * target completes only after the pieces landed (per-QP order); small ones
 * are copied into tx and sent. The ext memory is read until the message was
 * delivered (its reply arrived) or the peer is closed (drop_peer_wait): the
 * caller keeps it valid, and registered, that long. Consumes tx. */
struct rkv_engine_ext {
    const void *addr;
    uint32_t len;
    struct rkv_mr *mr;
};
int rkv_engine_send_ext(struct rkv_engine *eng, struct rkv_peer *peer, struct rkv_tx *tx,
                        size_t len, const struct rkv_engine_ext *ext, uint32_t n_ext);
/* Plain RDMA WRITEs (no receive consumed at the target, no credit) into the
 * peer's memory at (puts[i].raddr, rkey): puts[i].src lies in tx's buffer.
 * Posted at once, so they land before anything sent to the peer after this
 * call (messages queued before it for credits may arrive after them). tx is
 * consumed: it goes back to the pool once the last write completed, or, when
 * a post fails after earlier ones went out (the connection breaks), once the
 * connection is closed. A write the target refuses breaks the connection
 * (remote access error). */
struct rkv_engine_put {
    const void *src;
    uint32_t len;
    uint64_t raddr;
};
int rkv_engine_put_tx(struct rkv_engine *eng, struct rkv_peer *peer, struct rkv_tx *tx,
                      const struct rkv_engine_put *puts, uint32_t n, uint32_t rkey);
/* The same for one write from memory the caller registered (src inside
 * src->mr) and keeps valid: the NIC may read it after the call returns
 * unless it copies at post (rkv_nic_ops.copies_at_post). */
int rkv_engine_put(struct rkv_engine *eng, struct rkv_peer *peer, const struct rkv_sge *src,
                   uint64_t raddr, uint32_t rkey);
/* Breaks the connection to peer and returns 0 once the NIC has closed it: no
 * write into this side's memory and no read of memory posted on it happens
 * after. For a caller that gives memory back to the user after a request
 * the peer did not answer (it may still write or be sent), or after a post
 * failed midway. -RKV_ETIMEDOUT when the close did not happen within
 * timeout_ms (the NIC may still use that memory; the close happens later):
 * a caller must not hang on a close that never comes. Not from inside a
 * callback. */
int rkv_engine_drop_peer_wait(struct rkv_engine *eng, struct rkv_peer *peer, uint32_t timeout_ms);

/* A slot this side owns, for a peer to write a reply into. */
int rkv_engine_slot_alloc(struct rkv_engine *eng, struct rkv_peer *peer, uint64_t cap,
                          struct rkv_slot_desc *desc_p);
void rkv_engine_slot_free(struct rkv_engine *eng, struct rkv_peer *peer, uint32_t slot);

/* The peer grants this side at most max_slots rendezvous slots (its own
 * max_slots, which it told in a handshake): this side asks for no more
 * than half of that or of its own, whichever is less. Without it a client
 * of push_slots 64 asked a server of 2 for 32, and pushes past its grant
 * failed with -RKV_ELIMIT. Not under the engine's lock (a callback may). */
void rkv_engine_peer_grant(struct rkv_engine *eng, struct rkv_peer *peer, uint32_t max_slots);
void rkv_peer_set_user(struct rkv_peer *peer, void *user);
void *rkv_peer_user(const struct rkv_peer *peer);
int rkv_peer_dead(const struct rkv_peer *peer);
/* Breaks the connection to a misbehaving or finished peer. */
void rkv_engine_drop_peer(struct rkv_engine *eng, struct rkv_peer *peer);
/* The owner keeps no pointer to peer any more: the engine breaks its
 * connection (if up) and frees the peer once the NIC closed it. Without
 * it a peer lives until rkv_engine_destroy; a server releases each client
 * connection that went, so that connections coming and going cost nothing
 * once gone. The peer must not be used after the call. */
void rkv_engine_peer_release(struct rkv_engine *eng, struct rkv_peer *peer);
/* The owner knows who peer is (a client's accepted HELLO, a server's
 * registration): at the bound of incoming connections (cfg.max_incoming)
 * only peers never identified, connected a grace or longer ago, are dropped
 * to take a newcomer. From the engine's thread (on_msg). */
void rkv_engine_peer_identified(struct rkv_peer *peer);
/* A newer connection made peer's claim (the same client id, the same
 * server's registration): peer counts as never identified again, so that
 * claims repeated on many connections cannot hold the bound of incoming
 * connections against newcomers. From the engine's thread (on_msg). */
void rkv_engine_peer_superseded(struct rkv_peer *peer);

/* Counters for tests and reports. */
struct rkv_engine_stats {
    uint64_t sends, writes, rndv_starts, rndv_hits, backlogged, credit_msgs, rejected, releases;
    uint64_t puts;        /* plain writes: zero-copy rows and message pieces */
    uint64_t tx_inflight; /* posted, neither completed nor reclaimed */
    /* Slot memory (slot_mem_bytes): asks that waited for it, slots asked
     * back from their holders for them. */
    uint64_t slot_waits, slot_revokes;
};
void rkv_engine_get_stats(struct rkv_engine *eng, struct rkv_engine_stats *st_p);

#endif
