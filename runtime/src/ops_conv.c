/* ops_conv.c — queued convolution ops: the whole argument check runs on
 * the calling thread (so a bad shape fails at the op, not at the next
 * synchronisation), then the descriptors and parameters are copied into a
 * command whose trampoline runs the synchronous kernel on the device queue. */

#include "internal.h"
#include "kernels/conv/conv.h"

static vt_status check_data(const char *name, const vt_tensor *t, const char *what) {
    if (t && !t->data && vt_tensor_numel(t) > 0)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s has no data", name, what);
    return VT_OK;
}

typedef struct conv_cmd {
    vt_conv_kind kind;
    vt_tensor t0, t1, t2, bias; /* forward: out, input, weight; input grad: grad_input, grad_out, weight;
                                   weight grad: grad_weight, grad_out, input */
    int has_bias;
    vt_conv_params p;
    vt_precision prec;
} conv_cmd;

static vt_status conv_kernel(void *args) {
    const conv_cmd *c = args;
    switch (c->kind) {
    case VT_CONV_FORWARD:
        return vt_conv_forward(&c->t0, &c->t1, &c->t2, c->has_bias ? &c->bias : NULL, &c->p, c->prec);
    case VT_CONV_BACKWARD_INPUT: return vt_conv_backward_input(&c->t0, &c->t1, &c->t2, &c->p, c->prec);
    default: return vt_conv_backward_weight(&c->t0, &c->t1, &c->t2, &c->p, c->prec);
    }
}

/* x, w, y: the input-, weight- and output-shaped tensors, for the check. */
static vt_status enqueue_conv(int dev, const char *name, vt_conv_kind kind, const vt_tensor *x, const vt_tensor *w,
                              const vt_tensor *y, const vt_tensor *bias, const vt_tensor *t0, const vt_tensor *t1,
                              const vt_tensor *t2, const vt_conv_params *p, vt_precision prec) {
    vt_status s = vt_check_device(dev);
    if (s != VT_OK) return s;
    vt_conv_geom g;
    s = vt_conv_check(kind, x, w, y, bias, p, prec, &g);
    if (s != VT_OK) return vt_error_prefix(s, name);
    const vt_tensor *all[4] = {t0, t1, t2, bias};
    static const char *const names[3][4] = {{"out", "input", "weight", "bias"},
                                            {"grad_input", "grad_output", "weight", "bias"},
                                            {"grad_weight", "grad_output", "input", "bias"}};
    for (int i = 0; i < 4 && s == VT_OK; i++) s = check_data(name, all[i], names[kind][i]);
    if (s != VT_OK) return s;
    conv_cmd c;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    c.t0 = *t0;
    c.t1 = *t1;
    c.t2 = *t2;
    c.has_bias = bias != NULL;
    if (bias) c.bias = *bias;
    c.p = *p;
    c.prec = prec;
    vt_use u[4] = {{&c.t0, VT_USE_WRITE, 0}, {&c.t1, VT_USE_READ | VT_USE_STAGE, 0}, {&c.t2, VT_USE_READ | VT_USE_STAGE, 0}};
    int n = 3;
    if (bias) u[n++] = (vt_use){&c.bias, VT_USE_READ | VT_USE_STAGE, 0};
    return vt_enqueue_uses(dev, name, conv_kernel, &c, sizeof c, u, n);
}

vt_status vt_op_conv_forward(int dev, const char *name, const vt_tensor *out, const vt_tensor *input,
                             const vt_tensor *weight, const vt_tensor *bias, const vt_conv_params *p,
                             vt_precision prec) {
    if (!name) name = "vt_op_conv_forward";
    return enqueue_conv(dev, name, VT_CONV_FORWARD, input, weight, out, bias, out, input, weight, p, prec);
}

vt_status vt_op_conv_backward_input(int dev, const char *name, const vt_tensor *grad_input,
                                    const vt_tensor *grad_out, const vt_tensor *weight, const vt_conv_params *p,
                                    vt_precision prec) {
    if (!name) name = "vt_op_conv_backward_input";
    return enqueue_conv(dev, name, VT_CONV_BACKWARD_INPUT, grad_input, weight, grad_out, NULL, grad_input, grad_out,
                        weight, p, prec);
}

vt_status vt_op_conv_backward_weight(int dev, const char *name, const vt_tensor *grad_weight,
                                     const vt_tensor *grad_out, const vt_tensor *input, const vt_conv_params *p,
                                     vt_precision prec) {
    if (!name) name = "vt_op_conv_backward_weight";
    return enqueue_conv(dev, name, VT_CONV_BACKWARD_WEIGHT, input, grad_weight, grad_out, NULL, grad_weight,
                        grad_out, input, p, prec);
}
