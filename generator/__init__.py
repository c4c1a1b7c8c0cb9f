"""dnnbind's binding generator: vendor headers -> libclang -> IR -> classified pointers -> ctypes module."""
