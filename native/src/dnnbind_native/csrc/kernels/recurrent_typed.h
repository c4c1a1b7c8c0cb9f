/* The typed half of recurrent.c (instantiate.h: T, ITYPE, NAME(f), VECTOR_BYTES). */
#include "vmath_typed.h"

/* Vectors that hold one element of each row of a panel for a narrow product (narrow_panel), and the
 * rows of such a panel: whole vectors of them. */
#define PANEL_VECTORS ((PANEL_ROWS + VL - 1) / VL)
#define NARROW_ROWS (PANEL_VECTORS * VL)

/* Whether a product with n columns takes narrow_panel: fewer columns than a vector's lanes, where a
 * tile's vectors over the columns would be partly empty (one sequence: 1 lane of 16 used). */
INLINE int NAME(narrow_product)(int64_t n) { return n < VL; }

/* The rows of the panels a product with n columns is packed in: NARROW_ROWS for narrow_panel, else
 * PANEL_ROWS for the tiles. */
INLINE int64_t NAME(panel_height)(int64_t n) { return NAME(narrow_product)(n) ? NARROW_ROWS : PANEL_ROWS; }

/* Elements [from, from + count) of row i of a packed A of depth ``depth`` (recurrent.c: panels of
 * ``height`` rows, panel[q * height + i % height] = A(i, q)) from ``row`` (elements ``stride`` apart),
 * or zeros without one (past A's end). */
INLINE void NAME(pack_row)(T *packed, int64_t height, int64_t i, int64_t depth, int64_t from, int64_t count,
                           const T *row, int64_t stride) {
    T *panel = packed + i / height * height * depth + (from * height + i % height);
    for (int64_t q = 0; q < count; q++) panel[q * height] = row ? row[q * stride] : 0;
}

/* How many rows a packed A of ``rows`` rows holds: whole panels of ``height`` rows. */
INLINE int64_t NAME(padded_rows)(int64_t rows, int64_t height) { return (rows + height - 1) / height * height; }

/* The two parts of the right-hand side of a packed product: b's rows [0, depth) are ``first``'s,
 * [depth, depth + more) ``then``'s (``more`` may be 0), both with row pitch ldb: [h; x_t] for the
 * forward's step, whose recurrent and input products are one. */
typedef struct {
    const T *first;
    int64_t depth;
    const T *then;
    int64_t more, ldb;
} NAME(rhs_t);

/* Lanes [lo, hi) of a vector from p (p's element lo is lane lo), the others 0; and back. */
INLINE NAME(v) NAME(load_lanes)(const T *p, int64_t lo, int64_t hi) {
    if (lo == 0 && hi == VL) return *(const NAME(uv) *)p;
    NAME(v) v = NAME(splat)(0);
    if (hi > lo) memcpy((T *)&v + lo, p + lo, (size_t)(hi - lo) * sizeof(T));
    return v;
}

INLINE void NAME(store_lanes)(T *p, NAME(v) v, int64_t lo, int64_t hi) {
    if (lo == 0 && hi == VL)
        *(NAME(uv) *)p = v;
    else if (hi > lo)
        memcpy(p + lo, (T *)&v + lo, (size_t)(hi - lo) * sizeof(T));
}

/* Depth a tile takes at a time: the rows of b it reads (DEPTH_BLOCK x two vectors: 16 KB of float32
 * with AVX-512) stay in the first-level cache while every panel of the chunk reads them. */
#define DEPTH_BLOCK 128

/* One tile of a packed product over b's rows [q0, q0 + depth) (``bq``: row q0, row pitch ldb; ``panel``:
 * its rows' elements at q0): for the ``rows`` (at most PANEL_ROWS) rows i, the columns [skip, cols) of
 * the nv (1 or 2, a constant where it is inlined) vectors of columns from ``col`` on: out[i] = what it
 * holds (``more``) or shift[i] (not), plus the block's sum over q of A(i, q) b[q][col...]. The vectors
 * are read from b whole; lanes outside [skip, cols) are summed but neither read from out nor stored
 * (columns another tile holds). The PANEL_ROWS x nv sums stay in registers over the block. */
