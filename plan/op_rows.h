/* A step's time op by op, for `usp plan --compare --compare-ops`: where a
 * phase's ratio comes from. Compute ops by their name ("rmsnorm_forward");
 * collectives by their op and the bytes a rank sent ("all_to_all 64 KiB"),
 * each the transfer only (a call's time less its wait for the last member of
 * its group to post it: plan/trace_phases.h), because the wait is the other
 * ranks' lateness, not the call's cost. Each row is the mean over the ranks,
 * with its calls a step. */
#ifndef USP_PLAN_OP_ROWS_H
#define USP_PLAN_OP_ROWS_H

#include <stddef.h>

#define PLAN_OP_ROWS_MAX 64 /* distinct ops and call sizes of a step (a llama step has about 30) */
#define PLAN_OP_NAME_MAX 40

typedef struct plan_op_row {
    char name[PLAN_OP_NAME_MAX];
    double s;     /* seconds a step: a compute op's time, a call's transfer */
    double calls; /* calls a step */
} plan_op_row;

typedef struct plan_op_rows {
    int n;
    int dropped; /* > 0: ops past PLAN_OP_ROWS_MAX were counted in no row */
    plan_op_row rows[PLAN_OP_ROWS_MAX];
} plan_op_rows;

/* The row of a call of `op` that sent `bytes`: "all_to_all 64 KiB" (B, KiB, MiB, GiB, to 3 digits). */
void plan_op_call_name(char *buf, size_t size, const char *op, double bytes);

/* Adds s seconds and `calls` calls to row `name`, made when new (past PLAN_OP_ROWS_MAX: counted in dropped). */
void plan_op_rows_add(plan_op_rows *t, const char *name, double s, double calls);

/* Row `name`, or NULL. */
const plan_op_row *plan_op_rows_find(const plan_op_rows *t, const char *name);

#endif
