"""The intermediate representation between parsing and rendering: plain, comparable data.

Everything the renderer, the report and the diff need is here, and nothing refers back to libclang,
so an IR can be saved, compared across header versions and tested without a parse.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class CType:
    """A C type as the generator understands it.

    ``kind`` is one of: void, int, float, char, bool, enum, handle, struct, union, pointer, array,
    function (a function-pointer typedef). ``name`` is the ctypes name for int/float/char/bool
    (``c_int``, ``c_size_t`` ...), the typedef or tag for enum/handle/struct/union/function.
    """

    kind: str
    name: str = ""
    spelling: str = ""
    pointee: "CType | None" = None
    const: bool = False
    length: int = 0           # arrays (and array parameters declared with a size): the element count
    signature: "tuple[CType, ...]" = ()      # function types: result, then parameters


@dataclass(frozen=True)
class Param:
    name: str
    type: CType
    kind: str = ""            # pointer kind after classification: device, host, either, or "" for values
    rule: str = ""            # which override rule or exception decided the kind
    byte_size: bool = False   # marked as a 64-bit byte size
    nullable: bool = False    # host pointers: None (NULL) is a documented value
    length: "Length | None" = None   # host arrays and buffers: where the element count comes from
    length_rule: str = ""     # which rule or exception decided length and nullability


@dataclass(frozen=True)
class Length:
    """Where a host array's (or buffer's) length comes from; the wrapper checks it before the call.

    ``kind``: ``fixed`` (``value`` elements, or bytes for void*), ``count`` (the value of parameter
    ``value``), ``sized`` (parameter ``value`` times the element size that parameter ``selector``'s enum
    value names, from ``sizes``), ``query`` (the int that function ``value`` writes when called with
    ``args``), ``unchecked`` (``reason`` says why nothing can be checked).
    """
    kind: str
    value: str = ""
    selector: str = ""
    sizes: tuple[tuple[str, int], ...] = ()
    args: tuple[str, ...] = ()
    reason: str = ""
    minus: int = 0            # count sources: elements = the count parameter minus this
    most: int = 0             # count sources: the largest count the library takes (0: no limit known)
    most_name: str = ""       # the macro that limit comes from (CUDNN_DIM_MAX)
    least: int = 0            # count sources: the library touches at least this many elements, whatever the count
    handles: tuple[tuple[str, str], ...] = ()   # sized sources: selector members whose elements are handles
    # sized sources: selector members whose elements are numbers of one C type: (member, (numpy kind, bytes,
    # the C type's name)), from backend_attributes.element_types
    numbers: tuple[tuple[str, tuple[str, int, str]], ...] = ()


    def describe(self) -> str:
        return {"fixed": f"fixed {self.value}", "count": f"count {self.value}" + (f" - {self.minus}" if self.minus else "")
                + (f", at most {self.most_name or self.most}" if self.most else "")
                + (f", at least {self.least}" if self.least else ""),
                "sized": f"{self.value} x size of {self.selector}" + (", arrays of the number type it names"
                                                                     if self.numbers else ""),
                "query": f"{self.value}({', '.join(self.args)})",
                "unchecked": f"unchecked: {self.reason}"}[self.kind]


@dataclass(frozen=True)
class Function:
    name: str
    result: CType
    params: tuple[Param, ...]
    prototype: str
    comment: str = ""
    deprecated: bool = False
    beta: bool = False
    header: str = ""


@dataclass(frozen=True)
class Enumerator:
    name: str
    value: int
    deprecated: bool = False
    comment: str = ""


@dataclass(frozen=True)
class Enum:
    name: str
    underlying: str            # ctypes name of the underlying integer type
    members: tuple[Enumerator, ...]
    comment: str = ""
    deprecated: bool = False
    header: str = ""


@dataclass(frozen=True)
class Field:
    name: str
    type: CType
    offset_bits: int
    bit_width: int = 0          # 0: not a bitfield
    anonymous: bool = False


@dataclass(frozen=True)
class Struct:
    name: str
    kind: str                   # struct or union
    fields: tuple[Field, ...]
    size: int
    align: int
    comment: str = ""
    tag: str = ""               # C tag (struct X) when it differs from the typedef name
    header: str = ""


@dataclass(frozen=True)
class Handle:
    """``typedef struct X *name``: an opaque handle, one distinct ctypes pointer type each."""
    name: str
    tag: str
    deprecated: bool = False
    comment: str = ""
    foreign: bool = False       # the pointee belongs to another library (cudaStream_t, hipStream_t)


@dataclass(frozen=True)
class Callback:
    name: str
    result: CType
    params: tuple[Param, ...]
    prototype: str
    comment: str = ""
    pointer: bool = True        # typedef R (*name)(...); False: typedef R name(...), used as name*


@dataclass(frozen=True)
class Macro:
    name: str
    value: int | float
    expression: str


@dataclass
class Module:
    """Everything one library's headers declare that the generated module exposes."""
    library: str
    title: str
    version: str                                  # header version, e.g. "9.28.1"
    entry: str
    enums: list[Enum] = field(default_factory=list)
    handles: list[Handle] = field(default_factory=list)
    structs: list[Struct] = field(default_factory=list)
    callbacks: list[Callback] = field(default_factory=list)
    functions: list[Function] = field(default_factory=list)
    macros: list[Macro] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)   # typedef name -> existing name
    skipped_macros: list[str] = field(default_factory=list)

    def function(self, name: str) -> Function:
        for fn in self.functions:
            if fn.name == name:
                return fn
        raise KeyError(name)
