/*
 * int16 elementwise ADD, SUB, MUL, PRELU, MAXIMUM and MINIMUM (TFLite's int16 reference kernels: zero point 0,
 * gemmlowp's MultiplyByQuantizedMultiplier per operand), the arithmetic of
 * kernels/int16x8.py's binary operators, with a broadcast along one axis and per-channel
 * parameters. Every array is C-contiguous; the Python side checks shapes and parameters
 * (native/int16_calls.py).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "int8_kernels.h"
#include "int16_common.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

/* ADD or SUB: LiteRT's general int16 SUB is ADD's arithmetic with the scaled inputs subtracted. */
static inline int binary16_add_like(int32_t kind)
{
    return kind == NPU_BINARY16_ADD || kind == NPU_BINARY16_SUB;
}

/* The requantization columns of a kind's parameter row: ADD and SUB m1, s1, m2, s2, mo, so; MUL m, s;
   PRELU m1, s1 (x >= 0), m2, s2 (x * alpha). */
static inline int binary16_columns(int32_t kind)
{
    return binary16_add_like(kind) ? 6 : kind == NPU_BINARY16_MUL ? 2 : kind == NPU_BINARY16_PRELU ? 4 : 0;
}

/* One output element of x and y with parameter row p, before the int32 wrap and the clamp. */
static inline int64_t binary16_one(int32_t kind, int64_t x, int64_t y, const int32_t *p, int32_t left_shift)
{
    if (binary16_add_like(kind)) {
        const int64_t s1 = mbqm(x << left_shift, p[0], p[1]);
        const int64_t s2 = mbqm(y << left_shift, p[2], p[3]);
        return mbqm((int32_t)(uint32_t)(uint64_t)(kind == NPU_BINARY16_SUB ? s1 - s2 : s1 + s2), p[4], p[5]);
    }
    if (kind == NPU_BINARY16_MUL)
        return mbqm(x * y, p[0], p[1]);
    return x >= 0 ? mbqm(x, p[0], p[1]) : mbqm(x * y, p[2], p[3]);
}

#if INT16_LANES
/* mbqm's arithmetic per requantization (m, s) prepared for lanes, each field an int64 array
   over the channels: x' = (int32_t)(x << ls) (ls = s > 0 ? s : 0), then the two roundings
   folded into one shift (floor(floor(a / 2**31) / 2**e) = floor(a / 2**(31 + e)), e = -s > 0):
   (x' m + nudge - [x' m < -2**30] corr) >> sh, nudge = 2**30 + 2**(30 + e), corr = 2**31,
   sh = 31 + e (e = 0: nudge 2**30, corr 0, sh 31). Exact: |x' m| <= 2**62 and the terms add
   at most 2**61. mbqm's saturation (x' = m = INT32_MIN) is left out: binary16_prepare refuses
   a multiplier of INT32_MIN with a left shift (without one no x' is INT32_MIN: int16
   products, or ADD's non-negative multipliers). */
enum { TERM_M, TERM_NUDGE, TERM_CORR, TERM_SH, TERM_LS, TERMS };

/* The terms of every (m, s) pair of every channel's row, pair j's field f of channel ch at
   ((j * TERMS + f) * channels + ch); NULL when a multiplier of INT32_MIN meets a left shift
   (the scalar loop takes those) or memory runs out. *left: some pair shifts left. */
