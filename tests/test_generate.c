/* What usp generate rests on, on one rank of a small Llama with generic weights:
 * - the logits usp_model_logits reads are the loss's: the cross-entropy computed from them
 *   row by row, logsumexp(row) - row[target], sums to usp_model_loss's, and the tiled loss's
 *   recomputed rows equal the whole ones;
 * - padding hides the future: a row's logits are the same bits whatever the tokens after it;
 * - greedy generation is the argmax of one forward over the whole generated sequence (the
 *   teacher-forced rows eval scores), and a draw at a temperature depends on the seed alone;
 * - usp_generate_pick draws from softmax(logits / T); the passkey prompt is the sample cut
 *   before its answer. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/checkpoint/checkpoint.h"
#include "core/model/model.h"
#include "core/train/generate.h"
#include "tests/check_main.h"
#include "tests/harness.h"
#include "tests/scratch_dir.h"

#define N 64 /* tokens of every forward here */

static usp_model_config small_model(void)
{
    usp_model_config c;
    ck_assert_int_eq(usp_model_config_preset("tiny", &c), USP_OK);
    c.vocab = 128, c.n_layer = 2, c.d_model = 32, c.n_head = 4, c.n_kv_head = 2, c.d_ff = 48, c.max_seq = N;
    c.tied_embeddings = 0; /* the lm_head apart from the embedding: a wrong matrix would show */
    return c;
}

/* The initial weights moved off their symmetric values (norms of 1), as tests/test_gradcheck.c does. */
static float *small_weights(const usp_model_config *c, usp_param_table *t)
{
    ck_assert_int_eq(usp_param_table_make(c, t), USP_OK);
    float *w = malloc((size_t)t->total * sizeof *w);
    usp_param_init(t, c, 7, w);
    for (int64_t i = 0; i < t->total; i++)
        w[i] += 0.05f * sinf((float)i);
    return w;
}

/* A one-rank model of N tokens holding `w` (tiled: the loss and its rows 16 at a time). */
static usp_status make_model(const usp_rank_ctx *ctx, const usp_model_config *c, const float *w, int tiled,
                             usp_mesh *mesh, usp_model **m)
{
    usp_mesh_shape shape;
    USP_CHECK(usp_mesh_shape_make(1, 1, 1, &shape));
    USP_CHECK(usp_mesh_create(ctx->world, &shape, mesh));
    usp_model_setup s = {.config = c, .backend = ctx->backend, .mesh = mesh, .batch = 1, .seq_len = N,
                         .tiled_loss = tiled, .tile_rows = 16};
    USP_CHECK(usp_model_create(&s, m));
    return usp_param_store_write(usp_model_store(*m), USP_ARRAY_WEIGHTS, w);
}

/* tokens[0..len) then padding, as generation feeds the model; targets the next token (-1 past len - 1). */
static void fill(usp_shard *s, const int32_t *tokens, int64_t len)
{
    for (int64_t i = 0; i < N; i++) {
        s->positions[i] = (int32_t)i;
        s->tokens[i] = i < len ? tokens[i] : 0;
        s->targets[i] = i + 1 < len ? tokens[i + 1] : -1;
    }
}

typedef struct logits_case {
    usp_model_config c;
    const float *w;
    double loss, loss_from_logits, tiled_error, worst_logit;
    int padded_rows_equal;
} logits_case;

/* Every row's logits of one forward over a passkey sample, into out [N, V]. */
static usp_status all_logits(usp_model *m, const usp_shard *s, float *out)
{
    int64_t rows[N];
    for (int64_t i = 0; i < N; i++)
        rows[i] = i;
    USP_CHECK(usp_model_forward(m, s));
    return usp_model_logits(m, rows, N, out);
}

