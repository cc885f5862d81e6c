/* The traffic map of a run: every rank as a node, grouped in boxes by
 * cluster node (host), one arrow per pair of ranks that exchanged data,
 * labelled and weighted by the bytes the trace shows (the sum over the whole
 * run; collectives counted as NCCL's algorithms move them, see
 * usp_comm_op_traffic).
 *
 * Arrows are one plain colour unless a cluster model says which link each one
 * crosses: viz_traffic_options.link is that hook, and viz_traffic_use_topology
 * fills it from a sim_topology (NVLink / PCIe inside a node, InfiniBand
 * between nodes; rank r runs on GPU r, as in the simulator). Above
 * VIZ_MAX_ARROWS rank pairs the map aggregates: traffic inside a host is
 * summed in the rank labels and traffic between hosts drawn host to host. */
#ifndef USP_VIZ_TRAFFIC_H
#define USP_VIZ_TRAFFIC_H

#include "core/base/strbuf.h"
#include "core/trace/trace.h"
#include "sim/topology.h"

typedef struct viz_link_style {
    const char *name;       /* the link class, shown in the legend: "NVLink", "PCIe", "InfiniBand" */
    const char *color;      /* a Graphviz colour for its arrows: "#76b900" */
    const char *color_name; /* that colour in words for the legend, "green" (NULL: the legend shows `color`) */
} viz_link_style;

/* The link class data from world rank `from` to `to` crosses; returns 0 (and
 * leaves *out alone) when the model does not know. */
typedef int (*viz_link_fn)(void *ctx, int from, int to, viz_link_style *out);

typedef struct viz_traffic_options {
    int gpus_per_node;   /* ranks per host box; 0: 8 */
    const char *title;   /* NULL: "Traffic map" */
    const char *caption; /* a line saying what ran, or NULL */
    viz_link_fn link;    /* NULL: every arrow plain */
    void *link_ctx;
} viz_traffic_options;

/* The viz_link_fn of a cluster: ctx is a const sim_topology *; data between
 * nodes crosses InfiniBand, inside a node NVLink (NVSwitch fabric) or PCIe
 * ("PCIe across CPU sockets" between GPUs under different sockets). */
int viz_link_of_topology(void *ctx, int from, int to, viz_link_style *out);

/* Draws `o`'s map on `topology`: host boxes of its gpus_per_node, arrows
 * coloured by viz_link_of_topology (the topology must outlive the drawing). */
void viz_traffic_use_topology(viz_traffic_options *o, const sim_topology *topology);

/* DOT of the traffic of `t` over `world` ranks (o may be NULL: the defaults). */
usp_status viz_dot_traffic(const usp_trace_t *t, int world, const viz_traffic_options *o, usp_strbuf *dot);

#endif
