/* test_runtime_access.c — the check every queued op goes through: view
 * geometry as PyTorch defines it, the overlap rules (refused where CPU
 * PyTorch refuses, copied where a kernel cannot read what it writes),
 * and device residency (host memory, another device's memory, freed
 * memory are refused). */
#include <math.h>
#include <stdlib.h>

#include "test_runtime_util.h"


static void begin(void) {
    CHECK_OK(vt_init());
    vt_set_thread_eager_mode(VT_EAGER_STRICT);
    CHECK_OK(vt_synchronize(0));
}

static void end(void) {
    CHECK_OK(vt_synchronize(0));
    vt_set_thread_eager_mode(-1);
}

static const char kPartial[] = "unsupported operation: some elements of the input tensor and the written-to tensor "
                               "refer to a single memory location. Please clone() the tensor before performing the "
                               "operation.";
static const char kInternal[] = "unsupported operation: more than one element of the written-to tensor refers to a "
                                "single memory location. Please clone() the tensor before performing the operation.";

TEST(access_view_geometry_as_pytorch) {
    static float buf[64];
    int64_t s23[2] = {2, 3}, c23[2] = {3, 1}, t23[2] = {1, 2}, e4[1] = {4}, z[1] = {0}, g23[2] = {4, 1};
    vt_tensor contig = view(buf, VT_F32, 2, s23, c23, 0);
    vt_tensor transposed = view(buf, VT_F32, 2, s23, t23, 0);
    vt_tensor expanded = view(buf, VT_F32, 1, e4, z, 0);
    vt_tensor gappy = view(buf, VT_F32, 2, s23, g23, 0);
    CHECK(vt_view_is_dense(&contig) && vt_view_is_dense(&transposed));
    CHECK(!vt_view_is_dense(&expanded) && !vt_view_is_dense(&gappy));
    CHECK(vt_view_internal_overlap(&expanded) && !vt_view_internal_overlap(&gappy));
    /* size-1 dims may have any stride, as in PyTorch */
    int64_t s1[2] = {1, 5}, odd[2] = {99, 1};
    vt_tensor row = view(buf, VT_F32, 2, s1, odd, 0);
    CHECK(vt_view_is_dense(&row) && !vt_view_internal_overlap(&row));
    /* overlapping but not by a zero stride: PyTorch calls it too hard, not an overlap */
    int64_t s22[2] = {2, 2}, o11[2] = {1, 1};
    vt_tensor diag = view(buf, VT_F32, 2, s22, o11, 0);
    CHECK(!vt_view_internal_overlap(&diag));
    uintptr_t lo, hi;
    CHECK(vt_view_span(&transposed, &lo, &hi) && lo == (uintptr_t)buf && hi == (uintptr_t)(buf + 6));
    int64_t neg[1] = {-1}, n3[1] = {3};
    vt_tensor backwards = view(buf, VT_F32, 1, n3, neg, 5);
    CHECK(vt_view_span(&backwards, &lo, &hi) && lo == (uintptr_t)(buf + 3) && hi == (uintptr_t)(buf + 6));
    int64_t huge[1] = {INT64_MAX / 2};
    vt_tensor overflow = view(buf, VT_F32, 1, huge, e4, 0);
    CHECK(!vt_view_span(&overflow, &lo, &hi));
}

