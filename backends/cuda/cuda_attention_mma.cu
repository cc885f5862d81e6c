/* FlashAttention-2 on the tensor cores: mma.sync.m16n8k16 with bf16 operands and fp32 accumulators,
 * ldmatrix from swizzled shared memory, cp.async tile loads (double-buffered K/V in the forward),
 * blocks the mask hides skipped (past the causal diagonal, outside a sliding window or a document:
 * core/ops/mask.h), GQA by index. CTAs of 4 warps over 64 x 64 tiles; a warp owns 16 rows. head_dim
 * 64 and 128 (template D); everything else runs the scalar kernels.
 *
 * Which lane holds which element, where each lane points ldmatrix, where a tile element sits in
 * shared memory, which blocks a CTA visits: all from cuda_mma_maps.h, the maps
 * tests/test_mma_maps.c checks against the PTX ISA and tests/mma_attention_emulation.c runs, on the
 * CPU, in these very loops (same blocks, same order of mma per accumulator) against the cpu
 * attention. This file adds only the instructions (inline PTX) and the synchronisation.
 *
 * Masks (core/ops/mask.h: causal, a sliding window, documents) reach the kernels through the maps
 * alone: a CTA visits the blocks its rows see (mma_attn_kv_blocks, mma_attn_q_blocks),
 * finds once the interval of columns each of its 64 rows counts (row_spans, into shared memory), and
 * for each block a lane turns its two rows' intervals into one register of bits, one per score
 * element (mma_attn_live_bits), tested on every element of every block. No mask arithmetic runs
 * between the products, and there is no branch between checked and unchecked blocks: either costs
 * registers the dK/dV kernel at head_dim 128 does not have (ptxas spilled), while the test is one
 * shift and a select per element.
 *
 * Kernels:
 *   forward  a CTA per (query block, batch * head): Q tile once, K/V tiles in two stages (the next
 *            block's cp.async in flight while this one computes), S = Q K^T, online softmax in
 *            registers, P to bf16 A fragments, O += P V; o = O / l (bf16), lse = m + log l (fp32).
 *   dK/dV    a CTA per (key block, batch * kv head), over its group's query heads and the query
 *            blocks that see it: S^T = K Q^T, dP^T = V dO^T, dV += P^T dO, dK += dS^T Q.
 *   dQ       a CTA per (query block, batch * head), over key blocks in order: dQ += dS K.
 * delta_i = dO_i . O_i comes first (attn_delta_kernel of cuda_attention.cu). No atomics: every
 * output element is written by one CTA, in an order fixed by the shape.
 *
 * Not run on a GPU yet (no device in the session that wrote it): its speed and its agreement with
 * the scalar kernels are unmeasured, and the attention op does not call it. */
#include "backends/cuda/cuda_attention_mma.h"

#include <stdint.h>

#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/cuda_mma_maps.h"

#define MMA_THREADS (MMA_ATTN_WARPS * 32)
#define MMA_SBLOCKS (MMA_ATTN_BK / MMA_N) /* n8 blocks of a 64-wide score tile */
#define MMA_TILE_ROWS 64                  /* every tile: 64 queries or 64 keys */

static_assert(MMA_ATTN_BQ == MMA_TILE_ROWS && MMA_ATTN_BK == MMA_TILE_ROWS, "the kernels take 64 x 64 tiles");

typedef uint16_t bf16_bits;

/* The delta kernel of cuda_attention.cu (one warp per row, fp32 over the stored o and d_o). */
__global__ void attn_delta_kernel(const usp_attention_shape s, const cuda_array o, const cuda_array d_o, float *delta);

/* ------------------------------------------------------------------------- */
/* Instructions                                                               */

static __device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: r[i] is a piece of matrix i (cuda_mma_maps.h). */
template <bool TRANS>
static __device__ __forceinline__ void ldsm_x4(uint32_t r[4], const bf16_bits *p)
{
#if __CUDA_ARCH__ >= 800
    if (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(smem_addr(p)));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(smem_addr(p)));
#else
    __trap(); /* sm_80 and later only */
#endif
}

/* d += a b: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, b = (b0, b1). */
static __device__ __forceinline__ void mma_bf16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
#if __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    __trap();
#endif
}

