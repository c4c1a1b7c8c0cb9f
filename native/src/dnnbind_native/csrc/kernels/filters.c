/* The filter of a stride-1 convolution's data gradient: the forward filter with its two channel axes
 * swapped within each group and its kernel flipped (conv_geometry.data_grad_problem), as one pass.
 *
 * numpy copies the swapped, flipped view a kernel's taps at a time (9 elements at 3x3), jumping a whole
 * input channel's filter between two: 1.1 ms for a 512 x 512 x 3 x 3 filter and 7.3 ms at 1024 channels
 * on a 2-core EPYC, where a plain copy of the same memory takes 0.2 and 1.3 ms. Here a block of input
 * channels is read as one contiguous run per output channel and written to the block's rows: 0.28-0.35
 * and 5.9 ms (beyond the caches the filter's rows, a multiple of 4 KiB apart, still meet in the same
 * cache sets; square tiles measured no better). */
#include <stdint.h>

#include "dispatch.h"

#define KERNELS "filters_typed.h"
#include "instantiate.h"
