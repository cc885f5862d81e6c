/* Tests of the CUDA flash attention that need no GPU (backends/cuda/).
 *
 * First the tile arithmetic of cuda_attention_tiles.h against brute-force
 * definitions, over many random shapes, offsets and masks (core/ops/mask.h's
 * usp_mask_sees, pair by pair: causal or not, sliding windows of 1, 3, 17, a
 * tile and past the sequence, documents of 1 token and ones across tiles,
 * different in each batch row): which (query, key) pairs a tile pair holds
 * visible, the keys each query sees and the queries each key meets, the key
 * tiles a query tile walks and the query tiles a key tile meets, GQA heads,
 * element offsets, the block -> tile order of the grids, shared-memory
 * budgets, shape checks, the scalar softmax steps.
 *
 * Then an emulation (tests/cuda_attention_emulation.c): plain C that runs, block by block and step by step, the
 * loops of the kernels in cuda_attention.cu (same tiles, same skipped tiles,
 * same online-softmax update order, the same helpers, the warps' lane-strided
 * partial sums and butterflies), with one thread doing what the block's threads
 * share out. Compared with the cpu backend's flash attention (which shares none
 * of this code but the mask's index maps: other tiles, base-2 exponentials,
 * sgemm) on causal and full masks, windows and documents, GQA, ragged lengths,
 * ring blocks placed by offsets, blocks and rows that see no key; then ring
 * attention's identities, forward blocks merged with
 * the kernels' merge step and backward accumulated over blocks. Outputs start
 * as NaN, so an element no block writes fails. What this cannot check: the
 * thread mapping and synchronisation of the kernels, and bf16 storage; those
 * need a device (the conformance table). */
#include "backends/cuda/cuda_attention_tiles.h"
#include "backends/cpu/cpu_attention.h"
#include "core/ops/mask.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/check_main.h"
#include "tests/attention_random.h"
#include "tests/cuda_attention_emulation.h"

/* ------------------------------------------------------------------------- */
/* Tile arithmetic against brute force                                        */

/* The definition (core/ops/mask.h, term by term), at global positions of batch row b. */
static int brute_sees(const usp_attention_shape *s, int64_t b, int64_t i, int64_t j)
{
    const usp_mask_row m = {s->causal, s->window, s->docs ? s->docs + 2 * b * s->seq_len : NULL};
    return usp_mask_sees(&m, s->q_offset + i, s->kv_offset + j);
}

/* Records the first mismatch of a trial: Check's assertions cost a system call
 * each (fork mode), too many for every pair of 300 shapes. */
static char mismatch[200];
#define EXPECT_EQ(got, want, ...)                                                         \
    do {                                                                                   \
        if ((int64_t)(got) != (int64_t)(want) && !mismatch[0])                             \
            snprintf(mismatch, sizeof mismatch, __VA_ARGS__);                              \
    } while (0)

/* The keys [first, end) a query sees, or the queries a key meets, against the definition: exactly the
 * visible ones (lo, hi: the range of the other side). */
#define EXPECT_INTERVAL(first, end, lo, hi, visible, ...)                                               \
    for (int64_t x_ = (lo); x_ < (hi); x_++)                                                           \
    EXPECT_EQ(x_ >= (first) && x_ < (end), visible, __VA_ARGS__)

