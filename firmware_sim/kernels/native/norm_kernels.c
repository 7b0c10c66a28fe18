/*
 * int8 L2_NORMALIZATION (TFLite's reference_integer_ops::L2Normalization): each row scaled
 * by the inverse square root of its sum of squares, GetInvSqrtQuantizedMultiplierExp's
 * Newton iterations in gemmlowp fixed point, the arithmetic of kernels/normalization.py's
 * l2_normalization and kernels/unary.py's inv_sqrt_multiplier_exp, which stay the reference.
 * int8 LOG_SOFTMAX (reference_integer_ops::LogSoftmax): normalization.py's log_softmax, its
 * per-element exponentials from tables the binding computes with the numpy kernels, its
 * per-row log (log_x_for_x_greater_than_or_equal_to_1) here, line for line as _log_q5, in
 * int64 with the same explicit int32 wraps and saturations as its Python integers.
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

/* LOG_SOFTMAX ---------------------------------------------------------------------------- */

static inline int64_t rdbp(int64_t x, int e)    /* RoundingDivideByPOT, e in [0, 63) */
{
    return e ? (x + (INT64_C(1) << (e - 1)) - (x < 0)) >> e : x;
}

static inline int64_t mul_by_pot(int64_t x, int e)    /* SaturatingRoundingMultiplyByPOT */
{
    if (e == 0)
        return x;
    if (e < 0)
        return rdbp(x, -e);
    const int64_t threshold = (INT64_C(1) << (31 - e)) - 1;
    return x > threshold ? INT32_MAX : x < -threshold ? INT32_MIN : wrap32((int64_t)((uint64_t)x << e));
}

static inline int clz32(int64_t x)
{
    const uint32_t u = (uint32_t)(uint64_t)x;
    return u ? __builtin_clz(u) : 32;
}

static inline int64_t half_away(int64_t v)      /* v / 2, C division on the magnitude */
{
    return v >= 0 ? v / 2 : -((-v) / 2);
}

static int64_t one_over_one_plus(int64_t a)    /* gemmlowp.py's _one_over_one_plus_x_s */
{
    const int64_t s = a + INT32_MAX;
    const int64_t half = half_away(s + (s >= 0 ? 1 : -1));
    int64_t x = wrap32(1515870810 + srdhm(half, -1010580540));
    for (int i = 0; i < 3; i++) {
        const int64_t one_minus = wrap32((INT64_C(1) << 29) - srdhm(half, x));
        x = wrap32(x + mul_by_pot(srdhm(x, one_minus), 2));
    }
    return mul_by_pot(x, 1);
}

/* log_x_for_x_greater_than_or_equal_to_1<5> of a Q12.19 value, Q5.26 raw (_log_q5). */
static int64_t log_q5(int64_t z_a)
{
    enum { OUT_BITS = 5, IN_BITS = 12, ACCUM_BITS = OUT_BITS + 1 };
    const int64_t log_2 = 1488522236, sqrt_sqrt_half = 1805811301, sqrt_half = 1518500250;
    const int64_t one_quarter = 536870912, alpha_n = 117049297, alpha_d = 127690142, alpha_i = 1057819769;
    const int64_t alpha_f = 638450708;
    const int64_t shifted_quarter = mul_by_pot(one_quarter, -ACCUM_BITS);
    const int z_a_headroom_plus_1 = clz32(z_a);
    const int64_t r_a_tmp = mul_by_pot(z_a, z_a_headroom_plus_1 - 1);
    const int64_t r_a_raw = mul_by_pot(srdhm(r_a_tmp, sqrt_half), 1);
    const int64_t z_a_pow_2_adj =
        clamp32(mul_by_pot(IN_BITS - z_a_headroom_plus_1, 31 - ACCUM_BITS) + shifted_quarter);
    const int64_t z_b = srdhm(z_a, sqrt_half);
    const int z_b_headroom = clz32(z_b) - 1;
    const int64_t r_b_raw = mul_by_pot(z_a, z_b_headroom);
    const int64_t z_b_pow_2_adj = clamp32(mul_by_pot(IN_BITS - z_b_headroom, 31 - ACCUM_BITS) - shifted_quarter);
    const int64_t r = r_a_raw < r_b_raw ? r_a_raw : r_b_raw;
    const int64_t z_pow_2_adj = z_a_pow_2_adj > z_b_pow_2_adj ? z_a_pow_2_adj : z_b_pow_2_adj;
    const int64_t total = r + sqrt_sqrt_half;                 /* RoundingHalfSum */
    const int64_t p = half_away(total + (total >= 0 ? 1 : -1));
    int64_t q = wrap32(r - sqrt_sqrt_half);
    q = wrap32(q + q);
    const int64_t common_sq = srdhm(q, q);
    const int64_t num = wrap32(srdhm(q, r) + srdhm(srdhm(q, common_sq), alpha_n));
    const int64_t denom_minus_one_0 =
        wrap32(srdhm(p, wrap32(wrap32(alpha_i + q) + srdhm(alpha_d, common_sq))) + srdhm(alpha_f, q));
    const int64_t recip_denom = one_over_one_plus(denom_minus_one_0);
    const int64_t num_scaled = mul_by_pot(num, -ACCUM_BITS);
    return mul_by_pot(wrap32(srdhm(z_pow_2_adj, log_2) + srdhm(num_scaled, recip_denom)), ACCUM_BITS - OUT_BITS);
}

/* Each row: its maximum, the sum of its elements' terms, the log of that sum; an element's
   output rdbp(diff_q5 - log, 31 - 5 - 4) + 127 clamped, or -128 at or under the row's
   cut-off (diff_min - 1 or the reverse-scaled log, the larger). */
int npu_log_softmax(const struct npu_log_softmax_call *c)
{
    if (c->reverse_scaling_right_shift < 0 || c->reverse_scaling_right_shift > 31)
        return NPU_KERNEL_BAD_SHIFT;
    for (int64_t r = 0; r < c->rows; r++) {
        const int8_t *x = c->x + r * c->depth;
        int8_t *o = c->out + r * c->depth;
        int32_t max = -128;
        for (int64_t i = 0; i < c->depth; i++)
            max = x[i] > max ? x[i] : max;
        int64_t sum = 0;
        for (int64_t i = 0; i < c->depth; i++)
            sum += c->terms_t[max - x[i]];
        const int64_t logs = log_q5(wrap32(sum));
        int64_t adjusted = mbqm(wrap32(logs + INT32_MIN), c->reverse_scaling_divisor, -c->reverse_scaling_right_shift);
        if (adjusted < (int64_t)c->diff_min - 1)
            adjusted = (int64_t)c->diff_min - 1;
        for (int64_t i = 0; i < c->depth; i++) {
            const int32_t below = max - x[i];
            if (-below <= adjusted) {
                o[i] = -128;
                continue;
            }
            const int64_t v = rdbp(wrap32(c->diff_q5_t[below] - logs), 31 - 5 - 4) + 127;
            o[i] = (int8_t)(v < -128 ? -128 : v > 127 ? 127 : v);
        }
    }
    return 0;
}
