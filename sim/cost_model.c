/* Collectives and transfers priced on the topology (see cost_model.h). */
#include "sim/cost_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/flow_model.h"

sim_cost_model sim_cost_model_default(int world_size)
{
    sim_cost_model m = {.dtype = USP_BF16};
    int nodes = world_size > 8 ? (world_size + 7) / 8 : 1;
    sim_topology_preset("dgx-h100", nodes, &m.topology);
    return m;
}

sim_cost_model sim_cost_model_make(const sim_topology *topology, usp_dtype dtype)
{
    return (sim_cost_model){.topology = *topology, .dtype = dtype};
}

usp_status sim_cost_model_check(const sim_cost_model *m, int world_size)
{
    USP_CHECK(sim_topology_check(&m->topology));
    const sim_topology *t = &m->topology;
    if (world_size > sim_topology_gpus(t))
        return usp_error(USP_ERR_CONFIG, "--world %d: topology %s has %d GPUs (%d node%s of %d); use --nodes %d or "
                         "fewer ranks", world_size, t->name, sim_topology_gpus(t), t->nodes, t->nodes > 1 ? "s" : "",
                         t->gpus_per_node, (world_size + t->gpus_per_node - 1) / t->gpus_per_node);
    return USP_OK;
}

double sim_cost_compute(const sim_cost_model *m, const usp_op_cost *cost)
{
    return sim_cost_compute_held(m, cost, 0);
}

double sim_cost_compute_held(const sim_cost_model *m, const usp_op_cost *cost, double held)
{
    int sharing = m->ranks_per_node > 0 ? m->ranks_per_node : m->topology.gpus_per_node;
    double host = sim_host_op_seconds(&m->topology.host, sharing, cost);
    return host >= 0.0 ? host : sim_gpu_op_seconds_held(&m->topology.gpu, m->dtype, cost, held);
}

double sim_cost_transfer(const sim_cost_model *m, int src, int dst, uint64_t bytes)
{
    const sim_topology *t = &m->topology;
    int links[SIM_ROUTE_MAX];
    int n = sim_topology_route(t, src, dst, links);
    double slowest = 0.0, latency = sim_topology_route_latency(t, links, n);
    for (int i = 0; i < n; i++) {
        double cap, lat;
        sim_topology_link(t, links[i], &cap, &lat);
        slowest = i == 0 || cap < slowest ? cap : slowest;
    }
    return t->base_latency + latency + (n > 0 ? (double)bytes / slowest : 0.0);
}

/* Ring algorithms: data moves to the next member only, and NCCL runs them on
 * several channels that leave a node through several NICs. */
static int is_ring(usp_comm_kind kind)
{
    return kind == USP_OP_ALL_REDUCE || kind == USP_OP_ALL_GATHER || kind == USP_OP_REDUCE_SCATTER ||
           kind == USP_OP_BROADCAST || kind == USP_OP_BARRIER;
}

/* Hops a byte makes around the ring, as a fraction of the ring's length n. */
static double ring_hops(usp_comm_kind kind, int n)
{
    double f = (double)(n - 1) / n;
    return kind == USP_OP_ALL_REDUCE || kind == USP_OP_BARRIER ? 2.0 * f : f;
}

/* Seconds of latency from GPU a to GPU b: the links of the route between them. */
static double route_latency(const sim_topology *t, int a, int b)
{
    int links[SIM_ROUTE_MAX];
    return sim_topology_route_latency(t, links, sim_topology_route(t, a, b, links));
}

static double latency_of(const sim_topology *t, usp_comm_kind kind, int n, const int *members,
                         const sim_traffic *traffic)
{
    double hops = 0.0;
    if (is_ring(kind)) {
        for (int i = 0; i < n; i++)
            hops += route_latency(t, members[i], members[(i + 1) % n]);
        return t->base_latency + ring_hops(kind, n) * hops;
    }
    for (size_t k = 0; k < traffic->n; k++)
        if (traffic->bytes[k] > 0) {
            double l = route_latency(t, members[traffic->src[k]], members[traffic->dst[k]]);
            hops = l > hops ? l : hops;
        }
    return t->base_latency + hops;
}

