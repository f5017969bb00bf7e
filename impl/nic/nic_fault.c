/* The fault-injecting NIC decorator (nic_fault.h says what each fault means).
 *
 * Outgoing: a post whose message is lost or delayed is queued on its QP with
 * the time it may go; a timer task posts it to the inner NIC then. Once a QP
 * has a queued post, later posts queue behind it (per-QP order), and only
 * one task posts on a QP at a time for the same reason.
 * Incoming: receive completions chosen for a loss or delay are held in one
 * list in arrival order and handed to the engine when due; a QP with a held
 * completion holds the ones after it too.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "nic/nic_core.h"
#include "nic/nic_fault.h"
#include "port/port.h"
#include "util/util.h"

#define FLT_MAX_FAULTS RKV_NIC_FAULTS_MAX
#define FLT_IDLE_NS 1000000000ull

enum flt_post { FLT_SEND = 1, FLT_WRITE = 2 };

struct flt_out {
    struct flt_out *next;
    uint64_t due;
    int what; /* enum flt_post */
    uint64_t wr_id;
    struct rkv_sge sge;
    uint64_t raddr;
    uint32_t rkey;
    int with_imm;
    uint32_t imm;
    int signaled;
    /* The post whose retransmissions run out: at due its connection
     * breaks (and it is flushed) instead of being posted. */
    int breaks;
};

struct flt_qp {
    struct rkv_qp_base base; /* the engine's context */
    struct rkv_qp *inner;
    struct flt_nic *n;
    struct flt_qp *next; /* all QPs of the NIC */
    struct flt_out *out_head, *out_tail;
    uint64_t out_last; /* due time of the last queued post */
    uint64_t in_last;  /* due time of the last held completion */
    uint32_t in_held;  /* completions of this QP in the held list */
    int posting;       /* tasks posting on inner right now */
    int in_broken;     /* a reply path broke: swallow what follows */
    /* The wrapped QP reported its connection gone: a post fails now, as on
     * the NIC itself, instead of being held and flushed later (a held post
     * returned 0 after the break: test_grant_is_per_peer, fault(tcp)). */
    int down;
    /* A post drew the break, due later: posts after it queue behind it
     * and are flushed with it. */
    int breaking;
};

struct flt_in {
    struct flt_in *next;
    uint64_t due;
    struct rkv_wc wc;
};

struct flt_nic {
    struct rkv_nic base;
    struct rkv_nic *inner;
    struct rkv_nic_fault f[FLT_MAX_FAULTS];
    uint32_t n_f;
    uint64_t t0;
    struct rkv_rng rng;
    struct rkv_mutex *mu;
    struct rkv_cond *cv;
    struct rkv_task *timer;
    int stop;
    int poll_woken; /* mu: poll_wake; flt_poll returns at its next pass */
    struct flt_qp *qps;
    struct flt_in *in_head, *in_tail;
    struct rkv_nic_fault_stats st;
};

static const struct rkv_nic_ops flt_ops;

static uint64_t flt_now(struct flt_nic *n)
{
    return n->base.port->ops->now_ns(n->base.port);
}

/* When a connection breaks, from the first transmission of the message
 * that breaks it: every one of the RC retry count's transmissions timed
 * out, each after the fault's retransmission time. */
static uint64_t flt_break_after(const struct rkv_nic_fault *f, uint64_t extra)
{
    return f->break_at_once ? 0 : extra + (uint64_t)(RKV_FAULT_RETRY_MAX + 1) * f->delay_ns;
}

/* How long the message posted (or received) now is held back:
 * 0 when it passes, UINT64_MAX when its connection breaks, which it
 * does *brk_p after now. */
