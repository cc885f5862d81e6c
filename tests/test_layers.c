/* Tests of the transformer layer ops (core/ops.h) on the CPU backend
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
#include "core/backend_impl.h"
#include "tests/check_main.h"

/* ---- data and comparisons ---------------------------------------------- */

static unsigned seed = 12345u;
static float rnd(void) /* uniform in [-1, 1) */
{
    seed = seed * 1664525u + 1013904223u;
    return (float)((double)(seed >> 8) / (double)(1u << 24) * 2.0 - 1.0);
}

static usp_backend_t *new_backend(void)
{
    usp_backend_t *be;
    ck_assert_int_eq(usp_backend_cpu_create(&be), USP_OK);
    return be;
}

/* A backend buffer of n floats (or int32), filled with scale * rnd() (scale 0: zeros). */
static float *fbuf(usp_backend_t *be, int64_t n, float scale)
{
    float *p;
    ck_assert_int_eq(usp_buffer_alloc(be, (size_t)n * sizeof(float), "test", (void **)&p), USP_OK);
    for (int64_t i = 0; i < n; i++)
        p[i] = scale * rnd();
    return p;
}

static int32_t *ibuf(usp_backend_t *be, int64_t n, const int32_t *values)
{
    int32_t *p;
    ck_assert_int_eq(usp_buffer_alloc(be, (size_t)n * sizeof(int32_t), "test", (void **)&p), USP_OK);
    memcpy(p, values, (size_t)n * sizeof *p);
    return p;
}

static double *dvec(int64_t n)
{
    double *p = calloc((size_t)n, sizeof *p);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* max_k |got_k - want_k| / (|want_k| + rms(want)): each element relative to its
 * own size, with the typical size as the floor for elements near zero (so one
 * large element does not hide the errors of the others). */
static double rel_err(const double *got, const double *want, int64_t n)
{
    double ss = 0.0, err = 0.0;
    for (int64_t k = 0; k < n; k++)
        ss += want[k] * want[k];
    const double floor = n > 0 ? sqrt(ss / (double)n) : 0.0;
    for (int64_t k = 0; k < n; k++) {
        const double d = fabs(got[k] - want[k]), scale = fabs(want[k]) + floor;
        err = fmax(err, scale > 0.0 ? d / scale : d);
    }
    return err;
}

static double rel_err_f(const float *got, const double *want, int64_t n)
{
    double *g = dvec(n);
    for (int64_t k = 0; k < n; k++)
        g[k] = got[k];
    double e = rel_err(g, want, n);
    free(g);
    return e;
}

/* What an accumulating op added: got - before. */
static double *added(const float *got, const float *before, int64_t n)
{
    double *d = dvec(n);
    for (int64_t k = 0; k < n; k++)
        d[k] = (double)got[k] - (double)before[k];
    return d;
}

static float *host_copy(const float *x, int64_t n)
{
    float *c = malloc((size_t)n * sizeof *c);
    ck_assert_ptr_nonnull(c);
    memcpy(c, x, (size_t)n * sizeof *c);
    return c;
}

static double dot(const float *a, const float *b, int64_t n)
{
    double s = 0.0;
    for (int64_t k = 0; k < n; k++)
        s += (double)a[k] * (double)b[k];
    return s;
}

#define FD_STEP 1e-2f
#define FD_TOL 1e-3
#define FWD_TOL 1e-6

/* Central differences of loss(state) with respect to x[0..count), into grad. */
typedef double (*loss_fn)(void *state);
static double *finite_differences(loss_fn loss, void *state, float *x, int64_t count)
{
    double *grad = dvec(count);
    for (int64_t k = 0; k < count; k++) {
        const float keep = x[k], up = keep + FD_STEP, down = keep - FD_STEP;
        x[k] = up;
        const double lp = loss(state);
        x[k] = down;
        const double lm = loss(state);
        x[k] = keep;
        grad[k] = (lp - lm) / ((double)up - (double)down);
    }
    return grad;
}

static void expect_grad(const float *got, const float *before, const double *fd, int64_t n, const char *what)
{
    double *g = added(got, before, n);
    const double e = rel_err(g, fd, n);
    ck_assert_msg(e <= FD_TOL, "%s: relative error %g against finite differences (tolerance %g)", what, e, FD_TOL);
    free(g);
}

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
    int32_t *pos;
    float *x, *y, *w;
} rope_case;

