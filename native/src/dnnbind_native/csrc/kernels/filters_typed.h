/* The typed half of filters.c (instantiate.h: T, NAME(f)). */

/* Input channels read together: each output channel's taps of FLIP_BLOCK input channels are one
 * contiguous run of the source, and the block's destination rows stay in cache while it fills them. */
#ifndef FLIP_BLOCK
#define FLIP_BLOCK 16
#endif

/* dst[gi, c, k, t] = src[gi, k, c, taps - 1 - t] for the destination rows r = gi * cg + c in [r0, r1):
 * src is the filter (groups * kg, cg, taps), dst the data gradient's (groups * cg, kg, taps). Reversing
 * the flat taps flips every kernel axis at once. */
KERNEL void NAME(dnnbind_filter_flip_transpose)(const T *src, T *dst, int64_t kg, int64_t cg, int64_t taps,
                                                int64_t r0, int64_t r1) {
    const int64_t row = kg * taps;
    for (int64_t r = r0; r < r1;) {
        const int64_t gi = r / cg, c0 = r % cg;
        int64_t count = cg - c0;
        if (count > FLIP_BLOCK) count = FLIP_BLOCK;
        if (count > r1 - r) count = r1 - r;
        for (int64_t k = 0; k < kg; k++) {
            const T *restrict s = src + ((gi * kg + k) * cg + c0) * taps;
            T *restrict d = dst + r * row + k * taps;
            for (int64_t c = 0; c < count; c++, s += taps, d += row)
                for (int64_t t = 0; t < taps; t++) d[t] = s[taps - 1 - t];
        }
        r += count;
    }
}
