/* test_kernels_index.c — the indexing kernels against their scalar
 * references: every dtype, awkward sizes, transposed and strided views,
 * int32 and int64 indices, duplicates, empty tensors, out-of-range errors
 * (and that nothing outside the destination changed), and the queued ops. */
#include "kernels/index/index.h"
#include "test_kernels_util.h"

static const vt_dtype all_dtypes[] = {VT_F32, VT_BF16, VT_F16, VT_F64, VT_I8, VT_U8, VT_I16, VT_I32, VT_I64, VT_BOOL};
#define N_DTYPES (sizeof all_dtypes / sizeof all_dtypes[0])

/* Index values in [0, bound) (in [-bound, bound) when neg). */
static void fill_index(host_tensor *h, int64_t bound, int neg) {
    int64_t n = vt_tensor_numel(&h->t) ? ht_block_elems(h) : 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t v = bound ? (int64_t)(next_u64() % (uint64_t)(neg ? 2 * bound : bound)) - (neg ? bound : 0) : 0;
        vt_convert(VT_I64, &v, 1, h->t.dtype, (char *)h->block + i * (int64_t)vt_dtype_size(h->t.dtype), 1, 1);
    }
}

static void set_index(host_tensor *h, int64_t lin, int64_t v) {
    int64_t off = ix_offset_of(&h->t, lin);
    vt_convert(VT_I64, &v, 1, h->t.dtype, (char *)h->block + off * (int64_t)vt_dtype_size(h->t.dtype), 1, 1);
}

static host_tensor clone_block(const host_tensor *h) {
    host_tensor c = *h;
    size_t bytes = (size_t)ht_block_elems(h) * vt_dtype_size(h->t.dtype);
    c.block = malloc(bytes ? bytes : 1);
    memcpy(c.block, h->block, bytes);
    c.t.data = c.block;
    c.bytes = bytes ? bytes : 1;
    c.on_device = 0;
    return c;
}

static int same_block(const host_tensor *a, const host_tensor *b) {
    return memcmp(a->block, b->block, (size_t)ht_block_elems(a) * vt_dtype_size(a->t.dtype)) == 0;
}

/* A 2-D [r, c] tensor, transposed storage when t. */
static host_tensor mat(vt_dtype dt, int64_t r, int64_t c, int t) {
    if (t) return ht_transposed(dt, r, c);
    int64_t s[2] = {r, c};
    return ht_new(dt, 2, s);
}

TEST(index_select_matches_reference) {
    const int64_t rows[] = {1, 7, 33}, cols[] = {1, 17, 300}, nidx[] = {0, 1, 19, 64};
    for (size_t k = 0; k < N_DTYPES; k++)
        for (size_t a = 0; a < 3; a++)
            for (size_t b = 0; b < 3; b++)
                for (size_t q = 0; q < 4; q++)
                    for (int dim = 0; dim < 2; dim++)
                        for (int tr = 0; tr < 2; tr++) {
                            vt_dtype dt = all_dtypes[k];
                            host_tensor in = mat(dt, rows[a], cols[b], tr);
                            ht_fill_random(&in, 1, 0);
                            host_tensor ix = ht_strided((q & 1) ? VT_I32 : VT_I64, nidx[q], 2);
                            fill_index(&ix, in.t.sizes[dim], 0);
                            int64_t os[2] = {rows[a], cols[b]};
                            os[dim] = nidx[q];
                            host_tensor o1 = ht_new(dt, 2, os), o2 = ht_new(dt, 2, os);
                            CHECK_OK(vt_index_select(&o1.t, &in.t, dim, &ix.t));
                            CHECK_OK(vt_ref_index_select(&o2.t, &in.t, dim, &ix.t));
                            CHECK(ht_compare("index_select", &o1.t, &o2.t, -1) == 0);
                            ht_free(&in), ht_free(&ix), ht_free(&o1), ht_free(&o2);
                        }
}

