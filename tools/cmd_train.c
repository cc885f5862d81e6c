/* `usp train` and `usp eval`: parse the options, build the run's config and
 * run it on the runtime --backend names (tools/runtime_registry.h); print
 * rank 0's progress records and a final summary (tools/train_report.h).
 *
 * --trace and --dot look at the run afterwards, so the runtime records the
 * trace only when one of them asks: a trace keeps every call and compute op
 * of every step. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>

#include "core/base/atomic_file.h"
#include "core/checkpoint/checkpoint.h"
#include "core/parallel/schedule.h"
#include "core/parallel/ulysses.h"
#include "core/runtime/launcher_env.h"
#include "core/runtime/runtime.h"
#include "core/train/train.h"
#include "plan/plan.h"
#include "tools/checkpoint_dir.h"
#include "tools/cli.h"
#include "tools/commands.h"
#include "tools/log_file.h"
#include "tools/memory_options.h"
#include "tools/output_path.h"
#include "tools/runtime_registry.h"
#include "tools/train_report.h"
#include "tools/explore_cli.h"
#include "tools/mask_options.h"
#include "viz/chrome_trace.h"
#include "viz/render.h"
#include "viz/run_picture.h"

typedef struct train_options {
    const char *backend, *model, *data, *save, *resume, *attention, *trace, *dot, *topology, *dump_dir;
    const char *attention_kernel; /* the modelled kernel's rates (sim only) */
    const char *sim_compute;      /* the simulated ranks' backend (sim only; NULL: cpu) */
    const char *log;              /* --log FILE: rank 0's lines appended there too */
    int world, gpus, ulysses, ring, pad, json, nodes, meta, check_collectives;
    double timeout;
    int seq, batch, steps, until, warmup, log_every, eval_samples, eval_every, seed, save_every, keep;
    double lr;
    cli_list inject;
    memory_options memory;
    mask_options mask;
    explore_options explore;
} train_options;

/* The Ulysses degree the user did not type (W / R) must split the model's heads; if it does not, the
 * message says where the number came from and a mesh of the same world that does. */
static usp_status default_ulysses_check(const train_options *o, const usp_model_config *m, int ulysses)
{
    if (ulysses_heads_check(m->n_head, m->n_kv_head, ulysses) == USP_OK)
        return USP_OK;
    char why[USP_ERROR_MESSAGE_MAX];
    snprintf(why, sizeof why, "%s", usp_error_message());
    int u = ulysses;
    while (u > 1 &&
           (ulysses % u != 0 || m->n_head % u != 0 || ulysses_heads_check(m->n_head, m->n_kv_head, u) != USP_OK))
        u--;
    usp_error_clear();
    return usp_error(USP_ERR_CONFIG, "--world %d with --ring %d makes --ulysses %d by default (W / R), and for model "
                     "%s: %s; e.g. --world %d --ulysses %d --ring %d", o->world, o->ring, ulysses,
                     m->name, why, o->world, u, o->ring * (ulysses / u));
}

/* --resume DIR continues the run that saved DIR: the model is DIR's config.json and the seed (the data
 * stream) the saved one, so an option given beside it that says otherwise is refused rather than ignored.
 * usp eval honours an explicit --seed (it draws held-out samples and continues no stream). *saved: the
 * checkpoint's state, where the run starts. */
static usp_status resume_model_and_seed(const char *command, const train_options *o, usp_model_config *model,
                                        uint64_t *seed, usp_checkpoint_state *saved_out)
{
    int eval = strcmp(command, "eval") == 0;
    USP_CHECK(checkpoint_dir_check("--resume", o->resume, 1));
    usp_checkpoint_state saved;
    USP_CHECK(usp_checkpoint_read_state(o->resume, &saved));
    *saved_out = saved;
    USP_CHECK(checkpoint_model_load("--resume", o->resume, model));
    if (o->model) {
        usp_model_config given;
        char difference[128];
        USP_CHECK(checkpoint_model_load("--model", o->model, &given));
        if (usp_model_config_shape_difference(&given, model, difference, sizeof difference))
            return usp_error(USP_ERR_CONFIG, "--model %s beside --resume %s: not the checkpoint's model (%s: the "
                             "first from --model, the second from %s/config.json); drop --model to train the "
                             "checkpoint's model", o->model, o->resume, difference, o->resume);
    }
    if (saved.has_seed && o->seed >= 0 && (uint64_t)o->seed != saved.seed && !eval)
        return usp_error(USP_ERR_CONFIG, "--seed %d beside --resume %s: the checkpoint was saved by a run with seed "
                         "%llu, and another seed would change its data stream; drop --seed (the saved seed is used) "
                         "or give --seed %llu", o->seed, o->resume, (unsigned long long)saved.seed,
                         (unsigned long long)saved.seed);
    if (saved.has_seed && o->seed < 0)
        *seed = saved.seed;
    if (saved.is_usp && saved.step >= o->steps && !eval)
        return usp_error(USP_ERR_CONFIG, "--resume %s: the checkpoint is at step %lld; --steps %d would train "
                         "nothing: give --steps above %lld", o->resume, (long long)saved.step, o->steps,
                         (long long)saved.step);
    /* --until K stops after step K: a checkpoint already there would train nothing, as with --steps */
    if (saved.is_usp && o->until > 0 && o->until < o->steps && saved.step >= o->until && !eval)
        return usp_error(USP_ERR_CONFIG, "--resume %s: the checkpoint is at step %lld; --until %d would train "
                         "nothing: give --until above %lld (or drop it to train to --steps %d)", o->resume,
                         (long long)saved.step, o->until, (long long)saved.step, o->steps);
    return USP_OK;
}

