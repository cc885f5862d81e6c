/* The index arithmetic of the cuda backend's kernels (backends/cuda/cuda_index.h),
 * checked on the CPU (no GPU needed; built with or without nvcc): the strided
 * offsets of accumulate_2d walk the rows in order; rope's pairs cover every
 * element of x [n, H, D] once, paired as rotate_half pairs them, and a rotation
 * written with them matches the cpu backend's rope in both directions; the
 * embedding gradient's scratch pieces are aligned and disjoint; a GEMM with k = 0 scales C
 * (matrix offsets) and leaves the padding of its rows. */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "backends/cpu/cpu_layers.h"
#include "backends/cuda/cuda_index.h"
#include "tests/check_main.h"

START_TEST(strided_offsets_walk_rows_in_order)
{
    const int64_t shapes[][3] = {{1, 1, 1}, {3, 5, 5}, {4, 3, 7}, {7, 16, 100}}; /* rows, row_elems, stride */
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int64_t rows = shapes[s][0], row_elems = shapes[s][1], stride = shapes[s][2];
        int64_t e = 0;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t i = 0; i < row_elems; i++, e++)
                ck_assert_int_eq(cuda_strided_offset(e, row_elems, stride), r * stride + i);
    }
}
END_TEST

START_TEST(matrix_offsets_walk_a_batch_in_order)
{
    const int64_t shapes[][5] = {{1, 1, 1, 1, 1}, {2, 3, 4, 5, 20}, {3, 5, 7, 9, 50}, {2, 4, 1, 3, 0}}; /* batch m n ld stride */
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int64_t batch = shapes[s][0], m = shapes[s][1], n = shapes[s][2], ld = shapes[s][3];
        const int64_t stride = shapes[s][4];
        int64_t e = 0;
        for (int64_t b = 0; b < batch; b++)
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++, e++)
                    ck_assert_int_eq(cuda_matrix_offset(e, m, n, ld, stride), b * stride + i * ld + j);
    }
    /* 64-bit: a [2^20, 2^12] C of a batch of 4 passes 2^31 */
    const int64_t m = (int64_t)1 << 20, n = (int64_t)1 << 12;
    ck_assert_int_eq(cuda_matrix_offset(4 * m * n - 1, m, n, n + 8, m * (n + 8)), 4 * m * (n + 8) - 9);
}
END_TEST

/* scale_matrices_kernel's body (backends/cuda/cuda_elementwise.cu, the GEMM with k = 0) on the
 * CPU: C = beta C in the matrices, 0 when beta is 0 (even over a NaN), the row padding untouched. */
START_TEST(gemm_k0_scales_c_and_leaves_padding)
{
    enum { BATCH = 2, M = 3, N = 4, LD = 6, STRIDE = M * LD };
    const float betas[] = {2.0f, 0.0f};
    for (int k = 0; k < 2; k++) {
        float c[BATCH * STRIDE];
        for (int e = 0; e < BATCH * STRIDE; e++)
            c[e] = e == 7 ? NAN : (float)e;
        for (int64_t e = 0; e < BATCH * M * N; e++) {
            const int64_t at = cuda_matrix_offset(e, M, N, LD, STRIDE);
            c[at] = betas[k] == 0.0f ? 0.0f : betas[k] * c[at];
        }
        for (int e = 0; e < BATCH * STRIDE; e++) {
            const int inside = e % LD < N;
            const float was = e == 7 ? NAN : (float)e, want = !inside ? was : betas[k] == 0.0f ? 0.0f : betas[k] * was;
            ck_assert_msg(isnan(want) ? isnan(c[e]) : c[e] == want, "beta %g element %d: %g vs %g", (double)betas[k],
                          e, (double)c[e], (double)want);
        }
    }
}
END_TEST

START_TEST(rope_pairs_cover_every_element_once)
{
    const int64_t n = 5, H = 3, D = 8, half = D / 2;
    int hits[5 * 3 * 8] = {0};
    for (int64_t e = 0; e < n * half; e++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t a = cuda_rope_first(e, h, H, D);
            ck_assert_int_eq(a / D, cuda_rope_row(e, D) * H + h); /* both in row i, head h */
            ck_assert_int_eq(a % D, cuda_rope_freq(e, D));        /* dims j and j + D/2 */
            hits[a]++, hits[a + half]++;
        }
    for (int64_t k = 0; k < n * H * D; k++)
        ck_assert_int_eq(hits[k], 1);
    /* 64-bit: the last pair of a million-token shard lands past 2^31 */
    const int64_t big_n = (int64_t)1 << 20, big_h = 32, big_d = 128;
    ck_assert_int_eq(cuda_rope_first(big_n * (big_d / 2) - 1, big_h - 1, big_h, big_d) + big_d / 2,
                     big_n * big_h * big_d - 1);
}
END_TEST