static uint64_t flt_decide(struct flt_nic *n, uint64_t now, uint64_t *brk_p)
{
    RKV_ASSERT_HELD(n->base.port, n->mu);
    if (n->t0 == UINT64_MAX)
        n->t0 = now; /* the node's first message starts its fault clock */
    uint64_t rel = now - n->t0, extra = 0;
    int counted = 0;
    for (uint32_t i = 0; i < n->n_f; i++) {
        const struct rkv_nic_fault *f = &n->f[i];
        if (rel < f->start_ns || rel >= f->end_ns)
            continue;
        if (!counted++)
            n->st.messages++;
        if (f->kind == RKV_FAULT_DROP) {
            uint32_t lost = 0;
            while (lost <= RKV_FAULT_RETRY_MAX && rkv_rng_double(&n->rng) < f->fraction)
                lost++;
            n->st.dropped += lost;
            n->st.acted[i] += lost > 0;
            if (lost > RKV_FAULT_RETRY_MAX) {
                *brk_p = flt_break_after(f, extra);
                return UINT64_MAX;
            }
            extra += lost * f->delay_ns;
        } else if (f->kind == RKV_FAULT_DELAY) {
            if (rkv_rng_double(&n->rng) < f->fraction) {
                n->st.delayed++;
                n->st.acted[i]++;
                extra += f->delay_ns;
            }
        } else {
            /* The first retransmission at or after the end of the window;
             * a link down for good breaks the connection. */
            n->st.acted[i]++;
            if (f->end_ns == UINT64_MAX) {
                n->st.held_down++;
                *brk_p = flt_break_after(f, extra);
                return UINT64_MAX;
            }
            uint64_t rto = f->delay_ns, left = f->end_ns - rel;
            uint64_t tries = (left + rto - 1) / rto;
            n->st.held_down++;
            if (tries > RKV_FAULT_RETRY_MAX) {
                *brk_p = flt_break_after(f, extra);
                return UINT64_MAX;
            }
            extra += tries * rto;
        }
    }
    return extra;
}

static void flt_lock(struct flt_nic *n)
{
    n->base.port->ops->mutex_lock(n->mu);
}

static void flt_unlock(struct flt_nic *n)
{
    n->base.port->ops->mutex_unlock(n->mu);
}

static int flt_post_inner(struct flt_qp *q, const struct flt_out *o)
{
    const struct rkv_nic_ops *in = q->n->inner->ops;
    if (o->what == FLT_SEND)
        return in->post_send(q->inner, o->wr_id, &o->sge, o->signaled);
    return in->post_write(q->inner, o->wr_id, &o->sge, o->raddr, o->rkey, o->with_imm, o->imm,
                          o->signaled);
}

/* Queues a completion the engine sees at `due`, behind any held
 * completion of the same QP. */
static int flt_hold_wc(struct flt_nic *n, struct flt_qp *q, const struct rkv_wc *wc, uint64_t due)
{
    RKV_ASSERT_HELD(n->base.port, n->mu);
    struct flt_in *h = malloc(sizeof(*h));
    if (!h)
        return -RKV_ENOMEM;
    if (q) {
        if (due < q->in_last)
            due = q->in_last;
        q->in_last = due;
        q->in_held++;
    }
    h->next = NULL;
    h->due = due;
    h->wc = *wc;
    if (n->in_tail)
        n->in_tail->next = h;
    else
        n->in_head = h;
    n->in_tail = h;
    return 0;
}

/* A post the timer could not hand to the inner NIC still owes the engine
 * its completion, as a verbs flush would. */
static void flt_flush_out(struct flt_nic *n, struct flt_qp *q, const struct flt_out *o)
{
    struct rkv_wc wc = {.wr_id = o->wr_id,
                        .qp = (struct rkv_qp *)q,
                        .opcode = o->what == FLT_SEND ? RKV_WC_SEND : RKV_WC_WRITE,
                        .status = RKV_WC_FLUSH_ERR};
    if (o->signaled && flt_hold_wc(n, NULL, &wc, 0) < 0)
        RKV_LOGE(n->base.port, "fault nic: out of memory; a flushed completion is lost");
}

/* A post behind (or at) its connection's break: flushed, and the
 * break itself (the first such post) said to the engine as the QP's
 * disconnect, which it answers by closing the QP: the peer sees it go. */
