/* The deterministic reductions the kernels share: a block's sum or max by a
 * fixed tree, and sums over rows per column (dweight, dbias) in the two passes
 * of cuda_reduce_geometry.h. No atomics anywhere: every addition happens in an
 * order that depends on the shape alone, so results repeat bit for bit. */
#ifndef USP_CUDA_REDUCE_CUH
#define USP_CUDA_REDUCE_CUH

#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/cuda_reduce_geometry.h"

/* Threads of the one-row-per-block kernels (norms, cross-entropy): a power of two, as the tree needs. */
#define CUDA_ROW_THREADS 256

struct cuda_sum_op {
    template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};

/* a > b ? a : b, as the cpu backend's max (a NaN in b is dropped, as there). */
struct cuda_max_op {
    template <typename T> __device__ T operator()(T a, T b) const { return a > b ? a : b; }
};

/* op over v of every thread of the block, by the binary tree lane[t] = op(lane[t], lane[t + s])
 * for s = blockDim/2, ..., 1: the same order on every run. blockDim.x a power of two <= 1024;
 * every thread gets the result, and may call again at once (the last barrier frees the lanes). */
template <typename T, typename Op> static __device__ T cuda_block_reduce(T v, Op op)
{
    __shared__ T lane[1024];
    const unsigned t = threadIdx.x;
    lane[t] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
        if (t < s)
            lane[t] = op(lane[t], lane[t + s]);
        __syncthreads();
    }
    const T r = lane[0];
    __syncthreads();
    return r;
}

/* Pass 1 of a column sum: for chunk k = blockIdx.y and every column c,
 *   partial[(k * Term::count + t) * C + c] = sum over the chunk's rows i, in order, of term t at (i, c).
 * Term: `static constexpr int count` and `__device__ void operator()(int64_t i, int64_t c, double *acc)`
 * adding its count values at (i, c) into acc. A warp reads consecutive columns of a row. */
template <class Term>
static __global__ void cuda_column_partials_kernel(double *partial, Term term, int64_t C, cuda_reduce_geometry plan)
{
    const int64_t k = blockIdx.y, begin = cuda_reduce_chunk_begin(plan, k), end = cuda_reduce_chunk_end(plan, k);
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < C; c += (int64_t)gridDim.x * blockDim.x) {
        double acc[Term::count] = {};
        for (int64_t i = begin; i < end; i++)
            term(i, c, acc);
        for (int t = 0; t < Term::count; t++)
            partial[(k * Term::count + t) * C + c] = acc[t];
    }
}

/* Pass 2: dst[c] += (float)(sum over chunks k in order of partial term t), as the cpu backend adds
 * its double column sum, rounded to float, to the gradient. */
template <int Terms>
static __global__ void cuda_column_finish_kernel(cuda_array dst, const double *partial, int t, int64_t C,
                                                 int64_t chunks)
{
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < C; c += (int64_t)gridDim.x * blockDim.x) {
        double s = 0.0;
        for (int64_t k = 0; k < chunks; k++)
            s += partial[(k * Terms + t) * C + c];
        cuda_store(dst, c, cuda_load(dst, c) + (float)s);
    }
}

/* dst[t][c] += sum over rows i < n of term t at (i, c), for each t whose dst[t].data is not NULL;
 * deterministic (cuda_reduce_geometry.h). Scratch: the partials, from the stream's memory pool. */
template <class Term>
static usp_status cuda_column_sums(const cuda_array *dst, Term term, int64_t n, int64_t C, const char *kernel,
                                   cudaStream_t stream)
{
    if (n == 0 || C == 0)
        return USP_OK;
    const cuda_reduce_geometry plan = cuda_reduce_geometry_for(n);
    double *partial = NULL;
    const size_t bytes = cuda_reduce_partials(plan, C, Term::count) * sizeof *partial;
    cudaError_t e = cudaMallocAsync((void **)&partial, bytes, stream);
    if (e != cudaSuccess)
        return usp_error(USP_ERR_RUNTIME, "cuda backend: %s: no %zu bytes of scratch for the column partials: %s",
                         kernel, bytes, cudaGetErrorString(e));
    const dim3 grid(cuda_blocks_for(C, CUDA_REDUCE_THREADS), (unsigned)plan.chunks);
    cuda_column_partials_kernel<Term><<<grid, CUDA_REDUCE_THREADS, 0, stream>>>(partial, term, C, plan);
    usp_status st = cuda_launched(kernel);
    for (int t = 0; t < Term::count && st == USP_OK; t++)
        if (dst[t].data) {
            cuda_column_finish_kernel<Term::count><<<cuda_blocks_for(C, CUDA_REDUCE_THREADS), CUDA_REDUCE_THREADS, 0,
                                                     stream>>>(dst[t], partial, t, C, plan.chunks);
            st = cuda_launched(kernel);
        }
    e = cudaFreeAsync(partial, stream);
    if (st == USP_OK && e != cudaSuccess)
        st = usp_error(USP_ERR_RUNTIME, "cuda backend: %s: freeing its scratch failed: %s", kernel,
                       cudaGetErrorString(e));
    return st;
}

#endif
