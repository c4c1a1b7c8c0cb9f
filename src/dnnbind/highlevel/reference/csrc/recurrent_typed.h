/* The typed half of recurrent.c (instantiate.h: T, ITYPE, NAME(f), VECTOR_BYTES). */
#include "vmath_typed.h"

#include "cblas_typed.h"

/* C (m x n) = op(A) B + beta C, B k x n and C without gaps between rows: the loops' products. */
INLINE void NAME(gemm)(const void *fn, int64_t index_bytes, int trans_a, int64_t m, int64_t n, int64_t k,
                       const T *a, int64_t lda, const T *b, T beta, T *c) {
    NAME(cblas_gemm)(fn, index_bytes, trans_a, 0, m, n, k, a, lda, b, n, beta, c, n);
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

/* The forward loop of one LSTM layer and direction over ``steps`` steps of ``batch`` sequences:
 * xp (4H, T, B): W_ih x_t + b_ih + b_hh for every time t; w_hh (4H, H); steps[k]: the time of step k.
 * Writes the tapes acts (T, 4H, B: activated gates), hs and cs (T + 1, H, B; hs[0], cs[0] given: the
 * initial state) and tcs (T, H, B: tanh of the cells). A chunk of step k (recurrent.c: the threads'
 * tickets) is its hidden units' four gate rows of the recurrent product and their cells; the next
 * step's product reads every unit's state. */
KERNEL void NAME(dnnbind_lstm_forward)(const T *xp, const T *w_hh, const int64_t *steps, T *acts, T *hs, T *cs, T *tcs,
                                       int64_t count, int64_t hidden, int64_t batch, const void *gemm,
                                       int64_t index_bytes, int64_t *sync, int64_t lo, int64_t hi) {
    (void)lo; (void)hi;
    const int64_t plane = hidden * batch, rows = 4 * hidden, parts = sync[1];
    for (int64_t ticket; (ticket = next_ticket(sync)) < count * parts;) {
        int64_t k = ticket / parts, u0, u1;
        chunk_units(hidden, parts, ticket % parts, &u0, &u1);
        wait_for_chunks(sync, k * parts);
        T *a = acts + k * rows * batch;
        const T *x_t = xp + steps[k] * batch;
        /* the four gates' rows of these units: one product when they are every unit (one thread, whose
         * BLAS may have threads of its own for one large product), else one per gate */
        int64_t blocks = u1 - u0 == hidden ? 1 : 4, block_rows = u1 - u0 == hidden ? rows : u1 - u0;
        for (int64_t gate = 0; gate < blocks; gate++) {
            int64_t r0 = gate * hidden + u0;
            for (int64_t r = r0; r < r0 + block_rows; r++)
                memcpy(a + r * batch, x_t + r * count * batch, (size_t)batch * sizeof(T));
            NAME(gemm)(gemm, index_bytes, 0, block_rows, batch, hidden, w_hh + r0 * hidden, hidden, hs + k * plane,
                       1, a + r0 * batch);
        }
        T *c = cs + (k + 1) * plane, *h = hs + (k + 1) * plane, *tc = tcs + k * plane;
        const T *c_prev = cs + k * plane;
        int64_t j = u0 * batch, end = u1 * batch;
        for (; j + VL <= end; j += VL) NAME(lstm_cell)(a, plane, c_prev, c, tc, h, j, VL);
        if (j < end) NAME(lstm_cell)(a, plane, c_prev, c, tc, h, j, end - j);
        chunk_done(sync);
    }
}

/* One backward step's gate gradients for elements [j, j + count): from the state gradient dh (the
 * carried one plus this step's output gradient dy) and the carried cell gradient dc (updated in place
 * to the one before the step). */
INLINE void NAME(lstm_cell_grad)(const T *gates, T *d, int64_t plane, const T *c_prev, const T *tc, const T *dh,
                                 const T *dy, T *dc, int64_t j, int64_t count) {
    const T *gi = gates + j, *gf = gi + plane, *gg = gf + plane, *go = gg + plane;
    NAME(v) i = NAME(load)(gi, count), f = NAME(load)(gf, count), g = NAME(load)(gg, count), o = NAME(load)(go, count);
    NAME(v) t = NAME(load)(tc + j, count);
    NAME(v) dh_t = NAME(load)(dh + j, count) + NAME(load)(dy + j, count);
    NAME(v) dc_t = dh_t * (o * (1 - t * t)) + NAME(load)(dc + j, count);
    T *di = d + j, *df = di + plane, *dg = df + plane, *d_o = dg + plane;
    NAME(store)(di, dc_t * g * (i * (1 - i)), count);
    NAME(store)(df, dc_t * NAME(load)(c_prev + j, count) * (f * (1 - f)), count);
    NAME(store)(dg, dc_t * i * (1 - g * g), count);
    NAME(store)(d_o, dh_t * t * (o * (1 - o)), count);
    NAME(store)(dc + j, dc_t * f, count);
}

/* The backward loop of :c:func:`dnnbind_lstm_forward`, steps in reverse: dy (T, H, B) the gradients of
 * the states after each step, dh and dc (H, B) those of the last state and cell, updated in place to the
 * initial ones. Writes dgates (T, 4H, B), the gradients of the pre-activations. Two rounds of chunks per
 * step (recurrent.c's tickets): the units' gate gradients, then their rows of dh = W_hh^T dgates, which
 * reads every unit's gate gradients. */
KERNEL void NAME(dnnbind_lstm_backward)(const T *acts, const T *cs, const T *tcs, const T *w_hh, const T *dy, T *dh,
                                        T *dc, T *dgates, int64_t count, int64_t hidden, int64_t batch,
                                        const void *gemm, int64_t index_bytes, int64_t *sync, int64_t lo,
                                        int64_t hi) {
    (void)lo; (void)hi;
    const int64_t plane = hidden * batch, rows = 4 * hidden, parts = sync[1];
    for (int64_t ticket; (ticket = next_ticket(sync)) < 2 * count * parts;) {
        int64_t round = ticket / parts, k = count - 1 - round / 2, u0, u1;
        chunk_units(hidden, parts, ticket % parts, &u0, &u1);
        wait_for_chunks(sync, round * parts);
        const T *a = acts + k * rows * batch;
        T *d = dgates + k * rows * batch;
        if (round % 2 == 0) {
            int64_t j = u0 * batch, end = u1 * batch;
            for (; j + VL <= end; j += VL)
                NAME(lstm_cell_grad)(a, d, plane, cs + k * plane, tcs + k * plane, dh, dy + k * plane, dc, j, VL);
            if (j < end)
                NAME(lstm_cell_grad)(a, d, plane, cs + k * plane, tcs + k * plane, dh, dy + k * plane, dc, j,
                                     end - j);
        } else {                                                  /* dh[u0:u1] = W_hh[:, u0:u1]^T d */
            NAME(gemm)(gemm, index_bytes, 1, u1 - u0, batch, rows, w_hh + u0, hidden, d, 0, dh + u0 * batch);
        }
        chunk_done(sync);
    }
}

/* y = exp, tanh or sigmoid (which: 0, 1, 2) of x, n elements (the tests measure their accuracy). */
KERNEL void NAME(dnnbind_vmath)(const T *x, T *y, int64_t n, int64_t which) {
    for (int64_t j = 0; j < n; j += VL) {
        int64_t count = n - j < VL ? n - j : VL;
        NAME(v) v = NAME(load)(x + j, count);
        v = which == 0 ? NAME(vexp)(v) : which == 1 ? NAME(vtanh)(v) : NAME(vsigmoid)(v);
        NAME(store)(y + j, v, count);
    }
}

#undef VL
#undef SINGLE