static void flt_break_out(struct flt_nic *n, struct flt_qp *q, const struct flt_out *o)
{
    RKV_ASSERT_HELD(n->base.port, n->mu);
    flt_flush_out(n, q, o);
    if (q->down)
        return;
    q->down = 1;
    if (q->in_broken)
        return; /* the receive side holds the disconnect already */
    RKV_LOGW(n->base.port, "fault nic: %u retransmissions lost, connection broken",
             RKV_FAULT_RETRY_MAX);
    struct rkv_wc gone = {
        .qp = (struct rkv_qp *)q, .opcode = RKV_WC_DISCONNECTED, .status = RKV_WC_FLUSH_ERR};
    if (flt_hold_wc(n, q, &gone, 0) < 0)
        RKV_LOGE(n->base.port, "fault nic: out of memory; a broken connection is not said");
}

/* The QP whose first queued post is due earliest (skipping QPs
 * somebody is posting on). */
static struct flt_qp *flt_next_due(struct flt_nic *n)
{
    RKV_ASSERT_HELD(n->base.port, n->mu);
    struct flt_qp *best = NULL;
    for (struct flt_qp *q = n->qps; q; q = q->next)
        if (q->out_head && !q->posting && (!best || q->out_head->due < best->out_head->due))
            best = q;
    return best;
}

static void flt_timer(void *arg)
{
    struct flt_nic *n = arg;
    const struct rkv_port_ops *po = n->base.port->ops;
    flt_lock(n);
    while (!n->stop) {
        struct flt_qp *q = flt_next_due(n);
        uint64_t now = flt_now(n);
        if (!q || q->out_head->due > now) {
            po->cond_wait(n->cv, n->mu, q ? q->out_head->due - now : FLT_IDLE_NS);
            continue;
        }
        struct flt_out *o = q->out_head;
        if (!(q->out_head = o->next))
            q->out_tail = NULL;
        n->st.queued--;
        if (o->breaks || q->down) {
            flt_break_out(n, q, o);
            free(o);
            po->cond_broadcast(n->cv);
            /* A poller waits in the inner NIC for as long as it was told,
             * knowing of no held completion then: it looks again. */
            if (n->inner->ops->poll_wake)
                n->inner->ops->poll_wake(n->inner);
            continue;
        }
        q->posting++;
        flt_unlock(n);
        int rc = flt_post_inner(q, o);
        flt_lock(n);
        q->posting--;
        if (rc < 0) {
            flt_flush_out(n, q, o);
            if (n->inner->ops->poll_wake)
                n->inner->ops->poll_wake(n->inner);
        }
        free(o);
        po->cond_broadcast(n->cv);
    }
    flt_unlock(n);
}

static int flt_post(struct flt_qp *q, const struct flt_out *tmpl)
{
    struct flt_nic *n = q->n;
    flt_lock(n);
    if (q->down) {
        flt_unlock(n);
        return -RKV_EPEERDEAD;
    }
    uint64_t now = flt_now(n), brk = 0;
    /* Behind a break to come, a post draws nothing: it is flushed with it. */
    /* Nor one on a connection whose receive side drew it (the break is
     * one per connection: counted once, said once). */
    uint64_t extra = q->breaking || q->in_broken ? 0 : flt_decide(n, now, &brk);
    int breaks = extra == UINT64_MAX;
    if (breaks && brk == 0) { /* break_at_once: the failed post makes the engine close the QP */
        n->st.broken++;
        flt_unlock(n);
        RKV_LOGW(n->base.port, "fault nic: %u retransmissions lost, connection broken",
                 RKV_FAULT_RETRY_MAX);
        return -RKV_EPEERDEAD;
    }
    if (breaks) {
        /* Its retransmissions run out brk from now, as RC's retry_cnt
         * does: the post is accepted, and then its connection breaks
         * (flt_timer); it broke at once, seconds early in a fault run. */
        n->st.broken++;
        q->breaking = 1;
        extra = brk;
    }
    if (extra == 0 && !q->breaking && !q->out_head && !q->posting) {
        q->posting++;
        flt_unlock(n);
        int rc = flt_post_inner(q, tmpl);
        flt_lock(n);
        q->posting--;
        n->base.port->ops->cond_broadcast(n->cv);
        flt_unlock(n);
        return rc;
    }
    struct flt_out *o = malloc(sizeof(*o));
    if (!o) {
        flt_unlock(n);
        return -RKV_ENOMEM;
    }
    *o = *tmpl;
    o->next = NULL;
    o->breaks = breaks;
    o->due = now + extra;
    if (o->due < q->out_last)
        o->due = q->out_last;
    q->out_last = o->due;
    if (q->out_tail)
        q->out_tail->next = o;
    else
        q->out_head = o;
    q->out_tail = o;
    n->st.queued++;
    n->base.port->ops->cond_broadcast(n->cv);
    flt_unlock(n);
    return 0;
}

