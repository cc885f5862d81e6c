/* Test problems for the tensor-core attention (see mma_attention_cases.h). */
#include "tests/mma_attention_cases.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_attention.h"
#include "backends/cuda/cuda_attention_tiles.h"
#include "core/ops/dtype.h"
#include "core/ops/mask.h"

#define U_BF16 (1.0 / 256.0)
#define C_FP32 (1.0 / 4096.0)

static uint64_t seed_state;
static float next_bf16_value(void) /* splitmix64 -> uniform [-1, 1) -> nearest bf16 */
{
    uint64_t z = (seed_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull, z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    const float x = (float)((double)((z ^ (z >> 31)) >> 40) / (double)(1u << 23) - 1.0);
    return usp_bf16_to_f32(usp_f32_to_bf16(x));
}

float *mma_case_array(size_t n, int random_bf16)
{
    float *x = malloc((n ? n : 1) * sizeof(float));
    ck_assert_ptr_nonnull(x);
    for (size_t i = 0; i < n; i++) x[i] = random_bf16 ? next_bf16_value() : NAN; /* NaN: never written */
    return x;
}

usp_attention_shape mma_case_shape(int64_t batch, int64_t n_q, int64_t n_kv, int64_t heads, int64_t kv_heads,
                                   int64_t D, int causal, int64_t q_offset, int64_t kv_offset)
{
    usp_attention_shape s = {.batch = batch, .n_q = n_q, .n_kv = n_kv, .n_heads = heads, .n_kv_heads = kv_heads,
                             .head_dim = D, .q_offset = q_offset, .kv_offset = kv_offset, .causal = causal,
                             .scale = (float)(1.0 / sqrt((double)D))};
    return s;
}

static void cpu_run(mma_case *c)
{
    const usp_attention_shape *s = &c->s;
    const cpu_attention_shape cs = {.batch = s->batch, .n_q = s->n_q, .n_kv = s->n_kv, .n_heads = s->n_heads,
                                    .n_kv_heads = s->n_kv_heads, .head_dim = s->head_dim, .q_offset = s->q_offset,
                                    .kv_offset = s->kv_offset, .causal = s->causal, .scale = s->scale,
                                    .window = s->window, .seq_len = s->seq_len, .docs = s->docs};
    void *ws = malloc(cpu_attention_workspace_bytes(&cs));
    cpu_flash_attention_forward(&cs, c->q, c->k, c->v, c->o, c->lse, ws);
    cpu_flash_attention_backward(&cs, c->q, c->k, c->v, c->o, c->lse, c->d_o, c->dq, c->dk, c->dv, 0, ws);
    free(ws);
}

/* The magnitudes of the header's tolerances for row i of head h, batch b (P, dS in double). */
static void magnitudes_row(mma_case *c, int64_t b, int64_t h, int64_t i, double *p)
{
    const usp_attention_shape *s = &c->s;
    const int64_t D = s->head_dim, g = attn_kv_head(s, h), qi = attn_q_index(s, b, i, h, 0);
    const usp_mask_row m = {s->causal, s->window, s->docs ? s->docs + 2 * b * s->seq_len : NULL};
    double mx = -INFINITY, sum = 0.0, beta = 0.0, delta = 0.0, reach = 0.0;
    for (int64_t j = 0; j < s->n_kv; j++) {
        double dot = 0.0, abs_dot = 0.0;
        for (int64_t d = 0; d < D; d++) {
            dot += (double)c->q[qi + d] * c->k[attn_kv_index(s, b, j, g, d)];
            abs_dot += fabs((double)c->q[qi + d] * c->k[attn_kv_index(s, b, j, g, d)]);
        }
        const int visible = usp_mask_sees(&m, s->q_offset + i, s->kv_offset + j); /* the definition */
        p[j] = visible ? s->scale * dot : -INFINITY;
        if (visible) mx = fmax(mx, p[j]), reach = fmax(reach, s->scale * abs_dot);
    }
    for (int64_t j = 0; j < s->n_kv; j++) sum += p[j] == -INFINITY ? 0.0 : exp(p[j] - mx);
    for (int64_t j = 0; j < s->n_kv; j++) p[j] = p[j] == -INFINITY ? 0.0 : exp(p[j] - mx) / sum;
    for (int64_t d = 0; d < D; d++) {
        beta += fabs((double)c->d_o[qi + d] * c->o_bf16[qi + d]);
        delta += (double)c->d_o[qi + d] * c->o_bf16[qi + d];
    }
    c->mlse[attn_row_index(s, b, h, i)] = 1.0 + reach;
    for (int64_t j = 0; j < s->n_kv; j++) {
        if (p[j] == 0.0) continue;
        const int64_t kj = attn_kv_index(s, b, j, g, 0);
        double dp = 0.0, gamma = 0.0;
        for (int64_t d = 0; d < D; d++) {
            dp += (double)c->d_o[qi + d] * c->v[kj + d];
            gamma += fabs((double)c->d_o[qi + d] * c->v[kj + d]);
        }
        const double e = fabs(p[j] * (dp - delta)) + p[j] * (beta + gamma);
        for (int64_t d = 0; d < D; d++) {
            c->mo[qi + d] += p[j] * fabs(c->v[kj + d]);
            c->mdv[kj + d] += p[j] * fabs(c->d_o[qi + d]);
            c->mdk[kj + d] += s->scale * e * fabs(c->q[qi + d]);
            c->mdq[qi + d] += s->scale * e * fabs(c->k[kj + d]);
        }
    }
}

void mma_case_run(mma_case *c, usp_attention_shape s, uint64_t seed, mma_case_runner run)
{
    memset(c, 0, sizeof *c);
    c->s = s;
    if (s.docs) { /* the case's own copy of the documents' table */
        c->docs = malloc((size_t)(2 * s.batch * s.seq_len) * sizeof *c->docs);
        ck_assert_ptr_nonnull(c->docs);
        memcpy(c->docs, s.docs, (size_t)(2 * s.batch * s.seq_len) * sizeof *c->docs);
        c->s.docs = c->docs;
    }
    c->nq = (size_t)(s.batch * s.n_q * s.n_heads * s.head_dim);
    c->nkv = (size_t)(s.batch * s.n_kv * s.n_kv_heads * s.head_dim);
    c->nl = (size_t)(s.batch * s.n_heads * s.n_q);
    seed_state = seed;
    float **inputs[] = {&c->q, &c->k, &c->v, &c->d_o}, **outputs[] = {&c->o, &c->lse, &c->dq, &c->dk, &c->dv,
                                                                        &c->eo, &c->e_lse, &c->edq, &c->edk, &c->edv};
    const size_t n_in[] = {c->nq, c->nkv, c->nkv, c->nq}, n_out[] = {c->nq, c->nl, c->nq, c->nkv, c->nkv};
    for (int i = 0; i < 4; i++) *inputs[i] = mma_case_array(n_in[i], 1);
    for (int i = 0; i < 10; i++) *outputs[i] = mma_case_array(n_out[i % 5], 0); /* cpu, then under test */
    c->o_bf16 = mma_case_array(c->nq, 0);
    cpu_run(c);
    for (size_t e = 0; e < c->nq; e++) c->o_bf16[e] = usp_bf16_to_f32(usp_f32_to_bf16(c->o[e]));
    run(c);
    c->mo = calloc(c->nq + 1, sizeof(double)), c->mdq = calloc(c->nq + 1, sizeof(double));
    c->mdk = calloc(c->nkv + 1, sizeof(double)), c->mdv = calloc(c->nkv + 1, sizeof(double));
    c->mlse = calloc(c->nl + 1, sizeof(double));
    double *p = malloc((size_t)(s.n_kv + 1) * sizeof(double));
    for (int64_t b = 0; b < s.batch; b++)
        for (int64_t h = 0; h < s.n_heads; h++)
            for (int64_t i = 0; i < s.n_q; i++) magnitudes_row(c, b, h, i, p);
    free(p);
}

void mma_case_free(mma_case *c)
{
    float *f[] = {c->q, c->k, c->v, c->d_o, c->o_bf16, c->o, c->lse, c->dq, c->dk, c->dv,
                  c->eo, c->e_lse, c->edq, c->edk, c->edv};
    double *m[] = {c->mo, c->mlse, c->mdq, c->mdk, c->mdv};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) free(f[i]);
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) free(m[i]);
    free(c->docs);
}

