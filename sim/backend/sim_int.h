/* World services the simulated NIC uses (sim/backend/world.c). */
#ifndef RKV_SIM_INT_H
#define RKV_SIM_INT_H

#include <stdint.h>

#include <simgrid/forward.h>

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
/* timeout_s < 0 waits forever. Returns 1 on timeout, 0 when signalled.
 * pool: the world whose spare waiters it reuses (NULL: none). */
int sim_cv_wait(struct sim_world *pool, struct sim_cv *cv, void (*release)(void *arg), void *arg,
                double timeout_s);
/* sim_cv_wait, for a waiter that takes a lock next: a waker that holds
 * that lock (held(held_arg)) moves it to then_cv, the lock's queue,
 * instead of waking it to find the lock taken (wait morphing). */
int sim_cv_wait_then(struct sim_world *pool, struct sim_cv *cv, void (*release)(void *arg),
                     void *arg, double timeout_s, struct sim_cv *then_cv, int (*held)(void *arg),
                     void *held_arg);
/* Frees the world's spare waiters (sim_world_fini). */
void sim_cv_pool_fini(struct sim_world *pool);
void sim_cv_signal(struct sim_cv *cv);
void sim_cv_broadcast(struct sim_cv *cv);
void sim_cv_destroy(struct sim_cv *cv);

#endif
