/* GEMM through cuBLAS (see cuda_internal.h).
 *
 * cuBLAS is column-major; a row-major matrix X with row stride ld is the
 * column-major X^T with the same ld. So C = op(A) op(B) in row-major is
 * C^T = op(B)^T op(A)^T in column-major: one call with the operands swapped,
 * m and n swapped, and each transpose flag kept. The 64-bit entry point takes
 * our int64_t sizes as they are. A and B must share a dtype (fp32, or bf16
 * for mixed precision); C is fp32, or either with bf16 A and B; the sum is
 * always fp32. */
#include "backends/cuda/cuda_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

/* cuBLAS is opened when the first cuda backend is made, not linked: its
 * libraries are 600 MB, and loading them made every usp command, --help
 * included, take a second and 200 MB more (measured: 1.0 s and 217 MB for an
 * empty program linked with -lcublas, 0.03 s without). */
static struct {
    __typeof__(&cublasCreate_v2) create;
    __typeof__(&cublasDestroy_v2) destroy;
    __typeof__(&cublasSetStream_v2) set_stream;
    __typeof__(&cublasGemmStridedBatchedEx_64) gemm;
    __typeof__(&cublasGetStatusString) status_string;
    char error[512];
} blas;

#define STR_(x) #x
#define STR(x) STR_(x)
#define CUBLAS_SONAME "libcublas.so." STR(CUBLAS_VER_MAJOR)

static void open_cublas(void)
{
    /* The toolkit this was built with first (USP_CUBLAS_DIR), then the loader's search path. */
    void *lib = dlopen(USP_CUBLAS_DIR "/" CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        lib = dlopen(CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(blas.error, sizeof blas.error, "cannot open %s (%s; looked in %s and the loader's path: set "
                 "LD_LIBRARY_PATH to the CUDA Toolkit's lib64)", CUBLAS_SONAME, dlerror(), USP_CUBLAS_DIR);
        return;
    }
    *(void **)&blas.create = dlsym(lib, "cublasCreate_v2");
    *(void **)&blas.destroy = dlsym(lib, "cublasDestroy_v2");
    *(void **)&blas.set_stream = dlsym(lib, "cublasSetStream_v2");
    *(void **)&blas.gemm = dlsym(lib, "cublasGemmStridedBatchedEx_64");
    *(void **)&blas.status_string = dlsym(lib, "cublasGetStatusString");
    if (!blas.create || !blas.destroy || !blas.set_stream || !blas.gemm || !blas.status_string)
        snprintf(blas.error, sizeof blas.error, "%s lacks a function usp calls (cublasGemmStridedBatchedEx_64 "
                 "needs cuBLAS 12 or later)", CUBLAS_SONAME);
}

usp_status cuda_blas_load(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, open_cublas);
    return blas.error[0] ? usp_error(USP_ERR_RUNTIME, "cuda backend: %s", blas.error) : USP_OK;
}

usp_status cuda_blas_create(cublasHandle_t *out)
{
    USP_CHECK(cuda_blas_load());
    cublasStatus_t st = blas.create(out);
    return st == CUBLAS_STATUS_SUCCESS ? USP_OK
                                       : usp_error(USP_ERR_RUNTIME, "cuda backend: cublasCreate failed: %s",
                                                   blas.status_string(st));
}

void cuda_blas_destroy(cublasHandle_t handle)
{
    if (handle)
        blas.destroy(handle);
}

static usp_status blas_failed(cublasStatus_t st, const usp_gemm_shape *g)
{
    return usp_error(USP_ERR_RUNTIME, "cuda backend: cublasGemmStridedBatchedEx (m %lld, n %lld, k %lld, batch "
                     "%lld) failed: %s", (long long)g->m, (long long)g->n, (long long)g->k, (long long)g->batch,
                     blas.status_string(st));
}