TEST(access_overlap_classification) {
    static float buf[64];
    vt_tensor all = vec(buf, VT_F32, 10), head = vec(buf, VT_F32, 9), tail = vec(buf + 1, VT_F32, 9);
    vt_tensor other = vec(buf + 20, VT_F32, 10), again = vec(buf, VT_F32, 10);
    CHECK(vt_view_overlap(&all, &again) == VT_OVERLAP_FULL);
    CHECK(vt_view_overlap(&head, &tail) == VT_OVERLAP_PARTIAL);
    CHECK(vt_view_overlap(&all, &head) == VT_OVERLAP_PARTIAL);
    CHECK(vt_view_overlap(&all, &other) == VT_OVERLAP_NO);
    /* x and x.t(): the same bytes, other strides */
    int64_t s33[2] = {3, 3}, c[2] = {3, 1}, t[2] = {1, 3};
    vt_tensor x = view(buf, VT_F32, 2, s33, c, 0), xt = view(buf, VT_F32, 2, s33, t, 0);
    CHECK(vt_view_overlap(&x, &xt) == VT_OVERLAP_PARTIAL);
    /* interleaved columns share no element */
    int64_t s32[2] = {3, 2}, st[2] = {4, 2};
    vt_tensor even = view(buf, VT_F32, 2, s32, st, 0), odd = view(buf, VT_F32, 2, s32, st, 1);
    CHECK(vt_view_overlap(&even, &odd) == VT_OVERLAP_NO);
    CHECK(vt_view_overlap(&even, &even) == VT_OVERLAP_FULL);
    /* strided views that do share elements: too hard to call, as PyTorch says */
    int64_t s22[2] = {3, 2}, st1[2] = {4, 1};
    vt_tensor a = view(buf, VT_F32, 2, s22, st1, 0), b = view(buf, VT_F32, 2, s22, st1, 1);
    CHECK(vt_view_overlap(&a, &b) == VT_OVERLAP_TOO_HARD);
    /* the two halves of each row of a 3 x 8 block (x[:, :4], x[:, 4:]) share
     * no element; shifted by a row, or by a row less one, they do */
    int64_t s34[2] = {3, 4}, r8[2] = {8, 1};
    vt_tensor left = view(buf, VT_F32, 2, s34, r8, 0), right = view(buf, VT_F32, 2, s34, r8, 4);
    vt_tensor down = view(buf, VT_F32, 2, s34, r8, 8), back = view(buf, VT_F32, 2, s34, r8, 7);
    CHECK(vt_view_overlap(&left, &right) == VT_OVERLAP_NO && vt_view_overlap(&right, &left) == VT_OVERLAP_NO);
    CHECK(vt_view_overlap(&left, &down) == VT_OVERLAP_TOO_HARD);
    CHECK(vt_view_overlap(&left, &back) == VT_OVERLAP_TOO_HARD); /* left[1][0] is back[0][1] */
    CHECK(vt_view_overlap(&right, &back) == VT_OVERLAP_TOO_HARD); /* right[0][3] is back[0][0] */
    /* strides 3 and 2 (elements 0, 2, 3, 5) shifted by one: both hold 3, found
     * only through a negative index difference in the outer dim */
    int64_t st32[2] = {3, 2}, s2x2[2] = {2, 2};
    vt_tensor p0 = view(buf, VT_F32, 2, s2x2, st32, 0), p1 = view(buf, VT_F32, 2, s2x2, st32, 1);
    CHECK(vt_view_overlap(&p0, &p1) == VT_OVERLAP_TOO_HARD);
    /* x[0::3] and x[3::3] share all but an end element, whichever starts first */
    int64_t n20[1] = {20}, s3[1] = {3};
    vt_tensor e0 = view(buf, VT_F32, 1, n20, s3, 0), e3 = view(buf, VT_F32, 1, n20, s3, 3);
    CHECK(vt_view_overlap(&e0, &e3) == VT_OVERLAP_TOO_HARD && vt_view_overlap(&e3, &e0) == VT_OVERLAP_TOO_HARD);
    /* empty views overlap nothing */
    vt_tensor none = vec(buf, VT_F32, 0);
    CHECK(vt_view_overlap(&none, &all) == VT_OVERLAP_NO);
}

/* NO is a proof: over random small views of one buffer (1 to 3 dims,
 * strides of either sign, f32, f64 and an f32 view against an f64 one),
 * whenever vt_view_overlap says NO the two views' bytes are disjoint, and
 * it says NO for most pairs that are (the shifted copies of one layout). */
