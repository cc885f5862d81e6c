/* `usp plan`: parses the options, runs the planner (plan/report.h) and prints
 * its answer as text or as one JSON object. The figures are the planner's;
 * this file only formats them (units, shares). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/base/clock_seconds.h"
#include "core/parallel/schedule.h"
#include "plan/compare.h"
#include "plan/report.h"
#include "sim/cost_model.h"
#include "sim/topology.h"
#include "tools/cli.h"
#include "tools/runtime_registry.h"
#include "tools/commands.h"
#include "tools/memory_options.h"
#include "tools/mask_options.h"
#include "plan/doc_order.h"
#include "tools/output_path.h"

#define GB 1e9 /* decimal, as GPU memory is marketed */

typedef struct plan_options {
    const char *model, *data, *topology, *trace, *attention_kernel, *compare, *attention;
    int world, ulysses, ring, nodes, seq, batch, pad, sweep, json, no_overlap, forward_only, require_fit;
    int compare_steps;
    int compare_ops;
    memory_options memory;
    mask_options mask;
} plan_options;

static usp_status build_config(const plan_options *o, usp_train_config *c)
{
    usp_train_defaults(c);
    if (usp_model_config_load(o->model, &c->model) != USP_OK) {
        char why[USP_ERROR_MESSAGE_MAX];
        snprintf(why, sizeof why, "%s", usp_error_message());
        return usp_error(USP_ERR_CONFIG, "--model %s: %s", o->model, why);
    }
    int ulysses = o->ulysses > 0 ? o->ulysses : o->world / o->ring;
    USP_CHECK(usp_mesh_shape_make(o->world, ulysses > 0 ? ulysses : 1, o->ring, &c->shape));
    c->data = o->data, c->seq_len = o->seq, c->pad = o->pad, c->attention = o->attention;
    c->batch = o->batch > 0 ? o->batch : c->shape.dp; /* default: one sequence per replica */
    USP_CHECK(memory_options_apply(&o->memory, c));
    c->forward_only = o->forward_only, c->window = o->mask.window;
    if (o->trace) /* written after the plan: a path that cannot take it is refused before */
        USP_CHECK(output_path_check("--trace", o->trace, 0));
    return USP_OK;
}

/* `bytes` in decimal GB, MB or kB, whichever reads best ("1.23 GB"). */
static const char *fmt_bytes(char *buf, size_t size, double bytes)
{
    if (bytes >= 1e9)
        snprintf(buf, size, "%.2f GB", bytes / 1e9);
    else if (bytes >= 1e6)
        snprintf(buf, size, "%.2f MB", bytes / 1e6);
    else
        snprintf(buf, size, "%.2f kB", bytes / 1e3);
    return buf;
}

/* "activations 61%, gradients 20%": the categories that make up most of the peak. */
static void print_dominant(const plan_result *r, size_t total)
{
    double shown = 0;
    for (int i = 0; i < r->n_categories && shown < 0.8 * (double)total; i++) {
        printf("%s%s %.0f%%", i ? ", " : "", r->category[i], 100.0 * (double)r->category_bytes[i] / (double)total);
        shown += (double)r->category_bytes[i];
    }
}

