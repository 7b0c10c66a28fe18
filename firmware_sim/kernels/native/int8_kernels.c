/*
 * The compute cores' int8 inner loops in C: depthwise convolution and fully connected.
 *
 * Same arithmetic as TFLite's reference kernels (reference_integer_ops::
 * DepthwiseConvPerChannel and FullyConnected): int32 accumulation of
 * (input + input_offset) * filter, int32 bias, requantization, output offset, clamp.
 * Built with -fwrapv, so int32 overflow wraps exactly as TFLite's int32 arithmetic does
 * on x86 (the order of a wrapping sum does not change its result, which lets the loops
 * run along channels instead of TFLite's taps-innermost order).
 *
 * Every array is C-contiguous; the Python side checks shapes and parameter ranges.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "int8_kernels.h"

#if defined(__AVX512F__)
#include <immintrin.h>      /* -march=native: the AVX-512 paths below, where the CPU has it */
#endif

static inline int8_t clamp_s8(int32_t v, int32_t lo, int32_t hi)
{
    return (int8_t)(v < lo ? lo : v > hi ? hi : v);
}

/*
 * Per-thread scratch memory, kept from call to call: a small model's job is dozens of
 * kernel calls of a few hundred nanoseconds each, and their mallocs and frees were a fifth
 * of its kernel time (glibc consolidating the freed chunks; measured 2026-11-29 with perf
 * on mww-okay-nabu's replay, 51 tasks: malloc/free 22%, the requantization tables 12%).
 * A kernel takes its buffers one after the other from one arena (64-byte aligned, contents
 * undefined) and gives them all back before it returns; the next call reuses the same
 * bytes, still in the caches, as malloc's reuse of just-freed chunks did. A request that
 * does not fit is allocated on its own, and once the arena is empty again it grows to what
 * the call wanted, up to SCRATCH_KEEP bytes (beyond that, per call as before).
 * Thread-local: a graph job's helper thread has its own.
 */
#define SCRATCH_KEEP ((size_t)4 << 20)

static __thread struct scratch_arena {
    char *base;
    size_t cap, used;
    int held;           /* buffers taken from it and not given back yet */
    size_t wanted;      /* bytes taken since it was last empty, in it or not */
} scratch;

/* Declared like malloc and kept out of line, so that the compiler knows its buffers alias
   nothing else (inlined, they all came from one base: the depthwise loop reloaded its
   pointers after each store, KWS 6% slower). */
__attribute__((malloc, noinline))
static void *scratch_take(size_t bytes)
{
    bytes = bytes ? (bytes + 63) / 64 * 64 : 64;
    scratch.wanted += bytes;
    if (scratch.used + bytes <= scratch.cap) {
        void *p = scratch.base + scratch.used;
        scratch.used += bytes;
        scratch.held++;
        return p;
    }
    return aligned_alloc(64, bytes);
}

/* Give back a scratch_take's buffer (NULL: nothing); a call gives back every buffer it took
   before it returns, in any order. Once the arena holds nothing, it grows to what was wanted. */
static void scratch_give(void *p)
{
    char *c = p;
    if (!c)
        return;
    if (c < scratch.base || c >= scratch.base + scratch.cap) {
        free(p);
    } else {
        if ((size_t)(c - scratch.base) < scratch.used)
            scratch.used = (size_t)(c - scratch.base);
        scratch.held--;
    }
    if (scratch.held > 0)
        return;
    scratch.used = 0;
    const size_t grow = scratch.wanted < SCRATCH_KEEP ? scratch.wanted : SCRATCH_KEEP;
    scratch.wanted = 0;
    if (grow > scratch.cap) {
        free(scratch.base);
        scratch.base = aligned_alloc(64, grow);
        scratch.cap = scratch.base ? grow : 0;
    }
}

/* Per-channel requantization constants, in the form the vectorized loop wants. */
struct requant {
    int32_t *mult, *left, *right;
    int32_t *mask, *half;       /* 2**right - 1 and its half: the rounding's remainder test */
    int any_left, any_min;      /* some left shift; some multiplier INT32_MIN (the saturating case) */
    int kept;                   /* the tables belong to requant_kept (not the call's scratch) */
};

/*
 * The tables of a small model's layers, kept per thread (as the VNNI GEMM keeps packed
 * filters): building them was 8% of mww-okay-nabu's kernel time once the mallocs were gone.
 * An entry is found by the arrays' addresses and sizes and used only if the arrays still
 * hold the bytes it was built from (a client may rewrite its weights in place). Only tables
 * of up to REQUANT_KEEP_N entries are kept (a large layer's own work dwarfs building them).
 */
#define REQUANT_ENTRIES 32
#define REQUANT_KEEP_N 1024

static __thread struct requant_entry {
    const int32_t *mult_at, *shift_at;
    int32_t per_channel, n, channels, given;    /* given: the multipliers (and shifts) compared */
    int32_t *copy;              /* the tables (5 n), then the multipliers and shifts as given */
    struct requant q;
} requant_kept[REQUANT_ENTRIES];
static __thread int requant_next;

static int requant_build(struct requant *q, const int32_t *mult, const int32_t *shift,
                         int32_t per_channel, int32_t n, int32_t channels);

/* The constants of `channels` channels repeated to fill n entries (n a multiple of
   channels), so one requant_store call covers several output pixels of few channels;
   give them back with requant_done. */
static int requant_init_tiled(struct requant *q, const int32_t *mult, const int32_t *shift,
                              int32_t per_channel, int32_t n, int32_t channels)
{
    const int32_t given = per_channel ? (channels < n ? channels : n) : 1;
    const size_t given_bytes = sizeof(int32_t) * (size_t)given;
    for (int i = 0; i < REQUANT_ENTRIES; i++) {
        struct requant_entry *e = &requant_kept[i];
        if (e->copy && e->mult_at == mult && e->shift_at == shift && e->per_channel == per_channel &&
            e->n == n && e->channels == channels && e->given == given &&
            !memcmp(e->copy + 5 * (size_t)n, mult, given_bytes) &&
            !memcmp(e->copy + 5 * (size_t)n + given, shift, given_bytes)) {
            *q = e->q;
            return 0;
        }
    }
    if (n > REQUANT_KEEP_N)
        return requant_build(q, mult, shift, per_channel, n, channels);
    struct requant_entry *e = &requant_kept[requant_next];
    int32_t *copy = realloc(e->copy, sizeof(int32_t) * (5 * (size_t)n + 2 * (size_t)given));
    if (!copy)
        return requant_build(q, mult, shift, per_channel, n, channels);
    e->copy = NULL;             /* not an entry until it is complete */
    struct requant built;
    int status = requant_build(&built, mult, shift, per_channel, n, channels);
    if (status != 0) {
        free(copy);
        return status;
    }
    memcpy(copy, built.mult, sizeof(int32_t) * 5 * (size_t)n);
    scratch_give(built.mult);
    memcpy(copy + 5 * (size_t)n, mult, given_bytes);
    memcpy(copy + 5 * (size_t)n + given, shift, given_bytes);
    built.mult = copy;
    built.left = copy + n;
    built.right = copy + 2 * (size_t)n;
    built.mask = copy + 3 * (size_t)n;
    built.half = copy + 4 * (size_t)n;
    built.kept = 1;
    *e = (struct requant_entry){mult, shift, per_channel, n, channels, given, copy, built};
    requant_next = (requant_next + 1) % REQUANT_ENTRIES;
    *q = built;
    return 0;
}

/* The end of a requant_init_tiled's tables. */
static void requant_done(struct requant *q)
{
    if (!q->kept)
        scratch_give(q->mult);
}

static int requant_build(struct requant *q, const int32_t *mult, const int32_t *shift,
                         int32_t per_channel, int32_t n, int32_t channels)
{
    q->mult = scratch_take(sizeof(int32_t) * (size_t)n * 5);
    if (!q->mult)
        return NPU_KERNEL_NO_MEMORY;
    q->left = q->mult + n;
    q->right = q->mult + 2 * (size_t)n;
    q->mask = q->mult + 3 * (size_t)n;
    q->half = q->mult + 4 * (size_t)n;
    q->any_left = q->any_min = q->kept = 0;
    /* One period of channels (all n entries when there are fewer), then copies of it. */
    const int32_t first = channels < n ? channels : n;
    for (int32_t c = 0; c < first; c++) {
        int32_t i = per_channel ? c : 0;
        if (shift[i] < -31 || shift[i] > 30) {
            scratch_give(q->mult);
            return NPU_KERNEL_BAD_SHIFT;
        }
        q->mult[c] = mult[i];
        q->left[c] = shift[i] > 0 ? shift[i] : 0;
        q->right[c] = shift[i] > 0 ? 0 : -shift[i];
        q->mask[c] = (int32_t)((UINT32_C(1) << q->right[c]) - 1);
        q->half[c] = q->mask[c] >> 1;
        q->any_left |= q->left[c] != 0;
        q->any_min |= mult[i] == INT32_MIN;
    }
    for (int32_t *row = q->mult; row < q->mult + 5 * (size_t)n; row += n)
        for (int32_t c = first; c < n; c += first)
            memcpy(row + c, row, sizeof(int32_t) * (size_t)(n - c < first ? n - c : first));
    return 0;
}

