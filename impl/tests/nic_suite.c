/* The NIC conformance suite (nic_suite.h): nic.h's semantics, once, for
 * every backend. Each test starts from a fixture of two NICs, a (which
 * connects) and b (which listens), and one connection between them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nic_suite.h"
#include "rkv.h"

#define SUITE_MANY_QPS 24 /* more than a verbs CQ holds at first: it must grow */
#define SUITE_LOC_BYTES 4096u

/* ---- helpers ---- */

struct rkv_sge nic_sge(void *addr, uint32_t len, struct rkv_mr *mr)
{
    return (struct rkv_sge){.addr = addr, .len = len, .mr = mr};
}

void nic_fill(uint8_t *p, size_t len, uint8_t seed)
{
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)(seed + i * 7 + (i >> 9));
}

int nic_poll_one(struct rkv_nic *nic, struct rkv_wc *wc, uint32_t timeout_ms)
{
    memset(wc, 0, sizeof(*wc));
    return nic->ops->poll(nic, wc, 1, timeout_ms);
}

void nic_expect_wc(const struct nic_fx *f, struct rkv_nic *nic, struct rkv_qp *qp, int opcode,
                   struct rkv_wc *wc_p)
{
    struct rkv_wc wc;
    assert_int_equal(nic_poll_one(nic, &wc, f->env->wait_ms), 1);
    assert_int_equal(wc.opcode, opcode);
    assert_int_equal(wc.status, RKV_WC_SUCCESS);
    if (qp)
        assert_ptr_equal(wc.qp, qp);
    if (wc_p)
        *wc_p = wc;
}

void nic_expect_quiet(const struct nic_fx *f, struct rkv_nic *nic)
{
    struct rkv_wc wc;
    assert_int_equal(nic_poll_one(nic, &wc, f->env->quiet_ms), 0);
}

void nic_connect_pair(struct nic_fx *f, struct rkv_qp **qa_p, struct rkv_qp **qb_p)
{
    assert_int_equal(f->a->ops->connect(f->a, f->host, f->port, f->env->wait_ms, qa_p), 0);
    struct rkv_wc wc;
    nic_expect_wc(f, f->b, NULL, RKV_WC_CONNECTED, &wc);
    assert_non_null(wc.qp);
    *qb_p = wc.qp;
}

void nic_check_send(struct nic_fx *f, struct rkv_qp *qa, struct rkv_qp *qb, uint8_t seed)
{
    nic_fill(f->abuf, 1000, seed);
    memset(f->bloc, 0, SUITE_LOC_BYTES);
    struct rkv_sge rs = nic_sge(f->bloc, SUITE_LOC_BYTES, f->blmr);
    assert_int_equal(f->b->ops->post_recv(qb, 77, &rs), 0);
    struct rkv_sge ss = nic_sge(f->abuf, 1000, f->amr);
    assert_int_equal(f->a->ops->post_send(qa, 5, &ss, 1), 0);
    struct rkv_wc wc;
    nic_expect_wc(f, f->a, qa, RKV_WC_SEND, &wc);
    assert_int_equal(wc.wr_id, 5);
    assert_int_equal(wc.byte_len, 1000);
    nic_expect_wc(f, f->b, qb, RKV_WC_RECV, &wc);
    assert_int_equal(wc.wr_id, 77);
    assert_int_equal(wc.byte_len, 1000);
    assert_memory_equal(f->bloc, f->abuf, 1000);
}

void nic_expect_still_serving(struct nic_fx *f)
{
    struct rkv_qp *qa, *qb;
    nic_connect_pair(f, &qa, &qb);
    nic_check_send(f, qa, qb, 6);
    nic_expect_quiet(f, f->a);
    nic_expect_quiet(f, f->b);
    f->a->ops->qp_close(qa);
    f->b->ops->qp_close(qb);
    f->qa = f->qb = NULL;
}

/* ---- fixture ---- */

int nic_fx_setup(void **state)
{
    const struct nic_suite_env *env = *state;
    struct nic_fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->env = env;
    assert_int_equal(env->open(env->ctx, "a", &f->pa, &f->a), 0);
    assert_int_equal(env->open(env->ctx, "b", &f->pb, &f->b), 0);
    assert_int_equal(env->listen(env->ctx, f->b, f->host, sizeof(f->host), &f->port), 0);
    f->abuf = calloc(1, NIC_SUITE_BUF_BYTES);
    f->bbuf = calloc(1, NIC_SUITE_BUF_BYTES);
    f->bloc = calloc(1, SUITE_LOC_BYTES);
    assert_true(f->abuf && f->bbuf && f->bloc);
    assert_int_equal(
        f->a->ops->reg_mr(f->a, f->abuf, NIC_SUITE_BUF_BYTES, RKV_ACCESS_LOCAL, &f->amr), 0);
    assert_int_equal(
        f->b->ops->reg_mr(f->b, f->bbuf, NIC_SUITE_BUF_BYTES, RKV_ACCESS_REMOTE_WRITE, &f->bmr), 0);
    assert_int_equal(f->b->ops->reg_mr(f->b, f->bloc, SUITE_LOC_BYTES, RKV_ACCESS_LOCAL, &f->blmr),
                     0);
    nic_connect_pair(f, &f->qa, &f->qb);
    *state = f;
    return 0;
}

