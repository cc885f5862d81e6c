/* Topology presets, link numbering, routes and the JSON topology reader (see topology.h).
 *
 * Calibration (docs/cluster_model.md has the validation table and sources):
 * - NVLink: one efficiency for every generation, 370 / 450 = 0.822, the
 *   effective NVLink 4 bandwidth NCCL reaches on H100 (nccl-tests issue 212:
 *   "450GB/s is the line rate. With the protocol overhead (~20%) NCCL can get
 *   an effective NVLink bandwidth of 370GB/s"). NVLink 3 (A100) is 300 GB/s.
 * - PCIe: 25 / 31.5 = 0.794 of the Gen4 x16 line rate (about 25 GB/s achieved);
 *   Gen5 x16 is 63 GB/s line.
 * - NICs: NDR 400 Gb/s = 50 GB/s line, 46-49 GB/s per NIC in nccl-tests
 *   (nccl-tests issues 267, 290): 0.95. HDR 200 Gb/s = 25 GB/s line (DGX A100).
 * - Latency, NCCL's own tuning model (src/graph/tuning.cc): a base latency per
 *   call (8.4 us for the ring's Simple protocol) plus a latency per hop; with
 *   1.25 us per NVLink crossing (2.5 us GPU to GPU) an 8-GPU ring all-reduce
 *   of a few bytes costs 8.4 + 14 x 2.5 = 43 us, the 40-47 us floor measured
 *   on one node. PCIe and host bridge hops are 1 us and 0.5 us, a NIC 3 us.
 * - The PCIe host bridge (48 GB/s: about two x16 streams) and socket link
 *   (32 GB/s per direction) are assumptions; what a CPU forwards between GPUs
 *   varies widely by platform (NCCL issue 1639: "on PCI systems, the
 *   performance you get is usually determined by the bandwidth your CPU and
 *   memory can deliver").
 * - Host memory staging (p2p "switch" / "off", NCCL's SHM transport): 72 GB/s
 *   a socket, derived from nccl issue 1603: 4 RTX 4090 on one CPU, no PCIe
 *   switch, P2P off, reach 18 GB/s all-to-all busbw, i.e. 4 x 18 GB/s staged
 *   through that socket's memory (the GPU links, 25 each, are not the bound).
 * - P2P through a root complex to f > 1 peers at once: 6 / f GB/s a GPU
 *   (p2p_fanout 6 GB/s), fitted to nccl issue 1603 (4 RTX 4090 on one CPU,
 *   P2P on: all-to-all 2 GB/s busbw, f = 3) and checked against the USP
 *   paper's 8 x L20 (docs/cluster_model.md). Measured on Gen4 boxes; Gen5
 *   takes the same figure (a property of the CPU, not the link).
 * - pcie-l20: 8 L20 (Gen4 x16, no NVLink), 2 under a PCIe switch, 2 switches a
 *   socket, 2 sockets: the bus ids of the 8 x L20 server of nccl issue 1817
 *   come in pairs (12/13, 47/48, 91/92, c4/c5). p2p "system": the USP paper's
 *   8 x L20 ran its all-to-alls at the rates of P2P through the CPUs (NCCL's
 *   default on AMD hosts; NCCL_P2P_LEVEL=SYS elsewhere). The layout is an
 *   assumption: the USP paper says only "8xL20 PCIe". */
#include "sim/topology.h"
#include "core/base/strbuf.h"
#include "sim/host_model.h"
#include "sim/json_fields.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#define GB 1e9
#define US 1e-6

static const sim_link_class nvlink4 = {450 * GB, 370.0 / 450.0, 1.25 * US};
static const sim_link_class nvlink3 = {300 * GB, 370.0 / 450.0, 1.25 * US};
static const sim_link_class pcie4_x16 = {31.5 * GB, 25.0 / 31.5, 1.0 * US};
static const sim_link_class pcie5_x16 = {63 * GB, 25.0 / 31.5, 1.0 * US};
static const sim_link_class ndr = {50 * GB, 0.95, 3.0 * US};
static const sim_link_class hdr = {25 * GB, 0.95, 3.0 * US};
#define NCCL_BASE_LATENCY (8.4 * US)
#define HOST_MEMORY_STAGING (72 * GB) /* a socket's SHM staging: nccl issue 1603, 4 x 18 GB/s */
#define P2P_FANOUT (6 * GB)           /* P2P through a root complex to f peers: 6 / f GB/s a GPU (above) */

