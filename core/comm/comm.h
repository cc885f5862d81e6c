/* Room core/comm/: the communicator every runtime fills (this file; the slots:
 * comm_impl.h), the one-rank communicator (comm_single.h), sums in rank order (reduce.h).
 * It may use: core/ (ops), base/, trace/.
 *
 * The communicator: a process group and its collectives, shaped like NCCL.
 *
 * Buffers are backend memory (core/ops/ops.h) and every call carries a stream, so
 * the NCCL backend maps each call onto one NCCL call; the simulator runs each
 * call when every party has posted it. Counts are in elements of `dtype`. Each call is made through
 * a macro that records its call site (file:line), and every completed call
 * leaves a trace event (core/trace/trace.h).
 *
 * Matching is NCCL's: the k-th collective a rank issues on a group is one
 * collective with the k-th of every other member; they must agree on op,
 * count, dtype, root and reduce op. Point-to-point calls match in order per
 * (sender, receiver) pair.
 *
 * Ordering (the contract of core/ops/ops.h, as NCCL keeps it): a call is enqueued
 * on `stream` in order with the compute ops there. It reads its send buffer
 * after the work enqueued before it on that stream, and its receive buffer
 * holds the data for the work enqueued after it on that stream; the host sees
 * the data only through usp_buffer_download (or a copy and a synchronise).
 * Host arrays (all_to_all_v's counts and offsets) are read before the call
 * returns. A call may return before its peers have called (NCCL) or after the
 * data has arrived (the simulator): code must be right under both. So nothing
 * here blocks the host until a peer arrives, a barrier orders streams and not
 * hosts, and every member must issue its matching calls in the same order on
 * every path, or the real backends hang where the simulator reports a
 * deadlock. To overlap communication with compute, issue it on a stream of its
 * own (usp_stream_create) and join the streams with events: the buffer a call
 * receives into must not be read, nor the buffer it sends be overwritten, by
 * another stream until an event recorded after the call is waited for
 * (core/parallel/ring.c passes K/V blocks this way). */
#ifndef USP_COMM_H
#define USP_COMM_H

#include <stddef.h>

#include "core/trace/comm_kind.h"
#include "core/ops/dtype.h"
#include "core/ops/ops.h"
#include "core/base/status.h"

typedef struct usp_comm usp_comm_t;

typedef enum usp_reduce_op { USP_REDUCE_SUM, USP_REDUCE_MAX } usp_reduce_op;

typedef struct usp_call_site {
    const char *file;
    int line;
} usp_call_site;

#define USP_HERE ((usp_call_site){__FILE__, __LINE__})

/* NCCL_SPLIT_NOCOLOR: the caller takes part in the split but gets no group. */
#define USP_SPLIT_NOCOLOR (-1)

/* This rank's index in the group, the group's size, its name ("ulysses[1]"). */
int usp_comm_rank(const usp_comm_t *c);
int usp_comm_size(const usp_comm_t *c);
const char *usp_comm_name(const usp_comm_t *c);

/* World rank of the group's member `rank`. */
int usp_comm_world_rank(const usp_comm_t *c, int rank);

/* Name of a reduce op ("sum", "max"); ops are named by usp_comm_kind_name (core/trace/comm_kind.h). */
const char *usp_reduce_op_name(usp_reduce_op op);

/* Frees this rank's handle of the group (local, not collective; NULL is a no-op). */
void usp_comm_destroy(usp_comm_t *c);

/* Each rank sends `count` elements to every member: block j of `send` goes to
 * rank j and arrives as block i (the sender's index) of `recv`. Buffers hold
 * size * count elements and must not overlap. */
#define usp_comm_all_to_all(c, send, recv, count, dtype, stream) \
    usp_comm_all_to_all_at(c, send, recv, count, dtype, stream, USP_HERE)

/* All-to-all with per-peer counts and offsets (elements, host arrays of `size`):
 * send_counts[j] elements at send + send_offsets[j] go to rank j, which
 * receives them at recv + its recv_offsets[i] and must expect recv_counts[i]
 * == send_counts[j] of the sender. Zero counts are allowed. */
#define usp_comm_all_to_all_v(c, send, send_counts, send_offsets, recv, recv_counts, recv_offsets, \
                              dtype, stream)                                                     \
    usp_comm_all_to_all_v_at(c, send, send_counts, send_offsets, recv, recv_counts, recv_offsets,  \
                             dtype, stream, USP_HERE)

/* recv (size * count) is the concatenation of every rank's send (count), in rank order. */
#define usp_comm_all_gather(c, send, recv, count, dtype, stream) \
    usp_comm_all_gather_at(c, send, recv, count, dtype, stream, USP_HERE)

