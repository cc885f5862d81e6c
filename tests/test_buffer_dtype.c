/* Dtype as a property of the buffer (core/ops/ops.h): usp_buffer_alloc_as gives
 * storage-sized buffers on every backend (meta included) that answer for their
 * dtype, offsets go through usp_buffer_at / usp_elem_at, and an offset or a
 * size counted in float units inside bf16 storage lands outside its buffer,
 * where the copy wrappers, the layer ops and the simulator's communicator
 * refuse it. The last test runs a bf16 training step of every mesh and ZeRO
 * stage on the meta backend: every site of the model, Ulysses, Ring and the
 * parameter store passes those checks. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "backends/cpu/cpu_backend.h"
#include "backends/meta/meta_backend.h"
#include "core/ops/ops.h"
#include "core/train/train.h"
#include "sim/world.h"
#include "tests/check_main.h"
#include "tests/harness.h"

#define N 100 /* elements of the test buffers */

START_TEST(alloc_as_gives_storage_sized_buffers_that_know_their_dtype)
{
    usp_backend_t *be;
    ck_assert_int_eq(usp_backend_meta_create(&be), USP_OK);
    char *h, *f, *raw;
    ck_assert_int_eq(usp_buffer_alloc_as(be, N, USP_BF16, "activations", (void **)&h), USP_OK);
    ck_assert_uint_eq(usp_backend_bytes_in_use(be), 2 * N);
    ck_assert(usp_backend_owns(be, h, 2 * N));
    ck_assert(!usp_backend_owns(be, h, 2 * N + 1)); /* float-sized addresses would own 4 N */
    ck_assert(!usp_backend_owns(be, h + 2 * N, 1));
    ck_assert_int_eq(usp_buffer_dtype(be, h), USP_BF16);
    ck_assert_int_eq(usp_buffer_dtype(be, h + 2 * N), USP_BF16); /* the one-past-the-end pointer is its own */
    ck_assert_ptr_eq(usp_buffer_at(be, h, 10), h + 20);
    ck_assert_ptr_eq(usp_buffer_at(be, h + 6, 10), h + 26);
    ck_assert_uint_eq(usp_buffer_bytes(be, h + 6, 7), 14);
    ck_assert_int_eq(usp_buffer_alloc_as(be, N, USP_F32, "activations", (void **)&f), USP_OK);
    ck_assert_int_eq(usp_buffer_dtype(be, f), USP_F32);
    ck_assert_ptr_eq(usp_buffer_at(be, f, 10), f + 40);
    ck_assert_int_eq(usp_buffer_alloc(be, 12, "comm", (void **)&raw), USP_OK);
    ck_assert_int_eq(usp_buffer_dtype(be, raw), USP_F32); /* usp_buffer_alloc's elements count as fp32 */
    ck_assert_uint_eq(usp_backend_bytes_in_use(be), 2 * N + 4 * N + 12);
    ck_assert_ptr_eq(usp_elem_at(h, USP_BF16, 3), h + 6);
    ck_assert_ptr_eq(usp_elem_at(h, USP_F64, 3), h + 24);
    usp_backend_destroy(be);

    /* the cpu backend stores bf16 too (its kernels widen it, backends/cpu/cpu_widen.h): 2 bytes each */
    ck_assert_int_eq(usp_backend_cpu_create(&be), USP_OK);
    ck_assert_int_eq(usp_backend_stores_bf16(be), 1);
    ck_assert_int_eq(usp_buffer_alloc_as(be, N, USP_BF16, "activations", (void **)&h), USP_OK);
    ck_assert_int_eq(usp_buffer_dtype(be, h + 2 * N - 1), USP_BF16);
    ck_assert_int_eq(usp_buffer_alloc_as(be, N, USP_F32, "activations", (void **)&f), USP_OK);
    ck_assert_int_eq(usp_buffer_dtype(be, f + 4 * N - 1), USP_F32);
    ck_assert_uint_eq(usp_backend_bytes_in_use(be), 2 * N + 4 * N);
    usp_backend_destroy(be);
}
END_TEST

/* The message of the last error names the dtype of the buffer the range started in. */
static void assert_refused(usp_status s, const char *op)
{
    ck_assert_msg(s == USP_ERR_RUNTIME, "%s: status %d, expected a refusal", op, (int)s);
    ck_assert_msg(strstr(usp_error_message(), op) && strstr(usp_error_message(), "bf16"), "%s: %s", op,
                  usp_error_message());
}

