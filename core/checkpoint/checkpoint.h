/* Room core/checkpoint/: safetensors files (safetensors.h) and checkpoints (this file):
 * names and layouts, a streamed save and load. It may use: model/, runtime/ (rank.h),
 * comm/, core/ (ops), base/.
 *
 * Checkpoints in the Hugging Face layout.
 *
 * `--save DIR` writes DIR/model.safetensors with the tensor names and layouts
 * of the family (GPT-2: wte, wpe, h.N.ln_1, h.N.attn.c_attn, ... with Conv1D
 * weights stored [in, out]; Llama: model.embed_tokens, model.layers.N.self_attn.q_proj,
 * ..., lm_head), DIR/config.json, and usp's own DIR/optimizer.safetensors
 * (Adam moments, step and seed in its metadata), then, last, DIR/usp_checkpoint.json
 * (the manifest: the step and each file's size). The files go into a new
 * directory beside DIR that is swapped in for DIR as a whole (core/base/atomic_file.h),
 * so a save killed at any moment leaves the old checkpoint or the new one.
 * Loading accepts a usp checkpoint only when its manifest lists every file and
 * every file is there; a directory without optimizer.safetensors and without
 * a manifest is a Hugging Face one, as save_pretrained writes it (F32, F16 or
 * BF16): training from it starts a fresh optimizer.
 *
 * Checkpoints stream: no rank ever holds a whole copy of the model. A save
 * (usp_checkpoint_save_store, a collective of every rank) walks the parameter
 * store bucket by bucket (embeddings, each layer, the head), array by array;
 * the ranks gather each bucket's shards and world rank 0 alone converts it to
 * the Hugging Face layout, checks it for non-finite numbers, and appends it to
 * the file, whose header was written first from the shapes alone. A load
 * (usp_checkpoint_load_store) has every rank open the files itself (a shared
 * filesystem, as Hugging Face assumes), check every header, and read from
 * each tensor only the elements its shards hold, a bucket at a time. Host
 * memory is thus one bucket on rank 0 (a save) or one bucket's held part on
 * every rank (a load), plus a row; usp_checkpoint_stats reports it. A failure
 * on any rank (a full disk, a NaN, a damaged file) is agreed after each
 * bucket: every rank returns the status and message of the lowest failing
 * rank, none is left waiting in a collective, and a failed save removes its
 * temporary directory, leaving the old checkpoint. */
#ifndef USP_CHECKPOINT_H
#define USP_CHECKPOINT_H

#include "core/model/model_params.h"
#include "core/model/param_store.h"
#include "core/runtime/rank.h"

/* What a streamed save or load used on this rank. */
typedef struct usp_checkpoint_stats {
    size_t host_bytes_peak; /* the most host memory its buffers held at once (a save's other ranks: 0) */
} usp_checkpoint_stats;

/* Writes the checkpoint directory (created if missing) from the store: a collective of every rank of
 * ctx (world rank 0 writes). A non-finite weight or moment, or a negative v, is USP_ERR_RUNTIME naming
 * the tensor and the element, on every rank: the new directory is removed, DIR left as it was.
 * keep >= 2: the usp checkpoint DIR held (step N) stays as DIR-step-N, and the newest keep - 1 of those
 * (1: none is kept). stats (NULL: not wanted) gets this rank's figures. */
usp_status usp_checkpoint_save_store(const char *dir, const usp_model_config *c, const usp_param_table *t,
                                     usp_param_store *store, const usp_rank_ctx *ctx, int64_t step, uint64_t seed,
                                     int keep, usp_checkpoint_stats *stats);

/* Sets the store's weights (and, from a usp checkpoint, *has_optimizer = 1 with the moments and step;
 * else the moments are zero) from DIR: a collective of every rank of ctx, each reading only what it
 * keeps. The checks and messages of usp_checkpoint_load, on every rank. */
usp_status usp_checkpoint_load_store(const char *dir, const usp_model_config *c, const usp_param_table *t,
                                     usp_param_store *store, const usp_rank_ctx *ctx, int64_t *step,
                                     int *has_optimizer, usp_checkpoint_stats *stats);

/* usp_checkpoint_save_store on one rank, from host arrays of t->total floats (tests and tools). */
usp_status usp_checkpoint_save(const char *dir, const usp_model_config *c, const usp_param_table *t,
                               const float *params, const float *adam_m, const float *adam_v, int64_t step,
                               uint64_t seed);

/* Whether a save may replace `dir` (missing, or holding only checkpoint files): USP_ERR_CONFIG naming the other file. */
usp_status usp_checkpoint_check_save_dir(const char *dir);

/* The moments of a save at which a test can stop it (usp_checkpoint_set_save_hook). */
typedef enum usp_checkpoint_boundary {
    USP_CKPT_DIR_CREATED,      /* the temporary directory exists, empty */
    USP_CKPT_WEIGHTS_WRITTEN,  /* model.safetensors in it */
    USP_CKPT_CONFIG_WRITTEN,   /* config.json too */
    USP_CKPT_OPTIMIZER_WRITTEN, /* optimizer.safetensors too */
    USP_CKPT_MANIFEST_WRITTEN, /* usp_checkpoint.json too: complete, not yet swapped in */
    USP_CKPT_SWAPPED,          /* the new directory is DIR; the old one not yet removed */
    USP_CKPT_BOUNDARIES
} usp_checkpoint_boundary;

/* A test's hook: a non-zero return fails the save there, as a full disk would. */
typedef int (*usp_checkpoint_save_hook)(usp_checkpoint_boundary at, void *ctx);

/* Tests only (one global, not thread-safe): calls hook at each boundary of every save; NULL removes it. */
void usp_checkpoint_set_save_hook(usp_checkpoint_save_hook hook, void *ctx);

/* Reads weights into host arrays of t->total floats (and, when present, *has_optimizer = 1 with the
 * moments and step), on one rank.
 * A missing tensor or a shape that does not match the config is USP_ERR_CONFIG naming the file and the tensor;
 * a NaN or Inf weight or Adam m, or a negative or non-finite Adam v, is USP_ERR_CONFIG naming the file, the tensor,
 * the element and the value;
 * an incomplete usp checkpoint (a file of the manifest missing, or optimizer.safetensors without a
 * manifest) is USP_ERR_CONFIG naming what is missing. */
usp_status usp_checkpoint_load(const char *dir, const usp_model_config *c, const usp_param_table *t, float *params,
                               float *adam_m, float *adam_v, int64_t *step, int *has_optimizer);

/* What a checkpoint says about the run that saved it, read without its tensors. */
typedef struct usp_checkpoint_state {
    int is_usp;       /* a usp checkpoint (manifest, optimizer state); 0: a Hugging Face directory */
    int64_t step;     /* steps done (0 for a Hugging Face directory) */
    int has_seed;     /* the save recorded the run's seed (optimizer.safetensors metadata "seed") */
    uint64_t seed;
} usp_checkpoint_state;

/* Checks that DIR is complete (as usp_checkpoint_load does) and reads its step and seed; a step or seed
 * that is not a whole number in range ("", "-1", "1e3", 99999999999999999999) is USP_ERR_CONFIG naming
 * the file and the field. */
usp_status usp_checkpoint_read_state(const char *dir, usp_checkpoint_state *out);

#endif
