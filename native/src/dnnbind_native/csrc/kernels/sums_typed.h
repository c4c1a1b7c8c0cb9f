/* Sums in double over runs of T, in vector lanes of their own (never a reassociated single sum), for
 * the typed halves of channels.c and softmax.c (instantiate.h: T, NAME(f), VECTOR_BYTES). Whoever
 * includes it undefines DL and WIDE at its end. */

/* Doubles per vector, and DL elements of T loaded at once (converted to a vector of doubles). */
#define DL ((int64_t)(VECTOR_BYTES / 8))
typedef double NAME(dvec) __attribute__((vector_size(VECTOR_BYTES)));
typedef T NAME(tvec) __attribute__((vector_size(VECTOR_BYTES / 8 * sizeof(T)), aligned(sizeof(T)), may_alias));
#define WIDE(v) __builtin_convertvector((v), NAME(dvec))

INLINE double NAME(lanes_total)(NAME(dvec) a, NAME(dvec) b, NAME(dvec) c, NAME(dvec) d, double tail) {
    NAME(dvec) s = (a + b) + (c + d);
    for (int64_t i = 0; i < DL; i++) tail += s[i];
    return tail;
}

/* sum of a[j] - center (center 0: the plain sum), squared when square, or times b[j] when b. */
INLINE double NAME(plane_sum)(const T *restrict a, const T *restrict b, double center, int square, int64_t n) {
    NAME(dvec) s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
    int64_t j = 0;
    for (; j + 4 * DL <= n; j += 4 * DL) {
        const NAME(tvec) *v = (const NAME(tvec) *)(a + j);
        NAME(dvec) v0 = WIDE(v[0]) - center, v1 = WIDE(v[1]) - center, v2 = WIDE(v[2]) - center,
                   v3 = WIDE(v[3]) - center;
        if (b) {
            const NAME(tvec) *u = (const NAME(tvec) *)(b + j);
            v0 *= WIDE(u[0]); v1 *= WIDE(u[1]); v2 *= WIDE(u[2]); v3 *= WIDE(u[3]);
        } else if (square) {
            v0 *= v0; v1 *= v1; v2 *= v2; v3 *= v3;
        }
        s0 += v0; s1 += v1; s2 += v2; s3 += v3;
    }
    for (; j + DL <= n; j += DL) {             /* whole vectors left: into the first lanes (a short row's */
        NAME(dvec) v0 = WIDE(*(const NAME(tvec) *)(a + j)) - center;      /* sum is no scalar chain) */
        if (b) v0 *= WIDE(*(const NAME(tvec) *)(b + j));
        else if (square) v0 *= v0;
        s0 += v0;
    }
    double tail = 0;
    for (; j < n; j++) {
        double v = (double)a[j] - center;
        tail += b ? v * (double)b[j] : square ? v * v : v;
    }
    return NAME(lanes_total)(s0, s1, s2, s3, tail);
}

/* The sum of a[j] - shift (returned) and of (a[j] - shift) * b[j] (into *product; the square of
 * a[j] - shift where b is NULL) in one pass, each in the lanes plane_sum would sum it in: batch norm's
 * backward reads dy once for both of its sums, its forward x once for its mean and variance. */
INLINE double NAME(plane_sum_product)(const T *restrict a, const T *restrict b, double shift, int64_t n,
                                      double *product) {
    NAME(dvec) s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0}, p0 = {0}, p1 = {0}, p2 = {0}, p3 = {0};
    int64_t j = 0;
    for (; j + 4 * DL <= n; j += 4 * DL) {
        const NAME(tvec) *v = (const NAME(tvec) *)(a + j), *u = (const NAME(tvec) *)(b ? b + j : a + j);
        NAME(dvec) v0 = WIDE(v[0]) - shift, v1 = WIDE(v[1]) - shift, v2 = WIDE(v[2]) - shift,
                   v3 = WIDE(v[3]) - shift;
        s0 += v0; s1 += v1; s2 += v2; s3 += v3;
        if (b) {
            p0 += v0 * WIDE(u[0]); p1 += v1 * WIDE(u[1]); p2 += v2 * WIDE(u[2]); p3 += v3 * WIDE(u[3]);
        } else {
            p0 += v0 * v0; p1 += v1 * v1; p2 += v2 * v2; p3 += v3 * v3;
        }
    }
    for (; j + DL <= n; j += DL) {
        NAME(dvec) v0 = WIDE(*(const NAME(tvec) *)(a + j)) - shift;
        s0 += v0;
        p0 += v0 * (b ? WIDE(*(const NAME(tvec) *)(b + j)) : v0);
    }
    double tail = 0, tail_product = 0;
    for (; j < n; j++) {
        double v = (double)a[j] - shift;
        tail += v;
        tail_product += v * (b ? (double)b[j] : v);
    }
    *product = NAME(lanes_total)(p0, p1, p2, p3, tail_product);
    return NAME(lanes_total)(s0, s1, s2, s3, tail);
}
