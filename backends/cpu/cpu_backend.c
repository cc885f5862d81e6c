/* The CPU backend: "device" memory is host memory, every op completes before
 * it returns, GEMM goes to CBLAS. Buffers are 64-byte aligned for the vector
 * units. */
#include "backends/cpu/cpu_backend.h"

#include <cblas.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <omp.h>
#include <string.h>
#include <unistd.h>

#include "backends/cpu/cpu_attention.h"
#include "backends/cpu/cpu_block_cache.h"
#include "backends/cpu/cpu_layers.h"
#include "backends/cpu/cpu_widen.h"
#include "core/ops/backend_impl.h"

#include <math.h>

#define HEADER 64 /* before each buffer: its size, for the shared budget (64 keeps the alignment) */

static atomic_size_t budget_used;
static size_t budget_limit; /* 0: not read yet */
static const char *budget_source = "the memory this machine had available";

/* Reads USP_CPU_MEMORY_LIMIT strictly (cpu_backend.h): digits, then at most one
 * of K, M, G, T (powers of 1024). strtoull alone read "1e9" as 1, "10G" as 10
 * and "-1" as SIZE_MAX, each a budget nobody asked for. 0 and overflow are
 * refused too. Returns 0 for a value it refuses. */
static unsigned long long parse_memory_limit(const char *text)
{
    unsigned long long value = 0;
    const char *p = text;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (value > (ULLONG_MAX - (unsigned long long)(*p - '0')) / 10)
            return 0;
        value = value * 10 + (unsigned long long)(*p - '0');
    }
    if (p == text)
        return 0;
    static const char suffixes[] = "KMGT";
    const char *suffix = *p ? strchr(suffixes, *p) : NULL;
    if (*p && (!suffix || p[1]))
        return 0;
    for (int shift = suffix ? (int)(suffix - suffixes) + 1 : 0; shift > 0; shift--) {
        if (value > ULLONG_MAX / 1024)
            return 0;
        value *= 1024;
    }
    return value;
}

/* The process's memory budget (see cpu_backend.h), read once; 0 with an error
 * set when USP_CPU_MEMORY_LIMIT is not a size. */
static size_t memory_budget(void)
{
    if (budget_limit)
        return budget_limit;
    const char *env = getenv("USP_CPU_MEMORY_LIMIT");
    unsigned long long limit = 0;
    if (env) {
        limit = parse_memory_limit(env);
        if (!limit || limit > SIZE_MAX) {
            usp_error(USP_ERR_CONFIG, "USP_CPU_MEMORY_LIMIT=%s: not a memory size; expected a whole number of "
                      "bytes above 0, optionally with K, M, G or T (powers of 1024), e.g. USP_CPU_MEMORY_LIMIT=8G, "
                      "or unset it to use the memory available", env);
            return 0;
        }
        budget_source = "USP_CPU_MEMORY_LIMIT";
    }
    FILE *f = limit ? NULL : fopen("/proc/meminfo", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &limit) == 1) {
            limit *= 1024;
            break;
        }
    if (f)
        fclose(f);
    if (!limit) /* no /proc: free pages */
        limit = (unsigned long long)sysconf(_SC_AVPHYS_PAGES) * (unsigned long long)sysconf(_SC_PAGESIZE);
    budget_limit = limit ? (size_t)limit : SIZE_MAX;
    return budget_limit;
}

static usp_status cpu_alloc(void *ctx, size_t bytes, void **out)
{
    (void)ctx;
    *out = NULL;
    const size_t rounded = (bytes + 63) / 64 * 64 + HEADER, limit = memory_budget();
    if (!limit) /* USP_CPU_MEMORY_LIMIT is not a size: its message is set */
        return USP_ERR_CONFIG;
    size_t used = atomic_fetch_add(&budget_used, rounded) + rounded;
    if (used > limit) {
        atomic_fetch_sub(&budget_used, rounded);
        return usp_error(USP_ERR_RUNTIME, "out of memory: %zu more bytes would take the simulated ranks' buffers "
                         "to %.1f MB, more than the %.1f MB of %s; a model this size is planned on shapes only "
                         "(usp plan, or usp train --meta), or run on fewer ranks",
                         bytes, (double)used / 1e6, (double)limit / 1e6, budget_source);
    }
    char *block = cpu_block_cache_take(rounded);
    if (!block && used + cpu_block_cache_bytes() > limit) /* the kept blocks count against the budget too */
        cpu_block_cache_release();
    if (!block)
        block = aligned_alloc(64, rounded);
    if (!block) { /* the system is out of memory: give back what the cache keeps, and try once more */
        cpu_block_cache_release();
        block = aligned_alloc(64, rounded);
    }
    if (!block) {
        atomic_fetch_sub(&budget_used, rounded);
        return usp_error(USP_ERR_RUNTIME, "out of memory: the cpu backend could not allocate %zu bytes", bytes);
    }
    memcpy(block, &rounded, sizeof rounded);
    *out = block + HEADER;
    return USP_OK;
}

