/* rnn.c — the fused recurrent cells (vtpu/rnn.h): one time step's gate
 * arithmetic as one kernel. PyTorch composes a cell of about ten
 * elementwise ops on [B, 4H] tensors; on a small batch each op costs more
 * to issue than to compute, so a step of nn.LSTM spent most of its time
 * outside its math. Here a task takes a run of rows (batch entries) and
 * walks the cell's ops in PyTorch's order over each row, in float, with the
 * elementwise family's own class microkernels (vt_binary_ukernels,
 * vt_unary_ukernels, vt_ternary_ukernels: the ISA's vector sigmoid, tanh
 * and addcmul where it has them), rounding every op's result to the dtype
 * as a stored tensor would be: the bits of the composed ops. */
#define RNN_SFX portable
#include "kernels/rnn/rnn_body.h"

/* Rows per task: about this many gate values. (A batch-16, 256-unit LSTM
 * step: 33 -> 23 us a cell in a loop of cells when split over the two
 * threads, before the row loops were built per ISA; its device time now
 * comes out about the same either way.) */
#define CELL_GRAIN 4096

static _Atomic(vt_range_fn) rows_active = vt_rnn_cell_rows_portable, back_active = vt_rnn_back_rows_portable;

unsigned vt_rnn_select_isa(unsigned mask) {
    const unsigned isa = vt_isa_widest(mask);
    atomic_store(&rows_active, VT_ISA_TABLE(isa, vt_rnn_cell_rows_portable, vt_rnn_cell_rows_avx2,
                                            vt_rnn_cell_rows_avx512));
    atomic_store(&back_active, VT_ISA_TABLE(isa, vt_rnn_back_rows_portable, vt_rnn_back_rows_avx2,
                                            vt_rnn_back_rows_avx512));
    return isa;
}

static int is_float(vt_dtype dt) { return dt == VT_F32 || dt == VT_BF16 || dt == VT_F16; }

static vt_status want_shape(const char *fn, const char *what, const vt_tensor *t, int ndim, int64_t d0, int64_t d1) {
    if (!t) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s is required", fn, what);
    vt_status s = vt_tensor_validate(t, what);
    if (s != VT_OK) return vt_error_prefix(s, fn);
    if (t->ndim != ndim || t->sizes[0] != d0 || (ndim == 2 && t->sizes[1] != d1))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s must be [%lld%s%lld]", fn, what, (long long)d0,
                            ndim == 2 ? ", " : "", ndim == 2 ? (long long)d1 : 0LL);
    return VT_OK;
}

/* The cell's checks; *H its hidden size. k: gates per unit (4 LSTM, 3 GRU). */
static vt_status cell_check(const char *fn, int k, const vt_tensor *hy, const vt_tensor *cy, const vt_tensor *ws,
                            const vt_tensor *ig, const vt_tensor *hg, const vt_tensor *prev, const vt_tensor *bi,
                            const vt_tensor *bh, int64_t *H) {
    if (!ig || !hg || !prev)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: the gates and the previous state are required", fn);
    vt_status s = vt_tensor_validate(ig, "input_gates");
    if (s != VT_OK) return vt_error_prefix(s, fn);
    if (ig->ndim != 2 || ig->sizes[1] % k)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: input_gates must be [B, %d*H]", fn, k);
    const int64_t B = ig->sizes[0];
    *H = ig->sizes[1] / k;
    if (!is_float(ig->dtype))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: gates must be F32, BF16 or F16, got %s", fn,
                            vt_dtype_name(ig->dtype));
    if ((bi == NULL) != (bh == NULL))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: b_ih and b_hh must both be given or both absent", fn);
    const struct {
        const char *what;
        const vt_tensor *t;
        int ndim;
        int64_t d0, d1;
    } want[] = {{"hidden_gates", hg, 2, B, k * *H},   {"the previous state", prev, 2, B, *H},
                {"b_ih", bi, 1, k * *H, 0},           {"b_hh", bh, 1, k * *H, 0},
                {"hy", hy, 2, B, *H},                 {"cy", cy, 2, B, *H},
                {"workspace", ws, 2, B, (k == 4 ? 4 : 5) * *H}};
    for (size_t i = 0; i < sizeof want / sizeof want[0] && s == VT_OK; i++) {
        if ((i == 2 || i == 3) && !want[i].t) continue;
        if (i == 5 && k != 4) continue;
        s = want_shape(fn, want[i].what, want[i].t, want[i].ndim, want[i].d0, want[i].d1);
        if (s == VT_OK && want[i].t->dtype != ig->dtype)
            s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s must be %s like the gates, got %s", fn, want[i].what,
                             vt_dtype_name(ig->dtype), vt_dtype_name(want[i].t->dtype));
    }
    return s;
}

