/* Reports from flight records (core/safety/postmortem.h): each rank's record becomes
 * the usp_rank_record the simulator would have made of it, and the shared
 * reports (core/safety/comm_report.h) take it from there. */
#include "core/safety/postmortem.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/safety/flight_recorder.h"

struct usp_postmortem {
    int world_size;                /* 0 until the first record */
    usp_flight_record *records;    /* [world_size] */
    char **where;                  /* [world_size]: where each came from; NULL: no record */
    usp_report_snapshot snap;      /* the report's ranks, for the wait-for graph */
    usp_strbuf report;             /* its text, for the graph's title */
};

usp_status usp_postmortem_create(int world_size, usp_postmortem **out)
{
    *out = NULL;
    if (world_size < 0 || world_size > (1 << 20))
        return usp_error(USP_ERR_CONFIG, "a postmortem of %d ranks: expected 1 to %d", world_size, 1 << 20);
    usp_postmortem *pm;
    USP_CHECK(usp_calloc((void **)&pm, 1, sizeof *pm, "a postmortem"));
    usp_status s = USP_OK;
    if (world_size > 0) {
        s = usp_calloc((void **)&pm->records, (size_t)world_size, sizeof *pm->records, "the flight records");
        if (s == USP_OK)
            s = usp_calloc((void **)&pm->where, (size_t)world_size, sizeof *pm->where, "the flight records");
        pm->world_size = world_size;
    }
    if (s != USP_OK) {
        usp_postmortem_destroy(pm);
        return s;
    }
    *out = pm;
    return USP_OK;
}

void usp_postmortem_destroy(usp_postmortem *pm)
{
    if (!pm)
        return;
    for (int i = 0; i < pm->world_size; i++) {
        if (pm->where && pm->where[i])
            usp_flight_record_free(&pm->records[i]);
        if (pm->where)
            free(pm->where[i]);
    }
    free(pm->records), free(pm->where);
    usp_report_snapshot_free(&pm->snap);
    usp_strbuf_free(&pm->report);
    free(pm);
}

/* Takes `rec` (freed here on failure), read from `where`. */
static usp_status adopt(usp_postmortem *pm, usp_flight_record *rec, const char *where)
{
    usp_status s = USP_OK;
    if (pm->world_size == 0) {
        usp_postmortem fresh;
        usp_postmortem *sized;
        s = usp_postmortem_create(rec->world_size, &sized);
        if (s == USP_OK) { /* swap the sized arrays in */
            fresh = *pm, *pm = *sized, *sized = fresh;
            usp_postmortem_destroy(sized);
        }
    } else if (rec->world_size != pm->world_size) {
        const char *other = NULL;
        for (int i = 0; i < pm->world_size && !other; i++)
            other = pm->where[i];
        s = usp_error(USP_ERR_CONFIG, "%s: field 'world_size' is %d, but %s says %d: records of different runs",
                      where, rec->world_size, other ? other : "the postmortem", pm->world_size);
    } else if (pm->where[rec->world_rank]) {
        s = usp_error(USP_ERR_CONFIG, "%s: a second record of rank %d (the first: %s)", where, rec->world_rank,
                      pm->where[rec->world_rank]);
    }
    char *name = s == USP_OK ? strdup(where) : NULL;
    if (s == USP_OK && !name)
        s = usp_error(USP_ERR_RUNTIME, "out of memory keeping the flight record %s", where);
    if (s != USP_OK) {
        usp_flight_record_free(rec);
        return s;
    }
    pm->records[rec->world_rank] = *rec;
    pm->where[rec->world_rank] = name;
    return USP_OK;
}

usp_status usp_postmortem_add(usp_postmortem *pm, const char *json, const char *where)
{
    usp_flight_record rec;
    usp_status s = usp_flight_record_parse(json, where, &rec);
    if (s != USP_OK) {
        usp_flight_record_free(&rec);
        return s;
    }
    return adopt(pm, &rec, where);
}

/* The rank whose record `name` is ("rank-3.usp-flight.json": 3), else -1. */
static int rank_of_name(const char *name)
{
    int rank;
    char again[64];
    if (sscanf(name, "rank-%d.", &rank) != 1 || rank < 0)
        return -1;
    snprintf(again, sizeof again, USP_FLIGHT_FILE_FORMAT, rank);
    return strcmp(again, name) == 0 ? rank : -1; /* "rank-03..." or a temporary file is not a record */
}