static void cpu_free(void *ctx, void *ptr)
{
    (void)ctx;
    if (!ptr)
        return;
    char *block = (char *)ptr - HEADER;
    size_t rounded;
    memcpy(&rounded, block, sizeof rounded);
    atomic_fetch_sub(&budget_used, rounded);
    cpu_block_cache_keep(block, rounded, memory_budget() / 4); /* at most a quarter of the budget kept */
}

static usp_status cpu_copy(void *ctx, void *dst, const void *src, size_t bytes, usp_copy_kind kind,
                           usp_stream_t *stream)
{
    (void)ctx, (void)kind, (void)stream;
    memmove(dst, src, bytes);
    return USP_OK;
}

static usp_status cpu_zero(void *ctx, void *ptr, size_t bytes, usp_stream_t *stream)
{
    (void)ctx, (void)stream;
    memset(ptr, 0, bytes);
    return USP_OK;
}

/* OpenBLAS splits a product among its threads in a way that depends on how
 * many there are, and so do the bits of the result (measured: C = A^T B of
 * 16x128 by 128x384 differs between 1 and 2 threads), so a run on 2 cores
 * would not repeat on 4, nor an MPI process of 1 thread the simulator's rank
 * of 2. C is cut into tiles of a fixed size instead, each one single-threaded
 * sgemm call in a parallel loop of ours (OpenBLAS's OpenMP build runs one
 * thread inside a parallel region): every element is summed over k the same
 * way whatever the thread count. Products under OpenBLAS's own threading
 * threshold (m n k < 65536 x 4) go straight to it. The tiles repack their
 * panels: (GEMM_TILE_M + GEMM_TILE_N) k floats per 2 GEMM_TILE_M GEMM_TILE_N k
 * flops, under 1%. */
#define GEMM_TILE_M 128
#define GEMM_TILE_N 512
#define GEMM_SINGLE_THREAD_FLOPS 262144.0
/* m n k below this: the tiles run on one thread. 2 m n k = 16 MFLOP is a few hundred us on one core
 * here; sharing it saves less than a team's start and join costs under OMP_WAIT_POLICY passive, which
 * usp runs with (bench/train --threads: the tiny model's meshes as fast at 2 threads as at 1). */
#define GEMM_TEAM_MIN ((double)(1 << 23))

/* Rows [r0, r0 + rows) and columns [c0, c0 + cols) of C for matrix i. */
static void gemm_tile(const usp_gemm_shape *g, const float *a, const float *b, float *c, int64_t i, int64_t r0,
                      int64_t c0, int64_t rows, int64_t cols)
{
    a += i * g->stride_a + (g->trans_a ? r0 : r0 * g->lda);
    b += i * g->stride_b + (g->trans_b ? c0 * g->ldb : c0);
    cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans, g->trans_b ? CblasTrans : CblasNoTrans,
                (blasint)rows, (blasint)cols, (blasint)g->k, g->alpha, a, (blasint)g->lda, b, (blasint)g->ldb,
                g->beta, c + i * g->stride_c + r0 * g->ldc + c0, (blasint)g->ldc);
}