/* The flows of one collective, their links renumbered densely for the flow model. */
typedef struct flow_build {
    int n_flows, n_entries, n_links;
    double *bytes;      /* [cap_flows] */
    int *path_start;    /* [cap_flows + 1] */
    int *links;         /* [cap_flows * max_route] dense link ids */
    double *capacity;   /* [distinct links] by dense id */
    int *hash_key;      /* [hash_size] topology link id + 1, 0 = empty */
    int *hash_val;      /* [hash_size] dense id */
    size_t hash_mask;
    int *by_node;       /* [n] members grouped by node, in group order */
    int *node_start;    /* [nodes + 1] */
} flow_build;

static int dense_link(flow_build *b, const sim_topology *t, int link)
{
    size_t h = ((size_t)link * 2654435761u) & b->hash_mask;
    while (b->hash_key[h] && b->hash_key[h] != link + 1)
        h = (h + 1) & b->hash_mask;
    if (!b->hash_key[h]) {
        double latency;
        b->hash_key[h] = link + 1;
        b->hash_val[h] = b->n_links;
        sim_topology_link(t, link, &b->capacity[b->n_links], &latency);
        b->n_links++;
    }
    return b->hash_val[h];
}

static void add_flow(flow_build *b, const sim_topology *t, double bytes, const int *links, int n)
{
    for (int i = 0; i < n; i++)
        b->links[b->n_entries++] = dense_link(b, t, links[i]);
    b->bytes[b->n_flows++] = bytes;
    b->path_start[b->n_flows] = b->n_entries;
}

/* Members grouped by node (counting sort, stable: group order within a node). */
static void group_by_node(flow_build *b, const sim_topology *t, int n, const int *members)
{
    for (int k = 0; k <= t->nodes; k++)
        b->node_start[k] = 0;
    for (int i = 0; i < n; i++)
        b->node_start[sim_topology_node_of(t, members[i]) + 1]++;
    for (int k = 0; k < t->nodes; k++)
        b->node_start[k + 1] += b->node_start[k];
    for (int i = 0; i < n; i++) {
        int node = sim_topology_node_of(t, members[i]);
        int at = b->node_start[node]++;
        b->by_node[at] = members[i];
    }
    for (int k = t->nodes; k > 0; k--) /* the fill moved every start to the next node's */
        b->node_start[k] = b->node_start[k - 1];
    b->node_start[0] = 0;
}

/* A ring edge between nodes, split evenly over min(GPUs of the group on either
 * node) rails: channel r leaves through the NIC of the r-th such GPU. */
static void add_rail_flows(flow_build *b, const sim_topology *t, double bytes, int src, int dst)
{
    int ns = sim_topology_node_of(t, src), nd = sim_topology_node_of(t, dst);
    int cs = b->node_start[ns + 1] - b->node_start[ns], cd = b->node_start[nd + 1] - b->node_start[nd];
    int rails = cs < cd ? cs : cd, links[SIM_ROUTE_MAX];
    for (int r = 0; r < rails; r++) {
        int a = b->by_node[b->node_start[ns] + r], d = b->by_node[b->node_start[nd] + r];
        int k = sim_topology_rail_route(t, ns, sim_topology_nic_of(t, a), nd, sim_topology_nic_of(t, d), links);
        add_flow(b, t, bytes / rails, links, k);
    }
}

/* The most links a route crosses: NVSwitch up and down; PCIe GPU to NIC across
 * sockets, the wire, and the same on the other node (inside a node, a route
 * and its fan-out link are fewer). */
static size_t max_route(const sim_topology *t) { return t->fabric == SIM_FABRIC_NVSWITCH ? 2 : 14; }