START_TEST(a_float_offset_into_bf16_storage_is_refused_by_the_copies_and_ops)
{
    usp_backend_t *be;
    ck_assert_int_eq(usp_backend_meta_create(&be), USP_OK);
    float *h, *other;
    ck_assert_int_eq(usp_buffer_alloc_as(be, 2 * N, USP_BF16, "activations", (void **)&h), USP_OK);
    ck_assert_int_eq(usp_buffer_alloc_as(be, 2 * N, USP_BF16, "activations", (void **)&other), USP_OK);
    /* the second half, N bf16 elements: right through usp_buffer_at, twice as far as float * */
    float *right = usp_buffer_at(be, h, N), *wrong = h + N;
    const size_t half = usp_buffer_bytes(be, h, N);
    ck_assert_int_eq(usp_buffer_zero(be, right, half, NULL), USP_OK);
    ck_assert_int_eq(usp_buffer_copy(be, right, other, half, USP_COPY_DEVICE_TO_DEVICE, NULL), USP_OK);
    ck_assert_int_eq(usp_copy_2d(be, right, half / 2, other, half / 2, half / 2, 2, NULL), USP_OK);
    ck_assert_int_eq(usp_gelu_tanh_forward(be, right, other, N, NULL), USP_OK);
    assert_refused(usp_buffer_zero(be, wrong, half, NULL), "usp_buffer_zero");
    assert_refused(usp_buffer_copy(be, wrong, other, half, USP_COPY_DEVICE_TO_DEVICE, NULL), "usp_buffer_copy");
    assert_refused(usp_buffer_copy(be, other, wrong, half, USP_COPY_DEVICE_TO_DEVICE, NULL), "usp_buffer_copy");
    assert_refused(usp_copy_2d(be, wrong, half / 2, other, half / 2, half / 2, 2, NULL), "copy_2d");
    assert_refused(usp_gelu_tanh_forward(be, wrong, other, N, NULL), "gelu_tanh_forward");
    /* a size counted in floats from the right place runs past the end just the same */
    assert_refused(usp_buffer_zero(be, right, (size_t)N * sizeof(float), NULL), "usp_buffer_zero");
    usp_backend_destroy(be);
}
END_TEST

static void add_bytes(void *ctx, const usp_op_cost *cost) { *(double *)ctx += cost->bytes; }

START_TEST(convert_counts_elements_in_each_buffers_dtype)
{
    usp_backend_t *be;
    ck_assert_int_eq(usp_backend_meta_create(&be), USP_OK);
    double bytes = 0;
    usp_backend_set_cost_sink(be, add_bytes, &bytes);
    float *master, *weights;
    ck_assert_int_eq(usp_buffer_alloc_as(be, N, USP_F32, "optimizer", (void **)&master), USP_OK);
    ck_assert_int_eq(usp_buffer_alloc_as(be, N, USP_BF16, "weights", (void **)&weights), USP_OK);
    ck_assert_int_eq(usp_buffer_convert(be, weights, master, N, NULL), USP_OK);
    ck_assert_double_eq(bytes, 4 * N + 2 * N); /* reads fp32, writes bf16 */
    assert_refused(usp_buffer_convert(be, master, weights, N + 1, NULL), "usp_buffer_convert"); /* reads past weights */
    assert_refused(usp_buffer_convert(be, usp_buffer_at(be, weights, N / 2), master, N, NULL), "usp_buffer_convert");
    usp_backend_destroy(be);

    /* between two fp32 buffers it is a copy of the numbers */
    ck_assert_int_eq(usp_backend_cpu_create(&be), USP_OK);
    float host[N], back[N], *a, *b;
    for (int i = 0; i < N; i++)
        host[i] = (float)i * 0.25f;
    ck_assert_int_eq(usp_buffer_alloc_as(be, N, USP_F32, "test", (void **)&a), USP_OK);
    ck_assert_int_eq(usp_buffer_alloc_as(be, N, USP_F32, "test", (void **)&b), USP_OK);
    ck_assert_int_eq(usp_buffer_copy(be, a, host, sizeof host, USP_COPY_HOST_TO_DEVICE, NULL), USP_OK);
    ck_assert_int_eq(usp_buffer_convert(be, b, a, N, NULL), USP_OK);
    ck_assert_int_eq(usp_buffer_download(be, back, b, sizeof back, NULL), USP_OK);
    ck_assert_mem_eq(back, host, sizeof host);
    usp_backend_destroy(be);
}
END_TEST

/* Each rank all-gathers N bf16 elements from the second half of a [2N] bf16 buffer,
 * reached through usp_buffer_at (arg 0) or as float * (arg 1). */