INLINE void NAME(tile)(const T *panel, const T *bq, int64_t ldb, int64_t depth, T *const *out, const T *shift,
                       int more, int64_t col, const int nv, int64_t skip, int64_t cols, int64_t rows) {
    NAME(v) acc[PANEL_ROWS][2];
#pragma GCC unroll 12
    for (int i = 0; i < PANEL_ROWS; i++)
        for (int j = 0; j < nv; j++) {
            int64_t lo = skip - j * VL < 0 ? 0 : skip - j * VL, hi = cols - j * VL < VL ? cols - j * VL : VL;
            acc[i][j] = more && i < rows ? NAME(load_lanes)(out[i] + col + j * VL, lo, hi) : NAME(splat)(shift[i]);
        }
    bq += col;
    for (int64_t q = 0; q < depth; q++, panel += PANEL_ROWS, bq += ldb) {
        NAME(v) b0 = *(const NAME(uv) *)bq, b1 = b0;
        if (nv == 2) b1 = *(const NAME(uv) *)(bq + VL);
#pragma GCC unroll 12
        for (int i = 0; i < PANEL_ROWS; i++) {
            acc[i][0] += panel[i] * b0;
            if (nv == 2) acc[i][1] += panel[i] * b1;
        }
    }
#pragma GCC unroll 12
    for (int i = 0; i < PANEL_ROWS; i++)
        for (int j = 0; j < nv; j++) {
            int64_t lo = skip - j * VL < 0 ? 0 : skip - j * VL, hi = cols - j * VL < VL ? cols - j * VL : VL;
            if (i < rows) NAME(store_lanes)(out[i] + col + j * VL, acc[i][j], lo, hi);
        }
}

/* Every column of one panel's rows over one block of b's rows (n >= VL columns: narrower products take
 * narrow_panel): tiles of two vectors of columns, then one, then the last columns as a vector ending
 * at n whose lanes the tile before holds are skipped. */
INLINE void NAME(panel_block)(const T *panel, const T *bq, int64_t ldb, int64_t depth, int64_t n, T *const *out,
                              const T *shift, int more, int64_t rows) {
    int64_t col = 0;
    for (; col + 2 * VL <= n; col += 2 * VL) NAME(tile)(panel, bq, ldb, depth, out, shift, more, col, 2, 0, 2 * VL, rows);
    if (col + VL <= n) {
        NAME(tile)(panel, bq, ldb, depth, out, shift, more, col, 1, 0, VL, rows);
        col += VL;
    }
    if (col < n) NAME(tile)(panel, bq, ldb, depth, out, shift, more, n - VL, 1, col - (n - VL), VL, rows);
}

/* Chunk c's part of ``packed`` (recurrent.c: CHUNK_SLACK_ROWS, PART_ALIGN), for chunks of at most
 * ``widest`` rows. */
INLINE T *NAME(chunk_part)(T *packed, int64_t c, int64_t widest, int64_t depth) {
    T *first = (T *)(((uintptr_t)packed + 63) & ~(uintptr_t)63);
    return first + c * (((widest + CHUNK_SLACK_ROWS) * depth + PART_ALIGN - 1) / PART_ALIGN * PART_ALIGN);
}

/* Where the rows of a chunk's product go: its row i is row r(i) = (i / m) hidden + u0 + i % m of
 * ``out`` (rows of the product's n columns, no gaps), which starts from shift[r(i)] (NULL: 0). The forward's chunk rows are
 * its units' rows of each gate (m its units), the backward's its units (m its rows: r(i) = u0 + i). */
typedef struct {
    T *out;
    const T *shift;
    int64_t m, hidden, u0;
} NAME(rows_t);

/* Where the product's rows [r0, r0 + count) of a chunk go (``to``: out rows of n columns), and what
 * each starts from. */
INLINE void NAME(panel_targets)(const NAME(rows_t) *to, int64_t r0, int64_t count, int64_t n, T **outs, T *shift) {
    for (int64_t i = 0; i < count; i++) {
        int64_t r = (r0 + i) / to->m * to->hidden + to->u0 + (r0 + i) % to->m;
        outs[i] = to->out + r * n;
        shift[i] = to->shift ? to->shift[r] : 0;
    }
}

