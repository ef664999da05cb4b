/* fuse.c — fusion groups of DeferAndFuse. A group is a run of recorded
 * elementwise nodes with one output shape; it is queued as one command that
 * walks the output's elements in tiles small enough for L1/L2 and runs every
 * node's plan (kernels/elementwise/elementwise.c) on each tile before the next, so a
 * value one node writes is still in cache when the next reads it. An output
 * whose buffer is dead (freed before the flush, read by nothing after the
 * group) goes to a scratch tile instead of memory: the group never writes
 * it. Each node runs its own microkernels on the same elements in the same
 * order as Strict does, so results are bit-identical.
 *
 * A group may end in a tail: a node that reads all of what the group
 * computes, once each element (a one-pass reduction: sum, mean, prod,
 * amax, amin, any, all, norm; a softmax or log_softmax along a contiguous
 * dim). Then the tail drives the group: where it would load a run of its
 * input it asks the group for it (vt_source), and the group runs its plans
 * on that run. So every member still computes every element once; the
 * tail's order of operations depends on its geometry alone, so the result
 * is bit-identical to Strict's; a dead input of the tail is never written. */
#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "graph/codegen.h"
#include "graph/defer.h"

/* Elements per tile: a few scratch tiles and the nodes' operands stay in L2. */
#define TILE 4096
/* A group with more scratch values alive at once than fit this takes
 * smaller tiles (a wide group: an optimizer's chains side by side). */
#define SCRATCH_BYTES (512 << 10)
#define MAX_ES 16

/* ------------------------------------------------------------ grouping */

/* Element i of a is element i of b (strides of size-1 dims do not matter). */
static int same_view(const vt_tensor *a, const vt_tensor *b) {
    if (vt_base(a) != vt_base(b) || a->dtype != b->dtype || a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->sizes[d] != b->sizes[d] || (a->sizes[d] != 1 && a->strides[d] != b->strides[d])) return 0;
    return 1;
}

/* The descriptor behind access k of r. */
static const vt_tensor *view_of(const vt_rec *r, int k) {
    const int t = r->tensor_of[k];
    return t < VT_NODE_MAX_OUT ? &r->n.out[t] : &r->n.src[t - VT_NODE_MAX_OUT];
}

static unsigned filter_bit(const void *block) {
    return (unsigned)((uint64_t)(uintptr_t)block * 0x9e3779b97f4a7c15ull >> 56);
}

static int in_filter(const uint64_t *f, const void *block) {
    const unsigned b = filter_bit(block);
    return (int)(f[b >> 6] >> (b & 63) & 1);
}

int vt_fuse_may_conflict(const vt_fuse_uses *t, const void *block, int write) {
    return in_filter(write ? t->used : t->wrote, block);
}

static int use_of(const vt_fuse_uses *t, const void *block) {
    if (!in_filter(t->used, block)) return -1;
    for (int i = t->n - 1; i >= 0; i--) /* newest first: a chain reads what it just wrote */
        if (t->u[i].block == block) return i;
    return -1;
}

void vt_fuse_add(vt_fuse_uses *t, const vt_rec *r) {
    for (int k = 0; k < r->nacc; k++) {
        const vt_access *a = &r->acc[k];
        const vt_tensor *v = view_of(r, k);
        const int w = (a->flags & VT_USE_WRITE) != 0;
        int i = in_filter(t->used, a->block) ? t->n - 1 : -1, others = 0;
        for (; i >= 0; i--) { /* newest first: a chain reads what it just wrote */
            if (t->u[i].block != a->block) continue;
            if (same_view(t->u[i].view, v)) break;
            others = 1;
        }
        const unsigned b = filter_bit(a->block);
        if (w) t->wrote[b >> 6] |= 1ull << (b & 63);
        if (i >= 0) {
            t->u[i].write |= w;
            continue;
        }
        for (int j = 0; j < t->n && others; j++)
            if (t->u[j].block == a->block) t->u[j].other = 1;
        t->u[t->n++] = (vt_fuse_use){a->block, v, w, others};
        t->used[b >> 6] |= 1ull << (b & 63);
    }
}

