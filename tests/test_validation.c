/* The planner against published, measured training runs (docs/validation.md):
 * every run of tests/validation/runs.json planned with `usp plan ARGS --json`,
 * and usp's tokens/s held to the targets of issue 16: median absolute error
 * at most 20%, the worst run within 1.6x either way; peak memory within 25%
 * where the source states it. Rankings (published orders of splits of one
 * machine) must come out in the published order.
 *
 * USP_PRINT_VALIDATION=1 prints the table of docs/validation.md. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check_main.h"
#include "tests/harness.h"
#include "tools/commands.h"

#define ARGS_MAX 48
#define GB 1e9

typedef struct planned {
    double tokens_per_s; /* the whole run's */
    double peak_gb;      /* the largest rank's */
    double seq;          /* tokens a sequence */
    double batch;        /* sequences a step */
} planned;

/* `usp plan ARGS --json` with {dir} in ARGS replaced by the validation directory. */
static planned plan_args(const char *args)
{
    char line[1024], word[256];
    ck_assert_uint_lt(strlen(args), sizeof line);
    snprintf(line, sizeof line, "%s", args);
    static char words[ARGS_MAX][256];
    char *argv[ARGS_MAX + 3] = {"usp", "plan"};
    int argc = 2;
    for (char *save = NULL, *w = strtok_r(line, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        ck_assert_int_lt(argc, ARGS_MAX);
        const char *at = strstr(w, "{dir}");
        if (at)
            snprintf(word, sizeof word, "%.*s%s%s", (int)(at - w), w, USP_VALIDATION_DIR, at + 5);
        else
            snprintf(word, sizeof word, "%s", w);
        snprintf(words[argc], sizeof words[argc], "%s", word);
        argv[argc] = words[argc];
        argc++;
    }
    argv[argc++] = "--json";
    static char out[1 << 16];
    int code = harness_run_command(cmd_plan, argv, argc, out, sizeof out);
    ck_assert_msg(code == 0, "usp plan %s: exit %d", args, code);
    json_error_t err;
    json_t *j = json_loads(out, 0, &err);
    ck_assert_msg(j, "usp plan %s: not one JSON object (%s)", args, err.text);
    planned p = {.tokens_per_s = json_number_value(json_object_get(j, "tokens_per_s")),
                 .seq = (double)json_integer_value(json_object_get(j, "seq")),
                 .batch = (double)json_integer_value(json_object_get(j, "batch"))};
    json_t *peaks = json_object_get(j, "peak_bytes"), *v;
    size_t i;
    json_array_foreach(peaks, i, v) p.peak_gb = fmax(p.peak_gb, (double)json_integer_value(v) / GB);
    json_decref(j);
    ck_assert_msg(p.tokens_per_s > 0, "usp plan %s: no tokens/s", args);
    return p;
}

static json_t *load_runs(void)
{
    json_error_t err;
    json_t *root = json_load_file(USP_VALIDATION_DIR "/runs.json", 0, &err);
    ck_assert_msg(root, "%s/runs.json: %s (line %d)", USP_VALIDATION_DIR, err.text, err.line);
    return root;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int printing(void) { return getenv("USP_PRINT_VALIDATION") != NULL; }

START_TEST(planned_tokens_per_s_within_the_targets)
{
    json_t *root = load_runs(), *runs = json_object_get(root, "runs"), *run;
    size_t n = json_array_size(runs), i;
    ck_assert_uint_ge(n, 8); /* issue 16: at least 8 published runs */
    double *errors = calloc(n, sizeof *errors), worst = 1.0, memory_worst = 1.0;
    ck_assert_ptr_nonnull(errors);
    const char *worst_id = "";
    if (printing())
        printf("| run | published tok/s | usp tok/s | usp / published | published GB | usp GB |\n"
               "|---|---|---|---|---|---|\n");
    json_array_foreach(runs, i, run) {
        const char *id = json_string_value(json_object_get(run, "id"));
        double published = json_number_value(json_object_get(run, "published_tokens_per_s"));
        json_t *memory = json_object_get(run, "published_memory_gb");
        ck_assert_msg(id && published > 0, "run %zu: an id and published_tokens_per_s are required", i);
        planned p = plan_args(json_string_value(json_object_get(run, "args")));
        double ratio = p.tokens_per_s / published, off = fmax(ratio, 1.0 / ratio);
        errors[i] = fabs(ratio - 1.0);
        if (off > worst)
            worst = off, worst_id = id;
        if (memory)
            memory_worst = fmax(memory_worst, fmax(p.peak_gb / json_number_value(memory),
                                                   json_number_value(memory) / p.peak_gb));
        if (printing()) {
            printf("| %s | %.0f | %.0f | %.2f |", id, published, p.tokens_per_s, ratio);
            if (memory)
                printf(" %.1f | %.1f |\n", json_number_value(memory), p.peak_gb);
            else
                printf(" | %.1f |\n", p.peak_gb);
        }
    }
    qsort(errors, n, sizeof *errors, by_value);
    double median = n % 2 ? errors[n / 2] : 0.5 * (errors[n / 2 - 1] + errors[n / 2]);
    if (printing())
        printf("\n%zu runs: median absolute error %.1f%%, worst %.2fx (%s); memory worst %.2fx\n", n,
               100 * median, worst, worst_id, memory_worst);
    ck_assert_msg(median <= 0.20, "median absolute error of tokens/s %.1f%% > 20%%", 100 * median);
    ck_assert_msg(worst <= 1.6, "run %s is %.2fx off (> 1.6x)", worst_id, worst);
    ck_assert_msg(memory_worst <= 1.25, "peak memory %.2fx off a published figure (> 25%%)", memory_worst);
    free(errors);
    json_decref(root);
}
END_TEST

/* Published orders of splits of one machine (issue 16, acceptance 2): each split planned with the
 * ranking's own arguments must come out in the published order, fastest first (the file lists them
 * so, which is checked too). A ranking may say "tie_within": splits published within that fraction
 * of the next faster one form a tier with it (a benchmark's run-to-run noise), and only the tiers'
 * order is asserted: every split of a tier slower than every split of the tier before. Printed as
 * published against planned iterations a second (tokens/s over the tokens of a step) with
 * USP_PRINT_VALIDATION. */
#define SPLITS_MAX 16

START_TEST(split_rankings_come_out_in_the_published_order)
{
    json_t *root = load_runs(), *rankings = json_object_get(root, "rankings"), *ranking;
    ck_assert_uint_ge(json_array_size(rankings), 1);
    size_t i;
    json_array_foreach(rankings, i, ranking) {
        const char *id = json_string_value(json_object_get(ranking, "id"));
        double tie = json_number_value(json_object_get(ranking, "tie_within")); /* 0 when absent: strict */
        json_t *splits = json_object_get(ranking, "splits"), *split;
        ck_assert_uint_le(json_array_size(splits), SPLITS_MAX);
        double published[SPLITS_MAX], planned_rate[SPLITS_MAX];
        int tier[SPLITS_MAX];
        size_t k;
        if (printing())
            printf("\n%s: split, published iterations/s, usp iterations/s, tier\n", id);
        json_array_foreach(splits, k, split) {
            int u = (int)json_integer_value(json_object_get(split, "ulysses"));
            int r = (int)json_integer_value(json_object_get(split, "ring"));
            published[k] = json_number_value(json_object_get(split, "published"));
            ck_assert_msg(k == 0 || published[k] <= published[k - 1], "%s: the splits must be listed fastest first",
                          id);
            tier[k] = k == 0 ? 0 : tier[k - 1] + (published[k] < (1 - tie) * published[k - 1]);
            char args[1024];
            snprintf(args, sizeof args, "%s --ulysses %d --ring %d",
                     json_string_value(json_object_get(ranking, "args")), u, r);
            planned p = plan_args(args);
            planned_rate[k] = p.tokens_per_s / (p.seq * p.batch);
            if (printing())
                printf("  U%d x R%d  %9.3f  %9.3f  %d\n", u, r, published[k], planned_rate[k], tier[k]);
        }
        for (size_t a = 0; a < k; a++)
            for (size_t b = 0; b < k; b++)
                ck_assert_msg(tier[a] >= tier[b] || planned_rate[a] > planned_rate[b],
                              "%s: split %zu (published %.3f) planned at %.3f iterations/s, not faster than split "
                              "%zu (published %.3f, a slower tier) at %.3f", id, a, published[a], planned_rate[a], b,
                              published[b], planned_rate[b]);
    }
    json_decref(root);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("validation");
    TCase *tc = tcase_create("published runs");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, planned_tokens_per_s_within_the_targets);
    tcase_add_test(tc, split_rankings_come_out_in_the_published_order);
    suite_add_tcase(s, tc);
    return check_main_run(s);
}
