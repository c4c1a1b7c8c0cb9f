/* The typed half of pointwise.c (instantiate.h: T, ITYPE, NAME(f), VECTOR_BYTES). */
#include "vmath_typed.h"

/* sigmoid as activation.py computes it: e = e^-|z|, then (z >= 0 ? 1 : e) / (1 + e), which keeps
 * full relative precision (and the subnormal results) for large negative z. */
INLINE NAME(v) NAME(sigmoid_exact)(NAME(v) z) {
    const NAME(iv) sign = (NAME(iv))NAME(splat)((T)-0.0);
    NAME(v) e = NAME(vexp)((NAME(v))((NAME(iv))z | sign));                 /* e^-|z| */
    return NAME(pick)(z >= 0, NAME(splat)((T)1), e) / (1 + e);
}

/* y = f(x) for count elements of x (at most VL) with the mode given as a constant, so that each mode's
 * loop compiles to its own code. */
INLINE void NAME(activate)(const T *x, T *y, T a, int64_t count, const int mode) {
    const NAME(v) zero = NAME(splat)((T)0);
    NAME(v) v = NAME(load)(x, count), out;
    switch (mode) {
    case ACT_RELU:          /* np.where(x < 0, 0, x): NaN stays NaN, -0 stays -0 (torch's relu) */
        out = NAME(pick)(v < 0, zero, v);
        break;
    case ACT_SIGMOID:
        out = NAME(sigmoid_exact)(v);
        break;
    case ACT_TANH:
        out = NAME(vtanh)(v);
        break;
    case ACT_LEAKY_RELU:    /* np.where(x > 0, x, a x) */
        out = NAME(pick)(v > 0, v, a * v);
        break;
    case ACT_CLIPPED_RELU:  /* np.clip(x, 0, a): NaN stays NaN, -0 stays -0 */
        out = NAME(pick)(v < 0, zero, v);
        out = NAME(pick)(out > a, NAME(splat)(a), out);
        break;
    case ACT_ELU:           /* np.where(x <= 0, a expm1(min(x, 0)), x) */
        out = NAME(pick)(v <= 0, a * NAME(vexpm1)(NAME(pick)(v > 0, zero, v)), v);
        break;
    default: {              /* swish: x sigmoid(a x) */
        out = v * NAME(sigmoid_exact)(a * v);
    }
    }
    NAME(store)(y, out, count);
}

/* Elements [lo, hi) in one mode (a constant: see activate). */
INLINE void NAME(activate_range)(const T *x, T *y, T a, int64_t lo, int64_t hi, const int mode) {
    int64_t j = lo;
    for (; j + VL <= hi; j += VL) NAME(activate)(x + j, y + j, a, VL, mode);
    if (j < hi) NAME(activate)(x + j, y + j, a, hi - j, mode);
}

/* y = f(x) on elements [lo, hi); where mask (not NULL, the modes whose derivative is 0 or 1) whether
 * f'(x) is 1. alpha points to the mode's parameter (leaky_relu's negative slope, clipped_relu's ceiling,
 * swish's beta). */