static vt_status cell_run(int lstm, const vt_tensor *hy, const vt_tensor *cy, const vt_tensor *ws,
                          const vt_tensor *ig, const vt_tensor *hg, const vt_tensor *prev, const vt_tensor *bi,
                          const vt_tensor *bh) {
    const char *fn = lstm ? "vt_lstm_cell" : "vt_gru_cell";
    int64_t H;
    vt_status s = cell_check(fn, lstm ? 4 : 3, hy, cy, ws, ig, hg, prev, bi, bh, &H);
    if (s != VT_OK) return s;
    const int64_t B = ig->sizes[0], kH = ig->sizes[1];
    if (B == 0 || H == 0) return VT_OK;
    vt_rnn_cell_job j = {lstm, H, ig->dtype, hy, cy, ws, ig, hg, prev, NULL, NULL, 0};
    float *bias = NULL;
    if (bi) {
        bias = malloc((size_t)(2 * kH) * sizeof(float));
        if (!bias) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
        vt_convert(bi->dtype, (const char *)bi->data + bi->offset * (int64_t)vt_dtype_size(bi->dtype), bi->strides[0],
                   VT_F32, bias, 1, kH);
        vt_convert(bh->dtype, (const char *)bh->data + bh->offset * (int64_t)vt_dtype_size(bh->dtype), bh->strides[0],
                   VT_F32, bias + kH, 1, kH);
        j.bi = bias, j.bh = bias + kH;
    }
    vt_parallel_for(B, kH >= CELL_GRAIN ? 1 : CELL_GRAIN / kH, atomic_load(&rows_active), &j);
    free(bias);
    if (atomic_load(&j.oom)) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    return VT_OK;
}

vt_status vt_lstm_cell(const vt_tensor *hy, const vt_tensor *cy, const vt_tensor *workspace,
                       const vt_tensor *input_gates, const vt_tensor *hidden_gates, const vt_tensor *cx,
                       const vt_tensor *b_ih, const vt_tensor *b_hh) {
    return cell_run(1, hy, cy, workspace, input_gates, hidden_gates, cx, b_ih, b_hh);
}

vt_status vt_gru_cell(const vt_tensor *hy, const vt_tensor *workspace, const vt_tensor *input_gates,
                      const vt_tensor *hidden_gates, const vt_tensor *hx, const vt_tensor *b_ih,
                      const vt_tensor *b_hh) {
    return cell_run(0, hy, NULL, workspace, input_gates, hidden_gates, hx, b_ih, b_hh);
}

vt_status vt_rnn_cell_check(const char *name, int lstm, const vt_tensor *hy, const vt_tensor *cy,
                            const vt_tensor *ws, const vt_tensor *ig, const vt_tensor *hg, const vt_tensor *prev,
                            const vt_tensor *bi, const vt_tensor *bh) {
    int64_t H;
    return cell_check(name, lstm ? 4 : 3, hy, cy, ws, ig, hg, prev, bi, bh, &H);
}

/* ------------------------------------------------------------ LSTM backward */

/* A backward's tensors: ref (what) a float [B, H], each of want [B, cols]
 * of ref's dtype (an absent optional one skipped). */
typedef struct want_rows {
    const char *what;
    const vt_tensor *t;
    int64_t cols;
    int optional;
} want_rows;

static vt_status ref_rows(const char *fn, const char *what, const vt_tensor *ref) {
    if (!ref) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s is required", fn, what);
    vt_status s = vt_tensor_validate(ref, what);
    if (s != VT_OK) return vt_error_prefix(s, fn);
    if (ref->ndim != 2) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s must be [B, H]", fn, what);
    if (!is_float(ref->dtype))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s must be F32, BF16 or F16, got %s", fn, what,
                            vt_dtype_name(ref->dtype));
    return VT_OK;
}

static vt_status rows_like(const char *fn, const char *ref_what, const vt_tensor *ref, const want_rows *want, size_t n) {
    vt_status s = VT_OK;
    for (size_t i = 0; i < n && s == VT_OK; i++) {
        if (want[i].optional && !want[i].t) continue;
        s = want_shape(fn, want[i].what, want[i].t, 2, ref->sizes[0], want[i].cols);
        if (s == VT_OK && want[i].t->dtype != ref->dtype)
            s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s must be %s like %s, got %s", fn, want[i].what,
                             vt_dtype_name(ref->dtype), ref_what, vt_dtype_name(want[i].t->dtype));
    }
    return s;
}

