/* optim_fused.c — fused Adam/AdamW and SGD steps over lists of parameters:
 * one pass that reads each parameter, grad and state once, split over all
 * the parameters' elements. Constants follow CPU PyTorch's fused kernels
 * (computed in double, rounded to the op-math type). */
#include <stdlib.h>

#include "kernels/optim/optim.h"

#define STAGE 512
#define FUSED_GRAIN 16384

static int fused_dt(vt_dtype d) { return d == VT_F32 || d == VT_BF16 || d == VT_F16; }

static char *eptr(const vt_tensor *t) { return vt_base(t); }

static double read1(const vt_tensor *t) {
    double v;
    vt_convert(t->dtype, eptr(t), 0, VT_F64, &v, 0, 1);
    return v;
}

static int same_shape(const vt_tensor *a, const vt_tensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->sizes[d] != b->sizes[d]) return 0;
    return 1;
}

static vt_status check_state(const char *op, const char *what, int64_t i, const vt_tensor *t, const vt_tensor *param) {
    vt_status s = vt_tensor_validate(t, what);
    if (s != VT_OK) return s;
    if (t->dtype != param->dtype)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s[%lld] has dtype %s, the param %s", op, what, (long long)i,
                            vt_dtype_name(t->dtype), vt_dtype_name(param->dtype));
    if (!same_shape(t, param))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s[%lld] does not have the param's shape", op, what,
                            (long long)i);
    if (!vt_tensor_is_contiguous(t))
        return vt_set_error(VT_ERR_UNSUPPORTED, "%s: %s[%lld] is not contiguous", op, what, (long long)i);
    if (!t->data && vt_tensor_numel(t) > 0)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s[%lld] has no data", op, what, (long long)i);
    return VT_OK;
}

static vt_status check_one(const char *op, const char *what, const vt_tensor *t) {
    if (!t) return VT_OK;
    vt_status s = vt_tensor_validate(t, what);
    if (s != VT_OK) return s;
    if (!fused_dt(t->dtype) && t->dtype != VT_F64)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s must be a float tensor", op, what);
    if (vt_tensor_numel(t) != 1 || !t->data)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s must have one element", op, what);
    return VT_OK;
}

vt_status vt_fused_adam_check(const vt_fused_adam_args *x) {
    const char *op = x && x->adamw ? "_fused_adamw_" : "_fused_adam_";
    if (!x) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "fused adam: args is NULL");
    if (x->n < 0) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: negative list length", op);
    if (x->n == 0) return VT_OK;
    if (!x->params || !x->grads || !x->exp_avgs || !x->exp_avg_sqs || !x->steps || (x->amsgrad && !x->max_exp_avg_sqs))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: a tensor list is NULL", op);
    vt_status s;
    if ((s = check_one(op, "lr", x->lr_tensor)) != VT_OK || (s = check_one(op, "grad_scale", x->grad_scale)) != VT_OK ||
        (s = check_one(op, "found_inf", x->found_inf)) != VT_OK)
        return s;
    for (int64_t i = 0; i < x->n; i++) {
        const vt_tensor *p = &x->params[i];
        if ((s = vt_tensor_validate(p, "param")) != VT_OK) return s;
        if (!fused_dt(p->dtype))
            return vt_set_error(VT_ERR_UNSUPPORTED, "%s: param dtype %s is not supported", op, vt_dtype_name(p->dtype));
        if ((s = check_state(op, "param", i, p, p)) != VT_OK || (s = check_state(op, "grad", i, &x->grads[i], p)) != VT_OK ||
            (s = check_state(op, "exp_avg", i, &x->exp_avgs[i], p)) != VT_OK ||
            (s = check_state(op, "exp_avg_sq", i, &x->exp_avg_sqs[i], p)) != VT_OK)
            return s;
        if (x->amsgrad && (s = check_state(op, "max_exp_avg_sq", i, &x->max_exp_avg_sqs[i], p)) != VT_OK) return s;
        if ((s = check_one(op, "state_step", &x->steps[i])) != VT_OK) return s;
    }
    return VT_OK;
}

vt_status vt_fused_sgd_check(const vt_fused_sgd_args *x) {
    const char *op = "_fused_sgd_";
    if (!x) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "fused sgd: args is NULL");
    if (x->n < 0) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: negative list length", op);
    if (x->n == 0) return VT_OK;
    if (!x->params || !x->grads || (x->momentum != 0 && !x->momentum_buffers))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: a tensor list is NULL", op);
    vt_status s;
    if ((s = check_one(op, "lr", x->lr_tensor)) != VT_OK || (s = check_one(op, "grad_scale", x->grad_scale)) != VT_OK ||
        (s = check_one(op, "found_inf", x->found_inf)) != VT_OK)
        return s;
    for (int64_t i = 0; i < x->n; i++) {
        const vt_tensor *p = &x->params[i];
        if ((s = vt_tensor_validate(p, "param")) != VT_OK) return s;
        if (!fused_dt(p->dtype))
            return vt_set_error(VT_ERR_UNSUPPORTED, "%s: param dtype %s is not supported", op, vt_dtype_name(p->dtype));
        if ((s = check_state(op, "param", i, p, p)) != VT_OK || (s = check_state(op, "grad", i, &x->grads[i], p)) != VT_OK)
            return s;
        if (x->momentum != 0 && (s = check_state(op, "momentum_buffer", i, &x->momentum_buffers[i], p)) != VT_OK)
            return s;
    }
    return VT_OK;
}

