/* Ulysses and the Ulysses x Ring hybrid against single-rank flash attention
 * on the whole sequence.
 *
 * Ulysses forward must be bitwise identical: the all-to-alls move bytes and
 * nothing else, and the kernel computes each (batch, head) the same way
 * whatever the other heads. Backward is bitwise too, except where KV heads are
 * shared by several ranks (U a multiple of the KV heads): their gradients are
 * partial sums over each rank's query heads, added across ranks, a different
 * order of the same float additions: within 1e-6 relative there. The hybrid
 * merges ring blocks with the online softmax, in another order than one call:
 * within 1e-5 absolute (inputs in [-1, 1], outputs of order 1). */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_backend.h"
#include "core/parallel/mesh.h"
#include "core/parallel/ulysses.h"
#include "tests/harness.h"
#include "tests/check_main.h"

typedef struct attn_case {
    int U, R, causal;
    int64_t B, N, H, Hkv, D;
    double fwd_tol, bwd_tol; /* 0: bitwise */
    int backward;            /* 0: forward only (for the traffic test) */
    /* global tensors: q, o, dO, dq [B, N, H, D]; k, v, dk, dv [B, N, Hkv, D] */
    float *q, *k, *v, *d_o, *o, *dq, *dk, *dv;
} attn_case;

static void fill(float *x, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((double)(seed >> 8) / (double)(1u << 24) * 2.0 - 1.0);
    }
}

/* Inputs and the single-rank reference outputs. */
static void reference(attn_case *c)
{
    size_t nq = (size_t)(c->B * c->N * c->H * c->D), nk = (size_t)(c->B * c->N * c->Hkv * c->D);
    float **bufs[] = {&c->q, &c->d_o, &c->o, &c->dq, &c->k, &c->v, &c->dk, &c->dv};
    for (int i = 0; i < 8; i++)
        *bufs[i] = calloc(i < 4 ? nq : nk, sizeof(float));
    fill(c->q, nq, 1), fill(c->k, nk, 2), fill(c->v, nk, 3), fill(c->d_o, nq, 4);
    usp_backend_t *be;
    ck_assert_int_eq(usp_backend_cpu_create(&be), USP_OK);
    float *q, *k, *v, *o, *lse, *d_o, *dq, *dk, *dv;
    const float *host[] = {c->q, c->k, c->v, c->d_o};
    float **dev[] = {&q, &k, &v, &d_o};
    for (int i = 0; i < 4; i++) {
        size_t n = i == 1 || i == 2 ? nk : nq;
        ck_assert_int_eq(usp_buffer_alloc(be, n * 4, "test", (void **)dev[i]), USP_OK);
        memcpy(*dev[i], host[i], n * 4);
    }
    usp_buffer_alloc(be, nq * 4, "test", (void **)&o), usp_buffer_alloc(be, nq * 4, "test", (void **)&dq);
    usp_buffer_alloc(be, nk * 4, "test", (void **)&dk), usp_buffer_alloc(be, nk * 4, "test", (void **)&dv);
    usp_buffer_alloc(be, (size_t)(c->B * c->H * c->N) * 4, "test", (void **)&lse);
    usp_attention_shape s = {.batch = c->B, .n_q = c->N, .n_kv = c->N, .n_heads = c->H, .n_kv_heads = c->Hkv,
                             .head_dim = c->D, .causal = c->causal, .scale = 1.0f / sqrtf((float)c->D)};
    ck_assert_int_eq(usp_flash_attention_forward(be, &s, q, k, v, o, lse, NULL), USP_OK);
    ck_assert_int_eq(usp_flash_attention_backward(be, &s, q, k, v, o, lse, d_o, dq, dk, dv, 0, NULL), USP_OK);
    memcpy(c->o, o, nq * 4), memcpy(c->dq, dq, nq * 4), memcpy(c->dk, dk, nk * 4), memcpy(c->dv, dv, nk * 4);
    usp_backend_destroy(be);
}

static void free_case(attn_case *c)
{
    free(c->q), free(c->k), free(c->v), free(c->d_o), free(c->o), free(c->dq), free(c->dk), free(c->dv);
}

/* Copies this rank's tokens of a global [B, N, h, D] tensor to/from a local [B, T, h, D] one. */
static void rank_slice(const usp_seq_layout *l, int sp_rank, int64_t B, int64_t h, int64_t D, float *local,
                       float *global, int to_local)
{
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < l->per_rank; t++) {
            int64_t g = usp_seq_layout_global(l, sp_rank, t);
            float *lp = local + (b * l->per_rank + t) * h * D, *gp = global + (b * l->n + g) * h * D;
            memcpy(to_local ? lp : gp, to_local ? gp : lp, (size_t)(h * D) * sizeof(float));
        }
}

