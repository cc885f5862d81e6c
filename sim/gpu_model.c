/* GPU presets, the JSON GPU reader and the per-op roofline (see gpu_model.h).
 *
 * Efficiency factors are the model's assumptions, stated where they come from:
 * - attention: the rates of a named kernel (--attention-kernel, default fa2),
 *   as fractions of the dense BF16/FP16 tensor-core peak, forward / backward:
 *     Hopper (H100, H200)
 *       fa3   0.75 / 0.50  FlashAttention-3 (Shah et al., "FlashAttention-3", 2024,
 *                          arXiv:2407.08608): up to 740 TFLOP/s FP16 forward on the
 *                          H100 SXM5 = 75% of 989; backward 1.5-1.75x FA2's.
 *       fa2   0.35 / 0.30  the same paper: FlashAttention-2 reaches about 35% of the
 *                          H100 (its figures: ~370 TFLOP/s forward at head dim 128);
 *                          backward: FA3's 0.50 over its 1.5-1.75x speedup.
 *       sdpa  0.30 / 0.25  PyTorch's scaled_dot_product_attention on an H100 SXM,
 *                          head dim 128: 287-304 TFLOP/s forward at 1K-16K tokens
 *                          (pytorch/benchmark PR #2296, 2024); backward: an estimate,
 *                          FA2's backward-to-forward ratio applied.
 *     Ampere (A100); Ada (L20, L40S) gets the same rates, an assumption: FlashAttention-2
 *     runs its sm80 kernels there and no published FA2 rate on Ada was found
 *       fa2   0.60 / 0.50  FlashAttention-2 (Dao, "FlashAttention-2", 2023,
 *                          arXiv:2307.08691): 50-73% of the A100's peak forward, up to
 *                          63% backward; the middle of the forward range.
 *       sdpa  0.60 / 0.50  since PyTorch 2.2 SDPA's flash backend is FlashAttention-2's
 *                          kernel (release notes, January 2024): FA2's rates.
 *       fa3   refused: FlashAttention-3 needs Hopper (sm_90); Ada (sm_89) too.
 *   fa2 is the default: most published long-context runs (DeepSpeed-Ulysses, ring
 *   attention, Megatron context parallelism before 2025, Hugging Face training
 *   scripts) ran FlashAttention-2 or SDPA, not FA3 (issue 16 found usp 1.3-2.7x
 *   optimistic against them with FA3's rates).
 * - GEMM: large BF16 GEMMs in cuBLAS run at about 70% of the H100's dense peak
 *   and about 80% of the A100's (an estimate; the nccl runtime can measure it);
 *   Ada (L20, L40S): 70%, an estimate (power-capped PCIe cards).
 * - memory: streaming kernels reach about 85% of the HBM datasheet bandwidth. */
#include "sim/gpu_model.h"
#include "core/base/strbuf.h"
#include "sim/json_fields.h"

#include <stdio.h>
#include <string.h>

#define TERA 1e12

/* name, peaks FP64 / FP32 / TF32 / BF16 / FP8 (TFLOP/s), HBM (TB/s), memory (GB),
 * efficiencies: GEMM; generation (the attention rates come from the kernel table below). */
#define GPU(nm, f64, f32, tf32, bf16, f8, hbm, gb, gemm, gen)                                                  \
    {.name = nm, .peak_fp64 = (f64) * TERA, .peak_fp32 = (f32) * TERA, .peak_tf32 = (tf32) * TERA,            \
     .peak_bf16 = (bf16) * TERA, .peak_fp8 = (f8) * TERA, .hbm_bandwidth = (hbm) * TERA, .memory_bytes = (gb) * 1e9, \
     .gemm_efficiency = gemm, .memory_efficiency = 0.85, .arch = gen}
