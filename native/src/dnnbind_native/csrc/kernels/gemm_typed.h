/* The typed half of gemm.c (instantiate.h: T, NAME(f)). */
#include "cblas_typed.h"

/* Rows [lo, hi) of C. */
KERNEL void NAME(dnnbind_gemm_rows)(const gemm_job *j, int64_t lo, int64_t hi) {
    if (hi <= lo) return;
    const T *a = (const T *)j->a + (j->trans_a ? lo : lo * j->lda);   /* op(A)'s rows lo..: A's columns when transposed */
    NAME(cblas_gemm)(j->gemm, j->index_bytes, (int)j->trans_a, (int)j->trans_b, hi - lo, j->n, j->k, a, j->lda,
                     (const T *)j->b, j->ldb, 0, (T *)j->c + lo * j->ldc, j->ldc);
}

#include "vmath_typed.h"

/* Rows of a register tile (and of a packed A panel): GEMM_MR rows of two vectors of sums fill 24 of
 * AVX-512's 32 registers; 6 rows (12 of 16) for the narrower sets. Columns: two vectors. */
#define GEMM_MR (VECTOR_BYTES == 64 ? 12 : 6)
#define GEMM_NR (2 * VL)
/* Depth of a block: the B panel a tile reads (GEMM_KC x GEMM_NR: 32 KB of float32 with AVX-512) stays
 * in a 48 KB first-level cache beside the A panel. Rows of a packed A block (GEMM_MC x GEMM_KC, in the
 * second-level cache) and columns of a packed B block. */
#define GEMM_KC ((int64_t)(32768 / (2 * VECTOR_BYTES)))
#define GEMM_MC ((int64_t)GEMM_MR * 20)
#define GEMM_NC ((int64_t)GEMM_NR * 64)

/* Panels of ``width`` lanes (A: GEMM_MR rows, B: GEMM_NR columns) over depths [0, kc), for lanes
 * [0, count) of an operand: panel[q * width + l] = src[l * lane + q * depth] for the panel's lanes l
 * (lanes past ``count`` zero), one panel after another. Read along whichever stride is 1: a depth step's
 * lanes as vectors where they lie side by side, else each lane's run along the depth. */
INLINE void NAME(pack_panels)(const T *src, int64_t lane, int64_t depth, int64_t count, int64_t kc, int64_t width,
                              T *out) {
    for (int64_t p = 0; p < count; p += width, src += width * lane, out += kc * width) {
        int64_t lanes = count - p < width ? count - p : width;
        if (lane == 1) {
            for (int64_t q = 0; q < kc; q++)
                for (int64_t v = 0; v < width; v += VL) {
                    int64_t part = width - v < VL ? width - v : VL;                   /* lanes of the panel */
                    int64_t have = lanes - v < 0 ? 0 : lanes - v < part ? lanes - v : part;   /* ... in src */
                    NAME(v) x = have ? NAME(load)(src + q * depth + v, have) : NAME(splat)(0);
                    NAME(store)(out + q * width + v, x, part);
                }
            continue;
        }
        for (int64_t l = 0; l < width; l++) {
            const T *run = src + l * lane;
            for (int64_t q = 0; q < kc; q++) out[q * width + l] = l < lanes ? run[q * depth] : 0;
        }
    }
}

/* One register tile: C's rows x cols from ``c`` (at most GEMM_MR x GEMM_NR) = (what they hold, when
 * ``add``) + the sum over the block's depth of the A panel's rows times the B panel's columns. */