static sim_topology dgx(const char *name, sim_link_class nvlink, sim_link_class nic, const char *gpu)
{
    sim_topology t = {.nodes = 1, .gpus_per_node = 8, .fabric = SIM_FABRIC_NVSWITCH, .gpu_link = nvlink,
                      .nics_per_node = 8, .nic = nic, .base_latency = NCCL_BASE_LATENCY};
    snprintf(t.name, sizeof t.name, "%s", name);
    sim_gpu_preset(gpu, &t.gpu);
    return t;
}

/* Two sockets, two PCIe switches per socket, two GPUs and one NIC per switch; P2P between every pair. */
static sim_topology pcie_box(const char *name, sim_link_class x16, double host_bridge, double socket_link,
                             sim_link_class nic, const char *gpu)
{
    sim_topology t = {.nodes = 1, .gpus_per_node = 8, .fabric = SIM_FABRIC_PCIE, .gpu_link = x16,
                      .gpus_per_switch = 2, .switches_per_socket = 2, .switch_uplink = x16,
                      .host_bridge = {host_bridge, 1.0, 0.5 * US}, .socket_link = {socket_link, 1.0, 1.0 * US},
                      .p2p = SIM_P2P_SYSTEM, .host_memory = {HOST_MEMORY_STAGING, 1.0, 1.0 * US},
                      .p2p_fanout = {P2P_FANOUT, 1.0, 0.0},
                      .nics_per_node = 4, .nic = nic, .base_latency = NCCL_BASE_LATENCY};
    snprintf(t.name, sizeof t.name, "%s", name);
    sim_gpu_preset(gpu, &t.gpu);
    return t;
}

int sim_topology_preset(const char *name, int nodes, sim_topology *out)
{
    sim_topology t;
    if (strcmp(name, "dgx-h100") == 0)
        t = dgx(name, nvlink4, ndr, "h100-sxm");
    else if (strcmp(name, "dgx-h200") == 0)
        t = dgx(name, nvlink4, ndr, "h200");
    else if (strcmp(name, "dgx-a100") == 0) /* the DGX A100 ships 8 ConnectX-6 HDR NICs */
        t = dgx(name, nvlink3, hdr, "a100-80g");
    else if (strcmp(name, "pcie-gen4") == 0) /* Gen4 x16 caps a NIC at ~25 GB/s: HDR */
        t = pcie_box(name, pcie4_x16, 48 * GB, 32 * GB, hdr, "a100-pcie");
    else if (strcmp(name, "pcie-gen5") == 0)
        t = pcie_box(name, pcie5_x16, 96 * GB, 64 * GB, ndr, "h100-pcie");
    else if (strcmp(name, "pcie-l20") == 0) /* the layout of pcie-gen4, Ada cards */
        t = pcie_box(name, pcie4_x16, 48 * GB, 32 * GB, hdr, "l20");
    else
        return 0;
    t.nodes = nodes > 0 ? nodes : 1;
    sim_host_preset(name, &t.host);
    *out = t;
    return 1;
}

const char *sim_topology_preset_names(void)
{
    return "dgx-h100, dgx-h200, dgx-a100, pcie-gen4, pcie-gen5, pcie-l20";
}

const char *sim_p2p_mode_name(sim_p2p_mode mode)
{
    static const char *const names[] = {"system", "switch", "off"};
    return mode >= SIM_P2P_SYSTEM && mode <= SIM_P2P_OFF ? names[mode] : "?";
}

/* --- link numbering and routes ---------------------------------------------
 * Per node, in this order: GPU links up [G], GPU links down [G]; PCIe only:
 * switch uplinks up [S], down [S], host bridges [P], socket links a->b [P*P],
 * host memory paths [P], GPUs' P2P fan-out [G]; then NICs up [N], down [N].
 * Link id = node * per_node + index. */

typedef struct layout {
    int G, S, P, N, F;                   /* GPUs, PCIe switches, sockets, NICs, fan-out links per node */
    int sw_up, sw_down, host, sock, mem, fan, nic_up, nic_down, per_node;
} layout;

static layout layout_of(const sim_topology *t)
{
    layout l = {.G = t->gpus_per_node, .N = t->nics_per_node};
    if (t->fabric == SIM_FABRIC_PCIE) {
        l.S = l.G / t->gpus_per_switch;
        l.P = l.S / t->switches_per_socket;
        l.F = l.G;
    }
    l.sw_up = 2 * l.G, l.sw_down = l.sw_up + l.S, l.host = l.sw_down + l.S, l.sock = l.host + l.P;
    l.mem = l.sock + l.P * l.P, l.fan = l.mem + l.P, l.nic_up = l.fan + l.F, l.nic_down = l.nic_up + l.N;
    l.per_node = l.nic_down + l.N;
    return l;
}

