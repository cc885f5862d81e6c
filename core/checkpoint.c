/* Hugging Face names and layouts of the parameter table (see checkpoint.h). */
#include "core/checkpoint.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/atomic_file.h"
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

/* The first element of x[0, n) that is NaN or infinite, or (with at_least_zero) below 0; -1 when
 * there is none. One pass over a host copy, made as it is read or written: NaN and Inf pass
 * through every kernel and every save silently, so they are stopped at the files. */
static int64_t first_bad_element(const float *x, int64_t n, int at_least_zero)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]) || (at_least_zero && x[i] < 0))
            return i;
    return -1;
}

/* Adam's m is a running mean of gradients, v of their squares: finite, and v >= 0 (a negative v
 * reaches a square root in every AdamW step). The first element that is not, in adam_m
 * (*is_v = 0) or adam_v (*is_v = 1); -1 when there is none. */
static int64_t first_bad_moment(const float *adam_m, const float *adam_v, int64_t n, int *is_v)
{
    int64_t bad = first_bad_element(adam_m, n, 0);
    *is_v = bad < 0;
    return *is_v ? first_bad_element(adam_v, n, 1) : bad;
}

/* The files of a usp checkpoint; the manifest, written last, lists the others. */
static const char *const checkpoint_files[] = {"model.safetensors", "config.json", "optimizer.safetensors"};
enum { N_CHECKPOINT_FILES = 3 };
static const char manifest_name[] = "usp_checkpoint.json";

static usp_checkpoint_save_hook save_hook;
static void *save_hook_ctx;

void usp_checkpoint_set_save_hook(usp_checkpoint_save_hook hook, void *ctx)
{
    save_hook = hook, save_hook_ctx = ctx;
}

static usp_status reach(usp_checkpoint_boundary at, const char *dir)
{
    if (save_hook && save_hook(at, save_hook_ctx))
        return usp_error(USP_ERR_RUNTIME, "--save %s: stopped by the test hook at boundary %d", dir, (int)at);
    return USP_OK;
}

static int is_checkpoint_file(const char *name)
{
    for (int i = 0; i < N_CHECKPOINT_FILES; i++)
        if (strcmp(name, checkpoint_files[i]) == 0)
            return 1;
    /* the manifest, and a temporary file an older usp's killed save left */
    return strcmp(name, manifest_name) == 0 || strstr(name, ".tmp.") != NULL;
}

usp_status usp_checkpoint_check_save_dir(const char *dir)
{
    DIR *h = opendir(dir);
    if (!h)
        return USP_OK; /* missing (a fresh save) or not a directory (usp_atomic_dir_open says so) */
    usp_status s = USP_OK;
    for (struct dirent *e; s == USP_OK && (e = readdir(h)) != NULL;)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 && !is_checkpoint_file(e->d_name))
            s = usp_error(USP_ERR_CONFIG, "--save %s: the directory holds %s, which is not part of a checkpoint, and "
                          "a save replaces the whole directory: save into a new or empty directory", dir, e->d_name);
    closedir(h);
    return s;
}

/* dir, sep and name into path[PATH_MAX]: a path the OS could not open is refused, never cut to another name. */
static usp_status checkpoint_path(char path[PATH_MAX], const char *dir, const char *sep, const char *name)
{
    int n = snprintf(path, PATH_MAX, "%s%s%s", dir, sep, name);
    if (n < 0 || n >= PATH_MAX)
        return usp_error(USP_ERR_CONFIG, "checkpoint %s: %s%s%s is %d characters, over the %d of PATH_MAX: name a "
                         "directory with a shorter path", dir, dir, sep, name, n, PATH_MAX);
    return USP_OK;
}

