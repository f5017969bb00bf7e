/* Unit tests of the partition book: every policy maps the global ids onto
 * (machine, local id) pairs one to one, and bad arguments are refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "rkv.h"
#include "store/pbook.h"

#define ERR_BYTES 256

struct shape {
    uint64_t rows;
    uint32_t machines;
};

/* Small enough to check exhaustively; includes machines > rows and rows 1. */
static const struct shape small_shapes[] = {
    {1, 1},   {1, 5},   {2, 3},    {3, 7},       {7, 3},
    {10, 10}, {100, 1}, {1000, 7}, {1000, 1024}, {65537, 1024},
};

static void pbook_ok(struct rkv_pbook *pb, enum rkv_policy policy, uint64_t rows, uint32_t machines,
                     const uint32_t *book)
{
    char err[ERR_BYTES] = "";
    int rc = rkv_pbook_init(pb, policy, rows, machines, book, err, sizeof(err));
    if (rc != 0)
        fail_msg("pbook_init(%d, %llu, %u): %s", policy, (unsigned long long)rows, machines, err);
}

/* Every (machine, local) pair is hit exactly once and local ids stay below
 * the machine's row count: the map is a bijection. */
static void check_bijective(const struct rkv_pbook *pb)
{
    uint64_t total = 0;
    uint64_t *first = calloc(pb->machines + 1, sizeof(*first));
    assert_non_null(first);
    for (uint32_t m = 0; m < pb->machines; m++) {
        first[m + 1] = first[m] + rkv_pbook_local_rows(pb, m);
        total += rkv_pbook_local_rows(pb, m);
    }
    assert_int_equal(total, pb->rows);
    uint8_t *seen = calloc(pb->rows, 1);
    assert_non_null(seen);
    for (uint64_t g = 0; g < pb->rows; g++) {
        uint32_t m = rkv_pbook_machine(pb, g);
        uint64_t l = rkv_pbook_g2l(pb, g);
        assert_true(m < pb->machines);
        assert_true(l < rkv_pbook_local_rows(pb, m));
        assert_int_equal(seen[first[m] + l], 0);
        seen[first[m] + l] = 1;
    }
    free(seen);
    free(first);
}

/* Local ids follow global order on each machine (a shard is a sorted
 * subsequence, which lets a range scan stay a range scan). */
static void check_ordered(const struct rkv_pbook *pb)
{
    uint64_t *next = calloc(pb->machines, sizeof(*next));
    assert_non_null(next);
    for (uint64_t g = 0; g < pb->rows; g++) {
        uint32_t m = rkv_pbook_machine(pb, g);
        assert_int_equal(rkv_pbook_g2l(pb, g), next[m]);
        next[m]++;
    }
    free(next);
}

static void check_balanced(const struct rkv_pbook *pb)
{
    uint64_t lo = UINT64_MAX, hi = 0;
    for (uint32_t m = 0; m < pb->machines; m++) {
        uint64_t n = rkv_pbook_local_rows(pb, m);
        lo = n < lo ? n : lo;
        hi = n > hi ? n : hi;
    }
    assert_true(hi - lo <= 1);
}

/* Machine m holds exactly [rows*m/M, rows*(m+1)/M). */
static void check_range_machine(const struct rkv_pbook *pb, uint32_t m)
{
    uint64_t start = pb->rows * m / pb->machines;
    uint64_t end = pb->rows * (m + 1) / pb->machines;
    assert_int_equal(rkv_pbook_local_rows(pb, m), end - start);
    if (start == end)
        return;
    assert_int_equal(rkv_pbook_machine(pb, start), m);
    assert_int_equal(rkv_pbook_g2l(pb, start), 0);
    assert_int_equal(rkv_pbook_machine(pb, end - 1), m);
    assert_int_equal(rkv_pbook_g2l(pb, end - 1), end - 1 - start);
    if (start > 0)
        assert_true(rkv_pbook_machine(pb, start - 1) < m);
    if (end < pb->rows)
        assert_true(rkv_pbook_machine(pb, end) > m);
}