static usp_status logits_rank(const usp_rank_ctx *ctx, void *arg)
{
    logits_case *lc = arg;
    const int64_t V = lc->c.vocab;
    usp_mesh mesh[2];
    usp_model *whole, *tiled;
    usp_data data;
    usp_shard s;
    float *a = malloc((size_t)(N * V) * sizeof *a), *b = malloc((size_t)(N * V) * sizeof *b);
    USP_CHECK(make_model(ctx, &lc->c, lc->w, 0, &mesh[0], &whole));
    USP_CHECK(make_model(ctx, &lc->c, lc->w, 1, &mesh[1], &tiled));
    USP_CHECK(usp_data_open("passkey", 3, &data));
    USP_CHECK(usp_shard_alloc(&s, N, 0));
    USP_CHECK(usp_data_read_shard(&data, usp_model_layout(whole), 0, 0, N, &s));
    USP_CHECK(all_logits(whole, &s, a));
    lc->loss_from_logits = 0, lc->worst_logit = 0;
    for (int64_t i = 0; i < N; i++) { /* loss = logsumexp(row) - row[target], in double */
        const float *row = a + i * V;
        double top = row[0], sum = 0;
        for (int64_t v = 0; v < V; v++)
            top = fmax(top, row[v]), lc->worst_logit = fmax(lc->worst_logit, fabs(row[v]));
        for (int64_t v = 0; v < V; v++)
            sum += exp(row[v] - top);
        lc->loss_from_logits += s.targets[i] >= 0 ? top + log(sum) - row[s.targets[i]] : 0;
    }
    USP_CHECK(usp_model_loss(whole, 1.0f, 0, &lc->loss));
    USP_CHECK(all_logits(tiled, &s, b));
    lc->tiled_error = 0;
    for (int64_t i = 0; i < N * V; i++)
        lc->tiled_error = fmax(lc->tiled_error, fabs(a[i] - b[i]));
    lc->padded_rows_equal = 1; /* row p of tokens[0..p] and padding: the full sequence's row p, bit for bit */
    int32_t tokens[N];
    memcpy(tokens, s.tokens, sizeof tokens);
    for (int64_t p = 0; p < N; p += 9) {
        fill(&s, tokens, p + 1);
        USP_CHECK(all_logits(whole, &s, b));
        lc->padded_rows_equal &= memcmp(a + p * V, b + p * V, (size_t)V * sizeof *a) == 0;
    }
    free(a), free(b);
    usp_shard_free(&s);
    usp_data_close(&data);
    for (int i = 0; i < 2; i++)
        usp_model_destroy(i ? tiled : whole), usp_mesh_destroy(&mesh[i]);
    return USP_OK;
}

START_TEST(logits_match_the_loss_and_padding_hides_the_future)
{
    logits_case lc = {.c = small_model()};
    usp_param_table t;
    float *w = small_weights(&lc.c, &t);
    lc.w = w;
    char report[1024];
    ck_assert_msg(harness_run(1, logits_rank, &lc, NULL, 0, report, sizeof report) == USP_OK, "%s", report);
    ck_assert_msg(fabs(lc.loss - lc.loss_from_logits) <= 1e-5 * fabs(lc.loss), "loss %.9g, from the logits %.9g",
                  lc.loss, lc.loss_from_logits);
    ck_assert_msg(lc.worst_logit > 0.1, "the logits are all near 0 (%g): the check would see little", lc.worst_logit);
    ck_assert_msg(lc.tiled_error <= 1e-5 * lc.worst_logit, "tiled rows differ by %g", lc.tiled_error);
    ck_assert_msg(lc.padded_rows_equal, "a row's logits changed with the padding after it");
    free(w);
    usp_param_table_free(&t);
}
END_TEST

typedef struct greedy_case {
    usp_model_config c;
    const float *w;
    const int32_t *tokens; /* the prompt, then the generated tokens */
    int64_t len;
    int32_t argmax[N];     /* of rows 0..len - 1 */
} greedy_case;

/* The argmax of every row of one forward over tokens[0..len). */
static usp_status argmax_rank(const usp_rank_ctx *ctx, void *arg)
{
    greedy_case *gc = arg;
    usp_mesh mesh;
    usp_model *m;
    usp_shard s;
    int64_t rows[N];
    USP_CHECK(make_model(ctx, &gc->c, gc->w, 0, &mesh, &m));
    USP_CHECK(usp_shard_alloc(&s, N, 0));
    fill(&s, gc->tokens, gc->len);
    for (int64_t i = 0; i < gc->len; i++)
        rows[i] = i;
    USP_CHECK(usp_model_forward(m, &s));
    USP_CHECK(usp_model_argmax(m, rows, (int)gc->len, gc->argmax));
    usp_shard_free(&s);
    usp_model_destroy(m);
    usp_mesh_destroy(&mesh);
    return USP_OK;
}

/* Runs generation from the checkpoint in the scratch folder; the tokens into out. */
static void generate(usp_generate_config *g, double temperature, uint64_t seed, int32_t *out)
{
    g->temperature = temperature, g->seed = seed, g->out = out;
    char report[1024];
    ck_assert_int_eq(usp_generate_check(g), USP_OK);
    ck_assert_msg(harness_run(1, usp_generate_rank, g, NULL, 0, report, sizeof report) == USP_OK, "%s", report);
}