/* 16 bytes global -> shared without registers; valid = 0 writes zeros (src-size 0) and reads nothing. */
static __device__ __forceinline__ void cp_async16(bf16_bits *dst, const bf16_bits *src, bool valid)
{
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
#else
    __trap();
#endif
}

static __device__ __forceinline__ void cp_async_commit()
{
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}

/* Waits until at most n of this thread's committed groups are in flight. */
template <int N>
static __device__ __forceinline__ void cp_async_wait()
{
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

/* Two floats as one bf16x2 register (lo in the low half: the lower column of a fragment pair). */
static __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&v);
}

static __device__ __forceinline__ bf16_bits to_bf16(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
static __device__ __forceinline__ float from_bf16(bf16_bits b) { return __bfloat162float(__ushort_as_bfloat16(b)); }

/* ------------------------------------------------------------------------- */
/* Tiles and warp-level products                                              */

/* cp.async of a [64][D] tile: rows [0, rows) from src, `stride` elements apart; zeros past rows. */
template <int D>
static __device__ __forceinline__ void tile_load(bf16_bits *tile, const bf16_bits *src, int64_t stride, int64_t rows)
{
    for (int c = threadIdx.x; c < MMA_TILE_ROWS * D / 8; c += MMA_THREADS) {
        const int r = c / (D / 8), col = (c % (D / 8)) * 8;
        const bool valid = r < rows;
        cp_async16(tile + mma_smem_offset(r, col, D), valid ? src + r * stride + col : src, valid);
    }
}

/* The 16 x 16 block at (row0, col0) of a swizzled [64][D] tile, read by ldmatrix as `KIND`. */
template <int D, mma_ld_kind KIND>
static __device__ __forceinline__ void load_block(uint32_t r[4], const bf16_bits *tile, int row0, int col0, int lane)
{
    const mma_rc p = mma_ldsm_addr(lane, KIND);
    ldsm_x4<KIND == MMA_LD_B_KN>(r, tile + mma_smem_offset(row0 + p.row, col0 + p.col, D));
}

/* acc0 += a b0, acc1 += a b1: the two B fragments (n8 blocks) one ldmatrix.x4 reads at (row0, col0). */
template <int D, mma_ld_kind KIND>
static __device__ __forceinline__ void mma_pair(float acc0[4], float acc1[4], const uint32_t a[4],
                                                const bf16_bits *tile, int row0, int col0, int lane)
{
    uint32_t b[4];
    load_block<D, KIND>(b, tile, row0, col0, lane);
    mma_bf16(acc0, a, b[0], b[1]);
    mma_bf16(acc1, a, b[2], b[3]);
}

/* acc = (rows 16 warp.. of a_tile) x b_tile^T over k = D; b_tile stored [n][k]. */
template <int D>
static __device__ __forceinline__ void scores(float acc[MMA_SBLOCKS][4], const bf16_bits *a_tile,
                                              const bf16_bits *b_tile, int warp, int lane)
{
#pragma unroll
    for (int nb = 0; nb < MMA_SBLOCKS; nb++) acc[nb][0] = acc[nb][1] = acc[nb][2] = acc[nb][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < D / MMA_K; ks++) {
        uint32_t a[4];
        load_block<D, MMA_LD_A>(a, a_tile, 16 * warp, 16 * ks, lane);
#pragma unroll
        for (int nb2 = 0; nb2 < MMA_SBLOCKS / 2; nb2++)
            mma_pair<D, MMA_LD_B_NK>(acc[2 * nb2], acc[2 * nb2 + 1], a, b_tile, 16 * nb2, 16 * ks, lane);
    }
}

/* acc += P x tile over k = 64, tile stored [k][n]: P's accumulators become bf16 A fragments. */
template <int D>
static __device__ __forceinline__ void accumulate_product(float acc[D / MMA_N][4], const float p[MMA_SBLOCKS][4],
                                                  const bf16_bits *tile, int lane)
{
#pragma unroll
    for (int ks2 = 0; ks2 < MMA_SBLOCKS / 2; ks2++) {
        uint32_t a[4];
#pragma unroll
        for (int r = 0; r < 4; r++)
            a[r] = pack_bf16(p[2 * ks2 + mma_a_from_c_tile(2 * r)][mma_a_from_c_elem(2 * r)],
                             p[2 * ks2 + mma_a_from_c_tile(2 * r + 1)][mma_a_from_c_elem(2 * r + 1)]);
#pragma unroll
        for (int db2 = 0; db2 < D / 16; db2++)
            mma_pair<D, MMA_LD_B_KN>(acc[2 * db2], acc[2 * db2 + 1], a, tile, 16 * ks2, 16 * db2, lane);
    }
}

/* Max (MAX) or sum over the quad of lanes holding one row. */
template <bool MAX>
static __device__ __forceinline__ float row_reduce(float x, int lane)
{
#pragma unroll
    for (int step = 0; step < MMA_ROW_STEPS; step++) {
        const float o = __shfl_sync(0xffffffffu, x, mma_row_partner(lane, step));
        x = MAX ? fmaxf(x, o) : x + o;
    }
    return x;
}

/* Accumulator rows (16 warp + row) times factor into dst rows (first, stride apart) below n_rows - row0,
 * as bf16, added to what is there when accumulate = 1. */
template <int D>
static __device__ __forceinline__ void rows_store(bf16_bits *dst, int64_t first, int64_t stride,
                                                  const float acc[D / MMA_N][4], int64_t row0, int64_t n_rows,
                                                  float factor, int accumulate, int warp, int lane)
{
#pragma unroll
    for (int db = 0; db < D / MMA_N; db++)
#pragma unroll
        for (int i = 0; i < MMA_C_ELEMS; i++) {
            const mma_rc p = mma_c_elem(lane, i);
            const int64_t r = 16 * warp + p.row;
            if (row0 + r >= n_rows) continue;
            bf16_bits *e = dst + first + r * stride + 8 * db + p.col;
            *e = to_bf16(factor * acc[db][i] + (accumulate ? from_bf16(*e) : 0.0f));
        }
}

/* ------------------------------------------------------------------------- */
/* Forward                                                                    */

/* K and V of key block kb of (b, g) into one stage. */
template <int D>
static __device__ __forceinline__ void kv_load(bf16_bits *Ks, bf16_bits *Vs, const usp_attention_shape &s,
                                               const bf16_bits *k, const bf16_bits *v, int64_t b, int64_t g,
                                               int64_t kb)
{
    const int64_t first = attn_kv_index(&s, b, kb * MMA_ATTN_BK, g, 0), rows = attn_tile_len(s.n_kv, MMA_ATTN_BK, kb);
    tile_load<D>(Ks, k + first, s.n_kv_heads * D, rows);
    tile_load<D>(Vs, v + first, s.n_kv_heads * D, rows);
}

/* The spans of rows [row0, row0 + 64) (attn_row_span: the columns each accumulator row counts) into
 * shared memory, once per CTA: read after the loop's first __syncthreads. Rows are queries and spans
 * keys, or with KEYS_ARE_ROWS the converse. */
template <bool KEYS_ARE_ROWS>
static __device__ __forceinline__ void row_spans(int64_t *first, int64_t *end, const usp_attention_shape &s,
                                                 int64_t b, int64_t row0)
{
    for (int r = threadIdx.x; r < MMA_TILE_ROWS; r += MMA_THREADS)
        attn_row_span(&s, b, row0 + r, KEYS_ARE_ROWS, &first[r], &end[r]);
}

/* mma_attn_live_bits of this lane in the block pair whose columns start at col0, from the spans of its
 * rows 16 warp + groupID (+ 8) in shared memory (row_spans). */
static __device__ __forceinline__ uint32_t live_bits(const int64_t *span_first, const int64_t *span_end, int64_t col0,
                                                     int warp, int lane)
{
    const int row = 16 * warp + mma_group_id(lane);
    int lo[2], hi[2];
    mma_attn_span_cols(span_first[row], span_end[row], col0, &lo[0], &hi[0]);
    mma_attn_span_cols(span_first[row + 8], span_end[row + 8], col0, &lo[1], &hi[1]);
    return mma_attn_live_bits(lane, lo, hi);
}

/* One key block of a warp: S, mask, online softmax (cuda_attention_tiles.h), O = alpha O + P V. */
template <int D>
static __device__ __forceinline__ void forward_step(float o[D / MMA_N][4], float m[2], float l[2],
                                                    const usp_attention_shape &s, const bf16_bits *Qs,
                                                    const bf16_bits *Ks, const bf16_bits *Vs, uint32_t live, int warp,
                                                    int lane)
{
    float sc[MMA_SBLOCKS][4], mx[2] = {-INFINITY, -INFINITY}, alpha[2];
    scores<D>(sc, Qs, Ks, warp, lane);
#pragma unroll
    for (int nb = 0; nb < MMA_SBLOCKS; nb++)
#pragma unroll
        for (int i = 0; i < MMA_C_ELEMS; i++) {
            float x = s.scale * sc[nb][i];
            if (!((live >> (4 * nb + i)) & 1u)) x = -INFINITY;
            sc[nb][i] = x;
            mx[i >> 1] = fmaxf(mx[i >> 1], x);
        }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float m_new = fmaxf(m[r], row_reduce<true>(mx[r], lane));
        alpha[r] = attn_softmax_rescale(m[r], m_new);
        m[r] = m_new;
        l[r] *= alpha[r];
    }
#pragma unroll
    for (int nb = 0; nb < MMA_SBLOCKS; nb++)
#pragma unroll
        for (int i = 0; i < MMA_C_ELEMS; i++) {
            sc[nb][i] = attn_softmax_prob(sc[nb][i], m[i >> 1]);
            l[i >> 1] += sc[nb][i]; /* fp32 P: the row sum is not rounded */
        }
#pragma unroll
    for (int db = 0; db < D / MMA_N; db++)
#pragma unroll
        for (int i = 0; i < MMA_C_ELEMS; i++) o[db][i] *= alpha[i >> 1];
    accumulate_product<D>(o, sc, Vs, lane);
}

