/* Tests of the CPU flash attention (backends/cpu/cpu_attention.c).
 *
 * The reference is the textbook attention in double: the whole softmax matrix P
 * materialised, and its analytic backward (dV = P^T dO, dP = dO V^T,
 * dS = P * (dP - rowsum(P * dP)), dQ = scale dS K, dK = scale dS^T Q). Against
 * it: causal and full masks, GQA, lengths that are not a multiple of the tile,
 * head_dim 16..256 (and 20, 24: a vector tail on some instruction sets; the
 * ctest entries test_flash_attention_avx2 / _sse2 rerun all of this on the
 * narrower kernels through USP_CPU_ISA), blocks placed by offsets (some rows, or a whole block, see
 * no key). Then the properties ring attention relies on: forward over key
 * blocks merged by lse equals the one-call forward, backward accumulated over
 * blocks with the global o and lse equals the one-call backward. Last, the bits
 * do not depend on the run or the thread count. Sizes stay small so the suite
 * runs in seconds, also under ASan.
 *
 * Masks beyond causal (core/ops/mask.h): the reference asks usp_mask_sees, the definition pair by
 * pair, while the kernels walk the intervals of the index maps and skip tiles; sliding windows of
 * 1, 17, a tile less one, a tile, three tiles and 5, and past the sequence; documents of 1, 3 and 37
 * tokens and longer ones that straddle tiles, different in each batch row; with and without causal,
 * and on blocks placed by offsets. */
#include "backends/cpu/cpu_attention.h"
#include "core/ops/mask.h"

#include <check.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "tests/check_main.h"

/* ------------------------------------------------------------------------- */
/* Data                                                                       */

/* Fixed-seed splitmix64: the same inputs on every machine. */
static uint64_t rng_state;
static float rng_uniform(void) /* in [-1, 1] */
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)((double)(z >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static float *rand_floats(size_t n)
{
    float *x = malloc(n * sizeof(float));
    ck_assert_ptr_nonnull(x);
    for (size_t i = 0; i < n; i++) x[i] = rng_uniform();
    return x;
}

static float *zero_floats(size_t n)
{
    float *x = calloc(n, sizeof(float));
    ck_assert_ptr_nonnull(x);
    return x;
}

static double *zero_doubles(size_t n)
{
    double *x = calloc(n, sizeof(double));
    ck_assert_ptr_nonnull(x);
    return x;
}

/* One attention problem: inputs, the kernel's outputs, the reference's. */
typedef struct problem {
    cpu_attention_shape s;
    size_t nq_el, nkv_el, nl_el;            /* elements of q-like, kv-like, lse arrays */
    float *q, *k, *v, *d_o;                 /* inputs */
    float *o, *lse, *dq, *dk, *dv;          /* kernel outputs */
    double *ro, *rlse, *rdq, *rdk, *rdv;    /* reference outputs */
    int32_t *docs;                          /* the documents' table, or NULL */
} problem;

static cpu_attention_shape make_shape(int64_t batch, int64_t n_q, int64_t n_kv, int64_t heads, int64_t kv_heads,
                                      int64_t head_dim, int causal, int64_t q_offset, int64_t kv_offset)
{
    cpu_attention_shape s = {.batch = batch, .n_q = n_q, .n_kv = n_kv, .n_heads = heads, .n_kv_heads = kv_heads,
                             .head_dim = head_dim, .q_offset = q_offset, .kv_offset = kv_offset,
                             .causal = causal, .scale = (float)(1.0 / sqrt((double)head_dim))};
    return s;
}

static void problem_init(problem *p, cpu_attention_shape s, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    p->s = s;
    p->nq_el = (size_t)(s.batch * s.n_q * s.n_heads * s.head_dim);
    p->nkv_el = (size_t)(s.batch * s.n_kv * s.n_kv_heads * s.head_dim);
    p->nl_el = (size_t)(s.batch * s.n_heads * s.n_q);
    rng_state = seed;
    p->q = rand_floats(p->nq_el);
    p->k = rand_floats(p->nkv_el);
    p->v = rand_floats(p->nkv_el);
    p->d_o = rand_floats(p->nq_el);
    p->o = zero_floats(p->nq_el);
    p->lse = zero_floats(p->nl_el);
    p->dq = zero_floats(p->nq_el);
    p->dk = zero_floats(p->nkv_el);
    p->dv = zero_floats(p->nkv_el);
}

static void problem_free(problem *p)
{
    float *f[] = {p->q, p->k, p->v, p->d_o, p->o, p->lse, p->dq, p->dk, p->dv};
    double *d[] = {p->ro, p->rlse, p->rdq, p->rdk, p->rdv};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) free(f[i]);
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) free(d[i]);
    free(p->docs);
}

