/* Transformer layer kernels of the cuda backend: embedding, layernorm, rmsnorm
 * and rotary embeddings (cuda_map.cu has GELU and SwiGLU), with the math of backends/cpu/cpu_layers.c
 * written the same way (the same float expressions, the same double row
 * statistics), so that the conformance table's fp32 tolerances hold.
 *
 * Shapes of the kernels: elementwise ops are grid-stride loops; a norm's row is
 * one block (its statistics by cuda_block_reduce's fixed tree); the parameter
 * gradients are column sums in the chunk order of cuda_reduce_geometry.h; the
 * embedding gradient sorts the row ids (a stable radix sort), and each run of
 * equal ids is added to its table row by one block, in row order: the cpu
 * backend's order, so fp32 tables get the same bits. No float atomics.
 *
 * Layout: activations are row-major [n, C] with n = batch * tokens. */
#include <cub/device/device_radix_sort.cuh>

#include "backends/cuda/cuda_grid.cuh"
#include "backends/cuda/cuda_index.h"
#include "backends/cuda/cuda_reduce.cuh"

#define ELEM_THREADS 256

/* ---- embedding ------------------------------------------------------------ */

/* out[i, c] = wte[tokens[i], c] (+ wpe[positions[i], c]). */
static __global__ void embedding_forward_kernel(cuda_array out, const int32_t *tokens, const int32_t *positions,
                                                cuda_array wte, cuda_array wpe, int64_t C, int64_t total)
{
    for (int64_t e = cuda_first_index(); e < total; e += cuda_grid_stride()) {
        const int64_t i = e / C, c = e % C;
        float y = cuda_load(wte, (int64_t)tokens[i] * C + c);
        if (wpe.data)
            y += cuda_load(wpe, (int64_t)positions[i] * C + c);
        cuda_store(out, e, y);
    }
}

usp_status cuda_embedding_forward(cuda_array out, const int32_t *tokens, const int32_t *positions, cuda_array wte,
                                  cuda_array wpe, int64_t n, int64_t C, cudaStream_t stream)
{
    const int64_t total = n * C;
    if (total == 0)
        return USP_OK;
    embedding_forward_kernel<<<cuda_blocks_for(total, ELEM_THREADS), ELEM_THREADS, 0, stream>>>(out, tokens, positions,
                                                                                               wte, wpe, C, total);
    return cuda_launched("embedding_forward_kernel");
}

static __global__ void iota_kernel(int64_t *rows, int64_t n)
{
    for (int64_t i = cuda_first_index(); i < n; i += cuda_grid_stride())
        rows[i] = i;
}

/* ids [n] sorted (stably: equal ids keep row order) with rows [n] their row numbers. Block p (grid-
 * stride) acts when p starts a run of equal ids: table[id] += dout[rows[q]] for q over the run, in
 * order, accumulated in fp32 as cpu_embedding_backward's add_rows does. Runs are disjoint, so each
 * table row has one writer. */
static __global__ void scatter_runs_kernel(cuda_array table, cuda_array dout, const int32_t *ids, const int64_t *rows,
                                           int64_t n, int64_t C)
{
    for (int64_t p = blockIdx.x; p < n; p += gridDim.x) {
        if (p > 0 && ids[p] == ids[p - 1])
            continue;
        const int32_t id = ids[p];
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
            float acc = cuda_load(table, (int64_t)id * C + c);
            for (int64_t q = p; q < n && ids[q] == id; q++)
                acc += cuda_load(dout, rows[q] * C + c);
            cuda_store(table, (int64_t)id * C + c, acc);
        }
    }
}