KERNEL void NAME(dnnbind_activation_forward)(const T *x, T *y, uint8_t *mask, const T *alpha, int64_t mode,
                                            int64_t lo, int64_t hi) {
    const T a = *alpha;
    for (int64_t b = lo; b < hi; b += POINTWISE_BLOCK) {      /* a block's values, then its masks */
        int64_t end = hi - b < POINTWISE_BLOCK ? hi : b + POINTWISE_BLOCK;
        switch (mode) {
        case ACT_RELU: NAME(activate_range)(x, y, a, b, end, ACT_RELU); break;
        case ACT_SIGMOID: NAME(activate_range)(x, y, a, b, end, ACT_SIGMOID); break;
        case ACT_TANH: NAME(activate_range)(x, y, a, b, end, ACT_TANH); break;
        case ACT_LEAKY_RELU: NAME(activate_range)(x, y, a, b, end, ACT_LEAKY_RELU); break;
        case ACT_CLIPPED_RELU: NAME(activate_range)(x, y, a, b, end, ACT_CLIPPED_RELU); break;
        case ACT_ELU: NAME(activate_range)(x, y, a, b, end, ACT_ELU); break;
        default: NAME(activate_range)(x, y, a, b, end, ACT_SWISH);
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

/* dx = dy * f'(x) on elements [lo, hi), f'(x) from the forward's mask as 0 or 1: dy where it passes, else 0
 * (a select, as torch's threshold and hardtanh backwards: an inf or NaN dy where f' is 0 gives 0). */
KERNEL void NAME(dnnbind_activation_backward)(const T *dy, const uint8_t *mask, T *dx, int64_t lo, int64_t hi) {
    for (int64_t j = lo; j < hi; j++) dx[j] = mask[j] ? dy[j] : (T)0;
}

/* f' of the mode from the array its backward reads (activation.py's BACKWARD_READS): the result y for
 * relu, sigmoid and tanh, x for the others; relu's and clipped_relu's are the forward's masks. */
INLINE NAME(v) NAME(slope_from)(NAME(v) v, T a, const int mode) {
    const NAME(v) zero = NAME(splat)((T)0), one = NAME(splat)((T)1);
    switch (mode) {
    case ACT_RELU:          /* y: the gradient passes unless y <= 0 (a NaN passes it), as unless x <= 0 */
        return NAME(pick)(v <= 0, zero, one);
    case ACT_SIGMOID:
        return v * (1 - v);
    case ACT_TANH:
        return 1 - v * v;
    case ACT_LEAKY_RELU:
        return NAME(pick)(v > 0, one, NAME(splat)(a));
    case ACT_CLIPPED_RELU:
        return NAME(pick)((v > 0) & (v < a), one, zero);
    case ACT_ELU:           /* a e^x (a (expm1(x) + 1) would cancel), NaN at NaN as torch's vectorized loop */
        return NAME(pick)(v > 0, one, a * NAME(vexp)(NAME(pick)(v > 0, zero, v)));
    default: {
        NAME(v) ax = a * v, s = NAME(sigmoid_exact)(ax);
        return s * (1 + ax * (1 - s));
    }
    }
}

/* dy * f'(v); for the modes whose f' is 0 or 1, dy where it passes and else 0 (see activation_backward). */
INLINE NAME(v) NAME(gradient_from)(NAME(v) d, NAME(v) v, T a, const int mode) {
    const NAME(v) zero = NAME(splat)((T)0);
    switch (mode) {
    case ACT_RELU:
        return NAME(pick)(v <= 0, zero, d);
    case ACT_CLIPPED_RELU:
        return NAME(pick)((v > 0) & (v < a), d, zero);
    default:
        return d * NAME(slope_from)(v, a, mode);
    }
}

/* Elements [lo, hi) of dx = dy * f'(from) in one mode (a constant: see activate). */
INLINE void NAME(slope_range)(const T *dy, const T *from, T *dx, T a, int64_t lo, int64_t hi, const int mode) {
    int64_t j = lo;
    for (; j + VL <= hi; j += VL)
        NAME(store)(dx + j, NAME(gradient_from)(NAME(load)(dy + j, VL), NAME(load)(from + j, VL), a, mode), VL);
    if (j < hi)
        NAME(store)(dx + j, NAME(gradient_from)(NAME(load)(dy + j, hi - j), NAME(load)(from + j, hi - j), a, mode),
                    hi - j);
}

/* dx = dy * f'(.) on elements [lo, hi), f' from what the backward reads (see slope_from): the backward of
 * a forward that saved the caller's own x or y rather than f'(x). */
KERNEL void NAME(dnnbind_activation_backward_from)(const T *dy, const T *from, T *dx, const T *alpha,
                                                  int64_t mode, int64_t lo, int64_t hi) {
    const T a = *alpha;
    switch (mode) {
    case ACT_RELU: NAME(slope_range)(dy, from, dx, a, lo, hi, ACT_RELU); break;
    case ACT_SIGMOID: NAME(slope_range)(dy, from, dx, a, lo, hi, ACT_SIGMOID); break;
    case ACT_TANH: NAME(slope_range)(dy, from, dx, a, lo, hi, ACT_TANH); break;
    case ACT_LEAKY_RELU: NAME(slope_range)(dy, from, dx, a, lo, hi, ACT_LEAKY_RELU); break;
    case ACT_CLIPPED_RELU: NAME(slope_range)(dy, from, dx, a, lo, hi, ACT_CLIPPED_RELU); break;
    case ACT_ELU: NAME(slope_range)(dy, from, dx, a, lo, hi, ACT_ELU); break;
    default: NAME(slope_range)(dy, from, dx, a, lo, hi, ACT_SWISH);
    }
}

#undef VL
#undef SINGLE
