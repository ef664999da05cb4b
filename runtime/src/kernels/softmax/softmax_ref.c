/* softmax_ref.c — scalar references for vt_softmax and vt_softmax_backward:
 * each line gathered element by element in logical order, computed in
 * double, each result rounded once to the output's dtype. */
#include <stdlib.h>

#include "softmax.h"

typedef struct line_walk {
    int64_t C, inner, lines;
} line_walk;

static line_walk walk_of(const vt_tensor *t, int dim) {
    line_walk w = {1, 1, 0};
    if (t->ndim) w.C = t->sizes[dim];
    for (int d = dim + 1; d < t->ndim; d++) w.inner *= t->sizes[d];
    int64_t n = vt_tensor_numel(t);
    w.lines = w.C ? n / w.C : 0;
    return w;
}

/* Logical index of element c of line j. */
static int64_t line_elem(const line_walk *w, int64_t j, int64_t c) {
    return (j / w->inner) * w->C * w->inner + c * w->inner + j % w->inner;
}

vt_status vt_ref_softmax(const vt_tensor *out, const vt_tensor *in, int dim, int is_log) {
    int d;
    vt_status s = vt_softmax_check(out, in, dim, &d);
    if (s != VT_OK) return s;
    line_walk w = walk_of(in, d);
    double *v = malloc((size_t)(w.C ? w.C : 1) * sizeof *v);
    if (!v) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "softmax reference: out of memory");
    for (int64_t j = 0; j < w.lines; j++) {
        double m = -INFINITY, sum = 0;
        for (int64_t c = 0; c < w.C; c++) {
            v[c] = vt_sm_load(in, vt_sm_offset(in, line_elem(&w, j, c)));
            if (isnan(v[c]) || v[c] > m) m = isnan(m) ? m : v[c];
        }
        for (int64_t c = 0; c < w.C; c++) sum += exp(v[c] - m);
        for (int64_t c = 0; c < w.C; c++) {
            double r = is_log ? v[c] - m - log(sum) : exp(v[c] - m) / sum;
            vt_sm_store(out, vt_sm_offset(out, line_elem(&w, j, c)), r);
        }
    }
    free(v);
    return VT_OK;
}

vt_status vt_ref_softmax_backward(const vt_tensor *grad_in, const vt_tensor *grad_out, const vt_tensor *y, int dim,
                                  int is_log) {
    int d;
    vt_status s = vt_softmax_backward_check(grad_in, grad_out, y, dim, &d);
    if (s != VT_OK) return s;
    line_walk w = walk_of(y, d);
    double *g = malloc((size_t)(w.C ? w.C : 1) * 2 * sizeof *g);
    if (!g) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "softmax reference: out of memory");
    double *yv = g + (w.C ? w.C : 1);
    for (int64_t j = 0; j < w.lines; j++) {
        double sum = 0;
        for (int64_t c = 0; c < w.C; c++) {
            int64_t li = line_elem(&w, j, c);
            g[c] = vt_sm_load(grad_out, vt_sm_offset(grad_out, li));
            yv[c] = vt_sm_load(y, vt_sm_offset(y, li));
            sum += is_log ? g[c] : g[c] * yv[c];
        }
        for (int64_t c = 0; c < w.C; c++) {
            double r = is_log ? g[c] - exp(yv[c]) * sum : yv[c] * (g[c] - sum);
            vt_sm_store(grad_in, vt_sm_offset(grad_in, line_elem(&w, j, c)), r);
        }
    }
    free(g);
    return VT_OK;
}
