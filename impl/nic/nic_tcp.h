/* Extras of the TCP NIC backend that the portable vtable has no slot for. */
#ifndef RKV_NIC_TCP_H
#define RKV_NIC_TCP_H

#include <stdint.h>

#include "nic/nic.h"

/* The port of the most recent listen() on a tcp NIC (useful after listening
 * on port 0). -RKV_EINVAL if the NIC listens nowhere. */
int rkv_nic_tcp_bound_port(struct rkv_nic *nic, uint16_t *port_p);

/* QPs the NIC still holds, reaped or not (tests: nothing piles up). */
int rkv_nic_tcp_qp_count(struct rkv_nic *nic);

/* Read rounds so far by the NIC's progress task and by polling threads
 * inline (tests: who read). */
void rkv_nic_tcp_rounds(struct rkv_nic *nic, uint64_t *task, uint64_t *inline_);

#endif
