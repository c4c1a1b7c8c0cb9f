/* Matrix products for the kernels' thread pool (parallel.c): gemm_rows splits a product by rows of the
 * result, each range one single-threaded call of numpy's own OpenBLAS (its CBLAS ?gemm, passed in by
 * address, as recurrent.c calls it): where numpy's BLAS is held to one thread (next to PyTorch's spinning
 * OpenMP threads), a large product still uses every core.
 */
#include <stdint.h>

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

#define KERNELS "gemm_typed.h"
#include "instantiate.h"
