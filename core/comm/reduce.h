/* The element-wise reduction every communicator applies, one operand at a
 * time: the simulator and the MPI backend both reduce in rank order with it,
 * so the same run gives the same bits on either. */
#ifndef USP_REDUCE_H
#define USP_REDUCE_H

#include <stddef.h>

#include "core/comm/comm.h"

/* acc[k] = acc[k] op src[k] for n elements of `dtype` (f32, f64, i64; bf16
 * widened to f32, combined and rounded back, as NCCL reduces it). */
void usp_reduce_into(void *acc, const void *src, size_t n, usp_dtype dtype, usp_reduce_op op);

#endif
