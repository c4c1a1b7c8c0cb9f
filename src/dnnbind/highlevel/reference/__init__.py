"""The reference backend (temporarily the cpu backend's functions until the plain oracle lands)."""
from dnnbind.highlevel.cpu import *  # noqa: F401,F403
from dnnbind.highlevel import cpu as _cpu

globals().update({k: v for k, v in vars(_cpu).items() if k.endswith(("_forward", "_backward", "_residuals"))})
