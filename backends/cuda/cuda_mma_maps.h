/* Index maps of a FlashAttention-2 kernel on the tensor cores (mma.sync m16n8k16, bf16 inputs, fp32
 * accumulators): which lane of a warp holds which element of each fragment, which row each lane
 * hands to ldmatrix, where a tile element lives in swizzled shared memory, and which key blocks a
 * query block visits. Plain C (gcc, C11) and CUDA alike, no CUDA types: tests/test_mma_maps.c
 * checks the maps against the PTX ISA's tables and against each other, and
 * tests/mma_attention_emulation.c moves data between per-lane "registers" and tiles through these
 * maps only, running the kernels' forward and backward against the cpu attention.
 *
 * The fragment maps are those of the PTX ISA, section 9.7.14.5.8 "Matrix Fragments for
 * mma.m16n8k16 with floating point type" (figures "MMA .m16n8k16 fragment layout for matrix A /
 * matrix B / accumulator matrix C/D with .f16/.bf16 type"), and 9.7.14.5.15 (ldmatrix), in terms of
 *   groupID = laneid >> 2,   threadID_in_group = laneid % 4.
 * D = A B + C with A 16 x 16 (row-major, "m x k"), B 16 x 8 ("k x n", .col), C and D 16 x 8 fp32.
 *
 * How FlashAttention-2 uses them (tile 64 queries x 64 keys, 4 warps, each warp 16 rows):
 *   S = Q K^T: A = Q [m = query, k = d] from shared memory (MMA_LD_A); B = K^T, read from K stored
 *     [key][d] = [n][k] (MMA_LD_B_NK, no transpose).
 *   O += P V: A = P taken from S's accumulators in registers (mma_a_from_c: two n8 accumulator tiles
 *     are one 16 x 16 A fragment), rounded to bf16; B = V stored [key][d] = [k][n] (MMA_LD_B_KN, .trans).
 *   Backward, a warp per 16 keys: S^T = K Q^T and dP^T = V dO^T (A = K, V; B from Q, dO stored [n][k]),
 *   dV += P^T dO and dK += dS^T Q (A from accumulators, B = dO, Q stored [k][n]); the dQ pass, a warp
 *   per 16 queries: S = Q K^T, dP = dO V^T, dQ += dS K (B = K stored [k][n]). */
#ifndef USP_CUDA_MMA_MAPS_H
#define USP_CUDA_MMA_MAPS_H

#include "backends/cuda/cuda_attention_tiles.h"

/* The instruction's shape and the lanes of a warp. */
#define MMA_M 16
#define MMA_N 8
#define MMA_K 16
#define MMA_LANES 32
/* bf16 elements per lane: A a0..a7 (four .b32 registers of two), B b0..b3 (two); fp32 C/D c0..c3. */
#define MMA_A_ELEMS 8
#define MMA_B_ELEMS 4
#define MMA_C_ELEMS 4

/* Tiles of the mma kernels: a CTA of 4 warps, 16 rows each, over 64 x 64 tiles. */
#define MMA_ATTN_WARPS 4
#define MMA_ATTN_BQ (MMA_ATTN_WARPS * MMA_M)
#define MMA_ATTN_BK 64

typedef struct mma_rc {
    int row, col;
} mma_rc;

static inline CUDA_HD int mma_group_id(int lane) { return lane >> 2; }
static inline CUDA_HD int mma_thread_in_group(int lane) { return lane & 3; }

/* A element a_i of `lane`: row groupID for i in {0,1,4,5}, groupID + 8 otherwise;
 * col 2 threadID_in_group + (i & 1), plus 8 for i >= 4. */
static inline CUDA_HD mma_rc mma_a_elem(int lane, int i)
{
    mma_rc p;
    p.row = mma_group_id(lane) + ((i >> 1) & 1) * 8;
    p.col = mma_thread_in_group(lane) * 2 + (i & 1) + (i >> 2) * 8;
    return p;
}

