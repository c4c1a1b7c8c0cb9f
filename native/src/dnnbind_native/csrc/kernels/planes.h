/* The plane layout that the depthwise and pooling kernels share: each (sample, channel) plane is copied
 * into a small padded local buffer, split by stride phase in every spatial dim (the inputs r, r + s,
 * r + 2s, ... of phase r lie side by side), so that the inputs each window offset (kernel tap) reads
 * for all of a plane's outputs are one contiguous run of the buffer, whatever the stride and dilation;
 * the outputs are one run too (rows width[2] apart; the few between rows are computed and dropped).
 * Spatial ranks 1 to 3 arrive as rank 3 (leading sizes 1). */
#ifndef DNNBIND_PLANES_H
#define DNNBIND_PLANES_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

/* The geometry of one problem, as native.py's Geometry structure lays it out. */
typedef struct {
    int64_t in[3];        /* input spatial size */
    int64_t out[3];       /* output spatial size */
    int64_t kernel[3];
    int64_t stride[3];
    int64_t dilation[3];
    int64_t pad[3];       /* padding before the first input, per dim (negative: inputs cropped) */
    int64_t channels;
} geometry;

/* One plane's local buffer, and where outputs and kernel offsets fall in it. Local position z (the
 * input z - pad) of a dim with stride s lies in phase z % s at index z / s. Which positions of the
 * buffer receive inputs is the same for every plane: a kernel fills its buffers (padding) once and then
 * moves only the inputs of each plane (planes_typed.h: load, store). make_layout allocates l->tap, which
 * holds the row tables too; free(l->tap) frees them all. */
typedef struct {
    int64_t extent[3];    /* local positions the outputs read: (out - 1) * stride + (kernel - 1) * dilation + 1 */
    int64_t width[3];     /* positions per phase: extent rounded up to whole strides, divided by the stride */
    int64_t phase;        /* elements of one phase: width[0] * width[1] * width[2] */
    int64_t local;        /* elements of the buffer: phase times the phases, plus SLACK for the rounding */
    int64_t run;          /* the run of outputs: from output 0 to the last, rows width[2] apart */
    int64_t taps;
    int64_t *tap;         /* each kernel offset's inputs: where they start in the buffer */
    int64_t in_plane, out_plane;
    int64_t rows;         /* rows of a plane that hold inputs the outputs read, the same in every plane: */
    int64_t *row_in;      /* where each starts in the plane (at its position 0, which may be padding), */
    int64_t *row_local;   /* and where its phase 0 starts in the buffer; */
    int64_t lo, hi;       /* each row's inputs read are its local positions [lo, hi) of the last dim */
} layout;

/* Where local position z (one per dim) lies in the buffer. */
static inline int64_t local_index(const geometry *g, const layout *l, const int64_t z[3]) {
    int64_t phase = 0, index = 0;
    for (int i = 0; i < 3; i++) {
        phase = phase * g->stride[i] + z[i] % g->stride[i];
        index = index * l->width[i] + z[i] / g->stride[i];
    }
    return phase * l->phase + index;
}

/* The inputs of one row of a plane that the outputs read, as local positions [lo, hi) of the last dim;
 * 0 when the row (z0, z1 local) holds none. */
static inline int row_span(const geometry *g, const layout *l, int64_t z0, int64_t z1, int64_t *lo, int64_t *hi) {
    int64_t i0 = z0 - g->pad[0], i1 = z1 - g->pad[1];
    if (i0 < 0 || i0 >= g->in[0] || i1 < 0 || i1 >= g->in[1]) return 0;
    *lo = g->pad[2] > 0 ? g->pad[2] : 0;
    *hi = g->in[2] + g->pad[2] < l->extent[2] ? g->in[2] + g->pad[2] : l->extent[2];
    return *hi > *lo;
}

