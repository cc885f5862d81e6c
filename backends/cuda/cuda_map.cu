/* The element-wise ops of the cuda backend (USP_OP_MAP, core/ops/op.h): one grid-stride kernel per
 * function, instantiated from the function's formula over element i, with the math of
 * backends/cpu/cpu_map.c written the same way (the same float expressions; tanhf and expf where the
 * cpu has its polynomials, within the conformance table's fp32 tolerances). Arithmetic in fp32
 * whatever the storage.
 *
 * A new function: its formula below and its case in cuda_map. */
#include "backends/cuda/cuda_grid.cuh"

#define MAP_THREADS 256
/* sqrt(2 / pi), GPT-2's GELU (cpu_layers.h's GELU_K). */
#define GELU_K 0.7978845608028654f

/* A function's operands: its outputs and inputs in the order of its USP_MAP_FNS line. */
struct map_args {
    cuda_array out[2];
    cuda_array in[3];
    float scalar;
    int64_t n;
};

/* gelu(x) = x/2 * (1 + tanh(u)), u = k (x + 0.044715 x^3). */
struct gelu_tanh_forward {
    __device__ void operator()(const map_args &a, int64_t i) const
    {
        const float x = cuda_load(a.in[0], i);
        cuda_store(a.out[0], i, 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x))));
    }
};

/* gelu'(x) = (1 + t)/2 + x/2 * (1 - t^2) * k (1 + 3 * 0.044715 x^2), t = tanh(u). */
struct gelu_tanh_backward {
    __device__ void operator()(const map_args &a, int64_t i) const
    {
        const float x = cuda_load(a.in[0], i), t = tanhf(GELU_K * (x + 0.044715f * x * x * x));
        const float d = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        cuda_store(a.out[0], i, d * cuda_load(a.in[1], i));
    }
};

/* silu(g) = g * s with s = sigmoid(g) = 1/(1 + e^-g): saturates to 0 or 1, never NaN. */
struct swiglu_forward {
    __device__ void operator()(const map_args &a, int64_t i) const
    {
        const float g = cuda_load(a.in[0], i);
        cuda_store(a.out[0], i, g / (1.0f + expf(-g)) * cuda_load(a.in[1], i));
    }
};

/* d silu(g)/dg = s + g s (1 - s) = s (1 + g (1 - s)). */
struct swiglu_backward {
    __device__ void operator()(const map_args &a, int64_t i) const
    {
        const float g = cuda_load(a.in[0], i), s = 1.0f / (1.0f + expf(-g)), dy = cuda_load(a.in[2], i);
        cuda_store(a.out[0], i, dy * cuda_load(a.in[1], i) * s * (1.0f + g * (1.0f - s)));
        cuda_store(a.out[1], i, dy * g * s);
    }
};

struct scale {
    __device__ void operator()(const map_args &a, int64_t i) const
    {
        cuda_store(a.out[0], i, cuda_load(a.out[0], i) * a.scalar);
    }
};

template <typename F> static __global__ void map_kernel(map_args a)
{
    const F f;
    for (int64_t i = cuda_first_index(); i < a.n; i += cuda_grid_stride())
        f(a, i);
}

template <typename F> static usp_status launch(const map_args &a, cudaStream_t stream, const char *name)
{
    map_kernel<F><<<cuda_blocks_for(a.n, MAP_THREADS), MAP_THREADS, 0, stream>>>(a);
    return cuda_launched(name);
}

usp_status cuda_map(usp_map_fn fn, const cuda_array *out, int outs, const cuda_array *in, int ins, int64_t n,
                    float scalar, cudaStream_t stream)
{
    map_args a = {};
    for (int j = 0; j < outs && j < 2; j++)
        a.out[j] = out[j];
    for (int j = 0; j < ins && j < 3; j++)
        a.in[j] = in[j];
    a.scalar = scalar, a.n = n;
    if (n == 0)
        return USP_OK;
    switch (fn) {
    case USP_MAP_GELU_TANH_FORWARD: return launch<gelu_tanh_forward>(a, stream, "gelu_tanh_forward (map kernel)");
    case USP_MAP_GELU_TANH_BACKWARD: return launch<gelu_tanh_backward>(a, stream, "gelu_tanh_backward (map kernel)");
    case USP_MAP_SWIGLU_FORWARD: return launch<swiglu_forward>(a, stream, "swiglu_forward (map kernel)");
    case USP_MAP_SWIGLU_BACKWARD: return launch<swiglu_backward>(a, stream, "swiglu_backward (map kernel)");
    case USP_MAP_SCALE: return launch<scale>(a, stream, "scale (map kernel)");
    case USP_MAP_FN_COUNT: break;
    }
    return usp_error(USP_ERR_CONFIG, "cuda backend: no kernel for map function %d", (int)fn);
}

int cuda_map_supports(usp_map_fn fn) { return (unsigned)fn < USP_MAP_FN_COUNT; }