/* Runs the kernels (forward, then backward overwriting the gradients). */
static void problem_run(problem *p)
{
    void *ws = malloc(cpu_attention_workspace_bytes(&p->s));
    ck_assert_ptr_nonnull(ws);
    cpu_flash_attention_forward(&p->s, p->q, p->k, p->v, p->o, p->lse, ws);
    cpu_flash_attention_backward(&p->s, p->q, p->k, p->v, p->o, p->lse, p->d_o, p->dq, p->dk, p->dv, 0, ws);
    free(ws);
}

/* ------------------------------------------------------------------------- */
/* Reference: materialised softmax in double                                  */

/* Fills p->ro, rlse, rdq, rdk, rdv. P and dP of one (batch, head) at a time. */
static void reference_run(problem *p)
{
    const cpu_attention_shape *s = &p->s;
    const int64_t Nq = s->n_q, Nk = s->n_kv, H = s->n_heads, Hk = s->n_kv_heads, D = s->head_dim;
    const double scale = s->scale;
    p->ro = zero_doubles(p->nq_el);
    p->rlse = zero_doubles(p->nl_el);
    p->rdq = zero_doubles(p->nq_el);
    p->rdk = zero_doubles(p->nkv_el);
    p->rdv = zero_doubles(p->nkv_el);
    double *P = zero_doubles((size_t)(Nq * Nk));  /* [Nq, Nkv] */
    double *dP = zero_doubles((size_t)(Nq * Nk)); /* [Nq, Nkv] */
    for (int64_t b = 0; b < s->batch; b++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t g = h / (H / Hk);
            const usp_mask_row m = {s->causal, s->window, s->docs ? s->docs + 2 * b * s->seq_len : NULL};
#define QI(i, d) (((b * Nq + (i)) * H + h) * D + (d))
#define KJ(j, d) (((b * Nk + (j)) * Hk + g) * D + (d))
            for (int64_t i = 0; i < Nq; i++) {
                double mx = -INFINITY;
                for (int64_t j = 0; j < Nk; j++) {
                    const int visible = usp_mask_sees(&m, s->q_offset + i, s->kv_offset + j);
                    double dot = 0.0;
                    for (int64_t d = 0; d < D; d++) dot += (double)p->q[QI(i, d)] * (double)p->k[KJ(j, d)];
                    P[i * Nk + j] = visible ? scale * dot : -INFINITY;
                    if (P[i * Nk + j] > mx) mx = P[i * Nk + j];
                }
                double sum = 0.0;
                for (int64_t j = 0; j < Nk; j++) {
                    P[i * Nk + j] = isinf(mx) ? 0.0 : exp(P[i * Nk + j] - mx);
                    sum += P[i * Nk + j];
                }
                for (int64_t j = 0; j < Nk; j++) P[i * Nk + j] = sum > 0 ? P[i * Nk + j] / sum : 0.0;
                p->rlse[(b * H + h) * Nq + i] = sum > 0 ? mx + log(sum) : -INFINITY;
                for (int64_t d = 0; d < D; d++) {
                    double acc = 0.0;
                    for (int64_t j = 0; j < Nk; j++) acc += P[i * Nk + j] * (double)p->v[KJ(j, d)];
                    p->ro[QI(i, d)] = acc;
                }
            }
            /* Backward: dV += P^T dO, dP = dO V^T, dS = P (dP - rowsum(P dP)). */
            for (int64_t i = 0; i < Nq; i++) {
                double delta = 0.0;
                for (int64_t j = 0; j < Nk; j++) {
                    double acc = 0.0;
                    for (int64_t d = 0; d < D; d++) acc += (double)p->d_o[QI(i, d)] * (double)p->v[KJ(j, d)];
                    dP[i * Nk + j] = acc;
                    delta += P[i * Nk + j] * acc;
                }
                for (int64_t j = 0; j < Nk; j++) {
                    double pij = P[i * Nk + j], ds = pij * (dP[i * Nk + j] - delta);
                    for (int64_t d = 0; d < D; d++) {
                        p->rdv[KJ(j, d)] += pij * (double)p->d_o[QI(i, d)];
                        p->rdq[QI(i, d)] += scale * ds * (double)p->k[KJ(j, d)];
                        p->rdk[KJ(j, d)] += scale * ds * (double)p->q[QI(i, d)];
                    }
                }
            }
#undef QI
#undef KJ
        }
    free(P);
    free(dP);
}