void vt_fuse_begin(vt_fuse_uses *t, const vt_rec *g) {
    t->n = 0;
    memset(t->used, 0, sizeof t->used);
    memset(t->wrote, 0, sizeof t->wrote);
    vt_fuse_add(t, g);
}

int vt_fuse_is_member(const vt_rec *r) { return vt_node_kinds[r->n.kind].plan != NULL; }

int vt_fuse_is_tail(const vt_rec *r) { return vt_node_kinds[r->n.kind].run_from != NULL; }

int vt_fuse_takes_tail(const vt_fuse_uses *t, const vt_rec *r) {
    const int a = r->acc_of_src[0];
    if (a < 0) return 0;
    const int i = use_of(t, r->acc[a].block);
    if (i < 0 || !t->u[i].write || t->u[i].other) return 0;
    /* its other inputs (a norm's weight) are read from memory, before the
     * group runs: none may be what the group writes, through any view */
    for (int k = 0; k < r->nacc; k++) {
        if (k == a || r->tensor_of[k] < VT_NODE_MAX_OUT || !vt_fuse_may_conflict(t, r->acc[k].block, 0)) continue;
        for (int j = 0; j < t->n; j++)
            if (t->u[j].block == r->acc[k].block && t->u[j].write) return 0;
    }
    /* it reads the memory the group writes, all of it, each element once */
    const vt_tensor *v = &r->n.src[0], *w = t->u[i].view;
    return vt_base(v) == vt_base(w) && vt_tensor_numel(v) == vt_tensor_numel(w) && vt_view_is_dense(w) &&
           vt_node_kinds[r->n.kind].fed(&r->n);
}

int vt_fuse_fits(const vt_fuse_uses *t, const vt_rec *g, const vt_rec *r) {
    const vt_tensor *o = &r->n.out[0], *go = &g->n.out[0];
    if (o->ndim != go->ndim) return 0;
    for (int d = 0; d < o->ndim; d++)
        if (o->sizes[d] != go->sizes[d]) return 0;
    for (int k = 0; k < r->nacc; k++) {
        const vt_access *a = &r->acc[k];
        const vt_tensor *v = view_of(r, k);
        if (!vt_fuse_may_conflict(t, a->block, (a->flags & VT_USE_WRITE) != 0)) continue;
        for (int i = 0; i < t->n; i++) {
            if (t->u[i].block != a->block || !(t->u[i].write || (a->flags & VT_USE_WRITE))) continue;
            /* a write meets another use: through the same view, or of
             * elements the other does not touch (the slices of a cat) */
            if (!same_view(t->u[i].view, v) && vt_view_overlap(t->u[i].view, v) != VT_OVERLAP_NO) return 0;
        }
    }
    /* r's own uses of one block, one of them a write (an in-place op), are
     * the kernels' business, as in Strict */
    return 1;
}

/* ------------------------------------------------------------ the group command */

/* What runs of a node: its plan (built from the node with its scratch
 * operands rewritten to contiguous views), the host scalars the plan reads,
 * and the user's op name. */
typedef struct member {
    vt_ew_plan plan;
    const char *name;
    alignas(16) unsigned char store[VT_NODE_MAX_HOST][16];
    int8_t slot[VT_ITER_MAX_OPS]; /* per plan operand (out, then src[k]): scratch slot, or -1 */
} member;
_Static_assert(VT_FUSE_MAX_NODES <= 128, "a scratch slot's number is an int8_t");

typedef struct group {
    vt_tensor shape; /* the output shape, for a trace */
    int count, nslots;
    int64_t numel, tile;
    size_t slot_es; /* largest element of a scratch output */
    uint64_t bytes; /* what the group writes to memory */
    uint64_t run;   /* this run's number, for the threads' copies of the plans */
    atomic_int failed_at; /* the first node whose kernel failed (count: none) */
    atomic_int no_memory;
    atomic_int bad_read; /* the tail asked for elements outside the group's */
    /* A tail fed by the group (NULL: none); the group's
     * values it reads are in scratch slot tail_slot, or in memory at
     * tail_mem (tail_slot -1), tail_es bytes each. */
    vt_node *tail;
    const char *tail_mem;
    size_t tail_es;
    int tail_slot;
    /* generated code for the whole group (graph/codegen.h), NULL: the
     * members' plans run */
    const vt_cg_group *cg;
    member m[];
} group;

