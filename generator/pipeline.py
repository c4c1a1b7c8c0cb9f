"""The steps of one generation, shared by the command line, `make generate`/`check-generated` and tests."""
from __future__ import annotations

import difflib
from collections import Counter
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from generator import backend, classify, config as cfg, ir, parse, render


@dataclass
class Result:
    library: str
    config: dict[str, Any]
    module: ir.Module
    classification: classify.Classification
    text: str
    stub: str
    extra: dict[Path, str] = field(default_factory=dict)   # further generated modules (typed backend descriptors)

    @property
    def path(self) -> Path:
        return cfg.REPO_ROOT / self.config["module"]

    @property
    def stub_path(self) -> Path:
        return self.path.with_suffix(".pyi")

    def outputs(self) -> dict[Path, str]:
        """Every file one generation writes: the module and its type stub."""
        return {self.path: self.text, self.stub_path: self.stub, **self.extra}


def build(library: str, headers_dir: Path | None = None) -> Result:
    """Parse, classify and render one library; nothing is written."""
    config = cfg.load_all()[library]
    headers = cfg.header_set(library, config, headers_dir)
    module = parse.parse(headers, config)
    overrides = cfg.load_overrides(library)
    classification = classify.classify(module, overrides, strict=False)    # every problem, in one run
    problems = list(classification.problems)
    model = backend.build(module, overrides, problems, cfg.sonames(config))
    config_problems = cfg.function_problems(library, config, {f.name for f in module.functions})
    if problems or config_problems:
        files = " and ".join(["headers.json"] * bool(config_problems) + ["pointer_overrides.json"] * bool(problems))
        summary = f"{len(problems) + len(config_problems)} problem(s) in {files} for {library}:"
        raise classify.ClassificationError("\n".join([summary] + [f"  {p}" for p in config_problems + problems]),
                                           library, tuple(problems), tuple(config_problems))
    text = render.render(module, classification, config)
    stub = render.render_stub(module, classification, config)
    extra = {}
    if model is not None:
        extra[cfg.REPO_ROOT / config["backend_module"]] = render.render_backend(module, model, config)
    return Result(library, config, module, classification, text, stub, extra)


_PROTOTYPE = re.compile(r'^def (\w+)\(.*\):\n    """(.*)$', re.M)


def prototypes(text: str) -> dict[str, str]:
    """Function name -> C prototype, read back from a generated module's docstrings."""
    return {m.group(1): m.group(2) for m in _PROTOTYPE.finditer(text)}


def header_version_of(text: str) -> str | None:
    m = re.search(r"^HEADER_VERSION = '([^']*)'", text, re.M)
    return m.group(1) if m else None


_MAX_LISTED = 40


