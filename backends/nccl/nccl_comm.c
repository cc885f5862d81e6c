/* The communicator over NCCL (see nccl_comm.h). */
#include "backends/nccl/nccl_comm.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cuda/cuda_backend.h"
#include "backends/nccl/nccl_translate.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 18, 0)
#error "the nccl communicator needs NCCL 2.18 or later (ncclCommSplit)"
#endif

#define MAX_COMMS 64   /* as many groups as a flight record keeps */
#define MAX_PENDING 256 /* calls enqueued and watched at once; the host waits for the oldest beyond */

/* An enqueued call: the event recorded after it, and what the record and a timeout say of it. */
typedef struct pending_call {
    cudaEvent_t done;
    uint64_t entry;               /* the flight recorder's (0: not recorded) */
    double t;                     /* enqueued, on the process clock */
    usp_comm_fingerprint fp;
} pending_call;

struct nccl_process {
    mpi_comm_process *guard;
    usp_backend_t *backend;
    int device;
    double t0_clock;              /* the guard's clock (MPI_Wtime - t0) ... */
    struct timespec t0_mono;      /* ... at this monotonic time: the watchdog's thread may not call MPI */
    pthread_mutex_t lock;         /* guards what follows: the watchdog polls from its thread */
    ncclComm_t comms[MAX_COMMS];  /* every open communicator (NULL: a free slot) */
    int aborted;
    pending_call pending[MAX_PENDING]; /* a ring: the oldest at head */
    int head, n_pending;
};

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

static double process_clock(const nccl_process *p)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return p->t0_clock + (double)(now.tv_sec - p->t0_mono.tv_sec) + 1e-9 * (double)(now.tv_nsec - p->t0_mono.tv_nsec);
}

