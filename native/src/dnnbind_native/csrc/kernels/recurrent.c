/* The LSTM time loop for dnnbind's reference backend: every step of one layer and direction in one call.
 *
 * numpy runs a step as a dozen small operations (the recurrent product, then the gates, the cell and the
 * state one array operation each), and at the sizes of a training batch their per-call cost and extra
 * passes are most of the step. Here a step is one product (the forward's: its recurrent and input
 * products together) and one pass over the gates that computes everything else, with the vector exp,
 * tanh and sigmoid of vmath_typed.h.
 *
 * The product is a narrow one (4H x (H + I) times (H + I) x B, B a batch) repeated every step with the
 * same matrix. A BLAS gemm call packs that matrix again each time (a megabyte for H = 256) and splits
 * a narrow product poorly; here each chunk's rows of it are packed once per call, in panels of
 * PANEL_ROWS rows whose products with two vectors of columns stay in registers over each block of the
 * depth (recurrent_typed.h: tile): each sum is a plain one over the depth, in order, whatever the
 * chunking.
 * The layouts are rnn.py's (feature-major, tapes in step order); only sequences of one length and no
 * projection come here.
 */
#include <sched.h>
#include <string.h>

#include "dispatch.h"

/* Rows of a panel of a packed matrix: twelve rows of sums with two vectors each fill 24 of AVX-512's 32
 * registers; six rows (12 of 16 registers) for the narrower sets. */
#define PANEL_ROWS (VECTOR_BYTES == 64 ? 12 : 6)
/* Each chunk's part of the packed buffer holds (its most rows + CHUNK_SLACK_ROWS) x depth elements,
 * rounded up to PART_ALIGN elements: its panels, with up to 15 rows of padding (recurrent_typed.h:
 * NARROW_ROWS, PANEL_ROWS). The parts start at the buffer's first 64-byte boundary, so that a narrow
 * product's loads of whole vectors (64 bytes at most) never span two cache lines; native.py allocates
 * by the same rule, with 64 bytes to spare for the boundary. */
#define CHUNK_SLACK_ROWS 16
#define PART_ALIGN 16

/* Several threads through one time loop (every thread that runs a range of the call takes part; the
 * range itself says nothing): each step is cut into ``sync[1]`` chunks of hidden units, handed out as
 * tickets in step order, and a ticket's chunk starts once every chunk of the steps before it is done
 * (sync[0]: the next ticket, sync[8]: the chunks done; the caller zeroes both). Whoever is there takes
 * the next ticket, so one thread alone runs every step in order, and a thread that starts late only
 * joins later: never a wait for a thread that is not running. */
static inline int64_t next_ticket(int64_t *sync) { return __atomic_fetch_add(&sync[0], 1, __ATOMIC_SEQ_CST); }

/* Spin until `chunks` are done; past a few microseconds yield the core now and then, in case the
 * thread with the chunk waited for has none (more threads than free cores). */
static inline void wait_for_chunks(const int64_t *sync, int64_t chunks) {
    for (int64_t polls = 1; __atomic_load_n(&sync[8], __ATOMIC_ACQUIRE) < chunks; polls++) {
        if (polls % 4096 == 0) sched_yield();
        spin_pause();
    }
}

static inline void chunk_done(int64_t *sync) { __atomic_fetch_add(&sync[8], 1, __ATOMIC_RELEASE); }

/* Hidden units [*u0, *u1) of chunk c of parts. */
static inline void chunk_units(int64_t hidden, int64_t parts, int64_t c, int64_t *u0, int64_t *u1) {
    *u0 = hidden * c / parts;
    *u1 = hidden * (c + 1) / parts;
}

#define KERNELS "recurrent_typed.h"
#include "instantiate.h"
