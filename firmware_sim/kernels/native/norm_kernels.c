/*
 * int8 L2_NORMALIZATION (TFLite's reference_integer_ops::L2Normalization): each row scaled
 * by the inverse square root of its sum of squares, GetInvSqrtQuantizedMultiplierExp's
 * Newton iterations in gemmlowp fixed point, the arithmetic of kernels/normalization.py's
 * l2_normalization and kernels/unary.py's inv_sqrt_multiplier_exp, which stay the reference.
 */
#include <stdint.h>

#include "int8_kernels.h"

/* gemmlowp's SaturatingRoundingDoublingHighMul: floor((a b + 2**30) / 2**31), the one
   overflow (INT32_MIN squared) saturated. */
static inline int64_t srdhm(int64_t a, int64_t b)
{
    if (a == INT32_MIN && b == INT32_MIN)
        return INT32_MAX;
    return (a * b + (INT64_C(1) << 30)) >> 31;
}

static inline int64_t clamp32(int64_t v)
{
    return v < INT32_MIN ? INT32_MIN : v > INT32_MAX ? INT32_MAX : v;
}

static inline int64_t wrap32(int64_t v)
{
    return (int32_t)(uint32_t)(uint64_t)v;
}

/* GetInvSqrtQuantizedMultiplierExp(value, kReverseShift) for a sum of squares: *mult and
   the (right) shift it returns, as inv_sqrt_multiplier_exp computes them. */
static int32_t inv_sqrt(int64_t value, int64_t *mult)
{
    if (value <= 1) {
        *mult = INT32_MAX;
        return 0;
    }
    int32_t shift = 11;
    while (value >= (INT64_C(1) << 29)) {
        value /= 4;
        shift++;
    }
    const int clz = __builtin_clzll((unsigned long long)value) - 32;
    const int pairs = (clz - 1) / 2 - 1;
    shift -= pairs;
    value <<= 2 * pairs;
    const int64_t x_in = value >> 1, half_input = (x_in >> 1) + (x_in & 1);
    const int64_t half_three = (INT64_C(1) << 28) + (INT64_C(1) << 27);
    int64_t x = INT64_C(1) << 28;
    for (int i = 0; i < 5; i++) {
        const int64_t x3 = clamp32(srdhm(srdhm(x, x), x) << 6);
        x = clamp32((srdhm(half_three, x) - srdhm(half_input, x3)) << 3);
    }
    x = srdhm(x, 1518500250);
    if (shift < 0) {
        x = wrap32(x << -shift);
        shift = 0;
    }
    *mult = x;
    return -shift;
}

/* MultiplyByQuantizedMultiplier (double rounding) of an int32 value, shift in [-31, 30]. */
static inline int64_t mbqm(int64_t x, int64_t m, int32_t s)
{
    if (s > 0)
        x = wrap32(x << s);
    const int64_t v = srdhm(x, m);
    const int e = s > 0 ? 0 : -s;
    return e ? (v + (INT64_C(1) << (e - 1)) - (v < 0)) >> e : v;
}

/* Each of `rows` rows of `depth` int8 values (zero point input_zp) scaled to unit L2 norm,
   output scale 1/128 and zero point 0, clamped to int8. NPU_KERNEL_BAD_SHIFT when a row's
   shift falls outside [-31, 30] (the numpy kernel refuses it too). */
int npu_l2norm(const struct npu_l2norm_call *c)
{
    for (int64_t r = 0; r < c->rows; r++) {
        const int8_t *x = c->x + r * c->depth;
        int64_t acc = 0;
        for (int64_t i = 0; i < c->depth; i++) {
            const int64_t v = (int64_t)x[i] - c->input_zp;
            acc += v * v;
        }
        int64_t m;
        const int32_t shift = inv_sqrt(acc, &m) + 7;     /* 7: the output's scale bits */
        if (shift < -31 || shift > 30)
            return NPU_KERNEL_BAD_SHIFT;
        int8_t *o = c->out + r * c->depth;
        for (int64_t i = 0; i < c->depth; i++) {
            const int64_t q = mbqm((int64_t)x[i] - c->input_zp, m, shift);
            o[i] = (int8_t)(q < -128 ? -128 : q > 127 ? 127 : q);
        }
    }
    return 0;
}
