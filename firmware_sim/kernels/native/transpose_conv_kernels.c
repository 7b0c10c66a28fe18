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
 * channels (a segmentation head's one) the pixels of an input row.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "int8_kernels.h"
#include "int16_common.h"

/* Output channels under which the sums run along input rows (a row of fewer output channels
   leaves most of a vector empty): each tap's filter value times a row of input values. */
#define BY_ROWS_BELOW 16

/* Input channels under which an int16 row's sums over them fit int32 (each product of an int16
   and an int8 value is under 2**22 in magnitude): its multiplies then vectorize as int32. */
#define DOT32_CIN_BELOW 512

/* Many output channels: every input pixel (v: its cin values less the zero point) times each
   tap's (cin, cout) filter, added into the cout sums of the output pixel the tap lands on.
   ACC: int32_t for int8 (wrapping), int64_t for int16; X: the input's element type. */
#define PIXEL_SCATTER(NAME, X, ACC)                                                                       \
    static void NAME(const struct npu_transpose_conv_call *c, const int32_t *filter, int32_t *v, ACC *acc) \
    {                                                                                                     \
        const int32_t cin = c->cin, cout = c->cout, kh = c->kh, kw = c->kw;                               \
        const X *x = (const X *)c->x;                                                                     \
        for (int32_t b = 0; b < c->n; b++)                                                                \
            for (int32_t iy = 0; iy < c->h; iy++)                                                         \
                for (int32_t ix = 0; ix < c->w; ix++) {                                                   \
                    const X *xp = x + (((int64_t)b * c->h + iy) * c->w + ix) * cin;                       \
                    for (int32_t i = 0; i < cin; i++)                                                     \
                        v[i] = (int32_t)xp[i] - c->input_zp;                                              \
                    for (int32_t ky = 0; ky < kh; ky++) {                                                 \
                        const int64_t oy = (int64_t)iy * c->sh - c->pt + ky; /* int64: stride 2**31-1 */  \
                        if (oy < 0 || oy >= c->oh)                                                        \
                            continue;                                                                     \
                        for (int32_t kx = 0; kx < kw; kx++) {                                             \
                            const int64_t ox = (int64_t)ix * c->sw - c->pl + kx;                          \
                            if (ox < 0 || ox >= c->ow)                                                    \
                                continue;                                                                 \
                            ACC *restrict a = acc + (((int64_t)b * c->oh + oy) * c->ow + ox) * cout;      \
                            const int32_t *restrict f = filter + ((int64_t)ky * kw + kx) * cin * cout;    \
                            for (int32_t i = 0; i < cin; i++) {                                           \
                                const int32_t *restrict fi = f + (int64_t)i * cout;                       \
                                for (int32_t o = 0; o < cout; o++)                                        \
                                    a[o] += (ACC)v[i] * fi[o];                                            \
                            }                                                                             \
                        }                                                                                 \
                    }                                                                                     \
                }                                                                                         \
    }

/* Few output channels (a segmentation head's one): an input row at a time, its values planar
   (planar[i * w + ix], less the zero point); per tap and output channel the row's sums over the
   input channels (SUM: int32_t, or int64_t for int16 rows of many input channels), each a
   filter value times a whole row, then added into the output pixels the tap lands on. */
#define ROW_SCATTER(NAME, X, ACC, SUM)                                                                    \
    static void NAME(const struct npu_transpose_conv_call *c, const int32_t *filter, int32_t *planar,    \
                     SUM *rowsum, ACC *acc)                                                               \
    {                                                                                                     \
        const int32_t cin = c->cin, cout = c->cout, kh = c->kh, kw = c->kw, w = c->w;                     \
        const X *x = (const X *)c->x;                                                                     \
        for (int32_t b = 0; b < c->n; b++)                                                                \
            for (int32_t iy = 0; iy < c->h; iy++) {                                                       \
                const X *row = x + ((int64_t)b * c->h + iy) * w * cin;                                    \
                for (int32_t ix = 0; ix < w; ix++)                                                        \
                    for (int32_t i = 0; i < cin; i++)                                                     \
                        planar[(int64_t)i * w + ix] = (int32_t)row[(int64_t)ix * cin + i] - c->input_zp;  \
                for (int32_t ky = 0; ky < kh; ky++) {                                                     \
                    const int64_t oy = (int64_t)iy * c->sh - c->pt + ky;                                  \
                    if (oy < 0 || oy >= c->oh)                                                            \
                        continue;                                                                         \
                    ACC *restrict out_row = acc + ((int64_t)b * c->oh + oy) * c->ow * cout;               \
                    for (int32_t kx = 0; kx < kw; kx++) {                                                 \
                        /* the input columns landing inside the output: ix * sw - pl + kx in [0, ow) */   \
                        const int64_t off = (int64_t)kx - c->pl;                                          \
                        const int64_t first = off >= 0 ? 0 : (-off + c->sw - 1) / c->sw;                  \
                        const int64_t last = c->ow - 1 - off < 0 ? -1 : (c->ow - 1 - off) / c->sw;        \
                        const int64_t end = last + 1 < w ? last + 1 : w;                                  \
                        if (first >= end)                                                                 \
                            continue;                                                                     \
                        const int32_t *f = filter + ((int64_t)ky * kw + kx) * cin * cout;                 \
                        for (int32_t o = 0; o < cout; o++) {                                              \
                            SUM *restrict s = rowsum;                                                     \
                            memset(s, 0, sizeof(SUM) * (size_t)w);                                        \
                            for (int32_t i = 0; i < cin; i++) {                                           \
                                const SUM fv = f[(int64_t)o * cin + i];                                   \
                                const int32_t *restrict p = planar + (int64_t)i * w;                      \
                                for (int64_t ix = first; ix < end; ix++)                                  \
                                    s[ix] += (SUM)p[ix] * fv;                                             \
                            }                                                                             \
                            for (int64_t ix = first; ix < end; ix++)                                      \
                                out_row[(ix * c->sw + off) * cout + o] += s[ix];                          \
                        }                                                                                 \
                    }                                                                                     \
                }                                                                                         \
            }                                                                                             \
    }

PIXEL_SCATTER(pixels_s8, int8_t, int32_t)
PIXEL_SCATTER(pixels_s16, int16_t, int64_t)
ROW_SCATTER(rows_s8, int8_t, int32_t, int32_t)
ROW_SCATTER(rows_s16, int16_t, int64_t, int32_t)
ROW_SCATTER(rows_s16_deep, int16_t, int64_t, int64_t)

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
    const int by_output = cout < BY_ROWS_BELOW;
    int32_t *filter = malloc(sizeof(int32_t) * (size_t)(taps * cin * cout));
    void *acc = calloc((size_t)outputs, wide ? sizeof(int64_t) : sizeof(int32_t));
    /* the input values: one pixel's, or (rows) one row's planar and its sums */
    int32_t *v = malloc(sizeof(int32_t) * (size_t)cin * (by_output ? (size_t)c->w : 1));
    int64_t *rowsum = by_output ? malloc(sizeof(int64_t) * (size_t)c->w) : NULL;
    if (!filter || !acc || !v || (by_output && !rowsum)) {
        free(filter);
        free(acc);
        free(v);
        free(rowsum);
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
        if (!by_output)
            pixels_s16(c, filter, v, acc);
        else if (cin < DOT32_CIN_BELOW)
            rows_s16(c, filter, v, (int32_t *)rowsum, acc);
        else
            rows_s16_deep(c, filter, v, rowsum, acc);
        const int64_t *sums = acc, *bias = c->bias;
        int16_t *out = c->out;
        for (int64_t p0 = 0; p0 < outputs; p0 += cout)
            for (int32_t o = 0; o < cout; o++) {
                const int32_t q = per_channel ? o : 0;
                out[p0 + o] = requant16(sums[p0 + o] + (bias ? bias[o] : 0), mult[q], shift[q], lo, hi);
            }
    } else {
        if (by_output)
            rows_s8(c, filter, v, (int32_t *)rowsum, acc);
        else
            pixels_s8(c, filter, v, acc);
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
    free(rowsum);
    return 0;
}
