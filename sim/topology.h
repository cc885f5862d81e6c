/* The cluster's topology: nodes of GPUs, the fabric inside a node, the NICs
 * between nodes, as links with a bandwidth and a latency.
 *
 * A node holds gpus_per_node GPUs on one of two fabrics:
 * - NVSwitch: every GPU has its own NVLink bandwidth to the switch, which is
 *   non-blocking, so a transfer crosses the sender's link up and the
 *   receiver's link down.
 * - PCIe: GPUs sit in groups (gpus_per_switch) under PCIe switches; a switch
 *   forwards between its own GPUs, anything else climbs the switch's uplink to
 *   the CPU's host bridge (one per socket, shared by every flow it forwards,
 *   in both directions) and, to the other socket, the inter-socket link.
 *   That is NCCL's P2P transport between every pair (p2p "system"). NCCL uses
 *   it by default only below a common PCIe switch (p2p "switch": its
 *   ncclTopoCheckP2p stops at PATH_PXB), and not at all with P2P disabled
 *   (p2p "off": NCCL_P2P_DISABLE, consumer cards); the other pairs go through
 *   a staging buffer in host memory (the SHM transport): GPU up, switch uplink
 *   up, the receiving socket's host memory path (one link per socket, shared
 *   by everything staged there), the socket link when it crosses sockets, the
 *   switch uplink down, GPU down.
 *   P2P through a root complex collapses when a GPU writes to several peers
 *   that way at once (an all-to-all), while one stream a GPU (a ring) runs at
 *   its link's rate: nccl#1603, 4 GPUs on one CPU with P2P, measured a ring
 *   all-reduce at 22 GB/s busbw and an all-to-all at 2 ("CPUs make very poor
 *   PCI switches"). So in a collective where a GPU sends P2P through a root
 *   complex to f > 1 peers, those flows also cross the GPU's own "fan-out"
 *   link, of capacity p2p_fanout / f: the more streams the root complex
 *   interleaves, the less it forwards (docs/cluster_model.md fits the law to
 *   three published measurements; absent: not modelled).
 * NICs (nics_per_node, rail-optimised: NIC i of every node on rail i of a
 * non-blocking fat tree) connect the nodes; GPU g uses NIC g * nics / gpus.
 *
 * Links are full duplex (an "up" and a "down" link of the given bandwidth),
 * except the host bridge: one link for what it forwards either way. A link's capacity is
 * its line rate times the efficiency NCCL's protocols reach on it (NVLink 4:
 * 450 GB/s line, about 370 GB/s through NCCL; PCIe Gen4 x16: 31.5 GB/s line,
 * about 25 achieved; NDR InfiniBand: 50 GB/s line, 46-49 GB/s per NIC in
 * nccl-tests), so a modelled transfer runs at what NCCL would measure.
 *
 * Links are numbered densely (node-major) so the flow model can index them.
 * Presets: dgx-h100, dgx-h200, dgx-a100, pcie-gen4, pcie-gen5, pcie-l20 (8 GPUs a node),
 * any number of nodes; or a JSON file (schema: docs/cluster_model.md). */
#ifndef USP_SIM_TOPOLOGY_H
#define USP_SIM_TOPOLOGY_H

#include "core/base/status.h"
#include "sim/collective_table.h"
#include "sim/gpu_model.h"
#include "sim/host_model.h"

#define SIM_TOPOLOGY_NAME_MAX 64
#define SIM_ROUTE_MAX 16 /* links on the longest route: PCIe, socket to socket, node to node */

typedef enum sim_fabric_kind { SIM_FABRIC_NVSWITCH, SIM_FABRIC_PCIE } sim_fabric_kind;

/* PCIe: which GPU pairs of a node NCCL joins by its P2P transport; the others go through host memory. */
typedef enum sim_p2p_mode {
    SIM_P2P_SYSTEM, /* every pair, through the CPUs' root complexes (NCCL_P2P_LEVEL=SYS) */
    SIM_P2P_SWITCH, /* pairs below a common PCIe switch (NCCL's default, PATH_PXB) */
    SIM_P2P_OFF,    /* none (NCCL_P2P_DISABLE=1; GeForce cards) */
} sim_p2p_mode;

typedef struct sim_link_class {
    double bandwidth;  /* line rate per direction, bytes/s */
    double efficiency; /* the fraction of it NCCL reaches, (0, 1] */
    double latency;    /* seconds to cross the link */
} sim_link_class;

