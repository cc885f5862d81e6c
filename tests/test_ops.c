/* Compute ops on the CPU backend: GEMM (every transpose, batched, beta) against
 * a naive double-precision product, and the cost each op reports. */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "backends/cpu/cpu_backend.h"
#include "tests/check_main.h"

static double rnd(unsigned *state)
{
    *state = *state * 1664525u + 1013904223u;
    return (double)(*state >> 8) / (double)(1u << 24) * 2.0 - 1.0;
}

typedef struct cost_total {
    double flops, bytes;
    int calls;
} cost_total;

static void add_cost(void *ctx, const usp_op_cost *c)
{
    cost_total *t = ctx;
    t->flops += c->flops;
    t->bytes += c->bytes;
    t->calls++;
}

START_TEST(gemm_matches_a_naive_product_for_every_transpose)
{
    const int64_t M = 37, N = 23, K = 41, B = 3;
    usp_backend_t *be;
    ck_assert_int_eq(usp_backend_cpu_create(&be), USP_OK);
    cost_total cost = {0};
    usp_backend_set_cost_sink(be, add_cost, &cost);
    float *a, *b, *c;
    ck_assert_int_eq(usp_buffer_alloc(be, (size_t)(B * M * K) * 4, "test", (void **)&a), USP_OK);
    ck_assert_int_eq(usp_buffer_alloc(be, (size_t)(B * K * N) * 4, "test", (void **)&b), USP_OK);
    ck_assert_int_eq(usp_buffer_alloc(be, (size_t)(B * M * N) * 4, "test", (void **)&c), USP_OK);
    unsigned seed = 7;
    for (int64_t i = 0; i < B * M * K; i++) a[i] = (float)rnd(&seed);
    for (int64_t i = 0; i < B * K * N; i++) b[i] = (float)rnd(&seed);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            for (int64_t i = 0; i < B * M * N; i++) c[i] = 1.0f;
            usp_gemm_desc g = {.trans_a = ta, .trans_b = tb, .m = M, .n = N, .k = K, .alpha = 0.5f, .beta = 2.0f,
                               .a = a, .lda = ta ? M : K, .stride_a = M * K, .b = b, .ldb = tb ? K : N,
                               .stride_b = K * N, .c = c, .ldc = N, .stride_c = M * N, .batch = B};
            ck_assert_int_eq(usp_gemm(be, &g, NULL), USP_OK);
            for (int64_t p = 0; p < B; p++)
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) {
                        double want = 2.0;
                        for (int64_t k = 0; k < K; k++) {
                            double x = ta ? a[p * M * K + k * M + i] : a[p * M * K + i * K + k];
                            double y = tb ? b[p * K * N + j * K + k] : b[p * K * N + k * N + j];
                            want += 0.5 * x * y;
                        }
                        ck_assert_msg(fabs(c[p * M * N + i * N + j] - want) <= 1e-5 * (1 + fabs(want)),
                                      "ta=%d tb=%d [%ld,%ld,%ld]: %g vs %g", ta, tb, (long)p, (long)i, (long)j,
                                      (double)c[p * M * N + i * N + j], want);
                    }
        }
    ck_assert_int_eq(cost.calls, 4);
    ck_assert_double_eq_tol(cost.flops, 4 * 2.0 * M * N * K * B, 1e-6);
    ck_assert_double_eq_tol(cost.bytes, 4 * 4.0 * B * (M * K + K * N + 2 * M * N), 1e-6);
    usp_backend_destroy(be); /* frees a, b and c too */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ops");
    TCase *t = tcase_create("cpu");
    tcase_add_test(t, gemm_matches_a_naive_product_for_every_transpose);
    suite_add_tcase(s, t);
    return check_main_run(s);
}
