/* The U x R hybrid (USP, Fang and Zhao 2024): Ulysses across each group of U ranks, Ring across
 * the R groups: after the all-to-all each rank holds its H/U heads of its group's U T tokens and
 * runs ring attention over the R groups (core/parallel/ulysses.h, ring.h). --attention sp picks it
 * when U > 1 and R > 1. */
#include "core/parallel/ring.h"
#include "core/parallel/schedule.h"
#include "core/parallel/ulysses.h"

static int picks(int ulysses, int ring) { return ulysses > 1 && ring > 1; }

static usp_status check(const usp_schedule_shape *s)
{
    if (s->ulysses < 2 || s->ring < 2)
        return usp_error(USP_ERR_CONFIG, "--attention hybrid with --ulysses %d --ring %d: the hybrid runs Ulysses "
                         "across --ulysses and Ring across --ring, both above 1 (--attention %s runs this mesh)",
                         s->ulysses, s->ring, s->ring == 1 ? "ulysses" : "ring");
    USP_CHECK(ulysses_heads_check(s->n_heads, s->n_kv_heads, s->ulysses));
    usp_seq_layout l;
    return s->seq_len > 0 ? usp_seq_layout_make(usp_layout_for(s->causal, s->ring, s->window, s->seq_len), s->seq_len, s->ulysses, s->ring,
                                                &l)
                          : USP_OK;
}

static usp_layout_kind layout(const usp_schedule_shape *s) { return usp_layout_for(s->causal, s->ring, s->window, s->seq_len); }

/* Rank u * ... of the U x R group: its all-to-alls over T = N / (U R) tokens, then its ring over U T
 * tokens of its KV heads. `rank` is the SP rank r U + u. */
static double sent(const usp_schedule_shape *s, int rank, int64_t batch, int64_t head_dim)
{
    const int U = s->ulysses, u = rank % U;
    const int64_t T = s->seq_len / ((int64_t)U * s->ring);
    int64_t q, kv;
    ulysses_head_counts(s->n_heads, s->n_kv_heads, U, u, &q, &kv);
    const int steps = ring_steps(layout(s), s->ring, (int64_t)U * T, s->causal, s->window);
    return ulysses_sent(s->n_heads, s->n_kv_heads, U, u, batch, T, head_dim) +
           ring_sent(steps, batch, (int64_t)U * T, kv, head_dim);
}

static usp_status create(const usp_schedule_config *c, void **out)
{
    ulysses_attention_config ac = {.backend = c->backend, .stream = c->stream, .ulysses = c->ulysses,
                                   .ring = c->ring, .batch = c->batch, .seq_len = c->seq_len,
                                   .n_heads = c->n_heads, .n_kv_heads = c->n_kv_heads, .head_dim = c->head_dim,
                                   .causal = c->causal, .scale = c->scale, .storage = c->storage,
                                   .eager_ring_merge = c->eager_ring_merge,
                                   .ring_backward_overlap = c->ring_backward_overlap, .overlap = c->ulysses_overlap,
                                   .mask = c->mask, .layout_window = c->layout_window};
    return ulysses_attention_create(&ac, (ulysses_attention **)out);
}

const usp_schedule_i usp_schedule_hybrid = {
    .name = "hybrid",
    .about = "Ulysses across --ulysses U ranks, Ring across the --ring R groups (U, R > 1)",
    .exact = 1,
    .picks = picks, .check = check, .layout = layout, .sent = sent, .diagram = "hybrid",
    .create = create, .forward = ulysses_schedule_forward, .backward = ulysses_schedule_backward,
    .keeps_inputs = ulysses_schedule_keeps_inputs, .destroy = ulysses_schedule_destroy,
};
