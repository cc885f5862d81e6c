/* The U x R sweep of the planner (plan/plan.h): one planned step per split
 * of the sequence-parallel degree, ranked by modelled step time. */
#ifndef USP_PLAN_SWEEP_H
#define USP_PLAN_SWEEP_H

#include "plan/plan.h"

/* One U x R split tried by plan_sweep: its result, or why the code refused it. */
typedef struct plan_sweep_entry {
    int ulysses, ring, ok;
    const char *schedule; /* the attention schedule planned (core/parallel/schedule.h) */
    double sent;          /* its closed form: elements rank 0 sends a layer (forward and backward), when ok */
    plan_result result;  /* when ok */
    char why[256];       /* when not: the USP_ERR_CONFIG message (e.g. heads that do not split) */
} plan_sweep_entry;

/* Plans every split U x R = (the SP degree of train->shape), DP fixed, each with train->attention's
 * schedule (sp: the one the table has for the split, core/parallel/schedule.h), and ranks them by step time, fastest first (ties: larger U first), the refused ones last.
 * *out has *n entries; free with plan_sweep_free. A failure other than a refused
 * split (USP_ERR_CONFIG) stops the sweep and is returned. */
usp_status plan_sweep(const usp_train_config *train, const sim_cost_model *cost, plan_sweep_entry **out, int *n);

/* Frees a sweep from plan_sweep. */
void plan_sweep_free(plan_sweep_entry *e, int n);

#endif
