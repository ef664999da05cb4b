/* host_step.c — work the host library runs in queue order. A collective
 * handed to a transport is device work: it runs after the work that
 * produced its inputs, later work waits for it, and its faults follow the
 * data like any kernel's. Unlike a kernel it runs even when an input is
 * poisoned, because peers in other processes wait for it: it is told why,
 * so it can fail the exchange on every rank instead of sending garbage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct host_step {
    vt_host_fn fn;
    void *ctx;
    int nreads;
    vt_access *reads; /* in the command's payload */
} host_step;

static vt_status host_step_kernel(void *p) {
    const host_step *h = p;
    vt_fault *f = h->nreads ? vt_fault_of_reads(h->reads, h->nreads) : NULL;
    vt_status s;
    if (!f) {
        s = h->fn(h->ctx, NULL);
    } else {
        /* not raised here: the user still gets it from the op that failed */
        const char *why = vt_fault_message(f);
        s = h->fn(h->ctx, why);
        /* what it wrote is computed from the poisoned input either way */
        if (s == VT_OK) s = vt_set_error(vt_fault_status(f), "input poisoned by %s", why);
        vt_fault_unref(f);
    }
    return s;
}

vt_status vt_enqueue_host(int dev, const char *name, vt_host_fn fn, void *ctx, const vt_tensor *reads, int nreads,
                          const vt_tensor *writes, int nwrites, int *queued) {
    if (queued) *queued = 0;
    if (!name) name = "host step";
    if (!fn) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: function is NULL", name);
    if (nreads < 0 || nwrites < 0 || (nreads && !reads) || (nwrites && !writes))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: bad tensor list", name);
    const int n = nreads > nwrites ? nreads : nwrites;
    vt_use local[16];
    vt_use *uses = n > 16 ? malloc(sizeof(vt_use) * (size_t)n) : local;
    if (!uses) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: out of host memory for %d tensors", name, n);
    vt_tensor *desc = malloc(sizeof(vt_tensor) * (size_t)(n ? n : 1));
    if (!desc) {
        if (uses != local) free(uses);
        return vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: out of host memory for %d tensors", name, n);
    }
    /* The reads are resolved on their own: the step checks them itself. */
    vt_prepared rp, wp;
    for (int i = 0; i < nreads; i++) {
        desc[i] = reads[i];
        uses[i] = (vt_use){&desc[i], VT_USE_READ, i + 1};
    }
    vt_status s = vt_uses_prepare(dev, name, uses, nreads, &rp);
    if (s == VT_OK) {
        for (int i = 0; i < nwrites; i++) {
            desc[i] = writes[i];
            uses[i] = (vt_use){&desc[i], VT_USE_WRITE, i + 1};
        }
        s = vt_uses_prepare(dev, name, uses, nwrites, &wp);
        if (s != VT_OK) vt_prepared_release(dev, &rp);
    }
    if (uses != local) free(uses);
    free(desc);
    if (s != VT_OK) return s;
    vt_access *racc = rp.n ? malloc(sizeof(vt_access) * (size_t)rp.n) : NULL;
    if (rp.n && !racc) {
        vt_prepared_release(dev, &rp);
        vt_prepared_release(dev, &wp);
        return vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: out of host memory for %d tensors", name, n);
    }
    if (rp.n) memcpy(racc, rp.acc, sizeof(vt_access) * (size_t)rp.n);
    /* The command's accesses: the writes, and the reads marked unchecked, so
     * the queue orders the step after their producers on other queues (and
     * their later writers after it) but runs it on a poisoned input. */
    if (rp.n) {
        vt_access *all = malloc(sizeof(vt_access) * (size_t)(wp.n + rp.n));
        if (!all) {
            free(racc);
            vt_prepared_release(dev, &rp);
            vt_prepared_release(dev, &wp);
            return vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: out of host memory for %d tensors", name, n);
        }
        memcpy(all, wp.acc, sizeof(vt_access) * (size_t)wp.n);
        for (int i = 0; i < rp.n; i++) {
            all[wp.n + i] = rp.acc[i];
            all[wp.n + i].flags = VT_USE_READ | VT_ACCESS_UNCHECKED;
        }
        if (wp.acc != wp.inline_acc) free(wp.acc);
        wp.acc = all;
        wp.n += rp.n;
    }
    host_step h = {fn, ctx, rp.n, racc};
    vt_prepared_release(dev, &rp);
    wp.payload = racc; /* the queue frees it after the step */
    return vt_enqueue_prepared_q(dev, name, host_step_kernel, &h, sizeof h, &wp, queued);
}

vt_status vt_host_step_error(vt_status s, const char *msg) {
    if (s == VT_OK) s = VT_ERR_INTERNAL;
    return vt_set_error(s, "%s", msg ? msg : "host step failed");
}
