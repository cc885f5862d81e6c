/* Attention schedules behind one table: how a layer's attention runs on a rank's shard of the
 * sequence, and what it asks of the mesh. Every schedule (local, Ulysses, Ring, the U x R hybrid,
 * and those to come) is one usp_schedule_i in its own file and one line of the table in
 * schedule.c; the model, the planner's sweep and fit, the diagrams, the selftest and the command
 * line find them there, by name or by the mesh, as every runtime is one usp_runtime_i and every
 * communicator one usp_comm_i.
 *
 * `--attention sp` (the default) runs the schedule the mesh picks: Ulysses on U x 1, Ring on 1 x R,
 * the hybrid on U x R (each entry's `picks`); a name runs that schedule, which checks the mesh. */
#ifndef USP_SCHEDULE_H
#define USP_SCHEDULE_H

#include <stdint.h>

#include "core/comm/comm.h"
#include "core/ops/ops.h"
#include "core/parallel/layout.h"
#include "core/parallel/overlap.h"

/* What a schedule is asked about before any rank runs: the mesh's degrees and the model's heads. */
typedef struct usp_schedule_shape {
    int ulysses, ring;       /* U and R of the mesh (core/parallel/mesh.h) */
    int64_t seq_len;         /* N, the whole sequence */
    int64_t n_heads, n_kv_heads;
    int causal;
    int64_t window;          /* the layer's sliding window (core/ops/mask.h; 0: none): it picks the layout */
} usp_schedule_shape;

/* What a rank makes a schedule's attention from. */
typedef struct usp_schedule_config {
    usp_backend_t *backend;
    usp_stream_t *stream;
    usp_comm_t *ulysses, *ring; /* the rank's groups (NULL: a group of one) */
    int64_t batch, seq_len, n_heads, n_kv_heads, head_dim;
    int causal;
    float scale;                /* 0: 1/sqrt(head_dim) */
    usp_dtype storage;          /* of activations and exchanges */
    int eager_ring_merge;       /* the ring's merge as a PyTorch framework runs it (shapes only; ring.h) */
    usp_overlap ring_backward_overlap, ulysses_overlap; /* ring.h, ulysses.h */
    usp_attention_mask mask;    /* beyond causal: a window, documents (the table covers seq_len positions) */
    int64_t layout_window;      /* the window that picks the layout (core/parallel/layout.h): every layer's, the
                                   same for all the model's attentions; 0 when some layer has none */
} usp_schedule_config;

typedef struct usp_schedule_i {
    const char *name;  /* what --attention names it */
    const char *about; /* one line, for --help and the docs */
    int exact;         /* 1: the attention over the whole sequence, as one rank computes it (local: 0); what
                          the shared tests hold it to (tests/test_schedules.c) */
    /* 1 when --attention sp runs this schedule on a U x R mesh: exactly one entry picks each U, R >= 1
     * (a schedule only named, as local, picks none). */
    int (*picks)(int ulysses, int ring);
    /* USP_OK when it runs on the shape; else USP_ERR_CONFIG naming the option (--ulysses, --ring, --seq)
     * and what would work: the divisibility and GQA rules. */
    usp_status (*check)(const usp_schedule_shape *s);
    /* How the sequence is cut across the ranks (the data and rotary positions follow it). */
    usp_layout_kind (*layout)(const usp_schedule_shape *s);
    /* Elements of the storage dtype the rank `rank` of the U x R group sends in one layer's forward and
     * backward (its all-to-alls and sendrecvs), for a batch of B and head_dim D: the closed form the
     * planner and the tests hold the trace to. */
    double (*sent)(const usp_schedule_shape *s, int rank, int64_t batch, int64_t head_dim);
    /* The diagram usp viz draws it with: "ulysses", "ring", "hybrid" (viz/schedule.h), or NULL: none. */
    const char *diagram;
    /* The attention of one layer on this rank (buffers it keeps are counted as "activations"). */
    usp_status (*create)(const usp_schedule_config *c, void **out);
    /* o [B, T, H, D] of this rank's T tokens from q [B, T, H, D], k, v [B, T, Hkv, D]. */
    usp_status (*forward)(void *a, const float *q, const float *k, const float *v, float *o);
    /* dq, dk, dv (overwritten) of the last forward's q, k, v from d_o. */
    usp_status (*backward)(void *a, const float *d_o, float *dq, float *dk, float *dv);
    /* 1 when it keeps what its backward reads, so the caller may overwrite q, k, v, o after the forward;
     * 0 when the backward reads the caller's q, k, v, o again. */
    int (*keeps_inputs)(const void *a);
    void (*destroy)(void *a);
} usp_schedule_i;

/* The schedules, in the table's order. */
int usp_schedule_count(void);
const usp_schedule_i *usp_schedule_at(int i);

/* The schedule named `name`; NULL when none has that name. */
const usp_schedule_i *usp_schedule_find(const char *name);

/* The schedule --attention sp runs on a U x R mesh. */
const usp_schedule_i *usp_schedule_for_mesh(int ulysses, int ring);

/* The schedule --attention `name` runs on a U x R mesh ("sp" or NULL: the mesh's; else the one named),
 * unchecked; NULL when no schedule has that name. */
const usp_schedule_i *usp_schedule_pick(const char *name, int ulysses, int ring);

/* USP_OK when s's KV heads divide its heads (every schedule needs it); else the named error. Inline:
 * the schedules' files call it, and the table's file (schedule.c) calls them. */
static inline usp_status usp_schedule_heads_check(const usp_schedule_shape *s)
{
    if (s->n_heads < 1 || s->n_kv_heads < 1 || s->n_heads % s->n_kv_heads != 0)
        return usp_error(USP_ERR_CONFIG, "%lld heads and %lld KV heads: the KV heads must divide the heads",
                         (long long)s->n_heads, (long long)s->n_kv_heads);
    return USP_OK;
}

/* The schedule --attention `name` runs on the shape ("sp": the mesh's; else the one named), checked:
 * USP_ERR_CONFIG naming --attention and the schedules there are, or the schedule's own refusal. */
usp_status usp_schedule_resolve(const char *name, const usp_schedule_shape *s, const usp_schedule_i **out);

/* "sp (the mesh's: ulysses, ring or hybrid), local, ulysses, ring, hybrid" into buf. */
void usp_schedules_describe(char *buf, size_t size);

/* ---- a layer's attention, made from a schedule ---- */

typedef struct usp_attention usp_attention;

/* The schedule's attention for config c; its layout is the schedule's, checked against c. */
usp_status usp_attention_create(const usp_schedule_i *s, const usp_schedule_config *c, usp_attention **out);

/* The schedule it runs, and the layout its input tokens are in. */
const usp_schedule_i *usp_attention_schedule(const usp_attention *a);
const usp_seq_layout *usp_attention_layout(const usp_attention *a);

/* The schedule's forward, backward and keeps_inputs (above). */
usp_status usp_attention_forward(usp_attention *a, const float *q, const float *k, const float *v, float *o);
usp_status usp_attention_backward(usp_attention *a, const float *d_o, float *dq, float *dk, float *dv);
int usp_attention_keeps_inputs(const usp_attention *a);

/* Frees it (NULL: nothing). */
void usp_attention_destroy(usp_attention *a);

#endif
