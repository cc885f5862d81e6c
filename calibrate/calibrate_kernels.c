/* The kernel sweep of `usp calibrate` and its fit (see calibrate_kernels.h). */
#include "calibrate/calibrate_kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm/comm.h"
#include "core/ops/ops.h"

#define GEMM_FLOPS_MAX 2.2e9
#define GEMM_OPERAND_MAX ((int64_t)1 << 23) /* elements of A, B or C: the pool's buffers stay 32 MiB */
#define ATTENTION_FLOPS_MAX 6e8
#define REPS 3
/* Zeroed before every timed run so that the run starts with its operands out of cache, as most ops of a
 * step do (the activations a backward reads were written a layer's GEMMs ago). Twice the largest last-level
 * cache we plan for: 32 MB of L3 on the 2-core EPYC here, 50 MB of L2 on an H100 (nvbench and Triton's
 * do_bench flush the GPU's L2 the same way). */
#define FLUSH_BYTES ((size_t)128 << 20)

/* K_MAP is every element-wise function of USP_MAP_FNS (core/ops/ops.h): a new one is swept as it is. */
enum kind {
    K_GEMM, K_ATTENTION_FORWARD, K_ATTENTION_BACKWARD, K_COPY, K_COPY_2D, K_ACCUMULATE_2D, K_ZERO, K_ACCUMULATE, K_CONVERT, K_MAP,
    K_SUM_SQUARES, K_ADD_BIAS, K_BIAS_BACKWARD, K_LAYERNORM_FORWARD, K_LAYERNORM_BACKWARD, K_RMSNORM_FORWARD,
    K_RMSNORM_BACKWARD, K_ROPE_FORWARD, K_ROPE_BACKWARD, K_CROSS_ENTROPY, K_ADAMW, K_KINDS
};

/* The op name each kind reports (its cost name: core/ops/op_kinds.c); K_MAP's is its function's. */
static const char *const op_names[K_KINDS] = {
    "gemm", "attention_forward", "attention_backward", "copy", "copy", "accumulate", "zero", "accumulate", "convert", "map",
    "sum_squares", "add_bias", "bias_backward", "layernorm_forward", "layernorm_backward", "rmsnorm_forward",
    "rmsnorm_backward", "rope_forward", "rope_backward", "cross_entropy", "adamw_step",
};

/* One case: a kind and its shape. GEMM: a m, b n, c k, d the transposed operand (0 none, 1 b, 2 a); attention:
 * a tokens, b heads, c head dim, d causal; element-wise: a elements, c the row width (C, V, or H x D), and for
 * K_MAP b the function. GEMM and attention run again in bf16 where the backend stores it (other units on a
 * GPU); the other kinds in fp32. */
typedef struct kcase {
    enum kind kind;
    int64_t a, b, c, d;
    usp_dtype dtype;
} kcase;

/* The sweep's cases, the same on every rank; returns how many (at most max). */
static int make_cases(kcase *out, int max, int bf16)
{
    static const int64_t ms[] = {64, 512, 4096}, ns[] = {32, 256, 2048, 8192}, ks[] = {32, 256, 2048};
    static const int64_t ts[] = {128, 512, 2048}, hs[] = {2, 8}, ds[] = {16, 64};
    static const int64_t sizes[] = {256, 4096, 65536, 1 << 20, 1 << 22};
    int n = 0;
#define ADD(...) do { if (n < max) out[n++] = (kcase){__VA_ARGS__}; } while (0)
    for (usp_dtype dt = USP_F32; dt == USP_F32 || (bf16 && dt == USP_BF16); dt = dt == USP_F32 ? USP_BF16 : USP_U8) {
        for (int t = 0; t < 3; t++)
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 4; j++)
                    for (int l = 0; l < 3; l++)
                        if (2.0 * ms[i] * ns[j] * ks[l] <= GEMM_FLOPS_MAX && ms[i] * ns[j] <= GEMM_OPERAND_MAX &&
                            ms[i] * ks[l] <= GEMM_OPERAND_MAX && ns[j] * ks[l] <= GEMM_OPERAND_MAX)
                            ADD(K_GEMM, ms[i], ns[j], ks[l], t, dt);
        for (int i = 0; i < 3; i++)
            for (int h = 0; h < 2; h++)
                for (int d = 0; d < 2; d++)
                    for (int causal = 1; causal >= 0; causal--) {
                        double pairs = causal ? ts[i] * (ts[i] + 1) / 2.0 : (double)ts[i] * ts[i];
                        if (4.0 * hs[h] * ds[d] * pairs > ATTENTION_FLOPS_MAX)
                            continue;
                        ADD(K_ATTENTION_FORWARD, ts[i], hs[h], ds[d], causal, dt);
                        ADD(K_ATTENTION_BACKWARD, ts[i], hs[h], ds[d], causal, dt);
                    }
    }
    for (int k = K_COPY; k < K_KINDS; k++) {
        if (k == K_CONVERT && !bf16)
            continue;
        /* two row widths: the norms, RoPE, cross-entropy; the strided copies (Ulysses' layouts) at rows of 16
         * and 256 elements */
        int two_widths = (k >= K_LAYERNORM_FORWARD && k <= K_CROSS_ENTROPY) || k == K_COPY_2D || k == K_ACCUMULATE_2D;
        for (int fn = 0; fn < (k == K_MAP ? USP_MAP_FN_COUNT : 1); fn++)
            for (int w = 0; w < (two_widths ? 2 : 1); w++)
                for (int i = 0; i < 5; i++) {
                    int64_t width = k == K_CROSS_ENTROPY                  ? (w ? 8192 : 256)
                                    : k == K_COPY_2D || k == K_ACCUMULATE_2D ? (w ? 256 : 16)
                                    : w                                    ? 768
                                                                           : 64;
                    ADD((enum kind)k, sizes[i] < width ? width : sizes[i], fn, width, 0, USP_F32);
                }
    }
