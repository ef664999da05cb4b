/* node_kinds.c — what each node kind is: its check (run once, when the node
 * is built: the checks every op ran at enqueue before ops were nodes, valid
 * descriptors with data, inputs that broadcast to the output, a valid op and
 * compute dtype), its kernel, its scalar reference and, for the elementwise
 * kinds, its plan; the families' catalogue names; and the one table
 * (vt_node_kinds) the queue, the recorder and the tests go through. */
#include "graph/defer.h"
#include "graph/node.h"
#include "kernels/attention/attention.h"
#include "kernels/conv/conv.h"
#include "kernels/index/index.h"
#include "kernels/norm/norm.h"
#include "kernels/rnn/rnn.h"
#include "kernels/pool/pool.h"
#include "kernels/shape/shape.h"
#include "kernels/softmax/softmax.h"

/* ------------------------------------------------------------ checks */

vt_status vt_node_check_compute(const vt_node *n) {
    if ((int)n->compute < 0 || n->compute >= VT_DTYPE_COUNT)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: invalid compute dtype %d", n->name, (int)n->compute);
    return VT_OK;
}

/* out and the tensor inputs (host scalars were made by the builder). */
static vt_status check_operands(const vt_node *n, int nsrc, const char *const *what, const char *out_what) {
    vt_status s0 = vt_node_check_counts(n, 1, nsrc);
    if (s0 == VT_OK && n->absent) s0 = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: no output given", n->name);
    if (s0 != VT_OK) return s0;
    vt_status s = vt_check_operand(n->name, &n->out[0], out_what);
    for (int k = 0; k < nsrc && s == VT_OK; k++)
        if (!(n->host >> k & 1)) s = vt_check_input(n->name, &n->src[k], what[k], &n->out[0]);
    return s;
}

static vt_status check_op(const vt_node *n, int count, const char *family) {
    if (n->op < 0 || n->op >= count)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: invalid %s op %d", n->name, family, (int)n->op);
    return vt_node_check_compute(n);
}

static const char *const what_unary[] = {"input"};
static const char *const what_binary[] = {"input", "other"};
static const char *const what_ternary[] = {"input", "tensor1", "tensor2"};
static const char *const what_where[] = {"condition", "input", "other"};
static const char *const what_copy[] = {"src"};

static vt_status unary_check(const vt_node *n) {
    vt_status s = check_op(n, VT_UNARY_OP_COUNT, "unary");
    return s == VT_OK ? check_operands(n, 1, what_unary, "out") : s;
}
static vt_status binary_check(const vt_node *n) {
    vt_status s = check_op(n, VT_BINARY_OP_COUNT, "binary");
    return s == VT_OK ? check_operands(n, 2, what_binary, "out") : s;
}
static vt_status ternary_check(const vt_node *n) {
    vt_status s = check_op(n, VT_TERNARY_OP_COUNT, "ternary");
    return s == VT_OK ? check_operands(n, 3, what_ternary, "out") : s;
}
static vt_status where_check(const vt_node *n) { return check_operands(n, 3, what_where, "out"); }
static vt_status copy_check(const vt_node *n) { return check_operands(n, 1, what_copy, "dst"); }
static vt_status fill_check(const vt_node *n) { return check_operands(n, 0, NULL, "out"); }

/* The reductions' own contracts (reduce_check.c), with PyTorch's wording:
 * a dimension error (VT_ERR_INDEX) keeps it exactly, others name the op. */
static vt_status named(const vt_node *n, vt_status s) {
    return s == VT_OK || s == VT_ERR_INDEX ? s : vt_error_prefix(s, n->name);
}

static vt_status reduce_check(const vt_node *n) {
    vt_status s = vt_node_check_counts(n, 1, 1);
    if (s == VT_OK && n->absent) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: out is NULL", n->name);
    if (s != VT_OK) return s;
    return named(n, vt_reduce_check((vt_reduce_op)n->op, &n->out[0], &n->src[0], (uint64_t)n->iparams[0],
                                    n->compute, n->params[0]));
}
static vt_status reduce_arg_check(const vt_node *n) {
    vt_status s = vt_node_check_counts(n, 2, 1);
    if (s == VT_OK && !vt_node_has_out(n, 0) && !vt_node_has_out(n, 1))
        s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: neither values nor indices given", n->name);
    if (s != VT_OK) return s;
    return named(n, vt_reduce_arg_check(n->op, vt_node_has_out(n, 0) ? &n->out[0] : NULL, vt_node_has_out(n, 1) ? &n->out[1] : NULL,
                                        &n->src[0], (int)n->iparams[0]));
}
static vt_status scan_check(const vt_node *n) {
    vt_status s = vt_node_check_counts(n, 1, 1);
    if (s == VT_OK && n->absent) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: out is NULL", n->name);
    if (s != VT_OK) return s;
    return named(n, vt_scan_check((vt_scan_op)n->op, &n->out[0], &n->src[0], (int)n->iparams[0], n->compute));
}

/* ------------------------------------------------------------ kernels */

/* The elementwise kinds are plans (kernels/elementwise/elementwise.c): run builds the
 * plan and runs it whole. */
static vt_status unary_plan(const vt_node *n, vt_ew_plan *p) {
    return vt_unary_plan(p, (vt_unary_op)n->op, &n->out[0], &n->src[0], n->compute, n->params);
}
static vt_status binary_plan(const vt_node *n, vt_ew_plan *p) {
    return vt_binary_plan(p, (vt_binary_op)n->op, &n->out[0], &n->src[0], &n->src[1], n->compute, n->alpha,
                          n->params);
}
static vt_status ternary_plan(const vt_node *n, vt_ew_plan *p) {
    return vt_ternary_plan(p, (vt_ternary_op)n->op, &n->out[0], &n->src[0], &n->src[1], &n->src[2], n->compute,
                           n->alpha);
}
static vt_status where_plan(const vt_node *n, vt_ew_plan *p) {
    return vt_where_plan(p, &n->out[0], &n->src[0], &n->src[1], &n->src[2]);
}
static vt_status copy_plan(const vt_node *n, vt_ew_plan *p) { return vt_copy_plan(p, &n->out[0], &n->src[0]); }
static vt_status fill_plan(const vt_node *n, vt_ew_plan *p) { return vt_fill_plan(p, &n->out[0], n->alpha); }

