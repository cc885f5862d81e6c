/* Benchmark of the communicator in real processes (the mpi runtime) beside the
 * simulator's, through usp's own communicator interface, so the figures
 * include what usp adds (decorator, fingerprints, rank-order reductions).
 *
 *   mpi_comm --runtime sim [--quick] [--json]         4 ranks in this process
 *   mpirun -np 4 mpi_comm --runtime mpi [--check-collectives] [--quick] [--json]
 *
 * Figures, measured in one run and printed, never asserted:
 * 1. all_to_all: each rank sends 16 MiB (4 MiB to each peer; --quick 4 MiB);
 *    bytes a rank sends per second, beside memcpy of the same bytes on rank 0.
 * 2. small calls: microseconds per all_reduce of one f32 and per all_to_all of
 *    one f32 per peer, where the per-call machinery is all there is; run
 *    once without and once with --check-collectives, the difference is the
 *    check's cost per call (bench/mpi.sh prints it).
 * Timing: a barrier, rank 0's CLOCK_MONOTONIC before the first call, a barrier
 * after the last, the clock again: every rank's part of every call is inside. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtimes/mpi/mpi_runtime.h"
#include "bench/cpu_vectors.h"
#include "core/base/clock_seconds.h"
#include "core/comm/comm.h"
#include "core/runtime/rank.h"
#include "sim/sim_runtime.h"

#define WORLD 4
#define MIB ((size_t)1 << 20)

typedef struct bench_run {
    size_t bytes_per_rank;
    int rounds, small_calls;
    double a2a_s, memcpy_s, all_reduce_s, small_a2a_s; /* rank 0's windows */
} bench_run;

static usp_status timed_rounds(const usp_rank_ctx *ctx, int rounds, const void *send, void *recv, size_t count,
                               int all_reduce, double *seconds)
{
    USP_CHECK(usp_comm_barrier(ctx->world, ctx->stream));
    double t0 = usp_wall_seconds();
    for (int i = 0; i < rounds; i++)
        USP_CHECK(all_reduce ? usp_comm_all_reduce(ctx->world, send, recv, count, USP_F32, USP_REDUCE_SUM, ctx->stream)
                             : usp_comm_all_to_all(ctx->world, send, recv, count, USP_F32, ctx->stream));
    USP_CHECK(usp_comm_barrier(ctx->world, ctx->stream));
    *seconds = usp_wall_seconds() - t0;
    return USP_OK;
}

static usp_status bench_rank(const usp_rank_ctx *ctx, void *arg)
{
    bench_run *b = arg;
    size_t count = b->bytes_per_rank / sizeof(float) / (size_t)ctx->world_size;
    float *send = NULL, *recv = NULL;
    USP_CHECK(usp_buffer_alloc(ctx->backend, b->bytes_per_rank, "bench", (void **)&send));
    usp_status s = usp_buffer_alloc(ctx->backend, b->bytes_per_rank, "bench", (void **)&recv);
    if (s == USP_OK) {
        for (size_t i = 0; i < count * (size_t)ctx->world_size; i++)
            send[i] = (float)i, recv[i] = 0;
        s = usp_comm_all_to_all(ctx->world, send, recv, count, USP_F32, ctx->stream); /* warm-up: first touch */
    }
    double a2a = 0, small_reduce = 0, small_a2a = 0;
    if (s == USP_OK)
        s = timed_rounds(ctx, b->rounds, send, recv, count, 0, &a2a);
    if (s == USP_OK)
        s = timed_rounds(ctx, b->small_calls, send, recv, 1, 1, &small_reduce);
    if (s == USP_OK)
        s = timed_rounds(ctx, b->small_calls, send, recv, 1, 0, &small_a2a);
    if (s == USP_OK && ctx->rank == 0) {
        double t0 = usp_wall_seconds();
        for (int i = 0; i < b->rounds; i++) {
            memcpy(recv, send, b->bytes_per_rank);
            send[i % 16] += recv[(i + 1) % 16]; /* the copies are used: none is optimised away */
        }
        b->memcpy_s = usp_wall_seconds() - t0;
        b->a2a_s = a2a, b->all_reduce_s = small_reduce, b->small_a2a_s = small_a2a;
    }
    usp_buffer_free(ctx->backend, send);
    usp_buffer_free(ctx->backend, recv);
    return s;
}

int main(int argc, char **argv)
{
    const char *runtime = "sim";
    int quick = 0, json = 0, check = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--runtime") && i + 1 < argc)
            runtime = argv[++i];
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--check-collectives"))
            check = 1;
        else {
            fprintf(stderr, "usage: [mpirun -np 4] mpi_comm --runtime sim|mpi [--check-collectives] [--quick] "
                    "[--json]\n");
            return 2;
        }
    }
    bench_run b = {.bytes_per_rank = (quick ? 4 : 16) * MIB, .rounds = quick ? 5 : 20,
                   .small_calls = quick ? 200 : 2000};
    usp_runtime_options o = {.world_size = WORLD, .check_collectives = check};
    usp_runtime_t *rt = NULL;
    usp_status s = !strcmp(runtime, "mpi") ? mpi_runtime_create(&o, &rt) : sim_runtime_create(&o, &rt);
    if (s == USP_OK)
        s = usp_runtime_run(rt, bench_rank, &b);
    if (s != USP_OK) {
        fprintf(stderr, "mpi_comm: %s\n", usp_error_message());
        usp_runtime_destroy(rt);
        return 1;
    }
    if (usp_runtime_prints(rt)) {
        double sent = (double)b.bytes_per_rank * b.rounds;
        double a2a_bps = sent / b.a2a_s, memcpy_bps = sent / b.memcpy_s;
        double reduce_us = 1e6 * b.all_reduce_s / b.small_calls, small_a2a_us = 1e6 * b.small_a2a_s / b.small_calls;
        if (json)
            printf("{\"runtime\":\"%s\",\"check_collectives\":%s,\"world\":%d,\"cpu_vectors\":\"%s\",\"bytes_per_rank\":"
                   "%zu,\"all_to_all_bytes_per_s\":%.4g,\"memcpy_bytes_per_s\":%.4g,\"ratio\":%.3f,"
                   "\"all_reduce_1_us\":%.2f,\"all_to_all_1_us\":%.2f}\n", runtime, check ? "true" : "false", WORLD,
                   bench_cpu_vectors(), b.bytes_per_rank, a2a_bps, memcpy_bps, a2a_bps / memcpy_bps, reduce_us,
                   small_a2a_us);
        else
            printf("%s%s, %d ranks, CPU %s: all_to_all %.2f GB/s a rank (%zu MiB each) vs memcpy %.2f GB/s = %.2f; "
                   "all_reduce(1 f32) %.1f us, all_to_all(1 f32) %.1f us a call\n", runtime,
                   check ? " --check-collectives" : "", WORLD, bench_cpu_vectors(), a2a_bps / 1e9,
                   b.bytes_per_rank / MIB, memcpy_bps / 1e9, a2a_bps / memcpy_bps, reduce_us, small_a2a_us);
    }
    usp_runtime_destroy(rt);
    return 0;
}
