/* mxu_f64.c — double-precision products for vt_matmul: a TPU has no f64
 * MXU, so this is about correctness, not speed: a plain i-k-j loop over
 * column blocks, rows split across the pool. */
#include "internal.h"

#define NB 256 /* columns accumulated at a time (a stack row of doubles) */

typedef struct f64_job {
    const vt_tensor *out, *a, *b, *bias;
    double alpha, beta;
} f64_job;

static inline double at(const vt_tensor *t, int64_t i, int64_t j) {
    return ((const double *)t->data)[t->offset + i * t->strides[0] + j * t->strides[1]];
}

static double bias_at(const vt_tensor *t, int64_t i, int64_t j) {
    double d;
    int64_t off = t->offset + i * t->strides[0] + j * t->strides[1];
    vt_convert(t->dtype, (const char *)t->data + off * (int64_t)vt_dtype_size(t->dtype), 1, VT_F64, &d, 1, 1);
    return d;
}

static void rows(void *ctx, int64_t begin, int64_t end) {
    const f64_job *j = ctx;
    int64_t N = j->out->sizes[1], K = j->a->sizes[1];
    double acc[NB];
    for (int64_t i = begin; i < end; i++) {
        for (int64_t n0 = 0; n0 < N; n0 += NB) {
            int64_t nb = N - n0 < NB ? N - n0 : NB;
            for (int64_t x = 0; x < nb; x++) acc[x] = 0.0;
            for (int64_t k = 0; k < K; k++) {
                double av = at(j->a, i, k);
                for (int64_t x = 0; x < nb; x++) acc[x] += av * at(j->b, k, n0 + x);
            }
            for (int64_t x = 0; x < nb; x++) {
                double d = j->alpha == 1.0 ? acc[x] : j->alpha * acc[x];
                if (j->bias) d += j->beta * bias_at(j->bias, i, n0 + x);
                ((double *)j->out->data)[j->out->offset + i * j->out->strides[0] + (n0 + x) * j->out->strides[1]] = d;
            }
        }
    }
}

void vt_mxu_gemm_f64(const vt_tensor *out, const vt_tensor *a, const vt_tensor *b, const vt_tensor *bias, double alpha,
                     double beta) {
    f64_job j = {out, a, b, beta != 0.0 ? bias : NULL, alpha, beta};
    int64_t M = out->sizes[0], work = out->sizes[1] * (a->sizes[1] + 1);
    vt_parallel_for(M, work >= (1 << 16) ? 1 : (work ? (1 << 16) / work + 1 : M), rows, &j);
}
