/* The CUDA compute backend: device memory from the GPU's stream-ordered pool,
 * GEMMs through cuBLAS, every other op a kernel of backends/cuda/.
 *
 * Ops are asynchronous, CUDA's way: each slot enqueues on a stream (NULL: the
 * backend's own default stream, not CUDA's legacy one) and returns; streams
 * and events are CUDA's. Buffers may hold fp32 or bf16 (--dtype bf16): ops
 * read the dtype of each operand from its buffer and compute in fp32.
 *
 * fp32 GEMMs do not use TF32 unless USP_CUDA_ALLOW_TF32=1 is set in the
 * environment (PyTorch's torch.backends.cuda.matmul.allow_tf32, off by
 * default for the same reason: a 10-bit mantissa changes results). */
#ifndef USP_CUDA_BACKEND_H
#define USP_CUDA_BACKEND_H

#include <cuda_runtime_api.h>

#include "core/ops/ops.h"

/* Creates a backend on GPU `device` (0-based, of those CUDA_VISIBLE_DEVICES
 * shows). No GPU, no driver, or no such device: USP_ERR_CONFIG naming what is
 * missing and what CUDA said. */
usp_status usp_backend_cuda_create(int device, usp_backend_t **out);

/* The number of GPUs this process sees; 0 with `why` (CUDA's message) when none. */
int usp_cuda_device_count(char *why, size_t why_size);

/* "NVIDIA H100 80GB HBM3, 79.1 GiB, sm_90" for GPU `device`, into buf. */
void usp_cuda_device_describe(int device, char *buf, size_t size);

/* The CUDA stream behind `stream` of cuda backend `backend` (NULL: the
 * backend's own default stream), into *out: where a communicator (NCCL)
 * enqueues a call so that it runs in order with the backend's ops. A backend
 * that is not cuda is USP_ERR_RUNTIME (never the NULL stream, which would
 * leave the call unordered against compute). */
usp_status usp_cuda_stream(usp_backend_t *backend, usp_stream_t *stream, cudaStream_t *out);

#endif
