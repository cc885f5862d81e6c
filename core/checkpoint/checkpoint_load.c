/* A streamed load (see checkpoint.h): every rank opens the files itself and
 * checks every header (each tensor there with its shape, the step and seed)
 * before it reads a number; then it reads, array by array and range by range,
 * only the elements it keeps, converting dtype (F16, BF16) and layout
 * (GPT-2's transposed Conv1D weights, fused pieces) on the way, and checks
 * them as they arrive. Arrays are read in the order weights, m, v, each in
 * file order, so on one rank the first bad number named is the one a read of
 * the whole files would name. */
#include "core/checkpoint/checkpoint_internal.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct loader {
    const char *dir;
    const usp_model_config *c;
    ckpt_arrays *a;
    char weights_path[PATH_MAX], optimizer_path[PATH_MAX];
    usp_safetensors weights, optimizer;
    const usp_st_tensor **found; /* [3 t->n]: piece j of tensor i in the weights file at 3 i + j */
    const usp_st_tensor *moments[2];
    float *row;                  /* one segment of a transposed tensor, as the file stores it */
    int64_t row_elems;
} loader;

/* Checks both files' headers against the config, and the step and seed against the manifest. */
static usp_status open_files(loader *l, int *is_usp, int64_t *step)
{
    const usp_param_table *t = l->a->table;
    int64_t manifest_step;
    USP_CHECK(ckpt_check_complete(l->dir, is_usp, &manifest_step));
    USP_CHECK(ckpt_path(l->weights_path, l->dir, "/", "model.safetensors"));
    USP_CHECK(usp_safetensors_open(l->weights_path, &l->weights));
    USP_CHECK(usp_calloc((void **)&l->found, (size_t)t->n * 3, sizeof *l->found, "checkpoint tensors"));
    for (int i = 0; i < t->n; i++) {
        const usp_param_tensor *p = &t->tensors[i];
        ckpt_piece pieces[3];
        int k = ckpt_pieces(l->c, p, pieces);
        for (int j = 0; j < k; j++) {
            int64_t shape[2];
            int ndim = ckpt_piece_shape(p, &pieces[j], shape);
            USP_CHECK(ckpt_find(&l->weights, pieces[j].name, ndim, shape, &l->found[3 * i + j]));
            if (pieces[j].transpose && pieces[j].row1 - pieces[j].row0 > l->row_elems)
                l->row_elems = pieces[j].row1 - pieces[j].row0;
        }
    }
    USP_CHECK(ckpt_alloc(l->a, &l->row, l->row_elems, "a checkpoint row"));
    if (!*is_usp)
        return USP_OK; /* a Hugging Face directory: a fresh optimizer */
    USP_CHECK(ckpt_path(l->optimizer_path, l->dir, "/", "optimizer.safetensors"));
    USP_CHECK(usp_safetensors_open(l->optimizer_path, &l->optimizer));
    const int64_t shape[1] = {t->total};
    USP_CHECK(ckpt_find(&l->optimizer, "adam_m", 1, shape, &l->moments[0]));
    USP_CHECK(ckpt_find(&l->optimizer, "adam_v", 1, shape, &l->moments[1]));
    int has_seed;
    uint64_t seed; /* read to refuse every file usp_checkpoint_read_state refuses */
    USP_CHECK(ckpt_optimizer_fields(&l->optimizer, step, &has_seed, &seed));
    if (*step != manifest_step)
        return usp_error(USP_ERR_CONFIG, "%s says step %lld, %s/%s says %lld: the files come from different saves",
                         l->optimizer_path, (long long)*step, l->dir, ckpt_manifest_name, (long long)manifest_step);
    return USP_OK;
}

/* Reads elements [first, first + n) of weights tensor x into dst and checks them. */
static usp_status read_checked(loader *l, const usp_st_tensor *x, int64_t first, int64_t n, float *dst)
{
    USP_CHECK(usp_safetensors_read_range_f32(&l->weights, x, first, n, dst));
    int64_t bad = ckpt_first_bad(dst, n, 0);
    if (bad >= 0)
        return usp_error(USP_ERR_CONFIG, "%s: tensor %s holds %g at element %lld: weights must be finite numbers "
                         "(the checkpoint was saved from a diverged run, or damaged since); resume from an earlier "
                         "checkpoint", l->weights_path, x->name, dst[bad], (long long)(first + bad));
    return USP_OK;
}

/* ceil(a / b) for b > 0 and any a. */
static int64_t ceil_div(int64_t a, int64_t b)
{
    return a <= 0 ? -((-a) / b) : (a + b - 1) / b;
}

/* Elements [a, b) of our tensor p (out[0] is element a) from piece h, stored as x: where they lie
 * in h, one contiguous run of the file, or for a transposed piece one run per file row. */
static usp_status read_piece(loader *l, const usp_param_tensor *p, const ckpt_piece *h, const usp_st_tensor *x,
                             int64_t a, int64_t b, float *out)
{
    int64_t cols = ckpt_cols(p), rows = h->row1 - h->row0;
    int64_t lo = a > h->row0 * cols ? a : h->row0 * cols, hi = b < h->row1 * cols ? b : h->row1 * cols;
    if (lo >= hi)
        return USP_OK;
    if (!h->transpose)
        return read_checked(l, x, lo - h->row0 * cols, hi - lo, out + (lo - a));
    for (int64_t col = 0; col < cols; col++) { /* file row `col`: our rows r with lo <= r cols + col < hi */
        int64_t r0 = ceil_div(lo - col, cols), r1 = ceil_div(hi - col, cols);
        r0 = r0 > h->row0 ? r0 : h->row0, r1 = r1 < h->row1 ? r1 : h->row1;
        if (r0 >= r1)
            continue;
        USP_CHECK(read_checked(l, x, col * rows + (r0 - h->row0), r1 - r0, l->row));
        for (int64_t r = r0; r < r1; r++)
            out[r * cols + col - a] = l->row[r - r0];
    }
    return USP_OK;
}

