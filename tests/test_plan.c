/* The meta backend and the planner: the meta run's memory is the numeric
 * run's (so the plan is the code's memory, not a formula), its forward FLOPs
 * are the closed form of docs/planning.md, the simulator's time splits
 * exactly into compute, communication and waiting, --sweep ranks the splits
 * the way the topology says it should, and a run on shapes only reads nothing
 * back. */
#include <check.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/meta/meta_backend.h"
#include "core/train/train.h"
#include "plan/fit.h"
#include "plan/plan.h"
#include "plan/sweep.h"
#include "sim/world.h"
#include "tests/check_main.h"
#include "tests/harness.h"
#include "tools/commands.h"

static sim_cost_model cluster(const char *preset, int nodes)
{
    sim_cost_model m = {.dtype = USP_BF16};
    ck_assert(sim_topology_preset(preset, nodes, &m.topology));
    return m;
}

static usp_train_config config_of(const char *model, int world, int ulysses, int ring, int64_t seq, int64_t batch)
{
    usp_train_config c;
    ck_assert_int_eq(harness_config(model, world, ulysses, ring, seq, batch, &c), USP_OK);
    return c;
}

/* A small model with GQA (Llama) or biases, LayerNorm and learned positions (GPT-2); "llama-head_dim":
 * Llama whose attention (4 heads of 24 = 96) is wider than d_model 64, as Qwen3's. */
static usp_model_config small_model(const char *family)
{
    usp_model_config m;
    ck_assert_int_eq(usp_model_config_preset(strcmp(family, "gpt2") == 0 ? "gpt2-124m" : "tiny", &m), USP_OK);
    m.vocab = 128, m.n_layer = 2, m.d_model = 64, m.n_head = 4, m.max_seq = 256;
    m.n_kv_head = strcmp(family, "gpt2") == 0 ? 4 : 2, m.d_ff = 96;
    if (strcmp(family, "llama-head_dim") == 0)
        m.head_dim = 24;
    return m;
}

/* One step of `c` on the simulator with `factory` (NULL: cpu); the world is kept for inspection. */
static sim_world *run_step(const usp_train_config *c, sim_backend_factory factory, usp_train_step_stats *stats)
{
    usp_train_config run_config = *c;
    run_config.step_stats = stats;
    sim_world *w;
    ck_assert_msg(harness_train_world(&run_config, factory, &w) == USP_OK, "%s", usp_error_message());
    return w;
}

START_TEST(meta_memory_and_costs_equal_the_numeric_run)
{
    const char *families[] = {"llama", "gpt2", "llama-head_dim"};
    const int shapes[][3] = {{4, 4, 1}, {4, 2, 2}, {4, 1, 2}}; /* W, U, R: Ulysses, hybrid, ring with dp 2 */
    for (int f = 0; f < 3; f++)
        for (int k = 0; k < 3; k++) {
            usp_train_config c;
            usp_train_defaults(&c);
            c.model = small_model(families[f]);
            ck_assert_int_eq(usp_mesh_shape_make(shapes[k][0], shapes[k][1], shapes[k][2], &c.shape), USP_OK);
            c.data = "passkey", c.seq_len = 128, c.batch = 2, c.steps = 1;
            const int W = c.shape.world;
            usp_train_step_stats numeric[4], meta[4];
            sim_world *wn = run_step(&c, NULL, numeric), *wm = run_step(&c, usp_backend_meta_create, meta);
            for (int r = 0; r < W; r++) {
                ck_assert_str_eq(usp_backend_name(sim_world_backend(wm, r)), "meta");
                ck_assert_msg(sim_world_peak_bytes(wn, r) == sim_world_peak_bytes(wm, r),
                              "%s W%d U%d R%d rank %d: numeric peak %zu bytes, meta %zu", families[f], W,
                              shapes[k][1], shapes[k][2], r, sim_world_peak_bytes(wn, r), sim_world_peak_bytes(wm, r));
                const char *names_n[16], *names_m[16];
                size_t bytes_n[16], bytes_m[16];
                int nn = usp_backend_peak_breakdown(sim_world_backend(wn, r), names_n, bytes_n, 16);
                int nm = usp_backend_peak_breakdown(sim_world_backend(wm, r), names_m, bytes_m, 16);
                ck_assert_int_eq(nn, nm);
                ck_assert_int_ge(nn, 5); /* weights, gradients, activations, optimizer, comm at least */
                size_t sum = 0;
                for (int i = 0; i < nn; i++) {
                    ck_assert_str_eq(names_n[i], names_m[i]);
                    ck_assert_msg(bytes_n[i] == bytes_m[i], "rank %d, %s at the peak: numeric %zu, meta %zu", r,
                                  names_n[i], bytes_n[i], bytes_m[i]);
                    sum += bytes_m[i];
                }
                ck_assert_uint_eq(sum, sim_world_peak_bytes(wm, r)); /* the breakdown is the whole peak */
                /* the same calls: the same FLOPs, and the same modelled time for the step */
                ck_assert_double_eq(numeric[r].fwd_flops, meta[r].fwd_flops);
                ck_assert_double_eq(numeric[r].step_flops, meta[r].step_flops);
                ck_assert(meta[r].fwd_flops > 0 && meta[r].step_flops > 2 * meta[r].fwd_flops);
                double tn = numeric[r].end_s - numeric[r].start_s, tm = meta[r].end_s - meta[r].start_s;
                ck_assert_msg(fabs(tn - tm) <= 1e-9 * tm, "rank %d: step %.12g s numeric, %.12g s meta", r, tn, tm);
            }
            sim_world_destroy(wn);
            sim_world_destroy(wm);
        }
}
END_TEST

