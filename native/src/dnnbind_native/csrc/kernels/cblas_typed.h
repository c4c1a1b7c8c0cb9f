/* One call of CBLAS ?gemm for T (instantiate.h: T, NAME(f)), whose integers are 64 or 32 bits wide
 * (``index_bytes``: 8 or 4, as numpy's OpenBLAS was built): row-major C = op(A) op(B) + beta C. */
#include "cblas.h"

typedef void (*NAME(gemm64))(int, int, int, int64_t, int64_t, int64_t, T, const T *, int64_t, const T *, int64_t, T,
                             T *, int64_t);
typedef void (*NAME(gemm32))(int, int, int, int32_t, int32_t, int32_t, T, const T *, int32_t, const T *, int32_t, T,
                             T *, int32_t);

INLINE void NAME(cblas_gemm)(const void *fn, int64_t index_bytes, int trans_a, int trans_b, int64_t m, int64_t n,
                             int64_t k, const T *a, int64_t lda, const T *b, int64_t ldb, T beta, T *c, int64_t ldc) {
    int ta = trans_a ? CBLAS_TRANS : CBLAS_NO_TRANS, tb = trans_b ? CBLAS_TRANS : CBLAS_NO_TRANS;
    if (index_bytes == 8)
        ((NAME(gemm64))fn)(CBLAS_ROW_MAJOR, ta, tb, m, n, k, 1, a, lda, b, ldb, beta, c, ldc);
    else
        ((NAME(gemm32))fn)(CBLAS_ROW_MAJOR, ta, tb, (int32_t)m, (int32_t)n, (int32_t)k, 1, a, (int32_t)lda, b,
                           (int32_t)ldb, beta, c, (int32_t)ldc);
}
