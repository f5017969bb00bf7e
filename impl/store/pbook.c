/* Partition book: which machine holds a global row, and where on it. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "store/pbook.h"
#include "util/util.h"

/* RANGE multiplies rows by a machine index (at most RKV_MAX_MACHINES) and a
 * row id by the machine count; the limits keep both inside 64 bits. */
_Static_assert(RKV_PROTO_MAX_ROWS <= UINT64_MAX / RKV_MAX_MACHINES,
               "rows * machines must fit in 64 bits");

/* First row of machine m under RANGE (m == machines gives rows). */
static uint64_t range_start(const struct rkv_pbook *pb, uint32_t m)
{
    assert(m <= pb->machines);
    return pb->rows * m / pb->machines;
}

/* The largest m with start(m) <= g; it owns g because start(m+1) > g.
 * start(m) <= g  <=>  rows*m < (g+1)*M  <=>  m <= ((g+1)*M - 1) / rows. */
static uint32_t range_machine(const struct rkv_pbook *pb, uint64_t g)
{
    uint64_t m = ((g + 1) * pb->machines - 1) / pb->rows;
    assert(m < pb->machines);
    assert(range_start(pb, (uint32_t)m) <= g && g < range_start(pb, (uint32_t)m + 1));
    return (uint32_t)m;
}

/* Copies the book and numbers each machine's rows in id order, one pass. */
static int build_explicit(struct rkv_pbook *pb, const uint32_t *book, char *err, size_t el)
{
    uint64_t book_bytes, g2l_bytes;
    if (!rkv_mul_ok(pb->rows, sizeof(*pb->book), &book_bytes) || book_bytes > SIZE_MAX ||
        !rkv_mul_ok(pb->rows, sizeof(*pb->g2l), &g2l_bytes) || g2l_bytes > SIZE_MAX)
        return rkv_errf(err, el, -RKV_ENOMEM, "pbook: %llu rows do not fit in memory",
                        (unsigned long long)pb->rows);
    pb->book = malloc((size_t)book_bytes);
    pb->g2l = malloc((size_t)g2l_bytes);
    if (!pb->book || !pb->g2l)
        return rkv_errf(err, el, -RKV_ENOMEM, "pbook: out of memory for a %llu-row book",
                        (unsigned long long)pb->rows);
    for (uint64_t g = 0; g < pb->rows; g++) {
        uint32_t m = book[g];
        if (m >= pb->machines)
            return rkv_errf(err, el, -RKV_EINVAL,
                            "pbook: book[%llu] = %u but there are %u "
                            "machines",
                            (unsigned long long)g, m, pb->machines);
        pb->book[g] = m;
        pb->g2l[g] = pb->local_rows[m]++;
    }
    return 0;
}

static int check_args(enum rkv_policy policy, uint64_t rows, uint32_t machines,
                      const uint32_t *book, char *err, size_t el)
{
    if (rows == 0 || rows > RKV_PROTO_MAX_ROWS)
        return rkv_errf(err, el, -RKV_EINVAL, "pbook: rows %llu outside [1, %llu]",
                        (unsigned long long)rows, RKV_PROTO_MAX_ROWS);
    if (machines == 0 || machines > RKV_MAX_MACHINES)
        return rkv_errf(err, el, -RKV_EINVAL, "pbook: machines %u outside [1, %d]", machines,
                        RKV_MAX_MACHINES);
    if (policy != RKV_PART_RANGE && policy != RKV_PART_HASH && policy != RKV_PART_EXPLICIT)
        return rkv_errf(err, el, -RKV_EINVAL, "pbook: policy %d unknown", (int)policy);
    if (policy == RKV_PART_EXPLICIT && !book)
        return rkv_errf(err, el, -RKV_EINVAL, "pbook: EXPLICIT policy without a book");
    return 0;
}

int rkv_pbook_init(struct rkv_pbook *pb, enum rkv_policy policy, uint64_t rows, uint32_t machines,
                   const uint32_t *book, char *err, size_t err_len)
{
    assert(pb);
    int rc = check_args(policy, rows, machines, book, err, err_len);
    if (rc < 0)
        return rc;
    struct rkv_pbook b = {.policy = policy, .rows = rows, .machines = machines};
    /* RANGE and HASH answer from (rows, machines) alone: no table with an
     * entry per machine, which every node would hold per tensor (the twin
     * holds every node in one process: N nodes x M machines). */
    if (policy != RKV_PART_EXPLICIT)
        goto done;
    b.local_rows = calloc(machines, sizeof(*b.local_rows));
    if (!b.local_rows)
        return rkv_errf(err, err_len, -RKV_ENOMEM, "pbook: out of memory");
    rc = build_explicit(&b, book, err, err_len);
    if (rc < 0) {
        rkv_pbook_free(&b);
        return rc;
    }
done:
    *pb = b;
    return 0;
}

