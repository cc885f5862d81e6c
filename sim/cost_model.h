/* The cost model behind the virtual clocks: the cluster (sim/topology.h, its
 * GPUs included) turned into seconds.
 *
 * Rank r runs on GPU r (node r / gpus_per_node). A compute op costs the GPU's
 * roofline (sim/gpu_model.h). A communication costs what NCCL's algorithm for
 * it costs on the topology:
 *     seconds = latency + makespan of its transfers under max-min sharing
 * (sim/flow_model.h). The transfers are each member's bytes to each peer
 * (usp_comm_op_traffic: all-to-all as P-1 concurrent pairwise transfers,
 * all-reduce / all-gather / reduce-scatter / broadcast as a ring, a send as one
 * transfer). A ring edge between nodes is split over as many rails as the
 * group has GPUs on the smaller of its two nodes, the way NCCL's channels
 * leave a node through several NICs; pairwise transfers use each GPU's own NIC
 * (so an all-to-all over N nodes runs at about one NIC per GPU: busbw about
 * N/(N-1) x the NIC's bandwidth, nccl-tests issue 130).
 * On PCIe, a member that sends by P2P through a CPU's root complex to f > 1
 * peers sends those flows through its fan-out link too, at the topology's
 * p2p_fanout / f (sim/topology.h: a root complex forwards one stream a GPU
 * at link rate and collapses under many).
 *
 * Latency follows NCCL's tuning model: a base latency per call plus the hops a
 * byte makes, each at its route's latency. A ring all-reduce moves data
 * 2(n-1) hops, all-gather / reduce-scatter / broadcast n-1, so they cost
 * base + 2(n-1)/n (or (n-1)/n) x the sum of the ring's edge latencies; an
 * all-to-all or a transfer costs base + its slowest route's latency.
 *
 * An all-reduce across nodes is priced as NCCL's tuning model picks it: the
 * ring, or the tree (intra-node chains under a double binary tree of nodes:
 * latency 2 x (chain + log2(nodes) x network hop), algbw = busbw / 2 at 92% of
 * the ring's busbw), whichever is faster; the math is in cost_model.c.
 *
 * Point-to-point transfers posted by ranks share links over virtual time
 * (sim/p2p_flows.h); sim_cost_transfer is one transfer alone.
 *
 * Not modelled: NVLink SHARP (NVLS: NCCL's default all-reduce inside an H100
 * node, about 480 GB/s busbw against the ring's 370), and contention between a
 * collective and other traffic (each collective is priced on an idle cluster). */
#ifndef USP_SIM_COST_MODEL_H
#define USP_SIM_COST_MODEL_H

#include <stdint.h>

#include "core/comm/comm.h"
#include "core/ops/ops.h"
#include "sim/topology.h"

typedef struct sim_cost_model {
    sim_topology topology; /* the cluster, its GPUs included */
    usp_dtype dtype;       /* the precision the modelled GPUs compute in (USP_BF16) */
    int ranks_per_node;    /* the ranks sharing a node's host (0: gpus_per_node); the world sets it */
    int no_overlap;        /* 1: each rank's streams share one clock, nothing runs beside anything (the model
                              before sim/virtual_streams.h: what overlap saves is the difference) */
} sim_cost_model;

/* Enough dgx-h100 nodes for `world_size` ranks, computing in BF16. */
sim_cost_model sim_cost_model_default(int world_size);

/* A model of `topology` computing in `dtype`. */
sim_cost_model sim_cost_model_make(const sim_topology *topology, usp_dtype dtype);

/* USP_ERR_CONFIG when the topology is not valid or has fewer GPUs than `world_size`. */
usp_status sim_cost_model_check(const sim_cost_model *m, int world_size);

/* Seconds an op takes on one GPU (the roofline of sim/gpu_model.h). */
double sim_cost_compute(const sim_cost_model *m, const usp_op_cost *cost);

/* The same with the fraction `held` of its operand bytes in the rank's cache (sim/cache_model.h). */
double sim_cost_compute_held(const sim_cost_model *m, const usp_op_cost *cost, double held);

/* Seconds one transfer of `bytes` from rank src to rank dst takes, alone on its route. */
double sim_cost_transfer(const sim_cost_model *m, int src, int dst, uint64_t bytes);

/* Seconds a collective of `kind` takes over the world ranks members[n], when
 * member i sends bytes[i * n + j] to member j (usp_comm_op_traffic: an
 * all-reduce as its ring), with the algorithm NCCL would pick.
 * USP_ERR_RUNTIME when out of memory. */
usp_status sim_cost_collective(const sim_cost_model *m, usp_comm_kind kind, int n, const int *members,
                               const uint64_t *bytes, double *seconds);

/* The algorithms a collective is priced with. */
typedef enum sim_algorithm {
    SIM_ALGO_AUTO,   /* (a request) what NCCL's tuning model picks */
    SIM_ALGO_RING,   /* ring: all-reduce, all-gather, reduce-scatter, broadcast (a chain), barrier */
    SIM_ALGO_TREE,   /* all-reduce across nodes: intra-node chains under a double binary tree of nodes */
    SIM_ALGO_DIRECT, /* pairwise transfers: all-to-all, send/recv */
} sim_algorithm;

/* sim_cost_collective with the algorithm: `request` SIM_ALGO_AUTO prices NCCL's
 * choice, SIM_ALGO_RING or SIM_ALGO_TREE that algorithm where it applies (the
 * tree: an all-reduce or barrier over more than one node; otherwise the
 * collective's only one); the algorithm priced goes to *used when non-NULL. */
usp_status sim_cost_collective_algo(const sim_cost_model *m, usp_comm_kind kind, int n, const int *members,
                                    const uint64_t *bytes, sim_algorithm request, double *seconds,
                                    sim_algorithm *used);

/* A collective's traffic as a list: member src[k] sends bytes[k] to member dst[k]
 * (indices into the group), in ascending (src, dst) order; pairs that move nothing
 * may be left out. The simulator prices its collectives from this form
 * (usp_comm_op_peers), whose size is the number of transfers, not n^2. */
typedef struct sim_traffic {
    size_t n;
    const int *src, *dst;
    const uint64_t *bytes;
    double held; /* the fraction of the members' buffers their caches hold (sim/cache_model.h; 0: none) */
} sim_traffic;

/* sim_cost_collective_algo on the traffic list: the same price, in O(entries + n) steps. */
usp_status sim_cost_collective_traffic(const sim_cost_model *m, usp_comm_kind kind, int n, const int *members,
                                       const sim_traffic *traffic, sim_algorithm request, double *seconds,
                                       sim_algorithm *used);

#endif
