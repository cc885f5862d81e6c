/* The runtime seam (core/runtime/runtime.h): the registry, the simulator as a
 * runtime, and usp_rank_gather, the channel that brings every rank's figures
 * to rank 0 without changing them. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_backend.h"
#ifdef USP_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif
#include "core/runtime/runtime.h"
#include "core/runtime/runtime_single.h"
#include "core/train/train.h"
#include "sim/sim_runtime.h"
#include "sim/world.h"
#include "tests/check_main.h"
#include "tools/runtime_registry.h"

/* Ranks gather (rank, k) three times; rank 0 makes its second call after a
 * barrier the others reach after theirs, so it is first to arrive at call 1
 * and last at call 2. gathered == NULL: the same run without the gathers. */
typedef struct gather_run {
    int *gathered; /* [3][world][2] on rank 0 */
} gather_run;

static usp_status gather_rank(const usp_rank_ctx *ctx, void *arg)
{
    gather_run *g = arg;
    for (int k = 0; k < 3; k++) {
        if (k == 1 && ctx->rank == 0)
            USP_CHECK(usp_comm_barrier(ctx->world, ctx->stream));
        int mine[2] = {ctx->rank, k};
        if (g->gathered)
            USP_CHECK(usp_rank_gather(ctx, mine, sizeof mine, g->gathered + k * ctx->world_size * 2));
        if (k == 1 && ctx->rank != 0)
            USP_CHECK(usp_comm_barrier(ctx->world, ctx->stream));
    }
    return USP_OK;
}

static usp_runtime_t *simulator(int world)
{
    usp_runtime_t *rt;
    ck_assert_int_eq(sim_runtime_create(&(usp_runtime_options){.world_size = world, .trace = 1}, &rt), USP_OK);
    return rt;
}

START_TEST(gather_brings_every_rank_to_rank_0_in_any_order_and_costs_nothing)
{
    enum { W = 4 };
    int gathered[3][W][2];
    memset(gathered, 0xff, sizeof gathered);
    usp_runtime_t *with = simulator(W), *without = simulator(W);
    ck_assert_int_eq(usp_runtime_run(with, gather_rank, &(gather_run){.gathered = &gathered[0][0][0]}), USP_OK);
    ck_assert_int_eq(usp_runtime_run(without, gather_rank, &(gather_run){0}), USP_OK);
    for (int k = 0; k < 3; k++)
        for (int r = 0; r < W; r++)
            ck_assert_msg(gathered[k][r][0] == r && gathered[k][r][1] == k, "call %d, rank %d: (%d, %d)", k, r,
                          gathered[k][r][0], gathered[k][r][1]);
    /* no modelled time, no trace event */
    ck_assert_uint_eq(usp_trace_count(usp_runtime_trace(with)), usp_trace_count(usp_runtime_trace(without)));
    for (int r = 0; r < W; r++)
        ck_assert_double_eq(sim_world_time(sim_runtime_world(with), r), sim_world_time(sim_runtime_world(without), r));
    usp_runtime_destroy(with);
    usp_runtime_destroy(without);
}
END_TEST

static usp_status uneven_rank(const usp_rank_ctx *ctx, void *arg)
{
    double *all = arg, mine[2] = {1, 2}; /* all: [8], lives as long as the run */
    return usp_rank_gather(ctx, mine, ctx->rank == 1 ? sizeof mine : sizeof mine[0], all);
}

START_TEST(gathers_of_different_sizes_fail_naming_the_rank)
{
    usp_runtime_t *rt = simulator(4);
    double all[8];
    ck_assert_int_eq(usp_runtime_run(rt, uneven_rank, all), USP_ERR_RUNTIME);
    ck_assert_msg(strstr(usp_error_message(), "rank 1 gathers 16 bytes"), "%s", usp_error_message());
    usp_runtime_destroy(rt);
}
END_TEST

