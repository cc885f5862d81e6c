/* Tests of ring attention (core/parallel/ring.c) on simulated rings of 1, 2 and 4 ranks.
 *
 * The reference is the single-rank flash attention of the CPU backend over the
 * whole sequence. Global Q, K, V, dO come from a fixed-seed LCG on the host;
 * each simulated rank uploads its own tokens (by the layout: zigzag for the
 * causal mask, contiguous for the full one), runs forward and backward, and
 * writes o, lse, dq, dk, dv back at their global positions, which are then
 * compared element by element with the reference. Then the properties that
 * make it a ring and not just a correct attention: the bytes each rank sends
 * equal the closed forms of ring.c, the zigzag causal ring skips the fully
 * masked products so every rank does the same work, and the scratch is what
 * ring.h says and is all given back. Sizes stay small (seconds, also under ASan). */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_backend.h"
#include "core/parallel/ring.h"
#include "tests/harness.h"
#include "tests/check_main.h"

/* Inputs are in [-1, 1], so o, lse and the gradients are of order 1: the ring
 * differs from one call only by the order of f32 sums (the lse merge), well
 * under this absolute bound. */
#define TOLERANCE 1e-5

#define MAX_RANKS 4

/* ------------------------------------------------------------------------- */
/* Problems                                                                   */

typedef struct ring_case {
    int R;
    int64_t B, N, H, Hkv, D;
    int causal;
    usp_layout_kind layout;
} ring_case;

/* What the cost sink saw on one rank. */
typedef struct rank_counts {
    long fwd_calls, bwd_calls;
    double fwd_flops;
} rank_counts;

typedef struct problem {
    ring_case k;
    usp_seq_layout layout;
    size_t nq, nkv, nl;                 /* elements: [B,N,H,D], [B,N,Hkv,D], [B,H,N] */
    float *q, *kk, *v, *d_o;            /* global inputs */
    float *ro, *rlse, *rdq, *rdk, *rdv; /* the single-rank reference */
    float *o, *lse, *dq, *dk, *dv;      /* the ring's, at global positions */
    int backward;                       /* the ranks run backward too */
    int count_costs;                    /* the ranks count their attention calls */
    usp_overlap overlap;               /* the backward's K/V sent a step ahead (auto: off at these sizes) */
    rank_counts counts[MAX_RANKS];
    size_t comm_bytes[MAX_RANKS];       /* category "comm" between calls (the scratch is held per call) */
    size_t comm_at_peak[MAX_RANKS];     /* category "comm" when the rank's memory peaked (inside a call) */
    size_t left_over[MAX_RANKS];        /* "comm" + "attention workspace" after destroy */
} problem;

