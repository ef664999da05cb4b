/* test_kernels_convert.c — half-precision conversions exhaustively against
 * the definition-based reference, and vt_copy / vt_fill against the scalar
 * reference for every dtype pair and layout. */
#include "test_kernels_util.h"

static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

TEST(kernels_f16_to_f32_exhaustive) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float a = vt_f16_to_f32((uint16_t)h), b = vt_ref_f16_to_f32((uint16_t)h);
        if (f2u(a) != f2u(b) && bad++ < 5) CHECK_MSG(0, "f16 %04x: %08x vs %08x", h, f2u(a), f2u(b));
    }
    CHECK(bad == 0);
    CHECK(vt_f16_to_f32(0x3c00) == 1.0f);
    CHECK(vt_f16_to_f32(0x0001) == 0x1p-24f);
    CHECK(vt_f16_to_f32(0x7bff) == 65504.0f);
    CHECK(isinf(vt_f16_to_f32(0xfc00)) && vt_f16_to_f32(0xfc00) < 0);
}

/* Every f16 value, the midpoints between neighbours (ties) and one float
 * ulp either side of them, plus random floats. */
TEST(kernels_f32_to_f16_exhaustive) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float v = vt_ref_f16_to_f32((uint16_t)h);
        float probes[4] = {v, 0, 0, 0};
        int np = 1;
        if ((h & 0x7fff) < 0x7c00) { /* finite: midpoint to the next magnitude */
            float next = (h & 0x7fff) == 0x7bff ? (h & 0x8000 ? -65536.0f : 65536.0f)
                                                : vt_ref_f16_to_f32((uint16_t)(h + 1));
            float mid = (float)(((double)v + (double)next) / 2);
            probes[np++] = mid;
            probes[np++] = nextafterf(mid, INFINITY);
            probes[np++] = nextafterf(mid, -INFINITY);
        }
        for (int k = 0; k < np; k++) {
            uint16_t a = vt_f32_to_f16(probes[k]), b = vt_ref_f32_to_f16(probes[k]);
            if (a != b && bad++ < 5) CHECK_MSG(0, "f32 %08x -> f16 %04x vs %04x", f2u(probes[k]), a, b);
        }
        if (!isnan(v)) CHECK_MSG(vt_f32_to_f16(v) == h, "round trip %04x", h);
    }
    for (int i = 0; i < 200000; i++) {
        float f = u2f((uint32_t)next_u64());
        uint16_t a = vt_f32_to_f16(f), b = vt_ref_f32_to_f16(f);
        if (a != b && bad++ < 5) CHECK_MSG(0, "random f32 %08x -> f16 %04x vs %04x", f2u(f), a, b);
    }
    CHECK(bad == 0);
    CHECK(vt_f32_to_f16(65520.0f) == 0x7c00);   /* tie to even rounds up to inf */
    CHECK(vt_f32_to_f16(65519.996f) == 0x7bff);
    CHECK(vt_f32_to_f16(0x1p-25f) == 0x0000);   /* tie to even: zero */
    CHECK(vt_f32_to_f16(0x1.8p-25f) == 0x0001);
    CHECK(vt_f32_to_f16(-NAN) == 0xfe00);
}

TEST(kernels_f32_to_bf16_exhaustive) {
    static const uint32_t lows[] = {0x0000, 0x8000, 0x7fff, 0x8001, 0xffff, 0x0001};
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        for (size_t k = 0; k < sizeof lows / sizeof lows[0] + 1; k++) {
            uint32_t low = k < sizeof lows / sizeof lows[0] ? lows[k] : (uint32_t)next_u64() & 0xffff;
            float f = u2f((h << 16) | low);
            uint16_t a = vt_f32_to_bf16(f), b = vt_ref_f32_to_bf16(f);
            if (a != b && bad++ < 5) CHECK_MSG(0, "f32 %08x -> bf16 %04x vs %04x", f2u(f), a, b);
        }
        float v = vt_bf16_to_f32((uint16_t)h);
        if (!isnan(v)) CHECK(vt_f32_to_bf16(v) == h);
    }
    CHECK(bad == 0);
}

/* Float -> int follows x86-64: NaN / out of range become INT_MIN, narrow
 * types keep the low bits of the int32 result. */