/* A post that is held goes to the inner NIC later: its buffer is checked
 * now, so that bad input fails its own post, held or not. */
static int flt_sge_check(struct rkv_qp *qp, const struct rkv_sge *sge)
{
    return rkv_nic_sge_check(((struct flt_qp *)qp)->n->inner, sge);
}

static int flt_post_send(struct rkv_qp *qp, uint64_t wr_id, const struct rkv_sge *sge, int signaled)
{
    int rc = flt_sge_check(qp, sge);
    if (rc < 0)
        return rc;
    struct flt_out o = {.what = FLT_SEND, .wr_id = wr_id, .sge = *sge, .signaled = signaled};
    return flt_post((struct flt_qp *)qp, &o);
}

static int flt_post_write(struct rkv_qp *qp, uint64_t wr_id, const struct rkv_sge *sge,
                          uint64_t remote_addr, uint32_t rkey, int with_imm, uint32_t imm,
                          int signaled)
{
    int rc = flt_sge_check(qp, sge);
    if (rc < 0)
        return rc;
    struct flt_out o = {.what = FLT_WRITE,
                        .wr_id = wr_id,
                        .sge = *sge,
                        .raddr = remote_addr,
                        .rkey = rkey,
                        .with_imm = with_imm,
                        .imm = imm,
                        .signaled = signaled};
    return flt_post((struct flt_qp *)qp, &o);
}

static int flt_post_recv(struct rkv_qp *qp, uint64_t wr_id, const struct rkv_sge *sge)
{
    struct flt_qp *q = (struct flt_qp *)qp;
    return q->n->inner->ops->post_recv(q->inner, wr_id, sge);
}

static int flt_qp_new(struct flt_nic *n, struct rkv_qp *inner, struct flt_qp **q_p)
{
    RKV_ASSERT_HELD(n->base.port, n->mu);
    struct flt_qp *q = calloc(1, sizeof(*q));
    if (!q)
        return -RKV_ENOMEM;
    q->inner = inner;
    q->n = n;
    rkv_qp_set_ctx(inner, q);
    q->next = n->qps;
    n->qps = q;
    *q_p = q;
    return 0;
}

static int flt_connect(struct rkv_nic *nic, const char *host, uint16_t port, uint32_t timeout_ms,
                       struct rkv_qp **qp_p)
{
    struct flt_nic *n = (struct flt_nic *)nic;
    struct rkv_qp *inner;
    int rc = n->inner->ops->connect(n->inner, host, port, timeout_ms, &inner);
    if (rc < 0)
        return rc;
    struct flt_qp *q;
    flt_lock(n);
    rc = flt_qp_new(n, inner, &q);
    flt_unlock(n);
    if (rc < 0) {
        n->inner->ops->qp_close(inner);
        return rc;
    }
    *qp_p = (struct rkv_qp *)q;
    return 0;
}

/* Moves due held completions to wc in list order. */
static int flt_take_due(struct flt_nic *n, struct rkv_wc *wc, int max, uint64_t now)
{
    RKV_ASSERT_HELD(n->base.port, n->mu);
    int got = 0;
    struct flt_in **pp = &n->in_head, *prev = NULL;
    while (*pp && got < max) {
        struct flt_in *h = *pp;
        if (h->due > now) {
            prev = h;
            pp = &h->next;
            continue;
        }
        *pp = h->next;
        if (n->in_tail == h)
            n->in_tail = prev;
        struct flt_qp *q = (struct flt_qp *)h->wc.qp;
        if (q && h->wc.opcode != RKV_WC_SEND && h->wc.opcode != RKV_WC_WRITE)
            q->in_held--;
        if (q && h->wc.opcode == RKV_WC_DISCONNECTED && !q->down) {
            q->down = 1;
            RKV_LOGW(n->base.port, "fault nic: %u retransmissions lost, connection broken",
                     RKV_FAULT_RETRY_MAX);
        }
        wc[got++] = h->wc;
        free(h);
    }
    return got;
}

