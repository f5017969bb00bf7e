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

#include <cmocka.h>

#include "sim/twin/twin.h"

enum { STACK_KIB = 256, STACKS = 66000 }; /* past glibc's M_MMAP_MAX, 65,536 */

static void test_more_stacks_than_glibc_maps_by_default(void **state)
{
    (void)state;
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_more_stacks_than_glibc_maps_by_default),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
