/* Server 0's bookkeeping requests from peers that get them wrong, each
 * answered with an ERROR naming the mistake, on a connection that stays up:
 * HELLOs (to the wrong server, an id out of range, more workers than the
 * cluster has), a BARRIER before any HELLO, REGISTERs (from another
 * cluster, for server 0, from the wrong host), TABLE requests (waiting for
 * a server that has not registered yet, more of them than workers); and a
 * message no server expects, which closes the connection. The peer is a
 * real NIC speaking the wire format with the real encoders. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "nic/nic.h"
#include "port/port.h"
#include "proto/proto.h"
#include "rkv.h"
#include "store/store_int.h"

#define WAIT_MS 5000u
#define RX 16u
#define CTRL 8192u

/* A peer: one connection to one server. */
struct peer {
    struct rkv_port *port;
    struct rkv_nic *nic;
    struct rkv_qp *qp;
    uint8_t *rx, *tx;
    struct rkv_mr *rx_mr, *tx_mr;
    int down;
};

static void peer_open(struct peer *p, uint16_t port)
{
    memset(p, 0, sizeof(*p));
    assert_int_equal(rkv_port_posix_create("peer", RKV_LOG_ERROR, 9, &p->port), 0);
    assert_int_equal(rkv_nic_find("tcp")->open(p->port, NULL, &p->nic), 0);
    p->rx = aligned_alloc(64, (size_t)RX * CTRL);
    p->tx = aligned_alloc(64, CTRL);
    assert_true(p->rx && p->tx);
    memset(p->tx, 0, CTRL);
    struct rkv_nic *n = p->nic;
    assert_int_equal(n->ops->reg_mr(n, p->rx, (size_t)RX * CTRL, RKV_ACCESS_LOCAL, &p->rx_mr), 0);
    assert_int_equal(n->ops->reg_mr(n, p->tx, CTRL, RKV_ACCESS_LOCAL, &p->tx_mr), 0);
    assert_int_equal(n->ops->connect(n, "127.0.0.1", port, WAIT_MS, &p->qp), 0);
    for (uint32_t i = 0; i < RX; i++) {
        struct rkv_sge s = {.addr = p->rx + (size_t)i * CTRL, .len = CTRL, .mr = p->rx_mr};
        assert_int_equal(n->ops->post_recv(p->qp, i, &s), 0);
    }
}

static void peer_close(struct peer *p)
{
    p->nic->ops->qp_close(p->qp);
    p->nic->ops->dereg_mr(p->nic, p->rx_mr);
    p->nic->ops->dereg_mr(p->nic, p->tx_mr);
    p->nic->ops->close(p->nic);
    p->port->ops->destroy(p->port);
    free(p->rx);
    free(p->tx);
}

static void peer_send(struct peer *p, size_t len)
{
    struct rkv_sge s = {.addr = p->tx, .len = (uint32_t)len, .mr = p->tx_mr};
    assert_int_equal(p->nic->ops->post_send(p->qp, 1, &s, 0), 0);
}

/* The next message other than a CREDIT, within timeout_ms; -1 if none came
 * (or the connection went down: p->down). m's pointers are valid until the
 * next call. */
static int peer_next(struct peer *p, struct rkv_msg *m, uint32_t timeout_ms)
{
    static uint8_t keep[CTRL] __attribute__((aligned(8)));
    struct rkv_wc wc;
    while (p->nic->ops->poll(p->nic, &wc, 1, timeout_ms) == 1) {
        if (wc.opcode == RKV_WC_DISCONNECTED) {
            p->down = 1;
            return -1;
        }
        if (wc.opcode != RKV_WC_RECV || wc.status != RKV_WC_SUCCESS)
            continue;
        uint32_t i = (uint32_t)wc.wr_id;
        memcpy(keep, p->rx + (size_t)i * CTRL, wc.byte_len);
        struct rkv_sge s = {.addr = p->rx + (size_t)i * CTRL, .len = CTRL, .mr = p->rx_mr};
        assert_int_equal(p->nic->ops->post_recv(p->qp, i, &s), 0);
        char why[160];
        assert_int_equal(rkv_proto_decode(keep, wc.byte_len, m, why, sizeof(why)), 0);
        if (m->h.type != RKV_MSG_CREDIT)
            return 0;
    }
    return -1;
}

