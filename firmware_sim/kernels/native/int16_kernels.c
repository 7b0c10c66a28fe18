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
#include "int16_common.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

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

/* Convolution (grouped), NHWC: x (n, h, w, cin); filter (cout, kh, kw, cin / groups). */
int npu_conv16x8(const struct npu_conv16_call *c)
{
    const int32_t cout = c->cout;
    int status = check_requant16(c->mult, c->shift, c->per_channel ? cout : 1);
    if (status)
        return status;
    const int32_t groups = c->groups, cin_g = c->cin / groups, cout_g = cout / groups;
    const int64_t k = (int64_t)c->kh * c->kw * cin_g;
    /* The filter as int16 pairs, per group (int16x16_kernels.c's pixel loop). */
    int16_t *row = malloc(sizeof(int16_t) * (size_t)(k + 1));
    int64_t *sums = malloc(sizeof(int64_t) * (size_t)(cout_g > 0 ? cout_g : 1));
    /* Packing costs about one pixel's multiply-adds: a layer of a few pixels (a classifier's
       1x1 head) takes one dot product per output channel instead. */
    const int packing = (int64_t)c->n * c->out_h * c->out_w >= PACK_MIN_PIXELS;
    int16_t *packed = row && sums && packing ? npu_pack_groups(c->filter, 0, groups, cout_g, k) : NULL;
    const int64_t packed_size = npu_packed_pairs_size(cout_g, k);
    if (!row || !sums || (packing && !packed)) {
        free(row);
        free(sums);
        return NPU_KERNEL_NO_MEMORY;
    }
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
                    if (packed)
                        npu_row_times_filter(row, k, packed + g * packed_size, cout_g, 0, sums);
                    else
                        for (int32_t q = 0; q < cout_g; q++)
                            sums[q] = dot16x8(row, c->filter + (int64_t)(g * cout_g + q) * k, k);
                    npu_finish16(sums, cout_g, g * cout_g, c->bias, 0, c->mult, c->shift, c->per_channel,
                                 c->act_min, c->act_max, o + g * cout_g);
                }
            }
    free(packed);
    free(row);
    free(sums);
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
                    acc[oc] = 0;            /* the bias is added at the end (a wrapping sum: same total) */
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
                for (int32_t oc = 0; oc < cout; oc++)
                    acc[oc] += part[oc];
                npu_finish16(acc, cout, 0, c->bias, 0, c->mult, c->shift, c->per_channel, c->act_min, c->act_max, o);
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

/* gemmlowp's MultiplyByQuantizedMultiplier on an int32 value x (kernels/fixedpoint.py). */
static inline int64_t mbqm(int64_t x, int64_t m, int32_t s)
{
    if (s > 0)
        x = (int32_t)(uint32_t)((uint64_t)x << s);
    int64_t v = (x == INT32_MIN && m == INT32_MIN) ? INT32_MAX : (x * m + (INT64_C(1) << 30)) >> 31;
    const int e = s > 0 ? 0 : -s;
    int64_t r = v + ((INT64_C(1) << e) >> 1);
    if (e > 0)
        r -= v < 0;
    return r >> e;
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)
/* A per-tensor int16 MUL over contiguous operands, 8 lanes of mbqm's int64 arithmetic at a
   time (the products, |a * b| <= 2**30, are exact in vpmuldq, as is x * m); returns how many
   elements it wrote (a multiple of 8: the scalar loop does the rest). */