TEST(kernels_copy_float_to_int_edges) {
    struct { double v; vt_dtype dt; int64_t want; } cases[] = {
        {NAN, VT_I32, INT32_MIN}, {3e9, VT_I32, INT32_MIN}, {-3e9, VT_I32, INT32_MIN},
        {NAN, VT_I64, INT64_MIN}, {1e20, VT_I64, INT64_MIN}, {3e9, VT_I8, 0},
        {-1.0, VT_U8, 255},       {300.0, VT_U8, 44},       {-2.7, VT_I16, -2},
        {2.9, VT_I8, 2},          {-129.0, VT_I8, 127},     {0x1p32 + 5, VT_I8, 0},
        {NAN, VT_BOOL, 1},        {-0.0, VT_BOOL, 0},       {0.25, VT_BOOL, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t one = 1, got = 0;
        host_tensor src = ht_new(VT_F64, 1, &one), dst = ht_new(cases[i].dt, 1, &one);
        memcpy(src.block, &cases[i].v, 8);
        CHECK_OK(vt_copy(&dst.t, &src.t));
        vt_convert(cases[i].dt, dst.block, 1, VT_I64, &got, 1, 1);
        CHECK_MSG(got == cases[i].want, "%g -> %s: %lld, want %lld", cases[i].v, vt_dtype_name(cases[i].dt),
                  (long long)got, (long long)cases[i].want);
        CHECK_OK(vt_ref_copy(&dst.t, &src.t));
        vt_convert(cases[i].dt, dst.block, 1, VT_I64, &got, 1, 1);
        CHECK_MSG(got == cases[i].want, "ref %g -> %s: %lld", cases[i].v, vt_dtype_name(cases[i].dt),
                  (long long)got);
        ht_free(&src);
        ht_free(&dst);
    }
    /* int64 -> float rounds once (not via double). */
    int64_t big = (1LL << 53) + 1 + (1LL << 30), one = 1;
    host_tensor s = ht_new(VT_I64, 1, &one), d = ht_new(VT_F32, 1, &one);
    memcpy(s.block, &big, 8);
    CHECK_OK(vt_copy(&d.t, &s.t));
    CHECK(*(float *)d.block == (float)big);
    ht_free(&s);
    ht_free(&d);
}

static void copy_case(vt_dtype from, vt_dtype to, host_tensor *src, host_tensor *dst, const char *layout) {
    host_tensor ref = ht_new(to, dst->t.ndim, dst->t.sizes);
    ht_fill_random(src, 1, 0);
    CHECK_OK(vt_copy(&dst->t, &src->t));
    CHECK_OK(vt_ref_copy(&ref.t, &src->t));
    char what[96];
    snprintf(what, sizeof what, "copy %s -> %s %s n=%lld", vt_dtype_name(from), vt_dtype_name(to), layout,
             (long long)vt_tensor_numel(&dst->t));
    CHECK(ht_compare(what, &dst->t, &ref.t, -1) == 0);
    ht_free(&ref);
}

TEST(kernels_copy_all_dtype_pairs) {
    for (int f = 0; f < VT_DTYPE_COUNT; f++) {
        for (int t = 0; t < VT_DTYPE_COUNT; t++) {
            for (size_t k = 0; k < N_AWKWARD; k++) {
                int64_t n = awkward_sizes[k];
                if (n > 1000 && !(f == t || (f == VT_F32 && t == VT_BF16) || (f == VT_I64 && t == VT_F32)))
                    continue;
                host_tensor src = ht_1d((vt_dtype)f, n), dst = ht_1d((vt_dtype)t, n);
                copy_case((vt_dtype)f, (vt_dtype)t, &src, &dst, "contiguous");
                ht_free(&src);
                ht_free(&dst);
            }
            /* Strided source into strided destination. */
            host_tensor ss = ht_strided((vt_dtype)f, 257, 3), ds = ht_strided((vt_dtype)t, 257, 2);
            copy_case((vt_dtype)f, (vt_dtype)t, &ss, &ds, "strided");
            ht_free(&ss);
            ht_free(&ds);
            /* Transposed source. */
            host_tensor ts = ht_transposed((vt_dtype)f, 33, 17);
            int64_t shape[2] = {33, 17};
            host_tensor td = ht_new((vt_dtype)t, 2, shape);
            copy_case((vt_dtype)f, (vt_dtype)t, &ts, &td, "transposed");
            ht_free(&ts);
            ht_free(&td);
        }
    }
}

TEST(kernels_copy_broadcast_and_large) {
    /* A row broadcast down 1000 rows, and a column across 31 columns. */
    int64_t rs[2] = {1, 31}, cs[2] = {1000, 1}, os[2] = {1000, 31};
    host_tensor row = ht_new(VT_F32, 2, rs), col = ht_new(VT_I16, 2, cs);
    host_tensor out = ht_new(VT_F64, 2, os), ref = ht_new(VT_F64, 2, os);
    ht_fill_random(&row, 0, 0);
    ht_fill_random(&col, 0, 0);
    CHECK_OK(vt_copy(&out.t, &row.t));
    CHECK_OK(vt_ref_copy(&ref.t, &row.t));
    CHECK(ht_compare("broadcast row", &out.t, &ref.t, -1) == 0);
    CHECK_OK(vt_copy(&out.t, &col.t));
    CHECK_OK(vt_ref_copy(&ref.t, &col.t));
    CHECK(ht_compare("broadcast col", &out.t, &ref.t, -1) == 0);
    /* A 0-dim source fills everything. */
    host_tensor sc = ht_new(VT_F32, 0, NULL);
    *(float *)sc.block = 2.5f;
    CHECK_OK(vt_copy(&out.t, &sc.t));
    CHECK(((double *)out.block)[1000 * 31 - 1] == 2.5);
    /* Not broadcastable. */
    int64_t bad[2] = {3, 31};
    host_tensor b = ht_new(VT_F32, 2, bad);
    CHECK_STATUS(vt_copy(&out.t, &b.t), VT_ERR_INVALID_ARGUMENT);
    /* Large: parallel memcpy and parallel conversion, then in place. */
    int64_t n = 1 << 20;
    host_tensor big = ht_1d(VT_F32, n), big2 = ht_1d(VT_F32, n), bigh = ht_1d(VT_F16, n);
    ht_fill_random(&big, 1, 0);
    CHECK_OK(vt_copy(&big2.t, &big.t));
    CHECK(memcmp(big.block, big2.block, (size_t)n * 4) == 0);
    CHECK_OK(vt_copy(&bigh.t, &big.t));
    for (int64_t i = 0; i < n; i += 4099)
        CHECK(((uint16_t *)bigh.block)[i] == vt_ref_f32_to_f16(((float *)big.block)[i]));
    CHECK_OK(vt_copy(&big.t, &big.t));
    CHECK(memcmp(big.block, big2.block, (size_t)n * 4) == 0);
    ht_free(&row); ht_free(&col); ht_free(&out); ht_free(&ref); ht_free(&sc); ht_free(&b);
    ht_free(&big); ht_free(&big2); ht_free(&bigh);
}

/* Copies whose source runs across the destination's rows (a permuted
 * .contiguous(), a transposed and reversed weight): vt_copy walks them in
 * 16 x 16 tiles. Every element size, reversed dims, sizes off the tile,
 * a transpose big enough to split between threads mid-row; against the
 * reference copy, bit for bit. */
static void transposes_in_tiles(void) {
    static const vt_dtype dts[] = {VT_I8, VT_BF16, VT_F32, VT_F64, VT_I64};
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        vt_dtype dt = dts[d];
        /* src storage [A][B][C][D] = [5][19][3][37]; the copy's view is
         * [B][C reversed][D][A]-ordered dims (a permute + flip) */
        int64_t st[4] = {5, 19, 3, 37};
        host_tensor src = ht_new(dt, 4, st);
        ht_fill_random(&src, 0, 0);
        vt_tensor v = src.t;
        int64_t ss[4] = {19 * 3 * 37, 3 * 37, 37, 1};
        v.sizes[0] = 19, v.strides[0] = ss[1];
        v.sizes[1] = 3, v.strides[1] = -ss[2];
        v.offset = src.t.offset + 2 * ss[2];
        v.sizes[2] = 37, v.strides[2] = ss[3];
        v.sizes[3] = 5, v.strides[3] = ss[0];
        int64_t ds[4] = {19, 3, 37, 5};
        host_tensor out = ht_new(dt, 4, ds), ref = ht_new(dt, 4, ds);
        CHECK_OK(vt_copy(&out.t, &v));
        CHECK_OK(vt_ref_copy(&ref.t, &v));
        CHECK(ht_compare(vt_dtype_name(dt), &out.t, &ref.t, -1) == 0);
        /* a channels-last destination of the same values: dst's unit dim is
         * not its last */
        host_tensor cl = ht_new(dt, 4, ds);
        cl.t.strides[3] = 1, cl.t.strides[2] = 5, cl.t.strides[1] = 5 * 37, cl.t.strides[0] = 5 * 37 * 3;
        CHECK_OK(vt_copy(&cl.t, &v));
        CHECK(ht_compare("channels-last dst", &cl.t, &ref.t, -1) == 0);
        ht_free(&src), ht_free(&out), ht_free(&ref), ht_free(&cl);
        /* 700 x 1300 transposed into rows: several threads' ranges */
        host_tensor big = ht_transposed(dt, 700, 1300);
        ht_fill_random(&big, 0, 0);
        int64_t bs[2] = {700, 1300};
        host_tensor bo = ht_new(dt, 2, bs), br = ht_new(dt, 2, bs);
        CHECK_OK(vt_copy(&bo.t, &big.t));
        CHECK_OK(vt_ref_copy(&br.t, &big.t));
        CHECK(ht_compare("700x1300 transpose", &bo.t, &br.t, -1) == 0);
        /* whole tiles only, into rows of a wider (strided) destination */
        host_tensor sq = ht_transposed(dt, 64, 48);
        ht_fill_random(&sq, 0, 0);
        int64_t ws[2] = {64, 50};
        host_tensor wide = ht_new(dt, 2, ws), wref = ht_new(dt, 2, ws);
        vt_tensor wv = wide.t, wr = wref.t;
        wv.sizes[1] = wr.sizes[1] = 48;
        CHECK_OK(vt_copy(&wv, &sq.t));
        CHECK_OK(vt_ref_copy(&wr, &sq.t));
        CHECK(ht_compare("64x48 into rows of 50", &wv, &wr, -1) == 0);
        ht_free(&big), ht_free(&bo), ht_free(&br), ht_free(&sq), ht_free(&wide), ht_free(&wref);
        /* tiles short in both dims: an NCHW conv weight [5][37][9] copied
         * as [5][9][37] (9 rows a tile), and a 3 x 5 transpose */
        int64_t ks[3] = {5, 37, 9};
        host_tensor kw = ht_new(dt, 3, ks);
        ht_fill_random(&kw, 0, 0);
        vt_tensor kv = kw.t;
        kv.sizes[1] = 9, kv.strides[1] = 1, kv.sizes[2] = 37, kv.strides[2] = 9;
        /* into a view of a [5][10][40] block: what lies around it must stay */
        int64_t kd[3] = {5, 10, 40};
        host_tensor ko = ht_new(dt, 3, kd), kr = ht_new(dt, 3, kd);
        ht_fill_random(&ko, 0, 0);
        CHECK_OK(vt_copy(&kr.t, &ko.t));
        vt_tensor kov = ko.t, krv = kr.t;
        kov.sizes[1] = krv.sizes[1] = 9, kov.sizes[2] = krv.sizes[2] = 37;
        CHECK_OK(vt_copy(&kov, &kv));
        CHECK_OK(vt_ref_copy(&krv, &kv));
        CHECK(ht_compare("[5][37][9] as [5][9][37]", &ko.t, &kr.t, -1) == 0);
        host_tensor tiny = ht_transposed(dt, 3, 5);
        ht_fill_random(&tiny, 0, 0);
        int64_t ts[2] = {3, 5};
        host_tensor to = ht_new(dt, 2, ts), tr = ht_new(dt, 2, ts);
        CHECK_OK(vt_copy(&to.t, &tiny.t));
        CHECK_OK(vt_ref_copy(&tr.t, &tiny.t));
        CHECK(ht_compare("3x5 transpose", &to.t, &tr.t, -1) == 0);
        ht_free(&kw), ht_free(&ko), ht_free(&kr), ht_free(&tiny), ht_free(&to), ht_free(&tr);
    }
}