START_TEST(visibility_helpers_match_every_pair)
{
    rng_state = 11;
    for (int trial = 0; trial < 600; trial++) {
        usp_attention_shape s = random_shape(trial % 300 < 150 ? 40 : 200);
        if (trial >= 300) /* the same kinds of shapes under windows and documents */
            random_mask(&s);
        const attn_tiles t = attn_tiles_for(s.head_dim);
        mismatch[0] = 0;
        for (int64_t b = 0; b < s.batch; b++) {
            for (int64_t i = 0; i < s.n_q; i++) {
                int64_t first, end;
                attn_keys(&s, b, i, &first, &end);
                for (int64_t j = 0; j < s.n_kv; j++)
                    EXPECT_EQ(attn_sees(&s, b, i, j), brute_sees(&s, b, i, j), "attn_sees(%lld, %lld, %lld)",
                              (long long)b, (long long)i, (long long)j);
                EXPECT_INTERVAL(first, end, 0, s.n_kv, brute_sees(&s, b, i, x_), "attn_keys(%lld, %lld) at key %lld",
                                (long long)b, (long long)i, (long long)x_);
                int64_t span_first, span_end;
                attn_row_span(&s, b, i, 0, &span_first, &span_end);
                EXPECT_EQ(span_first == first && span_end == end, 1, "attn_row_span of query %lld", (long long)i);
            }
            for (int64_t x = 0; x < 3; x++) { /* the kernels' padding rows: empty, and no table row read */
                int64_t qf, qe, kf, ke;
                attn_row_span(&s, b, s.n_q + x, 0, &qf, &qe);
                attn_row_span(&s, b, s.n_kv + x, 1, &kf, &ke);
                EXPECT_EQ(qf == 0 && qe == 0 && kf == 0 && ke == 0, 1, "spans of row %lld past the call", (long long)x);
            }
            for (int64_t j = 0; j < s.n_kv; j++) {
                int64_t first, end;
                attn_queries(&s, b, j, &first, &end);
                EXPECT_INTERVAL(first, end, 0, s.n_q, brute_sees(&s, b, x_, j),
                                "attn_queries(%lld, %lld) at query %lld", (long long)b, (long long)j, (long long)x_);
            }
            const int64_t n_qt = attn_n_tiles(s.n_q, t.bq), n_kt = attn_n_tiles(s.n_kv, t.bk);
            for (int64_t qt = 0; qt < n_qt; qt++) {
                const int64_t q0 = qt * t.bq, bq = attn_tile_len(s.n_q, t.bq, qt);
                const attn_tile_range kr = attn_kv_tiles(&s, b, q0, bq, t.bk);
                for (int64_t kt = 0; kt < n_kt; kt++) {
                    const int64_t k0 = kt * t.bk, bk = attn_tile_len(s.n_kv, t.bk, kt);
                    const attn_tile_range qr = attn_q_tiles(&s, b, k0, bk, t.bq);
                    int64_t seen = 0;
                    for (int64_t i = q0; i < q0 + bq; i++)
                        for (int64_t j = k0; j < k0 + bk; j++) seen += brute_sees(&s, b, i, j);
                    const attn_visibility want = seen == 0 ? ATTN_TILE_MASKED
                                                 : seen == bq * bk ? ATTN_TILE_VISIBLE : ATTN_TILE_PARTIAL;
                    EXPECT_EQ(attn_tile_visibility(&s, b, q0, bq, k0, bk), want,
                              "visibility of q tile %lld, k tile %lld in row %lld", (long long)qt, (long long)kt,
                              (long long)b);
                    /* The loops' bounds: the forward / dQ loop over kr and the dK/dV loop over qr hold
                     * exactly the tile pairs that are not fully masked. */
                    EXPECT_EQ(kt >= kr.begin && kt < kr.end, seen > 0, "k tile %lld in the loop of q tile %lld",
                              (long long)kt, (long long)qt);
                    EXPECT_EQ(qt >= qr.begin && qt < qr.end, seen > 0, "q tile %lld in the loop of k tile %lld",
                              (long long)qt, (long long)kt);
                }
            }
        }
        ck_assert_msg(!mismatch[0],
                      "trial %d (B=%lld Nq=%lld Nkv=%lld D=%lld causal=%d q_off=%lld kv_off=%lld window=%lld "
                      "documents=%d): %s",
                      trial, (long long)s.batch, (long long)s.n_q, (long long)s.n_kv, (long long)s.head_dim, s.causal,
                      (long long)s.q_offset, (long long)s.kv_offset, (long long)s.window, s.docs != NULL, mismatch);
    }
}
END_TEST

START_TEST(tiles_cover_every_length_once)
{
    for (int64_t size = 1; size <= 70; size += 23)
        for (int64_t n = 0; n <= 200; n++) {
            int64_t covered = 0;
            for (int64_t t = 0; t < attn_n_tiles(n, size); t++) {
                const int64_t len = attn_tile_len(n, size, t);
                ck_assert(len >= 1 && len <= size);
                ck_assert_int_eq(t * size, covered);
                covered += len;
            }
            ck_assert_int_eq(covered, n);
        }
    ck_assert_int_eq(attn_tiles_for(64).bq, 64);
    ck_assert_int_eq(attn_tiles_for(128).bk, 32);
}
END_TEST

