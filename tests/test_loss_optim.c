/* Tests of the loss, optimizer and reduction ops (core/ops/ops.h) on the CPU
 * backend (backends/cpu/cpu_loss_optim.c), with the same references and
 * tolerances as test_layers.c; then every op at n = 0, bad arguments as status
 * values, and the wrappers on a backend without numerics. */
#include <check.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_backend.h"
#include "core/ops/backend_impl.h"
#include "tests/check_main.h"
#include "tests/layer_check.h"

/* ---- cross-entropy ------------------------------------------------------- */

typedef struct ce_case {
    usp_backend_t *be;
    int64_t n, V;
    float scale;
    int32_t *targets;
    float *logits, *losses;
} ce_case;

static double ce_loss(void *p)
{
    ce_case *t = p;
    ck_assert_int_eq(usp_cross_entropy(t->be, t->losses, NULL, t->logits, t->targets, t->n, t->V, t->scale, NULL),
                     USP_OK);
    double s = 0.0;
    for (int64_t i = 0; i < t->n; i++)
        s += t->scale * (double)t->losses[i];
    return s;
}

START_TEST(cross_entropy_is_logsumexp_minus_target_with_its_gradient)
{
    const int32_t targets[] = {2, -1, 10, 0, -100};
    ce_case t = {.be = new_backend(), .n = 5, .V = 11, .scale = 0.37f};
    const int64_t nv = t.n * t.V;
    t.targets = ibuf(t.be, t.n, targets), t.logits = fbuf(t.be, nv, 3), t.losses = fbuf(t.be, t.n, 1);
    t.logits[3 * t.V + 4] = 60.0f; /* exp(60) overflows a float: the max must be subtracted */
    float *dlogits = fbuf(t.be, nv, 1), *inplace = fbuf(t.be, nv, 0), *losses2 = fbuf(t.be, t.n, 1);
    ck_assert_int_eq(usp_cross_entropy(t.be, t.losses, dlogits, t.logits, t.targets, t.n, t.V, t.scale, NULL), USP_OK);
    for (int64_t i = 0; i < t.n; i++) {
        double m = -INFINITY, s = 0.0;
        for (int64_t j = 0; j < t.V; j++)
            m = fmax(m, t.logits[i * t.V + j]);
        for (int64_t j = 0; j < t.V; j++)
            s += exp(t.logits[i * t.V + j] - m);
        const double want = targets[i] < 0 ? 0.0 : m + log(s) - t.logits[i * t.V + targets[i]];
        ck_assert_msg(fabs(t.losses[i] - want) <= FWD_TOL * fmax(1.0, fabs(want)), "row %ld: loss %.9g, want %.9g",
                      (long)i, (double)t.losses[i], want);
        for (int64_t j = 0; targets[i] < 0 && j < t.V; j++)
            ck_assert_float_eq(dlogits[i * t.V + j], 0.0f); /* ignored: exactly zero */
    }
    /* in place: the same bits as out of place */
    memcpy(inplace, t.logits, (size_t)nv * sizeof *inplace);
    ck_assert_int_eq(usp_cross_entropy(t.be, losses2, inplace, inplace, t.targets, t.n, t.V, t.scale, NULL), USP_OK);
    ck_assert_mem_eq(inplace, dlogits, (size_t)nv * sizeof *inplace);
    ck_assert_mem_eq(losses2, t.losses, (size_t)t.n * sizeof *losses2);
    float *zero = calloc((size_t)nv, sizeof *zero);
    double *fd = finite_differences(ce_loss, &t, t.logits, nv);
    expect_grad(dlogits, zero, fd, nv, "dlogits");
    free(zero), free(fd);
    /* a target outside the vocabulary is an error naming it, not a read out of bounds */
    t.targets[2] = 11;
    ck_assert_int_eq(usp_cross_entropy(t.be, t.losses, dlogits, t.logits, t.targets, t.n, t.V, 1, NULL),
                     USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "target 11 of row 2"));
    usp_backend_destroy(t.be);
}
END_TEST

/* A vocabulary of GPT-2's size order, in pieces (the kernel sums e^z by 512), against the
 * analytic gradient in double. */