static void print_memory(const plan_result *r, const plan_fit *fit)
{
    const int W = r->shape.world;
    size_t total = r->peak_bytes[r->peak_rank], least = total;
    for (int i = 0; i < W; i++)
        least = r->peak_bytes[i] < least ? r->peak_bytes[i] : least;
    char a[32], b[32];
    printf("\nmemory at the peak, rank %d (the largest of %d; the smallest is %s):\n", r->peak_rank, W,
           fmt_bytes(a, sizeof a, (double)least));
    for (int i = 0; i < r->n_categories; i++)
        printf("  %-22s %13s  %5.1f%%\n", r->category[i], fmt_bytes(a, sizeof a, (double)r->category_bytes[i]),
               total ? 100.0 * (double)r->category_bytes[i] / (double)total : 0.0);
    printf("  %-22s %13s\n", "total", fmt_bytes(a, sizeof a, (double)total));
    if (r->fits) {
        printf("fits: %s of %.0f GB\n", fmt_bytes(b, sizeof b, (double)total), r->capacity_bytes / GB);
        return;
    }
    printf("does not fit: needs %s of %.0f GB (", fmt_bytes(b, sizeof b, (double)total), r->capacity_bytes / GB);
    print_dominant(r, total);
    printf(")");
    if (fit->found && fit->other_split)
        printf(";\n  no memory option makes this split fit, but the same %d GPUs split as --ulysses %d --ring %d "
               "(DP %d, --batch %lld) would fit%s%s: %s, %.4f s a step (planned the same way)\n", W, fit->ulysses,
               fit->ring, fit->dp, (long long)fit->batch, fit->options[0] ? " with " : "", fit->options,
               fmt_bytes(a, sizeof a, (double)fit->peak_bytes), fit->step_time_s);
    else if (fit->found)
        printf(";\n  would fit with %s: %s, %.4f s a step (planned the same way)\n", fit->options,
               fmt_bytes(a, sizeof a, (double)fit->peak_bytes), fit->step_time_s);
    else if (fit->tries)
        printf(";\n  even with %s it needs %s, and no split of the %d GPUs with a larger SP degree fits (%d "
               "tried): use more GPUs (--world) or a shorter --seq\n", fit->options,
               fmt_bytes(a, sizeof a, (double)fit->peak_bytes), W, fit->splits_tried);
    else
        printf(", with every memory option on: use more GPUs (--world) or a shorter --seq\n");
}

static void print_time(const plan_result *r, int forward_only)
{
    double step = r->step_time_s > 0 ? r->step_time_s : 1;
    printf("\ntime per %s (modelled, rank %d ends last%s): %.4f s\n", forward_only ? "forward pass" : "step",
           r->critical_rank, forward_only ? "; --forward-only: no backward, no optimizer step" : "", r->step_time_s);
    printf("  compute                %10.4f s  %5.1f%%\n", r->compute_time_s, 100 * r->compute_time_s / step);
    printf("  communication          %10.4f s  %5.1f%%  (transfers, from the last arrival to the end)\n",
           r->comm_time_s, 100 * r->comm_time_s / step);
    printf("  waiting for peers      %10.4f s  %5.1f%%\n", r->wait_time_s, 100 * r->wait_time_s / step);
    printf("  exposed communication  %10.4f s  %5.1f%%  (step - compute)\n", r->exposed_comm_s,
           100 * r->exposed_comm_s / step);
    printf("communication: %.4g s not overlapped, %.4g s hidden behind compute (ring and Ulysses transfers, gradient buckets)\n",
           r->comm_exposed_s, r->comm_hidden_s);
    if (r->sp_sent_bytes > 0 || r->sp_sent_unmasked_bytes > 0) {
        char a[32];
        printf("attention exchanges: %s a rank a layer, forward and backward", fmt_bytes(a, sizeof a, r->sp_sent_bytes));
        if (r->sp_sent_bytes != r->sp_sent_unmasked_bytes)
            printf(" (%.3g of the %s without --window: the ring passes only the blocks the window reaches)",
                   r->sp_sent_bytes / r->sp_sent_unmasked_bytes, fmt_bytes(a, sizeof a, r->sp_sent_unmasked_bytes));
        printf("\n");
    }
    printf("attention work: max / mean over the ranks %.3f (rank %d the busiest)\n", r->attention_balance,
           r->attention_busiest_rank);
    printf("tokens/s: %.0f\n", r->tokens_per_s);
    printf("FLOPs: forward %.4g PFLOP, step %.4g PFLOP (all ranks", r->fwd_flops / 1e15, r->step_flops / 1e15);
    if (r->recompute_flops > 0)
        printf("; %.4g PFLOP of it recomputed, not counted in MFU", r->recompute_flops / 1e15);
    printf(")\n");
    printf("MFU: %.1f%% of %d x %.1f TFLOP/s\n", 100 * r->mfu, r->shape.world, r->peak_flops / 1e12);
}

