/* Framework costs a user states to the planner (issue 16):
 * - `--offload optimizer` (ZeRO-Offload): what the offloaded step reports
 *   (sizes), what the host model charges for it (closed forms of
 *   sim/host_model.h), the optimizer's bytes gone from the GPU, and the
 *   refusals (a numeric backend, ZeRO 0, a bad host object in a topology file);
 * - `--loss eager` (PyTorch's cross-entropy): exactly two more fp32
 *   [tokens, vocabulary] arrays at the loss, and its refusals;
 * - `--ring-merge eager` (ring-flash-attention's merge): 28 more bytes an
 *   element of every merge, priced at the GPU's memory bandwidth, and its
 *   refusals;
 * - `usp plan --forward-only`: no backward, no optimizer step. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backends/cpu/cpu_backend.h"
#include "backends/meta/meta_backend.h"
#include "sim/cost_model.h"
#include "tests/check_main.h"
#include "tests/harness.h"
#include "tools/commands.h"

#define GB 1e9
#define MAX_COSTS 8

typedef struct recorded {
    int n;
    usp_op_cost cost[MAX_COSTS];
} recorded;

static void record(void *ctx, const usp_op_cost *cost)
{
    recorded *r = ctx;
    ck_assert_int_lt(r->n, MAX_COSTS);
    r->cost[r->n++] = *cost;
}

START_TEST(the_offloaded_step_reports_the_copies_and_the_host_update)
{
    usp_backend_t *be;
    ck_assert_int_eq(usp_backend_meta_create(&be), USP_OK);
    recorded r = {0};
    usp_backend_set_cost_sink(be, record, &r);
    const int64_t n = 1000;
    ck_assert_int_eq(usp_offloaded_adamw_cost(be, n, USP_BF16, USP_BF16, NULL), USP_OK);
    ck_assert_int_eq(r.n, 3);
    ck_assert_str_eq(r.cost[0].op, "copy_host"); /* gradients down: 2 bytes each, read + written */
    ck_assert_double_eq(r.cost[0].bytes, 2.0 * 2 * n);
    ck_assert_str_eq(r.cost[1].op, "host_adamw"); /* fp32 master, m, v, gradient in; master, m, v out; weights */
    ck_assert_double_eq(r.cost[1].bytes, (16.0 + 12 + 2) * n);
    ck_assert_str_eq(r.cost[2].op, "copy_host");
    ck_assert_double_eq(usp_backend_flops(be), 0); /* the CPUs' flops are not the GPU's */
    usp_backend_destroy(be);
}
END_TEST

START_TEST(a_backend_with_numerics_refuses_it)
{
    usp_backend_t *be;
    ck_assert_int_eq(usp_backend_cpu_create(&be), USP_OK);
    ck_assert_int_eq(usp_offloaded_adamw_cost(be, 10, USP_F32, USP_F32, NULL), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "shapes only"));
    usp_backend_destroy(be);
}
END_TEST

START_TEST(the_host_prices_copies_on_pcie_and_the_update_on_shared_dram)
{
    sim_cost_model m = {.dtype = USP_BF16};
    ck_assert(sim_topology_preset("dgx-a100", 1, &m.topology));
    const sim_host *h = &m.topology.host;
    ck_assert_double_eq_tol(h->memory_bandwidth / GB, 409.6, 1e-9);
    /* 1 GB across Gen4 x16 at 25 GB/s: 40 ms */
    usp_op_cost copy = {.op = "copy_host", .bytes = 2.0 * GB};
    ck_assert_double_eq_tol(sim_cost_compute(&m, &copy), 1.0 / 25.0, 1e-12);
    /* 30 GB of updates, 8 ranks a node sharing 409.6 x 0.5 GB/s */
    usp_op_cost update = {.op = "host_adamw", .bytes = 30.0 * GB};
    ck_assert_double_eq_tol(sim_cost_compute(&m, &update), 30.0 * 8 / (409.6 * 0.5), 1e-12);
    usp_op_cost gemm = {.op = "gemm", .flops = 1e12}; /* a GPU op is the GPU's */
    ck_assert_double_eq_tol(sim_cost_compute(&m, &gemm), 1e12 / (312e12 * 0.8), 1e-12);
}
END_TEST

/* `usp plan ARGS --json` (with --json appended), parsed; exit code into *code. */
static json_t *plan_json(const char *const *args, int n, int *code)
{
    char *argv[32] = {"usp", "plan"};
    int argc = 2;
    for (int i = 0; i < n; i++)
        argv[argc++] = (char *)args[i];
    argv[argc++] = "--json";
    static char out[1 << 16];
    *code = harness_run_command(cmd_plan, argv, argc, out, sizeof out);
    return json_loads(out, 0, NULL);
}

