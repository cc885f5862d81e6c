/* Trace look-ups for the diagrams (see trace_query.h). Linear scans: the
 * traces drawn are of one layer or one step, thousands of events at most. */
#include "viz/trace_query.h"

#include <string.h>

const usp_trace_event *viz_trace_find(const usp_trace_t *t, int rank, const char *group, uint64_t seq)
{
    for (size_t i = 0; i < usp_trace_count(t); i++) {
        const usp_trace_event *e = usp_trace_at(t, i);
        if (e->rank == rank && e->seq == seq && strcmp(usp_trace_group_name(t, e->group), group) == 0)
            return e;
    }
    return NULL;
}

uint64_t viz_trace_bytes_to(const usp_trace_t *t, const usp_trace_event *e, int peer)
{
    const usp_trace_peer *p = usp_trace_peers(t, e);
    for (size_t j = 0; j < e->n_peers; j++)
        if (p[j].peer == peer)
            return p[j].bytes;
    return 0;
}

int viz_trace_world(const usp_trace_t *t)
{
    int n = 0;
    for (size_t i = 0; i < usp_trace_count(t); i++) {
        const usp_trace_event *e = usp_trace_at(t, i);
        n = e->rank + 1 > n ? e->rank + 1 : n;
        const usp_trace_peer *p = usp_trace_peers(t, e);
        for (size_t j = 0; j < e->n_peers; j++)
            n = p[j].peer + 1 > n ? p[j].peer + 1 : n;
    }
    for (size_t i = 0; i < usp_trace_compute_count(t); i++)
        n = usp_trace_compute_at(t, i)->rank + 1 > n ? usp_trace_compute_at(t, i)->rank + 1 : n;
    return n;
}
