/* Room backends/registry/: the compute backends of usp by name, built or not (cpu, lazy, meta, cuda):
 * what --sim-compute, the tests' USP_TEST_BACKEND and the conformance table name. One table
 * (compute_backends.c); a backend this build lacks is listed with what it needs, so that asking for it
 * says so instead of "unknown". It may use: backends/cpu, lazy, meta, cuda; core.
 *
 * "Backend" in usp is always one of these, what computes a rank's ops (core/ops/backend_impl.h);
 * where the ranks run (sim, mpi, nccl) is a runtime (core/runtime/runtime.h), picked by --backend. */
#ifndef USP_COMPUTE_BACKENDS_H
#define USP_COMPUTE_BACKENDS_H

#include <stddef.h>

#include "core/ops/ops.h"

typedef struct usp_compute_backend {
    const char *name;
    const char *about;  /* one line: what it computes on */
    int numeric;        /* 1: real numbers; 0: shapes only (meta: costs and memory) */
    int device_memory;  /* 1: its buffers live on a GPU, where the host cannot read them */
    const char *needs;  /* not in this build: what it needs at build time; NULL when built */
    /* 1 when it can run on this machine; else 0 with the reason in `why` (a cuda build without a GPU).
     * NULL: always (built). */
    int (*runs_here)(char *why, size_t size);
    /* A backend for one rank (cuda: on GPU 0); NULL when not built. */
    usp_status (*create)(usp_backend_t **out);
} usp_compute_backend;

/* The backends, built or not, in a fixed order (cpu first: the reference). */
int usp_compute_backend_count(void);
const usp_compute_backend *usp_compute_backend_at(int i);

/* The backend named `name`; NULL when there is none of that name. */
const usp_compute_backend *usp_compute_backend_find(const char *name);

/* USP_OK when `name` is built and runs here; else USP_ERR_CONFIG naming `option` (e.g. "--sim-compute", or
 * "USP_TEST_BACKEND=" for a variable), the value and, for an unknown name, the backends there are
 * (usp_compute_backends_describe). */
usp_status usp_compute_backend_check(const char *option, const char *name);

/* "cpu (default), lazy, meta (shapes only), cuda (needs the CUDA Toolkit ...)" into buf. */
void usp_compute_backends_describe(char *buf, size_t size);

#endif
