"""The generator's command-line steps on the real pinned headers: freshness, report, change summary."""
from __future__ import annotations

import pytest

from generator import __main__ as cli
from generator import pipeline
from header_state import skip_if_header_moved


@pytest.mark.parametrize("library", ["cudnn", "miopen", "xla_ffi"])
def test_committed_module_is_fresh_and_deterministic(library):
    skip_if_header_moved(library)
    first = pipeline.build(library)
    assert first.text == first.path.read_text()
    assert pipeline.build(library).text == first.text
    assert "/work/" not in first.text and ".cache" not in first.text


@pytest.mark.parametrize("library, title", [("cudnn", "cuDNN 9.28.1"), ("miopen", "MIOpen 3.4.0")])
def test_report_counts_and_zero_unclassified(library, title, capsys):
    skip_if_header_moved(library)
    assert cli.main(["report", library]) == 0
    out = capsys.readouterr().out
    assert out.startswith(title)
    assert "unclassified: 0" in out
    assert "pointer parameters by kind: device" in out


def test_describe_changes_lists_added_removed_and_changed():
    text = pipeline.build("cudnn").text
    fewer = text.replace("def cudnnGetVersion(", "def cudnnGetVersionRenamed(")
    altered = text.replace('"""cudnnStatus_t cudnnCreate(cudnnHandle_t * handle)',
                           '"""cudnnStatus_t cudnnCreate(cudnnHandle_t * handle, int flags)')
    summary = pipeline.describe_changes(text, fewer)
    assert "functions added: 1, removed: 1, changed: 0" in summary
    assert "+ size_t cudnnGetVersion(void)" in summary
    changed = pipeline.describe_changes(text, altered)
    assert "changed: 1" in changed and "-> cudnnStatus_t cudnnCreate(cudnnHandle_t * handle, int flags)" in changed
    assert pipeline.describe_changes(text, text) == "no change against the committed module"
