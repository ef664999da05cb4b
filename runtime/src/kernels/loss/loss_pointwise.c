/* loss_pointwise.c — vt_pointwise_loss and its backward: mse, l1,
 * smooth_l1, huber, binary cross-entropy (on probabilities and on logits)
 * in one fused pass over operands broadcast to the input's shape. Runs are
 * staged into f32 (f64) buffers; MEAN / SUM add the values of fixed blocks
 * in double, then the blocks in order, so the result does not depend on the
 * thread count. */
#include <stdatomic.h>
#include <stdlib.h>

#include "kernels/softmax/softmax.h"

#define PW_BLOCK 16384 /* elements per partial sum */
#define PW_RUN 512     /* elements staged at a time */
#define PW_OPS 6       /* out / grad_input, input, target, weight, pos_weight, grad_out */

enum { OP_OUT, OP_X, OP_T, OP_W, OP_PW, OP_GO };
enum { BAD_INPUT = 1, BAD_TARGET = 2 };

/* ------------------------------------------------------------ per-element math */

#define PW_MATH(SFX, T, LOG, LOG1P, EXP, FABS)                                                                     \
    static int fwd_##SFX(vt_loss_kind kind, int64_t n, const T *x, const T *t, const T *w, const T *pw,       \
                         T p, T *o) {                                                                              \
        int bad = 0;                                                                                               \
        for (int64_t i = 0; i < n; i++) {                                                                          \
            T d = x[i] - t[i], z = FABS(d), r;                                                                     \
            switch (kind) {                                                                                        \
            case VT_LOSS_MSE: r = d * d; break;                                                                    \
            case VT_LOSS_L1: r = z; break;                                                                         \
            case VT_LOSS_SMOOTH_L1: r = p == 0 ? z : (z < p ? (T)0.5 * z * z / p : z - (T)0.5 * p); break;         \
            case VT_LOSS_HUBER: r = z < p ? (T)0.5 * z * z : p * (z - (T)0.5 * p); break;                          \
            case VT_LOSS_BCE: {                                                                                    \
                if (!(x[i] >= 0 && x[i] <= 1)) bad |= BAD_INPUT;                                                   \
                if (!(t[i] >= 0 && t[i] <= 1)) bad |= BAD_TARGET;                                                  \
                T l1 = LOG1P(-x[i]), l0 = LOG(x[i]);                                                               \
                l1 = l1 > (T)-100 ? l1 : (T)-100;                                                                  \
                l0 = l0 > (T)-100 ? l0 : (T)-100;                                                                  \
                r = (t[i] - 1) * l1 - t[i] * l0;                                                                   \
                break;                                                                                             \
            }                                                                                                      \
            default: { /* BCE_LOGITS */                                                                            \
                T ls = (x[i] < 0 ? x[i] : 0) - LOG1P(EXP(-FABS(x[i])));                                            \
                if (pw) ls *= (pw[i] - 1) * t[i] + 1;                                                              \
                r = (1 - t[i]) * x[i] - ls;                                                                        \
                break;                                                                                             \
            }                                                                                                      \
            }                                                                                                      \
            o[i] = w ? r * w[i] : r;                                                                               \
        }                                                                                                          \
        return bad;                                                                                                \
    }                                                                                                              \
    static void bwd_##SFX(vt_loss_kind kind, int64_t n, const T *x, const T *t, const T *w, const T *pw,      \
                          const T *go, T norm, T p, T *o) {                                                        \
        for (int64_t i = 0; i < n; i++) {                                                                          \
            T d = x[i] - t[i], g = go[i], r;                                                                       \
            switch (kind) {                                                                                        \
            case VT_LOSS_MSE: r = norm * d * g; break;                                                             \
            case VT_LOSS_L1: r = norm * (T)((d > 0) - (d < 0)) * g; break;                                         \
            case VT_LOSS_SMOOTH_L1:                                                                                \
                r = d <= -p ? -norm * g : (d >= p ? norm * g : norm * d * g / p);                                  \
                break;                                                                                             \
            case VT_LOSS_HUBER:                                                                                    \
                r = d <= -p ? -norm * g * p : (d >= p ? norm * g * p : norm * d * g);                              \
                break;                                                                                             \
            case VT_LOSS_BCE: {                                                                                    \
                T den = (1 - x[i]) * x[i];                                                                         \
                r = g * d / (den > (T)1e-12 ? den : (T)1e-12) * norm;                                              \
                break;                                                                                             \
            }                                                                                                      \
            default: {                                                                                             \
                T sg = 1 / (1 + EXP(-x[i]));                                                                       \
                if (pw) {                                                                                          \
                    T pt = pw[i] * t[i];                                                                           \
                    r = (pt + 1 - t[i]) * sg - pt;                                                                 \
                } else {                                                                                           \
                    r = sg - t[i];                                                                                 \
                }                                                                                                  \
                r *= g * norm;                                                                                     \
                break;                                                                                             \
            }                                                                                                      \
            }                                                                                                      \
            o[i] = w ? r * w[i] : r;                                                                               \
        }                                                                                                          \
    }

