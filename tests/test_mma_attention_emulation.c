/* The tensor-core attention, emulated on the CPU (tests/mma_attention_emulation.c: fragments,
 * ldmatrix, mma.sync and swizzled tiles through backends/cuda/cuda_mma_maps.h), against the cpu
 * attention (backends/cpu, fp32, sharing none of this code) within the bf16 tolerances derived in
 * tests/mma_attention_cases.h: forward and backward, causal and full, GQA, head_dim 64 and 128,
 * lengths off the 64-tile grid, ring blocks placed by offsets, rows that see no key (lse -inf on
 * both sides, o and dq within 1e-6 of the cpu's zeros), sliding windows and documents; and the grid
 * run backwards gives the same bits (no CTA depends on another's order). First, the maps' masks
 * against the definition (core/ops/mask.h's usp_mask_sees), pair by pair: the blocks a CTA visits,
 * and each lane's live bits in every visited pair, padding rows and columns included. */
#include "tests/mma_attention_emulation.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/ops/mask.h"
#include "tests/check_main.h"
#include "tests/mma_attention_cases.h"

/* The definition: inside the call and visible in batch row b. */
static int brute_live(const usp_attention_shape *s, int64_t b, int64_t q, int64_t k)
{
    const usp_mask_row m = {s->causal, s->window, s->docs ? s->docs + 2 * b * s->seq_len : NULL};
    return q < s->n_q && k < s->n_kv && usp_mask_sees(&m, s->q_offset + q, s->kv_offset + k);
}

/* Which lane element of which warp holds pair (q, k) of block pair (qb, kb): rows are queries (the
 * forward and the dQ pass) or keys (keys_are_rows: the dK/dV pass); 1 when its live bit is set. */
static int live_bit(const usp_attention_shape *s, int64_t b, int64_t qb, int64_t kb, int keys_are_rows, int64_t row,
                    int64_t col)
{
    const int64_t row0 = keys_are_rows ? kb * MMA_ATTN_BK : qb * MMA_ATTN_BQ;
    const int64_t col0 = keys_are_rows ? qb * MMA_ATTN_BQ : kb * MMA_ATTN_BK;
    for (int lane = 0; lane < MMA_LANES; lane++)
        for (int i = 0; i < MMA_C_ELEMS; i++) {
            const mma_rc p = mma_c_elem(lane, i);
            if (p.row != row % 16 || (col - p.col) % 8 != 0) continue; /* warp row / 16, n8 block (col - p.col) / 8 */
            int lo[2], hi[2];
            for (int r = 0; r < 2; r++) {
                int64_t first, end;
                attn_row_span(s, b, row0 + row / 16 * 16 + mma_group_id(lane) + 8 * r, keys_are_rows, &first, &end);
                mma_attn_span_cols(first, end, col0, &lo[r], &hi[r]);
            }
            return (int)((mma_attn_live_bits(lane, lo, hi) >> (4 * ((col - p.col) / 8) + i)) & 1u);
        }
    ck_abort_msg("no lane holds (%lld, %lld)", (long long)row, (long long)col);
    return 0;
}