int sim_topology_gpus(const sim_topology *t) { return t->nodes * t->gpus_per_node; }
int sim_topology_links(const sim_topology *t) { return t->nodes * layout_of(t).per_node; }
int sim_topology_node_of(const sim_topology *t, int gpu) { return gpu / t->gpus_per_node; }

int sim_topology_nic_of(const sim_topology *t, int gpu)
{
    return t->nics_per_node ? (gpu % t->gpus_per_node) * t->nics_per_node / t->gpus_per_node : -1;
}

static const sim_link_class *link_class(const sim_topology *t, const layout *l, int index)
{
    if (index < l->sw_up)
        return &t->gpu_link;
    if (index < l->host)
        return &t->switch_uplink;
    if (index < l->sock)
        return &t->host_bridge;
    if (index < l->mem)
        return &t->socket_link;
    if (index < l->fan)
        return &t->host_memory;
    if (index < l->nic_up)
        return &t->p2p_fanout;
    return &t->nic;
}

void sim_topology_link(const sim_topology *t, int link, double *capacity, double *latency)
{
    layout l = layout_of(t);
    const sim_link_class *c = link_class(t, &l, link % l.per_node);
    *capacity = c->bandwidth * c->efficiency;
    *latency = c->latency;
}

/* A PCIe endpoint inside a node: its own link up and down and the switch it sits under. */
typedef struct endpoint {
    int up, down, sw;
} endpoint;

static endpoint gpu_endpoint(const sim_topology *t, const layout *l, int local)
{
    int sw = t->fabric == SIM_FABRIC_PCIE ? local / t->gpus_per_switch : 0;
    return (endpoint){local, l->G + local, sw};
}

static endpoint nic_endpoint(const layout *l, int nic)
{
    return (endpoint){l->nic_up + nic, l->nic_down + nic, l->S ? nic * l->S / l->N : 0};
}

/* From endpoint a up to the fabric and down to endpoint b inside node `base`;
 * skip_a / skip_b leave out a's up link or b's down link (the NIC's own links
 * are added by the caller, in network order). */
static int intra_route(const sim_topology *t, const layout *l, int base, endpoint a, endpoint b, int skip_a,
                       int skip_b, int *links)
{
    int n = 0;
    if (!skip_a)
        links[n++] = base + a.up;
    if (t->fabric == SIM_FABRIC_PCIE && a.sw != b.sw) {
        int pa = a.sw / t->switches_per_socket, pb = b.sw / t->switches_per_socket;
        links[n++] = base + l->sw_up + a.sw;
        links[n++] = base + l->host + pa;
        if (pa != pb) {
            links[n++] = base + l->sock + pa * l->P + pb;
            links[n++] = base + l->host + pb;
        }
        links[n++] = base + l->sw_down + b.sw;
    }
    if (!skip_b)
        links[n++] = base + b.down;
    return n;
}

/* Whether NCCL joins GPUs a and b of one PCIe node by its P2P transport (else: through host memory). */
static int uses_p2p(const sim_topology *t, endpoint a, endpoint b)
{
    return t->p2p == SIM_P2P_SYSTEM || (t->p2p == SIM_P2P_SWITCH && a.sw == b.sw);
}

/* GPU a to GPU b through a staging buffer in host memory (NCCL's SHM transport):
 * each byte is written into the receiving socket's memory and read back out. */
static int host_memory_route(const sim_topology *t, const layout *l, int base, endpoint a, endpoint b, int *links)
{
    int pa = a.sw / t->switches_per_socket, pb = b.sw / t->switches_per_socket, n = 0;
    links[n++] = base + a.up;
    links[n++] = base + l->sw_up + a.sw;
    if (pa != pb)
        links[n++] = base + l->sock + pa * l->P + pb;
    links[n++] = base + l->mem + pb;
    links[n++] = base + l->sw_down + b.sw;
    links[n++] = base + b.down;
    return n;
}

int sim_topology_fanout_link(const sim_topology *t, int src, int dst)
{
    if (t->fabric != SIM_FABRIC_PCIE || t->p2p_fanout.bandwidth <= 0 || src == dst)
        return -1;
    layout l = layout_of(t);
    if (src / l.G != dst / l.G)
        return -1;
    endpoint a = gpu_endpoint(t, &l, src % l.G), b = gpu_endpoint(t, &l, dst % l.G);
    return a.sw != b.sw && uses_p2p(t, a, b) ? src / l.G * l.per_node + l.fan + src % l.G : -1;
}