START_TEST(gather_without_a_runtime_copies_one_rank_and_refuses_more)
{
    double mine = 3, all = 0;
    usp_rank_ctx one = {.rank = 0, .world_size = 1}, two = {.rank = 0, .world_size = 2};
    ck_assert_int_eq(usp_rank_gather(&one, &mine, sizeof mine, &all), USP_OK);
    ck_assert_double_eq(all, 3);
    ck_assert_int_eq(usp_rank_gather(&two, &mine, sizeof mine, &all), USP_ERR_RUNTIME);
}
END_TEST

START_TEST(the_registry_makes_the_simulator_and_says_what_others_need)
{
    ck_assert_int_eq(runtime_registry_check("sim"), USP_OK);
#ifdef USP_HAVE_CUDA /* built: on a machine without a GPU it says so, naming the device it lacks */
    ck_assert_int_eq(runtime_registry_check("nccl"), USP_OK);
    usp_runtime_t *gpu = NULL;
    char why[256];
    int gpus = usp_cuda_device_count(why, sizeof why);
    /* two GPUs without a launcher: no GPU is named first; with GPUs, the nccl runtime gives the
     * launch line, and a build without it (no NCCL or no MPI) says it trains on one GPU */
    ck_assert_int_eq(runtime_registry_create("nccl", &(usp_runtime_options){.world_size = 2}, &gpu), USP_ERR_CONFIG);
#ifdef USP_HAVE_NCCL
    const char *expected = gpus == 0 ? "no NVIDIA GPU" : "mpirun -np 2 usp";
#else
    const char *expected = gpus == 0 ? "no NVIDIA GPU" : "one GPU";
#endif
    ck_assert_msg(strstr(usp_error_message(), "--gpus 2") && strstr(usp_error_message(), expected), "%s",
                  usp_error_message());
    if (gpus == 0) {
        ck_assert_int_eq(runtime_registry_create("nccl", &(usp_runtime_options){.world_size = 1}, &gpu),
                         USP_ERR_CONFIG);
        ck_assert_msg(strstr(usp_error_message(), "no NVIDIA GPU") && strstr(usp_error_message(), why), "%s",
                      usp_error_message());
    }
    ck_assert_ptr_null(gpu);
#else
    ck_assert_int_eq(runtime_registry_check("nccl"), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "--backend nccl") && strstr(usp_error_message(), "CUDA Toolkit"), "%s",
                  usp_error_message());
#endif
    ck_assert_int_eq(runtime_registry_check("bogus"), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "--backend bogus: unknown"), "%s", usp_error_message());
    usp_runtime_t *rt = NULL;
    const char *bad[] = {"skip:rank=9"};
    ck_assert_int_eq(runtime_registry_create("sim", &(usp_runtime_options){.world_size = 4, .inject = bad,
                                                                           .n_inject = 1}, &rt), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "--inject skip:rank=9"), "%s", usp_error_message());
    ck_assert_ptr_null(rt);
    usp_runtime_options o = {.world_size = 12, .cluster = "dgx-a100"};
    ck_assert_int_eq(runtime_registry_create("sim", &o, &rt), USP_OK);
    usp_runtime_cluster cluster = usp_runtime_cluster_of(rt);
    ck_assert_str_eq(usp_runtime_name(rt), "sim");
    ck_assert_int_eq(usp_runtime_world_size(rt), 12);
    ck_assert_str_eq(cluster.name, "dgx-a100");
    ck_assert_int_eq(cluster.nodes, 2); /* grown to hold the world */
    ck_assert_int_eq(cluster.modelled, 1);
    ck_assert_ptr_null(usp_runtime_trace(rt)); /* not asked for */
    ck_assert_str_eq(usp_runtime_report(rt), "");
    usp_runtime_destroy(rt);
}
END_TEST

