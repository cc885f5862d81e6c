/* The host side of a node, as the planner prices an offloaded optimizer
 * (`--offload optimizer`, docs/cluster_model.md "The host"): each GPU's PCIe
 * link to its CPU, and the node's DRAM, which the CPUs' Adam update streams.
 *
 * DeepSpeed's ZeRO-Offload (Ren et al., USENIX ATC 2021) keeps the fp32
 * master weights and Adam's m and v in host memory: each step a rank copies
 * its gradient shard to the host, the node's CPUs update every rank's shard,
 * and the rank copies its updated weights back. Adam does ~10 flops a
 * parameter against ~32 bytes of DRAM traffic, so the update is bound by the
 * node's memory bandwidth, which the node's ranks share. */
#ifndef USP_SIM_HOST_MODEL_H
#define USP_SIM_HOST_MODEL_H

#include "core/ops/ops.h"
#include "core/base/status.h"

#include <jansson.h>

typedef struct sim_host {
    double link_bandwidth;    /* a GPU's PCIe link to its CPU, per direction, bytes/s (line rate) */
    double link_efficiency;   /* the fraction of it a pinned copy reaches, (0, 1] */
    double memory_bandwidth;  /* the node's DRAM, all channels of all sockets, bytes/s (peak) */
    double memory_efficiency; /* the fraction of it a CPU optimizer step streams, (0, 1] */
} sim_host;

/* The host of topology preset `topology` (its CPUs and PCIe generation); 0 when unknown. */
int sim_host_preset(const char *topology, sim_host *out);

/* The host of a topology file without a "host" object, and of a calibrated one: the dgx-a100's. */
sim_host sim_host_default(void);

/* Reads the optional "host" object of a topology file (NULL: keeps *h); messages name `file`. */
usp_status sim_host_from_json(const json_t *j, const char *file, sim_host *h);

/* Checks a host built in code against the JSON ranges; messages name `what`. */
usp_status sim_host_check(const sim_host *h, const char *what);

/* Seconds an op that runs on the host or crosses to it takes, with `ranks_per_node`
 * GPUs sharing the node's DRAM; -1 for an op that stays on the GPU. */
double sim_host_op_seconds(const sim_host *h, int ranks_per_node, const usp_op_cost *cost);

#endif
