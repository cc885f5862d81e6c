/* Flash attention on the GPU (FlashAttention-2 schedule): forward, the
 * deterministic backward, and the merge of ring-attention blocks.
 *
 * Why this shape: the score matrix of one head at N = 1M tokens would be 4 TB;
 * a block holds one query tile (or one key tile) in shared memory and walks the
 * other side tile by tile, keeping only running statistics. The arithmetic of
 * every step (tile sizes, which tiles to skip under the mask with offsets, be it
 * causal, a sliding window or documents; the online-softmax update, shared-memory
 * layouts, grid order) lives in cuda_attention_tiles.h, where
 * tests/test_cuda_tiles.c checks it against brute force and runs these exact tile
 * loops on the CPU against the cpu backend. This file only decides which thread
 * computes which element.
 *
 * Kernels (all blocks ATTN_THREADS = 128 threads, 1-D grids):
 *   forward       one block per (query tile, batch * head): O, m, l in shared
 *                 memory, K/V tiles streamed through, o = O / l, lse = m + log l.
 *   delta         one warp per query row: delta_i = dO_i . O_i into the workspace.
 *   dK/dV         one block per (key tile, batch * kv head), looping over the
 *                 query heads of its GQA group, then over query tiles, in a fixed
 *                 order: no two blocks write the same dK/dV row.
 *   dQ            one block per (query tile, batch * head), over key tiles.
 *   merge         one warp per (row, head).
 * Two backward kernels recompute P and dS (the FlashAttention-2 split): the cost
 * of determinism without floating-point atomics. Every sum runs in an order
 * fixed by the shape, so the bits do not depend on the run.
 *
 * Thread mapping within a block, and why it avoids shared-memory bank conflicts:
 * score entries (i, j) go to threads with j fastest, so a warp reads one Q row
 * (a broadcast) and 32 K rows at one column (odd row stride attn_kv_ld: 32
 * banks); output elements (row, d) go with d fastest (consecutive words), and
 * the P / dS entry they read is the same for the warp (a broadcast).
 *
 * Simple fp32 FMA code, no tensor cores: q, k, v, o, gradients are loaded and
 * stored as fp32 or bf16 through cuda_load / cuda_store; everything in shared
 * memory, every sum and lse are fp32. head_dim 64 and 128 are compiled with D
 * a constant (unrolled dot products); other head_dim 1..256 run the same kernels
 * with D read at run time. These kernels are the fp32 path and the reference;
 * a bf16 call the tensor cores can take goes to cuda_attention_mma.cu instead
 * (cuda_attention_op.c decides). */
#include "backends/cuda/cuda_attention_tiles.h"
#include "backends/cuda/cuda_common.cuh"

/* ------------------------------------------------------------------------- */
/* Block-level building blocks                                                */

