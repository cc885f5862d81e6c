/* Benchmark of the simulator's communicator (sim/): what a collective costs in
 * wall time, as opposed to the virtual time the cost model charges.
 *
 * Two figures, both at W = 8 ranks, measured in one run:
 *
 * 1. all_to_all bandwidth. Each rank sends 64 MiB of f32 (8 MiB to each peer),
 *    so one collective copies 8 x 64 MiB. The simulator's bytes/s is printed
 *    beside plain memcpy bytes/s over the same buffers in the same run: the
 *    data of a simulated collective is nothing but copies, so the ratio says
 *    how much the simulator adds (matching, buffer checks, fiber switches,
 *    threads) to the copies it cannot avoid. On a shared, noisy machine only
 *    a ratio measured side by side means anything.
 *
 * 2. Small collectives per second: all_reduce of 1 f32 and all_to_all of 1 f32
 *    per peer, where the data is nothing and the per-call machinery is all.
 *    This bounds how fast a simulated training schedule (thousands of calls
 *    per step) can run. Measured with tracing off and on.
 *
 * Timing is on the rank side, with CLOCK_MONOTONIC: after a warm-up call and a
 * barrier, rank 0 reads the clock before its first call and after its last.
 * Rank 0 runs first after the barrier (equal virtual clocks, ties by rank id)
 * and its last call returns once the last member has posted and the data has
 * moved, so the window holds every rank's part of every timed collective and
 * nothing of the setup: fiber stacks, backends, allocations and first-touch
 * page faults are one-time costs that timing the whole sim_world_run would
 * mix in. Figures are reported, never asserted. */
#include <jansson.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/base/clock_seconds.h"
#include "sim/world.h"

#define WORLD 8
#define MAX_ROUNDS 8
#define MIB ((size_t)1 << 20)

typedef struct bench_opts {
    int json, quick;
} bench_opts;

/* Sizes and counts of one run (--quick shrinks them). */
typedef struct bench_plan {
    size_t a2a_bytes_per_rank; /* send buffer per rank; recv is the same */
    int a2a_rounds, a2a_reps;  /* rounds of (reps all_to_alls, then reps memcpys per rank) */
    int small_calls;           /* timed small collectives per measurement */
} bench_plan;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: comm [--json] [--quick] [--help]\n"
            "\n"
            "Wall-clock cost of the simulator's collectives at W = 8 ranks (sim/, cpu backend).\n"
            "\n"
            "all_to_all: each rank sends 64 MiB of f32 (8 MiB per peer). sim_bytes_per_s =\n"
            "  (8 x 64 MiB copied per collective) x collectives / wall seconds, timed by rank 0\n"
            "  from before its first to after its last call of a round (after a warm-up and a\n"
            "  barrier). memcpy_bytes_per_s: each rank memcpy's its 64 MiB send buffer to its\n"
            "  receive buffer (same pages, warm), one thread, the same number of times; bytes\n"
            "  over the sum of the ranks' memcpy seconds. Rounds alternate the two; each figure\n"
            "  is its best round. ratio = sim_bytes_per_s / memcpy_bytes_per_s (target >= 0.5).\n"
            "  The simulator copies with OpenMP (OMP_NUM_THREADS), memcpy with one thread.\n"
            "\n"
            "small_collectives: 50000 all_reduce of 1 f32 element, and 50000 all_to_all of\n"
            "  1 f32 element per peer, each with tracing off and on. collectives_per_s =\n"
            "  collectives (one = all 8 ranks' calls) / wall seconds, timed by rank 0 as above\n"
            "  (target >= 20000 with tracing off).\n"
            "\n"
            "  --json   one JSON object per line instead of the table\n"
            "  --quick  8 MiB per rank, 2 rounds of 1, 2000 small collectives (for tests)\n"
            "  --help   this text\n"
            "\n"
            "JSON fields:\n"
            "  {\"bench\":\"all_to_all\", world, bytes_per_rank, dtype, collectives, threads,\n"
            "   sim_seconds, memcpy_seconds (best round), sim_bytes_per_s, memcpy_bytes_per_s, ratio}\n"
            "  {\"bench\":\"small_collectives\", world, op (\"all_reduce\" | \"all_to_all\"),\n"
            "   count (elements per call, per peer for all_to_all), trace (bool), collectives,\n"
            "   seconds, collectives_per_s}\n"
            "Exit status: 0, 2 for a bad option, else the usp status of a failed call.\n");
}

/* Runs fn on a fresh world of WORLD ranks with tracing on or off. */
static usp_status run_world(int trace, usp_rank_main_fn fn, void *arg)
{
    sim_config config = sim_config_default(WORLD);
    config.trace = trace;
    sim_world *w;
    USP_CHECK(sim_world_create(&config, &w));
    usp_status s = sim_world_run(w, fn, arg);
    sim_world_destroy(w);
    return s;
}

/* --- all_to_all bandwidth ------------------------------------------------- */

typedef struct a2a_run {
    const bench_plan *plan;
    double sim_s[MAX_ROUNDS];    /* rank 0's wall seconds of a round's all_to_alls */
    double memcpy_s[MAX_ROUNDS]; /* a round's memcpy seconds, summed over the ranks */
} a2a_run;

