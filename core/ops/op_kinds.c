/* The table of op kinds (core/ops/op.h): for each, its operands in order, the checks of its
 * parameters and its cost.
 *
 * The operands are listed in the order core checks them, which is the order the cost hands them to
 * a cache model (usp_op_cost.operands: least recently used over an op's ranges in order, so the
 * order is part of the modelled time): outputs first for most layer ops, as the wrappers of the
 * typed calls always did.
 *
 * Costs come from shapes alone, so every backend reports the same numbers for the same call. They
 * count a transcendental (exp, tanh, sqrt, cos) as one flop and bytes as one pass over each operand,
 * what a fused GPU kernel moves, 4 bytes an element whatever the storage (the fp32 arithmetic's
 * view; the kernel models price a dtype apart, sim/kernel_model.h); attention and GEMM name the
 * dtype they multiply in. */
#include <math.h>
#include <string.h>

#include "core/ops/mask.h"

#include "core/ops/ops_internal.h"

enum { W = USP_OPERAND_WRITTEN, F32 = USP_OPERAND_F32, OPT = USP_OPERAND_OPTIONAL, IDS = USP_OPERAND_IDS,
       BYTES = USP_OPERAND_BYTES, SCRATCH = USP_OPERAND_SCRATCH };

/* ---- parameter checks: USP_ERR_CONFIG naming the op and the value; *nothing = 1 when n = 0 ---- */

/* n rows of `dim` = C elements: n >= 0, C >= 1. */
static usp_status check_rows(const char *op, const char *dim, int64_t n, int64_t C, int *nothing)
{
    if (n < 0 || C < 1)
        return usp_error(USP_ERR_CONFIG, "%s: n = %lld rows of %s = %lld: n must be >= 0 and %s >= 1", op,
                         (long long)n, dim, (long long)C, dim);
    *nothing = n == 0;
    return USP_OK;
}

/* n elements: n >= 0. */
static usp_status check_count(const char *op, int64_t n, int *nothing)
{
    if (n < 0)
        return usp_error(USP_ERR_CONFIG, "%s: n = %lld elements; it must be >= 0", op, (long long)n);
    *nothing = n == 0;
    return USP_OK;
}

static usp_status check_eps(const char *op, float eps)
{
    if (!(eps >= 0.0f) || isinf(eps))
        return usp_error(USP_ERR_CONFIG, "%s: eps = %g; it must be a finite value >= 0 (1e-5 is usual)", op,
                         (double)eps);
    return USP_OK;
}

static usp_status check_gemm(const usp_op *op, int *nothing)
{
    const usp_gemm_shape *g = &op->p.gemm;
    if (g->m < 0 || g->n < 0 || g->k < 0 || g->batch < 0)
        return usp_error(USP_ERR_RUNTIME, "gemm with negative shape m=%lld n=%lld k=%lld batch=%lld",
                         (long long)g->m, (long long)g->n, (long long)g->k, (long long)g->batch);
    *nothing = g->m == 0 || g->n == 0 || g->batch == 0;
    return USP_OK;
}

static usp_status check_strided(const usp_op *op, int *nothing)
{
    *nothing = op->p.strided.row == 0 || op->p.strided.rows == 0;
    return USP_OK;
}

static usp_status check_convert(const usp_op *op, int *nothing)
{
    return check_count("convert", op->p.convert.n, nothing);
}

/* A mask the call can hold: a window of no keys or a documents' table without its host copy (the cost
 * counts from it) or too short for the call's positions is refused. */
static usp_status check_attention_mask(const usp_attention_shape *s)
{
    if (s->window < 0)
        return usp_error(USP_ERR_CONFIG, "attention window %lld: a window is a count of keys, at least 1 (0: none)",
                         (long long)s->window);
    if (!s->docs && !s->docs_host)
        return USP_OK;
    if (!s->docs || !s->docs_host)
        return usp_error(USP_ERR_CONFIG, "attention documents: the table %s; pass it in the backend's memory (docs) "
                         "and in the host's (docs_host, the cost counts from it)",
                         s->docs ? "has no host copy" : "is in host memory only");
    const int64_t last = (s->q_offset + s->n_q > s->kv_offset + s->n_kv ? s->q_offset + s->n_q
                                                                         : s->kv_offset + s->n_kv);
    if (s->q_offset < 0 || s->kv_offset < 0 || last > s->seq_len)
        return usp_error(USP_ERR_CONFIG, "attention documents: the table holds positions [0, %lld); this call "
                         "reaches queries [%lld, %lld) and keys [%lld, %lld)", (long long)s->seq_len,
                         (long long)s->q_offset, (long long)(s->q_offset + s->n_q), (long long)s->kv_offset,
                         (long long)(s->kv_offset + s->n_kv));
    return USP_OK;
}