static cudaDataType_t data_type(usp_dtype t) { return t == USP_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

/* cuda_gemm with the fp32 one of a and b rounded into a bf16 temporary first. */
static usp_status gemm_rounding_one(cuda_ctx *c, const usp_op *op)
{
    cudaStream_t s = cuda_stream_of(c, op->stream);
    usp_op rounded = *op;
    usp_view *wide = rounded.operand[0].dtype == USP_F32 ? &rounded.operand[0] : &rounded.operand[1];
    void *tmp = NULL;
    if (cudaMallocAsync(&tmp, (size_t)(wide->count > 0 ? wide->count : 1) * 2, s) != cudaSuccess)
        return usp_error(USP_ERR_RUNTIME, "cuda backend: no memory to round a %lld-element fp32 gemm operand to "
                         "bf16: %s", (long long)wide->count, cudaGetErrorString(cudaGetLastError()));
    usp_status st = cuda_convert((cuda_array){.data = tmp, .dtype = USP_BF16},
                                 (cuda_array){.data = wide->data, .dtype = USP_F32}, wide->count, s);
    wide->data = tmp, wide->dtype = USP_BF16;
    if (st == USP_OK)
        st = cuda_gemm(c, &rounded);
    cudaFreeAsync(tmp, s);
    return st;
}

usp_status cuda_gemm(cuda_ctx *c, const usp_op *op)
{
    const usp_gemm_shape *g = &op->p.gemm;
    const usp_view a = op->operand[0], b = op->operand[1];
    cuda_array out = {.data = op->operand[2].data, .dtype = op->operand[2].dtype};
    /* k = 0: C = beta C, by a kernel of ours. cuBLAS wants lda, ldb >= 1 where k-wide rows give 0,
     * and does not document C = beta C for k = 0; A and B, which core does not check then
     * (they may lie in no buffer), are not looked at. */
    if (g->k == 0)
        return cuda_scale_matrices(out, g->beta, g->m, g->n, g->ldc, g->stride_c, g->batch,
                                   cuda_stream_of(c, op->stream));
    /* A bf16 operand by an fp32 one (the loss's fp32 dlogits by the bf16 lm_head): cuBLAS takes one
     * input dtype, so the fp32 one is rounded into bf16 scratch, stream-ordered and freed after the
     * GEMM on the same stream, as autocast casts (the cpu backend rounds it alike, cpu_widen.c). */
    if (a.dtype != b.dtype)
        return gemm_rounding_one(c, op);
    /* cublasGemmEx's table: fp32 A and B give fp32 C only (a bf16 C wants bf16 A and B); refused
     * here by name rather than as cuBLAS's CUBLAS_STATUS_NOT_SUPPORTED. */
    if (a.dtype == USP_F32 && out.dtype != USP_F32)
        return usp_error(USP_ERR_CONFIG, "cuda backend: gemm of fp32 A and B into a %s C: cuBLAS has no such "
                         "kernel; store C as fp32, or A and B as %s", usp_dtype_name(out.dtype),
                         usp_dtype_name(out.dtype));
    cublasStatus_t st = blas.set_stream(c->blas, cuda_stream_of(c, op->stream));
    if (st != CUBLAS_STATUS_SUCCESS)
        return blas_failed(st, g);
    /* TF32 only on request, and only where all three are fp32 (bf16 inputs already are reduced precision). */
    cublasComputeType_t compute = c->allow_tf32 && a.dtype == USP_F32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                       : CUBLAS_COMPUTE_32F;
    cublasOperation_t op_a = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    /* batch 1: the strides may be 0 or anything; cuBLAS ignores them then. */
    st = blas.gemm(c->blas, op_b, op_a, g->n, g->m, g->k, &g->alpha, b.data, data_type(b.dtype),
                                       g->ldb, g->stride_b, a.data, data_type(a.dtype), g->lda, g->stride_a, &g->beta,
                                       out.data, data_type(out.dtype), g->ldc, g->stride_c, g->batch, compute,
                                       CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS ? USP_OK : blas_failed(st, g);
}
