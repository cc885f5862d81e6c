/* Broken programs end at once with a report instead of hanging: collective
 * mismatches, deadlocks, injected faults and crashed ranks, each with the
 * exit status of the contract (3, or 4 for a failed rank) and a report that
 * names the rank, the op, the group, the sequence number and the call site. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm/comm.h"
#include "core/train/selftest.h"
#include "tests/harness.h"
#include "tests/check_main.h"

#define REPORT_SIZE 16384

typedef enum broken {
    DIFFERENT_OP, DIFFERENT_COUNT, DIFFERENT_DTYPE, DIFFERENT_ROOT, DIFFERENT_REDUCE, A2AV_COUNTS,
    P2P_COUNT, BOTH_SEND, EARLY_EXIT, WRONG_GROUP, N_BROKEN
} broken;

/* Every rank calls a collective; rank 1 gets it wrong in the way `arg` says. */
static usp_status broken_rank(const usp_rank_ctx *ctx, void *arg)
{
    broken how = *(const broken *)arg;
    usp_comm_t *w = ctx->world;
    int odd = ctx->rank == 1, n = ctx->world_size;
    void *a, *b;
    USP_CHECK(harness_upload(ctx, NULL, 64 * sizeof(double), &a));
    USP_CHECK(harness_upload(ctx, NULL, 64 * sizeof(double), &b));
    size_t counts[4] = {1, 1, 1, 1}, offsets[4] = {0, 1, 2, 3}, wrong[4] = {1, 2, 2, 1};
    usp_comm_t *half = NULL;
    usp_status s = USP_OK;
    switch (how) {
    case DIFFERENT_OP:
        s = odd ? usp_comm_all_reduce(w, a, b, 4, USP_F32, USP_REDUCE_SUM, NULL)
                : usp_comm_all_to_all(w, a, b, 4, USP_F32, NULL);
        break;
    case DIFFERENT_COUNT: s = usp_comm_all_reduce(w, a, b, odd ? 5 : 4, USP_F32, USP_REDUCE_SUM, NULL); break;
    case DIFFERENT_DTYPE: s = usp_comm_all_reduce(w, a, b, 4, odd ? USP_F64 : USP_F32, USP_REDUCE_SUM, NULL); break;
    case DIFFERENT_ROOT: s = usp_comm_broadcast(w, a, b, 4, USP_F32, odd ? 1 : 0, NULL); break;
    case DIFFERENT_REDUCE: s = usp_comm_all_reduce(w, a, b, 4, USP_F32, odd ? USP_REDUCE_MAX : USP_REDUCE_SUM, NULL); break;
    case A2AV_COUNTS: s = usp_comm_all_to_all_v(w, a, odd ? wrong : counts, offsets, b, counts, offsets, USP_F32, NULL); break;
    case P2P_COUNT:
        s = ctx->rank == 0 ? usp_comm_send(w, a, 4, USP_F32, 1, NULL)
            : odd          ? usp_comm_recv(w, b, 3, USP_F32, 0, NULL) : USP_OK;
        break;
    case BOTH_SEND: /* blocking sends to each other: the classic deadlock */
        if (ctx->rank < 2)
            s = usp_comm_send(w, a, 4, USP_F32, 1 - ctx->rank, NULL);
        break;
    case EARLY_EXIT:
        if (!odd)
            s = usp_comm_barrier(w, NULL);
        break;
    case WRONG_GROUP: /* rank 1 reduces over the world where the others use their half */
        s = usp_comm_split(w, ctx->rank < n / 2, 0, ctx->rank < n / 2 ? "low" : "high", &half);
        if (s == USP_OK)
            s = usp_comm_all_reduce(odd ? w : half, a, b, 4, USP_F32, USP_REDUCE_SUM, NULL);
        break;
    case N_BROKEN: break;
    }
    usp_comm_destroy(half);
    usp_buffer_free(ctx->backend, a);
    usp_buffer_free(ctx->backend, b);
    return s;
}

