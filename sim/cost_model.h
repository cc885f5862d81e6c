/* The cost model behind the virtual clocks.
 *
 * For now a constant model: one link bandwidth and latency for every pair of
 * ranks and one roofline for compute. The figures are H100-class (989 TFLOP/s
 * dense BF16, 3.35 TB/s HBM3; NCCL all-to-all busbw about 370 GB/s on NVLink 4,
 * from NVIDIA's datasheet and nccl-tests reports). The cluster-model issue (#5)
 * replaces it with a topology (NVLink / PCIe / InfiniBand) and contention. */
#ifndef USP_SIM_COST_MODEL_H
#define USP_SIM_COST_MODEL_H

#include <stdint.h>

#include "core/ops.h"

typedef struct sim_cost_model {
    double link_bandwidth;   /* bytes/s each rank can send */
    double link_latency;     /* seconds per collective or transfer */
    double compute_flops;    /* achievable FLOP/s */
    double memory_bandwidth; /* achievable bytes/s */
} sim_cost_model;

/* The constant H100-class model. */
sim_cost_model sim_cost_model_constant(void);

/* Seconds an op takes: the roofline max(flops / FLOP/s, bytes / bandwidth). */
double sim_cost_compute(const sim_cost_model *m, const usp_op_cost *cost);

/* Seconds a communication takes when the busiest rank sends `bytes`. */
double sim_cost_transfer(const sim_cost_model *m, uint64_t bytes);

#endif