/* The run's config from the options, checked; *resumed: the state of --resume's checkpoint (zero without). */
static usp_status build_config(const char *command, const train_options *o, usp_train_config *c,
                               usp_checkpoint_state *resumed)
{
    *resumed = (usp_checkpoint_state){0};
    usp_train_defaults(c);
    USP_CHECK(runtime_registry_check(o->backend));
    if (!usp_schedule_pick(o->attention, 1, 1)) {
        char known[256];
        usp_schedules_describe(known, sizeof known);
        return usp_error(USP_ERR_CONFIG, "--attention %s: no such schedule; the schedules are %s", o->attention, known);
    }
    uint64_t seed = o->seed >= 0 ? (uint64_t)o->seed : c->seed; /* c->seed: the default */
    if (o->resume)
        USP_CHECK(resume_model_and_seed(command, o, &c->model, &seed, resumed));
    else
        USP_CHECK(checkpoint_model_load("--model", o->model ? o->model : "tiny", &c->model));
    int ulysses = o->ulysses > 0 ? o->ulysses : o->world / o->ring;
    USP_CHECK(usp_mesh_shape_make(o->world, ulysses > 0 ? ulysses : 1, o->ring, &c->shape));
    const usp_schedule_shape shape = {.ulysses = c->shape.ulysses, .ring = c->shape.ring, .causal = 1,
                                      .n_heads = c->model.n_head, .n_kv_heads = c->model.n_kv_head};
    const usp_schedule_i *schedule = usp_schedule_pick(o->attention, shape.ulysses, shape.ring);
    if (o->ulysses == 0 && schedule->check(&shape) != USP_OK) /* the default U = W / R: a mesh that would work */
        USP_CHECK(default_ulysses_check(o, &c->model, c->shape.ulysses));
    c->data = o->data, c->seq_len = o->seq, c->pad = o->pad, c->batch = o->batch, c->steps = o->steps;
    c->until = o->until, c->lr = o->lr, c->seed = seed, c->attention = o->attention;
    c->save_dir = o->save, c->resume_dir = o->resume, c->log_every = o->log_every, c->save_every = o->save_every;
    c->keep = o->keep, c->window = o->mask.window, c->eot = o->mask.eot;
    c->eval_samples = o->eval_samples, c->eval_every = o->eval_every, c->eval_only = !strcmp(command, "eval");
    if (o->warmup >= 0)
        c->warmup = o->warmup;
    USP_CHECK(memory_options_apply(&o->memory, c));
    if (o->keep > 1 && !o->save)
        return usp_error(USP_ERR_CONFIG, "--keep %d without --save: give --save DIR (the newest checkpoint; the "
                         "older ones are kept beside it as DIR-step-N)", o->keep);
    if (o->save_every && !o->save)
        return usp_error(USP_ERR_CONFIG, "--save-every %d without --save: give --save DIR, where the checkpoint "
                         "goes every %d steps and at the end", o->save_every, o->save_every);
    if (c->eval_only && !o->resume)
        return usp_error(USP_ERR_CONFIG, "usp eval needs --resume DIR (a checkpoint to evaluate)");
    if (c->eval_only && o->eval_samples < 1)
        return usp_error(USP_ERR_CONFIG, "usp eval --eval-samples %d: evaluating no sample measures nothing; give "
                         "--eval-samples 1 or more (default 64)", o->eval_samples);
    int real = strcmp(o->backend, "sim") != 0;
    if (real && o->attention_kernel)
        return usp_error(USP_ERR_CONFIG, "--attention-kernel %s with --backend %s: the kernel's rates are the "
                         "simulator's model; a real backend runs and times its own kernels (drop --attention-kernel)",
                         o->attention_kernel, o->backend);
    USP_CHECK(runtime_registry_sim_compute(o->backend, o->sim_compute, o->meta, NULL));
    if (real && o->dot) /* --trace is measured on every backend (docs/viz.md) */
        return usp_error(USP_ERR_CONFIG, "--dot with --backend %s: pictures are the simulator's (drop --dot, or run "
                         "the same options on --backend sim); --trace FILE.json works here and records measured times",
                         o->backend);
    if (o->dump_dir)
        USP_CHECK(output_path_check("--dump-dir", o->dump_dir, 1));
    int64_t padded;
    USP_CHECK(usp_train_check(c, &padded)); /* before any rank runs: the message then names no rank */
    if (o->meta && !real) { /* shapes only answers in seconds, as usp plan does, or is refused */
        int64_t steps = c->eval_only ? 0 : c->until > 0 && c->until < c->steps ? c->until : c->steps;
        int64_t evals = c->eval_samples > 0 || c->eval_only ? (c->eval_samples + c->batch - 1) / c->batch : 0;
        evals *= 1 + (c->eval_every > 0 ? (steps - 1) / c->eval_every : 0); /* --eval-every's, the last step's aside */
        USP_CHECK(plan_check_ring_steps(c, steps + evals, "steps and evaluation batches (--steps, --until, "
                                        "--eval-samples)"));
        USP_CHECK(plan_check_rank_layers(c, steps + evals, "steps and evaluation batches (--steps, --until, "
                                         "--eval-samples)"));
    }
    if (o->dot) { /* a picture this build cannot write is an option error, found before anything runs */
        USP_CHECK(viz_check_output("--dot", o->dot));
        USP_CHECK(output_path_check("--dot", o->dot, 0));
    }
    if (o->trace)
        USP_CHECK(output_path_check("--trace", o->trace, 0));
    if (o->save)
        USP_CHECK(output_path_check("--save", o->save, 1));
    if (o->save && o->keep > 1) /* DIR-step-N beside DIR, N up to 19 digits */
        USP_CHECK(usp_atomic_path_check("--keep", o->save, strlen("-step-") + 19, strlen("-step-") + 19));
    return USP_OK;
}

