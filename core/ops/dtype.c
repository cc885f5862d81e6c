/* Sizes and names of element types, and bfloat16 conversions. */
#include "core/ops/dtype.h"

#include <string.h>

#include "core/base/status.h"

size_t usp_dtype_size(usp_dtype dtype)
{
    static const size_t sizes[USP_DTYPE_COUNT] = {
        [USP_F32] = 4, [USP_F64] = 8, [USP_I64] = 8, [USP_BF16] = 2, [USP_U8] = 1,
    };
    USP_ASSERT(dtype >= 0 && dtype < USP_DTYPE_COUNT, "dtype %d", (int)dtype);
    return sizes[dtype];
}

void *usp_elem_at(const void *base, usp_dtype dtype, size_t index)
{
    return (char *)base + index * usp_dtype_size(dtype);
}

const char *usp_dtype_name(usp_dtype dtype)
{
    static const char *names[USP_DTYPE_COUNT] = {
        [USP_F32] = "f32", [USP_F64] = "f64", [USP_I64] = "i64", [USP_BF16] = "bf16", [USP_U8] = "u8",
    };
    if (dtype < 0 || dtype >= USP_DTYPE_COUNT)
        return "?";
    return names[dtype];
}

