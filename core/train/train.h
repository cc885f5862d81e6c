/* Room core/train/: the training and evaluation loop of one rank (this file), the
 * selftest schedule (selftest.h) and generation from a checkpoint (generate.h).
 * It may use: every room of core/.
 *
 * The training (and evaluation) loop of one rank (train.c; the config's defaults,
 * schedule and checks: train_config.c).
 *
 * Per step: every rank reads its shard of its DP replica's B/DP sequences; the
 * count of valid targets is summed over the world first, so the loss is the
 * mean over every valid token of the global batch (never a mean of per-rank
 * means); forward, cross-entropy, backward; gradients all-reduced over sp and
 * then dp (weights are replicated on SP ranks), or reduce-scattered over the
 * world with ZeRO 2-3; global-norm clipping; AdamW with linear warmup and
 * cosine decay. The same code runs on every backend. A step whose loss or
 * gradient norm is not finite stops the run (USP_ERR_RUNTIME naming the step)
 * before its update, so a diverged run saves nothing.
 *
 * On a backend without numerics (meta) the step runs on shapes only: every op,
 * allocation and collective is issued as in a numeric run, but nothing is read
 * back: no weights are initialised or loaded, no checkpoint written (--save is
 * a configuration error), the loss is NaN and passkey accuracy not measured,
 * and no host memory proportional to the parameters is allocated.
 *
 * Nothing here prints: rank 0 hands progress to the command as records
 * (usp_train_record, through config->on_record), and figures of every rank
 * reach rank 0 through usp_rank_gather (core/runtime/rank.h). */
#ifndef USP_TRAIN_H
#define USP_TRAIN_H

#include <stdatomic.h>
#include <stdint.h>

#include "core/parallel/mesh.h"
#include "core/parallel/ring.h"
#include "core/model/model_config.h"
#include "core/runtime/rank.h"

/* The data sample of held-out sample 0: the evaluation reads samples USP_TRAIN_HELD_OUT_FIRST + k, k = 0, 1, ...
 * in order (whatever the mesh), and training never draws one (sample (step - 1) B + b stays below it). */
#define USP_TRAIN_HELD_OUT_FIRST ((int64_t)1 << 40)

/* One rank's figures of the last step it ran (for usp plan). */
typedef struct usp_train_step_stats {
    double fwd_flops;      /* FLOPs its ops reported for the forward pass, to the logits (usp_model_step_flops) */
    double step_flops;     /* ... over the whole step: forward, loss, backward, reductions, AdamW */
    double recompute_flops; /* the part of step_flops that recomputed forward work (not model FLOPs) */
    double attention_flops; /* the part of step_flops its attention ops reported (usp_backend_attention_flops) */
    double start_s, end_s; /* its modelled clock when the step started and ended */
    double host_waits;     /* the times the host waited for the device in it, to its update (usp_backend_host_waits) */
} usp_train_step_stats;

/* What rank 0 tells the command while it runs. */
typedef enum usp_train_record_kind {
    USP_TRAIN_RECORD_STEP,         /* progress: every log_every steps, and the last step */
    USP_TRAIN_RECORD_EVAL,         /* a held-out evaluation every eval_every steps (the last step's: the end's) */
    USP_TRAIN_RECORD_FIRST_GRADS,  /* record_tensors: step 1's all-reduced gradients, before clipping (ZeRO 0-1) */
    USP_TRAIN_RECORD_LAST_WEIGHTS, /* record_tensors: the weights after the last step */
} usp_train_record_kind;

