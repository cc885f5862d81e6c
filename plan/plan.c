/* One planned step (plan.h): the training code's step on the meta backend in
 * the simulator, and what the finished world says about it. */
#include "plan/plan.h"

#include <math.h>
#include <stdlib.h>

#include "backends/meta/meta_backend.h"
#include "core/base/strbuf.h"
#include "core/parallel/schedule.h"
#include "sim/world.h"
#include "viz/chrome_trace.h"

void plan_result_free(plan_result *r)
{
    free(r->peak_bytes);
    r->peak_bytes = NULL;
}

/* The memory of rank `rank` at its peak, by category, largest first. */
static void read_breakdown(const sim_world *w, int rank, plan_result *out)
{
    const usp_backend_t *be = sim_world_backend(w, rank);
    int n = usp_backend_peak_breakdown(be, out->category, out->category_bytes, PLAN_CATEGORIES_MAX);
    out->n_categories = n < PLAN_CATEGORIES_MAX ? n : PLAN_CATEGORIES_MAX;
    for (int i = 1; i < out->n_categories; i++) /* insertion sort, stable: ties keep allocation order */
        for (int j = i; j > 0 && out->category_bytes[j] > out->category_bytes[j - 1]; j--) {
            const char *name = out->category[j];
            size_t bytes = out->category_bytes[j];
            out->category[j] = out->category[j - 1], out->category_bytes[j] = out->category_bytes[j - 1];
            out->category[j - 1] = name, out->category_bytes[j - 1] = bytes;
        }
}

/* The attention's exchanges of SP rank 0 a layer (plan.h), with the run's window and without. */
static void read_exchanges(const usp_train_config *c, plan_result *out)
{
    const usp_schedule_i *sch = usp_schedule_pick(c->attention, c->shape.ulysses, c->shape.ring);
    if (!sch)
        return;
    usp_schedule_shape shape = {.ulysses = c->shape.ulysses, .ring = c->shape.ring, .seq_len = c->seq_len,
                                .n_heads = c->model.n_head, .n_kv_heads = c->model.n_kv_head, .causal = 1,
                                .window = usp_model_config_common_window(&c->model, c->window)};
    const int64_t batch = c->batch / c->shape.dp / (c->micro_batches > 1 ? c->micro_batches : 1);
    const double elem = (double)usp_dtype_size(c->storage) * (double)(c->micro_batches > 1 ? c->micro_batches : 1);
    out->sp_sent_bytes = sch->sent(&shape, 0, batch, usp_model_config_head_dim(&c->model)) * elem;
    shape.window = 0; /* the same schedule over the same model without any window */
    out->sp_sent_unmasked_bytes = sch->sent(&shape, 0, batch, usp_model_config_head_dim(&c->model)) * elem;
}

