/* Every attention schedule of the table (core/parallel/schedule.h), by the same tests: a new schedule
 * is tested here the moment it has its line in the table.
 *
 * - Each exact schedule, on every mesh of up to 4 ranks it accepts, full and causal, with and without
 *   GQA, gives single-rank flash attention over the whole sequence (forward and backward, within 1e-5
 *   absolute: inputs in [-1, 1], outputs of order 1; the ring merges blocks in another order than one
 *   call); local attention gives each shard's own attention. Each rank sends, by the trace, exactly
 *   the elements its closed form (usp_schedule_i.sent) says.
 * - The same under masks (core/ops/mask.h): packed documents of 1 to 13 tokens that straddle the
 *   ranks, different in each batch row, and sliding windows of 1, 5, past a rank's tokens and past
 *   the sequence, alone and together, causal or not.
 * - Every mesh is picked by exactly one exact schedule, and what a schedule refuses is a
 *   configuration error naming the option to change.
 * - On the explorer (sim/explore.h), no order of a layer's calls deadlocks, and the lint finds no two
 *   groups' calls that may be in flight at once (sim/schedule_lint.h), overlap on or off, with and
 *   without a sliding window (whose shorter ring issues other calls in another order). */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_backend.h"
#include "backends/meta/meta_backend.h"
#include "core/ops/mask.h"
#include "core/parallel/mesh.h"
#include "core/parallel/ring.h"
#include "core/parallel/schedule.h"
#include "sim/explore.h"
#include "sim/schedule_lint.h"
#include "tests/check_main.h"
#include "tests/harness.h"

typedef struct layer_case {
    const usp_schedule_i *schedule;
    int U, R, causal;
    int64_t B, N, H, Hkv, D;
    usp_overlap overlap;
    int64_t window;  /* 0: none */
    int32_t *docs;   /* the documents' table [B][N][2] on the host, or NULL */
    /* global tensors: q, o, dO, dq [B, N, H, D]; k, v, dk, dv [B, N, Hkv, D] */
    float *q, *k, *v, *d_o, *o, *dq, *dk, *dv;
} layer_case;

/* The case's mask with the table at `docs` in some backend's memory. */
static usp_attention_mask mask_of(const layer_case *c, const int32_t *docs)
{
    return (usp_attention_mask){.window = c->window, .docs = c->docs ? docs : NULL, .docs_host = c->docs};
}

static void fill(float *x, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((double)(seed >> 8) / (double)(1u << 24) * 2.0 - 1.0);
    }
}

/* Flash attention of [B, n] tokens at `first` of the global tensors, into the reference outputs (the
 * whole sequence for an exact schedule; one shard for local attention). */
static void attend(layer_case *c, int64_t first, int64_t n)
{
    usp_backend_t *be;
    ck_assert_int_eq(usp_backend_cpu_create(&be), USP_OK);
    const int64_t hq = c->H * c->D, hk = c->Hkv * c->D;
    float *t[10];
    const int64_t sizes[10] = {hq, hk, hk, hq, hq, hq, hk, hk, c->H, 2 * c->N / n}; /* q k v dO o dq dk dv lse docs */
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(usp_buffer_alloc(be, (size_t)(c->B * n * sizes[i]) * 4, "test", (void **)&t[i]), USP_OK);
    if (c->docs)
        memcpy(t[9], c->docs, (size_t)(c->B * c->N * 2) * sizeof(int32_t));
    float *global[8] = {c->q, c->k, c->v, c->d_o, c->o, c->dq, c->dk, c->dv};
    for (int i = 0; i < 4; i++)
        for (int64_t b = 0; b < c->B; b++)
            memcpy(t[i] + b * n * sizes[i], global[i] + (b * c->N + first) * sizes[i], (size_t)(n * sizes[i]) * 4);
    usp_attention_shape s = {.batch = c->B, .n_q = n, .n_kv = n, .n_heads = c->H, .n_kv_heads = c->Hkv,
                             .head_dim = c->D, .q_offset = first, .kv_offset = first, .causal = c->causal,
                             .scale = 1.0f / sqrtf((float)c->D)};
    const usp_attention_mask m = mask_of(c, (const int32_t *)t[9]);
    usp_attention_shape_mask(&s, &m, c->N, 0);
    ck_assert_int_eq(usp_flash_attention_forward(be, &s, t[0], t[1], t[2], t[4], t[8], NULL), USP_OK);
    ck_assert_int_eq(usp_flash_attention_backward(be, &s, t[0], t[1], t[2], t[4], t[8], t[3], t[5], t[6], t[7], 0,
                                                  NULL), USP_OK);
    for (int i = 4; i < 8; i++)
        for (int64_t b = 0; b < c->B; b++)
            memcpy(global[i] + (b * c->N + first) * sizes[i], t[i] + b * n * sizes[i], (size_t)(n * sizes[i]) * 4);
    usp_backend_destroy(be);
}