/* Forward FLOPs of a Llama model over N tokens, batch B (docs/planning.md):
 * GEMMs 2 B N (L (C (H + 2 Hkv) D + H D C + 3 F C) + C V) and causal
 * attention 4 B L H D N (N + 1) / 2, in exact integer arithmetic. */
static void llama_forward_closed_form(const usp_model_config *m, int64_t N, int64_t B, double *gemm, double *attention)
{
    const int64_t C = m->d_model, H = m->n_head, Hkv = m->n_kv_head, D = usp_model_config_head_dim(m), F = m->d_ff;
    const int64_t L = m->n_layer;
    int64_t per_token = L * (C * (H + 2 * Hkv) * D + H * D * C + 3 * F * C) + C * m->vocab;
    ck_assert(per_token < INT64_MAX / (2 * B * N));
    int64_t pairs = N * (N + 1) / 2; /* causal: query i sees i + 1 keys */
    ck_assert(pairs < INT64_MAX / (4 * B * L * H * D));
    *gemm = (double)(2 * B * N * per_token);
    *attention = (double)(4 * B * L * H * D * pairs);
}

static void check_forward_flops(const plan_result *r, double gemm, double attention)
{
    double closed = gemm + attention;
    /* the rest of the forward (norms, rope, SwiGLU, residual adds) is a few per mille */
    ck_assert_msg(r->fwd_flops >= closed && r->fwd_flops <= 1.01 * closed,
                  "forward %.6g FLOP against the closed form %.6g (GEMM %.6g + attention %.6g)", r->fwd_flops, closed,
                  gemm, attention);
}

START_TEST(llama_7b_at_a_million_tokens_matches_the_closed_form)
{
    usp_train_config c = config_of("llama-7b", 8, 8, 1, 1048576, 1);
    double gemm, attention;
    llama_forward_closed_form(&c.model, c.seq_len, c.batch, &gemm, &attention);
    /* issue 5: about 302 PFLOP, attention about 288 */
    ck_assert_msg(fabs(gemm + attention - 302e15) < 0.01 * 302e15, "closed form %.6g", gemm + attention);
    ck_assert_msg(fabs(attention - 288e15) < 0.01 * 288e15, "attention %.6g", attention);
    sim_cost_model h100 = cluster("dgx-h100", 1);
    plan_result r;
    ck_assert_int_eq(plan_run(&c, &h100, NULL, &r), USP_OK);
    check_forward_flops(&r, gemm, attention);
    /* fp32 by default: 7B weights, gradients and two Adam moments are 16 bytes a parameter already */
    ck_assert(!r.fits && r.peak_bytes[0] > 16.0 * 6.7e9);
    ck_assert(r.step_time_s > 0 && r.mfu > 0 && r.mfu < 1);
    plan_result_free(&r);

    /* 64 nodes: U 8 inside a node, ring of 64 across; the same work */
    c = config_of("llama-7b", 512, 8, 64, 1048576, 1);
    sim_cost_model pod = cluster("dgx-h100", 64);
    ck_assert_int_eq(plan_run(&c, &pod, NULL, &r), USP_OK);
    check_forward_flops(&r, gemm, attention);
    ck_assert(r.step_time_s > 0 && r.comm_time_s > 0);
    plan_result_free(&r);
}
END_TEST

/* Qwen3-4B's shapes (tests/validation/qwen3-4b.json, as a llama config): attention 32 x 128 = 4096 wide
 * on d_model 2560, so the q and o GEMMs are H D C each, not C^2: the forward is the closed form. */
