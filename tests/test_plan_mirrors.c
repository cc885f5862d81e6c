/* A plan that runs one rank of each Ulysses group (sim/mirrors.c) reports what
 * the plan that runs every rank reports: every figure of plan_result, the peak
 * of every rank included, bit for bit (tolerance 0: the mirrors are exact or
 * they are a bug). The reference is the same planner with every rank simulated
 * (plan_run_sharing, share 1), on clusters where the lanes of a Ulysses group
 * share no link (dgx-h100: a NIC a GPU), share NICs (dgx-a100: one NIC for two
 * GPUs) and share PCIe switches (pcie-gen4), with DP replicas, GQA, GPT-2 and
 * memory options; and on one where the lanes route differently (U 3 across
 * nodes of 8), which must fall back to simulating every rank, as ZeRO must
 * (each rank updates its own shard of the optimizer, in ops of other sizes). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/train/train.h"
#include "plan/plan.h"
#include "tests/check_main.h"

typedef struct mirror_case {
    const char *cluster;
    int nodes, world, ulysses, ring;
    int64_t batch;
    int gpt2, kv_heads, heads;
    int bf16_recompute;      /* --dtype bf16 --recompute --tiled-loss: other code paths of the step */
} mirror_case;

static const mirror_case cases[] = {
    {"dgx-h100", 2, 16, 8, 2, 1, 0, 8, 8, 0},
    {"dgx-h100", 1, 8, 2, 2, 2, 0, 2, 4, 1},  /* DP 2, GQA, memory options */
    {"dgx-a100", 4, 32, 4, 4, 2, 0, 4, 8, 0}, /* DP 2, two GPUs a NIC */
    {"pcie-gen4", 2, 16, 2, 4, 2, 1, 4, 4, 0}, /* GPT-2, DP 2, PCIe switches */
    {"dgx-h100", 2, 16, 4, 4, 1, 1, 4, 4, 1},
};

static usp_train_config config_of(const mirror_case *k)
{
    usp_train_config c;
    usp_train_defaults(&c);
    ck_assert_int_eq(usp_model_config_preset(k->gpt2 ? "gpt2-124m" : "tiny", &c.model), USP_OK);
    c.model.vocab = 128, c.model.n_layer = 2, c.model.d_model = 16 * k->heads, c.model.d_ff = 96;
    c.model.n_head = k->heads, c.model.n_kv_head = k->kv_heads, c.model.max_seq = 4096;
    ck_assert_int_eq(usp_mesh_shape_make(k->world, k->ulysses, k->ring, &c.shape), USP_OK);
    c.data = "passkey", c.seq_len = 64 * k->ulysses * k->ring, c.batch = k->batch, c.steps = 1;
    if (k->bf16_recompute)
        c.storage = USP_BF16, c.recompute_layers = 1, c.tiled_loss = 1;
    return c;
}

static sim_cost_model cluster(const char *preset, int nodes)
{
    sim_cost_model m = {.dtype = USP_BF16};
    ck_assert(sim_topology_preset(preset, nodes, &m.topology));
    return m;
}

#define SAME(field) ck_assert_msg(a->field == b->field, "%s: %s %.17g mirrored, %.17g every rank", what, #field, \
                                  (double)a->field, (double)b->field)

static void assert_same_plan(const plan_result *a, const plan_result *b, const char *what)
{
    SAME(tokens), SAME(fwd_flops), SAME(step_flops), SAME(recompute_flops), SAME(critical_rank);
    SAME(step_time_s), SAME(compute_time_s), SAME(comm_time_s), SAME(wait_time_s), SAME(exposed_comm_s);
    SAME(comm_exposed_s), SAME(comm_hidden_s), SAME(wait_hidden_s), SAME(tokens_per_s), SAME(peak_flops);
    SAME(mfu), SAME(peak_rank), SAME(n_categories), SAME(capacity_bytes), SAME(fits);
    for (int i = 0; i < a->n_categories; i++) {
        ck_assert_str_eq(a->category[i], b->category[i]);
        SAME(category_bytes[i]);
    }
    for (int r = 0; r < a->shape.world; r++)
        SAME(peak_bytes[r]);
}

/* Plans c on m with `share` into *shared and with every rank into *full; the first ran
 * `simulated` ranks. */
static void plan_both(const usp_train_config *c, const sim_cost_model *m, int share, int simulated,
                      plan_result *shared, plan_result *full)
{
    ck_assert_msg(plan_run_sharing(c, m, NULL, share, shared) == USP_OK, "%s", usp_error_message());
    ck_assert_msg(plan_run_sharing(c, m, NULL, 1, full) == USP_OK, "%s", usp_error_message());
    ck_assert_int_eq(shared->simulated_ranks, simulated);
    ck_assert_int_eq(full->simulated_ranks, c->shape.world);
}

