/* Looking things up in a trace for the diagrams (internal to viz/): the
 * event of one rank's k-th call on a named group, and what it sent to whom. */
#ifndef USP_VIZ_TRACE_QUERY_H
#define USP_VIZ_TRACE_QUERY_H

#include <stdint.h>

#include "core/trace/trace.h"

/* The communication event of world rank `rank` that is its call number `seq`
 * on the group named `group`, or NULL when the trace has none. */
const usp_trace_event *viz_trace_find(const usp_trace_t *t, int rank, const char *group, uint64_t seq);

/* Bytes event `e` sent to world rank `peer` (0 when none). */
uint64_t viz_trace_bytes_to(const usp_trace_t *t, const usp_trace_event *e, int peer);

/* One more than the largest rank in any event (communication or compute): the world size the trace shows. */
int viz_trace_world(const usp_trace_t *t);

#endif
