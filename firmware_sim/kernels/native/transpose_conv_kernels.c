/*
 * TRANSPOSE_CONV (NHWC), the arithmetic of kernels/transpose_conv.py (LiteRT's reference
 * kernels), which ran in numpy on every inference (ppocrv5-det's two upsampling layers: 32 of
 * its 86 ms of chip CPU). Every input pixel scatters (x - input_zp) * w into the sums of the
 * output pixels its taps land on (outside the output: dropped).
 * int8: the sums are int32 and wrap (-fwrapv), the same bits as numpy's exact float64 sums
 * wrapped once; then the bias (int32 wrap), MultiplyByQuantizedMultiplier per channel, the
 * output zero point (int32 wrap) and the clamp.
 * int16 (wide, TFLite's 16x8 scheme: zero points 0): the sums and the bias are int64, then the
 * int64 MultiplyByQuantizedMultiplier (requant16) and the int16 clamp.
 * The filter is laid out once per call so that the innermost loop runs over contiguous
 * values, which the compiler vectorizes: output channels, or for layers of few output
 * channels the input channels of a dot product.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "int8_kernels.h"
#include "int16_common.h"

/* Output channels under which a tap's sums are dot products over the input channels (a row
   of fewer output channels leaves most of a vector empty). */
#define BY_OUTPUT_BELOW 16

/* The scatter of every input pixel into acc (ACC: int32_t for int8, int64_t for int16; X: the
   input's element type; ZP subtracted from each input value). */
#define SCATTER(NAME, X, ACC)                                                                              \
    static void NAME(const struct npu_transpose_conv_call *c, const int32_t *filter, int by_output,        \
                     int32_t *v, ACC *acc)                                                                  \
    {                                                                                                      \
        const int32_t cin = c->cin, cout = c->cout, kh = c->kh, kw = c->kw;                                \
        const X *x = (const X *)c->x;                                                                      \
        for (int32_t b = 0; b < c->n; b++)                                                                 \
            for (int32_t iy = 0; iy < c->h; iy++)                                                          \
                for (int32_t ix = 0; ix < c->w; ix++) {                                                    \
                    const X *xp = x + (((int64_t)b * c->h + iy) * c->w + ix) * cin;                        \
                    for (int32_t i = 0; i < cin; i++)                                                      \
                        v[i] = (int32_t)xp[i] - c->input_zp;                                               \
                    for (int32_t ky = 0; ky < kh; ky++) {                                                  \
                        const int64_t oy = (int64_t)iy * c->sh - c->pt + ky; /* int64: stride 2**31 - 1 */ \
                        if (oy < 0 || oy >= c->oh)                                                         \
                            continue;                                                                      \
                        for (int32_t kx = 0; kx < kw; kx++) {                                              \
                            const int64_t ox = (int64_t)ix * c->sw - c->pl + kx;                           \
                            if (ox < 0 || ox >= c->ow)                                                     \
                                continue;                                                                  \
                            ACC *restrict a = acc + (((int64_t)b * c->oh + oy) * c->ow + ox) * cout;       \
                            const int32_t *restrict f = filter + ((int64_t)ky * kw + kx) * cin * cout;     \
                            if (by_output) { /* a dot product over the input channels each */              \
                                for (int32_t o = 0; o < cout; o++) {                                       \
                                    ACC sum = 0;                                                           \
                                    for (int32_t i = 0; i < cin; i++)                                      \
                                        sum += (ACC)v[i] * f[(int64_t)o * cin + i];                        \
                                    a[o] += sum;                                                           \
                                }                                                                          \
                                continue;                                                                  \
                            }                                                                              \
                            for (int32_t i = 0; i < cin; i++) {                                            \
                                const int32_t *restrict fi = f + (int64_t)i * cout;                        \
                                for (int32_t o = 0; o < cout; o++)                                         \
                                    a[o] += (ACC)v[i] * fi[o];                                             \
                            }                                                                              \
                        }                                                                                  \
                    }                                                                                      \
                }                                                                                          \
    }

