/* Chrome trace event JSON (see chrome_trace.h). Each event is built with
 * jansson, so it is valid JSON by construction, and streamed out as soon as it
 * is made: the document is never held as a tree (a tree of a 100-step training
 * trace takes 15x the memory of its text). Events are emitted per rank,
 * compute then communication, each in the order the rank did them, so every
 * (pid, tid) reads as a well-nested sequence of B/E pairs; one event a line.
 *
 * A training run has events from every step (10^5 and more), so each pass is
 * linear: the events are indexed by rank once, and a transfer's receiving call
 * is found by binary search in the receiver's calls (a rank's calls are
 * sequential: posted, and ended, in the order it made them). */
#include "viz/chrome_trace.h"

#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/atomic_file.h"
#include "core/comm/comm.h"
#include "viz/trace_query.h"

enum { TID_COMPUTE = 0, TID_COMM = 1, TID_STEPS = 2 };

static double us(double seconds) { return seconds * 1e6; }

/* Where the events go: `n` written so far; ok drops to 0 at the first failure
 * (out of memory, a short write) and every later event is skipped. */
typedef struct sink {
    FILE *fp;
    size_t n;
    int ok;
} sink;

/* Writes event `e` (stolen; NULL: out of memory) as the next element of traceEvents. */
static void put(sink *out, json_t *e)
{
    if (!e || !out->ok || fputs(out->n++ ? ",\n" : "\n", out->fp) == EOF ||
        json_dumpf(e, out->fp, JSON_COMPACT | JSON_REAL_PRECISION(12)) != 0)
        out->ok = 0;
    json_decref(e);
}

/* A slice or metadata event; `args` (may be NULL) is stolen. */
static void add(sink *out, const char *ph, const char *name, double ts, int pid, int tid, json_t *args)
{
    json_t *e = json_pack("{s:s, s:s, s:f, s:i, s:i}", "ph", ph, "name", name, "ts", ts, "pid", pid, "tid", tid);
    if (e && args)
        json_object_set_new(e, "args", args);
    else
        json_decref(args);
    put(out, e);
}

static void add_metadata(sink *out, int world, int steps)
{
    char name[32];
    for (int r = 0; r < world && out->ok; r++) {
        snprintf(name, sizeof name, "rank %d", r);
        add(out, "M", "process_name", 0, r, TID_COMPUTE, json_pack("{s:s}", "name", name));
        add(out, "M", "process_sort_index", 0, r, TID_COMPUTE, json_pack("{s:i}", "sort_index", r));
        add(out, "M", "thread_name", 0, r, TID_COMPUTE, json_pack("{s:s}", "name", "compute"));
        add(out, "M", "thread_name", 0, r, TID_COMM, json_pack("{s:s}", "name", "communication"));
        if (steps)
            add(out, "M", "thread_name", 0, r, TID_STEPS, json_pack("{s:s}", "name", "steps"));
    }
}

/* "sendrecv #3 on ring[0]" */
static void comm_name(const usp_trace_t *t, const usp_trace_event *e, char *buf, size_t size)
{
    snprintf(buf, size, "%s #%llu on %s", usp_comm_kind_name((usp_comm_kind)e->kind), (unsigned long long)e->seq,
             usp_trace_group_name(t, e->group));
}

/* Event ids of each rank in trace order: ids[first[r] .. first[r + 1]) are rank r's
 * (a stable counting sort by rank, of the communication or the compute list). */
typedef struct rank_index {
    size_t *ids, *first;
} rank_index;

static int index_by_rank(const usp_trace_t *t, int compute, int world, rank_index *x)
{
    size_t n = compute ? usp_trace_compute_count(t) : usp_trace_count(t);
    x->ids = malloc((n ? n : 1) * sizeof *x->ids);
    x->first = calloc((size_t)world + 1, sizeof *x->first);
    size_t *next = calloc((size_t)world + 1, sizeof *next);
    int ok = x->ids && x->first && next;
    for (size_t i = 0; i < n && ok; i++) {
        const usp_trace_event *e = compute ? usp_trace_compute_at(t, i) : usp_trace_at(t, i);
        if (e->rank >= 0 && e->rank < world)
            x->first[e->rank + 1]++;
    }
    for (int r = 0; r < world && ok; r++)
        x->first[r + 1] += x->first[r];
    for (int r = 0; r <= world && ok; r++)
        next[r] = x->first[r];
    for (size_t i = 0; i < n && ok; i++) {
        const usp_trace_event *e = compute ? usp_trace_compute_at(t, i) : usp_trace_at(t, i);
        if (e->rank >= 0 && e->rank < world)
            x->ids[next[e->rank]++] = i;
    }
    free(next);
    return ok;
}

