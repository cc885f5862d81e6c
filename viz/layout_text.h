/* Words for the diagrams (internal to viz/): token ranges of a rank from the
 * sequence layout, and the heads a Ulysses rank attends for. */
#ifndef USP_VIZ_LAYOUT_TEXT_H
#define USP_VIZ_LAYOUT_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "core/parallel/layout.h"

/* "0-3" for `count` items from `first` ("5" for one). */
void viz_range_text(int64_t first, int64_t count, char *buf, size_t size);

/* The tokens of SP rank `sp_rank` in `l`, e.g. "0-3" or "0-1, 14-15" (zigzag). */
void viz_tokens_text(const usp_seq_layout *l, int sp_rank, char *buf, size_t size);

/* The query heads of Ulysses rank j of U, as core/parallel/ulysses.c splits H heads:
 * H/U each, one more for the first H mod U ranks. */
void viz_head_split(int64_t heads, int ulysses, int j, int64_t *first, int64_t *count);

#endif