static vt_status back_check(const char *fn, const vt_tensor *gg, const vt_tensor *gcx, const vt_tensor *ghy,
                            const vt_tensor *gcy, const vt_tensor *cx, const vt_tensor *cy, const vt_tensor *ws) {
    if (!ghy && !gcy) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: grad_hy or grad_cy is required", fn);
    vt_status s = ref_rows(fn, "cx", cx);
    if (s != VT_OK) return s;
    const int64_t H = cx->sizes[1];
    const want_rows want[] = {{"grad_hy", ghy, H, 1},       {"grad_cy", gcy, H, 1},         {"cy", cy, H, 0},
                              {"workspace", ws, 4 * H, 0}, {"grad_gates", gg, 4 * H, 0}, {"grad_cx", gcx, H, 0}};
    return rows_like(fn, "cx", cx, want, sizeof want / sizeof want[0]);
}

vt_status vt_rnn_cell_backward_check(const char *name, const vt_tensor *grad_gates, const vt_tensor *grad_cx,
                                     const vt_tensor *grad_hy, const vt_tensor *grad_cy, const vt_tensor *cx,
                                     const vt_tensor *cy, const vt_tensor *workspace) {
    return back_check(name, grad_gates, grad_cx, grad_hy, grad_cy, cx, cy, workspace);
}

vt_status vt_lstm_cell_backward(const vt_tensor *grad_gates, const vt_tensor *grad_cx, const vt_tensor *grad_hy,
                                const vt_tensor *grad_cy, const vt_tensor *cx, const vt_tensor *cy,
                                const vt_tensor *workspace) {
    const char *fn = "vt_lstm_cell_backward";
    vt_status s = back_check(fn, grad_gates, grad_cx, grad_hy, grad_cy, cx, cy, workspace);
    if (s != VT_OK) return s;
    const int64_t B = cx->sizes[0], H = cx->sizes[1];
    if (B == 0 || H == 0) return VT_OK;
    vt_rnn_back_job j = {0, H, cx->dtype, grad_gates, NULL, grad_cx, grad_hy, grad_cy, cx, cy, workspace, 0};
    vt_parallel_for(B, 4 * H >= CELL_GRAIN ? 1 : CELL_GRAIN / (4 * H), atomic_load(&back_active), &j);
    if (atomic_load(&j.oom)) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    return VT_OK;
}

/* ------------------------------------------------------------ GRU backward */

static vt_status gru_back_check(const char *fn, const vt_tensor *gi, const vt_tensor *gh, const vt_tensor *ghx,
                                const vt_tensor *ghy, const vt_tensor *ws) {
    vt_status s = ref_rows(fn, "grad_hy", ghy);
    if (s != VT_OK) return s;
    const int64_t H = ghy->sizes[1];
    const want_rows want[] = {{"workspace", ws, 5 * H, 0},
                              {"grad_input_gates", gi, 3 * H, 0},
                              {"grad_hidden_gates", gh, 3 * H, 0},
                              {"grad_hx", ghx, H, 0}};
    return rows_like(fn, "grad_hy", ghy, want, sizeof want / sizeof want[0]);
}

vt_status vt_rnn_gru_backward_check(const char *name, const vt_tensor *grad_input_gates,
                                    const vt_tensor *grad_hidden_gates, const vt_tensor *grad_hx,
                                    const vt_tensor *grad_hy, const vt_tensor *workspace) {
    return gru_back_check(name, grad_input_gates, grad_hidden_gates, grad_hx, grad_hy, workspace);
}

vt_status vt_gru_cell_backward(const vt_tensor *grad_input_gates, const vt_tensor *grad_hidden_gates,
                               const vt_tensor *grad_hx, const vt_tensor *grad_hy, const vt_tensor *workspace) {
    const char *fn = "vt_gru_cell_backward";
    vt_status s = gru_back_check(fn, grad_input_gates, grad_hidden_gates, grad_hx, grad_hy, workspace);
    if (s != VT_OK) return s;
    const int64_t B = grad_hy->sizes[0], H = grad_hy->sizes[1];
    if (B == 0 || H == 0) return VT_OK;
    vt_rnn_back_job j = {1,    H,       grad_hy->dtype, grad_input_gates, grad_hidden_gates, grad_hx, grad_hy,
                         NULL, NULL,    NULL,           workspace,        0};
    vt_parallel_for(B, 3 * H >= CELL_GRAIN ? 1 : CELL_GRAIN / (3 * H), atomic_load(&back_active), &j);
    if (atomic_load(&j.oom)) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    return VT_OK;
}
