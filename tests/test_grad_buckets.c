/* Gradients reduced once, in buckets, during backward (core/model/grad_buckets.h).
 *
 * - Each of the overlap's two event waits is needed: on the lazy backend
 *   (backends/lazy: work runs as late as the stream contract allows, and its
 *   order checker stops a run at two accesses from two streams that nothing
 *   orders), the run with both waits gives the cpu run's weights bit for bit,
 *   and the run without either (the test hook) is stopped: the all-reduce
 *   reads a gradient backward has not written yet, or AdamW (ZeRO 3: the
 *   shard's accumulation) reads one not yet summed.
 * - One pass over the gradient: a step's gradient collectives take in the
 *   gradient's bytes once (ZeRO 0-1: all-reduces over the world, one per bucket;
 *   2-3: a reduce-scatter per store bucket, whose input is padded to W equal
 *   shards), counted by the store and, independently, in the simulator's trace
 *   by call site; where it was an all-reduce over sp, then one over dp, twice.
 *   Both run on the reducer's stream: the waits are tested at every stage.
 * - The bucket size changes no bit: an element is summed over the same ranks in
 *   the same order whatever bucket carries it. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_backend.h"
#include "backends/lazy/lazy_backend.h"
#include "core/model/grad_buckets.h"
#include "core/trace/comm_kind.h"
#include "core/trace/trace.h"
#include "tests/check_main.h"
#include "tests/harness.h"

/* Every layer its own bucket: the smallest cap (one byte) takes one layer at a time. */
#define PER_LAYER_MB 1e-9

/* A small Llama on 4 ranks, U x R x DP = 4, three steps of two sequences. */
static usp_train_config config_for(int ulysses, int ring, int zero, double bucket_mb)
{
    usp_train_config c;
    usp_train_defaults(&c);
    ck_assert_int_eq(usp_model_config_preset("tiny", &c.model), USP_OK);
    c.model.vocab = 128, c.model.n_layer = 3, c.model.d_model = 32, c.model.n_head = 4, c.model.n_kv_head = 2;
    c.model.d_ff = 48, c.model.max_seq = 64;
    ck_assert_int_eq(usp_mesh_shape_make(4, ulysses, ring, &c.shape), USP_OK);
    c.data = "passkey", c.seq_len = 64, c.batch = 2, c.steps = 3, c.warmup = 1, c.eval_samples = 0;
    c.zero_stage = zero, c.bucket_mb = bucket_mb;
    return c;
}

/* Trains `config` on backends from `factory`, tracing; the final weights into `weights` (may be NULL);
 * *status the run's (NULL: it must succeed). The world is the caller's to destroy. */
static sim_world *train_run(const usp_train_config *config, sim_backend_factory factory, float *weights,
                            usp_train_result *result, usp_status *status)
{
    usp_train_config c = *config;
    harness_tensors tensors = {.last_weights = weights};
    c.on_record = harness_record_tensors, c.record_ctx = &tensors, c.record_tensors = weights != NULL;
    sim_config sc = sim_config_default(c.shape.world);
    sc.make_backend = factory, sc.stack_bytes = (size_t)1 << 20;
    sim_world *w;
    ck_assert_int_eq(sim_world_create(&sc, &w), USP_OK);
    *result = (usp_train_result){.passkey_accuracy = -1};
    usp_train_run run = {.config = &c, .result = result};
    usp_status s = sim_world_run(w, usp_train_rank, &run);
    ck_assert_msg(status || s == USP_OK, "%s %s", sim_world_report(w), usp_error_message());
    if (status)
        *status = s;
    return w;
}

static sim_world *train(const usp_train_config *c, sim_backend_factory factory, float *weights, usp_train_result *r)
{
    return train_run(c, factory, weights, r, NULL);
}

/* The final weights of `c` on `factory`'s backends (malloc'd); *status the run's (NULL: it must succeed). */
static float *weights_of(const usp_train_config *c, sim_backend_factory factory, usp_status *status)
{
    float *w = calloc((size_t)harness_param_total(&c->model), sizeof *w);
    usp_train_result result;
    sim_world_destroy(train_run(c, factory, w, &result, status));
    return w;
}

/* DP 2 x U 2 at ZeRO 0 (the buckets' all-reduce), U 2 x R 2 at ZeRO 1; the reduce-scatters of DP 2 x U 2
 * at ZeRO 2, and at ZeRO 3 with two micro-batches (each pass's shard added to the one kept). */
