/* `usp calibrate`: measures this machine's collectives and kernels on the
 * runtime --backend names (calibrate/calibrate_measure.h, on every rank), fits
 * the cluster model on rank 0 (calibrate/calibrate_fit.h) and prints
 * nccl-tests style tables and writes the topology JSON `usp plan --topology`
 * reads, its GPU included. Each table shows beside every measured time the
 * time the written topology models for the same call, so the file's error
 * is in plain sight.
 *
 * Bus bandwidth as nccl-tests defines it (github.com/NVIDIA/nccl-tests,
 * doc/PERFORMANCE.md): algbw = size / time, busbw = algbw x (n-1)/n for
 * all_to_all, 2(n-1)/n for all_reduce, 1 for sendrecv. */
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/base/atomic_file.h"
#include "core/runtime/runtime.h"
#include "calibrate/calibrate_fit.h"
#include "calibrate/calibrate_kernels.h"
#include "sim/cost_model.h"
#include "tools/cli.h"
#include "tools/commands.h"
#include "tools/output_path.h"
#include "tools/runtime_registry.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define GIB ((size_t)1 << 30)

typedef struct calibrate_options {
    const char *backend, *out, *sizes, *name, *topology;
    int world, nodes, quick, json, gpus_per_node;
    double memory_gb;
    double cache_mb;
} calibrate_options;

/* "8K", "4M", "1G" (KiB, MiB, GiB) or plain bytes. */
static usp_status parse_size(const char *text, size_t len, size_t *out)
{
    char buf[32], *end;
    if (len == 0 || len >= sizeof buf)
        return usp_error(USP_ERR_CONFIG, "--sizes: '%.*s' is not a size; give e.g. --sizes 8K,1M,64M or "
                         "--sizes 8K:64M", (int)len, text);
    memcpy(buf, text, len), buf[len] = '\0';
    double v = strtod(buf, &end);
    size_t unit = *end == 'K' || *end == 'k' ? KIB : *end == 'M' || *end == 'm' ? MIB : *end == 'G' || *end == 'g' ? GIB : 1;
    if (unit > 1)
        end++;
    if (end == buf || *end || !(v * (double)unit >= 4) || v * (double)unit > (double)GIB)
        return usp_error(USP_ERR_CONFIG, "--sizes: '%s' is not a size from 4 bytes to 1G (bytes a rank sends; "
                         "suffixes K, M, G: KiB, MiB, GiB); give e.g. --sizes 8K,1M,64M or --sizes 8K:64M", buf);
    *out = (size_t)(v * (double)unit);
    return USP_OK;
}

static int by_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

/* --sizes A,B,C (a list) or MIN:MAX (powers of 4 from MIN up to MAX); default 4 KiB .. 64 MiB
 * in powers of 4, --quick 8 KiB .. 4 MiB in powers of 8. */
static usp_status parse_sizes(const calibrate_options *o, calibrate_plan *p)
{
    p->n_sizes = 0;
    if (!o->sizes) {
        for (size_t s = o->quick ? 8 * KIB : 4 * KIB; s <= (o->quick ? 4 : 64) * MIB; s *= o->quick ? 8 : 4)
            p->sizes[p->n_sizes++] = s;
        return USP_OK;
    }
    const char *colon = strchr(o->sizes, ':');
    if (colon) {
        size_t lo, hi;
        USP_CHECK(parse_size(o->sizes, (size_t)(colon - o->sizes), &lo));
        USP_CHECK(parse_size(colon + 1, strlen(colon + 1), &hi));
        for (size_t s = lo; s <= hi && p->n_sizes < CALIBRATE_SIZES_MAX; s *= 4)
            p->sizes[p->n_sizes++] = s;
        if (p->n_sizes == CALIBRATE_SIZES_MAX && p->sizes[p->n_sizes - 1] * 4 <= hi)
            return usp_error(USP_ERR_CONFIG, "--sizes %s: more than %d sizes in powers of 4; narrow the range",
                             o->sizes, CALIBRATE_SIZES_MAX);
    } else {
        for (const char *at = o->sizes;;) {
            const char *comma = strchr(at, ',');
            size_t len = comma ? (size_t)(comma - at) : strlen(at);
            if (p->n_sizes == CALIBRATE_SIZES_MAX)
                return usp_error(USP_ERR_CONFIG, "--sizes %s: at most %d sizes", o->sizes, CALIBRATE_SIZES_MAX);
            USP_CHECK(parse_size(at, len, &p->sizes[p->n_sizes++]));
            if (!comma)
                break;
            at = comma + 1;
        }
        qsort(p->sizes, (size_t)p->n_sizes, sizeof *p->sizes, by_size);
        for (int i = 1; i < p->n_sizes; i++)
            if (p->sizes[i] == p->sizes[i - 1])
                return usp_error(USP_ERR_CONFIG, "--sizes %s: %zu bytes given twice", o->sizes, p->sizes[i]);
    }
    if (p->n_sizes < 2)
        return usp_error(USP_ERR_CONFIG, "--sizes %s: the fit needs at least 2 sizes (small ones give the latency, "
                         "large ones the bandwidth), e.g. --sizes 8K:64M", o->sizes);
    return USP_OK;
}

