from highlevel.gpu.device import cuda, poisoned  # noqa: F401  (fixtures)