static json_t *result_json(const plan_result *r)
{
    json_t *j = json_pack("{s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:b}",
                          "world", r->shape.world, "dp", r->shape.dp, "ulysses", r->shape.ulysses, "ring",
                          r->shape.ring, "fwd_flops", r->fwd_flops, "step_flops", r->step_flops, "step_time_s",
                          r->step_time_s, "compute_time_s", r->compute_time_s, "comm_time_s", r->comm_time_s,
                          "wait_time_s", r->wait_time_s, "exposed_comm_s", r->exposed_comm_s, "tokens_per_s",
                          r->tokens_per_s, "mfu", r->mfu, "peak_flops", r->peak_flops, "capacity_bytes",
                          r->capacity_bytes, "fits", r->fits);
    if (!j)
        return NULL;
    json_t *peaks = json_array(), *at_peak = json_object();
    for (int i = 0; i < r->shape.world; i++)
        json_array_append_new(peaks, json_integer((json_int_t)r->peak_bytes[i]));
    for (int i = 0; i < r->n_categories; i++)
        json_object_set_new(at_peak, r->category[i], json_integer((json_int_t)r->category_bytes[i]));
    json_object_set_new(j, "peak_bytes", peaks);
    json_object_set_new(j, "memory_at_peak", at_peak);
    json_object_set_new(j, "peak_rank", json_integer(r->peak_rank));
    json_object_set_new(j, "recompute_flops", json_real(r->recompute_flops));
    json_object_set_new(j, "sp_sent_bytes", json_real(r->sp_sent_bytes));
    json_object_set_new(j, "attention_balance", json_real(r->attention_balance));
    json_object_set_new(j, "sp_sent_unmasked_bytes", json_real(r->sp_sent_unmasked_bytes));
    json_object_set_new(j, "comm_exposed_s", json_real(r->comm_exposed_s));
    json_object_set_new(j, "comm_hidden_s", json_real(r->comm_hidden_s));
    return j;
}

/* One line of JSON; an object jansson could not build or print (a figure it refused) is an error, never an
 * empty line with exit 0. */
static usp_status print_json(json_t *j)
{
    char *text = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    if (!text)
        return usp_error(USP_ERR_RUNTIME, "--json: the plan could not be written as JSON (a figure that is not a "
                         "finite number, or out of memory)");
    puts(text);
    free(text);
    return USP_OK;
}

static void print_sweep(const plan_sweep_entry *e, int n)
{
    printf("\nU x R splits of the SP degree, fastest first:\n");
    printf("  %4s %5s %5s %10s %10s %10s %10s %12s %6s %12s %5s\n", "rank", "U", "R", "step s", "compute s", "comm s",
           "exposed s", "tokens/s", "MFU", "peak", "fits");
    int place = 0;
    for (int i = 0; i < n; i++) {
        if (!e[i].ok)
            continue;
        const plan_result *r = &e[i].result;
        char peak[32];
        printf("  %4d %5d %5d %10.4f %10.4f %10.4f %10.4f %12.0f %5.1f%% %12s %5s\n", ++place, e[i].ulysses,
               e[i].ring, r->step_time_s, r->compute_time_s, r->comm_time_s, r->exposed_comm_s, r->tokens_per_s,
               100 * r->mfu, fmt_bytes(peak, sizeof peak, (double)r->peak_bytes[r->peak_rank]), r->fits ? "yes" : "no");
    }
    for (int i = 0; i < n; i++)
        if (!e[i].ok)
            printf("  U %d x R %d not possible: %s\n", e[i].ulysses, e[i].ring, e[i].why);
}

/* The summary as one JSON object (fields in docs/planning.md). */
/* --documents: the ring ranks' balance in the order given, and in the order planned (plan/doc_order.h). */
typedef struct documents_choice {
    double given, planned;          /* max / mean of the ring ranks' attention work */
    int reordered;                  /* the plan packs them in another order than given (choose_order) */
    int64_t *given_lengths;         /* the order given, while another is tried */
    double given_step_s, planned_step_s; /* the two orders' step times, when both were planned */
} documents_choice;

