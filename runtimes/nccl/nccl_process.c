/* The NCCL state of one process (see nccl_process.h). */
#include "runtimes/nccl/nccl_process.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cuda/cuda_backend.h"

#define MAX_COMMS 64   /* as many groups as a flight record keeps */
#define MAX_PENDING 256 /* calls enqueued and watched at once; the host waits for the oldest beyond */

/* An enqueued call: the events around it, and what the record and a timeout say of it. */
typedef struct pending_call {
    cudaEvent_t began, done;
    int started;                  /* `began` fired: the stream reached the call */
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
    pthread_mutex_t lock;         /* guards what follows, and every NCCL call on a communicator */
    ncclComm_t comms[MAX_COMMS];  /* every open communicator (NULL: a free slot) */
    int aborted;
    pending_call pending[MAX_PENDING]; /* a ring: the oldest at head */
    int head, n_pending;
};

static double process_clock(const nccl_process *p)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return p->t0_clock + (double)(now.tv_sec - p->t0_mono.tv_sec) + 1e-9 * (double)(now.tv_nsec - p->t0_mono.tv_nsec);
}

static usp_status cuda_failed(const char *what, cudaError_t e)
{
    return usp_error(USP_ERR_RANK_FAILED, "nccl communicator: %s failed: %s (%s)", what, cudaGetErrorString(e),
                     cudaGetErrorName(e));
}

ncclConfig_t nccl_process_config(void)
{
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;   /* init, split and group end return at once: the host polls, an abort can end them */
    config.splitShare = 1; /* a split shares its parent's resources rather than reserving its own */
    return config;
}

mpi_comm_process *nccl_process_guard(const nccl_process *p) { return p->guard; }

usp_backend_t *nccl_process_backend(const nccl_process *p) { return p->backend; }

int nccl_process_device(const nccl_process *p) { return p->device; }

usp_status nccl_process_create(mpi_comm_process *guard, usp_backend_t *backend, int device, nccl_process **out)
{
    cudaStream_t stream;
    USP_CHECK(usp_cuda_stream(backend, NULL, &stream)); /* the cuda backend, or an error */
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
        cudaError_t e = cudaEventCreateWithFlags(&p->pending[i].began, cudaEventDisableTiming);
        if (e == cudaSuccess)
            e = cudaEventCreateWithFlags(&p->pending[i].done, cudaEventDisableTiming);
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

usp_status nccl_process_lock(nccl_process *p, const char *what)
{
    pthread_mutex_lock(&p->lock);
    if (!p->aborted)
        return USP_OK;
    pthread_mutex_unlock(&p->lock);
    return usp_error(USP_ERR_RANK_FAILED, "%s: not called: the rank's NCCL communicators were aborted", what);
}

void nccl_process_unlock(nccl_process *p) { pthread_mutex_unlock(&p->lock); }

usp_status nccl_process_keep_locked(nccl_process *p, ncclComm_t comm)
{
    for (int i = 0; i < MAX_COMMS; i++)
        if (!p->comms[i]) {
            p->comms[i] = comm;
            return USP_OK;
        }
    return usp_error(USP_ERR_RUNTIME, "more than %d NCCL communicators in one process", MAX_COMMS);
}

usp_status nccl_process_wait(nccl_process *p, ncclComm_t comm, const char *what)
{
    for (long polls = 0;; polls++) {
        USP_CHECK(nccl_process_lock(p, what));
        ncclResult_t state = ncclInProgress, r = ncclCommGetAsyncError(comm, &state);
        const char *last = r != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)
                               ? ncclGetLastError(comm) : "";
        char text[512];
        snprintf(text, sizeof text, "%s", last ? last : "");
        nccl_process_unlock(p);
        if (r != ncclSuccess || (state != ncclSuccess && state != ncclInProgress))
            return usp_error(USP_ERR_RANK_FAILED, "%s failed: %s%s%s", what,
                             ncclGetErrorString(r != ncclSuccess ? r : state), *text ? ": " : "", text);
        if (state == ncclSuccess)
            return USP_OK;
        /* in progress: spin a little (an enqueue takes microseconds), then let the CPU go */
        struct timespec t = {0, polls < 1000 ? 1000 : 100000};
        nanosleep(&t, NULL);
    }
}

usp_status nccl_process_call_begins(nccl_process *p, cudaStream_t stream, int *slot)
{
    *slot = (p->head + p->n_pending) % MAX_PENDING;
    cudaError_t e = cudaEventRecord(p->pending[*slot].began, stream);
    return e == cudaSuccess ? USP_OK : cuda_failed("cudaEventRecord before an NCCL call", e);
}

/* Marks the calls whose start events fired started, and completes those whose end events fired, oldest
 * first; with the lock held. */
static usp_status retire(nccl_process *p)
{
    usp_flight_recorder *rec = p->guard->recorder;
    for (int k = 0; k < p->n_pending; k++) {
        pending_call *c = &p->pending[(p->head + k) % MAX_PENDING];
        cudaError_t e = c->started ? cudaSuccess : cudaEventQuery(c->began);
        if (e != cudaSuccess && e != cudaErrorNotReady)
            return cuda_failed("cudaEventQuery of a call's start", e);
        if (e == cudaSuccess && !c->started && c->entry && rec)
            usp_flight_recorder_started(rec, c->entry, process_clock(p));
        c->started |= e == cudaSuccess;
    }
    while (p->n_pending > 0) {
        pending_call *c = &p->pending[p->head];
        cudaError_t e = cudaEventQuery(c->done);
        if (e == cudaErrorNotReady)
            return USP_OK;
        if (e != cudaSuccess)
            return cuda_failed("cudaEventQuery of an enqueued call", e);
        if (c->entry && rec)
            usp_flight_recorder_completed(rec, c->entry, process_clock(p));
        p->head = (p->head + 1) % MAX_PENDING;
        p->n_pending--;
    }
    return USP_OK;
}