/* Whether an incoming completion goes to the engine now (1), is
 * held (0) or was turned into the break of its connection (1, rewritten). */
static int flt_filter_in(struct flt_nic *n, struct rkv_wc *wc, uint64_t now)
{
    RKV_ASSERT_HELD(n->base.port, n->mu);
    struct flt_qp *q = (struct flt_qp *)wc->qp;
    int data = wc->opcode == RKV_WC_RECV || wc->opcode == RKV_WC_RECV_IMM;
    if (q->in_broken)
        return 0;
    uint64_t brk = 0;
    uint64_t extra = data && !q->breaking ? flt_decide(n, now, &brk) : 0;
    if (extra == UINT64_MAX) {
        /* What follows on the connection is lost with it, and the break is
         * seen brk from now (held, as RC's retries run out), as the QP's
         * disconnect; it came at once, seconds early in a fault run. */
        n->st.broken++;
        q->in_broken = 1;
        struct rkv_wc gone = {
            .qp = wc->qp, .opcode = RKV_WC_DISCONNECTED, .status = RKV_WC_FLUSH_ERR};
        if (brk && flt_hold_wc(n, q, &gone, now + brk) == 0)
            return 0;
        q->down = 1; /* at once, or out of memory: said now rather than never */
        *wc = gone;
        RKV_LOGW(n->base.port, "fault nic: %u retransmissions lost, connection broken",
                 RKV_FAULT_RETRY_MAX);
        return 1;
    }
    int local = wc->opcode == RKV_WC_SEND || wc->opcode == RKV_WC_WRITE;
    if (local || (extra == 0 && q->in_held == 0))
        return 1;
    if (flt_hold_wc(n, q, wc, now + extra) < 0)
        return 1; /* out of memory: deliver rather than lose it */
    return 0;
}

/* Translates inner completions to wrapper QPs; drops what
 * cannot be. */
static int flt_translate(struct flt_nic *n, struct rkv_wc *wc)
{
    RKV_ASSERT_HELD(n->base.port, n->mu);
    struct flt_qp *q = rkv_qp_ctx(wc->qp);
    if (wc->opcode == RKV_WC_CONNECTED) {
        if (flt_qp_new(n, wc->qp, &q) < 0) {
            RKV_LOGE(n->base.port, "fault nic: out of memory; incoming connection dropped");
            n->inner->ops->qp_close(wc->qp);
            return 0;
        }
    }
    if (!q)
        return 0;
    if (wc->opcode == RKV_WC_DISCONNECTED)
        q->down = 1;
    wc->qp = (struct rkv_qp *)q;
    return 1;
}

static uint32_t flt_wait_ms(struct flt_nic *n, uint32_t timeout_ms, uint64_t now)
{
    uint64_t next = UINT64_MAX;
    for (struct flt_in *h = n->in_head; h; h = h->next)
        if (h->due < next)
            next = h->due;
    if (next == UINT64_MAX)
        return timeout_ms;
    uint64_t ms = next > now ? (next - now + 999999) / 1000000 : 0;
    return ms < timeout_ms ? (uint32_t)ms : timeout_ms;
}

/* One pass: due held completions, then what the inner NIC has within wait. */
static int flt_poll_once(struct flt_nic *n, struct rkv_wc *wc, int max, uint32_t timeout_ms)
{
    flt_lock(n);
    uint64_t now = flt_now(n);
    int got = flt_take_due(n, wc, max, now);
    uint32_t wait = got ? 0 : flt_wait_ms(n, timeout_ms, now);
    flt_unlock(n);
    if (got == max)
        return got;
    int m = n->inner->ops->poll(n->inner, wc + got, max - got, wait);
    if (m <= 0)
        return got ? got : m;
    flt_lock(n);
    now = flt_now(n);
    int base = got;
    for (int i = 0; i < m; i++) {
        struct rkv_wc w = wc[base + i];
        if (flt_translate(n, &w) && flt_filter_in(n, &w, now))
            wc[got++] = w;
    }
    flt_unlock(n);
    return got;
}

