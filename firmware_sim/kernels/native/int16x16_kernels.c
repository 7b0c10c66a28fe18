/*
 * int16 x int16 convolution, depthwise convolution and fully connected (our formula,
 * kernels/int16x16.py: int16 activations and weights, zero points 0, int64 biases), and
 * int16 average and max pooling (kernels/pooling.py), int16 QUANTIZE and DEQUANTIZE
 * (kernels/int16x8.py) and int16 BATCH_MATMUL (kernels/matmul.py), which ran in numpy alone.
 *
 * Sums are exact: a product is below 2**30 in magnitude, a pair of them (vpmaddwd) below
 * 2**31, and they add up in int64. The bias, clipped to +-2**62, is added and the sum
 * saturated to +-2**47 (the range TFLite's int64 MultiplyByQuantizedMultiplier assumes),
 * then requantized as the 16x8 kernels do. Every array is C-contiguous; the Python side
 * checks shapes and parameters (native/int16_calls.py).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "int8_kernels.h"
#include "int16_common.h"

#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#endif

#define ACC_LIMIT (INT64_C(1) << 47)
#define BIAS_LIMIT (INT64_C(1) << 62)

/* Exact sum of a[i] * b[i], i < n. */
static int64_t dot16x16(const int16_t *restrict a, const int16_t *restrict b, int64_t n)
{
    int64_t total = 0, i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
    __m512i sum = _mm512_setzero_si512();
    for (; i < n; i += 32) {
        const __mmask32 k = n - i >= 32 ? ~(__mmask32)0 : ((__mmask32)1 << (n - i)) - 1;
        const __m512i pairs = _mm512_madd_epi16(_mm512_maskz_loadu_epi16(k, a + i),
                                                _mm512_maskz_loadu_epi16(k, b + i));
        sum = _mm512_add_epi64(sum, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(pairs)));
        sum = _mm512_add_epi64(sum, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(pairs, 1)));
    }
    total = _mm512_reduce_add_epi64(sum);
#endif
    for (; i < n; i++)
        total += (int32_t)a[i] * (int32_t)b[i];
    return total;
}

int64_t npu_packed_pairs_size(int32_t cout, int64_t k)
{
    return (k + 1) / 2 * (((int64_t)cout + 15) / 16 * 16) * 2;
}

void npu_pack_pairs(const void *filter, int wide, int32_t cout, int64_t k, int16_t *packed)
{
    const int64_t cout16 = ((int64_t)cout + 15) / 16 * 16;
    memset(packed, 0, sizeof(int16_t) * (size_t)npu_packed_pairs_size(cout, k));
    for (int32_t o = 0; o < cout; o++)
        for (int64_t i = 0; i < k; i++)
            packed[(i / 2 * cout16 + o) * 2 + (i & 1)] =
                wide ? ((const int16_t *)filter)[(int64_t)o * k + i] : ((const int8_t *)filter)[(int64_t)o * k + i];
}

#if INT16_LANES
/* t[j] = column j of the 16 x 16 matrix of int32 whose rows are r[0..15]. */
static void transpose16x16_epi32(const __m512i *r, __m512i *t)
{
    __m512i a[16], b[16];
    for (int i = 0; i < 8; i++) {
        a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {   /* b[4i + j], 128-bit lane L: rows 4i.. 4i + 3 of column 4L + j */
        b[4 * i] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
        b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
    }
    for (int j = 0; j < 4; j++) {
        const __m512i u = _mm512_shuffle_i32x4(b[j], b[4 + j], 0x88), v = _mm512_shuffle_i32x4(b[j], b[4 + j], 0xDD);
        const __m512i w = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0x88), x = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0xDD);
        t[j] = _mm512_shuffle_i32x4(u, w, 0x88);
        t[8 + j] = _mm512_shuffle_i32x4(u, w, 0xDD);
        t[4 + j] = _mm512_shuffle_i32x4(v, x, 0x88);
        t[12 + j] = _mm512_shuffle_i32x4(v, x, 0xDD);
    }
}
#endif

