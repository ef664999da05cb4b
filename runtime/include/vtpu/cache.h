/* cache.h — the compile cache: compiled artifacts (opaque bytes) by key, in
 * three tiers.
 *   tier 1  this process's memory;
 *   tier 2  a directory per host, shared by its processes and restarts;
 *   tier 3  a root shared across hosts (a shared filesystem path).
 * A lookup tries them in order; a tier-3 hit is copied into tier 2; a put
 * writes every tier. An entry is one file, <dir>/<key>.bin: a header (magic,
 * format version, key length, payload length, compile time), the key, the
 * payload, and a 64-bit checksum over all of it. Files are written to a
 * temporary name and renamed into place, so a reader sees a whole entry or
 * none; an entry that fails its checks (truncated, corrupted, another key's)
 * is deleted and reported as a miss, never returned. A tier that cannot be
 * written (read-only, full, missing) is still read; the put reports the
 * first failure once, then skips that tier. vt_cache_lock serialises the
 * compile of one key across processes (flock on <dir>/<key>.lock), so two
 * processes missing the same key compile it once.
 * Keys are 1..VT_CACHE_KEY_MAX characters of [0-9A-Za-z_-]. */
#ifndef VTPU_CACHE_H
#define VTPU_CACHE_H

#include "vtpu.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VT_CACHE_KEY_MAX 128

/* Sets the tier-2 and tier-3 directories (NULL or "": that tier is off);
 * created on first write. Keeps tier 1 and the statistics. */
vt_status vt_cache_configure(const char *tier2_dir, const char *tier3_dir);

/* Looks key up. Hit: *data (free with vt_cache_release), *len, *tier (1..3).
 * Miss: *data NULL, *tier 0. Returns VT_ERR_INVALID_ARGUMENT on a bad key;
 * every other problem (unreadable or bad files) is a miss. */
vt_status vt_cache_get(const char *key, void **data, size_t *len, int *tier);
void vt_cache_release(void *data);

/* Stores data under key in every tier; compile_us is what producing it
 * cost, kept with the entry. Returns VT_OK when every tier took it, or
 * VT_ERR_UNSUPPORTED (message: the directory and why) the first time a
 * tier fails to take it; that tier is not written again until the next
 * vt_cache_configure. Tier 1 always takes it. */
vt_status vt_cache_put(const char *key, const void *data, size_t len, uint64_t compile_us);

/* Takes the tier-2 lock of key, waiting up to timeout_ms (< 0: as long as
 * it takes) for another process holding it: *handle is what
 * vt_cache_unlock takes (-1 when tier 2 is off or its directory cannot hold
 * a lock file: then nothing is locked). VT_ERR_TIMEOUT (handle -1) when
 * the wait ran out; the caller may wait again or go on unlocked. */
vt_status vt_cache_lock(const char *key, int64_t timeout_ms, int *handle);
void vt_cache_unlock(int handle);

/* Empties tier 1 and resets the statistics; with files, also deletes tier
 * 2's entries (tier 3, shared with other hosts, is left alone, and so are
 * lock files another process may hold). */
vt_status vt_cache_clear(int files);

typedef struct vt_cache_stats {
    uint64_t requests;      /* vt_cache_get calls */
    uint64_t hits;          /* of which hits, in any tier */
    uint64_t tier_hits[4];  /* [1..3]: hits per tier */
    uint64_t discarded;     /* entries that failed their checks and were deleted */
    uint64_t write_errors;  /* puts a tier refused */
    uint64_t entries;       /* entries this process has stored or read */
} vt_cache_stats;
void vt_cache_get_stats(vt_cache_stats *out);

typedef struct vt_cache_entry_stats {
    char key[VT_CACHE_KEY_MAX + 1];
    uint64_t read_count;    /* hits on it in this process */
    uint64_t compile_us;    /* what compiling it cost, when it was stored */
    int64_t last_read_us;   /* wall clock (µs since the epoch) of the last hit; 0: never */
} vt_cache_entry_stats;
/* Statistics of this process's i-th entry (0 <= i < entries). */
vt_status vt_cache_entry_at(size_t i, vt_cache_entry_stats *out);

/* Generated code for the fusion groups of graph programs
 * (runtime/src/graph/codegen.c): each group's C function is compiled once
 * by the system C compiler and its shared object kept in the cache above
 * (keys "cg..."). */
typedef struct vt_codegen_stats {
    uint64_t compiles;   /* objects this process compiled (the C compiler ran) */
    uint64_t loads;      /* objects this process loaded from the cache */
    uint64_t failures;   /* groups whose compile failed or could not run: they run as plans */
    uint64_t runs;       /* group commands that ran generated code */
    uint64_t compile_us; /* what the compiles took */
} vt_codegen_stats;
void vt_codegen_get_stats(vt_codegen_stats *out);
/* The C compiler for generated code: a name looked up in PATH or a path;
 * "none" (or NULL) turns generated code off (groups run as plans). The
 * default is $VTPU_CC, else "cc". VT_ERR_INVALID_ARGUMENT when not found
 * (generated code is then off). */
vt_status vt_codegen_set_compiler(const char *cc);

#ifdef __cplusplus
}
#endif
#endif
