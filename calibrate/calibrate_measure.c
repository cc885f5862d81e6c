/* The measurements of `usp calibrate` on one rank (see calibrate_measure.h). */
#include "calibrate/calibrate_measure.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/comm/comm.h"
#include "core/ops/ops.h"
#include "calibrate/calibrate_kernels.h"

#define HOST_NAME_BYTES 64
#define MIB ((size_t)1 << 20)
#define ITERATIONS_MAX 50 /* calls a size, at most (iterations()) */
#define STAGGER_BYTES ((size_t)16 << 20) /* zeroed by the last rank before each cold call (time_op) */
#define FLUSH_BYTES ((size_t)128 << 20)  /* zeroed by every rank before each cold call, as before a cold kernel */
#define COLD_ITERATIONS 5                /* cold calls a size, at most: each pays a flush */
#define SPIN_SECONDS 1e-3                /* a hot call's stagger */
#define SPIN_READS_MAX (1 << 16)         /* its clock reads, at most: the simulator's clock does not move */

const char *calibrate_level_name(int level)
{
    static const char *const names[CAL_LEVELS] = {"world", "node", "network"};
    return level >= 0 && level < CAL_LEVELS ? names[level] : "?";
}

const char *calibrate_op_name(int op)
{
    static const char *const names[CAL_OPS] = {"all_to_all", "all_reduce", "sendrecv"};
    return op >= 0 && op < CAL_OPS ? names[op] : "?";
}

static double clock_now(const usp_rank_ctx *ctx) { return ctx->clock(ctx->runtime); }

/* node_of[W]: each rank's node, numbered in order of first appearance, from the host names (or --gpus-per-node). */
static usp_status find_nodes(const usp_rank_ctx *ctx, int gpus_per_node, int *node_of)
{
    const int W = ctx->world_size;
    if (gpus_per_node > 0) {
        for (int r = 0; r < W; r++)
            node_of[r] = r / gpus_per_node;
        return USP_OK;
    }
    char mine[HOST_NAME_BYTES] = {0}, *all = NULL;
    if (gethostname(mine, sizeof mine - 1) != 0)
        strcpy(mine, "?");
    void *send = NULL, *recv = NULL;
    usp_status s = usp_calloc((void **)&all, (size_t)W, HOST_NAME_BYTES, "the host names");
    if (s == USP_OK)
        s = usp_buffer_alloc(ctx->backend, HOST_NAME_BYTES, "calibrate", &send);
    if (s == USP_OK)
        s = usp_buffer_alloc(ctx->backend, (size_t)W * HOST_NAME_BYTES, "calibrate", &recv);
    if (s == USP_OK)
        s = usp_buffer_copy(ctx->backend, send, mine, HOST_NAME_BYTES, USP_COPY_HOST_TO_DEVICE, ctx->stream);
    if (s == USP_OK)
        s = usp_comm_all_gather(ctx->world, send, recv, HOST_NAME_BYTES, USP_U8, ctx->stream);
    if (s == USP_OK)
        s = usp_buffer_download(ctx->backend, all, recv, (size_t)W * HOST_NAME_BYTES, ctx->stream);
    for (int r = 0, next = 0; r < W && s == USP_OK; r++) {
        node_of[r] = -1;
        for (int q = 0; q < r && node_of[r] < 0; q++)
            if (strncmp(all + (size_t)r * HOST_NAME_BYTES, all + (size_t)q * HOST_NAME_BYTES, HOST_NAME_BYTES) == 0)
                node_of[r] = node_of[q];
        if (node_of[r] < 0)
            node_of[r] = next++;
    }
    usp_buffer_free(ctx->backend, send);
    usp_buffer_free(ctx->backend, recv);
    free(all);
    return s;
}

