/* The U x R sweep (sweep.h): pure Ulysses first, so a stable sort by step
 * time keeps the larger U ahead on ties. */
#include "plan/sweep.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/parallel/schedule.h"

void plan_sweep_free(plan_sweep_entry *e, int n)
{
    for (int i = 0; e && i < n; i++)
        plan_result_free(&e[i].result);
    free(e);
}

/* Plans split (u, r) with schedule `sch`, into x (a refusal of the code, USP_ERR_CONFIG, noted in x). */
static usp_status plan_split(const usp_train_config *train, const sim_cost_model *cost, int u, int r,
                             const usp_schedule_i *sch, plan_sweep_entry *x)
{
    x->ulysses = u, x->ring = r, x->schedule = sch ? sch->name : NULL;
    usp_train_config c = *train;
    usp_status s = usp_mesh_shape_make(train->shape.world, u, r, &c.shape);
    if (s == USP_OK)
        s = plan_run(&c, cost, NULL, &x->result);
    x->ok = s == USP_OK;
    if (s == USP_ERR_CONFIG)
        snprintf(x->why, sizeof x->why, "%s", usp_error_message());
    if (x->ok && sch) {
        const usp_schedule_shape shape = {.ulysses = u, .ring = r, .seq_len = c.seq_len,
                                          .n_heads = c.model.n_head, .n_kv_heads = c.model.n_kv_head, .causal = 1,
                                          .window = usp_model_config_common_window(&c.model, c.window)};
        x->sent = sch->sent(&shape, 0, c.batch / c.shape.dp, usp_model_config_head_dim(&c.model));
    }
    return s == USP_ERR_CONFIG ? USP_OK : s;
}

usp_status plan_sweep(const usp_train_config *train, const sim_cost_model *cost, plan_sweep_entry **out, int *n)
{
    *out = NULL, *n = 0;
    const int sp = train->shape.ulysses * train->shape.ring;
    plan_sweep_entry *e;
    USP_CHECK(usp_calloc((void **)&e, (size_t)sp, sizeof *e, "the sweep"));
    int count = 0;
    for (int u = sp; u >= 1; u--) { /* pure Ulysses first: ties keep it ahead */
        if (sp % u != 0)
            continue;
        /* the schedule the table has for the split (sp: ulysses, ring or the hybrid) */
        usp_status s = plan_split(train, cost, u, sp / u, usp_schedule_pick(train->attention, u, sp / u), &e[count++]);
        if (s != USP_OK) {
            plan_sweep_free(e, count);
            return s;
        }
    }
    for (int i = 1; i < count; i++) /* stable insertion sort by step time, the refused ones last */
        for (int j = i; j > 0; j--) {
            const plan_sweep_entry *a = &e[j - 1], *b = &e[j];
            if (!(b->ok && (!a->ok || b->result.step_time_s < a->result.step_time_s)))
                break;
            plan_sweep_entry tmp = e[j];
            e[j] = e[j - 1], e[j - 1] = tmp;
        }
    *out = e, *n = count;
    return USP_OK;
}
