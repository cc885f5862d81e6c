/* Exploration (explore.h): a depth-first search over the GPUs' choices, with
 * every state it reaches remembered in a hash set. */
#include "sim/explore.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim/explore_model.h"
#include "sim/explore_report.h"


/* The states seen: an arena of states and an open-addressing table of their indices. */
typedef struct state_set {
    xstate *arena;
    size_t n, cap;   /* states in the arena */
    uint32_t *table; /* index + 1; 0: empty */
    size_t slots;    /* a power of two */
    int ints;
} state_set;

static uint64_t hash_state(const xstate *s, int ints)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < ints; i++)
        h = (h ^ (uint32_t)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static xstate *state_at(const state_set *set, size_t i) { return set->arena + i * (size_t)set->ints; }

static usp_status grow_table(state_set *set)
{
    size_t slots = set->slots ? 2 * set->slots : 1024;
    uint32_t *table = calloc(slots, sizeof *table);
    if (!table)
        return usp_error(USP_ERR_RUNTIME, "out of memory remembering %zu explored states", set->n);
    for (size_t i = 0; i < set->n; i++) {
        size_t at = hash_state(state_at(set, i), set->ints) & (slots - 1);
        while (table[at])
            at = (at + 1) & (slots - 1);
        table[at] = (uint32_t)(i + 1);
    }
    free(set->table);
    set->table = table, set->slots = slots;
    return USP_OK;
}

/* Adds `s` unless it is there; *added 1 when it was new, *index its place. */
static usp_status remember(state_set *set, const xstate *s, int *added, size_t *index)
{
    if (2 * (set->n + 1) > set->slots)
        USP_CHECK(grow_table(set));
    size_t bytes = (size_t)set->ints * sizeof *s, at = hash_state(s, set->ints) & (set->slots - 1);
    for (; set->table[at]; at = (at + 1) & (set->slots - 1))
        if (memcmp(state_at(set, set->table[at] - 1), s, bytes) == 0) {
            *added = 0, *index = set->table[at] - 1;
            return USP_OK;
        }
    if (set->n == set->cap) {
        size_t cap = set->cap ? 2 * set->cap : 1024;
        xstate *grown = realloc(set->arena, cap * bytes);
        if (!grown)
            return usp_error(USP_ERR_RUNTIME, "out of memory remembering %zu explored states", set->n);
        set->arena = grown, set->cap = cap;
    }
    memcpy(state_at(set, set->n), s, bytes);
    set->table[at] = (uint32_t)(set->n + 1);
    *added = 1, *index = set->n++;
    return USP_OK;
}

/* A state where one rank's GPU chooses which ready head starts. */
typedef struct frame {
    size_t state;
    int rank, n_ready, next;
    long ready[XMODEL_MAX_LANES];
} frame;

typedef struct search {
    const xmodel *m;
    state_set seen;
    frame *stack;
    size_t depth, cap;
    sim_explore_result *out;
    const sim_explore_options *o;
    long deadlock_state; /* index of the state that deadlocks (-1: none yet) */
} search;

/* A state just reached for the first time: an end, a deadlock, or a choice to push. */
static usp_status arrive(search *x, size_t index)
{
    const xstate *s = state_at(&x->seen, index);
    if (xfinished(x->m, s)) {
        x->out->orders++;
        return USP_OK;
    }
    frame f = {.state = index};
    f.rank = xchooser(x->m, s, f.ready, &f.n_ready);
    if (f.rank < 0) { /* nothing can move, and work is left */
        x->out->orders++;
        x->deadlock_state = (long)index;
        return USP_OK;
    }
    x->out->choices++;
    if (x->depth == x->cap) {
        size_t cap = x->cap ? 2 * x->cap : 64;
        frame *grown = realloc(x->stack, cap * sizeof *grown);
        if (!grown)
            return usp_error(USP_ERR_RUNTIME, "out of memory exploring %zu choices deep", x->depth);
        x->stack = grown, x->cap = cap;
    }
    x->stack[x->depth++] = f;
    return USP_OK;
}

static usp_status run_search(search *x, xstate *scratch)
{
    const xmodel *m = x->m;
    uint64_t max_states = x->o->max_states ? x->o->max_states : 2000000;
    int added;
    size_t index;
    xmodel_initial(m, scratch);
    xsettle(m, scratch);
    USP_CHECK(remember(&x->seen, scratch, &added, &index));
    USP_CHECK(arrive(x, index));
    while (x->depth > 0 && x->deadlock_state < 0) {
        frame *f = &x->stack[x->depth - 1];
        if (f->next == f->n_ready) {
            x->depth--;
            continue;
        }
        long item = f->ready[f->next++];
        int rank = f->rank;
        memcpy(scratch, state_at(&x->seen, f->state), (size_t)m->state_ints * sizeof *scratch);
        xstart(m, scratch, rank, item);
        xsettle(m, scratch);
        USP_CHECK(remember(&x->seen, scratch, &added, &index));
        if (!added)
            continue;
        if (x->seen.n >= max_states) {
            x->out->exhaustive = 0;
            return USP_OK;
        }
        USP_CHECK(arrive(x, index)); /* may grow the stack: f is not used after it */
    }
    x->out->exhaustive = x->deadlock_state < 0;
    return USP_OK;
}

usp_status sim_explore(const sim_world *w, const sim_explore_options *o, sim_explore_result *out)
{
    memset(out, 0, sizeof *out);
    if (o->slots < 1)
        return usp_error(USP_ERR_CONFIG, "--gpu-slots %d: a GPU runs at least 1 collective kernel at once",
                         o->slots);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    xmodel m;
    USP_CHECK(xmodel_build(w, o->slots, &m));
    for (int r = 0; r < m.n; r++)
        out->items += m.ranks[r].log->n;
    search x = {.m = &m, .out = out, .o = o, .deadlock_state = -1};
    x.seen.ints = m.state_ints;
    xstate *scratch = malloc((size_t)m.state_ints * sizeof *scratch);
    usp_status s = scratch ? run_search(&x, scratch) : usp_error(USP_ERR_RUNTIME, "out of memory exploring");
    out->states = x.seen.n;
    if (s == USP_OK && x.deadlock_state >= 0) {
        out->deadlock = 1;
        s = xreport_deadlock(&m, state_at(&x.seen, (size_t)x.deadlock_state), out);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    out->seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    free(scratch), free(x.stack), free(x.seen.arena), free(x.seen.table);
    xmodel_free(&m);
    return s;
}

void sim_explore_result_free(sim_explore_result *r)
{
    usp_strbuf_free(&r->report);
    usp_report_snapshot_free(&r->snapshot);
    memset(r, 0, sizeof *r);
}
