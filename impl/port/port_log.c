#include <assert.h>
#include <stdarg.h>
#include <stdio.h>

#include "port/port.h"
#include "util/util.h"

void rkv_port_log(struct rkv_port *p, int level, const char *fmt, ...)
{
    assert(p && p->ops && fmt);
    /* Filter before formatting: debug lines on hot paths must cost one compare. */
    if (level > p->log_level)
        return;
    va_list ap;
    va_start(ap, fmt);
    p->ops->vlog(p, level, fmt, ap);
    va_end(ap);
}

void rkv_port_warn_limited(struct rkv_port *p, struct rkv_ratelim *lim, const char *fmt, ...)
{
    char line[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    uint64_t quiet = 0;
    if (rkv_ratelim_ok(lim, p->ops->now_ns(p), RKV_RATELIM_BURST, &quiet))
        rkv_port_log(p, RKV_LOG_WARN, "%s (%llu such lines suppressed)", line,
                     (unsigned long long)quiet);
    else
        rkv_port_log(p, RKV_LOG_DEBUG, "%s", line);
}
