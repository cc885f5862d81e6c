/* Room core/safety/: the safety net around any communicator: injected faults
 * (comm_fault.h), call fingerprints (comm_fingerprint.h), this decorator that applies
 * both, flight records and their recorder (flight_record.h, flight_recorder.h), deadlock
 * and mismatch reports (comm_report.h), and usp postmortem (postmortem.h). It may use:
 * comm/, core/ (ops), base/, trace/.
 *
 * A communicator that wraps any other (the simulator's, NCCL's, MPI's) and
 * adds what every backend needs the same way: fault injection (--inject,
 * core/safety/comm_fault.h) and call fingerprints (core/safety/comm_fingerprint.h).
 *
 * Each call on a wrapped handle is counted per rank (splits are setup, not
 * counted), checked against the faults, fingerprinted and issued on the inner
 * handle, the way a profiling layer (PMPI, NCCL's profiler plugin) sits
 * between the program and the library. A fault changes the call before the
 * backend sees it: skip drops it, swap holds a collective back until the next
 * one has completed, size changes its count, group issues it on another of the
 * rank's groups, crash fails it and every later call of the rank with
 * USP_ERR_RANK_FAILED. The backend learns of a crash from
 * usp_comm_decorator_crashed, so its report names the dead rank.
 *
 * One decorator serves every rank of a process (all W in the simulator, one
 * under NCCL); calls of different ranks must not overlap in time (the
 * simulator runs one rank at a time). */
#ifndef USP_COMM_DECORATOR_H
#define USP_COMM_DECORATOR_H

#include "core/safety/comm_fault.h"
#include "core/safety/comm_fingerprint.h"

typedef struct usp_comm_decorator usp_comm_decorator;

/* A decorator for world ranks 0..n_ranks-1 that injects `faults` (copied; NULL
 * when n_faults is 0). A fault on a rank outside the world is USP_ERR_CONFIG. */
usp_status usp_comm_decorator_create(const usp_fault *faults, int n_faults, int n_ranks, usp_comm_decorator **out);

/* Wraps `inner`, a handle of any backend, into *out, which then owns it
 * (destroying *out destroys `inner`); a split of *out gives wrapped children.
 * On failure `inner` stays the caller's. */
usp_status usp_comm_decorator_wrap(usp_comm_decorator *d, usp_comm_t *inner, usp_comm_t **out);

/* The run was aborted: from now on calls go to the backend untouched and
 * uncounted (it answers them with its abort), so no fault fires after the
 * report that ended the run. */
void usp_comm_decorator_stop(usp_comm_decorator *d);

/* Counted calls world rank `rank` made so far (its skipped ones included). */
uint64_t usp_comm_decorator_calls(const usp_comm_decorator *d, int rank);

/* 1 when `rank` died of an injected crash, with the call it died at (*at) and
 * which of its counted calls that was (*call); either may be NULL. */
int usp_comm_decorator_crashed(const usp_comm_decorator *d, int rank, usp_comm_fingerprint *at, uint64_t *call);

/* 1 while `rank` is inside a call (*fp: that call), else 0 (*fp: its last call;
 * op -1 before the first): what a watchdog reports of a rank that hangs. */
int usp_comm_decorator_current_call(const usp_comm_decorator *d, int rank, usp_comm_fingerprint *fp);

/* One line per fault that fired, in order, "  rank 2: skip at its call 1,
 * all_to_all #1 on ulysses[0] (core/train/selftest.c:88)\n" ("" when none did). */
const char *usp_comm_decorator_injected(const usp_comm_decorator *d);

/* USP_OK when every fault on a rank of this process fired and changed its call;
 * else USP_ERR_CONFIG naming the first that did not (a test that expects a
 * failure would pass without it). A fault on a rank another process runs (mpi,
 * nccl) is that process's to judge. */
usp_status usp_comm_decorator_check_fired(const usp_comm_decorator *d);

/* Frees the decorator and the wrapped handles still open, but not their inner
 * handles: their backend frees those (NULL is a no-op). */
void usp_comm_decorator_destroy(usp_comm_decorator *d);

#endif