/* Nodes and ranks a node from node_of; unequal nodes are refused (the model's nodes are alike). */
static usp_status node_shape(const int *node_of, int W, int *nodes, int *per_node)
{
    int n = 0, *count = NULL;
    for (int r = 0; r < W; r++)
        n = node_of[r] + 1 > n ? node_of[r] + 1 : n;
    USP_CHECK(usp_calloc((void **)&count, (size_t)n, sizeof *count, "the node counts"));
    for (int r = 0; r < W; r++)
        count[node_of[r]]++;
    usp_status s = USP_OK;
    for (int k = 1; k < n && s == USP_OK; k++)
        if (count[k] != count[0])
            s = usp_error(USP_ERR_CONFIG, "node %d has %d ranks and node 0 %d: the cluster model's nodes are "
                          "alike; start the same number of ranks on every node", k, count[k], count[0]);
    for (int r = 1; r < W && s == USP_OK; r++)
        if (node_of[r] < node_of[r - 1])
            s = usp_error(USP_ERR_CONFIG, "rank %d is on node %d after rank %d on node %d: the cluster model puts "
                          "rank r on node r / gpus_per_node; place the ranks node by node (mpirun --map-by slot, "
                          "srun --distribution=block) or give --gpus-per-node", r, node_of[r], r - 1, node_of[r - 1]);
    *nodes = n, *per_node = count[0];
    free(count);
    return s;
}

/* Calls of one size: enough to fill a budget of bytes, within [lo, hi]. */
static int iterations(const calibrate_plan *p, size_t bytes)
{
    size_t budget = (p->quick ? 8 : 256) * MIB;
    int lo = p->quick ? 2 : 5, hi = p->quick ? 10 : 50;
    size_t n = budget / (bytes ? bytes : 1);
    return n < (size_t)lo ? lo : n > (size_t)hi ? hi : (int)n;
}

/* Elements a rank sends for `op` of about `bytes` on a group of n: an all_to_all's per peer, else the whole. */
static size_t op_count(int op, size_t bytes, int n)
{
    size_t elems = bytes / sizeof(float);
    size_t count = op == CAL_OP_ALL_TO_ALL ? elems / (size_t)n : elems;
    return count ? count : 1;
}

static size_t op_bytes(int op, size_t count, int n)
{
    return count * sizeof(float) * (op == CAL_OP_ALL_TO_ALL ? (size_t)n : 1);
}