/*
 * MultiplyByQuantizedMultiplier + output offset + clamp over n channels, written without
 * branches or divisions so the compiler vectorizes it. gemmlowp's
 * (ab + nudge) / 2**31 (truncating, nudge = ab >= 0 ? 2**30 : 1 - 2**30) equals
 * floor((ab + 2**30) / 2**31) for every ab, which is an arithmetic shift.
 */
static void requant_store(const int32_t *restrict acc, int32_t n, const struct requant *q,
                          int32_t output_offset, int32_t act_min, int32_t act_max,
                          int8_t *restrict out)
{
    /* restrict: an int8 store may alias anything, which would stop vectorization. */
    const int32_t *restrict mult = q->mult, *restrict left = q->left, *restrict right = q->right;
    int32_t c = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    /* The same arithmetic 16 lanes at a time, the last lanes masked: GCC's vectorized loop
       leaves n % 64 values (56 of a 120-channel row) to a scalar tail that cost more than
       the rest. vpmuldq forms the exact int64 products of the even lanes, then the odd. */
    const __m512i one = _mm512_set1_epi32(1), int_min = _mm512_set1_epi32(INT32_MIN);
    const __m512i nudge = _mm512_set1_epi64(INT64_C(1) << 30), zero = _mm512_setzero_si512();
    const __m512i offset = _mm512_set1_epi32(output_offset);
    const __m512i lo = _mm512_set1_epi32(act_min), hi = _mm512_set1_epi32(act_max);
    for (; c < n; c += 16) {
        const __mmask16 k = n - c >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - c)) - 1);
        __m512i x = _mm512_maskz_loadu_epi32(k, acc + c);
        if (q->any_left)            /* loop-invariant: most layers only shift right */
            x = _mm512_sllv_epi32(x, _mm512_maskz_loadu_epi32(k, left + c));
        const __m512i m = _mm512_maskz_loadu_epi32(k, mult + c);
        const __m512i even = _mm512_srai_epi64(_mm512_add_epi64(_mm512_mul_epi32(x, m), nudge), 31);
        const __m512i odd = _mm512_srai_epi64(_mm512_add_epi64(
            _mm512_mul_epi32(_mm512_srli_epi64(x, 32), _mm512_srli_epi64(m, 32)), nudge), 31);
        __m512i high = _mm512_mask_blend_epi32((__mmask16)0xAAAA, even, _mm512_slli_epi64(odd, 32));
        if (q->any_min) {
            const __mmask16 both_min = _mm512_cmpeq_epi32_mask(x, int_min) & _mm512_cmpeq_epi32_mask(m, int_min);
            high = _mm512_mask_mov_epi32(high, both_min, _mm512_set1_epi32(INT32_MAX));
        }
        const __m512i e = _mm512_maskz_loadu_epi32(k, right + c);
        const __m512i mask = _mm512_maskz_loadu_epi32(k, q->mask + c);
        __m512i threshold = _mm512_maskz_loadu_epi32(k, q->half + c);
        threshold = _mm512_mask_add_epi32(threshold, _mm512_cmplt_epi32_mask(high, zero), threshold, one);
        __m512i v = _mm512_srav_epi32(high, e);
        v = _mm512_mask_add_epi32(v, _mm512_cmpgt_epi32_mask(_mm512_and_si512(high, mask), threshold), v, one);
        v = _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(v, offset), lo), hi);
        _mm_mask_storeu_epi8(out + c, k, _mm512_cvtepi32_epi8(v));
    }
#endif
    for (; c < n; c++) {
        int32_t x = (int32_t)((uint32_t)acc[c] << left[c]);
        int32_t m = mult[c];
        int64_t ab = (int64_t)x * (int64_t)m;
        int32_t high = (int32_t)((ab + (INT64_C(1) << 30)) >> 31);
        high = (x == INT32_MIN && m == INT32_MIN) ? INT32_MAX : high;
        int32_t e = right[c];
        int32_t mask = (int32_t)((UINT32_C(1) << e) - 1);
        int32_t threshold = (mask >> 1) + (high < 0);
        int32_t v = (high >> e) + ((high & mask) > threshold) + output_offset;
        v = v < act_min ? act_min : v;
        v = v > act_max ? act_max : v;
        out[c] = (int8_t)v;
    }
}

/* acc[i] += (x[i] + offset) * f[i]: |x + offset| <= 255 and |f| <= 128, so each product
   fits int16 (a 16-bit multiply); the int32 sums wrap like TFLite's. restrict: the int8
   operands may otherwise alias acc, which stops vectorization. */
static inline void dw_taps(int32_t *restrict acc, const int8_t *restrict x,
                           const int8_t *restrict f, int64_t n, int32_t input_offset)
{
    for (int64_t i = 0; i < n; i++)
        acc[i] += (int16_t)((int16_t)(x[i] + input_offset) * f[i]);
}

#if defined(__AVX512BW__)
/*
 * Depthwise convolution, 32 channel-pixels at a time in registers across all the taps (the
 * portable loops below keep their sums in memory, one pass per tap).
 * vpmaddwd multiplies int16 pairs and adds each pair into an int32: the pairs are two taps
 * of one channel-pixel, interleaved by vpunpck{l,h}wd, which leaves the sums in an order
 * that one permutation undoes at the end. The input is first laid out once, padded with
 * the zero point (whose taps then add exactly 0, as TFLite's skipped taps do), each
 * channel repeated `dm` times (the depth multiplier) and split into `stride_w` column
 * phases, so every tap of an output row reads one contiguous run.
 * The int32 sums wrap as the scalar loop's do (a wrapping sum's order does not matter).
 * Returns 0 or NPU_KERNEL_NO_MEMORY.
 */
