/* Hugging Face names and layouts of the parameter table (see checkpoint.h). */
#include "core/checkpoint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/safetensors.h"

/* One Hugging Face tensor: rows [row0, row1) of one of our [rows, cols]
 * tensors, stored transposed ([cols, rows]) for GPT-2's Conv1D weights. */
typedef struct hf_piece {
    char name[96];
    int64_t row0, row1;
    int transpose;
} hf_piece;

static int piece(hf_piece *out, int64_t row0, int64_t row1, int transpose, const char *fmt, int layer)
{
    snprintf(out->name, sizeof out->name, fmt, layer);
    out->row0 = row0, out->row1 = row1, out->transpose = transpose;
    return 1;
}

static int gpt2_pieces(const usp_param_tensor *p, hf_piece *out)
{
    int l = p->layer;
    int64_t rows = p->shape[0];
    switch (p->kind) {
    case USP_P_WTE: return piece(out, 0, rows, 0, "wte.weight", l);
    case USP_P_WPE: return piece(out, 0, rows, 0, "wpe.weight", l);
    case USP_P_NORM1_W: return piece(out, 0, rows, 0, "h.%d.ln_1.weight", l);
    case USP_P_NORM1_B: return piece(out, 0, rows, 0, "h.%d.ln_1.bias", l);
    case USP_P_QKV_W: return piece(out, 0, rows, 1, "h.%d.attn.c_attn.weight", l);
    case USP_P_QKV_B: return piece(out, 0, rows, 0, "h.%d.attn.c_attn.bias", l);
    case USP_P_ATTN_O_W: return piece(out, 0, rows, 1, "h.%d.attn.c_proj.weight", l);
    case USP_P_ATTN_O_B: return piece(out, 0, rows, 0, "h.%d.attn.c_proj.bias", l);
    case USP_P_NORM2_W: return piece(out, 0, rows, 0, "h.%d.ln_2.weight", l);
    case USP_P_NORM2_B: return piece(out, 0, rows, 0, "h.%d.ln_2.bias", l);
    case USP_P_MLP_UP_W: return piece(out, 0, rows, 1, "h.%d.mlp.c_fc.weight", l);
    case USP_P_MLP_UP_B: return piece(out, 0, rows, 0, "h.%d.mlp.c_fc.bias", l);
    case USP_P_MLP_DOWN_W: return piece(out, 0, rows, 1, "h.%d.mlp.c_proj.weight", l);
    case USP_P_MLP_DOWN_B: return piece(out, 0, rows, 0, "h.%d.mlp.c_proj.bias", l);
    case USP_P_NORMF_W: return piece(out, 0, rows, 0, "ln_f.weight", l);
    case USP_P_NORMF_B: return piece(out, 0, rows, 0, "ln_f.bias", l);
    case USP_P_LM_HEAD: return piece(out, 0, rows, 0, "lm_head.weight", l);
    default: return 0;
    }
}

static int llama_pieces(const usp_model_config *c, const usp_param_tensor *p, hf_piece *out)
{
    int l = p->layer;
    int64_t rows = p->shape[0], D = c->d_model / c->n_head, qd = c->n_head * D, kd = c->n_kv_head * D;
    switch (p->kind) {
    case USP_P_WTE: return piece(out, 0, rows, 0, "model.embed_tokens.weight", l);
    case USP_P_NORM1_W: return piece(out, 0, rows, 0, "model.layers.%d.input_layernorm.weight", l);
    case USP_P_QKV_W:
        piece(&out[0], 0, qd, 0, "model.layers.%d.self_attn.q_proj.weight", l);
        piece(&out[1], qd, qd + kd, 0, "model.layers.%d.self_attn.k_proj.weight", l);
        piece(&out[2], qd + kd, qd + 2 * kd, 0, "model.layers.%d.self_attn.v_proj.weight", l);
        return 3;
    case USP_P_QKV_B:
        piece(&out[0], 0, qd, 0, "model.layers.%d.self_attn.q_proj.bias", l);
        piece(&out[1], qd, qd + kd, 0, "model.layers.%d.self_attn.k_proj.bias", l);
        piece(&out[2], qd + kd, qd + 2 * kd, 0, "model.layers.%d.self_attn.v_proj.bias", l);
        return 3;
    case USP_P_ATTN_O_W: return piece(out, 0, rows, 0, "model.layers.%d.self_attn.o_proj.weight", l);
    case USP_P_NORM2_W: return piece(out, 0, rows, 0, "model.layers.%d.post_attention_layernorm.weight", l);
    case USP_P_MLP_UP_W:
        piece(&out[0], 0, c->d_ff, 0, "model.layers.%d.mlp.gate_proj.weight", l);
        piece(&out[1], c->d_ff, 2 * c->d_ff, 0, "model.layers.%d.mlp.up_proj.weight", l);
        return 2;
    case USP_P_MLP_DOWN_W: return piece(out, 0, rows, 0, "model.layers.%d.mlp.down_proj.weight", l);
    case USP_P_NORMF_W: return piece(out, 0, rows, 0, "model.norm.weight", l);
    case USP_P_LM_HEAD: return piece(out, 0, rows, 0, "lm_head.weight", l);
    default: return 0;
    }
}