/* Held completions make a pass come back empty early: keep the caller's
 * timeout as a whole. */
static int flt_poll(struct rkv_nic *nic, struct rkv_wc *wc, int max, uint32_t timeout_ms)
{
    struct flt_nic *n = (struct flt_nic *)nic;
    uint64_t deadline = flt_now(n) + (uint64_t)timeout_ms * 1000000;
    for (;;) {
        int got = flt_poll_once(n, wc, max, timeout_ms);
        uint64_t now = flt_now(n);
        flt_lock(n);
        int woken = n->poll_woken;
        n->poll_woken = 0;
        flt_unlock(n);
        if (got != 0 || woken || now >= deadline)
            return got;
        timeout_ms = (uint32_t)((deadline - now + 999999) / 1000000);
    }
}

/* The inner NIC ends the wait; the flag keeps flt_poll from waiting again
 * for the rest of its timeout. An inner NIC without the op: the wait runs
 * out as before. */
static void flt_poll_wake(struct rkv_nic *nic)
{
    struct flt_nic *n = (struct flt_nic *)nic;
    flt_lock(n);
    n->poll_woken = 1;
    flt_unlock(n);
    if (n->inner->ops->poll_wake)
        n->inner->ops->poll_wake(n->inner);
}

static void flt_qp_close(struct rkv_qp *qp)
{
    struct flt_qp *q = (struct flt_qp *)qp;
    struct flt_nic *n = q->n;
    flt_lock(n);
    while (q->posting)
        n->base.port->ops->cond_wait(n->cv, n->mu, FLT_IDLE_NS);
    for (struct flt_out *o = q->out_head, *nx; o; o = nx) {
        nx = o->next;
        free(o);
        n->st.queued--;
    }
    q->out_head = q->out_tail = NULL;
    struct flt_in **pp = &n->in_head, *prev = NULL;
    while (*pp) {
        struct flt_in *h = *pp;
        if (h->wc.qp != qp) {
            prev = h;
            pp = &h->next;
            continue;
        }
        *pp = h->next;
        if (n->in_tail == h)
            n->in_tail = prev;
        free(h);
    }
    for (struct flt_qp **qq = &n->qps; *qq; qq = &(*qq)->next)
        if (*qq == q) {
            *qq = q->next;
            break;
        }
    flt_unlock(n);
    n->inner->ops->qp_close(q->inner);
    free(q);
}

static int flt_open(struct rkv_port *port, const char *dev, struct rkv_nic **nic_p)
{
    (void)port, (void)dev, (void)nic_p;
    return -RKV_EINVAL; /* made by rkv_nic_fault_wrap only */
}

static int flt_listen(struct rkv_nic *nic, const char *host, uint16_t port)
{
    struct flt_nic *n = (struct flt_nic *)nic;
    return n->inner->ops->listen(n->inner, host, port);
}

static int flt_reg_mr(struct rkv_nic *nic, void *addr, size_t len, int access, struct rkv_mr **mr_p)
{
    struct flt_nic *n = (struct flt_nic *)nic;
    return n->inner->ops->reg_mr(n->inner, addr, len, access, mr_p);
}

static void flt_dereg_mr(struct rkv_nic *nic, struct rkv_mr *mr)
{
    struct flt_nic *n = (struct flt_nic *)nic;
    n->inner->ops->dereg_mr(n->inner, mr);
}

/* Grants are the wrapped NIC's, on its QP (rkv_nic_grants tells whether it
 * has them). */
static int flt_mr_grant(struct rkv_qp *qp, struct rkv_mr *mr, uint32_t *rkey_p, void **grant_p)
{
    struct flt_qp *q = (struct flt_qp *)qp;
    struct rkv_nic *in = q->n->inner;
    if (!in->ops->mr_grant)
        return -RKV_EINVAL;
    return in->ops->mr_grant(q->inner, mr, rkey_p, grant_p);
}

