/* The twin's actor stacks are calloc'd by SimGrid, one per actor (~180,000
 * at 65,536 nodes). glibc's malloc maps at most 65,536 chunks of its own
 * and moves its mmap threshold up when one is freed; past that, stacks
 * came from the heap, and calloc zeroed part of each (10 GB resident at
 * 65,536 nodes before any actor ran). rkv_twin_stacks_mmapped lifts both:
 * more stacks than glibc's default cap must each get a mapping, and one
 * freed must not send the next to the heap. */
#include <malloc.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rkv.h"
#include "sim/twin/twin.h"

enum { STACK_KIB = 256, STACKS = 66000 }; /* past glibc's M_MMAP_MAX, 65,536 */

/* The sanitizers bring their own allocator, which neither mallopt nor
 * mallinfo2 reaches (and whose 17 GB of stacks LeakSanitizer then counts). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define STACKS_GLIBC_MALLOC 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define STACKS_GLIBC_MALLOC 0
#endif
#endif
#ifndef STACKS_GLIBC_MALLOC
#define STACKS_GLIBC_MALLOC 1
#endif

static void test_more_stacks_than_glibc_maps_by_default(void **state)
{
    (void)state;
    if (!STACKS_GLIBC_MALLOC)
        skip();
    /* A large block freed before, as SimGrid's platform of 16,384 machines
     * frees its grown vectors: the threshold moved above the stacks, and
     * setting M_MMAP_MAX alone left it there (21 GB resident at 65,536
     * nodes). */
    char *volatile big = malloc(4u << 20); /* volatile: not elided */
    assert_non_null(big);
    big[0] = 1;
    free(big);
    rkv_twin_stacks_mmapped();
    void **stacks = calloc(STACKS, sizeof(*stacks));
    assert_non_null(stacks);
    size_t mapped0 = mallinfo2().hblks;
    for (int i = 0; i < STACKS; i++) {
        stacks[i] = calloc((size_t)STACK_KIB * 1024, 1);
        assert_non_null(stacks[i]);
    }
    assert_true(mallinfo2().hblks - mapped0 >= STACKS);
    /* A freed stack does not raise the threshold: the next is mapped too. */
    free(stacks[0]);
    stacks[0] = calloc((size_t)STACK_KIB * 1024, 1);
    assert_true(mallinfo2().hblks - mapped0 >= STACKS);
    for (int i = 0; i < STACKS; i++)
        free(stacks[i]);
    assert_int_equal(mallinfo2().hblks, mapped0);
    free(stacks);
}

/* With a guard page each stack is two mappings that do not merge: past
 * vm.max_map_count the run is refused before any actor is made, with the
 * sysctl to raise it; without one, or with the limit unknown, it runs. */
static void test_guard_pages_past_the_map_count_refused(void **state)
{
    (void)state;
    char err[512] = "";
    assert_int_equal(rkv_twin_maps_check(4 * 65536, 0, 65530, err, sizeof(err)), 0);
    assert_int_equal(rkv_twin_maps_check(4 * 4096, 4096, 65530, err, sizeof(err)), 0);
    assert_int_equal(rkv_twin_maps_check(4 * 65536, 4096, 0, err, sizeof(err)), 0);
    assert_int_equal(rkv_twin_maps_check(4 * 16384, 4096, 65530, err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, "contexts/guard-size:4096"));
    assert_non_null(strstr(err, "vm.max_map_count (65530)"));
    assert_non_null(strstr(err, "sysctl -w vm.max_map_count=135168"));
    assert_int_equal(rkv_twin_maps_check(4 * 65536, 0, 1000, err, sizeof(err)), -RKV_ECONFIG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_guard_pages_past_the_map_count_refused),
        cmocka_unit_test(test_more_stacks_than_glibc_maps_by_default),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
