/* What the int16 kernels share (int16_kernels.c, int16x16_kernels.c): the requantization,
   and the convolution's pixel loop over a filter packed as int16 pairs. */
#ifndef NPU_INT16_COMMON_H
#define NPU_INT16_COMMON_H

#include <stdint.h>

/* The AVX-512 lanes of the int16 kernels, in every file that includes this one (binary16_kernels.c
   lost them for months when it was split from int16_kernels.c, which alone defined this). */
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)
#define INT16_LANES 1
#endif

/* Include int8_kernels.h first (NPU_KERNEL_BAD_SHIFT): it has no include guard (cffi reads it). */

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

#endif
