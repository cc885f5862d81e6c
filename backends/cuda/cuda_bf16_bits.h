/* fp32 -> bf16 rounding as the cuda kernels store it, in plain C (compiled by gcc for its unit test,
 * tests/test_cuda_bf16_bits.c, and by nvcc for the kernels).
 *
 * Round to nearest, ties to even, overflow to infinity: what __float2bfloat16_rn does too. A NaN
 * differs: CUDA's intrinsic returns the canonical 0x7fff whatever the payload, while usp's host
 * rounding (usp_f32_to_bf16, the cpu backend's stores) keeps the sign and the payload's high bits
 * and sets the quiet bit. The first GPU run found that one case of the conformance table
 * ("bf16: convert, ties to even, NaN, overflow"): the kernels round with this function instead,
 * so every backend stores the same bits. */
#ifndef USP_CUDA_BF16_BITS_H
#define USP_CUDA_BF16_BITS_H

#include <stdint.h>

#ifdef __CUDACC__
#define CUDA_BF16_FN static inline __host__ __device__
#else
#define CUDA_BF16_FN static inline
#endif

/* The bf16 bits of the fp32 value whose bits are `bits`. */
CUDA_BF16_FN uint16_t cuda_bf16_bits(uint32_t bits)
{
    if ((bits & 0x7fffffffu) > 0x7f800000u) /* NaN: quiet, sign and high payload kept */
        return (uint16_t)((bits >> 16) | 0x40u);
    return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

#endif
