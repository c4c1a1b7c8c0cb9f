/* Max pooling for dnnbind's reference backend: the max of every window and which window position won,
 * and the gradient routed back to the winners.
 *
 * numpy runs this as several passes over the whole data per window position; here each plane is copied
 * once into a local buffer (planes.h) padded with -infinity, so that every window position's inputs for
 * the plane's outputs are one contiguous run, compared in place. The rule is numpy's and PyTorch's: a
 * position wins when its value is greater than the best so far or NaN, so ties go to the first
 * position in row-major order and a window holding NaN gives NaN from its last NaN.
 */
#include <math.h>

#include "planes.h"

#define KERNELS "pool_typed.h"
#include "instantiate.h"