static usp_status check_attention_shape(const usp_attention_shape *s)
{
    USP_CHECK(check_attention_mask(s));
    if (s->batch < 0 || s->n_q < 0 || s->n_kv < 0 || s->head_dim < 1 || s->n_heads < 1 || s->n_kv_heads < 1 ||
        s->n_heads % s->n_kv_heads != 0)
        return usp_error(USP_ERR_CONFIG,
                         "attention shape: batch %lld, %lld queries, %lld keys, %lld heads, %lld kv heads, head_dim "
                         "%lld: kv heads must divide heads, and every size be positive",
                         (long long)s->batch, (long long)s->n_q, (long long)s->n_kv, (long long)s->n_heads,
                         (long long)s->n_kv_heads, (long long)s->head_dim);
    return USP_OK;
}

static usp_status check_attention_forward(const usp_op *op, int *nothing)
{
    const usp_attention_shape *s = &op->p.attention.shape;
    USP_CHECK(check_attention_shape(s));
    *nothing = s->batch == 0 || s->n_q == 0;
    return USP_OK;
}

static usp_status check_attention_backward(const usp_op *op, int *nothing)
{
    const usp_attention_shape *s = &op->p.attention.shape;
    USP_CHECK(check_attention_shape(s));
    *nothing = s->batch == 0 || (s->n_q == 0 && s->n_kv == 0);
    return USP_OK;
}

static usp_status check_merge(const usp_op *op, int *nothing)
{
    *nothing = op->p.merge.n == 0;
    return USP_OK;
}

static usp_status check_rows_c(const usp_op *op, int *nothing)
{
    return check_rows(usp_op_name(op), "C", op->p.rows.n, op->p.rows.C, nothing);
}

/* The position table is read with its ids: both, or neither. */
static usp_status check_embedding(const usp_op *op, int *nothing)
{
    USP_CHECK(check_rows_c(op, nothing));
    const int table = op->kind == USP_OP_EMBEDDING_FORWARD ? 3 : 1;
    if (!*nothing && op->operand[table].data && !op->operand[4].data)
        return usp_error(USP_ERR_RUNTIME, "%s: positions is NULL; it needs a buffer of %lld elements", usp_op_name(op),
                         (long long)op->p.rows.n);
    return USP_OK;
}

static usp_status check_norm_forward(const usp_op *op, int *nothing)
{
    USP_CHECK(check_rows_c(op, nothing));
    return check_eps(usp_op_name(op), op->p.rows.eps);
}

static usp_status check_rope(const usp_op *op, int *nothing)
{
    const char *name = usp_op_name(op);
    const int64_t n = op->p.rope.n, H = op->p.rope.H, D = op->p.rope.D;
    const float theta = op->p.rope.theta;
    const double *inv_freq = op->p.rope.inv_freq;
    if (n < 0 || H < 1 || D < 2 || D % 2 != 0)
        return usp_error(USP_ERR_CONFIG,
                         "%s: x [n = %lld, H = %lld, D = %lld]: n must be >= 0, H >= 1 and the head dimension D "
                         "even and >= 2 (dims i and i + D/2 form a rotation pair)",
                         name, (long long)n, (long long)H, (long long)D);
    if (!(theta > 0.0f) || isinf(theta))
        return usp_error(USP_ERR_CONFIG, "%s: rope theta = %g; it must be finite and > 0 (10000 is usual)", name,
                         (double)theta);
    for (int64_t i = 0; inv_freq && i < D / 2; i++)
        if (!(inv_freq[i] > 0.0) || isinf(inv_freq[i]))
            return usp_error(USP_ERR_CONFIG, "%s: inverse frequency %lld = %g; each must be finite and > 0", name,
                             (long long)i, inv_freq[i]);
    *nothing = n == 0;
    return USP_OK;
}

static usp_status check_loss(const usp_op *op, int *nothing)
{
    return check_rows("cross_entropy", "V", op->p.loss.n, op->p.loss.V, nothing);
}