static double rope_loss(void *p)
{
    rope_case *t = p;
    const int64_t m = t->n * t->H * t->D;
    memcpy(t->y, t->x, (size_t)m * sizeof *t->y);
    ck_assert_int_eq(usp_rope_forward(t->be, t->y, t->pos, t->n, t->H, t->D, t->theta, NULL), USP_OK);
    return dot(t->y, t->w, m);
}

START_TEST(rope_matches_hugging_face_rotate_half_and_its_transpose)
{
    const int32_t pos[] = {0, 1, 7, 1000, 65537, 1000003};
    /* D = 72: 36 pairs, more than the kernel's batch of 32 angles */
    rope_case t = {.be = new_backend(), .n = 6, .H = 3, .D = 72, .theta = 10000.0f};
    const int64_t m = t.n * t.H * t.D, half = t.D / 2;
    t.pos = ibuf(t.be, t.n, pos), t.x = fbuf(t.be, m, 1), t.y = fbuf(t.be, m, 0), t.w = fbuf(t.be, m, 1);
    rope_loss(&t);
    double *want = dvec(m);
    for (int64_t i = 0; i < t.n; i++)
        for (int64_t h = 0; h < t.H; h++)
            for (int64_t j = 0; j < t.D; j++) { /* q * cos + rotate_half(q) * sin, rotate_half = cat(-x2, x1) */
                const int64_t k = j % half, at = (i * t.H + h) * t.D;
                const double angle = pos[i] * pow(t.theta, -2.0 * (double)k / (double)t.D);
                const double rot = j < half ? -(double)t.x[at + j + half] : (double)t.x[at + j - half];
                want[at + j] = t.x[at + j] * cos(angle) + rot * sin(angle);
            }
    ck_assert_double_le(rel_err_f(t.y, want, m), FWD_TOL);
    free(want);
    /* backward against finite differences, then backward(forward(x)) = x */
    float *dx = fbuf(t.be, m, 0);
    memcpy(dx, t.w, (size_t)m * sizeof *dx);
    ck_assert_int_eq(usp_rope_backward(t.be, dx, t.pos, t.n, t.H, t.D, t.theta, NULL), USP_OK);
    float *zero = calloc((size_t)m, sizeof *zero);
    double *fd = finite_differences(rope_loss, &t, t.x, m);
    expect_grad(dx, zero, fd, m, "rope dx");
    rope_loss(&t);
    ck_assert_int_eq(usp_rope_backward(t.be, t.y, t.pos, t.n, t.H, t.D, t.theta, NULL), USP_OK);
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
    ck_assert_int_eq(usp_rope_forward(be, x, pos, 2, 1, D, 500000.0f, NULL), USP_OK);
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
    seed = 777u;
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
    ck_assert_int_eq(usp_rope_forward(be, f, ids, n, 2, 4, 1e4f, NULL), USP_OK);
    ck_assert_int_eq(usp_rope_backward(be, f, ids, n, 2, 4, 1e4f, NULL), USP_OK);
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
    ck_assert_int_eq(usp_rope_forward(be, x, pos, 8, 1, 7, 1e4f, NULL), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "D = 7"));
    ck_assert_int_eq(usp_rope_forward(be, x, pos, 8, 1, 8, 0.0f, NULL), USP_ERR_CONFIG);
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
    Suite *s = suite_create("layers");
    TCase *t = tcase_create("cpu");
    tcase_add_test(t, embedding_matches_gather_and_backward_adds_repeated_tokens);
    tcase_add_test(t, layernorm_matches_reference_and_finite_differences);
    tcase_add_test(t, rmsnorm_matches_reference_and_finite_differences);
    tcase_add_test(t, gelu_matches_reference_and_finite_differences);
    tcase_add_test(t, swiglu_matches_reference_and_finite_differences);
    tcase_add_test(t, rope_matches_hugging_face_rotate_half_and_its_transpose);
    tcase_add_test(t, rope_score_depends_only_on_the_position_difference);
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
