/* The communicator decorator: counting, fingerprints and fault injection
 * around any backend (core/safety/comm_decorator.h). */
#include "core/safety/comm_decorator.h"

#include <stdlib.h>
#include <string.h>

typedef struct wrapped wrapped;

/* What the decorator knows of one rank. */
typedef struct rank_state {
    int id;                           /* world rank */
    int hosted;                       /* wrapped here: this process runs the rank and sees its calls */
    uint64_t calls_any, calls_of_kind[USP_OP_COUNT];
    int crashed;
    uint64_t crash_call;
    usp_comm_fingerprint crash_at;
    int in_call;
    usp_comm_fingerprint current;     /* the call it is in, or its last one */
    int has_deferred;                 /* a swapped collective waits for the next one */
    usp_comm_op deferred;
    wrapped *deferred_on;
    usp_fault *deferred_by;           /* the swap that holds it back */
    size_t *deferred_arrays;          /* copies of a deferred all_to_all_v's counts and offsets */
    size_t *wrong_counts;             /* a size fault's send counts (its own: a swap may hold deferred_arrays) */
    wrapped **open;                   /* the rank's wrapped handles: where a group fault looks for another group */
    int n_open, cap_open;
} rank_state;

/* The context of one wrapped handle. */
struct wrapped {
    usp_comm_decorator *d;
    rank_state *rank;
    usp_comm_t *inner, *outer;
    uint64_t issued;                  /* calls issued on `inner` (splits, redirected and deferred ones too):
                                         the index of the next one on its group is issued + 1 */
};

struct usp_comm_decorator {
    usp_fault *faults;
    int n_faults;
    int n_ranks;
    rank_state *ranks;                /* [n_ranks] */
    int stopped;
    usp_strbuf injected;
};

static const usp_comm_i decorator_iface;

usp_status usp_comm_decorator_create(const usp_fault *faults, int n_faults, int n_ranks, usp_comm_decorator **out)
{
    for (int i = 0; i < n_faults; i++)
        if (faults[i].rank >= n_ranks)
            return usp_error(USP_ERR_CONFIG, "--inject %s:rank=%d: there are only %d ranks (0 to %d)",
                             usp_fault_kind_name(faults[i].kind), faults[i].rank, n_ranks, n_ranks - 1);
    usp_comm_decorator *d;
    USP_CHECK(usp_calloc((void **)&d, 1, sizeof *d, "the communicator decorator"));
    usp_status s = usp_calloc((void **)&d->ranks, (size_t)n_ranks, sizeof *d->ranks, "the decorator's ranks");
    if (s == USP_OK && n_faults > 0)
        s = usp_malloc((void **)&d->faults, (size_t)n_faults * sizeof *d->faults, "the faults");
    if (s != USP_OK) {
        usp_comm_decorator_destroy(d);
        return s;
    }
    if (n_faults > 0)
        memcpy(d->faults, faults, (size_t)n_faults * sizeof *faults);
    d->n_faults = n_faults;
    d->n_ranks = n_ranks;
    for (int i = 0; i < n_ranks; i++)
        d->ranks[i] = (rank_state){.id = i, .current.op = -1, .crash_at.op = -1};
    *out = d;
    return USP_OK;
}

usp_status usp_comm_decorator_wrap(usp_comm_decorator *d, usp_comm_t *inner, usp_comm_t **out)
{
    int id = inner->world_ranks[inner->rank];
    if (id < 0 || id >= d->n_ranks)
        return usp_error(USP_ERR_RUNTIME, "wrapping group %s: world rank %d is not one of the decorator's %d ranks",
                         inner->name, id, d->n_ranks);
    rank_state *r = &d->ranks[id];
    r->hosted = 1;
    if (r->n_open == r->cap_open) {
        int cap = r->cap_open ? 2 * r->cap_open : 8;
        wrapped **grown = realloc(r->open, (size_t)cap * sizeof *grown);
        if (!grown)
            return usp_error(USP_ERR_RUNTIME, "out of memory wrapping group %s", inner->name);
        r->open = grown;
        r->cap_open = cap;
    }
    wrapped *w;
    USP_CHECK(usp_calloc((void **)&w, 1, sizeof *w, "a wrapped communicator"));
    *w = (wrapped){.d = d, .rank = r, .inner = inner};
    /* the wrapper lives inside the inner handle's life (it destroys the inner one): it borrows its ranks */
    usp_status s = usp_comm_create_borrowed(&decorator_iface, w, inner->rank, inner->size, inner->world_ranks,
                                            inner->name, inner->trace, &w->outer);
    if (s != USP_OK) {
        free(w);
        return s;
    }
    r->open[r->n_open++] = w;
    *out = w->outer;
    return USP_OK;
}