#undef ADD
    return n;
}

enum { A, B, C, D, E, F, G, H, I, BUFS };

/* The pool every case draws on: float buffers of `elems`, int32 ids and positions, and where the backend stores
 * bf16, bf16 buffers of `elems` (the same values rounded). */
typedef struct pool {
    float *f[BUFS];
    float *h[BUFS]; /* bf16 */
    int32_t *ids;       /* 0, 1, ..., 255, 0, ...: tokens and targets of any vocabulary of 256 or more */
    int32_t *positions; /* 0, 1, ..., 8191, 0, ...: RoPE's positions in sequences of 8K tokens */
    void *flush;        /* FLUSH_BYTES, zeroed before each timed run */
    int64_t elems;
} pool;

static usp_status pool_make(const usp_rank_ctx *ctx, int64_t elems, pool *p)
{
    *p = (pool){.elems = elems};
    size_t bytes = (size_t)elems * sizeof(float);
    float *host = NULL;
    USP_CHECK(usp_calloc((void **)&host, (size_t)elems, sizeof *host, "calibration data"));
    uint32_t x = 2024u + (uint32_t)ctx->rank; /* small values: no overflow, NaN or denormal in any kernel */
    for (int64_t i = 0; i < elems; i++) {
        x = x * 1664525u + 1013904223u;
        host[i] = (float)((x >> 8) & 0xffff) / 65536.0f - 0.5f;
    }
    usp_status s = USP_OK;
    for (int b = 0; b < BUFS && s == USP_OK; b++) {
        s = usp_buffer_alloc(ctx->backend, bytes, "calibrate", (void **)&p->f[b]);
        if (s == USP_OK)
            s = usp_buffer_copy(ctx->backend, p->f[b], host, bytes, USP_COPY_HOST_TO_DEVICE, ctx->stream);
    }
    if (s == USP_OK) /* the copies have read the host data (a stream-ordered backend's included) */
        s = usp_backend_synchronize(ctx->backend, ctx->stream);
    int32_t *ids = (int32_t *)host; /* the host copy becomes the ids */
    for (int64_t i = 0; s == USP_OK && i < elems; i++)
        ids[i] = (int32_t)(i % 256);
    if (s == USP_OK)
        s = usp_buffer_alloc(ctx->backend, bytes, "calibrate", (void **)&p->ids);
    if (s == USP_OK)
        s = usp_buffer_copy(ctx->backend, p->ids, ids, bytes, USP_COPY_HOST_TO_DEVICE, ctx->stream);
    if (s == USP_OK)
        s = usp_backend_synchronize(ctx->backend, ctx->stream);
    for (int64_t i = 0; s == USP_OK && i < elems; i++) /* a sequence of 8K tokens: angles up to 8K radians (sincos
                                                         * of a larger argument takes another, slower reduction) */
        ids[i] = (int32_t)(i % 8192);
    if (s == USP_OK)
        s = usp_buffer_alloc(ctx->backend, bytes, "calibrate", (void **)&p->positions);
    if (s == USP_OK)
        s = usp_buffer_copy(ctx->backend, p->positions, ids, bytes, USP_COPY_HOST_TO_DEVICE, ctx->stream);
    if (s == USP_OK)
        s = usp_buffer_alloc(ctx->backend, FLUSH_BYTES, "calibrate (cache flush)", &p->flush);
    for (int b = 0; b < BUFS && s == USP_OK && usp_backend_stores_bf16(ctx->backend); b++) {
        s = usp_buffer_alloc_as(ctx->backend, (size_t)elems, USP_BF16, "calibrate", (void **)&p->h[b]);
        if (s == USP_OK)
            s = usp_buffer_convert(ctx->backend, p->h[b], p->f[b], (size_t)elems, ctx->stream);
    }
    if (s == USP_OK)
        s = usp_backend_synchronize(ctx->backend, ctx->stream);
    free(host);
    return s;
}