TEST(index_select_large_and_errors) {
    host_tensor w = mat(VT_F32, 1000, 512, 0);
    ht_fill_random(&w, 0, 0);
    host_tensor ix = ht_1d(VT_I64, 2048);
    fill_index(&ix, 1000, 0);
    int64_t os[2] = {2048, 512};
    host_tensor o1 = ht_new(VT_F32, 2, os), o2 = ht_new(VT_F32, 2, os);
    CHECK_OK(vt_index_select(&o1.t, &w.t, 0, &ix.t));
    CHECK_OK(vt_ref_index_select(&o2.t, &w.t, 0, &ix.t));
    CHECK(ht_compare("index_select large", &o1.t, &o2.t, -1) == 0);
    set_index(&ix, 1500, 1000);
    CHECK_STATUS(vt_index_select(&o1.t, &w.t, 0, &ix.t), VT_ERR_INDEX);
    CHECK(!strcmp(vt_last_error(), "index 1000 is out of bounds for dimension 0 with size 1000")); /* IndexError */
    set_index(&ix, 1500, -1);
    CHECK_STATUS(vt_index_select(&o1.t, &w.t, 0, &ix.t), VT_ERR_INDEX);
    CHECK(strstr(vt_last_error(), "index -1"));
    host_tensor bad = ht_1d(VT_F32, 3);
    CHECK_STATUS(vt_index_select(&o1.t, &w.t, 0, &bad.t), VT_ERR_INVALID_ARGUMENT);
    ht_free(&w), ht_free(&ix), ht_free(&o1), ht_free(&o2), ht_free(&bad);
}

TEST(gather_matches_reference) {
    const int64_t shapes[][3] = {{1, 1, 1}, {5, 7, 3}, {17, 1, 33}, {3, 300, 2}};
    for (size_t k = 0; k < N_DTYPES; k++)
        for (size_t sh = 0; sh < 4; sh++)
            for (int dim = 0; dim < 3; dim++) {
                vt_dtype dt = all_dtypes[k];
                host_tensor in = ht_new(dt, 3, shapes[sh]);
                ht_fill_random(&in, 1, 0);
                int64_t is[3] = {shapes[sh][0], shapes[sh][1], shapes[sh][2]};
                is[dim] = is[dim] * 2 + 1;
                if (dim != 2 && is[2] > 1) is[2] -= 1;
                host_tensor ix = ht_new(k & 1 ? VT_I32 : VT_I64, 3, is);
                fill_index(&ix, shapes[sh][dim], 0);
                host_tensor o1 = ht_new(dt, 3, is), o2 = ht_new(dt, 3, is);
                CHECK_OK(vt_gather(&o1.t, &in.t, dim, &ix.t));
                CHECK_OK(vt_ref_gather(&o2.t, &in.t, dim, &ix.t));
                CHECK(ht_compare("gather", &o1.t, &o2.t, -1) == 0);
                ht_free(&in), ht_free(&ix), ht_free(&o1), ht_free(&o2);
            }
    host_tensor in = mat(VT_F32, 300, 257, 1), ix = mat(VT_I64, 300, 100, 1);
    ht_fill_random(&in, 0, 0);
    fill_index(&ix, 257, 0);
    host_tensor o1 = mat(VT_F32, 300, 100, 0), o2 = mat(VT_F32, 300, 100, 0);
    CHECK_OK(vt_gather(&o1.t, &in.t, 1, &ix.t));
    CHECK_OK(vt_ref_gather(&o2.t, &in.t, 1, &ix.t));
    CHECK(ht_compare("gather transposed", &o1.t, &o2.t, -1) == 0);
    set_index(&ix, 2999, 257);
    CHECK_STATUS(vt_gather(&o1.t, &in.t, 1, &ix.t), VT_ERR_KERNEL); /* RuntimeError, as CPU */
    CHECK(!strcmp(vt_last_error(), "index 257 is out of bounds for dimension 1 with size 257"));
    ht_free(&in), ht_free(&ix), ht_free(&o1), ht_free(&o2);
}