static void test_range_small(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(small_shapes) / sizeof(small_shapes[0]); i++) {
        struct rkv_pbook pb;
        pbook_ok(&pb, RKV_PART_RANGE, small_shapes[i].rows, small_shapes[i].machines, NULL);
        assert_null(pb.book);
        check_bijective(&pb);
        check_ordered(&pb); /* with bijectivity: contiguous ranges in machine order */
        check_balanced(&pb);
        for (uint32_t m = 0; m < pb.machines; m++)
            check_range_machine(&pb, m);
        for (uint64_t g = 1; g < pb.rows; g++)
            assert_true(rkv_pbook_machine(&pb, g) >= rkv_pbook_machine(&pb, g - 1));
        rkv_pbook_free(&pb);
    }
}

/* Rows up to the protocol limit, where rows * m needs more than 32 bits. */
static void test_range_large(void **state)
{
    (void)state;
    static const struct shape big[] = {
        {RKV_PROTO_MAX_ROWS, 1024}, {RKV_PROTO_MAX_ROWS, 3}, {RKV_PROTO_MAX_ROWS - 1, 1023},
        {(1ull << 32) + 1, 1000},   {RKV_PROTO_MAX_ROWS, 1}, {1000003, 1024},
    };
    for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++) {
        struct rkv_pbook pb;
        pbook_ok(&pb, RKV_PART_RANGE, big[i].rows, big[i].machines, NULL);
        uint64_t total = 0;
        for (uint32_t m = 0; m < pb.machines; m++) {
            check_range_machine(&pb, m);
            total += rkv_pbook_local_rows(&pb, m);
        }
        assert_int_equal(total, pb.rows);
        check_balanced(&pb);
        /* Pseudo-random spot checks: g - g2l(g) is its machine's start. */
        uint64_t x = 0x9e3779b97f4a7c15ull;
        for (int k = 0; k < 10000; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            uint64_t g = x % pb.rows;
            uint32_t m = rkv_pbook_machine(&pb, g);
            uint64_t l = rkv_pbook_g2l(&pb, g);
            assert_true(l < rkv_pbook_local_rows(&pb, m));
            assert_int_equal(g - l, pb.rows * m / pb.machines);
        }
        rkv_pbook_free(&pb);
    }
}

static void test_hash(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(small_shapes) / sizeof(small_shapes[0]); i++) {
        struct rkv_pbook pb;
        pbook_ok(&pb, RKV_PART_HASH, small_shapes[i].rows, small_shapes[i].machines, NULL);
        check_bijective(&pb);
        check_ordered(&pb);
        check_balanced(&pb);
        for (uint64_t g = 0; g < pb.rows; g++) {
            assert_int_equal(rkv_pbook_machine(&pb, g), g % pb.machines);
            assert_int_equal(rkv_pbook_g2l(&pb, g), g / pb.machines);
        }
        rkv_pbook_free(&pb);
    }
    struct rkv_pbook pb;
    pbook_ok(&pb, RKV_PART_HASH, RKV_PROTO_MAX_ROWS, 1000, NULL);
    check_balanced(&pb);
    uint64_t g = RKV_PROTO_MAX_ROWS - 1;
    assert_int_equal(rkv_pbook_machine(&pb, g), g % 1000);
    assert_int_equal(rkv_pbook_g2l(&pb, g), g / 1000);
    assert_true(rkv_pbook_g2l(&pb, g) < rkv_pbook_local_rows(&pb, g % 1000));
    rkv_pbook_free(&pb);
}

static uint32_t *book_new(uint64_t rows, uint32_t machines)
{
    uint32_t *book = malloc(rows * sizeof(*book));
    assert_non_null(book);
    /* Uneven on purpose: some machines get more rows, some none. */
    for (uint64_t g = 0; g < rows; g++)
        book[g] = (uint32_t)((g * 7 + g / 3) % machines) / 2 * 2 % machines;
    return book;
}

