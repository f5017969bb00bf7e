/* IP helpers shared by the socket-addressed NIC backends (tcp, verbs). */
#ifndef RKV_NIC_INET_H
#define RKV_NIC_INET_H

#include <netdb.h>
#include <stddef.h>
#include <stdint.h>

struct rkv_port;

/* getaddrinfo() for host:port (passive: for listening; host may be NULL).
 * Logs as `who` ("nic tcp") on failure: -RKV_ECONFIG for an unknown name. */
int rkv_nic_resolve(struct rkv_port *port, const char *who, const char *host, uint16_t port_no,
                    int passive, struct addrinfo **res_p);

/* The local address the kernel would use toward peer:port, as text. */
int rkv_nic_route_src(struct rkv_port *port, const char *who, const char *peer, uint16_t port_no,
                      char *buf, size_t len);

#endif
