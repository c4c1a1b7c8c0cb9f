/* Softmax and log-softmax along one axis for dnnbind's reference backend, forward and data gradient.
 *
 * numpy runs softmax as five passes over memory (the maximum, the shift, exp, the sum, the division),
 * its sums broadcast back where numpy is slow, single-threaded; here the array is viewed as (outer, n,
 * inner) with the axis in the middle and each kernel takes three passes over a line of n values
 * (the maximum, exp and its sum, the scaling), split over the caller's threads. A line is a row when
 * inner is 1 (the last axis); otherwise a block of SOFTMAX_BLOCK neighbouring positions along inner
 * is taken through the n rows at once, so that every pass reads whole contiguous runs. Sums are taken
 * in double; the maximum and every sum carry NaN through as numpy's do; exp is vmath_typed.h's.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dispatch.h"

/* Positions along inner one block of the strided case takes (a multiple of every vector length). */
#define SOFTMAX_BLOCK 256

#define KERNELS "softmax_typed.h"
#include "instantiate.h"