static usp_status issue(const usp_rank_ctx *ctx, usp_comm_t *g, int op, const float *send, float *recv, size_t count)
{
    int n = usp_comm_size(g), r = usp_comm_rank(g);
    switch (op) {
    case CAL_OP_ALL_TO_ALL: return usp_comm_all_to_all(g, send, recv, count, USP_F32, ctx->stream);
    case CAL_OP_ALL_REDUCE: return usp_comm_all_reduce(g, send, recv, count, USP_F32, USP_REDUCE_SUM, ctx->stream);
    default: /* nccl-tests' sendrecv: to the next rank, from the previous one */
        return usp_comm_sendrecv(g, send, count, (r + 1) % n, recv, count, (r + n - 1) % n, USP_F32, ctx->stream);
    }
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The last rank of a hot call is busy for SPIN_SECONDS without touching memory. */
static void spin(const usp_rank_ctx *ctx)
{
    double t0 = clock_now(ctx);
    for (int i = 0; i < SPIN_READS_MAX && clock_now(ctx) - t0 < SPIN_SECONDS; i++)
        ;
}

/* The buffers of a timed call, the one that stays in cache and the ones that flush it. */
typedef struct op_buffers {
    const float *send;
    float *recv;
    void *stagger, *flush;
    void *times, *all_times; /* a rank's posts and ends (2 x ITERATIONS_MAX doubles), and every member's */
} op_buffers;

/* Each call's transfer as `plan --compare` measures one in a step (plan/trace_phases.c): every member's time
 * from the last member's post to its own end (0 for a member done before it), the mean over the members.
 * times[r] holds member r's posts, then its ends (clocks aligned across ranks: core/runtime/rank.h). */
static void transfers(const double *times, int n, int iters, double *out)
{
    for (int i = 0; i < iters; i++) {
        double last_post = -INFINITY, sum = 0;
        for (int r = 0; r < n; r++)
            last_post = fmax(last_post, times[(size_t)r * 2 * ITERATIONS_MAX + (size_t)i]);
        for (int r = 0; r < n; r++)
            sum += fmax(0, times[(size_t)r * 2 * ITERATIONS_MAX + ITERATIONS_MAX + (size_t)i] - last_post);
        out[i] = sum / n;
    }
}

/* One warm-up call, then `iters` calls as a step meets them: after a barrier the group's last rank is busy
 * first (cold: every rank has flushed its cache, and the last rank zeroes STAGGER_BYTES, about a millisecond
 * on a CPU core; hot: it spins), so its peers post and wait for it. Every member notes its post and its end
 * (the backend synchronised); the members' notes are gathered and each call's transfer is what `plan
 * --compare` sets against the model (transfers()). Timed by the last rank alone, from its post to its own end,
 * an all_reduce of 2 processes took 190 us where its peer, done 185 us later, made the mean 282 us in a step
 * (tiny, 8192 tokens). Timed in lockstep instead, the calls ran 2-3 times faster than the same calls of a
 * step on mpi (a 1 MiB all_to_all of 2 processes: 61 us, and 148-183 us where one peer had waited 2-10 ms).
 * The median call: on a machine shared with other work one call whose process lost its core takes a thousand
 * times the others. */
static usp_status time_op(const usp_rank_ctx *ctx, usp_comm_t *g, int op, size_t count, int iters, int hot,
                          const op_buffers *b, double *seconds)
{
    double took[ITERATIONS_MAX], times[2 * ITERATIONS_MAX] = {0}; /* posts, then ends */
    iters = iters < ITERATIONS_MAX ? iters : ITERATIONS_MAX;
    iters = hot || iters < COLD_ITERATIONS ? iters : COLD_ITERATIONS;
    const int last = usp_comm_rank(g) == usp_comm_size(g) - 1, n = usp_comm_size(g);
    USP_CHECK(issue(ctx, g, op, b->send, b->recv, count)); /* warm-up: connections, first touch */
    for (int i = 0; i < iters; i++) {
        if (!hot)
            USP_CHECK(usp_buffer_zero(ctx->backend, b->flush, FLUSH_BYTES, ctx->stream));
        USP_CHECK(usp_comm_barrier(g, ctx->stream));
        if (last && !hot)
            USP_CHECK(usp_buffer_zero(ctx->backend, b->stagger, STAGGER_BYTES, ctx->stream));
        USP_CHECK(usp_backend_synchronize(ctx->backend, ctx->stream));
        if (last && hot)
            spin(ctx);
        times[i] = clock_now(ctx);
        USP_CHECK(issue(ctx, g, op, b->send, b->recv, count));
        USP_CHECK(usp_backend_synchronize(ctx->backend, ctx->stream));
        times[ITERATIONS_MAX + i] = clock_now(ctx);
    }
    if (usp_backend_has_numerics(ctx->backend)) {
        USP_CHECK(usp_buffer_copy(ctx->backend, b->times, times, sizeof times, USP_COPY_HOST_TO_DEVICE,
                                  ctx->stream));
        USP_CHECK(usp_comm_all_gather(g, b->times, b->all_times, sizeof times, USP_U8, ctx->stream));
        double *all = NULL;
        USP_CHECK(usp_malloc((void **)&all, (size_t)n * sizeof times, "the calls' times"));
        usp_status s = usp_buffer_download(ctx->backend, all, b->all_times, (size_t)n * sizeof times, ctx->stream);
        if (s == USP_OK)
            transfers(all, n, iters, took);
        free(all);
        USP_CHECK(s);
    } else { /* the simulator's meta backend moves no data; there every member ends at the last post plus the
              * call's price, so the last rank's own time is the mean */
        for (int i = 0; i < iters; i++)
            took[i] = last ? times[ITERATIONS_MAX + i] - times[i] : 0.0;
    }
    qsort(took, (size_t)iters, sizeof *took, by_value);
    *seconds = took[iters / 2];
    return USP_OK;
}

/* Every op at every size on group g (one of the level's groups; all of them run at once). */
static usp_status sweep_level(const usp_rank_ctx *ctx, calibrate_run *run, int level, usp_comm_t *g,
                              const op_buffers *b, calibrate_record *rec)
{
    const calibrate_plan *p = run->plan;
    int n = usp_comm_size(g);
    if (ctx->rank == 0)
        run->level_ranks[level] = n;
    for (int op = 0; op < CAL_OPS; op++)
        for (int i = 0; i < p->n_sizes; i++) {
            size_t count = op_count(op, p->sizes[i], n);
            if (ctx->rank == 0)
                run->bytes[level][op][i] = op_bytes(op, count, n);
            USP_CHECK(time_op(ctx, g, op, count, iterations(p, p->sizes[i]), 0, b, &rec->seconds[level][op][i]));
            if (op != CAL_OP_SENDRECV) /* the collective tables' ops */
                USP_CHECK(time_op(ctx, g, op, count, iterations(p, p->sizes[i]), 1, b,
                                  &rec->hot_seconds[level][op][i]));
        }
    return USP_OK;
}

/* The levels: the world, and when it spans nodes the node and network groups. */
static usp_status sweep(const usp_rank_ctx *ctx, calibrate_run *run, const int *node_of, int nodes, int per_node,
                        calibrate_record *rec)
{
    const calibrate_plan *p = run->plan;
    size_t largest = p->sizes[p->n_sizes - 1] + (size_t)ctx->world_size * sizeof(float);
    float *send = NULL, *recv = NULL;
    void *stagger = NULL, *flush = NULL, *times = NULL, *all_times = NULL;
    const size_t times_bytes = 2 * ITERATIONS_MAX * sizeof(double);
    usp_comm_t *node = NULL, *network = NULL;
    usp_status s = usp_buffer_alloc(ctx->backend, largest, "calibrate", (void **)&send);
    if (s == USP_OK)
        s = usp_buffer_alloc(ctx->backend, largest, "calibrate", (void **)&recv);
    if (s == USP_OK)
        s = usp_buffer_alloc(ctx->backend, STAGGER_BYTES, "calibrate", &stagger);
    if (s == USP_OK)
        s = usp_buffer_alloc(ctx->backend, FLUSH_BYTES, "calibrate (cache flush)", &flush);
    if (s == USP_OK)
        s = usp_buffer_alloc(ctx->backend, times_bytes, "calibrate", &times);
    if (s == USP_OK)
        s = usp_buffer_alloc(ctx->backend, (size_t)ctx->world_size * times_bytes, "calibrate", &all_times);
    if (s == USP_OK)
        s = usp_buffer_zero(ctx->backend, send, largest, ctx->stream);
    const op_buffers b = {send, recv, stagger, flush, times, all_times};
    if (s == USP_OK && ctx->world_size > 1)
        s = sweep_level(ctx, run, CAL_LEVEL_WORLD, ctx->world, &b, rec);
    if (s == USP_OK && nodes > 1 && per_node > 1) { /* one rank a node: the world is the network level */
        s = usp_comm_split(ctx->world, node_of[ctx->rank], ctx->rank, "node", &node);
        if (s == USP_OK)
            s = usp_comm_split(ctx->world, ctx->rank % per_node, ctx->rank, "network", &network);
        if (s == USP_OK)
            s = sweep_level(ctx, run, CAL_LEVEL_NODE, node, &b, rec);
        if (s == USP_OK)
            s = sweep_level(ctx, run, CAL_LEVEL_NETWORK, network, &b, rec);
    }
    usp_comm_destroy(node);
    usp_comm_destroy(network);
    usp_buffer_free(ctx->backend, send);
    usp_buffer_free(ctx->backend, recv);
    usp_buffer_free(ctx->backend, stagger);
    usp_buffer_free(ctx->backend, flush);
    usp_buffer_free(ctx->backend, times);
    usp_buffer_free(ctx->backend, all_times);
    return s;
}

/* Device buffers of `n` floats each, filled with small pseudo-random numbers (no NaN, no denormals). */
static usp_status alloc_filled(const usp_rank_ctx *ctx, float **bufs, int k, size_t n)
{
    float *host = NULL;
    USP_CHECK(usp_calloc((void **)&host, n, sizeof *host, "calibration data"));
    uint32_t x = 12345u + (uint32_t)ctx->rank;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        host[i] = (float)((x >> 8) & 0xffff) / 65536.0f - 0.5f;
    }
    usp_status s = USP_OK;
    for (int i = 0; i < k && s == USP_OK; i++) {
        s = usp_buffer_alloc(ctx->backend, n * sizeof(float), "calibrate", (void **)&bufs[i]);
        if (s == USP_OK)
            s = usp_buffer_copy(ctx->backend, bufs[i], host, n * sizeof(float), USP_COPY_HOST_TO_DEVICE, ctx->stream);
    }
    if (s == USP_OK)
        s = usp_backend_synchronize(ctx->backend, ctx->stream);
    free(host);
    return s;
}

