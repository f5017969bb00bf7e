/* Per-node PRNG: xoshiro256** (Blackman & Vigna), seeded through splitmix64
 * so that nearby (seed, stream) pairs still give unrelated states. Pure
 * arithmetic, so the twin and real runs draw the same numbers. */
#include <assert.h>
#include <stdint.h>

#include "port/port.h"
#include "util/util.h"

#define RNG_GOLDEN 0x9e3779b97f4a7c15ULL

uint64_t rkv_mix64(uint64_t x)
{
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t rng_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void rkv_rng_seed(struct rkv_rng *r, uint64_t seed, uint64_t stream)
{
    /* The stream is mixed before it is combined so that (s, t) and (t, s) differ. */
    uint64_t x = seed ^ rkv_mix64(stream + RNG_GOLDEN);
    for (int i = 0; i < 4; i++) {
        x += RNG_GOLDEN;
        r->s[i] = rkv_mix64(x);
    }
    /* xoshiro's one forbidden state; splitmix64 makes it practically unreachable. */
    if (RKV_NEVER((r->s[0] | r->s[1] | r->s[2] | r->s[3]) == 0))
        r->s[0] = RNG_GOLDEN;
}

uint64_t rkv_rng_next(struct rkv_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rng_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rng_rotl(s[3], 45);
    return result;
}

/* Lemire's multiply-shift with rejection: one multiplication in the common
 * case, and the rejection of the low product removes the modulo bias. */
uint64_t rkv_rng_below(struct rkv_rng *r, uint64_t bound)
{
    assert(bound > 0);
    unsigned __int128 m = (unsigned __int128)rkv_rng_next(r) * bound;
    uint64_t low = (uint64_t)m;
    if (low < bound) {
        uint64_t threshold = -bound % bound; /* 2^64 mod bound */
        while (low < threshold) {
            m = (unsigned __int128)rkv_rng_next(r) * bound;
            low = (uint64_t)m;
        }
    }
    uint64_t v = (uint64_t)(m >> 64);
    assert(v < bound);
    return v;
}

double rkv_rng_double(struct rkv_rng *r)
{
    /* The top 53 bits fill a double's mantissa exactly: 2^-53 steps in [0, 1). */
    return (double)(rkv_rng_next(r) >> 11) * 0x1.0p-53;
}
