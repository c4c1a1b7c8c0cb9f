/* The typed half of softmax.c (instantiate.h: T, ITYPE, NAME(f), VECTOR_BYTES). */
#include "vmath_typed.h"

#include "sums_typed.h"

/* The larger of m and v, NaN where either is NaN (numpy's maximum, lane by lane). */
INLINE NAME(v) NAME(vmax)(NAME(v) m, NAME(v) v) {
    return NAME(pick)((v > m) | (v != v), v, m);
}

/* The maximum of n contiguous values, NaN if any is NaN (numpy's max); -inf for none. */
INLINE T NAME(row_max)(const T *x, int64_t n) {
    NAME(v) m = NAME(splat)((T)-INFINITY);
    NAME(iv) nan = {0};
    int64_t j = 0;
    for (; j + VL <= n; j += VL) {
        NAME(v) v = *(const NAME(uv) *)(x + j);
        m = NAME(pick)(v > m, v, m);
        nan |= v != v;
    }
    T lanes[VL];
    memcpy(lanes, &m, sizeof lanes);
    for (int64_t w = VL / 2; w >= 1; w /= 2)          /* halving: a short chain of independent maxima */
        for (int64_t i = 0; i < w; i++) lanes[i] = lanes[i + w] > lanes[i] ? lanes[i + w] : lanes[i];
    ITYPE any = 0;
    for (int64_t i = 0; i < VL; i++) any |= nan[i];
    T best = lanes[0];
    for (; j < n; j++) {
        best = x[j] > best ? x[j] : best;
        any |= x[j] != x[j];
    }
    return any ? (T)NAN : best;
}

/* out[j] = e^(a[j] - shift[j]) for j < n (shift NULL: e^(a[j] - m)); full vectors, then the tail. */
INLINE void NAME(exp_run)(T *restrict out, const T *restrict a, const T *restrict shift, T m, int64_t n) {
    int64_t j = 0;
    for (; j + VL <= n; j += VL) {
        NAME(v) s = NAME(splat)(m);
        if (shift) s = *(const NAME(uv) *)(shift + j);
        *(NAME(uv) *)(out + j) = NAME(vexp)(*(const NAME(uv) *)(a + j) - s);
    }
    if (j < n) {
        NAME(v) s = NAME(splat)(m);
        if (shift) s = NAME(load)(shift + j, n - j);
        NAME(store)(out + j, NAME(vexp)(NAME(load)(a + j, n - j) - s), n - j);
    }
}

/* softmax (log_: log-softmax) of one row of n contiguous values. */
INLINE void NAME(softmax_row)(const T *restrict x, T *restrict y, int64_t n, int log_) {
    T m = NAME(row_max)(x, n);
    NAME(exp_run)(y, x, 0, m, n);
    double sum = NAME(plane_sum)(y, 0, 0.0, 0, n);
    if (log_) {
        T l = (T)log(sum);
        for (int64_t j = 0; j < n; j++) y[j] = (x[j] - m) - l;
    } else {
        T r = (T)(1.0 / sum);
        for (int64_t j = 0; j < n; j++) y[j] *= r;
    }
}

/* The data gradient of one row: softmax dx = dy y - y sum(dy y); log-softmax dx = dy - e^y sum(dy). */
INLINE void NAME(softmax_row_grad)(const T *restrict y, const T *restrict dy, T *restrict dx, int64_t n,
                                   int log_) {
    T s = (T)NAME(plane_sum)(dy, log_ ? 0 : y, 0.0, 0, n);
    if (log_) {
        NAME(exp_run)(dx, y, 0, 0, n);
        for (int64_t j = 0; j < n; j++) dx[j] = dy[j] - dx[j] * s;
    } else {
        for (int64_t j = 0; j < n; j++) dx[j] = dy[j] * y[j] - y[j] * s;
    }
}

