/* defer.c — the record of each device's pending nodes in DeferAndFuse, and
 * its flush. Recording keeps program order: a device has one record, and
 * anything else that touches the device's queue flushes it first (queue.c
 * calls vt_defer_flush_before), so recorded and queued work run in the
 * order the program issued them. A record belongs to the queue (stream) it
 * was made on: it is flushed before a node from another queue is recorded,
 * and its groups are queued there. A flush cuts the record into fusion
 * groups (fuse.c) and decides which outputs are dead: an output whose
 * allocation was freed before the flush, that nothing after its group
 * reads, is never written. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "graph/defer.h"

#define MAX_PENDING_NODES 4096
#define MAX_PENDING_BYTES ((uint64_t)8 << 30) /* output bytes the record may stand for */
/* Loop detection, as TorchTPU's repeated-ops heuristic: a record whose last
 * LOOP_MIN..LOOP_MAX node signatures repeat the ones before them is a loop
 * body seen twice, and is flushed instead of growing. */
#define LOOP_MIN 10
#define LOOP_MAX 128

typedef struct pending {
    pthread_mutex_t mu;
    vt_rec *recs;
    int n, cap;
    uint64_t bytes;
    atomic_int count; /* n, for the lock-free check of the hot path */
    int queue;        /* the queue the recorded nodes were issued on */
    int program;      /* a graph program recorded some of the nodes: groups may run generated code */
    uint64_t *sig;    /* signature per record (loop detection) */
    int run[LOOP_MAX + 1]; /* run[p]: trailing records equal to the record p before */
} pending;

static pending pend[VT_MAX_DEVICES];
static atomic_int alloc_countdown; /* 0: off; 1: the next allocation fails */

void vt_defer_fail_alloc_for_test(int skip) { atomic_store(&alloc_countdown, skip < 0 ? 0 : skip + 1); }

int vt_defer_alloc_fails(void) {
    int n = atomic_load_explicit(&alloc_countdown, memory_order_relaxed);
    while (n > 0 && !atomic_compare_exchange_weak(&alloc_countdown, &n, n - 1)) {}
    return n == 1;
}
static pthread_once_t pend_once = PTHREAD_ONCE_INIT;
static _Thread_local int flushing; /* this thread is inside a flush */
static _Thread_local int in_program; /* graph programs this thread is running */

static atomic_uint_fast64_t program_runs;

void vt_defer_program_begin(void) {
    in_program++;
    atomic_fetch_add_explicit(&program_runs, 1, memory_order_relaxed);
}
uint64_t vt_defer_program_runs(void) { return atomic_load_explicit(&program_runs, memory_order_relaxed); }
void vt_defer_program_end(void) {
    if (in_program > 0) in_program--;
}

static struct {
    atomic_uint_fast64_t flushes, nodes, groups, fused_nodes, bytes_written, bytes_elided, loop_flushes;
} stats;

static void pend_init(void) {
    for (int d = 0; d < VT_MAX_DEVICES; d++) pthread_mutex_init(&pend[d].mu, NULL);
}

/* ------------------------------------------------------------ recording */

/* Every node is recorded: elementwise nodes fuse, reductions, softmax and
 * norms may end a group, and the rest (matmul, attention, convolution,
 * indexing, RNG) run in program order between the groups (fuse.c). */
int vt_defer_wants(vt_eager_mode mode) {
    return mode == VT_EAGER_DEFER_AND_FUSE && !vt_on_queue_worker();
}

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h;
}

/* What an op is, for loop detection: its kind, op, dtypes and shape. */
static uint64_t signature(const vt_node *n) {
    uint64_t h = mix((uint64_t)n->kind, (uint64_t)(uint32_t)n->op);
    h = mix(h, (uint64_t)n->compute);
    const vt_tensor *o = &n->out[0];
    h = mix(h, (uint64_t)o->dtype << 8 | (uint64_t)o->ndim);
    for (int d = 0; d < o->ndim; d++) h = mix(h, (uint64_t)o->sizes[d]);
    for (int k = 0; k < n->nsrc; k++) h = mix(h, (uint64_t)n->src[k].dtype << 8 | (uint64_t)n->src[k].ndim);
    /* the tensors of one foreach op are one user op, not a loop of its own */
    if (n->kind == VT_NODE_FOREACH) h = mix(h, (uint64_t)n->iparams[0]);
    return h;
}

static vt_status flush_locked(int dev, pending *p);

