/* Room core/parallel/: how a sequence is cut across ranks and put back: sequence layouts
 * (layout.h), the device mesh and its groups (mesh.h), the attention schedules behind one
 * table (schedule.h), Ulysses attention (this file) and ring attention (ring.h). It may use:
 * core/comm, core/ops, core/base.
 *
 * Ulysses sequence-parallel attention (DeepSpeed-Ulysses, Jacobs et al. 2023),
 * and the 2-D hybrid with Ring attention across Ulysses groups (USP, Fang and
 * Zhao 2024).
 *
 * Each of the U ranks of a Ulysses group holds T tokens with all H heads. An
 * all-to-all re-lays Q, K and V so that each rank holds all U*T tokens for a
 * share of the heads (sequence -> heads); it runs ordinary flash attention on
 * them (or, in the hybrid, ring attention across the R Ulysses groups), and a
 * second all-to-all brings the output back (heads -> sequence).
 *
 * Heads: rank j gets H/U query heads, one more for the first H mod U ranks
 * (an uneven split through all_to_all_v). Key/value heads follow the query
 * heads they serve: with n_kv_heads a multiple of U each rank gets its own
 * Hkv/U; with U a multiple of n_kv_heads each rank gets the one KV head its
 * query heads use, so every KV head is sent to U/Hkv ranks (K/V traffic
 * U/Hkv times the minimum) and its gradients are summed on the way back.
 *
 * Traffic per rank, elements of f32 (T tokens, D head_dim, B batch; even split):
 *   forward:  Q and O: 2 x (U-1)/U x B T H D;  K and V: 2 x (U-1)/U x B T Hkv' D
 *   backward: dO and dQ like Q and O; dK and dV like K and V
 * where Hkv' = Hkv when U divides Hkv, and U (one KV head per rank) when Hkv divides U.
 * At U = 1 (pure Ring) there is no all-to-all and no layout copy at all.
 *
 * Overlap (ulysses.c, overlap_pays): where each rank's KV heads split in two, the heads go in two
 * groups; the all-to-all of group 1 runs on a stream of its own beside the attention of group 0,
 * and group 0's output (forward) or gradients (backward) go home beside the attention of group 1.
 * Each head's attention is independent of the others', so the bits are those without overlap.
 * In the hybrid the ring's sendrecvs share that stream (see overlap_pays).
 *
 * Memory kept per layer between forward and backward (elements of the storage
 * dtype, nq / nkv this rank's query / KV heads): U > 1: q, k, v, o over the
 * group's U T tokens, B U T (2 nq + 2 nkv) D, and the fp32 lse, B nq U T;
 * U = 1: the lse only (the caller's q, k, v, o are read in place). */
#ifndef USP_ULYSSES_H
#define USP_ULYSSES_H

#include "core/comm/comm.h"
#include "core/parallel/layout.h"
#include "core/parallel/ring.h"
#include "core/ops/ops.h"

typedef struct ulysses_attention ulysses_attention;

/* The overlap's event waits, for ulysses_attention_skip_waits_for_tests. */
enum {
    ULYSSES_WAIT_INPUTS = 1u,   /* the comm stream's wait for the caller's q, k, v (d_o) before the first pack */
    ULYSSES_WAIT_ARRIVED = 2u,  /* the compute stream's wait for a head group's all-to-all before its attention */
    ULYSSES_WAIT_COMPUTED = 4u, /* the comm stream's wait for a group's attention before its output leaves */
    ULYSSES_WAIT_DONE = 8u,     /* the compute stream's wait for the last group's output (gradients) home */
};

