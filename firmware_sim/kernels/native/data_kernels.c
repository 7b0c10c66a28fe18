/*
 * The chip's data-movement and table kernels in C: strided copies (RESHAPE, TRANSPOSE,
 * STRIDED_SLICE, CONCATENATION), constant padding (PAD), 256- and 65536-entry table lookups
 * (LUT, and every int8 or int16 op that is a function of one input: RELU, REQUANTIZE...),
 * broadcasting two-input table lookups (int8 ADD/MUL over broadcast shapes) and MEAN.
 *
 * No arithmetic but MEAN's: each result is a byte (or int16) the Python reference computes
 * the same way (kernels/layout.py, binary_table.py, pooling.mean), so these loops only move
 * bytes. Shapes arrive already merged by the Python side (native/data_calls.py): adjacent
 * axes that are contiguous in every operand are one axis, size-1 axes are gone.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "int8_kernels.h"

#if defined(__AVX512VBMI__) && defined(__AVX512BW__)
#include <immintrin.h>
#endif

static void copy_inner(const char *restrict x, char *restrict o, int64_t n, int64_t xs, int64_t os,
                       int32_t elem)
{
    if (xs == elem && os == elem) {
        memcpy(o, x, (size_t)(n * elem));
        return;
    }
    switch (elem) {
    case 1:
        for (int64_t i = 0; i < n; i++)
            o[i * os] = x[i * xs];
        break;
    case 2:
        for (int64_t i = 0; i < n; i++)
            memcpy(o + i * os, x + i * xs, 2);
        break;
    default:
        for (int64_t i = 0; i < n; i++)
            memcpy(o + i * os, x + i * xs, 4);
        break;
    }
}

static void copy_axis(const char *x, char *o, const struct npu_copy_call *c, int d)
{
    if (d >= c->rank - 1 || d >= NPU_MOVE_MAX_RANK - 1) {   /* the last axis (a bound GCC can see) */
        copy_inner(x, o, c->shape[d], c->x_stride[d], c->out_stride[d], c->elem);
        return;
    }
    for (int64_t i = 0; i < c->shape[d]; i++)
        copy_axis(x + i * c->x_stride[d], o + i * c->out_stride[d], c, d + 1);
}

int npu_copy(const struct npu_copy_call *c)
{
    if (c->rank < 1 || c->rank > NPU_MOVE_MAX_RANK || (c->elem != 1 && c->elem != 2 && c->elem != 4))
        return NPU_KERNEL_BAD_STEP;
    copy_axis(c->x, c->out, c, 0);
    return 0;
}

static void fill(char *o, int64_t n, int32_t elem, int32_t value)
{
    if (elem == 1) {
        memset(o, (int8_t)value, (size_t)n);
        return;
    }
    const int16_t v = (int16_t)value;
    for (int64_t i = 0; i < n; i++)
        memcpy(o + 2 * i, &v, 2);
}

/* Output axis d of a padded copy; `block` holds each axis's output elements per step. */
static void pad_axis(const char *x, char *o, const struct npu_pad_call *c, const int64_t *in_block,
                     const int64_t *out_block, int d)
{
    const int64_t before = c->before[d], size = c->in_shape[d], after = c->after[d];
    const int32_t e = c->elem;
    if (d >= c->rank - 1 || d >= NPU_MOVE_MAX_RANK - 1) {   /* the last axis (a bound GCC can see) */
        fill(o, before, e, c->value);
        memcpy(o + before * e, x, (size_t)(size * e));
        fill(o + (before + size) * e, after, e, c->value);
        return;
    }
    fill(o, before * out_block[d], e, c->value);
    o += before * out_block[d] * e;
    for (int64_t i = 0; i < size; i++)
        pad_axis(x + i * in_block[d] * e, o + i * out_block[d] * e, c, in_block, out_block, d + 1);
    fill(o + size * out_block[d] * e, after * out_block[d], e, c->value);
}

int npu_pad(const struct npu_pad_call *c)
{
    if (c->rank < 1 || c->rank > NPU_MOVE_MAX_RANK || (c->elem != 1 && c->elem != 2))
        return NPU_KERNEL_BAD_STEP;
    int64_t in_block[NPU_MOVE_MAX_RANK], out_block[NPU_MOVE_MAX_RANK];
    int64_t in = 1, out = 1;
    for (int d = c->rank - 1; d >= 0; d--) {
        in_block[d] = in;
        out_block[d] = out;
        in *= c->in_shape[d];
        out *= c->before[d] + c->in_shape[d] + c->after[d];
    }
    pad_axis(c->x, c->out, c, in_block, out_block, 0);
    return 0;
}

