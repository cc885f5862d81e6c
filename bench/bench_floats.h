/* Inputs of the CPU kernel benchmarks: arrays of floats, allocated or the run ends, filled from a seed. */
#ifndef USP_BENCH_FLOATS_H
#define USP_BENCH_FLOATS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* x[0..n) uniform in [-1, 1] from `seed` (a 64-bit LCG: the same inputs on every machine). */
static inline void bench_fill_uniform(float *x, size_t n, uint64_t seed)
{
    uint64_t st = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(st >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
    }
}

/* n floats; out of memory ends the benchmark (exit 1), naming the count. */
static inline float *bench_floats(size_t n)
{
    float *x = malloc(n * sizeof *x);
    if (!x) {
        fprintf(stderr, "out of memory (%zu floats)\n", n);
        exit(1);
    }
    return x;
}

#endif
