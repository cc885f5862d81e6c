/* The lint of a schedule (schedule_lint.h). */
#include "sim/schedule_lint.h"

#include <stdlib.h>
#include <string.h>

#include "sim/explore_model.h"

#define SHOWN_MAX 4 /* findings printed in full; the rest are counted */

/* know[i * lanes + l]: items of lane l complete before call i starts (calls only; -1 rows unused). */
static usp_status clocks(const xrank *x, int *know)
{
    int lanes = x->lanes;
    size_t n = x->log->n;
    int *cur = calloc((size_t)lanes * (size_t)lanes, sizeof *cur), *host = calloc((size_t)lanes, sizeof *host);
    int *rec = calloc(n * (size_t)lanes + 1, sizeof *rec); /* what each record knew */
    if (!cur || !host || !rec) {
        free(cur), free(host), free(rec);
        return usp_error(USP_ERR_RUNTIME, "out of memory linting a schedule");
    }
    for (size_t i = 0; i < n; i++) {
        const sim_sched_item *it = &x->log->items[i];
        if (it->kind == SIM_SCHED_MEET)
            continue;
        if (it->kind == SIM_SCHED_SYNC) { /* the host knows what the lanes it waited for had issued */
            for (int l = 0; l < lanes; l++)
                if (it->lane < 0 || it->lane == l)
                    for (int k = 0; k < lanes; k++)
                        host[k] = cur[l * lanes + k] > host[k] ? cur[l * lanes + k] : host[k];
            continue;
        }
        int *c = &cur[it->lane * lanes];
        for (int k = 0; k < lanes; k++) {
            c[k] = host[k] > c[k] ? host[k] : c[k];
            if (it->kind == SIM_SCHED_WAIT && it->record >= 0)
                c[k] = rec[it->record * lanes + k] > c[k] ? rec[it->record * lanes + k] : c[k];
        }
        c[it->lane] = x->lane_pos[i]; /* every earlier item of its own lane */
        if (it->kind == SIM_SCHED_RECORD)
            memcpy(&rec[i * (size_t)lanes], c, (size_t)lanes * sizeof *c);
        if (it->kind == SIM_SCHED_CALL)
            memcpy(&know[i * (size_t)lanes], c, (size_t)lanes * sizeof *c);
        c[it->lane] = x->lane_pos[i] + 1;
    }
    free(cur), free(host), free(rec);
    return USP_OK;
}

/* 1 when calls a and b of one rank may be in flight at once: other streams, other groups of more than
 * one member, and neither known complete before the other starts. */
static int concurrent(const sim_world *w, const xrank *x, const int *know, long a, long b)
{
    const sim_sched_item *ia = &x->log->items[a], *ib = &x->log->items[b];
    if (ia->lane == ib->lane || ia->group == ib->group)
        return 0;
    if (w->groups[ia->group]->size < 2 || w->groups[ib->group]->size < 2)
        return 0;
    int lanes = x->lanes;
    return know[b * lanes + ia->lane] <= x->lane_pos[a] && know[a * lanes + ib->lane] <= x->lane_pos[b];
}

/* A rank's first pair, for the report. */
typedef struct finding {
    long a, b; /* -1: none */
} finding;

/* Two findings name the same pair of call sites on the same streams. */
static int same_sites(const xmodel *m, int r, finding f, int q, finding g)
{
    const sim_sched_item *a = xitem(m, r, f.a), *b = xitem(m, r, f.b), *c = xitem(m, q, g.a), *d = xitem(m, q, g.b);
    return a->call.site.line == c->call.site.line && b->call.site.line == d->call.site.line &&
           a->lane == c->lane && b->lane == d->lane && strcmp(a->call.site.file, c->call.site.file) == 0 &&
           strcmp(b->call.site.file, d->call.site.file) == 0;
}

/* "  ranks 0-3, 5: X [stream 1] and Y [stream 0] may be in flight at once ..." for rank r's pair and the
 * ranks after it with the same sites (marked done). */
static void describe_group(usp_strbuf *out, const xmodel *m, const finding *f, int r, char *done)
{
    usp_strbuf list = {0};
    int ranks = 0;
    for (int q = r; q < m->n; q++) {
        if (done[q] || f[q].a < 0 || !same_sites(m, r, f[r], q, f[q]))
            continue;
        done[q] = 1;
        int last = q; /* a run of ranks q..last prints as q-last */
        while (last + 1 < m->n && !done[last + 1] && f[last + 1].a >= 0 && same_sites(m, r, f[r], last + 1, f[last + 1]))
            done[++last] = 1;
        usp_strbuf_printf(&list, ranks ? ", %d" : "%d", q);
        if (last > q)
            usp_strbuf_printf(&list, "-%d", last);
        ranks += last - q + 1;
        q = last;
    }
    usp_strbuf_printf(out, "  rank%s %s", ranks > 1 ? "s" : "", usp_strbuf_text(&list));
    usp_strbuf_free(&list);
    const sim_sched_item *a = xitem(m, r, f[r].a), *b = xitem(m, r, f[r].b);
    usp_strbuf_printf(out, ": ");
    usp_comm_fingerprint_name(out, &a->call);
    usp_strbuf_printf(out, " [stream %d] and ", a->lane);
    usp_comm_fingerprint_name(out, &b->call);
    usp_strbuf_printf(out, " [stream %d] (rank %d's) may be in flight at once: no event or synchronize orders "
                      "them\n", b->lane, r);
}

/* Counts rank r's pairs; its first is f. */
static usp_status lint_rank(const sim_world *w, const xrank *x, sim_lint_result *out, finding *f)
{
    size_t n = x->log->n;
    int *know = calloc(n * (size_t)x->lanes + 1, sizeof *know);
    if (!know)
        return usp_error(USP_ERR_RUNTIME, "out of memory linting a schedule");
    usp_status s = clocks(x, know);
    uint64_t found = 0;
    *f = (finding){-1, -1};
    for (size_t b = 0; b < n && s == USP_OK; b++) {
        if (x->log->items[b].kind != SIM_SCHED_CALL)
            continue;
        for (size_t a = 0; a < b; a++) {
            if (x->log->items[a].kind != SIM_SCHED_CALL || !concurrent(w, x, know, (long)a, (long)b))
                continue;
            if (found++ == 0)
                *f = (finding){(long)a, (long)b};
        }
    }
    out->pairs += found;
    out->ranks += found > 0;
    free(know);
    return s;
}

usp_status sim_schedule_lint(const sim_world *w, sim_lint_result *out)
{
    memset(out, 0, sizeof *out);
    xmodel m;
    USP_CHECK(xmodel_build(w, 1, &m));
    finding *f = calloc((size_t)m.n, sizeof *f);
    char *done = calloc((size_t)m.n, 1);
    usp_status s = f && done ? USP_OK : usp_error(USP_ERR_RUNTIME, "out of memory linting a schedule");
    for (int r = 0; r < m.n && s == USP_OK; r++)
        s = lint_rank(w, &m.ranks[r], out, &f[r]);
    for (int r = 0, shown = 0; r < m.n && s == USP_OK; r++)
        if (!done[r] && f[r].a >= 0 && shown++ < SHOWN_MAX)
            describe_group(&out->report, &m, f, r, done);
    free(f), free(done);
    xmodel_free(&m);
    return s;
}

void sim_lint_result_free(sim_lint_result *r)
{
    usp_strbuf_free(&r->report);
    memset(r, 0, sizeof *r);
}