TEST(scatter_all_reductions_match_reference) {
    const int64_t shapes[][2] = {{1, 1}, {9, 5}, {40, 33}, {3, 700}};
    for (size_t k = 0; k < N_DTYPES; k++)
        for (size_t sh = 0; sh < 4; sh++)
            for (int dim = 0; dim < 2; dim++)
                for (int op = VT_SCATTER_ASSIGN; op <= VT_SCATTER_AMIN; op++)
                    for (int incl = 0; incl < 2; incl++)
                        for (int use_value = 0; use_value < 2; use_value++) {
                            vt_dtype dt = all_dtypes[k];
                            int64_t os[2] = {shapes[sh][0], shapes[sh][1]};
                            host_tensor a = ht_new(dt, 2, os);
                            ht_fill_random(&a, 0, 0);
                            host_tensor b = clone_block(&a);
                            int64_t is[2] = {os[0], os[1]};
                            is[dim] = is[dim] * 3;
                            host_tensor src = mat(dt, is[0], is[1], sh & 1);
                            ht_fill_random(&src, 1, 0);
                            host_tensor ix = ht_new(VT_I64, 2, is);
                            fill_index(&ix, os[dim], 0);
                            vt_scalar v = vt_scalar_from_double(2.5);
                            const vt_tensor *s = use_value ? NULL : &src.t;
                            CHECK_OK(vt_scatter(&a.t, dim, &ix.t, s, NULL, v, (vt_scatter_reduce)op, incl));
                            CHECK_OK(vt_ref_scatter(&b.t, dim, &ix.t, s, NULL, v, (vt_scatter_reduce)op, incl));
                            CHECK_MSG(ht_compare("scatter", &a.t, &b.t, -1) == 0, "dtype %s op %d incl %d dim %d",
                                      vt_dtype_name(dt), op, incl, dim);
                            ht_free(&a), ht_free(&b), ht_free(&src), ht_free(&ix);
                        }
}

TEST(scatter_add_large_and_errors_leave_others_intact) {
    int64_t os[2] = {512, 1000}, is[2] = {2048, 1000};
    host_tensor a = ht_new(VT_F32, 2, os), src = ht_new(VT_F32, 2, is), ix = ht_new(VT_I64, 2, is);
    ht_fill_random(&a, 0, 0);
    ht_fill_random(&src, 0, 0);
    fill_index(&ix, 512, 0);
    host_tensor b = clone_block(&a), src0 = clone_block(&src), ix0 = clone_block(&ix);
    CHECK_OK(vt_scatter(&a.t, 0, &ix.t, &src.t, NULL, vt_scalar_from_int(0), VT_SCATTER_SUM, 1));
    CHECK_OK(vt_ref_scatter(&b.t, 0, &ix.t, &src.t, NULL, vt_scalar_from_int(0), VT_SCATTER_SUM, 1));
    CHECK(ht_compare("scatter_add large", &a.t, &b.t, -1) == 0);
    CHECK(same_block(&src, &src0) && same_block(&ix, &ix0));
    set_index(&ix, 1234567, 512);
    CHECK_STATUS(vt_scatter(&a.t, 0, &ix.t, &src.t, NULL, vt_scalar_from_int(0), VT_SCATTER_SUM, 1), VT_ERR_KERNEL);
    CHECK(!strcmp(vt_last_error(), "index 512 is out of bounds for dimension 0 with size 512"));
    CHECK(same_block(&src, &src0));
    set_index(&ix, 7, -3);
    CHECK_STATUS(vt_scatter(&a.t, 0, &ix.t, &src.t, NULL, vt_scalar_from_int(0), VT_SCATTER_SUM, 1), VT_ERR_KERNEL);
    ht_free(&a), ht_free(&b), ht_free(&src), ht_free(&ix), ht_free(&src0), ht_free(&ix0);
}

/* Enough work that a scatter with repeating indices splits its run between
 * the pool's threads (index_walk.c): each element still sums its sources
 * in index order, so the result equals the serial reference bit for bit. */
