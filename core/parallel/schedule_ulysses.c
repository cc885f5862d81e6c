/* The Ulysses schedule (DeepSpeed-Ulysses, Jacobs et al. 2023) on a U x 1 mesh: an all-to-all gives
 * each rank all N tokens for H/U heads, local flash attention, an all-to-all brings the output back
 * (core/parallel/ulysses.h). --attention sp picks it when R = 1, one rank included. */
#include "core/parallel/schedule.h"
#include "core/parallel/ulysses.h"

static int picks(int ulysses, int ring) { return ring == 1 && ulysses >= 1; }

static usp_status check(const usp_schedule_shape *s)
{
    if (s->ring != 1)
        return usp_error(USP_ERR_CONFIG, "--attention ulysses with --ring %d: Ulysses alone runs on --ring 1; the "
                         "hybrid runs Ulysses across --ulysses %d and Ring across --ring %d (--attention hybrid, or "
                         "sp)", s->ring, s->ulysses, s->ring);
    USP_CHECK(ulysses_heads_check(s->n_heads, s->n_kv_heads, s->ulysses));
    usp_seq_layout l;
    return s->seq_len > 0 ? usp_seq_layout_make(USP_LAYOUT_CONTIGUOUS, s->seq_len, s->ulysses, 1, &l) : USP_OK;
}

static usp_layout_kind layout(const usp_schedule_shape *s)
{
    (void)s;
    return USP_LAYOUT_CONTIGUOUS;
}

static double sent(const usp_schedule_shape *s, int rank, int64_t batch, int64_t head_dim)
{
    return ulysses_sent(s->n_heads, s->n_kv_heads, s->ulysses, rank, batch, s->seq_len / s->ulysses, head_dim);
}

static usp_status create(const usp_schedule_config *c, void **out)
{
    ulysses_attention_config ac = {.backend = c->backend, .stream = c->stream, .ulysses = c->ulysses, .ring = NULL,
                                   .batch = c->batch, .seq_len = c->seq_len, .n_heads = c->n_heads,
                                   .n_kv_heads = c->n_kv_heads, .head_dim = c->head_dim, .causal = c->causal,
                                   .scale = c->scale, .storage = c->storage, .overlap = c->ulysses_overlap,
                                   .mask = c->mask, .layout_window = c->layout_window};
    return ulysses_attention_create(&ac, (ulysses_attention **)out);
}

const usp_schedule_i usp_schedule_ulysses = {
    .name = "ulysses",
    .about = "all-to-all to all tokens for H/U heads, local attention, all-to-all back (--ring 1)",
    .exact = 1,
    .picks = picks, .check = check, .layout = layout, .sent = sent, .diagram = "ulysses",
    .create = create, .forward = ulysses_schedule_forward, .backward = ulysses_schedule_backward,
    .keeps_inputs = ulysses_schedule_keeps_inputs, .destroy = ulysses_schedule_destroy,
};