/* table[ids[i]] += dout[i] for i < n, by sorting ids; the scratch is carved as cuda_sort_scratch_for says. */
static usp_status scatter_add_rows(cuda_array table, cuda_array dout, const int32_t *ids, int64_t n, int64_t C,
                                   char *scratch, size_t sort_bytes, cudaStream_t stream)
{
    const cuda_sort_scratch at = cuda_sort_scratch_for(n, sort_bytes);
    int64_t *rows_in = (int64_t *)(scratch + at.rows_in), *rows_out = (int64_t *)(scratch + at.rows_out);
    int32_t *ids_out = (int32_t *)(scratch + at.ids_out);
    iota_kernel<<<cuda_blocks_for(n, ELEM_THREADS), ELEM_THREADS, 0, stream>>>(rows_in, n);
    usp_status st = cuda_launched("embedding_backward: iota_kernel");
    if (st != USP_OK)
        return st;
    cudaError_t e = cub::DeviceRadixSort::SortPairs(scratch + at.sort_temp, sort_bytes, ids, ids_out, rows_in,
                                                    rows_out, n, 0, 32, stream);
    if (e != cudaSuccess)
        return usp_error(USP_ERR_RUNTIME, "cuda backend: embedding_backward: sorting the ids failed: %s",
                         cudaGetErrorString(e));
    scatter_runs_kernel<<<cuda_blocks_for(n, 1), ELEM_THREADS, 0, stream>>>(table, dout, ids_out, rows_out, n, C);
    return cuda_launched("scatter_runs_kernel");
}

usp_status cuda_embedding_backward(cuda_array dwte, cuda_array dwpe, cuda_array dout, const int32_t *tokens,
                                   const int32_t *positions, int64_t n, int64_t C, cudaStream_t stream)
{
    if (n == 0 || C == 0)
        return USP_OK;
    size_t sort_bytes = 0; /* the size query reads no device memory and launches nothing */
    cudaError_t e = cub::DeviceRadixSort::SortPairs(NULL, sort_bytes, (const int32_t *)NULL, (int32_t *)NULL,
                                                    (const int64_t *)NULL, (int64_t *)NULL, n, 0, 32, stream);
    if (e != cudaSuccess)
        return usp_error(USP_ERR_RUNTIME, "cuda backend: embedding_backward: sizing the id sort failed: %s",
                         cudaGetErrorString(e));
    const size_t bytes = cuda_sort_scratch_for(n, sort_bytes).bytes;
    char *scratch = NULL;
    e = cudaMallocAsync((void **)&scratch, bytes, stream);
    if (e != cudaSuccess)
        return usp_error(USP_ERR_RUNTIME, "cuda backend: embedding_backward: no %zu bytes of scratch for sorting "
                         "%lld ids: %s", bytes, (long long)n, cudaGetErrorString(e));
    usp_status st = scatter_add_rows(dwte, dout, tokens, n, C, scratch, sort_bytes, stream);
    if (st == USP_OK && dwpe.data)
        st = scatter_add_rows(dwpe, dout, positions, n, C, scratch, sort_bytes, stream);
    e = cudaFreeAsync(scratch, stream);
    if (st == USP_OK && e != cudaSuccess)
        st = usp_error(USP_ERR_RUNTIME, "cuda backend: embedding_backward: freeing its scratch failed: %s",
                       cudaGetErrorString(e));
    return st;
}

/* ---- layernorm and rmsnorm: one block per row ------------------------------ */

/* y = (x - mean) * rstd * w + b, rstd = 1/sqrt(var + eps), biased variance; the mean and the
 * variance (of float differences) summed in double, as on the cpu. */
static __global__ void layernorm_forward_kernel(cuda_array out, float *mean, float *rstd, cuda_array inp,
                                                cuda_array weight, cuda_array bias, int64_t n, int64_t C, float eps)
{
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        const int64_t row = i * C;
        double s = 0.0, v = 0.0;
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
            s += (double)cuda_load(inp, row + c);
        const float m = (float)(cuda_block_reduce(s, cuda_sum_op()) / (double)C);
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
            const double d = (double)(cuda_load(inp, row + c) - m);
            v += d * d;
        }
        const float r = (float)(1.0 / sqrt(cuda_block_reduce(v, cuda_sum_op()) / (double)C + (double)eps));
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
            float y = (cuda_load(inp, row + c) - m) * r * cuda_load(weight, c);
            if (bias.data)
                y += cuda_load(bias, c);
            cuda_store(out, row + c, y);
        }
        if (threadIdx.x == 0) {
            if (mean)
                mean[i] = m;
            if (rstd)
                rstd[i] = r;
        }
    }
}

