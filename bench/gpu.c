/* Benchmark of the cuda backend on one GPU (bench/gpu.sh runs it).
 *
 * Prints, measured in one run:
 * - cuBLAS GEMM TFLOP/s, fp32 (TF32 off, as the backend runs it) and bf16
 *   (bf16 A, B and C, fp32 accumulation), M = N = K = 8192;
 * - flash attention forward and backward TFLOP/s, bf16, causal, head_dim 128,
 *   16 heads, N = 16384 and 65536, each beside the bf16 GEMM figure;
 * - training steps of llama-1b at N = 8192 and 32768 (bf16 storage): tokens/s,
 *   MFU, and the seconds from the start of the run to the end of step 1
 *   (weights drawn, uploaded, one step);
 * - with --peer FILE (bench/gpu_peer.py's figures, measured by gpu.sh in the
 *   same session on the same GPU): PyTorch's figure beside each, and usp's
 *   over it.
 *
 * FLOPs are those the ops report (core/ops/op_kinds.c: GEMM 2mnk; causal attention 4 D
 * per visible query-key pair forward, 2.5x that backward), read from
 * usp_backend_flops around the timed calls, so the figures use the planner's
 * own counting. Times: CUDA work is asynchronous, so each timed window ends
 * with usp_backend_synchronize. MFU = model FLOPs of a step (recomputation
 * excluded) / (step time x the GPU's dense bf16 peak); the peak is the
 * datasheet figure for H100/H200 SXM (989 TFLOP/s, NVIDIA H100 datasheet)
 * or --peak-tflops X. Figures are reported, never asserted. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "backends/cuda/cuda_backend.h"
#include "core/base/clock_seconds.h"
#include "core/runtime/runtime_single.h"
#include "core/train/train.h"

#define H100_BF16_PEAK 989.4e12 /* dense, SXM: NVIDIA H100 Tensor Core GPU datasheet (H200: the same) */

static json_t *peer; /* bench/gpu_peer.py's figures (--peer), or NULL */

/* The peer's number at key of obj, or 0 (absent, skipped). */
static double number(const json_t *obj, const char *key)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_number(v) ? json_number_value(v) : 0;
}

/* The element of the peer's array (under section, and under "rows" when section holds an object) whose "n" is n. */
static const json_t *peer_row(const char *section, int64_t n)
{
    const json_t *a = json_object_get(peer, section);
    if (json_is_object(a))
        a = json_object_get(a, "rows");
    size_t i;
    const json_t *row;
    json_array_foreach(a, i, row) if (number(row, "n") == (double)n) return row;
    return NULL;
}

/* " (PyTorch X unit, usp / PyTorch R)" into buf, or "" when the peer has no such figure. */
static const char *beside(char *buf, size_t size, double ours, double theirs, const char *unit)
{
    if (theirs > 0)
        snprintf(buf, size, " (PyTorch %.1f %s: usp / PyTorch %.3f)", theirs, unit, ours / theirs);
    else
        snprintf(buf, size, "%s", peer ? " (PyTorch: no figure)" : "");
    return buf;
}

static void check(usp_status s, const char *what)
{
    if (s != USP_OK) {
        fprintf(stderr, "bench/gpu: %s: %s\n", what, usp_error_message());
        exit(1);
    }
}

/* A buffer of n elements stored as `dtype`, filled with small values (from an fp32 upload). */
static void *filled(usp_backend_t *be, int64_t n, usp_dtype dtype)
{
    float *host = malloc((size_t)n * sizeof *host), *f32;
    void *out;
    if (!host)
        check(USP_ERR_RUNTIME, "host memory");
    for (int64_t i = 0; i < n; i++)
        host[i] = (float)((i * 7919 % 2001) - 1000) * 1e-3f;
    check(usp_buffer_alloc(be, (size_t)n * sizeof *host, "bench", (void **)&f32), "alloc");
    check(usp_buffer_copy(be, f32, host, (size_t)n * sizeof *host, USP_COPY_HOST_TO_DEVICE, NULL), "upload");
    if (dtype == USP_F32) {
        free(host);
        return f32;
    }
    check(usp_buffer_alloc_as(be, (size_t)n, dtype, "bench", &out), "alloc bf16");
    check(usp_buffer_convert(be, out, f32, (size_t)n, NULL), "convert");
    check(usp_backend_synchronize(be, NULL), "synchronize");
    usp_buffer_free(be, f32);
    free(host);
    return out;
}

