/* Benchmark of the attention's work under masks (core/ops/mask.h) on the CPU flash attention
 * (backends/cpu/cpu_attention.c): does its time fall as the count of visible pairs says?
 *
 * For one sequence, causal, then packed documents and a sliding window: the exact visible pairs
 * (usp_mask_pairs), the best forward + backward seconds, and two ratios against causal measured in
 * the same run: the pairs' and the time's. Their quotient is what tile rounding and per-tile overhead
 * cost (1.00: the time falls exactly as the count). Figures are reported, never asserted. */
#include "backends/cpu/cpu_attention.h"
#include "bench/bench_floats.h"
#include "bench/cpu_vectors.h"
#include "core/ops/mask.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mask_work [--json] [--quick] [--help]\n"
            "\n"
            "CPU flash attention, batch 1, 8 heads of 64, N = 16384 tokens (4096 with --quick): causal, then\n"
            "packed documents of N/32 and N/4 tokens, then a causal sliding window of N/16. For each: the\n"
            "visible pairs (exact), the best of 3 forward + backward times (2 with --quick), and against\n"
            "causal in the same run the pairs' ratio, the time's ratio and time / pairs (1.00: the time\n"
            "falls exactly as the count says; above: tile rounding and per-tile costs). Then the count\n"
            "for 128K tokens of 4K-token documents (issue 47's case), not timed.\n"
            "\n"
            "JSON fields, per mask: mask, n, pairs, seconds, pairs_ratio, time_ratio, time_per_pair_ratio,\n"
            "  threads, cpu_vectors, kernel_isa, kernel_vector_bits.\n");
}

/* The documents' table of n positions cut into documents of `len` tokens (the last may be shorter). */
static int32_t *documents(int64_t n, int64_t len)
{
    int64_t count = (n + len - 1) / len, *lengths = malloc((size_t)count * sizeof *lengths);
    int32_t *table = malloc((size_t)(2 * n) * sizeof *table);
    if (!lengths || !table) {
        fprintf(stderr, "mask_work: out of memory\n");
        exit(1);
    }
    for (int64_t d = 0; d < count; d++)
        lengths[d] = d + 1 < count ? len : n - d * len;
    usp_mask_table_fill(lengths, count, table);
    free(lengths);
    return table;
}

/* Best-of-reps seconds of one forward and one backward at s. */
static double best_seconds(const cpu_attention_shape *s, int reps)
{
    const size_t nq = (size_t)(s->n_q * s->n_heads * s->head_dim), nkv = (size_t)(s->n_kv * s->n_kv_heads * s->head_dim);
    float *q = bench_floats(nq), *k = bench_floats(nkv), *v = bench_floats(nkv), *d_o = bench_floats(nq), *o = bench_floats(nq);
    float *lse = bench_floats((size_t)(s->n_heads * s->n_q)), *dq = bench_floats(nq), *dk = bench_floats(nkv), *dv = bench_floats(nkv);
    void *ws = malloc(cpu_attention_workspace_bytes(s));
    bench_fill_uniform(q, nq, 3), bench_fill_uniform(k, nkv, 4), bench_fill_uniform(v, nkv, 5), bench_fill_uniform(d_o, nq, 6);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        const double t0 = omp_get_wtime();
        cpu_flash_attention_forward(s, q, k, v, o, lse, ws);
        cpu_flash_attention_backward(s, q, k, v, o, lse, d_o, dq, dk, dv, 0, ws);
        const double t = omp_get_wtime() - t0;
        best = t < best ? t : best;
    }
    free(q), free(k), free(v), free(d_o), free(o), free(lse), free(dq), free(dk), free(dv), free(ws);
    return best;
}

int main(int argc, char **argv)
{
    int json = 0, quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else {
            usage(strcmp(argv[i], "--help") ? stderr : stdout);
            return strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    const int64_t n = quick ? 4096 : 16384, reps = quick ? 2 : 3;
    int bits;
    const char *isa = cpu_attention_isa_name(&bits);
    int32_t *short_docs = documents(n, n / 32), *long_docs = documents(n, n / 4);
    const struct { const char *name; int64_t window; const int32_t *docs; } masks[] = {
        {"causal", 0, NULL}, {"documents of N/32", 0, short_docs}, {"documents of N/4", 0, long_docs},
        {"window of N/16", n / 16, NULL}};
    if (!json)
        printf("CPU flash attention under masks, N = %lld, 8 heads of 64, %d threads, CPU %s, kernels %s "
               "(%d-bit)\n%-20s %14s %10s %8s %8s %10s\n", (long long)n, omp_get_max_threads(), bench_cpu_vectors(),
               isa, bits, "mask", "pairs", "seconds", "pairs/c", "time/c", "time/pairs");
    double causal_pairs = 0, causal_s = 0;
    for (size_t m = 0; m < sizeof masks / sizeof *masks; m++) {
        cpu_attention_shape s = {.batch = 1, .n_q = n, .n_kv = n, .n_heads = 8, .n_kv_heads = 8, .head_dim = 64,
                                 .causal = 1, .scale = 0.125f, .window = masks[m].window, .seq_len = n,
                                 .docs = masks[m].docs};
        const usp_mask_row row = {1, masks[m].window, masks[m].docs};
        const double pairs = usp_mask_pairs(&row, 0, n, 0, n), secs = best_seconds(&s, (int)reps);
        if (m == 0)
            causal_pairs = pairs, causal_s = secs;
        const double pr = pairs / causal_pairs, tr = secs / causal_s;
        if (json)
            printf("{\"mask\": \"%s\", \"n\": %lld, \"pairs\": %.0f, \"seconds\": %.4f, \"pairs_ratio\": %.4f, "
                   "\"time_ratio\": %.4f, \"time_per_pair_ratio\": %.3f, \"threads\": %d, \"cpu_vectors\": \"%s\", "
                   "\"kernel_isa\": \"%s\", \"kernel_vector_bits\": %d}\n", masks[m].name, (long long)n, pairs, secs,
                   pr, tr, tr / pr, omp_get_max_threads(), bench_cpu_vectors(), isa, bits);
        else
            printf("%-20s %14.0f %10.4f %8.4f %8.4f %10.3f\n", masks[m].name, pairs, secs, pr, tr, tr / pr);
    }
    const int64_t big = 131072;
    int32_t *docs = documents(big, 4096);
    const usp_mask_row row = {1, 0, docs};
    const double packed = usp_mask_pairs(&row, 0, big, 0, big), causal = (double)big * (double)(big + 1) / 2;
    if (json)
        printf("{\"case\": \"131072 tokens, documents of 4096\", \"pairs\": %.0f, \"causal_pairs\": %.0f}\n", packed,
               causal);
    else
        printf("131072 tokens of 4096-token documents: %.0f visible pairs, %.4f of causal's %.0f (not timed)\n",
               packed, packed / causal, causal);
    free(docs), free(short_docs), free(long_docs);
    return 0;
}
