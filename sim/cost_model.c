/* The constant cost model (see cost_model.h for the sources of its figures). */
#include "sim/cost_model.h"

sim_cost_model sim_cost_model_constant(void)
{
    return (sim_cost_model){
        .link_bandwidth = 370e9,
        .link_latency = 10e-6,
        .compute_flops = 0.5 * 989e12, /* half of dense BF16 peak: a typical achieved fraction */
        .memory_bandwidth = 0.8 * 3.35e12,
    };
}

double sim_cost_compute(const sim_cost_model *m, const usp_op_cost *cost)
{
    double t_flops = cost->flops / m->compute_flops;
    double t_bytes = cost->bytes / m->memory_bandwidth;
    return t_flops > t_bytes ? t_flops : t_bytes;
}

double sim_cost_transfer(const sim_cost_model *m, uint64_t bytes)
{
    return m->link_latency + (double)bytes / m->link_bandwidth;
}
