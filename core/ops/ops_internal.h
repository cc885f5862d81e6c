/* The backend handle behind core/ops/ops.h, shared by the files of core/ops/: the handle and its
 * buffers (backend.c), what enqueues work and the one door usp_op_run (op_run.c), the kinds' checks and
 * costs (op_kinds.c), the typed calls (op_builders.c), host waits and op timing. Nothing outside
 * core/ops/ includes it. */
#ifndef USP_OPS_INTERNAL_H
#define USP_OPS_INTERNAL_H

#include <stdint.h>

#include "core/ops/backend_impl.h"
#include "core/ops/op.h"

/* One live allocation. The table is sorted by address so that ownership of a
 * range, and the dtype a pointer's elements are stored in, is a binary search
 * (the copy wrappers and the simulator's communicator check every byte range
 * they are given: ranks never share memory, and an offset counted in the
 * wrong dtype lands outside its buffer). */
typedef struct allocation {
    uintptr_t addr;
    size_t bytes;       /* addressable, and counted: the same on every backend */
    usp_dtype dtype;    /* of its elements: usp_buffer_alloc_as's storage, USP_F32 from usp_buffer_alloc */
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
    /* The last indices allocation_of found, tried before the binary search: a
     * layout transform checks the same two buffers (source and destination) for
     * each of its U peers, and in a simulated world of W ranks each search of a
     * table another rank left cold in the cache is a string of misses. A hint is
     * used only if it is the search's answer, so it is never stale. */
    size_t hint[2];
    unsigned next_hint;
    size_t in_use, peak;
    category_use categories[CATEGORIES_MAX];
    int n_categories;
    double flops; /* every op's reported flops, summed */
    double attention_flops; /* the attention ops' part of them */
    double bytes, outputs; /* and their memory traffic and outputs (usp_op_cost) */
    usp_cost_sink_fn cost_fn;
    void *cost_ctx;
    struct ops_timer *timer; /* usp_backend_time_ops (NULL: ops are not timed) */
    uint64_t host_waits;     /* usp_backend_host_waits (core/ops/ops_host.c) */
    /* The ranges checked since the last cost report, the next cost's operands; kept only while a cost sink
     * listens. A pointer, so that the checks, which take the backend const, can note them. */
    struct ops_operands *operands;
};

/* The ranges of the op being checked (usp_op_cost.operands). */
typedef struct ops_operands {
    usp_range ranges[USP_OP_OPERANDS_MAX];
    int n;
} ops_operands;

/* The dtypes an operand may hold, as a set of usp_dtype bits: activations, weights
 * and their gradients are stored in f32 or bf16 (mixed precision); lse, mean,
 * rstd, losses, master weights, Adam moments and int32 ids (4-byte elements that
 * share USP_F32) are f32 only, as every backend's kernels read them. */
#define OPS_F32 (1u << USP_F32)
#define OPS_STORED (OPS_F32 | (1u << USP_BF16))

/* The view a slot gets of `count` elements at ptr (one look-up in the live table):
 * USP_ERR_CONFIG naming op, name and the dtype when ptr's buffer holds a dtype
 * outside `dtypes`; USP_ERR_RUNTIME when the elements do not lie inside that one
 * buffer, or ptr is NULL and not `optional` (a NULL optional one: data NULL). */
usp_status ops_view(const usp_backend_t *be, const char *op, const char *name, const void *ptr, int64_t count,
                    unsigned dtypes, int optional, usp_view *out);

/* What an op costs, from its shapes (core/ops/op_kinds.c): usp_op_cost's figures. */
typedef struct ops_work {
    double flops, bytes, outputs;
    usp_dtype dtype;
} ops_work;

/* The checks of op's parameters (USP_ERR_CONFIG naming the op and the value); *nothing = 1 when the op
 * has nothing to do (n = 0), and its operands are then not looked at. */
usp_status ops_kind_check(const usp_op *op, int *nothing);

/* op's cost; its operands' views are filled (a GEMM and an attention name the dtype of their inputs). */
ops_work ops_kind_cost(const usp_op *op);

/* The memory category a kind's workspace is counted under (NULL: it has none). */
const char *ops_kind_scratch(usp_op_kind kind);

/* USP_OK when [ptr, ptr + bytes) lies in one live buffer (and noted as an operand of the op being
 * checked); else USP_ERR_RUNTIME naming the op, the side and the buffer the range starts in, with its dtype. */
usp_status ops_check_range(const usp_backend_t *be, const char *op, const char *side, const void *ptr,
                           size_t bytes);

/* Counts the op's flops and sends its cost, with the stream it is enqueued on, to the backend's cost sink (if any). */
void ops_report_cost(usp_backend_t *be, const char *op, double flops, double bytes, usp_stream_t *stream);

/* ops_report_cost of an op with outputs (usp_op_cost.outputs: a GEMM's, an attention's), multiplying in `dtype`. */
void ops_report_cost_outputs(usp_backend_t *be, const char *op, usp_dtype dtype, double flops, double bytes,
                             double outputs, usp_stream_t *stream);

/* The cost of the op about to run, for its span when ops are timed (ops_report_cost passes it). */
void ops_timer_note(struct ops_timer *timer, const char *op, double flops, double bytes);

/* Starts the span of the op ops_timer_note named, on `stream`. */
void ops_timer_begin(usp_backend_t *be, usp_stream_t *stream);

/* Ends the span begun last on `stream` and returns `status` (the op's). */
usp_status ops_timer_end(usp_backend_t *be, usp_stream_t *stream, usp_status status);

/* Frees the timer of usp_backend_time_ops (NULL: nothing). */
void ops_timer_free(usp_backend_t *be);

/* Counts a host wait (usp_backend_count_host_wait, for the files of core/ops*.c). */
static inline void ops_count_host_wait(usp_backend_t *be)
{
    if (be->iface->synchronize) /* a backend that completes every op at once never waits */
        be->host_waits++;
}

/* `call`, the backend slot that runs an op, inside the op's span when ops are timed. */
#define OPS_TIMED(be, stream, call) \
    (!(be)->timer ? (call) : ops_timer_end((be), (stream), (ops_timer_begin((be), (stream)), (call))))

#endif