static usp_status check_adamw(const usp_op *op, int *nothing)
{
    const char *name = "adamw_step";
    USP_CHECK(check_count(name, op->p.adamw.n, nothing));
    const int64_t t = op->p.adamw.t;
    const float lr = op->p.adamw.lr, beta1 = op->p.adamw.beta1, beta2 = op->p.adamw.beta2, eps = op->p.adamw.eps,
                weight_decay = op->p.adamw.weight_decay;
    if (t < 1 || !(beta1 >= 0.0f && beta1 < 1.0f) || !(beta2 >= 0.0f && beta2 < 1.0f) || !(eps >= 0.0f) ||
        !(lr >= 0.0f) || isinf(lr) || !(weight_decay >= 0.0f) || isinf(weight_decay) || isinf(eps))
        return usp_error(USP_ERR_CONFIG,
                         "%s: step t = %lld, lr = %g, beta1 = %g, beta2 = %g, eps = %g, weight_decay = %g: t counts "
                         "from 1, betas lie in [0, 1) and lr, eps, weight_decay are finite and >= 0 (e.g. t = 1, "
                         "lr = 3e-4, betas 0.9 and 0.95, eps = 1e-8, weight_decay = 0.1)",
                         name, (long long)t, (double)lr, (double)beta1, (double)beta2, (double)eps,
                         (double)weight_decay);
    return USP_OK;
}

static usp_status check_sum(const usp_op *op, int *nothing)
{
    return check_count("sum_squares", op->p.sum.n, nothing);
}

static usp_status check_map(const usp_op *op, int *nothing)
{
    if ((unsigned)op->p.map.fn >= USP_MAP_FN_COUNT)
        return usp_error(USP_ERR_CONFIG, "map: function %d; usp_map_fn has %d", (int)op->p.map.fn,
                         USP_MAP_FN_COUNT);
    return check_count(usp_op_name(op), op->p.map.n, nothing);
}

/* ---- costs ---------------------------------------------------------------------------- */

static ops_work work(double flops, double bytes) { return (ops_work){flops, bytes, 0.0, USP_F32}; }

/* 2mnk multiply-adds per matrix; traffic reads A and B, writes C (and reads it when beta != 0); the
 * product is bf16 when an input is (an fp32 one is rounded). */
static ops_work cost_gemm(const usp_op *op)
{
    const usp_gemm_shape *g = &op->p.gemm;
    const double mats = (double)g->batch, c_passes = g->beta != 0.0f ? 2.0 : 1.0;
    const usp_dtype in = op->operand[0].dtype == USP_BF16 || op->operand[1].dtype == USP_BF16 ? USP_BF16 : USP_F32;
    return (ops_work){2.0 * (double)g->m * (double)g->n * (double)g->k * mats,
                      4.0 * mats * ((double)g->m * g->k + (double)g->k * g->n + c_passes * g->m * g->n),
                      (double)g->m * (double)g->n * mats, in};
}

static ops_work cost_copy_2d(const usp_op *op)
{
    const double rows = (double)op->p.strided.rows;
    return (ops_work){0, 2.0 * (double)op->p.strided.row * rows, rows, USP_F32};
}

/* Reads one dtype, writes the other. */
static ops_work cost_convert(const usp_op *op)
{
    return work(0, (double)(usp_view_bytes(op->operand[0]) + usp_view_bytes(op->operand[1])));
}

static ops_work cost_accumulate_2d(const usp_op *op)
{
    const double n = (double)op->p.strided.row * (double)op->p.strided.rows;
    return (ops_work){n, 12.0 * n, (double)op->p.strided.rows, USP_F32};
}

/* Sum over i in [0, n) of clamp(lo + i, 0, cap): the keys query i sees. */
static double sum_clamped(int64_t lo, int64_t n, int64_t cap)
{
    int64_t hi = lo + n - 1;
    int64_t a = lo > 1 ? lo : 1, b = hi < cap ? hi : cap; /* values in [1, cap] */
    double inside = a <= b ? ((double)a + (double)b) * (double)(b - a + 1) / 2.0 : 0.0;
    int64_t first_full = lo > cap + 1 ? lo : cap + 1; /* values above cap count cap */
    double full = hi >= first_full ? (double)(hi - first_full + 1) * (double)cap : 0.0;
    return inside + full;
}

