/* Tile and index arithmetic of the CUDA flash attention, and the scalar steps of
 * its online softmax: everything in the kernels that is not "which thread does
 * which element". Plain C (gcc, C11) and CUDA (nvcc) alike, so that
 * tests/test_cuda_tiles.c checks these helpers against brute-force definitions
 * and runs, on the CPU, the very tile loops the kernels run.
 *
 * Tiles: a query tile is BQ consecutive queries of one (batch, head), a key tile
 * BK consecutive keys of one (batch, kv head); the last tile of each may be
 * short. Tile t starts at t * BQ (or t * BK): tiles are aligned to the start of
 * the call, whatever the offsets.
 *
 * Masks with offsets (ring attention hands one K/V block at a time): local query
 * i sits at global position q_offset + i, local key j at kv_offset + j, and the
 * mask of its batch row (core/ops/mask.h: causal, a sliding window, documents)
 * says which keys each position sees: one interval [lo_i, hi_i) of the call's
 * keys, both ends non-decreasing in i (causal alone: [0, end_i)). So a tile pair
 * is fully masked when its last query's keys end before the tile or its first
 * query's start after it, fully visible when the last query's start at or
 * before the tile and the first query's end at or after it, and partly masked
 * otherwise; the tiles a query tile walks are one range, and so are the query
 * tiles a key tile meets. The index maps are mask.h's, never re-derived here.
 *
 * Layouts (row-major, contiguous, as backends/cpu/cpu_attention.h):
 *   q, o, d_o, dq [B, Nq, H, D]; k, v, dk, dv [B, Nkv, Hkv, D]; lse, delta [B, H, Nq]. */
#ifndef USP_CUDA_ATTENTION_TILES_H
#define USP_CUDA_ATTENTION_TILES_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "core/ops/mask.h"
#include "core/ops/ops.h"

#ifdef __CUDACC__
#define CUDA_HD __host__ __device__
#else
#define CUDA_HD
#endif

/* Threads of every attention block: 4 warps. */
#define ATTN_THREADS 128
#define ATTN_WARPS (ATTN_THREADS / 32)
/* head_dim the kernels take: shared-memory tiles of D = 256 still fit (below). */
#define ATTN_MAX_HEAD_DIM 256
/* Dynamic shared memory one block may opt in to on sm_90 (H100 / H200): 227 KiB. */
#define ATTN_SMEM_LIMIT_BYTES 232448
/* Largest grid.x of a launch (every grid here is 1-D). */
#define ATTN_MAX_BLOCKS 2147483647LL

/* ------------------------------------------------------------------------- */
/* Tile sizes and counts                                                      */

typedef struct attn_tiles {
    int64_t bq; /* queries per tile */
    int64_t bk; /* keys per tile */
} attn_tiles;

/* The largest tile side attn_tiles_for gives (bq, bk <= 64): the kernels' arrays of one entry per row. */
#define ATTN_MAX_TILE 64

/* Tile sizes for head_dim D: 64 x 64 up to D = 64 (each K/V tile loaded into
 * shared memory serves more queries); 32 x 32 above, which keeps the six D-wide
 * tiles of the dK/dV kernel at D = 256 under 227 KiB (attn_backward_smem_layout:
 * 200 KiB). Not tuned on a device yet. */
static inline CUDA_HD attn_tiles attn_tiles_for(int64_t head_dim)
{
    attn_tiles t;
    t.bq = head_dim <= 64 ? 64 : 32;
    t.bk = t.bq;
    return t;
}

/* Tiles of `size` covering n items (0 when n = 0). */
static inline CUDA_HD int64_t attn_n_tiles(int64_t n, int64_t size) { return (n + size - 1) / size; }

/* Items in tile t of `size` over n items (the last tile may be short). */
static inline CUDA_HD int64_t attn_tile_len(int64_t n, int64_t size, int64_t t)
{
    const int64_t rest = n - t * size;
    return rest < size ? rest : size;
}

/* Row stride, in floats, of K and V tiles in shared memory: odd, so that the 32
 * lanes of a warp reading column d of 32 consecutive rows hit 32 different banks. */