/* Each thread keeps its copy of a group's plans and its scratch tiles from
 * group to group: a fresh allocation of this size would be fresh pages,
 * faulted in per run. primed: the run whose plans the copy holds (0: none). */
static _Thread_local unsigned char *kept;
static _Thread_local size_t kept_bytes;
static _Thread_local uint64_t primed;
static atomic_uint_fast64_t runs;

static size_t slot_size(const group *g, int64_t tile) { return ((size_t)tile * g->slot_es + 63) & ~(size_t)63; }

/* This thread's copy of g's plans, followed by its scratch slots for tiles
 * of `tile` elements; NULL (noted in g) when host memory ran out. */
static vt_ew_plan *thread_plans(group *g, int64_t tile) {
    const size_t need = sizeof(vt_ew_plan) * (size_t)g->count + slot_size(g, tile) * (size_t)g->nslots;
    if (vt_defer_alloc_fails()) {
        atomic_store(&g->no_memory, 1);
        return NULL;
    }
    if (need > kept_bytes) {
        unsigned char *grown = aligned_alloc(64, (need + 63) & ~(size_t)63);
        if (!grown) {
            atomic_store(&g->no_memory, 1);
            return NULL;
        }
        free(kept);
        kept = grown;
        kept_bytes = need;
    }
    vt_ew_plan *lp = (vt_ew_plan *)(void *)kept;
    for (int i = 0; i < g->count; i++) lp[i] = g->m[i].plan;
    primed = g->run;
    return lp;
}

static unsigned char *thread_slots(const group *g) { return kept + sizeof(vt_ew_plan) * (size_t)g->count; }

/* Every member's plan on output elements [t, te), in order; the scratch
 * operands rebased so that element t is the first of their slot. */
static void run_tile(const group *g, vt_ew_plan *lp, unsigned char *slots, size_t slot_bytes, int64_t t,
                     int64_t te) {
    for (int i = 0; i < g->count; i++) {
        vt_ew_head *h = vt_ew_plan_head(&lp[i]);
        for (int k = 0; k < h->it.nops; k++) {
            const int s = g->m[i].slot[k];
            if (s >= 0)
                h->it.base[k] = (char *)(uintptr_t)((uintptr_t)(slots + slot_bytes * (size_t)s) -
                                                    (uintptr_t)t * (uintptr_t)h->it.elsize[k]);
        }
        lp[i].range(lp[i].ctx, t, te);
    }
}

/* The first member whose kernel failed on this thread, into g. */
static void note_failure(group *g, vt_ew_plan *lp) {
    for (int i = 0; i < g->count; i++) {
        if (!atomic_load_explicit(&vt_ew_plan_head(&lp[i])->failed, memory_order_relaxed)) continue;
        int cur = atomic_load(&g->failed_at);
        while (i < cur && !atomic_compare_exchange_weak(&g->failed_at, &cur, i)) {}
        break;
    }
}

/* Run the group on output elements [b, e), tile by tile. */
static void group_range(void *ctx, int64_t b, int64_t e) {
    group *g = ctx;
    if (g->cg) {
        g->cg->fn(g->cg->p, g->cg->k, g->cg->g, b, e);
        return;
    }
    /* a tile never spans more than this thread's range */
    const int64_t tile = e - b < g->tile ? e - b : g->tile;
    vt_ew_plan *lp = thread_plans(g, tile);
    if (!lp) return;
    for (int64_t t = b; t < e; t += tile) run_tile(g, lp, thread_slots(g), slot_size(g, tile), t, e - t < tile ? e : t + tile);
    note_failure(g, lp);
}

