/* The in-memory trace: growable arrays of events and of their peers. */
#include "core/trace/trace.h"

#include <stdlib.h>
#include <string.h>

#include "core/base/atomic_file.h"
#include "core/trace/comm_kind.h"

struct usp_trace {
    usp_trace_event *events;
    size_t n_events, cap_events;
    usp_trace_peer *peers;
    size_t n_peers, cap_peers;
    usp_trace_event *compute;
    size_t n_compute, cap_compute;
    usp_trace_step *steps;
    size_t n_steps, cap_steps;
    char **groups;
    int n_groups, cap_groups;
    char **texts;         /* usp_trace_intern_text's copies */
    size_t n_texts, cap_texts;
};

usp_status usp_trace_create(usp_trace_t **out)
{
    return usp_calloc((void **)out, 1, sizeof **out, "a trace");
}

void usp_trace_destroy(usp_trace_t *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->n_groups; i++)
        free(t->groups[i]);
    free(t->groups);
    for (size_t i = 0; i < t->n_texts; i++)
        free(t->texts[i]);
    free(t->texts);
    free(t->steps);
    free(t->events);
    free(t->peers);
    free(t->compute);
    free(t);
}

/* Grows *array (of `size`-byte items) to hold at least `need` items. */
static int grow(void **array, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 1;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    void *p = realloc(*array, n * size);
    if (!p)
        return 0;
    *array = p;
    *cap = n;
    return 1;
}

int usp_trace_intern_group(usp_trace_t *t, const char *name)
{
    for (int i = 0; i < t->n_groups; i++)
        if (strcmp(t->groups[i], name) == 0)
            return i;
    size_t cap = (size_t)t->cap_groups;
    if (!grow((void **)&t->groups, &cap, (size_t)t->n_groups + 1, sizeof *t->groups))
        return -1;
    t->cap_groups = (int)cap;
    char *copy = strdup(name);
    if (!copy)
        return -1;
    t->groups[t->n_groups] = copy;
    return t->n_groups++;
}

const char *usp_trace_group_name(const usp_trace_t *t, int group)
{
    return group >= 0 && group < t->n_groups ? t->groups[group] : "?";
}

usp_status usp_trace_record(usp_trace_t *t, const usp_trace_event *event, const usp_trace_peer *peers,
                            size_t n_peers)
{
    if (!grow((void **)&t->events, &t->cap_events, t->n_events + 1, sizeof *t->events) ||
        !grow((void **)&t->peers, &t->cap_peers, t->n_peers + n_peers, sizeof *t->peers))
        return usp_error(USP_ERR_RUNTIME, "out of memory recording trace event %zu", t->n_events);
    usp_trace_event *e = &t->events[t->n_events++];
    *e = *event;
    e->first_peer = t->n_peers;
    e->n_peers = n_peers;
    e->bytes_sent = 0;
    for (size_t i = 0; i < n_peers; i++)
        e->bytes_sent += peers[i].bytes;
    if (n_peers)
        memcpy(t->peers + t->n_peers, peers, n_peers * sizeof *peers);
    t->n_peers += n_peers;
    return USP_OK;
}

size_t usp_trace_count(const usp_trace_t *t) { return t->n_events; }
const usp_trace_event *usp_trace_at(const usp_trace_t *t, size_t i) { return &t->events[i]; }

usp_status usp_trace_record_compute(usp_trace_t *t, int rank, const char *name, double t_start, double t_end,
                                    double flops, double mem_bytes)
{
    if (!grow((void **)&t->compute, &t->cap_compute, t->n_compute + 1, sizeof *t->compute))
        return usp_error(USP_ERR_RUNTIME, "out of memory recording compute span %zu", t->n_compute);
    t->compute[t->n_compute++] = (usp_trace_event){
        .rank = rank, .group = -1, .kind = -1, .type = USP_TRACE_COMPUTE, .name = name,
        .t_post = t_start, .t_start = t_start, .t_end = t_end, .flops = flops, .mem_bytes = mem_bytes,
    };
    return USP_OK;
}

size_t usp_trace_compute_count(const usp_trace_t *t) { return t->n_compute; }
const usp_trace_event *usp_trace_compute_at(const usp_trace_t *t, size_t i) { return &t->compute[i]; }

usp_status usp_trace_record_step(usp_trace_t *t, int rank, int64_t step, double t_start, double t_end)
{
    if (!grow((void **)&t->steps, &t->cap_steps, t->n_steps + 1, sizeof *t->steps))
        return usp_error(USP_ERR_RUNTIME, "out of memory recording step %lld of rank %d", (long long)step, rank);
    t->steps[t->n_steps++] = (usp_trace_step){.rank = rank, .step = step, .t_start = t_start, .t_end = t_end};
    return USP_OK;
}

size_t usp_trace_step_count(const usp_trace_t *t) { return t->n_steps; }
const usp_trace_step *usp_trace_step_at(const usp_trace_t *t, size_t i) { return &t->steps[i]; }

const char *usp_trace_intern_text(usp_trace_t *t, const char *text)
{
    for (size_t i = 0; i < t->n_texts; i++) /* few distinct texts: op names and call sites */
        if (strcmp(t->texts[i], text) == 0)
            return t->texts[i];
    if (!grow((void **)&t->texts, &t->cap_texts, t->n_texts + 1, sizeof *t->texts))
        return NULL;
    char *copy = strdup(text);
    if (copy)
        t->texts[t->n_texts++] = copy;
    return copy;
}

const usp_trace_peer *usp_trace_peers(const usp_trace_t *t, const usp_trace_event *event)
{
    return t->peers + event->first_peer;
}

uint64_t usp_trace_bytes_sent(const usp_trace_t *t, int rank)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < t->n_events; i++)
        if (t->events[i].rank == rank)
            sum += t->events[i].bytes_sent;
    return sum;
}

usp_status usp_trace_write_text(const usp_trace_t *t, const char *path)
{
    usp_atomic_file f;
    USP_CHECK(usp_atomic_file_open(&f, path));
    fprintf(f.fp, "# usp trace: %zu events; times in virtual seconds; to=peer:bytes (world ranks)\n",
            t->n_events);
    for (size_t i = 0; i < t->n_events; i++) {
        const usp_trace_event *e = &t->events[i];
        fprintf(f.fp, "rank=%d group=%s seq=%llu op=%s site=%s:%d post=%.9f start=%.9f end=%.9f bytes=%llu",
                e->rank, usp_trace_group_name(t, e->group), (unsigned long long)e->seq,
                usp_comm_kind_name((usp_comm_kind)e->kind), e->file, e->line, e->t_post, e->t_start,
                e->t_end, (unsigned long long)e->bytes_sent);
        const usp_trace_peer *p = usp_trace_peers(t, e);
        for (size_t j = 0; j < e->n_peers; j++)
            fprintf(f.fp, "%s%d:%llu", j == 0 ? " to=" : ",", p[j].peer, (unsigned long long)p[j].bytes);
        fputc('\n', f.fp);
    }
    return usp_atomic_file_commit(&f);
}
