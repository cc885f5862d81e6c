/* Benchmark of the CPU flash attention (backends/cpu/cpu_attention.c).
 *
 * Prints forward and backward GFLOP/s of causal attention beside the GFLOP/s of
 * OpenBLAS sgemm measured in the same run, and their ratios: on a shared, noisy
 * machine only a ratio measured side by side means anything. Also prints the
 * workspace the kernel needs at N = 65536 (the memory figure for acceptance) and
 * runs the forward once at that size. Figures are reported, never asserted.
 *
 * FLOP convention (FlashAttention papers): a causal forward is half of
 * 4 N^2 D per head and batch (S = Q K^T and O = P V, 2 N^2 D each); a backward
 * is 2.5 x the forward (five N^2 D products). The kernel's own backward does
 * 7 products to stay deterministic, which this convention does not credit. */
#include "backends/cpu/cpu_attention.h"
#include "bench/bench_floats.h"
#include "bench/cpu_vectors.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB (1024.0 * 1024.0)

static void usage(FILE *f)
{
    fprintf(f,
            "usage: attention [--json] [--quick] [--help]\n"
            "\n"
            "Causal flash attention on the CPU, batch 1, 8 heads (8 kv heads), for N in\n"
            "{4096, 16384} and head_dim in {16, 32, 64, 128}: forward and backward GFLOP/s beside\n"
            "OpenBLAS sgemm GFLOP/s (2048^3, all threads) measured in the same run: one\n"
            "sgemm call before each repetition, the best one reported with the row.\n"
            "Then the workspace the kernel needs at N = 65536, head_dim 64, 8 heads, and\n"
            "one forward at that size.\n"
            "\n"
            "  --json   one JSON object per line instead of the table\n"
            "  --quick  N = 4096 only, one repetition, no forward at N = 65536\n"
            "  --help   this text\n"
            "\n"
            "The kernels' instruction set is printed with the figures: the widest the CPU\n"
            "has, or the one USP_CPU_ISA names (avx512 | avx2 | sse2), e.g.\n"
            "USP_CPU_ISA=avx2 measures an AVX2-only machine's path on an AVX-512 one.\n"
            "\n"
            "FLOP convention: causal forward = 0.5 * 4 * N^2 * head_dim per head;\n"
            "backward = 2.5 x forward. Times are the best of 3 repetitions at N = 4096,\n"
            "of 2 at N = 16384. Threads: OMP_NUM_THREADS (OpenBLAS's OpenMP build\n"
            "shares them).\n"
            "\n"
            "JSON fields, per configuration: n, head_dim, n_heads, batch, threads, cpu_vectors,\n"
            "  kernel_isa, kernel_vector_bits,\n"
            "  fwd_seconds, bwd_seconds (best), fwd_gflops, bwd_gflops, sgemm_gflops (best\n"
            "  2048^3 sgemm measured between this configuration's repetitions),\n"
            "  fwd_ratio (= fwd_gflops / sgemm_gflops), bwd_ratio (= bwd_gflops / sgemm_gflops).\n"
            "Once: {\"workspace_n\", \"workspace_bytes\", \"head_dim\", \"n_heads\",\n"
            "  \"threads\", \"fwd_seconds\", \"fwd_gflops\"} (the last two absent with --quick).\n");
}

/* The sgemm reference: 2048^3 on all threads (OpenBLAS's own parallel gemm). */
typedef struct sgemm_ref {
    int n;
    float *a, *b, *c; /* [n, n] each */
} sgemm_ref;

static sgemm_ref sgemm_ref_make(void)
{
    sgemm_ref r = {.n = 2048};
    const size_t nn = (size_t)r.n * (size_t)r.n;
    r.a = bench_floats(nn), r.b = bench_floats(nn), r.c = bench_floats(nn);
    bench_fill_uniform(r.a, nn, 1), bench_fill_uniform(r.b, nn, 2);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r.n, r.n, r.n, 1.0f, r.a, r.n, r.b, r.n, 0.0f, r.c,
                r.n); /* warm-up: OpenBLAS starts its threads and buffers */
    return r;
}