/* On every ISA the host has: AVX-512 moves whole tiles in registers. */
TEST(kernels_copy_transposes_in_tiles) {
    unsigned active = vt_isa_active();
    unsigned masks[3] = {0, VT_ISA_AVX2, active};
    for (int m = 0; m < 3; m++) {
        if ((masks[m] & vt_isa_available()) != masks[m]) continue;
        vt_isa_force(masks[m]);
        transposes_in_tiles();
    }
    vt_isa_force(active);
}

/* A copy between views of one layout whose unit-stride dim is not the
 * last (channels-last: a bordered buffer's interior, a phase's positions
 * stepping 2, a converting copy, a broadcast source) walks dst's memory
 * order, and so does a fill of such a view: every element lands where the
 * reference copy puts it, and the bytes around the views stay. */
TEST(kernels_copy_and_fill_channels_last_views) {
    const int64_t N = 3, C = 19, H = 7, W = 6, B = 2; /* B: border each side */
    const int64_t E1 = H + 2 * B, E2 = W + 2 * B;
    const vt_dtype dts[2][2] = {{VT_BF16, VT_BF16}, {VT_F32, VT_BF16}};
    for (int k = 0; k < 2; k++)
        for (int step = 1; step <= 2; step++)
            for (int bcast = 0; bcast < 2; bcast++) {
                int64_t ssz[4] = {N, C, H, W};
                host_tensor src = ht_new(dts[k][0], 4, ssz);
                src.t.strides[1] = 1, src.t.strides[3] = C, src.t.strides[2] = W * C, src.t.strides[0] = H * W * C;
                ht_fill_random(&src, 1, 0);
                if (bcast) src.t.strides[0] = 0; /* every image the first one's */
                int64_t bsz[4] = {N, C, E1 * step, E2 * step};
                host_tensor big = ht_new(dts[k][1], 4, bsz), ref = ht_new(dts[k][1], 4, bsz);
                memset(big.block, 0x5a, big.bytes);
                memset(ref.block, 0x5a, ref.bytes);
                for (int r = 0; r < 2; r++) {
                    host_tensor *h = r ? &ref : &big;
                    h->t.strides[1] = 1, h->t.strides[3] = C, h->t.strides[2] = E2 * step * C;
                    h->t.strides[0] = E1 * step * E2 * step * C;
                    h->t.offset = B * h->t.strides[2] + B * h->t.strides[3];
                    for (int d = 0; d < 4; d++) h->t.sizes[d] = ssz[d];
                    h->t.strides[2] *= step, h->t.strides[3] *= step;
                }
                CHECK_OK(vt_copy(&big.t, &src.t));
                CHECK_OK(vt_ref_copy(&ref.t, &src.t));
                CHECK_MSG(memcmp(big.block, ref.block, big.bytes) == 0, "dtypes %d step %d broadcast %d", k, step,
                          bcast);
                /* a fill of the same view (vt_fill walks its memory order too) */
                host_tensor one = ht_new(VT_F64, 0, NULL);
                *(double *)one.block = -1.5;
                CHECK_OK(vt_fill(&big.t, vt_scalar_from_double(-1.5)));
                CHECK_OK(vt_ref_copy(&ref.t, &one.t));
                CHECK_MSG(memcmp(big.block, ref.block, big.bytes) == 0, "fill: dtypes %d step %d", k, step);
                ht_free(&one);
                ht_free(&src); ht_free(&big); ht_free(&ref);
            }
}