/* Shared memory: Q [64][D], then two stages of K [64][D], V [64][D]. */
template <int D>
__global__ void __launch_bounds__(MMA_THREADS)
    mma_forward_kernel(const usp_attention_shape s, const bf16_bits *q, const bf16_bits *k, const bf16_bits *v,
                       bf16_bits *o, float *lse)
{
    extern __shared__ __align__(128) bf16_bits smem[];
    __shared__ int64_t span_first[MMA_TILE_ROWS], span_end[MMA_TILE_ROWS]; /* the keys each query row sees */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const attn_task task = attn_block_task(blockIdx.x, attn_n_tiles(s.n_q, MMA_ATTN_BQ), s.batch * s.n_heads, 1);
    const int64_t b = task.row / s.n_heads, h = task.row % s.n_heads, g = attn_kv_head(&s, h);
    const int64_t q0 = task.tile * MMA_ATTN_BQ;
    bf16_bits *Qs = smem, *stage0 = smem + MMA_TILE_ROWS * D; /* stage i at stage0 + 2 i 64 D */
    tile_load<D>(Qs, q + attn_q_index(&s, b, q0, h, 0), s.n_heads * D, attn_tile_len(s.n_q, MMA_ATTN_BQ, task.tile));
    row_spans<false>(span_first, span_end, s, b, q0);
    const mma_block_range kv = mma_attn_kv_blocks(&s, b, task.tile);
    if (kv.begin < kv.end) kv_load<D>(stage0, stage0 + MMA_TILE_ROWS * D, s, k, v, b, g, kv.begin);
    cp_async_commit();
    float acc[D / MMA_N][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int db = 0; db < D / MMA_N; db++) acc[db][0] = acc[db][1] = acc[db][2] = acc[db][3] = 0.0f;
    for (int64_t kb = kv.begin; kb < kv.end; kb++) {
        const int64_t parity = (kb - kv.begin) & 1; /* arithmetic, not an array of pointers: no stack frame */
        bf16_bits *Ks = stage0 + parity * 2 * MMA_TILE_ROWS * D, *next = stage0 + (1 - parity) * 2 * MMA_TILE_ROWS * D;
        if (kb + 1 < kv.end) kv_load<D>(next, next + MMA_TILE_ROWS * D, s, k, v, b, g, kb + 1);
        cp_async_commit(); /* possibly empty: the wait below then still leaves this block's group done */
        cp_async_wait<1>();
        __syncthreads();
        const uint32_t live = live_bits(span_first, span_end, kb * MMA_ATTN_BK, warp, lane);
        forward_step<D>(acc, m, l, s, Qs, Ks, Ks + MMA_TILE_ROWS * D, live, warp, lane);
        __syncthreads(); /* every warp is done with this stage before the next iteration refills it */
    }
    cp_async_wait<0>(); /* nothing left in flight when no block was visited */
#pragma unroll
    for (int r = 0; r < 2; r++) l[r] = row_reduce<false>(l[r], lane);
#pragma unroll
    for (int db = 0; db < D / MMA_N; db++)
#pragma unroll
        for (int i = 0; i < MMA_C_ELEMS; i++) acc[db][i] *= attn_softmax_inv_sum(l[i >> 1]);
    rows_store<D>(o, attn_q_index(&s, b, q0, h, 0), s.n_heads * D, acc, q0, s.n_q, 1.0f, 0, warp, lane);
    if (mma_thread_in_group(lane) == 0)
        for (int r = 0; r < 2; r++) {
            const int64_t row = q0 + 16 * warp + mma_group_id(lane) + 8 * r;
            if (row < s.n_q) lse[attn_row_index(&s, b, h, row)] = attn_softmax_lse(m[r], l[r]);
        }
}