TEST(index_add_split_between_threads_matches_reference) {
    static const vt_dtype dts[] = {VT_F32, VT_BF16, VT_I64};
    for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++)
        for (int dim = 0; dim < 2; dim++) {
            vt_dtype dt = dts[k];
            int64_t os[2] = {40, 1501}; /* an odd run: the rows' 4-lane loops end in a tail */
            if (dim == 1) os[0] = 1501, os[1] = 40;
            host_tensor a = mat(dt, os[0], os[1], 0);
            ht_fill_random(&a, 0, 0);
            host_tensor b = clone_block(&a);
            int64_t ss[2] = {os[0], os[1]};
            ss[dim] = 300;
            host_tensor src = mat(dt, ss[0], ss[1], 0);
            ht_fill_random(&src, 0, 0);
            if (vt_dtype_is_float(dt)) { /* a NaN and an inf go through the rows too */
                double sp[2] = {NAN, INFINITY};
                for (int q = 0; q < 2; q++)
                    vt_convert(VT_F64, &sp[q], 1, dt, (char *)src.block + (7 + 901 * q) * (int64_t)vt_dtype_size(dt), 1, 1);
            }
            host_tensor ix = ht_strided(VT_I64, 300, 1);
            fill_index(&ix, os[dim], 0); /* 300 indices into 40 or 1500: repeats */
            vt_scalar alpha = vt_dtype_is_float(dt) ? vt_scalar_from_double(0.5) : vt_scalar_from_int(3);
            CHECK_OK(vt_index_add(&a.t, dim, &ix.t, &src.t, alpha));
            CHECK_OK(vt_ref_index_add(&b.t, dim, &ix.t, &src.t, alpha));
            CHECK_MSG(ht_compare("index_add split", &a.t, &b.t, -1) == 0, "%s dim %d", vt_dtype_name(dt), dim);
            ht_free(&a), ht_free(&b), ht_free(&src), ht_free(&ix);
        }
}

TEST(index_add_copy_fill_match_reference) {
    for (size_t k = 0; k < N_DTYPES; k++)
        for (int dim = 0; dim < 2; dim++)
            for (int tr = 0; tr < 2; tr++) {
                vt_dtype dt = all_dtypes[k];
                size_t es = vt_dtype_size(dt);
                int64_t os[2] = {37, 129};
                host_tensor a = mat(dt, os[0], os[1], tr);
                ht_fill_random(&a, 0, 0);
                host_tensor b = clone_block(&a);
                int64_t ss[2] = {os[0], os[1]};
                ss[dim] = 50;
                host_tensor src = mat(dt, ss[0], ss[1], !tr);
                ht_fill_random(&src, 0, 0);
                host_tensor ix = ht_strided(k & 1 ? VT_I32 : VT_I64, 50, 3);
                fill_index(&ix, os[dim], 0);
                vt_scalar alpha = vt_dtype_is_float(dt) ? vt_scalar_from_double(0.5) : vt_scalar_from_int(3);
                CHECK_OK(vt_index_add(&a.t, dim, &ix.t, &src.t, alpha));
                CHECK_OK(vt_ref_index_add(&b.t, dim, &ix.t, &src.t, alpha));
                CHECK_MSG(ht_compare("index_add", &a.t, &b.t, -1) == 0, "%s dim %d", vt_dtype_name(dt), dim);
                host_tensor c = clone_block(&a);
                CHECK_OK(vt_index_copy(&a.t, dim, &ix.t, &src.t));
                for (int64_t i = 0; i < 50; i++) { /* serial definition: the last write wins */
                    int64_t t;
                    vt_convert(ix.t.dtype, (char *)ix.block + ix_offset_of(&ix.t, i) * (int64_t)vt_dtype_size(ix.t.dtype),
                               1, VT_I64, &t, 1, 1);
                    for (int64_t j = 0; j < os[1 - dim]; j++) {
                        int64_t dc[2], sc[2];
                        dc[dim] = t, dc[1 - dim] = j, sc[dim] = i, sc[1 - dim] = j;
                        memcpy((char *)c.block + (dc[0] * c.t.strides[0] + dc[1] * c.t.strides[1]) * (int64_t)es,
                               (char *)src.block + (sc[0] * src.t.strides[0] + sc[1] * src.t.strides[1]) * (int64_t)es,
                               es);
                    }
                }
                CHECK(ht_compare("index_copy", &a.t, &c.t, -1) == 0);
                set_index(&ix, 5, -1); /* index_fill wraps negative indices */
                CHECK_OK(vt_index_fill(&a.t, dim, &ix.t, NULL, vt_scalar_from_int(1)));
                for (int64_t j = 0; j < os[1 - dim]; j++) {
                    int64_t dc[2];
                    dc[dim] = os[dim] - 1, dc[1 - dim] = j;
                    double got;
                    vt_convert(dt, (char *)a.block + (dc[0] * a.t.strides[0] + dc[1] * a.t.strides[1]) * (int64_t)es, 1,
                               VT_F64, &got, 1, 1);
                    CHECK(got == 1);
                }
                CHECK_STATUS(vt_index_add(&a.t, dim, &ix.t, &src.t, alpha), VT_ERR_INDEX); /* -1 does not wrap */
                /* as on CPU: with alpha 1 and int64 indices it is scatter_add_, and its error a RuntimeError */
                CHECK_STATUS(vt_index_add(&a.t, dim, &ix.t, &src.t, vt_scalar_from_int(1)),
                             ix.t.dtype == VT_I64 ? VT_ERR_KERNEL : VT_ERR_INDEX);
                ht_free(&a), ht_free(&b), ht_free(&c), ht_free(&src), ht_free(&ix);
            }
}