TEST(kernels_fill) {
    for (int t = 0; t < VT_DTYPE_COUNT; t++) {
        host_tensor s = ht_strided((vt_dtype)t, 1000, 3);
        CHECK_OK(vt_fill(&s.t, vt_scalar_from_double(-2.75)));
        host_tensor one = ht_new(VT_F64, 0, NULL), want = ht_new((vt_dtype)t, 0, NULL);
        *(double *)one.block = -2.75;
        CHECK_OK(vt_ref_copy(&want.t, &one.t));
        size_t es = vt_dtype_size((vt_dtype)t);
        for (int64_t i = 0; i < 1000; i++)
            CHECK(memcmp((char *)s.block + (3 + 3 * i) * (int64_t)es, want.block, es) == 0);
        CHECK_OK(vt_fill(&s.t, vt_scalar_from_int(7)));
        int64_t got;
        vt_convert((vt_dtype)t, (char *)s.block + (3 + 3 * 999) * (int64_t)es, 1, VT_I64, &got, 1, 1);
        CHECK(got == (t == VT_BOOL ? 1 : 7));
        ht_free(&s); ht_free(&one); ht_free(&want);
    }
    host_tensor big = ht_1d(VT_U8, 100003);
    CHECK_OK(vt_fill(&big.t, vt_scalar_from_int(0x1ff)));
    CHECK(((uint8_t *)big.block)[100002] == 0xff && ((uint8_t *)big.block)[0] == 0xff);
    ht_free(&big);
}

