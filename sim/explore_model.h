/* The explorer's model of the ranks' programs (sim/explore.h): each rank's
 * schedule log cut into its streams, with every call's partners found, and
 * the state of all GPUs as one array of ints that the search copies, moves
 * and remembers. Shared by the search (explore.c), its report
 * (explore_report.c) and the lint (schedule_lint.c). */
#ifndef USP_SIM_EXPLORE_MODEL_H
#define USP_SIM_EXPLORE_MODEL_H

#include <stdint.h>

#include "sim/schedule_log.h"
#include "sim/sim_internal.h"

/* The streams of one rank the model follows (a ready call per stream: the search keeps them in arrays). */
#define XMODEL_MAX_LANES 64

/* One rank's program. Items are indices into log->items. */
typedef struct xrank {
    const sim_sched_log *log;
    int lanes;
    int *lane_len;        /* [lanes] items on each lane */
    long **lane_items;    /* [lanes][lane_len] the lane's items in order */
    int *lane_pos;        /* [n] an item's position on its lane (-1: a host item) */
    long *host_items;     /* [n_host] SYNC and MEET items, in order */
    int n_host;
    int **host_need;      /* [n_host][lanes] a SYNC passes when each lane has run this many items */
    long *prev_on_group;  /* [n] the call issued before it on the same group (-1: none) */
    long *matches;        /* [n] collective: its first member's item in `member_items`; -1: no call */
    int offset;           /* where the rank's lanes start in a state; its host index follows them */
} xrank;

typedef struct xmodel {
    const sim_world *world;
    int n;                /* ranks */
    xrank *ranks;
    long *member_items;   /* for each collective item, its group's members' items (-1: never issued) */
    size_t n_member_items;
    long **p2p_send_match; /* [rank][item]: the receiving rank's item that matches its send part (-1) */
    long **p2p_recv_match; /* [rank][item]: the sending rank's item that matches its receive part (-1) */
    int state_ints;       /* ints in a state */
    int slots;            /* K */
} xmodel;

/* A state: per rank, per lane, 2 * items run + 1 if the head has started; then the host items passed. */
typedef int32_t xstate;

/* Builds the model of w's logs; USP_ERR_CONFIG when a rank logged nothing usable or used more than
 * XMODEL_MAX_LANES streams. */
usp_status xmodel_build(const sim_world *w, int slots, xmodel *m);
void xmodel_free(xmodel *m);

/* The initial state (nothing run). */
void xmodel_initial(const xmodel *m, xstate *s);

/* The item's kind and group, and whether it is issued, has run, or is the started head of its lane. */
const sim_sched_item *xitem(const xmodel *m, int rank, long item);
int xissued(const xmodel *m, const xstate *s, int rank, long item);
int xdone(const xmodel *m, const xstate *s, int rank, long item);
int xstarted(const xmodel *m, const xstate *s, int rank, long item);

/* The ranks a started call waits for (members or peers that have not started it), written to
 * `out` (room for the world); returns how many. */
int xwaits_for(const xmodel *m, const xstate *s, int rank, long item, int *out);

/* The calls that rank could start now (ready heads, in lane order) into `out` (room for XMODEL_MAX_LANES);
 * returns how many. */
int xready(const xmodel *m, const xstate *s, int rank, long *out);

/* Collective kernels running on the rank's GPU. */
int xrunning(const xmodel *m, const xstate *s, int rank);

/* Starts `item` of `rank` (a ready head). */
void xstart(const xmodel *m, xstate *s, int rank, long item);

/* Makes every move that cannot change the outcome until none is left. */
void xsettle(const xmodel *m, xstate *s);

/* 1 when every rank has run its whole program. */
int xfinished(const xmodel *m, const xstate *s);

/* The lowest rank with more ready calls than free slots (-1: none). */
int xchooser(const xmodel *m, const xstate *s, long *ready, int *n_ready);

#endif
