/* The typed half of pool.c (instantiate.h: T, NAME(f), VECTOR_BYTES). */
#include "planes_typed.h"

/* Winners are saved in the smallest unsigned type that counts the window (1, 2 or 4 bytes). */
INLINE void NAME(put_winners)(void *out, int64_t index, const int32_t *winner, int64_t n, int64_t bytes) {
    if (bytes == 1) for (int64_t j = 0; j < n; j++) ((uint8_t *)out)[index + j] = (uint8_t)winner[j];
    else if (bytes == 2) for (int64_t j = 0; j < n; j++) ((uint16_t *)out)[index + j] = (uint16_t)winner[j];
    else for (int64_t j = 0; j < n; j++) ((uint32_t *)out)[index + j] = (uint32_t)winner[j];
}
INLINE int32_t NAME(get_winner)(const void *in, int64_t index, int64_t bytes) {
    if (bytes == 1) return ((const uint8_t *)in)[index];
    if (bytes == 2) return ((const uint16_t *)in)[index];
    return (int32_t)((const uint32_t *)in)[index];
}

/* For planes p in [p0, p1): y = the max of every window (x padded with -infinity), winners = the window
 * position (row-major) it came from, in winner_bytes-byte unsigned integers. */
KERNEL int NAME(dnnbind_maxpool_forward)(const T *x, T *y, void *winners, int64_t winner_bytes, const geometry *g,
                                        int64_t p0, int64_t p1) {
    layout l;
    if (make_layout(g, &l, 0)) return -1;
    T *buf = malloc(sizeof(T) * (size_t)(l.local + l.run));
    int32_t *won = malloc(sizeof(int32_t) * (size_t)l.run);
    if (!buf || !won) { free(buf); free(won); free(l.tap); return -1; }
    T *best = buf + l.local;
    NAME(fill)(buf, l.local, (T)-INFINITY);
    for (int64_t p = p0; p < p1; p++) {
        NAME(load)(g, &l, x + p * l.in_plane, buf);
        NAME(copy_row)(best, buf + l.tap[0], l.run);
        memset(won, 0, sizeof(int32_t) * (size_t)l.run);
        for (int64_t t = 1; t < l.taps; t++) {
            const T *restrict v = buf + l.tap[t];
            T *restrict b = best;
            int32_t *restrict w = won;
            for (int64_t j = 0; j < l.run; j++) {
                int better = v[j] > b[j] || v[j] != v[j];
                b[j] = better ? v[j] : b[j];
                w[j] = better ? (int32_t)t : w[j];
            }
        }
        NAME(gather)(g, &l, best, y + p * l.out_plane);
        for (int64_t d = 0; d < g->out[0]; d++)
            for (int64_t h = 0; h < g->out[1]; h++)
                NAME(put_winners)(winners, p * l.out_plane + (d * g->out[1] + h) * g->out[2], won + run_row(&l, d, h),
                                  g->out[2], winner_bytes);
    }
    free(buf); free(won); free(l.tap);
    return 0;
}

/* For planes p in [p0, p1): dx = each output's dy added to the input its window's winner read (winners
 * on padding take nothing away from x). */
KERNEL int NAME(dnnbind_maxpool_backward)(const T *dy, const void *winners, int64_t winner_bytes, T *dx,
                                         const geometry *g, int64_t p0, int64_t p1) {
    layout l;
    if (make_layout(g, &l, 0)) return -1;
    T *buf = malloc(sizeof(T) * (size_t)l.local);
    if (!buf) { free(l.tap); return -1; }
    for (int64_t p = p0; p < p1; p++) {
        memset(buf, 0, sizeof(T) * (size_t)l.local);
        const T *dyp = dy + p * l.out_plane;
        for (int64_t d = 0; d < g->out[0]; d++)
            for (int64_t h = 0; h < g->out[1]; h++) {
                int64_t row = (d * g->out[1] + h) * g->out[2], start = run_row(&l, d, h);
                for (int64_t w = 0; w < g->out[2]; w++) {
                    int32_t t = NAME(get_winner)(winners, p * l.out_plane + row + w, winner_bytes);
                    buf[l.tap[t] + start + w] += dyp[row + w];
                }
            }
        NAME(store)(g, &l, buf, dx + p * l.in_plane);
    }
    free(buf); free(l.tap);
    return 0;
}
