/* Memory scaling of a training step with sequence parallelism (issue #4,
 * acceptance item 6): at a fixed sequence length N, the activation memory of
 * each rank should fall about as 1/W when W ranks share the sequence.
 *
 * For the tiny model at N = 16384, W = 1, 2, 4 (Ulysses U = W) and W = 8: the
 * tiny preset has 4 query heads, and Ulysses gives every rank whole heads, so
 * U = 8 is refused; W = 8 runs the hybrid U x R = 4 x 2 (Ulysses inside groups
 * of 4, Ring across the 2 groups: tokens still split 8 ways).
 *
 * Per rank, three figures:
 * - peak: the most backend memory the rank ever held during one training step
 *   (the simulator counts every allocation per rank).
 * - activation memory at the peak = peak - parameter state, where the
 *   parameter state is 16 P bytes: weights, their gradients and AdamW's m and v
 *   (4 bytes each), the same on every rank because weights are replicated on
 *   SP ranks. What is left scales with the tokens a rank holds: saved
 *   activations, activation gradients, all-to-all and ring buffers, attention
 *   workspace.
 * - the "activations" category: the saved forward activations (core/model.c)
 *   and the head-sharded Ulysses buffers (core/ulysses.c). Both allocate it
 *   once, when the model is made, so its size then is its size at the peak:
 *   it is measured by making the model on every rank of the same mesh, without
 *   running a step (the backend keeps no per-category figure at the peak).
 * Each is printed with its ratio to W = 1; 1/W is the ideal. The first two are
 * the largest over the ranks (ranks differ by a few bytes at most). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/model.h"
#include "core/train.h"
#include "sim/world.h"

#define MIB (1024.0 * 1024.0)
#define MAX_WORLD 8

typedef struct mem_config {
    int world, ulysses, ring;
} mem_config;

static const mem_config configs[] = {{1, 1, 1}, {2, 2, 1}, {4, 4, 1}, {8, 4, 2}};
#define N_CONFIGS (sizeof configs / sizeof *configs)

typedef struct mem_result {
    double peak, peak_min;       /* bytes, largest and smallest over the ranks */
    double categories[3];        /* "activations", "gradients", "comm" after the model is made (largest rank) */
    int64_t tokens_per_rank;
} mem_result;

static const char *const category_names[3] = {"activations", "gradients", "comm"};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: memory [--json] [--quick] [--help]\n"
            "\n"
            "Peak memory per rank of one training step (sim backend, cpu, passkey data) for the\n"
            "tiny model at N = 16384, batch 1, on W = 1, 2, 4 ranks (Ulysses U = W) and W = 8\n"
            "(hybrid U x R = 4 x 2: the tiny model has 4 heads, U = 8 would leave ranks without\n"
            "one), with the ratio of each figure to W = 1 (ideal: 1/W).\n"
            "\n"
            "  peak       the most backend memory a rank held during the step\n"
            "  param      16 P bytes: weights, gradients, AdamW m and v (the same on every rank)\n"
            "  act@peak   peak - param: what scales with the rank's tokens (saved activations,\n"
            "             activation gradients, all-to-all/ring buffers, attention workspace)\n"
            "  act cat    the \"activations\" category (saved activations and Ulysses buffers),\n"
            "             allocated once when the model is made, so the same at the peak\n"
            "\n"
            "  --json   one JSON object per world size instead of the table\n"
            "  --quick  N = 2048 (a smoke run)\n"
            "  --help   this text\n"
            "\n"
            "JSON fields, per world size: bench (\"memory\"), model, seq, batch, world, ulysses,\n"
            "  ring, tokens_per_rank, peak_bytes, peak_bytes_min (over the ranks),\n"
            "  param_state_bytes, activation_peak_bytes (peak_bytes - param_state_bytes),\n"
            "  activations_category_bytes, gradients_category_bytes, comm_category_bytes\n"
            "  (after the model is made, largest rank), peak_ratio, activation_peak_ratio,\n"
            "  activations_category_ratio (each / the same figure at W = 1), ideal_ratio (1/W).\n");
}

/* ---- the category figures: make the model on every rank, read, free ---------- */

