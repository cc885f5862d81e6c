/* The three tasks of flash attention for one instruction set: a template
 * included by cpu_attention_isa.c after cpu_attention_tiles.h (same macros).
 *
 * Orientation of the tiles, and why. In the forward and the dQ pass a task owns
 * BQ queries and walks the keys; its score tile is S^T [keys][queries], queries
 * along the vector lanes: S^T = K Q^T reads K rows in place (broadcasts) against
 * Q^T packed once per task. The online softmax then runs down the columns: the
 * max, the exp and the sum of one query are elementwise across the rows of S^T,
 * so they vectorise over queries with no horizontal reduction, and m, l, alpha
 * are lane vectors. The dK/dV pass owns BK keys and walks the queries; its tiles
 * are S [queries][keys] against K^T, V^T packed once per task. The products
 * that produce head_dim-wide rows (O += P V, dQ += dS K, dV += P^T dO,
 * dK += dS^T Q) have head_dim along the lanes, read the tile through A's strides
 * and accumulate straight into o, dq, dk, dv.
 *
 * Scores are in base 2: the packed operand carries scale * log2(e), so every
 * exp is an exp2 and m, lse are kept in log2 units inside a task. dS carries
 * the softmax scale, so dQ, dK accumulate plain products. */

/* Sets -inf where a query of the tile at q0 (bq of them, lanes of St [bk][BQP]) may not see a key of
 * the tile at k0: key k0 + j is seen by the local queries of cpu_attn_queries, an interval, so the
 * lanes before it and those after it (the diagonal tiles of causal, a window's edge, a document's
 * boundary). Lanes past bq are padding, never read. */
static void F(mask_scores)(const cpu_attention_shape *s, const usp_mask_row *mk, float *St, int64_t bk, int64_t bq,
                           int64_t q0, int64_t k0)
{
    for (int64_t j = 0; j < bk; j++) {
        int64_t first, end;
        cpu_attn_queries(s, mk, k0 + j, &first, &end);
        const int64_t before = cpu_attn_clamp64(first - q0, 0, BQP), after = cpu_attn_clamp64(end - q0, 0, bq);
        for (int64_t i = 0; i < before; i++) St[j * BQP + i] = -INFINITY;
        for (int64_t i = after; i < bq; i++) St[j * BQP + i] = -INFINITY;
    }
}

/* The keys [*begin, *end) any of the bq queries at q0 sees: the first one's first, the last one's end
 * (both ends only move right). */
static void F(keys_of_tile)(const cpu_attention_shape *s, const usp_mask_row *mk, int64_t q0, int64_t bq,
                            int64_t *begin, int64_t *end)
{
    int64_t unused;
    cpu_attn_keys(s, mk, q0, begin, &unused);
    cpu_attn_keys(s, mk, q0 + bq - 1, &unused, end);
}

/* Forward online softmax over one score tile St [bk][BQP] (log2 units) with
 * running max m and sum l per query lane (o is rescaled by the caller):
 *   m' = max(m, max_j S_ji),  P_ji = 2^(S_ji - m'),
 *   alpha = 2^(m - m'),  l' = alpha l + sum_j P_ji.
 * Keys a query may not see get S = -inf first, so P = 0. A lane that has seen
 * no key yet (m' = -inf) subtracts 0 instead of -inf: P = 0, alpha = 0, l = 0,
 * never -inf - -inf. Writes alpha into `alpha`. */
static void F(forward_softmax)(const cpu_attention_shape *s, const usp_mask_row *mk, float *St, int64_t bk,
                               int64_t bq, int64_t q0, int64_t k0, float *m, float *l, float *alpha)
{
    F(mask_scores)(s, mk, St, bk, bq, q0, k0);
    /* One vector of queries at a time down all bk rows: m', l' stay in registers. */
    const F(vec) ninf = F(vsplat)(-INFINITY), zero = F(vsplat)(0.0f);
    for (int64_t i = 0; i < BQP; i += VW) {
        const F(vec) m0 = F(vload)(m + i);
        F(vec) mx = m0, sum = zero;
        for (int64_t j = 0; j < bk; j++) mx = VMAX(mx, F(vload)(St + j * BQP + i));
        const F(ivec) none = mx == ninf; /* nothing seen yet: subtract 0, never -inf - -inf */
        const F(vec) ms = F(vsel)(none, zero, mx), a = F(vexp2)(m0 - ms);
        for (int64_t j = 0; j < bk; j++) {
            const F(vec) p = F(vexp2)(F(vload)(St + j * BQP + i) - ms);
            F(vstore)(St + j * BQP + i, p);
            sum += p;
        }
        F(vstore)(l + i, a * F(vload)(l + i) + sum);
        F(vstore)(m + i, mx);
        F(vstore)(alpha + i, a);
    }
}

