"""Finding and loading a vendor library on first use, and binding its symbols one at a time.

Importing a generated module creates a :class:`Library` but loads nothing: the shared object is
searched for when the first function is called, and each function's symbol is looked up only when
that function is first called, so a function missing from an older library fails alone, by name.
"""
from __future__ import annotations

import ctypes
import os
import site
import sys
import threading
import warnings
TYPE_CHECKING = False                    # importing typing costs milliseconds; annotations only
if TYPE_CHECKING:
    from typing import Any, Callable, Sequence

#: Every Library a generated module created (tracing walks them).
LIBRARIES: list["Library"] = []
#: Set by dnnbind.runtime.trace while tracing: wraps each function bound meanwhile.
trace_hook: "Callable[[Library, str, Any], Any] | None" = None

from dnnbind.runtime.errors import (DnnArgumentError, DnnRangeError, LibraryError, LibraryNotFoundError,
                                    LibraryVersionError, SymbolNotFoundError)
from dnnbind.runtime.handles import is_null
from dnnbind.runtime.pointers import type_name

#: Set to 1 to use a library whose major version differs from the headers' (enum values may mean other things).
ALLOW_MISMATCH_ENV = "DNNBIND_ALLOW_VERSION_MISMATCH"


def site_package_dirs() -> list[str]:
    """Every site-packages directory of this interpreter, the user site included."""
    dirs: list[str] = []
    try:
        dirs.extend(site.getsitepackages())
    except AttributeError:                      # some embedded interpreters lack it
        pass
    try:
        dirs.append(site.getusersitepackages())
    except AttributeError:
        pass
    dirs.extend(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))
    seen: dict[str, None] = {}
    for d in dirs:
        seen.setdefault(os.path.realpath(d), None)
    return list(seen)