static vt_status plan_run(const vt_node *n) {
    vt_ew_plan p;
    vt_status s = vt_node_kinds[n->kind].plan(n, &p);
    return s == VT_OK ? vt_ew_plan_run(&p) : s;
}

static vt_status unary_ref(const vt_node *n) {
    return vt_ref_unary_ex((vt_unary_op)n->op, &n->out[0], &n->src[0], n->compute, n->params);
}
static vt_status binary_ref(const vt_node *n) {
    return vt_ref_binary_ex((vt_binary_op)n->op, &n->out[0], &n->src[0], &n->src[1], n->compute, n->alpha, n->params);
}
static vt_status ternary_ref(const vt_node *n) {
    return vt_ref_ternary((vt_ternary_op)n->op, &n->out[0], &n->src[0], &n->src[1], &n->src[2], n->compute, n->alpha);
}
static vt_status where_ref(const vt_node *n) { return vt_ref_where(&n->out[0], &n->src[0], &n->src[1], &n->src[2]); }
static vt_status copy_ref(const vt_node *n) { return vt_ref_copy(&n->out[0], &n->src[0]); }
/* Run alone, a copy may walk in whatever order moves its bytes best
 * (vt_copy: transposes in tiles); fused, it keeps its plan's order. */
static vt_status copy_run(const vt_node *n) { return vt_copy(&n->out[0], &n->src[0]); }
/* A fill is a copy of the value, converted as a copy converts. */
static vt_status fill_ref(const vt_node *n) {
    double f = n->alpha.f;
    int64_t i = n->alpha.i;
    vt_tensor v = {0};
    v.dtype = n->alpha.is_float ? VT_F64 : VT_I64;
    v.data = n->alpha.is_float ? (void *)&f : (void *)&i;
    return vt_ref_copy(&n->out[0], &v);
}

static vt_status reduce_run_from(const vt_node *n, const vt_source *src) {
    return vt_reduce_run((vt_reduce_op)n->op, &n->out[0], &n->src[0], (uint64_t)n->iparams[0], n->compute,
                         n->params[0], src);
}
static vt_status reduce_run(const vt_node *n) { return reduce_run_from(n, NULL); }
static int reduce_fed(const vt_node *n) {
    return vt_reduce_takes_source((vt_reduce_op)n->op, &n->out[0], &n->src[0], (uint64_t)n->iparams[0]);
}
static vt_status reduce_ref(const vt_node *n) {
    return vt_ref_reduce((vt_reduce_op)n->op, &n->out[0], &n->src[0], (uint64_t)n->iparams[0], n->compute,
                         n->params[0]);
}
static vt_status reduce_arg_run(const vt_node *n) {
    return vt_reduce_arg(n->op, vt_node_has_out(n, 0) ? &n->out[0] : NULL, vt_node_has_out(n, 1) ? &n->out[1] : NULL, &n->src[0],
                         (int)n->iparams[0]);
}
static vt_status reduce_arg_ref(const vt_node *n) {
    return vt_ref_reduce_arg(n->op, vt_node_has_out(n, 0) ? &n->out[0] : NULL, vt_node_has_out(n, 1) ? &n->out[1] : NULL,
                             &n->src[0], (int)n->iparams[0]);
}
static vt_status scan_run(const vt_node *n) {
    return vt_scan((vt_scan_op)n->op, &n->out[0], &n->src[0], (int)n->iparams[0], n->compute);
}
static vt_status scan_ref(const vt_node *n) {
    return vt_ref_scan((vt_scan_op)n->op, &n->out[0], &n->src[0], (int)n->iparams[0], n->compute);
}

static vt_status softmax_check(const vt_node *n) {
    vt_status s = vt_node_check_counts(n, 1, 1);
    if (s == VT_OK && n->absent) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: out is NULL", n->name);
    int d;
    return s != VT_OK ? s : named(n, vt_softmax_check(&n->out[0], &n->src[0], (int)n->iparams[0], &d));
}
static vt_status softmax_backward_check(const vt_node *n) {
    vt_status s = vt_node_check_counts(n, 1, 2);
    if (s == VT_OK && n->absent) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: grad_input is NULL", n->name);
    int d;
    return s != VT_OK ? s
                      : named(n, vt_softmax_backward_check(&n->out[0], &n->src[0], &n->src[1], (int)n->iparams[0], &d));
}
static vt_status softmax_run_from(const vt_node *n, const vt_source *src) {
    return vt_softmax_run(&n->out[0], &n->src[0], (int)n->iparams[0], n->op, src);
}
static vt_status softmax_run(const vt_node *n) { return softmax_run_from(n, NULL); }
static int softmax_fed(const vt_node *n) { return vt_softmax_takes_source(&n->out[0], &n->src[0], (int)n->iparams[0]); }
static vt_status softmax_ref(const vt_node *n) {
    return vt_ref_softmax(&n->out[0], &n->src[0], (int)n->iparams[0], n->op);
}
static vt_status softmax_backward_run(const vt_node *n) {
    return vt_softmax_backward(&n->out[0], &n->src[0], &n->src[1], (int)n->iparams[0], n->op);
}
static vt_status softmax_backward_ref(const vt_node *n) {
    return vt_ref_softmax_backward(&n->out[0], &n->src[0], &n->src[1], (int)n->iparams[0], n->op);
}

/* ------------------------------------------------------------ rng */

static const char *const rng_names[VT_RNG_OP_COUNT] = {
#define VT_RNG_OP(e, name) #name,
#include "kernels/rng/rng.def"
#undef VT_RNG_OP
};

/* What each op takes: outputs (beyond out[0], optional), inputs (each
 * required or optional). The kernels check shapes and values. */