vt_status vt_defer_record(int dev, vt_node *n, vt_use *u, int m) {
    const uint64_t out_bytes = (uint64_t)vt_node_out_bytes(n);
    vt_prepared pr;
    /* Elementwise reads are never staged for overlap, but a view too hard
     * to compare is: that copy is queued now, after a flush of what was
     * recorded before (queue.c), and the node reads the copy. */
    vt_status s = vt_uses_prepare(dev, n->name, u, m, &pr);
    if (s != VT_OK) return s;
    vt_node_note_versions(n);
    if (out_bytes == 0) { /* writes nothing, reads nothing: checked as in Strict, nothing to record */
        vt_prepared_release(dev, &pr);
        return VT_OK;
    }
    /* recorded in logical order: the group it joins picks the order of the
     * visit for all its members (fuse.c), so views compare as the op's */
    pthread_once(&pend_once, pend_init);
    pending *p = &pend[dev];
    pthread_mutex_lock(&p->mu);
    if (p->n && p->queue != vt_thread_queue(dev)) {
        s = flush_locked(dev, p);
        if (s != VT_OK) {
            pthread_mutex_unlock(&p->mu);
            vt_prepared_release(dev, &pr);
            return s;
        }
    }
    if (p->n == 0) p->queue = vt_thread_queue(dev);
    if (p->n == p->cap) {
        int cap = p->cap ? p->cap * 2 : 64;
        vt_rec *r = realloc(p->recs, sizeof *r * (size_t)cap);
        uint64_t *sg = r ? realloc(p->sig, sizeof *sg * (size_t)cap) : NULL;
        if (r) p->recs = r;
        if (sg) p->sig = sg;
        if (!r || !sg) {
            pthread_mutex_unlock(&p->mu);
            vt_prepared_release(dev, &pr);
            return vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: out of host memory recording the op", n->name);
        }
        p->cap = cap;
    }
    vt_rec *r = &p->recs[p->n];
    memcpy(&r->n, n, vt_node_size(n));
    r->nacc = pr.n;
    memcpy(r->acc, pr.acc, sizeof(vt_access) * (size_t)pr.n);
    /* which tensor each access is: the uses in order, the empty ones without one */
    int a = 0;
    for (int j = 0; j < n->nout; j++)
        if (vt_node_has_out(n, j) && vt_tensor_numel(&n->out[j]) > 0) r->tensor_of[a++] = (int8_t)j;
    for (int k = 0; k < n->nsrc; k++) {
        const int has = !(n->host >> k & 1) && vt_node_has_src(n, k) && vt_tensor_numel(&n->src[k]) > 0;
        r->acc_of_src[k] = (int8_t)(has ? a : -1);
        if (has) r->tensor_of[a++] = (int8_t)(VT_NODE_MAX_OUT + k);
    }
    /* loop detection: extend each period's run of repeats */
    const int i = p->n;
    const uint64_t sg = p->sig[i] = signature(n);
    int loop = 0;
    const int top = i < LOOP_MAX ? i : LOOP_MAX; /* periods longer than the record do not match */
    for (int per = LOOP_MIN; per <= top; per++) { /* branch-free: this runs per recorded op */
        const int r = (p->sig[i - per] == sg) * (p->run[per] + 1);
        p->run[per] = r;
        loop |= r >= per;
    }
    loop &= !in_program;
    p->program |= in_program > 0;
    for (int per = top + 1 > LOOP_MIN ? top + 1 : LOOP_MIN; per <= LOOP_MAX; per++) p->run[per] = 0;
    p->n++;
    p->bytes += out_bytes;
    atomic_store_explicit(&p->count, p->n, memory_order_relaxed);
    s = VT_OK;
    if (loop || p->n >= MAX_PENDING_NODES || p->bytes >= MAX_PENDING_BYTES) {
        if (loop) atomic_fetch_add(&stats.loop_flushes, 1);
        s = flush_locked(dev, p);
    }
    pthread_mutex_unlock(&p->mu);
    /* The node's staged copies (if any) are freed stream-ordered: a reuse
     * of their blocks is recorded or queued after the node. */
    pr.n = 0;
    vt_prepared_release(dev, &pr);
    return s;
}

/* ------------------------------------------------------------ flushing */

/* The last record that uses each (block, allocation), by open addressing. */
typedef struct last_use {
    const void *block;
    uint64_t gen;
    int at;
} last_use;

static size_t slot_of(const void *block, uint64_t gen, size_t mask) {
    uint64_t h = mix((uint64_t)(uintptr_t)block, gen);
    return (size_t)(h * 0x9e3779b97f4a7c15ull >> 20) & mask;
}

static last_use *find_use(last_use *t, size_t mask, const vt_access *a) {
    size_t i = slot_of(a->block, a->gen, mask);
    while (t[i].block && !(t[i].block == a->block && t[i].gen == a->gen)) i = (i + 1) & mask;
    return &t[i];
}