/* Reduces send (size * count) over ranks; rank i receives block i (count) in recv. */
#define usp_comm_reduce_scatter(c, send, recv, count, dtype, op, stream) \
    usp_comm_reduce_scatter_at(c, send, recv, count, dtype, op, stream, USP_HERE)

/* recv = reduction of every rank's send (count); send == recv (in place) is allowed.
 * Reductions are over f32, f64, i64 and bf16 (widened to f32 per step), in rank order, so every rank gets the same bits. */
#define usp_comm_all_reduce(c, send, recv, count, dtype, op, stream) \
    usp_comm_all_reduce_at(c, send, recv, count, dtype, op, stream, USP_HERE)

/* recv on every rank = send of `root` (send is read on the root only; in place allowed). */
#define usp_comm_broadcast(c, send, recv, count, dtype, root, stream) \
    usp_comm_broadcast_at(c, send, recv, count, dtype, root, stream, USP_HERE)

/* Point to point: a send to `peer` matches that peer's next receive from this rank. A send
 * whose receive is never posted hangs a real backend (the simulator reports the deadlock). */
#define usp_comm_send(c, send, count, dtype, peer, stream) \
    usp_comm_send_at(c, send, count, dtype, peer, stream, USP_HERE)
#define usp_comm_recv(c, recv, count, dtype, peer, stream) \
    usp_comm_recv_at(c, recv, count, dtype, peer, stream, USP_HERE)

/* Sends to `dst` and receives from `src` at once (a ring step: no deadlock
 * when every rank sends to its successor and receives from its predecessor). */
#define usp_comm_sendrecv(c, send, send_count, dst, recv, recv_count, src, dtype, stream) \
    usp_comm_sendrecv_at(c, send, send_count, dst, recv, recv_count, src, dtype, stream, USP_HERE)

/* Work enqueued on `stream` after the barrier runs after every member has reached it (on
 * NCCL a one-element all-reduce): it orders streams, it does not make the host wait. */
#define usp_comm_barrier(c, stream) usp_comm_barrier_at(c, stream, USP_HERE)

/* NCCL's ncclCommSplit: a collective over `c`; members with the same color form
 * a new group, ordered by key and then by rank in `c`; color USP_SPLIT_NOCOLOR
 * gives *out = NULL. `name` names the new group in reports and traces. */
#define usp_comm_split(c, color, key, name, out) usp_comm_split_at(c, color, key, name, out, USP_HERE)

usp_status usp_comm_all_to_all_at(usp_comm_t *c, const void *send, void *recv, size_t count,
                                  usp_dtype dtype, usp_stream_t *stream, usp_call_site site);
usp_status usp_comm_all_to_all_v_at(usp_comm_t *c, const void *send, const size_t *send_counts,
                                    const size_t *send_offsets, void *recv, const size_t *recv_counts,
                                    const size_t *recv_offsets, usp_dtype dtype, usp_stream_t *stream,
                                    usp_call_site site);
usp_status usp_comm_all_gather_at(usp_comm_t *c, const void *send, void *recv, size_t count,
                                  usp_dtype dtype, usp_stream_t *stream, usp_call_site site);
usp_status usp_comm_reduce_scatter_at(usp_comm_t *c, const void *send, void *recv, size_t count,
                                      usp_dtype dtype, usp_reduce_op op, usp_stream_t *stream,
                                      usp_call_site site);
usp_status usp_comm_all_reduce_at(usp_comm_t *c, const void *send, void *recv, size_t count,
                                  usp_dtype dtype, usp_reduce_op op, usp_stream_t *stream,
                                  usp_call_site site);
usp_status usp_comm_broadcast_at(usp_comm_t *c, const void *send, void *recv, size_t count,
                                 usp_dtype dtype, int root, usp_stream_t *stream, usp_call_site site);
usp_status usp_comm_send_at(usp_comm_t *c, const void *send, size_t count, usp_dtype dtype, int peer,
                            usp_stream_t *stream, usp_call_site site);
usp_status usp_comm_recv_at(usp_comm_t *c, void *recv, size_t count, usp_dtype dtype, int peer,
                            usp_stream_t *stream, usp_call_site site);
usp_status usp_comm_sendrecv_at(usp_comm_t *c, const void *send, size_t send_count, int dst, void *recv,
                                size_t recv_count, int src, usp_dtype dtype, usp_stream_t *stream,
                                usp_call_site site);
usp_status usp_comm_barrier_at(usp_comm_t *c, usp_stream_t *stream, usp_call_site site);
usp_status usp_comm_split_at(usp_comm_t *c, int color, int key, const char *name, usp_comm_t **out,
                             usp_call_site site);

#endif
