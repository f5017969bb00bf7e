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

/* The connection hello every TCP peer sends first (token 0, the default);
 * returns 0 when the NIC welcomed it. */
static inline int raw_hello(int fd, uint64_t token)
{
    uint8_t b[16];
    uint32_t magic = 0x484b5652u, version = 1;
    memcpy(b, &magic, 4);
    memcpy(b + 4, &version, 4);
    memcpy(b + 8, &token, 8);
    if (write(fd, b, sizeof(b)) != (ssize_t)sizeof(b))
        return -1;
    size_t got = 0;
    while (got < sizeof(b)) {
        ssize_t r = read(fd, b + got, sizeof(b) - got);
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    uint32_t status;
    memcpy(&status, b + 4, 4);
    return status == 0 ? 0 : -1;
}

#endif