static usp_status print_report_json(const plan_options *o, const usp_train_config *c, const sim_cost_model *cost,
                              const plan_report *p, double wall, const documents_choice *dc)
{
    const sim_topology *t = &cost->topology;
    json_t *j = result_json(&p->best);
    if (j && c->doc_lengths) {
        json_t *docs = json_array();
        for (int64_t d = 0; d < c->n_doc_lengths; d++)
            json_array_append_new(docs, json_integer(c->doc_lengths[d]));
        json_object_set_new(j, "documents", docs);
        json_object_set_new(j, "documents_reordered", json_boolean(dc->reordered));
        json_object_set_new(j, "documents_balance_given", json_real(dc->given));
        json_object_set_new(j, "documents_balance", json_real(dc->planned));
    }
    if (j) {
        json_object_set_new(j, "summary", json_true());
        json_object_set_new(j, "model", json_string(c->model.name));
        json_object_set_new(j, "topology", json_string(t->name));
        json_object_set_new(j, "nodes", json_integer(t->nodes));
        json_object_set_new(j, "gpu", json_string(t->gpu.name));
        json_object_set_new(j, "attention_kernel", json_string(sim_attention_kernel_name(t->gpu.attention_kernel)));
        json_object_set_new(j, "attention_efficiency", json_real(t->gpu.attention_efficiency));
        json_object_set_new(j, "attention_backward_efficiency", json_real(t->gpu.attention_backward_efficiency));
        json_object_set_new(j, "dtype", json_string(usp_dtype_name(cost->dtype)));
        json_object_set_new(j, "storage", json_string(usp_dtype_name(c->storage)));
        json_object_set_new(j, "zero", json_integer(c->zero_stage));
        json_object_set_new(j, "recompute", json_boolean(c->recompute_layers));
        json_object_set_new(j, "selective_recompute", json_boolean(c->selective_recompute));
        json_object_set_new(j, "tiled_mlp", json_boolean(c->tiled_mlp));
        json_object_set_new(j, "tiled_loss", json_boolean(c->tiled_loss));
        json_object_set_new(j, "offload", json_string(c->offload_optimizer ? "optimizer" : "none"));
        json_object_set_new(j, "loss", json_string(c->eager_loss ? "eager" : "fused"));
        json_object_set_new(j, "forward_only", json_boolean(c->forward_only));
        json_object_set_new(j, "micro_batches", json_integer(c->micro_batches > 1 ? c->micro_batches : 1));
        json_object_set_new(j, "bucket_mb", json_real(c->bucket_mb > 0 ? c->bucket_mb : 25));
        json_object_set_new(j, "grad_reduce", json_string(usp_dtype_name(c->grad_reduce ? c->grad_reduce : USP_F32)));
        json_object_set_new(j, "ring_merge", json_string(c->eager_ring_merge ? "eager" : "fused"));
        const usp_schedule_i *schedule = usp_schedule_pick(c->attention, c->shape.ulysses, c->shape.ring);
        json_object_set_new(j, "schedule", schedule ? json_string(schedule->name) : json_null());
        json_object_set_new(j, "would_fit_with", p->fit.found ? json_string(p->fit.options) : json_null());
        if (p->fit.found && p->fit.other_split) /* another split of the same GPUs */
            json_object_set_new(j, "would_fit_split", json_pack("{s:i, s:i, s:i, s:I}", "ulysses", p->fit.ulysses,
                                                                "ring", p->fit.ring, "dp", p->fit.dp, "batch",
                                                                (json_int_t)p->fit.batch));
        if (p->fit.tries)
            json_object_set_new(j, "would_fit_splits_tried", json_integer(p->fit.splits_tried));
        if (p->fit.tries)
            json_object_set_new(j, "would_fit_bytes", json_integer((json_int_t)p->fit.peak_bytes));
        json_object_set_new(j, "seq", json_integer(c->seq_len));
        json_object_set_new(j, "batch", json_integer(c->batch));
        json_object_set_new(j, "wall_s", json_real(wall));
        if (o->sweep) {
            json_t *list = json_array();
            for (int i = 0; i < p->n_sweep; i++) {
                const plan_sweep_entry *e = &p->sweep[i];
                json_t *x = e->ok ? result_json(&e->result)
                                  : json_pack("{s:i, s:i, s:s}", "ulysses", e->ulysses, "ring", e->ring, "error",
                                              e->why);
                if (x && e->ok && e->schedule) { /* a refused split's "error" stays its last field */
                    json_object_set_new(x, "schedule", json_string(e->schedule));
                    json_object_set_new(x, "schedule_sent_elements", json_real(e->sent));
                }
                if (!x || json_array_append_new(list, x) != 0) { /* an entry left out is a wrong answer */
                    json_decref(list), json_decref(j);
                    return print_json(NULL);
                }
            }
            json_object_set_new(j, "sweep", list);
        }
    }
    usp_status s = print_json(j);
    json_decref(j);
    return s;
}