static vt_status rng_check(const vt_node *n) {
    if (n->op < 0 || n->op >= VT_RNG_OP_COUNT)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: invalid rng op %d", n->name, (int)n->op);
    int nout = n->op == VT_RNG_DROPOUT ? 2 : 1, nsrc = 0;
    unsigned required = 0; /* bit k: src[k] must be given */
    switch ((vt_rng_op)n->op) {
    case VT_RNG_BERNOULLI: nsrc = 1; break;
    case VT_RNG_DROPOUT: case VT_RNG_MULTINOMIAL: nsrc = 1, required = 1; break;
    case VT_RNG_DROPOUT_BACKWARD: nsrc = 2, required = 3; break;
    case VT_RNG_NORMAL_TENSOR: nsrc = 2; break;
    default: break;
    }
    vt_status s = vt_node_check_counts(n, nout, nsrc);
    if (s == VT_OK && !vt_node_has_out(n, 0)) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: out is NULL", n->name);
    if (s == VT_OK) s = vt_check_operand(n->name, &n->out[0], "out");
    if (s == VT_OK && vt_node_has_out(n, 1)) s = vt_check_operand(n->name, &n->out[1], "mask");
    for (int k = 0; k < nsrc && s == VT_OK; k++) {
        if (vt_node_has_src(n, k)) s = vt_check_operand(n->name, &n->src[k], k ? "second input" : "input");
        else if (required >> k & 1) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: input %d is NULL", n->name, k);
    }
    return s;
}

static vt_status rng_run(const vt_node *n) {
    const vt_tensor *a = vt_node_has_src(n, 0) ? &n->src[0] : NULL, *b = vt_node_has_src(n, 1) ? &n->src[1] : NULL;
    const uint64_t seed = (uint64_t)n->iparams[0], off = (uint64_t)n->iparams[1];
    const vt_tensor *out = &n->out[0];
    switch ((vt_rng_op)n->op) {
    case VT_RNG_UNIFORM: return vt_rng_uniform(out, seed, off, n->params[0], n->params[1]);
    case VT_RNG_NORMAL: return vt_rng_normal(out, seed, off, n->params[0], n->params[1]);
    case VT_RNG_EXPONENTIAL: return vt_rng_exponential(out, seed, off, n->params[0]);
    case VT_RNG_RANDOM: return vt_rng_random(out, seed, off, n->iparams[2], (uint64_t)n->iparams[3]);
    case VT_RNG_BERNOULLI: return vt_rng_bernoulli(out, a, n->params[0], seed, off);
    case VT_RNG_DROPOUT: return vt_rng_dropout(out, vt_node_has_out(n, 1) ? &n->out[1] : NULL, a, n->params[0], seed, off);
    case VT_RNG_DROPOUT_BACKWARD: return vt_dropout_backward(out, a, b, n->params[0]);
    case VT_RNG_MULTINOMIAL: return vt_rng_multinomial(out, a, (int)n->iparams[2], seed, off);
    case VT_RNG_RANDPERM: return vt_rng_randperm(out, seed, off);
    case VT_RNG_NORMAL_TENSOR: return vt_rng_normal_tensor(out, a, n->params[0], b, n->params[1], seed, off);
    case VT_RNG_OP_COUNT: break;
    }
    return vt_set_error(VT_ERR_INTERNAL, "%s: unknown rng op %d", n->name, (int)n->op);
}

const char *vt_rng_op_name(vt_rng_op op) { return (unsigned)op < VT_RNG_OP_COUNT ? rng_names[op] : "invalid"; }

/* ------------------------------------------------------------ normalisation */

/* A multi-tensor family's catalogue row: its name and tensor counts. */
typedef struct tensor_row {
    const char *name;
    int nout, nsrc;
} tensor_row;

static const char *row_name(const tensor_row *rows, int count, int op) {
    return (unsigned)op < (unsigned)count ? rows[op].name : "invalid";
}

static const tensor_row norm_rows[VT_NORM_OP_COUNT] = {
#define VT_NORM_OP(e, name, nout, nsrc) {#name, nout, nsrc},
#include "kernels/norm/norm.def"
#undef VT_NORM_OP
};

const char *vt_norm_op_name(vt_norm_op op) { return row_name(norm_rows, VT_NORM_OP_COUNT, op); }

static const vt_tensor *out_opt(const vt_node *n, int j) { return n->absent >> j & 1 ? NULL : &n->out[j]; }
static const vt_tensor *src_opt(const vt_node *n, int k) { return vt_node_has_src(n, k) ? &n->src[k] : NULL; }

/* Row layouts (layer, rms): shapes, and the per-feature gradient vectors. */
static vt_status rows_check(const vt_tensor *in, const vt_tensor *out, const vt_tensor *mean, const vt_tensor *rstd,
                            const vt_tensor *w, const vt_tensor *b, const vt_tensor *gi, const vt_tensor *gw,
                            const vt_tensor *gb, int32_t nd) {
    int64_t m, n;
    if (!in || !out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "input and output are required");
    vt_status s = vt_layer_norm_check("check", in, out, mean, rstd, w, b, gi, nd, &m, &n);
    if (s == VT_OK) s = vt_norm_check_vec("check", "grad_weight", gw, n);
    if (s == VT_OK) s = vt_norm_check_vec("check", "grad_bias", gb, n);
    return s;
}

/* Channel layouts (group, batch): shapes and per-channel / per-group element
 * counts (groups -1: batch norm). */
static vt_status chan_check(const vt_tensor *in, const vt_tensor *out, const vt_tensor *gi, int64_t groups,
                            const vt_tensor *const per_c[], int nc, const vt_tensor *const per_u[], int nu) {
    int64_t n, c, hw;
    if (!in || !out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "input and output are required");
    if (groups == 0 || groups < -1) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "groups must be positive");
    vt_status s = vt_channel_norm_check("check", in, out, gi, groups, &n, &c, &hw);
    for (int i = 0; s == VT_OK && i < nc; i++) s = vt_norm_check_vec("check", "per-channel tensor", per_c[i], c);
    const int64_t units = groups > 0 ? n * groups : c;
    for (int i = 0; s == VT_OK && i < nu; i++) s = vt_norm_check_vec("check", "statistics", per_u[i], units);
    return s;
}