double usp_attention_visible_pairs(const usp_attention_shape *s)
{
    if (!s->docs_host && s->window == 0) {
        if (!s->causal)
            return (double)s->batch * ((double)s->n_q * (double)s->n_kv);
        /* query at q_offset + i sees keys kv_offset + j <= q_offset + i: min(max(c + i, 0), n_kv) of them */
        return (double)s->batch * sum_clamped(s->q_offset - s->kv_offset + 1, s->n_q, s->n_kv);
    }
    double sum = 0.0;
    for (int64_t b = 0; b < s->batch; b++) { /* rows differ in their documents only */
        const usp_mask_row m = {s->causal, s->window, s->docs_host ? s->docs_host + 2 * b * s->seq_len : NULL};
        const double row = usp_mask_pairs(&m, s->q_offset, s->n_q, s->kv_offset, s->n_kv);
        if (!m.doc)
            return (double)s->batch * row;
        sum += row;
    }
    return sum;
}

void usp_attention_shape_mask(usp_attention_shape *s, const usp_attention_mask *m, int64_t seq_len, int64_t row)
{
    const size_t at = 2 * (size_t)row * (size_t)seq_len;
    s->window = m->window, s->seq_len = seq_len;
    s->docs = m->docs ? m->docs + at : NULL, s->docs_host = m->docs_host ? m->docs_host + at : NULL;
}

/* FlashAttention's convention: 4 flops per visible pair and head dimension (two matmuls) forward;
 * backward 2.5x forward. Bytes: inputs and outputs once. */
static ops_work attention_cost(const usp_op *op, int backward)
{
    const usp_attention_shape *s = &op->p.attention.shape;
    const double scores = (double)s->n_heads * usp_attention_visible_pairs(s);
    const double flops = 4.0 * scores * (double)s->head_dim;
    const double q_bytes = 4.0 * (double)(s->batch * s->n_q * s->n_heads * s->head_dim);
    const double kv_bytes = 4.0 * (double)(s->batch * s->n_kv * s->n_kv_heads * s->head_dim);
    const double bytes = backward ? 4 * q_bytes + 4 * kv_bytes : 2 * q_bytes + 2 * kv_bytes;
    return (ops_work){backward ? 2.5 * flops : flops, bytes, scores, op->operand[0].dtype};
}

static ops_work cost_attention_forward(const usp_op *op) { return attention_cost(op, 0); }
static ops_work cost_attention_backward(const usp_op *op) { return attention_cost(op, 1); }

static ops_work cost_merge(const usp_op *op)
{
    const double rows = (double)(op->p.merge.n * op->p.merge.heads), elems = rows * (double)op->p.merge.head_dim;
    return work(3.0 * elems, 4.0 * (3.0 * elems + 3.0 * rows));
}

/* Per table: read n ids and n rows; one add per element when there are two tables; write out. */
static ops_work cost_embedding_forward(const usp_op *op)
{
    const double tables = op->operand[3].data ? 2.0 : 1.0, n = (double)op->p.rows.n, nc = n * (double)op->p.rows.C;
    return work((tables - 1.0) * nc, 4.0 * (tables * (nc + n) + nc));
}

/* Read dout once; per table: n ids, read-add-write n rows. */
static ops_work cost_embedding_backward(const usp_op *op)
{
    const double tables = op->operand[1].data ? 2.0 : 1.0, n = (double)op->p.rows.n, nc = n * (double)op->p.rows.C;
    return work(tables * nc, 4.0 * (nc + tables * (n + 2.0 * nc)));
}

/* Per element: mean 1, variance 3 (sub, mul, add), output 4 (sub, mul, mul, add). */
static ops_work cost_layernorm_forward(const usp_op *op)
{
    const double n = (double)op->p.rows.n, C = (double)op->p.rows.C, nc = n * C;
    return work(8.0 * nc, 4.0 * (2.0 * nc + 2.0 * C + 2.0 * n));
}

/* Per element: xh 2, g 1, two row sums 3, dx 5 (sub, mul, sub, mul, add), dw 2, db 1; read dout, inp,
 * dinp, write dinp; weight, dweight and dbias (read and write); mean, rstd. */
static ops_work cost_layernorm_backward(const usp_op *op)
{
    const double n = (double)op->p.rows.n, C = (double)op->p.rows.C, nc = n * C;
    return work(14.0 * nc, 4.0 * (4.0 * nc + 5.0 * C + 2.0 * n));
}

/* Per element: square and add 2, output 2 multiplies. */
static ops_work cost_rmsnorm_forward(const usp_op *op)
{
    const double n = (double)op->p.rows.n, C = (double)op->p.rows.C, nc = n * C;
    return work(4.0 * nc, 4.0 * (2.0 * nc + C + n));
}

