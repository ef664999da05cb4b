/* loss_nll.c — vt_nll_loss and its backward (PyTorch's nll_loss and
 * nll_loss2d, any number of spatial dims): per-sample gathers of
 * -weight[t] * input[n, t, ...], sums in double over fixed blocks of samples
 * (thread-count independent), and the target bounds check that turns a bad
 * class index into VT_ERR_INDEX instead of a wild read or write. */
#include <stdatomic.h>
#include <stdlib.h>

#include "kernels/softmax/softmax.h"

#define NLL_BLOCK 4096 /* samples per partial sum */

typedef struct nll_geom {
    const vt_tensor *input, *target, *weight;
    int64_t C, S;           /* classes, samples (target's numel) */
    int64_t inner;          /* spatial elements per batch entry */
    int64_t ignore;
    int nsp;                /* spatial dims (input dims 2..) */
    int64_t sp_sz[VT_MAX_DIMS], sp_st[VT_MAX_DIMS];
    int64_t st_n, st_c;     /* input strides of the batch and class dims */
    _Atomic int64_t bad;    /* lowest sample index with a bad target, INT64_MAX if none */
} nll_geom;

static void geom_init(nll_geom *g, const vt_tensor *input, const vt_tensor *target, const vt_tensor *weight,
                      int64_t ignore) {
    memset(g, 0, sizeof *g);
    g->input = input;
    g->target = target;
    g->weight = weight;
    g->ignore = ignore;
    g->S = vt_tensor_numel(target);
    g->inner = 1;
    if (input->ndim == 1) {
        g->C = input->sizes[0];
        g->st_c = input->strides[0];
    } else {
        g->C = input->sizes[1];
        g->st_n = input->strides[0];
        g->st_c = input->strides[1];
        g->nsp = input->ndim - 2;
        for (int d = 0; d < g->nsp; d++) {
            g->sp_sz[d] = input->sizes[d + 2];
            g->sp_st[d] = input->strides[d + 2];
            g->inner *= g->sp_sz[d];
        }
    }
    atomic_init(&g->bad, INT64_MAX);
}

/* Input offset of sample li's class 0 (without the class stride). */
static int64_t sample_offset(const nll_geom *g, int64_t li) {
    int64_t off = g->input->offset;
    if (g->input->ndim == 1) return off;
    int64_t sp = li % g->inner;
    off += (li / g->inner) * g->st_n;
    for (int d = g->nsp - 1; d >= 0; d--) {
        off += (sp % g->sp_sz[d]) * g->sp_st[d];
        sp /= g->sp_sz[d];
    }
    return off;
}

static void note_bad(nll_geom *g, int64_t li) {
    int64_t cur = atomic_load(&g->bad);
    while (li < cur && !atomic_compare_exchange_weak(&g->bad, &cur, li)) {
    }
}

/* Target of sample li, or -1 when ignored; -2 (and noted) when out of range. */
static int64_t sample_target(nll_geom *g, int64_t li) {
    int64_t t = vt_sm_load_index(g->target, vt_sm_offset(g->target, li));
    if (t == g->ignore) return -1;
    if (t < 0 || t >= g->C) {
        note_bad(g, li);
        return -2;
    }
    return t;
}

static vt_status bad_target(nll_geom *g) {
    int64_t li = atomic_load(&g->bad);
    if (li == INT64_MAX) return VT_OK;
    long long t = (long long)vt_sm_load_index(g->target, vt_sm_offset(g->target, li));
    return vt_set_error(VT_ERR_INDEX, "Target %lld is out of bounds.", t);
}

static double weight_of(const nll_geom *g, int64_t t) {
    return g->weight ? vt_sm_load(g->weight, g->weight->offset + t * g->weight->strides[0]) : 1.0;
}

/* ------------------------------------------------------------ checks */

static vt_status check_target_shape(const vt_tensor *input, const vt_tensor *target) {
    if (input->ndim < 1) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "input tensor should be 1D or 2D");
    if (target->dtype != VT_I64 && target->dtype != VT_U8)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "expected target dtype to be Long or Byte, but got %s",
                            vt_dtype_name(target->dtype));
    int ok = input->ndim == 1 ? target->ndim == 0 : target->ndim == input->ndim - 1;
    for (int d = 0; ok && d < target->ndim; d++) ok = target->sizes[d] == input->sizes[d == 0 ? 0 : d + 1];
    if (!ok) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "nll_loss: size mismatch between input and target");
    return VT_OK;
}