static void pool_free(const usp_rank_ctx *ctx, pool *p)
{
    for (int b = 0; b < BUFS; b++)
        usp_buffer_free(ctx->backend, p->f[b]), usp_buffer_free(ctx->backend, p->h[b]);
    usp_buffer_free(ctx->backend, p->ids);
    usp_buffer_free(ctx->backend, p->positions);
    usp_buffer_free(ctx->backend, p->flush);
}

static usp_status run_gemm(const usp_rank_ctx *ctx, const pool *p, const kcase *c)
{
    int64_t m = c->a, n = c->b, k = c->c;
    float *const *f = c->dtype == USP_BF16 ? p->h : p->f;
    usp_gemm_desc g = {.trans_a = c->d == 2, .trans_b = c->d == 1, .m = m, .n = n, .k = k, .alpha = 1,
                       .a = f[A], .lda = c->d == 2 ? m : k, .b = f[B], .ldb = c->d == 1 ? k : n,
                       .c = f[C], .ldc = n, .batch = 1};
    return usp_gemm(ctx->backend, &g, ctx->stream);
}

static usp_status run_attention(const usp_rank_ctx *ctx, const pool *p, const kcase *c)
{
    usp_attention_shape sh = {.batch = 1, .n_q = c->a, .n_kv = c->a, .n_heads = c->b, .n_kv_heads = c->b,
                              .head_dim = c->c, .causal = (int)c->d, .scale = 1.0f / sqrtf((float)c->c)};
    float *const *f = c->dtype == USP_BF16 ? p->h : p->f;
    float *const lse = p->f[E]; /* fp32 in either dtype */
    if (c->kind == K_ATTENTION_FORWARD)
        return usp_flash_attention_forward(ctx->backend, &sh, f[A], f[B], f[C], f[D], lse, ctx->stream);
    return usp_flash_attention_backward(ctx->backend, &sh, f[A], f[B], f[C], f[D], lse, f[F], f[G], f[H], f[I], 0,
                                        ctx->stream);
}