int nic_fx_teardown(void **state)
{
    struct nic_fx *f = *state;
    const struct nic_suite_env *env = f->env;
    if (f->b) {
        f->b->ops->dereg_mr(f->b, f->blmr);
        f->b->ops->dereg_mr(f->b, f->bmr);
        env->close(env->ctx, f->pb, f->b);
    }
    f->a->ops->dereg_mr(f->a, f->amr);
    env->close(env->ctx, f->pa, f->a);
    free(f->abuf);
    free(f->bbuf);
    free(f->bloc);
    free(f);
    *state = (void *)env; /* cmocka hands it to the next test's setup */
    return 0;
}

/* ---- the happy paths ---- */

static void test_send_recv(void **state)
{
    struct nic_fx *f = *state;
    nic_check_send(f, f->qa, f->qb, 1);
    /* Several receives are consumed in posting order. */
    for (uint64_t i = 0; i < 4; i++) {
        struct rkv_sge rs = nic_sge(f->bloc + i * 16, 16, f->blmr);
        assert_int_equal(f->b->ops->post_recv(f->qb, 100 + i, &rs), 0);
    }
    for (uint8_t i = 0; i < 4; i++) {
        f->abuf[i] = (uint8_t)(0xa0 + i);
        struct rkv_sge ss = nic_sge(f->abuf + i, 1, f->amr);
        assert_int_equal(f->a->ops->post_send(f->qa, i, &ss, 0), 0);
    }
    for (uint64_t i = 0; i < 4; i++) {
        struct rkv_wc wc;
        nic_expect_wc(f, f->b, f->qb, RKV_WC_RECV, &wc);
        assert_int_equal(wc.wr_id, 100 + i);
        assert_int_equal(wc.byte_len, 1);
        assert_int_equal(f->bloc[i * 16], 0xa0 + i);
    }
    /* Unsignalled sends complete nothing locally. */
    nic_expect_quiet(f, f->a);
    /* A zero-length SEND, with no buffer at all, consumes a receive too. */
    struct rkv_sge rs = nic_sge(f->bloc, 16, f->blmr);
    assert_int_equal(f->b->ops->post_recv(f->qb, 9, &rs), 0);
    struct rkv_sge empty = nic_sge(NULL, 0, NULL);
    assert_int_equal(f->a->ops->post_send(f->qa, 8, &empty, 1), 0);
    struct rkv_wc wc;
    nic_expect_wc(f, f->a, f->qa, RKV_WC_SEND, &wc);
    nic_expect_wc(f, f->b, f->qb, RKV_WC_RECV, &wc);
    assert_int_equal(wc.wr_id, 9);
    assert_int_equal(wc.byte_len, 0);
}

static void test_write_and_write_imm(void **state)
{
    struct nic_fx *f = *state;
    uint64_t base = (uintptr_t)f->bbuf;
    nic_fill(f->abuf, NIC_SUITE_BUF_BYTES, 3);
    struct rkv_sge w = nic_sge(f->abuf, 100, f->amr);
    assert_int_equal(f->a->ops->post_write(f->qa, 1, &w, base + 10, f->bmr->rkey, 0, 0, 0), 0);
    /* Large, so that it lands in many pieces: its completion waits for the last. */
    uint32_t big = NIC_SUITE_BUF_BYTES - 4096;
    struct rkv_sge wi = nic_sge(f->abuf + 4096, big, f->amr);
    struct rkv_sge rs = nic_sge(NULL, 0, NULL); /* a WRITE_IMM's receive carries no data */
    assert_int_equal(f->b->ops->post_recv(f->qb, 55, &rs), 0);
    assert_int_equal(
        f->a->ops->post_write(f->qa, 2, &wi, base + 4096, f->bmr->rkey, 1, 0xdeadbeef, 1), 0);
    struct rkv_wc wc;
    nic_expect_wc(f, f->a, f->qa, RKV_WC_WRITE, &wc);
    assert_int_equal(wc.wr_id, 2);
    nic_expect_wc(f, f->b, f->qb, RKV_WC_RECV_IMM, &wc);
    assert_int_equal(wc.wr_id, 55);
    assert_int_equal(wc.imm, 0xdeadbeef);
    assert_int_equal(wc.byte_len, big);
    assert_memory_equal(f->bbuf + 10, f->abuf, 100);
    assert_memory_equal(f->bbuf + 4096, f->abuf + 4096, big);
    assert_int_equal(f->bbuf[9], 0);
    assert_int_equal(f->bbuf[110], 0);
    /* A plain WRITE completes nothing at the target. */
    nic_expect_quiet(f, f->b);
}

