/* ops_softmax.c — queued softmax and losses: the kernels' argument checks
 * run on the calling thread (bad shapes and dtypes fail at the op), the
 * op reaches the device queue (softmax as a node, graph/node.h; the losses
 * as commands), and the synchronous kernel runs there, where data-dependent
 * errors (a target out of range, a BCE input outside [0, 1]) are latched for
 * the next synchronisation. */
#include "graph/node.h"
#include "internal.h"
#include "kernels/softmax/softmax.h"


static vt_status fail(vt_status s, const char *name) {
    return s == VT_ERR_INDEX ? s : vt_error_prefix(s, name);
}

/* ------------------------------------------------------------ softmax: nodes */

vt_status vt_op_softmax(int dev, const char *name, const vt_tensor *out, const vt_tensor *in, int dim, int log) {
    vt_node n;
    vt_node_init(&n, VT_NODE_SOFTMAX, log != 0, name ? name : "vt_op_softmax");
    n.iparams[0] = dim;
    vt_node_add_out(&n, out);
    vt_status s = vt_node_add_src(&n, in, NULL);
    return s == VT_OK ? vt_node_submit(dev, &n) : s;
}

vt_status vt_op_softmax_backward(int dev, const char *name, const vt_tensor *grad_in, const vt_tensor *grad_out,
                                 const vt_tensor *y, int dim, int log) {
    vt_node n;
    vt_node_init(&n, VT_NODE_SOFTMAX_BACKWARD, log != 0, name ? name : "vt_op_softmax_backward");
    n.iparams[0] = dim;
    vt_node_add_out(&n, grad_in);
    vt_status s = vt_node_add_src(&n, grad_out, NULL);
    if (s == VT_OK) s = vt_node_add_src(&n, y, NULL);
    return s == VT_OK ? vt_node_submit(dev, &n) : s;
}

/* ------------------------------------------------------------ nll */

/* Losses read their inputs while they write (a reduction): overlapping
 * inputs are copied first. */
#define LOSS_IN (VT_USE_READ | VT_USE_STAGE)

typedef struct nll_cmd {
    int bwd, has_weight, has_tw;
    vt_loss_reduction reduction;
    int64_t ignore_index;
    vt_tensor out, tw, input, target, weight, grad_out;
} nll_cmd;

static vt_status nll_kernel(void *p) {
    const nll_cmd *c = p;
    const vt_tensor *w = c->has_weight ? &c->weight : NULL, *tw = c->has_tw ? &c->tw : NULL;
    if (c->bwd) return vt_nll_loss_backward(&c->out, &c->grad_out, &c->input, &c->target, w, c->reduction,
                                            c->ignore_index, tw);
    return vt_nll_loss(&c->out, tw, &c->input, &c->target, w, c->reduction, c->ignore_index);
}

static void nll_fill(nll_cmd *c, const vt_tensor *out, const vt_tensor *tw, const vt_tensor *input,
                     const vt_tensor *target, const vt_tensor *weight, vt_loss_reduction reduction, int64_t ignore) {
    memset(c, 0, sizeof *c);
    c->reduction = reduction;
    c->ignore_index = ignore;
    c->out = *out;
    c->input = *input;
    c->target = *target;
    if ((c->has_weight = weight != NULL)) c->weight = *weight;
    if ((c->has_tw = tw != NULL)) c->tw = *tw;
}

vt_status vt_op_nll_loss(int dev, const char *name, const vt_tensor *out, const vt_tensor *total_weight,
                         const vt_tensor *input, const vt_tensor *target, const vt_tensor *weight,
                         vt_loss_reduction reduction, int64_t ignore_index) {
    if (!name) name = "vt_op_nll_loss";
    vt_status s = vt_check_device(dev);
    if (s != VT_OK) return s;
    if ((s = vt_nll_loss_check(out, total_weight, input, target, weight, reduction)) != VT_OK) return fail(s, name);
    nll_cmd c;
    nll_fill(&c, out, total_weight, input, target, weight, reduction, ignore_index);
    vt_use u[5] = {{&c.out, VT_USE_WRITE, 0}, {&c.input, LOSS_IN, 0}, {&c.target, LOSS_IN, 0}};
    int n = 3;
    if (c.has_tw) u[n++] = (vt_use){&c.tw, VT_USE_WRITE, 0};
    if (c.has_weight) u[n++] = (vt_use){&c.weight, LOSS_IN, 0};
    return vt_enqueue_uses(dev, name, nll_kernel, &c, sizeof c, u, n);
}

