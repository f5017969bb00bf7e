/* Small helpers shared by every module. */
#ifndef RKV_UTIL_H
#define RKV_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "rkv.h"

/* Formats a message into err (if non-NULL) and returns code (negative).
 * The first function that decides an error reports it; callers propagate. */
int rkv_errf(char *err, size_t err_len, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Overflow-checked arithmetic: return 0 on overflow, 1 otherwise. */
static inline int rkv_mul_ok(uint64_t a, uint64_t b, uint64_t *r)
{
    return !__builtin_mul_overflow(a, b, r);
}
static inline int rkv_add_ok(uint64_t a, uint64_t b, uint64_t *r)
{
    return !__builtin_add_overflow(a, b, r);
}

#define RKV_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
/* Conditions that cannot happen but are handled anyway (as SQLite's NEVER). */
#define RKV_NEVER(x) __builtin_expect(!!(x), 0)

#endif