/* The tail's input elements [first, first + m): the group run on them. */
static const void *group_read(void *ctx, int64_t first, int64_t m) {
    static const alignas(64) unsigned char zeros[VT_SOURCE_MAX * MAX_ES];
    group *g = ctx;
    if (first < 0 || m < 1 || m > VT_SOURCE_MAX || first > g->numel - m) { /* a kernel bug, never silent */
        atomic_store(&g->bad_read, 1);
        return zeros;
    }
    vt_ew_plan *lp = primed == g->run ? (vt_ew_plan *)(void *)kept : thread_plans(g, VT_SOURCE_MAX);
    if (!lp) return zeros; /* the group fails with no_memory */
    const size_t slot_bytes = slot_size(g, VT_SOURCE_MAX);
    if (g->cg) {
        void *p[VT_CG_MAX_PTRS];
        memcpy(p, g->cg->p, sizeof(void *) * (size_t)g->cg->nptr);
        unsigned char *slot = thread_slots(g) + slot_bytes * (size_t)(g->tail_slot >= 0 ? g->tail_slot : 0);
        if (g->cg->tail_ptr >= 0) /* element first of the values goes to the slot's start */
            p[g->cg->tail_ptr] = (void *)((uintptr_t)slot - (uintptr_t)first * (uintptr_t)g->tail_es);
        g->cg->fn(p, g->cg->k, g->cg->g, first, first + m);
        return g->tail_slot >= 0 ? (const void *)slot : (const void *)(g->tail_mem + first * (int64_t)g->tail_es);
    }
    run_tile(g, lp, thread_slots(g), slot_bytes, first, first + m);
    note_failure(g, lp);
    return g->tail_slot >= 0 ? (const void *)(thread_slots(g) + slot_bytes * (size_t)g->tail_slot)
                            : (const void *)(g->tail_mem + first * (int64_t)g->tail_es);
}

/* For a trace: "fused: aten::mul + aten::add + ..." ("generated: ..." when
 * generated code runs it), the shape, the bytes. */
static void describe(const group *g) {
    char name[160], shape[48];
    size_t at = (size_t)snprintf(name, sizeof name, "%s",
                                 g->cg ? "generated: " : g->count + (g->tail != NULL) > 1 ? "fused: " : "");
    for (int i = 0; i < g->count && at < sizeof name; i++)
        at += (size_t)snprintf(name + at, sizeof name - at, i ? " + %s" : "%s", g->m[i].name);
    if (g->tail && at < sizeof name) snprintf(name + at, sizeof name - at, " + %s", g->tail->name);
    vt_shape_string(&g->shape, shape, sizeof shape);
    vt_command_describe(name, shape, g->count + (g->tail != NULL), g->bytes);
}

static vt_status group_kernel(void *args) {
    group *g = *(group **)args;
    if (vt_tracing()) describe(g);
    g->run = atomic_fetch_add(&runs, 1) + 1;
    if (g->cg) vt_cg_count_run();
    if (g->tail) {
        const vt_node *n = g->tail;
        const vt_source src = {group_read, g};
        vt_status s = vt_node_kinds[n->kind].run_from(n, &src);
        if (s != VT_OK) {
            vt_command_failed_op(n->name);
            return s;
        }
    } else if (g->numel > 0) {
        vt_parallel_for(g->numel, VT_ELEMENTWISE_GRAIN, group_range, g);
    }
    if (atomic_load(&g->no_memory)) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "out of host memory for fused tiles");
    if (atomic_load(&g->bad_read))
        return vt_set_error(VT_ERR_INTERNAL, "%s read outside the fused values it was given", g->tail->name);
    const int f = atomic_load(&g->failed_at);
    if (f < g->count) {
        vt_command_failed_op(g->m[f].name);
        return vt_set_error(VT_ERR_KERNEL, "ZeroDivisionError");
    }
    return VT_OK;
}

/* A contiguous view of shape like, for a scratch operand (never read at
 * this address: the kernel rebases it onto a tile). */
static vt_tensor scratch_view(const vt_tensor *like) { return vt_contiguous_like(like, (void *)(uintptr_t)4096); }

