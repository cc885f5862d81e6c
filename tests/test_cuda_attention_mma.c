/* The tensor-core attention kernels (backends/cuda/cuda_attention_mma.cu) on a GPU, against the cpu
 * attention within the bf16 tolerances of tests/mma_attention_cases.h (the same problems the CPU
 * emulation passes, masks beyond causal among them), and two runs giving the same bits. Without a GPU it says so and exits 77
 * (skipped, not passed). */
#include <check.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_attention_mma.h"
#include "backends/cuda/cuda_attention_tiles.h"
#include "core/ops/dtype.h"
#include "tests/check_main.h"
#include "tests/mma_attention_cases.h"

#define CUDA_OK(call) ck_assert_msg((call) == cudaSuccess, "%s: %s", #call, cudaGetErrorString(cudaGetLastError()))

/* n floats (bf16 values) as a device bf16 array. */
static cuda_array upload_bf16(const float *x, size_t n)
{
    uint16_t *h = malloc((n ? n : 1) * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) h[i] = usp_f32_to_bf16(x[i]);
    cuda_array a = {NULL, USP_BF16};
    CUDA_OK(cudaMalloc(&a.data, (n ? n : 1) * sizeof(uint16_t)));
    CUDA_OK(cudaMemcpy(a.data, h, n * sizeof(uint16_t), cudaMemcpyHostToDevice));
    free(h);
    return a;
}

static void download_bf16(float *x, cuda_array a, size_t n)
{
    uint16_t *h = malloc((n ? n : 1) * sizeof(uint16_t));
    CUDA_OK(cudaMemcpy(h, a.data, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) x[i] = usp_bf16_to_f32(h[i]);
    free(h);
}

static float *device_floats(const float *x, size_t n)
{
    float *d = NULL;
    CUDA_OK(cudaMalloc((void **)&d, (n ? n : 1) * sizeof(float)));
    if (x) CUDA_OK(cudaMemcpy(d, x, n * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}

/* Forward on q, k, v; backward on the cpu's o (bf16) and lse; results into the case. A documents' table
 * goes to the device, where the kernels read it (usp_attention_shape: docs in the backend's memory). */
static void gpu_run(mma_case *c)
{
    usp_attention_shape device_shape = c->s;
    const usp_attention_shape *s = &device_shape;
    void *docs = NULL;
    if (c->s.docs) {
        const size_t bytes = (size_t)(2 * c->s.batch * c->s.seq_len) * sizeof(int32_t);
        CUDA_OK(cudaMalloc(&docs, bytes));
        CUDA_OK(cudaMemcpy(docs, c->s.docs, bytes, cudaMemcpyHostToDevice));
        device_shape.docs = (const int32_t *)docs;
    }
    cuda_array q = upload_bf16(c->q, c->nq), k = upload_bf16(c->k, c->nkv), v = upload_bf16(c->v, c->nkv);
    cuda_array o = upload_bf16(c->eo, c->nq), d_o = upload_bf16(c->d_o, c->nq), o_in = upload_bf16(c->o_bf16, c->nq);
    cuda_array dq = upload_bf16(c->edq, c->nq), dk = upload_bf16(c->edk, c->nkv), dv = upload_bf16(c->edv, c->nkv);
    float *lse = device_floats(NULL, c->nl), *lse_in = device_floats(c->lse, c->nl);
    void *workspace = NULL;
    CUDA_OK(cudaMalloc(&workspace, attn_workspace_bytes(s) + 16));
    ck_assert_msg(cuda_attention_mma_forward(s, q, k, v, o, lse, 0) == USP_OK, "%s", usp_error_message());
    ck_assert_msg(cuda_attention_mma_backward(s, q, k, v, o_in, lse_in, d_o, dq, dk, dv, 0, workspace, 0) == USP_OK,
                  "%s", usp_error_message());
    CUDA_OK(cudaDeviceSynchronize());
    download_bf16(c->eo, o, c->nq), download_bf16(c->edq, dq, c->nq);
    download_bf16(c->edk, dk, c->nkv), download_bf16(c->edv, dv, c->nkv);
    CUDA_OK(cudaMemcpy(c->e_lse, lse, c->nl * sizeof(float), cudaMemcpyDeviceToHost));
    void *all[] = {q.data, k.data,  v.data, o.data, d_o.data, o_in.data,
                   dq.data, dk.data, dv.data, lse, lse_in, workspace, docs};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) CUDA_OK(cudaFree(all[i]));
}

START_TEST(mma_kernels_match_cpu_attention)
{
    const double worst_o = mma_case_run_all(gpu_run, 1000);
    /* Without bf16 rounding (of P, of the stored o) o would be within ~1e-6 of the cpu: 1e-3 of its tolerance. */
    ck_assert_msg(worst_o > 0.02, "o within %.4f of its bf16 tolerance: is anything rounded to bf16?", worst_o);
}
END_TEST

START_TEST(two_runs_give_the_same_bits)
{
    mma_case a, b;
    const usp_attention_shape s = mma_case_shape(2, 300, 300, 4, 2, 128, 1, 0, 0);
    mma_case_run(&a, s, 7, gpu_run);
    mma_case_run(&b, s, 7, gpu_run);
    ck_assert(memcmp(a.eo, b.eo, a.nq * sizeof(float)) == 0 && memcmp(a.e_lse, b.e_lse, a.nl * sizeof(float)) == 0);
    ck_assert(memcmp(a.edq, b.edq, a.nq * sizeof(float)) == 0);
    ck_assert(memcmp(a.edk, b.edk, a.nkv * sizeof(float)) == 0 && memcmp(a.edv, b.edv, a.nkv * sizeof(float)) == 0);
    mma_case_free(&a);
    mma_case_free(&b);
}
END_TEST

int main(void)
{
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        printf("test_cuda_attention_mma: no GPU here, skipped\n");
        return 77;
    }
    Suite *s = suite_create("cuda_attention_mma");
    TCase *t = tcase_create("gpu");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, mma_kernels_match_cpu_attention);
    tcase_add_test(t, two_runs_give_the_same_bits);
    suite_add_tcase(s, t);
    return check_main_run(s);
}
