/* The order checker's clocks and histories (lazy_order.h). */
#include "backends/lazy/lazy_order.h"

#include <stdio.h>
#include <stdlib.h>

struct lazy_record {
    uintptr_t lo, hi; /* the bytes */
    lazy_who who;
    int writes;
};

void lazy_clock_join(lazy_clock *a, const lazy_clock *b)
{
    for (int l = 0; l < LAZY_LANES; l++)
        if (b->at[l] > a->at[l])
            a->at[l] = b->at[l];
}

static int covers(const lazy_clock *c, lazy_who w) { return c->at[w.lane] >= w.epoch; }

static const char *lane_name(int lane, char *buf, size_t size)
{
    if (lane == 0)
        return "the default stream";
    snprintf(buf, size, "stream %d", lane);
    return buf;
}

static usp_status race(uintptr_t base, uintptr_t lo, uintptr_t hi, int writes, lazy_who who, const lazy_record *r)
{
    char a[32], b[32];
    const char *now = lane_name(who.lane, a, sizeof a), *then = lane_name(r->who.lane, b, sizeof b);
    uintptr_t from = lo > r->lo ? lo : r->lo, to = hi < r->hi ? hi : r->hi;
    return usp_error(USP_ERR_RUNTIME,
                     "lazy backend: %s on %s %s bytes %zu-%zu of a buffer that %s on %s %s, and nothing orders "
                     "the two (a GPU may run them at once): record an event on %s after the %s and make %s wait "
                     "for it (usp_stream_wait_event) before the %s", who.what, now, writes ? "writes" : "reads",
                     (size_t)(from - base), (size_t)(to - base), r->who.what, then, r->writes ? "wrote" : "read", then,
                     r->who.what, now, who.what);
}

static usp_status reserve(lazy_history *h, size_t more)
{
    if (h->n + more <= h->cap)
        return USP_OK;
    size_t cap = h->cap ? 2 * h->cap : 8;
    while (cap < h->n + more)
        cap *= 2;
    lazy_record *grown = realloc(h->records, cap * sizeof *grown);
    if (!grown)
        return usp_error(USP_ERR_RUNTIME, "out of memory growing the lazy backend's access history");
    h->records = grown, h->cap = cap;
    return USP_OK;
}

/* Drops what the host knows complete; checks what is left against the new access. */
static usp_status check(lazy_history *h, uintptr_t base, uintptr_t lo, uintptr_t hi, int writes, lazy_who who,
                        const lazy_clock *known, const lazy_clock *host)
{
    size_t kept = 0;
    for (size_t i = 0; i < h->n; i++) {
        const lazy_record *r = &h->records[i];
        if (covers(host, r->who))
            continue;
        if (r->lo < hi && lo < r->hi && (writes || r->writes) && r->who.lane != who.lane && !covers(known, r->who))
            return race(base, lo, hi, writes, who, r);
        h->records[kept++] = *r;
    }
    h->n = kept;
    return USP_OK;
}

/* A write replaces what it overlaps: whatever is ordered after it is ordered after them, and whatever
 * is not races with it. A read replaces its own stream's earlier reads inside it, for the same reason. */
static void trim(lazy_history *h, uintptr_t lo, uintptr_t hi, int writes, int lane)
{
    size_t n = h->n;
    for (size_t i = 0; i < n; i++) {
        lazy_record *r = &h->records[i];
        if (r->hi <= lo || hi <= r->lo || (!writes && (r->writes || r->who.lane != lane)))
            continue;
        if (!writes) {
            if (lo <= r->lo && r->hi <= hi)
                r->hi = r->lo; /* emptied: removed below */
            continue;
        }
        if (r->lo < lo && hi < r->hi) /* the write falls inside: the part after it becomes a record (reserved) */
            h->records[h->n++] = (lazy_record){hi, r->hi, r->who, r->writes};
        if (r->lo < lo)
            r->hi = lo;
        else
            r->lo = hi < r->hi ? hi : r->hi;
    }
    size_t kept = 0;
    for (size_t i = 0; i < h->n; i++)
        if (h->records[i].lo < h->records[i].hi)
            h->records[kept++] = h->records[i];
    h->n = kept;
}

usp_status lazy_history_access(lazy_history *h, uintptr_t base, uintptr_t lo, uintptr_t hi, int writes, lazy_who who,
                               const lazy_clock *known, const lazy_clock *host)
{
    if (lo >= hi)
        return USP_OK;
    USP_CHECK(check(h, base, lo, hi, writes, who, known, host));
    USP_CHECK(reserve(h, h->n + 1)); /* at most one split per record, and the new one */
    trim(h, lo, hi, writes, who.lane);
    h->records[h->n++] = (lazy_record){lo, hi, who, writes};
    return USP_OK;
}

void lazy_history_clear(lazy_history *h)
{
    free(h->records);
    *h = (lazy_history){0};
}