/* Sum over the 32 lanes (butterfly: every lane gets the same bits). */
static __device__ __forceinline__ float warp_sum(float x)
{
    for (int off = 16; off > 0; off >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;
}

/* Max over the 32 lanes. */
static __device__ __forceinline__ float warp_max(float x)
{
    for (int off = 16; off > 0; off >>= 1)
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
    return x;
}

/* dst [tile_rows, D] (row stride ld, shared) = `rows` rows of src starting at
 * element `first`, rows `stride` elements apart; rows past `rows` are zeroed so
 * that no stale shared memory (possibly NaN) enters a product. */
static __device__ __forceinline__ void tile_load(float *dst, int ld, const cuda_array src, int64_t first,
                                                 int64_t stride, int rows, int tile_rows, int D)
{
    for (int e = threadIdx.x; e < tile_rows * D; e += ATTN_THREADS) {
        const int r = e / D, d = e % D;
        dst[r * ld + d] = r < rows ? cuda_load(src, first + (int64_t)r * stride + d) : 0.0f;
    }
}

static __device__ __forceinline__ void tile_zero(float *dst, int n)
{
    for (int e = threadIdx.x; e < n; e += ATTN_THREADS)
        dst[e] = 0.0f;
}

/* The shape's tile sizes, as ints (shared-memory indices are small). */
struct block_tiles {
    int D, BQ, BK, ld;
};

static __device__ __forceinline__ block_tiles block_tiles_for(int D)
{
    const attn_tiles t = attn_tiles_for(D);
    block_tiles b = {D, (int)t.bq, (int)t.bk, (int)attn_kv_ld(D)};
    return b;
}

/* ------------------------------------------------------------------------- */
/* Forward                                                                    */

/* The spans of the block's fixed rows [row0, row0 + n) (attn_row_span) into shared memory, once per
 * block: the keys each query of the tile sees, or with of_key the queries that see each key. */
static __device__ __forceinline__ void block_spans(int64_t *first, int64_t *end, const usp_attention_shape &s,
                                                   int64_t b, int64_t row0, int n, int of_key)
{
    for (int r = threadIdx.x; r < n; r += ATTN_THREADS)
        attn_row_span(&s, b, row0 + r, of_key, &first[r], &end[r]);
}

/* S [BQ, BK] = scale Q K^T for visible entries of the tile pair, -inf elsewhere: in a partial pair,
 * key k0 + j counts for query i when it lies in the query's span [kf[i], ke[i]) (block_spans). */
static __device__ __forceinline__ void forward_scores(const usp_attention_shape &s, const block_tiles &T,
                                                      const float *Qs, const float *Ks, float *Ss, const int64_t *kf,
                                                      const int64_t *ke, int bq, int64_t k0, int bk,
                                                      attn_visibility vis)
{
    for (int e = threadIdx.x; e < T.BQ * T.BK; e += ATTN_THREADS) {
        const int i = e / T.BK, j = e % T.BK;
        const bool seen =
            i < bq && j < bk && (vis == ATTN_TILE_VISIBLE || (k0 + j >= kf[i] && k0 + j < ke[i]));
        Ss[e] = seen ? s.scale * attn_dot(Qs + i * T.D, Ks + j * T.ld, T.D) : -INFINITY;
    }
}

/* The online-softmax step of each row (attn_softmax_rescale): one warp per row,
 * lanes over keys; S becomes P, and alpha_i is kept for forward_accumulate. */
static __device__ __forceinline__ void forward_softmax_rows(const block_tiles &T, float *Ss, float *ms, float *ls,
                                                            float *alphas, int bq, int bk)
{
    const int lane = threadIdx.x % 32;
    for (int i = threadIdx.x / 32; i < bq; i += ATTN_WARPS) {
        float *row = Ss + i * T.BK;
        float mx = -INFINITY;
        for (int j = lane; j < bk; j += 32)
            mx = fmaxf(mx, row[j]);
        const float m_old = ms[i], m_new = fmaxf(m_old, warp_max(mx));
        float sum = 0.0f;
        for (int j = lane; j < bk; j += 32) {
            const float p = attn_softmax_prob(row[j], m_new);
            row[j] = p;
            sum += p;
        }
        sum = warp_sum(sum); /* every lane has read ms[i] and ls[i] before lane 0 writes them */
        if (lane == 0) {
            const float alpha = attn_softmax_rescale(m_old, m_new);
            ls[i] = alpha * ls[i] + sum;
            ms[i] = m_new;
            alphas[i] = alpha;
        }
    }
}

/* O [bq, D] = alpha O + P V, each element's sum over keys in key order. */
static __device__ __forceinline__ void forward_accumulate(const block_tiles &T, const float *Ss, const float *Vs,
                                                          const float *alphas, float *Os, int bq, int bk)
{
    for (int e = threadIdx.x; e < bq * T.D; e += ATTN_THREADS) {
        const int i = e / T.D, d = e % T.D;
        const float *p = Ss + i * T.BK;
        float acc = alphas[i] * Os[e];
        for (int j = 0; j < bk; j++)
            acc += p[j] * Vs[j * T.D + d];
        Os[e] = acc;
    }
}

/* One block: query tile of (batch, head) given by attn_block_task, last tiles first. */
template <int DT>
__global__ void __launch_bounds__(ATTN_THREADS)
    attn_forward_kernel(const usp_attention_shape s, const cuda_array q, const cuda_array k, const cuda_array v,
                        cuda_array o, float *lse)
{
    extern __shared__ float smem[];
    __shared__ int64_t span_first[ATTN_MAX_TILE], span_end[ATTN_MAX_TILE]; /* the keys each query row sees */
    const block_tiles T = block_tiles_for(DT > 0 ? DT : (int)s.head_dim);
    const attn_forward_smem L = attn_forward_smem_layout(T.D);
    float *Qs = smem + L.q, *Ks = smem + L.k, *Vs = smem + L.v, *Ss = smem + L.s, *Os = smem + L.o;
    float *ms = smem + L.m, *ls = smem + L.l, *alphas = smem + L.alpha;

    const attn_task task = attn_block_task(blockIdx.x, attn_n_tiles(s.n_q, T.BQ), s.batch * s.n_heads, 1);
    const int64_t b = task.row / s.n_heads, h = task.row % s.n_heads, g = attn_kv_head(&s, h);
    const int64_t q0 = task.tile * T.BQ;
    const int bq = (int)attn_tile_len(s.n_q, T.BQ, task.tile);

    tile_load(Qs, T.D, q, attn_q_index(&s, b, q0, h, 0), s.n_heads * T.D, bq, T.BQ, T.D);
    block_spans(span_first, span_end, s, b, q0, bq, 0);
    tile_zero(Os, T.BQ * T.D);
    for (int i = threadIdx.x; i < T.BQ; i += ATTN_THREADS) {
        ms[i] = -INFINITY;
        ls[i] = 0.0f;
    }
    const attn_tile_range kr = attn_kv_tiles(&s, b, q0, bq, T.BK); /* the keys some query of the tile sees */
    for (int64_t kt = kr.begin; kt < kr.end; kt++) {
        const int64_t k0 = kt * T.BK;
        const int bk = (int)attn_tile_len(s.n_kv, T.BK, kt);
        const attn_visibility vis = attn_tile_visibility(&s, b, q0, bq, k0, bk);
        if (vis == ATTN_TILE_MASKED) /* the same for the whole block */
            continue;
        __syncthreads(); /* the previous tile's K, V and P are no longer read */
        tile_load(Ks, T.ld, k, attn_kv_index(&s, b, k0, g, 0), s.n_kv_heads * T.D, bk, T.BK, T.D);
        tile_load(Vs, T.D, v, attn_kv_index(&s, b, k0, g, 0), s.n_kv_heads * T.D, bk, T.BK, T.D);
        __syncthreads();
        forward_scores(s, T, Qs, Ks, Ss, span_first, span_end, bq, k0, bk, vis);
        __syncthreads();
        forward_softmax_rows(T, Ss, ms, ls, alphas, bq, bk);
        __syncthreads();
        forward_accumulate(T, Ss, Vs, alphas, Os, bq, bk);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < bq * T.D; e += ATTN_THREADS) {
        const int i = e / T.D, d = e % T.D;
        cuda_store(o, attn_q_index(&s, b, q0 + i, h, d), Os[e] * attn_softmax_inv_sum(ls[i]));
    }
    for (int i = threadIdx.x; i < bq; i += ATTN_THREADS)
        lse[attn_row_index(&s, b, h, q0 + i)] = attn_softmax_lse(ms[i], ls[i]);
}

/* ------------------------------------------------------------------------- */
/* Backward                                                                   */

/* delta_i = dO_i . O_i for every query row, one warp per row (rows in q's layout order). */
__global__ void __launch_bounds__(ATTN_THREADS)
    attn_delta_kernel(const usp_attention_shape s, const cuda_array o, const cuda_array d_o, float *delta)
{
    const int lane = threadIdx.x % 32;
    const int64_t rows = s.batch * s.n_q * s.n_heads, D = s.head_dim;
    const int64_t first = ((int64_t)blockIdx.x * ATTN_THREADS + threadIdx.x) / 32;
    for (int64_t r = first; r < rows; r += (int64_t)gridDim.x * ATTN_WARPS) { /* r is the same for the warp */
        float part = 0.0f;
        for (int64_t d = lane; d < D; d += 32)
            part += cuda_load(d_o, r * D + d) * cuda_load(o, r * D + d);
        part = warp_sum(part);
        if (lane == 0) {
            const int64_t b = r / (s.n_q * s.n_heads), i = (r / s.n_heads) % s.n_q, h = r % s.n_heads;
            delta[attn_row_index(&s, b, h, i)] = part;
        }
    }
}

/* P [BQ, BK] (when Ps is not NULL) and dS [BQ, BK] of the tile pair, 0 where masked or
 * past the tile (attn_backward_prob, attn_backward_dscore). In a partial pair, query q0 + i
 * and key k0 + j meet when the key lies in the query's span [sf[i], se[i]), or with of_key
 * (the dK/dV kernel, whose keys are fixed) the query in the key's span [sf[j], se[j]). */
static __device__ __forceinline__ void backward_probs(const usp_attention_shape &s, const block_tiles &T,
                                                      const float *Qs, const float *dOs, const float *Ks,
                                                      const float *Vs, const float *lses, const float *deltas,
                                                      float *Ps, float *dSs, const int64_t *sf, const int64_t *se,
                                                      int of_key, int64_t q0, int bq, int64_t k0, int bk,
                                                      attn_visibility vis)
{
    for (int e = threadIdx.x; e < T.BQ * T.BK; e += ATTN_THREADS) {
        const int i = e / T.BK, j = e % T.BK, r = of_key ? j : i;
        const int64_t x = of_key ? q0 + i : k0 + j;
        float p = 0.0f, ds = 0.0f;
        if (i < bq && j < bk && (vis == ATTN_TILE_VISIBLE || (x >= sf[r] && x < se[r]))) {
            p = attn_backward_prob(s.scale * attn_dot(Qs + i * T.D, Ks + j * T.ld, T.D), lses[i]);
            ds = attn_backward_dscore(p, attn_dot(dOs + i * T.D, Vs + j * T.ld, T.D), deltas[i]);
        }
        if (Ps)
            Ps[e] = p;
        dSs[e] = ds;
    }
}

/* lse and delta of queries [q0, q0 + bq) into shared memory (rows past bq: no key, 0). */
static __device__ __forceinline__ void backward_row_stats(const usp_attention_shape &s, const block_tiles &T,
                                                          const float *lse, const float *delta, float *lses,
                                                          float *deltas, int64_t b, int64_t h, int64_t q0, int bq)
{
    for (int i = threadIdx.x; i < T.BQ; i += ATTN_THREADS) {
        lses[i] = i < bq ? lse[attn_row_index(&s, b, h, q0 + i)] : -INFINITY;
        deltas[i] = i < bq ? delta[attn_row_index(&s, b, h, q0 + i)] : 0.0f;
    }
}

/* dst[e] = (accumulate ? dst[e] : 0) + factor acc[e] for `rows` rows of one head. */
static __device__ __forceinline__ void rows_store(cuda_array dst, int64_t first, int64_t stride, const float *acc,
                                                  float factor, int rows, int D, int accumulate)
{
    for (int e = threadIdx.x; e < rows * D; e += ATTN_THREADS) {
        const int r = e / D, d = e % D;
        const int64_t idx = first + (int64_t)r * stride + d;
        const float prev = accumulate ? cuda_load(dst, idx) : 0.0f;
        cuda_store(dst, idx, prev + factor * acc[e]);
    }
}

/* One block: key tile of (batch, kv head); query heads of the group in order,
 * then query tiles in order: dV += P^T dO, dK += dS^T Q, then dK *= scale. */
template <int DT>
__global__ void __launch_bounds__(ATTN_THREADS)
    attn_dkdv_kernel(const usp_attention_shape s, const cuda_array q, const cuda_array k, const cuda_array v,
                     const float *lse, const float *delta, const cuda_array d_o, cuda_array dk, cuda_array dv,
                     int accumulate)
{
    extern __shared__ float smem[];
    __shared__ int64_t span_first[ATTN_MAX_TILE], span_end[ATTN_MAX_TILE]; /* the queries that see each key */
    const block_tiles T = block_tiles_for(DT > 0 ? DT : (int)s.head_dim);
    const attn_backward_smem L = attn_backward_smem_layout(T.D, 1);
    float *Qs = smem + L.q, *dOs = smem + L.d_o, *Ks = smem + L.k, *Vs = smem + L.v, *Ps = smem + L.p;
    float *dSs = smem + L.ds, *dKs = smem + L.acc_a, *dVs = smem + L.acc_b, *lses = smem + L.lse;
    float *deltas = smem + L.delta;

    const attn_task task = attn_block_task(blockIdx.x, attn_n_tiles(s.n_kv, T.BK), s.batch * s.n_kv_heads, 0);
    const int64_t b = task.row / s.n_kv_heads, g = task.row % s.n_kv_heads;
    const int64_t k0 = task.tile * T.BK, group = s.n_heads / s.n_kv_heads;
    const int bk = (int)attn_tile_len(s.n_kv, T.BK, task.tile);
    const int64_t kv_first = attn_kv_index(&s, b, k0, g, 0), kv_stride = s.n_kv_heads * T.D;

    tile_load(Ks, T.ld, k, kv_first, kv_stride, bk, T.BK, T.D);
    tile_load(Vs, T.ld, v, kv_first, kv_stride, bk, T.BK, T.D);
    tile_zero(dKs, T.BK * T.D);
    tile_zero(dVs, T.BK * T.D);
    block_spans(span_first, span_end, s, b, k0, bk, 1);
    const attn_tile_range qr = attn_q_tiles(&s, b, k0, bk, T.BQ); /* the queries that see some key of the tile */
    for (int64_t h = g * group; h < (g + 1) * group; h++)
        for (int64_t qt = qr.begin; qt < qr.end; qt++) {
            const int64_t q0 = qt * T.BQ;
            const int bq = (int)attn_tile_len(s.n_q, T.BQ, qt);
            const attn_visibility vis = attn_tile_visibility(&s, b, q0, bq, k0, bk);
            if (vis == ATTN_TILE_MASKED)
                continue;
            __syncthreads(); /* the previous tile's Q, dO, P, dS are no longer read */
            tile_load(Qs, T.D, q, attn_q_index(&s, b, q0, h, 0), s.n_heads * T.D, bq, T.BQ, T.D);
            tile_load(dOs, T.D, d_o, attn_q_index(&s, b, q0, h, 0), s.n_heads * T.D, bq, T.BQ, T.D);
            backward_row_stats(s, T, lse, delta, lses, deltas, b, h, q0, bq);
            __syncthreads();
            backward_probs(s, T, Qs, dOs, Ks, Vs, lses, deltas, Ps, dSs, span_first, span_end, 1, q0, bq, k0, bk,
                           vis);
            __syncthreads();
            for (int e = threadIdx.x; e < bk * T.D; e += ATTN_THREADS) {
                const int j = e / T.D, d = e % T.D;
                float av = dVs[e], ak = dKs[e];
                for (int i = 0; i < bq; i++) {
                    av += Ps[i * T.BK + j] * dOs[i * T.D + d];
                    ak += dSs[i * T.BK + j] * Qs[i * T.D + d];
                }
                dVs[e] = av;
                dKs[e] = ak;
            }
        }
    __syncthreads();
    rows_store(dk, kv_first, kv_stride, dKs, s.scale, bk, T.D, accumulate);
    rows_store(dv, kv_first, kv_stride, dVs, 1.0f, bk, T.D, accumulate);
}

/* One block: query tile of (batch, head), key tiles in order: dQ += dS K, then dQ *= scale. */
template <int DT>
__global__ void __launch_bounds__(ATTN_THREADS)
    attn_dq_kernel(const usp_attention_shape s, const cuda_array q, const cuda_array k, const cuda_array v,
                   const float *lse, const float *delta, const cuda_array d_o, cuda_array dq, int accumulate)
{
    extern __shared__ float smem[];
    __shared__ int64_t span_first[ATTN_MAX_TILE], span_end[ATTN_MAX_TILE]; /* the keys each query row sees */
    const block_tiles T = block_tiles_for(DT > 0 ? DT : (int)s.head_dim);
    const attn_backward_smem L = attn_backward_smem_layout(T.D, 0);
    float *Qs = smem + L.q, *dOs = smem + L.d_o, *Ks = smem + L.k, *Vs = smem + L.v, *dSs = smem + L.ds;
    float *dQs = smem + L.acc_a, *lses = smem + L.lse, *deltas = smem + L.delta;

    const attn_task task = attn_block_task(blockIdx.x, attn_n_tiles(s.n_q, T.BQ), s.batch * s.n_heads, 1);
    const int64_t b = task.row / s.n_heads, h = task.row % s.n_heads, g = attn_kv_head(&s, h);
    const int64_t q0 = task.tile * T.BQ;
    const int bq = (int)attn_tile_len(s.n_q, T.BQ, task.tile);
    const int64_t q_first = attn_q_index(&s, b, q0, h, 0), q_stride = s.n_heads * T.D;

    tile_load(Qs, T.D, q, q_first, q_stride, bq, T.BQ, T.D);
    tile_load(dOs, T.D, d_o, q_first, q_stride, bq, T.BQ, T.D);
    backward_row_stats(s, T, lse, delta, lses, deltas, b, h, q0, bq);
    block_spans(span_first, span_end, s, b, q0, bq, 0);
    tile_zero(dQs, T.BQ * T.D);
    const attn_tile_range kr = attn_kv_tiles(&s, b, q0, bq, T.BK);
    for (int64_t kt = kr.begin; kt < kr.end; kt++) {
        const int64_t k0 = kt * T.BK;
        const int bk = (int)attn_tile_len(s.n_kv, T.BK, kt);
        const attn_visibility vis = attn_tile_visibility(&s, b, q0, bq, k0, bk);
        if (vis == ATTN_TILE_MASKED)
            continue;
        __syncthreads(); /* the previous tile's K, V, dS are no longer read */
        tile_load(Ks, T.ld, k, attn_kv_index(&s, b, k0, g, 0), s.n_kv_heads * T.D, bk, T.BK, T.D);
        tile_load(Vs, T.ld, v, attn_kv_index(&s, b, k0, g, 0), s.n_kv_heads * T.D, bk, T.BK, T.D);
        __syncthreads();
        backward_probs(s, T, Qs, dOs, Ks, Vs, lses, deltas, NULL, dSs, span_first, span_end, 0, q0, bq, k0, bk,
                       vis);
        __syncthreads();
        for (int e = threadIdx.x; e < bq * T.D; e += ATTN_THREADS) {
            const int i = e / T.D, d = e % T.D;
            float acc = dQs[e];
            for (int j = 0; j < bk; j++)
                acc += dSs[i * T.BK + j] * Ks[j * T.ld + d];
            dQs[e] = acc;
        }
    }
    __syncthreads();
    rows_store(dq, q_first, q_stride, dQs, s.scale, bq, T.D, accumulate);
}

/* ------------------------------------------------------------------------- */
/* Merge                                                                      */

/* One warp per (row i, head h): attn_merge_weigh, then o's D elements. */
__global__ void __launch_bounds__(ATTN_THREADS)
    attn_merge_kernel(cuda_array o, float *lse, const cuda_array o_part, const float *lse_part, int64_t n,
                      int64_t heads, int64_t D)
{
    const int lane = threadIdx.x % 32;
    const int64_t first = ((int64_t)blockIdx.x * ATTN_THREADS + threadIdx.x) / 32;
    for (int64_t r = first; r < n * heads; r += (int64_t)gridDim.x * ATTN_WARPS) {
        const int64_t i = r / heads, h = r % heads;
        const attn_merge_weights w = attn_merge_weigh(lse[h * n + i], lse_part[h * n + i]);
        if (w.skip) /* the same for the warp */
            continue;
        for (int64_t d = lane; d < D; d += 32) /* o [n, H, D]: row (i, h) starts at r * D */
            cuda_store(o, r * D + d, (w.wa * cuda_load(o, r * D + d) + w.wb * cuda_load(o_part, r * D + d)) / w.sum);
        __syncwarp(); /* every lane has read lse[h * n + i] */
        if (lane == 0)
            lse[h * n + i] = w.lse;
    }
}

/* ------------------------------------------------------------------------- */
/* Launchers                                                                  */

/* USP_ERR_CONFIG naming the shape when the kernels cannot take it. */
static usp_status attention_check(const usp_attention_shape *s, const char *op)
{
    const char *why = attn_shape_problem(s);
    if (!why)
        return USP_OK;
    return usp_error(USP_ERR_CONFIG,
                     "cuda attention %s: head_dim %lld, %lld heads over %lld kv heads, batch %lld, n_q %lld, n_kv %lld: %s",
                     op, (long long)s->head_dim, (long long)s->n_heads, (long long)s->n_kv_heads,
                     (long long)s->batch, (long long)s->n_q, (long long)s->n_kv, why);
}

/* Lets `kernel` use `bytes` of dynamic shared memory (over the default 48 KiB), then checks nothing failed. */
template <typename Kernel>
static usp_status allow_smem(Kernel kernel, size_t bytes, const char *name)
{
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e == cudaSuccess)
        return USP_OK;
    (void)cudaGetLastError(); /* the error is reported here, not by the next launch check */
    return usp_error(USP_ERR_RUNTIME, "cuda backend: %s cannot have %zu bytes of shared memory: %s", name, bytes,
                     cudaGetErrorString(e));
}