static void reference(layer_case *c)
{
    const size_t nq = (size_t)(c->B * c->N * c->H * c->D), nk = (size_t)(c->B * c->N * c->Hkv * c->D);
    float **bufs[] = {&c->q, &c->d_o, &c->o, &c->dq, &c->k, &c->v, &c->dk, &c->dv};
    for (int i = 0; i < 8; i++)
        *bufs[i] = calloc(i < 4 ? nq : nk, sizeof(float));
    fill(c->q, nq, 1), fill(c->k, nk, 2), fill(c->v, nk, 3), fill(c->d_o, nq, 4);
    const int64_t shards = c->schedule->exact ? 1 : c->U * c->R, T = c->N / shards;
    for (int64_t p = 0; p < shards; p++) /* local: each rank's contiguous shard alone */
        attend(c, p * T, T);
}

static void free_case(layer_case *c)
{
    free(c->q), free(c->k), free(c->v), free(c->d_o), free(c->o), free(c->dq), free(c->dk), free(c->dv);
}

/* This rank's tokens of a global [B, N, h, D] tensor to/from a local [B, T, h, D] one. */
static void rank_slice(const usp_seq_layout *l, int sp, int64_t B, int64_t h, int64_t D, float *local, float *global,
                       int to_local)
{
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < l->per_rank; t++) {
            float *lp = local + (b * l->per_rank + t) * h * D;
            float *gp = global + (b * l->n + usp_seq_layout_global(l, sp, t)) * h * D;
            memcpy(to_local ? lp : gp, to_local ? gp : lp, (size_t)(h * D) * sizeof(float));
        }
}

static usp_status compare(const char *what, const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - want[i]) <= 1e-5))
            return usp_error(USP_ERR_RUNTIME, "%s[%zu] = %.9g, the reference %.9g", what, i, (double)got[i],
                             (double)want[i]);
    return USP_OK;
}

static usp_schedule_config config_of(const usp_rank_ctx *ctx, const layer_case *c, const usp_mesh *mesh,
                                     const int32_t *docs)
{
    return (usp_schedule_config){.backend = ctx->backend, .stream = ctx->stream, .ulysses = mesh->ulysses,
                                 .ring = mesh->ring, .batch = c->B, .seq_len = c->N, .n_heads = c->H,
                                 .n_kv_heads = c->Hkv, .head_dim = c->D, .causal = c->causal,
                                 .ring_backward_overlap = c->overlap, .ulysses_overlap = c->overlap,
                                 .mask = mask_of(c, docs), .layout_window = c->window};
}

