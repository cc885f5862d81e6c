/* Memory of a training step with sequence parallelism, in three tables.
 *
 * 1. Scaling (issue #4, acceptance item 6): at a fixed sequence length N, the
 * activation memory of each rank should fall about as 1/W when W ranks share
 * the sequence. For the tiny model at N = 16384, W = 1, 2, 4 (Ulysses U = W)
 * and W = 8: the tiny preset has 4 query heads, and Ulysses gives every rank
 * whole heads, so U = 8 is refused; W = 8 runs the hybrid U x R = 4 x 2
 * (Ulysses inside groups of 4, Ring across the 2 groups: tokens still split 8
 * ways).
 *
 * Each rank's backend counts every allocation by category and keeps what each
 * category held at the rank's peak (usp_backend_peak_breakdown). Per world size:
 * - peak: the most backend memory a rank held during one training step;
 * - the "activations" category at that peak: the saved forward activations
 *   (core/model/model.c) and the head-sharded Ulysses buffers (core/parallel/ulysses.c);
 * - the per-token memory at the peak = peak - parameter state, the parameter
 *   state being 16 P bytes (weights, their gradients, AdamW's m and v; the same
 *   on every rank, weights being replicated on SP ranks). It adds to the
 *   activations what else scales with the rank's tokens: activation gradients,
 *   all-to-all and ring buffers, attention workspace.
 * Each with its ratio to W = 1; 1/W is the ideal. Figures are the largest over
 * the ranks (they differ by a few bytes at most; the JSON has the smallest peak).
 *
 * 2. The memory options of usp_train_config (core/train/train.h, docs/planning.md
 * "Memory options") at W = 4 (U 4), N = 16384, batch 1: none, each alone, then
 * all together (ZeRO 3 + recompute + tiled MLP + tiled loss), tile rows 1024.
 * What each should save on a rank of the tiny model (C 64, F 172, V 256, L 2,
 * P = 107328; n = 4096 tokens on the rank, tile t = 1024):
 * - --tiled-mlp: the SwiGLU hidden, [n, 2F] + [n, F] fp32 = 8.1 MiB a layer,
 *   less the one [t, 3F] tile alive (2 MiB): 14 MiB of activations, and some
 *   of the backward's scratch;
 * - --recompute: the activations of L - 1 = 1 of the 2 layers;
 * - --tiled-loss: the logits, 4 (n - t) V bytes = 3 MiB;
 * - --zero 1: (W - 1) / W of the optimizer (8 P) = 0.61 MiB; --zero 2 and 3
 *   add at most as much of the gradients and of the weights (4 P, 0.31 MiB
 *   each), less the buckets held whole while in use. The tiny model's whole
 *   parameter state is 1.64 MiB, so ZeRO barely moves the peak here: at this
 *   size the activations are the memory (llama-7b at 1M tokens in planning.md
 *   is where ZeRO counts).
 * bf16 storage (USP_BF16) is left out: the cpu backend computes in fp32 and
 * refuses it (planned on shapes only: usp plan --dtype bf16, or --meta).
 *
 * 3. Activations per layer (issue 14): the bytes one layer adds to the
 * "activations" category of a rank, measured as the difference between the
 * same step with L and L - 1 layers (so the figure is exactly what a layer
 * keeps, whatever the head or the embeddings hold): llama-7b at 128K tokens on
 * 8 ranks (Ulysses 8, and pure Ring 8) as `usp plan --model llama-7b --seq
 * 131072 --world 8` runs it (meta backend: shapes only, the same allocations),
 * and the tiny model measured on the cpu backend at N = 16384 on 4 ranks
 * (Ulysses 4, pure Ring 4). "before" is what the code kept before issue 14,
 * now + the bytes it no longer keeps: at U > 1 the model's q, k, v, dead once
 * Ulysses has gathered its own copies, 4 n (H + 2 Hkv) D; at U = 1 Ulysses'
 * one-rank copies of q, k, v, o, 4 n (2 H + 2 Hkv) D (n = tokens a rank, fp32).
 *
 * The price is time: recomputation runs each layer's forward again in backward
 * (up to 1/3 more of the layers' FLOPs, backward being about twice the
 * forward; the head, the loss and AdamW are not recomputed), the tiled MLP its
 * hidden, ZeRO adds collectives. The wall time is taken with
 * clock_gettime(CLOCK_MONOTONIC) around sim_world_run in this process, so it
 * holds the rank setup (model, weights, first touch of buffers) besides the one
 * step, alike for every row. The machine is shared and noisy: each row runs
 * twice and reports the faster run; wall/none is its ratio to the plain step. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/meta/meta_backend.h"
#include "core/base/clock_seconds.h"
#include "core/train/train.h"
#include "sim/world.h"

#define MIB (1024.0 * 1024.0)
#define MAX_CATEGORIES 16

typedef struct mem_config {
    int world, ulysses, ring;
} mem_config;

static const mem_config configs[] = {{1, 1, 1}, {2, 2, 1}, {4, 4, 1}, {8, 4, 2}};
#define N_CONFIGS (sizeof configs / sizeof *configs)

/* The memory options of a row of the second table (usp_train_config's fields). */
typedef struct mem_options {
    const char *name; /* as usp train spells them */
    int zero, recompute, tiled_mlp, tiled_loss;
} mem_options;

