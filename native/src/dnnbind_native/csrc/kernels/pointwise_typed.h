/* The typed half of pointwise.c (instantiate.h: T, ITYPE, NAME(f), VECTOR_BYTES). */
#include "vmath_typed.h"

/* sigmoid as activation.py computes it: e = e^-|z|, then (z >= 0 ? 1 : e) / (1 + e), which keeps
 * full relative precision (and the subnormal results) for large negative z. */
INLINE NAME(v) NAME(sigmoid_exact)(NAME(v) z) {
    const NAME(iv) sign = (NAME(iv))NAME(splat)((T)-0.0);
    NAME(v) e = NAME(vexp)((NAME(v))((NAME(iv))z | sign));                 /* e^-|z| */
    return NAME(pick)(z >= 0, NAME(splat)((T)1), e) / (1 + e);
}

/* y = f(x) and, where slope is not NULL, f'(x), for count elements of x (at most VL) with the mode
 * given as a constant, so that each mode's loop compiles to its own code. */
INLINE void NAME(activate)(const T *x, T *y, T *slope, T a, int64_t count, const int mode) {
    const NAME(v) zero = NAME(splat)((T)0), one = NAME(splat)((T)1);
    NAME(v) v = NAME(load)(x, count), out, d = zero;
    switch (mode) {
    case ACT_RELU:          /* np.where(x < 0, 0, x): NaN stays NaN, -0 stays -0 (torch's relu) */
        out = NAME(pick)(v < 0, zero, v);
        break;
    case ACT_SIGMOID:
        out = NAME(sigmoid_exact)(v);
        d = out * (1 - out);
        break;
    case ACT_TANH:
        out = NAME(vtanh)(v);
        d = 1 - out * out;
        break;
    case ACT_LEAKY_RELU:    /* np.where(x > 0, x, a x) and np.where(x > 0, 1, a) */
        out = NAME(pick)(v > 0, v, a * v);
        d = NAME(pick)(v > 0, one, NAME(splat)(a));
        break;
    case ACT_CLIPPED_RELU:  /* np.clip(x, 0, a): NaN stays NaN, -0 stays -0 */
        out = NAME(pick)(v < 0, zero, v);
        out = NAME(pick)(out > a, NAME(splat)(a), out);
        break;
    case ACT_ELU: {         /* em1 = expm1(min(x, 0)), np.where(x <= 0, a em1, x) and np.where(x <= 0, a (em1 + 1), 1) */
        NAME(v) em1 = NAME(vexpm1)(NAME(pick)(v > 0, zero, v));
        out = NAME(pick)(v <= 0, a * em1, v);
        d = NAME(pick)(v <= 0, a * (em1 + 1), one);
        break;
    }
    default: {              /* swish: s = sigmoid(a x), x s and s (1 + a x (1 - s)) */
        NAME(v) ax = a * v, s = NAME(sigmoid_exact)(ax);
        out = v * s;
        d = s * (1 + ax * (1 - s));
    }
    }
    NAME(store)(y, out, count);
    if (slope) NAME(store)(slope, d, count);
}

/* Elements [lo, hi) in one mode (a constant: see activate). */
INLINE void NAME(activate_range)(const T *x, T *y, T *slope, T a, int64_t lo, int64_t hi, const int mode) {
    int64_t j = lo;
    if (slope) {
        for (; j + VL <= hi; j += VL) NAME(activate)(x + j, y + j, slope + j, a, VL, mode);
        if (j < hi) NAME(activate)(x + j, y + j, slope + j, a, hi - j, mode);
    } else {
        for (; j + VL <= hi; j += VL) NAME(activate)(x + j, y + j, 0, a, VL, mode);
        if (j < hi) NAME(activate)(x + j, y + j, 0, a, hi - j, mode);
    }
}

/* y = f(x) on elements [lo, hi); where slope (not NULL) f'(x) in T, where mask (not NULL, the modes
 * whose derivative is 0 or 1) whether it is 1. alpha points to the mode's parameter (leaky_relu's
 * negative slope, clipped_relu's ceiling, swish's beta). */
KERNEL void NAME(dnnbind_activation_forward)(const T *x, T *y, T *slope, uint8_t *mask, const T *alpha,
                                            int64_t mode, int64_t lo, int64_t hi) {
    const T a = *alpha;
    for (int64_t b = lo; b < hi; b += POINTWISE_BLOCK) {      /* a block's values, then its masks */
        int64_t end = hi - b < POINTWISE_BLOCK ? hi : b + POINTWISE_BLOCK;
        switch (mode) {
        case ACT_RELU: NAME(activate_range)(x, y, slope, a, b, end, ACT_RELU); break;
        case ACT_SIGMOID: NAME(activate_range)(x, y, slope, a, b, end, ACT_SIGMOID); break;
        case ACT_TANH: NAME(activate_range)(x, y, slope, a, b, end, ACT_TANH); break;
        case ACT_LEAKY_RELU: NAME(activate_range)(x, y, slope, a, b, end, ACT_LEAKY_RELU); break;
        case ACT_CLIPPED_RELU: NAME(activate_range)(x, y, slope, a, b, end, ACT_CLIPPED_RELU); break;
        case ACT_ELU: NAME(activate_range)(x, y, slope, a, b, end, ACT_ELU); break;
        default: NAME(activate_range)(x, y, slope, a, b, end, ACT_SWISH);
        }
        /* relu: torch's threshold backward, which passes the gradient unless x <= 0 (a NaN passes it);
         * clipped_relu: 0 at NaN, as torch's hardtanh backward gives in its vectorized loop (its scalar
         * loop, which takes the elements past the last full vector, passes the gradient there) */
        if (mask && mode == ACT_RELU)
            for (int64_t j = b; j < end; j++) mask[j] = !(x[j] <= 0);
        else if (mask)      /* & rather than &&: no branch on the data */
            for (int64_t j = b; j < end; j++) mask[j] = (x[j] > 0) & (x[j] < a);
    }
}

/* dx = dy * f'(x) on elements [lo, hi): f'(x) from slope, or (NULL) from mask as 0 or 1. */
KERNEL void NAME(dnnbind_activation_backward)(const T *dy, const T *slope, const uint8_t *mask, T *dx,
                                             int64_t lo, int64_t hi) {
    if (slope)
        for (int64_t j = lo; j < hi; j++) dx[j] = dy[j] * slope[j];
    else
        for (int64_t j = lo; j < hi; j++) dx[j] = dy[j] * (T)mask[j];
}

#undef VL
#undef SINGLE
