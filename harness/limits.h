/* The limits of this host, measured in the same run as what is compared
 * with them: one loopback TCP stream (what every remote byte of the tcp
 * backend crosses) and one core's memcpy (what the shared-memory path
 * costs). rkv demo and rkv bench divide by them; rkv calibrate takes the
 * kernel's CPU per byte from the same probe (harness/probe_tcp.h). */
#ifndef RKV_LIMITS_H
#define RKV_LIMITS_H

#include <stddef.h>

/* GB/s of one loopback stream (rkv_probe_tcp_gbps(1, 1 MiB): 1 MiB writes
 * and reads, as the tcp backend's large frames); 0 if it could not be
 * measured. */
double rkv_limit_tcp_gbps(void);

/* One core copying blocks of block_bytes between two buffers of that size
 * (512 MiB in all); GB/s, 0 if it could not be measured. */
double rkv_limit_memcpy_gbps(size_t block_bytes);

#endif