usp_status usp_postmortem_load(const char *dir, usp_postmortem **out)
{
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d)
        return usp_error(USP_ERR_CONFIG, "%s: cannot read this directory (%s); name the --dump-dir of the run",
                         dir, strerror(errno));
    usp_postmortem *pm;
    usp_status s = usp_postmortem_create(0, &pm);
    usp_strbuf path = {0};
    for (struct dirent *e; s == USP_OK && (e = readdir(d)) != NULL;) {
        int rank = rank_of_name(e->d_name);
        if (rank < 0)
            continue;
        path.len = 0;
        usp_strbuf_printf(&path, "%s/%s", dir, e->d_name);
        usp_flight_record rec;
        s = usp_flight_record_load(usp_strbuf_text(&path), &rec);
        if (s == USP_OK && rec.world_rank != rank)
            s = usp_error(USP_ERR_CONFIG, "%s: field 'world_rank' is %d, but the file is named for rank %d",
                          usp_strbuf_text(&path), rec.world_rank, rank);
        if (s != USP_OK)
            usp_flight_record_free(&rec);
        else
            s = adopt(pm, &rec, usp_strbuf_text(&path));
    }
    closedir(d);
    usp_strbuf_free(&path);
    if (s == USP_OK && pm->world_size == 0)
        s = usp_error(USP_ERR_CONFIG, "%s: no flight records in it (files %s, which usp train --backend mpi "
                      "--dump-dir %s writes when a rank hangs, fails or is stopped; a run that ends well leaves none)",
                      dir, USP_FLIGHT_FILE_PATTERN, dir);
    if (s != USP_OK) {
        usp_postmortem_destroy(pm);
        return s;
    }
    *out = pm;
    return USP_OK;
}

int usp_postmortem_world_size(const usp_postmortem *pm) { return pm->world_size; }

const usp_flight_record *usp_postmortem_record(const usp_postmortem *pm, int rank)
{
    return rank >= 0 && rank < pm->world_size && pm->where[rank] ? &pm->records[rank] : NULL;
}

/* --- the ranks as the reports see them ------------------------------------ */

static int is_p2p(int op) { return op == USP_OP_SEND || op == USP_OP_RECV || op == USP_OP_SENDRECV; }

static const usp_flight_group *group_of(const usp_flight_record *rec, const char *name)
{
    for (int g = 0; rec && g < rec->n_groups; g++)
        if (strcmp(rec->groups[g].name, name) == 0)
            return &rec->groups[g];
    return NULL;
}

/* Calls world rank `rank` issued on group `g` (a group of another rank): 0
 * when it has no record or never opened the group. Its group of that name
 * must have the same members: a name alone may be reused by unrelated groups. */
static uint64_t calls_on(const usp_postmortem *pm, int rank, const usp_flight_group *g)
{
    const usp_flight_group *mine = group_of(usp_postmortem_record(pm, rank), g->name);
    if (!mine || mine->size != g->size || memcmp(mine->members, g->members, (size_t)g->size * sizeof *g->members))
        return 0;
    return mine->calls_issued;
}

/* Whom the blocked rank `id` waits for (as the simulator's waits_for): the
 * members of its group that have not issued its call yet, or the peers of its
 * transfer (send first). Writes them to `out` when not NULL; returns how many. */
static int waits_for(const usp_postmortem *pm, int id, usp_rank_wait *out)
{
    const usp_comm_fingerprint *call = &pm->records[id].current.call;
    const usp_flight_group *g = group_of(&pm->records[id], call->group);
    int n = 0;
    if (!g)
        return 0;
    if (!is_p2p(call->op)) {
        for (int j = 0; j < g->size; j++) {
            int m = g->members[j];
            uint64_t issued = calls_on(pm, m, g);
            if (m != id && (!usp_postmortem_record(pm, m) || issued < call->seq)) {
                if (out)
                    out[n] = (usp_rank_wait){m, issued};
                n++;
            }
        }
        return n;
    }
    int send_to = call->op == USP_OP_RECV ? -1 : call->peer;
    int recv_from = call->op == USP_OP_RECV ? call->peer : call->op == USP_OP_SENDRECV ? call->recv_peer : -1;
    const int peers[2] = {send_to, recv_from};
    for (int k = 0; k < 2; k++) {
        if (peers[k] < 0 || peers[k] >= g->size || (k == 1 && n == 1 && peers[0] == peers[1]))
            continue;
        int m = g->members[peers[k]];
        if (out)
            out[n] = (usp_rank_wait){m, calls_on(pm, m, g)};
        n++;
    }
    return n;
}

