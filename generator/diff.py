"""What changed between two versions of a library's API, as Markdown for a maintainer's review.

``python -m generator diff LIB --old A --new B`` parses two header sets (see ``generator.versions``)
and compares them; ``make generate`` compares the committed module with the new generation. Both
go through :func:`compare` (two :class:`~generator.api.Api` -> :class:`Changes`) and
:func:`markdown`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from generator import pipeline
from generator.api import Api, FieldApi, StructApi, api_of_ir, api_of_text


@dataclass
class Changes:
    """Every difference between two APIs; each list is sorted by name."""
    old: Api
    new: Api
    functions_added: list[str] = field(default_factory=list)
    functions_removed: list[str] = field(default_factory=list)
    functions_changed: list[str] = field(default_factory=list)            # prototype differs
    newly_deprecated: list[str] = field(default_factory=list)
    no_longer_deprecated: list[str] = field(default_factory=list)
    beta_changed: list[tuple[str, bool, bool]] = field(default_factory=list)
    kinds_changed: list[tuple[str, str, str, str]] = field(default_factory=list)   # fn, param, old, new
    enums_added: list[str] = field(default_factory=list)
    enums_removed: list[str] = field(default_factory=list)
    values_added: list[tuple[str, str, int]] = field(default_factory=list)
    values_removed: list[tuple[str, str, int]] = field(default_factory=list)
    values_renumbered: list[tuple[str, str, int, int]] = field(default_factory=list)
    macros_added: list[str] = field(default_factory=list)
    macros_removed: list[str] = field(default_factory=list)
    macros_changed: list[str] = field(default_factory=list)
    structs_added: list[str] = field(default_factory=list)
    structs_removed: list[str] = field(default_factory=list)
    structs_changed: list[tuple[str, list[str]]] = field(default_factory=list)   # name, what changed
    handles_added: list[str] = field(default_factory=list)
    handles_removed: list[str] = field(default_factory=list)
    callbacks_added: list[str] = field(default_factory=list)
    callbacks_removed: list[str] = field(default_factory=list)
    callbacks_changed: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not any(v for k, v in vars(self).items() if k not in ("old", "new"))


def _split(old: dict | set, new: dict | set) -> tuple[list[str], list[str], list[str]]:
    """Names only in new, only in old, and in both."""
    return sorted(set(new) - set(old)), sorted(set(old) - set(new)), sorted(set(old) & set(new))


def layout_changes(old: StructApi, new: StructApi) -> list[str]:
    """What a maintainer must know about one record's layout: kind, size, alignment, each field."""
    out = []
    if old.kind != new.kind:
        out.append(f"{old.kind} -> {new.kind}")
    if old.size != new.size:
        out.append(f"size {old.size} -> {new.size}")
    if old.align != new.align:
        out.append(f"align {old.align} -> {new.align}")
    before: dict[str, FieldApi] = {f.name: f for f in old.fields}
    after: dict[str, FieldApi] = {f.name: f for f in new.fields}
    added, removed, both = _split(before, after)
    out += [f"field `{n}` added at {_where(after[n])} ({after[n].ctype})" for n in added]
    out += [f"field `{n}` removed (was at {_where(before[n])})" for n in removed]
    for n in both:
        a, b = before[n], after[n]
        if (a.offset_bits, a.bit_width) != (b.offset_bits, b.bit_width):
            out.append(f"field `{n}` moved {_where(a)} -> {_where(b)}")
        if a.ctype != b.ctype:
            out.append(f"field `{n}` type {a.ctype} -> {b.ctype}")
    if not out and [f.name for f in old.fields] != [f.name for f in new.fields]:
        out.append("fields reordered")
    return out


def _where(f: FieldApi) -> str:
    if f.bit_width or f.offset_bits % 8:
        return f"bit {f.offset_bits}" + (f" (width {f.bit_width})" if f.bit_width else "")
    return f"offset {f.offset_bits // 8}"


def compare(old: Api, new: Api) -> Changes:
    """Everything that differs between ``old`` and ``new``."""
    c = Changes(old, new)
    c.functions_added, c.functions_removed, both = _split(old.functions, new.functions)
    for name in both:
        a, b = old.functions[name], new.functions[name]
        if a.prototype != b.prototype:
            c.functions_changed.append(name)
        if b.deprecated and not a.deprecated:
            c.newly_deprecated.append(name)
        if a.deprecated and not b.deprecated:
            c.no_longer_deprecated.append(name)
        if a.beta != b.beta:
            c.beta_changed.append((name, a.beta, b.beta))
        before, after = dict(a.kinds), dict(b.kinds)
        c.kinds_changed += [(name, p, before[p], after[p]) for p in before if p in after and before[p] != after[p]]
    c.enums_added, c.enums_removed, both = _split(old.enums, new.enums)
    for name in both:
        a, b = old.enums[name], new.enums[name]
        added, removed, kept = _split(a, b)
        c.values_added += [(name, m, b[m]) for m in added]
        c.values_removed += [(name, m, a[m]) for m in removed]
        c.values_renumbered += [(name, m, a[m], b[m]) for m in kept if a[m] != b[m]]
    c.macros_added, c.macros_removed, both = _split(old.macros, new.macros)
    c.macros_changed = [m for m in both if old.macros[m] != new.macros[m]]
    c.structs_added, c.structs_removed, both = _split(old.structs, new.structs)
    for name in both:
        details = layout_changes(old.structs[name], new.structs[name])
        if details:
            c.structs_changed.append((name, details))
    c.handles_added, c.handles_removed, _ = _split(old.handles, new.handles)
    c.callbacks_added, c.callbacks_removed, both = _split(old.callbacks, new.callbacks)
    c.callbacks_changed = [n for n in both if old.callbacks[n] != new.callbacks[n]]
    return c


