#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

static const char *const rkv_err_names[RKV_ERR_MAX_] = {
    [RKV_OK] = "success",
    [RKV_EINVAL] = "invalid argument",
    [RKV_ENOMEM] = "out of memory",
    [RKV_ETIMEDOUT] = "request timed out",
    [RKV_EPEERDEAD] = "peer disconnected or died",
    [RKV_EPROTO] = "malformed or unexpected wire message",
    [RKV_ENOTENSOR] = "unknown tensor",
    [RKV_ERANGE] = "row id out of range",
    [RKV_EDTYPE] = "dtype or row length mismatch",
    [RKV_EEXIST] = "tensor exists with another description",
    [RKV_EIO] = "I/O error",
    [RKV_EACCESS] = "remote access outside a registered region",
    [RKV_ENOHANDLER] = "push or pull handler not registered",
    [RKV_ECONFIG] = "bad configuration",
    [RKV_ESHUTDOWN] = "store is shutting down",
    [RKV_ELIMIT] = "configured limit reached",
    [RKV_EINUSE] = "failed, and the NIC may still use the caller's buffer",
    [RKV_EINTR] = "interrupted",
};

const char *rkv_strerror(int err)
{
    /* As unsigned: -INT_MIN does not fit an int (it stayed negative and
     * indexed before the table). */
    unsigned e = err < 0 ? 0u - (unsigned)err : (unsigned)err;
    if (e >= RKV_ERR_MAX_ || !rkv_err_names[e])
        return "unknown error";
    return rkv_err_names[e];
}

int rkv_errf(char *err, size_t err_len, int code, const char *fmt, ...)
{
    if (err && err_len) {
        /* Formatted apart, then copied: callers add context to the error
         * already in err (rkv_errf(c->err, ..., "push: ...: %s", c->err)),
         * and vsnprintf into its own argument is undefined; glibc wrote
         * "push: machine 1 still unreachable ...: push: machine 1 still
         * unreachable ...: died". */
        char local[1024];
        char *tmp = err_len <= sizeof(local) ? local : malloc(err_len);
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(tmp ? tmp : err, err_len, fmt, ap);
        va_end(ap);
        if (tmp) {
            memcpy(err, tmp, strlen(tmp) + 1);
            if (tmp != local)
                free(tmp);
        }
    }
    return code;
}

size_t rkv_dtype_size(enum rkv_dtype dt)
{
    switch (dt) {
    case RKV_F32:
    case RKV_I32:
        return 4;
    case RKV_F64:
    case RKV_I64:
        return 8;
    }
    return 0;
}

const char *rkv_dtype_name(enum rkv_dtype dt)
{
    switch (dt) {
    case RKV_F32:
        return "f32";
    case RKV_F64:
        return "f64";
    case RKV_I32:
        return "i32";
    case RKV_I64:
        return "i64";
    }
    return "unknown";
}
