"""Hand-written support that the generated modules import: loading, pointer kinds, errors."""
from dnnbind.runtime.errors import (CudnnError, DnnArgumentError, DnnError, LibraryError,
                                    LibraryNotFoundError, MiopenError, SymbolNotFoundError)
from dnnbind.runtime.loader import Library, LazySymbol, Unchecked
from dnnbind.runtime.pointers import (ByteSize, ConstHostPointer, DevicePointer, EitherPointer,
                                      HostPointer, HostString, device_address, host_array, type_name)

__all__ = ["ByteSize", "ConstHostPointer", "CudnnError", "DevicePointer", "DnnArgumentError", "DnnError",
           "EitherPointer", "HostPointer", "HostString", "LazySymbol", "Library", "LibraryError",
           "LibraryNotFoundError", "MiopenError", "SymbolNotFoundError", "Unchecked", "device_address",
           "host_array", "type_name"]
