/* The NIC conformance suite: the semantics nic.h promises, checked once
 * over the NIC ops and run against every backend (test_nic_tcp: tcp and
 * fault(tcp); sim/tests/test_nic_suite_sim: sim, in simulated time;
 * test_nic_verbs: verbs, under ci/softroce). A backend gives a factory
 * (struct nic_suite_env); the suite does the rest.
 *
 * The fixture and the helpers are shared too, for the tests a backend has
 * of its own (raw TCP frames, a foreign rdma_cm peer, ...). */
#ifndef RKV_TEST_NIC_SUITE_H
#define RKV_TEST_NIC_SUITE_H

#include <stddef.h>
#include <stdint.h>

#include "nic/nic.h"
#include "port/port.h"

#define NIC_SUITE_BUF_BYTES (4u << 20)

struct nic_suite_env {
    const char *name;  /* "tcp", "fault(tcp)", "sim", "verbs" */
    uint32_t wait_ms;  /* every wait for something that must happen (generous: only a failure waits
                          it out) */
    uint32_t quiet_ms; /* every check that something does not happen */
    /* Opens a NIC on a port of its own; node names one ("a", "b", "c"). */
    int (*open)(void *ctx, const char *node, struct rkv_port **port_p, struct rkv_nic **nic_p);
    /* Closes a NIC open() gave and its port. */
    void (*close)(void *ctx, struct rkv_port *port, struct rkv_nic *nic);
    /* Listens on nic where its peers can reach it; says where. */
    int (*listen)(void *ctx, struct rkv_nic *nic, char *host, size_t host_len, uint16_t *port_p);
    void *ctx;
    /* 1 when the suite runs on a twin actor's stack: a test the backend
     * cannot run then passes with a message instead of cmocka's skip(),
     * whose longjmp leaves the actor's stack poisoned for ASan (it cannot
     * follow SimGrid's context switches). */
    int in_actor;
};

/* A test the backend cannot run (it lacks the NIC op `what`). */
#define NIC_SUITE_UNSUPPORTED(f, what)                                                             \
    do {                                                                                           \
        if ((f)->env->in_actor) {                                                                  \
            print_message("%s: no %s: nothing to check\n", (f)->env->name, what);                  \
            return;                                                                                \
        }                                                                                          \
        skip();                                                                                    \
    } while (0)

struct nic_fx {
    const struct nic_suite_env *env;
    struct rkv_port *pa, *pb;
    struct rkv_nic *a, *b; /* a connects, b listens */
    char host[64];         /* where b listens */
    uint16_t port;
    struct rkv_qp *qa, *qb; /* the two ends of the first connection */
    uint8_t *abuf, *bbuf, *bloc;
    struct rkv_mr *amr;  /* a's source buffer (local) */
    struct rkv_mr *bmr;  /* b's buffer, registered for remote writes */
    struct rkv_mr *blmr; /* b's receive buffer, local access only */
};

/* cmocka setup and teardown: *state comes in as the env (a prestate),
 * goes out as the fixture, connected. */
int nic_fx_setup(void **state);
int nic_fx_teardown(void **state);

struct rkv_sge nic_sge(void *addr, uint32_t len, struct rkv_mr *mr);
void nic_fill(uint8_t *p, size_t len, uint8_t seed);
int nic_poll_one(struct rkv_nic *nic, struct rkv_wc *wc, uint32_t timeout_ms);
/* The next completion of nic is a successful opcode (on qp, unless NULL). */
void nic_expect_wc(const struct nic_fx *f, struct rkv_nic *nic, struct rkv_qp *qp, int opcode,
                   struct rkv_wc *wc_p);
void nic_expect_quiet(const struct nic_fx *f, struct rkv_nic *nic);
void nic_connect_pair(struct nic_fx *f, struct rkv_qp **qa_p, struct rkv_qp **qb_p);
/* A SEND from a into a receive b posted, checked byte for byte. */
void nic_check_send(struct nic_fx *f, struct rkv_qp *qa, struct rkv_qp *qb, uint8_t seed);
/* b still accepts and serves a new connection (closed afterwards). */
void nic_expect_still_serving(struct nic_fx *f);

/* Runs the suite against env's backend; returns cmocka's failure count. */
int nic_suite_run(const struct nic_suite_env *env);

/* Loopback TCP, and the same wrapped in the fault NIC (a third of the
 * messages held 2 ms each way) (nic_suite_tcp.c). */
extern const struct nic_suite_env nic_suite_tcp_env;
extern const struct nic_suite_env nic_suite_fault_tcp_env;

#endif
