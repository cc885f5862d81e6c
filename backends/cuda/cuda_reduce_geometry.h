/* The fixed geometry of the cuda backend's deterministic reductions, in plain C
 * (compiled by gcc for its unit test, by nvcc for the kernels).
 *
 * Sums over rows (dweight, dbias): the n rows are cut into chunks whose bounds
 * depend on n alone. Pass 1 writes, for every chunk k and column c, the sum of
 * its rows in row order (double); pass 2 adds the chunk partials of a column in
 * chunk order. So the order of every addition is a function of the shape: the
 * same bits on every run, whatever the device or the launch schedule.
 *
 * Sums over all elements (sum_squares): a fixed grid of CUDA_SUMSQ_BLOCKS blocks
 * of CUDA_SUMSQ_THREADS threads; thread g of the grid sums elements g, g + G,
 * g + 2G, ... (G = blocks * threads) in that order, each block adds its threads
 * by a fixed tree (cuda_block_reduce, cuda_reduce.cuh), and one thread adds the block partials in
 * block order. */
#ifndef USP_CUDA_REDUCE_GEOMETRY_H
#define USP_CUDA_REDUCE_GEOMETRY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define CUDA_GEOMETRY_FN static inline __host__ __device__
#else
#define CUDA_GEOMETRY_FN static inline
#endif

/* Rows per chunk at least: below this a chunk's launch overhead beats its work. */
#define CUDA_REDUCE_ROWS_MIN 64
/* Chunks at most: bounds the partials to CUDA_REDUCE_CHUNKS_MAX * C doubles per term. */
#define CUDA_REDUCE_CHUNKS_MAX 128
/* Threads per block of the column-sum kernels (one column each). */
#define CUDA_REDUCE_THREADS 256

/* The grid of sum_squares: fixed, so that the order is too. */
#define CUDA_SUMSQ_BLOCKS 512
#define CUDA_SUMSQ_THREADS 256

/* How `rows` rows are cut into chunks of chunk_rows (the last may be shorter; none is empty). */
typedef struct cuda_reduce_geometry {
    int64_t rows;
    int64_t chunk_rows;
    int64_t chunks;
} cuda_reduce_geometry;

/* The chunking of `rows` rows (rows >= 0; 0 rows: 0 chunks). */
CUDA_GEOMETRY_FN cuda_reduce_geometry cuda_reduce_geometry_for(int64_t rows)
{
    cuda_reduce_geometry p = {rows, 0, 0};
    if (rows <= 0)
        return p;
    int64_t chunks = rows / CUDA_REDUCE_ROWS_MIN; /* so that chunk_rows >= CUDA_REDUCE_ROWS_MIN when chunks > 1 */
    if (chunks < 1)
        chunks = 1;
    if (chunks > CUDA_REDUCE_CHUNKS_MAX)
        chunks = CUDA_REDUCE_CHUNKS_MAX;
    p.chunk_rows = (rows + chunks - 1) / chunks;
    p.chunks = (rows + p.chunk_rows - 1) / p.chunk_rows; /* rounding up chunk_rows may leave fewer chunks */
    return p;
}

/* First row of chunk k. */
CUDA_GEOMETRY_FN int64_t cuda_reduce_chunk_begin(cuda_reduce_geometry p, int64_t k) { return k * p.chunk_rows; }

/* One past the last row of chunk k. */
CUDA_GEOMETRY_FN int64_t cuda_reduce_chunk_end(cuda_reduce_geometry p, int64_t k)
{
    const int64_t end = (k + 1) * p.chunk_rows;
    return end < p.rows ? end : p.rows;
}

/* Doubles of scratch for `terms` column sums of C columns: partial[(k * terms + t) * C + c]. */
CUDA_GEOMETRY_FN size_t cuda_reduce_partials(cuda_reduce_geometry p, int64_t C, int terms)
{
    return (size_t)p.chunks * (size_t)terms * (size_t)C;
}

#endif
