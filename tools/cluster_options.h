/* --topology and --nodes for usp plan, which builds its simulator config itself
 * (the other commands pass them to their runtime: core/runtime.h). */
#ifndef USP_TOOLS_CLUSTER_OPTIONS_H
#define USP_TOOLS_CLUSTER_OPTIONS_H

#include "sim/world.h"

/* Fills config->cost for `world` ranks from a preset name or JSON file (NULL:
 * dgx-h100) and a node count (0: as many nodes as the world needs). */
usp_status cluster_options_apply(const char *topology, int nodes, int world, sim_config *config);

#endif
