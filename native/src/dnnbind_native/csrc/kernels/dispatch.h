/* What every kernel file of dnnbind's reference backend shares: how kernels are exported, and the
 * instruction sets they are compiled for. */
#ifndef DNNBIND_DISPATCH_H
#define DNNBIND_DISPATCH_H

#include <stdint.h>
#include <time.h>
#if defined(__x86_64__)
#include <immintrin.h>    /* masked loads and stores of partial vectors (vmath_typed.h: load, store) */
#endif

/* Kernels are exported; everything else stays inside the library (-fvisibility=hidden). */
#define KERNEL __attribute__((visibility("default")))
/* Helpers are inlined into each kernel, so they are compiled for the kernel's instruction set. */
#define INLINE static inline __attribute__((always_inline))

/* One turn of a spin-wait: tells the core this thread is only polling (x86 pause, AArch64 yield). */
static inline void spin_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* The monotonic clock in nanoseconds (the spin-waits' time limits). */
static inline int64_t clock_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* The most bytes a correlation, dot product or tile handles at a time (eight vectors of the widest
 * instruction set, kept in registers), and so the most any of them reads or writes past a run's end. */
#define BLOCK_BYTES 512
/* Bytes of input planes a convolution takes through at once: samples side by side up to this much,
 * which stays in the second-level cache while every output channel's tiles read it. */
#define CONV_CHUNK_BYTES (1 << 20)
/* Outputs a filter-gradient tile sums over at a time (a multiple of every vector length). */
#define FILTER_CHUNK 2048
/* Elements of a run the scatters and dot products take at a time, over every tap before the next
 * chunk, so that what they read stays in the first-level cache (a multiple of four vectors). */
#define CHUNK 1024
/* Elements past the end of a buffer that a correlation may read or write (it rounds up to a block). */
#define SLACK (BLOCK_BYTES / (int64_t)sizeof(T))

/* Instruction sets, as dnnbind_isa() reports the best one this CPU runs (native.py picks the kernels'
 * names by it): each typed kernel is compiled once per set, named with its suffix. */
#define ISA_BASELINE 0    /* suffix _base: any CPU (SSE2 on x86-64), 16-byte vectors */
#define ISA_X86_64_V3 3   /* suffix _v3: AVX2 and FMA, 32-byte vectors */
#define ISA_X86_64_V4 4   /* suffix _v4: AVX-512 (F, BW, CD, DQ, VL), 64-byte vectors */

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(DNNBIND_BASELINE_ONLY)
#define DNNBIND_X86_LEVELS 1
#endif

#endif