/* A SEND posted after a large plain WRITE arrives after the WRITE's data. */
static void test_write_then_send_order(void **state)
{
    struct nic_fx *f = *state;
    nic_fill(f->abuf, NIC_SUITE_BUF_BYTES, 5);
    struct rkv_sge w = nic_sge(f->abuf, NIC_SUITE_BUF_BYTES / 2, f->amr);
    assert_int_equal(f->a->ops->post_write(f->qa, 1, &w, (uintptr_t)f->bbuf, f->bmr->rkey, 0, 0, 0),
                     0);
    struct rkv_sge rs = nic_sge(f->bloc, 16, f->blmr);
    assert_int_equal(f->b->ops->post_recv(f->qb, 3, &rs), 0);
    struct rkv_sge ss = nic_sge(f->abuf + NIC_SUITE_BUF_BYTES - 8, 8, f->amr);
    assert_int_equal(f->a->ops->post_send(f->qa, 4, &ss, 0), 0);
    struct rkv_wc wc;
    nic_expect_wc(f, f->b, f->qb, RKV_WC_RECV, &wc);
    assert_memory_equal(f->bbuf, f->abuf, NIC_SUITE_BUF_BYTES / 2);
}

static void test_rnr_backpressure(void **state)
{
    struct nic_fx *f = *state;
    nic_fill(f->abuf, 64, 9);
    struct rkv_sge ss = nic_sge(f->abuf, 64, f->amr);
    assert_int_equal(f->a->ops->post_send(f->qa, 1, &ss, 0), 0);
    nic_expect_quiet(f, f->b);
    struct rkv_sge rs = nic_sge(f->bloc, 64, f->blmr);
    assert_int_equal(f->b->ops->post_recv(f->qb, 9, &rs), 0);
    struct rkv_wc wc;
    nic_expect_wc(f, f->b, f->qb, RKV_WC_RECV, &wc);
    assert_int_equal(wc.wr_id, 9);
    assert_memory_equal(f->bloc, f->abuf, 64);
    /* A held-back WRITE_IMM completes only once its receive is posted. */
    struct rkv_sge w = nic_sge(f->abuf, 32, f->amr);
    assert_int_equal(f->a->ops->post_write(f->qa, 2, &w, (uintptr_t)f->bbuf, f->bmr->rkey, 1, 7, 0),
                     0);
    nic_expect_quiet(f, f->b);
    rs = nic_sge(NULL, 0, NULL);
    assert_int_equal(f->b->ops->post_recv(f->qb, 10, &rs), 0);
    nic_expect_wc(f, f->b, f->qb, RKV_WC_RECV_IMM, &wc);
    assert_int_equal(wc.imm, 7);
    assert_memory_equal(f->bbuf, f->abuf, 32);
    /* The connection still works after the stall. */
    nic_check_send(f, f->qa, f->qb, 4);
}

/* ---- local checks: bad input fails its own post ---- */

static void test_local_checks(void **state)
{
    struct nic_fx *f = *state;
    struct rkv_sge s = nic_sge(f->abuf + NIC_SUITE_BUF_BYTES - 8, 16, f->amr); /* past the mr */
    assert_int_equal(f->a->ops->post_send(f->qa, 1, &s, 1), -RKV_EINVAL);
    s = nic_sge(f->abuf, 16, NULL);
    assert_int_equal(f->a->ops->post_send(f->qa, 1, &s, 1), -RKV_EINVAL);
    s = nic_sge(f->bbuf, 16, f->bmr); /* another NIC's region */
    assert_int_equal(f->a->ops->post_write(f->qa, 1, &s, 0, 1, 0, 0, 1), -RKV_EINVAL);
    assert_int_equal(f->a->ops->post_send(f->qa, 1, NULL, 1), -RKV_EINVAL);
    if (f->a->max_msg_bytes < UINT32_MAX) { /* beyond the backend's message limit */
        s = nic_sge(f->abuf, f->a->max_msg_bytes + 1, f->amr);
        assert_int_equal(f->a->ops->post_send(f->qa, 1, &s, 1), -RKV_ELIMIT);
    }
    s = nic_sge(f->abuf - 1, 4, f->amr);
    assert_int_equal(f->b->ops->post_recv(f->qb, 1, &s), -RKV_EINVAL);
    nic_expect_quiet(f, f->a);
    /* Keys are unique and nonzero. */
    struct rkv_mr *m[8];
    for (int i = 0; i < 8; i++) {
        assert_int_equal(f->b->ops->reg_mr(f->b, f->bbuf, 64, RKV_ACCESS_REMOTE_WRITE, &m[i]), 0);
        assert_int_not_equal(m[i]->rkey, 0);
        assert_int_not_equal(m[i]->lkey, 0);
        assert_int_not_equal(m[i]->rkey, f->bmr->rkey);
        for (int j = 0; j < i; j++) {
            assert_int_not_equal(m[i]->rkey, m[j]->rkey);
            assert_int_not_equal(m[i]->lkey, m[j]->lkey);
        }
    }
    for (int i = 0; i < 8; i++)
        f->b->ops->dereg_mr(f->b, m[i]);
    nic_check_send(f, f->qa, f->qb, 2);
}