/* GFLOP/s of one 2048^3 sgemm call. */
static double sgemm_ref_gflops(const sgemm_ref *r)
{
    double t = omp_get_wtime();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r->n, r->n, r->n, 1.0f, r->a, r->n, r->b, r->n, 0.0f,
                r->c, r->n);
    t = omp_get_wtime() - t;
    return 2.0 * (double)r->n * (double)r->n * (double)r->n / t / 1e9;
}

static cpu_attention_shape causal_shape(int64_t n, int64_t head_dim, int64_t heads)
{
    cpu_attention_shape s = {.batch = 1, .n_q = n, .n_kv = n, .n_heads = heads, .n_kv_heads = heads,
                             .head_dim = head_dim, .q_offset = 0, .kv_offset = 0, .causal = 1,
                             .scale = 1.0f / sqrtf((float)head_dim)};
    return s;
}

/* Causal forward FLOPs: half of 4 N^2 D per head. */
static double forward_flops(const cpu_attention_shape *s)
{
    return 0.5 * 4.0 * (double)s->n_q * (double)s->n_kv * (double)s->head_dim * (double)s->n_heads *
           (double)s->batch;
}

typedef struct timing {
    double fwd_s, bwd_s;  /* best seconds */
    double sgemm_gflops;  /* best sgemm rate, measured between the repetitions */
} timing;

/* Best-of-`reps` seconds of forward and backward at shape s. Each repetition
 * first times one 2048^3 sgemm: the machine is shared and its speed drifts over
 * a run, so the reference is measured right beside the figures it divides. */
static timing time_attention(const cpu_attention_shape *s, int reps, const sgemm_ref *ref)
{
    const size_t nq = (size_t)(s->batch * s->n_q * s->n_heads * s->head_dim);
    const size_t nkv = (size_t)(s->batch * s->n_kv * s->n_kv_heads * s->head_dim);
    float *q = bench_floats(nq), *k = bench_floats(nkv), *v = bench_floats(nkv), *d_o = bench_floats(nq);
    float *o = bench_floats(nq), *lse = bench_floats((size_t)(s->batch * s->n_heads * s->n_q));
    float *dq = bench_floats(nq), *dk = bench_floats(nkv), *dv = bench_floats(nkv);
    void *ws = malloc(cpu_attention_workspace_bytes(s));
    bench_fill_uniform(q, nq, 3), bench_fill_uniform(k, nkv, 4), bench_fill_uniform(v, nkv, 5), bench_fill_uniform(d_o, nq, 6);
    timing best = {1e30, 1e30, 0.0};
    for (int r = 0; r < reps; r++) {
        double g = sgemm_ref_gflops(ref);
        if (g > best.sgemm_gflops) best.sgemm_gflops = g;
        double t0 = omp_get_wtime();
        cpu_flash_attention_forward(s, q, k, v, o, lse, ws);
        double t1 = omp_get_wtime();
        cpu_flash_attention_backward(s, q, k, v, o, lse, d_o, dq, dk, dv, 0, ws);
        double t2 = omp_get_wtime();
        if (t1 - t0 < best.fwd_s) best.fwd_s = t1 - t0;
        if (t2 - t1 < best.bwd_s) best.bwd_s = t2 - t1;
    }
    free(q), free(k), free(v), free(d_o), free(o), free(lse), free(dq), free(dk), free(dv), free(ws);
    return best;
}