typedef struct probe_arg {
    const usp_train_config *config;
    double bytes[MAX_WORLD][3]; /* [rank][category] */
    int64_t tokens_per_rank;
} probe_arg;

/* Makes the model as the trainer does (core/train.c, setup) and reads its categories. */
static usp_status probe_rank(const usp_rank_ctx *ctx, void *argp)
{
    probe_arg *a = argp;
    const usp_train_config *c = a->config;
    usp_mesh mesh;
    USP_CHECK(usp_mesh_create(ctx->world, &c->shape, &mesh));
    usp_model_setup ms = {.config = &c->model, .backend = ctx->backend, .stream = ctx->stream, .mesh = &mesh,
                          .batch = c->batch / c->shape.dp, .seq_len = c->seq_len};
    usp_model *m = NULL;
    usp_status s = usp_model_create(&ms, &m);
    if (s == USP_OK) {
        for (int i = 0; i < 3; i++)
            a->bytes[ctx->rank][i] = (double)usp_backend_bytes_in_category(ctx->backend, category_names[i]);
        if (ctx->rank == 0)
            a->tokens_per_rank = usp_model_layout(m)->per_rank * ms.batch;
    }
    usp_model_destroy(m);
    usp_mesh_destroy(&mesh);
    return s;
}

/* ---- one world size -------------------------------------------------------------- */

static ssize_t discard(void *cookie, const char *buf, size_t size)
{
    (void)cookie, (void)buf;
    return (ssize_t)size;
}

/* Runs fn on a simulated world of c->shape.world ranks; a failure's message names `what`. */
static usp_status run_world(const usp_train_config *c, usp_rank_main_fn fn, void *arg, const char *what,
                            mem_result *r)
{
    sim_config sc = sim_config_default(c->shape.world);
    sc.trace = 0;
    sim_world *w = NULL;
    usp_status s = sim_world_create(&sc, &w);
    if (s == USP_OK)
        s = sim_world_run(w, fn, arg);
    if (s != USP_OK) {
        char why[USP_ERROR_MESSAGE_MAX]; /* usp_error writes the slot the message is in */
        snprintf(why, sizeof why, "%s", w && *sim_world_report(w) ? sim_world_report(w) : usp_error_message());
        s = usp_error(s, "%s at W = %d (U %d x R %d): %s", what, c->shape.world, c->shape.ulysses, c->shape.ring,
                      why);
    } else if (r) {
        r->peak = 0, r->peak_min = 1e300;
        for (int i = 0; i < c->shape.world; i++) {
            double p = (double)sim_world_peak_bytes(w, i);
            r->peak = p > r->peak ? p : r->peak;
            r->peak_min = p < r->peak_min ? p : r->peak_min;
        }
    }
    sim_world_destroy(w);
    return s;
}

static usp_status measure(const mem_config *mc, int64_t seq, mem_result *r)
{
    usp_train_config c;
    usp_train_defaults(&c);
    USP_CHECK(usp_model_config_preset("tiny", &c.model));
    USP_CHECK(usp_mesh_shape_make(mc->world, mc->ulysses, mc->ring, &c.shape));
    c.data = "passkey", c.seq_len = seq, c.batch = 1, c.steps = 1, c.log_every = 1, c.eval_samples = 0;
    FILE *out = fopencookie(NULL, "w", (cookie_io_functions_t){.write = discard});
    if (!out)
        return usp_error(USP_ERR_RUNTIME, "cannot open a stream for the trainer's progress lines");
    c.out = out;
    usp_train_result result = {.passkey_accuracy = -1};
    usp_train_run run = {.config = &c, .result = &result};
    usp_status s = run_world(&c, usp_train_rank, &run, "one training step", r);
    fclose(out);
    USP_CHECK(s);
    probe_arg *probe = calloc(1, sizeof *probe);
    if (!probe)
        return usp_error(USP_ERR_RUNTIME, "out of memory");
    probe->config = &c;
    s = run_world(&c, probe_rank, probe, "making the model", NULL);
    for (int k = 0; k < 3; k++) {
        r->categories[k] = 0;
        for (int i = 0; i < mc->world; i++)
            r->categories[k] = probe->bytes[i][k] > r->categories[k] ? probe->bytes[i][k] : r->categories[k];
    }
    r->tokens_per_rank = probe->tokens_per_rank;
    free(probe);
    return s;
}