static void test_reg_mr_errors(void **state)
{
    struct nic_fx *f = *state;
    struct rkv_mr *mr = NULL;
    assert_int_equal(f->a->ops->reg_mr(f->a, f->abuf, 64, 4, &mr), -RKV_EINVAL);
    if (!rkv_nic_grants(f->a)) /* a region nothing could reach */
        assert_int_equal(f->a->ops->reg_mr(f->a, f->abuf, 64, RKV_ACCESS_REMOTE_GRANT, &mr),
                         -RKV_EINVAL);
    assert_int_equal(f->a->ops->reg_mr(f->a, NULL, 64, RKV_ACCESS_LOCAL, &mr), -RKV_EINVAL);
    assert_null(mr);
    /* An empty region is fine (a WRITE_IMM's receive needs none). */
    assert_int_equal(f->a->ops->reg_mr(f->a, NULL, 0, RKV_ACCESS_LOCAL, &mr), 0);
    f->a->ops->dereg_mr(f->a, mr);
    f->a->ops->dereg_mr(f->a, NULL); /* nothing to do */
    nic_check_send(f, f->qa, f->qb, 3);
}

/* ---- the target defends itself ---- */

/* The connection of one side just broke: it may first hear why (the failed
 * operation, with an error status, even unsignalled), then it sees one
 * DISCONNECTED. */
static void expect_broken(const struct nic_fx *f, struct rkv_nic *nic, struct rkv_qp *qp,
                          int want_status)
{
    struct rkv_wc wc;
    assert_int_equal(nic_poll_one(nic, &wc, f->env->wait_ms), 1);
    assert_ptr_equal(wc.qp, qp);
    if (wc.opcode == RKV_WC_DISCONNECTED)
        return;
    if (want_status)
        assert_int_equal(wc.status, want_status);
    else
        assert_int_not_equal(wc.status, RKV_WC_SUCCESS);
    nic_expect_wc(f, nic, qp, RKV_WC_DISCONNECTED, NULL);
}

/* The first connection was just killed by the target: both ends see it
 * once, later posts fail, and the QPs close. */
static void expect_dropped(struct nic_fx *f, int want_status)
{
    expect_broken(f, f->a, f->qa, want_status);
    expect_broken(f, f->b, f->qb, 0);
    struct rkv_sge s = nic_sge(f->abuf, 8, f->amr);
    assert_int_equal(f->a->ops->post_send(f->qa, 1, &s, 1), -RKV_EPEERDEAD);
    nic_expect_quiet(f, f->a);
    nic_expect_quiet(f, f->b);
    f->a->ops->qp_close(f->qa);
    f->b->ops->qp_close(f->qb);
}

/* untouched: bytes the write aimed at, which must stay zero. */
static void bad_write(struct nic_fx *f, uint64_t remote_addr, uint32_t rkey, uint32_t len, int imm,
                      const uint8_t *untouched)
{
    struct rkv_sge s = nic_sge(f->abuf, len, f->amr);
    nic_fill(f->abuf, len, 11);
    if (imm) {
        struct rkv_sge rs = nic_sge(NULL, 0, NULL);
        assert_int_equal(f->b->ops->post_recv(f->qb, 1, &rs), 0);
    }
    /* The sender cannot know: the post itself succeeds. */
    assert_int_equal(f->a->ops->post_write(f->qa, 1, &s, remote_addr, rkey, imm, 0, 0), 0);
    expect_dropped(f, RKV_WC_REM_ACCESS_ERR);
    for (uint32_t i = 0; untouched && i < len; i++)
        assert_int_equal(untouched[i], 0);
    nic_expect_still_serving(f);
}

static void test_reject_unknown_rkey(void **state)
{
    struct nic_fx *f = *state;
    bad_write(f, (uintptr_t)f->bbuf, f->bmr->rkey ^ 0x80000000u, 16, 0, f->bbuf);
}

static void test_reject_past_region(void **state)
{
    struct nic_fx *f = *state;
    bad_write(f, (uintptr_t)f->bbuf + NIC_SUITE_BUF_BYTES - 8, f->bmr->rkey, 16, 0,
              f->bbuf + NIC_SUITE_BUF_BYTES - 16);
}

static void test_reject_before_region(void **state)
{
    struct nic_fx *f = *state;
    bad_write(f, (uintptr_t)f->bbuf - 1, f->bmr->rkey, 16, 1, f->bbuf);
}

static void test_reject_wrapping_length(void **state)
{
    struct nic_fx *f = *state;
    bad_write(f, UINT64_MAX - 3, f->bmr->rkey, 64, 0, NULL);
}

static void test_reject_local_only_region(void **state)
{
    struct nic_fx *f = *state;
    bad_write(f, (uintptr_t)f->bloc, f->blmr->rkey, 16, 0, f->bloc);
}

static void test_reject_oversized_send(void **state)
{
    struct nic_fx *f = *state;
    struct rkv_sge rs = nic_sge(f->bloc, 8, f->blmr);
    assert_int_equal(f->b->ops->post_recv(f->qb, 1, &rs), 0);
    struct rkv_sge ss = nic_sge(f->abuf, 64, f->amr);
    assert_int_equal(f->a->ops->post_send(f->qa, 1, &ss, 0), 0);
    expect_dropped(f, 0);
    assert_int_equal(f->bloc[0], 0);
    nic_expect_still_serving(f);
}

