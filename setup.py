"""dnnbind's own C kernels for the CPU reference backend (src/dnnbind/highlevel/reference/csrc/, loaded
with ctypes by reference/native.py). Everything else about the package is in pyproject.toml.

The extension is optional: where it cannot be compiled the install goes on and the reference backend
runs its numpy paths. No -ffast-math: the kernels must sum exactly what a float64 computation sums
(FMA contraction only rounds less).
"""
from setuptools import Extension, setup

CSRC = "src/dnnbind/highlevel/reference/csrc/"

setup(ext_modules=[Extension(
    "dnnbind.highlevel.reference._kernels",
    sources=[CSRC + name for name in ("isa.c", "depthwise.c", "channels.c", "pool.c", "conv.c", "recurrent.c", "parallel.c", "gemm.c", "pointwise.c", "softmax.c", "columns.c", "filters.c")],
    depends=[CSRC + name for name in ("dispatch.h", "instantiate.h", "planes.h", "planes_typed.h", "depthwise_typed.h", "channels_typed.h", "pool_typed.h", "conv_typed.h", "vmath_typed.h", "recurrent_typed.h", "pointwise_typed.h", "softmax_typed.h", "cblas.h", "cblas_typed.h", "gemm_typed.h", "columns_typed.h", "filters_typed.h")],
    extra_compile_args=["-O3", "-std=c11", "-fvisibility=hidden", "-fno-math-errno", "-ffp-contract=fast",
                        "-fno-tree-loop-distribute-patterns", "-pthread"],
    extra_link_args=["-pthread"],
    libraries=["m"],
    optional=True,
), Extension(
    # the generated wrappers' fast check of their integer and enum arguments (dnnbind.runtime.checks);
    # optional like the kernels
    "dnnbind.runtime._values",
    sources=["src/dnnbind/runtime/csrc/values.c"],
    extra_compile_args=["-O2"],
    optional=True,
)])