static void rank_index_free(rank_index *x)
{
    free(x->ids), free(x->first);
    *x = (rank_index){0};
}

static void add_rank(sink *out, const usp_trace_t *t, int rank, const rank_index *compute, const rank_index *comm)
{
    for (size_t k = compute->first[rank]; k < compute->first[rank + 1] && out->ok; k++) {
        const usp_trace_event *e = usp_trace_compute_at(t, compute->ids[k]);
        add(out, "B", e->name, us(e->t_start), rank, TID_COMPUTE,
            json_pack("{s:f, s:f}", "flops", e->flops, "bytes", e->mem_bytes));
        add(out, "E", e->name, us(e->t_end), rank, TID_COMPUTE, NULL);
    }
    char name[128], site[PATH_MAX + 16];
    for (size_t k = 0; k < usp_trace_step_count(t) && out->ok; k++) { /* few: one per step per rank */
        const usp_trace_step *st = usp_trace_step_at(t, k);
        if (st->rank != rank)
            continue;
        snprintf(name, sizeof name, "step %lld", (long long)st->step);
        add(out, "B", name, us(st->t_start), rank, TID_STEPS, json_pack("{s:I}", "step", (json_int_t)st->step));
        add(out, "E", name, us(st->t_end), rank, TID_STEPS, NULL);
    } /* site: a source path the compiler opened (< PATH_MAX), ':' and a line */
    for (size_t k = comm->first[rank]; k < comm->first[rank + 1] && out->ok; k++) {
        const usp_trace_event *e = usp_trace_at(t, comm->ids[k]);
        comm_name(t, e, name, sizeof name);
        snprintf(site, sizeof site, "%s:%d", e->file ? e->file : "?", e->line);
        add(out, "B", name, us(e->t_post), rank, TID_COMM,
            json_pack("{s:s, s:s, s:I, s:I, s:s, s:f}", "op", usp_comm_kind_name((usp_comm_kind)e->kind), "group",
                      usp_trace_group_name(t, e->group), "seq", (json_int_t)e->seq, "bytes_sent",
                      (json_int_t)e->bytes_sent, "call_site", site, "waited_us", us(e->t_start - e->t_post)));
        if (e->t_start > e->t_post) { /* the time the rank spent waiting for the others to arrive */
            add(out, "B", "waiting for peers", us(e->t_post), rank, TID_COMM, NULL);
            add(out, "E", "waiting for peers", us(e->t_start), rank, TID_COMM, NULL);
        }
        add(out, "E", name, us(e->t_end), rank, TID_COMM, NULL);
    }
}

/* The receiver's slice of a transfer that `send` started: `to`'s receiving
 * call on the same group whose span holds the transfer's start (the latest
 * one posted by then), or NULL. `to`'s calls are in the order it made them,
 * so t_post and t_end both rise along comm's list: binary search for the last
 * call posted by then, and look back only while calls still end after it. */
static const usp_trace_event *receiving_call(const usp_trace_t *t, const usp_trace_event *send, int to,
                                             const rank_index *comm, int world)
{
    if (to < 0 || to >= world)
        return NULL;
    size_t lo = comm->first[to], hi = comm->first[to + 1]; /* find the first call posted after the start */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (usp_trace_at(t, comm->ids[mid])->t_post <= send->t_start)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t k = lo; k > comm->first[to]; k--) {
        const usp_trace_event *e = usp_trace_at(t, comm->ids[k - 1]);
        if (e->t_end < send->t_start)
            break;
        if (e->group == send->group && (e->kind == USP_OP_RECV || e->kind == USP_OP_SENDRECV))
            return e;
    }
    return NULL;
}