/* The element-wise and norm kernels on n elements as rows of width w. */
static usp_status run_elementwise(const usp_rank_ctx *ctx, const pool *p, const kcase *c)
{
    usp_backend_t *be = ctx->backend;
    usp_stream_t *st = ctx->stream;
    float *const *f = p->f;
    int64_t n = c->a, w = c->c, rows = n / w;
    double sum;
    switch (c->kind) {
    case K_COPY: return usp_buffer_copy(be, f[B], f[A], (size_t)n * sizeof(float), USP_COPY_DEVICE_TO_DEVICE, st);
    case K_ZERO: return usp_buffer_zero(be, f[B], (size_t)n * sizeof(float), st);
    case K_ACCUMULATE: return usp_accumulate_2d(be, f[B], (size_t)n, f[A], (size_t)n, (size_t)n, 1, st);
    case K_COPY_2D: /* rows of w elements out of rows twice as wide: a head's slice of a row of heads */
        return usp_copy_2d(be, f[B], (size_t)w * sizeof(float), f[A], 2 * (size_t)w * sizeof(float),
                           (size_t)w * sizeof(float), (size_t)(rows / 2 ? rows / 2 : 1), st);
    case K_ACCUMULATE_2D:
        return usp_accumulate_2d(be, f[B], (size_t)w, f[A], 2 * (size_t)w, (size_t)w, (size_t)(rows / 2 ? rows / 2 : 1),
                                 st);
    case K_CONVERT: /* h[A] already holds f[A] rounded: the same values written again */
        return usp_buffer_convert(be, p->h[A], f[A], (size_t)n, st);
    case K_MAP: /* outputs B and D, inputs A, C and E, as many as the function has; scale's factor 1 */
        return usp_map(be, (usp_map_fn)c->b, (float *[]){f[B], f[D]}, (const float *[]){f[A], f[C], f[E]}, n, 1.0f, st);
    case K_SUM_SQUARES: return usp_sum_squares(be, &sum, f[A], n, st);
    case K_ADD_BIAS: return usp_add_bias(be, f[B], f[C], rows, w, st);
    case K_BIAS_BACKWARD: return usp_bias_backward(be, f[C], f[A], rows, w, st);
    case K_LAYERNORM_FORWARD: return usp_layernorm_forward(be, f[B], f[D], f[E], f[A], f[C], f[F], rows, w, 1e-5f, st);
    case K_LAYERNORM_BACKWARD:
        return usp_layernorm_backward(be, f[B], f[G], f[H], f[A], f[C], f[F], f[D], f[E], rows, w, st);
    case K_RMSNORM_FORWARD: return usp_rmsnorm_forward(be, f[B], f[E], f[A], f[C], rows, w, 1e-5f, st);
    case K_RMSNORM_BACKWARD: return usp_rmsnorm_backward(be, f[B], f[G], f[A], f[C], f[F], f[E], rows, w, st);
    case K_ROPE_FORWARD: /* H x D = w: heads of 16 (tiny's) at w 64, of 64 (GPT-2's) at 768 */
        return usp_rope_forward(be, f[B], p->positions, rows, w / (w > 64 ? 64 : 16), w > 64 ? 64 : 16, 1e4f, NULL, st);
    case K_ROPE_BACKWARD:
        return usp_rope_backward(be, f[B], p->positions, rows, w / (w > 64 ? 64 : 16), w > 64 ? 64 : 16, 1e4f, NULL, st);
    case K_CROSS_ENTROPY: return usp_cross_entropy(be, f[D], f[B], f[A], p->ids, rows, w, 1.0f, st);
    case K_ADAMW: return usp_adamw_step(be, f[B], f[A], f[G], f[H], n, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.0f, 1, st);
    default: return usp_error(USP_ERR_RUNTIME, "calibrate: kernel kind %d has no runner", (int)c->kind);
    }
}

static usp_status run_case(const usp_rank_ctx *ctx, const pool *p, const kcase *c)
{
    if (c->kind == K_GEMM)
        return run_gemm(ctx, p, c);
    if (c->kind == K_ATTENTION_FORWARD || c->kind == K_ATTENTION_BACKWARD)
        return run_attention(ctx, p, c);
    return run_elementwise(ctx, p, c);
}

/* Elements the pool's buffers need for case c. */
static int64_t case_elems(const kcase *c)
{
    if (c->kind == K_GEMM)
        return c->a * c->c > c->c * c->b ? (c->a * c->c > c->a * c->b ? c->a * c->c : c->a * c->b)
                                         : (c->c * c->b > c->a * c->b ? c->c * c->b : c->a * c->b);
    if (c->kind == K_ATTENTION_FORWARD || c->kind == K_ATTENTION_BACKWARD)
        return c->a * c->b * c->c;
    return c->a;
}

static int by_seconds(const void *a, const void *b)
{
    double x = ((const sim_kernel_point *)a)->seconds, y = ((const sim_kernel_point *)b)->seconds;
    return x < y ? -1 : x > y;
}

/* One timed run of case c, synchronised, with the work the op reported. */
static usp_status timed_run(const usp_rank_ctx *ctx, const pool *p, const kcase *c, sim_kernel_point *out)
{
    double f0 = usp_backend_flops(ctx->backend), b0, o0, b1, o1;
    usp_backend_work(ctx->backend, &b0, &o0);
    double t0 = ctx->clock(ctx->runtime);
    USP_CHECK(run_case(ctx, p, c));
    USP_CHECK(usp_backend_synchronize(ctx->backend, ctx->stream));
    double t = ctx->clock(ctx->runtime) - t0;
    usp_backend_work(ctx->backend, &b1, &o1);
    *out = (sim_kernel_point){usp_backend_flops(ctx->backend) - f0, b1 - b0, o1 - o0, t};
    return USP_OK;
}

