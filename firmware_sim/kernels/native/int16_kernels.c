/*
 * int16 x int8 convolution, depthwise convolution and fully connected (TFLite's 16x8
 * reference kernels: int16 activations with zero point 0, int8 weights, int64 biases and
 * sums), the arithmetic of kernels/int16x8.py. Sums are exact: products (|x * w| <= 2**22)
 * add up in int32 over at most 256 terms (2**30), then in int64. Every array is
 * C-contiguous; the Python side checks shapes and parameters (native/int16_calls.py).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "int8_kernels.h"

#define CHUNK 256

/* Exact sum of a[i] * b[i], i < n. */
static int64_t dot16x8(const int16_t *restrict a, const int8_t *restrict b, int64_t n)
{
    int64_t total = 0;
    for (int64_t start = 0; start < n; start += CHUNK) {
        const int64_t end = n - start < CHUNK ? n : start + CHUNK;
        int32_t part = 0;
        for (int64_t i = start; i < end; i++)
            part += (int32_t)a[i] * (int32_t)b[i];
        total += part;
    }
    return total;
}

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

static int check_requant16(const int32_t *mult, const int32_t *shift, int32_t count)
{
    for (int32_t i = 0; i < count; i++)
        if (mult[i] < 0 || shift[i] < -31 || shift[i] > 14)
            return NPU_KERNEL_BAD_SHIFT;
    return 0;
}

/* Convolution (grouped), NHWC: x (n, h, w, cin); filter (cout, kh, kw, cin / groups). */
int npu_conv16x8(const struct npu_conv16_call *c)
{
    const int32_t cout = c->cout;
    int status = check_requant16(c->mult, c->shift, c->per_channel ? cout : 1);
    if (status)
        return status;
    const int32_t groups = c->groups, cin_g = c->cin / groups, cout_g = cout / groups;
    const int64_t k = (int64_t)c->kh * c->kw * cin_g;
    int16_t *row = malloc(sizeof(int16_t) * (size_t)(k > 0 ? k : 1));
    if (!row)
        return NPU_KERNEL_NO_MEMORY;
    for (int32_t b = 0; b < c->n; b++)
        for (int32_t oy = 0; oy < c->out_h; oy++)
            for (int32_t ox = 0; ox < c->out_w; ox++) {
                int16_t *o = c->out + (((int64_t)b * c->out_h + oy) * c->out_w + ox) * cout;
                for (int32_t g = 0; g < groups; g++) {
                    /* group g's window, zeros outside the image (the zero point is 0) */
                    int16_t *r = row;
                    for (int32_t fy = 0; fy < c->kh; fy++) {
                        const int32_t iy = oy * c->stride_h - c->pad_top + fy * c->dil_h;
                        for (int32_t fx = 0; fx < c->kw; fx++, r += cin_g) {
                            const int32_t ix = ox * c->stride_w - c->pad_left + fx * c->dil_w;
                            if (iy < 0 || iy >= c->h || ix < 0 || ix >= c->w)
                                memset(r, 0, sizeof(int16_t) * (size_t)cin_g);
                            else
                                memcpy(r, c->x + (((int64_t)b * c->h + iy) * c->w + ix) * c->cin + (int64_t)g * cin_g,
                                       sizeof(int16_t) * (size_t)cin_g);
                        }
                    }
                    for (int32_t q = 0; q < cout_g; q++) {
                        const int32_t oc = g * cout_g + q, p = c->per_channel ? oc : 0;
                        int64_t acc = dot16x8(row, c->filter + (int64_t)oc * k, k);
                        if (c->bias)
                            acc = (int64_t)((uint64_t)acc + (uint64_t)c->bias[oc]);
                        o[oc] = requant16(acc, c->mult[p], c->shift[p], c->act_min, c->act_max);
                    }
                }
            }
    free(row);
    return 0;
}

/* Depthwise convolution, NHWC: filter (kh, kw, cout), output channel oc reading input
   channel oc / depth_multiplier. Per-channel int32 sums over up to CHUNK taps, then int64. */
int npu_depthwise16x8(const struct npu_conv16_call *c)
{
    const int32_t cout = c->cout, dm = c->depth_multiplier;
    int status = check_requant16(c->mult, c->shift, c->per_channel ? cout : 1);
    if (status)
        return status;
    int64_t *acc = malloc(sizeof(int64_t) * (size_t)cout);
    int32_t *part = malloc(sizeof(int32_t) * (size_t)cout);
    if (!acc || !part) {
        free(acc);
        free(part);
        return NPU_KERNEL_NO_MEMORY;
    }
    for (int32_t b = 0; b < c->n; b++)
        for (int32_t oy = 0; oy < c->out_h; oy++)
            for (int32_t ox = 0; ox < c->out_w; ox++) {
                for (int32_t oc = 0; oc < cout; oc++) {
                    acc[oc] = c->bias ? c->bias[oc] : 0;
                    part[oc] = 0;
                }
                int32_t taps = 0;
                for (int32_t fy = 0; fy < c->kh; fy++) {
                    const int32_t iy = oy * c->stride_h - c->pad_top + fy * c->dil_h;
                    for (int32_t fx = 0; fx < c->kw; fx++) {
                        const int32_t ix = ox * c->stride_w - c->pad_left + fx * c->dil_w;
                        if (iy < 0 || iy >= c->h || ix < 0 || ix >= c->w)
                            continue;
                        const int16_t *xp = c->x + (((int64_t)b * c->h + iy) * c->w + ix) * c->cin;
                        const int8_t *fp = c->filter + ((int64_t)fy * c->kw + fx) * cout;
                        if (dm == 1) {
                            for (int32_t oc = 0; oc < cout; oc++)
                                part[oc] += (int32_t)xp[oc] * (int32_t)fp[oc];
                        } else {
                            for (int32_t oc = 0; oc < cout; oc++)
                                part[oc] += (int32_t)xp[oc / dm] * (int32_t)fp[oc];
                        }
                        if (++taps == CHUNK) {
                            for (int32_t oc = 0; oc < cout; oc++) {
                                acc[oc] += part[oc];
                                part[oc] = 0;
                            }
                            taps = 0;
                        }
                    }
                }
                int16_t *o = c->out + (((int64_t)b * c->out_h + oy) * c->out_w + ox) * cout;
                for (int32_t oc = 0; oc < cout; oc++) {
                    const int32_t p = c->per_channel ? oc : 0;
                    o[oc] = requant16(acc[oc] + part[oc], c->mult[p], c->shift[p], c->act_min, c->act_max);
                }
            }
    free(acc);
    free(part);
    return 0;
}

/* Fully connected: x (rows, k) int16, w (n, k) int8, bias (n) int64 or NULL; LiteRT's
   reference requantizes (int32)round(acc * scale) in double (scale per output or one). */
int npu_fully_connected16x8(const struct npu_fc16_call *c)
{
    for (int32_t r = 0; r < c->rows; r++)
        for (int32_t o = 0; o < c->n; o++) {
            int64_t acc = dot16x8(c->x + (int64_t)r * c->k, c->w + (int64_t)o * c->k, c->k);
            if (c->bias)
                acc = (int64_t)((uint64_t)acc + (uint64_t)c->bias[o]);
            const double v = round((double)acc * c->scale[c->per_channel ? o : 0]);
            int32_t q = !(v >= -2147483648.0 && v <= 2147483647.0) ? INT32_MIN : (int32_t)v;
            q = q < c->act_min ? c->act_min : q > c->act_max ? c->act_max : q;
            c->out[(int64_t)r * c->n + o] = (int16_t)q;
        }
    return 0;
}