static void free_all(const usp_rank_ctx *ctx, float **bufs, int k)
{
    for (int i = 0; i < k; i++)
        usp_buffer_free(ctx->backend, bufs[i]);
}

/* One run of a kernel: the i-th of a timing. */
typedef usp_status (*kernel_fn)(const usp_rank_ctx *ctx, float **bufs, const void *shape);

/* The fastest of `reps` runs of fn after one warm-up, each synchronised: its seconds and the work (flops,
 * bytes, outputs) the backend reported for it. The fastest, not the mean: a kernel's rate is what it reaches
 * when nothing else takes its cores (or SMs); collectives, which the whole group waits on, are timed by the mean. */
static usp_status time_fastest(const usp_rank_ctx *ctx, kernel_fn fn, float **bufs, const void *shape, int reps,
                               sim_kernel_point *out)
{
    USP_CHECK(fn(ctx, bufs, shape));
    *out = (sim_kernel_point){.seconds = INFINITY};
    for (int i = 0; i < reps; i++) {
        USP_CHECK(usp_backend_synchronize(ctx->backend, ctx->stream));
        double f0 = usp_backend_flops(ctx->backend), b0, o0, b1, o1, t0 = clock_now(ctx);
        usp_backend_work(ctx->backend, &b0, &o0);
        USP_CHECK(fn(ctx, bufs, shape));
        USP_CHECK(usp_backend_synchronize(ctx->backend, ctx->stream));
        double t = clock_now(ctx) - t0;
        usp_backend_work(ctx->backend, &b1, &o1);
        if (t < out->seconds)
            *out = (sim_kernel_point){usp_backend_flops(ctx->backend) - f0, b1 - b0, o1 - o0, t};
    }
    return USP_OK;
}