/* ------------------------------------------------------------------------- */
/* Backward                                                                   */

/* lse and delta of queries [q0, q0 + 64) of (b, h) into shared memory; -inf and 0 past n_q. */
static __device__ __forceinline__ void row_stats(float *lses, float *deltas, const usp_attention_shape &s,
                                                 const float *lse, const float *delta, int64_t b, int64_t h,
                                                 int64_t q0)
{
    for (int i = threadIdx.x; i < MMA_TILE_ROWS; i += MMA_THREADS) {
        const bool in = q0 + i < s.n_q;
        lses[i] = in ? lse[attn_row_index(&s, b, h, q0 + i)] : -INFINITY;
        deltas[i] = in ? delta[attn_row_index(&s, b, h, q0 + i)] : 0.0f;
    }
}

/* S, dP accumulators -> P = e^(scale s - lse), dS = P (dP - delta); KEYS_ARE_ROWS for S^T. */
template <bool KEYS_ARE_ROWS>
static __device__ __forceinline__ void probs(float sp[MMA_SBLOCKS][4], float dsp[MMA_SBLOCKS][4],
                                             const usp_attention_shape &s, const float *lses, const float *deltas,
                                             uint32_t live, int warp, int lane)
{
#pragma unroll
    for (int nb = 0; nb < MMA_SBLOCKS; nb++)
#pragma unroll
        for (int i = 0; i < MMA_C_ELEMS; i++) {
            const mma_rc p = mma_c_elem(lane, i);
            const int c = 8 * nb + p.col, qi = KEYS_ARE_ROWS ? c : 16 * warp + p.row;
            const bool in = (live >> (4 * nb + i)) & 1u;
            const float prob = in ? attn_backward_prob(s.scale * sp[nb][i], lses[qi]) : 0.0f;
            dsp[nb][i] = in ? attn_backward_dscore(prob, dsp[nb][i], deltas[qi]) : 0.0f;
            sp[nb][i] = prob;
        }
}