/* ---- connections ---- */

/* A NIC with another secret is refused with a configuration error, every
 * time, and never announced; the listener goes on serving. */
static void test_token_mismatch(void **state)
{
    struct nic_fx *f = *state;
    const struct nic_suite_env *env = f->env;
    struct rkv_port *pc;
    struct rkv_nic *c;
    assert_int_equal(setenv("RKV_TOKEN", "0x5ec2e7", 1), 0);
    int rc = env->open(env->ctx, "c", &pc, &c);
    unsetenv("RKV_TOKEN");
    assert_int_equal(rc, 0);
    struct rkv_qp *qc = NULL;
    for (int i = 0; i < 2; i++)
        assert_int_equal(c->ops->connect(c, f->host, f->port, env->wait_ms, &qc), -RKV_ECONFIG);
    assert_null(qc);
    env->close(env->ctx, pc, c);
    nic_expect_quiet(f, f->b);
    nic_check_send(f, f->qa, f->qb, 13);
}

static void test_connect_refused(void **state)
{
    struct nic_fx *f = *state;
    const struct nic_suite_env *env = f->env;
    /* An address that was listened on and is free again refuses. */
    struct rkv_port *pc;
    struct rkv_nic *c;
    char host[64];
    uint16_t port;
    assert_int_equal(env->open(env->ctx, "c", &pc, &c), 0);
    assert_int_equal(env->listen(env->ctx, c, host, sizeof(host), &port), 0);
    env->close(env->ctx, pc, c);
    struct rkv_qp *qp = NULL;
    assert_int_equal(f->a->ops->connect(f->a, host, port, env->wait_ms, &qp), -RKV_EPEERDEAD);
    assert_null(qp);
    nic_expect_quiet(f, f->a);
    nic_expect_quiet(f, f->b);
    assert_true(f->a->ops->connect(f->a, "no-such-host.invalid", port, env->wait_ms, &qp) < 0);
    assert_null(qp);
    nic_check_send(f, f->qa, f->qb, 14);
}

static void test_qp_close(void **state)
{
    struct nic_fx *f = *state;
    /* A completion still queued for a QP closed before it was polled is dropped. */
    struct rkv_sge rs = nic_sge(f->bloc, 16, f->blmr);
    assert_int_equal(f->b->ops->post_recv(f->qb, 2, &rs), 0);
    struct rkv_sge ss = nic_sge(f->abuf, 8, f->amr);
    assert_int_equal(f->a->ops->post_send(f->qa, 1, &ss, 1), 0);
    nic_expect_wc(f, f->b, f->qb, RKV_WC_RECV, NULL); /* so a's completion exists */
    f->a->ops->qp_close(f->qa);
    nic_expect_wc(f, f->b, f->qb, RKV_WC_DISCONNECTED, NULL);
    nic_expect_quiet(f, f->a); /* neither the SEND nor a DISCONNECTED of its own */
    /* A broken connection takes no more receives. */
    assert_int_equal(f->b->ops->post_recv(f->qb, 3, &rs), -RKV_EPEERDEAD);
    f->b->ops->qp_close(f->qb);
    nic_expect_quiet(f, f->b);
    f->qa = f->qb = NULL;
    struct rkv_qp *qa, *qb;
    nic_connect_pair(f, &qa, &qb);
    nic_check_send(f, qa, qb, 12);
}

static void test_peer_nic_close(void **state)
{
    struct nic_fx *f = *state;
    struct rkv_sge rs = nic_sge(f->bloc, 16, f->blmr);
    assert_int_equal(f->b->ops->post_recv(f->qb, 1, &rs), 0);
    f->b->ops->dereg_mr(f->b, f->blmr);
    f->b->ops->dereg_mr(f->b, f->bmr);
    f->env->close(f->env->ctx, f->pb, f->b);
    f->b = NULL;
    nic_expect_wc(f, f->a, f->qa, RKV_WC_DISCONNECTED, NULL);
    struct rkv_sge ss = nic_sge(f->abuf, 8, f->amr);
    assert_int_equal(f->a->ops->post_send(f->qa, 1, &ss, 1), -RKV_EPEERDEAD);
    assert_int_equal(f->a->ops->post_recv(f->qa, 1, &ss), -RKV_EPEERDEAD);
    nic_expect_quiet(f, f->a);
    struct rkv_qp *qp = NULL;
    assert_int_equal(f->a->ops->connect(f->a, f->host, f->port, f->env->wait_ms, &qp),
                     -RKV_EPEERDEAD);
    f->a->ops->qp_close(f->qa);
    f->qa = NULL;
}

