/* Numbers in settings, environment variables and scenario files. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

int rkv_parse_u64(const char *s, uint64_t *v)
{
    if (!s || !*s)
        return -1;
    int hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
    const char *digits = hex ? s + 2 : s;
    /* strtoull would take a sign, spaces, and (base 0) a leading 0 as octal:
     * "010" workers were 8. Only digits of the base, at least one. */
    for (const char *p = digits;; p++) {
        int ok = (*p >= '0' && *p <= '9') ||
                 (hex && ((*p >= 'a' && *p <= 'f') || (*p >= 'A' && *p <= 'F')));
        if (!*p && p > digits)
            break;
        if (!ok)
            return -1;
    }
    char *end;
    errno = 0;
    unsigned long long x = strtoull(digits, &end, hex ? 16 : 10);
    if (errno || *end)
        return -1;
    *v = x;
    return 0;
}
