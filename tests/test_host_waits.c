/* Host waits per training step (issue 25, item 3): on the lazy backend, which
 * holds its work until the host must wait for it, a step of an unlogged
 * training run makes at most HOST_WAITS_ZERO01 waits on each rank at ZeRO 0-1
 * and HOST_WAITS_ZERO23 at ZeRO 2-3 (core/train/train.c gives each one's
 * reason). A wait per layer (an allocation that synchronises), a per-step
 * read of the loss or an added download breaks the bound.
 *
 * The waits a step makes are counted as a difference: a run of STEPS + EXTRA
 * steps less a run of STEPS, divided by EXTRA, so the setup, the logged last
 * step and the teardown, the same in both runs, cancel. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "backends/cpu/cpu_backend.h"
#include "backends/lazy/lazy_backend.h"
#include "core/train/train.h"
#include "tests/check_main.h"
#include "tests/harness.h"

/* The bounds core/train/train.c states (usp_train_host_waits_bound). */
#define HOST_WAITS_ZERO01 1
#define HOST_WAITS_ZERO23 2

#define STEPS 2
#define EXTRA 3

typedef struct wait_case {
    const char *name;
    int world, ulysses, ring, zero, recompute, micro_batches;
} wait_case;

static const wait_case cases[] = {
    {"one rank, ZeRO 0", 1, 1, 1, 0, 0, 1},
    {"one rank, ZeRO 3", 1, 1, 1, 3, 0, 1},
    {"one rank, ZeRO 0, recompute", 1, 1, 1, 0, 1, 1},
    {"one rank, ZeRO 0, 2 micro-batches", 1, 1, 1, 0, 0, 2},
    {"Ulysses 2, ZeRO 0", 2, 2, 1, 0, 0, 1},
    {"Ulysses 2, ZeRO 3, recompute", 2, 2, 1, 3, 1, 1},
    {"ring 2, ZeRO 2", 2, 1, 2, 2, 0, 1},
    {"DP 2 x Ulysses 2, ZeRO 1", 4, 2, 1, 1, 0, 1},
};

static usp_train_config training(const usp_model_config *model, const wait_case *w, int64_t steps)
{
    usp_train_config c;
    usp_train_defaults(&c);
    c.model = *model;
    ck_assert_int_eq(usp_mesh_shape_make(w->world, w->ulysses, w->ring, &c.shape), USP_OK);
    c.data = "passkey", c.seq_len = 64, c.steps = steps, c.lr = 1e-3, c.warmup = 2;
    c.batch = 2 * c.shape.dp * (w->micro_batches > 1 ? w->micro_batches : 1);
    c.micro_batches = w->micro_batches;
    c.log_every = 1000, c.eval_samples = 0, c.eval_every = 0; /* only the last step is logged */
    c.zero_stage = w->zero, c.recompute_layers = w->recompute ? (int)model->n_layer : 0;
    return c;
}

/* The most host waits any rank made in a run of `steps` steps. */
static uint64_t most_waits(const usp_model_config *model, const wait_case *w, int64_t steps)
{
    usp_train_config c = training(model, w, steps);
    sim_world *world;
    usp_status s = harness_train_world(&c, usp_backend_lazy_create, &world);
    ck_assert_msg(s == USP_OK, "%s, %lld steps: %s", w->name, (long long)steps, usp_error_message());
    uint64_t most = 0;
    for (int r = 0; r < sim_world_size(world); r++) {
        uint64_t n = usp_backend_host_waits(sim_world_backend(world, r));
        most = n > most ? n : most;
    }
    sim_world_destroy(world);
    return most;
}

START_TEST(a_training_step_waits_for_the_device_at_most_the_stated_bound)
{
    const wait_case *w = &cases[_i];
    usp_model_config model;
    ck_assert_int_eq(usp_model_config_preset("tiny", &model), USP_OK);
    model.vocab = 128, model.n_layer = 2, model.d_model = 32, model.n_head = 4, model.n_kv_head = 2;
    model.d_ff = 48, model.max_seq = 64;
    uint64_t short_run = most_waits(&model, w, STEPS), long_run = most_waits(&model, w, STEPS + EXTRA);
    double per_step = ((double)long_run - (double)short_run) / EXTRA;
    int bound = w->zero >= 2 ? HOST_WAITS_ZERO23 : HOST_WAITS_ZERO01;
    printf("%-36s %.2f host waits per step (bound %d; %llu in %d steps, %llu in %d)\n", w->name, per_step, bound,
           (unsigned long long)short_run, STEPS, (unsigned long long)long_run, STEPS + EXTRA);
    ck_assert_msg(per_step <= bound, "%s: %.2f host waits per step, more than the bound of %d", w->name, per_step,
                  bound);
    ck_assert_msg(short_run > 0, "%s: no host wait counted at all: the counter is not counting", w->name);
}
END_TEST

/* One download, one synchronize and one sum of squares are three waits on the lazy backend, none on the
 * cpu backend (it completes every op before returning: nothing waits); an upload is none. */
START_TEST(the_counter_counts_the_blocking_calls_of_a_deferring_backend)
{
    usp_status (*make[2])(usp_backend_t **) = {usp_backend_lazy_create, usp_backend_cpu_create};
    for (int k = 0; k < 2; k++) {
        usp_backend_t *be;
        float *x, host[4] = {1, 2, 3, 4};
        double sum;
        ck_assert_int_eq(make[k](&be), USP_OK);
        ck_assert_int_eq(usp_buffer_alloc(be, sizeof host, "test", (void **)&x), USP_OK);
        ck_assert_int_eq(usp_buffer_copy(be, x, host, sizeof host, USP_COPY_HOST_TO_DEVICE, NULL), USP_OK);
        ck_assert_uint_eq(usp_backend_host_waits(be), 0);
        ck_assert_int_eq(usp_buffer_download(be, host, x, sizeof host, NULL), USP_OK);
        ck_assert_int_eq(usp_backend_synchronize(be, NULL), USP_OK);
        ck_assert_int_eq(usp_sum_squares(be, &sum, x, 4, NULL), USP_OK);
        ck_assert(sum == 30.0);
        ck_assert_uint_eq(usp_backend_host_waits(be), k == 0 ? 3 : 0);
        usp_buffer_free(be, x);
        usp_backend_destroy(be);
    }
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("host_waits");
    TCase *tc = tcase_create("steps");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, the_counter_counts_the_blocking_calls_of_a_deferring_backend);
    tcase_add_loop_test(tc, a_training_step_waits_for_the_device_at_most_the_stated_bound, 0,
                        (int)(sizeof cases / sizeof *cases));
    suite_add_tcase(suite, tc);
    return check_main_run(suite);
}