static void wrapped_destroy(void *ctx)
{
    wrapped *w = ctx;
    rank_state *r = w->rank;
    for (int i = 0; i < r->n_open; i++)
        if (r->open[i] == w) {
            r->open[i] = r->open[--r->n_open];
            break;
        }
    if (r->deferred_on == w) /* a swapped call held back on a group that is gone will never be issued */
        r->has_deferred = 0, r->deferred_on = NULL;
    usp_comm_destroy(w->inner);
    free(w);
}

/* --- issuing ------------------------------------------------------------- */

static int is_collective(usp_comm_kind kind)
{
    return kind != USP_OP_SEND && kind != USP_OP_RECV && kind != USP_OP_SENDRECV;
}

/* Issues `op` on the inner handle of `on`, fingerprinted as the call the rank is in. */
static usp_status forward(wrapped *on, usp_comm_op *op)
{
    rank_state *r = on->rank;
    r->current = usp_comm_fingerprint_of(op, on->inner->name, ++on->issued);
    r->in_call = 1;
    usp_status s = on->inner->iface->issue(on->inner->context, op);
    r->in_call = 0;
    return s;
}

/* A split: the backend makes the inner child, the decorator wraps it. */
static usp_status forward_split(wrapped *on, usp_comm_op *op)
{
    usp_comm_t **user_out = op->split_out, *child = NULL;
    op->split_out = &child; /* the backend may fill it while another rank completes the split */
    usp_status s = forward(on, op);
    op->split_out = user_out;
    if (!child)
        return s;
    usp_status ws = usp_comm_decorator_wrap(on->d, child, user_out);
    if (ws != USP_OK) {
        usp_comm_destroy(child);
        return ws;
    }
    return s;
}

/* Another of the rank's groups for a group fault: the one named `wanted` (a
 * prefix), by default world, or any other when the call is on world. */
static wrapped *other_group(const rank_state *r, const wrapped *on, const char *wanted)
{
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < r->n_open; i++) {
            wrapped *c = r->open[i];
            if (c == on || strcmp(c->inner->name, on->inner->name) == 0)
                continue;
            const char *want = *wanted ? wanted : pass == 0 ? "world" : "";
            if (strncmp(c->inner->name, want, strlen(want)) == 0)
                return c;
        }
    return NULL;
}

/* Makes the call's count wrong; NULL, or why it could not (a barrier has no count). */
static const char *make_count_wrong(usp_comm_op *op, rank_state *r, int local, int size)
{
    if (op->kind == USP_OP_BARRIER)
        return "a barrier has no count to make wrong";
    if (op->kind == USP_OP_ALL_TO_ALL_V) {
        size_t *arrays = malloc((size_t)size * sizeof *arrays); /* kept until the decorator goes */
        if (!arrays)
            return "out of memory copying the counts";
        free(r->wrong_counts);
        r->wrong_counts = arrays;
        memcpy(arrays, op->send_counts, (size_t)size * sizeof *arrays);
        arrays[(local + 1) % size] += 1;
        op->send_counts = arrays;
        return NULL;
    }
    if (op->kind == USP_OP_RECV)
        op->recv_count = op->recv_count > 1 ? op->recv_count - 1 : op->recv_count + 1;
    else
        op->count = op->count > 1 ? op->count - 1 : op->count + 1;
    return NULL;
}