/* Recorded nodes that could not be queued: all they write (every output,
 * and inputs updated in place) carries the error, so a read of it raises
 * instead of returning stale memory. */
static void poison_rest(int dev, vt_rec *recs, int n, vt_status s) {
    vt_fault *f = vt_fault_new(dev, 0, s, recs[0].n.name, vt_last_error());
    if (!f) return;
    for (int i = 0; i < n; i++) vt_fault_poison(recs[i].acc, recs[i].nacc, f);
    vt_fault_latch(f);
    vt_fault_unref(f);
}

/* ------------------------------------------------------------ grouping
 * A node joins the newest fusion group it fits (vt_fuse_fits) among the
 * OPEN_GROUPS most recent ones, provided no newer group touches what it
 * touches (a block one of them writes, or one it writes): the node then
 * runs earlier than the nodes of those newer groups, which changes nothing
 * they compute. Groups run in the order they were opened. So an
 * optimizer's foreach ops, recorded op by op across all parameters, fuse
 * parameter by parameter, and a chain interrupted by an unrelated op of
 * another shape still fuses. */

#define OPEN_GROUPS 16

typedef struct group_rec {
    int count;
    int member[VT_FUSE_MAX_NODES]; /* record indices, in program order */
} group_rec;

typedef struct open_group {
    int id;                 /* index into the flush's groups */
    int closed;             /* ends in a reduction or softmax: nothing joins it */
    vt_fuse_uses uses;
} open_group;

/* Whether r touches a block group o writes, or writes one o reads. */
static int conflicts(const open_group *o, const vt_rec *r) {
    for (int k = 0; k < r->nacc; k++) {
        const int w = (r->acc[k].flags & VT_USE_WRITE) != 0;
        if (!vt_fuse_may_conflict(&o->uses, r->acc[k].block, w)) continue;
        for (int i = o->uses.n - 1; i >= 0; i--)
            if (o->uses.u[i].block == r->acc[k].block && (w || o->uses.u[i].write)) return 1;
    }
    return 0;
}

/* Cuts recs[0..n) into groups; returns how many (groups[] has room for n). */
static int cut_groups(const vt_rec *recs, int n, group_rec *groups, open_group *open) {
    int ngroups = 0, nopen = 0; /* open[(ngroups - 1 - j) % OPEN_GROUPS] is the j-th newest */
    for (int i = 0; i < n; i++) {
        int joined = -1;
        const int tail = vt_fuse_is_tail(&recs[i]);
        /* a node that neither fuses nor ends a group is a group of its own */
        const int alone = !tail && !vt_fuse_is_member(&recs[i]);
        for (int j = 0; j < nopen && !alone; j++) {
            open_group *o = &open[(ngroups - 1 - j) % OPEN_GROUPS];
            group_rec *g = &groups[o->id];
            if (!o->closed && g->count < VT_FUSE_MAX_NODES &&
                (tail ? vt_fuse_takes_tail(&o->uses, &recs[i])
                        : vt_fuse_fits(&o->uses, &recs[g->member[0]], &recs[i]))) {
                joined = o->id;
                vt_fuse_add(&o->uses, &recs[i]);
                o->closed = tail;
                break;
            }
            if (conflicts(o, &recs[i])) break;
        }
        if (joined < 0) {
            joined = ngroups++;
            open_group *o = &open[joined % OPEN_GROUPS];
            o->id = joined;
            o->closed = tail || alone;
            vt_fuse_begin(&o->uses, &recs[i]);
            groups[joined].count = 0;
            if (nopen < OPEN_GROUPS) nopen++;
        }
        groups[joined].member[groups[joined].count++] = i;
    }
    return ngroups;
}

/* poison_rest for the nodes of groups[0..ngroups). */
static void poison_groups(int dev, const vt_rec *recs, const group_rec *groups, int ngroups, vt_status s) {
    vt_fault *f = vt_fault_new(dev, 0, s, recs[groups[0].member[0]].n.name, vt_last_error());
    if (!f) return;
    for (int g = 0; g < ngroups; g++)
        for (int m = 0; m < groups[g].count; m++) {
            const vt_rec *r = &recs[groups[g].member[m]];
            vt_fault_poison(r->acc, r->nacc, f);
        }
    vt_fault_latch(f);
    vt_fault_unref(f);
}

