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

/* Several threads through one time loop (every thread that runs a range of the call takes part): each
 * round (a step, or the packing before the first) is cut into chunks: ``groups`` groups of the batch's
 * columns (each its own recurrence), each cut into ``parts`` chunks of hidden units, and a chunk
 * starts once every chunk of its group in the rounds before it is done. sync (int64 words, zeroed by
 * the caller but for the sizes):
 *   sync[1]  parts (chunks of hidden units per group, layer and round)
 *   sync[2]  homes (the call's ranges: split(team, team), one per thread that may come)
 *   sync[3]  groups (0 reads as 1)
 *   sync[SYNC_DONE + 8 g]  chunks of group g done, all rounds together (a cache line per group)
 *   then per chunk q of a round: the rounds of it claimed so far; then per range h: nonzero once a
 *   thread runs it.
 * Chunk q belongs to range q % homes: the thread that runs that range takes it every round first, so
 * that the chunk's packed rows and its units' states stay in that core's cache (taken as they came,
 * the chunks changed cores every few steps). Then it takes any chunk of the same round that is still
 * unclaimed: at once where the range it belongs to has no thread yet (one thread alone runs every
 * chunk in order), else, in its own group, after GRACE_NS of waiting for that range's thread (one the
 * system runs late): never a wait for a thread that is not running. Another group's chunk it leaves to
 * a thread that runs: waiting for it would tie the groups together. */
#define SYNC_DONE 16
#define GRACE_NS 20000

static inline int64_t sync_groups(const int64_t *sync) { return sync[3] > 1 ? sync[3] : 1; }

typedef struct {
    int64_t *sync, *claims;
    const int64_t *present;
    int64_t per_round, rounds, homes, home, per_group, round, scan;
} turns_t;

/* This thread's turns through ``rounds`` rounds of ``per_round`` chunks, as the range starting at lo. */
static inline turns_t turns_start(int64_t *sync, int64_t per_round, int64_t rounds, int64_t lo) {
    int64_t *claims = sync + SYNC_DONE + 8 * sync_groups(sync);
    turns_t t = {sync, claims, claims + per_round, per_round, rounds, sync[2] > 1 ? sync[2] : 1, 0,
                 per_round / sync_groups(sync), 0, 0};
    t.home = lo % t.homes;
    __atomic_store_n(&claims[per_round + t.home], 1, __ATOMIC_RELEASE);
    return t;
}

/* Whether this thread has a chunk in chunk q's group (whose chunks wait for each other). */
static inline int same_group(const turns_t *t, int64_t q) {
    const int64_t first = q - q % t->per_group;
    for (int64_t c = first; c < first + t->per_group; c++)
        if (c % t->homes == t->home) return 1;
    return 0;
}

/* Whether chunk q of round r is someone else's to run: claimed already; or its own range's thread runs,
 * and either nothing of this thread's waits on it (another group's) or that thread claims it within
 * GRACE_NS. */
static inline int taken_by_owner(const turns_t *t, int64_t q, int64_t r) {
    if (__atomic_load_n(&t->claims[q], __ATOMIC_ACQUIRE) > r) return 1;
    if (!__atomic_load_n(&t->present[q % t->homes], __ATOMIC_ACQUIRE)) return 0;
    if (!same_group(t, q)) return 1;
    int64_t start = clock_ns();
    for (int64_t polls = 1; __atomic_load_n(&t->claims[q], __ATOMIC_ACQUIRE) <= r; polls++) {
        if (polls % 64 == 0 && clock_ns() - start > GRACE_NS) return 0;
        spin_pause();
    }
    return 1;
}

/* The next chunk this thread runs: its round and index among the round's chunks; 0 when none is left.
 * The caller waits for the rounds before (wait_for_chunks) and marks it done (chunk_done). */
static inline int next_turn(turns_t *t, int64_t *round, int64_t *q) {
    for (; t->round < t->rounds; t->round++, t->scan = 0) {
        const int64_t r = t->round;
        while (t->scan < 2 * t->per_round) {     /* its own chunks, then the others */
            const int64_t i = t->scan++, c = i % t->per_round;
            const int own = c % t->homes == t->home;
            if (own != (i < t->per_round)) continue;
            if (!own && taken_by_owner(t, c, r)) continue;
            int64_t expected = r;
            if (__atomic_compare_exchange_n(&t->claims[c], &expected, r + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                *round = r;
                *q = c;
                return 1;
            }
        }
    }
    return 0;
}

/* Spin until `chunks` of group g are done; past a few microseconds yield the core now and then, in case
 * the thread with the chunk waited for has none (more threads than free cores). */
static inline void wait_for_chunks(const int64_t *sync, int64_t g, int64_t chunks) {
    for (int64_t polls = 1; __atomic_load_n(&sync[SYNC_DONE + 8 * g], __ATOMIC_ACQUIRE) < chunks; polls++) {
        if (polls % 4096 == 0) sched_yield();
        spin_pause();
    }
}

static inline void chunk_done(int64_t *sync, int64_t g) { __atomic_fetch_add(&sync[SYNC_DONE + 8 * g], 1, __ATOMIC_RELEASE); }

/* Hidden units [*u0, *u1) of chunk c of parts. */
static inline void chunk_units(int64_t hidden, int64_t parts, int64_t c, int64_t *u0, int64_t *u1) {
    *u0 = hidden * c / parts;
    *u1 = hidden * (c + 1) / parts;
}

#define KERNELS "recurrent_typed.h"
#include "instantiate.h"
