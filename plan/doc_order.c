/* Packing order of documents for the ring's balance (doc_order.h). */
#include "plan/doc_order.h"

#include <stdlib.h>
#include <string.h>

/* sum over k in [lo, hi] of min(k, W) (W <= 0: no cap): the keys queries lo..hi of a document see. */
static double capped_sum(int64_t lo, int64_t hi, int64_t W)
{
    if (hi < lo)
        return 0.0;
    if (W <= 0 || hi <= W)
        return 0.5 * (double)(lo + hi) * (double)(hi - lo + 1);
    if (lo >= W)
        return (double)W * (double)(hi - lo + 1);
    return capped_sum(lo, W, W) + capped_sum(W + 1, hi, W);
}

/* The work of positions [a, b) of the packed sequence: each query at p in document [s, e) sees
 * min(p - s + 1, W) keys. */
static double chunk_work(const int64_t *lengths, int64_t n, int64_t a, int64_t b, int64_t W)
{
    double w = 0.0;
    for (int64_t d = 0, s = 0; d < n && s < b; s += lengths[d++]) {
        const int64_t e = s + lengths[d], x = a > s ? a : s, y = b < e ? b : e;
        if (y > x)
            w += capped_sum(x - s + 1, y - s, W);
    }
    return w;
}

double plan_documents_balance(const int64_t *lengths, int64_t n, int R, int zigzag, int64_t window)
{
    int64_t N = 0;
    for (int64_t d = 0; d < n; d++)
        N += lengths[d];
    if (R <= 1 || N == 0)
        return 1.0;
    const int64_t chunks = zigzag ? 2 * (int64_t)R : R;
    double max = 0.0, sum = 0.0;
    for (int r = 0; r < R; r++) {
        double w = 0.0;
        for (int half = 0; half < (zigzag ? 2 : 1); half++) {
            const int64_t c = half ? chunks - 1 - r : r;
            w += chunk_work(lengths, n, c * N / chunks, (c + 1) * N / chunks, window);
        }
        max = w > max ? w : max, sum += w;
    }
    return sum > 0 ? max * R / sum : 1.0;
}

static int longest_first(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

usp_status plan_documents_order(const int64_t *lengths, int64_t n, int R, int zigzag, int64_t window,
                                int64_t *order, double *balance)
{
    int64_t *trial = malloc((size_t)(n ? n : 1) * sizeof *trial);
    if (!trial)
        return usp_error(USP_ERR_RUNTIME, "out of memory ordering %lld documents", (long long)n);
    memcpy(order, lengths, (size_t)n * sizeof *order);
    *balance = plan_documents_balance(order, n, R, zigzag, window);
    for (int pass = 0; pass < 2; pass++) { /* longest first, then shortest first */
        memcpy(trial, lengths, (size_t)n * sizeof *trial);
        qsort(trial, (size_t)n, sizeof *trial, longest_first);
        for (int64_t i = 0; pass && i < n / 2; i++) {
            const int64_t t = trial[i];
            trial[i] = trial[n - 1 - i], trial[n - 1 - i] = t;
        }
        const double b = plan_documents_balance(trial, n, R, zigzag, window);
        if (b < *balance)
            *balance = b, memcpy(order, trial, (size_t)n * sizeof *order);
    }
    for (int improved = n <= PLAN_DOC_ORDER_SEARCH; improved;) { /* first-improvement swaps */
        improved = 0;
        for (int64_t i = 0; i < n && !improved; i++)
            for (int64_t j = i + 1; j < n && !improved; j++) {
                if (order[i] == order[j])
                    continue;
                int64_t t = order[i];
                order[i] = order[j], order[j] = t;
                const double b = plan_documents_balance(order, n, R, zigzag, window);
                if (b < *balance - 1e-9)
                    *balance = b, improved = 1;
                else
                    t = order[i], order[i] = order[j], order[j] = t;
            }
    }
    free(trial);
    return USP_OK;
}
