/* The planner under a sliding window (issue 47): the attention's FLOPs are the visible pairs' (the
 * closed form W N - W (W - 1) / 2 of a causal window against N (N + 1) / 2), and the ring's exchanges
 * shrink to the blocks the window reaches (at most 2 / (R - 1) of the full ring's at 1M tokens on R8
 * with a 4096-token window) while Ulysses' do not change. */
#include <check.h>
#include <math.h>

#include "core/parallel/ring.h"
#include "core/train/train.h"
#include "plan/plan.h"
#include "tests/check_main.h"
#include "tests/harness.h"

/* Plans llama-7b at 1M tokens on 8 H100s, U x R, with `window` (0: none). */
static plan_result plan_window(int ulysses, int ring, int64_t window)
{
    usp_train_config c;
    ck_assert_int_eq(harness_config("llama-7b", 8, ulysses, ring, 1 << 20, 1, &c), USP_OK);
    c.window = window;
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
        plan_result full = plan_window(8 / ring, ring, 0), windowed = plan_window(8 / ring, ring, 4096);
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

int main(void)
{
    return check_main_one("plan_masks", a_window_prices_its_pairs_and_the_ring_sends_what_it_reaches, 120);
}
