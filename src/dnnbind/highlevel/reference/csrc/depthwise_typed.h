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

/* y[p] = the correlation of x[p] with w[p mod C] (its taps reversed when flip), planes p in [p0, p1);
 * each plane of x also copied to copy (unless NULL) while it is in cache. */
static int NAME(correlate_planes)(const T *x, const T *w, T *y, T *copy, const geometry *g, int64_t p0,
                                  int64_t p1, int flip) {
    layout l;
    if (make_layout(g, &l, SLACK)) return -1;
    T *buf = malloc(sizeof(T) * (size_t)(l.local + l.run + SLACK + l.taps));
    if (!buf) { free(l.tap); return -1; }
    T *run = buf + l.local, *wc = run + l.run + SLACK;
    NAME(fill)(buf, l.local, 0);
    for (int64_t p = p0; p < p1; p++) {
        const T *wp = w + (p % g->channels) * l.taps;
        for (int64_t t = 0; t < l.taps; t++) wc[t] = wp[flip ? l.taps - 1 - t : t];
        NAME(load)(g, &l, x + p * l.in_plane, buf);
        if (copy) keep_copy(copy + p * l.in_plane, x + p * l.in_plane, sizeof(T) * (size_t)l.in_plane);
        NAME(correlate)(run, buf, l.tap, wc, l.taps, l.run);
        NAME(gather)(g, &l, run, y + p * l.out_plane);
    }
    if (copy) keep_copies_done();
    free(buf); free(l.tap);
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
