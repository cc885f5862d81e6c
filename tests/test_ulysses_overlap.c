/* Ulysses' all-to-alls overlapped with the attention in two head groups (core/parallel/ulysses.c,
 * run_groups).
 *
 * - The overlap changes no bit: trained on the cpu backend with it on and off, the first step's
 *   gradients and the last weights are the same bits (each head's attention is independent of the
 *   others'; only the order of the calls changes).
 * - Its event waits are needed: on the lazy backend (work runs as late as the stream contract
 *   allows, and its order checker stops a run at two accesses of one buffer from two streams that
 *   nothing orders), the run with every wait gives the cpu run's bits, and the run without one of
 *   them (the test hook) is stopped where it goes wrong: without "inputs" the first pack reads
 *   q, k, v (dO) before they are written, without "arrived" a group's attention reads its heads
 *   before they are unpacked, without "computed" a group's output (gradients) leaves before its
 *   attention wrote it, without "done" the caller reads o (dq, dk, dv) before the last group's
 *   came home. (Before the checker, "arrived" could not be shown: the lazy backend happens to run
 *   the unpack first whatever the waits.)
 * - auto decides on shapes alone: off for a small step, on for a group's attention of 1e10 FLOPs
 *   and 4 MiB exchanges; on and off force it, except where each rank's KV heads do not split in
 *   two (then it is off); anything else is refused.
 * - The simulator models it (usp plan, llama-7b U 8 x DP 8 at 32K on 64 GPUs of dgx-h100): the
 *   same compute, more communication hidden, less exposed, a shorter step; and with the
 *   overlap refused (off) the plan is the one without it. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_backend.h"
#include "backends/lazy/lazy_backend.h"
#include "core/parallel/ring.h"
#include "core/parallel/ulysses.h"
#include "tests/check_main.h"
#include "tests/harness.h"
#include "tools/commands.h"

/* A small Llama with GQA on 4 ranks: U 4 (case 0: 4 query and 2 KV heads a rank), U 2 x DP 2
 * (case 1: 8 and 4) or the hybrid U 2 x R 2 (case 2: 8 and 4, each group's attention a ring of 2),
 * three steps of two sequences. */
static const int case_ulysses[] = {4, 2, 2}, case_ring[] = {1, 1, 2};
static const char *const case_name[] = {"U 4", "U 2 x DP 2", "U 2 x R 2"};

static usp_train_config config_for(int i, usp_overlap overlap)
{
    const int ulysses = case_ulysses[i], ring = case_ring[i];
    usp_train_config c;
    usp_train_defaults(&c);
    ck_assert_int_eq(usp_model_config_preset("tiny", &c.model), USP_OK);
    c.model.vocab = 128, c.model.n_layer = 2, c.model.d_model = 64, c.model.n_head = 16, c.model.n_kv_head = 8;
    c.model.d_ff = 48, c.model.max_seq = 64;
    ck_assert_int_eq(usp_mesh_shape_make(4, ulysses, ring, &c.shape), USP_OK);
    c.data = "passkey", c.seq_len = 64, c.batch = 2, c.steps = 3, c.warmup = 1, c.eval_samples = 0;
    c.ulysses_overlap = overlap;
    return c;
}

START_TEST(the_overlap_changes_no_bit)
{
    usp_train_config on = config_for(_i, USP_OVERLAP_ON), off = config_for(_i, USP_OVERLAP_OFF);
    size_t n;
    long d = harness_runs_differing(&on, &off, &n);
    ck_assert_msg(d >= 0, "%s", usp_error_message());
    printf("%s: %ld of %zu gradients and weights differ with the overlap on and off\n", case_name[_i], d, n);
    ck_assert_msg(d == 0, "the overlap changed %ld of %zu bits-compared floats", d, n);
}
END_TEST

START_TEST(each_wait_of_the_overlap_is_needed)
{
    usp_train_config c = config_for(_i, USP_OVERLAP_ON);
    static const harness_wait waits[] = {
        {ULYSSES_WAIT_INPUTS, "the first pack's wait for the inputs (inputs)"},
        {ULYSSES_WAIT_ARRIVED, "a group's attention's wait for its heads (arrived)"},
        {ULYSSES_WAIT_COMPUTED, "a group's output's wait for its attention (computed)"},
        {ULYSSES_WAIT_DONE, "the caller's wait for the last group's output (done)"}};
    char why[512];
    ck_assert_msg(harness_check_waits(&c, ulysses_attention_skip_waits_for_tests, waits, 4, case_name[_i], why,
                                      sizeof why) == 0, "%s", why);
    if (case_ring[_i] == 1)
        return;
    /* the hybrid: the ring's transfers share the comm stream, its backward overlapped; its waits too */
    static const harness_wait ring_waits[] = {
        {RING_WAIT_PACKED, "the ring's first send's wait for the packed block (packed)"},
        {RING_WAIT_DONE, "the ring's dK/dV's wait for their attention (done)"},
        {RING_WAIT_ARRIVED, "the ring attention's wait for its block (arrived)"}};
    ck_assert_msg(harness_check_waits(&c, ring_attention_skip_waits_for_tests, ring_waits, 3, case_name[_i], why,
                                      sizeof why) == 0, "%s", why);
}
END_TEST

/* One causal Ulysses attention over the world of batch 1, n tokens, H heads (Hkv KV heads) of 128:
 * does it overlap? *status: its creation's. */