START_TEST(a_model_with_its_own_head_width_matches_the_closed_form)
{
    usp_train_config c = config_of("llama-1b", 4, 4, 1, 65536, 1);
    c.model.vocab = 151936, c.model.n_layer = 36, c.model.d_model = 2560, c.model.d_ff = 9728;
    c.model.n_head = 32, c.model.n_kv_head = 8, c.model.head_dim = 128, c.model.tied_embeddings = 1;
    c.model.rope_scaling = (usp_rope_scaling){0}, c.model.rope_theta = 1e6f, c.model.max_seq = 40960;
    c.storage = USP_BF16, c.zero_stage = 3, c.recompute_layers = 1;
    double gemm, attention;
    llama_forward_closed_form(&c.model, c.seq_len, c.batch, &gemm, &attention);
    sim_cost_model h100 = cluster("dgx-h100", 1);
    plan_result r;
    ck_assert_int_eq(plan_run(&c, &h100, NULL, &r), USP_OK);
    check_forward_flops(&r, gemm, attention);
    plan_result_free(&r);
}
END_TEST

/* The ladder of plan/fit.c: the first cumulative set of options that fits, checked against plain plan_runs. */
START_TEST(a_step_that_does_not_fit_gets_the_options_that_make_it_fit)
{
    usp_train_config c = config_of("tiny", 4, 4, 1, 16384, 1); /* 4096 rows a rank: the loss has 4 tiles */
    sim_cost_model h100 = cluster("dgx-h100", 1);
    plan_result plain, bf16, bf16_loss;
    ck_assert_int_eq(plan_run(&c, &h100, NULL, &plain), USP_OK);
    usp_train_config b = c;
    b.storage = USP_BF16;
    ck_assert_int_eq(plan_run(&b, &h100, NULL, &bf16), USP_OK);
    b.tiled_loss = 1;
    ck_assert_int_eq(plan_run(&b, &h100, NULL, &bf16_loss), USP_OK);
    const size_t p0 = plain.peak_bytes[plain.peak_rank], p1 = bf16.peak_bytes[bf16.peak_rank];
    const size_t p2 = bf16_loss.peak_bytes[bf16_loss.peak_rank];
    ck_assert(p2 < p1 && p1 < p0);

    plan_fit fit;
    h100.topology.gpu.memory_bytes = (double)p0 - 1; /* bf16 alone is enough */
    ck_assert_int_eq(plan_would_fit(&c, &h100, &fit), USP_OK);
    ck_assert(fit.found && fit.tries == 1);
    ck_assert_str_eq(fit.options, "--dtype bf16");
    ck_assert_uint_eq(fit.peak_bytes, p1);

    h100.topology.gpu.memory_bytes = (double)p1 - 1; /* bf16 and the tiled loss */
    ck_assert_int_eq(plan_would_fit(&c, &h100, &fit), USP_OK);
    ck_assert(fit.found && fit.tries == 2);
    ck_assert_str_eq(fit.options, "--dtype bf16 --tiled-loss");
    ck_assert_uint_eq(fit.peak_bytes, p2);

    /* nothing fits in 1 MB: every option tried, ZeRO 3 last (--recompute replacing --selective-recompute); U4 on */
    h100.topology.gpu.memory_bytes = 1e6;
    ck_assert_int_eq(plan_would_fit(&c, &h100, &fit), USP_OK); /* 4 GPUs has no larger SP degree to try */
    ck_assert(!fit.found && !fit.other_split && fit.splits_tried == 0 && fit.tries == 8);
    ck_assert_str_eq(fit.options, "--dtype bf16 --tiled-loss --zero 3 --tiled-mlp --recompute");
    plan_result_free(&plain), plan_result_free(&bf16), plan_result_free(&bf16_loss);

    /* issue 5's configuration: 1.55 TB a rank in fp32; the options the plan names fit it in 80 GB */
    c = config_of("llama-7b", 8, 8, 1, 1048576, 1);
    h100 = cluster("dgx-h100", 1);
    ck_assert_int_eq(plan_would_fit(&c, &h100, &fit), USP_OK);
    ck_assert_msg(fit.found && fit.peak_bytes <= 80e9, "%s: %zu bytes", fit.options, fit.peak_bytes);

    /* 8 sequences a replica: the ladder runs them one a pass (gradient accumulation) before ZeRO, and
     * that plan holds one sequence's activations: under the 8-sequence step's, and it fits */
    c = config_of("llama-7b", 8, 8, 1, 65536, 8);
    c.storage = USP_BF16, c.zero_stage = 1;
    ck_assert_int_eq(plan_would_fit(&c, &h100, &fit), USP_OK);
    ck_assert_str_eq(fit.options, "--tiled-loss --selective-recompute --micro-batches 8");
    ck_assert_msg(fit.found && fit.peak_bytes <= 80e9, "%s: %zu bytes", fit.options, fit.peak_bytes);
}
END_TEST