static vt_status norm_check(const vt_node *n) {
    if ((unsigned)n->op >= VT_NORM_OP_COUNT)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: invalid normalisation op %d", n->name, (int)n->op);
    vt_status s = vt_node_check_counts(n, norm_rows[n->op].nout, norm_rows[n->op].nsrc);
    if (s != VT_OK) return s;
    const vt_tensor *o0 = out_opt(n, 0), *o1 = out_opt(n, 1), *o2 = out_opt(n, 2);
    const vt_tensor *s0 = src_opt(n, 0), *s1 = src_opt(n, 1), *s2 = src_opt(n, 2), *s3 = src_opt(n, 3),
                    *s4 = src_opt(n, 4), *s5 = src_opt(n, 5), *s6 = src_opt(n, 6);
    const int32_t nd = (int32_t)n->iparams[0];
    const int64_t groups = n->iparams[1];
    const int training = (int)n->iparams[2];
    switch ((vt_norm_op)n->op) {
    case VT_NORM_LAYER: s = rows_check(s0, o0, o1, o2, s1, s2, NULL, NULL, NULL, nd); break;
    case VT_NORM_LAYER_BACKWARD:
        s = rows_check(s1, s0, s2, s3, s4, NULL, o0, o1, o2, nd);
        if (s == VT_OK && (!s2 || !s3)) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "mean and rstd are required");
        break;
    case VT_NORM_RMS: s = rows_check(s0, o0, NULL, o1, s1, NULL, NULL, NULL, NULL, nd); break;
    case VT_NORM_RMS_BACKWARD:
        s = rows_check(s1, s0, NULL, s2, s3, NULL, o0, o1, NULL, nd);
        if (s == VT_OK && !s2) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "rstd is required");
        break;
    case VT_NORM_GROUP: {
        const vt_tensor *pc[] = {s1, s2}, *pu[] = {o1, o2};
        s = groups <= 0 ? vt_set_error(VT_ERR_INVALID_ARGUMENT, "groups must be positive")
                        : chan_check(s0, o0, NULL, groups, pc, 2, pu, 2);
        break;
    }
    case VT_NORM_GROUP_BACKWARD: {
        const vt_tensor *pc[] = {s4, o1, o2}, *pu[] = {s2, s3};
        s = groups <= 0 ? vt_set_error(VT_ERR_INVALID_ARGUMENT, "groups must be positive")
                        : chan_check(s1, s0, o0, groups, pc, 3, pu, 2);
        if (s == VT_OK && (!s2 || !s3)) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "mean and rstd are required");
        break;
    }
    case VT_NORM_BATCH: {
        const vt_tensor *pc[] = {s1, s2, s3, s4, o1, o2};
        s = chan_check(s0, o0, NULL, -1, pc, 6, NULL, 0);
        if (s == VT_OK && !training && (!s3 || !s4))
            s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "running_mean and running_var are required in eval mode");
        break;
    }
    case VT_NORM_BATCH_BACKWARD: {
        const vt_tensor *pc[] = {s2, o1, o2, s3, s4, s5, s6};
        s = chan_check(s1, s0, o0, -1, pc, 7, NULL, 0);
        if (s == VT_OK && (training ? (!s5 || !s6) : (!s3 || !s4)))
            s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "the %s statistics are required",
                             training ? "saved" : "running");
        break;
    }
    default: break;
    }
    return named(n, s);
}

static vt_status norm_call(const vt_node *n, int ref) {
    const vt_tensor *o0 = out_opt(n, 0), *o1 = out_opt(n, 1), *o2 = out_opt(n, 2);
    const vt_tensor *s0 = src_opt(n, 0), *s1 = src_opt(n, 1), *s2 = src_opt(n, 2), *s3 = src_opt(n, 3),
                    *s4 = src_opt(n, 4), *s5 = src_opt(n, 5), *s6 = src_opt(n, 6);
    const int32_t nd = (int32_t)n->iparams[0];
    const int64_t groups = n->iparams[1];
    const int training = (int)n->iparams[2];
    const double eps = n->params[0], momentum = n->params[1];
    switch ((vt_norm_op)n->op) {
    case VT_NORM_LAYER:
        return (ref ? vt_ref_layer_norm : vt_layer_norm)(o0, o1, o2, s0, s1, s2, nd, eps);
    case VT_NORM_LAYER_BACKWARD:
        return (ref ? vt_ref_layer_norm_backward : vt_layer_norm_backward)(o0, o1, o2, s0, s1, s2, s3, s4, nd);
    case VT_NORM_RMS: return (ref ? vt_ref_rms_norm : vt_rms_norm)(o0, o1, s0, s1, nd, eps);
    case VT_NORM_RMS_BACKWARD:
        return (ref ? vt_ref_rms_norm_backward : vt_rms_norm_backward)(o0, o1, s0, s1, s2, s3, nd);
    case VT_NORM_GROUP: return (ref ? vt_ref_group_norm : vt_group_norm)(o0, o1, o2, s0, s1, s2, groups, eps);
    case VT_NORM_GROUP_BACKWARD:
        return (ref ? vt_ref_group_norm_backward : vt_group_norm_backward)(o0, o1, o2, s0, s1, s2, s3, s4, groups);
    case VT_NORM_BATCH:
        return (ref ? vt_ref_batch_norm : vt_batch_norm)(o0, o1, o2, s0, s1, s2, s3, s4, training, momentum, eps);
    case VT_NORM_BATCH_BACKWARD:
        return (ref ? vt_ref_batch_norm_backward : vt_batch_norm_backward)(o0, o1, o2, s0, s1, s2, s3, s4, s5, s6,
                                                                           training, eps);
    default: return vt_set_error(VT_ERR_INTERNAL, "%s: unknown normalisation op %d", n->name, (int)n->op);
    }
}
static vt_status norm_run(const vt_node *n) { return norm_call(n, 0); }
static vt_status norm_ref(const vt_node *n) { return norm_call(n, 1); }
/* A layer or RMS norm forward may read its input from the group computing it */
static int norm_is_rows(const vt_node *n) { return n->op == VT_NORM_LAYER || n->op == VT_NORM_RMS; }
static int norm_fed(const vt_node *n) {
    return norm_is_rows(n) && vt_norm_rows_takes_source(&n->src[0], (int32_t)n->iparams[0]);
}
static vt_status norm_run_from(const vt_node *n, const vt_source *src) {
    if (!norm_is_rows(n)) return src ? vt_set_error(VT_ERR_INTERNAL, "%s: cannot be fed", n->name) : norm_run(n);
    return vt_norm_rows_run(n->op == VT_NORM_RMS, out_opt(n, 0), n->op == VT_NORM_RMS ? NULL : out_opt(n, 1),
                            out_opt(n, n->op == VT_NORM_RMS ? 1 : 2), src_opt(n, 0), src_opt(n, 1),
                            n->op == VT_NORM_RMS ? NULL : src_opt(n, 2), (int32_t)n->iparams[0], n->params[0], src);
}