/* --dot: the wait-for graph of a report, else the traffic map of the whole run,
 * coloured by the links of the modelled cluster (*drawn says which, or NULL). */
static usp_status write_picture(const usp_runtime_t *rt, usp_status run, const char *command, const train_options *o,
                                const usp_train_config *c, const char **drawn)
{
    usp_runtime_cluster cluster = usp_runtime_cluster_of(rt);
    char title[64], caption[320];
    snprintf(title, sizeof title, "Traffic map of usp %s", command);
    snprintf(caption, sizeof caption, "usp %s --model %s %s %d --seq %d --batch %d: world %d = dp %d x ring %d x "
             "ulysses %d on the modelled %s (%d node%s).", command, c->model.name,
             c->eval_only ? "--eval-samples" : "--steps", c->eval_only ? o->eval_samples : o->steps, o->seq,
             o->batch, c->shape.world, c->shape.dp, c->shape.ring, c->shape.ulysses, cluster.name, cluster.nodes,
             cluster.nodes > 1 ? "s" : "");
    return viz_run_picture(rt, run, title, caption, o->dot, drawn);
}

/* The run's options as a JSON object's text (malloc'd; NULL out of memory): the
 * trace file keeps them (otherData.usp_run), so that `usp plan --compare FILE`
 * plans the same run with nothing else given (plan/compare.h reads them). */
