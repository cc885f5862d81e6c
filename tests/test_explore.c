/* Exploration of the GPUs' orders (sim/explore.h) and the schedule lint
 * (sim/schedule_lint.h), on small programs whose answer is known by hand.
 *
 * The program: every rank all-reduces a "bucket" over the world on a stream
 * of its own, then all-to-alls over a second group with the same members on
 * the default stream. The hosts issue the two in the same order everywhere,
 * so the plain simulator (hosts blocking in each call) passes every variant.
 * On GPUs that run one collective kernel at a time (K = 1), rank 0 may start
 * the all-reduce while rank 1 starts the all-to-all: each waits for the other
 * for ever, unless something orders the two on every rank (an event the
 * default stream waits for, or a synchronize of the bucket's stream). With
 * K = 2 both kernels run at once and nothing hangs, though the lint still
 * flags the pair: it holds for any K (NCCL calls on two streams). An event
 * recorded before the all-reduce was enqueued orders nothing. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "backends/meta/meta_backend.h"
#include "core/comm/comm.h"
#include "core/model/grad_buckets.h"
#include "core/model/model_config.h"
#include "core/train/train.h"
#include "sim/explore.h"
#include "sim/schedule_lint.h"
#include "sim/world.h"
#include "tests/check_main.h"

typedef enum order_fix { FIX_NONE, FIX_EVENT, FIX_SYNC, FIX_EARLY_EVENT } order_fix;

static usp_status two_streams_rank(const usp_rank_ctx *ctx, void *arg)
{
    order_fix fix = *(const order_fix *)arg;
    usp_backend_t *be = ctx->backend;
    usp_comm_t *g = NULL;
    usp_stream_t *grad = NULL;
    usp_event_t *reduced = NULL;
    void *a = NULL, *b = NULL;
    int n = usp_comm_size(ctx->world);
    usp_status s = usp_comm_split(ctx->world, 0, ctx->rank, "ulysses", &g);
    if (s == USP_OK) s = usp_stream_create(be, &grad);
    if (s == USP_OK) s = usp_event_create(be, &reduced);
    if (s == USP_OK) s = usp_buffer_alloc(be, (size_t)n * 4 * sizeof(float), "test", &a);
    if (s == USP_OK) s = usp_buffer_alloc(be, (size_t)n * 4 * sizeof(float), "test", &b);
    if (s == USP_OK && fix == FIX_EARLY_EVENT) s = usp_event_record(be, reduced, grad);
    if (s == USP_OK) s = usp_comm_all_reduce(ctx->world, a, a, 4, USP_F32, USP_REDUCE_SUM, grad);
    if (s == USP_OK && fix == FIX_EVENT) s = usp_event_record(be, reduced, grad);
    if (s == USP_OK && (fix == FIX_EVENT || fix == FIX_EARLY_EVENT)) s = usp_stream_wait_event(be, NULL, reduced);
    if (s == USP_OK && fix == FIX_SYNC) s = usp_backend_synchronize(be, grad);
    if (s == USP_OK) s = usp_comm_all_to_all(g, b, a, 4, USP_F32, NULL);
    if (s == USP_OK) s = usp_backend_synchronize(be, NULL);
    usp_buffer_free(be, a), usp_buffer_free(be, b);
    usp_event_destroy(be, reduced);
    usp_status d = usp_stream_destroy(be, grad);
    usp_comm_destroy(g);
    return s != USP_OK ? s : d;
}

/* Runs the program on `world` ranks (plain simulator, logging): it must pass. */
static sim_world *run_logged(int world, order_fix fix)
{
    sim_config config = sim_config_default(world);
    config.trace = 0;
    config.record_schedule = 1;
    config.stack_bytes = (size_t)256 << 10;
    config.make_backend = usp_backend_meta_create;
    sim_world *w;
    ck_assert_int_eq(sim_world_create(&config, &w), USP_OK);
    usp_status s = sim_world_run(w, two_streams_rank, &fix);
    ck_assert_msg(s == USP_OK, "the plain simulator must pass: %s", usp_error_message());
    return w;
}