/* B element b_i (row = k, col = n): row 2 threadID_in_group + (i & 1), plus 8 for i >= 2; col groupID. */
static inline CUDA_HD mma_rc mma_b_elem(int lane, int i)
{
    mma_rc p;
    p.row = mma_thread_in_group(lane) * 2 + (i & 1) + (i >> 1) * 8;
    p.col = mma_group_id(lane);
    return p;
}

/* C/D element c_i: row groupID for i < 2, groupID + 8 otherwise; col 2 threadID_in_group + (i & 1). */
static inline CUDA_HD mma_rc mma_c_elem(int lane, int i)
{
    mma_rc p;
    p.row = mma_group_id(lane) + (i >> 1) * 8;
    p.col = mma_thread_in_group(lane) * 2 + (i & 1);
    return p;
}

/* FA2's register reuse: the accumulators of two adjacent n8 tiles (columns 0-7 and 8-15) hold,
 * lane by lane, exactly the A fragment of the 16 x 16 matrix they form: a_i = tile (i >> 2),
 * element c_(i & 3). So P (or dS) goes from the score mma to the next mma without shared memory. */
static inline CUDA_HD int mma_a_from_c_tile(int i) { return i >> 2; }
static inline CUDA_HD int mma_a_from_c_elem(int i) { return i & 3; }

/* A row of C is held by the four lanes of one group (4 groupID .. 4 groupID + 3): a row
 * reduction (max, sum) is the lane's own elements, then the xor butterfly over these partners
 * (step 0, 1: __shfl_xor_sync with 1, 2). */
static inline CUDA_HD int mma_row_partner(int lane, int step) { return lane ^ (1 << step); }
#define MMA_ROW_STEPS 2

/* ------------------------------------------------------------------------- */
/* ldmatrix.sync.aligned.m8n8.x4(.trans).b16                                  */

/* Lane l hands ldmatrix the address of row (l & 7) of 8 x 8 matrix (l >> 3); register r of every
 * lane receives a piece of matrix r. */
static inline CUDA_HD int mma_ldsm_matrix_of_lane(int lane) { return lane >> 3; }
static inline CUDA_HD int mma_ldsm_row_of_lane(int lane) { return lane & 7; }

/* Element e (0: low half, 1: high half) of the register of `lane`, as (row, col) of its 8 x 8
 * matrix: row laneid >> 2, cols 2 (laneid % 4) + e; with .trans the transpose, rows 2 (laneid % 4) + e,
 * col laneid >> 2. The data comes from the lane that gave that row's address. */
static inline CUDA_HD mma_rc mma_ldsm_elem(int lane, int e, int trans)
{
    mma_rc p;
    p.row = trans ? mma_thread_in_group(lane) * 2 + e : mma_group_id(lane);
    p.col = trans ? mma_group_id(lane) : mma_thread_in_group(lane) * 2 + e;
    return p;
}

/* What an ldmatrix.x4 reads, and so where each lane points:
 *   MMA_LD_A:    one 16 x 16 A fragment from a tile stored [m][k]; register r = (a_2r, a_2r+1).
 *   MMA_LD_B_NK: two B fragments (n 0-7, n 8-15) of k 16 from a tile stored [n][k], no transpose;
 *                register r = n8 block r >> 1, (b_2(r&1), b_2(r&1)+1).
 *   MMA_LD_B_KN: the same two B fragments from a tile stored [k][n], with .trans. */
typedef enum mma_ld_kind {
    MMA_LD_A = 0,
    MMA_LD_B_NK = 1,
    MMA_LD_B_KN = 2,
} mma_ld_kind;

static inline CUDA_HD int mma_ld_trans(mma_ld_kind kind) { return kind == MMA_LD_B_KN; }

/* The (row, col) of the stored tile, from the 16 x 16 block's origin, whose 8-element row segment
 * `lane` addresses. Matrix m = lane >> 3 covers: for A, rows 8 (m & 1), cols 8 (m >> 1); for B_NK,
 * rows (n) 8 (m >> 1), cols (k) 8 (m & 1); for B_KN, rows (k) 8 (m & 1), cols (n) 8 (m >> 1). */
