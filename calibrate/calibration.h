/* Calibration: measured collectives and kernels turned into the cluster model.
 *
 * `usp calibrate` times all_to_all, all_reduce and sendrecv over message sizes
 * on each level of the machine (the world, the ranks of one node, one rank a
 * node across the nodes) and the backend's GEMM, flash attention and copies;
 * this file holds the arithmetic that makes a topology of it, so that it can
 * be tested on synthetic timings:
 *
 * - Bus bandwidth, as nccl-tests reports it (nccl-tests, doc/PERFORMANCE.md):
 *   algbw = S / t for S the bytes a rank sends, busbw = algbw x a factor that
 *   makes it comparable to the hardware's link speed whatever the rank count:
 *   all_to_all (n-1)/n (of S, 1/n stays on the rank), all_reduce 2(n-1)/n (a
 *   reduce-scatter then an all-gather), sendrecv 1.
 * - The alpha-beta model t(S) = alpha + busbytes(S) / beta (Hockney 1994):
 *   least squares weighted by 1/t^2, i.e. on relative error, so the small
 *   sizes (where t is alpha) set the latency and the large sizes (where t is
 *   S / beta) set the bandwidth, neither swamped by the other.
 * - The topology: one node of the measured ranks on a non-blocking switch
 *   (the model's "nvswitch" fabric), a GPU link at the measured intra-node
 *   busbw (in the model an all_to_all, a ring all_reduce and a sendrecv on
 *   such a node all run at busbw = the link's capacity; the all_to_all's is
 *   taken, the Ulysses collective), one NIC a rank at the measured
 *   across-node busbw, and the latencies solved from the model's own latency
 *   formulas (sim/cost_model.h) with the all_to_all's and the all_reduce's
 *   fitted latencies: a pairwise call costs base + 2 hop latencies, a ring
 *   all_reduce of n base + 4(n-1) hops. Efficiencies are 1: the
 *   measured figures are already what the backend reaches. The GPU is one
 *   "peak" (the fastest of the measured GEMM and attention rates) with each
 *   kernel's efficiency its rate over that peak, so the roofline gives back
 *   the measured times. A full calibration adds the kernels' classes
 *   (sim/kernel_model.h), which then price every op they have a class for. */
#ifndef USP_CALIBRATE_CALIBRATION_H
#define USP_CALIBRATE_CALIBRATION_H

#include <jansson.h>

#include "core/trace/comm_kind.h"
#include "core/base/status.h"
#include "sim/kernel_model.h"
#include "sim/topology.h"

/* nccl-tests' bus-bandwidth factor of `kind` over n ranks: all_to_all (n-1)/n,
 * all_reduce 2(n-1)/n, sendrecv (and send) 1; 0 for a kind without one. */
double sim_busbw_factor(usp_comm_kind kind, int n);

/* A fitted line t = alpha + bytes / bandwidth. */
typedef struct sim_alpha_beta {
    double alpha;     /* seconds, >= 0 */
    double bandwidth; /* bytes/s, > 0 */
} sim_alpha_beta;

/* Fits t[i] = alpha + bytes[i] / bandwidth over n >= 2 points (bytes: the bus
 * bytes, S x the busbw factor, so that bandwidth is a busbw), weighted by
 * 1 / t^2. A negative intercept (noise under a tiny latency) becomes 0 and a
 * slope that is not positive (times that do not grow with size) takes the
 * bandwidth of the largest size alone. USP_ERR_CONFIG for fewer than 2 points,
 * sizes all equal, or a time or size that is not a finite positive number. */
usp_status sim_fit_alpha_beta(const double *bytes, const double *seconds, int n, sim_alpha_beta *out);

/* One level's fits: all_to_all, all_reduce, sendrecv over `ranks` ranks. */
typedef struct sim_level_fit {
    int ranks;            /* 0: not measured */
    sim_alpha_beta a2a, all_reduce, sendrecv;
} sim_level_fit;

/* What a calibration measured, per rank (the slowest rank's figures). */
typedef struct sim_calibration {
    const char *name;        /* the topology's and the GPU's name */
    int nodes, gpus_per_node;
    sim_level_fit intra;     /* the ranks of one node (ranks 0: one rank a node) */
    sim_level_fit inter;     /* one rank a node across the nodes (ranks 0: one node) */
    double gemm_flops_per_s, attention_flops_per_s, attention_backward_flops_per_s;
    double copy_bytes_per_s; /* read + written by a device-to-device copy */
    double memory_bytes;     /* a rank's memory */
    sim_kernel_model kernels; /* the kernels' classes fitted over shapes (n 0: the short form, --quick) */
    double cache_bytes;      /* the cache a rank's ops share (0: not known; sim/cache_model.h) */
    sim_collective_tables measured; /* the collectives' measured times, as the file keeps them */
} sim_calibration;

/* The topology (and its GPU) that prices the measured calls as measured (see
 * above). Figures outside the file format's ranges are clamped into them; the
 * result passes sim_topology_check. With no intra-node level (one rank a node),
 * the GPU link takes the copy bandwidth: nothing crosses it. */
usp_status sim_calibration_topology(const sim_calibration *c, sim_topology *out);

/* The topology as the JSON file `usp plan --topology FILE` reads
 * (docs/cluster_model.md): every field written, units in the key names; NULL
 * when out of memory. */
json_t *sim_topology_to_json(const sim_topology *t);

#endif