START_TEST(cross_entropy_over_a_large_vocabulary_matches_double_softmax)
{
    usp_backend_t *be = new_backend();
    const int64_t n = 3, V = 1300, nv = n * V;
    const int32_t targets[] = {1299, 0, 700};
    int32_t *tg = ibuf(be, n, targets);
    float *z = fbuf(be, nv, 8), *dz = fbuf(be, nv, 0), *loss = fbuf(be, n, 0), *loss_only = fbuf(be, n, 0);
    ck_assert_int_eq(usp_cross_entropy(be, loss, dz, z, tg, n, V, 0.5f, NULL), USP_OK);
    ck_assert_int_eq(usp_cross_entropy(be, loss_only, NULL, z, tg, n, V, 0.5f, NULL), USP_OK);
    ck_assert_mem_eq(loss, loss_only, (size_t)n * sizeof *loss); /* the gradient changes no bit of the loss */
    double *want = dvec(nv);
    for (int64_t i = 0; i < n; i++) {
        double m = -INFINITY, s = 0.0;
        for (int64_t j = 0; j < V; j++)
            m = fmax(m, z[i * V + j]);
        for (int64_t j = 0; j < V; j++)
            s += exp(z[i * V + j] - m);
        for (int64_t j = 0; j < V; j++)
            want[i * V + j] = 0.5 * (exp(z[i * V + j] - m) / s - (j == targets[i]));
        const double l = m + log(s) - z[i * V + targets[i]];
        ck_assert_msg(fabs(loss[i] - l) <= FWD_TOL * fmax(1.0, l), "row %ld: %.9g vs %.9g", (long)i,
                      (double)loss[i], l);
    }
    ck_assert_double_le(rel_err_f(dz, want, nv), 1e-5);
    free(want);
    usp_backend_destroy(be);
}
END_TEST

/* ---- AdamW ---------------------------------------------------------------- */

START_TEST(adamw_matches_a_double_reference_for_three_steps)
{
    usp_backend_t *be = new_backend();
    const int64_t n = 37;
    const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
    float *p = fbuf(be, n, 1), *g = fbuf(be, n, 0), *m = fbuf(be, n, 0), *v = fbuf(be, n, 0);
    double *rp = dvec(n), *rm = dvec(n), *rv = dvec(n);
    for (int64_t i = 0; i < n; i++)
        rp[i] = p[i];
    for (int t = 1; t <= 3; t++) {
        for (int64_t i = 0; i < n; i++)
            g[i] = (i == 5 ? 0.0f : rnd()) * (float)t; /* a zero gradient: only decay moves it */
        ck_assert_int_eq(usp_adamw_step(be, p, g, m, v, n, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd,
                                        t, NULL),
                         USP_OK);
        for (int64_t i = 0; i < n; i++) { /* PyTorch's order: decay, then the Adam update */
            rm[i] = b1 * rm[i] + (1 - b1) * g[i];
            rv[i] = b2 * rv[i] + (1 - b2) * (double)g[i] * g[i];
            rp[i] *= 1 - lr * wd;
            rp[i] -= lr * (rm[i] / (1 - pow(b1, t))) / (sqrt(rv[i] / (1 - pow(b2, t))) + eps);
        }
        ck_assert_double_le(rel_err_f(p, rp, n), FWD_TOL);
        ck_assert_double_le(rel_err_f(m, rm, n), FWD_TOL);
        ck_assert_double_le(rel_err_f(v, rv, n), FWD_TOL);
    }
    ck_assert_int_eq(usp_adamw_step(be, p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 0, NULL), USP_ERR_CONFIG);
    free(rp), free(rm), free(rv);
    usp_backend_destroy(be);
}
END_TEST

/* ---- reductions, scale, bias ------------------------------------------------ */

START_TEST(sum_squares_is_exact_and_the_same_for_any_thread_count)
{
    usp_backend_t *be = new_backend();
    const int64_t n = 100003; /* above the parallel threshold, not a multiple of the chunks */
    float *x = fbuf(be, n, 3);
    long double want = 0;
    for (int64_t i = 0; i < n; i++)
        want += (long double)x[i] * x[i];
    const int saved = omp_get_max_threads();
    double got[3];
    for (int th = 1; th <= 3; th++) {
        omp_set_num_threads(th);
        ck_assert_int_eq(usp_sum_squares(be, &got[th - 1], x, n, NULL), USP_OK);
    }
    omp_set_num_threads(saved);
    ck_assert_double_le(fabs(got[0] - (double)want), 1e-12 * (double)want);
    ck_assert_mem_eq(&got[0], &got[1], sizeof got[0]);
    ck_assert_mem_eq(&got[0], &got[2], sizeof got[0]);
    usp_backend_destroy(be);
}
END_TEST

