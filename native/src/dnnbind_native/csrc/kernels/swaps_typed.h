/* The typed half of swaps.c (instantiate.h: T, NAME(f)). */

/* Destination rows filled together: each source row gives every one of them its run of C elements, read
 * as one contiguous stretch. */
#ifndef SWAP_BLOCK
#define SWAP_BLOCK 16
#endif

/* dst[n, b, a, :] = src[n, a, b, :] (runs of c elements, reversed where ``reverse``) for the destination
 * rows r = n * nb + b in [r0, r1): src (N, A, B, C) and dst (N, B, A, C), both C-contiguous. */
KERNEL void NAME(dnnbind_swap_axes)(const T *src, T *dst, int64_t na, int64_t nb, int64_t c, int64_t reverse,
                                    int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1;) {
        const int64_t n = r / nb, b0 = r % nb;
        int64_t count = nb - b0;
        if (count > SWAP_BLOCK) count = SWAP_BLOCK;
        if (count > r1 - r) count = r1 - r;
        for (int64_t a = 0; a < na; a++) {
            const T *restrict s = src + ((n * na + a) * nb + b0) * c;
            T *restrict d = dst + (r * na + a) * c;
            for (int64_t i = 0; i < count; i++, s += c, d += na * c) {
                if (reverse)
                    for (int64_t t = 0; t < c; t++) d[t] = s[c - 1 - t];
                else if (c == 1)
                    d[0] = s[0];
                else
                    memcpy(d, s, (size_t)c * sizeof(T));
            }
        }
        r += count;
    }
}
