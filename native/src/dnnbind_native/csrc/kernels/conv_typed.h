/* The typed half of conv.c (instantiate.h: T, NAME(f), VECTOR_BYTES). */
#include "planes_typed.h"
#include "sums_typed.h"

typedef T NAME(cvec) __attribute__((vector_size(VECTOR_BYTES), aligned(sizeof(T)), may_alias));
#define CVL ((int64_t)(VECTOR_BYTES / sizeof(T)))
/* Output channels per register tile: 12 x 2 accumulators fit AVX-512's 32 registers, 6 x 2 the 16 of
 * AVX2 and SSE, with room for the two input vectors. */
#define MR (VECTOR_BYTES == 64 ? 12 : 6)
/* Consecutive outputs per register tile. */
#define NR (2 * CVL)

/* wp[b][c][t][m] = w[b * MR + m][c][t] (0 past the group's last output channel): each tile's weights in
 * the order the tile reads them. */
INLINE void NAME(pack_weights)(const T *restrict w, T *restrict wp, int64_t outputs, int64_t inputs, int64_t taps) {
    int64_t blocks = (outputs + MR - 1) / MR;
    for (int64_t b = 0; b < blocks; b++)
        for (int64_t c = 0; c < inputs; c++)
            for (int64_t t = 0; t < taps; t++)
                for (int64_t m = 0; m < MR; m++) {
                    int64_t k = b * MR + m;
                    wp[((b * inputs + c) * taps + t) * MR + m] = k < outputs ? w[(k * inputs + c) * taps + t] : 0;
                }
}

/* out[m * pitch + j + i], m < rows, i < NR = (or += when accumulate) the tile's sums over input
 * channels c < inputs (planes ``local`` apart in buf) and kernel offsets t (at tap[t] in each plane),
 * weights wp as packed (MR per offset, of which the first ``rows``: a constant where it is inlined, so
 * that its sums stay in registers). */
INLINE void NAME(tile)(const T *restrict buf, int64_t local, const int64_t *restrict tap, int64_t taps,
                       int64_t inputs, const T *restrict wp, T *restrict out, int64_t pitch, int64_t j,
                       int accumulate, const int rows) {
    NAME(cvec) acc[MR][2];
    for (int m = 0; m < rows; m++) acc[m][0] = acc[m][1] = (NAME(cvec)){0};
    for (int64_t c = 0; c < inputs; c++) {
        const T *plane = buf + c * local + j;
        for (int64_t t = 0; t < taps; t++, wp += MR) {
            const NAME(cvec) *src = (const NAME(cvec) *)(plane + tap[t]);
            NAME(cvec) b0 = src[0], b1 = src[1];
            for (int m = 0; m < rows; m++) {
                acc[m][0] += wp[m] * b0;
                acc[m][1] += wp[m] * b1;
            }
        }
    }
    for (int m = 0; m < rows; m++) {
        NAME(cvec) *dst = (NAME(cvec) *)(out + m * pitch + j);
        if (accumulate) {
            dst[0] += acc[m][0];
            dst[1] += acc[m][1];
        } else {
            dst[0] = acc[m][0];
            dst[1] = acc[m][1];
        }
    }
}

/* :func:`tile` for a block of ``wanted`` rows (at most MR): the whole tile, or where the block is the last
 * and short, a tile of two thirds or one third of MR rows that covers it. The rows past ``wanted`` in a
 * tile are zero weights (pack_weights, pack_transposed) whose sums nobody reads: a 16-channel layer's
 * second block of 12 rows computed 8 of them for nothing, a third of its work. */
INLINE void NAME(tile_fit)(const T *restrict buf, int64_t local, const int64_t *restrict tap, int64_t taps,
                           int64_t inputs, const T *restrict wp, T *restrict out, int64_t pitch, int64_t j,
                           int accumulate, int64_t wanted) {
    if (wanted > 2 * MR / 3)
        NAME(tile)(buf, local, tap, taps, inputs, wp, out, pitch, j, accumulate, MR);
    else if (wanted > MR / 3)
        NAME(tile)(buf, local, tap, taps, inputs, wp, out, pitch, j, accumulate, 2 * MR / 3);
    else
        NAME(tile)(buf, local, tap, taps, inputs, wp, out, pitch, j, accumulate, MR / 3);
}