START_TEST(heads_and_offsets_follow_the_layouts)
{
    const usp_attention_shape s = make_shape(2, 5, 7, 6, 2, 3, 1, 0, 0);
    int64_t n = 0; /* q [B, Nq, H, D] and lse [B, H, Nq] enumerated in storage order */
    for (int64_t b = 0; b < 2; b++)
        for (int64_t i = 0; i < 5; i++)
            for (int64_t h = 0; h < 6; h++)
                for (int64_t d = 0; d < 3; d++) ck_assert_int_eq(attn_q_index(&s, b, i, h, d), n++);
    n = 0;
    for (int64_t b = 0; b < 2; b++)
        for (int64_t j = 0; j < 7; j++)
            for (int64_t g = 0; g < 2; g++)
                for (int64_t d = 0; d < 3; d++) ck_assert_int_eq(attn_kv_index(&s, b, j, g, d), n++);
    n = 0;
    for (int64_t b = 0; b < 2; b++)
        for (int64_t h = 0; h < 6; h++)
            for (int64_t i = 0; i < 5; i++) ck_assert_int_eq(attn_row_index(&s, b, h, i), n++);
    for (int64_t h = 0; h < 6; h++) ck_assert_int_eq(attn_kv_head(&s, h), h / 3); /* groups of 3 consecutive heads */
    ck_assert_int_eq(attn_workspace_bytes(&s), 2 * 6 * 5 * sizeof(float));
}
END_TEST

START_TEST(block_order_is_a_bijection_heavy_tiles_first)
{
    for (int64_t n_tiles = 1; n_tiles <= 9; n_tiles += 4)
        for (int64_t n_rows = 1; n_rows <= 12; n_rows += 5)
            for (int last_first = 0; last_first <= 1; last_first++) {
                char *hit = calloc((size_t)(n_tiles * n_rows), 1);
                for (int64_t x = 0; x < n_tiles * n_rows; x++) {
                    const attn_task t = attn_block_task(x, n_tiles, n_rows, last_first);
                    ck_assert(t.tile >= 0 && t.tile < n_tiles && t.row >= 0 && t.row < n_rows);
                    ck_assert(!hit[t.tile * n_rows + t.row]);
                    hit[t.tile * n_rows + t.row] = 1;
                }
                ck_assert_int_eq(attn_block_task(0, n_tiles, n_rows, last_first).tile, last_first ? n_tiles - 1 : 0);
                free(hit);
            }
    const usp_attention_shape s = make_shape(3, 100, 70, 4, 2, 64, 1, 0, 0); /* tiles 64 x 64 */
    ck_assert_int_eq(attn_q_grid(&s), 2 * 3 * 4);
    ck_assert_int_eq(attn_kv_grid(&s), 2 * 3 * 2);
}
END_TEST

START_TEST(shared_memory_fits_every_head_dim)
{
    for (int64_t D = 1; D <= ATTN_MAX_HEAD_DIM; D++) {
        const attn_tiles t = attn_tiles_for(D);
        const attn_forward_smem f = attn_forward_smem_layout(D);
        const attn_backward_smem kv = attn_backward_smem_layout(D, 1), qq = attn_backward_smem_layout(D, 0);
        /* Each region holds what the kernels index in it, in order, without overlap. */
        ck_assert_int_eq(f.k - f.q, t.bq * D);
        ck_assert_int_eq(f.v - f.k, t.bk * attn_kv_ld(D));
        ck_assert_int_eq(f.s - f.v, t.bk * D);
        ck_assert_int_eq(f.o - f.s, t.bq * t.bk);
        ck_assert_int_eq(f.floats - f.o, t.bq * D + 3 * t.bq);
        ck_assert_int_eq(kv.k - kv.q, 2 * t.bq * D);
        ck_assert_int_eq(kv.acc_a - kv.k, 2 * t.bk * attn_kv_ld(D) + 2 * t.bq * t.bk);
        ck_assert_int_eq(kv.lse - kv.acc_a, 2 * t.bk * D);
        ck_assert_int_eq(qq.acc_a - qq.ds, t.bq * t.bk);
        ck_assert_int_eq(qq.lse - qq.acc_a, t.bq * D);
        ck_assert_int_eq(kv.floats - kv.lse, 2 * t.bq);
        ck_assert(attn_kv_ld(D) % 2 == 1 && attn_kv_ld(D) >= D);
        const int64_t most = f.floats > kv.floats ? f.floats : kv.floats;
        /* with the static spans of a tile's rows (block_spans in cuda_attention.cu) */
        const int64_t bytes = most * (int64_t)sizeof(float) + 2 * ATTN_MAX_TILE * (int64_t)sizeof(int64_t);
        ck_assert_msg(bytes <= ATTN_SMEM_LIMIT_BYTES, "head_dim %lld needs %lld bytes", (long long)D, (long long)bytes);
    }
}
END_TEST