/* ------------------------------------------------------------ recurrent cells */

static const tensor_row rnn_rows[VT_RNN_OP_COUNT] = {
#define VT_RNN_OP(e, name, nout, nsrc) {#name, nout, nsrc},
#include "kernels/rnn/rnn.def"
#undef VT_RNN_OP
};
const char *vt_rnn_op_name(vt_rnn_op op) { return row_name(rnn_rows, VT_RNN_OP_COUNT, op); }

static vt_status rnn_check(const vt_node *n) {
    if ((unsigned)n->op >= VT_RNN_OP_COUNT)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: invalid recurrent cell op %d", n->name, (int)n->op);
    vt_status s = vt_node_check_counts(n, rnn_rows[n->op].nout, rnn_rows[n->op].nsrc);
    if (s != VT_OK) return s;
    if (n->op == VT_RNN_GRU_CELL_BACKWARD)
        return vt_rnn_gru_backward_check(n->name, out_opt(n, 0), out_opt(n, 1), out_opt(n, 2), src_opt(n, 0),
                                         src_opt(n, 1));
    if (n->op == VT_RNN_LSTM_CELL_BACKWARD)
        return vt_rnn_cell_backward_check(n->name, out_opt(n, 0), out_opt(n, 1), src_opt(n, 0), src_opt(n, 1),
                                          src_opt(n, 2), src_opt(n, 3), src_opt(n, 4));
    const int lstm = n->op == VT_RNN_LSTM_CELL;
    return vt_rnn_cell_check(n->name, lstm, out_opt(n, 0), lstm ? out_opt(n, 1) : NULL, out_opt(n, lstm ? 2 : 1),
                             src_opt(n, 0), src_opt(n, 1), src_opt(n, 2), src_opt(n, 3), src_opt(n, 4));
}

static vt_status rnn_run(const vt_node *n) {
    if (n->op == VT_RNN_GRU_CELL_BACKWARD)
        return vt_gru_cell_backward(out_opt(n, 0), out_opt(n, 1), out_opt(n, 2), src_opt(n, 0), src_opt(n, 1));
    if (n->op == VT_RNN_LSTM_CELL_BACKWARD)
        return vt_lstm_cell_backward(out_opt(n, 0), out_opt(n, 1), src_opt(n, 0), src_opt(n, 1), src_opt(n, 2),
                                     src_opt(n, 3), src_opt(n, 4));
    if (n->op == VT_RNN_LSTM_CELL)
        return vt_lstm_cell(out_opt(n, 0), out_opt(n, 1), out_opt(n, 2), src_opt(n, 0), src_opt(n, 1),
                            src_opt(n, 2), src_opt(n, 3), src_opt(n, 4));
    return vt_gru_cell(out_opt(n, 0), out_opt(n, 1), src_opt(n, 0), src_opt(n, 1), src_opt(n, 2), src_opt(n, 3),
                       src_opt(n, 4));
}

/* ------------------------------------------------------------ losses */

static const tensor_row loss_rows[VT_LOSS_OP_COUNT] = {
#define VT_LOSS_OP(e, name, nout, nsrc) {#name, nout, nsrc},
#include "kernels/loss/loss.def"
#undef VT_LOSS_OP
};

const char *vt_loss_op_name(vt_loss_op op) { return row_name(loss_rows, VT_LOSS_OP_COUNT, op); }

static vt_status loss_check(const vt_node *n) {
    if ((unsigned)n->op >= VT_LOSS_OP_COUNT)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: invalid loss op %d", n->name, (int)n->op);
    vt_status s = vt_node_check_counts(n, loss_rows[n->op].nout, loss_rows[n->op].nsrc);
    if (s != VT_OK) return s;
    const vt_tensor *o0 = out_opt(n, 0), *o1 = out_opt(n, 1);
    const vt_tensor *s0 = src_opt(n, 0), *s1 = src_opt(n, 1), *s2 = src_opt(n, 2), *s3 = src_opt(n, 3),
                    *s4 = src_opt(n, 4);
    const vt_loss_kind kind = (vt_loss_kind)n->iparams[0];
    const vt_loss_reduction red = (vt_loss_reduction)n->iparams[1];
    switch ((vt_loss_op)n->op) {
    case VT_LOSS_OP_NLL: s = vt_nll_loss_check(o0, o1, s0, s1, s2, red); break;
    case VT_LOSS_OP_NLL_BACKWARD: s = vt_nll_loss_backward_check(o0, s0, s1, s2, s3, red, s4); break;
    case VT_LOSS_OP_POINTWISE: s = vt_pointwise_loss_check(kind, o0, s0, s1, s2, s3, red, 0); break;
    case VT_LOSS_OP_POINTWISE_BACKWARD: {
        s = vt_pointwise_loss_check(kind, o0, s1, s2, s3, s4, red, 1);
        if (s == VT_OK && !s0) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "grad_output is NULL");
        vt_tensor b;
        if (s == VT_OK) s = vt_broadcast_to(s0, s1->ndim, s1->sizes, &b);
        break;
    }
    default: break;
    }
    return named(n, s);
}