/* Per element: row sum 3, dx 5 (mul, mul, mul, sub, add), dw 3; read dout, inp, dinp, write dinp. */
static ops_work cost_rmsnorm_backward(const usp_op *op)
{
    const double n = (double)op->p.rows.n, C = (double)op->p.rows.C, nc = n * C;
    return work(11.0 * nc, 4.0 * (4.0 * nc + 3.0 * C + n));
}

/* One rotation per pair: 4 multiplies, 2 adds; per row and pair one angle (multiply, cos, sin) for all
 * heads. Outputs: the n D/2 angles, each a sincos shared by the H heads; on a CPU these cost more than
 * the rotation (a double sincos is about 20 ns), so the time follows the angles, not the bytes. */
static ops_work cost_rope(const usp_op *op)
{
    const double n = (double)op->p.rope.n, elems = n * (double)op->p.rope.H * (double)op->p.rope.D;
    const double angles = 0.5 * n * (double)op->p.rope.D;
    return (ops_work){3.0 * elems + 3.0 * angles, 4.0 * (2.0 * elems + n), angles, USP_F32};
}

/* Per logit: max 1, exp(z - m) 2, sum 1, and with the gradient a scale 1; read logits once, write
 * dlogits; targets and losses. */
static ops_work cost_loss(const usp_op *op)
{
    const double n = (double)op->p.loss.n, nv = n * (double)op->p.loss.V, grad = op->operand[1].data ? 1.0 : 0.0;
    return work((4.0 + grad) * nv, 4.0 * ((1.0 + grad) * nv + 2.0 * n));
}

/* m 3, v 4, bias corrections 2, sqrt 1, + eps 1, divide 1, decay 2, lr and update 2; read params,
 * grads, m, v, write params, m, v. */
static ops_work cost_adamw(const usp_op *op)
{
    const double n = (double)op->p.adamw.n;
    return work(16.0 * n, 28.0 * n);
}

static ops_work cost_sum(const usp_op *op)
{
    const double n = (double)op->p.sum.n;
    return work(2.0 * n, 4.0 * n);
}

static ops_work cost_add_bias(const usp_op *op)
{
    const double C = (double)op->p.rows.C, nc = (double)op->p.rows.n * C;
    return work(nc, 4.0 * (2.0 * nc + C));
}

static ops_work cost_bias_backward(const usp_op *op)
{
    const double C = (double)op->p.rows.C, nc = (double)op->p.rows.n * C;
    return work(nc, 4.0 * (nc + 2.0 * C));
}

/* ---- the table ---------------------------------------------------------------------------- */

typedef struct op_kind_info {
    const char *name, *cost_name;
    int n_operands;
    usp_operand_info operands[USP_OP_OPERANDS_MAX];
    usp_status (*check)(const usp_op *op, int *nothing);
    ops_work (*cost)(const usp_op *op);
    int blocking;           /* returns with its work done and its result on the host (a counted host wait) */
    const char *scratch;    /* the category its SCRATCH operand is counted under */
} op_kind_info;

#define ROW(name_) {name_, 0, -1}
#define ROW_F(name_, flags_) {name_, flags_, -1}