static const char *kernel_title(sim_attention_kernel k)
{
    switch (k) {
    case SIM_ATTENTION_FA2: return "FlashAttention-2 rates";
    case SIM_ATTENTION_FA3: return "FlashAttention-3 rates";
    case SIM_ATTENTION_SDPA: return "PyTorch SDPA rates";
    default: return "the GPU file's own rates";
    }
}

static void print_report_text(const plan_options *o, const usp_train_config *c, const sim_cost_model *cost,
                              const plan_report *p, double wall)
{
    const sim_topology *t = &cost->topology;
    const plan_result *best = &p->best;
    double params = (double)usp_model_config_param_count(&c->model);
    printf("usp plan: model %s (%.3g %s parameters), world %d = dp %d x ring %d x ulysses %d, seq %lld, batch %lld\n",
           c->model.name, params >= 1e9 ? params / 1e9 : params / 1e6, params >= 1e9 ? "B" : "M", c->shape.world,
           c->shape.dp, best->shape.ring, best->shape.ulysses, (long long)c->seq_len, (long long)c->batch);
    int file = o->topology && strlen(o->topology) >= 5 && !strcmp(o->topology + strlen(o->topology) - 5, ".json");
    printf("cluster: %s%s%s%s, %d node%s of %d x %s (%.0f GB); compute modelled in %s\n", t->name,
           file ? " (topology file " : "", file ? o->topology : "", file ? ")" : "", t->nodes,
           t->nodes > 1 ? "s" : "", t->gpus_per_node, t->gpu.name, t->gpu.memory_bytes / GB,
           usp_dtype_name(cost->dtype));
    printf("attention kernel: %s (%s), %.0f%% / %.0f%% of the peak forward / backward (--attention-kernel)\n",
           sim_attention_kernel_name(t->gpu.attention_kernel), kernel_title(t->gpu.attention_kernel),
           100 * t->gpu.attention_efficiency, 100 * t->gpu.attention_backward_efficiency);
    printf("memory as the code allocates it: storage %s, ZeRO %d%s%s%s%s%s\n",
           c->storage == USP_F32 ? "fp32" : "bf16 (fp32 master weights and Adam state)", c->zero_stage,
           c->recompute_layers ? ", recomputed layers" : "",
           c->selective_recompute && !c->recompute_layers ? ", norms and MLP activation recomputed" : "",
           c->tiled_mlp ? ", tiled MLP" : "",
           c->tiled_loss ? ", tiled loss" : c->eager_loss ? ", eager loss (PyTorch's [tokens, vocab] copies)" : "",
           c->offload_optimizer ? ", optimizer on the host (its update priced at the node's DRAM bandwidth)" : "");
    if (c->micro_batches > 1)
        printf("gradient accumulation: %lld micro-batches a step, %lld sequences a replica each\n",
               (long long)c->micro_batches, (long long)(c->batch / c->shape.dp / c->micro_batches));
    if (o->sweep) {
        print_sweep(p->sweep, p->n_sweep);
        printf("\nthe fastest, U %d x R %d:\n", best->shape.ulysses, best->shape.ring);
    }
    print_memory(best, &p->fit);
    print_time(best, c->forward_only);
    printf("planned in %.2f s (one step on the meta backend%s%s)\n", wall, o->sweep ? " per split" : "",
           p->fit.tries ? ", and one per option tried" : "");
}

/* Exit code of --require-fit when the step does not fit (docs/CONTRACT.md). */
#define EXIT_DOES_NOT_FIT 5

/* Whether the plan fits the GPU's memory: the step planned, or with --sweep any split. */
static int plan_fits(const plan_report *p)
{
    if (!p->n_sweep)
        return p->best.fits;
    for (int i = 0; i < p->n_sweep; i++)
        if (p->sweep[i].ok && p->sweep[i].result.fits)
            return 1;
    return 0;
}

static usp_status plan_and_print(const plan_options *o, usp_train_config *c, documents_choice *dc, int *fits);

