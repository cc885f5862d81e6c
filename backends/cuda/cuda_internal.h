/* The cuda backend's context, shared by its host files (cuda_backend.c, cuda_gemm.c). */
#ifndef USP_CUDA_INTERNAL_H
#define USP_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "backends/cuda/cuda_kernels.h"
#include "core/ops/backend_impl.h"

#define CUDA_ROPE_TABLES 4 /* (theta, D, table) triples kept on the device */

typedef struct cuda_rope_table {
    double *device;  /* D/2 inverse frequencies */
    double *host;    /* the same, to recognise a table passed again */
    int64_t half;    /* D/2 */
    float theta;
    int from_theta;  /* 1: computed from theta; 0: a caller's table */
    uint64_t used;   /* last use, for eviction */
} cuda_rope_table;

/* A stream other than the default one, and the allocations it has waited for (cuda_memory.c). */
typedef struct cuda_stream_seen {
    cudaStream_t stream;
    uint64_t allocs;
} cuda_stream_seen;

#define CUDA_STREAMS_SEEN 16

typedef struct cuda_ctx {
    int device;
    usp_backend_t *owner;       /* the handle host waits inside a slot are counted on */
    cudaEvent_t allocated;      /* recorded on the default stream after the latest allocation ... */
    uint64_t allocs;            /* ... the allocs-th */
    cuda_stream_seen seen[CUDA_STREAMS_SEEN];
    int seen_next;
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

/* The CUDA stream behind a usp_stream_t (NULL: the backend's default stream); another stream is first
 * made to wait for the allocations it has not seen (cuda_memory.c). */
cudaStream_t cuda_stream_of(cuda_ctx *c, usp_stream_t *s);

/* Forgets a destroyed stream (its handle may be reused by a new one). */
void cuda_memory_forget_stream(cuda_ctx *c, cudaStream_t s);

/* The alloc slot: from the pool on the default stream, no host wait; out of memory: synchronise, trim, retry. */
usp_status cuda_memory_alloc(void *ctx, size_t bytes, void **out);

/* The free slot: back to the pool in the default stream's order. */
void cuda_memory_free(void *ctx, void *ptr);

/* The host_alloc and host_free slots: pinned memory (cudaMallocHost), which a copy lands in asynchronously. */
usp_status cuda_memory_host_alloc(void *ctx, size_t bytes, void **out);
void cuda_memory_host_free(void *ctx, void *ptr);

/* Memory the default stream made ready (an allocation, a table it filled): other streams wait for it. */
usp_status cuda_memory_publish(cuda_ctx *c);

/* USP_OK, or USP_ERR_RUNTIME naming `what` and CUDA's error. */
usp_status cuda_check(cudaError_t e, const char *what);

/* Opens cuBLAS and finds the functions the backend calls (once; no GPU needed). */
usp_status cuda_blas_load(void);

/* A cuBLAS handle, cuBLAS opened on first use (cuda_gemm.c). */
usp_status cuda_blas_create(cublasHandle_t *out);

/* Frees a handle from cuda_blas_create (NULL: nothing). */
void cuda_blas_destroy(cublasHandle_t handle);

/* USP_OP_GEMM: cuBLAS, row-major descriptors mapped onto column-major calls. */
usp_status cuda_gemm(cuda_ctx *c, const usp_op *op);

#endif
