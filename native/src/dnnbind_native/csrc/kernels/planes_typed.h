/* The typed half of planes.h, included by each typed kernel header (T, NAME(f)): moving a plane into
 * and out of its local buffer, and its outputs into and out of their run. */

/* One vector for moving rows (any alignment). */
typedef T NAME(row_vec) __attribute__((vector_size(VECTOR_BYTES), aligned(sizeof(T)), may_alias));
#define ROW_VL ((int64_t)(VECTOR_BYTES / sizeof(T)))

/* dst[0..n) <- src[0..n): whole vectors, the last one overlapping the one before (no call, no tail
 * loop; rows of a plane are a few vectors long, where a memcpy call costs more than the copy). */
INLINE void NAME(copy_row)(T *restrict dst, const T *restrict src, int64_t n) {
    if (n < ROW_VL) {
        for (int64_t j = 0; j < n; j++) dst[j] = src[j];
        return;
    }
    int64_t j = 0;
    for (; j + ROW_VL <= n; j += ROW_VL) *(NAME(row_vec) *)(dst + j) = *(const NAME(row_vec) *)(src + j);
    if (j < n) *(NAME(row_vec) *)(dst + n - ROW_VL) = *(const NAME(row_vec) *)(src + n - ROW_VL);
}

/* buf[0..n) <- value: a kernel's buffers, once per call (padding and the gaps between rows are never
 * written afterwards, so every plane finds them as filled). */
INLINE void NAME(fill)(T *buf, int64_t n, T value) {
    if (value == 0) memset(buf, 0, sizeof(T) * (size_t)n);
    else for (int64_t i = 0; i < n; i++) buf[i] = value;
}

/* buf <- the inputs of plane x the outputs read, phase-split; the rest of buf (filled once) untouched. */
INLINE void NAME(load)(const geometry *g, const layout *l, const T *restrict x, T *restrict buf) {
    int64_t lo = l->lo, hi = l->hi, s = g->stride[2];
    for (int64_t r = 0; r < l->rows; r++) {
        const T *row = x + l->row_in[r];
        T *dst = buf + l->row_local[r];
        if (s == 1) {
            NAME(copy_row)(dst + lo, row + lo, hi - lo);
            continue;
        }
        if (s == 2) {                             /* the usual stride: both phases in one pass */
            T *even = dst, *odd = dst + l->phase;
            int64_t zw = lo;
            if (zw & 1) { odd[zw >> 1] = row[zw]; zw++; }
            int64_t q0 = zw >> 1, pairs = (hi - zw) >> 1;
            const T *src = row + zw;
            for (int64_t q = 0; q < pairs; q++) { even[q0 + q] = src[2 * q]; odd[q0 + q] = src[2 * q + 1]; }
            if (zw + 2 * pairs < hi) even[q0 + pairs] = src[2 * pairs];
            continue;
        }
        for (int64_t ph = 0; ph < s; ph++)        /* phase ph: positions ph, ph + s, ... in [lo, hi) */
            for (int64_t q = (lo - ph + s - 1) / s; q * s + ph < hi; q++) dst[ph * l->phase + q] = row[q * s + ph];
    }
}

/* The plane dx <- the inputs' entries of buf (zero where no output reads the input). */
INLINE void NAME(store)(const geometry *g, const layout *l, const T *restrict buf, T *restrict dx) {
    memset(dx, 0, sizeof(T) * (size_t)l->in_plane);
    int64_t lo = l->lo, hi = l->hi, s = g->stride[2];
    for (int64_t r = 0; r < l->rows; r++) {
        T *row = dx + l->row_in[r];
        const T *src = buf + l->row_local[r];
        if (s == 1) {
            NAME(copy_row)(row + lo, src + lo, hi - lo);
            continue;
        }
        if (s == 2) {
            const T *even = src, *odd = src + l->phase;
            int64_t zw = lo;
            if (zw & 1) { row[zw] = odd[zw >> 1]; zw++; }
            int64_t q0 = zw >> 1, pairs = (hi - zw) >> 1;
            T *out = row + zw;
            for (int64_t q = 0; q < pairs; q++) { out[2 * q] = even[q0 + q]; out[2 * q + 1] = odd[q0 + q]; }
            if (zw + 2 * pairs < hi) out[2 * pairs] = even[q0 + pairs];
            continue;
        }
        for (int64_t ph = 0; ph < s; ph++)
            for (int64_t q = (lo - ph + s - 1) / s; q * s + ph < hi; q++) row[q * s + ph] = src[ph * l->phase + q];
    }
}

/* The run <- the plane dy, its rows where the run keeps them; the gaps between rows and the SLACK
 * after the run are the caller's (zeroed once per call). And the plane y <- the run. */
INLINE void NAME(spread)(const geometry *g, const layout *l, const T *restrict dy, T *restrict run) {
    for (int64_t d = 0; d < g->out[0]; d++)
        for (int64_t h = 0; h < g->out[1]; h++)
            NAME(copy_row)(run + run_row(l, d, h), dy + (d * g->out[1] + h) * g->out[2], g->out[2]);
}
INLINE void NAME(gather)(const geometry *g, const layout *l, const T *restrict run, T *restrict y) {
    for (int64_t d = 0; d < g->out[0]; d++)
        for (int64_t h = 0; h < g->out[1]; h++)
            NAME(copy_row)(y + (d * g->out[1] + h) * g->out[2], run + run_row(l, d, h), g->out[2]);
}

/* gather, with ``shift`` added to every value (a convolution's bias: the one rounding of adding it after). */
INLINE void NAME(gather_shifted)(const geometry *g, const layout *l, const T *restrict run, T *restrict y, T shift) {
    for (int64_t d = 0; d < g->out[0]; d++)
        for (int64_t h = 0; h < g->out[1]; h++) {
            T *restrict dst = y + (d * g->out[1] + h) * g->out[2];
            const T *restrict src = run + run_row(l, d, h);
            for (int64_t j = 0; j < g->out[2]; j++) dst[j] = src[j] + shift;
        }
}

#undef ROW_VL