static int64_t *binary16_prepare(const struct npu_binary16_call *c, int *left)
{
    const int cols = binary16_columns(c->kind);
    const int64_t channels = c->channels;
    int64_t *terms = malloc(sizeof(int64_t) * (size_t)(cols / 2 * TERMS * channels));
    if (!terms)
        return NULL;
    *left = 0;
    for (int j = 0; j < cols / 2; j++)
        for (int64_t ch = 0; ch < channels; ch++) {
            const int32_t m = c->params[ch * cols + 2 * j], sft = c->params[ch * cols + 2 * j + 1];
            if (sft > 0 && m == INT32_MIN) {
                free(terms);
                return NULL;
            }
            const int e = sft > 0 ? 0 : -sft;
            int64_t *t = terms + j * TERMS * channels + ch;
            t[TERM_M * channels] = m;
            t[TERM_NUDGE * channels] = (INT64_C(1) << 30) + (e > 0 ? INT64_C(1) << (30 + e) : 0);
            t[TERM_CORR * channels] = e > 0 ? INT64_C(1) << 31 : 0;
            t[TERM_SH * channels] = 31 + e;
            t[TERM_LS * channels] = sft > 0 ? sft : 0;
            *left |= sft > 0;
        }
    return terms;
}

/* The terms of 8 lanes, pair j's field f in t[j][f]: from channel at on (per_lane, masked by
   k), else the one row's in every lane. */
static inline void terms8(const int64_t *terms, int64_t channels, int pairs, int64_t at, int per_lane, __mmask8 k,
                          __m512i t[3][TERMS])
{
    for (int j = 0; j < pairs; j++)
        for (int f = 0; f < TERMS; f++) {
            const int64_t *v = terms + (j * TERMS + f) * channels;
            t[j][f] = per_lane ? _mm512_maskz_loadu_epi64(k, v + at) : _mm512_set1_epi64(v[0]);
        }
}

/* mbqm of 8 int64 lanes holding int32 values with one pair's terms (binary16_prepare). */
static inline __m512i mbqm8(__m512i x, const __m512i *t, int left)
{
    if (left)
        x = _mm512_srai_epi64(_mm512_slli_epi64(_mm512_sllv_epi64(x, t[TERM_LS]), 32), 32);
    const __m512i prod = _mm512_mul_epi32(x, t[TERM_M]);
    __m512i q = _mm512_add_epi64(prod, t[TERM_NUDGE]);
    q = _mm512_mask_sub_epi64(q, _mm512_cmplt_epi64_mask(prod, _mm512_set1_epi64(-(INT64_C(1) << 30))), q,
                              t[TERM_CORR]);
    return _mm512_srav_epi64(q, t[TERM_SH]);
}

/* 8 int16 elements at a (stride 1, or 0: one value for all) as int64 lanes. */
static inline __m512i load16x8(const int16_t *a, int64_t stride, __mmask8 k)
{
    return stride ? _mm512_cvtepi16_epi64(_mm_maskz_loadu_epi16(k, a)) : _mm512_set1_epi64(a[0]);
}

/* 8 output lanes of x and y, clamped and stored to o (masked by k). */
static inline void binary16_store8(const struct npu_binary16_call *c, __m512i x, __m512i y, __m512i t[3][TERMS],
                                   int left, __mmask8 k, int16_t *o)
{
    __m512i raw;
    if (binary16_add_like(c->kind)) {
        const __m128i shift_in = _mm_cvtsi32_si128(c->left_shift);
        const __m512i s1 = mbqm8(_mm512_sll_epi64(x, shift_in), t[0], left);
        const __m512i s2 = mbqm8(_mm512_sll_epi64(y, shift_in), t[1], left);
        const __m512i sum = c->kind == NPU_BINARY16_SUB ? _mm512_sub_epi64(s1, s2) : _mm512_add_epi64(s1, s2);
        raw = mbqm8(_mm512_srai_epi64(_mm512_slli_epi64(sum, 32), 32), t[2], left);
    } else if (c->kind == NPU_BINARY16_MUL) {
        raw = mbqm8(_mm512_mul_epi32(x, y), t[0], left);
    } else {
        const __m512i pos = mbqm8(x, t[0], left), neg = mbqm8(_mm512_mul_epi32(x, y), t[1], left);
        raw = _mm512_mask_blend_epi64(_mm512_cmplt_epi64_mask(x, _mm512_setzero_si512()), pos, neg);
    }
    const __m256i q = _mm256_min_epi32(_mm256_max_epi32(_mm512_cvtepi64_epi32(raw), _mm256_set1_epi32(c->act_min)),
                                       _mm256_set1_epi32(c->act_max));
    _mm_mask_storeu_epi16(o, k, _mm256_cvtepi32_epi16(q));
}

