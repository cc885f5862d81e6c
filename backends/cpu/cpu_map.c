/* The element-wise ops of the CPU backend (USP_OP_MAP, core/ops/op.h): one driver that cuts n
 * elements into tasks of ELEM_CHUNK under OpenMP, and each function's formula over one task as a
 * vectorised loop (compiled for AVX-512, AVX2 and SSE2, picked at load time: cpu_simd.h). The same
 * bits for any thread count: an element is one thread's. exp is the branch-free polynomial of
 * cpu_layers.h, because a call to libm's expf or tanhf in a loop stops vectorisation (GELU through
 * tanhf was 20x slower on one core, measured).
 *
 * A new function: its formula below and its line in `formulas`. */
#include "backends/cpu/cpu_layers.h"
#include "backends/cpu/cpu_simd.h"

#define MAP_OPERANDS_MAX 5

/* One task of a function: n elements from each of its outputs and inputs (already offset). */
typedef void (*map_formula)(float *const *out, const float *const *in, float scalar, int64_t n);

/* tanh(u) = 1 - 2 / (e^2u + 1): exact limits +-1, absolute error ~1e-7 near 0. */
static inline float tanh_fast(float u) { return 1.0f - 2.0f / (exp_fast(2.0f * u) + 1.0f); }

/* gelu(x) = x/2 * (1 + tanh(u)), u = k (x + 0.044715 x^3). */
SIMD_CLONES static void gelu_tanh_forward(float *const *o, const float *const *in, float scalar, int64_t n)
{
    float *out = o[0];
    const float *inp = in[0];
    (void)scalar;
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        const float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanh_fast(GELU_K * (x + 0.044715f * x * x * x)));
    }
}

/* gelu'(x) = (1 + t)/2 + x/2 * (1 - t^2) * k (1 + 3 * 0.044715 x^2), t = tanh(u). */
SIMD_CLONES static void gelu_tanh_backward(float *const *o, const float *const *in, float scalar, int64_t n)
{
    float *dinp = o[0];
    const float *inp = in[0], *dout = in[1];
    (void)scalar;
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        const float x = inp[i], t = tanh_fast(GELU_K * (x + 0.044715f * x * x * x));
        dinp[i] = (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * 0.044715f * x * x)) *
                  dout[i];
    }
}

/* silu(g) = g * s with s = sigmoid(g) = 1/(1 + e^-g): saturates to 0 or 1, never NaN. */
SIMD_CLONES static void swiglu_forward(float *const *o, const float *const *in, float scalar, int64_t n)
{
    float *out = o[0];
    const float *gate = in[0], *up = in[1];
    (void)scalar;
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i];
        out[i] = g / (1.0f + exp_fast(-g)) * up[i];
    }
}

/* d silu(g)/dg = s + g s (1 - s) = s (1 + g (1 - s)). */
SIMD_CLONES static void swiglu_backward(float *const *o, const float *const *in, float scalar, int64_t n)
{
    float *dgate = o[0], *dup = o[1];
    const float *gate = in[0], *up = in[1], *dout = in[2];
    (void)scalar;
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i], s = 1.0f / (1.0f + exp_fast(-g)), dy = dout[i];
        dgate[i] = dy * up[i] * s * (1.0f + g * (1.0f - s));
        dup[i] = dy * g * s;
    }
}

SIMD_CLONES static void scale(float *const *o, const float *const *in, float scalar, int64_t n)
{
    float *x = o[0];
    (void)in;
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        x[i] *= scalar;
}

static const map_formula formulas[USP_MAP_FN_COUNT] = {
    [USP_MAP_GELU_TANH_FORWARD] = gelu_tanh_forward,
    [USP_MAP_GELU_TANH_BACKWARD] = gelu_tanh_backward,
    [USP_MAP_SWIGLU_FORWARD] = swiglu_forward,
    [USP_MAP_SWIGLU_BACKWARD] = swiglu_backward,
    [USP_MAP_SCALE] = scale,
};

int cpu_map_supports(usp_map_fn fn) { return (unsigned)fn < USP_MAP_FN_COUNT && formulas[fn] != NULL; }

usp_status cpu_map(const usp_op *op)
{
    const map_formula f = formulas[op->p.map.fn];
    float *out[MAP_OPERANDS_MAX];
    const float *in[MAP_OPERANDS_MAX];
    usp_operand_info info[USP_OP_OPERANDS_MAX];
    const int operands = usp_op_operands(op, info);
    int outs = 0, ins = 0;
    for (int i = 0; i < operands && i < MAP_OPERANDS_MAX; i++) {
        if (info[i].flags & USP_OPERAND_WRITTEN)
            out[outs++] = op->operand[i].data;
        else
            in[ins++] = op->operand[i].data;
    }
    const int64_t n = op->p.map.n, chunks = (n + ELEM_CHUNK - 1) / ELEM_CHUNK;
    const float scalar = op->p.map.scalar;
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN)
    for (int64_t k = 0; k < chunks; k++) {
        const int64_t lo = k * ELEM_CHUNK, len = min64(ELEM_CHUNK, n - lo);
        float *o[MAP_OPERANDS_MAX];
        const float *x[MAP_OPERANDS_MAX];
        for (int j = 0; j < outs; j++)
            o[j] = out[j] + lo;
        for (int j = 0; j < ins; j++)
            x[j] = in[j] + lo;
        f(o, x, scalar, len);
    }
    return USP_OK;
}
