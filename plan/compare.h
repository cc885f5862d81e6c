/* Predicted against measured: `usp plan --compare FILE` (tools/cmd_plan.c).
 *
 * FILE is the trace of a run (usp train --trace FILE.json, on any backend;
 * otherData.usp_run holds the run's options). The comparison plans the same
 * run (plan/plan.h: one step of the same code on the meta backend in the
 * simulator, with its modelled timeline), reads both traces with the same
 * code (plan/trace_phases.h) and sets one step of each side by side, phase by
 * phase, with the ratio measured / predicted. A run on --backend sim is
 * modelled by the same cost model as the plan, so its ratios are 1; a
 * measured run's say how far the model is from the machine (a CPU run is far:
 * the model is of GPUs, unless --topology gives a calibrated model of the
 * machine, docs/cluster_model.md). */
#ifndef USP_PLAN_COMPARE_H
#define USP_PLAN_COMPARE_H

#include <stdio.h>

#include "core/parallel/mesh.h"
#include "plan/trace_phases.h"

typedef struct plan_compare_options {
    const char *trace;            /* the run's trace file */
    /* the machine to predict for (NULL / 0: the run's own --topology, --nodes, --attention-kernel) */
    const char *topology, *attention_kernel;
    int nodes;
    int steps;                    /* the measured side: the median of the last `steps` steps (0 or 1: the last) */
    int ops;                      /* 1: also op by op (plan/op_rows.h) */
    /* options given beside --compare, which must be the run's (NULL / 0: not given) */
    const char *model;
    int world, ulysses, ring, seq, batch;
} plan_compare_options;

typedef struct plan_comparison {
    plan_step_phases predicted, measured;
    char backend[32], model[256], machine[192], topology[128], clock[256];
    usp_mesh_shape shape;
    long long seq, batch;
    int modelled;                 /* the run's times are the simulator's */
    int ops;                      /* print the op-by-op table too (plan_compare_options.ops) */
} plan_comparison;

/* Reads o->trace, plans its run and fills *out. A file that is not a usp trace, a trace without the run's
 * options, or an option beside it that is not the run's: USP_ERR_CONFIG naming the file and what is wrong. */
usp_status plan_compare_run(const plan_compare_options *o, plan_comparison *out);

/* The comparison as a table, one row per phase, then compute, communication and the step (with c->ops, then
 * one row per op, the largest measured first). */
void plan_comparison_print(FILE *out, const plan_comparison *c);

/* The comparison as one line of JSON (fields in docs/viz.md, "Measured against predicted"; with c->ops an "ops"
 * array). */
usp_status plan_comparison_print_json(FILE *out, const plan_comparison *c, const char *trace);

#endif