usp_status cuda_layernorm_forward(cuda_array out, float *mean, float *rstd, cuda_array inp, cuda_array weight,
                                  cuda_array bias, int64_t n, int64_t C, float eps, cudaStream_t stream)
{
    if (n == 0)
        return USP_OK;
    layernorm_forward_kernel<<<cuda_blocks_for(n, 1), CUDA_ROW_THREADS, 0, stream>>>(out, mean, rstd, inp, weight,
                                                                                     bias, n, C, eps);
    return cuda_launched("layernorm_forward_kernel");
}

/* With xh = (x - mean) * rstd and g = w * dy (llm.c's derivation):
 *   dx += rstd * (g - mean(g) - xh * mean(g * xh)). */
static __global__ void layernorm_backward_kernel(cuda_array dinp, cuda_array dout, cuda_array inp, cuda_array weight,
                                                 const float *mean, const float *rstd, int64_t n, int64_t C)
{
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        const int64_t row = i * C;
        const float m = mean[i], r = rstd[i];
        double sg = 0.0, sgx = 0.0;
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
            const float g = cuda_load(weight, c) * cuda_load(dout, row + c);
            sg += (double)g;
            sgx += (double)(g * ((cuda_load(inp, row + c) - m) * r));
        }
        const float g_mean = (float)(cuda_block_reduce(sg, cuda_sum_op()) / (double)C);
        const float gx_mean = (float)(cuda_block_reduce(sgx, cuda_sum_op()) / (double)C);
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
            const float x = cuda_load(inp, row + c), g = cuda_load(weight, c) * cuda_load(dout, row + c);
            cuda_store(dinp, row + c, cuda_load(dinp, row + c) + (g - g_mean - (x - m) * r * gx_mean) * r);
        }
    }
}

/* The column-sum terms of a norm's parameter gradients at (i, c), with xh = (x - mean) * rstd
 * (mean NULL: rmsnorm's xh = x * rstd): dweight's dy * xh, and with Terms = 2 dbias's dy. */
template <int Terms> struct norm_grad_term {
    static constexpr int count = Terms;
    cuda_array dout, inp;
    const float *mean, *rstd;
    int64_t C;
    __device__ void operator()(int64_t i, int64_t c, double *acc) const
    {
        const float dy = cuda_load(dout, i * C + c), x = cuda_load(inp, i * C + c);
        const float m = mean ? mean[i] : 0.0f;
        acc[0] += (double)(dy * ((x - m) * rstd[i]));
        if constexpr (Terms > 1)
            acc[1] += (double)dy;
    }
};

usp_status cuda_layernorm_backward(cuda_array dinp, cuda_array dweight, cuda_array dbias, cuda_array dout,
                                   cuda_array inp, cuda_array weight, const float *mean, const float *rstd,
                                   int64_t n, int64_t C, cudaStream_t stream)
{
    if (n == 0)
        return USP_OK;
    layernorm_backward_kernel<<<cuda_blocks_for(n, 1), CUDA_ROW_THREADS, 0, stream>>>(dinp, dout, inp, weight, mean,
                                                                                      rstd, n, C);
    usp_status st = cuda_launched("layernorm_backward_kernel");
    if (st != USP_OK)
        return st;
    if (dbias.data) {
        const cuda_array dst[2] = {dweight, dbias};
        const norm_grad_term<2> term = {dout, inp, mean, rstd, C};
        return cuda_column_sums(dst, term, n, C, "layernorm_backward (dweight, dbias column sums)", stream);
    }
    const norm_grad_term<1> term = {dout, inp, mean, rstd, C};
    return cuda_column_sums(&dweight, term, n, C, "layernorm_backward (dweight column sums)", stream);
}

/* y = x * r * w, r = 1/sqrt(mean(x^2) + eps), the squares summed in double. */
static __global__ void rmsnorm_forward_kernel(cuda_array out, float *rstd, cuda_array inp, cuda_array weight,
                                              int64_t n, int64_t C, float eps)
{
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        const int64_t row = i * C;
        double ss = 0.0;
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
            const double x = (double)cuda_load(inp, row + c);
            ss += x * x;
        }
        const float r = (float)(1.0 / sqrt(cuda_block_reduce(ss, cuda_sum_op()) / (double)C + (double)eps));
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
            cuda_store(out, row + c, cuda_load(inp, row + c) * r * cuda_load(weight, c));
        if (threadIdx.x == 0 && rstd)
            rstd[i] = r;
    }
}