/* y[n] = the convolution of x[n] with w (groups of inputs / groups input and outputs / groups output
 * channels; g->channels is x's channel count), for work units [u0, u1). With splits 1 a unit is a
 * sample, and samples go through in chunks whose input planes fit a budget (CONV_CHUNK_BYTES), so that
 * each tile's weights, read once per output-channel block, serve the whole chunk from cache rather than
 * one sample. With splits > 1 (fewer samples than threads) unit u is part u mod splits of sample
 * u / splits: that part of its blocks of output channels, so that one sample keeps every core busy. x's
 * planes are also copied to copy unless it is NULL (the forward's own copy of x, made while each plane
 * is in cache; by each sample's first part). bias (per output channel) is added as the outputs are
 * written, unless NULL. */
KERNEL int NAME(dnnbind_conv_forward)(const T *x, const T *w, const T *bias, T *y, T *copy, const geometry *g,
                                     int64_t outputs, int64_t groups, int64_t splits, int64_t u0, int64_t u1) {
    layout l;
    if (make_layout(g, &l, SLACK)) return -1;
    int64_t cg = g->channels / groups, kg = outputs / groups, blocks = (kg + MR - 1) / MR;
    int64_t per_part = (blocks + splits - 1) / splits;       /* blocks of one part of a sample */
    int64_t chunk = CONV_CHUNK_BYTES / (int64_t)sizeof(T) / (cg * l.local);
    chunk = chunk < 1 || splits > 1 ? 1 : chunk;
    chunk = chunk < u1 - u0 ? chunk : (u1 - u0 > 0 ? u1 - u0 : 1);
    int64_t span = chunk * l.local;                          /* a chunk's planes of one channel */
    int64_t rpitch = (l.run + NR - 1) / NR * NR;             /* one sample's tiled outputs */
    int64_t pitch = chunk * rpitch;                          /* the chunk's, per output channel */
    T *buf = malloc(sizeof(T) * (size_t)(cg * span));
    T *out = malloc(sizeof(T) * (size_t)(blocks * MR * pitch));
    T *wp = malloc(sizeof(T) * (size_t)(groups * blocks * MR * cg * l.taps));
    if (!buf || !out || !wp) { free(buf); free(out); free(wp); free(l.tap); return -1; }
    NAME(fill)(buf, cg * span, 0);
    for (int64_t gi = 0; gi < groups; gi++)
        NAME(pack_weights)(w + gi * kg * cg * l.taps, wp + gi * blocks * MR * cg * l.taps, kg, cg, l.taps);
    for (int64_t u = u0; u < u1;) {
        int64_t c0, c1, b0 = 0, b1 = blocks;                 /* samples [c0, c1), blocks [b0, b1) */
        if (splits == 1) {
            c0 = u;
            c1 = u + chunk < u1 ? u + chunk : u1;
            u = c1;
        } else {
            c0 = u / splits;
            c1 = c0 + 1;
            b0 = u % splits * per_part;
            b1 = b0 + per_part < blocks ? b0 + per_part : blocks;
            u++;
            if (b0 >= b1) continue;
        }
        int64_t k1 = b1 * MR < kg ? b1 * MR : kg;
        for (int64_t gi = 0; gi < groups; gi++) {
            for (int64_t c = 0; c < cg; c++)
                for (int64_t n = c0; n < c1; n++) {
                    int64_t plane = (n * g->channels + gi * cg + c) * l.in_plane;
                    NAME(load)(g, &l, x + plane, buf + c * span + (n - c0) * l.local);
                    if (copy && b0 == 0) keep_copy(copy + plane, x + plane, sizeof(T) * (size_t)l.in_plane);
                }
            const T *wg = wp + gi * blocks * MR * cg * l.taps;
            for (int64_t b = b0; b < b1; b++)
                for (int64_t n = c0; n < c1; n++)
                    for (int64_t j = 0; j < l.run; j += NR)
                        NAME(tile_fit)(buf + (n - c0) * l.local, span, l.tap, l.taps, cg, wg + b * cg * l.taps * MR,
                                       out + b * MR * pitch + (n - c0) * rpitch, pitch, j, 0, kg - b * MR);
            for (int64_t k = b0 * MR; k < k1; k++)
                for (int64_t n = c0; n < c1; n++) {
                    const T *run = out + k * pitch + (n - c0) * rpitch;
                    T *plane = y + (n * outputs + gi * kg + k) * l.out_plane;
                    if (bias) NAME(gather_shifted)(g, &l, run, plane, bias[gi * kg + k]);
                    else NAME(gather)(g, &l, run, plane);
                }
        }
    }
    if (copy) keep_copies_done();
    free(buf); free(out); free(wp); free(l.tap);
    return 0;
}

