/* "would fit with ...": for a step that does not fit, the memory options
 * that make it fit, each tried with one more planned step (plan/plan.h). */
#ifndef USP_PLAN_FIT_H
#define USP_PLAN_FIT_H

#include "plan/plan.h"

/* What plan_would_fit found: the options (added to the run's own) that make
 * the step fit, or, when none does, the peak with all of them. */
typedef struct plan_fit {
    int found;
    char options[160];     /* "--dtype bf16 --tiled-loss --zero 1" ("" when the split alone fits) */
    /* The split it fits with: the run's own, or another split of the same GPUs (other_split = 1)
     * that plan_would_fit found when no memory option made the run's own split fit. */
    int other_split, ulysses, ring, dp;
    int64_t batch;         /* the global batch with that split (one sequence a replica stays one a replica) */
    int splits_tried;      /* other splits planned (each with every memory option first) */
    size_t peak_bytes;     /* the largest rank's peak with them */
    double step_time_s;    /* the modelled step with them */
    int tries;             /* steps run to find out */
} plan_fit;

/* Adds memory options to `train` one at a time (bf16, tiled loss, ZeRO 1, 2,
 * tiled MLP, recomputation, ZeRO 3), running a step after each, until it fits.
 * When none makes it fit, tries the other splits of the same W GPUs with a
 * larger SP degree (U x R x DP: more GPUs share the sequence's activations;
 * the smallest degree first, at one degree the larger U first), each first
 * with every memory option on, and for the first that fits the cheapest
 * options as above: the
 * advice to use more GPUs or a shorter --seq comes only when no split of these
 * GPUs fits. The splits tried are bounded by PLAN_FIT_SPLITS_MAX. */
#define PLAN_FIT_SPLITS_MAX 12

usp_status plan_would_fit(const usp_train_config *train, const sim_cost_model *cost, plan_fit *out);

#endif