static const mem_options option_rows[] = {
    {"none", 0, 0, 0, 0},     {"--recompute", 0, 1, 0, 0}, {"--tiled-mlp", 0, 0, 1, 0}, {"--tiled-loss", 0, 0, 0, 1},
    {"--zero 1", 1, 0, 0, 0}, {"--zero 2", 2, 0, 0, 0},    {"--zero 3", 3, 0, 0, 0},    {"all", 3, 1, 1, 1}};
#define N_OPTION_ROWS (sizeof option_rows / sizeof *option_rows)
static const mem_config options_world = {4, 4, 1};
#define OPTION_RUNS 2 /* runs of each option row: the faster is reported */

/* The categories reported, as core/ and the backends name them. */
static const char *const categories[] = {"activations", "gradients", "comm", "attention workspace", "weights",
                                         "optimizer"};
#define N_REPORTED (sizeof categories / sizeof *categories)
enum { CAT_ACT, CAT_GRAD, CAT_COMM, CAT_WS, CAT_WEIGHTS, CAT_OPT };

typedef struct mem_result {
    double peak, peak_min;       /* bytes, largest and smallest over the ranks */
    double at_peak[N_REPORTED];  /* bytes of each reported category at the peak (largest rank) */
    double other_at_peak;        /* categories not in the list, summed (largest rank) */
    double wall_s;               /* seconds of sim_world_run: rank setup and the step */
} mem_result;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: memory [--json] [--quick] [--per-layer] [--help]\n"
            "\n"
            "Peak memory per rank of one training step (sim runtime, cpu backend, passkey data), tiny model,\n"
            "N = 16384, batch 1, in three tables.\n"
            "\n"
            "1. On W = 1, 2, 4 ranks (Ulysses U = W) and W = 8 (hybrid U x R = 4 x 2: the tiny model\n"
            "has 4 heads, U = 8 would leave ranks without one), with the ratio of each figure to\n"
            "W = 1 (ideal: 1/W).\n"
            "\n"
            "  peak       the most backend memory a rank held during the step\n"
            "  act cat    the \"activations\" category at that peak (saved activations, Ulysses buffers)\n"
            "  param      16 P bytes: weights, gradients, AdamW m and v (the same on every rank)\n"
            "  per-token  peak - param: what scales with the rank's tokens (activations, activation\n"
            "             gradients, all-to-all/ring buffers, attention workspace)\n"
            "\n"
            "2. At W = 4 (U 4), with the memory options of usp train: none, --recompute,\n"
            "--tiled-mlp, --tiled-loss (--tile-rows 1024), --zero 1, 2, 3, and all of them: the\n"
            "peak and its ratio to none; activations, gradients, optimizer and weights at the peak;\n"
            "the wall time of sim_world_run (rank setup and the step), the faster of 2 runs, and\n"
            "its ratio to none (the price of recomputation). bf16 storage is left out: the cpu\n"
            "backend refuses it (usp plan --dtype bf16 plans it).\n"
            "\n"
            "3. Activations per layer: the bytes a layer adds to the \"activations\" category (the step\n"
            "with L layers less the step with L - 1), for llama-7b at N = 131072 on 8 ranks (U 8, and\n"
            "pure Ring R 8; the meta backend, as usp plan --model llama-7b --seq 131072 --world 8) and\n"
            "the tiny model measured (cpu) at N = 16384 on 4 ranks (U 4, and R 4); beside what the\n"
            "code kept before issue 14 (now + the q, k, v or Ulysses copies it no longer keeps).\n"
            "\n"
            "  --json   one JSON object per world size, then one for the options table, then one per\n"
            "           row of the activations-per-layer table\n"
            "  --quick  N = 2048, tile rows 128 (a smoke run; llama-7b stays at 131072)\n"
            "  --per-layer  the third table only\n"
            "  --help   this text\n"
            "\n"
            "JSON fields, per world size: bench (\"memory\"), model, seq, batch, world, ulysses,\n"
            "  ring, tokens_per_rank, peak_bytes, peak_bytes_min (over the ranks),\n"
            "  param_state_bytes, per_token_peak_bytes (peak_bytes - param_state_bytes),\n"
            "  at_peak (object: bytes of each category at the peak: activations, gradients, comm,\n"
            "  \"attention workspace\", weights, optimizer, other), peak_ratio,\n"
            "  activations_ratio, per_token_ratio (each / the same figure at W = 1),\n"
            "  ideal_ratio (1/W).\n"
            "The options table: bench, model, seq, batch, world, ulysses, ring, tokens_per_rank,\n"
            "  tile_rows, runs, options (array of objects: name, zero, recompute, tiled_mlp,\n"
            "  tiled_loss, peak_bytes, peak_bytes_min, at_peak (as above), peak_ratio, wall_s\n"
            "  (the fastest run), wall_ratio (each / the same figure for none)).\n"
            "Activations per layer: bench (\"memory_per_layer\"), model, backend, seq, world, ulysses,\n"
            "  ring, tokens_per_rank, n_layer, activations_per_layer_bytes, before_bytes (the closed\n"
            "  form of what issue 14 removed, added), dead_bytes (that difference).\n");
}