void npu_pack_split(const int16_t *filter, int32_t cout, int64_t k, int16_t *hi, int16_t *lo)
{
    const int64_t cout16 = ((int64_t)cout + 15) / 16 * 16;
#if INT16_LANES
    /* 16 output channels x 16 pairs at a time: the rows' pairs split, then transposed as int32
       (a pair stays whole), every packed element written (zeros past k and cout) */
    const int64_t k2 = (k + 1) / 2;
    const __m512i low_byte = _mm512_set1_epi16(0xFF);
    for (int64_t o0 = 0; o0 < cout16; o0 += 16)
        for (int64_t kk0 = 0; kk0 < k2; kk0 += 16) {
            const int64_t left = k - 2 * kk0;
            const __mmask32 m = left >= 32 ? ~(__mmask32)0 : ((__mmask32)1 << left) - 1;
            __m512i rh[16], rl[16], t[16];
            for (int r = 0; r < 16; r++) {
                const __m512i v = o0 + r < cout ? _mm512_maskz_loadu_epi16(m, filter + (o0 + r) * k + 2 * kk0)
                                                : _mm512_setzero_si512();
                rh[r] = _mm512_srai_epi16(v, 8);
                rl[r] = _mm512_and_si512(v, low_byte);
            }
            const int64_t pairs = k2 - kk0 < 16 ? k2 - kk0 : 16;
            transpose16x16_epi32(rh, t);
            for (int64_t j = 0; j < pairs; j++)
                _mm512_store_si512(hi + ((kk0 + j) * cout16 + o0) * 2, t[j]);
            transpose16x16_epi32(rl, t);
            for (int64_t j = 0; j < pairs; j++)
                _mm512_store_si512(lo + ((kk0 + j) * cout16 + o0) * 2, t[j]);
        }
#else
    const int64_t size = npu_packed_pairs_size(cout, k);
    memset(hi, 0, sizeof(int16_t) * (size_t)size);
    memset(lo, 0, sizeof(int16_t) * (size_t)size);
    for (int32_t o = 0; o < cout; o++) {
        const int16_t *row = filter + (int64_t)o * k;
        for (int64_t i = 0; i < k; i++) {
            const int64_t at = (i / 2 * cout16 + o) * 2 + (i & 1);
            hi[at] = (int16_t)(row[i] >> 8);    /* arithmetic shift: floor(w / 256) */
            lo[at] = (int16_t)(row[i] & 0xFF);
        }
    }
#endif
}

int16_t *npu_pack_groups(const void *filter, int wide, int32_t groups, int32_t cout_g, int64_t k)
{
    const int64_t size = npu_packed_pairs_size(cout_g, k), elem = wide ? 2 : 1;
    int16_t *packed = aligned_alloc(64, sizeof(int16_t) * (size_t)(size * groups > 0 ? size * groups : 32));
    if (!packed)
        return NULL;
    for (int32_t g = 0; g < groups; g++)
        npu_pack_pairs((const char *)filter + (int64_t)g * cout_g * k * elem, wide, cout_g, k, packed + g * size);
    return packed;
}

/* Pairs of products add up in int32 lanes (vpmaddwd): with int8 weights a pair is at most
   2**23, so 128 pairs fit before they go into the int64 sums; with int16 weights a pair is
   below 2**31 and goes at once. */
#define NARROW_PAIRS 128

void npu_row_times_filter(int16_t *row, int64_t k, const int16_t *packed, int32_t cout, int wide,
                          int64_t *acc)
{
    const int64_t cout16 = ((int64_t)cout + 15) / 16 * 16, k2 = (k + 1) / 2;
    if (k & 1)
        row[k] = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
    for (int32_t o0 = 0; o0 < cout; o0 += 16) {
        __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512(), part = _mm512_setzero_si512();
        const int16_t *f = packed + (int64_t)o0 * 2;
        for (int64_t kk = 0, run = 0; kk < k2; kk++, f += cout16 * 2) {
            int32_t pair;                       /* row[2kk] and row[2kk + 1], as vpmaddwd pairs them */
            memcpy(&pair, row + 2 * kk, sizeof(pair));
            const __m512i prod = _mm512_madd_epi16(_mm512_set1_epi32(pair), _mm512_load_si512(f));
            if (!wide && ++run < NARROW_PAIRS && kk + 1 < k2) {
                part = _mm512_add_epi32(part, prod);
                continue;
            }
            part = _mm512_add_epi32(part, prod);
            lo = _mm512_add_epi64(lo, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(part)));
            hi = _mm512_add_epi64(hi, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(part, 1)));
            part = _mm512_setzero_si512();
            run = 0;
        }
        int64_t sums[16];
        _mm512_storeu_si512(sums, lo);
        _mm512_storeu_si512(sums + 8, hi);
        memcpy(acc + o0, sums, sizeof(int64_t) * (size_t)(cout - o0 < 16 ? cout - o0 : 16));
    }