/* Keeps a swapped collective for later; its all_to_all_v arrays are copied. */
static usp_status defer(rank_state *r, wrapped *on, const usp_comm_op *op, usp_fault *by)
{
    r->deferred = *op;
    r->deferred_on = on;
    r->deferred_by = by;
    r->has_deferred = 1;
    if (op->kind == USP_OP_ALL_TO_ALL_V) {
        size_t n = (size_t)on->inner->size;
        size_t *a = malloc(4 * n * sizeof *a);
        if (!a)
            return usp_error(USP_ERR_RUNTIME, "out of memory deferring a swapped call");
        memcpy(a, op->send_counts, n * sizeof *a), memcpy(a + n, op->send_offsets, n * sizeof *a);
        memcpy(a + 2 * n, op->recv_counts, n * sizeof *a), memcpy(a + 3 * n, op->recv_offsets, n * sizeof *a);
        free(r->deferred_arrays);
        r->deferred_arrays = a;
        r->deferred.send_counts = a, r->deferred.send_offsets = a + n;
        r->deferred.recv_counts = a + 2 * n, r->deferred.recv_offsets = a + 3 * n;
    }
    return USP_OK;
}

/* Two calls every member must agree on in the same way (op, dtype, counts, reduce op, root, group):
 * issued in either order, they match the same peers' calls. */
static int alike(const wrapped *a_on, const usp_comm_op *a, const wrapped *b_on, const usp_comm_op *b)
{
    usp_comm_fingerprint fa = usp_comm_fingerprint_of(a, a_on->inner->name, 0);
    usp_comm_fingerprint fb = usp_comm_fingerprint_of(b, b_on->inner->name, 0);
    if (a_on->inner != b_on->inner || usp_comm_fingerprint_hash(&fa) != usp_comm_fingerprint_hash(&fb))
        return 0;
    if (a->kind != USP_OP_ALL_TO_ALL_V) /* the hash leaves its per-peer counts out */
        return 1;
    size_t n = (size_t)a_on->inner->size * sizeof *a->send_counts;
    return memcmp(a->send_counts, b->send_counts, n) == 0 && memcmp(a->recv_counts, b->recv_counts, n) == 0;
}

static usp_status wrapped_issue(void *ctx, usp_comm_op *op)
{
    wrapped *on = ctx;
    usp_comm_decorator *d = on->d;
    rank_state *r = on->rank;
    if (!d->stopped && r->crashed)
        return usp_error(USP_ERR_RANK_FAILED, "rank %d crashed (injected) earlier", r->id);
    if (op->kind == USP_OP_SPLIT)
        return forward_split(on, op);
    if (d->stopped)
        return forward(on, op);

    uint64_t any = ++r->calls_any, of_kind = ++r->calls_of_kind[op->kind];
    for (int i = 0; i < d->n_faults; i++) {
        usp_fault *f = &d->faults[i];
        if (f->rank != r->id || !usp_fault_fires(f, op->kind, any, of_kind))
            continue;
        f->fired = 1;
        usp_strbuf_printf(&d->injected, "  rank %d: %s at its call %llu, %s #%llu on %s (%s:%d)\n", r->id,
                          usp_fault_kind_name(f->kind), (unsigned long long)any, usp_comm_kind_name(op->kind),
                          (unsigned long long)on->issued + 1, on->inner->name, op->site.file, op->site.line);
        switch (f->kind) {
        case USP_FAULT_CRASH:
            r->crashed = 1;
            r->crash_call = any;
            r->crash_at = usp_comm_fingerprint_of(op, on->inner->name, on->issued + 1);
            return usp_error(USP_ERR_RANK_FAILED, "rank %d crashed (injected) at its call %llu, %s on %s at %s:%d",
                             r->id, (unsigned long long)any, usp_comm_kind_name(op->kind), on->inner->name,
                             op->site.file, op->site.line);
        case USP_FAULT_SKIP:
            op->not_issued = 1;
            return USP_OK;
        case USP_FAULT_SIZE:
            f->no_effect = make_count_wrong(op, r, on->inner->rank, on->inner->size);
            break;
        case USP_FAULT_GROUP: {
            wrapped *other = other_group(r, on, f->group);
            if (other)
                on = other;
            else
                f->no_effect = "the rank is in no other group of that name";
            break;
        }
        case USP_FAULT_SWAP:
            if (is_collective(op->kind) && !r->has_deferred) {
                op->not_issued = 1;
                return defer(r, on, op, f);
            }
            f->no_effect = is_collective(op->kind) ? "another swap already holds a collective back"
                                                   : "the call is point-to-point, and swap reorders collectives";
            break;
        }
    }
    if (r->has_deferred && is_collective(op->kind) && alike(r->deferred_on, &r->deferred, on, op))
        r->deferred_by->no_effect = "it exchanged two alike collectives: the same op, count, dtype and group, so "
                                    "every rank's calls still match; only their buffers were exchanged";
    usp_status s = forward(on, op);
    if (s == USP_OK && r->has_deferred && is_collective(op->kind)) {
        r->has_deferred = 0;
        s = forward(r->deferred_on, &r->deferred);
    }
    return s;
}