/* The same, for a plan that must succeed. */
static json_t *plan_ok(const char *const *args, int n)
{
    int code;
    json_t *j = plan_json(args, n, &code);
    ck_assert_int_eq(code, 0);
    ck_assert_ptr_nonnull(j);
    return j;
}

static double category(const json_t *j, const char *name)
{
    return json_number_value(json_object_get(json_object_get(j, "memory_at_peak"), name));
}

START_TEST(the_optimizer_leaves_the_gpu_and_the_step_pays_the_host)
{
    const char *base[] = {"--model", "llama-7b", "--world", "8", "--ring", "8", "--seq", "65536", "--topology",
                          "dgx-a100", "--dtype", "bf16", "--zero", "3", "--recompute"};
    const char *off[] = {"--model", "llama-7b", "--world", "8", "--ring", "8", "--seq", "65536", "--topology",
                         "dgx-a100", "--dtype", "bf16", "--zero", "3", "--recompute", "--offload", "optimizer"};
    json_t *a = plan_ok(base, 15), *b = plan_ok(off, 17);
    ck_assert_str_eq(json_string_value(json_object_get(b, "offload")), "optimizer");
    ck_assert_double_gt(category(a, "optimizer"), 0);
    ck_assert_double_eq(category(b, "optimizer"), 0);
    /* llama-7b's 6.74 B parameters over 8 ranks, 12 bytes each (fp32 master, m, v): ~10 GB */
    ck_assert_double_eq_tol(category(a, "optimizer") / GB, 6.74e9 / 8 * 12 / GB, 0.05);
    /* The host's update of a rank's 0.84 B parameters, 8 ranks sharing 204.8 GB/s, is
     * 30 bytes x 6.74 B / 204.8 GB/s ~ 0.99 s; the copies 4 bytes x 0.84 B / 25 GB/s ~ 0.13 s;
     * the GPU's own AdamW (fp32 state, HBM-bound) is gone. */
    double more = json_number_value(json_object_get(b, "step_time_s")) -
                  json_number_value(json_object_get(a, "step_time_s"));
    ck_assert_msg(more > 0.9 && more < 1.2, "offloading added %.3f s", more);
    json_decref(a);
    json_decref(b);
}
END_TEST

START_TEST(offload_without_zero_and_a_bad_host_are_refused)
{
    const char *zero0[] = {"--model", "tiny", "--world", "2", "--offload", "optimizer"};
    int code;
    json_t *j = plan_json(zero0, 6, &code);
    json_decref(j);
    ck_assert_int_eq(code, 2);
    const char *bad[] = {"--model", "tiny", "--world", "2", "--offload", "gpu"};
    j = plan_json(bad, 6, &code);
    json_decref(j);
    ck_assert_int_eq(code, 2);
    char path[] = "/tmp/usp_test_host_XXXXXX.json";
    int fd = mkstemps(path, 5);
    ck_assert_int_ge(fd, 0);
    const char *text = "{\"gpu\": \"a100-80g\", \"gpus_per_node\": 2, \"fabric\": {\"kind\": \"nvswitch\", \"gpu_link\": "
                       "{\"bandwidth_gbs\": 300}}, \"host\": {\"memory_bandwidth_gbs\": 0}}";
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    sim_topology t;
    ck_assert_int_eq(sim_topology_from_name_or_file(path, 1, &t), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "host.memory_bandwidth_gbs"));
    unlink(path);
}
END_TEST

START_TEST(an_eager_loss_holds_two_more_fp32_logit_arrays)
{
    const char *fused[] = {"--model", "gpt2-124m", "--world", "1", "--seq", "1024", "--batch", "1"};
    const char *eager[] = {"--model", "gpt2-124m", "--world", "1", "--seq", "1024", "--batch", "1", "--loss", "eager"};
    json_t *a = plan_ok(fused, 8), *b = plan_ok(eager, 10);
    ck_assert_str_eq(json_string_value(json_object_get(b, "loss")), "eager");
    /* the loss is the peak: its activations grow by the saved log-softmax and the incoming gradient */
    ck_assert_double_eq(category(b, "activations") - category(a, "activations"), 2.0 * 4 * 1024 * 50257);
    ck_assert_double_gt(json_number_value(json_object_get(b, "step_time_s")),
                        json_number_value(json_object_get(a, "step_time_s")));
    json_decref(a);
    json_decref(b);
    const char *tiled[] = {"--model", "tiny", "--loss", "eager", "--tiled-loss"};
    const char *bad[] = {"--model", "tiny", "--loss", "lazy"};
    int code;
    json_decref(plan_json(tiled, 5, &code));
    ck_assert_int_eq(code, 2);
    json_decref(plan_json(bad, 4, &code));
    ck_assert_int_eq(code, 2);
}
END_TEST

/* The model's numbers for the checks below: rank 0's modelled compute time and the JSON. */
static double number(const json_t *j, const char *key) { return json_number_value(json_object_get(j, key)); }

