/* Virtual streams (sim/virtual_streams.h): work on a stream of its own runs
 * beside the default stream's in virtual time, and the time it hides is
 * reported.
 *
 * Closed forms on two ranks (meta backend, dgx-h100: one NVSwitch, a transfer
 * alone on its route costs sim_cost_transfer): a compute op of C seconds on
 * the default stream beside a sendrecv of T seconds on a stream of its own,
 * joined by an event, ends at max(C, T); on one clock (no_overlap, the model
 * before the streams) it ended at C + T. Through the planner: a pure ring step
 * is shorter than on one clock by exactly the time reported hidden, and the
 * Ulysses all-to-alls hide nothing. Tolerance: 1e-9 relative. */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "backends/meta/meta_backend.h"
#include "plan/plan.h"
#include "sim/world.h"
#include "tests/check_main.h"

static void expect_close(double got, double want, const char *what)
{
    ck_assert_msg(fabs(got - want) <= 1e-9 * fabs(want), "%s: got %.12g, want %.12g", what, got, want);
}

/* What each rank does: `zero_bytes` of zeroing on the default stream (the compute C) while a sendrecv of
 * `count` f32 with the other rank runs on a stream of its own (the transfer T), as core/parallel/ring.c does. */
typedef struct overlap_case {
    size_t zero_bytes, count;
} overlap_case;

static usp_status overlap_rank(const usp_rank_ctx *ctx, void *arg)
{
    const overlap_case *p = arg;
    usp_backend_t *be = ctx->backend;
    usp_stream_t *comm = NULL;
    usp_event_t *consumed = NULL, *arrived = NULL;
    void *work = NULL, *a = NULL, *b = NULL;
    int peer = 1 - ctx->rank;
    usp_status s = usp_stream_create(be, &comm);
    if (s == USP_OK) s = usp_event_create(be, &consumed);
    if (s == USP_OK) s = usp_event_create(be, &arrived);
    if (s == USP_OK) s = usp_buffer_alloc(be, p->zero_bytes, "test", &work);
    if (s == USP_OK) s = usp_buffer_alloc(be, p->count * sizeof(float), "test", &a);
    if (s == USP_OK) s = usp_buffer_alloc(be, p->count * sizeof(float), "test", &b);
    if (s == USP_OK) s = usp_event_record(be, consumed, NULL);
    if (s == USP_OK) s = usp_stream_wait_event(be, comm, consumed);
    if (s == USP_OK) s = usp_comm_sendrecv(ctx->world, a, p->count, peer, b, p->count, peer, USP_F32, comm);
    if (s == USP_OK) s = usp_event_record(be, arrived, comm);
    if (s == USP_OK) s = usp_buffer_zero(be, work, p->zero_bytes, NULL);
    if (s == USP_OK) s = usp_stream_wait_event(be, NULL, arrived);
    usp_buffer_free(be, work), usp_buffer_free(be, a), usp_buffer_free(be, b);
    usp_event_destroy(be, consumed), usp_event_destroy(be, arrived);
    usp_status d = usp_stream_destroy(be, comm);
    return s != USP_OK ? s : d;
}

static sim_world *run_world(int no_overlap, usp_rank_main_fn fn, void *arg)
{
    sim_config config = sim_config_default(2);
    config.cost.no_overlap = no_overlap;
    config.trace = 0;
    config.stack_bytes = (size_t)256 << 10;
    config.make_backend = usp_backend_meta_create;
    sim_world *w;
    ck_assert_int_eq(sim_world_create(&config, &w), USP_OK);
    usp_status s = sim_world_run(w, fn, arg);
    ck_assert_msg(s == USP_OK, "%s", usp_error_message());
    return w;
}

/* C and T of a case, priced by the cost model alone. */
static void case_times(const overlap_case *p, double *C, double *T)
{
    sim_cost_model m = sim_config_default(2).cost;
    *C = sim_cost_compute(&m, &(usp_op_cost){.op = "zero", .bytes = (double)p->zero_bytes});
    *T = sim_cost_transfer(&m, 0, 1, p->count * sizeof(float));
}