static usp_status gather_second_half(const usp_rank_ctx *ctx, void *arg)
{
    const int float_units = *(const int *)arg;
    float *buf, *all;
    USP_CHECK(usp_buffer_alloc_as(ctx->backend, 2 * N, USP_BF16, "comm", (void **)&buf));
    USP_CHECK(usp_buffer_alloc_as(ctx->backend, (size_t)N * (size_t)ctx->world_size, USP_BF16, "comm", (void **)&all));
    const float *half = float_units ? buf + N : usp_buffer_at(ctx->backend, buf, N);
    usp_status s = usp_comm_all_gather(ctx->world, half, all, N, USP_BF16, ctx->stream);
    usp_buffer_free(ctx->backend, buf);
    usp_buffer_free(ctx->backend, all);
    return s;
}

static usp_status run_gather(int float_units)
{
    sim_config config = sim_config_default(2);
    config.make_backend = usp_backend_meta_create;
    sim_world *w;
    ck_assert_int_eq(sim_world_create(&config, &w), USP_OK);
    usp_status s = sim_world_run(w, gather_second_half, &float_units);
    sim_world_destroy(w);
    return s;
}

START_TEST(a_float_offset_into_bf16_storage_is_refused_by_the_communicator)
{
    ck_assert_msg(run_gather(0) == USP_OK, "%s", usp_error_message());
    ck_assert_int_eq(run_gather(1), USP_ERR_RUNTIME);
    ck_assert_msg(strstr(usp_error_message(), "all_gather"), "%s", usp_error_message());
}
END_TEST

/* A small Llama (grouped KV heads: the Ulysses gather sums shared heads) or GPT-2 (biases, tied embeddings). */
static usp_train_config bf16_config(int llama, int world, int ulysses, int ring, int zero)
{
    usp_train_config c;
    usp_train_defaults(&c);
    ck_assert_int_eq(usp_model_config_preset(llama ? "tiny" : "gpt2-124m", &c.model), USP_OK);
    c.model.vocab = 128, c.model.n_layer = 2, c.model.d_model = 32, c.model.n_head = 4, c.model.max_seq = 64;
    c.model.n_kv_head = llama ? 2 : 4, c.model.d_ff = llama ? 48 : 128;
    snprintf(c.model.name, sizeof c.model.name, "bf16-%s", llama ? "llama" : "gpt2");
    ck_assert_int_eq(usp_mesh_shape_make(world, ulysses, ring, &c.shape), USP_OK);
    c.data = "passkey", c.seq_len = 64, c.batch = c.shape.dp, c.steps = 1, c.until = 1;
    c.storage = USP_BF16, c.zero_stage = zero, c.tile_rows = 7;
    return c;
}

START_TEST(bf16_meta_steps_of_every_mesh_and_zero_stage_pass_the_ownership_checks)
{
    static const int meshes[][3] = {{4, 4, 1}, {4, 2, 2}, {4, 1, 4}, {4, 2, 1}}; /* world, ulysses, ring */
    for (int llama = 0; llama < 2; llama++)
        for (size_t m = 0; m < sizeof meshes / sizeof *meshes; m++)
            for (int zero = 0; zero <= 3; zero++)
                for (int options = 0; options < 2; options++) { /* plain, or recomputed and tiled */
                    usp_train_config c = bf16_config(llama, meshes[m][0], meshes[m][1], meshes[m][2], zero);
                    c.recompute_layers = c.tiled_mlp = c.tiled_loss = options;
                    sim_world *w;
                    usp_status s = harness_train_world(&c, usp_backend_meta_create, &w);
                    ck_assert_msg(s == USP_OK, "%s, world %d = U %d x R %d, ZeRO %d%s: %s", c.model.name,
                                  meshes[m][0], meshes[m][1], meshes[m][2], zero,
                                  options ? ", recompute + tiled" : "", usp_error_message());
                    sim_world_destroy(w);
                }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("buffer_dtype");
    TCase *tc = tcase_create("buffer_dtype");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, alloc_as_gives_storage_sized_buffers_that_know_their_dtype);
    tcase_add_test(tc, a_float_offset_into_bf16_storage_is_refused_by_the_copies_and_ops);
    tcase_add_test(tc, convert_counts_elements_in_each_buffers_dtype);
    tcase_add_test(tc, a_float_offset_into_bf16_storage_is_refused_by_the_communicator);
    tcase_add_test(tc, bf16_meta_steps_of_every_mesh_and_zero_stage_pass_the_ownership_checks);
    suite_add_tcase(s, tc);
    return check_main_run(s);
}
