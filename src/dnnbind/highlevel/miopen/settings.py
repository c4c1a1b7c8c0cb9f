"""The MIOpen backend's options: the shared ones plus MIOpen's immediate mode::

    from dnnbind.highlevel import miopen
    miopen.settings.configure(workspace_limit=2 << 30)          # process-wide defaults
    with miopen.settings(immediate=True):                        # this thread/task only
        y, pullback = dnnbind.conv(x, w)

How they apply to convolutions on MIOpen:

* ``algo="heuristic"``: Find with a quick search (``exhaustiveSearch=false``, MIOpen's default find
  mode, which reuses its find database); ``algo="benchmark"``: Find with an exhaustive search in
  MIOpen's normal find mode (every applicable solver timed once per problem and handle);
* ``immediate=True``: no Find at all: MIOpen's immediate mode (GetSolution's ranking, CompileSolution
  once per problem and handle, ``miopenConvolution*Immediate``); ``algo`` does not apply;
* ``deterministic``: MIOPEN_CONVOLUTION_ATTRIB_DETERMINISTIC on the convolution descriptor;
* ``workspace_limit``: algorithms needing more scratch memory are skipped;
* ``allow_tf32`` has no effect: MIOpen has no TF32 switch; float32 runs in float32.
"""
from __future__ import annotations

from dataclasses import dataclass

from dnnbind.highlevel.gpu.settings import Settings, SettingsControl


@dataclass(frozen=True)
class MIOpenSettings(Settings):
    """:class:`~dnnbind.highlevel.gpu.settings.Settings` plus ``immediate`` (MIOpen's immediate mode)."""

    immediate: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.immediate, bool):
            raise TypeError(f"immediate={self.immediate!r} must be a bool")


settings = SettingsControl("miopen", MIOpenSettings())


def current() -> MIOpenSettings:
    """The settings in force here, typed as MIOpen's."""
    s = settings.current()
    if not isinstance(s, MIOpenSettings):      # configure() keeps the class, so this cannot happen
        raise TypeError(f"the MIOpen backend's settings are {type(s).__name__}, not MIOpenSettings")
    return s


__all__ = ["MIOpenSettings", "settings", "current"]