/* Reads the finished world and the trainer's step figures into *out. */
static void read_run(const sim_world *w, const sim_cost_model *cost, const usp_train_config *c,
                     const usp_train_step_stats *stats, plan_result *out)
{
    const int W = c->shape.world;
    double first_start = stats[0].start_s, last_end = stats[0].end_s;
    out->critical_rank = 0, out->peak_rank = 0, out->attention_busiest_rank = 0;
    double attention = 0;
    for (int r = 0; r < W; r++) {
        attention += stats[r].attention_flops;
        if (stats[r].attention_flops > stats[out->attention_busiest_rank].attention_flops)
            out->attention_busiest_rank = r;
        out->fwd_flops += stats[r].fwd_flops;
        out->step_flops += stats[r].step_flops;
        out->recompute_flops += stats[r].recompute_flops;
        first_start = stats[r].start_s < first_start ? stats[r].start_s : first_start;
        if (stats[r].end_s > last_end)
            last_end = stats[r].end_s, out->critical_rank = r;
        out->peak_bytes[r] = sim_world_peak_bytes(w, r);
        if (out->peak_bytes[r] > out->peak_bytes[out->peak_rank])
            out->peak_rank = r;
    }
    /* On meta nothing runs outside the step (no weights to load, no peaks to
     * gather), so the critical rank's times over the run are its step's. */
    sim_rank_times t = sim_world_rank_times(w, out->critical_rank);
    out->step_time_s = last_end - first_start;
    out->attention_balance = attention > 0 ? stats[out->attention_busiest_rank].attention_flops * W / attention : 1;
    out->compute_time_s = t.compute_s, out->comm_time_s = t.comm_s, out->wait_time_s = t.wait_s;
    out->exposed_comm_s = out->step_time_s - out->compute_time_s;
    out->comm_hidden_s = t.hidden_comm_s, out->wait_hidden_s = t.hidden_wait_s;
    out->comm_exposed_s = out->comm_time_s - out->comm_hidden_s;
    out->tokens = (double)c->batch * (double)c->seq_len;
    out->tokens_per_s = out->step_time_s > 0 ? out->tokens / out->step_time_s : 0;
    out->peak_flops = sim_gpu_peak_flops(&cost->topology.gpu, cost->dtype);
    double model_flops = out->step_flops - out->recompute_flops; /* MFU counts no work done twice */
    out->mfu = out->step_time_s > 0 ? model_flops / (out->step_time_s * W * out->peak_flops) : 0;
    out->capacity_bytes = cost->topology.gpu.memory_bytes;
    out->fits = (double)out->peak_bytes[out->peak_rank] <= out->capacity_bytes;
    read_breakdown(w, out->peak_rank, out);
    read_exchanges(c, out);
}

/* "--world W" or, when each simulated rank stands for `share` (its Ulysses group), "--world W / U". */
static void world_simulated(usp_strbuf *why, const usp_mesh_shape *sh, int share)
{
    usp_strbuf_printf(why, share > 1 ? "(--world %d / --ulysses %d simulated ranks)" : "--world %d", sh->world,
                      share);
}

/* plan_check_ring_steps when each simulated rank stands for `share` ranks. */
static usp_status check_ring_steps(const usp_train_config *c, int share, int64_t passes, const char *passes_what)
{
    const usp_mesh_shape *sh = &c->shape;
    int64_t seqs = sh->dp > 0 && c->batch > sh->dp ? (c->batch + sh->dp - 1) / sh->dp : 1; /* per replica */
    int64_t layers = c->model.n_layer > 1 ? c->model.n_layer : 1;
    passes = passes > 1 ? passes : 1;
    double per_ring = (double)layers * (double)seqs * (double)passes; /* in doubles: W x R x this overflows */
    double ring_steps = (double)(sh->world / share) * sh->ring * per_ring;
    if (ring_steps <= (double)PLAN_RING_STEPS_MAX)
        return USP_OK;
    usp_strbuf why = {0};
    world_simulated(&why, sh, share);
    usp_strbuf_printf(&why, " x --ring %d x %lld layers (--model %s)", sh->ring, (long long)layers, c->model.name);
    if (seqs > 1)
        usp_strbuf_printf(&why, " x %lld sequences per replica (--batch %lld over %d replicas)", (long long)seqs,
                          (long long)c->batch, sh->dp);
    if (passes > 1)
        usp_strbuf_printf(&why, " x %lld %s", (long long)passes, passes_what);
    double per_world = floor((double)PLAN_RING_STEPS_MAX / per_ring) * share;
    usp_strbuf_printf(&why, " = %.0f ring steps to simulate, more than the simulator's %lld: use",
                      ring_steps, PLAN_RING_STEPS_MAX);
    if (per_world >= 1)
        usp_strbuf_printf(&why, " --world x --ring <= %.0f,", per_world);
    if (per_world >= sh->world)
        usp_strbuf_printf(&why, " --ring %.0f at --world %d,", floor(per_world / sh->world), sh->world);
    if (seqs > 1)
        usp_strbuf_printf(&why, " a smaller --batch,");
    if (passes > 1)
        usp_strbuf_printf(&why, " fewer %s,", passes_what);
    usp_strbuf_printf(&why, " or plan a smaller world and scale");
    usp_status s = usp_error(USP_ERR_CONFIG, "%s", usp_strbuf_text(&why));
    usp_strbuf_free(&why);
    return s;
}