static char *run_options_json(const train_options *o, const usp_train_config *c, usp_runtime_cluster cluster)
{
    json_t *j = json_pack("{s:s, s:s, s:s?, s:s, s:s, s:i, s:i, s:i, s:i, s:I, s:b, s:I, s:I, s:s?, s:i, s:s?, s:s, "
                          "s:i, s:b, s:b, s:b, s:b, s:i, s:s, s:b}",
                          "command", c->eval_only ? "eval" : "train", "backend", o->backend, "model",
                          o->model ? o->model : o->resume ? o->resume : "tiny", "model_name", c->model.name, "data",
                          o->data, "world", c->shape.world, "dp", c->shape.dp, "ulysses", c->shape.ulysses, "ring",
                          c->shape.ring, "seq", (json_int_t)c->seq_len, "pad", c->pad, "batch", (json_int_t)c->batch,
                          "steps", (json_int_t)c->steps, "topology", o->topology, "nodes", o->nodes,
                          "attention_kernel", o->attention_kernel, "dtype", o->memory.dtype, "zero", o->memory.zero,
                          "recompute", o->memory.recompute, "selective_recompute",
                          o->memory.selective_recompute, "tiled_mlp", o->memory.tiled_mlp, "tiled_loss",
                          o->memory.tiled_loss, "tile_rows", o->memory.tile_rows, "machine", cluster.name,
                          "modelled", cluster.modelled);
    if (j && (json_object_set_new(j, "attention", json_string(o->attention)) != 0 ||
              json_object_set_new(j, "micro_batches", json_integer(o->memory.micro_batches)) != 0 ||
              json_object_set_new(j, "bucket_mb", json_real(o->memory.bucket_mb)) != 0 ||
              json_object_set_new(j, "grad_reduce", json_string(o->memory.grad_reduce)) != 0 ||
              json_object_set_new(j, "window", json_integer(o->mask.window)) != 0 ||
              json_object_set_new(j, "eot", json_integer(o->mask.eot)) != 0))
        json_decref(j), j = NULL;
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return text;
}

/* The trace file of a finished run, with its clock and options beside the events. */
static usp_status write_trace(const usp_runtime_t *rt, const char *command, const train_options *o,
                              const usp_train_config *c)
{
    if (!usp_runtime_trace(rt))
        return usp_error(USP_ERR_CONFIG, "--trace %s: the %s runtime records no trace", o->trace, usp_runtime_name(rt));
    usp_runtime_cluster cluster = usp_runtime_cluster_of(rt);
    char generator[32];
    snprintf(generator, sizeof generator, "usp %s", command);
    char *options = run_options_json(o, c, cluster);
    if (!options)
        return usp_error(USP_ERR_RUNTIME, "--trace %s: out of memory writing the run's options", o->trace);
    viz_trace_run run = {.generator = generator, .options_json = options,
                         .clock = cluster.modelled ? NULL
                                                   : "measured: seconds since rank 0's process started, every "
                                                     "process's clock aligned to rank 0's (ts in "
                                                     "microseconds); ops timed on the host around each op, or between "
                                                     "device events on a GPU"};
    usp_status s = viz_trace_write_run(usp_runtime_trace(rt), o->trace, &run);
    free(options);
    return s;
}

/* --trace (Chrome trace JSON for a .json name, plain text otherwise) and --dot
 * of a finished run, failed runs included: their trace and wait-for picture
 * are what explains the failure. Says what it wrote on log->out (on log->err after
 * a failure; never between --json's records) and why a file is missing on
 * log->err. One file failing does not keep the other from being written; the
 * first failure is returned. */
static usp_status write_outputs(const usp_runtime_t *rt, usp_status run, const char *command, const train_options *o,
                                const usp_train_config *c, const log_file *log)
{
    FILE *say = run != USP_OK ? log->err : o->json ? NULL : log->out;
    usp_status first = USP_OK;
    if (o->trace) {
        int chrome = viz_trace_path_is_json(o->trace);
        usp_status s = write_trace(rt, command, o, c);
        if (s != USP_OK)
            cli_error(log->err, command, "%s\n", usp_error_message()), first = s;
        else if (say)
            fprintf(say, "usp %s: trace in %s%s\n", command, o->trace,
                    chrome ? " (Chrome trace JSON: open it in https://ui.perfetto.dev)" : "");
    }
    if (o->dot) {
        const char *drawn;
        usp_status s = write_picture(rt, run, command, o, c, &drawn);
        if (s != USP_OK)
            cli_error(log->err, command, "%s\n", usp_error_message()), first = first ? first : s;
        else if (!drawn)
            fprintf(log->err, "usp %s: no picture in %s: the run failed, but not in a deadlock, mismatch or rank "
                    "failure (the message above says why)\n", command, o->dot);
        else if (say)
            fprintf(say, "usp %s: %s in %s\n", command, drawn, o->dot);
    }
    return first;
}

/* SIGINT or SIGTERM during a run: the run stops after a whole step, saves (--save) and exits 128 + the
 * signal, as a process the signal ended would. The handler is reset when it fires: a second one ends
 * the process at once, the way a second Ctrl-C does elsewhere. */
static atomic_int stop_signal; /* lock-free: a signal handler and the watchdog thread both write it */

static void on_stop_signal(int sig) { atomic_store(&stop_signal, sig); }

