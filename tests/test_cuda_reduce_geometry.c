/* The fixed reduction geometry of the cuda backend (backends/cuda/cuda_reduce_geometry.h),
 * checked on the CPU (no GPU needed; built with or without nvcc): the row chunks
 * cover every row once, in order, within their bounds; the two-pass column sum
 * and the sum of squares, emulated in the kernels' exact order of additions,
 * agree with a plain sum in double. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "backends/cuda/cuda_reduce_geometry.h"
#include "tests/check_main.h"

/* Chunk bounds of a plan: contiguous, non-empty, covering [0, rows) once, at most the maximum count,
 * not cut finer than CUDA_REDUCE_ROWS_MIN rows. Returns what is wrong, or NULL (one assertion per
 * plan: Check's assertions cost a system call each, and this runs on 20000 plans). */
static const char *plan_fault(int64_t rows)
{
    const cuda_reduce_geometry p = cuda_reduce_geometry_for(rows);
    if (p.rows != rows)
        return "rows not kept";
    if (rows == 0)
        return p.chunks == 0 ? NULL : "chunks of no rows";
    if (p.chunks < 1 || p.chunks > CUDA_REDUCE_CHUNKS_MAX)
        return "chunk count out of [1, CUDA_REDUCE_CHUNKS_MAX]";
    if (p.chunks > 1 && p.chunk_rows < CUDA_REDUCE_ROWS_MIN)
        return "chunks under CUDA_REDUCE_ROWS_MIN rows";
    int64_t next = 0;
    for (int64_t k = 0; k < p.chunks; k++) {
        const int64_t begin = cuda_reduce_chunk_begin(p, k), end = cuda_reduce_chunk_end(p, k);
        if (begin != next)
            return "a chunk does not start where the previous ended";
        if (end <= begin)
            return "an empty chunk";
        if (end - begin > p.chunk_rows)
            return "a chunk longer than chunk_rows";
        next = end;
    }
    return next == rows ? NULL : "the chunks do not end at the last row";
}

static void check_plan_covers(int64_t rows)
{
    const char *fault = plan_fault(rows);
    ck_assert_msg(fault == NULL, "rows %lld: %s", (long long)rows, fault ? fault : "");
}

START_TEST(chunks_cover_every_row_once_in_order)
{
    for (int64_t rows = 0; rows <= 20000; rows++)
        check_plan_covers(rows);
    const int64_t large[] = {1 << 20, (1 << 20) + 1, 1000003, (int64_t)1 << 31, ((int64_t)1 << 31) + 7, 3000000019LL};
    for (size_t i = 0; i < sizeof large / sizeof *large; i++)
        check_plan_covers(large[i]);
}
END_TEST

START_TEST(partials_size_is_chunks_times_terms_times_columns)
{
    const cuda_reduce_geometry p = cuda_reduce_geometry_for(100000);
    ck_assert_int_eq(p.chunks, CUDA_REDUCE_CHUNKS_MAX);
    ck_assert_uint_eq(cuda_reduce_partials(p, 768, 2), (size_t)CUDA_REDUCE_CHUNKS_MAX * 2 * 768);
    ck_assert_uint_eq(cuda_reduce_partials(cuda_reduce_geometry_for(0), 768, 2), 0);
}
END_TEST

/* A value in [-1, 1) from a fixed sequence (the same on every run). */
static float next_value(uint64_t *state)
{
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((double)(*state >> 40) / (double)(1ULL << 24) * 2.0 - 1.0);
}

/* The column sums as the two kernels of cuda_reduce.cuh add them: per chunk, rows in order
 * (cuda_column_partials_kernel), then chunks in order (cuda_column_finish_kernel). */
static void column_sums_emulated(double *out, const float *x, int64_t n, int64_t C)
{
    const cuda_reduce_geometry p = cuda_reduce_geometry_for(n);
    double *partial = calloc(cuda_reduce_partials(p, C, 1) + 1, sizeof *partial);
    for (int64_t k = 0; k < p.chunks; k++)
        for (int64_t c = 0; c < C; c++) {
            double acc = 0.0;
            for (int64_t i = cuda_reduce_chunk_begin(p, k); i < cuda_reduce_chunk_end(p, k); i++)
                acc += (double)x[i * C + c];
            partial[k * C + c] = acc;
        }
    for (int64_t c = 0; c < C; c++) {
        double s = 0.0;
        for (int64_t k = 0; k < p.chunks; k++)
            s += partial[k * C + c];
        out[c] = s;
    }
    free(partial);
}

