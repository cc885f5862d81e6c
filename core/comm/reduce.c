/* Element-wise reductions (core/comm/reduce.h). */
#include "core/comm/reduce.h"

#include <stdint.h>

#define REDUCE_LOOP(T, acc, src, n, op)                                                     \
    do {                                                                                    \
        T *a_ = (T *)(acc);                                                                 \
        const T *s_ = (const T *)(src);                                                     \
        if ((op) == USP_REDUCE_SUM)                                                         \
            for (size_t k_ = 0; k_ < (n); k_++) a_[k_] += s_[k_];                           \
        else                                                                                \
            for (size_t k_ = 0; k_ < (n); k_++) a_[k_] = s_[k_] > a_[k_] ? s_[k_] : a_[k_]; \
    } while (0)

static void reduce_bf16(uint16_t *acc, const uint16_t *src, size_t n, usp_reduce_op op)
{
    for (size_t k = 0; k < n; k++) {
        float a = usp_bf16_to_f32(acc[k]), s = usp_bf16_to_f32(src[k]);
        acc[k] = usp_f32_to_bf16(op == USP_REDUCE_SUM ? a + s : s > a ? s : a);
    }
}

void usp_reduce_into(void *acc, const void *src, size_t n, usp_dtype dtype, usp_reduce_op op)
{
    switch (dtype) {
    case USP_BF16: reduce_bf16(acc, src, n, op); break;
    case USP_F32: REDUCE_LOOP(float, acc, src, n, op); break;
    case USP_F64: REDUCE_LOOP(double, acc, src, n, op); break;
    case USP_I64: REDUCE_LOOP(int64_t, acc, src, n, op); break;
    default: USP_ASSERT(0, "reduction over %s", usp_dtype_name(dtype));
    }
}