static vt_status loss_call(const vt_node *n, int ref) {
    const vt_tensor *o0 = out_opt(n, 0), *o1 = out_opt(n, 1);
    const vt_tensor *s0 = src_opt(n, 0), *s1 = src_opt(n, 1), *s2 = src_opt(n, 2), *s3 = src_opt(n, 3),
                    *s4 = src_opt(n, 4);
    const vt_loss_kind kind = (vt_loss_kind)n->iparams[0];
    const vt_loss_reduction red = (vt_loss_reduction)n->iparams[1];
    const int64_t ignore = n->iparams[2];
    const double param = n->params[0];
    switch ((vt_loss_op)n->op) {
    case VT_LOSS_OP_NLL: return (ref ? vt_ref_nll_loss : vt_nll_loss)(o0, o1, s0, s1, s2, red, ignore);
    case VT_LOSS_OP_NLL_BACKWARD:
        return (ref ? vt_ref_nll_loss_backward : vt_nll_loss_backward)(o0, s0, s1, s2, s3, red, ignore, s4);
    case VT_LOSS_OP_POINTWISE:
        return (ref ? vt_ref_pointwise_loss : vt_pointwise_loss)(kind, o0, s0, s1, s2, s3, red, param);
    case VT_LOSS_OP_POINTWISE_BACKWARD:
        return (ref ? vt_ref_pointwise_loss_backward : vt_pointwise_loss_backward)(kind, o0, s0, s1, s2, s3, s4, red,
                                                                                   param);
    default: return vt_set_error(VT_ERR_INTERNAL, "%s: unknown loss op %d", n->name, (int)n->op);
    }
}
static vt_status loss_run(const vt_node *n) { return loss_call(n, 0); }
static vt_status loss_ref(const vt_node *n) { return loss_call(n, 1); }

/* ------------------------------------------------------------ attention */

static vt_status attention_check(const vt_node *n) {
    const int bwd = n->op == 1;
    if (n->op != 0 && n->op != 1)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: invalid attention op %d", n->name, (int)n->op);
    vt_status s = vt_node_check_counts(n, bwd ? 3 : 2, bwd ? 7 : 4);
    if (s != VT_OK) return s;
    vt_attn_problem p;
    const double scale = n->params[0];
    const int causal = (int)n->iparams[0];
    const vt_precision prec = (vt_precision)n->iparams[1];
    if (!bwd)
        return vt_attn_setup(&p, n->name, 0, out_opt(n, 0), out_opt(n, 1), src_opt(n, 0), src_opt(n, 1),
                             src_opt(n, 2), src_opt(n, 3), NULL, NULL, NULL, NULL, scale, causal, prec);
    return vt_attn_setup(&p, n->name, 1, src_opt(n, 5), src_opt(n, 6), src_opt(n, 1), src_opt(n, 2), src_opt(n, 3),
                         src_opt(n, 4), src_opt(n, 0), out_opt(n, 0), out_opt(n, 1), out_opt(n, 2), scale, causal,
                         prec);
}

static vt_status attention_call(const vt_node *n, int ref) {
    const double scale = n->params[0];
    const int causal = (int)n->iparams[0];
    const vt_precision prec = (vt_precision)n->iparams[1];
    if (n->op == 0)
        return (ref ? vt_ref_sdpa_forward : vt_sdpa_forward)(out_opt(n, 0), out_opt(n, 1), src_opt(n, 0),
                                                             src_opt(n, 1), src_opt(n, 2), src_opt(n, 3), scale,
                                                             causal, prec);
    return (ref ? vt_ref_sdpa_backward : vt_sdpa_backward)(out_opt(n, 0), out_opt(n, 1), out_opt(n, 2),
                                                           src_opt(n, 0), src_opt(n, 1), src_opt(n, 2),
                                                           src_opt(n, 3), src_opt(n, 4), src_opt(n, 5),
                                                           src_opt(n, 6), scale, causal, prec);
}
static vt_status attention_run(const vt_node *n) { return attention_call(n, 0); }
static vt_status attention_ref(const vt_node *n) { return attention_call(n, 1); }

/* ------------------------------------------------------------ convolution */

void vt_node_set_conv_params(vt_node *n, const vt_conv_params *p, vt_precision prec) {
    for (int i = 0; i < 3; i++) {
        n->iparams[i] = p->stride[i];
        n->iparams[3 + i] = p->padding[i];
        n->iparams[6 + i] = p->dilation[i];
    }
    n->iparams[9] = p->groups;
    n->iparams[10] = p->spatial;
    n->iparams[11] = prec;
}

vt_precision vt_node_conv_params(const vt_node *n, vt_conv_params *p) {
    memset(p, 0, sizeof *p);
    for (int i = 0; i < 3; i++) {
        p->stride[i] = n->iparams[i];
        p->padding[i] = n->iparams[3 + i];
        p->dilation[i] = n->iparams[6 + i];
    }
    p->groups = n->iparams[9];
    p->spatial = (int32_t)n->iparams[10];
    return (vt_precision)n->iparams[11];
}

static vt_status conv_check(const vt_node *n) {
    const vt_conv_kind kind = (vt_conv_kind)n->op;
    if ((unsigned)kind > VT_CONV_BACKWARD_WEIGHT)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: invalid convolution op %d", n->name, (int)n->op);
    vt_status s = vt_node_check_counts(n, 1, 3);
    if (s != VT_OK) return s;
    const vt_tensor *t0 = out_opt(n, 0), *t1 = src_opt(n, 0), *t2 = src_opt(n, 1), *bias = src_opt(n, 2);
    if (bias && kind != VT_CONV_FORWARD)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: only the forward convolution takes a bias", n->name);
    vt_conv_params p;
    const vt_precision prec = vt_node_conv_params(n, &p);
    /* x, w, y: the input-, weight- and output-shaped tensors */
    const vt_tensor *x = kind == VT_CONV_FORWARD ? t1 : kind == VT_CONV_BACKWARD_INPUT ? t0 : t2;
    const vt_tensor *w = kind == VT_CONV_FORWARD ? t2 : kind == VT_CONV_BACKWARD_INPUT ? t2 : t0;
    const vt_tensor *y = kind == VT_CONV_FORWARD ? t0 : t1;
    vt_conv_geom g;
    s = vt_conv_check(kind, x, w, y, bias, &p, prec, &g);
    if (s != VT_OK) return vt_error_prefix(s, n->name);
    static const char *const names[3][4] = {{"out", "input", "weight", "bias"},
                                            {"grad_input", "grad_output", "weight", "bias"},
                                            {"grad_weight", "grad_output", "input", "bias"}};
    const vt_tensor *all[4] = {t0, t1, t2, bias};
    for (int i = 0; i < 4; i++)
        if (all[i] && !all[i]->data && vt_tensor_numel(all[i]) > 0)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s has no data", n->name, names[kind][i]);
    return VT_OK;
}