/* Copies the key tile at k0 (of the kv_end keys) of K and V into Kc and Vc, [bk][D] each, and
 * prefetches the next one while this one computes; returns bk. */
static int64_t F(load_key_tile)(float *Kc, float *Vc, const float *kh, const float *vh, int64_t ldk, int64_t k0,
                                int64_t kv_end, int64_t D)
{
    const int64_t bk = cpu_attn_min64(BK, kv_end - k0);
    F(copy_rows)(Kc, kh + k0 * ldk, ldk, bk, D);
    F(copy_rows)(Vc, vh + k0 * ldk, ldk, bk, D);
    if (k0 + BK < kv_end) {
        const int64_t nb = cpu_attn_min64(BK, kv_end - k0 - BK);
        F(prefetch_rows)(kh + (k0 + BK) * ldk, ldk, nb, D);
        F(prefetch_rows)(vh + (k0 + BK) * ldk, ldk, nb, D);
    }
    return bk;
}

static void F(forward_task)(const cpu_attention_shape *s, const float *q, const float *k, const float *v, float *o,
                            float *lse, int64_t b, int64_t h, int64_t q0, float *ws)
{
    const int64_t D = s->head_dim, ldq = s->n_heads * D, ldk = s->n_kv_heads * D;
    const int64_t g = h / (s->n_heads / s->n_kv_heads);
    const int64_t bq = cpu_attn_min64(BQ, s->n_q - q0);
    const float *qt = q + cpu_attn_q_row(s, b, q0, h); /* [bq, D], rows ldq apart */
    float *ot = o + cpu_attn_q_row(s, b, q0, h);       /* [bq, D], rows ldq apart */
    const float *kh = k + cpu_attn_kv_row(s, b, 0, g); /* [Nkv, D], rows ldk apart */
    const float *vh = v + cpu_attn_kv_row(s, b, 0, g); /* [Nkv, D], rows ldk apart */
    float *lt = lse + ((size_t)b * (size_t)s->n_heads + (size_t)h) * (size_t)s->n_q + (size_t)q0; /* [bq] */
    float *St = ws;                 /* [BK][BQP] scores, then P, keys x queries */
    float *Qt = WS_OPERAND(ws, D, 0); /* [D][BQP] scale log2(e) Q^T */
    float *Kc = WS_OPERAND(ws, D, 2), *Vc = WS_OPERAND(ws, D, 3); /* [BK][D] each: this key tile */
    float *m = WS_VECTOR(ws, D, 0);   /* [BQP] running max, log2 units */
    float *l = WS_VECTOR(ws, D, 1), *alpha = WS_VECTOR(ws, D, 2); /* [BQP] each */

    F(pack_transposed)(Qt, BQP, qt, ldq, bq, BQP, D, s->scale * LOG2E);
    for (int64_t i = 0; i < BQP; i++) m[i] = -INFINITY, l[i] = 0.0f;
    for (int64_t i = 0; i < bq; i++) memset(ot + i * ldq, 0, (size_t)D * sizeof(float));
    /* Keys no query of the tile sees (before the first row's, past the last row's) are not computed. */
    const usp_mask_row mk = cpu_attn_mask(s, b);
    int64_t kv_begin, kv_end;
    F(keys_of_tile)(s, &mk, q0, bq, &kv_begin, &kv_end);
    for (int64_t k0 = kv_begin; k0 < kv_end; k0 += BK) {
        const int64_t bk = F(load_key_tile)(Kc, Vc, kh, vh, ldk, k0, kv_end, D);
        /* S^T = K Q^T: rows of K broadcast, Q^T packed. */
        F(mk_product)(bk, BQP, D, Kc, D, 1, Qt, BQP, St, BQP, 0);
        F(forward_softmax)(s, &mk, St, bk, bq, q0, k0, m, l, alpha);
        for (int64_t i = 0; i < bq; i++)
            if (alpha[i] != 1.0f) {
                float *orow = ot + i * ldq;
                const float a = alpha[i];
#pragma omp simd
                for (int64_t d = 0; d < D; d++) orow[d] *= a;
            }
        /* O += P V: O[i][:] += sum_j St[j][i] V[j][:]. */
        F(mk_product)(bq, D, bk, St, 1, BQP, Vc, D, ot, ldq, 1);
    }
    /* o = o / l and lse = ln 2 (m + log2 l); a row that saw no key keeps o = 0. */
    for (int64_t i = 0; i < bq; i++) {
        if (l[i] > 0.0f) {
            const float inv = 1.0f / l[i];
            for (int64_t d = 0; d < D; d++) ot[i * ldq + d] *= inv;
            lt[i] = LN2 * (m[i] + log2f(l[i]));
        } else {
            lt[i] = -INFINITY;
        }
    }
}

