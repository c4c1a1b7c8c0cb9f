/* Includes KERNELS (a typed kernel header) once per instruction set and element type. The header
 * names its functions NAME(f), sizes its vectors by VECTOR_BYTES and has ITYPE, the signed integer of
 * T's width. */
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)

#if DNNBIND_X86_LEVELS
#pragma GCC push_options
#pragma GCC target("arch=x86-64-v4,prefer-vector-width=512")
#define VECTOR_BYTES 64
#define T float
#define ITYPE int32_t
#define NAME(f) CAT(f, _f32_v4)
#include KERNELS
#undef T
#undef ITYPE
#undef NAME
#define T double
#define ITYPE int64_t
#define NAME(f) CAT(f, _f64_v4)
#include KERNELS
#undef T
#undef ITYPE
#undef NAME
#undef VECTOR_BYTES
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("arch=x86-64-v3")
#define VECTOR_BYTES 32
#define T float
#define ITYPE int32_t
#define NAME(f) CAT(f, _f32_v3)
#include KERNELS
#undef T
#undef ITYPE
#undef NAME
#define T double
#define ITYPE int64_t
#define NAME(f) CAT(f, _f64_v3)
#include KERNELS
#undef T
#undef ITYPE
#undef NAME
#undef VECTOR_BYTES
#pragma GCC pop_options
#endif

#define VECTOR_BYTES 16
#define T float
#define ITYPE int32_t
#define NAME(f) CAT(f, _f32_base)
#include KERNELS
#undef T
#undef ITYPE
#undef NAME
#define T double
#define ITYPE int64_t
#define NAME(f) CAT(f, _f64_base)
#include KERNELS
#undef T
#undef ITYPE
#undef NAME
#undef VECTOR_BYTES