TEST(take_matches_reference) {
    host_tensor in = mat(VT_F64, 33, 17, 1), ix = mat(VT_I64, 20, 30, 1);
    ht_fill_random(&in, 1, 0);
    fill_index(&ix, 33 * 17, 1);
    host_tensor o1 = mat(VT_F64, 20, 30, 0), o2 = mat(VT_F64, 20, 30, 0);
    CHECK_OK(vt_take(&o1.t, &in.t, &ix.t));
    CHECK_OK(vt_ref_take(&o2.t, &in.t, &ix.t));
    CHECK(ht_compare("take", &o1.t, &o2.t, -1) == 0);
    set_index(&ix, 100, 33 * 17);
    CHECK_STATUS(vt_take(&o1.t, &in.t, &ix.t), VT_ERR_INDEX);
    CHECK(!strcmp(vt_last_error(), "out of range: tried to access index 561 on a tensor of 561 elements."));
    ht_free(&in), ht_free(&ix), ht_free(&o1), ht_free(&o2);
}

/* x[i0, :, i2], x[:, i1, i2] (adjacent or not), broadcast indices, puts. */
TEST(advanced_index_and_put_match_reference) {
    int64_t xs[4] = {6, 7, 8, 5};
    int64_t i0s[2] = {3, 4}, i1s[1] = {4};
    const int patterns[][4] = {{1, 0, 1, 0}, {0, 1, 1, 0}, {1, 0, 0, 0}, {0, 0, 0, 1}, {1, 1, 1, 1}, {0, 0, 0, 0}};
    for (size_t k = 0; k < N_DTYPES; k++)
        for (size_t p = 0; p < 6; p++)
            for (int tr = 0; tr < 2; tr++) {
                vt_dtype dt = all_dtypes[k];
                host_tensor x = ht_new(dt, 4, xs);
                if (tr) /* a permuted layout of the same block */
                    x.t.strides[0] = 1, x.t.strides[1] = 6, x.t.strides[2] = 42, x.t.strides[3] = 336;
                ht_fill_random(&x, 1, 0);
                host_tensor ixs[4];
                const vt_tensor *ptrs[4];
                for (int d = 0; d < 4; d++) {
                    ptrs[d] = NULL;
                    if (!patterns[p][d]) continue;
                    ixs[d] = d == 0 ? ht_new(VT_I64, 2, i0s) : ht_new(d & 1 ? VT_I32 : VT_I64, 1, i1s);
                    fill_index(&ixs[d], xs[d], 1);
                    ptrs[d] = &ixs[d].t;
                }
                int32_t rnd;
                int64_t rs[VT_MAX_DIMS];
                CHECK_OK(vt_index_shape(&x.t, 4, ptrs, &rnd, rs));
                host_tensor o1 = ht_new(dt, rnd, rs), o2 = ht_new(dt, rnd, rs);
                CHECK_OK(vt_index(&o1.t, &x.t, 4, ptrs));
                CHECK_OK(vt_ref_index(&o2.t, &x.t, 4, ptrs));
                CHECK_MSG(ht_compare("index", &o1.t, &o2.t, -1) == 0, "pattern %zu %s", p, vt_dtype_name(dt));
                for (int acc = 0; acc < 2; acc++) {
                    host_tensor a = clone_block(&x), b = clone_block(&x);
                    host_tensor v = ht_new(dt, rnd, rs);
                    ht_fill_random(&v, 0, 0);
                    CHECK_OK(vt_index_put(&a.t, 4, ptrs, &v.t, acc));
                    CHECK_OK(vt_ref_index_put(&b.t, 4, ptrs, &v.t, acc));
                    CHECK_MSG(ht_compare("index_put", &a.t, &b.t, -1) == 0, "pattern %zu acc %d %s", p, acc,
                              vt_dtype_name(dt));
                    vt_tensor v0 = v.t; /* a broadcast scalar value */
                    v0.ndim = 0;
                    CHECK_OK(vt_index_put(&a.t, 4, ptrs, &v0, acc));
                    CHECK_OK(vt_ref_index_put(&b.t, 4, ptrs, &v0, acc));
                    CHECK(ht_compare("index_put scalar", &a.t, &b.t, -1) == 0);
                    ht_free(&a), ht_free(&b), ht_free(&v);
                }
                ht_free(&o1), ht_free(&o2);
                for (int d = 0; d < 4; d++)
                    if (patterns[p][d]) ht_free(&ixs[d]);
                ht_free(&x);
            }
}

