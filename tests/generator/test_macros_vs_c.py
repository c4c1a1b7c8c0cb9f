"""Macro evaluation against the C compiler: a few hundred random integer expressions, one compile."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

import fixture_build as fb

_LIMIT = 1 << 62                    # stay far from signed 64-bit overflow (undefined behaviour in C)


def _c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _c_mod(a: int, b: int) -> int:
    return a - b * _c_div(a, b)


class _Expressions:
    """Random long long constant expressions without undefined behaviour, with their C values.

    The values only keep the expressions defined (no overflow, no negative left shifts, no division by
    zero); what the test compares against is what gcc prints."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.values: dict[str, int] = {}

    def leaf(self) -> tuple[str, int]:
        if self.values and self.rng.random() < 0.25:
            name = self.rng.choice(sorted(self.values))
            return name, self.values[name]
        value = self.rng.choice([0, 1, 2, 3, 7, 8, 15, 16, 31, 255, 1000, 65535, 0x7FFF_FFFF])
        form = self.rng.choice(["{}LL", "{:#x}LL", "{:#o}LL" if value else "{}LL"])
        text = form.format(value).replace("0o", "0")
        if self.rng.random() < 0.3:
            return f"(-{text})", -value
        return text, value

    def expr(self, depth: int) -> tuple[str, int]:
        if depth == 0:
            return self.leaf()
        op = self.rng.choice(["+", "-", "*", "/", "%", "<<", ">>", "&", "|", "^", "~"])
        left, lv = self.expr(depth - 1)
        if op == "~":
            return f"(~{left})", ~lv
        if op in ("<<", ">>"):
            shift = self.rng.randint(0, 20)
            if op == "<<" and (lv < 0 or lv << shift >= _LIMIT):
                return left, lv
            return f"({left} {op} {shift})", lv << shift if op == "<<" else lv >> shift
        right, rv = self.expr(depth - 1)
        if op in ("/", "%") and rv == 0:
            return left, lv
        value = {"+": lambda: lv + rv, "-": lambda: lv - rv, "*": lambda: lv * rv,
                 "/": lambda: _c_div(lv, rv), "%": lambda: _c_mod(lv, rv), "&": lambda: lv & rv,
                 "|": lambda: lv | rv, "^": lambda: lv ^ rv}[op]()
        if abs(value) >= _LIMIT:
            return left, lv
        return f"({left} {op} {right})", value

    def header(self, count: int) -> str:
        lines = ["#ifndef RANDOM_MACROS_H", "#define RANDOM_MACROS_H"]
        for i in range(count):
            text, value = self.expr(self.rng.randint(0, 3))
            name = f"FX_R{i}"
            lines.append(f"#define {name} {text}")
            self.values[name] = value
        return "\n".join(lines + ["#endif", ""])


@pytest.mark.parametrize("seed", [1, 2])
def test_random_integer_macros_equal_gcc(tmp_path: Path, seed: int) -> None:
    """Literals (decimal, hex, octal, LL), + - * / % << >> & | ^ ~, unary minus and references to
    earlier macros evaluate to exactly what gcc computes."""
    if fb.c_compiler() is None:
        pytest.skip("no C compiler to evaluate the header with")
    expressions = _Expressions(seed)
    (tmp_path / "random_macros.h").write_text(expressions.header(250))
    config = fb.fixture_config("random_macros.h", keep=["random_macros.h"], version_macros=[],
                               beta_macro=None, defines=[])
    module = fb.parse_fixture("random_macros.h", config, tmp_path)
    generated = {m.name: m.value for m in module.macros}
    assert module.skipped_macros == []
    assert len(generated) == 250
    assert generated == fb.c_values(fb.header_set("random_macros.h", tmp_path), sorted(generated), tmp_path)
