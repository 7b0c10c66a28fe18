/*
 * int8 / int16 RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR (NHWC), the arithmetic of
 * kernels/resize.py, which ran in numpy on every inference (an FPN's upsampling was a
 * quarter of a face detector's chip time). The source rows and columns of every output
 * pixel, and the bilinear fractions, are the numpy kernel's own (computed once in Python,
 * native/data_calls.bind_resize); here is the gather and the weighted sum.
 *
 * Bilinear: total = r00 wy0 wx0 + r10 wy1 wx0 + r01 wy0 wx1 + r11 wy1 wx1 in int64 (a
 * fraction may be negative near the border, a weight up to 2**11: |total| < 2**39), then
 * (total +- 2**19) / 2**20 truncated (C's division: rounding half away from zero), stored
 * with the int64 -> int8/int16 wrap numpy's astype does.
 */
#include <stdint.h>
#include <string.h>

#include "int8_kernels.h"

#define ONE (INT64_C(1) << 10)

#define BILINEAR_ROW(T)                                                                          \
    do {                                                                                         \
        const T *r0 = (const T *)c->x + ((int64_t)b * c->h + c->y0[oy]) * c->w * ch;            \
        const T *r1 = (const T *)c->x + ((int64_t)b * c->h + c->y1[oy]) * c->w * ch;            \
        T *o = (T *)c->out + (((int64_t)b * c->oh + oy) * c->ow) * ch;                         \
        for (int32_t ox = 0; ox < c->ow; ox++, o += ch) {                                        \
            const int64_t wx1 = c->fx[ox], wx0 = ONE - wx1;                                      \
            const int64_t w00 = wy0 * wx0, w10 = wy1 * wx0, w01 = wy0 * wx1, w11 = wy1 * wx1;    \
            const T *a = r0 + (int64_t)c->x0[ox] * ch, *bb = r1 + (int64_t)c->x0[ox] * ch;      \
            const T *d = r0 + (int64_t)c->x1[ox] * ch, *e = r1 + (int64_t)c->x1[ox] * ch;       \
            for (int64_t i = 0; i < ch; i++) {                                                   \
                const int64_t total = a[i] * w00 + bb[i] * w10 + d[i] * w01 + e[i] * w11;      \
                o[i] = (T)((total + (total > 0 ? INT64_C(1) << 19 : -(INT64_C(1) << 19)))       \
                           / (INT64_C(1) << 20));                                                \
            }                                                                                    \
        }                                                                                        \
    } while (0)

/* Every source index must lie in the image (the Python side computed them; checked here so a
   bad struct cannot read outside x). */
static int indices_in(const int32_t *v, int32_t n, int32_t size)
{
    for (int32_t i = 0; i < n; i++)
        if (v[i] < 0 || v[i] >= size)
            return 0;
    return 1;
}

int npu_resize(const struct npu_resize_call *c)
{
    if ((c->elem != 1 && c->elem != 2) || c->n < 1 || c->h < 1 || c->w < 1 || c->c < 1 || c->oh < 1 || c->ow < 1
            || !indices_in(c->y0, c->oh, c->h) || !indices_in(c->x0, c->ow, c->w)
            || (c->bilinear && (!indices_in(c->y1, c->oh, c->h) || !indices_in(c->x1, c->ow, c->w))))
        return NPU_KERNEL_BAD_STEP;
    const int64_t ch = c->c;
    for (int32_t b = 0; b < c->n; b++)
        for (int32_t oy = 0; oy < c->oh; oy++) {
            if (!c->bilinear) {          /* nearest: whole pixels copied */
                const size_t pixel = (size_t)(ch * c->elem);
                const char *row = (const char *)c->x + (((int64_t)b * c->h + c->y0[oy]) * c->w) * ch * c->elem;
                char *o = (char *)c->out + (((int64_t)b * c->oh + oy) * c->ow) * ch * c->elem;
                for (int32_t ox = 0; ox < c->ow; ox++, o += pixel)
                    memcpy(o, row + (int64_t)c->x0[ox] * (int64_t)pixel, pixel);
                continue;
            }
            const int64_t wy1 = c->fy[oy], wy0 = ONE - wy1;
            if (c->elem == 1)
                BILINEAR_ROW(int8_t);
            else
                BILINEAR_ROW(int16_t);
        }
    return 0;
}
