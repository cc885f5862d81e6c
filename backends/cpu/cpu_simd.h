/* Shared by the CPU kernels: how hot loops are compiled for the vector units. */
#ifndef USP_CPU_SIMD_H
#define USP_CPU_SIMD_H

#include <stdint.h>

/* Elementwise loops are compiled three times on x86-64 (x86-64-v4: AVX-512,
 * v3: AVX2, baseline: SSE2) and the loader picks the best the CPU has: the
 * build itself stays portable (no -march=native). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
#endif
#ifndef SIMD_CLONES
#define SIMD_CLONES
#endif

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

#endif
