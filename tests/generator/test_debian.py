"""generator.debian's pure logic: Debian version order, index parsing, pin resolution, manifest checks.

The package index is text written here (what ``apt-cache show`` prints); apt itself is not involved.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from generator import debian  # noqa: E402

INDEX = """\
Package: libmiopen-dev
Source: miopen (6.4.3+dfsg-1)
Version: 6.4.3+dfsg-1+b1
Architecture: amd64
Depends: libmiopen1 (= 6.4.3+dfsg-1+b1)
Size: 61216
Description: AMD's Machine Intelligence Library - headers
 MIOpen is a GPU-accelerated library
 .
 for machine learning primitives.

Package: libmiopen1
Version: 6.4.4-2
Architecture: amd64
Depends: libamdhip64-6 (>= 6.1.2), libboost-filesystem1.91.0 (>= 1.91.0), libc6 (>= 2.38) | libc6.1, libzstd1:any
Size: 4507800

Package: libmiopen1
Version: 6.4.4-1
Architecture: amd64
Size: 4500000

Package: zlib1g
Version: 1:1.3.dfsg+really1.3.2-4
Architecture: amd64
Size: 92424
"""


@pytest.fixture
def index():
    return debian.parse_index(INDEX)


@pytest.mark.parametrize("a, b, sign", [
    ("1.0", "1.0", 0),
    ("1.0~rc1", "1.0", -1),
    ("1.0", "1.0+b1", -1),
    ("1.0a", "1.0", 1),
    ("6.4.10-1", "6.4.9-1", 1),
    ("6.4.3+dfsg-1+b1", "6.4.3+dfsg-1", 1),
    ("6.4.3+dfsg-1+b2", "6.4.3+dfsg-1+b10", -1),
    ("1:0.1", "2.0", 1),
    ("1.0-1", "1.0-1~bpo1", 1),
    ("2.43-7", "2.43-10", -1),
    ("0.196-1", "0.196", 1),
    ("1.0.8-6+b2", "1.0.8-6.1", -1),
])
def test_compare_versions(a, b, sign):
    cmp = debian.compare_versions(a, b)
    assert (cmp > 0) - (cmp < 0) == sign
    assert (-debian.compare_versions(b, a) > 0) - (-debian.compare_versions(b, a) < 0) == sign
    if shutil.which("dpkg"):  # the real reference, when this machine has it
        op = {-1: "lt", 0: "eq", 1: "gt"}[sign]
        assert subprocess.run(["dpkg", "--compare-versions", a, op, b]).returncode == 0


def test_newest():
    assert debian.newest(["6.4.4-1", "6.4.4-2", "6.4.4~rc-9"]) == "6.4.4-2"


def test_parse_index(index):
    assert sorted(index) == ["libmiopen-dev", "libmiopen1", "zlib1g"]
    assert [s["Version"] for s in index["libmiopen1"]] == ["6.4.4-2", "6.4.4-1"]
    dev = index["libmiopen-dev"][0]
    assert dev["Size"] == "61216"
    assert dev["Description"].endswith("for machine learning primitives.")
    assert debian.depends_names(index["libmiopen1"][0]) == [
        "libamdhip64-6", "libboost-filesystem1.91.0", "libc6", "libc6.1", "libzstd1"]


def test_pinned_version_present_is_taken(index):
    choice, message = debian.choose("libmiopen-dev", "6.4.3+dfsg-1+b1", index, "sid")
    assert (choice.name, choice.version, choice.moved, message) == ("libmiopen-dev", "6.4.3+dfsg-1+b1", False, None)
    older, message = debian.choose("libmiopen1", "6.4.4-1", index, "sid")
    assert older.version == "6.4.4-1" and message is None  # the pin wins even when a newer one exists


def test_pinned_version_gone_takes_newest_and_says_so(index):
    choice, message = debian.choose("libmiopen1", "6.4.3+dfsg-1+b1", index, "sid")
    assert (choice.name, choice.version, choice.moved) == ("libmiopen1", "6.4.4-2", True)
    assert message == "pinned libmiopen1 6.4.3+dfsg-1+b1 is gone from sid; took 6.4.4-2 instead"


def test_renamed_library_package_is_followed(index):
    assert debian.name_stem("libboost-filesystem1.90.0") == "libboost-filesystem"
    assert debian.name_stem("libelf1t64") == "libelf"
    assert debian.rename_candidates("libboost-filesystem1.90.0", index) == ["libboost-filesystem1.91.0"]
    index = {**index, **debian.parse_index("Package: libboost-filesystem1.91.0\nVersion: 1.91.0-1\n")}
    choice, message = debian.choose("libboost-filesystem1.90.0", "1.90.0-6.1+b1", index, "sid")
    assert (choice.name, choice.version) == ("libboost-filesystem1.91.0", "1.91.0-1")
    assert message == ("pinned libboost-filesystem1.90.0 1.90.0-6.1+b1 is gone from sid; "
                       "took libboost-filesystem1.91.0 1.91.0-1 instead (renamed)")


def test_package_without_successor_fails_plainly(index):
    with pytest.raises(debian.DebianFetchError, match="pinned librocblas4 6.4.4-4 is gone from sid and no successor"):
        debian.choose("librocblas4", "6.4.4-4", index, "sid")


def test_deb_filename_escapes_epoch(index):
    choice, _ = debian.choose("zlib1g", "1:1.3.dfsg+really1.3.2-4", index, "sid")
    assert debian.deb_filename(choice) == "zlib1g_1%3a1.3.dfsg+really1.3.2-4_amd64.deb"


def test_moves_report_what_changed():
    manifest = {"packages": {
        "libmiopen-dev": {"role": "header", "pinned": "6.4.3-1", "name": "libmiopen-dev", "version": "6.4.4-1"},
        "libc6": {"role": "runtime", "pinned": "2.43-7", "name": "libc6", "version": "2.43-7"},
        "libboost-atomic1.90.0": {"role": "runtime", "pinned": "1.90.0-1", "name": "libboost-atomic1.91.0",
                                  "version": "1.91.0-1"}}}
    assert debian.moves(manifest, role="header") == ["libmiopen-dev moved from 6.4.3-1 to 6.4.4-1"]
    assert debian.moves(manifest)[1] == "libboost-atomic1.90.0 moved from 1.90.0-1 to libboost-atomic1.91.0 1.91.0-1"


def test_parse_sources_both_formats():
    deb822 = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main

Types: deb-src
URIs: http://src.example/debian
Suites: bookworm

Types: deb
URIs: http://off.example/debian
Suites: bookworm
Enabled: no
"""
    assert debian.parse_sources(deb822) == [("http://mirror.example/debian", ["bookworm", "bookworm-updates"])]
    one_line = "# deb http://old.example/debian sid main\ndeb [arch=amd64] http://m.example/debian/ bookworm main\n"
    assert debian.parse_sources(one_line) == [("http://m.example/debian/", ["bookworm"])]