static usp_status build_alloc(flow_build *b, const sim_topology *t, size_t flows, int n, void **block)
{
    size_t entries = flows * max_route(t), distinct = (size_t)sim_topology_links(t), hash = 16;
    distinct = entries < distinct ? entries : distinct;
    while (hash < 2 * distinct)
        hash *= 2;
    int nodes = t->nodes;
    size_t doubles = flows + distinct, ints = (flows + 1) + entries + 2 * hash + (size_t)n + (size_t)nodes + 1;
    USP_CHECK(usp_malloc(block, doubles * sizeof(double) + ints * sizeof(int), "the flows of a collective"));
    double *d = *block;
    b->bytes = d, b->capacity = d + flows;
    int *i = (int *)(d + doubles);
    b->path_start = i, b->links = i + flows + 1, b->hash_key = b->links + entries, b->hash_val = b->hash_key + hash;
    b->by_node = b->hash_val + hash, b->node_start = b->by_node + n;
    b->hash_mask = hash - 1;
    memset(b->hash_key, 0, hash * sizeof *b->hash_key);
    b->n_flows = b->n_entries = b->n_links = 0;
    b->path_start[0] = 0;
    return USP_OK;
}

/* Per member, the peers it sends to by P2P through a root complex (sim_topology_fanout_link):
 * fanout[n], or NULL when the topology does not model the collapse. */
static usp_status count_fanout(const sim_topology *t, int n, const int *members, const sim_traffic *traffic,
                               int **fanout)
{
    *fanout = NULL;
    if (t->fabric != SIM_FABRIC_PCIE || t->p2p_fanout.bandwidth <= 0)
        return USP_OK;
    USP_CHECK(usp_calloc((void **)fanout, (size_t)n, sizeof **fanout, "the fan-out of a collective"));
    for (size_t k = 0; k < traffic->n; k++)
        if (traffic->bytes[k] > 0 && sim_topology_fanout_link(t, members[traffic->src[k]], members[traffic->dst[k]]) >= 0)
            (*fanout)[traffic->src[k]]++;
    return USP_OK;
}

/* The makespan of the collective's transfers under max-min sharing: each
 * member's bytes to each peer, a ring edge between nodes split over rails, a
 * member's P2P through a root complex to several peers through its fan-out
 * link. `flows` bounds the number of transfers (rails included). */
static usp_status transfers_makespan(const sim_topology *t, int ring, int spans_nodes, size_t flows, int n,
                                     const int *members, const sim_traffic *traffic, double *makespan)
{
    flow_build b;
    void *block;
    int *fanout;
    USP_CHECK(count_fanout(t, n, members, traffic, &fanout));
    usp_status s = build_alloc(&b, t, flows, n, &block);
    if (s != USP_OK) {
        free(fanout);
        return s;
    }
    if (ring && spans_nodes)
        group_by_node(&b, t, n, members);
    int links[SIM_ROUTE_MAX];
    for (size_t k = 0; k < traffic->n; k++) {
        double x = (double)traffic->bytes[k];
        int src = members[traffic->src[k]], dst = members[traffic->dst[k]];
        if (x <= 0 || src == dst)
            continue;
        if (ring && sim_topology_node_of(t, src) != sim_topology_node_of(t, dst)) {
            add_rail_flows(&b, t, x, src, dst);
            continue;
        }
        int hops = sim_topology_route(t, src, dst, links), fan = sim_topology_fanout_link(t, src, dst);
        int f = fanout && fan >= 0 ? fanout[traffic->src[k]] : 0;
        if (f > 1)
            links[hops++] = fan;
        add_flow(&b, t, x, links, hops);
        if (f > 1) /* the root complex forwards the GPU's f interleaved streams at 1/f of the fan-out rate */
            b.capacity[b.links[b.n_entries - 1]] = t->p2p_fanout.bandwidth * t->p2p_fanout.efficiency / f;
    }
    free(fanout);
    sim_flow_set set = {.n_flows = b.n_flows, .bytes = b.bytes, .path_start = b.path_start, .links = b.links,
                        .n_links = b.n_links, .capacity = b.capacity};
    s = sim_flow_run(&set, NULL, makespan);
    free(block);
    return s;
}