#else
    for (int32_t o = 0; o < cout; o++) {
        int64_t total = 0;
        for (int64_t kk = 0; kk < k2; kk++) {
            const int16_t *f = packed + (kk * cout16 + o) * 2;
            total += (int64_t)row[2 * kk] * f[0] + (int64_t)row[2 * kk + 1] * f[1];
        }
        acc[o] = total;
    }
#endif
}

/* The sum plus the bias, saturated: the accumulator int16x16.saturate_accumulator makes. */
static inline int64_t saturate(int64_t sum, const int64_t *bias, int32_t oc)
{
    if (bias) {
        const int64_t b = bias[oc] < -BIAS_LIMIT ? -BIAS_LIMIT : bias[oc] > BIAS_LIMIT ? BIAS_LIMIT : bias[oc];
        sum += b;                        /* |sum| < 2**53: no wrap */
    }
    return sum < -ACC_LIMIT ? -ACC_LIMIT : sum > ACC_LIMIT - 1 ? ACC_LIMIT - 1 : sum;
}

void npu_finish16(const int64_t *sums, int32_t n, int32_t c0, const int64_t *bias, int saturate_sums,
                  const int32_t *mult, const int32_t *shift, int32_t per_channel, int32_t lo, int32_t hi,
                  int16_t *out)
{
    int32_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)
    /* requant16's arithmetic 8 lanes at a time: the int64 product wraps as the scalar
       (uint64_t) one does, vpsravq shifts each lane by its own total, vpmovqd keeps the
       low 32 bits as the scalar (int32_t) cast does. */
    const __m512i bias_lo = _mm512_set1_epi64(-BIAS_LIMIT), bias_hi = _mm512_set1_epi64(BIAS_LIMIT);
    const __m512i acc_lo = _mm512_set1_epi64(-ACC_LIMIT), acc_hi = _mm512_set1_epi64(ACC_LIMIT - 1);
    const __m512i one = _mm512_set1_epi64(1), fifteen = _mm512_set1_epi64(15);
    const __m512i big = _mm512_set1_epi64(0x7FFF0000), q15_max = _mm512_set1_epi64(0x7FFF);
    const __m512i half = _mm512_set1_epi64(1 << 15);
    const __m256i clamp_lo = _mm256_set1_epi32(lo), clamp_hi = _mm256_set1_epi32(hi);
    for (; i < n; i += 8) {
        const __mmask8 k = n - i >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << (n - i)) - 1);
        __m512i acc = _mm512_maskz_loadu_epi64(k, sums + i);
        if (bias) {
            __m512i b = _mm512_maskz_loadu_epi64(k, bias + c0 + i);
            if (saturate_sums)
                b = _mm512_min_epi64(_mm512_max_epi64(b, bias_lo), bias_hi);
            acc = _mm512_add_epi64(acc, b);
        }
        if (saturate_sums)
            acc = _mm512_min_epi64(_mm512_max_epi64(acc, acc_lo), acc_hi);
        const __m512i m = per_channel ? _mm512_cvtepi32_epi64(_mm256_maskz_loadu_epi32(k, mult + c0 + i))
                                      : _mm512_set1_epi64(mult[0]);
        const __m512i s = per_channel ? _mm512_cvtepi32_epi64(_mm256_maskz_loadu_epi32(k, shift + c0 + i))
                                      : _mm512_set1_epi64(shift[0]);
        const __m512i reduced = _mm512_mask_blend_epi64(_mm512_cmplt_epi64_mask(m, big), q15_max,
                                                        _mm512_srai_epi64(_mm512_add_epi64(m, half), 16));
        const __m512i total = _mm512_sub_epi64(fifteen, s);
        const __m512i v = _mm512_srav_epi64(_mm512_add_epi64(_mm512_mullo_epi64(acc, reduced),
                                                             _mm512_sllv_epi64(one, _mm512_sub_epi64(total, one))),
                                            total);
        const __m256i r = _mm256_min_epi32(_mm256_max_epi32(_mm512_cvtepi64_epi32(v), clamp_lo), clamp_hi);
        _mm_mask_storeu_epi16(out + i, k, _mm256_cvtepi32_epi16(r));
    }
