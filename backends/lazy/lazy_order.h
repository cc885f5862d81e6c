/* The lazy backend's order checker: finds two accesses to the same bytes
 * from different streams that nothing orders, at least one of them a write:
 * what a GPU may run at once, whichever order the lazy backend happens to run
 * them in. (The idea of PyTorch's CUDA sanitizer, torch.cuda._sanitizer, and
 * of FastTrack's vector clocks: Flanagan and Freund, PLDI 2009.)
 *
 * Each stream is a lane. An op takes the next number of its lane (its
 * epoch). A clock says, per lane, up to which epoch that lane's ops are known
 * to be complete: a stream's clock holds its own ops, what the events it
 * waited for held when recorded, and what the host knew when it enqueued
 * (the host learns a stream's clock when it synchronises it). Op A happens
 * before op B when B's clock covers A's epoch. A buffer's history keeps the
 * accesses not yet known complete to the host, trimmed as writes replace
 * them; a new access is checked against the history of the bytes it touches. */
#ifndef USP_LAZY_ORDER_H
#define USP_LAZY_ORDER_H

#include <stddef.h>
#include <stdint.h>

#include "core/base/status.h"

#define LAZY_LANES 256 /* streams alive at once on one device, the default one included (a stream a layer for
                          * the overlaps of a model of 80 layers, and the buckets') */

typedef struct lazy_clock {
    uint64_t at[LAZY_LANES]; /* per lane: its ops up to this epoch are complete */
} lazy_clock;

/* Where an access comes from, for the report. */
typedef struct lazy_who {
    int lane;
    uint64_t epoch;
    const char *what; /* the op's name (a static string) */
} lazy_who;

typedef struct lazy_record lazy_record;

/* One buffer's accesses that some stream may not yet be ordered after. */
typedef struct lazy_history {
    lazy_record *records;
    size_t n, cap;
} lazy_history;

/* a = the later of a and b, lane by lane. */
void lazy_clock_join(lazy_clock *a, const lazy_clock *b);

/* Checks bytes [lo, hi) of the buffer at `base` (its history h), read (writes 0) or written by `who`,
 * whose stream knows `known` (known->at[who.lane] = who.epoch), against the accesses in h, then records
 * it there. Records that `host` covers are dropped: nothing enqueued later can race with them.
 * USP_ERR_RUNTIME naming both ops when a write and another access are unordered, or when out of memory. */
usp_status lazy_history_access(lazy_history *h, uintptr_t base, uintptr_t lo, uintptr_t hi, int writes,
                               lazy_who who, const lazy_clock *known, const lazy_clock *host);

/* Frees what a history holds and empties it. */
void lazy_history_clear(lazy_history *h);

#endif