/* Contiguous fills of every width: uniform bytes (memset) and patterns,
 * lengths around the 4 KiB pattern block, starting 0-3 elements past an
 * aligned address (elements before the first 8-aligned one are written one
 * by one), with the bytes before and after untouched. */
TEST(kernels_fill_contiguous_lengths) {
    static const int64_t lens[] = {1, 2, 3, 7, 511, 512, 1023, 1024, 1025, 2047, 2049, 4099, 70001};
    for (int t = 0; t < VT_DTYPE_COUNT; t++) {
        size_t es = vt_dtype_size((vt_dtype)t);
        for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
            for (int64_t off = 0; off < 4; off++) {
                int64_t n = lens[l];
                host_tensor buf = ht_1d((vt_dtype)t, n + 12);
                memset(buf.block, 0x5a, (size_t)(n + 12) * es);
                host_tensor head = buf;
                head.t.sizes[0] = n;
                head.t.offset = off;
                for (int v = 0; v < 2; v++) {
                    double value = v ? 0.0 : -2.75;
                    CHECK_OK(vt_fill(&head.t, vt_scalar_from_double(value)));
                    host_tensor one = ht_new(VT_F64, 0, NULL), want = ht_new((vt_dtype)t, 0, NULL);
                    *(double *)one.block = value;
                    CHECK_OK(vt_ref_copy(&want.t, &one.t));
                    int bad = 0;
                    for (int64_t i = 0; i < n; i++)
                        bad += memcmp((char *)buf.block + (off + i) * (int64_t)es, want.block, es) != 0;
                    CHECK_MSG(bad == 0, "dtype %d n %lld offset %lld value %g: %d wrong", t, (long long)n,
                              (long long)off, value, bad);
                    for (size_t b = 0; b < off * es; b++) CHECK(((unsigned char *)buf.block)[b] == 0x5a);
                    for (size_t b = 0; b < 8 * es; b++)
                        CHECK(((unsigned char *)buf.block)[(off + n) * (int64_t)es + b] == 0x5a);
                    ht_free(&one); ht_free(&want);
                }
                ht_free(&buf);
            }
        }
    }
}

