/* A binary min-heap of intrusive nodes by (key, seq), for the twin's
 * schedules: a NIC unit's deliveries by due time, the timed waits' deadlines
 * (cv.c), a host's CPU bursts by their end in virtual work (cpu.c). A node
 * knows its index, so it can be taken out from the middle. */
#ifndef RKV_SIM_HEAP_H
#define RKV_SIM_HEAP_H

#include <stdint.h>

struct sim_heap_node {
    double key;
    uint64_t seq; /* ties: the smaller first (callers number them in order) */
    uint32_t idx; /* where it is in the heap, while it is in one */
};

/* An entry holds its node's key and seq, so that sifting compares within
 * the array: the nodes are messages and waiters of nodes all over a big
 * cluster, a cache miss each at 65,536 nodes (and keys tie often: the
 * callbacks set for one instant). A node's key must not change while it
 * is in a heap. */
struct sim_heap_ent {
    double key;
    uint64_t seq;
    struct sim_heap_node *n;
};

struct sim_heap {
    struct sim_heap_ent *a;
    uint32_t len, cap;
};

/* -RKV_ENOMEM when the heap cannot grow (n is not in it then). */
int sim_heap_push(struct sim_heap *h, struct sim_heap_node *n);
/* The least node, taken out; h must not be empty. */
struct sim_heap_node *sim_heap_pop(struct sim_heap *h);
/* Takes n, which is in h, out of it. */
void sim_heap_remove(struct sim_heap *h, struct sim_heap_node *n);
void sim_heap_fini(struct sim_heap *h);

static inline struct sim_heap_node *sim_heap_top(const struct sim_heap *h)
{
    return h->len ? h->a[0].n : 0;
}

/* The least key, without touching its node; h must not be empty. */
static inline double sim_heap_top_key(const struct sim_heap *h)
{
    return h->a[0].key;
}

/* A heap with a queue in front. A node that comes after the queue's last
 * (by key, then seq) is appended to the queue, any other goes into the
 * heap, and a pop takes the lesser of the two fronts: the order is the
 * heap's alone. A NIC unit's deliveries come mostly in due order, as a
 * link hands them on; at a barrier of 49,152 workers onto one machine,
 * each delivery from a heap alone sifted through 16 levels of cold nodes,
 * where the queue takes one. A node known to come out of order (a timer
 * at a deadline of its own) may be pushed into h->heap directly. */
struct sim_qheap {
    struct sim_heap heap;
    struct sim_heap_ent *q; /* a ring: q_len entries from q_head */
    uint32_t q_head, q_len, q_cap;
};

int sim_qheap_push(struct sim_qheap *h, struct sim_heap_node *n);
/* The least node (NULL: empty). */
struct sim_heap_node *sim_qheap_top(const struct sim_qheap *h);
/* The least key, without touching its node; h must not be empty. */
double sim_qheap_top_key(const struct sim_qheap *h);
/* The least node, taken out; h must not be empty. */
struct sim_heap_node *sim_qheap_pop(struct sim_qheap *h);
void sim_qheap_fini(struct sim_qheap *h);

static inline uint32_t sim_qheap_len(const struct sim_qheap *h)
{
    return h->heap.len + h->q_len;
}

#endif