static const op_kind_info kinds[USP_OP_KIND_COUNT] = {
    [USP_OP_GEMM] = {"gemm", "gemm", 3, {ROW("a"), ROW("b"), ROW_F("c", W)}, check_gemm, cost_gemm},
    [USP_OP_COPY_2D] = {"copy_2d", "copy", 2, {ROW_F("source", BYTES), ROW_F("destination", BYTES | W)},
                        check_strided, cost_copy_2d},
    [USP_OP_CONVERT] = {"convert", "convert", 2, {ROW_F("source", 0), ROW_F("destination", W)}, check_convert,
                        cost_convert},
    [USP_OP_ACCUMULATE_2D] = {"accumulate_2d", "accumulate", 2, {ROW_F("dst", W), ROW("src")}, check_strided,
                              cost_accumulate_2d},
    [USP_OP_ATTENTION_FORWARD] = {"attention_forward", "attention_forward", 7,
                                  {ROW("q"), ROW_F("o", W), ROW_F("lse", W | F32), ROW("k"), ROW("v"),
                                   ROW_F("docs", IDS | OPT), ROW_F("workspace", W | SCRATCH | OPT)},
                                  check_attention_forward, cost_attention_forward, 0, "attention workspace"},
    [USP_OP_ATTENTION_BACKWARD] = {"attention_backward", "attention_backward", 11,
                                   {ROW("q"), ROW("o"), ROW("d_o"), ROW_F("dq", W), ROW_F("lse", F32), ROW("k"),
                                    ROW("v"), ROW_F("dk", W), ROW_F("dv", W), ROW_F("docs", IDS | OPT),
                                    ROW_F("workspace", W | SCRATCH | OPT)},
                                   check_attention_backward, cost_attention_backward, 0, "attention workspace"},
    [USP_OP_ATTENTION_MERGE] = {"attention_merge", "attention_merge", 4,
                                {ROW_F("o", W), ROW("o_part"), ROW_F("lse", W | F32), ROW_F("lse_part", F32)},
                                check_merge, cost_merge},
    [USP_OP_EMBEDDING_FORWARD] = {"embedding_forward", "embedding_forward", 5,
                                  {ROW_F("out", W), ROW_F("tokens", IDS), {"wte", 0, 1}, {"wpe", OPT, 4},
                                   ROW_F("positions", IDS | OPT)},
                                  check_embedding, cost_embedding_forward},
    [USP_OP_EMBEDDING_BACKWARD] = {"embedding_backward", "embedding_backward", 5,
                                   {{"dwte", W, 3}, {"dwpe", W | OPT, 4}, ROW("dout"), ROW_F("tokens", IDS),
                                    ROW_F("positions", IDS | OPT)},
                                   check_embedding, cost_embedding_backward},
    [USP_OP_LAYERNORM_FORWARD] = {"layernorm_forward", "layernorm_forward", 6,
                                  {ROW_F("out", W), ROW_F("mean", W | F32 | OPT), ROW_F("rstd", W | F32 | OPT),
                                   ROW("inp"), ROW("weight"), ROW_F("bias", OPT)},
                                  check_norm_forward, cost_layernorm_forward},
    [USP_OP_LAYERNORM_BACKWARD] = {"layernorm_backward", "layernorm_backward", 8,
                                   {ROW_F("dinp", W), ROW_F("dweight", W), ROW_F("dbias", W | OPT), ROW("dout"),
                                    ROW("inp"), ROW("weight"), ROW_F("mean", F32), ROW_F("rstd", F32)},
                                   check_rows_c, cost_layernorm_backward},
    [USP_OP_RMSNORM_FORWARD] = {"rmsnorm_forward", "rmsnorm_forward", 4,
                                {ROW_F("out", W), ROW_F("rstd", W | F32 | OPT), ROW("inp"), ROW("weight")},
                                check_norm_forward, cost_rmsnorm_forward},
    [USP_OP_RMSNORM_BACKWARD] = {"rmsnorm_backward", "rmsnorm_backward", 6,
                                 {ROW_F("dinp", W), ROW_F("dweight", W), ROW("dout"), ROW("inp"), ROW("weight"),
                                  ROW_F("rstd", F32)},
                                 check_rows_c, cost_rmsnorm_backward},
    [USP_OP_ROPE_FORWARD] = {"rope_forward", "rope_forward", 2, {ROW_F("x", W), ROW_F("positions", IDS)},
                             check_rope, cost_rope},
    [USP_OP_ROPE_BACKWARD] = {"rope_backward", "rope_backward", 2, {ROW_F("dx", W), ROW_F("positions", IDS)},
                              check_rope, cost_rope},
    [USP_OP_CROSS_ENTROPY] = {"cross_entropy", "cross_entropy", 4,
                              {ROW_F("losses", W | F32 | OPT), ROW_F("dlogits", W | OPT), ROW("logits"),
                               ROW_F("targets", IDS)},
                              check_loss, cost_loss},
    [USP_OP_ADAMW_STEP] = {"adamw_step", "adamw_step", 4,
                           {ROW_F("params", W | F32), ROW("grads"), ROW_F("m", W | F32), ROW_F("v", W | F32)},
                           check_adamw, cost_adamw},
    [USP_OP_SUM_SQUARES] = {"sum_squares", "sum_squares", 1, {ROW("x")}, check_sum, cost_sum, 1},
    [USP_OP_ADD_BIAS] = {"add_bias", "add_bias", 2, {ROW_F("x", W), ROW("bias")}, check_rows_c, cost_add_bias},
    [USP_OP_BIAS_BACKWARD] = {"bias_backward", "bias_backward", 2, {ROW_F("dbias", W), ROW("dout")}, check_rows_c,
                              cost_bias_backward},
    [USP_OP_MAP] = {"map", "map", 0, {ROW("")}, check_map, NULL}, /* operands and cost: its function's row */
};

