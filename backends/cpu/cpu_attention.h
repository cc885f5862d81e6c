/* Flash-style attention on the CPU: forward and backward, causal or full,
 * grouped-query (GQA), any sequence length, head_dim 16..256 (any head_dim
 * works; a multiple of the vector width, 16 floats, runs fully vectorised).
 *
 * The N x N score matrix never exists: queries are cut into tiles, each tile
 * walks the key/value tiles with a running max and a running sum (online
 * softmax), and keeps only the log-sum-exp of each row for the backward pass,
 * which recomputes the probabilities tile by tile. Extra memory is therefore a
 * few tiles per thread, taken from a workspace the caller passes in (no malloc
 * inside the kernels, so the caller can count every byte): this is what lets
 * one rank hold attention over a million tokens.
 *
 * The kernels see plain pointers and a shape, nothing from core/. Offsets place
 * the call inside a larger attention (ring attention hands us one K/V block at
 * a time): causal masking uses global positions, the backward pass takes the
 * GLOBAL o and lse, and gradients can accumulate over blocks. Results are
 * bitwise the same for any thread count or schedule.
 *
 * Layouts, row-major and contiguous (B batch, Nq queries, Nkv keys, H query
 * heads, Hkv key/value heads, D head_dim):
 *   q, o, d_o, dq  [B, Nq, H, D]
 *   k, v, dk, dv   [B, Nkv, Hkv, D]
 *   lse            [B, H, Nq]   natural log of the softmax denominator, i.e.
 *                  lse_i = log sum_j exp(scale * q_i . k_j) over visible keys */
#ifndef USP_CPU_ATTENTION_H
#define USP_CPU_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

typedef struct cpu_attention_shape {
    int64_t batch, n_q, n_kv;    /* queries and keys of this call */
    int64_t n_heads, n_kv_heads; /* GQA: n_kv_heads divides n_heads; query head h uses kv head h / (n_heads / n_kv_heads) */
    int64_t head_dim;            /* 16 .. 256 */
    int64_t q_offset, kv_offset; /* global position of the first query / first key (for causal masking of blocks) */
    int causal;                  /* 1: query at global position p sees keys at positions <= p; 0: all keys */
    float scale;                 /* softmax scale, normally 1/sqrt(head_dim) */
    int64_t window;              /* 0: none; W: the sliding window of core/ops/mask.h */
    int64_t seq_len;             /* positions of a batch row of docs */
    const int32_t *docs;         /* [batch][seq_len][2]: each position's document (start, end); NULL: one */
} cpu_attention_shape;

/* Bytes of scratch the forward and backward calls need for shape `s` with
 * omp_get_max_threads() threads: a few tiles per thread, never O(N^2) nor O(N). */
size_t cpu_attention_workspace_bytes(const cpu_attention_shape *s);

/* o = softmax(scale * q k^T + mask) v and lse per query row; a row that sees no
 * key gets o = 0, lse = -INFINITY. `workspace`: cpu_attention_workspace_bytes(s). */
void cpu_flash_attention_forward(const cpu_attention_shape *s,
                                 const float *q,  /* [B, Nq, H, D] */
                                 const float *k,  /* [B, Nkv, Hkv, D] */
                                 const float *v,  /* [B, Nkv, Hkv, D] */
                                 float *o,        /* [B, Nq, H, D] out */
                                 float *lse,      /* [B, H, Nq] out */
                                 void *workspace);

/* dq, dk, dv of the attention whose output is `o` with log-sum-exp `lse` (which
 * may be the global o and lse of a larger attention); accumulate = 1 adds to the
 * gradients, 0 overwrites them. `workspace`: cpu_attention_workspace_bytes(s). */
void cpu_flash_attention_backward(const cpu_attention_shape *s,
                                  const float *q,   /* [B, Nq, H, D] */
                                  const float *k,   /* [B, Nkv, Hkv, D] */
                                  const float *v,   /* [B, Nkv, Hkv, D] */
                                  const float *o,   /* [B, Nq, H, D] */
                                  const float *lse, /* [B, H, Nq] */
                                  const float *d_o, /* [B, Nq, H, D] */
                                  float *dq,        /* [B, Nq, H, D] out */
                                  float *dk,        /* [B, Nkv, Hkv, D] out */
                                  float *dv,        /* [B, Nkv, Hkv, D] out */
                                  int accumulate, void *workspace);

/* The instruction set the kernels run ("avx512", "avx2", "sse2" or "generic")
 * and, in *vector_bits when not NULL, its vector width (512, 256, 128). Chosen
 * once per process: the widest the CPU has, or a narrower one named by the
 * environment variable USP_CPU_ISA (avx512 | avx2 | sse2 | generic; a path the
 * CPU lacks falls back to the best it has). Benchmarks print it with figures. */
const char *cpu_attention_isa_name(int *vector_bits);

#endif /* USP_CPU_ATTENTION_H */