static int depthwise_pairs_avx512(const int8_t *x, int32_t n, int32_t h, int32_t w, int32_t cin,
                                  const int8_t *filter, int32_t kh, int32_t kw, int32_t dm,
                                  const int32_t *bias,
                                  int32_t stride_h, int32_t stride_w, int32_t dil_h, int32_t dil_w,
                                  int32_t pad_top, int32_t pad_left, int32_t out_h, int32_t out_w,
                                  int32_t input_offset, int32_t output_offset, const struct requant *q,
                                  int32_t act_min, int32_t act_max, int8_t *out)
{
    if (n <= 0 || out_h <= 0 || out_w <= 0 || cin <= 0 || dm <= 0)
        return 0;                                   /* nothing to write */
    /* With a depth multiplier the padded input holds each channel dm times, so output
       channel c * dm + m meets its input channel c in its own lane. */
    const int64_t ch = (int64_t)cin * dm;
    const int64_t row = (int64_t)out_w * ch, chunks = (row + 31) / 32, taps = (int64_t)kh * kw;
    const int64_t pairs = (taps + 1) / 2;
    /* Along a row, channel c of pixel ox is element ox * ch + c: the filter and bias repeat
       every lcm(ch, 32) elements, so `period` chunks of 32 hold them for the whole row. */
    int64_t period = ch;
    while (period % 32)
        period += ch;
    period /= 32;
    /* A row of fewer chunks (one output column: a keyword spotter's 49x1 layers, 120
       channels, 4 chunks against a period of 15) needs only its own: k never wraps. */
    if (period > chunks)
        period = chunks;
    /* The padded input: rows and columns that some tap reads, column phases side by side. */
    const int64_t hp = (int64_t)(out_h - 1) * stride_h + (int64_t)(kh - 1) * dil_h + 1;
    const int64_t wp = (int64_t)(out_w - 1) * stride_w + (int64_t)(kw - 1) * dil_w + 1;
    const int64_t wq = (wp + stride_w - 1) / stride_w;              /* columns per phase */
    const int64_t plane = hp * wq * ch;
    /* + 64: the last chunk of a row reads up to 31 bytes past it (into lanes never stored) */
    int8_t *phases = scratch_take((size_t)(plane * stride_w + 64));
    int16_t *fpairs = scratch_take((size_t)(pairs * period * 128));
    int32_t *acc_row = scratch_take(sizeof(int32_t) * (size_t)(chunks * 32));
    int32_t *bias_row = scratch_take(sizeof(int32_t) * (size_t)(period * 32));
    int16_t *fa = scratch_take(sizeof(int16_t) * (size_t)(period * 32 * (pairs * 2)));
    const int8_t **src = scratch_take(sizeof(*src) * (size_t)(pairs * 2));
    int result = NPU_KERNEL_NO_MEMORY;
    if (!phases || !fpairs || !acc_row || !bias_row || !fa || !src)
        goto release;                               /* what was taken goes back, as after the work */
    memset(phases + plane * stride_w, 0, 64);
    /* Each tap's filter and the bias over `period` chunks (the missing tap of an odd pair is
       zeros), then the filter pairs interleaved as the input will be: (tap 2p, tap 2p + 1). */
    for (int64_t t = 0; t < pairs * 2; t++) {
        int16_t *tap_row = fa + t * period * 32;
        for (int64_t c = 0; c < ch && c < period * 32; c++)
            tap_row[c] = t < taps ? filter[t * ch + c] : 0;
        for (int64_t e = ch; e < period * 32; e += ch)
            memcpy(tap_row + e, tap_row, sizeof(int16_t) * (size_t)(period * 32 - e < ch ? period * 32 - e : ch));
    }
    for (int64_t c = 0; c < ch && c < period * 32; c++)
        bias_row[c] = bias ? bias[c] : 0;
    for (int64_t e = ch; e < period * 32; e += ch)
        memcpy(bias_row + e, bias_row, sizeof(int32_t) * (size_t)(period * 32 - e < ch ? period * 32 - e : ch));
    for (int64_t p = 0; p < pairs; p++)
        for (int64_t k = 0; k < period; k++) {
            const __m512i va = _mm512_load_si512(fa + (2 * p * period + k) * 32);
            const __m512i vb = _mm512_load_si512(fa + ((2 * p + 1) * period + k) * 32);
            _mm512_store_si512(fpairs + (p * period + k) * 64, _mm512_unpacklo_epi16(va, vb));
            _mm512_store_si512(fpairs + (p * period + k) * 64 + 32, _mm512_unpackhi_epi16(va, vb));
        }
    const int8_t zero_point = (int8_t)(-input_offset);
    const __m512i offset = _mm512_set1_epi16((int16_t)input_offset);
    const __m512i first = _mm512_set_epi32(23, 22, 21, 20, 7, 6, 5, 4, 19, 18, 17, 16, 3, 2, 1, 0);
    const __m512i second = _mm512_set_epi32(31, 30, 29, 28, 15, 14, 13, 12, 27, 26, 25, 24, 11, 10, 9, 8);
    for (int32_t b = 0; b < n; b++) {
        const int8_t *image = x + (int64_t)b * h * w * cin;
        for (int64_t r = 0; r < hp; r++) {
            const int64_t iy = r - pad_top;
            for (int64_t phase = 0; phase < stride_w; phase++) {
                int8_t *dst = phases + phase * plane + r * wq * ch;
                if (iy < 0 || iy >= h) {
                    memset(dst, zero_point, (size_t)(wq * ch));
                    continue;
                }
                const int8_t *line = image + iy * w * cin;
                for (int64_t j = 0, ix = phase - pad_left; j < wq; j++, ix += stride_w, dst += ch) {
                    if (ix < 0 || ix >= w) {
                        memset(dst, zero_point, (size_t)ch);
                    } else if (dm > 1) {
                        for (int64_t c = 0; c < cin; c++)
                            memset(dst + c * dm, line[ix * cin + c], (size_t)dm);
                    } else if (stride_w == 1) {              /* the rest of the line in one copy */
                        const int64_t run = (w - ix < wq - j ? w - ix : wq - j);
                        memcpy(dst, line + ix * cin, (size_t)(run * cin));
                        j += run - 1;
                        ix += run - 1;
                        dst += (run - 1) * cin;
                    } else {
                        memcpy(dst, line + ix * cin, (size_t)cin);
                    }
                }
            }
        }
        for (int32_t oy = 0; oy < out_h; oy++) {
            for (int64_t t = 0; t < pairs * 2; t++) {
                const int64_t tap = t < taps ? t : 0;       /* the zero half of an odd pair */
                const int64_t fy = tap / kw, fx = tap % kw, col = fx * dil_w;
                src[t] = phases + (col % stride_w) * plane +
                         (((int64_t)oy * stride_h + fy * dil_h) * wq + col / stride_w) * ch;
            }
            for (int64_t k = 0, kp = 0; k < chunks; k++, kp = kp + 1 == period ? 0 : kp + 1) {
                __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
                const int16_t *f = fpairs + kp * 64;
                for (int64_t p = 0; p < pairs; p++, f += period * 64) {
                    const __m512i xa = _mm512_add_epi16(
                        _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(src[2 * p] + k * 32))), offset);
                    const __m512i xb = _mm512_add_epi16(
                        _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(src[2 * p + 1] + k * 32))), offset);
                    lo = _mm512_add_epi32(lo, _mm512_madd_epi16(_mm512_unpacklo_epi16(xa, xb),
                                                                _mm512_load_si512(f)));
                    hi = _mm512_add_epi32(hi, _mm512_madd_epi16(_mm512_unpackhi_epi16(xa, xb),
                                                                _mm512_load_si512(f + 32)));
                }
                _mm512_store_si512(acc_row + k * 32, _mm512_add_epi32(
                    _mm512_permutex2var_epi32(lo, first, hi), _mm512_load_si512(bias_row + kp * 32)));
                _mm512_store_si512(acc_row + k * 32 + 16, _mm512_add_epi32(
                    _mm512_permutex2var_epi32(lo, second, hi), _mm512_load_si512(bias_row + kp * 32 + 16)));
            }
            requant_store(acc_row, (int32_t)row, q, output_offset, act_min, act_max,
                          out + ((int64_t)b * out_h + oy) * row);
        }
    }
    result = 0;
release:
    scratch_give(phases);
    scratch_give(fpairs);
    scratch_give(acc_row);
    scratch_give(bias_row);
    scratch_give(fa);
    scratch_give((void *)src);
    return result;
}
#endif

/*
 * Depthwise convolution, NHWC. x (n, h, w, cin); filter (kh, kw, cin * dm): output channel
 * c * dm + q reads input channel c. bias (cin * dm) or NULL. mult/shift have cin * dm
 * entries, or one when per_channel is 0. Taps outside the image are skipped (the same as
 * padding with the input zero point). Returns 0 or an NPU_KERNEL_* code.
 */