/* One forward at N = 65536 (skipped when quick): the workspace figure, and that it runs. */
static void workspace_report(int json, int quick)
{
    cpu_attention_shape s = causal_shape(65536, 64, 8);
    size_t bytes = cpu_attention_workspace_bytes(&s);
    double secs = 0.0, gf = 0.0;
    if (!quick) {
        const size_t nq = (size_t)(s.n_q * s.n_heads * s.head_dim);
        float *q = bench_floats(nq), *k = bench_floats(nq), *v = bench_floats(nq), *o = bench_floats(nq);
        float *lse = bench_floats((size_t)(s.n_heads * s.n_q));
        void *ws = malloc(bytes);
        bench_fill_uniform(q, nq, 7), bench_fill_uniform(k, nq, 8), bench_fill_uniform(v, nq, 9);
        double t = omp_get_wtime();
        cpu_flash_attention_forward(&s, q, k, v, o, lse, ws);
        secs = omp_get_wtime() - t;
        gf = forward_flops(&s) / secs / 1e9;
        free(q), free(k), free(v), free(o), free(lse), free(ws);
    }
    if (json) {
        printf("{\"workspace_n\": 65536, \"workspace_bytes\": %zu, \"head_dim\": 64, \"n_heads\": 8, \"threads\": %d",
               bytes, omp_get_max_threads());
        if (!quick) printf(", \"fwd_seconds\": %.3f, \"fwd_gflops\": %.1f", secs, gf);
        printf("}\n");
    } else {
        printf("\nworkspace at N = 65536, head_dim 64, 8 heads, %d threads: %zu bytes (%.2f MiB; target < 16 MiB)\n",
               omp_get_max_threads(), bytes, (double)bytes / MIB);
        if (!quick) printf("forward at N = 65536: %.2f s, %.1f GFLOP/s\n", secs, gf);
    }
}

int main(int argc, char **argv)
{
    int json = 0, quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return usage(stdout), 0;
        else return fprintf(stderr, "attention: unknown option '%s'\n", argv[i]), usage(stderr), 2;
    }
    const int64_t ns[] = {4096, 16384}, dims[] = {16, 32, 64, 128};
    const int n_dims = (int)(sizeof dims / sizeof dims[0]);
    int kbits = 0;
    const char *kisa = cpu_attention_isa_name(&kbits);
    const int n_ns = quick ? 1 : 2;
    sgemm_ref ref = sgemm_ref_make();
    if (!json) {
        printf("causal attention, batch 1, 8 heads, %d threads, cpu vectors %s, kernels %s (%d-bit vectors; "
               "USP_CPU_ISA=%s)\nflop: fwd = 2 N^2 D per head, bwd = 2.5 x fwd\n", omp_get_max_threads(),
               bench_cpu_vectors(), kisa, kbits, getenv("USP_CPU_ISA") ? getenv("USP_CPU_ISA") : "unset");
        printf("sgemm: OpenBLAS 2048^3, best of the calls made between the repetitions of each row\n\n");
        printf("%6s %8s %8s %8s %8s %9s %8s %8s %9s\n", "N", "head_dim", "sgemm", "fwd s", "fwd GF/s", "fwd/sgemm",
               "bwd s", "bwd GF/s", "bwd/sgemm");
    }
    for (int a = 0; a < n_ns; a++)
        for (int b = 0; b < n_dims; b++) {
            cpu_attention_shape s = causal_shape(ns[a], dims[b], 8);
            timing t = time_attention(&s, quick ? 1 : (ns[a] <= 4096 ? 3 : 2), &ref);
            double ff = forward_flops(&s), fg = ff / t.fwd_s / 1e9, bg = 2.5 * ff / t.bwd_s / 1e9;
            double sg = t.sgemm_gflops;
            if (json)
                printf("{\"n\": %lld, \"head_dim\": %lld, \"n_heads\": 8, \"batch\": 1, \"threads\": %d, "
                       "\"cpu_vectors\": \"%s\", \"kernel_isa\": \"%s\", \"kernel_vector_bits\": %d, \"fwd_seconds\": %.4f, \"bwd_seconds\": %.4f, \"fwd_gflops\": %.1f, \"bwd_gflops\": %.1f, "
                       "\"sgemm_gflops\": %.1f, \"fwd_ratio\": %.3f, \"bwd_ratio\": %.3f}\n",
                       (long long)s.n_q, (long long)s.head_dim, omp_get_max_threads(), bench_cpu_vectors(), kisa, kbits, t.fwd_s, t.bwd_s, fg, bg,
                       sg, fg / sg, bg / sg);
            else
                printf("%6lld %8lld %8.1f %8.3f %8.1f %9.2f %8.3f %8.1f %9.2f\n", (long long)s.n_q,
                       (long long)s.head_dim, sg, t.fwd_s, fg, fg / sg, t.bwd_s, bg, bg / sg);
            fflush(stdout);
        }
    free(ref.a), free(ref.b), free(ref.c);
    workspace_report(json, quick);
    return 0;
}
