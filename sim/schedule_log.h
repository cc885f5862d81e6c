/* The schedule log: what each simulated rank put on its GPU's streams, in the
 * order its host issued it, for the explorer (sim/explore.h) and the lint
 * (sim/schedule_lint.h).
 *
 * The simulator's host blocks in every call until it completes, so a run
 * shows one order of the GPUs' work: the hosts' order. A GPU does not keep
 * it: the heads of its streams start in whatever order their inputs are
 * ready. The host's program does not depend on that timing (it sees data only
 * through downloads, which wait), so one run gives each rank's whole program:
 * per stream, the calls, event records and event waits in order, and the
 * points where the host itself waits (a synchronize, a download, a split).
 * Compute is left out: it orders nothing that its stream does not order. */
#ifndef USP_SIM_SCHEDULE_LOG_H
#define USP_SIM_SCHEDULE_LOG_H

#include <stddef.h>
#include <stdint.h>

#include "core/safety/comm_fingerprint.h"

struct sim_rank;
struct sim_group;

typedef enum sim_sched_kind {
    SIM_SCHED_CALL,   /* a collective or point-to-point call enqueued on `lane` */
    SIM_SCHED_RECORD, /* usp_event_record on `lane` */
    SIM_SCHED_WAIT,   /* usp_stream_wait_event on `lane` for the record `record` */
    SIM_SCHED_SYNC,   /* the host waits for `lane` (-1: every lane) before it issues more */
    SIM_SCHED_MEET,   /* the host meets the group's other hosts (a split): it goes on when all are there */
} sim_sched_kind;

typedef struct sim_sched_item {
    sim_sched_kind kind;
    int lane;               /* CALL, RECORD, WAIT: the stream's lane (0: the default stream); SYNC: -1 all */
    int group;              /* CALL, MEET: the group's index in the world */
    uint64_t seq;           /* CALL collective, MEET: the rank's index among its collectives on the group
                               (splits included), from 0; CALL point to point: unused (below) */
    int send_to, recv_from; /* point to point: the world ranks it sends to / receives from (-1: none) */
    uint64_t send_seq, recv_seq; /* their indices among this rank's sends to send_to (receives from
                                    recv_from) on the group, from 0 */
    long record;            /* WAIT: the item index of the record it waits for (-1: never recorded) */
    usp_comm_fingerprint call; /* CALL, MEET: the call, for reports */
} sim_sched_item;

typedef struct sim_sched_pair_count {
    int group, peer;
    uint64_t sends, recvs;
} sim_sched_pair_count;

/* One rank's log. */
typedef struct sim_sched_log {
    sim_sched_item *items;
    size_t n, cap;
    int lanes;                 /* the lanes it used: 1 + the largest */
    sim_sched_pair_count *pairs; /* point-to-point counts per (group, peer) */
    int n_pairs, cap_pairs;
    int failed;                /* 1: out of memory; the log is incomplete and must not be explored */
} sim_sched_log;

/* Notes a call of rank r on group g (member `local`) enqueued on `lane`, before the simulator posts it. */
void sim_sched_note_call(struct sim_rank *r, const struct sim_group *g, int local, const usp_comm_op *op,
                         uint64_t seq_on_group, int lane);

/* Notes a record of an event on `lane`; returns its item index (-1 when not logging). */
long sim_sched_note_record(struct sim_rank *r, int lane);

/* Notes a wait of `lane` for the record `record` (-1: an event never recorded). */
void sim_sched_note_wait(struct sim_rank *r, int lane, long record);

/* Notes that the host waits for `lane` (-1: every lane). */
void sim_sched_note_sync(struct sim_rank *r, int lane);

/* Frees a rank's log (NULL is fine). */
void sim_sched_log_free(sim_sched_log *log);

#endif