/* One panel's rows (``rows`` of them) of the product with a narrow b (narrow_product: n columns, a
 * constant where it is inlined), the whole depth at once. A panel's elements at depth q of all its
 * NARROW_ROWS rows lie side by side, so the vectors run over rows, each times b[q][j] for every column:
 * every lane useful, where a tile's vectors over the columns would hold n of VL. Each sum is over the
 * depth in order, in ``chains`` interleaved parts (every chains-th q, added at the end) for one or two
 * columns, which would otherwise wait on a multiply-add's latency at every q. */
INLINE void NAME(narrow_panel)(const T *panel, const NAME(rhs_t) *b, T *const *out, const T *shift, int64_t rows,
                               const int n) {
    if (n >= VL) return;      /* never called so (narrow_product) */
    const int chains = n >= 3 ? 1 : 4 / n;
    NAME(v) acc[15][4][PANEL_VECTORS], x[PANEL_VECTORS];
    for (int j = 0; j < n; j++)
        for (int k = 0; k < chains; k++)
            for (int r = 0; r < PANEL_VECTORS; r++) {
                acc[j][k][r] = NAME(splat)(0);
                if (k == 0)
                    for (int lane = 0; lane < VL && r * VL + lane < rows; lane++) acc[j][k][r][lane] = shift[r * VL + lane];
            }
    const T *a = panel;
    for (int half = 0; half < 2; half++) {          /* b's two parts, one after the other along the depth */
        const T *bq = half ? b->then : b->first;
        const int64_t len = half ? b->more : b->depth;
        int64_t q = 0;
        for (; q + chains <= len; q += chains)
            for (int k = 0; k < chains; k++, a += NARROW_ROWS, bq += b->ldb) {
                for (int r = 0; r < PANEL_VECTORS; r++) x[r] = *(const NAME(uv) *)(a + r * VL);
                for (int j = 0; j < n; j++)
                    for (int r = 0; r < PANEL_VECTORS; r++) acc[j][k][r] += x[r] * bq[j];
            }
        for (; q < len; q++, a += NARROW_ROWS, bq += b->ldb) {
            for (int r = 0; r < PANEL_VECTORS; r++) x[r] = *(const NAME(uv) *)(a + r * VL);
            for (int j = 0; j < n; j++)
                for (int r = 0; r < PANEL_VECTORS; r++) acc[j][0][r] += x[r] * bq[j];
        }
    }
    for (int j = 0; j < n; j++)
        for (int r = 0; r < PANEL_VECTORS; r++) {
            if (chains == 4) acc[j][0][r] = (acc[j][0][r] + acc[j][1][r]) + (acc[j][2][r] + acc[j][3][r]);
            else if (chains == 2) acc[j][0][r] += acc[j][1][r];
        }
    for (int64_t i = 0; i < rows; i++)
        for (int j = 0; j < n; j++) out[i][j] = acc[j][0][i / VL][i % VL];
}

/* Every panel of a chunk's product with a narrow b (narrow_product), the rows as ``to`` says. */
INLINE void NAME(narrow_chunk_product)(const T *part, int64_t rows, const NAME(rhs_t) *b, int64_t n,
                                       const NAME(rows_t) *to) {
    const int64_t depth = b->depth + b->more;
    for (int64_t r0 = 0; r0 < rows; r0 += NARROW_ROWS) {
        int64_t count = rows - r0 < NARROW_ROWS ? rows - r0 : NARROW_ROWS;
        T *outs[NARROW_ROWS];
        T shift[NARROW_ROWS] = {0};
        NAME(panel_targets)(to, r0, count, n, outs, shift);
        const T *panel = part + r0 * depth;
#define NARROW_CASE(N) case N: NAME(narrow_panel)(panel, b, outs, shift, count, N); break;
        switch (n) {             /* n < VL: the cases past it compile to nothing */
        NARROW_CASE(1) NARROW_CASE(2) NARROW_CASE(3) NARROW_CASE(4) NARROW_CASE(5) NARROW_CASE(6) NARROW_CASE(7)
        NARROW_CASE(8) NARROW_CASE(9) NARROW_CASE(10) NARROW_CASE(11) NARROW_CASE(12) NARROW_CASE(13)
        NARROW_CASE(14) NARROW_CASE(15)
        default: break;
        }
#undef NARROW_CASE
    }
}

