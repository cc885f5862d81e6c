/* The host of a node: presets, the optional "host" object of topology files,
 * and the price of ops that run on the host or cross to it (host_model.h).
 *
 * Presets, from the platforms' datasheets:
 * - DGX H100 / H200: two Xeon Platinum 8480C, 8 channels of DDR5-4800 each
 *   (38.4 GB/s a channel): 614.4 GB/s; GPUs on PCIe Gen5 x16 (63 GB/s).
 * - DGX A100: two EPYC 7742, 8 channels of DDR4-3200 each (25.6 GB/s a
 *   channel): 409.6 GB/s; GPUs on PCIe Gen4 x16 (31.5 GB/s).
 * - PCIe boxes: the same two sockets as the DGX of their generation.
 * A pinned copy reaches the fraction of the PCIe line rate NCCL's transfers
 * reach over PCIe (25 of 31.5 GB/s, docs/cluster_model.md). The fraction of
 * DRAM bandwidth a CPU Adam step streams, 0.5, is an assumption: STREAM-like
 * kernels reach 60-80% of peak on such servers, and Adam streams four arrays in
 * and four out with the copies of the gradients and weights beside it. */
#include "sim/host_model.h"

#include "sim/json_fields.h"

#include <string.h>

#define GB 1e9

static const sim_host host_gen5 = {63 * GB, 25.0 / 31.5, 614.4 * GB, 0.5};
static const sim_host host_gen4 = {31.5 * GB, 25.0 / 31.5, 409.6 * GB, 0.5};

int sim_host_preset(const char *topology, sim_host *out)
{
    if (strcmp(topology, "dgx-h100") == 0 || strcmp(topology, "dgx-h200") == 0 || strcmp(topology, "pcie-gen5") == 0)
        *out = host_gen5;
    else if (strcmp(topology, "dgx-a100") == 0 || strcmp(topology, "pcie-gen4") == 0 ||
             strcmp(topology, "pcie-l20") == 0)
        *out = host_gen4;
    else {
        *out = sim_host_default();
        return 0;
    }
    return 1;
}

sim_host sim_host_default(void) { return host_gen4; /* the older, slower host */ }

static const sim_json_range link_bandwidth = {"link_bandwidth_gbs", 1e-3, 1e5, GB,
                                              "a GPU's PCIe link to its CPU, GB/s per direction"};
static const sim_json_range link_efficiency = {"link_efficiency", 1e-3, 1, 1,
                                               "the fraction of the PCIe line rate a pinned copy reaches"};
static const sim_json_range memory_bandwidth = {"memory_bandwidth_gbs", 1e-3, 1e5, GB,
                                                "the node's DRAM bandwidth, all sockets, GB/s"};
static const sim_json_range memory_efficiency = {"memory_efficiency", 1e-3, 1, 1,
                                                 "the fraction of DRAM bandwidth a CPU optimizer step streams"};

usp_status sim_host_from_json(const json_t *j, const char *file, sim_host *h)
{
    if (!j)
        return USP_OK;
    if (!json_is_object(j))
        return usp_error(USP_ERR_CONFIG, "%s: field 'host' is %s; it must be an object (e.g. {\"memory_bandwidth_gbs\": "
                         "409.6})", file, sim_json_kind(j));
    static const char *const known[] = {"link_bandwidth_gbs", "link_efficiency", "memory_bandwidth_gbs",
                                        "memory_efficiency", NULL};
    sim_json_at at = {file, "host."};
    USP_CHECK(sim_json_check_keys(j, at, known));
    USP_CHECK(sim_json_number(j, at, &link_bandwidth, 0, &h->link_bandwidth));
    USP_CHECK(sim_json_number(j, at, &link_efficiency, 0, &h->link_efficiency));
    USP_CHECK(sim_json_number(j, at, &memory_bandwidth, 0, &h->memory_bandwidth));
    return sim_json_number(j, at, &memory_efficiency, 0, &h->memory_efficiency);
}

usp_status sim_host_check(const sim_host *h, const char *what)
{
    sim_json_at at = {what, "host."};
    USP_CHECK(sim_json_check_number(at, &link_bandwidth, h->link_bandwidth));
    USP_CHECK(sim_json_check_number(at, &link_efficiency, h->link_efficiency));
    USP_CHECK(sim_json_check_number(at, &memory_bandwidth, h->memory_bandwidth));
    return sim_json_check_number(at, &memory_efficiency, h->memory_efficiency);
}

double sim_host_op_seconds(const sim_host *h, int ranks_per_node, const usp_op_cost *cost)
{
    if (cost->op[0] != 'c' && cost->op[0] != 'h')
        return -1.0;
    if (strcmp(cost->op, "copy_host") == 0) /* bytes = read + written: each byte crosses the link once */
        return 0.5 * cost->bytes / (h->link_bandwidth * h->link_efficiency);
    if (strcmp(cost->op, "host_adamw") == 0) /* the node's ranks update their shards at once */
        return cost->bytes * (ranks_per_node > 0 ? ranks_per_node : 1) / (h->memory_bandwidth * h->memory_efficiency);
    return -1.0;
}
