/* Pointwise activations for dnnbind's cpu backend: y = f(x) (with relu's and clipped_relu's masks) in
 * one pass, and the data gradient dy * f'(.) in one pass, f' from the mask or recomputed from what the
 * backward reads (x, or y for relu, sigmoid and tanh: what torch's own functions save).
 *
 * numpy runs an activation as several passes over memory (sigmoid: an absolute value, an exp, a
 * select, a division, then two more for the derivative), single-threaded; here each is one pass,
 * split over the caller's threads by element ranges. The modes compute what activation.py's numpy
 * code computes, in the same order of operations, with the vector exp and tanh of vmath_typed.h (a
 * few units in the last place; the tests compare both with float64). identity stays in numpy.
 */
#include <stdint.h>
#include <string.h>

#include "dispatch.h"

/* The modes, as native.ACTIVATIONS numbers them. */
#define ACT_RELU 0
#define ACT_SIGMOID 1
#define ACT_TANH 2
#define ACT_LEAKY_RELU 3
#define ACT_CLIPPED_RELU 4
#define ACT_SWISH 5
#define ACT_ELU 6

/* Elements a range takes at a time: their values, then (while x is in the first-level cache) their
 * boolean masks. */
#define POINTWISE_BLOCK 4096

#define KERNELS "pointwise_typed.h"
#include "instantiate.h"
