/* The LSTM time loop for dnnbind's reference backend: every step of one layer and direction in one call.
 *
 * numpy runs a step as a dozen small operations (the recurrent product, then the gates, the cell and the
 * state one array operation each), and at the sizes of a training batch their per-call cost and extra
 * passes are most of the step. Here a step is the recurrent product through the caller's BLAS (numpy's
 * own OpenBLAS: its CBLAS gemm, passed in by address) and one pass over the gates that computes
 * everything else, with the vector exp, tanh and sigmoid of vmath_typed.h. The layouts are rnn.py's
 * (feature-major, tapes in step order); only sequences of one length and no projection come here.
 */
#include <string.h>

#include "dispatch.h"

/* CBLAS's enums (cblas.h), passed to gemm as ints */
#define CBLAS_ROW_MAJOR 101
#define CBLAS_NO_TRANS 111
#define CBLAS_TRANS 112

#define KERNELS "recurrent_typed.h"
#include "instantiate.h"