# ------------------------------------------------------------------------------------------ Markdown

def _enum_label(name: str) -> str:
    return name or "(anonymous enum)"


def summary_rows(c: Changes) -> list[tuple[str, int, int, int]]:
    """(what, added, removed, changed) for the summary table."""
    return [("functions", len(c.functions_added), len(c.functions_removed), len(c.functions_changed)),
            ("enum types", len(c.enums_added), len(c.enums_removed), 0),
            ("enum values (in kept enums)", len(c.values_added), len(c.values_removed), len(c.values_renumbered)),
            ("macros", len(c.macros_added), len(c.macros_removed), len(c.macros_changed)),
            ("structs and unions", len(c.structs_added), len(c.structs_removed), len(c.structs_changed)),
            ("opaque handles", len(c.handles_added), len(c.handles_removed), 0),
            ("callbacks", len(c.callbacks_added), len(c.callbacks_removed), len(c.callbacks_changed))]


def summary_line(c: Changes) -> str:
    """One line: the counts that matter most."""
    return (f"{c.old.title} {c.old.version} -> {c.new.version}: functions +{len(c.functions_added)} "
            f"-{len(c.functions_removed)} ~{len(c.functions_changed)}, newly deprecated {len(c.newly_deprecated)}, "
            f"enum values +{len(c.values_added)} -{len(c.values_removed)} renumbered {len(c.values_renumbered)}, "
            f"macros changed {len(c.macros_added) + len(c.macros_removed) + len(c.macros_changed)}, "
            f"structs changed {len(c.structs_added) + len(c.structs_removed) + len(c.structs_changed)}, "
            f"override problems {len(c.new.problems)}")


def _section(title: str, lines: list[str]) -> list[str]:
    return [f"### {title} ({len(lines)})", "", *lines, ""] if lines else []


def _value(v: int | float) -> str:
    return repr(v)


def _same_value(c: Changes, enum: str, value: int) -> str:
    """``; now also named Y`` when an added value of the same enum has it (a likely rename)."""
    names = [m for e, m, v in c.values_added if e == enum and v == value]
    return f"; {', '.join(f'`{n}`' for n in names)} added with this value" if names else ""


def _problem_lines(api: Api) -> list[str]:
    return [f"- {p}" for p in api.problems]