START_TEST(masked_maps_match_the_definition)
{
    static const int64_t windows[] = {0, 1, 3, 17, 64, 100, 1000};
    for (int c = 0; c < 28; c++) {
        usp_attention_shape s = mma_case_shape(2, 100 + 37 * (c % 4), 130 - 23 * (c % 3), 1, 1, 64, c % 2,
                                               c % 7 == 3 ? 80 : 0, c % 5 == 2 ? 40 : 0);
        s.window = windows[c % 7];
        s.seq_len = s.q_offset + s.n_q > s.kv_offset + s.n_kv ? s.q_offset + s.n_q : s.kv_offset + s.n_kv;
        int32_t *docs = c % 3 ? mma_case_documents(s.batch, s.seq_len) : NULL;
        s.docs = docs;
        const int64_t n_qb = attn_n_tiles(s.n_q, MMA_ATTN_BQ), n_kb = attn_n_tiles(s.n_kv, MMA_ATTN_BK);
        for (int64_t b = 0; b < s.batch; b++)
            for (int64_t qb = 0; qb < n_qb; qb++)
                for (int64_t kb = 0; kb < n_kb; kb++) {
                    int64_t live = 0, dead = 0, wrong = 0;
                    for (int64_t r = 0; r < MMA_ATTN_BQ; r++)
                        for (int64_t cc = 0; cc < MMA_ATTN_BK; cc++) {
                            const int64_t q = qb * MMA_ATTN_BQ + r, k = kb * MMA_ATTN_BK + cc;
                            const int want = brute_live(&s, b, q, k);
                            wrong += mma_attn_pair_live(&s, b, q, k) != want;
                            wrong += live_bit(&s, b, qb, kb, 0, r, cc) != want; /* S, dP */
                            wrong += live_bit(&s, b, qb, kb, 1, cc, r) != want; /* S^T, dP^T */
                            if (q < s.n_q) live += want, dead += !want;
                        }
                    const mma_block_range kv = mma_attn_kv_blocks(&s, b, qb), qr = mma_attn_q_blocks(&s, b, kb);
                    ck_assert_msg(wrong == 0 && (kb >= kv.begin && kb < kv.end) == (live > 0) &&
                                      (qb >= qr.begin && qb < qr.end) == (live > 0) &&
                                      (!live || mma_attn_block_masked(&s, b, qb, kb) == (dead > 0)),
                                  "case %d (window %lld, documents %d), row %lld, block pair (%lld, %lld): %lld "
                                  "elements wrong, %lld live, range [%lld, %lld) [%lld, %lld)",
                                  c, (long long)s.window, docs != NULL, (long long)b, (long long)qb, (long long)kb,
                                  (long long)wrong, (long long)live, (long long)kv.begin, (long long)kv.end,
                                  (long long)qr.begin, (long long)qr.end);
                }
        free(docs);
    }
}
END_TEST

static void emulate(mma_case *c)
{
    mma_emu_forward(&c->s, c->q, c->k, c->v, c->eo, c->e_lse, 0);
    mma_emu_backward(&c->s, c->q, c->k, c->v, c->o_bf16, c->lse, c->d_o, c->edq, c->edk, c->edv, 0);
}

START_TEST(emulated_mma_kernels_match_cpu_attention)
{
    const double worst_o = mma_case_run_all(emulate, 1000);
    /* Without bf16 rounding (of P, of the stored o) o would be within ~1e-6 of the cpu: 1e-3 of its tolerance. */
    ck_assert_msg(worst_o > 0.02, "o within %.4f of its bf16 tolerance: is anything rounded to bf16?", worst_o);
}
END_TEST

/* Each output element is written by one CTA in a fixed order (dQ in its own pass, no atomics), so
 * running the grids backwards gives the same bits. */
START_TEST(grid_order_does_not_change_a_bit)
{
    mma_case c;
    mma_case_run(&c, mma_case_shape(1, 130, 130, 4, 2, 64, 1, 0, 0), 31, emulate);
    float *o = mma_case_array(c.nq, 0), *lse = mma_case_array(c.nl, 0), *dq = mma_case_array(c.nq, 0);
    float *dk = mma_case_array(c.nkv, 0), *dv = mma_case_array(c.nkv, 0);
    mma_emu_forward(&c.s, c.q, c.k, c.v, o, lse, 1);
    mma_emu_backward(&c.s, c.q, c.k, c.v, c.o_bf16, c.lse, c.d_o, dq, dk, dv, 1);
    ck_assert(memcmp(o, c.eo, c.nq * sizeof(float)) == 0 && memcmp(lse, c.e_lse, c.nl * sizeof(float)) == 0);
    ck_assert(memcmp(dq, c.edq, c.nq * sizeof(float)) == 0);
    ck_assert(memcmp(dk, c.edk, c.nkv * sizeof(float)) == 0 && memcmp(dv, c.edv, c.nkv * sizeof(float)) == 0);
    free(o), free(lse), free(dq), free(dk), free(dv);
    mma_case_free(&c);
}
END_TEST

static Suite *mma_emulation_suite(void)
{
    Suite *s = suite_create("mma_attention_emulation");
    TCase *t = tcase_create("emulation");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, masked_maps_match_the_definition);
    tcase_add_test(t, emulated_mma_kernels_match_cpu_attention);
    tcase_add_test(t, grid_order_does_not_change_a_bit);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main_run(mma_emulation_suite());
}
