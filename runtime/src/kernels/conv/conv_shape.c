/* conv_shape.c — argument checks shared by the three convolution entry
 * points and their queued ops: parameters, ranks, dtypes, group and channel
 * counts, the output size. Messages follow PyTorch's where it has one, so the
 * binding can raise them unchanged. */
#include <stdio.h>

#include "kernels/conv/conv.h"

static const char *entry_name(vt_conv_kind kind) {
    switch (kind) {
    case VT_CONV_FORWARD: return "vt_conv_forward";
    case VT_CONV_BACKWARD_INPUT: return "vt_conv_backward_input";
    default: return "vt_conv_backward_weight";
    }
}

/* "[8, 3, 3, 3]" */
static void shape_text(const vt_tensor *t, char *buf, size_t len) {
    size_t used = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < t->ndim && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? ", " : "", (long long)t->sizes[i]);
    if (used < len) snprintf(buf + used, len - used, "]");
}

/* "(12 x 12)" over the spatial dims of v[0 .. spatial). */
static void dims_text(const int64_t *v, int spatial, char *buf, size_t len) {
    size_t used = (size_t)snprintf(buf, len, "(");
    for (int i = 0; i < spatial && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? " x " : "", (long long)v[i]);
    if (used < len) snprintf(buf + used, len - used, ")");
}

static vt_status check_params(const char *fn, const vt_conv_params *p) {
    if (!p) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: conv params are NULL", fn);
    if (p->spatial < 1 || p->spatial > 3)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: convolution needs 1, 2 or 3 spatial dims, got %d", fn,
                            (int)p->spatial);
    for (int d = 0; d < p->spatial; d++)
        if (p->stride[d] <= 0) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "non-positive stride is not supported");
    for (int d = 0; d < p->spatial; d++)
        if (p->padding[d] < 0) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "negative padding is not supported");
    for (int d = 0; d < p->spatial; d++)
        if (p->dilation[d] <= 0)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "non-positive dilation is not supported");
    if (p->groups <= 0) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "non-positive groups is not supported");
    return VT_OK;
}

static vt_status check_tensor(const char *fn, const vt_tensor *t, const char *what) {
    if (!t) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, what);
    vt_status s = vt_tensor_validate(t, what);
    if (s != VT_OK) {
        char msg[900];
        snprintf(msg, sizeof msg, "%s", vt_last_error());
        return vt_set_error(s, "%s: %s", fn, msg);
    }
    return VT_OK;
}

static vt_status check_dtype(const vt_tensor *x, const vt_tensor *t, const char *what) {
    if (t->dtype != x->dtype)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "Input type (%s) and %s type (%s) should be the same",
                            vt_dtype_name(x->dtype), what, vt_dtype_name(t->dtype));
    return VT_OK;
}

