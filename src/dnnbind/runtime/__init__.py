"""Hand-written support that the generated modules import: loading, pointer kinds, argument checks, errors."""
from dnnbind.runtime.checks import HostArray, HostBuffer, host_array, host_buffer
from dnnbind.runtime.errors import (CudnnError, DnnArgumentError, DnnError, DnnRangeError, LibraryError,
                                    LibraryNotFoundError, LibraryVersionError, MiopenError, SymbolNotFoundError)
from dnnbind.runtime.loader import Library, LazySymbol, Unchecked
from dnnbind.runtime.pointers import (ConstHostPointer, DevicePointer, EitherPointer, HostPointer, HostString,
                                      device_address, type_name)

__all__ = ["ConstHostPointer", "CudnnError", "DevicePointer", "DnnArgumentError", "DnnError", "DnnRangeError",
           "EitherPointer", "HostArray", "HostBuffer", "HostPointer", "HostString", "LazySymbol", "Library",
           "LibraryError", "LibraryNotFoundError", "LibraryVersionError", "MiopenError", "SymbolNotFoundError",
           "Unchecked", "device_address", "host_array", "host_buffer", "type_name"]