START_TEST(a_mirrored_plan_reports_every_figure_of_the_full_one)
{
    const mirror_case *k = &cases[_i];
    usp_train_config c = config_of(k);
    sim_cost_model m = cluster(k->cluster, k->nodes);
    plan_result mirrored, full;
    plan_both(&c, &m, PLAN_SHARE_EXACT, k->world / k->ulysses, &mirrored, &full); /* the mirrors stood in */
    char what[128];
    snprintf(what, sizeof what, "%s x %d, W %d = U %d x R %d x DP %d", k->cluster, k->nodes, k->world, k->ulysses,
             k->ring, c.shape.dp);
    ck_assert(full.step_time_s > 0 && full.comm_time_s > 0); /* a step that talks, not an empty one */
    assert_same_plan(&mirrored, &full, what);
    plan_result_free(&mirrored);
    plan_result_free(&full);
}
END_TEST

/* U 3 on nodes of 8 GPUs (pcie-gen4): the Ulysses group of ranks 6, 7, 8 straddles two nodes, so its
 * lanes' ring transfers cross different links and end at different times: the mirrors cannot stand in,
 * and the plan is that of every rank. */
START_TEST(lanes_that_route_differently_fall_back_to_every_rank)
{
    mirror_case k = {"pcie-gen4", 2, 12, 3, 4, 1, 0, 6, 6, 0};
    usp_train_config c = config_of(&k);
    sim_cost_model m = cluster(k.cluster, k.nodes);
    plan_result mirrored, full;
    plan_both(&c, &m, PLAN_SHARE_EXACT, k.world, &mirrored, &full);
    assert_same_plan(&mirrored, &full, "pcie-gen4 x 2, W 12 = U 3 x R 4");
    plan_result_free(&mirrored);
    plan_result_free(&full);
}
END_TEST

/* ZeRO: each rank updates its own shard, in ops of other sizes, so its clock ends some ulps from its
 * Ulysses peers' (the plan's wait_time_s at W = 512 with --zero 1: 5.7e-14 s, 0 when mirrored): every
 * rank runs, and the figures are those of every rank. */
START_TEST(a_zero_plan_runs_every_rank)
{
    usp_train_config c = config_of(&cases[3]);
    c.zero_stage = 1;
    sim_cost_model m = cluster(cases[3].cluster, cases[3].nodes);
    plan_result auto_share, full;
    plan_both(&c, &m, PLAN_SHARE_EXACT, c.shape.world, &auto_share, &full);
    assert_same_plan(&auto_share, &full, "--zero 1");
    plan_result_free(&auto_share);
    plan_result_free(&full);
}
END_TEST

/* The fit search's share (PLAN_SHARE_ROUNDED) mirrors ZeRO plans: the peaks are every rank's, bit for
 * bit, and the step time within 1e-12 relative (the ulps a shard's own ops move a clock by; the search
 * prints 4 digits). */
START_TEST(a_rounded_zero_plan_keeps_the_bytes_and_the_printed_time)
{
    for (int zero = 1; zero <= 3; zero++) {
        usp_train_config c = config_of(&cases[3]);
        c.zero_stage = zero;
        sim_cost_model m = cluster(cases[3].cluster, cases[3].nodes);
        plan_result mirrored, full;
        plan_both(&c, &m, PLAN_SHARE_ROUNDED, c.shape.world / c.shape.ulysses, &mirrored, &full);
        for (int r = 0; r < c.shape.world; r++)
            ck_assert_uint_eq(mirrored.peak_bytes[r], full.peak_bytes[r]);
        ck_assert_int_eq(mirrored.fits, full.fits);
        ck_assert_msg(fabs(mirrored.step_time_s - full.step_time_s) <= 1e-12 * full.step_time_s,
                      "--zero %d: step %.17g mirrored, %.17g every rank", zero, mirrored.step_time_s,
                      full.step_time_s);
        plan_result_free(&mirrored);
        plan_result_free(&full);
    }
}
END_TEST

/* A traced plan records every rank's events: every rank runs. */
START_TEST(a_traced_plan_runs_every_rank)
{
    usp_train_config c = config_of(&cases[0]);
    sim_cost_model m = cluster(cases[0].cluster, cases[0].nodes);
    plan_result r;
    char path[] = "/tmp/usp_plan_mirrors_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_msg(plan_run_sharing(&c, &m, path, 0, &r) == USP_OK, "%s", usp_error_message());
    ck_assert_int_eq(r.simulated_ranks, c.shape.world);
    plan_result_free(&r);
    unlink(path);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("plan_mirrors");
    TCase *t = tcase_create("mirrors");
    tcase_set_timeout(t, 300);
    tcase_add_loop_test(t, a_mirrored_plan_reports_every_figure_of_the_full_one, 0,
                        (int)(sizeof cases / sizeof cases[0]));
    tcase_add_test(t, lanes_that_route_differently_fall_back_to_every_rank);
    tcase_add_test(t, a_zero_plan_runs_every_rank);
    tcase_add_test(t, a_rounded_zero_plan_keeps_the_bytes_and_the_printed_time);
    tcase_add_test(t, a_traced_plan_runs_every_rank);
    suite_add_tcase(s, t);
    return check_main_run(s);
}