/* An output living in scratch: the allocation and the view it stands for. */
typedef struct scratch_value {
    const void *block;
    uint64_t gen;
    vt_tensor view;
    int slot;
} scratch_value;

/* Whether input access k of member i of r reads what an earlier member
 * wrote there, at the same elements: the group's own result, not memory. */
static int reads_own(const vt_rec *const *r, int i, int k) {
    const vt_access *in = &r[i]->acc[k];
    for (int j = 0; j < i; j++)
        if (r[j]->acc[0].block == in->block && r[j]->acc[0].gen == in->gen && same_view(view_of(r[j], 0), view_of(r[i], k)))
            return 1;
    return 0;
}

/* Whether member i of r writes its output to a scratch tile, not memory:
 * dead (elide), and no wider than a slot's element. */
static int in_scratch(const vt_rec *const *r, const unsigned char *elide, int i) {
    return elide[i] && vt_dtype_size(r[i]->n.out[0].dtype) <= MAX_ES;
}

/* Queue the elementwise members r[0..count) as one group command, every
 * member's dims permuted by perm (group_order; NULL: none); tail: a tail
 * the group feeds (NULL: none), with the values member q writes. */
static vt_status enqueue_group(int dev, const vt_rec *const *r, int count, const unsigned char *elide,
                               const int *perm, const vt_rec *tail, int q, int codegen, vt_fusion_stats *st) {
    const size_t head = sizeof(group) + sizeof(member) * (size_t)count;
    codegen = codegen && count > 1;
    const size_t cg_at = (head + (tail ? sizeof(vt_node) : 0) + 63) & ~(size_t)63;
    group *g = vt_defer_alloc_fails()
                   ? NULL
                   : aligned_alloc(64, (cg_at + (codegen ? sizeof(vt_cg_group) : 0) + 63) & ~(size_t)63);
    vt_prepared p;
    int nacc = tail ? tail->nacc : 0;
    for (int i = 0; i < count; i++) nacc += r[i]->nacc;
    const int have_acc = vt_prepared_init(&p, nacc);
    if (!g || !have_acc) {
        free(g);
        vt_prepared_release(dev, &p);
        return vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: out of host memory queuing recorded ops", r[0]->n.name);
    }
    g->count = count;
    vt_tensor_copy(&g->shape, &r[0]->n.out[0]);
    g->nslots = 0;
    g->numel = vt_tensor_numel(&r[0]->n.out[0]);
    g->bytes = 0;
    /* what the group moves: bytes it reads from memory (broadcast inputs in
     * full) and its members' results, kept in scratch or not (a chain whose
     * values never reach memory is still as much work) */
    uint64_t moved = 0;
    /* one node alone has nothing to keep in cache: one tile per thread */
    g->tile = count > 1 || elide[0] ? TILE : g->numel;
    g->slot_es = 1;
    g->tail = NULL;
    g->tail_slot = -1;
    g->cg = NULL;
    atomic_init(&g->failed_at, count);
    atomic_init(&g->no_memory, 0);
    atomic_init(&g->bad_read, 0);
    scratch_value live[VT_FUSE_MAX_NODES];
    int nlive = 0;
    /* Scratch slots are reused: a slot is free once the last member that
     * reads its value has run (free_after[s] < i). */
    int free_after[VT_FUSE_MAX_NODES];
    vt_status s = VT_OK;
    for (int i = 0; i < count && s == VT_OK; i++) {
        member *m = &g->m[i];
        vt_node n; /* this member's copy of the node, to plan from */
        memcpy(&n, &r[i]->n, vt_node_size(&r[i]->n));
        if (perm) vt_node_permute(&n, perm);
        m->name = n.name;
        memset(m->slot, -1, sizeof m->slot);
        /* inputs an earlier node of the group left in scratch */
        for (int k = 0; k < n.nsrc; k++) {
            const int a = r[i]->acc_of_src[k];
            if (a < 0) continue;
            for (int v = nlive - 1; v >= 0; v--)
                if (live[v].block == r[i]->acc[a].block && live[v].gen == r[i]->acc[a].gen &&
                    same_view(&live[v].view, &n.src[k])) {
                    m->slot[k + 1] = (int8_t)live[v].slot;
                    n.src[k] = scratch_view(&n.src[k]);
                    break;
                }
        }
        const vt_access *o = &r[i]->acc[0];
        const uint64_t bytes = (uint64_t)g->numel * vt_dtype_size(n.out[0].dtype);
        if (in_scratch(r, elide, i)) {
            if (vt_dtype_size(n.out[0].dtype) > g->slot_es) g->slot_es = vt_dtype_size(n.out[0].dtype);
            int last = i; /* the last member reading this value (a later value of the allocation counts too) */
            for (int j = i + 1; j < count; j++)
                for (int k = 1; k < r[j]->nacc; k++)
                    if (r[j]->acc[k].block == o->block && r[j]->acc[k].gen == o->gen) last = j;
            if (i == q) last = count; /* the tail reads it after every member */
            int slot = 0;
            while (slot < g->nslots && free_after[slot] >= i) slot++;
            if (slot == g->nslots) g->nslots++;
            free_after[slot] = last;
            if (i == q) g->tail_slot = slot;
            live[nlive++] = (scratch_value){o->block, o->gen, n.out[0], slot};
            m->slot[0] = (int8_t)slot;
            n.out[0] = scratch_view(&n.out[0]);
            st->bytes_elided += bytes;
            moved += bytes;
        } else {
            p.acc[p.n++] = *o;
            st->bytes_written += bytes;
            g->bytes += bytes;
            /* later readers of this view read memory now, not a value an
             * earlier member left in scratch (one it overwrote) */
            for (int v = 0; v < nlive; v++)
                if (live[v].block == o->block && live[v].gen == o->gen && same_view(&live[v].view, &n.out[0]))
                    live[v].block = NULL;
        }
        for (int k = 0; k < n.nsrc; k++)
            if (m->slot[k + 1] < 0 && !(n.host >> k & 1) && vt_node_has_src(&n, k))
                moved += (uint64_t)vt_tensor_bytes(&n.src[k]);
        /* A read of what an earlier member wrote reads the group's own
         * result, not the memory as it was before the group: it is not an
         * input of the command (a fault left there by an earlier op must
         * not stop the group that overwrites it, as it would not in Strict). */
        for (int k = 1; k < r[i]->nacc; k++)
            if (!reads_own(r, i, k)) p.acc[p.n++] = r[i]->acc[k];
        /* host scalars live in the member: the plan reads them there */
        memcpy(m->store, n.store, sizeof m->store);
        for (int k = 0; k < n.nsrc; k++)
            if (n.host >> k & 1) n.src[k].data = m->store[k];
        s = vt_node_kinds[n.kind].plan(&n, &m->plan);
        if (s != VT_OK) s = vt_error_prefix(s, n.name);
    }
    if (s != VT_OK) {
        free(g);
        vt_prepared_release(dev, &p);
        return s;
    }
    while (g->tile > 512 && slot_size(g, g->tile) * (size_t)g->nslots > SCRATCH_BYTES) g->tile /= 2;
    if (tail) {
        g->tail = (vt_node *)(void *)((unsigned char *)g + head);
        memcpy(g->tail, &tail->n, vt_node_size(&tail->n));
        g->tail_mem = vt_base(&tail->n.src[0]);
        g->tail_es = vt_dtype_size(tail->n.src[0].dtype);
        /* its outputs, and its inputs but the one the group computes
         * (vt_fuse_enqueue found which member writes that) */
        for (int k = 0; k < tail->nacc; k++) {
            if (k == tail->acc_of_src[0]) continue;
            p.acc[p.n++] = tail->acc[k];
            const int t = tail->tensor_of[k];
            if (t >= VT_NODE_MAX_OUT) {
                moved += (uint64_t)vt_tensor_bytes(&tail->n.src[t - VT_NODE_MAX_OUT]);
                continue;
            }
            const uint64_t bytes = (uint64_t)vt_tensor_bytes(&tail->n.out[t]);
            st->bytes_written += bytes;
            g->bytes += bytes;
        }
    }
    if (codegen) {
        unsigned char scratch[VT_FUSE_MAX_NODES];
        const vt_ew_plan *plans[VT_FUSE_MAX_NODES];
        for (int i = 0; i < count; i++) scratch[i] = (unsigned char)in_scratch(r, elide, i), plans[i] = &g->m[i].plan;
        vt_cg_group *cg = (vt_cg_group *)(void *)((unsigned char *)g + cg_at);
        if (vt_cg_build(r, count, scratch, perm, tail && g->tail_slot >= 0 ? q : -1, plans, cg)) g->cg = cg;
    }
    const int nodes = count + (tail != NULL);
    st->groups++;
    if (nodes > 1) st->fused_nodes += (uint64_t)nodes;
    p.payload = g;
    /* short work runs on this thread when the queue is idle, as a short node does (vt_node_is_short) */
    const int short_work = g->bytes + moved <= (uint64_t)VT_SHORT_BYTES;
    return vt_enqueue_prepared(dev, r[0]->n.name, group_kernel, &g, sizeof g, &p,
                               VT_ENQ_ASYNC | (short_work ? VT_ENQ_INLINE_OK : 0));
}

