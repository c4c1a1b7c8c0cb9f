/* The typed half of channels.c (instantiate.h: T, NAME(f), VECTOR_BYTES). */

#include "sums_typed.h"

/* For channels c in [c0, c1) of a (batch, channels, plane): sums[c] = the sum of a over its samples
 * and plane, and when products: products[c] = the sum of a * b. */
KERNEL void NAME(dnnbind_channel_sums)(const T *a, const T *b, double *sums, double *products, int64_t batch,
                                       int64_t channels, int64_t plane, int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; c++) {
        double s = 0, p = 0;
        for (int64_t n = 0; n < batch; n++) {
            const T *ap = a + (n * channels + c) * plane;
            if (products) {
                double q;
                s += NAME(plane_sum_product)(ap, b + (n * channels + c) * plane, plane, &q);
                p += q;
            } else {
                s += NAME(plane_sum)(ap, 0, 0.0, 0, plane);
            }
        }
        sums[c] = s;
        if (products) products[c] = p;
    }
}

/* squares[c] = the sum of (a - center[c])^2 over channel c's samples and plane, c in [c0, c1). */
KERNEL void NAME(dnnbind_channel_squares)(const T *a, const double *center, double *squares, int64_t batch,
                                          int64_t channels, int64_t plane, int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; c++) {
        double s = 0;
        for (int64_t n = 0; n < batch; n++) s += NAME(plane_sum)(a + (n * channels + c) * plane, 0, center[c], 1, plane);
        squares[c] = s;
    }
}

/* out = a * scale[c] + shift[c] (scale NULL: a + shift[c]) on planes p in [p0, p1), c = p mod channels. */
KERNEL void NAME(dnnbind_channel_affine)(const T *a, const T *scale, const T *shift, T *out, int64_t channels,
                                         int64_t plane, int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; p++) {
        const T *restrict src = a + p * plane;
        T *restrict dst = out + p * plane;
        T k = scale ? scale[p % channels] : (T)1, m = shift[p % channels];
        if (scale)
            for (int64_t j = 0; j < plane; j++) dst[j] = src[j] * k + m;
        else
            for (int64_t j = 0; j < plane; j++) dst[j] = src[j] + m;
    }
}

/* Batch normalisation on planes p in [p0, p1): xhat = (x - mean[c]) * invstd[c], y = xhat * gamma[c] + beta[c]. */
KERNEL void NAME(dnnbind_batchnorm_normalize)(const T *x, const T *mean, const T *invstd, const T *gamma,
                                              const T *beta, T *xhat, T *y, int64_t channels, int64_t plane,
                                              int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; p++) {
        int64_t c = p % channels;
        const T *restrict src = x + p * plane;
        T *restrict h = xhat + p * plane, *restrict out = y + p * plane;
        T m = mean[c], s = invstd[c], g = gamma[c], b = beta[c];
        for (int64_t j = 0; j < plane; j++) {
            T v = (src[j] - m) * s;
            h[j] = v;
            out[j] = v * g + b;
        }
    }
}

/* Batch normalisation's data gradient in training on planes p in [p0, p1):
 * dx = (dy - mean_dy[c] - xhat * mean_dy_xhat[c]) * scale[c]. */
KERNEL void NAME(dnnbind_batchnorm_data_grad)(const T *dy, const T *xhat, const T *mean_dy, const T *mean_dy_xhat,
                                              const T *scale, T *dx, int64_t channels, int64_t plane,
                                              int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; p++) {
        int64_t c = p % channels;
        const T *restrict g = dy + p * plane, *restrict h = xhat + p * plane;
        T *restrict out = dx + p * plane;
        T a = mean_dy[c], b = mean_dy_xhat[c], s = scale[c];
        for (int64_t j = 0; j < plane; j++) out[j] = (g[j] - a - h[j] * b) * s;
    }
}

#undef DL
#undef WIDE
