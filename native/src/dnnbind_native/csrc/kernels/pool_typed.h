/* The typed half of pool.c (instantiate.h: T, NAME(f), VECTOR_BYTES). */
#include "planes_typed.h"

/* One vector of T, its integer twin (comparison masks), and an unaligned vector of T. */
typedef T NAME(pool_v) __attribute__((vector_size(VECTOR_BYTES)));
typedef ITYPE NAME(pool_iv) __attribute__((vector_size(VECTOR_BYTES)));
typedef T NAME(pool_uv) __attribute__((vector_size(VECTOR_BYTES), aligned(sizeof(T)), may_alias));
#define VL ((int64_t)(VECTOR_BYTES / sizeof(T)))

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

/* One step of the rule over a vector of candidates v at positions at: where v is greater than the best
 * so far or NaN, it becomes the best and its position the winner. */
INLINE void NAME(max_step)(NAME(pool_v) v, NAME(pool_iv) at, NAME(pool_v) *b, NAME(pool_iv) *w) {
    NAME(pool_iv) better = (v > *b) | (v != v);
    *b = (NAME(pool_v))(((NAME(pool_iv))v & better) | ((NAME(pool_iv))*b & ~better));
    *w = (*w & ~better) | (at & better);
}

/* best[j], won[j] = the max of window j and the position that won, for a run of at most VL outputs, kept
 * in registers over every tap (the general loop's best-so-far goes through memory once per tap: a
 * chain of loads and stores that a global window's 49 taps over one output wait on). The same rule,
 * in the same order, as that loop. buf holds VL - 1 readable elements past every tap's run. */
INLINE void NAME(max_short_run)(const T *buf, const int64_t *tap, int64_t taps, int64_t run, T *best,
                                int32_t *won) {
    NAME(pool_v) b = *(const NAME(pool_uv) *)(buf + tap[0]);
    NAME(pool_iv) w = {0};
    for (int64_t t = 1; t < taps; t++)
        NAME(max_step)(*(const NAME(pool_uv) *)(buf + tap[t]), (NAME(pool_iv)){0} + (ITYPE)t, &b, &w);
    memcpy(best, &b, sizeof(T) * (size_t)run);
    for (int64_t j = 0; j < run; j++) won[j] = (int32_t)w[j];
}

/* For planes p in [p0, p1): y = the max of every window (x padded with -infinity), winners = the window
 * position (row-major) it came from, in winner_bytes-byte unsigned integers. */
KERNEL int NAME(dnnbind_maxpool_forward)(const T *x, T *y, void *winners, int64_t winner_bytes, const geometry *g,
                                        int64_t p0, int64_t p1) {
    layout l;
    if (make_layout(g, &l, 0)) return -1;
    T *buf = malloc(sizeof(T) * (size_t)(l.local + VL + l.run));
    int32_t *won = malloc(sizeof(int32_t) * (size_t)l.run);
    if (!buf || !won) { free(buf); free(won); free(l.tap); return -1; }
    T *best = buf + l.local + VL;
    NAME(fill)(buf, l.local + VL, (T)-INFINITY);
    for (int64_t p = p0; p < p1; p++) {
        NAME(load)(g, &l, x + p * l.in_plane, buf);
        if (l.run <= VL) {
            NAME(max_short_run)(buf, l.tap, l.taps, l.run, best, won);
            goto gathered;
        }
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
    gathered:
        NAME(gather)(g, &l, best, y + p * l.out_plane);
        for (int64_t d = 0; d < g->out[0]; d++)
            for (int64_t h = 0; h < g->out[1]; h++)
                NAME(put_winners)(winners, p * l.out_plane + (d * g->out[1] + h) * g->out[2], won + run_row(&l, d, h),
                                  g->out[2], winner_bytes);
    }
    free(buf); free(won); free(l.tap);
    return 0;
}

/* Global max pooling, for rows p in [p0, p1) of plane elements each: y[p] = the row's max, winners[p]
 * its index (the first maximum; a row holding NaN gives NaN from its last NaN, as the windows do).
 * Lane i of a vector follows that rule over the row's elements i, i + VL, ...; the lanes' winners then
 * combine by the same rule: the last NaN if any lane has one, else the greatest value at its smallest
 * index (each lane keeps its first maximum). */
KERNEL void NAME(dnnbind_plane_max)(const T *x, T *y, void *winners, int64_t winner_bytes, int64_t plane,
                                   int64_t p0, int64_t p1) {
    const NAME(pool_v) lowest = (NAME(pool_v)){0} - (T)INFINITY;
    NAME(pool_iv) lane;
    for (int64_t i = 0; i < VL; i++) lane[i] = (ITYPE)i;
    for (int64_t p = p0; p < p1; p++) {
        const T *row = x + p * plane;
        NAME(pool_v) b = lowest;
        NAME(pool_iv) w = lane;
        for (int64_t j = 0; j < plane; j += VL) {
            NAME(pool_v) v = lowest;
            if (j + VL <= plane) v = *(const NAME(pool_uv) *)(row + j);
            else memcpy(&v, row + j, sizeof(T) * (size_t)(plane - j));       /* the rest stays -inf */
            NAME(max_step)(v, lane + (ITYPE)j, &b, &w);
        }
        T best = b[0];
        int32_t won = (int32_t)w[0];
        int nan = best != best;
        for (int64_t i = 1; i < VL; i++) {
            if (b[i] != b[i]) {
                if (!nan || w[i] > won) { best = b[i]; won = (int32_t)w[i]; nan = 1; }
            } else if (!nan && (b[i] > best || (b[i] == best && w[i] < won))) {
                best = b[i]; won = (int32_t)w[i];
            }
        }
        y[p] = best;
        NAME(put_winners)(winners, p, &won, 1, winner_bytes);
    }
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

#undef VL
