"""Host-side MIOpen calls through the generated module against the real libMIOpen 3.4 (Debian's),
run in a child process under Debian's dynamic loader (see tests/miopen_runner.py)."""
from __future__ import annotations

import json

from header_state import header_moved


def last_json(stdout: str):
    return json.loads(stdout.strip().splitlines()[-1])


def test_version_and_create_without_device(miopen_run):
    result = miopen_run("""
        import ctypes, json
        from dnnbind import MiopenError
        from dnnbind.gen import miopen
        handle = miopen.miopenHandle_t()
        try:
            miopen.miopenCreate(ctypes.byref(handle))
            error = None
        except MiopenError as exc:
            error = [exc.status.name, int(exc.status), exc.function]
        print(json.dumps({"version": list(miopen.library_version()), "header": miopen.HEADER_VERSION,
                          "error": error}))
        """)
    facts = last_json(result.stdout)
    # the library is the one `make headers` got: the pinned 3.4.0 unless Debian moved on
    assert facts["version"] == [int(v) for v in facts["header"].split(".")] or header_moved("miopen")
    assert facts["header"] == "3.4.0"
    assert facts["error"] == ["miopenStatusUnknownError", 7, "miopenCreate"]
    assert "No device" in result.stderr          # MIOpen prints its reason itself


def test_descriptors_and_output_dimensions(miopen_run):
    result = miopen_run("""
        import json
        from ctypes import byref, c_int, c_size_t
        import numpy as np
        from dnnbind.gen import miopen as m

        def make(create, kind):
            handle = kind(); create(byref(handle)); return handle

        x = make(m.miopenCreateTensorDescriptor, m.miopenTensorDescriptor_t)
        w = make(m.miopenCreateTensorDescriptor, m.miopenTensorDescriptor_t)
        m.miopenSet4dTensorDescriptor(x, m.miopenFloat, 2, 8, 32, 30)
        m.miopenSetTensorDescriptor(w, m.miopenFloat, 4, [12, 2, 3, 5], None)
        dtype = c_int(); dims = np.zeros(4, np.int32); strides = np.zeros(4, np.int32)
        m.miopenGetTensorDescriptor(x, byref(dtype), dims, strides)
        size = c_size_t(); m.miopenGetTensorNumBytes(x, byref(size))

        conv = make(m.miopenCreateConvolutionDescriptor, m.miopenConvolutionDescriptor_t)
        m.miopenInitConvolutionNdDescriptor(conv, 2, [1, 2], [2, 1], [1, 1], m.miopenConvolution)
        m.miopenSetConvolutionGroupCount(conv, 4)
        groups = c_int(); m.miopenGetConvolutionGroupCount(conv, byref(groups))
        n_out = c_int(); out = np.zeros(4, np.int32)
        m.miopenGetConvolutionNdForwardOutputDim(conv, x, w, byref(n_out), out)

        pool = make(m.miopenCreatePoolingDescriptor, m.miopenPoolingDescriptor_t)
        m.miopenSet2dPoolingDescriptor(pool, m.miopenPoolingMax, 2, 2, 0, 0, 2, 2)
        m.miopenSetPoolingIndexType(pool, m.miopenIndexUint16)
        pn, pc, ph, pw = c_int(), c_int(), c_int(), c_int()
        m.miopenGetPoolingForwardOutputDim(pool, x, byref(pn), byref(pc), byref(ph), byref(pw))
        y = make(m.miopenCreateTensorDescriptor, m.miopenTensorDescriptor_t)
        m.miopenSet4dTensorDescriptor(y, m.miopenFloat, pn.value, pc.value, ph.value, pw.value)
        workspace = c_size_t(); m.miopenPoolingGetWorkSpaceSizeV2(pool, y, byref(workspace))

        act = make(m.miopenCreateActivationDescriptor, m.miopenActivationDescriptor_t)
        m.miopenSetActivationDescriptor(act, m.miopenActivationTANH, 1.0, 1.0, 0.0)
        mode, a, b, g = c_int(), *[__import__("ctypes").c_double() for _ in range(3)]
        m.miopenGetActivationDescriptor(act, byref(mode), byref(a), byref(b), byref(g))

        bn = make(m.miopenCreateTensorDescriptor, m.miopenTensorDescriptor_t)
        m.miopenDeriveBNTensorDescriptor(bn, x, m.miopenBNSpatial)
        bn_dims = np.zeros(4, np.int32); m.miopenGetTensorDescriptor(bn, byref(dtype), bn_dims, strides)
        for d in (x, w, y, bn):
            m.miopenDestroyTensorDescriptor(d)
        m.miopenDestroyConvolutionDescriptor(conv); m.miopenDestroyPoolingDescriptor(pool)
        m.miopenDestroyActivationDescriptor(act)
        print(json.dumps({"dims": dims.tolist(), "bytes": size.value, "groups": groups.value,
                          "conv_out": out[:n_out.value].tolist(), "pool_out": [pn.value, pc.value, ph.value, pw.value],
                          "pool_workspace": workspace.value, "act": [mode.value == m.miopenActivationTANH, a.value, b.value],
                          "bn": bn_dims.tolist()}))
        """)
    facts = last_json(result.stdout)
    assert facts["dims"] == [2, 8, 32, 30] and facts["bytes"] == 2 * 8 * 32 * 30 * 4
    assert facts["groups"] == 4
    # pad (1, 2), stride (2, 1), dilation 1, kernel 3x5: floor((32+2-3)/2)+1, floor((30+4-5)/1)+1
    assert facts["conv_out"] == [2, 12, 16, 30]
    assert facts["pool_out"] == [2, 8, 16, 15]
    assert facts["pool_workspace"] == 2 * 8 * 16 * 15 * 2      # one uint16 index per output element
    assert facts["act"] == [True, 1.0, 1.0]
    assert facts["bn"] == [1, 8, 1, 1]