/* Table elements [lo, lo + count) of the weights into dst. */
static usp_status read_weights(loader *l, int64_t lo, int64_t count, float *dst)
{
    const usp_param_table *t = l->a->table;
    for (int i = 0; i < t->n; i++) {
        const usp_param_tensor *p = &t->tensors[i];
        int64_t a = lo > p->offset ? lo - p->offset : 0;
        int64_t b = lo + count < p->offset + p->count ? lo + count - p->offset : p->count;
        if (a >= b)
            continue;
        ckpt_piece pieces[3];
        int k = ckpt_pieces(l->c, p, pieces);
        for (int j = 0; j < k; j++)
            USP_CHECK(read_piece(l, p, &pieces[j], l->found[3 * i + j], a, b, dst + (p->offset + a - lo)));
    }
    return USP_OK;
}

/* Table elements [lo, lo + count) of Adam's m or v into dst. */
static usp_status read_moment(loader *l, usp_param_array which, int64_t lo, int64_t count, float *dst)
{
    int is_v = which == USP_ARRAY_ADAM_V;
    USP_CHECK(usp_safetensors_read_range_f32(&l->optimizer, l->moments[is_v], lo, count, dst));
    int64_t bad = ckpt_first_bad(dst, count, is_v);
    if (bad < 0)
        return USP_OK;
    return usp_error(USP_ERR_CONFIG, "%s: tensor %s holds %g at element %lld: Adam's %s (the file is damaged); resume "
                     "from an earlier checkpoint, or delete %s and the usp_checkpoint.json beside it to load the "
                     "weights with a fresh optimizer", l->optimizer_path, is_v ? "adam_v" : "adam_m", dst[bad],
                     (long long)(lo + bad), is_v ? "second moment, a mean of squared gradients, must be finite and >= 0"
                                                 : "first moment must be finite", l->optimizer_path);
}

/* Every array the checkpoint has, range by range: only the part this rank keeps. */
static usp_status read_arrays(loader *l, int arrays)
{
    ckpt_arrays *a = l->a;
    for (int which = USP_ARRAY_WEIGHTS; which < arrays; which++)
        for (int i = 0; i < ckpt_n_ranges(a); i++) {
            int64_t lo, count;
            float *dst;
            ckpt_held(a, (usp_param_array)which, i, &lo, &count);
            if (count == 0)
                continue;
            USP_CHECK(ckpt_target(a, (usp_param_array)which, lo, count, &dst));
            USP_CHECK(which == USP_ARRAY_WEIGHTS ? read_weights(l, lo, count, dst)
                                                 : read_moment(l, (usp_param_array)which, lo, count, dst));
            USP_CHECK(ckpt_put(a, (usp_param_array)which, lo, count, dst));
        }
    return USP_OK;
}

usp_status ckpt_load(const char *dir, const usp_model_config *c, ckpt_arrays *a, int64_t *step, int *has_optimizer)
{
    loader l = {.dir = dir, .c = c, .a = a};
    int is_usp = 0;
    *step = 0, *has_optimizer = 0;
    /* agreed twice: a bad header anywhere stops every rank before any reads its data */
    usp_status s = ckpt_agree(a, open_files(&l, &is_usp, step));
    if (s == USP_OK)
        s = ckpt_agree(a, read_arrays(&l, is_usp ? 3 : 1));
    *has_optimizer = s == USP_OK && is_usp;
    if (!*has_optimizer)
        *step = 0;
    ckpt_free(a, l.row, l.row_elems);
    free(l.found);
    usp_safetensors_close(&l.weights);
    usp_safetensors_close(&l.optimizer);
    return s;
}

usp_status usp_checkpoint_load(const char *dir, const usp_model_config *c, const usp_param_table *t, float *params,
                               float *adam_m, float *adam_v, int64_t *step, int *has_optimizer)
{
    float *const dst[3] = {params, adam_m, adam_v};
    ckpt_arrays a = ckpt_arrays_host(t, NULL, dst);
    usp_status s = ckpt_load(dir, c, &a, step, has_optimizer);
    ckpt_arrays_done(&a, NULL);
    return s;
}

usp_status usp_checkpoint_load_store(const char *dir, const usp_model_config *c, const usp_param_table *t,
                                     usp_param_store *store, const usp_rank_ctx *ctx, int64_t *step,
                                     int *has_optimizer, usp_checkpoint_stats *stats)
{
    /* zero first: the padding of shards is never read from the files */
    for (int which = USP_ARRAY_WEIGHTS; which <= USP_ARRAY_ADAM_V; which++)
        USP_CHECK(usp_param_store_zero(store, (usp_param_array)which));
    ckpt_arrays a = ckpt_arrays_store(t, store, ctx);
    usp_status s = ckpt_load(dir, c, &a, step, has_optimizer);
    ckpt_arrays_done(&a, stats);
    return s;
}
