/* Reports of a run that cannot go on: a deadlock, a collective mismatch, a
 * rank that crashed or failed while others wait for it. Each names every
 * rank's state and call and follows the chain of waits, e.g.
 *   rank 2 waits in all_to_all #5 on ulysses[0] (core/x.c:88) for rank 3
 *   -> rank 3 waits in all_reduce #5 on dp[1] (core/y.c:40) for rank 1 -> ...
 * and the same state is kept as a structured wait-for graph that viz draws:
 * the text and the picture come from one snapshot.
 *
 * Backend-neutral: the input is one record per rank, {state, call (op, group,
 * seq, call site), ranks it waits for, ...}, which the simulator fills from its
 * own state and a real backend from exchanged call fingerprints
 * (core/safety/comm_fingerprint.h), so both print the same report. */
#ifndef USP_COMM_REPORT_H
#define USP_COMM_REPORT_H

#include "core/safety/comm_fingerprint.h"
#include "core/base/strbuf.h"

typedef enum usp_report_kind {
    USP_REPORT_NONE,
    USP_REPORT_DEADLOCK,
    USP_REPORT_MISMATCH,
    USP_REPORT_RANK_FAILURE,
} usp_report_kind;

typedef enum usp_rank_state {
    USP_RANK_RUNNABLE, /* not in a call (a mismatch stopped the run before it got there) */
    USP_RANK_BLOCKED,
    USP_RANK_EXITED,
    USP_RANK_CRASHED,
    USP_RANK_MISSING,  /* left no flight record (core/safety/postmortem.h): killed, or never started */
    USP_RANK_UNSEEN,   /* not a party to the call a real backend's rank reports on: its state is its own record's */
} usp_rank_state;

/* A rank that a blocked rank waits for. */
typedef struct usp_rank_wait {
    int rank;                    /* world rank */
    uint64_t calls_on_group;     /* calls it issued on the waiter's group (said when it has exited) */
} usp_rank_wait;

/* One rank as a report sees it. */
typedef struct usp_rank_record {
    usp_rank_state state;
    usp_comm_fingerprint call;   /* blocked: the call it waits in; crashed: the call it died at; op -1 otherwise */
    uint64_t collective_seq;     /* blocked in a collective: its index among the rank's collectives on the group */
    uint64_t crash_call;         /* crashed: which of its counted calls it died at */
    const usp_rank_wait *waits;  /* blocked: whom it waits for, in order (the group's missing members, or
                                    the peers of its unmatched send, then receive) */
    int n_waits;
    uint64_t calls;              /* counted calls it issued */
    usp_status result;           /* exited: what its main function returned */
    const char *error;           /* exited with an error: its message */
    double clock;                /* seconds on the backend's clock */
} usp_rank_record;

/* The ranks as the run's first report saw them, for the wait-for graph. */
typedef struct usp_report_snapshot {
    usp_report_kind kind;        /* USP_REPORT_NONE until a report is made */
    int n_ranks;
    usp_rank_record *ranks;      /* [n_ranks] (their waits point into `waits`, their errors are NULL) */
    usp_rank_wait *waits;
    int mismatched[2];           /* the two ranks of a mismatch */
    char *injected;              /* the faults that fired, as the report printed them */
} usp_report_snapshot;

/* Appends the report of a run in which no rank can run while some are blocked
 * to `text`: a deadlock, or ranks waiting for one that crashed or failed.
 * Returns the status the run ends with (USP_ERR_COLLECTIVE, USP_ERR_RANK_FAILED,
 * or the failed rank's own). `injected`: lines of the faults that fired, or "".
 * The first report of a run is kept in `snap`. */
usp_status usp_report_stall(usp_report_snapshot *snap, const usp_rank_record *ranks, int n, const char *injected,
                            usp_strbuf *text);

/* Appends the report of ranks `a` and `b` whose calls on `group` are not one
 * collective (or transfer), for reason `why`. */
void usp_report_mismatch(usp_report_snapshot *snap, const usp_rank_record *ranks, int n, const char *injected,
                         const char *group, int a, int b, const char *why, usp_strbuf *text);

/* Appends the report of a run in which ranks crashed (injected) and no other
 * waited for them; ranks missing (no flight record) are named beside the
 * crashed ones and, when there are neither, ranks that exited with an error. */
void usp_report_crash(usp_report_snapshot *snap, const usp_rank_record *ranks, int n, const char *injected,
                      usp_strbuf *text);

/* Frees what a snapshot holds (a zeroed one is fine). */
void usp_report_snapshot_free(usp_report_snapshot *snap);

/* --- the wait-for graph ---------------------------------------------------
 * Who waited for whom when the run stalled, mismatched or lost a rank. Edges
 * point from a waiting rank to a rank it waits for. The highlighted path is
 * the report's own wait chain (first wait of each rank from the first blocked
 * one): its cycle, or the rank it ends at that will never come (exited,
 * crashed or without a flight record: the missing participant). */

typedef struct usp_wait_rank {
    usp_rank_state state;
    int op;             /* usp_comm_kind it is blocked in or crashed at; -1 when none */
    char group[64];     /* that call's group ("" when none; USP_COMM_NAME_MAX) */
    uint64_t seq;       /* the call's index on the group */
    const char *file;   /* its call site (NULL when none) */
    int line;
    char call[112];     /* blocked: the op with its arguments, "all_to_all(count=2048, f32)" */
    uint64_t calls;     /* calls the rank issued */
    usp_status result;  /* exited: what its main function returned */
    double clock;       /* virtual seconds */
    int in_cycle;       /* on the highlighted wait cycle */
    int missing;        /* the chain ends here: a rank that exited, crashed or is missing while others wait for it */
    int mismatched;     /* one of the two ranks whose calls disagree */
} usp_wait_rank;

typedef struct usp_wait_edge {
    int from, to;       /* world ranks: `from` waits for `to` */
    int highlight;      /* on the report's wait chain: its cycle, or the way to the missing rank */
} usp_wait_edge;

typedef struct usp_wait_graph {
    usp_report_kind kind;
    const char *source; /* who made the report, for the caption ("usp postmortem of DIR"); NULL: the simulator */
    char *title;        /* the report's first line, whole (NULL only for USP_REPORT_NONE) */
    char *injected;     /* the faults that fired, one line each ("rank 2: skip at its call 1, ..."), or "";
                           NULL only for USP_REPORT_NONE */
    int n_ranks;
    usp_wait_rank *ranks;  /* [n_ranks] */
    size_t n_edges;
    usp_wait_edge *edges;  /* [n_edges], by waiting rank, then waited-for rank */
} usp_wait_graph;

/* The wait-for graph of `snap` (kind USP_REPORT_NONE and no ranks when there
 * was no report), titled with the first line of `report_text`, built into
 * `out`; free it with usp_wait_graph_free. */
usp_status usp_report_wait_graph(const usp_report_snapshot *snap, const char *report_text, usp_wait_graph *out);

/* Frees a graph's arrays (a zeroed graph is fine). */
void usp_wait_graph_free(usp_wait_graph *g);

#endif