#endif
    for (; i < n; i++) {
        const int32_t oc = c0 + i, p = per_channel ? oc : 0;
        int64_t acc = sums[i];
        if (saturate_sums)
            acc = saturate(acc, bias, oc);
        else if (bias)
            acc = (int64_t)((uint64_t)acc + (uint64_t)bias[oc]);
        out[i] = requant16(acc, mult[p], shift[p], lo, hi);
    }
}

static int check_weights(const int16_t *w, int64_t n)
{
    int bad = 0;                        /* no early exit: the loop vectorizes */
    for (int64_t i = 0; i < n; i++)
        bad |= w[i] == INT16_MIN;
    return bad ? NPU_KERNEL_BAD_WEIGHT : 0;
}

#if INT16_LANES
/* The call's geometry as the 16x8 kernels' call (int16_kernels.c), whose lanes run the 16x16
   arithmetic from a split filter they are handed: no filter of its own. */
static struct npu_conv16_call as_conv16(const struct npu_conv16x16_call *c)
{
    return (struct npu_conv16_call){
        .x = c->x, .n = c->n, .h = c->h, .w = c->w, .cin = c->cin, .filter = NULL, .cout = c->cout, .kh = c->kh,
        .kw = c->kw, .groups = c->groups, .depth_multiplier = c->depth_multiplier, .bias = c->bias,
        .stride_h = c->stride_h, .stride_w = c->stride_w, .dil_h = c->dil_h, .dil_w = c->dil_w,
        .pad_top = c->pad_top, .pad_left = c->pad_left, .out_h = c->out_h, .out_w = c->out_w, .mult = c->mult,
        .shift = c->shift, .per_channel = c->per_channel, .act_min = c->act_min, .act_max = c->act_max, .out = c->out};
}

/* One group's convolution of at least PACK_MIN_PIXELS pixels in npu_conv16x16_tiles's lanes. */
static int conv16x16_split(const struct npu_conv16x16_call *c, int64_t k)
{
    const int64_t size = npu_packed_pairs_size(c->cout, k);
    int16_t *hi = aligned_alloc(64, sizeof(int16_t) * (size_t)(2 * size));
    if (!hi)
        return NPU_KERNEL_NO_MEMORY;
    npu_pack_split(c->filter, c->cout, k, hi, hi + size);
    const struct npu_conv16_call view = as_conv16(c);
    const int status = npu_conv16x16_tiles(&view, k, hi, hi + size);
    free(hi);
    return status;
}
#endif

/* Convolution (grouped), NHWC: x (n, h, w, cin); filter (cout, kh, kw, cin / groups). */
int npu_conv16x16(const struct npu_conv16x16_call *c)
{
    const int32_t cout = c->cout, groups = c->groups, cin_g = c->cin / groups, cout_g = cout / groups;
    const int64_t k = (int64_t)c->kh * c->kw * cin_g;
    int status = check_requant16(c->mult, c->shift, c->per_channel ? cout : 1);
    if (!status)
        status = check_weights(c->filter, (int64_t)cout * k);
    if (status)
        return status;
    /* Packing costs about one pixel's multiply-adds: a layer of a few pixels (a classifier's
       1x1 head) takes one dot product per output channel instead. */
    const int packing = (int64_t)c->n * c->out_h * c->out_w >= PACK_MIN_PIXELS;
#if INT16_LANES
    if (packing && groups == 1)
        return conv16x16_split(c, k);
#endif
    int16_t *row = malloc(sizeof(int16_t) * (size_t)(k + 1));
    int64_t *sums = malloc(sizeof(int64_t) * (size_t)(cout_g > 0 ? cout_g : 1));
    int16_t *packed = row && sums && packing ? npu_pack_groups(c->filter, 1, groups, cout_g, k) : NULL;
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
                        npu_row_times_filter(row, k, packed + g * packed_size, cout_g, 1, sums);
                    else
                        for (int32_t q = 0; q < cout_g; q++)
                            sums[q] = dot16x16(row, c->filter + (int64_t)(g * cout_g + q) * k, k);
                    npu_finish16(sums, cout_g, g * cout_g, c->bias, 1, c->mult, c->shift, c->per_channel,
                                 c->act_min, c->act_max, o + g * cout_g);
                }
            }
    free(packed);
    free(row);
    free(sums);
    return 0;
}

