/* The communicator over MPI (see mpi_comm.h). */
#include "runtimes/mpi/mpi_comm.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm/reduce.h"

#define P2P_TAG 7
/* Below this many bytes in all, an all_reduce gathers every operand and each
 * rank sums them all: one call instead of two, the same bits. */
#define SMALL_ALL_REDUCE_BYTES 65536

typedef struct mpi_handle {
    mpi_comm_process *process;
    MPI_Comm comm;
    usp_comm_t *self;
    mpi_call_counts counts; /* the next call's index on the group is counts.issued + 1 */
} mpi_handle;

static const usp_comm_i mpi_comm_iface;

static usp_status mpi_failed(const usp_comm_t *c, const usp_comm_op *op, const char *what, int code)
{
    char text[MPI_MAX_ERROR_STRING];
    /* exit 4, as an NCCL error: the rank cannot go on, and its peers may be inside the call with it */
    return usp_error(USP_ERR_RANK_FAILED, "%s on %s at %s:%d: %s failed: %s", usp_comm_kind_name(op->kind), c->name,
                     op->site.file, op->site.line, what, mpi_error_text(code, text, sizeof text));
}

/* Calls MPI function `fn` with the arguments that follow; a failure returns its message. */
#define MPI_TRY(c, op, fn, ...)                               \
    do {                                                      \
        int rc_ = fn(__VA_ARGS__);                            \
        if (rc_ != MPI_SUCCESS)                               \
            return mpi_failed((c), (op), #fn, rc_);           \
    } while (0)

/* Elements move as unsigned words of their size: the data is only copied
 * (reductions are ours), and counts stay in elements, up to INT_MAX of them. */
static MPI_Datatype element_type(usp_dtype dtype)
{
    switch (usp_dtype_size(dtype)) {
    case 2: return MPI_UINT16_T;
    case 4: return MPI_UINT32_T;
    case 8: return MPI_UINT64_T;
    default: return MPI_BYTE;
    }
}

static usp_status to_int(const usp_comm_t *c, const usp_comm_op *op, size_t n, int *out)
{
    if (n > INT_MAX)
        return usp_error(USP_ERR_RUNTIME, "%s on %s at %s:%d: %zu elements in one piece; MPI counts stop at %d",
                         usp_comm_kind_name(op->kind), c->name, op->site.file, op->site.line, n, INT_MAX);
    *out = (int)n;
    return USP_OK;
}

static usp_status all_to_all_v(const usp_comm_t *c, MPI_Comm comm, const usp_comm_op *op)
{
    int n = c->size, *a;
    USP_CHECK(usp_malloc((void **)&a, 4 * (size_t)n * sizeof *a, "all_to_all_v counts"));
    usp_status s = USP_OK;
    for (int j = 0; j < n && s == USP_OK; j++) {
        s = to_int(c, op, op->send_counts[j], &a[j]);
        if (s == USP_OK)
            s = to_int(c, op, op->send_offsets[j], &a[n + j]);
        if (s == USP_OK)
            s = to_int(c, op, op->recv_counts[j], &a[2 * n + j]);
        if (s == USP_OK)
            s = to_int(c, op, op->recv_offsets[j], &a[3 * n + j]);
    }
    MPI_Datatype t = element_type(op->dtype);
    int rc = s == USP_OK ? MPI_Alltoallv(op->send, a, a + n, t, op->recv, a + 2 * n, a + 3 * n, t, comm)
                         : MPI_SUCCESS;
    free(a);
    USP_CHECK(s);
    return rc == MPI_SUCCESS ? USP_OK : mpi_failed(c, op, "MPI_Alltoallv", rc);
}

/* out = blocks[0] op blocks[1] op ... op blocks[n-1] (each `elems` long, one a
 * member, in rank order): the simulator's order, so the same bits. */
static void sum_in_rank_order(void *out, const char *blocks, int n, size_t elems, const usp_comm_op *op)
{
    size_t bytes = elems * usp_dtype_size(op->dtype);
    memcpy(out, blocks, bytes);
    for (int j = 1; j < n; j++)
        usp_reduce_into(out, blocks + (size_t)j * bytes, elems, op->dtype, op->reduce);
}

/* reduce_scatter: block i of every member's send comes to member i, which
 * sums them in rank order (the simulator's order: member 0's, then 1's, ...). */
static usp_status reduce_scatter(const usp_comm_t *c, MPI_Comm comm, const usp_comm_op *op)
{
    size_t es = usp_dtype_size(op->dtype), block = op->count * es;
    int count = 0;
    USP_CHECK(to_int(c, op, op->count, &count));
    char *blocks;
    USP_CHECK(usp_malloc((void **)&blocks, block * (size_t)c->size + 1, "a reduce_scatter's operands"));
    MPI_Datatype t = element_type(op->dtype);
    int rc = MPI_Alltoall(op->send, count, t, blocks, count, t, comm);
    if (rc == MPI_SUCCESS)
        sum_in_rank_order(op->recv, blocks, c->size, op->count, op);
    free(blocks);
    return rc == MPI_SUCCESS ? USP_OK : mpi_failed(c, op, "MPI_Alltoall", rc);
}

/* all_reduce: member j owns elements [j*count/n, (j+1)*count/n); it receives
 * that piece of every operand, sums them in rank order, and an all-gather
 * hands every member the pieces. Each element is summed in the simulator's
 * order, so every rank, and the simulator, get the same bits. */
static usp_status all_reduce_pieces(const usp_comm_t *c, MPI_Comm comm, const usp_comm_op *op)
{
    int n = c->size, me = c->rank, *a;
    size_t es = usp_dtype_size(op->dtype);
    USP_CHECK(usp_malloc((void **)&a, 4 * (size_t)n * sizeof *a, "an all_reduce's pieces"));
    int *piece = a, *at = a + n, *mine = a + 2 * n, *mine_at = a + 3 * n;
    usp_status s = USP_OK;
    for (int j = 0; j < n && s == USP_OK; j++) {
        size_t lo = op->count * (size_t)j / (size_t)n, hi = op->count * (size_t)(j + 1) / (size_t)n;
        s = to_int(c, op, lo, &at[j]);
        if (s == USP_OK)
            s = to_int(c, op, hi - lo, &piece[j]);
    }
    char *operands = NULL;
    if (s == USP_OK)
        s = usp_malloc((void **)&operands, (size_t)piece[me] * (size_t)n * es + 1, "an all_reduce's operands");
    for (int j = 0; j < n && s == USP_OK; j++)
        mine[j] = piece[me], mine_at[j] = j * piece[me];
    MPI_Datatype t = element_type(op->dtype);
    int rc = MPI_SUCCESS;
    if (s == USP_OK)
        rc = MPI_Alltoallv(op->send, piece, at, t, operands, mine, mine_at, t, comm);
    if (s == USP_OK && rc == MPI_SUCCESS) {
        /* the send buffer is read: in place is safe */
        sum_in_rank_order((char *)op->recv + (size_t)at[me] * es, operands, n, (size_t)piece[me], op);
        rc = MPI_Allgatherv(MPI_IN_PLACE, 0, t, op->recv, piece, at, t, comm);
    }
    free(operands);
    free(a);
    USP_CHECK(s);
    return rc == MPI_SUCCESS ? USP_OK : mpi_failed(c, op, "the all_reduce's MPI_Alltoallv / MPI_Allgatherv", rc);
}

static usp_status all_reduce(const usp_comm_t *c, MPI_Comm comm, const usp_comm_op *op)
{
    size_t es = usp_dtype_size(op->dtype), bytes = op->count * es;
    if (bytes * (size_t)c->size > SMALL_ALL_REDUCE_BYTES)
        return all_reduce_pieces(c, comm, op);
    int count = 0;
    USP_CHECK(to_int(c, op, op->count, &count));
    char *all;
    USP_CHECK(usp_malloc((void **)&all, bytes * (size_t)c->size + 1, "an all_reduce's operands"));
    MPI_Datatype t = element_type(op->dtype);
    int rc = MPI_Allgather(op->send, count, t, all, count, t, comm);
    if (rc == MPI_SUCCESS)
        sum_in_rank_order(op->recv, all, c->size, op->count, op);
    free(all);
    return rc == MPI_SUCCESS ? USP_OK : mpi_failed(c, op, "MPI_Allgather", rc);
}

static usp_status recv_checked(const usp_comm_t *c, const usp_comm_op *op, const MPI_Status *st, int expected)
{
    int got = 0;
    MPI_Get_count(st, element_type(op->dtype), &got);
    if (got != expected)
        return usp_error(USP_ERR_COLLECTIVE, "%s on %s at %s:%d: received %d elements from member %d, expected %d "
                         "(the sender's count differs)", usp_comm_kind_name(op->kind), c->name, op->site.file,
                         op->site.line, got, op->kind == USP_OP_RECV ? op->peer : op->recv_peer, expected);
    return USP_OK;
}

static usp_status split(mpi_handle *h, const usp_comm_op *op)
{
    const usp_comm_t *c = h->self;
    MPI_Comm child;
    int rank = 0, size = 0, *world;
    usp_status s = mpi_launch_split_members(h->comm, op->color, op->key, &child, &rank, &size, &world);
    if (s != USP_OK)
        return usp_error(s, "split on %s at %s:%d: %s", c->name, op->site.file, op->site.line, usp_error_message());
    if (child == MPI_COMM_NULL)
        return USP_OK;
    mpi_handle *ch;
    s = usp_calloc((void **)&ch, 1, sizeof *ch, "an MPI group handle");
    if (s == USP_OK) {
        *ch = (mpi_handle){.process = h->process, .comm = child};
        s = usp_comm_create(&mpi_comm_iface, ch, rank, size, world, op->name, h->process->trace, &ch->self);
        if (s != USP_OK)
            free(ch);
        else if (h->process->recorder)
            s = usp_flight_recorder_add_group(h->process->recorder, op->name, size, world, rank);
    }
    free(world);
    if (s != USP_OK) {
        MPI_Comm_free(&child);
        return s;
    }
    *op->split_out = ch->self;
    return USP_OK;
}

/* The MPI call(s) of `op`. */
static usp_status run(mpi_handle *h, usp_comm_op *op)
{
    const usp_comm_t *c = h->self;
    MPI_Comm comm = h->comm;
    MPI_Datatype t = element_type(op->dtype);
    int count = 0, recv_count = 0;
    USP_CHECK(to_int(c, op, op->count, &count));
    USP_CHECK(to_int(c, op, op->recv_count, &recv_count));
    MPI_Status st;
    switch (op->kind) {
    case USP_OP_ALL_TO_ALL: MPI_TRY(c, op, MPI_Alltoall, op->send, count, t, op->recv, count, t, comm); break;
    case USP_OP_ALL_TO_ALL_V: return all_to_all_v(c, comm, op);
    case USP_OP_ALL_GATHER: MPI_TRY(c, op, MPI_Allgather, op->send, count, t, op->recv, count, t, comm); break;
    case USP_OP_REDUCE_SCATTER: return reduce_scatter(c, comm, op);
    case USP_OP_ALL_REDUCE: return all_reduce(c, comm, op);
    case USP_OP_BROADCAST:
        if (c->rank == op->root && op->send != op->recv)
            memcpy(op->recv, op->send, op->count * usp_dtype_size(op->dtype));
        MPI_TRY(c, op, MPI_Bcast, op->recv, count, t, op->root, comm);
        break;
    case USP_OP_SEND: MPI_TRY(c, op, MPI_Send, op->send, count, t, op->peer, P2P_TAG, comm); break;
    case USP_OP_RECV:
        MPI_TRY(c, op, MPI_Recv, op->recv, recv_count, t, op->peer, P2P_TAG, comm, &st);
        return recv_checked(c, op, &st, recv_count);
    case USP_OP_SENDRECV:
        MPI_TRY(c, op, MPI_Sendrecv, op->send, count, t, op->peer, P2P_TAG, op->recv, recv_count, t, op->recv_peer,
                P2P_TAG, comm, &st);
        return recv_checked(c, op, &st, recv_count);
    case USP_OP_BARRIER: MPI_TRY(c, op, MPI_Barrier, comm); break;
    case USP_OP_SPLIT: return split(h, op);
    default: USP_ASSERT(0, "communication kind %d", (int)op->kind);
    }
    return USP_OK;
}

static usp_status transport(void *handle, usp_comm_op *op, uint64_t entry)
{
    (void)entry; /* the call is complete when MPI returns */
    return run(handle, op);
}

static usp_status mpi_issue(void *ctx, usp_comm_op *op)
{
    mpi_handle *h = ctx;
    return mpi_launch_issue(h->process, h->self, &h->counts, op, transport, h);
}

static void mpi_destroy(void *ctx)
{
    mpi_handle *h = ctx;
    if (!h)
        return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && h->comm != MPI_COMM_NULL && !mpi_launch_aborted(h->process)) /* aborted: left untouched */
        MPI_Comm_free(&h->comm);
    free(h);
}

