/* The order in which packed documents fill a sequence, chosen for the ring's balance. Documents attend
 * only to themselves and their positions restart, so their order in the sequence changes no loss; it
 * changes which ring rank holds which tokens, and so each rank's attention work (visible pairs):
 * zigzag balances one causal sequence, not a 60K-token document beside short ones. `usp plan
 * --documents` packs them in the order this finds when it is more even than the one given. */
#ifndef USP_PLAN_DOC_ORDER_H
#define USP_PLAN_DOC_ORDER_H

#include <stdint.h>

#include "core/base/status.h"

/* The ring ranks' causal attention work (visible pairs under a sliding window `window`, 0: none) of
 * documents `lengths` [n] packed in that order into a sequence of their sum, N, cut into R ring ranks'
 * chunks (zigzag: chunks r and 2R - 1 - r of 2R; else contiguous): max / mean (1 when R = 1). */
double plan_documents_balance(const int64_t *lengths, int64_t n, int R, int zigzag, int64_t window);

/* The most even order found into order [n] (the lengths, reordered) and its max / mean into *balance:
 * the given order, longest first, shortest first, then pairwise swaps while one lowers the max (at most
 * PLAN_DOC_ORDER_SEARCH documents are searched by swaps). */
usp_status plan_documents_order(const int64_t *lengths, int64_t n, int R, int zigzag, int64_t window,
                                int64_t *order, double *balance);

#define PLAN_DOC_ORDER_SEARCH 256

#endif