/* One requantization for every element: n elements of a (stride as, 0 or 1) and b (bs). */
static void binary16_lanes(const struct npu_binary16_call *c, const int16_t *a, int64_t as, const int16_t *b,
                           int64_t bs, int16_t *o, int64_t n, const int64_t *terms, int left)
{
    __m512i t[3][TERMS];
    terms8(terms, 1, binary16_columns(c->kind) / 2, 0, 0, 0xFF, t);
    for (int64_t i = 0; i < n; i += 8) {
        const __mmask8 k = n - i >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << (n - i)) - 1);
        binary16_store8(c, load16x8(a + i * as, as, k), load16x8(b + i * bs, bs, k), t, left, k, o + i);
    }
}

/* `rows` whole pixels (the output's rows of c->channels values, one after the other) of a
   (rows a_row apart, channels as apart: 0 or 1) and b: 8 channels at a time, their terms
   loaded once for every row. */
static void binary16_pixels(const struct npu_binary16_call *c, const int16_t *a, int64_t a_row, int64_t as,
                            const int16_t *b, int64_t b_row, int64_t bs, int16_t *o, int64_t rows,
                            const int64_t *terms, int left)
{
    const int64_t channels = c->channels;
    for (int64_t c0 = 0; c0 < channels; c0 += 8) {
        const __mmask8 k = channels - c0 >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << (channels - c0)) - 1);
        __m512i t[3][TERMS];
        terms8(terms, channels, binary16_columns(c->kind) / 2, c0, 1, k, t);
        for (int64_t r = 0; r < rows; r++)
            binary16_store8(c, load16x8(a + r * a_row + c0 * as, as, k), load16x8(b + r * b_row + c0 * bs, bs, k), t,
                            left, k, o + r * channels + c0);
    }
}
#endif

/* MAXIMUM / MINIMUM of two values (one shared grid: compared as they are). */
#define PICK(x, y) (max ? ((x) > (y) ? (x) : (y)) : ((x) < (y) ? (x) : (y)))

/* n elements of MAXIMUM (max) or MINIMUM of a and b (strides as, bs): contiguous operands and
   one broadcast value get loops of their own, which the compiler vectorizes. */
static void extreme16(const int16_t *a, int64_t as, const int16_t *b, int64_t bs,
                      int16_t *o, int64_t n, int max)
{
    if (as == 1 && bs == 1) {
        for (int64_t i = 0; i < n; i++)
            o[i] = PICK(a[i], b[i]);
    } else if (as == 1 && bs == 0) {
        const int16_t v = b[0];
        for (int64_t i = 0; i < n; i++)
            o[i] = PICK(a[i], v);
    } else if (as == 0 && bs == 1) {
        const int16_t v = a[0];
        for (int64_t i = 0; i < n; i++)
            o[i] = PICK(v, b[i]);
    } else {
        for (int64_t i = 0; i < n; i++)
            o[i] = PICK(a[i * as], b[i * bs]);
    }
}

/* The last axis: n elements, the first of output channel ch; terms: binary16_prepare's, or
   NULL for the scalar loop. */
