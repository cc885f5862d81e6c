/* The flash attention tasks compiled once per instruction set: AVX-512 and
 * AVX2 + FMA on x86-64 (GCC target pragmas around the same template), and a
 * generic build for any CPU (SSE2 on x86-64). cpu_attention.c picks one at run
 * time (__builtin_cpu_supports, or USP_CPU_ISA), so the build stays portable:
 * no -march flag, and a CPU without AVX never executes an AVX instruction.
 *
 * Each variant's sums run in the same order, but FMA rounds once where the
 * generic build rounds twice: the bits differ between variants and are fixed
 * within one (every rank of a run uses the same one). */
#include "backends/cpu/cpu_attention_impl.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(CPU_ATTN_HAVE_X86)
#include <immintrin.h>
#endif

/* Vectors wider than the baseline ABI never cross a function boundary here
 * (every vector helper is always_inline): the ABI notes do not apply. */
#pragma GCC diagnostic ignored "-Wpsabi"

#if defined(CPU_ATTN_HAVE_X86)
/* AVX-512: 32 registers of 16 floats, 24 accumulators (12 x 2 vectors or 16 x 1). */
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
#define ISA avx512
#define CPU_ATTN_ISA_NAME "avx512"
#define VW 16
#define MR2 12
#define MR1 16
#define VFMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define VBCAST(p) _mm512_set1_ps(*(p))
#define VMAX(a, b) _mm512_max_ps((a), (b))
#define VMIN(a, b) _mm512_min_ps((a), (b))
#include "backends/cpu/cpu_attention_tiles.h"
#include "backends/cpu/cpu_attention_tasks.h"
#pragma GCC pop_options

/* AVX2 + FMA: 16 registers of 8 floats, 12 accumulators (6 x 2 vectors or 12 x 1). */
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define ISA avx2
#define CPU_ATTN_ISA_NAME "avx2"
#define VW 8
#define MR2 6
#define MR1 12
#define VFMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define VBCAST(p) _mm256_broadcast_ss(p)
#define VMAX(a, b) _mm256_max_ps((a), (b))
#define VMIN(a, b) _mm256_min_ps((a), (b))
#include "backends/cpu/cpu_attention_tiles.h"
#include "backends/cpu/cpu_attention_tasks.h"
#pragma GCC pop_options
#endif

/* Generic: 4-float vectors (SSE2 on x86-64, NEON or scalar elsewhere), no FMA. */
#define ISA generic
#if defined(CPU_ATTN_HAVE_X86)
#define CPU_ATTN_ISA_NAME "sse2"
#else
#define CPU_ATTN_ISA_NAME "generic"
#endif
#define VW 4
#define MR2 6
#define MR1 12
#define VFMA(a, b, c) ((a) * (b) + (c))
#define VBCAST(p) ((vec_generic){*(p), *(p), *(p), *(p)})
#define VMAX(a, b) vmax_generic((a), (b))
#define VMIN(a, b) vmin_generic((a), (b))
#include "backends/cpu/cpu_attention_tiles.h"
#include "backends/cpu/cpu_attention_tasks.h"