static const usp_comm_i mpi_comm_iface = {
    .api_version = USP_COMM_API_VERSION,
    .name = "mpi",
    .issue = mpi_issue,
    .destroy = mpi_destroy,
};

usp_status mpi_comm_world(mpi_comm_process *p, MPI_Comm comm, usp_comm_t **out)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int *world;
    USP_CHECK(usp_malloc((void **)&world, (size_t)size * sizeof *world, "the world's ranks"));
    for (int j = 0; j < size; j++)
        world[j] = j;
    mpi_handle *h;
    usp_status s = usp_calloc((void **)&h, 1, sizeof *h, "an MPI group handle");
    if (s == USP_OK) {
        *h = (mpi_handle){.process = p, .comm = MPI_COMM_NULL};
        s = mpi_launch_init_enter(p, USP_OP_SPLIT, USP_HERE); /* the world's making is watched: a collective */
    }
    if (s == USP_OK) {
        int rc = MPI_Comm_dup(comm, &h->comm);
        s = rc == MPI_SUCCESS ? USP_OK : usp_error(USP_ERR_RANK_FAILED, "MPI_Comm_dup of the world failed");
        mpi_launch_init_leave(p, s);
        if (s == USP_OK)
            MPI_Comm_set_errhandler(h->comm, MPI_ERRORS_RETURN);
    }
    if (s == USP_OK)
        s = usp_comm_create(&mpi_comm_iface, h, rank, size, world, "world", p->trace, &h->self);
    if (s == USP_OK && p->recorder)
        s = usp_flight_recorder_add_group(p->recorder, "world", size, world, rank);
    free(world);
    if (s != USP_OK) {
        mpi_destroy(h);
        return s;
    }
    *out = h->self;
    return USP_OK;
}