static int overlaps(const usp_rank_ctx *ctx, int64_t n, int64_t H, int64_t Hkv, usp_overlap mode, usp_status *status)
{
    ulysses_attention_config c = {.backend = ctx->backend, .stream = ctx->stream, .ulysses = ctx->world, .batch = 1,
                                  .seq_len = n, .n_heads = H, .n_kv_heads = Hkv, .head_dim = 128, .causal = 1,
                                  .overlap = mode};
    ulysses_attention *a = NULL;
    *status = ulysses_attention_create(&c, &a);
    int got = ulysses_attention_overlaps(a);
    ulysses_attention_destroy(a);
    return got;
}

static usp_status decide(const usp_rank_ctx *ctx, void *arg)
{
    (void)arg;
    usp_status s;
    /* U 2, 16 heads: a group is 4 heads a rank. At 4096 tokens its attention is 2 x 4096^2 x 4 x 128 =
     * 1.7e10 FLOPs and its q exchange 2048 x 4 x 128 x 4 bytes = 4 MiB a rank; at 64 tokens far less. */
    static const struct {
        const char *what;
        int64_t n, Hkv;
        usp_overlap mode;
        int want;
    } cases[] = {{"auto at 1.7e10 FLOPs, 4 MiB", 4096, 16, USP_OVERLAP_AUTO, 1},
                 {"auto at 64 tokens", 64, 16, USP_OVERLAP_AUTO, 0},
                 {"on at 64 tokens", 64, 16, USP_OVERLAP_ON, 1},
                 {"off at 4096 tokens", 4096, 16, USP_OVERLAP_OFF, 0},
                 {"on with one KV head a rank (GQA 8:1)", 64, 2, USP_OVERLAP_ON, 0},
                 {"on with a KV head shared by the two ranks", 64, 1, USP_OVERLAP_ON, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int got = overlaps(ctx, cases[i].n, 16, cases[i].Hkv, cases[i].mode, &s);
        USP_CHECK(s);
        USP_CHECK(harness_expect_eq(ctx, cases[i].what, 0, got, cases[i].want));
    }
    overlaps(ctx, 64, 16, 16, (usp_overlap)7, &s);
    return harness_expect_eq(ctx, "overlap 7 refused", 0, s, USP_ERR_CONFIG);
}

START_TEST(auto_decides_on_shapes_and_on_off_force_it)
{
    char report[2048];
    ck_assert_msg(harness_run(2, decide, NULL, NULL, 0, report, sizeof report) == USP_OK, "%s", report);
}
END_TEST

/* usp plan argv with --ulysses-overlap off and auto: the same compute, more hidden, less exposed, and
 * the step shorter than `most` x the one without. */
static void expect_the_plan_hides_more(char **argv, int argc, const char *label, double most)
{
    double f[2][HARNESS_PLAN_FIGURES];
    char why[1 << 12];
    ck_assert_msg(harness_plan_overlap(cmd_plan, argv, argc, "--ulysses-overlap", label, f[0], f[1], why,
                                       sizeof why) == 0, "%s", why);
    ck_assert_double_eq_tol(f[1][1], f[0][1], 1e-9 * f[0][1]); /* the same ops */
    ck_assert(f[1][2] > f[0][2]);
    ck_assert(f[1][3] < f[0][3]);
    ck_assert(f[1][0] < most * f[0][0]);
}

/* llama-7b, U 8 x DP 8 at 32K tokens on 64 GPUs of dgx-h100. */
START_TEST(the_plan_hides_more_and_the_step_is_shorter)
{
    char *argv[] = {"usp", "plan", "--model", "llama-7b", "--dtype", "bf16", "--zero", "1", "--seq", "32768",
                    "--world", "64", "--nodes", "8", "--ulysses", "8", "--batch", "8", "--topology", "dgx-h100"};
    expect_the_plan_hides_more(argv, (int)(sizeof argv / sizeof *argv), "U 8 x DP 8, 32K, dgx-h100", 1.0);
}
END_TEST

/* llama-7b, the hybrid U 8 x R 2 at 512K tokens on 16 GPUs of pcie-gen4 (planned 157.4 -> 136.0 s). Before
 * the ring's transfers shared the all-to-alls' stream the hybrid had no Ulysses overlap. */
START_TEST(the_hybrids_plan_hides_more_and_the_step_is_shorter)
{
    char *argv[] = {"usp", "plan", "--model", "llama-7b", "--dtype", "bf16", "--zero", "1", "--seq", "524288",
                    "--world", "16", "--nodes", "2", "--ulysses", "8", "--ring", "2", "--topology", "pcie-gen4"};
    expect_the_plan_hides_more(argv, (int)(sizeof argv / sizeof *argv), "U 8 x R 2, 512K, pcie-gen4", 0.9);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ulysses_overlap");
    TCase *tc = tcase_create("ulysses_overlap");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, the_overlap_changes_no_bit, 0, 3);
    tcase_add_loop_test(tc, each_wait_of_the_overlap_is_needed, 0, 3);
    tcase_add_test(tc, auto_decides_on_shapes_and_on_off_force_it);
    tcase_add_test(tc, the_plan_hides_more_and_the_step_is_shorter);
    tcase_add_test(tc, the_hybrids_plan_hides_more_and_the_step_is_shorter);
    suite_add_tcase(s, tc);
    return check_main_run(s);
}