/* The product of a chunk's packed A (``part``: its panels) and b
 * (n columns) into the rows ``to`` says: b's rows a block at a time (DEPTH_BLOCK), every panel over
 * each block, the sums carried in ``out`` from one block to the next. */
INLINE void NAME(chunk_product)(const T *part, int64_t rows, const NAME(rhs_t) *b, int64_t n, const NAME(rows_t) *to) {
    if (NAME(narrow_product)(n)) {
        NAME(narrow_chunk_product)(part, rows, b, n, to);
        return;
    }
    const int64_t depth = b->depth + b->more;
    for (int64_t q0 = 0, end; q0 < depth; q0 = end) {
        /* a block within one part of b: it ends where the first part does */
        end = q0 < b->depth ? (q0 + DEPTH_BLOCK < b->depth ? q0 + DEPTH_BLOCK : b->depth)
                            : (q0 + DEPTH_BLOCK < depth ? q0 + DEPTH_BLOCK : depth);
        const T *bq = q0 < b->depth ? b->first + q0 * b->ldb : b->then + (q0 - b->depth) * b->ldb;
        for (int64_t r0 = 0; r0 < rows; r0 += PANEL_ROWS) {
            int64_t count = rows - r0 < PANEL_ROWS ? rows - r0 : PANEL_ROWS;
            T *outs[PANEL_ROWS];
            T shift[PANEL_ROWS] = {0};
            NAME(panel_targets)(to, r0, count, n, outs, shift);
            NAME(panel_block)(part + r0 * depth + q0 * PANEL_ROWS, bq, b->ldb, end - q0, n, outs, shift, q0 > 0,
                              count);
        }
    }
}

/* One LSTM step's gates, cell and state for elements [j, j + count) of the (H, B) planes: the
 * pre-activations in gates (rows i, f, g, o, each ``plane`` apart) become the activated gates, and
 * c = f c_prev + i g, tc = tanh(c), h = o tc. */
INLINE void NAME(lstm_cell)(T *gates, int64_t plane, const T *c_prev, T *c, T *tc, T *h, int64_t j, int64_t count) {
    T *gi = gates + j, *gf = gi + plane, *gg = gf + plane, *go = gg + plane;
    NAME(v) i = NAME(vsigmoid)(NAME(load)(gi, count)), f = NAME(vsigmoid)(NAME(load)(gf, count));
    NAME(v) g = NAME(vtanh)(NAME(load)(gg, count)), o = NAME(vsigmoid)(NAME(load)(go, count));
    NAME(v) cell = f * NAME(load)(c_prev + j, count) + i * g, tcell = NAME(vtanh)(cell);
    NAME(store)(gi, i, count);
    NAME(store)(gf, f, count);
    NAME(store)(gg, g, count);
    NAME(store)(go, o, count);
    NAME(store)(c + j, cell, count);
    NAME(store)(tc + j, tcell, count);
    NAME(store)(h + j, o * tcell, count);
}

/* Round 0 of an LSTM forward loop for chunk [u0, u1) of the hidden units: its rows of [w_hh w_ih]
 * (row i: gate i / m of unit u0 + i % m) packed into ``part``. */
INLINE void NAME(lstm_pack)(T *part, const T *w_ih, const T *w_hh, int64_t inputs, int64_t hidden, int64_t batch,
                            int64_t u0, int64_t u1) {
    const int64_t m = u1 - u0, rows = 4 * m, height = NAME(panel_height)(batch), depth = hidden + inputs;
    for (int64_t i = 0; i < NAME(padded_rows)(rows, height); i++) {
        int64_t r = i < rows ? (i / m) * hidden + u0 + i % m : -1;
        NAME(pack_row)(part, height, i, depth, 0, hidden, r < 0 ? NULL : w_hh + r * hidden, 1);
        NAME(pack_row)(part, height, i, depth, hidden, inputs, r < 0 ? NULL : w_ih + r * inputs, 1);
    }
}

/* Step k of an LSTM forward loop for chunk [u0, u1) of the hidden units (``part``: its packed rows): their
 * rows of the gates' pre-activations [w_hh w_ih] [h_k; xk] + bias, then their cells and states. */
