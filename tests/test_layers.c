/* Tests of the transformer layer ops (core/ops/ops.h) on the CPU backend
 * (backends/cpu/cpu_layers.c).
 *
 * Forwards are compared with naive double-precision references written here
 * from the formulas (relative error below 1e-6, see rel_err). Backwards are
 * compared with central finite differences of the f32 forward for the scalar
 * loss L = sum(out * w), w random, summed in double (relative error below 1e-3
 * with a step of 1e-2 on O(1) inputs: truncation O(h^2) and rounding
 * O(1e-7 / h) both stay near 1e-4; measured at most 1.3e-4). Gradients that
 * "accumulate" start from non-zero values, so a kernel that overwrites fails.
 * Then the properties the model relies on: rope's relative-position dot
 * product, rope backward undoes forward, ignored targets, a vocabulary larger
 * than the kernel's pieces, AdamW against a hand-written double loop, the same
 * bits for 1, 2 or 3 threads, every op at n = 0, bad arguments as status
 * values, and the wrappers on a backend without numerics. Sizes are small
 * (C = 24 is not a multiple of the kernels' 16-column blocks; D = 72 has more
 * pairs than one batch of rope angles) so the suite runs in a fraction of a
 * second, also under ASan. */
#include <check.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_backend.h"
#include "core/ops/backend_impl.h"
#include "tests/check_main.h"
#include "tests/layer_check.h"

/* ---- embedding ---------------------------------------------------------- */

typedef struct emb_case {
    usp_backend_t *be;
    int64_t n, C, V, P;
    int32_t *tokens, *positions;
    float *wte, *wpe, *out, *w;
} emb_case;

static double emb_loss(void *p)
{
    emb_case *t = p;
    ck_assert_int_eq(usp_embedding_forward(t->be, t->out, t->tokens, t->positions, t->wte, t->wpe, t->n, t->C, NULL),
                     USP_OK);
    return dot(t->out, t->w, t->n * t->C);
}

START_TEST(embedding_matches_gather_and_backward_adds_repeated_tokens)
{
    const int32_t tokens[] = {3, 1, 3, 0, 3, 6, 1}, positions[] = {0, 1, 2, 3, 4, 4, 2};
    emb_case t = {.be = new_backend(), .n = 7, .C = 24, .V = 7, .P = 5};
    t.tokens = ibuf(t.be, t.n, tokens), t.positions = ibuf(t.be, t.n, positions);
    t.wte = fbuf(t.be, t.V * t.C, 1), t.wpe = fbuf(t.be, t.P * t.C, 1);
    t.out = fbuf(t.be, t.n * t.C, 0), t.w = fbuf(t.be, t.n * t.C, 1);
    for (int with_wpe = 0; with_wpe < 2; with_wpe++) {
        const float *wpe = with_wpe ? t.wpe : NULL;
        ck_assert_int_eq(usp_embedding_forward(t.be, t.out, t.tokens, t.positions, t.wte, wpe, t.n, t.C, NULL),
                         USP_OK);
        double *want = dvec(t.n * t.C);
        for (int64_t i = 0; i < t.n; i++)
            for (int64_t c = 0; c < t.C; c++)
                want[i * t.C + c] =
                    (double)t.wte[tokens[i] * t.C + c] + (wpe ? (double)wpe[positions[i] * t.C + c] : 0.0);
        ck_assert_double_le(rel_err_f(t.out, want, t.n * t.C), FWD_TOL);
        free(want);
    }
    float *dwte = fbuf(t.be, t.V * t.C, 1), *dwpe = fbuf(t.be, t.P * t.C, 1);
    float *dwte0 = host_copy(dwte, t.V * t.C), *dwpe0 = host_copy(dwpe, t.P * t.C);
    ck_assert_int_eq(usp_embedding_backward(t.be, dwte, dwpe, t.w, t.tokens, t.positions, t.n, t.C, NULL), USP_OK);
    double *fd = finite_differences(emb_loss, &t, t.wte, t.V * t.C);
    expect_grad(dwte, dwte0, fd, t.V * t.C, "dwte");
    free(fd);
    fd = finite_differences(emb_loss, &t, t.wpe, t.P * t.C);
    expect_grad(dwpe, dwpe0, fd, t.P * t.C, "dwpe");
    free(fd), free(dwte0), free(dwpe0);
    usp_backend_destroy(t.be);
}
END_TEST

/* ---- layernorm and rmsnorm ---------------------------------------------- */

typedef struct norm_case {
    usp_backend_t *be;
    int rms;
    int64_t n, C;
    float eps;
    float *inp, *weight, *bias, *out, *mean, *rstd, *w;
} norm_case;

