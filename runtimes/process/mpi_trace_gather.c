/* One trace of a launched world on rank 0 (see mpi_trace_gather.h). */
#include "runtimes/process/mpi_trace_gather.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/trace/trace_pack.h"

usp_status mpi_launch_trace_start(mpi_launch *l, const usp_runtime_options *o)
{
    return o->trace ? usp_trace_create(&l->process.trace) : USP_OK;
}

usp_status mpi_launch_trace_ops(mpi_launch *l, usp_backend_t *backend, const usp_rank_ctx *rank)
{
    if (!l->process.trace)
        return USP_OK;
    return usp_backend_time_ops(backend, l->process.trace, l->rank, rank->clock, rank->runtime);
}

const usp_trace_t *mpi_launch_trace(const void *ctx) { return ((const mpi_launch *)ctx)->process.trace; }

/* Rank 0: the other ranks' packed traces (sizes[r] bytes each, one after another in `all`) into its own. */
static usp_status unpack_all(usp_trace_t *t, const char *all, const int *sizes, int world)
{
    size_t at = (size_t)sizes[0];
    for (int r = 1; r < world; r++) {
        char from[32];
        snprintf(from, sizeof from, "rank %d", r);
        USP_CHECK(usp_trace_unpack(t, all + at, (size_t)sizes[r], from));
        at += (size_t)sizes[r];
    }
    return USP_OK;
}

/* Rank 0: room for the ranks' packed traces of sizes[r] bytes (-1: a rank that could not pack its own), at
 * offsets[r] in *all; a size over MPI's int counts, or out of memory, is an error. */
static usp_status make_room(const mpi_launch *l, const int *sizes, int *offsets, char **all)
{
    long long total = 0;
    for (int r = 0; r < l->size; r++) {
        if (sizes[r] < 0)
            return usp_error(USP_ERR_RUNTIME, "--trace: rank %d could not pack its trace", r);
        offsets[r] = (int)total;
        total += sizes[r];
        if (total > 0x7fffffff)
            return usp_error(USP_ERR_RUNTIME, "--trace: the ranks' traces are over %lld bytes, past MPI's 2 GiB "
                             "count; trace fewer --steps", total);
    }
    return usp_malloc((void **)all, (size_t)total + 1, "the ranks' traces");
}

usp_status mpi_launch_trace_gather(mpi_launch *l, usp_backend_t *backend, usp_status s)
{
    if (!l->process.trace)
        return s;
    if (s == USP_OK && backend) /* device-timed ops: their events are read now, after the run */
        s = usp_backend_flush_op_times(backend);
    int ok = s == USP_OK, all_ok = 0;
    if (MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, l->gather_comm) != MPI_SUCCESS || !all_ok)
        return s; /* a failed run: rank 0 keeps what it recorded itself */
    char *mine = NULL, *all = NULL;
    size_t size = 0;
    int *sizes = NULL, world = l->size, root = l->rank == 0;
    s = usp_trace_pack(l->process.trace, &mine, &size);
    if (s == USP_OK && size > 0x7fffffff)
        s = usp_error(USP_ERR_RUNTIME, "--trace: rank %d recorded %zu bytes of trace, over MPI's 2 GiB count; "
                      "trace fewer --steps", l->rank, size);
    int count = s == USP_OK ? (int)size : -1; /* -1: this rank sends nothing, and rank 0 says so */
    int room = usp_calloc((void **)&sizes, 2 * (size_t)world, sizeof *sizes, "the trace sizes") == USP_OK;
    /* every rank takes part in each collective, whatever failed, so that none waits for another */
    if (MPI_Gather(&count, 1, MPI_INT, sizes, 1, MPI_INT, 0, l->gather_comm) != MPI_SUCCESS && s == USP_OK)
        s = usp_error(USP_ERR_RUNTIME, "--trace: gathering the ranks' trace sizes failed");
    usp_status made = !room ? USP_ERR_RUNTIME : root ? make_room(l, sizes, sizes + world, &all) : USP_OK;
    int go = made == USP_OK; /* rank 0 says whether it has room for every trace */
    if (MPI_Bcast(&go, 1, MPI_INT, 0, l->gather_comm) != MPI_SUCCESS && s == USP_OK)
        s = usp_error(USP_ERR_RUNTIME, "--trace: the gather's go-ahead failed");
    if (root && made != USP_OK && s == USP_OK)
        s = made;
    if (go && count >= 0 && MPI_Gatherv(mine, count, MPI_CHAR, all, sizes, sizes + world, MPI_CHAR, 0,
                                        l->gather_comm) != MPI_SUCCESS && s == USP_OK)
        s = usp_error(USP_ERR_RUNTIME, "--trace: gathering the ranks' traces failed");
    if (root && go && s == USP_OK)
        s = unpack_all(l->process.trace, all, sizes, world);
    free(mine), free(all), free(sizes);
    return s;
}