/* vt_convert's contiguous bf16 <-> f32 paths (every ISA) against the scalar
 * conversions: every bf16 value, and floats at ties, NaNs, infinities and
 * random bits, at lengths that exercise the vector tails. */
TEST(kernels_convert_bf16_paths) {
    enum { N = 65536 + 37 };
    uint16_t *h = malloc(N * 2), *h2 = malloc((N + 1) * 2);
    float *f = malloc(N * 4), *f2 = malloc((N + 1) * 4);
    for (int i = 0; i < N; i++) h[i] = (uint16_t)(i * 40503u);
    for (int i = 0; i < N; i++) {
        uint32_t u = (uint32_t)next_u64();
        if (i % 5 == 0) u = (u & 0xffff0000u) | 0x8000u; /* exact tie */
        if (i % 97 == 0) u = 0x7f800001u + (u & 0x3fffff); /* signalling NaNs */
        if (i % 101 == 0) u = 0xff800000u;
        f[i] = u2f(u);
    }
    unsigned active = vt_isa_active();
    unsigned masks[4] = {0, VT_ISA_AVX2, VT_ISA_AVX2 | VT_ISA_AVX512, active}; /* active: AVX512-BF16 where there */
    for (int m = 0; m < 4; m++) {
        if ((masks[m] & vt_isa_available()) != masks[m]) continue;
        vt_isa_force(masks[m]);
        static const int64_t lens[] = {N, 1, 15, 16, 17, 31, 33, 1000};
        for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
            int64_t n = lens[l];
            memset(f2, 0xee, (N + 1) * 4);
            memset(h2, 0xee, (N + 1) * 2);
            vt_convert(VT_BF16, h, 1, VT_F32, f2, 1, n);
            vt_convert(VT_F32, f, 1, VT_BF16, h2, 1, n);
            int bad = 0;
            for (int64_t i = 0; i < n; i++) {
                float want = vt_bf16_to_f32(h[i]);
                bad += memcmp(&f2[i], &want, 4) != 0;
                bad += h2[i] != vt_ref_f32_to_bf16(f[i]);
            }
            CHECK_MSG(bad == 0, "isa mask %x n %lld: %d wrong", masks[m], (long long)n, bad);
            CHECK(h2[n] == 0xeeee && f2u(f2[n]) == 0xeeeeeeeeu);
        }
    }
    vt_isa_force(active);
    free(h), free(h2), free(f), free(f2);
}

