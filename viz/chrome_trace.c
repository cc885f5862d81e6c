/* Chrome trace event JSON (see chrome_trace.h), built with jansson so the
 * output is valid JSON by construction. Events are emitted per rank, compute
 * then communication, each in the order the rank did them, so every
 * (pid, tid) reads as a well-nested sequence of B/E pairs. */
#include "viz/chrome_trace.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/atomic_file.h"
#include "core/comm.h"
#include "viz/trace_query.h"

enum { TID_COMPUTE = 0, TID_COMM = 1 };

static double us(double seconds) { return seconds * 1e6; }

/* Appends an event; `args` (may be NULL) is stolen. Returns 0 when out of memory. */
static int add(json_t *events, const char *ph, const char *name, double ts, int pid, int tid, json_t *args)
{
    json_t *e = json_pack("{s:s, s:s, s:f, s:i, s:i}", "ph", ph, "name", name, "ts", ts, "pid", pid, "tid", tid);
    if (!e) {
        json_decref(args);
        return 0;
    }
    if (args)
        json_object_set_new(e, "args", args);
    return json_array_append_new(events, e) == 0;
}

static int add_metadata(json_t *events, int world)
{
    int ok = 1;
    char name[32];
    for (int r = 0; r < world && ok; r++) {
        snprintf(name, sizeof name, "rank %d", r);
        ok &= add(events, "M", "process_name", 0, r, TID_COMPUTE, json_pack("{s:s}", "name", name));
        ok &= add(events, "M", "process_sort_index", 0, r, TID_COMPUTE, json_pack("{s:i}", "sort_index", r));
        ok &= add(events, "M", "thread_name", 0, r, TID_COMPUTE, json_pack("{s:s}", "name", "compute"));
        ok &= add(events, "M", "thread_name", 0, r, TID_COMM, json_pack("{s:s}", "name", "communication"));
    }
    return ok;
}

/* "sendrecv #3 on ring[0]" */
static void comm_name(const usp_trace_t *t, const usp_trace_event *e, char *buf, size_t size)
{
    snprintf(buf, size, "%s #%llu on %s", usp_comm_kind_name((usp_comm_kind)e->kind), (unsigned long long)e->seq,
             usp_trace_group_name(t, e->group));
}

static int add_rank(json_t *events, const usp_trace_t *t, int rank)
{
    int ok = 1;
    for (size_t i = 0; i < usp_trace_compute_count(t) && ok; i++) {
        const usp_trace_event *e = usp_trace_compute_at(t, i);
        if (e->rank != rank)
            continue;
        ok &= add(events, "B", e->name, us(e->t_start), rank, TID_COMPUTE,
                  json_pack("{s:f, s:f}", "flops", e->flops, "bytes", e->mem_bytes));
        ok &= add(events, "E", e->name, us(e->t_end), rank, TID_COMPUTE, NULL);
    }
    char name[128], site[256];
    for (size_t i = 0; i < usp_trace_count(t) && ok; i++) {
        const usp_trace_event *e = usp_trace_at(t, i);
        if (e->rank != rank)
            continue;
        comm_name(t, e, name, sizeof name);
        snprintf(site, sizeof site, "%s:%d", e->file ? e->file : "?", e->line);
        ok &= add(events, "B", name, us(e->t_post), rank, TID_COMM,
                  json_pack("{s:s, s:s, s:I, s:I, s:s, s:f}", "op", usp_comm_kind_name((usp_comm_kind)e->kind), "group",
                            usp_trace_group_name(t, e->group), "seq", (json_int_t)e->seq, "bytes_sent",
                            (json_int_t)e->bytes_sent, "call_site", site, "waited_us", us(e->t_start - e->t_post)));
        if (e->t_start > e->t_post) { /* the time the rank spent waiting for the others to arrive */
            ok &= add(events, "B", "waiting for peers", us(e->t_post), rank, TID_COMM, NULL);
            ok &= add(events, "E", "waiting for peers", us(e->t_start), rank, TID_COMM, NULL);
        }
        ok &= add(events, "E", name, us(e->t_end), rank, TID_COMM, NULL);
    }
    return ok;
}

/* The receiver's slice of a transfer that `send` started: `to`'s receiving
 * call on the same group whose span holds the transfer's start (the latest
 * one posted by then), or NULL. */