/* A recorded node queued as a command of its own. */
static vt_status enqueue_alone(int dev, const vt_rec *r, vt_fusion_stats *st) {
    vt_node n;
    memcpy(&n, &r->n, vt_node_size(&r->n));
    vt_prepared p; /* a node reads up to VT_NODE_MAX_SRC tensors: maybe more than the inline list holds */
    if (!vt_prepared_init(&p, r->nacc))
        return vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: out of host memory queueing the op", r->n.name);
    p.n = r->nacc;
    memcpy(p.acc, r->acc, sizeof(vt_access) * (size_t)r->nacc);
    st->groups++;
    st->bytes_written += (uint64_t)vt_node_out_bytes(&n);
    return vt_node_enqueue(dev, &n, &p, VT_ENQ_ASYNC);
}

/* The order the group r walks its elements in: the memory order of its
 * first member's output, the same dims permuted alike in every member, so
 * that tile t is the same elements for all of them. Returns perm, or NULL
 * where that order is row-major. */
static const int *group_order(const vt_rec *const *r, int *perm) {
    vt_node first;
    memcpy(&first, &r[0]->n, vt_node_size(&r[0]->n));
    return vt_node_memory_perm(&first, perm) ? perm : NULL;
}

/* Whether tail can read what member q of the group r writes through the
 * group: the group visits q's output in its order (perm), and q's output
 * is dense in that order, so the tail's element offset is the group's
 * element index. */