/* Depthwise convolution, NHWC: filter (kh, kw, cout), output channel oc reading input
   channel oc / depth_multiplier; taps outside the image skipped (zero point 0). */
int npu_depthwise16x16(const struct npu_conv16x16_call *c)
{
    const int32_t cout = c->cout, dm = c->depth_multiplier;
    int status = check_requant16(c->mult, c->shift, c->per_channel ? cout : 1);
    if (!status)
        status = check_weights(c->filter, (int64_t)c->kh * c->kw * cout);
    if (status)
        return status;
#if INT16_LANES
    if (dm == 1 && (int64_t)c->kh * c->kw <= 256) {
        const struct npu_conv16_call view = as_conv16(c);
        return npu_depthwise16x16_lanes(&view, c->filter);
    }
#endif
    int64_t *acc = malloc(sizeof(int64_t) * (size_t)(cout > 0 ? cout : 1));
    if (!acc)
        return NPU_KERNEL_NO_MEMORY;
    for (int32_t b = 0; b < c->n; b++)
        for (int32_t oy = 0; oy < c->out_h; oy++)
            for (int32_t ox = 0; ox < c->out_w; ox++) {
                memset(acc, 0, sizeof(int64_t) * (size_t)cout);
                for (int32_t fy = 0; fy < c->kh; fy++) {
                    const int32_t iy = oy * c->stride_h - c->pad_top + fy * c->dil_h;
                    if (iy < 0 || iy >= c->h)
                        continue;
                    for (int32_t fx = 0; fx < c->kw; fx++) {
                        const int32_t ix = ox * c->stride_w - c->pad_left + fx * c->dil_w;
                        if (ix < 0 || ix >= c->w)
                            continue;
                        const int16_t *restrict xp = c->x + (((int64_t)b * c->h + iy) * c->w + ix) * c->cin;
                        const int16_t *restrict fp = c->filter + ((int64_t)fy * c->kw + fx) * cout;
                        if (dm == 1) {
                            for (int32_t oc = 0; oc < cout; oc++)
                                acc[oc] += (int32_t)xp[oc] * (int32_t)fp[oc];
                        } else {
                            for (int32_t oc = 0; oc < cout; oc++)
                                acc[oc] += (int32_t)xp[oc / dm] * (int32_t)fp[oc];
                        }
                    }
                }
                int16_t *o = c->out + (((int64_t)b * c->out_h + oy) * c->out_w + ox) * cout;
                npu_finish16(acc, cout, 0, c->bias, 1, c->mult, c->shift, c->per_channel, c->act_min, c->act_max, o);
            }
    free(acc);
    return 0;
}

/* Fully connected: x (rows, k), w (n, k), requantized (int32)round(acc * scale) in double
   (scale per output or one; out of int32's range: INT32_MIN), as kernels/int16x16.py. */
int npu_fully_connected16x16(const struct npu_fc16x16_call *c)
{
    const int status = check_weights(c->w, (int64_t)c->n * c->k);
    if (status)
        return status;
    for (int32_t r = 0; r < c->rows; r++)
        for (int32_t o = 0; o < c->n; o++) {
            const int64_t acc = saturate(dot16x16(c->x + (int64_t)r * c->k, c->w + (int64_t)o * c->k, c->k),
                                         c->bias, o);
            const double v = round((double)acc * c->scale[c->per_channel ? o : 0]);
            int32_t q = !(v >= -2147483648.0 && v <= 2147483647.0) ? INT32_MIN : (int32_t)v;
            q = q < c->act_min ? c->act_min : q > c->act_max ? c->act_max : q;
            c->out[(int64_t)r * c->n + o] = (int16_t)q;
        }
    return 0;
}

/* Average (rounded half away from zero over the in-image part of the window, as
   npu_avg_pool_s8) or max pooling of int16 NHWC, clamped to [act_min, act_max]. Returns
   NPU_KERNEL_EMPTY_WINDOW if a window misses the image. */
