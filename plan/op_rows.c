/* A step's time op by op (see op_rows.h). */
#include "plan/op_rows.h"

#include <stdio.h>
#include <string.h>

void plan_op_call_name(char *buf, size_t size, const char *op, double bytes)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB"};
    int u = 0;
    while (u < 3 && bytes >= 1024)
        bytes /= 1024, u++;
    snprintf(buf, size, "%s %.3g %s", op, bytes, units[u]);
}

const plan_op_row *plan_op_rows_find(const plan_op_rows *t, const char *name)
{
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->rows[i].name, name) == 0)
            return &t->rows[i];
    return NULL;
}

void plan_op_rows_add(plan_op_rows *t, const char *name, double s, double calls)
{
    plan_op_row *r = (plan_op_row *)plan_op_rows_find(t, name);
    if (!r) {
        if (t->n == PLAN_OP_ROWS_MAX) {
            t->dropped++;
            return;
        }
        r = &t->rows[t->n++];
        *r = (plan_op_row){0};
        snprintf(r->name, sizeof r->name, "%s", name);
    }
    r->s += s, r->calls += calls;
}
