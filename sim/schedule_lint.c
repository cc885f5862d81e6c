/* The lint of a schedule (schedule_lint.h). */
#include "sim/schedule_lint.h"

#include <stdlib.h>
#include <string.h>

#include "sim/explore_model.h"
#include "sim/explore_report.h"

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

static void describe_pair(usp_strbuf *b, int rank, const xrank *x, long first, long second)
{
    usp_strbuf_printf(b, "  rank %d: ", rank);
    xdescribe_call(b, &x->log->items[first]);
    usp_strbuf_printf(b, " [stream %d] and ", x->log->items[first].lane);
    xdescribe_call(b, &x->log->items[second]);
    usp_strbuf_printf(b, " [stream %d] may be in flight at once: no event or synchronize orders them\n",
                      x->log->items[second].lane);
}

/* Finds rank r's pairs; prints the first few over all ranks (*shown counts them). */
static usp_status lint_rank(const sim_world *w, const xrank *x, int r, sim_lint_result *out, int *shown)
{
    size_t n = x->log->n;
    int *know = calloc(n * (size_t)x->lanes + 1, sizeof *know);
    if (!know)
        return usp_error(USP_ERR_RUNTIME, "out of memory linting a schedule");
    usp_status s = clocks(x, know);
    uint64_t found = 0;
    for (size_t b = 0; b < n && s == USP_OK; b++) {
        if (x->log->items[b].kind != SIM_SCHED_CALL)
            continue;
        for (size_t a = 0; a < b; a++) {
            if (x->log->items[a].kind != SIM_SCHED_CALL || !concurrent(w, x, know, (long)a, (long)b))
                continue;
            if (found++ == 0 && (*shown)++ < SHOWN_MAX)
                describe_pair(&out->report, r, x, (long)a, (long)b);
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
    usp_status s = USP_OK;
    int shown = 0;
    for (int r = 0; r < m.n && s == USP_OK; r++)
        s = lint_rank(w, &m.ranks[r], r, out, &shown);
    if (s == USP_OK && out->pairs > 0 && out->ranks > shown)
        usp_strbuf_printf(&out->report, "  (the first pair of %d of the %d ranks with one)\n",
                          shown < SHOWN_MAX ? shown : SHOWN_MAX, out->ranks);
    xmodel_free(&m);
    return s;
}

void sim_lint_result_free(sim_lint_result *r)
{
    usp_strbuf_free(&r->report);
    memset(r, 0, sizeof *r);
}