TEST(advanced_index_errors) {
    int64_t xs[2] = {10, 4};
    host_tensor x = ht_new(VT_F32, 2, xs), i = ht_1d(VT_I64, 5), j = ht_1d(VT_I64, 3);
    fill_index(&i, 10, 0);
    set_index(&i, 3, 12);
    const vt_tensor *ptrs[2] = {&i.t, NULL};
    int64_t os[2] = {5, 4};
    host_tensor o = ht_new(VT_F32, 2, os);
    CHECK_STATUS(vt_index(&o.t, &x.t, 1, ptrs), VT_ERR_INDEX);
    CHECK(strstr(vt_last_error(), "index 12 is out of bounds for dimension 0 with size 10"));
    host_tensor before = clone_block(&x);
    CHECK_STATUS(vt_index_put(&x.t, 1, ptrs, &o.t, 1), VT_ERR_INDEX);
    CHECK(same_block(&x, &before)); /* offsets are checked before any write */
    const vt_tensor *two[2] = {&i.t, &j.t};
    int32_t nd;
    int64_t sz[VT_MAX_DIMS];
    CHECK_STATUS(vt_index_shape(&x.t, 2, two, &nd, sz), VT_ERR_INDEX);
    CHECK(strstr(vt_last_error(), "shape mismatch: indexing tensors could not be broadcast together with shapes [5], [3]"));
    const vt_tensor *three[3] = {&i.t, NULL, NULL};
    CHECK_STATUS(vt_index_shape(&x.t, 3, three, &nd, sz), VT_ERR_INDEX);
    CHECK(strstr(vt_last_error(), "too many indices for tensor of dimension 2 (got 3)"));
    ht_free(&x), ht_free(&i), ht_free(&j), ht_free(&o), ht_free(&before);
}

TEST(embedding_backward_matches_reference) {
    const vt_dtype dts[] = {VT_F32, VT_BF16, VT_F16, VT_F64};
    for (int k = 0; k < 4; k++)
        for (int scale = 0; scale < 2; scale++)
            for (int64_t pad = -1; pad < 2; pad += 2) {
                int64_t V = 301, D = 257, N = 700;
                host_tensor g = mat(dts[k], N, D, scale), ix = ht_strided(k & 1 ? VT_I32 : VT_I64, N, 2);
                ht_fill_random(&g, 0, 0);
                fill_index(&ix, 40, 0);
                host_tensor w1 = mat(dts[k], V, D, 0), w2 = mat(dts[k], V, D, 0);
                ht_fill_random(&w1, 1, 0); /* garbage the kernel must overwrite */
                CHECK_OK(vt_embedding_dense_backward(&w1.t, &g.t, &ix.t, pad, scale));
                CHECK_OK(vt_ref_embedding_dense_backward(&w2.t, &g.t, &ix.t, pad, scale));
                CHECK_MSG(ht_compare("embedding backward", &w1.t, &w2.t, -1) == 0, "%s scale %d pad %lld",
                          vt_dtype_name(dts[k]), scale, (long long)pad);
                set_index(&ix, 600, V);
                CHECK_STATUS(vt_embedding_dense_backward(&w1.t, &g.t, &ix.t, pad, scale), VT_ERR_INDEX);
                ht_free(&g), ht_free(&ix), ht_free(&w1), ht_free(&w2);
            }
}