static void check_case(const overlap_case *p, const char *what)
{
    double C, T;
    case_times(p, &C, &T);
    ck_assert(C > 0 && T > 0);
    sim_world *w = run_world(0, overlap_rank, (void *)p);
    for (int r = 0; r < 2; r++) {
        sim_rank_times t = sim_world_rank_times(w, r);
        expect_close(t.end_s, fmax(C, T), what);
        expect_close(t.compute_s, C, "compute");
        expect_close(t.comm_s, T, "transfer");
        expect_close(t.hidden_comm_s, fmin(C, T), "hidden: the part of the transfer beside the compute");
        ck_assert(t.hidden_comm_s <= t.comm_s);
        ck_assert_double_eq(t.wait_s, 0);
    }
    sim_world_destroy(w);
    w = run_world(1, overlap_rank, (void *)p); /* one clock: nothing runs beside anything */
    for (int r = 0; r < 2; r++) {
        sim_rank_times t = sim_world_rank_times(w, r);
        expect_close(t.end_s, C + T, "on one clock");
        ck_assert_double_eq(t.hidden_comm_s, 0);
    }
    sim_world_destroy(w);
}

START_TEST(a_transfer_beside_a_longer_compute_costs_nothing_more)
{
    overlap_case p = {.zero_bytes = (size_t)64 << 30, .count = (size_t)1 << 26}; /* C ~ 20 ms, T ~ 0.7 ms */
    double C, T;
    case_times(&p, &C, &T);
    ck_assert(C > 2 * T);
    check_case(&p, "max(C, T) = C");
}
END_TEST

START_TEST(a_compute_beside_a_longer_transfer_costs_nothing_more)
{
    overlap_case p = {.zero_bytes = (size_t)1 << 30, .count = (size_t)1 << 28}; /* C ~ 0.3 ms, T ~ 3 ms */
    double C, T;
    case_times(&p, &C, &T);
    ck_assert(T > 2 * C);
    check_case(&p, "max(C, T) = T");
}
END_TEST

/* Rank 0 computes on the default stream, then sends to rank 1 on it; then both move a second block on
 * streams they made at time 0, whose clocks are still 0, behind the transfers' time: the second transfer
 * starts when the flows are (sim_comm.c), rather than in their past. */
static usp_status late_lane_rank(const usp_rank_ctx *ctx, void *arg)
{
    const overlap_case *p = arg;
    usp_backend_t *be = ctx->backend;
    usp_stream_t *side = NULL;
    void *work = NULL, *a = NULL;
    usp_status s = usp_stream_create(be, &side);
    if (s == USP_OK) s = usp_buffer_alloc(be, p->zero_bytes, "test", &work);
    if (s == USP_OK) s = usp_buffer_alloc(be, p->count * sizeof(float), "test", &a);
    if (s == USP_OK && ctx->rank == 0) s = usp_buffer_zero(be, work, p->zero_bytes, NULL);
    if (s == USP_OK)
        s = ctx->rank == 0 ? usp_comm_send(ctx->world, a, p->count, USP_F32, 1, NULL)
                           : usp_comm_recv(ctx->world, a, p->count, USP_F32, 0, NULL);
    if (s == USP_OK)
        s = ctx->rank == 0 ? usp_comm_send(ctx->world, a, p->count, USP_F32, 1, side)
                           : usp_comm_recv(ctx->world, a, p->count, USP_F32, 0, side);
    usp_buffer_free(be, work), usp_buffer_free(be, a);
    usp_status d = usp_stream_destroy(be, side); /* joins the side stream: the end is its transfer's */
    return s != USP_OK ? s : d;
}

