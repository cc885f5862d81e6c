/* The communicator over NCCL (see nccl_comm.h). */
#include "runtimes/nccl/nccl_comm.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_backend.h"
#include "runtimes/nccl/nccl_translate.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 18, 0)
#error "the nccl communicator needs NCCL 2.18 or later (ncclCommSplit, non-blocking communicators, splitShare)"
#endif

typedef struct nccl_handle {
    nccl_process *process;
    ncclComm_t comm;
    MPI_Comm mpi;                 /* the same members over MPI: splits learn their members' world ranks */
    usp_comm_t *self;
    mpi_call_counts counts;
    float *word;                  /* the barrier's all-reduce, on the device */
    nccl_p2p *plan;               /* [2 * size]: an all-to-all's sends, then its receives */
} nccl_handle;

static const usp_comm_i nccl_comm_iface;

static usp_status nccl_failed(const nccl_handle *h, const usp_comm_op *op, const char *call, ncclResult_t r)
{
    /* called with the process lock held, the communicators not aborted: h->comm may be asked */
    const char *last = h->comm ? ncclGetLastError(h->comm) : "";
    return usp_error(USP_ERR_RANK_FAILED, "%s on %s at %s:%d: %s failed: %s%s%s", usp_comm_kind_name(op->kind),
                     h->self ? h->self->name : "a new group", op->site.file, op->site.line, call,
                     ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
}

/* ---- the calls --------------------------------------------------------------------------------- */

/* Sends and receives in one NCCL group (the group is closed whatever fails inside it); *what names the
 * NCCL call that returned the result (ncclInProgress from ncclGroupEnd: the host polls). */
static ncclResult_t grouped(nccl_handle *h, const usp_comm_op *op, const nccl_p2p *sends, int n_sends,
                            const nccl_p2p *recvs, int n_recvs, ncclDataType_t t, cudaStream_t st, const char **what)
{
    *what = "ncclGroupStart";
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess)
        return r;
    *what = "ncclSend";
    for (int i = 0; i < n_sends && r == ncclSuccess; i++)
        r = ncclSend(usp_elem_at(op->send, op->dtype, sends[i].offset), sends[i].count, t, sends[i].peer, h->comm, st);
    if (r == ncclSuccess)
        *what = "ncclRecv";
    for (int i = 0; i < n_recvs && r == ncclSuccess; i++)
        r = ncclRecv(usp_elem_at(op->recv, op->dtype, recvs[i].offset), recvs[i].count, t, recvs[i].peer, h->comm, st);
    ncclResult_t end = ncclGroupEnd();
    if (r == ncclSuccess)
        r = end, *what = "ncclGroupEnd";
    return r;
}

static usp_status make_handle(nccl_process *p, ncclComm_t comm, MPI_Comm mpi, int rank, int size, const int *world,
                              const char *name, usp_comm_t **out);

/* ncclCommSplit of h's communicator (non-blocking, splitShare), kept so that an abort reaches it, and
 * polled until made; *nc is NULL for a rank outside every group. */
static usp_status split_nccl(nccl_handle *h, const usp_comm_op *op, ncclComm_t *nc)
{
    *nc = NULL; /* NCCL orders the members as MPI does: by key, then by rank in the parent */
    ncclConfig_t config = nccl_process_config();
    USP_CHECK(nccl_process_lock(h->process, "ncclCommSplit"));
    ncclResult_t r = ncclCommSplit(h->comm, op->color == USP_SPLIT_NOCOLOR ? NCCL_SPLIT_NOCOLOR : op->color, op->key,
                                   nc, &config);
    usp_status s = r == ncclSuccess || r == ncclInProgress ? USP_OK : nccl_failed(h, op, "ncclCommSplit", r);
    if (s == USP_OK && *nc)
        s = nccl_process_keep_locked(h->process, *nc);
    nccl_process_unlock(h->process);
    if (s == USP_OK) /* the parent's state, then the child's: both say when the split is done */
        s = nccl_process_wait(h->process, h->comm, "ncclCommSplit");
    if (s == USP_OK && *nc)
        s = nccl_process_wait(h->process, *nc, "ncclCommSplit (the new communicator)");
    return s;
}