/* The order --documents packs in: the given one, or a more even one for the ring (plan/doc_order.h), which
 * plan_and_print plans beside the given one, keeping the faster. */
static usp_status choose_order(usp_train_config *c, int64_t *lengths, documents_choice *dc)
{
    const int R = c->shape.ring;
    const int64_t window = usp_model_config_common_window(&c->model, c->window), n = c->n_doc_lengths;
    const int zigzag = usp_layout_for(1, R, window, c->seq_len) == USP_LAYOUT_ZIGZAG;
    int64_t *order = malloc((size_t)n * sizeof *order);
    if (!order)
        return usp_error(USP_ERR_RUNTIME, "out of memory ordering --documents");
    dc->given = plan_documents_balance(lengths, n, R, zigzag, window);
    usp_status s = plan_documents_order(lengths, n, R, zigzag, window, order, &dc->planned);
    dc->reordered = s == USP_OK && dc->planned < dc->given - 0.005; /* half a percent: worth planning */
    if (dc->reordered) { /* lengths becomes the new order; the given one is kept to plan beside it */
        dc->given_lengths = order;
        for (int64_t d = 0; d < n; d++) {
            const int64_t t = lengths[d];
            lengths[d] = order[d], order[d] = t;
        }
    } else {
        dc->planned = dc->given;
        free(order);
    }
    return s;
}

/* The --documents line of the text report. */
static void print_documents(const usp_train_config *c, const documents_choice *dc)
{
    printf("documents: %lld packed in each sequence; the ring ranks' attention work %.3f max / mean in the order "
           "given", (long long)c->n_doc_lengths, dc->given);
    if (dc->given_lengths) /* another order was planned beside it */
        printf(", %.3f in the order %s (%.4f s a step against %.4f s; documents are independent: the order "
               "changes no loss)", dc->planned, dc->reordered ? "this plan packs them in" : "tried",
               dc->planned_step_s, dc->given_step_s);
    for (int64_t d = 0; d < c->n_doc_lengths && d < 32 && dc->given_lengths; d++)
        printf("%s%lld", d ? "," : ": ", (long long)c->doc_lengths[d]);
    printf("%s\n", c->n_doc_lengths > 32 && dc->given_lengths ? ",..." : "");
}

/* Plans and prints; *fits says whether the step (or, with --sweep, a split) fits. */
static usp_status run(const plan_options *o, int *fits)
{
    usp_train_config c;
    USP_CHECK(build_config(o, &c));
    int64_t *lengths = NULL;
    documents_choice dc = {.given = 1, .planned = 1};
    if (o->mask.documents)
        USP_CHECK(mask_documents_parse(o->mask.documents, c.seq_len, &lengths, &c.n_doc_lengths));
    c.doc_lengths = lengths;
    usp_status s = lengths ? choose_order(&c, lengths, &dc) : USP_OK;
    if (s == USP_OK)
        s = plan_and_print(o, &c, &dc, fits);
    if (s == USP_OK && lengths && !o->json)
        print_documents(&c, &dc);
    free(lengths), free(dc.given_lengths);
    return s;
}

/* run()'s plan of config c. */
static usp_status plan_and_print(const plan_options *o, usp_train_config *cp, documents_choice *dc, int *fits)
{
    usp_train_config c = *cp;
    sim_cost_model cost = sim_cost_model_default(c.shape.world); /* enough dgx-h100 nodes for the world */
    if (o->topology || o->nodes)
        USP_CHECK(sim_topology_for_world(o->topology, o->nodes, c.shape.world, &cost.topology));
    USP_CHECK(sim_gpu_use_attention_kernel_named(&cost.topology.gpu, o->attention_kernel));
    cost.no_overlap = o->no_overlap;
    double wall = usp_wall_seconds();
    plan_report p;
    USP_CHECK(plan_report_make(&c, &cost, o->sweep, o->trace, &p));
    if (dc->given_lengths) { /* --documents in another order: the given one planned too, the faster kept */
        usp_train_config given = c;
        given.doc_lengths = dc->given_lengths;
        plan_report q;
        USP_CHECK(plan_report_make(&given, &cost, o->sweep, o->trace, &q));
        dc->planned_step_s = p.best.step_time_s, dc->given_step_s = q.best.step_time_s;
        if (dc->given_step_s <= dc->planned_step_s) { /* the given order is no slower: keep it */
            plan_report_free(&p);
            p = q, c = given, dc->reordered = 0;
        } else {
            plan_report_free(&q);
        }
    }
    wall = usp_wall_seconds() - wall;
    usp_status s = USP_OK;
    if (o->json)
        s = print_report_json(o, &c, &cost, &p, wall, dc);
    else
        print_report_text(o, &c, &cost, &p, wall);
    *fits = plan_fits(&p);
    plan_report_free(&p);
    return s;
}

