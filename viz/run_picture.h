/* --dot of a finished run: the picture that explains it. */
#ifndef USP_VIZ_RUN_PICTURE_H
#define USP_VIZ_RUN_PICTURE_H

#include "core/runtime/runtime.h"

/* Writes to `path` the wait-for graph when the run ended in a report
 * (deadlock, mismatch, rank failure), else the traffic map (with `title` and
 * `caption`, arrows coloured by the modelled cluster's links) when `run`
 * succeeded, else nothing; *drawn (may be NULL) names what was written
 * ("wait-for picture", "traffic map") or is NULL. Both pictures come from the
 * simulator (its wait-for graph, its cluster): another runtime is a
 * USP_ERR_CONFIG naming --dot. */
usp_status viz_run_picture(const usp_runtime_t *rt, usp_status run, const char *title, const char *caption,
                           const char *path, const char **drawn);

#endif
