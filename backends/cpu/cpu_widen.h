/* bf16 storage for backends whose kernels compute in fp32 on host memory (cpu, and lazy, which runs
 * the cpu kernels later).
 *
 * Mixed precision stores activations, weights and gradients in bf16 and computes in fp32: the cuda
 * kernels load a bf16 element into an fp32 register, compute, and round once when they store
 * (round to nearest, ties to even; cuBLAS likewise accumulates a bf16 GEMM in fp32 and rounds C
 * once). The cpu kernels are fp32 only, so each op is wrapped: every bf16 operand is widened into
 * an fp32 temporary, the fp32 kernel runs on the temporaries, and the operands the kernel writes
 * (USP_OPERAND_WRITTEN in its kind's row) are rounded back. The values rounded are the ones cuda rounds, at the same points;
 * what may differ is the order of fp32 sums inside a kernel, as between the fp32 backends. The
 * temporaries are host scratch, not device buffers: a GPU keeps them in registers, so they are not
 * counted as memory. An operand stored in fp32 is passed through untouched, so an fp32 run takes
 * the fp32 kernels' path exactly. */
#ifndef USP_CPU_WIDEN_H
#define USP_CPU_WIDEN_H

#include "core/ops/backend_impl.h"

/* Runs op on the fp32 kernel `fp32` with its bf16 operands widened and rounded back as above (an
 * op with none runs as it is, untouched). */
usp_status cpu_run_widened(const usp_op *op, usp_status (*fp32)(const usp_op *op));

/* USP_OP_CONVERT: source to destination, f32 to bf16 (round to nearest even) or bf16 to f32. */
usp_status cpu_convert(const usp_op *op);

#endif
