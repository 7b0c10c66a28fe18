/*
 * The int8 GEMM of small convolutions, in AVX-512 VNNI (vpdpbusd), where the CPU has it.
 *
 * npu_conv_s8's layers are mostly small (a keyword spotter's 1x1 convolution is 49 pixels
 * x 40 channels -> 120): there oneDNN's dnnl_gemm_s8s8s32 spends more in its driver (ISA
 * checks, packing both operands, its JIT dispatch) than in the multiply-adds. This kernel
 * packs only the filter, 4 input channels per 32-bit lane as vpdpbusd wants them, and runs
 * 4 output pixels x 64 output channels in registers.
 *
 * vpdpbusd multiplies unsigned by signed bytes: the input goes in as x + 128 (x ^ 0x80),
 * and the lift is undone per output channel (zp the input's zero point):
 *   sum((x - zp) * f) = sum((x ^ 0x80) * f) - (128 + zp) * sum(f),
 * all in wrapping int32 arithmetic (vpdpbusd does not saturate), which equals TFLite's
 * wrapping int32 sum whatever the order. Each accumulator starts at that correction plus
 * the bias, so the result is exactly oneDNN's sum plus the bias.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "int8_kernels.h"
#include "gemm_kernels.h"

/* The filter (cout x k, row-major) as vpdpbusd's operand: for each group of 4 input
   channels, cout16 lanes of 4 bytes (zeros past k and past cout). */
static void npu_gemm_vnni_pack(const int8_t *filter, int32_t cout, int64_t k, int8_t *packed)
{
    const int64_t cout16 = ((int64_t)cout + 15) / 16 * 16, k4 = (k + 3) / 4;
    memset(packed, 0, (size_t)(k4 * cout16 * 4));
    for (int32_t o = 0; o < cout; o++)
        for (int64_t i = 0; i < k; i++)
            packed[((i / 4) * cout16 + o) * 4 + (i & 3)] = filter[(int64_t)o * k + i];
}

/* init[o] = bias[o] - (128 + zero_point) * sum_i filter[o][i], wrapping: every
   accumulator's start (cout16 entries, zeros past cout). */
static void npu_gemm_vnni_init(const int8_t *filter, int32_t cout, int64_t k, const int32_t *bias,
                        int32_t zero_point, int32_t *init)
{
    const int64_t cout16 = ((int64_t)cout + 15) / 16 * 16;
    const uint32_t lift = (uint32_t)(128 + zero_point);       /* x + 128 = (x - zp) + (128 + zp) */
    for (int64_t o = 0; o < cout16; o++) {
        uint32_t sum = 0;
        if (o < cout)
            for (int64_t i = 0; i < k; i++)
                sum += (uint32_t)(int32_t)filter[o * k + i];
        init[o] = (int32_t)((o < cout && bias ? (uint32_t)bias[o] : 0u) - lift * sum);
    }
}

/*
 * Packed filters, kept per thread (a simulated core is one thread) for the layers run again
 * and again: an entry is found by where the filter and bias are and what they are, and used
 * only while the bytes there are still the ones it was packed from (a buffer rewritten in
 * place, or reused for other weights, is packed afresh): comparing a few KB costs far less
 * than packing them. At most VNNI_ENTRIES entries and VNNI_BYTES bytes, replaced in turn.
 */
#define VNNI_ENTRIES 256
#define VNNI_BYTES ((size_t)64 << 20)

struct vnni_entry {
    const int8_t *filter;
    const int32_t *bias;
    int64_t k;
    int32_t cout, groups, zero_point;
    int8_t *copy;           /* the filter's bytes, then the bias's, as packed */
    int8_t *packed;
    int32_t *init;
    size_t bytes;
};

static __thread struct vnni_entry vnni_cache[VNNI_ENTRIES];
static __thread int vnni_next;
static __thread size_t vnni_held;

static void vnni_forget(struct vnni_entry *e)
{
    free(e->copy);
    vnni_held -= e->bytes;
    memset(e, 0, sizeof(*e));
}

const struct vnni_packed *npu_gemm_vnni_prepare(const int8_t *filter, int32_t cout_g, int32_t groups,
                                                 int64_t k, const int32_t *bias, int32_t zero_point,
                                                 struct vnni_packed *out)
{
    const size_t filter_bytes = (size_t)cout_g * groups * k, bias_bytes = bias ? sizeof(int32_t) * cout_g * groups : 0;
    for (int i = 0; i < VNNI_ENTRIES; i++) {
        struct vnni_entry *e = &vnni_cache[i];
        if (e->copy && e->filter == filter && e->bias == bias && e->k == k && e->cout == cout_g &&
            e->groups == groups && e->zero_point == zero_point && !memcmp(e->copy, filter, filter_bytes) &&
            (!bias || !memcmp(e->copy + filter_bytes, bias, bias_bytes))) {
            out->packed = e->packed;
            out->init = e->init;
            return out;
        }
    }
    const int64_t cout16 = ((int64_t)cout_g + 15) / 16 * 16, packed_g = (k + 3) / 4 * cout16 * 4;
    const size_t init_at = (filter_bytes + bias_bytes + 63) / 64 * 64;
    const size_t bytes = init_at + sizeof(int32_t) * (size_t)(cout16 * groups) + (size_t)(packed_g * groups);
    if (bytes > VNNI_BYTES / 4)
        return NULL;
    struct vnni_entry *e = &vnni_cache[vnni_next];
    vnni_next = (vnni_next + 1) % VNNI_ENTRIES;
    if (e->copy)
        vnni_forget(e);
    for (int i = 0; vnni_held + bytes > VNNI_BYTES && i < VNNI_ENTRIES; i++)
        if (vnni_cache[i].copy)
            vnni_forget(&vnni_cache[i]);
    int8_t *block = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!block)
        return NULL;
    memcpy(block, filter, filter_bytes);
    if (bias)
        memcpy(block + filter_bytes, bias, bias_bytes);
    int32_t *init = (int32_t *)(block + init_at);
    int8_t *packed = (int8_t *)(init + cout16 * groups);
    for (int32_t g = 0; g < groups; g++) {
        const int8_t *f = filter + (int64_t)g * cout_g * k;
        npu_gemm_vnni_pack(f, cout_g, k, packed + g * packed_g);
        npu_gemm_vnni_init(f, cout_g, k, bias ? bias + (int64_t)g * cout_g : NULL, zero_point, init + g * cout16);
    }
    *e = (struct vnni_entry){filter, bias, k, cout_g, groups, zero_point, block, packed, init, bytes};
    vnni_held += bytes;
    out->packed = packed;
    out->init = init;
    return out;
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#include <immintrin.h>

