/* elementwise_f32_binary.h — the f32 add/sub/mul/div/axpy microkernels of an
 * ISA table (vt_f32_binary_fn), written once for a vector width and included
 * by each ISA's file, compiled for that ISA. Plain IEEE add/sub/mul/div and
 * one fused multiply-add (axpy: a + al * b rounded once) per lane, so results
 * are bit-identical to the portable loop. Expects VEC (the
 * vector type), W (its lanes), VI(name) (the intrinsic _mmW_name), SFX (the
 * ISA: the functions are add_SFX ..., the table vt_f32_binary_SFX) and
 * NT_MIN_ELEMS. */

#define F32B_J(a, b) a##_##b
#define F32B_JOIN(a, b) F32B_J(a, b)

/* An operand: a vector from memory, or (stride 0, a constant in each
 * specialisation) its scalar, read once before any store as the portable
 * loop does, broadcast. */
static inline __attribute__((always_inline)) VEC f32b_ld(const float *p, int64_t i, int s, VEC splat) {
    return s ? VI(loadu_ps)(p + i) : splat;
}

/* Four vectors per iteration keep enough loads in flight to saturate
 * memory bandwidth; the tail (under one vector) goes element by element.
 * One body, specialised for two tensors and for a scalar on either side. */
#define F32B_KERNEL(OP, VOP, SOP)                                                                             \
    static inline __attribute__((always_inline)) void F32B_JOIN(OP, k)(int64_t n, float *out, const float *a, \
                                                                        const float *b, const int as,         \
                                                                        const int bs, const float al) {       \
        const float xs = as ? 0.0f : a[0], ys = bs ? 0.0f : b[0];                                             \
        const VEC va = VI(set1_ps)(xs), vb = VI(set1_ps)(ys), val = VI(set1_ps)(al);                          \
        (void)val;                                                                                            \
        int64_t i = 0;                                                                                        \
        if (n >= NT_MIN_ELEMS) {                                                                              \
            for (; ((uintptr_t)(out + i) & 63) != 0; i++) out[i] = SOP((as ? a[i] : xs), (bs ? b[i] : ys));     \
            for (; i + W <= n; i += W)                                                                        \
                VI(stream_ps)(out + i, VOP(f32b_ld(a, i, as, va), f32b_ld(b, i, bs, vb)));                    \
            _mm_sfence(); /* order the streamed lines before the pool's completion flag */                    \
        }                                                                                                     \
        for (; i + 4 * W <= n; i += 4 * W) {                                                                  \
            VEC a0 = f32b_ld(a, i, as, va), a1 = f32b_ld(a, i + W, as, va);                                   \
            VEC a2 = f32b_ld(a, i + 2 * W, as, va), a3 = f32b_ld(a, i + 3 * W, as, va);                       \
            VEC b0 = f32b_ld(b, i, bs, vb), b1 = f32b_ld(b, i + W, bs, vb);                                   \
            VEC b2 = f32b_ld(b, i + 2 * W, bs, vb), b3 = f32b_ld(b, i + 3 * W, bs, vb);                       \
            VI(storeu_ps)(out + i, VOP(a0, b0));                                                              \
            VI(storeu_ps)(out + i + W, VOP(a1, b1));                                                          \
            VI(storeu_ps)(out + i + 2 * W, VOP(a2, b2));                                                      \
            VI(storeu_ps)(out + i + 3 * W, VOP(a3, b3));                                                      \
        }                                                                                                     \
        for (; i + W <= n; i += W) VI(storeu_ps)(out + i, VOP(f32b_ld(a, i, as, va), f32b_ld(b, i, bs, vb))); \
        for (; i < n; i++) out[i] = SOP((as ? a[i] : xs), (bs ? b[i] : ys));                                  \
    }                                                                                                         \
    static void OP(int64_t n, float *out, const float *a, int64_t as, const float *b, int64_t bs, float al) { \
        if (as && bs) F32B_JOIN(OP, k)(n, out, a, b, 1, 1, al);                                               \
        else if (as) F32B_JOIN(OP, k)(n, out, a, b, 1, 0, al);                                                \
        else F32B_JOIN(OP, k)(n, out, a, b, 0, 1, al);                                                        \
    }

/* VOP(x, y) on vectors, SOP(x, y) on one float; val / al: the alpha */
#define F32B_SADD(x, y) ((x) + (y))
#define F32B_SSUB(x, y) ((x) - (y))
#define F32B_SMUL(x, y) ((x) * (y))
#define F32B_SDIV(x, y) ((x) / (y))
#define F32B_SAXPY(x, y) fmaf(al, (y), (x))
#define F32B_VAXPY(x, y) VI(fmadd_ps)(val, (y), (x))
F32B_KERNEL(F32B_JOIN(add, SFX), VI(add_ps), F32B_SADD)
F32B_KERNEL(F32B_JOIN(sub, SFX), VI(sub_ps), F32B_SSUB)
F32B_KERNEL(F32B_JOIN(mul, SFX), VI(mul_ps), F32B_SMUL)
F32B_KERNEL(F32B_JOIN(div, SFX), VI(div_ps), F32B_SDIV)
F32B_KERNEL(F32B_JOIN(axpy, SFX), F32B_VAXPY, F32B_SAXPY)

const vt_f32_binary_table F32B_JOIN(vt_f32_binary, SFX) = {F32B_JOIN(add, SFX), F32B_JOIN(sub, SFX),
                                                            F32B_JOIN(mul, SFX), F32B_JOIN(div, SFX),
                                                            F32B_JOIN(axpy, SFX)};

#undef F32B_SADD
#undef F32B_SSUB
#undef F32B_SMUL
#undef F32B_SDIV
#undef F32B_SAXPY
#undef F32B_VAXPY

#undef F32B_KERNEL
#undef F32B_JOIN
#undef F32B_J
