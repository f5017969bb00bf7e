/* Built-in push handlers (assign, sum, sgd, adagrad) and the table of custom
 * ones. Each applies one row; the caller holds the row's lock. */
#ifndef RKV_HANDLERS_H
#define RKV_HANDLERS_H

#include <stddef.h>
#include <stdint.h>

#include "rkv.h"

struct rkv_handler_table {
    rkv_handler_fn fn[RKV_OP_MAX];
    void *user[RKV_OP_MAX];
};

/* Registers a custom handler; op must be in [RKV_OP_CUSTOM, RKV_OP_MAX). */
int rkv_handler_register(struct rkv_handler_table *t, int op, rkv_handler_fn fn, void *user);
/* The same into *tp, made on first use (a node's table is NULL until it
 * registers one: most never do, and the twin holds thousands of nodes). */
int rkv_handler_register_at(struct rkv_handler_table **tp, int op, rkv_handler_fn fn, void *user);

/* Applies op to one row of n_elems elements.
 *  ASSIGN, SUM: every dtype.  SGD: f32/f64 (-RKV_EDTYPE otherwise).
 *  ADAGRAD: f32/f64 and state != NULL (-RKV_EINVAL without state).
 *  custom: -RKV_ENOHANDLER when not registered in t (t may be NULL).
 * On error the row is untouched. */
int rkv_handler_apply(const struct rkv_handler_table *t, int op, enum rkv_dtype dt, void *row,
                      void *state, const void *in, size_t n_elems, double param);
/* Same checks as rkv_handler_apply without touching anything (lets a server
 * reject a whole request before applying any row of it). */
int rkv_handler_check(const struct rkv_handler_table *t, int op, enum rkv_dtype dt, int has_state);
/* The param of a built-in op: SGD's and ADAGRAD's learning rate must be
 * finite and not negative (-RKV_EINVAL); the others' is not read, and a
 * custom op's is its handler's business (0). Made by the client before it
 * sends a push and by a server before it applies or logs one: a server
 * took any lr a PUSH said, and one NaN made every row it named NaN for
 * good. */
int rkv_handler_check_param(int op, enum rkv_dtype dt, double param);
/* rkv_handler_apply for an op that rkv_handler_check accepted for dt and
 * state: a request's rows are checked once, not once each. */
void rkv_handler_run(const struct rkv_handler_table *t, int op, enum rkv_dtype dt, void *row,
                     void *state, const void *in, size_t n_elems, double param);

#endif