/* Issue 16: before advising more GPUs, the fit search tries the other splits of the same GPUs (there, a
 * 30B model at 256K on 64 GPUs as U8 x DP8 was told to use more GPUs although U16 x DP4 fits). Here tiny
 * on 8 GPUs as U2 x DP4, on a GPU whose memory lies between the peaks of U2 x DP4 and U4 x DP2 with every
 * memory option on: no option makes U2 x DP4 fit, a larger SP degree over the same 8 GPUs does. */
START_TEST(the_fit_search_tries_other_splits_of_the_same_gpus_before_more_gpus)
{
    sim_cost_model m = cluster("dgx-h100", 1);
    usp_train_config c = config_of("tiny", 8, 2, 1, 65536, 4), lean = c; /* one sequence a replica */
    lean.storage = USP_BF16, lean.tiled_loss = 1, lean.zero_stage = 3, lean.tiled_mlp = 1, lean.recompute_layers = 1;
    usp_train_config wide = lean;
    wide.batch = 2;
    ck_assert_int_eq(usp_mesh_shape_make(8, 4, 1, &wide.shape), USP_OK);
    plan_result own, spread;
    ck_assert_int_eq(plan_run(&lean, &m, NULL, &own), USP_OK);
    ck_assert_int_eq(plan_run(&wide, &m, NULL, &spread), USP_OK);
    size_t own_peak = own.peak_bytes[own.peak_rank], spread_peak = spread.peak_bytes[spread.peak_rank];
    plan_result_free(&own), plan_result_free(&spread);
    ck_assert_msg(spread_peak < own_peak, "U4 x DP2: %zu bytes, U2 x DP4: %zu", spread_peak, own_peak);
    m.topology.gpu.memory_bytes = (double)(spread_peak + own_peak) / 2;

    plan_fit fit;
    ck_assert_int_eq(plan_would_fit(&c, &m, &fit), USP_OK);
    ck_assert_msg(fit.found && fit.other_split, "found %d, other split %d: %s", fit.found, fit.other_split,
                  fit.options);
    /* the smallest larger SP degree (4), the larger U first: U4 x DP2, still one sequence a replica */
    ck_assert(fit.ulysses == 4 && fit.ring == 1 && fit.dp == 2 && fit.batch == 2);
    ck_assert(fit.peak_bytes <= m.topology.gpu.memory_bytes);
    ck_assert_int_eq(fit.splits_tried, 1);

    m.topology.gpu.memory_bytes = 1e6; /* no split of 8 GPUs fits in 1 MB: more GPUs, then */
    ck_assert_int_eq(plan_would_fit(&c, &m, &fit), USP_OK);
    /* SP 4: U4, U2 x R2, U1 x R4; SP 8: U4 x R2, U2 x R4, U1 x R8 (U8 is refused: 4 heads, and not counted) */
    ck_assert(!fit.found && !fit.other_split && fit.splits_tried == 6);
    ck_assert(fit.ulysses == 2 && fit.dp == 4); /* the run's own split, with every option */
}
END_TEST

START_TEST(step_time_is_compute_plus_communication_plus_waiting_less_what_is_hidden)
{
    usp_train_config c = config_of("gpt2-124m", 8, 2, 2, 1024, 2); /* dp 2: every group kind talks */
    sim_cost_model pcie = cluster("pcie-gen4", 1);
    plan_result r;
    ck_assert_int_eq(plan_run(&c, &pcie, NULL, &r), USP_OK);
    /* the ring forward's transfers run beside its attention, the gradient buckets' all-reduces beside the
     * backward (sim/virtual_streams.h): those parts are not in the step */
    double sum = r.compute_time_s + r.comm_time_s + r.wait_time_s - r.comm_hidden_s - r.wait_hidden_s;
    ck_assert_msg(fabs(sum - r.step_time_s) <= 1e-9 * r.step_time_s,
                  "compute %.9g + comm %.9g + wait %.9g - hidden %.9g - %.9g != step %.9g", r.compute_time_s,
                  r.comm_time_s, r.wait_time_s, r.comm_hidden_s, r.wait_hidden_s, r.step_time_s);
    ck_assert(r.comm_hidden_s > 0 && r.comm_hidden_s <= r.comm_time_s); /* R = 2: one transfer hides per layer */
    ck_assert(r.compute_time_s > 0 && r.comm_time_s > 0 && r.wait_time_s >= 0);
    ck_assert_double_eq(r.exposed_comm_s, r.step_time_s - r.compute_time_s);
    ck_assert_double_eq_tol(r.tokens_per_s, 2.0 * 1024 / r.step_time_s, 1e-6 * r.tokens_per_s);
    ck_assert_double_eq_tol(r.mfu, r.step_flops / (r.step_time_s * 8 * 312e12), 1e-9);
    ck_assert(r.fits); /* 124M parameters at 1k tokens: a few GB */
    plan_result_free(&r);

    /* every rank: 12 heads over U = 8 leave half the ranks with one head, so they wait for the others */
    c = config_of("gpt2-124m", 8, 8, 1, 1024, 1);
    usp_train_step_stats stats[8];
    sim_world *w = run_step(&c, usp_backend_meta_create, stats);
    double most_wait = 0;
    for (int i = 0; i < 8; i++) {
        sim_rank_times t = sim_world_rank_times(w, i);
        /* the gradient buckets' all-reduces run beside the backward (core/model/grad_buckets.h) */
        double busy = t.compute_s + t.comm_s + t.wait_s - t.hidden_comm_s - t.hidden_wait_s;
        ck_assert_msg(fabs(busy - t.end_s) <= 1e-9 * t.end_s,
                      "rank %d: compute %.9g + comm %.9g + wait %.9g - hidden %.9g - %.9g != clock %.9g", i,
                      t.compute_s, t.comm_s, t.wait_s, t.hidden_comm_s, t.hidden_wait_s, t.end_s);
        ck_assert(t.compute_s > 0 && t.comm_s > 0 && t.wait_s >= 0);
        ck_assert_double_eq(t.end_s, stats[i].end_s); /* one step, nothing before or after it on meta */
        most_wait = t.wait_s > most_wait ? t.wait_s : most_wait;
    }
    ck_assert(most_wait > 0);
    sim_world_destroy(w);
}
END_TEST