static vt_status conv_call(const vt_node *n, int ref) {
    vt_conv_params p;
    const vt_precision prec = vt_node_conv_params(n, &p);
    const vt_tensor *t0 = &n->out[0], *t1 = &n->src[0], *t2 = &n->src[1];
    switch ((vt_conv_kind)n->op) {
    case VT_CONV_FORWARD: return (ref ? vt_ref_conv_forward : vt_conv_forward)(t0, t1, t2, src_opt(n, 2), &p, prec);
    case VT_CONV_BACKWARD_INPUT: return (ref ? vt_ref_conv_backward_input : vt_conv_backward_input)(t0, t1, t2, &p, prec);
    default: return (ref ? vt_ref_conv_backward_weight : vt_conv_backward_weight)(t0, t1, t2, &p, prec);
    }
}
static vt_status conv_run(const vt_node *n) { return conv_call(n, 0); }
static vt_status conv_ref(const vt_node *n) { return conv_call(n, 1); }

/* ------------------------------------------------------------ matmul */

static vt_status matmul_check(const vt_node *n) {
    vt_status s = vt_node_check_counts(n, 1, 3);
    if (s != VT_OK) return s;
    const vt_precision prec = (vt_precision)n->iparams[0];
    if ((unsigned)prec > VT_PRECISION_HIGHEST)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: invalid precision %d", n->name, (int)prec);
    const vt_tensor *bias = src_opt(n, 2);
    if (s == VT_OK) s = vt_check_operand(n->name, out_opt(n, 0), "out");
    if (s == VT_OK) s = vt_check_operand(n->name, src_opt(n, 0), "mat1");
    if (s == VT_OK) s = vt_check_operand(n->name, src_opt(n, 1), "mat2");
    if (s == VT_OK && bias) s = vt_check_input(n->name, bias, "bias", &n->out[0]);
    if (s != VT_OK) return s;
    s = vt_matmul_check(&n->out[0], &n->src[0], &n->src[1], bias, prec);
    return s == VT_OK ? VT_OK : vt_error_prefix(s, n->name);
}
static vt_status matmul_call(const vt_node *n, int ref) {
    const vt_precision prec = (vt_precision)n->iparams[0];
    if (ref) return vt_ref_matmul(&n->out[0], &n->src[0], &n->src[1], src_opt(n, 2), n->params[0], n->params[1], prec);
    const vt_version v = {(uint64_t)n->iparams[1], (uint64_t)n->iparams[2]};
    return vt_matmul_versioned(&n->out[0], &n->src[0], &n->src[1], src_opt(n, 2), n->params[0], n->params[1], prec, v);
}
static vt_status matmul_run(const vt_node *n) { return matmul_call(n, 0); }
static vt_status matmul_ref(const vt_node *n) { return matmul_call(n, 1); }

/* ------------------------------------------------------------ foreach
 * One tensor of a foreach op (what DeferAndFuse records per tensor): the
 * single-tensor vt_foreach_args the node stands for. */

vt_foreach_args vt_foreach_node_args(const vt_node *n) {
    vt_foreach_args x;
    memset(&x, 0, sizeof x);
    x.op = (vt_foreach_op)n->op;
    x.n = 1;
    x.out = &n->out[0];
    x.a = n->nsrc > 0 ? &n->src[0] : NULL;
    x.b = n->nsrc > 1 ? &n->src[1] : NULL;
    x.c = n->nsrc > 2 ? &n->src[2] : NULL;
    x.scalar = n->params[0];
    x.alpha = n->params[1];
    x.in_place = n->iparams[1] ? 1 : -1;
    return x;
}

void vt_foreach_item_node(vt_node *n, const char *name, const vt_foreach_args *x, int64_t i) {
    vt_node_init(n, VT_NODE_FOREACH, (int32_t)x->op, name);
    vt_node_add_out(n, &x->out[i]);
    /* the lists are there (vt_foreach_check): adding cannot fail */
    if (x->a) vt_node_add_src(n, &x->a[i], NULL);
    if (x->b) vt_node_add_src(n, &x->b[i], NULL);
    if (x->c) vt_node_add_src(n, &x->c[i], NULL);
    n->params[0] = x->scalars ? x->scalars[i] : x->scalar;
    n->params[1] = x->alpha;
    n->iparams[0] = i;
    n->iparams[1] = vt_foreach_in_place(x, i); /* known now: the group may move the output to scratch */
}

static vt_status foreach_check(const vt_node *n) {
    if (n->nout != 1 || n->nsrc > 3 || n->host || n->absent)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: a foreach node has one output and up to 3 tensor inputs",
                            n->name);
    const vt_foreach_args x = vt_foreach_node_args(n);
    if (!vt_foreach_fusable(&x))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: foreach %s is not an elementwise op", n->name,
                            vt_foreach_op_name(x.op));
    return named(n, vt_foreach_check(&x));
}
static vt_status foreach_plan(const vt_node *n, vt_ew_plan *p) {
    const vt_foreach_args x = vt_foreach_node_args(n);
    return vt_foreach_item_plan(p, &x, 0);
}
static vt_status foreach_ref(const vt_node *n) {
    const vt_foreach_args x = vt_foreach_node_args(n);
    return vt_ref_foreach(&x);
}

#define ELEMENTWISE_READ (VT_USE_READ | VT_USE_ALIAS_OK)

/* ------------------------------------------------------------ uses that differ by op */

/* multinomial reads its probabilities whole for each sample: overlaps are copied */
static unsigned rng_use(const vt_node *n, int t, unsigned f) {
    return t >= VT_NODE_MAX_OUT && n->op == VT_RNG_MULTINOMIAL ? VT_USE_READ | VT_USE_STAGE : f;
}
/* a training batch norm updates its running statistics (src 3, 4) in place */
static unsigned norm_use(const vt_node *n, int t, unsigned f) {
    const int running = n->op == VT_NORM_BATCH && n->iparams[2];
    return running && (t == VT_NODE_MAX_OUT + 3 || t == VT_NODE_MAX_OUT + 4) ? VT_USE_READ | VT_USE_WRITE : f;
}
/* the bias is read elementwise and may be out itself */
static unsigned matmul_use(const vt_node *n, int t, unsigned f) {
    return t == VT_NODE_MAX_OUT + 2 ? f | VT_USE_ALIAS_OK : f;
}

