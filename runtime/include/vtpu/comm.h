/* comm.h — collectives between the processes of one host through a shared
 * memory segment (the tpu_dist backend's local transport). Device memory is
 * host memory, so a collective is a few copy and reduce passes over the
 * segment. Every rank of the group calls the same functions in the same
 * order; each call returns when this rank's part is done. A rank that does
 * not arrive within the timeout, or that exited, fails the call on the
 * others naming it, and the communicator is then broken: later calls fail
 * at once. Not thread-safe: one thread per communicator (a device queue's
 * worker). */
#ifndef VTPU_COMM_H
#define VTPU_COMM_H

#include "vtpu.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VT_COMM_MAX_RANKS 64
#define VT_COMM_DESC 8 /* int64 fields each rank publishes in vt_comm_exchange */

typedef struct vt_comm vt_comm;
typedef enum vt_red_op { VT_RED_SUM = 0, VT_RED_PROD, VT_RED_MIN, VT_RED_MAX } vt_red_op;

/* Rank 0 creates the segment `name` (a POSIX shm name, "/..."), the others
 * wait for it (at most timeout_ms) and map it. slot_bytes: the chunk each
 * rank stages at a time (0: 2 MiB). */
vt_status vt_comm_open(const char *name, int rank, int size, size_t slot_bytes, int64_t timeout_ms, vt_comm **out);
/* Remove the name once every rank has opened it (the mapping stays). */
void vt_comm_unlink(const char *name);
void vt_comm_close(vt_comm *c);
void vt_comm_set_timeout(vt_comm *c, int64_t timeout_ms);

/* Each rank's VT_COMM_DESC values: all[r * VT_COMM_DESC + i]. */
vt_status vt_comm_exchange(vt_comm *c, const int64_t *mine, int64_t *all);
vt_status vt_comm_barrier(vt_comm *c);
/* buf (count elements of dt, dense) = the op over every rank's buf. The
 * result is the same bits on every rank: element i is reduced once, in rank
 * order, by one rank (bf16 and f16 through float). */
vt_status vt_comm_allreduce(vt_comm *c, void *buf, size_t count, vt_dtype dt, vt_red_op op);
/* buf (bytes) = root's buf. */
vt_status vt_comm_broadcast(vt_comm *c, void *buf, size_t bytes, int root);
/* out (size * bytes) = every rank's in, in rank order. */
vt_status vt_comm_allgather(vt_comm *c, void *out, const void *in, size_t bytes);
/* out (count elements) = the op over every rank's in[rank * count, +count);
 * in holds size * count elements. */
vt_status vt_comm_reduce_scatter(vt_comm *c, void *out, const void *in, size_t count, vt_dtype dt, vt_red_op op);

/* dst[i] = src[0][i] op src[1][i] op ... (n >= 1), left to right: the
 * reduction every collective above applies. */
vt_status vt_reduce_n(void *dst, const void *const *src, int n, size_t count, vt_dtype dt, vt_red_op op);

#ifdef __cplusplus
}
#endif
#endif /* VTPU_COMM_H */
