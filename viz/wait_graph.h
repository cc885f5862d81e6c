/* The wait-for picture of a deadlock, collective mismatch or rank failure
 * report (core/safety/comm_report.h, from any backend): every rank with its state and
 * call site, an arrow from each waiting rank to each rank it waits for, the report's cycle
 * in red, the missing participant (a rank that exited or crashed while others
 * wait for it) red, and the two ranks of a mismatch joined by an orange line.
 * Above 2 x VIZ_DETAIL_MAX_RANKS ranks or VIZ_MAX_ARROWS waits, the ranks
 * that explain the report stay alone and the others share one box per
 * situation (same state, same call on groups of one family), so a W = 64
 * deadlock is a handful of boxes. */
#ifndef USP_VIZ_WAIT_GRAPH_H
#define USP_VIZ_WAIT_GRAPH_H

#include "core/safety/comm_report.h"
#include "core/base/strbuf.h"

/* DOT of the wait-for graph `g` (kind USP_REPORT_NONE: an error). */
usp_status viz_dot_wait_graph(const usp_wait_graph *g, usp_strbuf *dot);

/* The picture of `g` written to `path` (its format by its name: viz_write_file), named `option` in errors. */
usp_status viz_write_wait_graph(const usp_wait_graph *g, const char *option, const char *path);

#endif
