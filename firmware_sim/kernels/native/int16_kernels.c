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
#include "gemm_kernels.h"

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

#if INT16_LANES
/* requant16's per-channel terms (requant_terms), each over the channels rounded up to a
   multiple of 16: the multiplier rounded to 16 bits, the bias times it plus the rounding
   half (mod 2**64: (acc + bias) * reduced + half wraps to the same bits as requant16's), the
   total shift 15 - shift. Saturating (the 16x16 kernels): `bias` holds the bias clipped to
   +-2**62, added and the total clipped to +-2**47 before the product, whose addend is then
   the rounding half alone; unless no sum can reach the clip (below), when the bias is folded
   into the addend as the 16x8 kernels' is: the same bits, five instructions fewer per 8. */
struct requant_lanes {
    int64_t *reduced, *addend, *total, *bias;
};

#define BIAS_LIMIT16 (INT64_C(1) << 62)
#define ACC_LIMIT16 (INT64_C(1) << 47)

/* The terms of cout channels with bias (or NULL); 0, or NPU_KERNEL_NO_MEMORY. Free q->reduced.
   `reach`: -1 for the 16x8 kernels (the bias wraps), else the 16x16 kernels' bound on the
   sums' magnitude (their terms saturate unless reach plus every clipped bias stays inside). */
static int requant_terms(const int32_t *mult, const int32_t *shift, int32_t per_channel, const int64_t *bias,
                         int32_t cout, int64_t reach, struct requant_lanes *q)
{
    const int64_t cpad = ((int64_t)cout + 15) / 16 * 16;
    q->reduced = calloc((size_t)(4 * cpad), sizeof(int64_t));
    if (!q->reduced)
        return NPU_KERNEL_NO_MEMORY;
    q->addend = q->reduced + cpad;
    q->total = q->reduced + 2 * cpad;
    q->bias = NULL;
    int saturate = 0;
    for (int32_t oc = 0; reach >= 0 && oc < cout; oc++) {
        int64_t b = bias ? bias[oc] : 0;
        b = b < -BIAS_LIMIT16 ? -BIAS_LIMIT16 : b > BIAS_LIMIT16 ? BIAS_LIMIT16 : b;
        q->reduced[3 * cpad + oc] = b;
        saturate |= reach >= ACC_LIMIT16 - 1 - (b < 0 ? -b : b);
    }
    if (saturate)
        q->bias = q->reduced + 3 * cpad;
    for (int32_t oc = 0; oc < cout; oc++) {
        const int32_t m = mult[per_channel ? oc : 0], s = shift[per_channel ? oc : 0];
        const int64_t reduced = m < 0x7FFF0000 ? ((int64_t)m + (1 << 15)) >> 16 : 0x7FFF;
        const int64_t b = saturate ? 0 : reach >= 0 ? q->reduced[3 * cpad + oc] : bias ? bias[oc] : 0;
        q->reduced[oc] = reduced;
        q->total[oc] = 15 - s;
        q->addend[oc] = (int64_t)((uint64_t)b * (uint64_t)reduced + (UINT64_C(1) << (15 - s - 1)));
    }
    return 0;
}

/* requant16 of channels c.. c + 7's int64 sums plus their bias (wrapping: the 16x8 kernels;
   saturated with q->bias: the 16x16 kernels), stored to o (masked by k). */
static inline void store16x8(__m512i acc, const struct requant_lanes *q, int64_t c, __m256i lo, __m256i hi,
                             __mmask8 k, int16_t *o)
{
    if (q->bias)                /* |sums| < 2**53 and |bias| <= 2**62: no wrap */
        acc = _mm512_min_epi64(_mm512_max_epi64(_mm512_add_epi64(acc, _mm512_loadu_si512(q->bias + c)),
                                                _mm512_set1_epi64(-ACC_LIMIT16)),
                               _mm512_set1_epi64(ACC_LIMIT16 - 1));
    const __m512i v = _mm512_srav_epi64(_mm512_add_epi64(_mm512_mullo_epi64(acc, _mm512_loadu_si512(q->reduced + c)),
                                                         _mm512_loadu_si512(q->addend + c)),
                                        _mm512_loadu_si512(q->total + c));
    const __m256i r = _mm256_min_epi32(_mm256_max_epi32(_mm512_cvtepi64_epi32(v), lo), hi);
    _mm_mask_storeu_epi16(o, k, _mm256_cvtepi32_epi16(r));
}
#endif