/* tol = 0: bitwise; tol < 1e-5: relative to the largest |want| of the tensor; else absolute. */
static usp_status compare(const char *what, const float *got, const float *want, size_t n,
                          double tol)
{
    double scale = 1.0;
    if (tol > 0 && tol < 1e-5) {
        scale = 0.0;
        for (size_t i = 0; i < n; i++)
            scale = fabs((double)want[i]) > scale ? fabs((double)want[i]) : scale;
    }
    for (size_t i = 0; i < n; i++) {
        int ok = tol == 0 ? memcmp(&got[i], &want[i], sizeof(float)) == 0
                          : fabs((double)got[i] - want[i]) <= tol * scale;
        if (!ok)
            return usp_error(USP_ERR_RUNTIME, "%s[%zu] = %.9g, single rank %.9g (tolerance %g%s)",
                             what, i, (double)got[i], (double)want[i], tol, tol == 0 ? ": bitwise" : "");
    }
    return USP_OK;
}

static usp_status run_rank(const usp_rank_ctx *ctx, void *arg)
{
    attn_case *c = arg;
    usp_mesh_shape shape;
    usp_mesh mesh;
    USP_CHECK(usp_mesh_shape_make(ctx->world_size, c->U, c->R, &shape));
    USP_CHECK(usp_mesh_create(ctx->world, &shape, &mesh));
    ulysses_attention_config cfg = {.backend = ctx->backend, .ulysses = mesh.ulysses, .ring = mesh.ring,
                                    .batch = c->B, .seq_len = c->N, .n_heads = c->H, .n_kv_heads = c->Hkv,
                                    .head_dim = c->D, .causal = c->causal};
    ulysses_attention *a = NULL;
    usp_status s = ulysses_attention_create(&cfg, &a);
    if (s != USP_OK) {
        usp_mesh_destroy(&mesh);
        return s;
    }
    const usp_seq_layout *l = ulysses_attention_layout(a);
    int sp = usp_comm_rank(mesh.sp);
    size_t nq = (size_t)(c->B * l->per_rank * c->H * c->D), nk = (size_t)(c->B * l->per_rank * c->Hkv * c->D);
    float *host = malloc(nq * sizeof(float)), *want = malloc(nq * sizeof(float));
    void *q, *k, *v, *o, *d_o, *dq, *dk, *dv;
    rank_slice(l, sp, c->B, c->H, c->D, host, c->q, 1);
    USP_CHECK(harness_upload(ctx, host, nq * 4, &q));
    rank_slice(l, sp, c->B, c->Hkv, c->D, host, c->k, 1);
    USP_CHECK(harness_upload(ctx, host, nk * 4, &k));
    rank_slice(l, sp, c->B, c->Hkv, c->D, host, c->v, 1);
    USP_CHECK(harness_upload(ctx, host, nk * 4, &v));
    rank_slice(l, sp, c->B, c->H, c->D, host, c->d_o, 1);
    USP_CHECK(harness_upload(ctx, host, nq * 4, &d_o));
    USP_CHECK(harness_upload(ctx, NULL, nq * 4, &o));
    USP_CHECK(harness_upload(ctx, NULL, nq * 4, &dq));
    USP_CHECK(harness_upload(ctx, NULL, nk * 4, &dk));
    USP_CHECK(harness_upload(ctx, NULL, nk * 4, &dv));
    s = ulysses_attention_forward(a, q, k, v, o);
    if (s == USP_OK) {
        rank_slice(l, sp, c->B, c->H, c->D, want, c->o, 1);
        harness_download(ctx, host, o, nq * 4);
        s = compare("o", host, want, nq, c->fwd_tol);
    }
    if (s == USP_OK && c->backward)
        s = ulysses_attention_backward(a, d_o, dq, dk, dv);
    const struct { void *dev; float *global; int64_t h; const char *name; } grads[] = {
        {dq, c->dq, c->H, "dq"}, {dk, c->dk, c->Hkv, "dk"}, {dv, c->dv, c->Hkv, "dv"}};
    for (int i = 0; i < 3 && s == USP_OK && c->backward; i++) {
        size_t n = (size_t)(c->B * l->per_rank * grads[i].h * c->D);
        rank_slice(l, sp, c->B, grads[i].h, c->D, want, grads[i].global, 1);
        harness_download(ctx, host, grads[i].dev, n * 4);
        s = compare(grads[i].name, host, want, n, c->bwd_tol);
    }
    void *all[] = {q, k, v, o, d_o, dq, dk, dv};
    for (int i = 0; i < 8; i++)
        usp_buffer_free(ctx->backend, all[i]);
    free(host), free(want);
    ulysses_attention_destroy(a);
    usp_mesh_destroy(&mesh);
    return s;
}