static vt_status check_common(const vt_tensor *input, const vt_tensor *target, const vt_tensor *weight) {
    vt_status s;
    if (!input || !target) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "nll_loss: NULL tensor");
    if ((s = vt_tensor_validate(input, "nll_loss input")) != VT_OK) return s;
    if ((s = vt_tensor_validate(target, "nll_loss target")) != VT_OK) return s;
    if (!vt_dtype_is_float(input->dtype))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "nll_loss: expected a floating input, got %s",
                            vt_dtype_name(input->dtype));
    if ((s = check_target_shape(input, target)) != VT_OK) return s;
    if (weight) {
        int64_t C = input->ndim == 1 ? input->sizes[0] : input->sizes[1];
        if ((s = vt_tensor_validate(weight, "nll_loss weight")) != VT_OK) return s;
        if (!vt_dtype_is_float(weight->dtype) || weight->ndim != 1 || weight->sizes[0] != C)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT,
                                "weight tensor should be defined either for all %lld classes or no classes",
                                (long long)C);
    }
    return VT_OK;
}

static vt_status check_scalar(const vt_tensor *t, const char *what) {
    vt_status s = vt_tensor_validate(t, what);
    if (s != VT_OK) return s;
    if (vt_tensor_numel(t) != 1 || !vt_dtype_is_float(t->dtype))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: expected a single floating element", what);
    return VT_OK;
}

static int batched_none(const vt_tensor *input, vt_loss_reduction r) {
    return r == VT_REDUCTION_NONE && input->ndim >= 2;
}

static vt_status check_per_sample(const vt_tensor *t, const vt_tensor *target, const char *what) {
    vt_status s = vt_tensor_validate(t, what);
    if (s != VT_OK) return s;
    int ok = t->ndim == target->ndim && vt_dtype_is_float(t->dtype);
    for (int d = 0; ok && d < t->ndim; d++) ok = t->sizes[d] == target->sizes[d];
    if (!ok) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: expected a floating tensor of target's shape", what);
    return VT_OK;
}

vt_status vt_nll_loss_check(const vt_tensor *out, const vt_tensor *total_weight, const vt_tensor *input,
                            const vt_tensor *target, const vt_tensor *weight, vt_loss_reduction reduction) {
    vt_status s = check_common(input, target, weight);
    if (s != VT_OK) return s;
    if ((unsigned)reduction > VT_REDUCTION_SUM)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "nll_loss: invalid reduction %d", (int)reduction);
    if (!out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "nll_loss: out is NULL");
    if (batched_none(input, reduction)) s = check_per_sample(out, target, "nll_loss out");
    else s = check_scalar(out, "nll_loss out");
    if (s == VT_OK && total_weight) s = check_scalar(total_weight, "nll_loss total_weight");
    return s;
}

vt_status vt_nll_loss_backward_check(const vt_tensor *grad_input, const vt_tensor *grad_out, const vt_tensor *input,
                                     const vt_tensor *target, const vt_tensor *weight, vt_loss_reduction reduction,
                                     const vt_tensor *total_weight) {
    vt_status s = check_common(input, target, weight);
    if (s != VT_OK) return s;
    if ((unsigned)reduction > VT_REDUCTION_SUM)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "nll_loss_backward: invalid reduction %d", (int)reduction);
    if (!grad_input || !grad_out)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "nll_loss_backward: NULL tensor");
    if ((s = vt_tensor_validate(grad_input, "nll_loss_backward grad_input")) != VT_OK) return s;
    int ok = grad_input->ndim == input->ndim && vt_dtype_is_float(grad_input->dtype);
    for (int d = 0; ok && d < input->ndim; d++) ok = grad_input->sizes[d] == input->sizes[d];
    if (!ok) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "nll_loss_backward: grad_input must have input's shape");
    if (batched_none(input, reduction)) s = check_per_sample(grad_out, target, "nll_loss_backward grad_output");
    else s = check_scalar(grad_out, "nll_loss_backward grad_output");
    if (s != VT_OK) return s;
    if (reduction == VT_REDUCTION_MEAN) {
        if (!total_weight)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "nll_loss_backward: MEAN needs total_weight");
        s = check_scalar(total_weight, "nll_loss_backward total_weight");
    }
    return s;
}

/* ------------------------------------------------------------ forward */

typedef struct nll_fwd {
    nll_geom g;
    const vt_tensor *out;
    double *loss, *wsum; /* per block */
} nll_fwd;

static void fwd_none_range(void *p, int64_t b, int64_t e) {
    nll_fwd *f = p;
    for (int64_t li = b; li < e; li++) {
        int64_t t = sample_target(&f->g, li);
        double v = 0;
        if (t >= 0) v = -weight_of(&f->g, t) * vt_sm_load(f->g.input, sample_offset(&f->g, li) + t * f->g.st_c);
        if (t != -2) vt_sm_store(f->out, vt_sm_offset(f->out, li), v);
    }
}