/* The trainer's progress, ignored: asking for it makes the step gather the
 * peaks as `usp train` does, so the memory measured is that run's. */
static void ignore_record(void *ctx, const usp_train_record *record) { (void)ctx, (void)record; }

/* The peak and its breakdown of every rank of the finished world w. */
static void read_peaks(const sim_world *w, int world, mem_result *r)
{
    r->peak = 0, r->peak_min = 1e300;
    for (int i = 0; i < world; i++) {
        double p = (double)sim_world_peak_bytes(w, i);
        r->peak = p > r->peak ? p : r->peak;
        r->peak_min = p < r->peak_min ? p : r->peak_min;
        const char *names[MAX_CATEGORIES];
        size_t bytes[MAX_CATEGORIES];
        int n = usp_backend_peak_breakdown(sim_world_backend(w, i), names, bytes, MAX_CATEGORIES);
        double other = 0;
        for (int c = 0; c < n && c < MAX_CATEGORIES; c++) {
            size_t k = 0;
            while (k < N_REPORTED && strcmp(names[c], categories[k]) != 0)
                k++;
            if (k == N_REPORTED)
                other += (double)bytes[c];
            else if ((double)bytes[c] > r->at_peak[k])
                r->at_peak[k] = (double)bytes[c];
        }
        r->other_at_peak = other > r->other_at_peak ? other : r->other_at_peak;
    }
}

