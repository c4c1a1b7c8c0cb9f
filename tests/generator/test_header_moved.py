"""When Debian's sid has moved past the pinned MIOpen, `make check-generated` says "header moved"
and passes, instead of failing CI for a reason outside the project (slow: needs Debian experimental's
MIOpen headers, which `make test-versions` downloads)."""
from __future__ import annotations

import json

import pytest

from generator import config as cfg
from generator import debian, pipeline, versions


@pytest.mark.slow
def test_check_reports_a_moved_header_without_failing(tmp_path, monkeypatch, capsys):
    newer = versions.resolve("miopen", "experimental", log=lambda line: None)
    sid = cfg.load_all()["miopen"]
    sid_manifest = debian.load_manifest(sid, cfg.CACHE_DIR)
    newer_manifest = debian.load_manifest({**sid, "suite": "experimental"}, cfg.CACHE_DIR)
    if newer.headers.entry.read_bytes() == (cfg.header_set("miopen").entry.read_bytes()):
        pytest.skip("Debian experimental has the pinned MIOpen headers")
    # A cache as `make headers` leaves it once the pins are gone from sid: it took the newer headers
    # and recorded, per package, the pin and what it got instead.
    moved_root = debian.root_dir(sid, tmp_path)
    moved_root.parent.mkdir(parents=True)
    moved_root.symlink_to(newer.root)
    packages = dict(sid_manifest["packages"])
    for name, entry in newer_manifest["packages"].items():
        if entry["role"] == "header":
            packages[name] = {**entry, "pinned": sid_manifest["packages"][name]["pinned"]}
    (moved_root.parent / "manifest.json").write_text(json.dumps({**sid_manifest, "packages": packages}))
    monkeypatch.setattr(cfg, "CACHE_DIR", tmp_path)

    assert pipeline.check("miopen") == 0
    out = capsys.readouterr().out
    assert "miopen: header moved from 3.4.0 to 3.5" in out and "run make generate" in out
    assert "libmiopen-dev moved from 6.4.3+dfsg-1+b1 to" in out