int sim_topology_route(const sim_topology *t, int src, int dst, int *links)
{
    if (src == dst)
        return 0;
    layout l = layout_of(t);
    int ns = src / l.G, nd = dst / l.G;
    endpoint a = gpu_endpoint(t, &l, src % l.G), b = gpu_endpoint(t, &l, dst % l.G);
    if (ns == nd && t->fabric == SIM_FABRIC_PCIE && !uses_p2p(t, a, b))
        return host_memory_route(t, &l, ns * l.per_node, a, b, links);
    if (ns == nd)
        return intra_route(t, &l, ns * l.per_node, a, b, 0, 0, links);
    /* Between nodes: GPU to its NIC (over PCIe; on NVSwitch machines the GPU's
     * PCIe path to its NIC is faster than the NIC and is left out), the wire, NIC to GPU. */
    endpoint na = nic_endpoint(&l, sim_topology_nic_of(t, src)), nb = nic_endpoint(&l, sim_topology_nic_of(t, dst));
    int n = 0;
    if (t->fabric == SIM_FABRIC_PCIE)
        n += intra_route(t, &l, ns * l.per_node, a, na, 0, 1, links + n);
    links[n++] = ns * l.per_node + na.up;
    links[n++] = nd * l.per_node + nb.down;
    if (t->fabric == SIM_FABRIC_PCIE)
        n += intra_route(t, &l, nd * l.per_node, nb, b, 1, 0, links + n);
    return n;
}

int sim_topology_rail_route(const sim_topology *t, int src_node, int src_nic, int dst_node, int dst_nic, int *links)
{
    layout l = layout_of(t);
    links[0] = src_node * l.per_node + l.nic_up + src_nic;
    links[1] = dst_node * l.per_node + l.nic_down + dst_nic;
    return 2;
}

double sim_topology_route_latency(const sim_topology *t, const int *links, int n)
{
    layout l = layout_of(t);
    double s = 0.0;
    for (int i = 0; i < n; i++)
        s += link_class(t, &l, links[i] % l.per_node)->latency;
    return s;
}

/* --- physical ranges and checks --------------------------------------------
 * Every number a topology holds, from a file or from code, lies in a range
 * generous enough for any machine built or announced, but finite, so every
 * time the model computes is a finite number (a 5e-324 GB/s link once made
 * the planner spin; docs/cluster_model.md lists the ranges):
 * - link bandwidth 0.001 .. 100000 GB/s a direction: 1 MB/s is below 100 Mb/s
 *   Ethernet (12.5 MB/s), slower than anything a cluster trains over; 100 TB/s
 *   is over a hundred times NVLink 5 (900 GB/s a direction);
 * - efficiency 0.001 .. 1: a fraction of the line rate, (0, 1], floored at
 *   0.1% so a link's capacity stays at least 1 kB/s;
 * - latency 0 .. 1e6 us, a link's and the base per call: a hop costs 0.5-3 us,
 *   NCCL's base 8.4 us, a round trip around the globe under 0.3 s; 1 s is
 *   beyond any link (0: an ideal one);
 * - nodes 1 .. 100000 (as --nodes): the largest clusters have 100k-200k GPUs,
 *   at most 25000 nodes of 8;
 * - GPUs a node 1 .. 4096: the largest NVLink domain announced has 576;
 * - NICs a node 1 .. 64 (0 in code: no network): a DGX has 8, plus 2 for storage;
 * - CPU sockets a node (PCIe: switches / switches_per_socket) at most 8: GPU
 *   servers have 1-4, 8 is the largest glueless x86 board.
 * With these bounds every link id (node x links a node, at most
 * 2 x 4096 + 2 x 4096 + 8 + 8 x 8 + 8 + 4096 + 2 x 64 a node) fits in an int. */
#define MAX_NODES 100000
#define MAX_GPUS_PER_NODE 4096
#define MAX_NICS_PER_NODE 64
#define MAX_SOCKETS_PER_NODE 8
static const sim_json_range link_bandwidth = {"bandwidth_gbs", 1e-3, 1e5, GB, "line rate in GB/s per direction"};
static const sim_json_range link_efficiency = {"efficiency", 1e-3, 1, 1, "the fraction of the line rate NCCL reaches"};
static const sim_json_range link_latency = {"latency_us", 0, 1e6, US, "microseconds to cross the link"};
static const sim_json_range base_latency = {"base_latency_us", 0, 1e6, US,
                                            "microseconds every NCCL call costs, e.g. 8.4"};

