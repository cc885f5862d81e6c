/* The planner: one training step of the real code on the meta backend
 * (shapes only) in the simulator, read back as memory per rank by category at
 * the peak, modelled time split into compute, communication and waiting,
 * FLOPs, tokens/s and MFU. Definitions: docs/planning.md.
 *
 * The plan is not a formula: its memory is what the training code
 * (core/train/train.c) allocates and its time what the simulator's cost model
 * charges for the ops and collectives the code issues, with the memory
 * options the code has (bf16 storage, ZeRO 0-3, layer recomputation, tiled
 * MLP and loss). plan/sweep.h ranks the U x R splits; plan/fit.h finds the
 * memory options that make a step fit; plan/report.h puts them together into
 * the answer `usp plan` (tools/cmd_plan.c) prints. */
#ifndef USP_PLAN_PLAN_H
#define USP_PLAN_PLAN_H

#include <stddef.h>

#include "core/train/train.h"
#include "sim/cost_model.h"

#define PLAN_CATEGORIES_MAX 16

typedef struct plan_result {
    usp_mesh_shape shape;
    double tokens;                 /* batch x seq: real tokens per step */
    double fwd_flops, step_flops;  /* summed over the ranks: the forward pass, the whole step */
    double recompute_flops;        /* the part of step_flops that recomputed forward work */
    /* The rank whose step ends last sets the step time; the split is that rank's:
     * step = compute + comm + wait - what of comm and wait ran beside compute
     * (the ring forward's transfers, on a stream of their own: sim/virtual_streams.h),
     * and exposed = step - compute. comm_hidden_s is the part of comm that ran beside
     * compute, comm_exposed_s = comm - comm_hidden_s; wait_hidden_s likewise of wait. */
    int critical_rank;
    double step_time_s, compute_time_s, comm_time_s, wait_time_s, exposed_comm_s;
    double comm_exposed_s, comm_hidden_s, wait_hidden_s;
    double tokens_per_s;
    double peak_flops;             /* one GPU's dense peak in the model's dtype */
    double mfu;                    /* model FLOPs (step - recompute) / (step_time x world x peak_flops) */
    size_t *peak_bytes;            /* [world] */
    int peak_rank;                 /* the rank with the largest peak (lowest on ties) */
    int simulated_ranks;           /* ranks whose program ran: world, or world / ulysses (plan_run_sharing) */
    int n_categories;              /* that rank's memory by category at its peak, largest first */
    const char *category[PLAN_CATEGORIES_MAX];
    size_t category_bytes[PLAN_CATEGORIES_MAX];
    double capacity_bytes;         /* one GPU's memory */
    int fits;                      /* every rank's peak <= capacity */
    /* SP rank 0's attention exchanges in one layer's forward and backward, by its schedule's closed form
     * (usp_schedule_i.sent, which tests/test_schedules.c holds to the trace), and the same schedule's
     * without the sliding window: what the window saves. 0 without exchanges. */
    double sp_sent_bytes, sp_sent_unmasked_bytes;
    /* The ranks' attention work (their attention ops' FLOPs: the visible pairs a mask and the layout give
     * each), max / mean, and the busiest rank. */
    double attention_balance;
    int attention_busiest_rank;
} plan_result;

/* The most ring steps one shapes-only run may simulate, W x R x layers x sequences per replica x passes
 * (each rank passes R blocks around its ring in every layer for every sequence): measured one plan on
 * 2 cores, tiny (2 layers) at 512 x 512 in 2 s and 4096 x 64 in 10 s, llama-7b (32 layers) at 512 x 64
 * in 4 s; tiny at 4096 x 256 took 20 s and llama-7b at 4096 x 64 over 2 minutes. */
#define PLAN_RING_STEPS_MAX (512LL * 512 * 4)

/* Refuses (USP_ERR_CONFIG, naming --world, --ring, --model, --batch and the cap) a shapes-only run of `c`
 * that would simulate more than PLAN_RING_STEPS_MAX ring steps over `passes` steps (`passes_what` names
 * them when > 1). */
usp_status plan_check_ring_steps(const usp_train_config *c, int64_t passes, const char *passes_what);

/* The most rank-layers one shapes-only run may simulate, W x layers x sequences per replica x passes:
 * every rank's program runs in full (its allocations, layout copies and collectives, on shapes), at
 * about 0.1 ms a rank-layer for llama-7b at U 32 on a busy 2-core machine: W = 4096 (131072 rank-layers)
 * took 11 s of CPU a step and 70 s for a plan that does not fit (one more step per memory option tried),
 * W = 2048 took 24 s of CPU. At the cap (W = 1024 for llama-7b) a plan takes seconds, not minutes. */
#define PLAN_RANK_LAYERS_MAX (1LL << 15)

/* Refuses (USP_ERR_CONFIG, naming --world, --model, --batch, the passes and the cap, and the largest
 * --world that runs) a shapes-only run of `c` that would simulate more than PLAN_RANK_LAYERS_MAX. */
usp_status plan_check_rank_layers(const usp_train_config *c, int64_t passes, const char *passes_what);

/* Refuses (USP_ERR_RUNTIME, naming the figure) a result with a NaN or infinite figure. */
usp_status plan_result_check(const plan_result *r);

/* Runs one step of `train` (model, mesh shape, data, seq, pad, batch; the rest
 * is ignored) on the meta backend on the cluster `cost`, into *out (free with
 * plan_result_free); with `trace` (a path, or NULL) it also writes the step's
 * modelled timeline (Chrome JSON for *.json, text otherwise). Errors: the run's
 * status (USP_ERR_CONFIG for a shape the code refuses, with its message, found
 * before the world is built where usp_train_check can); USP_ERR_RUNTIME for a
 * non-finite figure (plan_result_check). */
usp_status plan_run(const usp_train_config *train, const sim_cost_model *cost, const char *trace, plan_result *out);

/* The share plan_run picks: one rank a Ulysses group runs (sim/mirrors.c) where that gives every figure
 * of the run of every rank, bit for bit: no trace, and no ZeRO or optimizer offload (each rank updates
 * its own shard, in ops of other sizes, so its clock ends some ulps from its Ulysses peers'). */
#define PLAN_SHARE_EXACT 0
/* Mirrors under ZeRO too, for searches that print a step's time to 4 digits and its peak bytes
 * (plan/fit.c): the times then differ from every rank's run by some ulps (1e-14 s at W = 512), the
 * bytes not at all (every rank allocates shards of one padded size). */
#define PLAN_SHARE_ROUNDED (-1)

/* plan_run with each simulated rank standing for `share` ranks of its Ulysses group (sim_config.mirrors):
 * 1 simulates every rank; PLAN_SHARE_EXACT or PLAN_SHARE_ROUNDED the Ulysses degree where they allow it.
 * A run whose mirrors break their symmetry is simulated again rank by rank. */
usp_status plan_run_sharing(const usp_train_config *train, const sim_cost_model *cost, const char *trace, int share,
                            plan_result *out);

/* Frees what plan_run allocated in r (a zeroed result is fine). */
void plan_result_free(plan_result *r);

#endif