/* Case c once: in the first pass a barrier and a warm-up; then the caches flushed, a barrier, a cold run, a barrier,
 * a hot run (the same case again at once, its operands in cache). */
static usp_status time_case(const usp_rank_ctx *ctx, const pool *p, const kcase *c, int pass, sim_kernel_point *cold,
                            sim_kernel_point *hot)
{
    if (pass == 0) {
        USP_CHECK(usp_comm_barrier(ctx->world, ctx->stream));
        USP_CHECK(run_case(ctx, p, c));
    }
    USP_CHECK(usp_buffer_zero(ctx->backend, p->flush, FLUSH_BYTES, ctx->stream));
    USP_CHECK(usp_backend_synchronize(ctx->backend, ctx->stream));
    /* every rank's flush done before any rank's run: another rank's 128 MiB would take its memory bandwidth (or,
     * with more ranks than cores, its core) */
    USP_CHECK(usp_comm_barrier(ctx->world, ctx->stream));
    USP_CHECK(timed_run(ctx, p, c, cold));
    USP_CHECK(usp_comm_barrier(ctx->world, ctx->stream));
    return timed_run(ctx, p, c, hot);
}

/* The median of a case's REPS runs (sorted in place). */
static sim_kernel_point median_run(sim_kernel_point *runs)
{
    qsort(runs, REPS, sizeof runs[0], by_seconds);
    return runs[REPS / 2];
}

usp_status calibrate_kernel_sweep(const usp_rank_ctx *ctx, calibrate_run *run, calibrate_record *rec)
{
    kcase *cases = NULL;
    sim_kernel_point(*runs)[2][REPS] = NULL; /* case, cold or hot, pass */
    USP_CHECK(usp_calloc((void **)&cases, CALIBRATE_POINTS_MAX, sizeof *cases, "the kernel cases"));
    int n = make_cases(cases, CALIBRATE_POINTS_MAX, usp_backend_stores_bf16(ctx->backend));
    usp_status s = usp_calloc((void **)&runs, (size_t)n, sizeof *runs, "the kernel runs");
    int64_t elems = 0;
    for (int i = 0; i < n; i++)
        elems = case_elems(&cases[i]) > elems ? case_elems(&cases[i]) : elems;
    pool p = {0};
    if (s == USP_OK)
        s = pool_make(ctx, elems, &p);
    /* REPS passes over the whole sweep rather than REPS runs of a case back to back: a moment of load on a shared
     * machine (another process, another tenant of the host) then falls on one run of the few cases timed in it,
     * which their medians drop, instead of on every run of one case (3 calibrations on the 2-core VM here: see
     * docs/cluster_model.md, "Calibrated kernels") */
    for (int pass = 0; pass < REPS && s == USP_OK; pass++)
        for (int i = 0; i < n && s == USP_OK; i++) {
            if (cases[i].kind == K_ADAMW && cases[i].a == 256) /* AdamW's v must be >= 0: start from zeros */
                s = usp_buffer_zero(ctx->backend, p.f[H], (size_t)elems * sizeof(float), ctx->stream);
            if (s == USP_OK)
                s = time_case(ctx, &p, &cases[i], pass, &runs[i][0][pass], &runs[i][1][pass]);
        }
    for (int i = 0; i < n && s == USP_OK; i++) {
        rec->points[i] = median_run(runs[i][0]), rec->hot_points[i] = median_run(runs[i][1]);
        if (ctx->rank == 0) {
            run->point_op[i] = cases[i].kind == K_MAP ? usp_map_fn_name((usp_map_fn)cases[i].b) : op_names[cases[i].kind];
            run->point_dtype[i] = cases[i].dtype;
        }
    }
    rec->n_points = s == USP_OK ? n : 0;
    if (p.elems > 0)
        pool_free(ctx, &p);
    free(runs);
    free(cases);
    return s;
}

/* Point i's time of the slowest rank, cold or hot. */
static double slowest_seconds(const calibrate_run *run, int world, int i, int hot)
{
    double t = 0;
    for (int r = 0; r < world; r++)
        t = fmax(t, (hot ? run->records[r].hot_points : run->records[r].points)[i].seconds);
    return t;
}

double calibrate_point_seconds(const calibrate_run *run, int world, int i)
{
    return slowest_seconds(run, world, i, 0);
}