static inline CUDA_HD mma_rc mma_ldsm_addr(int lane, mma_ld_kind kind)
{
    const int m = mma_ldsm_matrix_of_lane(lane), r = mma_ldsm_row_of_lane(lane);
    mma_rc p;
    p.row = r + 8 * (kind == MMA_LD_B_NK ? m >> 1 : m & 1);
    p.col = 8 * (kind == MMA_LD_B_NK ? m & 1 : m >> 1);
    return p;
}

/* ------------------------------------------------------------------------- */
/* Shared memory: bf16 tiles [rows][D], 16-byte chunks swizzled                */

/* Element (row, col) of a [rows][ld] bf16 tile (ld a multiple of 64): chunk col / 8 of the row is
 * stored at chunk (col / 8) ^ (row % 8). The 8 rows one ldmatrix phase reads (8 consecutive rows,
 * one logical chunk) then land in 8 different 16-byte slots of the 128-byte bank window: no bank
 * conflict, where the plain layout (row stride 128 or 256 bytes) puts all 8 in the same banks. */
static inline CUDA_HD int64_t mma_smem_offset(int64_t row, int64_t col, int64_t ld)
{
    return row * ld + (((col >> 3) ^ (row & 7)) << 3) + (col & 7);
}

/* ------------------------------------------------------------------------- */
/* Blocks, masks and heads (tile helpers of cuda_attention_tiles.h at 64 x 64) */

/* NULL when the mma kernels take shape s (after attn_shape_problem): head_dim 64 or 128;
 * otherwise why, and the scalar kernel runs it. */
static inline const char *mma_attn_shape_problem(const usp_attention_shape *s)
{
    if (s->head_dim != 64 && s->head_dim != 128)
        return "the tensor-core attention takes head_dim 64 and 128; other sizes run the scalar kernel";
    return NULL;
}

/* The kernels that run one attention call. */
typedef enum attn_kernel { ATTN_KERNEL_SCALAR = 0, ATTN_KERNEL_MMA = 1 } attn_kernel;

/* The kernels for a call on n arrays of these dtypes at these device addresses: the tensor-core ones
 * when the shape suits them and every array is bf16 and 16-byte aligned (cp.async moves 16 bytes);
 * the scalar ones otherwise. *why says what kept a call with bf16 arrays off the tensor cores, and is
 * NULL where the scalar kernel is the design: fp32 arrays (the fp32 path and the tests' reference),
 * or a shape attn_shape_problem refuses (the scalar launcher then reports it). */
static inline attn_kernel attn_kernel_for(const usp_attention_shape *s, const usp_dtype *dtypes,
                                          const uintptr_t *addresses, int n, const char **why)
{
    *why = NULL;
    int any_bf16 = 0;
    for (int i = 0; i < n; i++)
        any_bf16 |= dtypes[i] == USP_BF16;
    if (!any_bf16 || attn_shape_problem(s) != NULL)
        return ATTN_KERNEL_SCALAR;
    *why = mma_attn_shape_problem(s);
    for (int i = 0; i < n && *why == NULL; i++) {
        if (dtypes[i] != USP_BF16)
            *why = "the tensor-core attention takes bf16 arrays only; a call mixing fp32 and bf16 runs the "
                   "scalar kernel";
        else if (addresses[i] % 16 != 0)
            *why = "the tensor-core attention needs 16-byte aligned arrays (cp.async); this call runs the "
                   "scalar kernel";
    }
    return *why == NULL ? ATTN_KERNEL_MMA : ATTN_KERNEL_SCALAR;
}

/* Blocks [begin, end) a CTA visits. */
typedef attn_tile_range mma_block_range;

/* Key blocks query block qb of batch row b visits (attn_kv_tiles at 64 x 64): from the block of the
 * first key its first query sees to that of the last key its last query sees; blocks outside (after
 * the causal diagonal, before a window or a document) are skipped, and every block in the range
 * has a visible pair. */
static inline CUDA_HD mma_block_range mma_attn_kv_blocks(const usp_attention_shape *s, int64_t b, int64_t qb)
{
    return attn_kv_tiles(s, b, qb * MMA_ATTN_BQ, attn_tile_len(s->n_q, MMA_ATTN_BQ, qb), MMA_ATTN_BK);
}

