/* What `usp train` and `usp eval` print: the trainer's records (core/train/train.h)
 * as progress lines or --json objects, and the summary of the run. Core
 * prints nothing; this is the one place that decides how a run reads. */
#ifndef USP_TOOLS_TRAIN_REPORT_H
#define USP_TOOLS_TRAIN_REPORT_H

#include <stdio.h>

#include "core/runtime/runtime.h"
#include "core/train/train.h"

typedef struct train_report {
    FILE *out;
    int json;     /* one JSON object per line instead of text */
    int measured; /* times are the machine's own (a real backend), not the simulator's model */
    const char *device; /* what ran the numerics, for the tokens/s: "this CPU", "the GPUs"; NULL on shapes only */
} train_report;

/* usp_train_config.on_record (ctx: a train_report): a STEP record as a progress
 * line or a JSON object, flushed; other records print nothing. */
void train_report_record(void *ctx, const usp_train_record *record);

/* The last line(s): loss, passkey accuracy, speed, modelled time on `cluster`,
 * and r->peak_bytes (every rank's peak). */
void train_report_summary(const train_report *report, const usp_train_config *c, const usp_train_result *r,
                          usp_runtime_cluster cluster);

#endif
