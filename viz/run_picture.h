/* --dot of a finished simulator run: the picture that explains it. */
#ifndef USP_VIZ_RUN_PICTURE_H
#define USP_VIZ_RUN_PICTURE_H

#include "sim/world.h"
#include "viz/traffic.h"

/* Writes to `path` the wait-for graph when the run ended in a report
 * (deadlock, mismatch, rank failure), else the traffic map (options `traffic`)
 * when `run` succeeded, else nothing; *drawn (may be NULL) names what was
 * written ("wait-for picture", "traffic map") or is NULL. */
usp_status viz_run_picture(const sim_world *w, usp_status run, const viz_traffic_options *traffic, const char *path,
                           const char **drawn);

#endif
