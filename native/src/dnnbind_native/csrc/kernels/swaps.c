/* An array's two middle axes swapped, as one pass: (N, A, B, C) -> (N, B, A, C), C contiguous.
 *
 * The cpu backend's RNN moves its arrays between the layouts its products and its time loop take, (T, B, H)
 * and (T, H, B), (T, 4H, B) and (4H, T, B). numpy copies such a transposed view one run of C elements at a
 * time, with its iterator's cost per run: measured on a 2-core Xeon inside an LSTM's training step, a
 * (30, 512, 16) float32 gate gradient took 132 us to become (512, 30, 16), and (30, 16, 128) to become
 * (30, 128, 16) 50 us. Here each block of destination rows is filled from contiguous runs of the source
 * while it stays in cache, and the rows split over the kernels' team. */
#include <stdint.h>
#include <string.h>

#include "dispatch.h"

#define KERNELS "swaps_typed.h"
#include "instantiate.h"
