/* The Hugging Face layout of checkpoints: a directory written by this test
 * with its own tensor names and layouts (as transformers' save_pretrained
 * writes GPT-2 and Llama models) loads into the right places of usp's
 * parameter table; usp's own checkpoints round-trip; missing tensors and
 * wrong shapes are configuration errors naming the file and the tensor. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/safetensors.h"
#include "tests/check_main.h"

static char tmpdir[] = "/tmp/usp_layout_XXXXXX";

/* A distinct value for element i of Hugging Face tensor number t. */
static float hf_value(int t, int64_t i) { return (float)t + (float)(i % 997) * 1e-3f; }

typedef struct hf_tensor {
    char name[96];
    int64_t rows, cols; /* as Hugging Face stores it (cols 0: a vector) */
} hf_tensor;

static int add(hf_tensor *t, int n, const char *name, int64_t rows, int64_t cols)
{
    snprintf(t[n].name, sizeof t[n].name, "%s", name);
    t[n].rows = rows, t[n].cols = cols;
    return n + 1;
}

/* GPT-2 as save_pretrained writes it: Conv1D weights [in, out], c_attn fused q|k|v on out. */
static int gpt2_tensors(const usp_model_config *c, hf_tensor *t)
{
    int64_t C = c->d_model, F = c->d_ff;
    int n = add(t, 0, "wte.weight", c->vocab, C);
    n = add(t, n, "wpe.weight", c->max_seq, C);
    for (int l = 0; l < c->n_layer; l++) {
        char p[64];
        const struct { const char *suffix; int64_t rows, cols; } parts[] = {
            {"ln_1.weight", C, 0}, {"ln_1.bias", C, 0}, {"attn.c_attn.weight", C, 3 * C}, {"attn.c_attn.bias", 3 * C, 0},
            {"attn.c_proj.weight", C, C}, {"attn.c_proj.bias", C, 0}, {"ln_2.weight", C, 0}, {"ln_2.bias", C, 0},
            {"mlp.c_fc.weight", C, F}, {"mlp.c_fc.bias", F, 0}, {"mlp.c_proj.weight", F, C}, {"mlp.c_proj.bias", C, 0}};
        for (size_t k = 0; k < sizeof parts / sizeof *parts; k++) {
            snprintf(p, sizeof p, "h.%d.%s", l, parts[k].suffix);
            n = add(t, n, p, parts[k].rows, parts[k].cols);
        }
    }
    n = add(t, n, "ln_f.weight", C, 0);
    return add(t, n, "ln_f.bias", C, 0);
}

/* Llama: Linear weights [out, in], q/k/v and gate/up separate; q [H D, C], o [C, H D]. */
static int llama_tensors(const usp_model_config *c, hf_tensor *t)
{
    int64_t C = c->d_model, F = c->d_ff, D = usp_model_config_head_dim(c), qd = c->n_head * D, kd = c->n_kv_head * D;
    int n = add(t, 0, "model.embed_tokens.weight", c->vocab, C);
    for (int l = 0; l < c->n_layer; l++) {
        char p[96];
        const struct { const char *suffix; int64_t rows, cols; } parts[] = {
            {"input_layernorm.weight", C, 0}, {"self_attn.q_proj.weight", qd, C}, {"self_attn.k_proj.weight", kd, C},
            {"self_attn.v_proj.weight", kd, C}, {"self_attn.o_proj.weight", C, qd},
            {"post_attention_layernorm.weight", C, 0}, {"mlp.gate_proj.weight", F, C}, {"mlp.up_proj.weight", F, C},
            {"mlp.down_proj.weight", C, F}};
        for (size_t k = 0; k < sizeof parts / sizeof *parts; k++) {
            snprintf(p, sizeof p, "model.layers.%d.%s", l, parts[k].suffix);
            n = add(t, n, p, parts[k].rows, parts[k].cols);
        }
    }
    n = add(t, n, "model.norm.weight", C, 0);
    return c->tied_embeddings ? n : add(t, n, "lm_head.weight", c->vocab, C);
}

/* Writes DIR/model.safetensors (with `prefix` before every name) and DIR/config.json. */
static void write_hf_dir(const char *dir, const usp_model_config *c, const hf_tensor *t, int n, const char *prefix,
                         int skip)
{
    mkdir(dir, 0777);
    usp_st_entry *e = calloc((size_t)n, sizeof *e);
    char (*names)[128] = calloc((size_t)n, sizeof *names);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (i == skip)
            continue;
        int64_t count = t[i].rows * (t[i].cols ? t[i].cols : 1);
        float *data = malloc((size_t)count * sizeof *data);
        for (int64_t j = 0; j < count; j++)
            data[j] = hf_value(i, j);
        snprintf(names[m], sizeof names[m], "%s%s", prefix, t[i].name);
        e[m] = (usp_st_entry){.name = names[m], .ndim = t[i].cols ? 2 : 1, .shape = {t[i].rows, t[i].cols}, .data = data};
        m++;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ck_assert_int_eq(usp_safetensors_write(path, e, (size_t)m, NULL), USP_OK);
    snprintf(path, sizeof path, "%s/config.json", dir);
    ck_assert_int_eq(usp_model_config_write_hf_json(c, path), USP_OK);
    for (int i = 0; i < m; i++)
        free((void *)e[i].data);
    free(e), free(names);
}

