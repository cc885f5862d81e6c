/* What one rank of a run is given, whatever the backend: its place in the
 * world, the world group, and its compute backend. The simulator calls a
 * rank's main function once per simulated GPU; the NCCL launcher once per process. */
#ifndef USP_RANK_H
#define USP_RANK_H

#include "core/comm.h"
#include "core/ops.h"

typedef struct usp_rank_ctx {
    int rank, world_size;
    usp_comm_t *world;       /* the world group, named "world" */
    usp_backend_t *backend;  /* this rank's compute backend */
    usp_stream_t *stream;    /* its stream (NULL on the CPU) */
    /* Seconds of modelled time on this rank so far (the simulator's virtual
     * clock; wall time on real GPUs), through the runtime that runs it. */
    double (*clock)(const void *runtime);
    const void *runtime;
} usp_rank_ctx;

/* The code one rank runs. */
typedef usp_status (*usp_rank_main_fn)(const usp_rank_ctx *ctx, void *arg);

#endif