static const sim_gpu presets[] = {
    GPU("h100-sxm", 67, 67, 494.7, 989.4, 1978.9, 3.35, 80, 0.70, SIM_ARCH_HOPPER),
    GPU("h200", 67, 67, 494.7, 989.4, 1978.9, 4.8, 141, 0.70, SIM_ARCH_HOPPER),
    GPU("a100-80g", 19.5, 19.5, 156, 312, 312, 2.039, 80, 0.80, SIM_ARCH_AMPERE),
    GPU("a100-pcie", 19.5, 19.5, 156, 312, 312, 1.935, 80, 0.80, SIM_ARCH_AMPERE),
    GPU("h100-pcie", 51, 51, 378, 756, 1513, 2.0, 80, 0.70, SIM_ARCH_HOPPER),
    /* Ada PCIe cards (GDDR6, no NVLink); FP64 runs at 1/64 of FP32 on Ada (datasheets omit it) */
    GPU("l20", 59.8 / 64, 59.8, 59.8, 119.5, 239, 0.864, 48, 0.70, SIM_ARCH_ADA),
    GPU("l40s", 91.6 / 64, 91.6, 183, 362.05, 733, 0.864, 48, 0.70, SIM_ARCH_ADA),
};
#define N_PRESETS (int)(sizeof presets / sizeof presets[0])

/* Forward / backward attention efficiency per kernel and generation (sources above); 0: not available. */
static const double kernel_rates[3][2][2] = {
    /*                  Ampere          Hopper */
    [SIM_ATTENTION_FA2] = {{0.60, 0.50}, {0.35, 0.30}},
    [SIM_ATTENTION_FA3] = {{0.00, 0.00}, {0.75, 0.50}},
    [SIM_ATTENTION_SDPA] = {{0.60, 0.50}, {0.30, 0.25}},
};

const char *sim_attention_kernel_name(sim_attention_kernel k)
{
    static const char *const names[] = {"fa2", "fa3", "sdpa", "file"};
    return k >= SIM_ATTENTION_FA2 && k <= SIM_ATTENTION_FILE ? names[k] : "?";
}

int sim_attention_kernel_parse(const char *text, sim_attention_kernel *out)
{
    for (sim_attention_kernel k = SIM_ATTENTION_FA2; k < SIM_ATTENTION_FILE; k++)
        if (strcmp(text, sim_attention_kernel_name(k)) == 0) {
            *out = k;
            return 1;
        }
    return 0;
}

usp_status sim_gpu_use_attention_kernel(sim_gpu *gpu, sim_attention_kernel k)
{
    if (k == SIM_ATTENTION_FILE)
        return gpu->attention_kernel == SIM_ATTENTION_FILE
                   ? USP_OK
                   : usp_error(USP_ERR_CONFIG, "--attention-kernel file: GPU %s is a preset; its rates are fa2, fa3 "
                               "or sdpa (a GPU file states its own)", gpu->name);
    if (gpu->arch == SIM_ARCH_OTHER)
        return usp_error(USP_ERR_CONFIG, "--attention-kernel %s: GPU %s comes from a file, whose "
                         "attention_efficiency and attention_backward_efficiency are its own (stated or measured); "
                         "drop --attention-kernel, or edit the file", sim_attention_kernel_name(k), gpu->name);
    /* Ada runs FlashAttention-2's sm80 kernels: Ampere's rates (no published FA2 rate on Ada found) */
    const double *rate = kernel_rates[k][gpu->arch == SIM_ARCH_HOPPER];
    if (rate[0] == 0)
        return usp_error(USP_ERR_CONFIG, "--attention-kernel %s: GPU %s is not Hopper, and FlashAttention-3 runs "
                         "on Hopper (sm_90) only; use fa2 or sdpa", sim_attention_kernel_name(k), gpu->name);
    gpu->attention_efficiency = rate[0];
    gpu->attention_backward_efficiency = rate[1];
    gpu->attention_kernel = k;
    return USP_OK;
}

