/* Which of the instruction sets the kernels are compiled for (dispatch.h) this CPU runs. */
#include "dispatch.h"

KERNEL int dnnbind_isa(void) {
#if DNNBIND_X86_LEVELS
    __builtin_cpu_init();
    if (__builtin_cpu_supports("x86-64-v4")) return ISA_X86_64_V4;
    if (__builtin_cpu_supports("x86-64-v3")) return ISA_X86_64_V3;
#endif
    return ISA_BASELINE;
}

/* The revision of the kernels' parameters (dnnbind.highlevel.cpu.native._SIGNATURES): dnnbind runs the
 * kernels only where it was written for the same one, since ctypes calls through whatever it is told.
 * Bump it with every change to a kernel's parameters, here and in native.py's INTERFACE. */
KERNEL int dnnbind_kernels_interface(void) { return 2; }

/* dnnbind_isa() in words, for reports. */
KERNEL const char *dnnbind_isa_name(void) {
    switch (dnnbind_isa()) {
    case ISA_X86_64_V4: return "x86-64-v4 (AVX-512)";
    case ISA_X86_64_V3: return "x86-64-v3 (AVX2, FMA)";
    default: return "baseline";
    }
}
