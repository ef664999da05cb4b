/* mxu_cache.c — the packed operands' memory kept across products: the
 * workspace block and the kept B panels of a named B (vt_version). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "mxu_local.h"

/* ------------------------------------------------------------ workspace
 * Packed operands live in one block reused across calls (page faults on a
 * fresh 50 MB block cost as much as the GEMM); a concurrent call that finds
 * it busy allocates its own. */

#define WS_CACHE_MAX ((size_t)1 << 30)
static pthread_mutex_t ws_mu = PTHREAD_MUTEX_INITIALIZER;
static void *ws_block;
static size_t ws_size;

void *vt_mxu_ws_acquire(size_t bytes, int *cached) {
    if (vt_exceeds_host_memory((double)bytes)) return NULL;
    bytes = (bytes + 63) & ~(size_t)63;
    if (bytes <= WS_CACHE_MAX && pthread_mutex_trylock(&ws_mu) == 0) {
        if (ws_size < bytes) {
            free(ws_block);
            ws_block = aligned_alloc(64, bytes);
            ws_size = ws_block ? bytes : 0;
        }
        if (ws_block) {
            *cached = 1;
            return ws_block;
        }
        pthread_mutex_unlock(&ws_mu);
        return NULL;
    }
    *cached = 0;
    return aligned_alloc(64, bytes);
}

void vt_mxu_ws_release(void *p, int cached) {
    if (cached) pthread_mutex_unlock(&ws_mu);
    else free(p);
}

/* ------------------------------------------------------------ kept B panels
 * A product with one row tile (M <= 128: a recurrent step, a decoder's
 * tokens, a small batch through a Linear) spends more time packing its B
 * (the weight: convert, split, interleave) than multiplying. When the op
 * names B's contents (vt_version: its allocation and the writes announced
 * to it, read when the op was prepared), the packed panels are kept and the
 * next product with the same contents, view, precision and engine reuses
 * them: the same bits, packed once. Panels are kept on the second sighting
 * of a version (a one-off operand is packed into the workspace as before)
 * and the least recently used go first, up to KEPT_BYTES; a newer version
 * of the same view replaces the older at once. */

#define KEPT_MAX 16
#define KEPT_BYTES ((size_t)64 << 20)

static pthread_mutex_t kept_mu = PTHREAD_MUTEX_INITIALIZER;
static vt_mxu_kept_panels kept[KEPT_MAX];
static size_t kept_bytes;
static uint64_t kept_clock;
static atomic_uint_fast64_t kept_hits;

/* The same view of the same allocation (any version). */
static int same_view(const vt_mxu_kept_key *x, const vt_mxu_kept_key *y) {
    return x->v.gen == y->v.gen && x->data == y->data && x->offset == y->offset && x->K == y->K && x->N == y->N &&
           x->s0 == y->s0 && x->s1 == y->s1 && x->dtype == y->dtype && x->prec == y->prec && x->e == y->e;
}

static int same_key(const vt_mxu_kept_key *x, const vt_mxu_kept_key *y) {
    return same_view(x, y) && x->v.writes == y->v.writes;
}

static void drop_slot(vt_mxu_kept_panels *k) {
    kept_bytes -= k->bytes;
    free(k->b);
    memset(k, 0, sizeof *k);
}

/* The least recently used slot nobody holds, among those with panels when
 * panels_only (NULL: none). */
static vt_mxu_kept_panels *least_used(int panels_only) {
    vt_mxu_kept_panels *best = NULL;
    for (int i = 0; i < KEPT_MAX; i++) {
        vt_mxu_kept_panels *k = &kept[i];
        if (k->refs == 0 && (k->b || !panels_only) && (!best || k->used < best->used)) best = k;
    }
    return best;
}

/* A slot for a new key: an empty one, else the least recently used that
 * nobody holds, emptied (NULL: all held). */
static vt_mxu_kept_panels *free_slot(void) {
    for (int i = 0; i < KEPT_MAX; i++)
        if (kept[i].key.v.gen == 0) return &kept[i];
    vt_mxu_kept_panels *k = least_used(0);
    if (k) drop_slot(k);
    return k;
}

/* Kept panels for key, held (*hit: already packed; else the caller packs
 * into them and they count from then on); NULL: pack into the workspace. */
vt_mxu_kept_panels *vt_mxu_kept_acquire(const vt_mxu_kept_key *key, size_t bytes, int *hit) {
    *hit = 0;
    if (key->v.gen == 0 || bytes > KEPT_BYTES / 4) return NULL;
    pthread_mutex_lock(&kept_mu);
    vt_mxu_kept_panels *found = NULL;
    for (int i = 0; i < KEPT_MAX; i++) {
        vt_mxu_kept_panels *k = &kept[i];
        if (k->key.v.gen == 0) continue;
        if (same_key(&k->key, key)) found = k;
        else if (k->refs == 0 && same_view(&k->key, key)) drop_slot(k); /* an older version */
    }
    vt_mxu_kept_panels *r = NULL;
    if (found && found->ready) {
        found->refs++;
        *hit = 1;
        atomic_fetch_add_explicit(&kept_hits, 1, memory_order_relaxed);
        r = found;
    } else if (found && !found->b) { /* seen before: keep it from now on */
        for (vt_mxu_kept_panels *lru; kept_bytes + bytes > KEPT_BYTES && (lru = least_used(1));) drop_slot(lru);
        uint16_t *b = kept_bytes + bytes <= KEPT_BYTES && !vt_exceeds_host_memory((double)bytes)
                          ? aligned_alloc(64, (bytes + 63) & ~(size_t)63)
                          : NULL;
        if (b) {
            found->b = b;
            found->bytes = bytes;
            kept_bytes += bytes;
            found->refs = 1; /* not a hit until packed: the caller packs, holding it */
            r = found;
        }
    } else if (!found) { /* first sighting: remember the key only */
        vt_mxu_kept_panels *k = free_slot();
        if (k) k->key = *key;
        found = k;
    }
    if (found) found->used = ++kept_clock;
    pthread_mutex_unlock(&kept_mu);
    return r;
}

void vt_mxu_kept_release(vt_mxu_kept_panels *k, int ok) {
    if (!k) return;
    pthread_mutex_lock(&kept_mu);
    k->refs--;
    if (ok) k->ready = 1;
    else if (!k->ready && k->refs == 0) drop_slot(k); /* packing failed: the panels hold nothing */
    pthread_mutex_unlock(&kept_mu);
}

uint64_t vt_mxu_kept_hits(void) { return atomic_load(&kept_hits); }

void vt_mxu_kept_clear(void) {
    pthread_mutex_lock(&kept_mu);
    for (int i = 0; i < KEPT_MAX; i++)
        if (kept[i].refs == 0) drop_slot(&kept[i]);
    pthread_mutex_unlock(&kept_mu);
}