/* Sends tx[0..len) and expects an ERROR for request `req` with this status
 * and text. */
static void expect_error(struct peer *p, size_t len, uint64_t req, int status, const char *text)
{
    peer_send(p, len);
    struct rkv_msg m;
    assert_int_equal(peer_next(p, &m, WAIT_MS), 0);
    assert_int_equal(m.h.type, RKV_MSG_ERROR);
    assert_int_equal(m.h.req_id, req);
    assert_int_equal(m.h.status, status);
    if (!strstr(m.u.error.text, text))
        fail_msg("expected \"%s\", got \"%s\"", text, m.u.error.text);
}

static size_t enc_hello(struct peer *p, uint64_t req, uint32_t want, uint64_t cluster)
{
    struct rkv_hdr h = {.type = RKV_MSG_HELLO, .req_id = req};
    struct rkv_config d; /* the servers' settings here */
    rkv_config_defaults(&d);
    struct rkv_wire_hello w = {.want_id = want,
                               .nonce = 0x1234 + req,
                               .cluster = cluster,
                               .rx_depth = d.rx_depth,
                               .ctrl_buf_bytes = d.ctrl_buf_bytes};
    return rkv_proto_enc_hello(p->tx, &h, &w);
}

static size_t enc_register(struct peer *p, uint64_t req, uint64_t cluster, uint32_t id,
                           const char *host, uint32_t port)
{
    struct rkv_hdr h = {.type = RKV_MSG_REGISTER, .req_id = req, .sender = id};
    struct rkv_wire_addr a = {.cluster = cluster, .server_id = id, .port = port};
    snprintf(a.host, sizeof(a.host), "%s", host);
    return rkv_proto_enc_addr(p->tx, &h, &a);
}

static size_t enc_empty(struct peer *p, int type, uint64_t req)
{
    struct rkv_hdr h = {.type = (uint8_t)type, .req_id = req};
    return rkv_proto_enc_empty(p->tx, &h);
}

/* Machine 0 (this host) runs servers 0 and 1; machine 1's one server is
 * not known in advance (it registers with server 0), and the test plays it. */
struct cluster {
    struct rkv_machine machines[2];
    struct rkv_config cfg;
    struct rkv_server *srv[2];
    uint16_t base;
};

static void cluster_start(struct cluster *c)
{
    char err[256] = "";
    for (int attempt = 0; attempt < 40; attempt++) {
        memset(c, 0, sizeof(*c));
        c->base = (uint16_t)(41000 + (getpid() % 400) * 20 + attempt * 3);
        c->machines[0] = (struct rkv_machine){"127.0.0.1", c->base, 2};
        c->machines[1] = (struct rkv_machine){"", (uint16_t)(c->base + 2), 1};
        rkv_config_defaults(&c->cfg);
        c->cfg.n_machines = 2;
        c->cfg.machines = c->machines;
        c->cfg.n_workers = 1;
        c->cfg.timeout_ms = WAIT_MS;
        c->cfg.connect_retry_ms = WAIT_MS;
        c->cfg.log_level = RKV_LOG_ERROR;
        snprintf(c->cfg.shm_prefix, sizeof(c->cfg.shm_prefix), "rkvsr-%d-%u", (int)getpid(),
                 c->base);
        if (rkv_server_create(&c->cfg, 0, &c->srv[0], err, sizeof(err)) < 0)
            continue;
        if (rkv_server_create(&c->cfg, 1, &c->srv[1], err, sizeof(err)) == 0)
            return;
        rkv_server_destroy(c->srv[0]);
    }
    fail_msg("no free ports: %s", err);
}

static void cluster_stop(struct cluster *c)
{
    rkv_server_destroy(c->srv[1]);
    rkv_server_destroy(c->srv[0]);
}