def markdown(c: Changes, old_label: str = "", new_label: str = "", counts: str = "") -> str:
    """The whole diff as Markdown: a summary table, then one section per kind of change."""
    old, new = c.old, c.new
    out = [f"## {old.title} API diff: {old.version} -> {new.version}", ""]
    if old_label or new_label:
        out += [f"- old: {old_label or old.version}", f"- new: {new_label or new.version}", ""]
    if counts:
        out += [counts, ""]
    out += ["| | added | removed | changed |", "|---|---:|---:|---:|"]
    out += [f"| {what} | {a} | {r} | {ch} |" for what, a, r, ch in summary_rows(c)]
    out += ["", f"Functions newly deprecated: {len(c.newly_deprecated)}; no longer deprecated: "
            f"{len(c.no_longer_deprecated)}; beta status changed: {len(c.beta_changed)}; "
            f"pointer kinds changed: {len(c.kinds_changed)}.",
            f"pointer_overrides.json against the new headers: {len(new.problems)} problem(s) "
            f"(against the old: {len(old.problems)}).", ""]
    if c.empty and not new.problems and not old.problems:
        return "\n".join(out + ["No API change."])
    new_fn, old_fn = new.functions, old.functions
    out += _section("Functions added", [f"- `{new_fn[n].prototype}`" for n in c.functions_added])
    out += _section("Functions removed", [f"- `{old_fn[n].prototype}`" for n in c.functions_removed])
    out += _section("Functions changed", [f"- `{n}`\n  - old: `{old_fn[n].prototype}`\n  - new: `{new_fn[n].prototype}`"
                                          for n in c.functions_changed])
    out += _section("Functions newly deprecated", [f"- `{n}`" for n in c.newly_deprecated])
    out += _section("Functions no longer deprecated", [f"- `{n}`" for n in c.no_longer_deprecated])
    out += _section("Beta status changed", [f"- `{n}`: {'beta' if a else 'stable'} -> {'beta' if b else 'stable'}"
                                            for n, a, b in c.beta_changed])
    out += _section("Pointer kinds changed", [f"- `{f}.{p}`: {a or 'unclassified'} -> {b or 'unclassified'}"
                                              for f, p, a, b in c.kinds_changed])
    out += _section("Enums added", [f"- `{_enum_label(n)}` ({len(new.enums[n])} values)" for n in c.enums_added])
    out += _section("Enums removed", [f"- `{_enum_label(n)}` ({len(old.enums[n])} values)" for n in c.enums_removed])
    out += _section("Enum values added", [f"- `{_enum_label(e)}.{m}` = {v}" for e, m, v in c.values_added])
    out += _section("Enum values removed", [f"- `{_enum_label(e)}.{m}` (was {v}{_same_value(c, e, v)})"
                                            for e, m, v in c.values_removed])
    out += _section("Enum values renumbered", [f"- `{_enum_label(e)}.{m}`: {a} -> {b}"
                                               for e, m, a, b in c.values_renumbered])
    out += _section("Macros added", [f"- `{m}` = {_value(new.macros[m])}" for m in c.macros_added])
    out += _section("Macros removed", [f"- `{m}` (was {_value(old.macros[m])})" for m in c.macros_removed])
    out += _section("Macros changed", [f"- `{m}`: {_value(old.macros[m])} -> {_value(new.macros[m])}"
                                       for m in c.macros_changed])
    out += _section("Structs and unions added", [f"- `{n}` (size {new.structs[n].size})" for n in c.structs_added])
    out += _section("Structs and unions removed", [f"- `{n}` (size {old.structs[n].size})" for n in c.structs_removed])
    out += _section("Struct layouts changed", [f"- `{n}`: " + "; ".join(d) for n, d in c.structs_changed])
    out += _section("Opaque handles added", [f"- `{n}`" for n in c.handles_added])
    out += _section("Opaque handles removed", [f"- `{n}`" for n in c.handles_removed])
    out += _section("Callbacks added", [f"- `{n} = {new.callbacks[n]}`" for n in c.callbacks_added])
    out += _section("Callbacks removed", [f"- `{n}`" for n in c.callbacks_removed])
    out += _section("Callbacks changed", [f"- `{n}`: `{old.callbacks[n]}` -> `{new.callbacks[n]}`"
                                          for n in c.callbacks_changed])
    out += _section("pointer_overrides.json problems with the NEW headers (fix before generating)",
                    _problem_lines(new))
    newly_unused = sorted(set(new.unused_rules) - set(old.unused_rules))
    out += _section("Override rules that match nothing in the new headers (but did in the old)",
                    [f"- `{r}`" for r in newly_unused])
    out += _section("pointer_overrides.json problems with the OLD headers (for information)", _problem_lines(old))
    return "\n".join(out).rstrip() + "\n"


# --------------------------------------------------------------------------------- counts and make generate

def counts(api: Api) -> dict[str, int]:
    """The report's counts for one side (functions, enums, records, macros, pointer kinds, problems)."""
    kinds = [k for f in api.functions.values() for _, k in f.kinds]
    return {"functions": len(api.functions),
            "deprecated": sum(f.deprecated for f in api.functions.values()),
            "beta": sum(f.beta for f in api.functions.values()),
            "enums": len([e for e in api.enums if e]), "enum values": sum(len(v) for v in api.enums.values()),
            "structs": len(api.structs), "handles": len(api.handles), "callbacks": len(api.callbacks),
            "macros": len(api.macros), "device": kinds.count("device"), "host": kinds.count("host"),
            "either": kinds.count("either"), "unclassified": kinds.count(""),
            "override problems": len(api.problems)}


def counts_table(old: Api, new: Api) -> str:
    """Both sides' counts as a Markdown table."""
    a, b = counts(old), counts(new)
    rows = [f"| {k} | {a[k]} | {b[k]} |" for k in a]
    return "\n".join([f"| count | {old.version} | {new.version} |", "|---|---:|---:|", *rows])


def generation_changes(old_text: str, result: "pipeline.Result") -> str:
    """``make generate``'s "what changed": the committed module's API (read back from its text) against
    the new generation's IR; the line-level summary when the committed text cannot be read back."""
    if old_text == result.text:
        return "no change against the committed module"
    new = api_of_ir(result.module, result.classification)
    try:
        old = api_of_text(old_text, result.library)
    except Exception as exc:                          # an empty, foreign or hand-edited module
        return (pipeline.describe_changes(old_text, result.text)
                + f"\n(the committed module could not be read back for an API diff: {type(exc).__name__}: {exc})")
    changes = compare(old, new)
    lines = pipeline.describe_changes(old_text, result.text).splitlines()[-1]
    if changes.empty:
        return f"API unchanged against the committed module (generated text differs: {lines})"
    return markdown(changes, "committed module", "new generation") + f"\n{lines}"
