/* The one C++ file of the twin, for what SimGrid 3.32 has no C call for: a
 * kernel timer (a callback that maestro runs at a date), and a mailbox's
 * receiver set by another actor. The world's callbacks at dates (at.c:
 * NIC deliveries where they cost no CPU, burst ends, wake-ups) run from
 * one such timer; a timer actor per machine had cost two context switches,
 * a semaphore and a max-min sleep action per wake-up (sim/README.md,
 * "Twelfth round", "Thirteenth round"). */
#include "sim/backend/ktimer.h"

#include <new>

#include <simgrid/kernel/Timer.hpp>
#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Mailbox.hpp>

void *sim_ktimer_set(double when, void (*fn)(void *arg), void *arg)
{
    try {
        return simgrid::kernel::timer::Timer::set(when, [fn, arg]() { fn(arg); });
    } catch (const std::bad_alloc &) { /* no C++ exception may cross into C */
        return nullptr;
    }
}

void sim_ktimer_cancel(void *timer)
{
    static_cast<simgrid::kernel::timer::Timer *>(timer)->remove();
}

void sim_mailbox_set_receiver(sg_mailbox_t mbox, sg_actor_t actor)
{
    mbox->set_receiver(simgrid::s4u::ActorPtr(actor));
}