/* The Hugging Face tensors of our tensor p (at most 3). */
static int hf_pieces(const usp_model_config *c, const usp_param_tensor *p, hf_piece out[3])
{
    return c->family == USP_FAMILY_GPT2 ? gpt2_pieces(p, out) : llama_pieces(c, p, out);
}

/* Shape of a piece as Hugging Face stores it. */
static int piece_shape(const usp_param_tensor *p, const hf_piece *h, int64_t shape[2])
{
    int64_t rows = h->row1 - h->row0, cols = p->ndim == 2 ? p->shape[1] : 0;
    if (p->ndim == 1) {
        shape[0] = rows;
        return 1;
    }
    shape[0] = h->transpose ? cols : rows;
    shape[1] = h->transpose ? rows : cols;
    return 2;
}

/* Copies between our tensor's rows and a piece's storage (to_hf: ours -> hf). */
static void convert(const usp_param_tensor *p, const hf_piece *h, float *ours, float *hf, int to_hf)
{
    int64_t cols = p->ndim == 2 ? p->shape[1] : 1, rows = h->row1 - h->row0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < cols; k++) {
            float *o = ours + (h->row0 + r) * cols + k, *x = hf + (h->transpose ? k * rows + r : r * cols + k);
            if (to_hf)
                *x = *o;
            else
                *o = *x;
        }
}

static usp_status make_dir(const char *dir)
{
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return usp_error(USP_ERR_RUNTIME, "--save %s: cannot create the directory: %s", dir, strerror(errno));
    return USP_OK;
}

static usp_status save_weights(const char *path, const usp_model_config *c, const usp_param_table *t,
                               const float *params)
{
    usp_st_entry *entries = calloc((size_t)t->n * 3, sizeof *entries);
    hf_piece *pieces = calloc((size_t)t->n * 3, sizeof *pieces);
    float *copy = malloc((size_t)t->total * sizeof *copy);
    usp_status s = USP_OK;
    if (!entries || !pieces || !copy)
        s = usp_error(USP_ERR_RUNTIME, "out of memory writing %s", path);
    size_t n = 0;
    int64_t at = 0; /* pieces laid out one after another in `copy` */
    for (int i = 0; i < t->n && s == USP_OK; i++) {
        const usp_param_tensor *p = &t->tensors[i];
        int k = hf_pieces(c, p, pieces + n);
        for (int j = 0; j < k; j++, n++) {
            usp_st_entry *e = &entries[n];
            e->name = pieces[n].name;
            e->ndim = piece_shape(p, &pieces[n], e->shape);
            e->data = copy + at;
            convert(p, &pieces[n], (float *)params + p->offset, copy + at, 1);
            at += (pieces[n].row1 - pieces[n].row0) * (p->ndim == 2 ? p->shape[1] : 1);
        }
    }
    if (s == USP_OK)
        s = usp_safetensors_write(path, entries, n, NULL);
    free(entries), free(pieces), free(copy);
    return s;
}

