/* reduce.c — vt_reduce: every op is one or two passes of "map each value,
 * then combine" (sum, prod, max, min; the walks are in reduce_pass.c)
 * followed by a per-output finish. This file lays out the geometry, runs
 * the passes and stores the results. */
#include <stdlib.h>

#include "kernels/reduce/reduce_pass.h"

/* ------------------------------------------------------------ geometry */

static void plan_init(red_plan *pl, const vt_tensor *out, const vt_tensor *in, uint64_t mask) {
    memset(pl, 0, sizeof *pl);
    pl->in_dt = in->dtype;
    pl->out_dt = out->dtype;
    pl->in_es = vt_dtype_size(in->dtype);
    pl->out_es = vt_dtype_size(out->dtype);
    pl->in_base = (const char *)vt_base(in);
    pl->out_base = vt_base(out);
    pl->nout = pl->R = 1;
    int64_t rs[VT_MAX_DIMS], rt[VT_MAX_DIMS];
    int nr = 0;
    for (int32_t d = 0; d < in->ndim; d++) {
        int64_t n = in->sizes[d];
        if ((mask >> d) & 1) {
            pl->R *= n;
            if (n != 1) rs[nr] = n, rt[nr] = in->strides[d], nr++;
        } else {
            pl->nout *= n;
            if (n == 1) continue;
            int k = pl->nk;
            if (k > 0 && pl->kin[k - 1] == in->strides[d] * n && pl->kout[k - 1] == out->strides[d] * n) {
                pl->ksz[k - 1] *= n;
                pl->kin[k - 1] = in->strides[d];
                pl->kout[k - 1] = out->strides[d];
            } else {
                pl->ksz[k] = n, pl->kin[k] = in->strides[d], pl->kout[k] = out->strides[d], pl->nk++;
            }
        }
    }
    /* Largest stride outermost, so the innermost reduced run is as
     * contiguous as the input allows (a transposed tensor reads in order). */
    for (int i = 1; i < nr; i++)
        for (int j = i; j > 0 && abs64(rt[j - 1]) < abs64(rt[j]); j--) {
            int64_t a = rs[j], b = rt[j];
            rs[j] = rs[j - 1], rt[j] = rt[j - 1], rs[j - 1] = a, rt[j - 1] = b;
        }
    for (int i = 0; i < nr; i++) {
        int k = pl->nr;
        if (k > 0 && pl->rin[k - 1] == rt[i] * rs[i]) {
            pl->rsz[k - 1] *= rs[i];
            pl->rin[k - 1] = rt[i];
        } else {
            pl->rsz[k] = rs[i], pl->rin[k] = rt[i], pl->nr++;
        }
    }
    if (pl->R == 0 || pl->nr == 0) { /* a virtual dim keeps the walkers simple */
        pl->nr = 1;
        pl->rsz[0] = pl->R;
        pl->rin[0] = 0;
    }
    if (pl->nout == 0) return; /* nothing to compute */
    int64_t sr = pl->rin[pl->nr - 1] ? abs64(pl->rin[pl->nr - 1]) : INT64_MAX;
    /* Lanes when the outputs lie closer together than the reduced values
     * (column sums), or when each output reduces so few values that a
     * per-output walk would be all overhead. */
    pl->vertical = pl->nk > 0 && (abs64(pl->kin[pl->nk - 1]) < sr || pl->R <= 16);
    int64_t lanes = 1;
    if (pl->vertical) {
        pl->lane_len = pl->ksz[pl->nk - 1];
        pl->tiles = (pl->lane_len + VW - 1) / VW;
        pl->groups = pl->nout / pl->lane_len * pl->tiles;
        lanes = min64(VW, pl->lane_len);
    } else {
        pl->groups = pl->nout;
    }
    pl->S = 1;
    pl->seg = pl->R > 0 ? pl->R : 1;
    if (pl->groups < SPLIT_BELOW && pl->R * lanes >= 2 * SEG) {
        int64_t seg = SEG / lanes;
        seg = seg < VB ? VB : seg / VB * VB;
        pl->seg = seg;
        pl->S = (pl->R + seg - 1) / seg;
    }
}

/* ------------------------------------------------------------ finish and store */

typedef struct red_job {
    red_plan pl;
    vt_reduce_op op;
    double param;
    vt_compute_class cls;
    vt_dtype cls_dt;
    void *res, *c; /* final pass results; first pass results turned into constants */
} red_job;

