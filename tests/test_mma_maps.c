/* The index maps of the tensor-core attention (backends/cuda/cuda_mma_maps.h), without a GPU:
 * fragment maps against entries read off the PTX ISA's figures (section 9.7.14.5.8) and as
 * bijections; ldmatrix's lane -> row addresses composed with its delivery map give exactly the
 * fragments mma.sync expects, for each of the three loads the kernels make; accumulators reused
 * as an A fragment; row reductions stay in a quad; the shared-memory swizzle is a bijection and
 * conflict-free for ldmatrix; block ranges, masks and GQA heads against brute force. */
#include "backends/cuda/cuda_mma_maps.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "tests/check_main.h"

/* Entries of the PTX figures, (lane, element) -> (row, col). */
START_TEST(fragments_match_ptx_figures)
{
    static const int a[][4] = {{0, 0, 0, 0}, {0, 1, 0, 1}, {0, 2, 8, 0}, {0, 4, 0, 8}, {0, 7, 8, 9},
                               {5, 0, 1, 2}, {5, 3, 9, 3}, {31, 0, 7, 6}, {31, 7, 15, 15}};
    static const int b[][4] = {{0, 0, 0, 0}, {0, 3, 9, 0}, {5, 0, 2, 1}, {5, 3, 11, 1}, {31, 2, 14, 7}};
    static const int c[][4] = {{0, 0, 0, 0}, {0, 3, 8, 1}, {30, 0, 7, 4}, {30, 3, 15, 5}, {13, 1, 3, 3}};
    for (size_t t = 0; t < sizeof a / sizeof a[0]; t++) {
        const mma_rc p = mma_a_elem(a[t][0], a[t][1]);
        ck_assert_msg(p.row == a[t][2] && p.col == a[t][3], "A lane %d a%d at (%d, %d)", a[t][0], a[t][1], p.row,
                      p.col);
    }
    for (size_t t = 0; t < sizeof b / sizeof b[0]; t++) {
        const mma_rc p = mma_b_elem(b[t][0], b[t][1]);
        ck_assert_msg(p.row == b[t][2] && p.col == b[t][3], "B lane %d b%d at (%d, %d)", b[t][0], b[t][1], p.row,
                      p.col);
    }
    for (size_t t = 0; t < sizeof c / sizeof c[0]; t++) {
        const mma_rc p = mma_c_elem(c[t][0], c[t][1]);
        ck_assert_msg(p.row == c[t][2] && p.col == c[t][3], "C lane %d c%d at (%d, %d)", c[t][0], c[t][1], p.row,
                      p.col);
    }
}
END_TEST

/* Each element of A (16 x 16), B (16 x 8), C (16 x 8) is held by exactly one (lane, element). */
START_TEST(fragments_cover_each_element_once)
{
    int seen_a[16][16] = {{0}}, seen_b[16][8] = {{0}}, seen_c[16][8] = {{0}};
    for (int lane = 0; lane < MMA_LANES; lane++) {
        for (int i = 0; i < MMA_A_ELEMS; i++) seen_a[mma_a_elem(lane, i).row][mma_a_elem(lane, i).col]++;
        for (int i = 0; i < MMA_B_ELEMS; i++) seen_b[mma_b_elem(lane, i).row][mma_b_elem(lane, i).col]++;
        for (int i = 0; i < MMA_C_ELEMS; i++) seen_c[mma_c_elem(lane, i).row][mma_c_elem(lane, i).col]++;
    }
    for (int r = 0; r < 16; r++) {
        for (int k = 0; k < 16; k++) ck_assert_int_eq(seen_a[r][k], 1);
        for (int n = 0; n < 8; n++) {
            ck_assert_int_eq(seen_b[r][n], 1);
            ck_assert_int_eq(seen_c[r][n], 1);
        }
    }
}
END_TEST

/* ldmatrix.x4 semantics: element e of register r of lane l comes from the row address that lane
 * 8 r + (its row in matrix r) gave, column (its col in matrix r). Composed with mma_ldsm_addr, the
 * tile element each register receives must be the one the mma fragment map names. */
