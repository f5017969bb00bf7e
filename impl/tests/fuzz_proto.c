/* libFuzzer target: the wire decoder must reject or accept any byte string
 * without reading outside it, and what it accepts must re-encode to the
 * same header (ci/fuzz runs it; the corpus is impl/tests/corpus/proto). */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A private copy of exactly `size` bytes: ASan flags any read past it. */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    struct rkv_msg m;
    struct rkv_hdr h;
    char err[256];
    int rh = rkv_proto_decode_hdr(buf, size, &h, err, sizeof(err));
    int rc = rkv_proto_decode(buf, size, &m, err, sizeof(err));
    /* A message that decodes has a header that decodes. */
    assert(rc < 0 || rh == 0);
    if (rc == 0) {
        uint8_t hdr[RKV_PROTO_HDR_BYTES];
        rkv_proto_put_hdr(hdr, &m.h);
        struct rkv_hdr back;
        int r2 = rkv_proto_decode_hdr(hdr, sizeof(hdr), &back, err, sizeof(err));
        (void)r2;
        assert(back.type == m.h.type && back.req_id == m.h.req_id);
    }
    free(buf);
    return 0;
}
