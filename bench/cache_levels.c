/* What a cache flush leaves: the time of a copy on the cpu backend after its
 * source was written and then F bytes of another buffer were zeroed, for F
 * from 0 (the copy's operands in L2) to 1 GiB (in memory).
 *
 * Why: `usp calibrate` times each kernel case and collective "cold" after
 * zeroing 128 MiB, meant to push the operands out of every cache level, and
 * the planner prices an op by hot and cold rates (docs/cluster_model.md,
 * "Calibrated kernels"). A CPU whose last-level cache holds more than that (a
 * server's L3 of hundreds of MiB, shared with other machines on the host)
 * keeps part of the operands after such a flush: the cold rate is then a mix
 * of the L3's and memory's, and the figures here show how much. One process,
 * one core; each figure the median of 5; printed, never asserted.
 *
 *   cache_levels [--quick]   (--quick: 1 MiB copies, flushes up to 256 MiB) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/cpu/cpu_backend.h"
#include "bench/cpu_vectors.h"
#include "core/base/clock_seconds.h"
#include "core/ops/ops.h"

#define MIB ((size_t)1 << 20)
#define REPS 5
#define CALIBRATE_FLUSH (128 * MIB) /* calibrate/calibrate_kernels.c's cold flush */

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median seconds of a copy of `bytes` from src to dst after src was written and `flush` bytes zeroed. */
static usp_status copy_after(usp_backend_t *be, void *src, void *dst, size_t bytes, void *f, size_t flush,
                             double *seconds)
{
    double t[REPS];
    for (int i = 0; i < REPS; i++) {
        USP_CHECK(usp_buffer_zero(be, src, bytes, NULL));
        if (flush)
            USP_CHECK(usp_buffer_zero(be, f, flush, NULL));
        USP_CHECK(usp_backend_synchronize(be, NULL));
        double t0 = usp_wall_seconds();
        USP_CHECK(usp_buffer_copy(be, dst, src, bytes, USP_COPY_DEVICE_TO_DEVICE, NULL));
        USP_CHECK(usp_backend_synchronize(be, NULL));
        t[i] = usp_wall_seconds() - t0;
    }
    qsort(t, REPS, sizeof *t, by_value);
    *seconds = t[REPS / 2];
    return USP_OK;
}

static usp_status run(usp_backend_t *be, int quick)
{
    static const size_t flushes_mib[] = {0, 8, 16, 32, 64, 128, 256, 512, 1024};
    const size_t copies[] = {1 * MIB, 4 * MIB}, largest = (quick ? 256 : 1024) * MIB;
    void *src = NULL, *dst = NULL, *f = NULL;
    usp_status s = usp_buffer_alloc(be, 4 * MIB, "bench", &src);
    if (s == USP_OK)
        s = usp_buffer_alloc(be, 4 * MIB, "bench", &dst);
    if (s == USP_OK)
        s = usp_buffer_alloc(be, largest, "bench (cache flush)", &f);
    if (s == USP_OK) /* first touch, not timed */
        s = usp_buffer_zero(be, f, largest, NULL);
    if (s == USP_OK)
        s = usp_buffer_zero(be, dst, 4 * MIB, NULL);
    printf("%-22s", "zeroed before (MiB)");
    for (size_t k = 0; k < sizeof flushes_mib / sizeof *flushes_mib && flushes_mib[k] * MIB <= largest; k++)
        printf(" %7zu%s", flushes_mib[k], flushes_mib[k] * MIB == CALIBRATE_FLUSH ? "*" : " ");
    printf("\n");
    for (int c = 0; c < (quick ? 1 : 2) && s == USP_OK; c++) {
        printf("copy %zu MiB, GB/s     ", copies[c] / MIB);
        for (size_t k = 0; k < sizeof flushes_mib / sizeof *flushes_mib && s == USP_OK; k++) {
            size_t flush = flushes_mib[k] * MIB;
            double t;
            if (flush > largest)
                break;
            s = copy_after(be, src, dst, copies[c], f, flush, &t);
            if (s == USP_OK)
                printf(" %7.1f ", 2.0 * (double)copies[c] / t / 1e9); /* read + written */
            fflush(stdout);
        }
        printf("\n");
    }
    usp_buffer_free(be, src);
    usp_buffer_free(be, dst);
    usp_buffer_free(be, f);
    return s;
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    if (argc > 2 || (argc == 2 && !quick)) {
        fprintf(stderr, "usage: cache_levels [--quick]\n");
        return 2;
    }
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE), l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    printf("cache_levels: a copy's rate (read + written) after its source was written and then F bytes zeroed; "
           "one core, median of %d\nCPU vector width: %s; L2 %.3g MiB, L3 %.3g MiB (sysconf); * usp calibrate's "
           "cold flush\n", REPS, bench_cpu_vectors(), l2 > 0 ? (double)l2 / MIB : 0.0,
           l3 > 0 ? (double)l3 / MIB : 0.0);
    usp_backend_t *be = NULL;
    usp_status s = usp_backend_cpu_create(&be);
    if (s == USP_OK)
        s = run(be, quick);
    usp_backend_destroy(be);
    if (s != USP_OK) {
        fprintf(stderr, "cache_levels: %s\n", usp_error_message());
        return 1;
    }
    return 0;
}
