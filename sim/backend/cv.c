/* Condition variables for the twin, built from one semaphore per waiter.
 *
 * Why not sg_cond_wait_for: in SimGrid 3.32 a timed-out wait can come back
 * without owning the mutex ("Cannot release that mutex: you're not the
 * owner" when the caller unlocks it), which the store's timed waits hit at
 * once. Semaphores with a timeout have no such mutex hand-over. */
#include <stdlib.h>

#include <simgrid/mutex.h>
#include <simgrid/semaphore.h>

#include "sim/backend/sim.h"
#include "sim/backend/sim_int.h"

/* Shared by the waiter and its signaller (refs): whichever of them is last
 * frees it, since either may resume first after the release. */
struct sim_waiter {
    sg_sem_t sem;
    int signalled;
    int refs;
    struct sim_world *pool;   /* where it goes back when done (NULL: freed) */
    struct sim_cv *queued_on; /* the list it is on (NULL: taken off by a waker) */
    /* Wait morphing (sim_cv_wait_then): woken while held(held_arg) is
     * true (the waker holds the lock the waiter takes next), it moves to
     * then_cv, that lock's queue, instead of waking only to wait there. */
    struct sim_cv *then_cv;
    int (*held)(void *arg);
    void *held_arg;
    struct sim_waiter *next;
};

/* Waiters kept for reuse per world: a wait made a waiter and a SimGrid
 * semaphore and freed both, several mallocs per wait (~5 % of a 4,096-node
 * run); the most recently used come back first, still in cache. */
#define SIM_WAITER_POOL_MAX 4096u

static void cv_put(struct sim_waiter *w)
{
    if (--w->refs)
        return;
    struct sim_world *p = w->pool;
    /* A semaphore released after its wait timed out keeps the count: not
     * reusable. */
    if (p && p->waiter_pool_len < SIM_WAITER_POOL_MAX && sg_sem_get_capacity(w->sem) == 0) {
        w->next = p->waiter_pool;
        p->waiter_pool = w;
        p->waiter_pool_len++;
        return;
    }
    sg_sem_destroy(w->sem);
    free(w);
}

static struct sim_waiter *cv_waiter_new(struct sim_world *pool)
{
    struct sim_waiter *w = pool ? pool->waiter_pool : NULL;
    if (w) {
        pool->waiter_pool = w->next;
        pool->waiter_pool_len--;
    } else {
        w = malloc(sizeof(*w));
        if (!w)
            abort(); /* the twin cannot model a lost wake-up */
        w->sem = sg_sem_init(0);
    }
    w->signalled = 0;
    w->refs = 1;
    w->pool = pool;
    w->queued_on = NULL;
    w->then_cv = NULL;
    w->next = NULL;
    return w;
}

void sim_cv_pool_fini(struct sim_world *pool)
{
    while (pool->waiter_pool) {
        struct sim_waiter *w = pool->waiter_pool;
        pool->waiter_pool = w->next;
        sg_sem_destroy(w->sem);
        free(w);
    }
    pool->waiter_pool_len = 0;
}

static void cv_unlink(struct sim_cv *cv, struct sim_waiter *w)
{
    struct sim_waiter *prev = NULL;
    for (struct sim_waiter *x = cv->head; x; prev = x, x = x->next) {
        if (x == w) {
            if (prev)
                prev->next = w->next;
            else
                cv->head = w->next;
            if (cv->tail == w)
                cv->tail = prev;
            return;
        }
    }
}

static void cv_append(struct sim_cv *cv, struct sim_waiter *w)
{
    w->next = NULL;
    if (cv->tail)
        cv->tail->next = w;
    else
        cv->head = w;
    cv->tail = w;
    w->queued_on = cv;
}

int sim_cv_wait_then(struct sim_world *pool, struct sim_cv *cv, void (*release)(void *arg),
                     void *arg, double timeout_s, struct sim_cv *then_cv, int (*held)(void *arg),
                     void *held_arg)
{
    struct sim_waiter *w = cv_waiter_new(pool);
    w->then_cv = then_cv;
    w->held = held;
    w->held_arg = held_arg;
    /* Queued before the lock is dropped: a signal from then on is not lost. */
    cv_append(cv, w);
    if (release)
        release(arg);
    int timed_out = timeout_s < 0 ? (sg_sem_acquire(w->sem), 0)
                                  : sg_sem_acquire_timeout(w->sem, timeout_s > 0 ? timeout_s : 0);
    int signalled = w->signalled;
    /* Timed out on cv, or on then_cv after a morph (signalled, then). */
    if (w->queued_on)
        cv_unlink(w->queued_on, w);
    cv_put(w);
    return timed_out && !signalled;
}

int sim_cv_wait(struct sim_world *pool, struct sim_cv *cv, void (*release)(void *arg), void *arg,
                double timeout_s)
{
    return sim_cv_wait_then(pool, cv, release, arg, timeout_s, NULL, NULL, NULL);
}

/* w, just taken off its list by a waker: moves to the queue of the lock
 * it takes next if the waker holds that lock (it would wake only to wait
 * there, two switches and a simcall more). Returns 1 when moved. */
static int cv_morph(struct sim_waiter *w)
{
    if (!w->then_cv || !w->held(w->held_arg))
        return 0;
    w->signalled = 1;
    cv_append(w->then_cv, w);
    return 1;
}

/* Marks before releasing: the release is a simcall, after which the waiter
 * may run and must see that it was woken. */
static void cv_mark(struct sim_waiter *w)
{
    w->signalled = 1;
    w->refs++;
}

static void cv_wake(struct sim_waiter *w)
{
    sg_sem_release(w->sem);
    cv_put(w);
}

void sim_cv_signal(struct sim_cv *cv)
{
    struct sim_waiter *w = cv->head;
    if (!w)
        return;
    cv->head = w->next;
    if (!cv->head)
        cv->tail = NULL;
    w->queued_on = NULL;
    if (cv_morph(w))
        return;
    cv_mark(w);
    cv_wake(w);
}

/* Wakes the waiters queued now, not one that waits again meanwhile. */
void sim_cv_broadcast(struct sim_cv *cv)
{
    struct sim_waiter *all = cv->head, *list = NULL, **tail = &list;
    cv->head = cv->tail = NULL;
    while (all) { /* no simcall in this loop: the lists hold still */
        struct sim_waiter *w = all;
        all = w->next;
        w->queued_on = NULL;
        if (cv_morph(w))
            continue;
        cv_mark(w);
        w->next = NULL;
        *tail = w;
        tail = &w->next;
    }
    while (list) {
        struct sim_waiter *w = list;
        list = w->next;
        cv_wake(w);
    }
}

/* After the simulation: waiters still queued belong to daemon actors that
 * SimGrid killed while they waited. */
void sim_cv_destroy(struct sim_cv *cv)
{
    while (cv->head) {
        struct sim_waiter *w = cv->head;
        cv->head = w->next;
        sg_sem_destroy(w->sem);
        free(w);
    }
    cv->tail = NULL;
}