usp_status sim_gpu_use_attention_kernel_named(sim_gpu *gpu, const char *text)
{
    sim_attention_kernel k;
    if (!text)
        return USP_OK;
    if (!sim_attention_kernel_parse(text, &k))
        return usp_error(USP_ERR_CONFIG, "--attention-kernel %s: not a kernel the model knows; use fa2 "
                         "(FlashAttention-2, the default), fa3 (FlashAttention-3, Hopper) or sdpa (PyTorch SDPA)",
                         text);
    return sim_gpu_use_attention_kernel(gpu, k);
}

int sim_gpu_preset(const char *name, sim_gpu *out)
{
    for (int i = 0; i < N_PRESETS; i++)
        if (strcmp(presets[i].name, name) == 0) {
            *out = presets[i];
            (void)sim_gpu_use_attention_kernel(out, SIM_ATTENTION_DEFAULT); /* fa2 exists on every preset */
            return 1;
        }
    return 0;
}

const char *sim_gpu_preset_names(void) { return "h100-sxm, h200, a100-80g, a100-pcie, h100-pcie, l20, l40s"; }

double sim_gpu_peak_flops(const sim_gpu *gpu, usp_dtype dtype)
{
    switch (dtype) {
    case USP_F64:
        return gpu->peak_fp64;
    case USP_F32:
        return gpu->peak_tf32;
    case USP_U8:
        return gpu->peak_fp8;
    default:
        return gpu->peak_bf16;
    }
}

double sim_gpu_op_seconds(const sim_gpu *gpu, usp_dtype dtype, const usp_op_cost *cost)
{
    return sim_gpu_op_seconds_held(gpu, dtype, cost, 0);
}

double sim_gpu_op_seconds_held(const sim_gpu *gpu, usp_dtype dtype, const usp_op_cost *cost, double held)
{
    if (gpu->kernels.n > 0) { /* a calibrated machine: what its kernels took at this op's work */
        double t = sim_kernel_seconds_held(&gpu->kernels, cost, held);
        if (t >= 0)
            return t;
    }
    if (cost->dtype == USP_BF16) /* a bf16 GEMM or attention in a run of another dtype (calibrate's bf16 cases) */
        dtype = USP_BF16;
    double achievable; /* the first letter first: this runs for every op of every simulated rank */
    if (cost->op[0] != 'g' && cost->op[0] != 'a')
        achievable = gpu->peak_fp32;
    else if (strcmp(cost->op, "gemm") == 0)
        achievable = sim_gpu_peak_flops(gpu, dtype) * gpu->gemm_efficiency;
    else if (strcmp(cost->op, "attention_forward") == 0)
        achievable = sim_gpu_peak_flops(gpu, dtype) * gpu->attention_efficiency;
    else if (strcmp(cost->op, "attention_backward") == 0)
        achievable = sim_gpu_peak_flops(gpu, dtype) * gpu->attention_backward_efficiency;
    else
        achievable = gpu->peak_fp32;
    double t_flops = cost->flops / achievable;
    double t_bytes = cost->bytes / (gpu->hbm_bandwidth * gpu->memory_efficiency);
    return t_flops > t_bytes ? t_flops : t_bytes;
}

/* --- physical ranges and the JSON reader ----------------------------------
 * Generous, so any GPU built or announced fits with room to spare, but finite,
 * so every time the roofline computes is a finite number of seconds:
 * - peaks 0.001 .. 100000 TFLOP/s: 1 GFLOP/s is below one CPU core; 100
 *   PFLOP/s is several times any dense peak announced (Blackwell FP4, 9-15 PFLOP/s);
 * - HBM 0.001 .. 1000 TB/s: 1 GB/s is below a DDR channel; 1 PB/s is over a
 *   hundred times the B200's 8 TB/s;
 * - memory 1e-6 .. 100000 GB: 1 kB lets a test model a GPU nothing fits on;
 *   100 TB is hundreds of times any GPU's (under 0.5 TB);
 * - efficiencies 0.001 .. 1: a fraction of a peak, (0, 1], floored at 0.1%
 *   so peak x efficiency stays a rate a time can be divided by. */