INLINE void NAME(lstm_step)(const T *part, const T *xk, const T *bias, T *acts, T *hs, T *cs, T *tcs, int64_t k,
                            int64_t inputs, int64_t hidden, int64_t batch, int64_t u0, int64_t u1) {
    const int64_t plane = hidden * batch, m = u1 - u0;
    T *a = acts + k * 4 * plane;
    NAME(rhs_t) b = {hs + k * plane, hidden, xk, inputs, batch};
    NAME(rows_t) to = {a, bias, m, hidden, u0};
    NAME(chunk_product)(part, 4 * m, &b, batch, &to);
    T *c_new = cs + (k + 1) * plane, *h = hs + (k + 1) * plane, *tc = tcs + k * plane;
    const T *c_prev = cs + k * plane;
    int64_t j = u0 * batch, end = u1 * batch;
    for (; j + VL <= end; j += VL) NAME(lstm_cell)(a, plane, c_prev, c_new, tc, h, j, VL);
    if (j < end) NAME(lstm_cell)(a, plane, c_prev, c_new, tc, h, j, end - j);
}

/* The forward loop of one LSTM layer and direction over ``count`` steps of ``batch`` sequences:
 * x (T, I, B): each time's inputs, feature-major; w_ih (4H, I), w_hh (4H, H), bias (4H): b_ih + b_hh,
 * or NULL; steps[k]: the time of step k. Writes the tapes acts (T, 4H, B: activated gates), hs and cs
 * (T + 1, H, B; hs[0], cs[0] given: the initial state) and tcs (T, H, B: tanh of the cells). A step's
 * gate pre-activations are one product: [w_hh w_ih] [h; x_t] + bias. The chunks (recurrent.c) of
 * round 0 pack each chunk's rows of [w_hh w_ih] (its hidden units' four gate rows) into ``packed``;
 * those of round k + 1 are step k's chunks: their rows of the product, and their cells (the next
 * step's product reads every unit's state). */
KERNEL void NAME(dnnbind_lstm_forward)(const T *x, const T *w_ih, const T *bias, const T *w_hh, const int64_t *steps,
                                       T *acts, T *hs, T *cs, T *tcs, int64_t count, int64_t inputs, int64_t hidden,
                                       int64_t batch, T *packed, int64_t *sync, int64_t lo, int64_t hi) {
    (void)hi;
    const int64_t parts = sync[1], widest = 4 * ((hidden + parts - 1) / parts), depth = hidden + inputs;
    turns_t turns = turns_start(sync, parts, count + 1, lo);
    for (int64_t round, c; next_turn(&turns, &round, &c);) {
        int64_t u0, u1;
        chunk_units(hidden, parts, c, &u0, &u1);
        T *part = NAME(chunk_part)(packed, c, widest, depth);
        if (round == 0) {
            NAME(lstm_pack)(part, w_ih, w_hh, inputs, hidden, batch, u0, u1);
        } else {
            const int64_t k = round - 1;
            wait_for_chunks(sync, 0, round * parts);
            NAME(lstm_step)(part, x + steps[k] * inputs * batch, bias, acts, hs, cs, tcs, k, inputs, hidden, batch,
                            u0, u1);
        }
        chunk_done(sync, 0);
    }
}

/* The forward loops of a stack of ``layers`` unidirectional LSTM layers of ``hidden`` units over the same
 * ``count`` steps (times in order), each layer's input at step k the state the layer below reached
 * there, as one wavefront: round r + 1 runs step r - l of every layer l, so that the layers' steps of
 * one round run side by side and one wait separates the rounds (a layer's step k needs its own step
 * k - 1 and the layer below's step k, both of the round before). ``layer``: per layer, ten words: x
 * (the first layer's, as dnnbind_lstm_forward's; ignored above it), w_ih, bias (or 0), w_hh, acts, hs,
 * cs, tcs (as dnnbind_lstm_forward's), packed (its own buffer, sized as that kernel's) and its inputs.
 * Chunks (recurrent.c): sync[1] per layer and round, chunk l * sync[1] + c of a round layer l's; every
 * chunk of a round waits for the rounds before it, also one with no step to run (so that the count of
 * chunks done never runs ahead).
 * Each step's sums are those of dnnbind_lstm_forward, in the same order. */
