/* The NIC core alone (nic_core.h), without a transport: the soft completion
 * queue's limit and reservations, the QP lifetime (closed entries dropped,
 * the QP freed by whichever of the reaper and the taker sees the last
 * reference), the bounds checks at their edges, and the wire codec's byte
 * layout (the verbs handshake and the tcp frames depend on it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "nic/nic_core.h"
#include "rkv.h"

struct freed {
    int n;
    struct rkv_nic_qp *last;
};

static void count_free(void *owner, struct rkv_nic_qp *qp)
{
    struct freed *f = owner;
    f->n++;
    f->last = qp;
}

static void push(struct rkv_nic_cq *cq, struct rkv_nic_qp *qp, uint64_t wr_id)
{
    assert_int_equal(rkv_nic_cq_emit(cq, qp, (struct rkv_wc){.wr_id = wr_id}), 0);
}

static void test_cq_limit_and_reservations(void **state)
{
    (void)state;
    struct freed fr = {0};
    struct rkv_nic_cq cq;
    rkv_nic_cq_init(&cq, 3, count_free, &fr);
    struct rkv_nic_qp qp = {0};
    assert_int_equal(rkv_nic_cq_reserve(&cq), 0);
    push(&cq, &qp, 1);
    push(&cq, &qp, 2);
    /* The reserved slot counts: the queue is full for anyone else. */
    assert_int_equal(rkv_nic_cq_emit(&cq, &qp, (struct rkv_wc){.wr_id = 9}), -RKV_ELIMIT);
    struct rkv_wc wc = {.wr_id = 3};
    rkv_nic_cq_push(&cq, &qp, &wc);
    assert_ptr_equal(wc.qp, (struct rkv_qp *)&qp);
    assert_int_equal(qp.cq_refs, 3);
    struct rkv_wc out[4];
    uint32_t popped;
    assert_int_equal(rkv_nic_cq_take(&cq, out, 2, &popped), 2);
    assert_int_equal(popped, 2);
    assert_int_equal(out[0].wr_id, 1);
    assert_int_equal(out[1].wr_id, 2);
    push(&cq, &qp, 4); /* wraps around the ring */
    assert_int_equal(rkv_nic_cq_take(&cq, out, 4, NULL), 2);
    assert_int_equal(out[0].wr_id, 3);
    assert_int_equal(out[1].wr_id, 4);
    assert_int_equal(qp.cq_refs, 0);
    assert_int_equal(fr.n, 0);
    rkv_nic_cq_destroy(&cq);
}

/* Entries of a closed QP are dropped; the QP goes with the last of (its
 * reaping, its last entry), whichever comes last. */
static void test_qp_lifetime(void **state)
{
    (void)state;
    struct freed fr = {0};
    struct rkv_nic_cq cq;
    rkv_nic_cq_init(&cq, 64, count_free, &fr);
    struct rkv_nic_qp a = {0}, b = {0};
    push(&cq, &a, 1);
    push(&cq, &b, 2);
    push(&cq, &a, 3);
    a.closed = 1;
    /* Closed: it completes nothing more. */
    assert_int_equal(rkv_nic_cq_emit(&cq, &a, (struct rkv_wc){.wr_id = 4}), 0);
    assert_int_equal(a.cq_refs, 2);
    assert_int_equal(rkv_nic_qp_reap(&a), 0); /* entries still name it: the taker frees it */
    struct rkv_wc out[1];
    assert_int_equal(rkv_nic_cq_take(&cq, out, 1, NULL), 1);
    assert_int_equal(out[0].wr_id, 2); /* a's first entry dropped on the way */
    assert_int_equal(fr.n, 0);
    assert_int_equal(rkv_nic_cq_take(&cq, out, 1, NULL), 0); /* a's last entry: freed */
    assert_int_equal(fr.n, 1);
    assert_ptr_equal(fr.last, &a);
    /* Reaped with no entry left: the reaper frees it. */
    b.closed = 1;
    assert_int_equal(rkv_nic_qp_reap(&b), 1);
    /* Destroying the queue frees reaped QPs whose last entries it held. */
    struct rkv_nic_qp c = {0};
    push(&cq, &c, 5);
    c.closed = 1;
    assert_int_equal(rkv_nic_qp_reap(&c), 0);
    rkv_nic_cq_destroy(&cq);
    assert_int_equal(fr.n, 2);
    assert_ptr_equal(fr.last, &c);
}

