/* IP helpers shared by the tcp and verbs NICs (see nic_inet.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "nic/nic_inet.h"
#include "port/port.h"
#include "rkv.h"
#include "util/util.h"

int rkv_nic_resolve(struct rkv_port *port, const char *who, const char *host, uint16_t port_no,
                    int passive, struct addrinfo **res_p)
{
    char serv[8], bare[256];
    snprintf(serv, sizeof(serv), "%u", port_no);
    host = rkv_host_bare(host, bare, sizeof(bare)); /* "cannot resolve [::1]" */
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = passive ? AI_PASSIVE : 0};
    int rc = getaddrinfo(host, serv, &hints, res_p);
    if (rc == 0)
        return 0;
    RKV_LOGE(port, "%s: cannot resolve %s:%u: %s", who, host ? host : "*", port_no,
             gai_strerror(rc));
    /* getaddrinfo allocates: its failure to is memory, not I/O. */
    return rc == EAI_NONAME ? -RKV_ECONFIG : rc == EAI_MEMORY ? -RKV_ENOMEM : -RKV_EIO;
}

/* A connected UDP socket sends nothing, but getsockname() then names the
 * route's source, which is also the address rdma_cm binds to for that peer. */
int rkv_nic_route_src(struct rkv_port *port, const char *who, const char *peer, uint16_t port_no,
                      char *buf, size_t len)
{
    struct addrinfo *res;
    int rc = rkv_nic_resolve(port, who, peer, port_no, 0, &res);
    if (rc < 0)
        return rc;
    rc = -RKV_EIO;
    int fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
        getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        const void *a = ss.ss_family == AF_INET6
                            ? (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr
                            : (const void *)&((struct sockaddr_in *)&ss)->sin_addr;
        if (inet_ntop(ss.ss_family, a, buf, (socklen_t)len))
            rc = 0;
    }
    if (rc < 0)
        RKV_LOGE(port, "%s: no local address toward %s:%u: %s", who, peer, port_no,
                 strerror(errno));
    if (fd >= 0)
        close(fd);
    freeaddrinfo(res);
    return rc;
}
