/* Where each token of the sequence lives: the map between a global token
 * index and (sequence-parallel rank, local index), for both layouts.
 *
 * SP rank p = r * U + u (ring index r, Ulysses index u; core/parallel/mesh.h).
 * contiguous: rank p holds tokens [p T, (p+1) T), T = N / (U R). Ulysses and
 *   full-mask ring attention use it.
 * zigzag (causal ring): the sequence is cut into 2R chunks of C = N / (2R);
 *   ring rank r holds chunks r and 2R-1-r, so under a causal mask every ring
 *   rank does the same work; its 2C tokens are split contiguously across its
 *   U Ulysses ranks (T = 2C / U each).
 * The data loader and rotary embeddings take global position ids from here. */
#ifndef USP_LAYOUT_H
#define USP_LAYOUT_H

#include <stdint.h>

#include "core/base/status.h"

typedef enum usp_layout_kind { USP_LAYOUT_CONTIGUOUS, USP_LAYOUT_ZIGZAG } usp_layout_kind;

typedef struct usp_seq_layout {
    usp_layout_kind kind;
    int64_t n;            /* sequence length */
    int ulysses, ring;    /* degrees */
    int64_t per_rank;     /* tokens per SP rank */
} usp_seq_layout;

/* A run of consecutive global positions held consecutively by one rank. */
typedef struct usp_token_run {
    int64_t global_first, local_first, count;
} usp_token_run;

/* The layout for attention on U x R ranks over n tokens: zigzag when causal and R > 1, unless a sliding
 * window of at most n / 6 tokens (0: none) narrows the mask; else contiguous. Under such a window the
 * work is nearly even on contiguous shards (max / mean at most 1 / (1 - W / 2n) < 1.09: only the first W
 * queries see fewer keys) and each ring rank needs only the blocks just before its own (ring.h), where
 * zigzag's second chunk would need the next rank's, a whole ring away. */
usp_layout_kind usp_layout_for(int causal, int ring, int64_t window, int64_t n);

/* Checks that N divides (by U*R, and by 2R for zigzag). The error names N, the
 * degrees, the nearest lengths that work and --pad. */
usp_status usp_seq_layout_make(usp_layout_kind kind, int64_t n, int ulysses, int ring, usp_seq_layout *out);

/* The multiple every N must be of. */
int64_t usp_seq_layout_multiple(usp_layout_kind kind, int ulysses, int ring);

/* Global index -> (SP rank, local index). */
void usp_seq_layout_locate(const usp_seq_layout *l, int64_t global, int *sp_rank, int64_t *local);

/* (SP rank, local index) -> global index. */
int64_t usp_seq_layout_global(const usp_seq_layout *l, int sp_rank, int64_t local);

/* The runs of SP rank `sp_rank`'s tokens, in local order (at most 2); returns how many. */
int usp_seq_layout_runs(const usp_seq_layout *l, int sp_rank, usp_token_run runs[2]);

#endif