/* ---- output ------------------------------------------------------------------------- */

static void print_row(const mem_config *mc, int64_t seq, const mem_result *r, const mem_result *base,
                      double param_state, int json)
{
    const double act = r->peak - param_state, act0 = base->peak - param_state;
    if (json) {
        json_t *j = json_pack("{s:s, s:s, s:I, s:i, s:i, s:i, s:i, s:I}", "bench", "memory", "model", "tiny", "seq",
                              (json_int_t)seq, "batch", 1, "world", mc->world, "ulysses", mc->ulysses, "ring",
                              mc->ring, "tokens_per_rank", (json_int_t)r->tokens_per_rank);
        json_object_set_new(j, "peak_bytes", json_integer((json_int_t)r->peak));
        json_object_set_new(j, "peak_bytes_min", json_integer((json_int_t)r->peak_min));
        json_object_set_new(j, "param_state_bytes", json_integer((json_int_t)param_state));
        json_object_set_new(j, "activation_peak_bytes", json_integer((json_int_t)act));
        json_object_set_new(j, "activations_category_bytes", json_integer((json_int_t)r->categories[0]));
        json_object_set_new(j, "gradients_category_bytes", json_integer((json_int_t)r->categories[1]));
        json_object_set_new(j, "comm_category_bytes", json_integer((json_int_t)r->categories[2]));
        json_object_set_new(j, "peak_ratio", json_real(r->peak / base->peak));
        json_object_set_new(j, "activation_peak_ratio", json_real(act / act0));
        json_object_set_new(j, "activations_category_ratio", json_real(r->categories[0] / base->categories[0]));
        json_object_set_new(j, "ideal_ratio", json_real(1.0 / mc->world));
        char *text = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6));
        if (text)
            puts(text);
        free(text);
        json_decref(j);
    } else {
        char split[16];
        snprintf(split, sizeof split, "%dx%d", mc->ulysses, mc->ring);
        printf("%3d %6s %8lld %10.2f %8.2f %10.2f %8.2f %10.3f %8.3f %8.3f %8.3f\n", mc->world, split,
               (long long)r->tokens_per_rank, r->peak / MIB, param_state / MIB, act / MIB, r->categories[0] / MIB,
               r->peak / base->peak, act / act0, r->categories[0] / base->categories[0], 1.0 / mc->world);
    }
    fflush(stdout);
}

int main(int argc, char **argv)
{
    int json = 0, quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return usage(stdout), 0;
        else return fprintf(stderr, "memory: unknown option '%s'; the options are --json, --quick (see memory "
                            "--help)\n", argv[i]), 2;
    }
    const int64_t seq = quick ? 2048 : 16384;
    usp_model_config tiny;
    if (usp_model_config_preset("tiny", &tiny) != USP_OK)
        return fprintf(stderr, "memory: %s\n", usp_error_message()), 1;
    const double param_state = 16.0 * (double)usp_model_config_param_count(&tiny);
    if (!json) {
        printf("memory per rank of one training step: tiny model (%lld parameters), N = %lld, batch 1, sim backend\n",
               (long long)usp_model_config_param_count(&tiny), (long long)seq);
        printf("param = 16 P bytes (weights, grads, AdamW m, v); act@peak = peak - param; act cat = \"activations\" "
               "category (MiB)\n");
        printf("W = 8 runs U x R = 4 x 2: the tiny model's 4 heads cannot be split 8 ways\n\n");
        printf("%3s %6s %8s %10s %8s %10s %8s %10s %8s %8s %8s\n", "W", "UxR", "tok/rank", "peak MiB", "param",
               "act@peak", "act cat", "peak/W1", "act/W1", "cat/W1", "1/W");
    }
    mem_result base = {0};
    for (size_t i = 0; i < N_CONFIGS; i++) {
        mem_result r = {0};
        usp_status s = measure(&configs[i], seq, &r);
        if (s != USP_OK) {
            fprintf(stderr, "memory: %s\n", usp_error_message());
            return (int)s;
        }
        if (i == 0)
            base = r;
        print_row(&configs[i], seq, &r, &base, param_state, json);
    }
    return 0;
}
