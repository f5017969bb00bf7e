/* Hand-built frames of the TCP NIC's wire format (see the layout comment at
 * the top of impl/nic/nic_tcp.c), for tests that play a hostile peer. */
#ifndef RKV_TEST_RAW_FRAMES_H
#define RKV_TEST_RAW_FRAMES_H

#include <stdint.h>
#include <string.h>
#include <unistd.h>

#define RAW_MAGIC 0x544b5652u
#define RAW_HDR_BYTES 32
enum { RAW_SEND = 1, RAW_WRITE = 2, RAW_WRITE_IMM = 3 };

/* Writes a frame header claiming `len` payload bytes, then `n` real bytes. */
static inline void raw_send_frame(int fd, int kind, uint32_t len, const void *body, size_t n)
{
    uint8_t h[RAW_HDR_BYTES] = {0};
    uint32_t magic = RAW_MAGIC;
    memcpy(h, &magic, 4);
    h[4] = (uint8_t)kind;
    memcpy(h + 8, &len, 4);
    if (write(fd, h, sizeof(h)) != (ssize_t)sizeof(h))
        return;
    if (n && write(fd, body, n) != (ssize_t)n)
        return;
}

#endif