/* dst[0..n) = src[0..n): a short run (a window row of a few channels) without a call. */
static inline void copy16(int16_t *dst, const int16_t *src, int64_t n)
{
#if INT16_LANES
    if (n <= 32) {
        const __mmask32 k = n == 32 ? ~(__mmask32)0 : ((__mmask32)1 << n) - 1;
        _mm512_mask_storeu_epi16(dst, k, _mm512_maskz_loadu_epi16(k, src));
        return;
    }
#endif
    memcpy(dst, src, sizeof(int16_t) * (size_t)n);
}

/* Group g's window of output pixel (b, oy, ox), zeros outside the image (the zero point is
   0), gathered into row (k values), or where it lies in x when `direct` (a 1x1 window of one
   group whose k is even: npu_row_times_filter has nothing to write past it). */
static const int16_t *gather_window16(const struct npu_conv16_call *c, int32_t b, int32_t oy, int32_t ox, int32_t g,
                                      int16_t *row, int direct)
{
    const int32_t cin_g = c->cin / c->groups, ix0 = ox * c->stride_w - c->pad_left;
    int16_t *r = row;
    for (int32_t fy = 0; fy < c->kh; fy++) {
        const int32_t iy = oy * c->stride_h - c->pad_top + fy * c->dil_h;
        const int16_t *line = c->x + ((int64_t)b * c->h + iy) * c->w * c->cin + (int64_t)g * cin_g;
        if (c->groups == 1 && c->dil_w == 1 && iy >= 0 && iy < c->h && ix0 >= 0 && ix0 + c->kw <= c->w) {
            if (direct)             /* the pixel itself */
                return line + (int64_t)ix0 * c->cin;
            /* the window's row lies in one piece */
            copy16(r, line + (int64_t)ix0 * c->cin, (int64_t)c->kw * cin_g);
            r += c->kw * cin_g;
            continue;
        }
        for (int32_t fx = 0; fx < c->kw; fx++, r += cin_g) {
            const int32_t ix = ix0 + fx * c->dil_w;
            if (iy < 0 || iy >= c->h || ix < 0 || ix >= c->w)
                memset(r, 0, sizeof(int16_t) * (size_t)cin_g);
            else
                copy16(r, line + (int64_t)ix * c->cin, cin_g);
        }
    }
    return row;
}

#if INT16_LANES
/* Output pixels a convolution tile computes together (each filter vector loaded once for all). */
#define TILE 8
/* Pairs of products whose int32 sum is exact (each pair at most 2**23 with int8 weights). */
#define TILE_PAIRS 128

/* TILE pixels' windows (gather_window16) from pixel p0 on, the last repeated past the count;
   advances (b, oy, ox) past them. Returns the count. */
static int gather_tile(const struct npu_conv16_call *c, int64_t pixels, int64_t p0, int64_t k, int direct,
                       int16_t *rows, const int16_t **win, int32_t *b, int32_t *oy, int32_t *ox)
{
    const int count = pixels - p0 < TILE ? (int)(pixels - p0) : TILE;
    const int pointwise = direct && c->kw == 1 && c->stride_h == 1 && c->stride_w == 1 && c->pad_top == 0 && c->pad_left == 0
                          && c->out_h == c->h && c->out_w == c->w;
    for (int t = 0; t < count && pointwise; t++)    /* output pixel p reads input pixel p */
        win[t] = c->x + (p0 + t) * c->cin;
    for (int t = 0; t < count && !pointwise; t++) {
        win[t] = gather_window16(c, *b, *oy, *ox, 0, rows + t * (k + 1), direct);
        if (++*ox == c->out_w) {
            *ox = 0;
            if (++*oy == c->out_h) {
                *oy = 0;
                ++*b;
            }
        }
    }
    for (int t = count; t < TILE; t++)      /* a short tile repeats its last pixel */
        win[t] = win[count - 1];
    return count;
}

/* One group's convolution, TILE pixels at a time: their windows' pairs times 16 output
   channels of the packed filter (npu_pack_pairs), summed exactly in int32 over TILE_PAIRS
   pairs and then in int64, requantized with the per-channel terms (requant_terms).

   int16 weights (`packed_lo` given: npu_pack_split) are two such filters, w = 256 * hi + lo
   with hi in [-128, 127] and lo in [0, 255]: each pair of products is at most 2**24 (lo) or
   2**23 (hi), so both sums stay exact in int32 over TILE_PAIRS pairs, where one pair of
   int16 x int16 products (2**31) would need int64 lanes at once. */
