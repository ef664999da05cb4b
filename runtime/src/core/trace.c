/* trace.c — a record of the commands the device queues ran, for
 * vtpu.trace(): one event per command, with what its kernel said about
 * itself (a node its op and shape, a fused group its ops and bytes). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "internal.h"

static atomic_int tracing;
static pthread_mutex_t trace_mu = PTHREAD_MUTEX_INITIALIZER;
static vt_trace_event *events;
static int64_t nevents, cap;
static int lost; /* an event could not be stored */

/* What the running command said about itself (queue worker threads). */
static _Thread_local struct {
    int set;
    char name[160], shape[48];
    int nodes;
    uint64_t bytes;
} desc;

int vt_tracing(void) { return atomic_load_explicit(&tracing, memory_order_relaxed); }

void vt_command_describe(const char *name, const char *shape, int nodes, uint64_t bytes) {
    if (!vt_tracing()) return;
    desc.set = 1;
    snprintf(desc.name, sizeof desc.name, "%s", name ? name : "");
    snprintf(desc.shape, sizeof desc.shape, "%s", shape ? shape : "");
    desc.nodes = nodes;
    desc.bytes = bytes;
}

void vt_shape_string(const vt_tensor *t, char *buf, size_t len) {
    size_t at = 0;
    buf[0] = 0;
    for (int d = 0; d < t->ndim && at + 1 < len; d++) {
        int k = snprintf(buf + at, len - at, d ? "x%lld" : "%lld", (long long)t->sizes[d]);
        if (k < 0) break;
        at += (size_t)k;
    }
    if (t->ndim == 0) snprintf(buf, len, "scalar");
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t vt_trace_begin(void) {
    desc.set = 0;
    return now_ns();
}

void vt_trace_record(int dev, int queue, const char *op_name, int64_t start_ns) {
    const int64_t end_ns = now_ns();
    vt_trace_event e;
    memset(&e, 0, sizeof e);
    snprintf(e.name, sizeof e.name, "%s", desc.set ? desc.name : op_name ? op_name : "op");
    if (desc.set) snprintf(e.shape, sizeof e.shape, "%s", desc.shape);
    e.dev = dev;
    e.queue = queue;
    e.nodes = desc.set ? desc.nodes : 1;
    e.bytes = desc.set ? desc.bytes : 0;
    e.start_ns = start_ns;
    e.end_ns = end_ns;
    desc.set = 0;
    pthread_mutex_lock(&trace_mu);
    if (nevents == cap) {
        int64_t nc = cap ? cap * 2 : 4096;
        vt_trace_event *ne = realloc(events, sizeof *ne * (size_t)nc);
        if (ne) {
            events = ne;
            cap = nc;
        }
    }
    if (nevents < cap) events[nevents++] = e;
    else lost = 1;
    pthread_mutex_unlock(&trace_mu);
}

void vt_trace_start(void) {
    pthread_mutex_lock(&trace_mu);
    free(events);
    events = NULL;
    nevents = cap = 0;
    lost = 0;
    atomic_store(&tracing, 1);
    pthread_mutex_unlock(&trace_mu);
}

int64_t vt_trace_stop(vt_trace_event **out) {
    pthread_mutex_lock(&trace_mu);
    atomic_store(&tracing, 0);
    int64_t n = lost ? -1 : nevents;
    if (out && !lost) {
        *out = events;
        events = NULL;
    } else {
        if (out) *out = NULL;
        free(events);
        events = NULL;
    }
    nevents = cap = 0;
    lost = 0;
    pthread_mutex_unlock(&trace_mu);
    return n;
}
