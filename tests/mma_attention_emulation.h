/* A CPU emulation of the tensor-core (mma.sync m16n8k16, bf16) flash attention, FlashAttention-2's
 * algorithm, one CTA at a time and, inside it, one warp at a time: per-lane "registers" (fragments
 * of 32 lanes), swizzled bf16 shared-memory tiles filled as cp.async fills them (zeros past the
 * tensor), ldmatrix and mma.sync emulated from their definitions, and every move between tiles and
 * registers made through the maps of backends/cuda/cuda_mma_maps.h only. bf16 rounding (to nearest,
 * ties to even) where the GPU rounds: tiles loaded from bf16 tensors, P and dS before their mma,
 * the stored o, dq, dk, dv; fp32 everywhere else. The mask as the kernels apply it: the blocks of
 * mma_attn_kv_blocks / mma_attn_q_blocks, each CTA's row spans (attn_row_span), each
 * lane's live bits per block (mma_attn_live_bits). tests/test_mma_attention_emulation.c holds it
 * against the cpu attention. head_dim 64 and 128 (mma_attn_shape_problem). */
#ifndef USP_TESTS_MMA_ATTENTION_EMULATION_H
#define USP_TESTS_MMA_ATTENTION_EMULATION_H

#include "backends/cuda/cuda_mma_maps.h"

/* Forward, every CTA of the grid (in reverse block order when reverse = 1): o [B, Nq, H, D] rounded
 * to bf16 and lse [B, H, Nq] in fp32. q, k, v hold bf16 values (as floats). */
void mma_emu_forward(const usp_attention_shape *s, const float *q, const float *k, const float *v, float *o,
                     float *lse, int reverse);

/* Backward: delta_i = dO_i . O_i, then the dK/dV pass (a CTA per key block and kv head, walking
 * the query heads of its group) and the separate dQ pass (a CTA per query block and head): every
 * output element written by one CTA in a fixed order, no atomics. dq, dk, dv rounded to bf16 and
 * overwritten. o and d_o hold bf16 values. */
void mma_emu_backward(const usp_attention_shape *s, const float *q, const float *k, const float *v, const float *o,
                      const float *lse, const float *d_o, float *dq, float *dk, float *dv, int reverse);

#endif
