/* Chrome trace event JSON of a trace: opens in Perfetto (ui.perfetto.dev)
 * and chrome://tracing.
 *
 * One process per rank (pid = world rank), two threads in each: tid 0
 * "compute" (one slice per compute op) and tid 1 "communication" (one slice
 * per call, from when the rank called to when its data had arrived, with a
 * nested "waiting for peers" slice until the last participant arrived).
 * Slices are B/E pairs, balanced and nested per (pid, tid). Point-to-point
 * transfers (send, sendrecv) get flow arrows (ph s -> f) from the sender's
 * slice to the receiver's. ts is in microseconds of the trace's clock: the
 * simulator's virtual time. */
#ifndef USP_VIZ_CHROME_TRACE_H
#define USP_VIZ_CHROME_TRACE_H

#include "core/status.h"
#include "core/trace.h"

/* The JSON text (malloc'd, NUL-terminated) of `t`'s events. */
usp_status viz_chrome_trace_text(const usp_trace_t *t, char **out);

/* Writes it to `path`, whole or not at all. */
usp_status viz_chrome_trace_write(const usp_trace_t *t, const char *path);

/* 1 when `path` ends in .json: a --trace FILE that gets Chrome trace JSON. */
int viz_trace_path_is_json(const char *path);

/* --trace FILE: Chrome trace JSON when FILE ends in .json, the plain text dump otherwise. */
usp_status viz_trace_write(const usp_trace_t *t, const char *path);

#endif