/* One round's timed all_to_alls; rank 0 keeps the time. */
static usp_status a2a_timed(const usp_rank_ctx *ctx, a2a_run *run, int round, const void *send, void *recv)
{
    size_t count = run->plan->a2a_bytes_per_rank / sizeof(float) / (size_t)ctx->world_size;
    USP_CHECK(usp_comm_barrier(ctx->world, ctx->stream));
    double t0 = usp_wall_seconds();
    for (int i = 0; i < run->plan->a2a_reps; i++)
        USP_CHECK(usp_comm_all_to_all(ctx->world, send, recv, count, USP_F32, ctx->stream));
    if (ctx->rank == 0)
        run->sim_s[round] = usp_wall_seconds() - t0;
    return USP_OK;
}

/* The reference: the same bytes through plain memcpy over the same (warm) buffers.
 * The cpu backend's memory is host memory, so reading it here is what the
 * simulator's own copies do; no call yields, so no other rank interleaves. */
static void a2a_reference(const usp_rank_ctx *ctx, a2a_run *run, int round, const void *send, void *recv)
{
    (void)ctx;
    double t0 = usp_wall_seconds();
    for (int i = 0; i < run->plan->a2a_reps; i++)
        memcpy(recv, send, run->plan->a2a_bytes_per_rank);
    run->memcpy_s[round] += usp_wall_seconds() - t0;
}

static usp_status a2a_rank(const usp_rank_ctx *ctx, void *arg)
{
    a2a_run *run = arg;
    size_t bytes = run->plan->a2a_bytes_per_rank, count = bytes / sizeof(float) / (size_t)ctx->world_size;
    void *send = NULL, *recv = NULL;
    usp_status s;
    USP_CHECK_GOTO(usp_buffer_alloc(ctx->backend, bytes, "comm", &send), s, done);
    USP_CHECK_GOTO(usp_buffer_alloc(ctx->backend, bytes, "comm", &recv), s, done);
    /* touch every page now, so that no round pays first-touch faults */
    USP_CHECK_GOTO(usp_buffer_zero(ctx->backend, send, bytes, ctx->stream), s, done);
    USP_CHECK_GOTO(usp_buffer_zero(ctx->backend, recv, bytes, ctx->stream), s, done);
    USP_CHECK_GOTO(usp_comm_all_to_all(ctx->world, send, recv, count, USP_F32, ctx->stream), s, done);
    for (int round = 0; round < run->plan->a2a_rounds; round++) {
        USP_CHECK_GOTO(a2a_timed(ctx, run, round, send, recv), s, done);
        a2a_reference(ctx, run, round, send, recv);
    }
done:
    usp_buffer_free(ctx->backend, send);
    usp_buffer_free(ctx->backend, recv);
    return s;
}

static double min_of(const double *x, int n)
{
    double m = x[0];
    for (int i = 1; i < n; i++)
        m = x[i] < m ? x[i] : m;
    return m;
}

static void a2a_print(const bench_opts *o, const bench_plan *p, const a2a_run *run)
{
    double sim_s = min_of(run->sim_s, p->a2a_rounds), ref_s = min_of(run->memcpy_s, p->a2a_rounds);
    double bytes = (double)WORLD * (double)p->a2a_bytes_per_rank * p->a2a_reps; /* per round, either way */
    double sim_bps = bytes / sim_s, ref_bps = bytes / ref_s;
    if (o->json) {
        json_t *j = json_pack("{s:s,s:i,s:I,s:s,s:i,s:i,s:f,s:f,s:f,s:f,s:f}", "bench", "all_to_all",
                              "world", WORLD, "bytes_per_rank", (json_int_t)p->a2a_bytes_per_rank, "dtype",
                              "f32", "collectives", p->a2a_reps, "threads", omp_get_max_threads(),
                              "sim_seconds", sim_s, "memcpy_seconds", ref_s, "sim_bytes_per_s", sim_bps,
                              "memcpy_bytes_per_s", ref_bps, "ratio", sim_bps / ref_bps);
        char *text = json_dumps(j, JSON_COMPACT);
        printf("%s\n", text);
        free(text);
        json_decref(j);
        return;
    }
    size_t per_rank = p->a2a_bytes_per_rank / MIB;
    printf("all_to_all, W = %d, %zu MiB f32 per rank (%zu MiB per peer), best of %d rounds of %d\n",
           WORLD, per_rank, per_rank / WORLD, p->a2a_rounds, p->a2a_reps);
    printf("  %-28s %8.2f GB/s  (%.1f ms per collective, %d threads)\n", "simulated all_to_all",
           sim_bps / 1e9, 1e3 * sim_s / p->a2a_reps, omp_get_max_threads());
    printf("  %-28s %8.2f GB/s  (one thread)\n", "plain memcpy, same bytes", ref_bps / 1e9);
    printf("  %-28s %8.2f       (target >= 0.5)\n\n", "ratio", sim_bps / ref_bps);
}