size_t cuda_attention_workspace_bytes(const usp_attention_shape *s)
{
    return attn_shape_problem(s) ? 0 : attn_workspace_bytes(s);
}

template <int DT>
static usp_status forward_launch(const usp_attention_shape *s, cuda_array q, cuda_array k, cuda_array v,
                                 cuda_array o, float *lse, cudaStream_t stream)
{
    const size_t bytes = (size_t)attn_forward_smem_layout(s->head_dim).floats * sizeof(float);
    USP_CHECK(allow_smem(attn_forward_kernel<DT>, bytes, "attn_forward_kernel"));
    attn_forward_kernel<DT><<<(unsigned)attn_q_grid(s), ATTN_THREADS, bytes, stream>>>(*s, q, k, v, o, lse);
    return cuda_launched("attn_forward_kernel");
}

usp_status cuda_attention_scalar_forward(const usp_attention_shape *s, cuda_array q, cuda_array k, cuda_array v,
                                  cuda_array o, float *lse, void *workspace, cudaStream_t stream)
{
    (void)workspace; /* the forward keeps its state in shared memory */
    USP_CHECK(attention_check(s, "forward"));
    if (attn_q_grid(s) == 0)
        return USP_OK;
    switch (s->head_dim) {
    case 64: return forward_launch<64>(s, q, k, v, o, lse, stream);
    case 128: return forward_launch<128>(s, q, k, v, o, lse, stream);
    default: return forward_launch<0>(s, q, k, v, o, lse, stream);
    }
}