/* Shared memory: K, V, Q, dO [64][D]. */
template <int D>
__global__ void __launch_bounds__(MMA_THREADS)
    mma_dkdv_kernel(const usp_attention_shape s, const bf16_bits *q, const bf16_bits *k, const bf16_bits *v,
                    const float *lse, const float *delta, const bf16_bits *d_o, bf16_bits *dk, bf16_bits *dv,
                    int accumulate)
{
    extern __shared__ __align__(128) bf16_bits smem[];
    __shared__ float lses[MMA_TILE_ROWS], deltas[MMA_TILE_ROWS];
    __shared__ int64_t span_first[MMA_TILE_ROWS], span_end[MMA_TILE_ROWS]; /* the queries that see each key row */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const attn_task task = attn_block_task(blockIdx.x, attn_n_tiles(s.n_kv, MMA_ATTN_BK), s.batch * s.n_kv_heads, 0);
    const int64_t b = task.row / s.n_kv_heads, g = task.row % s.n_kv_heads, k0 = task.tile * MMA_ATTN_BK;
    const int64_t kv_first = attn_kv_index(&s, b, k0, g, 0), kv_stride = s.n_kv_heads * D;
    bf16_bits *Ks = smem, *Vs = Ks + MMA_TILE_ROWS * D, *Qs = Vs + MMA_TILE_ROWS * D, *dOs = Qs + MMA_TILE_ROWS * D;
    kv_load<D>(Ks, Vs, s, k, v, b, g, task.tile);
    row_spans<true>(span_first, span_end, s, b, k0);
    float dk_acc[D / MMA_N][4], dv_acc[D / MMA_N][4];
#pragma unroll
    for (int db = 0; db < D / MMA_N; db++)
#pragma unroll
        for (int i = 0; i < 4; i++) dk_acc[db][i] = dv_acc[db][i] = 0.0f;
    const mma_block_range qr = mma_attn_q_blocks(&s, b, task.tile);
    const int64_t h_first = mma_attn_first_q_head(&s, g), h_end = h_first + s.n_heads / s.n_kv_heads;
    for (int64_t h = h_first; h < h_end; h++)
        for (int64_t qb = qr.begin; qb < qr.end; qb++) {
            const int64_t q0 = qb * MMA_ATTN_BQ, bq = attn_tile_len(s.n_q, MMA_ATTN_BQ, qb);
            __syncthreads(); /* the previous block's Q, dO, lse, delta are no longer read */
            tile_load<D>(Qs, q + attn_q_index(&s, b, q0, h, 0), s.n_heads * D, bq);
            tile_load<D>(dOs, d_o + attn_q_index(&s, b, q0, h, 0), s.n_heads * D, bq);
            cp_async_commit();
            row_stats(lses, deltas, s, lse, delta, b, h, q0);
            cp_async_wait<0>();
            __syncthreads();
            const uint32_t live = live_bits(span_first, span_end, q0, warp, lane);
            float st[MMA_SBLOCKS][4], dpt[MMA_SBLOCKS][4];
            scores<D>(st, Ks, Qs, warp, lane);  /* S^T = K Q^T */
            scores<D>(dpt, Vs, dOs, warp, lane); /* dP^T = V dO^T */
            probs<true>(st, dpt, s, lses, deltas, live, warp, lane);
            accumulate_product<D>(dv_acc, st, dOs, lane); /* dV += P^T dO */
            accumulate_product<D>(dk_acc, dpt, Qs, lane); /* dK += dS^T Q */
        }
    cp_async_wait<0>();
    rows_store<D>(dk, kv_first, kv_stride, dk_acc, k0, s.n_kv, s.scale, accumulate, warp, lane);
    rows_store<D>(dv, kv_first, kv_stride, dv_acc, k0, s.n_kv, 1.0f, accumulate, warp, lane);
}

