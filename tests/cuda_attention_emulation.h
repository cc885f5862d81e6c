/* A CPU emulation of the CUDA flash attention kernels (backends/cuda/cuda_attention.cu):
 * plain C that runs their loops block by block and step by step (the same tiles,
 * skipped tiles, online-softmax update order and helpers of cuda_attention_tiles.h,
 * the warps' lane-strided partial sums and butterflies), one thread doing what a
 * block's threads share out. tests/test_cuda_tiles.c holds it against the cpu
 * backend. */
#ifndef USP_TESTS_CUDA_ATTENTION_EMULATION_H
#define USP_TESTS_CUDA_ATTENTION_EMULATION_H

#include <stddef.h>

#include "backends/cuda/cuda_attention_tiles.h"

/* n floats of scratch, each `fill`, or random where fill is NaN (stale shared memory); the test provides it. */
float *emu_scratch(size_t n, float fill);

/* The forward kernels over the whole shape: o and lse as cuda_attention_forward writes them. */
void emu_forward(const usp_attention_shape *s, const float *q, const float *k, const float *v, float *o,
                 float *lse);

/* The backward kernels (D_i, dK/dV, dQ) as cuda_attention_backward runs them. */
void emu_backward(const usp_attention_shape *s, const float *q, const float *k, const float *v, const float *o,
                  const float *lse, const float *d_o, float *dq, float *dk, float *dv, int accumulate);

/* The merge kernel: (o, lse) merged with (o_part, lse_part), o [n, heads, D], lse [heads, n]. */
void emu_merge(float *o, float *lse, const float *o_part, const float *lse_part, int64_t n, int64_t heads,
               int64_t D);

#endif