START_TEST(shape_check_names_what_is_wrong)
{
    usp_attention_shape s = make_shape(1, 10, 10, 4, 2, 64, 1, 0, 0);
    ck_assert_ptr_null(attn_shape_problem(&s));
    s.head_dim = 257;
    ck_assert_ptr_nonnull(strstr(attn_shape_problem(&s), "head_dim must be 1..256"));
    s.head_dim = 0;
    ck_assert_ptr_nonnull(strstr(attn_shape_problem(&s), "head_dim"));
    s = make_shape(1, 10, 10, 4, 3, 64, 1, 0, 0);
    ck_assert_ptr_nonnull(strstr(attn_shape_problem(&s), "divide n_heads"));
    s = make_shape(1, 0, 0, 4, 4, 7, 0, 0, 0);
    ck_assert_ptr_null(attn_shape_problem(&s));
}
END_TEST

START_TEST(softmax_steps_keep_empty_rows_finite)
{
    ck_assert(attn_softmax_rescale(-INFINITY, -INFINITY) == 1.0f); /* nothing seen yet: no NaN */
    ck_assert(attn_softmax_rescale(-INFINITY, 2.0f) == 0.0f);      /* first visible tile */
    ck_assert(fabsf(attn_softmax_rescale(1.0f, 3.0f) - expf(-2.0f)) <= 1e-7f);
    ck_assert(attn_softmax_prob(-INFINITY, -INFINITY) == 0.0f);
    ck_assert(attn_softmax_prob(-INFINITY, 1.0f) == 0.0f);
    ck_assert(isinf(attn_softmax_lse(-INFINITY, 0.0f)) && attn_softmax_lse(-INFINITY, 0.0f) < 0);
    ck_assert(attn_softmax_inv_sum(0.0f) == 0.0f);
    ck_assert(attn_backward_prob(5.0f, -INFINITY) == 0.0f);
    /* Merge against log(e^a + e^b) in double, and the cases with -inf. */
    const float pairs[][2] = {{0.5f, 1.5f}, {-3.0f, 40.0f}, {80.0f, 79.0f}, {-INFINITY, 2.0f}, {1.0f, -INFINITY},
                              {-INFINITY, -INFINITY}};
    for (size_t c = 0; c < sizeof pairs / sizeof pairs[0]; c++) {
        const float a = pairs[c][0], b = pairs[c][1];
        const attn_merge_weights w = attn_merge_weigh(a, b);
        ck_assert_int_eq(w.skip, b == -INFINITY);
        if (w.skip) continue;
        const double m = fmax(a, b), want = m + log(exp((double)a - m) + exp((double)b - m));
        ck_assert_msg(fabs(w.lse - want) <= 1e-6 * fmax(1.0, fabs(want)), "merge(%g, %g) = %g, want %g", a, b, w.lse,
                      want);
        ck_assert(fabs(w.wa / w.sum - exp((double)a - want)) <= 1e-6);
        ck_assert(fabs(w.wb / w.sum - exp((double)b - want)) <= 1e-6);
    }
}
END_TEST

/* ------------------------------------------------------------------------- */
/* Emulation against the cpu backend                                          */

/* Tolerances, relative to max(1, |cpu value|): the two differ in tile sizes,
 * summation order and exp (base-2 polynomial on the cpu, expf here), each within
 * a few fp32 ulps per step; measured worst cases over these tests: 3e-7 for o
 * and lse, 1.6e-6 for the gradients (dv of a ring block). */
#define TOL_FORWARD 1e-5
#define TOL_BACKWARD 2e-5

