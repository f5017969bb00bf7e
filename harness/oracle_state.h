/* What the oracle expects of a row's optimizer state, as a pull with the
 * built-in handler RKV_PULL_WITH_STATE returns it beside the row. Scenario
 * push ops (assign, sum, sgd) never touch the state, and a tensor's state
 * starts zero-filled (rkv.h), so every state element of every row must be 0
 * for the whole run: a non-zero one is a handler that read the wrong row,
 * the wrong half of the shard, or memory it does not own. */
#ifndef RKV_ORACLE_STATE_H
#define RKV_ORACLE_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "harness/scenario.h"

/* 0 when the row_len state elements of row `row` of tensor ti at state are
 * as expected; -1 with the first wrong element named in why. */
int rkv_oracle_check_state(const struct rkv_scenario *sc, uint32_t ti, uint64_t row,
                           const void *state, char *why, size_t why_len);

#endif
