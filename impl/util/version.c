/* rkv_version(): the library's own version, so that a program can tell
 * which librkv it loaded (the header's RKV_VERSION_* say what it was
 * compiled against). */
#include "rkv.h"

#define RKV_STR_(x) #x
#define RKV_STR(x) RKV_STR_(x)

const char *rkv_version(void)
{
    return RKV_STR(RKV_VERSION_MAJOR) "." RKV_STR(RKV_VERSION_MINOR) "." RKV_STR(RKV_VERSION_PATCH);
}
