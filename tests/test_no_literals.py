"""No mode, timing or status spelled as a string literal in cpbench's code (#48): every comparison, argument,
dict key or value, default and return value names the member (``Status.OK``, ``Timing.EAGER``,
``Mode.FUSED``), so a renamed or misspelt value fails where it is used. ``domain/modes.py`` defines them.

Every module under ``src/cpbench`` is parsed with :mod:`ast`; a string constant equal to an enum value fails
the test unless it is a docstring (or another bare string statement), literal text of an f-string, or on a line
of :data:`ALLOWED`. Prose (help text, messages) may use the words: it never *equals* one of them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from cpbench.domain.modes import Mode, Status, Timing

pytestmark = pytest.mark.quick

SRC = Path(__file__).resolve().parents[1] / "src"
DEFINED_IN = "cpbench/domain/modes.py"
VALUES = {m.value: f"{type(m).__name__}.{m.name}" for enum in (Mode, Timing, Status) for m in enum}

# (module, the line's text, stripped): literals that are not the enum's value, though spelled the same
ALLOWED = {
    # fault injection's fault names (CPBENCH_INJECT_FAULT=<rank>:oom): the fault raises an OOM, it is no status
    ("cpbench/ranks/faults.py", 'FAULTS = ("raise", "oom", "exit", "stop")'),
    ("cpbench/ranks/faults.py", 'if fault == "oom":'),
}


def enum_literals(source: str) -> list[tuple[int, str]]:
    """``(line, value)`` of every string constant in ``source`` equal to a Mode, Timing or Status value and
    used as a value: not a docstring or other bare string statement, not literal text of an f-string
    (an expression inside ``{}`` is code and counts)."""
    tree = ast.parse(source)
    exempt: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):  # docstrings
            exempt.add(id(node.value))
        elif isinstance(node, ast.JoinedStr):  # the f-string's own text, not its expressions
            exempt.update(id(v) for v in node.values if isinstance(v, ast.Constant))
        elif isinstance(node, ast.FormattedValue) and node.format_spec is not None:
            exempt.update(id(v) for v in ast.walk(node.format_spec))
    return sorted((node.lineno, node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in VALUES
                  and id(node) not in exempt)


def _modules() -> list[tuple[str, str]]:
    return [(p.relative_to(SRC).as_posix(), p.read_text(encoding="utf-8")) for p in sorted(SRC.rglob("*.py"))
            if p.relative_to(SRC).as_posix() != DEFINED_IN]


def test_the_finder_sees_values_in_code_and_not_in_prose():
    code = '''
def f(row, timing="eager"):
    """Rows whose status is "ok"."""
    "ok"
    if row["status"] == "ok" and row["mode"] in ("fused", "two-call"):
        return {"cp-native": 1}
    mark(status="oom", text=f"{row['status']} not ok", other=f"{pick('graph')}")
    return "breakable", "error ok", f"{timing:>8}"
'''
    assert enum_literals(code) == [(2, "eager"), (5, "fused"), (5, "ok"), (5, "two-call"), (6, "cp-native"),
                                   (7, "graph"), (7, "oom"), (8, "breakable")]


def test_no_mode_timing_or_status_literal_outside_the_enums():
    found, used = [], set()
    for name, text in _modules():
        lines = text.splitlines()
        for lineno, value in enum_literals(text):
            line = lines[lineno - 1].strip()
            if (name, line) in ALLOWED:
                used.add((name, line))
            else:
                found.append(f"{name}:{lineno}: {value!r} (use {VALUES[value]}): {line}")
    assert not found, "string literals of enum values (name the member):\n" + "\n".join(found)
    assert used == ALLOWED, f"allow-list entries that match nothing any more: {sorted(ALLOWED - used)}"


def test_the_schema_allows_exactly_the_status_values():
    from cpbench.results.schema import STATUSES

    assert STATUSES == tuple(s.value for s in Status) and all(type(s) is str for s in STATUSES)
    assert Status.OK == "ok" and f"{Status.OOM}" == "oom" and Status("mismatch") is Status.MISMATCH