#define PEAK_RANGE(dtype) {dtype, 1e-3, 1e5, TERA, "dense TFLOP/s, e.g. 989.4 for an H100's BF16"}
static const sim_json_range peak_bf16 = PEAK_RANGE("bf16"), peak_fp32 = PEAK_RANGE("fp32"),
                            peak_tf32 = PEAK_RANGE("tf32"), peak_fp8 = PEAK_RANGE("fp8"),
                            peak_fp64 = PEAK_RANGE("fp64");
static const sim_json_range hbm = {"hbm_tbs", 1e-3, 1e3, TERA, "HBM bandwidth in TB/s, e.g. 3.35"};
static const sim_json_range memory = {"memory_gb", 1e-6, 1e5, 1e9, "memory capacity in GB, e.g. 80"};
static const sim_json_range cache = {"cache_mb", 0, 1e6, 1 << 20, "the cache its ops share in MiB, e.g. 50 (an "
                                     "H100's L2) or 2 (a CPU core's L2); 0: none"};
#define EFFICIENCY_RANGE(key) {key, 1e-3, 1, 1, "a fraction of the peak, e.g. 0.7"}
static const sim_json_range gemm_eff = EFFICIENCY_RANGE("gemm_efficiency"),
                            attention_eff = EFFICIENCY_RANGE("attention_efficiency"),
                            attention_backward_eff = EFFICIENCY_RANGE("attention_backward_efficiency"),
                            memory_eff = EFFICIENCY_RANGE("memory_efficiency");

static sim_json_at peaks_at(const char *where, const char *prefix, char *buf, size_t size)
{
    snprintf(buf, size, "%speak_tflops.", prefix);
    return (sim_json_at){where, buf};
}

usp_status sim_gpu_check(const sim_gpu *g, const char *where, const char *prefix)
{
    char buf[128];
    sim_json_at at = {where, prefix}, peaks = peaks_at(where, prefix, buf, sizeof buf);
    USP_CHECK(sim_json_check_number(peaks, &peak_bf16, g->peak_bf16));
    USP_CHECK(sim_json_check_number(peaks, &peak_fp32, g->peak_fp32));
    USP_CHECK(sim_json_check_number(peaks, &peak_tf32, g->peak_tf32));
    USP_CHECK(sim_json_check_number(peaks, &peak_fp8, g->peak_fp8));
    USP_CHECK(sim_json_check_number(peaks, &peak_fp64, g->peak_fp64));
    USP_CHECK(sim_json_check_number(at, &hbm, g->hbm_bandwidth));
    USP_CHECK(sim_json_check_number(at, &memory, g->memory_bytes));
    USP_CHECK(sim_json_check_number(at, &gemm_eff, g->gemm_efficiency));
    USP_CHECK(sim_json_check_number(at, &attention_eff, g->attention_efficiency));
    USP_CHECK(sim_json_check_number(at, &attention_backward_eff, g->attention_backward_efficiency));
    return sim_json_check_number(at, &memory_eff, g->memory_efficiency);
}

static usp_status read_peaks(const json_t *obj, sim_json_at gpu_at, sim_gpu *g)
{
    static const char *const known[] = {"fp64", "fp32", "tf32", "bf16", "fp8", NULL};
    char buf[128];
    sim_json_at at = peaks_at(gpu_at.where, gpu_at.prefix, buf, sizeof buf);
    if (!json_is_object(obj))
        return usp_error(USP_ERR_CONFIG, "%s: field '%speak_tflops' must be an object such as "
                         "{\"bf16\": 989.4, \"fp32\": 67}", at.where, gpu_at.prefix);
    USP_CHECK(sim_json_check_keys(obj, at, known));
    USP_CHECK(sim_json_number(obj, at, &peak_bf16, 1, &g->peak_bf16));
    USP_CHECK(sim_json_number(obj, at, &peak_fp32, 1, &g->peak_fp32));
    /* absent: the unit below it */
    g->peak_tf32 = g->peak_fp32, g->peak_fp8 = g->peak_bf16, g->peak_fp64 = g->peak_fp32;
    USP_CHECK(sim_json_number(obj, at, &peak_tf32, 0, &g->peak_tf32));
    USP_CHECK(sim_json_number(obj, at, &peak_fp8, 0, &g->peak_fp8));
    return sim_json_number(obj, at, &peak_fp64, 0, &g->peak_fp64);
}