static inline CUDA_HD int64_t attn_kv_ld(int64_t head_dim) { return head_dim | 1; }

/* ------------------------------------------------------------------------- */
/* Masks: what each query sees                                                */

static inline CUDA_HD int64_t attn_clamp(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : (x > hi ? hi : x); }

/* The mask of batch row b (core/ops/mask.h): causal, the window, and row b of the documents' table. */
static inline CUDA_HD usp_mask_row attn_mask_row(const usp_attention_shape *s, int64_t b)
{
    usp_mask_row m;
    m.causal = s->causal;
    m.window = s->window;
    m.doc = s->docs ? s->docs + 2 * b * s->seq_len : NULL;
    return m;
}

/* The local keys [*first, *end) that local query i (0 <= i < n_q) of batch row b sees; both ends are
 * non-decreasing in i. Causal alone: [0, the keys up to q_offset + i); no mask: [0, n_kv). */
static inline CUDA_HD void attn_keys(const usp_attention_shape *s, int64_t b, int64_t i, int64_t *first, int64_t *end)
{
    const usp_mask_row m = attn_mask_row(s, b);
    int64_t lo, hi;
    usp_mask_keys(&m, s->q_offset + i, &lo, &hi);
    usp_mask_local(lo, hi, s->kv_offset, s->n_kv, first, end);
}

/* The local queries [*first, *end) that see local key j (0 <= j < n_kv) of batch row b; both ends are
 * non-decreasing in j. */
static inline CUDA_HD void attn_queries(const usp_attention_shape *s, int64_t b, int64_t j, int64_t *first,
                                        int64_t *end)
{
    const usp_mask_row m = attn_mask_row(s, b);
    int64_t lo, hi;
    usp_mask_queries(&m, s->kv_offset + j, &lo, &hi);
    usp_mask_local(lo, hi, s->q_offset, s->n_q, first, end);
}

/* 1 when local query i sees local key j in batch row b (both inside the call). */
static inline CUDA_HD int attn_sees(const usp_attention_shape *s, int64_t b, int64_t i, int64_t j)
{
    int64_t first, end;
    attn_keys(s, b, i, &first, &end);
    return j >= first && j < end;
}

/* The span of a block's fixed row: with of_key = 0, local query x's keys (attn_keys); with of_key = 1,
 * the queries that see local key x (attn_queries); empty past the call (n_q, n_kv), where the table's
 * rows are not read. A kernel finds the spans of its block's rows once, into shared memory, and tests
 * each element against them: no mask arithmetic per element. */
static inline CUDA_HD void attn_row_span(const usp_attention_shape *s, int64_t b, int64_t x, int of_key,
                                         int64_t *first, int64_t *end)
{
    *first = *end = 0;
    if (of_key && x < s->n_kv)
        attn_queries(s, b, x, first, end);
    else if (!of_key && x < s->n_q)
        attn_keys(s, b, x, first, end);
}

typedef enum attn_visibility {
    ATTN_TILE_MASKED = 0,  /* no query of the tile sees a key of the tile: skipped */
    ATTN_TILE_PARTIAL = 1, /* some pairs masked: each entry is checked (attn_sees, or a row's span) */
    ATTN_TILE_VISIBLE = 2, /* every query sees every key: no per-entry check */
} attn_visibility;

/* Visibility of queries [q0, q0 + bq) against keys [k0, k0 + bk) of batch row b (bq, bk >= 1). Query i
 * sees [lo_i, hi_i), both ends non-decreasing, and each query's interval (before the clamp to the call)
 * holds its own position, so the intervals of consecutive queries leave no gap: no pair is visible iff
 * the last query's keys end at or before k0 or the first query's start at or after k0 + bk; every pair
 * is iff the last query's start at or before k0 and the first query's end at or after k0 + bk. */
static inline CUDA_HD attn_visibility attn_tile_visibility(const usp_attention_shape *s, int64_t b, int64_t q0,
                                                           int64_t bq, int64_t k0, int64_t bk)
{
    int64_t first_lo, first_hi, last_lo, last_hi;
    attn_keys(s, b, q0, &first_lo, &first_hi);
    attn_keys(s, b, q0 + bq - 1, &last_lo, &last_hi);
    if (last_hi <= k0 || first_lo >= k0 + bk)
        return ATTN_TILE_MASKED;
    if (last_lo <= k0 && first_hi >= k0 + bk)
        return ATTN_TILE_VISIBLE;
    return ATTN_TILE_PARTIAL;
}

