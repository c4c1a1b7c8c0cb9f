/* Per-channel sums and maps over (batch, channels, plane) arrays: batch normalisation's statistics,
 * normalisation and data gradient, and the bias of a convolution (sums and adds).
 *
 * numpy runs each of these as several passes over the data, and reductions over every axis but one as
 * broadcasts it is slow at; here each is one pass over each plane. Sums are taken in double (the
 * batch statistics of float32 data are then as exact as float64 ones), in vector lanes of their own
 * rather than by reassociating a single sum. Planes and channels are split over the caller's threads.
 * Planes of a few elements (batch norm of (N, C) data: one each) run in row mode instead: the data as
 * rows of channels times plane elements, summed column by column, mapped with parameters per column.
 */
#include <stdint.h>

#include "dispatch.h"

/* Columns one row-mode sum takes at a time (their double sums stay in the first-level cache). */
#define COLUMN_BLOCK 512

#define KERNELS "channels_typed.h"
#include "instantiate.h"