static usp_model_config small(const char *preset)
{
    usp_model_config c;
    ck_assert_int_eq(usp_model_config_preset(preset, &c), USP_OK);
    c.vocab = 40, c.n_layer = 2, c.d_model = 16, c.n_head = 4, c.max_seq = 32;
    c.n_kv_head = strcmp(preset, "tiny") == 0 ? 2 : 4;
    c.d_ff = strcmp(preset, "tiny") == 0 ? 24 : 64;
    c.tied_embeddings = strcmp(preset, "tiny") != 0; /* Llama: an lm_head too */
    return c;
}

/* Element (r, k) of usp's tensor `kind` in `layer`. */
static float ours(const usp_param_table *t, const float *params, usp_param_kind kind, int layer, int64_t r, int64_t k)
{
    const usp_param_tensor *p = usp_param_find(t, kind, layer);
    ck_assert_ptr_nonnull(p);
    return params[p->offset + r * (p->ndim == 2 ? p->shape[1] : 1) + k];
}

static int index_of(const hf_tensor *t, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(t[i].name, name) == 0)
            return i;
    ck_abort_msg("no tensor %s", name);
    return -1;
}

static float *load(const char *dir, const usp_model_config *c, usp_param_table *table, usp_status *s)
{
    ck_assert_int_eq(usp_param_table_make(c, table), USP_OK);
    float *p = calloc((size_t)table->total * 3, sizeof *p);
    int64_t step;
    int has_optimizer;
    *s = usp_checkpoint_load(dir, c, table, p, p + table->total, p + 2 * table->total, &step, &has_optimizer);
    if (*s == USP_OK)
        ck_assert_int_eq(has_optimizer, 0); /* a Hugging Face directory: a fresh optimizer */
    return p;
}

START_TEST(gpt2_names_and_conv1d_layouts_land_in_place)
{
    const char *prefixes[] = {"", "transformer."}; /* GPT2Model and GPT2LMHeadModel state dicts */
    for (int k = 0; k < 2; k++) {
        usp_model_config c = small("gpt2-124m");
        hf_tensor t[64];
        int n = gpt2_tensors(&c, t);
        char dir[256];
        snprintf(dir, sizeof dir, "%s/gpt2_%d", tmpdir, k);
        write_hf_dir(dir, &c, t, n, prefixes[k], -1);
        usp_param_table table;
        usp_status s;
        float *p = load(dir, &c, &table, &s);
        ck_assert_msg(s == USP_OK, "%s", usp_error_message());
        const int64_t C = c.d_model;
        int att = index_of(t, n, "h.1.attn.c_attn.weight"), fc = index_of(t, n, "h.0.mlp.c_fc.weight");
        for (int64_t i = 0; i < C; i++)
            for (int64_t j = 0; j < 3 * C; j++) /* Conv1D [in, out] is our [out, in] transposed */
                ck_assert_float_eq(ours(&table, p, USP_P_QKV_W, 1, j, i), hf_value(att, i * 3 * C + j));
        for (int64_t i = 0; i < C; i++)
            for (int64_t j = 0; j < c.d_ff; j++)
                ck_assert_float_eq(ours(&table, p, USP_P_MLP_UP_W, 0, j, i), hf_value(fc, i * c.d_ff + j));
        int wpe = index_of(t, n, "wpe.weight"), lnf = index_of(t, n, "ln_f.bias");
        ck_assert_float_eq(ours(&table, p, USP_P_WPE, -1, 5, 3), hf_value(wpe, 5 * C + 3));
        ck_assert_float_eq(ours(&table, p, USP_P_NORMF_B, -1, 7, 0), hf_value(lnf, 7));
        free(p);
        usp_param_table_free(&table);
    }
}
END_TEST

