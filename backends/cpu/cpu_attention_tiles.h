/* Register-blocked tile products and exp2 for one vector width: a template,
 * included by cpu_attention_isa.c once per instruction set with these defined:
 *   ISA        a suffix token (avx512, avx2, generic)
 *   VW         floats per vector (16, 8, 4)
 *   MR1, MR2   rows of a micro-tile one / two vectors wide (as many
 *              accumulators as the register file holds, minus the operands)
 *   VFMA(a, b, c)  a * b + c, fused where the CPU has FMA
 *   VMAX(a, b), VMIN(a, b)  lane-wise max / min (one instruction on x86)
 *   VBCAST(p)  a vector of VW copies of *p (a broadcast load: `0 + x` would
 *              cost an add, which the compiler may not drop because of -0)
 * Everything here is static and inlined into that instruction set's tasks.
 *
 * Why one product for all seven: every tile product of flash attention is
 *   C[r][0..n) (+)= sum_k A[r, k] * B[k][0..n)
 * with B's rows contiguous (a packed transposed tile, or rows of k, v, q, d_o
 * as they lie in memory: head_dim contiguous floats) and A read one scalar at a
 * time (broadcast), at any strides. So no operand is repacked per product: the
 * caller packs Q^T and dO^T once per query tile (K^T and V^T once per key
 * tile), and S, P and dS are used in place, transposed or not, through A's
 * strides. The micro-tile is MR rows x NV vectors of accumulators held in
 * registers over the whole k loop: per k, NV vector loads and MR broadcasts feed
 * MR * NV fused multiply-adds. */

#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define F(name) CAT(name, ISA)
#define INL static inline __attribute__((always_inline))

typedef float F(vec) __attribute__((vector_size(VW * sizeof(float))));
typedef int32_t F(ivec) __attribute__((vector_size(VW * sizeof(float))));

INL F(vec) F(vload)(const float *p)
{
    F(vec) x;
    __builtin_memcpy(&x, p, sizeof x); /* an unaligned vector load */
    return x;
}

INL void F(vstore)(float *p, F(vec) x) { __builtin_memcpy(p, &x, sizeof x); }

/* One micro-tile: C[r][0 .. NV*VW) (+)= sum_{k < kn} A[r*ar + k*ak] * B[k*ldb + 0 .. NV*VW)
 * for r < MR. MR and NV are constants at every call site, so the accumulators
 * are registers and the loops unroll. */
INL void F(mk_tile)(const int MR, const int NV, int64_t kn, const float *A, int64_t ar, int64_t ak,
                    const float *B, int64_t ldb, float *C, int64_t ldc, int accumulate)
{
    F(vec) acc[16][2];
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++)
            acc[r][v] = accumulate ? F(vload)(C + r * ldc + v * VW) : (F(vec)){0};
    for (int64_t k = 0; k < kn; k++) {
        F(vec) b[2];
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) b[v] = F(vload)(B + k * ldb + v * VW);
        const float *a = A + k * ak;
#pragma GCC unroll 16
        for (int r = 0; r < MR; r++) {
            const F(vec) ar_b = VBCAST(a + r * ar);
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++) acc[r][v] = VFMA(ar_b, b[v], acc[r][v]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) F(vstore)(C + r * ldc + v * VW, acc[r][v]);
}

/* Rows [0, m) of a column block NV vectors wide: full micro-tiles of MR rows,
 * then the remainder in tiles of 8, 4, 2, 1 rows (each a constant). */
#define MK_ROWS(MRF, NV)                                                                                         \
    do {                                                                                                         \
        int64_t r_ = 0;                                                                                          \
        for (; r_ + (MRF) <= m; r_ += (MRF))                                                                     \
            F(mk_tile)((MRF), (NV), kn, A + r_ * ar, ar, ak, B, ldb, C + r_ * ldc, ldc, accumulate);             \
        if ((MRF) > 8 && r_ + 8 <= m)                                                                            \
            F(mk_tile)(8 < (MRF) ? 8 : (MRF), (NV), kn, A + r_ * ar, ar, ak, B, ldb, C + r_ * ldc, ldc,          \
                       accumulate),                                                                              \
                r_ += 8;                                                                                         \
        if ((MRF) > 4 && r_ + 4 <= m)                                                                            \
            F(mk_tile)(4, (NV), kn, A + r_ * ar, ar, ak, B, ldb, C + r_ * ldc, ldc, accumulate), r_ += 4;         \
        if ((MRF) > 2 && r_ + 2 <= m)                                                                            \
            F(mk_tile)(2, (NV), kn, A + r_ * ar, ar, ak, B, ldb, C + r_ * ldc, ldc, accumulate), r_ += 2;         \
        if (r_ < m) F(mk_tile)(1, (NV), kn, A + r_ * ar, ar, ak, B, ldb, C + r_ * ldc, ldc, accumulate);          \
    } while (0)

/* C[r][c] (+)= sum_{k < kn} A[r*ar + k*ak] * B[k*ldb + c] for r < m, c < n.
 * Columns in blocks of two vectors (one for an odd last vector), each block
 * over all rows, so its B panel (kn x 2 VW floats) stays in L1 while A streams.
 * A column tail of n % VW (head_dim not a multiple of the vector) is scalar;
 * the caller pads tiles whose lanes are queries or keys, so only head_dim can
 * leave one. Summation order over k is fixed: the bits depend on the shape only. */
