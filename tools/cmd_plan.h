/* The planner behind `usp plan`: one training step of the real code on the
 * meta backend (shapes only) in the simulator, read back as memory per rank
 * by category at the peak, modelled time split into compute, communication
 * and waiting, FLOPs, tokens/s and MFU. Definitions: docs/planning.md. */
#ifndef USP_TOOLS_CMD_PLAN_H
#define USP_TOOLS_CMD_PLAN_H

#include <stddef.h>

#include "core/train.h"
#include "sim/cost_model.h"

#define PLAN_CATEGORIES_MAX 16

typedef struct plan_result {
    usp_mesh_shape shape;
    double tokens;                 /* batch x seq: real tokens per step */
    double fwd_flops, step_flops;  /* summed over the ranks: the forward pass, the whole step */
    double recompute_flops;        /* the part of step_flops that recomputed forward work */
    /* The rank whose step ends last sets the step time; the split is that rank's:
     * step = compute + comm + wait, and exposed = step - compute = comm + wait
     * (every call blocks in the simulator, so nothing overlaps compute). */
    int critical_rank;
    double step_time_s, compute_time_s, comm_time_s, wait_time_s, exposed_comm_s;
    double tokens_per_s;
    double peak_flops;             /* one GPU's dense peak in the model's dtype */
    double mfu;                    /* model FLOPs (step - recompute) / (step_time x world x peak_flops) */
    size_t *peak_bytes;            /* [world] */
    int peak_rank;                 /* the rank with the largest peak (lowest on ties) */
    int n_categories;              /* that rank's memory by category at its peak, largest first */
    const char *category[PLAN_CATEGORIES_MAX];
    size_t category_bytes[PLAN_CATEGORIES_MAX];
    double capacity_bytes;         /* one GPU's memory */
    int fits;                      /* every rank's peak <= capacity */
} plan_result;

/* Runs one step of `train` (model, mesh shape, data, seq, pad, batch; the rest
 * is ignored) on the meta backend on the cluster `cost`, into *out (free with
 * plan_result_free); with `trace` (a path, or NULL) it also writes the step's
 * modelled timeline (Chrome JSON for *.json, text otherwise). Errors: the run's
 * status (USP_ERR_CONFIG for a shape the code refuses, with its message). */
usp_status plan_run(const usp_train_config *train, const sim_cost_model *cost, const char *trace, plan_result *out);

/* Frees what plan_run allocated in r (a zeroed result is fine). */
void plan_result_free(plan_result *r);

/* One U x R split tried by plan_sweep: its result, or why the code refused it. */
typedef struct plan_sweep_entry {
    int ulysses, ring, ok;
    plan_result result;  /* when ok */
    char why[256];       /* when not: the USP_ERR_CONFIG message (e.g. heads that do not split) */
} plan_sweep_entry;

/* Plans every split U x R = (the SP degree of train->shape), DP fixed, and ranks
 * them by step time, fastest first (ties: larger U first), the refused ones last.
 * *out has *n entries; free with plan_sweep_free. A failure other than a refused
 * split (USP_ERR_CONFIG) stops the sweep and is returned. */
usp_status plan_sweep(const usp_train_config *train, const sim_cost_model *cost, plan_sweep_entry **out, int *n);

/* Frees a sweep from plan_sweep. */
void plan_sweep_free(plan_sweep_entry *e, int n);

/* What plan_would_fit found: the options (added to the run's own) that make
 * the step fit, or, when none does, the peak with all of them. */
typedef struct plan_fit {
    int found;
    char options[160];     /* "--dtype bf16 --tiled-loss --zero 1" */
    size_t peak_bytes;     /* the largest rank's peak with them */
    double step_time_s;    /* the modelled step with them */
    int tries;             /* steps run to find out */
} plan_fit;

/* Adds memory options to `train` one at a time (bf16, tiled loss, ZeRO 1, 2,
 * tiled MLP, recomputation, ZeRO 3), running a step after each, until it fits. */
usp_status plan_would_fit(const usp_train_config *train, const sim_cost_model *cost, plan_fit *out);

#endif
