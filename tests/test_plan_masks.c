/* The planner under a sliding window (issue 47): the attention's FLOPs are the visible pairs' (the
 * closed form W N - W (W - 1) / 2 of a causal window against N (N + 1) / 2), and the ring's exchanges
 * shrink to the blocks the window reaches (at most 2 / (R - 1) of the full ring's at 1M tokens on R8
 * with a 4096-token window) while Ulysses' do not change; under packed documents each rank's work is
 * the closed form's. */
#include <check.h>
#include <math.h>

#include "core/parallel/ring.h"
#include "core/train/train.h"
#include "plan/doc_order.h"
#include "plan/plan.h"
#include "tests/check_main.h"
#include "tests/harness.h"

/* Plans llama-7b at `seq` tokens on 8 H100s, U x R, with `window` (0: none) and documents (NULL: one). */
static plan_result plan_masked(int ulysses, int ring, int64_t seq, int64_t window, const int64_t *docs, int64_t n)
{
    usp_train_config c;
    ck_assert_int_eq(harness_config("llama-7b", 8, ulysses, ring, seq, 1, &c), USP_OK);
    c.window = window, c.doc_lengths = docs, c.n_doc_lengths = n;
    sim_cost_model h100 = {.dtype = USP_BF16};
    ck_assert(sim_topology_preset("dgx-h100", 1, &h100.topology));
    plan_result r;
    ck_assert_msg(plan_run(&c, &h100, NULL, &r) == USP_OK, "%s", usp_error_message());
    return r;
}

START_TEST(a_window_prices_its_pairs_and_the_ring_sends_what_it_reaches)
{
    const double N = 1 << 20, W = 4096, L = 32, H = 32, D = 128; /* llama-7b, batch 1 */
    const double saved = 4.0 * L * H * D * (N * (N + 1) / 2 - (W * N - W * (W - 1) / 2));
    for (int ring = 1; ring <= 8; ring *= 8) { /* U8, then R8 */
        plan_result full = plan_masked(8 / ring, ring, 1 << 20, 0, NULL, 0),
                    windowed = plan_masked(8 / ring, ring, 1 << 20, 4096, NULL, 0);
        const double got = full.fwd_flops - windowed.fwd_flops;
        /* within 1e-4: the ring's merges of partial outputs (element-wise, fewer under the window) count too */
        ck_assert_msg(fabs(got - saved) <= (ring > 1 ? 1e-4 : 1e-9) * saved, "U%d R%d: the window saves %.6g forward FLOPs, the "
                      "closed form %.6g", 8 / ring, ring, got, saved);
        if (ring == 1) /* Ulysses' all-to-alls carry every token whatever the mask */
            ck_assert_double_eq(windowed.sp_sent_bytes, full.sp_sent_bytes);
        else { /* 1M / 8 = 131072 tokens a rank: a 4096 window reaches the block before, 2 steps of 8 */
            const double X = 131072.0 * 32 * 128 * sizeof(float);
            ck_assert_double_eq(windowed.sp_sent_bytes, ring_sent(2, 1, 131072, 32, 128) * sizeof(float));
            ck_assert_double_eq(windowed.sp_sent_bytes, 8 * X);
            ck_assert_double_eq(full.sp_sent_bytes, full.sp_sent_unmasked_bytes);
            ck_assert_msg(windowed.sp_sent_bytes <= 2.0 / 7.0 * windowed.sp_sent_unmasked_bytes,
                          "R8: %.4g bytes, %.3g of the full ring's", windowed.sp_sent_bytes,
                          windowed.sp_sent_bytes / windowed.sp_sent_unmasked_bytes);
            ck_assert(windowed.step_time_s < full.step_time_s);
        }
        plan_result_free(&full), plan_result_free(&windowed);
    }
}
END_TEST

/* Packed documents of mixed lengths on R8 (issue 47's 60K + 8 x 1K + 3 x 20K, and one with two 40K ones):
 * the ranks' attention balance the planner measures (their attention ops' FLOPs on meta) is the closed
 * form of plan/doc_order.c, in the order given and in the order it finds, which is never less even; one
 * causal sequence is even on zigzag; Ulysses is even whatever the documents. */
START_TEST(packed_documents_balance_as_their_closed_form)
{
    static const int64_t mixed[] = {60000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 20000, 20000, 20000};
    static const int64_t two[] = {8000, 8000, 8000, 40000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000,
                                  1000, 1000, 1000, 1000, 1000, 1000, 1000, 40000, 8000};
    const struct { const int64_t *docs; int64_t n; } cases[] = {{mixed, 12}, {two, 22}};
    for (int k = 0; k < 2; k++) {
        int64_t order[22];
        double planned;
        const double given = plan_documents_balance(cases[k].docs, cases[k].n, 8, 1, 0);
        ck_assert_int_eq(plan_documents_order(cases[k].docs, cases[k].n, 8, 1, 0, order, &planned), USP_OK);
        ck_assert(planned <= given);
        const int64_t *orders[] = {cases[k].docs, order};
        const double closed[] = {given, planned};
        for (int o = 0; o < 2; o++) {
            plan_result r = plan_masked(1, 8, 128000, 0, orders[o], cases[k].n);
            ck_assert_msg(fabs(r.attention_balance - closed[o]) <= 1e-9 * closed[o], "case %d order %d: the plan's "
                          "balance %.12g, the closed form %.12g", k, o, r.attention_balance, closed[o]);
            plan_result_free(&r);
        }
        plan_result u = plan_masked(8, 1, 128000, 0, cases[k].docs, cases[k].n);
        ck_assert_double_eq_tol(u.attention_balance, 1.0, 1e-12);
        plan_result_free(&u);
    }
    const int64_t one = 128000;
    ck_assert_double_eq_tol(plan_documents_balance(&one, 1, 8, 1, 0), 1.0, 1e-12);
    ck_assert(plan_documents_balance(&one, 1, 8, 0, 0) > 1.7); /* contiguous: rank 7 does 15 / 8 of the mean */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("plan_masks");
    TCase *t = tcase_create("plan_masks");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, a_window_prices_its_pairs_and_the_ring_sends_what_it_reaches);
    tcase_add_test(t, packed_documents_balance_as_their_closed_form);
    suite_add_tcase(s, t);
    return check_main_run(s);
}
