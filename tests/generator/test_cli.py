"""The generator's command line answers a user's mistake with one line and exit status 2."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from generator import __main__ as cli

ROOT = Path(__file__).resolve().parents[2]


def _error_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"python -m generator {argv[0]}: error: ")
    return lines[0]


def test_unknown_library_in_a_fresh_process_is_one_line_and_status_2():
    result = subprocess.run([sys.executable, "-m", "generator", "generate", "cudnnn"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == "python -m generator generate: error: unknown library 'cudnnn'; valid: cudnn, miopen, xla_ffi\n"


@pytest.mark.parametrize("argv", [["report", "miopen", "cudnnn"], ["check", "CUDNN"], ["headers", "rocm"],
                                  ["diff", "cudnnn", "--old", "pinned"]])
def test_every_command_names_the_valid_libraries(capsys, argv):
    line = _error_line(capsys, argv)
    assert f"unknown library {argv[-1] if argv[0] != 'diff' else argv[1]!r}; valid: cudnn, miopen" in line


def test_headers_directory_that_does_not_exist(capsys, tmp_path):
    line = _error_line(capsys, ["generate", "cudnn", "--headers", str(tmp_path / "nowhere")])
    assert f"--headers '{tmp_path / 'nowhere'}' is not a directory" in line


def test_headers_directory_without_the_headers(capsys, tmp_path):
    line = _error_line(capsys, ["report", "cudnn", "--headers", str(tmp_path)])
    assert "cuDNN header cudnn.h not found" in line and "make headers" in line


@pytest.mark.parametrize("spec", ["nine", "9.x", str(Path("/nonexistent/include"))])
def test_diff_refuses_what_is_not_a_version_or_directory_before_downloading(capsys, spec):
    line = _error_line(capsys, ["diff", "cudnn", "--old", spec])
    assert f"{spec!r} is not a directory or a version" in line
    assert "valid for cudnn: 'pinned', a headers directory, a release such as 9.1.1.17, or package==version" in line


def test_diff_refuses_a_debian_suite_that_does_not_exist(capsys):
    if cli.debian_suites() is None:
        pytest.skip("no /usr/share/distro-info/debian.csv: apt decides whether a suite exists")
    line = _error_line(capsys, ["diff", "miopen", "--old", "experimentl"])
    assert "'experimentl' is not a directory or a Debian suite" in line
    assert "valid for miopen: 'pinned', a headers directory, or a Debian suite (sid, unstable, experimental" in line
    assert {"sid", "experimental", "unstable", "trixie"} <= cli.debian_suites()


def test_diff_new_side_is_checked_too(capsys):
    line = _error_line(capsys, ["diff", "cudnn", "--old", "pinned", "--new", "latest"])
    assert "'latest' is not a directory or a version" in line


def test_one_line_joins_a_tools_message():
    pip_text = ("no wheel found on PyPI:\n  nvidia-cudnn-cu13==1.2.3: ERROR: No matching distribution found for "
                "nvidia-cudnn-cu13==1.2.3\n")
    assert cli.one_line(RuntimeError(pip_text)) == \
        "no wheel found on PyPI; nvidia-cudnn-cu13==1.2.3: No matching distribution found for nvidia-cudnn-cu13==1.2.3"
    apt_text = "apt-get -q update failed (100):\nE: The repository 'x nosuchsuite Release' does not have a Release file."
    assert cli.one_line(RuntimeError(apt_text)) == \
        "apt-get -q update failed (100); The repository 'x nosuchsuite Release' does not have a Release file."


def test_a_refused_wheel_ends_headers_in_one_line_with_status_1(capsys, monkeypatch, tmp_path):
    from generator import config as cfg
    pinned = cfg.load_all()["cudnn"]["packages"][0]
    monkeypatch.setattr(cfg, "CACHE_DIR", tmp_path)
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / next(iter(pinned["sha256"]))).write_bytes(b"not the pinned wheel")
    assert cli.main(["headers", "cudnn"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("python -m generator headers: error: ")
    assert "does not match the pin" in err[0] and "refusing it" in err[0]


def test_a_bug_in_the_generator_keeps_its_traceback(monkeypatch):
    """Only the known failures (InputProblem, usage mistakes) become messages; anything else is a bug and
    propagates with its traceback."""
    from generator import pipeline

    def broken(library, headers_dir=None):
        raise KeyError("a bug")
    monkeypatch.setattr(pipeline, "build", broken)
    with pytest.raises(KeyError, match="a bug"):
        cli.main(["report", "cudnn"])
