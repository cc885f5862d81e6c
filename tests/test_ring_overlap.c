/* The ring backward overlapped with its transfers (core/parallel/ring.c, backward_overlapped).
 *
 * - The overlap changes no bit: trained on the cpu backend with it on and off,
 *   the first step's gradients and the last weights are the same bits (each
 *   block's dK/dV are summed in the same ring order either way).
 * - Each of its three event waits is needed: on the lazy backend (work runs as
 *   late as the stream contract allows, and its order checker stops a run at
 *   two accesses from two streams that nothing orders), the run with every
 *   wait gives the cpu run's bits, and the run without one of them (the test
 *   hook) is stopped where it goes wrong:
 *   without "packed" the first send reads the block before it is packed,
 *   without "done" dK/dV leave before the attention has added to them, without
 *   "arrived" our block's dK/dV are copied home before the last hop lands.
 * - auto decides on shapes alone: off for a test model's step, on for a
 *   step of 1e10 FLOPs or more; on and off force it; anything else is refused.
 * - The simulator models it (usp plan, llama-7b R 8 at 128K on pcie-gen4): the
 *   same compute, more communication hidden, less exposed, a shorter step. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_backend.h"
#include "backends/lazy/lazy_backend.h"
#include "core/parallel/ring.h"
#include "tests/check_main.h"
#include "tests/harness.h"
#include "tools/commands.h"

/* A small Llama on 4 ranks: R 4 (case 0) or U 2 x R 2 (case 1), three steps of two sequences. */
static usp_train_config config_for(int ring, usp_overlap overlap)
{
    usp_train_config c;
    usp_train_defaults(&c);
    ck_assert_int_eq(usp_model_config_preset("tiny", &c.model), USP_OK);
    c.model.vocab = 128, c.model.n_layer = 2, c.model.d_model = 32, c.model.n_head = 4, c.model.n_kv_head = 2;
    c.model.d_ff = 48, c.model.max_seq = 64;
    ck_assert_int_eq(usp_mesh_shape_make(4, 4 / ring, ring, &c.shape), USP_OK);
    c.data = "passkey", c.seq_len = 64, c.batch = 2, c.steps = 3, c.warmup = 1, c.eval_samples = 0;
    c.ring_backward_overlap = overlap;
    return c;
}

START_TEST(the_overlap_changes_no_bit)
{
    const int ring = _i == 0 ? 4 : 2;
    usp_train_config on = config_for(ring, USP_OVERLAP_ON), off = config_for(ring, USP_OVERLAP_OFF);
    size_t n;
    long d = harness_runs_differing(&on, &off, &n);
    ck_assert_msg(d >= 0, "%s", usp_error_message());
    printf("R %d: %ld of %zu gradients and weights differ with the overlap on and off\n", ring, d, n);
    ck_assert_msg(d == 0, "the overlap changed %ld of %zu bits-compared floats", d, n);
}
END_TEST

START_TEST(each_wait_of_the_overlap_is_needed)
{
    const int ring = _i == 0 ? 4 : 2;
    usp_train_config c = config_for(ring, USP_OVERLAP_ON);
    static const harness_wait waits[] = {
        {RING_WAIT_PACKED, "the first send's wait for the packed block (packed)"},
        {RING_WAIT_DONE, "dK/dV's wait for their attention (done)"},
        {RING_WAIT_ARRIVED, "the attention's wait for its block (arrived)"}};
    char label[32], why[256];
    snprintf(label, sizeof label, "R %d", ring);
    ck_assert_msg(harness_check_waits(&c, ring_attention_skip_waits_for_tests, waits, 3, label, why, sizeof why) == 0,
                  "%s", why);
}
END_TEST