static int conv16_tiles(const struct npu_conv16_call *c, int64_t k, const int16_t *packed, const int16_t *packed_lo,
                        const struct requant_lanes *q)
{
    const int32_t cout = c->cout;
    const int64_t pixels = (int64_t)c->n * c->out_h * c->out_w, k2 = (k + 1) / 2, cout16 = ((int64_t)cout + 15) / 16 * 16;
    const int direct = c->kh == 1 && k % 2 == 0;
    int16_t *rows = malloc(sizeof(int16_t) * (size_t)(TILE * (k + 1)));
    if (!rows)
        return NPU_KERNEL_NO_MEMORY;
    for (int t = 0; t < TILE; t++)
        rows[t * (k + 1) + k] = 0;          /* the odd k's last pair */
    const __m256i lo = _mm256_set1_epi32(c->act_min), hi = _mm256_set1_epi32(c->act_max);
    int32_t b = 0, oy = 0, ox = 0;          /* the next pixel's position (no division per pixel) */
    for (int64_t p0 = 0; p0 < pixels; p0 += TILE) {
        const int16_t *win[TILE];
        const int count = gather_tile(c, pixels, p0, k, direct, rows, win, &b, &oy, &ox);
        for (int32_t o0 = 0; o0 < cout; o0 += 16) {
            __m512i low[TILE], high[TILE];  /* int64 sums of channels o0.. o0 + 7 and o0 + 8.. o0 + 15 */
            for (int t = 0; t < TILE; t++)
                low[t] = high[t] = _mm512_setzero_si512();
            const int16_t *f = packed + (int64_t)o0 * 2, *f_lo = packed_lo ? packed_lo + (int64_t)o0 * 2 : NULL;
            for (int64_t k0 = 0; k0 < k2; k0 += TILE_PAIRS) {
                const int64_t k1 = k2 - k0 < TILE_PAIRS ? k2 : k0 + TILE_PAIRS;
                __m512i acc[TILE], acc_lo[TILE];
                for (int t = 0; t < TILE; t++)
                    acc[t] = acc_lo[t] = _mm512_setzero_si512();
                if (!f_lo) {
                    for (int64_t kk = k0; kk < k1; kk++, f += cout16 * 2) {
                        const __m512i fv = _mm512_load_si512(f);
                        for (int t = 0; t < TILE; t++) {
                            int32_t pair;   /* win[t][2kk] and win[t][2kk + 1], as vpmaddwd pairs them */
                            memcpy(&pair, win[t] + 2 * kk, sizeof(pair));
                            acc[t] = madd_acc16(acc[t], _mm512_set1_epi32(pair), fv);
                        }
                    }
                } else {
                    for (int64_t kk = k0; kk < k1; kk++, f += cout16 * 2, f_lo += cout16 * 2) {
                        const __m512i fv = _mm512_load_si512(f), fv_lo = _mm512_load_si512(f_lo);
                        for (int t = 0; t < TILE; t++) {
                            int32_t pair;
                            memcpy(&pair, win[t] + 2 * kk, sizeof(pair));
                            const __m512i xv = _mm512_set1_epi32(pair);
                            acc[t] = madd_acc16(acc[t], xv, fv);
                            acc_lo[t] = madd_acc16(acc_lo[t], xv, fv_lo);
                        }
                    }
                }
                for (int t = 0; t < TILE; t++) {
                    __m512i l = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(acc[t]));
                    __m512i h = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(acc[t], 1));
                    if (f_lo) {         /* 256 * hi + lo */
                        l = _mm512_add_epi64(_mm512_slli_epi64(l, 8),
                                             _mm512_cvtepi32_epi64(_mm512_castsi512_si256(acc_lo[t])));
                        h = _mm512_add_epi64(_mm512_slli_epi64(h, 8),
                                             _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(acc_lo[t], 1)));
                    }
                    low[t] = _mm512_add_epi64(low[t], l);
                    high[t] = _mm512_add_epi64(high[t], h);
                }
            }
            const int32_t left = cout - o0;
            const __mmask8 m0 = left >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << left) - 1);
            const __mmask8 m1 = left >= 16 ? (__mmask8)0xFF : left > 8 ? (__mmask8)((1u << (left - 8)) - 1) : 0;
            for (int t = 0; t < count; t++) {
                int16_t *o = c->out + (p0 + t) * cout + o0;
                store16x8(low[t], q, o0, lo, hi, m0, o);
                if (m1)
                    store16x8(high[t], q, o0 + 8, lo, hi, m1, o + 8);
            }
        }
    }
    free(rows);
    return 0;
}

