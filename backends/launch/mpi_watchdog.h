/* The watchdog of one rank's process: what keeps a broken schedule on a real
 * backend from hanging until someone kills it.
 *
 * A thread of its own (it never calls MPI) looks ten times a second at the
 * call the rank is in. A call not complete after --timeout seconds writes the
 * rank's flight recorder (core/safety/flight_recorder.h) to --dump-dir, says so on
 * stderr and ends the process with exit 3 (a hang). A SIGTERM or SIGINT (the
 * launcher ending the job because another rank failed or died, or a user's
 * Ctrl-C) writes the recorder too, then ends the process with exit 4 (a rank
 * failed; after SIGTERM only a few seconds later, leaving the launcher time to
 * end the job first: mpirun kills every process once one exits with an error,
 * which would cut the others' dumps short) or 130. Each rank's watchdog acts
 * alone, so every rank stuck in a call ends within the timeout even when the
 * launcher does not end the job (srun without --kill-on-bad-exit), and
 * `usp postmortem DIR` then reads the files of the ranks that wrote one.
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

typedef struct mpi_watchdog mpi_watchdog;

/* Catches SIGTERM and SIGINT and starts the watchdog of world rank `rank`: calls longer than timeout_s (> 0)
 * end the process; the recorder (owned by the caller, outliving the watchdog)
 * is written to dump_dir (NULL: not written) when it fires. */
usp_status mpi_watchdog_start(int rank, double timeout_s, const char *dump_dir, usp_flight_recorder *recorder,
                              mpi_watchdog **out);

/* The rank enters a call (fingerprint fp) at `t` seconds (NULL watchdog: nothing); returns
 * the call's flight recorder entry (0 when the recorder could not keep it). */
uint64_t mpi_watchdog_enter(mpi_watchdog *w, const usp_comm_fingerprint *fp, double t);

/* The rank's call returned at `t` with `status`; `completed` 0: it is only enqueued (NCCL), and
 * whoever sees it done completes its recorder entry (usp_flight_recorder_completed). */
void mpi_watchdog_leave(mpi_watchdog *w, double t, usp_status status, int completed);

/* Looked at every tick beside the host's call, on the watchdog's thread: what
 * the host cannot see (NCCL's asynchronous errors, enqueued calls the device
 * has not finished after timeout_s). USP_OK, or USP_ERR_COLLECTIVE (a hang)
 * or USP_ERR_RANK_FAILED (an error) with `why` written, once the poll has
 * aborted what it must: the watchdog then dumps the record and ends the
 * process with that code. */
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
