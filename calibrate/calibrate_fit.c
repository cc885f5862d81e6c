/* The fit of a calibration (calibrate_fit.h): the measurements of every rank (calibrate_measure.h)
 * turned into the cluster model's figures (calibration.h): the alpha-beta fit of each level's
 * collectives, their measured tables, the kernels' rates and classes, the cache and the memory. */
#include "calibrate/calibrate_fit.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calibrate/calibrate_kernels.h"

usp_comm_kind calibrate_op_kind(int op)
{
    static const usp_comm_kind kinds[CAL_OPS] = {USP_OP_ALL_TO_ALL, USP_OP_ALL_REDUCE, USP_OP_SENDRECV};
    return kinds[op];
}

/* The slowest rank's time of each call, to the 6 digits of microseconds the file keeps of it (the fits take
 * what a reader of the file sees: calibrate --backend sim on the file then gives it back to the digit). */
double calibrate_slowest_of(const calibrate_run *run, int world, int level, int op, int i, int hot)
{
    double t = 0;
    for (int r = 0; r < world; r++)
        t = fmax(t, (hot ? run->records[r].hot_seconds : run->records[r].seconds)[level][op][i]);
    char text[32];
    snprintf(text, sizeof text, "%.6g", t * 1e6);
    return strtod(text, NULL) * 1e-6;
}

double calibrate_slowest(const calibrate_run *run, int world, int level, int op, int i)
{
    return calibrate_slowest_of(run, world, level, op, i, 0);
}

/* The key a collective table prices a call by (sim_collective_key: the most bytes a member sends to the
 * others), as usp_comm_op_peers moves it: an all_to_all of S bytes a rank sends S/n to each of n-1 peers; a
 * ring all_reduce 2(n-1)S/n to its successor. */
static double table_key(const calibrate_run *run, int level, int op, int i)
{
    uint64_t b = run->bytes[level][op][i], n = (uint64_t)run->level_ranks[level];
    return (double)(op == CAL_OP_ALL_TO_ALL ? (n - 1) * (b / n) : 2 * (n - 1) * b / n);
}

/* The measured all_to_all and all_reduce of every level as the topology's collective tables: the cold ones,
 * and with a cache (cache_bytes > 0) the hot ones, of the sizes whose send and receive buffers fit half of it
 * (so that a call again at once finds them all held: sim/collective_table.h). */
static usp_status measured_tables(const calibrate_run *run, int world, double cache_bytes, sim_collective_tables *out)
{
    *out = (sim_collective_tables){0};
    for (int hot = 0; hot <= (cache_bytes > 0); hot++)
        for (int level = 0; level < CAL_LEVELS; level++)
            for (int op = CAL_OP_ALL_TO_ALL; run->level_ranks[level] > 1 && op <= CAL_OP_ALL_REDUCE; op++) {
                sim_collective_table t = {.kind = calibrate_op_kind(op), .ranks = run->level_ranks[level], .hot = hot,
                                          .spans_nodes = level == CAL_LEVEL_NETWORK ||
                                                         (level == CAL_LEVEL_WORLD && run->nodes > 1)};
                for (int i = 0; i < run->plan->n_sizes; i++)
                    if (!hot || 2.0 * (double)run->bytes[level][op][i] <= cache_bytes / 2)
                        t.bytes[t.n] = table_key(run, level, op, i),
                        t.seconds[t.n++] = calibrate_slowest_of(run, world, level, op, i, hot);
                if (t.n == 0 || sim_collective_find_in(out, t.kind, t.ranks, t.spans_nodes, hot))
                    continue; /* one node of one rank each: the world is the network level, measured once */
                USP_CHECK(sim_collective_add(out, &t));
            }
    return USP_OK;
}

static usp_status fit_level(const calibrate_run *run, int world, int level, sim_level_fit *out)
{
    const int n = run->level_ranks[level];
    const int S = run->plan->n_sizes;
    *out = (sim_level_fit){.ranks = n};
    sim_alpha_beta *fits[CAL_OPS] = {&out->a2a, &out->all_reduce, &out->sendrecv};
    for (int op = 0; op < CAL_OPS; op++) {
        double x[CALIBRATE_SIZES_MAX], t[CALIBRATE_SIZES_MAX];
        for (int i = 0; i < S; i++)
            x[i] = (double)run->bytes[level][op][i] * sim_busbw_factor(calibrate_op_kind(op), n),
            t[i] = calibrate_slowest(run, world, level, op, i);
        usp_status s = sim_fit_alpha_beta(x, t, S, fits[op]);
        if (s != USP_OK) { /* a measurement that cannot be fitted is a failed run, not bad usage */
            char why[USP_ERROR_MESSAGE_MAX];
            snprintf(why, sizeof why, "%s", usp_error_message());
            return usp_error(USP_ERR_RUNTIME, "%s on the %s level: %s", calibrate_op_name(op),
                             calibrate_level_name(level), why);
        }
    }
    return USP_OK;
}