int npu_conv16x16_tiles(const struct npu_conv16_call *c, int64_t k, const int16_t *packed_hi, const int16_t *packed_lo)
{
    struct requant_lanes q;
    int status = requant_terms(c->mult, c->shift, c->per_channel, c->bias, c->cout, k << 30, &q);
    if (!status)
        status = conv16_tiles(c, k, packed_hi, packed_lo, &q);
    free(q.reduced);
    return status;
}

/* Exact sum of a[i] * b[i], i < n: 32 products at a time, pairs (vpmaddwd) summed in int32
   over TILE_PAIRS vectors and then in int64. */
static int64_t dot16x8_lanes(const int16_t *a, const int8_t *b, int64_t n)
{
    __m512i total = _mm512_setzero_si512();
    for (int64_t i0 = 0; i0 < n; i0 += 32 * TILE_PAIRS) {
        const int64_t i1 = n - i0 < 32 * TILE_PAIRS ? n : i0 + 32 * TILE_PAIRS;
        __m512i acc = _mm512_setzero_si512();
        for (int64_t i = i0; i < i1; i += 32) {
            const __mmask32 k = i1 - i >= 32 ? ~(__mmask32)0 : ((__mmask32)1 << (i1 - i)) - 1;
            acc = madd_acc16(acc, _mm512_maskz_loadu_epi16(k, a + i),
                             _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(k, b + i)));
        }
        total = _mm512_add_epi64(total, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(acc)));
        total = _mm512_add_epi64(total, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(acc, 1)));
    }
    return _mm512_reduce_add_epi64(total);
}

/* Output channels a convolution of fewer than DOT_MAX_PIXELS pixels computes one dot product
   each for (instead of 16 lanes of the packed filter of which most would be padding). A dot
   product's horizontal sum and a pixel's requantization cost more than the padding lanes once
   the packing is paid: face_detection_full_range_sparse's 96 x 96 x 32 -> 8 1x1 layer took
   388 us as dot products, 118 us in tiles (chip CPU). */
#define DOT_CHANNELS 8
#define DOT_MAX_PIXELS 16

/* A convolution of one group and at most DOT_CHANNELS output channels: each pixel's window
   (where it lies when it can) times each channel's filter row. */
static int conv16x8_dots(const struct npu_conv16_call *c, int64_t k, int16_t *row, int64_t *sums)
{
    const int direct = c->kh == 1;          /* no pairs: any k */
    for (int32_t b = 0; b < c->n; b++)
        for (int32_t oy = 0; oy < c->out_h; oy++)
            for (int32_t ox = 0; ox < c->out_w; ox++) {
                const int16_t *window = gather_window16(c, b, oy, ox, 0, row, direct);
                for (int32_t q = 0; q < c->cout; q++)
                    sums[q] = dot16x8_lanes(window, c->filter + (int64_t)q * k, k);
                npu_finish16(sums, c->cout, 0, c->bias, 0, c->mult, c->shift, c->per_channel, c->act_min,
                             c->act_max, c->out + (((int64_t)b * c->out_h + oy) * c->out_w + ox) * c->cout);
            }
    return 0;
}
#endif

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
#if INT16_LANES
    const int dots = groups == 1 && cout <= DOT_CHANNELS && (int64_t)c->n * c->out_h * c->out_w < DOT_MAX_PIXELS;
#else
    const int dots = 0;
#endif
    const int packing = !dots && (int64_t)c->n * c->out_h * c->out_w >= PACK_MIN_PIXELS;
    int16_t *packed = row && sums && packing ? npu_pack_groups(c->filter, 0, groups, cout_g, k) : NULL;
    const int64_t packed_size = npu_packed_pairs_size(cout_g, k);
    if (!row || !sums || (packing && !packed)) {
        free(row);
        free(sums);
        return NPU_KERNEL_NO_MEMORY;
    }
#if INT16_LANES
    if (dots) {
        status = conv16x8_dots(c, k, row, sums);
        free(row);
        free(sums);
        return status;
    }
    if (groups == 1 && packed) {
        struct requant_lanes q;
        status = requant_terms(c->mult, c->shift, c->per_channel, c->bias, cout, -1, &q);
        if (!status)
            status = conv16_tiles(c, k, packed, NULL, &q);
        free(q.reduced);
        free(packed);
        free(row);
        free(sums);
        return status;
    }
