/*
 * int16 SOFTMAX over rows (output scale 2**-15), the arithmetic of kernels/int16x8.py's
 * softmax_int16 (LiteRT's int16 reference kernel), which ran in numpy on every inference
 * (120 us for a two-class head). The exp and 1 / (1 + x) tables are the numpy kernel's
 * (513 entries each, passed in).
 *
 * Per row: each difference to the row's maximum, rescaled by the input multiplier and shift
 * (MultiplyByQuantizedMultiplier), offset by 32767 and clamped to int16, goes through the exp
 * table; the sum of the exps (int32, wrapping) is normalized by its leading zeros and
 * inverted through the reciprocal table; each exp times the reciprocal, rounded, is the
 * output, clamped to [0, 32767]. A row whose exps sum to zero or less (a bad multiplier) fails
 * the call before anything is written, as the numpy kernel raises.
 */
#include <stdint.h>
#include <stdlib.h>

#include "int8_kernels.h"
#include "int16_common.h"

/* TFLite's int16 LUTLookup: the top 9 bits of v index the 513-entry table, the low 7
   interpolate (rounded); int16 arithmetic wraps. */
static inline int32_t lut16(int32_t v, const int16_t *lut)
{
    const int32_t index = 256 + (v >> 7), base = lut[index];
    const int32_t slope = (int16_t)(uint16_t)(uint32_t)(lut[index + 1] - base);
    const int32_t delta = (slope * (v & 0x7F) + 64) >> 7;
    return (int16_t)(uint16_t)(uint32_t)(base + delta);
}

static inline int32_t row_max(const int16_t *x, int32_t depth)
{
    int32_t m = x[0];
    for (int32_t i = 1; i < depth; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

/* The exp table's value for x[i] against the row's maximum. */
static inline int32_t exp16(const struct npu_softmax16_call *c, int32_t x, int32_t max)
{
    int64_t scaled = mbqm((int64_t)x - max, c->multiplier, c->left_shift) + 32767;
    scaled = scaled < INT16_MIN ? INT16_MIN : scaled > INT16_MAX ? INT16_MAX : scaled;
    return lut16((int32_t)scaled, c->exp_lut);
}

/* The row's exps (the table's values, int16) into e and their sum (int32, wrapping). */
static int32_t exps(const struct npu_softmax16_call *c, const int16_t *x, int32_t max, int16_t *e)
{
    int64_t total = 0;
    for (int32_t i = 0; i < c->depth; i++) {
        e[i] = (int16_t)exp16(c, x[i], max);
        total += e[i];
    }
    return (int32_t)(uint32_t)(uint64_t)total;
}

int npu_softmax16(const struct npu_softmax16_call *c)
{
    if (c->rows < 0 || c->depth < 1)
        return NPU_KERNEL_BAD_STEP;
    if (c->left_shift < -31 || c->left_shift > 30)
        return NPU_KERNEL_BAD_SHIFT;
    /* every row's exps and sum first (each checked before any output is written: x and out
       may be one buffer), then the outputs from them: one table lookup per element, not three */
    int16_t *e = malloc(sizeof(int16_t) * (size_t)c->rows * (size_t)c->depth + 1);
    int32_t *totals = malloc(sizeof(int32_t) * (size_t)c->rows + 1);
    if (!e || !totals) {
        free(e);
        free(totals);
        return NPU_KERNEL_NO_MEMORY;
    }
    for (int32_t r = 0; r < c->rows; r++) {
        const int16_t *x = c->x + (int64_t)r * c->depth;
        totals[r] = exps(c, x, row_max(x, c->depth), e + (int64_t)r * c->depth);
        if (totals[r] <= 0) {
            free(e);
            free(totals);
            return NPU_KERNEL_SOFTMAX_ZERO_SUM;
        }
    }
    for (int32_t r = 0; r < c->rows; r++) {
        const int16_t *er = e + (int64_t)r * c->depth;
        int16_t *o = c->out + (int64_t)r * c->depth;
        const int32_t total = totals[r];
        const int headroom = __builtin_clz((uint32_t)total);            /* >= 1: total > 0 */
        const int64_t shifted = (((int64_t)total << (headroom - 1)) + (1 << 13)) >> 14;
        int64_t index = shifted - (1 << 15) - (1 << 16);
        index = index < INT16_MIN ? INT16_MIN : index > INT16_MAX ? INT16_MAX : index;
        const int64_t recip = lut16((int32_t)index, c->recip_lut);
        const int right = 31 - headroom;
        const int64_t half = right > 0 ? INT64_C(1) << (right - 1) : 0;
        for (int32_t i = 0; i < c->depth; i++) {
            const int64_t v = (er[i] * recip + half) >> right;
            o[i] = (int16_t)(v < 0 ? 0 : v > INT16_MAX ? INT16_MAX : v);
        }
    }
    free(e);
    free(totals);
    return 0;
}
