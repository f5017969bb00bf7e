/* Hand-built frames of the TCP NIC's wire format (see the layout comment at
 * the top of impl/nic/nic_tcp.c), for tests that play a hostile peer. */
#ifndef RKV_TEST_RAW_FRAMES_H
#define RKV_TEST_RAW_FRAMES_H

#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#define RAW_MAGIC 0x544b5652u
#define RAW_HDR_BYTES 32
enum { RAW_SEND = 1, RAW_WRITE = 2, RAW_WRITE_IMM = 3, RAW_KEEPALIVE = 4 };

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

/* The connection hello (challenge-response on the shared secret, see
 * nic_tcp.c): the 40-byte messages of both sides. */
#define RAW_AUTH_BYTES 40
#define RAW_HELLO_MAGIC 0x484b5652u /* "RVKH" */
#define RAW_HELLO_VERSION 3
#define RAW_CHAL_MAGIC 0x434b5652u  /* "RVKC" */
#define RAW_PROOF_MAGIC 0x504b5652u /* "RVKP" */
#define RAW_ACK_MAGIC 0x414b5652u   /* "RVKA" */

static inline int raw_read_all(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (uint8_t *)buf + got, n - got);
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

static inline void raw_auth_msg(uint8_t *b, uint32_t magic, uint32_t status, const uint8_t *body)
{
    memcpy(b, &magic, 4);
    memcpy(b + 4, &status, 4);
    memcpy(b + 8, body, 32);
}

/* The NIC's key and MAC, computed independently of nic.c (the test checks
 * the wire format, not the code against itself). */
static inline void raw_mac(const char *secret, const char *label, const uint8_t *a,
                           const uint8_t *b, uint8_t mac[32])
{
    uint8_t key[32];
    const char *t = secret ? secret : "";
    crypto_generichash(key, sizeof(key), (const unsigned char *)t, strlen(t), NULL, 0);
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, key, sizeof(key));
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)label, strlen(label) + 1);
    crypto_auth_hmacsha256_update(&st, a, 32);
    crypto_auth_hmacsha256_update(&st, b, 32);
    crypto_auth_hmacsha256_final(&st, mac);
}

/* The connecting side's hello with `secret` (NULL: none); returns 0 when the
 * NIC welcomed it (and proved the same secret), -1 otherwise. */
static inline int raw_hello(int fd, const char *secret)
{
    if (sodium_init() < 0)
        return -1;
    uint8_t b[RAW_AUTH_BYTES], cn[32], sn[32], mac[32];
    randombytes_buf(cn, sizeof(cn));
    raw_auth_msg(b, RAW_HELLO_MAGIC, RAW_HELLO_VERSION, cn);
    if (write(fd, b, sizeof(b)) != (ssize_t)sizeof(b) || raw_read_all(fd, b, sizeof(b)) < 0)
        return -1;
    uint32_t magic, status;
    memcpy(&magic, b, 4);
    if (magic != RAW_CHAL_MAGIC)
        return -1;
    memcpy(sn, b + 8, 32);
    raw_mac(secret, "rkv tcp client", sn, cn, mac);
    raw_auth_msg(b, RAW_PROOF_MAGIC, 0, mac);
    if (write(fd, b, sizeof(b)) != (ssize_t)sizeof(b) || raw_read_all(fd, b, sizeof(b)) < 0)
        return -1;
    memcpy(&magic, b, 4);
    memcpy(&status, b + 4, 4);
    raw_mac(secret, "rkv tcp server", cn, sn, mac);
    return magic == RAW_ACK_MAGIC && status == 0 && memcmp(mac, b + 8, 32) == 0 ? 0 : -1;
}

/* The accepting side's hello with `secret`, after its first message (the
 * peer's HELLO, in first) was read; returns 0 when the peer proved it (and
 * was welcomed), -1 otherwise. */
static inline int raw_accept_rest(int fd, const uint8_t *first, const char *secret)
{
    if (sodium_init() < 0)
        return -1;
    uint8_t b[RAW_AUTH_BYTES], cn[32], sn[32], mac[32];
    memcpy(cn, first + 8, 32);
    randombytes_buf(sn, sizeof(sn));
    raw_auth_msg(b, RAW_CHAL_MAGIC, 0, sn);
    if (write(fd, b, sizeof(b)) != (ssize_t)sizeof(b) || raw_read_all(fd, b, sizeof(b)) < 0)
        return -1;
    raw_mac(secret, "rkv tcp client", sn, cn, mac);
    int ok = memcmp(mac, b + 8, 32) == 0;
    raw_mac(secret, "rkv tcp server", cn, sn, mac);
    raw_auth_msg(b, RAW_ACK_MAGIC, ok ? 0 : 1, mac);
    if (write(fd, b, sizeof(b)) != (ssize_t)sizeof(b))
        return -1;
    return ok ? 0 : -1;
}

#endif