TEST(access_overlap_no_is_never_wrong) {
    static double buf[512];
    static unsigned char hit[512 * 8];
    uint64_t seed = 12345;
    int nos = 0, shifted_apart = 0, shifted_no = 0;
    for (int trial = 0; trial < 20000; trial++) {
        vt_tensor v[2];
        const int same_layout = trial % 2;
        for (int w = 0; w < 2; w++) {
            int64_t sz[3], st[3];
            const int nd = 1 + (int)((seed = seed * 6364136223846793005ull + 1442695040888963407ull) >> 62) % 3;
            for (int d = 0; d < nd; d++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                sz[d] = 1 + (int64_t)(seed >> 60) % 5;
                st[d] = (int64_t)(seed >> 50) % 13 - 6;
            }
            const vt_dtype dt = trial % 7 == 3 && w ? VT_F64 : VT_F32;
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            const int64_t off = 100 + (int64_t)(seed >> 56) % 100;
            v[w] = same_layout && w ? v[0] : view(buf, dt, nd, sz, st, off);
            if (same_layout && w) v[1].offset = off;
        }
        memset(hit, 0, sizeof hit);
        int share = 0;
        for (int w = 0; w < 2 && !share; w++) {
            const vt_tensor *t = &v[w];
            const int64_t es = (int64_t)vt_dtype_size(t->dtype);
            int64_t n = vt_tensor_numel(t), idx[3] = {0, 0, 0};
            for (int64_t e = 0; e < n && !share; e++) {
                int64_t at = t->offset * es;
                for (int d = 0; d < t->ndim; d++) at += idx[d] * t->strides[d] * es;
                for (int64_t b = at; b < at + es; b++) share |= hit[b] == 1 && w == 1, hit[b] |= (unsigned char)(w + 1);
                for (int d = t->ndim - 1; d >= 0 && ++idx[d] == t->sizes[d]; d--) idx[d] = 0;
            }
        }
        const vt_overlap o = vt_view_overlap(&v[0], &v[1]);
        CHECK_MSG(!(o == VT_OVERLAP_NO && share), "trial %d: NO for views that share a byte", trial);
        nos += o == VT_OVERLAP_NO;
        if (same_layout && !share && v[0].offset != v[1].offset) shifted_apart++, shifted_no += o == VT_OVERLAP_NO;
    }
    CHECK_MSG(nos > 1000 && shifted_no * 2 > shifted_apart, "NO %d times; shifted apart %d, proven %d", nos,
              shifted_apart, shifted_no);
}

/* The rules of CPU PyTorch, on queued ops: a partial overlap and a written
 * view with repeated elements are refused with CPU's message; in place is
 * fine for elementwise ops; an op that may not overlap at all refuses even
 * in place; fill may write repeated elements. */
