/* The loss and optimiser kernels of the cuda backend: fused softmax
 * cross-entropy, AdamW, and the sum of squares behind gradient clipping, with
 * the math of backends/cpu/cpu_loss_optim.c. Reductions run in the fixed
 * orders of cuda_reduce.cuh and cuda_reduce_geometry.h: the same bits every run. */
#include <math.h>

#include "backends/cuda/cuda_grid.cuh"
#include "backends/cuda/cuda_reduce.cuh"

#define ELEM_THREADS 256

/* ---- cross-entropy: one block per row ------------------------------------ */

/* One row z of V logits, target t, with m = max_j z_j and S = sum_j e^(z_j - m) (in double):
 *   loss = m + log S - z_t,   dz_j = grad_scale * (e^(z_j - m) / S - [j == t]).
 * The threads stride over the row (a tile of blockDim logits at a time), three passes: max, sum,
 * gradient. dz may be z: z_t is read before the first barrier and each thread rewrites only the
 * logits it has read itself, after both reductions. t < 0: an ignored row (loss 0, dz 0). t >= V
 * (the cpu backend refuses it; no device op can return an error): loss and dz are NaN, so the
 * step's non-finite checks stop the run. */
static __global__ void cross_entropy_kernel(float *losses, cuda_array dz, cuda_array z, const int32_t *targets,
                                            int64_t n, int64_t V, float grad_scale)
{
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        const int64_t row = i * V;
        const int32_t t = targets[i];
        if (t < 0 || t >= V) { /* the same branch for the whole block: no barrier is skipped by some */
            const float fill = t < 0 ? 0.0f : NAN;
            for (int64_t j = threadIdx.x; dz.data && j < V; j += blockDim.x)
                cuda_store(dz, row + j, fill);
            if (losses && threadIdx.x == 0)
                losses[i] = fill;
            continue;
        }
        const float zt = cuda_load(z, row + t);
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
            const float zj = cuda_load(z, row + j);
            m = zj > m ? zj : m;
        }
        m = cuda_block_reduce(m, cuda_max_op());
        double s = 0.0;
        for (int64_t j = threadIdx.x; j < V; j += blockDim.x)
            s += (double)expf(cuda_load(z, row + j) - m);
        const double sum = cuda_block_reduce(s, cuda_sum_op());
        if (dz.data) {
            const float k = (float)((double)grad_scale / sum);
            for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
                float d = expf(cuda_load(z, row + j) - m) * k;
                if (j == t)
                    d -= grad_scale;
                cuda_store(dz, row + j, d);
            }
        }
        if (losses && threadIdx.x == 0)
            losses[i] = (float)((double)m + log(sum) - (double)zt);
    }
}

usp_status cuda_cross_entropy(float *losses, cuda_array dlogits, cuda_array logits, const int32_t *targets,
                              int64_t n, int64_t V, float grad_scale, cudaStream_t stream)
{
    if (n == 0 || V == 0)
        return USP_OK;
    cross_entropy_kernel<<<cuda_blocks_for(n, 1), CUDA_ROW_THREADS, 0, stream>>>(losses, dlogits, logits, targets, n,
                                                                                 V, grad_scale);
    return cuda_launched("cross_entropy_kernel");
}

/* ---- AdamW ---------------------------------------------------------------------- */

/* Adam with decoupled weight decay (Loshchilov & Hutter; PyTorch's AdamW):
 *   m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2,
 *   p -= lr * ( (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd * p ).
 * c1, c2 are the inverse bias corrections, computed on the host in double as on the cpu. */
static __global__ void adamw_kernel(float *p, cuda_array grad, float *m, float *v, int64_t n, float lr, float b1,
                                    float b2, float eps, float wd, float c1, float c2)
{
    for (int64_t i = cuda_first_index(); i < n; i += cuda_grid_stride()) {
        const float g = cuda_load(grad, i);
        const float mi = b1 * m[i] + (1.0f - b1) * g, vi = b2 * v[i] + (1.0f - b2) * g * g;
        m[i] = mi, v[i] = vi;
        p[i] -= lr * (mi * c1 / (sqrtf(vi * c2) + eps) + wd * p[i]);
    }
}

usp_status cuda_adamw_step(float *params, cuda_array grads, float *m, float *v, int64_t n, float lr, float beta1,
                           float beta2, float eps, float weight_decay, int64_t t, cudaStream_t stream)
{
    if (n == 0)
        return USP_OK;
    const float c1 = (float)(1.0 / (1.0 - pow((double)beta1, (double)t)));
    const float c2 = (float)(1.0 / (1.0 - pow((double)beta2, (double)t)));
    adamw_kernel<<<cuda_blocks_for(n, ELEM_THREADS), ELEM_THREADS, 0, stream>>>(params, grads, m, v, n, lr, beta1,
                                                                               beta2, eps, weight_decay, c1, c2);
    return cuda_launched("adamw_kernel");
}

/* ---- sum of squares ------------------------------------------------------------- */

/* partial[b] = sum over block b's threads (fixed tree) of each thread's elements g, g + G, ...
 * in order, G the fixed grid's thread count (cuda_reduce_geometry.h). Products of two floats are
 * exact in double. */
static __global__ void sum_squares_partials_kernel(double *partial, cuda_array x, int64_t n)
{
    double s = 0.0;
    for (int64_t i = cuda_first_index(); i < n; i += cuda_grid_stride()) {
        const double xi = (double)cuda_load(x, i);
        s += xi * xi;
    }
    s = cuda_block_reduce(s, cuda_sum_op());
    if (threadIdx.x == 0)
        partial[blockIdx.x] = s;
}

/* *out = the block partials added in block order, by one thread (CUDA_SUMSQ_BLOCKS additions). */
static __global__ void sum_squares_total_kernel(double *out, const double *partial)
{
    double total = 0.0;
    for (int b = 0; b < CUDA_SUMSQ_BLOCKS; b++)
        total += partial[b];
    *out = total;
}

usp_status cuda_sum_squares(double *out_device, cuda_array x, int64_t n, cudaStream_t stream)
{
    cudaError_t e;
    if (n == 0) { /* the empty sum: 0.0 is all zero bits */
        e = cudaMemsetAsync(out_device, 0, sizeof *out_device, stream);
        return e == cudaSuccess ? USP_OK
                                : usp_error(USP_ERR_RUNTIME, "cuda backend: sum_squares: zeroing its result failed: %s",
                                            cudaGetErrorString(e));
    }
    double *partial = NULL;
    e = cudaMallocAsync((void **)&partial, CUDA_SUMSQ_BLOCKS * sizeof *partial, stream);
    if (e != cudaSuccess)
        return usp_error(USP_ERR_RUNTIME, "cuda backend: sum_squares: no scratch for %d block partials: %s",
                         CUDA_SUMSQ_BLOCKS, cudaGetErrorString(e));
    sum_squares_partials_kernel<<<CUDA_SUMSQ_BLOCKS, CUDA_SUMSQ_THREADS, 0, stream>>>(partial, x, n);
    usp_status st = cuda_launched("sum_squares_partials_kernel");
    if (st == USP_OK) {
        sum_squares_total_kernel<<<1, 1, 0, stream>>>(out_device, partial);
        st = cuda_launched("sum_squares_total_kernel");
    }
    e = cudaFreeAsync(partial, stream);
    if (st == USP_OK && e != cudaSuccess)
        st = usp_error(USP_ERR_RUNTIME, "cuda backend: sum_squares: freeing its scratch failed: %s",
                       cudaGetErrorString(e));
    return st;
}
