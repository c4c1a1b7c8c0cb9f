/* The typed half of depthwise.c, included once per instruction set and element type (instantiate.h):
 * T is the element type, NAME(f) the function name with its suffix, VECTOR_BYTES the vector size. */

#include "planes_typed.h"

/* One vector of T in the instruction set's registers (GCC/clang vector extensions), VL elements;
 * loads and stores may be unaligned. */
typedef T NAME(vec) __attribute__((vector_size(VECTOR_BYTES), aligned(sizeof(T)), may_alias));
#define VL ((int64_t)(VECTOR_BYTES / sizeof(T)))

/* out[j] = sum over taps t of w[t] * base[tap[t] + j] for the vectors j < VL vectors, their sums kept in
 * registers over every tap (vectors: a constant, so that each count compiles to its own code). Fewer
 * than eight vectors keep 8 / vectors sums each, of every 8 / vectors-th tap, added in a fixed order at
 * the end: one chain of dependent multiply-adds per vector would wait on each one's latency (a global
 * pooling window of 49 taps over one output). */
INLINE void NAME(correlate_block)(T *restrict out, const T *restrict base, const int64_t *restrict tap,
                                  const T *restrict w, int64_t taps, const int vectors) {
    const int chains = 8 / vectors;
    NAME(vec) a[8];
    for (int i = 0; i < chains * vectors; i++) a[i] = (NAME(vec)){0};
    int64_t t = 0;
    for (; t + chains <= taps; t += chains)
        for (int k = 0; k < chains; k++) {
            const NAME(vec) *src = (const NAME(vec) *)(base + tap[t + k]);
            T c = w[t + k];
            for (int i = 0; i < vectors; i++) a[k * vectors + i] += c * src[i];
        }
    for (int k = 0; t < taps; t++, k++) {
        const NAME(vec) *src = (const NAME(vec) *)(base + tap[t]);
        T c = w[t];
        for (int i = 0; i < vectors; i++) a[k * vectors + i] += c * src[i];
    }
    for (int k = 1; k < chains; k++)
        for (int i = 0; i < vectors; i++) a[i] += a[k * vectors + i];
    NAME(vec) *dst = (NAME(vec) *)out;
    for (int i = 0; i < vectors; i++) dst[i] = a[i];
}

/* out[j] = sum over taps t of w[t] * base[tap[t] + j], j < n rounded up to a vector: eight vectors of
 * outputs at a time (eight independent sums hide the loads' and FMAs' latency better than four: 144
 * channels at 28x28 0.72-0.85 ms against 0.85-0.95), then the rest in as few vectors as hold it (a
 * plane of a few outputs, a global pooling window's one, takes one vector per tap, not eight). */
INLINE void NAME(correlate)(T *restrict out, const T *restrict base, const int64_t *restrict tap,
                            const T *restrict w, int64_t taps, int64_t n) {
    int64_t j = 0;
    for (; j + 8 * VL <= n; j += 8 * VL) NAME(correlate_block)(out + j, base + j, tap, w, taps, 8);
    switch ((n - j + VL - 1) / VL) {
    case 0: break;
    case 1: NAME(correlate_block)(out + j, base + j, tap, w, taps, 1); break;
    case 2: NAME(correlate_block)(out + j, base + j, tap, w, taps, 2); break;
    case 3: NAME(correlate_block)(out + j, base + j, tap, w, taps, 3); break;
    case 4: NAME(correlate_block)(out + j, base + j, tap, w, taps, 4); break;
    case 5: NAME(correlate_block)(out + j, base + j, tap, w, taps, 5); break;
    case 6: NAME(correlate_block)(out + j, base + j, tap, w, taps, 6); break;
    case 7: NAME(correlate_block)(out + j, base + j, tap, w, taps, 7); break;
    default: NAME(correlate_block)(out + j, base + j, tap, w, taps, 8);
    }
}

/* acc[j] += a * src[j], j < n rounded up to four vectors. */
INLINE void NAME(axpy)(T *restrict acc, const T *restrict src, T a, int64_t n) {
    for (int64_t j = 0; j < n; j += 4 * VL) {
        NAME(vec) *dst = (NAME(vec) *)(acc + j);
        const NAME(vec) *x = (const NAME(vec) *)(src + j);
        dst[0] += a * x[0]; dst[1] += a * x[1]; dst[2] += a * x[2]; dst[3] += a * x[3];
    }
}

/* lanes[0..4) += a[j] * b[j], j < n rounded up to four vectors: a dot product kept as 4 VL partial
 * sums (lane i sums the j = i mod 4 VL), vectorized without reassociating anything. */