def test_debian_mirror_skips_security_and_honours_override(tmp_path, monkeypatch):
    monkeypatch.delenv("DNNBIND_DEBIAN_MIRROR", raising=False)
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "a.sources").write_text(
        "Types: deb\nURIs: http://m.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://m.example/debian/\nSuites: bookworm\n")
    assert debian.debian_mirror(tmp_path) == "http://m.example/debian"
    monkeypatch.setenv("DNNBIND_DEBIAN_MIRROR", "http://other.example/debian/")
    assert debian.debian_mirror(tmp_path) == "http://other.example/debian"


def test_is_current_needs_matching_request_and_files(tmp_path):
    config = {"suite": "sid", "entry": "miopen/miopen.h", "include_dirs": ["usr/include"],
              "sonames": ["libMIOpen.so.1"], "header_packages": {"libmiopen-dev": "1-1"},
              "runtime_packages": {"libmiopen1": "1-1"}}
    root = debian.root_dir(config, tmp_path)
    assert root == tmp_path / "debian" / "sid" / "root"
    manifest = {"request": debian._request(config)}
    assert not debian.is_current(config, manifest, root)
    (root / "usr/include/miopen").mkdir(parents=True)
    (root / "usr/include/miopen/miopen.h").touch()
    (root / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (root / "usr/lib/x86_64-linux-gnu/libMIOpen.so.1").touch()
    assert debian.is_current(config, manifest, root)
    assert not debian.is_current({**config, "runtime_packages": {"libmiopen1": "2-1"}}, manifest, root)
    assert not debian.is_current(config, None, root)