INLINE void NAME(gemm_tile)(int64_t kc, const T *ap, const T *bp, T *c, int64_t ldc, int64_t rows, int64_t cols,
                            int add) {
    NAME(v) acc[GEMM_MR][2];
#pragma GCC unroll 12
    for (int i = 0; i < GEMM_MR; i++) acc[i][0] = acc[i][1] = NAME(splat)(0);
    for (int64_t q = 0; q < kc; q++, ap += GEMM_MR, bp += GEMM_NR) {
        NAME(v) b0 = *(const NAME(v) *)bp, b1 = *(const NAME(v) *)(bp + VL);
#pragma GCC unroll 12
        for (int i = 0; i < GEMM_MR; i++) {
            acc[i][0] += ap[i] * b0;
            acc[i][1] += ap[i] * b1;
        }
    }
    if (rows == GEMM_MR && cols == GEMM_NR) {
#pragma GCC unroll 12
        for (int i = 0; i < GEMM_MR; i++)
            for (int v = 0; v < 2; v++) {
                NAME(uv) *p = (NAME(uv) *)(c + i * ldc + v * VL);
                NAME(v) sum = acc[i][v];
                if (add) sum += *p;
                *p = sum;
            }
        return;
    }
    for (int64_t i = 0; i < rows; i++)
        for (int64_t v = 0; v < 2; v++) {
            int64_t count = cols - v * VL < VL ? cols - v * VL : VL;
            if (count <= 0) break;
            T *p = c + i * ldc + v * VL;
            NAME(store)(p, add ? NAME(load)(p, count) + acc[i][v] : acc[i][v], count);
        }
}

/* Rows [i0, i1) and columns [j0, j1) of C (packed_gemm_job): blocks of columns, then of depth (B's block
 * packed), then of rows (A's block packed), then tiles. 0, or -1 when the packing buffer could not be
 * allocated. */
INLINE int NAME(packed_gemm_block)(const packed_gemm_job *j, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    if (i1 <= i0 || j1 <= j0) return 0;
    T *c = (T *)j->c;
    if (j->k == 0) {
        if (!j->accumulate)
            for (int64_t i = i0; i < i1; i++) memset(c + i * j->ldc + j0, 0, sizeof(T) * (size_t)(j1 - j0));
        return 0;
    }
    const int64_t kc_max = j->k < GEMM_KC ? j->k : GEMM_KC;
    const int64_t nc_max = j1 - j0 < GEMM_NC ? j1 - j0 : GEMM_NC;
    const int64_t mc_max = i1 - i0 < GEMM_MC ? i1 - i0 : GEMM_MC;
    size_t a_size = (size_t)((mc_max + GEMM_MR - 1) / GEMM_MR * GEMM_MR * kc_max);
    size_t b_size = (size_t)((nc_max + GEMM_NR - 1) / GEMM_NR * GEMM_NR * kc_max);
    T *buf = aligned_alloc(64, (sizeof(T) * (a_size + b_size + 64) + 63) / 64 * 64);   /* a multiple of 64 (C11) */
    if (!buf) return -1;
    T *ap = buf, *bp = buf + (a_size + 15) / 16 * 16;
    for (int64_t jc = j0; jc < j1; jc += GEMM_NC) {
        int64_t nc = j1 - jc < GEMM_NC ? j1 - jc : GEMM_NC;
        for (int64_t pc = 0; pc < j->k; pc += GEMM_KC) {
            int64_t kc = j->k - pc < GEMM_KC ? j->k - pc : GEMM_KC;
            int add = j->accumulate || pc > 0;
            NAME(pack_panels)((const T *)j->b + pc * j->b_row + jc * j->b_col, j->b_col, j->b_row, nc, kc, GEMM_NR, bp);
            for (int64_t ic = i0; ic < i1; ic += GEMM_MC) {
                int64_t mc = i1 - ic < GEMM_MC ? i1 - ic : GEMM_MC;
                NAME(pack_panels)((const T *)j->a + ic * j->a_row + pc * j->a_col, j->a_row, j->a_col, mc, kc, GEMM_MR,
                                  ap);
                for (int64_t jr = 0; jr < nc; jr += GEMM_NR)
                    for (int64_t ir = 0; ir < mc; ir += GEMM_MR)
                        NAME(gemm_tile)(kc, ap + ir * kc, bp + jr * kc, c + (ic + ir) * j->ldc + jc + jr, j->ldc,
                                        mc - ir < GEMM_MR ? mc - ir : GEMM_MR, nc - jr < GEMM_NR ? nc - jr : GEMM_NR,
                                        add);
            }
        }
    }
    free(buf);
    return 0;
}

/* The pool's range [lo, hi) of C's rows (by_rows) or columns. */
KERNEL int NAME(dnnbind_packed_gemm)(const packed_gemm_job *j, int64_t lo, int64_t hi) {
    return j->by_rows ? NAME(packed_gemm_block)(j, lo, hi, 0, j->n) : NAME(packed_gemm_block)(j, 0, j->m, lo, hi);
}