TEST(access_overlap_rules_on_queued_ops) {
    begin();
    float *d = dev_alloc_on(0, 64 * 4);
    vt_tensor x = vec(d, VT_F32, 10), head = vec(d, VT_F32, 9), tail = vec(d + 1, VT_F32, 9);
    vt_scalar two = vt_scalar_from_double(2.0), one = vt_scalar_from_int(1);
    CHECK_OK(vt_op_fill(0, "aten::fill_", &x, vt_scalar_from_double(1.0)));
    CHECK_OK(vt_op_binary(0, "aten::mul", VT_MUL, &x, &x, NULL, NULL, &two, VT_F32, one)); /* in place */
    CHECK_STATUS(vt_op_binary(0, "aten::mul", VT_MUL, &tail, &head, NULL, NULL, &two, VT_F32, one),
                 VT_ERR_INVALID_ARGUMENT);
    CHECK_MSG(!strcmp(vt_last_error(), kPartial), "got '%s'", vt_last_error());
    int64_t e4[1] = {4}, z[1] = {0};
    vt_tensor expanded = view(d + 30, VT_F32, 1, e4, z, 0), four = vec(d, VT_F32, 4);
    CHECK_STATUS(vt_op_unary(0, "aten::exp", VT_EXP, &expanded, &four, VT_F32), VT_ERR_INVALID_ARGUMENT);
    CHECK_MSG(!strcmp(vt_last_error(), kInternal), "got '%s'", vt_last_error());
    CHECK_OK(vt_op_fill(0, "aten::fill_", &expanded, vt_scalar_from_double(5.0)));
    int64_t idx_data[3] = {0, 1, 2};
    int64_t *di = dev_alloc_on(0, sizeof idx_data);
    vt_tensor hidx = vec(idx_data, VT_I64, 3), idx = vec(di, VT_I64, 3);
    CHECK_OK(vt_copy_to_device(0, &idx, &hidx));
    vt_tensor first3 = vec(d, VT_F32, 3);
    CHECK_STATUS(vt_op_index_select(0, "aten::index_select", &first3, &first3, 0, &idx), VT_ERR_INVALID_ARGUMENT);
    CHECK_MSG(!strcmp(vt_last_error(), kPartial), "got '%s'", vt_last_error());
    static float host[10];
    vt_tensor h = vec(host, VT_F32, 10);
    CHECK_OK(vt_copy_to_host(0, &h, &x));
    CHECK(host[0] == 2.0f && host[9] == 2.0f); /* the refused ops wrote nothing */
    vt_hbm_free(0, d);
    vt_hbm_free(0, di);
    end();
}

/* Kernels that cannot read what they write get a copy of the overlapping
 * input: the product of x with itself into x is the product of the
 * original x, at every size (CPU PyTorch gets large ones wrong). */
TEST(access_overlapping_inputs_are_copied) {
    begin();
    for (int n = 3; n <= 300; n += 297) {
        size_t bytes = (size_t)n * n * 4;
        float *d = dev_alloc_on(0, bytes), *orig = malloc(bytes), *got = malloc(bytes), *ref = malloc(bytes);
        for (int i = 0; i < n * n; i++) orig[i] = (float)((i * 7) % 11) - 5.0f;
        int64_t s[2] = {n, n}, c[2] = {n, 1};
        vt_tensor x = view(d, VT_F32, 2, s, c, 0), hx = view(orig, VT_F32, 2, s, c, 0);
        vt_tensor hg = view(got, VT_F32, 2, s, c, 0), hr = view(ref, VT_F32, 2, s, c, 0);
        CHECK_OK(vt_copy_to_device(0, &x, &hx));
        CHECK_OK(vt_op_matmul(0, "aten::mm", &x, &x, &x, NULL, 1.0, 0.0, VT_PRECISION_HIGHEST));
        CHECK_OK(vt_copy_to_host(0, &hg, &x));
        CHECK_OK(vt_ref_matmul(&hr, &hx, &hx, NULL, 1.0, 0.0, VT_PRECISION_HIGHEST));
        int bad = 0;
        for (int i = 0; i < n * n; i++) bad += got[i] != ref[i];
        CHECK_MSG(bad == 0, "n=%d: %d of %d differ", n, bad, n * n);
        vt_hbm_free(0, d);
        free(orig), free(got), free(ref);
    }
    /* an elementwise op whose input overlaps its output in a way PyTorch
     * cannot classify (x[0:1].expand(4) added into x) reads the original */
    float *d = dev_alloc_on(0, 4 * 4);
    static float src[4] = {1, 2, 3, 4}, out[4];
    vt_tensor x = vec(d, VT_F32, 4), hs = vec(src, VT_F32, 4), ho = vec(out, VT_F32, 4);
    int64_t e4[1] = {4}, z[1] = {0};
    vt_tensor first = view(d, VT_F32, 1, e4, z, 0);
    CHECK_OK(vt_copy_to_device(0, &x, &hs));
    CHECK_OK(vt_op_binary(0, "aten::add", VT_ADD, &x, &x, NULL, &first, NULL, VT_F32, vt_scalar_from_int(1)));
    CHECK_OK(vt_copy_to_host(0, &ho, &x));
    CHECK_MSG(out[0] == 2 && out[1] == 3 && out[2] == 4 && out[3] == 5, "got %g %g %g %g", out[0], out[1], out[2],
              out[3]);
    vt_hbm_free(0, d);
    end();
}