#define LUT_LOOP(IN, OUT)                                    \
    do {                                                     \
        const IN *restrict x = c->x;                         \
        const OUT *restrict t = c->table;                    \
        OUT *restrict o = c->out;                            \
        for (int64_t i = 0; i < c->n; i++)                   \
            o[i] = t[x[i]];                                  \
    } while (0)

#if defined(__AVX512VBMI__) && defined(__AVX512BW__)
/* A 256-entry byte table held in four registers, 64 lookups at a time: two two-register byte
   permutes (index bits 0-6) and a blend on bit 7. Each 64-byte block is loaded before it is
   stored, so in place works as the scalar loop does. */
static void lut_bytes(const uint8_t *x, const int8_t *t, int8_t *o, int64_t n)
{
    const __m512i t0 = _mm512_loadu_si512(t), t1 = _mm512_loadu_si512(t + 64);
    const __m512i t2 = _mm512_loadu_si512(t + 128), t3 = _mm512_loadu_si512(t + 192);
    for (int64_t i = 0; i < n; i += 64) {
        const __mmask64 k = n - i >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (n - i)) - 1);
        const __m512i v = _mm512_maskz_loadu_epi8(k, x + i);
        const __m512i low = _mm512_permutex2var_epi8(t0, v, t1), high = _mm512_permutex2var_epi8(t2, v, t3);
        _mm512_mask_storeu_epi8(o + i, k, _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), low, high));
    }
}
#endif

int npu_lut(const struct npu_lut_call *c)
{
    switch (c->in_bytes * 4 + c->out_bytes) {
    case 5:
#if defined(__AVX512VBMI__) && defined(__AVX512BW__)
        lut_bytes(c->x, c->table, c->out, c->n);
#else
        LUT_LOOP(uint8_t, int8_t);
#endif
        return 0;
    case 6:
        LUT_LOOP(uint8_t, int16_t);
        return 0;
    case 9:
        LUT_LOOP(uint16_t, int8_t);
        return 0;
    case 10:
        LUT_LOOP(uint16_t, int16_t);
        return 0;
    default:
        return NPU_KERNEL_BAD_STEP;
    }
}

static void table2_axis(const int8_t *a, const int8_t *b, int8_t *o, const struct npu_table2b_call *c,
                        const int64_t *out_block, int d)
{
    const int64_t n = c->shape[d], as = c->a_stride[d], bs = c->b_stride[d];
    if (d >= c->rank - 1 || d >= NPU_MOVE_MAX_RANK - 1) {   /* the last axis (a bound GCC can see) */
        if (as == 1 && bs == 1) {
            npu_table2_s8(a, b, n, c->table, o);
            return;
        }
        const int8_t *restrict t = c->table;
        if (bs == 0) {      /* a row against one value of b: the table's row of that value */
            const uint8_t vb = (uint8_t)*b;
            for (int64_t i = 0; i < n; i++)
                o[i] = t[(uint16_t)((uint8_t)a[i * as] << 8 | vb)];
            return;
        }
        for (int64_t i = 0; i < n; i++)
            o[i] = t[(uint16_t)((uint8_t)a[i * as] << 8 | (uint8_t)b[i * bs])];
        return;
    }
    for (int64_t i = 0; i < n; i++)
        table2_axis(a + i * as, b + i * bs, o + i * out_block[d], c, out_block, d + 1);
}

int npu_table2_broadcast(const struct npu_table2b_call *c)
{
    if (c->rank < 1 || c->rank > NPU_MOVE_MAX_RANK)
        return NPU_KERNEL_BAD_STEP;
    int64_t out_block[NPU_MOVE_MAX_RANK], size = 1;
    for (int d = c->rank - 1; d >= 0; d--) {
        out_block[d] = size;
        size *= c->shape[d];
    }
    table2_axis(c->a, c->b, c->out, c, out_block, 0);
    return 0;
}

/* gemmlowp's primitives, as in int8_kernels.c (kernels/fixedpoint.py). */
static inline int64_t high_mul(int64_t a, int64_t b)
{
    if (a == INT32_MIN && b == INT32_MIN)
        return INT32_MAX;
    return (a * b + (INT64_C(1) << 30)) >> 31;
}

static inline int64_t divide_by_pot(int64_t x, int e)
{
    int64_t r = x + ((INT64_C(1) << e) >> 1);
    if (e > 0)
        r -= x < 0;
    return r >> e;
}

