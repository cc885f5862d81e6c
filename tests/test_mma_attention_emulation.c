/* The tensor-core attention, emulated on the CPU (tests/mma_attention_emulation.c: fragments,
 * ldmatrix, mma.sync and swizzled tiles through backends/cuda/cuda_mma_maps.h), against the cpu
 * attention (backends/cpu, fp32, sharing none of this code) within the bf16 tolerances derived in
 * tests/mma_attention_cases.h: forward and backward, causal and full, GQA, head_dim 64 and 128,
 * lengths off the 64-tile grid, ring blocks placed by offsets, rows that see no key (lse -inf on
 * both sides, o and dq within 1e-6 of the cpu's zeros); and the grid run backwards gives the same
 * bits (no CTA depends on another's order). */
#include "tests/mma_attention_emulation.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "tests/check_main.h"
#include "tests/mma_attention_cases.h"

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
    tcase_add_test(t, emulated_mma_kernels_match_cpu_attention);
    tcase_add_test(t, grid_order_does_not_change_a_bit);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main_run(mma_emulation_suite());
}
