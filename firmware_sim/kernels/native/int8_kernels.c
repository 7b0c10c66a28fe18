/*
 * The compute cores' int8 inner loops in C: depthwise convolution and fully connected.
 *
 * Same arithmetic as TFLite's reference kernels (reference_integer_ops::
 * DepthwiseConvPerChannel and FullyConnected): int32 accumulation of
 * (input + input_offset) * filter, int32 bias, requantization, output offset, clamp.
 * Built with -fwrapv, so int32 overflow wraps exactly as TFLite's int32 arithmetic does
 * on x86 (the order of a wrapping sum does not change its result, which lets the loops
 * run along channels instead of TFLite's taps-innermost order).
 *
 * Every array is C-contiguous; the Python side checks shapes and parameter ranges.
 */
#include <stdint.h>
#include <stdlib.h>
#include <math.h>

/* gemmlowp SaturatingRoundingDoublingHighMul: round(a * b / 2**31), saturated. */
static inline int32_t srdhm(int32_t a, int32_t b)
{
    if (a == INT32_MIN && b == INT32_MIN)
        return INT32_MAX;
    int64_t ab = (int64_t)a * (int64_t)b;
    int64_t nudge = ab >= 0 ? (1 << 30) : (1 - (1 << 30));
    return (int32_t)((ab + nudge) / (INT64_C(1) << 31));
}

/* gemmlowp RoundingDivideByPOT: x / 2**e, rounded half away from zero. */
static inline int32_t rounding_divide_by_pot(int32_t x, int e)
{
    int32_t mask = (int32_t)((INT64_C(1) << e) - 1);
    int32_t remainder = x & mask;
    int32_t threshold = (mask >> 1) + (x < 0);
    return (x >> e) + (remainder > threshold);
}

/* TFLite MultiplyByQuantizedMultiplier, default build (double rounding). */
static inline int32_t multiply_by_quantized_multiplier(int32_t x, int32_t m, int32_t shift)
{
    int left = shift > 0 ? shift : 0;
    int right = shift > 0 ? 0 : -shift;
    return rounding_divide_by_pot(srdhm((int32_t)((uint32_t)x << left), m), right);
}

static inline int8_t clamp_s8(int32_t v, int32_t lo, int32_t hi)
{
    return (int8_t)(v < lo ? lo : v > hi ? hi : v);
}

/*
 * Depthwise convolution, NHWC. x (n, h, w, cin); filter (kh, kw, cin * dm): output channel
 * c * dm + q reads input channel c. bias (cin * dm) or NULL. mult/shift have cin * dm
 * entries, or one when per_channel is 0. Taps outside the image are skipped (the same as
 * padding with the input zero point). Returns 0, or -1 when out of memory.
 */
int npu_depthwise_s8(const int8_t *x, int32_t n, int32_t h, int32_t w, int32_t cin,
                     const int8_t *filter, int32_t kh, int32_t kw, int32_t dm,
                     const int32_t *bias,
                     int32_t stride_h, int32_t stride_w, int32_t dil_h, int32_t dil_w,
                     int32_t pad_top, int32_t pad_left, int32_t out_h, int32_t out_w,
                     int32_t input_offset, int32_t output_offset,
                     const int32_t *mult, const int32_t *shift, int32_t per_channel,
                     int32_t act_min, int32_t act_max, int8_t *out)
{
    const int32_t cout = cin * dm;
    int32_t *acc = malloc(sizeof(int32_t) * (size_t)cout);
    int16_t *shifted = malloc(sizeof(int16_t) * (size_t)cin);
    if (!acc || !shifted) {
        free(acc);
        free(shifted);
        return -1;
    }
    for (int32_t b = 0; b < n; b++) {
        for (int32_t oy = 0; oy < out_h; oy++) {
            for (int32_t ox = 0; ox < out_w; ox++) {
                for (int32_t c = 0; c < cout; c++)
                    acc[c] = bias ? bias[c] : 0;
                for (int32_t fy = 0; fy < kh; fy++) {
                    int32_t iy = oy * stride_h - pad_top + fy * dil_h;
                    if (iy < 0 || iy >= h)
                        continue;
                    for (int32_t fx = 0; fx < kw; fx++) {
                        int32_t ix = ox * stride_w - pad_left + fx * dil_w;
                        if (ix < 0 || ix >= w)
                            continue;
                        const int8_t *xp = x + (((int64_t)b * h + iy) * w + ix) * cin;
                        const int8_t *fp = filter + ((int64_t)fy * kw + fx) * cout;
                        if (dm == 1) {
                            /* |x + offset| <= 255 and |filter| <= 128: the product fits int16's
                               range once widened, and int32 sums wrap like TFLite's. */
                            for (int32_t c = 0; c < cin; c++)
                                acc[c] += (int32_t)(int16_t)(xp[c] + input_offset) * fp[c];
                        } else {
                            for (int32_t c = 0; c < cin; c++)
                                shifted[c] = (int16_t)(xp[c] + input_offset);
                            for (int32_t c = 0; c < cin; c++)
                                for (int32_t q = 0; q < dm; q++)
                                    acc[c * dm + q] += (int32_t)shifted[c] * fp[c * dm + q];
                        }
                    }
                }
                int8_t *op = out + (((int64_t)b * out_h + oy) * out_w + ox) * cout;
                for (int32_t c = 0; c < cout; c++) {
                    int32_t i = per_channel ? c : 0;
                    int32_t v = multiply_by_quantized_multiplier(acc[c], mult[i], shift[i]);
                    op[c] = clamp_s8(v + output_offset, act_min, act_max);
                }
            }
        }
    }
    free(acc);
    free(shifted);
    return 0;
}

