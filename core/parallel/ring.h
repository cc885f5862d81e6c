/* Ring attention: exact attention over a sequence split across the R ranks of
 * a ring group, with no rank ever holding more than two K/V blocks.
 *
 * Each ring rank keeps its queries and passes its K/V block to its successor
 * R-1 times, so at step s (0..R-1) rank r holds the block of ring rank
 * (r - s) mod R. The partial results of each block are merged by log-sum-exp
 * (online softmax): with l = log sum_j e^(s_j) over one block,
 *   lse = log(e^lse_a + e^lse_b),  o = e^(lse_a - lse) o_a + e^(lse_b - lse) o_b,
 * which is exact, so the ring equals one-rank attention up to rounding. The
 * backward pass (as in ring-flash-attention) recomputes each block's
 * probabilities from the GLOBAL o and lse of the forward, keeps dQ at home and
 * lets dK/dV travel with their K/V block; after the last step one more hop
 * brings every block's gradients back to the rank that owns it. Where it pays
 * (ring.c, overlap_pays), the backward sends each K/V block one step ahead, on
 * a stream of its own beside the attention of the block before, and dK/dV
 * follow once their block's attention is done: the same sums in the same order.
 *
 * Under a causal mask the zigzag layout (core/parallel/layout.h) gives every ring rank
 * chunks r and 2R-1-r; a (query run, key run) product whose keys all lie in
 * the future of its queries is skipped, so every rank does the same work.
 *
 * A mask that keeps every query from the blocks more than S - 1 ranks back (a causal sliding window on
 * the contiguous layout, short documents) ends the ring after S steps: the blocks go S - 1 hops, and
 * their dK/dV go home in one (to rank r - (S - 1), from rank r + S - 1), so bytes and steps grow with the
 * window, not the sequence. S is the same on every rank: the largest step at which any rank's queries
 * see a key of the block it then holds, from the window and the batch's documents' table.
 *
 * The heads are those this rank attends for: all of them with ring alone, a
 * share of them after Ulysses' all-to-all in the hybrid. */
#ifndef USP_RING_H
#define USP_RING_H

#include <stdint.h>

#include "core/comm/comm.h"
#include "core/parallel/layout.h"
#include "core/parallel/overlap.h"
#include "core/ops/ops.h"

typedef struct ring_attention ring_attention;

/* The backward overlap's event waits, for ring_attention_skip_waits_for_tests. */
enum {
    RING_WAIT_PACKED = 1u,  /* the comm stream's wait for the packed K/V block before the first send */
    RING_WAIT_DONE = 2u,    /* the comm stream's wait for a step's attention before dK/dV leave */
    RING_WAIT_ARRIVED = 4u, /* the compute stream's wait for a step's K/V, dK and dV to arrive */
};

typedef struct ring_attention_config {
    usp_backend_t *backend;
    usp_comm_t *ring;      /* the ring group (size R; this rank is usp_comm_rank(ring)) */
    usp_stream_t *stream;
    usp_seq_layout layout; /* ulysses = 1, ring = R: ring rank r holds the tokens of usp_seq_layout_runs(&layout, r)
                              (zigzag: chunks r and 2R-1-r; contiguous: [rT, (r+1)T)) */
    int64_t batch, n_heads, n_kv_heads, head_dim; /* the heads this rank attends for */
    int causal;
    float scale;
    usp_dtype storage;     /* of the travelling blocks: USP_F32 (0), or USP_BF16 on meta */
    int eager_merge;       /* shapes only: each merge also moves what ring-flash-attention's PyTorch merge does
                              (ring.c, eager_merge_passes) */
    usp_overlap backward_overlap; /* the same on every rank of the ring (auto decides on shapes alone) */
    int share_comm_stream; /* 1: every sendrecv goes on comm_stream, the caller's (NULL on a backend without
                              streams), the backward's overlapped too: the hybrid's Ulysses overlap puts its
                              all-to-alls there, so one stream orders the two groups' calls; 0: the ring makes
                              a stream of its own */
    usp_stream_t *comm_stream;
    usp_attention_mask mask; /* beyond causal (core/ops/mask.h); its table covers layout.n positions */
} ring_attention_config;

/* The ring steps (the blocks a rank attends to, its own first) that a mask without documents needs, T
 * tokens a ring rank: R, but under a causal sliding window W on the contiguous layout only the blocks
 * the window reaches: rank r's first query sees back to r T - W + 1, in the block of rank
 * r - 1 - (W - 2) / T, so 2 + (W - 2) / T steps, at most R; and 1 for W = 1, causal or not. */
int ring_steps(usp_layout_kind kind, int R, int64_t T, int causal, int64_t window);

/* Elements of the storage dtype a ring rank sends in one layer's forward and backward, T tokens and
 * kv_heads KV heads a rank, over S = steps ring steps: (S - 1) 2X forward, (S - 1) 4X + 2X backward
 * (dK and dV home in one hop; nothing at all when S = 1), X = B T Hkv D. */
double ring_sent(int steps, int64_t batch, int64_t T, int64_t kv_heads, int64_t head_dim);

/* Checks the config and allocates the scratch (two travelling buffers of
 * K, V, dK, dV blocks: category "comm"; merge temporaries: "attention workspace"). */
usp_status ring_attention_create(const ring_attention_config *c, ring_attention **out);

/* o [B,T,H,D] and the GLOBAL lse [B,H,T] (saved for backward) of q [B,T,H,D]
 * against every rank's k, v [B,T,Hkv,D]; all this rank's tokens in local order. */
usp_status ring_attention_forward(ring_attention *a, const float *q, const float *k, const float *v, float *o,
                                  float *lse);

/* dq [B,T,H,D], dk, dv [B,T,Hkv,D] of this rank's tokens (overwritten), from the forward's o and lse. */
usp_status ring_attention_backward(ring_attention *a, const float *q, const float *k, const float *v,
                                   const float *o, const float *lse, const float *d_o, float *dq, float *dk,
                                   float *dv);

/* Frees the scratch and the handle (NULL is a no-op). */
void ring_attention_destroy(ring_attention *a);

/* 1 when this handle's backward overlaps its K/V transfers with the attention (ring.c, overlap_pays). */
int ring_attention_backward_overlaps(const ring_attention *a);

/* Tests only: the overlapped backward skips the waits in `mask` (RING_WAIT_*; 0 restores them), to show each is needed. */
void ring_attention_skip_waits_for_tests(unsigned mask);

#endif
