/* The communicator over NCCL (core/comm/comm_impl.h): one process per GPU, each
 * call one NCCL call (or one NCCL group) enqueued on the CUDA stream the op
 * names (NULL: the cuda backend's default stream, usp_cuda_stream), and the
 * call returns once enqueued: the contract of core/comm/comm.h, nothing stricter.
 *
 *   all_to_all, all_to_all_v  grouped ncclSend/ncclRecv (nccl_translate.h: per-peer
 *                             counts and offsets, zero counts left out)
 *   all_gather, reduce_scatter, all_reduce, broadcast   NCCL's own, sum and max
 *                             over f32, f64, i64, bf16 (NCCL's order of summation:
 *                             not the simulator's bits, within rounding of them)
 *   send, recv                ncclSend, ncclRecv; sendrecv both in one group
 *   barrier                   a one-float ncclAllReduce on the stream: work
 *                             enqueued after it there waits for every member
 *   split                     ncclCommSplit (NCCL >= 2.18) beside MPI_Comm_split
 *                             on the same members, which names them in world ranks
 *
 * Every call goes through mpi_launch_issue (backends/launch/mpi_launch.h), the
 * path of the mpi communicator: --inject's decorator above, the flight
 * recorder and the watchdog, --check-collectives' fingerprint exchange over
 * MPI before the NCCL call. Since a call only enqueues, the host's watch
 * ends when it returns; the device's part is watched by a CUDA event
 * recorded after each call: the watchdog's poll (nccl_process_poll) completes
 * the recorder's entries as their events complete, and aborts every
 * communicator of the process (ncclCommAbort) when one reports an
 * asynchronous error (ncclCommGetAsyncError) or a call is not complete after
 * --timeout; the watchdog then writes the flight record and ends the process.
 *
 * Errors name the NCCL call, the op, the group and its call site, with
 * NCCL's own last error text; they are USP_ERR_RANK_FAILED (exit 4). */
#ifndef USP_NCCL_COMM_H
#define USP_NCCL_COMM_H

#include <mpi.h>

#include "backends/launch/mpi_launch.h"
#include "core/comm/comm_impl.h"

typedef struct nccl_process nccl_process;

/* The NCCL state of this process on GPU `device` of cuda backend `backend`,
 * behind the safety net `guard` (set asynchronous by this call; it must
 * outlive the process state). */
usp_status nccl_process_create(mpi_comm_process *guard, usp_backend_t *backend, int device, nccl_process **out);

/* The world group ("world"): ncclCommInitRank of every rank of `comm`, with
 * the ncclUniqueId rank 0 makes broadcast over MPI. */
usp_status nccl_comm_world(nccl_process *p, MPI_Comm comm, usp_comm_t **out);

/* The watchdog's poll (mpi_watchdog_poll_fn over a nccl_process). */
usp_status nccl_process_poll(void *process, double timeout_s, char *why, size_t why_size);

/* The end of a rank's run: waits for every enqueued call, then asks each
 * communicator for an asynchronous error. */
usp_status nccl_process_finish(nccl_process *p);

/* Aborts every communicator of the process (ncclCommAbort): after a failure,
 * when peers may never come. */
void nccl_process_abort(nccl_process *p);

/* Destroys the communicators still open and frees the state (NULL: nothing). */
void nccl_process_destroy(nccl_process *p);

#endif
