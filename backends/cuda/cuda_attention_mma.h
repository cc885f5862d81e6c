/* The tensor-core flash attention (cuda_attention_mma.cu): FlashAttention-2 on mma.sync m16n8k16,
 * bf16 q, k, v, o, d_o, dq, dk, dv with fp32 accumulators and lse; head_dim 64 and 128. Every index
 * map it uses is in cuda_mma_maps.h, where tests/test_mma_maps.c and the CPU emulation of
 * tests/mma_attention_emulation.c check them. The attention op (cuda_attention_op.c) calls it for
 * every bf16 call it can take (attn_kernel_for); not yet run on a GPU. */
#ifndef USP_CUDA_ATTENTION_MMA_H
#define USP_CUDA_ATTENTION_MMA_H

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/cuda_mma_maps.h"

#ifdef __cplusplus
extern "C" {
#endif

/* attn_kernel_for (cuda_mma_maps.h) on n <= 8 arrays' dtypes and addresses: the kernels for this call, and
 * in *why what kept a bf16 call off the tensor cores. */
attn_kernel cuda_attention_kernel_for(const usp_attention_shape *s, const cuda_array *arrays, int n,
                                      const char **why);

/* NULL when the tensor-core kernels take this call: a shape attn_shape_problem accepts, head_dim 64 or
 * 128, every array bf16 and 16-byte aligned; otherwise why (then the scalar kernels run it). */
const char *cuda_attention_mma_problem(const usp_attention_shape *s, const cuda_array *arrays, int n_arrays);

/* Forward: o [B, Nq, H, D] bf16, lse [B, H, Nq] fp32 (a row that sees no key: o = 0, lse = -inf). */
usp_status cuda_attention_mma_forward(const usp_attention_shape *s, cuda_array q, cuda_array k, cuda_array v,
                                      cuda_array o, float *lse, cudaStream_t stream);

/* Backward, deterministic: delta into `workspace` (attn_workspace_bytes(s)), a dK/dV pass (a CTA per
 * key block and kv head over its group's query heads), then a dQ pass; no atomics. accumulate = 1
 * adds to dq, dk, dv. */
usp_status cuda_attention_mma_backward(const usp_attention_shape *s, cuda_array q, cuda_array k, cuda_array v,
                                       cuda_array o, const float *lse, cuda_array d_o, cuda_array dq, cuda_array dk,
                                       cuda_array dv, int accumulate, void *workspace, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