int npu_depthwise_s8(const int8_t *x, int32_t n, int32_t h, int32_t w, int32_t cin,
                     const int8_t *filter, int32_t kh, int32_t kw, int32_t dm,
                     const int32_t *bias,
                     int32_t stride_h, int32_t stride_w, int32_t dil_h, int32_t dil_w,
                     int32_t pad_top, int32_t pad_left, int32_t out_h, int32_t out_w,
                     int32_t input_offset, int32_t output_offset,
                     const int32_t *mult, const int32_t *shift, int32_t per_channel,
                     int32_t act_min, int32_t act_max, int8_t *out)
{
    const int32_t cout = cin * dm;
    /* A whole output row is requantized at once (constants tiled out_w times): with few
       channels a per-pixel call would run the loop's scalar tail only. */
    const int64_t row = (int64_t)out_w * cout;
    struct requant q;
    int status = requant_init_tiled(&q, mult, shift, per_channel, (int32_t)row, cout);
    if (status != 0)
        return status;
#if defined(__AVX512BW__)
    /* The loops below are the portable path (and the reference the AVX-512 one was
       checked against through the numpy kernel). */
    status = depthwise_pairs_avx512(x, n, h, w, cin, filter, kh, kw, dm, bias, stride_h, stride_w,
                                    dil_h, dil_w, pad_top, pad_left, out_h, out_w, input_offset,
                                    output_offset, &q, act_min, act_max, out);
    requant_done(&q);
    return status;
#endif
    int32_t *acc_row = malloc(sizeof(int32_t) * (size_t)row);
    int16_t *shifted = malloc(sizeof(int16_t) * (size_t)cin);
    if (!acc_row || !shifted) {
        requant_done(&q);
        free(acc_row);
        free(shifted);
        return NPU_KERNEL_NO_MEMORY;
    }
    /* With one output per input channel, a filter tap reads, for a whole output row, one
       run of input pixels (contiguous at unit column stride, else gathered first): the
       filter is tiled along the row once and each tap is one long multiply-add, which
       vectorizes where per-pixel loops of a few channels do not. */
    int8_t *tiled = NULL, *gathered = NULL;
    if (dm == 1) {
        tiled = malloc((size_t)kh * kw * (size_t)row);
        gathered = malloc((size_t)row);
        if (!tiled || !gathered) {
            free(tiled);
            free(gathered);
            requant_done(&q);
            free(acc_row);
            free(shifted);
            return NPU_KERNEL_NO_MEMORY;
        }
        for (int64_t t = 0; t < (int64_t)kh * kw; t++)
            for (int32_t ox = 0; ox < out_w; ox++)
                memcpy(tiled + t * row + (int64_t)ox * cin, filter + t * cin, (size_t)cin);
    }
    for (int32_t b = 0; b < n; b++) {
        for (int32_t oy = 0; tiled && oy < out_h; oy++) {
            for (int32_t ox = 0; ox < out_w; ox++)
                for (int32_t c = 0; c < cout; c++)
                    acc_row[(int64_t)ox * cout + c] = bias ? bias[c] : 0;
            for (int32_t fy = 0; fy < kh; fy++) {
                int32_t iy = oy * stride_h - pad_top + fy * dil_h;
                if (iy < 0 || iy >= h)
                    continue;
                const int8_t *x_row = x + ((int64_t)b * h + iy) * w * cin;
                for (int32_t fx = 0; fx < kw; fx++) {
                    int32_t off = fx * dil_w - pad_left;          /* ix = ox * stride_w + off */
                    int32_t ox0 = off < 0 ? (-off + stride_w - 1) / stride_w : 0;
                    int32_t ox1 = w - 1 - off < 0 ? 0 : (w - 1 - off) / stride_w + 1;
                    ox1 = ox1 < out_w ? ox1 : out_w;
                    if (ox0 >= ox1)
                        continue;
                    const int8_t *src = x_row + ((int64_t)ox0 * stride_w + off) * cin;
                    if (stride_w != 1) {
                        for (int32_t ox = ox0; ox < ox1; ox++)
                            memcpy(gathered + (int64_t)(ox - ox0) * cin,
                                   x_row + ((int64_t)ox * stride_w + off) * cin, (size_t)cin);
                        src = gathered;
                    }
                    dw_taps(acc_row + (int64_t)ox0 * cin, src,
                            tiled + ((int64_t)fy * kw + fx) * row + (int64_t)ox0 * cin,
                            (int64_t)(ox1 - ox0) * cin, input_offset);
                }
            }
            requant_store(acc_row, (int32_t)row, &q, output_offset, act_min, act_max,
                          out + ((int64_t)b * out_h + oy) * row);
        }
        for (int32_t oy = 0; !tiled && oy < out_h; oy++) {
            for (int32_t ox = 0; ox < out_w; ox++) {
                int32_t *acc = acc_row + (int64_t)ox * cout;
                for (int32_t c = 0; c < cout; c++)
                    acc[c] = bias ? bias[c] : 0;
                for (int32_t fy = 0; fy < kh; fy++) {
                    int32_t iy = oy * stride_h - pad_top + fy * dil_h;
                    if (iy < 0 || iy >= h)
                        continue;
                    for (int32_t fx = 0; fx < kw; fx++) {
                        int32_t ix = ox * stride_w - pad_left + fx * dil_w;
                        if (ix < 0 || ix >= w)
                            continue;
                        const int8_t *xp = x + (((int64_t)b * h + iy) * w + ix) * cin;
                        const int8_t *fp = filter + ((int64_t)fy * kw + fx) * cout;
                        if (dm == 1) {
                            dw_taps(acc, xp, fp, cin, input_offset);
                        } else {
                            for (int32_t c = 0; c < cin; c++)
                                shifted[c] = (int16_t)(xp[c] + input_offset);
                            for (int32_t c = 0; c < cin; c++)
                                for (int32_t m = 0; m < dm; m++)
                                    acc[c * dm + m] += (int16_t)(shifted[c] * fp[c * dm + m]);
                        }
                    }
                }
            }
            requant_store(acc_row, (int32_t)row, &q, output_offset, act_min, act_max,
                          out + ((int64_t)b * out_h + oy) * row);
        }
    }
    requant_done(&q);
    free(acc_row);
    free(shifted);
    free(tiled);
    free(gathered);
    return 0;
}

/* One rounding of x * m / 2**(31 - shift), ties away from zero, wrapped to int32. */
static inline int32_t requantize_round_away(int32_t x, int32_t m, int32_t shift)
{
    int total = 31 - shift;
    int64_t p = (int64_t)x * (int64_t)m;
    int64_t half = INT64_C(1) << (total - 1);
    int64_t mag = ((p < 0 ? -p : p) + half) >> total;
    return (int32_t)(uint32_t)(uint64_t)(p < 0 ? -mag : mag);
}

/* LiteRT's FC reference requantization: (int32)round(acc * scale); out of range gives
   INT32_MIN, as x86's double-to-int conversion does. */
static inline int32_t requantize_double(int32_t acc, double scale)
{
    double v = round((double)acc * scale);
    if (!(v >= -2147483648.0 && v <= 2147483647.0))
        return INT32_MIN;
    return (int32_t)v;
}

/* Dot products of k int16 values (input + offset) with k int8 weights, int32 wrapping:
   one input row, or four rows sharing each weight load. */
static inline int32_t dot_s16_s8(const int16_t *a, const int8_t *b, int32_t k)
{
    int32_t sum = 0;
    for (int32_t i = 0; i < k; i++)
        sum += (int32_t)a[i] * b[i];
    return sum;
}

/* One input row against four weight rows: four independent sums, so the vector
   multiply-adds do not wait on each other (one sum per row is latency-bound). */
static inline void dot_s16_s8x4(const int16_t *a, const int8_t *b, int64_t stride, int32_t k,
                                int32_t sums[4])
{
    const int8_t *b0 = b, *b1 = b + stride, *b2 = b + 2 * stride, *b3 = b + 3 * stride;
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int32_t i = 0; i < k; i++) {
        int32_t av = a[i];
        s0 += av * b0[i];
        s1 += av * b1[i];
        s2 += av * b2[i];
        s3 += av * b3[i];
    }
    sums[0] = s0, sums[1] = s1, sums[2] = s2, sums[3] = s3;
}

static inline void dot4_s16_s8(const int16_t *a, int32_t k, const int8_t *b, int32_t sums[4])
{
    const int16_t *a0 = a, *a1 = a + k, *a2 = a + 2 * (int64_t)k, *a3 = a + 3 * (int64_t)k;
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int32_t i = 0; i < k; i++) {
        int16_t wv = b[i];
        s0 += (int32_t)a0[i] * wv;
        s1 += (int32_t)a1[i] * wv;
        s2 += (int32_t)a2[i] * wv;
        s3 += (int32_t)a3[i] * wv;
    }
    sums[0] = s0, sums[1] = s1, sums[2] = s2, sums[3] = s3;
}

static inline int8_t fc_output(int32_t acc, int32_t o, const int32_t *bias,
                               const int32_t *mult, const int32_t *shift, const double *scale,
                               int32_t per_channel, int32_t output_offset,
                               int32_t act_min, int32_t act_max)
{
    if (bias)
        acc += bias[o];
    int32_t i = per_channel ? o : 0;
    int32_t v = scale ? requantize_double(acc, scale[i])
                      : requantize_round_away(acc, mult[i], shift[i]);
    return clamp_s8((int32_t)((uint32_t)v + (uint32_t)output_offset), act_min, act_max);
}

/*
 * Fully connected: out (rows, n) = requant((x + input_offset) @ w.T + bias).
 * x (rows, k); w (n, k). mult/shift (and scale) have n entries, or one when per_channel
 * is 0. With scale non-NULL the requantization is LiteRT's double arithmetic, otherwise
 * the fixed-point multiplier and shift with one rounding, ties away from zero.
 * Input rows go four at a time, so each weight row is read once per four inputs; a
 * single row goes against four weight rows at a time.
 * Returns 0 or an NPU_KERNEL_* code.
 */
int npu_fully_connected_s8(const int8_t *x, int32_t rows, int32_t k,
                           const int8_t *w, int32_t n, const int32_t *bias,
                           int32_t input_offset, int32_t output_offset,
                           const int32_t *mult, const int32_t *shift, const double *scale,
                           int32_t per_channel, int32_t act_min, int32_t act_max, int8_t *out)
{
    if (!scale)
        for (int32_t o = 0; o < (per_channel ? n : 1); o++)
            if (shift[o] < -31 || shift[o] > 30)
                return NPU_KERNEL_BAD_SHIFT;
    int16_t *shifted = malloc(sizeof(int16_t) * 4 * (size_t)(k > 0 ? k : 1));
    if (!shifted)
        return NPU_KERNEL_NO_MEMORY;
    int32_t r = 0;
    for (; r + 4 <= rows; r += 4) {
        for (int64_t i = 0; i < 4 * (int64_t)k; i++)
            shifted[i] = (int16_t)(x[(int64_t)r * k + i] + input_offset);
        for (int32_t o = 0; o < n; o++) {
            int32_t sums[4];
            dot4_s16_s8(shifted, k, w + (int64_t)o * k, sums);
            for (int32_t j = 0; j < 4; j++)
                out[(int64_t)(r + j) * n + o] = fc_output(sums[j], o, bias, mult, shift, scale,
                                                          per_channel, output_offset,
                                                          act_min, act_max);
        }
    }
    for (; r < rows; r++) {
        const int8_t *xr = x + (int64_t)r * k;
        for (int32_t i = 0; i < k; i++)
            shifted[i] = (int16_t)(xr[i] + input_offset);
        int8_t *orow = out + (int64_t)r * n;
        int32_t o = 0;
        for (; o + 4 <= n; o += 4) {
            int32_t sums[4];
            dot_s16_s8x4(shifted, w + (int64_t)o * k, k, k, sums);
            for (int32_t j = 0; j < 4; j++)
                orow[o + j] = fc_output(sums[j], o + j, bias, mult, shift, scale, per_channel,
                                        output_offset, act_min, act_max);
        }
        for (; o < n; o++)
            orow[o] = fc_output(dot_s16_s8(shifted, w + (int64_t)o * k, k), o, bias, mult, shift,
                                scale, per_channel, output_offset, act_min, act_max);
    }
    free(shifted);
    return 0;
}