typedef struct usp_train_record {
    usp_train_record_kind kind;
    int64_t step, steps;       /* the step just done; the schedule's length */
    /* STEP: */
    double loss;               /* the step's loss; NaN on the meta backend */
    double lr;                 /* its learning rate */
    double grad_norm;          /* the gradients' global norm before clipping; NaN on meta or forward-only */
    double elapsed_s;          /* wall seconds since this run's first step began */
    int64_t first_step, last_step; /* this run's steps: first_step + 1 .. last_step (a resumed run starts later) */
    double tokens_per_s;       /* wall clock, over the steps of this run so far */
    double clock_s;            /* rank 0's run clock (usp_rank_ctx.clock): modelled seconds on the simulator,
                                  measured seconds on a real backend (mpi, nccl) */
    double clock_step_s;       /* the clock's mean per step since the previous record */
    const double *peak_bytes;  /* [n_peaks]: the ranks' peak memory so far, gathered over the world
                                  communicator; on the meta backend nothing moves: rank 0's only */
    int n_peaks;
    int shapes_only;           /* the meta backend ran (loss NaN, one peak) */
    /* EVAL (step, steps, shapes_only; loss: the held-out mean, NaN on meta): */
    double passkey_accuracy;   /* the fraction of held-out samples whose key is retrieved; -1 when not measured */
    int64_t samples;           /* held-out samples evaluated (eval_samples, rounded up to whole batches) */
    /* FIRST_GRADS, LAST_WEIGHTS: */
    const float *values;       /* [n_values], in the parameter table's order; valid during the call */
    int64_t n_values;
} usp_train_record;

/* Receives the records, on rank 0, in step order. */
typedef void (*usp_train_record_fn)(void *ctx, const usp_train_record *record);

typedef struct usp_train_config {
    usp_model_config model;
    usp_mesh_shape shape;
    const char *data;          /* passkey | text:FILE | tokens:FILE | tokens32:FILE */
    int64_t seq_len;           /* the real sequence length */
    int pad;                   /* pad to a length the layout divides (masked out of the loss) */
    int64_t batch;             /* global batch: sequences per step over all DP replicas */
    int64_t steps;             /* length of the schedule */
    int64_t until;             /* stop after this step (0: steps) */
    double lr, min_lr_ratio, weight_decay, grad_clip, beta1, beta2, eps;
    int64_t warmup;
    uint64_t seed;
    const char *attention;     /* --attention: "sp" or NULL, the mesh's schedule; or a schedule's name
                                  (core/parallel/schedule.h: local, ulysses, ring, hybrid) */
    int zero_stage;            /* 0-3: shard Adam state, then gradients, then weights over all ranks (param_store.h) */
    int recompute_layers;      /* memory options of the model (model.h) */
    int selective_recompute;
    int tiled_mlp, tiled_loss;
    int64_t tile_rows;
    int64_t window;            /* --window: the sliding window, W keys up to the query, of the model's window
                                  layers, every layer's when its config has none (0: the config's) */
    int64_t eot;               /* --eot: the end-of-text id that ends packed documents (-1, the default: none) */
    const int64_t *doc_lengths; /* shapes only (usp plan --documents): every sequence's documents (model.h) */
    int64_t n_doc_lengths;
    int offload_optimizer;     /* master weights and Adam state on the host (ZeRO-Offload; shapes only) */
    int eager_loss;            /* the loss as PyTorch's eager cross-entropy holds it (shapes only; model.h) */
    int forward_only;          /* a step is the forward and the loss, no backward or update (shapes only: planning) */
    int64_t micro_batches;     /* a replica's sequences run in this many passes a step, gradients accumulated (0, 1: one) */
    double bucket_mb;          /* ZeRO 0-1: gradients all-reduced during backward in buckets of at most this many
                                  MiB of whole layers, a larger layer alone (0: 25, as PyTorch DDP; grad_buckets.h) */
    int eager_ring_merge;      /* ring attention's merge as PyTorch frameworks run it (shapes only; core/parallel/ring.h) */
    usp_overlap ring_backward_overlap; /* the ring's backward sends K/V ahead: auto (0; on shapes), on, off (ring.h) */
    usp_overlap ulysses_overlap; /* Ulysses' all-to-alls in two head groups beside the attention: auto (0), on, off */
    usp_dtype storage;         /* USP_F32, or USP_BF16 mixed precision (bf16 weights, activations; fp32 master) */
    usp_dtype grad_reduce;     /* the gradients' reductions: USP_F32 (0), or USP_BF16 (with storage bf16 only) */
    const char *save_dir, *resume_dir;
    int64_t save_every;        /* with save_dir: a checkpoint every save_every steps too (0: at the end only) */
    int keep;                  /* with save_dir: checkpoints kept, DIR the newest and DIR-step-N the older
                                  (usp_checkpoint_save_store; 0, 1: DIR alone) */
    atomic_int *stop;          /* nonzero asks the run to stop after a whole step, save (save_dir) and skip
                                  the evaluation: a signal handler's flag (NULL: never). The ranks agree on the
                                  step (the flag rides on the step's first all-reduce), so every rank stops there */
    int64_t log_every;         /* a STEP record every log_every steps (and at the last) */
    int64_t eval_samples;      /* held-out passkey samples evaluated at the end (0: none) */
    int64_t eval_every;        /* the same evaluation every eval_every steps too, an EVAL record each (0: at the
                                  end only; needs eval_samples; never after an agreed stop); the training's
                                  losses are bit for bit those of a run without it */
    int eval_only;             /* usp eval: no training steps */
    usp_train_record_fn on_record; /* rank 0's progress (NULL: none, and no peaks gathered for it) */
    void *record_ctx;          /* its first argument */
    int record_tensors;        /* tests: also FIRST_GRADS and LAST_WEIGHTS records (every rank joins the
                                  gather of sharded weights) */
    usp_train_step_stats *step_stats; /* when set (on every rank or none), [world]: every rank's figures of
                                  the last step it ran, gathered to rank 0 (usp_rank_gather) */
} usp_train_config;