def describe_changes(old: str, new: str) -> str:
    """Functions added, removed and changed between two generated modules."""
    if old == new:
        return "no change against the committed module"
    before, after = prototypes(old), prototypes(new)
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(n for n in set(before) & set(after) if before[n] != after[n])
    lines = [f"header version: {header_version_of(old)} -> {header_version_of(new)}",
             f"functions added: {len(added)}, removed: {len(removed)}, changed: {len(changed)}"]
    shown = 0
    for mark, names, table in (("+", added, after), ("-", removed, before)):
        for n in names:
            if shown < _MAX_LISTED:
                lines.append(f"  {mark} {table[n]}")
            shown += 1
    for n in changed:
        if shown < _MAX_LISTED:
            lines += [f"  ~ {before[n]}", f"    -> {after[n]}"]
        shown += 1
    if shown > _MAX_LISTED:
        lines.append(f"  ... and {shown - _MAX_LISTED} more")
    diff = sum(1 for line in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---")))
    lines.append(f"{diff} line(s) differ in total")
    return "\n".join(lines)


def write(result: Result) -> str:
    old = result.path.read_text() if result.path.exists() else ""
    for path, text in result.outputs().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    from generator import diff                      # diff imports this module
    return diff.generation_changes(old, result)


def header_move_note(library: str) -> str | None:
    """When `make headers` could not get the pinned headers (Debian moved on), what it took instead."""
    config = cfg.load_all()[library]
    if config.get("source") != "debian":
        return None
    from generator import debian
    manifest = debian.load_manifest(config, cfg.CACHE_DIR)
    moved = debian.moves(manifest, role="header") if manifest else []
    return "; ".join(moved) or None


def check(library: str, headers_dir: Path | None = None) -> int:
    """0 when the committed module equals a fresh generation; 1 (with the changes) otherwise.

    When the pinned headers are no longer obtainable and another version was taken, a difference is
    reported as "header moved" and does not fail: the fix is a maintainer's regeneration.
    """
    result = build(library, headers_dir)
    committed = result.path.read_text() if result.path.exists() else ""
    stale_stub = any(not path.exists() or path.read_text() != text
                     for path, text in result.outputs().items() if path != result.path)
    if committed == result.text and not stale_stub:
        print(f"{library}: {result.config['module']} is fresh ({result.module.title} {result.module.version})")
        return 0
    old_version = header_version_of(committed)
    if old_version != result.module.version and header_move_note(library):
        print(f"{library}: header moved from {old_version} to {result.module.version}: run make generate "
              f"({header_move_note(library)})")
        return 0
    print(f"{library}: {result.config['module']} (or its .pyi stub, or {result.config.get('backend_module', 'none')}) "
          f"is STALE; run `make generate`.\n"
          + describe_changes(committed, result.text))
    return 1


def checks_report(c: classify.Classification) -> list[str]:
    """What the wrappers check before each call: integers, output pointers, array lengths, destroyed handles."""
    params = [(fn, p) for fn in c.functions for p in fn.params]
    integers = sum(1 for _, p in params if p.type.kind in ("int", "enum") or p.byte_size)
    enums = sum(1 for _, p in params if p.type.kind == "enum")
    outputs = [p for _, p in params if p.length is not None and p.type.pointee is not None and not p.type.pointee.const]
    sources = Counter(p.length.kind for _, p in params if p.length is not None)
    unchecked = [(fn, p) for fn, p in params if p.length is not None and p.length.kind == "unchecked"]
    destroyers = sum(1 for fn in c.functions if classify.destroyed_handle(fn))
    required = sum(len(classify.required_handles(fn)) for fn in c.functions)
    lines = [f"  integer parameters range-checked: {integers} (of which enums, class-checked too: {enums})",
             f"  output pointers: {len(outputs)}: nullable {sum(p.nullable for p in outputs)}, "
             f"refuse None {sum(not p.nullable for p in outputs)}",
             "  host arrays and buffers by length source: "
             + ", ".join(f"{kind} {sources[kind]}" for kind in ("fixed", "count", "sized", "query", "unchecked")),
             f"  destroy functions that clear their handle: {destroyers}",
             f"  handles passed by value: refused when None {required}, documented optional {c.optional_handles}",
             f"  unchecked arrays: {len(unchecked)}"]
    lines += [f"    {fn.name}.{p.name}: {p.length.reason}" for fn, p in unchecked if p.length is not None]
    lines.append("  length and nullable rules:")
    lines += [f"    {rule:<40} {count}" for rule, count in sorted(c.per_rule.items(), key=lambda kv: (-kv[1], kv[0]))
              if rule.startswith(("length:", "nullable:"))]
    return lines


def skipped_macros_line(m: ir.Module) -> str:
    """The headers' macros the module leaves out (function-like, comparisons, strings: no constant value), named so
    that a maintainer reviewing a header update sees them."""
    names = sorted(m.skipped_macros)
    return f"  macros not generated (no constant value): {len(names)}" + (f": {', '.join(names)}" if names else "")


def report_text(result: Result) -> str:
    m, c = result.module, result.classification
    lines = [f"{m.title} {m.version} ({result.config['entry']})",
             f"  functions:   {len(m.functions)} ({sum(f.deprecated for f in m.functions)} deprecated, "
             f"{sum(f.beta for f in m.functions)} beta)",
             f"  enums:       {len(m.enums)} ({sum(len(e.members) for e in m.enums)} values)",
             f"  structs:     {len(m.structs)}",
             f"  handles:     {len(m.handles)}",
             f"  callbacks:   {len(m.callbacks)}",
             f"  macros:      {len(m.macros)}",
             skipped_macros_line(m),
             f"  byte sizes:  {c.byte_sizes} marked, all 64-bit",
             "  pointer parameters by kind: " + ", ".join(f"{k} {c.per_kind[k]}" for k in classify.KINDS),
             "  by rule:"]
    lines += [f"    {rule:<40} {count}" for rule, count in sorted(c.per_rule.items(), key=lambda kv: (-kv[1], kv[0]))
              if ":" not in rule or rule.startswith("exception:")]
    unclassified = [p for p in c.problems if p.startswith(("unclassified", "no length source", "output pointer not"))]
    lines += checks_report(c)
    lines.append(f"  unclassified: {len(unclassified)}")
    if c.problems:                                  # only a non-strict classification gets here
        lines.append(f"  pointer_overrides.json problems: {len(c.problems)}")
        lines += [f"    {p}" for p in c.problems]
    if c.unused_rules:
        lines.append("  rules that matched nothing: " + ", ".join(c.unused_rules))
    return "\n".join(lines)
