#include <assert.h>
#include <stdarg.h>

#include "port/port.h"

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