static usp_status run_gemm(const usp_rank_ctx *ctx, float **m, const void *shape)
{
    int64_t n = *(const int64_t *)shape;
    usp_gemm_desc g = {.m = n, .n = n, .k = n, .alpha = 1, .beta = 0, .a = m[0], .lda = n, .b = m[1], .ldb = n,
                       .c = m[2], .ldc = n, .batch = 1};
    return usp_gemm(ctx->backend, &g, ctx->stream);
}

enum { Q, K, V, O, DO, DQ, DK, DV, LSE, N_ATTENTION_BUFS };

static usp_status run_forward(const usp_rank_ctx *ctx, float **b, const void *shape)
{
    return usp_flash_attention_forward(ctx->backend, shape, b[Q], b[K], b[V], b[O], b[LSE], ctx->stream);
}

static usp_status run_backward(const usp_rank_ctx *ctx, float **b, const void *shape)
{
    return usp_flash_attention_backward(ctx->backend, shape, b[Q], b[K], b[V], b[O], b[LSE], b[DO], b[DQ], b[DK],
                                        b[DV], 0, ctx->stream);
}

static usp_status run_copy(const usp_rank_ctx *ctx, float **b, const void *shape)
{
    return usp_buffer_copy(ctx->backend, b[1], b[0], *(const size_t *)shape, USP_COPY_DEVICE_TO_DEVICE, ctx->stream);
}

/* A square n x n x n GEMM. */
static usp_status time_gemm(const usp_rank_ctx *ctx, int64_t n, int reps, calibrate_record *rec)
{
    float *m[3] = {0};
    usp_status s = alloc_filled(ctx, m, 3, (size_t)(n * n));
    if (s == USP_OK)
        s = time_fastest(ctx, run_gemm, m, &n, reps, &rec->reference[0]);
    rec->gemm_s = rec->reference[0].seconds, rec->gemm_flops = rec->reference[0].flops;
    free_all(ctx, m, 3);
    return s;
}

