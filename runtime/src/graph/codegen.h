/* codegen.h — generated code for the fusion groups of graph programs. A
 * group's members (graph/fuse.c) are written out as one C function that
 * computes every member per element, each intermediate in a register,
 * compiled by the system C compiler into a shared object and loaded; the
 * object is kept in the compile cache (vtpu/cache.h), so a host compiles a
 * group once. Where a member is not one the generator knows, or no compiler
 * is there, the group runs its members' plans as before (the interpreter).
 *
 * The generated code computes what the plans compute, bit for bit: each op
 * is written as its portable kernel computes it (IEEE add, sub, mul, div,
 * fmaf for an alpha, the compute dtype's rounding where the plan rounds),
 * compiled without floating-point contraction or fast-math, so the
 * compiler's vector code rounds as the scalar statements do. */
#ifndef VTPU_GRAPH_CODEGEN_H
#define VTPU_GRAPH_CODEGEN_H

#include "graph/defer.h"

/* Groups smaller than this run their plans: generated code saves about a
 * nanosecond per element and member, so a few microseconds a run at most,
 * against a compile of 0.1-0.5 s (and an optimizer's per-parameter scalar
 * steps are cut into groups differently from run to run). */
#define VT_CG_MIN_ELEMS 16384
#define VT_CG_MAX_PTRS 128
#define VT_CG_MAX_K 256
#define VT_CG_MAX_DIMS 6 /* of the group's shape, after merging the dims every operand lays out alike */

/* A group's generated function: every member on elements [b, e) of the
 * group's output, in row-major order; p: the memory it reads and writes
 * (each operand's first element), k: the host scalars, g: the geometry
 * (the merged dims' sizes, then each operand's strides over them), which
 * the source does not name either, but for whether an operand's innermost
 * stride is 1, 0 or another. */
typedef void (*vt_cg_fn)(void *const *p, const float *k, const int64_t *g, int64_t b, int64_t e);

typedef struct vt_cg_group {
    vt_cg_fn fn;
    int nptr, nk;
    int tail_ptr; /* p[tail_ptr] is where the tail's values go (rebased per run), -1: none */
    void *p[VT_CG_MAX_PTRS];
    float k[VT_CG_MAX_K];
    int64_t g[VT_CG_MAX_DIMS * (1 + VT_CG_MAX_PTRS)];
} vt_cg_group;

/* Whether groups recorded in graph programs run generated code (VTPU_CC:
 * the compiler, default "cc"; "none" turns generated code off). */
int vt_cg_enabled(void);

/* Generated code for the elementwise members r[0..count) of a group
 * (plans[i]: member i's plan, whose kernel a member without an expression
 * here calls on the group's chunk buffers):
 * scratch[i] says member i's output lives in scratch (never written to
 * memory); perm: the group walks its shape with dims permuted so (dim d of
 * the walk is dim perm[d]; NULL: row-major), as fuse.c's group_order; tail_q:
 * the member whose value a tail reads from scratch, in the walk's order
 * (-1: none). Fills *out and returns 1, or returns 0 (the group runs its
 * plans): a member the generator does not know, an operand that does not
 * broadcast to the group's shape, no compiler, a compile that failed. */
int vt_cg_build(const vt_rec *const *r, int count, const unsigned char *scratch, const int *perm, int tail_q,
                const vt_ew_plan *const *plans, vt_cg_group *out);
/* A group command ran generated code (vt_codegen_stats.runs). */
void vt_cg_count_run(void);

/* codegen_cc.c: the function of a group's source (which defines
 * vt_cg_abi as VT_CG_ABI and vt_cg_group), compiled by the system C
 * compiler or loaded from the compile cache; NULL when no compiler is
 * there, the compile failed, or src has run in one program run only so
 * far (a group is compiled from its second). */
#define VT_CG_ABI 1
vt_cg_fn vt_cg_function(const char *src);

#endif
