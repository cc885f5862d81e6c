/* Bus bandwidth factors, the alpha-beta fit and the calibrated topology (see calibration.h). */
#include "calibrate/calibration.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define GB 1e9
#define US 1e-6
#define TERA 1e12

double sim_busbw_factor(usp_comm_kind kind, int n)
{
    if (n < 1)
        return 0;
    switch (kind) {
    case USP_OP_ALL_TO_ALL:
    case USP_OP_ALL_GATHER:
    case USP_OP_REDUCE_SCATTER:
        return (double)(n - 1) / n;
    case USP_OP_ALL_REDUCE:
        return 2.0 * (n - 1) / n;
    case USP_OP_SENDRECV:
    case USP_OP_SEND:
    case USP_OP_BROADCAST:
        return 1;
    default:
        return 0;
    }
}

static int positive(double x) { return isfinite(x) && x > 0; }

usp_status sim_fit_alpha_beta(const double *bytes, const double *seconds, int n, sim_alpha_beta *out)
{
    if (n < 2)
        return usp_error(USP_ERR_CONFIG, "an alpha-beta fit needs at least 2 message sizes, got %d", n);
    int largest = 0;
    for (int i = 0; i < n; i++) {
        if (!positive(bytes[i]) || !positive(seconds[i]))
            return usp_error(USP_ERR_CONFIG, "alpha-beta fit: point %d (%g bytes, %g s) is not a finite positive "
                             "size and time", i, bytes[i], seconds[i]);
        largest = bytes[i] > bytes[largest] ? i : largest;
    }
    /* Weighted least squares of t = a + b x, weight w = 1/t^2: minimises the sum of squared relative errors. */
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < n; i++) {
        double w = 1.0 / (seconds[i] * seconds[i]), x = bytes[i], y = seconds[i];
        sw += w, sx += w * x, sy += w * y, sxx += w * x * x, sxy += w * x * y;
    }
    double det = sw * sxx - sx * sx;
    if (!(det > 1e-12 * sw * sxx))
        return usp_error(USP_ERR_CONFIG, "alpha-beta fit: the %d message sizes are all the same; give sizes that "
                         "differ", n);
    double b = (sw * sxy - sx * sy) / det, a = (sy - b * sx) / sw;
    if (!(b > 0)) { /* no growth with size: the largest size alone, less the smallest time as latency */
        double t_min = seconds[0];
        for (int i = 1; i < n; i++)
            t_min = seconds[i] < t_min ? seconds[i] : t_min;
        a = t_min < seconds[largest] ? t_min : 0.5 * seconds[largest];
        b = (seconds[largest] - a) / bytes[largest];
    } else if (a < 0) { /* a latency below the noise: through the origin, same weights */
        double swxx = 0, swxy = 0;
        for (int i = 0; i < n; i++) {
            double w = 1.0 / (seconds[i] * seconds[i]);
            swxx += w * bytes[i] * bytes[i], swxy += w * bytes[i] * seconds[i];
        }
        a = 0, b = swxy / swxx;
    }
    *out = (sim_alpha_beta){.alpha = a, .bandwidth = 1.0 / b};
    return USP_OK;
}

static double clamp(double x, double lo, double hi) { return !(x >= lo) ? lo : x > hi ? hi : x; }

/* The file format's ranges (sim/topology.c, sim/gpu_model.c), in SI units. */
static double link_bandwidth(double bytes_per_s) { return clamp(bytes_per_s, 1e-3 * GB, 1e5 * GB); }
static double link_latency(double s) { return clamp(s, 0, 1e6 * US); }
static double peak(double flops) { return clamp(flops, 1e-3 * TERA, 1e5 * TERA); }
static double efficiency(double x) { return clamp(x, 1e-3, 1); }