static usp_status split(nccl_handle *h, usp_comm_op *op)
{
    MPI_Comm child = MPI_COMM_NULL;
    int rank = 0, size = 0, *world = NULL;
    usp_status s = mpi_launch_split_members(h->mpi, op->color, op->key, &child, &rank, &size, &world);
    if (s != USP_OK)
        s = usp_error(s, "split on %s at %s:%d: %s", h->self->name, op->site.file, op->site.line,
                      usp_error_message());
    ncclComm_t nc = NULL;
    usp_status made = split_nccl(h, op, &nc); /* every member splits, whatever MPI said: none waits for another */
    if (s == USP_OK)
        s = made;
    int nccl_rank = -1;
    if (s == USP_OK && (nc == NULL) != (child == MPI_COMM_NULL))
        s = usp_error(USP_ERR_RUNTIME, "split on %s at %s:%d: NCCL and MPI disagree on whether this rank is in a "
                      "group", h->self->name, op->site.file, op->site.line);
    if (s == USP_OK && nc && (s = nccl_process_lock(h->process, "ncclCommUserRank")) == USP_OK) {
        if (ncclCommUserRank(nc, &nccl_rank) != ncclSuccess)
            nccl_rank = -1;
        nccl_process_unlock(h->process);
    }
    if (s == USP_OK && nc && nccl_rank != rank)
        s = usp_error(USP_ERR_RUNTIME, "split on %s at %s:%d: NCCL gives this rank index %d in %s, MPI %d",
                      h->self->name, op->site.file, op->site.line, nccl_rank, op->name, rank);
    if (s == USP_OK && nc)
        s = make_handle(h->process, nc, child, rank, size, world, op->name, op->split_out);
    else if (s != USP_OK) {
        if (nc)
            nccl_process_close(h->process, nc);
        if (child != MPI_COMM_NULL)
            MPI_Comm_free(&child);
    }
    free(world);
    return s;
}

/* Enqueues the NCCL call(s) of `op` on `st` (the process lock held); *what names the call. */
static ncclResult_t enqueue(nccl_handle *h, const usp_comm_op *op, ncclDataType_t t, ncclRedOp_t red, cudaStream_t st,
                            const char **what)
{
    int n = h->self->size, n_sends = 0, n_recvs = 0;
    switch (op->kind) {
    case USP_OP_ALL_TO_ALL:
    case USP_OP_ALL_TO_ALL_V:
        nccl_translate_all_to_all(op, n, h->plan, &n_sends, h->plan + n, &n_recvs);
        return grouped(h, op, h->plan, n_sends, h->plan + n, n_recvs, t, st, what);
    case USP_OP_ALL_GATHER:
        *what = "ncclAllGather";
        return ncclAllGather(op->send, op->recv, op->count, t, h->comm, st);
    case USP_OP_REDUCE_SCATTER:
        *what = "ncclReduceScatter";
        return ncclReduceScatter(op->send, op->recv, op->count, t, red, h->comm, st);
    case USP_OP_ALL_REDUCE:
        *what = "ncclAllReduce";
        return ncclAllReduce(op->send, op->recv, op->count, t, red, h->comm, st);
    case USP_OP_BROADCAST:
        *what = "ncclBroadcast";
        return ncclBroadcast(op->send, op->recv, op->count, t, op->root, h->comm, st);
    case USP_OP_SEND: *what = "ncclSend"; return ncclSend(op->send, op->count, t, op->peer, h->comm, st);
    case USP_OP_RECV: *what = "ncclRecv"; return ncclRecv(op->recv, op->recv_count, t, op->peer, h->comm, st);
    case USP_OP_SENDRECV: {
        nccl_p2p to = {.peer = op->peer, .count = op->count}, from = {.peer = op->recv_peer, .count = op->recv_count};
        return grouped(h, op, &to, op->count > 0, &from, op->recv_count > 0, t, st, what);
    }
    case USP_OP_BARRIER: /* every member's stream waits at this all-reduce for the others */
        *what = "ncclAllReduce (the barrier)";
        return ncclAllReduce(h->word, h->word, 1, ncclFloat32, ncclSum, h->comm, st);
    default: USP_ASSERT(0, "communication kind %d", (int)op->kind);
    }
    return ncclInternalError;
}

/* The NCCL call(s) of `op` between a start and an end event on its stream, polled until enqueued, then
 * watched: the watchdog's poll marks the record's entry started and completed as the events fire. */