def test_pointer_misuse_is_refused_before_the_call(miopen_run):
    result = miopen_run("""
        import ctypes, json
        import numpy as np
        from dnnbind.gen import miopen as m

        class FakeDeviceArray:
            __cuda_array_interface__ = {"data": (0x7F000000, False), "shape": (4,), "typestr": "<f4", "version": 3}

        desc = m.miopenTensorDescriptor_t(); m.miopenCreateTensorDescriptor(ctypes.byref(desc))
        m.miopenSet4dTensorDescriptor(desc, m.miopenFloat, 1, 1, 2, 2)
        conv = m.miopenConvolutionDescriptor_t(); m.miopenCreateConvolutionDescriptor(ctypes.byref(conv))
        cases = {
            "host array as device x": lambda: m.miopenConvolutionForward(None, ctypes.byref(ctypes.c_float(1)), desc,
                np.zeros(4, np.float32), desc, None, conv, 0, ctypes.byref(ctypes.c_float(0)), desc, None, None, 0),
            "device array as host alpha": lambda: m.miopenConvolutionForward(None, FakeDeviceArray(), desc, None,
                desc, None, conv, 0, None, desc, None, None, 0),
            "int for size_t out": lambda: m.miopenGetTensorNumBytes(desc, ctypes.byref(ctypes.c_int())),
            "wrong handle kind": lambda: m.miopenSet4dTensorDescriptor(conv, m.miopenFloat, 1, 1, 1, 1),
            "negative byte size": lambda: m.miopenConvolutionForward(None, None, desc, None, desc, None, conv, 0,
                None, desc, None, None, -1),
        }
        out = {}
        for name, call in cases.items():
            try:
                call(); out[name] = None
            except Exception as exc:
                out[name] = [type(exc).__name__, isinstance(exc, TypeError), isinstance(exc, ctypes.ArgumentError), str(exc)]
        print(json.dumps(out))
        """)
    out = last_json(result.stdout)
    assert out["host array as device x"][1:3] == [True, True]
    assert out["host array as device x"][3] == ("miopenConvolutionForward: parameter 'x' needs device memory, "
                                                 "got numpy.ndarray (host memory)")
    assert "parameter 'alpha' cannot take the host address of a __main__.FakeDeviceArray" in out["device array as host alpha"][3]
    assert "parameter 'numBytes'" in out["int for size_t out"][3]
    assert out["wrong handle kind"][2] is True and "parameter 'tensorDesc'" in out["wrong handle kind"][3]
    assert "parameter 'workSpaceSize' needs a non-negative byte count, got -1" in out["negative byte size"][3]
