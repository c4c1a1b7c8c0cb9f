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
                s += NAME(plane_sum_product)(ap, b + (n * channels + c) * plane, 0.0, plane, &q);
                p += q;
            } else {
                s += NAME(plane_sum)(ap, 0, 0.0, 0, plane);
            }
        }
        sums[c] = s;
        if (products) products[c] = p;
    }
}

/* For channels c in [c0, c1) of a (batch, channels, plane), batch * plane > 0: mean[c] and var[c] (the
 * biased variance) of a over its samples and plane, in one pass over the data: the sums of a - shift and
 * of its squares in double, shift being the channel's first value (finite; else 0), so that an offset
 * far above the spread costs no precision (var = E[(a - shift)^2] - E[a - shift]^2, both terms of the
 * spread's size). */
KERNEL void NAME(dnnbind_channel_moments)(const T *a, double *mean, double *var, int64_t batch, int64_t channels,
                                          int64_t plane, int64_t c0, int64_t c1) {
    double count = (double)batch * (double)plane;
    for (int64_t c = c0; c < c1; c++) {
        double shift = (double)a[c * plane];
        if (!(shift - shift == 0)) shift = 0;           /* inf or NaN: no shift */
        double s = 0, q = 0;
        for (int64_t n = 0; n < batch; n++) {
            double squares;
            s += NAME(plane_sum_product)(a + (n * channels + c) * plane, NULL, shift, plane, &squares);
            q += squares;
        }
        double m = s / count, v = q / count - m * m;
        mean[c] = shift + m;
        var[c] = v > 0 || v != v ? v : 0;                /* (rounding below zero: none; NaN stays) */
    }
}

/* Columns j in [j0, j1) of a as (rows, width), for planes too small to sum one at a time (a batch norm
 * of (N, C) data has planes of one element): sums[j] = the sum of column j (center: of (a - center[j])^2)
 * and, when products, products[j] = the sum of a * b, in double, row by row over a block of columns. */
KERNEL void NAME(dnnbind_column_sums)(const T *a, const T *b, const double *center, double *sums,
                                      double *products, int64_t rows, int64_t width, int64_t j0, int64_t j1) {
    double s[COLUMN_BLOCK], q[COLUMN_BLOCK];
    for (int64_t jb = j0; jb < j1; jb += COLUMN_BLOCK) {
        int64_t n = j1 - jb < COLUMN_BLOCK ? j1 - jb : COLUMN_BLOCK;
        for (int64_t i = 0; i < n; i++) s[i] = q[i] = 0;
        for (int64_t r = 0; r < rows; r++) {
            const T *restrict ar = a + r * width + jb;
            if (center) {
                const double *restrict m = center + jb;
                for (int64_t i = 0; i < n; i++) {
                    double v = (double)ar[i] - m[i];
                    s[i] += v * v;
                }
            } else if (b) {
                const T *restrict br = b + r * width + jb;
                for (int64_t i = 0; i < n; i++) {
                    double v = (double)ar[i];
                    s[i] += v;
                    q[i] += v * (double)br[i];
                }
            } else {
                for (int64_t i = 0; i < n; i++) s[i] += (double)ar[i];
            }
        }
        for (int64_t i = 0; i < n; i++) sums[jb + i] = s[i];
        if (products) for (int64_t i = 0; i < n; i++) products[jb + i] = q[i];
    }
}

/* The maps below run on planes p in [p0, p1) with channel c = p mod channels, each parameter one value
 * per channel; or, with per_column, on rows of plane elements whose parameters are one per element of
 * the row (row mode: a plane too small to loop over, its channels' parameters spread along the row). */

/* out = a * scale[c] + shift[c] (scale NULL: a + shift[c]) on planes p in [p0, p1), c = p mod channels. */
KERNEL void NAME(dnnbind_channel_affine)(const T *a, const T *scale, const T *shift, T *out, int64_t channels,
                                         int64_t plane, int64_t per_column, int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; p++) {
        const T *restrict src = a + p * plane;
        T *restrict dst = out + p * plane;
        if (per_column) {
            const T *restrict k = scale, *restrict m = shift;
            if (scale)
                for (int64_t j = 0; j < plane; j++) dst[j] = src[j] * k[j] + m[j];
            else
                for (int64_t j = 0; j < plane; j++) dst[j] = src[j] + m[j];
            continue;
        }
        T k = scale ? scale[p % channels] : (T)1, m = shift[p % channels];
        if (scale)
            for (int64_t j = 0; j < plane; j++) dst[j] = src[j] * k + m;
        else
            for (int64_t j = 0; j < plane; j++) dst[j] = src[j] + m;
    }
}

/* Batch normalisation on planes p in [p0, p1): xhat = (x - mean[c]) * invstd[c], y = xhat * gamma[c] + beta[c];
 * xhat NULL: y alone (inference, or training under dnnbind.no_grad(): nothing keeps xhat). */
KERNEL void NAME(dnnbind_batchnorm_normalize)(const T *x, const T *mean, const T *invstd, const T *gamma,
                                              const T *beta, T *xhat, T *y, int64_t channels, int64_t plane,
                                              int64_t per_column, int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; p++) {
        int64_t c = p % channels;
        const T *restrict src = x + p * plane;
        T *restrict h = xhat ? xhat + p * plane : NULL, *restrict out = y + p * plane;
        if (per_column) {
            const T *restrict m = mean, *restrict s = invstd, *restrict g = gamma, *restrict b = beta;
            if (h) {
#pragma GCC ivdep
                for (int64_t j = 0; j < plane; j++) {
                    T v = (src[j] - m[j]) * s[j];
                    h[j] = v;
                    out[j] = v * g[j] + b[j];
                }
            } else {
#pragma GCC ivdep
                for (int64_t j = 0; j < plane; j++) out[j] = (src[j] - m[j]) * s[j] * g[j] + b[j];
            }
            continue;
        }
        T m = mean[c], s = invstd[c], g = gamma[c], b = beta[c];
        if (h) {
#pragma GCC ivdep
            for (int64_t j = 0; j < plane; j++) {
                T v = (src[j] - m) * s;
                h[j] = v;
                out[j] = v * g + b;
            }
        } else {
#pragma GCC ivdep
            for (int64_t j = 0; j < plane; j++) out[j] = (src[j] - m) * s * g + b;
        }
    }
}

/* Batch normalisation's data gradient in training on planes p in [p0, p1), from what the forward saved of
 * x (x itself, or x normalised: then shift 0) and xhat = (saved - shift[c]) * invstd[c]:
 * dx = (dy - mean_dy[c] - (saved - shift[c]) * k[c]) * scale[c], k = invstd * mean(dy * xhat). */
KERNEL void NAME(dnnbind_batchnorm_data_grad)(const T *dy, const T *saved, const T *shift, const T *mean_dy,
                                              const T *k, const T *scale, T *dx, int64_t channels,
                                              int64_t plane, int64_t per_column, int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; p++) {
        int64_t c = p % channels;
        const T *restrict g = dy + p * plane, *restrict h = saved + p * plane;
        T *restrict out = dx + p * plane;
        if (per_column) {
            const T *restrict m = shift, *restrict a = mean_dy, *restrict b = k, *restrict s = scale;
#pragma GCC ivdep
            for (int64_t j = 0; j < plane; j++) out[j] = (g[j] - a[j] - (h[j] - m[j]) * b[j]) * s[j];
            continue;
        }
        T m = shift[c], a = mean_dy[c], b = k[c], s = scale[c];
        for (int64_t j = 0; j < plane; j++) out[j] = (g[j] - a - (h[j] - m) * b) * s;
    }
}

#undef DL
#undef WIDE