static void check_case(attn_case c)
{
    c.backward = 1;
    reference(&c);
    char report[4096];
    usp_status s = harness_run(c.U * c.R, run_rank, &c, NULL, 0, report, sizeof report);
    free_case(&c);
    ck_assert_msg(s == USP_OK, "U=%d R=%d causal=%d H=%lld Hkv=%lld D=%lld N=%lld: %s", c.U, c.R, c.causal,
                  (long long)c.H, (long long)c.Hkv, (long long)c.D, (long long)c.N, report);
}

START_TEST(ulysses_forward_is_bitwise_single_rank)
{
    const int Us[] = {2, 4, 8};
    for (int i = 0; i < 3; i++)
        for (int causal = 0; causal < 2; causal++) {
            check_case((attn_case){.U = Us[i], .R = 1, .causal = causal, .B = 2, .N = 64, .H = 8, .Hkv = 8, .D = 32});
            /* GQA: 2 KV heads split (U = 2) or shared (U = 4, 8): dk, dv sums in another order */
            check_case((attn_case){.U = Us[i], .R = 1, .causal = causal, .B = 1, .N = 48, .H = 8, .Hkv = 2, .D = 64,
                                   .bwd_tol = Us[i] > 2 ? 1e-6 : 0});
        }
    /* the heads of a model with a head width of its own (test_train: d_model 24, 4 heads of 8, 2 KV
       heads): the layer sees only H, Hkv and D, never d_model */
    check_case((attn_case){.U = 2, .R = 1, .causal = 1, .B = 2, .N = 64, .H = 4, .Hkv = 2, .D = 8});
}
END_TEST

START_TEST(uneven_heads_give_the_single_rank_result)
{
    for (int causal = 0; causal < 2; causal++) {
        check_case((attn_case){.U = 4, .R = 1, .causal = causal, .B = 1, .N = 64, .H = 6, .Hkv = 6, .D = 32});
        check_case((attn_case){.U = 4, .R = 1, .causal = causal, .B = 2, .N = 40, .H = 5, .Hkv = 5, .D = 32});
    }
}
END_TEST

START_TEST(hybrid_matches_single_rank)
{
    const int Rs[] = {2, 4};
    for (int i = 0; i < 2; i++)
        for (int causal = 0; causal < 2; causal++)
            check_case((attn_case){.U = 2, .R = Rs[i], .causal = causal, .B = 1, .N = 64, .H = 4, .Hkv = 2, .D = 32,
                                   .fwd_tol = 1e-5, .bwd_tol = 1e-5});
    /* test_train's head_dim model: 4 heads of 8 (2 KV) */
    check_case((attn_case){.U = 2, .R = 2, .causal = 1, .B = 2, .N = 64, .H = 4, .Hkv = 2, .D = 8, .fwd_tol = 1e-5,
                           .bwd_tol = 1e-5});
}
END_TEST

/* Bytes each rank sends, from the trace, against the closed form of ulysses.h. */
START_TEST(ulysses_traffic_matches_the_closed_form)
{
    const struct { int U; int64_t H, Hkv; } cases[] = {{4, 8, 8}, {4, 8, 4}, {4, 8, 2}, {2, 4, 1}};
    for (int i = 0; i < 4; i++)
        for (int backward = 0; backward < 2; backward++) {
            attn_case c = {.U = cases[i].U, .R = 1, .causal = 1, .B = 2, .N = 32, .H = cases[i].H,
                           .Hkv = cases[i].Hkv, .D = 32, .fwd_tol = 1, .bwd_tol = 1, .backward = backward};
            reference(&c);
            sim_config config = sim_config_default(c.U);
            sim_world *w;
            ck_assert_int_eq(sim_world_create(&config, &w), USP_OK);
            usp_status s = sim_world_run(w, run_rank, &c);
            ck_assert_msg(s == USP_OK, "%s", usp_error_message());
            int64_t T = c.N / c.U, kv_sent = c.Hkv % c.U == 0 ? c.Hkv : c.U;
            double per_pass = (double)(c.U - 1) / c.U * 4.0 * (double)(c.B * T * c.D) * (2.0 * c.H + 2.0 * kv_sent);
            for (int r = 0; r < c.U; r++) {
                uint64_t bytes = 0;
                const usp_trace_t *t = sim_world_trace(w);
                for (size_t e = 0; e < usp_trace_count(t); e++)
                    if (usp_trace_at(t, e)->rank == r && usp_trace_at(t, e)->kind == USP_OP_ALL_TO_ALL)
                        bytes += usp_trace_at(t, e)->bytes_sent;
                ck_assert_msg((double)bytes == per_pass * (1 + backward), "U=%d H=%lld Hkv=%lld backward=%d rank %d: "
                              "%llu bytes, closed form %.0f", c.U, (long long)c.H, (long long)c.Hkv, backward, r,
                              (unsigned long long)bytes, per_pass * (1 + backward));
            }
            sim_world_destroy(w);
            free_case(&c);
        }
}
END_TEST