/* The summary's peaks arrive through the gather, on numbers and on shapes alike. */
START_TEST(training_gathers_every_ranks_peak_on_both_backends)
{
    for (int shapes_only = 0; shapes_only < 2; shapes_only++) {
        usp_train_config c;
        usp_train_defaults(&c);
        ck_assert_int_eq(usp_model_config_load("tiny", &c.model), USP_OK);
        ck_assert_int_eq(usp_mesh_shape_make(4, 2, 2, &c.shape), USP_OK);
        c.data = "passkey", c.seq_len = 64, c.batch = 1, c.steps = 1;
        size_t peaks[4] = {0};
        usp_train_result result = {.passkey_accuracy = -1, .peak_bytes = peaks};
        usp_runtime_t *rt;
        ck_assert_int_eq(sim_runtime_create(&(usp_runtime_options){.world_size = 4, .shapes_only = shapes_only}, &rt),
                         USP_OK);
        ck_assert_int_eq(usp_runtime_run(rt, usp_train_rank, &(usp_train_run){.config = &c, .result = &result}),
                         USP_OK);
        for (int r = 0; r < 4; r++) {
            ck_assert_uint_gt(peaks[r], 0);
            ck_assert_uint_eq(peaks[r], sim_world_peak_bytes(sim_runtime_world(rt), r));
        }
        usp_runtime_destroy(rt);
    }
}
END_TEST

static usp_status make_cpu(void *arg, usp_backend_t **out)
{
    (void)arg;
    return usp_backend_cpu_create(out);
}

/* The one-rank runtime (the cuda backend's on one GPU, core/runtime/runtime_single.h)
 * trains as the simulator's world of one does, bit for bit, on the same
 * backend: its one-rank communicator copies where the simulator's does. */
START_TEST(the_one_rank_runtime_trains_as_the_simulator_does)
{
    usp_train_result results[2];
    for (int single = 0; single < 2; single++) {
        usp_train_config c;
        usp_train_defaults(&c);
        ck_assert_int_eq(usp_model_config_load("tiny", &c.model), USP_OK);
        ck_assert_int_eq(usp_mesh_shape_make(1, 1, 1, &c.shape), USP_OK);
        c.data = "passkey", c.seq_len = 64, c.batch = 2, c.steps = 6, c.eval_samples = 4;
        size_t peak = 0;
        results[single] = (usp_train_result){.passkey_accuracy = -1, .peak_bytes = &peak};
        usp_runtime_t *rt;
        if (single)
            ck_assert_int_eq(usp_runtime_single_create("this machine", make_cpu, NULL, &rt), USP_OK);
        else
            ck_assert_int_eq(sim_runtime_create(&(usp_runtime_options){.world_size = 1}, &rt), USP_OK);
        ck_assert_int_eq(usp_runtime_run(rt, usp_train_rank, &(usp_train_run){.config = &c, .result = &results[single]}),
                         USP_OK);
        ck_assert_int_eq(usp_runtime_world_size(rt), 1);
        ck_assert_int_eq(usp_runtime_cluster_of(rt).modelled, !single);
        usp_runtime_destroy(rt);
    }
    ck_assert(isfinite(results[0].loss) && results[0].steps_done == 6);
    ck_assert_int_eq(results[1].steps_done, results[0].steps_done);
    ck_assert(results[1].first_loss == results[0].first_loss && results[1].loss == results[0].loss);
    ck_assert(results[1].passkey_accuracy == results[0].passkey_accuracy);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("runtime");
    TCase *t = tcase_create("runtime");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, gather_brings_every_rank_to_rank_0_in_any_order_and_costs_nothing);
    tcase_add_test(t, gathers_of_different_sizes_fail_naming_the_rank);
    tcase_add_test(t, gather_without_a_runtime_copies_one_rank_and_refuses_more);
    tcase_add_test(t, the_registry_makes_the_simulator_and_says_what_others_need);
    tcase_add_test(t, training_gathers_every_ranks_peak_on_both_backends);
    tcase_add_test(t, the_one_rank_runtime_trains_as_the_simulator_does);
    suite_add_tcase(s, t);
    return check_main_run(s);
}