START_TEST(chunked_column_sums_match_a_plain_sum)
{
    const int64_t shapes[][2] = {{1, 5}, {63, 3}, {64, 7}, {65, 7}, {1000, 33}, {12345, 17}, {100003, 4}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int64_t n = shapes[s][0], C = shapes[s][1];
        float *x = malloc((size_t)(n * C) * sizeof *x);
        double *got = malloc((size_t)C * sizeof *got);
        uint64_t state = 42 + s;
        for (int64_t i = 0; i < n * C; i++)
            x[i] = next_value(&state);
        column_sums_emulated(got, x, n, C);
        for (int64_t c = 0; c < C; c++) {
            double want = 0.0, mag = 0.0;
            for (int64_t i = 0; i < n; i++)
                want += (double)x[i * C + c], mag += fabs((double)x[i * C + c]);
            /* any order of n additions is within (n - 1) u sum|x| of the exact sum (u = DBL_EPSILON / 2):
             * the two orders differ by at most twice that, far below float precision */
            ck_assert_msg(fabs(got[c] - want) <= (double)n * DBL_EPSILON * mag,
                          "n %lld C %lld column %lld: %.17g vs %.17g", (long long)n, (long long)C, (long long)c,
                          got[c], want);
        }
        free(x);
        free(got);
    }
}
END_TEST

/* cuda_block_reduce's tree over `threads` lanes (a power of two): lane[t] += lane[t + s], s halving. */
static double tree_sum(double *lane, int threads)
{
    for (int s = threads / 2; s > 0; s /= 2)
        for (int t = 0; t < s; t++)
            lane[t] += lane[t + s];
    return lane[0];
}

/* sum_squares as its two kernels add: grid-stride per thread, the tree per block, blocks in order. */
static double sum_squares_emulated(const float *x, int64_t n)
{
    const int64_t grid = (int64_t)CUDA_SUMSQ_BLOCKS * CUDA_SUMSQ_THREADS;
    double lane[CUDA_SUMSQ_THREADS], total = 0.0;
    for (int b = 0; b < CUDA_SUMSQ_BLOCKS; b++) {
        for (int t = 0; t < CUDA_SUMSQ_THREADS; t++) {
            double s = 0.0;
            for (int64_t i = (int64_t)b * CUDA_SUMSQ_THREADS + t; i < n; i += grid)
                s += (double)x[i] * (double)x[i];
            lane[t] = s;
        }
        total += tree_sum(lane, CUDA_SUMSQ_THREADS);
    }
    return total;
}

START_TEST(sum_squares_order_matches_a_plain_sum)
{
    const int64_t sizes[] = {1, 7, 255, 256, 131071, 131072, 131073, 1000003};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        const int64_t n = sizes[s];
        float *x = malloc((size_t)n * sizeof *x);
        uint64_t state = 7 + s;
        double want = 0.0;
        for (int64_t i = 0; i < n; i++) {
            x[i] = next_value(&state);
            want += (double)x[i] * (double)x[i];
        }
        const double got = sum_squares_emulated(x, n);
        ck_assert_msg(fabs(got - want) <= (double)n * DBL_EPSILON * want, /* the bound above, terms >= 0 */ "n %lld: %.17g vs %.17g", (long long)n, got, want);
        ck_assert(sum_squares_emulated(x, n) == got); /* an order of the shape alone: the same bits again */
        free(x);
    }
}
END_TEST

START_TEST(threads_per_block_are_powers_of_two)
{
    /* cuda_block_reduce's tree halves the lanes: a power of two <= 1024 */
    const int threads[] = {CUDA_SUMSQ_THREADS, CUDA_REDUCE_THREADS};
    for (size_t i = 0; i < sizeof threads / sizeof *threads; i++) {
        ck_assert_int_le(threads[i], 1024);
        ck_assert_int_eq(threads[i] & (threads[i] - 1), 0);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cuda_reduce_geometry");
    TCase *t = tcase_create("cuda_reduce_geometry");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, chunks_cover_every_row_once_in_order);
    tcase_add_test(t, partials_size_is_chunks_times_terms_times_columns);
    tcase_add_test(t, chunked_column_sums_match_a_plain_sum);
    tcase_add_test(t, sum_squares_order_matches_a_plain_sum);
    tcase_add_test(t, threads_per_block_are_powers_of_two);
    suite_add_tcase(s, t);
    return check_main_run(s);
}
