/* The watchdog of one rank's process: what keeps a broken schedule on a real
 * backend from hanging until someone kills it.
 *
 * A thread of its own (it never calls MPI) looks ten times a second at the
 * call the rank is in. A call not complete after --timeout seconds ends the
 * process in this order, so that no step can lose an earlier one:
 *   1. a timer is armed: whatever follows, the process ends (_exit) at most
 *      MPI_WATCHDOG_END_BOUND_S seconds later (a dump on a stuck filesystem,
 *      an ncclCommAbort that never returns, cannot hang it);
 *   2. the rank's flight recorder (core/safety/flight_recorder.h) is written to
 *      --dump-dir, first, before anything touches a communicator;
 *   3. the other ranks are told: the file DIR/usp-abort (MPI_WATCHDOG_MARKER)
 *      names this rank, its exit code and why; every other rank's watchdog
 *      looks for it each tick, and one that finds it dumps its own record
 *      (reason "peer") and ends the same way with the same exit code;
 *   4. the abort hook (mpi_watchdog_set_abort) ends the rank's communicators:
 *      nothing touches them after it;
 *   5. it waits (at most MPI_WATCHDOG_PEER_WAIT_S) for every rank's record to
 *      be in DIR, then exits 3 (a hang): the first exit makes mpirun kill the
 *      job, which must not cut a slower rank's dump short.
 * A SIGTERM or SIGINT (the launcher ending the job because another rank
 * failed or died, or a user's Ctrl-C) writes the record too, then ends the
 * process with exit 4 (a rank failed; after SIGTERM only a few seconds later,
 * leaving the launcher time to end the job first) or 130. Each rank's
 * watchdog also acts alone, so every rank stuck in a call ends within the
 * timeout even when neither the file (no --dump-dir) nor the launcher (srun
 * without --kill-on-bad-exit) tells it; `usp postmortem DIR` then reads the
 * files of the ranks that wrote one.
 *
 * Why a file for the side channel: the watchdog's thread may not call MPI
 * (MPI_THREAD_FUNNELED, and MPI may be what is stuck); the launcher's SIGTERM
 * comes only once a rank has exited, and not at all under srun without
 * --kill-on-bad-exit; the dump directory is known to every rank of both
 * launches (mpirun, usp's own self-launch, srun) and, for `usp postmortem` to
 * read the records, is shared by them anyway. Rank 0 removes a stale marker
 * before the launch's first collective (mpi_launch_start).
 *
 * Signals: a handler writes the signal to a pipe that the watchdog's thread
 * polls, whichever thread of the process (OpenMP's, MPI's) took it; the
 * record is written from the watchdog's thread (it locks and allocates). */
#ifndef USP_MPI_WATCHDOG_H
#define USP_MPI_WATCHDOG_H

#include <stdatomic.h>

#include "core/safety/comm_fingerprint.h"
#include "core/safety/comm_report.h"
#include "core/safety/flight_recorder.h"

/* The side channel: DIR/MPI_WATCHDOG_MARKER holds "CODE RANK WHY" of the first rank that ended the run. */
#define MPI_WATCHDOG_MARKER "usp-abort"
/* From the moment a watchdog decides to end its process, the process ends within this many seconds (plus
 * the SIGTERM linger): the dump, the abort and the wait for the others' records all fit in it or are cut. */
#define MPI_WATCHDOG_END_BOUND_S 8
/* How long a rank that ended the run waits for every other rank's record to be in DIR before it exits. */
#define MPI_WATCHDOG_PEER_WAIT_S 3

typedef struct mpi_watchdog mpi_watchdog;

/* Catches SIGTERM and SIGINT and starts the watchdog of world rank `rank` of `world_size`: calls longer
 * than timeout_s (> 0) end the process; the recorder (owned by the caller, outliving the watchdog)
 * is written to dump_dir (NULL: not written, and no side channel) when it fires. */
usp_status mpi_watchdog_start(int rank, int world_size, double timeout_s, const char *dump_dir,
                              usp_flight_recorder *recorder, mpi_watchdog **out);

/* What ends the rank's communicators (called once, after the record is written, from the watchdog's
 * thread or from mpi_watchdog_abort's caller; it may never return: the armed timer ends the process). */
typedef void (*mpi_watchdog_abort_fn)(void *ctx);

/* Sets the abort hook (NULL: none). */
void mpi_watchdog_set_abort(mpi_watchdog *w, mpi_watchdog_abort_fn abort, void *ctx);

/* The main thread's end after a failure, once its record is written: tells the other ranks (the marker,
 * with exit `code` and `why`), arms the timer (the process ends with `code` if the abort has not returned
 * within MPI_WATCHDOG_END_BOUND_S) and runs the abort hook; returns, disarmed, when the abort did. */
void mpi_watchdog_abort(mpi_watchdog *w, int code, const char *why);

/* The rank's current call was handed to the backend at `t` (MPI was called): its record entry is
 * "started"; a call posted and never started was queued behind something that did not end. */
void mpi_watchdog_started(mpi_watchdog *w, double t);

/* The rank enters a call (fingerprint fp) at `t` seconds (NULL watchdog: nothing); returns
 * the call's flight recorder entry (0 when the recorder could not keep it). */
uint64_t mpi_watchdog_enter(mpi_watchdog *w, const usp_comm_fingerprint *fp, double t);

/* The rank's call returned at `t` with `status`; `completed` 0: it is only enqueued (NCCL), and
 * whoever sees it done completes its recorder entry (usp_flight_recorder_completed). */
void mpi_watchdog_leave(mpi_watchdog *w, double t, usp_status status, int completed);

/* Looked at every tick beside the host's call, on the watchdog's thread: what
 * the host cannot see (NCCL's asynchronous errors, enqueued calls the device
 * has not finished after timeout_s). USP_OK, or USP_ERR_COLLECTIVE (a hang)
 * or USP_ERR_RANK_FAILED (an error) with `why` written; it aborts nothing
 * itself: the watchdog then dumps the record, runs the abort hook and ends
 * the process with that code. It must not block (a lock the main thread may
 * hold inside a stuck call: try it, and report nothing this tick). */
typedef usp_status (*mpi_watchdog_poll_fn)(void *ctx, double timeout_s, char *why, size_t why_size);

/* Sets (or, with NULL, clears: it returns once no poll runs) the watchdog's poll. */
void mpi_watchdog_set_poll(mpi_watchdog *w, mpi_watchdog_poll_fn poll, void *ctx);

/* SIGINT or SIGTERM then asks the run to stop (writes the signal to *stop) instead of ending the
 * process; the watchdog still ends it, as before, if a call stays blocked STOP_GRACE seconds after
 * (the launcher ending the job for a failed rank), or at a second signal. NULL: signals end it. */
void mpi_watchdog_set_stop(mpi_watchdog *w, atomic_int *stop);

/* The rank ended well after a signal asked it to stop: the record the signal wrote is stale, remove it. */
void mpi_watchdog_forget(mpi_watchdog *w);

/* Writes the recorder to the dump directory now, with `reason` (a failed or
 * crashed rank, from its own thread); USP_OK when there is no directory. */
usp_status mpi_watchdog_dump(mpi_watchdog *w, const char *reason);

/* Stops the thread; calls after it are not watched (NULL is a no-op). */
void mpi_watchdog_stop(mpi_watchdog *w);

#endif