/* softmax of positions [0, width) of one block: row k of it starts at x + k inner. */
INLINE void NAME(softmax_block)(const T *restrict x, T *restrict y, int64_t n, int64_t inner, int64_t width,
                                int log_) {
    T m[SOFTMAX_BLOCK], scale[SOFTMAX_BLOCK];
    double sum[SOFTMAX_BLOCK];
    for (int64_t i = 0; i < width; i++) m[i] = (T)-INFINITY, sum[i] = 0;
    for (int64_t k = 0; k < n; k++) {
        const T *row = x + k * inner;
        for (int64_t i = 0; i < width; i += VL) {
            int64_t count = width - i < VL ? width - i : VL;
            NAME(store)(m + i, NAME(vmax)(NAME(load)(m + i, count), NAME(load)(row + i, count)), count);
        }
    }
    for (int64_t k = 0; k < n; k++) {
        const T *row = x + k * inner;
        T *out = y + k * inner;
        NAME(exp_run)(out, row, m, 0, width);
        for (int64_t i = 0; i < width; i++) sum[i] += (double)out[i];
    }
    for (int64_t i = 0; i < width; i++) scale[i] = log_ ? (T)log(sum[i]) : (T)(1.0 / sum[i]);
    for (int64_t k = 0; k < n; k++) {
        const T *row = x + k * inner;
        T *out = y + k * inner;
        if (log_)
            for (int64_t i = 0; i < width; i++) out[i] = (row[i] - m[i]) - scale[i];
        else
            for (int64_t i = 0; i < width; i++) out[i] *= scale[i];
    }
}

/* The data gradient of one block (see softmax_row_grad). */
INLINE void NAME(softmax_block_grad)(const T *restrict y, const T *restrict dy, T *restrict dx, int64_t n,
                                     int64_t inner, int64_t width, int log_) {
    T scale[SOFTMAX_BLOCK];
    double sum[SOFTMAX_BLOCK];
    for (int64_t i = 0; i < width; i++) sum[i] = 0;
    for (int64_t k = 0; k < n; k++) {
        const T *yr = y + k * inner, *dr = dy + k * inner;
        if (log_)
            for (int64_t i = 0; i < width; i++) sum[i] += (double)dr[i];
        else
            for (int64_t i = 0; i < width; i++) sum[i] += (double)(dr[i] * yr[i]);
    }
    for (int64_t i = 0; i < width; i++) scale[i] = (T)sum[i];
    for (int64_t k = 0; k < n; k++) {
        const T *yr = y + k * inner, *dr = dy + k * inner;
        T *out = dx + k * inner;
        if (log_) {
            NAME(exp_run)(out, yr, 0, 0, width);
            for (int64_t i = 0; i < width; i++) out[i] = dr[i] - out[i] * scale[i];
        } else {
            for (int64_t i = 0; i < width; i++) out[i] = dr[i] * yr[i] - yr[i] * scale[i];
        }
    }
}

/* Lines [lo, hi) of x viewed as (outer, n, inner): with inner 1 line r is row r, else line r is block
 * r mod blocks of positions along inner (SOFTMAX_BLOCK each, the last one shorter) of outer index
 * r / blocks. y = softmax of x along n (log_: log-softmax). */
KERNEL void NAME(dnnbind_softmax_forward)(const T *x, T *y, int64_t n, int64_t inner, int64_t log_,
                                         int64_t lo, int64_t hi) {
    int64_t blocks = (inner + SOFTMAX_BLOCK - 1) / SOFTMAX_BLOCK;
    for (int64_t r = lo; r < hi; r++) {
        if (inner == 1) {
            NAME(softmax_row)(x + r * n, y + r * n, n, (int)log_);
            continue;
        }
        int64_t start = r / blocks * n * inner + r % blocks * SOFTMAX_BLOCK;
        int64_t width = inner - r % blocks * SOFTMAX_BLOCK < SOFTMAX_BLOCK ? inner - r % blocks * SOFTMAX_BLOCK
                                                                          : SOFTMAX_BLOCK;
        NAME(softmax_block)(x + start, y + start, n, inner, width, (int)log_);
    }
}

/* dx of softmax_forward's lines [lo, hi), from its result y and dy. */
KERNEL void NAME(dnnbind_softmax_backward)(const T *y, const T *dy, T *dx, int64_t n, int64_t inner,
                                          int64_t log_, int64_t lo, int64_t hi) {
    int64_t blocks = (inner + SOFTMAX_BLOCK - 1) / SOFTMAX_BLOCK;
    for (int64_t r = lo; r < hi; r++) {
        if (inner == 1) {
            NAME(softmax_row_grad)(y + r * n, dy + r * n, dx + r * n, n, (int)log_);
            continue;
        }
        int64_t start = r / blocks * n * inner + r % blocks * SOFTMAX_BLOCK;
        int64_t width = inner - r % blocks * SOFTMAX_BLOCK < SOFTMAX_BLOCK ? inner - r % blocks * SOFTMAX_BLOCK
                                                                          : SOFTMAX_BLOCK;
        NAME(softmax_block_grad)(y + start, dy + start, dx + start, n, inner, width, (int)log_);
    }
}

#undef VL
#undef SINGLE
#undef DL
#undef WIDE
