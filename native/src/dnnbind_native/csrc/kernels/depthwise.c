/* Depthwise convolution (one input and one output channel per group) for dnnbind's reference backend.
 *
 * numpy can only run this problem as one pass over the whole data per kernel offset, which is
 * memory-bound. Here each (sample, channel) plane is copied once into a small zero-padded local buffer
 * that stays in cache, split by stride phase in every spatial dim (the inputs r, r + s, r + 2s, ... of
 * phase r lie side by side), so that the inputs every kernel offset reads for the whole plane are one
 * contiguous run of the buffer, whatever the stride and dilation: the plane's outputs are computed as
 * one run too (the few between rows are computed and dropped), in vectors kept in registers over all
 * kernel offsets.
 *
 * Exact in the sense the reference backend needs: every output is a plain sum of the same products a
 * float64 computation sums, in the element type, with no transforms (no -ffast-math; the filter
 * gradient keeps its own partial sums per vector lane rather than reassociating one). Spatial ranks 1
 * to 3 arrive as rank 3 (leading sizes 1). The caller (native.py) checks every array against the
 * geometry before a call; the functions here trust them.
 */
#include "planes.h"

/* The typed kernels, once per instruction set (dispatch.h) and element type. */
#define KERNELS "depthwise_typed.h"
#include "instantiate.h"
