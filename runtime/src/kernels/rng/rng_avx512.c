/* rng_avx512.c — the Philox block generator compiled for AVX-512: the same
 * lane-wise code as the portable path (vt_philox16), vectorised 16 wide. */
#include "internal.h"

void vt_philox_blocks_avx512(const uint32_t key[2], uint64_t first, int64_t nblocks, uint32_t *out) {
    int64_t j = 0;
    for (; j + 16 <= nblocks; j += 16) vt_philox16(key, first + (uint64_t)j, out + 4 * j);
    if (j < nblocks) {
        uint32_t tail[64];
        vt_philox16(key, first + (uint64_t)j, tail);
        memcpy(out + 4 * j, tail, (size_t)(nblocks - j) * 4 * sizeof(uint32_t));
    }
}