/* A length that does not divide: the message names N, the degrees, the nearest lengths and --pad. */
START_TEST(lengths_that_do_not_divide_are_configuration_errors)
{
    usp_seq_layout l;
    ck_assert_int_eq(usp_seq_layout_make(USP_LAYOUT_CONTIGUOUS, 100, 8, 1, &l), USP_ERR_CONFIG);
    const char *m = usp_error_message();
    ck_assert_msg(strstr(m, "--seq 100") && strstr(m, "--ulysses 8") && strstr(m, "96 and 104") && strstr(m, "--pad"),
                  "%s", m);
    ck_assert_int_eq(usp_seq_layout_make(USP_LAYOUT_ZIGZAG, 36, 2, 4, &l), USP_ERR_CONFIG);
    m = usp_error_message();
    ck_assert_msg(strstr(m, "multiple of 8") && strstr(m, "32 and 40") && strstr(m, "zigzag"), "%s", m);
    ck_assert_int_eq(usp_seq_layout_make(USP_LAYOUT_ZIGZAG, 48, 3, 2, &l), USP_OK);
}
END_TEST

/* Every global token has exactly one owner, and the maps are inverse. */
START_TEST(layouts_are_bijections)
{
    const int shapes[][3] = {{1, 1, 0}, {4, 1, 0}, {2, 2, 1}, {1, 4, 1}, {3, 2, 1}, {2, 3, 0}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        usp_layout_kind kind = shapes[i][2] ? USP_LAYOUT_ZIGZAG : USP_LAYOUT_CONTIGUOUS;
        int64_t n = 4 * usp_seq_layout_multiple(kind, shapes[i][0], shapes[i][1]);
        usp_seq_layout l;
        ck_assert_int_eq(usp_seq_layout_make(kind, n, shapes[i][0], shapes[i][1], &l), USP_OK);
        char *seen = calloc((size_t)n, 1);
        for (int p = 0; p < shapes[i][0] * shapes[i][1]; p++)
            for (int64_t t = 0; t < l.per_rank; t++) {
                int64_t g = usp_seq_layout_global(&l, p, t);
                ck_assert(g >= 0 && g < n && !seen[g]);
                seen[g] = 1;
                int owner;
                int64_t local;
                usp_seq_layout_locate(&l, g, &owner, &local);
                ck_assert_int_eq(owner, p);
                ck_assert_int_eq(local, t);
            }
        free(seen);
    }
    /* zigzag, R = 2, U = 1, N = 8: rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2 */
    usp_seq_layout l;
    ck_assert_int_eq(usp_seq_layout_make(USP_LAYOUT_ZIGZAG, 8, 1, 2, &l), USP_OK);
    const int64_t want[2][4] = {{0, 1, 6, 7}, {2, 3, 4, 5}};
    for (int p = 0; p < 2; p++)
        for (int t = 0; t < 4; t++)
            ck_assert_int_eq(usp_seq_layout_global(&l, p, t), want[p][t]);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ulysses");
    TCase *t = tcase_create("attention");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, ulysses_forward_is_bitwise_single_rank);
    tcase_add_test(t, uneven_heads_give_the_single_rank_result);
    tcase_add_test(t, hybrid_matches_single_rank);
    tcase_add_test(t, ulysses_traffic_matches_the_closed_form);
    tcase_add_test(t, lengths_that_do_not_divide_are_configuration_errors);
    tcase_add_test(t, layouts_are_bijections);
    suite_add_tcase(s, t);
    return check_main_run(s);
}
