/* The simulator as a runtime (core/runtime/runtime.h): every rank a fiber of this
 * process on a modelled cluster (sim/world.h). The registry of the `usp`
 * command names it "sim". */
#ifndef USP_SIM_RUNTIME_H
#define USP_SIM_RUNTIME_H

#include "core/runtime/runtime.h"
#include "sim/topology.h"

typedef struct sim_world sim_world;

/* A simulator for `o`: the cpu backend (the meta backend when shapes_only, else o->sim_backend's when set),
 * the cluster and nodes of `o` (sim_topology_for_world), its faults parsed
 * (USP_ERR_CONFIG naming --inject) and checked against the world. */
usp_status sim_runtime_create(const usp_runtime_options *o, usp_runtime_t **out);

/* The simulated world of a runtime from sim_runtime_create (its wait-for graph,
 * its ranks' clocks and backends), or NULL for any other runtime. */
const sim_world *sim_runtime_world(const usp_runtime_t *rt);

/* The cluster it models, or NULL for any other runtime. */
const sim_topology *sim_runtime_topology(const usp_runtime_t *rt);

#endif