/* ------------------------------------------------------------ shared driver */

typedef struct fused_job {
    int kind; /* 0 adam, 1 sgd */
    int64_t n;
    int64_t *start;
    const vt_tensor *t[5]; /* list heads: adam p g m v mx; sgd p g buf */
    optim_adam_f32 *adam;  /* per param */
    optim_sgd_f32 *sgd;
    const optim_table *tab;
    int ref;
} fused_job;

static int nlists(const fused_job *j) {
    if (j->kind == 0) return j->adam[0].amsgrad ? 5 : 4;
    return j->sgd[0].has_momentum ? 3 : 2;
}

static void run_block(const fused_job *j, int64_t i, int64_t n, float **ptr) {
    if (j->ref) {
        for (int64_t e = 0; e < n; e++) {
            if (j->kind == 0)
                optim_table_portable.adam(&j->adam[i], 1, ptr[0] + e, ptr[1] + e, ptr[2] + e, ptr[3] + e,
                                          ptr[4] ? ptr[4] + e : NULL);
            else
                optim_table_portable.sgd(&j->sgd[i], 1, ptr[0] + e, ptr[1] + e, ptr[2] ? ptr[2] + e : NULL);
        }
        return;
    }
    if (j->kind == 0) j->tab->adam(&j->adam[i], n, ptr[0], ptr[1], ptr[2], ptr[3], ptr[4]);
    else j->tab->sgd(&j->sgd[i], n, ptr[0], ptr[1], ptr[2]);
}

static void fused_range(const fused_job *j, int64_t i, int64_t lo, int64_t hi) {
    int nl = nlists(j);
    vt_dtype dt = j->t[0][i].dtype;
    size_t es = vt_dtype_size(dt);
    char *base[5] = {0};
    for (int k = 0; k < nl; k++) base[k] = eptr(&j->t[k][i]);
    if (dt == VT_F32) {
        float *ptr[5] = {0};
        for (int k = 0; k < nl; k++) ptr[k] = (float *)base[k] + lo;
        run_block(j, i, hi - lo, ptr);
        return;
    }
    int grad_written = j->kind == 0 ? j->adam[i].has_scale : j->sgd[i].has_scale;
    float buf[5][STAGE];
    for (int64_t o = lo; o < hi; o += STAGE) {
        int64_t m = hi - o < STAGE ? hi - o : STAGE;
        float *ptr[5] = {0};
        for (int k = 0; k < nl; k++) {
            if (j->kind == 1 && k == 2 && j->sgd[i].first) {
                ptr[k] = buf[k]; /* overwritten before it is read */
                continue;
            }
            vt_convert(dt, base[k] + o * (int64_t)es, 1, VT_F32, buf[k], 1, m);
            ptr[k] = buf[k];
        }
        run_block(j, i, m, ptr);
        for (int k = 0; k < nl; k++) {
            if (k == 1 && !grad_written) continue;
            vt_convert(VT_F32, buf[k], 1, dt, base[k] + o * (int64_t)es, 1, m);
        }
    }
}

static void fused_chunk(void *vctx, int64_t begin, int64_t end) {
    const fused_job *j = vctx;
    int64_t lo = 0, hi = j->n;
    while (hi - lo > 1) {
        int64_t mid = (lo + hi) / 2;
        if (j->start[mid] <= begin) lo = mid;
        else hi = mid;
    }
    int64_t pos = begin;
    for (int64_t i = lo; i < j->n && pos < end; i++) {
        int64_t s0 = j->start[i], s1 = j->start[i + 1];
        if (s1 <= pos) continue;
        int64_t e = end < s1 ? end : s1;
        fused_range(j, i, pos - s0, e - s0);
        pos = e;
    }
}

static vt_status run_job(fused_job *j) {
    j->start = malloc((size_t)(j->n + 1) * sizeof *j->start);
    if (!j->start) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "fused optimizer step: out of host memory");
    j->start[0] = 0;
    for (int64_t i = 0; i < j->n; i++) j->start[i + 1] = j->start[i] + vt_tensor_numel(&j->t[0][i]);
    if (j->ref) fused_chunk(j, 0, j->start[j->n]);
    else vt_parallel_for(j->start[j->n], FUSED_GRAIN, fused_chunk, j);
    free(j->start);
    return VT_OK;
}

