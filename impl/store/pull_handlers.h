/* Pull handlers: what a pull returns for a stored row (rkv_client_pull_with).
 * Id 0 is the row itself, RKV_PULL_WITH_STATE the row and its optimizer
 * state; custom ones are registered per node, as custom push ops are. */
#ifndef RKV_PULL_HANDLERS_H
#define RKV_PULL_HANDLERS_H

#include <stddef.h>
#include <stdint.h>

#include "rkv.h"

struct rkv_tensor;
struct rkv_shard;

struct rkv_pull_table {
    rkv_pull_fn fn[RKV_OP_MAX];
    void *user[RKV_OP_MAX];
    uint32_t mult[RKV_OP_MAX], add[RKV_OP_MAX]; /* reply row: mult x row_len + add elements */
};

/* id in [RKV_PULL_CUSTOM, RKV_OP_MAX), mult or add non-zero; a NULL fn
 * unregisters. -RKV_EINVAL otherwise. */
int rkv_pull_register(struct rkv_pull_table *t, int id, rkv_pull_fn fn, uint32_t mult, uint32_t add,
                      void *user);
/* The same into *tp, made on first use (NULL until then). */
int rkv_pull_register_at(struct rkv_pull_table **tp, int id, rkv_pull_fn fn, uint32_t mult,
                         uint32_t add, void *user);

/* Whether pull handler id applies to tensor t on this node, and the
 * elements it writes per row (*out_len_p, set on success only):
 * -RKV_ENOHANDLER unknown or unregistered id, -RKV_EINVAL WITH_STATE on a
 * tensor without state, -RKV_ELIMIT a reply row over the largest row. */
int rkv_pull_check(const struct rkv_pull_table *pt, int id, const struct rkv_tensor *t,
                   uint32_t *out_len_p, char *err, size_t err_len);

/* Writes handler id's reply for global row gid (on sh's machine) to out,
 * under the row's lock. The caller checked id with rkv_pull_check.
 * -RKV_ETIMEDOUT (out untouched) when the lock is not had by deadline_ns
 * (port now_ns; 0: no deadline, never fails). */
int rkv_pull_row(struct rkv_shard *sh, const struct rkv_tensor *t, const struct rkv_pull_table *pt,
                 int id, double param, uint64_t gid, uint32_t out_len, uint8_t *out,
                 uint64_t deadline_ns);

#endif