/* The layer forward and backward on this rank; with numbers, each output against the reference's. */
static usp_status run_rank(const usp_rank_ctx *ctx, void *arg)
{
    layer_case *c = arg;
    usp_mesh_shape shape;
    usp_mesh mesh;
    USP_CHECK(usp_mesh_shape_make(ctx->world_size, c->U, c->R, &shape));
    USP_CHECK(usp_mesh_create(ctx->world, &shape, &mesh));
    const int numbers = usp_backend_has_numerics(ctx->backend);
    void *docs = NULL; /* every rank holds the whole table */
    usp_status s = c->docs ? harness_upload(ctx, numbers ? c->docs : NULL, (size_t)(c->B * c->N * 2) * 4, &docs)
                           : USP_OK;
    const usp_schedule_config sc = config_of(ctx, c, &mesh, docs);
    usp_attention *a = NULL;
    if (s == USP_OK)
        s = usp_attention_create(c->schedule, &sc, &a);
    const usp_seq_layout *l = s == USP_OK ? usp_attention_layout(a) : NULL;
    const int sp = usp_comm_rank(mesh.sp);
    const size_t nq = l ? (size_t)(c->B * l->per_rank * c->H * c->D) : 0;
    const size_t nk = l ? (size_t)(c->B * l->per_rank * c->Hkv * c->D) : 0;
    float *host = malloc((nq ? nq : 1) * sizeof(float)), *want = malloc((nq ? nq : 1) * sizeof(float));
    void *dev[8] = {0}; /* q k v dO o dq dk dv */
    float *global[8] = {c->q, c->k, c->v, c->d_o, c->o, c->dq, c->dk, c->dv};
    const char *names[8] = {"q", "k", "v", "dO", "o", "dq", "dk", "dv"};
    for (int i = 0; i < 8 && s == USP_OK; i++) {
        const int64_t h = i == 1 || i == 2 || i == 6 || i == 7 ? c->Hkv : c->H;
        if (i < 4 && numbers)
            rank_slice(l, sp, c->B, h, c->D, host, global[i], 1);
        s = harness_upload(ctx, i < 4 && numbers ? host : NULL, (h == c->H ? nq : nk) * 4, &dev[i]);
    }
    if (s == USP_OK)
        s = usp_attention_forward(a, dev[0], dev[1], dev[2], dev[4]);
    if (s == USP_OK)
        s = usp_attention_backward(a, dev[3], dev[5], dev[6], dev[7]);
    for (int i = 4; i < 8 && s == USP_OK && numbers; i++) {
        const int64_t h = i == 6 || i == 7 ? c->Hkv : c->H;
        const size_t n = (size_t)(c->B * l->per_rank * h * c->D);
        rank_slice(l, sp, c->B, h, c->D, want, global[i], 1);
        harness_download(ctx, host, dev[i], n * 4);
        s = compare(names[i], host, want, n);
    }
    for (int i = 0; i < 8; i++)
        usp_buffer_free(ctx->backend, dev[i]);
    usp_buffer_free(ctx->backend, docs);
    free(host), free(want);
    usp_attention_destroy(a);
    usp_mesh_destroy(&mesh);
    return s;
}

/* The shape the case asks its schedule about. */
static usp_schedule_shape shape_of(const layer_case *c)
{
    return (usp_schedule_shape){.ulysses = c->U, .ring = c->R, .seq_len = c->N, .n_heads = c->H,
                                .n_kv_heads = c->Hkv, .causal = c->causal, .window = c->window};
}

/* Elements each SP rank sent in the run, from the trace, against the schedule's closed form: equal, or
 * at most that under documents, which may end the ring sooner than the window alone (ring.h). */
static void check_traffic(const layer_case *c, const sim_world *w)
{
    const usp_schedule_shape shape = shape_of(c);
    const usp_trace_t *t = sim_world_trace(w);
    for (int r = 0; r < c->U * c->R; r++) {
        uint64_t bytes = 0;
        for (size_t e = 0; e < usp_trace_count(t); e++)
            if (usp_trace_at(t, e)->rank == r)
                bytes += usp_trace_at(t, e)->bytes_sent;
        const double want = c->schedule->sent(&shape, r, c->B, c->D) * sizeof(float);
        ck_assert_msg(c->docs ? (double)bytes <= want : (double)bytes == want, "%s on U %d x R %d, H %lld Hkv %lld, "
                      "window %lld, rank %d: %llu bytes sent, the closed form %.0f", c->schedule->name, c->U, c->R,
                      (long long)c->H, (long long)c->Hkv, (long long)c->window, r, (unsigned long long)bytes, want);
    }
}