/* Shared memory: Q, dO, K, V [64][D]. */
template <int D>
__global__ void __launch_bounds__(MMA_THREADS)
    mma_dq_kernel(const usp_attention_shape s, const bf16_bits *q, const bf16_bits *k, const bf16_bits *v,
                  const float *lse, const float *delta, const bf16_bits *d_o, bf16_bits *dq, int accumulate)
{
    extern __shared__ __align__(128) bf16_bits smem[];
    __shared__ float lses[MMA_TILE_ROWS], deltas[MMA_TILE_ROWS];
    __shared__ int64_t span_first[MMA_TILE_ROWS], span_end[MMA_TILE_ROWS]; /* the keys each query row sees */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const attn_task task = attn_block_task(blockIdx.x, attn_n_tiles(s.n_q, MMA_ATTN_BQ), s.batch * s.n_heads, 1);
    const int64_t b = task.row / s.n_heads, h = task.row % s.n_heads, g = attn_kv_head(&s, h);
    const int64_t q0 = task.tile * MMA_ATTN_BQ, q_first = attn_q_index(&s, b, q0, h, 0), q_stride = s.n_heads * D;
    bf16_bits *Qs = smem, *dOs = Qs + MMA_TILE_ROWS * D, *Ks = dOs + MMA_TILE_ROWS * D, *Vs = Ks + MMA_TILE_ROWS * D;
    tile_load<D>(Qs, q + q_first, q_stride, attn_tile_len(s.n_q, MMA_ATTN_BQ, task.tile));
    tile_load<D>(dOs, d_o + q_first, q_stride, attn_tile_len(s.n_q, MMA_ATTN_BQ, task.tile));
    row_stats(lses, deltas, s, lse, delta, b, h, q0);
    row_spans<false>(span_first, span_end, s, b, q0);
    float dq_acc[D / MMA_N][4];
#pragma unroll
    for (int db = 0; db < D / MMA_N; db++) dq_acc[db][0] = dq_acc[db][1] = dq_acc[db][2] = dq_acc[db][3] = 0.0f;
    const mma_block_range kv = mma_attn_kv_blocks(&s, b, task.tile);
    for (int64_t kb = kv.begin; kb < kv.end; kb++) {
        __syncthreads(); /* the previous block's K, V are no longer read */
        kv_load<D>(Ks, Vs, s, k, v, b, g, kb);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
        const uint32_t live = live_bits(span_first, span_end, kb * MMA_ATTN_BK, warp, lane);
        float sc[MMA_SBLOCKS][4], dp[MMA_SBLOCKS][4];
        scores<D>(sc, Qs, Ks, warp, lane);  /* S = Q K^T */
        scores<D>(dp, dOs, Vs, warp, lane); /* dP = dO V^T */
        probs<false>(sc, dp, s, lses, deltas, live, warp, lane);
        accumulate_product<D>(dq_acc, dp, Ks, lane); /* dQ += dS K */
    }
    rows_store<D>(dq, q_first, q_stride, dq_acc, q0, s.n_q, s.scale, accumulate, warp, lane);
}