/* Many connections at once, each its own; closing them is not news. */
static void test_many_connections(void **state)
{
    struct nic_fx *f = *state;
    struct rkv_qp *qa[SUITE_MANY_QPS], *qb[SUITE_MANY_QPS];
    for (int i = 0; i < SUITE_MANY_QPS; i++)
        nic_connect_pair(f, &qa[i], &qb[i]);
    for (int i = 0; i < SUITE_MANY_QPS; i += 5)
        nic_check_send(f, qa[i], qb[i], (uint8_t)i);
    nic_check_send(f, qa[SUITE_MANY_QPS - 1], qb[SUITE_MANY_QPS - 1], 99);
    for (int i = 0; i < SUITE_MANY_QPS; i++) {
        f->a->ops->qp_close(qa[i]);
        f->b->ops->qp_close(qb[i]);
    }
    nic_expect_quiet(f, f->a);
    nic_expect_quiet(f, f->b);
    nic_check_send(f, f->qa, f->qb, 7);
}

/* The shared receive pool (nic.h srq_setup), where a backend has one: one
 * pool serves every connection, wr_ids name its buffers, a dry pool holds
 * senders back until a buffer comes back, and the buffers of completions
 * nobody polled (a closed QP's) return to the pool by themselves. */
#define SUITE_SRQ_COUNT 4u
#define SUITE_SRQ_TAG 5u
static void srq_send(struct nic_fx *f, struct rkv_qp *qa, uint32_t at, uint8_t seed)
{
    nic_fill(f->abuf + at, 100 + seed, seed);
    struct rkv_sge ss = nic_sge(f->abuf + at, 100 + seed, f->amr);
    assert_int_equal(f->a->ops->post_send(qa, seed, &ss, 1), 0);
}
static uint32_t srq_expect(struct nic_fx *f, struct rkv_nic *c, const uint8_t *base,
                           struct rkv_qp *qc, uint8_t seed)
{
    struct rkv_wc wc;
    nic_expect_wc(f, c, qc, RKV_WC_RECV, &wc);
    assert_int_equal(wc.wr_id & 0xff, SUITE_SRQ_TAG);
    uint32_t i = (uint32_t)(wc.wr_id >> 8);
    assert_true(i < SUITE_SRQ_COUNT);
    assert_int_equal(wc.byte_len, 100 + seed);
    uint8_t want[256];
    nic_fill(want, 100 + seed, seed);
    assert_memory_equal(base + (size_t)i * 4096, want, 100 + seed);
    return i;
}
static void test_shared_receives(void **state)
{
    struct nic_fx *f = *state;
    if (!f->b->ops->srq_setup)
        NIC_SUITE_UNSUPPORTED(f, "srq_setup");
    uint32_t count = SUITE_SRQ_COUNT;
    uint8_t *base = NULL;
    /* Too late on b: it has a connection. */
    assert_int_equal(f->b->ops->srq_setup(f->b, &count, 4096, SUITE_SRQ_TAG, &base), -RKV_EINVAL);
    struct rkv_port *pc;
    struct rkv_nic *c;
    assert_int_equal(f->env->open(f->env->ctx, "c", &pc, &c), 0);
    assert_int_equal(c->ops->srq_setup(c, &count, 4096, SUITE_SRQ_TAG, &base), 0);
    assert_int_equal(count, SUITE_SRQ_COUNT);
    assert_non_null(base);
    char host[64];
    uint16_t port;
    assert_int_equal(f->env->listen(f->env->ctx, c, host, sizeof(host), &port), 0);
    struct rkv_qp *qa[2], *qc[2];
    struct rkv_wc wc;
    for (int k = 0; k < 2; k++) {
        assert_int_equal(f->a->ops->connect(f->a, host, port, f->env->wait_ms, &qa[k]), 0);
        nic_expect_wc(f, c, NULL, RKV_WC_CONNECTED, &wc);
        qc[k] = wc.qp;
    }
    struct rkv_sge rs = nic_sge(base, 16, NULL);
    assert_int_equal(c->ops->post_recv(qc[0], 1, &rs), -RKV_EINVAL);
    /* Six messages into a pool of four: two wait for buffers to come back. */
    for (uint8_t m = 0; m < 6; m++)
        srq_send(f, qa[m % 2], (uint32_t)m * 256, m);
    uint32_t got[4];
    uint8_t next[2] = {0, 1};
    for (int k = 0; k < 4; k++) {
        nic_poll_one(c, &wc, f->env->wait_ms);
        assert_int_equal(wc.opcode, RKV_WC_RECV);
        int q = wc.qp == qc[0] ? 0 : 1;
        assert_ptr_equal(wc.qp, qc[q]);
        assert_int_equal(wc.byte_len, 100 + next[q]);
        uint8_t want[256];
        nic_fill(want, 100 + next[q], next[q]);
        got[k] = (uint32_t)(wc.wr_id >> 8);
        assert_int_equal(wc.wr_id & 0xff, SUITE_SRQ_TAG);
        assert_true(got[k] < SUITE_SRQ_COUNT);
        assert_memory_equal(base + (size_t)got[k] * 4096, want, 100 + next[q]);
        next[q] = (uint8_t)(next[q] + 2);
    }
    nic_expect_quiet(f, c);
    assert_int_equal(c->ops->srq_repost(c, got[0]), 0);
    assert_int_equal(c->ops->srq_repost(c, got[1]), 0);
    assert_int_equal(c->ops->srq_repost(c, SUITE_SRQ_COUNT), -RKV_EINVAL);
    for (int k = 0; k < 2; k++) {
        nic_poll_one(c, &wc, f->env->wait_ms);
        assert_int_equal(wc.opcode, RKV_WC_RECV);
        int q = wc.qp == qc[0] ? 0 : 1;
        assert_int_equal(next[q] < 6, 1);
        next[q] = (uint8_t)(next[q] + 2);
        assert_int_equal(c->ops->srq_repost(c, (uint32_t)(wc.wr_id >> 8)), 0);
    }
    for (int k = 2; k < 4; k++)
        assert_int_equal(c->ops->srq_repost(c, got[k]), 0);
    for (int k = 0; k < 6; k++)
        nic_expect_wc(f, f->a, NULL, RKV_WC_SEND, NULL);
    /* Four messages land on qc[0] and are never polled; closing it gives
     * their buffers back, so qc[1] still gets four. */
    for (uint8_t m = 10; m < 14; m++)
        srq_send(f, qa[0], (uint32_t)(m - 10) * 256, m);
    for (int k = 0; k < 4; k++) /* a SEND completes once it landed */
        nic_expect_wc(f, f->a, qa[0], RKV_WC_SEND, NULL);
    c->ops->qp_close(qc[0]);
    nic_expect_wc(f, f->a, qa[0], RKV_WC_DISCONNECTED, NULL);
    f->a->ops->qp_close(qa[0]);
    for (uint8_t m = 20; m < 24; m++)
        srq_send(f, qa[1], (uint32_t)(m - 20) * 256, m);
    for (uint8_t m = 20; m < 24; m++)
        srq_expect(f, c, base, qc[1], m);
    for (int k = 0; k < 4; k++)
        nic_expect_wc(f, f->a, qa[1], RKV_WC_SEND, NULL);
    nic_expect_quiet(f, c);
    f->a->ops->qp_close(qa[1]);
    nic_expect_wc(f, c, qc[1], RKV_WC_DISCONNECTED, NULL);
    c->ops->qp_close(qc[1]);
    f->env->close(f->env->ctx, pc, c);
}

