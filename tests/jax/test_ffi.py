"""The FFI plumbing under dnnbind.jax on the real XLA: handlers made from the generated XLA_FFI_Handler type,
zero-copy buffer views, typed attributes, errors through the API table, the version check, import isolation."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import jax
import jax.numpy as jnp

from childproc import run_python
from dnnbind.gen import xla_ffi as X
from dnnbind.jax import attrs as A
from dnnbind.jax import compat
from dnnbind.jax import frame as F


def _register(name: str, body) -> object:
    handler = F.handler(body)
    jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(ctypes.cast(handler, ctypes.c_void_p).value),
                                platform="cpu", api_version=1)
    return handler


def test_handler_reads_views_and_typed_attributes_and_writes_results():
    seen = {}

    def body(frame: F.Frame) -> None:
        x = F.host_view(frame.args[0], writable=False)
        seen["x"], seen["attrs"] = x.copy(), A.decode(frame.attrs)
        seen["writable"] = x.flags.writeable
        F.host_view(frame.rets[0], writable=True)[...] = x * 2

    keep = _register("dnnbind_test_double", body)
    kwargs = {"flag": True, "count": 3, "eps": 0.25, "mode": "lstm", "padding": ((1, 2), (3, 4)), "stride": None}
    x = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
    y = jax.jit(lambda x: jax.ffi.ffi_call("dnnbind_test_double", jax.ShapeDtypeStruct(x.shape, x.dtype))(
        x, **A.encode(kwargs)))(x)
    np.testing.assert_array_equal(np.asarray(y), 2 * np.asarray(x))
    np.testing.assert_array_equal(seen["x"], np.asarray(x))
    assert seen["attrs"] == {"flag": True, "count": 3, "eps": 0.25, "mode": "lstm", "padding": ((1, 2), (3, 4))}
    assert seen["writable"] is False
    del keep


def test_an_exception_comes_back_as_xlas_error_with_its_message():
    def body(frame: F.Frame) -> None:
        raise ValueError("x=(2, 3): dnnbind refuses this")

    keep = _register("dnnbind_test_refuse", body)
    call = jax.ffi.ffi_call("dnnbind_test_refuse", jax.ShapeDtypeStruct((2,), jnp.float32))
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"INVALID_ARGUMENT: ValueError: x=\(2, 3\): dnnbind refuses"):
        jax.block_until_ready(call(jnp.ones(2)))
    del keep


def test_an_interrupt_comes_back_as_a_cancelled_error_and_the_process_goes_on():
    """Ctrl-C while a handler runs (a KeyboardInterrupt raised in it) is XLA's CANCELLED error, not an
    exception escaping the callback, which left XLA an unset result and aborted the process."""
    def body(frame: F.Frame) -> None:
        raise KeyboardInterrupt

    keep = _register("dnnbind_test_interrupted", body)
    call = jax.ffi.ffi_call("dnnbind_test_interrupted", jax.ShapeDtypeStruct((2,), jnp.float32))
    with pytest.raises(jax.errors.JaxRuntimeError, match="CANCELLED: KeyboardInterrupt"):
        jax.block_until_ready(call(jnp.ones(2)))
    np.testing.assert_array_equal(np.asarray(jnp.ones(2) + 1), [2.0, 2.0])
    del keep


def test_host_view_is_no_copy():
    memory = (ctypes.c_float * 6)(*range(6))
    buffer = F.Buffer(ctypes.addressof(memory), (2, 3), np.dtype(np.float32))
    view = F.host_view(buffer, writable=True)
    memory[4] = 40.0
    assert view[1, 1] == 40.0
    view[0, 0] = -1.0
    assert memory[0] == -1.0
    assert F.host_view(F.Buffer(0, (0, 3), np.dtype(np.float32)), True).shape == (0, 3)


def test_metadata_query_gets_the_generated_api_version():
    metadata = X.XLA_FFI_Metadata(X.XLA_FFI_Metadata_STRUCT_SIZE)
    extension = X.XLA_FFI_Metadata_Extension(
        X.XLA_FFI_Extension_Base(X.XLA_FFI_Metadata_Extension_STRUCT_SIZE, X.XLA_FFI_Extension_Metadata, None),
        ctypes.pointer(metadata))
    frame = X.XLA_FFI_CallFrame(X.XLA_FFI_CallFrame_STRUCT_SIZE,
                                ctypes.cast(ctypes.pointer(extension), ctypes.POINTER(X.XLA_FFI_Extension_Base)))
    assert F.answer_metadata(ctypes.pointer(frame))
    assert (metadata.api_version.major_version, metadata.api_version.minor_version) == (
        X.XLA_FFI_API_MAJOR, X.XLA_FFI_API_MINOR)
    assert not F.answer_metadata(ctypes.pointer(X.XLA_FFI_CallFrame(X.XLA_FFI_CallFrame_STRUCT_SIZE, None)))


def test_version_check_names_both_versions():
    assert compat.installed_api_version() == (X.XLA_FFI_API_MAJOR, X.XLA_FFI_API_MINOR)
    assert compat.problem(compat.installed_api_version(), "0.10.2") is None
    newer = compat.problem((X.XLA_FFI_API_MAJOR, X.XLA_FFI_API_MINOR + 1), "0.11.0")   # structs may differ
    assert newer is not None and "jaxlib 0.11.0" in newer
    message = compat.problem((X.XLA_FFI_API_MAJOR + 1, 0), "9.9.9")
    assert message is not None and "jaxlib 9.9.9" in message and f"{X.XLA_FFI_API_MAJOR + 1}.0" in message
    assert f"{X.XLA_FFI_API_MAJOR}.{X.XLA_FFI_API_MINOR}" in message and X.SOURCES["jaxlib"] in message


def test_attributes_refuse_what_cannot_travel():
    with pytest.raises(TypeError, match=r"lengths=\[1, None\]"):
        A.encode({"lengths": [1, None]})
    with pytest.raises(TypeError, match="window="):
        A.encode({"window": object()})
    tree = A.tree([1, [(1, 1, None, 1)], None])
    assert A.fill(tree, ["x", "a", "b", "c"]) == ["x", [("a", "b", None, "c")], None]


def test_import_dnnbind_never_imports_jax_and_dnnbind_jax_changes_nothing_else():
    result = run_python("""
        import sys
        import dnnbind, dnnbind.gen.xla_ffi
        assert "jax" not in sys.modules and "jaxlib" not in sys.modules, "import dnnbind imported jax"
        import jax
        before = jax.config.jax_enable_x64, jax.config.jax_default_matmul_precision
        import dnnbind.jax
        assert (jax.config.jax_enable_x64, jax.config.jax_default_matmul_precision) == before
        print("ok")
        """)
    assert result.stdout.strip() == "ok", result.stderr


def test_every_op_is_a_jax_function_with_the_public_ops_arguments():
    import inspect

    import dnnbind
    import dnnbind.jax as dj
    from dnnbind.highlevel.specs import OP_NAMES
    assert set(OP_NAMES) <= set(dj.__all__)
    for op in OP_NAMES:
        ours, public = inspect.signature(getattr(dj, op)), inspect.signature(getattr(dnnbind, op))
        assert list(ours.parameters.values()) == list(public.parameters.values()), op
        assert ours.return_annotation is inspect.Signature.empty


def test_importing_against_another_ffi_api_fails_naming_both_versions():
    """Bindings generated for FFI API 0.2 (jaxlib 0.8.1's header, whose XLA_FFI_State_*_Args differ) refuse the
    installed jaxlib at import, before any handler could misread a struct."""
    result = run_python("""
        import dnnbind.gen.xla_ffi as X
        X.XLA_FFI_API_MINOR, X.SOURCES = X.XLA_FFI_API_MINOR - 1, {"jaxlib": "0.8.1"}
        try:
            import dnnbind.jax
        except ImportError as exc:
            print(exc)
        """)
    import jaxlib
    assert result.stdout.startswith(f"jaxlib {jaxlib.__version__} has XLA FFI API "
                                    f"{X.XLA_FFI_API_MAJOR}.{X.XLA_FFI_API_MINOR}, but dnnbind.jax was generated for "
                                    f"FFI API {X.XLA_FFI_API_MAJOR}.{X.XLA_FFI_API_MINOR - 1} (jaxlib 0.8.1)"), \
        result.stdout + result.stderr