static const struct {
    const char *needles[3];
} expected[N_BROKEN] = {
    [DIFFERENT_OP] = {{"collective mismatch on world: different ops", "rank 1 calls all_reduce", "test_deadlock.c:"}},
    [DIFFERENT_COUNT] = {{"different counts", "count=5", "collective #1"}},
    [DIFFERENT_DTYPE] = {{"different dtypes", "f64", "rank 1"}},
    [DIFFERENT_ROOT] = {{"different roots", "root=1", "broadcast"}},
    [DIFFERENT_REDUCE] = {{"different reduce ops", "max", "sum"}},
    [A2AV_COUNTS] = {{"all_to_all_v counts disagree", "rank 1", "all_to_all_v"}},
    [P2P_COUNT] = {{"send and receive counts differ", "rank 0 calls send", "rank 1 calls recv"}},
    [BOTH_SEND] = {{"deadlock", "rank 0 waits in send #1 on world", "a cycle"}},
    [EARLY_EXIT] = {{"deadlock", "rank 1 exited after 0 calls on world", "barrier #1 on world (tests/test_deadlock.c:"}},
    [WRONG_GROUP] = {{"deadlock", "all_reduce #2 on world", "all_reduce #1 on low"}},
};

START_TEST(broken_programs_are_reported_at_once)
{
    broken how = (broken)_i;
    char report[REPORT_SIZE];
    usp_status s = harness_run(4, broken_rank, &how, NULL, 0, report, sizeof report);
    ck_assert_msg(s == USP_ERR_COLLECTIVE, "case %d: status %d, report:\n%s", _i, s, report);
    for (int k = 0; k < 3; k++)
        ck_assert_msg(strstr(report, expected[_i].needles[k]), "case %d: '%s' missing from:\n%s", _i,
                      expected[_i].needles[k], report);
}
END_TEST

/* --- injected faults on the selftest schedule ------------------------------ */

typedef struct fault_case {
    const char *spec;
    int world, ulysses, ring;
    usp_status status;
    const char *needles[4];
} fault_case;

static const fault_case fault_cases[] = {
    {"skip:rank=2", 8, 4, 1, USP_ERR_COLLECTIVE, {"rank 2", "all_to_all", "ulysses[0]", "core/train/selftest.c:"}},
    {"swap:rank=2", 8, 4, 1, USP_ERR_COLLECTIVE, {"rank 2: swap at its call 1", "all_to_all #1", "ulysses[0]", "core/train/selftest.c:"}},
    {"size:rank=2", 8, 4, 1, USP_ERR_COLLECTIVE, {"rank 2 calls all_to_all(count=", "different counts", "#1", "core/train/selftest.c:"}},
    {"group:rank=2", 8, 4, 1, USP_ERR_COLLECTIVE, {"rank 2 waits in all_to_all #5 on world", "ulysses[0]", "a cycle", "core/train/selftest.c:"}},
    {"crash:rank=2", 8, 4, 1, USP_ERR_RANK_FAILED, {"rank 2 crashed (injected) at its call 1", "all_to_all #1", "ulysses[0]", "core/train/selftest.c:"}},
    {"skip:rank=1,op=sendrecv,call=2", 8, 2, 2, USP_ERR_COLLECTIVE, {"rank 1", "sendrecv", "ring[", "core/train/selftest.c:"}},
    {"group:rank=3,op=all_reduce,group=dp", 8, 2, 2, USP_ERR_COLLECTIVE, {"rank 3", "all_reduce", "dp[", "core/train/selftest.c:"}},
    {"crash:rank=5,op=all_reduce,call=3", 8, 4, 1, USP_ERR_RANK_FAILED, {"rank 5 crashed", "all_reduce #", "dp[1]", "core/train/selftest.c:"}},
    {"swap:rank=0,op=all_reduce,call=1", 4, 4, 1, USP_ERR_COLLECTIVE, {"rank 0", "all_reduce", "sp[0]", "core/train/selftest.c:"}},
    {"crash:rank=3,op=barrier", 4, 4, 1, USP_ERR_RANK_FAILED, {"rank 3 crashed", "barrier #", "world", "core/train/selftest.c:"}},
};
#define N_FAULT_CASES (int)(sizeof fault_cases / sizeof fault_cases[0])

