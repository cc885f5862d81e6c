/* Helpers of the layer-op tests (test_layers.c, test_loss_optim.c): random
 * data in backend buffers, relative errors, and central finite differences. */
#ifndef USP_TESTS_LAYER_CHECK_H
#define USP_TESTS_LAYER_CHECK_H

#include <stdint.h>

#include "core/ops/ops.h"

#define FD_STEP 1e-2f
#define FD_TOL 1e-3
#define FWD_TOL 1e-6

extern unsigned layer_check_seed;

/* A scalar loss of the test's state, for finite differences. */
typedef double (*loss_fn)(void *state);

/* Uniform in [-1, 1) from a fixed-seed generator (layer_check_seed). */
float rnd(void);
/* A fresh CPU backend (the test fails if it cannot be made). */
usp_backend_t *new_backend(void);
/* A backend buffer of n floats, random in [-scale, scale). */
float *fbuf(usp_backend_t *be, int64_t n, float scale);
/* A backend buffer holding n int32 values. */
int32_t *ibuf(usp_backend_t *be, int64_t n, const int32_t *values);
/* n zeroed doubles (host). */
double *dvec(int64_t n);
/* max |got - want| / max |want| (normwise relative error). */
double rel_err(const double *got, const double *want, int64_t n);
/* rel_err of float results against a double reference. */
double rel_err_f(const float *got, const double *want, int64_t n);
/* got - before in double: what an accumulating op added. */
double *added(const float *got, const float *before, int64_t n);
/* A host copy of n floats. */
float *host_copy(const float *x, int64_t n);
/* sum a[i] b[i] in double. */
double dot(const float *a, const float *b, int64_t n);
/* Central differences of loss(state) with respect to x[0..count), step FD_STEP. */
double *finite_differences(loss_fn loss, void *state, float *x, int64_t count);
/* Asserts that got - before matches fd within FD_TOL (relative). */
void expect_grad(const float *got, const float *before, const double *fd, int64_t n, const char *what);

#endif