/* The slowest rank's rate of a kernel: work / seconds. */
static double kernel_rate(const calibrate_run *run, int world, size_t work_at, size_t seconds_at)
{
    double rate = INFINITY;
    for (int r = 0; r < world; r++) {
        const char *rec = (const char *)&run->records[r];
        double w = *(const double *)(rec + work_at), s = *(const double *)(rec + seconds_at);
        rate = fmin(rate, s > 0 ? w / s : 0);
    }
    return rate;
}

#define RATE(run, world, work, secs) \
    kernel_rate(run, world, offsetof(calibrate_record, work), offsetof(calibrate_record, secs))

static double host_memory_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (double)pages * (double)page : 0;
}

/* The GEMM's, the attention's and the copy's rates at the short form's shapes under the fitted classes. */
static void reference_rates(const calibrate_run *run, sim_calibration *c)
{
    static const char *const ops[3] = {"gemm", "attention_forward", "attention_backward"};
    double *rates[3] = {&c->gemm_flops_per_s, &c->attention_flops_per_s, &c->attention_backward_flops_per_s};
    for (int k = 0; k < 3; k++) {
        const sim_kernel_point *p = &run->records[0].reference[k];
        const sim_kernel_fit *f = sim_kernel_find(&c->kernels, ops[k], USP_F32);
        double t = f ? sim_kernel_fit_seconds(f, p->flops, p->bytes, p->outputs) : 0;
        if (t > 0)
            *rates[k] = p->flops / t;
    }
    const sim_kernel_fit *copy = sim_kernel_find(&c->kernels, "copy", USP_F32);
    double bytes = run->records[0].copy_bytes, t = copy ? sim_kernel_fit_seconds(copy, 0, bytes, 0) : 0;
    if (t > 0)
        c->copy_bytes_per_s = bytes / t;
}

/* The cache a rank's ops share (sim/cache_model.h): --cache-mb, the modelled GPU's, the backend's (a CPU core's
 * L2, a GPU's L2), or none. */
static double cache_bytes(const calibrate_fit_options *o, const calibrate_run *run, int world, const char **from)
{
    sim_topology modelled;
    double bytes = 0;
    *from = "not known: no hot class, give --cache-mb";
    if (o->cache_mb > 0)
        bytes = o->cache_mb * (1 << 20), *from = "--cache-mb";
    else if (strcmp(o->backend, "sim") == 0 &&
             sim_topology_for_world(o->topology, o->nodes, world, &modelled) == USP_OK)
        bytes = modelled.gpu.cache_bytes,
        *from = bytes > 0 ? "the modelled GPU's" : "the modelled GPU has no cache_mb: no hot class";
    else if (run->cache_bytes > 0)
        bytes = run->cache_bytes, *from = strcmp(run->backend, "cpu") == 0 ? "a core's L2" : "the GPU's L2";
    return bytes;
}

usp_status calibrate_fit(const calibrate_fit_options *o, const calibrate_run *run, int world, calibrate_result *res)
{
    sim_calibration *c = &res->cal;
    snprintf(res->name, sizeof res->name, "%s", o->name ? o->name : "calibrated");
    *c = (sim_calibration){.name = res->name, .nodes = run->nodes, .gpus_per_node = run->gpus_per_node};
    int intra = run->nodes == 1 ? CAL_LEVEL_WORLD : CAL_LEVEL_NODE;
    int inter = run->gpus_per_node == 1 ? CAL_LEVEL_WORLD : CAL_LEVEL_NETWORK;
    if (run->level_ranks[intra] > 1 && (run->nodes == 1 || run->gpus_per_node > 1))
        USP_CHECK(fit_level(run, world, intra, &c->intra));
    if (run->nodes > 1)
        USP_CHECK(fit_level(run, world, inter, &c->inter));
    c->gemm_flops_per_s = RATE(run, world, gemm_flops, gemm_s);
    c->attention_flops_per_s = RATE(run, world, attention_flops, attention_s);
    c->attention_backward_flops_per_s = RATE(run, world, backward_flops, backward_s);
    c->copy_bytes_per_s = RATE(run, world, copy_bytes, copy_s);
    c->cache_bytes = cache_bytes(o, run, world, &res->cache_from);
    USP_CHECK(calibrate_fit_kernels(run, world, c->cache_bytes, &c->kernels));
    USP_CHECK(measured_tables(run, world, c->cache_bytes, &c->measured));
    if (c->kernels.n > 0) /* the classes' rates at the short form's shapes: a function of the file, as the sim gives */
        reference_rates(run, c);
    sim_topology modelled;
    if (o->memory_gb > 0)
        c->memory_bytes = o->memory_gb * 1e9, res->memory_from = "--memory-gb";
    else if (strcmp(o->backend, "sim") == 0 &&
             sim_topology_for_world(o->topology, o->nodes, world, &modelled) == USP_OK)
        c->memory_bytes = modelled.gpu.memory_bytes, res->memory_from = "the modelled GPU's";
    else if (strcmp(run->backend, "cpu") == 0 && host_memory_bytes() > 0)
        c->memory_bytes = host_memory_bytes() / run->gpus_per_node, res->memory_from = "host memory / ranks a node";
    else
        c->memory_bytes = 80e9, res->memory_from = "not measured: 80 GB, give --memory-gb";
    return sim_calibration_topology(c, &res->topology);
}

