/* The runtime interface, for runtime implementers only (commands see core/runtime/runtime.h).
 *
 * As core/ops/backend_impl.h: a `static const` table of function pointers filled
 * with designated initializers, plus a context. Every slot blocks. */
#ifndef USP_RUNTIME_IMPL_H
#define USP_RUNTIME_IMPL_H

#include "core/runtime/runtime.h"

#define USP_RUNTIME_API_VERSION 1

typedef struct usp_runtime_i {
    int api_version; /* USP_RUNTIME_API_VERSION */
    const char *name;
    /* Runs fn on every rank until all have returned (usp_runtime_run). Each
     * rank's usp_rank_ctx has the runtime's gather and, where time is
     * modelled or measured, its clock. */
    usp_status (*run)(void *ctx, usp_rank_main_fn fn, void *arg);
    /* The number of ranks. */
    int (*world_size)(const void *ctx);
    /* (optional) The report of a failed run; NULL: the wrapper returns "". */
    const char *(*report)(const void *ctx);
    /* (optional) The run's trace; NULL: the runtime records none. */
    const usp_trace_t *(*trace)(const void *ctx);
    /* (optional) 1 when this process prints the command's output; NULL: 1. */
    int (*prints)(const void *ctx);
    /* The machine the times are for. */
    usp_runtime_cluster (*cluster)(const void *ctx);
    /* Frees the context. */
    void (*destroy)(void *ctx);
} usp_runtime_i;

struct usp_runtime {
    const usp_runtime_i *iface;
    void *context;
};

/* A runtime of `iface` over `context` (which it owns from then on: it is
 * destroyed on failure too). */
usp_status usp_runtime_make(const usp_runtime_i *iface, void *context, usp_runtime_t **out);

#endif
