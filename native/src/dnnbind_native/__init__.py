"""The optional compiled parts of dnnbind (distribution dnnbind-native): ``_kernels`` (the cpu backend's C
kernels, a library loaded with ctypes, not a Python module), ``_values`` (an extension
module). dnnbind finds and uses them through ``dnnbind.compiled``; nothing here is imported by itself."""
__version__ = "0.1.0"