/* max over elements of |got - want| / tol, tol = factor m + u_out |want| + 1e-6; infinities must be
 * equal; NaN (an element never written) is an infinite ratio. */
static double worst_ratio(const float *got, const float *want, const double *m, size_t n, double factor, double u_out)
{
    double worst = 0.0;
    for (size_t e = 0; e < n; e++) {
        if (isinf(got[e]) || isinf(want[e])) {
            if (got[e] != want[e]) return INFINITY;
            continue;
        }
        const double r = fabs((double)got[e] - want[e]) / (factor * m[e] + u_out * fabs((double)want[e]) + 1e-6);
        if (!(r <= worst)) worst = r;
    }
    return isnan(worst) ? INFINITY : worst;
}

double mma_case_check(const mma_case *c, const char *name)
{
    const double f = U_BF16 + 3 * C_FP32;
    const double r[5] = {worst_ratio(c->eo, c->o, c->mo, c->nq, f, U_BF16),
                         worst_ratio(c->e_lse, c->lse, c->mlse, c->nl, C_FP32, C_FP32),
                         worst_ratio(c->edq, c->dq, c->mdq, c->nq, f, U_BF16),
                         worst_ratio(c->edk, c->dk, c->mdk, c->nkv, f, U_BF16),
                         worst_ratio(c->edv, c->dv, c->mdv, c->nkv, f, U_BF16)};
    const char *what[5] = {"o", "lse", "dq", "dk", "dv"};
    const usp_attention_shape *s = &c->s;
    printf("%-34s error/tolerance: o %.3f lse %.3f dq %.3f dk %.3f dv %.3f\n", name, r[0], r[1], r[2], r[3], r[4]);
    for (int i = 0; i < 5; i++)
        ck_assert_msg(r[i] <= 1.0,
                      "%s (B=%lld Nq=%lld Nkv=%lld H=%lld Hkv=%lld D=%lld causal=%d q_off=%lld kv_off=%lld "
                      "window=%lld documents=%d): %s off the cpu attention by %.3f x its bf16 tolerance",
                      name, (long long)s->batch, (long long)s->n_q, (long long)s->n_kv, (long long)s->n_heads,
                      (long long)s->n_kv_heads, (long long)s->head_dim, s->causal, (long long)s->q_offset,
                      (long long)s->kv_offset, (long long)s->window, s->docs != NULL, what[i], r[i]);
    return r[0];
}