/* vt_accumulate_* (index_add's rows, every ISA) against the scalar loop:
 * d + alpha * s, a multiply then an add, and for bf16 one rounding of the
 * f32 result. Random bits with ties, NaNs, infinities, subnormals and
 * values whose sum overflows, at lengths that exercise the vector tails. */
TEST(kernels_accumulate_rows) {
    enum { N = 1000 };
    float *f = malloc(N * 4), *fs = malloc(N * 4), *fd = malloc((N + 1) * 4);
    uint16_t *h = malloc(N * 2), *hs = malloc(N * 2), *hd = malloc((N + 1) * 2);
    for (int i = 0; i < N; i++) {
        uint32_t u = (uint32_t)next_u64(), v = (uint32_t)next_u64();
        if (i % 7 == 0) u = (u & 0x807fffffu) | 0x3f800000u, v = (v & 0x807fffffu) | 0x3f800000u; /* near 1: ties after rounding */
        if (i % 11 == 0) u &= 0x807fffffu;                                                   /* subnormal */
        if (i % 13 == 0) u = 0x7f7fffffu, v = 0x7f7fffffu;                                   /* overflow */
        if (i % 17 == 0) u = 0x7fc00001u + (u & 0xffff);                                     /* NaN */
        if (i % 19 == 0) v = 0xff800000u;                                                    /* -inf */
        f[i] = u2f(u), fs[i] = u2f(v);
        h[i] = (uint16_t)(u >> 16), hs[i] = (uint16_t)(v >> 16);
    }
    static const float alphas[] = {1.0f, -1.0f, 0.5f, 3.0f, -2.75f};
    static const int64_t lens[] = {0, 1, 3, 4, 5, 15, 16, 17, 31, 33, N};
    unsigned active = vt_isa_active();
    unsigned masks[3] = {0, VT_ISA_AVX2, active};
    for (int m = 0; m < 3; m++) {
        if ((masks[m] & vt_isa_available()) != masks[m]) continue;
        vt_isa_force(masks[m]);
        for (size_t a = 0; a < sizeof alphas / sizeof alphas[0]; a++)
            for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
                const int64_t n = lens[l];
                const float al = alphas[a];
                memcpy(fd, f, N * 4), memcpy(hd, h, N * 2);
                fd[n] = u2f(0xeeeeeeeeu), hd[n] = 0xeeee;
                vt_accumulate_f32(fd, fs, n, al);
                vt_accumulate_bf16(hd, hs, n, al);
                int bad = 0;
                for (int64_t i = 0; i < n; i++) {
                    const float p = al * fs[i], want = f[i] + p;
                    bad += memcmp(&fd[i], &want, 4) != 0;
                    const float q = al * vt_bf16_to_f32(hs[i]), wide = vt_bf16_to_f32(h[i]) + q;
                    bad += hd[i] != vt_ref_f32_to_bf16(wide);
                }
                CHECK_MSG(bad == 0, "isa mask %x alpha %g n %lld: %d wrong", masks[m], al, (long long)n, bad);
                CHECK(f2u(fd[n]) == 0xeeeeeeeeu && hd[n] == 0xeeee);
            }
    }
    vt_isa_force(active);
    free(f), free(fs), free(fd), free(h), free(hs), free(hd);
}
