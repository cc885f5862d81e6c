/* Progress lines, JSON records and the summary of a training run (see train_report.h). */
#include "tools/train_report.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>

#include "core/data/data.h"

/* Prints j as one compact line (reals with 9 significant digits) and frees it. */
static void print_json(FILE *out, json_t *j)
{
    char *text = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
    if (text)
        fprintf(out, "%s\n", text);
    free(text);
    json_decref(j);
}

/* The clock's old names (sim_time_s, sim_step_s), kept beside clock_s and
 * clock_step_s for one release (0.1.x; docs/CONTRACT.md): on a real backend they held measured seconds,
 * which the name hid. step_s < 0: no per-step figure. */
static void set_old_clock_names(json_t *j, double clock_s, double step_s)
{
    json_object_set_new(j, "sim_time_s", json_real(clock_s));
    if (step_s >= 0)
        json_object_set_new(j, "sim_step_s", json_real(step_s));
}

/* "1:05" (minutes and seconds), "1:02:05" from an hour on. */
static void minutes_seconds(double seconds, char *out, size_t size)
{
    int s = seconds > 0 && seconds < 1e8 ? (int)(seconds + 0.5) : 0; /* 1e8 s: three years, no ETA */
    if (s >= 3600 && snprintf(out, size, "%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60) < (int)size)
        return;
    if (s < 3600 && snprintf(out, size, "%d:%02d", s / 60, s % 60) < (int)size)
        return;
    snprintf(out, size, "?");
}

/* An evaluation: a line of text, or (--json) an entry of the summary's `evals`, never a line of its own
 * (the per-step records stay one kind of line). */
static void report_eval(train_report *report, const usp_train_record *r)
{
    if (report->json) {
        json_t *e = json_pack("{s:I, s:o}", "step", (json_int_t)r->step, "loss",
                              isfinite(r->loss) ? json_real(r->loss) : json_null());
        if (r->passkey_accuracy >= 0)
            json_object_set_new(e, "passkey_accuracy", json_real(r->passkey_accuracy));
        if (!report->evals)
            report->evals = json_array();
        json_array_append_new(report->evals, e);
        return;
    }
    fprintf(report->out, "eval at step %lld: ", (long long)r->step);
    if (r->shapes_only || !isfinite(r->loss))
        fprintf(report->out, "no loss (shapes only)");
    else
        fprintf(report->out, "loss %.4f (held-out)", r->loss);
    if (r->passkey_accuracy >= 0)
        fprintf(report->out, ", passkey accuracy %.1f%%", 100 * r->passkey_accuracy);
    fprintf(report->out, " on %lld samples\n", (long long)r->samples);
    fflush(report->out);
}

/* On meta the loss is NaN (JSON null) and only rank 0's peak is known (nothing
 * moves between ranks). */
void train_report_record(void *ctx, const usp_train_record *r)
{
    train_report *report = ctx;
    FILE *out = report->out;
    if (r->kind == USP_TRAIN_RECORD_EVAL && out)
        report_eval(report, r);
    if (r->kind != USP_TRAIN_RECORD_STEP || !out)
        return;
    if (report->json) {
        json_t *j = json_pack("{s:I, s:o, s:f, s:f, s:f}", "step", (json_int_t)r->step, "loss",
                              !isfinite(r->loss) ? json_null() : json_real(r->loss), "tokens_per_s", r->tokens_per_s,
                              "clock_s", r->clock_s, "clock_step_s", r->clock_step_s);
        set_old_clock_names(j, r->clock_s, r->clock_step_s);
        json_object_set_new(j, "lr", json_real(r->lr));
        print_json(out, j);
    } else {
        char elapsed[32], left[32];
        /* the rate of this run's steps so far, over the steps it has still to run */
        double done = (double)(r->step - r->first_step), to_go = (double)(r->last_step - r->step);
        minutes_seconds(r->elapsed_s, elapsed, sizeof elapsed);
        minutes_seconds(done > 0 ? r->elapsed_s / done * to_go : 0, left, sizeof left);
        fprintf(out, "step %5lld/%lld  ", (long long)r->step, (long long)r->steps);
        if (r->shapes_only) /* no numbers ran: no loss, no norm, and tokens/s of no work */
            fprintf(out, "shapes only  lr %.2e  %s elapsed, %s left", r->lr, elapsed, left);
        else
            fprintf(out, "loss %.4f  lr %.2e  grad norm %.3f  %7.0f tokens/s  %s elapsed, %s left", r->loss, r->lr,
                    r->grad_norm, r->tokens_per_s, elapsed, left);
        fprintf(out, "  %s %.4f s (%.4f s/step)  peak MiB/rank", report->measured ? "time" : "sim", r->clock_s,
                r->clock_step_s);
        for (int i = 0; i < r->n_peaks && i < 16; i++)
            fprintf(out, " %.1f", r->peak_bytes[i] / (1 << 20));
        fprintf(out, "%s\n", r->n_peaks > 16 ? " ..." : r->shapes_only ? " (rank 0; meta)" : "");
    }
    fflush(out);
}

/* The largest of the ranks' peaks, in bytes, and whose (*rank, when not NULL). */
static double largest_peak(const usp_train_config *c, const usp_train_result *r, int *rank)
{
    int at = 0;
    for (int i = 1; i < c->shape.world; i++)
        if (r->peak_bytes[i] > r->peak_bytes[at])
            at = i;
    if (rank)
        *rank = at;
    return (double)r->peak_bytes[at];
}

/* The ranks' attention work, max / mean (1 when none ran), and the busiest rank (*rank). */
static double attention_balance(const usp_train_config *c, const usp_train_result *r, int *rank)
{
    double sum = 0;
    *rank = 0;
    for (int i = 0; i < c->shape.world; i++) {
        sum += r->attention_flops[i];
        if (r->attention_flops[i] > r->attention_flops[*rank])
            *rank = i;
    }
    return sum > 0 ? r->attention_flops[*rank] * c->shape.world / sum : 1.0;
}

/* Each rank's share of the mask's work over the steps, into the JSON summary j. */
static void attention_work_json(json_t *j, const usp_train_config *c, const usp_train_result *r)
{
    if (!r->attention_flops || c->eval_only)
        return;
    json_t *work = json_array();
    for (int i = 0; i < c->shape.world; i++)
        json_array_append_new(work, json_real(r->attention_flops[i]));
    json_object_set_new(j, "attention_flops", work);
    json_object_set_new(j, "attention_balance", json_real(attention_balance(c, r, &(int){0})));
}

/* The same as a line of the text summary. */
static void attention_work_text(FILE *out, const usp_train_config *c, const usp_train_result *r)
{
    if (!r->attention_flops || c->eval_only)
        return;
    int rank;
    const double balance = attention_balance(c, r, &rank);
    fprintf(out, "attention work per rank (GFLOP, the visible pairs'):");
    for (int i = 0; i < c->shape.world && i < 16; i++)
        fprintf(out, " %.4g", r->attention_flops[i] / 1e9);
    fprintf(out, "%s; max / mean %.3f (rank %d)\n", c->shape.world > 16 ? " ..." : "", balance, rank);
}

/* A file of fewer sequences than a step's batch: they repeat within a step, and the held-out samples are
 * sequences the steps train on. A warning, not a refusal: a small file is how one tries the tool. */
static void warn_short_data(FILE *err, const usp_train_config *c, const usp_data *d)
{
    int64_t windows = usp_data_windows(d, c->seq_len);
    if (d->kind != USP_DATA_PASSKEY && windows > 0 && windows < c->batch)
        fprintf(err, "usp %s: warning: --data %s holds %lld tokens, %lld sequence%s of --seq %d (each %d tokens "
                "with its last target), fewer than one --batch of %d: sequences repeat within a step, and the "
                "held-out samples are sequences it trains on\n", c->eval_only ? "eval" : "train", c->data,
                (long long)d->file_tokens, (long long)windows, windows == 1 ? "" : "s", (int)c->seq_len,
                (int)c->seq_len + 1, (int)c->batch);
}

/* A window no narrower than the sequence is accepted (a config may give one wider than its positions),
 * and said: it masks nothing. */
static void note_wide_window(FILE *err, const usp_train_config *c)
{
    const int64_t w = c->window > 0 ? c->window : c->model.sliding_window;
    if (w > 0 && w >= c->seq_len)
        fprintf(err, "usp %s: note: the sliding window of %lld keys (%s) is at least --seq %lld: every query sees "
                "its whole causal past, as without a window\n", c->eval_only ? "eval" : "train", (long long)w,
                c->window > 0 ? "--window" : "the model's sliding_window", (long long)c->seq_len);
}

/* Documents longer than the sequence are cut at the samples' bounds, each piece trained as a document of its
 * own: said once, before the run (the file is read once to see). */
static void note_long_documents(FILE *err, const usp_train_config *c, const usp_data *d)
{
    int64_t longest = 0, over = 0;
    const int64_t eot = c->eot >= 0 ? c->eot : d->eot; /* text:DIR has its own */
    if (eot >= 0 && d->kind != USP_DATA_PASSKEY && usp_data_long_documents(d, eot, c->seq_len, &longest, &over) ==
        USP_OK && over > 0)
        fprintf(err, "usp %s: note: --data %s holds %lld document%s longer than --seq %lld (the longest %lld "
                "tokens): each is cut where the samples end, its pieces trained as documents of their own\n",
                c->eval_only ? "eval" : "train", c->data, (long long)over, over == 1 ? "" : "s", (long long)c->seq_len,
                (long long)longest);
    usp_error_clear(); /* a failed read: the run reports it */
}

void train_report_input_notes(FILE *err, const usp_train_config *c, int shapes_only)
{
    usp_data d; /* opened once for both notes on it */
    if (!shapes_only && usp_data_open(c->data, c->seed, &d) == USP_OK) {
        warn_short_data(err, c, &d), note_long_documents(err, c, &d);
        usp_data_close(&d);
    }
    usp_error_clear(); /* a source that does not open: the run reports it, naming --data */
    note_wide_window(err, c);
}

void train_report_summary(const train_report *report, const usp_train_config *c, const usp_train_result *r,
                          usp_runtime_cluster cluster)
{
    FILE *out = report->out;
    if (report->json) {
        json_t *j = json_pack("{s:b, s:o, s:f, s:f, s:f, s:I}", "summary", 1, "loss", /* --meta: NaN, null */
                              isfinite(r->loss) ? json_real(r->loss) : json_null(), "tokens_per_s",
                              r->tokens_per_s, "wall_s", r->wall_s, "clock_s", r->clock_s, "steps",
                              (json_int_t)r->steps_done);
        json_object_set_new(j, "clock", json_string(report->measured ? "measured" : "modelled"));
        set_old_clock_names(j, r->clock_s, -1);
        json_object_set_new(j, "steps_time_s", json_real(r->steps_time_s));
        json_object_set_new(j, "host_waits_per_step", json_real(r->host_waits_per_step));
        json_object_set_new(j, "loss_held_out", json_boolean(r->loss_held_out));
        json_t *peaks = json_array();
        for (int i = 0; i < c->shape.world; i++)
            json_array_append_new(peaks, json_integer((json_int_t)r->peak_bytes[i]));
        json_object_set_new(j, "peak_bytes", peaks);
        attention_work_json(j, c, r);
        if (cluster.device_memory_bytes > 0) /* the modelled GPUs: would every rank's peak fit in one? */
            json_object_set_new(j, "fits", json_boolean(largest_peak(c, r, NULL) <= cluster.device_memory_bytes));
        if (r->passkey_accuracy >= 0)
            json_object_set_new(j, "passkey_accuracy", json_real(r->passkey_accuracy));
        if (r->stopped) /* SIGINT or SIGTERM: stopped after steps, saved, not evaluated */
            json_object_set_new(j, "stopped", json_true());
        if (c->eval_every > 0) /* --eval-every: its evaluations, none yet an empty array */
            json_object_set_new(j, "evals", report->evals ? json_incref(report->evals) : json_array());
        print_json(out, j);
        return;
    }
    if (!isfinite(r->loss)) /* the meta backend: no numerics */
        fprintf(out, "%s: no loss (shapes only)", c->eval_only ? "eval" : "done");
    else
        fprintf(out, "%s: loss %.4f", c->eval_only ? "eval" : "done", r->loss);
    if (isfinite(r->loss) && !c->eval_only && r->loss_held_out) /* which loss: the held-out mean, */
        fprintf(out, " (held-out)");
    else if (isfinite(r->loss) && !c->eval_only) /* or the last step's own batch */
        fprintf(out, " (step %lld)", (long long)r->steps_done);
    if (r->passkey_accuracy >= 0)
        fprintf(out, ", passkey accuracy %.1f%%", 100 * r->passkey_accuracy);
    double steps_s = r->steps_time_s, eval_s = r->clock_s - r->steps_time_s;
    if (c->eval_only) { /* no step ran: the figures are of the held-out samples, of the checkpoint's step */
        fprintf(out, " on %lld held-out samples of the checkpoint at step %lld (wall %.1f s); ",
                (long long)c->eval_samples, (long long)r->steps_done, r->wall_s);
        steps_s = r->clock_s, eval_s = 0;
    } else if (report->device) {
        fprintf(out, "; %lld steps, %.0f tokens/s on %s (wall %.1f s); ", (long long)r->steps_done,
                r->tokens_per_s, report->device, r->wall_s);
    } else {
        fprintf(out, "; %lld steps on shapes only (wall %.1f s); ", (long long)r->steps_done, r->wall_s);
    }
    const char *what = c->eval_only ? "the evaluation" : "the steps";
    if (cluster.modelled)
        fprintf(out, "%s would take %.4f s on the modelled %s (%d node%s)", what, steps_s, cluster.name,
                cluster.nodes, cluster.nodes > 1 ? "s" : "");
    else
        fprintf(out, "%s took %.4f s on %s (%d node%s)", what, steps_s, cluster.name, cluster.nodes,
                cluster.nodes > 1 ? "s" : "");
    if (eval_s > 0)
        fprintf(out, ", %s %.4f s more", c->save_dir ? "saving and the held-out evaluation" : "the held-out evaluation",
                eval_s);
    fprintf(out, "\n");
    fprintf(out, "peak memory per rank (MiB):");
    for (int i = 0; i < c->shape.world; i++)
        fprintf(out, " %.1f", (double)r->peak_bytes[i] / (1 << 20));
    fprintf(out, "\n");
    int rank;
    if (c->window > 0 || c->eot >= 0) /* a mask spreads the work unevenly */
        attention_work_text(out, c, r);
    double peak = largest_peak(c, r, &rank);
    if (cluster.device_memory_bytes > 0 && peak > cluster.device_memory_bytes)
        fprintf(out, "does not fit: rank %d's peak, %.1f GB, is over the %.0f GB of a GPU of the modelled %s (usp plan with "
                "the same options says what would make it fit)\n", rank, peak / 1e9,
                cluster.device_memory_bytes / 1e9, cluster.name);
}

void train_report_free(train_report *report)
{
    json_decref(report->evals);
    report->evals = NULL;
}
