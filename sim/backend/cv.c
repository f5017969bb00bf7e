/* Condition variables for the twin, built from one semaphore per waiter.
 *
 * Why not sg_cond_wait_for: in SimGrid 3.32 a timed-out wait can come back
 * without owning the mutex ("Cannot release that mutex: you're not the
 * owner" when the caller unlocks it), which the store's timed waits hit at
 * once. Semaphores with a timeout have no such mutex hand-over. */
#include <assert.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include <simgrid/actor.h>
#include <simgrid/engine.h>
#include <simgrid/mutex.h>
#include <simgrid/semaphore.h>

#include "sim/backend/ktimer.h"
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
    /* On timer's heap (key: its deadline) until signalled or fired (woken
     * by the timer at its deadline: timed out). */
    struct sim_timer *timer;
    struct sim_heap_node hn;
    int fired;
    /* Parked (sim_cv_wait_then): its actor suspended itself instead of
     * acquiring sem, and is resumed by cv_wake, which sets woken. */
    sg_actor_t actor;
    int parked, woken;
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
    w->timer = NULL;
    w->fired = 0;
    w->actor = NULL;
    w->parked = w->woken = 0;
    return w;
}

void sim_cv_pool_fini(struct sim_world *pool)
{
    if (pool->wake_timer) { /* the run ended before maestro handed them out */
        sim_at_cancel(&pool->ats, pool->wake_timer);
        pool->wake_timer = NULL;
    }
    /* Their waiters' actors are gone: only the wakers' holds are dropped. */
    while (pool->wake_head) {
        struct sim_waiter *w = pool->wake_head;
        pool->wake_head = w->next;
        cv_put(w);
    }
    pool->wake_tail = NULL;
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

/* ---- the timer: a heap of waiters by (deadline, seq) ---- */

static struct sim_waiter *timer_waiter(struct sim_heap_node *hn)
{
    return (struct sim_waiter *)((char *)hn - offsetof(struct sim_waiter, hn));
}

static void timer_remove(struct sim_waiter *w)
{
    sim_heap_remove(&w->timer->heap, &w->hn);
    w->timer = NULL;
}

/* Returns 0 when it cannot (no memory): the waiter then uses a timeout of
 * its own. */
static int timer_add(struct sim_timer *t, struct sim_waiter *w, double deadline)
{
    w->hn = (struct sim_heap_node){.key = deadline, .seq = t->seq++};
    if (sim_heap_push(&t->heap, &w->hn) < 0)
        return 0;
    if (deadline < t->armed_at) {
        if (!t->arm(t->arg, deadline)) {
            sim_heap_remove(&t->heap, &w->hn);
            return 0;
        }
        t->armed_at = deadline;
    }
    w->timer = t;
    return 1;
}

void sim_timer_init(struct sim_timer *t, int (*arm)(void *arg, double t_due), void *arg)
{
    *t = (struct sim_timer){.armed_at = INFINITY, .arm = arm, .arg = arg};
}

void sim_timer_fini(struct sim_timer *t)
{
    sim_heap_fini(&t->heap);
}

static void cv_unlink(struct sim_cv *cv, struct sim_waiter *w);
static void cv_wake(struct sim_waiter *w);

void sim_timer_fire(struct sim_timer *t, double t_due)
{
    if (t_due != t->armed_at)
        return;
    t->armed_at = INFINITY;
    struct sim_waiter *list = NULL, **tail = &list;
    while (t->heap.len && sim_heap_top_key(&t->heap) <= t_due) { /* no simcall: lists hold */
        struct sim_waiter *w = timer_waiter(sim_heap_top(&t->heap));
        timer_remove(w);
        if (w->queued_on)
            cv_unlink(w->queued_on, w);
        w->queued_on = NULL;
        w->fired = 1;
        w->refs++;
        w->next = NULL;
        *tail = w;
        tail = &w->next;
    }
    if (t->heap.len) {
        /* The twin cannot model a lost wake-up (as cv_waiter_new). */
        if (!t->arm(t->arg, sim_heap_top_key(&t->heap)))
            abort();
        t->armed_at = sim_heap_top_key(&t->heap);
    }
    while (list) {
        struct sim_waiter *w = list;
        list = w->next;
        cv_wake(w);
    }
}

int sim_cv_wait_then(struct sim_world *pool, struct sim_cv *cv, void (*release)(void *arg),
                     void *arg, double timeout_s, struct sim_cv *then_cv, int (*held)(void *arg),
                     void *held_arg, struct sim_timer *timer)
{
    struct sim_waiter *w = cv_waiter_new(pool);
    w->then_cv = then_cv;
    w->held = held;
    w->held_arg = held_arg;
    /* Queued before the lock is dropped: a signal from then on is not lost. */
    cv_append(cv, w);
    int on_timer = timeout_s >= 0 && timer &&
                   timer_add(timer, w, simgrid_get_clock() + (timeout_s > 0 ? timeout_s : 0));
    int timed_out;
    if (pool && pool->park_ok && !pool->comms_posted && (timeout_s < 0 || on_timer)) {
        /* Parked: suspending oneself is one simcall and no SimGrid object,
         * where a semaphore acquisition makes an activity and registers
         * the simcall with it. Safe because every wake-up of a parked
         * waiter is made by maestro (cv_wake), which runs only once the
         * instant's actors have made their simcalls: the suspension is
         * in place before its resumption. Only in worlds without SimGrid
         * transfers (sim.h comms_posted): suspending an actor suspends
         * its transfers too (SimGrid 3.32); and only where no actor is
         * killed before the run's end (park_ok): a killed one's waiter
         * stays queued, and resuming it would touch a freed actor. */
        w->actor = sg_actor_self();
        w->parked = 1;
        if (release)
            release(arg);
        while (!w->woken)
            sg_actor_suspend(w->actor);
        timed_out = w->fired;
    } else if (timeout_s < 0 || on_timer) {
        if (release)
            release(arg);
        sg_sem_acquire(w->sem);
        timed_out = w->fired;
    } else {
        if (release)
            release(arg);
        timed_out = sg_sem_acquire_timeout(w->sem, timeout_s > 0 ? timeout_s : 0);
    }
    assert(!w->timer);
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
    return sim_cv_wait_then(pool, cv, release, arg, timeout_s, NULL, NULL, NULL, NULL);
}

/* w, just taken off its list by a waker: moves to the queue of the lock
 * it takes next if the waker holds that lock (it would wake only to wait
 * there, two switches and a simcall more). Returns 1 when moved. */
static int cv_morph(struct sim_waiter *w)
{
    if (!w->then_cv || !w->held(w->held_arg))
        return 0;
    if (w->timer) /* signalled: its deadline no longer counts */
        timer_remove(w);
    w->signalled = 1;
    cv_append(w->then_cv, w);
    return 1;
}

/* Marks before releasing: the release is a simcall, after which the waiter
 * may run and must see that it was woken. */
static void cv_mark(struct sim_waiter *w)
{
    if (w->timer)
        timer_remove(w);
    w->signalled = 1;
    w->refs++;
}

/* Wakes w: resumes its actor (parked) or releases its semaphore. */
static void cv_release(struct sim_waiter *w)
{
    if (w->parked) {
        w->woken = 1;
        /* After the run's end the daemons are gone (killed, not resumable). */
        if (sg_actor_count())
            sg_actor_resume(w->actor);
    } else {
        sg_sem_release(w->sem);
    }
    cv_put(w);
}

/* Hands out, in maestro, the wake-ups actors gave in this instant. */
static void cv_flush(void *arg)
{
    struct sim_world *p = arg;
    struct sim_waiter *list = p->wake_head;
    p->wake_head = p->wake_tail = NULL;
    p->wake_timer = NULL;
    while (list) { /* no simcall here: maestro's releases are kernel calls */
        struct sim_waiter *w = list;
        list = w->next;
        cv_release(w);
    }
}

/* Why an actor's wake-ups wait for maestro: a semaphore released by an
 * actor is a simcall, a switch to maestro and back for the waker (one per
 * wake-up, ~40 % of a 1,024-node run's switches), while maestro releases
 * with a plain kernel call. So they are queued, in order, and a callback
 * at the present instant (sim_at_set) releases them all once the actors running
 * in this instant have stopped: the woken run in the same instant of
 * simulated time, only later among its actors, as a kernel's run queue
 * would order them. */
static void cv_wake(struct sim_waiter *w)
{
    struct sim_world *p = w->pool;
    if (p && sg_actor_self()) {
        if (!p->wake_timer &&
            !(p->wake_timer = sim_at_set(&p->ats, simgrid_get_clock(), cv_flush, p)))
            abort(); /* the twin cannot model a lost wake-up (as cv_waiter_new) */
        w->next = NULL;
        if (p->wake_tail)
            p->wake_tail->next = w;
        else
            p->wake_head = w;
        p->wake_tail = w;
        return;
    }
    assert(!w->parked || !sg_actor_self()); /* parked ones have a world (pool) */
    cv_release(w);
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
        if (w->timer)
            timer_remove(w);
        sg_sem_destroy(w->sem);
        free(w);
    }
    cv->tail = NULL;
}
