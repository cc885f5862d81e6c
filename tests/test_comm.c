/* Every collective of the simulator's communicator, on worlds of 1, 2, 3, 4
 * and 8 ranks and on split groups: every element of every result is checked
 * against what the senders put in (a closed form of the ranks' ids). */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm/comm.h"
#include "tests/comm_checks.h"
#include "tests/harness.h"
#include "tests/check_main.h"

static const int worlds[] = {1, 2, 3, 4, 8};
#define N_WORLDS (int)(sizeof worlds / sizeof worlds[0])

START_TEST(every_collective_is_exact_on_the_world)
{
    char report[4096];
    usp_status s = harness_run(worlds[_i], comm_checks_on_world, NULL, NULL, 0, report, sizeof report);
    ck_assert_msg(s == USP_OK, "W=%d: %s", worlds[_i], report);
}
END_TEST

START_TEST(every_collective_is_exact_on_split_groups)
{
    char report[4096];
    usp_status s = harness_run(worlds[_i], comm_checks_on_split_groups, NULL, NULL, 0, report, sizeof report);
    ck_assert_msg(s == USP_OK, "W=%d: %s", worlds[_i], report);
}
END_TEST

/* Memory: each rank's buffers are counted, and freed ones leave the count. */
static usp_status on_memory(const usp_rank_ctx *ctx, void *arg)
{
    (void)arg;
    void *a, *b;
    USP_CHECK(usp_buffer_alloc(ctx->backend, 1000, "test", &a));
    USP_CHECK(usp_buffer_alloc(ctx->backend, 24, "other", &b));
    size_t used = usp_backend_bytes_in_use(ctx->backend);
    int ok = used == 1024 && usp_backend_bytes_in_category(ctx->backend, "test") == 1000 &&
             usp_backend_owns(ctx->backend, (char *)a + 10, 990) && !usp_backend_owns(ctx->backend, a, 1001);
    usp_buffer_free(ctx->backend, a);
    ok = ok && usp_backend_bytes_in_use(ctx->backend) == 24 && usp_backend_peak_bytes(ctx->backend) == 1024;
    usp_buffer_free(ctx->backend, b);
    return ok ? USP_OK : usp_error(USP_ERR_RUNTIME, "rank %d: memory accounting is off (%zu in use)", ctx->rank, used);
}

START_TEST(memory_is_counted_per_rank)
{
    char report[1024];
    ck_assert_msg(harness_run(3, on_memory, NULL, NULL, 0, report, sizeof report) == USP_OK, "%s", report);
}
END_TEST

/* Ranks share no memory: a buffer from malloc (not the rank's backend) is refused. */
static usp_status on_foreign_buffer(const usp_rank_ctx *ctx, void *arg)
{
    (void)arg;
    float *host = calloc(8, sizeof *host);
    void *dev;
    USP_CHECK(harness_upload(ctx, NULL, 8 * sizeof(float), &dev));
    usp_status s = usp_comm_all_reduce(ctx->world, ctx->rank == 1 ? (void *)host : dev, dev, 8, USP_F32,
                                       USP_REDUCE_SUM, ctx->stream);
    free(host);
    usp_buffer_free(ctx->backend, dev);
    return s;
}

START_TEST(buffers_not_from_the_rank_backend_are_refused)
{
    char report[2048];
    usp_status s = harness_run(2, on_foreign_buffer, NULL, NULL, 0, report, sizeof report);
    ck_assert_int_eq(s, USP_ERR_RUNTIME);
    ck_assert_msg(strstr(report, "rank 1 passed a send buffer") && strstr(report, "share no memory"), "%s", report);
}
END_TEST

/* A too-small receive buffer is an error, not an overwrite. */
static usp_status on_short_buffer(const usp_rank_ctx *ctx, void *arg)
{
    (void)arg;
    void *s, *r;
    USP_CHECK(harness_upload(ctx, NULL, 4 * sizeof(float) * (size_t)ctx->world_size, &s));
    USP_CHECK(harness_upload(ctx, NULL, 4 * sizeof(float), &r));
    usp_status st = usp_comm_all_gather(ctx->world, s, r, 4, USP_F32, ctx->stream);
    usp_buffer_free(ctx->backend, s);
    usp_buffer_free(ctx->backend, r);
    return st;
}

START_TEST(a_receive_buffer_too_small_is_an_error)
{
    char report[2048];
    ck_assert_int_eq(harness_run(2, on_short_buffer, NULL, NULL, 0, report, sizeof report), USP_ERR_RUNTIME);
    ck_assert_msg(strstr(report, "receive buffer"), "%s", report);
}
END_TEST

Suite *comm_suite(void)
{
    Suite *s = suite_create("comm");
    TCase *t = tcase_create("collectives");
    tcase_set_timeout(t, 60);
    tcase_add_loop_test(t, every_collective_is_exact_on_the_world, 0, N_WORLDS);
    tcase_add_loop_test(t, every_collective_is_exact_on_split_groups, 0, N_WORLDS);
    tcase_add_test(t, memory_is_counted_per_rank);
    tcase_add_test(t, buffers_not_from_the_rank_backend_are_refused);
    tcase_add_test(t, a_receive_buffer_too_small_is_an_error);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main_run(comm_suite());
}
