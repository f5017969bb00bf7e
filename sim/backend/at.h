/* Callbacks at simulated dates for the twin's C code (the NIC units'
 * deliveries, the cores' burst ends, the cv wake-ups), run by maestro. The
 * world keeps them in one heap behind one SimGrid kernel timer, armed at
 * the first of them: a kernel timer each cost two allocations and a node
 * of SimGrid's Fibonacci heap, and at 65,536 nodes that heap, one timer per
 * machine and host, took more time than any other function. */
#ifndef RKV_SIM_AT_H
#define RKV_SIM_AT_H

#include <stdint.h>

#include "sim/backend/heap.h"

struct sim_at {
    struct sim_heap_node hn; /* key: the date; seq: the order of setting */
    void (*fn)(void *arg);
    void *arg;
    struct sim_at *next_free;
};

struct sim_ats {
    struct sim_heap heap;
    void *ktimer;    /* the SimGrid timer, armed at the heap's first date */
    double armed_at; /* its date */
    uint64_t seq;
    int firing;          /* in sim_ats_fire: it arms when done */
    int closing;         /* the world is being freed: no more arming */
    struct sim_at *free; /* spare nodes, at most SIM_ATS_SPARE */
    uint32_t n_free;
};

/* Runs fn(arg) in maestro when the clock reaches `when` (now if earlier),
 * between two rounds of actors, after every callback set earlier for a
 * date not later (the same rules as sim_ktimer_set). NULL when out of
 * memory. The node is gone once fn has run. */
struct sim_at *sim_at_set(struct sim_ats *s, double when, void (*fn)(void *arg), void *arg);
/* Takes off one that has not run. */
void sim_at_cancel(struct sim_ats *s, struct sim_at *t);
/* The world's end, before its parts cancel theirs: the kernel timer goes,
 * and cancels no longer arm another (a SimGrid timer after the run). */
void sim_ats_close(struct sim_ats *s);
void sim_ats_fini(struct sim_ats *s);

#endif