/* Backward, with P_ij = exp(scale q_i.k_j - lse_i) recomputed from the given
 * lse (the global one when this call is a block of ring attention):
 *   dV_j = sum_i P_ij dO_i            dP_ij = dO_i . V_j
 *   dS_ij = P_ij (dP_ij - Delta_i)    Delta_i = dO_i . O_i = sum_j P_ij dP_ij
 *   dQ_i = scale sum_j dS_ij K_j      dK_j = scale sum_i dS_ij Q_i
 * Delta from the given o is what makes block-wise gradients add up to the
 * gradients of the whole attention. A row with lse = -inf saw no key: P = 0
 * (its lse2 is stored as +inf, so 2^(S - lse2) = 0 with no branch). */
static void F(row_stats)(const cpu_attention_shape *s, const float *o, const float *lse, const float *d_o,
                         int64_t b, int64_t h, int64_t q0, int64_t bq, float *delta, float *lse2)
{
    const float *lt = lse + ((size_t)b * (size_t)s->n_heads + (size_t)h) * (size_t)s->n_q + (size_t)q0;
    for (int64_t i = 0; i < bq; i++) {
        const float *orow = o + cpu_attn_q_row(s, b, q0 + i, h), *dorow = d_o + cpu_attn_q_row(s, b, q0 + i, h);
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t d = 0; d < s->head_dim; d++) sum += dorow[d] * orow[d];
        delta[i] = sum;
        lse2[i] = lt[i] == -INFINITY ? INFINITY : lt[i] * LOG2E;
    }
}

