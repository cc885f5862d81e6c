/* Max-min fair sharing by progressive filling, advanced from one flow
 * completion to the next (see flow_model.h). */
#include "sim/flow_model.h"

#include <stdlib.h>

/* Working arrays of one run, carved from a single allocation. */
typedef struct flow_work {
    double *remaining;  /* [F] bytes left */
    double *rate;       /* [F] bytes/s in the current interval */
    double *cap_left;   /* [L] capacity not yet given to frozen flows */
    int *active;        /* [F] indices of unfinished flows (compacted) */
    int *frozen;        /* [F] 1 once the flow's rate is fixed in this interval */
    int *unfrozen_on;   /* [L] active flows on the link whose rate is not fixed yet */
    int *link_start;    /* [L + 1] the link -> flows incidence (CSR) */
    int *link_flows;    /* [sum of path lengths] */
} flow_work;

static usp_status work_alloc(const sim_flow_set *s, flow_work *w, void **block)
{
    size_t F = (size_t)s->n_flows, L = (size_t)s->n_links, P = (size_t)s->path_start[s->n_flows];
    size_t doubles = 2 * F + L, ints = 2 * F + L + (L + 1) + P;
    USP_CHECK(usp_malloc(block, doubles * sizeof(double) + ints * sizeof(int) + 1, "the flow model's work arrays"));
    double *d = *block;
    w->remaining = d, w->rate = d + F, w->cap_left = d + 2 * F;
    int *i = (int *)(d + doubles);
    w->active = i, w->frozen = i + F, w->unfrozen_on = i + 2 * F;
    w->link_start = i + 2 * F + L, w->link_flows = i + 2 * F + L + (L + 1);
    return USP_OK;
}

/* Which flows cross each link, so a bottleneck freezes its flows without scanning every path. */
static void build_incidence(const sim_flow_set *s, flow_work *w)
{
    for (int l = 0; l <= s->n_links; l++)
        w->link_start[l] = 0;
    for (int p = 0; p < s->path_start[s->n_flows]; p++)
        w->link_start[s->links[p] + 1]++;
    for (int l = 0; l < s->n_links; l++)
        w->link_start[l + 1] += w->link_start[l];
    int *fill = w->unfrozen_on; /* borrowed as a cursor per link */
    for (int l = 0; l < s->n_links; l++)
        fill[l] = w->link_start[l];
    for (int f = 0; f < s->n_flows; f++)
        for (int p = s->path_start[f]; p < s->path_start[f + 1]; p++)
            w->link_flows[fill[s->links[p]]++] = f;
}

/* The max-min fair rates of the active flows: repeatedly the link with the
 * smallest fair share cap_left / unfrozen flows is the bottleneck of all its
 * unfrozen flows; they get that share, which leaves every other link's share
 * at least as large. */
static void share_links(const sim_flow_set *s, flow_work *w, int n_active)
{
    for (int l = 0; l < s->n_links; l++)
        w->cap_left[l] = s->capacity[l], w->unfrozen_on[l] = 0;
    for (int a = 0; a < n_active; a++) {
        int f = w->active[a];
        w->frozen[f] = 0;
        for (int p = s->path_start[f]; p < s->path_start[f + 1]; p++)
            w->unfrozen_on[s->links[p]]++;
    }
    for (int left = n_active; left > 0;) {
        double share = -1.0;
        for (int l = 0; l < s->n_links; l++)
            if (w->unfrozen_on[l] > 0) {
                double x = w->cap_left[l] / w->unfrozen_on[l];
                share = share < 0.0 || x < share ? x : share;
            }
        /* Every link at the smallest share is a bottleneck: freezing a flow at
         * that share leaves the share of the others unchanged, so one pass takes
         * them all (a symmetric collective is one pass, not one per link). The
         * relative 1e-12 only merges shares that rounding set apart. */
        double at_most = share * (1.0 + 1e-12);
        for (int l = 0; l < s->n_links; l++) {
            if (w->unfrozen_on[l] == 0 || w->cap_left[l] > at_most * w->unfrozen_on[l])
                continue;
            for (int k = w->link_start[l]; k < w->link_start[l + 1]; k++) {
                int f = w->link_flows[k];
                if (w->frozen[f] || w->remaining[f] <= 0.0)
                    continue;
                w->frozen[f] = 1;
                w->rate[f] = share;
                left--;
                for (int p = s->path_start[f]; p < s->path_start[f + 1]; p++) {
                    int m = s->links[p];
                    w->unfrozen_on[m]--;
                    w->cap_left[m] = w->cap_left[m] > share ? w->cap_left[m] - share : 0.0;
                }
            }
        }
    }
}

/* Every flow's bytes left at the start; the flows that move anything become
 * active (the others finish at 0). Returns how many are active. */
static int start_flows(const sim_flow_set *s, flow_work *w, double *finish)
{
    int n_active = 0;
    for (int f = 0; f < s->n_flows; f++) {
        int moves = s->bytes[f] > 0.0 && s->path_start[f + 1] > s->path_start[f];
        w->remaining[f] = moves ? s->bytes[f] : 0.0;
        w->rate[f] = 0.0;
        if (moves)
            w->active[n_active++] = f;
        else if (finish)
            finish[f] = 0.0;
    }
    return n_active;
}

/* The work arrays of a run (freed with *block), its incidence and its active flows. */
static usp_status work_start(const sim_flow_set *s, flow_work *w, void **block, double *finish, int *n_active)
{
    USP_CHECK(work_alloc(s, w, block));
    build_incidence(s, w);
    *n_active = start_flows(s, w, finish);
    return USP_OK;
}

usp_status sim_flow_rates(const sim_flow_set *s, double *rate)
{
    flow_work w;
    void *block;
    int n_active;
    if (s->n_flows == 0)
        return USP_OK;
    USP_CHECK(work_start(s, &w, &block, NULL, &n_active));
    share_links(s, &w, n_active);
    for (int f = 0; f < s->n_flows; f++)
        rate[f] = w.rate[f];
    free(block);
    return USP_OK;
}

usp_status sim_flow_run(const sim_flow_set *s, double *finish, double *seconds)
{
    flow_work w;
    void *block;
    int n_active;
    *seconds = 0.0;
    if (s->n_flows == 0)
        return USP_OK;
    USP_CHECK(work_start(s, &w, &block, finish, &n_active));
    double t = 0.0;
    while (n_active > 0) {
        share_links(s, &w, n_active);
        double dt = -1.0;
        for (int a = 0; a < n_active; a++) {
            int f = w.active[a];
            double tf = w.remaining[f] / w.rate[f];
            dt = dt < 0.0 || tf < dt ? tf : dt;
        }
        /* Flows within a relative 1e-9 of the first completion finish with it:
         * equal flows that rounding set apart would otherwise cost a round each. */
        double cutoff = dt * (1.0 + 1e-9);
        t += dt;
        int kept = 0;
        for (int a = 0; a < n_active; a++) {
            int f = w.active[a];
            if (w.remaining[f] / w.rate[f] <= cutoff) {
                w.remaining[f] = 0.0;
                if (finish)
                    finish[f] = t;
            } else {
                w.remaining[f] -= w.rate[f] * dt;
                w.active[kept++] = f;
            }
        }
        n_active = kept;
    }
    *seconds = t;
    free(block);
    return USP_OK;
}