/* Tiles [begin, end) of a loop. */
typedef struct attn_tile_range {
    int64_t begin, end;
} attn_tile_range;

/* The tiles of `size` holding the items [first, end) (none when end <= first). */
static inline CUDA_HD attn_tile_range attn_tiles_holding(int64_t first, int64_t end, int64_t size)
{
    attn_tile_range r;
    r.begin = first / size;
    r.end = end > first ? attn_n_tiles(end, size) : r.begin;
    return r;
}

/* Key tiles of size bk that the queries [q0, q0 + bq) of batch row b walk: from the tile of the first
 * key the first query sees to that of the last key the last query sees. By the argument of
 * attn_tile_visibility the keys they see are that one interval, so no tile of the range is fully
 * masked. Causal alone: [0, the tile of the last query's last key]. */
static inline CUDA_HD attn_tile_range attn_kv_tiles(const usp_attention_shape *s, int64_t b, int64_t q0, int64_t bq,
                                                    int64_t bk)
{
    int64_t first, end, unused;
    attn_keys(s, b, q0, &first, &unused);
    attn_keys(s, b, q0 + bq - 1, &unused, &end);
    return attn_tiles_holding(first, end, bk);
}

/* Query tiles of size bq that meet the keys [k0, k0 + bk) of batch row b: from the tile of the first
 * query that sees key k0 to that of the last query that sees key k0 + bk - 1 (the mirror of
 * attn_kv_tiles). Causal alone: from the first query that sees k0 to the last tile. */
static inline CUDA_HD attn_tile_range attn_q_tiles(const usp_attention_shape *s, int64_t b, int64_t k0, int64_t bk,
                                                   int64_t bq)
{
    int64_t first, end, unused;
    attn_queries(s, b, k0, &first, &unused);
    attn_queries(s, b, k0 + bk - 1, &unused, &end);
    return attn_tiles_holding(first, end, bq);
}

/* ------------------------------------------------------------------------- */
/* Heads and element offsets                                                  */

/* GQA: the kv head that query head h reads. */
static inline CUDA_HD int64_t attn_kv_head(const usp_attention_shape *s, int64_t h)
{
    return h / (s->n_heads / s->n_kv_heads);
}

/* Element d of query row i, head h, batch b in q, o, d_o, dq. */
static inline CUDA_HD int64_t attn_q_index(const usp_attention_shape *s, int64_t b, int64_t i, int64_t h, int64_t d)
{
    return ((b * s->n_q + i) * s->n_heads + h) * s->head_dim + d;
}

/* Element d of key row j, kv head g, batch b in k, v, dk, dv. */
static inline CUDA_HD int64_t attn_kv_index(const usp_attention_shape *s, int64_t b, int64_t j, int64_t g, int64_t d)
{
    return ((b * s->n_kv + j) * s->n_kv_heads + g) * s->head_dim + d;
}

/* Entry of query row i, head h, batch b in lse and delta. */
static inline CUDA_HD int64_t attn_row_index(const usp_attention_shape *s, int64_t b, int64_t h, int64_t i)
{
    return (b * s->n_heads + h) * s->n_q + i;
}

/* ------------------------------------------------------------------------- */
/* Launch shapes                                                              */

/* The (tile, row) a block works on, row = batch * heads + head. */
typedef struct attn_task {
    int64_t tile, row;
} attn_task;

/* Block x of a 1-D grid of n_tiles * n_rows blocks. last_first = 1 hands out the
 * last tiles first (blocks are scheduled roughly in index order, and under a
 * causal mask the last query tiles see the most keys); 0 the first tiles first
 * (the first key tiles are seen by the most queries). Rows vary fastest. */