/* --compare FILE (plan/compare.h): a mesh or model option left at its default is the trace's to say. */
static usp_status run_compare(const plan_options *o, const plan_options *defaults)
{
    plan_compare_options c = {
        .trace = o->compare, .topology = o->topology, .nodes = o->nodes, .attention_kernel = o->attention_kernel,
        .model = strcmp(o->model, defaults->model) != 0 ? o->model : NULL,
        .world = o->world != defaults->world ? o->world : 0,
        .ulysses = o->ulysses, .ring = o->ring != defaults->ring ? o->ring : 0,
        .seq = o->seq != defaults->seq ? o->seq : 0, .batch = o->batch, .steps = o->compare_steps,
        .ops = o->compare_ops};
    plan_comparison result;
    USP_CHECK(plan_compare_run(&c, &result));
    if (o->json)
        return plan_comparison_print_json(stdout, &result, o->compare);
    plan_comparison_print(stdout, &result);
    return USP_OK;
}

/* The --compare options that need --compare, and those that do not go with it. */
static usp_status check_compare_options(const plan_options *o)
{
    if (o->compare && o->require_fit)
        return usp_error(USP_ERR_CONFIG, "--require-fit with --compare %s: a comparison plans a run that already "
                         "ran; drop one of them", o->compare);
    if (o->compare_steps && !o->compare)
        return usp_error(USP_ERR_CONFIG, "--compare-steps %d without --compare FILE: it says how many of a traced "
                         "run's steps to compare; give the trace too", o->compare_steps);
    if (o->compare_ops && !o->compare)
        return usp_error(USP_ERR_CONFIG, "--compare-ops without --compare FILE: it adds the ops of a comparison; "
                         "give the trace too");
    return USP_OK;
}

