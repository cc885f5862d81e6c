/* The NCCL state of one process (one GPU): its communicators, the calls it
 * enqueued and is watching, and the one lock that says nothing touches a
 * communicator after its abort. Used by the communicator (nccl_comm.c) and
 * the runtime (nccl_runtime.c).
 *
 * Every communicator is non-blocking (ncclConfig_t blocking = 0): an NCCL
 * call, ncclCommInitRankConfig, ncclCommSplit and ncclGroupEnd return at once
 * (ncclSuccess or ncclInProgress) and the host polls ncclCommGetAsyncError
 * (nccl_process_wait) until the call is enqueued, as NCCL requires before the
 * next call on that communicator. So the host is never stuck inside NCCL:
 * the poll stays inside a watched call (mpi_watchdog.h), and ncclCommAbort,
 * which NCCL lets end a non-blocking init, split or group, can end it.
 * `splitShare = 1`: a split shares its parent's resources (buffers, NVLS
 * memory on NVSwitch machines) instead of taking its own, five communicators
 * a rank would otherwise each reserve.
 *
 * Each enqueued call gets two CUDA events on its stream: one before it (its
 * start: the stream reached it, what was queued before it has run) and one
 * after (its end). The watchdog's poll marks the flight record's entries
 * started and completed as they fire, so a record tells a call "queued
 * behind compute" (never started) from one "inside NCCL" (started, not
 * ended).
 *
 * The lock: every NCCL call on a communicator, and the abort, are made with
 * it held, and `aborted` checked first; a call that finds the communicators
 * aborted returns USP_ERR_RANK_FAILED without touching them. The watchdog's
 * poll only tries the lock (a main thread stuck while holding it must not
 * stall the watchdog); an abort that waits for it forever is ended by the
 * watchdog's end timer. */
#ifndef USP_NCCL_PROCESS_H
#define USP_NCCL_PROCESS_H

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "runtimes/process/mpi_launch.h"

typedef struct nccl_process nccl_process;

/* The NCCL state of this process on GPU `device` of cuda backend `backend`,
 * behind the safety net `guard` (set asynchronous by this call; it must
 * outlive the process state). A backend that is not cuda is USP_ERR_RUNTIME. */
usp_status nccl_process_create(mpi_comm_process *guard, usp_backend_t *backend, int device, nccl_process **out);

/* The configuration of every communicator: non-blocking, splitShare. */
ncclConfig_t nccl_process_config(void);

/* The safety net the process was made behind. */
mpi_comm_process *nccl_process_guard(const nccl_process *p);

/* The process's cuda backend. */
usp_backend_t *nccl_process_backend(const nccl_process *p);

/* The process's GPU. */
int nccl_process_device(const nccl_process *p);

/* Takes the lock for a call on a communicator; USP_ERR_RANK_FAILED naming `what` (and nothing held) once
 * the communicators were aborted. */
usp_status nccl_process_lock(nccl_process *p, const char *what);

/* Gives the lock back. */
void nccl_process_unlock(nccl_process *p);

/* Keeps `comm` (made with the lock held: call it holding the lock) so that an abort reaches it. */
usp_status nccl_process_keep_locked(nccl_process *p, ncclComm_t comm);

/* Waits, polling ncclCommGetAsyncError without the lock held between polls, until `comm` has done
 * what its last call started (ncclInProgress no more); `what` names the call in errors. */
usp_status nccl_process_wait(nccl_process *p, ncclComm_t comm, const char *what);

/* Records the start event of a call about to be enqueued on `stream`, with the lock held; *slot is its place. */
usp_status nccl_process_call_begins(nccl_process *p, cudaStream_t stream, int *slot);

/* The call of `slot`, now enqueued: its end event, and what its record entry (`entry`, 0: none) and a
 * timeout say of it (fingerprint `fp`). Takes the lock itself. */
usp_status nccl_process_call_enqueued(nccl_process *p, int slot, cudaStream_t stream, uint64_t entry,
                                      const usp_comm_fingerprint *fp);

/* The watchdog's poll (mpi_watchdog_poll_fn over a nccl_process): marks entries started and completed,
 * reports NCCL's asynchronous errors and calls the GPU has not finished after timeout_s. Aborts nothing. */
usp_status nccl_process_poll(void *process, double timeout_s, char *why, size_t why_size);

/* The end of a rank's run: waits for every enqueued call, then asks each
 * communicator for an asynchronous error. */
usp_status nccl_process_finish(nccl_process *p);

/* Aborts every communicator of the process (ncclCommAbort), once (mpi_watchdog_abort_fn over a
 * nccl_process: the launch's abort calls it after the record is written). */
void nccl_process_abort(void *process);

/* Forgets `comm` and ends it: finalised (polled) and destroyed, or left alone once aborted (the abort
 * freed it). */
void nccl_process_close(nccl_process *p, ncclComm_t comm);

/* Closes the communicators still open and frees the state (NULL: nothing). */
void nccl_process_destroy(nccl_process *p);

#endif
