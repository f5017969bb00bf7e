/* Condition variables for the twin, built from one semaphore per waiter.
 *
 * Why not sg_cond_wait_for: in SimGrid 3.32 a timed-out wait can come back
 * without owning the mutex ("Cannot release that mutex: you're not the
 * owner" when the caller unlocks it), which the store's timed waits hit at
 * once. Semaphores with a timeout have no such mutex hand-over. */
#include <stdlib.h>

#include <simgrid/mutex.h>
#include <simgrid/semaphore.h>

#include "sim/sim_int.h"

struct sim_waiter {
    sg_sem_t sem;
    int signalled;
    struct sim_waiter *next;
};

static void cv_unlink(struct sim_cv *cv, struct sim_waiter *w)
{
    for (struct sim_waiter **pp = &cv->head; *pp; pp = &(*pp)->next) {
        if (*pp == w) {
            *pp = w->next;
            if (cv->tail == w) {
                cv->tail = NULL;
                for (struct sim_waiter *x = cv->head; x; x = x->next)
                    cv->tail = x;
            }
            return;
        }
    }
}

int sim_cv_wait(struct sim_cv *cv, sg_mutex_t mu, double timeout_s)
{
    struct sim_waiter w = {.sem = sg_sem_init(0)};
    /* Queued before the mutex is dropped: a signal from then on is not lost. */
    if (cv->tail)
        cv->tail->next = &w;
    else
        cv->head = &w;
    cv->tail = &w;
    if (mu)
        sg_mutex_unlock(mu);
    int timed_out = timeout_s < 0 ? (sg_sem_acquire(w.sem), 0)
                                  : sg_sem_acquire_timeout(w.sem, timeout_s > 0 ? timeout_s : 0);
    if (mu)
        sg_mutex_lock(mu);
    if (!w.signalled)
        cv_unlink(cv, &w);
    sg_sem_destroy(w.sem);
    return timed_out && !w.signalled;
}

void sim_cv_signal(struct sim_cv *cv)
{
    struct sim_waiter *w = cv->head;
    if (!w)
        return;
    cv->head = w->next;
    if (!cv->head)
        cv->tail = NULL;
    w->signalled = 1;
    sg_sem_release(w->sem);
}

void sim_cv_broadcast(struct sim_cv *cv)
{
    while (cv->head)
        sim_cv_signal(cv);
}