static const int meshes[][2] = {{1, 1}, {2, 1}, {4, 1}, {1, 2}, {1, 4}, {2, 2}};
#define N_MESHES ((int)(sizeof meshes / sizeof *meshes))

/* Runs case c on its mesh against its reference and its closed-form traffic; 0 when its schedule does
 * not run on the mesh. */
static int run_case(layer_case *c)
{
    const usp_schedule_shape shape = shape_of(c);
    if (c->schedule->check(&shape) != USP_OK)
        return 0;
    reference(c);
    sim_config config = sim_config_default(c->U * c->R);
    config.make_backend = harness_backend_factory(), config.device_memory = harness_device_memory();
    sim_world *w;
    ck_assert_int_eq(sim_world_create(&config, &w), USP_OK);
    usp_status s = sim_world_run(w, run_rank, c);
    ck_assert_msg(s == USP_OK, "%s on U %d x R %d, causal %d, H %lld Hkv %lld, window %lld, documents %d: %s",
                  c->schedule->name, c->U, c->R, c->causal, (long long)c->H, (long long)c->Hkv, (long long)c->window, c->docs != NULL,
                  usp_error_message());
    check_traffic(c, w);
    sim_world_destroy(w);
    free_case(c);
    return 1;
}

START_TEST(every_schedule_gives_its_reference_and_sends_its_closed_form)
{
    int ran = 0;
    for (int i = 0; i < usp_schedule_count(); i++)
        for (int m = 0; m < N_MESHES; m++)
            for (int causal = 0; causal < 2; causal++)
                for (int gqa = 0; gqa < 2; gqa++) {
                    layer_case c = {.schedule = usp_schedule_at(i), .U = meshes[m][0], .R = meshes[m][1],
                                    .causal = causal, .B = 2, .N = 32, .H = 8, .Hkv = gqa ? 2 : 8, .D = 16};
                    ran += run_case(&c);
                }
    ck_assert_int_ge(ran, 4 * usp_schedule_count()); /* every schedule ran somewhere */
}
END_TEST

/* Two rows of 32 tokens packed with documents of 1 to 20 tokens, cut across ranks of 8 and 16 tokens
 * at other places in each row. */
static const int64_t row_documents[2][8] = {{1, 3, 7, 2, 13, 6}, {5, 1, 1, 20, 5}};

START_TEST(every_schedule_is_exact_under_documents_and_windows)
{
    int32_t table[2 * 32 * 2];
    for (int b = 0; b < 2; b++) {
        int n = 0;
        while (row_documents[b][n])
            n++;
        usp_mask_table_fill(row_documents[b], n, table + 2 * 32 * b);
    }
    const struct { int64_t window; int docs; } masks[] = {{0, 1}, {1, 0}, {5, 0}, {9, 1}, {40, 1}, {3, 1}};
    int ran = 0;
    for (int i = 0; i < usp_schedule_count(); i++)
        for (int m = 0; m < N_MESHES; m++)
            for (size_t k = 0; k < sizeof masks / sizeof *masks; k++)
                for (int causal = 0; causal < 2; causal++) {
                    /* overlap on in every other case: the ring's backward sends ahead, and ends early too */
                    layer_case c = {.schedule = usp_schedule_at(i), .U = meshes[m][0], .R = meshes[m][1],
                                    .causal = causal, .B = 2, .N = 32, .H = 4, .Hkv = 2, .D = 16,
                                    .overlap = (k + causal) % 2 ? USP_OVERLAP_ON : USP_OVERLAP_AUTO,
                                    .window = masks[k].window, .docs = masks[k].docs ? table : NULL};
                    ran += run_case(&c);
                }
    ck_assert_int_ge(ran, 12 * usp_schedule_count());
}
END_TEST