/* max_i |a_i - b_i| / max(1, |b_i|); infinities must match, NaN (never written) is an infinite error. */
static double max_rel_err(const float *a, const float *b, size_t n)
{
    double e = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(a[i]) || isinf(b[i])) {
            if (a[i] != b[i]) return INFINITY;
            continue;
        }
        const double d = fabs((double)a[i] - (double)b[i]) / fmax(1.0, fabs((double)b[i]));
        if (!(d <= e)) e = d;
    }
    return isnan(e) ? INFINITY : e;
}

/* One problem: random inputs, the cpu backend's results, the emulation's. */
typedef struct problem {
    usp_attention_shape s;
    size_t nq, nkv, nl; /* elements of q-like, kv-like and lse arrays */
    float *q, *k, *v, *d_o;
    float *o, *lse, *dq, *dk, *dv;      /* cpu backend */
    float *eo, *e_lse, *edq, *edk, *edv; /* emulation (NaN until written) */
} problem;

static cpu_attention_shape cpu_shape(const usp_attention_shape *s)
{
    cpu_attention_shape c = {.batch = s->batch, .n_q = s->n_q, .n_kv = s->n_kv, .n_heads = s->n_heads,
                             .n_kv_heads = s->n_kv_heads, .head_dim = s->head_dim, .q_offset = s->q_offset,
                             .kv_offset = s->kv_offset, .causal = s->causal, .scale = s->scale,
                             .window = s->window, .seq_len = s->seq_len, .docs = s->docs};
    return c;
}

static void cpu_forward(const usp_attention_shape *s, const float *q, const float *k, const float *v, float *o,
                        float *lse)
{
    const cpu_attention_shape c = cpu_shape(s);
    void *ws = malloc(cpu_attention_workspace_bytes(&c));
    cpu_flash_attention_forward(&c, q, k, v, o, lse, ws);
    free(ws);
}

static void cpu_backward(const usp_attention_shape *s, const float *q, const float *k, const float *v,
                         const float *o, const float *lse, const float *d_o, float *dq, float *dk, float *dv)
{
    const cpu_attention_shape c = cpu_shape(s);
    void *ws = malloc(cpu_attention_workspace_bytes(&c));
    cpu_flash_attention_backward(&c, q, k, v, o, lse, d_o, dq, dk, dv, 0, ws);
    free(ws);
}

/* Runs both; the emulated backward starts from the cpu's o and lse, so that each
 * pass is compared on the same inputs. */
static void problem_run(problem *p, usp_attention_shape s, uint64_t seed)
{
    p->s = s;
    p->nq = (size_t)(s.batch * s.n_q * s.n_heads * s.head_dim);
    p->nkv = (size_t)(s.batch * s.n_kv * s.n_kv_heads * s.head_dim);
    p->nl = (size_t)(s.batch * s.n_heads * s.n_q);
    rng_state = seed;
    p->q = floats(p->nq, NAN), p->k = floats(p->nkv, NAN), p->v = floats(p->nkv, NAN), p->d_o = floats(p->nq, NAN);
    p->o = floats(p->nq, 0), p->lse = floats(p->nl, 0), p->dq = floats(p->nq, 0);
    p->dk = floats(p->nkv, 0), p->dv = floats(p->nkv, 0);
    p->eo = floats(p->nq, NAN), p->e_lse = floats(p->nl, NAN), p->edq = floats(p->nq, NAN);
    p->edk = floats(p->nkv, NAN), p->edv = floats(p->nkv, NAN);
    cpu_forward(&s, p->q, p->k, p->v, p->o, p->lse);
    cpu_backward(&s, p->q, p->k, p->v, p->o, p->lse, p->d_o, p->dq, p->dk, p->dv);
    emu_forward(&s, p->q, p->k, p->v, p->eo, p->e_lse);
    emu_backward(&s, p->q, p->k, p->v, p->o, p->lse, p->d_o, p->edq, p->edk, p->edv, 0);
}

static void problem_free(problem *p)
{
    float *f[] = {p->q, p->k, p->v, p->d_o, p->o, p->lse, p->dq, p->dk, p->dv, p->eo, p->e_lse, p->edq, p->edk, p->edv};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) free(f[i]);
}

