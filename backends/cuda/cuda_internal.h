/* The cuda backend's context, shared by its host files (cuda_backend.c, cuda_gemm.c). */
#ifndef USP_CUDA_INTERNAL_H
#define USP_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "backends/cuda/cuda_kernels.h"
#include "core/backend_impl.h"

#define CUDA_ROPE_TABLES 4 /* (theta, D, table) triples kept on the device */

typedef struct cuda_rope_table {
    double *device;  /* D/2 inverse frequencies */
    double *host;    /* the same, to recognise a table passed again */
    int64_t half;    /* D/2 */
    float theta;
    int from_theta;  /* 1: computed from theta; 0: a caller's table */
    uint64_t used;   /* last use, for eviction */
} cuda_rope_table;

typedef struct cuda_ctx {
    int device;
    cudaStream_t stream;        /* the backend's default stream (usp_stream_t NULL) */
    cudaEvent_t joined;         /* joins the default stream to another (the attention workspace's free) */
    cudaMemPool_t pool;         /* the device's default pool, kept from releasing memory */
    cublasHandle_t blas;
    int allow_tf32;
    double *sum_device;         /* sum_squares' result on the device ... */
    double *sum_host;           /* ... and in pinned host memory */
    cuda_rope_table rope[CUDA_ROPE_TABLES];
    uint64_t rope_clock;
} cuda_ctx;

/* The CUDA stream behind a usp_stream_t (NULL: the backend's default stream). */
static inline cudaStream_t cuda_stream_of(const cuda_ctx *c, usp_stream_t *s)
{
    return s ? (cudaStream_t)s : c->stream;
}

/* USP_OK, or USP_ERR_RUNTIME naming `what` and CUDA's error. */
usp_status cuda_check(cudaError_t e, const char *what);

/* Opens cuBLAS and finds the functions the backend calls (once; no GPU needed). */
usp_status cuda_blas_load(void);

/* A cuBLAS handle, cuBLAS opened on first use (cuda_gemm.c). */
usp_status cuda_blas_create(cublasHandle_t *out);

/* Frees a handle from cuda_blas_create (NULL: nothing). */
void cuda_blas_destroy(cublasHandle_t handle);

/* The gemm slot: cuBLAS, row-major descriptors mapped onto column-major calls. */
usp_status cuda_gemm(void *ctx, const usp_gemm_desc *g, usp_view a, usp_view b, usp_view c,
                     usp_stream_t *stream);

#endif
