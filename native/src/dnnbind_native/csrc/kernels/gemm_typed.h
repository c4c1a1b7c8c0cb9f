/* The typed half of gemm.c (instantiate.h: T, NAME(f)). */
#include "cblas_typed.h"

/* Rows [lo, hi) of C. */
KERNEL void NAME(dnnbind_gemm_rows)(const gemm_job *j, int64_t lo, int64_t hi) {
    if (hi <= lo) return;
    const T *a = (const T *)j->a + (j->trans_a ? lo : lo * j->lda);   /* op(A)'s rows lo..: A's columns when transposed */
    NAME(cblas_gemm)(j->gemm, j->index_bytes, (int)j->trans_a, (int)j->trans_b, hi - lo, j->n, j->k, a, j->lda,
                     (const T *)j->b, j->ldb, 0, (T *)j->c + lo * j->ldc, j->ldc);
}
