/* What `usp train` and `usp eval` print: the trainer's records (core/train/train.h)
 * as progress lines or --json objects, and the summary of the run. Core
 * prints nothing; this is the one place that decides how a run reads. */
#ifndef USP_TOOLS_TRAIN_REPORT_H
#define USP_TOOLS_TRAIN_REPORT_H

#include <jansson.h>
#include <stdio.h>

#include "core/runtime/runtime.h"
#include "core/train/train.h"

typedef struct train_report {
    FILE *out;    /* NULL: prints nothing (a process other than rank 0's) */
    int json;     /* one JSON object per line instead of text */
    int measured; /* times are the machine's own (a real backend), not the simulator's model */
    const char *device; /* what ran the numerics, for the tokens/s: "this CPU", "the GPUs"; NULL on shapes only */
    json_t *evals; /* --json: the EVAL records so far, for the summary's `evals` (NULL: none yet) */
} train_report;

/* usp_train_config.on_record (ctx: a train_report): a STEP record as a progress
 * line or a JSON object, an EVAL record as a line (with --json kept for the
 * summary), flushed; other records print nothing. */
void train_report_record(void *ctx, const usp_train_record *record);

/* The last line(s): loss, passkey accuracy, speed, modelled time on `cluster`,
 * and r->peak_bytes (every rank's peak); with --json and c->eval_every, the evaluations. */
void train_report_summary(const train_report *report, const usp_train_config *c, const usp_train_result *r,
                          usp_runtime_cluster cluster);

/* Frees what the report kept (not `out`). */
void train_report_free(train_report *report);

/* What the run's inputs call for before it starts, on err: data shorter than a batch (a warning), documents
 * longer than the sequence (a note: they are cut; both not on shapes only), a sliding window no narrower
 * than the sequence (a note: it masks nothing). */
void train_report_input_notes(FILE *err, const usp_train_config *c, int shapes_only);

#endif