/* The best split of the sweep of llama-7b with `kv_heads` KV heads at 64k tokens on
 * `preset` (8 GPUs), the best mixed split's step time (1 < U < 8), and pure Ulysses'. */
static void sweep_best(const char *preset, int kv_heads, int *best_u, double *best_s, double *hybrid_s,
                       double *ulysses_s)
{
    usp_train_config c = config_of("llama-7b", 8, 8, 1, 65536, 1);
    c.model.n_kv_head = kv_heads;
    sim_cost_model m = cluster(preset, 1);
    plan_sweep_entry *e;
    int n;
    ck_assert_int_eq(plan_sweep(&c, &m, &e, &n), USP_OK);
    ck_assert_int_eq(n, 4); /* U = 8, 4, 2, 1: 32 heads split every way */
    for (int i = 0; i < n; i++) {
        ck_assert_msg(e[i].ok, "U %d x R %d: %s", e[i].ulysses, e[i].ring, e[i].why);
        ck_assert_int_eq(e[i].ulysses * e[i].ring, 8);
        if (i > 0)
            ck_assert(e[i - 1].result.step_time_s <= e[i].result.step_time_s);
        if (e[i].ulysses == 8)
            *ulysses_s = e[i].result.step_time_s;
    }
    *hybrid_s = INFINITY;
    for (int i = n - 1; i >= 0; i--)
        if (e[i].ulysses > 1 && e[i].ulysses < 8)
            *hybrid_s = e[i].result.step_time_s;
    *best_u = e[0].ulysses, *best_s = e[0].result.step_time_s;
    plan_sweep_free(e, n);
}

START_TEST(sweep_prefers_a_hybrid_on_pcie_and_ulysses_on_nvswitch)
{
    int u;
    double best, hybrid, ulysses;
    /* PCIe, 8:1 GQA: an 8-way all-to-all crosses the shared switch uplinks and host bridges;
     * a Ulysses group inside a switch plus a ring of the (8x smaller) K/V moves less through
     * them, even with the ring's concurrent transfers sharing links (docs/planning.md) */
    sweep_best("pcie-gen4", 4, &u, &best, &hybrid, &ulysses);
    ck_assert_msg(hybrid < 0.95 * ulysses, "pcie-gen4: best mixed split %.4f s, pure Ulysses %.4f s", hybrid,
                  ulysses);
    ck_assert_msg(u != 8, "pcie-gen4: pure Ulysses is the fastest split");
    /* NVSwitch: every GPU has its own 370 GB/s to every other; Ulysses moves the fewest bytes. With
     * 8:1 GQA the ring's K/V blocks are 8x smaller and it hides them behind the attention, forward
     * and backward (sim/virtual_streams.h): the ring ties with Ulysses (within 1%). Since its backward
     * sends K/V a step ahead (ring.c, backward_overlapped) the ring wins by 0.9%, where with its forward
     * alone overlapped the two were within 0.1% */
    sweep_best("dgx-h100", 4, &u, &best, &hybrid, &ulysses);
    ck_assert_msg(ulysses <= 1.01 * best, "dgx-h100, 8:1 GQA: pure Ulysses %.4f s, the best (U %d) %.4f s", ulysses,
                  u, best);
    sweep_best("dgx-h100", 32, &u, &best, &hybrid, &ulysses);
    ck_assert_int_eq(u, 8);
}
END_TEST