/* DIR/usp_checkpoint.json: the step and the size of each file, which the loader checks. */
static usp_status write_manifest(const char *dir, int64_t step)
{
    json_t *files = json_object(), *root = json_object();
    char path[PATH_MAX];
    usp_status s = files && root ? USP_OK : usp_error(USP_ERR_RUNTIME, "out of memory writing %s/%s", dir, manifest_name);
    for (int i = 0; i < N_CHECKPOINT_FILES && s == USP_OK; i++) {
        struct stat st;
        if ((s = checkpoint_path(path, dir, "/", checkpoint_files[i])) != USP_OK)
            break;
        if (stat(path, &st) != 0)
            s = usp_error(USP_ERR_RUNTIME, "cannot read the size of %s: %s", path, strerror(errno));
        else
            json_object_set_new(files, checkpoint_files[i], json_integer((json_int_t)st.st_size));
    }
    usp_atomic_file f;
    if (s == USP_OK)
        s = checkpoint_path(path, dir, "/", manifest_name);
    if (s == USP_OK) {
        json_object_set_new(root, "usp_checkpoint", json_integer(1));
        json_object_set_new(root, "step", json_integer((json_int_t)step));
        json_object_set(root, "files", files);
        s = usp_atomic_file_open(&f, path);
    }
    if (s == USP_OK && (json_dumpf(root, f.fp, JSON_INDENT(2)) != 0 || fputc('\n', f.fp) == EOF)) {
        usp_atomic_file_abort(&f);
        s = usp_error(USP_ERR_RUNTIME, "cannot write %s", path);
    } else if (s == USP_OK) {
        s = usp_atomic_file_commit(&f);
    }
    json_decref(files), json_decref(root);
    return s;
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

/* Writes the checkpoint's files into `tmp`, the manifest last. */
static usp_status write_files(const char *tmp, const char *dir, const usp_model_config *c, const usp_param_table *t,
                              const float *params, const float *adam_m, const float *adam_v, int64_t step,
                              uint64_t seed)
{
    char path[PATH_MAX], meta[256]; /* meta: two numbers in a fixed text, at most 120 characters */
    USP_CHECK(reach(USP_CKPT_DIR_CREATED, dir));
    USP_CHECK(checkpoint_path(path, tmp, "/", "model.safetensors"));
    USP_CHECK(save_weights(path, c, t, params));
    USP_CHECK(reach(USP_CKPT_WEIGHTS_WRITTEN, dir));
    USP_CHECK(checkpoint_path(path, tmp, "/", "config.json"));
    USP_CHECK(usp_model_config_write_hf_json(c, path));
    USP_CHECK(reach(USP_CKPT_CONFIG_WRITTEN, dir));
    USP_CHECK(checkpoint_path(path, tmp, "/", "optimizer.safetensors"));
    snprintf(meta, sizeof meta, "{\"format\": \"pt\", \"usp\": \"optimizer-1\", \"step\": \"%lld\", \"seed\": \"%llu\"}",
             (long long)step, (unsigned long long)seed);
    usp_st_entry moments[2] = {{.name = "adam_m", .ndim = 1, .shape = {t->total}, .data = adam_m},
                               {.name = "adam_v", .ndim = 1, .shape = {t->total}, .data = adam_v}};
    USP_CHECK(usp_safetensors_write(path, moments, 2, meta));
    USP_CHECK(reach(USP_CKPT_OPTIMIZER_WRITTEN, dir));
    USP_CHECK(write_manifest(tmp, step));
    return reach(USP_CKPT_MANIFEST_WRITTEN, dir);
}

/* Defence in depth behind the trainer's stop on a non-finite loss or gradient norm: a checkpoint
 * of non-finite weights (or moments, or a negative v) would be refused by the load anyway, and
 * would replace a good one. Element indices are those of the tensor as the file would hold it. */
static usp_status refuse_bad_save(const char *dir, const usp_model_config *c, const usp_param_table *t,
                                  const float *params, const float *adam_m, const float *adam_v)
{
    for (int i = 0; i < t->n; i++) {
        const usp_param_tensor *p = &t->tensors[i];
        int64_t bad = first_bad_element(params + p->offset, p->count, 0);
        if (bad < 0)
            continue;
        hf_piece pieces[3];
        int k = hf_pieces(c, p, pieces), j = 0;
        int64_t cols = p->ndim == 2 ? p->shape[1] : 1, row = bad / cols, col = bad % cols;
        while (j + 1 < k && row >= pieces[j].row1)
            j++;
        int64_t rows = pieces[j].row1 - pieces[j].row0, r = row - pieces[j].row0;
        return usp_error(USP_ERR_RUNTIME, "--save %s: tensor %s holds %g at element %lld: a checkpoint of non-finite "
                         "weights is not written (the training diverged: lower --lr); %s is left as it was", dir,
                         pieces[j].name, params[p->offset + bad],
                         (long long)(pieces[j].transpose ? col * rows + r : r * cols + col), dir);
    }
    int is_v;
    int64_t bad = first_bad_moment(adam_m, adam_v, t->total, &is_v);
    if (bad >= 0)
        return usp_error(USP_ERR_RUNTIME, "--save %s: tensor %s holds %g at element %lld: Adam's m must be finite and "
                         "its v finite and >= 0; the checkpoint is not written and %s is left as it was", dir,
                         is_v ? "adam_v" : "adam_m", (is_v ? adam_v : adam_m)[bad], (long long)bad, dir);
    return USP_OK;
}

usp_status usp_checkpoint_save(const char *dir, const usp_model_config *c, const usp_param_table *t,
                               const float *params, const float *adam_m, const float *adam_v, int64_t step,
                               uint64_t seed)
{
    USP_CHECK(refuse_bad_save(dir, c, t, params, adam_m, adam_v));
    USP_CHECK(usp_checkpoint_check_save_dir(dir));
    usp_atomic_dir d;
    USP_CHECK(usp_atomic_dir_open(&d, dir));
    usp_status s = write_files(d.tmp_path, dir, c, t, params, adam_m, adam_v, step, seed);
    if (s == USP_OK)
        s = usp_atomic_dir_commit(&d);
    if (s == USP_OK)
        s = reach(USP_CKPT_SWAPPED, dir);
    usp_atomic_dir_close(&d); /* the unfinished new directory, or the replaced old one */
    return s;
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
            int64_t bad = s == USP_OK ? first_bad_element(buffer, x->n_elems, 0) : -1;
            if (bad >= 0)
                s = usp_error(USP_ERR_CONFIG, "%s: tensor %s holds %g at element %lld: weights must be finite numbers "
                              "(the checkpoint was saved from a diverged run, or damaged since); resume from an "
                              "earlier checkpoint", path, x->name, buffer[bad], (long long)bad);
            if (s == USP_OK)
                convert(p, &pieces[j], params + p->offset, buffer, 0);
        }
    }
    free(buffer);
    usp_safetensors_close(&st);
    return s;
}