static inline CUDA_HD attn_task attn_block_task(int64_t x, int64_t n_tiles, int64_t n_rows, int last_first)
{
    attn_task t;
    t.tile = last_first ? n_tiles - 1 - x / n_rows : x / n_rows;
    t.row = x % n_rows;
    return t;
}

/* Blocks of the forward and dQ grids: (query tile, batch * head). */
static inline CUDA_HD int64_t attn_q_grid(const usp_attention_shape *s)
{
    return attn_n_tiles(s->n_q, attn_tiles_for(s->head_dim).bq) * s->batch * s->n_heads;
}

/* Blocks of the dK/dV grid: (key tile, batch * kv head). */
static inline CUDA_HD int64_t attn_kv_grid(const usp_attention_shape *s)
{
    return attn_n_tiles(s->n_kv, attn_tiles_for(s->head_dim).bk) * s->batch * s->n_kv_heads;
}

/* ------------------------------------------------------------------------- */
/* Shared memory: where each tile lives, in floats from the start             */

/* Forward: Q [bq, D], K [bk, ld], V [bk, D], S [bq, bk] (scores, then P),
 * O [bq, D] (unnormalised output), and per query row m, l, alpha [bq]. */
typedef struct attn_forward_smem {
    int64_t q, k, v, s, o, m, l, alpha, floats;
} attn_forward_smem;

static inline CUDA_HD attn_forward_smem attn_forward_smem_layout(int64_t head_dim)
{
    const attn_tiles t = attn_tiles_for(head_dim);
    attn_forward_smem L;
    L.q = 0;
    L.k = L.q + t.bq * head_dim;
    L.v = L.k + t.bk * attn_kv_ld(head_dim);
    L.s = L.v + t.bk * head_dim;
    L.o = L.s + t.bq * t.bk;
    L.m = L.o + t.bq * head_dim;
    L.l = L.m + t.bq;
    L.alpha = L.l + t.bq;
    L.floats = L.alpha + t.bq;
    return L;
}

/* Backward (both the dQ and the dK/dV kernel): Q, dO [bq, D], K, V [bk, ld],
 * P, dS [bq, bk], the accumulators acc_a, acc_b (dQ [bq, D] and nothing in the
 * dQ kernel; dK, dV [bk, D] in the dK/dV kernel), lse and delta [bq]. */
typedef struct attn_backward_smem {
    int64_t q, d_o, k, v, p, ds, acc_a, acc_b, lse, delta, floats;
} attn_backward_smem;

/* dkdv = 1: the dK/dV kernel's layout; 0: the dQ kernel's. */
static inline CUDA_HD attn_backward_smem attn_backward_smem_layout(int64_t head_dim, int dkdv)
{
    const attn_tiles t = attn_tiles_for(head_dim);
    const int64_t ld = attn_kv_ld(head_dim);
    attn_backward_smem L;
    L.q = 0;
    L.d_o = L.q + t.bq * head_dim;
    L.k = L.d_o + t.bq * head_dim;
    L.v = L.k + t.bk * ld;
    L.p = L.v + t.bk * ld;
    L.ds = L.p + (dkdv ? t.bq * t.bk : 0); /* the dQ kernel needs dS only */
    L.acc_a = L.ds + t.bq * t.bk;
    L.acc_b = L.acc_a + (dkdv ? t.bk : t.bq) * head_dim;
    L.lse = L.acc_b + (dkdv ? t.bk * head_dim : 0);
    L.delta = L.lse + t.bq;
    L.floats = L.delta + t.bq;
    return L;
}

/* ------------------------------------------------------------------------- */
/* Workspace and shape checks                                                 */

/* Device bytes the launchers need: delta_i = dO_i . O_i of every query row
 * [B, H, Nq] (fp32), written by the backward's first kernel. The forward needs none. */
static inline size_t attn_workspace_bytes(const usp_attention_shape *s)
{
    return (size_t)(s->batch * s->n_heads * s->n_q) * sizeof(float);
}