START_TEST(a_call_on_a_stream_behind_the_transfers_time_starts_at_that_time)
{
    overlap_case p = {.zero_bytes = (size_t)4 << 30, .count = (size_t)1 << 26};
    double C, T;
    case_times(&p, &C, &T);
    sim_world_destroy(run_world(1, late_lane_rank, &p)); /* on one clock too, in order */
    sim_world *w = run_world(0, late_lane_rank, &p);
    /* The flows' time when the first transfer is done is its last byte's, a latency before its end: the second
     * starts there, so it ends one latency before C + 2T (where it ends on one clock). */
    sim_cost_model m = sim_config_default(2).cost;
    double latency = sim_cost_transfer(&m, 0, 1, 0);
    ck_assert(latency > 0 && latency < 0.1 * T);
    for (int r = 0; r < 2; r++)
        expect_close(sim_world_time(w, r), C + 2 * T - latency, "the second transfer from the flows' time");
    sim_world_destroy(w);
}
END_TEST

static plan_result plan_of(int world, int ulysses, int ring, int no_overlap)
{
    usp_train_config c;
    usp_train_defaults(&c);
    ck_assert_int_eq(usp_model_config_preset("tiny", &c.model), USP_OK);
    ck_assert_int_eq(usp_mesh_shape_make(world, ulysses, ring, &c.shape), USP_OK);
    c.data = "passkey", c.seq_len = 8192, c.batch = 1, c.steps = 1;
    c.model.max_seq = 8192;
    sim_cost_model m = {.dtype = USP_BF16, .no_overlap = no_overlap};
    ck_assert(sim_topology_preset("dgx-h100", 1, &m.topology));
    plan_result r;
    ck_assert_msg(plan_run(&c, &m, NULL, &r) == USP_OK, "%s", usp_error_message());
    return r;
}

START_TEST(a_ring_step_is_shorter_by_the_time_its_transfers_hide)
{
    plan_result before = plan_of(4, 1, 4, 1), after = plan_of(4, 1, 4, 0), again = plan_of(4, 1, 4, 0);
    ck_assert_double_eq(before.comm_hidden_s, 0);
    ck_assert_msg(after.comm_hidden_s > 0, "the ring forward's transfers run beside its attention");
    ck_assert(after.comm_hidden_s <= after.comm_time_s);
    expect_close(after.comm_exposed_s, after.comm_time_s - after.comm_hidden_s, "exposed = comm - hidden");
    expect_close(after.compute_time_s, before.compute_time_s, "the same compute");
    expect_close(before.step_time_s - after.step_time_s, after.comm_hidden_s + after.wait_hidden_s,
                 "the step saves what is hidden");
    ck_assert(after.step_time_s < before.step_time_s);
    ck_assert_double_eq(again.step_time_s, after.step_time_s); /* deterministic */
    ck_assert_double_eq(again.comm_hidden_s, after.comm_hidden_s);
    plan_result_free(&before), plan_result_free(&after), plan_result_free(&again);
}
END_TEST

START_TEST(ulysses_all_to_alls_hide_nothing)
{
    plan_result before = plan_of(4, 4, 1, 1), after = plan_of(4, 4, 1, 0);
    ck_assert_double_eq(after.comm_hidden_s, 0);
    ck_assert_double_eq(after.wait_hidden_s, 0);
    ck_assert(after.comm_time_s > 0);
    ck_assert_double_eq(after.comm_exposed_s, after.comm_time_s);
    ck_assert_double_eq(after.step_time_s, before.step_time_s);
    plan_result_free(&before), plan_result_free(&after);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sim_overlap");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, a_transfer_beside_a_longer_compute_costs_nothing_more);
    tcase_add_test(t, a_compute_beside_a_longer_transfer_costs_nothing_more);
    tcase_add_test(t, a_call_on_a_stream_behind_the_transfers_time_starts_at_that_time);
    tcase_add_test(t, a_ring_step_is_shorter_by_the_time_its_transfers_hide);
    tcase_add_test(t, ulysses_all_to_alls_hide_nothing);
    suite_add_tcase(s, t);
    return check_main_run(s);
}