/* max_i |a_i - b_i|; infinities must match exactly, NaN counts as infinite error. */
static double max_err_fd(const float *a, const double *b, size_t n)
{
    double e = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(a[i]) || isinf(b[i])) {
            if (!(isinf(a[i]) && isinf(b[i]) && (a[i] > 0) == (b[i] > 0))) return INFINITY;
            continue;
        }
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= e)) e = d; /* NaN makes e NaN: caught below */
    }
    return isnan(e) ? INFINITY : e;
}

static double max_err_ff(const float *a, const float *b, size_t n)
{
    double e = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(a[i]) || isinf(b[i])) {
            if (a[i] != b[i]) return INFINITY;
            continue;
        }
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= e)) e = d;
    }
    return isnan(e) ? INFINITY : e;
}

/* ------------------------------------------------------------------------- */
/* Kernel against the reference                                               */

typedef struct ref_case {
    int64_t batch, n_q, n_kv, heads, kv_heads, head_dim;
    int causal;
    int64_t q_offset, kv_offset;
} ref_case;

/* Lengths are off the tile grid (the default tiles are 256 x 256: 260 and 300
 * make two tiles and 600 three, the last partial; the kernel also passes with 32 x 16 tiles).
 * The last three cases are blocks placed by offsets; in the last two the first
 * rows see no key (causal, the keys start after them). */
static const ref_case ref_cases[] = {
    {1, 77, 77, 8, 2, 32, 1, 0, 0},      {1, 77, 77, 8, 2, 32, 0, 0, 0},
    {2, 130, 130, 4, 4, 64, 1, 0, 0},    {1, 130, 130, 8, 2, 64, 0, 0, 0},
    {1, 300, 300, 2, 1, 128, 1, 0, 0},   {1, 300, 300, 4, 2, 128, 0, 0, 0},
    {1, 150, 150, 2, 2, 256, 1, 0, 0},   {1, 600, 600, 2, 1, 64, 1, 0, 0},
    {1, 77, 130, 8, 2, 64, 1, 200, 150},
    {1, 77, 130, 4, 2, 32, 1, 0, 30},    {2, 260, 140, 4, 1, 64, 1, 0, 100},
    {1, 200, 200, 4, 2, 16, 1, 0, 0},    {1, 140, 100, 2, 1, 16, 1, 30, 0},
    {1, 90, 90, 2, 1, 24, 1, 0, 0},      {1, 70, 70, 2, 2, 20, 0, 0, 0},
};