int npu_avg_pool_s8(const int8_t *x, int32_t n, int32_t h, int32_t w, int32_t c,
                    int32_t fh, int32_t fw, int32_t sh, int32_t sw, int32_t pt, int32_t pl,
                    int32_t oh, int32_t ow, int32_t act_min, int32_t act_max, int8_t *out)
{
    int64_t *acc = malloc(sizeof(int64_t) * (size_t)(c > 0 ? c : 1));
    if (!acc)
        return NPU_KERNEL_NO_MEMORY;
    for (int32_t b = 0; b < n; b++)
        for (int32_t oy = 0; oy < oh; oy++) {
            int32_t y0 = oy * sh - pt, y1 = y0 + fh;
            y0 = y0 < 0 ? 0 : y0;
            y1 = y1 > h ? h : y1;
            for (int32_t ox = 0; ox < ow; ox++) {
                int32_t x0 = ox * sw - pl, x1 = x0 + fw;
                x0 = x0 < 0 ? 0 : x0;
                x1 = x1 > w ? w : x1;
                int64_t count = (int64_t)(y1 - y0) * (x1 - x0);
                if (y1 <= y0 || x1 <= x0) {
                    free(acc);
                    return NPU_KERNEL_EMPTY_WINDOW;
                }
                for (int32_t ch = 0; ch < c; ch++)
                    acc[ch] = 0;
                for (int32_t iy = y0; iy < y1; iy++)
                    for (int32_t ix = x0; ix < x1; ix++) {
                        const int8_t *xp = x + (((int64_t)b * h + iy) * w + ix) * c;
                        for (int32_t ch = 0; ch < c; ch++)
                            acc[ch] += xp[ch];
                    }
                int8_t *op = out + (((int64_t)b * oh + oy) * ow + ox) * c;
                for (int32_t ch = 0; ch < c; ch++) {
                    int64_t num = acc[ch] > 0 ? acc[ch] + count / 2 : acc[ch] - count / 2;
                    op[ch] = clamp_s8((int32_t)(num / count), act_min, act_max);
                }
            }
        }
    free(acc);
    return 0;
}

/* Max pooling, NHWC, over the in-image part of each window, clamped to the activation
   range. Returns NPU_KERNEL_EMPTY_WINDOW if a window misses the image. */
int npu_max_pool_s8(const int8_t *x, int32_t n, int32_t h, int32_t w, int32_t c,
                    int32_t fh, int32_t fw, int32_t sh, int32_t sw, int32_t pt, int32_t pl,
                    int32_t oh, int32_t ow, int32_t act_min, int32_t act_max, int8_t *out)
{
    /* Its own accumulator, not the output: an output overlapping the input must not feed
       the windows after it (numpy's kernel reads the whole input first). */
    int8_t *restrict acc = malloc((size_t)(c > 0 ? c : 1));
    if (!acc)
        return NPU_KERNEL_NO_MEMORY;
    for (int32_t b = 0; b < n; b++)
        for (int32_t oy = 0; oy < oh; oy++) {
            int32_t y0 = oy * sh - pt, y1 = y0 + fh;
            y0 = y0 < 0 ? 0 : y0;
            y1 = y1 > h ? h : y1;
            for (int32_t ox = 0; ox < ow; ox++) {
                int32_t x0 = ox * sw - pl, x1 = x0 + fw;
                x0 = x0 < 0 ? 0 : x0;
                x1 = x1 > w ? w : x1;
                if (y1 <= y0 || x1 <= x0) {
                    free(acc);
                    return NPU_KERNEL_EMPTY_WINDOW;
                }
                for (int32_t ch = 0; ch < c; ch++)
                    acc[ch] = INT8_MIN;
                for (int32_t iy = y0; iy < y1; iy++)
                    for (int32_t ix = x0; ix < x1; ix++) {
                        const int8_t *restrict xp = x + (((int64_t)b * h + iy) * w + ix) * c;
                        for (int32_t ch = 0; ch < c; ch++)
                            acc[ch] = xp[ch] > acc[ch] ? xp[ch] : acc[ch];
                    }
                int8_t *op = out + (((int64_t)b * oh + oy) * ow + ox) * c;
                for (int32_t ch = 0; ch < c; ch++)
                    op[ch] = clamp_s8(acc[ch], act_min, act_max);
            }
        }
    free(acc);
    return 0;
}

/* roundf(x / scale), converted as x86 converts (INT32_MIN outside int32 and for NaN),
   + zero point wrapping in int32 as TFLite's C code does, clamped. Written without calls
   or branches so it vectorizes (a roundf call per element ran at 3.6 ns, 100 us for VWW's
   96x96x3 input): roundf(y) is trunc(y) plus or minus one when the remainder y - trunc(y),
   which is exact in float, reaches one half; an infinity's remainder is NaN, so it stays
   as it is. The conversion sees a value clamped into int32 range, and the range test
   picks INT32_MIN outside it. */
void npu_quantize_f32_s8(const float *restrict x, int64_t n, float scale, int32_t zero_point,
                         int8_t *restrict out)
{
    for (int64_t i = 0; i < n; i++) {
        float y = x[i] / scale;
        float t = truncf(y), rest = y - t;
        float q = t + (rest >= 0.5f ? 1.0f : 0.0f) - (rest <= -0.5f ? 1.0f : 0.0f);
        int in_range = q >= -2147483648.0f && q < 2147483648.0f;
        float held = in_range ? q : 0.0f;
        int32_t v = in_range ? (int32_t)held : INT32_MIN;
        v = (int32_t)((uint32_t)v + (uint32_t)zero_point);
        out[i] = clamp_s8(v, -128, 127);
    }
}

void npu_dequantize_s8_f32(const int8_t *restrict x, int64_t n, float scale, int32_t zero_point,
                           float *restrict out)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = (float)((double)scale * ((double)x[i] - (double)zero_point));
}

/* gemmlowp's fixed-point primitives, as kernels/fixedpoint.py and gemmlowp.py write them. */
static inline int32_t srdhm(int32_t a, int32_t b)
{
    if (a == INT32_MIN && b == INT32_MIN)
        return INT32_MAX;
    return (int32_t)(((int64_t)a * b + (INT64_C(1) << 30)) >> 31);
}

static inline int32_t wrap32(int64_t v)
{
    return (int32_t)(uint32_t)(uint64_t)v;
}

static inline int32_t saturating_left_shift(int32_t x, int e)
{
    int64_t threshold = (INT64_C(1) << (31 - e)) - 1;
    return x > threshold ? INT32_MAX : x < -threshold ? INT32_MIN : (int32_t)((uint32_t)x << e);
}

static inline int64_t rounding_divide_by_pot(int64_t x, int e)
{
    int64_t r = x + ((INT64_C(1) << e) >> 1);
    if (e > 0)
        r -= x < 0;
    return r >> e;
}

/* 1 / (1 + a) for a in [0, 1), Q0.31 (Newton-Raphson, three steps). */
static int32_t one_over_one_plus_x(int32_t a)
{
    int64_t s = (int64_t)a + INT32_MAX;
    int64_t v = s + (s >= 0 ? 1 : -1);
    int32_t half = (int32_t)(v >= 0 ? v / 2 : -((-v) / 2));
    int32_t x = wrap32((int64_t)1515870810 + srdhm(half, -1010580540));
    for (int i = 0; i < 3; i++) {
        int32_t one_minus = wrap32((INT64_C(1) << 29) - srdhm(half, x));
        x = wrap32((int64_t)x + saturating_left_shift(srdhm(x, one_minus), 2));
    }
    return saturating_left_shift(x, 1);
}