static void explore(sim_world *w, int slots, sim_explore_result *res)
{
    sim_explore_options o = {.slots = slots};
    ck_assert_msg(sim_explore(w, &o, res) == USP_OK, "%s", usp_error_message());
}

/* The lint's pairs; a finding must name a call site in `file`. */
static uint64_t lint_pairs_in(sim_world *w, const char *file)
{
    sim_lint_result lint;
    ck_assert_msg(sim_schedule_lint(w, &lint) == USP_OK, "%s", usp_error_message());
    uint64_t pairs = lint.pairs;
    if (pairs)
        ck_assert_msg(strstr(usp_strbuf_text(&lint.report), file), "%s",
                      usp_strbuf_text(&lint.report));
    sim_lint_result_free(&lint);
    return pairs;
}

static uint64_t lint_pairs(sim_world *w) { return lint_pairs_in(w, "tests/test_explore.c:"); }

START_TEST(unordered_deadlocks_with_one_slot)
{
    sim_world *w = run_logged(2, FIX_NONE);
    sim_explore_result res;
    explore(w, 1, &res);
    const char *text = usp_strbuf_text(&res.report);
    ck_assert_msg(res.deadlock, "explored %llu states without the deadlock", (unsigned long long)res.states);
    ck_assert_msg(res.choices >= 1, "a choice must have been made");
    /* the report names both groups, both ranks, both call sites, and the cycle */
    ck_assert_msg(strstr(text, "all_reduce #2 on world") && strstr(text, "on ulysses") && strstr(text, "rank 0") &&
                  strstr(text, "rank 1") && strstr(text, "a cycle") && strstr(text, "the orders that conflict"),
                  "%s", text);
    ck_assert_msg(strstr(text, "tests/test_explore.c:"), "%s", text);
    ck_assert_int_eq(res.snapshot.kind, USP_REPORT_DEADLOCK);
    ck_assert_int_eq(lint_pairs(w), 2); /* one pair on each rank */
    sim_explore_result_free(&res);
    sim_world_destroy(w);
}
END_TEST

START_TEST(two_slots_run_both_kernels)
{
    sim_world *w = run_logged(2, FIX_NONE);
    sim_explore_result res;
    explore(w, 2, &res);
    ck_assert_msg(!res.deadlock && res.exhaustive, "%s", usp_strbuf_text(&res.report));
    ck_assert_int_eq(lint_pairs(w), 2); /* the lint's rule holds for any K */
    sim_explore_result_free(&res);
    sim_world_destroy(w);
}
END_TEST

/* An event after the all-reduce, or a synchronize of its stream, orders the two on every GPU. */
START_TEST(ordered_passes)
{
    order_fix fixes[] = {FIX_EVENT, FIX_SYNC};
    for (int i = 0; i < 2; i++) {
        sim_world *w = run_logged(4, fixes[i]);
        sim_explore_result res;
        explore(w, 1, &res);
        ck_assert_msg(!res.deadlock && res.exhaustive, "fix %d: %s", i, usp_strbuf_text(&res.report));
        ck_assert_msg(res.choices == 0, "fix %d: no GPU has a choice, yet %llu", i, (unsigned long long)res.choices);
        ck_assert_int_eq(lint_pairs(w), 0);
        sim_explore_result_free(&res);
        sim_world_destroy(w);
    }
}
END_TEST

START_TEST(event_recorded_too_early_orders_nothing)
{
    sim_world *w = run_logged(4, FIX_EARLY_EVENT);
    sim_explore_result res;
    explore(w, 1, &res);
    ck_assert_msg(res.deadlock, "the event was recorded before the all-reduce: it orders nothing (%llu states, "
                  "%llu choices)", (unsigned long long)res.states, (unsigned long long)res.choices);
    ck_assert_int_eq(lint_pairs(w), 4);
    sim_explore_result_free(&res);
    sim_world_destroy(w);
}
END_TEST