/* rope_kernel's body (backends/cuda/cuda_layers.cu) run on the CPU, pair by pair. */
static void rope_emulated(float *x, const int32_t *positions, int64_t n, int64_t H, int64_t D, const double *inv_freq,
                          double sign)
{
    for (int64_t e = 0; e < n * (D / 2); e++) {
        const double angle = (double)positions[cuda_rope_row(e, D)] * inv_freq[cuda_rope_freq(e, D)];
        const double s = sin(angle), c = cos(angle);
        const float cs = (float)c, sn = (float)(sign * s);
        for (int64_t h = 0; h < H; h++) {
            const int64_t a = cuda_rope_first(e, h, H, D), b = a + D / 2;
            const float xa = x[a], xb = x[b];
            x[a] = xa * cs - xb * sn;
            x[b] = xb * cs + xa * sn;
        }
    }
}

START_TEST(rope_with_these_indices_is_the_cpu_rope)
{
    enum { N = 4, H = 2, D = 16 };
    const int32_t positions[N] = {0, 1, 4097, 1000000};
    double inv_freq[D / 2];
    for (int j = 0; j < D / 2; j++)
        inv_freq[j] = pow(10000.0, -2.0 * j / D);
    float x[N * H * D], want[N * H * D];
    for (int k = 0; k < N * H * D; k++)
        x[k] = want[k] = (float)sin(0.37 * k + 0.1);
    usp_op op = {.p.rope = {N, H, D, 10000.0f, inv_freq}, /* the cpu kernel's op: x, positions */
                 .operand = {{want, USP_F32, N * H * D}, {(void *)positions, USP_F32, N}}};
    for (int direction = 1; direction >= -1; direction -= 2) {
        rope_emulated(x, positions, N, H, D, inv_freq, direction);
        op.kind = direction > 0 ? USP_OP_ROPE_FORWARD : USP_OP_ROPE_BACKWARD;
        if (direction > 0)
            ck_assert_int_eq(cpu_rope_forward(&op), USP_OK);
        else
            ck_assert_int_eq(cpu_rope_backward(&op), USP_OK);
        for (int k = 0; k < N * H * D; k++) /* the same expressions; a fused multiply-add may move the last bit */
            ck_assert_msg(fabsf(x[k] - want[k]) <= 1e-6f, "direction %d element %d: %.9g vs %.9g", direction, k,
                          (double)x[k], (double)want[k]);
    }
    for (int k = 0; k < N * H * D; k++) /* forward then backward: back to x */
        ck_assert_msg(fabsf(x[k] - (float)sin(0.37 * k + 0.1)) <= 1e-6f, "element %d", k);
}
END_TEST

START_TEST(sort_scratch_pieces_are_aligned_and_disjoint)
{
    const int64_t sizes[] = {1, 3, 31, 32, 33, 1000, 1 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        const int64_t n = sizes[i];
        const size_t sort_bytes = 12345;
        const cuda_sort_scratch s = cuda_sort_scratch_for(n, sort_bytes);
        const size_t at[] = {s.rows_in, s.rows_out, s.ids_out, s.sort_temp};
        const size_t need[] = {(size_t)n * 8, (size_t)n * 8, (size_t)n * 4, sort_bytes};
        for (int k = 0; k < 4; k++) {
            ck_assert_uint_eq(at[k] % CUDA_SCRATCH_ALIGN, 0);
            ck_assert_uint_le(at[k] + need[k], k < 3 ? at[k + 1] : s.bytes); /* ends before the next begins */
        }
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cuda_index");
    TCase *t = tcase_create("cuda_index");
    tcase_add_test(t, strided_offsets_walk_rows_in_order);
    tcase_add_test(t, matrix_offsets_walk_a_batch_in_order);
    tcase_add_test(t, gemm_k0_scales_c_and_leaves_padding);
    tcase_add_test(t, rope_pairs_cover_every_element_once);
    tcase_add_test(t, rope_with_these_indices_is_the_cpu_rope);
    tcase_add_test(t, sort_scratch_pieces_are_aligned_and_disjoint);
    suite_add_tcase(s, t);
    return check_main_run(s);
}