/* --- NCCL's tree all-reduce ----------------------------------------------------
 * Across nodes NCCL runs an all-reduce as a ring or as a tree (a chain through
 * each node's GPUs under a double binary tree of nodes: Sanders, Speck and
 * Traff, "Two-tree algorithms for full bandwidth broadcast, reduction and
 * scan", 2009; NCCL src/graph/trees.cc) and picks, per call, the one its
 * tuning model (src/graph/tuning.cc, ncclTopoTuneModel) predicts faster:
 * time = latency + bytes / algbw for each.
 *
 * Bandwidth. The message is split in halves, one per tree. A node is an inner
 * node (two children) of one tree and a leaf of the other: as the inner node
 * it receives S/2 from each child and sends S/2 up (reduce), then receives S/2
 * and sends S/2 to each child (broadcast); as the leaf it sends S/2 up and
 * receives S/2. That is 2S out and 2S in through the node's network links
 * (its GPU's NIC when a node holds one GPU of the group), where a ring moves
 * 2(n-1)/n S. With busbw the bandwidth a GPU's links give, the ring's algbw is
 * busbw n / (2(n-1)) and the tree's busbw / 2: tuning.cc converts bus to
 * algorithm bandwidth with those two ratios, from one bandwidth per channel for
 * both (the intra-node one up to 2 nodes, the network's beyond), and gives the
 * tree 92% of it. So here the tree's busbw is 0.92 x the ring's on the same
 * group, as the flow model prices the ring (its makespan M = 2(n-1)/n S /
 * busbw), and the tree moves its bytes in M x n / (n-1) / 0.92.
 *
 * Latency (tuning.cc): base + 2 x ((ppn - 1) x intra-node hop + log2(nodes) x
 * inter-node hop), up the chain and the tree (reduce) and back down
 * (broadcast); log2 rounded down as NCCL's log2i. An intra-node hop costs the
 * route between consecutive members of a node's chain (the group's members on
 * that node in group order; the longest chain of the nodes counts), an
 * inter-node hop the route between the chains' heads (the first member on each
 * node) of consecutive nodes, the slowest. The base is the ring's 8.4 us: one
 * per-call cost for every algorithm (NCCL's Simple tree has base 0 but larger
 * per-hop chunk latencies).
 *
 * Not modelled: the per-channel cap on the tree's busbw (perChMaxTreeBws,
 * 36-41 GB/s a channel on Hopper: not binding with NCCL's 16+ channels), and
 * that on 2 nodes the two trees are one edge each, so a node moves S rather
 * than 2S (NCCL's model does not see it either). */
#define TREE_BUS_EFFICIENCY 0.92

static usp_status tree_latency(const sim_topology *t, int n, const int *members, double *latency)
{
    double *chain; /* [nodes] each node's chain latency so far */
    int *last;     /* [nodes] the chain's last member so far on each node, -1 before its head */
    USP_CHECK(usp_malloc((void **)&chain, (size_t)t->nodes * (sizeof *chain + sizeof *last), "a tree's chains"));
    last = (int *)(chain + t->nodes);
    for (int k = 0; k < t->nodes; k++)
        last[k] = -1, chain[k] = 0.0;
    double longest_chain = 0.0, inter = 0.0;
    int nodes = 0, prev_head = -1;
    for (int i = 0; i < n; i++) {
        int g = members[i], k = sim_topology_node_of(t, g);
        if (last[k] < 0) {
            if (prev_head >= 0)
                inter = fmax(inter, route_latency(t, prev_head, g));
            prev_head = g, nodes++;
        } else {
            chain[k] += route_latency(t, last[k], g);
            longest_chain = fmax(longest_chain, chain[k]);
        }
        last[k] = g;
    }
    free(chain);
    int log2_nodes = 0;
    while (nodes >>= 1)
        log2_nodes++;
    *latency = t->base_latency + 2.0 * (longest_chain + log2_nodes * inter);
    return USP_OK;
}