/* Query blocks key block kb of batch row b meets (the dK/dV pass, attn_q_tiles): from the block of the
 * first query that sees its first key to that of the last query that sees its last key. */
static inline CUDA_HD mma_block_range mma_attn_q_blocks(const usp_attention_shape *s, int64_t b, int64_t kb)
{
    return attn_q_tiles(s, b, kb * MMA_ATTN_BK, attn_tile_len(s->n_kv, MMA_ATTN_BK, kb), MMA_ATTN_BQ);
}

/* 1 when block pair (qb, kb) of batch row b has dead elements among its queries: a pair the mask cuts
 * (the causal diagonal, a window's edge, a document's boundary), or the short last key block (keys
 * past n_kv must get p = 0). The kernels do not branch on it: they test every element's live bit
 * (mma_attn_live_bits), all set in the other pairs, which costs fewer registers than the branch. */
static inline CUDA_HD int mma_attn_block_masked(const usp_attention_shape *s, int64_t b, int64_t qb,
                                                      int64_t kb)
{
    const int64_t q0 = qb * MMA_ATTN_BQ, k0 = kb * MMA_ATTN_BK, bk = attn_tile_len(s->n_kv, MMA_ATTN_BK, kb);
    return bk < MMA_ATTN_BK ||
           attn_tile_visibility(s, b, q0, attn_tile_len(s->n_q, MMA_ATTN_BQ, qb), k0, bk) != ATTN_TILE_VISIBLE;
}

/* 1 when local key k counts for local query q of batch row b: both inside the call and visible (rows past
 * the call are computed on zero rows and never stored; their elements are dead). */
static inline CUDA_HD int mma_attn_pair_live(const usp_attention_shape *s, int64_t b, int64_t q, int64_t k)
{
    return q < s->n_q && k < s->n_kv && attn_sees(s, b, q, k);
}

/* A row's span [first, end) as columns [*lo, *hi) of the 64 from col0 (MMA_ATTN_BK = MMA_ATTN_BQ). */
static inline CUDA_HD void mma_attn_span_cols(int64_t first, int64_t end, int64_t col0, int *lo, int *hi)
{
    *lo = (int)attn_clamp(first - col0, 0, MMA_ATTN_BK);
    *hi = (int)attn_clamp(end - col0, 0, MMA_ATTN_BK);
}

/* The live elements of a lane's score accumulators (64 / 8 n8 blocks of 4), one bit each: bit 4 nb + i
 * for element c_i of block nb, which lies in row groupID + 8 (i >> 1), column 8 nb + 2 threadID_in_group
 * + (i & 1) (mma_c_elem), set when that column is in its row's live columns [lo[r], hi[r]) (0 <= lo, hi
 * <= 64). The columns of a row as a 64-bit mask, shifted so that the lane's two columns of block nb sit
 * at bits 8 nb and 8 nb + 1: one register then carries the whole mask through the products. */
static inline CUDA_HD uint32_t mma_attn_live_bits(int lane, const int lo[2], const int hi[2])
{
    uint32_t bits = 0;
    for (int r = 0; r < 2; r++) {
        const uint64_t below_hi = hi[r] >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << hi[r]) - 1;
        const uint64_t below_lo = lo[r] >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << lo[r]) - 1;
        const uint64_t cols = (below_hi & ~below_lo) >> (2 * mma_thread_in_group(lane));
        for (int nb = 0; nb < MMA_ATTN_BK / MMA_N; nb++)
            bits |= (uint32_t)((cols >> (8 * nb)) & 3u) << (4 * nb + 2 * r);
    }
    return bits;
}

/* GQA: query heads [first, first + group) read kv head g; the dK/dV CTA of kv head g walks them all,
 * so K and V are read by index, never repeated in memory (query head h reads attn_kv_head(s, h)). */
static inline CUDA_HD int64_t mma_attn_first_q_head(const usp_attention_shape *s, int64_t g)
{
    return g * (s->n_heads / s->n_kv_heads);
}

#endif