static int64_t mul16_lanes(const int16_t *a, const int16_t *b, int16_t *o, int64_t n, int32_t m, int32_t s,
                           int32_t act_min, int32_t act_max)
{
    const int e = s > 0 ? 0 : -s;
    const __m512i vm = _mm512_set1_epi64(m), nudge = _mm512_set1_epi64(INT64_C(1) << 30);
    const __m512i round = _mm512_set1_epi64((INT64_C(1) << e) >> 1), int_min = _mm512_set1_epi64(INT32_MIN);
    const __m256i lo = _mm256_set1_epi32(act_min), hi = _mm256_set1_epi32(act_max);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m512i x = _mm512_mul_epi32(_mm512_cvtepi16_epi64(_mm_loadu_si128((const __m128i *)(a + i))),
                                     _mm512_cvtepi16_epi64(_mm_loadu_si128((const __m128i *)(b + i))));
        if (s > 0)          /* (int32_t)(x << s): shifted, then the low 32 bits sign-extended */
            x = _mm512_srai_epi64(_mm512_slli_epi64(_mm512_sll_epi64(x, _mm_cvtsi32_si128(s)), 32), 32);
        __m512i v = _mm512_srai_epi64(_mm512_add_epi64(_mm512_mul_epi32(x, vm), nudge), 31);
        if (m == INT32_MIN)
            v = _mm512_mask_mov_epi64(v, _mm512_cmpeq_epi64_mask(x, int_min), _mm512_set1_epi64(INT32_MAX));
        __m512i r = _mm512_add_epi64(v, round);
        if (e > 0)          /* r -= v < 0 */
            r = _mm512_add_epi64(r, _mm512_srai_epi64(v, 63));
        r = _mm512_sra_epi64(r, _mm_cvtsi32_si128(e));
        const __m256i q = _mm256_min_epi32(_mm256_max_epi32(_mm512_cvtepi64_epi32(r), lo), hi);
        _mm_storeu_si128((__m128i *)(o + i), _mm256_cvtepi32_epi16(q));
    }
    return i;
}
#endif

static void binary16_axis(const int16_t *a, const int16_t *b, int16_t *o, const struct npu_binary16_call *c,
                          const int64_t *out_block, int d)
{
    const int64_t n = c->shape[d], as = c->a_stride[d], bs = c->b_stride[d];
    if (d >= c->rank - 1 || d >= NPU_MOVE_MAX_RANK - 1) {   /* the last axis (a bound GCC can see) */
        const int64_t at = o - c->out;
        int64_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)
        if (c->kind == NPU_BINARY16_MUL && c->channels == 1 && as == 1 && bs == 1)
            i = mul16_lanes(a, b, o, n, c->params[0], c->params[1], c->act_min, c->act_max);
#endif
        for (; i < n; i++) {
            const int32_t *p = c->params + ((at + i) % c->channels) * (c->kind == NPU_BINARY16_ADD ? 6 : 2);
            const int64_t x = a[i * as], y = b[i * bs];
            int64_t raw;
            if (c->kind == NPU_BINARY16_ADD) {
                const int64_t s1 = mbqm(x << c->left_shift, p[0], p[1]);
                const int64_t s2 = mbqm(y << c->left_shift, p[2], p[3]);
                raw = mbqm((int32_t)(uint32_t)(uint64_t)(s1 + s2), p[4], p[5]);
            } else {
                raw = mbqm(x * y, p[0], p[1]);
            }
            int32_t r = (int32_t)(uint32_t)(uint64_t)raw;
            o[i] = (int16_t)(r < c->act_min ? c->act_min : r > c->act_max ? c->act_max : r);
        }
        return;
    }
    for (int64_t i = 0; i < n; i++)
        binary16_axis(a + i * as, b + i * bs, o + i * out_block[d], c, out_block, d + 1);
}

/* int16 ADD or MUL (zero points 0) over broadcast operands, requantized per output channel
   (params row channel % channels: ADD m1, s1, m2, s2, mo, so; MUL m, s), as
   kernels/int16x8.py's add_int16 and mul_int16. */
int npu_binary16(const struct npu_binary16_call *c)
{
    if (c->rank < 1 || c->rank > NPU_MOVE_MAX_RANK || c->channels < 1)
        return NPU_KERNEL_BAD_STEP;
    const int add = c->kind == NPU_BINARY16_ADD, cols = add ? 6 : 2;
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
    binary16_axis(c->a, c->b, c->out, c, out_block, 0);
    return 0;
}
