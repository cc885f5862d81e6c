/* Helpers of the layer-op tests (see layer_check.h). */
#include "tests/layer_check.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_backend.h"

/* ---- data and comparisons ---------------------------------------------- */

unsigned layer_check_seed = 12345u;
float rnd(void) /* uniform in [-1, 1) */
{
    layer_check_seed = layer_check_seed * 1664525u + 1013904223u;
    return (float)((double)(layer_check_seed >> 8) / (double)(1u << 24) * 2.0 - 1.0);
}

usp_backend_t *new_backend(void)
{
    usp_backend_t *be;
    ck_assert_int_eq(usp_backend_cpu_create(&be), USP_OK);
    return be;
}

/* A backend buffer of n floats (or int32), filled with scale * rnd() (scale 0: zeros). */
float *fbuf(usp_backend_t *be, int64_t n, float scale)
{
    float *p;
    ck_assert_int_eq(usp_buffer_alloc(be, (size_t)n * sizeof(float), "test", (void **)&p), USP_OK);
    for (int64_t i = 0; i < n; i++)
        p[i] = scale * rnd();
    return p;
}

int32_t *ibuf(usp_backend_t *be, int64_t n, const int32_t *values)
{
    int32_t *p;
    ck_assert_int_eq(usp_buffer_alloc(be, (size_t)n * sizeof(int32_t), "test", (void **)&p), USP_OK);
    memcpy(p, values, (size_t)n * sizeof *p);
    return p;
}

double *dvec(int64_t n)
{
    double *p = calloc((size_t)n, sizeof *p);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* max_k |got_k - want_k| / (|want_k| + rms(want)): each element relative to its
 * own size, with the typical size as the floor for elements near zero (so one
 * large element does not hide the errors of the others). */
double rel_err(const double *got, const double *want, int64_t n)
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

double rel_err_f(const float *got, const double *want, int64_t n)
{
    double *g = dvec(n);
    for (int64_t k = 0; k < n; k++)
        g[k] = got[k];
    double e = rel_err(g, want, n);
    free(g);
    return e;
}

/* What an accumulating op added: got - before. */
double *added(const float *got, const float *before, int64_t n)
{
    double *d = dvec(n);
    for (int64_t k = 0; k < n; k++)
        d[k] = (double)got[k] - (double)before[k];
    return d;
}

float *host_copy(const float *x, int64_t n)
{
    float *c = malloc((size_t)n * sizeof *c);
    ck_assert_ptr_nonnull(c);
    memcpy(c, x, (size_t)n * sizeof *c);
    return c;
}

double dot(const float *a, const float *b, int64_t n)
{
    double s = 0.0;
    for (int64_t k = 0; k < n; k++)
        s += (double)a[k] * (double)b[k];
    return s;
}


/* Central differences of loss(state) with respect to x[0..count), into grad. */
double *finite_differences(loss_fn loss, void *state, float *x, int64_t count)
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

void expect_grad(const float *got, const float *before, const double *fd, int64_t n, const char *what)
{
    double *g = added(got, before, n);
    const double e = rel_err(g, fd, n);
    ck_assert_msg(e <= FD_TOL, "%s: relative error %g against finite differences (tolerance %g)", what, e, FD_TOL);
    free(g);
}
