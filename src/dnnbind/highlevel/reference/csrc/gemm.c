/* A matrix product split by rows of its result, for the kernels' thread pool (parallel.c): where numpy's
 * BLAS is held to one thread (next to PyTorch's spinning OpenMP threads), a large product still uses
 * every core, each range of rows one single-threaded call of numpy's own OpenBLAS (its CBLAS ?gemm,
 * passed in by address, as recurrent.c calls it). */
#include <stdint.h>

#include "dispatch.h"

#define CBLAS_ROW_MAJOR 101
#define CBLAS_NO_TRANS 111
#define CBLAS_TRANS 112

/* C (m x n, row pitch ldc) = op(A) op(B), row-major; op(A) is m x k (stored k x m when trans_a), op(B)
 * k x n (stored n x k when trans_b). As native.py's GemmJob lays it out. */
typedef struct {
    const void *gemm;
    int64_t index_bytes;      /* the gemm's integers: 8 or 4 */
    int64_t dtype_bytes;      /* 4: sgemm, 8: dgemm */
    int64_t trans_a, trans_b, m, n, k;
    const char *a;
    int64_t lda;
    const char *b;
    int64_t ldb;
    char *c;
    int64_t ldc;
} gemm_job;

typedef void (*sgemm64)(int, int, int, int64_t, int64_t, int64_t, float, const float *, int64_t, const float *,
                        int64_t, float, float *, int64_t);
typedef void (*sgemm32)(int, int, int, int32_t, int32_t, int32_t, float, const float *, int32_t, const float *,
                        int32_t, float, float *, int32_t);
typedef void (*dgemm64)(int, int, int, int64_t, int64_t, int64_t, double, const double *, int64_t, const double *,
                        int64_t, double, double *, int64_t);
typedef void (*dgemm32)(int, int, int, int32_t, int32_t, int32_t, double, const double *, int32_t, const double *,
                        int32_t, double, double *, int32_t);

/* Rows [lo, hi) of C. */
KERNEL void dnnbind_gemm_rows(const gemm_job *j, int64_t lo, int64_t hi) {
    if (hi <= lo) return;
    int64_t rows = hi - lo, e = j->dtype_bytes;
    const char *a = j->a + (j->trans_a ? lo : lo * j->lda) * e;      /* op(A)'s rows lo..: A's columns when transposed */
    char *c = j->c + lo * j->ldc * e;
    int ta = j->trans_a ? CBLAS_TRANS : CBLAS_NO_TRANS, tb = j->trans_b ? CBLAS_TRANS : CBLAS_NO_TRANS;
    if (e == 4 && j->index_bytes == 8)
        ((sgemm64)j->gemm)(CBLAS_ROW_MAJOR, ta, tb, rows, j->n, j->k, 1, (const float *)a, j->lda,
                           (const float *)j->b, j->ldb, 0, (float *)c, j->ldc);
    else if (e == 4)
        ((sgemm32)j->gemm)(CBLAS_ROW_MAJOR, ta, tb, (int32_t)rows, (int32_t)j->n, (int32_t)j->k, 1, (const float *)a,
                           (int32_t)j->lda, (const float *)j->b, (int32_t)j->ldb, 0, (float *)c, (int32_t)j->ldc);
    else if (j->index_bytes == 8)
        ((dgemm64)j->gemm)(CBLAS_ROW_MAJOR, ta, tb, rows, j->n, j->k, 1, (const double *)a, j->lda,
                           (const double *)j->b, j->ldb, 0, (double *)c, j->ldc);
    else
        ((dgemm32)j->gemm)(CBLAS_ROW_MAJOR, ta, tb, (int32_t)rows, (int32_t)j->n, (int32_t)j->k, 1,
                           (const double *)a, (int32_t)j->lda, (const double *)j->b, (int32_t)j->ldb, 0,
                           (double *)c, (int32_t)j->ldc);
}