static void F(mk_product)(int64_t m, int64_t n, int64_t kn, const float *A, int64_t ar, int64_t ak,
                          const float *B0, int64_t ldb, float *C0, int64_t ldc, int accumulate)
{
    const int64_t nv = n / VW;
    int64_t c = 0;
    for (; c + 2 <= nv; c += 2) {
        const float *B = B0 + c * VW;
        float *C = C0 + c * VW;
        MK_ROWS(MR2, 2);
    }
    if (c < nv) {
        const float *B = B0 + c * VW;
        float *C = C0 + c * VW;
        MK_ROWS(MR1, 1);
    }
    for (int64_t cc = nv * VW; cc < n; cc++)
        for (int64_t r = 0; r < m; r++) {
            float sum = accumulate ? C0[r * ldc + cc] : 0.0f;
            for (int64_t k = 0; k < kn; k++) sum += A[r * ar + k * ak] * B0[k * ldb + cc];
            C0[r * ldc + cc] = sum;
        }
}
#undef MK_ROWS

INL F(vec) F(vsplat)(float x) { return VBCAST(&x); }

/* a where m is all ones, b where it is zero (m from a vector comparison). */
INL F(vec) F(vsel)(F(ivec) m, F(vec) a, F(vec) b) { return (F(vec))(((F(ivec))a & m) | ((F(ivec))b & ~m)); }


/* The portable max / min (the generic build's VMAX / VMIN): like x86's maxps,
 * the second operand when either is NaN. */
INL F(vec) F(vmax)(F(vec) a, F(vec) b) { return F(vsel)(a > b, a, b); }
INL F(vec) F(vmin)(F(vec) a, F(vec) b) { return F(vsel)(a < b, a, b); }

/* 2^x per lane, relative error < 1e-7, exactly 0 below -126 (so 2^-inf = 0).
 * x = n + f with n = round(x) and f in [-1/2, 1/2]: 2^f by the Cephes exp2f
 * minimax polynomial, and 2^n added to the exponent bits. The rounding adds
 * 1.5 * 2^23: the float sum's low mantissa bits then hold n. Written on vectors
 * (not left to `omp simd`, which kept the loops around it scalar). */
INL F(vec) F(vexp2)(F(vec) x)
{
    const F(ivec) seen = ~(x < F(vsplat)(-126.0f)); /* false below -126 and for -inf, true for NaN */
    /* NaN is the second operand of max and min, so it comes through (as in llm.c, NaN is not hidden) */
    const F(vec) xc = VMIN(F(vsplat)(126.0f), VMAX(F(vsplat)(-126.0f), x));
    const F(vec) magic = F(vsplat)(12582912.0f);
    const F(vec) r = xc + magic, n = r - magic, f = xc - n;
    const F(ivec) ni = (F(ivec))r - 0x4B400000; /* n as a two's-complement integer */
    F(vec) p = F(vsplat)(1.535336188319500e-4f);
    p = VFMA(p, f, F(vsplat)(1.339887440266574e-3f));
    p = VFMA(p, f, F(vsplat)(9.618437357674640e-3f));
    p = VFMA(p, f, F(vsplat)(5.550332471162809e-2f));
    p = VFMA(p, f, F(vsplat)(2.402264791363012e-1f));
    p = VFMA(p, f, F(vsplat)(6.931472028550421e-1f));
    p = VFMA(p, f, F(vsplat)(1.0f));
    return (F(vec))(((F(ivec))p + (ni << 23)) & seen);
}

/* The backward's P = 2^x, but 0 below 2^-64. A row's largest P is at least 1/n, so a P under 2^-64 lies some
 * 40 binary orders below its row's terms, under the rounding of the sums it enters; its products with dP and
 * dO, though, fall into the denormal range,
 * which x86 computes through a microcode assist: as training made gpt2-124m's attention peakier, its backward
 * on this cpu backend went from 337 to 501 ms a step over 6 steps (2 processes, AVX-512), and stayed at 311-332
 * with denormals flushed to zero. */
#define P_FLOOR_LOG2 (-64.0f)
INL F(vec) F(vexp2_p)(F(vec) x)
{
    return F(vexp2)(F(vsel)(x < F(vsplat)(P_FLOOR_LOG2), F(vsplat)(-INFINITY), x));
}

/* Copies rows [0, n) of a (rows ld apart, D floats each) to contiguous rows:
 * k, v, q, d_o rows of one head lie H * D floats apart, 4 KiB at 8 heads of
 * 128, so a micro-tile's rows would all fall in one L1 set and evict each
 * other; a copy costs 1/BQ of the multiply-adds that then read it. */
static void F(copy_rows)(float *dst, const float *a, int64_t ld, int64_t n, int64_t D)
{
    const int64_t dv = D / VW * VW;
    for (int64_t i = 0; i < n; i++) {
        for (int64_t d = 0; d < dv; d += VW) F(vstore)(dst + i * D + d, F(vload)(a + i * ld + d));
        for (int64_t d = dv; d < D; d++) dst[i * D + d] = a[i * ld + d];
    }
}

/* Asks for rows [0, n) of a (rows ld apart, D floats each) in L2 ahead of their
 * copy: the rows lie a page apart, where the hardware prefetchers stop, and the
 * copy otherwise waits on L3 for every row (12% of a head_dim-128 forward). */
static void F(prefetch_rows)(const float *a, int64_t ld, int64_t n, int64_t D)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t d = 0; d < D; d += 16) __builtin_prefetch(a + i * ld + d, 0, 2);
}

/* Packs rows [0, n) of a (rows ld apart, D floats each) transposed and scaled:
 * at[d*ldt + i] = c * a[i*ld + d], lanes [n, np) zero. Once per task. */
static void F(pack_transposed)(float *at, int64_t ldt, const float *a, int64_t ld, int64_t n, int64_t np, int64_t D,
                               float c)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t d = 0; d < D; d++) at[d * ldt + i] = c * a[i * ld + d];
    for (int64_t d = 0; d < D; d++)
        for (int64_t i = n; i < np; i++) at[d * ldt + i] = 0.0f;
}