int npu_gemm_vnni_available(void) { return 1; }

/* Four bytes of a row at k-group kk (the last group of a row whose k is not a multiple of 4
   reads only the bytes that are there; the filter's are zeros past k). */
static inline int32_t group4(const int8_t *row, int64_t kk, int64_t k)
{
    int32_t v = 0;
    const int64_t left = k - kk * 4;
    memcpy(&v, row + kk * 4, (size_t)(left < 4 ? left : 4));
    return v ^ (int32_t)0x80808080;
}

/* mr output rows x nb blocks of 16 channels (compile-time constants after inlining). */
static inline __attribute__((always_inline)) void vnni_tile(
    const int8_t *a, int64_t lda, int64_t k, const int8_t *packed, int64_t cout16,
    const int32_t *init, int32_t *c, int64_t ldc, int32_t c0, int32_t cout, const int mr, const int nb)
{
    __m512i acc[4][4];
    for (int j = 0; j < nb; j++) {
        const __m512i start = _mm512_loadu_si512(init + c0 + 16 * j);
        for (int i = 0; i < mr; i++)
            acc[i][j] = start;
    }
    const int64_t k4 = (k + 3) / 4, whole = k / 4;
    const int8_t *b = packed + (int64_t)c0 * 4;
    for (int64_t kk = 0; kk < k4; kk++, b += cout16 * 4) {
        __m512i x[4];
        for (int i = 0; i < mr; i++) {
            int32_t v;
            if (kk < whole) {
                memcpy(&v, a + i * lda + kk * 4, 4);
                v ^= (int32_t)0x80808080;
            } else {
                v = group4(a + i * lda, kk, k);
            }
            x[i] = _mm512_set1_epi32(v);
        }
        for (int j = 0; j < nb; j++) {
            const __m512i f = _mm512_loadu_si512(b + 64 * j);
            for (int i = 0; i < mr; i++)
                acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], x[i], f);
        }
    }
    for (int j = 0; j < nb; j++) {
        const int32_t left = cout - (c0 + 16 * j);
        const __mmask16 m = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
        for (int i = 0; i < mr; i++)
            _mm512_mask_storeu_epi32(c + i * ldc + c0 + 16 * j, m, acc[i][j]);
    }
}

/* c (rows x cout, row stride ldc) = init + a (rows x k, row stride lda) . filter^T, with
   the input's zero point taken out (init from npu_gemm_vnni_init, packed from
   npu_gemm_vnni_pack). */
void npu_gemm_vnni(const int8_t *a, int64_t rows, int64_t lda, int64_t k, const int8_t *packed,
                   int32_t cout, const int32_t *init, int32_t *c, int64_t ldc)
{
    const int64_t cout16 = ((int64_t)cout + 15) / 16 * 16;
    for (int32_t c0 = 0; c0 < cout; c0 += 64) {
        const int blocks = (int)((cout16 - c0) / 16 < 4 ? (cout16 - c0) / 16 : 4);
        int64_t r = 0;
        for (; r + 4 <= rows; r += 4) {
            const int8_t *ar = a + r * lda;
            int32_t *cr = c + r * ldc;
            switch (blocks) {
            case 4: vnni_tile(ar, lda, k, packed, cout16, init, cr, ldc, c0, cout, 4, 4); break;
            case 3: vnni_tile(ar, lda, k, packed, cout16, init, cr, ldc, c0, cout, 4, 3); break;
            case 2: vnni_tile(ar, lda, k, packed, cout16, init, cr, ldc, c0, cout, 4, 2); break;
            default: vnni_tile(ar, lda, k, packed, cout16, init, cr, ldc, c0, cout, 4, 1); break;
            }
        }
        for (; r < rows; r++) {
            const int8_t *ar = a + r * lda;
            int32_t *cr = c + r * ldc;
            switch (blocks) {
            case 4: vnni_tile(ar, lda, k, packed, cout16, init, cr, ldc, c0, cout, 1, 4); break;
            case 3: vnni_tile(ar, lda, k, packed, cout16, init, cr, ldc, c0, cout, 1, 3); break;
            case 2: vnni_tile(ar, lda, k, packed, cout16, init, cr, ldc, c0, cout, 1, 2); break;
            default: vnni_tile(ar, lda, k, packed, cout16, init, cr, ldc, c0, cout, 1, 1); break;
            }
        }
    }
}
#else
int npu_gemm_vnni_available(void) { return 0; }

void npu_gemm_vnni(const int8_t *a, int64_t rows, int64_t lda, int64_t k, const int8_t *packed,
                   int32_t cout, const int32_t *init, int32_t *c, int64_t ldc)
{
    abort();            /* never called: npu_gemm_vnni_available() is 0 */
}
#endif