/* Point i, cold or hot, with the slowest rank's time. */
static sim_kernel_point slowest_point(const calibrate_run *run, int world, int i, int hot)
{
    sim_kernel_point p = (hot ? run->records[0].hot_points : run->records[0].points)[i];
    p.seconds = slowest_seconds(run, world, i, hot);
    return p;
}

static int elementwise(const char *op) { return strcmp(op, "gemm") != 0 && strncmp(op, "attention_", 10) != 0; }

/* 1 when point i belongs to class f (its op, dtype and cache state): "*" takes every element-wise point (all
 * fp32); a hot class only the cases whose traffic is at most half the cache, so that the operands of the run
 * again at once were all in it (the model gives those cases a fraction held of 1: the fixed point). */
static int in_class(const calibrate_run *run, int i, const sim_kernel_fit *f, double cache_bytes)
{
    if (f->hot && !(run->records[0].hot_points[i].bytes <= cache_bytes / 2))
        return 0;
    if (strcmp(f->op, "*") == 0)
        return elementwise(run->point_op[i]);
    return strcmp(run->point_op[i], f->op) == 0 && run->point_dtype[i] == f->dtype;
}

/* Fits the points of class (op, dtype, hot); 0 points (a hot class no case fits the cache for): *found 0. */
static usp_status fit_class(const calibrate_run *run, int world, const sim_kernel_fit *class, double cache_bytes,
                            sim_kernel_fit *out, int *found)
{
    sim_kernel_point *points = NULL;
    USP_CHECK(usp_calloc((void **)&points, CALIBRATE_POINTS_MAX, sizeof *points, "the kernel points"));
    int n = 0;
    for (int i = 0; i < run->records[0].n_points; i++)
        if (in_class(run, i, class, cache_bytes))
            points[n++] = slowest_point(run, world, i, class->hot);
    usp_status s = (*found = n > 0) ? sim_kernel_fit_points(class->op, points, n, out) : USP_OK;
    out->dtype = class->dtype, out->hot = class->hot;
    free(points);
    return s;
}

/* x to the 6 significant digits the topology file keeps (JSON_REAL_PRECISION(6)). */
static double as_written(double x)
{
    char text[32];
    snprintf(text, sizeof text, "%.6g", x);
    return strtod(text, NULL);
}

/* The class as the file will hold it, so that what is derived from it here (the GPU's peak and efficiencies)
 * is what a reader of the file derives: the fixed point of calibrate --backend sim, to the digit. */
static void round_as_written(sim_kernel_fit *f)
{
    f->call_s = as_written(f->call_s / 1e-6) * 1e-6;
    f->per_output_s = as_written(f->per_output_s / 1e-9) * 1e-9;
    f->per_byte_s = as_written(f->per_byte_s / 1e-12) * 1e-12;
    for (int j = 0; j < f->n_table; j++)
        f->table_per_work_s[j] = as_written(f->table_per_work_s[j] / 1e-12) * 1e-12;
}

/* Fits class (op, dtype, hot) and adds it to the model, rounded as the file keeps it (when it has points). */
static usp_status add_class(const calibrate_run *run, int world, const char *op, usp_dtype dtype, int hot,
                            double cache_bytes, sim_kernel_model *out)
{
    sim_kernel_fit class = {.dtype = dtype, .hot = hot}, f;
    snprintf(class.op, sizeof class.op, "%s", op);
    int found;
    USP_CHECK(fit_class(run, world, &class, cache_bytes, &f, &found));
    if (!found)
        return USP_OK;
    round_as_written(&f);
    return sim_kernel_model_add(out, &f);
}

usp_status calibrate_fit_kernels(const calibrate_run *run, int world, double cache_bytes, sim_kernel_model *out)
{
    *out = (sim_kernel_model){0};
    for (int hot = 0; hot <= (cache_bytes > 0); hot++) {
        for (int i = 0; i < run->records[0].n_points; i++) {
            const char *op = run->point_op[i];
            const sim_kernel_fit *known = sim_kernel_find_in(out, op, run->point_dtype[i], hot);
            if (known && strcmp(known->op, op) == 0 && known->dtype == run->point_dtype[i])
                continue;
            USP_CHECK(add_class(run, world, op, run->point_dtype[i], hot, cache_bytes, out));
        }
        if (out->n > 0) /* "*": the ops not measured one by one (embedding, attention_merge, ...) */
            USP_CHECK(add_class(run, world, "*", USP_F32, hot, cache_bytes, out));
    }
    return USP_OK;
}