PW_MATH(f32, float, logf, log1pf, expf, fabsf)
PW_MATH(f64, double, log, log1p, exp, fabs)

/* ------------------------------------------------------------ checks */

static vt_status same_as_input(const vt_tensor *t, const vt_tensor *x, const char *what) {
    vt_status s = vt_tensor_validate(t, what);
    if (s != VT_OK) return s;
    int ok = t->ndim == x->ndim && vt_dtype_is_float(t->dtype);
    for (int d = 0; ok && d < x->ndim; d++) ok = t->sizes[d] == x->sizes[d];
    if (!ok) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: expected a floating tensor of the input's shape", what);
    return VT_OK;
}

static vt_status broadcastable(const vt_tensor *t, const vt_tensor *x, const char *what) {
    vt_status s = vt_tensor_validate(t, what);
    if (s != VT_OK) return s;
    if (!vt_dtype_is_float(t->dtype))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: expected a floating dtype", what);
    vt_tensor b;
    return vt_broadcast_to(t, x->ndim, x->sizes, &b);
}

vt_status vt_pointwise_loss_check(vt_loss_kind kind, const vt_tensor *out, const vt_tensor *input,
                                  const vt_tensor *target, const vt_tensor *weight, const vt_tensor *pos_weight,
                                  vt_loss_reduction reduction, int backward) {
    vt_status s;
    if ((unsigned)kind >= VT_POINTWISE_LOSS_COUNT)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "pointwise loss: invalid kind %d", (int)kind);
    if ((unsigned)reduction > VT_REDUCTION_SUM)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "pointwise loss: invalid reduction %d", (int)reduction);
    if (!out || !input || !target) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "pointwise loss: NULL tensor");
    if (weight && kind != VT_LOSS_BCE && kind != VT_LOSS_BCE_LOGITS)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "pointwise loss: only binary cross-entropy takes a weight");
    if (pos_weight && kind != VT_LOSS_BCE_LOGITS)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "pointwise loss: only BCE with logits takes a pos_weight");
    if ((s = vt_tensor_validate(input, "loss input")) != VT_OK) return s;
    if (!vt_dtype_is_float(input->dtype))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "loss: expected a floating input, got %s",
                            vt_dtype_name(input->dtype));
    if ((s = broadcastable(target, input, "loss target")) != VT_OK) return s;
    if (weight && (s = broadcastable(weight, input, "loss weight")) != VT_OK) return s;
    if (pos_weight && (s = broadcastable(pos_weight, input, "loss pos_weight")) != VT_OK) return s;
    if (backward) return same_as_input(out, input, "loss grad_input");
    if (reduction == VT_REDUCTION_NONE) return same_as_input(out, input, "loss out");
    if ((s = vt_tensor_validate(out, "loss out")) != VT_OK) return s;
    if (vt_tensor_numel(out) != 1 || !vt_dtype_is_float(out->dtype))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "loss out: expected a single floating element");
    return VT_OK;
}

/* ------------------------------------------------------------ driver */

