"""``python -m dnnbind plans --device FILE.json``: plans built ahead of time, devicelessly, for a committed device
file and for a hand-written one (an NVIDIA L4, sm 8.9, not among the committed files)."""
from __future__ import annotations

import json

import deviceless_libs
from childproc import run_python
from highlevel.cudnn.graph.child import DEVICEPROPS

#: an NVIDIA L4's public properties (Ada, sm 8.9), in the form of tests/data/deviceprop/*.json
L4 = {"cudaDeviceId": 0, "deviceName": "NVIDIA L4", "deviceVer": 890, "driverVer": 13000, "isTccDriver": 0,
      "l2CacheSize": 50331648, "maxBlockSize": [1024, 1024, 64], "maxCtasPerSM": 24,
      "maxGridSize": [2147483647, 65535, 65535], "maxRegistersPerSM": 65536, "maxSharedMemoryPerBlock": 49152,
      "maxSharedMemoryPerBlockOptin": 101376, "maxThreadsPerBlock": 1024, "maxThreadsPerSM": 1536,
      "memClockRateKHz": 6251000, "memoryBusWidth": 192, "multiProcessorCount": 58, "pciDeviceId": 0,
      "regsPerBlock": 65536, "reservedSharedMemoryPerBlock": 1024, "smClockRateKHz": 2040000, "supportCoopLaunch": 1,
      "totalGlobalMem": 23034331136, "warpSize": 32}
OPS = {"conv_forward", "conv_backward_data", "conv_backward_filter", "conv_bias_activation", "layer_norm_forward",
       "layer_norm_backward", "pool_forward[max]", "pool_forward[mean]", "pool_backward[max]", "pool_backward[mean]",
       "pool_forward[mean_exclude_pad]", "pool_backward[mean_exclude_pad]"}


def _plans(*args: str, timeout: float = 600, env: dict[str, str] | None = None):
    return run_python(f"import sys; from dnnbind.__main__ import main; sys.exit(main({['plans', *args]!r}))",
                      env=deviceless_libs.child_env() if env is None else env, timeout=timeout)


def test_a_device_file_not_in_the_repository(tmp_path):
    device = tmp_path / "l4.json"
    device.write_text(json.dumps(L4))
    result = _plans("--device", str(device), "--json", "--dtype", "bfloat16")    # every dtype: 90 s here
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert {r["op"] for r in rows} == OPS
    assert {(r["dtype"], r["layout"]) for r in rows} == {("bfloat16", "NCHW"), ("bfloat16", "NHWC")}
    assert all(r["plans"] >= 1 and r["configs"] >= r["plans"] and r["workspace"] >= 0 for r in rows), \
        [r for r in rows if not r["plans"]]


def test_table_and_cache_dir(tmp_path):
    device = DEVICEPROPS[-1]
    result = _plans("--device", str(device), "--dtype", "float16", "--layout", "NHWC", "--cache-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    name = json.loads(device.read_text())["deviceName"]
    assert lines[0].startswith(f"device: {name} (sm ")
    assert lines[1] == "settings: deterministic=False, workspace_limit=1073741824, allow_tf32=False"
    assert lines[2].split() == ["op", "dtype", "layout", "shape", "engine", "configs", "plans", "built", "workspace",
                                "bytes"]
    body = [line.split() for line in lines[3:-1]]
    assert {cells[0] for cells in body} == OPS and all(cells[1:3] == ["float16", "NHWC"] for cells in body)
    files = sorted(tmp_path.rglob("*.json"))
    assert lines[-1] == f"stored {len(files)} plan set(s) in {tmp_path}" and len(files) == len(body)
    stored = [json.loads(f.read_text()) for f in files]
    assert all(s["device_name"] == name and s["plans"] and s["plans"][0]["json"] for s in stored)


def test_the_settings_carry_over_to_every_graph(tmp_path):
    """--deterministic and --workspace-limit 0 filter every op's plans as at run time, and the plans stored
    under them are another cache entry; a graph left without plans says why under its row."""
    device = DEVICEPROPS[1]
    args = ("--device", str(device), "--dtype", "float16", "--layout", "NHWC")
    result = _plans(*args, "--json", "--deterministic", "--workspace-limit", "0", "--cache-dir", str(tmp_path))
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert {r["op"] for r in rows} == OPS and result.returncode == (0 if all(r["plans"] for r in rows) else 3)
    assert any(r["plans"] for r in rows if r["op"].startswith("conv")), rows
    for r in rows:
        assert (r["plans"] >= 1 and r["workspace"] == 0) or ("workspace_limit=0" in r["note"]
                                                              or "nondeterministic" in r["note"]), r
    stored = [json.loads(open(r["file"]).read())["key"] for r in rows if "file" in r]
    assert stored and all(k["deterministic"] and k["workspace_limit"] == 0 for k in stored)
    table = _plans(*args, "--op", "conv_forward", "--deterministic", "--workspace-limit", "0")
    assert table.stdout.splitlines()[1] == "settings: deterministic=True, workspace_limit=0, allow_tf32=False"


def test_bad_arguments_exit_with_a_message(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    for args, message in [(["--device", str(bad)], "no cuDNN device-properties object"),
                          (["--device", str(tmp_path / "none.json")], "No such file"),
                          (["--device", str(DEVICEPROPS[0]), "--layout", "NCWH"], "layout='NCWH'"),
                          (["--device", str(DEVICEPROPS[0]), "--op", "conv_sideways"], "conv_sideways"),
                          (["--device", str(DEVICEPROPS[0]), "--workspace-limit", "-1"], "workspace_limit=-1")]:
        result = _plans(*args, env={}, timeout=120)
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)