typedef struct sim_topology {
    char name[SIM_TOPOLOGY_NAME_MAX];
    int nodes, gpus_per_node;
    sim_fabric_kind fabric;
    sim_link_class gpu_link;       /* a GPU's NVLink to the NVSwitch, or its PCIe x16 link */
    int gpus_per_switch;           /* PCIe: GPUs under one PCIe switch */
    int switches_per_socket;       /* PCIe: PCIe switches under one CPU socket */
    sim_link_class switch_uplink;  /* PCIe: switch to host bridge */
    sim_link_class host_bridge;    /* PCIe: a socket's root complex forwarding GPU to GPU traffic */
    sim_link_class socket_link;    /* PCIe: CPU to CPU (UPI / xGMI), per direction */
    sim_p2p_mode p2p;              /* PCIe: the pairs NCCL's P2P transport joins */
    sim_link_class host_memory;    /* PCIe, p2p switch / off: a socket's staging of GPU to GPU traffic in host memory */
    sim_link_class p2p_fanout;     /* PCIe, P2P through a root complex: a GPU's rate to f > 1 peers at once is
                                      this / f (bandwidth 0: not modelled) */
    int nics_per_node;             /* 0: no network (one node only) */
    sim_link_class nic;            /* a NIC and its wire to the (non-blocking) fabric */
    double base_latency;           /* seconds every NCCL call costs whatever it moves */
    sim_gpu gpu;                   /* every GPU of the cluster */
    sim_host host;                 /* every node's CPUs, DRAM and GPU-to-CPU links (--offload) */
    sim_collective_tables measured; /* a calibrated file's collective times (n 0: none; sim/collective_table.h) */
} sim_topology;

/* The preset called `name` with `nodes` nodes into *out; 0 when there is none. */
int sim_topology_preset(const char *name, int nodes, sim_topology *out);

/* The preset names, comma separated, for messages. */
const char *sim_topology_preset_names(void);

/* `spec` is a preset name or the path of a JSON topology file; nodes > 0
 * overrides the node count of either (0: the preset's 1 or the file's own).
 * USP_ERR_CONFIG with a message naming the file, the field and the value when
 * the spec or the file is bad. */
usp_status sim_topology_from_name_or_file(const char *spec, int nodes, sim_topology *out);

/* The cluster `world` ranks run on, as --topology and --nodes give it: `spec`
 * (NULL: dgx-h100) with `nodes` nodes, or, when nodes is 0, as many as the
 * world needs. A world the nodes cannot hold is a USP_ERR_CONFIG naming
 * --world and --nodes. */
usp_status sim_topology_for_world(const char *spec, int nodes, int world, sim_topology *out);

/* Checks a topology built in code, its GPU included, against the rules and
 * physical ranges the JSON reader applies (docs/cluster_model.md): USP_ERR_CONFIG
 * naming the field (as in a file), the value and the range. */
usp_status sim_topology_check(const sim_topology *t);

/* GPUs in the cluster. */
int sim_topology_gpus(const sim_topology *t);

/* Links in the cluster; link ids are 0 .. sim_topology_links(t) - 1. */
int sim_topology_links(const sim_topology *t);

/* A link's capacity (line rate x efficiency, bytes/s) and latency (s). */
void sim_topology_link(const sim_topology *t, int link, double *capacity, double *latency);

/* The node of a GPU and the NIC (index within the node) it sends through. */
int sim_topology_node_of(const sim_topology *t, int gpu);
int sim_topology_nic_of(const sim_topology *t, int gpu);

/* The links a transfer from GPU src to GPU dst crosses (through their own
 * NICs between nodes), written to links[SIM_ROUTE_MAX]; returns their number
 * (0 when src == dst). */
int sim_topology_route(const sim_topology *t, int src, int dst, int *links);

/* The links between NIC src_nic of node src_node and NIC dst_nic of node
 * dst_node (one channel of a ring that crosses nodes on several rails). */
int sim_topology_rail_route(const sim_topology *t, int src_node, int src_nic, int dst_node, int dst_nic,
                            int *links);

/* The fan-out link of GPU src when a transfer src -> dst is P2P through a
 * root complex and the topology models its collapse; -1 otherwise. A
 * collective adds it to the paths of a GPU that sends that way to more than
 * one peer (sim/cost_model.c). */
int sim_topology_fanout_link(const sim_topology *t, int src, int dst);

/* "system", "switch" or "off". */
const char *sim_p2p_mode_name(sim_p2p_mode mode);

/* Seconds of latency along a route: the sum of its links'. */
double sim_topology_route_latency(const sim_topology *t, const int *links, int n);

#endif
