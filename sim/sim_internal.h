/* Shared state of the simulator's parts: the scheduler (world.c), the
 * communicator (sim_comm.c), data movement (collectives.c) and reports (report.c). */
#ifndef USP_SIM_INTERNAL_H
#define USP_SIM_INTERNAL_H

#include "core/safety/comm_decorator.h"
#include "core/comm/comm_impl.h"
#include "core/safety/comm_report.h"
#include "core/base/strbuf.h"
#include "sim/fiber.h"
#include "sim/p2p_flows.h"
#include "sim/world.h"

/* RANK_PARKED: a mirror (sim/mirrors.c) stopped at its first call; its rank's run stands for it. */
typedef enum sim_rank_state { RANK_READY, RANK_BLOCKED, RANK_DONE, RANK_PARKED } sim_rank_state;

/* A collective's price on a group, kept for the next one of the same shape (sim_comm.c). */
typedef struct sim_group_price {
    usp_comm_kind kind;
    usp_dtype dtype;
    size_t count;
    int root;
    double seconds;     /* with nothing in the members' caches */
    double hot_seconds; /* with all of their buffers there (the same without hot tables or a cache model) */
} sim_group_price;

#define SIM_GROUP_PRICES 4

/* A process group, shared by its members' handles. */
typedef struct sim_group {
    int id;                  /* its index in the world's groups */
    char name[USP_COMM_NAME_MAX];
    int size;
    int *members;            /* [size] world ranks */
    usp_comm_op **posted;    /* [size] the collective in progress (NULL: member not there yet) */
    int n_posted;
    int first_posted;        /* the lowest member index posted (valid while n_posted > 0) */
    uint64_t *calls;         /* [size] calls each member issued on the group */
    uint64_t *collectives;   /* [size] collectives each member posted */
    int *mirror_locals;      /* [size x (mirrors - 1)]: member i's mirrors' indices here (-1: not a member);
                                NULL when the world has no mirrors (sim/mirrors.c) */
    sim_group_price prices[SIM_GROUP_PRICES]; /* the last collectives priced here, newest at next_price - 1 */
    int n_prices, next_price;
} sim_group;

/* The context of one rank's handle of a group. */
typedef struct sim_comm {
    struct sim_world *world;
    sim_group *group;
    int local;          /* the rank's index in the group */
    usp_comm_t *handle;
} sim_comm;

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

    uint64_t gathers;        /* usp_rank_gather calls the rank made (sim/rank_gather.c) */
    double mirror_end;       /* sim/mirrors.c: the end of this rank's send and its mirrors' (the first seen) */
    int mirror_ends;         /* how many of those M sends have ended */

    /* Virtual streams (sim/virtual_streams.h): lane 0 is the default stream, its clock `clock`. */
    int virtual_streams;     /* 1: the backend is wrapped, its streams are lanes; 0: one clock for everything */
    double *lane_clock;      /* [n_lanes] clocks of lanes 1.. ([0] unused) */
    int n_lanes, cap_lanes;
    struct sim_side_call *side_calls; /* calls on lanes > 0 that lane 0's compute may still run beside */
    int n_side_calls, cap_side_calls;
    double hidden_comm_s, hidden_wait_s; /* parts of comm_s and wait_s that ran beside compute */

    int mute_costs;          /* 1 while sim/staged_move.c copies: the simulator's copies, not the cluster's, move no clock */
    struct sim_cache *cache; /* what its ops' operands find in cache (sim/cache_model.h); NULL: not modelled (a GPU
                                without hot kernel classes or a cache size) */
    double call_held;        /* the fraction of its last call's buffers the cache held at the post */
    struct sim_sched_log *sched; /* what the rank enqueued, for exploration (sim/schedule_log.h); NULL: not logged */

    sim_comm **comms;        /* the rank's live handles (the world frees those a rank left open) */
    int n_comms, cap_comms;
} sim_rank;

