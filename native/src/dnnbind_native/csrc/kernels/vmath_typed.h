/* Vector exp, tanh and sigmoid, and partial-vector loads and stores, for the typed kernels (instantiate.h:
 * T, ITYPE, NAME(f), VECTOR_BYTES).
 *
 * numpy computes these with SIMD code of its own; a kernel that fuses them with the arithmetic around
 * them needs its own, as accurate: within a few units in the last place of T over the whole range,
 * NaN in giving NaN out. exp reduces x = n ln2 + r (|r| <= ln2 / 2, ln2 in two parts so n ln2 is exact)
 * and sums the Taylor series of e^r far enough for T (the error of the last term left out is below a
 * tenth of a unit in the last place); 2^n is built in the exponent bits. expm1 sums its series near 0
 * (where e^x - 1 would cancel); tanh(x) = e / (e + 2) with e = expm1(2|x|); sigmoid(z) = 1 / (1 + e^-z). */

typedef T NAME(v) __attribute__((vector_size(VECTOR_BYTES)));
typedef ITYPE NAME(iv) __attribute__((vector_size(VECTOR_BYTES)));
/* VL elements of T at any address (T-aligned) */
typedef T NAME(uv) __attribute__((vector_size(VECTOR_BYTES), aligned(sizeof(T)), may_alias));
#define VL ((int64_t)(VECTOR_BYTES / sizeof(T)))
#define SINGLE (sizeof(T) == 4)

/* All ones in the lanes below count, zeros above (an AVX2 masked load's or store's mask). */
INLINE NAME(iv) NAME(lanes_below)(int64_t count) {
    NAME(iv) lane;
    for (int i = 0; i < VL; i++) lane[i] = (ITYPE)i;
    return lane < (ITYPE)count;
}

/* Up to VL elements from p (count of them, the rest 0) and back. A partial vector goes by masked loads
 * and stores where the instruction set has them (AVX-512, AVX2: the lanes left out are never touched,
 * so no fault past an array's end); elsewhere through memcpy, whose variable length is a library call
 * and whose narrow writes stall the wide read after them (a softmax over lines of 20 positions took
 * three times torch's time so, 64 positions as long as torch). */
INLINE NAME(v) NAME(load)(const T *p, int64_t count) {
    if (count == VL) return *(const NAME(uv) *)p;
#if defined(__x86_64__) && VECTOR_BYTES == 64
    if (SINGLE) return (NAME(v))_mm512_maskz_loadu_ps((__mmask16)((1u << count) - 1), p);
    return (NAME(v))_mm512_maskz_loadu_pd((__mmask8)((1u << count) - 1), p);
#elif defined(__x86_64__) && VECTOR_BYTES == 32
    if (SINGLE) return (NAME(v))_mm256_maskload_ps((const float *)p, (__m256i)NAME(lanes_below)(count));
    return (NAME(v))_mm256_maskload_pd((const double *)p, (__m256i)NAME(lanes_below)(count));
#else
    NAME(v) v = {0};
    memcpy(&v, p, (size_t)count * sizeof(T));
    return v;
#endif
}

INLINE void NAME(store)(T *p, NAME(v) v, int64_t count) {
    if (count == VL) {
        *(NAME(uv) *)p = v;
        return;
    }
#if defined(__x86_64__) && VECTOR_BYTES == 64
    if (SINGLE) _mm512_mask_storeu_ps(p, (__mmask16)((1u << count) - 1), (__m512)v);
    else _mm512_mask_storeu_pd(p, (__mmask8)((1u << count) - 1), (__m512d)v);
#elif defined(__x86_64__) && VECTOR_BYTES == 32
    if (SINGLE) _mm256_maskstore_ps((float *)p, (__m256i)NAME(lanes_below)(count), (__m256)v);
    else _mm256_maskstore_pd((double *)p, (__m256i)NAME(lanes_below)(count), (__m256d)v);
#else
    memcpy(p, &v, (size_t)count * sizeof(T));
#endif
}

/* where mask (all ones or zeros per lane): a, else b */
INLINE NAME(v) NAME(pick)(NAME(iv) mask, NAME(v) a, NAME(v) b) {
    return (NAME(v))(((NAME(iv))a & mask) | ((NAME(iv))b & ~mask));
}

