/* A flight record as data: what one rank's flight recorder
 * (core/safety/flight_recorder.h) knew when it was dumped, and its JSON form, both
 * ways. The recorder writes through usp_flight_record_to_json; `usp
 * postmortem` reads dumps back with usp_flight_record_parse, which refuses a
 * file that is cut short, not JSON, or not a flight record with a message
 * naming the file and the field. */
#ifndef USP_FLIGHT_RECORD_H
#define USP_FLIGHT_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "core/safety/comm_fingerprint.h"

typedef enum usp_flight_call_state {
    USP_FLIGHT_POSTED,     /* issued, not (known to be) started */
    USP_FLIGHT_STARTED,    /* all parties there, data moving */
    USP_FLIGHT_COMPLETED,
    USP_FLIGHT_DROPPED,    /* not issued after all (a layer above dropped it) */
    USP_FLIGHT_CALL_STATE_COUNT
} usp_flight_call_state;

typedef enum usp_flight_rank_state {
    USP_FLIGHT_RUNNING,    /* not in a call */
    USP_FLIGHT_BLOCKED,    /* in a call that has not completed: `current` */
    USP_FLIGHT_EXITED,     /* its main function returned `result` */
    USP_FLIGHT_CRASHED,    /* died of an injected crash at `crash_at` */
    USP_FLIGHT_RANK_STATE_COUNT
} usp_flight_rank_state;

/* One call in the log. */
typedef struct usp_flight_entry {
    uint64_t id;                 /* from 1, in the order the rank posted its calls */
    usp_comm_fingerprint call;   /* site.file: a string the record (or the program) holds */
    uint64_t collective_seq;     /* a collective: its index among the rank's collectives on the group; else 0 */
    usp_flight_call_state state;
    double posted, started, completed; /* seconds on the backend's clock; -1: not (yet) */
} usp_flight_entry;

/* One group the rank opened. */
typedef struct usp_flight_group {
    char name[USP_COMM_NAME_MAX];
    int size, my_index;
    int *members;                /* [size] world ranks */
    uint64_t calls_issued;       /* calls the rank issued on it (the seq of its last one) */
    uint64_t collectives_issued; /* of which collectives */
} usp_flight_group;

typedef struct usp_flight_record {
    int world_rank, world_size;
    char *reason;                /* why it was dumped: "timeout", "sigterm", "exit", "crash", ... */
    usp_flight_rank_state state;
    usp_status result;           /* exited: what its main returned */
    char *error;                 /* exited with an error or crashed: the message ("" when none) */
    double clock;                /* the last time the recorder was given */
    uint64_t calls;              /* calls posted, splits aside (dropped ones included) */
    int starts;                  /* 1: the backend marks each call started (mpi: handed to MPI; nccl: the stream
                                    reached it), so a posted call never started was queued; 0: unknown */
    int has_current;             /* blocked: `current` is the call it is in */
    usp_flight_entry current;
    usp_comm_fingerprint crash_at; /* crashed: the call it died at (op -1 otherwise) */
    uint64_t crash_call;         /* crashed: which of its counted calls that was */
    usp_flight_group *groups;
    int n_groups;
    usp_flight_entry *entries;   /* the last calls, oldest first */
    size_t n_entries;
    uint64_t entries_lost;       /* older calls no longer in the log */
    char *injected;              /* lines of the faults that fired ("  rank 2: skip at ...\n" each), or "" */
    char **strings;              /* parsed records: the call-site files the fingerprints point to */
    size_t n_strings;
} usp_flight_record;

/* "posted", "started", "completed", "dropped". */
const char *usp_flight_call_state_name(usp_flight_call_state s);

/* "running", "blocked", "exited", "crashed". */
const char *usp_flight_rank_state_name(usp_flight_rank_state s);

/* The record as JSON text, with `reason` in place of rec->reason when not
 * NULL (malloc'd into *json; free it). */
usp_status usp_flight_record_to_json(const usp_flight_record *rec, const char *reason, char **json);

/* Parses a record from `json`; `where` (a file name) starts every message.
 * Not JSON, another format or version, or a field missing or out of range:
 * USP_ERR_CONFIG naming `where` and the field. Free *out with
 * usp_flight_record_free (also after a failure). */
usp_status usp_flight_record_parse(const char *json, const char *where, usp_flight_record *out);

/* Reads and parses the file at `path` (as usp_flight_record_parse). */
usp_status usp_flight_record_load(const char *path, usp_flight_record *out);

/* Frees what a parsed record holds (a zeroed one is fine). */
void usp_flight_record_free(usp_flight_record *rec);

#endif
