/* Sequence layouts (see layout.h). */
#include "core/parallel/layout.h"

usp_layout_kind usp_layout_for(int causal, int ring, int64_t window, int64_t n)
{
    const int narrow = window > 0 && 6 * window <= n;
    return causal && ring > 1 && !narrow ? USP_LAYOUT_ZIGZAG : USP_LAYOUT_CONTIGUOUS;
}

static int64_t gcd(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

int64_t usp_seq_layout_multiple(usp_layout_kind kind, int ulysses, int ring)
{
    int64_t ur = (int64_t)ulysses * ring;
    if (kind == USP_LAYOUT_CONTIGUOUS)
        return ur;
    int64_t two_r = 2 * (int64_t)ring; /* zigzag: 2R chunks, and N/R split over U */
    return two_r / gcd(two_r, ur) * ur;
}

usp_status usp_seq_layout_make(usp_layout_kind kind, int64_t n, int ulysses, int ring, usp_seq_layout *out)
{
    if (ulysses < 1 || ring < 1)
        return usp_error(USP_ERR_CONFIG, "--ulysses %d, --ring %d: degrees must be at least 1", ulysses, ring);
    int64_t m = usp_seq_layout_multiple(kind, ulysses, ring);
    if (n < 1 || n % m != 0) {
        int64_t below = n / m * m, above = below + m;
        const char *why = kind == USP_LAYOUT_ZIGZAG
                              ? "the causal ring layout (zigzag) cuts the sequence into 2R chunks and splits each ring "
                                "rank's tokens over U"
                              : "each of the U*R sequence-parallel ranks holds N/(U*R) tokens";
        if (below > 0)
            return usp_error(USP_ERR_CONFIG,
                             "--seq %lld does not divide for --ulysses %d x --ring %d: %s, so N must be a multiple "
                             "of %lld; the nearest lengths that work are %lld and %lld, or pass --pad to pad the "
                             "sequence to %lld with positions masked out of the loss",
                             (long long)n, ulysses, ring, why, (long long)m, (long long)below, (long long)above,
                             (long long)above);
        return usp_error(USP_ERR_CONFIG,
                         "--seq %lld does not divide for --ulysses %d x --ring %d: %s, so N must be a multiple of "
                         "%lld; the smallest length that works is %lld, or pass --pad to pad the sequence to it",
                         (long long)n, ulysses, ring, why, (long long)m, (long long)above);
    }
    *out = (usp_seq_layout){.kind = kind, .n = n, .ulysses = ulysses, .ring = ring,
                            .per_rank = n / ((int64_t)ulysses * ring)};
    return USP_OK;
}

int usp_seq_layout_runs(const usp_seq_layout *l, int sp_rank, usp_token_run runs[2])
{
    int64_t T = l->per_rank;
    if (l->kind == USP_LAYOUT_CONTIGUOUS) {
        runs[0] = (usp_token_run){(int64_t)sp_rank * T, 0, T};
        return 1;
    }
    int R = l->ring, U = l->ulysses, r = sp_rank / U, u = sp_rank % U;
    int64_t C = l->n / (2 * (int64_t)R);
    int64_t first = (int64_t)u * T, last = first + T; /* positions in the ring rank's list of 2C */
    int n = 0;
    if (first < C) /* part in chunk r */
        runs[n++] = (usp_token_run){(int64_t)r * C + first, 0, (last < C ? last : C) - first};
    if (last > C) { /* part in chunk 2R-1-r */
        int64_t from = first > C ? first : C;
        runs[n++] = (usp_token_run){(int64_t)(2 * R - 1 - r) * C + (from - C), from - first, last - from};
    }
    return n;
}

void usp_seq_layout_locate(const usp_seq_layout *l, int64_t global, int *sp_rank, int64_t *local)
{
    if (l->kind == USP_LAYOUT_CONTIGUOUS) {
        *sp_rank = (int)(global / l->per_rank);
        *local = global % l->per_rank;
        return;
    }
    int R = l->ring, U = l->ulysses;
    int64_t C = l->n / (2 * (int64_t)R), chunk = global / C;
    int r = chunk < R ? (int)chunk : (int)(2 * R - 1 - chunk);
    int64_t in_list = (chunk < R ? 0 : C) + global % C; /* position in the ring rank's list */
    *sp_rank = r * U + (int)(in_list / l->per_rank);
    *local = in_list % l->per_rank;
}

int64_t usp_seq_layout_global(const usp_seq_layout *l, int sp_rank, int64_t local)
{
    usp_token_run runs[2];
    int n = usp_seq_layout_runs(l, sp_rank, runs);
    for (int i = n - 1; i >= 0; i--)
        if (local >= runs[i].local_first)
            return runs[i].global_first + (local - runs[i].local_first);
    return -1;
}