/* The largest relative error of class f over its points, and how many there are. */
static double worst_error(const calibrate_run *run, int world, const sim_kernel_fit *f, double cache_bytes,
                          int *cases)
{
    double worst = 0;
    *cases = 0;
    for (int i = 0; i < run->records[0].n_points; i++) {
        if (!in_class(run, i, f, cache_bytes))
            continue;
        sim_kernel_point p = slowest_point(run, world, i, f->hot);
        double err = sim_kernel_fit_seconds(f, p.flops, p.bytes, p.outputs) / p.seconds - 1;
        worst = fabs(err) > fabs(worst) ? err : worst, ++*cases;
    }
    return worst;
}

void calibrate_print_kernels(const calibrate_run *run, int world, const sim_kernel_model *m, double cache_bytes)
{
    printf("\nkernel classes, %d cases (the slowest rank's median of %d): t = call + outputs x ns/output + work / "
           "rate(bytes),\nwork the flops (rate in GFLOP/s) of gemm and attention (+ bytes / GB/s), else the bytes (GB/s); the "
           "rate at up to 4 sizes\nfrom the smallest measured to the largest, interpolated in log(bytes) (-: no cost);\n"
           "cold: each case after a flush; hot: the case again at once, from its cases of at most half the cache\n"
           "(%.3g MiB%s):\n", run->records[0].n_points, REPS, cache_bytes / (1 << 20),
           cache_bytes > 0 ? "" : ": not known, no hot class");
    printf("  %-24s %5s %8s %9s %8s %17s %8s %8s %8s %8s %9s\n", "op", "cases", "call(us)", "ns/output", "GB/s",
           "sizes(B)", "rate 1", "rate 2", "rate 3", "rate 4", "worst err");
    for (int k = 0; k < m->n; k++) {
        const sim_kernel_fit *f = &m->fits[k];
        int cases;
        double worst = worst_error(run, world, f, cache_bytes, &cases);
        char sizes[32];
        snprintf(sizes, sizeof sizes, "%.2g..%.2g", f->table_bytes[0], f->table_bytes[f->n_table - 1]);
        char name[SIM_KERNEL_OP_MAX + 8];
        snprintf(name, sizeof name, "%s%s%s", f->op, f->dtype == USP_BF16 ? " bf16" : "", f->hot ? " hot" : "");
        printf("  %-24s %5d %8.2f %9.3g %8.3g %17s", name, cases, f->call_s * 1e6, f->per_output_s * 1e9,
               f->per_byte_s > 0 ? 1e-9 / f->per_byte_s : 0.0, sizes); /* GB/s: a flop-priced class's traffic */
        for (int j = 0; j < SIM_KERNEL_TABLE; j++)
            if (j < f->n_table && f->table_per_work_s[j] > 0)
                printf(" %8.3g", 1e-9 / f->table_per_work_s[j]);
            else
                printf(" %8s", "-");
        printf(" %+8.0f%%\n", 100 * worst);
    }
}

json_t *calibrate_kernel_cases_json(const calibrate_run *run, int world, const sim_kernel_model *m)
{
    json_t *a = json_array();
    for (int i = 0; a && i < run->records[0].n_points; i++) {
        sim_kernel_point p = slowest_point(run, world, i, 0), h = slowest_point(run, world, i, 1);
        const sim_kernel_fit *f = sim_kernel_find(m, run->point_op[i], run->point_dtype[i]);
        const sim_kernel_fit *g = sim_kernel_find_in(m, run->point_op[i], run->point_dtype[i], 1);
        double model = f ? sim_kernel_fit_seconds(f, p.flops, p.bytes, p.outputs) : 0;
        double hot_model = g ? sim_kernel_fit_seconds(g, h.flops, h.bytes, h.outputs) : 0;
        if (json_array_append_new(a, json_pack("{s:s, s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "op",
                                               run->point_op[i], "dtype",
                                               run->point_dtype[i] == USP_BF16 ? "bf16" : "fp32", "flops", p.flops,
                                               "bytes", p.bytes, "outputs", p.outputs, "time_us", p.seconds * 1e6,
                                               "model_us", model * 1e6, "hot_time_us", h.seconds * 1e6,
                                               "hot_model_us", hot_model * 1e6)) != 0)
            json_decref(a), a = NULL;
    }
    return a;
}
