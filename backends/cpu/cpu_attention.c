/* Flash attention on the CPU (FlashAttention-2 schedule): forward and backward.
 *
 * Why tiles: the score matrix of one head at N = 1M tokens would be 4 TB. A task
 * owns a tile of queries (or keys) and walks the tiles of the other side; each
 * step is two tile products that stay in L2 (S = Q K^T, then O += P V) with the
 * online softmax between them. Only the log-sum-exp of each query row survives
 * to the backward pass, which recomputes P from q, k and lse.
 *
 * Why our own tile products, not sgemm: an sgemm call per tile packs both of
 * its operands again and pays a call's overhead, which at head_dim 16..64 is a
 * large share of a tile's work (the issue measured 0.21 of sgemm's rate for the
 * tiny model, head_dim 16, on 2 AVX2 cores). cpu_attention_tiles.h holds
 * register-blocked micro-kernels that read the score tiles through strides and
 * K, V (Q, dO) from contiguous copies of the tile; Q^T, dO^T (K^T, V^T) are
 * packed once per task. cpu_attention_tasks.h holds the tasks. Both are
 * compiled per instruction set (cpu_attention_isa.c); this file picks one at
 * run time and hands out the tasks. Measured on a shared 2-core Zen 4
 * (bench/attention, N = 4096, same run): the AVX-512 path runs head_dim 32..128
 * 1.2-1.7x faster than the sgemm tiles did; the AVX2 path is within the noise
 * of them (exp2 is 8-wide there and costs as much as the products at head_dim 16).
 *
 * Choosing the instruction set: the widest the CPU has (AVX-512, AVX2 + FMA,
 * else the generic 4-wide build), or the environment variable USP_CPU_ISA =
 * avx512 | avx2 | sse2 | generic, read once, to force a narrower one (e.g. to
 * measure an AVX2 machine's path on an AVX-512 one). A request the CPU cannot
 * run falls back to the best it can. cpu_attention_isa_name() says which.
 *
 * Parallelism and determinism: OpenMP over independent tasks, each owning its
 * output tile outright, so no float is ever added to by two threads and the
 * order of every sum is fixed by the shape alone: the bits do not depend on the
 * thread count or the schedule. The backward pass therefore runs two passes:
 * dQ parallel over (batch, head, query tile), and dK/dV parallel over (batch,
 * kv head, kv tile) looping over the query heads of its GQA group. This costs
 * recomputing S and dP in both passes (7 tile products instead of the 5 of a
 * fused backward, i.e. 1.4x the matmul work), but the alternatives are worse:
 * atomics on floats are not deterministic, and per-thread dQ copies reduced at
 * the end cost O(N x threads) memory and depend on the thread count.
 *
 * Memory: per thread two score tiles, two packed D x 128 operands and four lane
 * vectors (cpu_attn_slot_floats: 130 KiB at D = 64, 386 KiB at D = 256),
 * whatever N; outputs are written in place (o is the running accumulator). */
#include "backends/cpu/cpu_attention.h"
#include "backends/cpu/cpu_attention_impl.h"

#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* Instruction set                                                            */

static const cpu_attn_isa *isa_chosen;

static const cpu_attn_isa *isa_select(void)
{
    const cpu_attn_isa *best = &cpu_attn_isa_generic;
#if defined(CPU_ATTN_HAVE_X86)
    __builtin_cpu_init();
    const int has512 = __builtin_cpu_supports("avx512f"), has2 = __builtin_cpu_supports("avx2") &&
                                                                 __builtin_cpu_supports("fma");
    best = has512 ? &cpu_attn_isa_avx512 : has2 ? &cpu_attn_isa_avx2 : &cpu_attn_isa_generic;
    const char *want = getenv("USP_CPU_ISA");
    if (want && !strcmp(want, "avx2") && has2) return &cpu_attn_isa_avx2;
    if (want && (!strcmp(want, "sse2") || !strcmp(want, "generic"))) return &cpu_attn_isa_generic;
#endif
    return best;
}

/* The choice is made once, before any parallel region uses it (the public calls
 * below read it on the calling thread), so every task of a run uses one path. */
static const cpu_attn_isa *isa_get(void)
{
    const cpu_attn_isa *p = __atomic_load_n(&isa_chosen, __ATOMIC_ACQUIRE);
    if (!p) {
        p = isa_select();
        __atomic_store_n(&isa_chosen, p, __ATOMIC_RELEASE);
    }
    return p;
}

