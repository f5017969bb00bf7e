/* Partition book and global-to-local (g2l) id map of one tensor.
 * Pure computation: the same answers on every node that built it from the
 * same (policy, rows, machines, book), which is what lets clients route a
 * row without asking anyone. */
#ifndef RKV_PBOOK_H
#define RKV_PBOOK_H

#include <stddef.h>
#include <stdint.h>

#include "rkv.h"

struct rkv_pbook {
    enum rkv_policy policy;
    uint64_t rows;
    uint32_t machines;
    uint32_t *book;       /* EXPLICIT: machine of each row (owned copy) */
    uint64_t *g2l;        /* EXPLICIT: local index of each row on its machine */
    uint64_t *local_rows; /* EXPLICIT: rows held by each machine (machines entries) */
    int user_local;       /* EXPLICIT: g2l was given (rkv_pbook_init_local), not derived */
};

/* RANGE: machine m holds [rows*m/M, rows*(m+1)/M); g2l = g - start(m).
 * HASH: machine = g % M; g2l = g / M.
 * EXPLICIT: machine = book[g]; g2l = number of rows before g on that machine.
 * Errors (-RKV_EINVAL with a message): rows 0 or > RKV_PROTO_MAX_ROWS-like
 * limits, machines 0, EXPLICIT without a book or with an entry >= machines. */
int rkv_pbook_init(struct rkv_pbook *pb, enum rkv_policy policy, uint64_t rows, uint32_t machines,
                   const uint32_t *book, char *err, size_t err_len);
/* EXPLICIT with a user-given global-to-local map (DGL's set_global2local):
 * row g lives at local index local[g] on machine book[g]. local may be NULL
 * (then as rkv_pbook_init). -RKV_EINVAL, naming the first bad row, unless
 * on each machine m the indices of its rows are a permutation of
 * 0..local_rows(m)-1 (and -RKV_EINVAL for local with another policy). */
int rkv_pbook_init_local(struct rkv_pbook *pb, enum rkv_policy policy, uint64_t rows,
                         uint32_t machines, const uint32_t *book, const uint64_t *local, char *err,
                         size_t err_len);
void rkv_pbook_free(struct rkv_pbook *pb);
/* Preconditions: gid < pb->rows (asserted). */
uint32_t rkv_pbook_machine(const struct rkv_pbook *pb, uint64_t gid);
uint64_t rkv_pbook_g2l(const struct rkv_pbook *pb, uint64_t gid);
uint64_t rkv_pbook_local_rows(const struct rkv_pbook *pb, uint32_t machine);

#endif
