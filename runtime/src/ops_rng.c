/* ops_rng.c — queued forms of the distribution kernels in kernels/rng_dist.c
 * and exponential: descriptors checked at the call, copied into a command,
 * the kernel run on the device queue with the (seed, offset) the caller's
 * generator reserved. */
#include "internal.h"

typedef enum rng_op { R_EXP = 0, R_RANDOM, R_BERNOULLI, R_DROPOUT, R_DROPOUT_BWD, R_MULTINOMIAL, R_RANDPERM, R_NORMAL_T } rng_op;

typedef struct rng2_cmd {
    rng_op op;
    vt_tensor out, a, b; /* per op: bernoulli a = p; dropout a = in, b = mask; backward a = grad, b = mask;
                            multinomial a = probs; normal a = mean, b = std */
    int has_a, has_b, flag;
    uint64_t seed, offset, range;
    int64_t from;
    double x, y;
} rng2_cmd;

static vt_status rng2_kernel(void *v) {
    const rng2_cmd *c = v;
    const vt_tensor *a = c->has_a ? &c->a : NULL, *b = c->has_b ? &c->b : NULL;
    switch (c->op) {
    case R_EXP: return vt_rng_exponential(&c->out, c->seed, c->offset, c->x);
    case R_RANDOM: return vt_rng_random(&c->out, c->seed, c->offset, c->from, c->range);
    case R_BERNOULLI: return vt_rng_bernoulli(&c->out, a, c->x, c->seed, c->offset);
    case R_DROPOUT: return vt_rng_dropout(&c->out, b, &c->a, c->x, c->seed, c->offset);
    case R_DROPOUT_BWD: return vt_dropout_backward(&c->out, &c->a, &c->b, c->x);
    case R_MULTINOMIAL: return vt_rng_multinomial(&c->out, &c->a, c->flag, c->seed, c->offset);
    case R_RANDPERM: return vt_rng_randperm(&c->out, c->seed, c->offset);
    case R_NORMAL_T: return vt_rng_normal_tensor(&c->out, a, c->x, b, c->y, c->seed, c->offset);
    }
    return vt_set_error(VT_ERR_INTERNAL, "rng: unknown op %d", (int)c->op);
}

static vt_status submit(int dev, const char *name, rng2_cmd *c, const vt_tensor *out, const vt_tensor *a,
                        const vt_tensor *b) {
    vt_status s = vt_check_device(dev);
    if (s) return s;
    if (!out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: out is NULL", name);
    if ((s = vt_tensor_validate(out, name))) return s;
    c->out = *out;
    if (a) {
        if ((s = vt_tensor_validate(a, name))) return s;
        c->a = *a;
        c->has_a = 1;
    }
    if (b) {
        if ((s = vt_tensor_validate(b, name))) return s;
        c->b = *b;
        c->has_b = 1;
    }
    /* elementwise ops may write over their input; dropout also writes its
     * mask (b); multinomial reads all of probs for each sample */
    unsigned in = c->op == R_MULTINOMIAL ? VT_USE_READ | VT_USE_STAGE : VT_USE_READ | VT_USE_ALIAS_OK;
    vt_use u[3] = {{&c->out, VT_USE_WRITE, 0}};
    int n = 1;
    if (a) u[n++] = (vt_use){&c->a, in, 0};
    if (b) u[n++] = (vt_use){&c->b, c->op == R_DROPOUT ? VT_USE_WRITE : in, 0};
    return vt_enqueue_uses(dev, name, rng2_kernel, c, sizeof *c, u, n);
}

#define NAME(n, d) ((n) ? (n) : (d))

vt_status vt_op_rng_exponential(int dev, const char *name, const vt_tensor *out, uint64_t seed, uint64_t offset,
                                double lambd) {
    name = NAME(name, "vt_op_rng_exponential");
    if (!(lambd > 0.0))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "exponential_ expects lambda > 0.0, but found lambda=%g", lambd);
    rng2_cmd c = {.op = R_EXP, .seed = seed, .offset = offset, .x = lambd};
    return submit(dev, name, &c, out, NULL, NULL);
}

vt_status vt_op_rng_random(int dev, const char *name, const vt_tensor *out, uint64_t seed, uint64_t offset,
                           int64_t from, uint64_t range) {
    rng2_cmd c = {.op = R_RANDOM, .seed = seed, .offset = offset, .from = from, .range = range};
    return submit(dev, NAME(name, "vt_op_rng_random"), &c, out, NULL, NULL);
}

vt_status vt_op_rng_bernoulli(int dev, const char *name, const vt_tensor *out, const vt_tensor *p, double p_scalar,
                              uint64_t seed, uint64_t offset) {
    name = NAME(name, "vt_op_rng_bernoulli");
    if (!p && !(p_scalar >= 0.0 && p_scalar <= 1.0))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "bernoulli_ expects p to be in [0, 1], but got p=%g", p_scalar);
    rng2_cmd c = {.op = R_BERNOULLI, .seed = seed, .offset = offset, .x = p_scalar};
    return submit(dev, name, &c, out, p, NULL);
}

vt_status vt_op_rng_dropout(int dev, const char *name, const vt_tensor *out, const vt_tensor *mask,
                            const vt_tensor *in, double p, uint64_t seed, uint64_t offset) {
    name = NAME(name, "vt_op_rng_dropout");
    if (!in) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: input is NULL", name);
    rng2_cmd c = {.op = R_DROPOUT, .seed = seed, .offset = offset, .x = p};
    return submit(dev, name, &c, out, in, mask);
}

vt_status vt_op_dropout_backward(int dev, const char *name, const vt_tensor *grad_in, const vt_tensor *grad,
                                 const vt_tensor *mask, double scale) {
    name = NAME(name, "vt_op_dropout_backward");
    if (!grad || !mask) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: grad or mask is NULL", name);
    rng2_cmd c = {.op = R_DROPOUT_BWD, .x = scale};
    return submit(dev, name, &c, grad_in, grad, mask);
}

vt_status vt_op_rng_multinomial(int dev, const char *name, const vt_tensor *out, const vt_tensor *probs,
                                int replacement, uint64_t seed, uint64_t offset) {
    name = NAME(name, "vt_op_rng_multinomial");
    if (!probs) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: probs is NULL", name);
    rng2_cmd c = {.op = R_MULTINOMIAL, .seed = seed, .offset = offset, .flag = replacement};
    return submit(dev, name, &c, out, probs, NULL);
}

vt_status vt_op_rng_randperm(int dev, const char *name, const vt_tensor *out, uint64_t seed, uint64_t offset) {
    rng2_cmd c = {.op = R_RANDPERM, .seed = seed, .offset = offset};
    return submit(dev, NAME(name, "vt_op_rng_randperm"), &c, out, NULL, NULL);
}

vt_status vt_op_rng_normal_tensor(int dev, const char *name, const vt_tensor *out, const vt_tensor *mean,
                                  double mean_scalar, const vt_tensor *std, double std_scalar, uint64_t seed,
                                  uint64_t offset) {
    rng2_cmd c = {.op = R_NORMAL_T, .seed = seed, .offset = offset, .x = mean_scalar, .y = std_scalar};
    return submit(dev, NAME(name, "vt_op_rng_normal_tensor"), &c, out, mean, std);
}