static void problem_check(const problem *p, const char *name)
{
    const usp_attention_shape *s = &p->s;
    const double e[5] = {max_rel_err(p->eo, p->o, p->nq), max_rel_err(p->e_lse, p->lse, p->nl),
                         max_rel_err(p->edq, p->dq, p->nq), max_rel_err(p->edk, p->dk, p->nkv),
                         max_rel_err(p->edv, p->dv, p->nkv)};
    const char *what[5] = {"o", "lse", "dq", "dk", "dv"};
    for (int c = 0; c < 5; c++) {
        const double tol = c < 2 ? TOL_FORWARD : TOL_BACKWARD;
        ck_assert_msg(e[c] <= tol,
                      "%s (B=%lld Nq=%lld Nkv=%lld H=%lld Hkv=%lld D=%lld causal=%d q_off=%lld kv_off=%lld "
                      "window=%lld documents=%d): %s differs from the cpu backend by %g > %g",
                      name, (long long)s->batch, (long long)s->n_q, (long long)s->n_kv, (long long)s->n_heads,
                      (long long)s->n_kv_heads, (long long)s->head_dim, s->causal, (long long)s->q_offset,
                      (long long)s->kv_offset, (long long)s->window, s->docs != NULL, what[c], e[c], tol);
    }
}

/* Lengths off the tile grid (64 for D <= 64, 32 above), each fast path and the generic kernel; then
 * masks beyond causal: windows of 1, 3, 17, a tile and past the sequence, causal or not; documents
 * (random_documents: 1-token ones and ones across tiles, different in each row); ring blocks at
 * offsets; queries and keys of two documents, which see nothing (o = 0, lse = -inf on both sides). */
START_TEST(emulated_kernels_match_cpu_backend)
{
    static const struct {
        const char *name;
        int64_t batch, n_q, n_kv, heads, kv_heads, D;
        int causal;
        int64_t q_offset, kv_offset, window;
        int docs; /* 0: none; 1: random_documents; 2: one document up to kv_offset, one after */
    } cases[] = {
        {"full D=64", 1, 100, 130, 2, 2, 64, 0, 0, 0, 0, 0},
        {"causal D=128 GQA", 1, 70, 70, 4, 2, 128, 1, 0, 0, 0, 0},
        {"causal D=64 two batches", 2, 129, 129, 3, 1, 64, 1, 0, 0, 0, 0},
        {"generic D=48, ring block after the keys", 1, 40, 64, 2, 1, 48, 1, 96, 32, 0, 0},
        {"generic D=80, first rows see no key", 1, 50, 40, 2, 2, 80, 1, 0, 20, 0, 0},
        {"fully masked block", 1, 30, 30, 2, 1, 64, 1, 0, 100, 0, 0},
        {"D=256 causal GQA", 1, 33, 40, 2, 1, 256, 1, 7, 0, 0, 0},
        {"D=16 GQA 3", 2, 20, 45, 6, 2, 16, 1, 30, 0, 0, 0},
        {"no keys", 1, 10, 0, 2, 1, 64, 0, 0, 0, 0, 0},
        {"no queries", 1, 0, 10, 2, 1, 64, 1, 0, 0, 0, 0},
        {"causal window 1", 1, 150, 150, 2, 1, 64, 1, 0, 0, 1, 0},
        {"causal window 3, D=128 GQA", 1, 100, 100, 4, 2, 128, 1, 0, 0, 3, 0},
        {"causal window 17, documents, two rows", 2, 130, 130, 2, 1, 48, 1, 0, 0, 17, 1},
        {"causal window of a tile", 1, 200, 200, 2, 2, 64, 1, 0, 0, 64, 0},
        {"causal window past the sequence", 1, 90, 90, 2, 1, 32, 1, 0, 0, 1000, 0},
        {"full window 17", 1, 120, 120, 2, 1, 64, 0, 0, 0, 17, 0},
        {"full documents, two rows, D=80", 2, 140, 140, 2, 1, 80, 0, 0, 0, 0, 1},
        {"causal documents, GQA 3, D=16", 2, 150, 150, 6, 2, 16, 1, 0, 0, 0, 1},
        {"ring block, window 60 and documents", 1, 70, 110, 4, 2, 64, 1, 150, 100, 60, 1},
        {"full ring block after, documents", 2, 50, 60, 2, 1, 32, 0, 0, 50, 0, 1},
        {"different documents see nothing", 1, 50, 60, 2, 1, 64, 0, 0, 50, 0, 2},
    };
    problem p;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        usp_attention_shape s = make_shape(cases[c].batch, cases[c].n_q, cases[c].n_kv, cases[c].heads,
                                           cases[c].kv_heads, cases[c].D, cases[c].causal, cases[c].q_offset,
                                           cases[c].kv_offset);
        s.window = cases[c].window;
        s.seq_len = s.q_offset + s.n_q > s.kv_offset + s.n_kv ? s.q_offset + s.n_q : s.kv_offset + s.n_kv;
        rng_state = 300 + c;
        if (cases[c].docs == 1)
            random_documents(doc_table, s.batch, s.seq_len);
        if (cases[c].docs == 2) {
            const int64_t lengths[] = {s.kv_offset, s.seq_len - s.kv_offset};
            usp_mask_table_fill(lengths, 2, doc_table);
        }
        s.docs = cases[c].docs ? doc_table : NULL;
        problem_run(&p, s, 100 + c);
        problem_check(&p, cases[c].name);
        for (size_t i = 0; i < p.nl && cases[c].docs == 2; i++) ck_assert(isinf(p.e_lse[i]) && p.e_lse[i] < 0);
        problem_free(&p);
    }
}
END_TEST