static void test_bookkeeping_mistakes(void **state)
{
    (void)state;
    struct cluster c;
    cluster_start(&c);
    uint64_t fp = rkv_cfg_fingerprint(&c.cfg);
    struct peer p1, p0, q0;

    /* Server 1 neither hands out client ids nor keeps the address table. */
    peer_open(&p1, (uint16_t)(c.base + 1));
    expect_error(&p1, enc_hello(&p1, 1, RKV_ID_NONE, fp), 1, -RKV_EINVAL,
                 "only server 0 assigns client ids");
    expect_error(&p1, enc_register(&p1, 2, fp, 2, "127.0.0.1", c.base + 2), 2, -RKV_ECONFIG,
                 "not the address keeper");
    peer_close(&p1);

    peer_open(&p0, c.base);
    expect_error(&p0, enc_empty(&p0, RKV_MSG_BARRIER, 3), 3, -RKV_EINVAL, "barrier before hello");
    expect_error(&p0, enc_hello(&p0, 4, 5, fp), 4, -RKV_EINVAL, "client id out of range");
    /* Another cluster is told what differs: it read "machines, ports,
     * workers, shm prefix or durable mode differ" whatever it was (a DGL
     * job whose trainers counted 3 workers, its servers 1). */
    struct rkv_config other = c.cfg;
    other.n_workers = c.cfg.n_workers + 2;
    char want[160];
    snprintf(want, sizeof(want),
             "this server belongs to another cluster: the workers differ: this server counts "
             "%u, this client %u",
             c.cfg.n_workers, other.n_workers);
    peer_close(&p0);
    peer_open(&p0, c.base);
    expect_error(&p0, enc_hello(&p0, 4, RKV_ID_NONE, rkv_cfg_fingerprint(&other)), 4, -RKV_ECONFIG,
                 want);
    other.shm_prefix[0] ^= 1; /* another prefix of the same length */
    other.n_workers = c.cfg.n_workers;
    peer_close(&p0);
    peer_open(&p0, c.base);
    expect_error(&p0, enc_hello(&p0, 4, RKV_ID_NONE, rkv_cfg_fingerprint(&other)), 4, -RKV_ECONFIG,
                 "this server belongs to another cluster: the shm prefix differs (every node "
                 "needs the same shm_prefix; when none is set, the rkv command line and Python "
                 "use \"rkv-<machine 0's first port>\", rkv_config_defaults \"rkv\")");
    peer_close(&p0);
    peer_open(&p0, c.base);
    /* Machine 1's server is not known yet: the TABLE request waits for it;
     * a second one is more than the one worker could make. */
    peer_send(&p0, enc_empty(&p0, RKV_MSG_TABLE, 5));
    expect_error(&p0, enc_empty(&p0, RKV_MSG_TABLE, 6), 6, -RKV_ELIMIT,
                 "more TABLE requests than workers");
    expect_error(&p0, enc_register(&p0, 7, fp ^ 1, 2, "127.0.0.1", c.base + 2), 7, -RKV_ECONFIG,
                 "this server belongs to another cluster");
    expect_error(&p0, enc_register(&p0, 8, fp, 0, "127.0.0.1", c.base), 8, -RKV_ECONFIG,
                 "server id out of range");
    expect_error(&p0, enc_register(&p0, 9, fp, 3, "127.0.0.1", c.base), 9, -RKV_ECONFIG,
                 "server id out of range");
    expect_error(&p0, enc_register(&p0, 10, fp, 1, "10.9.9.9", c.base + 1), 10, -RKV_ECONFIG,
                 "servers of one machine registered from different hosts");
    /* Machine 1's server registers: acknowledged, and the waiting TABLE
     * request is answered with every server's address. */
    peer_send(&p0, enc_register(&p0, 11, fp, 2, "127.0.0.2", c.base + 2));
    struct rkv_msg m;
    int acked = 0, entries = 0;
    while ((acked == 0 || entries < 3) && peer_next(&p0, &m, WAIT_MS) == 0) {
        if (m.h.type == RKV_MSG_REGISTER_ACK && m.h.req_id == 11)
            acked = 1;
        else if (m.h.type == RKV_MSG_TABLE_ENTRY && m.h.req_id == 5) {
            assert_int_equal(m.u.addr.server_id, (uint32_t)entries);
            if (entries++ == 2) {
                assert_string_equal(m.u.addr.host, "127.0.0.2");
                assert_int_equal(m.u.addr.port, c.base + 2);
            }
        } else
            fail_msg("unexpected %s", rkv_msg_type_name(m.h.type));
    }
    assert_int_equal(acked, 1);
    assert_int_equal(entries, 3);
    /* The one worker joins; a second is one too many. */
    peer_send(&p0, enc_hello(&p0, 12, RKV_ID_NONE, fp));
    assert_int_equal(peer_next(&p0, &m, WAIT_MS), 0);
    assert_int_equal(m.h.type, RKV_MSG_HELLO_REPLY);
    assert_int_equal(m.u.hello_reply.client_id, 0);
    assert_int_equal(m.u.hello_reply.n_servers, 3);
    /* A barrier numbered before any that completed is no retry of one: a
     * count of 2^32-1 from the start was answered as done, in wrapping
     * arithmetic. Barrier 1 completes (one worker), and asked again it is
     * a retry, answered at once. */
    struct rkv_hdr bh = {.type = RKV_MSG_BARRIER, .req_id = 16, .count = UINT32_MAX};
    expect_error(&p0, rkv_proto_enc_empty(p0.tx, &bh), 16, -RKV_EINVAL,
                 "barrier 4294967295 asked, but barrier 1 is the next to complete");
    for (uint64_t req = 17; req <= 18; req++) {
        bh = (struct rkv_hdr){.type = RKV_MSG_BARRIER, .req_id = req, .count = 1};
        peer_send(&p0, rkv_proto_enc_empty(p0.tx, &bh));
        assert_int_equal(peer_next(&p0, &m, WAIT_MS), 0);
        assert_int_equal(m.h.type, RKV_MSG_BARRIER_REPLY);
        assert_int_equal(m.h.req_id, req);
    }
    bh = (struct rkv_hdr){.type = RKV_MSG_BARRIER, .req_id = 19, .count = 3};
    expect_error(&p0, rkv_proto_enc_empty(p0.tx, &bh), 19, -RKV_EINVAL,
                 "barrier 3 asked, but barrier 2 is the next to complete");
    peer_open(&q0, c.base);
    expect_error(&q0, enc_hello(&q0, 13, RKV_ID_NONE, fp), 13, -RKV_ELIMIT,
                 "every one of the n_workers client ids was handed out already");
    /* An acknowledgement is nothing a server expects: the connection goes,
     * and the server goes on serving the others. */
    peer_send(&q0, enc_empty(&q0, RKV_MSG_PUSH_ACK, 14));
    assert_int_equal(peer_next(&q0, &m, WAIT_MS), -1);
    assert_true(q0.down);
    peer_close(&q0);
    peer_send(&p0, enc_empty(&p0, RKV_MSG_TABLE, 15));
    entries = 0;
    while (entries < 3 && peer_next(&p0, &m, WAIT_MS) == 0)
        entries += m.h.type == RKV_MSG_TABLE_ENTRY && m.h.req_id == 15;
    assert_int_equal(entries, 3);
    peer_close(&p0);
    cluster_stop(&c);
}

