/* The cuda attention op: which kernels run a call (cuda_kernels.h). A file of
 * its own, above both kernel files, so that neither calls the other. */
#include <stdatomic.h>
#include <stdio.h>

#include "backends/cuda/cuda_attention_mma.h"

/* The kernels for this call (cuda_mma_maps.h, attn_kernel_for): a bf16 call the tensor cores cannot take says
 * why on stderr, once per process, so that a slow path is never silent. */
static attn_kernel kernel_for(const usp_attention_shape *s, const cuda_array *arrays, int n)
{
    const char *why;
    const attn_kernel kernel = cuda_attention_kernel_for(s, arrays, n, &why);
    static atomic_flag said = ATOMIC_FLAG_INIT;
    if (why != NULL && !atomic_flag_test_and_set(&said))
        fprintf(stderr, "usp: cuda attention, head_dim %lld: %s (said once)\n", (long long)s->head_dim, why);
    return kernel;
}

usp_status cuda_attention_forward(const usp_attention_shape *s, cuda_array q, cuda_array k, cuda_array v,
                                  cuda_array o, float *lse, void *workspace, cudaStream_t stream)
{
    const cuda_array arrays[] = {q, k, v, o};
    if (kernel_for(s, arrays, 4) == ATTN_KERNEL_MMA)
        return cuda_attention_mma_forward(s, q, k, v, o, lse, stream);
    return cuda_attention_scalar_forward(s, q, k, v, o, lse, workspace, stream);
}

usp_status cuda_attention_backward(const usp_attention_shape *s, cuda_array q, cuda_array k, cuda_array v,
                                   cuda_array o, const float *lse, cuda_array d_o, cuda_array dq, cuda_array dk,
                                   cuda_array dv, int accumulate, void *workspace, cudaStream_t stream)
{
    const cuda_array arrays[] = {q, k, v, o, d_o, dq, dk, dv};
    if (kernel_for(s, arrays, 8) == ATTN_KERNEL_MMA)
        return cuda_attention_mma_backward(s, q, k, v, o, lse, d_o, dq, dk, dv, accumulate, workspace, stream);
    return cuda_attention_scalar_backward(s, q, k, v, o, lse, d_o, dq, dk, dv, accumulate, workspace, stream);
}