/* One training step of `model` (n_layer: 0 for the preset's) on `mc` with the options o, on the
 * backend of `factory` (NULL: cpu); fills r. */
static usp_status measure_model(const char *model, int64_t n_layer, sim_backend_factory factory,
                                const mem_config *mc, const mem_options *o, int64_t seq, int64_t tile_rows,
                                mem_result *r)
{
    usp_train_config c;
    usp_train_defaults(&c);
    USP_CHECK(usp_model_config_preset(model, &c.model));
    if (n_layer > 0)
        c.model.n_layer = n_layer;
    USP_CHECK(usp_mesh_shape_make(mc->world, mc->ulysses, mc->ring, &c.shape));
    c.data = "passkey", c.seq_len = seq, c.batch = 1, c.steps = 1, c.log_every = 1, c.eval_samples = 0;
    c.zero_stage = o->zero, c.recompute_layers = o->recompute;
    c.tiled_mlp = o->tiled_mlp, c.tiled_loss = o->tiled_loss, c.tile_rows = tile_rows;
    c.on_record = ignore_record;
    sim_config sc = sim_config_default(mc->world);
    sc.trace = 0, sc.make_backend = factory;
    sim_world *w = NULL;
    usp_train_result result = {.passkey_accuracy = -1};
    usp_train_run run = {.config = &c, .result = &result};
    usp_status s = sim_world_create(&sc, &w);
    if (s == USP_OK) {
        const double t0 = usp_wall_seconds();
        s = sim_world_run(w, usp_train_rank, &run);
        r->wall_s = usp_wall_seconds() - t0;
    }
    if (s == USP_OK) {
        read_peaks(w, mc->world, r);
    } else {
        char why[USP_ERROR_MESSAGE_MAX]; /* usp_error writes the slot the message is in */
        snprintf(why, sizeof why, "%s", w && *sim_world_report(w) ? sim_world_report(w) : usp_error_message());
        s = usp_error(s, "one training step at W = %d (U %d x R %d), options %s: %s", mc->world, mc->ulysses,
                      mc->ring, o->name, why);
    }
    sim_world_destroy(w);
    return s;
}

/* One training step of the tiny model on the cpu backend. */
static usp_status measure(const mem_config *mc, const mem_options *o, int64_t seq, int64_t tile_rows, mem_result *r)
{
    return measure_model("tiny", 0, NULL, mc, o, seq, tile_rows, r);
}

/* The bytes of each category at the peak, as a JSON object. */
static json_t *json_at_peak(const mem_result *r)
{
    json_t *at = json_object();
    for (size_t k = 0; k < N_REPORTED; k++)
        json_object_set_new(at, categories[k], json_integer((json_int_t)r->at_peak[k]));
    json_object_set_new(at, "other", json_integer((json_int_t)r->other_at_peak));
    return at;
}

/* The common fields of a JSON record of the run of mc. */
static json_t *json_record(const mem_config *mc, int64_t seq)
{
    return json_pack("{s:s, s:s, s:I, s:i, s:i, s:i, s:i, s:I}", "bench", "memory", "model", "tiny", "seq",
                     (json_int_t)seq, "batch", 1, "world", mc->world, "ulysses", mc->ulysses, "ring", mc->ring,
                     "tokens_per_rank", (json_int_t)(seq / mc->world)); /* batch 1; W divides N here */
}

static void json_print(json_t *j)
{
    char *text = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6));
    if (text)
        puts(text);
    free(text);
    json_decref(j);
}

