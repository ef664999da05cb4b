/* loss_ref.c — scalar references for the losses: one element at a time in
 * logical order, math and sums in double, each result rounded once. */
#include <stdlib.h>

#include "kernels/softmax/softmax.h"

/* ------------------------------------------------------------ nll */

/* Offset into t (input or grad_input, [C] or [N, C, ...]) of sample li's class c. */
static int64_t class_offset(const vt_tensor *t, int64_t li, int64_t c) {
    if (t->ndim == 1) return t->offset + c * t->strides[0];
    int64_t inner = 1;
    for (int d = 2; d < t->ndim; d++) inner *= t->sizes[d];
    int64_t n = li / inner, sp = li % inner, off = t->offset + n * t->strides[0] + c * t->strides[1];
    for (int d = t->ndim - 1; d >= 2; d--) {
        off += (sp % t->sizes[d]) * t->strides[d];
        sp /= t->sizes[d];
    }
    return off;
}

static double ref_weight(const vt_tensor *w, int64_t c) {
    return w ? vt_sm_load(w, w->offset + c * w->strides[0]) : 1.0;
}


vt_status vt_ref_nll_loss(const vt_tensor *out, const vt_tensor *total_weight, const vt_tensor *input,
                          const vt_tensor *target, const vt_tensor *weight, vt_loss_reduction reduction,
                          int64_t ignore_index) {
    vt_status s = vt_nll_loss_check(out, total_weight, input, target, weight, reduction);
    if (s != VT_OK) return s;
    int64_t S = vt_tensor_numel(target), C = input->ndim == 1 ? input->sizes[0] : input->sizes[1];
    int per_sample = reduction == VT_REDUCTION_NONE && input->ndim >= 2;
    double sum = 0, wsum = 0;
    for (int64_t li = 0; li < S; li++) {
        int64_t t = vt_sm_load_index(target, vt_sm_offset(target, li));
        double v = 0;
        if (t != ignore_index) {
            if (t < 0 || t >= C) return vt_set_error(VT_ERR_INDEX, "Target %lld is out of bounds.", (long long)t);
            double w = ref_weight(weight, t);
            v = -w * vt_sm_load(input, class_offset(input, li, t));
            wsum += w;
        }
        if (per_sample) vt_sm_store(out, vt_sm_offset(out, li), v);
        else sum += v;
    }
    if (per_sample) wsum = 0;
    else vt_sm_store(out, out->offset, reduction == VT_REDUCTION_MEAN ? sum / wsum : sum);
    if (total_weight) vt_sm_store(total_weight, total_weight->offset, wsum);
    return VT_OK;
}

vt_status vt_ref_nll_loss_backward(const vt_tensor *grad_input, const vt_tensor *grad_out, const vt_tensor *input,
                                   const vt_tensor *target, const vt_tensor *weight, vt_loss_reduction reduction,
                                   int64_t ignore_index, const vt_tensor *total_weight) {
    vt_status s = vt_nll_loss_backward_check(grad_input, grad_out, input, target, weight, reduction, total_weight);
    if (s != VT_OK) return s;
    int64_t n = vt_tensor_numel(grad_input);
    for (int64_t i = 0; i < n; i++) vt_sm_store(grad_input, vt_sm_offset(grad_input, i), 0.0);
    int64_t S = vt_tensor_numel(target), C = input->ndim == 1 ? input->sizes[0] : input->sizes[1];
    int per_sample = reduction == VT_REDUCTION_NONE && input->ndim >= 2;
    double g = 0;
    if (!per_sample) {
        g = vt_sm_load(grad_out, grad_out->offset);
        if (reduction == VT_REDUCTION_MEAN) g /= vt_sm_load(total_weight, total_weight->offset);
    }
    for (int64_t li = 0; li < S; li++) {
        int64_t t = vt_sm_load_index(target, vt_sm_offset(target, li));
        if (t == ignore_index) continue;
        if (t < 0 || t >= C) return vt_set_error(VT_ERR_INDEX, "Target %lld is out of bounds.", (long long)t);
        double gv = per_sample ? vt_sm_load(grad_out, vt_sm_offset(grad_out, li)) : g;
        vt_sm_store(grad_input, class_offset(grad_input, li, t), -(ref_weight(weight, t) * gv));
    }
    return VT_OK;
}

/* ------------------------------------------------------------ pointwise */

static double ref_loss(vt_loss_kind kind, double x, double t, double pw, int has_pw, double p, int *bad) {
    double d = x - t, z = fabs(d);
    switch (kind) {
    case VT_LOSS_MSE: return d * d;
    case VT_LOSS_L1: return z;
    case VT_LOSS_SMOOTH_L1: return p == 0 ? z : (z < p ? 0.5 * z * z / p : z - 0.5 * p);
    case VT_LOSS_HUBER: return z < p ? 0.5 * z * z : p * (z - 0.5 * p);
    case VT_LOSS_BCE:
        if (!(x >= 0 && x <= 1)) *bad |= 1;
        if (!(t >= 0 && t <= 1)) *bad |= 2;
        return (t - 1) * fmax(log1p(-x), -100) - t * fmax(log(x), -100);
    default: {
        double ls = fmin(x, 0) - log1p(exp(-fabs(x)));
        if (has_pw) ls *= (pw - 1) * t + 1;
        return (1 - t) * x - ls;
    }
    }
}