static void test_bounds(void **state)
{
    (void)state;
    assert_true(rkv_nic_range_ok(100, 50, 100, 50));
    assert_true(rkv_nic_range_ok(100, 50, 149, 1));
    assert_true(rkv_nic_range_ok(100, 50, 150, 0));
    assert_false(rkv_nic_range_ok(100, 50, 99, 1));
    assert_false(rkv_nic_range_ok(100, 50, 149, 2));
    assert_false(rkv_nic_range_ok(100, 50, 100, 51));
    assert_false(rkv_nic_range_ok(100, 50, UINT64_MAX - 3, 64)); /* would wrap */
    assert_false(rkv_nic_range_ok(UINT64_MAX - 10, 20, UINT64_MAX - 5, 20));

    struct rkv_nic nic = {.max_msg_bytes = 1000}, other = {.max_msg_bytes = 1000};
    uint8_t buf[256];
    struct rkv_mr mr = {.addr = buf, .len = sizeof(buf), .nic = &nic};
    struct rkv_sge s = {.addr = buf + 16, .len = 240, .mr = &mr};
    assert_int_equal(rkv_nic_sge_check(&nic, &s), 0);
    assert_int_equal(rkv_nic_sge_check(&other, &s), -RKV_EINVAL); /* another NIC's region */
    s.len = 241;
    assert_int_equal(rkv_nic_sge_check(&nic, &s), -RKV_EINVAL);
    s.len = 1001;
    assert_int_equal(rkv_nic_sge_check(&nic, &s), -RKV_ELIMIT);
    s = (struct rkv_sge){.addr = NULL, .len = 0, .mr = NULL}; /* empty: no region needed */
    assert_int_equal(rkv_nic_sge_check(&nic, &s), 0);
    assert_int_equal(rkv_nic_sge_check(&nic, NULL), -RKV_EINVAL);

    uint8_t *dst = NULL;
    char why[160];
    mr.access = RKV_ACCESS_REMOTE_WRITE;
    assert_int_equal(rkv_nic_write_target(&mr, 7, (uintptr_t)buf + 8, 8, &dst, why, sizeof(why)),
                     0);
    assert_ptr_equal(dst, buf + 8);
    assert_int_equal(rkv_nic_write_target(&mr, 7, (uintptr_t)buf + 250, 8, &dst, why, sizeof(why)),
                     -RKV_EACCESS);
    assert_non_null(strstr(why, "falls outside"));
    assert_int_equal(rkv_nic_write_target(NULL, 7, (uintptr_t)buf, 8, &dst, why, sizeof(why)),
                     -RKV_EACCESS);
    assert_non_null(strstr(why, "unknown rkey"));
    mr.access = RKV_ACCESS_LOCAL;
    assert_int_equal(rkv_nic_write_target(&mr, 7, (uintptr_t)buf, 8, &dst, why, sizeof(why)),
                     -RKV_EACCESS);
    assert_non_null(strstr(why, "does not allow remote writes"));
}

/* The wire is little-endian whatever the host: these bytes are what a peer
 * built elsewhere reads. */
static void test_codec_layout(void **state)
{
    (void)state;
    uint8_t b[8];
    rkv_nic_put16(b, 0x0102);
    assert_memory_equal(b, "\x02\x01", 2);
    assert_int_equal(rkv_nic_get16(b), 0x0102);
    rkv_nic_put32(b, 0x01020304u);
    assert_memory_equal(b, "\x04\x03\x02\x01", 4);
    assert_int_equal(rkv_nic_get32(b), 0x01020304u);
    rkv_nic_put64(b, 0x0102030405060708ull);
    assert_memory_equal(b, "\x08\x07\x06\x05\x04\x03\x02\x01", 8);
    assert_true(rkv_nic_get64(b) == 0x0102030405060708ull);
    rkv_nic_put64(b, UINT64_MAX - 1);
    assert_true(rkv_nic_get64(b) == UINT64_MAX - 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cq_limit_and_reservations),
        cmocka_unit_test(test_qp_lifetime),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_codec_layout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
