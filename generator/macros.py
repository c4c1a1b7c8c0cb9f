"""Evaluating object-like macros whose bodies are integer (or floating) constant expressions.

``#define CUDNN_SEV_ERROR_EN (1U << CUDNN_SEV_ERROR)`` refers to an enumerator, so evaluation gets
the enum constants and the macros evaluated before it. Anything that is not a constant expression
(strings, attributes, function-like macros) is skipped, never guessed.
"""
from __future__ import annotations

import ast
import operator
import re
from typing import Mapping, Sequence

_INT = re.compile(r"^(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)([uUlL]*)$")
_FLOAT = re.compile(r"^(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?[fFlL]?$")
_CAST_TYPES = {"int", "unsigned", "long", "short", "char", "signed", "size_t", "float", "double",
               "int32_t", "int64_t", "uint32_t", "uint64_t"}


def _c_mod(left: int, right: int) -> int:
    """C's %: the remainder takes the sign of the dividend (division truncates toward zero)."""
    remainder = abs(left) % abs(right)
    return remainder if left >= 0 else -remainder


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Mod: _c_mod,
           ast.LShift: operator.lshift, ast.RShift: operator.rshift, ast.BitOr: operator.or_,
           ast.BitAnd: operator.and_, ast.BitXor: operator.xor}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}


class NotConstant(ValueError):
    """The macro body is not a constant expression the generator can evaluate exactly."""


def translate(tokens: Sequence[str], known: Mapping[str, int | float]) -> str:
    """C tokens -> a Python expression over literals (identifiers replaced by their values)."""
    out: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        # drop C casts such as (int) or (unsigned long)
        if tok == "(":
            j = i + 1
            while j < len(tokens) and tokens[j] in _CAST_TYPES:
                j += 1
            if j > i + 1 and j < len(tokens) and tokens[j] == ")":
                i = j + 1
                continue
        m = _INT.match(tok)
        if m:
            digits = m.group(1)
            if len(digits) > 1 and digits[0] == "0" and digits[1] not in "xX":
                digits = "0o" + digits[1:]
            out.append(digits)
        elif _FLOAT.match(tok) and any(c in tok for c in ".eE"):
            out.append(tok.rstrip("fFlL"))
        elif tok in known:
            out.append(repr(known[tok]))
        elif tok == "/":
            out.append("//")
        elif tok in {"+", "-", "*", "%", "<<", ">>", "|", "&", "^", "~", "(", ")"}:
            out.append(tok)
        else:
            raise NotConstant(tok)
        i += 1
    if not out:
        raise NotConstant("empty")
    return " ".join(out)


def is_unsigned(tokens: Sequence[str]) -> tuple[bool, bool]:
    """(unsigned, 64-bit): whether C would compute the expression in an unsigned type, and how wide.

    A literal with a U suffix or a cast to an unsigned type makes it unsigned; an L suffix (64-bit
    long on LP64) or a 64-bit cast makes it 64-bit.
    """
    unsigned = wide = False
    for i, tok in enumerate(tokens):
        m = _INT.match(tok)
        if m:
            suffix = m.group(2).lower()
            unsigned |= "u" in suffix
            wide |= "l" in suffix
        elif tok in ("unsigned", "size_t", "uint32_t", "uint64_t") and i > 0 and tokens[i - 1] in ("(", "unsigned"):
            unsigned = True
            wide |= tok in ("size_t", "uint64_t") or (i + 1 < len(tokens) and tokens[i + 1] == "long")
    return unsigned, wide


def value_of(tokens: Sequence[str], known: Mapping[str, int | float]) -> int | float:
    """Evaluate a macro body (already expanded) as C would, unsigned wrap-around included."""
    value = evaluate(translate(tokens, known))
    unsigned, wide = is_unsigned(tokens)
    if unsigned and isinstance(value, int):
        value &= (1 << 64) - 1 if wide or value >= 1 << 32 else (1 << 32) - 1
    return value


def expand(name: str, bodies: Mapping[str, Sequence[str]], _active: frozenset[str] = frozenset()) -> list[str]:
    """The tokens of macro ``name`` with every object-like macro inside replaced by its own tokens,
    as the preprocessor does (so ``#define S 1 + 2`` makes ``S * 3`` equal 7, not 9)."""
    out: list[str] = []
    for tok in bodies[name]:
        if tok in bodies and tok not in _active and tok != name:
            out.extend(expand(tok, bodies, _active | {name}))
        else:
            out.append(tok)
    return out


def evaluate(expression: str) -> int | float:
    """Evaluate a translated expression with a whitelist of arithmetic nodes (no eval())."""
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError:
        raise NotConstant(expression) from None
    return _eval(tree.body)


def _eval(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_eval(node.left), _eval(node.right))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv):
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(left, float) or isinstance(right, float):
            return left / right
        quotient = abs(left) // abs(right)          # C division truncates toward zero
        return quotient if (left >= 0) == (right >= 0) else -quotient
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    raise NotConstant(ast.dump(node))