static void add_flows(sink *out, const usp_trace_t *t, const rank_index *comm, int world)
{
    json_int_t id = 0;
    char name[128];
    for (size_t i = 0; i < usp_trace_count(t) && out->ok; i++) {
        const usp_trace_event *e = usp_trace_at(t, i);
        if (e->kind != USP_OP_SEND && e->kind != USP_OP_SENDRECV)
            continue;
        const usp_trace_peer *p = usp_trace_peers(t, e);
        for (size_t j = 0; j < e->n_peers && out->ok; j++) {
            const usp_trace_event *r = receiving_call(t, e, p[j].peer, comm, world);
            double arrive = r && r->t_end < e->t_end ? r->t_end : e->t_end;
            if (!r)
                arrive = e->t_start;
            snprintf(name, sizeof name, "%s on %s", usp_comm_kind_name((usp_comm_kind)e->kind),
                     usp_trace_group_name(t, e->group));
            ++id;
            put(out, json_pack("{s:s, s:s, s:s, s:I, s:f, s:i, s:i, s:{s:I}}", "ph", "s", "name", name, "cat", "p2p",
                               "id", id, "ts", us(e->t_start), "pid", e->rank, "tid", TID_COMM, "args", "bytes",
                               (json_int_t)p[j].bytes));
            put(out, json_pack("{s:s, s:s, s:s, s:I, s:f, s:i, s:i, s:s}", "ph", "f", "name", name, "cat", "p2p",
                               "id", id, "ts", us(arrive), "pid", p[j].peer, "tid", TID_COMM, "bp", "e"));
        }
    }
}

/* otherData: who wrote the file, what its clock is, and the run's options (a JSON object's text, or NULL). */
static int write_other_data(FILE *fp, const viz_trace_run *run)
{
    json_t *other = json_pack("{s:s, s:s}", "generator", run && run->generator ? run->generator : "usp viz", "clock",
                              run && run->clock ? run->clock : "virtual time of the simulator (ts in microseconds)");
    if (other && run && run->options_json) {
        json_t *options = json_loads(run->options_json, 0, NULL);
        if (!json_is_object(options) || json_object_set_new(other, VIZ_TRACE_RUN_KEY, options) != 0)
            json_decref(other), other = NULL;
    }
    int ok = other && fputs("\n],\"displayTimeUnit\":\"ns\",\"otherData\":", fp) != EOF &&
             json_dumpf(other, fp, JSON_COMPACT | JSON_REAL_PRECISION(12)) == 0 && fputs("}\n", fp) != EOF;
    json_decref(other);
    return ok;
}

/* The whole document into `fp`; 0 when out of memory or a write failed. */
static int write_document(const usp_trace_t *t, FILE *fp, const viz_trace_run *run)
{
    int world = viz_trace_world(t);
    rank_index compute = {0}, comm = {0};
    sink out = {.fp = fp, .ok = 1};
    out.ok = index_by_rank(t, 1, world, &compute) && index_by_rank(t, 0, world, &comm);
    out.ok = out.ok && fputs("{\"traceEvents\":[", fp) != EOF;
    add_metadata(&out, world, usp_trace_step_count(t) > 0);
    for (int r = 0; r < world && out.ok; r++)
        add_rank(&out, t, r, &compute, &comm);
    add_flows(&out, t, &comm, world);
    rank_index_free(&compute);
    rank_index_free(&comm);
    return out.ok && write_other_data(fp, run);
}

usp_status viz_chrome_trace_text(const usp_trace_t *t, char **out)
{
    *out = NULL;
    size_t size = 0;
    FILE *fp = open_memstream(out, &size);
    int ok = fp && write_document(t, fp, NULL);
    if (fp)
        ok = fclose(fp) == 0 && ok; /* sets *out, whatever happened before */
    if (!ok) {
        free(*out);
        *out = NULL;
        return usp_error(USP_ERR_RUNTIME, "out of memory writing the Chrome trace of %zu events", usp_trace_count(t));
    }
    return USP_OK;
}

usp_status viz_chrome_trace_write(const usp_trace_t *t, const char *path)
{
    return viz_chrome_trace_write_run(t, path, NULL);
}

usp_status viz_chrome_trace_write_run(const usp_trace_t *t, const char *path, const viz_trace_run *run)
{
    usp_atomic_file f;
    USP_CHECK(usp_atomic_file_open(&f, path));
    if (!write_document(t, f.fp, run)) {
        usp_atomic_file_abort(&f);
        return usp_error(USP_ERR_RUNTIME, "cannot write the Chrome trace to %s: out of memory or a short write "
                         "(is the disk full?)", path);
    }
    return usp_atomic_file_commit(&f);
}

int viz_trace_path_is_json(const char *path)
{
    size_t n = strlen(path);
    return n >= 5 && strcmp(path + n - 5, ".json") == 0;
}

usp_status viz_trace_write(const usp_trace_t *t, const char *path)
{
    return viz_trace_write_run(t, path, NULL);
}

usp_status viz_trace_write_run(const usp_trace_t *t, const char *path, const viz_trace_run *run)
{
    return viz_trace_path_is_json(path) ? viz_chrome_trace_write_run(t, path, run) : usp_trace_write_text(t, path);
}