/* Every rank as the reports see it; the waits live in *pool. Free both. */
static usp_status make_records(const usp_postmortem *pm, usp_rank_record **records, usp_rank_wait **pool)
{
    int n = pm->world_size;
    size_t n_waits = 0;
    for (int i = 0; i < n; i++)
        if (usp_postmortem_record(pm, i) && pm->records[i].state == USP_FLIGHT_BLOCKED)
            n_waits += (size_t)waits_for(pm, i, NULL);
    *records = NULL, *pool = NULL;
    USP_CHECK(usp_calloc((void **)records, (size_t)n, sizeof **records, "the ranks' records for a report"));
    usp_status s = usp_calloc((void **)pool, n_waits ? n_waits : 1, sizeof **pool, "the ranks' waits for a report");
    if (s != USP_OK) {
        free(*records);
        *records = NULL;
        return s;
    }
    static const usp_rank_state states[] = {[USP_FLIGHT_RUNNING] = USP_RANK_RUNNABLE,
                                            [USP_FLIGHT_BLOCKED] = USP_RANK_BLOCKED,
                                            [USP_FLIGHT_EXITED] = USP_RANK_EXITED,
                                            [USP_FLIGHT_CRASHED] = USP_RANK_CRASHED};
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        const usp_flight_record *f = usp_postmortem_record(pm, i);
        usp_rank_record *r = &(*records)[i];
        *r = (usp_rank_record){.state = USP_RANK_MISSING, .call.op = -1};
        if (!f)
            continue;
        *r = (usp_rank_record){.state = states[f->state], .call.op = -1, .calls = f->calls, .result = f->result,
                               .error = f->error, .clock = f->clock};
        if (f->state == USP_FLIGHT_BLOCKED) {
            r->call = f->current.call;
            r->collective_seq = f->current.collective_seq;
            r->waits = *pool + at;
            r->n_waits = waits_for(pm, i, *pool + at);
            at += (size_t)r->n_waits;
        } else if (f->state == USP_FLIGHT_CRASHED) {
            r->call = f->crash_at;
            r->crash_call = f->crash_call;
        }
    }
    return USP_OK;
}

/* Why two blocked calls at one position of one group are not one call (the
 * simulator's collective_difference, on fingerprints), or NULL. */
static const char *difference(const usp_comm_fingerprint *a, const usp_comm_fingerprint *b)
{
    if (a->op != b->op)
        return "different ops";
    if (a->dtype != b->dtype && a->op != USP_OP_BARRIER && a->op != USP_OP_SPLIT)
        return "different dtypes";
    if (usp_comm_fingerprint_hash(a) == usp_comm_fingerprint_hash(b))
        return NULL;
    if (a->count != b->count)
        return "different counts";
    if (a->reduce != b->reduce)
        return "different reduce ops";
    if (a->root != b->root)
        return "different roots";
    return "different calls";
}

/* Two blocked ranks whose calls cannot match: collectives at the same seq of
 * one group that differ, or a send and its receive that disagree. *a posted
 * first. Returns the reason, or NULL when there is none. */
