/* The limits of this host, measured in the same run as what is compared
 * with them: one loopback TCP stream (what every remote byte of the tcp
 * backend crosses) and one core's memcpy (what the shared-memory path
 * costs). rkv demo and rkv bench divide by them; rkv calibrate takes the
 * kernel's CPU per byte from the same stream. */
#ifndef RKV_LIMITS_H
#define RKV_LIMITS_H

#include <stddef.h>

/* What one loopback TCP stream between two threads of this process cost:
 * 1 MiB writes and reads, as the tcp backend's large frames. */
struct rkv_limit_stream {
    double wall_s;     /* the reader's, from its first read to the last byte */
    double send_cpu_s; /* thread CPU time of the writer */
    double recv_cpu_s; /* and of the reader */
};

/* Streams bytes once through a fresh connected pair of loopback sockets
 * (TCP_NODELAY, as the backend opens them). 0, or -RKV_EIO. */
int rkv_limit_tcp_stream(size_t bytes, struct rkv_limit_stream *st_p);

/* GB/s of one 512 MiB stream; 0 if it could not be measured. */
double rkv_limit_tcp_gbps(void);

/* One core copying blocks of block_bytes between two buffers of that size
 * (512 MiB in all); GB/s, 0 if it could not be measured. */
double rkv_limit_memcpy_gbps(size_t block_bytes);

#endif
