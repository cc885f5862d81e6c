/* "would fit with ...": for a step that does not fit, the memory options
 * that make it fit, each tried with one more planned step (plan/plan.h). */
#ifndef USP_PLAN_FIT_H
#define USP_PLAN_FIT_H

#include "plan/plan.h"

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
