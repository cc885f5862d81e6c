/* Lesson 6: how many bits do Ulysses, Ring and the hybrid change?
 *
 * One causal attention layer with grouped-query heads (8 query heads sharing
 * 2 key/value heads, head_dim 16, 256 tokens) runs forward and backward on
 * the simulator: first on 1 rank (one GPU: flash attention over the whole
 * sequence), then on 4 ranks as Ulysses U=4, Ring R=4 and the hybrid
 * U=2 x R=2, through the code the trainer uses (core/parallel/schedule.h: the schedule the mesh
 * picks, Ulysses, Ring or the hybrid). Every output
 * element is compared with the 1-rank one, bit for bit.
 *
 * What it shows, and checks (exit 1 if a claim fails):
 * - Ulysses forward is bitwise identical: its all-to-alls move bytes, and the
 *   kernel computes each head the same way whichever rank runs it. So is dq.
 * - Ulysses dk and dv are not: each KV head serves 4 query heads, which sit
 *   on 2 ranks; each rank sums the terms of its 2 heads and the all-to-all
 *   back adds the 2 partial sums, where one rank adds the 4 terms in its
 *   kernel's own order: the same additions, grouped differently. Within 1e-6
 *   of the largest gradient (tests/test_ulysses.c).
 * - Ring and the hybrid merge per-block results with the online softmax, so
 *   o differs in its last bits; every tensor stays within 1e-5 (inputs in
 *   [-1, 1]), the tolerance of tests/test_ring.c and tests/test_ulysses.c.
 *
 * The ranks copy their slices out of and back into whole-sequence host arrays
 * only to compare them: that is the observer's bookkeeping, not the algorithm,
 * whose data moves through the communicator alone. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/parallel/mesh.h"
#include "core/parallel/schedule.h"
#include "sim/sim_runtime.h"

enum { B = 1, N = 256, H = 8, HKV = 2, D = 16 };
#define NQ ((size_t)B * N * H * D)   /* elements of q, o, dO, dq: [B, N, H, D] */
#define NK ((size_t)B * N * HKV * D) /* elements of k, v, dk, dv: [B, N, Hkv, D] */

/* One schedule's run: the global inputs (shared by every run) and the global
 * outputs its ranks write back at their tokens' positions. */
typedef struct layer_run {
    int U, R;
    const float *q, *k, *v, *d_o;
    float *o, *dq, *dk, *dv;
} layer_run;

static void fill(float *x, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) { /* a 32-bit LCG: the same inputs on every machine */
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((double)(seed >> 8) / (double)(1u << 24) * 2.0 - 1.0);
    }
}

/* Copies this rank's tokens from a global [B, N, h, D] array `in` to a local
 * [B, T, h, D] one, or (in NULL) from the local one to the global `out`. */
static void copy_tokens(const usp_seq_layout *l, int sp_rank, int64_t h, float *local, const float *in, float *out)
{
    size_t row = (size_t)h * D;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < l->per_rank; t++) {
            size_t g = (size_t)usp_seq_layout_global(l, sp_rank, t);
            size_t at_local = ((size_t)b * (size_t)l->per_rank + (size_t)t) * row;
            size_t at_global = ((size_t)b * N + g) * row;
            if (in)
                memcpy(local + at_local, in + at_global, row * sizeof(float));
            else
                memcpy(out + at_global, local + at_local, row * sizeof(float));
        }
}

static usp_status upload(const usp_rank_ctx *ctx, const usp_seq_layout *l, int sp, int64_t h, const float *global,
                         float *host, void **dev)
{
    size_t bytes = (size_t)B * (size_t)l->per_rank * (size_t)h * D * sizeof(float);
    USP_CHECK(usp_buffer_alloc(ctx->backend, bytes, "tutorial", dev));
    if (!global)
        return usp_buffer_zero(ctx->backend, *dev, bytes, ctx->stream);
    copy_tokens(l, sp, h, host, global, NULL);
    return usp_buffer_copy(ctx->backend, *dev, host, bytes, USP_COPY_HOST_TO_DEVICE, ctx->stream);
}

static usp_status download(const usp_rank_ctx *ctx, const usp_seq_layout *l, int sp, int64_t h, const void *dev,
                           float *host, float *global)
{
    size_t bytes = (size_t)B * (size_t)l->per_rank * (size_t)h * D * sizeof(float);
    USP_CHECK(usp_buffer_copy(ctx->backend, host, dev, bytes, USP_COPY_DEVICE_TO_HOST, ctx->stream));
    copy_tokens(l, sp, h, host, NULL, global);
    return USP_OK;
}