START_TEST(sweep_skips_splits_the_heads_do_not_allow)
{
    usp_train_config c = config_of("tiny", 8, 8, 1, 256, 1); /* 4 heads, 2 KV heads: U = 8 leaves ranks headless */
    sim_cost_model m = cluster("dgx-h100", 1);
    plan_sweep_entry *e;
    int n;
    ck_assert_int_eq(plan_sweep(&c, &m, &e, &n), USP_OK);
    ck_assert_int_eq(n, 4);
    ck_assert(e[0].ok && !e[n - 1].ok);
    ck_assert_int_eq(e[n - 1].ulysses, 8);
    ck_assert_msg(strstr(e[n - 1].why, "--ulysses 8") != NULL, "%s", e[n - 1].why);
    plan_sweep_free(e, n);
}
END_TEST

/* The STEP records of a run (their peak arrays are not kept). */
typedef struct step_records {
    usp_train_record at[8];
    int n;
} step_records;

static void keep_step_record(void *ctx, const usp_train_record *record)
{
    step_records *r = ctx;
    if (record->kind == USP_TRAIN_RECORD_STEP && r->n < 8) {
        r->at[r->n] = *record;
        r->at[r->n++].peak_bytes = NULL;
    }
}

START_TEST(meta_training_reads_nothing_back)
{
    /* two steps and an evaluation on shapes only: no loss, no accuracy, no host copies of weights */
    usp_train_config c;
    usp_train_defaults(&c);
    c.model = small_model("llama");
    ck_assert_int_eq(usp_mesh_shape_make(4, 2, 2, &c.shape), USP_OK);
    c.data = "passkey", c.seq_len = 128, c.batch = 1, c.steps = 2, c.eval_samples = 2, c.log_every = 1;
    step_records records = {0};
    c.on_record = keep_step_record, c.record_ctx = &records;
    sim_config sc = sim_config_default(4);
    sc.make_backend = usp_backend_meta_create, sc.stack_bytes = (size_t)1 << 20;
    sim_world *w;
    ck_assert_int_eq(sim_world_create(&sc, &w), USP_OK);
    usp_train_result result = {.passkey_accuracy = -1};
    usp_train_run run = {.config = &c, .result = &result};
    ck_assert_int_eq(sim_world_run(w, usp_train_rank, &run), USP_OK);
    ck_assert(isnan(result.loss) && isnan(result.first_loss));
    ck_assert_double_eq(result.passkey_accuracy, -1);
    ck_assert_int_eq(result.steps_done, 2);
    ck_assert(result.clock_s > 0);
    sim_world_destroy(w);
    ck_assert_int_eq(records.n, 2);
    for (int i = 0; i < records.n; i++) {
        ck_assert(isnan(records.at[i].loss) && records.at[i].shapes_only && records.at[i].n_peaks == 1);
        ck_assert(records.at[i].clock_step_s > 0);
    }

    /* --save on shapes only is a configuration error, not a file of garbage */
    c.on_record = NULL, c.eval_samples = 0, c.save_dir = "/nonexistent/never-written";
    ck_assert_int_eq(sim_world_create(&sc, &w), USP_OK);
    run.config = &c;
    ck_assert_int_eq(sim_world_run(w, usp_train_rank, &run), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "--save") != NULL, "%s", usp_error_message());
    sim_world_destroy(w);
}
END_TEST

START_TEST(meta_plans_a_model_the_numeric_code_refuses)
{
    /* llama-1b (Llama 3 rope scaling) plans */
    usp_train_config c = config_of("llama-1b", 4, 4, 1, 4096, 1);
    sim_cost_model m = cluster("dgx-h100", 1);
    plan_result r;
    ck_assert_int_eq(plan_run(&c, &m, NULL, &r), USP_OK);
    ck_assert(r.fwd_flops > 0);
    plan_result_free(&r);
    /* a shape the code refuses is refused on meta too, with the code's message */
    c = config_of("gpt2-124m", 4, 4, 1, 2048, 1); /* 1024 learned positions */
    ck_assert_int_eq(plan_run(&c, &m, NULL, &r), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "--seq 2048") != NULL, "%s", usp_error_message());
}
END_TEST