/* One rounding of x * m / 2**(31 - shift), ties away from zero, wrapped to int32. */
static inline int32_t requantize_round_away(int32_t x, int32_t m, int32_t shift)
{
    int total = 31 - shift;
    int64_t p = (int64_t)x * (int64_t)m;
    int64_t half = INT64_C(1) << (total - 1);
    int64_t mag = ((p < 0 ? -p : p) + half) >> total;
    return (int32_t)(uint32_t)(uint64_t)(p < 0 ? -mag : mag);
}

/* LiteRT's FC reference requantization: (int32)round(acc * scale); out of range gives
   INT32_MIN, as x86's double-to-int conversion does. */
static inline int32_t requantize_double(int32_t acc, double scale)
{
    double v = round((double)acc * scale);
    if (!(v >= -2147483648.0 && v <= 2147483647.0))
        return INT32_MIN;
    return (int32_t)v;
}

/* Dot product of k int16 values (input + offset) with k int8 weights, int32 wrapping. */
static inline int32_t dot_s16_s8(const int16_t *a, const int8_t *b, int32_t k)
{
    int32_t sum = 0;
    for (int32_t i = 0; i < k; i++)
        sum += (int32_t)a[i] * b[i];
    return sum;
}

/*
 * Fully connected: out (rows, n) = requant((x + input_offset) @ w.T + bias).
 * x (rows, k); w (n, k). mult/shift (and scale) have n entries, or one when per_channel
 * is 0. With scale non-NULL the requantization is LiteRT's double arithmetic, otherwise
 * the fixed-point multiplier and shift with one rounding, ties away from zero.
 * Returns 0, or -1 when out of memory.
 */
int npu_fully_connected_s8(const int8_t *x, int32_t rows, int32_t k,
                           const int8_t *w, int32_t n, const int32_t *bias,
                           int32_t input_offset, int32_t output_offset,
                           const int32_t *mult, const int32_t *shift, const double *scale,
                           int32_t per_channel, int32_t act_min, int32_t act_max, int8_t *out)
{
    int16_t *shifted = malloc(sizeof(int16_t) * (size_t)(k > 0 ? k : 1));
    if (!shifted)
        return -1;
    for (int32_t r = 0; r < rows; r++) {
        const int8_t *xr = x + (int64_t)r * k;
        for (int32_t i = 0; i < k; i++)
            shifted[i] = (int16_t)(xr[i] + input_offset);
        int8_t *orow = out + (int64_t)r * n;
        for (int32_t o = 0; o < n; o++) {
            int32_t acc = dot_s16_s8(shifted, w + (int64_t)o * k, k);
            if (bias)
                acc += bias[o];
            int32_t i = per_channel ? o : 0;
            int32_t v = scale ? requantize_double(acc, scale[i])
                              : requantize_round_away(acc, mult[i], shift[i]);
            orow[o] = clamp_s8((int32_t)((uint32_t)v + (uint32_t)output_offset), act_min, act_max);
        }
    }
    free(shifted);
    return 0;
}