#if INT16_LANES
/* One output pixel's channels of npu_pool16 over the in-image window rows y0.. y1, columns
   x0.. x1, 16 channels at a time in int32 lanes (a window of fewer than 2**16 taps: its int16
   sum fits). The average's rounded division in double: num / count truncated is exact for
   |num| < 2**31 (a quotient short of an integer by at least 1 / count stays short of it). */
static void pool16_pixel(const struct npu_pool16_call *c, int32_t max, const int16_t *x, int32_t y0, int32_t y1,
                         int32_t x0, int32_t x1, int16_t *op)
{
    const int32_t ch = c->c, count = (y1 - y0) * (x1 - x0);
    const __m512i half = _mm512_set1_epi32(count / 2);
    const __m512d divisor = _mm512_set1_pd((double)count);
    for (int32_t c0 = 0; c0 < ch; c0 += 16) {
        const __mmask16 k = ch - c0 >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (ch - c0)) - 1);
        __m512i acc = max ? _mm512_set1_epi32(INT16_MIN) : _mm512_setzero_si512();
        for (int32_t iy = y0; iy < y1; iy++)
            for (int32_t ix = x0; ix < x1; ix++) {
                const __m512i v = _mm512_cvtepi16_epi32(_mm256_maskz_loadu_epi16(k, x + ((int64_t)iy * c->w + ix) * ch + c0));
                acc = max ? _mm512_max_epi32(acc, v) : _mm512_add_epi32(acc, v);
            }
        if (!max) {             /* num = v > 0 ? v + count / 2 : v - count / 2, then num / count */
            const __m512i num = _mm512_mask_sub_epi32(_mm512_add_epi32(acc, half),
                                                      _mm512_cmple_epi32_mask(acc, _mm512_setzero_si512()),
                                                      acc, half);
            const __m512d q0 = _mm512_div_pd(_mm512_cvtepi32_pd(_mm512_castsi512_si256(num)), divisor);
            const __m512d q1 = _mm512_div_pd(_mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(num, 1)), divisor);
            acc = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvttpd_epi32(q0)), _mm512_cvttpd_epi32(q1), 1);
        }
        acc = _mm512_min_epi32(_mm512_max_epi32(acc, _mm512_set1_epi32(c->act_min)), _mm512_set1_epi32(c->act_max));
        _mm256_mask_storeu_epi16(op + c0, k, _mm512_cvtepi32_epi16(acc));
    }
}
#endif

int npu_pool16(const struct npu_pool16_call *c, int32_t max)
{
    const int32_t ch = c->c;
    int64_t *acc = malloc(sizeof(int64_t) * (size_t)(ch > 0 ? ch : 1));
    if (!acc)
        return NPU_KERNEL_NO_MEMORY;
    for (int32_t b = 0; b < c->n; b++)
        for (int32_t oy = 0; oy < c->oh; oy++) {
            int32_t y0 = oy * c->sh - c->pt, y1 = y0 + c->fh;
            y0 = y0 < 0 ? 0 : y0;
            y1 = y1 > c->h ? c->h : y1;
            for (int32_t ox = 0; ox < c->ow; ox++) {
                int32_t x0 = ox * c->sw - c->pl, x1 = x0 + c->fw;
                x0 = x0 < 0 ? 0 : x0;
                x1 = x1 > c->w ? c->w : x1;
                if (y1 <= y0 || x1 <= x0) {
                    free(acc);
                    return NPU_KERNEL_EMPTY_WINDOW;
                }
#if INT16_LANES
                if ((int64_t)c->fh * c->fw < (1 << 16)) {
                    pool16_pixel(c, max, c->x + (int64_t)b * c->h * c->w * ch, y0, y1, x0, x1,
                                 c->out + (((int64_t)b * c->oh + oy) * c->ow + ox) * ch);
                    continue;
                }
#endif
                for (int32_t k = 0; k < ch; k++)
                    acc[k] = max ? INT16_MIN : 0;
                for (int32_t iy = y0; iy < y1; iy++)
                    for (int32_t ix = x0; ix < x1; ix++) {
                        const int16_t *restrict xp = c->x + (((int64_t)b * c->h + iy) * c->w + ix) * ch;
                        if (max)
                            for (int32_t k = 0; k < ch; k++)
                                acc[k] = xp[k] > acc[k] ? xp[k] : acc[k];
                        else
                            for (int32_t k = 0; k < ch; k++)
                                acc[k] += xp[k];
                    }
                const int64_t count = (int64_t)(y1 - y0) * (x1 - x0);
                int16_t *op = c->out + (((int64_t)b * c->oh + oy) * c->ow + ox) * ch;
                for (int32_t k = 0; k < ch; k++) {
                    int64_t v = acc[k];
                    if (!max) {
                        const int64_t num = v > 0 ? v + count / 2 : v - count / 2;
                        v = num / count;
                    }
                    op[k] = (int16_t)(v < c->act_min ? c->act_min : v > c->act_max ? c->act_max : v);
                }
            }
        }
    free(acc);
    return 0;
}