static void print_row(const mem_config *mc, int64_t seq, const mem_result *r, const mem_result *base,
                      double param_state, int json)
{
    const double tok = r->peak - param_state, tok0 = base->peak - param_state;
    if (json) {
        json_t *j = json_record(mc, seq);
        json_object_set_new(j, "peak_bytes", json_integer((json_int_t)r->peak));
        json_object_set_new(j, "peak_bytes_min", json_integer((json_int_t)r->peak_min));
        json_object_set_new(j, "param_state_bytes", json_integer((json_int_t)param_state));
        json_object_set_new(j, "per_token_peak_bytes", json_integer((json_int_t)tok));
        json_object_set_new(j, "at_peak", json_at_peak(r));
        json_object_set_new(j, "peak_ratio", json_real(r->peak / base->peak));
        json_object_set_new(j, "activations_ratio", json_real(r->at_peak[CAT_ACT] / base->at_peak[CAT_ACT]));
        json_object_set_new(j, "per_token_ratio", json_real(tok / tok0));
        json_object_set_new(j, "ideal_ratio", json_real(1.0 / mc->world));
        json_print(j);
    } else {
        char split[16];
        snprintf(split, sizeof split, "%dx%d", mc->ulysses, mc->ring);
        printf("%3d %6s %8lld %9.2f %8.2f %7.2f %6.2f %6.2f %6.2f %9.2f %8.3f %8.3f %8.3f %7.3f\n", mc->world, split,
               (long long)(seq / mc->world), r->peak / MIB, r->at_peak[CAT_ACT] / MIB, r->at_peak[CAT_GRAD] / MIB,
               r->at_peak[CAT_COMM] / MIB, r->at_peak[CAT_WS] / MIB, param_state / MIB, tok / MIB,
               r->peak / base->peak, r->at_peak[CAT_ACT] / base->at_peak[CAT_ACT], tok / tok0, 1.0 / mc->world);
    }
    fflush(stdout);
}

/* Table 1: W = 1, 2, 4, 8 without memory options. */
static usp_status run_world_table(int64_t seq, int json)
{
    usp_model_config tiny;
    USP_CHECK(usp_model_config_preset("tiny", &tiny));
    const double param_state = 16.0 * (double)usp_model_config_param_count(&tiny);
    if (!json) {
        printf("memory per rank of one training step: tiny model (%lld parameters), N = %lld, batch 1, sim runtime\n",
               (long long)usp_model_config_param_count(&tiny), (long long)seq);
        printf("MiB at the rank's peak, by category: act (activations), grad (gradients: parameter and activation "
               "gradients),\ncomm (all-to-all/ring buffers), ws (attention workspace); param = 16 P bytes (weights, "
               "grads, AdamW m, v);\nper-token = peak - param. W = 8 runs U x R = 4 x 2: the tiny model's 4 heads "
               "cannot be split 8 ways.\n\n");
        printf("%3s %6s %8s %9s %8s %7s %6s %6s %6s %9s %8s %8s %8s %7s\n", "W", "UxR", "tok/rank", "peak", "act",
               "grad", "comm", "ws", "param", "per-token", "peak/W1", "act/W1", "tok/W1", "1/W");
    }
    mem_result base = {0};
    for (size_t i = 0; i < N_CONFIGS; i++) {
        mem_result r = {0};
        USP_CHECK(measure(&configs[i], &option_rows[0], seq, 0, &r));
        if (i == 0)
            base = r;
        print_row(&configs[i], seq, &r, &base, param_state, json);
    }
    return USP_OK;
}

/* The fastest of `runs` runs of the row o (its memory is the same every run). */
static usp_status measure_fastest(const mem_options *o, int64_t seq, int64_t tile_rows, int runs, mem_result *best)
{
    for (int k = 0; k < runs; k++) {
        mem_result r = {0};
        USP_CHECK(measure(&options_world, o, seq, tile_rows, &r));
        if (k == 0 || r.wall_s < best->wall_s)
            *best = r;
    }
    return USP_OK;
}