const char *cpu_attention_isa_name(int *vector_bits)
{
    const cpu_attn_isa *p = isa_get();
    if (vector_bits) *vector_bits = p->vector_bits;
    return p->name;
}

/* ------------------------------------------------------------------------- */
/* Workspace                                                                  */

/* Thread t's slot of the caller's workspace, aligned to 64 bytes. */
static float *workspace_slot(void *workspace, int t, int64_t D)
{
    uintptr_t p = ((uintptr_t)workspace + 63) & ~(uintptr_t)63;
    return (float *)p + (size_t)t * cpu_attn_slot_floats(D);
}

size_t cpu_attention_workspace_bytes(const cpu_attention_shape *s)
{
    /* The tiles do not grow with N: outputs are accumulated in place. */
    return (size_t)omp_get_max_threads() * cpu_attn_slot_floats(s->head_dim) * sizeof(float) + 64;
}

/* ------------------------------------------------------------------------- */
/* Forward and backward: hand out the tasks                                   */

/* A call too small to share: below this many multiply-adds of Q K^T (batch x heads x n_q x n_kv x
 * head_dim, masking ignored) starting and joining the team costs more than the work it would split
 * (a ring block, or all of a short sequence; bench/train --threads, under OMP_WAIT_POLICY passive as
 * usp runs). The order of every sum is the task's own, so one thread gives the same bits as many. */
#define ATTENTION_PARALLEL_MIN ((double)(1 << 22))

static int worth_threads(const cpu_attention_shape *s)
{
    return (double)s->batch * (double)s->n_heads * (double)s->n_q * (double)s->n_kv * (double)s->head_dim >=
           ATTENTION_PARALLEL_MIN;
}

void cpu_flash_attention_forward(const cpu_attention_shape *s, const float *q, const float *k, const float *v,
                                 float *o, float *lse, void *workspace)
{
    const cpu_attn_isa *isa = isa_get();
    const int64_t n_qt = (s->n_q + BQ - 1) / BQ, n_bh = s->batch * s->n_heads;
    const int64_t n_tasks = n_qt * n_bh;
    const int nt = omp_get_max_threads(); /* the count cpu_attention_workspace_bytes sized for */
#pragma omp parallel num_threads(nt) if (worth_threads(s))
    {
        float *ws = workspace_slot(workspace, omp_get_thread_num(), s->head_dim);
        /* Causal: the last query tiles see the most keys; hand them out first. */
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < n_tasks; t++) {
            int64_t qt = n_qt - 1 - t / n_bh, bh = t % n_bh;
            isa->forward_task(s, q, k, v, o, lse, bh / s->n_heads, bh % s->n_heads, qt * BQ, ws);
        }
    }
}

void cpu_flash_attention_backward(const cpu_attention_shape *s, const float *q, const float *k, const float *v,
                                  const float *o, const float *lse, const float *d_o, float *dq, float *dk,
                                  float *dv, int accumulate, void *workspace)
{
    const cpu_attn_isa *isa = isa_get();
    const int64_t n_qt = (s->n_q + BQ - 1) / BQ, n_bh = s->batch * s->n_heads;
    const int64_t n_kt = (s->n_kv + BK - 1) / BK, n_bg = s->batch * s->n_kv_heads;
    const int nt = omp_get_max_threads(); /* the count cpu_attention_workspace_bytes sized for */
#pragma omp parallel num_threads(nt) if (worth_threads(s))
    {
        float *ws = workspace_slot(workspace, omp_get_thread_num(), s->head_dim);
        /* Pass 1, dQ: the last query tiles see the most keys; hand them out first. */
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < n_qt * n_bh; t++) {
            int64_t qt = n_qt - 1 - t / n_bh, bh = t % n_bh;
            isa->dq_task(s, q, k, v, o, lse, d_o, dq, accumulate, bh / s->n_heads, bh % s->n_heads, qt * BQ, ws);
        }
        /* Pass 2, dK and dV: the first key tiles are seen by the most queries. */
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < n_kt * n_bg; t++) {
            int64_t kt = t / n_bg, bg = t % n_bg;
            isa->dkdv_task(s, q, k, v, o, lse, d_o, dk, dv, accumulate, bg / s->n_kv_heads, bg % s->n_kv_heads,
                           kt * BK, ws);
        }
    }
}
