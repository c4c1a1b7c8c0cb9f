"""The real libMIOpen.so.1 from Debian, run under Debian's own loader (tests/miopen_runner.py).

Skipped, with the reason, only when ``make headers`` has not unpacked the packages.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from miopen_runner import DebianRootMissing, find_root, run_under_debian_loader  # noqa: E402

# Throwaway ctypes declarations for these checks only; the project's code uses the generated module.
PROBE = r"""
import ctypes as C, json, os, sys
lib = C.CDLL(os.environ["DNNBIND_MIOPEN_LIBRARY"])
lib.miopenGetErrorString.restype = C.c_char_p
out = {"prefix": sys.prefix}
v = [C.c_size_t() for _ in range(3)]
out["version_status"] = lib.miopenGetVersion(*map(C.byref, v))
out["version"] = [x.value for x in v]
h = C.c_void_p()
out["create"] = lib.miopenCreate(C.byref(h))
out["create_message"] = lib.miopenGetErrorString(out["create"]).decode()
x, w, pd, cd = C.c_void_p(), C.c_void_p(), C.c_void_p(), C.c_void_p()
st = [lib.miopenCreateTensorDescriptor(C.byref(x)), lib.miopenSet4dTensorDescriptor(x, 1, 2, 3, 32, 32),
      lib.miopenCreateTensorDescriptor(C.byref(w)), lib.miopenSet4dTensorDescriptor(w, 1, 8, 3, 3, 3),
      lib.miopenCreateConvolutionDescriptor(C.byref(cd)),
      lib.miopenInitConvolutionDescriptor(cd, 0, 1, 1, 2, 2, 1, 1), lib.miopenSetConvolutionGroupCount(cd, 1)]
o = [C.c_int() for _ in range(4)]
st.append(lib.miopenGetConvolutionForwardOutputDim(cd, x, w, *map(C.byref, o)))
p = [C.c_int() for _ in range(4)]
st += [lib.miopenCreatePoolingDescriptor(C.byref(pd)), lib.miopenSet2dPoolingDescriptor(pd, 0, 2, 2, 0, 0, 2, 2),
       lib.miopenGetPoolingForwardOutputDim(pd, x, *map(C.byref, p))]
out.update(host_status=st, conv=[a.value for a in o], pool=[a.value for a in p])
print("PROBE " + json.dumps(out), flush=True)
"""


@pytest.fixture(scope="module")
def root():
    try:
        return find_root()
    except DebianRootMissing as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def probe(root):
    proc = run_under_debian_loader(PROBE, timeout=120)
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("PROBE "))
    return json.loads(line[len("PROBE "):]), proc.stderr


def header_version(root) -> list[int]:
    text = (root.root / "usr/include/miopen/version.h").read_text()
    return [int(re.search(rf"#define MIOPEN_VERSION_{k}\s+(\d+)", text).group(1)) for k in ("MAJOR", "MINOR", "PATCH")]


def test_missing_cache_is_a_clear_error(tmp_path):
    with pytest.raises(DebianRootMissing, match="run `make headers`"):
        find_root(tmp_path)
    with pytest.raises(DebianRootMissing):
        run_under_debian_loader("print(1)", cache_dir=tmp_path)


def test_child_keeps_the_venv_numpy_and_dnnbind(root):
    proc = run_under_debian_loader(
        "import os, sys, numpy, dnnbind; print(sys.prefix); print(os.confstr('CS_GNU_LIBC_VERSION'))")
    assert proc.returncode == 0, proc.stderr
    prefix, libc = proc.stdout.split("\n")[:2]
    assert prefix == sys.prefix
    assert libc.startswith("glibc ")


def test_version_matches_the_unpacked_header(root, probe):
    out, _ = probe
    assert out["version_status"] == 0
    assert out["version"] == header_version(root)
    package = root.manifest().get("packages", {}).get("libmiopen1", {})
    if package and package["version"] == package["pinned"]:
        assert out["version"][:2] == [3, 4]  # the pinned MIOpen 3.4.x


def test_create_fails_without_a_device(probe):
    out, stderr = probe
    assert out["create"] == 7  # miopenStatusUnknownError
    assert out["create_message"] == "miopenStatusUnknownError"
    assert "No device" in stderr


def test_host_side_calls_work(probe):
    out, _ = probe
    assert out["host_status"] == [0] * len(out["host_status"])
    assert out["conv"] == [2, 8, 16, 16]
    assert out["pool"] == [2, 3, 16, 16]