static mma_rc ldsm_delivers(int lane, int r, int e, mma_ld_kind kind)
{
    const mma_rc in = mma_ldsm_elem(lane, e, mma_ld_trans(kind));
    const int src = 8 * r + in.row;
    ck_assert_int_eq(mma_ldsm_matrix_of_lane(src), r);
    ck_assert_int_eq(mma_ldsm_row_of_lane(src), in.row);
    mma_rc at = mma_ldsm_addr(src, kind);
    at.col += in.col; /* the row segment holds 8 consecutive columns */
    return at;
}

START_TEST(ldmatrix_delivers_the_fragments_mma_expects)
{
    for (int lane = 0; lane < MMA_LANES; lane++)
        for (int r = 0; r < 4; r++)
            for (int e = 0; e < 2; e++) {
                const mma_rc a = ldsm_delivers(lane, r, e, MMA_LD_A), want_a = mma_a_elem(lane, 2 * r + e);
                ck_assert_msg(a.row == want_a.row && a.col == want_a.col, "A: lane %d reg %d.%d", lane, r, e);
                /* B: n8 block nb = r >> 1, element j = 2 (r & 1) + e; B_NK stores [n][k], B_KN [k][n]. */
                const int nb = r >> 1, j = 2 * (r & 1) + e;
                const mma_rc want = mma_b_elem(lane, j); /* (k, n) within the n8 block */
                const mma_rc nk = ldsm_delivers(lane, r, e, MMA_LD_B_NK), kn = ldsm_delivers(lane, r, e, MMA_LD_B_KN);
                ck_assert_msg(nk.row == 8 * nb + want.col && nk.col == want.row, "B_NK: lane %d reg %d.%d", lane, r,
                              e);
                ck_assert_msg(kn.row == want.row && kn.col == 8 * nb + want.col, "B_KN: lane %d reg %d.%d", lane, r,
                              e);
            }
}
END_TEST

START_TEST(accumulators_are_the_next_a_fragment)
{
    for (int lane = 0; lane < MMA_LANES; lane++)
        for (int i = 0; i < MMA_A_ELEMS; i++) {
            const mma_rc a = mma_a_elem(lane, i), c = mma_c_elem(lane, mma_a_from_c_elem(i));
            ck_assert_int_eq(a.row, c.row);
            ck_assert_int_eq(a.col, 8 * mma_a_from_c_tile(i) + c.col);
        }
}
END_TEST

/* The lanes reached from a lane by the row butterfly are exactly the lanes holding its rows. */
START_TEST(row_reductions_stay_in_the_quad)
{
    for (int lane = 0; lane < MMA_LANES; lane++) {
        int reached = 1 << (lane & 3);
        for (int step = 0; step < MMA_ROW_STEPS; step++) {
            int next = reached;
            for (int q = 0; q < 4; q++)
                if (reached & (1 << q)) {
                    const int p = mma_row_partner((lane & ~3) | q, step);
                    ck_assert_int_eq(p >> 2, lane >> 2);
                    next |= 1 << (p & 3);
                }
            reached = next;
        }
        ck_assert_int_eq(reached, 15);
        for (int other = 0; other < MMA_LANES; other++) /* a row's elements are in this quad only */
            for (int i = 0; i < MMA_C_ELEMS; i++)
                if (mma_c_elem(other, i).row == mma_c_elem(lane, 0).row) ck_assert_int_eq(other >> 2, lane >> 2);
    }
}
END_TEST

START_TEST(swizzle_is_a_bijection_without_bank_conflicts)
{
    for (int64_t ld = 64; ld <= 128; ld += 64) {
        const int64_t rows = 64;
        unsigned char *hit = calloc((size_t)(rows * ld), 1);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < ld; c++) {
                const int64_t off = mma_smem_offset(r, c, ld);
                ck_assert(off >= r * ld && off < (r + 1) * ld && !hit[off]);
                hit[off] = 1;
                if (c % 8) ck_assert_int_eq(off, mma_smem_offset(r, c - 1, ld) + 1); /* 16-byte segments stay whole */
            }
        free(hit);
        /* One ldmatrix phase: 8 consecutive rows r0..r0+7 (r0 % 8 == 0), one chunk: 8 distinct
         * 16-byte slots of the 128-byte (32-bank) window. */
        for (int64_t r0 = 0; r0 < rows; r0 += 8)
            for (int64_t c = 0; c < ld; c += 8) {
                int slots = 0;
                for (int64_t r = r0; r < r0 + 8; r++) slots |= 1 << (int)((mma_smem_offset(r, c, ld) * 2 / 16) % 8);
                ck_assert_int_eq(slots, 255);
            }
    }
}
END_TEST

