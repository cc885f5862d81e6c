/* The communicator interface, for backend implementers only (users see core/comm/comm.h).
 *
 * Every call becomes one descriptor, usp_comm_op, and goes through one slot,
 * `issue`, the way NCCL itself funnels every collective through one ncclInfo
 * and ncclEnqueueCheck: matching, tracing and fault injection then treat all
 * ops alike, and the NCCL backend switches on the kind. */
#ifndef USP_COMM_IMPL_H
#define USP_COMM_IMPL_H

#include <stdint.h>

#include "core/comm/comm.h"
#include "core/trace/trace.h"

#define USP_COMM_API_VERSION 1
#define USP_COMM_NAME_MAX 64

/* One communication call. Counts are elements; see core/comm/comm.h for each kind. */
typedef struct usp_comm_op {
    usp_comm_kind kind;
    usp_dtype dtype;
    usp_reduce_op reduce;      /* all_reduce, reduce_scatter */
    const void *send;
    void *recv;
    size_t count;              /* per peer (all_to_all), per rank (all_gather, reduce_scatter),
                                  total (all_reduce, broadcast), sent (send, sendrecv), received (recv) */
    size_t recv_count;         /* sendrecv: elements received */
    const size_t *send_counts, *send_offsets, *recv_counts, *recv_offsets; /* all_to_all_v */
    int root;                  /* broadcast */
    int peer;                  /* send: destination; recv: source; sendrecv: destination */
    int recv_peer;             /* sendrecv: source */
    int color, key;            /* split */
    const char *name;          /* split: the new group's name */
    usp_comm_t **split_out;    /* split: the new handle (NULL for USP_SPLIT_NOCOLOR) */
    usp_stream_t *stream;
    usp_call_site site;
    uint64_t seq;              /* set by the wrapper: 1-based index of the call on this handle */

    /* Filled by the backend. */
    usp_comm_t *issued_on;     /* the group actually used (fault injection may change it) */
    int not_issued;            /* 1: the call was dropped (fault injection), no trace event */
    double t_post, t_start, t_end; /* when the rank called, when all parties were there, when done */
} usp_comm_op;

typedef struct usp_comm_i {
    int api_version; /* USP_COMM_API_VERSION */
    const char *name;
    /* Enqueues `op` on op->stream, in the order of core/comm/comm.h. The simulator
     * returns when the data has arrived, or with USP_ERR_COLLECTIVE /
     * USP_ERR_RANK_FAILED when the run was aborted; NCCL once it is enqueued. */
    usp_status (*issue)(void *ctx, usp_comm_op *op);
    /* Frees the context of one rank's handle. Local, not collective. */
    void (*destroy)(void *ctx);
} usp_comm_i;

struct usp_comm {
    const usp_comm_i *iface;
    void *context;
    int rank, size;
    int *world_ranks;                 /* [size] */
    int owns_world_ranks;             /* 0: borrowed from a group that outlives the handle */
    char name[USP_COMM_NAME_MAX];
    usp_trace_t *trace;               /* NULL: no trace */
    int trace_group;                  /* the name's index in the trace */
    uint64_t n_calls;
};

/* Makes a handle for member `rank` of a group of `size` (world_ranks is copied). */
usp_status usp_comm_create(const usp_comm_i *iface, void *ctx, int rank, int size, const int *world_ranks,
                           const char *name, usp_trace_t *trace, usp_comm_t **out);

/* usp_comm_create that borrows world_ranks, which must outlive the handle: a
 * simulated world of W ranks holds W handles of its world group, and a copy
 * in each is W^2 ints (64 MB at W = 4096) of one array the group already has. */
usp_status usp_comm_create_borrowed(const usp_comm_i *iface, void *ctx, int rank, int size, const int *world_ranks,
                                    const char *name, usp_trace_t *trace, usp_comm_t **out);

/* Bytes member `rank` sends to each member (bytes_to[size]) for `op` under NCCL's
 * algorithms: direct for all-to-all and point to point, ring for all_gather,
 * reduce_scatter, all_reduce (2(n-1)/n of the data) and broadcast (a chain from the root). */
void usp_comm_op_traffic(const usp_comm_op *op, int rank, int size, uint64_t *bytes_to);

/* usp_comm_op_traffic as a list, in ascending peer order: the peers member `rank`
 * sends a non-zero number of bytes to (peers[k], bytes[k]); returns how many.
 * Room for `size` entries is enough; only the all-to-alls fill more than one,
 * so a ring collective over n members is n entries, not an n x n matrix. */
int usp_comm_op_peers(const usp_comm_op *op, int rank, int size, int *peers, uint64_t *bytes);

#endif