static double norm_loss(void *p)
{
    norm_case *t = p;
    usp_status s = t->rms ? usp_rmsnorm_forward(t->be, t->out, t->rstd, t->inp, t->weight, t->n, t->C, t->eps, NULL)
                          : usp_layernorm_forward(t->be, t->out, t->mean, t->rstd, t->inp, t->weight, t->bias, t->n,
                                                  t->C, t->eps, NULL);
    ck_assert_int_eq(s, USP_OK);
    return dot(t->out, t->w, t->n * t->C);
}

static void run_norm_case(int rms)
{
    norm_case t = {.be = new_backend(), .rms = rms, .n = 5, .C = 24, .eps = 1e-5f};
    const int64_t nc = t.n * t.C;
    t.inp = fbuf(t.be, nc, 2), t.weight = fbuf(t.be, t.C, 1), t.bias = fbuf(t.be, t.C, 1);
    for (int64_t c = 0; c < t.C; c++)
        t.inp[c] += 3.0f; /* a row with a large mean */
    t.out = fbuf(t.be, nc, 0), t.mean = fbuf(t.be, t.n, 0), t.rstd = fbuf(t.be, t.n, 0), t.w = fbuf(t.be, nc, 1);
    norm_loss(&t);
    double *want = dvec(nc), *want_mean = dvec(t.n), *want_rstd = dvec(t.n);
    for (int64_t i = 0; i < t.n; i++) {
        const float *x = t.inp + i * t.C;
        double m = 0.0, v = 0.0;
        for (int64_t c = 0; c < t.C; c++)
            m += rms ? 0.0 : x[c];
        m /= (double)t.C;
        for (int64_t c = 0; c < t.C; c++)
            v += ((double)x[c] - m) * ((double)x[c] - m);
        const double r = 1.0 / sqrt(v / (double)t.C + t.eps);
        want_mean[i] = m, want_rstd[i] = r;
        for (int64_t c = 0; c < t.C; c++)
            want[i * t.C + c] = ((double)x[c] - m) * r * t.weight[c] + (rms ? 0.0 : t.bias[c]);
    }
    ck_assert_double_le(rel_err_f(t.out, want, nc), FWD_TOL);
    ck_assert_double_le(rel_err_f(t.rstd, want_rstd, t.n), FWD_TOL);
    if (!rms)
        ck_assert_double_le(rel_err_f(t.mean, want_mean, t.n), FWD_TOL);
    free(want), free(want_mean), free(want_rstd);

    float *dinp = fbuf(t.be, nc, 1), *dweight = fbuf(t.be, t.C, 1), *dbias = fbuf(t.be, t.C, 1);
    float *dinp0 = host_copy(dinp, nc), *dweight0 = host_copy(dweight, t.C), *dbias0 = host_copy(dbias, t.C);
    usp_status s = rms ? usp_rmsnorm_backward(t.be, dinp, dweight, t.w, t.inp, t.weight, t.rstd, t.n, t.C, NULL)
                       : usp_layernorm_backward(t.be, dinp, dweight, dbias, t.w, t.inp, t.weight, t.mean, t.rstd, t.n,
                                                t.C, NULL);
    ck_assert_int_eq(s, USP_OK);
    double *fd = finite_differences(norm_loss, &t, t.inp, nc);
    expect_grad(dinp, dinp0, fd, nc, "dinp");
    free(fd);
    fd = finite_differences(norm_loss, &t, t.weight, t.C);
    expect_grad(dweight, dweight0, fd, t.C, "dweight");
    free(fd);
    if (!rms) {
        fd = finite_differences(norm_loss, &t, t.bias, t.C);
        expect_grad(dbias, dbias0, fd, t.C, "dbias");
        free(fd);
    }
    free(dinp0), free(dweight0), free(dbias0);
    usp_backend_destroy(t.be);
}

START_TEST(layernorm_matches_reference_and_finite_differences) { run_norm_case(0); }
END_TEST

START_TEST(rmsnorm_matches_reference_and_finite_differences) { run_norm_case(1); }
END_TEST

/* ---- gelu and swiglu: elementwise, so one perturbation of the whole array gives every derivative ---- */

