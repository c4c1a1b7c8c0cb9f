/* Dense and grouped convolution's forward for dnnbind's reference backend, as a direct convolution.
 *
 * im2col and a BLAS product move every input once per kernel offset through a column buffer, and BLAS
 * packs that buffer again; at the sizes of a CNN's layers the copies cost as much as the product. Here
 * each sample's input channels are copied once into the plane layout of planes.h (zero-padded, split by
 * stride phase), where the inputs of every kernel offset for a plane's outputs are one contiguous run.
 * A tile of MR output channels by two vectors of consecutive outputs is then accumulated in registers
 * over every input channel and kernel offset (one vector load per input row and offset, one broadcast
 * weight per output channel), and stored once.
 *
 * Exact in the sense the reference backend needs: every output is a plain sum of the same products a
 * float64 computation sums, in the element type, input channel by input channel, kernel offset by
 * kernel offset (FMA contraction only rounds less).
 */
#include "planes.h"

#define KERNELS "conv_typed.h"
#include "instantiate.h"
