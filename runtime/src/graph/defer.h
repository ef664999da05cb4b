/* defer.h — DeferAndFuse: the record of a device's pending nodes (defer.c)
 * and the fusion groups a flush cuts it into (fuse.c). A recorded node was
 * checked and its memory resolved when it was built, exactly as a queued
 * one; it waits in the record until a flush hands it to the queue inside a
 * group command. */
#ifndef VTPU_GRAPH_DEFER_H
#define VTPU_GRAPH_DEFER_H

#include "graph/node.h"

#define VT_REC_MAX_ACC (VT_NODE_MAX_OUT + VT_NODE_MAX_SRC)

/* A recorded node: the node, and its resolved accesses in vt_node_uses
 * order (each output, then each tensor input; empty tensors have none). */
typedef struct vt_rec {
    vt_node n;
    int nacc;
    int8_t acc_of_src[VT_NODE_MAX_SRC]; /* access of src[k], -1: none (a host scalar, absent, empty) */
    int8_t tensor_of[VT_REC_MAX_ACC];   /* what access k is: j for out[j], VT_NODE_MAX_OUT + k for src[k] */
    vt_access acc[VT_REC_MAX_ACC];
} vt_rec;

/* Whether a node submitted on this thread in mode is recorded instead of
 * queued (every kind is, in DeferAndFuse, except on a queue's worker). */
int vt_defer_wants(vt_eager_mode mode);
/* Graph program runs begun so far, in any thread (vt_defer_program_begin). */
uint64_t vt_defer_program_runs(void);
/* Record a checked node with its uses (vt_node_uses of n). */
vt_status vt_defer_record(int dev, vt_node *n, vt_use *u, int m);

/* ---- fuse.c */
/* Members of a group, at most: an optimizer's foreach chains (8 ops per
 * parameter) of the parameters of one shape across a model's layers join
 * one group, and a group cut short would write every chain's temporaries. */
#define VT_FUSE_MAX_NODES 128
/* What a group being built does with each buffer (HBM block) it touches,
 * per view it was used through: whether a use through the view writes, and
 * whether the block is used through other views too. used, wrote: filters
 * of the blocks used and written (a bit per block hash), so a block the
 * group never touched (or never wrote) is known without a scan. */
typedef struct vt_fuse_use {
    const void *block;
    const vt_tensor *view;
    int write, other;
} vt_fuse_use;
typedef struct vt_fuse_uses {
    int n;
    uint64_t used[4], wrote[4];
    vt_fuse_use u[VT_FUSE_MAX_NODES * VT_REC_MAX_ACC];
} vt_fuse_uses;
/* Start a group with its first node g. */
void vt_fuse_begin(vt_fuse_uses *t, const vt_rec *g);
/* Whether r can join the group that starts with g and has the uses t: the
 * same output shape, and every pair of uses of one block, one of them a
 * write, through the same view (element i of one is element i of the
 * other) or of elements the other does not touch (the slices of a cat), so
 * running the group tile by tile computes what running its nodes one after
 * another does. */
int vt_fuse_fits(const vt_fuse_uses *t, const vt_rec *g, const vt_rec *r);
/* Whether r can be a member of a group: an elementwise kind, run tile by
 * tile as a plan (vt_node_kind_def.plan). Other nodes run alone, or end a
 * group (vt_fuse_is_tail). */
int vt_fuse_is_member(const vt_rec *r);
/* Whether r may end a group instead of joining it: a kind whose input can
 * come from a producer (a reduction, a softmax: vt_node_kind_def.run_from). */
int vt_fuse_is_tail(const vt_rec *r);
/* Whether r can end the group with the uses t: it reads, once each, all
 * the elements of a buffer the group writes, through one view, in runs its
 * kind can be fed. (Whether the group leaves the memory it writes alone is
 * known at the flush: vt_fuse_enqueue runs the two apart if not.) */
int vt_fuse_takes_tail(const vt_fuse_uses *t, const vt_rec *r);
/* r joins the group. */
void vt_fuse_add(vt_fuse_uses *t, const vt_rec *r);
/* Whether an access of block (write: one that writes) may conflict with the
 * group's uses: the group uses the block at all (a write), or writes it (a
 * read). 0: surely not; 1: scan t to know. */
int vt_fuse_may_conflict(const vt_fuse_uses *t, const void *block, int write);
/* Test hook: of the host allocations flushes make from now on (a flush's
 * tables, then per group its command, then per thread its tiles), the one
 * after `skip` others fails as if the host were out of memory (skip < 0:
 * none). vt_defer_alloc_fails() is asked at each. */
void vt_defer_fail_alloc_for_test(int skip);
int vt_defer_alloc_fails(void);
/* Queue the group g[0..count) (in program order) on dev as one command.
 * dead[i]: g[i]'s output was freed before the flush and nothing after the
 * group reads it, so it lives in L1 scratch only (so does an output a later
 * member overwrites, all of it). A group whose last node
 * is a tail (a reduction, a softmax) runs as that node fed by the group's
 * tiles, or, where its input's layout does not allow that, as two commands.
 * codegen: the group may run generated code (graph/codegen.h; groups of
 * graph programs). Adds to *st what the group writes. */
vt_status vt_fuse_enqueue(int dev, const vt_rec *const *g, int count, const unsigned char *dead, int codegen,
                          vt_fusion_stats *st);

#endif