/* ring_steps (ring.h) against the definition: the largest step s at which some ring rank's queries see
 * a key of the block it then holds (rank r - s's), pair by pair, on both layouts, causal or not, windows
 * from 1 to past the sequence: equal on the contiguous layout, never fewer on zigzag. */
START_TEST(the_ring_steps_are_the_blocks_the_window_reaches)
{
    for (int R = 2; R <= 6; R++)
        for (int64_t T = 2; T <= 12; T += 2)
            for (int64_t W = 0; W <= R * T + 3; W++)
                for (int kind = 0; kind < 2; kind++)
                    for (int causal = 0; causal < 2; causal++) {
                        usp_seq_layout l;
                        ck_assert_int_eq(usp_seq_layout_make(kind, R * T, 1, R, &l), USP_OK);
                        const usp_mask_row m = {causal, W, NULL};
                        int needed = 1;
                        for (int r = 0; r < R; r++)
                            for (int s = needed; s < R; s++)
                                for (int64_t i = 0; i < T && needed <= s; i++)
                                    for (int64_t j = 0; j < T && needed <= s; j++)
                                        if (usp_mask_sees(&m, usp_seq_layout_global(&l, r, i),
                                                          usp_seq_layout_global(&l, (r - s + R) % R, j)))
                                            needed = s + 1;
                        const int steps = ring_steps(kind, R, T, causal, W);
                        ck_assert_msg(kind == USP_LAYOUT_CONTIGUOUS ? steps == needed : steps >= needed,
                                      "R %d, T %lld, window %lld, %s, causal %d: %d steps, the mask needs %d", R,
                                      (long long)T, (long long)W, kind ? "zigzag" : "contiguous", causal, steps, needed);
                    }
}
END_TEST

START_TEST(every_mesh_is_picked_by_one_exact_schedule)
{
    for (int U = 1; U <= 8; U++)
        for (int R = 1; R <= 8; R++) {
            int picking = 0;
            for (int i = 0; i < usp_schedule_count(); i++) {
                const usp_schedule_i *s = usp_schedule_at(i);
                if (s->picks && s->picks(U, R)) {
                    picking++;
                    ck_assert_msg(s->exact, "%s picks U %d x R %d but is not exact", s->name, U, R);
                    ck_assert_ptr_eq(usp_schedule_for_mesh(U, R), s);
                }
            }
            ck_assert_msg(picking == 1, "U %d x R %d is picked by %d schedules", U, R, picking);
        }
    for (int i = 0; i < usp_schedule_count(); i++) {
        const usp_schedule_i *s = usp_schedule_at(i);
        ck_assert_ptr_eq(usp_schedule_find(s->name), s);
        ck_assert_msg(s->about && *s->about, "%s says nothing of itself", s->name);
    }
}
END_TEST

START_TEST(what_a_schedule_refuses_names_the_option_to_change)
{
    for (int i = 0; i < usp_schedule_count(); i++) {
        const usp_schedule_i *s = usp_schedule_at(i);
        for (int m = 0; m < N_MESHES; m++) {
            usp_schedule_shape shape = {.ulysses = meshes[m][0], .ring = meshes[m][1], .seq_len = 32, .n_heads = 8,
                                        .n_kv_heads = 2, .causal = 1};
            if (s->check(&shape) != USP_OK) { /* a mesh it does not run on */
                ck_assert_int_eq(s->check(&shape), USP_ERR_CONFIG);
                ck_assert_msg(strstr(usp_error_message(), "--"), "%s: %s", s->name, usp_error_message());
                continue;
            }
            shape.seq_len = 32 * meshes[m][0] * meshes[m][1] + 1; /* a length no layout splits */
            if (meshes[m][0] * meshes[m][1] > 1) {
                ck_assert_int_eq(s->check(&shape), USP_ERR_CONFIG);
                ck_assert_msg(strstr(usp_error_message(), "--seq") && strstr(usp_error_message(), "--pad"), "%s: %s",
                              s->name, usp_error_message());
            }
            shape.seq_len = 32, shape.n_kv_heads = 3; /* KV heads that do not divide the heads */
            ck_assert_int_eq(s->check(&shape), USP_ERR_CONFIG);
            ck_assert_msg(strstr(usp_error_message(), "heads"), "%s: %s", s->name, usp_error_message());
        }
    }
    const usp_schedule_shape four = {.ulysses = 4, .ring = 1, .seq_len = 32, .n_heads = 8, .n_kv_heads = 8};
    const usp_schedule_i *out;
    ck_assert_int_eq(usp_schedule_resolve("zigzag", &four, &out), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "--attention zigzag") && strstr(usp_error_message(), "ulysses"), "%s",
                  usp_error_message());
    ck_assert_int_eq(usp_schedule_resolve("sp", &four, &out), USP_OK);
    ck_assert_str_eq(out->name, "ulysses");
}
END_TEST