/* 40 random shapes, then 40 more under random masks (random_mask). */
START_TEST(emulated_kernels_match_cpu_backend_on_random_shapes)
{
    problem p;
    rng_state = 7;
    for (int trial = 0; trial < 80; trial++) {
        usp_attention_shape s = random_shape(90);
        if (trial >= 40)
            random_mask(&s);
        const uint64_t seed = rng_next();
        char name[32];
        snprintf(name, sizeof name, "random shape %d", trial);
        problem_run(&p, s, seed);
        problem_check(&p, name);
        problem_free(&p);
        rng_state = seed; /* the next shape does not depend on how much data this one drew */
    }
}
END_TEST

/* A full key sequence cut in blocks, as ring attention hands them to a query
 * block: forward blocks merged with the merge kernel's step equal one call, and
 * backward blocks with the global o and lse (dq accumulated) equal one call. */
START_TEST(ring_blocks_merge_and_accumulate_to_one_call)
{
    const int64_t H = 4, Hkv = 2, D = 64, N = 150, cuts[] = {0, 50, 100, 150};
    const int64_t q_offsets[] = {0, 60, 100}, n_qs[] = {50, 90, 50}; /* q block sees: 1, 2 and 3 blocks */
    for (int c = 0; c < 3; c++) {
        const usp_attention_shape whole = make_shape(1, n_qs[c], N, H, Hkv, D, 1, q_offsets[c], 0);
        problem p;
        problem_run(&p, whole, 900 + (uint64_t)c); /* the cpu's one call, with its o and lse */
        float *o = floats(p.nq, 0), *lse = floats(p.nl, -INFINITY), *dq = floats(p.nq, 0);
        float *o_part = floats(p.nq, NAN), *lse_part = floats(p.nl, NAN);
        memset(p.edk, 0, p.nkv * sizeof(float)); /* each block's gradients are added to zeros */
        memset(p.edv, 0, p.nkv * sizeof(float));
        for (int blk = 0; blk < 3; blk++) {
            usp_attention_shape s = whole;
            s.kv_offset = cuts[blk];
            s.n_kv = cuts[blk + 1] - cuts[blk];
            const size_t kv0 = (size_t)(cuts[blk] * Hkv * D);
            emu_forward(&s, p.q, p.k + kv0, p.v + kv0, o_part, lse_part);
            emu_merge(o, lse, o_part, lse_part, s.n_q, H, D);
            emu_backward(&s, p.q, p.k + kv0, p.v + kv0, p.o, p.lse, p.d_o, dq, p.edk + kv0, p.edv + kv0, 1);
        }
        const double e[5] = {max_rel_err(o, p.o, p.nq), max_rel_err(lse, p.lse, p.nl), max_rel_err(dq, p.dq, p.nq),
                             max_rel_err(p.edk, p.dk, p.nkv), max_rel_err(p.edv, p.dv, p.nkv)};
        ck_assert_msg(e[0] <= TOL_FORWARD && e[1] <= TOL_FORWARD, "case %d: merged o, lse differ by %g, %g", c, e[0],
                      e[1]);
        ck_assert_msg(e[2] <= TOL_BACKWARD && e[3] <= TOL_BACKWARD && e[4] <= TOL_BACKWARD,
                      "case %d: block-wise dq, dk, dv differ by %g, %g, %g", c, e[2], e[3], e[4]);
        free(o), free(lse), free(dq), free(o_part), free(lse_part);
        problem_free(&p);
    }
}
END_TEST

