/* What a query sees: the attention mask, by global positions.
 *
 * The query at position p of a batch row sees the key at position k when every term holds:
 *   causal     k <= p
 *   window W   causal: k > p - W, the W keys up to p itself (transformers' sliding_window_overlay,
 *              masking_utils.py, under its causal mask); not causal: |p - k| < W
 *   documents  k lies in p's document [start(p), end(p)), read from the row's table
 * Each term is an interval of k whose ends move right as p does. So what p sees is one interval
 * [lo(p), hi(p)) with lo and hi non-decreasing in p, and the queries that see k are one interval
 * too: a kernel walks ranges and skips whole tiles, it never tests pairs one by one.
 *
 * The functions here are the index maps every backend uses (the cpu tiles, the cuda kernels):
 * inline, and callable from device code when compiled by nvcc. */
#ifndef USP_MASK_H
#define USP_MASK_H

#include <stdint.h>

#ifdef __CUDACC__
#define USP_MASK_FN static inline __host__ __device__
#else
#define USP_MASK_FN static inline
#endif

/* Beyond any position: the end of an interval no term bounds. */
#define USP_MASK_FAR ((int64_t)1 << 60)

/* The mask of one batch row. */
typedef struct usp_mask_row {
    int causal;
    int64_t window;     /* 0: no window */
    const int32_t *doc; /* [positions][2]: start and end of the document holding each position; NULL: one */
} usp_mask_row;

USP_MASK_FN int64_t usp_mask_max(int64_t a, int64_t b) { return a > b ? a : b; }
USP_MASK_FN int64_t usp_mask_min(int64_t a, int64_t b) { return a < b ? a : b; }

/* The keys the query at position p sees: [*lo, *hi) (empty when *hi <= *lo). */
USP_MASK_FN void usp_mask_keys(const usp_mask_row *m, int64_t p, int64_t *lo, int64_t *hi)
{
    int64_t a = m->doc ? m->doc[2 * p] : -USP_MASK_FAR, b = m->doc ? m->doc[2 * p + 1] : USP_MASK_FAR;
    if (m->window > 0)
        a = usp_mask_max(a, p - m->window + 1);
    if (m->causal)
        b = usp_mask_min(b, p + 1);
    else if (m->window > 0)
        b = usp_mask_min(b, p + m->window);
    *lo = a, *hi = b;
}

/* The queries that see the key at position k: [*lo, *hi). The document term is symmetric (p is in
 * k's document iff k is in p's), the others mirror: k <= p, and p < k + W. */
USP_MASK_FN void usp_mask_queries(const usp_mask_row *m, int64_t k, int64_t *lo, int64_t *hi)
{
    int64_t a = m->doc ? m->doc[2 * k] : -USP_MASK_FAR, b = m->doc ? m->doc[2 * k + 1] : USP_MASK_FAR;
    if (m->causal)
        a = usp_mask_max(a, k);
    else if (m->window > 0)
        a = usp_mask_max(a, k - m->window + 1);
    if (m->window > 0)
        b = usp_mask_min(b, k + m->window);
    *lo = a, *hi = b;
}

/* An interval of positions moved to a call's local indices: [lo - offset, hi - offset) within [0, n). */
USP_MASK_FN void usp_mask_local(int64_t lo, int64_t hi, int64_t offset, int64_t n, int64_t *first, int64_t *end)
{
    *first = usp_mask_min(usp_mask_max(lo - offset, 0), n);
    *end = usp_mask_max(usp_mask_min(hi - offset, n), *first);
}

/* 1 when the query at p sees the key at k: the definition above, term by term (the tests' reference). */
USP_MASK_FN int usp_mask_sees(const usp_mask_row *m, int64_t p, int64_t k)
{
    if (m->causal && k > p)
        return 0;
    if (m->window > 0 && (m->causal ? k <= p - m->window : (p - k >= m->window || k - p >= m->window)))
        return 0;
    return !m->doc || (k >= m->doc[2 * p] && k < m->doc[2 * p + 1]);
}

/* Visible pairs (p, k) with p in [q0, q0 + nq) and k in [k0, k0 + nk): O(documents met), not O(nq). */
double usp_mask_pairs(const usp_mask_row *m, int64_t q0, int64_t nq, int64_t k0, int64_t nk);

/* Positions [start, end) of a row's table doc are one document: doc[2 p], doc[2 p + 1] = start, end. */
void usp_mask_table_mark(int32_t *doc, int64_t start, int64_t end);

/* The table of a row from its documents' lengths (lengths[0..n_docs), from position 0 on), as
 * usp_mask_table_mark of each. */
void usp_mask_table_fill(const int64_t *lengths, int64_t n_docs, int32_t *doc);

#endif /* USP_MASK_H */
