"""Shared fixtures: the real vendor libraries, and the runner for MIOpen under Debian's loader."""
from __future__ import annotations

import importlib.util
import subprocess
import textwrap

import pytest

from miopen_runner import DebianRootMissing, find_root, run_under_debian_loader

# The PyTorch adapter's tests need PyTorch (make setup installs it); elsewhere they are not collected.
collect_ignore = [] if importlib.util.find_spec("torch") else ["torch_adapter"]
# dnnbind.jax's tests need JAX (make setup installs it through the jax extra)
collect_ignore += [] if importlib.util.find_spec("jax") else ["jax"]


@pytest.fixture(scope="session")
def miopen_run():
    """Run Python code in a child process that has the real libMIOpen.so.1 loaded.

    Returns ``run(code) -> CompletedProcess``. Skips only when ``make headers`` never ran.
    """
    try:
        find_root()
    except DebianRootMissing as exc:
        pytest.skip(str(exc))

    def run(code: str, check: bool = True) -> subprocess.CompletedProcess:
        result = run_under_debian_loader(textwrap.dedent(code))
        if check and result.returncode != 0:
            raise AssertionError(f"child exited with {result.returncode}:\n{result.stdout}\n{result.stderr}")
        return result
    return run