/* A server asked to exit refuses what comes after (-RKV_ESHUTDOWN), so
 * that its linger before exiting ends; a repeated SHUTDOWN is acked. */
static void test_requests_after_shutdown(void **state)
{
    (void)state;
    struct cluster c;
    cluster_start(&c);
    struct peer p1;
    peer_open(&p1, (uint16_t)(c.base + 1));
    struct rkv_msg m;
    /* SHUTDOWN is taken only from a joined client. */
    peer_send(&p1, enc_hello(&p1, 9, 0, rkv_cfg_fingerprint(&c.cfg)));
    assert_int_equal(peer_next(&p1, &m, WAIT_MS), 0);
    assert_int_equal(m.h.type, RKV_MSG_HELLO_REPLY);
    for (uint64_t req = 1; req <= 2; req++) {
        peer_send(&p1, enc_empty(&p1, RKV_MSG_SHUTDOWN, req));
        assert_int_equal(peer_next(&p1, &m, WAIT_MS), 0);
        assert_int_equal(m.h.type, RKV_MSG_SHUTDOWN_ACK);
        assert_int_equal(m.h.req_id, req);
    }
    struct rkv_hdr h = {.type = RKV_MSG_META, .req_id = 3};
    expect_error(&p1, rkv_proto_enc_meta(p1.tx, &h, "t"), 3, -RKV_ESHUTDOWN,
                 "server 1 is shutting down");
    expect_error(&p1, enc_empty(&p1, RKV_MSG_BARRIER, 4), 4, -RKV_ESHUTDOWN,
                 "server 1 is shutting down");
    peer_close(&p1);
    cluster_stop(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bookkeeping_mistakes),
        cmocka_unit_test(test_requests_after_shutdown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