/* ---- element-wise functions: USP_MAP_FNS, core/ops/op.h ---------------------------------- */

#define ARGS(...) __VA_ARGS__

typedef struct map_fn_info {
    const char *name;
    int outputs, inputs;
    double flops, bytes; /* per element */
    const char *operands[USP_OP_OPERANDS_MAX];
} map_fn_info;

static const map_fn_info map_fns[USP_MAP_FN_COUNT] = {
#define MAP_FN_ROW(fn, name_, outs, ins, flops_, bytes_, names) \
    [USP_MAP_##fn] = {#name_, outs, ins, flops_, bytes_, {ARGS names}},
    USP_MAP_FNS(MAP_FN_ROW)
#undef MAP_FN_ROW
};

_Static_assert(USP_OP_OPERANDS_MAX >= 5, "a map function has at most 5 operands");

static const map_fn_info *map_fn_of(const usp_op *op)
{
    return (unsigned)op->p.map.fn < USP_MAP_FN_COUNT ? &map_fns[op->p.map.fn] : NULL;
}

const char *usp_op_kind_name(usp_op_kind kind)
{
    return (unsigned)kind < USP_OP_KIND_COUNT ? kinds[kind].name : "unknown op";
}

const char *usp_map_fn_name(usp_map_fn fn) { return (unsigned)fn < USP_MAP_FN_COUNT ? map_fns[fn].name : "map"; }

const char *usp_op_name(const usp_op *op)
{
    return op->kind == USP_OP_MAP ? usp_map_fn_name(op->p.map.fn) : usp_op_kind_name(op->kind);
}

const char *usp_op_cost_name(const usp_op *op)
{
    return op->kind == USP_OP_MAP ? usp_map_fn_name(op->p.map.fn) : kinds[op->kind].cost_name;
}

int usp_op_operands(const usp_op *op, usp_operand_info info[USP_OP_OPERANDS_MAX])
{
    if (op->kind != USP_OP_MAP) {
        const op_kind_info *k = &kinds[op->kind];
        memcpy(info, k->operands, (size_t)k->n_operands * sizeof *info);
        return k->n_operands;
    }
    const map_fn_info *f = map_fn_of(op);
    const int n = f ? f->outputs + f->inputs : 0;
    for (int i = 0; i < n; i++)
        info[i] = (usp_operand_info){f->operands[i], i < f->outputs ? W : 0u, -1};
    return n;
}

size_t usp_view_bytes(usp_view v) { return (size_t)v.count * usp_dtype_size(v.dtype); }

usp_status ops_kind_check(const usp_op *op, int *nothing)
{
    *nothing = 0;
    if ((unsigned)op->kind >= USP_OP_KIND_COUNT)
        return usp_error(USP_ERR_CONFIG, "op kind %d; usp_op_kind has %d", (int)op->kind, USP_OP_KIND_COUNT);
    return kinds[op->kind].check(op, nothing);
}

ops_work ops_kind_cost(const usp_op *op)
{
    if (op->kind != USP_OP_MAP)
        return kinds[op->kind].cost(op);
    const map_fn_info *f = map_fn_of(op);
    return work(f->flops * (double)op->p.map.n, f->bytes * (double)op->p.map.n);
}

int usp_op_blocking(const usp_op *op) { return kinds[op->kind].blocking; }

static int is_rope(const usp_op *op) { return op->kind == USP_OP_ROPE_FORWARD || op->kind == USP_OP_ROPE_BACKWARD; }

const void *usp_op_host_input(const usp_op *op, size_t *bytes)
{
    *bytes = 0;
    if (!is_rope(op) || !op->p.rope.inv_freq)
        return NULL;
    *bytes = (size_t)(op->p.rope.D / 2) * sizeof *op->p.rope.inv_freq;
    return op->p.rope.inv_freq;
}

void usp_op_set_host_input(usp_op *op, const void *copy)
{
    if (is_rope(op))
        op->p.rope.inv_freq = copy;
}

const char *ops_kind_scratch(usp_op_kind kind) { return kinds[kind].scratch; }