/* fp32 only (cpu_widen.c gives it bf16 operands as fp32 temporaries). */
static usp_status cpu_gemm(const usp_op *op)
{
    const usp_gemm_shape *g = &op->p.gemm;
    const float *a = op->operand[0].data, *b = op->operand[1].data;
    float *c = op->operand[2].data;
    if ((double)g->m * (double)g->n * (double)g->k < GEMM_SINGLE_THREAD_FLOPS) {
        for (int64_t i = 0; i < g->batch; i++)
            gemm_tile(g, a, b, c, i, 0, 0, g->m, g->n);
        return USP_OK;
    }
    const int64_t tm = (g->m + GEMM_TILE_M - 1) / GEMM_TILE_M, tn = (g->n + GEMM_TILE_N - 1) / GEMM_TILE_N;
    const int64_t tiles = g->batch * tm * tn;
    if (tiles == 1 || (double)g->m * (double)g->n * (double)g->k < GEMM_TEAM_MIN) {
        /* One tile, or too little work to share: a team would cost more than it splits. OpenBLAS's
         * OpenMP build takes its thread count from omp_get_max_threads(), so with 1 each tile is the
         * single-threaded call a team's thread would have made: the same bits, without the team. */
        const int threads = omp_get_max_threads();
        omp_set_num_threads(1);
        for (int64_t t = 0; t < tiles; t++) {
            int64_t i = t / (tm * tn), r0 = t / tn % tm * GEMM_TILE_M, c0 = t % tn * GEMM_TILE_N;
            gemm_tile(g, a, b, c, i, r0, c0, g->m - r0 < GEMM_TILE_M ? g->m - r0 : GEMM_TILE_M,
                      g->n - c0 < GEMM_TILE_N ? g->n - c0 : GEMM_TILE_N);
        }
        omp_set_num_threads(threads);
        return USP_OK;
    }
    #pragma omp parallel for schedule(dynamic)
    for (int64_t t = 0; t < tiles; t++) {
        int64_t i = t / (tm * tn), r0 = t / tn % tm * GEMM_TILE_M, c0 = t % tn * GEMM_TILE_N;
        gemm_tile(g, a, b, c, i, r0, c0, g->m - r0 < GEMM_TILE_M ? g->m - r0 : GEMM_TILE_M,
                  g->n - c0 < GEMM_TILE_N ? g->n - c0 : GEMM_TILE_N);
    }
    return USP_OK;
}

static usp_status cpu_copy_2d(const usp_op *op)
{
    char *dst = op->operand[1].data;
    const char *src = op->operand[0].data;
    const size_t dst_stride = op->p.strided.dst_stride, src_stride = op->p.strided.src_stride;
    const size_t row_bytes = op->p.strided.row, rows = op->p.strided.rows;
    #pragma omp parallel for schedule(static) if (row_bytes * rows > ((size_t)1 << 20))
    for (size_t r = 0; r < rows; r++)
        memcpy(dst + r * dst_stride, src + r * src_stride, row_bytes);
    return USP_OK;
}

static usp_status cpu_accumulate_2d(const usp_op *op)
{
    float *dst = op->operand[0].data;
    const float *src = op->operand[1].data;
    const size_t dst_stride = op->p.strided.dst_stride, src_stride = op->p.strided.src_stride;
    const size_t row_elems = op->p.strided.row, rows = op->p.strided.rows;
    #pragma omp parallel for schedule(static) if (row_elems * rows > ((size_t)1 << 18))
    for (size_t r = 0; r < rows; r++)
        for (size_t i = 0; i < row_elems; i++)
            dst[r * dst_stride + i] += src[r * src_stride + i];
    return USP_OK;
}

static cpu_attention_shape kernel_shape(const usp_attention_shape *s)
{
    return (cpu_attention_shape){
        .batch = s->batch, .n_q = s->n_q, .n_kv = s->n_kv, .n_heads = s->n_heads, .n_kv_heads = s->n_kv_heads,
        .head_dim = s->head_dim, .q_offset = s->q_offset, .kv_offset = s->kv_offset, .causal = s->causal,
        .scale = s->scale, .window = s->window, .seq_len = s->seq_len, .docs = s->docs,
    };
}

/* Operands: q, o, lse, k, v, docs, workspace (core/ops/op_kinds.c). */
static usp_status cpu_attention_forward(const usp_op *op)
{
    const usp_view *x = op->operand;
    cpu_attention_shape ks = kernel_shape(&op->p.attention.shape);
    cpu_flash_attention_forward(&ks, x[0].data, x[3].data, x[4].data, x[1].data, x[2].data, x[6].data);
    return USP_OK;
}

/* Operands: q, o, d_o, dq, lse, k, v, dk, dv, docs, workspace. */
static usp_status cpu_attention_backward(const usp_op *op)
{
    const usp_view *x = op->operand;
    cpu_attention_shape ks = kernel_shape(&op->p.attention.shape);
    cpu_flash_attention_backward(&ks, x[0].data, x[5].data, x[6].data, x[1].data, x[4].data, x[2].data, x[3].data,
                                 x[7].data, x[8].data, op->p.attention.accumulate, x[10].data);
    return USP_OK;
}

/* lse' = lse + log(1 + e^(lse_part - lse)) computed around the larger of the
 * two, so that -inf (a row that has seen no key yet) needs no special case
 * beyond "both -inf". Operands: o, o_part, lse, lse_part. */