static void catch_stop_signals(void)
{
    struct sigaction a = {.sa_handler = on_stop_signal, .sa_flags = SA_RESTART | SA_RESETHAND};
    sigemptyset(&a.sa_mask);
    sigaction(SIGINT, &a, NULL);
    sigaction(SIGTERM, &a, NULL);
}

/* What a stopped run says: the step, where it saved, how to go on. */
static void say_stopped(FILE *err, const char *command, const train_options *o, int64_t step)
{
    int sig = atomic_load(&stop_signal);
    const char *name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "another rank's signal";
    if (o->save)
        fprintf(err, "usp %s: stopped by %s after step %lld of %d; saved to %s: go on with usp %s --resume %s "
                "(and the same options)\n", command, name, (long long)step, o->steps, o->save, command, o->save);
    else
        fprintf(err, "usp %s: stopped by %s after step %lld of %d; nothing saved (no --save DIR)\n", command,
                name, (long long)step, o->steps);
}

/* The run of a checked config, its lines printed to log->out and log->err; *exit_code: the process's. */
static usp_status run_config(const char *command, const train_options *o, char **argv, usp_train_config *c,
                             const usp_checkpoint_state *resumed, log_file *log, int *exit_code)
{
    usp_runtime_options ro = {.world_size = c->shape.world, .shapes_only = o->meta, .cluster = o->topology,
                              .nodes = o->nodes, .attention_kernel = o->attention_kernel,
                              .inject = o->inject.items, .n_inject = o->inject.n,
                              .trace = o->trace != NULL || o->dot != NULL,
                              .check_collectives = o->check_collectives, .timeout_s = o->timeout,
                              .dump_dir = o->dump_dir, .stop = c->eval_only ? NULL : &stop_signal,
                              .record_schedule = o->explore.explore};
    /* without a launcher, mpi and nccl start their processes here (after the checks above, so that a bad
     * option is one message, not one per process); the launched ones pass through */
    USP_CHECK(runtime_registry_sim_compute(o->backend, o->sim_compute, o->meta, &ro));
    USP_CHECK(runtime_registry_launch(o->backend, &ro, argv));
    if (ro.stop) /* before the runtime: mpi's and nccl's watchdog take the signals over, and pass them on */
        catch_stop_signals();
    usp_runtime_t *rt;
    USP_CHECK(runtime_registry_create(o->backend, &ro, &rt));
    int prints = usp_runtime_prints(rt); /* under a launcher, rank 0's process; errors: every process its own */
    FILE *out = log->out;
    if (!o->json && prints)
        fprintf(out, "usp %s: model %s, world %d = dp %d x ring %d x ulysses %d, attention %s, seq %d, batch %d, "
                "data %s\n", command, c->model.name, c->shape.world, c->shape.dp, c->shape.ring, c->shape.ulysses,
                o->attention, o->seq, o->batch, o->data);
    if (!o->json && prints && o->resume && !c->eval_only)
        fprintf(out, resumed->is_usp ? "usp %s: resumed from %s at step %lld of %d\n"
                     : "usp %s: resumed from %s: Hugging Face weights, a fresh optimizer, step %lld of %d\n",
                command, o->resume, (long long)resumed->step, o->steps);
    if (prints)
        train_report_input_notes(log->err, c, o->meta);
    train_report report = {.out = prints ? out : NULL, .json = o->json};
    report.measured = !usp_runtime_cluster_of(rt).modelled;
    report.device = o->meta ? NULL : strcmp(o->backend, "nccl") == 0 ? "the GPUs" : "this CPU";
    c->on_record = train_report_record, c->record_ctx = &report;
    usp_train_result result = {.passkey_accuracy = -1};
    usp_status s = usp_calloc((void **)&result.peak_bytes, (size_t)c->shape.world, sizeof *result.peak_bytes,
                              "the peaks");
    if (s == USP_OK)
        s = usp_calloc((void **)&result.attention_flops, (size_t)c->shape.world, sizeof *result.attention_flops,
                       "the ranks' attention work");
    usp_train_run runarg = {.config = c, .result = &result};
    c->stop = ro.stop;
    if (s == USP_OK)
        s = usp_runtime_run(rt, usp_train_rank, &runarg);
    int explore_code = 0;
    train_options shown = *o; /* an explored deadlock's wait-for picture takes --dot's place */
    if (s == USP_OK && o->explore.explore)
        s = explore_after_run(rt, &o->explore, command, o->dot, out, log->err, &explore_code);
    if (explore_code)
        shown.dot = NULL;
    if (s == USP_OK) {
        if (prints)
            train_report_summary(&report, c, &result, usp_runtime_cluster_of(rt));
        if (prints && !o->json && o->save)
            fprintf(out, "usp %s: saved to %s (step %lld)\n", command, o->save, (long long)result.steps_done);
        if (prints && result.stopped)
            say_stopped(log->err, command, o, result.steps_done);
    } else {
        cli_error(log->err, command, *usp_runtime_report(rt) ? "%s" : "%s\n",
                  *usp_runtime_report(rt) ? usp_runtime_report(rt) : usp_error_message());
    }
    usp_status os = prints ? write_outputs(rt, s, command, &shown, c, log) : USP_OK;
    /* a process of the world that was not signalled itself stopped with the others: it says SIGTERM's code */
    int stopped_code = 128 + (atomic_load(&stop_signal) ? atomic_load(&stop_signal) : SIGTERM);
    *exit_code = s != USP_OK ? (int)s : os != USP_OK ? (int)os : explore_code ? explore_code
                 : result.stopped ? stopped_code : 0;
    train_report_free(&report);
    free(result.peak_bytes), free(result.attention_flops);
    usp_runtime_destroy(rt);
    return USP_OK;
}

