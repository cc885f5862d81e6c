/* The widest vector unit of this CPU, printed beside every CPU figure: the
 * targets are per machine, and the machines differ (AVX-512 or AVX2 only). */
#ifndef USP_BENCH_CPU_VECTORS_H
#define USP_BENCH_CPU_VECTORS_H

/* "AVX-512 (512-bit)", "AVX2 (256-bit)", "SSE2 (128-bit)", or "unknown" off x86. */
static inline const char *bench_cpu_vectors(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return "AVX-512 (512-bit)";
    if (__builtin_cpu_supports("avx2"))
        return "AVX2 (256-bit)";
    return "SSE2 (128-bit)";
#else
    return "unknown";
#endif
}

#endif