/* A world run without the log cannot be explored: an error that says so, not a silent pass. */
START_TEST(no_log_is_refused)
{
    sim_config config = sim_config_default(2);
    config.trace = 0;
    config.make_backend = usp_backend_meta_create;
    sim_world *w;
    ck_assert_int_eq(sim_world_create(&config, &w), USP_OK);
    order_fix fix = FIX_EVENT;
    ck_assert_int_eq(sim_world_run(w, two_streams_rank, &fix), USP_OK);
    sim_explore_result res;
    sim_explore_options o = {.slots = 1};
    ck_assert_int_eq(sim_explore(w, &o, &res), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "logged no schedule"), "%s", usp_error_message());
    sim_world_destroy(w);
}
END_TEST

/* The training step's gradient buckets (core/model/grad_buckets.h): every layer a bucket, all-reduced over
 * the world on a stream of their own beside the backward, DP 2 x Ulysses 2. The compute stream waits for
 * the buckets in flight before the next layer's all-to-all; without that wait (the tests' hook) some
 * order of the GPUs deadlocks, and the exploration must say so. Shapes only (meta backend): the schedule is
 * the same. */
static int training_step_deadlocks(unsigned skipped_waits)
{
    usp_train_config c;
    usp_train_defaults(&c);
    ck_assert_int_eq(usp_model_config_preset("tiny", &c.model), USP_OK);
    ck_assert_int_eq(usp_mesh_shape_make(4, 2, 1, &c.shape), USP_OK);
    c.data = "passkey", c.seq_len = 64, c.batch = 2, c.steps = 1, c.warmup = 0, c.eval_samples = 0;
    c.bucket_mb = 1e-9;
    sim_config config = sim_config_default(4);
    config.trace = 0, config.record_schedule = 1, config.make_backend = usp_backend_meta_create;
    sim_world *w;
    ck_assert_int_eq(sim_world_create(&config, &w), USP_OK);
    usp_train_result result = {.passkey_accuracy = -1};
    usp_train_run run = {.config = &c, .result = &result};
    usp_grad_buckets_skip_waits_for_tests(skipped_waits);
    usp_status s = sim_world_run(w, usp_train_rank, &run);
    usp_grad_buckets_skip_waits_for_tests(0);
    ck_assert_msg(s == USP_OK, "the plain simulator must pass: %s", usp_error_message());
    sim_explore_result res;
    explore(w, 1, &res);
    ck_assert_msg(res.exhaustive || res.deadlock, "the search was cut");
    int deadlock = res.deadlock;
    if (deadlock)
        ck_assert_msg(strstr(usp_strbuf_text(&res.report), "core/model/grad_buckets.c:") &&
                      strstr(usp_strbuf_text(&res.report), "core/parallel/ulysses.c:"),
                      "%s", usp_strbuf_text(&res.report));
    ck_assert_int_eq(lint_pairs_in(w, "core/model/grad_buckets.c:") > 0, deadlock);
    sim_explore_result_free(&res);
    free(result.peak_bytes);
    sim_world_destroy(w);
    return deadlock;
}

START_TEST(training_buckets_need_their_order)
{
    ck_assert_msg(!training_step_deadlocks(0), "the buckets as trained: no order may deadlock");
    ck_assert_msg(training_step_deadlocks(2), "without the compute stream's wait, an order must deadlock");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("explore");
    TCase *t = tcase_create("orders");
    tcase_add_test(t, unordered_deadlocks_with_one_slot);
    tcase_add_test(t, two_slots_run_both_kernels);
    tcase_add_test(t, ordered_passes);
    tcase_add_test(t, event_recorded_too_early_orders_nothing);
    tcase_add_test(t, no_log_is_refused);
    tcase_add_test(t, training_buckets_need_their_order);
    suite_add_tcase(s, t);
    return s;
}

int main(void) { return check_main_run(suite()); }