static void binary16_run(const int16_t *a, int64_t as, const int16_t *b, int64_t bs, int16_t *o, int64_t n,
                         int64_t ch, const struct npu_binary16_call *c, const int64_t *terms, int left)
{
    const int64_t channels = c->channels;
    if (c->kind == NPU_BINARY16_MAXIMUM || c->kind == NPU_BINARY16_MINIMUM) {
        extreme16(a, as, b, bs, o, n, c->kind == NPU_BINARY16_MAXIMUM);
        return;
    }
#if INT16_LANES
    if (terms && (as == 0 || as == 1) && (bs == 0 || bs == 1)) {
        if (channels == 1) {
            binary16_lanes(c, a, as, b, bs, o, n, terms, left);
            return;
        }
        if (ch == 0 && n % channels == 0) {         /* whole pixels */
            binary16_pixels(c, a, channels * as, as, b, channels * bs, bs, o, n / channels, terms, left);
            return;
        }
    }
#else
    (void)terms;
    (void)left;
#endif
    const int cols_per_row = binary16_columns(c->kind);
    for (int64_t i = 0; i < n; i++) {
        const int32_t r = (int32_t)(uint32_t)(uint64_t)binary16_one(c->kind, a[i * as], b[i * bs],
                                                                    c->params + ch * cols_per_row, c->left_shift);
        o[i] = (int16_t)(r < c->act_min ? c->act_min : r > c->act_max ? c->act_max : r);
        if (++ch == channels)
            ch = 0;
    }
}

static void binary16_axis(const int16_t *a, const int16_t *b, int16_t *o, const struct npu_binary16_call *c,
                          const int64_t *out_block, int d, const int64_t *terms, int left)
{
    const int64_t n = c->shape[d], as = c->a_stride[d], bs = c->b_stride[d];
    if (d >= c->rank - 1 || d >= NPU_MOVE_MAX_RANK - 1) {   /* the last axis (a bound GCC can see) */
        binary16_run(a, as, b, bs, o, n, (o - c->out) % c->channels, c, terms, left);
        return;
    }
#if INT16_LANES
    /* pixels over the channels, one operand broadcast along one of the two axes (PRELU's slopes) */
    const int64_t last = c->shape[d + 1], as1 = c->a_stride[d + 1], bs1 = c->b_stride[d + 1];
    if (terms && d == c->rank - 2 && c->channels > 1 && last == c->channels && (as1 == 0 || as1 == 1)
            && (bs1 == 0 || bs1 == 1)) {
        binary16_pixels(c, a, as, as1, b, bs, bs1, o, n, terms, left);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++)
        binary16_axis(a + i * as, b + i * bs, o + i * out_block[d], c, out_block, d + 1, terms, left);
}

/* int16 ADD, SUB, MUL or PRELU (zero points 0) over broadcast operands, requantized per output
   channel (params row channel % channels: binary16_columns), as kernels/int16x8.py's add_int16,
   sub_int16 and mul_int16 and kernels/binary.py's int16 prelu; MAXIMUM and MINIMUM (no
   parameters) as kernels/binary.py's. */
int npu_binary16(const struct npu_binary16_call *c)
{
    if (c->rank < 1 || c->rank > NPU_MOVE_MAX_RANK || c->channels < 1
            || c->kind < NPU_BINARY16_ADD || c->kind > NPU_BINARY16_SUB)
        return NPU_KERNEL_BAD_STEP;
    const int add = binary16_add_like(c->kind), cols = binary16_columns(c->kind);
    if (add && (c->left_shift < 0 || c->left_shift > 16))
        return NPU_KERNEL_BAD_SHIFT;
    for (int64_t ch = 0; ch < c->channels; ch++) {
        const int32_t *p = c->params + ch * cols;
        for (int k = 0; k < cols; k += 2) {
            const int32_t m = p[k], s = p[k + 1];
            if (add ? (m < 0 || s > 0 || s < -31) : (s < -31 || s > 30))
                return NPU_KERNEL_BAD_SHIFT;
        }
    }
    int64_t out_block[NPU_MOVE_MAX_RANK], size = 1;
    for (int d = c->rank - 1; d >= 0; d--) {
        out_block[d] = size;
        size *= c->shape[d];
    }
    int left = 0;
#if INT16_LANES
    int64_t *terms = cols ? binary16_prepare(c, &left) : NULL;
#else
    int64_t *terms = NULL;
#endif
    binary16_axis(c->a, c->b, c->out, c, out_block, 0, terms, left);
    free(terms);
    return 0;
}
