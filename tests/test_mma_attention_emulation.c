/* The tensor-core attention, emulated on the CPU (tests/mma_attention_emulation.c: fragments,
 * ldmatrix, mma.sync and swizzled tiles through backends/cuda/cuda_mma_maps.h), against the cpu
 * attention (backends/cpu, fp32, sharing none of this code): forward and backward, causal and full,
 * GQA, head_dim 64 and 128, lengths off the 64-tile grid, ring blocks placed by offsets, rows that
 * see no key (lse -inf on both sides, o and dq within 1e-6 of the cpu's zeros); and the grid run
 * backwards gives the same bits (no CTA depends on another's order).
 *
 * Inputs are bf16 values (random, rounded to nearest even), given to both sides; the cpu's o is
 * rounded to bf16 for the emulated backward (the kernel reads a bf16 O). So every difference comes
 * from the places the kernel rounds to bf16, u = 2^-8 each (bf16 keeps 8 significant bits: a
 * rounding to nearest is off by at most half an ulp, 2^-8 relative), plus fp32 arithmetic in both
 * implementations, c = 2^-12 (n 2^-24 for sums of n <= 4096 terms, and a few ulps of exp). Per
 * element, with P, dS and the magnitudes below from a double-precision pass:
 *   o:  P rounded before P V, while l sums the fp32 P: |sum_j P_ij e_ij v_j| <= u sum_j P_ij |v_j|;
 *       the stored o rounded: u |o|.              tol = (u + 3c) sum_j P_ij |v_jd| + u |o| + 1e-6
 *   dv: P^T rounded before P^T dO.                 tol = (u + 3c) sum_i P_ij |dO_id| + u |dv| + 1e-6
 *   dS: rounded before its mma (u |dS|); delta from the bf16 O (u beta_i, beta_i = sum_d |dO_id o_id|);
 *       dP and delta in fp32 (c (beta_i + gamma_ij), gamma_ij = sum_d |dO_id v_jd|):
 *       |err dS_ij| <= (u + c) E_ij, E_ij = |dS_ij| + P_ij (beta_i + gamma_ij);
 *   dk: tol = scale (u + 3c) sum_i E_ij |q_id| + u |dk| + 1e-6;  dq: the same with sum_j E_ij |k_jd|.
 *   lse: fp32 only: tol = c (1 + |lse| + scale max_j sum_d |q_id k_jd|).
 * Random errors mostly cancel: the test prints the largest error / tolerance of each output, and
 * requires the o error to be above fp32 noise (the rounding happened). */
#include "tests/mma_attention_emulation.h"
#include "backends/cpu/cpu_attention.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/dtype.h"
#include "tests/check_main.h"

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

static float *array(size_t n, int random_bf16)
{
    float *x = malloc((n ? n : 1) * sizeof(float));
    ck_assert_ptr_nonnull(x);
    for (size_t i = 0; i < n; i++) x[i] = random_bf16 ? next_bf16_value() : NAN; /* NaN: never written */
    return x;
}

/* One problem: inputs, the cpu's outputs, the emulation's, and the double pass's magnitudes. */
typedef struct case_data {
    usp_attention_shape s;
    size_t nq, nkv, nl;
    float *q, *k, *v, *d_o, *o_bf16;
    float *o, *lse, *dq, *dk, *dv;      /* cpu */
    float *eo, *e_lse, *edq, *edk, *edv; /* emulation */
    double *mo, *mlse, *mdq, *mdk, *mdv; /* magnitudes of the tolerances */
} case_data;

static usp_attention_shape shape(int64_t batch, int64_t n_q, int64_t n_kv, int64_t heads, int64_t kv_heads, int64_t D,
                                 int causal, int64_t q_offset, int64_t kv_offset)
{
    usp_attention_shape s = {.batch = batch, .n_q = n_q, .n_kv = n_kv, .n_heads = heads, .n_kv_heads = kv_heads,
                             .head_dim = D, .q_offset = q_offset, .kv_offset = kv_offset, .causal = causal,
                             .scale = (float)(1.0 / sqrt((double)D))};
    return s;
}