int npu_softmax_s8(const int8_t *x, int32_t rows, int32_t depth, const int32_t *exp_t,
                   const int32_t *terms_t, const int8_t *valid_t, int8_t *out)
{
    for (int32_t r = 0; r < rows; r++) {
        const int8_t *xr = x + (int64_t)r * depth;
        int8_t *orow = out + (int64_t)r * depth;
        int32_t max = -128;
        for (int32_t i = 0; i < depth; i++)
            max = xr[i] > max ? xr[i] : max;
        uint32_t sum = 0;
        for (int32_t i = 0; i < depth; i++)
            sum += (uint32_t)terms_t[max - xr[i]];
        int clz = sum ? __builtin_clz(sum) : 32;
        int32_t shifted_sum_minus_one =
            (int32_t)((uint32_t)((uint64_t)sum << clz) - UINT32_C(0x80000000));
        int32_t shifted_scale = one_over_one_plus_x(shifted_sum_minus_one);
        int exponent = 12 - clz + 31 - 8;         /* num_bits_over_unit + 31 - 8 */
        if (exponent < 0 || exponent > 31)
            return NPU_KERNEL_BAD_EXPONENT;
        for (int32_t i = 0; i < depth; i++) {
            int32_t below = max - xr[i];
            if (!valid_t[below]) {
                orow[i] = -128;
                continue;
            }
            int64_t unsat = rounding_divide_by_pot(srdhm(shifted_scale, exp_t[below]), exponent);
            int64_t v = unsat - 128;
            orow[i] = (int8_t)(v < -128 ? -128 : v > 127 ? 127 : v);
        }
    }
    return 0;
}

/* AVX-512: 16 lookups per vpgatherdd, each reading the aligned 4 bytes around its entry
   (never past the table's end) and shifting the entry down: 1.5x the scalar loop's speed
   on 16K elements (ResNet-8's ADDs). */
void npu_table2_s8(const int8_t *restrict a, const int8_t *restrict b, int64_t n,
                   const int8_t *restrict table, int8_t *restrict out)
{
    int64_t i = 0;
#if defined(__AVX512F__)
    const __m512i low2 = _mm512_set1_epi32(3), aligned = _mm512_set1_epi32(~3);
    for (; i + 16 <= n; i += 16) {
        const __m512i ia = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(a + i)));
        const __m512i ib = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(b + i)));
        const __m512i index = _mm512_or_si512(_mm512_slli_epi32(ia, 8), ib);
        const __m512i words = _mm512_i32gather_epi32(_mm512_and_si512(index, aligned), (const void *)table, 1);
        const __m512i entries = _mm512_srlv_epi32(words, _mm512_slli_epi32(_mm512_and_si512(index, low2), 3));
        _mm_storeu_si128((__m128i *)(out + i), _mm512_cvtepi32_epi8(entries));
    }
#endif
    for (; i < n; i++)
        out[i] = table[(uint16_t)((uint8_t)a[i] << 8 | (uint8_t)b[i])];
}

/*
 * Convolution, NHWC, grouped: im2col into int8 rows, one oneDNN int8 GEMM per group with
 * exact int32 accumulation (dnnl_gemm_s8s8s32 subtracts the input zero point itself, so
 * padding is filled with the zero point and contributes nothing), then bias and the
 * gemmlowp requantization in the store loop. x (n, h, w, cin); filter (cout, kh, kw,
 * cin / groups); bias (cout) or NULL; mult/shift as npu_depthwise_s8. The caller makes
 * sure no sum can leave int32 (where TFLite would wrap). Returns 0 or an NPU_KERNEL_* code.
 */
#ifdef NPU_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>

/* oneDNN's OpenMP runtime must stay on this thread: a simulated core is one process on a
   shared 2-vCPU machine, where waking a thread pool costs more than the small GEMMs. */
extern void omp_set_num_threads(int) __attribute__((weak));

int npu_have_dnnl(void) { return 1; }

#include "gemm_kernels.h"     /* the VNNI GEMM of small layers */
/* Multiply-adds up to which a convolution runs on that GEMM rather than oneDNN's. Measured
   2026-11-29 (CPU time, 2-vCPU EPYC VM): 49x40 -> 120 1x1 6.2 -> 4.9 us, 16x16x32 3x3 -> 32
   (2.4 M MACs) 22.6 -> 21.3 us, but 28x28x128 -> 256 1x1 (26 M) 219 -> 238 us: oneDNN's
   cache blocking wins on large layers. */
#define VNNI_MAX_MACS (INT64_C(8) << 20)

/* Rows of im2col per GEMM: keeps the int8 rows and int32 results in L2. */
#define CONV_BLOCK_BYTES (256 * 1024)

/* memcpy / memset of one im2col run: a filter row or one tap's channels, often a few
   bytes (KWS's first layer reads one channel: 5,000 one-byte calls per layer) to a few
   dozen. Up to 64 bytes it is one masked move, inlined, as narrow as the run (a 64-byte
   masked store of a few bytes mostly straddles two cache lines, which costs as much as
   the call it replaces). */
static inline void run_copy(int8_t *restrict dst, const int8_t *restrict src, int64_t n)
{
#if defined(__AVX512BW__) && defined(__AVX512VL__)
    if (n <= 16) {
        const __mmask16 k = (__mmask16)((1u << n) - 1);
        _mm_mask_storeu_epi8(dst, k, _mm_maskz_loadu_epi8(k, src));
        return;
    }
    if (n <= 32) {
        const __mmask32 k = n == 32 ? ~(__mmask32)0 : ((__mmask32)1 << n) - 1;
        _mm256_mask_storeu_epi8(dst, k, _mm256_maskz_loadu_epi8(k, src));
        return;
    }
    if (n <= 64) {
        const __mmask64 k = n == 64 ? ~(__mmask64)0 : ((__mmask64)1 << n) - 1;
        _mm512_mask_storeu_epi8(dst, k, _mm512_maskz_loadu_epi8(k, src));
        return;
    }
#endif
    memcpy(dst, src, (size_t)n);
}

static inline void run_fill(int8_t *dst, int8_t value, int64_t n)
{
#if defined(__AVX512BW__) && defined(__AVX512VL__)
    if (n <= 16) {
        _mm_mask_storeu_epi8(dst, (__mmask16)((1u << n) - 1), _mm_set1_epi8(value));
        return;
    }
    if (n <= 64) {
        const __mmask64 k = n == 64 ? ~(__mmask64)0 : ((__mmask64)1 << n) - 1;
        _mm512_mask_storeu_epi8(dst, k, _mm512_set1_epi8(value));
        return;
    }
#endif
    memset(dst, value, (size_t)n);
}

static void im2col_rows(const int8_t *x, int32_t h, int32_t w, int32_t cin, int32_t g,
                        int32_t cin_g, int32_t kh, int32_t kw, int32_t stride_h,
                        int32_t stride_w, int32_t dil_h, int32_t dil_w, int32_t pad_top,
                        int32_t pad_left, int32_t out_w, int64_t p0, int64_t p1,
                        int8_t pad_value, int8_t *cols)
{
    const int64_t k = (int64_t)kh * kw * cin_g, run = (int64_t)kw * cin_g;
    int32_t oy = (int32_t)(p0 / out_w), ox = (int32_t)(p0 % out_w) - 1;
    for (int64_t p = p0; p < p1; p++) {
        if (++ox == out_w) {                  /* the next output pixel, without a division */
            ox = 0;
            oy++;
        }
        int8_t *row = cols + (p - p0) * k;
        const int32_t ix0 = ox * stride_w - pad_left;
        /* The taps of a filter row are one contiguous run of the input row when every
           channel is read and the row lies inside the image: one copy. */
        const int whole_rows = cin_g == cin && dil_w == 1 && ix0 >= 0 && ix0 + kw <= w;
        for (int32_t fy = 0; fy < kh; fy++) {
            const int32_t iy = oy * stride_h - pad_top + fy * dil_h;
            int8_t *dst = row + (int64_t)fy * run;
            if (iy < 0 || iy >= h) {
                run_fill(dst, pad_value, run);
                continue;
            }
            const int8_t *line = x + (int64_t)iy * w * cin + (int64_t)g * cin_g;
            if (whole_rows) {
                run_copy(dst, line + (int64_t)ix0 * cin, run);
                continue;
            }
            for (int32_t fx = 0; fx < kw; fx++, dst += cin_g) {
                const int32_t ix = ix0 + fx * dil_w;
                if (ix < 0 || ix >= w)
                    run_fill(dst, pad_value, cin_g);
                else
                    run_copy(dst, line + (int64_t)ix * cin, cin_g);
            }
        }
    }
}