/* ------------------------------------------------------------------------- */
/* Launchers                                                                  */

extern "C" attn_kernel cuda_attention_kernel_for(const usp_attention_shape *s, const cuda_array *arrays, int n,
                                                 const char **why)
{
    usp_dtype dtypes[8];
    uintptr_t addresses[8];
    if (n > 8) {
        *why = "more arrays than an attention call has";
        return ATTN_KERNEL_SCALAR;
    }
    for (int i = 0; i < n; i++) {
        dtypes[i] = arrays[i].dtype;
        addresses[i] = (uintptr_t)arrays[i].data;
    }
    return attn_kernel_for(s, dtypes, addresses, n, why);
}

extern "C" const char *cuda_attention_mma_problem(const usp_attention_shape *s, const cuda_array *arrays,
                                                  int n_arrays)
{
    const char *why;
    if (cuda_attention_kernel_for(s, arrays, n_arrays, &why) == ATTN_KERNEL_MMA) return NULL;
    if (why != NULL) return why;
    why = attn_shape_problem(s);
    return why != NULL ? why : "the tensor-core attention takes bf16 arrays; fp32 runs the scalar kernel";
}

/* Lets `kernel` use `bytes` of dynamic shared memory (over the default 48 KiB). */
template <typename Kernel>
static usp_status smem_opt_in(Kernel kernel, size_t bytes, const char *name)
{
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return usp_error(USP_ERR_RUNTIME, "cuda backend: %s: %zu bytes of shared memory refused: %s", name, bytes,
                         cudaGetErrorString(e));
    }
    return USP_OK;
}

static usp_status mma_check(const usp_attention_shape *s, const cuda_array *arrays, int n, const char *op)
{
    const char *why = cuda_attention_mma_problem(s, arrays, n);
    return why ? usp_error(USP_ERR_CONFIG, "cuda tensor-core attention %s (head_dim %lld): %s", op,
                           (long long)s->head_dim, why)
               : USP_OK;
}

template <int D>
static usp_status forward_launch(const usp_attention_shape *s, const bf16_bits *q, const bf16_bits *k,
                                 const bf16_bits *v, bf16_bits *o, float *lse, cudaStream_t stream)
{
    const size_t bytes = (size_t)5 * MMA_TILE_ROWS * D * sizeof(bf16_bits);
    const int64_t grid = attn_n_tiles(s->n_q, MMA_ATTN_BQ) * s->batch * s->n_heads;
    if (grid == 0) return USP_OK;
    USP_CHECK(smem_opt_in(mma_forward_kernel<D>, bytes, "mma_forward_kernel"));
    mma_forward_kernel<D><<<(unsigned)grid, MMA_THREADS, bytes, stream>>>(*s, q, k, v, o, lse);
    return cuda_launched("mma_forward_kernel");
}

