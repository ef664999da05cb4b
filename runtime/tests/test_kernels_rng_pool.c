/* test_kernels_rng_pool.c — Philox known answers, reproducibility across
 * layouts, distribution sanity; the thread pool's coverage and the ISA
 * detection contract. */
#include <stdatomic.h>

#include "test_kernels_util.h"

TEST(kernels_philox_known_answers) {
    /* Random123 kat_vectors for philox4x32_10. */
    uint32_t ctr0[4] = {0, 0, 0, 0}, key0[2] = {0, 0}, out[4];
    vt_philox4x32_10(ctr0, key0, out);
    CHECK(out[0] == 0x6627e8d5u && out[1] == 0xe169c58du && out[2] == 0xbc57ac4cu && out[3] == 0x9b00dbd8u);
    uint32_t ctr1[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, key1[2] = {0xffffffffu, 0xffffffffu};
    vt_philox4x32_10(ctr1, key1, out);
    CHECK(out[0] == 0x408f276du && out[1] == 0x41c83b0eu && out[2] == 0xa20bc7c6u && out[3] == 0x6d5451fdu);
    uint32_t ctr2[4] = {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, key2[2] = {0xa4093822u, 0x299f31d0u};
    vt_philox4x32_10(ctr2, key2, out);
    CHECK(out[0] == 0xd16cfe09u && out[1] == 0x94fdccebu && out[2] == 0x5001e420u && out[3] == 0x24126ea1u);
}

TEST(kernels_rng_reproducible_across_layouts) {
    const vt_dtype dts[] = {VT_F32, VT_BF16, VT_F16, VT_F64};
    for (size_t d = 0; d < 4; d++) {
        vt_dtype dt = dts[d];
        int64_t n = 33 * 257;
        host_tensor c = ht_1d(dt, n), t = ht_transposed(dt, 33, 257), t2 = ht_1d(dt, n);
        for (int normal = 0; normal < 2; normal++) {
            if (normal) {
                CHECK_OK(vt_rng_normal(&c.t, 42, 7, 0.0, 1.0));
                CHECK_OK(vt_rng_normal(&t.t, 42, 7, 0.0, 1.0));
            } else {
                CHECK_OK(vt_rng_uniform(&c.t, 42, 7, -1.0, 3.0));
                CHECK_OK(vt_rng_uniform(&t.t, 42, 7, -1.0, 3.0));
            }
            /* Read the transposed view back in logical order. */
            int64_t shape[2] = {33, 257};
            vt_tensor flat = t2.t;
            flat.ndim = 2;
            flat.sizes[0] = 33; flat.sizes[1] = 257; flat.strides[0] = 257; flat.strides[1] = 1;
            (void)shape;
            CHECK_OK(vt_copy(&flat, &t.t));
            CHECK_MSG(memcmp(c.block, t2.block, (size_t)n * vt_dtype_size(dt)) == 0, "%s normal=%d layout",
                      vt_dtype_name(dt), normal);
            /* An element depends on its index only: a suffix call with the
             * matching offset reproduces the tail (4 or 2 per counter). */
            int64_t per = dt == VT_F64 ? 2 : 4, skip = per * 100;
            host_tensor tail = ht_1d(dt, n - skip);
            if (normal)
                CHECK_OK(vt_rng_normal(&tail.t, 42, 7 + 100, 0.0, 1.0));
            else
                CHECK_OK(vt_rng_uniform(&tail.t, 42, 7 + 100, -1.0, 3.0));
            CHECK(memcmp((char *)c.block + skip * (int64_t)vt_dtype_size(dt), tail.block,
                         (size_t)(n - skip) * vt_dtype_size(dt)) == 0);
            ht_free(&tail);
            /* Another offset gives other numbers. */
            if (normal)
                CHECK_OK(vt_rng_normal(&t2.t, 42, 8, 0.0, 1.0));
            else
                CHECK_OK(vt_rng_uniform(&t2.t, 42, 8, -1.0, 3.0));
            CHECK(memcmp(c.block, t2.block, (size_t)n * vt_dtype_size(dt)) != 0);
        }
        CHECK(vt_rng_counters_used(dt, n) == (uint64_t)((n + (dt == VT_F64 ? 1 : 3)) / (dt == VT_F64 ? 2 : 4)));
        ht_free(&c); ht_free(&t); ht_free(&t2);
    }
}

TEST(kernels_rng_uniform_range_and_stats) {
    const vt_dtype dts[] = {VT_F32, VT_BF16, VT_F16, VT_F64};
    for (size_t d = 0; d < 4; d++) {
        int64_t n = 200000;
        host_tensor h = ht_1d(dts[d], n);
        host_tensor f = ht_1d(VT_F64, n);
        /* A narrow range near 1 makes bf16 rounding hit `to` often. */
        CHECK_OK(vt_rng_uniform(&h.t, 1, 0, 0.0, 1.0));
        CHECK_OK(vt_copy(&f.t, &h.t));
        double *v = f.block, sum = 0, sq = 0, lo = 1, hi = 0;
        for (int64_t i = 0; i < n; i++) {
            sum += v[i];
            sq += v[i] * v[i];
            lo = fmin(lo, v[i]);
            hi = fmax(hi, v[i]);
        }
        CHECK_MSG(lo >= 0.0 && hi < 1.0, "%s range [%g, %g]", vt_dtype_name(dts[d]), lo, hi);
        double mean = sum / n, var = sq / n - mean * mean;
        CHECK_MSG(fabs(mean - 0.5) < 0.005 && fabs(var - 1.0 / 12) < 0.003, "%s mean %g var %g",
                  vt_dtype_name(dts[d]), mean, var);
        CHECK_OK(vt_rng_uniform(&h.t, 3, 0, 1.0, 1.0078125)); /* exactly two bf16 values apart */
        CHECK_OK(vt_copy(&f.t, &h.t));
        for (int64_t i = 0; i < n; i++) CHECK(v[i] >= 1.0 && v[i] < 1.0078125);
        CHECK_OK(vt_rng_normal(&h.t, 9, 123, 2.0, 3.0));
        CHECK_OK(vt_copy(&f.t, &h.t));
        sum = sq = 0;
        for (int64_t i = 0; i < n; i++) {
            sum += v[i];
            sq += v[i] * v[i];
        }
        mean = sum / n;
        double sd = sqrt(sq / n - mean * mean);
        CHECK_MSG(fabs(mean - 2.0) < 0.05 && fabs(sd - 3.0) < 0.05, "%s normal mean %g sd %g",
                  vt_dtype_name(dts[d]), mean, sd);
        ht_free(&h);
        ht_free(&f);
    }
    host_tensor i = ht_1d(VT_I32, 10);
    CHECK_STATUS(vt_rng_uniform(&i.t, 1, 0, 0, 1), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_rng_normal(&i.t, 1, 0, 0, 1), VT_ERR_INVALID_ARGUMENT);
    host_tensor g = ht_1d(VT_F32, 10);
    CHECK_STATUS(vt_rng_uniform(&g.t, 1, 0, 2, 1), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_rng_normal(&g.t, 1, 0, 0, -1), VT_ERR_INVALID_ARGUMENT);
    ht_free(&i);
    ht_free(&g);
}

typedef struct cover_ctx {
    _Atomic int64_t sum;
    _Atomic int calls;
    unsigned char *seen;
    int64_t grain;
    _Atomic int small_chunk;
} cover_ctx;

static void cover(void *vctx, int64_t b, int64_t e) {
    cover_ctx *c = vctx;
    atomic_fetch_add(&c->calls, 1);
    if (e - b < c->grain) atomic_store(&c->small_chunk, 1);
    if (c->seen)
        for (int64_t i = b; i < e; i++) c->seen[i]++;
    atomic_fetch_add(&c->sum, e - b);
}

static void nested(void *vctx, int64_t b, int64_t e) {
    cover_ctx *c = vctx;
    /* Re-entrant use runs inline instead of deadlocking. */
    vt_parallel_for(e - b, 1, cover, c);
}

TEST(kernels_pool_parallel_for) {
    CHECK(vt_num_threads() >= 1);
    const int64_t ns[] = {1, 100, 65536, 100003, 1 << 20};
    for (size_t k = 0; k < 5; k++) {
        for (int64_t grain = 1; grain <= 100000; grain *= 317) {
            cover_ctx c;
            atomic_init(&c.sum, 0);
            atomic_init(&c.calls, 0);
            atomic_init(&c.small_chunk, 0);
            c.grain = grain;
            c.seen = calloc((size_t)ns[k], 1);
            vt_parallel_for(ns[k], grain, cover, &c);
            CHECK(atomic_load(&c.sum) == ns[k]);
            int64_t bad = 0;
            for (int64_t i = 0; i < ns[k]; i++) bad += c.seen[i] != 1;
            CHECK(bad == 0);
            CHECK(atomic_load(&c.calls) <= vt_num_threads());
            if (ns[k] > grain) CHECK(!atomic_load(&c.small_chunk));
            free(c.seen);
        }
    }
    cover_ctx c;
    atomic_init(&c.sum, 0);
    atomic_init(&c.calls, 0);
    atomic_init(&c.small_chunk, 0);
    c.grain = 0;
    c.seen = NULL; /* every chunk covers [0, its length): only the count is checked */
    vt_parallel_for(1000, 1, nested, &c); /* each chunk re-enters with its length */
    CHECK(atomic_load(&c.sum) == 1000);
    vt_parallel_for(0, 1, cover, &c); /* nothing to do */
    /* Many back-to-back small jobs exercise the spin / sleep hand-off. */
    for (int r = 0; r < 2000; r++) {
        cover_ctx d;
        atomic_init(&d.sum, 0);
        atomic_init(&d.calls, 0);
        atomic_init(&d.small_chunk, 0);
        d.grain = 1;
        d.seen = calloc(64, 1);
        vt_parallel_for(64, 1, cover, &d);
        CHECK(atomic_load(&d.sum) == 64);
        free(d.seen);
    }
}

TEST(kernels_isa_detection) {
    unsigned avail = vt_isa_available(), active = vt_isa_active();
    CHECK((active & ~avail) == 0);
    const char *p = vt_isa_path();
    CHECK(strcmp(p, "amx") == 0 || strcmp(p, "avx512bf16") == 0 || strcmp(p, "avx512") == 0 ||
          strcmp(p, "avx2") == 0 || strcmp(p, "neon") == 0 || strcmp(p, "scalar") == 0);
#if VT_X86
    CHECK(!(avail & VT_ISA_NEON));
    if (avail & VT_ISA_AVX512) CHECK(avail & VT_ISA_AVX2);
    if (avail & VT_ISA_AMX) CHECK(avail & VT_ISA_AVX512BF16);
#elif defined(__aarch64__)
    CHECK(avail == VT_ISA_NEON);
#endif
}