static const char *find_mismatch(const usp_postmortem *pm, const usp_rank_record *r, int *a, int *b)
{
    int n = pm->world_size;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            if (i == j || r[i].state != USP_RANK_BLOCKED || r[j].state != USP_RANK_BLOCKED ||
                strcmp(r[i].call.group, r[j].call.group) != 0)
                continue;
            const usp_comm_fingerprint *x = &r[i].call, *y = &r[j].call;
            const char *why = NULL;
            if (j > i && !is_p2p(x->op) && !is_p2p(y->op) && x->seq == y->seq) {
                why = difference(x, y);
            } else if ((x->op == USP_OP_SEND || x->op == USP_OP_SENDRECV) &&
                       (y->op == USP_OP_RECV || y->op == USP_OP_SENDRECV)) { /* i sends to j, j receives from i? */
                const usp_flight_group *g = group_of(&pm->records[i], x->group);
                const usp_flight_group *h = group_of(&pm->records[j], y->group);
                int from = y->op == USP_OP_RECV ? y->peer : y->recv_peer;
                if (g && h && x->peer >= 0 && x->peer < g->size && g->members[x->peer] == j && from >= 0 &&
                    from < h->size && h->members[from] == i)
                    why = x->dtype != y->dtype ? "send and receive dtypes differ"
                          : x->count != y->recv_count ? "send and receive counts differ" : NULL;
            }
            if (why) {
                int j_first = pm->records[j].current.posted < pm->records[i].current.posted;
                *a = is_p2p(x->op) || !j_first ? i : j, *b = *a == i ? j : i;
                return why;
            }
        }
    return NULL;
}

/* When nothing is blocked or lost yet not all exited: each rank's state, plainly. */
static void describe_running(const usp_postmortem *pm, usp_strbuf *text)
{
    usp_strbuf_printf(text, "no rank was blocked in a call, crashed, failed or missing, yet not every rank had "
                            "exited when the records were taken (a hang outside communication, or a stop)\n"
                            "rank states:\n");
    for (int i = 0; i < pm->world_size; i++) {
        const usp_flight_record *f = &pm->records[i];
        usp_strbuf_printf(text, "  rank %d: %s after %llu calls (record taken on %s) [t=%.6f s]\n", i,
                          usp_flight_rank_state_name(f->state), (unsigned long long)f->calls, f->reason, f->clock);
    }
}

/* A blocked rank whose backend marks starts (flight_record.h, `starts`) and whose call was posted and never
 * started: it was queued behind work that did not end, and never reached the backend. */
static int queued(const usp_postmortem *pm, int rank)
{
    const usp_flight_record *f = usp_postmortem_record(pm, rank);
    return f && f->starts && f->state == USP_FLIGHT_BLOCKED && f->current.state == USP_FLIGHT_POSTED;
}

/* "ranks 0, 2 and 3" of the blocked ranks for which queued() is `want`, into b; how many. */
static int name_ranks(const usp_postmortem *pm, const usp_rank_record *r, int want, usp_strbuf *b)
{
    int n = 0, total = 0;
    for (int i = 0; i < pm->world_size; i++)
        total += r[i].state == USP_RANK_BLOCKED && queued(pm, i) == want;
    for (int i = 0; i < pm->world_size; i++)
        if (r[i].state == USP_RANK_BLOCKED && queued(pm, i) == want)
            usp_strbuf_printf(b, "%s%d", n == 0 ? (total == 1 ? "rank " : "ranks ") : n + 1 == total ? " and " : ", ",
                              i), n++;
    return n;
}

/* Every blocked rank is in a call all its members issued (no one waits for another), so the wait-for
 * graph has no cause: the call itself never completes. With starts recorded, the ranks that never started
 * it are the cause (queued behind work that did not end); else the backend does not complete it. The
 * stall report follows its own first line. */
static usp_status report_never_completes(usp_postmortem *pm, const usp_rank_record *r, const char *faults,
                                         usp_strbuf *out)
{
    int first = 0;
    while (r[first].state != USP_RANK_BLOCKED)
        first++;
    const usp_comm_fingerprint *c = &r[first].call;
    usp_strbuf late = {0}, inside = {0}, stall = {0};
    int n_late = name_ranks(pm, r, 1, &late), n_inside = name_ranks(pm, r, 0, &inside);
    usp_strbuf_printf(out, "a call that never completes: ");
    usp_comm_fingerprint_name(out, c);
    usp_strbuf_printf(out, " has every member's call, ");
    if (n_late)
        usp_strbuf_printf(out, "but %s never started it (queued behind work that never ended: the call never "
                          "reached the backend)%s%s %s inside it, waiting\n", usp_strbuf_text(&late),
                          n_inside ? "; " : "", usp_strbuf_text(&inside), n_inside == 1 ? "is" : n_inside ? "are" : "");
    else
        usp_strbuf_printf(out, "and %s inside it: the backend (or the network) does not complete it\n",
                          usp_strbuf_text(&inside));
    usp_status s = usp_report_stall(&pm->snap, r, pm->world_size, faults, &stall);
    const char *rest = strchr(usp_strbuf_text(&stall), '\n');
    usp_strbuf_printf(out, "%s", rest ? rest + 1 : "");
    usp_strbuf_free(&late), usp_strbuf_free(&inside), usp_strbuf_free(&stall);
    return s == USP_ERR_COLLECTIVE ? s : USP_ERR_RANK_FAILED;
}