/* TFLOP/s of `reps` GEMMs of n x n x n stored as dtype, after 2 warm-up calls. */
static double gemm_tflops(usp_backend_t *be, int64_t n, usp_dtype dtype, int reps)
{
    usp_gemm_desc g = {.m = n, .n = n, .k = n, .alpha = 1.0f, .lda = n, .ldb = n, .ldc = n, .batch = 1};
    g.a = filled(be, n * n, dtype), g.b = filled(be, n * n, dtype), g.c = filled(be, n * n, dtype);
    for (int i = 0; i < 2; i++)
        check(usp_gemm(be, &g, NULL), "gemm");
    check(usp_backend_synchronize(be, NULL), "synchronize");
    double f0 = usp_backend_flops(be), t0 = usp_wall_seconds();
    for (int i = 0; i < reps; i++)
        check(usp_gemm(be, &g, NULL), "gemm");
    check(usp_backend_synchronize(be, NULL), "synchronize");
    double tflops = (usp_backend_flops(be) - f0) / (usp_wall_seconds() - t0) / 1e12;
    usp_buffer_free(be, (void *)g.a), usp_buffer_free(be, (void *)g.b), usp_buffer_free(be, g.c);
    return tflops;
}

/* Forward and backward TFLOP/s of causal bf16 attention over n tokens. */
static void attention_tflops(usp_backend_t *be, int64_t n, double *fwd, double *bwd)
{
    const int64_t H = 16, D = 128, elems = n * H * D;
    usp_attention_shape s = {.batch = 1, .n_q = n, .n_kv = n, .n_heads = H, .n_kv_heads = H, .head_dim = D,
                             .causal = 1, .scale = 1.0f / sqrtf((float)D)};
    float *q = filled(be, elems, USP_BF16), *k = filled(be, elems, USP_BF16), *v = filled(be, elems, USP_BF16);
    float *o = filled(be, elems, USP_BF16), *d_o = filled(be, elems, USP_BF16), *dq = filled(be, elems, USP_BF16);
    float *dk = filled(be, elems, USP_BF16), *dv = filled(be, elems, USP_BF16), *lse = filled(be, H * n, USP_F32);
    const int reps = n > 32768 ? 1 : 3;
    check(usp_flash_attention_forward(be, &s, q, k, v, o, lse, NULL), "attention forward (warm-up)");
    check(usp_backend_synchronize(be, NULL), "synchronize");
    double f0 = usp_backend_flops(be), t0 = usp_wall_seconds();
    for (int i = 0; i < reps; i++)
        check(usp_flash_attention_forward(be, &s, q, k, v, o, lse, NULL), "attention forward");
    check(usp_backend_synchronize(be, NULL), "synchronize");
    *fwd = (usp_backend_flops(be) - f0) / (usp_wall_seconds() - t0) / 1e12;
    f0 = usp_backend_flops(be), t0 = usp_wall_seconds();
    for (int i = 0; i < reps; i++)
        check(usp_flash_attention_backward(be, &s, q, k, v, o, lse, d_o, dq, dk, dv, 0, NULL), "attention backward");
    check(usp_backend_synchronize(be, NULL), "synchronize");
    *bwd = (usp_backend_flops(be) - f0) / (usp_wall_seconds() - t0) / 1e12;
    float *all[] = {q, k, v, o, d_o, dq, dk, dv, lse};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        usp_buffer_free(be, all[i]);
}

/* ---- a training step ------------------------------------------------------------ */

typedef struct step_times {
    double at[8];
    int n;
} step_times;

static void on_record(void *ctx, const usp_train_record *r)
{
    step_times *t = ctx;
    if (r->kind == USP_TRAIN_RECORD_STEP && t->n < 8)
        t->at[t->n++] = usp_wall_seconds();
}

static usp_status make_gpu0(void *arg, usp_backend_t **out)
{
    (void)arg;
    return usp_backend_cuda_create(0, out);
}

/* tokens/s and MFU of llama-1b at n tokens (1 warm-up step, then 2 timed), and the seconds to the end of step 1. */
static void train_step(int64_t n, double peak, double *tokens_per_s, double *mfu, double *first_step_s)
{
    usp_train_config c;
    usp_train_defaults(&c);
    check(usp_model_config_load("llama-1b", &c.model), "llama-1b");
    check(usp_mesh_shape_make(1, 1, 1, &c.shape), "mesh");
    c.data = "passkey", c.seq_len = n, c.batch = 1, c.steps = 3, c.eval_samples = 0, c.log_every = 1;
    c.storage = USP_BF16, c.tiled_loss = 1; /* the logits of 128256 words at 32K tokens: 16.8 GB in fp32 untiled */
    step_times t = {0};
    usp_train_step_stats stats = {0};
    c.on_record = on_record, c.record_ctx = &t, c.step_stats = &stats;
    size_t peak_bytes = 0;
    usp_train_result result = {.passkey_accuracy = -1, .peak_bytes = &peak_bytes};
    usp_runtime_t *rt;
    const double start = usp_wall_seconds();
    check(usp_runtime_single_create("GPU 0", make_gpu0, NULL, &rt), "runtime");
    check(usp_runtime_run(rt, usp_train_rank, &(usp_train_run){.config = &c, .result = &result}), "training");
    usp_runtime_destroy(rt);
    double step_s = (t.at[t.n - 1] - t.at[0]) / (t.n - 1);
    *first_step_s = t.at[0] - start;
    *tokens_per_s = (double)n / step_s;
    *mfu = (stats.step_flops - stats.recompute_flops) / step_s / peak;
    printf("train llama-1b N %lld bf16: %.3f s a step, peak memory %.1f GiB, loss %.3f, %.0f host waits in the "
           "last step to its update (%.2f per step with the records)\n", (long long)n, step_s,
           (double)peak_bytes / (1 << 30), result.loss, stats.host_waits, result.host_waits_per_step);
}