START_TEST(meta_buffers_are_counted_never_touched)
{
    usp_backend_t *be;
    ck_assert_int_eq(usp_backend_meta_create(&be), USP_OK);
    ck_assert(!usp_backend_has_numerics(be));
    void *w, *a, *b, *c;
    ck_assert_int_eq(usp_buffer_alloc(be, (size_t)1 << 40, "weights", &w), USP_OK); /* a terabyte, for free */
    ck_assert_int_eq(usp_buffer_alloc(be, 100, "activations", &a), USP_OK);
    ck_assert_int_eq(usp_buffer_alloc(be, 0, "activations", &b), USP_OK);
    uintptr_t pw = (uintptr_t)w, pa = (uintptr_t)a, pb = (uintptr_t)b;
    ck_assert(pw % 64 == 0 && pa % 64 == 0 && pb % 64 == 0);
    ck_assert(pa >= pw + ((size_t)1 << 40) && pb >= pa + 100); /* no overlap */
    ck_assert(usp_backend_owns(be, a, 100) && !usp_backend_owns(be, a, 101));
    usp_buffer_free(be, a);
    ck_assert_int_eq(usp_buffer_alloc(be, 50, "comm", &c), USP_OK);
    ck_assert((uintptr_t)c != pa); /* never reused */
    /* the peak was weights + 100 activation bytes; comm came after it */
    const char *names[8];
    size_t bytes[8];
    int n = usp_backend_peak_breakdown(be, names, bytes, 8);
    ck_assert_int_eq(n, 3);
    ck_assert_str_eq(names[0], "weights");
    ck_assert_uint_eq(bytes[0], (size_t)1 << 40);
    ck_assert_str_eq(names[1], "activations");
    ck_assert_uint_eq(bytes[1], 100);
    ck_assert_str_eq(names[2], "comm");
    ck_assert_uint_eq(bytes[2], 0);
    ck_assert_uint_eq(usp_backend_peak_bytes(be), ((size_t)1 << 40) + 100);
    /* ops report their cost and compute nothing (the layer slots are NULL) */
    usp_gemm_desc g = {.m = 1000, .n = 1000, .k = 1000, .alpha = 1, .a = w, .lda = 1000, .b = w, .ldb = 1000,
                       .c = w, .ldc = 1000, .batch = 1};
    ck_assert_int_eq(usp_gemm(be, &g, NULL), USP_OK);
    ck_assert_int_eq(usp_scale(be, w, 2.0f, 1000, NULL), USP_OK);
    ck_assert_double_eq(usp_backend_flops(be), 2e9 + 1000);
    double sq = -1;
    ck_assert_int_eq(usp_sum_squares(be, &sq, w, 1000, NULL), USP_OK);
    ck_assert_double_eq(sq, 0);
    usp_backend_destroy(be);
}
END_TEST

static int run_plan_cli(char **argv, int argc, char *out, size_t size)
{
    return harness_run_command(cmd_plan, argv, argc, out, size);
}

START_TEST(plan_json_has_the_contract_fields)
{
    char out[1 << 14];
    char *argv[] = {"usp", "plan", "--model", "gpt2-124m", "--world", "4", "--seq", "512", "--topology", "dgx-a100",
                    "--sweep", "--json"};
    ck_assert_int_eq(run_plan_cli(argv, 12, out, sizeof out), 0);
    json_error_t err;
    json_t *j = json_loads(out, 0, &err);
    ck_assert_msg(j != NULL, "not one JSON object: %s (%s)", out, err.text);
    const char *numbers[] = {"fwd_flops", "step_flops", "step_time_s", "compute_time_s", "comm_time_s",
                             "exposed_comm_s", "tokens_per_s", "mfu"};
    for (size_t i = 0; i < sizeof numbers / sizeof *numbers; i++)
        ck_assert_msg(json_number_value(json_object_get(j, numbers[i])) > 0, "%s", numbers[i]);
    ck_assert(json_is_true(json_object_get(j, "summary")));
    ck_assert(json_is_true(json_object_get(j, "fits")));
    const json_t *hidden = json_object_get(j, "comm_hidden_s"), *exposed = json_object_get(j, "comm_exposed_s");
    ck_assert(json_is_number(hidden) && json_is_number(exposed));
    ck_assert_double_eq_tol(json_number_value(hidden) + json_number_value(exposed),
                            json_number_value(json_object_get(j, "comm_time_s")), 1e-9);
    ck_assert_int_eq(json_array_size(json_object_get(j, "peak_bytes")), 4);
    ck_assert_int_eq(json_array_size(json_object_get(j, "sweep")), 3); /* U = 4, 2, 1 */
    json_decref(j);

    char *bad[] = {"usp", "plan", "--world", "6", "--ulysses", "4"};
    ck_assert_int_eq(run_plan_cli(bad, 6, out, sizeof out), USP_ERR_CONFIG);
    char *bad_topology[] = {"usp", "plan", "--topology", "dgx-h1000"};
    ck_assert_int_eq(run_plan_cli(bad_topology, 4, out, sizeof out), USP_ERR_CONFIG);
}
END_TEST

