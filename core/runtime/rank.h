/* What one rank of a run is given, whatever the backend: its place in the
 * world, the world group, its compute backend, and the runtime's services
 * (clock, gather). A runtime (core/runtime/runtime.h) calls a rank's main function:
 * the simulator once per simulated GPU, the NCCL launcher once per process. */
#ifndef USP_RANK_H
#define USP_RANK_H

#include "core/comm/comm.h"
#include "core/ops/ops.h"
#include "core/trace/trace.h"

typedef struct usp_rank_ctx {
    int rank, world_size;
    usp_comm_t *world;       /* the world group, named "world" */
    usp_backend_t *backend;  /* this rank's compute backend */
    usp_stream_t *stream;    /* its stream (NULL on the CPU) */
    /* Seconds of modelled time on this rank so far (the simulator's virtual
     * clock; wall time on real GPUs), through the runtime that runs it. */
    double (*clock)(const void *runtime);
    const void *runtime;
    /* (optional) Collects `bytes` from every rank into `all` on rank 0, rank by
     * rank (usp_rank_gather: the wrapper, and what NULL means). */
    usp_status (*gather)(const struct usp_rank_ctx *ctx, const void *mine, size_t bytes, void *all);
    void *gather_ctx;        /* the runtime's state for `gather` */
    /* (optional) The run's trace when the command asked for one (--trace), where
     * the rank's code marks its steps (usp_trace_record_step); NULL: none. */
    usp_trace_t *trace;
} usp_rank_ctx;

/* The code one rank runs. */
typedef usp_status (*usp_rank_main_fn)(const usp_rank_ctx *ctx, void *arg);

/* Collects the figures a command reports for every rank (peak memory, step
 * times): `bytes` of `mine` from each rank land in `all` on rank 0, in rank
 * order ([world_size * bytes]; `all` is ignored on other ranks). Every rank
 * calls it, the same calls in the same order, with the same `bytes`. It is
 * the runtime's channel, outside the program being modelled: no modelled
 * time, no trace event, and it works on the meta backend (whose buffers hold
 * nothing), so asking for a figure never changes the figures. Rank 0 may
 * read `all` once the runtime's run has returned, so `all` must live until
 * then (a runtime may fill it sooner: a real launcher before the call
 * returns, the simulator when the last rank makes the call). Without a runtime (gather NULL) a world of one
 * rank copies; more ranks are a USP_ERR_RUNTIME. */
usp_status usp_rank_gather(const usp_rank_ctx *ctx, const void *mine, size_t bytes, void *all);

#endif
