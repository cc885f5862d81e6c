/* Shared by cpu_attention.c (the public calls, the parallel loops, the choice of
 * instruction set) and cpu_attention_isa.c (the per-task kernels, compiled once
 * per instruction set): tile sizes, the workspace layout, masks and row pointers.
 * Internal to backends/cpu/. */
#ifndef USP_CPU_ATTENTION_IMPL_H
#define USP_CPU_ATTENTION_IMPL_H

#include "backends/cpu/cpu_attention.h"
#include "core/ops/mask.h"

#include <stddef.h>
#include <stdint.h>

/* Tile sizes: BQ queries per task (forward, dQ pass) and BK keys per task (dK/dV
 * pass); the other side walks in steps of BK (resp. BQ). 128 x 128 keeps the two
 * score tiles (64 KiB each) and the four operands in L2 (the two cores of the
 * AVX2 machines may share one) while a micro-kernel's B panel stays in L1.
 * 64, 128 and 256 on either side measured within the noise of a shared 2-core
 * Zen 4 (bench/attention, head_dim 16 and 128). Override with -DCPU_ATTN_BQ=...
 * to retune (the tests pass for any sizes, e.g. 32 x 16 and 40 x 24). */
#ifndef CPU_ATTN_BQ
#define CPU_ATTN_BQ 128
#endif
#ifndef CPU_ATTN_BK
#define CPU_ATTN_BK 128
#endif
#define BQ ((int64_t)CPU_ATTN_BQ)
#define BK ((int64_t)CPU_ATTN_BK)

/* Vector lanes are padded to the widest vector (16 floats, AVX-512) whatever
 * path runs, so the workspace does not depend on the path chosen. */
#define CPU_ATTN_VMAX 16
#define PAD16(n) ((((n) + CPU_ATTN_VMAX - 1) / CPU_ATTN_VMAX) * CPU_ATTN_VMAX)
#define BQP PAD16(BQ) /* row stride of tiles whose lanes are queries */
#define BKP PAD16(BK) /* row stride of tiles whose lanes are keys */
#define BXP (BQP > BKP ? BQP : BKP)

#define LOG2E 1.44269504088896340736f
#define LN2 0.69314718055994530942f

/* One thread's workspace slot (floats), for head_dim D: two score-sized tiles
 * (S and dP, either orientation), four operands of D x BXP floats (Q^T and dO^T
 * packed transposed, and K, V copied to contiguous rows; or K^T, V^T, Q, dO),
 * then four lane vectors; a multiple of 16 floats so that slots of different
 * threads never share a cache line. */
#define TILE_FLOATS ((BK > BQ ? BK : BQ) * BXP) /* holds [BK][BQP] and [BQ][BKP] */
#define WS_OPERAND(ws, D, i) ((ws) + 2 * TILE_FLOATS + (i) * (D) * BXP)
#define WS_VECTOR(ws, D, i) ((ws) + 2 * TILE_FLOATS + 4 * (D) * BXP + (i) * BXP)
static inline size_t cpu_attn_slot_floats(int64_t D)
{
    return (size_t)PAD16(2 * TILE_FLOATS + 4 * D * BXP + 4 * BXP);
}

static inline int64_t cpu_attn_min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t cpu_attn_clamp64(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : (x > hi ? hi : x); }

/* The mask of batch row b (core/ops/mask.h). */
static inline usp_mask_row cpu_attn_mask(const cpu_attention_shape *s, int64_t b)
{
    return (usp_mask_row){s->causal, s->window, s->docs ? s->docs + 2 * b * s->seq_len : NULL};
}

/* The keys [*first, *end) of this call that local query i (global position q_offset + i) sees; as i
 * grows both ends move right. Causal alone: [0, keys up to q_offset + i). */
static inline void cpu_attn_keys(const cpu_attention_shape *s, const usp_mask_row *m, int64_t i, int64_t *first,
                                 int64_t *end)
{
    int64_t lo, hi;
    usp_mask_keys(m, s->q_offset + i, &lo, &hi);
    usp_mask_local(lo, hi, s->kv_offset, s->n_kv, first, end);
}

/* The local queries [*first, *end) that see local key j. */
static inline void cpu_attn_queries(const cpu_attention_shape *s, const usp_mask_row *m, int64_t j, int64_t *first,
                                    int64_t *end)
{
    int64_t lo, hi;
    usp_mask_queries(m, s->kv_offset + j, &lo, &hi);
    usp_mask_local(lo, hi, s->q_offset, s->n_q, first, end);
}

/* Row i of q, o, d_o or dq for batch b, head h: rows of one head are H*D apart. */
static inline size_t cpu_attn_q_row(const cpu_attention_shape *s, int64_t b, int64_t i, int64_t h)
{
    return (((size_t)b * (size_t)s->n_q + (size_t)i) * (size_t)s->n_heads + (size_t)h) * (size_t)s->head_dim;
}

/* Row j of k, v, dk or dv for batch b, kv head g: rows are Hkv*D apart. */
static inline size_t cpu_attn_kv_row(const cpu_attention_shape *s, int64_t b, int64_t j, int64_t g)
{
    return (((size_t)b * (size_t)s->n_kv + (size_t)j) * (size_t)s->n_kv_heads + (size_t)g) * (size_t)s->head_dim;
}

/* The kernels of one instruction set: one task each (see cpu_attention.c for
 * how tasks are handed out). ws: the thread's slot, 64-byte aligned. */
typedef struct cpu_attn_isa {
    const char *name; /* "avx512", "avx2", "sse2" or "generic" (USP_CPU_ISA takes these) */
    int vector_bits;  /* 512, 256, 128 */
    /* o, lse of batch b, head h, queries [q0, q0 + BQ). */
    void (*forward_task)(const cpu_attention_shape *s, const float *q, const float *k, const float *v, float *o,
                         float *lse, int64_t b, int64_t h, int64_t q0, float *ws);
    /* dq of batch b, head h, queries [q0, q0 + BQ). */
    void (*dq_task)(const cpu_attention_shape *s, const float *q, const float *k, const float *v, const float *o,
                    const float *lse, const float *d_o, float *dq, int accumulate, int64_t b, int64_t h, int64_t q0,
                    float *ws);
    /* dk, dv of batch b, kv head g, keys [k0, k0 + BK), over the GQA group's heads. */
    void (*dkdv_task)(const cpu_attention_shape *s, const float *q, const float *k, const float *v, const float *o,
                      const float *lse, const float *d_o, float *dk, float *dv, int accumulate, int64_t b, int64_t g,
                      int64_t k0, float *ws);
} cpu_attn_isa;

/* Defined in cpu_attention_isa.c; the x86 ones only on x86-64 with GCC. */
extern const cpu_attn_isa cpu_attn_isa_generic;
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CPU_ATTN_HAVE_X86 1
extern const cpu_attn_isa cpu_attn_isa_avx2;
extern const cpu_attn_isa cpu_attn_isa_avx512;
#endif

#endif /* USP_CPU_ATTENTION_IMPL_H */