START_TEST(forward_and_backward_match_double_reference)
{
    const ref_case *c = &ref_cases[_i];
    problem p;
    problem_init(&p, make_shape(c->batch, c->n_q, c->n_kv, c->heads, c->kv_heads, c->head_dim, c->causal,
                                c->q_offset, c->kv_offset),
                 1000 + (uint64_t)_i);
    problem_run(&p);
    reference_run(&p);
    double eo = max_err_fd(p.o, p.ro, p.nq_el), el = max_err_fd(p.lse, p.rlse, p.nl_el);
    double eq = max_err_fd(p.dq, p.rdq, p.nq_el), ek = max_err_fd(p.dk, p.rdk, p.nkv_el);
    double ev = max_err_fd(p.dv, p.rdv, p.nkv_el);
    const char *fmt = "case %d (B=%lld Nq=%lld Nkv=%lld H=%lld Hkv=%lld D=%lld causal=%d): %s error %g > %g";
#define CASE_ARGS _i, (long long)c->batch, (long long)c->n_q, (long long)c->n_kv, (long long)c->heads, \
                  (long long)c->kv_heads, (long long)c->head_dim, c->causal
    ck_assert_msg(eo <= 1e-5, fmt, CASE_ARGS, "o", eo, 1e-5);
    ck_assert_msg(el <= 1e-5, fmt, CASE_ARGS, "lse", el, 1e-5);
    ck_assert_msg(eq <= 1e-4, fmt, CASE_ARGS, "dq", eq, 1e-4);
    ck_assert_msg(ek <= 1e-4, fmt, CASE_ARGS, "dk", ek, 1e-4);
    ck_assert_msg(ev <= 1e-4, fmt, CASE_ARGS, "dv", ev, 1e-4);
#undef CASE_ARGS
    problem_free(&p);
}
END_TEST

/* ------------------------------------------------------------------------- */
/* Masks: windows and documents                                               */

typedef struct masked_case {
    int64_t batch, n_q, n_kv, heads, kv_heads, head_dim;
    int causal;
    int64_t q_offset, kv_offset, window;
    int docs; /* 0: none; else the packing below, started at a different document in each row */
} masked_case;

/* Document lengths, cycled to fill a row: 1- and 3-token documents, and ones that straddle tiles. */
static const int64_t packing[] = {1, 3, 37, 150, 1, 90, 260, 3, 37, 1000};

/* Row b's table: the packing from its document b on, the last document cut at the row's end. */
static int32_t *documents_table(int64_t batch, int64_t seq_len)
{
    int32_t *t = malloc((size_t)(batch * seq_len * 2) * sizeof *t);
    ck_assert_ptr_nonnull(t);
    const int n = (int)(sizeof packing / sizeof *packing);
    for (int64_t b = 0; b < batch; b++) {
        int64_t lengths[64], count = 0, at = 0;
        for (int d = (int)b; at < seq_len; d++, count++) {
            lengths[count] = packing[d % n] < seq_len - at ? packing[d % n] : seq_len - at;
            at += lengths[count];
        }
        usp_mask_table_fill(lengths, count, t + 2 * b * seq_len);
    }
    return t;
}

/* Tiles are 128 x 128 by default: windows of 127, 128 and 389 meet them at and across their edges. */
static const masked_case masked_cases[] = {
    {1, 300, 300, 4, 2, 32, 1, 0, 0, 1, 0},     {1, 300, 300, 4, 2, 32, 1, 0, 0, 17, 0},
    {1, 300, 300, 2, 1, 64, 1, 0, 0, 127, 0},   {2, 300, 300, 2, 2, 32, 1, 0, 0, 128, 1},
    {1, 600, 600, 2, 1, 16, 1, 0, 0, 389, 0},   {1, 300, 300, 2, 2, 32, 1, 0, 0, 305, 1},
    {2, 300, 300, 4, 2, 64, 1, 0, 0, 0, 1},     {2, 200, 200, 2, 1, 32, 0, 0, 0, 0, 1},
    {1, 200, 200, 2, 2, 32, 0, 0, 0, 17, 0},    {1, 200, 200, 2, 1, 32, 0, 0, 0, 40, 1},
    {1, 77, 130, 8, 2, 64, 1, 200, 150, 60, 1}, {2, 130, 77, 4, 4, 32, 1, 150, 200, 0, 1},
};