/* Where each blocked rank's call was when its record was taken, for records whose backend marks starts. */
static void describe_in_flight(const usp_postmortem *pm, const usp_rank_record *r, usp_strbuf *out)
{
    int any = 0;
    for (int i = 0; i < pm->world_size; i++) {
        const usp_flight_record *f = usp_postmortem_record(pm, i);
        if (!f || !f->starts || r[i].state != USP_RANK_BLOCKED)
            continue;
        if (!any++)
            usp_strbuf_printf(out, "calls in flight (started: handed to the backend; queued: posted, never "
                                   "started):\n");
        usp_strbuf_printf(out, "  rank %d: %s #%llu on %s: ", i, usp_comm_kind_name((usp_comm_kind)f->current.call.op),
                          (unsigned long long)f->current.call.seq, f->current.call.group);
        if (queued(pm, i))
            usp_strbuf_printf(out, "queued (posted at t=%.6f s, never started)\n", f->current.posted);
        else
            usp_strbuf_printf(out, "inside it (posted at t=%.6f s, started at t=%.6f s)\n", f->current.posted,
                              f->current.started);
    }
}

usp_status usp_postmortem_report(usp_postmortem *pm, usp_strbuf *text)
{
    usp_rank_record *r;
    usp_rank_wait *pool;
    USP_CHECK(make_records(pm, &r, &pool));
    usp_strbuf injected = {0};
    int n = pm->world_size, blocked = 0, lost = 0, failed = 0, running = 0, waiting = 0, a, b;
    for (int i = 0; i < n; i++) {
        if (usp_postmortem_record(pm, i))
            usp_strbuf_printf(&injected, "%s", pm->records[i].injected);
        blocked += r[i].state == USP_RANK_BLOCKED;
        waiting += r[i].state == USP_RANK_BLOCKED && r[i].n_waits > 0;
        lost += r[i].state == USP_RANK_CRASHED || r[i].state == USP_RANK_MISSING;
        failed += r[i].state == USP_RANK_EXITED && r[i].result != USP_OK;
        running += r[i].state == USP_RANK_RUNNABLE;
    }
    const char *faults = usp_strbuf_text(&injected), *why;
    usp_strbuf *out = &pm->report;
    usp_status s;
    usp_report_snapshot_free(&pm->snap);
    usp_strbuf_free(out);
    if ((why = find_mismatch(pm, r, &a, &b)) != NULL) {
        usp_report_mismatch(&pm->snap, r, n, faults, r[a].call.group, a, b, why, out);
        s = USP_ERR_COLLECTIVE;
    } else if (blocked && !waiting && !lost && !failed) {
        s = report_never_completes(pm, r, faults, out);
    } else if (blocked) {
        s = usp_report_stall(&pm->snap, r, n, faults, out);
        s = s == USP_ERR_COLLECTIVE ? s : USP_ERR_RANK_FAILED; /* a failed rank's own status is not the run's */
    } else if (lost || failed) {
        usp_report_crash(&pm->snap, r, n, faults, out);
        s = USP_ERR_RANK_FAILED;
    } else if (running) {
        describe_running(pm, out);
        s = USP_ERR_RUNTIME;
    } else {
        usp_strbuf_printf(out, "all %d ranks exited OK: nothing hung or failed\n", n);
        s = USP_OK;
    }
    describe_in_flight(pm, r, out);
    usp_strbuf_printf(text, "%s", usp_strbuf_text(out));
    if (out->failed || injected.failed)
        s = usp_error(USP_ERR_RUNTIME, "out of memory writing the postmortem report");
    usp_strbuf_free(&injected);
    free(r), free(pool);
    return s;
}

usp_status usp_postmortem_wait_graph(const usp_postmortem *pm, const char *source, usp_wait_graph *out)
{
    USP_CHECK(usp_report_wait_graph(&pm->snap, usp_strbuf_text(&pm->report), out));
    out->source = source;
    return USP_OK;
}