/* The options checked, --log opened (by rank 0's process alone: a launcher's rank is known before MPI
 * starts), and the run, whose errors the log keeps too. */
static usp_status run(const char *command, const train_options *o, char **argv, int *exit_code)
{
    usp_train_config c;
    usp_checkpoint_state resumed;
    USP_CHECK(build_config(command, o, &c, &resumed));
    log_file log;
    USP_CHECK(log_file_open(&log, usp_launcher_rank() <= 0 ? o->log : NULL));
    usp_status s = run_config(command, o, argv, &c, &resumed, &log, exit_code);
    if (s != USP_OK) {
        cli_error(log.err, command, "%s\n", usp_error_message());
        *exit_code = (int)s;
    }
    usp_status ls = log_file_close(&log);
    if (ls != USP_OK)
        cli_error(stderr, command, "%s\n", usp_error_message());
    if (ls != USP_OK && *exit_code == 0)
        *exit_code = (int)ls;
    return USP_OK;
}

/* Options of training that `usp eval` has no use for: it runs no step, keeps no schedule and writes nothing
 * (and has no step's streams to explore). */
static const char *const training_only[] = {"--steps", "--until", "--lr", "--warmup", "--save", "--save-every",
                                            "--keep", "--log-every", "--eval-every", "--explore", "--gpu-slots",
                                            "--explore-states", NULL};

static int is_training_only(const char *name)
{
    for (int i = 0; training_only[i]; i++)
        if (strcmp(name, training_only[i]) == 0)
            return 1;
    return 0;
}

/* usp eval's table: train's, with the training-only options refused (cli.h: a NULL target), each by name
 * with what eval does instead. */
static void eval_options(const cli_option *all, cli_option *out)
{
    int n = 0;
    for (const cli_option *o = all; o->name; o++, n++) {
        out[n] = *o;
        if (is_training_only(o->name))
            out[n].target = NULL, out[n].help = "is an option of usp train: usp eval runs no training step and "
                                                "writes nothing, it evaluates --resume DIR on --eval-samples "
                                                "held-out samples (its options: usp eval --help)";
    }
    out[n] = (cli_option){0};
}

/* Parses argv against `options` (n entries, its end included), usp eval's view of them
 * for usp eval; sets *done when --help or --print-config printed what they print. */
static usp_status parse(const char *command, int argc, char **argv, const cli_option *options, size_t n, int *done)
{
    int eval = strcmp(command, "eval") == 0;
    cli_option *eval_table = eval ? malloc(n * sizeof *eval_table) : NULL;
    if (eval && !eval_table)
        return usp_error(USP_ERR_RUNTIME, "out of memory for the options of usp eval");
    if (eval)
        eval_options(options, eval_table);
    const cli_command c = {
        .name = command,
        .usage = eval ? "usp eval --resume DIR [options]" : "usp train [options]",
        .about = eval ? "Evaluates a checkpoint: the mean loss on held-out samples of --data and, for passkey\n"
                        "data, the fraction of samples whose key is retrieved, with the same mesh options as train."
                      : "Trains a transformer with sequence parallelism on the simulated cluster. Defaults: 4 ranks,\n"
                        "Ulysses 4, the tiny model on the passkey task (a key near the start, asked for at the\n"
                        "end: only attention across shards can answer), 4000 steps (about 1.5 minutes on 2 cores).\n"
                        "Prints a progress line every --log-every steps and a summary with the passkey accuracy\n"
                        "on held-out samples (every --eval-every steps too); --log FILE keeps the lines in FILE.",
        .options = eval ? eval_table : options,
    };
    usp_status s = cli_parse(&c, argc, argv, 2, done);
    free(eval_table);
    return s;
}