static void fwd_sum_range(void *p, int64_t b, int64_t e) {
    nll_fwd *f = p;
    for (int64_t blk = b; blk < e; blk++) {
        int64_t lo = blk * NLL_BLOCK, hi = lo + NLL_BLOCK < f->g.S ? lo + NLL_BLOCK : f->g.S;
        double l = 0, w = 0;
        for (int64_t li = lo; li < hi; li++) {
            int64_t t = sample_target(&f->g, li);
            if (t < 0) continue;
            double wt = weight_of(&f->g, t);
            l -= wt * vt_sm_load(f->g.input, sample_offset(&f->g, li) + t * f->g.st_c);
            w += wt;
        }
        f->loss[blk] = l;
        f->wsum[blk] = w;
    }
}

vt_status vt_nll_loss(const vt_tensor *out, const vt_tensor *total_weight, const vt_tensor *input,
                      const vt_tensor *target, const vt_tensor *weight, vt_loss_reduction reduction,
                      int64_t ignore_index) {
    vt_status s = vt_nll_loss_check(out, total_weight, input, target, weight, reduction);
    if (s != VT_OK) return s;
    nll_fwd f;
    geom_init(&f.g, input, target, weight, ignore_index);
    f.out = out;
    if (batched_none(input, reduction)) {
        vt_parallel_for(f.g.S, VT_ELEMENTWISE_GRAIN / 8, fwd_none_range, &f);
        if (total_weight) vt_sm_store(total_weight, total_weight->offset, 0.0);
        return bad_target(&f.g);
    }
    int64_t nb = (f.g.S + NLL_BLOCK - 1) / NLL_BLOCK;
    f.loss = malloc((size_t)(nb ? nb : 1) * 2 * sizeof(double));
    if (!f.loss) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "nll_loss: out of host memory");
    f.wsum = f.loss + (nb ? nb : 1);
    vt_parallel_for(nb, 1, fwd_sum_range, &f);
    double l = 0, w = 0;
    for (int64_t i = 0; i < nb; i++) l += f.loss[i], w += f.wsum[i];
    free(f.loss);
    if ((s = bad_target(&f.g)) != VT_OK) return s;
    if (reduction == VT_REDUCTION_MEAN) l /= w;
    vt_sm_store(out, out->offset, l);
    if (total_weight) vt_sm_store(total_weight, total_weight->offset, w);
    return VT_OK;
}

/* ------------------------------------------------------------ backward */

typedef struct nll_bwd {
    nll_geom g;
    const vt_tensor *gi, *go;
    int per_sample;
    double scale; /* the gradient of every sample when !per_sample */
} nll_bwd;

static void bwd_range(void *p, int64_t b, int64_t e) {
    nll_bwd *f = p;
    const vt_tensor *gi = f->gi;
    for (int64_t li = b; li < e; li++) {
        int64_t t = sample_target(&f->g, li);
        if (t < 0) continue;
        double gv = f->per_sample ? vt_sm_load(f->go, vt_sm_offset(f->go, li)) : f->scale;
        /* input and grad_input share a shape: same logical element. */
        int64_t off = gi->offset, sp = li % f->g.inner;
        if (gi->ndim == 1) {
            off += t * gi->strides[0];
        } else {
            off += (li / f->g.inner) * gi->strides[0] + t * gi->strides[1];
            for (int d = f->g.nsp - 1; d >= 0; d--) {
                off += (sp % f->g.sp_sz[d]) * gi->strides[d + 2];
                sp /= f->g.sp_sz[d];
            }
        }
        vt_sm_store(gi, off, -(weight_of(&f->g, t) * gv));
    }
}

vt_status vt_nll_loss_backward(const vt_tensor *grad_input, const vt_tensor *grad_out, const vt_tensor *input,
                               const vt_tensor *target, const vt_tensor *weight, vt_loss_reduction reduction,
                               int64_t ignore_index, const vt_tensor *total_weight) {
    vt_status s = vt_nll_loss_backward_check(grad_input, grad_out, input, target, weight, reduction, total_weight);
    if (s != VT_OK) return s;
    if ((s = vt_fill(grad_input, vt_scalar_from_double(0.0))) != VT_OK) return s;
    nll_bwd f;
    geom_init(&f.g, input, target, weight, ignore_index);
    f.gi = grad_input;
    f.go = grad_out;
    f.per_sample = batched_none(input, reduction);
    f.scale = 0;
    if (!f.per_sample) {
        f.scale = vt_sm_load(grad_out, grad_out->offset);
        if (reduction == VT_REDUCTION_MEAN) f.scale /= vt_sm_load(total_weight, total_weight->offset);
    }
    vt_parallel_for(f.g.S, VT_ELEMENTWISE_GRAIN / 8, bwd_range, &f);
    return bad_target(&f.g);
}
