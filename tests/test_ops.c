/* Compute ops on the CPU backend: GEMM (every transpose, batched, beta) against
 * a naive double-precision product, and the cost each op reports, its operands'
 * ranges included. */
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

/* The last cost's operand ranges, copied (the cost's array lives while the sink runs). */
typedef struct operands_seen {
    usp_range ranges[USP_OP_OPERANDS_MAX];
    int n, calls;
} operands_seen;

static void keep_operands(void *ctx, const usp_op_cost *c)
{
    operands_seen *o = ctx;
    o->n = c->n_operands, o->calls++;
    for (int i = 0; i < c->n_operands; i++)
        o->ranges[i] = c->operands[i];
}

/* Each op's cost names the ranges core checked for it, once each, in the order checked, and the next op's
 * cost starts a new list: what the simulator's cache model reads (sim/cache_model.h). */
START_TEST(a_cost_carries_its_operands)
{
    usp_backend_t *be;
    ck_assert_int_eq(usp_backend_cpu_create(&be), USP_OK);
    operands_seen seen = {0};
    usp_backend_set_cost_sink(be, keep_operands, &seen);
    float *x, *y, *w;
    ck_assert_int_eq(usp_buffer_alloc(be, 64 * 4, "test", (void **)&x), USP_OK);
    ck_assert_int_eq(usp_buffer_alloc(be, 64 * 4, "test", (void **)&y), USP_OK);
    ck_assert_int_eq(usp_buffer_alloc(be, 8 * 4, "test", (void **)&w), USP_OK);
    ck_assert_int_eq(usp_buffer_zero(be, x, 64 * 4, NULL), USP_OK);
    ck_assert_int_eq(seen.n, 1);
    ck_assert(seen.ranges[0].ptr == x && seen.ranges[0].bytes == 256);
    /* y[8..16) = x as 8 x 8 times w as 8 x 1 */
    usp_gemm_desc g = {.m = 8, .n = 1, .k = 8, .alpha = 1, .a = x, .lda = 8, .b = w, .ldb = 1, .c = y + 8, .ldc = 1,
                       .batch = 1};
    ck_assert_int_eq(usp_gemm(be, &g, NULL), USP_OK);
    ck_assert_int_eq(seen.n, 3);
    ck_assert(seen.ranges[0].ptr == x && seen.ranges[0].bytes == 64 * 4); /* a */
    ck_assert(seen.ranges[1].ptr == w && seen.ranges[1].bytes == 8 * 4);  /* b */
    ck_assert(seen.ranges[2].ptr == y + 8 && seen.ranges[2].bytes == 8 * 4); /* c: its view, not its buffer */
    ck_assert_int_eq(usp_buffer_copy(be, y, x, 16, USP_COPY_DEVICE_TO_DEVICE, NULL), USP_OK);
    ck_assert_int_eq(seen.n, 2); /* source, destination: a new list */
    ck_assert(seen.ranges[0].ptr == x && seen.ranges[1].ptr == y && seen.ranges[1].bytes == 16);
    ck_assert_int_eq(usp_rmsnorm_forward(be, y, NULL, x, w, 8, 8, 1e-5f, NULL), USP_OK);
    ck_assert_int_eq(seen.n, 3); /* out, inp, weight; the NULL rstd none */
    ck_assert_int_eq(seen.calls, 4);
    usp_backend_destroy(be);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ops");
    TCase *t = tcase_create("cpu");
    tcase_add_test(t, gemm_matches_a_naive_product_for_every_transpose);
    tcase_add_test(t, a_cost_carries_its_operands);
    suite_add_tcase(s, t);
    return check_main_run(s);
}
