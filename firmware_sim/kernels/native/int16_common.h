/* What the int16 kernels share (int16_kernels.c, int16x16_kernels.c): the requantization,
   and the convolution's pixel loop over a filter packed as int16 pairs. */
#ifndef NPU_INT16_COMMON_H
#define NPU_INT16_COMMON_H

#include <stdint.h>

/* Include int8_kernels.h first (NPU_KERNEL_BAD_SHIFT): it has no include guard (cffi reads it). */

/* 1 where the int16 kernels' AVX-512 lanes build (else their scalar loops run): tested with
   `#if`, never `#ifdef`, so a file that uses it without this header fails to build (-Wundef). */
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)
#define INT16_LANES 1
#else
#define INT16_LANES 0
#endif

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

#if INT16_LANES
#include <immintrin.h>
/* acc + the pairwise products of a and b (vpmaddwd's pairs), wrapping in int32 lanes: one
   vpdpwssd where the CPU has VNNI, else vpmaddwd then vpaddd (the same bits: both wrap mod 2**32). */
static inline __m512i madd_acc16(__m512i acc, __m512i a, __m512i b)
{
#if defined(__AVX512VNNI__)
    return _mm512_dpwssd_epi32(acc, a, b);
#else
    return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
#endif
}
#endif

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

static inline int check_requant16(const int32_t *mult, const int32_t *shift, int32_t count)
{
    for (int32_t i = 0; i < count; i++)
        if (mult[i] < 0 || shift[i] < -31 || shift[i] > 14)
            return NPU_KERNEL_BAD_SHIFT;
    return 0;
}

/* Output pixels from which a convolution packs its filter (npu_pack_groups). */
#define PACK_MIN_PIXELS 4

/* The int16 elements of a filter (cout x k) packed as int16 pairs: a multiple of 32. */
int64_t npu_packed_pairs_size(int32_t cout, int64_t k);

/* A filter (cout x k, int8 when !wide else int16, row-major) as int16 pairs for
   npu_row_times_filter into packed (64-byte aligned, npu_packed_pairs_size elements):
   packed[(i / 2 * cout16 + o) * 2 + i % 2] = filter[o][i], zeros past k and cout (cout16:
   cout rounded up to 16). */
void npu_pack_pairs(const void *filter, int wide, int32_t cout, int64_t k, int16_t *packed);

/* The filters of `groups` groups (cout_g x k each) packed one after the other (free() it),
   or NULL when out of memory. */
int16_t *npu_pack_groups(const void *filter, int wide, int32_t groups, int32_t cout_g, int64_t k);

/* acc[o] = sum_i row[i] * filter[o][i] exactly, o < cout, from npu_pack_pairs's packing;
   row holds k values and one more slot, read as 0 when k is odd. */
void npu_row_times_filter(int16_t *row, int64_t k, const int16_t *packed, int32_t cout, int wide,
                          int64_t *acc);

/* out[i] for channels c0 + i, i < n: sums[i] plus the bias (bias[c0 + i], or none when
   NULL; with `saturate` clipped to +-2**62 and the total to +-2**47 as the 16x16 kernels do,
   else wrapping as the 16x8 kernels do), then requant16 with the channel's (per_channel) or
   the one multiplier and shift. */
void npu_finish16(const int64_t *sums, int32_t n, int32_t c0, const int64_t *bias, int saturate,
                  const int32_t *mult, const int32_t *shift, int32_t per_channel, int32_t lo, int32_t hi,
                  int16_t *out);

#if INT16_LANES
/* The int16 x int16 convolution of one group (c->groups 1; c->filter unused) from its filter
   split as w = 256 * hi + lo and packed by npu_pack_split, TILE pixels at a time in int32
   lanes (int16_kernels.c). 0, or NPU_KERNEL_NO_MEMORY. */
int npu_conv16x16_tiles(const struct npu_conv16_call *c, int64_t k, const int16_t *packed_hi,
                        const int16_t *packed_lo);

/* The int16 x int16 depthwise convolution (depth multiplier 1, at most 256 taps; c->filter
   unused) of the int16 filter (kh, kw, cout), split as npu_conv16x16_tiles's (int16_kernels.c). */
int npu_depthwise16x16_lanes(const struct npu_conv16_call *c, const int16_t *filter);
#endif

/* An int16 filter (cout x k, row-major) as npu_pack_pairs packs it, in two parts: hi[] of
   w >> 8 (in [-128, 127]) and lo[] of w & 0xFF (in [0, 255]), w = 256 * hi + lo; each
   npu_packed_pairs_size elements, 64-byte aligned. */
void npu_pack_split(const int16_t *filter, int32_t cout, int64_t k, int16_t *hi, int16_t *lo);

#endif