START_TEST(an_eager_ring_merge_moves_28_more_bytes_an_element_a_merge)
{
    /* tiny (2 layers, 4 heads of 16) at 4096 tokens on a ring of 2, zigzag: a rank holds 2 runs of
     * 1024 tokens and computes 2R + 1 = 5 products a layer, the first of each run written in place:
     * 3 merges a layer of E = 1024 x 4 x 16 elements. Each moves 28 more bytes an element (a copy of
     * fp32, 8; an accumulate, 12; a copy, 8), memory-bound on an H100. */
    const char *fused[] = {"--model", "tiny", "--world", "2", "--ring", "2", "--seq", "4096", "--forward-only"};
    const char *eager[] = {"--model", "tiny", "--world", "2", "--ring", "2", "--seq", "4096", "--forward-only",
                           "--ring-merge", "eager"};
    json_t *a = plan_ok(fused, 9), *b = plan_ok(eager, 11);
    ck_assert_str_eq(json_string_value(json_object_get(b, "ring_merge")), "eager");
    sim_gpu h100;
    ck_assert(sim_gpu_preset("h100-sxm", &h100));
    double E = 1024.0 * 4 * 16, want = 2 * 3 * 28 * E / (h100.hbm_bandwidth * h100.memory_efficiency);
    double got = number(b, "compute_time_s") - number(a, "compute_time_s");
    ck_assert_msg(fabs(got - want) <= 1e-6 * want, "eager merges added %.9g s of compute, closed form %.9g", got,
                  want);
    json_decref(a);
    json_decref(b);
    const char *bad[] = {"--model", "tiny", "--ring-merge", "lazy"};
    int code;
    json_decref(plan_json(bad, 4, &code));
    ck_assert_int_eq(code, 2);
    /* a backend that computes refuses it: a framework's merge is a cost, not usp's numerics */
    char *train[] = {"usp", "train", "--world", "2", "--ring", "2", "--steps", "1", "--ring-merge", "eager"};
    static char out[1 << 14];
    ck_assert_int_eq(harness_run_command(cmd_train, train, 10, out, sizeof out), 2);
}
END_TEST

START_TEST(a_forward_only_plan_runs_no_backward_and_no_update)
{
    const char *step[] = {"--model", "llama-1b", "--world", "8", "--seq", "32768"};
    const char *forward[] = {"--model", "llama-1b", "--world", "8", "--seq", "32768", "--forward-only"};
    json_t *a = plan_ok(step, 6), *b = plan_ok(forward, 7);
    ck_assert(json_is_true(json_object_get(b, "forward_only")));
    ck_assert(json_is_false(json_object_get(a, "forward_only")));
    /* a training step does about 3x its forward's work; a forward pass only the forward and the loss */
    ck_assert_double_gt(number(a, "step_flops"), 2.5 * number(a, "fwd_flops"));
    ck_assert_double_le(number(b, "step_flops"), 1.01 * number(b, "fwd_flops"));
    ck_assert_double_eq_tol(number(b, "fwd_flops"), number(a, "fwd_flops"), 1e-6 * number(a, "fwd_flops"));
    ck_assert_double_lt(number(b, "step_time_s"), 0.5 * number(a, "step_time_s"));
    json_decref(a);
    json_decref(b);
    /* only a plan: a backend that computes refuses a step without its backward */
    usp_train_config c;
    usp_train_defaults(&c);
    ck_assert_int_eq(usp_model_config_preset("tiny", &c.model), USP_OK);
    ck_assert_int_eq(usp_mesh_shape_make(2, 2, 1, &c.shape), USP_OK);
    c.data = "passkey", c.seq_len = 64, c.batch = 2, c.steps = 1, c.forward_only = 1;
    usp_train_result result;
    char report[1024];
    ck_assert_int_eq(harness_train(&c, &result, report, sizeof report), USP_ERR_CONFIG);
    ck_assert_msg(strstr(report, "forward-only"), "%s", report);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("framework costs");
    TCase *tc = tcase_create("framework costs");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, the_offloaded_step_reports_the_copies_and_the_host_update);
    tcase_add_test(tc, a_backend_with_numerics_refuses_it);
    tcase_add_test(tc, the_host_prices_copies_on_pcie_and_the_update_on_shared_dram);
    tcase_add_test(tc, the_optimizer_leaves_the_gpu_and_the_step_pays_the_host);
    tcase_add_test(tc, offload_without_zero_and_a_bad_host_are_refused);
    tcase_add_test(tc, an_eager_loss_holds_two_more_fp32_logit_arrays);
    tcase_add_test(tc, an_eager_ring_merge_moves_28_more_bytes_an_element_a_merge);
    tcase_add_test(tc, a_forward_only_plan_runs_no_backward_and_no_update);
    suite_add_tcase(s, tc);
    return check_main_run(s);
}
