/* The typed half of columns.c (instantiate.h: T, NAME(f)); valid_outputs is columns.c's. */

/* cols[c, k0, k1, k2, n - n0, o0, o1, o2] = x[n, c, o0 * s0 + k0 * d0 - p0, ...] (0 outside x), for the
 * samples n in [n0, n1) and channels c in [c0, c1); x is (batch, channels, in0, in1, in2). */
KERNEL void NAME(dnnbind_folded_columns)(const T *x, T *cols, const geometry *g, int64_t n0, int64_t n1,
                                         int64_t c0, int64_t c1) {
    const int64_t in_plane = g->in[0] * g->in[1] * g->in[2];
    const int64_t out_row = g->out[2], out_plane = g->out[0] * g->out[1] * g->out[2];
    const int64_t taps = g->kernel[0] * g->kernel[1] * g->kernel[2], samples = n1 - n0;
    const int64_t s2 = g->stride[2];
    for (int64_t c = c0; c < c1; c++)
        for (int64_t k0 = 0; k0 < g->kernel[0]; k0++)
            for (int64_t k1 = 0; k1 < g->kernel[1]; k1++)
                for (int64_t k2 = 0; k2 < g->kernel[2]; k2++) {
                    const int64_t tap = (k0 * g->kernel[1] + k1) * g->kernel[2] + k2;
                    const int64_t off0 = k0 * g->dilation[0] - g->pad[0], off1 = k1 * g->dilation[1] - g->pad[1];
                    const int64_t off2 = k2 * g->dilation[2] - g->pad[2];
                    int64_t lo, hi;
                    valid_outputs(out_row, s2, off2, g->in[2], &lo, &hi);
                    T *restrict dst = cols + (c * taps + tap) * samples * out_plane;
                    for (int64_t n = n0; n < n1; n++) {
                        const T *src = x + (n * g->channels + c) * in_plane;
                        for (int64_t o0 = 0; o0 < g->out[0]; o0++) {
                            const int64_t i0 = o0 * g->stride[0] + off0;
                            for (int64_t o1 = 0; o1 < g->out[1]; o1++, dst += out_row) {
                                const int64_t i1 = o1 * g->stride[1] + off1;
                                if (i0 < 0 || i0 >= g->in[0] || i1 < 0 || i1 >= g->in[1]) {
                                    for (int64_t o2 = 0; o2 < out_row; o2++) dst[o2] = 0;
                                    continue;
                                }
                                /* rows are short (7 at 7x7): plain loops, no library call per row */
                                const T *restrict row = src + (i0 * g->in[1] + i1) * g->in[2] + off2;
                                for (int64_t o2 = 0; o2 < lo; o2++) dst[o2] = 0;
                                if (s2 == 1)
                                    for (int64_t o2 = lo; o2 < hi; o2++) dst[o2] = row[o2];
                                else
                                    for (int64_t o2 = lo; o2 < hi; o2++) dst[o2] = row[o2 * s2];
                                for (int64_t o2 = hi; o2 < out_row; o2++) dst[o2] = 0;
                            }
                        }
                    }
                }
}