/* Document lengths, cycled to fill a row: 1- and 3-token documents, and ones across the 64-row tiles. */
static const int64_t packing[] = {1, 3, 37, 150, 1, 90, 2, 64, 5, 200};

int32_t *mma_case_documents(int64_t batch, int64_t seq_len)
{
    int32_t *t = malloc((size_t)(2 * batch * seq_len) * sizeof *t);
    ck_assert_ptr_nonnull(t);
    const int n = (int)(sizeof packing / sizeof *packing);
    for (int64_t b = 0; b < batch; b++) { /* row b starts at document b of the packing: rows differ */
        int64_t lengths[256], count = 0;
        for (int64_t at = 0, d = b; at < seq_len; at += lengths[count++], d++)
            lengths[count] = packing[d % n] < seq_len - at ? packing[d % n] : seq_len - at;
        usp_mask_table_fill(lengths, count, t + 2 * b * seq_len);
    }
    return t;
}

/* The shapes every implementation runs: lengths off the 64-tile grid, GQA, both head_dims, ring
 * blocks placed by offsets before, across and after the diagonal, rows and calls without keys; and
 * masks beyond causal: sliding windows of 1, 3, 17, a tile and past the sequence, causal or not,
 * documents (mma_case_documents) alone or under a window, different in each batch row, at offsets. */