static usp_status check_options(const calibrate_options *o, calibrate_plan *p)
{
    USP_CHECK(runtime_registry_check(o->backend));
    USP_CHECK(parse_sizes(o, p));
    if (o->out) {
        size_t n = strlen(o->out);
        if (n < 5 || strcmp(o->out + n - 5, ".json") != 0)
            return usp_error(USP_ERR_CONFIG, "--out %s: the topology file's name must end in .json (usp plan "
                             "--topology reads NAME.json as a file, anything else as a preset name)", o->out);
        USP_CHECK(output_path_check("--out", o->out, 0));
    }
    if (o->gpus_per_node && o->world % o->gpus_per_node != 0)
        return usp_error(USP_ERR_CONFIG, "--gpus-per-node %d: it must divide the world of %d ranks", o->gpus_per_node,
                         o->world);
    if (o->memory_gb != 0 && !(o->memory_gb >= 1e-6 && o->memory_gb <= 1e5))
        return usp_error(USP_ERR_CONFIG, "--memory-gb %g: a rank's memory in GB, from 1e-6 to 100000", o->memory_gb);
    if (o->cache_mb != 0 && !(o->cache_mb >= 1e-3 && o->cache_mb <= 1e6))
        return usp_error(USP_ERR_CONFIG, "--cache-mb %g: the cache a rank's ops share in MiB, from 0.001 to 1000000 "
                         "(e.g. 50 for an H100's L2)", o->cache_mb);
    if ((o->topology || o->nodes) && strcmp(o->backend, "sim") != 0)
        return usp_error(USP_ERR_CONFIG, "%s with --backend %s: the modelled cluster is the simulator's; a real "
                         "backend measures the machine it runs on", o->topology ? "--topology" : "--nodes",
                         o->backend);
    return USP_OK;
}

/* Seconds the calibrated topology gives a call of `op` on the level's first group (links_only: by its links,
 * without its tables of measured times). */
static double modelled(const sim_topology *topology, const calibrate_run *run, int level, int op, int i,
                       int links_only)
{
    static sim_topology t; /* large; rank 0 prints alone */
    t = *topology;
    if (links_only)
        t.measured.n = 0;
    int n = run->level_ranks[level], members[4096];
    if (n > 4096)
        return NAN;
    for (int k = 0; k < n; k++)
        members[k] = level == CAL_LEVEL_NETWORK ? k * run->gpus_per_node : k;
    uint64_t *bytes = calloc((size_t)n * (size_t)n, sizeof *bytes);
    if (!bytes)
        return NAN;
    uint64_t b = run->bytes[level][op][i];
    for (int k = 0; k < n; k++)
        if (op == CAL_OP_ALL_TO_ALL) {
            for (int j = 0; j < n; j++)
                bytes[(size_t)k * n + j] = j == k ? 0 : b / (uint64_t)n;
        } else {
            bytes[(size_t)k * n + (k + 1) % n] = op == CAL_OP_ALL_REDUCE ? 2 * (uint64_t)(n - 1) * b / (uint64_t)n : b;
        }
    sim_cost_model m = sim_cost_model_make(&t, USP_F32);
    double s = NAN;
    if (sim_cost_collective(&m, calibrate_op_kind(op), n, members, bytes, &s) != USP_OK)
        s = NAN;
    free(bytes);
    return s;
}

