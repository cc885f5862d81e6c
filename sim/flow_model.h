/* Flow-level transfer model: concurrent transfers share the links they cross.
 *
 * A set of flows starts at time 0; each flow has a byte count and a path (the
 * links it crosses). At every instant the rates are the max-min fair
 * allocation of the links' capacities, computed by progressive filling (the
 * bottleneck link's fair share is given to every flow that crosses it, those
 * flows are frozen, their rate is taken off every link they cross, repeat),
 * the fluid model of flow-level simulators such as SimGrid (Velho and Legrand,
 * "Accuracy study and improvement of network simulation in the SimGrid
 * framework", 2009) without its TCP corrections. When a flow finishes the
 * others are re-shared, so two flows through one link each take twice as long
 * as one alone, and a flow that finishes early gives its share to the rest.
 *
 * The solver knows links only as dense indices with a capacity; the topology
 * (sim/topology.h) says which links a transfer crosses. Pure arithmetic in a
 * fixed order: the same flows give the same times, bit for bit. */
#ifndef USP_SIM_FLOW_MODEL_H
#define USP_SIM_FLOW_MODEL_H

#include "core/base/status.h"

/* A set of flows over links 0..n_links-1. Flow f crosses
 * links[path_start[f] .. path_start[f + 1]); a link appears at most once per path. */
typedef struct sim_flow_set {
    int n_flows;
    const double *bytes;      /* [n_flows] bytes to move; a flow of 0 bytes finishes at 0 */
    const int *path_start;    /* [n_flows + 1] */
    const int *links;         /* [path_start[n_flows]] */
    int n_links;
    const double *capacity;   /* [n_links] bytes/s, > 0 */
} sim_flow_set;

/* Runs the flows to completion; writes each flow's finish time (seconds from
 * the common start) to finish[n_flows] when finish is non-NULL, and returns the
 * makespan in *seconds. A flow with an empty path and bytes > 0 finishes at 0
 * (it crosses no link: nothing limits it). USP_ERR_RUNTIME when out of memory. */
usp_status sim_flow_run(const sim_flow_set *set, double *finish, double *seconds);

/* The max-min fair rates (bytes/s) the flows start at, written to rate[n_flows]:
 * the allocation sim_flow_run holds until the first flow finishes (0 for a flow
 * that moves nothing). For a caller that advances time itself and re-shares when
 * flows come and go (sim/p2p_flows.h). USP_ERR_RUNTIME when out of memory. */
usp_status sim_flow_rates(const sim_flow_set *set, double *rate);

#endif