static void flt_mr_revoke(struct rkv_nic *nic, void *grant)
{
    struct flt_nic *n = (struct flt_nic *)nic;
    n->inner->ops->mr_revoke(n->inner, grant);
}

static int flt_local_addr(struct rkv_nic *nic, const char *peer_host, uint16_t peer_port, char *buf,
                          size_t len)
{
    struct flt_nic *n = (struct flt_nic *)nic;
    return n->inner->ops->local_addr(n->inner, peer_host, peer_port, buf, len);
}

static void flt_close(struct rkv_nic *nic)
{
    struct flt_nic *n = (struct flt_nic *)nic;
    const struct rkv_port_ops *po = n->base.port->ops;
    flt_lock(n);
    n->stop = 1;
    po->cond_broadcast(n->cv);
    flt_unlock(n);
    po->task_join(n->base.port, n->timer);
    while (n->qps)
        flt_qp_close((struct rkv_qp *)n->qps);
    for (struct flt_in *h = n->in_head, *nx; h; h = nx) {
        nx = h->next;
        free(h);
    }
    n->inner->ops->close(n->inner);
    po->cond_destroy(n->cv);
    po->mutex_destroy(n->mu);
    free(n);
}

static const struct rkv_nic_ops flt_ops = {
    .name = "fault",
    .open = flt_open,
    .listen = flt_listen,
    .connect = flt_connect,
    .reg_mr = flt_reg_mr,
    .dereg_mr = flt_dereg_mr,
    .mr_grant = flt_mr_grant,
    .mr_revoke = flt_mr_revoke,
    .post_send = flt_post_send,
    .post_recv = flt_post_recv,
    .post_write = flt_post_write,
    .poll = flt_poll,
    .poll_wake = flt_poll_wake,
    .qp_close = flt_qp_close,
    .local_addr = flt_local_addr,
    .close = flt_close,
};

int rkv_nic_fault_wrap(struct rkv_nic *inner, const struct rkv_nic_fault *faults, uint32_t n_f,
                       uint64_t seed, struct rkv_nic **nic_p)
{
    if (n_f > FLT_MAX_FAULTS)
        return -RKV_ELIMIT;
    struct rkv_port *port = inner->port;
    struct flt_nic *n = calloc(1, sizeof(*n));
    if (!n)
        return -RKV_ENOMEM;
    int rc;
    for (uint32_t i = 0; i < n_f; i++) {
        n->f[i] = faults[i];
        assert(faults[i].kind == RKV_FAULT_DELAY || faults[i].delay_ns > 0);
    }
    n->n_f = n_f;
    n->base.ops = &flt_ops;
    n->base.port = port;
    n->base.inner = inner; /* rkv_nic_set_poll_gap reaches it */
    n->base.max_msg_bytes = inner->max_msg_bytes;
    atomic_init(&n->base.poll_gap_ns, atomic_load(&inner->poll_gap_ns));
    n->inner = inner;
    n->t0 = UINT64_MAX;
    rkv_rng_seed(&n->rng, seed, 0xfa17u);
    if ((rc = port->ops->mutex_create(port, &n->mu)) < 0)
        goto undo_alloc;
    if ((rc = port->ops->cond_create(port, &n->cv)) < 0)
        goto undo_mutex;
    if ((rc = port->ops->task_start(port, "fault-timer", flt_timer, n, &n->timer)) < 0)
        goto undo_cond;
    *nic_p = &n->base;
    return 0;
undo_cond:
    port->ops->cond_destroy(n->cv);
undo_mutex:
    port->ops->mutex_destroy(n->mu);
undo_alloc:
    free(n);
    return rc;
}

void rkv_nic_fault_stats(struct rkv_nic *nic, struct rkv_nic_fault_stats *st)
{
    struct flt_nic *n = (struct flt_nic *)nic;
    assert(nic->ops == &flt_ops);
    flt_lock(n);
    *st = n->st;
    flt_unlock(n);
}
