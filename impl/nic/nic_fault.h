/* Fault injection as a NIC decorator: wraps any backend (tcp, verbs, sim)
 * so that one scenario's drop / delay / link_down faults mean the same on
 * every one of them.
 *
 * The wire under rkv is reliable (RC queue pairs, TCP), so a lost packet is
 * not a lost message: the transport sends it again after its retransmission
 * timeout. The decorator models exactly that outcome:
 *  - drop:      each transmission of a message is lost with probability
 *               `fraction`; every loss costs one retransmission interval;
 *               after RKV_FAULT_RETRY_MAX losses in a row the connection
 *               breaks (RC's retry_cnt = 7 exceeded), as real hardware does:
 *               seen once the last retransmission timed out, that many
 *               plus one intervals after the message was first sent (its
 *               post, and those after it, then complete flushed).
 *  - delay:     a `fraction` of messages is held for delay_ns.
 *  - link_down: inside the window no transmission gets through; a message
 *               goes out at the first retransmission after the link is back,
 *               and one that would need more than RKV_FAULT_RETRY_MAX
 *               retransmissions breaks its connection.
 * Both directions of the wrapped node are affected: outgoing posts are held
 * before they reach the inner NIC, incoming receive completions are held
 * before the engine sees them (the bytes already landed; the delay is what
 * the receiver observes). Per-QP order is kept in both directions, as a
 * go-back-N transport keeps it.
 */
#ifndef RKV_NIC_FAULT_H
#define RKV_NIC_FAULT_H

#include <stdint.h>

#include "nic/nic.h"

#define RKV_FAULT_RETRY_MAX 7
/* Faults one wrapper takes. */
#define RKV_NIC_FAULTS_MAX 16

enum rkv_fault_kind { RKV_FAULT_DROP = 1, RKV_FAULT_DELAY = 2, RKV_FAULT_LINK_DOWN = 3 };

struct rkv_nic_fault {
    int kind;          /* enum rkv_fault_kind */
    double fraction;   /* drop, delay: share of messages (link_down: unused) */
    uint64_t start_ns; /* window, from the node's first message (sent or received):
                        * the same moment on every backend, however long the
                        * processes took to start */
    uint64_t end_ns;   /* UINT64_MAX: until the end */
    uint64_t delay_ns; /* delay: how long; drop, link_down: retransmit interval */
    /* drop, link_down: a connection they break breaks as the message is
     * posted (the post fails; a receive turns into the disconnect) rather
     * than (RKV_FAULT_RETRY_MAX + 1) x delay_ns later as its retransmissions
     * time out: a NIC that knows the connection is gone (a TCP reset).
     * Tests use it to fail a post in the middle of a batch. */
    int break_at_once;
};

struct rkv_nic_fault_stats {
    uint64_t messages;  /* messages that crossed the wrapped NIC in a window */
    uint64_t dropped;   /* lost transmissions (each cost one retransmission) */
    uint64_t delayed;   /* messages held by a delay fault */
    uint64_t held_down; /* messages held while the link was down */
    uint64_t broken;    /* connections broken for too many retransmissions */
    /* Posts held back right now: neither handed to the inner NIC yet nor
     * dropped by qp_close. Each still reads its local buffer when it goes. */
    uint64_t queued;
    /* Per fault, in the order given to the wrapper: the messages it acted
     * on (lost a transmission of, delayed, held). Whether each fault fired
     * is its own count: a node's totals had a second window that opened
     * after the run ended reported as fired (an outside tester). */
    uint64_t acted[RKV_NIC_FAULTS_MAX];
};

/* Wraps `inner` (which the wrapper then owns: closing it closes inner). The
 * faults are copied. The wrapper draws from a PRNG seeded with `seed`. */
int rkv_nic_fault_wrap(struct rkv_nic *inner, const struct rkv_nic_fault *faults, uint32_t n,
                       uint64_t seed, struct rkv_nic **nic_p);
/* Counts so far; nic must come from rkv_nic_fault_wrap. */
void rkv_nic_fault_stats(struct rkv_nic *nic, struct rkv_nic_fault_stats *st);

#endif