struct sim_world {
    sim_config config;
    usp_comm_decorator *decorator; /* counts, fingerprints and faults every rank's calls (core/safety/comm_decorator.h) */
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
    char *abort_reason;      /* the report's first line, for the ranks' messages (NULL until an abort) */
    int ran;
    usp_report_snapshot snapshot;  /* the ranks as the first report saw them (sim_world_wait_graph) */
    struct sim_gather_slot *gathers; /* usp_rank_gather calls in progress, by call index (rank_gather.c) */
    size_t n_gathers;
    /* Work the collectives cost the simulator (sim_world_work): the traffic entries priced and
     * the pairs of posted calls compared; each O(n) per collective but for the all-to-alls. */
    uint64_t traffic_entries, match_checks, ready_offers;
    int mirrors;             /* sim_config.mirrors (1: none) */
    int *local_scratch;      /* [n] -1, or a member's index while a group is indexed (sim/mirrors.c) */
    int mirrors_failed;      /* 1: the run broke the mirrors' symmetry (sim_world_mirrors_failed) */
    int mirror_flows;        /* 1: the mirrors' transfers are queued (lanes may share links: sim/mirrors.c) */
    uint64_t staged_bytes;   /* bytes downloaded and uploaded by sim/staged_move.c (sim_world_staged_bytes) */
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
/* The checks alone: every buffer inside memory its rank allocated, send and receive apart but in place. */
usp_status sim_check_collective(const struct sim_world *w, const sim_group *g);
usp_status sim_check_p2p(const sim_rank *sender, const sim_rank *receiver);

/* The bytes of send and recv buffer `op` touches on member `i` of a group of `n` (collectives.c). */
void sim_buffer_extents(const usp_comm_op *op, int i, int n, size_t *send, size_t *recv);
/* Moves a matched collective's data between the members' buffers, all in host memory (collectives.c). */
usp_status sim_move_host(usp_comm_op **ops, int size);

/* staged_move.c: sim_move_collective and sim_move_p2p for ranks whose buffers are device memory
 * (sim_config.device_memory): through host copies, downloaded and uploaded by each rank's own backend
 * on the call's stream. sim_comm.c picks which. */
usp_status sim_staged_collective(struct sim_world *w, sim_group *g);
usp_status sim_staged_p2p(struct sim_world *w, const sim_rank *sender, const sim_rank *receiver);

/* mirrors.c: ranks that stand in for others (sim_config.mirrors). */
/* 1 when `rank` is a mirror: its block's first rank runs for it. */
static inline int sim_is_mirror(const struct sim_world *w, int rank) { return w->mirrors > 1 && rank % w->mirrors; }
/* The rank whose run `rank` reports: itself, or its block's first rank when it is a mirror. */
const sim_rank *sim_mirror_source(const struct sim_world *w, int rank);
/* Checks the config allows mirrors and allocates their index (sim_world_create). */
usp_status sim_mirrors_setup(struct sim_world *w);
/* Indexes the mirrors among g's members (sim_group_create). */
usp_status sim_mirrors_index(struct sim_world *w, sim_group *g);
/* Posts `op` (posted by member `local`) for that member's mirrors in g; returns how many. */
int sim_mirrors_post(struct sim_world *w, sim_group *g, int local, usp_comm_op *op);
/* Queues the mirrors' copies of the transfer src -> dst (both first ranks of their blocks). */
usp_status sim_mirrors_submit(struct sim_world *w, double start, int src, int dst, uint64_t bytes);
/* Notes a finished transfer; returns 1 when it was a mirror's (nobody waits for it). */
int sim_mirrors_flow_done(struct sim_world *w, int src, int dst, double t_end);
/* *handled = 1 and the call's status when r's call is not posted: r is a mirror (it parks), or the call
 * breaks the mirrors' symmetry (the run aborts). */
usp_status sim_mirrors_intercept(struct sim_world *w, sim_rank *r, sim_comm *sc, const usp_comm_op *op, int *handled);
/* Ends the symmetry: the run aborts and sim_world_mirrors_failed says so. */
void sim_mirrors_fail(struct sim_world *w, const char *why, int rank);
/* After the run: the parked mirrors return from their calls and unwind; the sends' ends are checked. */
void sim_mirrors_finish(struct sim_world *w);

/* report.c: fills the backend-neutral reports (core/safety/comm_report.h) from the simulator's state */
void sim_abort(struct sim_world *w, usp_status status);
usp_status sim_report_stall(struct sim_world *w);
void sim_report_mismatch(struct sim_world *w, const sim_group *g, const sim_rank *a, const sim_rank *b,
                         const char *what);
void sim_report_crash(struct sim_world *w);

#endif
