/* --topology and --nodes (see cluster_options.h). */
#include "tools/cluster_options.h"

usp_status cluster_options_apply(const char *topology, int nodes, int world, sim_config *config)
{
    if (!topology && nodes == 0)
        return USP_OK; /* sim_config_default: enough dgx-h100 nodes for the world */
    const char *spec = topology ? topology : "dgx-h100";
    sim_topology *t = &config->cost.topology;
    USP_CHECK(sim_topology_from_name_or_file(spec, nodes, t));
    if (nodes == 0 && t->nodes * t->gpus_per_node < world) /* grow a preset or file to the world */
        USP_CHECK(sim_topology_from_name_or_file(spec, (world + t->gpus_per_node - 1) / t->gpus_per_node, t));
    if (t->nodes * t->gpus_per_node < world)
        return usp_error(USP_ERR_CONFIG, "--world %d does not fit on --nodes %d of %s (%d GPUs each); use --nodes %d",
                         world, t->nodes, t->name, t->gpus_per_node,
                         (world + t->gpus_per_node - 1) / t->gpus_per_node);
    return USP_OK;
}