static void cpu_run(case_data *c)
{
    const usp_attention_shape *s = &c->s;
    const cpu_attention_shape cs = {.batch = s->batch, .n_q = s->n_q, .n_kv = s->n_kv, .n_heads = s->n_heads,
                                    .n_kv_heads = s->n_kv_heads, .head_dim = s->head_dim, .q_offset = s->q_offset,
                                    .kv_offset = s->kv_offset, .causal = s->causal, .scale = s->scale};
    void *ws = malloc(cpu_attention_workspace_bytes(&cs));
    cpu_flash_attention_forward(&cs, c->q, c->k, c->v, c->o, c->lse, ws);
    cpu_flash_attention_backward(&cs, c->q, c->k, c->v, c->o, c->lse, c->d_o, c->dq, c->dk, c->dv, 0, ws);
    free(ws);
}

/* The magnitudes of the header's tolerances for row i of head h, batch b (P, dS in double). */
static void magnitudes_row(case_data *c, int64_t b, int64_t h, int64_t i, double *p)
{
    const usp_attention_shape *s = &c->s;
    const int64_t D = s->head_dim, g = attn_kv_head(s, h), qi = attn_q_index(s, b, i, h, 0);
    double mx = -INFINITY, sum = 0.0, beta = 0.0, delta = 0.0, reach = 0.0;
    for (int64_t j = 0; j < s->n_kv; j++) {
        double dot = 0.0, abs_dot = 0.0;
        for (int64_t d = 0; d < D; d++) {
            dot += (double)c->q[qi + d] * c->k[attn_kv_index(s, b, j, g, d)];
            abs_dot += fabs((double)c->q[qi + d] * c->k[attn_kv_index(s, b, j, g, d)]);
        }
        p[j] = attn_sees(s, i, j) ? s->scale * dot : -INFINITY;
        if (attn_sees(s, i, j)) mx = fmax(mx, p[j]), reach = fmax(reach, s->scale * abs_dot);
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

static void case_run(case_data *c, usp_attention_shape s, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->s = s;
    c->nq = (size_t)(s.batch * s.n_q * s.n_heads * s.head_dim);
    c->nkv = (size_t)(s.batch * s.n_kv * s.n_kv_heads * s.head_dim);
    c->nl = (size_t)(s.batch * s.n_heads * s.n_q);
    seed_state = seed;
    c->q = array(c->nq, 1), c->k = array(c->nkv, 1), c->v = array(c->nkv, 1), c->d_o = array(c->nq, 1);
    c->o = array(c->nq, 0), c->lse = array(c->nl, 0), c->dq = array(c->nq, 0), c->dk = array(c->nkv, 0);
    c->dv = array(c->nkv, 0), c->o_bf16 = array(c->nq, 0);
    c->eo = array(c->nq, 0), c->e_lse = array(c->nl, 0), c->edq = array(c->nq, 0), c->edk = array(c->nkv, 0);
    c->edv = array(c->nkv, 0);
    cpu_run(c);
    for (size_t e = 0; e < c->nq; e++) c->o_bf16[e] = usp_bf16_to_f32(usp_f32_to_bf16(c->o[e]));
    mma_emu_forward(&s, c->q, c->k, c->v, c->eo, c->e_lse, 0);
    mma_emu_backward(&s, c->q, c->k, c->v, c->o_bf16, c->lse, c->d_o, c->edq, c->edk, c->edv, 0);
    c->mo = calloc(c->nq + 1, sizeof(double)), c->mdq = calloc(c->nq + 1, sizeof(double));
    c->mdk = calloc(c->nkv + 1, sizeof(double)), c->mdv = calloc(c->nkv + 1, sizeof(double));
    c->mlse = calloc(c->nl + 1, sizeof(double));
    double *p = malloc((size_t)(s.n_kv + 1) * sizeof(double));
    for (int64_t b = 0; b < s.batch; b++)
        for (int64_t h = 0; h < s.n_heads; h++)
            for (int64_t i = 0; i < s.n_q; i++) magnitudes_row(c, b, h, i, p);
    free(p);
}

static void case_free(case_data *c)
{
    float *f[] = {c->q, c->k, c->v, c->d_o, c->o_bf16, c->o, c->lse, c->dq, c->dk, c->dv,
                  c->eo, c->e_lse, c->edq, c->edk, c->edv};
    double *m[] = {c->mo, c->mlse, c->mdq, c->mdk, c->mdv};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) free(f[i]);
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) free(m[i]);
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

static double case_check(const case_data *c, const char *name)
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
                      "%s (B=%lld Nq=%lld Nkv=%lld H=%lld Hkv=%lld D=%lld causal=%d q_off=%lld kv_off=%lld): "
                      "%s off the cpu attention by %.3f x its bf16 tolerance",
                      name, (long long)s->batch, (long long)s->n_q, (long long)s->n_kv, (long long)s->n_heads,
                      (long long)s->n_kv_heads, (long long)s->head_dim, s->causal, (long long)s->q_offset,
                      (long long)s->kv_offset, what[i], r[i]);
    return r[0];
}