usp_status cuda_rmsnorm_forward(cuda_array out, float *rstd, cuda_array inp, cuda_array weight, int64_t n,
                                int64_t C, float eps, cudaStream_t stream)
{
    if (n == 0)
        return USP_OK;
    rmsnorm_forward_kernel<<<cuda_blocks_for(n, 1), CUDA_ROW_THREADS, 0, stream>>>(out, rstd, inp, weight, n, C, eps);
    return cuda_launched("rmsnorm_forward_kernel");
}

/* dr/dx_c = -r^3 x_c / C, so dx += r * w * dy - (r^3 / C) * x * sum_c(w_c dy_c x_c). */
static __global__ void rmsnorm_backward_kernel(cuda_array dinp, cuda_array dout, cuda_array inp, cuda_array weight,
                                               const float *rstd, int64_t n, int64_t C)
{
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        const int64_t row = i * C;
        const float r = rstd[i];
        double s = 0.0;
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
            s += (double)(cuda_load(weight, c) * cuda_load(dout, row + c) * cuda_load(inp, row + c));
        const float k = (float)((double)r * r * r * cuda_block_reduce(s, cuda_sum_op()) / (double)C);
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
            const float dx = r * cuda_load(weight, c) * cuda_load(dout, row + c) - k * cuda_load(inp, row + c);
            cuda_store(dinp, row + c, cuda_load(dinp, row + c) + dx);
        }
    }
}

usp_status cuda_rmsnorm_backward(cuda_array dinp, cuda_array dweight, cuda_array dout, cuda_array inp,
                                 cuda_array weight, const float *rstd, int64_t n, int64_t C, cudaStream_t stream)
{
    if (n == 0)
        return USP_OK;
    rmsnorm_backward_kernel<<<cuda_blocks_for(n, 1), CUDA_ROW_THREADS, 0, stream>>>(dinp, dout, inp, weight, rstd, n,
                                                                                    C);
    usp_status st = cuda_launched("rmsnorm_backward_kernel");
    if (st != USP_OK)
        return st;
    const norm_grad_term<1> term = {dout, inp, NULL, rstd, C}; /* dw = sum_rows dy * x * r */
    return cuda_column_sums(&dweight, term, n, C, "rmsnorm_backward (dweight column sums)", stream);
}

/* ---- rotary embeddings -------------------------------------------------------- */

/* One thread per (row i, pair j): dims j and j + D/2 of every head form a pair (Hugging Face's
 * rotate_half), rotated by angle = positions[i] * inv_freq[j], computed with its sine and cosine in
 * double as on the cpu (at position 10^6 a float angle is off by up to 0.03 rad); sign = -1
 * rotates back (the transpose: the backward). (a, b) -> (a cos - b sin, b cos + a sin). */
static __global__ void rope_kernel(cuda_array x, const int32_t *positions, int64_t n, int64_t H, int64_t D,
                                   const double *inv_freq, double sign)
{
    const int64_t half = D / 2, total = n * half;
    for (int64_t e = cuda_first_index(); e < total; e += cuda_grid_stride()) {
        double s, c;
        sincos((double)positions[cuda_rope_row(e, D)] * inv_freq[cuda_rope_freq(e, D)], &s, &c);
        const float cs = (float)c, sn = (float)(sign * s);
        for (int64_t h = 0; h < H; h++) {
            const int64_t a = cuda_rope_first(e, h, H, D), b = a + half;
            const float xa = cuda_load(x, a), xb = cuda_load(x, b);
            cuda_store(x, a, xa * cs - xb * sn);
            cuda_store(x, b, xb * cs + xa * sn);
        }
    }
}

usp_status cuda_rope(cuda_array x, const int32_t *positions, int64_t n, int64_t H, int64_t D,
                     const double *inv_freq, int direction, cudaStream_t stream)
{
    const int64_t total = n * (D / 2);
    if (total == 0 || H == 0)
        return USP_OK;
    rope_kernel<<<cuda_blocks_for(total, ELEM_THREADS), ELEM_THREADS, 0, stream>>>(x, positions, n, H, D, inv_freq,
                                                                                   direction < 0 ? -1.0 : 1.0);
    return cuda_launched("rope_kernel");
}
