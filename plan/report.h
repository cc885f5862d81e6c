/* What `usp plan` answers, as one call: the step planned (or, with a sweep,
 * every U x R split and the fastest of them) and, when it does not fit, the
 * memory options that would make it fit (plan/plan.h, sweep.h, fit.h). */
#ifndef USP_PLAN_REPORT_H
#define USP_PLAN_REPORT_H

#include "plan/fit.h"
#include "plan/plan.h"
#include "plan/sweep.h"

typedef struct plan_report {
    plan_result best;         /* the step planned; with a sweep, the fastest split's (owned by `sweep`) */
    plan_sweep_entry *sweep;  /* with a sweep: every split, fastest first; NULL without */
    int n_sweep;
    plan_fit fit;             /* when best does not fit: what would (fit.tries == 0 when it fits) */
} plan_report;

/* Plans `train` on the cluster `cost`: one step, or with `sweep` every U x R
 * split of its SP degree; then, if the (fastest) step does not fit, the
 * options that would make it fit. `trace` (a path or NULL) is written for a
 * single step only. Free *out with plan_report_free. Errors: USP_ERR_CONFIG
 * for a shape the code refuses (with a sweep: when it refuses every split). */
usp_status plan_report_make(const usp_train_config *train, const sim_cost_model *cost, int sweep, const char *trace,
                            plan_report *out);

/* Frees what plan_report_make allocated in r (a zeroed report is fine). */
void plan_report_free(plan_report *r);

#endif