/* What rank 0 reports back to the command. */
typedef struct usp_train_result {
    double loss;               /* the held-out mean when evaluated (loss_held_out), else the last step's;
                                  NaN on the meta backend */
    int loss_held_out;
    double passkey_accuracy;   /* -1 when not evaluated */
    double tokens_per_s, wall_s;
    double clock_s;            /* rank 0's run clock at the end (as usp_train_record.clock_s) */
    double steps_time_s;       /* the same clock when the steps ended: clock_s less saving and evaluating */
    int64_t steps_done;
    int stopped;               /* the run stopped early at `stop` (set on every rank, not on rank 0 alone) */
    int64_t seq_len_padded;
    double first_loss;         /* the loss of the first step run */
    int grad_collectives;      /* the last step's gradient collectives on rank 0 (all-reduces at ZeRO 0-1, */
    int64_t grad_bytes;        /* reduce-scatters at 2-3) and the gradient bytes they took in: one pass */
    double host_waits_per_step; /* rank 0's host waits (usp_backend_host_waits) per step run, logged steps'
                                   records included, evaluations and saves left out; 0 on cpu and meta */
    size_t *peak_bytes;        /* when set (on every rank or none), [world]: every rank's peak memory over
                                  the run, gathered to rank 0 (usp_rank_gather) */
    double *attention_flops;   /* likewise, when set: every rank's attention FLOPs over its steps (forward,
                                  backward, recomputed; evaluations left out): its share of the mask's work */
} usp_train_result;

typedef struct usp_train_run {
    const usp_train_config *config;
    usp_train_result *result;
} usp_train_run;

/* Clears c and sets the default hyperparameters (lr 1e-3, warmup 10% of steps, cosine to 10%, wd 0.1, clip 1, betas 0.9/0.95). */
void usp_train_defaults(usp_train_config *c);

/* Checks the optimizer's numbers (finite; lr > 0, betas in [0, 1), eps > 0,
 * weight decay and clip >= 0, min_lr_ratio in [0, 1]), the batch against DP,
 * the (padded) length against the layout and the model against the mesh
 * (usp_model_check_shape), before any rank runs;
 * *padded_len is the length the ranks will use. */
usp_status usp_train_check(const usp_train_config *c, int64_t *padded_len);

/* One rank of a training or evaluation run (arg: usp_train_run *). */
usp_status usp_train_rank(const usp_rank_ctx *ctx, void *arg);

/* The gradient bucket cap in bytes of c->bucket_mb (0: the store's default, 25 MiB; at least 1 byte otherwise). */
int64_t usp_train_bucket_bytes(const usp_train_config *c);

/* The learning rate at step t (1-based) of the schedule. */
double usp_train_lr(const usp_train_config *c, int64_t t);

#endif