/* --world from --gpus (the nccl runtime's name for it) or the backend's default; --steps not given: one step
 * for an exploration, the passkey task's 4000 for a run; --explore's options and the launcher checked. */
static usp_status resolve_world(const char *command, train_options *o)
{
    if (o->steps < 0)
        o->steps = o->explore.explore ? 1 : 4000;
    USP_CHECK(explore_options_check(&o->explore, o->backend));
    if (o->gpus && strcmp(o->backend, "nccl") != 0)
        return usp_error(USP_ERR_CONFIG, "--gpus %d with --backend %s: --gpus counts GPUs of --backend nccl; ranks "
                         "of %s are --world", o->gpus, o->backend, o->backend);
    if (o->gpus && o->world && o->gpus != o->world)
        return usp_error(USP_ERR_CONFIG, "--gpus %d with --world %d: on --backend nccl a rank is a GPU; give one of "
                         "them", o->gpus, o->world);
    if (o->gpus)
        o->world = o->gpus;
    if (o->world == 0)
        o->world = runtime_registry_default_world(o->backend);
    return runtime_registry_check_launcher(o->backend, command);
}

int cmd_train(int argc, char **argv)
{
    const char *command = argv[1];
    train_options o = {.backend = "sim", .data = "passkey", .attention = "sp", .ring = 1, .seq = 64, .batch = 16,
                       .steps = -1, .warmup = -1, .log_every = 250, .eval_samples = 64, .seed = -1, .lr = 1e-2,
                       .memory = MEMORY_OPTIONS_DEFAULTS, .mask = MASK_OPTIONS_DEFAULTS, .explore = {.slots = 1}};
    const cli_option options[] = {
        {"--backend", CLI_STRING, &o.backend, "sim|mpi|nccl",
         "the runtime, where the ranks run: sim (default, one process), mpi (one process per rank, on the CPU), nccl (one process "
         "per GPU: cuda kernels and cuBLAS, NCCL); mpi and nccl start their processes under mpirun unless a launcher "
         "(mpirun, srun) started this one", 0, -1},
        {"--world", CLI_INT, &o.world, "W", "ranks (simulated GPUs; default 4, or the launcher's process count)", 1, 4096},
        {"--gpus", CLI_INT, &o.gpus, "G", "--backend nccl: GPUs, one rank each (the same as --world; default 1, or the "
         "launcher's process count)", 1, 4096},
        {"--ulysses", CLI_INT, &o.ulysses, "U", "Ulysses degree (default W/R)", 1, 4096},
        {"--ring", CLI_INT, &o.ring, "R", "Ring degree (default 1); DP = W/(U*R)", 1, 4096},
        {"--topology", CLI_STRING, &o.topology, "NAME|FILE",
         "modelled cluster: dgx-h100 (default), dgx-h200, dgx-a100, pcie-gen4, pcie-gen5, pcie-l20, or a JSON file", 0, -1},
        {"--nodes", CLI_INT, &o.nodes, "K", "nodes of the topology (default: as many as --world needs)", 1, 100000},
        {"--attention-kernel", CLI_STRING, &o.attention_kernel, "fa2|fa3|sdpa",
         "attention kernel whose published rates the modelled times use (sim): fa2 (default), fa3 (Hopper), sdpa",
         0, -1},
        {"--sim-compute", CLI_STRING, &o.sim_compute, "cpu|lazy|cuda", "--backend sim: the ranks' compute: cpu, "
         "lazy (stream order checked, exit 1 on a race) or cuda (every rank's kernels on GPU 0; a CUDA build)", 0, -1},
        {"--attention", CLI_STRING, &o.attention, "sp|NAME", runtime_registry_attention_help(0), 0, -1},
        {"--model", CLI_STRING, &o.model, "NAME|FILE",
         "tiny (default), gpt2-124m, llama-1b, llama-7b, llama-13b, or a Hugging Face config.json; with --resume, the "
         "checkpoint's (a different one is refused)", 0, -1},
        {"--data", CLI_STRING, &o.data, "SOURCE", "passkey (default), text:FILE, text:DIR (a document a file), tokens:FILE, tokens32:FILE", 0, -1},
        {"--seq", CLI_INT, &o.seq, "N", "sequence length (default 64: 16 tokens per rank by default)", 2, 1 << 30},
        {"--pad", CLI_FLAG, &o.pad, NULL, "pad a length that does not divide (padding is masked out of the loss)", 0, -1},
        MASK_OPTIONS(o.mask),
        {"--batch", CLI_INT, &o.batch, "B", "global batch: sequences per step over all DP replicas (default 16)", 1, 1 << 20},
        {"--steps", CLI_INT, &o.steps, "S", "training steps: the LR schedule's length (default 4000; 1 with --explore)", 0, 1 << 30},
        {"--until", CLI_INT, &o.until, "K", "stop after step K of the schedule (to --save and --resume later)", 0, 1 << 30},
        {"--lr", CLI_DOUBLE, &o.lr, "X", "peak learning rate (default 1e-2; warmup then cosine to 10%)", 0, -1},
        {"--warmup", CLI_INT, &o.warmup, "S", "warmup steps (default 10% of --steps)", 0, 1 << 30},
        {"--seed", CLI_INT, &o.seed, "S", "seed of the weights and the data (default 1234; with --resume, the saved one)", 0, 2147483647},
        {"--save", CLI_STRING, &o.save, "DIR", "write a Hugging Face style checkpoint at the end (and on SIGINT or "
         "SIGTERM: the run stops after a whole step, saves and exits 130 or 143)", 0, -1},
        {"--save-every", CLI_INT, &o.save_every, "N", "with --save: a checkpoint every N steps too (each replaces "
         "the last, whole)", 1, 1 << 30},
        {"--keep", CLI_INT, &o.keep, "K", "with --save: keep the K newest checkpoints, DIR the newest and the others "
         "beside it as DIR-step-N (default 1: DIR alone)", 1, 1000},
        {"--resume", CLI_STRING, &o.resume, "DIR", "start from a checkpoint (usp's or Hugging Face's)", 0, -1},
        {"--eval-samples", CLI_INT, &o.eval_samples, "N", "held-out samples evaluated at the end and every --eval-every (default 64)", 0, 1 << 20},
        {"--eval-every", CLI_INT, &o.eval_every, "N", "the held-out evaluation every N steps too; training unchanged", 1, 1 << 30},
        {"--log-every", CLI_INT, &o.log_every, "S", "a progress line every S steps (default 250)", 1, 1 << 30},
        {"--log", CLI_STRING, &o.log, "FILE", "append what the run prints (stdout and stderr, each line as printed) "
         "to FILE too: a resumed run continues its log", 0, -1},
        {"--inject", CLI_LIST, &o.inject, "SPEC", "fault KIND:rank=R[,op=OP][,call=K][,group=G] (see usp selftest --help)", 0, -1},
        {"--trace", CLI_STRING, &o.trace, "FILE",
         "write the run's trace: Chrome trace JSON (Perfetto) when FILE ends in .json, plain text otherwise; modelled "
         "times on sim, measured on mpi and nccl (compare them: usp plan --compare FILE)", 0, -1},
        {"--dot", CLI_STRING, &o.dot, "FILE",
         "picture (.dot, .svg, .png, .pdf): the wait-for graph of a deadlock/mismatch, else the traffic map "
         "(sim only)", 0, -1},
        {"--json", CLI_FLAG, &o.json, NULL, "one JSON object per line: per-step records, then a summary", 0, -1},
        {"--meta", CLI_FLAG, &o.meta, NULL, "run on shapes only (meta backend): modelled time and memory, no loss", 0, -1},
        EXPLORE_CLI_OPTIONS(o.explore),
        {"--check-collectives", CLI_FLAG, &o.check_collectives, NULL,
         "real backends: ranks exchange each call's fingerprint first, so a mismatch is a report (exit 3), not a hang "
         "(the simulator always checks)", 0, -1},
        {"--timeout", CLI_DOUBLE, &o.timeout, "SECONDS",
         "real backends: a call not complete after this long ends the run with exit 3 (default 600)", 0, -1},
        {"--dump-dir", CLI_STRING, &o.dump_dir, "DIR",
         "real backends: where each rank writes its flight recorder when the run fails or hangs (read with usp "
         "postmortem DIR)", 0, -1},
        MEMORY_OPTIONS(o.memory),
        {0},
    };
    int done;
    usp_status s = parse(command, argc, argv, options, sizeof options / sizeof *options, &done);
    if (s != USP_OK || done)
        return s != USP_OK ? cli_fail(command, s) : 0;
    s = resolve_world(command, &o);
    int code = 0;
    if (s == USP_OK)
        s = run(command, &o, argv, &code);
    return s != USP_OK ? cli_fail(command, s) : code;
}