START_TEST(masked_forward_and_backward_match_double_reference)
{
    const masked_case *c = &masked_cases[_i];
    problem p;
    cpu_attention_shape s = make_shape(c->batch, c->n_q, c->n_kv, c->heads, c->kv_heads, c->head_dim, c->causal,
                                       c->q_offset, c->kv_offset);
    s.window = c->window;
    s.seq_len = c->q_offset + c->n_q > c->kv_offset + c->n_kv ? c->q_offset + c->n_q : c->kv_offset + c->n_kv;
    problem_init(&p, s, 2000 + (uint64_t)_i);
    if (c->docs)
        p.s.docs = p.docs = documents_table(c->batch, s.seq_len);
    problem_run(&p);
    reference_run(&p);
    const double e[5] = {max_err_fd(p.o, p.ro, p.nq_el), max_err_fd(p.lse, p.rlse, p.nl_el),
                         max_err_fd(p.dq, p.rdq, p.nq_el), max_err_fd(p.dk, p.rdk, p.nkv_el),
                         max_err_fd(p.dv, p.rdv, p.nkv_el)};
    const char *names[5] = {"o", "lse", "dq", "dk", "dv"};
    for (int i = 0; i < 5; i++)
        ck_assert_msg(e[i] <= (i < 2 ? 1e-5 : 1e-4),
                      "masked case %d (causal %d, window %lld, documents %d, offsets %lld, %lld): %s error %g", _i,
                      c->causal, (long long)c->window, c->docs, (long long)c->q_offset, (long long)c->kv_offset,
                      names[i], e[i]);
    problem_free(&p);
}
END_TEST

/* Queries of one document against keys of the next, not causal: no query sees a key. */
START_TEST(queries_and_keys_of_different_documents_see_nothing)
{
    problem p;
    cpu_attention_shape s = make_shape(1, 50, 60, 2, 1, 32, 0, 0, 50);
    s.seq_len = 110;
    problem_init(&p, s, 7);
    const int64_t lengths[] = {50, 60};
    p.s.docs = p.docs = malloc(2 * 110 * sizeof *p.docs);
    usp_mask_table_fill(lengths, 2, p.docs);
    problem_run(&p);
    for (size_t i = 0; i < p.nl_el; i++)
        ck_assert(isinf(p.lse[i]) && p.lse[i] < 0);
    for (size_t i = 0; i < p.nq_el; i++)
        ck_assert(p.o[i] == 0.0f && p.dq[i] == 0.0f);
    for (size_t i = 0; i < p.nkv_el; i++)
        ck_assert(p.dk[i] == 0.0f && p.dv[i] == 0.0f);
    problem_free(&p);
}
END_TEST

/* ------------------------------------------------------------------------- */
/* Blocks: what ring attention does                                           */

/* Rows [r0, r0 + n) of a [B, N, H, D] array into / added back from a [B, n, H, D] one. */
static void rows_gather(float *dst, const float *src, int64_t B, int64_t N, int64_t r0, int64_t n, int64_t HD)
{
    for (int64_t b = 0; b < B; b++)
        memcpy(dst + (size_t)(b * n * HD), src + (size_t)((b * N + r0) * HD), (size_t)(n * HD) * sizeof(float));
}

static void rows_add(float *dst, const float *src, int64_t B, int64_t N, int64_t r0, int64_t n, int64_t HD)
{
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < n * HD; i++) dst[(b * N + r0) * HD + i] += src[b * n * HD + i];
}

/* Columns [c0, c0 + n) of a [B, H, N] lse into a [B, H, n] one. */
static void lse_gather(float *dst, const float *src, int64_t BH, int64_t N, int64_t c0, int64_t n)
{
    for (int64_t r = 0; r < BH; r++) memcpy(dst + r * n, src + r * N + c0, (size_t)n * sizeof(float));
}

/* One call over the whole sequence against the same attention cut into a grid of
 * query blocks x key blocks placed by q_offset / kv_offset: forward merged over
 * key blocks by lse (o = sum_b exp(lse_b - lse) o_b, lse = logsumexp_b lse_b),
 * backward accumulated over all blocks with the global o and lse. The causal
 * grid has a fully-masked block (second key block, first query block). */