/* The layer on this rank: its slice of q, k, v, dO in; forward; backward; o, dq, dk, dv out. */
static usp_status layer_on_rank(const usp_rank_ctx *ctx, const layer_run *run, const usp_mesh *mesh,
                                usp_attention *a, void *dev[8], float *host)
{
    const usp_seq_layout *l = usp_attention_layout(a);
    int sp = usp_comm_rank(mesh->sp);
    const float *in[4] = {run->q, run->k, run->v, run->d_o};
    float *out[4] = {run->o, run->dq, run->dk, run->dv};
    const int64_t heads[8] = {H, HKV, HKV, H, H, H, HKV, HKV}; /* dev: q, k, v, dO, o, dq, dk, dv */
    for (int i = 0; i < 8; i++)
        USP_CHECK(upload(ctx, l, sp, heads[i], i < 4 ? in[i] : NULL, host, &dev[i]));
    USP_CHECK(usp_attention_forward(a, dev[0], dev[1], dev[2], dev[4]));
    USP_CHECK(usp_attention_backward(a, dev[3], dev[5], dev[6], dev[7]));
    for (int i = 0; i < 4; i++)
        USP_CHECK(download(ctx, l, sp, heads[4 + i], dev[4 + i], host, out[i]));
    return USP_OK;
}

/* What every rank runs: the mesh, the attention, the layer, and the cleanup. */
static usp_status rank_main(const usp_rank_ctx *ctx, void *arg)
{
    layer_run *run = arg;
    usp_mesh_shape shape;
    usp_mesh mesh = {0};
    usp_attention *a = NULL;
    void *dev[8] = {0};
    float *host = malloc(NQ * sizeof(float));
    usp_status s = host ? USP_OK : usp_error(USP_ERR_RUNTIME, "out of memory for a rank's host copy");
    if (s == USP_OK)
        s = usp_mesh_shape_make(ctx->world_size, run->U, run->R, &shape);
    if (s == USP_OK)
        s = usp_mesh_create(ctx->world, &shape, &mesh);
    usp_schedule_config cfg = {.backend = ctx->backend, .stream = ctx->stream, .ulysses = mesh.ulysses,
                               .ring = mesh.ring, .batch = B, .seq_len = N, .n_heads = H, .n_kv_heads = HKV,
                               .head_dim = D, .causal = 1};
    if (s == USP_OK)
        s = usp_attention_create(usp_schedule_for_mesh(run->U, run->R), &cfg, &a);
    if (s == USP_OK)
        s = layer_on_rank(ctx, run, &mesh, a, dev, host);
    for (int i = 0; i < 8; i++)
        if (dev[i])
            usp_buffer_free(ctx->backend, dev[i]);
    usp_attention_destroy(a);
    if (mesh.ulysses)
        usp_mesh_destroy(&mesh);
    free(host);
    return s;
}

/* Runs one schedule on U*R simulated ranks; on failure prints the report. */
static usp_status run_schedule(layer_run *run)
{
    usp_runtime_t *rt;
    USP_CHECK(sim_runtime_create(&(usp_runtime_options){.world_size = run->U * run->R}, &rt));
    usp_status s = usp_runtime_run(rt, rank_main, run);
    if (s != USP_OK)
        fprintf(stderr, "precision: U=%d R=%d failed: %s\n", run->U, run->R,
                *usp_runtime_report(rt) ? usp_runtime_report(rt) : usp_error_message());
    usp_runtime_destroy(rt);
    return s;
}

typedef struct diff {
    size_t differ;  /* elements whose bits differ */
    double max_abs; /* max |got - want| */
    double rel;     /* max_abs / max |want| */
} diff;

/* Leading bits that agree at the tensor's scale: an f32 carries 24 significant
 * bits, and a difference of rel x (largest value) leaves about -log2(rel) of
 * them in common. (Units in the last place of each element would mislead:
 * near zero a tiny absolute difference is a huge number of ulps.) */
static int bits_agreeing(double rel)
{
    return rel <= 0x1p-24 ? 24 : (int)floor(-log2(rel));
}

static diff compare(const float *got, const float *want, size_t n)
{
    diff d = {0};
    double scale = 0;
    for (size_t i = 0; i < n; i++) {
        scale = fmax(scale, fabs((double)want[i]));
        if (memcmp(&got[i], &want[i], sizeof(float)) == 0)
            continue;
        d.differ++;
        double e = fabs((double)got[i] - (double)want[i]);
        if (!(e <= d.max_abs)) /* a NaN makes max_abs NaN, and every tolerance check then fails */
            d.max_abs = e;
    }
    d.rel = scale > 0 ? d.max_abs / scale : d.max_abs;
    return d;
}

