"""The device a graph's plans are built for: its properties as cuDNN's JSON, and their fingerprint.

Without a GPU the properties come from a JSON file (tests/data/deviceprop/*.json, or one written on a
real device by :func:`from_handle`); cuDNN builds heuristics and plans from the finalized
CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR. The fingerprint (sha256 of the canonical JSON) keys the caches:
a plan tuned for one card is never loaded for another.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any

from dnnbind.gen import cudnn_backend as b
from dnnbind.runtime.backend import Descriptor


@dataclass
class Device:
    """Device properties (a dict, as cuDNN's JSON representation holds them) and their descriptor."""

    properties: dict[str, Any]
    _descriptor: Descriptor | None = field(default=None, repr=False)

    @classmethod
    def from_json(cls, text: str, where: str = "device properties") -> "Device":
        try:
            properties = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where} is not JSON: {exc}") from None
        if not isinstance(properties, dict) or "deviceName" not in properties or "deviceVer" not in properties:
            raise ValueError(f"{where} is no cuDNN device-properties object (it needs deviceName, deviceVer, "
                             "multiProcessorCount, ...)")
        return cls(properties)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> "Device":
        """The device described by a device-properties JSON file."""
        with open(path, encoding="utf-8") as f:
            return cls.from_json(f.read(), f"device file {os.fspath(path)!r}")

    @classmethod
    def from_handle(cls, handle: Any) -> "Device":
        """The properties of the GPU a cuDNN handle runs on (needs a device; never run here)."""
        descriptor = b.DevicePropDescriptor(handle=handle).finalize()
        device = cls.from_json(descriptor.get("json_representation"), "cuDNN's device properties")
        device._descriptor = descriptor
        return device

    @property
    def name(self) -> str:
        return str(self.properties["deviceName"])

    @property
    def json(self) -> str:
        """The canonical JSON (sorted keys): what the fingerprint hashes."""
        return json.dumps(self.properties, sort_keys=True, separators=(",", ":"))

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(self.json.encode()).hexdigest()[:16]

    def descriptor(self) -> Descriptor:
        """The finalized device-properties descriptor (built once; needs libcuda, see runtime.deviceless)."""
        if self._descriptor is None:
            self._descriptor = b.DevicePropDescriptor(json_representation=self.json).finalize()
        return self._descriptor
