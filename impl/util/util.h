/* Small helpers shared by every module. */
#ifndef RKV_UTIL_H
#define RKV_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "rkv.h"

/* Formats a message into err (if non-NULL) and returns code (negative).
 * The first function that decides an error reports it; callers propagate. */
int rkv_errf(char *err, size_t err_len, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* An unsigned number as people write it in a setting or a file: decimal
 * digits (leading zeros are still decimal, not octal) or 0x and hex
 * digits; nothing else, no sign, no spaces. 0, or -1 (*v untouched) when s
 * is not one or does not fit 64 bits. */
int rkv_parse_u64(const char *s, uint64_t *v);

/* host without the brackets of "[::1]", as URLs and DGL users write an
 * IPv6 address (getaddrinfo and inet_pton take it only without), copied
 * into buf; host itself when it has none or they do not fit buf. */
const char *rkv_host_bare(const char *host, char *buf, size_t len);

/* Two machines of ms that would put two servers on one port: one host
 * (an address by its bytes, brackets off, an IPv4-mapped IPv6 address as
 * the IPv4 one; a name without regard to case, not resolved) and port
 * ranges (base_port, servers) that meet. Empty hosts (announced at run
 * time) are not compared. 1 with the pair's indices (*a_p < *b_p), 0 when
 * there is none, -1 out of memory. O(n log n): a table of 16,384
 * machines is checked per node. */
int rkv_machines_overlap(const struct rkv_machine *ms, uint32_t n, uint32_t *a_p, uint32_t *b_p);

/* Host-order integers at any alignment in a file's bytes (the snapshot and
 * the log, whose little-endian formats assert the host's order). A put
 * returns the byte after what it wrote. */
static inline uint8_t *rkv_put32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4);
    return p + 4;
}
static inline uint8_t *rkv_put64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
    return p + 8;
}
static inline uint32_t rkv_get32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline uint64_t rkv_get64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Overflow-checked arithmetic: return 0 on overflow, 1 otherwise. */
static inline int rkv_mul_ok(uint64_t a, uint64_t b, uint64_t *r)
{
    return !__builtin_mul_overflow(a, b, r);
}
static inline int rkv_add_ok(uint64_t a, uint64_t b, uint64_t *r)
{
    return !__builtin_add_overflow(a, b, r);
}

/* Rate limit for per-connection log lines: at most `burst` lines of one
 * kind per 10 s window; the first line after lines were suppressed says how
 * many, so that a flood of bad peers cannot flood the log. The caller holds
 * whatever lock guards it. */
struct rkv_ratelim {
    uint64_t window_end_ns; /* the current window ends then */
    uint32_t in_window;     /* lines written in it */
    uint64_t suppressed;    /* lines not written since the last one */
};
#define RKV_RATELIM_NS 10000000000ull /* 10 s */
#define RKV_RATELIM_BURST 20u

/* 1 when a line may be written now; *suppressed_p then gets how many were
 * not since the last one written. */
static inline int rkv_ratelim_ok(struct rkv_ratelim *r, uint64_t now_ns, uint32_t burst,
                                 uint64_t *suppressed_p)
{
    if (now_ns >= r->window_end_ns) {
        r->window_end_ns = now_ns + RKV_RATELIM_NS;
        r->in_window = 0;
    }
    if (r->in_window >= burst) {
        r->suppressed++;
        return 0;
    }
    r->in_window++;
    *suppressed_p = r->suppressed;
    r->suppressed = 0;
    return 1;
}

#define RKV_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
/* Conditions that cannot happen but are handled anyway (as SQLite's NEVER). */
#define RKV_NEVER(x) __builtin_expect(!!(x), 0)

#endif
