/* Hugging Face names and layouts of the parameter table, the manifest, and
 * the checks a load makes before it reads a tensor (see checkpoint.h); the
 * tensors themselves stream in checkpoint_save.c and checkpoint_load.c. */
#include "core/checkpoint/checkpoint_internal.h"

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

#include "core/base/atomic_file.h"
#include "core/checkpoint/safetensors.h"

static int piece(ckpt_piece *out, int64_t row0, int64_t row1, int transpose, const char *fmt, int layer)
{
    snprintf(out->name, sizeof out->name, fmt, layer);
    out->row0 = row0, out->row1 = row1, out->transpose = transpose;
    return 1;
}

static int gpt2_pieces(const usp_param_tensor *p, ckpt_piece *out)
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

static int llama_pieces(const usp_model_config *c, const usp_param_tensor *p, ckpt_piece *out)
{
    int l = p->layer;
    int64_t rows = p->shape[0], D = usp_model_config_head_dim(c), qd = c->n_head * D, kd = c->n_kv_head * D;
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
int ckpt_pieces(const usp_model_config *c, const usp_param_tensor *p, ckpt_piece out[3])
{
    return c->family == USP_FAMILY_GPT2 ? gpt2_pieces(p, out) : llama_pieces(c, p, out);
}

int ckpt_piece_shape(const usp_param_tensor *p, const ckpt_piece *h, int64_t shape[2])
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

int64_t ckpt_first_bad(const float *x, int64_t n, int at_least_zero)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]) || (at_least_zero && x[i] < 0))
            return i;
    return -1;
}

/* The files of a usp checkpoint; the manifest, written last, lists the others. */
static const char *const checkpoint_files[] = {"model.safetensors", "config.json", "optimizer.safetensors"};
enum { N_CHECKPOINT_FILES = 3 };
const char ckpt_manifest_name[] = "usp_checkpoint.json";

static usp_checkpoint_save_hook save_hook;
static void *save_hook_ctx;

void usp_checkpoint_set_save_hook(usp_checkpoint_save_hook hook, void *ctx)
{
    save_hook = hook, save_hook_ctx = ctx;
}

usp_status ckpt_reach(usp_checkpoint_boundary at, const char *dir)
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
    return strcmp(name, ckpt_manifest_name) == 0 || strstr(name, ".tmp.") != NULL;
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

usp_status ckpt_path(char path[PATH_MAX], const char *dir, const char *sep, const char *name)
{
    int n = snprintf(path, PATH_MAX, "%s%s%s", dir, sep, name);
    if (n < 0 || n >= PATH_MAX)
        return usp_error(USP_ERR_CONFIG, "checkpoint %s: %s%s%s is %d characters, over the %d of PATH_MAX: name a "
                         "directory with a shorter path", dir, dir, sep, name, n, PATH_MAX);
    return USP_OK;
}

usp_status ckpt_write_manifest(const char *dir, int64_t step)
{
    json_t *files = json_object(), *root = json_object();
    char path[PATH_MAX];
    usp_status s = files && root ? USP_OK : usp_error(USP_ERR_RUNTIME, "out of memory writing %s/%s", dir, ckpt_manifest_name);
    for (int i = 0; i < N_CHECKPOINT_FILES && s == USP_OK; i++) {
        struct stat st;
        if ((s = ckpt_path(path, dir, "/", checkpoint_files[i])) != USP_OK)
            break;
        if (stat(path, &st) != 0)
            s = usp_error(USP_ERR_RUNTIME, "cannot read the size of %s: %s", path, strerror(errno));
        else
            json_object_set_new(files, checkpoint_files[i], json_integer((json_int_t)st.st_size));
    }
    usp_atomic_file f;
    if (s == USP_OK)
        s = ckpt_path(path, dir, "/", ckpt_manifest_name);
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

usp_status ckpt_find(const usp_safetensors *st, const char *name, int ndim, const int64_t *shape,
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

usp_status ckpt_optimizer_fields(const usp_safetensors *st, int64_t *step, int *has_seed, uint64_t *seed)
{
    uint64_t value = 0;
    USP_CHECK(metadata_whole_number(st, "step", INT64_MAX, &value));
    *step = (int64_t)value;
    *has_seed = usp_safetensors_metadata_get(st, "seed") != NULL;
    *seed = 0;
    return *has_seed ? metadata_whole_number(st, "seed", UINT64_MAX, seed) : USP_OK;
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
        if ((s = ckpt_path(path, dir, "/", name)) != USP_OK)
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

usp_status ckpt_check_complete(const char *dir, int *is_usp, int64_t *step)
{
    char manifest[PATH_MAX], optimizer[PATH_MAX], old[PATH_MAX];
    USP_CHECK(ckpt_path(manifest, dir, "/", ckpt_manifest_name));
    USP_CHECK(ckpt_path(optimizer, dir, "/", "optimizer.safetensors"));
    USP_CHECK(ckpt_path(old, dir, USP_ATOMIC_DIR_OLD_SUFFIX, ""));
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

usp_status usp_checkpoint_read_state(const char *dir, usp_checkpoint_state *out)
{
    *out = (usp_checkpoint_state){0};
    int64_t manifest_step;
    USP_CHECK(ckpt_check_complete(dir, &out->is_usp, &manifest_step));
    if (!out->is_usp)
        return USP_OK; /* a Hugging Face directory: step 0, no seed */
    char path[PATH_MAX];
    USP_CHECK(ckpt_path(path, dir, "/", "optimizer.safetensors"));
    usp_safetensors st;
    USP_CHECK(usp_safetensors_open(path, &st));
    usp_status s = ckpt_optimizer_fields(&st, &out->step, &out->has_seed, &out->seed);
    usp_safetensors_close(&st);
    if (s == USP_OK && out->step != manifest_step)
        s = usp_error(USP_ERR_CONFIG, "%s says step %lld, %s/%s says %lld: the files come from different saves",
                      path, (long long)out->step, dir, ckpt_manifest_name, (long long)manifest_step);
    return s;
}