static usp_status transport(void *handle, usp_comm_op *op, uint64_t entry)
{
    nccl_handle *h = handle;
    if (op->kind == USP_OP_SPLIT)
        return split(h, op);
    cudaStream_t st;
    USP_CHECK(usp_cuda_stream(nccl_process_backend(h->process), op->stream, &st));
    ncclDataType_t t;
    ncclRedOp_t red = ncclSum;
    USP_CHECK(nccl_translate_dtype(op->dtype, &t));
    if (op->kind == USP_OP_ALL_REDUCE || op->kind == USP_OP_REDUCE_SCATTER)
        USP_CHECK(nccl_translate_reduce(op->reduce, &red));
    const char *what = usp_comm_kind_name(op->kind);
    USP_CHECK(nccl_process_lock(h->process, what));
    int slot = 0;
    usp_status s = nccl_process_call_begins(h->process, st, &slot);
    ncclResult_t r = s == USP_OK ? enqueue(h, op, t, red, st, &what) : ncclSuccess;
    if (s == USP_OK && r != ncclSuccess && r != ncclInProgress)
        s = nccl_failed(h, op, what, r);
    nccl_process_unlock(h->process);
    if (s == USP_OK && r == ncclInProgress) /* non-blocking: enqueued once NCCL says so */
        s = nccl_process_wait(h->process, h->comm, what);
    usp_comm_fingerprint fp = usp_comm_fingerprint_of(op, h->self->name, 0);
    return s == USP_OK ? nccl_process_call_enqueued(h->process, slot, st, entry, &fp) : s;
}

/* The safety net is the mpi communicator's, the same function (mpi_comm.c's mpi_issue calls
 * it too): tests/mpi_test.sh (--check-collectives with every --inject fault, the watchdog,
 * --dump-dir, usp postmortem) and tests/test_mpi_comm.c run it under mpirun; what the NCCL
 * side adds, entries completed late and the watchdog's poll, tests/test_mpi_watchdog.c. */
static usp_status nccl_issue(void *ctx, usp_comm_op *op)
{
    nccl_handle *h = ctx;
    return mpi_launch_issue(nccl_process_guard(h->process), h->self, &h->counts, op, transport, h);
}

static void nccl_destroy(void *ctx)
{
    nccl_handle *h = ctx;
    if (!h)
        return;
    if (h->comm) /* finalised and destroyed, or left alone once aborted */
        nccl_process_close(h->process, h->comm);
    if (h->word)
        cudaFree(h->word);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && h->mpi != MPI_COMM_NULL && !mpi_launch_aborted(nccl_process_guard(h->process)))
        MPI_Comm_free(&h->mpi);
    free(h->plan);
    free(h);
}

static const usp_comm_i nccl_comm_iface = {
    .api_version = USP_COMM_API_VERSION,
    .name = "nccl",
    .issue = nccl_issue,
    .destroy = nccl_destroy,
};

/* A handle over `comm` (kept by the process already) and `mpi`, which it owns from then on, failure
 * included. */
static usp_status make_handle(nccl_process *p, ncclComm_t comm, MPI_Comm mpi, int rank, int size, const int *world,
                              const char *name, usp_comm_t **out)
{
    mpi_comm_process *guard = nccl_process_guard(p);
    nccl_handle *h;
    usp_status s = usp_calloc((void **)&h, 1, sizeof *h, "an NCCL group handle");
    if (s != USP_OK) {
        nccl_process_close(p, comm);
        MPI_Comm_free(&mpi);
        return s;
    }
    *h = (nccl_handle){.process = p, .comm = comm, .mpi = mpi};
    s = usp_calloc((void **)&h->plan, 2 * (size_t)size, sizeof *h->plan, "an all-to-all's plan");
    if (s == USP_OK) {
        cudaError_t e = cudaMalloc((void **)&h->word, sizeof *h->word);
        if (e == cudaSuccess) /* zero: the barrier's sums stay zero */
            e = cudaMemset(h->word, 0, sizeof *h->word);
        s = e == cudaSuccess ? USP_OK
                             : usp_error(USP_ERR_RANK_FAILED, "nccl communicator: cudaMalloc of the barrier's word "
                                         "failed: %s", cudaGetErrorString(e));
    }
    if (s == USP_OK)
        s = usp_comm_create(&nccl_comm_iface, h, rank, size, world, name, guard->trace, &h->self);
    if (s == USP_OK && guard->recorder)
        s = usp_flight_recorder_add_group(guard->recorder, name, size, world, rank);
    if (s != USP_OK) {
        if (h->self)
            usp_comm_destroy(h->self);
        else
            nccl_destroy(h);
        return s;
    }
    *out = h->self;
    return USP_OK;
}