/* Caller holds p->mu. Queues every recorded node as groups (cut_groups). */
static vt_status flush_locked(int dev, pending *p) {
    const int n = p->n;
    if (n == 0) return VT_OK;
    flushing = 1;
    const int caller_queue = vt_set_thread_queue(dev, p->queue);
    vt_rec *recs = p->recs;
    /* Last group that uses each allocation the record touches: a table at
     * most half full of the accesses the record has (sized by what the
     * nodes use, not what they could: it is cleared at every flush). */
    size_t nacc = 0;
    for (int i = 0; i < n; i++) nacc += (size_t)recs[i].nacc;
    size_t cap = 64;
    while (cap < nacc * 2) cap *= 2;
    const int fail = vt_defer_alloc_fails();
    last_use *lu = fail ? NULL : calloc(cap, sizeof *lu);
    group_rec *groups = malloc(sizeof *groups * (size_t)n);
    open_group *open = malloc(sizeof *open * OPEN_GROUPS);
    int *group_of = malloc(sizeof *group_of * (size_t)n);
    vt_status s = VT_OK;
    if (!lu || !groups || !open || !group_of) {
        s = vt_set_error(VT_ERR_OUT_OF_MEMORY, "TPU %d: out of host memory flushing %d recorded ops", dev, n);
        poison_rest(dev, recs, n, s);
    } else {
        const int ngroups = cut_groups(recs, n, groups, open);
        for (int g = 0; g < ngroups; g++)
            for (int m = 0; m < groups[g].count; m++) group_of[groups[g].member[m]] = g;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < recs[i].nacc; k++) {
                last_use *e = find_use(lu, cap - 1, &recs[i].acc[k]);
                e->block = recs[i].acc[k].block;
                e->gen = recs[i].acc[k].gen;
                if (group_of[i] > e->at) e->at = group_of[i];
            }
        vt_fusion_stats st = {0};
        for (int g = 0; g < ngroups && s == VT_OK; g++) {
            const vt_rec *members[VT_FUSE_MAX_NODES];
            unsigned char elide[VT_FUSE_MAX_NODES];
            for (int m = 0; m < groups[g].count; m++) {
                const vt_rec *r = &recs[groups[g].member[m]];
                members[m] = r;
                /* dead: freed before the flush, and no later group reads it */
                elide[m] = !vt_hbm_access_live(&r->acc[0]) && find_use(lu, cap - 1, &r->acc[0])->at == g;
            }
            s = vt_fuse_enqueue(dev, members, groups[g].count, elide, p->program, &st);
            if (s != VT_OK) poison_groups(dev, recs, groups + g, ngroups - g, s);
        }
        atomic_fetch_add(&stats.flushes, 1);
        atomic_fetch_add(&stats.nodes, (uint64_t)n);
        atomic_fetch_add(&stats.groups, st.groups);
        atomic_fetch_add(&stats.fused_nodes, st.fused_nodes);
        atomic_fetch_add(&stats.bytes_written, st.bytes_written);
        atomic_fetch_add(&stats.bytes_elided, st.bytes_elided);
    }
    free(lu);
    free(groups);
    free(open);
    free(group_of);
    /* Nodes not queued after a failure are dropped: the error says so. */
    p->n = 0;
    p->bytes = 0;
    p->program = 0;
    memset(p->run, 0, sizeof p->run);
    atomic_store_explicit(&p->count, 0, memory_order_relaxed);
    vt_set_thread_queue(dev, caller_queue);
    flushing = 0;
    return s;
}

vt_status vt_defer_flush_before(int dev) {
    if (flushing || vt_on_queue_worker()) return VT_OK;
    pthread_once(&pend_once, pend_init);
    pending *p = &pend[dev];
    if (!atomic_load_explicit(&p->count, memory_order_relaxed)) return VT_OK;
    pthread_mutex_lock(&p->mu);
    vt_status s = flush_locked(dev, p);
    pthread_mutex_unlock(&p->mu);
    return s;
}

vt_status vt_flush(int dev) {
    vt_status s = vt_check_device(dev);
    return s == VT_OK ? vt_defer_flush_before(dev) : s;
}

void vt_get_fusion_stats(vt_fusion_stats *out) {
    if (!out) return;
    out->flushes = atomic_load(&stats.flushes);
    out->nodes = atomic_load(&stats.nodes);
    out->groups = atomic_load(&stats.groups);
    out->fused_nodes = atomic_load(&stats.fused_nodes);
    out->bytes_written = atomic_load(&stats.bytes_written);
    out->bytes_elided = atomic_load(&stats.bytes_elided);
    out->loop_flushes = atomic_load(&stats.loop_flushes);
}

void vt_reset_fusion_stats(void) {
    atomic_store(&stats.flushes, 0);
    atomic_store(&stats.nodes, 0);
    atomic_store(&stats.groups, 0);
    atomic_store(&stats.fused_nodes, 0);
    atomic_store(&stats.bytes_written, 0);
    atomic_store(&stats.bytes_elided, 0);
    atomic_store(&stats.loop_flushes, 0);
}
