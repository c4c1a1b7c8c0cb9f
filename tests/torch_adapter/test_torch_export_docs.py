"""docs/torch_export.md shows what torch.export writes for a CNN and an LSTM on dnnbind.torch's layers:
the page equals what docs/torch_export.py writes now, and it shows typed calls only."""
from __future__ import annotations

import runpy
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "torch_export.md"


def test_the_export_page_is_what_the_script_writes():
    render = runpy.run_path(str(PAGE.with_suffix(".py")))["render"]
    text = render()
    assert PAGE.read_text() == text, "docs/torch_export.md is stale: run python docs/torch_export.py"
    assert "torch.ops.dnnbind.conv.default(x, p_features_0_weight, p_features_0_bias, [1, 1], [1, 1]" in text
    assert "torch.ops.dnnbind.rnn.default(x, [p_lstm_weight_ih_l0" in text
    assert "{" not in text.split("## ")[1] and "saves" not in text