/* PCIe: switches hold whole groups of GPUs, sockets whole groups of switches. */
static usp_status check_pcie_shape(const sim_topology *t, const char *where)
{
    sim_json_at at = {where, "fabric."};
    USP_CHECK(sim_json_check_int(at, "gpus_per_switch", t->gpus_per_switch, 1, t->gpus_per_node,
                                 "GPUs under one PCIe switch, at most gpus_per_node"));
    if (t->gpus_per_node % t->gpus_per_switch != 0)
        return usp_error(USP_ERR_CONFIG, "%s: field 'fabric.gpus_per_switch' is %d: it must divide gpus_per_node "
                         "(%d)", where, t->gpus_per_switch, t->gpus_per_node);
    int switches = t->gpus_per_node / t->gpus_per_switch;
    USP_CHECK(sim_json_check_int(at, "switches_per_socket", t->switches_per_socket, 1, switches,
                                 "PCIe switches under one CPU socket, at most gpus_per_node / gpus_per_switch"));
    if (switches % t->switches_per_socket != 0)
        return usp_error(USP_ERR_CONFIG, "%s: field 'fabric.switches_per_socket' is %d: it must divide the %d PCIe "
                         "switches (gpus_per_node / gpus_per_switch)", where, t->switches_per_socket, switches);
    if (switches / t->switches_per_socket > MAX_SOCKETS_PER_NODE)
        return usp_error(USP_ERR_CONFIG, "%s: field 'fabric.switches_per_socket' is %d: the %d PCIe switches make %d "
                         "CPU sockets, and a node has at most %d; put at least %d switches under a socket", where,
                         t->switches_per_socket, switches, switches / t->switches_per_socket, MAX_SOCKETS_PER_NODE,
                         (switches + MAX_SOCKETS_PER_NODE - 1) / MAX_SOCKETS_PER_NODE);
    return USP_OK;
}

/* The counts and the rules that tie them together; `where` names the topology in messages. */
static usp_status check_shape(const sim_topology *t, const char *where)
{
    sim_json_at top = {where, ""}, network = {where, "network."};
    USP_CHECK(sim_json_check_int(top, "nodes", t->nodes, 1, MAX_NODES, "nodes in the cluster"));
    USP_CHECK(sim_json_check_int(top, "gpus_per_node", t->gpus_per_node, 1, MAX_GPUS_PER_NODE, "GPUs in one node"));
    if (t->fabric == SIM_FABRIC_PCIE)
        USP_CHECK(check_pcie_shape(t, where));
    USP_CHECK(sim_json_check_int(network, "nics_per_node", t->nics_per_node, 0, MAX_NICS_PER_NODE,
                                 "NICs in a node; 0: no network, one node"));
    if (t->nodes > 1 && t->nics_per_node == 0)
        return usp_error(USP_ERR_CONFIG, "%s has no 'network' (NICs), so it is one node: %d nodes need a "
                         "'network' with nics_per_node and nic", where, t->nodes);
    return USP_OK;
}

static usp_status check_link(const sim_link_class *c, const char *where, const char *field)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s.", field);
    sim_json_at at = {where, prefix};
    USP_CHECK(sim_json_check_number(at, &link_bandwidth, c->bandwidth));
    USP_CHECK(sim_json_check_number(at, &link_efficiency, c->efficiency));
    return sim_json_check_number(at, &link_latency, c->latency);
}

/* Every rule of the file format, on a topology however it was built; only the links it has are checked. */
static usp_status check_topology(const sim_topology *t, const char *where)
{
    USP_CHECK(check_shape(t, where));
    USP_CHECK(sim_json_check_number((sim_json_at){where, ""}, &base_latency, t->base_latency));
    USP_CHECK(check_link(&t->gpu_link, where, "fabric.gpu_link"));
    if (t->fabric == SIM_FABRIC_PCIE && (t->gpus_per_switch < t->gpus_per_node || t->p2p != SIM_P2P_SYSTEM))
        USP_CHECK(check_link(&t->switch_uplink, where, "fabric.switch_uplink"));
    if (t->fabric == SIM_FABRIC_PCIE && t->gpus_per_switch < t->gpus_per_node) {
        USP_CHECK(check_link(&t->host_bridge, where, "fabric.host_bridge"));
        if (t->switches_per_socket * t->gpus_per_switch < t->gpus_per_node)
            USP_CHECK(check_link(&t->socket_link, where, "fabric.socket_link"));
    }
    if (t->fabric == SIM_FABRIC_PCIE && t->p2p != SIM_P2P_SYSTEM)
        USP_CHECK(check_link(&t->host_memory, where, "fabric.host_memory"));
    if (t->fabric == SIM_FABRIC_PCIE && t->p2p_fanout.bandwidth != 0)
        USP_CHECK(check_link(&t->p2p_fanout, where, "fabric.p2p_fanout"));
    if (t->nics_per_node > 0)
        USP_CHECK(check_link(&t->nic, where, "network.nic"));
    USP_CHECK(sim_host_check(&t->host, where));
    return sim_gpu_check(&t->gpu, where, "gpu.");
}