usp_status nccl_process_call_enqueued(nccl_process *p, int slot, cudaStream_t stream, uint64_t entry,
                                      const usp_comm_fingerprint *fp)
{
    usp_status s = nccl_process_lock(p, "recording the end of an NCCL call");
    if (s != USP_OK)
        return s;
    pending_call *c = &p->pending[slot];
    cudaError_t e = cudaEventRecord(c->done, stream);
    if (e == cudaSuccess) {
        c->entry = entry, c->t = process_clock(p), c->fp = *fp, c->started = 0;
        p->n_pending++;
    } else {
        s = cuda_failed("cudaEventRecord after an NCCL call", e);
    }
    for (;;) { /* room for the next call: the oldest must finish first (a hang: the watchdog's timeout) */
        if (s == USP_OK)
            s = retire(p);
        if (s != USP_OK || p->n_pending < MAX_PENDING || p->aborted)
            break;
        nccl_process_unlock(p);
        struct timespec t = {0, 100000};
        nanosleep(&t, NULL);
        pthread_mutex_lock(&p->lock);
    }
    nccl_process_unlock(p);
    return s;
}

/* A call the GPU has not finished after timeout_s, into why; USP_OK when none. With the lock held. */
static usp_status late_call(nccl_process *p, double timeout_s, char *why, size_t why_size)
{
    const pending_call *c = &p->pending[p->head];
    double waited = p->n_pending > 0 ? process_clock(p) - c->t : 0.0;
    if (p->n_pending == 0 || waited <= timeout_s)
        return USP_OK;
    usp_strbuf call = {0};
    usp_comm_fingerprint_describe(&call, &c->fp);
    snprintf(why, why_size, "watchdog: %s on %s (%s:%d) %s enqueued on the GPU %.1f s ago and not complete "
             "(--timeout %g): a hang; %s", usp_comm_kind_name((usp_comm_kind)c->fp.op), c->fp.group,
             c->fp.site.file, c->fp.site.line, usp_strbuf_text(&call), waited, timeout_s,
             c->started ? "it is inside NCCL (its start event fired)"
                        : "it never started (queued behind compute: the stream has not reached it)");
    usp_strbuf_free(&call);
    return USP_ERR_COLLECTIVE;
}

usp_status nccl_process_poll(void *process, double timeout_s, char *why, size_t why_size)
{
    nccl_process *p = process;
    if (pthread_mutex_trylock(&p->lock) != 0) /* the main thread is in an NCCL call: look next tick */
        return USP_OK;
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
    if (s == USP_OK)
        s = late_call(p, timeout_s, why, why_size);
    pthread_mutex_unlock(&p->lock);
    return s;
}

usp_status nccl_process_finish(nccl_process *p)
{
    cudaError_t e = cudaDeviceSynchronize(); /* every stream: the calls, and the work that waited for them */
    if (e != cudaSuccess)
        return cuda_failed("cudaDeviceSynchronize at the end of the run", e);
    USP_CHECK(nccl_process_lock(p, "the end of the run"));
    usp_status s = retire(p);
    for (int i = 0; i < MAX_COMMS && s == USP_OK; i++) {
        ncclResult_t r = ncclSuccess;
        if (p->comms[i] && ncclCommGetAsyncError(p->comms[i], &r) == ncclSuccess && r != ncclSuccess)
            s = usp_error(USP_ERR_RANK_FAILED, "NCCL reports an asynchronous error: %s: %s", ncclGetErrorString(r),
                          ncclGetLastError(p->comms[i]));
    }
    nccl_process_unlock(p);
    return s;
}

void nccl_process_abort(void *process)
{
    nccl_process *p = process;
    if (!p)
        return;
    pthread_mutex_lock(&p->lock); /* held by a main thread stuck in NCCL: the watchdog's end timer ends it */
    if (!p->aborted) {
        p->aborted = 1; /* first: nothing touches a communicator from here on */
        for (int i = 0; i < MAX_COMMS; i++)
            if (p->comms[i])
                ncclCommAbort(p->comms[i]); /* ends an init, split or group in progress too (non-blocking) */
    }
    pthread_mutex_unlock(&p->lock);
}

void nccl_process_close(nccl_process *p, ncclComm_t comm)
{
    if (nccl_process_lock(p, "closing a communicator") != USP_OK)
        return; /* ncclCommAbort freed it */
    ncclResult_t r = ncclCommFinalize(comm); /* non-blocking: flushes what was enqueued on it, polled below */
    nccl_process_unlock(p);
    if ((r == ncclSuccess || r == ncclInProgress) && nccl_process_wait(p, comm, "ncclCommFinalize") != USP_OK)
        fprintf(stderr, "usp: %s\n", usp_error_message());
    if (nccl_process_lock(p, "destroying a communicator") != USP_OK)
        return; /* aborted while it finalised: the abort, which still listed it, freed it */
    for (int i = 0; i < MAX_COMMS; i++)
        if (p->comms[i] == comm)
            p->comms[i] = NULL;
    ncclCommDestroy(comm);
    nccl_process_unlock(p);
}

void nccl_process_destroy(nccl_process *p)
{
    if (!p)
        return;
    for (int i = 0; i < MAX_COMMS; i++)
        if (p->comms[i])
            nccl_process_close(p, p->comms[i]);
    for (int i = 0; i < MAX_PENDING; i++) {
        if (p->pending[i].began)
            cudaEventDestroy(p->pending[i].began);
        if (p->pending[i].done)
            cudaEventDestroy(p->pending[i].done);
    }
    pthread_mutex_destroy(&p->lock);
    free(p);
}
