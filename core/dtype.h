/* Element types of buffers and collectives. */
#ifndef USP_DTYPE_H
#define USP_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus /* the CUDA kernels are C++ */
extern "C" {
#endif

typedef enum usp_dtype {
    USP_F32 = 0,
    USP_F64,
    USP_I64,
    USP_BF16,
    USP_U8,
    USP_DTYPE_COUNT
} usp_dtype;

/* Bytes per element. */
size_t usp_dtype_size(usp_dtype dtype);

/* The address of element `index` of an array of `dtype` elements at `base`:
 * the one place an element offset becomes a byte offset (buffers whose
 * storage may be narrower than fp32 are offset through it, never as float *). */
void *usp_elem_at(const void *base, usp_dtype dtype, size_t index);

/* Lower-case name ("f32", "bf16", ...). */
const char *usp_dtype_name(usp_dtype dtype);

/* f32 value of a bfloat16 bit pattern (exact: the upper half of an f32). */
float usp_bf16_to_f32(uint16_t b);

/* The bfloat16 nearest to x (ties to even; NaN stays NaN). */
uint16_t usp_f32_to_bf16(float x);

#ifdef __cplusplus
}
#endif

#endif