/* wt[((t * blocks + b) * outputs + k) * MR + m] = w[k][b * MR + m][t] (0 past the group's last input
 * channel): for each kernel offset, the transposed filter in the order the data gradient's tiles read it. */
INLINE void NAME(pack_transposed)(const T *restrict w, T *restrict wt, int64_t outputs, int64_t inputs, int64_t taps) {
    int64_t blocks = (inputs + MR - 1) / MR;
    for (int64_t t = 0; t < taps; t++)
        for (int64_t b = 0; b < blocks; b++)
            for (int64_t k = 0; k < outputs; k++)
                for (int64_t m = 0; m < MR; m++) {
                    int64_t c = b * MR + m;
                    wt[((t * blocks + b) * outputs + k) * MR + m] = c < inputs ? w[(k * inputs + c) * taps + t] : 0;
                }
}

/* dx[n] = the data gradient of dnnbind_conv_forward for dy[n], samples n in [n0, n1): each sample's dy
 * planes spread into runs, then per kernel offset t a product of the transposed filter and dy added
 * where the forward read that offset's inputs, in the plane layout (tiles of MR input channels by two
 * vectors of outputs, over every output channel), then every input channel's plane copied out. For
 * strided problems: stride 1's data gradient is a forward convolution (conv_paths.Direct). Samples go
 * in chunks as in the forward, so each (offset, block)'s weights serve the whole chunk from cache. */
KERNEL int NAME(dnnbind_conv_data_grad)(const T *dy, const T *w, T *dx, const geometry *g, int64_t outputs,
                                       int64_t groups, int64_t n0, int64_t n1) {
    layout l;
    if (make_layout(g, &l, SLACK)) return -1;
    int64_t cg = g->channels / groups, kg = outputs / groups, blocks = (cg + MR - 1) / MR, cpad = blocks * MR;
    int64_t rpitch = (l.run + NR - 1) / NR * NR + SLACK;             /* a dy run and what a tile reads past it */
    int64_t chunk = CONV_CHUNK_BYTES / (int64_t)sizeof(T) / (cpad * l.local + kg * rpitch);
    chunk = chunk < 1 ? 1 : chunk;
    chunk = chunk < n1 - n0 ? chunk : (n1 - n0 > 0 ? n1 - n0 : 1);
    int64_t span = chunk * l.local, rspan = chunk * rpitch;
    T *buf = malloc(sizeof(T) * (size_t)(cpad * span));           /* dx in the plane layout, per channel */
    T *runs = malloc(sizeof(T) * (size_t)(kg * rspan));            /* dy runs, per output channel */
    T *wt = malloc(sizeof(T) * (size_t)(groups * l.taps * cpad * kg));
    int64_t zero = 0;
    if (!buf || !runs || !wt) { free(buf); free(runs); free(wt); free(l.tap); return -1; }
    NAME(fill)(runs, kg * rspan, 0);
    for (int64_t gi = 0; gi < groups; gi++)
        NAME(pack_transposed)(w + gi * kg * cg * l.taps, wt + gi * l.taps * cpad * kg, kg, cg, l.taps);
    for (int64_t c0 = n0; c0 < n1; c0 += chunk) {
        int64_t c1 = c0 + chunk < n1 ? c0 + chunk : n1;
        for (int64_t gi = 0; gi < groups; gi++) {
            memset(buf, 0, sizeof(T) * (size_t)(cpad * span));
            for (int64_t k = 0; k < kg; k++)
                for (int64_t n = c0; n < c1; n++)
                    NAME(spread)(g, &l, dy + (n * outputs + gi * kg + k) * l.out_plane, runs + k * rspan + (n - c0) * rpitch);
            const T *wg = wt + gi * l.taps * cpad * kg;
            for (int64_t t = 0; t < l.taps; t++)
                for (int64_t b = 0; b < blocks; b++)
                    for (int64_t n = c0; n < c1; n++)
                        for (int64_t j = 0; j < l.run; j += NR)
                            NAME(tile_fit)(runs + (n - c0) * rpitch, rspan, &zero, 1, kg, wg + (t * blocks + b) * kg * MR,
                                           buf + b * MR * span + (n - c0) * l.local + l.tap[t], span, j, 1,
                                           cg - b * MR);
            for (int64_t c = 0; c < cg; c++)
                for (int64_t n = c0; n < c1; n++)
                    NAME(store)(g, &l, buf + c * span + (n - c0) * l.local, dx + (n * g->channels + gi * cg + c) * l.in_plane);
        }
    }
    free(buf); free(runs); free(wt); free(l.tap);
    return 0;
}