#define REDUCE_LOOP(T)                                                                    \
    do {                                                                                  \
        const T *v = (const T *)x;                                                        \
        if (c->reduce == NPU_SUMS_LARGEST) {                                                \
            for (int64_t i = 0; i < n; i++)                                               \
                sums[i * ss] = v[i * xs] > sums[i * ss] ? v[i * xs] : sums[i * ss];       \
        } else if (c->reduce == NPU_SUMS_SMALLEST) {                                         \
            for (int64_t i = 0; i < n; i++)                                               \
                sums[i * ss] = v[i * xs] < sums[i * ss] ? v[i * xs] : sums[i * ss];       \
        } else if (c->reduce == NPU_SUMS_SQUARES) {                                          \
            for (int64_t i = 0; i < n; i++) {                                             \
                const int64_t d = (int64_t)v[i * xs] - c->input_zp;                       \
                sums[i * ss] += d * d;                                                    \
            }                                                                             \
        } else {                                                                          \
            for (int64_t i = 0; i < n; i++)                                               \
                sums[i * ss] += v[i * xs];                                                \
        }                                                                                 \
    } while (0)

static void mean_axis(const char *x, int64_t *sums, const struct npu_mean_call *c, int d)
{
    const int64_t n = c->shape[d], xs = c->x_stride[d], ss = c->sum_stride[d];
    if (d >= c->rank - 1 || d >= NPU_MOVE_MAX_RANK - 1) {   /* the last axis (a bound GCC can see) */
        if (c->elem == 1)
            REDUCE_LOOP(int8_t);
        else
            REDUCE_LOOP(int16_t);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        mean_axis(x + i * xs * c->elem, sums + i * ss, c, d + 1);
}

int npu_mean(const struct npu_mean_call *c)
{
    if (c->rank < 1 || c->rank > NPU_MOVE_MAX_RANK || (c->elem != 1 && c->elem != 2) || c->reduce < 0 ||
        c->reduce > NPU_SUMS_SQUARES)
        return NPU_KERNEL_BAD_STEP;
    if (c->shift < -31 || c->shift > 30)
        return NPU_KERNEL_BAD_SHIFT;
    const int64_t start = c->reduce == NPU_SUMS_LARGEST ? INT64_MIN : c->reduce == NPU_SUMS_SMALLEST ? INT64_MAX : 0;
    for (int64_t i = 0; i < c->outputs; i++)
        c->sums[i] = start;
    mean_axis(c->x, c->sums, c, 0);
    if (c->reduce == NPU_SUMS_LARGEST || c->reduce == NPU_SUMS_SMALLEST) {
        for (int64_t i = 0; i < c->outputs; i++) {
            if (c->elem == 1)
                ((int8_t *)c->out)[i] = (int8_t)c->sums[i];
            else
                ((int16_t *)c->out)[i] = (int16_t)c->sums[i];
        }
        return 0;
    }
    if (c->reduce == NPU_SUMS_SQUARES) {     /* the L2 norm: kernels/reduce.py's float64 formula */
        for (int64_t i = 0; i < c->outputs; i++) {
            double q = round(sqrt((double)c->sums[i]) * c->scale) + c->output_zp;
            q = q < c->act_min ? c->act_min : q > c->act_max ? c->act_max : q;
            if (c->elem == 1)
                ((int8_t *)c->out)[i] = (int8_t)q;
            else
                ((int16_t *)c->out)[i] = (int16_t)q;
        }
        return 0;
    }
    const int left = c->shift > 0 ? c->shift : 0, right = c->shift > 0 ? 0 : -c->shift;
    for (int64_t i = 0; i < c->outputs; i++) {
        /* the int32 sum less the zero point's share, as TFLite's int32 arithmetic wraps it */
        int64_t v = (int32_t)(uint32_t)(uint64_t)((int64_t)(int32_t)(uint32_t)(uint64_t)c->sums[i] - c->zp_total);
        v = (int32_t)(uint32_t)((uint64_t)v << left);
        v = divide_by_pot(high_mul(v, c->multiplier), right);
        int32_t r = (int32_t)(uint32_t)(uint64_t)(v + c->output_zp);
        r = r < c->act_min ? c->act_min : r > c->act_max ? c->act_max : r;
        if (c->elem == 1)
            ((int8_t *)c->out)[i] = (int8_t)r;
        else
            ((int16_t *)c->out)[i] = (int16_t)r;
    }
    return 0;
}

int npu_sequence(const struct npu_sequence_call *c)
{
    int32_t done;
    return npu_steps_run(c->steps, c->count, &done);
}

/* GATHER: out (outer, count, inner) = x (outer, axis, inner) rows picked by indices, which
   are read on every run (a model may compute them); NPU_KERNEL_BAD_INDEX for one outside
   [0, axis), before anything is written. */
int npu_gather(const struct npu_gather_call *c)
{
    for (int64_t j = 0; j < c->count; j++)
        if (c->indices[j] < 0 || c->indices[j] >= c->axis)
            return NPU_KERNEL_BAD_INDEX;
    for (int64_t o = 0; o < c->outer; o++)
        for (int64_t j = 0; j < c->count; j++)
            memcpy(c->out + (o * c->count + j) * c->inner, c->x + (o * c->axis + c->indices[j]) * c->inner,
                   (size_t)c->inner);
    return 0;
}