/* Per-peer grants (nic.h mr_grant), where a backend has them: the rkey a
 * region was granted to one connection under works there, is a remote
 * access error on another (which alone breaks), and is void once revoked;
 * the region's own rkey opens nothing. */
static void test_grant_is_per_peer(void **state)
{
    struct nic_fx *f = *state;
    if (!rkv_nic_grants(f->b))
        NIC_SUITE_UNSUPPORTED(f, "mr_grant");
    uint8_t *g = calloc(1, 8192);
    assert_non_null(g);
    struct rkv_mr *gmr;
    assert_int_equal(f->b->ops->reg_mr(f->b, g, 8192, RKV_ACCESS_REMOTE_GRANT, &gmr), 0);
    uint32_t rkey;
    void *grant;
    assert_int_equal(f->b->ops->mr_grant(f->qb, gmr, &rkey, &grant), 0);
    /* The grant reaches the peer in a message posted after it. */
    nic_check_send(f, f->qa, f->qb, 40);
    nic_fill(f->abuf, 4096, 41);
    struct rkv_sge s = nic_sge(f->abuf, 4096, f->amr);
    assert_int_equal(f->a->ops->post_write(f->qa, 1, &s, (uintptr_t)g + 4096, rkey, 0, 0, 1), 0);
    nic_expect_wc(f, f->a, f->qa, RKV_WC_WRITE, NULL);
    /* A SEND after it arrives after it landed (tcp completes a WRITE at post). */
    nic_check_send(f, f->qa, f->qb, 44);
    nic_fill(f->abuf, 4096, 41); /* the SEND's bytes came from there */
    assert_memory_equal(g + 4096, f->abuf, 4096);
    /* Another connection of the same peer NIC, the same rkey: refused there. */
    struct rkv_qp *qa2, *qb2;
    nic_connect_pair(f, &qa2, &qb2);
    nic_fill(f->abuf, 16, 42);
    s = nic_sge(f->abuf, 16, f->amr);
    assert_int_equal(f->a->ops->post_write(qa2, 2, &s, (uintptr_t)g, rkey, 0, 0, 0), 0);
    expect_broken(f, f->a, qa2, RKV_WC_REM_ACCESS_ERR);
    expect_broken(f, f->b, qb2, 0);
    for (int i = 0; i < 16; i++)
        assert_int_equal(g[i], 0);
    f->a->ops->qp_close(qa2);
    f->b->ops->qp_close(qb2);
    /* The granted connection still works, and still writes. */
    nic_check_send(f, f->qa, f->qb, 43);
    assert_int_equal(f->a->ops->post_write(f->qa, 3, &s, (uintptr_t)g, rkey, 0, 0, 1), 0);
    nic_expect_wc(f, f->a, f->qa, RKV_WC_WRITE, NULL);
    nic_check_send(f, f->qa, f->qb, 45);
    nic_fill(f->abuf, 16, 43); /* what nic_check_send(43) left there, written */
    assert_memory_equal(g, f->abuf, 16);
    f->b->ops->mr_revoke(f->b, grant);
    memset(g, 0, 16);
    /* The region's own rkey opens nothing... */
    nic_connect_pair(f, &qa2, &qb2);
    assert_int_equal(f->a->ops->post_write(qa2, 4, &s, (uintptr_t)g, gmr->rkey, 0, 0, 0), 0);
    expect_broken(f, f->a, qa2, RKV_WC_REM_ACCESS_ERR);
    expect_broken(f, f->b, qb2, 0);
    f->a->ops->qp_close(qa2);
    f->b->ops->qp_close(qb2);
    /* ... nor does the revoked grant, on the connection it was for. */
    bad_write(f, (uintptr_t)g, rkey, 16, 0, g);
    f->b->ops->dereg_mr(f->b, gmr);
    free(g);
}