/* Base latency and per-hop latency from a level's fits. In the model a
 * pairwise call (all_to_all, sendrecv) costs base + 2 hops (up and down one
 * switch) and a ring all_reduce of n ranks base + 2(n-1)/n x n x 2 hops =
 * base + 4(n-1) hops: two equations (the all_to_all's latency, the
 * all_reduce's), two unknowns, both kept >= 0. The sendrecv is left as a
 * check: the tables show its measured time beside the modelled one. */
static void solve_latency(const sim_level_fit *f, double *base, double *hop)
{
    double pairwise = f->a2a.alpha, ring = f->all_reduce.alpha;
    double ring_hops = 4.0 * (f->ranks - 1);
    double h = ring_hops > 2 ? (ring - pairwise) / (ring_hops - 2) : 0;
    if (h < 0)
        h = 0;
    double b = pairwise - 2 * h;
    if (b < 0)
        b = 0, h = pairwise / 2;
    *base = b, *hop = h;
}

static void name_into(char *dst, size_t size, const char *name) { snprintf(dst, size, "%s", name ? name : "calibrated"); }

usp_status sim_calibration_topology(const sim_calibration *c, sim_topology *out)
{
    if (c->nodes < 1 || c->gpus_per_node < 1)
        return usp_error(USP_ERR_CONFIG, "calibration of %d nodes of %d ranks: both must be at least 1", c->nodes,
                         c->gpus_per_node);
    sim_topology t = {.nodes = c->nodes, .gpus_per_node = c->gpus_per_node, .fabric = SIM_FABRIC_NVSWITCH};
    name_into(t.name, sizeof t.name, c->name);
    t.host = sim_host_default(); /* not measured (--offload only) */
    double base = 0, hop = 0, nic_hop = 0;
    if (c->intra.ranks > 1) {
        solve_latency(&c->intra, &base, &hop);
        t.gpu_link = (sim_link_class){link_bandwidth(c->intra.a2a.bandwidth), 1, link_latency(hop)};
    } else { /* one rank a node: nothing crosses the GPU link */
        t.gpu_link = (sim_link_class){link_bandwidth(c->copy_bytes_per_s), 1, 0};
    }
    if (c->nodes > 1 && c->inter.ranks > 1) {
        if (c->intra.ranks > 1) /* across nodes a pairwise call costs base + NIC up + NIC down */
            nic_hop = (c->inter.a2a.alpha - base) / 2;
        else
            solve_latency(&c->inter, &base, &nic_hop);
        t.nics_per_node = c->gpus_per_node; /* one a rank: its measured share */
        t.nic = (sim_link_class){link_bandwidth(c->inter.a2a.bandwidth), 1, link_latency(nic_hop)};
    }
    t.base_latency = link_latency(base);
    double top = fmax(c->gemm_flops_per_s, fmax(c->attention_flops_per_s, c->attention_backward_flops_per_s));
    double p = peak(top);
    sim_gpu *g = &t.gpu;
    name_into(g->name, sizeof g->name, c->name);
    /* One peak for every dtype: the backend computes in what it computes in, and that is what was measured. */
    g->peak_fp64 = g->peak_fp32 = g->peak_tf32 = g->peak_bf16 = g->peak_fp8 = p;
    g->gemm_efficiency = efficiency(c->gemm_flops_per_s / p);
    g->attention_efficiency = efficiency(c->attention_flops_per_s / p);
    g->attention_backward_efficiency = efficiency(c->attention_backward_flops_per_s / p);
    g->hbm_bandwidth = clamp(c->copy_bytes_per_s, 1e-3 * TERA, 1e3 * TERA);
    g->memory_efficiency = 1;
    g->memory_bytes = clamp(c->memory_bytes, 1e-6 * GB, 1e5 * GB);
    g->kernels = c->kernels;
    g->cache_bytes = c->cache_bytes;
    t.measured = c->measured;
    USP_CHECK(sim_topology_check(&t));
    *out = t;
    return USP_OK;
}

