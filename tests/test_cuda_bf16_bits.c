/* The cuda kernels' bf16 rounding (backends/cuda/cuda_bf16_bits.h) against usp's host rounding
 * (usp_f32_to_bf16, which the cpu backend stores with): the same bits for every high half and the
 * low halves around each rounding boundary, NaN payloads and infinities included. */
#include <check.h>
#include <math.h>
#include <string.h>

#include "backends/cuda/cuda_bf16_bits.h"
#include "core/ops/dtype.h"
#include "tests/check_main.h"

static float from_bits(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

START_TEST(cuda_rounding_is_the_host_rounding_bit_for_bit)
{
    /* below, at and above the halfway point, and the extremes of the dropped half */
    const uint32_t lows[] = {0x0000u, 0x0001u, 0x3fffu, 0x7fffu, 0x8000u, 0x8001u, 0xc000u, 0xffffu};
    long checked = 0;
    for (uint32_t high = 0; high <= 0xffffu; high++)
        for (size_t k = 0; k < sizeof lows / sizeof *lows; k++) {
            const uint32_t bits = high << 16 | lows[k];
            const uint16_t want = usp_f32_to_bf16(from_bits(bits)), got = cuda_bf16_bits(bits);
            ck_assert_msg(got == want, "fp32 bits 0x%08x: cuda 0x%04x, host 0x%04x", bits, got, want);
            checked++;
        }
    ck_assert_int_eq(checked, 65536L * 8);
    /* the cases the first GPU run found apart, by value */
    ck_assert_uint_eq(cuda_bf16_bits(0x7fc00001u), 0x7fc0u);          /* a quiet NaN keeps its high payload */
    ck_assert_uint_eq(cuda_bf16_bits(0xff812345u), 0xffc1u);          /* a signalling NaN becomes quiet, sign kept */
    ck_assert_uint_eq(cuda_bf16_bits(0x7f7fffffu), 0x7f80u);          /* FLT_MAX rounds to infinity */
    ck_assert(isnan(usp_bf16_to_f32(cuda_bf16_bits(0x7fa00000u))));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cuda_bf16_bits");
    TCase *t = tcase_create("cuda_bf16_bits");
    tcase_add_test(t, cuda_rounding_is_the_host_rounding_bit_for_bit);
    suite_add_tcase(s, t);
    return check_main_run(s);
}
