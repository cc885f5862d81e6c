/* Elementwise kernels of the cuda backend: dtype conversion, the strided
 * accumulation after all-to-all, scaling, the bias and its gradient. Each is a
 * grid-stride loop over 64-bit indices (a launch covers any n with a capped
 * grid); the bias gradient is a column sum in the fixed order of
 * cuda_reduce_geometry.h. Arithmetic in fp32 whatever the storage. */
#include "backends/cuda/cuda_grid.cuh"
#include "backends/cuda/cuda_index.h"
#include "backends/cuda/cuda_reduce.cuh"

#define ELEM_THREADS 256

static __global__ void convert_kernel(cuda_array dst, cuda_array src, int64_t n)
{
    for (int64_t i = cuda_first_index(); i < n; i += cuda_grid_stride())
        cuda_store(dst, i, cuda_load(src, i));
}

usp_status cuda_convert(cuda_array dst, cuda_array src, int64_t n, cudaStream_t stream)
{
    if (n == 0)
        return USP_OK;
    convert_kernel<<<cuda_blocks_for(n, ELEM_THREADS), ELEM_THREADS, 0, stream>>>(dst, src, n);
    return cuda_launched("convert_kernel");
}

/* Element e of the rows x row_elems block, at its offsets in dst and src. */
static __global__ void accumulate_2d_kernel(cuda_array dst, int64_t dst_stride, cuda_array src, int64_t src_stride,
                                            int64_t row_elems, int64_t total)
{
    for (int64_t e = cuda_first_index(); e < total; e += cuda_grid_stride()) {
        const int64_t d = cuda_strided_offset(e, row_elems, dst_stride);
        cuda_store(dst, d, cuda_load(dst, d) + cuda_load(src, cuda_strided_offset(e, row_elems, src_stride)));
    }
}

usp_status cuda_accumulate_2d(cuda_array dst, size_t dst_stride, cuda_array src, size_t src_stride,
                              size_t row_elems, size_t rows, cudaStream_t stream)
{
    const int64_t total = (int64_t)(row_elems * rows);
    if (total == 0)
        return USP_OK;
    accumulate_2d_kernel<<<cuda_blocks_for(total, ELEM_THREADS), ELEM_THREADS, 0, stream>>>(
        dst, (int64_t)dst_stride, src, (int64_t)src_stride, (int64_t)row_elems, total);
    return cuda_launched("accumulate_2d_kernel");
}

/* C = beta C over batch m x n matrices, 0 where beta is 0 (C is not read then: BLAS's rule, so a
 * NaN left in C does not survive, as with OpenBLAS on the cpu backend). */
static __global__ void scale_matrices_kernel(cuda_array c, float beta, int64_t m, int64_t n, int64_t ldc,
                                             int64_t stride_c, int64_t total)
{
    for (int64_t e = cuda_first_index(); e < total; e += cuda_grid_stride()) {
        const int64_t at = cuda_matrix_offset(e, m, n, ldc, stride_c);
        cuda_store(c, at, beta == 0.0f ? 0.0f : beta * cuda_load(c, at));
    }
}

usp_status cuda_scale_matrices(cuda_array c, float beta, int64_t m, int64_t n, int64_t ldc, int64_t stride_c,
                               int64_t batch, cudaStream_t stream)
{
    const int64_t total = batch * m * n;
    if (total == 0)
        return USP_OK;
    scale_matrices_kernel<<<cuda_blocks_for(total, ELEM_THREADS), ELEM_THREADS, 0, stream>>>(c, beta, m, n, ldc,
                                                                                            stride_c, total);
    return cuda_launched("scale_matrices_kernel");
}

/* x [n, C]: element e is in column e % C. */
static __global__ void add_bias_kernel(cuda_array x, cuda_array bias, int64_t C, int64_t total)
{
    for (int64_t e = cuda_first_index(); e < total; e += cuda_grid_stride())
        cuda_store(x, e, cuda_load(x, e) + cuda_load(bias, e % C));
}

usp_status cuda_add_bias(cuda_array x, cuda_array bias, int64_t n, int64_t C, cudaStream_t stream)
{
    const int64_t total = n * C;
    if (total == 0)
        return USP_OK;
    add_bias_kernel<<<cuda_blocks_for(total, ELEM_THREADS), ELEM_THREADS, 0, stream>>>(x, bias, C, total);
    return cuda_launched("add_bias_kernel");
}

/* The column-sum term of the bias gradient: dout itself, widened to double as the cpu backend does. */
struct bias_grad_term {
    static constexpr int count = 1;
    cuda_array dout;
    int64_t C;
    __device__ void operator()(int64_t i, int64_t c, double *acc) const { acc[0] += (double)cuda_load(dout, i * C + c); }
};

usp_status cuda_bias_backward(cuda_array dbias, cuda_array dout, int64_t n, int64_t C, cudaStream_t stream)
{
    const bias_grad_term term = {dout, C};
    return cuda_column_sums(&dbias, term, n, C, "bias_backward (column sums)", stream);
}
