#include "sim/backend/heap.h"

#include <assert.h>
#include <stdlib.h>

#include "util/util.h"

static int key_less(double ka, uint64_t sa, double kb, uint64_t sb)
{
    return ka < kb || (ka == kb && sa < sb);
}

static int ent_less(struct sim_heap_ent a, struct sim_heap_ent b)
{
    return key_less(a.key, a.seq, b.key, b.seq);
}

static void heap_set(struct sim_heap *h, uint32_t i, struct sim_heap_ent e)
{
    h->a[i] = e;
    e.n->idx = i;
}

/* Moves the entry at i up or down to its place. */
static void heap_sift(struct sim_heap *h, uint32_t i)
{
    struct sim_heap_ent e = h->a[i];
    while (i && ent_less(e, h->a[(i - 1) / 2])) {
        heap_set(h, i, h->a[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= h->len)
            break;
        if (c + 1 < h->len && ent_less(h->a[c + 1], h->a[c]))
            c++;
        if (!ent_less(h->a[c], e))
            break;
        heap_set(h, i, h->a[c]);
        i = c;
    }
    heap_set(h, i, e);
}

int sim_heap_push(struct sim_heap *h, struct sim_heap_node *n)
{
    if (h->len == h->cap) {
        uint32_t cap = h->cap ? 2 * h->cap : 8;
        struct sim_heap_ent *a = realloc(h->a, cap * sizeof(*a));
        if (!a)
            return -RKV_ENOMEM;
        h->a = a;
        h->cap = cap;
    }
    heap_set(h, h->len++, (struct sim_heap_ent){.key = n->key, .seq = n->seq, .n = n});
    heap_sift(h, h->len - 1);
    return 0;
}

void sim_heap_remove(struct sim_heap *h, struct sim_heap_node *n)
{
    uint32_t i = n->idx;
    assert(i < h->len && h->a[i].n == n);
    struct sim_heap_ent last = h->a[--h->len];
    if (i == h->len)
        return;
    heap_set(h, i, last);
    heap_sift(h, i);
}

struct sim_heap_node *sim_heap_pop(struct sim_heap *h)
{
    assert(h->len > 0);
    struct sim_heap_node *top = h->a[0].n;
    sim_heap_remove(h, top);
    return top;
}

void sim_heap_fini(struct sim_heap *h)
{
    free(h->a);
    *h = (struct sim_heap){0};
}

int sim_qheap_push(struct sim_qheap *h, struct sim_heap_node *n)
{
    struct sim_heap_ent e = {.key = n->key, .seq = n->seq, .n = n};
    if (h->q_len && ent_less(e, h->q[(h->q_head + h->q_len - 1) % h->q_cap]))
        return sim_heap_push(&h->heap, n);
    if (h->q_len == h->q_cap) {
        uint32_t cap = h->q_cap ? 2 * h->q_cap : 8;
        struct sim_heap_ent *q = malloc(cap * sizeof(*q));
        if (!q)
            return -RKV_ENOMEM;
        for (uint32_t i = 0; i < h->q_len; i++) /* unwrapped */
            q[i] = h->q[(h->q_head + i) % h->q_cap];
        free(h->q);
        h->q = q;
        h->q_head = 0;
        h->q_cap = cap;
    }
    h->q[(h->q_head + h->q_len++) % h->q_cap] = e;
    return 0;
}

/* 1 when the queue's front comes first (both non-empty or either). */
static int qheap_front_first(const struct sim_qheap *h)
{
    if (!h->q_len)
        return 0;
    return !h->heap.len || !ent_less(h->heap.a[0], h->q[h->q_head]);
}

struct sim_heap_node *sim_qheap_top(const struct sim_qheap *h)
{
    if (qheap_front_first(h))
        return h->q[h->q_head].n;
    return sim_heap_top(&h->heap);
}

double sim_qheap_top_key(const struct sim_qheap *h)
{
    assert(sim_qheap_len(h) > 0);
    return qheap_front_first(h) ? h->q[h->q_head].key : sim_heap_top_key(&h->heap);
}

struct sim_heap_node *sim_qheap_pop(struct sim_qheap *h)
{
    assert(sim_qheap_len(h) > 0);
    if (qheap_front_first(h)) {
        struct sim_heap_node *n = h->q[h->q_head].n;
        h->q_head = (h->q_head + 1) % h->q_cap;
        h->q_len--;
        return n;
    }
    return sim_heap_pop(&h->heap);
}

void sim_qheap_fini(struct sim_qheap *h)
{
    sim_heap_fini(&h->heap);
    free(h->q);
    *h = (struct sim_qheap){0};
}