/* One ring attention of batch 1 over n tokens with `heads` heads of 128: does its backward overlap? */
static usp_status overlaps(const usp_rank_ctx *ctx, int64_t n, int64_t heads, usp_overlap mode, int *out)
{
    ring_attention_config c = {.backend = ctx->backend, .ring = ctx->world, .batch = 1, .n_heads = heads,
                               .n_kv_heads = heads, .head_dim = 128, .causal = 1, .scale = 1,
                               .backward_overlap = mode};
    USP_CHECK(usp_seq_layout_make(USP_LAYOUT_ZIGZAG, n, 1, usp_comm_size(ctx->world), &c.layout));
    ring_attention *a = NULL;
    usp_status s = ring_attention_create(&c, &a);
    *out = ring_attention_backward_overlaps(a);
    ring_attention_destroy(a);
    return s;
}

static usp_status decide(const usp_rank_ctx *ctx, void *arg)
{
    (void)arg;
    int got;
    /* 64 tokens a rank, 4 heads: 10 * 4 * 128 * 64^2 / 2 = 1.0e7 FLOPs a step */
    USP_CHECK(overlaps(ctx, 128, 4, USP_OVERLAP_AUTO, &got));
    USP_CHECK(harness_expect_eq(ctx, "auto at 1e7 FLOPs a step", 0, got, 0));
    USP_CHECK(overlaps(ctx, 128, 4, USP_OVERLAP_ON, &got));
    USP_CHECK(harness_expect_eq(ctx, "on at 1e7 FLOPs a step", 0, got, 1));
    /* 4096 tokens a rank, 32 heads: 10 * 32 * 128 * 4096^2 / 2 = 3.4e11 FLOPs a step (R 2 at 8K, llama-7b) */
    USP_CHECK(overlaps(ctx, 8192, 32, USP_OVERLAP_AUTO, &got));
    USP_CHECK(harness_expect_eq(ctx, "auto at 3.4e11 FLOPs a step", 0, got, 1));
    USP_CHECK(overlaps(ctx, 8192, 32, USP_OVERLAP_OFF, &got));
    USP_CHECK(harness_expect_eq(ctx, "off at 3.4e11 FLOPs a step", 0, got, 0));
    usp_status s = overlaps(ctx, 128, 4, (usp_overlap)7, &got);
    return harness_expect_eq(ctx, "backward_overlap 7 refused", 0, s, USP_ERR_CONFIG);
}

START_TEST(auto_decides_on_shapes_and_on_off_force_it)
{
    char report[2048];
    ck_assert_msg(harness_run(2, decide, NULL, NULL, 0, report, sizeof report) == USP_OK, "%s", report);
}
END_TEST

/* `usp plan` of llama-7b, R 8 at 128K tokens on pcie-gen4, --ring-overlap off and auto. */
START_TEST(the_plan_hides_more_and_the_step_is_shorter)
{
    char *argv[] = {"usp", "plan", "--model", "llama-7b", "--dtype", "bf16", "--zero", "1", "--seq", "131072",
                    "--world", "8", "--ring", "8", "--topology", "pcie-gen4"};
    double f[2][HARNESS_PLAN_FIGURES];
    char why[1 << 12];
    ck_assert_msg(harness_plan_overlap(cmd_plan, argv, (int)(sizeof argv / sizeof *argv), "--ring-overlap",
                                       "R 8, 128K, pcie-gen4", f[0], f[1], why, sizeof why) == 0, "%s", why);
    ck_assert_double_eq_tol(f[1][1], f[0][1], 1e-9 * f[0][1]); /* the same ops */
    ck_assert(f[1][2] > f[0][2] + 1.0);                     /* the backward's K/V, 1 s and more */
    ck_assert(f[1][3] < f[0][3] - 1.0);
    ck_assert(f[1][0] < f[0][0] - 1.0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ring_overlap");
    TCase *tc = tcase_create("ring_overlap");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, the_overlap_changes_no_bit, 0, 2);
    tcase_add_loop_test(tc, each_wait_of_the_overlap_is_needed, 0, 2);
    tcase_add_test(tc, auto_decides_on_shapes_and_on_off_force_it);
    tcase_add_test(tc, the_plan_hides_more_and_the_step_is_shorter);
    suite_add_tcase(s, tc);
    return check_main_run(s);
}
