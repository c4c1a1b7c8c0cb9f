/* What the kernels that call numpy's own OpenBLAS (its CBLAS ?gemm, passed in by address) share:
 * CBLAS's enums (cblas.h), passed to gemm as ints. The typed call is cblas_typed.h. */
#ifndef DNNBIND_CBLAS_H
#define DNNBIND_CBLAS_H

#define CBLAS_ROW_MAJOR 101
#define CBLAS_NO_TRANS 111
#define CBLAS_TRANS 112

#endif
