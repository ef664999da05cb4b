/* codegen.c — generated C for the fusion groups of graph programs
 * (codegen.h): a group's members written out as one C function, from the
 * nodes the group was cut from; codegen_cc.c compiles and loads it.
 *
 * A group's source names no address and no scalar value: its pointers,
 * sizes, strides and host scalars are arguments, so one object serves
 * every run of the group (an optimizer's learning rate changes, its code
 * does not). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/codegen.h"

/* ------------------------------------------------------------ the source */

typedef struct sbuf {
    char *s;
    size_t n, cap;
    int bad;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) {
    if (b->bad) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const int m = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (m < 0) {
            b->bad = 1;
            return;
        }
        if (b->s && b->n + (size_t)m < b->cap) {
            b->n += (size_t)m;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap <= b->n + (size_t)m) cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->bad = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

typedef struct gen {
    sbuf body, decl;
    vt_cg_group *g;
    int ndim;                   /* the group's shape, in the order it is walked */
    int64_t sizes[VT_MAX_DIMS];
    const int64_t *osizes;      /* its shape as the nodes have it */
    const int *perm;            /* dim d of the walk is dim perm[d] of the nodes' (NULL: the same) */
    vt_dtype dt[VT_CG_MAX_PTRS]; /* of each pointer (g->p) */
    int64_t st[VT_CG_MAX_PTRS][VT_MAX_DIMS]; /* each pointer's strides over the group's shape (0: broadcast) */
    const void *block[VT_CG_MAX_PTRS];      /* the allocation it points into (NULL: the tail's scratch) */
    const vt_tensor *view[VT_CG_MAX_PTRS];  /* a view it stands for */
    int written[VT_CG_MAX_PTRS];
    int nscalar;
    int full; /* more pointers or host scalars than a group takes */
    /* Chains: members tied by a value one computes and another uses, or
     * by memory one of them writes (union-find over members); each chain
     * runs over a tile before the next, so a wide group (an optimizer's
     * chains side by side) streams a few arrays at a time, as the plans do. */
    int cur; /* the member being written */
    int parent[VT_FUSE_MAX_NODES];
    int ntouch;
    int16_t touch_m[VT_FUSE_MAX_NODES * 5], touch_p[VT_FUSE_MAX_NODES * 5];
    size_t span[VT_FUSE_MAX_NODES + 1]; /* member i's statements: body[span[i], span[i + 1]) */
    /* Calls: a member whose op has no expression here (exp, tanh, erf, the
     * activations) calls its plan's kernel on chunk buffers, as the
     * interpreter calls it on tiles: the same function, so the same bits
     * on every ISA path. */
    int fnslot[VT_CG_MAX_PTRS];      /* pointer q is a kernel of fnslot[q] inputs (0: memory) */
    int ncall;
    int call_fn[VT_FUSE_MAX_NODES];  /* member i's kernel pointer (-1: not a call) */
    int call_k[VT_FUSE_MAX_NODES];   /* the first k of its parameter block */
    char call_in[VT_FUSE_MAX_NODES][2][48]; /* its operands' expressions */
    int last_use[VT_FUSE_MAX_NODES]; /* the last member reading member i's value (-1: none) */
    /* whether src k of the member being written is one value for every
     * element: a host scalar, a one-element tensor, or a view broadcast
     * along every dim (an expanded scalar) */
    int src_one[3];
} gen;

static int root(gen *c, int i) {
    while (c->parent[i] != i) i = c->parent[i] = c->parent[c->parent[i]];
    return i;
}

static void tie(gen *c, int i, int j) {
    i = root(c, i), j = root(c, j);
    if (i != j) c->parent[i > j ? i : j] = i < j ? i : j; /* a chain's root is its first member */
}

/* The member being written uses pointer p. */
static void touch(gen *c, int p) {
    if (c->ntouch == (int)(sizeof c->touch_m / sizeof c->touch_m[0])) {
        c->full = 1;
        return;
    }
    c->touch_m[c->ntouch] = (int16_t)c->cur;
    c->touch_p[c->ntouch++] = (int16_t)p;
}

static int dtype_ok(vt_dtype dt) { return dt == VT_F32 || dt == VT_BF16; }

/* The pointer argument for the view at addr of dtype dt with strides st
 * over the group's shape (one per view; addr NULL: a new one). */
static int ptr_of(gen *c, const void *addr, vt_dtype dt, const int64_t *st, int write, const void *block,
                  const vt_tensor *view) {
    const size_t sb = sizeof(int64_t) * (size_t)c->ndim;
    for (int i = 0; i < c->g->nptr; i++)
        if (addr && c->g->p[i] == addr && c->dt[i] == dt && memcmp(c->st[i], st, sb) == 0) {
            c->written[i] |= write;
            return i;
        }
    if (c->g->nptr == VT_CG_MAX_PTRS) return -1;
    const int i = c->g->nptr++;
    c->g->p[i] = (void *)(uintptr_t)addr;
    c->dt[i] = dt;
    memcpy(c->st[i], st, sb);
    c->written[i] = write;
    c->block[i] = block;
    c->view[i] = view;
    return i;
}

/* t's strides over the group's walk, t broadcast to the group's shape
 * (right-aligned; 0 along a dim t has not or has of size 1); 0 when t
 * does not broadcast. */
static int bstrides(const gen *c, const vt_tensor *t, int64_t *st) {
    if (t->ndim > c->ndim) return 0;
    const int lead = c->ndim - t->ndim;
    int64_t in[VT_MAX_DIMS];
    for (int d = 0; d < c->ndim; d++) {
        if (d < lead) {
            in[d] = 0;
            continue;
        }
        const int64_t n = t->sizes[d - lead];
        if (n != 1 && n != c->osizes[d]) return 0;
        in[d] = n == 1 ? 0 : t->strides[d - lead];
    }
    for (int d = 0; d < c->ndim; d++) st[d] = in[c->perm ? c->perm[d] : d];
    return 1;
}

/* The index of host scalar v in k (a full k marks the group full: it
 * runs its plans). */
static int host_k(gen *c, float v) {
    if (c->g->nk == VT_CG_MAX_K) {
        c->full = 1;
        return 0;
    }
    c->g->k[c->g->nk] = v;
    return c->g->nk++;
}

/* Into name (a C expression of the value as a float): src k of member i,
 * rounded to compute where compute is bf16 and the value f32 (as the
 * plans stage an input in the compute dtype). */
static int operand(gen *c, const vt_rec *const *r, int i, int k, const vt_dtype *val_dt, vt_dtype compute, char *name,
                   size_t cap) {
    const vt_node *n = &r[i]->n;
    vt_dtype dt;
    char raw[32];
    c->src_one[k] = 1; /* but for a view that steps, or an earlier member's value */
    if (n->host >> k & 1) {
        if (!dtype_ok(n->compute)) return 0;
        float v;
        if (n->compute == VT_F32) {
            memcpy(&v, n->store[k], 4);
        } else {
            uint16_t h;
            memcpy(&h, n->store[k], 2);
            v = vt_bf16_to_f32(h);
        }
        snprintf(raw, sizeof raw, "k%d", host_k(c, v));
        dt = n->compute;
    } else {
        const int a = r[i]->acc_of_src[k];
        if (a < 0) return 0;
        const vt_tensor *t = &n->src[k];
        dt = t->dtype;
        if (!dtype_ok(dt)) return 0;
        int64_t st[VT_MAX_DIMS];
        if (!bstrides(c, t, st)) return 0;
        int from = -1; /* an earlier member's value, through the same view */
        for (int j = i - 1; j >= 0 && from < 0; j--) {
            const vt_tensor *o = &r[j]->n.out[0];
            int64_t ost[VT_MAX_DIMS];
            if (r[j]->acc[0].block == r[i]->acc[a].block && r[j]->acc[0].gen == r[i]->acc[a].gen &&
                vt_base(o) == vt_base(t) && o->dtype == t->dtype && bstrides(c, o, ost) &&
                memcmp(ost, st, sizeof(int64_t) * (size_t)c->ndim) == 0)
                from = j;
        }
        if (from >= 0) {
            tie(c, i, from);
            c->src_one[k] = 0;
            if (c->last_use[from] < i) c->last_use[from] = i;
            snprintf(raw, sizeof raw, "v%d", from);
            dt = val_dt[from];
        } else if (vt_tensor_numel(t) == 1) {
            const int p = ptr_of(c, vt_base(t), dt, st, 0, r[i]->acc[a].block, t);
            if (p < 0) return 0;
            touch(c, p);
            const int s = c->nscalar++; /* read once, before the loop, as the plans read it once per run */
            put(&c->decl, dt == VT_F32 ? "    const float s%d = p%d[0];\n" : "    const float s%d = bf(p%d[0]);\n", s, p);
            snprintf(raw, sizeof raw, "s%d", s);
        } else {
            const int p = ptr_of(c, vt_base(t), dt, st, 0, r[i]->acc[a].block, t);
            if (p < 0) return 0;
            touch(c, p);
            for (int d = 0; d < c->ndim && c->src_one[k]; d++) c->src_one[k] = st[d] == 0 || c->sizes[d] == 1;
            snprintf(raw, sizeof raw, dt == VT_F32 ? "A%d" : "bf(A%d)", p); /* A<p>: the element (see emit) */
        }
    }
    if (compute == VT_BF16 && dt == VT_F32) snprintf(name, cap, "rbf(%s)", raw);
    else snprintf(name, cap, "%s", raw);
    return 1;
}

/* The expression member i computes, in f32, from its operands x, y. */
static int expression(gen *c, const vt_node *n, const char *x, const char *y, char *e, size_t cap) {
    if (n->kind == VT_NODE_BINARY) {
        const float al = n->alpha.is_float ? (float)n->alpha.f : (float)n->alpha.i;
        switch (n->op) {
        case VT_ADD:
        case VT_SUB: {
            const char sign = n->op == VT_ADD ? '+' : '-';
            if (al == 1) {
                snprintf(e, cap, "%s %c %s", x, sign, y);
            } else {
                snprintf(e, cap, "fmaf(k%d, %s, %s)", host_k(c, n->op == VT_ADD ? al : -al), y, x);
            }
            return 1;
        }
        case VT_MUL: snprintf(e, cap, "%s * %s", x, y); return 1;
        case VT_DIV: snprintf(e, cap, "%s / %s", x, y); return 1;
        case VT_POW: snprintf(e, cap, "powf(%s, %s)", x, y); return 1; /* the plan's libm call */
        case VT_MAXIMUM:
        case VT_MINIMUM:
            snprintf(e, cap, "(%s != %s || %s != %s) ? NAN : (%s %c %s ? %s : %s)", x, x, y, y, x,
                     n->op == VT_MAXIMUM ? '>' : '<', y, x, y);
            return 1;
        case VT_THRESHOLD_BACKWARD: snprintf(e, cap, "%s <= k%d ? 0.0f : %s", y, host_k(c, al), x); return 1;
        case VT_TANH_BACKWARD: snprintf(e, cap, "%s * fmaf(-%s, %s, 1.0f)", x, y, y); return 1;
        case VT_SIGMOID_BACKWARD: snprintf(e, cap, "%s * (1.0f - %s) * %s", x, y, y); return 1;
        default: return 0;
        }
    }
    switch (n->op) {
    case VT_NEG: snprintf(e, cap, "-%s", x); return 1;
    case VT_ABS: snprintf(e, cap, "fabsf(%s)", x); return 1;
    case VT_SQUARE: snprintf(e, cap, "%s * %s", x, x); return 1;
    case VT_RECIPROCAL: snprintf(e, cap, "1.0f / %s", x); return 1;
    case VT_SQRT: snprintf(e, cap, "sqrtf(%s)", x); return 1;
    case VT_RSQRT: snprintf(e, cap, "1.0f / sqrtf(%s)", x); return 1;
    case VT_RELU: snprintf(e, cap, "%s < 0 ? 0.0f : %s", x, x); return 1;
    default: return 0;
    }
}

/* Member i as a call of its plan's kernel (the float class's, on operands
 * of one value per element: the interpreter passes one value with stride
 * 0, which takes the kernels' other path, so such a member stays with the
 * interpreter): e, its value, is its output buffer's element. */
static int call_member(gen *c, const vt_ew_plan *plan, int i, int nin, const char *x, const char *y, char *e,
                       size_t cap) {
    const void *fn;
    int kin;
    float prm[1 + VT_EW_MAX_PARAMS];
    if (!plan || !vt_ew_plan_float_kernel(plan, &fn, &kin, prm) || kin != nin || c->src_one[0] ||
        (y && c->src_one[1]))
        return 0;
    int q = -1;
    for (int p = 0; p < c->g->nptr && q < 0; p++)
        if (c->fnslot[p] == nin && c->g->p[p] == fn) q = p;
    if (q < 0) {
        if (c->g->nptr == VT_CG_MAX_PTRS) return 0;
        q = c->g->nptr++;
        c->g->p[q] = (void *)(uintptr_t)fn;
        c->dt[q] = VT_F32;
        memset(c->st[q], 0, sizeof c->st[q]);
        c->written[q] = 0;
        c->block[q] = NULL;
        c->view[q] = NULL;
        c->fnslot[q] = nin;
    }
    c->call_fn[i] = q;
    c->call_k[i] = c->g->nk;
    for (int k = 0; k <= VT_EW_MAX_PARAMS; k++) host_k(c, prm[k]);
    snprintf(c->call_in[i][0], sizeof c->call_in[i][0], "%s", x);
    snprintf(c->call_in[i][1], sizeof c->call_in[i][1], "%s", y ? y : "");
    c->ncall++;
    snprintf(e, cap, "O%d[u]", i);
    return 1;
}

/* The expression a foreach member computes (kernels/optim/optim.h's
 * element formulas, with its plan's scalars), from its operands a, b, c
 * (NULL: absent), in f32. */
static int foreach_expression(gen *c, const vt_node *n, const char *a, const char *b, const char *t, char *e,
                              size_t cap) {
    const vt_foreach_args x = vt_foreach_node_args(n);
    float sv, al;
    if (!vt_foreach_item_f32_scalars(&x, 0, &sv, &al)) return 0;
    int ks = -1, ka = -1; /* host scalars made on first use */
#define KS (ks < 0 ? (ks = host_k(c, sv)) : ks)
#define KA (ka < 0 ? (ka = host_k(c, al)) : ka)
    /* B: the other tensor, or the scalar S (binary ops) */
    char S[48] = "";
    if (b) snprintf(S, sizeof S, "%s", b);
    else if (n->op <= VT_FOREACH_CLAMP_MAX) snprintf(S, sizeof S, "k%d", KS);
    switch ((vt_foreach_op)n->op) {
    case VT_FOREACH_ADD:
    case VT_FOREACH_SUB: snprintf(e, cap, "fmaf(%s, k%d, %s)", S, KA, a); return 1;
    case VT_FOREACH_MUL: snprintf(e, cap, "%s * %s", a, S); return 1;
    case VT_FOREACH_DIV: snprintf(e, cap, "%s / %s", a, S); return 1;
    case VT_FOREACH_MAXIMUM:
        snprintf(e, cap, "(%s != %s || %s != %s ? %s + %s : (%s > %s ? %s : %s))", a, a, S, S, a, S, a, S, a, S);
        return 1;
    case VT_FOREACH_MINIMUM:
        snprintf(e, cap, "(%s != %s || %s != %s ? %s + %s : (%s < %s ? %s : %s))", a, a, S, S, a, S, a, S, a, S);
        return 1;
    case VT_FOREACH_CLAMP_MIN: snprintf(e, cap, "%s < %s ? %s : %s", a, S, S, a); return 1;
    case VT_FOREACH_CLAMP_MAX: snprintf(e, cap, "%s > %s ? %s : %s", a, S, S, a); return 1;
    case VT_FOREACH_POW: /* the exponents the kernel computes without pow() */
        if (b) return 0;
        if (sv == 2) snprintf(e, cap, "%s * %s", a, a);
        else if (sv == 0.5f) snprintf(e, cap, "sqrtf(%s)", a);
        else if (sv == 1) snprintf(e, cap, "%s", a);
        else if (sv == -1) snprintf(e, cap, "1.0f / %s", a);
        else return 0;
        return 1;
    case VT_FOREACH_ADDCMUL: snprintf(e, cap, "fmaf(k%d * %s, %s, %s)", KS, b, t, a); return 1;
    case VT_FOREACH_ADDCDIV: snprintf(e, cap, "%s + (k%d * %s) / %s", a, KS, b, t); return 1;
    case VT_FOREACH_LERP:
        if (!b) return 0;
        if (t) /* |w| < 0.5 per element, as OPTIM_LERP */
            snprintf(e, cap, "(fabsf(%s) < 0.5f ? fmaf(%s, %s - %s, %s) : fmaf(%s - 1.0f, %s - %s, %s))", t, t, b, a, a,
                     t, b, a, b);
        else if (fabs((double)sv) < 0.5) snprintf(e, cap, "fmaf(k%d, %s - %s, %s)", KS, b, a, a);
        else snprintf(e, cap, "fmaf(k%d - 1.0f, %s - %s, %s)", KS, b, a, b);
        return 1;
    case VT_FOREACH_NEG: snprintf(e, cap, "-%s", a); return 1;
    case VT_FOREACH_ABS: snprintf(e, cap, "(%s < 0 ? -%s : (%s == 0 ? 0.0f : %s))", a, a, a, a); return 1;
    case VT_FOREACH_SQRT: snprintf(e, cap, "sqrtf(%s)", a); return 1;
    case VT_FOREACH_SIGN:
        snprintf(e, cap, "(%s != %s ? %s : (float)((%s > 0) - (%s < 0)))", a, a, a, a, a);
        return 1;
    case VT_FOREACH_RECIPROCAL: snprintf(e, cap, "1.0f / %s", a); return 1;
    case VT_FOREACH_COPY: snprintf(e, cap, "%s", a); return 1;
    default: return 0; /* exp (the ISA tables' own), zero (no input), the reductions */
    }
#undef KS
#undef KA
}

/* Elements per tile of a group of several chains: one chain streams its
 * own few arrays at a time (a loop over all of an optimizer's chains at
 * once would stream dozens, more than the prefetchers follow). */
#define CHAIN_TILE 2048

static const char preamble[] =
    "#include <math.h>\n#include <stdint.h>\n#include <string.h>\n"
    "static inline float bf(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }\n"
    /* vt_f32_to_bf16 widened back, in 32-bit lanes (no narrowing in the loop) */
    "static inline float rbf(float f) {\n"
    "    uint32_t u; memcpy(&u, &f, 4);\n"
    "    u = f != f ? 0x7fc00000u : (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;\n"
    "    float r; memcpy(&r, &u, 4); return r;\n}\n"
    /* a value rbf rounded, as bf16 */
    "static inline uint16_t hi(float f) { uint32_t u; memcpy(&u, &f, 4); return (uint16_t)(u >> 16); }\n";

/* The group's shape with size-1 dims dropped and adjacent dims every
 * pointer lays out alike merged (as vt_iter merges them), into g: the m
 * merged sizes, then each pointer's m strides. Returns m, or 0 when more
 * than VT_CG_MAX_DIMS remain. */
static int merge_dims(gen *c) {
    int64_t size[VT_MAX_DIMS];
    int keep[VT_MAX_DIMS], m = 0;
    for (int d = 0; d < c->ndim; d++) {
        if (c->sizes[d] == 1) continue;
        int joins = m > 0;
        for (int q = 0; q < c->g->nptr && joins; q++) joins = c->st[q][keep[m - 1]] == c->st[q][d] * c->sizes[d];
        if (joins) {
            size[m - 1] *= c->sizes[d];
            keep[m - 1] = d; /* the merged dim steps as its innermost part */
        } else {
            size[m] = c->sizes[d];
            keep[m++] = d;
        }
    }
    if (m == 0 || m > VT_CG_MAX_DIMS) return 0;
    int64_t *g = c->g->g;
    for (int d = 0; d < m; d++) g[d] = size[d];
    for (int q = 0; q < c->g->nptr; q++)
        for (int d = 0; d < m; d++) g[m + q * m + d] = c->st[q][keep[d]];
    return m;
}

/* Elements per chunk of a group with calls, and the chunk buffers it may
 * keep on the stack (a call's inputs and output, and values read past a
 * call). */
#define CALL_CHUNK 256
#define CALL_MAX_BUFS 48

/* A group with calls runs chunk by chunk: the members between two calls
 * as one loop over the chunk (u: the element's place in it), a value a
 * later loop reads kept in a chunk buffer; then the call on the chunk. */
typedef struct call_segs {
    int nseg;
    int seg[VT_FUSE_MAX_NODES];      /* the loop member i runs in */
    int last_seg[VT_FUSE_MAX_NODES]; /* the last loop reading its value (-1: none) */
    int carried[VT_FUSE_MAX_NODES];  /* kept in a buffer for a later loop */
} call_segs;

/* The loops of a group with calls, and its buffers on the stack; 0 when
 * they would not fit. */
static int call_plan(const gen *c, int count, call_segs *cs) {
    int bufs = 0;
    cs->nseg = 0;
    for (int i = 0; i < count; i++) cs->seg[i] = cs->nseg += c->call_fn[i] >= 0;
    cs->nseg++;
    for (int j = 0; j < count; j++) {
        const int u = c->last_use[j];
        /* a call reads its operands in the loop before it */
        cs->last_seg[j] = u < 0 ? -1 : cs->seg[u] - (c->call_fn[u] >= 0);
        cs->carried[j] = cs->last_seg[j] > cs->seg[j];
        bufs += cs->carried[j] + (c->call_fn[j] >= 0 ? (c->fnslot[c->call_fn[j]] == 2 ? 3 : 2) : 0);
    }
    return bufs <= CALL_MAX_BUFS;
}

static void emit_call_buffers(const gen *c, sbuf *src, int count, const call_segs *cs) {
    for (int j = 0; j < count; j++) {
        if (cs->carried[j]) put(src, "    float B%d[%d];\n", j, CALL_CHUNK);
        if (c->call_fn[j] < 0) continue;
        put(src, "    float I%d[%d], O%d[%d];\n", j, CALL_CHUNK, j, CALL_CHUNK);
        if (c->fnslot[c->call_fn[j]] == 2) put(src, "    float J%d[%d];\n", j, CALL_CHUNK);
    }
}

/* The chunks of elements var = lo .. hi (C expressions; var is what the
 * members' statements index by). */
static void emit_call_chunks(const gen *c, sbuf *src, int count, const call_segs *cs, const char *var, const char *lo,
                             const char *hi) {
    put(src, "    for (int64_t t = %s; t < %s; t += %d) {\n", lo, hi, CALL_CHUNK);
    put(src, "    const int64_t te = %s - t < %d ? %s : t + %d;\n", hi, CALL_CHUNK, hi, CALL_CHUNK);
    int next = 0; /* the call that ends the current loop */
    for (int s = 0; s < cs->nseg; s++) {
        while (next < count && (c->call_fn[next] < 0 || cs->seg[next] <= s)) next++;
        put(src, "    for (int64_t %s = t; %s < te; %s++) {\n        const int64_t u = %s - t;\n", var, var, var, var);
        for (int j = 0; j < count; j++)
            if (cs->carried[j] && cs->seg[j] < s && cs->last_seg[j] >= s)
                put(src, "        const float v%d = B%d[u];\n", j, j);
        for (int i = 0; i < count; i++) {
            if (cs->seg[i] != s) continue;
            put(src, "%.*s", (int)(c->span[i + 1] - c->span[i]), c->body.s + c->span[i]);
            if (cs->carried[i]) put(src, "        B%d[u] = v%d;\n", i, i);
        }
        if (next < count) {
            put(src, "        I%d[u] = %s;\n", next, c->call_in[next][0]);
            if (c->fnslot[c->call_fn[next]] == 2) put(src, "        J%d[u] = %s;\n", next, c->call_in[next][1]);
        }
        put(src, "    }\n");
        if (next < count) {
            const int f = c->call_fn[next];
            if (c->fnslot[f] == 2)
                put(src, "    f%d(te - t, O%d, I%d, 1, J%d, 1, k + %d);\n", f, next, next, next, c->call_k[next]);
            else
                put(src, "    f%d(te - t, O%d, I%d, k + %d);\n", f, next, next, c->call_k[next]);
        }
    }
    put(src, "    }\n");
}

/* The function as a walk along rows: elements [b, e) of the group, row
 * by row of the innermost merged dim, each pointer's row start from the
 * outer indices (g: sizes, then strides), the inner loop over the row. */
static void emit_rows(gen *c, sbuf *src, int m, const call_segs *cs, int count) {
    const int np = c->g->nptr;
    put(src, "    int64_t idx[%d], q = b;\n", m);
    put(src, "    for (int d = %d; d >= 0; d--) idx[d] = q %% g[d], q /= g[d];\n", m - 1);
    for (int q = 0; q < np; q++) {
        const int64_t inner = c->g->g[m + q * m + m - 1];
        if (inner != 0 && inner != 1) put(src, "    const int64_t z%d = g[%d];\n", q, m + q * m + m - 1);
    }
    put(src, "    for (int64_t pos = b; pos < e;) {\n");
    put(src, "        const int64_t j0 = idx[%d], n = g[%d] - j0 < e - pos ? g[%d] - j0 : e - pos;\n", m - 1, m - 1,
        m - 1);
    for (int q = 0; q < np; q++) {
        if (c->fnslot[q]) continue; /* a kernel, not memory */
        put(src, "        const int64_t o%d = 0", q);
        for (int d = 0; d < m - 1; d++) put(src, " + idx[%d] * g[%d]", d, m + q * m + d);
        put(src, ";\n");
        if (c->g->g[m + q * m + m - 1] == 0) /* the same element along the row: read once */
            put(src, "        const %s r%d = p%d[o%d];\n", c->dt[q] == VT_F32 ? "float" : "uint16_t", q, q, q);
    }
    if (cs) emit_call_chunks(c, src, count, cs, "j", "j0", "j0 + n");
    else put(src, "        for (int64_t j = j0; j < j0 + n; j++) {\n%s        }\n", c->body.s);
    put(src, "        pos += n;\n        idx[%d] = 0;\n", m - 1);
    put(src, "        for (int d = %d; d >= 0 && ++idx[d] == g[d]; d--) idx[d] = 0;\n", m - 2);
    put(src, "    }\n}\n");
}

int vt_cg_build(const vt_rec *const *r, int count, const unsigned char *scratch, const int *perm, int tail_q,
                const vt_ew_plan *const *plans, vt_cg_group *out) {
    if (count < 2 || count > VT_FUSE_MAX_NODES) return 0;
    const int64_t numel = vt_tensor_numel(&r[0]->n.out[0]);
    if (numel < VT_CG_MIN_ELEMS) return 0;
    gen c = {.g = out, .ndim = r[0]->n.out[0].ndim, .osizes = r[0]->n.out[0].sizes, .perm = perm};
    for (int d = 0; d < c.ndim; d++) c.sizes[d] = c.osizes[perm ? perm[d] : d];
    out->nptr = out->nk = 0;
    out->tail_ptr = -1;
    vt_dtype val_dt[VT_FUSE_MAX_NODES];
    for (int i = 0; i < count; i++) c.call_fn[i] = c.last_use[i] = -1;
    int ok = 1;
    for (int i = 0; i < count && ok; i++) {
        const vt_node *n = &r[i]->n;
        const vt_tensor *o = &n->out[0];
        c.cur = i;
        c.parent[i] = i;
        c.span[i] = c.body.n;
        ok = n->nout == 1 && dtype_ok(o->dtype) && vt_tensor_numel(o) == numel && r[i]->nacc > 0 &&
             r[i]->tensor_of[0] == 0;
        if (!ok) break;
        char x[48], y[48], z[48], e[512];
        const int unary = n->kind == VT_NODE_UNARY, binary = n->kind == VT_NODE_BINARY, copy = n->kind == VT_NODE_COPY;
        const int fe = n->kind == VT_NODE_FOREACH;
        /* a foreach op computes in f32 from its operands as they are and
         * rounds once, to out's dtype; a copy converts once */
        const vt_dtype compute = copy || fe ? VT_F32 : n->compute;
        if (fe) {
            ok = n->nsrc >= 1 && n->nsrc <= 3 && operand(&c, r, i, 0, val_dt, VT_F32, x, sizeof x) &&
                 (n->nsrc < 2 || operand(&c, r, i, 1, val_dt, VT_F32, y, sizeof y)) &&
                 (n->nsrc < 3 || operand(&c, r, i, 2, val_dt, VT_F32, z, sizeof z)) &&
                 foreach_expression(&c, n, x, n->nsrc > 1 ? y : NULL, n->nsrc > 2 ? z : NULL, e, sizeof e);
        } else {
            ok = (unary || binary || copy) && dtype_ok(compute) && n->nsrc == (binary ? 2 : 1) &&
                 operand(&c, r, i, 0, val_dt, compute, x, sizeof x) &&
                 (!binary || operand(&c, r, i, 1, val_dt, compute, y, sizeof y));
            if (ok && copy) snprintf(e, sizeof e, "%s", x); /* then rounded to out's dtype below */
            else if (ok && !expression(&c, n, x, y, e, sizeof e))
                ok = call_member(&c, plans ? plans[i] : NULL, i, binary ? 2 : 1, x, binary ? y : NULL, e, sizeof e);
        }
        if (!ok) break;
        /* results are rounded to the compute dtype, then converted to out's */
        const int round = compute == VT_BF16 || o->dtype == VT_BF16;
        put(&c.body, round ? "        const float v%d = rbf(%s);\n" : "        const float v%d = %s;\n", i, e);
        val_dt[i] = o->dtype;
        int64_t ost[VT_MAX_DIMS];
        int p = -2; /* the pointer the value is stored through (-2: none) */
        if (!scratch[i]) { /* memory: through its view, which writes each element once */
            ok = bstrides(&c, o, ost);
            for (int d = 0; d < c.ndim && ok; d++) ok = ost[d] != 0 || c.sizes[d] == 1;
            p = ok ? ptr_of(&c, vt_base(o), o->dtype, ost, 1, r[i]->acc[0].block, o) : -1;
        } else if (i == tail_q) { /* the tail's values: dense in the group's order */
            for (int d = c.ndim - 1; d >= 0; d--) ost[d] = d == c.ndim - 1 ? 1 : ost[d + 1] * c.sizes[d + 1];
            p = out->tail_ptr = ptr_of(&c, NULL, o->dtype, ost, 1, NULL, NULL);
        }
        if (p == -1) ok = 0;
        if (p >= 0) {
            touch(&c, p);
            put(&c.body, o->dtype == VT_F32 ? "        A%d = v%d;\n" : "        A%d = hi(v%d);\n", p, i);
        }
    }
    /* Pointers are restrict, and each element is read and written in
     * member order: two views of one allocation, one of them written, must
     * not share an element (the group's views do not, fuse.c's fits; an
     * in-place op's own input and output may). */
    for (int a = 0; a < out->nptr && ok; a++)
        for (int b = a + 1; b < out->nptr && ok; b++)
            if (c.block[a] && c.block[a] == c.block[b] && (c.written[a] || c.written[b]))
                ok = vt_view_overlap(c.view[a], c.view[b]) == VT_OVERLAP_NO;
    int built = 0;
    const int m = ok && !c.full && !c.body.bad && !c.decl.bad ? merge_dims(&c) : 0;
    if (m > 0) {
        /* one dim, every operand dense: the plain loop (chain by chain);
         * else a walk along rows of the merged dims */
        int one_d = m == 1;
        for (int q = 0; q < out->nptr; q++) one_d &= out->g[m + q * m + m - 1] == 1 || out->g[m + q * m + m - 1] == 0;
        sbuf src = {0};
        put(&src, "%sconst int vt_cg_abi = %d;\n", preamble, VT_CG_ABI);
        for (int q = 0; q < out->nptr; q++) {
            const int64_t inner = out->g[m + q * m + m - 1];
            if (c.fnslot[q]) continue;
            /* one dim: a view broadcast along it (an expanded scalar) is its first element */
            if (one_d) put(&src, inner == 0 ? "#define A%d p%d[0]\n" : "#define A%d p%d[i]\n", q, q);
            else if (inner == 1) put(&src, "#define A%d p%d[o%d + j]\n", q, q, q);
            else if (inner == 0) put(&src, "#define A%d r%d\n", q, q);
            else put(&src, "#define A%d p%d[o%d + j * z%d]\n", q, q, q, q);
        }
        put(&src, "void vt_cg_group(void *const *p, const float *k, const int64_t *g, int64_t b, int64_t e) {\n");
        for (int i = 0; i < out->nptr; i++) {
            const char *t = c.dt[i] == VT_F32 ? "float" : "uint16_t";
            /* a kernel: vt_unary_ukernel or vt_binary_ukernel */
            if (c.fnslot[i] == 1)
                put(&src, "    int (*const f%d)(int64_t, void *, const void *, const void *) = "
                          "(int (*)(int64_t, void *, const void *, const void *))p[%d];\n", i, i);
            else if (c.fnslot[i] == 2)
                put(&src, "    int (*const f%d)(int64_t, void *, const void *, int64_t, const void *, int64_t, const void *) = "
                          "(int (*)(int64_t, void *, const void *, int64_t, const void *, int64_t, const void *))p[%d];\n",
                    i, i);
            else
                put(&src, "    %s%s *restrict p%d = p[%d];\n", c.written[i] ? "" : "const ", t, i, i);
        }
        for (int i = 0; i < out->nk; i++) put(&src, "    const float k%d = k[%d];\n", i, i);
        put(&src, "%s", c.decl.s ? c.decl.s : "");
        c.span[count] = c.body.n;
        /* memory a member writes ties every member using it */
        int first[VT_CG_MAX_PTRS];
        for (int q = 0; q < out->nptr; q++) first[q] = -1;
        for (int a = 0; a < c.ntouch; a++) {
            const int q = c.touch_p[a];
            if (first[q] < 0) first[q] = c.touch_m[a];
            else if (c.written[q]) tie(&c, c.touch_m[a], first[q]);
        }
        int chains = 0, fits = 1;
        for (int i = 0; i < count; i++) chains += root(&c, i) == i;
        call_segs cs;
        if (c.ncall) {
            fits = call_plan(&c, count, &cs);
            if (fits) emit_call_buffers(&c, &src, count, &cs);
            if (fits && one_d) {
                emit_call_chunks(&c, &src, count, &cs, "i", "b", "e");
                put(&src, "}\n");
            } else if (fits) {
                emit_rows(&c, &src, m, &cs, count);
            }
        } else if (!one_d) {
            emit_rows(&c, &src, m, NULL, count);
        } else if (chains == 1) {
            put(&src, "    for (int64_t i = b; i < e; i++) {\n%s    }\n}\n", c.body.s);
        } else { /* tile by tile, chain by chain, each chain's members in order */
            put(&src, "    for (int64_t t = b; t < e; t += %d) {\n", CHAIN_TILE);
            put(&src, "    const int64_t te = e - t < %d ? e : t + %d;\n", CHAIN_TILE, CHAIN_TILE);
            for (int h = 0; h < count; h++) {
                if (root(&c, h) != h) continue;
                put(&src, "    for (int64_t i = t; i < te; i++) {\n");
                for (int i = h; i < count; i++)
                    if (root(&c, i) == h) put(&src, "%.*s", (int)(c.span[i + 1] - c.span[i]), c.body.s + c.span[i]);
                put(&src, "    }\n");
            }
            put(&src, "    }\n}\n");
        }
        if (fits && !src.bad) {
            out->fn = vt_cg_function(src.s);
            built = out->fn != NULL;
        }
        free(src.s);
    }
    free(c.body.s);
    free(c.decl.s);
    return built;
}