/* Filter-gradient tiles: FK output channels by FC (input channel, kernel offset) pairs, each a vector of
 * partial sums over the outputs (4 x 6 = 24 accumulators on AVX-512, 2 x 5 on the 16-register sets). */
#define FK (VECTOR_BYTES == 64 ? 4 : 2)
#define FC (VECTOR_BYTES == 64 ? 6 : 5)

/* sums[a * pairs + q] += the dot products, over samples s < samples and j in [j0, j0 + n) (n rounded up
 * to a vector), of dy rows a < FK (dy + s * dy_sample + a * dy_pitch) and the inputs of pairs q < FC
 * (input channel cq[q] at offset tq[q] of buf + s * buf_sample): vectors of partial sums in registers,
 * each added up in one fixed order at the end. */
INLINE void NAME(filter_tile)(const T *restrict dy, int64_t dy_pitch, int64_t dy_sample, const T *restrict buf,
                              int64_t local, int64_t buf_sample, int64_t samples, const int64_t *restrict cq,
                              const int64_t *restrict tq, int64_t pairs, double *restrict sums, int64_t j0, int64_t n) {
    NAME(cvec) acc[FK][FC];
    for (int a = 0; a < FK; a++)
        for (int q = 0; q < FC; q++) acc[a][q] = (NAME(cvec)){0};
    for (int64_t s = 0; s < samples; s++) {
        const T *src[FC], *d0 = dy + s * dy_sample;
        for (int q = 0; q < FC; q++) src[q] = buf + s * buf_sample + cq[q] * local + tq[q];
        for (int64_t j = j0; j < j0 + n; j += CVL) {
            NAME(cvec) d[FK];
            for (int a = 0; a < FK; a++) d[a] = *(const NAME(cvec) *)(d0 + a * dy_pitch + j);
            for (int q = 0; q < FC; q++) {
                NAME(cvec) v = *(const NAME(cvec) *)(src[q] + j);
                for (int a = 0; a < FK; a++) acc[a][q] += d[a] * v;
            }
        }
    }
    for (int a = 0; a < FK; a++)
        for (int q = 0; q < FC; q++) {
            T total = 0;
            for (int64_t i = 0; i < CVL; i++) total += acc[a][q][i];
            sums[a * pairs + q] += total;
        }
}

/* dw[o] for output channels o in [o0, o1) (w's shape: groups * kg, cg, *kernel; a range may cover
 * several groups, or parts of them), summed over every sample of x and dy. Tiles of FK output channels
 * by FC (input channel, offset) pairs sum about FILTER_CHUNK outputs at a time in registers (a chunk of
 * one sample's, or several samples' whole planes), then add their vector partial sums up in a fixed
 * order, accumulated in double. Unless db is NULL, db[o] = the sum of dy's planes of channel o (the
 * bias gradient) in double, as channel_sums sums them, from each plane as it is spread. */