/* A shape the ranks would refuse is refused before 4096 ranks are built (it once took 2.7 s and 466 MB to
 * say so, with a "rank 0:" in front), and a run past the simulator's cap before anything. */
START_TEST(a_refused_shape_builds_no_world)
{
    sim_cost_model m = cluster("dgx-h100", 512);
    plan_result r;
    usp_train_config headless = config_of("tiny", 4096, 4096, 1, 4096, 1); /* 4 heads over 4096 ranks */
    ck_assert_int_eq(plan_run(&headless, &m, NULL, &r), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "--ulysses 4096 is larger than the 4 heads") == usp_error_message(),
                  "%s", usp_error_message());
    usp_train_config undivided = config_of("tiny", 4096, 64, 64, 64, 1); /* 64 tokens over 4096 ranks */
    ck_assert_int_eq(plan_run(&undivided, &m, NULL, &r), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "--seq 64 does not divide") == usp_error_message(), "%s",
                  usp_error_message());
    usp_train_config huge = config_of("tiny", 4096, 1, 4096, 8192, 1);
    ck_assert_int_eq(plan_run(&huge, &m, NULL, &r), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "--world 4096 x --ring 4096 x 2 layers (--model tiny) = 33554432 ring steps"), "%s",
                  usp_error_message());
    /* the same check counts a run's sequences per replica and its passes (usp train --meta) */
    usp_train_config at_cap = config_of("tiny", 512, 1, 512, 1024, 1); /* 2 layers */
    ck_assert_int_eq(plan_check_ring_steps(&at_cap, 2, "steps"), USP_OK); /* 512 x 512 x 2 layers x 2 */
    ck_assert_int_eq(plan_check_ring_steps(&at_cap, 3, "steps"), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "--world 512 x --ring 512 x 2 layers (--model tiny) x 3 steps = "
                         "1572864 ring steps"), "%s", usp_error_message());
    at_cap.batch = 4;
    ck_assert_int_eq(plan_check_ring_steps(&at_cap, 1, NULL), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "x 4 sequences per replica (--batch 4 over 1 replicas)"), "%s",
                  usp_error_message());
}
END_TEST

/* A NaN or infinite figure is an error naming it, never a plan printed with it (--json printed nothing). */
START_TEST(a_non_finite_figure_is_an_error_naming_it)
{
    plan_result r = {.shape = {.world = 4, .dp = 1, .ulysses = 4, .ring = 1}, .step_time_s = 1, .tokens = 64};
    ck_assert_int_eq(plan_result_check(&r), USP_OK);
    r.mfu = NAN;
    ck_assert_int_eq(plan_result_check(&r), USP_ERR_RUNTIME);
    ck_assert_msg(strstr(usp_error_message(), "mfu = nan"), "%s", usp_error_message());
    r.mfu = 0, r.tokens_per_s = INFINITY;
    ck_assert_int_eq(plan_result_check(&r), USP_ERR_RUNTIME);
    ck_assert_msg(strstr(usp_error_message(), "tokens_per_s = inf"), "%s", usp_error_message());
}
END_TEST

int main(void)
{
    Suite *s = suite_create("plan");
    TCase *t = tcase_create("plan");
    tcase_set_timeout(t, 600);
    tcase_add_test(t, meta_buffers_are_counted_never_touched);
    tcase_add_test(t, meta_memory_and_costs_equal_the_numeric_run);
    tcase_add_test(t, meta_training_reads_nothing_back);
    tcase_add_test(t, meta_plans_a_model_the_numeric_code_refuses);
    tcase_add_test(t, step_time_is_compute_plus_communication_plus_waiting_less_what_is_hidden);
    tcase_add_test(t, sweep_prefers_a_hybrid_on_pcie_and_ulysses_on_nvswitch);
    tcase_add_test(t, sweep_skips_splits_the_heads_do_not_allow);
    tcase_add_test(t, plan_json_has_the_contract_fields);
    tcase_add_test(t, a_refused_shape_builds_no_world);
    tcase_add_test(t, a_non_finite_figure_is_an_error_naming_it);
    tcase_add_test(t, a_step_that_does_not_fit_gets_the_options_that_make_it_fit);
    tcase_add_test(t, the_fit_search_tries_other_splits_of_the_same_gpus_before_more_gpus);
    tcase_add_test(t, llama_7b_at_a_million_tokens_matches_the_closed_form);
    tcase_add_test(t, a_model_with_its_own_head_width_matches_the_closed_form);
    suite_add_tcase(s, t);
    return check_main_run(s);
}