usp_status sim_topology_check(const sim_topology *t)
{
    char where[96];
    snprintf(where, sizeof where, "topology %s", t->name);
    return check_topology(t, where);
}

/* --- the JSON reader ------------------------------------------------------- */

/* An object field, or NULL when it is absent and optional. */
static usp_status read_object(const json_t *obj, sim_json_at at, const char *key, int required, const char *hint,
                              const json_t **out)
{
    *out = json_object_get(obj, key);
    if (!*out && required)
        return usp_error(USP_ERR_CONFIG, "%s: field '%s%s' is missing (%s)", at.where, at.prefix, key, hint);
    if (*out && !json_is_object(*out))
        return usp_error(USP_ERR_CONFIG, "%s: field '%s%s' must be an object (%s), not %s", at.where, at.prefix,
                         key, hint, sim_json_kind(*out));
    return USP_OK;
}

/* {"bandwidth_gbs": line rate GB/s per direction (required), "efficiency" (1), "latency_us" (0)} */
static usp_status read_link(const json_t *parent, sim_json_at at, const char *key, const char *example,
                            sim_link_class *out)
{
    static const char *const known[] = {"bandwidth_gbs", "efficiency", "latency_us", NULL};
    const json_t *obj;
    USP_CHECK(read_object(parent, at, key, 1, example, &obj));
    char prefix[128];
    snprintf(prefix, sizeof prefix, "%s%s.", at.prefix, key);
    sim_json_at in = {at.where, prefix};
    USP_CHECK(sim_json_check_keys(obj, in, known));
    sim_link_class c = {.efficiency = 1, .latency = 0};
    USP_CHECK(sim_json_number(obj, in, &link_bandwidth, 1, &c.bandwidth));
    USP_CHECK(sim_json_number(obj, in, &link_efficiency, 0, &c.efficiency));
    USP_CHECK(sim_json_number(obj, in, &link_latency, 0, &c.latency));
    *out = c;
    return USP_OK;
}

/* "p2p": "system" (the default: P2P between every pair), "switch" or "off". */
static usp_status read_p2p_mode(const json_t *fabric, sim_json_at at, sim_p2p_mode *out)
{
    const json_t *v = json_object_get(fabric, "p2p");
    *out = SIM_P2P_SYSTEM;
    if (!v)
        return USP_OK;
    for (sim_p2p_mode m = SIM_P2P_SYSTEM; m <= SIM_P2P_OFF; m++)
        if (json_is_string(v) && strcmp(json_string_value(v), sim_p2p_mode_name(m)) == 0) {
            *out = m;
            return USP_OK;
        }
    return usp_error(USP_ERR_CONFIG, "%s: field 'fabric.p2p' is %s%s%s: it must be \"system\" (P2P between every "
                     "pair), \"switch\" (below a common PCIe switch, NCCL's default) or \"off\"", at.where,
                     json_is_string(v) ? "\"" : "", json_is_string(v) ? json_string_value(v) : sim_json_kind(v),
                     json_is_string(v) ? "\"" : "");
}

