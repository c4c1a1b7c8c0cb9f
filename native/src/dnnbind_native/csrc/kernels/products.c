/* A matrix product split by rows over the kernels' team (parallel.c), each range of rows one call of the
 * host's CBLAS gemm (numpy's OpenBLAS, held to one thread by the caller).
 *
 * Under dnnbind.torch the team is PyTorch's OpenMP team: numpy's BLAS, on threads of its own, would
 * compete for the cores with those threads while they spin after each torch op, so the adapter holds
 * it to one thread, and a large product (an LSTM's weight gradient) ran on one core. Split here, every
 * core computes rows of it on the threads that own the cores. The arithmetic is BLAS's own, so a
 * split product equals the unsplit one's rows up to the BLAS kernel's order of summation. */
#include <stdint.h>

#include "dispatch.h"

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };
/* kind: bit 0 set for double (dgemm), bit 1 set for 64-bit BLAS integers (OpenBLAS's ILP64 build). */
enum { KIND_DOUBLE = 1, KIND_INDEX64 = 2 };

typedef void (*sgemm64_t)(int, int, int, int64_t, int64_t, int64_t, float, const float *, int64_t,
                          const float *, int64_t, float, float *, int64_t);
typedef void (*dgemm64_t)(int, int, int, int64_t, int64_t, int64_t, double, const double *, int64_t,
                          const double *, int64_t, double, double *, int64_t);
typedef void (*sgemm32_t)(int, int, int, int, int, int, float, const float *, int, const float *, int, float,
                          float *, int);
typedef void (*dgemm32_t)(int, int, int, int, int, int, double, const double *, int, const double *, int,
                          double, double *, int);

/* Rows [r0, r1) of c (ldc apart) = op(a) @ op(b), op(a) m x k and op(b) k x n: a stored row-major as
 * op(a) (lda apart) or, with trans_a, as its transpose (k x m); b likewise. gemm is cblas_?gemm of the
 * kind ``kind`` says. */
KERNEL void dnnbind_gemm_rows(void *gemm, int64_t kind, int64_t trans_a, int64_t trans_b, int64_t n, int64_t k,
                              const void *a, int64_t lda, const void *b, int64_t ldb, void *c, int64_t ldc,
                              int64_t r0, int64_t r1) {
    int64_t rows = r1 - r0;
    if (rows <= 0) return;
    int ta = trans_a ? TRANS : NO_TRANS, tb = trans_b ? TRANS : NO_TRANS;
    int64_t a_start = trans_a ? r0 : r0 * lda, c_start = r0 * ldc;
    switch (kind) {
    case KIND_INDEX64:
        ((sgemm64_t)gemm)(ROW_MAJOR, ta, tb, rows, n, k, 1.0f, (const float *)a + a_start, lda, b, ldb, 0.0f,
                          (float *)c + c_start, ldc);
        break;
    case KIND_INDEX64 | KIND_DOUBLE:
        ((dgemm64_t)gemm)(ROW_MAJOR, ta, tb, rows, n, k, 1.0, (const double *)a + a_start, lda, b, ldb, 0.0,
                          (double *)c + c_start, ldc);
        break;
    case 0:
        ((sgemm32_t)gemm)(ROW_MAJOR, ta, tb, (int)rows, (int)n, (int)k, 1.0f, (const float *)a + a_start,
                          (int)lda, b, (int)ldb, 0.0f, (float *)c + c_start, (int)ldc);
        break;
    default:
        ((dgemm32_t)gemm)(ROW_MAJOR, ta, tb, (int)rows, (int)n, (int)k, 1.0, (const double *)a + a_start,
                          (int)lda, b, (int)ldb, 0.0, (double *)c + c_start, (int)ldc);
    }
}