KERNEL int NAME(dnnbind_conv_filter_grad)(const T *dy, const T *x, T *dw, double *db, const geometry *g,
                                         int64_t outputs, int64_t groups, int64_t batch, int64_t o0, int64_t o1) {
    layout l;
    if (make_layout(g, &l, SLACK)) return -1;
    int64_t cg = g->channels / groups, kg = outputs / groups, pairs = cg * l.taps;
    int64_t most = o1 - o0 < kg ? o1 - o0 : kg;                     /* channels of one group in range */
    int64_t kpad = (most + FK - 1) / FK * FK, ppad = (pairs + FC - 1) / FC * FC;
    int64_t rpitch = (l.run + CVL - 1) / CVL * CVL;
    int64_t buf_sample = cg * l.local, dy_sample = kpad * rpitch;
    int64_t chunk = FILTER_CHUNK / rpitch;                        /* samples per pass */
    chunk = chunk < 1 ? 1 : chunk < batch ? chunk : (batch > 0 ? batch : 1);
    T *buf = malloc(sizeof(T) * (size_t)(chunk * buf_sample));
    T *runs = malloc(sizeof(T) * (size_t)(chunk * dy_sample + SLACK));
    double *sums = malloc(sizeof(double) * (size_t)(kpad * ppad));
    int64_t *cq = malloc(sizeof(int64_t) * (size_t)ppad * 2);
    if (!buf || !runs || !sums || !cq) { free(buf); free(runs); free(sums); free(cq); free(l.tap); return -1; }
    NAME(fill)(buf, chunk * buf_sample, 0);
    NAME(fill)(runs, chunk * dy_sample + SLACK, 0);
    int64_t *tq = cq + ppad;
    for (int64_t q = 0; q < ppad; q++) {        /* pairs past the last repeat pair 0 and are dropped */
        cq[q] = q < pairs ? q / l.taps : 0;
        tq[q] = l.tap[q < pairs ? q % l.taps : 0];
    }
    for (int64_t gi = o0 / kg; gi < groups && gi * kg < o1; gi++) {
        int64_t k0 = o0 > gi * kg ? o0 - gi * kg : 0, k1 = o1 < (gi + 1) * kg ? o1 - gi * kg : kg;
        int64_t krows = (k1 - k0 + FK - 1) / FK * FK;     /* rows past k1 - k0 only feed sums dropped below */
        memset(sums, 0, sizeof(double) * (size_t)(kpad * ppad));
        if (db) for (int64_t k = k0; k < k1; k++) db[gi * kg + k] = 0;
        for (int64_t n0 = 0; n0 < batch; n0 += chunk) {
            int64_t samples = n0 + chunk < batch ? chunk : batch - n0;
            for (int64_t s = 0; s < samples; s++) {
                for (int64_t c = 0; c < cg; c++)
                    NAME(load)(g, &l, x + ((n0 + s) * g->channels + gi * cg + c) * l.in_plane,
                               buf + s * buf_sample + c * l.local);
                for (int64_t k = k0; k < k1; k++) {
                    const T *plane = dy + ((n0 + s) * outputs + gi * kg + k) * l.out_plane;
                    NAME(spread)(g, &l, plane, runs + s * dy_sample + (k - k0) * rpitch);
                    if (db) db[gi * kg + k] += NAME(plane_sum)(plane, 0, 0.0, 0, l.out_plane);
                }
            }
            for (int64_t j = 0; j < l.run; j += FILTER_CHUNK) {
                int64_t m = l.run - j < FILTER_CHUNK ? l.run - j : FILTER_CHUNK;
                for (int64_t q = 0; q < ppad; q += FC)
                    for (int64_t a = 0; a < krows; a += FK)
                        NAME(filter_tile)(runs + a * rpitch, rpitch, dy_sample, buf, l.local, buf_sample, samples,
                                          cq + q, tq + q, ppad, sums + a * ppad + q, j, m);
            }
        }
        for (int64_t k = k0; k < k1; k++)
            for (int64_t q = 0; q < pairs; q++) dw[((gi * kg + k) * cg) * l.taps + q] = (T)sums[(k - k0) * ppad + q];
    }
    free(buf); free(runs); free(sums); free(cq); free(l.tap);
    return 0;
}

#undef CVL
#undef MR
#undef NR
#undef FK
#undef FC
#undef DL
#undef WIDE
