/* The NIC core (nic_core.h): the soft completion queue, the QP lifetime,
 * the bounds checks and address naming every backend shares. */
#include <assert.h>
#include <limits.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nic/nic_core.h"
#include "util/util.h"

#define CORE_CQ_FIRST_CAP 64u

void rkv_nic_cq_init(struct rkv_nic_cq *cq, uint32_t max, rkv_nic_qp_free_fn free_qp, void *owner)
{
    assert(max > 0);
    *cq = (struct rkv_nic_cq){.max = max, .free_qp = free_qp, .owner = owner};
}

static struct rkv_wc *cq_at(const struct rkv_nic_cq *cq, uint32_t i)
{
    assert(i < cq->cap);
    return &cq->buf[(cq->head + i) % cq->cap];
}

/* Room for need entries in the buffer, unwrapped so that head restarts at 0. */
static int cq_grow(struct rkv_nic_cq *cq, uint32_t need)
{
    if (need <= cq->cap)
        return 0;
    uint64_t cap = cq->cap ? cq->cap : CORE_CQ_FIRST_CAP;
    while (cap < need)
        cap *= 2;
    if (cap > cq->max)
        cap = cq->max;
    struct rkv_wc *buf = malloc((size_t)cap * sizeof(*buf));
    if (!buf)
        return -RKV_ENOMEM;
    for (uint32_t i = 0; i < cq->len; i++)
        buf[i] = *cq_at(cq, i);
    free(cq->buf);
    cq->buf = buf;
    cq->cap = (uint32_t)cap;
    cq->head = 0;
    return 0;
}

int rkv_nic_cq_reserve(struct rkv_nic_cq *cq)
{
    if (rkv_nic_cq_used(cq) >= cq->max)
        return -RKV_ELIMIT;
    int rc = cq_grow(cq, rkv_nic_cq_used(cq) + 1);
    if (rc < 0)
        return rc;
    cq->reserved++;
    return 0;
}

void rkv_nic_cq_unreserve(struct rkv_nic_cq *cq)
{
    assert(cq->reserved > 0);
    cq->reserved--;
}

void rkv_nic_cq_push(struct rkv_nic_cq *cq, struct rkv_nic_qp *qp, struct rkv_wc *wc)
{
    assert(cq->reserved > 0 && qp && !qp->closed && !qp->reaped);
    assert(cq->len < cq->cap);
    cq->reserved--;
    wc->qp = (struct rkv_qp *)(void *)qp;
    cq->len++;
    *cq_at(cq, cq->len - 1) = *wc;
    qp->cq_refs++;
}

int rkv_nic_cq_emit(struct rkv_nic_cq *cq, struct rkv_nic_qp *qp, struct rkv_wc wc)
{
    if (qp->closed) /* nobody may learn about a closed QP any more */
        return 0;
    int rc = rkv_nic_cq_reserve(cq);
    if (rc < 0)
        return rc;
    rkv_nic_cq_push(cq, qp, &wc);
    return 0;
}

/* One entry off the head; frees its QP when it was closed, reaped, and this
 * was the last entry naming it. Returns the QP's entry, or 0 if dropped. */
static int cq_pop(struct rkv_nic_cq *cq, struct rkv_wc *e)
{
    assert(cq->len > 0);
    *e = *cq_at(cq, 0);
    cq->head = (cq->head + 1) % cq->cap;
    cq->len--;
    struct rkv_nic_qp *qp = (struct rkv_nic_qp *)(void *)e->qp;
    assert(qp && qp->cq_refs > 0);
    qp->cq_refs--;
    if (!qp->closed)
        return 1;
    if (qp->reaped && qp->cq_refs == 0 && cq->free_qp)
        cq->free_qp(cq->owner, qp);
    return 0;
}

int rkv_nic_cq_take(struct rkv_nic_cq *cq, struct rkv_wc *wc, int max, uint32_t *popped_p)
{
    assert(wc && max > 0);
    int got = 0;
    uint32_t popped = 0;
    while (got < max && cq->len > 0) {
        popped++;
        if (cq_pop(cq, &wc[got]))
            got++;
    }
    if (popped_p)
        *popped_p = popped;
    return got;
}

void rkv_nic_cq_destroy(struct rkv_nic_cq *cq)
{
    while (cq->len > 0) {
        struct rkv_wc e;
        cq_pop(cq, &e);
    }
    free(cq->buf);
    *cq = (struct rkv_nic_cq){0};
}

int rkv_nic_qp_reap(struct rkv_nic_qp *qp)
{
    assert(!qp->reaped);
    qp->reaped = 1;
    return qp->cq_refs == 0;
}

/* ---- bounds ---- */

int rkv_nic_range_ok(uint64_t base, uint64_t region_len, uint64_t addr, uint64_t len)
{
    /* Written so that nothing can overflow, whatever the numbers are. */
    return addr >= base && len <= region_len && addr - base <= region_len - len;
}

int rkv_nic_sge_check(const struct rkv_nic *nic, const struct rkv_sge *sge)
{
    if (!sge)
        return -RKV_EINVAL;
    if (sge->len > nic->max_msg_bytes)
        return -RKV_ELIMIT;
    if (sge->len == 0)
        return 0;
    const struct rkv_mr *mr = sge->mr;
    if (!mr || mr->nic != nic || !sge->addr)
        return -RKV_EINVAL;
    if (!rkv_nic_range_ok((uintptr_t)mr->addr, mr->len, (uintptr_t)sge->addr, sge->len))
        return -RKV_EINVAL;
    return 0;
}

int rkv_nic_write_target(const struct rkv_mr *mr, uint32_t rkey, uint64_t addr, uint32_t len,
                         uint8_t **dst_p, char *why, size_t why_len)
{
    if (!mr)
        return rkv_errf(why, why_len, -RKV_EACCESS, "write names unknown rkey 0x%08x", rkey);
    if (!(mr->access & RKV_ACCESS_REMOTE_WRITE))
        return rkv_errf(why, why_len, -RKV_EACCESS, "rkey 0x%08x does not allow remote writes",
                        rkey);
    uint64_t base = (uintptr_t)mr->addr;
    if (!rkv_nic_range_ok(base, mr->len, addr, len))
        return rkv_errf(why, why_len, -RKV_EACCESS,
                        "write of %u bytes at 0x%llx falls outside rkey 0x%08x [0x%llx, +%zu)", len,
                        (unsigned long long)addr, rkey, (unsigned long long)base, mr->len);
    *dst_p = (uint8_t *)mr->addr + (addr - base);
    return 0;
}

/* ---- names and times ---- */

void rkv_nic_addr_name(const struct sockaddr *sa, socklen_t sl, char *buf, size_t len)
{
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (!sa || getnameinfo(sa, sl, host, sizeof(host), serv, sizeof(serv),
                           NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        snprintf(buf, len, "?");
        return;
    }
    snprintf(buf, len, sa->sa_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, serv);
}

int rkv_nic_self_connected(int fd)
{
    struct sockaddr_storage a, b;
    socklen_t al = sizeof(a), bl = sizeof(b);
    if (getsockname(fd, (struct sockaddr *)&a, &al) < 0 ||
        getpeername(fd, (struct sockaddr *)&b, &bl) < 0)
        return 0;
    return al == bl && memcmp(&a, &b, al) == 0;
}

int rkv_nic_ms_until(uint64_t now_ns, uint64_t deadline_ns)
{
    if (deadline_ns <= now_ns)
        return 0;
    uint64_t ms = (deadline_ns - now_ns + 999999) / 1000000;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}