/* Also under a window of 5 (64 tokens: the contiguous layout, and on R4 a ring of 2 steps, whose calls and
 * their order differ from the full ring's: one forward sendrecv, not 3, and dK/dV home from r + 1). */
START_TEST(no_order_of_a_layers_calls_deadlocks_nor_lints)
{
    for (int i = 0; i < usp_schedule_count(); i++)
        for (int m = 0; m < N_MESHES; m++)
            for (int run = 0; run < 4; run++) {
                const int overlap = run % 2 ? USP_OVERLAP_ON : USP_OVERLAP_AUTO;
                layer_case c = {.schedule = usp_schedule_at(i), .U = meshes[m][0], .R = meshes[m][1], .causal = 1,
                                .B = 1, .N = 64, .H = 8, .Hkv = 8, .D = 16, .overlap = (usp_overlap)overlap,
                                .window = run / 2 ? 5 : 0};
                const usp_schedule_shape shape = shape_of(&c);
                if (c.schedule->check(&shape) != USP_OK || c.U * c.R == 1)
                    continue;
                sim_config config = sim_config_default(c.U * c.R);
                config.trace = 0, config.record_schedule = 1, config.make_backend = usp_backend_meta_create;
                sim_world *w;
                ck_assert_int_eq(sim_world_create(&config, &w), USP_OK);
                ck_assert_msg(sim_world_run(w, run_rank, &c) == USP_OK, "%s: %s", c.schedule->name,
                              usp_error_message());
                sim_explore_result res;
                const sim_explore_options o = {.slots = 1};
                ck_assert_int_eq(sim_explore(w, &o, &res), USP_OK);
                ck_assert_msg(!res.deadlock, "%s on U %d x R %d (overlap %d): %s", c.schedule->name, c.U, c.R,
                              overlap, usp_strbuf_text(&res.report));
                sim_explore_result_free(&res);
                sim_lint_result lint;
                ck_assert_int_eq(sim_schedule_lint(w, &lint), USP_OK);
                ck_assert_msg(lint.pairs == 0, "%s on U %d x R %d (overlap %d): %s", c.schedule->name, c.U, c.R,
                              overlap, usp_strbuf_text(&lint.report));
                sim_lint_result_free(&lint);
                sim_world_destroy(w);
            }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("schedules");
    TCase *t = tcase_create("schedules");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, every_schedule_gives_its_reference_and_sends_its_closed_form);
    tcase_add_test(t, every_schedule_is_exact_under_documents_and_windows);
    tcase_add_test(t, the_ring_steps_are_the_blocks_the_window_reaches);
    tcase_add_test(t, every_mesh_is_picked_by_one_exact_schedule);
    tcase_add_test(t, what_a_schedule_refuses_names_the_option_to_change);
    tcase_add_test(t, no_order_of_a_layers_calls_deadlocks_nor_lints);
    suite_add_tcase(s, t);
    return check_main_run(s);
}