START_TEST(blocks_merged_by_lse_equal_one_call)
{
    const int64_t B = 2, N = 600, H = 4, Hk = 2, D = 64, HD = H * D, HkD = Hk * D;
    const int64_t qcut[] = {0, 290, N}, kcut[] = {0, 300, N}; /* off the tile grid */
    problem p;
    problem_init(&p, make_shape(B, N, N, H, Hk, D, 1, 0, 0), 77);
    problem_run(&p);
    float *o_m = zero_floats(p.nq_el), *l_m = zero_floats(p.nl_el);
    float *dq = zero_floats(p.nq_el), *dk = zero_floats(p.nkv_el), *dv = zero_floats(p.nkv_el);
    for (int qb = 0; qb < 2; qb++) {
        const int64_t q0 = qcut[qb], nq = qcut[qb + 1] - q0;
        float *q = zero_floats((size_t)(B * nq * HD)), *go = zero_floats((size_t)(B * nq * HD));
        float *gdo = zero_floats((size_t)(B * nq * HD)), *glse = zero_floats((size_t)(B * H * nq));
        float *ob[2], *lb[2], *dqb = zero_floats((size_t)(B * nq * HD));
        rows_gather(q, p.q, B, N, q0, nq, HD);
        rows_gather(go, p.o, B, N, q0, nq, HD);
        rows_gather(gdo, p.d_o, B, N, q0, nq, HD);
        lse_gather(glse, p.lse, B * H, N, q0, nq);
        for (int kb = 0; kb < 2; kb++) {
            const int64_t k0 = kcut[kb], nk = kcut[kb + 1] - k0;
            cpu_attention_shape s = make_shape(B, nq, nk, H, Hk, D, 1, q0, k0);
            float *k = zero_floats((size_t)(B * nk * HkD)), *v = zero_floats((size_t)(B * nk * HkD));
            float *dkb = zero_floats((size_t)(B * nk * HkD)), *dvb = zero_floats((size_t)(B * nk * HkD));
            rows_gather(k, p.k, B, N, k0, nk, HkD);
            rows_gather(v, p.v, B, N, k0, nk, HkD);
            ob[kb] = zero_floats((size_t)(B * nq * HD));
            lb[kb] = zero_floats((size_t)(B * H * nq));
            void *ws = malloc(cpu_attention_workspace_bytes(&s));
            cpu_flash_attention_forward(&s, q, k, v, ob[kb], lb[kb], ws);
            cpu_flash_attention_backward(&s, q, k, v, go, glse, gdo, dqb, dkb, dvb, 1, ws);
            rows_add(dk, dkb, B, N, k0, nk, HkD);
            rows_add(dv, dvb, B, N, k0, nk, HkD);
            free(ws);
            free(k), free(v), free(dkb), free(dvb);
        }
        /* Merge the two key blocks by lse; a block no row sees has lse = -inf, weight 0. */
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < nq; i++) {
                    size_t li = (size_t)((b * H + h) * nq + i);
                    double l0 = lb[0][li], l1 = lb[1][li], mx = fmax(l0, l1);
                    double lse = isinf(mx) ? mx : mx + log(exp(l0 - mx) + exp(l1 - mx));
                    l_m[(b * H + h) * N + q0 + i] = (float)lse;
                    for (int64_t d = 0; d < D; d++) {
                        size_t oi = (size_t)(((b * nq + i) * H + h) * D + d);
                        double w0 = isinf(l0) ? 0 : exp(l0 - lse), w1 = isinf(l1) ? 0 : exp(l1 - lse);
                        o_m[((b * N + q0 + i) * H + h) * D + d] = (float)(w0 * ob[0][oi] + w1 * ob[1][oi]);
                    }
                }
        rows_add(dq, dqb, B, N, q0, nq, HD);
        free(q), free(go), free(gdo), free(glse), free(dqb);
        free(ob[0]), free(ob[1]), free(lb[0]), free(lb[1]);
    }
    double eo = max_err_ff(o_m, p.o, p.nq_el), el = max_err_ff(l_m, p.lse, p.nl_el);
    double eq = max_err_ff(dq, p.dq, p.nq_el), ek = max_err_ff(dk, p.dk, p.nkv_el);
    double ev = max_err_ff(dv, p.dv, p.nkv_el);
    ck_assert_msg(eo <= 1e-5, "merged o differs from one call by %g", eo);
    ck_assert_msg(el <= 1e-5, "merged lse differs from one call by %g", el);
    ck_assert_msg(eq <= 1e-5, "block-accumulated dq differs from one call by %g", eq);
    ck_assert_msg(ek <= 1e-5, "block-accumulated dk differs from one call by %g", ek);
    ck_assert_msg(ev <= 1e-5, "block-accumulated dv differs from one call by %g", ev);
    free(o_m), free(l_m), free(dq), free(dk), free(dv);
    problem_free(&p);
}
END_TEST