static float to_dt(vt_dtype dt, double v) {
    if (dt == VT_BF16) return vt_bf16_to_f32(vt_f32_to_bf16((float)v));
    if (dt == VT_F16) return vt_f16_to_f32(vt_f32_to_f16((float)v));
    return (float)v;
}

/* ------------------------------------------------------------ Adam / AdamW */

static vt_status adam_run(const vt_fused_adam_args *x, int ref) {
    vt_status s = vt_fused_adam_check(x);
    if (s != VT_OK || x->n == 0) return s;
    if (x->found_inf && read1(x->found_inf) == 1.0) return VT_OK;
    double lr = x->lr_tensor ? read1(x->lr_tensor) : x->lr;
    optim_adam_f32 *cs = malloc((size_t)x->n * sizeof *cs);
    if (!cs) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "fused adam: out of host memory");
    float gs = x->grad_scale ? (float)read1(x->grad_scale) : 1.0f;
    for (int64_t i = 0; i < x->n; i++) {
        double step = (double)(float)read1(&x->steps[i]);
        double bc1 = 1 - pow(x->beta1, step), bc2 = 1 - pow(x->beta2, step);
        double step_size = lr / bc1;
        optim_adam_f32 *c = &cs[i];
        memset(c, 0, sizeof *c);
        c->wd = (float)x->weight_decay;
        c->decay = (float)(1 - lr * x->weight_decay);
        double w = 1 - x->beta1;
        float wf = (float)w;
        c->lerp_small = fabsf(wf) < 0.5f;
        c->lerp_coeff = c->lerp_small ? wf : wf - 1.0f;
        c->beta2 = (float)x->beta2;
        c->c2 = (float)(1 - x->beta2);
        c->bc2_sqrt = (float)sqrt(bc2);
        c->eps = (float)x->eps;
        c->neg_step = (float)(-step_size);
        c->grad_scale = gs;
        c->has_scale = x->grad_scale != NULL;
        c->adamw = x->adamw;
        c->amsgrad = x->amsgrad;
        c->maximize = x->maximize;
        if (x->weight_decay == 0) {
            c->wd = 0;
            c->decay = 1;
        }
    }
    fused_job j = {0, x->n, NULL, {x->params, x->grads, x->exp_avgs, x->exp_avg_sqs, x->amsgrad ? x->max_exp_avg_sqs : NULL},
                   cs, NULL, ref ? &optim_table_portable : optim_active_table(), ref};
    s = run_job(&j);
    free(cs);
    return s;
}

vt_status vt_fused_adam(const vt_fused_adam_args *x) { return adam_run(x, 0); }
vt_status vt_ref_fused_adam(const vt_fused_adam_args *x) { return adam_run(x, 1); }

/* ------------------------------------------------------------ SGD */

static vt_status sgd_run(const vt_fused_sgd_args *x, int ref) {
    vt_status s = vt_fused_sgd_check(x);
    if (s != VT_OK || x->n == 0) return s;
    if (x->found_inf && read1(x->found_inf) == 1.0) return VT_OK;
    double lr = x->lr_tensor ? read1(x->lr_tensor) : x->lr;
    optim_sgd_f32 *cs = malloc((size_t)x->n * sizeof *cs);
    if (!cs) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "fused sgd: out of host memory");
    float gs = x->grad_scale ? (float)read1(x->grad_scale) : 1.0f;
    for (int64_t i = 0; i < x->n; i++) {
        vt_dtype dt = x->params[i].dtype;
        optim_sgd_f32 *c = &cs[i];
        memset(c, 0, sizeof *c);
        /* CPU's kernel rounds these to the parameter dtype (scalar_t(...)). */
        c->wd = to_dt(dt, x->weight_decay);
        c->momentum = to_dt(dt, x->momentum);
        c->one_minus_damp = to_dt(dt, 1 - x->dampening);
        c->neg_lr = to_dt(dt, -lr);
        c->grad_scale = gs;
        c->has_scale = x->grad_scale != NULL;
        c->has_momentum = x->momentum != 0;
        c->nesterov = x->nesterov;
        c->maximize = x->maximize;
        c->first = x->is_first_step;
    }
    fused_job j = {1, x->n, NULL, {x->params, x->grads, x->momentum != 0 ? x->momentum_buffers : NULL, NULL, NULL},
                   NULL, cs, ref ? &optim_table_portable : optim_active_table(), ref};
    s = run_job(&j);
    free(cs);
    return s;
}

vt_status vt_fused_sgd(const vt_fused_sgd_args *x) { return sgd_run(x, 0); }
vt_status vt_ref_fused_sgd(const vt_fused_sgd_args *x) { return sgd_run(x, 1); }