/* Rank 0's ncclUniqueId, to every rank over MPI: the first watched step of making the world. */
static usp_status share_unique_id(nccl_process *p, MPI_Comm comm, int rank, ncclUniqueId *id)
{
    memset(id, 0, sizeof *id);
    ncclResult_t r = rank == 0 ? ncclGetUniqueId(id) : ncclSuccess;
    if (r != ncclSuccess) /* the others wait in the broadcast: this rank tells them (mpi_launch_end_rank) */
        return usp_error(USP_ERR_RANK_FAILED, "ncclGetUniqueId failed: %s", ncclGetErrorString(r));
    USP_CHECK(mpi_launch_init_enter(nccl_process_guard(p), USP_OP_BROADCAST, USP_HERE));
    usp_status s = MPI_Bcast(id, (int)sizeof *id, MPI_BYTE, 0, comm) == MPI_SUCCESS
                       ? USP_OK : usp_error(USP_ERR_RANK_FAILED, "broadcasting the ncclUniqueId over MPI failed");
    mpi_launch_init_leave(nccl_process_guard(p), s);
    return s;
}

/* ncclCommInitRankConfig (non-blocking, kept for an abort, polled until made) and its MPI twin: the
 * second watched step. *nc is NULL when NCCL made nothing. */
static usp_status init_world(nccl_process *p, MPI_Comm comm, int rank, int size, const ncclUniqueId *id,
                             ncclComm_t *nc, MPI_Comm *mpi)
{
    *nc = NULL, *mpi = MPI_COMM_NULL;
    cudaError_t e = cudaSetDevice(nccl_process_device(p));
    if (e != cudaSuccess)
        return usp_error(USP_ERR_RANK_FAILED, "cudaSetDevice(%d) failed: %s", nccl_process_device(p),
                         cudaGetErrorString(e));
    USP_CHECK(mpi_launch_init_enter(nccl_process_guard(p), USP_OP_SPLIT, USP_HERE));
    ncclConfig_t config = nccl_process_config();
    usp_status s = nccl_process_lock(p, "ncclCommInitRankConfig");
    ncclResult_t r = ncclSuccess;
    if (s == USP_OK) {
        r = ncclCommInitRankConfig(nc, size, *id, rank, &config);
        if (r != ncclSuccess && r != ncclInProgress)
            s = usp_error(USP_ERR_RANK_FAILED, "ncclCommInitRankConfig of rank %d of %d on GPU %d failed: %s", rank,
                          size, nccl_process_device(p), ncclGetErrorString(r));
        else if (*nc)
            s = nccl_process_keep_locked(p, *nc);
        nccl_process_unlock(p);
    }
    if (s == USP_OK && *nc)
        s = nccl_process_wait(p, *nc, "ncclCommInitRankConfig");
    if (s == USP_OK && MPI_Comm_dup(comm, mpi) != MPI_SUCCESS)
        s = usp_error(USP_ERR_RANK_FAILED, "MPI_Comm_dup of the world failed");
    mpi_launch_init_leave(nccl_process_guard(p), s);
    return s;
}

usp_status nccl_comm_world(nccl_process *p, MPI_Comm comm, usp_comm_t **out)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    ncclUniqueId id;
    USP_CHECK(share_unique_id(p, comm, rank, &id));
    ncclComm_t nc;
    MPI_Comm mpi;
    usp_status s = init_world(p, comm, rank, size, &id, &nc, &mpi);
    int *world = NULL;
    if (s == USP_OK)
        s = usp_malloc((void **)&world, (size_t)size * sizeof *world, "the world's ranks");
    if (s != USP_OK) {
        if (nc)
            nccl_process_close(p, nc);
        if (mpi != MPI_COMM_NULL)
            MPI_Comm_free(&mpi);
        return s;
    }
    MPI_Comm_set_errhandler(mpi, MPI_ERRORS_RETURN);
    for (int j = 0; j < size; j++)
        world[j] = j;
    s = make_handle(p, nc, mpi, rank, size, world, "world", out);
    free(world);
    return s;
}