static double ref_grad(vt_loss_kind kind, double x, double t, double pw, int has_pw, double g, double norm,
                       double p) {
    double d = x - t;
    switch (kind) {
    case VT_LOSS_MSE: return norm * d * g;
    case VT_LOSS_L1: return norm * ((d > 0) - (d < 0)) * g;
    case VT_LOSS_SMOOTH_L1: return d <= -p ? -norm * g : (d >= p ? norm * g : norm * d * g / p);
    case VT_LOSS_HUBER: return d <= -p ? -norm * g * p : (d >= p ? norm * g * p : norm * d * g);
    case VT_LOSS_BCE: return g * d / fmax((1 - x) * x, 1e-12) * norm;
    default: {
        double sg = 1 / (1 + exp(-x));
        double r = has_pw ? (pw * t + 1 - t) * sg - pw * t : sg - t;
        return r * g * norm;
    }
    }
}

static void bview(const vt_tensor *t, const vt_tensor *x, vt_tensor *v) {
    if (t) vt_broadcast_to(t, x->ndim, x->sizes, v);
}

vt_status vt_ref_pointwise_loss(vt_loss_kind kind, const vt_tensor *out, const vt_tensor *input,
                                const vt_tensor *target, const vt_tensor *weight, const vt_tensor *pos_weight,
                                vt_loss_reduction reduction, double param) {
    vt_status s = vt_pointwise_loss_check(kind, out, input, target, weight, pos_weight, reduction, 0);
    if (s != VT_OK) return s;
    vt_tensor tv, wv, pv;
    bview(target, input, &tv);
    bview(weight, input, &wv);
    bview(pos_weight, input, &pv);
    int64_t n = vt_tensor_numel(input);
    double sum = 0;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = vt_sm_load(input, vt_sm_offset(input, i)), t = vt_sm_load(&tv, vt_sm_offset(&tv, i));
        double pw = pos_weight ? vt_sm_load(&pv, vt_sm_offset(&pv, i)) : 1;
        double l = ref_loss(kind, x, t, pw, pos_weight != NULL, param, &bad);
        if (weight) l *= vt_sm_load(&wv, vt_sm_offset(&wv, i));
        if (reduction == VT_REDUCTION_NONE) vt_sm_store(out, vt_sm_offset(out, i), l);
        else sum += l;
    }
    if (bad & 1) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "all elements of input should be between 0 and 1");
    if (bad & 2) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "all elements of target should be between 0 and 1");
    if (reduction != VT_REDUCTION_NONE)
        vt_sm_store(out, out->offset, reduction == VT_REDUCTION_MEAN ? sum / (double)n : sum);
    return VT_OK;
}

vt_status vt_ref_pointwise_loss_backward(vt_loss_kind kind, const vt_tensor *grad_input,
                                         const vt_tensor *grad_out, const vt_tensor *input, const vt_tensor *target,
                                         const vt_tensor *weight, const vt_tensor *pos_weight,
                                         vt_loss_reduction reduction, double param) {
    vt_status s = vt_pointwise_loss_check(kind, grad_input, input, target, weight, pos_weight, reduction, 1);
    if (s != VT_OK) return s;
    if (!grad_out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "loss backward: grad_output is NULL");
    vt_tensor tv, wv, pv, gv;
    if ((s = vt_broadcast_to(grad_out, input->ndim, input->sizes, &gv)) != VT_OK) return s;
    bview(target, input, &tv);
    bview(weight, input, &wv);
    bview(pos_weight, input, &pv);
    int64_t n = vt_tensor_numel(input);
    double norm = (kind == VT_LOSS_MSE ? 2.0 : 1.0) / (reduction == VT_REDUCTION_MEAN ? (double)n : 1.0);
    for (int64_t i = 0; i < n; i++) {
        double x = vt_sm_load(input, vt_sm_offset(input, i)), t = vt_sm_load(&tv, vt_sm_offset(&tv, i));
        double pw = pos_weight ? vt_sm_load(&pv, vt_sm_offset(&pv, i)) : 1;
        double g = vt_sm_load(&gv, vt_sm_offset(&gv, i));
        double r = ref_grad(kind, x, t, pw, pos_weight != NULL, g, norm, param);
        if (weight) r *= vt_sm_load(&wv, vt_sm_offset(&wv, i));
        vt_sm_store(grad_input, vt_sm_offset(grad_input, i), r);
    }
    return VT_OK;
}
