"""Handles passed by value: every one the vendor does not document as optional is refused as None/NULL in Python.

Several library functions dereference a NULL descriptor without checking it (cudnnSetLRNDescriptor,
cudnnDeriveBNTensorDescriptor, cudnnFusedOpsExecute, MIOpen's softmax, activation, LRN, RNN and convolution
calls, whose logging reads the descriptor first), and a destroyed handle is cleared to NULL, so a use after
destroy reaches them the same way. The sweep below calls every generated function once per such handle with
that handle None, in a child interpreter against the real library: a call that reaches the library (a
library error, success or a crash) fails the test.
"""
from __future__ import annotations

import json

import pytest

from childproc import run_python

SWEEP = r'''
import ctypes, json, re, sys, warnings
warnings.simplefilter("ignore")
from dnnbind.gen import LIB as m
from dnnbind.runtime.errors import DnnArgumentError, DnnRangeError

CONTEXT = {"cudnnHandle_t", "miopenHandle_t"}          # checked by the library itself: stays nullable
handles = {name for name, value in vars(m).items()
           if isinstance(value, type) and issubclass(value, ctypes._Pointer) and name.endswith("_t")}
PROTOTYPE = re.compile(r"^\w+ (\w+)\((.*)\)$")
outcomes = {}
for name, fn in sorted(vars(m).items()):
    doc = getattr(fn, "__doc__", None) or ""
    match = PROTOTYPE.match(doc.split("\n", 1)[0])
    if not callable(fn) or not match or match.group(1) != name or match.group(2) in ("", "void"):
        continue
    optional = re.search(r"Handles that may be None \(NULL\), as the vendor documents: (.*)\.", doc)
    optional = set(optional.group(1).split(", ")) if optional else set()
    declared = [p.strip().rsplit(" ", 1) for p in match.group(2).split(",")]
    args, required = [], []
    for ctype, pname in declared:
        bare = ctype.replace("const ", "").strip()
        if "*" in ctype or "[" in pname:
            args.append(None)
        elif bare in handles:
            args.append(None)
            if bare not in CONTEXT and pname not in optional and "Destroy" not in name:
                required.append(pname)
        elif bare in ("float", "double"):
            args.append(0.0)
        else:
            args.append(0)
    for pname in required:
        try:
            fn(*args)
            outcomes[f"{name}.{pname}"] = "reached the library: no error"
        except (DnnArgumentError, DnnRangeError) as exc:
            outcomes[f"{name}.{pname}"] = "refused" if "needs a created handle" in str(exc) else "refused: " + str(exc)
        except Exception as exc:
            outcomes[f"{name}.{pname}"] = f"reached the library: {type(exc).__name__}: {exc}"
        break                        # every handle is None here: once per function is the same call
print(json.dumps(outcomes))
'''

#: functions a sweep of every function found crashing on a NULL descriptor before these checks existed
CRASHED_BEFORE = {
    "cudnn": ["cudnnSetLRNDescriptor", "cudnnDeriveBNTensorDescriptor", "cudnnFusedOpsExecute",
              "cudnnGetReductionWorkspaceSize", "cudnnGetReductionIndicesSize", "cudnnGetCTCLossWorkspaceSize",
              "cudnnGetCTCLossWorkspaceSize_v8", "cudnnCTCLoss", "cudnnCTCLoss_v8", "cudnnTransformFilter"],
    "miopen": ["miopenActivationForward", "miopenActivationBackward", "miopenSoftmaxForward_V2",
               "miopenSoftmaxBackward_V2", "miopenLRNForward", "miopenLRNBackward", "miopenConvolutionForward",
               "miopenConvolutionBackwardData", "miopenConvolutionForwardBias", "miopenConvolutionBackwardBias",
               "miopenRNNForwardTraining", "miopenRNNBackwardData", "miopenRNNBackwardWeights", "miopenRNNForward",
               "miopenReduceTensor", "miopenCTCLoss"],
}


def _sweep(run, library: str) -> dict[str, str]:
    result = run(SWEEP.replace("LIB", library))
    assert result.returncode == 0, f"the sweep crashed or failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def cudnn_outcomes() -> dict[str, str]:
    return _sweep(run_python, "cudnn")


@pytest.fixture(scope="module")
def miopen_outcomes(miopen_run) -> dict[str, str]:
    return _sweep(lambda code: miopen_run(code, check=False), "miopen")


def _check(outcomes: dict[str, str], library: str) -> None:
    reached = {case: outcome for case, outcome in outcomes.items() if outcome.startswith("reached")}
    assert not reached, reached
    assert len(outcomes) > 150                      # the sweep found the functions it is meant to call
    by_check = [case for case, outcome in outcomes.items() if outcome == "refused"]
    assert len(by_check) > 0.6 * len(outcomes)       # most by the handle check, the rest by an earlier check
    swept = {case.split(".")[0] for case in outcomes}
    assert set(CRASHED_BEFORE[library]) <= swept


def test_cudnn_never_gets_a_null_descriptor(cudnn_outcomes: dict[str, str]) -> None:
    _check(cudnn_outcomes, "cudnn")


def test_miopen_never_gets_a_null_descriptor(miopen_outcomes: dict[str, str]) -> None:
    _check(miopen_outcomes, "miopen")


NULL_CASES = r'''
from ctypes import byref
from dnnbind.gen import cudnn as c
from dnnbind.runtime.errors import DnnArgumentError
lrn = c.cudnnLRNDescriptor_t(); c.cudnnCreateLRNDescriptor(byref(lrn))
c.cudnnDestroyLRNDescriptor(lrn)
messages = []
for call in (lambda: c.cudnnSetLRNDescriptor(lrn, 5, 1e-4, 0.75, 2.0),         # used after destroy
             lambda: c.cudnnSetLRNDescriptor(None, 5, 1e-4, 0.75, 2.0),
             lambda: c.cudnnDeriveBNTensorDescriptor(c.cudnnTensorDescriptor_t(), None, 0)):
    try:
        call()
    except DnnArgumentError as exc:
        messages.append(str(exc))
rnn = c.cudnnRNNDescriptor_t(); c.cudnnCreateRNNDescriptor(byref(rnn))
c.cudnnSetRNNDescriptor_v8(rnn, 0, c.CUDNN_LSTM, c.CUDNN_RNN_DOUBLE_BIAS, c.CUDNN_UNIDIRECTIONAL, c.CUDNN_LINEAR_INPUT,
                           c.CUDNN_DATA_FLOAT, c.CUDNN_DATA_FLOAT, c.CUDNN_DEFAULT_MATH, 8, 8, 8, 1, None, 0)
messages.append("documented optional dropoutDesc=None accepted")
print("\n".join(messages))
'''


def test_null_and_destroyed_descriptors_are_named() -> None:
    result = run_python(NULL_CASES)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines == [
        "cudnnSetLRNDescriptor: parameter 'normDesc' is NULL; it needs a created handle (a successful destroy "
        "clears a handle to NULL, so this is also a handle used after destroying it)",
        "cudnnSetLRNDescriptor: parameter 'normDesc' is None; it needs a created handle (a successful destroy "
        "clears a handle to NULL, so this is also a handle used after destroying it)",
        "cudnnDeriveBNTensorDescriptor: parameter 'derivedBnDesc' is NULL; it needs a created handle (a successful "
        "destroy clears a handle to NULL, so this is also a handle used after destroying it)",
        "documented optional dropoutDesc=None accepted",
    ]