START_TEST(each_wait_of_the_overlap_is_needed)
{
    usp_train_config c = config_for(2, _i == 1 ? 2 : 1, _i, PER_LAYER_MB);
    c.micro_batches = _i == 3 ? 2 : 1, c.batch = _i == 3 ? 4 : 2; /* two sequences a replica, one a pass */
    const size_t bytes = (size_t)harness_param_total(&c.model) * sizeof(float);
    float *ref = weights_of(&c, usp_backend_cpu_create, NULL), *lazy = weights_of(&c, usp_backend_lazy_create, NULL);
    ck_assert_msg(memcmp(ref, lazy, bytes) == 0, "the lazy backend's weights are not the cpu backend's");
    static const char *const wait[] = {"", "the comm stream's wait for the gradient (ready)",
                                       "the compute stream's wait for the sums (done)"};
    for (unsigned skip = 1; skip <= 2; skip++) {
        usp_grad_buckets_skip_waits_for_tests(skip);
        usp_status s;
        float *got = weights_of(&c, usp_backend_lazy_create, &s); /* a gradient read early may even diverge */
        usp_grad_buckets_skip_waits_for_tests(0);
        size_t differ = 0;
        for (size_t k = 0; k < bytes / sizeof *got; k++)
            differ += memcmp(&ref[k], &got[k], sizeof *got) != 0;
        printf("ZeRO %d, without %s: %s, %zu of %zu weights differ\n", _i, wait[skip],
               s == USP_OK ? "the run ends" : usp_error_message(), differ, bytes / sizeof *got);
        ck_assert_msg(s != USP_OK && strstr(usp_error_message(), HARNESS_RACE_FOUND),
                      "without %s the lazy backend's order checker finds no race", wait[skip]);
        free(got);
    }
    free(ref), free(lazy);
}
END_TEST

/* ceil(len / W) summed over the store's buckets (embeddings, each layer, final norm + lm_head), times W. */
static int64_t padded_elems(const usp_model_config *m, int W)
{
    usp_param_table t;
    ck_assert_int_eq(usp_param_table_make(m, &t), USP_OK);
    int64_t len[64] = {0}, sum = 0;
    int seen_layer = 0;
    for (int i = 0; i < t.n; i++) {
        seen_layer |= t.tensors[i].layer >= 0;
        len[t.tensors[i].layer >= 0 ? t.tensors[i].layer + 1 : seen_layer ? m->n_layer + 1 : 0] += t.tensors[i].count;
    }
    for (int b = 0; b < m->n_layer + 2; b++)
        sum += (len[b] + W - 1) / W * W;
    usp_param_table_free(&t);
    return sum;
}

/* Rank 0's gradient collectives in the trace (one step): those issued at `file`, of `kind`. */
static int traced(const sim_world *w, const char *file, usp_comm_kind kind)
{
    const usp_trace_t *t = sim_world_trace(w);
    int n = 0;
    for (size_t e = 0; e < usp_trace_count(t); e++) {
        const usp_trace_event *ev = usp_trace_at(t, e);
        n += ev->rank == 0 && (int)ev->kind == (int)kind && ev->file && strstr(ev->file, file) != NULL;
    }
    return n;
}

/* DP 2 x U 2, one step, at ZeRO 0, 1 and 2: the gradient's bytes go in once. */
START_TEST(a_step_sends_the_gradient_in_once)
{
    const int zero = _i;
    usp_train_config c = config_for(2, 1, zero, PER_LAYER_MB);
    c.until = 1;
    const int64_t P = harness_param_total(&c.model), parts = c.model.n_layer + 2;
    usp_train_result r;
    sim_world *w = train(&c, usp_backend_cpu_create, NULL, &r);
    printf("ZeRO %d, DP 2 x U 2, a bucket a layer: %d gradient collectives, %lld bytes (the gradient: %lld)\n", zero,
           r.grad_collectives, (long long)r.grad_bytes, (long long)(4 * P));
    if (zero < 2) {
        ck_assert_int_eq(r.grad_collectives, parts);
        ck_assert_int_eq(r.grad_bytes, 4 * P); /* sp then dp was 2 x 4 P */
        ck_assert_int_eq(traced(w, "grad_buckets.c", USP_OP_ALL_REDUCE), r.grad_collectives);
        ck_assert_int_eq(traced(w, "param_store.c", USP_OP_ALL_REDUCE), 0); /* the old sp, then dp */
    } else {
        ck_assert_int_eq(r.grad_collectives, parts);
        ck_assert_int_eq(r.grad_bytes, 4 * padded_elems(&c.model, 4));
        ck_assert_int_eq(traced(w, "grad_buckets.c", USP_OP_REDUCE_SCATTER), r.grad_collectives);
    }
    sim_world_destroy(w);
    if (zero < 2) { /* the default cap (25 MiB) holds the whole small model: one all-reduce */
        c.bucket_mb = 0;
        sim_world_destroy(train(&c, usp_backend_cpu_create, NULL, &r));
        ck_assert_int_eq(r.grad_collectives, 1);
        ck_assert_int_eq(r.grad_bytes, 4 * P);
    }
}
END_TEST

/* U 2 x R 2 and DP 2 x U 2: a bucket a layer and one bucket for all give the same weights, bit for bit. */
START_TEST(the_bucket_size_changes_no_bit)
{
    usp_train_config each = config_for(2, _i == 0 ? 2 : 1, 0, PER_LAYER_MB), one = each;
    one.bucket_mb = 100;
    float *a = weights_of(&each, usp_backend_cpu_create, NULL), *b = weights_of(&one, usp_backend_cpu_create, NULL);
    ck_assert(memcmp(a, b, (size_t)harness_param_total(&each.model) * sizeof *a) == 0);
    free(a), free(b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("grad_buckets");
    TCase *tc = tcase_create("grad_buckets");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, each_wait_of_the_overlap_is_needed, 0, 4);
    tcase_add_loop_test(tc, a_step_sends_the_gradient_in_once, 0, 3);
    tcase_add_loop_test(tc, the_bucket_size_changes_no_bit, 0, 2);
    suite_add_tcase(s, tc);
    return check_main_run(s);
}