typedef struct pw_ctx {
    vt_loss_kind kind;
    int bwd, reduce, f64;
    double param, norm;
    int present[PW_OPS];
    vt_dtype dt[PW_OPS];
    size_t es[PW_OPS];
    char *base[PW_OPS];
    int nd;
    int64_t sz[VT_MAX_DIMS], st[PW_OPS][VT_MAX_DIMS];
    int64_t numel;
    double *parts;
    _Atomic int bad, oom;
} pw_ctx;

static void pw_plan(pw_ctx *c, const vt_tensor *const *ops) {
    const vt_tensor *x = ops[OP_X];
    vt_tensor v[PW_OPS];
    for (int k = 0; k < PW_OPS; k++) {
        c->present[k] = ops[k] != NULL && !(k == OP_OUT && c->reduce);
        if (!c->present[k]) continue;
        vt_broadcast_to(ops[k], x->ndim, x->sizes, &v[k]); /* checked already */
        c->dt[k] = ops[k]->dtype;
        c->es[k] = vt_dtype_size(ops[k]->dtype);
        c->base[k] = vt_base(ops[k]);
    }
    c->numel = vt_tensor_numel(x);
    c->nd = 0;
    for (int d = 0; d < x->ndim; d++) {
        int64_t n = x->sizes[d];
        if (n == 1) continue;
        int j = c->nd, merge = j > 0;
        for (int k = 0; merge && k < PW_OPS; k++)
            if (c->present[k]) merge = c->st[k][j - 1] == v[k].strides[d] * n;
        if (merge) {
            c->sz[j - 1] *= n;
            for (int k = 0; k < PW_OPS; k++)
                if (c->present[k]) c->st[k][j - 1] = v[k].strides[d];
        } else {
            c->sz[j] = n;
            for (int k = 0; k < PW_OPS; k++)
                if (c->present[k]) c->st[k][j] = v[k].strides[d];
            c->nd++;
        }
    }
    if (c->nd == 0) { /* a single element (or a 0-dim input) */
        c->nd = 1;
        c->sz[0] = c->numel;
        for (int k = 0; k < PW_OPS; k++) c->st[k][0] = 0;
    }
}

static void pw_range(void *p, int64_t b, int64_t e) {
    pw_ctx *c = p;
    const size_t ces = c->f64 ? sizeof(double) : sizeof(float);
    const vt_dtype cdt = c->f64 ? VT_F64 : VT_F32;
    char *buf = malloc(PW_RUN * ces * PW_OPS);
    if (!buf) {
        c->oom = 1;
        return;
    }
    const int last = c->nd - 1;
    for (int64_t blk = b; blk < e; blk++) {
        int64_t lo = blk * PW_BLOCK, hi = lo + PW_BLOCK < c->numel ? lo + PW_BLOCK : c->numel;
        int64_t idx[VT_MAX_DIMS], rem = lo;
        for (int d = last; d >= 0; d--) idx[d] = rem % c->sz[d], rem /= c->sz[d];
        double acc = 0;
        for (int64_t pos = lo; pos < hi;) {
            int64_t n = c->sz[last] - idx[last];
            if (n > hi - pos) n = hi - pos;
            if (n > PW_RUN) n = PW_RUN;
            void *bp[PW_OPS] = {0};
            char *mp[PW_OPS] = {0};
            for (int k = 0; k < PW_OPS; k++) {
                if (!c->present[k]) continue;
                int64_t off = 0;
                for (int d = 0; d <= last; d++) off += idx[d] * c->st[k][d];
                mp[k] = c->base[k] + off * (int64_t)c->es[k];
                bp[k] = buf + (size_t)k * PW_RUN * ces;
                if (k != OP_OUT) vt_convert(c->dt[k], mp[k], c->st[k][last], cdt, bp[k], 1, n);
            }
            void *o = bp[OP_OUT] ? bp[OP_OUT] : buf; /* reductions stage the losses in slot 0 */
            if (c->bwd) {
                if (c->f64) bwd_f64(c->kind, n, bp[OP_X], bp[OP_T], bp[OP_W], bp[OP_PW], bp[OP_GO], c->norm, c->param, o);
                else bwd_f32(c->kind, n, bp[OP_X], bp[OP_T], bp[OP_W], bp[OP_PW], bp[OP_GO], (float)c->norm,
                             (float)c->param, o);
            } else {
                int bad = c->f64 ? fwd_f64(c->kind, n, bp[OP_X], bp[OP_T], bp[OP_W], bp[OP_PW], c->param, o)
                                 : fwd_f32(c->kind, n, bp[OP_X], bp[OP_T], bp[OP_W], bp[OP_PW], (float)c->param, o);
                if (bad) atomic_fetch_or(&c->bad, bad);
            }
            if (c->reduce) {
                if (c->f64) for (int64_t i = 0; i < n; i++) acc += ((const double *)o)[i];
                else for (int64_t i = 0; i < n; i++) acc += ((const float *)o)[i];
            } else {
                vt_convert(cdt, o, 1, c->dt[OP_OUT], mp[OP_OUT], c->st[OP_OUT][last], n);
            }
            pos += n;
            idx[last] += n;
            for (int d = last; d > 0 && idx[d] == c->sz[d]; d--) idx[d] = 0, idx[d - 1]++;
        }
        if (c->reduce) c->parts[blk] = acc;
    }
    free(buf);
}