static usp_status read_fabric(const json_t *root, sim_json_at at, sim_topology *t)
{
    static const char *const known[] = {"kind", "gpu_link", "gpus_per_switch", "switches_per_socket",
                                        "switch_uplink", "host_bridge", "socket_link", "p2p", "host_memory",
                                        "p2p_fanout", NULL};
    const json_t *obj;
    USP_CHECK(read_object(root, at, "fabric", 1, "{\"kind\": \"nvswitch\" or \"pcie\", \"gpu_link\": {...}}", &obj));
    sim_json_at in = {at.where, "fabric."};
    USP_CHECK(sim_json_check_keys(obj, in, known));
    const json_t *kind = json_object_get(obj, "kind");
    const char *k = json_is_string(kind) ? json_string_value(kind) : NULL;
    if (!k || (strcmp(k, "nvswitch") != 0 && strcmp(k, "pcie") != 0))
        return usp_error(USP_ERR_CONFIG, "%s: field 'fabric.kind' is %s%s%s: it must be \"nvswitch\" or \"pcie\"",
                         at.where, k ? "\"" : "", k ? k : kind ? sim_json_kind(kind) : "missing", k ? "\"" : "");
    t->fabric = strcmp(k, "pcie") == 0 ? SIM_FABRIC_PCIE : SIM_FABRIC_NVSWITCH;
    USP_CHECK(read_link(obj, in, "gpu_link", "{\"bandwidth_gbs\": 450, \"efficiency\": 0.82, \"latency_us\": 1.25}",
                        &t->gpu_link));
    if (t->fabric == SIM_FABRIC_NVSWITCH)
        return USP_OK;
    t->gpus_per_switch = t->gpus_per_node, t->switches_per_socket = 1;
    USP_CHECK(sim_json_int(obj, in, "gpus_per_switch", 0, 1, MAX_GPUS_PER_NODE, "GPUs under one PCIe switch",
                           &t->gpus_per_switch));
    USP_CHECK(sim_json_int(obj, in, "switches_per_socket", 0, 1, MAX_GPUS_PER_NODE,
                           "PCIe switches under one CPU socket", &t->switches_per_socket));
    USP_CHECK(check_pcie_shape(t, at.where));
    USP_CHECK(read_p2p_mode(obj, at, &t->p2p));
    int switches = t->gpus_per_node / t->gpus_per_switch, sockets = switches / t->switches_per_socket;
    const char *x16 = "{\"bandwidth_gbs\": 31.5, \"efficiency\": 0.79, \"latency_us\": 1}";
    if (switches > 1 || t->p2p != SIM_P2P_SYSTEM) /* traffic leaves a switch for the CPU */
        USP_CHECK(read_link(obj, in, "switch_uplink", x16, &t->switch_uplink));
    if (switches > 1) /* more than one switch: P2P between them crosses the CPU's root complex */
        USP_CHECK(read_link(obj, in, "host_bridge", "{\"bandwidth_gbs\": 48, \"latency_us\": 0.5}", &t->host_bridge));
    if (t->p2p != SIM_P2P_SYSTEM)
        USP_CHECK(read_link(obj, in, "host_memory", "{\"bandwidth_gbs\": 72, \"latency_us\": 1}", &t->host_memory));
    if (sockets > 1)
        USP_CHECK(read_link(obj, in, "socket_link", "{\"bandwidth_gbs\": 32, \"latency_us\": 1}", &t->socket_link));
    if (json_object_get(obj, "p2p_fanout")) /* optional: absent, the collapse is not modelled */
        USP_CHECK(read_link(obj, in, "p2p_fanout", "{\"bandwidth_gbs\": 2}", &t->p2p_fanout));
    return USP_OK;
}

static usp_status read_network(const json_t *root, sim_json_at at, sim_topology *t)
{
    static const char *const known[] = {"nics_per_node", "nic", NULL};
    const json_t *obj;
    USP_CHECK(read_object(root, at, "network", 0, "{\"nics_per_node\": 8, \"nic\": {...}}", &obj));
    if (!obj)
        return USP_OK;
    sim_json_at in = {at.where, "network."};
    USP_CHECK(sim_json_check_keys(obj, in, known));
    USP_CHECK(sim_json_int(obj, in, "nics_per_node", 1, 1, MAX_NICS_PER_NODE, "NICs in a node, e.g. 8: one per GPU",
                           &t->nics_per_node));
    return read_link(obj, in, "nic", "{\"bandwidth_gbs\": 50, \"efficiency\": 0.95, \"latency_us\": 3}", &t->nic);
}

static usp_status read_gpu(const json_t *root, sim_json_at at, sim_gpu *gpu)
{
    const json_t *v = json_object_get(root, "gpu");
    if (!v)
        return usp_error(USP_ERR_CONFIG, "%s: field 'gpu' is missing (a preset, one of %s, or an object)", at.where,
                         sim_gpu_preset_names());
    if (json_is_string(v)) {
        if (sim_gpu_preset(json_string_value(v), gpu))
            return USP_OK;
        return usp_error(USP_ERR_CONFIG, "%s: field 'gpu' is \"%s\": not a GPU preset (%s); or give an object",
                         at.where, json_string_value(v), sim_gpu_preset_names());
    }
    if (!json_is_object(v))
        return usp_error(USP_ERR_CONFIG, "%s: field 'gpu' must be a preset name (%s) or an object, not %s", at.where,
                         sim_gpu_preset_names(), sim_json_kind(v));
    return sim_gpu_from_json(v, at.where, "gpu.", gpu);
}