static usp_status cpu_attention_merge(const usp_op *op)
{
    float *o = op->operand[0].data, *lse = op->operand[2].data;
    const float *o_part = op->operand[1].data, *lse_part = op->operand[3].data;
    const int64_t n = op->p.merge.n, heads = op->p.merge.heads, head_dim = op->p.merge.head_dim;
    #pragma omp parallel for schedule(static) if (n * heads * head_dim > (1 << 16))
    for (int64_t i = 0; i < n; i++)
        for (int64_t h = 0; h < heads; h++) {
            float a = lse[h * n + i], b = lse_part[h * n + i];
            if (b == -INFINITY)
                continue;
            float m = a > b ? a : b;
            float wa = a == -INFINITY ? 0.0f : expf(a - m), wb = expf(b - m), sum = wa + wb;
            float *oi = o + (i * heads + h) * head_dim;
            const float *pi = o_part + (i * heads + h) * head_dim;
            for (int64_t d = 0; d < head_dim; d++)
                oi[d] = (wa * oi[d] + wb * pi[d]) / sum;
            lse[h * n + i] = m + logf(sum);
        }
    return USP_OK;
}

/* The fp32 kernel of each kind (conversion is cpu_widen.c's: its operands are bf16 by design). */
typedef usp_status (*cpu_kernel)(const usp_op *op);
static const cpu_kernel kernels[USP_OP_KIND_COUNT] = {
    [USP_OP_GEMM] = cpu_gemm,
    [USP_OP_COPY_2D] = cpu_copy_2d,
    [USP_OP_ACCUMULATE_2D] = cpu_accumulate_2d,
    [USP_OP_ATTENTION_FORWARD] = cpu_attention_forward,
    [USP_OP_ATTENTION_BACKWARD] = cpu_attention_backward,
    [USP_OP_ATTENTION_MERGE] = cpu_attention_merge,
    [USP_OP_EMBEDDING_FORWARD] = cpu_embedding_forward,
    [USP_OP_EMBEDDING_BACKWARD] = cpu_embedding_backward,
    [USP_OP_LAYERNORM_FORWARD] = cpu_layernorm_forward,
    [USP_OP_LAYERNORM_BACKWARD] = cpu_layernorm_backward,
    [USP_OP_RMSNORM_FORWARD] = cpu_rmsnorm_forward,
    [USP_OP_RMSNORM_BACKWARD] = cpu_rmsnorm_backward,
    [USP_OP_ROPE_FORWARD] = cpu_rope_forward,
    [USP_OP_ROPE_BACKWARD] = cpu_rope_backward,
    [USP_OP_CROSS_ENTROPY] = cpu_cross_entropy,
    [USP_OP_ADAMW_STEP] = cpu_adamw_step,
    [USP_OP_SUM_SQUARES] = cpu_sum_squares,
    [USP_OP_ADD_BIAS] = cpu_add_bias,
    [USP_OP_BIAS_BACKWARD] = cpu_bias_backward,
    [USP_OP_MAP] = cpu_map,
};

static usp_status run_fp32(const usp_op *op) { return kernels[op->kind](op); }

static int cpu_supports(void *ctx, const usp_op *op)
{
    (void)ctx;
    if (op->kind == USP_OP_CONVERT)
        return 1;
    return (unsigned)op->kind < USP_OP_KIND_COUNT && kernels[op->kind] &&
           (op->kind != USP_OP_MAP || cpu_map_supports(op->p.map.fn));
}

/* Both attention passes use a row of scratch per thread. */
static size_t cpu_workspace_bytes(void *ctx, const usp_op *op)
{
    (void)ctx;
    if (op->kind != USP_OP_ATTENTION_FORWARD && op->kind != USP_OP_ATTENTION_BACKWARD)
        return 0;
    cpu_attention_shape k = kernel_shape(&op->p.attention.shape);
    return cpu_attention_workspace_bytes(&k);
}

static usp_status cpu_run(void *ctx, const usp_op *op)
{
    (void)ctx;
    return op->kind == USP_OP_CONVERT ? cpu_convert(op) : cpu_run_widened(op, run_fp32);
}

/* A core's L2 (glibc reads it from the CPU): the cache one rank's ops have to themselves. */
static size_t cpu_cache_bytes(void *ctx)
{
    (void)ctx;
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return l2 > 0 ? (size_t)l2 : 0;
}

static const usp_backend_i cpu_iface = {
    .api_version = USP_BACKEND_API_VERSION,
    .name = "cpu",
    .has_numerics = 1,
    .stores_bf16 = 1, /* widened for the fp32 kernels (cpu_widen.h) */
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .synchronize = NULL,
    .cache_bytes = cpu_cache_bytes,
    .supports = cpu_supports,
    .workspace_bytes = cpu_workspace_bytes,
    .run = cpu_run,
    .destroy = NULL,
};

const usp_backend_i *usp_backend_cpu_interface(void) { return &cpu_iface; }

usp_status usp_backend_cpu_create(usp_backend_t **out)
{
    return usp_backend_create(usp_backend_cpu_interface(), NULL, out);
}