static json_t *link_json(const sim_link_class *c)
{
    return json_pack("{s:f, s:f, s:f}", "bandwidth_gbs", c->bandwidth / GB, "efficiency", c->efficiency, "latency_us",
                     c->latency / US);
}

static json_t *gpu_json(const sim_gpu *g)
{
    json_t *peaks = json_pack("{s:f, s:f, s:f, s:f, s:f}", "bf16", g->peak_bf16 / TERA, "fp32", g->peak_fp32 / TERA,
                              "tf32", g->peak_tf32 / TERA, "fp8", g->peak_fp8 / TERA, "fp64", g->peak_fp64 / TERA);
    json_t *j = json_pack("{s:s, s:o, s:f, s:f, s:f, s:f, s:f, s:f}", "name", g->name, "peak_tflops", peaks,
                          "hbm_tbs", g->hbm_bandwidth / TERA, "memory_gb", g->memory_bytes / GB, "gemm_efficiency",
                          g->gemm_efficiency, "attention_efficiency", g->attention_efficiency,
                          "attention_backward_efficiency", g->attention_backward_efficiency, "memory_efficiency",
                          g->memory_efficiency);
    if (j && g->cache_bytes > 0)
        json_object_set_new(j, "cache_mb", json_real(g->cache_bytes / (1 << 20)));
    json_t *kernels = j && g->kernels.n > 0 ? sim_kernel_model_to_json(&g->kernels) : NULL;
    if (j && g->kernels.n > 0 && (!kernels || json_object_set_new(j, "kernels", kernels) != 0))
        json_decref(j), j = NULL;
    return j;
}

static json_t *fabric_json(const sim_topology *t)
{
    if (t->fabric == SIM_FABRIC_NVSWITCH)
        return json_pack("{s:s, s:o}", "kind", "nvswitch", "gpu_link", link_json(&t->gpu_link));
    json_t *f = json_pack("{s:s, s:o, s:i, s:i}", "kind", "pcie", "gpu_link", link_json(&t->gpu_link),
                          "gpus_per_switch", t->gpus_per_switch, "switches_per_socket", t->switches_per_socket);
    int switches = t->gpus_per_node / t->gpus_per_switch, via_host = t->p2p != SIM_P2P_SYSTEM;
    if (f && (switches > 1 || via_host))
        json_object_set_new(f, "switch_uplink", link_json(&t->switch_uplink));
    if (f && switches > 1)
        json_object_set_new(f, "host_bridge", link_json(&t->host_bridge));
    if (f && switches / t->switches_per_socket > 1)
        json_object_set_new(f, "socket_link", link_json(&t->socket_link));
    if (f && via_host) {
        json_object_set_new(f, "p2p", json_string(sim_p2p_mode_name(t->p2p)));
        json_object_set_new(f, "host_memory", link_json(&t->host_memory));
    }
    if (f && t->p2p_fanout.bandwidth > 0)
        json_object_set_new(f, "p2p_fanout", link_json(&t->p2p_fanout));
    return f;
}

json_t *sim_topology_to_json(const sim_topology *t)
{
    json_t *j = json_pack("{s:s, s:i, s:i, s:f, s:o, s:o}", "name", t->name, "nodes", t->nodes, "gpus_per_node",
                          t->gpus_per_node, "base_latency_us", t->base_latency / US, "gpu", gpu_json(&t->gpu),
                          "fabric", fabric_json(t));
    json_t *measured = j && t->measured.n > 0 ? sim_collective_tables_to_json(&t->measured) : NULL;
    if (j && t->measured.n > 0 && (!measured || json_object_set_new(j, "collectives", measured) != 0)) {
        json_decref(j);
        return NULL;
    }
    if (j && t->nics_per_node > 0 &&
        json_object_set_new(j, "network", json_pack("{s:i, s:o}", "nics_per_node", t->nics_per_node, "nic",
                                                    link_json(&t->nic))) != 0) {
        json_decref(j);
        return NULL;
    }
    return j;
}
