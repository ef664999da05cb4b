/* reduce_pass.h — what the reduction driver (reduce.c: geometry, finish,
 * entry points) and its walks (reduce_pass.c: one pass of "map each value,
 * then combine" over every output) share: the plan of the geometry and
 * the pass. */
#ifndef VTPU_REDUCE_PASS_H
#define VTPU_REDUCE_PASS_H

#include <stdatomic.h>

#include "internal.h"

enum { CMB_SUM, CMB_PROD, CMB_MAX, CMB_MIN };
enum { MAP_ID, MAP_ABS, MAP_SQUARE, MAP_NONZERO, MAP_POW, MAP_SUBSQ, MAP_EXPSUB };
enum { ID_ZERO, ID_ONE, ID_LOWEST, ID_HIGHEST };

#define CH 1024        /* values staged per chunk (inner walk) */
_Static_assert(CH <= VT_SOURCE_MAX, "a source is asked for at most VT_SOURCE_MAX values");
#define VW 128         /* lanes of a vertical tile */
#define VB 16          /* rows a vertical tile adds before they enter the cascade */
#define LV 24          /* cascade levels of a vertical tile: 2^27 rows before the top level saturates */
#define SEG 32768      /* reduced elements per segment when one output's extent is split */
#define SPLIT_BELOW 16 /* split the extent only when there are fewer work groups than this */
#define GRAIN 32768    /* elements of work per parallel chunk */

/* Geometry: kept dims (output order, coalesced) and reduced dims (sorted
 * by falling stride, coalesced). Everything that shapes the order of
 * operations derives from it, never from the thread count, so results do
 * not depend on how many threads run the items. */
typedef struct red_plan {
    int nk, nr;
    int64_t ksz[VT_MAX_DIMS], kin[VT_MAX_DIMS], kout[VT_MAX_DIMS];
    int64_t rsz[VT_MAX_DIMS], rin[VT_MAX_DIMS];
    int64_t nout, R;
    const char *in_base;
    char *out_base;
    vt_dtype in_dt, out_dt, compute;
    size_t in_es, out_es;
    int vertical;
    int64_t lane_len, tiles; /* vertical: size of the last kept dim, VW-wide tiles across it */
    int64_t groups, S, seg;  /* work items = groups x S segments of seg reduced elements */
} red_plan;

typedef struct red_pass {
    const red_plan *pl;
    vt_compute_class cls;
    vt_dtype cls_dt;
    int map, cmb, ident, direct;
    double p;      /* MAP_POW exponent */
    const void *c; /* per-output constant of the class type (MAP_SUBSQ, MAP_EXPSUB) or NULL */
    void *res;     /* per-output results, class type */
    void *parts;   /* per-item partials when S > 1 */
    const vt_source *src; /* where the input's values come from (NULL: memory) */
    /* fed lanes: the chunks each outer index's tiles are cut into, an item
     * reading the rows of a chunk's tiles at once (0: each item walks one
     * tile, as from memory) */
    int64_t row_chunks;
    atomic_int *no_memory; /* set when an item could not allocate its tiles */
    /* f32 sum loops of the active ISA (NULL: portable), float class only */
    void (*blocks_f32)(const float *x, int64_t nblocks, float *out);
    void (*blocks_bf16)(const uint16_t *x, int64_t nblocks, float *out); /* the same over bf16, widened on load */
    float (*part_f32)(const float *x, int64_t m); /* a partial block's sum */
    void (*lanes_add_f32)(float *acc, const float *x, int64_t ng);
} red_pass;

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t abs64(int64_t a) { return a < 0 ? -a : a; }

/* Run one pass over every output: its results into ps->res (ps->parts
 * holds the segments' partials when the plan splits them). */
void vt_reduce_pass_run(red_pass *ps);

#endif