KERNEL void NAME(dnnbind_lstm_forward_stack)(const int64_t *layer, int64_t layers, int64_t count, int64_t hidden,
                                             int64_t batch, int64_t *sync, int64_t lo, int64_t hi) {
    (void)hi;
    const int64_t parts = sync[1], per_round = layers * parts, widest = 4 * ((hidden + parts - 1) / parts);
    const int64_t plane = hidden * batch;
    turns_t turns = turns_start(sync, per_round, count + layers, lo);
    for (int64_t round, q; next_turn(&turns, &round, &q);) {
        int64_t l = q / parts, c = q % parts, u0, u1;
        const int64_t *d = layer + 10 * l;
        const int64_t inputs = d[9];
        chunk_units(hidden, parts, c, &u0, &u1);
        T *part = NAME(chunk_part)((T *)(intptr_t)d[8], c, widest, hidden + inputs);
        if (round == 0) {
            NAME(lstm_pack)(part, (const T *)(intptr_t)d[1], (const T *)(intptr_t)d[3], inputs, hidden, batch, u0, u1);
        } else {
            const int64_t k = round - 1 - l;
            wait_for_chunks(sync, 0, round * per_round);
            if (k >= 0 && k < count) {
                const T *xk = l == 0 ? (const T *)(intptr_t)d[0] + k * inputs * batch
                                     : (const T *)(intptr_t)d[5 - 10] + (k + 1) * plane;   /* hs below */
                NAME(lstm_step)(part, xk, (const T *)(intptr_t)d[2], (T *)(intptr_t)d[4], (T *)(intptr_t)d[5],
                                (T *)(intptr_t)d[6], (T *)(intptr_t)d[7], k, inputs, hidden, batch, u0, u1);
            }
        }
        chunk_done(sync, 0);
    }
}

/* One backward step's gate gradients for ``count`` elements of the (H, B) planes: from the state gradient
 * dh (the carried one plus this step's output gradient dy) and the carried cell gradient dc (updated in
 * place to the one before the step). The step's tapes (gates: rows i, f, g, o ``plane`` apart; c_prev,
 * tc) and dy at element j; the gate gradients d (rows ``dplane`` apart), dh and dc at element jd. */
INLINE void NAME(lstm_cell_grad)(const T *gates, int64_t plane, const T *c_prev, const T *tc, const T *dy, int64_t j,
                                 T *d, int64_t dplane, const T *dh, T *dc, int64_t jd, int64_t count) {
    const T *gi = gates + j, *gf = gi + plane, *gg = gf + plane, *go = gg + plane;
    NAME(v) i = NAME(load)(gi, count), f = NAME(load)(gf, count), g = NAME(load)(gg, count), o = NAME(load)(go, count);
    NAME(v) t = NAME(load)(tc + j, count);
    NAME(v) dh_t = NAME(load)(dh + jd, count) + NAME(load)(dy + j, count);
    NAME(v) dc_t = dh_t * (o * (1 - t * t)) + NAME(load)(dc + jd, count);
    T *di = d + jd, *df = di + dplane, *dg = df + dplane, *d_o = dg + dplane;
    NAME(store)(di, dc_t * g * (i * (1 - i)), count);
    NAME(store)(df, dc_t * NAME(load)(c_prev + j, count) * (f * (1 - f)), count);
    NAME(store)(dg, dc_t * i * (1 - g * g), count);
    NAME(store)(d_o, dh_t * t * (o * (1 - o)), count);
    NAME(store)(dc + jd, dc_t * f, count);
}

/* lstm_cell_grad over elements [j, end) of contiguous rows, a vector at a time. */
INLINE void NAME(lstm_cell_grads)(const T *gates, int64_t plane, const T *c_prev, const T *tc, const T *dy, int64_t j,
                                  T *d, int64_t dplane, const T *dh, T *dc, int64_t jd, int64_t end) {
    for (; j + VL <= end; j += VL, jd += VL)
        NAME(lstm_cell_grad)(gates, plane, c_prev, tc, dy, j, d, dplane, dh, dc, jd, VL);
    if (j < end) NAME(lstm_cell_grad)(gates, plane, c_prev, tc, dy, j, d, dplane, dh, dc, jd, end - j);
}

