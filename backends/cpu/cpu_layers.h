/* The layer, loss, optimizer and element-wise kernels of the CPU backend (cpu_layers.c,
 * cpu_loss_optim.c, cpu_map.c), declared for the backend's table in cpu_backend.c. Each runs
 * one op kind (core/ops/op.h) in fp32 with the semantics of its typed call in core/ops/ops.h;
 * usp_op_run has already checked shapes and buffers, and n > 0 on every call. */
#ifndef USP_CPU_LAYERS_H
#define USP_CPU_LAYERS_H

#include "core/ops/backend_impl.h"

/* out [n, C] = wte[tokens] (+ wpe[positions]). */
usp_status cpu_embedding_forward(const usp_op *op);
/* dwte[tokens[i]] += dout[i] (and dwpe[positions[i]]), rows in order per column block. */
usp_status cpu_embedding_backward(const usp_op *op);
/* LayerNorm over the last dimension; saves mean and rstd [n] when non-NULL. */
usp_status cpu_layernorm_forward(const usp_op *op);
/* LayerNorm backward; dinp, dweight and dbias (if non-NULL) accumulate. */
usp_status cpu_layernorm_backward(const usp_op *op);
/* RMSNorm; saves rstd [n] when non-NULL. */
usp_status cpu_rmsnorm_forward(const usp_op *op);
/* RMSNorm backward; dinp and dweight accumulate. */
usp_status cpu_rmsnorm_backward(const usp_op *op);
/* Rotary embedding of x [n, H, D] in place (rotate_half pairs). */
usp_status cpu_rope_forward(const usp_op *op);
/* The inverse (transposed) rotation of dx [n, H, D] in place. */
usp_status cpu_rope_backward(const usp_op *op);
/* Fused softmax cross-entropy over logits [n, V]; losses and dlogits each optional. */
usp_status cpu_cross_entropy(const usp_op *op);
/* One AdamW step over n parameters. */
usp_status cpu_adamw_step(const usp_op *op);
/* *out = sum of x[i]^2 in double, blocked by n alone (same bits for any thread count). */
usp_status cpu_sum_squares(const usp_op *op);
/* x [n, C] += bias [C] on every row. */
usp_status cpu_add_bias(const usp_op *op);
/* dbias [C] += column sums of dout [n, C]. */
usp_status cpu_bias_backward(const usp_op *op);
/* An element-wise function (cpu_map.c), and whether it has a formula here. */
usp_status cpu_map(const usp_op *op);
int cpu_map_supports(usp_map_fn fn);

/* ---- shared by cpu_layers.c, cpu_loss_optim.c and cpu_map.c ------------------------- */

#include <math.h>
#include <omp.h>
#include <stdint.h>

/* Below this many elements an op stays on one thread: waking the pool costs more. */
#define PARALLEL_MIN ((int64_t)1 << 17)
/* Elements per task of the elementwise ops. */
#define ELEM_CHUNK ((int64_t)1 << 13)
/* Column blocks of the sums over rows: a multiple of one 64-byte cache line of
 * floats, at most COL_BLOCK_MAX wide (the double accumulators live on the stack). */
#define COL_ALIGN 16
#define COL_BLOCK_MAX 512
/* sqrt(2 / pi), GPT-2's GELU. */
#define GELU_K 0.7978845608028654f

/* e^x within a few ulp, branch-free (Cephes expf): x = n ln2 + r with
 * n = round(x log2 e) and ln2 split in two (Cody-Waite) so that r is exact,
 * e^r for |r| <= ln2/2 by a degree-6 polynomial, times 2^n built from exponent
 * bits as 2^(n/2) 2^(n - n/2) (n reaches 128, one more than a float exponent).
 * Adding 1.5 * 2^23 rounds to an integer held in the low mantissa bits. Like
 * expf, +inf above 88.72 and NaN stays NaN; 0 below -87.34 (where expf would
 * return a denormal). */
static inline float exp_fast(float x)
{
    const float magic = 12582912.0f, lo = -87.33654f, hi = 88.72283f;
    const float xc = x < lo ? lo : (x > hi ? hi : x);
    union { float f; uint32_t u; } nb, a, b;
    nb.f = xc * 1.44269504088896341f + magic;
    const float n = nb.f - magic;
    const int32_t ni = (int32_t)(nb.u - 0x4B400000u), n1 = ni / 2; /* ni in [-126, 128] */
    a.u = (uint32_t)(n1 + 127) << 23;
    b.u = (uint32_t)(ni - n1 + 127) << 23;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float y = (p * r * r + r + 1.0f) * a.f * b.f;
    return x != x ? x : (x < lo ? 0.0f : (x > hi ? INFINITY : y));
}

/* One column block per thread, so that each thread streams long contiguous
 * pieces of every row. The width changes no bit: every column is summed over
 * the rows in order whatever block it falls in. */
static inline int64_t col_block_width(int64_t C)
{
    const int64_t threads = omp_get_max_threads();
    const int64_t w = ((C + threads - 1) / threads + COL_ALIGN - 1) / COL_ALIGN * COL_ALIGN;
    return w < COL_BLOCK_MAX ? w : COL_BLOCK_MAX;
}

#endif