int npu_conv_s8(const int8_t *x, int32_t n, int32_t h, int32_t w, int32_t cin,
                const int8_t *filter, int32_t cout, int32_t kh, int32_t kw, int32_t groups,
                const int32_t *bias,
                int32_t stride_h, int32_t stride_w, int32_t dil_h, int32_t dil_w,
                int32_t pad_top, int32_t pad_left, int32_t out_h, int32_t out_w,
                int32_t input_offset, int32_t output_offset,
                const int32_t *mult, const int32_t *shift, int32_t per_channel,
                int32_t act_min, int32_t act_max, int8_t *out)
{
    static int single_threaded;
    if (!single_threaded && omp_set_num_threads) {
        omp_set_num_threads(1);
        single_threaded = 1;
    }
    const int32_t cin_g = cin / groups, cout_g = cout / groups;
    const int64_t k = (int64_t)kh * kw * cin_g, pixels = (int64_t)out_h * out_w;
    /* A 1x1 ungrouped filter reading every pixel in order is a GEMM on the input itself. */
    const int direct = kh == 1 && kw == 1 && groups == 1 && stride_h == 1 && stride_w == 1 &&
                       pad_top == 0 && pad_left == 0 && out_h == h && out_w == w;
    /* Pixels per requantization call: at least 64 values, so its loop vectorizes. */
    const int32_t per_store = cout >= 64 ? 1 : (64 + cout - 1) / cout;
    int64_t block = CONV_BLOCK_BYTES / (k + 4 * (int64_t)cout);
    block = block < per_store ? per_store : block > pixels ? pixels : block;
    struct requant q;
    int status = requant_init_tiled(&q, mult, shift, per_channel, per_store * cout, cout);
    if (status != 0)
        return status;
    int8_t *cols = direct ? NULL : scratch_take((size_t)(block * k));
    int32_t *acc = scratch_take(sizeof(int32_t) * (size_t)(block * cout));
    if ((!direct && !cols) || !acc) {
        requant_done(&q);
        scratch_give(cols);
        scratch_give(acc);
        return NPU_KERNEL_NO_MEMORY;
    }
    const int8_t ao = (int8_t)(-input_offset);
    const int32_t no_offset = 0;
    /* The VNNI GEMM's operands: each group's packed filter and accumulator start (bias in). */
    const int64_t cout16 = ((int64_t)cout_g + 15) / 16 * 16, packed_g = (k + 3) / 4 * cout16 * 4;
    struct vnni_packed prepared;
    const int vnni = npu_gemm_vnni_available() && (int64_t)n * pixels * cout * k <= VNNI_MAX_MACS &&
                     npu_gemm_vnni_prepare(filter, cout_g, groups, k, bias, ao, &prepared) != NULL;
    for (int32_t b = 0; b < n && status == 0; b++) {
        const int8_t *image = x + (int64_t)b * h * w * cin;
        for (int64_t p0 = 0; p0 < pixels && status == 0; p0 += block) {
            int64_t p1 = p0 + block < pixels ? p0 + block : pixels, rows = p1 - p0;
            for (int32_t g = 0; g < groups; g++) {
                const int8_t *a = image + p0 * cin;
                if (!direct) {
                    im2col_rows(image, h, w, cin, g, cin_g, kh, kw, stride_h, stride_w, dil_h,
                                dil_w, pad_top, pad_left, out_w, p0, p1, ao, cols);
                    a = cols;
                }
                if (vnni) {
                    npu_gemm_vnni(a, rows, k, k, prepared.packed + g * packed_g, cout_g, prepared.init + g * cout16,
                                  acc + (int64_t)g * cout_g, cout);
                    continue;
                }
                if (dnnl_gemm_s8s8s32('N', 'T', 'F', rows, cout_g, k, 1.0f, a, k, ao,
                                      filter + (int64_t)g * cout_g * k, k, 0, 0.0f,
                                      acc + (int64_t)g * cout_g, cout, &no_offset)
                        != dnnl_success) {
                    status = NPU_KERNEL_DNNL_FAILED;
                    break;
                }
            }
            if (status != 0)
                break;
            if (bias && !vnni)
                for (int64_t r = 0; r < rows; r++)
                    for (int32_t c = 0; c < cout; c++)
                        acc[r * cout + c] = (int32_t)((uint32_t)acc[r * cout + c] + (uint32_t)bias[c]);
            for (int64_t r = 0; r < rows; r += per_store) {
                int64_t count = rows - r < per_store ? rows - r : per_store;
                requant_store(acc + r * cout, (int32_t)(count * cout), &q, output_offset, act_min,
                              act_max, out + ((int64_t)b * pixels + p0 + r) * cout);
            }
        }
    }
    requant_done(&q);
    scratch_give(cols);
    scratch_give(acc);
    return status;
}
#else
int npu_have_dnnl(void) { return 0; }

int npu_conv_s8(const int8_t *x, int32_t n, int32_t h, int32_t w, int32_t cin,
                const int8_t *filter, int32_t cout, int32_t kh, int32_t kw, int32_t groups,
                const int32_t *bias,
                int32_t stride_h, int32_t stride_w, int32_t dil_h, int32_t dil_w,
                int32_t pad_top, int32_t pad_left, int32_t out_h, int32_t out_w,
                int32_t input_offset, int32_t output_offset,
                const int32_t *mult, const int32_t *shift, int32_t per_channel,
                int32_t act_min, int32_t act_max, int8_t *out)
{
    return NPU_KERNEL_NO_DNNL;
}
#endif

int npu_conv_call(const struct npu_conv_call *c)
{
    return npu_conv_s8(c->x, c->n, c->h, c->w, c->cin, c->filter, c->cout, c->kh, c->kw, c->groups,
                       c->bias, c->stride_h, c->stride_w, c->dil_h, c->dil_w, c->pad_top,
                       c->pad_left, c->out_h, c->out_w, c->input_offset, c->output_offset, c->mult,
                       c->shift, c->per_channel, c->act_min, c->act_max, c->out);
}

int npu_depthwise_call(const struct npu_conv_call *c)
{
    return npu_depthwise_s8(c->x, c->n, c->h, c->w, c->cin, c->filter, c->kh, c->kw,
                            c->depth_multiplier, c->bias, c->stride_h, c->stride_w, c->dil_h,
                            c->dil_w, c->pad_top, c->pad_left, c->out_h, c->out_w,
                            c->input_offset, c->output_offset, c->mult, c->shift, c->per_channel,
                            c->act_min, c->act_max, c->out);
}

/* TFLite's MultiplyByQuantizedMultiplier (double rounding): the left shift wraps in int32. */
static inline int32_t mbqm(int32_t x, int32_t m, int32_t shift)
{
    int32_t left = shift > 0 ? shift : 0, right = shift > 0 ? 0 : -shift;
    return (int32_t)rounding_divide_by_pot(srdhm((int32_t)((uint32_t)x << left), m), right);
}

/* One output row's int32 sums (wrapping, as TFLite's int32 accumulator) of lhs row l (d at
   l[d * ld]) minus lzp times rhs (d, col) at r[d * rd + col * rc] minus rzp: along the
   contiguous rhs row when there is one, else one dot product per column. */
static void matmul8_row(const int8_t *l, int64_t ld, const int8_t *r, int64_t rd, int64_t rc, int64_t depth,
                        int64_t cols, int32_t lzp, int32_t rzp, int64_t *acc)
{
    if (rc == 1) {
        memset(acc, 0, sizeof(int64_t) * (size_t)cols);
        for (int64_t d = 0; d < depth; d++) {
            const int32_t a = (int32_t)l[d * ld] - lzp;
            const int8_t *row = r + d * rd;
            for (int64_t col = 0; col < cols; col++)
                acc[col] += a * ((int32_t)row[col] - rzp);
        }
        return;
    }
    for (int64_t col = 0; col < cols; col++) {
        const int8_t *column = r + col * rc;
        int64_t total = 0;
        for (int64_t d = 0; d < depth; d++)
            total += ((int32_t)l[d * ld] - lzp) * ((int32_t)column[d * rd] - rzp);
        acc[col] = total;
    }
}

int npu_matmul8(const struct npu_matmul8_call *c)
{
    if (c->batches < 0 || c->rows < 0 || c->depth < 0 || c->cols < 0)
        return NPU_KERNEL_BAD_STEP;
    if (c->shift < -31 || c->shift > 30)
        return NPU_KERNEL_BAD_SHIFT;
    int64_t *acc = malloc(sizeof(int64_t) * (size_t)(c->cols > 0 ? c->cols : 1));
    if (!acc)
        return NPU_KERNEL_NO_MEMORY;
    for (int64_t b = 0; b < c->batches; b++)
        for (int64_t row = 0; row < c->rows; row++) {
            matmul8_row(c->lhs + c->lhs_at[b] + row * c->lhs_row, c->lhs_depth, c->rhs + c->rhs_at[b], c->rhs_depth,
                        c->rhs_col, c->depth, c->cols, c->lhs_zp, c->rhs_zp, acc);
            int8_t *o = c->out + (b * c->rows + row) * c->cols;
            for (int64_t col = 0; col < c->cols; col++) {
                const int32_t scaled = mbqm((int32_t)(uint32_t)(uint64_t)acc[col], c->multiplier, c->shift);
                o[col] = clamp_s8((int32_t)((uint32_t)scaled + (uint32_t)c->output_zp), c->act_min, c->act_max);
            }
        }
    free(acc);
    return 0;
}