vt_status vt_op_nll_loss_backward(int dev, const char *name, const vt_tensor *grad_input, const vt_tensor *grad_out,
                                  const vt_tensor *input, const vt_tensor *target, const vt_tensor *weight,
                                  vt_loss_reduction reduction, int64_t ignore_index, const vt_tensor *total_weight) {
    if (!name) name = "vt_op_nll_loss_backward";
    vt_status s = vt_check_device(dev);
    if (s != VT_OK) return s;
    if ((s = vt_nll_loss_backward_check(grad_input, grad_out, input, target, weight, reduction, total_weight)) !=
        VT_OK)
        return fail(s, name);
    nll_cmd c;
    nll_fill(&c, grad_input, total_weight, input, target, weight, reduction, ignore_index);
    c.bwd = 1;
    c.grad_out = *grad_out;
    vt_use u[6] = {{&c.out, VT_USE_WRITE, 0}, {&c.grad_out, LOSS_IN, 0}, {&c.input, LOSS_IN, 0}, {&c.target, LOSS_IN, 0}};
    int n = 4;
    if (c.has_tw) u[n++] = (vt_use){&c.tw, LOSS_IN, 0};
    if (c.has_weight) u[n++] = (vt_use){&c.weight, LOSS_IN, 0};
    return vt_enqueue_uses(dev, name, nll_kernel, &c, sizeof c, u, n);
}

/* ------------------------------------------------------------ pointwise losses */

typedef struct pw_cmd {
    int bwd, has_weight, has_pw;
    vt_loss_kind kind;
    vt_loss_reduction reduction;
    double param;
    vt_tensor out, input, target, weight, pos_weight, grad_out;
} pw_cmd;

static vt_status pw_kernel(void *p) {
    const pw_cmd *c = p;
    const vt_tensor *w = c->has_weight ? &c->weight : NULL, *pw = c->has_pw ? &c->pos_weight : NULL;
    if (c->bwd)
        return vt_pointwise_loss_backward(c->kind, &c->out, &c->grad_out, &c->input, &c->target, w, pw, c->reduction,
                                          c->param);
    return vt_pointwise_loss(c->kind, &c->out, &c->input, &c->target, w, pw, c->reduction, c->param);
}

static void pw_fill(pw_cmd *c, vt_loss_kind kind, const vt_tensor *out, const vt_tensor *input,
                    const vt_tensor *target, const vt_tensor *weight, const vt_tensor *pos_weight,
                    vt_loss_reduction reduction, double param) {
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->reduction = reduction;
    c->param = param;
    c->out = *out;
    c->input = *input;
    c->target = *target;
    if ((c->has_weight = weight != NULL)) c->weight = *weight;
    if ((c->has_pw = pos_weight != NULL)) c->pos_weight = *pos_weight;
}

static vt_status pw_enqueue(int dev, const char *name, pw_cmd *c) {
    vt_use u[6] = {{&c->out, VT_USE_WRITE, 0}, {&c->input, LOSS_IN, 0}, {&c->target, LOSS_IN, 0}};
    int n = 3;
    if (c->has_weight) u[n++] = (vt_use){&c->weight, LOSS_IN, 0};
    if (c->has_pw) u[n++] = (vt_use){&c->pos_weight, LOSS_IN, 0};
    if (c->bwd) u[n++] = (vt_use){&c->grad_out, LOSS_IN, 0};
    return vt_enqueue_uses(dev, name, pw_kernel, c, sizeof *c, u, n);
}

vt_status vt_op_pointwise_loss(int dev, const char *name, vt_loss_kind kind, const vt_tensor *out,
                               const vt_tensor *input, const vt_tensor *target, const vt_tensor *weight,
                               const vt_tensor *pos_weight, vt_loss_reduction reduction, double param) {
    if (!name) name = "vt_op_pointwise_loss";
    vt_status s = vt_check_device(dev);
    if (s != VT_OK) return s;
    if ((s = vt_pointwise_loss_check(kind, out, input, target, weight, pos_weight, reduction, 0)) != VT_OK)
        return fail(s, name);
    pw_cmd c;
    pw_fill(&c, kind, out, input, target, weight, pos_weight, reduction, param);
    return pw_enqueue(dev, name, &c);
}

vt_status vt_op_pointwise_loss_backward(int dev, const char *name, vt_loss_kind kind,
                                        const vt_tensor *grad_input, const vt_tensor *grad_out,
                                        const vt_tensor *input, const vt_tensor *target, const vt_tensor *weight,
                                        const vt_tensor *pos_weight, vt_loss_reduction reduction, double param) {
    if (!name) name = "vt_op_pointwise_loss_backward";
    vt_status s = vt_check_device(dev);
    if (s != VT_OK) return s;
    if ((s = vt_pointwise_loss_check(kind, grad_input, input, target, weight, pos_weight, reduction, 1)) != VT_OK)
        return fail(s, name);
    if (!grad_out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: grad_output is NULL", name);
    vt_tensor b;
    if ((s = vt_broadcast_to(grad_out, input->ndim, input->sizes, &b)) != VT_OK) return fail(s, name);
    pw_cmd c;
    pw_fill(&c, kind, grad_input, input, target, weight, pos_weight, reduction, param);
    c.bwd = 1;
    c.grad_out = *grad_out;
    return pw_enqueue(dev, name, &c);
}