usp_status plan_check_ring_steps(const usp_train_config *c, int64_t passes, const char *passes_what)
{
    return check_ring_steps(c, 1, passes, passes_what);
}

/* plan_check_rank_layers when each simulated rank stands for `share` ranks. */
static usp_status check_rank_layers(const usp_train_config *c, int share, int64_t passes, const char *passes_what)
{
    const usp_mesh_shape *sh = &c->shape;
    int64_t seqs = sh->dp > 0 && c->batch > sh->dp ? (c->batch + sh->dp - 1) / sh->dp : 1; /* per replica */
    int64_t layers = c->model.n_layer > 1 ? c->model.n_layer : 1;
    passes = passes > 1 ? passes : 1;
    double per_rank = (double)layers * (double)seqs * (double)passes;
    double rank_layers = (double)(sh->world / share) * per_rank;
    if (rank_layers <= (double)PLAN_RANK_LAYERS_MAX)
        return USP_OK;
    usp_strbuf why = {0};
    world_simulated(&why, sh, share);
    usp_strbuf_printf(&why, " x %lld layers (--model %s)", (long long)layers, c->model.name);
    if (seqs > 1)
        usp_strbuf_printf(&why, " x %lld sequences per replica (--batch %lld over %d replicas)", (long long)seqs,
                          (long long)c->batch, sh->dp);
    if (passes > 1)
        usp_strbuf_printf(&why, " x %lld %s", (long long)passes, passes_what);
    /* the largest world of whole SP groups (DP replicas) within the cap */
    int sp = sh->ulysses * sh->ring > 0 ? sh->ulysses * sh->ring : 1;
    long long fits = (long long)floor((double)PLAN_RANK_LAYERS_MAX / per_rank) * share / sp * sp;
    usp_strbuf_printf(&why, " = %.0f rank-layers to simulate, more than the planner's %lld (each simulated "
                      "rank's program runs in full on shapes: this one would take minutes): use", rank_layers,
                      PLAN_RANK_LAYERS_MAX);
    if (fits >= sp)
        usp_strbuf_printf(&why, " --world %lld (DP %lld of U %d x R %d) and compare,", fits, fits / sp, sh->ulysses,
                          sh->ring);
    if (seqs > 1)
        usp_strbuf_printf(&why, " a smaller --batch,");
    if (passes > 1)
        usp_strbuf_printf(&why, " fewer %s,", passes_what);
    usp_strbuf_printf(&why, " or a model with fewer layers");
    usp_status s = usp_error(USP_ERR_CONFIG, "%s", usp_strbuf_text(&why));
    usp_strbuf_free(&why);
    return s;
}

usp_status plan_check_rank_layers(const usp_train_config *c, int64_t passes, const char *passes_what)
{
    return check_rank_layers(c, 1, passes, passes_what);
}

usp_status plan_result_check(const plan_result *r)
{
    const struct { const char *name; double value; } figures[] = {
        {"tokens", r->tokens}, {"fwd_flops", r->fwd_flops}, {"step_flops", r->step_flops},
        {"recompute_flops", r->recompute_flops}, {"step_time_s", r->step_time_s},
        {"compute_time_s", r->compute_time_s}, {"comm_time_s", r->comm_time_s}, {"wait_time_s", r->wait_time_s},
        {"exposed_comm_s", r->exposed_comm_s}, {"comm_exposed_s", r->comm_exposed_s},
        {"comm_hidden_s", r->comm_hidden_s}, {"wait_hidden_s", r->wait_hidden_s}, {"tokens_per_s", r->tokens_per_s},
        {"peak_flops", r->peak_flops}, {"mfu", r->mfu}, {"capacity_bytes", r->capacity_bytes},
    };
    for (size_t i = 0; i < sizeof figures / sizeof figures[0]; i++)
        if (!isfinite(figures[i].value))
            return usp_error(USP_ERR_RUNTIME, "the plan of U %d x R %d came out with %s = %g: a modelled figure "
                             "must be finite (a cost or topology number out of its range, or a planner bug); no "
                             "answer is printed rather than a wrong one", r->shape.ulysses, r->shape.ring,
                             figures[i].name, figures[i].value);
    return USP_OK;
}