static usp_attention_shape shape(int64_t n_q, int64_t n_kv, int64_t heads, int64_t kv_heads, int64_t D, int causal,
                                 int64_t q_offset, int64_t kv_offset)
{
    usp_attention_shape s = {.batch = 1, .n_q = n_q, .n_kv = n_kv, .n_heads = heads, .n_kv_heads = kv_heads,
                             .head_dim = D, .q_offset = q_offset, .kv_offset = kv_offset, .causal = causal,
                             .scale = 0.125f};
    return s;
}

/* Block ranges hold exactly the pairs with a visible (query, key); a pair needs the mask exactly
 * when some element of its full 64 x 64 grid is dead (masked or past n_kv) while another is live. */
START_TEST(block_ranges_and_masks_match_brute_force)
{
    const usp_attention_shape cases[] = {shape(200, 200, 1, 1, 64, 1, 0, 0),  shape(128, 128, 1, 1, 64, 1, 0, 0),
                                         shape(70, 150, 1, 1, 128, 1, 80, 0), shape(100, 130, 1, 1, 64, 0, 0, 0),
                                         shape(50, 90, 1, 1, 64, 1, 100, 40), shape(40, 40, 1, 1, 64, 1, 0, 25)};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const usp_attention_shape *s = &cases[c];
        const int64_t n_qb = attn_n_tiles(s->n_q, MMA_ATTN_BQ), n_kb = attn_n_tiles(s->n_kv, MMA_ATTN_BK);
        for (int64_t qb = 0; qb < n_qb; qb++)
            for (int64_t kb = 0; kb < n_kb; kb++) {
                int64_t live = 0, dead = 0;
                for (int64_t q = qb * MMA_ATTN_BQ; q < qb * MMA_ATTN_BQ + MMA_ATTN_BQ && q < s->n_q; q++)
                    for (int64_t k = kb * MMA_ATTN_BK; k < (kb + 1) * MMA_ATTN_BK; k++) {
                        const int brute = k < s->n_kv && (!s->causal || s->kv_offset + k <= s->q_offset + q);
                        ck_assert_int_eq(mma_attn_pair_live(s, 0, q, k), brute);
                        live += brute, dead += !brute;
                    }
                const mma_block_range kv = mma_attn_kv_blocks(s, 0, qb), qr = mma_attn_q_blocks(s, 0, kb);
                ck_assert_msg((kb >= kv.begin && kb < kv.end) == (live > 0), "case %zu: k block %lld of q block %lld",
                              c, (long long)kb, (long long)qb);
                ck_assert_msg((qb >= qr.begin && qb < qr.end) == (live > 0), "case %zu: q block %lld of k block %lld",
                              c, (long long)qb, (long long)kb);
                if (live) ck_assert_int_eq(mma_attn_block_masked(s, 0, qb, kb), dead > 0);
            }
    }
}
END_TEST

/* Every query head reads kv head h / group, and the dK/dV CTA of kv head g walks exactly those. */
START_TEST(gqa_heads_read_kv_by_index)
{
    for (int64_t kv_heads = 1; kv_heads <= 4; kv_heads++)
        for (int64_t group = 1; group <= 4; group++) {
            const usp_attention_shape s = shape(1, 1, kv_heads * group, kv_heads, 64, 0, 0, 0);
            int readers[4] = {0};
            for (int64_t h = 0; h < s.n_heads; h++) readers[attn_kv_head(&s, h)]++;
            for (int64_t g = 0; g < kv_heads; g++) {
                ck_assert_int_eq(readers[g], group);
                for (int64_t h = mma_attn_first_q_head(&s, g); h < mma_attn_first_q_head(&s, g) + group; h++)
                    ck_assert_int_eq(attn_kv_head(&s, h), g);
            }
        }
}
END_TEST

