/* bf16 storage for backends whose kernels compute in fp32 on host memory (cpu, and lazy, which runs
 * the cpu kernels later).
 *
 * Mixed precision stores activations, weights and gradients in bf16 and computes in fp32: the cuda
 * kernels load a bf16 element into an fp32 register, compute, and round once when they store
 * (round to nearest, ties to even; cuBLAS likewise accumulates a bf16 GEMM in fp32 and rounds C
 * once). The cpu kernels are fp32 only, so each slot that takes views is wrapped: every bf16 operand
 * is widened into an fp32 temporary, the fp32 slot runs on the temporaries, and the operands the
 * slot writes are rounded back. The values rounded are the ones cuda rounds, at the same points;
 * what may differ is the order of fp32 sums inside a kernel, as between the fp32 backends. The
 * temporaries are host scratch, not device buffers: a GPU keeps them in registers, so they are not
 * counted as memory. An operand stored in fp32 is passed through untouched, so an fp32 run takes
 * the fp32 slots' path exactly. */
#ifndef USP_CPU_WIDEN_H
#define USP_CPU_WIDEN_H

#include "core/ops/backend_impl.h"

/* The table `fp32`'s slots with bf16 operands widened and rounded as above, stores_bf16 set and a
 * `convert` slot added; built on the first call, for the one fp32 table a process has (the cpu
 * backend's), and the same pointer after. */
const usp_backend_i *cpu_widened_interface(const usp_backend_i *fp32);

#endif
