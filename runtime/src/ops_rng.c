/* ops_rng.c — queued forms of the distribution kernels in kernels/rng/rng_dist.c
 * and exponential, as VT_NODE_RNG nodes (kernels/rng/rng.def): descriptors
 * checked when the node is built, the kernel run on the device queue with
 * the (seed, offset) the caller's generator reserved. */
#include "graph/node.h"

#define NAME(n, d) ((n) ? (n) : (d))

/* A node of op with out (and mask: out[1], dropout only), inputs a and b
 * as the op takes them (NULL: absent), the generator's counters and scalars. */
static vt_status submit(int dev, const char *name, vt_rng_op op, const vt_tensor *out, const vt_tensor *mask,
                        int nsrc, const vt_tensor *a, const vt_tensor *b, uint64_t seed, uint64_t offset, double x,
                        double y) {
    vt_node n;
    vt_node_init(&n, VT_NODE_RNG, op, name);
    if (!out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: out is NULL", name);
    vt_node_add_out(&n, out);
    if (op == VT_RNG_DROPOUT) vt_node_add_out(&n, mask);
    if (nsrc > 0) vt_node_add_optional(&n, a);
    if (nsrc > 1) vt_node_add_optional(&n, b);
    n.iparams[0] = (int64_t)seed;
    n.iparams[1] = (int64_t)offset;
    n.params[0] = x;
    n.params[1] = y;
    return vt_node_submit(dev, &n);
}

vt_status vt_op_rng_exponential(int dev, const char *name, const vt_tensor *out, uint64_t seed, uint64_t offset,
                                double lambd) {
    name = NAME(name, "vt_op_rng_exponential");
    if (!(lambd > 0.0))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "exponential_ expects lambda > 0.0, but found lambda=%g", lambd);
    return submit(dev, name, VT_RNG_EXPONENTIAL, out, NULL, 0, NULL, NULL, seed, offset, lambd, 0);
}

vt_status vt_op_rng_random(int dev, const char *name, const vt_tensor *out, uint64_t seed, uint64_t offset,
                           int64_t from, uint64_t range) {
    vt_node n;
    vt_node_init(&n, VT_NODE_RNG, VT_RNG_RANDOM, NAME(name, "vt_op_rng_random"));
    if (!out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: out is NULL", n.name);
    vt_node_add_out(&n, out);
    n.iparams[0] = (int64_t)seed;
    n.iparams[1] = (int64_t)offset;
    n.iparams[2] = from;
    n.iparams[3] = (int64_t)range;
    return vt_node_submit(dev, &n);
}

vt_status vt_op_rng_bernoulli(int dev, const char *name, const vt_tensor *out, const vt_tensor *p, double p_scalar,
                              uint64_t seed, uint64_t offset) {
    name = NAME(name, "vt_op_rng_bernoulli");
    if (!p && !(p_scalar >= 0.0 && p_scalar <= 1.0))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "bernoulli_ expects p to be in [0, 1], but got p=%g", p_scalar);
    return submit(dev, name, VT_RNG_BERNOULLI, out, NULL, 1, p, NULL, seed, offset, p_scalar, 0);
}

vt_status vt_op_rng_dropout(int dev, const char *name, const vt_tensor *out, const vt_tensor *mask,
                            const vt_tensor *in, double p, uint64_t seed, uint64_t offset) {
    name = NAME(name, "vt_op_rng_dropout");
    if (!in) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: input is NULL", name);
    return submit(dev, name, VT_RNG_DROPOUT, out, mask, 1, in, NULL, seed, offset, p, 0);
}

vt_status vt_op_dropout_backward(int dev, const char *name, const vt_tensor *grad_in, const vt_tensor *grad,
                                 const vt_tensor *mask, double scale) {
    name = NAME(name, "vt_op_dropout_backward");
    if (!grad || !mask) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: grad or mask is NULL", name);
    return submit(dev, name, VT_RNG_DROPOUT_BACKWARD, grad_in, NULL, 2, grad, mask, 0, 0, scale, 0);
}

vt_status vt_op_rng_multinomial(int dev, const char *name, const vt_tensor *out, const vt_tensor *probs,
                                int replacement, uint64_t seed, uint64_t offset) {
    name = NAME(name, "vt_op_rng_multinomial");
    if (!probs) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: probs is NULL", name);
    vt_node n;
    vt_node_init(&n, VT_NODE_RNG, VT_RNG_MULTINOMIAL, name);
    if (!out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: out is NULL", name);
    vt_node_add_out(&n, out);
    vt_node_add_optional(&n, probs);
    n.iparams[0] = (int64_t)seed;
    n.iparams[1] = (int64_t)offset;
    n.iparams[2] = replacement;
    return vt_node_submit(dev, &n);
}

vt_status vt_op_rng_randperm(int dev, const char *name, const vt_tensor *out, uint64_t seed, uint64_t offset) {
    return submit(dev, NAME(name, "vt_op_rng_randperm"), VT_RNG_RANDPERM, out, NULL, 0, NULL, NULL, seed, offset, 0,
                  0);
}

vt_status vt_op_rng_normal_tensor(int dev, const char *name, const vt_tensor *out, const vt_tensor *mean,
                                  double mean_scalar, const vt_tensor *std, double std_scalar, uint64_t seed,
                                  uint64_t offset) {
    return submit(dev, NAME(name, "vt_op_rng_normal_tensor"), VT_RNG_NORMAL_TENSOR, out, NULL, 2, mean, std, seed,
                  offset, mean_scalar, std_scalar);
}