static int claim(int ok, const char *what)
{
    printf("  %s  %s\n", ok ? "ok    " : "FAILED", what);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        fprintf(stderr, "usage: %s (no options): compares one attention layer on 1 rank with Ulysses, Ring and "
                        "the hybrid; see tutorials/06-precision/README.md\n", argv[0]);
        return USP_ERR_CONFIG;
    }
    float *buf = calloc(4 * NQ + 4 * NK, sizeof(float)); /* inputs, then 1-rank outputs */
    float *got = calloc(2 * NQ + 2 * NK, sizeof(float)); /* one schedule's outputs */
    if (!buf || !got) {
        fprintf(stderr, "precision: out of memory\n");
        free(buf), free(got);
        return USP_ERR_RUNTIME;
    }
    float *q = buf, *d_o = q + NQ, *k = d_o + NQ, *v = k + NK;
    float *ref_o = v + NK, *ref_dq = ref_o + NQ, *ref_dk = ref_dq + NQ, *ref_dv = ref_dk + NK;
    fill(q, NQ, 1), fill(k, NK, 2), fill(v, NK, 3), fill(d_o, NQ, 4);
    printf("one causal attention layer: %d tokens, %d query heads, %d KV heads, head_dim %d; inputs in [-1, 1]\n",
           N, H, HKV, D);
    printf("reference: the same code on 1 rank (one GPU)\n\n");
    layer_run one = {.U = 1, .R = 1, .q = q, .k = k, .v = v, .d_o = d_o,
                     .o = ref_o, .dq = ref_dq, .dk = ref_dk, .dv = ref_dv};
    usp_status s = run_schedule(&one);
    const struct { int U, R; const char *name; } schedules[] = {
        {4, 1, "Ulysses U=4"}, {1, 4, "Ring R=4"}, {2, 2, "hybrid U=2 x R=2"}};
    const char *names[4] = {"o", "dq", "dk", "dv"};
    const float *want[4] = {ref_o, ref_dq, ref_dk, ref_dv};
    diff d[3][4];
    printf("%-18s %-6s %9s %9s %12s %12s %13s\n", "schedule", "tensor", "elements", "differ", "max |diff|",
           "relative", "bits agreeing");
    for (int c = 0; c < 3 && s == USP_OK; c++) {
        layer_run run = {.U = schedules[c].U, .R = schedules[c].R, .q = q, .k = k, .v = v, .d_o = d_o,
                         .o = got, .dq = got + NQ, .dk = got + 2 * NQ, .dv = got + 2 * NQ + NK};
        s = run_schedule(&run);
        const float *mine[4] = {run.o, run.dq, run.dk, run.dv};
        for (int t = 0; t < 4 && s == USP_OK; t++) {
            size_t n = t < 2 ? NQ : NK;
            d[c][t] = compare(mine[t], want[t], n);
            printf("%-18s %-6s %9zu %9zu %12.3g %12.3g %10d/24%s\n", t == 0 ? schedules[c].name : "", names[t],
                   n, d[c][t].differ, d[c][t].max_abs, d[c][t].rel, d[c][t].differ ? bits_agreeing(d[c][t].rel) : 24,
                   d[c][t].differ == 0 ? "  bitwise" : "");
        }
    }
    free(buf), free(got);
    if (s != USP_OK)
        return (int)s;
    int failed = 0;
    printf("\nclaims:\n");
    failed += claim(d[0][0].differ == 0 && d[0][1].differ == 0, "Ulysses: o and dq are bitwise those of one rank");
    failed += claim(d[0][2].rel <= 1e-6 && d[0][3].rel <= 1e-6,
                    "Ulysses: dk, dv (a KV head's 4 query heads on 2 ranks) within 1e-6 of the largest");
    failed += claim(d[1][0].differ > 0 && d[2][0].differ > 0,
                    "Ring and hybrid: o differs in the last bits (online-softmax merge order)");
    int within = 1;
    for (int c = 1; c < 3; c++)
        for (int t = 0; t < 4; t++)
            within &= d[c][t].max_abs <= 1e-5;
    failed += claim(within, "Ring and hybrid: every tensor within 1e-5 of one rank (the tests' tolerance)");
    return failed ? USP_ERR_RUNTIME : USP_OK;
}