/* float32 -> int16: round(x / scale) (the division in float32, ties away from zero; a
   quotient outside int32, or NaN, is INT32_MIN as x86 converts it) + zero_point, wrapping
   in int32, clamped: npu_quantize_f32_s8's arithmetic with int16's range. */
void npu_quantize_f32_s16(const float *restrict x, int64_t n, float scale, int32_t zero_point,
                          int16_t *restrict out)
{
    for (int64_t i = 0; i < n; i++) {
        float y = x[i] / scale;
        float t = truncf(y), rest = y - t;
        float q = t + (rest >= 0.5f ? 1.0f : 0.0f) - (rest <= -0.5f ? 1.0f : 0.0f);
        int in_range = q >= -2147483648.0f && q < 2147483648.0f;
        float held = in_range ? q : 0.0f;
        int32_t v = in_range ? (int32_t)held : INT32_MIN;
        v = (int32_t)((uint32_t)v + (uint32_t)zero_point);
        out[i] = (int16_t)(v < INT16_MIN ? INT16_MIN : v > INT16_MAX ? INT16_MAX : v);
    }
}

/* int16 -> float32: float32(double(scale) * (x - zero_point)). */
void npu_dequantize_s16_f32(const int16_t *restrict x, int64_t n, float scale, int32_t zero_point,
                            float *restrict out)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = (float)((double)scale * ((double)x[i] - (double)zero_point));
}

/* One output row's exact sums acc[0.. cols) of lhs row l (d at l[d * ld]) times rhs (d, c) at
   r[d * rd + c * rc]: along the contiguous rhs row when there is one (a loop the compiler
   vectorizes), else one dot product per column. A product is at most 2**30 (-32768 squared). */
static void matmul16_row(const int16_t *l, int64_t ld, const int16_t *r, int64_t rd, int64_t rc, int64_t depth,
                         int64_t cols, int64_t *acc)
{
    if (rc == 1) {
        memset(acc, 0, sizeof(int64_t) * (size_t)cols);
        for (int64_t d = 0; d < depth; d++) {
            const int32_t a = l[d * ld];
            const int16_t *row = r + d * rd;
            for (int64_t col = 0; col < cols; col++)
                acc[col] += a * (int32_t)row[col];
        }
        return;
    }
    for (int64_t col = 0; col < cols; col++) {   /* not dot16x16: both operands may hold -32768 */
        const int16_t *column = r + col * rc;
        int64_t total = 0;
        for (int64_t d = 0; d < depth; d++)
            total += (int32_t)l[d * ld] * (int32_t)column[d * rd];
        acc[col] = total;
    }
}

int npu_matmul16(const struct npu_matmul16_call *c)
{
    if (c->batches < 0 || c->rows < 0 || c->depth < 0 || c->cols < 0)
        return NPU_KERNEL_BAD_STEP;
    int status = check_requant16(&c->multiplier, &c->shift, 1);
    if (status)
        return status;
    int64_t *acc = malloc(sizeof(int64_t) * (size_t)(c->cols > 0 ? c->cols : 1));
    if (!acc)
        return NPU_KERNEL_NO_MEMORY;
    for (int64_t b = 0; b < c->batches; b++)
        for (int64_t row = 0; row < c->rows; row++) {
            matmul16_row(c->lhs + c->lhs_at[b] + row * c->lhs_row, c->lhs_depth, c->rhs + c->rhs_at[b], c->rhs_depth,
                         c->rhs_col, c->depth, c->cols, acc);
            int16_t *o = c->out + (b * c->rows + row) * c->cols;
            for (int64_t col = 0; col < c->cols; col++)
                o[col] = requant16(acc[col], c->multiplier, c->shift, c->act_min, c->act_max);
        }
    free(acc);
    return 0;
}
