/* A streamed save (see checkpoint.h): every rank walks the arrays range by
 * range (the store's buckets), joining the gathers of sharded ones; world
 * rank 0 alone converts each range to the Hugging Face layout, checks it and
 * appends it to the file being written, whose header came first from the
 * shapes alone. Data goes out in table order, which is file order: a tensor's
 * pieces are contiguous in the table and written one after another, and the
 * optimizer file is all of adam_m, then all of adam_v. So the bytes are those
 * a save of the whole arrays at once would write. */
#include "core/checkpoint/checkpoint_internal.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/base/atomic_file.h"

/* Rank 0's side: the new directory and the file being filled. */
typedef struct saver {
    const char *dir;
    const usp_model_config *c;
    ckpt_arrays *a;
    int64_t step;
    uint64_t seed;
    int keep;          /* checkpoints kept: DIR and the newest keep - 1 DIR-step-N (ckpt_keep_replaced) */
    usp_atomic_dir d;
    int dir_open, file_open;
    usp_st_writer w;
    float *row;        /* one row of a transposed tensor as the file stores it (one column of ours) */
    int64_t row_elems;
} saver;

/* Opens model.safetensors with the header of every piece, and sizes the row buffer. */
static usp_status open_weights(saver *v)
{
    const usp_param_table *t = v->a->table;
    usp_st_entry *entries = NULL;
    ckpt_piece *pieces = NULL;
    char path[PATH_MAX];
    usp_status s = usp_calloc((void **)&entries, (size_t)t->n * 3, sizeof *entries, "checkpoint entries");
    if (s == USP_OK)
        s = usp_calloc((void **)&pieces, (size_t)t->n * 3, sizeof *pieces, "checkpoint entries");
    size_t n = 0;
    for (int i = 0; i < t->n && s == USP_OK; i++) {
        const usp_param_tensor *p = &t->tensors[i];
        int k = ckpt_pieces(v->c, p, pieces + n);
        for (int j = 0; j < k; j++, n++) {
            entries[n].name = pieces[n].name;
            entries[n].ndim = ckpt_piece_shape(p, &pieces[n], entries[n].shape);
            int64_t rows = pieces[n].row1 - pieces[n].row0;
            if (pieces[n].transpose && rows > v->row_elems)
                v->row_elems = rows;
        }
    }
    if (s == USP_OK)
        s = ckpt_path(path, v->d.tmp_path, "/", "model.safetensors");
    if (s == USP_OK)
        s = usp_st_writer_open(&v->w, path, entries, n, NULL);
    v->file_open = s == USP_OK;
    if (s == USP_OK)
        s = ckpt_alloc(v->a, &v->row, v->row_elems, "a checkpoint row");
    free(entries), free(pieces);
    return s;
}

static usp_status begin(saver *v)
{
    USP_CHECK(usp_checkpoint_check_save_dir(v->dir));
    USP_CHECK(usp_atomic_dir_open(&v->d, v->dir));
    v->dir_open = 1;
    USP_CHECK(ckpt_reach(USP_CKPT_DIR_CREATED, v->dir));
    return open_weights(v);
}

/* Defence in depth behind the trainer's stop on a non-finite loss or gradient norm: a checkpoint
 * of non-finite weights would be refused by the load anyway, and would replace a good one. The
 * element is numbered as the file would hold it. */
static usp_status refuse_bad_weight(const saver *v, const usp_param_tensor *p, const float *ours)
{
    int64_t bad = ckpt_first_bad(ours, p->count, 0);
    if (bad < 0)
        return USP_OK;
    ckpt_piece pieces[3];
    int k = ckpt_pieces(v->c, p, pieces), j = 0;
    int64_t cols = ckpt_cols(p), row = bad / cols, col = bad % cols;
    while (j + 1 < k && row >= pieces[j].row1)
        j++;
    int64_t rows = pieces[j].row1 - pieces[j].row0, r = row - pieces[j].row0;
    return usp_error(USP_ERR_RUNTIME, "--save %s: tensor %s holds %g at element %lld: a checkpoint of non-finite "
                     "weights is not written (the training diverged: lower --lr); %s is left as it was", v->dir,
                     pieces[j].name, ours[bad], (long long)(pieces[j].transpose ? col * rows + r : r * cols + col),
                     v->dir);
}

