/* Grid-stride loops over 64-bit indices: a grid capped by cuda_blocks_for covers
 * any n, each thread taking elements first, first + stride, ... Device code only. */
#ifndef USP_CUDA_GRID_CUH
#define USP_CUDA_GRID_CUH

#include "backends/cuda/cuda_common.cuh"

/* Index of this thread's first element in the grid. */
static __device__ __forceinline__ int64_t cuda_first_index(void)
{
    return blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
}

/* Threads in the grid: the step of a grid-stride loop. */
static __device__ __forceinline__ int64_t cuda_grid_stride(void) { return (int64_t)gridDim.x * blockDim.x; }

#endif
