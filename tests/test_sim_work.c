/* The simulator's own work on a collective grows as the group, not as its
 * square (issue 15: plan --world 4096 spent most of its minutes on n^2 steps
 * at every world collective). sim_world_work counts that work in units a test
 * can bound without a clock: traffic entries priced, pairs of posted calls
 * compared for a mismatch, ranks offered to the ready queue. Before, a world
 * collective of W ranks priced a W x W traffic matrix (W^2 cells, 128 MB at
 * W = 4096), compared each arrival with every member already posted
 * (W^2 / 2 checks) and offered every member to the ready queue at every
 * arrival (W^2 offers). Buffers are the meta backend's: shapes only. */
#include <check.h>
#include <stdint.h>

#include "backends/meta/meta_backend.h"
#include "core/comm/comm.h"
#include "sim/world.h"
#include "tests/check_main.h"

#define W 1024
#define GROUP 8 /* the split's groups */

/* Each rank: 3 all_reduces, an all_gather and a broadcast on the world, a split into groups of
 * GROUP, and one all_reduce on its group: 6 world collectives (the split one of them) and W / GROUP
 * group ones. */
static usp_status world_collectives(const usp_rank_ctx *ctx, void *arg)
{
    (void)arg;
    void *buf;
    USP_CHECK(usp_buffer_alloc(ctx->backend, (size_t)(W + 1) * sizeof(float), "test", &buf));
    for (int i = 0; i < 3; i++)
        USP_CHECK(usp_comm_all_reduce(ctx->world, buf, buf, 64, USP_F32, USP_REDUCE_SUM, ctx->stream));
    USP_CHECK(usp_comm_all_gather(ctx->world, buf, (float *)buf + 1, 1, USP_F32, ctx->stream));
    USP_CHECK(usp_comm_broadcast(ctx->world, buf, buf, 64, USP_F32, 0, ctx->stream));
    usp_comm_t *group;
    USP_CHECK(usp_comm_split(ctx->world, ctx->rank / GROUP, ctx->rank, "group", &group));
    USP_CHECK(usp_comm_all_reduce(group, buf, buf, 64, USP_F32, USP_REDUCE_SUM, ctx->stream));
    usp_comm_destroy(group);
    usp_buffer_free(ctx->backend, buf);
    return USP_OK;
}

START_TEST(a_collective_costs_the_simulator_work_linear_in_its_group)
{
    sim_config config = sim_config_default(W);
    config.trace = 0;
    config.stack_bytes = (size_t)256 << 10;
    config.make_backend = usp_backend_meta_create;
    sim_world *w;
    ck_assert_int_eq(sim_world_create(&config, &w), USP_OK);
    usp_status s = sim_world_run(w, world_collectives, NULL);
    ck_assert_msg(s == USP_OK, "%s", usp_error_message());
    sim_work work = sim_world_work(w);
    sim_world_destroy(w);
    const uint64_t groups = W / GROUP, world_calls = 6;
    /* each arrival after the first is compared with one posted call (the first posted stands for all) */
    ck_assert_uint_eq(work.match_checks, world_calls * (W - 1) + groups * (GROUP - 1));
    /* a ring collective is one entry a member: the all_reduce (its two repeats are priced as the first
     * was: the group remembers its prices), the all_gather, the broadcast's chain (every member but the
     * one before the root) and the groups' all_reduces; the split moves no bytes */
    ck_assert_uint_eq(work.traffic_entries, W + W + (W - 1) + groups * GROUP);
    /* each arrival offers itself, the one that completes the collective every member */
    ck_assert_uint_eq(work.ready_offers, world_calls * 2 * W + groups * 2 * GROUP);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sim_work");
    TCase *t = tcase_create("collectives");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, a_collective_costs_the_simulator_work_linear_in_its_group);
    suite_add_tcase(s, t);
    return check_main_run(s);
}