/* Appends the tensors of table range [start, start + len) (data: its weights) in the Hugging Face layout. */
static usp_status put_weights(saver *v, int64_t start, int64_t len, const float *data)
{
    const usp_param_table *t = v->a->table;
    for (int i = 0; i < t->n; i++) {
        const usp_param_tensor *p = &t->tensors[i];
        if (p->offset < start || p->offset >= start + len)
            continue;
        const float *ours = data + (p->offset - start);
        USP_CHECK(refuse_bad_weight(v, p, ours));
        ckpt_piece pieces[3];
        int k = ckpt_pieces(v->c, p, pieces);
        int64_t cols = ckpt_cols(p);
        for (int j = 0; j < k; j++) {
            int64_t row0 = pieces[j].row0, rows = pieces[j].row1 - row0;
            if (!pieces[j].transpose) {
                USP_CHECK(usp_st_writer_put(&v->w, ours + row0 * cols, (size_t)(rows * cols)));
                continue;
            }
            for (int64_t col = 0; col < cols; col++) { /* the file's row `col` is our column */
                for (int64_t r = 0; r < rows; r++)
                    v->row[r] = ours[(row0 + r) * cols + col];
                USP_CHECK(usp_st_writer_put(&v->w, v->row, (size_t)rows));
            }
        }
    }
    return USP_OK;
}

/* Appends range [start, start + len) of Adam's m or v. Adam's m is a running mean of gradients,
 * v of their squares: finite, and v >= 0 (a negative v reaches a square root in every step). */
static usp_status put_moment(saver *v, usp_param_array which, int64_t start, int64_t len, const float *data)
{
    int is_v = which == USP_ARRAY_ADAM_V;
    int64_t bad = ckpt_first_bad(data, len, is_v);
    if (bad >= 0)
        return usp_error(USP_ERR_RUNTIME, "--save %s: tensor %s holds %g at element %lld: Adam's m must be finite and "
                         "its v finite and >= 0; the checkpoint is not written and %s is left as it was", v->dir,
                         is_v ? "adam_v" : "adam_m", data[bad], (long long)(start + bad), v->dir);
    return usp_st_writer_put(&v->w, data, (size_t)len);
}

/* optimizer.safetensors: adam_m and adam_v whole, the step and seed in its metadata. */
static usp_status open_optimizer(saver *v)
{
    char path[PATH_MAX], meta[256]; /* meta: two numbers in a fixed text, at most 120 characters */
    USP_CHECK(ckpt_path(path, v->d.tmp_path, "/", "optimizer.safetensors"));
    snprintf(meta, sizeof meta, "{\"format\": \"pt\", \"usp\": \"optimizer-1\", \"step\": \"%lld\", \"seed\": \"%llu\"}",
             (long long)v->step, (unsigned long long)v->seed);
    const int64_t total = v->a->table->total;
    usp_st_entry moments[2] = {{.name = "adam_m", .ndim = 1, .shape = {total}},
                               {.name = "adam_v", .ndim = 1, .shape = {total}}};
    USP_CHECK(usp_st_writer_open(&v->w, path, moments, 2, meta));
    v->file_open = 1;
    return USP_OK;
}

static usp_status commit_file(saver *v)
{
    v->file_open = 0;
    return usp_st_writer_commit(&v->w);
}

/* What follows the last range of an array: the files after it, the hooks between them, the
 * manifest last and the swap. */