#endif
    for (int32_t b = 0; b < c->n; b++)
        for (int32_t oy = 0; oy < c->out_h; oy++)
            for (int32_t ox = 0; ox < c->out_w; ox++) {
                int16_t *o = c->out + (((int64_t)b * c->out_h + oy) * c->out_w + ox) * cout;
                for (int32_t g = 0; g < groups; g++) {
                    if (packed) {
                        const int16_t *window = gather_window16(c, b, oy, ox, g, row, groups == 1 && c->kh == 1
                                                                && c->kw == 1 && k % 2 == 0);
                        npu_row_times_filter((int16_t *)window, k, packed + g * packed_size, cout_g, 0, sums);
                    } else {
                        gather_window16(c, b, oy, ox, g, row, 0);
                        for (int32_t q = 0; q < cout_g; q++)
                            sums[q] = dot16x8(row, c->filter + (int64_t)(g * cout_g + q) * k, k);
                    }
                    npu_finish16(sums, cout_g, g * cout_g, c->bias, 0, c->mult, c->shift, c->per_channel,
                                 c->act_min, c->act_max, o + g * cout_g);
                }
            }
    free(packed);
    free(row);
    free(sums);
    return 0;
}

#if INT16_LANES
/* 16 channels' int32 sums (masked by k) as requantized int16 at o: `acc` alone, or with
   int16 weights 256 * acc + acc_lo (split_weights) in int64. */
static inline void store16x16(__m512i acc, const __m512i *acc_lo, const struct requant_lanes *q, int32_t c0,
                              int32_t cout, __m256i lo, __m256i hi, __mmask16 k, int16_t *o)
{
    __m512i l = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(acc));
    __m512i h = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(acc, 1));
    if (acc_lo) {
        l = _mm512_add_epi64(_mm512_slli_epi64(l, 8), _mm512_cvtepi32_epi64(_mm512_castsi512_si256(*acc_lo)));
        h = _mm512_add_epi64(_mm512_slli_epi64(h, 8), _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(*acc_lo, 1)));
    }
    store16x8(l, q, c0, lo, hi, (__mmask8)k, o);
    if (cout - c0 > 8)
        store16x8(h, q, c0 + 8, lo, hi, (__mmask8)(k >> 8), o + 8);
}

static inline int inside(const struct npu_conv16_call *c, int32_t iy, int32_t ix)
{
    return iy >= 0 && iy < c->h && ix >= 0 && ix < c->w;
}

/* A weight as the int32 lane vpmaddwd multiplies a widened int16 activation by: the weight
   in the low half and 0 in the high half, which meets the activation's sign extension. */
static inline int32_t madd_lane(int32_t w)
{
    return (int32_t)(uint16_t)(int16_t)w;
}

/* `np` neighbouring output pixels (a compile-time constant after inlining) whose windows lie
   inside the image, the first's corner at base: their taps at fixed offsets, each filter
   vector loaded once for all, 2 * np independent sums in flight (a tap's vpdpwssd waits for
   the one before it on the same sum). */
static inline __attribute__((always_inline)) void dw_inside(
    const struct npu_conv16_call *c, const int16_t *base, const int np, const int32_t *filter,
    const int32_t *filter_lo, int64_t cpad, const int64_t *off, int32_t taps, const struct requant_lanes *q,
    __m256i lo, __m256i hi, int16_t *o)
{
    const int32_t cout = c->cout;
    const int64_t step = (int64_t)c->stride_w * c->cin;
    for (int32_t c0 = 0; c0 < cout; c0 += 16) {
        const __mmask16 k = cout - c0 >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (cout - c0)) - 1);
        __m512i acc[4], acc_lo[4];
        for (int p = 0; p < np; p++)
            acc[p] = acc_lo[p] = _mm512_setzero_si512();
        for (int32_t t = 0; t < taps; t++) {
            const __m512i fv = _mm512_load_si512(filter + t * cpad + c0);
            const __m512i fv_lo = filter_lo ? _mm512_load_si512(filter_lo + t * cpad + c0) : fv;
            for (int p = 0; p < np; p++) {
                const __m512i xv = _mm512_cvtepi16_epi32(_mm256_maskz_loadu_epi16(k, base + p * step + off[t] + c0));
                acc[p] = madd_acc16(acc[p], xv, fv);
                if (filter_lo)
                    acc_lo[p] = madd_acc16(acc_lo[p], xv, fv_lo);
            }
        }
        for (int p = 0; p < np; p++)
            store16x16(acc[p], filter_lo ? &acc_lo[p] : NULL, q, c0, cout, lo, hi, k, o + p * cout + c0);
    }
}

