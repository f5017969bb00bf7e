/* Pull handlers: the reply row of a pull computed under the row's lock. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "store/pull_handlers.h"
#include "store/store_int.h"
#include "util/util.h"

int rkv_pull_register(struct rkv_pull_table *t, int id, rkv_pull_fn fn, uint32_t mult, uint32_t add,
                      void *user)
{
    if (!t || id < RKV_PULL_CUSTOM || id >= RKV_OP_MAX || (fn && mult == 0 && add == 0))
        return -RKV_EINVAL;
    t->fn[id] = fn;
    t->user[id] = fn ? user : NULL;
    t->mult[id] = fn ? mult : 0;
    t->add[id] = fn ? add : 0;
    return 0;
}

int rkv_pull_register_at(struct rkv_pull_table **tp, int id, rkv_pull_fn fn, uint32_t mult,
                         uint32_t add, void *user)
{
    if (!*tp && !(*tp = calloc(1, sizeof(**tp))))
        return -RKV_ENOMEM;
    return rkv_pull_register(*tp, id, fn, mult, add, user);
}

int rkv_pull_check(const struct rkv_pull_table *pt, int id, const struct rkv_tensor *t,
                   uint32_t *out_len_p, char *err, size_t err_len)
{
    const struct rkv_tensor_meta *m = &t->meta;
    uint64_t out_len;
    if (id == RKV_PULL_ROWS) {
        out_len = m->row_len;
    } else if (id == RKV_PULL_WITH_STATE) {
        if (!m->with_state)
            return rkv_errf(err, err_len, -RKV_EINVAL,
                            "pull with_state from '%s': the tensor has no optimizer state "
                            "(create it with with_state)",
                            m->name);
        out_len = 2ull * m->row_len;
    } else if (id >= RKV_PULL_CUSTOM && id < RKV_OP_MAX && pt && pt->fn[id]) {
        out_len = (uint64_t)pt->mult[id] * m->row_len + pt->add[id];
    } else {
        return rkv_errf(err, err_len, -RKV_ENOHANDLER,
                        "pull from '%s': pull handler %d is not registered here", m->name, id);
    }
    uint64_t esz = rkv_dtype_size(m->dtype);
    assert(esz > 0 && out_len > 0);
    if (out_len > RKV_PROTO_MAX_ROW_BYTES / esz)
        return rkv_errf(err, err_len, -RKV_ELIMIT,
                        "pull from '%s': handler %d writes %llu elements per row, over the "
                        "%u-byte row limit",
                        m->name, id, (unsigned long long)out_len, RKV_PROTO_MAX_ROW_BYTES);
    *out_len_p = (uint32_t)out_len;
    return 0;
}

int rkv_pull_row(struct rkv_shard *sh, const struct rkv_tensor *t, const struct rkv_pull_table *pt,
                 int id, double param, uint64_t gid, uint32_t out_len, uint8_t *out,
                 uint64_t deadline_ns)
{
    uint64_t l = rkv_pbook_g2l(&t->pb, gid);
    assert(l < sh->local_rows);
    const uint8_t *row = sh->data + l * sh->row_bytes;
    const uint8_t *state = sh->state ? sh->state + l * sh->row_bytes : NULL;
    int rc = rkv_shard_lock_until(sh, l, deadline_ns);
    if (rc < 0)
        return rc;
    switch (id) {
    case RKV_PULL_ROWS:
        memcpy(out, row, sh->row_bytes);
        break;
    case RKV_PULL_WITH_STATE:
        assert(state && out_len == 2u * t->meta.row_len);
        memcpy(out, row, sh->row_bytes);
        memcpy(out + sh->row_bytes, state, sh->row_bytes);
        break;
    default:
        assert(pt && pt->fn[id]);
        pt->fn[id](t->meta.dtype, row, state, t->meta.row_len, out, out_len, param, pt->user[id]);
        break;
    }
    rkv_shard_unlock(sh, l);
    return 0;
}