typedef struct named_shape {
    const char *name;
    usp_attention_shape s;
} named_shape;

START_TEST(emulated_mma_kernels_match_cpu_attention)
{
    const named_shape cases[] = {
        {"full D=64 ragged", shape(1, 100, 130, 2, 2, 64, 0, 0, 0)},
        {"causal D=128 GQA 2 N=150", shape(1, 150, 150, 4, 2, 128, 1, 0, 0)},
        {"causal D=64 GQA 3 N=128 two batches", shape(2, 128, 128, 3, 1, 64, 1, 0, 0)},
        {"full D=128 GQA 2 Nq=70 Nkv=45", shape(1, 70, 45, 2, 1, 128, 0, 0, 0)},
        {"causal D=64 ring block after keys", shape(1, 50, 90, 2, 1, 64, 1, 100, 40)},
        {"causal D=128 ring block across", shape(1, 80, 100, 2, 2, 128, 1, 30, 60)},
        {"causal D=64 first rows see no key", shape(1, 40, 40, 2, 1, 64, 1, 0, 25)},
        {"no keys", shape(1, 10, 0, 2, 1, 64, 0, 0, 0)},
    };
    double worst_o = 0.0;
    case_data c;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        case_run(&c, cases[i].s, 1000 + i);
        worst_o = fmax(worst_o, case_check(&c, cases[i].name));
        case_free(&c);
    }
    /* fp32 alone would leave o within ~1e-6 of the cpu, 1e-3 of its tolerance at most. */
    ck_assert_msg(worst_o > 0.02, "o within %.4f of its bf16 tolerance: is P rounded to bf16?", worst_o);
}
END_TEST

/* Each output element is written by one CTA in a fixed order (dQ in its own pass, no atomics), so
 * running the grids backwards gives the same bits. */
START_TEST(grid_order_does_not_change_a_bit)
{
    case_data c;
    case_run(&c, shape(1, 130, 130, 4, 2, 64, 1, 0, 0), 31);
    float *o = array(c.nq, 0), *lse = array(c.nl, 0), *dq = array(c.nq, 0), *dk = array(c.nkv, 0);
    float *dv = array(c.nkv, 0);
    mma_emu_forward(&c.s, c.q, c.k, c.v, o, lse, 1);
    mma_emu_backward(&c.s, c.q, c.k, c.v, c.o_bf16, c.lse, c.d_o, dq, dk, dv, 1);
    ck_assert(memcmp(o, c.eo, c.nq * sizeof(float)) == 0 && memcmp(lse, c.e_lse, c.nl * sizeof(float)) == 0);
    ck_assert(memcmp(dq, c.edq, c.nq * sizeof(float)) == 0);
    ck_assert(memcmp(dk, c.edk, c.nkv * sizeof(float)) == 0 && memcmp(dv, c.edv, c.nkv * sizeof(float)) == 0);
    free(o), free(lse), free(dq), free(dk), free(dv);
    case_free(&c);
}
END_TEST

static Suite *mma_emulation_suite(void)
{
    Suite *s = suite_create("mma_attention_emulation");
    TCase *t = tcase_create("emulation");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, emulated_mma_kernels_match_cpu_attention);
    tcase_add_test(t, grid_order_does_not_change_a_bit);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main_run(mma_emulation_suite());
}
