/* The index arithmetic of the cuda backend's kernels, in plain C (compiled by
 * gcc for its unit test, tests/test_cuda_index.c, and by nvcc for the
 * kernels): where a flat grid-stride index lands in a strided or rotary
 * layout, and how one scratch allocation is carved. 64-bit throughout: at a
 * million tokens, n * H * D passes 2^31. */
#ifndef USP_CUDA_INDEX_H
#define USP_CUDA_INDEX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define CUDA_INDEX_FN static inline __host__ __device__
#else
#define CUDA_INDEX_FN static inline
#endif

/* Element e of a block of rows of row_elems elements, at `stride` elements from row to row:
 * row e / row_elems, column e % row_elems. */
CUDA_INDEX_FN int64_t cuda_strided_offset(int64_t e, int64_t row_elems, int64_t stride)
{
    return e / row_elems * stride + e % row_elems;
}

/* Element e of `batch` row-major m x n matrices, counted row by row and matrix by matrix: its
 * offset at row stride ld and matrix stride `stride` (C of a GEMM with k = 0, cuda_gemm.c). */
CUDA_INDEX_FN int64_t cuda_matrix_offset(int64_t e, int64_t m, int64_t n, int64_t ld, int64_t stride)
{
    const int64_t row = e / n;
    return row / m * stride + row % m * ld + e % n;
}

/* Rotary pairs of x [n, H, D]: pair e = i * (D/2) + j is frequency j of row i (one angle for all
 * heads); in head h its elements are cuda_rope_first(...) and that + D/2 (rotate_half's pairing). */
CUDA_INDEX_FN int64_t cuda_rope_row(int64_t e, int64_t D) { return e / (D / 2); }

/* Frequency index j of pair e. */
CUDA_INDEX_FN int64_t cuda_rope_freq(int64_t e, int64_t D) { return e % (D / 2); }

/* Offset in x of the first element of pair e in head h (the second is D/2 further). */
CUDA_INDEX_FN int64_t cuda_rope_first(int64_t e, int64_t h, int64_t H, int64_t D)
{
    return (cuda_rope_row(e, D) * H + h) * D + cuda_rope_freq(e, D);
}

/* Alignment of each piece carved from one scratch allocation (that of cudaMalloc's pointers). */
#define CUDA_SCRATCH_ALIGN 256

/* Bytes rounded up to the next multiple of CUDA_SCRATCH_ALIGN. */
CUDA_INDEX_FN size_t cuda_scratch_round(size_t bytes)
{
    return (bytes + CUDA_SCRATCH_ALIGN - 1) / CUDA_SCRATCH_ALIGN * CUDA_SCRATCH_ALIGN;
}

/* Byte offsets in the embedding gradient's scratch for n ids: the row numbers before and after
 * the sort (int64), the sorted ids (int32), then the sort's own temporary storage (sort_bytes). */
typedef struct cuda_sort_scratch {
    size_t rows_in, rows_out, ids_out, sort_temp, bytes;
} cuda_sort_scratch;

/* The carving of the sort scratch, each piece aligned, `bytes` the total to allocate. */
CUDA_INDEX_FN cuda_sort_scratch cuda_sort_scratch_for(int64_t n, size_t sort_bytes)
{
    cuda_sort_scratch s;
    s.rows_in = 0;
    s.rows_out = s.rows_in + cuda_scratch_round((size_t)n * sizeof(int64_t));
    s.ids_out = s.rows_out + cuda_scratch_round((size_t)n * sizeof(int64_t));
    s.sort_temp = s.ids_out + cuda_scratch_round((size_t)n * sizeof(int32_t));
    s.bytes = s.sort_temp + cuda_scratch_round(sort_bytes);
    return s;
}

#endif
