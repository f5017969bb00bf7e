/* The engine's tests over any NIC backend: the same factory as the NIC
 * suite (struct nic_suite_env). test_engine runs them over tcp (plus the
 * busy-polling tests, which need threads that spin); the twin's test runs
 * them over the sim NIC, in simulated time: deterministic, and no wait
 * costs wall clock. Every wait here goes through the port's clock, so it
 * is simulated time under the twin. */
#ifndef RKV_TEST_ENGINE_SUITE_H
#define RKV_TEST_ENGINE_SUITE_H

#include <pthread.h>
#include <stdint.h>

#include "engine/engine.h"
#include "nic/nic_fault.h"
#include "nic_suite.h"

#define ENG_SUITE_MAX_SEEN 4096

/* One node: its NIC, its engine, and what its on_msg saw. */
struct eng_side {
    const struct nic_suite_env *env;
    struct rkv_port *port;
    struct rkv_nic *nic;
    struct rkv_engine *eng;
    struct rkv_mutex *mu;
    struct rkv_cond *cv;
    struct rkv_peer *peer; /* the connection to the other side */
    /* On the heap (ENG_SUITE_MAX_SEEN entries): a side lives on a test's
     * stack, which in the twin is an actor's, kept small. */
    uint64_t *seen;
    int n_seen;
    int bad;          /* push rows whose bytes were not what was sent */
    int hold;         /* on_msg waits while this is set (to stall the progress task) */
    int holding;      /* on_msg is waiting */
    int inline_check; /* count messages handled off inline_thread */
    pthread_t inline_thread;
    int off_thread;
    int downs;      /* on_peer(down) calls */
    int n_errors;   /* RKV_MSG_ERRORs the engine made up for requests it could not deliver */
    int last_error; /* the last one's status */
};

struct eng_side_cfg {
    uint32_t rx_depth;
    uint32_t max_slots; /* 0: 8 */
    int busy_poll;
    uint64_t slot_mem_bytes;            /* 0: no bound */
    uint64_t max_slot_bytes;            /* 0: 16 MiB */
    const struct rkv_nic_fault *faults; /* wrap the NIC in the fault NIC when n_faults > 0 */
    uint32_t n_faults;
};

void eng_side_open(struct eng_side *s, const struct nic_suite_env *env, const char *name,
                   const struct eng_side_cfg *cfg);
void eng_side_close(struct eng_side *s);
/* b connects to a, which listens. */
void eng_pair_connect(struct eng_side *a, struct eng_side *b);
/* a and b with the same settings, b connected to a. */
void eng_pair_open(struct eng_side *a, struct eng_side *b, const struct nic_suite_env *env,
                   uint32_t rx_depth, int busy_poll);
/* The side's peer once it learned it (1 s at most), else NULL. */
struct rkv_peer *eng_wait_peer(struct eng_side *s);
/* The side saw n messages (2 s at most). */
void eng_wait_seen(struct eng_side *s, int n);
/* A PUSH of rows x row_bytes, every row byte = (uint8_t)req, to s's peer. */
void eng_send_push(struct eng_side *s, uint64_t req, uint32_t tensor, uint32_t rows,
                   uint32_t row_bytes);

/* Runs the engine suite over env's backend; returns cmocka's failure count. */
int engine_suite_run(const struct nic_suite_env *env);

#endif
