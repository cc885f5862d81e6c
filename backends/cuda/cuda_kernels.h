/* The CUDA kernels of the cuda backend, as C-callable launchers.
 *
 * cuda_backend.c runs each op kind (core/ops/op.h) with these. Each launcher enqueues its
 * kernels on `stream` and returns at once (USP_OK, or USP_ERR_RUNTIME naming
 * the kernel when a launch fails); none synchronises, none reads device memory
 * from the host. Scratch a kernel needs (partial sums of a deterministic
 * reduction) comes from cudaMallocAsync / cudaFreeAsync on the same stream:
 * the device's memory pool, which cuda_backend.c keeps from releasing memory,
 * so no op calls cudaMalloc or cudaFree.
 *
 * Storage: activations, weights and their gradients may be bf16 (--dtype bf16)
 * or fp32; a cuda_array says which. Arithmetic is fp32 whatever the storage
 * (bf16 loaded with __bfloat162float, stored round-to-nearest-even), and
 * reductions accumulate in fp32 or, where a slot says so, double. Master
 * weights, Adam moments, lse, losses and workspaces are always fp32 and are
 * plain float pointers.
 *
 * Determinism: every result is the same bits on every run with the same
 * inputs: no atomics on floating point; reductions run in a fixed order that
 * depends on the shape only.
 *
 * Semantics of each op: its wrapper in core/ops/ops.h and the cpu backend
 * (backends/cpu/), which the conformance table compares against. */
#ifndef USP_CUDA_KERNELS_H
#define USP_CUDA_KERNELS_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "core/ops/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A device array of fp32 (USP_F32) or bf16 (USP_BF16) elements; data may be NULL where a slot allows it. */
typedef struct cuda_array {
    void *data;
    usp_dtype dtype;
} cuda_array;

/* ---- conversion and the pack/unpack around all-to-all ---------------------- */

/* dst[i] = src[i] for n elements, converting between fp32 and bf16 as their dtypes say. */
usp_status cuda_convert(cuda_array dst, cuda_array src, int64_t n, cudaStream_t stream);

/* dst += src over `rows` rows of row_elems elements, 2-D strided (strides in elements). */
usp_status cuda_accumulate_2d(cuda_array dst, size_t dst_stride, cuda_array src, size_t src_stride,
                              size_t row_elems, size_t rows, cudaStream_t stream);

/* C = beta C (0 where beta is 0) over `batch` m x n matrices at row stride ldc and matrix stride stride_c:
 * a GEMM with k = 0, which cuda_gemm.c does not hand to cuBLAS. */
usp_status cuda_scale_matrices(cuda_array c, float beta, int64_t m, int64_t n, int64_t ldc, int64_t stride_c,
                               int64_t batch, cudaStream_t stream);

/* x [n, C] += bias [C]. */
usp_status cuda_add_bias(cuda_array x, cuda_array bias, int64_t n, int64_t C, cudaStream_t stream);

/* dbias [C] += column sums of dout [n, C], summed in a fixed order. */
usp_status cuda_bias_backward(cuda_array dbias, cuda_array dout, int64_t n, int64_t C, cudaStream_t stream);

/* ---- layers (backends/cuda/cuda_layers.cu) ---------------------------------- */

/* out[i] = wte[tokens[i]] + (wpe.data ? wpe[positions[i]] : 0). */
usp_status cuda_embedding_forward(cuda_array out, const int32_t *tokens, const int32_t *positions, cuda_array wte,
                                  cuda_array wpe, int64_t n, int64_t C, cudaStream_t stream);

/* dwte[tokens[i]] += dout[i] (dwpe likewise when non-NULL), deterministic: rows summed in index order. */
usp_status cuda_embedding_backward(cuda_array dwte, cuda_array dwpe, cuda_array dout, const int32_t *tokens,
                                   const int32_t *positions, int64_t n, int64_t C, cudaStream_t stream);

/* LayerNorm forward; bias.data, mean, rstd may be NULL. */
usp_status cuda_layernorm_forward(cuda_array out, float *mean, float *rstd, cuda_array inp, cuda_array weight,
                                  cuda_array bias, int64_t n, int64_t C, float eps, cudaStream_t stream);

/* LayerNorm backward: dinp, dweight, dbias (may be NULL) accumulate (+=). */
usp_status cuda_layernorm_backward(cuda_array dinp, cuda_array dweight, cuda_array dbias, cuda_array dout,
                                   cuda_array inp, cuda_array weight, const float *mean, const float *rstd,
                                   int64_t n, int64_t C, cudaStream_t stream);