class Library:
    """One vendor library: where to look for it, and what the generated module registered about it.

    ``search`` is a list of steps tried in order after the ``env`` variable:
    ``("site-packages", "nvidia/cudnn/lib")``, ``("env-dir", "CONDA_PREFIX", "lib")``,
    ``("dir", "/opt/rocm/lib")`` and ``("system",)``.
    """

    def __init__(self, title: str, sonames: Sequence[str], env: str, search: Sequence[tuple],
                 header_version: tuple[int, ...], install_hint: str, error_class: type[LibraryError]) -> None:
        self.title = title
        self.sonames = tuple(sonames)
        self.env = env
        self.search = tuple(search)
        self.header_version = header_version
        self.install_hint = install_hint
        self.error_class = error_class
        # registered by the generated module once its functions exist
        self.status_enum: Callable[[int], Any] = int
        self.describe_status: Callable[[int], str] | None = None
        self.last_error: Callable[[], str] | None = None
        self.read_version: Callable[[], tuple[int, ...]] | None = None
        self._handle: ctypes.CDLL | None = None
        self._path: str | None = None
        self._lock = threading.Lock()
        self._version: tuple[int, ...] | None = None
        self._refusal: LibraryVersionError | None = None
        self.namespace: dict = {}
        self.function_names: list[str] = []

    def __repr__(self) -> str:
        state = f"loaded from {self._path}" if self._handle is not None else "not loaded"
        return f"<Library {self.title} ({state})>"

    # -- finding and loading ------------------------------------------------------------------
    def candidates(self) -> list[tuple[str, str]]:
        """``(how, path or soname)`` pairs in search order; nothing is loaded."""
        found: list[tuple[str, str]] = []
        explicit = os.environ.get(self.env)
        if explicit:
            found.append((f"${self.env}", explicit))
        for step in self.search:
            kind = step[0]
            if kind == "site-packages":
                for d in site_package_dirs():
                    for soname in self.sonames:
                        p = os.path.join(d, step[1], soname)
                        if os.path.exists(p):
                            found.append((f"site-packages ({d})", p))
            elif kind == "env-dir":
                root = os.environ.get(step[1])
                if root:
                    for soname in self.sonames:
                        p = os.path.join(root, step[2], soname)
                        if os.path.exists(p):
                            found.append((f"${step[1]}", p))
            elif kind == "dir":
                for soname in self.sonames:
                    p = os.path.join(step[1], soname)
                    if os.path.exists(p):
                        found.append((step[1], p))
            elif kind == "system":
                found.extend(("system loader", soname) for soname in self.sonames)
        return found

    def load(self) -> ctypes.CDLL:
        """The loaded library, found on first call; refused when its major version differs from the headers'."""
        if self._handle is not None and self._refusal is None:
            return self._handle
        with self._lock:
            if self._handle is None:
                self._handle, self._path = self._open()
                self._refusal = self._check_major_version()
        if self._refusal is not None:
            raise self._refusal
        return self._handle

    def _open(self) -> tuple[ctypes.CDLL, str]:
        tried: list[str] = []
        explicit = os.environ.get(self.env)
        for how, target in self.candidates():
            try:
                return ctypes.CDLL(target), target
            except OSError as exc:
                reason = str(exc).removeprefix(f"{target}: ")      # dlerror() repeats the name already shown
                tried.append(f"  {how}: {target}: {reason}")
                if how == f"${self.env}" and explicit:
                    raise LibraryNotFoundError(
                        f"{self.title}: ${self.env}={explicit!r} could not be loaded: {exc}\n"
                        f"Point ${self.env} at a working library, or unset it to search the usual places. "
                        f"{self.install_hint}") from None
        detail = "\n".join(tried) if tried else "  (no candidate found)"
        raise LibraryNotFoundError(
            f"{self.title} library not found ({' / '.join(self.sonames)}). Tried:\n{detail}\n"
            f"{self.install_hint}\nOr set {self.env} to the library's path.")

    @property
    def loaded(self) -> bool:
        return self._handle is not None

    def path(self) -> str:
        """The path (or soname) of the loaded library; loads it if needed."""
        self.load()
        assert self._path is not None
        return self._path

    def version(self) -> tuple[int, ...]:
        """The loaded library's own version, e.g. ``(9, 28, 1)``."""
        if self._version is None:
            self.load()
            if self.read_version is None:
                raise LibraryNotFoundError(f"{self.title}: no version reader registered")
            self._version = tuple(self.read_version())
        return self._version

    def version_text(self) -> str:
        try:
            return ".".join(map(str, self.version()))
        except Exception:                          # a version is only decoration in messages
            return "of unknown version"

    def _check_major_version(self) -> LibraryVersionError | None:
        """The refusal for a library of another major version (None: same major, or allowed by the user)."""
        if self.read_version is None:
            return None
        try:
            if self._version is None:
                assert self.read_version is not None
                self._version = tuple(self.read_version())
        except Exception:                          # an old library without the version call
            return None
        message = version_mismatch(self.title, str(self._path), self._version, self.header_version,
                                   self.install_hint)
        if message is None:
            return None
        if os.environ.get(ALLOW_MISMATCH_ENV) == "1":
            warnings.warn(f"{message.splitlines()[0]} ({ALLOW_MISMATCH_ENV}=1: used anyway; calls may fail or "
                          "pass numbers that mean something else to this library)", RuntimeWarning, stacklevel=4)
            return None
        return LibraryVersionError(message)

    @staticmethod
    def null_handle_error(function: str, param: str, value: Any) -> DnnArgumentError:
        """Destroying a NULL handle: one already destroyed (the wrappers clear it) or never created."""
        what = "None" if value is None else f"a NULL {type(value).__name__}"
        return DnnArgumentError(f"{function}: parameter {param!r} is {what}: the handle was destroyed already (a "
                                "successful destroy clears it) or never created; destroying it would free memory twice")

    @staticmethod
    def check_handles(function: str, params: Sequence[str], values: Sequence[Any]) -> None:
        """The slow path of the wrappers' handle check: name the first handle argument that is None, NULL or
        not a handle at all (a numpy array has no single truth value); return if there is none after all."""
        for param, value in zip(params, values):
            if is_null(value):
                raise DnnArgumentError(f"{function}: parameter {param!r} is {'None' if value is None else 'NULL'}; "
                                       "it needs a created handle (a successful destroy clears a handle to NULL, "
                                       "so this is also a handle used after destroying it)")
            if not isinstance(value, ctypes._Pointer):
                raise DnnArgumentError(f"{function}: parameter {param!r} needs a handle, got {type_name(value)}")

    # -- symbols ------------------------------------------------------------------------------
    def bind(self, name: str, argtypes: Sequence[type], restype: Any) -> Any:
        """Look one symbol up and give it its C signature."""
        handle = self.load()
        try:
            fn = getattr(handle, name)
        except AttributeError:
            raise SymbolNotFoundError(
                f"{name} is not in {os.path.basename(str(self._path))} {self.version_text()} "
                f"(loaded from {self._path}); it was declared in the "
                f"{'.'.join(map(str, self.header_version))} headers dnnbind was generated from. "
                f"Use a {self.title} library that has it.") from None
        fn.argtypes = argtypes
        fn.restype = restype
        return fn

    def binder(self, namespace: dict) -> Callable[..., "LazySymbol"]:
        """A factory for module globals that bind themselves on first call (see LazySymbol)."""
        self.namespace = namespace
        LIBRARIES.append(self)
        if os.environ.get("DNNBIND_TRACE"):
            from dnnbind.runtime import trace
            trace.start_from_environment()

        def lazy(name: str, argtypes: Sequence[type], restype: Any, deprecated: str | None = None) -> LazySymbol:
            self.function_names.append(name)
            return LazySymbol(self, namespace, name, tuple(argtypes), restype, deprecated)
        return lazy

    # -- errors -------------------------------------------------------------------------------
    def status_error(self, status: int, function: str) -> LibraryError:
        """The exception for a failed call: status member, function name, the library's message."""
        try:
            member = self.status_enum(status)
        except ValueError:
            member = status
        parts = []
        if self.last_error is not None:
            try:
                parts.append(self.last_error())
            except Exception:                      # never hide the real failure behind this one
                pass
        if not any(parts) and self.describe_status is not None:
            try:
                described = self.describe_status(status)
            except Exception:
                described = ""
            if described and described != getattr(member, "name", None):
                parts.append(described)
        return self.error_class(member, function, " ".join(p for p in parts if p))

    @staticmethod
    def argument_error(function: str, params: Sequence[str], exc: ctypes.ArgumentError) -> ctypes.ArgumentError:
        """Rewrite ctypes' "argument 3: TypeError: ..." (or a runtime check's error for parameter ``exc.index``)
        so that it names the function and parameter."""
        index = getattr(exc, "index", -1)
        if index >= 0:
            return type(exc)(f"{function}: parameter {params[index]!r} {exc}")
        text = str(exc)
        if text.startswith(f"{function}: "):            # already says where (runtime checks of one call)
            return exc
        head, sep, rest = text.partition(": ")
        if head.startswith("argument ") and head[9:].isdigit():
            index = int(head[9:]) - 1
            param = params[index] if 0 <= index < len(params) else f"#{index + 1}"
            detail = rest.split(": ", 1)[1] if rest.startswith(("TypeError: ", "ValueError: ",
                                                                "OverflowError: ", "AttributeError: ")) else rest
            cls = DnnRangeError if rest.startswith("OverflowError: ") else DnnArgumentError
            return cls(f"{function}: parameter {param!r} {detail}")
        return DnnArgumentError(f"{function}: {text}")