/* The backward loop of :c:func:`dnnbind_lstm_forward`, steps in reverse: dy (T, H, B) the gradients of
 * the states after each step. Every group of the batch's columns (recurrent.c: sync[3] groups of
 * B / groups columns, each its own recurrence) runs in its own arrays, so that no two cores write one
 * cache line: dh and dc (groups, H, B / groups) the gradients of the last state and cell, updated in
 * place to the initial ones; dgates (T, groups, 4H, B / groups) the gradients of the pre-activations
 * (one group: (T, 4H, B)). Round 0 of the chunks (recurrent.c) packs each chunk's rows of W_hh^T (its
 * hidden units' columns of w_hh); round 1 is the last step's gate gradients; each round after it is one
 * step's product dh = W_hh^T dgates for the chunk's units (which reads every unit's gate gradients of
 * that step and group), then the step before's gate gradients of the same units (which read only those
 * units' dh and dc): one wait per step. */
KERNEL void NAME(dnnbind_lstm_backward)(const T *acts, const T *cs, const T *tcs, const T *w_hh, const T *dy, T *dh,
                                        T *dc, T *dgates, int64_t count, int64_t hidden, int64_t batch, T *packed,
                                        int64_t *sync, int64_t lo, int64_t hi) {
    (void)hi;
    const int64_t plane = hidden * batch, rows = 4 * hidden, parts = sync[1], groups = sync_groups(sync);
    const int64_t widest = (hidden + parts - 1) / parts, n = batch / groups, gplane = hidden * n;
    turns_t turns = turns_start(sync, groups * parts, count ? count + 2 : 1, lo);
    for (int64_t round, q; next_turn(&turns, &round, &q);) {
        const int64_t g = q / parts, c = q % parts, b0 = g * n;
        int64_t u0, u1;
        chunk_units(hidden, parts, c, &u0, &u1);
        T *part = NAME(chunk_part)(packed, q, widest, rows);
        T *dh_g = dh + g * gplane, *dc_g = dc + g * gplane;
        if (round == 0) {                 /* row i: unit u0 + i's column of w_hh */
            const int64_t height = NAME(panel_height)(n);
            for (int64_t i = 0; i < NAME(padded_rows)(u1 - u0, height); i++)
                NAME(pack_row)(part, height, i, rows, 0, rows, i < u1 - u0 ? w_hh + u0 + i : NULL, hidden);
            chunk_done(sync, g);
            continue;
        }
        wait_for_chunks(sync, g, round * parts);
        int64_t k = count - round;        /* the step whose gate gradients this round gives (-1: none) */
        if (round > 1) {                                          /* dh[u0:u1] = W_hh[:, u0:u1]^T d, step k + 1 */
            NAME(rhs_t) b = {dgates + ((k + 1) * groups + g) * rows * n, rows, dgates, 0, n};
            NAME(rows_t) to = {dh_g, NULL, u1 - u0, hidden, u0};
            NAME(chunk_product)(part, u1 - u0, &b, n, &to);
        }
        if (k >= 0) {
            const T *a = acts + k * rows * batch, *cp = cs + k * plane, *tc = tcs + k * plane, *dyk = dy + k * plane;
            T *d = dgates + (k * groups + g) * rows * n;
            if (n == batch)               /* one group: the units' rows side by side in every array */
                NAME(lstm_cell_grads)(a, plane, cp, tc, dyk, u0 * batch, d, gplane, dh_g, dc_g, u0 * batch,
                                      u1 * batch);
            else
                for (int64_t u = u0; u < u1; u++)
                    NAME(lstm_cell_grads)(a, plane, cp, tc, dyk, u * batch + b0, d, gplane, dh_g, dc_g, u * n,
                                          u * batch + b0 + n);
        }
        chunk_done(sync, g);
    }
}

/* y = exp or sigmoid (which: 0, 1) of x, n elements (the tests measure their accuracy; vtanh's through
 * pointwise.c's tanh activation). */
KERNEL void NAME(dnnbind_vmath)(const T *x, T *y, int64_t n, int64_t which) {
    for (int64_t j = 0; j < n; j += VL) {
        int64_t count = n - j < VL ? n - j : VL;
        NAME(v) v = NAME(load)(x + j, count);
        v = which == 0 ? NAME(vexp)(v) : NAME(vsigmoid)(v);
        NAME(store)(y + j, v, count);
    }
}

#undef VL
#undef SINGLE
#undef PANEL_VECTORS
#undef NARROW_ROWS
