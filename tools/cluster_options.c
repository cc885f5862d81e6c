/* --topology and --nodes (see cluster_options.h). */
#include "tools/cluster_options.h"

usp_status cluster_options_apply(const char *topology, int nodes, int world, sim_config *config)
{
    if (!topology && nodes == 0)
        return USP_OK; /* sim_config_default: enough dgx-h100 nodes for the world */
    return sim_topology_for_world(topology, nodes, world, &config->cost.topology);
}