/* Replaces the derived g2l by the user's, once every index is known to be
 * in range and used once on its machine. seen[] holds, per machine slot
 * (first[m] + local index), the row that took it + 1, so that a repeat
 * names both rows. */
static int apply_local(struct rkv_pbook *pb, const uint64_t *local, char *err, size_t el)
{
    uint64_t *first = malloc(((size_t)pb->machines + 1) * sizeof(*first));
    uint64_t *seen = calloc((size_t)pb->rows, sizeof(*seen));
    int rc = 0;
    if (!first || !seen) {
        rc = rkv_errf(err, el, -RKV_ENOMEM, "pbook: out of memory checking a %llu-row local index",
                      (unsigned long long)pb->rows);
        goto out;
    }
    first[0] = 0;
    for (uint32_t m = 0; m < pb->machines; m++)
        first[m + 1] = first[m] + pb->local_rows[m];
    assert(first[pb->machines] == pb->rows);
    for (uint64_t g = 0; g < pb->rows && rc == 0; g++) {
        uint32_t m = pb->book[g];
        uint64_t l = local[g];
        if (l >= pb->local_rows[m])
            rc = rkv_errf(err, el, -RKV_EINVAL,
                          "local index: row %llu has index %llu but machine %u holds %llu rows "
                          "(indices 0..%llu)",
                          (unsigned long long)g, (unsigned long long)l, m,
                          (unsigned long long)pb->local_rows[m],
                          (unsigned long long)pb->local_rows[m] - 1);
        else if (seen[first[m] + l])
            rc = rkv_errf(err, el, -RKV_EINVAL,
                          "local index: row %llu has index %llu on machine %u, as row %llu has "
                          "(not a permutation)",
                          (unsigned long long)g, (unsigned long long)l, m,
                          (unsigned long long)seen[first[m] + l] - 1);
        else
            seen[first[m] + l] = g + 1;
    }
    if (rc == 0) {
        memcpy(pb->g2l, local, (size_t)pb->rows * sizeof(*pb->g2l));
        pb->user_local = 1;
    }
out:
    free(seen);
    free(first);
    return rc;
}

int rkv_pbook_init_local(struct rkv_pbook *pb, enum rkv_policy policy, uint64_t rows,
                         uint32_t machines, const uint32_t *book, const uint64_t *local, char *err,
                         size_t err_len)
{
    if (local && policy != RKV_PART_EXPLICIT)
        return rkv_errf(err, err_len, -RKV_EINVAL,
                        "pbook: a local index needs the EXPLICIT policy (a book)");
    struct rkv_pbook b;
    int rc = rkv_pbook_init(&b, policy, rows, machines, book, err, err_len);
    if (rc < 0 || !local)
        goto done;
    if ((rc = apply_local(&b, local, err, err_len)) < 0) {
        rkv_pbook_free(&b);
        return rc;
    }
done:
    if (rc == 0)
        *pb = b;
    return rc;
}

void rkv_pbook_free(struct rkv_pbook *pb)
{
    free(pb->book);
    free(pb->g2l);
    free(pb->local_rows);
    memset(pb, 0, sizeof(*pb));
}

uint32_t rkv_pbook_machine(const struct rkv_pbook *pb, uint64_t gid)
{
    assert(gid < pb->rows);
    switch (pb->policy) {
    case RKV_PART_RANGE:
        return range_machine(pb, gid);
    case RKV_PART_HASH:
        return (uint32_t)(gid % pb->machines);
    case RKV_PART_EXPLICIT:
        return pb->book[gid];
    }
    assert(!"pbook: unknown policy");
    return 0;
}

uint64_t rkv_pbook_g2l(const struct rkv_pbook *pb, uint64_t gid)
{
    assert(gid < pb->rows);
    switch (pb->policy) {
    case RKV_PART_RANGE:
        return gid - range_start(pb, range_machine(pb, gid));
    case RKV_PART_HASH:
        return gid / pb->machines;
    case RKV_PART_EXPLICIT:
        return pb->g2l[gid];
    }
    assert(!"pbook: unknown policy");
    return 0;
}

uint64_t rkv_pbook_local_rows(const struct rkv_pbook *pb, uint32_t machine)
{
    assert(machine < pb->machines);
    switch (pb->policy) {
    case RKV_PART_RANGE:
        return range_start(pb, machine + 1) - range_start(pb, machine);
    case RKV_PART_HASH:
        return pb->rows / pb->machines + (machine < pb->rows % pb->machines);
    case RKV_PART_EXPLICIT:
        return pb->local_rows[machine];
    }
    assert(!"pbook: unknown policy");
    return 0;
}
