/* The LRU stack model of a rank's cache (see cache_model.h). */
#include "sim/cache_model.h"

#include <stdint.h>
#include <stdlib.h>

/* A range [start, end) touched as a whole. */
typedef struct span {
    uintptr_t start, end;
} span;

struct sim_cache {
    double capacity;
    span *spans, *next; /* most recent first, disjoint; next: the scratch a touch builds the new list in */
    size_t n, cap;
};

usp_status sim_cache_create(double capacity, sim_cache **out)
{
    *out = NULL;
    if (!(capacity > 0))
        return usp_error(USP_ERR_CONFIG, "a cache of %g bytes: give a capacity > 0", capacity);
    sim_cache *c;
    USP_CHECK(usp_calloc((void **)&c, 1, sizeof *c, "a cache model"));
    c->capacity = capacity;
    *out = c;
    return USP_OK;
}

void sim_cache_destroy(sim_cache *c)
{
    if (!c)
        return;
    free(c->spans);
    free(c->next);
    free(c);
}

static double span_bytes(span s) { return (double)(s.end - s.start); }

/* Bytes of [a, b) the cache holds. A span's bytes were touched in ascending order, so at depth d (the bytes of
 * the spans more recent than it) its top capacity - d bytes are held: each has fewer than `capacity` bytes
 * touched after it. */
static double held(const sim_cache *c, uintptr_t a, uintptr_t b)
{
    double depth = 0, hot = 0;
    for (size_t i = 0; i < c->n && depth < c->capacity; i++) {
        span s = c->spans[i];
        double size = span_bytes(s), room = c->capacity - depth;
        uintptr_t from = room >= size ? s.start : s.end - (uintptr_t)room; /* the held part: [from, s.end) */
        uintptr_t lo = from > a ? from : a, hi = s.end < b ? s.end : b;
        if (lo < hi)
            hot += (double)(hi - lo);
        depth += size;
    }
    return hot;
}

/* Room for n spans in both lists; 0 when out of memory. */
static int reserve(sim_cache *c, size_t n)
{
    if (n <= c->cap)
        return 1;
    size_t cap = c->cap ? 2 * c->cap : 64;
    cap = cap < n ? n : cap;
    span *a = realloc(c->spans, cap * sizeof *a);
    if (a)
        c->spans = a;
    span *b = a ? realloc(c->next, cap * sizeof *b) : NULL;
    if (b)
        c->next = b;
    if (!a || !b)
        return 0;
    c->cap = cap;
    return 1;
}

/* [a, b) becomes the most recent span: first in the new list, then each old span's parts outside it, until the
 * list holds the capacity (what lies deeper is gone from the cache). The capacity counts whole bytes. */
static void touch(sim_cache *c, uintptr_t a, uintptr_t b)
{
    if (!reserve(c, 2 * c->n + 1)) { /* out of memory: forget everything but this range */
        if (c->cap == 0)
            return;
        c->spans[0] = (span){a, b};
        c->n = 1;
        return;
    }
    size_t m = 0;
    c->next[m++] = (span){a, b};
    double depth = (double)(b - a);
    for (size_t i = 0; i < c->n && depth < c->capacity; i++) {
        span s = c->spans[i];
        if (s.end <= a || s.start >= b) {
            c->next[m++] = s, depth += span_bytes(s);
            continue;
        }
        if (s.end > b) /* the upper part was touched after the lower */
            c->next[m++] = (span){b, s.end}, depth += (double)(s.end - b);
        if (s.start < a)
            c->next[m++] = (span){s.start, a}, depth += (double)(a - s.start);
    }
    span *t = c->spans;
    c->spans = c->next, c->next = t, c->n = m;
}

double sim_cache_touch(sim_cache *c, const usp_range *ranges, int n)
{
    double bytes = 0, hot = 0;
    for (int i = 0; i < n; i++) {
        uintptr_t a = (uintptr_t)ranges[i].ptr;
        bytes += (double)ranges[i].bytes, hot += held(c, a, a + ranges[i].bytes);
    }
    for (int i = 0; i < n; i++)
        if (ranges[i].bytes > 0)
            touch(c, (uintptr_t)ranges[i].ptr, (uintptr_t)ranges[i].ptr + ranges[i].bytes);
    return bytes > 0 ? hot / bytes : 1.0;
}
