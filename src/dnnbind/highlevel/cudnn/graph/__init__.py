"""cuDNN's graph API for the cuDNN backend: operation graphs from dims objects (:mod:`.graphs`), engine
heuristics -> execution plans (:mod:`.plans`), plans that survive a restart (:mod:`.cache`), the device
the plans are for (:mod:`.device`), execution (:mod:`.execute`, needs a GPU) and the standard set of
problems built ahead of time (:mod:`.ahead`, ``python -m dnnbind plans``).

Everything up to execution builds without a GPU from a device-properties JSON (see
:mod:`dnnbind.runtime.deviceless`). Importing this package loads no library.
"""