/* Queued ops: bad shapes fail at the op; bad index values surface at the
 * synchronisation (Strict) or at the op (Debug), and the device goes on. */
TEST(queued_index_ops_report_bad_indices_at_sync) {
    CHECK_OK(vt_init());
    int64_t ws[2] = {10, 4};
    host_tensor w = ht_new(VT_F32, 2, ws), ix = ht_1d(VT_I64, 3), other = ht_1d(VT_F32, 8);
    ht_fill_random(&w, 0, 0);
    ht_fill_random(&other, 0, 0);
    host_tensor other0 = clone_block(&other);
    fill_index(&ix, 10, 0);
    set_index(&ix, 1, 12);
    int64_t os[2] = {3, 4};
    host_tensor o = ht_new(VT_F32, 2, os);
    ht_device(&w), ht_device(&ix), ht_device(&o);
    CHECK_OK(vt_synchronize(0));
    CHECK_OK(vt_op_index_select(0, "aten::index_select", &o.t, &w.t, 0, &ix.t));
    CHECK(vt_synchronize(0) == VT_ERR_INDEX);
    CHECK(!strcmp(vt_last_error(), "aten::index_select: index 12 is out of bounds for dimension 0 with size 10"));
    CHECK(same_block(&other, &other0));
    set_index(&ix, 1, 2);
    CHECK_OK(vt_op_index_select(0, "aten::index_select", &o.t, &w.t, 0, &ix.t));
    CHECK_OK(vt_synchronize(0));
    host_tensor bad = ht_new(VT_F32, 2, ws);
    ht_device(&bad);
    CHECK_STATUS(vt_op_index_select(0, "aten::index_select", &bad.t, &w.t, 0, &ix.t), VT_ERR_INVALID_ARGUMENT);
    vt_set_thread_eager_mode(VT_EAGER_DEBUG);
    set_index(&ix, 0, -20);
    const vt_tensor *ptrs[1] = {&ix.t};
    CHECK_STATUS(vt_op_index(0, "aten::index", &o.t, &w.t, 1, ptrs), VT_ERR_INDEX);
    CHECK(strstr(vt_last_error(), "index -20 is out of bounds for dimension 0 with size 10"));
    vt_set_thread_eager_mode(-1);
    CHECK_OK(vt_synchronize(0));
    ht_free(&w), ht_free(&ix), ht_free(&other), ht_free(&other0), ht_free(&o), ht_free(&bad);
}
/* The queued masked_fill refuses bad descriptors before it reads their
 * geometry (the fuzzer found the overlap check reading sizes[ndim] first):
 * a clear error, nothing queued, and a good call still runs. */
TEST(queued_masked_fill_refuses_bad_descriptors) {
    CHECK_OK(vt_init());
    host_tensor o = ht_1d(VT_F32, 6), m = ht_1d(VT_BOOL, 6), v = ht_new(VT_F32, 0, NULL), h = ht_1d(VT_F32, 6);
    for (int i = 0; i < 6; i++) ((float *)o.block)[i] = (float)i, ((uint8_t *)m.block)[i] = (uint8_t)(i % 2);
    *(float *)v.block = -3;
    ht_device(&o), ht_device(&m), ht_device(&v);
    vt_tensor bad = o.t;
    bad.ndim = 99;
    CHECK_STATUS(vt_op_masked_fill(0, "aten::masked_fill_", &bad, &m.t, NULL, vt_scalar_from_double(1)),
                 VT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(vt_last_error(), "aten::masked_fill_"));
    vt_tensor badv = v.t;
    badv.ndim = -1;
    CHECK_STATUS(vt_op_masked_fill(0, "aten::masked_fill_", &o.t, &m.t, &badv, vt_scalar_from_int(0)),
                 VT_ERR_INVALID_ARGUMENT);
    CHECK_OK(vt_op_masked_fill(0, "aten::masked_fill_", &o.t, &m.t, &v.t, vt_scalar_from_int(0)));
    CHECK_OK(vt_copy_to_host(0, &h.t, &o.t));
    for (int i = 0; i < 6; i++) CHECK(((float *)h.block)[i] == (i % 2 ? -3.0f : (float)i));
    ht_free(&o), ht_free(&m), ht_free(&v), ht_free(&h);
}