static json_t *json_option_row(const mem_options *o, const mem_result *r, const mem_result *base)
{
    json_t *j = json_pack("{s:s, s:i, s:b, s:b, s:b}", "name", o->name, "zero", o->zero, "recompute", o->recompute,
                          "tiled_mlp", o->tiled_mlp, "tiled_loss", o->tiled_loss);
    json_object_set_new(j, "peak_bytes", json_integer((json_int_t)r->peak));
    json_object_set_new(j, "peak_bytes_min", json_integer((json_int_t)r->peak_min));
    json_object_set_new(j, "at_peak", json_at_peak(r));
    json_object_set_new(j, "peak_ratio", json_real(r->peak / base->peak));
    json_object_set_new(j, "wall_s", json_real(r->wall_s));
    json_object_set_new(j, "wall_ratio", json_real(r->wall_s / base->wall_s));
    return j;
}

/* Table 2: the memory options at W = 4 (U 4). */
static usp_status run_options_table(int64_t seq, int64_t tile_rows, int json)
{
    const mem_config *mc = &options_world;
    if (!json) {
        printf("\nmemory options at W = %d (U %d), N = %lld, batch 1, tile rows %lld (tiled MLP and loss); \"all\" = "
               "--zero 3 --recompute\n--tiled-mlp --tiled-loss. MiB: the peak (largest rank) and act, grad, opt "
               "(optimizer), wts (weights) at it.\nwall: seconds of sim_world_run (rank setup and the step), the "
               "faster of %d runs (a shared, noisy machine).\nbf16 storage is left out: the cpu backend refuses it "
               "(usp plan --dtype bf16 plans it).\n\n",
               mc->world, mc->ulysses, (long long)seq, (long long)tile_rows, OPTION_RUNS);
        printf("%-13s %8s %9s %8s %7s %6s %6s %8s %9s\n", "options", "peak", "peak/none", "act", "grad", "opt", "wts",
               "wall s", "wall/none");
    }
    json_t *rows = json_array();
    mem_result base = {0};
    for (size_t i = 0; i < N_OPTION_ROWS; i++) {
        const mem_options *o = &option_rows[i];
        mem_result r = {0};
        usp_status s = measure_fastest(o, seq, tile_rows, OPTION_RUNS, &r);
        if (s != USP_OK)
            return json_decref(rows), s;
        if (i == 0)
            base = r;
        if (json) {
            json_array_append_new(rows, json_option_row(o, &r, &base));
            continue;
        }
        printf("%-13s %8.2f %9.3f %8.2f %7.2f %6.2f %6.2f %8.3f %9.3f\n", o->name, r.peak / MIB, r.peak / base.peak,
               r.at_peak[CAT_ACT] / MIB, r.at_peak[CAT_GRAD] / MIB, r.at_peak[CAT_OPT] / MIB,
               r.at_peak[CAT_WEIGHTS] / MIB, r.wall_s, r.wall_s / base.wall_s);
        fflush(stdout);
    }
    if (json) {
        json_t *j = json_record(mc, seq);
        json_object_set_new(j, "tile_rows", json_integer((json_int_t)tile_rows));
        json_object_set_new(j, "runs", json_integer(OPTION_RUNS));
        json_object_set_new(j, "options", rows);
        json_print(j);
        fflush(stdout);
    } else {
        json_decref(rows);
    }
    return USP_OK;
}

/* Table 3: activations per layer, now and before issue 14. */
typedef struct layer_row {
    const char *model;
    int meta; /* 1: the meta backend (usp plan's), 0: cpu, measured */
    int64_t seq;
    mem_config mc;
} layer_row;

