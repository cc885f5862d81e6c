/* Counting what a mask lets through (core/ops/mask.h), in closed form per document. */
#include "core/ops/mask.h"

/* sum over p in [x, y) of max(0, alpha + s p), s in {-1, 0, 1}: an arithmetic series over the part
 * where the term is positive. */
static double sum_positive(int64_t alpha, int s, int64_t x, int64_t y)
{
    if (s == 0)
        return alpha > 0 && y > x ? (double)(y - x) * (double)alpha : 0.0;
    if (s > 0) { /* alpha + p >= 1 from p = 1 - alpha on */
        const int64_t u = usp_mask_max(x, 1 - alpha);
        return y > u ? (double)(y - u) * ((double)(alpha + u) + (double)(alpha + y - 1)) / 2.0 : 0.0;
    }
    const int64_t v = usp_mask_min(y, alpha); /* alpha - p >= 1 up to p = alpha - 1 */
    return v > x ? (double)(v - x) * ((double)(alpha - x) + (double)(alpha - v + 1)) / 2.0 : 0.0;
}

/* Queries [x, y) of one document whose keys lie in [A, B): each sees [max(A, p + a), min(B, p + c)),
 * a = 1 - W with a window (else far below), c = 1 causal, W with a window, else far above. The two
 * ends change form at p = B - c and p = A - a: the pieces between are linear in p. */
static double document_pairs(int64_t x, int64_t y, int64_t A, int64_t B, int64_t a, int64_t c)
{
    if (y <= x || B <= A)
        return 0.0;
    const int64_t t1 = B - c, t2 = A - a; /* below t1 the upper end is p + c; from t2 on the lower is p + a */
    int64_t cut[4] = {x, usp_mask_min(usp_mask_max(usp_mask_min(t1, t2), x), y), 0, y};
    cut[2] = usp_mask_min(usp_mask_max(usp_mask_max(t1, t2), x), y);
    double sum = 0.0;
    for (int i = 0; i < 3; i++) {
        const int64_t lo = cut[i], hi = cut[i + 1];
        if (hi <= lo)
            continue;
        const int upper_fixed = lo >= t1, lower_moves = lo >= t2; /* the same over [lo, hi) */
        if (!upper_fixed && !lower_moves)
            sum += sum_positive(c - A, 1, lo, hi);
        else if (upper_fixed && !lower_moves)
            sum += sum_positive(B - A, 0, lo, hi);
        else if (!upper_fixed)
            sum += sum_positive(c - a, 0, lo, hi);
        else
            sum += sum_positive(B - a, -1, lo, hi);
    }
    return sum;
}

double usp_mask_pairs(const usp_mask_row *m, int64_t q0, int64_t nq, int64_t k0, int64_t nk)
{
    const int64_t a = m->window > 0 ? 1 - m->window : -USP_MASK_FAR;
    const int64_t c = m->causal ? 1 : m->window > 0 ? m->window : USP_MASK_FAR;
    double sum = 0.0;
    for (int64_t p = q0; p < q0 + nq;) {
        const int64_t start = m->doc ? m->doc[2 * p] : -USP_MASK_FAR, end = m->doc ? m->doc[2 * p + 1] : USP_MASK_FAR;
        const int64_t next = usp_mask_min(usp_mask_max(end, p + 1), q0 + nq); /* moves on, whatever the table */
        sum += document_pairs(p, next, usp_mask_max(start, k0), usp_mask_min(end, k0 + nk), a, c);
        p = next;
    }
    return sum;
}

void usp_mask_table_mark(int32_t *doc, int64_t start, int64_t end)
{
    for (int64_t p = start; p < end; p++)
        doc[2 * p] = (int32_t)start, doc[2 * p + 1] = (int32_t)end;
}

void usp_mask_table_fill(const int64_t *lengths, int64_t n_docs, int32_t *doc)
{
    for (int64_t d = 0, start = 0; d < n_docs; start += lengths[d++])
        usp_mask_table_mark(doc, start, start + lengths[d]);
}