static vt_status pw_run(pw_ctx *c, const vt_tensor *const *ops, const vt_tensor *scalar_out) {
    pw_plan(c, ops);
    int64_t nb = (c->numel + PW_BLOCK - 1) / PW_BLOCK;
    if (c->reduce) {
        c->parts = malloc((size_t)(nb ? nb : 1) * sizeof(double));
        if (!c->parts) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "loss: out of host memory");
    }
    vt_parallel_for(nb, 1, pw_range, c);
    double sum = 0;
    if (c->reduce)
        for (int64_t i = 0; i < nb; i++) sum += c->parts[i];
    free(c->parts);
    if (c->oom) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "loss: out of host memory");
    if (c->bad & BAD_INPUT) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "all elements of input should be between 0 and 1");
    if (c->bad & BAD_TARGET)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "all elements of target should be between 0 and 1");
    if (c->reduce) vt_sm_store(scalar_out, scalar_out->offset, c->reduce == VT_REDUCTION_MEAN ? sum / (double)c->numel : sum);
    return VT_OK;
}

static vt_dtype compute_of(const vt_tensor *const *ops) {
    for (int k = 0; k < PW_OPS; k++)
        if (ops[k] && ops[k]->dtype == VT_F64) return VT_F64;
    return VT_F32;
}

vt_status vt_pointwise_loss(vt_loss_kind kind, const vt_tensor *out, const vt_tensor *input,
                            const vt_tensor *target, const vt_tensor *weight, const vt_tensor *pos_weight,
                            vt_loss_reduction reduction, double param) {
    vt_status s = vt_pointwise_loss_check(kind, out, input, target, weight, pos_weight, reduction, 0);
    if (s != VT_OK) return s;
    pw_ctx c;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    c.reduce = reduction;
    c.param = param;
    const vt_tensor *ops[PW_OPS] = {out, input, target, weight, pos_weight, NULL};
    c.f64 = compute_of(ops) == VT_F64;
    return pw_run(&c, ops, out);
}

vt_status vt_pointwise_loss_backward(vt_loss_kind kind, const vt_tensor *grad_input, const vt_tensor *grad_out,
                                     const vt_tensor *input, const vt_tensor *target, const vt_tensor *weight,
                                     const vt_tensor *pos_weight, vt_loss_reduction reduction, double param) {
    vt_status s = vt_pointwise_loss_check(kind, grad_input, input, target, weight, pos_weight, reduction, 1);
    if (s != VT_OK) return s;
    if (!grad_out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "loss backward: grad_output is NULL");
    if ((s = broadcastable(grad_out, input, "loss grad_output")) != VT_OK) return s;
    pw_ctx c;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    c.bwd = 1;
    c.param = param;
    double numel = (double)vt_tensor_numel(input);
    c.norm = kind == VT_LOSS_MSE ? 2.0 : 1.0;
    if (reduction == VT_REDUCTION_MEAN) c.norm /= numel;
    const vt_tensor *ops[PW_OPS] = {grad_input, input, target, weight, pos_weight, grad_out};
    c.f64 = compute_of(ops) == VT_F64;
    return pw_run(&c, ops, NULL);
}