/* Depthwise convolution of depth multiplier 1 over at most CHUNK taps: 16 channels' int32
   sums held in a register over the window, the filter widened to int32 lanes (madd_lane: one
   vpmaddwd / vpdpwssd per tap) and the requantization's per-channel terms computed once. A
   window inside the image reads its taps at fixed offsets, four or two neighbours at a time
   (dw_inside); a window across the border checks every tap.

   int8 weights (`wide` NULL): CHUNK products of at most 2**22 are exact in int32. int16
   weights (`wide`, the 16x16 kernel): split as w = 256 * hi + lo (hi in [-128, 127], lo in
   [0, 255]), two sums of CHUNK products of at most 2**23, combined in int64 and saturated
   (requant_terms's saturate). */
static int depthwise16_lanes(const struct npu_conv16_call *c, const int16_t *wide)
{
    const int32_t cout = c->cout, taps = c->kh * c->kw;
    const int64_t cpad = ((int64_t)cout + 15) / 16 * 16;
    int32_t *filter = aligned_alloc(64, sizeof(int32_t) * (size_t)(taps * cpad * (wide ? 2 : 1)));
    int32_t *filter_lo = wide && filter ? filter + taps * cpad : NULL;
    int64_t *off = malloc(sizeof(int64_t) * (size_t)taps);
    int32_t *tap_y = malloc(sizeof(int32_t) * (size_t)taps * 2), *tap_x = tap_y ? tap_y + taps : NULL;
    struct requant_lanes q = {NULL, NULL, NULL, NULL};
    if (!filter || !off || !tap_y || requant_terms(c->mult, c->shift, c->per_channel, c->bias, cout, wide ? (int64_t)taps << 30 : -1, &q)) {
        free(filter);
        free(off);
        free(tap_y);
        free(q.reduced);
        return NPU_KERNEL_NO_MEMORY;
    }
    for (int32_t t = 0; t < taps; t++) {
        for (int64_t oc = 0; oc < cpad; oc++) {
            const int64_t at = (int64_t)t * cout + oc;
            if (!wide) {
                filter[t * cpad + oc] = oc < cout ? madd_lane(c->filter[at]) : 0;
            } else {
                const int32_t w = oc < cout ? wide[at] : 0;
                filter[t * cpad + oc] = madd_lane(w >> 8);          /* arithmetic: hi in [-128, 127] */
                filter_lo[t * cpad + oc] = madd_lane(w & 0xFF);
            }
        }
        tap_y[t] = t / c->kw * c->dil_h;    /* a window across the border checks these, no division */
        tap_x[t] = t % c->kw * c->dil_w;
        off[t] = ((int64_t)tap_y[t] * c->w + tap_x[t]) * c->cin;
    }
    const __m256i lo = _mm256_set1_epi32(c->act_min), hi = _mm256_set1_epi32(c->act_max);
    const int32_t span_h = (c->kh - 1) * c->dil_h, span_w = (c->kw - 1) * c->dil_w;
    for (int32_t b = 0; b < c->n; b++)
        for (int32_t oy = 0; oy < c->out_h; oy++) {
            const int32_t iy0 = oy * c->stride_h - c->pad_top;
            const int rows_in = iy0 >= 0 && iy0 + span_h < c->h;
            for (int32_t ox = 0; ox < c->out_w;) {
                int16_t *o = c->out + (((int64_t)b * c->out_h + oy) * c->out_w + ox) * cout;
                const int32_t ix0 = ox * c->stride_w - c->pad_left;
                /* the window's corner, which may lie outside the image: an index, not a pointer */
                const int64_t corner = (((int64_t)b * c->h + iy0) * c->w + ix0) * c->cin;
                const int in0 = rows_in && ix0 >= 0 && ix0 + span_w < c->w;
                /* neighbours whose windows lie inside too: 4 at a time for long windows (5 x 5: a
                   chain of 25 dependent vpdpwssd per sum), else 2 (3 x 3: 4 measured slower) */
                const int run = !in0 ? 1 : taps > 9 && ox + 3 < c->out_w && ix0 + 3 * c->stride_w + span_w < c->w ? 4
                                : ox + 1 < c->out_w && ix0 + c->stride_w + span_w < c->w ? 2 : 1;
                if (run > 1) {
                    if (run == 4)
                        dw_inside(c, c->x + corner, 4, filter, filter_lo, cpad, off, taps, &q, lo, hi, o);
                    else
                        dw_inside(c, c->x + corner, 2, filter, filter_lo, cpad, off, taps, &q, lo, hi, o);
                    ox += run;
                    continue;
                }
                for (int32_t c0 = 0; c0 < cout; c0 += 16) {
                    const __mmask16 k = cout - c0 >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (cout - c0)) - 1);
                    __m512i acc = _mm512_setzero_si512(), acc_lo = _mm512_setzero_si512();
                    for (int32_t t = 0; t < taps; t++) {
                        if (!in0 && !inside(c, iy0 + tap_y[t], ix0 + tap_x[t]))
                            continue;
                        const __m512i xv = _mm512_cvtepi16_epi32(_mm256_maskz_loadu_epi16(k, c->x + (corner + off[t] + c0)));
                        acc = madd_acc16(acc, xv, _mm512_load_si512(filter + t * cpad + c0));
                        if (wide)
                            acc_lo = madd_acc16(acc_lo, xv, _mm512_load_si512(filter_lo + t * cpad + c0));
                    }
                    store16x16(acc, wide ? &acc_lo : NULL, &q, c0, cout, lo, hi, k, o + c0);
                }
                ox++;
            }
        }
    free(filter);
    free(off);
    free(tap_y);
    free(q.reduced);
    return 0;
}