static void print_table(const calibrate_run *run, int world, const sim_topology *t, int level, int op)
{
    int n = run->level_ranks[level];
    double factor = sim_busbw_factor(calibrate_op_kind(op), n);
    printf("\n# %s on %s (%d ranks%s), busbw = algbw x %.3g\n", calibrate_op_name(op), calibrate_level_name(level), n,
           level == CAL_LEVEL_WORLD ? "" : level == CAL_LEVEL_NODE ? " of one node, every node at once"
                                                                    : ", one a node, every group at once", factor);
    printf("#%12s %12s %6s %11s %12s %12s %11s %11s %11s\n", "size(B)", "count", "type", "time(us)", "algbw(GB/s)",
           "busbw(GB/s)", "model(us)", "links(us)", "hot(us)");
    for (int i = 0; i < run->plan->n_sizes; i++) {
        double b = (double)run->bytes[level][op][i], s = calibrate_slowest(run, world, level, op, i);
        double hot = calibrate_slowest_of(run, world, level, op, i, 1);
        printf(" %12zu %12zu %6s %11.2f %12.3f %12.3f %11.2f %11.2f", run->bytes[level][op][i],
               run->bytes[level][op][i] / sizeof(float), "float", s * 1e6, b / s / 1e9, b / s * factor / 1e9,
               modelled(t, run, level, op, i, 0) * 1e6, modelled(t, run, level, op, i, 1) * 1e6);
        if (hot > 0)
            printf(" %11.2f\n", hot * 1e6);
        else
            printf(" %11s\n", "-"); /* sendrecv: no table */
    }
}