/* _i = 1: heads of 6 on d_model 16 (q [24, 16], k and v [12, 16], o [16, 24]), as Qwen3's head_dim */
START_TEST(llama_names_split_qkv_and_gate_up)
{
    usp_model_config c = small("tiny");
    c.head_dim = _i ? 6 : 0;
    hf_tensor t[64];
    int n = llama_tensors(&c, t);
    char dir[256];
    snprintf(dir, sizeof dir, "%s/llama_%d", tmpdir, _i);
    write_hf_dir(dir, &c, t, n, "", -1);
    usp_param_table table;
    usp_status s;
    float *p = load(dir, &c, &table, &s);
    ck_assert_msg(s == USP_OK, "%s", usp_error_message());
    const int64_t C = c.d_model, D = usp_model_config_head_dim(&c), qd = c.n_head * D, kd = c.n_kv_head * D;
    const int64_t F = c.d_ff;
    int q = index_of(t, n, "model.layers.1.self_attn.q_proj.weight");
    int v = index_of(t, n, "model.layers.1.self_attn.v_proj.weight");
    int o = index_of(t, n, "model.layers.0.self_attn.o_proj.weight");
    int up = index_of(t, n, "model.layers.0.mlp.up_proj.weight"), head = index_of(t, n, "lm_head.weight");
    for (int64_t r = 0; r < qd; r++)
        for (int64_t k = 0; k < C; k++)
            ck_assert_float_eq(ours(&table, p, USP_P_QKV_W, 1, r, k), hf_value(q, r * C + k));
    for (int64_t r = 0; r < kd; r++)
        for (int64_t k = 0; k < C; k++)
            ck_assert_float_eq(ours(&table, p, USP_P_QKV_W, 1, qd + kd + r, k), hf_value(v, r * C + k));
    for (int64_t r = 0; r < C; r++)
        for (int64_t k = 0; k < qd; k++)
            ck_assert_float_eq(ours(&table, p, USP_P_ATTN_O_W, 0, r, k), hf_value(o, r * qd + k));
    for (int64_t r = 0; r < F; r++)
        ck_assert_float_eq(ours(&table, p, USP_P_MLP_UP_W, 0, F + r, 3), hf_value(up, r * C + 3));
    ck_assert_float_eq(ours(&table, p, USP_P_LM_HEAD, -1, 9, 2), hf_value(head, 9 * C + 2));
    free(p);
    usp_param_table_free(&table);
}
END_TEST

START_TEST(usp_checkpoints_round_trip)
{
    const char *presets[] = {"tiny", "gpt2-124m", "tiny"};
    for (int k = 0; k < 3; k++) {
        usp_model_config c = small(presets[k]);
        c.head_dim = k == 2 ? 6 : 0; /* attention 24 wide on d_model 16: config.json carries head_dim */
        usp_param_table table;
        ck_assert_int_eq(usp_param_table_make(&c, &table), USP_OK);
        size_t n = (size_t)table.total;
        float *a = calloc(3 * n, sizeof *a), *b = calloc(3 * n, sizeof *b);
        usp_param_init(&table, &c, 11, a);
        for (size_t i = 0; i < 2 * n; i++)
            a[n + i] = (float)i * 1e-6f; /* Adam moments */
        char dir[256];
        snprintf(dir, sizeof dir, "%s/round_%d", tmpdir, k);
        ck_assert_int_eq(usp_checkpoint_save(dir, &c, &table, a, a + n, a + 2 * n, 42, 7), USP_OK);
        int64_t step;
        int has_optimizer;
        ck_assert_int_eq(usp_checkpoint_load(dir, &c, &table, b, b + n, b + 2 * n, &step, &has_optimizer), USP_OK);
        ck_assert_int_eq(has_optimizer, 1);
        ck_assert_int_eq(step, 42);
        ck_assert_int_eq(memcmp(a, b, 3 * n * sizeof *a), 0);
        usp_model_config back;
        ck_assert_int_eq(usp_model_config_load(dir, &back), USP_OK);
        ck_assert(usp_model_config_equal(&back, &c));
        ck_assert_int_eq(usp_model_config_head_dim(&back), usp_model_config_head_dim(&c));
        free(a), free(b);
        usp_param_table_free(&table);
    }
}
END_TEST

START_TEST(missing_tensors_and_wrong_shapes_name_the_tensor)
{
    usp_model_config c = small("gpt2-124m");
    hf_tensor t[64];
    int n = gpt2_tensors(&c, t);
    char dir[256];
    snprintf(dir, sizeof dir, "%s/missing", tmpdir);
    write_hf_dir(dir, &c, t, n, "", index_of(t, n, "h.1.mlp.c_proj.weight"));
    usp_param_table table;
    usp_status s;
    free(load(dir, &c, &table, &s));
    usp_param_table_free(&table);
    ck_assert_int_eq(s, USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "model.safetensors") && strstr(usp_error_message(), "h.1.mlp.c_proj.weight"),
                  "%s", usp_error_message());
    t[index_of(t, n, "h.0.attn.c_attn.weight")].cols += 1;
    snprintf(dir, sizeof dir, "%s/shape", tmpdir);
    write_hf_dir(dir, &c, t, n, "", -1);
    free(load(dir, &c, &table, &s));
    usp_param_table_free(&table);
    ck_assert_int_eq(s, USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "h.0.attn.c_attn.weight") && strstr(usp_error_message(), "[16, 49]"),
                  "%s", usp_error_message());
}
END_TEST

int main(void)
{
    if (!mkdtemp(tmpdir))
        return 1;
    Suite *s = suite_create("checkpoint_layout");
    TCase *t = tcase_create("layout");
    tcase_add_test(t, gpt2_names_and_conv1d_layouts_land_in_place);
    tcase_add_loop_test(t, llama_names_split_qkv_and_gate_up, 0, 2);
    tcase_add_test(t, usp_checkpoints_round_trip);
    tcase_add_test(t, missing_tensors_and_wrong_shapes_name_the_tensor);
    suite_add_tcase(s, t);
    int code = check_main_run(s);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? code : 1;
}