INLINE void NAME(dot)(NAME(vec) *restrict lanes, const T *restrict a, const T *restrict b, int64_t n) {
    NAME(vec) s0 = lanes[0], s1 = lanes[1], s2 = lanes[2], s3 = lanes[3];
    for (int64_t j = 0; j < n; j += 4 * VL) {
        const NAME(vec) *x = (const NAME(vec) *)(a + j), *y = (const NAME(vec) *)(b + j);
        s0 += x[0] * y[0]; s1 += x[1] * y[1]; s2 += x[2] * y[2]; s3 += x[3] * y[3];
    }
    lanes[0] = s0; lanes[1] = s1; lanes[2] = s2; lanes[3] = s3;
}

/* The row-shared correlation: where the kernel's rows are consecutive rows of the local buffer (stride 1
 * and dilation 1 in the second-to-last dim), the taps fall into columns (a kernel column: taps with the
 * same offset along a row, on consecutive rows), and one input vector serves every output row of a
 * block that reads it through one of the column's taps: up to m multiply-adds per load instead of one.
 * The flat run reads one vector per multiply-add; in 64-byte vectors, where every unaligned load spans
 * two cache lines, that bounds it by the loads (7x7 over 14x14 planes took as long in 64-byte vectors
 * as in 32-byte ones). The outputs are the flat run's, position for position, each summed in another
 * order. Measured (forward, one thread, best of 45 runs, 2-core EPYC), row-shared against flat time in
 * 64-byte vectors: 7x7 over 14x14 and 28x28 planes 0.57 and 0.63, 5x5 0.70 and 0.78, 5x5 at 56x56
 * 0.85, but 3x3 1.03 to 1.22; in 32-byte vectors 0.93 to 1.27. Hence 64-byte vectors and kernels of
 * ROWS_MIN_TAPS rows or more only. */
#ifndef DNNBIND_ROWS_PLAN
#define DNNBIND_ROWS_PLAN
#define ROWS_MIN_TAPS 5       /* the shortest kernel column (rows of the kernel) taken this way */
#define ROWS_MAX_TAPS 8       /* and the longest */
/* Output vectors a block sums (rows times vectors per row): with the column's weights and the input
 * vectors they fit AVX-512's 32 vector registers (measured: 12 no faster than 8). */
#define ROWS_ACCUMULATORS 8
typedef struct {
    int64_t pitch;            /* the buffer's row pitch: width[2] */
    int64_t rows;             /* output rows of the run: ceil(run / pitch) */
    int64_t vectors;          /* vectors per output row */
    int64_t columns;          /* kernel columns, each m taps on consecutive rows */
    int64_t m;
    int64_t *start;           /* each column's first tap: where its inputs for output row 0 start */
} rows_plan;
#endif

/* Whether the row-shared correlation serves this layout (see above), and its plan; start points into
 * starts (room for l->taps entries), the columns in the order (k0, k2). */
static int NAME(rows_plan_for)(const geometry *g, const layout *l, rows_plan *rp, int64_t *starts) {
    int64_t m = g->kernel[1];
    if (VECTOR_BYTES != 64 || g->stride[1] != 1 || g->dilation[1] != 1 || m < ROWS_MIN_TAPS || m > ROWS_MAX_TAPS)
        return 0;
    rp->pitch = l->width[2];
    rp->rows = (l->run + rp->pitch - 1) / rp->pitch;
    if (rp->rows < 2) return 0;
    rp->vectors = (g->out[2] + VL - 1) / VL;
    rp->m = m;
    rp->columns = g->kernel[0] * g->kernel[2];
    rp->start = starts;
    for (int64_t k0 = 0; k0 < g->kernel[0]; k0++)          /* taps run (k0, k1, k2), k2 fastest */
        for (int64_t k2 = 0; k2 < g->kernel[2]; k2++)
            rp->start[k0 * g->kernel[2] + k2] = l->tap[(k0 * m) * g->kernel[2] + k2];
    return 1;
}

/* One block: block output rows, vectors (1 or 2) vectors of each, block * vectors at most
 * ROWS_ACCUMULATORS (m, vectors and block constants: each combination compiles to its own fully
 * unrolled code). wr holds each column's m weights in turn, top row first. */