/* Fixed-seed 64-bit LCG (Knuth's MMIX constants); the top 24 bits give a float in [-1, 1]. */
static uint64_t lcg_state;
static float lcg_uniform(void)
{
    lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(lcg_state >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static float *floats(size_t n, int random)
{
    float *x = calloc(n, sizeof(float));
    ck_assert_ptr_nonnull(x);
    for (size_t i = 0; random && i < n; i++)
        x[i] = lcg_uniform();
    return x;
}

static usp_attention_shape whole_shape(const ring_case *k)
{
    return (usp_attention_shape){.batch = k->B, .n_q = k->N, .n_kv = k->N, .n_heads = k->H, .n_kv_heads = k->Hkv,
                                 .head_dim = k->D, .causal = k->causal,
                                 .scale = (float)(1.0 / sqrt((double)k->D))};
}

/* The reference: one forward and one backward call over the whole sequence. */
static void reference(problem *p)
{
    usp_backend_t *be;
    ck_assert_int_eq(usp_backend_cpu_create(&be), USP_OK);
    size_t bq = p->nq * sizeof(float), bkv = p->nkv * sizeof(float), bl = p->nl * sizeof(float);
    float *q, *k, *v, *d_o, *o, *lse, *dq, *dk, *dv;
    float **bufs[] = {&q, &k, &v, &d_o, &o, &lse, &dq, &dk, &dv};
    size_t sizes[] = {bq, bkv, bkv, bq, bq, bl, bq, bkv, bkv};
    for (int i = 0; i < 9; i++)
        ck_assert_int_eq(usp_buffer_alloc(be, sizes[i], "test", (void **)bufs[i]), USP_OK);
    const float *in[] = {p->q, p->kk, p->v, p->d_o};
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(usp_buffer_copy(be, *bufs[i], in[i], sizes[i], USP_COPY_HOST_TO_DEVICE, NULL), USP_OK);
    usp_attention_shape s = whole_shape(&p->k);
    ck_assert_int_eq(usp_flash_attention_forward(be, &s, q, k, v, o, lse, NULL), USP_OK);
    ck_assert_int_eq(usp_flash_attention_backward(be, &s, q, k, v, o, lse, d_o, dq, dk, dv, 0, NULL), USP_OK);
    float *out[] = {p->ro, p->rlse, p->rdq, p->rdk, p->rdv};
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(usp_buffer_copy(be, out[i], *bufs[4 + i], sizes[4 + i], USP_COPY_DEVICE_TO_HOST, NULL),
                         USP_OK);
    usp_backend_destroy(be);
}

static void problem_init(problem *p, ring_case k, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    p->k = k;
    ck_assert_int_eq(usp_seq_layout_make(k.layout, k.N, 1, k.R, &p->layout), USP_OK);
    p->nq = (size_t)(k.B * k.N * k.H * k.D);
    p->nkv = (size_t)(k.B * k.N * k.Hkv * k.D);
    p->nl = (size_t)(k.B * k.H * k.N);
    lcg_state = seed;
    p->q = floats(p->nq, 1), p->kk = floats(p->nkv, 1), p->v = floats(p->nkv, 1), p->d_o = floats(p->nq, 1);
    p->ro = floats(p->nq, 0), p->rlse = floats(p->nl, 0), p->rdq = floats(p->nq, 0);
    p->rdk = floats(p->nkv, 0), p->rdv = floats(p->nkv, 0);
    p->o = floats(p->nq, 0), p->lse = floats(p->nl, 0), p->dq = floats(p->nq, 0);
    p->dk = floats(p->nkv, 0), p->dv = floats(p->nkv, 0);
    p->backward = 1;
    reference(p);
}

static void problem_free(problem *p)
{
    float *all[] = {p->q, p->kk, p->v, p->d_o, p->ro, p->rlse, p->rdq, p->rdk, p->rdv,
                    p->o, p->lse, p->dq, p->dk, p->dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

/* ------------------------------------------------------------------------- */
/* One rank of the ring                                                       */

/* Token rows [heads*D] of a [B,N,heads,D] tensor <-> this rank's [B,T,heads,D]. */
static void move_tokens(const problem *p, const usp_token_run *runs, int n_runs, int64_t heads, float *global,
                        float *local, int to_local)
{
    size_t row = (size_t)(heads * p->k.D), T = (size_t)p->layout.per_rank, N = (size_t)p->k.N;
    for (size_t b = 0; b < (size_t)p->k.B; b++)
        for (int i = 0; i < n_runs; i++) {
            float *g = global + (b * N + (size_t)runs[i].global_first) * row;
            float *l = local + (b * T + (size_t)runs[i].local_first) * row;
            size_t bytes = (size_t)runs[i].count * row * sizeof(float);
            memcpy(to_local ? l : g, to_local ? g : l, bytes);
        }
}

/* lse rows: local [B,H,T] -> global [B,H,N]. */
static void place_lse(problem *p, const usp_token_run *runs, int n_runs, const float *local)
{
    size_t T = (size_t)p->layout.per_rank, N = (size_t)p->k.N, H = (size_t)p->k.H;
    for (size_t bh = 0; bh < (size_t)p->k.B * H; bh++)
        for (int i = 0; i < n_runs; i++)
            memcpy(p->lse + bh * N + (size_t)runs[i].global_first, local + bh * T + (size_t)runs[i].local_first,
                   (size_t)runs[i].count * sizeof(float));
}

static void count_cost(void *ctx, const usp_op_cost *cost)
{
    rank_counts *c = ctx;
    if (strcmp(cost->op, "attention_forward") == 0)
        c->fwd_calls++, c->fwd_flops += cost->flops;
    if (strcmp(cost->op, "attention_backward") == 0)
        c->bwd_calls++;
}

/* Uploads this rank's tokens, runs the ring, puts the results at their global positions. */
static usp_status ring_rank_main(const usp_rank_ctx *ctx, void *arg)
{
    problem *p = arg;
    const ring_case *k = &p->k;
    usp_backend_t *be = ctx->backend;
    usp_token_run runs[2];
    int n_runs = usp_seq_layout_runs(&p->layout, ctx->rank, runs);
    size_t T = (size_t)p->layout.per_rank;
    size_t nq = (size_t)k->B * T * (size_t)(k->H * k->D), nkv = (size_t)k->B * T * (size_t)(k->Hkv * k->D);
    size_t nl = (size_t)(k->B * k->H) * T;
    /* host: q, k, v, d_o, then o, lse, dq, dk, dv; device: the same nine */
    size_t sizes[9] = {nq, nkv, nkv, nq, nq, nl, nq, nkv, nkv}, total = 0;
    for (int i = 0; i < 9; i++)
        total += sizes[i];
    float *host = malloc(total * sizeof(float)), *h[9], *d[9] = {0};
    if (!host)
        return usp_error(USP_ERR_RUNTIME, "rank %d: out of memory for the test's host arrays", ctx->rank);
    for (size_t i = 0, at = 0; i < 9; at += sizes[i], i++)
        h[i] = host + at;
    move_tokens(p, runs, n_runs, k->H, p->q, h[0], 1);
    move_tokens(p, runs, n_runs, k->Hkv, p->kk, h[1], 1);
    move_tokens(p, runs, n_runs, k->Hkv, p->v, h[2], 1);
    move_tokens(p, runs, n_runs, k->H, p->d_o, h[3], 1);
    ring_attention *a = NULL;
    usp_status s;
    for (int i = 0; i < 9; i++)
        USP_CHECK_GOTO(harness_upload(ctx, i < 4 ? h[i] : NULL, sizes[i] * sizeof(float), (void **)&d[i]), s, done);
    if (p->count_costs) /* replaces the simulator's sink: this rank's virtual clock stops counting compute */
        usp_backend_set_cost_sink(be, count_cost, &p->counts[ctx->rank]);
    ring_attention_config c = {.backend = be, .ring = ctx->world, .stream = ctx->stream, .layout = p->layout,
                               .batch = k->B, .n_heads = k->H, .n_kv_heads = k->Hkv, .head_dim = k->D,
                               .causal = k->causal, .scale = (float)(1.0 / sqrt((double)k->D)),
                               .backward_overlap = p->overlap};
    USP_CHECK_GOTO(ring_attention_create(&c, &a), s, done);
    p->comm_bytes[ctx->rank] = usp_backend_bytes_in_category(be, "comm");
    USP_CHECK_GOTO(ring_attention_forward(a, d[0], d[1], d[2], d[4], d[5]), s, done);
    if (p->backward)
        USP_CHECK_GOTO(ring_attention_backward(a, d[0], d[1], d[2], d[4], d[5], d[3], d[6], d[7], d[8]), s, done);
    ring_attention_destroy(a);
    a = NULL;
    {
        const char *names[32];
        size_t bytes[32];
        int n = usp_backend_peak_breakdown(be, names, bytes, 32);
        for (int i = 0; i < n; i++)
            if (strcmp(names[i], "comm") == 0)
                p->comm_at_peak[ctx->rank] = bytes[i];
    }
    p->left_over[ctx->rank] =
        usp_backend_bytes_in_category(be, "comm") + usp_backend_bytes_in_category(be, "attention workspace");
    for (int i = 4; i < 9; i++)
        USP_CHECK_GOTO(harness_download(ctx, h[i], d[i], sizes[i] * sizeof(float)), s, done);
    move_tokens(p, runs, n_runs, k->H, p->o, h[4], 0);
    place_lse(p, runs, n_runs, h[5]);
    move_tokens(p, runs, n_runs, k->H, p->dq, h[6], 0);
    move_tokens(p, runs, n_runs, k->Hkv, p->dk, h[7], 0);
    move_tokens(p, runs, n_runs, k->Hkv, p->dv, h[8], 0);
done:
    ring_attention_destroy(a);
    for (int i = 0; i < 9; i++)
        usp_buffer_free(be, d[i]);
    free(host);
    return s;
}

/* ------------------------------------------------------------------------- */
/* Checks                                                                     */

/* Largest |got - want| and where (equal infinities count as 0). */
static double max_error(const float *got, const float *want, size_t n, size_t *where)
{
    double worst = 0;
    *where = 0;
    for (size_t i = 0; i < n; i++) {
        double e = got[i] == want[i] ? 0.0 : fabs((double)got[i] - (double)want[i]);
        if (!(e <= worst)) /* NaN counts as the worst */
            worst = e, *where = i;
    }
    return worst;
}

static void expect_close(const problem *p, const char *what, const float *got, const float *want, size_t n)
{
    size_t where;
    double e = max_error(got, want, n, &where);
    ck_assert_msg(e <= TOLERANCE, "R=%d B=%lld N=%lld H=%lld/%lld D=%lld %s: %s max error %g at element %zu "
                  "(%.9g vs reference %.9g)", p->k.R, (long long)p->k.B, (long long)p->k.N, (long long)p->k.H,
                  (long long)p->k.Hkv, (long long)p->k.D, p->k.causal ? "causal" : "full", what, e, where,
                  (double)got[where], (double)want[where]);
}

static void expect_matches_reference(const problem *p)
{
    expect_close(p, "o", p->o, p->ro, p->nq);
    expect_close(p, "lse", p->lse, p->rlse, p->nl);
    if (!p->backward)
        return;
    expect_close(p, "dq", p->dq, p->rdq, p->nq);
    expect_close(p, "dk", p->dk, p->rdk, p->nkv);
    expect_close(p, "dv", p->dv, p->rdv, p->nkv);
}

/* K+V block of one rank, in bytes: 2 * B * T * Hkv * D * 4. */
static uint64_t kv_block_bytes(const problem *p)
{
    return 2u * (uint64_t)(p->k.B * p->layout.per_rank * p->k.Hkv * p->k.D) * sizeof(float);
}

/* ------------------------------------------------------------------------- */
/* Tests                                                                      */

#define Z USP_LAYOUT_ZIGZAG
#define C USP_LAYOUT_CONTIGUOUS
static const ring_case cases[] = {
    /* R   B   N   H Hkv  D causal layout */
    {1, 2, 64, 4, 2, 32, 1, C}, /* no ring at all */
    {1, 1, 64, 4, 4, 64, 0, C},
    {2, 2, 64, 4, 2, 32, 1, Z},
    {2, 1, 96, 4, 4, 64, 0, C},
    {2, 1, 96, 4, 2, 64, 1, Z},
    {4, 1, 96, 4, 2, 64, 1, Z},
    {4, 2, 64, 4, 2, 32, 1, Z},
    {4, 2, 64, 4, 2, 32, 0, C},
    {4, 1, 96, 2, 1, 32, 0, C},
    {4, 1, 64, 4, 2, 32, 1, C}, /* causal on the contiguous layout: unbalanced, still exact */
    {4, 2, 64, 4, 2, 8, 1, Z},  /* test_train's head_dim model: 4 heads of 8 (2 KV) on d_model 24 */
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

START_TEST(ring_forward_and_backward_equal_single_rank_attention)
{
    problem p;
    problem_init(&p, cases[_i], 1234 + (uint64_t)_i);
    char report[2048];
    usp_status s = harness_run(p.k.R, ring_rank_main, &p, NULL, 0, report, sizeof report);
    ck_assert_msg(s == USP_OK, "R=%d: %s", p.k.R, report);
    expect_matches_reference(&p);
    /* Scratch is held during each call only (none between calls), and all of it is returned. */
    for (int r = 0; r < p.k.R; r++) {
        ck_assert_uint_eq(p.comm_bytes[r], 0);
        /* inside a call: two travelling buffers of K, V, dK, dV = 4 K+V blocks (none when R = 1) */
        ck_assert_uint_eq(p.comm_at_peak[r], p.k.R > 1 ? 4 * kv_block_bytes(&p) : 0);
        ck_assert_uint_eq(p.left_over[r], 0);
    }
    problem_free(&p);
}
END_TEST

/* Bytes and sendrecv calls of every rank in the trace of one run. */
static void run_and_measure(problem *p, uint64_t *bytes, int *calls)
{
    sim_config config = sim_config_default(p->k.R);
    config.stack_bytes = (size_t)1 << 20;
    sim_world *w;
    ck_assert_int_eq(sim_world_create(&config, &w), USP_OK);
    usp_status s = sim_world_run(w, ring_rank_main, p);
    ck_assert_msg(s == USP_OK, "%s", usp_error_message());
    const usp_trace_t *t = sim_world_trace(w);
    for (int r = 0; r < p->k.R; r++) {
        bytes[r] = usp_trace_bytes_sent(t, r);
        calls[r] = 0;
    }
    for (size_t i = 0; i < usp_trace_count(t); i++) {
        const usp_trace_event *e = usp_trace_at(t, i);
        ck_assert_int_eq(e->kind, USP_OP_SENDRECV); /* the ring uses nothing else */
        calls[e->rank]++;
    }
    sim_world_destroy(w);
}

static const ring_case traffic_cases[] = {
    {1, 2, 64, 4, 2, 32, 1, C},
    {2, 1, 64, 4, 2, 32, 0, C},
    {4, 2, 64, 4, 2, 32, 1, Z},
};

/* Forward: x (K+V); backward: x (K+V) + R x (dK+dV), each of
 * 2*B*T*Hkv*D*4 bytes; forward only in one world, both in another, and both
 * with the backward overlapped: the same bytes in R - 1 more calls. */
START_TEST(ring_traffic_per_rank_is_the_closed_form)
{
    problem p;
    problem_init(&p, traffic_cases[_i], 99);
    int R = p.k.R;
    uint64_t X = kv_block_bytes(&p), fwd[MAX_RANKS], both[MAX_RANKS];
    int fwd_calls[MAX_RANKS], both_calls[MAX_RANKS];
    p.backward = 0;
    run_and_measure(&p, fwd, fwd_calls);
    expect_matches_reference(&p);
    p.backward = 1;
    run_and_measure(&p, both, both_calls);
    expect_matches_reference(&p);
    for (int r = 0; r < R; r++) {
        ck_assert_uint_eq(fwd[r], (uint64_t)(R - 1) * X);
        ck_assert_uint_eq(both[r] - fwd[r], (uint64_t)(R - 1) * X + (uint64_t)R * X * (R > 1));
        ck_assert_int_eq(fwd_calls[r], R - 1);
        ck_assert_int_eq(both_calls[r] - fwd_calls[r], R > 1 ? R : 0);
    }
    uint64_t overlapped[MAX_RANKS];
    int overlapped_calls[MAX_RANKS];
    p.overlap = USP_OVERLAP_ON;
    run_and_measure(&p, overlapped, overlapped_calls);
    expect_matches_reference(&p);
    for (int r = 0; r < R; r++) {
        ck_assert_uint_eq(overlapped[r], both[r]);
        ck_assert_int_eq(overlapped_calls[r] - fwd_calls[r], R > 1 ? 2 * R - 1 : 0);
    }
    problem_free(&p);
}
END_TEST

/* Zigzag: rank r computes (r+1) + (2R-r) = 2R+1 of the 4R (query run, key run)
 * products per batch row, the same visible pairs on every rank, and together
 * exactly the causal triangle N(N+1)/2. Contiguous causal: rank r computes only
 * its r+1 past-or-diagonal blocks, so the ranks are unbalanced. */
START_TEST(zigzag_causal_ring_skips_masked_products_and_balances_work)
{
    const ring_case zig = {4, 2, 64, 4, 2, 32, 1, Z}, contig = {4, 2, 64, 4, 2, 32, 1, C};
    const ring_case *both[] = {&zig, &contig};
    for (int c = 0; c < 2; c++) {
        problem p;
        problem_init(&p, *both[c], 7);
        p.count_costs = 1;
        char report[2048];
        ck_assert_msg(harness_run(p.k.R, ring_rank_main, &p, NULL, 0, report, sizeof report) == USP_OK, "%s",
                      report);
        expect_matches_reference(&p);
        int R = p.k.R;
        double per_pair = 4.0 * (double)(p.k.B * p.k.H * p.k.D), T = (double)p.layout.per_rank, sum = 0;
        for (int r = 0; r < R; r++) {
            long expect_calls = (long)p.k.B * (c == 0 ? 2 * R + 1 : r + 1);
            ck_assert_int_eq(p.counts[r].fwd_calls, expect_calls);
            ck_assert_int_eq(p.counts[r].bwd_calls, expect_calls);
            double expect_flops = c == 0 ? p.counts[0].fwd_flops : per_pair * (r * T * T + T * (T + 1) / 2);
            ck_assert_msg(p.counts[r].fwd_flops == expect_flops, "%s rank %d: %.0f flops, expected %.0f",
                          c == 0 ? "zigzag" : "contiguous", r, p.counts[r].fwd_flops, expect_flops);
            sum += p.counts[r].fwd_flops;
        }
        double n = (double)p.k.N;
        ck_assert_msg(sum == per_pair * n * (n + 1) / 2, "total %.0f flops, the causal triangle is %.0f", sum,
                      per_pair * n * (n + 1) / 2);
        problem_free(&p);
    }
}
END_TEST

static usp_status create_with_wrong_layout(const usp_rank_ctx *ctx, void *arg)
{
    (void)arg;
    ring_attention_config c = {.backend = ctx->backend, .ring = ctx->world, .batch = 1, .n_heads = 4,
                               .n_kv_heads = 2, .head_dim = 32, .causal = 1, .scale = 1};
    USP_CHECK(usp_seq_layout_make(USP_LAYOUT_ZIGZAG, 64, 1, 4, &c.layout)); /* for a ring of 4, on 2 ranks */
    ring_attention *a = NULL;
    usp_status s = ring_attention_create(&c, &a);
    ring_attention_destroy(a);
    return s;
}

START_TEST(a_layout_for_another_ring_size_is_a_config_error_naming_it)
{
    char report[2048];
    ck_assert_int_eq(harness_run(2, create_with_wrong_layout, NULL, NULL, 0, report, sizeof report), USP_ERR_CONFIG);
    ck_assert_msg(strstr(report, "--ring 4") && strstr(report, "ring = 2"), "%s", report);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ring");
    TCase *t = tcase_create("ring");
    tcase_set_timeout(t, 120);
    tcase_add_loop_test(t, ring_forward_and_backward_equal_single_rank_attention, 0, N_CASES);
    tcase_add_loop_test(t, ring_traffic_per_rank_is_the_closed_form, 0,
                        (int)(sizeof traffic_cases / sizeof traffic_cases[0]));
    tcase_add_test(t, zigzag_causal_ring_skips_masked_products_and_balances_work);
    tcase_add_test(t, a_layout_for_another_ring_size_is_a_config_error_naming_it);
    suite_add_tcase(s, t);
    return check_main_run(s);
}
