/* Matrix products for the kernels' thread pool (parallel.c), two ways:
 *
 * - gemm_rows: split by rows of the result, each range one single-threaded call of numpy's own OpenBLAS
 *   (its CBLAS ?gemm, passed in by address, as recurrent.c calls it): where numpy's BLAS is held to one
 *   thread (next to PyTorch's spinning OpenMP threads), a large product still uses every core.
 * - packed_gemm: dnnbind's own product, for where numpy's OpenBLAS runs kernels narrower than the CPU's
 *   vectors (OPENBLAS_CORETYPE=Haswell on an AVX-512 machine: half the multiply-adds per cycle). Both
 *   operands are packed a block at a time into panels (A: GEMM_MR rows side by side per depth step; B:
 *   two vectors of columns per depth step), and a register tile of GEMM_MR x two vectors sums a panel
 *   pair over a block of the depth: the B panel stays in the first-level cache, the A block in the
 *   second. Plain float sums of the products, in depth order within a block, blocks added in order: a
 *   GEMM's rounding, as BLAS's.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"

/* C (m x n, row pitch ldc) = op(A) op(B), row-major; op(A) is m x k (stored k x m when trans_a), op(B)
 * k x n (stored n x k when trans_b). As native.py's GemmJob lays it out. */
typedef struct {
    const void *gemm;
    int64_t index_bytes;      /* the gemm's integers: 8 or 4 */
    int64_t trans_a, trans_b, m, n, k;
    const void *a;
    int64_t lda;
    const void *b;
    int64_t ldb;
    void *c;
    int64_t ldc;
} gemm_job;

/* C = A B (or C += A B: ``accumulate``) over rows [i0, i1) and columns [j0, j1) of C, for a pool range
 * (``by_rows``: the range is of rows, else of columns). A(i, q) = a[i * a_row + q * a_col], B(q, j) =
 * b[q * b_row + j * b_col], C(i, j) = c[i * ldc + j]: any transposition of either operand packs alike.
 * As native.py's PackedGemmJob lays it out. */
typedef struct {
    int64_t m, n, k;
    const void *a;
    int64_t a_row, a_col;
    const void *b;
    int64_t b_row, b_col;
    void *c;
    int64_t ldc, accumulate, by_rows;
} packed_gemm_job;

#define KERNELS "gemm_typed.h"
#include "instantiate.h"