static void print_text(const calibrate_options *o, const calibrate_run *run, int world, const calibrate_result *res)
{
    const sim_topology *t = &res->topology;
    printf("usp calibrate: backend %s (%s kernels), world %d = %d node%s x %d rank%s (nodes from %s), %d sizes "
           "%zu .. %zu bytes a rank\n", o->backend, run->backend, world, run->nodes, run->nodes > 1 ? "s" : "",
           run->gpus_per_node, run->gpus_per_node > 1 ? "s" : "", o->gpus_per_node ? "--gpus-per-node" : "host names",
           run->plan->n_sizes, run->plan->sizes[0], run->plan->sizes[run->plan->n_sizes - 1]);
    if (strcmp(o->backend, "sim") == 0)
        printf("(--backend sim: every time below is the simulator's model of %s, not a measurement)\n",
               o->topology ? o->topology : "dgx-h100");
    for (int level = 0; level < CAL_LEVELS; level++)
        if (run->level_ranks[level] > 1)
            for (int op = 0; op < CAL_OPS; op++)
                print_table(run, world, t, level, op);
    const sim_level_fit *fits[2] = {&res->cal.intra, &res->cal.inter};
    if (world == 1)
        printf("\none rank: no collectives measured; the file's GPU link is the device copy rate, a placeholder\n");
    else
        printf("\nalpha-beta fits (t = latency + bus bytes / busbw; weighted to relative error):\n");
    for (int k = 0; k < 2; k++)
        if (fits[k]->ranks > 1)
            for (int op = 0; op < CAL_OPS; op++) {
                const sim_alpha_beta *f = op == 0 ? &fits[k]->a2a : op == 1 ? &fits[k]->all_reduce : &fits[k]->sendrecv;
                printf("  %-12s %-13s latency %9.2f us  busbw %9.3f GB/s\n", k ? "across nodes" : "in a node",
                       calibrate_op_name(op), f->alpha * 1e6, f->bandwidth / 1e9);
            }
    const sim_calibration *c = &res->cal;
    printf("\nkernels on the %s backend (every rank at once; the slowest rank):\n", run->backend);
    printf("  gemm %dx%dx%d            %10.3f TFLOP/s\n", run->gemm_n, run->gemm_n, run->gemm_n,
           c->gemm_flops_per_s / 1e12);
    printf("  flash attention fwd  T %d, %d heads x %d, causal %10.3f TFLOP/s\n", run->attention_tokens,
           run->attention_heads, run->attention_head_dim, c->attention_flops_per_s / 1e12);
    printf("  flash attention bwd  T %d, %d heads x %d, causal %10.3f TFLOP/s\n", run->attention_tokens,
           run->attention_heads, run->attention_head_dim, c->attention_backward_flops_per_s / 1e12);
    printf("  device copy (read + write)  %10.3f GB/s\n", c->copy_bytes_per_s / 1e9);
    if (c->kernels.n > 0)
        calibrate_print_kernels(run, world, &c->kernels, c->cache_bytes);
    else
        printf("  (--quick: one shape each; without it every kernel class is measured over shapes)\n");
    printf("\ntopology %s: %d node%s x %d, gpu_link %.3f GB/s %.2f us, base latency %.2f us", t->name, t->nodes,
           t->nodes > 1 ? "s" : "", t->gpus_per_node, t->gpu_link.bandwidth / 1e9, t->gpu_link.latency * 1e6,
           t->base_latency * 1e6);
    if (t->nics_per_node)
        printf(", %d NICs a node at %.3f GB/s %.2f us", t->nics_per_node, t->nic.bandwidth / 1e9, t->nic.latency * 1e6);
    printf("; GPU peak %.4g TFLOP/s (gemm %.2f, attention %.2f / %.2f of it), memory %.3g GB (%s), cache %.3g "
           "MiB (%s)\n", t->gpu.peak_bf16 / 1e12, t->gpu.gemm_efficiency, t->gpu.attention_efficiency,
           t->gpu.attention_backward_efficiency, t->gpu.memory_bytes / 1e9, res->memory_from,
           t->gpu.cache_bytes / (1 << 20), res->cache_from);
    if (o->out)
        printf("usp calibrate: topology written to %s: usp plan --topology %s --world %d\n", o->out, o->out, world);
    else
        printf("usp calibrate: no file written; --out FILE.json writes this topology for usp plan --topology\n");
}

static json_t *report_json(const calibrate_options *o, const calibrate_run *run, int world, const calibrate_result *res,
                           json_t *topology)
{
    json_t *j = json_pack("{s:s, s:s, s:i, s:i, s:i}", "backend", o->backend, "kernels_backend", run->backend,
                          "world", world, "nodes", run->nodes, "gpus_per_node", run->gpus_per_node);
    json_t *tables = json_array();
    for (int level = 0; j && tables && level < CAL_LEVELS; level++)
        for (int op = 0; run->level_ranks[level] > 1 && op < CAL_OPS; op++) {
            int n = run->level_ranks[level];
            double factor = sim_busbw_factor(calibrate_op_kind(op), n);
            json_t *rows = json_array();
            for (int i = 0; rows && i < run->plan->n_sizes; i++) {
                double b = (double)run->bytes[level][op][i], s = calibrate_slowest(run, world, level, op, i);
                double m = modelled(&res->topology, run, level, op, i, 0);
                double l = modelled(&res->topology, run, level, op, i, 1);
                json_array_append_new(rows, json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "bytes", b, "time_us",
                                                      s * 1e6, "algbw_gbs", b / s / 1e9, "busbw_gbs",
                                                      b / s * factor / 1e9, "model_us", isfinite(m) ? m * 1e6 : -1.0,
                                                      "links_us", isfinite(l) ? l * 1e6 : -1.0, "hot_time_us",
                                                      calibrate_slowest_of(run, world, level, op, i, 1) * 1e6));
            }
            json_array_append_new(tables, json_pack("{s:s, s:s, s:i, s:f, s:o}", "level", calibrate_level_name(level),
                                                    "op", calibrate_op_name(op), "ranks", n, "busbw_factor", factor,
                                                    "rows", rows));
        }
    const sim_calibration *c = &res->cal;
    json_object_set_new(j, "collectives", tables);
    json_object_set_new(j, "kernels", json_pack("{s:f, s:f, s:f, s:f}", "gemm_tflops", c->gemm_flops_per_s / 1e12,
                                                "attention_tflops", c->attention_flops_per_s / 1e12,
                                                "attention_backward_tflops", c->attention_backward_flops_per_s / 1e12,
                                                "copy_gbs", c->copy_bytes_per_s / 1e9));
    json_object_set_new(j, "kernel_cases", calibrate_kernel_cases_json(run, world, &c->kernels));
    json_object_set_new(j, "topology", json_incref(topology));
    json_object_set_new(j, "out", o->out ? json_string(o->out) : json_null());
    return j;
}