/* The metadata field `key` of st as a whole number in [0, max]: strtoull alone would take "" as 0,
 * "-1" as 2^64 - 1 and 99999999999999999999 as its largest value. */
static usp_status metadata_whole_number(const usp_safetensors *st, const char *key, uint64_t max, uint64_t *out)
{
    const char *text = usp_safetensors_metadata_get(st, key);
    char *end = NULL;
    errno = 0;
    unsigned long long value = text && isdigit((unsigned char)text[0]) ? strtoull(text, &end, 10) : 0;
    if (!text || !end || *end || errno == ERANGE || value > max)
        return usp_error(USP_ERR_CONFIG, "%s: the metadata field \"%s\" is %s%s%s: expected a whole number from 0 "
                         "to %llu; resume from another checkpoint, or save this one again", st->path, key,
                         text ? "\"" : "", text ? text : "missing", text ? "\"" : "", (unsigned long long)max);
    *out = value;
    return USP_OK;
}

/* The step and seed of optimizer.safetensors; a file without "seed" (not written by usp) has_seed = 0. */
static usp_status read_optimizer_fields(const usp_safetensors *st, int64_t *step, int *has_seed, uint64_t *seed)
{
    uint64_t value = 0;
    USP_CHECK(metadata_whole_number(st, "step", INT64_MAX, &value));
    *step = (int64_t)value;
    *has_seed = usp_safetensors_metadata_get(st, "seed") != NULL;
    *seed = 0;
    return *has_seed ? metadata_whole_number(st, "seed", UINT64_MAX, seed) : USP_OK;
}

