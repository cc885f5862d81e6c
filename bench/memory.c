/* Memory scaling of a training step with sequence parallelism (issue #4,
 * acceptance item 6): at a fixed sequence length N, the activation memory of
 * each rank should fall about as 1/W when W ranks share the sequence.
 *
 * For the tiny model at N = 16384, W = 1, 2, 4 (Ulysses U = W) and W = 8: the
 * tiny preset has 4 query heads, and Ulysses gives every rank whole heads, so
 * U = 8 is refused; W = 8 runs the hybrid U x R = 4 x 2 (Ulysses inside groups
 * of 4, Ring across the 2 groups: tokens still split 8 ways).
 *
 * Each rank's backend counts every allocation by category and keeps what each
 * category held at the rank's peak (usp_backend_peak_breakdown). Per world size:
 * - peak: the most backend memory a rank held during one training step;
 * - the "activations" category at that peak: the saved forward activations
 *   (core/model.c) and the head-sharded Ulysses buffers (core/ulysses.c);
 * - the per-token memory at the peak = peak - parameter state, the parameter
 *   state being 16 P bytes (weights, their gradients, AdamW's m and v; the same
 *   on every rank, weights being replicated on SP ranks). It adds to the
 *   activations what else scales with the rank's tokens: activation gradients,
 *   all-to-all and ring buffers, attention workspace.
 * Each with its ratio to W = 1; 1/W is the ideal. Figures are the largest over
 * the ranks (they differ by a few bytes at most; the JSON has the smallest peak). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/train.h"
#include "sim/world.h"

#define MIB (1024.0 * 1024.0)
#define MAX_CATEGORIES 16

typedef struct mem_config {
    int world, ulysses, ring;
} mem_config;

static const mem_config configs[] = {{1, 1, 1}, {2, 2, 1}, {4, 4, 1}, {8, 4, 2}};
#define N_CONFIGS (sizeof configs / sizeof *configs)

/* The categories reported, as core/ and the backends name them. */
static const char *const categories[] = {"activations", "gradients", "comm", "attention workspace", "weights",
                                         "optimizer"};
#define N_REPORTED (sizeof categories / sizeof *categories)

typedef struct mem_result {
    double peak, peak_min;       /* bytes, largest and smallest over the ranks */
    double at_peak[N_REPORTED];  /* bytes of each reported category at the peak (largest rank) */
    double other_at_peak;        /* categories not in the list, summed (largest rank) */
} mem_result;

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
            "  act cat    the \"activations\" category at that peak (saved activations, Ulysses buffers)\n"
            "  param      16 P bytes: weights, gradients, AdamW m and v (the same on every rank)\n"
            "  per-token  peak - param: what scales with the rank's tokens (activations, activation\n"
            "             gradients, all-to-all/ring buffers, attention workspace)\n"
            "\n"
            "  --json   one JSON object per world size instead of the table\n"
            "  --quick  N = 2048 (a smoke run)\n"
            "  --help   this text\n"
            "\n"
            "JSON fields, per world size: bench (\"memory\"), model, seq, batch, world, ulysses,\n"
            "  ring, tokens_per_rank, peak_bytes, peak_bytes_min (over the ranks),\n"
            "  param_state_bytes, per_token_peak_bytes (peak_bytes - param_state_bytes),\n"
            "  at_peak (object: bytes of each category at the peak: activations, gradients, comm,\n"
            "  \"attention workspace\", weights, optimizer, other), peak_ratio,\n"
            "  activations_ratio, per_token_ratio (each / the same figure at W = 1),\n"
            "  ideal_ratio (1/W).\n");
}

static ssize_t discard(void *cookie, const char *buf, size_t size)
{
    (void)cookie, (void)buf;
    return (ssize_t)size;
}

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

/* One training step of the tiny model on `mc`; fills r. */
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
    sim_config sc = sim_config_default(mc->world);
    sc.trace = 0;
    sim_world *w = NULL;
    usp_train_result result = {.passkey_accuracy = -1};
    usp_train_run run = {.config = &c, .result = &result};
    usp_status s = sim_world_create(&sc, &w);
    if (s == USP_OK)
        s = sim_world_run(w, usp_train_rank, &run);
    fclose(out);
    if (s == USP_OK) {
        read_peaks(w, mc->world, r);
    } else {
        char why[USP_ERROR_MESSAGE_MAX]; /* usp_error writes the slot the message is in */
        snprintf(why, sizeof why, "%s", w && *sim_world_report(w) ? sim_world_report(w) : usp_error_message());
        s = usp_error(s, "one training step at W = %d (U %d x R %d): %s", mc->world, mc->ulysses, mc->ring, why);
    }
    sim_world_destroy(w);
    return s;
}

static void print_row(const mem_config *mc, int64_t seq, const mem_result *r, const mem_result *base,
                      double param_state, int json)
{
    const double tok = r->peak - param_state, tok0 = base->peak - param_state;
    const int64_t tokens_per_rank = seq / mc->world; /* batch 1; N divides W here */
    if (json) {
        json_t *j = json_pack("{s:s, s:s, s:I, s:i, s:i, s:i, s:i, s:I}", "bench", "memory", "model", "tiny", "seq",
                              (json_int_t)seq, "batch", 1, "world", mc->world, "ulysses", mc->ulysses, "ring",
                              mc->ring, "tokens_per_rank", (json_int_t)tokens_per_rank);
        json_object_set_new(j, "peak_bytes", json_integer((json_int_t)r->peak));
        json_object_set_new(j, "peak_bytes_min", json_integer((json_int_t)r->peak_min));
        json_object_set_new(j, "param_state_bytes", json_integer((json_int_t)param_state));
        json_object_set_new(j, "per_token_peak_bytes", json_integer((json_int_t)tok));
        json_t *at = json_object();
        for (size_t k = 0; k < N_REPORTED; k++)
            json_object_set_new(at, categories[k], json_integer((json_int_t)r->at_peak[k]));
        json_object_set_new(at, "other", json_integer((json_int_t)r->other_at_peak));
        json_object_set_new(j, "at_peak", at);
        json_object_set_new(j, "peak_ratio", json_real(r->peak / base->peak));
        json_object_set_new(j, "activations_ratio", json_real(r->at_peak[0] / base->at_peak[0]));
        json_object_set_new(j, "per_token_ratio", json_real(tok / tok0));
        json_object_set_new(j, "ideal_ratio", json_real(1.0 / mc->world));
        char *text = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6));
        if (text)
            puts(text);
        free(text);
        json_decref(j);
    } else {
        char split[16];
        snprintf(split, sizeof split, "%dx%d", mc->ulysses, mc->ring);
        printf("%3d %6s %8lld %9.2f %8.2f %7.2f %6.2f %6.2f %6.2f %9.2f %8.3f %8.3f %8.3f %7.3f\n", mc->world, split,
               (long long)tokens_per_rank, r->peak / MIB, r->at_peak[0] / MIB, r->at_peak[1] / MIB,
               r->at_peak[2] / MIB, r->at_peak[3] / MIB, param_state / MIB, tok / MIB, r->peak / base->peak,
               r->at_peak[0] / base->at_peak[0], tok / tok0, 1.0 / mc->world);
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