static usp_status write_topology(const char *path, json_t *topology)
{
    usp_atomic_file f;
    USP_CHECK(usp_atomic_file_open(&f, path));
    if (json_dumpf(topology, f.fp, JSON_INDENT(2) | JSON_REAL_PRECISION(6)) != 0 || fputc('\n', f.fp) == EOF) {
        usp_atomic_file_abort(&f);
        return usp_error(USP_ERR_RUNTIME, "--out %s: cannot write the topology (a short write: is the disk full?)",
                         path);
    }
    return usp_atomic_file_commit(&f);
}

/* Rank 0's part after the run: fit, print, write. */
static usp_status report(const calibrate_options *o, const calibrate_run *run, int world)
{
    calibrate_result res;
    const calibrate_fit_options fo = {.name = o->name, .backend = o->backend, .topology = o->topology,
                                      .nodes = o->nodes, .memory_gb = o->memory_gb, .cache_mb = o->cache_mb};
    USP_CHECK(calibrate_fit(&fo, run, world, &res));
    json_t *topology = sim_topology_to_json(&res.topology);
    if (!topology)
        return usp_error(USP_ERR_RUNTIME, "out of memory writing the topology as JSON");
    usp_status s = o->out ? write_topology(o->out, topology) : USP_OK;
    if (s == USP_OK && o->json) {
        json_t *j = report_json(o, run, world, &res, topology);
        char *text = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
        if (text)
            puts(text);
        else
            s = usp_error(USP_ERR_RUNTIME, "--json: the report could not be written as JSON");
        free(text);
        json_decref(j);
    } else if (s == USP_OK) {
        print_text(o, run, world, &res);
    }
    json_decref(topology);
    return s;
}

static usp_status run(const calibrate_options *o, const calibrate_plan *plan, char **argv, int *exit_code)
{
    /* the simulator prices ops by their shapes alone: its meta backend computes nothing, so a full sweep is quick */
    usp_runtime_options ro = {.world_size = o->world, .cluster = o->topology, .nodes = o->nodes,
                              .shapes_only = strcmp(o->backend, "sim") == 0};
    USP_CHECK(runtime_registry_launch(o->backend, &ro, argv)); /* no launcher: mpi and nccl start their processes */
    usp_runtime_t *rt;
    USP_CHECK(runtime_registry_create(o->backend, &ro, &rt));
    calibrate_run cr = {.plan = plan};
    usp_status s = usp_calloc((void **)&cr.records, (size_t)o->world, sizeof *cr.records, "the measurements");
    if (s == USP_OK)
        s = usp_runtime_run(rt, calibrate_rank, &cr);
    if (s == USP_OK && usp_runtime_prints(rt))
        s = report(o, &cr, o->world);
    if (s != USP_OK)
        cli_error(stderr, "calibrate", *usp_runtime_report(rt) ? "%s" : "%s\n",
                  *usp_runtime_report(rt) ? usp_runtime_report(rt) : usp_error_message());
    *exit_code = (int)s;
    free(cr.records);
    usp_runtime_destroy(rt);
    return USP_OK;
}