/* USP_ERR_CONFIG naming the first element of the moments read from `path` that Adam cannot use. */
static usp_status refuse_bad_moments(const char *path, const float *adam_m, const float *adam_v, int64_t n)
{
    int is_v;
    int64_t bad = first_bad_moment(adam_m, adam_v, n, &is_v);
    if (bad < 0)
        return USP_OK;
    return usp_error(USP_ERR_CONFIG, "%s: tensor %s holds %g at element %lld: Adam's %s (the file is damaged); resume "
                     "from an earlier checkpoint, or delete %s and the usp_checkpoint.json beside it to load the "
                     "weights with a fresh optimizer", path, is_v ? "adam_v" : "adam_m", (is_v ? adam_v : adam_m)[bad],
                     (long long)bad, is_v ? "second moment, a mean of squared gradients, must be finite and >= 0"
                                          : "first moment must be finite", path);
}

static usp_status load_optimizer(const char *path, const usp_param_table *t, float *adam_m, float *adam_v,
                                 int64_t *step)
{
    usp_safetensors st;
    USP_CHECK(usp_safetensors_open(path, &st));
    const int64_t shape[1] = {t->total};
    const usp_st_tensor *m = NULL, *v = NULL;
    int has_seed;
    uint64_t seed;
    usp_status s = find_piece(&st, "adam_m", 1, shape, &m);
    if (s == USP_OK) s = find_piece(&st, "adam_v", 1, shape, &v);
    if (s == USP_OK) s = usp_safetensors_read_f32(&st, m, adam_m, t->total);
    if (s == USP_OK) s = usp_safetensors_read_f32(&st, v, adam_v, t->total);
    if (s == USP_OK) s = refuse_bad_moments(path, adam_m, adam_v, t->total);
    /* the seed too: a load refuses every file usp_checkpoint_read_state refuses */
    if (s == USP_OK) s = read_optimizer_fields(&st, step, &has_seed, &seed);
    usp_safetensors_close(&st);
    return s;
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Checks DIR/usp_checkpoint.json against the files beside it: each listed, each there with its size. */
static usp_status check_manifest(const char *dir, const char *manifest, int64_t *step)
{
    json_error_t error;
    json_t *root = json_load_file(manifest, 0, &error);
    if (!root)
        return usp_error(USP_ERR_CONFIG, "%s: not a usp checkpoint manifest (line %d: %s); save the checkpoint again",
                         manifest, error.line, error.text);
    json_t *files = json_object_get(root, "files"), *at = json_object_get(root, "step");
    usp_status s = USP_OK;
    if (!json_is_object(files) || !json_is_integer(at) || json_integer_value(at) < 0)
        s = usp_error(USP_ERR_CONFIG, "%s: expected an object \"files\" and a field \"step\" that is a whole number "
                      ">= 0; save the checkpoint again", manifest);
    for (int i = 0; i < N_CHECKPOINT_FILES && s == USP_OK; i++) {
        const char *name = checkpoint_files[i];
        json_t *size = json_object_get(files, name);
        char path[PATH_MAX];
        struct stat st;
        if ((s = checkpoint_path(path, dir, "/", name)) != USP_OK)
            break;
        if (!json_is_integer(size))
            s = usp_error(USP_ERR_CONFIG, "%s does not list %s: not a checkpoint this usp wrote; save it again",
                          manifest, name);
        else if (stat(path, &st) != 0)
            s = usp_error(USP_ERR_CONFIG, "checkpoint %s is incomplete: %s, listed in %s, is missing", dir, path,
                          manifest);
        else if ((json_int_t)st.st_size != json_integer_value(size))
            s = usp_error(USP_ERR_CONFIG, "%s has %lld bytes, %s lists %lld: the file was changed after the save",
                          path, (long long)st.st_size, manifest, (long long)json_integer_value(size));
    }
    *step = s == USP_OK ? (int64_t)json_integer_value(at) : 0;
    json_decref(root);
    return s;
}

/* Whether DIR is a complete usp checkpoint (*is_usp = 1, with the manifest's step) or a
 * Hugging Face directory (*is_usp = 0); anything between is refused, naming what is missing. */
static usp_status check_complete(const char *dir, int *is_usp, int64_t *step)
{
    char manifest[PATH_MAX], optimizer[PATH_MAX], old[PATH_MAX];
    USP_CHECK(checkpoint_path(manifest, dir, "/", manifest_name));
    USP_CHECK(checkpoint_path(optimizer, dir, "/", "optimizer.safetensors"));
    USP_CHECK(checkpoint_path(old, dir, USP_ATOMIC_DIR_OLD_SUFFIX, ""));
    *is_usp = 0, *step = 0;
    if (!file_exists(dir) && file_exists(old))
        return usp_error(USP_ERR_CONFIG, "checkpoint %s is missing and %s holds the one a killed save was replacing: "
                         "rename %s to %s, or save again", dir, old, old, dir);
    if (file_exists(manifest)) {
        *is_usp = 1;
        return check_manifest(dir, manifest, step);
    }
    if (file_exists(optimizer))
        return usp_error(USP_ERR_CONFIG, "checkpoint %s is incomplete: %s is missing (a save writes it last, so the save "
                         "did not finish, or an older usp wrote it); resume from another checkpoint, or delete %s to "
                         "load only the weights with a fresh optimizer", dir, manifest, optimizer);
    return USP_OK;
}

usp_status usp_checkpoint_load(const char *dir, const usp_model_config *c, const usp_param_table *t, float *params,
                               float *adam_m, float *adam_v, int64_t *step, int *has_optimizer)
{
    char path[PATH_MAX];
    int is_usp;
    int64_t manifest_step;
    *has_optimizer = 0;
    *step = 0;
    USP_CHECK(check_complete(dir, &is_usp, &manifest_step));
    USP_CHECK(checkpoint_path(path, dir, "/", "model.safetensors"));
    USP_CHECK(load_weights(path, c, t, params));
    if (!is_usp)
        return USP_OK; /* a Hugging Face directory: a fresh optimizer */
    USP_CHECK(checkpoint_path(path, dir, "/", "optimizer.safetensors"));
    USP_CHECK(load_optimizer(path, t, adam_m, adam_v, step));
    if (*step != manifest_step)
        return usp_error(USP_ERR_CONFIG, "%s says step %lld, %s/%s says %lld: the files come from different saves",
                         path, (long long)*step, dir, manifest_name, (long long)manifest_step);
    *has_optimizer = 1;
    return USP_OK;
}

usp_status usp_checkpoint_read_state(const char *dir, usp_checkpoint_state *out)
{
    *out = (usp_checkpoint_state){0};
    int64_t manifest_step;
    USP_CHECK(check_complete(dir, &out->is_usp, &manifest_step));
    if (!out->is_usp)
        return USP_OK; /* a Hugging Face directory: step 0, no seed */
    char path[1024];
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    usp_safetensors st;
    USP_CHECK(usp_safetensors_open(path, &st));
    usp_status s = read_optimizer_fields(&st, &out->step, &out->has_seed, &out->seed);
    usp_safetensors_close(&st);
    if (s == USP_OK && out->step != manifest_step)
        s = usp_error(USP_ERR_CONFIG, "%s says step %lld, %s/%s says %lld: the files come from different saves",
                      path, (long long)out->step, dir, manifest_name, (long long)manifest_step);
    return s;
}