template <int DT>
static usp_status backward_launch(const usp_attention_shape *s, cuda_array q, cuda_array k, cuda_array v,
                                  const float *lse, const float *delta, cuda_array d_o, cuda_array dq, cuda_array dk,
                                  cuda_array dv, int accumulate, cudaStream_t stream)
{
    if (attn_kv_grid(s) > 0) { /* also when n_q = 0: dk, dv are then zeroed (or kept) */
        const size_t bytes = (size_t)attn_backward_smem_layout(s->head_dim, 1).floats * sizeof(float);
        USP_CHECK(allow_smem(attn_dkdv_kernel<DT>, bytes, "attn_dkdv_kernel"));
        attn_dkdv_kernel<DT><<<(unsigned)attn_kv_grid(s), ATTN_THREADS, bytes, stream>>>(*s, q, k, v, lse, delta,
                                                                                           d_o, dk, dv, accumulate);
        USP_CHECK(cuda_launched("attn_dkdv_kernel"));
    }
    if (attn_q_grid(s) > 0) {
        const size_t bytes = (size_t)attn_backward_smem_layout(s->head_dim, 0).floats * sizeof(float);
        USP_CHECK(allow_smem(attn_dq_kernel<DT>, bytes, "attn_dq_kernel"));
        attn_dq_kernel<DT><<<(unsigned)attn_q_grid(s), ATTN_THREADS, bytes, stream>>>(*s, q, k, v, lse, delta, d_o,
                                                                                       dq, accumulate);
        USP_CHECK(cuda_launched("attn_dq_kernel"));
    }
    return USP_OK;
}