int npu_depthwise16x16_lanes(const struct npu_conv16_call *c, const int16_t *filter)
{
    return depthwise16_lanes(c, filter);
}
#endif

/* Depthwise convolution, NHWC: filter (kh, kw, cout), output channel oc reading input
   channel oc / depth_multiplier. Per-channel int32 sums over up to CHUNK taps, then int64. */
int npu_depthwise16x8(const struct npu_conv16_call *c)
{
    const int32_t cout = c->cout, dm = c->depth_multiplier;
    int status = check_requant16(c->mult, c->shift, c->per_channel ? cout : 1);
    if (status)
        return status;
#if INT16_LANES
    if (dm == 1 && (int64_t)c->kh * c->kw <= CHUNK)
        return depthwise16_lanes(c, NULL);
#endif
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

/* The output of one sum: (int32)round(acc * scale) in double (out of int32's range or NaN:
   INT32_MIN), clamped. */
static inline int16_t fc16_output(int64_t acc, double scale, int32_t lo, int32_t hi)
{
    const double v = round((double)acc * scale);
    int32_t q = !(v >= -2147483648.0 && v <= 2147483647.0) ? INT32_MIN : (int32_t)v;
    q = q < lo ? lo : q > hi ? hi : q;
    return (int16_t)q;
}

#if INT16_LANES
/* fc16_output of 8 sums (channels o.. o + 7, masked by k) into out: round() is half away from
   zero, which AVX-512 has no mode for: the truncated value plus one where the exact
   remainder reaches a half (v - trunc(v) is exact in double). */
static inline void fc16_output8(__m512i acc, const double *scale, int per_channel, int32_t o, __mmask8 k,
                                int32_t lo, int32_t hi, int16_t *out)
{
    const __m512d s = per_channel ? _mm512_maskz_loadu_pd(k, scale + o) : _mm512_set1_pd(scale[0]);
    const __m512d v = _mm512_mul_pd(_mm512_cvtepi64_pd(acc), s);
    const __m512d t = _mm512_roundscale_pd(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC), d = _mm512_sub_pd(v, t);
    __m512d r = _mm512_mask_add_pd(t, _mm512_cmp_pd_mask(d, _mm512_set1_pd(0.5), _CMP_GE_OQ), t, _mm512_set1_pd(1.0));
    r = _mm512_mask_sub_pd(r, _mm512_cmp_pd_mask(d, _mm512_set1_pd(-0.5), _CMP_LE_OQ), r, _mm512_set1_pd(1.0));
    const __mmask8 in = _mm512_cmp_pd_mask(r, _mm512_set1_pd(-2147483648.0), _CMP_GE_OQ)
                        & _mm512_cmp_pd_mask(r, _mm512_set1_pd(2147483647.0), _CMP_LE_OQ);
    __m256i q = _mm256_mask_mov_epi32(_mm256_set1_epi32(INT32_MIN), in, _mm512_cvttpd_epi32(r));
    q = _mm256_min_epi32(_mm256_max_epi32(q, _mm256_set1_epi32(lo)), _mm256_set1_epi32(hi));
    _mm_mask_storeu_epi16(out, k, _mm256_cvtepi32_epi16(q));
}

/* Rows from which a fully connected layer takes the GEMM: below, each output is a dot product
   (dot16x8, which the compiler vectorizes), cheaper than checking the kept filter's bytes
   (openWakeWord's 1 x 3264 -> 128 head: 12.6 us as dot products, 22 us through the GEMM). */
#define FC_GEMM_MIN_ROWS 4

/* Fully connected through npu_gemm_vnni (int8 x int8 in AVX-512 VNNI, the filter packed once
   and kept): x = 256 * hi + lo with hi = x >> 8 (int8) and lo = x & 0xFF (in [0, 255], which
   vpdpbusd takes as its unsigned operand), two exact int32 GEMMs against the int8 weights
   (|sums| < 2**31 for k < 2**16), combined in int64. 0, or 1 when it does not apply (no
   VNNI, a filter too large to keep, no memory): the caller's loop runs instead. */
static int fc16x8_vnni(const struct npu_fc16_call *c)
{
    const int64_t rows = c->rows, k = c->k, n = c->n, n16 = (n + 15) / 16 * 16;
    struct vnni_packed prepared;
    if (!npu_gemm_vnni_available() || k >= (1 << 16) || rows < FC_GEMM_MIN_ROWS
            || !npu_gemm_vnni_prepare(c->w, c->n, 1, k, NULL, 0, &prepared))
        return 1;
    int8_t *split = malloc((size_t)(2 * rows * k));
    int32_t *sums = malloc(sizeof(int32_t) * (size_t)(2 * rows * n + n16));
    if (!split || !sums) {
        free(split);
        free(sums);
        return 1;
    }
    int32_t *zeros = sums + 2 * rows * n;
    memset(zeros, 0, sizeof(int32_t) * (size_t)n16);
    for (int64_t i = 0; i < rows * k; i++) {
        split[i] = (int8_t)(c->x[i] >> 8);
        split[rows * k + i] = (int8_t)((c->x[i] & 0xFF) ^ 0x80);    /* vpdpbusd's operand, lifted back by 0x80 */
    }
    /* hi: init (-128 times each filter row's sum) undoes the lift of a signed operand;
       lo: lifted back to [0, 255] already, so the sums start at 0 */
    npu_gemm_vnni(split, rows, k, k, prepared.packed, c->n, prepared.init, sums, n);
    npu_gemm_vnni(split + rows * k, rows, k, k, prepared.packed, c->n, zeros, sums + rows * n, n);
    for (int64_t r = 0; r < rows; r++) {
        const int32_t *hi = sums + r * n, *lo = sums + (rows + r) * n;
        for (int32_t o = 0; o < c->n; o += 8) {
            const __mmask8 m = n - o >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << (n - o)) - 1);
            __m512i acc = _mm512_add_epi64(_mm512_slli_epi64(_mm512_cvtepi32_epi64(_mm256_maskz_loadu_epi32(m, hi + o)), 8),
                                           _mm512_cvtepi32_epi64(_mm256_maskz_loadu_epi32(m, lo + o)));
            if (c->bias)                                /* wrapping, as the scalar loop */
                acc = _mm512_add_epi64(acc, _mm512_maskz_loadu_epi64(m, c->bias + o));
            fc16_output8(acc, c->scale, c->per_channel, o, m, c->act_min, c->act_max, c->out + r * n + o);
        }
    }
    free(split);
    free(sums);
    return 0;
}
#endif

/* Fully connected: x (rows, k) int16, w (n, k) int8, bias (n) int64 or NULL; LiteRT's
   reference requantizes (int32)round(acc * scale) in double (scale per output or one). */
int npu_fully_connected16x8(const struct npu_fc16_call *c)
{
#if INT16_LANES
    if (!fc16x8_vnni(c))
        return 0;
#endif
    for (int32_t r = 0; r < c->rows; r++)
        for (int32_t o = 0; o < c->n; o++) {
            int64_t acc = dot16x8(c->x + (int64_t)r * c->k, c->w + (int64_t)o * c->k, c->k);
            if (c->bias)
                acc = (int64_t)((uint64_t)acc + (uint64_t)c->bias[o]);
            c->out[(int64_t)r * c->n + o] = fc16_output(acc, c->scale[c->per_channel ? o : 0], c->act_min,
                                                        c->act_max);
        }
    return 0;
}
