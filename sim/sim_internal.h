/* Shared state of the simulator's parts: the scheduler (world.c), the
 * communicator (sim_comm.c), data movement (collectives.c) and reports (report.c). */
#ifndef USP_SIM_INTERNAL_H
#define USP_SIM_INTERNAL_H

#include "core/comm_impl.h"
#include "core/strbuf.h"
#include "sim/fiber.h"
#include "sim/p2p_flows.h"
#include "sim/world.h"

typedef enum sim_rank_state { RANK_READY, RANK_BLOCKED, RANK_DONE } sim_rank_state;

/* A process group, shared by its members' handles. */
typedef struct sim_group {
    char name[USP_COMM_NAME_MAX];
    int size;
    int *members;            /* [size] world ranks */
    usp_comm_op **posted;    /* [size] the collective in progress (NULL: member not there yet) */
    int n_posted;
    uint64_t *calls;         /* [size] calls each member issued on the group */
    uint64_t *collectives;   /* [size] collectives each member posted */
} sim_group;

/* The context of one rank's handle of a group. */
typedef struct sim_comm {
    struct sim_world *world;
    sim_group *group;
    int local;          /* the rank's index in the group */
    usp_comm_t *handle;
} sim_comm;

/* What a crashed rank was doing, for the report. */
typedef struct sim_crash {
    int crashed;
    uint64_t call;
    usp_comm_kind kind;
    const sim_group *group;
    uint64_t seq;
    usp_call_site site;
} sim_crash;

/* What a rank was doing when the run's report was made (report.c), kept for
 * sim_world_wait_graph: the groups' posted slots are cleared by the abort. */
typedef struct sim_rank_snapshot {
    sim_rank_state state;
    int crashed;
    int op;                  /* usp_comm_kind blocked in or crashed at, -1 when none */
    const sim_group *group;  /* that call's group (owned by the world) */
    uint64_t seq;
    usp_call_site site;
    int posted;              /* blocked in a collective it has posted on `group` */
    int send_to, recv_from;  /* world ranks of its unmatched transfer parts, -1 when none */
    int mismatched;          /* named by a mismatch report */
    char call[112];          /* the op with its arguments */
    uint64_t calls;
    usp_status result;
    double clock;
} sim_rank_snapshot;

typedef struct sim_rank {
    int id;
    struct sim_world *world;
    sim_fiber *fiber;
    sim_rank_state state;
    double clock;            /* virtual seconds */
    double compute_s, comm_s, wait_s; /* where the clock went (sim_world_rank_times) */
    usp_error_slot error;
    usp_status result;
    usp_backend_t *backend;
    usp_comm_t *world_comm;

    /* The call the rank is blocked in. */
    usp_comm_op *op;
    sim_comm *op_comm;
    uint64_t op_seq;         /* its index among the rank's calls on that group */
    int send_pending, recv_pending; /* point-to-point parts not matched yet */
    int in_flight;           /* point-to-point parts matched and still moving (w->p2p) */
    usp_status wake;         /* what the call returns when the rank is resumed */

    /* Fault injection. */
    uint64_t calls_any, calls_of_kind[USP_OP_COUNT];
    sim_crash crash;
    int has_deferred;        /* a swapped collective waits for the next one */
    usp_comm_op deferred;
    sim_comm *deferred_comm;
    size_t *deferred_arrays; /* copies of an all_to_all_v's counts and offsets */
    size_t *wrong_counts;    /* a size fault's send counts (its own: a swap may hold deferred_arrays) */

    uint64_t gathers;        /* usp_rank_gather calls the rank made (sim/rank_gather.c) */

    sim_comm **comms;        /* the rank's live handles */
    int n_comms, cap_comms;
    sim_rank_snapshot snap;  /* valid when the world's snapshot_kind is set */
} sim_rank;

struct sim_world {
    sim_config config;
    sim_fault *faults;
    sim_rank *ranks;
    int n;
    sim_group **groups;
    int n_groups, cap_groups;
    usp_trace_t *trace;
    sim_p2p_flows *p2p;      /* matched transfers in flight, sharing links (made with the ranks) */
    usp_rank_main_fn main_fn;
    void *main_arg;
    sim_rank *current;       /* the rank whose fiber runs, NULL in the scheduler */
    usp_status abort_status; /* USP_OK until a report aborts the run */
    usp_strbuf report;
    usp_strbuf injected;     /* one line per fault that fired */
    char abort_reason[256];  /* the report's first line, for the ranks' messages */
    int ran;
    sim_report_kind snapshot_kind; /* the first report's kind; the ranks' `snap` hold its state */
    struct sim_gather_slot *gathers; /* usp_rank_gather calls in progress, by call index (rank_gather.c) */
    size_t n_gathers;
};

/* rank_gather.c: usp_rank_ctx.gather of a simulated rank (gather_ctx: its sim_rank). */
usp_status sim_rank_gather(const usp_rank_ctx *ctx, const void *mine, size_t bytes, void *all);
void sim_gathers_free(struct sim_world *w);

/* sim_comm.c */
extern const usp_comm_i sim_comm_iface;
usp_status sim_group_create(struct sim_world *w, const char *name, int size, const int *members,
                            sim_group **out);
usp_status sim_comm_open(struct sim_world *w, sim_group *g, int local, usp_comm_t **out);
/* Moves the transfers in flight to time t (an event time of sim_p2p_flows_next);
 * each rank whose call completes is READY and passed to woke(ctx, rank). */
usp_status sim_transfers_advance(struct sim_world *w, double t, void (*woke)(void *ctx, int rank), void *ctx);

/* collectives.c: moves the data of a matched collective / transfer; checks the buffers first. */
usp_status sim_move_collective(struct sim_world *w, sim_group *g);
usp_status sim_move_p2p(struct sim_world *w, const sim_rank *sender, const sim_rank *receiver);
void sim_describe_op(usp_strbuf *b, const usp_comm_op *op);

/* report.c */
void sim_abort(struct sim_world *w, usp_status status);
usp_status sim_report_stall(struct sim_world *w);
void sim_report_mismatch(struct sim_world *w, const sim_group *g, const sim_rank *a, const sim_rank *b,
                         const char *what);
void sim_report_crash(struct sim_world *w);

#endif
