/* Room core/trace/: the record of a run: events of calls and ops (this file), their
 * packing for a gather (trace_pack.h), the names of communication kinds they carry
 * (comm_kind.h). It may use: base/.
 *
 * Trace events: one per completed communication call on every rank, and
 * (when the backend reports costs to a clock, as the simulator does) one
 * compute span per op.
 *
 * Kept in memory in the order calls complete (deterministic in the
 * simulator), written out as plain text here; the viz module turns the same
 * events into Chrome trace JSON and Graphviz diagrams. Communication events
 * and compute spans are kept in two lists, so code that counts calls or
 * bytes (usp_trace_count, usp_trace_at) never sees a compute span. */
#ifndef USP_TRACE_H
#define USP_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "core/base/status.h"

typedef struct usp_trace usp_trace_t;

typedef struct usp_trace_peer {
    int peer;       /* world rank */
    uint64_t bytes; /* sent to it */
} usp_trace_peer;

typedef enum usp_trace_type {
    USP_TRACE_COMM = 0,   /* a communication call (the default: zero) */
    USP_TRACE_COMPUTE,    /* a compute op: name, flops, mem_bytes, t_start..t_end */
} usp_trace_type;

typedef struct usp_trace_event {
    int rank;             /* world rank */
    int group;            /* index of the group's name (usp_trace_group_name) */
    int kind;             /* usp_comm_kind (core/trace/comm_kind.h) */
    uint64_t seq;         /* 1-based index of the call on that group, on that rank */
    const char *file;     /* call site */
    int line;
    double t_post, t_start, t_end; /* virtual seconds (sim) */
    uint64_t bytes_sent;  /* sum over peers */
    size_t first_peer, n_peers; /* the event's peers in the trace's peer table */
    usp_trace_type type;  /* compute spans have no group, kind, seq, call site or peers */
    const char *name;     /* compute: the op ("gemm", "attention_forward"), static storage */
    double flops, mem_bytes; /* compute: its cost as the backend reported it */
} usp_trace_event;

/* A new, empty trace. */
usp_status usp_trace_create(usp_trace_t **out);

/* Frees the trace (NULL is a no-op). */
void usp_trace_destroy(usp_trace_t *t);

/* Index of `name` among the trace's group names (added if new), or -1 out of memory. */
int usp_trace_intern_group(usp_trace_t *t, const char *name);

/* The group name with index `group`. */
const char *usp_trace_group_name(const usp_trace_t *t, int group);

/* Appends an event and its peers (event->first_peer and n_peers are set here). */
usp_status usp_trace_record(usp_trace_t *t, const usp_trace_event *event, const usp_trace_peer *peers,
                            size_t n_peers);

/* Number of communication events, and event i. */
size_t usp_trace_count(const usp_trace_t *t);
const usp_trace_event *usp_trace_at(const usp_trace_t *t, size_t i);

/* Appends a compute span of `rank` from t_start to t_end (virtual seconds);
 * `name` must have static storage (the op names of core/ops/op_kinds.c do). */
usp_status usp_trace_record_compute(usp_trace_t *t, int rank, const char *name, double t_start, double t_end,
                                    double flops, double mem_bytes);

/* Number of compute spans, and span i (type USP_TRACE_COMPUTE). */
size_t usp_trace_compute_count(const usp_trace_t *t);
const usp_trace_event *usp_trace_compute_at(const usp_trace_t *t, size_t i);

/* One training step of one rank: [t_start, t_end] on the trace's clock. Steps
 * frame the other events, so a comparison can take one step (plan/compare.h). */
typedef struct usp_trace_step {
    int rank;
    int64_t step;         /* 1-based */
    double t_start, t_end;
} usp_trace_step;

/* Appends step `step` of `rank`, from t_start to t_end. */
usp_status usp_trace_record_step(usp_trace_t *t, int rank, int64_t step, double t_start, double t_end);

/* Number of steps recorded, and step i. */
size_t usp_trace_step_count(const usp_trace_t *t);
const usp_trace_step *usp_trace_step_at(const usp_trace_t *t, size_t i);

/* A copy of `text` that lives as long as the trace (the same pointer for the same text), or NULL out of
 * memory: the op names and call sites of events that arrive from other processes (core/trace/trace_pack.h). */
const char *usp_trace_intern_text(usp_trace_t *t, const char *text);

/* The peers of an event. */
const usp_trace_peer *usp_trace_peers(const usp_trace_t *t, const usp_trace_event *event);

/* Total bytes `rank` sent over all events. */
uint64_t usp_trace_bytes_sent(const usp_trace_t *t, int rank);

/* Writes one line per communication event to `path` (temporary name, then renamed). */
usp_status usp_trace_write_text(const usp_trace_t *t, const char *path);

#endif