usp_status usp_checkpoint_save(const char *dir, const usp_model_config *c, const usp_param_table *t,
                               const float *params, const float *adam_m, const float *adam_v, int64_t step,
                               uint64_t seed)
{
    USP_CHECK(make_dir(dir));
    char path[1024], meta[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    USP_CHECK(save_weights(path, c, t, params));
    snprintf(path, sizeof path, "%s/config.json", dir);
    USP_CHECK(usp_model_config_write_hf_json(c, path));
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    snprintf(meta, sizeof meta, "{\"format\": \"pt\", \"usp\": \"optimizer-1\", \"step\": \"%lld\", \"seed\": \"%llu\"}",
             (long long)step, (unsigned long long)seed);
    usp_st_entry moments[2] = {{.name = "adam_m", .ndim = 1, .shape = {t->total}, .data = adam_m},
                               {.name = "adam_v", .ndim = 1, .shape = {t->total}, .data = adam_v}};
    return usp_safetensors_write(path, moments, 2, meta);
}

/* The tensor `name` of st (also under GPT-2's "transformer." prefix) with the expected shape. */
static usp_status find_piece(const usp_safetensors *st, const char *name, int ndim, const int64_t *shape,
                             const usp_st_tensor **out)
{
    char prefixed[USP_ST_NAME_MAX + 16];
    snprintf(prefixed, sizeof prefixed, "transformer.%.*s", USP_ST_NAME_MAX - 1, name);
    const usp_st_tensor *x = usp_safetensors_find(st, name);
    if (!x)
        x = usp_safetensors_find(st, prefixed);
    if (!x)
        return usp_error(USP_ERR_CONFIG, "%s: tensor %s is missing (the model config expects it)", st->path, name);
    int same = x->ndim == ndim;
    for (int d = 0; same && d < ndim; d++)
        same = x->shape[d] == shape[d];
    if (!same) {
        char got[96] = "", want[64] = "";
        for (int d = 0; d < x->ndim && d < 4; d++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "", (long long)x->shape[d]);
        for (int d = 0; d < ndim; d++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? ", " : "", (long long)shape[d]);
        return usp_error(USP_ERR_CONFIG, "%s: tensor %s has shape [%s], the model config expects [%s]", st->path,
                         name, got, want);
    }
    *out = x;
    return USP_OK;
}

static usp_status load_weights(const char *path, const usp_model_config *c, const usp_param_table *t, float *params)
{
    usp_safetensors st;
    USP_CHECK(usp_safetensors_open(path, &st));
    float *buffer = malloc((size_t)t->total * sizeof *buffer);
    usp_status s = buffer ? USP_OK : usp_error(USP_ERR_RUNTIME, "out of memory reading %s", path);
    for (int i = 0; i < t->n && s == USP_OK; i++) {
        const usp_param_tensor *p = &t->tensors[i];
        hf_piece pieces[3];
        int k = hf_pieces(c, p, pieces);
        for (int j = 0; j < k && s == USP_OK; j++) {
            int64_t shape[2];
            int ndim = piece_shape(p, &pieces[j], shape);
            const usp_st_tensor *x = NULL;
            s = find_piece(&st, pieces[j].name, ndim, shape, &x);
            if (s == USP_OK)
                s = usp_safetensors_read_f32(&st, x, buffer, x->n_elems);
            if (s == USP_OK)
                convert(p, &pieces[j], params + p->offset, buffer, 0);
        }
    }
    free(buffer);
    usp_safetensors_close(&st);
    return s;
}

static usp_status load_optimizer(const char *path, const usp_param_table *t, float *adam_m, float *adam_v,
                                 int64_t *step)
{
    usp_safetensors st;
    USP_CHECK(usp_safetensors_open(path, &st));
    const int64_t shape[1] = {t->total};
    const usp_st_tensor *m = NULL, *v = NULL;
    usp_status s = find_piece(&st, "adam_m", 1, shape, &m);
    if (s == USP_OK) s = find_piece(&st, "adam_v", 1, shape, &v);
    if (s == USP_OK) s = usp_safetensors_read_f32(&st, m, adam_m, t->total);
    if (s == USP_OK) s = usp_safetensors_read_f32(&st, v, adam_v, t->total);
    const char *text = usp_safetensors_metadata_get(&st, "step");
    char *end = NULL;
    long long value = text ? strtoll(text, &end, 10) : -1;
    if (s == USP_OK && (!text || *end || value < 0))
        s = usp_error(USP_ERR_CONFIG, "%s: the metadata has no valid \"step\"", path);
    *step = value;
    usp_safetensors_close(&st);
    return s;
}

usp_status usp_checkpoint_load(const char *dir, const usp_model_config *c, const usp_param_table *t, float *params,
                               float *adam_m, float *adam_v, int64_t *step, int *has_optimizer)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    USP_CHECK(load_weights(path, c, t, params));
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    *has_optimizer = 0;
    *step = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return USP_OK; /* a Hugging Face directory: a fresh optimizer */
    fclose(f);
    USP_CHECK(load_optimizer(path, t, adam_m, adam_v, step));
    *has_optimizer = 1;
    return USP_OK;
}
