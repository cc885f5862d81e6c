/* The trainer's state, shared by the training loop (train.c) and its held-out
 * evaluation (train_eval.c). Nothing outside core/train/ includes it. */
#ifndef USP_TRAINER_H
#define USP_TRAINER_H

#include <time.h>

#include "core/base/clock_seconds.h"
#include "core/data/data.h"
#include "core/model/model.h"
#include "core/train/train.h"

/* held-out samples: USP_TRAIN_HELD_OUT_FIRST + k (train.h), never drawn in training; usp generate's too */

typedef struct trainer {
    const usp_rank_ctx *ctx;
    const usp_train_config *c;
    usp_train_result *result;
    usp_mesh mesh;
    usp_model *model;
    usp_data data;
    usp_shard *shards;        /* [M][B_local]: a step's micro-batches, read at once */
    int64_t B_local, N;       /* sequences a rank's model runs at once (one micro-batch), padded length */
    int64_t M, per_call;      /* micro-batches a step; sequences over all replicas a micro-batch (batch / M) */
    usp_param_table table;
    usp_param_store *store;   /* weights, gradients and Adam state (whole or ZeRO-sharded) */
    double *scalars;          /* backend, small reductions */
    float *host_losses;       /* [M][rows]: a step's per-row losses, landed at the step's host wait */
    double *stop_word;        /* the world's targets and stop marks of a step (post_stop_flags), landed likewise */
    int64_t step;             /* steps done */
    int numerics;             /* 0 on the meta backend: nothing is read back */
    double log_clock;         /* modelled clock at the last progress line, and its step */
    int64_t log_step;
    int stopping;             /* the world agreed to stop after this step (usp_train_config.stop) */
    double grad_norm;         /* the last step's, before clipping (NaN: none) */
    int64_t first_step, last_step; /* this run's: steps first_step + 1 .. last_step */
    double start_wall;        /* when the first of them began */
    double eval_wall;         /* wall seconds in the periodic evaluations so far (left out of tokens/s) */
    uint64_t step_waits;      /* host waits in the steps so far, evaluations and saves left out */
    double attention_flops;   /* its attention ops' FLOPs in the steps so far (usp_train_result.attention_flops) */
} trainer;

#define BE (t->ctx->backend)
#define ST (t->ctx->stream)

/* The rank's modelled clock (0 when the runtime has none). */
static inline double trainer_clock_now(const trainer *t) { return t->ctx->clock ? t->ctx->clock(t->ctx->runtime) : 0; }

/* Sums n doubles over `group` (through backend memory, as every transfer must), waiting for them.
 * On meta the calls are made (their time counts) but nothing arrives: `values` keep this rank's own. */
usp_status trainer_sum_over(trainer *t, usp_comm_t *group, double *values, int n);

/* Reads this rank's shards of the B_local sequences of DP replica d at `first_sample` into shards[B_local]. */
usp_status trainer_read_batch(trainer *t, int64_t first_sample, usp_shard *shards);

/* Valid targets of shards[rows]. */
double trainer_count_targets(const usp_shard *shards, int64_t rows);

/* Mean loss and, for passkey data, the fraction of held-out samples whose five key digits are all
 * predicted right (train_eval.c). */
usp_status trainer_evaluate(trainer *t, double *loss_out, double *accuracy);

/* An EVAL record (rank 0). */
void trainer_record_eval(const trainer *t, int64_t step, double loss, double accuracy);

/* The held-out evaluation every eval_every steps, kept out of the steps' rates (train_eval.c). */
usp_status trainer_evaluate_every(trainer *t, int64_t step);

#endif