static usp_status run_layer_table(int quick, int json)
{
    const int64_t tiny_seq = quick ? 2048 : 16384;
    const layer_row rows[] = {{"llama-7b", 1, 131072, {8, 8, 1}}, {"llama-7b", 1, 131072, {8, 1, 8}},
                              {"tiny", 0, tiny_seq, {4, 4, 1}},    {"tiny", 0, tiny_seq, {4, 1, 4}}};
    if (!json)
        printf("\nactivations per layer and rank (the step with L layers less the step with L - 1), batch 1, fp32;\n"
               "llama-7b planned on the meta backend (usp plan --model llama-7b --seq 131072 --world 8), tiny "
               "measured (cpu).\nbefore = what issue 14 removed, added back: at U > 1 the model's dead q, k, v, "
               "4 n (H + 2 Hkv) D;\nat U = 1 Ulysses' one-rank copies of q, k, v, o, 4 n (2 H + 2 Hkv) D "
               "(n tokens a rank).\n\n%-9s %-7s %7s %5s %8s %12s %12s %12s %7s\n",
               "model", "backend", "N", "UxR", "tok/rank", "now MiB", "before MiB", "saved MiB", "now/bef");
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        const layer_row *row = &rows[i];
        usp_model_config mc;
        USP_CHECK(usp_model_config_preset(row->model, &mc));
        mem_result full = {0}, less = {0};
        const mem_options none = option_rows[0];
        sim_backend_factory f = row->meta ? usp_backend_meta_create : NULL;
        USP_CHECK(measure_model(row->model, mc.n_layer, f, &row->mc, &none, row->seq, 0, &full));
        USP_CHECK(measure_model(row->model, mc.n_layer - 1, f, &row->mc, &none, row->seq, 0, &less));
        const double now = full.at_peak[CAT_ACT] - less.at_peak[CAT_ACT];
        const double n = (double)(row->seq / row->mc.world), H = (double)mc.n_head, Hkv = (double)mc.n_kv_head;
        const double D = (double)(mc.d_model / mc.n_head);
        const double dead = row->mc.ulysses > 1 ? 4 * n * (H + 2 * Hkv) * D : 4 * n * (2 * H + 2 * Hkv) * D;
        if (json) {
            json_t *j = json_pack("{s:s, s:s, s:s, s:I, s:i, s:i, s:i, s:I, s:I}", "bench", "memory_per_layer",
                                  "model", row->model, "backend", row->meta ? "meta" : "cpu", "seq",
                                  (json_int_t)row->seq, "world", row->mc.world, "ulysses", row->mc.ulysses, "ring",
                                  row->mc.ring, "tokens_per_rank", (json_int_t)n, "n_layer", (json_int_t)mc.n_layer);
            json_object_set_new(j, "activations_per_layer_bytes", json_integer((json_int_t)now));
            json_object_set_new(j, "before_bytes", json_integer((json_int_t)(now + dead)));
            json_object_set_new(j, "dead_bytes", json_integer((json_int_t)dead));
            json_print(j);
        } else {
            char split[16];
            snprintf(split, sizeof split, "%dx%d", row->mc.ulysses, row->mc.ring);
            printf("%-9s %-7s %7lld %5s %8.0f %12.2f %12.2f %12.2f %7.3f\n", row->model, row->meta ? "meta" : "cpu",
                   (long long)row->seq, split, n, now / MIB, (now + dead) / MIB, dead / MIB, now / (now + dead));
        }
        fflush(stdout);
    }
    return USP_OK;
}

int main(int argc, char **argv)
{
    int json = 0, quick = 0, per_layer = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--per-layer")) per_layer = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return usage(stdout), 0;
        else return fprintf(stderr, "memory: unknown option '%s'; the options are --json, --quick, --per-layer (see memory "
                            "--help)\n", argv[i]), 2;
    }
    /* --quick keeps 4 tiles a rank: 2048 / 4 ranks = 512 rows in tiles of 128, as 4096 in tiles of 1024 */
    const int64_t seq = quick ? 2048 : 16384, tile_rows = quick ? 128 : 1024;
    usp_status s = per_layer ? USP_OK : run_world_table(seq, json);
    if (s == USP_OK && !per_layer)
        s = run_options_table(seq, tile_rows, json);
    if (s == USP_OK)
        s = run_layer_table(quick, json);
    if (s != USP_OK)
        return fprintf(stderr, "memory: %s\n", usp_error_message()), (int)s;
    return 0;
}