START_TEST(other_head_dims_fall_back)
{
    for (int64_t D = 1; D <= ATTN_MAX_HEAD_DIM; D++) {
        const usp_attention_shape s = shape(8, 8, 2, 1, D, 1, 0, 0);
        const char *why = mma_attn_shape_problem(&s);
        ck_assert_int_eq(why == NULL, D == 64 || D == 128);
        if (why) ck_assert_ptr_nonnull(strstr(why, "scalar kernel"));
    }
}
END_TEST

/* The attention op's choice (cuda_attention.cu): bf16, head_dim 64 / 128, aligned -> tensor cores; fp32
 * -> the scalar kernel with nothing to say; any other bf16 call -> the scalar kernel with the reason. */
START_TEST(bf16_calls_take_the_tensor_cores_and_others_say_why)
{
    usp_dtype dt[8];
    uintptr_t at[8];
    for (int i = 0; i < 8; i++) {
        dt[i] = USP_BF16;
        at[i] = 0x10000 + 0x1000 * (uintptr_t)i;
    }
    const char *why = "unset";
    for (int64_t D = 64; D <= 128; D += 64) {
        const usp_attention_shape s = shape(70, 70, 4, 2, D, 1, 0, 0);
        ck_assert_int_eq(attn_kernel_for(&s, dt, at, 8, &why), ATTN_KERNEL_MMA);
        ck_assert_ptr_null(why);
    }
    const usp_attention_shape s64 = shape(70, 70, 4, 2, 64, 1, 0, 0), s96 = shape(70, 70, 4, 2, 96, 1, 0, 0);
    ck_assert_int_eq(attn_kernel_for(&s96, dt, at, 8, &why), ATTN_KERNEL_SCALAR);
    ck_assert_ptr_nonnull(strstr(why, "head_dim 64 and 128"));
    at[3] += 8; /* o at an 8-byte boundary, as a ring block at an odd token offset could be */
    ck_assert_int_eq(attn_kernel_for(&s64, dt, at, 8, &why), ATTN_KERNEL_SCALAR);
    ck_assert_ptr_nonnull(strstr(why, "16-byte aligned"));
    at[3] -= 8;
    dt[5] = USP_F32; /* an fp32 dq among bf16 arrays */
    ck_assert_int_eq(attn_kernel_for(&s64, dt, at, 8, &why), ATTN_KERNEL_SCALAR);
    ck_assert_ptr_nonnull(strstr(why, "bf16 arrays only"));
    for (int i = 0; i < 8; i++)
        dt[i] = USP_F32;
    ck_assert_int_eq(attn_kernel_for(&s64, dt, at, 8, &why), ATTN_KERNEL_SCALAR);
    ck_assert_ptr_null(why); /* fp32 is the scalar kernel's by design: nothing to say */
    const usp_attention_shape refused = shape(70, 70, 3, 2, 64, 1, 0, 0); /* kv heads do not divide heads */
    for (int i = 0; i < 8; i++)
        dt[i] = USP_BF16;
    ck_assert_int_eq(attn_kernel_for(&refused, dt, at, 8, &why), ATTN_KERNEL_SCALAR);
    ck_assert_ptr_null(why); /* the scalar launcher reports the shape */
}
END_TEST

static Suite *mma_maps_suite(void)
{
    Suite *s = suite_create("mma_maps");
    TCase *t = tcase_create("maps");
    tcase_add_test(t, fragments_match_ptx_figures);
    tcase_add_test(t, fragments_cover_each_element_once);
    tcase_add_test(t, ldmatrix_delivers_the_fragments_mma_expects);
    tcase_add_test(t, accumulators_are_the_next_a_fragment);
    tcase_add_test(t, row_reductions_stay_in_the_quad);
    tcase_add_test(t, swizzle_is_a_bijection_without_bank_conflicts);
    tcase_add_test(t, block_ranges_and_masks_match_brute_force);
    tcase_add_test(t, gqa_heads_read_kv_by_index);
    tcase_add_test(t, other_head_dims_fall_back);
    tcase_add_test(t, bf16_calls_take_the_tensor_cores_and_others_say_why);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main_run(mma_maps_suite());
}