START_TEST(scale_add_bias_and_bias_backward_match_references)
{
    usp_backend_t *be = new_backend();
    const int64_t n = 9, C = 24, nc = n * C;
    float *x = fbuf(be, nc, 1), *bias = fbuf(be, C, 1), *w = fbuf(be, nc, 1), *dbias = fbuf(be, C, 1);
    float *x0 = host_copy(x, nc), *dbias0 = host_copy(dbias, C);
    double *want = dvec(nc), *colsum = dvec(C);
    ck_assert_int_eq(usp_scale(be, x, -0.5f, nc, NULL), USP_OK);
    for (int64_t k = 0; k < nc; k++)
        want[k] = -0.5 * x0[k];
    ck_assert_double_le(rel_err_f(x, want, nc), FWD_TOL);
    ck_assert_int_eq(usp_add_bias(be, x, bias, n, C, NULL), USP_OK);
    for (int64_t k = 0; k < nc; k++)
        want[k] += bias[k % C];
    ck_assert_double_le(rel_err_f(x, want, nc), FWD_TOL);
    /* d/dbias of sum((x + bias) * w) is the column sum of w */
    ck_assert_int_eq(usp_bias_backward(be, dbias, w, n, C, NULL), USP_OK);
    for (int64_t k = 0; k < nc; k++)
        colsum[k % C] += w[k];
    double *got = added(dbias, dbias0, C);
    ck_assert_double_le(rel_err(got, colsum, C), 1e-6);
    free(x0), free(dbias0), free(want), free(colsum), free(got);
    usp_backend_destroy(be);
}
END_TEST

/* Every op big enough to run in parallel, with `threads` threads; all outputs in one array. */
static float *parallel_outputs(int threads, int64_t *count)
{
    omp_set_num_threads(threads);
    layer_check_seed = 777u;
    usp_backend_t *be = new_backend();
    const int64_t n = 600, C = 80, V = 9, nc = n * C;
    int32_t ids[600];
    for (int64_t i = 0; i < n; i++)
        ids[i] = (int32_t)((i * 7) % V);
    int32_t *tok = ibuf(be, n, ids);
    float *inp = fbuf(be, nc, 1), *dout = fbuf(be, nc, 1), *wgt = fbuf(be, C, 1), *out = fbuf(be, nc, 0);
    float *mean = fbuf(be, n, 0), *rstd = fbuf(be, n, 0), *dinp = fbuf(be, nc, 0), *dw = fbuf(be, C, 0);
    float *db = fbuf(be, C, 0), *dwte = fbuf(be, V * C, 0), *loss = fbuf(be, n, 0), *dlog = fbuf(be, nc, 0);
    ck_assert_int_eq(usp_layernorm_forward(be, out, mean, rstd, inp, wgt, NULL, n, C, 1e-5f, NULL), USP_OK);
    ck_assert_int_eq(usp_layernorm_backward(be, dinp, dw, db, dout, inp, wgt, mean, rstd, n, C, NULL), USP_OK);
    ck_assert_int_eq(usp_rmsnorm_backward(be, dinp, dw, dout, inp, wgt, rstd, n, C, NULL), USP_OK);
    ck_assert_int_eq(usp_bias_backward(be, db, dout, n, C, NULL), USP_OK);
    ck_assert_int_eq(usp_embedding_backward(be, dwte, NULL, dout, tok, NULL, n, C, NULL), USP_OK);
    ck_assert_int_eq(usp_cross_entropy(be, loss, dlog, inp, tok, n, C, 1.0f, NULL), USP_OK);
    const float *parts[] = {out, dinp, dw, db, dwte, loss, dlog};
    const int64_t sizes[] = {nc, nc, C, C, V * C, n, nc};
    *count = 0;
    for (int k = 0; k < 7; k++)
        *count += sizes[k];
    float *all = malloc((size_t)*count * sizeof *all), *at = all;
    for (int k = 0; k < 7; k++)
        memcpy(at, parts[k], (size_t)sizes[k] * sizeof *at), at += sizes[k];
    usp_backend_destroy(be);
    return all;
}

START_TEST(thread_count_changes_no_bit)
{
    const int saved = omp_get_max_threads();
    int64_t n1, n2, n3;
    float *a = parallel_outputs(1, &n1), *b = parallel_outputs(2, &n2), *c = parallel_outputs(3, &n3);
    omp_set_num_threads(saved);
    ck_assert_mem_eq(a, b, (size_t)n1 * sizeof *a);
    ck_assert_mem_eq(a, c, (size_t)n1 * sizeof *a);
    free(a), free(b), free(c);
}
END_TEST

/* ---- n = 0, bad arguments, and a backend without numerics --------------------- */