static inline int make_layout(const geometry *g, layout *l, int64_t slack) {
    l->phase = 1;
    for (int i = 0; i < 3; i++) {
        l->extent[i] = (g->out[i] - 1) * g->stride[i] + (g->kernel[i] - 1) * g->dilation[i] + 1;
        l->width[i] = (l->extent[i] + g->stride[i] - 1) / g->stride[i];
        l->phase *= l->width[i];
    }
    l->local = l->phase * g->stride[0] * g->stride[1] * g->stride[2] + slack;
    l->run = ((g->out[0] - 1) * l->width[1] + (g->out[1] - 1)) * l->width[2] + g->out[2];
    l->taps = g->kernel[0] * g->kernel[1] * g->kernel[2];
    l->in_plane = g->in[0] * g->in[1] * g->in[2];
    l->out_plane = g->out[0] * g->out[1] * g->out[2];
    int64_t most_rows = l->extent[0] * l->extent[1];
    l->tap = malloc(sizeof(int64_t) * (size_t)(l->taps + 2 * most_rows));
    if (!l->tap) return -1;
    l->row_in = l->tap + l->taps;
    l->row_local = l->row_in + most_rows;
    int64_t t = 0, k[3];
    for (k[0] = 0; k[0] < g->kernel[0]; k[0]++)
        for (k[1] = 0; k[1] < g->kernel[1]; k[1]++)
            for (k[2] = 0; k[2] < g->kernel[2]; k[2]++) {
                int64_t phase = 0, index = 0;
                for (int i = 0; i < 3; i++) {
                    int64_t z = k[i] * g->dilation[i];
                    phase = phase * g->stride[i] + z % g->stride[i];
                    index = index * l->width[i] + z / g->stride[i];
                }
                l->tap[t++] = phase * l->phase + index;
            }
    l->rows = 0;
    l->lo = l->hi = 0;
    int64_t z[3] = {0, 0, 0};
    for (z[0] = 0; z[0] < l->extent[0]; z[0]++)
        for (z[1] = 0; z[1] < l->extent[1]; z[1]++) {
            if (!row_span(g, l, z[0], z[1], &l->lo, &l->hi)) continue;
            l->row_in[l->rows] = ((z[0] - g->pad[0]) * g->in[1] + z[1] - g->pad[1]) * g->in[2] - g->pad[2];
            l->row_local[l->rows++] = local_index(g, l, z);
        }
    return 0;
}

/* Where output (d, h, 0) lies in the run. */
static inline int64_t run_row(const layout *l, int64_t d, int64_t h) {
    return (d * l->width[1] + h) * l->width[2];
}

/* Planes smaller than this are kept with plain stores: non-temporal stores pay off on whole lines only,
 * and the neighbouring small planes of one range would share lines between both kinds of store. */
#define KEEP_STREAM_BYTES 4096

/* dst[0..bytes) <- src: a forward's kept copy of its input, which nothing reads before the backward.
 * On x86-64, planes of KEEP_STREAM_BYTES and more go by non-temporal stores (SSE2, every x86-64): to
 * memory without first reading their lines into the cache and without evicting the planes the kernel
 * works on, which halves the copy's memory traffic. The kernel calls keep_copies_done once after its
 * range's copies. */
static inline void keep_copy(void *dst, const void *src, size_t bytes) {
#if defined(__x86_64__)
    if (bytes < KEEP_STREAM_BYTES) { memcpy(dst, src, bytes); return; }
    char *d = dst;
    const char *s = src;
    size_t head = (size_t)(-(uintptr_t)d & 15);
    memcpy(d, s, head);
    d += head; s += head; bytes -= head;
    size_t body = bytes & ~(size_t)15;
    for (size_t i = 0; i < body; i += 16)
        _mm_stream_si128((__m128i *)(d + i), _mm_loadu_si128((const __m128i *)(s + i)));
    memcpy(d + body, s + body, bytes - body);
#else
    memcpy(dst, src, bytes);
#endif
}

/* After a range's keep_copy calls: orders their non-temporal stores before the pool reports the range
 * done (one fence per range: a fence waits for every store in flight, far too long to pay per plane). */
static inline void keep_copies_done(void) {
#if defined(__x86_64__)
    _mm_sfence();
#endif
}

#endif