static void test_explicit(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(small_shapes) / sizeof(small_shapes[0]); i++) {
        uint64_t rows = small_shapes[i].rows;
        uint32_t machines = small_shapes[i].machines;
        uint32_t *book = book_new(rows, machines);
        struct rkv_pbook pb;
        pbook_ok(&pb, RKV_PART_EXPLICIT, rows, machines, book);
        assert_ptr_not_equal(pb.book, book);
        /* The book is a copy: the caller may reuse its own. */
        memset(book, 0xff, rows * sizeof(*book));
        uint32_t *again = book_new(rows, machines);
        for (uint64_t g = 0; g < rows; g++)
            assert_int_equal(rkv_pbook_machine(&pb, g), again[g]);
        check_bijective(&pb);
        check_ordered(&pb);
        rkv_pbook_free(&pb);
        free(again);
        free(book);
    }
    /* Everything on one machine of several. */
    uint32_t book[4] = {2, 2, 2, 2};
    struct rkv_pbook pb;
    pbook_ok(&pb, RKV_PART_EXPLICIT, 4, 3, book);
    assert_int_equal(rkv_pbook_local_rows(&pb, 0), 0);
    assert_int_equal(rkv_pbook_local_rows(&pb, 1), 0);
    assert_int_equal(rkv_pbook_local_rows(&pb, 2), 4);
    assert_int_equal(rkv_pbook_g2l(&pb, 3), 3);
    rkv_pbook_free(&pb);
}

static void expect_init_error(enum rkv_policy policy, uint64_t rows, uint32_t machines,
                              const uint32_t *book, const char *what)
{
    char err[ERR_BYTES] = "";
    struct rkv_pbook pb = {0};
    assert_int_equal(rkv_pbook_init(&pb, policy, rows, machines, book, err, sizeof(err)),
                     -RKV_EINVAL);
    if (!strstr(err, what))
        fail_msg("error \"%s\" does not mention \"%s\"", err, what);
    /* Nothing was set or left allocated. */
    assert_null(pb.local_rows);
    assert_int_equal(pb.rows, 0);
}

static void test_errors(void **state)
{
    (void)state;
    const uint32_t book[5] = {0, 1, 2, 3, 1};
    expect_init_error(RKV_PART_RANGE, 0, 4, NULL, "rows 0");
    expect_init_error(RKV_PART_HASH, RKV_PROTO_MAX_ROWS + 1, 4, NULL, "rows 1099511627777");
    expect_init_error(RKV_PART_RANGE, 10, 0, NULL, "machines 0");
    expect_init_error(RKV_PART_RANGE, 10, RKV_MAX_MACHINES + 1, NULL, "machines 65537");
    expect_init_error((enum rkv_policy)0, 10, 4, NULL, "policy 0");
    expect_init_error((enum rkv_policy)4, 10, 4, NULL, "policy 4");
    expect_init_error(RKV_PART_EXPLICIT, 5, 4, NULL, "without a book");
    /* The first bad entry is named, and nothing leaks (ASan). */
    expect_init_error(RKV_PART_EXPLICIT, 5, 3, book, "book[3] = 3");
    expect_init_error(RKV_PART_EXPLICIT, 5, 1, book, "book[1] = 1");

    /* Freeing twice, or a book that never initialised, is harmless. */
    struct rkv_pbook pb = {0};
    rkv_pbook_free(&pb);
    pbook_ok(&pb, RKV_PART_EXPLICIT, 5, 4, book);
    rkv_pbook_free(&pb);
    rkv_pbook_free(&pb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_range_small), cmocka_unit_test(test_range_large),
        cmocka_unit_test(test_hash),        cmocka_unit_test(test_explicit),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