/* A key block wholly in the future of every query: o = 0 and lse = -inf exactly,
 * backward writes zeros (accumulate = 0) or leaves the gradients alone (= 1). */
START_TEST(fully_masked_block_gives_zero_and_minus_inf)
{
    problem p;
    problem_init(&p, make_shape(1, 50, 60, 4, 2, 64, 1, 0, 100), 5);
    for (size_t i = 0; i < p.nq_el; i++) p.o[i] = NAN; /* must be overwritten */
    problem_run(&p);
    for (size_t i = 0; i < p.nq_el; i++) ck_assert_msg(p.o[i] == 0.0f, "o[%zu] = %g, want 0", i, p.o[i]);
    for (size_t i = 0; i < p.nl_el; i++)
        ck_assert_msg(isinf(p.lse[i]) && p.lse[i] < 0, "lse[%zu] = %g, want -inf", i, p.lse[i]);
    for (size_t i = 0; i < p.nq_el; i++) ck_assert_msg(p.dq[i] == 0.0f, "dq[%zu] = %g", i, p.dq[i]);
    for (size_t i = 0; i < p.nkv_el; i++)
        ck_assert_msg(p.dk[i] == 0.0f && p.dv[i] == 0.0f, "dk/dv[%zu] = %g/%g", i, p.dk[i], p.dv[i]);
    for (size_t i = 0; i < p.nkv_el; i++) p.dk[i] = 1.5f;
    void *ws = malloc(cpu_attention_workspace_bytes(&p.s));
    cpu_flash_attention_backward(&p.s, p.q, p.k, p.v, p.o, p.lse, p.d_o, p.dq, p.dk, p.dv, 1, ws);
    free(ws);
    for (size_t i = 0; i < p.nkv_el; i++) ck_assert_msg(p.dk[i] == 1.5f, "accumulate changed dk[%zu]", i);
    problem_free(&p);
}
END_TEST

/* A softmax that spans 2^0 .. 2^-126 (key j's score 2j binary orders under key 0's, as a trained model's
 * attention gets peaky): the backward makes no subnormal gradient (x86 computes them through a microcode
 * assist, 100x slower), keys whose P is under 2^-64 get exactly zero gradients, and the rest still match the
 * double reference. */