/* accumulate = 1 adds the very values accumulate = 0 writes: old + new, bit for bit. */
START_TEST(accumulate_adds_what_overwrite_writes)
{
    problem p;
    problem_run(&p, make_shape(1, 45, 70, 4, 2, 32, 1, 30, 0), 77);
    float *g[3] = {floats(p.nq, NAN), floats(p.nkv, NAN), floats(p.nkv, NAN)};
    const float *fresh[3] = {p.edq, p.edk, p.edv};
    const size_t n[3] = {p.nq, p.nkv, p.nkv};
    float *old[3];
    for (int t = 0; t < 3; t++) {
        old[t] = floats(n[t], 0);
        memcpy(old[t], g[t], n[t] * sizeof(float));
    }
    emu_backward(&p.s, p.q, p.k, p.v, p.o, p.lse, p.d_o, g[0], g[1], g[2], 1);
    for (int t = 0; t < 3; t++) {
        size_t differ = 0;
        for (size_t i = 0; i < n[t]; i++) differ += g[t][i] != old[t][i] + fresh[t][i];
        ck_assert_msg(differ == 0, "gradient %d: %zu of %zu elements are not old + new", t, differ, n[t]);
        free(g[t]), free(old[t]);
    }
    problem_free(&p);
}
END_TEST

/* A row that sees no key: o = 0, lse = -inf, and no gradient flows through it. */
START_TEST(rows_that_see_no_key_give_zero_and_minus_inf)
{
    problem p;
    problem_run(&p, make_shape(1, 40, 40, 2, 1, 64, 1, 0, 25), 5); /* rows 0..24 see nothing */
    for (int64_t h = 0; h < 2; h++)
        for (int64_t i = 0; i < 40; i++) {
            const float l = p.e_lse[attn_row_index(&p.s, 0, h, i)];
            ck_assert(i < 25 ? (isinf(l) && l < 0) : isfinite(l));
            for (int64_t d = 0; d < 64 && i < 25; d++) {
                ck_assert(p.eo[attn_q_index(&p.s, 0, i, h, d)] == 0.0f);
                ck_assert(p.edq[attn_q_index(&p.s, 0, i, h, d)] == 0.0f);
            }
        }
    problem_free(&p);
}
END_TEST

static Suite *cuda_tiles_suite(void)
{
    Suite *s = suite_create("cuda_tiles");
    TCase *tiles = tcase_create("tiles");
    tcase_add_test(tiles, visibility_helpers_match_every_pair);
    tcase_add_test(tiles, tiles_cover_every_length_once);
    tcase_add_test(tiles, heads_and_offsets_follow_the_layouts);
    tcase_add_test(tiles, block_order_is_a_bijection_heavy_tiles_first);
    tcase_add_test(tiles, shared_memory_fits_every_head_dim);
    tcase_add_test(tiles, shape_check_names_what_is_wrong);
    tcase_add_test(tiles, softmax_steps_keep_empty_rows_finite);
    suite_add_tcase(s, tiles);
    TCase *emu = tcase_create("emulation");
    tcase_set_timeout(emu, 300);
    tcase_add_test(emu, emulated_kernels_match_cpu_backend);
    tcase_add_test(emu, emulated_kernels_match_cpu_backend_on_random_shapes);
    tcase_add_test(emu, ring_blocks_merge_and_accumulate_to_one_call);
    tcase_add_test(emu, accumulate_adds_what_overwrite_writes);
    tcase_add_test(emu, rows_that_see_no_key_give_zero_and_minus_inf);
    suite_add_tcase(s, emu);
    return s;
}

int main(void)
{
    return check_main_run(cuda_tiles_suite());
}