typedef struct cost_log {
    int calls;
    double flops, bytes, min_bytes;
} cost_log;

static void log_cost(void *ctx, const usp_op_cost *c)
{
    cost_log *l = ctx;
    l->min_bytes = l->calls ? fmin(l->min_bytes, c->bytes) : c->bytes;
    l->calls++, l->flops += c->flops, l->bytes += c->bytes;
}

#define EVERY_OP 18

/* Every op on n rows of C = 8 (rope: H = 2, D = 4; V = 8), every buffer argument `f`
 * (room for 8n floats) or `ids` (n ids), or NULL when n = 0. */
static void call_every_op(usp_backend_t *be, int64_t n, float *f, int32_t *ids)
{
    double ss = -1.0;
    ck_assert_int_eq(usp_embedding_forward(be, f, ids, ids, f, f, n, 8, NULL), USP_OK);
    ck_assert_int_eq(usp_embedding_backward(be, f, f, f, ids, ids, n, 8, NULL), USP_OK);
    ck_assert_int_eq(usp_layernorm_forward(be, f, f, f, f, f, f, n, 8, 1e-5f, NULL), USP_OK);
    ck_assert_int_eq(usp_layernorm_backward(be, f, f, f, f, f, f, f, f, n, 8, NULL), USP_OK);
    ck_assert_int_eq(usp_rmsnorm_forward(be, f, f, f, f, n, 8, 1e-5f, NULL), USP_OK);
    ck_assert_int_eq(usp_rmsnorm_backward(be, f, f, f, f, f, f, n, 8, NULL), USP_OK);
    ck_assert_int_eq(usp_gelu_tanh_forward(be, f, f, n, NULL), USP_OK);
    ck_assert_int_eq(usp_gelu_tanh_backward(be, f, f, f, n, NULL), USP_OK);
    ck_assert_int_eq(usp_swiglu_forward(be, f, f, f, n, NULL), USP_OK);
    ck_assert_int_eq(usp_swiglu_backward(be, f, f, f, f, f, n, NULL), USP_OK);
    ck_assert_int_eq(usp_rope_forward(be, f, ids, n, 2, 4, 1e4f, NULL, NULL), USP_OK);
    ck_assert_int_eq(usp_rope_backward(be, f, ids, n, 2, 4, 1e4f, NULL, NULL), USP_OK);
    ck_assert_int_eq(usp_cross_entropy(be, f, f, f, ids, n, 8, 1.0f, NULL), USP_OK);
    ck_assert_int_eq(usp_adamw_step(be, f, f, f, f, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, NULL), USP_OK);
    ck_assert_int_eq(usp_sum_squares(be, &ss, f, n, NULL), USP_OK);
    ck_assert_double_eq(ss, 0.0); /* n = 0, or no numerics */
    ck_assert_int_eq(usp_scale(be, f, 2.0f, n, NULL), USP_OK);
    ck_assert_int_eq(usp_add_bias(be, f, f, n, 8, NULL), USP_OK);
    ck_assert_int_eq(usp_bias_backward(be, f, f, n, 8, NULL), USP_OK);
}

START_TEST(every_op_accepts_zero_rows)
{
    usp_backend_t *be = new_backend();
    cost_log log = {0};
    usp_backend_set_cost_sink(be, log_cost, &log);
    call_every_op(be, 0, NULL, NULL); /* NULL buffers: nothing to do, nothing reported */
    ck_assert_int_eq(log.calls, 0);
    usp_backend_destroy(be);
}
END_TEST

START_TEST(bad_arguments_are_status_values_naming_the_input)
{
    usp_backend_t *be = new_backend();
    float *x = fbuf(be, 64, 1), *w = fbuf(be, 8, 1), host[64] = {0};
    int32_t zeros[8] = {0};
    int32_t *pos = ibuf(be, 8, zeros);
    ck_assert_int_eq(usp_layernorm_forward(be, x, NULL, NULL, x, w, NULL, 8, 0, 1e-5f, NULL), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "C = 0"));
    ck_assert_int_eq(usp_rmsnorm_forward(be, x, NULL, x, w, 8, 8, -1.0f, NULL), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "eps = -1"));
    ck_assert_int_eq(usp_rope_forward(be, x, pos, 8, 1, 7, 1e4f, NULL, NULL), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "D = 7"));
    ck_assert_int_eq(usp_rope_forward(be, x, pos, 8, 1, 8, 0.0f, NULL, NULL), USP_ERR_CONFIG);
    const double bad_freq[4] = {1.0, 0.5, -0.25, 0.125};
    ck_assert_int_eq(usp_rope_forward(be, x, pos, 8, 1, 8, 1e4f, bad_freq, NULL), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "inverse frequency 2 = -0.25"));
    ck_assert_int_eq(usp_scale(be, x, 1.0f, -1, NULL), USP_ERR_CONFIG);
    /* buffers: one row too many for x, a host array, a NULL that is needed */
    ck_assert_int_eq(usp_gelu_tanh_forward(be, x, x, 65, NULL), USP_ERR_RUNTIME);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "out ("));
    ck_assert_int_eq(usp_gelu_tanh_forward(be, x, host, 64, NULL), USP_ERR_RUNTIME);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "inp ("));
    ck_assert_int_eq(usp_add_bias(be, x, NULL, 8, 8, NULL), USP_ERR_RUNTIME);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "bias is NULL"));
    usp_backend_destroy(be);
}
END_TEST