/* Pass 1 task: dQ of batch b, head h, queries [q0, q0 + bq), over all visible keys. */
static void F(dq_task)(const cpu_attention_shape *s, const float *q, const float *k, const float *v, const float *o,
                       const float *lse, const float *d_o, float *dq, int accumulate, int64_t b, int64_t h, int64_t q0,
                       float *ws)
{
    const int64_t D = s->head_dim, ldq = s->n_heads * D, ldk = s->n_kv_heads * D;
    const int64_t g = h / (s->n_heads / s->n_kv_heads);
    const int64_t bq = cpu_attn_min64(BQ, s->n_q - q0);
    float *dqt = dq + cpu_attn_q_row(s, b, q0, h);     /* [bq, D], rows ldq apart */
    const float *kh = k + cpu_attn_kv_row(s, b, 0, g); /* [Nkv, D], rows ldk apart */
    const float *vh = v + cpu_attn_kv_row(s, b, 0, g); /* [Nkv, D], rows ldk apart */
    float *St = ws, *dSt = ws + TILE_FLOATS;              /* [BK][BQP] each: S^T, dP^T then dS^T */
    float *Qt = WS_OPERAND(ws, D, 0), *dOt = WS_OPERAND(ws, D, 1); /* [D][BQP] each */
    float *Kc = WS_OPERAND(ws, D, 2), *Vc = WS_OPERAND(ws, D, 3); /* [BK][D] each: this key tile */
    float *delta = WS_VECTOR(ws, D, 0), *lse2 = WS_VECTOR(ws, D, 1); /* [BQP] each */
    const float scale = s->scale;
    const F(vec) sc = F(vsplat)(scale);

    F(pack_transposed)(Qt, BQP, q + cpu_attn_q_row(s, b, q0, h), ldq, bq, BQP, D, scale * LOG2E);
    F(pack_transposed)(dOt, BQP, d_o + cpu_attn_q_row(s, b, q0, h), ldq, bq, BQP, D, 1.0f);
    for (int64_t i = 0; i < BQP; i++) delta[i] = 0.0f, lse2[i] = INFINITY; /* padding lanes: P = 0 */
    F(row_stats)(s, o, lse, d_o, b, h, q0, bq, delta, lse2);
    if (!accumulate)
        for (int64_t i = 0; i < bq; i++) memset(dqt + i * ldq, 0, (size_t)D * sizeof(float));
    const usp_mask_row mk = cpu_attn_mask(s, b);
    int64_t kv_begin, kv_end;
    F(keys_of_tile)(s, &mk, q0, bq, &kv_begin, &kv_end);
    for (int64_t k0 = kv_begin; k0 < kv_end; k0 += BK) {
        const int64_t bk = F(load_key_tile)(Kc, Vc, kh, vh, ldk, k0, kv_end, D);
        F(mk_product)(bk, BQP, D, Kc, D, 1, Qt, BQP, St, BQP, 0);  /* S^T = K Q^T */
        F(mk_product)(bk, BQP, D, Vc, D, 1, dOt, BQP, dSt, BQP, 0); /* dP^T = V dO^T */
        F(mask_scores)(s, &mk, St, bk, bq, q0, k0);
        for (int64_t j = 0; j < bk; j++) {
            float *srow = St + j * BQP, *drow = dSt + j * BQP;
            for (int64_t i = 0; i < BQP; i += VW) {
                const F(vec) p = F(vexp2_p)(F(vload)(srow + i) - F(vload)(lse2 + i));
                F(vstore)(drow + i, sc * p * (F(vload)(drow + i) - F(vload)(delta + i)));
            }
        }
        /* dQ += dS K: dQ[i][:] += sum_j dSt[j][i] K[j][:]. */
        F(mk_product)(bq, D, bk, dSt, 1, BQP, Kc, D, dqt, ldq, 1);
    }
}

/* Pass 2 task: dK, dV of batch b, kv head g, keys [k0, k0 + bk), over every query
 * head of the GQA group and every query that sees these keys. */
