/* The composition of a node (process) on a real host: the only file that
 * names a port backend (POSIX) and chooses a NIC backend (tcp, verbs) by
 * the config's name. Everything else takes the port and NIC it is given,
 * so the same store and engine run in the twin (sim/twin/twin.c composes
 * the SimGrid port and NIC) and in tests over any backend. */
#include <stdio.h>
#include <string.h>

#include "nic/nic.h"
#include "port/port.h"
#include "store/node.h"
#include "store/store_int.h"
#include "util/util.h"

const struct rkv_nic_ops *rkv_nic_find(const char *name)
{
#if RKV_WITH_TCP
    if (strcmp(name, "tcp") == 0)
        return &rkv_nic_tcp_ops;
#endif
#if RKV_WITH_VERBS
    if (strcmp(name, "verbs") == 0)
        return &rkv_nic_verbs_ops;
#endif
    (void)name;
    return NULL;
}

int rkv_node_backend_check(const char *backend, char *err, size_t err_len)
{
    if (rkv_nic_find(backend))
        return 0;
    /* Which are, so that a user need not guess: "sim" in particular is the
     * twin's, a whole cluster in one process, not a node's. */
    static const char *const built[] = {
#if RKV_WITH_TCP
        "tcp",
#endif
#if RKV_WITH_VERBS
        "verbs",
#endif
        NULL
    };
    char list[64] = "";
    for (int k = 0; built[k]; k++)
        snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", k ? ", " : "", built[k]);
    return rkv_errf(err, err_len, -RKV_ECONFIG,
                    "backend '%s' is not built in (this build has: %s%s)", backend,
                    list[0] ? list : "none",
                    strcmp(backend, "sim") == 0
                        ? "; sim is the twin's, which runs a whole scenario: rkv run FILE"
                        : "");
}

int rkv_node_open(const struct rkv_config *cfg, const char *node, uint64_t seed,
                  struct rkv_port **port_p, struct rkv_nic **nic_p, char *err, size_t err_len)
{
    const struct rkv_nic_ops *ops = rkv_nic_find(cfg->backend);
    if (!ops)
        return rkv_node_backend_check(cfg->backend, err, err_len);
    int rc = rkv_port_posix_create(node, cfg->log_level, seed, port_p);
    if (rc < 0)
        return rkv_errf(err, err_len, rc, "cannot create the OS port: %s", rkv_strerror(rc));
    /* the verbs device setting (empty: the NIC's own choice); others ignore it */
    if ((rc = ops->open(*port_p, cfg->verbs.dev[0] ? cfg->verbs.dev : NULL, nic_p)) < 0) {
        (*port_p)->ops->destroy(*port_p);
        return rkv_errf(err, err_len, rc, "cannot open the %s NIC: %s%s", ops->name,
                        rkv_strerror(rc),
                        rc == -RKV_ELIMIT && !strcmp(ops->name, "tcp")
                            ? " (this process is out of file descriptors: raise ulimit -n, or "
                              "make fewer nodes in it)"
                            : "");
    }
    if ((rc = rkv_cfg_nic(cfg, *nic_p, err, err_len)) < 0) {
        rkv_node_close(*port_p, *nic_p);
        return rc;
    }
    return 0;
}

void rkv_node_close(struct rkv_port *port, struct rkv_nic *nic)
{
    nic->ops->close(nic);
    port->ops->destroy(port);
}

uint64_t rkv_node_shm_maker(const char *prefix, uint32_t machine)
{
    struct rkv_port *port;
    if (rkv_port_posix_create("shm", 0, 0, &port) < 0)
        return 0;
    uint64_t maker = rkv_mach_live_maker(port, prefix, machine);
    port->ops->destroy(port);
    return maker;
}
