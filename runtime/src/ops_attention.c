/* ops_attention.c — queued scaled dot-product attention: the kernels'
 * argument checks run on the calling thread, then the descriptors are
 * copied into a command (compact: every operand has at most 4 dims, and
 * the backward's eleven full descriptors would not fit VT_MAX_ARGS). */
#include "internal.h"
#include "kernels/attention/attention.h"

typedef struct attn_desc {
    void *data;
    int32_t dtype, ndim; /* ndim -1: absent */
    int64_t offset, sizes[4], strides[4];
} attn_desc;

static attn_desc pack_desc(const vt_tensor *t) {
    attn_desc d;
    memset(&d, 0, sizeof d);
    d.ndim = -1;
    if (!t) return d;
    d.data = t->data, d.dtype = (int32_t)t->dtype, d.ndim = t->ndim, d.offset = t->offset;
    for (int i = 0; i < t->ndim && i < 4; i++) d.sizes[i] = t->sizes[i], d.strides[i] = t->strides[i];
    return d;
}

/* NULL when absent. */
static const vt_tensor *unpack_desc(const attn_desc *d, vt_tensor *t) {
    if (d->ndim < 0) return NULL;
    memset(t, 0, sizeof *t);
    t->data = d->data, t->dtype = (vt_dtype)d->dtype, t->ndim = d->ndim, t->offset = d->offset;
    for (int i = 0; i < d->ndim; i++) t->sizes[i] = d->sizes[i], t->strides[i] = d->strides[i];
    return t;
}

enum { T_OUT, T_LSE, T_Q, T_K, T_V, T_MASK, T_DOUT, T_DQ, T_DK, T_DV, T_COUNT };

typedef struct attn_cmd {
    attn_desc t[T_COUNT];
    double scale;
    int causal, backward;
    vt_precision prec;
} attn_cmd;

static vt_status attn_kernel(void *args) {
    const attn_cmd *c = args;
    vt_tensor t[T_COUNT];
    const vt_tensor *p[T_COUNT];
    for (int i = 0; i < T_COUNT; i++) p[i] = unpack_desc(&c->t[i], &t[i]);
    if (!c->backward)
        return vt_sdpa_forward(p[T_OUT], p[T_LSE], p[T_Q], p[T_K], p[T_V], p[T_MASK], c->scale, c->causal, c->prec);
    return vt_sdpa_backward(p[T_DQ], p[T_DK], p[T_DV], p[T_DOUT], p[T_Q], p[T_K], p[T_V], p[T_MASK], p[T_OUT],
                            p[T_LSE], c->scale, c->causal, c->prec);
}

static vt_status enqueue_attn(int dev, const char *name, int backward, const vt_tensor *const *ts, double scale,
                              int is_causal, vt_precision prec) {
    vt_status s = vt_check_device(dev);
    if (s != VT_OK) return s;
    vt_attn_problem p;
    s = vt_attn_setup(&p, name, backward, ts[T_OUT], ts[T_LSE], ts[T_Q], ts[T_K], ts[T_V], ts[T_MASK], ts[T_DOUT],
                      ts[T_DQ], ts[T_DK], ts[T_DV], scale, is_causal, prec);
    if (s != VT_OK) return s;
    /* Outputs: out and lse forward, the three gradients backward; the
     * kernel reads its inputs while writing, so overlaps are copied. */
    vt_tensor loc[T_COUNT];
    vt_use u[T_COUNT];
    int n = 0;
    for (int i = 0; i < T_COUNT; i++) {
        if (!ts[i]) continue;
        loc[i] = *ts[i];
        int out = backward ? i == T_DQ || i == T_DK || i == T_DV : i == T_OUT || i == T_LSE;
        u[n++] = (vt_use){&loc[i], out ? VT_USE_WRITE : VT_USE_READ | VT_USE_STAGE, 0};
    }
    vt_prepared pr;
    if ((s = vt_uses_prepare(dev, name, u, n, &pr)) != VT_OK) return s;
    attn_cmd c;
    memset(&c, 0, sizeof c);
    for (int i = 0; i < T_COUNT; i++) c.t[i] = pack_desc(ts[i] ? &loc[i] : NULL);
    c.scale = scale, c.causal = is_causal, c.backward = backward, c.prec = prec;
    return vt_enqueue_prepared(dev, name, attn_kernel, &c, sizeof c, &pr, VT_ENQ_AUTO);
}

vt_status vt_op_sdpa_forward(int dev, const char *name, const vt_tensor *out, const vt_tensor *lse,
                             const vt_tensor *q, const vt_tensor *k, const vt_tensor *v, const vt_tensor *mask,
                             double scale, int is_causal, vt_precision prec) {
    if (!name) name = "vt_op_sdpa_forward";
    const vt_tensor *ts[T_COUNT] = {out, lse, q, k, v, mask, NULL, NULL, NULL, NULL};
    return enqueue_attn(dev, name, 0, ts, scale, is_causal, prec);
}

vt_status vt_op_sdpa_backward(int dev, const char *name, const vt_tensor *dq, const vt_tensor *dk,
                              const vt_tensor *dv, const vt_tensor *dout, const vt_tensor *q, const vt_tensor *k,
                              const vt_tensor *v, const vt_tensor *mask, const vt_tensor *out,
                              const vt_tensor *lse, double scale, int is_causal, vt_precision prec) {
    if (!name) name = "vt_op_sdpa_backward";
    const vt_tensor *ts[T_COUNT] = {out, lse, q, k, v, mask, dout, dq, dk, dv};
    return enqueue_attn(dev, name, 1, ts, scale, is_causal, prec);
}