/* Queued ops take device memory of their own device only. */
TEST(access_device_residency) {
    begin();
    CHECK(vt_device_count() >= 2); /* the runner sets VTPU_NUM_DEVICES=2 */
    float *d0 = dev_alloc_on(0, 16 * 4), *d1 = dev_alloc_on(1, 16 * 4);
    static float host[16];
    vt_tensor a = vec(d0, VT_F32, 16), b = vec(d1, VT_F32, 16), h = vec(host, VT_F32, 16);
    vt_scalar one = vt_scalar_from_int(1);
    CHECK_STATUS(vt_op_binary(0, "aten::add", VT_ADD, &h, &a, NULL, &a, NULL, VT_F32, one), VT_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(vt_last_error(), "found at least two devices, tpu:0 and cpu!"), "got '%s'", vt_last_error());
    CHECK_STATUS(vt_op_binary(0, "aten::add", VT_ADD, &a, &a, NULL, &b, NULL, VT_F32, one), VT_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(vt_last_error(), "found at least two devices, tpu:0 and tpu:1!"), "got '%s'", vt_last_error());
    /* a view past the end of its allocation, and a freed block */
    vt_tensor past = vec(d0 + 8, VT_F32, 16);
    CHECK_STATUS(vt_op_fill(0, "aten::fill_", &past, one), VT_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(vt_last_error(), "outside its allocation"), "got '%s'", vt_last_error());
    vt_hbm_free(1, d1);
    vt_tensor stale = vec(d1, VT_F32, 16);
    CHECK_STATUS(vt_op_fill(1, "aten::fill_", &stale, one), VT_ERR_INVALID_ARGUMENT);
    vt_hbm_free(0, d0);
    end();
}

/* A copy from one device to another is ordered on both queues: the source
 * device runs nothing after the copy until the copy has read (here a
 * write to the source and a reuse of its freed block, queued while the
 * destination device is held by a gate). */
TEST(access_cross_device_copy_is_ordered_on_both_queues) {
    begin();
    const int n = 1 << 14;
    for (int round = 0; round < 20; round++) {
        float *s0 = dev_alloc_on(0, (size_t)n * 4), *d1 = dev_alloc_on(1, (size_t)n * 4);
        vt_tensor src = vec(s0, VT_F32, n), dst = vec(d1, VT_F32, n);
        CHECK_OK(vt_op_fill(0, "aten::fill_", &src, vt_scalar_from_double(3.0)));
        CHECK_OK(vt_debug_gate_enqueue(1, 30000));
        CHECK_OK(vt_op_copy(1, "aten::copy_", &dst, &src));
        if (round & 1) {
            CHECK_OK(vt_op_fill(0, "aten::fill_", &src, vt_scalar_from_double(-1.0)));
        } else {
            vt_hbm_free(0, s0); /* the block is handed out again at once */
            s0 = dev_alloc_on(0, (size_t)n * 4);
            vt_tensor reuse = vec(s0, VT_F32, n);
            CHECK_OK(vt_op_fill(0, "aten::fill_", &reuse, vt_scalar_from_double(-7.0)));
        }
        vt_debug_gate_open();
        float *host = malloc((size_t)n * 4);
        vt_tensor h = vec(host, VT_F32, n);
        CHECK_OK(vt_copy_to_host(1, &h, &dst));
        int bad = 0;
        for (int i = 0; i < n; i++) bad += host[i] != 3.0f;
        CHECK_MSG(bad == 0, "round %d: %d elements of the copy are not the source's", round, bad);
        free(host);
        vt_hbm_free(0, s0);
        vt_hbm_free(1, d1);
    }
    CHECK_OK(vt_synchronize(1));
    end();
}