/* NULL when the kernels take shape s; otherwise what is wrong with it. */
static inline const char *attn_shape_problem(const usp_attention_shape *s)
{
    if (s->batch < 0 || s->n_q < 0 || s->n_kv < 0)
        return "batch, n_q and n_kv must be >= 0";
    if (s->n_heads < 1 || s->n_kv_heads < 1 || s->n_heads % s->n_kv_heads != 0)
        return "n_kv_heads must be >= 1 and divide n_heads";
    if (s->head_dim < 1 || s->head_dim > ATTN_MAX_HEAD_DIM)
        return "head_dim must be 1..256 (64 and 128 have compiled fast paths, other sizes a generic kernel)";
    if (attn_q_grid(s) > ATTN_MAX_BLOCKS || attn_kv_grid(s) > ATTN_MAX_BLOCKS)
        return "more tiles x heads than one grid holds (2^31 - 1 blocks)";
    return NULL;
}

/* ------------------------------------------------------------------------- */
/* The scalar steps of the online softmax                                     */

/* a . b over n floats, in index order. */
static inline CUDA_HD float attn_dot(const float *a, const float *b, int64_t n)
{
    float acc = 0.0f;
    for (int64_t d = 0; d < n; d++)
        acc += a[d] * b[d];
    return acc;
}

/* Online softmax, one key tile at a time, for a row with running max m and
 * running sum l (natural-log units; m = -inf, l = 0 before the first tile):
 *   m' = max(m, max_j s_j),  p_j = e^(s_j - m'),  l' = alpha l + sum_j p_j,
 *   o' = alpha o + sum_j p_j v_j  with alpha = e^(m - m').
 * Masked entries have s_j = -inf and get p_j = 0. A row that has seen no key
 * yet (m' = -inf) keeps alpha = 1 and p = 0: no -inf - -inf = NaN. */
static inline CUDA_HD float attn_softmax_rescale(float m_old, float m_new)
{
    return m_new == -INFINITY ? 1.0f : expf(m_old - m_new);
}

/* p_j = e^(s_j - m') of the update above (0 for a masked entry). */
static inline CUDA_HD float attn_softmax_prob(float score, float m_new)
{
    return score == -INFINITY ? 0.0f : expf(score - m_new);
}

/* lse = m + log l after the last tile; -inf for a row that saw no key (l = 0). */
static inline CUDA_HD float attn_softmax_lse(float m, float l)
{
    return l > 0.0f ? m + logf(l) : -INFINITY;
}

/* The factor o is divided by at the end: 1 / l, and 0 for a row that saw no key (o = 0). */
static inline CUDA_HD float attn_softmax_inv_sum(float l)
{
    return l > 0.0f ? 1.0f / l : 0.0f;
}

/* Backward, with P recomputed from the (possibly global) lse:
 *   P_ij = e^(s_ij - lse_i),  dS_ij = P_ij (dO_i . V_j - delta_i),  delta_i = dO_i . O_i
 *   dV_j = sum_i P_ij dO_i,  dK_j = scale sum_i dS_ij Q_i,  dQ_i = scale sum_j dS_ij K_j.
 * A row with lse = -inf saw no key: P = 0. */
static inline CUDA_HD float attn_backward_prob(float score, float lse)
{
    return lse == -INFINITY ? 0.0f : expf(score - lse);
}

/* dS_ij from P_ij, dP_ij = dO_i . V_j and delta_i. */
static inline CUDA_HD float attn_backward_dscore(float p, float dp, float delta) { return p * (dp - delta); }

/* Merge of a partial result into an accumulated one (core/ops/ops.h):
 *   lse' = log(e^a + e^b), o' = (w_a o + w_b o_part) / (w_a + w_b), w = e^(x - max(a, b)).
 * skip = 1 when the part saw no key (b = -inf): (o, lse) stay as they are. */
typedef struct attn_merge_weights {
    float wa, wb, sum, lse;
    int skip;
} attn_merge_weights;

static inline CUDA_HD attn_merge_weights attn_merge_weigh(float a, float b)
{
    attn_merge_weights w;
    w.skip = b == -INFINITY;
    const float m = a > b ? a : b;
    w.wa = a == -INFINITY ? 0.0f : expf(a - m);
    w.wb = w.skip ? 0.0f : expf(b - m);
    w.sum = w.wa + w.wb;
    w.lse = w.skip ? a : m + logf(w.sum);
    return w;
}

#endif
