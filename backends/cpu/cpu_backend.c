/* The CPU backend: "device" memory is host memory, every op completes before
 * it returns, GEMM goes to CBLAS. Buffers are 64-byte aligned for the vector
 * units. */
#include "backends/cpu/cpu_backend.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend_impl.h"

static usp_status cpu_alloc(void *ctx, size_t bytes, void **out)
{
    (void)ctx;
    size_t rounded = (bytes + 63) / 64 * 64;
    *out = aligned_alloc(64, rounded);
    if (!*out)
        return usp_error(USP_ERR_RUNTIME, "out of memory: the cpu backend could not allocate %zu bytes",
                         bytes);
    return USP_OK;
}

static void cpu_free(void *ctx, void *ptr)
{
    (void)ctx;
    free(ptr);
}

static usp_status cpu_copy(void *ctx, void *dst, const void *src, size_t bytes, usp_copy_kind kind,
                           usp_stream_t *stream)
{
    (void)ctx, (void)kind, (void)stream;
    memmove(dst, src, bytes);
    return USP_OK;
}

static usp_status cpu_zero(void *ctx, void *ptr, size_t bytes, usp_stream_t *stream)
{
    (void)ctx, (void)stream;
    memset(ptr, 0, bytes);
    return USP_OK;
}

static usp_status cpu_gemm(void *ctx, const usp_gemm_desc *g, usp_stream_t *stream)
{
    (void)ctx, (void)stream;
    for (int64_t i = 0; i < g->batch; i++)
        cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans,
                    g->trans_b ? CblasTrans : CblasNoTrans, (blasint)g->m, (blasint)g->n, (blasint)g->k,
                    g->alpha, g->a + i * g->stride_a, (blasint)g->lda, g->b + i * g->stride_b,
                    (blasint)g->ldb, g->beta, g->c + i * g->stride_c, (blasint)g->ldc);
    return USP_OK;
}

static const usp_backend_i cpu_backend_iface = {
    .api_version = USP_BACKEND_API_VERSION,
    .name = "cpu",
    .has_numerics = 1,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .synchronize = NULL,
    .gemm = cpu_gemm,
    .destroy = NULL,
};

usp_status usp_backend_cpu_create(usp_backend_t **out)
{
    return usp_backend_create(&cpu_backend_iface, NULL, out);
}