START_TEST(greedy_generation_is_the_argmax_of_one_forward)
{
    ck_assert(scratch_dir_make("/tmp/usp_generate_XXXXXX"));
    usp_model_config c = small_model();
    usp_param_table t;
    float *w = small_weights(&c, &t), *zero = calloc((size_t)t.total, sizeof *zero);
    ck_assert_int_eq(usp_checkpoint_save(tmp_path("ckpt"), &c, &t, w, zero, zero, 1, 3), USP_OK);
    enum { PROMPT = 20, NEW = 12 };
    int32_t seq[N + 1], key[USP_PASSKEY_DIGITS], again[NEW], other[NEW];
    int64_t n_prompt;
    ck_assert_int_eq(usp_generate_passkey_prompt(3, 0, N, seq, &n_prompt, key), USP_OK);
    usp_generate_config g = {.model = c, .checkpoint = tmp_path("ckpt"), .seq_len = N, .prompt = seq,
                             .n_prompt = PROMPT, .n_new = NEW};
    generate(&g, 0, 0, seq + PROMPT);
    greedy_case gc = {.c = c, .w = w, .tokens = seq, .len = PROMPT + NEW - 1};
    char report[1024];
    ck_assert_msg(harness_run(1, argmax_rank, &gc, NULL, 0, report, sizeof report) == USP_OK, "%s", report);
    for (int k = 0; k < NEW; k++)
        ck_assert_msg(gc.argmax[PROMPT - 1 + k] == seq[PROMPT + k], "token %d: generated %d, the forward's argmax %d",
                      k, seq[PROMPT + k], gc.argmax[PROMPT - 1 + k]);
    generate(&g, 0.7, 5, again);
    generate(&g, 0.7, 5, other);
    ck_assert_msg(memcmp(again, other, sizeof again) == 0, "the same seed drew other tokens");
    generate(&g, 0.7, 6, other); /* 12 draws from ~128 tokens: equal by chance about never */
    ck_assert_msg(memcmp(again, other, sizeof again) != 0, "seeds 5 and 6 drew the same 12 tokens");
    free(w), free(zero);
    usp_param_table_free(&t);
    scratch_dir_remove();
}
END_TEST

START_TEST(pick_draws_from_the_tempered_softmax)
{
    const float logits[4] = {1.0f, 3.0f, 3.0f, 0.0f};
    uint64_t rng = 42, replay = 42;
    ck_assert_int_eq(usp_generate_pick(logits, 4, 0, &rng), 1); /* greedy: the first largest */
    ck_assert_uint_eq(rng, 42);                                  /* and no draw */
    enum { DRAWS = 200000 };
    for (int T = 1; T <= 2; T++) { /* p_v = exp(l_v / T) / sum; each count within 5 standard deviations */
        int count[4] = {0};
        for (int i = 0; i < DRAWS; i++)
            count[usp_generate_pick(logits, 4, T, &rng)]++;
        double sum = 0;
        for (int v = 0; v < 4; v++)
            sum += exp(logits[v] / T);
        for (int v = 0; v < 4; v++) {
            double p = exp(logits[v] / T) / sum, sd = sqrt(DRAWS * p * (1 - p));
            ck_assert_msg(fabs(count[v] - DRAWS * p) <= 5 * sd, "T %d token %d: %d draws, expected %.0f", T, v,
                          count[v], DRAWS * p);
        }
    }
    int32_t first[8];
    for (int i = 0; i < 8; i++)
        first[i] = usp_generate_pick(logits, 4, 1, &replay);
    replay = 42;
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(usp_generate_pick(logits, 4, 1, &replay), first[i]);
    for (int i = 0; i < 1000; i++) { /* a cold temperature leaves the two largest only */
        int32_t v = usp_generate_pick(logits, 4, 0.01, &rng);
        ck_assert_msg(v == 1 || v == 2, "T 0.01 drew token %d", v);
    }
}
END_TEST

START_TEST(passkey_prompt_is_the_sample_before_its_answer)
{
    int32_t prompt[N], key[USP_PASSKEY_DIGITS];
    int64_t n;
    ck_assert_int_eq(usp_generate_passkey_prompt(1234, 0, N, prompt, &n, key), USP_OK);
    ck_assert_int_eq(n, N - USP_PASSKEY_DIGITS + 1); /* rows 0..N-1 read tokens 0..N-1; the last 4 are digits */
    char text[N + 1];
    for (int64_t i = 0; i < n; i++)
        text[i] = (char)prompt[i];
    text[n] = 0;
    const char *question = " what is the pass key=";
    ck_assert_msg(strncmp(text, "pass key=", 9) == 0, "%s", text);
    ck_assert_msg(strcmp(text + n - strlen(question), question) == 0, "%s", text);
    for (int k = 0; k < USP_PASSKEY_DIGITS; k++) /* the key the sample states at its start */
        ck_assert_int_eq(key[k], prompt[9 + k]);
    int32_t other[N], other_key[USP_PASSKEY_DIGITS];
    ck_assert_int_eq(usp_generate_passkey_prompt(1234, 1, N, other, &n, other_key), USP_OK);
    ck_assert_msg(memcmp(key, other_key, sizeof key) != 0, "held-out samples 0 and 1 have the same key");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("generate");
    TCase *t = tcase_create("generate");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, logits_match_the_loss_and_padding_hides_the_future);
    tcase_add_test(t, greedy_generation_is_the_argmax_of_one_forward);
    tcase_add_test(t, pick_draws_from_the_tempered_softmax);
    tcase_add_test(t, passkey_prompt_is_the_sample_before_its_answer);
    suite_add_tcase(s, t);
    return check_main_run(s);
}
