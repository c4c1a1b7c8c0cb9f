"""The cuDNN backend's options (see :class:`dnnbind.highlevel.gpu.settings.Settings`)::

    from dnnbind.highlevel import cudnn
    cudnn.settings.configure(workspace_limit=2 << 30)            # process-wide defaults
    with cudnn.settings(algo="benchmark", deterministic=True):   # this thread/task only
        y, pullback = dnnbind.conv(x, w)
"""
from __future__ import annotations

from dnnbind.highlevel.gpu.settings import Settings, SettingsControl

settings = SettingsControl("cudnn", Settings())

__all__ = ["Settings", "settings"]