static int feeds(const vt_rec *const *r, int q, const int *perm, const vt_rec *tail) {
    vt_tensor v;
    vt_tensor_copy(&v, &r[q]->n.out[0]);
    if (perm)
        for (int d = 0; d < v.ndim; d++)
            v.sizes[d] = r[q]->n.out[0].sizes[perm[d]], v.strides[d] = r[q]->n.out[0].strides[perm[d]];
    return vt_tensor_is_contiguous(&v) && vt_base(&v) == vt_base(&tail->n.src[0]) &&
           vt_tensor_numel(&v) == vt_tensor_numel(&tail->n.src[0]);
}

/* Whether the group r[0..ne) reads or writes memory of block: an output
 * that is not elided, or an input that is not the group's own result. (Its
 * tail may write a block the group uses only through a dead allocation:
 * the freed block of an elided intermediate, handed out again.) */
static int touches(const vt_rec *const *r, int ne, const unsigned char *elide, const void *block) {
    for (int i = 0; i < ne; i++) {
        const vt_access *o = &r[i]->acc[0];
        if (o->block == block && !in_scratch(r, elide, i)) return 1;
        for (int k = 1; k < r[i]->nacc; k++)
            if (r[i]->acc[k].block == block && !reads_own(r, i, k)) return 1;
    }
    return 0;
}