const vt_node_kind_def vt_node_kinds[VT_NODE_KIND_COUNT] = {
    [VT_NODE_UNARY] = {"unary", unary_check, plan_run, unary_ref, unary_plan, ELEMENTWISE_READ, VT_USE_WRITE},
    [VT_NODE_BINARY] = {"binary", binary_check, plan_run, binary_ref, binary_plan, ELEMENTWISE_READ, VT_USE_WRITE},
    [VT_NODE_TERNARY] = {"ternary", ternary_check, plan_run, ternary_ref, ternary_plan, ELEMENTWISE_READ,
                         VT_USE_WRITE},
    [VT_NODE_WHERE] = {"where", where_check, plan_run, where_ref, where_plan, ELEMENTWISE_READ, VT_USE_WRITE},
    [VT_NODE_COPY] = {"copy", copy_check, copy_run, copy_ref, copy_plan, ELEMENTWISE_READ, VT_USE_WRITE},
    /* every element gets the same value: repeated output elements are harmless */
    [VT_NODE_FILL] = {"fill", fill_check, plan_run, fill_ref, fill_plan, 0, VT_USE_WRITE | VT_USE_SAME_VALUE},
    /* out may be the input itself (nothing reduced); other overlaps are copied */
    [VT_NODE_REDUCE] = {"reduce", reduce_check, reduce_run, reduce_ref, NULL, ELEMENTWISE_READ | VT_USE_STAGE,
                        VT_USE_WRITE, reduce_fed, reduce_run_from},
    [VT_NODE_REDUCE_ARG] = {"reduce_arg", reduce_arg_check, reduce_arg_run, reduce_arg_ref, NULL,
                            VT_USE_READ | VT_USE_STAGE, VT_USE_WRITE},
    /* in place exactly, as CPU allows; a partial overlap is refused as CPU does */
    [VT_NODE_SCAN] = {"scan", scan_check, scan_run, scan_ref, NULL, ELEMENTWISE_READ, VT_USE_WRITE},
    /* row by row, each row read before it is written: in place is exact */
    [VT_NODE_SOFTMAX] = {"softmax", softmax_check, softmax_run, softmax_ref, NULL, ELEMENTWISE_READ | VT_USE_STAGE,
                         VT_USE_WRITE, softmax_fed, softmax_run_from, .in_step = 1},
    /* each line's sum is taken before the line is written, then element i
     * of the result from element i of each input: in place is exact */
    [VT_NODE_SOFTMAX_BACKWARD] = {"softmax_backward", softmax_backward_check, softmax_backward_run,
                                  softmax_backward_ref, NULL, ELEMENTWISE_READ | VT_USE_STAGE, VT_USE_WRITE},
    /* elementwise inputs may be the output (in-place dropout); multinomial's
     * probs are read whole for each sample (rng_use stages them) */
    [VT_NODE_RNG] = {"rng", rng_check, rng_run, NULL, NULL, ELEMENTWISE_READ, VT_USE_WRITE, .use = rng_use},
    /* inputs are read while the output (and argmax indices) are written: overlaps are copied */
    [VT_NODE_POOL] = {"pool", vt_pool_node_check, vt_pool_node_run, vt_pool_node_ref, NULL, VT_USE_READ | VT_USE_STAGE, VT_USE_WRITE},
    /* inputs that overlap an output are copied first */
    [VT_NODE_NORM] = {"norm", norm_check, norm_run, norm_ref, NULL, VT_USE_READ | VT_USE_STAGE, VT_USE_WRITE,
                      norm_fed, norm_run_from, norm_use, .in_step = 1},
    /* losses read their inputs while they write (a reduction): overlapping inputs are copied first */
    [VT_NODE_LOSS] = {"loss", loss_check, loss_run, loss_ref, NULL, VT_USE_READ | VT_USE_STAGE, VT_USE_WRITE},
    /* the kernels read their inputs while they write: overlaps are copied */
    [VT_NODE_ATTENTION] = {"attention", attention_check, attention_run, attention_ref, NULL,
                           VT_USE_READ | VT_USE_STAGE, VT_USE_WRITE},
    [VT_NODE_CONV] = {"conv", conv_check, conv_run, conv_ref, NULL, VT_USE_READ | VT_USE_STAGE, VT_USE_WRITE},
    /* the product reads a and b while it writes out: overlapping operands are
     * copied (CPU PyTorch gets some aliased products wrong); bias is read
     * elementwise and may be out itself (matmul_use) */
    [VT_NODE_MATMUL] = {"matmul", matmul_check, matmul_run, matmul_ref, NULL, VT_USE_READ | VT_USE_STAGE,
                        VT_USE_WRITE, .use = matmul_use},
    [VT_NODE_FOREACH] = {"foreach", foreach_check, plan_run, foreach_ref, foreach_plan, ELEMENTWISE_READ,
                         VT_USE_WRITE},
    /* the kernels read while they write: overlaps are copied (tril/triu in
     * place is exact: vt_shape_node_use) */
    [VT_NODE_SHAPE] = {"shape", vt_shape_node_check, vt_shape_node_run, vt_shape_node_ref, NULL,
                       VT_USE_READ | VT_USE_STAGE, VT_USE_WRITE, .use = vt_shape_node_use},
    /* an output may not overlap what it is computed from, as on CPU; the
     * ops that update out in place read it (vt_index_node_use) */
    [VT_NODE_INDEX] = {"index", vt_index_node_check, vt_index_node_run, vt_index_node_ref, NULL, VT_USE_READ,
                       VT_USE_WRITE, .use = vt_index_node_use},
    /* a row's inputs are read while its outputs are written: overlaps are copied */
    [VT_NODE_RNN] = {"rnn", rnn_check, rnn_run, NULL, NULL, VT_USE_READ | VT_USE_STAGE, VT_USE_WRITE},
};