static const usp_comm_i decorator_iface = {
    .api_version = USP_COMM_API_VERSION,
    .name = "decorator",
    .issue = wrapped_issue,
    .destroy = wrapped_destroy,
};

/* --- what the backend asks --------------------------------------------- */

void usp_comm_decorator_stop(usp_comm_decorator *d) { d->stopped = 1; }

uint64_t usp_comm_decorator_calls(const usp_comm_decorator *d, int rank) { return d->ranks[rank].calls_any; }

int usp_comm_decorator_crashed(const usp_comm_decorator *d, int rank, usp_comm_fingerprint *at, uint64_t *call)
{
    const rank_state *r = &d->ranks[rank];
    if (at)
        *at = r->crash_at;
    if (call)
        *call = r->crash_call;
    return r->crashed;
}

int usp_comm_decorator_current_call(const usp_comm_decorator *d, int rank, usp_comm_fingerprint *fp)
{
    *fp = d->ranks[rank].current;
    return d->ranks[rank].in_call;
}

const char *usp_comm_decorator_injected(const usp_comm_decorator *d) { return usp_strbuf_text(&d->injected); }

usp_status usp_comm_decorator_check_fired(const usp_comm_decorator *d)
{
    for (int i = 0; i < d->n_faults; i++) {
        const usp_fault *f = &d->faults[i];
        const char *op = f->op < 0 ? "any" : usp_comm_kind_name((usp_comm_kind)f->op);
        if (f->fired && f->no_effect) /* the run passed, but not because the program survived the fault */
            return usp_error(USP_ERR_CONFIG,
                             "--inject %s:rank=%d,op=%s,call=%llu%s%s fired but changed nothing (%s), so no check had "
                             "a fault to find; pick an op or call the fault applies to",
                             usp_fault_kind_name(f->kind), f->rank, op, (unsigned long long)f->call,
                             f->group[0] ? ",group=" : "", f->group, f->no_effect);
        const rank_state *r = &d->ranks[f->rank];
        if (f->fired || !r->hosted) /* another process runs that rank: only it knows whether the fault fired */
            continue;
        uint64_t made = f->op < 0 ? r->calls_any : r->calls_of_kind[f->op];
        return usp_error(USP_ERR_CONFIG,
                         "--inject %s:rank=%d,op=%s,call=%llu never fired: rank %d made %llu %s call%s (%llu counted "
                         "calls in all), so nothing was injected; pick a call the schedule makes",
                         usp_fault_kind_name(f->kind), f->rank, op, (unsigned long long)f->call, f->rank,
                         (unsigned long long)made, op, made == 1 ? "" : "s", (unsigned long long)r->calls_any);
    }
    return USP_OK;
}

void usp_comm_decorator_destroy(usp_comm_decorator *d)
{
    if (!d)
        return;
    for (int i = 0; d->ranks && i < d->n_ranks; i++) {
        rank_state *r = &d->ranks[i];
        while (r->n_open > 0) { /* handles the rank did not free; their backend frees the inner ones */
            wrapped *w = r->open[r->n_open - 1];
            w->inner = NULL;
            usp_comm_destroy(w->outer);
        }
        free(r->open);
        free(r->deferred_arrays);
        free(r->wrong_counts);
    }
    free(d->ranks);
    free(d->faults);
    usp_strbuf_free(&d->injected);
    free(d);
}