/* Causal flash attention forward (which also makes the o and lse the backward reads), then backward, on
 * [1, T, H, D]. */
static usp_status time_attention(const usp_rank_ctx *ctx, int64_t T, int64_t H, int64_t D, int reps,
                                 calibrate_record *rec)
{
    usp_attention_shape sh = {.batch = 1, .n_q = T, .n_kv = T, .n_heads = H, .n_kv_heads = H, .head_dim = D,
                              .causal = 1, .scale = 1.0f / 8.0f};
    float *b[N_ATTENTION_BUFS] = {0};
    usp_status s = alloc_filled(ctx, b, LSE, (size_t)(T * H * D));
    if (s == USP_OK)
        s = usp_buffer_alloc(ctx->backend, (size_t)(H * T) * sizeof(float), "calibrate", (void **)&b[LSE]);
    if (s == USP_OK)
        s = time_fastest(ctx, run_forward, b, &sh, reps, &rec->reference[1]);
    if (s == USP_OK)
        s = time_fastest(ctx, run_backward, b, &sh, reps, &rec->reference[2]);
    rec->attention_s = rec->reference[1].seconds, rec->attention_flops = rec->reference[1].flops;
    rec->backward_s = rec->reference[2].seconds, rec->backward_flops = rec->reference[2].flops;
    free_all(ctx, b, N_ATTENTION_BUFS);
    return s;
}

/* Device-to-device copies: the memory bandwidth (bytes read + written). */
static usp_status time_copy(const usp_rank_ctx *ctx, size_t bytes, int reps, calibrate_record *rec)
{
    float *b[2] = {0};
    sim_kernel_point copy = {0};
    usp_status s = alloc_filled(ctx, b, 2, bytes / sizeof(float));
    if (s == USP_OK)
        s = time_fastest(ctx, run_copy, b, &bytes, reps, &copy);
    rec->copy_s = copy.seconds;
    rec->copy_bytes = 2.0 * (double)bytes;
    free_all(ctx, b, 2);
    return s;
}

static usp_status kernels(const usp_rank_ctx *ctx, calibrate_run *run, calibrate_record *rec)
{
    int quick = run->plan->quick, reps = quick ? 3 : 5, n = quick ? 256 : 1024, tokens = quick ? 256 : 1024;
    if (ctx->rank == 0)
        run->gemm_n = n, run->attention_tokens = tokens, run->attention_heads = 4, run->attention_head_dim = 64;
    USP_CHECK(usp_comm_barrier(ctx->world, ctx->stream)); /* every rank computes at once, as in a step */
    USP_CHECK(time_gemm(ctx, n, reps, rec));
    USP_CHECK(time_attention(ctx, tokens, 4, 64, reps, rec));
    USP_CHECK(time_copy(ctx, (quick ? 8 : 64) * MIB, reps, rec));
    return quick ? USP_OK : calibrate_kernel_sweep(ctx, run, rec);
}

usp_status calibrate_rank(const usp_rank_ctx *ctx, void *arg)
{
    calibrate_run *run = arg;
    const int W = ctx->world_size;
    calibrate_record rec = {0};
    int *node_of = NULL, nodes = 1, per_node = W;
    USP_CHECK(usp_calloc((void **)&node_of, (size_t)W, sizeof *node_of, "the node of each rank"));
    usp_status s = find_nodes(ctx, run->plan->gpus_per_node, node_of);
    if (s == USP_OK)
        s = node_shape(node_of, W, &nodes, &per_node);
    if (s == USP_OK && ctx->rank == 0) {
        run->nodes = nodes, run->gpus_per_node = per_node;
        snprintf(run->backend, sizeof run->backend, "%s", usp_backend_name(ctx->backend));
        run->cache_bytes = (double)usp_backend_cache_bytes(ctx->backend);
    }
    if (s == USP_OK)
        s = sweep(ctx, run, node_of, nodes, per_node, &rec);
    if (s == USP_OK)
        s = kernels(ctx, run, &rec);
    if (s == USP_OK)
        s = usp_rank_gather(ctx, &rec, sizeof rec, run->records);
    free(node_of);
    return s;
}
