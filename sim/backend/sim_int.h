/* World services the simulated NIC uses (sim/backend/world.c). */
#ifndef RKV_SIM_INT_H
#define RKV_SIM_INT_H

#include <stdint.h>

#include <simgrid/forward.h>

#include "sim/backend/heap.h"

struct rkv_port;

struct sim_world;
struct sim_nic;

/* host:port -> NIC id; -RKV_EEXIST when taken. */
int sim_world_listen(struct sim_world *w, const char *host, uint16_t port, uint32_t nic);
int sim_world_lookup(const struct sim_world *w, const char *host, uint16_t port, uint32_t *nic_p);
int sim_world_listening(const struct sim_world *w, const char *host, uint32_t nic, uint16_t port);
/* As shm_unlink: mappings stay, the name is gone (a machine loss). */
void sim_world_shm_unlink(struct sim_world *w, const char *name);
void sim_world_unlisten(struct sim_world *w, uint32_t nic);
void sim_nic_free(struct sim_nic *n);
/* Waits until every message the calling task posted on n is delivered:
 * a task must not end with puts in flight (SimGrid cancels them). */
void sim_nic_drain(struct sim_nic *n);
/* The node's NIC, attached by the NIC backend as it opens: the port drains
 * it when a task ends and crashes it with the node. The port sits below the
 * NIC and calls it only through these two. */
void sim_port_set_nic(struct rkv_port *p, struct sim_nic *n, void (*drain)(struct sim_nic *n),
                      void (*crash)(struct sim_nic *n));
void sim_port_add_actor(struct rkv_port *p, sg_actor_t a);
/* Crash faults: the node's actors are killed; its NIC drops every
 * connection as the OS of a crashed process would (peers see a disconnect). */
void sim_port_crash(struct rkv_port *p);
/* slow_cpu faults: handler CPU time is multiplied by fn(user, now). */
void sim_port_set_cpu_factor(struct rkv_port *p, double (*fn)(void *user, double t_s), void *user);
uint64_t sim_port_slowed_rows(struct rkv_port *p);
void sim_nic_crash(struct sim_nic *n);
struct sim_nic *sim_port_nic(struct rkv_port *p);
/* The timer that wakes the node's timed condition waits (its NIC's). */
struct sim_timer;
void sim_port_set_timer(struct rkv_port *p, struct sim_timer *t);
/* Signals a port condition variable from the NIC (a doorbell, nic.h
 * cq_doorbell), also from maestro: no lock, no CPU accounting. */
struct rkv_cond;
void sim_port_cond_ring(struct rkv_cond *c);

/* Measured CPU (sim/backend/cpu.c): settle before a SimGrid call charges the node
 * code that ran since the last mark; mark after the call restarts the count. */
void sim_cpu_settle(struct sim_world *w);
void sim_cpu_mark(struct sim_world *w);
/* Every CPU charge of the twin goes through here: s seconds of one core. */
void sim_cpu_run(struct sim_world *w, sg_host_t host, double s);
void sim_cpu_fini(struct sim_world *w);

/* A condition variable whose timed wait is safe in SimGrid 3.32 (sim/backend/cv.c).
 * release(arg), when set, drops the caller's lock once the waiter is queued
 * (the caller takes it again after): a signal from then on is not lost.
 * Without one: actors are cooperative, so a caller that checks its
 * condition and waits with no simcall in between cannot miss a signal. */
struct sim_waiter;
struct sim_cv {
    struct sim_waiter *head, *tail;
};
/* Deadlines of timed waits, woken by one timer that some actor runs
 * (the NIC's): a heap of the waiters by deadline, of which only the
 * earliest is armed (arm(arg, t_due) schedules sim_timer_fire(t, t_due);
 * returns 0 when it cannot, no memory). Why: a SimGrid wait with a timeout
 * is a sleep action and a max-min variable per wait, and the store's
 * timed waits are nearly all signalled long before their deadline. Holds
 * at most one entry per waiting actor. */
struct sim_timer {
    struct sim_heap heap; /* the waiters, by deadline */
    uint64_t seq;         /* ties between equal deadlines: first armed, first woken */
    double armed_at;      /* the armed deadline (INFINITY: none) */
    int (*arm)(void *arg, double t_due);
    void *arg;
};
void sim_timer_init(struct sim_timer *t, int (*arm)(void *arg, double t_due), void *arg);
/* The wake-up armed for t_due is due: wakes (as timed out) the waiters
 * whose deadline is at or before it and arms the next. A stale one (a
 * later arming replaced it) does nothing. */
void sim_timer_fire(struct sim_timer *t, double t_due);
void sim_timer_fini(struct sim_timer *t);
/* timeout_s < 0 waits forever. Returns 1 on timeout, 0 when signalled.
 * pool: the world whose spare waiters it reuses (NULL: none). */
int sim_cv_wait(struct sim_world *pool, struct sim_cv *cv, void (*release)(void *arg), void *arg,
                double timeout_s);
/* sim_cv_wait, for a waiter that takes a lock next: a waker that holds
 * that lock (held(held_arg)) moves it to then_cv, the lock's queue,
 * instead of waking it to find the lock taken (wait morphing). timer
 * (NULL: none) wakes it at its deadline instead of a SimGrid timeout. */
int sim_cv_wait_then(struct sim_world *pool, struct sim_cv *cv, void (*release)(void *arg),
                     void *arg, double timeout_s, struct sim_cv *then_cv, int (*held)(void *arg),
                     void *held_arg, struct sim_timer *timer);
/* Frees the world's spare waiters (sim_world_fini). */
void sim_cv_pool_fini(struct sim_world *pool);
void sim_cv_signal(struct sim_cv *cv);
void sim_cv_broadcast(struct sim_cv *cv);
void sim_cv_destroy(struct sim_cv *cv);

#endif
