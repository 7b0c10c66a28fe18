/* The int16 kernels' requantization (int16_kernels.c, int16x16_kernels.c), in one place. */
#ifndef NPU_REQUANT16_H
#define NPU_REQUANT16_H

#include <stdint.h>

/* Include int8_kernels.h first (NPU_KERNEL_BAD_SHIFT): it has no include guard (cffi reads it). */

/* TFLite's MultiplyByQuantizedMultiplier(int64_t, ...) (multiply_by_quantized_multiplier_int64),
   the store's int32 wrap and clamp. */
static inline int16_t requant16(int64_t acc, int32_t m, int32_t s, int32_t lo, int32_t hi)
{
    const int64_t reduced = m < 0x7FFF0000 ? ((int64_t)m + (1 << 15)) >> 16 : 0x7FFF;
    const int total = 15 - s;
    const int64_t v = (int64_t)((uint64_t)acc * (uint64_t)reduced + (UINT64_C(1) << (total - 1))) >> total;
    int32_t r = (int32_t)(uint32_t)(uint64_t)v;
    r = r < lo ? lo : r > hi ? hi : r;
    return (int16_t)r;
}

static inline int check_requant16(const int32_t *mult, const int32_t *shift, int32_t count)
{
    for (int32_t i = 0; i < count; i++)
        if (mult[i] < 0 || shift[i] < -31 || shift[i] > 14)
            return NPU_KERNEL_BAD_SHIFT;
    return 0;
}

#endif
