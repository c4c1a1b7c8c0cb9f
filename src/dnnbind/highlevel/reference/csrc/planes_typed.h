/* The typed half of planes.h, included by each typed kernel header (T, NAME(f)): moving a plane into
 * and out of its local buffer, and its outputs into and out of their run. */

/* buf <- the plane x, phase-split, everywhere else (padding, SLACK) fill. */
INLINE void NAME(load)(const geometry *g, const layout *l, const T *restrict x, T *restrict buf, T fill) {
    if (fill == 0) memset(buf, 0, sizeof(T) * (size_t)l->local);
    else for (int64_t i = 0; i < l->local; i++) buf[i] = fill;
    int64_t z[3], lo, hi, s = g->stride[2];
    for (z[0] = 0; z[0] < l->extent[0]; z[0]++)
        for (z[1] = 0; z[1] < l->extent[1]; z[1]++) {
            if (!row_span(g, l, z[0], z[1], &lo, &hi)) continue;
            const T *row = x + ((z[0] - g->pad[0]) * g->in[1] + z[1] - g->pad[1]) * g->in[2] - g->pad[2];
            z[2] = 0;
            T *dst = buf + local_index(g, l, z);
            if (s == 1) {
                memcpy(dst + lo, row + lo, sizeof(T) * (size_t)(hi - lo));
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
            for (int64_t r = 0; r < s; r++)          /* phase r: positions r, r + s, ... in [lo, hi) */
                for (int64_t q = (lo - r + s - 1) / s; q * s + r < hi; q++) dst[r * l->phase + q] = row[q * s + r];
        }
}

/* The plane dx <- the inputs' entries of buf (zero where no output reads the input). */
INLINE void NAME(store)(const geometry *g, const layout *l, const T *restrict buf, T *restrict dx) {
    memset(dx, 0, sizeof(T) * (size_t)l->in_plane);
    int64_t z[3], lo, hi, s = g->stride[2];
    for (z[0] = 0; z[0] < l->extent[0]; z[0]++)
        for (z[1] = 0; z[1] < l->extent[1]; z[1]++) {
            if (!row_span(g, l, z[0], z[1], &lo, &hi)) continue;
            T *row = dx + ((z[0] - g->pad[0]) * g->in[1] + z[1] - g->pad[1]) * g->in[2] - g->pad[2];
            z[2] = 0;
            const T *src = buf + local_index(g, l, z);
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
            for (int64_t r = 0; r < s; r++)
                for (int64_t q = (lo - r + s - 1) / s; q * s + r < hi; q++) row[q * s + r] = src[r * l->phase + q];
        }
}

/* The run <- the plane dy, zero between rows and SLACK zeros after; and the plane y <- the run. */
INLINE void NAME(spread)(const geometry *g, const layout *l, const T *restrict dy, T *restrict run) {
    memset(run, 0, sizeof(T) * (size_t)(l->run + SLACK));
    for (int64_t d = 0; d < g->out[0]; d++)
        for (int64_t h = 0; h < g->out[1]; h++)
            memcpy(run + run_row(l, d, h), dy + (d * g->out[1] + h) * g->out[2], sizeof(T) * (size_t)g->out[2]);
}
INLINE void NAME(gather)(const geometry *g, const layout *l, const T *restrict run, T *restrict y) {
    for (int64_t d = 0; d < g->out[0]; d++)
        for (int64_t h = 0; h < g->out[1]; h++)
            memcpy(y + (d * g->out[1] + h) * g->out[2], run + run_row(l, d, h), sizeof(T) * (size_t)g->out[2]);
}