def version_mismatch(title: str, path: str, loaded: tuple[int, ...], header: tuple[int, ...],
                     install_hint: str) -> str | None:
    """Why a library of another major version than the headers' is refused (None: same major).

    Major versions renumber enums and remove functions (cuDNN 8 -> 9: CUDNN_STATUS_BAD_PARAM 3 -> 2000), so
    bindings generated for one would pass numbers that mean something else to the other, older or newer.
    """
    if loaded[:1] == header[:1]:
        return None
    found, wanted = ".".join(map(str, loaded)), ".".join(map(str, header))
    direction = "older" if loaded[:1] < header[:1] else "newer"
    return (f"{title}: the library at {path} is version {found}, a major version {direction} than the "
            f"{wanted} headers dnnbind's bindings were generated from, so enum values and functions may mean "
            f"other things to it.\nUse a {title} {header[0]}.x library ({install_hint}), or generate bindings "
            f"for {found} from its headers (`make generate` after pointing generator/headers.json at them), or "
            f"set {ALLOW_MISMATCH_ENV}=1 to use it anyway at your own risk.")


class LazySymbol:
    """Stands in a generated module's global until first called, then replaces itself there.

    The generated wrapper calls its module global ``_<name>``; the first call binds the real ctypes
    function into that global, so every later call goes straight to ctypes.
    """

    __slots__ = ("library", "namespace", "name", "argtypes", "restype", "deprecated")

    def __init__(self, library: Library, namespace: dict, name: str, argtypes: tuple,
                 restype: Any, deprecated: str | None) -> None:
        self.library = library
        self.namespace = namespace
        self.name = name
        self.argtypes = argtypes
        self.restype = restype
        self.deprecated = deprecated

    def resolve(self) -> Any:
        fn = self.library.bind(self.name, self.argtypes, self.restype)
        if self.deprecated is not None:
            warnings.warn(f"{self.name} is deprecated in {self.library.title}: {self.deprecated}",
                          DeprecationWarning, stacklevel=4)
        if trace_hook is not None:
            fn = trace_hook(self.library, self.name, fn)
        self.namespace["_" + self.name] = fn
        return fn

    def __call__(self, *args: Any) -> Any:
        return self.resolve()(*args)

    def __repr__(self) -> str:
        return f"<unbound {self.library.title} function {self.name}>"


class Unchecked:
    """``module.unchecked.fn(...)`` calls ``fn`` without the status check and returns the raw status."""

    def __init__(self, namespace: dict) -> None:
        self._namespace = namespace

    def __getattr__(self, name: str) -> Any:
        target = self._namespace.get("_" + name)
        if target is None:
            raise AttributeError(f"no generated function named {name!r}")
        return target.resolve() if isinstance(target, LazySymbol) else target

    def __dir__(self) -> list[str]:
        return sorted(k[1:] for k, v in self._namespace.items()
                      if k.startswith("_") and isinstance(v, LazySymbol) or k[1:] in self._namespace)
