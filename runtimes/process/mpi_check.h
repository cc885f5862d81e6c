/* --check-collectives on a real backend: before each call, its parties
 * exchange call fingerprints (core/safety/comm_fingerprint.h), so that a call the
 * others do not make stops the run with the simulator's mismatch report
 * (core/safety/comm_report.h, exit 3) before MPI can hang on it or move the wrong
 * bytes.
 *
 * The exchange is pairwise: a rank sends its call's fingerprint to each rank
 * the call involves (the group's other members; the peers of a send, receive
 * or sendrecv) and receives theirs, on a duplicate of the world
 * communicator. MPI keeps the messages of one sender to one receiver in
 * order, so the k-th fingerprint rank a receives from rank b is b's k-th call
 * that involves a: two ranks must agree on the sequence of calls they share,
 * which is what NCCL's matching needs too (the k-th collective on a group is
 * one collective). A skipped call, a swapped pair, a call on the wrong group
 * or with the wrong count then shows as two different fingerprints at once;
 * only a rank that never calls again (crashed, or looping) leaves the others
 * waiting, for the watchdog. The cost is one small message to and from each
 * party per call (bench/mpi_comm.c measures it). */
#ifndef USP_MPI_CHECK_H
#define USP_MPI_CHECK_H

#include <mpi.h>

#include "core/safety/comm_decorator.h"
#include "core/comm/comm_impl.h"
#include "core/base/strbuf.h"

typedef struct mpi_check mpi_check;

/* A checker for this process's rank of `world`, whose reports list the
 * faults `decorator` injected (NULL: none) and clocks from MPI_Wtime() - t0. */
usp_status mpi_check_create(MPI_Comm world, const usp_comm_decorator *decorator, double t0, mpi_check **out);

/* Exchanges `fp`, the fingerprint of `op` on `c` (for a collective, the
 * `collective`-th on c: collectives match by their own count, as the point to
 * point calls between them may differ by rank), with the call's other
 * parties: USP_OK when they all make the same call; USP_ERR_COLLECTIVE with a
 * report (mpi_check_report) when one does not. */
usp_status mpi_check_call(mpi_check *k, const usp_comm_t *c, const usp_comm_op *op, const usp_comm_fingerprint *fp,
                          uint64_t collective);

/* The mismatch report, on the one rank of the two sides that prints it ("" elsewhere). */
const char *mpi_check_report(const mpi_check *k);

/* Frees the checker (NULL is a no-op). */
void mpi_check_destroy(mpi_check *k);

#endif
