/* The column buffer of the reference backend's Folded convolution path: im2col with the samples side by
 * side, (channels, *kernel, samples, *out), read straight from the unpadded input (zeros where a kernel
 * offset reads padding).
 *
 * numpy builds it as one strided copy of a seven- or nine-dimensional view whose innermost runs are an
 * output row (7 elements at 7x7), a loop step each: 1.2 ms for the columns of a (8, 512, 7, 7) input
 * on a 2-core EPYC, where a plain copy of the same 7 MB takes 0.2 ms. Here each output row is one loop
 * over its valid inputs between two runs of zeros. Channels are split over the caller's threads.
 */
#include <stdint.h>

#include "dispatch.h"
#include "planes.h"

/* The outputs o in [0, out) whose input o * stride + offset lies in [0, in): [*lo, *hi) (of no element
 * type: one copy for every typed kernel). */
static inline void valid_outputs(int64_t out, int64_t stride, int64_t offset, int64_t in, int64_t *lo, int64_t *hi) {
    int64_t a = 0, b;
    while (a < out && a * stride + offset < 0) a++;
    b = a;
    while (b < out && b * stride + offset < in) b++;
    *lo = a;
    *hi = b;
}

#define KERNELS "columns_typed.h"
#include "instantiate.h"
