/* The backend handle behind core/ops.h, shared by the wrappers in core/ops.c
 * (memory, GEMM, attention) and core/ops_layers.c (the transformer layer ops).
 * Nothing outside core/ops*.c includes it. */
#ifndef USP_OPS_INTERNAL_H
#define USP_OPS_INTERNAL_H

#include <stdint.h>

#include "core/backend_impl.h"

/* One live allocation. The table is sorted by address so that ownership of a
 * range is a binary search (the simulator checks every buffer a rank hands to
 * the communicator: ranks never share memory). */
typedef struct allocation {
    uintptr_t addr;
    size_t bytes;       /* addressable */
    size_t counted;     /* in the accounting: bytes, or fewer for narrower storage on meta */
    const char *category;
} allocation;

/* Bytes of one category now and at the backend's peak. Categories are few
 * (weights, gradients, optimizer, activations, attention workspace, comm, ...),
 * so a short array searched by name costs less than a scan of the live table;
 * on every new peak the current column is copied to the peak column, so the
 * breakdown at the peak is exact and costs O(categories) per allocation. */
typedef struct category_use {
    const char *name;
    size_t now, at_peak;
} category_use;

#define CATEGORIES_MAX 32

struct usp_backend {
    const usp_backend_i *iface;
    void *context;
    allocation *live; /* sorted by addr */
    size_t n_live, cap_live;
    size_t in_use, peak;
    category_use categories[CATEGORIES_MAX];
    int n_categories;
    double flops; /* every op's reported flops, summed */
    usp_cost_sink_fn cost_fn;
    void *cost_ctx;
};

/* Counts the op's flops and sends its cost to the backend's cost sink (if any). */
void ops_report_cost(usp_backend_t *be, const char *op, double flops, double bytes);

#endif