/* The op's last step on a run of results, in place, in the class type. */
static void finish(const red_job *jb, int64_t o, int64_t m) {
    double n = (double)jb->pl.R, p = jb->param;
    if (jb->cls == VT_CLASS_INT) return;
    if (jb->cls == VT_CLASS_FLOAT) {
        float *r = (float *)jb->res + o;
        const float *c = jb->c ? (const float *)jb->c + o : NULL;
        for (int64_t i = 0; i < m; i++) {
            switch (jb->op) {
            case VT_REDUCE_MEAN: r[i] = r[i] / (float)n; break;
            case VT_REDUCE_NORM:
                if (p == 2) r[i] = sqrtf(r[i]);
                else if (p != 0 && p != 1 && !isinf(p)) r[i] = powf(r[i], (float)(1.0 / p));
                break;
            case VT_REDUCE_LOGSUMEXP: r[i] = logf(r[i]) + c[i]; break;
            default: break;
            }
        }
        return;
    }
    double *r = (double *)jb->res + o;
    const double *c = jb->c ? (const double *)jb->c + o : NULL;
    double div = n - p > 0 ? n - p : 0;
    for (int64_t i = 0; i < m; i++) {
        switch (jb->op) {
        case VT_REDUCE_MEAN: r[i] = r[i] / n; break;
        case VT_REDUCE_VAR: r[i] = r[i] / div; break;
        case VT_REDUCE_STD: r[i] = sqrt(r[i] / div); break;
        case VT_REDUCE_NORM:
            if (p == 2) r[i] = sqrt(r[i]);
            else if (p != 0 && p != 1 && !isinf(p)) r[i] = pow(r[i], 1.0 / p);
            break;
        case VT_REDUCE_LOGSUMEXP: r[i] = log(r[i]) + c[i]; break;
        default: break;
        }
    }
}

/* Results are rounded to the compute dtype, then converted to out's. */
static void store_run(const red_job *jb, int64_t o, char *dst, int64_t ds, int64_t m) {
    const red_plan *pl = &jb->pl;
    size_t rs = vt_dtype_size(jb->cls_dt);
    const char *src = (const char *)jb->res + o * (int64_t)rs;
    if (pl->compute == jb->cls_dt || pl->compute == pl->out_dt) {
        vt_convert(jb->cls_dt, src, 1, pl->out_dt, dst, ds, m);
        return;
    }
    _Alignas(64) unsigned char tmp[CH * 8];
    for (int64_t i = 0; i < m; i += CH) {
        int64_t k = min64(CH, m - i);
        vt_convert(jb->cls_dt, src + i * (int64_t)rs, 1, pl->compute, tmp, 1, k);
        vt_convert(pl->compute, tmp, 1, pl->out_dt, dst + i * ds * (int64_t)pl->out_es, ds, k);
    }
}

static void store_range(void *ctx, int64_t b, int64_t e) {
    const red_job *jb = ctx;
    const red_plan *pl = &jb->pl;
    if (pl->nk == 0) {
        finish(jb, 0, 1);
        store_run(jb, 0, pl->out_base, 1, 1);
        return;
    }
    int nk = pl->nk;
    int64_t inner = pl->ksz[nk - 1];
    for (int64_t o = b; o < e;) {
        int64_t q = o / inner, i = o % inner, off = i * pl->kout[nk - 1];
        for (int d = nk - 2; d >= 0; d--) {
            off += (q % pl->ksz[d]) * pl->kout[d];
            q /= pl->ksz[d];
        }
        int64_t m = min64(inner - i, e - o);
        finish(jb, o, m);
        store_run(jb, o, pl->out_base + off * (int64_t)pl->out_es, pl->kout[nk - 1], m);
        o += m;
    }
}

/* ------------------------------------------------------------ entry point */

static vt_dtype class_of(vt_dtype compute, vt_compute_class *cls) {
    if (compute == VT_F32 || compute == VT_BF16 || compute == VT_F16) return *cls = VT_CLASS_FLOAT, VT_F32;
    if (compute == VT_F64) return *cls = VT_CLASS_DOUBLE, VT_F64;
    return *cls = VT_CLASS_INT, VT_I64;
}

/* First-pass results become the second pass's constants: the mean (var,
 * std) or the shift (logsumexp: the max, or 0 when it is infinite). */
static void to_constants(red_job *jb) {
    int64_t n = jb->pl.nout;
    if (jb->cls == VT_CLASS_FLOAT) {
        float *c = jb->c;
        for (int64_t i = 0; i < n; i++) c[i] = isinf(c[i]) ? 0.0f : c[i];
        return;
    }
    double *c = jb->c;
    for (int64_t i = 0; i < n; i++) {
        if (jb->op == VT_REDUCE_LOGSUMEXP) c[i] = isinf(c[i]) ? 0.0 : c[i];
        else c[i] = c[i] / (double)jb->pl.R;
    }
}

static int one_pass(vt_reduce_op op) {
    return op != VT_REDUCE_VAR && op != VT_REDUCE_STD && op != VT_REDUCE_LOGSUMEXP;
}

int vt_reduce_takes_source(vt_reduce_op op, const vt_tensor *out, const vt_tensor *in, uint64_t dims_mask) {
    if (!one_pass(op) || !vt_view_is_dense_forward(in)) return 0;
    red_plan pl;
    plan_init(&pl, out, in, in->ndim > 0 ? dims_mask : 0);
    /* Runs of consecutive elements, long enough that a source's cost per
     * read is small against the run's work: along the reduced dims, or,
     * for lanes (column sums), along a contiguous kept dim, whose rows fed
     * lanes read a run of tiles at a time. */
    if (pl.nout == 0) return 0;
    if (pl.vertical)
        return pl.kin[pl.nk - 1] == 1 && pl.lane_len >= VT_SOURCE_RUN;
    return pl.rin[pl.nr - 1] == 1 && pl.rsz[pl.nr - 1] >= VT_SOURCE_RUN;
}