extern "C" usp_status cuda_attention_mma_forward(const usp_attention_shape *s, cuda_array q, cuda_array k,
                                                 cuda_array v, cuda_array o, float *lse, cudaStream_t stream)
{
    const cuda_array arrays[] = {q, k, v, o};
    USP_CHECK(mma_check(s, arrays, 4, "forward"));
    const bf16_bits *qp = (const bf16_bits *)q.data, *kp = (const bf16_bits *)k.data, *vp = (const bf16_bits *)v.data;
    return s->head_dim == 64 ? forward_launch<64>(s, qp, kp, vp, (bf16_bits *)o.data, lse, stream)
                             : forward_launch<128>(s, qp, kp, vp, (bf16_bits *)o.data, lse, stream);
}

template <int D>
static usp_status backward_launch(const usp_attention_shape *s, const bf16_bits *q, const bf16_bits *k,
                                  const bf16_bits *v, const float *lse, const float *delta, const bf16_bits *d_o,
                                  bf16_bits *dq, bf16_bits *dk, bf16_bits *dv, int accumulate, cudaStream_t stream)
{
    const size_t bytes = (size_t)4 * MMA_TILE_ROWS * D * sizeof(bf16_bits);
    const int64_t kv_grid = attn_n_tiles(s->n_kv, MMA_ATTN_BK) * s->batch * s->n_kv_heads;
    const int64_t q_grid = attn_n_tiles(s->n_q, MMA_ATTN_BQ) * s->batch * s->n_heads;
    if (kv_grid > 0) {
        USP_CHECK(smem_opt_in(mma_dkdv_kernel<D>, bytes, "mma_dkdv_kernel"));
        mma_dkdv_kernel<D><<<(unsigned)kv_grid, MMA_THREADS, bytes, stream>>>(*s, q, k, v, lse, delta, d_o, dk, dv,
                                                                               accumulate);
        USP_CHECK(cuda_launched("mma_dkdv_kernel"));
    }
    if (q_grid > 0) {
        USP_CHECK(smem_opt_in(mma_dq_kernel<D>, bytes, "mma_dq_kernel"));
        mma_dq_kernel<D><<<(unsigned)q_grid, MMA_THREADS, bytes, stream>>>(*s, q, k, v, lse, delta, d_o, dq,
                                                                           accumulate);
        USP_CHECK(cuda_launched("mma_dq_kernel"));
    }
    return USP_OK;
}

extern "C" usp_status cuda_attention_mma_backward(const usp_attention_shape *s, cuda_array q, cuda_array k,
                                                  cuda_array v, cuda_array o, const float *lse, cuda_array d_o,
                                                  cuda_array dq, cuda_array dk, cuda_array dv, int accumulate,
                                                  void *workspace, cudaStream_t stream)
{
    const cuda_array arrays[] = {q, k, v, o, d_o, dq, dk, dv};
    USP_CHECK(mma_check(s, arrays, 8, "backward"));
    const int64_t rows = s->batch * s->n_q * s->n_heads;
    float *delta = (float *)workspace;
    if (rows > 0) {
        if (delta == NULL)
            return usp_error(USP_ERR_CONFIG, "cuda tensor-core attention backward: no workspace (%zu bytes needed)",
                             attn_workspace_bytes(s));
        attn_delta_kernel<<<cuda_blocks_for(rows * 32, ATTN_THREADS), ATTN_THREADS, 0, stream>>>(*s, o, d_o, delta);
        USP_CHECK(cuda_launched("attn_delta_kernel"));
    }
    const bf16_bits *qp = (const bf16_bits *)q.data, *kp = (const bf16_bits *)k.data, *vp = (const bf16_bits *)v.data;
    const bf16_bits *dop = (const bf16_bits *)d_o.data;
    bf16_bits *dqp = (bf16_bits *)dq.data, *dkp = (bf16_bits *)dk.data, *dvp = (bf16_bits *)dv.data;
    return s->head_dim == 64 ? backward_launch<64>(s, qp, kp, vp, lse, delta, dop, dqp, dkp, dvp, accumulate, stream)
                             : backward_launch<128>(s, qp, kp, vp, lse, delta, dop, dqp, dkp, dvp, accumulate, stream);
}