SCATTER(scatter_s8, int8_t, int32_t)
SCATTER(scatter_s16, int16_t, int64_t)

int npu_transpose_conv(const struct npu_transpose_conv_call *c)
{
    const int32_t cin = c->cin, cout = c->cout, kh = c->kh, kw = c->kw, wide = c->wide;
    const int32_t channels = c->per_channel ? cout : 1;
    if (c->n < 1 || c->h < 1 || c->w < 1 || cin < 1 || cout < 1 || kh < 1 || kw < 1 || c->sh < 1 || c->sw < 1
            || c->pt < 0 || c->pl < 0 || c->oh < 1 || c->ow < 1 || (wide && (c->input_zp || c->output_zp)))
        return NPU_KERNEL_BAD_STEP;
    if (wide && check_requant16(c->mult, c->shift, channels))
        return NPU_KERNEL_BAD_SHIFT;
    for (int32_t i = 0; i < channels; i++)
        if (c->shift[i] < -31 || c->shift[i] > 30)
            return NPU_KERNEL_BAD_SHIFT;
    const int64_t taps = (int64_t)kh * kw, outputs = (int64_t)c->n * c->oh * c->ow * cout;
    /* Few output channels: each tap's filter as (cout, cin), a dot product per output channel;
       else as (cin, cout), each input value times a row of output channels. */
    const int by_output = cout < BY_OUTPUT_BELOW;
    int32_t *filter = malloc(sizeof(int32_t) * (size_t)(taps * cin * cout));
    void *acc = calloc((size_t)outputs, wide ? sizeof(int64_t) : sizeof(int32_t));
    int32_t *v = malloc(sizeof(int32_t) * (size_t)cin);
    if (!filter || !acc || !v) {
        free(filter);
        free(acc);
        free(v);
        return NPU_KERNEL_NO_MEMORY;
    }
    for (int32_t o = 0; o < cout; o++)          /* (cout, kh, kw, cin) -> per tap (cout, cin) or (cin, cout) */
        for (int64_t t = 0; t < taps; t++)
            for (int32_t i = 0; i < cin; i++)
                filter[by_output ? (t * cout + o) * cin + i : (t * cin + i) * cout + o] =
                    c->filter[((int64_t)o * taps + t) * cin + i];
    /* the fields in locals: every store may alias them, the compiler would reload each */
    const int32_t *mult = c->mult, *shift = c->shift;
    const int32_t per_channel = c->per_channel, zp = c->output_zp, lo = c->act_min, hi = c->act_max;
    if (wide) {
        scatter_s16(c, filter, by_output, v, acc);
        const int64_t *sums = acc, *bias = c->bias;
        int16_t *out = c->out;
        for (int64_t p0 = 0; p0 < outputs; p0 += cout)
            for (int32_t o = 0; o < cout; o++) {
                const int32_t q = per_channel ? o : 0;
                out[p0 + o] = requant16(sums[p0 + o] + (bias ? bias[o] : 0), mult[q], shift[q], lo, hi);
            }
    } else {
        scatter_s8(c, filter, by_output, v, acc);
        const int32_t *sums = acc, *bias = c->bias;
        int8_t *out = c->out;
        for (int64_t p0 = 0; p0 < outputs; p0 += cout)
            for (int32_t o = 0; o < cout; o++) {
                const int32_t q = per_channel ? o : 0;
                int32_t total = sums[p0 + o];
                if (bias)
                    total = (int32_t)((uint32_t)total + (uint32_t)bias[o]);
                int32_t r = (int32_t)(uint32_t)(uint64_t)(mbqm(total, mult[q], shift[q]) + zp);
                r = r < lo ? lo : r > hi ? hi : r;
                out[p0 + o] = (int8_t)r;
            }
    }
    free(filter);
    free(acc);
    free(v);
    return 0;
}
