/* The compute-backend interface, for backend implementers only (users see core/ops/ops.h).
 *
 * In the spirit of ggml-backend: a `static const` table of function pointers
 * filled with designated initializers, plus a context. Memory, copies, streams
 * and events are slots of their own; every compute op reaches a backend as one
 * descriptor (core/ops/op.h) through one slot, `run`, after usp_op_run
 * (core/ops/op_run.c) has checked its arguments, counted its memory and reported
 * its cost, so a backend only does the work. The ordering contract is core/ops/ops.h's: every slot that
 * takes a stream enqueues its work there and may return before it is done,
 * unless it says "blocking"; host memory a slot reads is read before it
 * returns. A backend that completes every op before returning (cpu, meta)
 * leaves the stream and event slots NULL. */
#ifndef USP_BACKEND_IMPL_H
#define USP_BACKEND_IMPL_H

#include "core/ops/op.h"

#define USP_BACKEND_API_VERSION 6

typedef struct usp_backend_i {
    int api_version; /* USP_BACKEND_API_VERSION */
    const char *name;
    int has_numerics; /* 0: the meta backend, buffers are never touched */
    int stores_bf16;  /* 1: buffers may be bf16 (usp_buffer_alloc_as); every op then reads each
                         operand's dtype from its view, and runs USP_OP_CONVERT */

    /* Allocates device memory, usable by any work enqueued after it on any stream; need not wait for the
     * device (cuda: stream-ordered from a pool, backends/cuda/cuda_memory.c). */
    usp_status (*alloc)(void *ctx, size_t bytes, void **out);
    /* Frees device memory from alloc, after the work enqueued so far on the default stream. */
    void (*free)(void *ctx, void *ptr);
    /* (optional, both or none) Host memory a device-to-host copy lands in without the host waiting for
     * it (cuda: pinned; a copy into pageable memory blocks until it is done). NULL: malloc and free. */
    usp_status (*host_alloc)(void *ctx, size_t bytes, void **out);
    void (*host_free)(void *ctx, void *ptr);
    /* Copies bytes; kind says which side is host memory (a host source is read before returning). */
    usp_status (*copy)(void *ctx, void *dst, const void *src, size_t bytes, usp_copy_kind kind,
                       usp_stream_t *stream);
    /* Zeroes device memory. */
    usp_status (*zero)(void *ctx, void *ptr, size_t bytes, usp_stream_t *stream);
    /* (optional) Waits for the stream. Blocking. NULL: every slot completes before it returns. */
    usp_status (*synchronize)(void *ctx, usp_stream_t *stream);
    /* (optional, all six or none, with synchronize) Streams and events, CUDA's semantics (core/ops/ops.h). */
    usp_status (*stream_create)(void *ctx, usp_stream_t **out);
    void (*stream_destroy)(void *ctx, usp_stream_t *stream); /* after synchronize */
    usp_status (*event_create)(void *ctx, usp_event_t **out);
    void (*event_destroy)(void *ctx, usp_event_t *event);
    usp_status (*event_record)(void *ctx, usp_event_t *event, usp_stream_t *stream);
    usp_status (*stream_wait_event)(void *ctx, usp_stream_t *stream, usp_event_t *event);
    /* (optional, both or none, with the event slots) Device timing: an event that records when the
     * device reached it (destroyed with event_destroy), and the seconds from `from` to `to` once both
     * are reached (blocking: waits for `to`). NULL: ops are timed on the host (usp_backend_time_ops). */
    usp_status (*timing_event_create)(void *ctx, usp_event_t **out);
    usp_status (*event_elapsed)(void *ctx, usp_event_t *from, usp_event_t *to, double *seconds);
    /* (optional, with synchronize) Runs what the stream holds without the program waiting for it
     * (usp_backend_run_queued). NULL: synchronize. */
    usp_status (*run_queued)(void *ctx, usp_stream_t *stream);
    /* (optional) Checks and records what a call outside the slots reads and writes in the stream's
     * order (usp_backend_note_access). NULL: nothing is checked. */
    usp_status (*note_access)(void *ctx, usp_stream_t *stream, const char *what, const usp_access *a, int n);
    /* (optional) Bytes of the cache the backend's ops share (a CPU core's L2, a GPU's L2): what a model of
     * which operands an op finds in cache needs (sim/cache_model.h). NULL or 0: not known. */
    size_t (*cache_bytes)(void *ctx);
    /* (optional) Runs fn(arg) on the host in the stream's order; NULL: the wrapper calls it at once. */
    usp_status (*launch_host_func)(void *ctx, usp_stream_t *stream, void (*fn)(void *arg), void *arg);
    /* (optional) 1 when the backend runs `op` (its kind, its map function, its operands' dtypes and
     * shapes): usp_op_run refuses another with USP_ERR_RUNTIME naming the op. NULL: every op. */
    int (*supports)(void *ctx, const usp_op *op);
    /* (optional) Bytes of scratch `op` needs in its USP_OPERAND_SCRATCH operand (attention: 0 where the
     * kernel keeps its state on chip), which usp_op_run allocates around the call on a backend with or
     * without numerics (so a shapes-only run counts them). NULL or 0: none. */
    size_t (*workspace_bytes)(void *ctx, const usp_op *op);
    /* Runs `op` on op->stream (every op but sum_squares, which is blocking, enqueues and may return before
     * it ran): usp_op_run has checked its parameters and built its views (core/ops/op.h), so the slot does
     * only the work; a backend with numerics that stores bf16 reads each operand's dtype from its view.
     * NULL only when has_numerics = 0: every op is then its cost (the meta backend). */
    usp_status (*run)(void *ctx, const usp_op *op);
    /* (optional) Frees the context; NULL: nothing to free. */
    void (*destroy)(void *ctx);
} usp_backend_i;

/* Wraps an interface and its context in a backend handle (it takes the context). */
usp_status usp_backend_create(const usp_backend_i *iface, void *ctx, usp_backend_t **out);

/* The interface of `be`: how a decorator (sim/virtual_streams.c) forwards to the backend it wraps. */
const usp_backend_i *usp_backend_iface_of(const usp_backend_t *be);

/* The context of `be` when it was made with `iface`, else NULL: how a
 * backend's own functions beyond the slots (usp_cuda_stream) find their state. */
void *usp_backend_context_of(usp_backend_t *be, const usp_backend_i *iface);

#endif