static usp_status bench_all_to_all(const bench_opts *o, const bench_plan *p)
{
    a2a_run run = {.plan = p};
    /* tracing off: one event per call is nothing beside 64 MiB of copies */
    USP_CHECK(run_world(0, a2a_rank, &run));
    a2a_print(o, p, &run);
    return USP_OK;
}

/* --- small collectives ------------------------------------------------------ */

typedef struct small_run {
    usp_comm_kind op; /* USP_OP_ALL_REDUCE or USP_OP_ALL_TO_ALL */
    int calls;
    double seconds;   /* rank 0's wall seconds of the timed calls */
} small_run;

static usp_status small_call(const usp_rank_ctx *ctx, const small_run *run, const void *send, void *recv)
{
    if (run->op == USP_OP_ALL_REDUCE)
        return usp_comm_all_reduce(ctx->world, send, recv, 1, USP_F32, USP_REDUCE_SUM, ctx->stream);
    return usp_comm_all_to_all(ctx->world, send, recv, 1, USP_F32, ctx->stream);
}

static usp_status small_rank(const usp_rank_ctx *ctx, void *arg)
{
    small_run *run = arg;
    size_t bytes = (size_t)ctx->world_size * sizeof(float); /* all_to_all: 1 element per peer */
    void *send = NULL, *recv = NULL;
    usp_status s;
    USP_CHECK_GOTO(usp_buffer_alloc(ctx->backend, bytes, "comm", &send), s, done);
    USP_CHECK_GOTO(usp_buffer_alloc(ctx->backend, bytes, "comm", &recv), s, done);
    USP_CHECK_GOTO(usp_buffer_zero(ctx->backend, send, bytes, ctx->stream), s, done);
    USP_CHECK_GOTO(small_call(ctx, run, send, recv), s, done); /* warm-up */
    USP_CHECK_GOTO(usp_comm_barrier(ctx->world, ctx->stream), s, done);
    double t0 = usp_wall_seconds();
    for (int i = 0; i < run->calls; i++)
        USP_CHECK_GOTO(small_call(ctx, run, send, recv), s, done);
    if (ctx->rank == 0)
        run->seconds = usp_wall_seconds() - t0;
done:
    usp_buffer_free(ctx->backend, send);
    usp_buffer_free(ctx->backend, recv);
    return s;
}

static void small_print(const bench_opts *o, const small_run *run, int trace)
{
    double per_s = run->calls / run->seconds;
    const char *op = usp_comm_kind_name(run->op);
    if (o->json) {
        json_t *j = json_pack("{s:s,s:i,s:s,s:i,s:b,s:i,s:f,s:f}", "bench", "small_collectives", "world", WORLD,
                              "op", op, "count", 1, "trace", trace, "collectives", run->calls, "seconds",
                              run->seconds, "collectives_per_s", per_s);
        char *text = json_dumps(j, JSON_COMPACT);
        printf("%s\n", text);
        free(text);
        json_decref(j);
        return;
    }
    printf("  %-12s %-6s %10d %16.0f %14.2f\n", op, trace ? "on" : "off", run->calls, per_s,
           1e6 * run->seconds / run->calls);
}

static usp_status bench_small(const bench_opts *o, const bench_plan *p)
{
    static const usp_comm_kind ops[] = {USP_OP_ALL_REDUCE, USP_OP_ALL_TO_ALL};
    if (!o->json) {
        printf("small collectives, W = %d, 1 f32 element (per peer for all_to_all); target >= 20000/s, trace off\n",
               WORLD);
        printf("  %-12s %-6s %10s %16s %14s\n", "op", "trace", "calls", "collectives/s", "us/collective");
    }
    for (int k = 0; k < 2; k++)
        for (int trace = 0; trace <= 1; trace++) {
            small_run run = {.op = ops[k], .calls = p->small_calls};
            USP_CHECK(run_world(trace, small_rank, &run));
            small_print(o, &run, trace);
        }
    return USP_OK;
}

/* --- command line ----------------------------------------------------------- */

static void parse_args(int argc, char **argv, bench_opts *o)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            o->json = 1;
        else if (strcmp(argv[i], "--quick") == 0)
            o->quick = 1;
        else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            exit(0);
        } else {
            fprintf(stderr, "comm: unknown option '%s' (see comm --help)\n", argv[i]);
            exit(2);
        }
    }
}

int main(int argc, char **argv)
{
    bench_opts o = {0};
    parse_args(argc, argv, &o);
    bench_plan p = o.quick ? (bench_plan){.a2a_bytes_per_rank = 8 * MIB, .a2a_rounds = 2, .a2a_reps = 1,
                                          .small_calls = 2000}
                           : (bench_plan){.a2a_bytes_per_rank = 64 * MIB, .a2a_rounds = 3, .a2a_reps = 2,
                                          .small_calls = 50000};
    usp_status s = bench_all_to_all(&o, &p);
    if (s == USP_OK)
        s = bench_small(&o, &p);
    if (s != USP_OK) {
        fprintf(stderr, "comm: %s\n", usp_error_message());
        return (int)s;
    }
    return 0;
}
