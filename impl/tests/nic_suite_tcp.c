/* The tcp and fault(tcp) backends under the NIC and engine suites. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>

#include "nic/nic_fault.h"
#include "nic/nic_tcp.h"
#include "nic_suite.h"
#include "rkv.h"

static int tcp_env_open(void *ctx, const char *node, struct rkv_port **port_p,
                        struct rkv_nic **nic_p)
{
    (void)ctx;
    int rc = rkv_port_posix_create(node, RKV_LOG_WARN, 1, port_p);
    if (rc == 0 && (rc = rkv_nic_tcp_ops.open(*port_p, NULL, nic_p)) < 0)
        (*port_p)->ops->destroy(*port_p);
    return rc;
}

/* fault(tcp): a third of the posts, and of the completions coming in, are
 * held 2 ms, so that the decorator's held path keeps every promise too. */
static int fault_env_open(void *ctx, const char *node, struct rkv_port **port_p,
                          struct rkv_nic **nic_p)
{
    struct rkv_nic *inner;
    int rc = tcp_env_open(ctx, node, port_p, &inner);
    if (rc < 0)
        return rc;
    const struct rkv_nic_fault delay = {
        .kind = RKV_FAULT_DELAY, .fraction = 0.3, .end_ns = UINT64_MAX, .delay_ns = 2000000};
    rc = rkv_nic_fault_wrap(inner, &delay, 1, (uint64_t)node[0], nic_p);
    if (rc < 0) {
        inner->ops->close(inner);
        (*port_p)->ops->destroy(*port_p);
    }
    return rc;
}

static void tcp_env_close(void *ctx, struct rkv_port *port, struct rkv_nic *nic)
{
    (void)ctx;
    nic->ops->close(nic);
    port->ops->destroy(port);
}

static int tcp_env_listen(void *ctx, struct rkv_nic *nic, char *host, size_t host_len,
                          uint16_t *port_p)
{
    (void)ctx;
    struct rkv_nic *tcp = nic->inner ? nic->inner : nic;
    uint16_t port;
    assert_int_equal(rkv_nic_tcp_bound_port(tcp, &port), -RKV_EINVAL); /* none yet */
    int rc = nic->ops->listen(nic, "127.0.0.1", 0);
    if (rc == 0)
        rc = rkv_nic_tcp_bound_port(tcp, port_p);
    snprintf(host, host_len, "127.0.0.1");
    return rc;
}

const struct nic_suite_env nic_suite_tcp_env = {.name = "tcp",
                                                .wait_ms = 10000,
                                                .quiet_ms = 200,
                                                .open = tcp_env_open,
                                                .close = tcp_env_close,
                                                .listen = tcp_env_listen};

const struct nic_suite_env nic_suite_fault_tcp_env = {.name = "fault(tcp)",
                                                      .wait_ms = 10000,
                                                      .quiet_ms = 200,
                                                      .open = fault_env_open,
                                                      .close = tcp_env_close,
                                                      .listen = tcp_env_listen};