usp_status sim_gpu_from_json(const json_t *obj, const char *where, const char *prefix, sim_gpu *out)
{
    static const char *const known[] = {"name", "peak_tflops", "hbm_tbs", "memory_gb", "gemm_efficiency",
                                        "attention_efficiency", "attention_backward_efficiency",
                                        "memory_efficiency", "kernels", "cache_mb", NULL};
    sim_json_at at = {where, prefix};
    USP_CHECK(sim_json_check_keys(obj, at, known));
    sim_gpu g = {.gemm_efficiency = 0.7, .attention_efficiency = 0.5, .memory_efficiency = 0.85,
                 .arch = SIM_ARCH_OTHER, .attention_kernel = SIM_ATTENTION_FILE};
    const json_t *name = json_object_get(obj, "name");
    if (name && !json_is_string(name))
        return usp_error(USP_ERR_CONFIG, "%s: field '%sname' must be a string", where, prefix);
    snprintf(g.name, sizeof g.name, "%s", name ? json_string_value(name) : "custom");
    const json_t *peaks = json_object_get(obj, "peak_tflops");
    if (!peaks)
        return usp_error(USP_ERR_CONFIG, "%s: field '%speak_tflops' is missing (dense TFLOP/s per dtype, e.g. "
                         "{\"bf16\": 989.4, \"fp32\": 67})", where, prefix);
    USP_CHECK(read_peaks(peaks, at, &g));
    USP_CHECK(sim_json_number(obj, at, &hbm, 1, &g.hbm_bandwidth));
    USP_CHECK(sim_json_number(obj, at, &memory, 1, &g.memory_bytes));
    USP_CHECK(sim_json_number(obj, at, &gemm_eff, 0, &g.gemm_efficiency));
    USP_CHECK(sim_json_number(obj, at, &attention_eff, 0, &g.attention_efficiency));
    g.attention_backward_efficiency = g.attention_efficiency;
    USP_CHECK(sim_json_number(obj, at, &attention_backward_eff, 0, &g.attention_backward_efficiency));
    USP_CHECK(sim_json_number(obj, at, &memory_eff, 0, &g.memory_efficiency));
    const json_t *kernels = json_object_get(obj, "kernels");
    if (kernels)
        USP_CHECK(sim_kernel_model_from_json(kernels, where, prefix, &g.kernels));
    USP_CHECK(sim_json_number(obj, at, &cache, 0, &g.cache_bytes));
    *out = g;
    return USP_OK;
}

usp_status sim_gpu_from_name_or_file(const char *spec, sim_gpu *out)
{
    if (sim_gpu_preset(spec, out))
        return USP_OK;
    usp_strbuf where = {0}; /* grown, not cut: a deep path stays whole in every message */
    usp_strbuf_printf(&where, "GPU file %s (not a preset: %s)", spec, sim_gpu_preset_names());
    json_t *root = NULL;
    usp_status s = where.failed ? usp_error(USP_ERR_RUNTIME, "out of memory naming the GPU file")
                                : sim_json_load_file(spec, usp_strbuf_text(&where), &root);
    usp_strbuf_free(&where);
    usp_strbuf_printf(&where, "GPU file %s", spec);
    if (s == USP_OK && where.failed)
        s = usp_error(USP_ERR_RUNTIME, "out of memory naming the GPU file");
    if (s == USP_OK)
        s = json_is_object(root) ? sim_gpu_from_json(root, usp_strbuf_text(&where), "", out)
                                 : usp_error(USP_ERR_CONFIG, "%s: the file must hold one JSON object "
                                             "(see docs/cluster_model.md)", usp_strbuf_text(&where));
    json_decref(root);
    usp_strbuf_free(&where);
    return s;
}
