/* usp_rank_gather in the simulator (core/runtime/rank.h): the figures every rank
 * reports, collected for rank 0 outside the modelled program.
 *
 * Ranks reach their k-th gather at different moments of the run, rank 0 not
 * necessarily last, so the k-th call has a slot that holds what has arrived
 * (and rank 0's destination once it came); the last rank to arrive copies
 * the whole into that destination. No clock moves and nothing is traced: the
 * run's figures are the same whether a command asks for them or not. A slot
 * of a run that aborted before every rank arrived is freed with the world. */
#include <stdlib.h>
#include <string.h>

#include "sim/sim_internal.h"

typedef struct sim_gather_slot {
    size_t bytes;         /* per rank, as the first rank to arrive gave it */
    unsigned char *held;  /* [world * bytes] */
    void *dest;           /* rank 0's `all` once rank 0 arrived */
    int arrived;
} sim_gather_slot;

usp_status sim_rank_gather(const usp_rank_ctx *ctx, const void *mine, size_t bytes, void *all)
{
    sim_rank *r = ctx->gather_ctx;
    sim_world *w = r->world;
    if (sim_is_mirror(w, r->id)) { /* it parked at its first call (sim/mirrors.c): it gathers nothing */
        sim_mirrors_fail(w, "a mirror gathered", r->id);
        return usp_error(USP_ERR_RUNTIME, "rank %d is a mirror: its first rank gathers for it", r->id);
    }
    uint64_t k = r->gathers++;
    if (k >= w->n_gathers) { /* ranks make the same calls, so k is at most one past the end */
        size_t n = w->n_gathers ? 2 * w->n_gathers : 8;
        sim_gather_slot *grown = realloc(w->gathers, n * sizeof *grown);
        if (!grown)
            return usp_error(USP_ERR_RUNTIME, "out of memory for the gather slots of %zu calls", n);
        memset(grown + w->n_gathers, 0, (n - w->n_gathers) * sizeof *grown);
        w->gathers = grown, w->n_gathers = n;
    }
    sim_gather_slot *slot = &w->gathers[k];
    if (slot->arrived == 0) {
        slot->bytes = bytes;
        USP_CHECK(usp_malloc((void **)&slot->held, (size_t)w->n * bytes + 1, "a gather's figures"));
    } else if (bytes != slot->bytes) {
        return usp_error(USP_ERR_RUNTIME, "rank %d gathers %zu bytes per rank as its gather #%llu, an earlier rank "
                         "%zu: every rank must gather the same figures", r->id, bytes, (unsigned long long)k + 1,
                         slot->bytes);
    }
    for (int l = 0; l < w->mirrors; l++) /* its mirrors' figures are its own (sim/mirrors.c) */
        memcpy(slot->held + (size_t)(r->id + l) * bytes, mine, bytes);
    if (r->id == 0)
        slot->dest = all;
    if ((slot->arrived += w->mirrors) == w->n) {
        memcpy(slot->dest, slot->held, (size_t)w->n * bytes);
        free(slot->held);
        slot->held = NULL;
    }
    return USP_OK;
}

void sim_gathers_free(sim_world *w)
{
    for (size_t k = 0; k < w->n_gathers; k++)
        free(w->gathers[k].held);
    free(w->gathers);
    w->gathers = NULL, w->n_gathers = 0;
}