typedef struct ulysses_attention_config {
    usp_backend_t *backend;
    usp_stream_t *stream;
    usp_comm_t *ulysses;  /* the Ulysses group (U ranks) */
    usp_comm_t *ring;     /* the ring group for the hybrid; NULL or size 1: local attention */
    int64_t batch;
    int64_t seq_len;      /* N, the whole sequence */
    int64_t n_heads, n_kv_heads, head_dim;
    int causal;
    float scale;          /* 0: 1/sqrt(head_dim) */
    usp_dtype storage;    /* of activations and exchanges: USP_F32 (0), or USP_BF16 on meta */
    int eager_ring_merge; /* the ring's merge as a PyTorch framework runs it (ring.h; shapes only) */
    usp_overlap ring_backward_overlap; /* the ring's backward sends K/V ahead: auto (0), on, off (ring.h) */
    usp_overlap overlap; /* head groups' all-to-alls beside the attention: auto (0; overlap_pays), on, off */
    usp_attention_mask mask; /* beyond causal (core/ops/mask.h); its table covers seq_len positions */
    int64_t layout_window;   /* the window that picks the layout (usp_schedule_config) */
} ulysses_attention_config;

/* Checks that H query heads and Hkv KV heads split over U ranks: Hkv divides H, each rank holds a
 * head, and each rank's query heads map evenly onto its KV heads (no allocation: callable before a run). */
usp_status ulysses_heads_check(int64_t H, int64_t Hkv, int U);

/* The query heads and the KV heads rank j of U attends for (H and Hkv that ulysses_heads_check accepts). */
void ulysses_head_counts(int64_t H, int64_t Hkv, int U, int j, int64_t *q_heads, int64_t *kv_heads);

/* Elements of the storage dtype rank j of U sends in one layer's forward and backward (q, k, v and d_o
 * out, o and dq, dk, dv home), T tokens a rank: the traffic above, for any head split. */
double ulysses_sent(int64_t H, int64_t Hkv, int U, int j, int64_t batch, int64_t T, int64_t head_dim);

/* Checks the shape (N divisible as the layout needs, heads) and allocates the
 * buffers kept between forward and backward (category "activations": at U > 1
 * this rank's heads of q, k, v, o over the group's tokens and the lse; at U = 1 the lse only). */
usp_status ulysses_attention_create(const ulysses_attention_config *c, ulysses_attention **out);

/* The sequence layout this attention expects its input tokens in. */
const usp_seq_layout *ulysses_attention_layout(const ulysses_attention *a);

/* 1 when the attention keeps its own gathered copies of q, k, v, o for backward (U > 1), so the
 * caller's q, k, v may be overwritten after the forward; 0 at U = 1, where sequence -> heads is the
 * identity and the forward's q, k, v, o go straight to the inner attention (no copy, no one-rank
 * all-to-all): backward reads them again, and the caller keeps them unchanged until then. */
int ulysses_attention_keeps_inputs(const ulysses_attention *a);

/* o = attention(q, k, v) for this rank's T tokens: q, o [B, T, H, D]; k, v [B, T, Hkv, D]. */
usp_status ulysses_attention_forward(ulysses_attention *a, const float *q, const float *k, const float *v,
                                     float *o);

/* Gradients of the last forward's q, k, v from d_o [B, T, H, D] (overwritten). */
usp_status ulysses_attention_backward(ulysses_attention *a, const float *d_o, float *dq, float *dk, float *dv);

/* 1 when this handle runs its all-to-alls in two head groups beside the attention (ulysses.c, overlap_pays). */
int ulysses_attention_overlaps(const ulysses_attention *a);

/* Tests only: the overlap skips the waits in `mask` (ULYSSES_WAIT_*; 0 restores them), to show each is needed. */
void ulysses_attention_skip_waits_for_tests(unsigned mask);

/* Frees the attention and its buffers. */
void ulysses_attention_destroy(ulysses_attention *a);

/* The calls above over the untyped handle of the schedules' table (usp_schedule_i), which the ulysses
 * and hybrid schedules share: they differ in their checks and their create only. */
usp_status ulysses_schedule_forward(void *a, const float *q, const float *k, const float *v, float *o);
usp_status ulysses_schedule_backward(void *a, const float *d_o, float *dq, float *dk, float *dv);
int ulysses_schedule_keeps_inputs(const void *a);
void ulysses_schedule_destroy(void *a);

#endif
