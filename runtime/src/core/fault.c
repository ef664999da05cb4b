/* fault.c — errors of queued work. A command that fails leaves a fault: the
 * memory it wrote is poisoned with it (hbm.c), work that reads that memory
 * passes it on instead of running, a host read of that memory raises it,
 * and a synchronisation of the device raises every fault nobody has seen
 * yet. So an error reaches the code that depends on it, stale memory is
 * never read as a result, and no error is lost. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

#define FAULT_MSG 1024

struct vt_fault {
    atomic_int refs;
    atomic_int raised;  /* reached the user once: a synchronisation does not raise it again */
    vt_status status;
    int dev;
    uint64_t ticket;    /* the failed command's place in its queue (a ticket naming the queue; 0: none) */
    struct vt_fault *next; /* in its device's list of faults a synchronisation still owes */
    char msg[FAULT_MSG];
};

typedef struct fault_list {
    pthread_mutex_t mu;
    vt_fault *head, *tail;
    atomic_int count;      /* faults in the list, plus one while owes_no_memory */
    atomic_int owes_no_memory;
} fault_list;

static fault_list lists[VT_MAX_DEVICES];
static pthread_once_t lists_once = PTHREAD_ONCE_INIT;

static void lists_init(void) {
    for (int i = 0; i < VT_MAX_DEVICES; i++) pthread_mutex_init(&lists[i].mu, NULL);
}

/* When the host has no memory left even for the record, the error is still
 * reported, with this (never freed) fault. */
static vt_fault no_memory_fault = {
    .refs = 1,
    .status = VT_ERR_OUT_OF_MEMORY,
    .msg = "a queued op failed and the host had no memory left to record its error",
};

vt_fault *vt_fault_new(int dev, uint64_t ticket, vt_status s, const char *op_name, const char *msg) {
    vt_fault *f = malloc(sizeof *f);
    if (!f) {
        vt_fault_ref(&no_memory_fault);
        return &no_memory_fault;
    }
    atomic_init(&f->refs, 1);
    atomic_init(&f->raised, 0);
    f->status = s;
    f->dev = dev;
    f->ticket = ticket;
    f->next = NULL;
    snprintf(f->msg, sizeof f->msg, "%s: %s", op_name ? op_name : "op", msg && *msg ? msg : vt_status_string(s));
    return f;
}

void vt_fault_ref(vt_fault *f) { atomic_fetch_add_explicit(&f->refs, 1, memory_order_relaxed); }

void vt_fault_unref(vt_fault *f) {
    if (atomic_fetch_sub_explicit(&f->refs, 1, memory_order_acq_rel) == 1) free(f);
}

void vt_fault_latch(vt_fault *f) {
    int dev = f->dev >= 0 && f->dev < VT_MAX_DEVICES ? f->dev : 0;
    pthread_once(&lists_once, lists_init);
    fault_list *l = &lists[dev];
    if (f == &no_memory_fault) { /* shared by every device: owed by a flag, not a list entry */
        if (!atomic_exchange(&l->owes_no_memory, 1)) atomic_fetch_add(&l->count, 1);
        return;
    }
    vt_fault_ref(f);
    pthread_mutex_lock(&l->mu);
    f->next = NULL;
    if (l->tail) l->tail->next = f;
    else l->head = f;
    l->tail = f;
    atomic_fetch_add(&l->count, 1);
    pthread_mutex_unlock(&l->mu);
}

const char *vt_fault_message(const vt_fault *f) { return f->msg; }
vt_status vt_fault_status(const vt_fault *f) { return f->status; }

vt_status vt_fault_raise(vt_fault *f) {
    atomic_store(&f->raised, 1);
    return vt_set_error(f->status, "%s", f->msg);
}

/* Append a fault's message to the "more" list of a combined error. */
static void append(char *buf, size_t len, size_t *used, int nth, const char *msg) {
    if (*used >= len - 1) return;
    int k = snprintf(buf + *used, len - *used, "%s%s", nth > 1 ? "; " : "", msg);
    if (k > 0) *used = *used + (size_t)k < len ? *used + (size_t)k : len - 1;
}

vt_status vt_fault_take(int dev, uint64_t upto) {
    if (dev < 0 || dev >= VT_MAX_DEVICES) return VT_OK;
    pthread_once(&lists_once, lists_init);
    fault_list *l = &lists[dev];
    if (!atomic_load(&l->count)) return VT_OK;
    vt_fault *taken = NULL, **tail = &taken;
    pthread_mutex_lock(&l->mu);
    vt_fault **pp = &l->head, *last = NULL;
    while (*pp) {
        vt_fault *f = *pp;
        if (upto == UINT64_MAX || !f->ticket ||
            (vt_ticket_queue(f->ticket) == vt_ticket_queue(upto) && f->ticket <= upto)) {
            *pp = f->next;
            f->next = NULL;
            *tail = f;
            tail = &f->next;
            atomic_fetch_sub(&l->count, 1);
        } else {
            last = f;
            pp = &f->next;
        }
    }
    l->tail = last;
    int no_memory = atomic_exchange(&l->owes_no_memory, 0);
    if (no_memory) atomic_fetch_sub(&l->count, 1);
    pthread_mutex_unlock(&l->mu);

    /* One error: the first fault not yet raised, naming the others. */
    const char *first_msg = no_memory ? no_memory_fault.msg : NULL;
    vt_status first_status = no_memory ? no_memory_fault.status : VT_OK;
    vt_fault *first = NULL;
    char more[768];
    size_t used = 0;
    int extra = 0;
    more[0] = '\0';
    for (vt_fault *f = taken, *nf; f; f = nf) {
        nf = f->next;
        f->next = NULL;
        if (atomic_exchange(&f->raised, 1)) { /* seen already, through a read */
            vt_fault_unref(f);
        } else if (!first_msg) {
            first = f; /* released once its message is used */
            first_msg = f->msg;
            first_status = f->status;
        } else {
            append(more, sizeof more, &used, ++extra, f->msg);
            vt_fault_unref(f);
        }
    }
    vt_status s = VT_OK;
    if (first_msg && extra)
        s = vt_set_error(first_status, "%s\n(and %d more error%s on TPU %d since the last synchronisation: %s)",
                         first_msg, extra, extra > 1 ? "s" : "", dev, more);
    else if (first_msg)
        s = vt_set_error(first_status, "%s", first_msg);
    if (first) vt_fault_unref(first);
    return s;
}

void vt_fault_poison(const vt_access *acc, int n, vt_fault *f) {
    for (int i = 0; i < n; i++)
        if (acc[i].flags & VT_USE_WRITE) vt_hbm_poison(&acc[i], f);
}

vt_fault *vt_fault_of_reads(const vt_access *acc, int n) {
    for (int i = 0; i < n; i++) {
        if ((acc[i].flags & (VT_USE_READ | VT_ACCESS_UNCHECKED)) != VT_USE_READ) continue;
        vt_fault *f = vt_hbm_fault(&acc[i]);
        if (f) return f;
    }
    return NULL;
}

void vt_fault_clear_writes(const vt_access *acc, int n) {
    for (int i = 0; i < n; i++)
        if ((acc[i].flags & VT_USE_WRITE) && (acc[i].flags & VT_ACCESS_COVERS)) vt_hbm_unpoison(&acc[i]);
}