/* The address a node announces: a name, and an error (never a cut one)
 * when it does not fit. */
static void test_local_addr(void **state)
{
    struct nic_fx *f = *state;
    char buf[64];
    assert_int_equal(f->a->ops->local_addr(f->a, f->host, f->port, buf, sizeof(buf)), 0);
    assert_true(strlen(buf) > 0);
    char tiny[2];
    assert_true(f->a->ops->local_addr(f->a, f->host, f->port, tiny, sizeof(tiny)) < 0);
}

/* poll_wake, as rkv_engine_stop uses it: from another task, it ends the
 * poll waiting now (asked for 60 s) at once, with nothing; the wake-up is
 * used up by it (the next poll waits as asked: its lower bound holds on
 * any host), and the NIC works on. The 30 s bound only tells "at once"
 * from the 60 s the poll asked for; in simulated time it is exact. */
struct wake_poller {
    struct rkv_port *port;
    struct rkv_nic *nic;
    int got;
    uint64_t took_ns;
};

static void wake_poller_main(void *arg)
{
    struct wake_poller *wp = arg;
    uint64_t t0 = wp->port->ops->now_ns(wp->port);
    struct rkv_wc wc;
    wp->got = nic_poll_one(wp->nic, &wc, 60000);
    wp->took_ns = wp->port->ops->now_ns(wp->port) - t0;
}

static void test_poll_wake(void **state)
{
    struct nic_fx *f = *state;
    if (!f->a->ops->poll_wake) {
        NIC_SUITE_UNSUPPORTED(f, "poll_wake");
        return;
    }
    const struct rkv_port_ops *po = f->pa->ops;
    struct wake_poller wp = {.port = f->pa, .nic = f->a, .got = -1};
    struct rkv_task *t = NULL;
    assert_int_equal(po->task_start(f->pa, "poller", wake_poller_main, &wp, &t), 0);
    po->sleep_ns(f->pa, 20000000); /* the task is in its poll by then */
    f->a->ops->poll_wake(f->a);
    assert_int_equal(po->task_join(f->pa, t), 0);
    assert_int_equal(wp.got, 0);
    if (wp.took_ns > 30000000000ull)
        fail_msg("%s: a woken poll waited %.1f s", f->env->name, wp.took_ns * 1e-9);
    /* Used up: the next poll waits its timeout out. */
    uint64_t t0 = po->now_ns(f->pa);
    nic_expect_quiet(f, f->a);
    assert_true(po->now_ns(f->pa) - t0 >= (uint64_t)f->env->quiet_ms * 1000000 / 2);
    /* A wake-up with nobody polling ends the next poll. */
    f->a->ops->poll_wake(f->a);
    wake_poller_main(&wp);
    assert_int_equal(wp.got, 0);
    assert_true(wp.took_ns < 30000000000ull);
    nic_check_send(f, f->qa, f->qb, 9);
}

/* ---- the run ---- */

#define SUITE_T(fn)                                                                                \
    cmocka_unit_test_prestate_setup_teardown(fn, nic_fx_setup, nic_fx_teardown, NULL)

int nic_suite_run(const struct nic_suite_env *env)
{
    struct CMUnitTest tests[] = {
        SUITE_T(test_send_recv),
        SUITE_T(test_write_and_write_imm),
        SUITE_T(test_write_then_send_order),
        SUITE_T(test_rnr_backpressure),
        SUITE_T(test_local_checks),
        SUITE_T(test_reg_mr_errors),
        SUITE_T(test_reject_unknown_rkey),
        SUITE_T(test_reject_past_region),
        SUITE_T(test_reject_before_region),
        SUITE_T(test_reject_wrapping_length),
        SUITE_T(test_reject_local_only_region),
        SUITE_T(test_reject_oversized_send),
        SUITE_T(test_token_mismatch),
        SUITE_T(test_connect_refused),
        SUITE_T(test_qp_close),
        SUITE_T(test_peer_nic_close),
        SUITE_T(test_many_connections),
        SUITE_T(test_local_addr),
        SUITE_T(test_shared_receives),
        SUITE_T(test_grant_is_per_peer),
        SUITE_T(test_poll_wake),
    };
    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
        tests[i].initial_state = (void *)env;
    char group[64];
    snprintf(group, sizeof(group), "nic suite: %s", env->name);
    return _cmocka_run_group_tests(group, tests, sizeof(tests) / sizeof(tests[0]), NULL, NULL);
}
