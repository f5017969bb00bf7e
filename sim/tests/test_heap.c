/* The twin's schedules (sim/backend/heap.h): the heap, and the heap with a
 * queue in front, pop in (key, seq) order whatever the order of pushes,
 * with pops between pushes, equal keys, and a queue that wraps and grows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sim/backend/heap.h"

enum { N = 20000 };

static struct sim_heap_node nodes[N];

/* The least of the nodes not yet popped, by (key, seq): the reference. */
static struct sim_heap_node *least(const int *in, int n)
{
    struct sim_heap_node *best = NULL;
    for (int i = 0; i < n; i++) {
        struct sim_heap_node *x = &nodes[in[i]];
        if (!best || x->key < best->key || (x->key == best->key && x->seq < best->seq))
            best = x;
    }
    return best;
}

/* Keys rise with some noise (out_of_order_pct of them earlier than the
 * last), from a small set so that equal keys are common; pops come between
 * pushes. Every pop must be the reference's least. */
static void run_mix(int use_q, int out_of_order_pct, unsigned seed)
{
    struct sim_heap h = {0};
    struct sim_qheap q = {0};
    int *in = malloc(N * sizeof(*in)), n_in = 0, pushed = 0;
    assert_non_null(in);
    srand(seed);
    double now = 0;
    uint64_t seq = 0;
    while (pushed < N || n_in) {
        int push = pushed < N && (n_in == 0 || rand() % 100 < 55);
        if (push) {
            struct sim_heap_node *x = &nodes[pushed];
            if (rand() % 100 < out_of_order_pct)
                x->key = now - (rand() % 4);
            else
                x->key = (now += rand() % 2); /* equal to the last half the time */
            x->seq = seq++;
            assert_int_equal(use_q ? sim_qheap_push(&q, x) : sim_heap_push(&h, x), 0);
            in[n_in++] = pushed++;
        } else {
            struct sim_heap_node *want = least(in, n_in);
            assert_ptr_equal(use_q ? sim_qheap_top(&q) : sim_heap_top(&h), want);
            struct sim_heap_node *got = use_q ? sim_qheap_pop(&q) : sim_heap_pop(&h);
            assert_ptr_equal(got, want);
            for (int i = 0; i < n_in; i++)
                if (&nodes[in[i]] == got) {
                    in[i] = in[--n_in];
                    break;
                }
        }
        assert_int_equal(use_q ? sim_qheap_len(&q) : h.len, (uint32_t)n_in);
    }
    assert_null(use_q ? sim_qheap_top(&q) : sim_heap_top(&h));
    sim_heap_fini(&h);
    sim_qheap_fini(&q);
    free(in);
}

static void test_heap_order(void **state)
{
    (void)state;
    run_mix(0, 10, 1);
    run_mix(0, 100, 2);
}

static void test_qheap_order_in_order(void **state)
{
    (void)state;
    run_mix(1, 0, 3); /* the queue alone, wrapping and growing */
}

static void test_qheap_order_mixed(void **state)
{
    (void)state;
    run_mix(1, 5, 4);
    run_mix(1, 50, 5);
    run_mix(1, 100, 6);
}

/* Nodes pushed into the heap part directly (timers) still pop in order
 * with the queued ones. */
static void test_qheap_direct_heap_pushes(void **state)
{
    (void)state;
    struct sim_qheap q = {0};
    for (int i = 0; i < 100; i++) {
        nodes[i] = (struct sim_heap_node){.key = i % 10 == 0 ? 1000 - i : i, .seq = (uint64_t)i};
        if (i % 10 == 0)
            assert_int_equal(sim_heap_push(&q.heap, &nodes[i]), 0);
        else
            assert_int_equal(sim_qheap_push(&q, &nodes[i]), 0);
    }
    double last = -1;
    for (int i = 0; i < 100; i++) {
        struct sim_heap_node *x = sim_qheap_pop(&q);
        assert_true(x->key >= last);
        last = x->key;
    }
    assert_int_equal(sim_qheap_len(&q), 0);
    sim_qheap_fini(&q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_heap_order),
        cmocka_unit_test(test_qheap_order_in_order),
        cmocka_unit_test(test_qheap_order_mixed),
        cmocka_unit_test(test_qheap_direct_heap_pushes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