START_TEST(every_injected_fault_ends_the_run_with_its_code)
{
    const fault_case *c = &fault_cases[_i];
    sim_fault fault;
    ck_assert_int_eq(sim_fault_parse(c->spec, &fault), USP_OK);
    usp_mesh_shape shape;
    ck_assert_int_eq(usp_mesh_shape_make(c->world, c->ulysses, c->ring, &shape), USP_OK);
    usp_selftest_run run = {.config = usp_selftest_default(&shape)};
    run.stats = calloc((size_t)c->world, sizeof *run.stats);
    char report[REPORT_SIZE];
    usp_status s = harness_run(c->world, usp_selftest_rank, &run, &fault, 1, report, sizeof report);
    free(run.stats);
    ck_assert_msg(s == c->status, "%s: status %d, expected %d; report:\n%s", c->spec, s, c->status, report);
    for (int k = 0; k < 4; k++)
        ck_assert_msg(strstr(report, c->needles[k]), "%s: '%s' missing from:\n%s", c->spec, c->needles[k], report);
}
END_TEST

START_TEST(the_selftest_passes_without_faults)
{
    const int shapes[][3] = {{1, 1, 1}, {2, 2, 1}, {3, 3, 1}, {4, 2, 2}, {8, 4, 1}, {8, 2, 2}, {8, 1, 4}, {8, 2, 1}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        usp_mesh_shape shape;
        ck_assert_int_eq(usp_mesh_shape_make(shapes[i][0], shapes[i][1], shapes[i][2], &shape), USP_OK);
        usp_selftest_run run = {.config = usp_selftest_default(&shape)};
        run.stats = calloc((size_t)shape.world, sizeof *run.stats);
        char report[REPORT_SIZE];
        usp_status s = harness_run(shape.world, usp_selftest_rank, &run, NULL, 0, report, sizeof report);
        uint64_t checked = 0;
        for (int r = 0; r < shape.world; r++)
            checked += run.stats[r].buffers_checked;
        free(run.stats);
        ck_assert_msg(s == USP_OK, "W=%d U=%d R=%d: %s", shapes[i][0], shapes[i][1], shapes[i][2], report);
        ck_assert_msg(checked > 0, "nothing was checked");
    }
}
END_TEST

/* After a report every rank unwinds: no rank is left running, none returns ok. */
START_TEST(an_aborted_run_unwinds_every_rank)
{
    broken how = BOTH_SEND;
    sim_config config = sim_config_default(4);
    sim_world *w;
    ck_assert_int_eq(sim_world_create(&config, &w), USP_OK);
    ck_assert_int_eq(sim_world_run(w, broken_rank, &how), USP_ERR_COLLECTIVE);
    ck_assert_int_eq(sim_world_rank_status(w, 0), USP_ERR_COLLECTIVE);
    ck_assert_int_eq(sim_world_rank_status(w, 1), USP_ERR_COLLECTIVE);
    ck_assert_int_eq(sim_world_rank_status(w, 2), USP_OK); /* ranks 2 and 3 had nothing to do */
    sim_world_destroy(w);
}
END_TEST

static void write_selftest_trace(const char *path, const char *inject)
{
    usp_mesh_shape shape;
    ck_assert_int_eq(usp_mesh_shape_make(8, 2, 2, &shape), USP_OK);
    usp_selftest_run run = {.config = usp_selftest_default(&shape)};
    run.stats = calloc(8, sizeof *run.stats);
    sim_fault fault;
    if (inject)
        ck_assert_int_eq(sim_fault_parse(inject, &fault), USP_OK);
    sim_config config = sim_config_default(8);
    config.faults = &fault;
    config.n_faults = inject != NULL;
    sim_world *w;
    ck_assert_int_eq(sim_world_create(&config, &w), USP_OK);
    sim_world_run(w, usp_selftest_rank, &run);
    ck_assert_int_eq(usp_trace_write_text(sim_world_trace(w), path), USP_OK);
    sim_world_destroy(w);
    free(run.stats);
}

