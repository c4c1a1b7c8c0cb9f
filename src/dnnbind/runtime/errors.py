"""Exception classes shared by the generated modules and the high-level layer."""
from __future__ import annotations

import ctypes


class DnnError(RuntimeError):
    """Base class of every error a vendor library reports through dnnbind."""


class LibraryError(DnnError):
    """A vendor call returned a failure status.

    ``status`` is the status enum member (or the raw int for a value the header does not know),
    ``function`` the C function's name and ``message`` the library's own explanation.
    """

    def __init__(self, status: object, function: str, message: str = "") -> None:
        self.status = status
        self.function = function
        self.message = message
        name = getattr(status, "name", None)
        code = int(status)  # type: ignore[call-overload]  # an IntEnum member or a raw int
        head = f"{function} failed: {name} ({code})" if name else f"{function} failed with status {code}"
        super().__init__(f"{head}: {message}" if message else head)

    def __reduce__(self):
        return (type(self), (self.status, self.function, self.message))


class CudnnError(LibraryError):
    """A cuDNN function returned a status other than CUDNN_STATUS_SUCCESS."""


class MiopenError(LibraryError):
    """A MIOpen function returned a status other than miopenStatusSuccess."""


class LibraryNotFoundError(DnnError, OSError):
    """No usable copy of a vendor library was found; the message says where it looked and how to fix it."""


class SymbolNotFoundError(DnnError, AttributeError):
    """The loaded library is older (or newer) than the header and lacks this function."""


class DnnArgumentError(ctypes.ArgumentError, TypeError):
    """A Python value cannot be passed to a C parameter.

    It is a ``ctypes.ArgumentError`` (what ctypes itself raises for a wrong argument) and a
    ``TypeError``; the message names the function, the parameter and the offending type.
    ``index`` (0-based) is the parameter's position when the runtime raised it before the call.
    """

    index: int = -1


class DnnRangeError(ctypes.ArgumentError, OverflowError):
    """An integer argument (or an element of an integer array) does not fit its C type.

    ctypes would silently wrap it (2**32 + 2 becomes 2 in an ``int``); dnnbind refuses it, naming
    the function, the parameter, the value and the type's range.
    """

    index: int = -1


class LibraryVersionError(DnnError, OSError):
    """The loaded library's major version differs from the headers the bindings were generated from."""