TEST(nonzero_masked_select_scatter_fill_match_reference) {
    for (size_t k = 0; k < N_DTYPES; k++)
        for (size_t s = 0; s < N_AWKWARD; s++) {
            vt_dtype dt = all_dtypes[k];
            int64_t n = awkward_sizes[s];
            if (n > 1000 && k > 2) continue;
            int64_t shape[2] = {n > 7 ? 7 : 1, n > 7 ? n / 7 : n};
            size_t es = vt_dtype_size(dt);
            host_tensor x = mat(dt, shape[0], shape[1], s & 1);
            ht_fill_random(&x, 1, 0);
            for (int64_t i = 0; i < ht_block_elems(&x); i += 2) memset((char *)x.block + i * (int64_t)es, 0, es);
            int64_t one = 1;
            host_tensor cnt = ht_new(VT_I64, 0, &one);
            CHECK_OK(vt_count_nonzero(&cnt.t, &x.t));
            int64_t c = *(int64_t *)cnt.block;
            int64_t zs[2] = {c, 2};
            host_tensor z1 = ht_new(VT_I64, 2, zs), z2 = ht_new(VT_I64, 2, zs);
            CHECK_OK(vt_nonzero(&z1.t, &x.t));
            CHECK_OK(vt_ref_nonzero(&z2.t, &x.t));
            CHECK(ht_compare("nonzero", &z1.t, &z2.t, -1) == 0);
            int64_t ms[2] = {1, shape[1]};
            host_tensor m = ht_new(VT_BOOL, 2, ms);
            ht_fill_random(&m, 0, 0);
            host_tensor mc = ht_new(VT_I64, 0, &one);
            vt_tensor mb;
            CHECK_OK(vt_broadcast_to(&m.t, 2, shape, &mb));
            CHECK_OK(vt_count_nonzero(&mc.t, &mb));
            int64_t sel = *(int64_t *)mc.block;
            host_tensor s1 = ht_1d(dt, sel), s2 = ht_1d(dt, sel);
            CHECK_OK(vt_masked_select(&s1.t, &x.t, &m.t));
            CHECK_OK(vt_ref_masked_select(&s2.t, &x.t, &m.t));
            CHECK(ht_compare("masked_select", &s1.t, &s2.t, -1) == 0);
            host_tensor src = ht_strided(dt, sel + 3, 2);
            ht_fill_random(&src, 1, 0);
            host_tensor a = clone_block(&x), b = clone_block(&x);
            CHECK_OK(vt_masked_scatter(&a.t, &m.t, &src.t));
            CHECK_OK(vt_ref_masked_scatter(&b.t, &m.t, &src.t));
            CHECK(ht_compare("masked_scatter", &a.t, &b.t, -1) == 0);
            if (sel > 0) {
                src.t.sizes[0] = sel - 1;
                host_tensor before = clone_block(&a);
                CHECK_STATUS(vt_masked_scatter(&a.t, &m.t, &src.t), VT_ERR_INVALID_ARGUMENT);
                CHECK(same_block(&a, &before));
                ht_free(&before);
            }
            double mv = -2.0;
            CHECK_OK(vt_masked_fill(&a.t, &m.t, NULL, vt_scalar_from_double(mv)));
            for (int64_t r = 0; r < shape[0]; r++)
                for (int64_t q = 0; q < shape[1]; q++)
                    if (((uint8_t *)m.block)[q])
                        vt_convert(VT_F64, &mv, 1, dt, (char *)b.block + (r * b.t.strides[0] + q * b.t.strides[1]) * (int64_t)es,
                                   1, 1);
            CHECK(ht_compare("masked_fill", &a.t, &b.t, -1) == 0);
            ht_free(&x), ht_free(&cnt), ht_free(&z1), ht_free(&z2), ht_free(&m), ht_free(&mc), ht_free(&s1);
            ht_free(&s2), ht_free(&src), ht_free(&a), ht_free(&b);
        }
}