static void F(dkdv_task)(const cpu_attention_shape *s, const float *q, const float *k, const float *v, const float *o,
                         const float *lse, const float *d_o, float *dk, float *dv, int accumulate, int64_t b,
                         int64_t g, int64_t k0, float *ws)
{
    const int64_t D = s->head_dim, ldq = s->n_heads * D, ldk = s->n_kv_heads * D;
    const int64_t group = s->n_heads / s->n_kv_heads;
    const int64_t bk = cpu_attn_min64(BK, s->n_kv - k0);
    float *dkt = dk + cpu_attn_kv_row(s, b, k0, g);     /* [bk, D], rows ldk apart */
    float *dvt = dv + cpu_attn_kv_row(s, b, k0, g);     /* [bk, D], rows ldk apart */
    float *S = ws, *dS = ws + TILE_FLOATS;                 /* [BQ][BKP] each: S then P, dP then dS */
    float *Kt = WS_OPERAND(ws, D, 0), *Vt = WS_OPERAND(ws, D, 1); /* [D][BKP] each */
    float *Qc = WS_OPERAND(ws, D, 2), *dOc = WS_OPERAND(ws, D, 3); /* [BQ][D] each: this query tile */
    float *delta = WS_VECTOR(ws, D, 0), *lse2 = WS_VECTOR(ws, D, 1); /* [BQ] each */
    const float scale = s->scale;
    const F(vec) sc = F(vsplat)(scale);

    F(pack_transposed)(Kt, BKP, k + cpu_attn_kv_row(s, b, k0, g), ldk, bk, BKP, D, scale * LOG2E);
    F(pack_transposed)(Vt, BKP, v + cpu_attn_kv_row(s, b, k0, g), ldk, bk, BKP, D, 1.0f);
    if (!accumulate)
        for (int64_t j = 0; j < bk; j++) {
            memset(dkt + j * ldk, 0, (size_t)D * sizeof(float));
            memset(dvt + j * ldk, 0, (size_t)D * sizeof(float));
        }
    /* Queries before the first one that sees key k0, or past the last that sees the tile's last key,
     * see none of this tile. */
    const usp_mask_row mk = cpu_attn_mask(s, b);
    int64_t q_begin, q_end, unused;
    cpu_attn_queries(s, &mk, k0, &q_begin, &unused);
    cpu_attn_queries(s, &mk, k0 + bk - 1, &unused, &q_end);
    for (int64_t h = g * group; h < (g + 1) * group; h++) {
        for (int64_t q0 = q_begin; q0 < q_end; q0 += BQ) {
            const int64_t bq = cpu_attn_min64(BQ, q_end - q0);
            F(copy_rows)(Qc, q + cpu_attn_q_row(s, b, q0, h), ldq, bq, D);
            F(copy_rows)(dOc, d_o + cpu_attn_q_row(s, b, q0, h), ldq, bq, D);
            if (q0 + BQ < q_end) { /* the next query tile, while this one computes */
                const int64_t nb = cpu_attn_min64(BQ, q_end - q0 - BQ);
                F(prefetch_rows)(q + cpu_attn_q_row(s, b, q0 + BQ, h), ldq, nb, D);
                F(prefetch_rows)(d_o + cpu_attn_q_row(s, b, q0 + BQ, h), ldq, nb, D);
            }
            F(row_stats)(s, o, lse, d_o, b, h, q0, bq, delta, lse2);
            F(mk_product)(bq, BKP, D, Qc, D, 1, Kt, BKP, S, BKP, 0);   /* S = Q K^T */
            F(mk_product)(bq, BKP, D, dOc, D, 1, Vt, BKP, dS, BKP, 0); /* dP = dO V^T */
            for (int64_t i = 0; i < bq; i++) {
                float *srow = S + i * BKP, *drow = dS + i * BKP;
                const float li = lse2[i], di = delta[i];
                int64_t first, end; /* the keys of the tile query q0 + i sees: [first, end) */
                cpu_attn_keys(s, &mk, q0 + i, &first, &end);
                const int64_t lo = cpu_attn_clamp64(first - k0, 0, bk), hi = cpu_attn_clamp64(end - k0, lo, bk);
                const F(vec) lv = F(vsplat)(li), dv_ = F(vsplat)(di);
                for (int64_t j = 0; j < hi; j += VW) { /* whole vectors: the padding holds 0, then is reset */
                    const F(vec) p = F(vexp2_p)(F(vload)(srow + j) - lv);
                    F(vstore)(srow + j, p);
                    F(vstore)(drow + j, sc * p * (F(vload)(drow + j) - dv_));
                }
                for (int64_t j = 0; j < lo; j++) srow[j] = drow[j] = 0.0f;
                for (int64_t j = hi; j < bk; j++) srow[j] = drow[j] = 0.0f;
            }
            /* dV += P^T dO and dK += dS^T Q: row j of dV, dK sums over the queries i. */
            F(mk_product)(bk, D, bq, S, 1, BKP, dOc, D, dvt, ldk, 1);
            F(mk_product)(bk, D, bq, dS, 1, BKP, Qc, D, dkt, ldk, 1);
        }
    }
}

const cpu_attn_isa CAT(cpu_attn_isa, ISA) = {
    .name = CPU_ATTN_ISA_NAME,
    .vector_bits = VW * 32,
    .forward_task = F(forward_task),
    .dq_task = F(dq_task),
    .dkdv_task = F(dkdv_task),
};

/* The template ends: the next instruction set defines these again. */
#undef ISA
#undef CPU_ATTN_ISA_NAME
#undef VW
#undef MR2
#undef MR1
#undef VFMA
#undef VBCAST
#undef VMAX
#undef VMIN
#undef F
#undef INL
