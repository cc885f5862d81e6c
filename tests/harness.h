/* Helpers shared by the unit tests: run a function on every rank of a
 * simulated world, and move test data in and out of backend buffers. */
#ifndef USP_TESTS_HARNESS_H
#define USP_TESTS_HARNESS_H

#include <stddef.h>

#include "core/rank.h"
#include "sim/world.h"

/* Runs fn on `world` ranks with the default config (plus `faults`); returns the
 * run's status. When `report` is non-NULL, the report text is copied there. */
usp_status harness_run(int world, usp_rank_main_fn fn, void *arg, const sim_fault *faults, int n_faults,
                       char *report, size_t report_size);

/* Allocates a backend buffer of `bytes` and copies `host` into it (host may be NULL: zeroed). */
usp_status harness_upload(const usp_rank_ctx *ctx, const void *host, size_t bytes, void **dev);

/* Copies `bytes` of a backend buffer to `host`. */
usp_status harness_download(const usp_rank_ctx *ctx, void *host, const void *dev, size_t bytes);

/* The whole file at `path` (malloc'd, NUL-terminated; *size its bytes when size
 * is not NULL), or NULL when it cannot be opened. */
char *harness_read_file(const char *path, size_t *size);

/* Returns a USP_ERR_RUNTIME naming the rank and `what` unless got == want. */
usp_status harness_expect_eq(const usp_rank_ctx *ctx, const char *what, size_t index, double got, double want);

#endif