int main(int argc, char **argv)
{
    double peak = 0;
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--peak-tflops") == 0 && i + 1 < argc)
            peak = atof(argv[++i]) * 1e12;
        else if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else if (strcmp(argv[i], "--peer") == 0 && i + 1 < argc) {
            json_error_t e;
            if (!(peer = json_load_file(argv[++i], 0, &e))) {
                fprintf(stderr, "bench/gpu: --peer %s: %s (line %d); bench/gpu_peer.py --out writes it\n", argv[i],
                        e.text, e.line);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: %s [--peak-tflops X] [--quick] [--peer FILE.json]\n", argv[0]);
            return 2;
        }
    }
    char why[256], gpu[160];
    if (usp_cuda_device_count(why, sizeof why) == 0) {
        printf("bench/gpu: skipped: no GPU here (CUDA says: %s)\n", why);
        return 77;
    }
    usp_cuda_device_describe(0, gpu, sizeof gpu);
    if (peak == 0)
        peak = strstr(gpu, "H100") || strstr(gpu, "H200") || strstr(gpu, "GH200") ? H100_BF16_PEAK : 0;
    printf("GPU 0: %s; bf16 dense peak %s\n", gpu, peak > 0 ? "989.4 TFLOP/s (datasheet)" : "unknown (--peak-tflops)");
    usp_backend_t *be;
    check(usp_backend_cuda_create(0, &be), "the cuda backend");
    const int64_t n = quick ? 2048 : 8192;
    double fp32 = gemm_tflops(be, n, USP_F32, 5), bf16 = gemm_tflops(be, n, USP_BF16, 10);
    const json_t *peer_gemm = json_object_get(peer, "gemm");
    const int same_gemm = number(peer_gemm, "n") == (double)n;
    char b1[96], b2[96];
    printf("cuBLAS GEMM %lld^3: fp32 %.1f TFLOP/s%s, bf16 %.1f TFLOP/s (%.0f%% of peak)%s\n", (long long)n, fp32,
           beside(b1, sizeof b1, fp32, same_gemm ? number(peer_gemm, "fp32_tflops") : 0, "TFLOP/s"), bf16,
           peak > 0 ? 100 * bf16 * 1e12 / peak : 0,
           beside(b2, sizeof b2, bf16, same_gemm ? number(peer_gemm, "bf16_tflops") : 0, "TFLOP/s"));
    const int64_t lengths[] = {16384, 65536};
    for (int i = 0; i < (quick ? 1 : 2); i++) {
        double fwd, bwd;
        const int64_t len = quick ? 4096 : lengths[i];
        attention_tflops(be, len, &fwd, &bwd);
        const json_t *sdpa = peer_row("attention", len);
        printf("flash attention bf16 causal D 128, 16 heads, N %lld: forward %.1f TFLOP/s (%.2f of GEMM, %.0f%% of "
               "peak)%s, backward %.1f TFLOP/s (%.2f of GEMM)%s\n", (long long)len, fwd, fwd / bf16,
               peak > 0 ? 100 * fwd * 1e12 / peak : 0,
               beside(b1, sizeof b1, fwd, number(sdpa, "forward_tflops"), "TFLOP/s SDPA"), bwd, bwd / bf16,
               beside(b2, sizeof b2, bwd, number(sdpa, "backward_tflops"), "TFLOP/s SDPA"));
    }
    usp_backend_destroy(be);
    const int64_t train_lengths[] = {8192, 32768};
    for (int i = 0; i < (quick ? 1 : 2); i++) {
        const int64_t len = quick ? 4096 : train_lengths[i];
        double tps, mfu, first_s;
        train_step(len, peak > 0 ? peak : 1, &tps, &mfu, &first_s);
        const json_t *hf = peer_row("llama", len);
        printf("train llama-1b N %lld: %.0f tokens/s, MFU %.1f%%%s, %.1f s from start to the end of step 1%s%s\n",
               (long long)len, tps, 100 * mfu, peak > 0 ? "" : " (of an unknown peak)", first_s,
               beside(b1, sizeof b1, tps, number(hf, "tokens_per_s"), "tokens/s HF Llama"),
               json_is_true(json_object_get(hf, "checkpointing")) ? ", PyTorch with activation checkpointing" : "");
    }
    json_decref(peer);
    return 0;
}