START_TEST(two_runs_write_byte_identical_traces)
{
    const char *inject[] = {NULL, "group:rank=3"};
    for (int k = 0; k < 2; k++) {
        write_selftest_trace("trace_a.txt", inject[k]);
        write_selftest_trace("trace_b.txt", inject[k]);
        char *a = harness_read_file("trace_a.txt", NULL), *b = harness_read_file("trace_b.txt", NULL);
        ck_assert_ptr_nonnull(a);
        ck_assert_ptr_nonnull(b);
        ck_assert_msg(strlen(a) > 1000, "the trace is too short to mean anything");
        ck_assert_msg(strstr(a, "op=all_to_all") && strstr(a, "site=core/train/selftest.c:"), "trace lacks events");
        ck_assert_str_eq(a, b);
        free(a), free(b);
        remove("trace_a.txt"), remove("trace_b.txt");
    }
}
END_TEST

/* Rank 2 fails with its own error (out of memory, say) while the others wait for it in a
 * collective: the run ends with rank 2's status and message first, not as a deadlock. */
static usp_status one_rank_fails(const usp_rank_ctx *ctx, void *arg)
{
    (void)arg;
    if (ctx->rank == 2)
        return usp_error(USP_ERR_RUNTIME, "out of memory: pretend");
    void *a;
    USP_CHECK(harness_upload(ctx, NULL, 4 * sizeof(float), &a));
    usp_status s = usp_comm_all_reduce(ctx->world, a, a, 4, USP_F32, USP_REDUCE_SUM, NULL);
    usp_buffer_free(ctx->backend, a);
    return s;
}

START_TEST(a_rank_that_fails_on_its_own_ends_the_run_with_its_error)
{
    char report[REPORT_SIZE];
    usp_status s = harness_run(4, one_rank_fails, NULL, NULL, 0, report, sizeof report);
    ck_assert_int_eq(s, USP_ERR_RUNTIME);
    ck_assert_msg(strncmp(report, "rank 2 failed: out of memory: pretend\n", 38) == 0, "%s", report);
    ck_assert_msg(strstr(report, "rank 0: blocked in all_reduce #1 on world") != NULL, "%s", report);
}
END_TEST

START_TEST(bad_inject_specs_are_configuration_errors)
{
    const char *bad[] = {"skip", "jump:rank=1", "skip:rank=x", "skip:call=1", "skip:rank=1,call=0",
                         "skip:rank=1,op=all_to_any", "skip:rank=1,group=dp", "size:rank=1,colour=3"};
    sim_fault f;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(sim_fault_parse(bad[i], &f), USP_ERR_CONFIG);
        ck_assert_msg(strstr(usp_error_message(), "--inject") && strstr(usp_error_message(), bad[i]),
                      "message must name the option and the spec: %s", usp_error_message());
    }
    ck_assert_int_eq(sim_fault_parse("group:rank=3,op=all_reduce,call=2,group=dp", &f), USP_OK);
    ck_assert_int_eq(f.kind, SIM_FAULT_GROUP);
    ck_assert_int_eq(f.rank, 3);
    ck_assert_int_eq(f.op, USP_OP_ALL_REDUCE);
    ck_assert_int_eq((int)f.call, 2);
    ck_assert_str_eq(f.group, "dp");
}
END_TEST

Suite *deadlock_suite(void)
{
    Suite *s = suite_create("deadlock");
    TCase *t = tcase_create("reports");
    tcase_set_timeout(t, 120);
    tcase_add_loop_test(t, broken_programs_are_reported_at_once, 0, N_BROKEN);
    tcase_add_loop_test(t, every_injected_fault_ends_the_run_with_its_code, 0, N_FAULT_CASES);
    tcase_add_test(t, the_selftest_passes_without_faults);
    tcase_add_test(t, an_aborted_run_unwinds_every_rank);
    tcase_add_test(t, two_runs_write_byte_identical_traces);
    tcase_add_test(t, bad_inject_specs_are_configuration_errors);
    tcase_add_test(t, a_rank_that_fails_on_its_own_ends_the_run_with_its_error);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main_run(deadlock_suite());
}
