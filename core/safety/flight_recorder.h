/* The flight recorder of one rank: the last calls it issued on its
 * communicators, what each group's count of issued calls is, and how the rank
 * ended, kept so that a process that hangs or dies leaves a record another
 * process can read (`usp postmortem DIR`, core/safety/postmortem.h).
 *
 * Under a real backend (MPI, NCCL) no process sees the others' calls, so the
 * simulator's deadlock report cannot be made while the run hangs. What it
 * needs is small, though: each rank's current call and, per group, how many
 * calls the rank has issued on it. Matching is NCCL's and MPI's (the k-th
 * call a rank issues on a group meets the k-th of every other member), so
 * from those counts alone a reader finds whom each blocked rank waits for.
 *
 * Threads: the rank's main thread records (post, started, completed), a
 * watchdog thread dumps while the main thread may be blocked inside the
 * backend. One mutex guards everything; no call blocks for longer than a
 * copy. Nothing here is async-signal-safe (it allocates and locks): on
 * SIGTERM, have the handler wake the watchdog (sigwait, a pipe) and dump
 * from that thread. The recorder belongs below the fault-injection decorator
 * (core/safety/comm_decorator.h), in the backend's own communicator: it should see
 * the calls the backend sees (a skipped call is not issued, so not counted).
 *
 * The dump is DIR/rank-<R>.usp-flight.json (USP_FLIGHT_FILE_FORMAT), JSON
 * written whole or not at all (core/base/atomic_file.h); its fields are listed in
 * docs/FORMATS.md ("Flight records"). */
#ifndef USP_FLIGHT_RECORDER_H
#define USP_FLIGHT_RECORDER_H

#include <stdint.h>

#include "core/safety/comm_fingerprint.h"

/* The dump of world rank R is DIR/rank-R.usp-flight.json. */
#define USP_FLIGHT_FILE_FORMAT "rank-%d.usp-flight.json"
#define USP_FLIGHT_FILE_PATTERN "rank-<R>.usp-flight.json"
/* The "format" and "version" fields of a dump; a reader refuses others. */
#define USP_FLIGHT_FORMAT_NAME "usp-flight-record"
#define USP_FLIGHT_FORMAT_VERSION 1
/* Entries kept when create is given capacity 0. */
#define USP_FLIGHT_DEFAULT_CAPACITY 256

typedef struct usp_flight_recorder usp_flight_recorder;

/* A recorder for world rank `world_rank` of `world_size` keeping the last
 * `capacity` calls (0: USP_FLIGHT_DEFAULT_CAPACITY). */
usp_status usp_flight_recorder_create(int world_rank, int world_size, int capacity, usp_flight_recorder **out);

/* Frees the recorder (NULL is a no-op). No other thread may be using it. */
void usp_flight_recorder_destroy(usp_flight_recorder *r);

/* Registers a group the rank opened (world, ulysses[0], ring[1], ...): its
 * `size` members' world ranks and the rank's index among them. A name given
 * twice, or more than 64 groups, is USP_ERR_RUNTIME. */
usp_status usp_flight_recorder_add_group(usp_flight_recorder *r, const char *name, int size, const int *world_ranks,
                                         int my_index);

/* The rank issues the call `fp` on group fp->group at time `t` (seconds on
 * the backend's clock); *id names it for started/completed. The group's count
 * of issued calls becomes fp->seq (when fp->seq is 0: goes up by one, and the
 * entry takes that seq). An unregistered group is USP_ERR_RUNTIME naming it. */
usp_status usp_flight_recorder_post(usp_flight_recorder *r, const usp_comm_fingerprint *fp, double t, uint64_t *id);

/* Call `id` started (optional): handed to the backend (MPI), or reached on its stream (NCCL's start
 * event); the backend's own definition, stated by usp_flight_recorder_records_starts. */
void usp_flight_recorder_started(usp_flight_recorder *r, uint64_t id, double t);

/* The backend calls usp_flight_recorder_started for every call: the record says so ("starts": true),
 * and a call posted but never started reads as queued rather than unknown. */
void usp_flight_recorder_records_starts(usp_flight_recorder *r);

/* Call `id` is complete; the rank is no longer in it. */
void usp_flight_recorder_completed(usp_flight_recorder *r, uint64_t id, double t);

/* Call `id` was not issued after all (a layer above dropped it): it stays in
 * the log as dropped and no longer counts on its group. */
void usp_flight_recorder_dropped(usp_flight_recorder *r, uint64_t id, double t);

/* The rank's main function returned `result` (USP_OK or an error with
 * message `error`, which may be NULL) at time t. */
void usp_flight_recorder_exited(usp_flight_recorder *r, usp_status result, const char *error, double t);

/* The rank died of an injected crash at call `at`, its `call`-th counted call
 * (usp_comm_decorator_crashed gives both), with message `error` (may be NULL). */
void usp_flight_recorder_crashed(usp_flight_recorder *r, const usp_comm_fingerprint *at, uint64_t call,
                                 const char *error, double t);

/* Replaces the injected-fault lines of the dump with `lines`
 * (usp_comm_decorator_injected: "  rank 2: skip at its call 1, ...\n" each). */
usp_status usp_flight_recorder_set_injected(usp_flight_recorder *r, const char *lines);

/* The record as JSON text (malloc'd into *json; free it): what dump writes,
 * for a record sent over the network instead. `reason`: why it was taken
 * ("timeout", "sigterm", "exit", "crash", ...). */
usp_status usp_flight_recorder_to_json(usp_flight_recorder *r, const char *reason, char **json);

/* Writes the record to DIR/rank-<R>.usp-flight.json, whole or not at all
 * (DIR must exist). Safe from a watchdog thread while the rank is blocked. */
usp_status usp_flight_recorder_dump(usp_flight_recorder *r, const char *dir, const char *reason);

#endif