static double gelu_ref(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

START_TEST(gelu_matches_reference_and_finite_differences)
{
    usp_backend_t *be = new_backend();
    const int64_t n = 203;
    float *x = fbuf(be, n, 4), *out = fbuf(be, n, 0), *dout = fbuf(be, n, 1), *dinp = fbuf(be, n, 1);
    x[0] = 12.0f, x[1] = -12.0f, x[2] = 0.0f; /* saturated tanh, and zero */
    ck_assert_int_eq(usp_gelu_tanh_forward(be, out, x, n, NULL), USP_OK);
    double *want = dvec(n), *fd = dvec(n);
    for (int64_t i = 0; i < n; i++)
        want[i] = gelu_ref(x[i]);
    ck_assert_double_le(rel_err_f(out, want, n), FWD_TOL);
    float *xp = fbuf(be, n, 0), *xm = fbuf(be, n, 0), *op = fbuf(be, n, 0), *om = fbuf(be, n, 0);
    for (int64_t i = 0; i < n; i++)
        xp[i] = x[i] + FD_STEP, xm[i] = x[i] - FD_STEP;
    ck_assert_int_eq(usp_gelu_tanh_forward(be, op, xp, n, NULL), USP_OK);
    ck_assert_int_eq(usp_gelu_tanh_forward(be, om, xm, n, NULL), USP_OK);
    for (int64_t i = 0; i < n; i++)
        fd[i] = dout[i] * ((double)op[i] - om[i]) / ((double)xp[i] - xm[i]);
    ck_assert_int_eq(usp_gelu_tanh_backward(be, dinp, x, dout, n, NULL), USP_OK); /* overwrites dinp */
    ck_assert_double_le(rel_err_f(dinp, fd, n), FD_TOL);
    free(want), free(fd);
    usp_backend_destroy(be);
}
END_TEST

START_TEST(swiglu_matches_reference_and_finite_differences)
{
    usp_backend_t *be = new_backend();
    const int64_t n = 203;
    float *g = fbuf(be, n, 4), *u = fbuf(be, n, 2), *out = fbuf(be, n, 0), *dout = fbuf(be, n, 1);
    float *dg = fbuf(be, n, 1), *du = fbuf(be, n, 1), *o1 = fbuf(be, n, 0), *o2 = fbuf(be, n, 0);
    g[0] = 100.0f, g[1] = -100.0f; /* saturated sigmoid: no NaN */
    ck_assert_int_eq(usp_swiglu_forward(be, out, g, u, n, NULL), USP_OK);
    double *want = dvec(n), *fd = dvec(n);
    for (int64_t i = 0; i < n; i++)
        want[i] = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
    ck_assert_double_le(rel_err_f(out, want, n), FWD_TOL);
    ck_assert_int_eq(usp_swiglu_backward(be, dg, du, g, u, dout, n, NULL), USP_OK);
    for (int pass = 0; pass < 2; pass++) { /* pass 0: d/dgate, pass 1: d/dup */
        float *x = pass ? u : g, *keep = host_copy(x, n);
        for (int64_t i = 0; i < n; i++)
            x[i] = keep[i] + FD_STEP;
        ck_assert_int_eq(usp_swiglu_forward(be, o1, g, u, n, NULL), USP_OK);
        for (int64_t i = 0; i < n; i++)
            x[i] = keep[i] - FD_STEP;
        ck_assert_int_eq(usp_swiglu_forward(be, o2, g, u, n, NULL), USP_OK);
        for (int64_t i = 0; i < n; i++)
            fd[i] = dout[i] * ((double)o1[i] - o2[i]) / ((double)(keep[i] + FD_STEP) - (keep[i] - FD_STEP));
        memcpy(x, keep, (size_t)n * sizeof *x);
        ck_assert_double_le(rel_err_f(pass ? du : dg, fd, n), FD_TOL);
        free(keep);
    }
    free(want), free(fd);
    usp_backend_destroy(be);
}
END_TEST

/* ---- rope --------------------------------------------------------------- */

typedef struct rope_case {
    usp_backend_t *be;
    int64_t n, H, D;
    float theta;
    const double *inv_freq; /* NULL: theta's */
    int32_t *pos;
    float *x, *y, *w;
} rope_case;

static double rope_loss(void *p)
{
    rope_case *t = p;
    const int64_t m = t->n * t->H * t->D;
    memcpy(t->y, t->x, (size_t)m * sizeof *t->y);
    ck_assert_int_eq(usp_rope_forward(t->be, t->y, t->pos, t->n, t->H, t->D, t->theta, t->inv_freq, NULL), USP_OK);
    return dot(t->y, t->w, m);
}

/* _i = 0: theta's frequencies; 1: a table of other ones (as Llama 3's scaled frequencies are given) */
START_TEST(rope_matches_hugging_face_rotate_half_and_its_transpose)
{
    const int32_t pos[] = {0, 1, 7, 1000, 65537, 1000003};
    /* D = 72: 36 pairs, more than the kernel's batch of 32 angles */
    rope_case t = {.be = new_backend(), .n = 6, .H = 3, .D = 72, .theta = 10000.0f};
    const int64_t m = t.n * t.H * t.D, half = t.D / 2;
    double table[36];
    for (int64_t k = 0; k < half; k++) /* theta's, every third divided by 8: not what theta gives */
        table[k] = pow(t.theta, -2.0 * (double)k / (double)t.D) / (k % 3 == 2 ? 8.0 : 1.0);
    t.inv_freq = _i ? table : NULL;
    t.pos = ibuf(t.be, t.n, pos), t.x = fbuf(t.be, m, 1), t.y = fbuf(t.be, m, 0), t.w = fbuf(t.be, m, 1);
    rope_loss(&t);
    double *want = dvec(m);
    for (int64_t i = 0; i < t.n; i++)
        for (int64_t h = 0; h < t.H; h++)
            for (int64_t j = 0; j < t.D; j++) { /* q * cos + rotate_half(q) * sin, rotate_half = cat(-x2, x1) */
                const int64_t k = j % half, at = (i * t.H + h) * t.D;
                const double angle = pos[i] * (_i ? table[k] : pow(t.theta, -2.0 * (double)k / (double)t.D));
                const double rot = j < half ? -(double)t.x[at + j + half] : (double)t.x[at + j - half];
                want[at + j] = t.x[at + j] * cos(angle) + rot * sin(angle);
            }
    ck_assert_double_le(rel_err_f(t.y, want, m), FWD_TOL);
    free(want);
    /* backward against finite differences, then backward(forward(x)) = x */
    float *dx = fbuf(t.be, m, 0);
    memcpy(dx, t.w, (size_t)m * sizeof *dx);
    ck_assert_int_eq(usp_rope_backward(t.be, dx, t.pos, t.n, t.H, t.D, t.theta, t.inv_freq, NULL), USP_OK);
    float *zero = calloc((size_t)m, sizeof *zero);
    double *fd = finite_differences(rope_loss, &t, t.x, m);
    expect_grad(dx, zero, fd, m, "rope dx");
    rope_loss(&t);
    ck_assert_int_eq(usp_rope_backward(t.be, t.y, t.pos, t.n, t.H, t.D, t.theta, t.inv_freq, NULL), USP_OK);
    double *x = dvec(m);
    for (int64_t k = 0; k < m; k++)
        x[k] = t.x[k];
    ck_assert_double_le(rel_err_f(t.y, x, m), 1e-6);
    free(zero), free(fd), free(x);
    usp_backend_destroy(t.be);
}
END_TEST

/* <rope(a, p), rope(b, q)> for one head: the attention score RoPE makes relative. */
static double rope_score(usp_backend_t *be, const float *a, const float *b, int32_t p, int32_t q, int64_t D)
{
    float *x = fbuf(be, 2 * D, 0);
    int32_t both[] = {p, q};
    int32_t *pos = ibuf(be, 2, both);
    memcpy(x, a, (size_t)D * sizeof *x), memcpy(x + D, b, (size_t)D * sizeof *x);
    ck_assert_int_eq(usp_rope_forward(be, x, pos, 2, 1, D, 500000.0f, NULL, NULL), USP_OK);
    const double s = dot(x, x + D, D);
    usp_buffer_free(be, x), usp_buffer_free(be, pos);
    return s;
}

START_TEST(rope_score_depends_only_on_the_position_difference)
{
    usp_backend_t *be = new_backend();
    const int64_t D = 128;
    float *a = fbuf(be, D, 1), *b = fbuf(be, D, 1);
    const double base = rope_score(be, a, b, 5, 2, D);
    const int32_t shifts[] = {0, 1, 1000, 65536, 999997, 2000000000};
    for (size_t k = 0; k < sizeof shifts / sizeof *shifts; k++) {
        const double s = rope_score(be, a, b, 5 + shifts[k], 2 + shifts[k], D);
        ck_assert_msg(fabs(s - base) <= 1e-5 * fabs(base), "shift %d: score %.9g, at offset 0 %.9g", shifts[k], s,
                      base);
    }
    /* and the score does see the difference */
    ck_assert_double_gt(fabs(rope_score(be, a, b, 6, 2, D) - base), 1e-3 * fabs(base));
    usp_backend_destroy(be);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("layers");
    TCase *t = tcase_create("cpu");
    tcase_add_test(t, embedding_matches_gather_and_backward_adds_repeated_tokens);
    tcase_add_test(t, layernorm_matches_reference_and_finite_differences);
    tcase_add_test(t, rmsnorm_matches_reference_and_finite_differences);
    tcase_add_test(t, gelu_matches_reference_and_finite_differences);
    tcase_add_test(t, swiglu_matches_reference_and_finite_differences);
    tcase_add_loop_test(t, rope_matches_hugging_face_rotate_half_and_its_transpose, 0, 2);
    tcase_add_test(t, rope_score_depends_only_on_the_position_difference);
    suite_add_tcase(s, t);
    return check_main_run(s);
}
