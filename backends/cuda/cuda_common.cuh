/* What every kernel file of the cuda backend shares: element loads and stores
 * through a cuda_array's dtype, launch checks, grid sizes. Device code only
 * (included by .cu files). */
#ifndef USP_CUDA_COMMON_CUH
#define USP_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backends/cuda/cuda_bf16_bits.h"
#include "backends/cuda/cuda_kernels.h"

/* Element i of a, as fp32. The dtype is uniform over a launch, so the branch costs nothing. */
static __device__ __forceinline__ float cuda_load(const cuda_array a, int64_t i)
{
    if (a.dtype == USP_BF16)
        return __bfloat162float(((const __nv_bfloat16 *)a.data)[i]);
    return ((const float *)a.data)[i];
}

/* Stores x as element i of a (bf16: rounded to nearest even). */
static __device__ __forceinline__ void cuda_store(cuda_array a, int64_t i, float x)
{
    if (a.dtype == USP_BF16) /* usp's rounding, NaNs included (cuda_bf16_bits.h) */
        ((uint16_t *)a.data)[i] = cuda_bf16_bits(__float_as_uint(x));
    else
        ((float *)a.data)[i] = x;
}

/* Blocks of `threads` covering n items, capped where grid-stride loops take the rest. */
static inline unsigned cuda_blocks_for(int64_t n, unsigned threads)
{
    int64_t b = (n + threads - 1) / threads;
    const int64_t cap = 65535LL * 32;
    return (unsigned)(b < 1 ? 1 : b > cap ? cap : b);
}

/* USP_OK, or USP_ERR_RUNTIME naming the kernel whose launch failed. */
static inline usp_status cuda_launched(const char *kernel)
{
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess)
        return USP_OK;
    return usp_error(USP_ERR_RUNTIME, "cuda backend: launching %s failed: %s", kernel, cudaGetErrorString(e));
}

#endif