INLINE NAME(v) NAME(splat)(T value) {
    return value - (NAME(v)){0};          /* not 0 + value: that turns -0.0 into +0.0 */
}

/* 1 / k! for the Taylor series */
static const double NAME(inverse_factorial)[18] = {
    1.0, 1.0, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040, 1.0 / 40320, 1.0 / 362880,
    1.0 / 3628800, 1.0 / 39916800, 1.0 / 479001600, 1.0 / 6227020800.0, 1.0 / 87178291200.0,
    1.0 / 1307674368000.0, 1.0 / 20922789888000.0, 1.0 / 355687428096000.0};

/* x, with what lies beyond [lo, hi] moved onto them (NaN stays NaN) */
INLINE NAME(v) NAME(clamp)(NAME(v) x, T lo, T hi) {
    x = NAME(pick)(x > hi, NAME(splat)(hi), x);
    return NAME(pick)(x < lo, NAME(splat)(lo), x);
}

/* e^x: infinity above T's range, subnormals and then 0 below it, NaN for NaN */
INLINE NAME(v) NAME(vexp)(NAME(v) x) {
    const T log2e = (T)1.44269504088896340736;
    const T ln2_hi = SINGLE ? (T)0.693359375 : (T)6.93147180369123816490e-01;
    const T ln2_lo = SINGLE ? (T)-2.12194440e-4 : (T)1.90821492927058770002e-10;
    const T round = SINGLE ? (T)12582912.0 : (T)6755399441055744.0;     /* 1.5 * 2^(mantissa bits) */
    const int degree = SINGLE ? 7 : 13;
    x = NAME(clamp)(x, SINGLE ? (T)-104 : (T)-746, SINGLE ? (T)89 : (T)710);   /* e^x is 0 or inf past these */
    NAME(v) n = x * log2e + round;
    n -= round;                                                           /* x / ln2 to the nearest integer */
    NAME(v) r = x - n * ln2_hi;
    r -= n * ln2_lo;
    NAME(v) p = NAME(splat)((T)NAME(inverse_factorial)[degree]);
    for (int k = degree - 1; k >= 0; k--) p = p * r + (T)NAME(inverse_factorial)[k];
    /* 2^n in two factors, each a normal number over the whole clamped range: the product overflows to
     * infinity or rounds to a subnormal (or 0) as e^x does */
    const int mantissa = SINGLE ? 23 : 52, bias = SINGLE ? 127 : 1023;
    NAME(iv) whole = __builtin_convertvector(n, NAME(iv)), half = whole >> 1;
    NAME(v) first = (NAME(v))((half + bias) << mantissa), second = (NAME(v))((whole - half + bias) << mantissa);
    return p * first * second;
}

/* e^x - 1 with full relative precision near 0: the series x (1 + x/2! + x^2/3! + ...) for |x| < 0.6
 * (where e^x - 1 would cancel), e^x - 1 beyond (|e^x - 1| > 0.45 there: nothing cancels). */
INLINE NAME(v) NAME(vexpm1)(NAME(v) x) {
    const NAME(iv) sign = (NAME(iv))NAME(splat)((T)-0.0);
    NAME(v) a = (NAME(v))((NAME(iv))x & ~sign);                            /* |x| */
    const int degree = SINGLE ? 9 : 15;
    NAME(v) s = NAME(splat)((T)NAME(inverse_factorial)[degree + 1]);
    for (int k = degree; k >= 1; k--) s = s * x + (T)NAME(inverse_factorial)[k];
    return NAME(pick)(a < (T)0.6, s * x, NAME(vexp)(x) - 1);
}

/* tanh(x), odd, exactly +-1 from |x| = 20 on (where T rounds it there) */
INLINE NAME(v) NAME(vtanh)(NAME(v) x) {
    const NAME(iv) sign = (NAME(iv))NAME(splat)((T)-0.0);
    NAME(v) a = (NAME(v))((NAME(iv))x & ~sign);                            /* |x| */
    a = NAME(pick)(a > 20, NAME(splat)((T)20), a);
    NAME(v) e = NAME(vexpm1)(a + a);
    NAME(v) t = e / (e + 2);
    return (NAME(v))((NAME(iv))t | ((NAME(iv))x & sign));
}

/* 1 / (1 + e^-z) */
INLINE NAME(v) NAME(vsigmoid)(NAME(v) z) {
    return 1 / (1 + NAME(vexp)(-z));
}
