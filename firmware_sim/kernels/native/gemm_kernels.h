/* gemm_kernels.c's functions for int8_kernels.c's convolution (not for cffi: no Python
   caller; int8_kernels.h is the library's interface). */
#ifndef NPU_GEMM_KERNELS_H
#define NPU_GEMM_KERNELS_H

#include <stdint.h>

/* A convolution's filter as npu_gemm_vnni reads it: per group, the packed filter
   (k4 x cout16 x 4 bytes) and the accumulators' start (cout16 int32). */
struct vnni_packed {
    const int8_t *packed;
    const int32_t *init;
};

/* 1 when npu_gemm_vnni is built (the CPU has AVX-512 VNNI), else 0. */
int npu_gemm_vnni_available(void);

/* The packed form of `groups` filters (cout_g x k each) with their bias (or NULL) and the
   input's zero point, into *out (from the per-thread cache while the bytes are the same);
   NULL when it is too large to keep or memory runs out. */
const struct vnni_packed *npu_gemm_vnni_prepare(const int8_t *filter, int32_t cout_g, int32_t groups,
                                                 int64_t k, const int32_t *bias, int32_t zero_point,
                                                 struct vnni_packed *out);

/* c (rows x cout, row stride ldc) = init + a (rows x k, row stride lda) . filter^T. */
void npu_gemm_vnni(const int8_t *a, int64_t rows, int64_t lda, int64_t k, const int8_t *packed,
                   int32_t cout, const int32_t *init, int32_t *c, int64_t ldc);

#endif