INLINE void NAME(rows_block)(T *restrict out, const T *restrict base, const rows_plan *rp,
                             const T *restrict wr, const int m, const int vectors, const int block) {
    NAME(vec) a[ROWS_ACCUMULATORS];
    for (int i = 0; i < ROWS_ACCUMULATORS; i++) a[i] = (NAME(vec)){0};
    const int64_t pitch = rp->pitch;
    for (int64_t c = 0; c < rp->columns; c++, wr += m) {
        const T *src = base + rp->start[c];
        T wk[ROWS_MAX_TAPS];
        for (int i = 0; i < m; i++) wk[i] = wr[i];
#pragma GCC unroll 16
        for (int s = 0; s < m + block - 1; s++) {           /* input row s of the block's window */
            NAME(vec) x0 = *(const NAME(vec) *)(src + s * pitch), x1 = x0;
            if (vectors == 2) x1 = *(const NAME(vec) *)(src + s * pitch + VL);
#pragma GCC unroll 8
            for (int b = 0; b < block; b++)                 /* output row b reads it through tap s - b */
                if (s - b >= 0 && s - b < m) {
                    a[b * vectors] += wk[s - b] * x0;
                    if (vectors == 2) a[b * vectors + 1] += wk[s - b] * x1;
                }
        }
    }
    for (int b = 0; b < block; b++) {
        *(NAME(vec) *)(out + b * pitch) = a[b * vectors];
        if (vectors == 2) *(NAME(vec) *)(out + b * pitch + VL) = a[b * vectors + 1];
    }
}

#define ROWS_STRIP(V, B) \
    switch (rp->m) { \
    case 5: NAME(rows_block)(out + at, base + at, rp, w, 5, V, B); break; \
    case 6: NAME(rows_block)(out + at, base + at, rp, w, 6, V, B); break; \
    case 7: NAME(rows_block)(out + at, base + at, rp, w, 7, V, B); break; \
    default: NAME(rows_block)(out + at, base + at, rp, w, 8, V, B); \
    }

/* The run's outputs by the row-shared correlation: blocks of rows, each in strips of two vectors (one
 * for an odd last); w as rows_block takes it. Reads up to a block of rows and a vector past the flat
 * run's inputs, and writes as far past its outputs (rows_extra). */
INLINE void NAME(correlate_rows)(T *restrict out, const T *restrict base, const rows_plan *rp, const T *restrict w) {
    enum { tall = ROWS_ACCUMULATORS, short_ = ROWS_ACCUMULATORS / 2 };
    if (rp->vectors < 2) {
        for (int64_t o = 0, at = 0; o < rp->rows; o += tall, at = o * rp->pitch) ROWS_STRIP(1, tall)
        return;
    }
    for (int64_t o = 0; o < rp->rows; o += short_) {
        int64_t v = 0, at;
        for (; v + 2 <= rp->vectors; v += 2) {
            at = o * rp->pitch + v * VL;
            ROWS_STRIP(2, short_)
        }
        if (v < rp->vectors) {
            at = o * rp->pitch + v * VL;
            ROWS_STRIP(1, short_)
        }
    }
}
#undef ROWS_STRIP

/* Elements past the flat run's end (inputs and outputs alike) that correlate_rows may touch. */
INLINE int64_t NAME(rows_extra)(const layout *l) {
    return ROWS_ACCUMULATORS * l->width[2] + VL;
}

/* y[p] = the correlation of x[p] with w[p mod C] (its taps reversed when flip), planes p in [p0, p1);
 * each plane of x also copied to copy (unless NULL) while it is in cache. */
static int NAME(correlate_planes)(const T *x, const T *w, T *y, T *copy, const geometry *g, int64_t p0,
                                  int64_t p1, int flip) {
    layout l;
    if (make_layout(g, &l, SLACK)) return -1;
    rows_plan rp = {0};
    int64_t *starts = malloc(sizeof(int64_t) * (size_t)(2 * l.taps)), *order = starts + l.taps;
    int rows = starts && NAME(rows_plan_for)(g, &l, &rp, starts);
    int64_t extra = rows ? NAME(rows_extra)(&l) : 0;
    int64_t run_size = l.run + SLACK + extra;
    T *buf = malloc(sizeof(T) * (size_t)(l.local + extra + run_size + l.taps));
    if (!buf || !starts) { free(buf); free(starts); free(l.tap); return -1; }
    T *run = buf + l.local + extra, *wc = run + run_size;
    NAME(fill)(buf, l.local + extra, 0);
    /* wc[i] = w[order[i]] of each plane's channel: the taps in the order the correlation reads them (the
     * row-shared one column by column (k0, k2), each top row first), reversed when flip */
    for (int64_t i = 0; i < l.taps; i++) {
        int64_t tap = i;
        if (rows) {                                   /* i = ((k0, k2), k1) */
            int64_t k1 = i % rp.m, column = i / rp.m, k0 = column / g->kernel[2], k2 = column % g->kernel[2];
            tap = (k0 * rp.m + k1) * g->kernel[2] + k2;
        }
        order[i] = flip ? l.taps - 1 - tap : tap;
    }
    for (int64_t p = p0; p < p1; p++) {
        const T *wp = w + (p % g->channels) * l.taps;
        for (int64_t i = 0; i < l.taps; i++) wc[i] = wp[order[i]];
        NAME(load)(g, &l, x + p * l.in_plane, buf);
        if (copy) keep_copy(copy + p * l.in_plane, x + p * l.in_plane, sizeof(T) * (size_t)l.in_plane);
        if (rows)
            NAME(correlate_rows)(run, buf, &rp, wc);
        else
            NAME(correlate)(run, buf, l.tap, wc, l.taps, l.run);
        NAME(gather)(g, &l, run, y + p * l.out_plane);
    }
    if (copy) keep_copies_done();
    free(buf); free(starts); free(l.tap);
    return 0;
}

