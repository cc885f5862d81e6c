/* What the checkpoint files share (checkpoint.c: names, layouts, manifest and
 * checks; checkpoint_arrays.c: where the numbers come from and go;
 * checkpoint_save.c and checkpoint_load.c: the streams). Not a public header. */
#ifndef USP_CHECKPOINT_INTERNAL_H
#define USP_CHECKPOINT_INTERNAL_H

#include <limits.h>
#include <stdint.h>

#include "core/base/atomic_file.h"
#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/safetensors.h"

/* One Hugging Face tensor: rows [row0, row1) of one of our [rows, cols]
 * tensors, stored transposed ([cols, rows]) for GPT-2's Conv1D weights. */
typedef struct ckpt_piece {
    char name[96];
    int64_t row0, row1;
    int transpose;
} ckpt_piece;

/* The Hugging Face tensors of our tensor p (at most 3), in file order. */
int ckpt_pieces(const usp_model_config *c, const usp_param_tensor *p, ckpt_piece out[3]);

/* Shape of a piece as Hugging Face stores it; returns its ndim. */
int ckpt_piece_shape(const usp_param_tensor *p, const ckpt_piece *h, int64_t shape[2]);

/* Columns of our tensor p (1 for a vector). */
static inline int64_t ckpt_cols(const usp_param_tensor *p) { return p->ndim == 2 ? p->shape[1] : 1; }

/* The first element of x[0, n) that is NaN or infinite, or (with at_least_zero) below 0; -1 when
 * there is none. NaN and Inf pass through every kernel and every save silently, so they are
 * stopped at the files, as each part is written or read. */
int64_t ckpt_first_bad(const float *x, int64_t n, int at_least_zero);

/* dir, sep and name into path[PATH_MAX]: a path the OS could not open is refused, never cut to another name. */
usp_status ckpt_path(char path[PATH_MAX], const char *dir, const char *sep, const char *name);

/* Calls the test's save hook at `at` (a non-zero return is the save's failure there). */
usp_status ckpt_reach(usp_checkpoint_boundary at, const char *dir);

/* DIR/usp_checkpoint.json: the step and the size of each file, which the loader checks. */
usp_status ckpt_write_manifest(const char *dir, int64_t step);

/* Whether DIR is a complete usp checkpoint (*is_usp = 1, with the manifest's step) or a
 * Hugging Face directory (*is_usp = 0); anything between is refused, naming what is missing. */
usp_status ckpt_check_complete(const char *dir, int *is_usp, int64_t *step);

/* The tensor `name` of st (also under GPT-2's "transformer." prefix) with the expected shape. */
usp_status ckpt_find(const usp_safetensors *st, const char *name, int ndim, const int64_t *shape,
                     const usp_st_tensor **out);

/* The step and seed of optimizer.safetensors; a file without "seed" (not written by usp) has_seed = 0. */
usp_status ckpt_optimizer_fields(const usp_safetensors *st, int64_t *step, int *has_seed, uint64_t *seed);

extern const char ckpt_manifest_name[];

/* Where a save reads the arrays (weights, Adam m, Adam v) and a load puts them:
 * a parameter store, whole or sharded, on every rank of `ctx` (each save or load
 * a collective of the world), or whole host arrays on one rank (ctx NULL). The
 * table is walked in ranges: the store's buckets, or the host arrays whole. */
typedef struct ckpt_arrays {
    const usp_param_table *table;
    usp_param_store *store;     /* NULL: host arrays */
    const usp_rank_ctx *ctx;    /* NULL: one rank */
    const float *src[3];        /* host arrays a save reads */
    float *dst[3];              /* host arrays a load fills */
    float *buffer;              /* the store's bucket on its way to or from the host */
    int64_t buffer_elems;
    double *flag;               /* backend: the agreement's one number */
    char *message;              /* backend: the failing rank's message, while it is broadcast */
    size_t host_bytes, host_bytes_peak; /* host memory the save or load holds, now and at most */
} ckpt_arrays;

/* Host arrays of one rank (save: src; load: dst; the other NULL). */
ckpt_arrays ckpt_arrays_host(const usp_param_table *t, const float *const src[3], float *const dst[3]);

/* A store on every rank of ctx. */
ckpt_arrays ckpt_arrays_store(const usp_param_table *t, usp_param_store *store, const usp_rank_ctx *ctx);

/* Frees what the arrays allocated; reports the host peak into stats (NULL: not wanted). */
void ckpt_arrays_done(ckpt_arrays *a, usp_checkpoint_stats *stats);

/* This rank's place in the world (0 alone). */
int ckpt_rank(const ckpt_arrays *a);

/* The number of ranges the table is walked in (buckets, or 1 for host arrays). */
int ckpt_n_ranges(const ckpt_arrays *a);

/* Range i of the table: [*start, *start + *len). */
void ckpt_range(const ckpt_arrays *a, int i, int64_t *start, int64_t *len);

/* Range i of array `which`, on every rank (a collective when the store shards it): *data, when
 * data is not NULL, points at its len floats until the next call. */
usp_status ckpt_fetch(ckpt_arrays *a, usp_param_array which, int i, const float **data);

/* The part of range i of `which` this rank keeps: [*lo, *lo + *count) of the table. */
void ckpt_held(const ckpt_arrays *a, usp_param_array which, int i, int64_t *lo, int64_t *count);

/* Where a load reads elements [lo, lo + count) of `which` (a held part) to: the host array, or the buffer. */
usp_status ckpt_target(ckpt_arrays *a, usp_param_array which, int64_t lo, int64_t count, float **out);

/* Keeps what a load read to ckpt_target's place (into the store; host arrays hold it already). */
usp_status ckpt_put(ckpt_arrays *a, usp_param_array which, int64_t lo, int64_t count, const float *data);

/* Host memory for the stream, counted in the peak (elems 0: *p NULL). */
usp_status ckpt_alloc(ckpt_arrays *a, float **p, int64_t elems, const char *what);

/* Gives back what ckpt_alloc gave (NULL: nothing). */
void ckpt_free(ckpt_arrays *a, float *p, int64_t elems);

/* Every rank's `mine` in, one status out, the same on every rank: OK when all are, else the
 * status and message of the lowest failing rank (a collective: every rank calls it the same
 * number of times, so a failure on one rank never leaves the others waiting in a later one). */
usp_status ckpt_agree(ckpt_arrays *a, usp_status mine);

/* The streamed save, on every rank of a (checkpoint_save.c). */
usp_status ckpt_save(const char *dir, const usp_model_config *c, ckpt_arrays *a, int64_t step, uint64_t seed,
                     int keep);

/* After DIR was swapped for the new checkpoint (d->tmp_path: the replaced one): with keep >= 2, a replaced
 * usp checkpoint of step N is kept as DIR-step-N, and of the DIR-step-* beside DIR the newest keep - 1
 * stay; with keep < 2, or a replaced directory that is no usp checkpoint, nothing is kept. */
usp_status ckpt_keep_replaced(usp_atomic_dir *d, const char *dir, int keep);

/* The streamed load, on every rank of a (checkpoint_load.c). */
usp_status ckpt_load(const char *dir, const usp_model_config *c, ckpt_arrays *a, int64_t *step, int *has_optimizer);

#endif
