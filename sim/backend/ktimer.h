/* SimGrid's kernel timers, for the twin's C code (sim/backend/ktimer.cpp). */
#ifndef RKV_SIM_KTIMER_H
#define RKV_SIM_KTIMER_H

#include <simgrid/forward.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Runs fn(arg) in SimGrid's maestro when the simulated clock reaches
 * `when` (now if earlier), between two rounds of actors: no actor wakes,
 * so fn must not block nor make a blocking simcall (it may signal: a
 * semaphore released from maestro is a plain kernel call). Returns the
 * timer, NULL when out of memory. The timer is gone once fn has run. */
void *sim_ktimer_set(double when, void (*fn)(void *arg), void *arg);
/* Takes off a timer that has not fired yet. */
void sim_ktimer_cancel(void *timer);
/* Makes actor mbox's permanent receiver now, from another actor (the C
 * call sets the caller only): transfers posted before the receiver first
 * runs start at once, as they do into a receiver that was there. */
void sim_mailbox_set_receiver(sg_mailbox_t mbox, sg_actor_t actor);

#ifdef __cplusplus
}
#endif

#endif
