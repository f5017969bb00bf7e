/* The oracle's expectation for optimizer state (oracle_state.h). */
#include <stdio.h>
#include <string.h>

#include "harness/oracle_state.h"

int rkv_oracle_check_state(const struct rkv_scenario *sc, uint32_t ti, uint64_t row,
                           const void *state, char *why, size_t why_len)
{
    const struct rkv_tensor_desc *d = &sc->tensors[ti].desc;
    size_t esz = rkv_dtype_size(d->dtype);
    static const uint8_t zero[8];
    for (uint32_t j = 0; j < d->row_len; j++) {
        const uint8_t *e = (const uint8_t *)state + (size_t)j * esz;
        if (memcmp(e, zero, esz) == 0)
            continue;
        double got = d->dtype == RKV_F32   ? *(const float *)(const void *)e
                     : d->dtype == RKV_F64 ? *(const double *)(const void *)e
                     : d->dtype == RKV_I32 ? *(const int32_t *)(const void *)e
                                           : (double)*(const int64_t *)(const void *)e;
        snprintf(why, why_len,
                 "tensor \"%s\" row %llu: optimizer state element %u is %g, expected 0 (no push "
                 "op of the scenario touches the state)",
                 d->name, (unsigned long long)row, j, got);
        return -1;
    }
    return 0;
}