usp_status cuda_attention_scalar_backward(const usp_attention_shape *s, cuda_array q, cuda_array k, cuda_array v,
                                   cuda_array o, const float *lse, cuda_array d_o, cuda_array dq, cuda_array dk,
                                   cuda_array dv, int accumulate, void *workspace, cudaStream_t stream)
{
    USP_CHECK(attention_check(s, "backward"));
    const int64_t rows = s->batch * s->n_q * s->n_heads;
    float *delta = (float *)workspace; /* [B, H, Nq] */
    if (rows > 0) {
        if (!workspace)
            return usp_error(USP_ERR_CONFIG, "cuda attention backward: no workspace (%zu bytes needed, see "
                                             "cuda_attention_workspace_bytes)", attn_workspace_bytes(s));
        attn_delta_kernel<<<cuda_blocks_for(rows * 32, ATTN_THREADS), ATTN_THREADS, 0, stream>>>(*s, o, d_o, delta);
        USP_CHECK(cuda_launched("attn_delta_kernel"));
    }
    switch (s->head_dim) {
    case 64: return backward_launch<64>(s, q, k, v, lse, delta, d_o, dq, dk, dv, accumulate, stream);
    case 128: return backward_launch<128>(s, q, k, v, lse, delta, d_o, dq, dk, dv, accumulate, stream);
    default: return backward_launch<0>(s, q, k, v, lse, delta, d_o, dq, dk, dv, accumulate, stream);
    }
}

usp_status cuda_attention_merge(cuda_array o, float *lse, cuda_array o_part, const float *lse_part, int64_t n,
                                int64_t heads, int64_t head_dim, cudaStream_t stream)
{
    if (n <= 0 || heads <= 0 || head_dim <= 0)
        return USP_OK;
    attn_merge_kernel<<<cuda_blocks_for(n * heads * 32, ATTN_THREADS), ATTN_THREADS, 0, stream>>>(
        o, lse, o_part, lse_part, n, heads, head_dim);
    return cuda_launched("attn_merge_kernel");
}