static const struct {
    const char *name;
    int64_t batch, n_q, n_kv, heads, kv_heads, D;
    int causal;
    int64_t q_offset, kv_offset, window;
    int docs;
} mma_cases[] = {
    {"full D=64 ragged", 1, 100, 130, 2, 2, 64, 0, 0, 0, 0, 0},
    {"causal D=128 GQA 2 N=150", 1, 150, 150, 4, 2, 128, 1, 0, 0, 0, 0},
    {"causal D=64 GQA 3 N=128 two batches", 2, 128, 128, 3, 1, 64, 1, 0, 0, 0, 0},
    {"full D=128 GQA 2 Nq=70 Nkv=45", 1, 70, 45, 2, 1, 128, 0, 0, 0, 0, 0},
    {"causal D=64 ring block after keys", 1, 50, 90, 2, 1, 64, 1, 100, 40, 0, 0},
    {"causal D=128 ring block across", 1, 80, 100, 2, 2, 128, 1, 30, 60, 0, 0},
    {"causal D=64 first rows see no key", 1, 40, 40, 2, 1, 64, 1, 0, 25, 0, 0},
    {"no keys", 1, 10, 0, 2, 1, 64, 0, 0, 0, 0, 0},
    {"causal D=64 window 1", 1, 150, 150, 2, 1, 64, 1, 0, 0, 1, 0},
    {"causal D=128 window 3 GQA 2", 1, 130, 130, 4, 2, 128, 1, 0, 0, 3, 0},
    {"causal D=64 window 17 documents", 2, 200, 200, 2, 1, 64, 1, 0, 0, 17, 1},
    {"causal D=64 window 64", 1, 200, 200, 2, 2, 64, 1, 0, 0, 64, 0},
    {"causal D=128 window past the row", 1, 100, 100, 2, 1, 128, 1, 0, 0, 1000, 0},
    {"full D=64 window 40", 1, 150, 150, 2, 1, 64, 0, 0, 0, 40, 0},
    {"full D=128 documents two batches", 2, 160, 160, 2, 1, 128, 0, 0, 0, 0, 1},
    {"causal D=64 documents GQA 3", 2, 200, 200, 3, 1, 64, 1, 0, 0, 0, 1},
    {"causal D=128 ring block window docs", 1, 70, 110, 4, 2, 128, 1, 150, 100, 60, 1},
};

double mma_case_run_all(mma_case_runner run, uint64_t seed)
{
    double worst_o = 0.0;
    mma_case c;
    for (size_t i = 0; i < sizeof mma_cases / sizeof mma_cases[0]; i++) {
        usp_attention_shape s =
            mma_case_shape(mma_cases[i].batch, mma_cases[i].n_q, mma_cases[i].n_kv, mma_cases[i].heads,
                           mma_cases[i].kv_heads, mma_cases[i].D, mma_cases[i].causal, mma_cases[i].q_offset,
                           mma_cases[i].kv_offset);
        s.window = mma_cases[i].window;
        s.seq_len = s.q_offset + s.n_q > s.kv_offset + s.n_kv ? s.q_offset + s.n_q : s.kv_offset + s.n_kv;
        int32_t *docs = mma_cases[i].docs ? mma_case_documents(s.batch, s.seq_len) : NULL;
        s.docs = docs;
        mma_case_run(&c, s, seed + i, run);
        worst_o = fmax(worst_o, mma_case_check(&c, mma_cases[i].name));
        mma_case_free(&c);
        free(docs);
    }
    return worst_o;
}