static usp_status nccl_failed(const nccl_handle *h, const usp_comm_op *op, const char *call, ncclResult_t r)
{
    const char *last = h->comm ? ncclGetLastError(h->comm) : "";
    return usp_error(USP_ERR_RANK_FAILED, "%s on %s at %s:%d: %s failed: %s%s%s", usp_comm_kind_name(op->kind),
                     h->self ? h->self->name : "a new group", op->site.file, op->site.line, call,
                     ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
}

static usp_status cuda_failed(const char *what, cudaError_t e)
{
    return usp_error(USP_ERR_RANK_FAILED, "nccl communicator: %s failed: %s (%s)", what, cudaGetErrorString(e),
                     cudaGetErrorName(e));
}

/* ---- the process: communicators and enqueued calls ------------------------------------------- */

usp_status nccl_process_create(mpi_comm_process *guard, usp_backend_t *backend, int device, nccl_process **out)
{
    if (!usp_cuda_stream(backend, NULL))
        return usp_error(USP_ERR_RUNTIME, "the nccl communicator needs the cuda backend");
    nccl_process *p;
    USP_CHECK(usp_calloc((void **)&p, 1, sizeof *p, "the NCCL process state"));
    *p = (nccl_process){.guard = guard, .backend = backend, .device = device};
    guard->asynchronous = 1;
    guard->backend = NULL; /* calls are ordered on the streams, not by synchronising the host */
    p->t0_clock = MPI_Wtime() - guard->t0;
    clock_gettime(CLOCK_MONOTONIC, &p->t0_mono);
    pthread_mutex_init(&p->lock, NULL);
    cudaError_t set = cudaSetDevice(device);
    usp_status s = set == cudaSuccess ? USP_OK : cuda_failed("cudaSetDevice", set);
    for (int i = 0; i < MAX_PENDING && s == USP_OK; i++) {
        cudaError_t e = cudaEventCreateWithFlags(&p->pending[i].done, cudaEventDisableTiming);
        if (e != cudaSuccess)
            s = cuda_failed("cudaEventCreateWithFlags", e);
    }
    if (s != USP_OK) {
        nccl_process_destroy(p);
        return s;
    }
    *out = p;
    return USP_OK;
}

/* Completes the calls whose events have fired, oldest first; with the lock held. */
static usp_status retire(nccl_process *p)
{
    while (p->n_pending > 0) {
        pending_call *c = &p->pending[p->head];
        cudaError_t e = cudaEventQuery(c->done);
        if (e == cudaErrorNotReady)
            return USP_OK;
        if (e != cudaSuccess)
            return cuda_failed("cudaEventQuery of an enqueued call", e);
        if (c->entry && p->guard->recorder)
            usp_flight_recorder_completed(p->guard->recorder, c->entry, process_clock(p));
        p->head = (p->head + 1) % MAX_PENDING;
        p->n_pending--;
    }
    return USP_OK;
}

/* Watches the call just enqueued on `stream`: an event after it, and its record entry. */
static usp_status watch_call(nccl_process *p, const usp_comm_op *op, const char *group, uint64_t entry,
                             cudaStream_t stream)
{
    usp_status s;
    for (;;) {
        pthread_mutex_lock(&p->lock);
        s = retire(p);
        if (s != USP_OK || p->n_pending < MAX_PENDING)
            break;
        pthread_mutex_unlock(&p->lock); /* full: the oldest must finish first (a hang: the watchdog's timeout) */
        struct timespec t = {0, 100000};
        nanosleep(&t, NULL);
    }
    if (s != USP_OK) {
        pthread_mutex_unlock(&p->lock);
        return s;
    }
    pending_call *c = &p->pending[(p->head + p->n_pending) % MAX_PENDING];
    cudaError_t e = cudaEventRecord(c->done, stream);
    if (e == cudaSuccess) {
        c->entry = entry;
        c->t = process_clock(p);
        c->fp = usp_comm_fingerprint_of(op, group, 0);
        p->n_pending++;
    } else {
        s = cuda_failed("cudaEventRecord after an NCCL call", e);
    }
    pthread_mutex_unlock(&p->lock);
    return s;
}

static void abort_all(nccl_process *p)
{
    for (int i = 0; i < MAX_COMMS; i++)
        if (p->comms[i])
            ncclCommAbort(p->comms[i]);
    p->aborted = 1;
}

usp_status nccl_process_poll(void *process, double timeout_s, char *why, size_t why_size)
{
    nccl_process *p = process;
    pthread_mutex_lock(&p->lock);
    if (p->aborted) {
        pthread_mutex_unlock(&p->lock);
        return USP_OK;
    }
    cudaSetDevice(p->device); /* this thread's CUDA calls on the process's GPU, not a context on GPU 0 */
    usp_status s = USP_OK;
    for (int i = 0; i < MAX_COMMS && s == USP_OK; i++) {
        ncclResult_t r = ncclSuccess;
        if (p->comms[i] && ncclCommGetAsyncError(p->comms[i], &r) == ncclSuccess && r != ncclSuccess &&
            r != ncclInProgress) {
            snprintf(why, why_size, "NCCL reports an asynchronous error: %s: %s; every communicator of the rank is "
                     "aborted", ncclGetErrorString(r), ncclGetLastError(p->comms[i]));
            s = USP_ERR_RANK_FAILED;
        }
    }
    if (s == USP_OK && retire(p) != USP_OK) {
        snprintf(why, why_size, "%s", usp_error_message());
        s = USP_ERR_RANK_FAILED;
    }
    const pending_call *c = &p->pending[p->head];
    double waited = p->n_pending > 0 ? process_clock(p) - c->t : 0.0;
    if (s == USP_OK && p->n_pending > 0 && waited > timeout_s) {
        usp_strbuf call = {0};
        usp_comm_fingerprint_describe(&call, &c->fp);
        snprintf(why, why_size, "watchdog: %s on %s (%s:%d) %s enqueued on the GPU %.1f s ago and not complete "
                 "(--timeout %g): a hang; every communicator of the rank is aborted",
                 usp_comm_kind_name((usp_comm_kind)c->fp.op), c->fp.group, c->fp.site.file, c->fp.site.line,
                 usp_strbuf_text(&call), waited, timeout_s);
        usp_strbuf_free(&call);
        s = USP_ERR_COLLECTIVE;
    }
    if (s != USP_OK)
        abort_all(p);
    pthread_mutex_unlock(&p->lock);
    return s;
}

usp_status nccl_process_finish(nccl_process *p)
{
    cudaError_t e = cudaDeviceSynchronize(); /* every stream: the calls, and the work that waited for them */
    if (e != cudaSuccess)
        return cuda_failed("cudaDeviceSynchronize at the end of the run", e);
    pthread_mutex_lock(&p->lock);
    usp_status s = retire(p);
    for (int i = 0; i < MAX_COMMS && s == USP_OK; i++) {
        ncclResult_t r = ncclSuccess;
        if (p->comms[i] && ncclCommGetAsyncError(p->comms[i], &r) == ncclSuccess && r != ncclSuccess)
            s = usp_error(USP_ERR_RANK_FAILED, "NCCL reports an asynchronous error: %s: %s", ncclGetErrorString(r),
                          ncclGetLastError(p->comms[i]));
    }
    pthread_mutex_unlock(&p->lock);
    return s;
}

void nccl_process_abort(nccl_process *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    if (!p->aborted)
        abort_all(p);
    pthread_mutex_unlock(&p->lock);
}

/* Takes or gives back a communicator's slot (comm NULL: finds `old` and frees its slot). */
static usp_status keep_comm(nccl_process *p, ncclComm_t comm, ncclComm_t old)
{
    pthread_mutex_lock(&p->lock);
    int i = 0;
    while (i < MAX_COMMS && p->comms[i] != old)
        i++;
    if (i < MAX_COMMS)
        p->comms[i] = comm;
    pthread_mutex_unlock(&p->lock);
    return i < MAX_COMMS ? USP_OK
                         : usp_error(USP_ERR_RUNTIME, "more than %d NCCL communicators in one process", MAX_COMMS);
}

static void close_comm(nccl_process *p, ncclComm_t comm)
{
    if (p->aborted)
        return; /* ncclCommAbort freed it */
    ncclCommDestroy(comm); /* in blocking mode it finalises first: what was enqueued on it completes */
}

void nccl_process_destroy(nccl_process *p)
{
    if (!p)
        return;
    for (int i = 0; i < MAX_COMMS; i++)
        if (p->comms[i])
            close_comm(p, p->comms[i]);
    for (int i = 0; i < MAX_PENDING; i++)
        if (p->pending[i].done)
            cudaEventDestroy(p->pending[i].done);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

/* ---- the calls --------------------------------------------------------------------------------- */

/* Sends and receives in one NCCL group; the group is closed whatever fails inside it. */
static usp_status grouped(nccl_handle *h, const usp_comm_op *op, const nccl_p2p *sends, int n_sends,
                          const nccl_p2p *recvs, int n_recvs, ncclDataType_t t, cudaStream_t st)
{
    const char *what = "ncclGroupStart";
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess)
        return nccl_failed(h, op, what, r);
    what = "ncclSend";
    for (int i = 0; i < n_sends && r == ncclSuccess; i++)
        r = ncclSend(usp_elem_at(op->send, op->dtype, sends[i].offset), sends[i].count, t, sends[i].peer, h->comm, st);
    if (r == ncclSuccess)
        what = "ncclRecv";
    for (int i = 0; i < n_recvs && r == ncclSuccess; i++)
        r = ncclRecv(usp_elem_at(op->recv, op->dtype, recvs[i].offset), recvs[i].count, t, recvs[i].peer, h->comm, st);
    ncclResult_t end = ncclGroupEnd();
    if (r == ncclSuccess)
        r = end, what = "ncclGroupEnd";
    return r == ncclSuccess ? USP_OK : nccl_failed(h, op, what, r);
}

static usp_status make_handle(nccl_process *p, ncclComm_t comm, MPI_Comm mpi, int rank, int size, const int *world,
                              const char *name, usp_comm_t **out);

static usp_status split(nccl_handle *h, usp_comm_op *op)
{
    MPI_Comm child = MPI_COMM_NULL;
    int rank = 0, size = 0, *world = NULL;
    usp_status s = mpi_launch_split_members(h->mpi, op->color, op->key, &child, &rank, &size, &world);
    if (s != USP_OK)
        s = usp_error(s, "split on %s at %s:%d: %s", h->self->name, op->site.file, op->site.line,
                      usp_error_message());
    ncclComm_t nc = NULL; /* NCCL orders the members as MPI does: by key, then by rank in the parent */
    ncclResult_t r = ncclCommSplit(h->comm, op->color == USP_SPLIT_NOCOLOR ? NCCL_SPLIT_NOCOLOR : op->color, op->key,
                                   &nc, NULL);
    if (s == USP_OK && r != ncclSuccess)
        s = nccl_failed(h, op, "ncclCommSplit", r);
    int nccl_rank = -1;
    if (s == USP_OK && (nc == NULL) != (child == MPI_COMM_NULL))
        s = usp_error(USP_ERR_RUNTIME, "split on %s at %s:%d: NCCL and MPI disagree on whether this rank is in a "
                      "group", h->self->name, op->site.file, op->site.line);
    if (s == USP_OK && nc && (ncclCommUserRank(nc, &nccl_rank) != ncclSuccess || nccl_rank != rank))
        s = usp_error(USP_ERR_RUNTIME, "split on %s at %s:%d: NCCL gives this rank index %d in %s, MPI %d",
                      h->self->name, op->site.file, op->site.line, nccl_rank, op->name, rank);
    if (s == USP_OK && nc)
        s = make_handle(h->process, nc, child, rank, size, world, op->name, op->split_out);
    else if (s != USP_OK) {
        if (nc)
            close_comm(h->process, nc);
        if (child != MPI_COMM_NULL)
            MPI_Comm_free(&child);
    }
    free(world);
    return s;
}

/* The NCCL call(s) of `op`, enqueued on its stream, then watched. */
static usp_status transport(void *handle, usp_comm_op *op, uint64_t entry)
{
    nccl_handle *h = handle;
    if (op->kind == USP_OP_SPLIT)
        return split(h, op);
    cudaStream_t st = usp_cuda_stream(h->process->backend, op->stream);
    ncclDataType_t t;
    ncclRedOp_t red = ncclSum;
    USP_CHECK(nccl_translate_dtype(op->dtype, &t));
    if (op->kind == USP_OP_ALL_REDUCE || op->kind == USP_OP_REDUCE_SCATTER)
        USP_CHECK(nccl_translate_reduce(op->reduce, &red));
    const char *what = "";
    ncclResult_t r = ncclSuccess;
    usp_status s = USP_OK;
    int n = h->self->size, n_sends = 0, n_recvs = 0;
    switch (op->kind) {
    case USP_OP_ALL_TO_ALL:
    case USP_OP_ALL_TO_ALL_V:
        nccl_translate_all_to_all(op, n, h->plan, &n_sends, h->plan + n, &n_recvs);
        s = grouped(h, op, h->plan, n_sends, h->plan + n, n_recvs, t, st);
        break;
    case USP_OP_ALL_GATHER:
        what = "ncclAllGather", r = ncclAllGather(op->send, op->recv, op->count, t, h->comm, st);
        break;
    case USP_OP_REDUCE_SCATTER:
        what = "ncclReduceScatter", r = ncclReduceScatter(op->send, op->recv, op->count, t, red, h->comm, st);
        break;
    case USP_OP_ALL_REDUCE:
        what = "ncclAllReduce", r = ncclAllReduce(op->send, op->recv, op->count, t, red, h->comm, st);
        break;
    case USP_OP_BROADCAST:
        what = "ncclBroadcast", r = ncclBroadcast(op->send, op->recv, op->count, t, op->root, h->comm, st);
        break;
    case USP_OP_SEND: what = "ncclSend", r = ncclSend(op->send, op->count, t, op->peer, h->comm, st); break;
    case USP_OP_RECV: what = "ncclRecv", r = ncclRecv(op->recv, op->recv_count, t, op->peer, h->comm, st); break;
    case USP_OP_SENDRECV: {
        nccl_p2p to = {.peer = op->peer, .count = op->count}, from = {.peer = op->recv_peer, .count = op->recv_count};
        s = grouped(h, op, &to, op->count > 0, &from, op->recv_count > 0, t, st);
        break;
    }
    case USP_OP_BARRIER: /* every member's stream waits at this all-reduce for the others */
        what = "ncclAllReduce (the barrier)";
        r = ncclAllReduce(h->word, h->word, 1, ncclFloat32, ncclSum, h->comm, st);
        break;
    default: USP_ASSERT(0, "communication kind %d", (int)op->kind);
    }
    if (r != ncclSuccess)
        s = nccl_failed(h, op, what, r);
    return s == USP_OK ? watch_call(h->process, op, h->self->name, entry, st) : s;
}

/* The safety net is the mpi communicator's, the same function (mpi_comm.c's mpi_issue calls
 * it too): tests/mpi_test.sh (--check-collectives with every --inject fault, the watchdog,
 * --dump-dir, usp postmortem) and tests/test_mpi_comm.c run it under mpirun; what the NCCL
 * side adds, entries completed late and the watchdog's poll, tests/test_mpi_watchdog.c. */
static usp_status nccl_issue(void *ctx, usp_comm_op *op)
{
    nccl_handle *h = ctx;
    return mpi_launch_issue(h->process->guard, h->self, &h->counts, op, transport, h);
}

static void nccl_destroy(void *ctx)
{
    nccl_handle *h = ctx;
    if (!h)
        return;
    if (h->comm) {
        keep_comm(h->process, NULL, h->comm);
        close_comm(h->process, h->comm);
    }
    if (h->word)
        cudaFree(h->word);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && h->mpi != MPI_COMM_NULL)
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

/* A handle over `comm` and `mpi` (which it owns from then on, failure included). */
static usp_status make_handle(nccl_process *p, ncclComm_t comm, MPI_Comm mpi, int rank, int size, const int *world,
                              const char *name, usp_comm_t **out)
{
    nccl_handle *h;
    usp_status s = usp_calloc((void **)&h, 1, sizeof *h, "an NCCL group handle");
    if (s != USP_OK) {
        close_comm(p, comm);
        MPI_Comm_free(&mpi);
        return s;
    }
    *h = (nccl_handle){.process = p, .comm = comm, .mpi = mpi};
    s = keep_comm(p, comm, NULL);
    if (s != USP_OK)
        h->comm = NULL, close_comm(p, comm);
    if (s == USP_OK)
        s = usp_calloc((void **)&h->plan, 2 * (size_t)size, sizeof *h->plan, "an all-to-all's plan");
    if (s == USP_OK) {
        cudaError_t e = cudaMalloc((void **)&h->word, sizeof *h->word);
        if (e == cudaSuccess) /* zero: the barrier's sums stay zero */
            e = cudaMemset(h->word, 0, sizeof *h->word);
        s = e == cudaSuccess ? USP_OK : cuda_failed("cudaMalloc of the barrier's word", e);
    }
    if (s == USP_OK)
        s = usp_comm_create(&nccl_comm_iface, h, rank, size, world, name, p->guard->trace, &h->self);
    if (s == USP_OK && p->guard->recorder)
        s = usp_flight_recorder_add_group(p->guard->recorder, name, size, world, rank);
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

usp_status nccl_comm_world(nccl_process *p, MPI_Comm comm, usp_comm_t **out)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    ncclResult_t r = rank == 0 ? ncclGetUniqueId(&id) : ncclSuccess;
    if (r != ncclSuccess) /* the others wait in the broadcast: this rank's exit ends the job */
        return usp_error(USP_ERR_RANK_FAILED, "ncclGetUniqueId failed: %s", ncclGetErrorString(r));
    if (MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, comm) != MPI_SUCCESS)
        return usp_error(USP_ERR_RANK_FAILED, "broadcasting the ncclUniqueId over MPI failed");
    cudaError_t e = cudaSetDevice(p->device);
    if (e != cudaSuccess)
        return cuda_failed("cudaSetDevice", e);
    ncclComm_t nc;
    r = ncclCommInitRank(&nc, size, id, rank);
    if (r != ncclSuccess)
        return usp_error(USP_ERR_RANK_FAILED, "ncclCommInitRank of rank %d of %d on GPU %d failed: %s", rank, size,
                         p->device, ncclGetErrorString(r));
    MPI_Comm mpi;
    if (MPI_Comm_dup(comm, &mpi) != MPI_SUCCESS) {
        close_comm(p, nc);
        return usp_error(USP_ERR_RUNTIME, "MPI_Comm_dup of the world failed");
    }
    MPI_Comm_set_errhandler(mpi, MPI_ERRORS_RETURN);
    int *world;
    usp_status s = usp_malloc((void **)&world, (size_t)size * sizeof *world, "the world's ranks");
    if (s != USP_OK) {
        close_comm(p, nc);
        MPI_Comm_free(&mpi);
        return s;
    }
    for (int j = 0; j < size; j++)
        world[j] = j;
    s = make_handle(p, nc, mpi, rank, size, world, "world", out);
    free(world);
    return s;
}