/* A backend with host memory and no layer slots: has_numerics decides whether that is allowed. */
static usp_status host_alloc(void *ctx, size_t bytes, void **out)
{
    (void)ctx;
    *out = malloc(bytes);
    return *out ? USP_OK : USP_ERR_RUNTIME;
}
static void host_free(void *ctx, void *ptr) { (void)ctx, free(ptr); }
static const usp_backend_i shapes_only = {.api_version = USP_BACKEND_API_VERSION, .name = "shapes", .has_numerics = 0,
                                          .alloc = host_alloc, .free = host_free};
static const usp_backend_i numbers_missing = {.api_version = USP_BACKEND_API_VERSION, .name = "partial",
                                              .has_numerics = 1, .alloc = host_alloc, .free = host_free};

START_TEST(a_backend_without_numerics_needs_no_layer_slots)
{
    usp_backend_t *be;
    ck_assert_int_eq(usp_backend_create(&shapes_only, NULL, &be), USP_OK);
    cost_log log = {0};
    usp_backend_set_cost_sink(be, log_cost, &log);
    float *x;
    int32_t *ids;
    ck_assert_int_eq(usp_buffer_alloc(be, 4 * 32, "test", (void **)&x), USP_OK);
    ck_assert_int_eq(usp_buffer_alloc(be, 4 * 4, "test", (void **)&ids), USP_OK);
    double ss = -1.0;
    ck_assert_int_eq(usp_layernorm_forward(be, x, x, x, x, x, NULL, 4, 8, 1e-5f, NULL), USP_OK);
    ck_assert_int_eq(usp_sum_squares(be, &ss, x, 32, NULL), USP_OK);
    ck_assert_double_eq(ss, 0.0);
    ck_assert_int_eq(log.calls, 2);
    ck_assert_double_eq_tol(log.flops, 8.0 * 32 + 2.0 * 32, 1e-9); /* layernorm 8 per element, sum_squares 2 */
    ck_assert_double_eq_tol(log.bytes, 4.0 * (2 * 32 + 2 * 8 + 2 * 4) + 4.0 * 32, 1e-9);
    log = (cost_log){0};
    call_every_op(be, 4, x, ids); /* every op is its cost alone */
    ck_assert_int_eq(log.calls, EVERY_OP);
    ck_assert_double_gt(log.min_bytes, 0.0);
    usp_backend_destroy(be);
    ck_assert_int_eq(usp_backend_create(&numbers_missing, NULL, &be), USP_OK);
    ck_assert_int_eq(usp_buffer_alloc(be, 4 * 32, "test", (void **)&x), USP_OK);
    ck_assert_int_eq(usp_scale(be, x, 2.0f, 32, NULL), USP_ERR_RUNTIME);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "no scale op"));
    usp_backend_destroy(be);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("loss_optim");
    TCase *t = tcase_create("ops");
    tcase_add_test(t, cross_entropy_is_logsumexp_minus_target_with_its_gradient);
    tcase_add_test(t, cross_entropy_over_a_large_vocabulary_matches_double_softmax);
    tcase_add_test(t, adamw_matches_a_double_reference_for_three_steps);
    tcase_add_test(t, sum_squares_is_exact_and_the_same_for_any_thread_count);
    tcase_add_test(t, scale_add_bias_and_bias_backward_match_references);
    tcase_add_test(t, thread_count_changes_no_bit);
    tcase_add_test(t, every_op_accepts_zero_rows);
    tcase_add_test(t, bad_arguments_are_status_values_naming_the_input);
    tcase_add_test(t, a_backend_without_numerics_needs_no_layer_slots);
    suite_add_tcase(s, t);
    return check_main_run(s);
}