START_TEST(a_peaky_softmax_makes_no_subnormal_gradient)
{
    problem p;
    problem_init(&p, make_shape(1, 64, 64, 1, 1, 16, 0, 0, 0), 11);
    const double c = 2.0 / (p.s.scale * 1.4426950408889634); /* scale x log2(e) x q.k_j = -2j */
    for (int64_t i = 0; i < 64; i++)
        for (int64_t d = 0; d < 16; d++)
            p.q[i * 16 + d] = d == 0 ? 1.0f : 0.0f;
    for (int64_t j = 0; j < 64; j++)
        for (int64_t d = 0; d < 16; d++)
            p.k[j * 16 + d] = d == 0 ? (float)(-c * (double)j) : 0.0f;
    for (size_t i = 0; i < p.nq_el; i++)
        p.d_o[i] *= 0.01f; /* small upstream gradients: products below 2^-126 without the floor */
    problem_run(&p);
    reference_run(&p);
    size_t subnormal = 0;
    for (size_t i = 0; i < p.nq_el; i++)
        subnormal += fpclassify(p.dq[i]) == FP_SUBNORMAL;
    for (size_t i = 0; i < p.nkv_el; i++)
        subnormal += (fpclassify(p.dk[i]) == FP_SUBNORMAL) + (fpclassify(p.dv[i]) == FP_SUBNORMAL);
    ck_assert_msg(subnormal == 0, "%zu subnormal gradients", subnormal);
    for (int64_t j = 33; j < 64; j++) /* P = 2^-2j / Z < 2^-64 */
        for (int64_t d = 0; d < 16; d++)
            ck_assert_msg(p.dk[j * 16 + d] == 0.0f && p.dv[j * 16 + d] == 0.0f, "key %lld: dk %g dv %g", (long long)j,
                          p.dk[j * 16 + d], p.dv[j * 16 + d]);
    for (size_t i = 0; i < p.nkv_el; i++)
        ck_assert_msg(fabs(p.dv[i] - p.rdv[i]) <= 1e-5 * (1 + fabs(p.rdv[i])), "dv[%zu] %g, reference %g", i,
                      p.dv[i], p.rdv[i]);
    for (size_t i = 0; i < p.nq_el; i++)
        ck_assert_msg(fabs(p.dq[i] - p.rdq[i]) <= 1e-5 * (1 + fabs(p.rdq[i])), "dq[%zu] %g, reference %g", i,
                      p.dq[i], p.rdq[i]);
    problem_free(&p);
}
END_TEST

/* ------------------------------------------------------------------------- */
/* Determinism                                                                */

/* All outputs of one forward + backward, concatenated, for bitwise comparison. */
static float *run_outputs(int threads, size_t *n)
{
    problem p;
    problem_init(&p, make_shape(2, 300, 300, 4, 2, 64, 1, 0, 0), 42);
    omp_set_num_threads(threads);
    problem_run(&p);
    *n = 2 * p.nq_el + 2 * p.nkv_el + p.nl_el;
    float *all = malloc(*n * sizeof(float)), *w = all;
    ck_assert_ptr_nonnull(all);
    const float *parts[] = {p.o, p.lse, p.dq, p.dk, p.dv};
    const size_t sizes[] = {p.nq_el, p.nl_el, p.nq_el, p.nkv_el, p.nkv_el};
    for (int i = 0; i < 5; i++) memcpy(w, parts[i], sizes[i] * sizeof(float)), w += sizes[i];
    problem_free(&p);
    return all;
}

START_TEST(outputs_are_bitwise_equal_across_runs_and_thread_counts)
{
    const int saved = omp_get_max_threads();
    size_t n1, n2, n3, n4;
    float *a = run_outputs(2, &n1), *b = run_outputs(2, &n2), *c = run_outputs(1, &n3);
    float *d = run_outputs(3, &n4); /* more threads than cores */
    omp_set_num_threads(saved);
    ck_assert(n1 == n2 && n1 == n3 && n1 == n4);
    ck_assert_msg(memcmp(a, b, n1 * sizeof(float)) == 0, "two runs with 2 threads differ");
    ck_assert_msg(memcmp(a, c, n1 * sizeof(float)) == 0, "1 thread and 2 threads differ");
    ck_assert_msg(memcmp(a, d, n1 * sizeof(float)) == 0, "3 threads and 2 threads differ");
    free(a), free(b), free(c), free(d);
}
END_TEST

static Suite *flash_attention_suite(void)
{
    Suite *s = suite_create("flash_attention");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, forward_and_backward_match_double_reference, 0,
                        (int)(sizeof ref_cases / sizeof ref_cases[0]));
    tcase_add_loop_test(tc, masked_forward_and_backward_match_double_reference, 0,
                        (int)(sizeof masked_cases / sizeof masked_cases[0]));
    tcase_add_test(tc, queries_and_keys_of_different_documents_see_nothing);
    tcase_add_test(tc, blocks_merged_by_lse_equal_one_call);
    tcase_add_test(tc, fully_masked_block_gives_zero_and_minus_inf);
    tcase_add_test(tc, a_peaky_softmax_makes_no_subnormal_gradient);
    tcase_add_test(tc, outputs_are_bitwise_equal_across_runs_and_thread_counts);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_main_run(flash_attention_suite());
}
