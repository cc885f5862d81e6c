/* The answer of `usp plan` (report.h): the step or the sweep, then the fit
 * search on the fastest split, so the options it names are for the shape
 * the plan recommends. */
#include "plan/report.h"

void plan_report_free(plan_report *r)
{
    if (r->sweep) /* best is sweep[0]'s result: freed with the sweep */
        plan_sweep_free(r->sweep, r->n_sweep);
    else
        plan_result_free(&r->best);
    *r = (plan_report){0};
}

usp_status plan_report_make(const usp_train_config *train, const sim_cost_model *cost, int sweep, const char *trace,
                            plan_report *out)
{
    *out = (plan_report){0};
    usp_status s;
    if (sweep) {
        s = plan_sweep(train, cost, &out->sweep, &out->n_sweep);
        const plan_sweep_entry *e = out->sweep;
        if (s == USP_OK && !e[0].ok)
            s = usp_error(USP_ERR_CONFIG, "--sweep: no U x R split of %d ranks runs: U %d x R %d: %s",
                          train->shape.ulysses * train->shape.ring, e[0].ulysses, e[0].ring, e[0].why);
        if (s == USP_OK)
            out->best = e[0].result;
    } else {
        s = plan_run(train, cost, trace, &out->best);
    }
    if (s == USP_OK && !out->best.fits) {
        usp_train_config tried = *train;
        tried.shape = out->best.shape; /* with a sweep: the fastest split */
        s = plan_would_fit(&tried, cost, &out->fit);
    }
    if (s != USP_OK)
        plan_report_free(out);
    return s;
}