/* y[p] = the depthwise correlation of x[p] with w[p mod C], planes p in [p0, p1); x's planes also
 * copied to copy unless it is NULL (the forward's own copy of x, made while each plane is in cache). */
KERNEL int NAME(dnnbind_depthwise_forward)(const T *x, const T *w, T *y, T *copy, const geometry *g,
                                          int64_t p0, int64_t p1) {
    return NAME(correlate_planes)(x, w, y, copy, g, p0, p1, 0);
}

/* dx[p] = the data gradient of that correlation for output gradient dy[p], planes p in [p0, p1).
 * Stride 1: the correlation of dy with the reversed filter. Strided: each tap's weighted dy added
 * into the local buffer where the forward read that tap's inputs, then the inputs copied out. */
KERNEL int NAME(dnnbind_depthwise_data_grad)(const T *dy, const T *w, T *dx, const geometry *g,
                                            int64_t p0, int64_t p1) {
    if (g->stride[0] == 1 && g->stride[1] == 1 && g->stride[2] == 1) {
        geometry back = *g;      /* padded by the kernel's reach less the forward's padding */
        for (int i = 0; i < 3; i++) {
            back.in[i] = g->out[i];
            back.out[i] = g->in[i];
            back.pad[i] = (g->kernel[i] - 1) * g->dilation[i] - g->pad[i];
        }
        return NAME(correlate_planes)(dy, w, dx, 0, &back, p0, p1, 1);
    }
    layout l;
    if (make_layout(g, &l, SLACK)) return -1;
    T *buf = malloc(sizeof(T) * (size_t)(l.local + l.run + SLACK));
    if (!buf) { free(l.tap); return -1; }
    T *run = buf + l.local;
    NAME(fill)(run, l.run + SLACK, 0);
    for (int64_t p = p0; p < p1; p++) {
        const T *wc = w + (p % g->channels) * l.taps;
        memset(buf, 0, sizeof(T) * (size_t)l.local);
        NAME(spread)(g, &l, dy + p * l.out_plane, run);
        for (int64_t j = 0; j < l.run; j += CHUNK)          /* a chunk of the run, then every tap */
            for (int64_t t = 0; t < l.taps; t++)
                NAME(axpy)(buf + l.tap[t] + j, run + j, wc[t], l.run - j < CHUNK ? l.run - j : CHUNK);
        NAME(store)(g, &l, buf, dx + p * l.in_plane);
    }
    free(buf); free(l.tap);
    return 0;
}

/* dw[c] = the filter gradient summed over the samples [0, batch), for channels c in [c0, c1). */
KERNEL int NAME(dnnbind_depthwise_filter_grad)(const T *dy, const T *x, T *dw, const geometry *g,
                                              int64_t batch, int64_t c0, int64_t c1) {
    layout l;
    if (make_layout(g, &l, SLACK)) return -1;
    NAME(vec) *lanes = malloc(sizeof(NAME(vec)) * (size_t)(4 * l.taps));
    T *buf = malloc(sizeof(T) * (size_t)(l.local + l.run + SLACK));
    if (!buf || !lanes) { free(buf); free(lanes); free(l.tap); return -1; }
    T *run = buf + l.local;
    NAME(fill)(buf, l.local + l.run + SLACK, 0);
    for (int64_t c = c0; c < c1; c++) {
        memset(lanes, 0, sizeof(NAME(vec)) * (size_t)(4 * l.taps));
        for (int64_t n = 0; n < batch; n++) {
            int64_t p = n * g->channels + c;
            NAME(load)(g, &l, x + p * l.in_plane, buf);
            NAME(spread)(g, &l, dy + p * l.out_plane, run);
            for (int64_t j = 0; j < l.run; j += CHUNK)
                for (int64_t t = 0; t < l.taps; t++)
                    NAME(dot)(lanes + 4 * t, run + j, buf + l.tap[t] + j, l.run - j < CHUNK ? l.run - j : CHUNK);
        }
        for (int64_t t = 0; t < l.taps; t++) {
            const T *sums = (const T *)(lanes + 4 * t);
            T sum = 0;
            for (int64_t i = 0; i < 4 * VL; i++) sum += sums[i];
            dw[c * l.taps + t] = sum;
        }
    }
    free(buf); free(lanes); free(l.tap);
    return 0;
}

#undef VL