int cmd_plan(int argc, char **argv)
{
    const plan_options defaults = {.model = "tiny", .data = "passkey", .world = 4, .ring = 1, .seq = 64,
                                   .memory = MEMORY_OPTIONS_DEFAULTS, .mask = MASK_OPTIONS_DEFAULTS};
    plan_options o = defaults;
    const cli_option options[] = {
        {"--model", CLI_STRING, &o.model, "NAME|FILE",
         "tiny (default), gpt2-124m, llama-1b, llama-7b, llama-13b, or a Hugging Face config.json", 0, -1},
        {"--world", CLI_INT, &o.world, "W", "ranks (simulated GPUs; default 4)", 1, 4096},
        {"--ulysses", CLI_INT, &o.ulysses, "U", "Ulysses degree (default W/R)", 1, 4096},
        {"--ring", CLI_INT, &o.ring, "R", "Ring degree (default 1); DP = W/(U*R)", 1, 4096},
        {"--topology", CLI_STRING, &o.topology, "NAME|FILE",
         "modelled cluster: dgx-h100 (default), dgx-h200, dgx-a100, pcie-gen4, pcie-gen5, pcie-l20, or a JSON file", 0, -1},
        {"--nodes", CLI_INT, &o.nodes, "K", "nodes of the topology (default: as many as --world needs)", 1, 100000},
        {"--attention-kernel", CLI_STRING, &o.attention_kernel, "fa2|fa3|sdpa",
         "attention kernel whose published rates the model charges: fa2 (default), fa3 (Hopper), sdpa", 0, -1},
        {"--attention", CLI_STRING, &o.attention, "sp|NAME", runtime_registry_attention_help(1), 0, -1},
        {"--seq", CLI_INT, &o.seq, "N", "sequence length (default 64)", 2, 1 << 30},
        {"--pad", CLI_FLAG, &o.pad, NULL, "pad a length that does not divide (padding is masked out of the loss)", 0, -1},
        MASK_PLAN_OPTIONS(o.mask),
        {"--batch", CLI_INT, &o.batch, "B", "global batch: sequences per step over all DP replicas (default DP)", 1, 1 << 20},
        {"--data", CLI_STRING, &o.data, "SOURCE", "passkey (default), text:FILE, tokens:FILE, tokens32:FILE", 0, -1},
        {"--sweep", CLI_FLAG, &o.sweep, NULL, "try every U x R split of the SP degree (U*R fixed) and rank them", 0, -1},
        {"--trace", CLI_STRING, &o.trace, "FILE",
         "write the step's modelled timeline: Chrome trace JSON (Perfetto) when FILE ends in .json, text otherwise",
         0, -1},
        {"--json", CLI_FLAG, &o.json, NULL, "print one JSON summary object (fields in docs/planning.md)", 0, -1},
        {"--forward-only", CLI_FLAG, &o.forward_only, NULL,
         "time a forward pass only (no backward, no optimizer step), as a forward benchmark or a prefill runs; "
         "memory stays the training step's buffers", 0, -1},
        {"--no-overlap", CLI_FLAG, &o.no_overlap, NULL,
         "model no transfer beside compute (every stream on one clock): what the overlap saves", 0, -1},
        {"--require-fit", CLI_FLAG, &o.require_fit, NULL,
         "exit 5 (after the whole report) when the step does not fit the GPU's memory; with --sweep, when no "
         "split fits: for scripts that must not start a run that cannot fit", 0, -1},
        {"--compare", CLI_STRING, &o.compare, "FILE",
         "predicted against measured: plan the run of a usp train --trace FILE.json and print both per phase "
         "(docs/viz.md)", 0, -1},
        {"--compare-steps", CLI_INT, &o.compare_steps, "K",
         "with --compare: the measured side is the median of the run's last K steps, figure by figure (default 1: "
         "the last step alone); a machine shared with other work moves one step's figures by tens of percent",
         1, 1000000},
        {"--compare-ops", CLI_FLAG, &o.compare_ops, NULL,
         "with --compare: also op by op (compute ops by name, collectives by op and bytes a rank sent, their "
         "transfer), the largest measured first: which ops make a phase's ratio", 0, -1},
        MEMORY_OPTIONS(o.memory),
        {0},
    };
    const cli_command c = {
        .name = "plan",
        .usage = "usp plan [options]",
        .about = "Runs ONE training step of the real code on the meta backend (shapes only, nothing\n"
                 "allocated or computed) in the simulator, and prints: memory per rank by category at the\n"
                 "peak against the GPU's capacity, the modelled time per step split into compute,\n"
                 "communication and exposed communication, tokens/s and MFU; --sweep ranks the U x R splits.\n"
                 "The memory is what the code allocates with the memory options given; a step that does not\n"
                 "fit is planned again with more of them (bf16, tiled loss, selective recompute,\n"
                 "micro-batches, ZeRO 1-2, tiled MLP, recomputation, ZeRO 3) to say which would make it fit,\n"
                 "and when none does, with the other U x R x DP splits of the same GPUs before it advises\n"
                 "more GPUs. Compute is modelled in bf16 on the topology's GPUs, attention at the published\n"
                 "rates of --attention-kernel (default fa2).\n"
                 "See docs/planning.md.",
        .options = options,
    };
    int done;
    usp_status s = cli_parse(&c, argc, argv, 2, &done);
    if (s != USP_OK || done)
        return s != USP_OK ? cli_fail("plan", s) : 0;
    if ((s = check_compare_options(&o)) != USP_OK)
        return cli_fail("plan", s);
    int fits = 1;
    s = o.compare ? run_compare(&o, &defaults) : run(&o, &fits);
    if (s != USP_OK)
        return cli_fail("plan", s);
    if (o.require_fit && !fits) {
        fprintf(stderr, "usp plan: --require-fit: the step does not fit%s (exit %d)\n",
                o.sweep ? " with any split" : "", EXIT_DOES_NOT_FIT);
        return EXIT_DOES_NOT_FIT;
    }
    return 0;
}