static usp_status end_array(saver *v, usp_param_array which)
{
    char path[PATH_MAX];
    if (which == USP_ARRAY_WEIGHTS) {
        USP_CHECK(commit_file(v));
        USP_CHECK(ckpt_reach(USP_CKPT_WEIGHTS_WRITTEN, v->dir));
        USP_CHECK(ckpt_path(path, v->d.tmp_path, "/", "config.json"));
        USP_CHECK(usp_model_config_write_hf_json(v->c, path));
        USP_CHECK(ckpt_reach(USP_CKPT_CONFIG_WRITTEN, v->dir));
        return open_optimizer(v);
    }
    if (which == USP_ARRAY_ADAM_M)
        return USP_OK; /* adam_v follows in the same file */
    USP_CHECK(commit_file(v));
    USP_CHECK(ckpt_reach(USP_CKPT_OPTIMIZER_WRITTEN, v->dir));
    USP_CHECK(ckpt_write_manifest(v->d.tmp_path, v->step));
    USP_CHECK(ckpt_reach(USP_CKPT_MANIFEST_WRITTEN, v->dir));
    USP_CHECK(usp_atomic_dir_commit(&v->d));
    USP_CHECK(ckpt_reach(USP_CKPT_SWAPPED, v->dir));
    return ckpt_keep_replaced(&v->d, v->dir, v->keep);
}

/* Removes the unfinished file and directory after a failure, or the replaced old directory. */
static void finish(saver *v)
{
    if (v->file_open)
        usp_st_writer_abort(&v->w);
    if (v->dir_open)
        usp_atomic_dir_close(&v->d);
    ckpt_free(v->a, v->row, v->row_elems);
}

usp_status ckpt_save(const char *dir, const usp_model_config *c, ckpt_arrays *a, int64_t step, uint64_t seed,
                     int keep)
{
    saver v = {.dir = dir, .c = c, .a = a, .step = step, .seed = seed, .keep = keep};
    const int writer = ckpt_rank(a) == 0;
    usp_status s = ckpt_agree(a, writer ? begin(&v) : USP_OK);
    for (int which = USP_ARRAY_WEIGHTS; which <= USP_ARRAY_ADAM_V && s == USP_OK; which++) {
        for (int i = 0; i < ckpt_n_ranges(a) && s == USP_OK; i++) {
            int64_t start, len;
            ckpt_range(a, i, &start, &len);
            const float *data = NULL;
            usp_status mine = ckpt_fetch(a, (usp_param_array)which, i, writer ? &data : NULL);
            if (mine == USP_OK && writer)
                mine = which == USP_ARRAY_WEIGHTS ? put_weights(&v, start, len, data)
                                                  : put_moment(&v, (usp_param_array)which, start, len, data);
            s = ckpt_agree(a, mine);
        }
        if (s == USP_OK)
            s = ckpt_agree(a, writer ? end_array(&v, (usp_param_array)which) : USP_OK);
    }
    if (writer)
        finish(&v);
    return s;
}

usp_status usp_checkpoint_save(const char *dir, const usp_model_config *c, const usp_param_table *t,
                               const float *params, const float *adam_m, const float *adam_v, int64_t step,
                               uint64_t seed)
{
    const float *const src[3] = {params, adam_m, adam_v};
    ckpt_arrays a = ckpt_arrays_host(t, src, NULL);
    usp_status s = ckpt_save(dir, c, &a, step, seed, 1);
    ckpt_arrays_done(&a, NULL);
    return s;
}

usp_status usp_checkpoint_save_store(const char *dir, const usp_model_config *c, const usp_param_table *t,
                                     usp_param_store *store, const usp_rank_ctx *ctx, int64_t step, uint64_t seed,
                                     int keep, usp_checkpoint_stats *stats)
{
    ckpt_arrays a = ckpt_arrays_store(t, store, ctx);
    usp_status s = ckpt_save(dir, c, &a, step, seed, keep);
    ckpt_arrays_done(&a, stats);
    return s;
}