int cmd_calibrate(int argc, char **argv)
{
    calibrate_options o = {.backend = "mpi"};
    const cli_option options[] = {
        {"--backend", CLI_STRING, &o.backend, "mpi|nccl|sim",
         "the runtime to measure: mpi (default; W processes under mpirun, which usp runs itself when no launcher "
         "started it), nccl (GPUs), sim (the simulator's own model: a check of the fit)", 0, -1},
        {"--out", CLI_STRING, &o.out, "FILE.json", "write the fitted topology (and its GPU) for usp plan --topology", 0, -1},
        {"--sizes", CLI_STRING, &o.sizes, "LIST|MIN:MAX",
         "bytes a rank sends: 8K,1M,64M or 8K:64M (powers of 4); default 4K:64M, --quick 8K,64K,512K,4M", 0, -1},
        {"--quick", CLI_FLAG, &o.quick, NULL, "a short sweep (a few seconds): 4 sizes, fewer calls, small kernels", 0, -1},
        {"--world", CLI_INT, &o.world, "W", "ranks (default: the launcher's process count; sim 4, nccl 1)", 1, 4096},
        {"--gpus-per-node", CLI_INT, &o.gpus_per_node, "K",
         "ranks r*K .. r*K+K-1 form a node (default: ranks on one host form a node)", 1, 4096},
        {"--memory-gb", CLI_DOUBLE, &o.memory_gb, "GB",
         "a rank's memory in the file (default on the cpu backend: host memory / ranks a node)", 0, -1},
        {"--cache-mb", CLI_DOUBLE, &o.cache_mb, "MB",
         "the cache a rank's ops share, in MiB (default: what the backend says, a CPU core's L2 or the GPU's L2; "
         "with --backend sim the modelled GPU's): the hot kernel classes are fitted from the cases that fit half "
         "of it",
         0, -1},
        {"--name", CLI_STRING, &o.name, "NAME", "the topology's name in the file (default calibrated)", 0, -1},
        {"--topology", CLI_STRING, &o.topology, "NAME|FILE", "--backend sim: the modelled cluster (default dgx-h100)",
         0, -1},
        {"--nodes", CLI_INT, &o.nodes, "K", "--backend sim: nodes of the topology", 1, 100000},
        {"--json", CLI_FLAG, &o.json, NULL, "print one JSON object: the tables, the kernels, the topology", 0, -1},
        {0},
    };
    const cli_command c = {
        .name = "calibrate",
        .usage = "mpirun -np W usp calibrate --backend mpi [--quick] [--out FILE.json] [options]",
        .about = "Measures this machine on the runtime --backend names: all_to_all, all_reduce and sendrecv\n"
                 "over message sizes on the world and, when it spans nodes, within a node and across nodes;\n"
                 "the backend's GEMM, flash attention (forward, backward) and copies. Prints nccl-tests style\n"
                 "tables (busbw = algbw x (n-1)/n for all_to_all, 2(n-1)/n for all_reduce, 1 for sendrecv:\n"
                 "nccl-tests doc/PERFORMANCE.md) with the time the fitted model gives beside each measured\n"
                 "one, fits latency and bandwidth (alpha-beta), and writes a topology JSON, its GPU included,\n"
                 "that usp plan --topology FILE.json and usp train --topology read (docs/cluster_model.md).\n"
                 "Rank 0 prints and writes.",
        .options = options,
    };
    int done;
    usp_status s = cli_parse(&c, argc, argv, 2, &done);
    if (s != USP_OK || done)
        return s != USP_OK ? cli_fail("calibrate", s) : 0;
    if (o.world == 0)
        o.world = runtime_registry_default_world(o.backend);
    calibrate_plan plan = {.quick = o.quick, .gpus_per_node = o.gpus_per_node};
    s = check_options(&o, &plan);
    if (s != USP_OK)
        return cli_fail("calibrate", s);
    int code = 0;
    s = run(&o, &plan, argv, &code);
    return s != USP_OK ? cli_fail("calibrate", s) : code;
}
