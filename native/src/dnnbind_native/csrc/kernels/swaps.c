/* An array's two middle axes swapped, as one pass: (N, A, B, C) -> (N, B, A, C), each run of C elements
 * copied as it is or reversed.
 *
 * numpy copies such a transposed view one run of C elements at a time, with its iterator's cost per run.
 * Here each block of destination rows is filled from contiguous stretches of the source while it stays
 * in cache, and the rows split over the kernels' team. Two users:
 *
 * - The RNN moves its arrays between the layouts its products and its time loop take, (T, B, H) and
 *   (T, H, B), (T, 4H, B) and (4H, T, B): measured on a 2-core Xeon, a (30, 512, 16) float32 gate
 *   gradient became (512, 30, 16) in 39 us against numpy's 90 (inside an LSTM's training step numpy's
 *   copies had taken 132 us, and 50 us for a (30, 16, 128) output gradient).
 * - The filter of a stride-1 convolution's data gradient is the forward filter with its two channel axes
 *   swapped within each group and its kernel flipped (conv_geometry.data_grad_problem): N groups, A and
 *   B their output and input channels, C the taps reversed (reversing the flat taps flips every kernel
 *   axis at once). numpy's copy of the swapped, flipped view took 1.1 ms for a 512 x 512 x 3 x 3 filter
 *   and 7.3 ms at 1024 channels on a 2-core EPYC, where a plain copy of the same memory takes 0.2 and
 *   1.3 ms; here 0.28-0.35 and 5.9 ms (beyond the caches the filter's rows, a multiple of 4 KiB apart,
 *   still meet in the same cache sets; square tiles measured no better). */
#include <stdint.h>
#include <string.h>

#include "dispatch.h"

#define KERNELS "swaps_typed.h"
#include "instantiate.h"
