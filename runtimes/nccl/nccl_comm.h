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
 * Every call goes through mpi_launch_issue (runtimes/process/mpi_launch.h), the
 * path of the mpi communicator: --inject's decorator above, the flight
 * recorder and the watchdog, --check-collectives' fingerprint exchange over
 * MPI before the NCCL call. The communicators are non-blocking, the calls
 * polled until enqueued, each between a start and an end CUDA event whose
 * firing the watchdog's poll records (nccl_process.h); on a timeout or an
 * asynchronous error the watchdog writes the flight record first, then the
 * launch's abort calls nccl_process_abort (ncclCommAbort of every
 * communicator, after which nothing touches them), bounded by the watchdog's
 * end timer.
 *
 * Errors name the NCCL call, the op, the group and its call site, with
 * NCCL's own last error text; they are USP_ERR_RANK_FAILED (exit 4). */
#ifndef USP_NCCL_COMM_H
#define USP_NCCL_COMM_H

#include <mpi.h>

#include "runtimes/process/mpi_launch.h"
#include "runtimes/nccl/nccl_process.h"
#include "core/comm/comm_impl.h"

/* The world group ("world"): rank 0's ncclUniqueId broadcast over MPI, then
 * ncclCommInitRankConfig of every rank of `comm` (non-blocking, polled): both
 * watched steps of the "init" group (mpi_launch_init_enter), so a rank that
 * never comes, or an init that never ends, is a hang the watchdog ends. */
usp_status nccl_comm_world(nccl_process *p, MPI_Comm comm, usp_comm_t **out);

#endif
