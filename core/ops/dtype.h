/* Element types of buffers and collectives. */
#ifndef USP_DTYPE_H
#define USP_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

/* f32 value of a bfloat16 bit pattern (exact: the upper half of an f32). Inline: the cpu backend's
 * conversion loops (backends/cpu/cpu_widen.c) vectorise through it. */
static inline float usp_bf16_to_f32(uint16_t b)
{
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* The bfloat16 nearest to x (ties to even; NaN stays NaN, quieted, sign and high payload kept). */
static inline uint16_t usp_f32_to_bf16(float x)
{
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet, whatever its payload */
        return (uint16_t)((bits >> 16) | 0x40u);
    bits += 0x7fffu + ((bits >> 16) & 1u); /* round to nearest, ties to even */
    return (uint16_t)(bits >> 16);
}

#ifdef __cplusplus
}
#endif

#endif
