/* rkv doctor's checks (harness/doctor.c): can a verbs run work on this
 * host? RDMA devices and ports, soft-RoCE, an address rdma_cm can use,
 * RLIMIT_MEMLOCK, /dev/shm, the configured server ports. Each problem is
 * one line on stdout starting with FIX. */
#ifndef RKV_HARNESS_DOCTOR_H
#define RKV_HARNESS_DOCTOR_H

#include "api/config.h"

/* RKV_EXIT_OK if a verbs run can work here, RKV_EXIT_USAGE if not (also
 * when this rkv was built without verbs). */
int rkv_doctor(const struct cmd_settings *s);

#endif
