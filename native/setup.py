"""The compiled parts of dnnbind, built as their own distribution (dnnbind-native, package dnnbind_native).

dnnbind itself is pure Python and picks each part up where it is importable (dnnbind/compiled.py):

* ``_kernels``: the cpu backend's C kernels (loaded with ctypes by dnnbind.highlevel.cpu.native); on x86-64
  with GCC each kernel is compiled three times, for AVX-512, for AVX2 with FMA and for any x86-64, and the
  library picks the best this CPU runs. No -ffast-math: the kernels must sum exactly what a float64
  computation sums (FMA contraction only rounds less).
* ``_values``: the generated wrappers' fast check of their integer and enum arguments (dnnbind.runtime.checks).
"""
from setuptools import Extension, setup

KERNELS = "src/dnnbind_native/csrc/kernels/"

setup(ext_modules=[Extension(
    "dnnbind_native._kernels",
    sources=[KERNELS + name for name in ("isa.c", "depthwise.c", "channels.c", "pool.c", "conv.c", "recurrent.c",
                                         "parallel.c", "pointwise.c", "softmax.c", "swaps.c", "products.c")],
    depends=[KERNELS + name for name in ("dispatch.h", "instantiate.h", "planes.h", "planes_typed.h",
                                         "depthwise_typed.h", "channels_typed.h", "pool_typed.h", "conv_typed.h",
                                         "vmath_typed.h", "recurrent_typed.h", "pointwise_typed.h", "softmax_typed.h",
                                         "swaps_typed.h", "sums_typed.h")],
    extra_compile_args=["-O3", "-std=c11", "-fvisibility=hidden", "-fno-math-errno", "-ffp-contract=fast",
                        "-fno-tree-loop-distribute-patterns", "-pthread"],
    extra_link_args=["-pthread"],
    libraries=["m"],
), Extension(
    "dnnbind_native._values",
    sources=["src/dnnbind_native/csrc/values.c"],
    extra_compile_args=["-O2"],
)])