static usp_status read_topology(const json_t *root, const char *where, sim_topology *t)
{
    static const char *const known[] = {"name", "gpu", "nodes", "gpus_per_node", "base_latency_us", "fabric",
                                        "network", "host", "collectives", NULL};
    sim_json_at at = {where, ""};
    if (!json_is_object(root))
        return usp_error(USP_ERR_CONFIG, "%s: the file must hold one JSON object (see docs/cluster_model.md), "
                         "not %s", where, sim_json_kind(root));
    USP_CHECK(sim_json_check_keys(root, at, known));
    *t = (sim_topology){.nodes = 1, .base_latency = NCCL_BASE_LATENCY};
    const json_t *name = json_object_get(root, "name");
    if (name && !json_is_string(name))
        return usp_error(USP_ERR_CONFIG, "%s: field 'name' must be a string, not %s", where, sim_json_kind(name));
    snprintf(t->name, sizeof t->name, "%s", name ? json_string_value(name) : "custom");
    USP_CHECK(sim_json_int(root, at, "nodes", 0, 1, MAX_NODES, "nodes in the cluster", &t->nodes));
    USP_CHECK(sim_json_int(root, at, "gpus_per_node", 1, 1, MAX_GPUS_PER_NODE, "GPUs in one node, e.g. 8",
                           &t->gpus_per_node));
    USP_CHECK(sim_json_number(root, at, &base_latency, 0, &t->base_latency));
    USP_CHECK(read_gpu(root, at, &t->gpu));
    USP_CHECK(read_fabric(root, at, t));
    USP_CHECK(read_network(root, at, t));
    t->host = sim_host_default(); /* not by the file's name: a file says its host or gets the default */
    USP_CHECK(sim_host_from_json(json_object_get(root, "host"), where, &t->host));
    USP_CHECK(sim_collective_tables_from_json(json_object_get(root, "collectives"), where, &t->measured));
    return check_topology(t, where);
}

usp_status sim_topology_from_name_or_file(const char *spec, int nodes, sim_topology *out)
{
    if (nodes < 0)
        return usp_error(USP_ERR_CONFIG, "--nodes %d: the number of nodes must be at least 1", nodes);
    sim_topology t;
    if (sim_topology_preset(spec, nodes, &t)) {
        USP_CHECK(sim_topology_check(&t));
        *out = t;
        return USP_OK;
    }
    size_t len = strlen(spec);
    if (len < 5 || strcmp(spec + len - 5, ".json") != 0)
        return usp_error(USP_ERR_CONFIG, "--topology %s: not a preset (%s) nor a .json topology file "
                         "(docs/cluster_model.md)", spec, sim_topology_preset_names());
    usp_strbuf where = {0}; /* grown, not cut: a deep path stays whole in every message */
    usp_strbuf_printf(&where, "topology file %s", spec);
    if (where.failed) {
        usp_strbuf_free(&where);
        return usp_error(USP_ERR_RUNTIME, "out of memory naming the topology file");
    }
    json_t *root = NULL;
    usp_status s = sim_json_load_file(spec, usp_strbuf_text(&where), &root);
    if (s == USP_OK)
        s = read_topology(root, usp_strbuf_text(&where), &t);
    json_decref(root);
    if (s == USP_OK && nodes > 0)
        t.nodes = nodes;
    if (s == USP_OK)
        s = check_shape(&t, usp_strbuf_text(&where));
    usp_strbuf_free(&where);
    if (s == USP_OK)
        *out = t;
    return s;
}

usp_status sim_topology_for_world(const char *spec, int nodes, int world, sim_topology *out)
{
    spec = spec ? spec : "dgx-h100";
    USP_CHECK(sim_topology_from_name_or_file(spec, nodes, out));
    if (nodes == 0 && out->nodes * out->gpus_per_node < world) /* grow a preset or file to the world */
        USP_CHECK(sim_topology_from_name_or_file(spec, (world + out->gpus_per_node - 1) / out->gpus_per_node, out));
    if (out->nodes * out->gpus_per_node < world)
        return usp_error(USP_ERR_CONFIG, "--world %d does not fit on --nodes %d of %s (%d GPUs each); use --nodes %d",
                         world, out->nodes, out->name, out->gpus_per_node,
                         (world + out->gpus_per_node - 1) / out->gpus_per_node);
    return USP_OK;
}