static const usp_trace_event *receiving_call(const usp_trace_t *t, const usp_trace_event *send, int to)
{
    const usp_trace_event *best = NULL;
    for (size_t i = 0; i < usp_trace_count(t); i++) {
        const usp_trace_event *e = usp_trace_at(t, i);
        if (e->rank != to || e->group != send->group || (e->kind != USP_OP_RECV && e->kind != USP_OP_SENDRECV))
            continue;
        if (e->t_post <= send->t_start && send->t_start <= e->t_end && (!best || e->t_post > best->t_post))
            best = e;
    }
    return best;
}

static int add_flows(json_t *events, const usp_trace_t *t)
{
    int ok = 1;
    json_int_t id = 0;
    char name[128];
    for (size_t i = 0; i < usp_trace_count(t) && ok; i++) {
        const usp_trace_event *e = usp_trace_at(t, i);
        if (e->kind != USP_OP_SEND && e->kind != USP_OP_SENDRECV)
            continue;
        const usp_trace_peer *p = usp_trace_peers(t, e);
        for (size_t j = 0; j < e->n_peers && ok; j++) {
            const usp_trace_event *r = receiving_call(t, e, p[j].peer);
            double arrive = r && r->t_end < e->t_end ? r->t_end : e->t_end;
            if (!r)
                arrive = e->t_start;
            snprintf(name, sizeof name, "%s on %s", usp_comm_kind_name((usp_comm_kind)e->kind),
                     usp_trace_group_name(t, e->group));
            ++id;
            json_t *s = json_pack("{s:s, s:s, s:s, s:I, s:f, s:i, s:i, s:{s:I}}", "ph", "s", "name", name, "cat", "p2p",
                                  "id", id, "ts", us(e->t_start), "pid", e->rank, "tid", TID_COMM, "args", "bytes",
                                  (json_int_t)p[j].bytes);
            json_t *f = json_pack("{s:s, s:s, s:s, s:I, s:f, s:i, s:i, s:s}", "ph", "f", "name", name, "cat", "p2p",
                                  "id", id, "ts", us(arrive), "pid", p[j].peer, "tid", TID_COMM, "bp", "e");
            if (!s || !f) {
                json_decref(s), json_decref(f);
                return 0;
            }
            ok = json_array_append_new(events, s) == 0; /* each call takes its event, even when it fails */
            ok = json_array_append_new(events, f) == 0 && ok;
        }
    }
    return ok;
}

usp_status viz_chrome_trace_text(const usp_trace_t *t, char **out)
{
    *out = NULL;
    int world = viz_trace_world(t);
    json_t *root = json_object(), *events = json_array();
    int ok = root && events && json_object_set(root, "traceEvents", events) == 0;
    ok = ok && add_metadata(events, world);
    for (int r = 0; r < world && ok; r++)
        ok = add_rank(events, t, r);
    ok = ok && add_flows(events, t);
    ok = ok && json_object_set_new(root, "displayTimeUnit", json_string("ns")) == 0;
    ok = ok && json_object_set_new(root, "otherData",
                                   json_pack("{s:s, s:s}", "generator", "usp viz", "clock",
                                             "virtual time of the simulator (ts in microseconds)")) == 0;
    if (ok)
        *out = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(12));
    json_decref(events);
    json_decref(root);
    if (!*out)
        return usp_error(USP_ERR_RUNTIME, "out of memory writing the Chrome trace of %zu events", usp_trace_count(t));
    return USP_OK;
}

usp_status viz_chrome_trace_write(const usp_trace_t *t, const char *path)
{
    char *text;
    USP_CHECK(viz_chrome_trace_text(t, &text));
    usp_atomic_file f;
    usp_status s = usp_atomic_file_open(&f, path);
    if (s == USP_OK) {
        size_t n = strlen(text);
        if (fwrite(text, 1, n, f.fp) != n || fputc('\n', f.fp) == EOF) {
            usp_atomic_file_abort(&f);
            s = usp_error(USP_ERR_RUNTIME, "cannot write %s: short write", path);
        } else {
            s = usp_atomic_file_commit(&f);
        }
    }
    free(text);
    return s;
}