/* One simulated step, each simulated rank standing for `share` (sim_config.mirrors); *mirrors_failed = 1
 * when the mirrors could not stand in. */
static usp_status run_step(const usp_train_config *train, const sim_cost_model *cost, const char *trace, int share,
                           plan_result *out, int *mirrors_failed)
{
    *out = (plan_result){.shape = train->shape};
    *mirrors_failed = 0;
    USP_CHECK(check_ring_steps(train, share, 1, NULL));
    USP_CHECK(check_rank_layers(train, share, 1, NULL));
    int64_t padded; /* a shape the ranks would refuse is refused before W ranks are built (W = 4096: 0.5 GB) */
    USP_CHECK(usp_train_check(train, &padded));
    usp_train_config c = *train;
    c.steps = 1, c.until = 0, c.log_every = 1, c.eval_samples = 0, c.eval_only = 0;
    c.save_dir = c.resume_dir = NULL;
    const int W = c.shape.world;
    usp_train_step_stats *stats;
    USP_CHECK(usp_calloc((void **)&stats, (size_t)W, sizeof *stats, "the step figures"));
    c.step_stats = stats;
    usp_status s = usp_calloc((void **)&out->peak_bytes, (size_t)W, sizeof *out->peak_bytes, "the peaks");
    sim_config sc = sim_config_default(W);
    sc.cost = *cost, sc.trace = trace != NULL, sc.make_backend = usp_backend_meta_create, sc.mirrors = share;
    sim_world *w = NULL;
    if (s == USP_OK)
        s = sim_world_create(&sc, &w);
    usp_train_result result = {.passkey_accuracy = -1};
    usp_train_run run = {.config = &c, .result = &result};
    if (s == USP_OK)
        s = sim_world_run(w, usp_train_rank, &run);
    *mirrors_failed = w && sim_world_mirrors_failed(w);
    if (s == USP_OK)
        read_run(w, cost, &c, stats, out);
    if (s == USP_OK)
        s = plan_result_check(out);
    if (s == USP_OK && trace) /* the modelled timeline of the step: Chrome JSON (Perfetto) or text */
        s = viz_trace_write(sim_world_trace(w), trace);
    sim_world_destroy(w);
    free(stats);
    if (s != USP_OK)
        plan_result_free(out);
    return s;
}

usp_status plan_run_sharing(const usp_train_config *train, const sim_cost_model *cost, const char *trace, int share,
                            plan_result *out)
{
    /* The ranks of a Ulysses group (one position of the ring) do the same on shapes: one of them runs
     * for all (sim/mirrors.c), unless the run is traced (every rank's events), ZeRO shards the optimizer
     * (each rank updates its own shard, in ops of other sizes: a mirror would end some ulps apart, and
     * the plan's wait with it), or the symmetry breaks. */
    int sharded = share == PLAN_SHARE_EXACT && (train->zero_stage > 0 || train->offload_optimizer);
    if (share <= 0)
        share = trace == NULL && !sharded && train->shape.ulysses > 1 ? train->shape.ulysses : 1;
    int failed;
    usp_status s = run_step(train, cost, trace, share, out, &failed);
    if (s != USP_OK && failed && share > 1)
        s = run_step(train, cost, trace, share = 1, out, &failed);
    if (s == USP_OK)
        out->simulated_ranks = train->shape.world / share;
    return s;
}

usp_status plan_run(const usp_train_config *train, const sim_cost_model *cost, const char *trace, plan_result *out)
{
    return plan_run_sharing(train, cost, trace, PLAN_SHARE_EXACT, out);
}
