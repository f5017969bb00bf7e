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

struct sim_heap {
    struct sim_heap_node **a;
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
    return h->len ? h->a[0] : 0;
}

#endif