/* Whether output access k of tail may be memory the group r[0..ne) reads:
 * the tail writes it in step with what the group gives it (in_step), the
 * output is laid out as the tail's input (so the tail writes element i
 * where the group computed element i), and every member reads that block
 * through the same view, never writing it to memory: each element is read
 * before it is overwritten, on the same thread. The allocator hands a
 * dead input's block to the next output of its size; a residual add whose
 * operand was a product, then a norm, is the common case. */
static int written_in_step(const vt_rec *const *r, int ne, const unsigned char *elide, const vt_rec *tail, int k) {
    const vt_tensor *o = view_of(tail, k), *in = &tail->n.src[0];
    if (!vt_node_kinds[tail->n.kind].in_step || o->ndim != in->ndim || o->dtype != in->dtype) return 0;
    for (int d = 0; d < o->ndim; d++)
        if (o->sizes[d] != in->sizes[d] || o->strides[d] != in->strides[d]) return 0;
    const void *block = tail->acc[k].block;
    for (int i = 0; i < ne; i++) {
        const vt_access *out = &r[i]->acc[0];
        if (out->block == block && !in_scratch(r, elide, i)) return 0;
        for (int j = 1; j < r[i]->nacc; j++)
            if (r[i]->acc[j].block == block && !same_view(view_of(r[i], j), o)) return 0;
    }
    return 1;
}

/* Whether member i's output is overwritten, every element of it, by a
 * later member of r[0..ne): no one outside the group can read the value in
 * between (the group is one command), so it lives in scratch. An in-place
 * chain, an optimizer's p.mul_(1 - lr * wd) then p.addcdiv_(m, d), writes
 * p once. */
static int superseded(const vt_rec *const *r, int ne, int i) {
    if (r[i]->nacc == 0 || r[i]->tensor_of[0] != 0) return 0; /* an empty output */
    const vt_access *o = &r[i]->acc[0];
    for (int j = i + 1; j < ne; j++)
        if (r[j]->nacc > 0 && r[j]->tensor_of[0] == 0 && r[j]->acc[0].block == o->block &&
            r[j]->acc[0].gen == o->gen && same_view(view_of(r[j], 0), view_of(r[i], 0)))
            return 1;
    return 0;
}

vt_status vt_fuse_enqueue(int dev, const vt_rec *const *r, int count, const unsigned char *dead, int codegen,
                          vt_fusion_stats *st) {
    if (count == 1 && !vt_fuse_is_member(r[0])) return enqueue_alone(dev, r[0], st);
    const vt_rec *tail = vt_fuse_is_tail(r[count - 1]) ? r[count - 1] : NULL;
    const int ne = tail ? count - 1 : count;
    unsigned char elide[VT_FUSE_MAX_NODES];
    for (int i = 0; i < ne; i++) elide[i] = dead[i] || superseded(r, ne, i);
    int order[VT_MAX_DIMS];
    const int *perm = group_order(r, order);
    codegen = codegen && vt_cg_enabled();
    if (!tail) return enqueue_group(dev, r, count, elide, perm, NULL, -1, codegen, st);
    const vt_access *in = &tail->acc[tail->acc_of_src[0]];
    int q = ne - 1;
    while (q >= 0 && !(r[q]->acc[0].block == in->block && r[q]->acc[0].gen == in->gen)) q--;
    int apart = q < 0 || !feeds(r, q, perm, tail);
    for (int k = 0; k < tail->nacc && !apart; k++)
        apart = tail->tensor_of[k] < VT_NODE_MAX_OUT && touches(r, ne, elide, tail->acc[k].block) &&
                !written_in_step(r, ne, elide, tail, k);
    if (!apart) return enqueue_group(dev, r, ne, elide, perm, tail, q, codegen, st);
    /* the tail reads memory: what it reads is written there first */
    unsigned char keep[VT_FUSE_MAX_NODES];
    for (int i = 0; i < ne; i++)
        keep[i] = elide[i] && !(r[i]->acc[0].block == in->block && r[i]->acc[0].gen == in->gen);
    vt_status s = enqueue_group(dev, r, ne, keep, perm, NULL, -1, codegen, st);
    return s == VT_OK ? enqueue_alone(dev, tail, st) : s;
}