usp_status sim_cost_collective(const sim_cost_model *m, usp_comm_kind kind, int n, const int *members,
                               const uint64_t *bytes, double *seconds)
{
    return sim_cost_collective_algo(m, kind, n, members, bytes, SIM_ALGO_AUTO, seconds, NULL);
}

/* The dense matrix as a traffic list, in (src, dst) order: the pairs that move bytes. */
usp_status sim_cost_collective_algo(const sim_cost_model *m, usp_comm_kind kind, int n, const int *members,
                                    const uint64_t *bytes, sim_algorithm request, double *seconds,
                                    sim_algorithm *used)
{
    size_t cells = (size_t)n * (size_t)n, entries = 0;
    for (size_t c = 0; c < cells; c++)
        entries += bytes[c] > 0;
    void *block = NULL;
    if (entries > 0)
        USP_CHECK(usp_malloc(&block, entries * (2 * sizeof(int) + sizeof(uint64_t)), "the traffic of a collective"));
    uint64_t *b = block;
    int *src = (int *)(b + entries), *dst = src + entries;
    size_t k = 0;
    for (size_t c = 0; c < cells; c++)
        if (bytes[c] > 0)
            src[k] = (int)(c / (size_t)n), dst[k] = (int)(c % (size_t)n), b[k++] = bytes[c];
    sim_traffic t = {.n = entries, .src = src, .dst = dst, .bytes = b};
    usp_status s = sim_cost_collective_traffic(m, kind, n, members, &t, request, seconds, used);
    free(block);
    return s;
}

usp_status sim_cost_collective_traffic(const sim_cost_model *m, usp_comm_kind kind, int n, const int *members,
                                       const sim_traffic *traffic, sim_algorithm request, double *seconds,
                                       sim_algorithm *used)
{
    const sim_topology *t = &m->topology;
    int ring = is_ring(kind), spans_nodes = 0;
    *seconds = 0.0;
    if (used)
        *used = ring ? SIM_ALGO_RING : SIM_ALGO_DIRECT;
    if (n < 2)
        return USP_OK; /* nothing crosses a link */
    size_t flows = 0;
    for (int i = 0; i < n; i++)
        spans_nodes |= sim_topology_node_of(t, members[i]) != sim_topology_node_of(t, members[0]);
    const sim_collective_table *measured =
        t->measured.n > 0 ? sim_collective_find(&t->measured, kind, n, spans_nodes) : NULL;
    if (measured) { /* a calibrated machine's own time for this call (sim/collective_table.h) */
        const sim_collective_table *hot =
            traffic->held > 0 ? sim_collective_find_in(&t->measured, kind, n, spans_nodes, 1) : NULL;
        *seconds = sim_collective_seconds_held(measured, hot, sim_collective_key(traffic->n, traffic->src,
                                                                                 traffic->dst, traffic->bytes, n),
                                               traffic->held);
        return USP_OK;
    }
    for (size_t k = 0; k < traffic->n; k++)
        flows += traffic->bytes[k] > 0 && members[traffic->src[k]] != members[traffic->dst[k]];
    if (ring && spans_nodes)
        flows *= (size_t)(t->gpus_per_node < n ? t->gpus_per_node : n); /* at most that many rails an edge */
    double makespan = 0.0;
    if (flows > 0)
        USP_CHECK(transfers_makespan(t, ring, spans_nodes, flows, n, members, traffic, &makespan));
    *seconds = latency_of(t, kind, n, members, traffic) + makespan;
    /* NCCL's tree: all-reduce only, across nodes only (inside one node these presets run the ring) */
    int reduces = kind == USP_OP_ALL_REDUCE || kind == USP_OP_BARRIER;
    if (!reduces || !spans_nodes || request == SIM_ALGO_RING)
        return USP_OK;
    double tree;
    USP_CHECK(tree_latency(t, n, members, &tree));
    tree += makespan * n / (n - 1) / TREE_BUS_EFFICIENCY;
    if (request == SIM_ALGO_TREE || tree < *seconds) {
        *seconds = tree;
        if (used)
            *used = SIM_ALGO_TREE;
    }
    return USP_OK;
}