vt_status vt_reduce(vt_reduce_op op, const vt_tensor *out, const vt_tensor *in, uint64_t dims_mask, vt_dtype compute,
                    double param) {
    vt_status s = vt_reduce_check(op, out, in, dims_mask, compute, param);
    return s == VT_OK ? vt_reduce_run(op, out, in, dims_mask, compute, param, NULL) : s;
}

vt_status vt_reduce_run(vt_reduce_op op, const vt_tensor *out, const vt_tensor *in, uint64_t dims_mask,
                        vt_dtype compute, double param, const vt_source *src) {
    red_job jb;
    plan_init(&jb.pl, out, in, in->ndim > 0 ? dims_mask : 0);
    jb.pl.compute = compute;
    jb.op = op;
    jb.param = param;
    jb.c = NULL;
    if (jb.pl.nout == 0) return VT_OK;
    /* var and std accumulate in double whatever the compute dtype, as
     * PyTorch's CPU kernels do. */
    jb.cls_dt = (op == VT_REDUCE_VAR || op == VT_REDUCE_STD) ? (jb.cls = VT_CLASS_DOUBLE, VT_F64)
                                                             : class_of(compute, &jb.cls);
    red_pass ps;
    memset(&ps, 0, sizeof ps);
    ps.pl = &jb.pl;
    ps.cls = jb.cls;
    ps.cls_dt = jb.cls_dt;
    ps.p = param;
    ps.src = src;
    atomic_int no_memory;
    atomic_init(&no_memory, 0);
    ps.no_memory = &no_memory;
    int passes = 1;
    switch (op) {
    case VT_REDUCE_PROD: ps.cmb = CMB_PROD, ps.ident = ID_ONE; break;
    case VT_REDUCE_AMAX: ps.cmb = CMB_MAX, ps.ident = ID_LOWEST; break;
    case VT_REDUCE_AMIN: ps.cmb = CMB_MIN, ps.ident = ID_HIGHEST; break;
    case VT_REDUCE_ANY: ps.map = MAP_NONZERO, ps.cmb = CMB_MAX, ps.ident = ID_ZERO; break;
    case VT_REDUCE_ALL: ps.map = MAP_NONZERO, ps.cmb = CMB_MIN, ps.ident = ID_ONE; break;
    case VT_REDUCE_VAR:
    case VT_REDUCE_STD: passes = 2; break;
    case VT_REDUCE_LOGSUMEXP: passes = 2, ps.cmb = CMB_MAX, ps.ident = ID_LOWEST; break;
    case VT_REDUCE_NORM:
        if (param == 0) ps.map = MAP_NONZERO;
        else if (param == 1) ps.map = MAP_ABS;
        else if (param == 2) ps.map = MAP_SQUARE;
        else if (param == INFINITY) ps.map = MAP_ABS, ps.cmb = CMB_MAX;
        else if (param == -INFINITY) ps.map = MAP_ABS, ps.cmb = CMB_MIN, ps.ident = ID_HIGHEST;
        else ps.map = MAP_POW;
        break;
    default: break; /* sum, mean: identity map, sum */
    }
    size_t es = vt_dtype_size(jb.cls_dt);
    size_t res_bytes = (size_t)jb.pl.nout * es;
    size_t parts_bytes = jb.pl.S > 1 ? (size_t)(jb.pl.groups * jb.pl.S * (jb.pl.vertical ? VW : 1)) * es : 0;
    size_t total = res_bytes * (size_t)passes + parts_bytes;
    _Alignas(64) unsigned char small[4096];
    unsigned char *mem = total <= sizeof small ? small : malloc(total);
    if (!mem)
        return vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s(): cannot allocate %zu bytes of reduction scratch",
                            vt_reduce_op_name(op), total);
    jb.res = mem;
    ps.parts = mem + res_bytes * (size_t)passes;
    if (passes == 2) {
        ps.res = jb.c = mem + res_bytes;
        vt_reduce_pass_run(&ps);
        to_constants(&jb);
        ps.c = jb.c;
        ps.cmb = CMB_SUM;
        ps.ident = ID_ZERO;
        ps.map = op == VT_REDUCE_LOGSUMEXP ? MAP_EXPSUB : MAP_SUBSQ;
    }
    ps.res = jb.res;
    vt_reduce_pass_run(&ps);
    if (!atomic_load(&no_memory)) vt_parallel_for(jb.pl.nout, GRAIN, store_range, &jb);
    if (mem != small) free(mem);
    if (atomic_load(&no_memory))
        return vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s(): out of host memory for the reduction's lanes",
                            vt_reduce_op_name(op));
    return VT_OK;
}
