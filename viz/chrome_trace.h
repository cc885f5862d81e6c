/* Chrome trace event JSON of a trace: opens in Perfetto (ui.perfetto.dev)
 * and chrome://tracing.
 *
 * One process per rank (pid = world rank), two threads in each: tid 0
 * "compute" (one slice per compute op) and tid 1 "communication" (one slice
 * per call, from when the rank called to when its data had arrived, with a
 * nested "waiting for peers" slice until the last participant arrived).
 * Slices are B/E pairs, balanced and nested per (pid, tid). Point-to-point
 * transfers (send, sendrecv) get flow arrows (ph s -> f) from the sender's
 * slice to the receiver's. A trained run's steps are a third thread, tid 2
 * "steps" (one "step N" slice each). ts is in microseconds of the trace's
 * clock: the simulator's virtual time, or on a real backend the seconds each
 * process measured since it started (docs/viz.md). otherData says which, and
 * under "usp_run" holds the options of the run that wrote it, so that
 * `usp plan --compare FILE` plans the same run (plan/compare.h). */
#ifndef USP_VIZ_CHROME_TRACE_H
#define USP_VIZ_CHROME_TRACE_H

#include "core/base/status.h"
#include "core/trace/trace.h"

/* The key of the run's options in otherData. */
#define VIZ_TRACE_RUN_KEY "usp_run"

/* What a file says of its run beside the events (otherData). */
typedef struct viz_trace_run {
    const char *generator;    /* "usp train" (NULL: "usp viz") */
    const char *clock;        /* what ts counts (NULL: the simulator's virtual time) */
    const char *options_json; /* the text of a JSON object: the run's options (NULL: none) */
} viz_trace_run;

/* The JSON text (malloc'd, NUL-terminated) of `t`'s events. */
usp_status viz_chrome_trace_text(const usp_trace_t *t, char **out);

/* Writes it to `path`, whole or not at all. */
usp_status viz_chrome_trace_write(const usp_trace_t *t, const char *path);

/* viz_chrome_trace_write with what `run` says of the run in otherData (NULL: the defaults). */
usp_status viz_chrome_trace_write_run(const usp_trace_t *t, const char *path, const viz_trace_run *run);

/* 1 when `path` ends in .json: a --trace FILE that gets Chrome trace JSON. */
int viz_trace_path_is_json(const char *path);

/* --trace FILE: Chrome trace JSON when FILE ends in .json, the plain text dump otherwise. */
usp_status viz_trace_write(const usp_trace_t *t, const char *path);

/* viz_trace_write with `run` in the Chrome trace's otherData (the text dump has none). */
usp_status viz_trace_write_run(const usp_trace_t *t, const char *path, const viz_trace_run *run);

#endif
