#include "sim/backend/at.h"

#include <assert.h>
#include <stddef.h>
#include <stdlib.h>

#include <simgrid/engine.h>

#include "sim/backend/ktimer.h"

/* Spare nodes kept for reuse: as many as a large run has set at once. */
#define SIM_ATS_SPARE 65536u

static struct sim_at *at_of(struct sim_heap_node *n)
{
    return (struct sim_at *)((char *)n - offsetof(struct sim_at, hn));
}

static void ats_put(struct sim_ats *s, struct sim_at *t)
{
    if (s->n_free >= SIM_ATS_SPARE) {
        free(t);
        return;
    }
    t->next_free = s->free;
    s->free = t;
    s->n_free++;
}

static void sim_ats_fire(void *arg);

/* The SimGrid timer at exactly the first date, as when each callback had
 * its own: the clock then moves as it did (a timer left at a cancelled
 * date could move it past the run's end). */
static int ats_arm(struct sim_ats *s)
{
    int any = s->heap.len > 0;
    double first = any ? sim_heap_top_key(&s->heap) : 0;
    if (s->firing || s->closing || (s->ktimer && any && s->armed_at == first))
        return 0;
    void *t = NULL;
    /* The new one first: out of memory, the old one still stands. */
    if (any && !(t = sim_ktimer_set(first, sim_ats_fire, s)))
        return -1;
    if (s->ktimer)
        sim_ktimer_cancel(s->ktimer);
    s->ktimer = t;
    if (any)
        s->armed_at = first;
    return 0;
}

/* The SimGrid timer: runs, in order, what is due now, including what those
 * callbacks set for now. */
static void sim_ats_fire(void *arg)
{
    struct sim_ats *s = arg;
    s->ktimer = NULL; /* SimGrid frees it when this returns */
    s->firing = 1;
    double now = simgrid_get_clock();
    while (s->heap.len && sim_heap_top_key(&s->heap) <= now) {
        struct sim_at *t = at_of(sim_heap_pop(&s->heap));
        void (*fn)(void *) = t->fn;
        void *fn_arg = t->arg;
        ats_put(s, t);
        fn(fn_arg);
    }
    s->firing = 0;
    if (ats_arm(s) < 0)
        abort(); /* the twin cannot model a callback that never runs */
}

struct sim_at *sim_at_set(struct sim_ats *s, double when, void (*fn)(void *arg), void *arg)
{
    struct sim_at *t = s->free;
    if (t) {
        s->free = t->next_free;
        s->n_free--;
    } else if (!(t = malloc(sizeof(*t)))) {
        return NULL;
    }
    t->hn = (struct sim_heap_node){.key = when, .seq = s->seq++};
    t->fn = fn;
    t->arg = arg;
    if (sim_heap_push(&s->heap, &t->hn) < 0) {
        ats_put(s, t);
        return NULL;
    }
    if (ats_arm(s) < 0) {
        sim_heap_remove(&s->heap, &t->hn);
        ats_put(s, t);
        return NULL;
    }
    return t;
}

void sim_at_cancel(struct sim_ats *s, struct sim_at *t)
{
    sim_heap_remove(&s->heap, &t->hn);
    ats_put(s, t);
    if (ats_arm(s) < 0)
        abort(); /* as sim_ats_fire */
}

void sim_ats_close(struct sim_ats *s)
{
    if (s->ktimer)
        sim_ktimer_cancel(s->ktimer);
    s->ktimer = NULL;
    s->closing = 1;
}

void sim_ats_fini(struct sim_ats *s)
{
    if (s->ktimer)
        sim_ktimer_cancel(s->ktimer);
    while (s->heap.len)
        free(at_of(sim_heap_pop(&s->heap)));
    sim_heap_fini(&s->heap);
    while (s->free) {
        struct sim_at *t = s->free;
        s->free = t->next_free;
        free(t);
    }
    *s = (struct sim_ats){0};
}
