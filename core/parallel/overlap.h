/* Whether a sequence-parallel attention overlaps its transfers with its compute:
 * auto decides on shapes alone, where the hidden transfer outweighs the extra
 * calls (ring.c and ulysses.c, overlap_pays); on and off force it (tests, and
 * --ring-overlap / --ulysses-overlap). The bits are the same either way. */
#ifndef USP_PARALLEL_OVERLAP_H
#define USP_PARALLEL_OVERLAP_H

typedef enum usp_overlap { USP_OVERLAP_AUTO = 0, USP_OVERLAP_ON, USP_OVERLAP_OFF } usp_overlap;

#endif