vt_status vt_conv_check(vt_conv_kind kind, const vt_tensor *x, const vt_tensor *w, const vt_tensor *y,
                        const vt_tensor *bias, const vt_conv_params *p, vt_precision prec, vt_conv_geom *g) {
    const char *fn = entry_name(kind);
    const char *xname = kind == VT_CONV_BACKWARD_INPUT ? "grad_input" : "input";
    const char *wname = kind == VT_CONV_BACKWARD_WEIGHT ? "grad_weight" : "weight";
    const char *yname = kind == VT_CONV_FORWARD ? "out" : "grad_output";
    vt_status s = check_params(fn, p);
    if (s == VT_OK) s = check_tensor(fn, x, xname);
    if (s == VT_OK) s = check_tensor(fn, w, wname);
    if (s == VT_OK) s = check_tensor(fn, y, yname);
    if (s == VT_OK && bias) s = check_tensor(fn, bias, "bias");
    if (s != VT_OK) return s;
    if ((unsigned)prec > VT_PRECISION_HIGHEST)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: invalid precision %d", fn, (int)prec);

    s = check_dtype(x, w, wname);
    if (s == VT_OK) s = check_dtype(x, y, yname);
    if (s == VT_OK && bias) s = check_dtype(x, bias, "bias");
    if (s != VT_OK) return s;
    if (!vt_dtype_is_float(x->dtype))
        return vt_set_error(VT_ERR_UNSUPPORTED, "%s: %s tensors are not supported (float32, bfloat16, float16, "
                            "float64 only)", fn, vt_dtype_name(x->dtype));

    int sp = p->spatial, nd = sp + 2;
    char ws[200], xs[200], ys[200];
    shape_text(w, ws, sizeof ws);
    shape_text(x, xs, sizeof xs);
    shape_text(y, ys, sizeof ys);
    if (w->ndim != nd)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: expected %d-dimensional %s for %d spatial dims, but got "
                            "%s of size %s", fn, nd, wname, sp, wname, ws);
    if (x->ndim != nd)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "Expected %d-dimensional %s for %d-dimensional weight %s, but "
                            "got %d-dimensional %s of size %s instead", nd, xname, nd, ws, (int)x->ndim, xname, xs);
    for (int d = 0; d < sp; d++)
        if (w->sizes[2 + d] <= 0)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: kernel sizes must be positive, but got %s of size %s",
                                fn, wname, ws);

    memset(g, 0, sizeof *g);
    g->spatial = sp;
    g->dtype = x->dtype;
    g->N = x->sizes[0];
    g->C = x->sizes[1];
    g->O = w->sizes[0];
    g->G = p->groups;
    if (g->O < g->G)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "Given groups=%lld, expected weight to be at least %lld at "
                            "dimension 0, but got weight of size %s instead", (long long)g->G, (long long)g->G, ws);
    if (g->O % g->G) /* PyTorch prints this size in double brackets */
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "Given groups=%lld, expected weight to be divisible by %lld at "
                            "dimension 0, but got weight of size [%s] instead", (long long)g->G, (long long)g->G, ws);
    if (g->C != w->sizes[1] * g->G)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "Given groups=%lld, weight of size %s, expected %s%s to have "
                            "%lld channels, but got %lld channels instead", (long long)g->G, ws, xname, xs,
                            (long long)(w->sizes[1] * g->G), (long long)g->C);
    g->Cg = g->C / g->G;
    g->Og = g->O / g->G;
    if (g->N > 0 && g->C > 0)
        for (int d = 0; d < sp; d++)
            if (x->sizes[2 + d] == 0)
                return vt_set_error(VT_ERR_INVALID_ARGUMENT, "Only zero batch or zero channel inputs are supported, "
                                    "but got %s shape: %s", xname, xs);

    /* Pad to 3 spatial dims (leading unit dims). */
    int lead = 3 - sp;
    for (int d = 0; d < 3; d++) {
        g->in[d] = g->k[d] = g->out[d] = g->stride[d] = g->dil[d] = 1;
        g->pad[d] = 0;
    }
    int64_t padded[3], dk[3], outs[3];
    int too_small = 0;
    for (int d = 0; d < sp; d++) {
        g->in[lead + d] = x->sizes[2 + d];
        g->k[lead + d] = w->sizes[2 + d];
        g->stride[lead + d] = p->stride[d];
        g->pad[lead + d] = p->padding[d];
        g->dil[lead + d] = p->dilation[d];
        padded[d] = x->sizes[2 + d] + 2 * p->padding[d];
        dk[d] = p->dilation[d] * (w->sizes[2 + d] - 1) + 1;
        int64_t span = padded[d] - dk[d]; /* floor division, as PyTorch's output size */
        outs[d] = (span >= 0 ? span / p->stride[d] : -((-span + p->stride[d] - 1) / p->stride[d])) + 1;
        if (outs[d] <= 0) too_small = 1;
        g->out[lead + d] = outs[d];
    }
    if (too_small) {
        char ps[120], ks[120], os[120];
        dims_text(padded, sp, ps, sizeof ps);
        dims_text(dk, sp, ks, sizeof ks);
        dims_text(outs, sp, os, sizeof os);
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "Calculated padded input size per channel: %s. Kernel size: %s. "
                            "Kernel size can't be greater than actual input size (calculated output size per "
                            "channel %s is too small)", ps, ks, os);
    }
    g->in_prod = g->in[0] * g->in[1] * g->in[2];
    g->k_prod = g->k[0] * g->k[1] * g->k[2];
    g->out_prod = g->out[0] * g->out[1] * g->out[2];

    if (bias && (bias->ndim != 1 || bias->sizes[0] != g->O)) {
        char bs[200];
        shape_text(bias, bs, sizeof bs);
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "Given weight of size %s, expected bias to be 1-dimensional "
                            "with %lld elements, but got bias of size %s instead", ws, (long long)g->O, bs);
    }

    /* The output-shaped tensor: [N, O, *out]. */
    int ok = y->ndim == nd && y->sizes[0] == g->N && y->sizes[1] == g->O;
    for (int d = 0; ok && d < sp; d++) ok = y->sizes[2 + d] == outs[d];
    if (!ok) {
        char want[200];
        vt_tensor e = *y;
        e.ndim = nd;
        e.sizes[0] = g->N;
        e.sizes[1] = g->O;
        for (int d = 0; d < sp; d++) e.sizes[2 + d] = outs[d];
        shape_text(&e, want, sizeof want);
        if (kind != VT_CONV_FORWARD && y->ndim == nd && y->sizes[1] != g->O)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "Given groups=%lld, weight of size %s, expected %s%s to "
                                "have %lld channels, but got %lld channels instead", (long long)g->G, ws, yname, ys,
                                (long long)g->O, (long long)y->sizes[1]);
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: expected %s of size %s for %s of size %s and weight of "
                            "size %s, but got %s", fn, yname, want, xname, xs, ws, ys);
    }
    return VT_OK;
}

vt_tensor vt_conv_view5(const vt_tensor *t, int spatial) {
    vt_tensor r = *t;
    int lead = 3 - spatial;
    r.ndim = 5;
    for (int d = 0; d < 3; d++) {
        if (d < lead) {
            r.sizes[2 + d] = 1;
            r.strides[2 + d] = 0;
        } else {
            r.sizes[2 + d] = t->sizes[2 + d - lead];
            r.strides[2 + d] = t->strides[2 + d - lead];
        }
    }
    return r;
}