/* RMSNorm forward; rstd may be NULL. */
usp_status cuda_rmsnorm_forward(cuda_array out, float *rstd, cuda_array inp, cuda_array weight, int64_t n,
                                int64_t C, float eps, cudaStream_t stream);

/* RMSNorm backward: dinp and dweight accumulate (+=). */
usp_status cuda_rmsnorm_backward(cuda_array dinp, cuda_array dweight, cuda_array dout, cuda_array inp,
                                 cuda_array weight, const float *rstd, int64_t n, int64_t C, cudaStream_t stream);

/* An element-wise function (USP_MAP_FNS, core/ops/op.h) over n elements of its `outs` outputs and `ins`
 * inputs (backends/cuda/cuda_map.cu); scalar is its parameter (scale's factor). */
usp_status cuda_map(usp_map_fn fn, const cuda_array *out, int outs, const cuda_array *in, int ins, int64_t n,
                    float scalar, cudaStream_t stream);

/* 1 when cuda_map has a kernel for fn. */
int cuda_map_supports(usp_map_fn fn);

/* Rotary embedding of x [n, H, D] in place; direction +1 rotates (forward), -1
 * rotates back (backward). inv_freq: D/2 device values, uploaded once by the
 * backend (cuda_backend.c caches them by theta and table). */
usp_status cuda_rope(cuda_array x, const int32_t *positions, int64_t n, int64_t H, int64_t D,
                     const double *inv_freq, int direction, cudaStream_t stream);

/* ---- loss and optimiser (backends/cuda/cuda_loss_optim.cu) ----------------- */

/* Fused softmax cross-entropy over rows of V logits, one row tile at a time;
 * losses (fp32) or dlogits may be NULL; dlogits may alias logits. */
usp_status cuda_cross_entropy(float *losses, cuda_array dlogits, cuda_array logits, const int32_t *targets,
                              int64_t n, int64_t V, float grad_scale, cudaStream_t stream);

/* One AdamW step: fp32 params (master weights), m, v; grads fp32 or bf16. */
usp_status cuda_adamw_step(float *params, cuda_array grads, float *m, float *v, int64_t n, float lr, float beta1,
                           float beta2, float eps, float weight_decay, int64_t t, cudaStream_t stream);

/* *out_device (one double) = sum of x[i]^2 in double, in a fixed order. */
usp_status cuda_sum_squares(double *out_device, cuda_array x, int64_t n, cudaStream_t stream);

/* ---- attention ---------------------------------------------------------------
 * The op (cuda_attention_op.c) sends each call to the tensor-core kernels
 * (cuda_attention_mma.cu) when they take it, bf16 at head_dim 64 or 128, and to the
 * scalar kernels (cuda_attention.cu) otherwise: fp32, other head sizes. */

/* Bytes of workspace the attention launchers need for `s` (device memory; both kernels' backward). */
size_t cuda_attention_workspace_bytes(const usp_attention_shape *s);

/* Flash attention forward: o, lse [B, H, Nq] fp32 (see backends/cpu/cpu_attention.h
 * for layouts and the masking of blocks with offsets), on the kernels that take the call. */
usp_status cuda_attention_forward(const usp_attention_shape *s, cuda_array q, cuda_array k, cuda_array v,
                                  cuda_array o, float *lse, void *workspace, cudaStream_t stream);

/* Flash attention backward, deterministic (no atomics in dq, dk, dv), on the kernels that take the call. */
usp_status cuda_attention_backward(const usp_attention_shape *s, cuda_array q, cuda_array k, cuda_array v,
                                   cuda_array o, const float *lse, cuda_array d_o, cuda_array dq, cuda_array dk,
                                   cuda_array dv, int accumulate, void *workspace, cudaStream_t stream);

/* cuda_attention_forward on the scalar fp32-arithmetic kernels (any dtype, head_dim 1..256). */
usp_status cuda_attention_scalar_forward(const usp_attention_shape *s, cuda_array q, cuda_array k, cuda_array v,
                                         cuda_array o, float *lse, void *workspace, cudaStream_t stream);

/* cuda_attention_backward on the scalar kernels. */
usp_status cuda_attention_scalar_backward(const usp_attention_shape *s, cuda_array q, cuda_array k, cuda_array v,
                                          cuda_array o, const float *lse, cuda_array d_o, cuda_array dq,
                                          cuda_array dk, cuda_array dv, int accumulate, void *workspace,
                                          cudaStream_t stream);

/* Online-softmax merge of a partial result (o_part, lse_part) into (o, lse); see core/ops/ops.h. */
usp_status cuda_attention_merge(cuda_array o, float *lse, cuda_array o_part, const float *lse_part, int64_t n,
                                int64_t heads, int64_t head_dim, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