static inline int32_t sat16(int32_t v)
{
    return v < -32768 ? -32768 : v > 32767 ? 32767 : v;
}

/* The integer LSTM of kernels/lstm.py (LiteRT's 8x8->16 cell), one batch row at a time (the
   rows never meet): four int16 gates, each the sum of the saturated requantized input and
   recurrent products (int32 sums that wrap, as LiteRT's), then the cell and hidden updates
   through the 65536-entry logistic / tanh tables. */
int npu_lstm_s8(const struct npu_lstm_call *c)
{
    const int32_t n_in = c->n_input, n_cell = c->n_cell, batch = c->batch;
    for (int32_t g = 0; g < 8; g++)
        if (c->shift[g] < -31 || c->shift[g] > 30)
            return NPU_KERNEL_BAD_SHIFT;
    if (c->hidden_shift < -31 || c->hidden_shift > 30)
        return NPU_KERNEL_BAD_SHIFT;
    int32_t *gate = malloc(sizeof(int32_t) * 4 * (size_t)n_cell);
    if (!gate)
        return NPU_KERNEL_NO_MEMORY;
    memmove(c->h_out, c->h_in, (size_t)batch * n_cell);
    memmove(c->c_out, c->c_in, sizeof(int16_t) * (size_t)batch * n_cell);
    const int cell_update_shift = 30 + c->cell_shift;
    for (int32_t t = 0; t < c->steps; t++) {
        for (int32_t b = 0; b < batch; b++) {
            int64_t row = c->batch_major ? (int64_t)b * c->steps + t : (int64_t)t * batch + b;
            const int8_t *x = c->x + row * n_in;
            int8_t *h = c->h_out + (int64_t)b * n_cell;
            int16_t *cs = c->c_out + (int64_t)b * n_cell;
            for (int32_t g = 0; g < 4; g++) {
                const int8_t *w = c->w + (int64_t)g * n_cell * n_in, *r = c->r + (int64_t)g * n_cell * n_cell;
                for (int32_t j = 0; j < n_cell; j++) {
                    int32_t acc = c->bias[g * n_cell + j], acc_r = c->bias[(4 + g) * n_cell + j];
                    for (int32_t k = 0; k < n_in; k++)
                        acc += (int32_t)x[k] * w[(int64_t)j * n_in + k];
                    for (int32_t k = 0; k < n_cell; k++)
                        acc_r += (int32_t)h[k] * r[(int64_t)j * n_cell + k];
                    int32_t v = sat16(mbqm(acc, c->mult[g], c->shift[g]));
                    gate[g * n_cell + j] = sat16(mbqm(acc_r, c->mult[4 + g], c->shift[4 + g]) + v);
                }
            }
            for (int32_t j = 0; j < n_cell; j++) {
                int32_t i = c->sigmoid[gate[j] + 32768], f = c->sigmoid[gate[n_cell + j] + 32768];
                int32_t g = c->tanh_gate[gate[2 * n_cell + j] + 32768], o = c->sigmoid[gate[3 * n_cell + j] + 32768];
                int32_t forget = (int16_t)rounding_divide_by_pot((int64_t)f * cs[j], 15);
                int32_t update = (int16_t)rounding_divide_by_pot((int64_t)i * g, cell_update_shift);
                int32_t cell = sat16(forget + update);
                if (c->cell_clip > 0)
                    cell = cell < -c->cell_clip ? -c->cell_clip : cell > c->cell_clip ? c->cell_clip : cell;
                cs[j] = (int16_t)cell;
                int32_t hidden = mbqm(o * c->tanh_cell[cell + 32768], c->hidden_mult, c->hidden_shift) + c->hidden_zp;
                h[j] = clamp_s8(hidden, -128, 127);
            }
            memcpy(c->out + row * n_cell, h, (size_t)n_cell);
        }
    }
    free(gate);
    return 0;
}

/* One prepared call per step (int8_kernels.h): the per-step rerun and the one-call replay of
   a whole job go through the same switch, so both run the same kernels on the same structs. */
int npu_step_run(const struct npu_step *step)
{
    const void *p = step->call;
    switch (step->kind) {
    case NPU_STEP_CONV:
        return npu_conv_call(p);
    case NPU_STEP_DEPTHWISE:
        return npu_depthwise_call(p);
    case NPU_STEP_FC: {
        const struct npu_fc_call *c = p;
        return npu_fully_connected_s8(c->x, c->rows, c->k, c->w, c->n, c->bias, c->input_offset,
                                      c->output_offset, c->mult, c->shift, c->scale,
                                      c->per_channel, c->act_min, c->act_max, c->out);
    }
    case NPU_STEP_TABLE2: {
        const struct npu_table2_call *c = p;
        npu_table2_s8(c->a, c->b, c->n, c->table, c->out);
        return 0;
    }
    case NPU_STEP_AVG_POOL:
    case NPU_STEP_MAX_POOL: {
        const struct npu_pool_call *c = p;
        return (step->kind == NPU_STEP_AVG_POOL ? npu_avg_pool_s8 : npu_max_pool_s8)(
            c->x, c->n, c->h, c->w, c->c, c->fh, c->fw, c->sh, c->sw, c->pt, c->pl, c->oh, c->ow,
            c->act_min, c->act_max, c->out);
    }
    case NPU_STEP_QUANTIZE: {
        const struct npu_convert_call *c = p;
        npu_quantize_f32_s8(c->x, c->n, c->scale, c->zero_point, c->out);
        return 0;
    }
    case NPU_STEP_DEQUANTIZE: {
        const struct npu_convert_call *c = p;
        npu_dequantize_s8_f32(c->x, c->n, c->scale, c->zero_point, c->out);
        return 0;
    }
    case NPU_STEP_SOFTMAX: {
        const struct npu_softmax_call *c = p;
        return npu_softmax_s8(c->x, c->rows, c->depth, c->exp_t, c->terms_t, c->valid_t, c->out);
    }
    case NPU_STEP_COPY:
        return npu_copy(p);
    case NPU_STEP_PAD:
        return npu_pad(p);
    case NPU_STEP_LUT:
        return npu_lut(p);
    case NPU_STEP_TABLE2_BROADCAST:
        return npu_table2_broadcast(p);
    case NPU_STEP_MEAN:
        return npu_mean(p);
    case NPU_STEP_SEQUENCE:
        return npu_sequence(p);
    case NPU_STEP_GATHER:
        return npu_gather(p);
    case NPU_STEP_L2NORM:
        return npu_l2norm(p);
    case NPU_STEP_LOG_SOFTMAX:
        return npu_log_softmax(p);
    case NPU_STEP_CONV16:
        return npu_conv16x8(p);
    case NPU_STEP_DEPTHWISE16:
        return npu_depthwise16x8(p);
    case NPU_STEP_FC16:
        return npu_fully_connected16x8(p);
    case NPU_STEP_BINARY16:
        return npu_binary16(p);
    case NPU_STEP_CONV16X16:
        return npu_conv16x16(p);
    case NPU_STEP_DEPTHWISE16X16:
        return npu_depthwise16x16(p);
    case NPU_STEP_FC16X16:
        return npu_fully_connected16x16(p);
    case NPU_STEP_QUANTIZE16: {
        const struct npu_convert_call *c = p;
        npu_quantize_f32_s16(c->x, c->n, c->scale, c->zero_point, c->out);
        return 0;
    }
    case NPU_STEP_DEQUANTIZE16: {
        const struct npu_convert_call *c = p;
        npu_dequantize_s16_f32(c->x, c->n, c->scale, c->zero_point, c->out);
        return 0;
    }
    case NPU_STEP_AVG_POOL16:
    case NPU_STEP_MAX_POOL16:
        return npu_pool16(p, step->kind == NPU_STEP_MAX_POOL16);
    case NPU_STEP_LSTM:
        return npu_lstm_s8(p);
    case NPU_STEP_RESIZE:
        return npu_resize(p);
    case NPU_STEP_SOFTMAX16:
        return npu_softmax16(p);
    case NPU_STEP_MATMUL16:
        return npu_matmul16(p);
    case NPU_STEP_MATMUL8:
        return npu_matmul8(p);
    case NPU_STEP_TRANSPOSE_CONV:
        return npu_transpose_conv(p);
    default:
        return NPU_KERNEL_BAD_STEP;
    }
}

int npu_steps_run(const struct npu_step *steps, int32_t count, int32_t *done)
{
    for (int32_t i = 0; i < count; i++) {
        int status = npu_step_run(&steps[i]);
        if (status != 0) {
            *done = i;
            return status;
        }
    }
    *done = count;
    return 0;
}
